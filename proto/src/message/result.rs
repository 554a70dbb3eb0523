//! `LDAPResult` (RFC 4511 §4.1.9) and the two responses that embed it with
//! `COMPONENTS OF`: BindResponse (§4.2.2) and ExtendedResponse (§4.12).
//!
//! `COMPONENTS OF LDAPResult` means the result's fields sit directly in the response's
//! SEQUENCE, not in a nested one. The Rust structs nest an [`LdapResult`] because the server
//! builds all results the same way; private `*Wire` structs carry the flat layout and the
//! public types convert to and from them.

use rasn::types::{Constraints, Identifier, OctetString, Tag};
use rasn::{AsnType, Decode, Decoder, Encode, Encoder};

use crate::result_code::ResultCode;

/// RFC 4511 §4.1.9: `resultCode` is an ENUMERATED, but later RFCs keep adding values
/// (118-123, 4096, ...), so it is read and written as an open integer with the ENUMERATED
/// tag rather than as a closed Rust enum that would reject unknown codes.
impl AsnType for ResultCode {
    const TAG: Tag = Tag::ENUMERATED;
}

impl Encode for ResultCode {
    fn encode_with_tag_and_constraints<'b, E: Encoder<'b>>(
        &self,
        encoder: &mut E,
        tag: Tag,
        _: &Constraints,
        identifier: Identifier,
    ) -> Result<(), E::Error> {
        encoder.encode_integer(tag, &Constraints::NONE, &self.0, identifier).map(drop)
    }
}

impl Decode for ResultCode {
    /// A negative or larger-than-u32 code fails to decode; no RFC defines one.
    fn decode_with_tag_and_constraints<D: Decoder>(
        decoder: &mut D,
        tag: Tag,
        _: &Constraints,
    ) -> Result<Self, D::Error> {
        decoder.decode_integer::<u32>(tag, &Constraints::NONE).map(ResultCode)
    }
}

/// RFC 4511 §4.1.9 `LDAPResult`, also the whole of SearchResultDone, ModifyResponse,
/// AddResponse, DelResponse, ModifyDNResponse and CompareResponse.
#[derive(AsnType, Encode, Decode, Debug, Clone, PartialEq, Eq)]
pub struct LdapResult {
    pub result_code: ResultCode,
    pub matched_dn: OctetString,
    pub diagnostic_message: OctetString,
    /// `[3] Referral OPTIONAL`: LDAP URIs, present only with resultCode referral (10).
    #[rasn(tag(context, 3))]
    pub referral: Option<Vec<OctetString>>,
}

impl LdapResult {
    /// A result with the given code, matched DN and diagnostic message (any of `&str`,
    /// `String`, `&[u8]`, `Vec<u8>`, `Bytes`, `OctetString`).
    pub fn new(
        result_code: ResultCode,
        matched_dn: impl AsRef<[u8]>,
        diagnostic_message: impl AsRef<[u8]>,
    ) -> Self {
        Self {
            result_code,
            matched_dn: OctetString::from(matched_dn.as_ref()),
            diagnostic_message: OctetString::from(diagnostic_message.as_ref()),
            referral: None,
        }
    }

    /// resultCode success with empty matchedDN and diagnosticMessage.
    pub fn success() -> Self {
        Self::new(ResultCode::SUCCESS, b"", b"")
    }

    /// An error with an empty matchedDN, the common case outside name resolution.
    pub fn error(result_code: ResultCode, diagnostic_message: impl AsRef<[u8]>) -> Self {
        Self::new(result_code, b"", diagnostic_message)
    }
}

/// RFC 4511 §4.2.2 `BindResponse`; `server_sasl_creds` is `[7]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindResponse {
    pub result: LdapResult,
    pub server_sasl_creds: Option<OctetString>,
}

/// RFC 4511 §4.12 `ExtendedResponse`; `response_name` is `[10]`, `response_value` `[11]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtendedResponse {
    pub result: LdapResult,
    pub response_name: Option<OctetString>,
    pub response_value: Option<OctetString>,
}

#[derive(AsnType, Encode, Decode)]
struct BindResponseWire {
    result_code: ResultCode,
    matched_dn: OctetString,
    diagnostic_message: OctetString,
    #[rasn(tag(context, 3))]
    referral: Option<Vec<OctetString>>,
    #[rasn(tag(context, 7))]
    server_sasl_creds: Option<OctetString>,
}

#[derive(AsnType, Encode, Decode)]
struct ExtendedResponseWire {
    result_code: ResultCode,
    matched_dn: OctetString,
    diagnostic_message: OctetString,
    #[rasn(tag(context, 3))]
    referral: Option<Vec<OctetString>>,
    #[rasn(tag(context, 10))]
    response_name: Option<OctetString>,
    #[rasn(tag(context, 11))]
    response_value: Option<OctetString>,
}

/// Implements `rasn`'s traits for a public response type by converting through its flat
/// wire struct. Cloning the fields is cheap: `OctetString` is a reference-counted `Bytes`.
macro_rules! flattened_codec {
    ($public:ty, $wire:ty) => {
        impl AsnType for $public {
            const TAG: Tag = Tag::SEQUENCE;
        }

        impl Encode for $public {
            fn encode_with_tag_and_constraints<'b, E: Encoder<'b>>(
                &self,
                encoder: &mut E,
                tag: Tag,
                constraints: &Constraints,
                identifier: Identifier,
            ) -> Result<(), E::Error> {
                <$wire>::from(self).encode_with_tag_and_constraints(encoder, tag, constraints, identifier)
            }
        }

        impl Decode for $public {
            fn decode_with_tag_and_constraints<D: Decoder>(
                decoder: &mut D,
                tag: Tag,
                constraints: &Constraints,
            ) -> Result<Self, D::Error> {
                <$wire>::decode_with_tag_and_constraints(decoder, tag, constraints).map(Self::from)
            }
        }
    };
}

