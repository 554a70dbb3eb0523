//! RFC 4511 LDAPMessage (Appendix B ASN.1 module) as Rust types, BER via `rasn`.
//!
//! # Layout
//! - this file: [`LdapMessage`], [`Control`], the [`ProtocolOp`] CHOICE with every
//!   APPLICATION tag, and the error types.
//! - `codec.rs`: [`decode_message`] and [`encode_message`], which handle the outer SEQUENCE
//!   and the messageID by hand around `rasn`.
//! - `ops.rs`: the request and response bodies.
//! - `passwd_modify.rs`: the request and response values of RFC 3062's Password Modify.
//! - `sort_vlv.rs`: the values of the sort and VLV controls.
//! - `sync.rs`: RFC 4533's controls, Sync Info message and OpenLDAP's cookies.
//! - `boolean.rs`: the retry that reads a non-zero BOOLEAN octet as TRUE, as slapd does.
//! - `result.rs`: [`LdapResult`], the open [`ResultCode`](crate::ResultCode) codec, and the
//!   two responses that flatten an LDAPResult into themselves (`COMPONENTS OF`).
//!
//! Strings (LDAPString, LDAPDN, LDAPOID, AttributeDescription, AttributeValue, ...) are all
//! `OctetString` on the wire and stay so here: UTF-8 checks and DN parsing belong to the
//! layers that know which errors to answer with.
//!
//! Unknown trailing SEQUENCE components (RFC 4511 §4: "MUST ... ignore trailing SEQUENCE
//! components whose tags they do not recognize") are ignored after `controls` in
//! LDAPMessage; inside operations `rasn` refuses them, and the server answers with a Notice
//! of Disconnection, as slapd does for any decoding error.
//!
//! RFC 4511 §5.1 narrows BER: definite lengths only (checked by [`crate::frame`]), OCTET
//! STRINGs in the primitive form only, and BOOLEAN TRUE as `FF`. `rasn`'s DER decoder
//! options enforce the last two for every string, whatever its tag; nothing else in them
//! differs from BER for the types LDAP uses (lengths may still be non-minimal). BOOLEANs are
//! taken as slapd takes them, any non-zero octet TRUE (`boolean.rs`).

mod boolean;
mod codec;
mod ops;
mod paged;
mod passwd_modify;
pub mod ppolicy;
mod result;
pub mod sort_vlv;
pub mod sync;
pub mod write_controls;

pub use crate::filter::AttributeValueAssertion;
pub use codec::{decode_message, encode_message, encode_message_into};
pub use ops::{
    AddRequest, AuthenticationChoice, BindRequest, Change, CompareRequest, DerefAliases, ExtendedRequest,
    IntermediateResponse, ModifyDnRequest, ModifyOperation, ModifyRequest, PartialAttribute, SaslCredentials,
    SearchRequest, SearchResultEntry, SearchScope,
};
pub use paged::{PagedResults, PAGED_RESULTS_OID};
pub use passwd_modify::{PasswdModifyRequest, PasswdModifyResponse, PASSWORD_MODIFY_OID};
pub use rasn::types::OctetString;
pub use result::{BindResponse, ExtendedResponse, LdapResult};

use rasn::{AsnType, Decode, Decoder, Encode, Encoder};

/// RFC 4511 §4.1.1 `maxInt`: messageIDs are `INTEGER (0..maxInt)`.
pub const MESSAGE_ID_MAX: u32 = 2_147_483_647;

/// RFC 4511 §4.1.1 `LDAPMessage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LdapMessage {
    pub message_id: u32,
    pub protocol_op: ProtocolOp,
    /// `[0] Controls OPTIONAL` (RFC 4511 §4.1.11). `Some(vec![])` encodes an empty `[0]`.
    pub controls: Option<Vec<Control>>,
}

/// RFC 4511 §4.1.11 `Control`. `criticality` is `DEFAULT FALSE` and is left out of the
/// encoding when false.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct Control {
    pub control_type: OctetString,
    #[rasn(default)]
    pub criticality: bool,
    pub control_value: Option<OctetString>,
}

