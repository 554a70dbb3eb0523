//! Lockout (draft-behera-ldap-password-policy-10 §7.1 and §8.1.2, with slapd 2.5's
//! ppolicy as the reference): whether an entry's pwdAccountLockedTime refuses a bind now,
//! and the bookkeeping a bind leaves behind.
//!
//! The bookkeeping is an [`EntryUpdate`] sent to the entry's shard (`WriteOp::Update`): the
//! changes are decided there, from the entry as the shard's one writer stages it, not from
//! the copy the bind read. Two failed binds of one entry on two workers at once are staged
//! one after the other, and the second counts the first's pwdFailureTime: no failure is
//! lost, with no lock and no retry (docs/DECISIONS.md, "Counting failed binds").
//!
//! What slapd does, and this does too:
//! - A failed bind adds a pwdFailureTime value (microseconds, `YYYYMMDDHHMMSS.ffffffZ`) and
//!   keeps at most pwdMaxRecordedFailure values (the oldest go). When pwdMaxFailure is set
//!   and the failures within pwdFailureCountInterval (all of them when 0), this one
//!   included, reach it, pwdAccountLockedTime is set to now (whole seconds). Both happen
//!   whether pwdLockout is TRUE or not; pwdLockout decides whether the lock refuses binds.
//! - A bind to a locked account checks no password and records nothing.
//! - A successful bind deletes pwdFailureTime, and a lock whose pwdLockoutDuration has
//!   passed.
//! - An administrator who deletes pwdAccountLockedTime deletes pwdFailureTime with it
//!   ([`with_unlock`]), so that the next failure does not lock again at once.

use std::sync::Arc;

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::ldif::{LdifMod, ModOp};
use ferrodir_proto::schema::gentime::{format_micros, unix_micros};
use ferrodir_shard::EntryUpdate;

use crate::config::DirectoryConfig;
use crate::ppolicy::policy::Policy;

pub const FAILURE_TIME: &str = "pwdFailureTime";
pub const LOCKED_TIME: &str = "pwdAccountLockedTime";

/// The draft's value for a lock only an administrator lifts, whatever pwdLockoutDuration
/// says (§5.3.3), in its two spellings.
const LOCKED_FOR_GOOD: [&str; 2] = ["000001010000Z", "00000101000000Z"];

const MICROS: i64 = 1_000_000;

/// What an entry's pwdAccountLockedTime means at a moment, under a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// No lock, a lock not in force (pwdLockout FALSE), or one set in the future.
    Open,
    /// A bind is refused.
    Locked,
    /// A lock whose pwdLockoutDuration has passed: the account binds, and the next bind's
    /// bookkeeping deletes it.
    Expired,
}

/// Whether `entry` is locked at `now` (microseconds since the epoch) under `policy`, as
/// slapd's account_locked(): a value that is no time locks (the safe reading).
pub fn lock_state(policy: &Policy, entry: &Entry, now: i64) -> Lock {
    if !policy.lockout {
        return Lock::Open;
    }
    let Some(value) = entry.first_str(LOCKED_TIME) else { return Lock::Open };
    if LOCKED_FOR_GOOD.contains(&value.trim()) {
        return Lock::Locked;
    }
    let Some(then) = unix_micros(value) else { return Lock::Locked };
    if now < then {
        return Lock::Open;
    }
    let duration = i64::try_from(policy.lockout_duration).unwrap_or(i64::MAX).saturating_mul(MICROS);
    if duration == 0 || now < then.saturating_add(duration) {
        Lock::Locked
    } else {
        Lock::Expired
    }
}

/// A failed bind's bookkeeping, decided on the staged entry.
#[derive(Debug)]
pub struct RecordFailure {
    pub policy: Arc<Policy>,
    /// When the bind failed, microseconds since the epoch.
    pub now: i64,
}

impl EntryUpdate for RecordFailure {
    fn changes(&self, entry: &Entry) -> Option<Vec<LdifMod>> {
        let policy = &self.policy;
        let lock = lock_state(policy, entry, self.now);
        if lock == Lock::Locked {
            // Locked meanwhile by a failure staged before this one: a locked account's
            // failures are not recorded.
            return None;
        }
        let mut times: Vec<(i64, Vec<u8>)> = entry
            .get(FAILURE_TIME)
            .map(|a| a.values.iter().map(|v| (micros_of(v), v.clone())).collect())
            .unwrap_or_default();
        times.sort();
        let interval =
            i64::try_from(policy.failure_count_interval).unwrap_or(i64::MAX).saturating_mul(MICROS);
        let counted =
            times.iter().filter(|(t, _)| interval == 0 || self.now <= t.saturating_add(interval)).count();
        // The new value, unique even when another failure was stamped the same microsecond.
        let mut at = self.now;
        while times.iter().any(|(t, _)| *t == at) {
            at += 1;
        }
        let keep = usize::try_from(policy.max_recorded_failure.max(1)).unwrap_or(usize::MAX);
        let drop = (times.len() + 1).saturating_sub(keep);
        let mut values: Vec<Vec<u8>> = times.into_iter().skip(drop).map(|(_, v)| v).collect();
        values.push(format_micros(at, true).into_bytes());
        let mut changes = vec![replace(FAILURE_TIME, values)];
        let reached = policy.max_failure > 0 && counted as u64 + 1 >= policy.max_failure;
        if reached {
            let locked_at = self.now.div_euclid(MICROS) * MICROS;
            changes.push(replace(LOCKED_TIME, vec![format_micros(locked_at, false).into_bytes()]));
        } else if lock == Lock::Expired {
            changes.push(replace(LOCKED_TIME, Vec::new()));
        }
        Some(changes)
    }
}

