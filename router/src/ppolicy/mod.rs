//! Password policy, as OpenLDAP's ppolicy overlay (draft-behera-ldap-password-policy-10,
//! slapd 2.5 as the reference).
//!
//! - `policy`: a pwdPolicy entry's settings, and the check of pwdAttribute on Add/Modify.
//! - `lookup`: which policy governs an entry (pwdPolicySubentry, else `[ppolicy]
//!   default_policy`), read from the tree at bind time and kept per worker (`cache`).
//! - `lockout`: whether pwdAccountLockedTime refuses a bind, and the bookkeeping of failed
//!   and successful binds, decided in the entry's shard.
//!
//! What a bind asks of it is [`Governed`]: found once the bind has read its entry, asked
//! whether the account is locked, then told how the password check went. Expiry, grace
//! binds (`expiry`) plug in here too; pwdReset/pwdMustChange, history and quality will,
//! reading [`policy::Policy`]'s fields and adding their changes to the same updates.
//!
//! What a password change asks of it is [`new_password`]: the rules a new password must
//! pass (`change`), and the changes that go with it (pwdChangedTime under an aging policy,
//! pwdHistory).

pub mod cache;
pub mod change;
pub mod expiry;
pub mod lockout;
pub mod lookup;
pub mod policy;
pub mod reset;

use std::sync::Arc;

use ferrodir_proto::entry::Entry;
use ferrodir_proto::NormDn;
use ferrodir_shard::{EntryId, WriteOp};

use crate::ppolicy::lockout::{lock_state, Lock, RecordFailure, RecordSuccess};
use crate::ppolicy::policy::Policy;
use crate::worker::Worker;

/// A bind to an entry a policy governs.
pub struct Governed {
    pub policy: Arc<Policy>,
    id: EntryId,
    /// Whether the entry lies in a subtree this server replicates from a provider: its
    /// state is the provider's, so a bind here writes none (docs/OPERATIONS.md).
    replicated: bool,
    /// When the bind is judged, microseconds since the epoch.
    now: i64,
}

impl Governed {
    /// The policy governing the entry `id`, named `dn`, as the bind read it; None when no
    /// policy does.
    pub async fn find(worker: &Worker, id: EntryId, dn: &NormDn, entry: &Entry) -> Option<Self> {
        let policy = lookup::policy_for(worker, entry).await?;
        let replicated = worker.config().replicated.iter().any(|area| area.read_only_at(dn));
        Some(Self { policy, id, replicated, now: now_micros() })
    }

    /// Whether the account's lock refuses this bind.
    pub fn locked(&self, entry: &Entry) -> bool {
        lock_state(&self.policy, entry, self.now) == Lock::Locked
    }

    /// The password was wrong: one failure more, and the lock if it is the last allowed.
    pub async fn failed(&self, worker: &Worker) {
        let update = RecordFailure { policy: self.policy.clone(), now: self.now };
        self.write(worker, Arc::new(update)).await;
    }

    /// Whether the password must be changed before anything else (`reset`).
    pub fn must_change(&self, entry: &Entry) -> bool {
        reset::must_change(&self.policy, entry)
    }

    /// How old the password is, for a bind with the right one (`expiry`).
    pub fn age(&self, entry: &Entry) -> expiry::Age {
        expiry::age(&self.policy, entry, self.now)
    }

    /// A grace bind after expiry: one pwdGraceUseTime value more.
    pub async fn graced(&self, worker: &Worker) {
        let update = expiry::RecordGrace { now: self.now };
        self.write(worker, Arc::new(update)).await;
    }

    /// The password was right: failures and an expired lock go (no write when there are
    /// none, the usual case).
    pub async fn succeeded(&self, worker: &Worker, entry: &Entry) {
        let update = RecordSuccess { policy: self.policy.clone(), now: self.now };
        if update.needed(entry) {
            self.write(worker, Arc::new(update)).await;
        }
    }

    /// Sends the bookkeeping to the entry's shard and waits until it is durable, so that the
    /// client's next bind, on any connection, sees it. A failure to write is logged and
    /// changes nothing in the bind's answer.
    async fn write(&self, worker: &Worker, update: Arc<dyn ferrodir_shard::EntryUpdate>) {
        if self.replicated {
            return;
        }
        // slapd writes its bookkeeping as the rootDN: modifiersName says so.
        let author = worker.config().root_dn.as_ref().map(|dn| dn.dn.to_string()).unwrap_or_default();
        let op = WriteOp::Update { id: self.id, update, author };
        if let Err(e) = worker.write(self.id.shard(), op).await {
            tracing::warn!(policy = %self.policy.dn, error = %e.message, "password policy state not written");
        }
    }
}