/// RFC 4511 §4.2-§4.13: the `protocolOp` CHOICE. The APPLICATION tags are implicit
/// (the module has `IMPLICIT TAGS`), so e.g. DelRequest is a primitive `[APPLICATION 10]`
/// holding the DN octets and UnbindRequest is `[APPLICATION 2]` NULL (`42 00`).
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
#[rasn(choice)]
pub enum ProtocolOp {
    #[rasn(tag(application, 0))]
    BindRequest(BindRequest),
    #[rasn(tag(application, 1))]
    BindResponse(BindResponse),
    #[rasn(tag(application, 2))]
    UnbindRequest,
    #[rasn(tag(application, 3))]
    SearchRequest(SearchRequest),
    #[rasn(tag(application, 4))]
    SearchResultEntry(SearchResultEntry),
    #[rasn(tag(application, 5))]
    SearchResultDone(LdapResult),
    #[rasn(tag(application, 19))]
    SearchResultReference(Vec<OctetString>),
    #[rasn(tag(application, 6))]
    ModifyRequest(ModifyRequest),
    #[rasn(tag(application, 7))]
    ModifyResponse(LdapResult),
    #[rasn(tag(application, 8))]
    AddRequest(AddRequest),
    #[rasn(tag(application, 9))]
    AddResponse(LdapResult),
    #[rasn(tag(application, 10))]
    DelRequest(OctetString),
    #[rasn(tag(application, 11))]
    DelResponse(LdapResult),
    #[rasn(tag(application, 12))]
    ModifyDnRequest(ModifyDnRequest),
    #[rasn(tag(application, 13))]
    ModifyDnResponse(LdapResult),
    #[rasn(tag(application, 14))]
    CompareRequest(CompareRequest),
    #[rasn(tag(application, 15))]
    CompareResponse(LdapResult),
    /// The messageID of the operation to abandon (RFC 4511 §4.11).
    #[rasn(tag(application, 16))]
    AbandonRequest(u32),
    #[rasn(tag(application, 23))]
    ExtendedRequest(ExtendedRequest),
    #[rasn(tag(application, 24))]
    ExtendedResponse(ExtendedResponse),
    #[rasn(tag(application, 25))]
    IntermediateResponse(IntermediateResponse),
}

/// Why a whole PDU did not decode. `message_id` is `Some` whenever the messageID itself
/// decoded, so the server can answer the right operation (CONTRIBUTING.md, "Check, then
/// parse": decode the ID first).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode LDAPMessage (messageID {message_id:?}): {reason}")]
pub struct DecodeError {
    pub message_id: Option<u32>,
    pub fault: DecodeFault,
    pub reason: String,
}

/// What kind of fault stopped the decoding; it decides how the server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeFault {
    /// Not an LDAPMessage in the BER RFC 4511 allows (a constructed OCTET STRING, a missing
    /// component, a wrong tag, ...): RFC 4511 §4.1.1, Notice of Disconnection and close.
    Malformed,
    /// Well-formed BER whose operation holds an ENUMERATED value RFC 4511 does not define.
    /// slapd answers the operation itself with protocolError and keeps the connection.
    UnknownEnumerated(UnknownEnumerated),
}

/// Which ENUMERATED of a request held an undefined value (slapd's diagnostics in brackets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnknownEnumerated {
    /// SearchRequest `scope` above 3 ("invalid scope").
    SearchScope,
    /// SearchRequest `derefAliases` above 3 ("invalid deref").
    DerefAliases,
    /// ModifyRequest change `operation` above 3 ("unrecognized modify operation").
    ModifyOperation,
}

/// Why a message could not be encoded: a value outside what RFC 4511 allows (a messageID
/// above maxInt), or an error reported by `rasn`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode LDAPMessage: {reason}")]
pub struct EncodeError {
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{parse_filter, Filter};
    use crate::frame::{check_frame, FrameLimits};
    use crate::ResultCode;

    pub(super) fn os(s: &str) -> OctetString {
        OctetString::from(s.as_bytes())
    }