/// A successful bind's bookkeeping: its failures, and an expired lock, go.
#[derive(Debug)]
pub struct RecordSuccess {
    pub policy: Arc<Policy>,
    pub now: i64,
}

impl RecordSuccess {
    /// Whether `entry` (as the bind read it) has anything to clear: most successful binds
    /// write nothing.
    pub fn needed(&self, entry: &Entry) -> bool {
        entry.get(FAILURE_TIME).is_some() || lock_state(&self.policy, entry, self.now) == Lock::Expired
    }
}

impl EntryUpdate for RecordSuccess {
    fn changes(&self, entry: &Entry) -> Option<Vec<LdifMod>> {
        let mut changes = Vec::new();
        if entry.get(FAILURE_TIME).is_some() {
            changes.push(replace(FAILURE_TIME, Vec::new()));
        }
        if lock_state(&self.policy, entry, self.now) == Lock::Expired {
            changes.push(replace(LOCKED_TIME, Vec::new()));
        }
        (!changes.is_empty()).then_some(changes)
    }
}

/// An administrator's Modify that deletes pwdAccountLockedTime (a delete, or a replace
/// with no values) deletes pwdFailureTime too, as slapd's ppolicy_modify does: the
/// failures that locked the account would otherwise lock it again at the next one.
pub fn with_unlock(config: &DirectoryConfig, changes: &mut Vec<LdifMod>) {
    let names = |change: &LdifMod, wanted: &str| {
        let base = change.attr.name.split(';').next().unwrap_or_default();
        config.schema.attribute(base).is_some_and(|t| t.name().eq_ignore_ascii_case(wanted))
    };
    let unlocks = changes.iter().any(|c| {
        names(c, LOCKED_TIME)
            && (c.op == ModOp::Delete || (c.op == ModOp::Replace && c.attr.values.is_empty()))
    });
    if unlocks && !changes.iter().any(|c| names(c, FAILURE_TIME)) {
        changes.push(replace(FAILURE_TIME, Vec::new()));
    }
}

/// Replace `name` with `values`; with none, deletes it if present (RFC 4511 §4.6).
fn replace(name: &str, values: Vec<Vec<u8>>) -> LdifMod {
    LdifMod { op: ModOp::Replace, attr: Attribute::new(name, values) }
}

