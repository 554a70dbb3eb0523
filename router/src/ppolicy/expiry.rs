//! Password aging (draft-behera-ldap-password-policy-10 §7.1, §8.1.2 and §8.2, slapd 2.5's
//! ppolicy as the reference): pwdChangedTime stamped when a password is set, the warning
//! before it expires (timeBeforeExpiration), grace binds after (pwdGraceUseTime,
//! graceAuthNsRemaining), and passwordExpired once they are spent.
//!
//! What slapd does, and this does too:
//! - With pwdMaxAge or pwdMinAge set, an Add with a password, a Modify that sets one and a
//!   Password Modify stamp pwdChangedTime (whole seconds) and delete pwdGraceUseTime.
//! - A bind with the right password, pwdMaxAge seconds or more after pwdChangedTime: with
//!   grace binds left (pwdGraceAuthNLimit minus the pwdGraceUseTime values), it succeeds,
//!   adds a pwdGraceUseTime value and says how many remain; without, it answers
//!   invalidCredentials (49) and the control says passwordExpired.
//! - Within pwdExpireWarning seconds of expiry, the control says how many seconds remain.
//! - No pwdChangedTime: the password never expires.

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::ldif::{LdifMod, ModOp};
use ferrodir_proto::schema::gentime::{format_micros, unix_micros};
use ferrodir_shard::EntryUpdate;

use crate::ppolicy::policy::Policy;

pub const CHANGED_TIME: &str = "pwdChangedTime";
pub const GRACE_USE_TIME: &str = "pwdGraceUseTime";

const MICROS: i64 = 1_000_000;

/// How old a password is, as a bind with it sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Age {
    /// Not expiring soon, or not aging at all.
    Fresh,
    /// Expires in this many seconds (within pwdExpireWarning).
    Expiring(u32),
    /// Expired; this bind is a grace bind, after which this many remain.
    Grace(u32),
    /// Expired, no grace bind left.
    Expired,
}

/// The age of `entry`'s password at `now` (microseconds since the epoch) under `policy`.
pub fn age(policy: &Policy, entry: &Entry, now: i64) -> Age {
    if policy.max_age == 0 {
        return Age::Fresh;
    }
    let Some(changed) = entry.first_str(CHANGED_TIME).and_then(unix_micros) else { return Age::Fresh };
    let max_age = i64::try_from(policy.max_age).unwrap_or(i64::MAX).saturating_mul(MICROS);
    let expires = changed.saturating_add(max_age);
    if now >= expires {
        let used = entry.get(GRACE_USE_TIME).map_or(0, |a| a.values.len() as u64);
        return match policy.grace_authn_limit.checked_sub(used + 1) {
            Some(left) => Age::Grace(u32::try_from(left).unwrap_or(u32::MAX)),
            None => Age::Expired,
        };
    }
    let left = (expires - now) / MICROS;
    let warning = i64::try_from(policy.expire_warning).unwrap_or(i64::MAX);
    if policy.expire_warning > 0 && left <= warning {
        Age::Expiring(u32::try_from(left).unwrap_or(u32::MAX))
    } else {
        Age::Fresh
    }
}

/// Whether `policy` ages passwords: setting one then stamps pwdChangedTime.
pub fn ages(policy: &Policy) -> bool {
    policy.max_age > 0 || policy.min_age > 0
}

/// The changes that go with a new password under an aging policy, at `now`.
pub fn on_change(now: i64) -> Vec<LdifMod> {
    let at = now.div_euclid(MICROS) * MICROS;
    vec![
        replace(CHANGED_TIME, vec![format_micros(at, false).into_bytes()]),
        replace(GRACE_USE_TIME, Vec::new()),
    ]
}

/// An Add's entry with a password, under an aging policy: stamped with pwdChangedTime.
pub fn stamp_added(entry: &mut Entry, now: i64) {
    let at = now.div_euclid(MICROS) * MICROS;
    entry.attrs.retain(|a| !a.name.eq_ignore_ascii_case(CHANGED_TIME));
    entry.attrs.push(Attribute::new(CHANGED_TIME, vec![format_micros(at, false).into_bytes()]));
}

/// A grace bind's bookkeeping: one pwdGraceUseTime value more, decided on the staged entry.
#[derive(Debug)]
pub struct RecordGrace {
    pub now: i64,
}

impl EntryUpdate for RecordGrace {
    fn changes(&self, entry: &Entry) -> Option<Vec<LdifMod>> {
        let mut values: Vec<Vec<u8>> =
            entry.get(GRACE_USE_TIME).map(|a| a.values.clone()).unwrap_or_default();
        let mut at = self.now;
        while values.iter().any(|v| v.as_slice() == format_micros(at, true).as_bytes()) {
            at += 1;
        }
        values.push(format_micros(at, true).into_bytes());
        Some(vec![replace(GRACE_USE_TIME, values)])
    }
}

fn replace(name: &str, values: Vec<Vec<u8>>) -> LdifMod {
    LdifMod { op: ModOp::Replace, attr: Attribute::new(name, values) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_age: u64, warning: u64, grace: u64) -> Policy {
        Policy { max_age, expire_warning: warning, grace_authn_limit: grace, ..Policy::default() }
    }

    fn entry(changed_micros: i64, grace_used: usize) -> Entry {
        let mut entry = Entry::default();
        entry
            .attrs
            .push(Attribute::new(CHANGED_TIME, vec![format_micros(changed_micros, false).into_bytes()]));
        if grace_used > 0 {
            let values = (0..grace_used).map(|i| format_micros(i as i64, true).into_bytes()).collect();
            entry.attrs.push(Attribute::new(GRACE_USE_TIME, values));
        }
        entry
    }

    #[test]
    fn a_password_warns_expires_then_spends_its_grace_binds() {
        let changed = 1_800_000_000 * MICROS;
        let p = policy(100, 30, 2);
        assert_eq!(age(&p, &entry(changed, 0), changed + 10 * MICROS), Age::Fresh);
        assert_eq!(age(&p, &entry(changed, 0), changed + 80 * MICROS), Age::Expiring(20));
        assert_eq!(age(&p, &entry(changed, 0), changed + 100 * MICROS), Age::Grace(1));
        assert_eq!(age(&p, &entry(changed, 1), changed + 200 * MICROS), Age::Grace(0));
        assert_eq!(age(&p, &entry(changed, 2), changed + 200 * MICROS), Age::Expired);
        // No aging, or no pwdChangedTime: never expires.
        assert_eq!(age(&policy(0, 30, 0), &entry(changed, 0), i64::MAX / 2), Age::Fresh);
        assert_eq!(age(&p, &Entry::default(), i64::MAX / 2), Age::Fresh);
    }

    #[test]
    fn grace_binds_add_a_value_each() {
        let update = RecordGrace { now: 5 * MICROS };
        let first = update.changes(&Entry::default()).unwrap();
        assert_eq!(first[0].attr.values.len(), 1);
        let mut after = Entry::default();
        after.attrs.push(first[0].attr.clone());
        assert_eq!(update.changes(&after).unwrap()[0].attr.values.len(), 2, "a value per bind, never merged");
    }
}
