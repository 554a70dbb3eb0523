//! One file per LDAP operation, dispatched from [`run`].

pub mod add;
pub mod audit;
pub mod bind;
pub mod cancel;
pub mod compare;
pub mod context;
pub mod controls;
pub mod credentials;
pub mod delete;
pub(crate) mod dynlist;
pub mod extended;
pub mod memberof;
pub mod moddn;
pub mod modify;
pub mod paged;
pub mod passmod;
pub mod proxy_authz;
pub(crate) mod read;
pub mod rootdse;
pub mod sasl;
pub mod search;
pub mod sort;
pub mod stored_password;
pub mod syncrepl;
pub mod transaction;
pub(crate) mod unique;
pub mod write_controls;

use ferrodir_proto::message::{ExtendedResponse, LdapResult, ProtocolOp, UnknownEnumerated};
use ferrodir_proto::ResultCode;

use crate::error::LdapError;
use crate::op::context::OpContext;

/// Whether `op` is a request this server answers (other than Bind, Unbind and Abandon, which
/// the session handles itself).
pub fn is_request(op: &ProtocolOp) -> bool {
    matches!(
        op,
        ProtocolOp::SearchRequest(_)
            | ProtocolOp::ModifyRequest(_)
            | ProtocolOp::AddRequest(_)
            | ProtocolOp::DelRequest(_)
            | ProtocolOp::ModifyDnRequest(_)
            | ProtocolOp::CompareRequest(_)
            | ProtocolOp::ExtendedRequest(_)
    )
}

/// Runs one request to completion, sending its responses.
pub async fn run(ctx: &OpContext, op: ProtocolOp) {
    // Proxied authorization (RFC 4370): the operation runs as the identity it names.
    let proxied;
    let ctx = match proxy_authz::assume(ctx).await {
        Ok(None) => ctx,
        Ok(Some(next)) => {
            proxied = next;
            &proxied
        }
        Err(e) => {
            respond_error(ctx, &op, e.to_result()).await;
            return;
        }
    };
    if ctx.must_change.get() && !changes_own_password(ctx, &op) {
        restricted(ctx, &op).await;
        return;
    }
    match op {
        ProtocolOp::SearchRequest(req) => search::search(ctx, req).await,
        // Below `[limits] disk_free_min_bytes` of free space a client's write is refused
        // before anything else (`crate::disk`); the server's own writes through these
        // functions (a transaction's rollback) are not.
        ProtocolOp::AddRequest(req) => {
            let result = match ctx.config.disk.check() {
                Ok(()) => add::add(ctx, req).await,
                Err(refused) => Err(refused),
            };
            ctx.respond_with(ProtocolOp::AddResponse(finish(result)), ctx.write_response_controls()).await;
        }
        ProtocolOp::DelRequest(dn) => {
            let result = match ctx.config.disk.check() {
                Ok(()) => delete::delete(ctx, &dn).await,
                Err(refused) => Err(refused),
            };
            ctx.respond_with(ProtocolOp::DelResponse(finish(result)), ctx.write_response_controls()).await;
        }
        ProtocolOp::ModifyRequest(req) => {
            let result = match ctx.config.disk.check() {
                Ok(()) => modify::modify(ctx, req).await,
                Err(refused) => Err(refused),
            };
            ctx.respond_with(ProtocolOp::ModifyResponse(finish(result)), ctx.write_response_controls()).await;
        }
        ProtocolOp::ModifyDnRequest(req) => {
            let result = match ctx.config.disk.check() {
                Ok(()) => moddn::modify_dn(ctx, req).await,
                Err(refused) => Err(refused),
            };
            let controls = ctx.write_response_controls();
            ctx.respond_with(ProtocolOp::ModifyDnResponse(finish(result)), controls).await;
        }
        ProtocolOp::CompareRequest(req) => {
            let result = compare::compare(ctx, req).await;
            ctx.respond(ProtocolOp::CompareResponse(result)).await;
        }
        ProtocolOp::ExtendedRequest(req) => {
            let response = extended::extended(ctx, req).await;
            ctx.respond_with(ProtocolOp::ExtendedResponse(response), ctx.policy_controls()).await;
        }
        _ => {}
    }
}

/// Answers `op` with `result` (a refusal before it ran), using the matching response type.
pub async fn respond_error(ctx: &OpContext, op: &ProtocolOp, result: LdapResult) {
    let response = match op {
        ProtocolOp::SearchRequest(_) => ProtocolOp::SearchResultDone(result),
        ProtocolOp::ModifyRequest(_) => ProtocolOp::ModifyResponse(result),
        ProtocolOp::AddRequest(_) => ProtocolOp::AddResponse(result),
        ProtocolOp::DelRequest(_) => ProtocolOp::DelResponse(result),
        ProtocolOp::ModifyDnRequest(_) => ProtocolOp::ModifyDnResponse(result),
        ProtocolOp::CompareRequest(_) => ProtocolOp::CompareResponse(result),
        _ => ProtocolOp::ExtendedResponse(ExtendedResponse {
            result,
            response_name: None,
            response_value: None,
        }),
    };
    ctx.respond(response).await;
}

