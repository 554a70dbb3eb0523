//! The one place where failures become LDAP results: every error the router or a shard can
//! produce is turned into a resultCode, matchedDN and diagnostic message here.

use ferrodir_proto::message::LdapResult;
use ferrodir_proto::ResultCode;
use ferrodir_shard::ShardError;

/// An LDAP-level failure of one operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct LdapError {
    pub code: ResultCode,
    pub matched_dn: String,
    pub message: String,
    /// LDAP URLs of a referral (resultCode referral, 10): a replica's write sent on to its
    /// provider (`update_referral`). Empty otherwise.
    pub referral: Vec<String>,
}

impl LdapError {
    pub fn new(code: ResultCode, message: impl Into<String>) -> Self {
        Self { code, matched_dn: String::new(), message: message.into(), referral: Vec::new() }
    }

    pub fn no_such_object(matched_dn: impl Into<String>) -> Self {
        Self {
            code: ResultCode::NO_SUCH_OBJECT,
            matched_dn: matched_dn.into(),
            message: String::new(),
            referral: Vec::new(),
        }
    }

    pub fn protocol(message: impl Into<String>) -> Self {
        Self::new(ResultCode::PROTOCOL_ERROR, message)
    }

    pub fn invalid_dn(message: impl std::fmt::Display) -> Self {
        Self::new(ResultCode::INVALID_DN_SYNTAX, format!("invalid DN: {message}"))
    }

    pub fn unwilling(message: impl Into<String>) -> Self {
        Self::new(ResultCode::UNWILLING_TO_PERFORM, message)
    }

    /// A broken invariant of ours, answered instead of a panic (resultCode other).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ResultCode::OTHER, message)
    }

    /// A referral (10) to `urls` (RFC 4511 §4.1.10).
    pub fn referral(urls: Vec<String>) -> Self {
        Self { referral: urls, ..Self::new(ResultCode::REFERRAL, "") }
    }

    pub fn to_result(&self) -> LdapResult {
        let mut result = LdapResult::new(self.code, self.matched_dn.clone(), self.message.clone());
        if !self.referral.is_empty() {
            result.referral = Some(
                self.referral
                    .iter()
                    .map(|u| ferrodir_proto::message::OctetString::from(u.clone().into_bytes()))
                    .collect(),
            );
        }
        result
    }
}

impl From<ShardError> for LdapError {
    fn from(error: ShardError) -> Self {
        let code = match &error {
            ShardError::AlreadyExists => ResultCode::ENTRY_ALREADY_EXISTS,
            ShardError::NoSuchObject => ResultCode::NO_SUCH_OBJECT,
            ShardError::NotAllowedOnNonLeaf => ResultCode::NOT_ALLOWED_ON_NON_LEAF,
            ShardError::NoSuchAttribute(_) => ResultCode::NO_SUCH_ATTRIBUTE,
            ShardError::AttributeOrValueExists(_) => ResultCode::ATTRIBUTE_OR_VALUE_EXISTS,
            ShardError::NotAllowedOnRdn(_) => ResultCode::NOT_ALLOWED_ON_RDN,
            ShardError::ConstraintViolation(_) => ResultCode::CONSTRAINT_VIOLATION,
            ShardError::ParentClosed => ResultCode::BUSY,
            ShardError::AssertionFailed => ResultCode(122),
            ShardError::Storage(_) | ShardError::Unavailable(_) => ResultCode::UNAVAILABLE,
            ShardError::Corrupt(_) => ResultCode::OTHER,
            ShardError::Schema(violation) => violation.code,
            ShardError::AdminLimitExceeded(_) => ResultCode::ADMIN_LIMIT_EXCEEDED,
            _ => ResultCode::OTHER,
        };
        let message = match &error {
            ShardError::NoSuchObject => String::new(),
            other => other.to_string(),
        };
        Self { code, matched_dn: String::new(), message, referral: Vec::new() }
    }
}

impl From<actix::MailboxError> for LdapError {
    fn from(error: actix::MailboxError) -> Self {
        Self::new(ResultCode::UNAVAILABLE, format!("shard unreachable: {error}"))
    }
}

/// A password hash or check that could not run: busy (51) when the pool's queue is full,
/// so that the client may retry; unavailable (52) when there is no pool.
impl From<crate::password::PoolError> for LdapError {
    fn from(error: crate::password::PoolError) -> Self {
        let code = match error {
            crate::password::PoolError::Busy => ResultCode::BUSY,
            _ => ResultCode::UNAVAILABLE,
        };
        Self::new(code, error.to_string())
    }
}

pub type LdapResultOf<T> = Result<T, LdapError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_errors_map_to_codes() {
        assert_eq!(LdapError::from(ShardError::AlreadyExists).code, ResultCode::ENTRY_ALREADY_EXISTS);
        assert_eq!(LdapError::from(ShardError::NotAllowedOnNonLeaf).code, ResultCode(66));
        assert_eq!(LdapError::from(ShardError::ParentClosed).code, ResultCode::BUSY);
    }
}