/// A pwdFailureTime value's instant; one that is no time sorts first (dropped first).
fn micros_of(value: &[u8]) -> i64 {
    std::str::from_utf8(value).ok().and_then(unix_micros).unwrap_or(i64::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_failure: u64, duration: u64, interval: u64) -> Arc<Policy> {
        let config = crate::testkit::test_config();
        let text = |n: u64| n.to_string().into_bytes();
        let entry = Entry::new(vec![
            Attribute::new("pwdAttribute", vec![b"userPassword".to_vec()]),
            Attribute::new("pwdLockout", vec![b"TRUE".to_vec()]),
            Attribute::new("pwdMaxFailure", vec![text(max_failure)]),
            Attribute::new("pwdLockoutDuration", vec![text(duration)]),
            Attribute::new("pwdFailureCountInterval", vec![text(interval)]),
        ]);
        Arc::new(Policy::from_entry(&config, "cn=p", &entry).unwrap())
    }

    /// `entry` with `update`'s changes (there must be some) applied the way the shard
    /// applies a replace.
    fn apply(entry: &mut Entry, update: &dyn EntryUpdate) {
        let changes = update.changes(entry).expect("changes");
        for change in changes {
            entry.remove(&change.attr.name);
            if !change.attr.values.is_empty() {
                entry.attrs.push(change.attr);
            }
        }
    }

    const T0: i64 = 1_796_417_246 * MICROS;

    #[test]
    fn the_failure_that_reaches_pwd_max_failure_locks() {
        let policy = policy(3, 0, 0);
        let mut entry = Entry::new(vec![]);
        for i in 0..3 {
            assert_eq!(lock_state(&policy, &entry, T0 + i), Lock::Open);
            let update = RecordFailure { policy: policy.clone(), now: T0 + i * 1000 };
            apply(&mut entry, &update);
        }
        assert_eq!(entry.get(FAILURE_TIME).unwrap().values.len(), 3);
        assert_eq!(entry.first_str(LOCKED_TIME), Some("20261204204726Z"));
        assert_eq!(entry.get(FAILURE_TIME).unwrap().values[0], b"20261204204726.000000Z");
        // Locked for good (duration 0): nothing more is recorded.
        assert_eq!(lock_state(&policy, &entry, T0 + 86_400 * MICROS), Lock::Locked);
        assert!(RecordFailure { policy: policy.clone(), now: T0 + 5 }.changes(&entry).is_none());
    }

    #[test]
    fn failures_outside_the_interval_do_not_count_and_old_ones_go() {
        let policy = policy(3, 0, 10);
        let mut entry = Entry::new(vec![]);
        // Two failures, then one 11 s later: the first two no longer count.
        for now in [T0, T0 + MICROS, T0 + 12 * MICROS] {
            apply(&mut entry, &RecordFailure { policy: policy.clone(), now });
        }
        assert!(entry.get(LOCKED_TIME).is_none());
        // At most pwdMaxFailure (3) values are kept: the oldest is dropped. One within the
        // interval plus this one: not yet.
        apply(&mut entry, &RecordFailure { policy: policy.clone(), now: T0 + 13 * MICROS });
        let kept = &entry.get(FAILURE_TIME).unwrap().values;
        assert_eq!(kept.len(), 3);
        assert!(!kept.contains(&format_micros(T0, true).into_bytes()));
        assert!(entry.get(LOCKED_TIME).is_none());
        // Two within the interval plus this one: locked.
        apply(&mut entry, &RecordFailure { policy: policy.clone(), now: T0 + 14 * MICROS });
        assert!(entry.get(LOCKED_TIME).is_some());
    }

    #[test]
    fn a_lock_expires_after_its_duration_and_a_success_clears_it() {
        let policy = policy(1, 2, 0);
        let mut entry = Entry::new(vec![]);
        apply(&mut entry, &RecordFailure { policy: policy.clone(), now: T0 + 400_000 });
        // Locked at the whole second T0, for 2 s.
        assert_eq!(lock_state(&policy, &entry, T0 + 1_999_999), Lock::Locked);
        assert_eq!(lock_state(&policy, &entry, T0 + 2 * MICROS), Lock::Expired);
        let success = RecordSuccess { policy: policy.clone(), now: T0 + 2 * MICROS };
        assert!(success.needed(&entry));
        apply(&mut entry, &success);
        assert!(entry.get(LOCKED_TIME).is_none() && entry.get(FAILURE_TIME).is_none());
        assert!(!success.needed(&entry) && success.changes(&entry).is_none());
    }

    #[test]
    fn locks_set_for_good_or_in_the_future_or_without_pwd_lockout() {
        let policy = policy(3, 2, 0);
        let at = |value: &str| Entry::new(vec![Attribute::new(LOCKED_TIME, vec![value.as_bytes().to_vec()])]);
        assert_eq!(lock_state(&policy, &at("000001010000Z"), T0), Lock::Locked);
        assert_eq!(lock_state(&policy, &at("20991231000000Z"), T0), Lock::Open);
        assert_eq!(lock_state(&policy, &at("garbage"), T0), Lock::Locked);
        let mut lax = (*policy).clone();
        lax.lockout = false;
        assert_eq!(lock_state(&lax, &at("000001010000Z"), T0), Lock::Open);
    }

    #[test]
    fn concurrent_failures_in_one_microsecond_get_distinct_values() {
        let policy = policy(0, 0, 0);
        let mut entry = Entry::new(vec![]);
        for _ in 0..3 {
            apply(&mut entry, &RecordFailure { policy: policy.clone(), now: T0 });
        }
        let values = &entry.get(FAILURE_TIME).unwrap().values;
        assert_eq!(values.len(), 3);
        assert_eq!(values[2], b"20261204204726.000002Z");
        // No pwdMaxFailure: counted, never locked.
        assert!(entry.get(LOCKED_TIME).is_none());
    }

    #[test]
    fn deleting_the_lock_deletes_the_failures() {
        let config = crate::testkit::test_config();
        let delete = |name: &str, op: ModOp| LdifMod { op, attr: Attribute::new(name, Vec::new()) };
        let mut changes = vec![delete("pwdAccountLockedTime", ModOp::Delete)];
        with_unlock(&config, &mut changes);
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[1].attr.name, FAILURE_TIME);
        let mut changes = vec![delete("PWDACCOUNTLOCKEDTIME", ModOp::Replace)];
        with_unlock(&config, &mut changes);
        assert_eq!(changes.len(), 2);
        let mut changes = vec![delete("pwdReset", ModOp::Delete)];
        with_unlock(&config, &mut changes);
        assert_eq!(changes.len(), 1);
    }
}
