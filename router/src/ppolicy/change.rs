//! The rules a new password must pass (draft-behera-ldap-password-policy-10 §7.2 and §8.2.3,
//! slapd 2.5's ppolicy_modify as the reference), checked before the value is hashed, for an
//! Add, a Modify and a Password Modify by anyone but the rootDN:
//!
//! - pwdAllowUserChange FALSE: a user may not change their own password (insufficient
//!   access, passwordModNotAllowed);
//! - pwdSafeModify TRUE: a user changing their own password must give the old one
//!   (insufficient access, mustSupplyOldPassword, as slapd 2.5 answers);
//! - pwdMinAge: a user may not change it again sooner (constraint violation,
//!   passwordTooYoung);
//! - pwdCheckQuality 1 or 2 with pwdMinLength: a cleartext value shorter is refused
//!   (passwordTooShort); a value given already hashed can't be checked: 2 refuses it,
//!   1 lets it through (insufficientPasswordQuality);
//! - pwdInHistory: the current password and the last pwdInHistory ones may not be reused
//!   (passwordInHistory); the replaced value joins pwdHistory
//!   (`time#syntax OID#length#value`, as slapd keeps it).

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::ldif::{LdifMod, ModOp};
use ferrodir_proto::message::ppolicy::PolicyError;
use ferrodir_proto::schema::gentime::format_micros;
use ferrodir_proto::ResultCode;

use crate::error::LdapError;
use crate::ppolicy::expiry::CHANGED_TIME;
use crate::ppolicy::policy::Policy;

pub const HISTORY: &str = "pwdHistory";
/// The syntax pwdHistory's values name: Octet String.
const OCTET_STRING: &str = "1.3.6.1.4.1.1466.115.121.1.40";
const MICROS: i64 = 1_000_000;

/// A refused password: the result and the control's error.
#[derive(Debug)]
pub struct Refused {
    pub error: LdapError,
    pub policy: PolicyError,
}

fn refused(code: ResultCode, message: &str, policy: PolicyError) -> Refused {
    Refused { error: LdapError::new(code, message), policy }
}

/// One password change, as the operation sees it before hashing.
pub struct Proposed<'a> {
    /// The entry as it stands (None: an Add).
    pub current: Option<&'a Entry>,
    /// The new values, as the client sent them.
    pub values: &'a [Vec<u8>],
    /// The requester changes their own password.
    pub own: bool,
    /// The change names the old password (a Modify deleting the old value, a Password
    /// Modify with oldPasswd).
    pub old_given: bool,
    pub now: i64,
}

/// The checks that need no hash: who may change, when, and the new value's length.
pub fn check(policy: &Policy, change: &Proposed<'_>) -> Result<(), Refused> {
    if change.current.is_some() && change.own {
        if !policy.allow_user_change {
            return Err(refused(
                ResultCode::INSUFFICIENT_ACCESS_RIGHTS,
                "User alteration of password is not allowed",
                PolicyError::PasswordModNotAllowed,
            ));
        }
        if policy.safe_modify && !change.old_given {
            return Err(refused(
                ResultCode::INSUFFICIENT_ACCESS_RIGHTS,
                "Must supply old password to be changed as well as new one",
                PolicyError::MustSupplyOldPassword,
            ));
        }
        if too_young(policy, change) {
            return Err(refused(
                ResultCode::CONSTRAINT_VIOLATION,
                "Password is too young to change",
                PolicyError::PasswordTooYoung,
            ));
        }
    }
    for value in change.values {
        quality(policy, value)?;
    }
    Ok(())
}

fn too_young(policy: &Policy, change: &Proposed<'_>) -> bool {
    let Some(current) = change.current else { return false };
    if policy.min_age == 0 {
        return false;
    }
    let changed = current.first_str(CHANGED_TIME).and_then(ferrodir_proto::schema::gentime::unix_micros);
    let min_age = i64::try_from(policy.min_age).unwrap_or(i64::MAX).saturating_mul(MICROS);
    changed.is_some_and(|at| change.now < at.saturating_add(min_age))
}

fn quality(policy: &Policy, value: &[u8]) -> Result<(), Refused> {
    if policy.check_quality == 0 {
        return Ok(());
    }
    if crate::password::is_hashed(value) {
        // Nothing to measure in a hash.
        return match policy.check_quality {
            2 => Err(refused(
                ResultCode::CONSTRAINT_VIOLATION,
                "Password fails quality checking policy",
                PolicyError::InsufficientPasswordQuality,
            )),
            _ => Ok(()),
        };
    }
    let length = std::str::from_utf8(value).map_or(value.len(), |text| text.chars().count()) as u64;
    if policy.min_length > 0 && length < policy.min_length {
        return Err(refused(
            ResultCode::CONSTRAINT_VIOLATION,
            "Password fails quality checking policy",
            PolicyError::PasswordTooShort,
        ));
    }
    Ok(())
}

/// The values a new password may not equal: the current ones and the last pwdInHistory
/// ones of pwdHistory (their stored forms, checked with the password rules).
pub fn history_values(policy: &Policy, current: &Entry) -> Vec<Vec<u8>> {
    if policy.in_history == 0 {
        return Vec::new();
    }
    let mut out: Vec<Vec<u8>> = current.get("userPassword").map(|a| a.values.clone()).unwrap_or_default();
    out.extend(kept_history(policy, current).into_iter().filter_map(|entry| history_value(&entry)));
    out
}

pub fn in_history() -> Refused {
    refused(
        ResultCode::CONSTRAINT_VIOLATION,
        "Password is in history of old passwords",
        PolicyError::PasswordInHistory,
    )
}

