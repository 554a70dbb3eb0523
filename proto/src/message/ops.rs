//! The request and response bodies of RFC 4511 §4.2-§4.13 (those that are more than an
//! `LDAPResult`), as `rasn` types. Their APPLICATION tags are given once, on the variants of
//! [`super::ProtocolOp`], so each struct here encodes as a plain SEQUENCE on its own.
//!
//! SET OF is a `Vec` with the universal SET tag (17): `rasn`'s `SetOf` sorts on encode and
//! deduplicates on decode, but attribute values must come back in the order the client gave
//! them (RFC 4511 §4.1.7 leaves the order unspecified; clients still notice reorders).

use rasn::types::OctetString;
use rasn::{AsnType, Decode, Decoder, Encode};

use crate::filter::{AttributeValueAssertion, Filter};

/// RFC 4511 §4.2 `BindRequest`. `version` is `INTEGER (1..127)`; the range is checked by the
/// bind handler (it must answer protocolError, not drop the PDU), so any u8 decodes here.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct BindRequest {
    pub version: u8,
    pub name: OctetString,
    pub authentication: AuthenticationChoice,
}

/// RFC 4511 §4.2 `AuthenticationChoice`; tags 1 and 2 are reserved.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
#[rasn(choice)]
pub enum AuthenticationChoice {
    #[rasn(tag(context, 0))]
    Simple(OctetString),
    #[rasn(tag(context, 3))]
    Sasl(SaslCredentials),
}

/// RFC 4511 §4.2 `SaslCredentials`.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct SaslCredentials {
    pub mechanism: OctetString,
    pub credentials: Option<OctetString>,
}

/// RFC 4511 §4.5.1 `SearchRequest`. The limits are `INTEGER (0..maxInt)`; 0 means none.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct SearchRequest {
    pub base_object: OctetString,
    pub scope: SearchScope,
    pub deref_aliases: DerefAliases,
    pub size_limit: u32,
    pub time_limit: u32,
    pub types_only: bool,
    pub filter: Filter,
    /// `AttributeSelection`: a SEQUENCE OF, order as the client listed them.
    pub attributes: Vec<OctetString>,
}

/// RFC 4511 §4.5.1.2 `scope`, plus `subordinateSubtree` (3): every entry below the base,
/// not the base itself (draft-sermersheim-ldap-subordinate-scope; OpenLDAP's
/// `LDAP_SCOPE_SUBORDINATE`, `ldapsearch -s children`).
#[derive(AsnType, Encode, Decode, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[rasn(enumerated)]
pub enum SearchScope {
    BaseObject = 0,
    SingleLevel = 1,
    WholeSubtree = 2,
    SubordinateSubtree = 3,
}

/// RFC 4511 §4.5.1.3 `derefAliases`.
#[derive(AsnType, Encode, Decode, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[rasn(enumerated)]
pub enum DerefAliases {
    NeverDerefAliases = 0,
    DerefInSearching = 1,
    DerefFindingBaseObj = 2,
    DerefAlways = 3,
}

/// RFC 4511 §4.5.2 `SearchResultEntry`.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct SearchResultEntry {
    pub object_name: OctetString,
    pub attributes: Vec<PartialAttribute>,
}

/// RFC 4511 §4.1.7 `PartialAttribute`, also used as `Attribute` (AddRequest, where `vals`
/// must not be empty: the add handler checks that, as it must answer with a result code).
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct PartialAttribute {
    pub r#type: OctetString,
    /// `SET OF AttributeValue`, kept in the order given.
    #[rasn(tag(universal, 17))]
    pub vals: Vec<OctetString>,
}

/// RFC 4511 §4.6 `ModifyRequest`.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct ModifyRequest {
    pub object: OctetString,
    /// Applied in this order (RFC 4511 §4.6: "in the order listed").
    pub changes: Vec<Change>,
}

/// One element of `changes` in RFC 4511 §4.6.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub operation: ModifyOperation,
    pub modification: PartialAttribute,
}

/// RFC 4511 §4.6 `operation`, plus `increment` from RFC 4525 §2.
#[derive(AsnType, Encode, Decode, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[rasn(enumerated)]
pub enum ModifyOperation {
    Add = 0,
    Delete = 1,
    Replace = 2,
    Increment = 3,
}

