//! The Password Policy control (draft-behera-ldap-password-policy-10 §6.1,
//! 1.3.6.1.4.1.42.2.27.8.5.1). A client sends it with no value to ask for the policy's word
//! on a Bind (Add, Modify, Password Modify); the server answers with a
//! `PasswordPolicyResponseValue`: a warning (time left before the password expires, or grace
//! binds left) and an error (why the operation was refused), both optional. Decoded with
//! the rules of the LDAPMessage around it (`codec.rs`): definite lengths, nothing after the
//! value.

use rasn::{AsnType, Decode, Decoder, Encode, Encoder};

/// The control's OID, for the request and the response.
pub const PASSWORD_POLICY_OID: &str = "1.3.6.1.4.1.42.2.27.8.5.1";

/// draft-behera-ldap-password-policy-10 §6.2, whose module has IMPLICIT TAGS (the CHOICE
/// under `warning` is tagged explicitly, as a CHOICE must be):
/// ```text
/// PasswordPolicyResponseValue ::= SEQUENCE {
///    warning [0] CHOICE {
///       timeBeforeExpiration [0] INTEGER (0 .. maxInt),
///       graceAuthNsRemaining [1] INTEGER (0 .. maxInt) } OPTIONAL,
///    error   [1] ENUMERATED { ... } OPTIONAL }
/// ```
/// slapd 2.5 encodes it the same way: an accountLocked answer is `30 03 81 01 01`, an
/// answer with neither part `30 00`.
#[derive(AsnType, Encode, Decode, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PasswordPolicyResponse {
    #[rasn(tag(explicit(context, 0)))]
    pub warning: Option<PolicyWarning>,
    #[rasn(tag(context, 1))]
    pub error: Option<PolicyError>,
}

/// The response's `warning`.
#[derive(AsnType, Encode, Decode, Debug, Clone, Copy, PartialEq, Eq)]
#[rasn(choice)]
pub enum PolicyWarning {
    /// Seconds before the password expires.
    #[rasn(tag(context, 0))]
    TimeBeforeExpiration(u32),
    /// Binds with the expired password still allowed.
    #[rasn(tag(context, 1))]
    GraceAuthNsRemaining(u32),
}

/// The response's `error`, with the draft's numbers.
#[derive(AsnType, Encode, Decode, Debug, Clone, Copy, PartialEq, Eq)]
#[rasn(enumerated)]
pub enum PolicyError {
    PasswordExpired = 0,
    AccountLocked = 1,
    ChangeAfterReset = 2,
    PasswordModNotAllowed = 3,
    MustSupplyOldPassword = 4,
    InsufficientPasswordQuality = 5,
    PasswordTooShort = 6,
    PasswordTooYoung = 7,
    PasswordInHistory = 8,
}

impl PasswordPolicyResponse {
    /// The response with `error` and no warning.
    pub fn error(error: PolicyError) -> Self {
        Self { warning: None, error: Some(error) }
    }

    /// Decodes a controlValue that must be exactly one `PasswordPolicyResponseValue` (a
    /// client's view; the tests read the server's answers with it).
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
    fn encodes_as_slapd_does() {
        // Recorded from slapd 2.5.13 (ppolicy_use_lockout): a locked account, and a bind
        // the policy has nothing to say about.
        let locked = PasswordPolicyResponse::error(PolicyError::AccountLocked);
        assert_eq!(locked.encode_value().unwrap(), [0x30, 0x03, 0x81, 0x01, 0x01]);
        assert_eq!(PasswordPolicyResponse::default().encode_value().unwrap(), [0x30, 0x00]);
        for bytes in [&[0x30, 0x03, 0x81, 0x01, 0x01][..], &[0x30, 0x00]] {
            let value = PasswordPolicyResponse::decode_value(bytes).unwrap();
            assert_eq!(value.encode_value().unwrap(), bytes);
        }
    }

    #[test]
    fn warnings_are_an_explicitly_tagged_choice() {
        let expiring =
            PasswordPolicyResponse { warning: Some(PolicyWarning::TimeBeforeExpiration(300)), error: None };
        // [0] { [0] 300 }
        let bytes = [0x30, 0x06, 0xa0, 0x04, 0x80, 0x02, 0x01, 0x2c];
        assert_eq!(expiring.encode_value().unwrap(), bytes);
        assert_eq!(PasswordPolicyResponse::decode_value(&bytes).unwrap(), expiring);
        let grace = PasswordPolicyResponse {
            warning: Some(PolicyWarning::GraceAuthNsRemaining(2)),
            error: Some(PolicyError::PasswordExpired),
        };
        let bytes = [0x30, 0x08, 0xa0, 0x03, 0x81, 0x01, 0x02, 0x81, 0x01, 0x00];
        assert_eq!(grace.encode_value().unwrap(), bytes);
        assert_eq!(PasswordPolicyResponse::decode_value(&bytes).unwrap(), grace);
        let error = PasswordPolicyResponse::error(PolicyError::PasswordInHistory);
        assert_eq!(error.encode_value().unwrap(), [0x30, 0x03, 0x81, 0x01, 0x08]);
    }

    #[test]
    fn refuses_malformed_values() {
        for bad in [
            &[][..],
            &[0x30][..],
            &[0x30, 0x00, 0x00][..],
            // An error the draft does not define.
            &[0x30, 0x03, 0x81, 0x01, 0x09][..],
            // A warning not wrapped in its explicit [0].
            &[0x30, 0x04, 0x80, 0x02, 0x01, 0x2c][..],
            // A negative time.
            &[0x30, 0x05, 0xa0, 0x03, 0x80, 0x01, 0xff][..],
        ] {
            assert!(PasswordPolicyResponse::decode_value(bad).is_err(), "{bad:02x?}");
        }
    }
}