/// The pwdHistory change that goes with replacing `current`'s password at `now`: the old
/// values joined, the oldest beyond pwdInHistory dropped. None when history is off.
pub fn history_change(policy: &Policy, current: &Entry, now: i64) -> Option<LdifMod> {
    if policy.in_history == 0 {
        return None;
    }
    let mut kept = kept_history(policy, current);
    let stamp = format_micros(now.div_euclid(MICROS) * MICROS, false);
    for old in current.get("userPassword").map(|a| a.values.clone()).unwrap_or_default() {
        let mut value = format!("{stamp}#{OCTET_STRING}#{}#", old.len()).into_bytes();
        value.extend_from_slice(&old);
        kept.push(value);
    }
    let keep = usize::try_from(policy.in_history).unwrap_or(usize::MAX);
    let drop = kept.len().saturating_sub(keep);
    let values: Vec<Vec<u8>> = kept.into_iter().skip(drop).collect();
    Some(LdifMod { op: ModOp::Replace, attr: Attribute::new(HISTORY, values) })
}

/// pwdHistory's values, oldest first (they start with their time).
fn kept_history(policy: &Policy, current: &Entry) -> Vec<Vec<u8>> {
    let mut values = current.get(HISTORY).map(|a| a.values.clone()).unwrap_or_default();
    values.sort();
    let keep = usize::try_from(policy.in_history).unwrap_or(usize::MAX);
    let drop = values.len().saturating_sub(keep);
    values.into_iter().skip(drop).collect()
}

/// The password value of one pwdHistory value (`time#oid#length#value`).
fn history_value(entry: &[u8]) -> Option<Vec<u8>> {
    let mut parts = entry.splitn(4, |b| *b == b'#');
    let (_, _, length, value) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let length: usize = std::str::from_utf8(length).ok()?.parse().ok()?;
    value.get(..length).map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy { allow_user_change: true, ..Policy::default() }
    }

    fn proposed<'a>(
        current: Option<&'a Entry>,
        values: &'a [Vec<u8>],
        own: bool,
        old_given: bool,
    ) -> Proposed<'a> {
        Proposed { current, values, own, old_given, now: 1_800_000_000 * MICROS }
    }

    #[test]
    fn who_when_and_how_long() {
        let entry = Entry::default();
        let new = [b"short".to_vec()];
        let mut p = policy();
        assert!(check(&p, &proposed(Some(&entry), &new, true, false)).is_ok());
        p.allow_user_change = false;
        let r = check(&p, &proposed(Some(&entry), &new, true, true)).unwrap_err();
        assert_eq!(
            (r.error.code, r.policy),
            (ResultCode::INSUFFICIENT_ACCESS_RIGHTS, PolicyError::PasswordModNotAllowed)
        );
        assert!(check(&p, &proposed(Some(&entry), &new, false, false)).is_ok(), "an administrator may");
        let mut p = policy();
        p.safe_modify = true;
        let r = check(&p, &proposed(Some(&entry), &new, true, false)).unwrap_err();
        assert_eq!(r.policy, PolicyError::MustSupplyOldPassword);
        let mut p = policy();
        p.check_quality = 1;
        p.min_length = 8;
        assert_eq!(
            check(&p, &proposed(None, &new, false, false)).unwrap_err().policy,
            PolicyError::PasswordTooShort
        );
        let hashed = [b"{SSHA}aGVsbG8=".to_vec()];
        assert!(check(&p, &proposed(None, &hashed, false, false)).is_ok(), "1 lets a hash through");
        p.check_quality = 2;
        let r = check(&p, &proposed(None, &hashed, false, false)).unwrap_err();
        assert_eq!(r.policy, PolicyError::InsufficientPasswordQuality);
    }

    #[test]
    fn a_password_too_young_to_change() {
        let mut entry = Entry::default();
        let now = 1_800_000_000 * MICROS;
        entry
            .attrs
            .push(Attribute::new(CHANGED_TIME, vec![format_micros(now - 10 * MICROS, false).into_bytes()]));
        let mut p = policy();
        p.min_age = 60;
        let new = [b"anything-long".to_vec()];
        assert_eq!(
            check(&p, &proposed(Some(&entry), &new, true, false)).unwrap_err().policy,
            PolicyError::PasswordTooYoung
        );
        p.min_age = 5;
        assert!(check(&p, &proposed(Some(&entry), &new, true, false)).is_ok());
    }

    #[test]
    fn history_keeps_the_last_values_in_slapds_form() {
        let mut p = policy();
        p.in_history = 2;
        let mut entry = Entry::default();
        entry.attrs.push(Attribute::new("userPassword", vec![b"one".to_vec()]));
        let change = history_change(&p, &entry, 1_800_000_000 * MICROS).unwrap();
        let first = String::from_utf8(change.attr.values[0].clone()).unwrap();
        assert!(first.ends_with("#1.3.6.1.4.1.1466.115.121.1.40#3#one"), "{first}");
        entry.attrs.push(change.attr);
        entry.attrs[0].values = vec![b"two".to_vec()];
        let second = history_change(&p, &entry, 1_800_000_001 * MICROS).unwrap();
        entry.attrs[1] = second.attr;
        entry.attrs[0].values = vec![b"three".to_vec()];
        let third = history_change(&p, &entry, 1_800_000_002 * MICROS).unwrap();
        let kept: Vec<Vec<u8>> = third.attr.values.iter().filter_map(|v| history_value(v)).collect();
        assert_eq!(kept, vec![b"two".to_vec(), b"three".to_vec()], "the oldest goes");
        entry.attrs[1] = third.attr;
        assert_eq!(history_values(&p, &entry), vec![b"three".to_vec(), b"two".to_vec(), b"three".to_vec()]);
    }
}