/// RFC 4511 §4.7 `AddRequest`. `attributes` is `AttributeList`, a SEQUENCE OF (only each
/// attribute's `vals` is a SET OF).
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct AddRequest {
    pub entry: OctetString,
    pub attributes: Vec<PartialAttribute>,
}

/// RFC 4511 §4.9 `ModifyDNRequest`.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct ModifyDnRequest {
    pub entry: OctetString,
    pub newrdn: OctetString,
    pub deleteoldrdn: bool,
    #[rasn(tag(context, 0))]
    pub new_superior: Option<OctetString>,
}

/// RFC 4511 §4.10 `CompareRequest`.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct CompareRequest {
    pub entry: OctetString,
    pub ava: AttributeValueAssertion,
}

/// RFC 4511 §4.12 `ExtendedRequest`.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct ExtendedRequest {
    #[rasn(tag(context, 0))]
    pub request_name: OctetString,
    #[rasn(tag(context, 1))]
    pub request_value: Option<OctetString>,
}

/// RFC 4511 §4.13 `IntermediateResponse`.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct IntermediateResponse {
    #[rasn(tag(context, 0))]
    pub response_name: Option<OctetString>,
    #[rasn(tag(context, 1))]
    pub response_value: Option<OctetString>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> OctetString {
        OctetString::from(s.as_bytes())
    }

    #[test]
    fn attribute_values_keep_their_order() {
        let attribute = PartialAttribute { r#type: os("cn"), vals: vec![os("z"), os("a"), os("m"), os("a")] };
        let encoded = rasn::ber::encode(&attribute).unwrap();
        let expected = [
            0x30, 0x12, 0x04, 0x02, b'c', b'n', 0x31, 0x0c, 0x04, 0x01, b'z', 0x04, 0x01, b'a', 0x04, 0x01,
            b'm', 0x04, 0x01, b'a',
        ];
        assert_eq!(encoded, expected);
        assert_eq!(rasn::ber::decode::<PartialAttribute>(&encoded).unwrap(), attribute);
    }

    #[test]
    fn sasl_bind_request() {
        let request = BindRequest {
            version: 3,
            name: os(""),
            authentication: AuthenticationChoice::Sasl(SaslCredentials {
                mechanism: os("EXTERNAL"),
                credentials: None,
            }),
        };
        let encoded = rasn::ber::encode(&request).unwrap();
        let expected: &[u8] = b"\x30\x11\x02\x01\x03\x04\x00\xa3\x0a\x04\x08EXTERNAL";
        assert_eq!(encoded, expected);
        assert_eq!(rasn::ber::decode::<BindRequest>(&encoded).unwrap(), request);
    }

    #[test]
    fn enumerations_reject_unknown_values() {
        assert_eq!(
            rasn::ber::decode::<ModifyOperation>(&[0x0a, 0x01, 0x03]).unwrap(),
            ModifyOperation::Increment
        );
        assert!(rasn::ber::decode::<ModifyOperation>(&[0x0a, 0x01, 0x04]).is_err());
        assert_eq!(
            rasn::ber::decode::<SearchScope>(&[0x0a, 0x01, 0x03]).unwrap(),
            SearchScope::SubordinateSubtree
        );
        assert!(rasn::ber::decode::<SearchScope>(&[0x0a, 0x01, 0x04]).is_err());
        assert!(rasn::ber::decode::<DerefAliases>(&[0x0a, 0x01, 0x04]).is_err());
        assert_eq!(
            rasn::ber::decode::<DerefAliases>(&[0x0a, 0x01, 0x03]).unwrap(),
            DerefAliases::DerefAlways
        );
    }

    #[test]
    fn modify_dn_new_superior_is_context_0() {
        let request = ModifyDnRequest {
            entry: os("cn=a"),
            newrdn: os("cn=b"),
            deleteoldrdn: true,
            new_superior: Some(os("o=x")),
        };
        let encoded = rasn::ber::encode(&request).unwrap();
        let expected: &[u8] = b"\x30\x14\x04\x04cn=a\x04\x04cn=b\x01\x01\xff\x80\x03o=x";
        assert_eq!(encoded, expected);
        assert_eq!(rasn::ber::decode::<ModifyDnRequest>(&encoded).unwrap(), request);
    }
}
