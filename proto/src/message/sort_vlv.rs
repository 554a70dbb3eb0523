//! The values of the server-side sort controls (RFC 2891) and the Virtual List View
//! controls (draft-ietf-ldapext-ldapv3-vlv-09). Decoded with the same rules as the
//! LDAPMessage around them (`codec.rs`): primitive OCTET STRINGs only, definite lengths, nothing after the value.
//! Both modules have IMPLICIT TAGS.

use rasn::{AsnType, Decode, Decoder, Encode, Encoder};

use super::OctetString;

/// RFC 2891 §1: the sort request control.
pub const SORT_REQUEST_OID: &str = "1.2.840.113556.1.4.473";
/// RFC 2891 §1.2: the sort response control.
pub const SORT_RESPONSE_OID: &str = "1.2.840.113556.1.4.474";
/// draft-ietf-ldapext-ldapv3-vlv-09 §6.1: the VLV request control.
pub const VLV_REQUEST_OID: &str = "2.16.840.1.113730.3.4.9";
/// draft-ietf-ldapext-ldapv3-vlv-09 §6.2: the VLV response control.
pub const VLV_RESPONSE_OID: &str = "2.16.840.1.113730.3.4.10";

/// RFC 2891 §1.1 `SortKeyList ::= SEQUENCE OF SEQUENCE { attributeType
/// AttributeDescription, orderingRule [0] MatchingRuleId OPTIONAL, reverseOrder [1] BOOLEAN
/// DEFAULT FALSE }`.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct SortKeyItem {
    pub attribute_type: OctetString,
    #[rasn(tag(context, 0))]
    pub ordering_rule: Option<OctetString>,
    #[rasn(tag(context, 1), default)]
    pub reverse_order: bool,
}

/// VLV request `byOffset [0] SEQUENCE { offset INTEGER (0 .. maxInt), contentCount INTEGER
/// (0 .. maxInt) }`.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct ByOffset {
    pub offset: i64,
    pub content_count: i64,
}

/// The VLV request's `target` CHOICE.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
#[rasn(choice)]
pub enum VlvTarget {
    #[rasn(tag(context, 0))]
    ByOffset(ByOffset),
    #[rasn(tag(context, 1))]
    GreaterThanOrEqual(OctetString),
}

/// `VirtualListViewRequest ::= SEQUENCE { beforeCount INTEGER (0..maxInt), afterCount
/// INTEGER (0..maxInt), target CHOICE {...}, contextID OCTET STRING OPTIONAL }`.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct VlvRequest {
    pub before_count: i64,
    pub after_count: i64,
    pub target: VlvTarget,
    pub context_id: Option<OctetString>,
}

use super::codec::decode_whole;

/// Decodes a sort request control's value.
pub fn decode_sort_keys(bytes: &[u8]) -> Result<Vec<SortKeyItem>, String> {
    decode_whole(bytes)
}

impl VlvRequest {
    pub fn decode_value(bytes: &[u8]) -> Result<Self, String> {
        decode_whole(bytes)
    }
}

/// `SortResult ::= SEQUENCE { sortResult ENUMERATED, attributeType [0]
/// AttributeDescription OPTIONAL }`, without the attribute (slapd sends none).
pub fn encode_sort_result(code: u32) -> Vec<u8> {
    tlv(0x30, &enumerated(code))
}

/// `VirtualListViewResponse ::= SEQUENCE { targetPosition INTEGER (0 .. maxInt),
/// contentCount INTEGER (0 .. maxInt), virtualListViewResult ENUMERATED, contextID OCTET
/// STRING OPTIONAL }`.
pub fn encode_vlv_response(
    target_position: u32,
    content_count: u32,
    result: u32,
    context: Option<&[u8]>,
) -> Vec<u8> {
    let mut body = integer(i64::from(target_position));
    body.extend(integer(i64::from(content_count)));
    body.extend(enumerated(result));
    if let Some(context) = context {
        body.extend(tlv(0x04, context));
    }
    tlv(0x30, &body)
}

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(content);
    out
}

/// The minimal two's-complement content of an INTEGER.
fn int_content(value: i64) -> Vec<u8> {
    let mut bytes = value.to_be_bytes().to_vec();
    // Drop a leading octet while the next one carries the same sign.
    while let [first, next, ..] = bytes[..] {
        if (first == 0 && next & 0x80 == 0) || (first == 0xff && next & 0x80 != 0) {
            bytes.remove(0);
        } else {
            break;
        }
    }
    bytes
}

fn integer(value: i64) -> Vec<u8> {
    tlv(0x02, &int_content(value))
}

fn enumerated(value: u32) -> Vec<u8> {
    tlv(0x0a, &int_content(i64::from(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_ldapsearch_sends() {
        // ldapsearch -E sss=sn:2.5.13.3/-cn
        let bytes = [
            0x30, 0x16, 0x30, 0x0b, 0x04, 0x02, b's', b'n', 0x80, 0x05, b'2', b'.', b'5', b'.', b'3', 0x30,
            0x07, 0x04, 0x02, b'c', b'n', 0x81, 0x01, 0xff,
        ];
        let keys = decode_sort_keys(&bytes).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].attribute_type.as_ref(), b"sn");
        assert_eq!(keys[0].ordering_rule.as_deref(), Some(&b"2.5.3"[..]));
        assert!(!keys[0].reverse_order);
        assert!(keys[1].reverse_order && keys[1].ordering_rule.is_none());
        // ldapsearch -E vlv=1/2/3/4 and -E vlv=0/1:abc
        let by_offset = [0x30, 0x0e, 0x02, 0x01, 1, 0x02, 0x01, 2, 0xa0, 0x06, 0x02, 0x01, 3, 0x02, 0x01, 4];
        let vlv = VlvRequest::decode_value(&by_offset).unwrap();
        assert_eq!((vlv.before_count, vlv.after_count), (1, 2));
        assert_eq!(vlv.target, VlvTarget::ByOffset(ByOffset { offset: 3, content_count: 4 }));
        let by_value = [0x30, 0x0d, 0x02, 0x01, 0, 0x02, 0x01, 1, 0x81, 0x03, b'a', b'b', b'c', 0x04, 0x00];
        let vlv = VlvRequest::decode_value(&by_value).unwrap();
        assert_eq!(vlv.target, VlvTarget::GreaterThanOrEqual(OctetString::from_static(b"abc")));
        assert_eq!(vlv.context_id.as_deref(), Some(&b""[..]));
        assert!(VlvRequest::decode_value(&by_offset[..by_offset.len() - 1]).is_err());
    }

    #[test]
    fn encodes_the_responses() {
        assert_eq!(encode_sort_result(11), [0x30, 0x03, 0x0a, 0x01, 11]);
        assert_eq!(
            encode_vlv_response(200, 128, 0, Some(b"ab")),
            [
                0x30, 0x0f, 0x02, 0x02, 0x00, 0xc8, 0x02, 0x02, 0x00, 0x80, 0x0a, 0x01, 0, 0x04, 0x02, b'a',
                b'b'
            ]
        );
    }
}
