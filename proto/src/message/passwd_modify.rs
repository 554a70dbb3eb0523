//! The values of RFC 3062's Password Modify extended operation
//! (1.3.6.1.4.1.4203.1.11.1): the request's `PasswdModifyRequestValue` and the response's
//! `PasswdModifyResponseValue`. Decoded with the same rules as the LDAPMessage around them
//! (`codec.rs`): primitive OCTET STRINGs only, definite lengths, nothing after the value.

use rasn::{AsnType, Decode, Decoder, Encode};

use super::OctetString;

/// RFC 3062's OID of the Password Modify extended operation.
pub const PASSWORD_MODIFY_OID: &str = "1.3.6.1.4.1.4203.1.11.1";

/// RFC 3062 §2, whose module has IMPLICIT TAGS:
/// ```text
/// PasswdModifyRequestValue ::= SEQUENCE {
///     userIdentity    [0]  OCTET STRING OPTIONAL
///     oldPasswd       [1]  OCTET STRING OPTIONAL
///     newPasswd       [2]  OCTET STRING OPTIONAL }
/// ```
#[derive(AsnType, Encode, Decode, Debug, Clone, Default, PartialEq, Eq)]
pub struct PasswdModifyRequest {
    #[rasn(tag(context, 0))]
    pub user_identity: Option<OctetString>,
    #[rasn(tag(context, 1))]
    pub old_passwd: Option<OctetString>,
    #[rasn(tag(context, 2))]
    pub new_passwd: Option<OctetString>,
}

/// RFC 3062 §2: `PasswdModifyResponseValue ::= SEQUENCE { genPasswd [0] OCTET STRING
/// OPTIONAL }`.
#[derive(AsnType, Encode, Decode, Debug, Clone, Default, PartialEq, Eq)]
pub struct PasswdModifyResponse {
    #[rasn(tag(context, 0))]
    pub gen_passwd: Option<OctetString>,
}

impl PasswdModifyRequest {
    /// Decodes a requestValue that must be exactly one `PasswdModifyRequestValue`.
    pub fn decode_value(bytes: &[u8]) -> Result<Self, String> {
        let mut decoder = rasn::ber::de::Decoder::new(bytes, super::codec::LDAP_DECODER);
        let value = Self::decode(&mut decoder).map_err(|e| e.to_string())?;
        if !decoder.remaining().is_empty() {
            return Err("bytes after the request value".to_string());
        }
        Ok(value)
    }
}

impl PasswdModifyResponse {
    pub fn encode_value(&self) -> Result<Vec<u8>, String> {
        rasn::ber::encode(self).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_ldappasswd_sends() {
        // ldappasswd -D ... -a old -s new uid=x: [0] "uid=x" [1] "old" [2] "new".
        let bytes = [
            0x30, 0x10, 0x80, 0x05, b'u', b'i', b'd', b'=', b'x', 0x81, 0x03, b'o', b'l', b'd', 0x82, 0x02,
            b'n', b'w',
        ];
        let value = PasswdModifyRequest::decode_value(&bytes).unwrap();
        assert_eq!(value.user_identity.as_deref(), Some(&b"uid=x"[..]));
        assert_eq!(value.old_passwd.as_deref(), Some(&b"old"[..]));
        assert_eq!(value.new_passwd.as_deref(), Some(&b"nw"[..]));
        let empty = PasswdModifyRequest::decode_value(&[0x30, 0x00]).unwrap();
        assert_eq!(empty, PasswdModifyRequest::default());
    }

    #[test]
    fn refuses_malformed_values() {
        for bad in [
            &[][..],
            &[0x30][..],
            &[0x30, 0x02, 0x83, 0x00][..],
            &[0x30, 0x02, 0x80, 0x05][..],
            &[0x04, 0x00][..],
            &[0x30, 0x00, 0x00][..],
            // A constructed [0].
            &[0x30, 0x04, 0xa0, 0x02, 0x04, 0x00][..],
            // Out of order.
            &[0x30, 0x04, 0x81, 0x00, 0x80, 0x00][..],
        ] {
            assert!(PasswdModifyRequest::decode_value(bad).is_err(), "{bad:02x?}");
        }
    }

    #[test]
    fn encodes_the_generated_password() {
        let value = PasswdModifyResponse { gen_passwd: Some(OctetString::from_static(b"abc")) };
        assert_eq!(value.encode_value().unwrap(), [0x30, 0x05, 0x80, 0x03, b'a', b'b', b'c']);
    }
}
