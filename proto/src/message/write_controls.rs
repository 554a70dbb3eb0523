//! The values of the controls slapd's clients send with writes and reads: the assertion
//! (RFC 4528), pre-read and post-read (RFC 4527), and the two that carry no value,
//! dontUseCopy (RFC 6171) and relax rules (OpenLDAP's draft-zeilenga-ldap-relax).

use super::ops::SearchResultEntry;
use super::OctetString;
use crate::filter::Filter;

/// RFC 4528 §3: the assertion control; its value is a Filter.
pub const ASSERTION_OID: &str = "1.3.6.1.1.12";
/// RFC 4527 §3.1: pre-read; the request's value an AttributeSelection, the response's a
/// SearchResultEntry of the entry as it was.
pub const PRE_READ_OID: &str = "1.3.6.1.1.13.1";
/// RFC 4527 §3.2: post-read, the entry as it is after the change.
pub const POST_READ_OID: &str = "1.3.6.1.1.13.2";
/// RFC 6171: read from the authoritative copy, never from a replica or a cache.
pub const DONT_USE_COPY_OID: &str = "1.3.6.1.1.22";
/// OpenLDAP's relax rules control (draft-zeilenga-ldap-relax): a write may set what the
/// schema marks NO-USER-MODIFICATION, for a migration.
pub const RELAX_OID: &str = "1.3.6.1.4.1.4203.666.5.12";

/// How deeply an assertion's filter may nest (the PDU's own bound, `frame`): the control
/// value is an OCTET STRING, which the frame check does not look into.
const ASSERTION_DEPTH_MAX: usize = 64;

/// An assertion control's value: exactly one Filter, nested no deeper than a search's may
/// be. (A malformed substring item evaluates to Undefined, as in a search.)
pub fn decode_assertion(bytes: &[u8]) -> Result<Filter, String> {
    crate::frame::check_nesting(bytes, ASSERTION_DEPTH_MAX).map_err(|e| e.to_string())?;
    super::codec::decode_whole(bytes)
}

/// A pre-read or post-read request's value: `AttributeSelection ::= SEQUENCE OF LDAPString`
/// (an absent value selects as an empty list does: every user attribute).
pub fn decode_attribute_selection(bytes: Option<&[u8]>) -> Result<Vec<OctetString>, String> {
    match bytes {
        None => Ok(Vec::new()),
        Some(bytes) => super::codec::decode_whole(bytes),
    }
}

/// A pre-read or post-read response's value: the entry as a `SearchResultEntry`, with its
/// [APPLICATION 4] tag (implicit: it replaces the SEQUENCE's, the length stays).
pub fn encode_read_entry(entry: &SearchResultEntry) -> Result<Vec<u8>, String> {
    let mut bytes = rasn::ber::encode(entry).map_err(|e| e.to_string())?;
    match bytes.first_mut() {
        Some(tag) if *tag == 0x30 => *tag = 0x64,
        _ => return Err("a SearchResultEntry that is not a SEQUENCE".into()),
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::PartialAttribute;

    #[test]
    fn an_assertion_decodes_and_a_deep_one_is_refused() {
        // ldapmodify -e assert='(sn=x)': [3] equalityMatch { "sn", "x" }.
        let filter = decode_assertion(&[0xa3, 0x07, 0x04, 0x02, b's', b'n', 0x04, 0x01, b'x']).unwrap();
        assert_eq!(filter, Filter::equality("sn", "x"));
        // 100 nested NOTs around a presence filter.
        let mut deep = vec![0x87, 0x02, b's', b'n'];
        for _ in 0..100 {
            let mut outer = vec![0xa2];
            let len = deep.len();
            if len < 128 {
                outer.push(len as u8);
            } else {
                outer.extend_from_slice(&[0x82, (len >> 8) as u8, len as u8]);
            }
            outer.extend(deep);
            deep = outer;
        }
        assert!(decode_assertion(&deep).is_err());
        assert!(decode_assertion(&[0xa3, 0x07, 0x04]).is_err());
    }

    #[test]
    fn selections_and_entries_round_trip() {
        let selection = [0x30, 0x04, 0x04, 0x02, b'c', b'n'];
        assert_eq!(
            decode_attribute_selection(Some(&selection)).unwrap(),
            vec![OctetString::from_static(b"cn")]
        );
        assert!(decode_attribute_selection(None).unwrap().is_empty());
        let entry = SearchResultEntry {
            object_name: OctetString::from_static(b"cn=a"),
            attributes: vec![PartialAttribute {
                r#type: OctetString::from_static(b"cn"),
                vals: vec![OctetString::from_static(b"a")],
            }],
        };
        let bytes = encode_read_entry(&entry).unwrap();
        assert_eq!(bytes.first(), Some(&0x64));
    }
}