/// Checks new password `values` against the policy that governs `governing` (the entry as
/// it stands, or an Add's) and returns the changes that go with them: pwdChangedTime under
/// an aging policy, pwdHistory when history is kept. `current`: the entry as it stands (None
/// for an Add); `own`: the requester changes their own password; `old_given`: the change
/// names the old password. The rootDN passes every
/// rule (slapd's too). A refusal sets the operation's Password Policy response (`ctx`).
pub async fn new_password(
    ctx: &crate::op::context::OpContext,
    governing: &Entry,
    current: Option<&Entry>,
    values: &[Vec<u8>],
    own: bool,
    old_given: bool,
) -> crate::error::LdapResultOf<Vec<ferrodir_proto::ldif::LdifMod>> {
    let Some(policy) = lookup::policy_for(&ctx.worker, governing).await else { return Ok(Vec::new()) };
    let now = now_micros();
    if !matches!(ctx.identity, crate::requester::Identity::Root(_)) {
        let proposed = change::Proposed { current, values, own, old_given, now };
        if let Err(refused) = change::check(&policy, &proposed) {
            ctx.set_policy_error(refused.policy);
            return Err(refused.error);
        }
        if let Some(current) = current {
            let history = change::history_values(&policy, current);
            if !history.is_empty() {
                for value in values.iter().filter(|v| !crate::password::is_hashed(v)) {
                    if ctx.config.passwords.matching(history.clone(), value.clone()).await?.is_some() {
                        let refused = change::in_history();
                        ctx.set_policy_error(refused.policy);
                        return Err(refused.error);
                    }
                }
            }
        }
    }
    let mut more = Vec::new();
    if expiry::ages(&policy) {
        more.extend(expiry::on_change(now));
    }
    if let Some(current) = current {
        more.extend(change::history_change(&policy, current, now));
    }
    more.extend(reset::on_change(&policy, current, own));
    if own {
        // The connection may do more than change its password again.
        ctx.must_change.set(false);
    }
    Ok(more)
}

/// The Add of `entry` with a password: stamped with pwdChangedTime under an aging policy.
/// (No pwdReset: slapd 2.5 sets it only when someone else changes an existing password.)
pub async fn stamp_added(worker: &Worker, entry: &mut Entry) {
    if entry.get("userPassword").is_none() {
        return;
    }
    if let Some(policy) = lookup::policy_for(worker, entry).await {
        if expiry::ages(&policy) {
            expiry::stamp_added(entry, now_micros());
        }
    }
}

fn now_micros() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use ferrodir_proto::message::SearchScope;
    use ferrodir_proto::ResultCode;

    use crate::testkit::{run, TestDirectory, ROOT_DN, ROOT_PASSWORD, USER_PASSWORD};

    const POLICY: &str = "cn=policy,dc=example,dc=com";
    const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
    const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";

    /// Four wrong binds at once on four sessions, under pwdMaxFailure 4: they read the
    /// entry before their password checks (on the hash pool) end, so before any of them
    /// writes; only the shard's staged state can count them all.
    #[test]
    fn failures_sent_at_once_all_count_and_lock_at_the_limit() {
        run(async {
            let directory = TestDirectory::with_people_configured(2, |config| {
                config.ppolicy.default_policy = Some(config.dn_rules().parse(POLICY).unwrap());
            })
            .await;
            let mut root = directory.connect();
            assert_eq!(root.bind(ROOT_DN, ROOT_PASSWORD).await, ResultCode::SUCCESS);
            let policy = root
                .add(
                    POLICY,
                    &[
                        ("objectClass", &["organizationalRole", "pwdPolicy"]),
                        ("cn", &["policy"]),
                        ("pwdAttribute", &["userPassword"]),
                        ("pwdLockout", &["TRUE"]),
                        ("pwdMaxFailure", &["4"]),
                    ],
                )
                .await;
            assert_eq!(policy.result_code, ResultCode::SUCCESS, "{policy:?}");
            let (mut a, mut b, mut c, mut d) =
                (directory.connect(), directory.connect(), directory.connect(), directory.connect());
            let codes =
                tokio::join!(a.bind(ALICE, "x"), b.bind(ALICE, "x"), c.bind(ALICE, "x"), d.bind(ALICE, "x"));
            let invalid = ResultCode::INVALID_CREDENTIALS;
            assert_eq!(codes, (invalid, invalid, invalid, invalid));
            let found =
                root.search(ALICE, SearchScope::BaseObject, "(objectClass=*)", &["pwdFailureTime"]).await;
            assert_eq!(found.values(ALICE, "pwdFailureTime").len(), 4);
            assert_eq!(a.bind(ALICE, USER_PASSWORD).await, ResultCode::INVALID_CREDENTIALS, "locked");
            // Another entry under the same policy binds; the rootDN is never governed.
            assert_eq!(b.bind(BOB, USER_PASSWORD).await, ResultCode::SUCCESS);
            assert_eq!(c.bind(ROOT_DN, "x").await, ResultCode::INVALID_CREDENTIALS);
            assert_eq!(c.bind(ROOT_DN, ROOT_PASSWORD).await, ResultCode::SUCCESS);
        });
    }
}
