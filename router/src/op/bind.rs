//! Bind (RFC 4511 §4.2, RFC 4513 §5.1): anonymous, and simple binds as the configured rootDN
//! or as an entry holding userPassword. An unknown DN and a wrong password get the same
//! answer, so a client can't probe which DNs exist.

use ferrodir_proto::message::{AuthenticationChoice, BindRequest, BindResponse, LdapResult, ProtocolOp};
use ferrodir_proto::ResultCode;

use crate::access::Identity;
use crate::error::LdapError;
use crate::op::parse_dn;
use crate::password;
use crate::resolve::locate;
use crate::session::OpContext;

pub fn response(result: LdapResult) -> ProtocolOp {
    ProtocolOp::BindResponse(BindResponse { result, server_sasl_creds: None })
}

/// Runs the bind, answers it, and returns the connection's new identity (anonymous on any
/// failure, RFC 4511 §4.2.1).
pub async fn bind(ctx: &OpContext, request: BindRequest) -> Identity {
    let (result, identity) = match authenticate(ctx, request).await {
        Ok(identity) => (LdapResult::success(), identity),
        Err(e) => (e.to_result(), Identity::Anonymous),
    };
    ctx.respond(response(result)).await;
    identity
}

async fn authenticate(ctx: &OpContext, request: BindRequest) -> Result<Identity, LdapError> {
    if request.version != 3 {
        return Err(LdapError::protocol("only LDAPv3 is supported"));
    }
    let password = match request.authentication {
        AuthenticationChoice::Simple(password) => password,
        AuthenticationChoice::Sasl(_) => {
            return Err(LdapError::new(ResultCode::AUTH_METHOD_NOT_SUPPORTED, "SASL is not supported"))
        }
    };
    let invalid = || LdapError::new(ResultCode::INVALID_CREDENTIALS, "");
    match (request.name.is_empty(), password.is_empty()) {
        (true, true) => return Ok(Identity::Anonymous),
        (true, false) => return Err(invalid()),
        // RFC 4513 §5.1.2: an unauthenticated bind is refused.
        (false, true) => {
            return Err(LdapError::unwilling("unauthenticated bind (DN with no password) disallowed"))
        }
        (false, false) => {}
    }
    let dn = parse_dn(&request.name)?;
    let config = &ctx.worker.config;
    if config.is_root_dn(&dn) {
        let matches =
            config.root_password.as_ref().is_some_and(|p| password::verify(p.as_bytes(), &password));
        return if matches { Ok(Identity::Root(dn)) } else { Err(invalid()) };
    }
    let Ok(located) = locate(&ctx.worker, &dn).await else {
        return Err(invalid());
    };
    let record = ctx.worker.fetch(located.id).await?.ok_or_else(invalid)?;
    // slapd needs `auth` on the entry's userPassword to check it; a refusal reads like a
    // wrong password.
    if !crate::access::may_authenticate(config, &ctx.transport, &dn, &record.entry) {
        return Err(invalid());
    }
    let accepted = record
        .entry
        .get("userPassword")
        .is_some_and(|attr| attr.values.iter().any(|stored| password::verify(stored, &password)));
    if accepted {
        Ok(Identity::User(dn))
    } else {
        Err(invalid())
    }
}
