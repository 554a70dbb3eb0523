//! The value of RFC 2696's Simple Paged Results control (1.2.840.113556.1.4.319), the same
//! in the request and the response. Decoded with the rules of the LDAPMessage around it
//! (`codec.rs`): definite lengths, primitive OCTET STRING, nothing after the value.

use rasn::{AsnType, Decode, Decoder, Encode};

use super::OctetString;

/// RFC 2696 §2: the control's OID.
pub const PAGED_RESULTS_OID: &str = "1.2.840.113556.1.4.319";

/// RFC 2696 §2:
/// ```text
/// realSearchControlValue ::= SEQUENCE {
///         size            INTEGER (0..maxInt),
///                                 -- requested page size from client
///                                 -- result set size estimate from server
///         cookie          OCTET STRING }
/// ```
#[derive(AsnType, Encode, Decode, Debug, Clone, Default, PartialEq, Eq)]
pub struct PagedResults {
    pub size: u32,
    pub cookie: OctetString,
}

impl PagedResults {
    /// Decodes a controlValue that must be exactly one `realSearchControlValue`.
    pub fn decode_value(bytes: &[u8]) -> Result<Self, String> {
        super::codec::decode_whole(bytes)
    }

    pub fn encode_value(&self) -> Result<Vec<u8>, String> {
        rasn::ber::encode(self).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_ldapsearch_sends() {
        // ldapsearch -E pr=10: SEQUENCE { INTEGER 10, OCTET STRING "" }.
        let value = PagedResults::decode_value(&[0x30, 0x05, 0x02, 0x01, 0x0a, 0x04, 0x00]).unwrap();
        assert_eq!(value, PagedResults { size: 10, cookie: OctetString::default() });
        assert_eq!(value.encode_value().unwrap(), vec![0x30, 0x05, 0x02, 0x01, 0x0a, 0x04, 0x00]);
    }

    #[test]
    fn refuses_malformed_values() {
        // A negative size, a missing cookie, trailing bytes, a truncated value.
        for bad in [
            &[0x30, 0x05, 0x02, 0x01, 0xff, 0x04, 0x00][..],
            &[0x30, 0x03, 0x02, 0x01, 0x0a],
            &[0x30, 0x05, 0x02, 0x01, 0x0a, 0x04, 0x00, 0x00],
            &[0x30, 0x05, 0x02, 0x01],
            &[],
        ] {
            assert!(PagedResults::decode_value(bad).is_err(), "{bad:02x?}");
        }
    }
}
