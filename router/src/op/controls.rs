//! Request controls (RFC 4511 §4.1.11). A critical control we don't support is refused with
//! unavailableCriticalExtension; a non-critical one is ignored. A leaf (the OIDs come from
//! proto): the root DSE, cn=Monitor and the session read the list without importing the
//! operations that implement the controls.

use ferrodir_proto::message::ppolicy::PASSWORD_POLICY_OID;
use ferrodir_proto::message::sort_vlv::{SORT_REQUEST_OID, VLV_REQUEST_OID};
use ferrodir_proto::message::sync::SYNC_REQUEST_OID;
use ferrodir_proto::message::write_controls::{
    ASSERTION_OID, DONT_USE_COPY_OID, POST_READ_OID, PRE_READ_OID, RELAX_OID,
};
use ferrodir_proto::message::{Control, LdapResult, PAGED_RESULTS_OID};
use ferrodir_proto::ResultCode;

/// ManageDsaIT (RFC 3296): treat referral objects as ordinary entries. This server holds
/// no referral objects, so every operation already behaves as the control asks.
pub const MANAGE_DSA_IT_OID: &str = "2.16.840.1.113730.3.4.2";

/// RFC 5805 §2.2: the Transaction Specification control (`op::transaction`, which takes
/// its OID from here so that this module stays a leaf).
pub const TXN_SPEC_OID: &str = "1.3.6.1.1.21.2";

/// Controls this server honours; advertised in the rootDSE's supportedControl. The Password
/// Policy control is answered on Bind (`op::bind`); elsewhere it is accepted and, for now,
/// answered with nothing.
pub const SUPPORTED: &[&str] = &[
    MANAGE_DSA_IT_OID,
    PAGED_RESULTS_OID,
    SORT_REQUEST_OID,
    VLV_REQUEST_OID,
    SYNC_REQUEST_OID,
    PASSWORD_POLICY_OID,
    ASSERTION_OID,
    PRE_READ_OID,
    POST_READ_OID,
    RELAX_OID,
    DONT_USE_COPY_OID,
    crate::op::proxy_authz::PROXY_AUTHZ_OID,
    TXN_SPEC_OID,
];

/// Of those, the ones that only mean something on a search: critical on another operation,
/// they are refused like an unknown control (as slapd refuses them).
const SEARCH_ONLY: &[&str] = &[PAGED_RESULTS_OID, SORT_REQUEST_OID, VLV_REQUEST_OID, SYNC_REQUEST_OID];

/// And the ones that only mean something on a write (RFC 4527's reads, the relax rules):
/// critical on a Search, refused.
const WRITE_ONLY: &[&str] = &[PRE_READ_OID, POST_READ_OID, RELAX_OID];

/// Controls the session takes before any check (the transaction's, on an update: the
/// update is queued, `op::transaction`): on any other request, refused as unknown (slapd).
const SESSION_ONLY: &[&str] = &[TXN_SPEC_OID];

/// Controls that never apply to a Bind: critical there, refused as unknown (slapd).
const NOT_ON_BIND: &[&str] = &[crate::op::proxy_authz::PROXY_AUTHZ_OID];

/// [`check`] for a BindRequest.
pub fn check_bind(controls: Option<&[Control]>) -> Option<LdapResult> {
    let on_bind = controls?
        .iter()
        .find(|c| c.criticality && NOT_ON_BIND.iter().any(|oid| c.control_type.as_ref() == oid.as_bytes()));
    match on_bind {
        Some(control) => Some(LdapResult::new(
            ResultCode::UNAVAILABLE_CRITICAL_EXTENSION,
            String::new(),
            format!("critical control {} is not supported", String::from_utf8_lossy(&control.control_type)),
        )),
        None => check(controls, false),
    }
}

/// The refusal to send if `controls` holds a critical control we don't support on this
/// operation (`search`: whether it is a SearchRequest).
pub fn check(controls: Option<&[Control]>, search: bool) -> Option<LdapResult> {
    let named = |list: &[&str], c: &Control| list.iter().any(|oid| c.control_type.as_ref() == oid.as_bytes());
    let unsupported = controls?.iter().find(|c| {
        c.criticality
            && (!named(SUPPORTED, c)
                || named(SESSION_ONLY, c)
                || (!search && named(SEARCH_ONLY, c))
                || (search && named(WRITE_ONLY, c)))
    })?;
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
        assert!(check(None, true).is_none());
        assert!(check(Some(&[control("1.2.3", false)]), true).is_none());
        assert!(check(Some(&[control(MANAGE_DSA_IT_OID, true)]), false).is_none());
        assert!(check(Some(&[control(PAGED_RESULTS_OID, true)]), true).is_none());
        assert!(check(Some(&[control(PAGED_RESULTS_OID, false)]), false).is_none());
        assert!(check(Some(&[control(PAGED_RESULTS_OID, true)]), false).is_some());
        assert!(check(Some(&[control(TXN_SPEC_OID, true)]), false).is_some());
        assert!(check(Some(&[control(TXN_SPEC_OID, false)]), true).is_none());
        let refusal = check(Some(&[control("1.2.3", true)]), true).unwrap();
        assert_eq!(refusal.result_code, ferrodir_proto::ResultCode::UNAVAILABLE_CRITICAL_EXTENSION);
    }
}