flattened_codec!(BindResponse, BindResponseWire);
flattened_codec!(ExtendedResponse, ExtendedResponseWire);

impl From<&BindResponse> for BindResponseWire {
    fn from(response: &BindResponse) -> Self {
        let LdapResult { result_code, matched_dn, diagnostic_message, referral } = response.result.clone();
        Self {
            result_code,
            matched_dn,
            diagnostic_message,
            referral,
            server_sasl_creds: response.server_sasl_creds.clone(),
        }
    }
}

impl From<BindResponseWire> for BindResponse {
    fn from(wire: BindResponseWire) -> Self {
        let BindResponseWire { result_code, matched_dn, diagnostic_message, referral, server_sasl_creds } =
            wire;
        Self {
            result: LdapResult { result_code, matched_dn, diagnostic_message, referral },
            server_sasl_creds,
        }
    }
}

impl From<&ExtendedResponse> for ExtendedResponseWire {
    fn from(response: &ExtendedResponse) -> Self {
        let LdapResult { result_code, matched_dn, diagnostic_message, referral } = response.result.clone();
        Self {
            result_code,
            matched_dn,
            diagnostic_message,
            referral,
            response_name: response.response_name.clone(),
            response_value: response.response_value.clone(),
        }
    }
}

impl From<ExtendedResponseWire> for ExtendedResponse {
    fn from(wire: ExtendedResponseWire) -> Self {
        let ExtendedResponseWire {
            result_code,
            matched_dn,
            diagnostic_message,
            referral,
            response_name,
            response_value,
        } = wire;
        Self {
            result: LdapResult { result_code, matched_dn, diagnostic_message, referral },
            response_name,
            response_value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Encode + Decode + PartialEq + std::fmt::Debug>(value: &T) -> Vec<u8> {
        let encoded = rasn::ber::encode(value).unwrap();
        assert_eq!(&rasn::ber::decode::<T>(&encoded).unwrap(), value);
        encoded
    }

    #[test]
    fn result_codes_beyond_rfc4511_round_trip() {
        for (code, content) in [
            (ResultCode::CANCELED, vec![118]),
            (ResultCode::AUTHORIZATION_DENIED, vec![123]),
            (ResultCode::E_SYNC_REFRESH_REQUIRED, vec![0x10, 0x00]),
            (ResultCode(200), vec![0x00, 0xc8]),
            (ResultCode(u32::MAX), vec![0x00, 0xff, 0xff, 0xff, 0xff]),
        ] {
            let mut expected = vec![0x0a, content.len() as u8];
            expected.extend(content);
            assert_eq!(round_trip(&code), expected, "{code}");
            let result = LdapResult::error(code, "x");
            round_trip(&result);
        }
    }

    #[test]
    fn negative_result_code_is_an_error_not_a_panic() {
        assert!(rasn::ber::decode::<ResultCode>(&[0x0a, 0x01, 0xff]).is_err());
        assert!(rasn::ber::decode::<ResultCode>(&[0x0a, 0x00]).is_err());
    }

    #[test]
    fn ldap_result_with_referral() {
        let mut result = LdapResult::new(ResultCode::REFERRAL, "dc=example", "go there");
        result.referral =
            Some(vec![OctetString::from(&b"ldap://a/"[..]), OctetString::from(&b"ldap://b/"[..])]);
        let encoded = round_trip(&result);
        let expected: &[u8] = b"\x30\x31\x0a\x01\x0a\x04\x0adc=example\x04\x08go there\
            \xa3\x16\x04\x09ldap://a/\x04\x09ldap://b/";
        assert_eq!(encoded, expected);
    }

    #[test]
    fn bind_response_is_flat() {
        let response = BindResponse {
            result: LdapResult::new(ResultCode::SASL_BIND_IN_PROGRESS, "", ""),
            server_sasl_creds: Some(OctetString::from(&b"abc"[..])),
        };
        let encoded = round_trip(&response);
        assert_eq!(
            encoded,
            [0x30, 0x0c, 0x0a, 0x01, 0x0e, 0x04, 0x00, 0x04, 0x00, 0x87, 0x03, b'a', b'b', b'c']
        );
        let plain = BindResponse { result: LdapResult::success(), server_sasl_creds: None };
        assert_eq!(round_trip(&plain), [0x30, 0x07, 0x0a, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00]);
    }

    #[test]
    fn extended_response_is_flat() {
        let response = ExtendedResponse {
            result: LdapResult::success(),
            response_name: Some(OctetString::from(&b"1.2.3"[..])),
            response_value: Some(OctetString::from(&b"\x30\x00"[..])),
        };
        let encoded = round_trip(&response);
        assert_eq!(
            encoded,
            [
                0x30, 0x12, 0x0a, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00, 0x8a, 0x05, b'1', b'.', b'2', b'.',
                b'3', 0x8b, 0x02, 0x30, 0x00
            ]
        );
        let value_only = ExtendedResponse { response_name: None, ..response };
        round_trip(&value_only);
    }
}