    pub(super) fn message(message_id: u32, protocol_op: ProtocolOp) -> LdapMessage {
        LdapMessage { message_id, protocol_op, controls: None }
    }

    /// Decodes `pdu` (after check_frame accepts it whole) and re-encodes it byte for byte.
    fn decode_exact(pdu: &[u8]) -> LdapMessage {
        assert_eq!(check_frame(pdu, &FrameLimits::default()), Ok(Some(pdu.len())));
        let decoded = decode_message(pdu).unwrap();
        assert_eq!(encode_message(&decoded).unwrap(), pdu, "{decoded:?}");
        decoded
    }

    pub(super) fn round_trip(msg: &LdapMessage) {
        let encoded = encode_message(msg).unwrap();
        assert_eq!(check_frame(&encoded, &FrameLimits::default()), Ok(Some(encoded.len())));
        assert_eq!(&decode_message(&encoded).unwrap(), msg);
    }

    #[test]
    fn anonymous_simple_bind() {
        let pdu = [0x30, 0x0c, 0x02, 0x01, 0x01, 0x60, 0x07, 0x02, 0x01, 0x03, 0x04, 0x00, 0x80, 0x00];
        let expected = message(
            1,
            ProtocolOp::BindRequest(BindRequest {
                version: 3,
                name: os(""),
                authentication: AuthenticationChoice::Simple(os("")),
            }),
        );
        assert_eq!(decode_exact(&pdu), expected);
    }

    #[test]
    fn search_request_as_ldapsearch_sends_it() {
        // ldapsearch -x -b dc=example,dc=com '(objectClass=*)' cn
        let pdu: &[u8] = b"\x30\x3a\x02\x01\x02\x63\x35\x04\x11dc=example,dc=com\x0a\x01\x02\x0a\x01\x00\
            \x02\x01\x00\x02\x01\x00\x01\x01\x00\x87\x0bobjectClass\x30\x04\x04\x02cn";
        let expected = message(
            2,
            ProtocolOp::SearchRequest(SearchRequest {
                base_object: os("dc=example,dc=com"),
                scope: SearchScope::WholeSubtree,
                deref_aliases: DerefAliases::NeverDerefAliases,
                size_limit: 0,
                time_limit: 0,
                types_only: false,
                filter: Filter::present("objectClass"),
                attributes: vec![os("cn")],
            }),
        );
        assert_eq!(decode_exact(pdu), expected);
    }

    #[test]
    fn search_result_done_and_unbind() {
        let done = [0x30, 0x0c, 0x02, 0x01, 0x02, 0x65, 0x07, 0x0a, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00];
        assert_eq!(decode_exact(&done), message(2, ProtocolOp::SearchResultDone(LdapResult::success())));
        let unbind = [0x30, 0x05, 0x02, 0x01, 0x03, 0x42, 0x00];
        assert_eq!(decode_exact(&unbind), message(3, ProtocolOp::UnbindRequest));
        let delete: &[u8] = b"\x30\x0a\x02\x01\x04\x4a\x05cn=ab";
        assert_eq!(decode_exact(delete), message(4, ProtocolOp::DelRequest(os("cn=ab"))));
        let abandon = [0x30, 0x06, 0x02, 0x01, 0x05, 0x50, 0x01, 0x04];
        assert_eq!(decode_exact(&abandon), message(5, ProtocolOp::AbandonRequest(4)));
    }

    #[test]
    fn notice_of_disconnection() {
        // RFC 4511 §4.4.1: messageID 0, ExtendedResponse, responseName 1.3.6.1.4.1.1466.20036.
        let pdu: &[u8] = b"\x30\x37\x02\x01\x00\x78\x32\x0a\x01\x02\x04\x00\x04\x13decoding error here\
            \x8a\x161.3.6.1.4.1.1466.20036";
        let expected = message(
            0,
            ProtocolOp::ExtendedResponse(ExtendedResponse {
                result: LdapResult::error(ResultCode::PROTOCOL_ERROR, "decoding error here"),
                response_name: Some(os("1.3.6.1.4.1.1466.20036")),
                response_value: None,
            }),
        );
        assert_eq!(decode_exact(pdu), expected);
    }

