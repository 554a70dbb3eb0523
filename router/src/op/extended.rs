//! Extended operations (RFC 4511 §4.12). Who am I? (RFC 4532) is answered here, Password
//! Modify (RFC 3062) in `passmod.rs`; anything else is protocolError, as §4.12 requires for
//! an unrecognised requestName.

use ferrodir_proto::message::{ExtendedRequest, ExtendedResponse, LdapResult, OctetString};
use ferrodir_proto::ResultCode;

use crate::config::DirectoryConfig;
use crate::op::context::OpContext;
use crate::op::passmod::{self, PASSWORD_MODIFY_OID};

/// RFC 4511 §4.14.1: the requestName (and responseName) of StartTLS.
pub const START_TLS_OID: &str = "1.3.6.1.4.1.1466.20037";

pub const WHO_AM_I_OID: &str = "1.3.6.1.4.1.4203.1.11.3";

/// Extended operations advertised in the rootDSE whatever the configuration.
pub const SUPPORTED: &[&str] = &[
    PASSWORD_MODIFY_OID,
    WHO_AM_I_OID,
    crate::op::cancel::CANCEL_OID,
    // RFC 5805, answered by the session (`op::transaction`).
    crate::op::transaction::START_OID,
    crate::op::transaction::END_OID,
];

/// Extended operations advertised in the rootDSE: [`SUPPORTED`], and StartTLS (handled by
/// the session, since it changes the connection) when a certificate is configured.
pub fn supported(config: &DirectoryConfig) -> Vec<&'static str> {
    let mut oids = SUPPORTED.to_vec();
    if config.tls_offered {
        oids.push(START_TLS_OID);
    }
    oids
}

/// Test-only (the `fault-injection` feature, never in a release binary): an extended
/// operation whose handling panics, to prove that a panic drops only its connection.
#[cfg(feature = "fault-injection")]
pub const PANIC_OID: &str = "1.3.6.1.4.1.99999.666.1";

pub async fn extended(ctx: &OpContext, request: ExtendedRequest) -> ExtendedResponse {
    #[cfg(feature = "fault-injection")]
    #[allow(clippy::panic)] // The test switch's whole point.
    if request.request_name.as_ref() == PANIC_OID.as_bytes() {
        panic!("fault injection: extended operation {PANIC_OID}");
    }
    if request.request_name.as_ref() == PASSWORD_MODIFY_OID.as_bytes() {
        return passmod::password_modify(ctx, request.request_value.as_deref()).await;
    }
    if request.request_name.as_ref() != WHO_AM_I_OID.as_bytes() {
        // slapd's words, without the OID: the client knows what it asked for.
        return refusal("unsupported extended operation");
    }
    // RFC 4532 §2: "The requestValue field is absent." slapd answers protocolError.
    if request.request_value.is_some() {
        return refusal("no request data expected");
    }
    ExtendedResponse {
        result: LdapResult::success(),
        response_name: None,
        response_value: Some(OctetString::from(
            ctx.identity.authz_id(&|oid| ctx.config.rules.get(oid).map(|r| r.display.clone())).into_bytes(),
        )),
    }
}

fn refusal(diagnostic: &str) -> ExtendedResponse {
    ExtendedResponse {
        result: LdapResult::error(ResultCode::PROTOCOL_ERROR, diagnostic),
        response_name: None,
        response_value: None,
    }
}
