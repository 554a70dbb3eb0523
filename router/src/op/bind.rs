//! Bind (RFC 4511 §4.2, RFC 4513 §5.1): anonymous, and simple binds as the configured rootDN
//! or as an entry holding userPassword. An unknown DN, an entry without userPassword and a
//! wrong password get the same answer, invalidCredentials with no diagnostic, after the
//! same work: the first two check the offered password against a dummy hash of the
//! configured scheme, so that the time taken doesn't tell which DNs exist either. Every
//! check runs on the hash pool (`password::pool`); when its queue is full, the bind gets
//! busy (51).

use ferrodir_proto::message::{AuthenticationChoice, BindRequest, BindResponse, LdapResult, ProtocolOp};
use ferrodir_proto::ResultCode;

use crate::error::LdapError;
use crate::op::context::OpContext;
use crate::op::{parse_dn, sasl};
use crate::requester::Identity;
use crate::resolve::locate;

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
        AuthenticationChoice::Sasl(credentials) => return sasl::authenticate(ctx, credentials).await,
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
    if !ctx.transport.password_allowed(ctx.worker.config.require_tls_for_binds) {
        return Err(LdapError::new(ResultCode::CONFIDENTIALITY_REQUIRED, "confidentiality required"));
    }
    let dn = parse_dn(&ctx.worker.config, &request.name)?;
    verify_password(ctx, dn, &password).await
}

/// The identity `dn` authenticates as with `password` (a simple bind, or SASL PLAIN once
/// its name is mapped to a DN): the rootDN against `root_password`, an entry against its
/// userPassword values. Every failure is the same invalidCredentials.
pub async fn verify_password(
    ctx: &OpContext,
    dn: ferrodir_proto::NormDn,
    password: &[u8],
) -> Result<Identity, LdapError> {
    let invalid = || LdapError::new(ResultCode::INVALID_CREDENTIALS, "");
    let config = &ctx.worker.config;
    let (stored, identity) = if config.is_root_dn(&dn) {
        let stored = config.root_password.iter().map(|p| p.as_bytes().to_vec()).collect();
        (stored, Identity::Root(dn.into()))
    } else {
        (stored_passwords(ctx, &dn).await?, Identity::User(dn.into()))
    };
    if config.passwords.check(stored, password.to_vec()).await? {
        Ok(identity)
    } else {
        Err(invalid())
    }
}

/// The userPassword values of the entry named `dn`; none when there is no such entry, or
/// when the access rules give no `auth` on them (slapd asks for it, as the still anonymous
/// connection): the bind then checks the dummy hash and fails like a wrong password, so
/// the rules can't be probed, by the answer or by its timing.
async fn stored_passwords(ctx: &OpContext, dn: &ferrodir_proto::NormDn) -> Result<Vec<Vec<u8>>, LdapError> {
    let Ok(located) = locate(&ctx.worker, dn).await else {
        return Ok(Vec::new());
    };
    let Some(record) = ctx.worker.fetch(located.id).await? else {
        return Ok(Vec::new());
    };
    if !crate::access::may_authenticate(&ctx.worker.config, &ctx.transport, dn, &record.entry) {
        return Ok(Vec::new());
    }
    Ok(record.entry.get("userPassword").map(|attr| attr.values.clone()).unwrap_or_default())
}
