//! A password policy as an entry holds it: the pwdPolicy object class's attributes
//! (draft-behera-ldap-password-policy-10 §5.2), read into numbers once. Every field is read
//! here, the ones lockout uses and the ones expiry, history and quality checks will use, so
//! that those plug in by reading a field.

use ferrodir_proto::entry::Entry;
use ferrodir_proto::ResultCode;

use crate::config::DirectoryConfig;
use crate::error::{LdapError, LdapResultOf};

/// slapd's PPOLICY_DEFAULT_MAXRECORDED_FAILURE: how many pwdFailureTime values are kept
/// when the policy sets neither pwdMaxRecordedFailure nor pwdMaxFailure.
pub const DEFAULT_MAX_RECORDED_FAILURE: u64 = 5;

/// One pwdPolicy entry's settings. Durations are in seconds; an absent or negative integer
/// is 0, as slapd reads them (0 means "no limit" for the ages and intervals).
/// (`Default`: every setting off, for tests; [`Policy::from_entry`] applies the draft's
/// defaults.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// The policy entry's DN as stored (for logs).
    pub dn: String,
    pub min_age: u64,
    pub max_age: u64,
    pub in_history: u64,
    pub check_quality: u64,
    pub min_length: u64,
    pub max_length: u64,
    pub expire_warning: u64,
    pub grace_authn_limit: u64,
    pub grace_expiry: u64,
    /// pwdLockout: whether a lock (pwdAccountLockedTime) refuses binds. The failures are
    /// counted and the lock time written either way, as slapd does.
    pub lockout: bool,
    pub lockout_duration: u64,
    pub max_failure: u64,
    pub failure_count_interval: u64,
    pub must_change: bool,
    /// The draft's default is TRUE.
    pub allow_user_change: bool,
    pub safe_modify: bool,
    pub min_delay: u64,
    pub max_delay: u64,
    pub max_idle: u64,
    /// pwdMaxRecordedFailure, or pwdMaxFailure, or [`DEFAULT_MAX_RECORDED_FAILURE`] (slapd's
    /// order): the most pwdFailureTime values an entry keeps.
    pub max_recorded_failure: u64,
}

impl Policy {
    /// The policy `entry` holds; None when it is no policy for userPassword (no
    /// pwdAttribute, or one naming another type: slapd 2.5 supports userPassword only, and
    /// falls back to no policy).
    pub fn from_entry(config: &DirectoryConfig, dn: &str, entry: &Entry) -> Option<Self> {
        let attribute = entry.first_str("pwdAttribute")?;
        let names_user_password =
            config.schema.attribute(attribute).is_some_and(|t| t.name().eq_ignore_ascii_case("userPassword"));
        if !names_user_password {
            return None;
        }
        let number = |name: &str| {
            entry.first_str(name).and_then(|v| v.trim().parse::<i64>().ok()).map_or(0, |v| v.max(0) as u64)
        };
        let flag = |name: &str, default: bool| match entry.first_str(name) {
            Some(v) => v.eq_ignore_ascii_case("TRUE"),
            None => default,
        };
        let max_failure = number("pwdMaxFailure");
        let max_recorded_failure = match (number("pwdMaxRecordedFailure"), max_failure) {
            (0, 0) => DEFAULT_MAX_RECORDED_FAILURE,
            (0, max) => max,
            (recorded, _) => recorded,
        };
        Some(Self {
            dn: dn.to_string(),
            min_age: number("pwdMinAge"),
            max_age: number("pwdMaxAge"),
            in_history: number("pwdInHistory"),
            check_quality: number("pwdCheckQuality"),
            min_length: number("pwdMinLength"),
            max_length: number("pwdMaxLength"),
            expire_warning: number("pwdExpireWarning"),
            grace_authn_limit: number("pwdGraceAuthNLimit"),
            grace_expiry: number("pwdGraceExpiry"),
            lockout: flag("pwdLockout", false),
            lockout_duration: number("pwdLockoutDuration"),
            max_failure,
            failure_count_interval: number("pwdFailureCountInterval"),
            must_change: flag("pwdMustChange", false),
            allow_user_change: flag("pwdAllowUserChange", true),
            safe_modify: flag("pwdSafeModify", false),
            min_delay: number("pwdMinDelay"),
            max_delay: number("pwdMaxDelay"),
            max_idle: number("pwdMaxIdle"),
            max_recorded_failure,
        })
    }
}

/// Refuses pwdAttribute values that name no attribute type this server knows: a policy for
/// an unknown attribute would silently apply to nothing. `name` is the attribute a client
/// writes (an Add's attribute, a Modify's change); other types pass.
pub fn check_policy_values(config: &DirectoryConfig, name: &str, values: &[Vec<u8>]) -> LdapResultOf<()> {
    let is_pwd_attribute =
        config.schema.attribute(name).is_some_and(|t| t.name().eq_ignore_ascii_case("pwdAttribute"));
    if !is_pwd_attribute {
        return Ok(());
    }
    for (index, value) in values.iter().enumerate() {
        let text = String::from_utf8_lossy(value);
        if config.schema.attribute(text.trim()).is_none() {
            return Err(LdapError::new(
                ResultCode::CONSTRAINT_VIOLATION,
                format!("pwdAttribute: value #{index} names no known attribute type ({text})"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use ferrodir_proto::entry::Attribute;

    use super::*;

    fn entry(attrs: &[(&str, &str)]) -> Entry {
        Entry::new(attrs.iter().map(|(n, v)| Attribute::new(*n, vec![v.as_bytes().to_vec()])).collect())
    }

    #[test]
    fn reads_a_policy_as_slapd_does() {
        let config = crate::testkit::test_config();
        let policy = Policy::from_entry(
            &config,
            "cn=p",
            &entry(&[
                ("pwdAttribute", "userPassword"),
                ("pwdLockout", "TRUE"),
                ("pwdMaxFailure", "3"),
                ("pwdLockoutDuration", "-5"),
                ("pwdFailureCountInterval", "60"),
            ]),
        )
        .unwrap();
        assert!(policy.lockout && policy.allow_user_change && !policy.must_change);
        assert_eq!((policy.max_failure, policy.lockout_duration, policy.failure_count_interval), (3, 0, 60));
        assert_eq!(policy.max_recorded_failure, 3);
        // By OID too; the recorded failures default to slapd's 5.
        let by_oid = Policy::from_entry(&config, "cn=p", &entry(&[("pwdAttribute", "2.5.4.35")])).unwrap();
        assert_eq!(by_oid.max_recorded_failure, DEFAULT_MAX_RECORDED_FAILURE);
        assert!(!by_oid.lockout);
        // Not a policy for userPassword: none.
        assert!(Policy::from_entry(&config, "cn=p", &entry(&[("pwdAttribute", "cn")])).is_none());
        assert!(Policy::from_entry(&config, "cn=p", &entry(&[("pwdLockout", "TRUE")])).is_none());
    }

    #[test]
    fn a_policy_naming_an_unknown_attribute_is_refused() {
        let config = crate::testkit::test_config();
        assert!(check_policy_values(&config, "pwdAttribute", &[b"userPassword".to_vec()]).is_ok());
        assert!(check_policy_values(&config, "description", &[b"nonsense".to_vec()]).is_ok());
        let refused = check_policy_values(&config, "pwdattribute", &[b"noSuchType".to_vec()]).unwrap_err();
        assert_eq!(refused.code, ResultCode::CONSTRAINT_VIOLATION);
        assert!(refused.message.contains("pwdAttribute"), "{}", refused.message);
    }
}