    #[test]
    fn controls_criticality_default_omitted() {
        // Paged results (critical, with value) and ManageDsaIT (not critical, no value).
        let pdu: &[u8] = b"\x30\x43\x02\x01\x07\x42\x00\xa0\x3c\
            \x30\x1f\x04\x161.2.840.113556.1.4.319\x01\x01\xff\x04\x02\x30\x00\
            \x30\x19\x04\x172.16.840.1.113730.3.4.2";
        let mut expected = message(7, ProtocolOp::UnbindRequest);
        expected.controls = Some(vec![
            Control {
                control_type: os("1.2.840.113556.1.4.319"),
                criticality: true,
                control_value: Some(os("\x30\x00")),
            },
            Control { control_type: os("2.16.840.1.113730.3.4.2"), criticality: false, control_value: None },
        ]);
        assert_eq!(decode_exact(pdu), expected);
        // An explicit FALSE from a peer is accepted too.
        let explicit: &[u8] = b"\x30\x0e\x02\x01\x07\x42\x00\xa0\x07\x30\x05\x04\x00\x01\x01\x00";
        let decoded = decode_message(explicit).unwrap();
        assert_eq!(
            decoded.controls,
            Some(vec![Control { control_type: os(""), criticality: false, control_value: None }])
        );
    }

    fn result(code: ResultCode) -> LdapResult {
        LdapResult::new(code, "dc=example", "why")
    }

