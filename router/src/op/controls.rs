//! Request controls (RFC 4511 §4.1.11). None is implemented yet, so a critical control is
//! refused with unavailableCriticalExtension and a non-critical one is ignored.

use ferrodir_proto::message::{Control, LdapResult};
use ferrodir_proto::ResultCode;

/// Controls this server honours; advertised in the rootDSE's supportedControl.
pub const SUPPORTED: &[&str] = &[];

/// The refusal to send if `controls` holds a critical control we don't support.
pub fn check(controls: Option<&[Control]>) -> Option<LdapResult> {
    let unsupported = controls?
        .iter()
        .find(|c| c.criticality && !SUPPORTED.iter().any(|oid| c.control_type.as_ref() == oid.as_bytes()))?;
    Some(LdapResult::new(
        ResultCode::UNAVAILABLE_CRITICAL_EXTENSION,
        String::new(),
        format!("critical control {} is not supported", String::from_utf8_lossy(&unsupported.control_type)),
    ))
}
