//! Proxied authorization v2 (RFC 4370, 2.16.840.1.113730.3.4.18): a bound client asks that
//! one operation run as another identity. The control's value is an authzId: `dn:DN`,
//! `u:NAME`, or empty for anonymous. Whether the bound identity may act as that one is
//! `[sasl] authz_policy`'s rules' to say (crate::authz). Allowed, the operation runs as
//! the proxied identity from its first check to its answer: its access rules, its limits,
//! its Who am I?, the modifiersName it stamps; the access log and the audit log name both.
//!
//! Refusals, in slapd's words and codes: the control twice or without a value is
//! protocolError (2); an anonymous connection, an authzId that names no DN, or a target
//! the rules don't allow is authorizationDenied (123).

use ferrodir_proto::NormDn;
use ferrodir_proto::ResultCode;

use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::requester::Identity;

/// RFC 4370 §3.
pub const PROXY_AUTHZ_OID: &str = "2.16.840.1.113730.3.4.18";

/// The operation's context as the identity the control names; None when the request
/// carries no such control.
pub async fn assume(ctx: &OpContext) -> LdapResultOf<Option<OpContext>> {
    let oid = PROXY_AUTHZ_OID.as_bytes();
    let mut found = ctx.controls.iter().flatten().filter(|c| c.control_type.as_ref() == oid);
    let Some(control) = found.next() else { return Ok(None) };
    if found.next().is_some() {
        return Err(LdapError::protocol("proxy authorization control specified multiple times"));
    }
    let value = control
        .control_value
        .as_deref()
        .ok_or_else(|| LdapError::protocol("proxy authorization control value absent"))?;
    let authc = match &ctx.identity {
        Identity::Anonymous => return Err(denied("anonymous proxied authorization not allowed")),
        Identity::Root(dn) | Identity::User(dn) => NormDn::clone(dn.as_ref()),
    };
    let config = &ctx.config;
    let identity = if value.is_empty() {
        Identity::Anonymous
    } else {
        let dn = authz_dn(ctx, value).ok_or_else(|| denied("authzId mapping failed"))?;
        if !crate::authz::authorized(&ctx.worker, config, &authc, &dn).await {
            return Err(denied("not authorized to assume identity"));
        }
        match config.is_root_dn(&dn) {
            true => Identity::Root(dn.into()),
            false => Identity::User(dn.into()),
        }
    };
    let mut next = ctx.clone();
    next.proxied_by = Some(ctx.identity.clone());
    next.identity = identity;
    Ok(Some(next))
}

/// The DN an authzId names: `dn:DN`, or `u:NAME` mapped (crate::authz::user_dn).
fn authz_dn(ctx: &OpContext, value: &[u8]) -> Option<NormDn> {
    let text = std::str::from_utf8(value).ok()?;
    if let Some(dn) = text.strip_prefix("dn:") {
        return ctx.config.dn_rules().parse(dn).ok();
    }
    crate::authz::user_dn(&ctx.config, text.strip_prefix("u:")?)
}

fn denied(text: &str) -> LdapError {
    LdapError::new(ResultCode::AUTHORIZATION_DENIED, text)
}
