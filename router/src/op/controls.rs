//! Request controls (RFC 4511 §4.1.11). A critical control we don't support is refused with
//! unavailableCriticalExtension; a non-critical one is ignored.

use ferrodir_proto::message::{Control, LdapResult};
use ferrodir_proto::ResultCode;

/// ManageDsaIT (RFC 3296): treat referral objects as ordinary entries. This server holds
/// no referral objects, so every operation already behaves as the control asks.
pub const MANAGE_DSA_IT_OID: &str = "2.16.840.1.113730.3.4.2";

/// Controls this server honours; advertised in the rootDSE's supportedControl.
pub const SUPPORTED: &[&str] =
    &[MANAGE_DSA_IT_OID, crate::op::sort::SORT_REQUEST_OID, crate::op::sort::VLV_REQUEST_OID];

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

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::message::OctetString;

    fn control(oid: &str, critical: bool) -> Control {
        Control {
            control_type: OctetString::from(oid.as_bytes()),
            criticality: critical,
            control_value: None,
        }
    }

    #[test]
    fn only_unsupported_critical_controls_are_refused() {
        assert!(check(None).is_none());
        assert!(check(Some(&[control("1.2.3", false)])).is_none());
        assert!(check(Some(&[control(MANAGE_DSA_IT_OID, true)])).is_none());
        let refusal = check(Some(&[control("1.2.3", true)])).unwrap();
        assert_eq!(refusal.result_code, ferrodir_proto::ResultCode::UNAVAILABLE_CRITICAL_EXTENSION);
    }
}
