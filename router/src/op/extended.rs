//! Extended operations (RFC 4511 §4.12). Who am I? (RFC 4532) is answered here; anything
//! else is protocolError, as §4.12 requires for an unrecognised requestName.

use ferrodir_proto::message::{ExtendedRequest, ExtendedResponse, LdapResult, OctetString};
use ferrodir_proto::ResultCode;

use crate::session::OpContext;

pub const WHO_AM_I_OID: &str = "1.3.6.1.4.1.4203.1.11.3";

/// Extended operations advertised in the rootDSE.
pub const SUPPORTED: &[&str] = &[WHO_AM_I_OID];

pub async fn extended(ctx: &OpContext, request: ExtendedRequest) -> ExtendedResponse {
    if request.request_name.as_ref() == WHO_AM_I_OID.as_bytes() {
        return ExtendedResponse {
            result: LdapResult::success(),
            response_name: None,
            response_value: Some(OctetString::from(ctx.identity.authz_id().into_bytes())),
        };
    }
    ExtendedResponse {
        result: LdapResult::new(
            ResultCode::PROTOCOL_ERROR,
            String::new(),
            format!("unsupported extended operation {}", String::from_utf8_lossy(&request.request_name)),
        ),
        response_name: None,
        response_value: None,
    }
}