/// The answer to a search or modify whose ENUMERATED field (scope, derefAliases, modify
/// operation) held a value RFC 4511 does not define: protocolError with slapd's words, and
/// the connection stays open.
pub fn unknown_enumerated_response(field: UnknownEnumerated) -> Option<ProtocolOp> {
    let refusal = |diagnostic: &str| LdapResult::error(ResultCode::PROTOCOL_ERROR, diagnostic);
    match field {
        UnknownEnumerated::SearchScope => Some(ProtocolOp::SearchResultDone(refusal("invalid scope"))),
        UnknownEnumerated::DerefAliases => Some(ProtocolOp::SearchResultDone(refusal("invalid deref"))),
        UnknownEnumerated::ModifyOperation => {
            Some(ProtocolOp::ModifyResponse(refusal("unrecognized modify operation")))
        }
        _ => None,
    }
}

/// Whether `op` changes the bound entry's own password (a Modify of its userPassword only,
/// or a Password Modify): what a connection that must change its password may do.
fn changes_own_password(ctx: &OpContext, op: &ProtocolOp) -> bool {
    match op {
        ProtocolOp::ExtendedRequest(req) => {
            req.request_name.as_ref() == ferrodir_proto::message::PASSWORD_MODIFY_OID.as_bytes()
        }
        ProtocolOp::ModifyRequest(req) => {
            let crate::requester::Identity::User(me) = &ctx.identity else { return false };
            let own = parse_dn(&ctx.config, &req.object).is_ok_and(|dn| dn.same_entry(me));
            own && req.changes.iter().all(|c| {
                std::str::from_utf8(&c.modification.r#type)
                    .is_ok_and(|t| ferrodir_proto::entry::base_name_lower(t) == "userpassword")
            })
        }
        _ => false,
    }
}

/// The answer to any other request while the password must be changed first: 50, and the
/// Password Policy control's changeAfterReset to a client that asks.
async fn restricted(ctx: &OpContext, op: &ProtocolOp) {
    ctx.set_policy_error(ferrodir_proto::message::ppolicy::PolicyError::ChangeAfterReset);
    let result =
        LdapError::new(ResultCode::INSUFFICIENT_ACCESS_RIGHTS, crate::ppolicy::reset::RESTRICTED).to_result();
    let response = match op {
        ProtocolOp::SearchRequest(_) => ProtocolOp::SearchResultDone(result),
        ProtocolOp::AddRequest(_) => ProtocolOp::AddResponse(result),
        ProtocolOp::DelRequest(_) => ProtocolOp::DelResponse(result),
        ProtocolOp::ModifyRequest(_) => ProtocolOp::ModifyResponse(result),
        ProtocolOp::ModifyDnRequest(_) => ProtocolOp::ModifyDnResponse(result),
        ProtocolOp::CompareRequest(_) => ProtocolOp::CompareResponse(result),
        ProtocolOp::ExtendedRequest(_) => {
            ProtocolOp::ExtendedResponse(ferrodir_proto::message::ExtendedResponse {
                result,
                response_name: None,
                response_value: None,
            })
        }
        _ => return,
    };
    ctx.respond_with(response, ctx.policy_controls()).await;
}

fn finish(result: Result<(), LdapError>) -> LdapResult {
    match result {
        Ok(()) => LdapResult::success(),
        Err(e) => e.to_result(),
    }
}

/// UTF-8 text of an LDAPString, or protocolError (RFC 4511 §4.1.2).
pub fn text(bytes: &[u8]) -> Result<&str, LdapError> {
    std::str::from_utf8(bytes).map_err(|_| LdapError::protocol("LDAPString is not UTF-8"))
}

/// Refuses writes to what no naming context of ours holds: the root DSE, cn=Subschema, and
/// DNs outside every suffix (slapd: unwillingToPerform, "no global superior knowledge").
/// cn=Monitor is read-only (back-monitor: unwillingToPerform, in its words).
pub fn check_writable(
    config: &crate::config::DirectoryConfig,
    dn: &ferrodir_proto::NormDn,
) -> Result<(), LdapError> {
    if crate::monitor::is_monitor_dn(dn) {
        return Err(LdapError::unwilling("operation not supported within namingContext"));
    }
    if dn.is_root() || dn.is("cn=subschema") || config.suffix_of(dn).is_none() {
        return Err(LdapError::unwilling("no global superior knowledge"));
    }
    // A replica's replicated subtree takes writes from its provider only.
    if let Some(refusal) = config.replicated.iter().find_map(|area| area.refusal(dn)) {
        return Err(refusal);
    }
    Ok(())
}

/// Parses an LDAPDN and normalises it, once for the whole request, by the schema's rules
/// (`config.dn_rules()`): everything after takes the [`ferrodir_proto::NormDn`]. Every
/// failure (bad UTF-8 included, as slapd does) is invalidDNSyntax.
pub fn parse_dn(
    config: &crate::config::DirectoryConfig,
    bytes: &[u8],
) -> Result<ferrodir_proto::NormDn, LdapError> {
    let text = std::str::from_utf8(bytes).map_err(|_| LdapError::invalid_dn("not UTF-8"))?;
    // Spaces alone are no DN (RFC 4514 §3 has no room for them), not the empty one: slapd
    // answers invalidDNSyntax.
    if !text.is_empty() && text.bytes().all(|b| b == b' ') {
        return Err(LdapError::invalid_dn("only spaces"));
    }
    config.dn_rules().parse(text).map_err(LdapError::invalid_dn)
}