    fn attribute(name: &str, vals: &[&str]) -> PartialAttribute {
        PartialAttribute { r#type: os(name), vals: vals.iter().map(|v| os(v)).collect() }
    }

    pub(super) fn every_protocol_op() -> Vec<ProtocolOp> {
        let ava = AttributeValueAssertion { attribute_desc: os("cn"), assertion_value: os("x") };
        let mut referral = result(ResultCode::REFERRAL);
        referral.referral = Some(vec![os("ldap://h/dc=x")]);
        vec![
            ProtocolOp::BindRequest(BindRequest {
                version: 3,
                name: os("cn=admin"),
                authentication: AuthenticationChoice::Sasl(SaslCredentials {
                    mechanism: os("PLAIN"),
                    credentials: Some(os("\0u\0p")),
                }),
            }),
            ProtocolOp::BindResponse(BindResponse {
                result: result(ResultCode::INVALID_CREDENTIALS),
                server_sasl_creds: Some(os("c")),
            }),
            ProtocolOp::UnbindRequest,
            ProtocolOp::SearchRequest(SearchRequest {
                base_object: os("o=x"),
                scope: SearchScope::SingleLevel,
                deref_aliases: DerefAliases::DerefAlways,
                size_limit: MESSAGE_ID_MAX,
                time_limit: 30,
                types_only: true,
                filter: parse_filter("(&(objectClass=Person)(|(sn=Jensen)(cn=Babs J*))(!(x:dn:1.2:=y)))")
                    .unwrap(),
                attributes: vec![os("cn"), os("*"), os("+")],
            }),
            ProtocolOp::SearchResultEntry(SearchResultEntry {
                object_name: os("cn=a,o=x"),
                attributes: vec![attribute("cn", &["a", "b"]), attribute("empty", &[])],
            }),
            ProtocolOp::SearchResultDone(referral),
            ProtocolOp::SearchResultReference(vec![os("ldap://a/"), os("ldap://b/")]),
            ProtocolOp::ModifyRequest(ModifyRequest {
                object: os("cn=a"),
                changes: vec![
                    Change { operation: ModifyOperation::Replace, modification: attribute("sn", &["z"]) },
                    Change { operation: ModifyOperation::Increment, modification: attribute("n", &["1"]) },
                ],
            }),
            ProtocolOp::ModifyResponse(result(ResultCode::NO_SUCH_ATTRIBUTE)),
            ProtocolOp::AddRequest(AddRequest {
                entry: os("cn=a"),
                attributes: vec![attribute("objectClass", &["top", "person"])],
            }),
            ProtocolOp::AddResponse(result(ResultCode::ENTRY_ALREADY_EXISTS)),
            ProtocolOp::DelRequest(os("cn=a")),
            ProtocolOp::DelResponse(result(ResultCode::NOT_ALLOWED_ON_NON_LEAF)),
            ProtocolOp::ModifyDnRequest(ModifyDnRequest {
                entry: os("cn=a"),
                newrdn: os("cn=b"),
                deleteoldrdn: false,
                new_superior: None,
            }),
            ProtocolOp::ModifyDnResponse(result(ResultCode::SUCCESS)),
            ProtocolOp::CompareRequest(CompareRequest { entry: os("cn=a"), ava }),
            ProtocolOp::CompareResponse(result(ResultCode::COMPARE_TRUE)),
            ProtocolOp::AbandonRequest(MESSAGE_ID_MAX),
            ProtocolOp::ExtendedRequest(ExtendedRequest {
                request_name: os("1.3.6.1.4.1.1466.20037"),
                request_value: None,
            }),
            ProtocolOp::ExtendedResponse(ExtendedResponse {
                result: result(ResultCode::CANCELED),
                response_name: None,
                response_value: Some(os("v")),
            }),
            ProtocolOp::IntermediateResponse(IntermediateResponse {
                response_name: Some(os("1.2")),
                response_value: None,
            }),
        ]
    }

    #[test]
    fn every_protocol_op_round_trips() {
        for (index, protocol_op) in every_protocol_op().into_iter().enumerate() {
            round_trip(&message(index as u32, protocol_op.clone()));
            let mut with_controls = message(MESSAGE_ID_MAX, protocol_op);
            with_controls.controls =
                Some(vec![Control { control_type: os("1.2.3"), criticality: true, control_value: None }]);
            round_trip(&with_controls);
        }
        round_trip(&LdapMessage {
            message_id: 200,
            protocol_op: ProtocolOp::UnbindRequest,
            controls: Some(vec![]),
        });
    }

    #[test]
    fn result_codes_past_rfc4511_round_trip() {
        for code in [118, 123, 4096, 0x7fff_ffff] {
            let msg = message(9, ProtocolOp::AddResponse(LdapResult::error(ResultCode(code), "")));
            round_trip(&msg);
        }
        let pdu = [0x30, 0x0d, 0x02, 0x01, 0x09, 0x69, 0x08, 0x0a, 0x02, 0x10, 0x00, 0x04, 0x00, 0x04, 0x00];
        assert_eq!(
            decode_exact(&pdu),
            message(9, ProtocolOp::AddResponse(LdapResult::error(ResultCode(4096), "")))
        );
    }

    #[test]
    fn value_order_kept_in_vals_and_filters() {
        let add = message(
            3,
            ProtocolOp::AddRequest(AddRequest {
                entry: os("cn=a"),
                attributes: vec![attribute("cn", &["z", "a", "m"])],
            }),
        );
        let encoded = encode_message(&add).unwrap();
        let vals: &[u8] = b"\x31\x09\x04\x01z\x04\x01a\x04\x01m";
        assert!(encoded.windows(vals.len()).any(|w| w == vals), "{encoded:02x?}");
        round_trip(&add);
        let filter = parse_filter("(&(z=1)(|(y=2)(b=3))(a=4))").unwrap();
        let search = message(
            4,
            ProtocolOp::SearchRequest(SearchRequest {
                base_object: os(""),
                scope: SearchScope::BaseObject,
                deref_aliases: DerefAliases::NeverDerefAliases,
                size_limit: 0,
                time_limit: 0,
                types_only: false,
                filter,
                attributes: vec![],
            }),
        );
        let encoded = encode_message(&search).unwrap();
        let names: Vec<u8> = encoded
            .windows(3)
            .filter(|w| w[0] == 0x04 && w[1] == 0x01 && w[2].is_ascii_lowercase())
            .map(|w| w[2])
            .collect();
        assert_eq!(names, b"zyba");
        round_trip(&search);
    }
}
