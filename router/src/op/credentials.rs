//! Checking a DN and password: what a simple bind and SASL PLAIN (once its name is mapped
//! to a DN) share. Here, below both, so that neither imports the other for it. The
//! password policy (`ppolicy`) is applied here too, so that a locked account is refused
//! whichever way it binds.

use std::sync::Arc;

use ferrodir_proto::entry::Attribute;
use ferrodir_proto::ldif::{LdifMod, ModOp};
use ferrodir_proto::message::ppolicy::{PasswordPolicyResponse, PolicyError, PolicyWarning};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::{EntryId, EntryRecord, WriteOp};

use crate::access;
use crate::config::DirectoryConfig;
use crate::error::LdapError;
use crate::password::scram::Proof;
use crate::password::{PasswordConfig, PoolError};
use crate::ppolicy::expiry::Age;
use crate::ppolicy::Governed;
use crate::requester::{Identity, Transport};
use crate::resolve::locate;
use crate::worker::Worker;

/// What checking a password gave: the identity, or the failure to answer; and what the
/// Password Policy control says about it (draft-behera-ldap-password-policy-10 §6.2).
pub struct Verified {
    pub identity: Result<Identity, LdapError>,
    pub policy: PasswordPolicyResponse,
}

/// The identity `dn` authenticates as with `password`: the rootDN against `root_password`,
/// an entry against its userPassword values. Every failure is the same invalidCredentials,
/// and takes as long (`PasswordConfig::matching`). A success against a value not in the
/// configured scheme stores the password again in it (`password_upgrade_on_bind`).
/// `transport`: the connection's, which the access rules' `auth` check reads.
pub async fn verify_password(
    worker: &Worker,
    transport: &Transport,
    dn: NormDn,
    password: &[u8],
) -> Result<Identity, LdapError> {
    verify(worker, transport, dn, password).await.identity
}

/// What a bind offers to be checked against the stored values.
pub enum Offered<'a> {
    /// A simple bind's or SASL PLAIN's password.
    Password(&'a [u8]),
    /// A SASL SCRAM client proof (op::sasl::scram): checked against the stored value the
    /// exchange chose, without the password.
    Scram(&'a Proof),
}

impl Offered<'_> {
    /// Which of `stored` matches (None: none), checked on the pool.
    async fn matching(
        &self,
        passwords: &PasswordConfig,
        stored: Vec<Vec<u8>>,
    ) -> Result<Option<usize>, PoolError> {
        match self {
            Offered::Password(password) => passwords.matching(stored, password.to_vec()).await,
            Offered::Scram(proof) => proof.matching(&passwords.pool, stored).await,
        }
    }
}

/// The values a bind as `dn` is checked against: the rootDN's `root_password`, or the
/// entry's userPassword (none when there is no such entry or the access rules give no
/// `auth` on it). SASL SCRAM reads them to choose its salt before the proof arrives.
pub async fn stored_values(
    worker: &Worker,
    transport: &Transport,
    dn: &NormDn,
) -> Result<Vec<Vec<u8>>, LdapError> {
    let config = worker.config();
    if config.is_root_dn(dn) {
        return Ok(config.root_password.iter().map(|p| p.as_bytes().to_vec()).collect());
    }
    let target = target(worker, transport, dn).await?;
    Ok(target
        .as_ref()
        .and_then(|(_, record)| record.entry.get("userPassword"))
        .map(|attr| attr.values.clone())
        .unwrap_or_default())
}

/// [`verify_password`], with the password policy's word.
///
/// A bind to an account its policy locks checks no password ([`locked_pause`]: it waits as
/// long as a failed check takes instead) and answers the same invalidCredentials: the
/// answer and its time tell nothing, only the control says accountLocked (to a client that
/// asks, like slapd with `ppolicy_use_lockout`). It records nothing.
///
/// A failure under a policy waits for its bookkeeping write (pwdFailureTime, durable
/// before the answer); a failure that records nothing (an unknown DN, no userPassword, no
/// policy, a locked account) waits as long as this worker's recent bookkeeping writes took
/// instead ([`bookkeeping_pause`]), so that the time of a failure does not tell which DNs
/// name accounts a policy governs. Both pauses are timed to the microsecond
/// (`ferrodir_shard::sleep_precisely`): tokio's millisecond timer would add up to a
/// millisecond, more than a cheap scheme's check and a sync together.
pub async fn verify(worker: &Worker, transport: &Transport, dn: NormDn, password: &[u8]) -> Verified {
    verify_offered(worker, transport, dn, Offered::Password(password)).await
}

/// [`verify`] for any [`Offered`] credential. Only a password is learnt from for
/// [`locked_pause`] (a SCRAM check costs no key derivation when keys are stored) and only a
/// password can be stored again in the configured scheme.
pub async fn verify_offered(
    worker: &Worker,
    transport: &Transport,
    dn: NormDn,
    offered: Offered<'_>,
) -> Verified {
    let invalid = || LdapError::new(ResultCode::INVALID_CREDENTIALS, "");
    let no_word = PasswordPolicyResponse::default();
    let config = &worker.config();
    if config.is_root_dn(&dn) {
        // The rootDN is no entry: no policy governs it, as in slapd.
        let stored = config.root_password.iter().map(|p| p.as_bytes().to_vec()).collect();
        let identity = match offered.matching(&config.passwords, stored).await {
            Ok(Some(_)) => Ok(Identity::Root(dn.into())),
            Ok(None) => Err(invalid()),
            Err(e) => Err(e.into()),
        };
        return Verified { identity, policy: no_word };
    }
    let target = match target(worker, transport, &dn).await {
        Ok(target) => target,
        Err(e) => return Verified { identity: Err(e), policy: no_word },
    };
    let stored = target
        .as_ref()
        .and_then(|(_, record)| record.entry.get("userPassword"))
        .map(|attr| attr.values.clone())
        .unwrap_or_default();
    // No password, no policy (slapd, ITS#7089): nothing to lock or count.
    let governed = match &target {
        Some((id, record)) if !stored.is_empty() => Governed::find(worker, *id, &dn, &record.entry).await,
        _ => None,
    };
    if let (Some(governed), Some((_, record))) = (&governed, &target) {
        if governed.locked(&record.entry) {
            let identity = match locked_pause(worker, config, &offered).await {
                Ok(()) => Err(invalid()),
                Err(e) => Err(e),
            };
            bookkeeping_pause(config).await;
            return Verified { identity, policy: PasswordPolicyResponse::error(PolicyError::AccountLocked) };
        }
    }
    let mut word = no_word;
    let started = std::time::Instant::now();
    let checked = offered.matching(&config.passwords, stored.clone()).await;
    if matches!((&checked, &offered), (Ok(None), Offered::Password(_))) {
        learn_failed_check(worker, started.elapsed());
    }
    let identity = match checked {
        Ok(Some(matched)) => {
            if let (Some(governed), Some((_, record))) = (&governed, &target) {
                match governed.age(&record.entry) {
                    Age::Expired => {
                        let policy = PasswordPolicyResponse::error(PolicyError::PasswordExpired);
                        return Verified { identity: Err(invalid()), policy };
                    }
                    Age::Grace(left) => {
                        governed.graced(worker).await;
                        word.warning = Some(PolicyWarning::GraceAuthNsRemaining(left));
                    }
                    Age::Expiring(seconds) => {
                        word.warning = Some(PolicyWarning::TimeBeforeExpiration(seconds))
                    }
                    Age::Fresh => {}
                }
                if governed.must_change(&record.entry) {
                    word.error = Some(PolicyError::ChangeAfterReset);
                }
                governed.succeeded(worker, &record.entry).await;
            }
            let identity = Identity::User(dn.into());
            if let (Some((id, _)), Some(value), Offered::Password(password)) =
                (&target, stored.get(matched), &offered)
            {
                if config.passwords.upgrades(value) {
                    upgrade(worker, config, *id, &identity.author(), value, password).await;
                }
            }
            Ok(identity)
        }
        Ok(None) => {
            match &governed {
                Some(governed) => {
                    let started = std::time::Instant::now();
                    governed.failed(worker).await;
                    learn_failure_write(config, started.elapsed());
                }
                None => bookkeeping_pause(config).await,
            }
            Err(invalid())
        }
        Err(e) => Err(e.into()),
    };
    Verified { identity, policy: word }
}

/// Replaces the matched `old` value with `password` hashed in the configured scheme. The
/// bind succeeds whether or not this does: it is logged and tried again at the next bind.
async fn upgrade(
    worker: &Worker,
    config: &DirectoryConfig,
    id: EntryId,
    dn: &str,
    old: &[u8],
    password: &[u8],
) {
    let new = match config.passwords.hash(password.to_vec()).await {
        Ok(new) => new,
        Err(e) => {
            tracing::debug!(error = %e, "password upgrade on bind: no hash");
            return;
        }
    };
    let changes = vec![
        LdifMod { op: ModOp::Delete, attr: Attribute::new("userPassword", vec![old.to_vec()]) },
        LdifMod { op: ModOp::Add, attr: Attribute::new("userPassword", vec![new]) },
    ];
    let author = dn.to_string();
    match worker.write(id.shard(), WriteOp::Modify { id, changes, author }).await {
        Ok(_) => tracing::info!(dn, scheme = config.passwords.scheme.name(), "password upgraded on bind"),
        Err(e) => {
            tracing::warn!(dn, error = %e.message, "password upgrade on bind failed; the next bind tries again")
        }
    }
}

/// A bind to a locked account checks no password (it costs no hash) but answers no sooner
/// than a failed check does: it waits as long as this worker's recent failed checks took,
/// queueing included, so that its time tells nobody the account is locked. Until a failure
/// has been timed, it checks the dummy hash once and learns from that.
async fn locked_pause(
    worker: &Worker,
    config: &DirectoryConfig,
    offered: &Offered<'_>,
) -> Result<(), LdapError> {
    let learned = worker.failed_check_us.get();
    if let Offered::Scram(_) = offered {
        // A SCRAM failure costs what checking against no value costs: do just that.
        offered.matching(&config.passwords, Vec::new()).await?;
    } else if learned == 0 {
        let started = std::time::Instant::now();
        offered.matching(&config.passwords, Vec::new()).await?;
        learn_failed_check(worker, started.elapsed());
    } else {
        ferrodir_shard::sleep_precisely(std::time::Duration::from_micros(learned)).await;
    }
    Ok(())
}

/// A failure that wrote no bookkeeping waits as long as recent ones took (nothing until
/// one has been timed: then no policy has counted a failure yet).
async fn bookkeeping_pause(config: &DirectoryConfig) {
    let learned = config.passwords.failure_write_us.load(std::sync::atomic::Ordering::Relaxed);
    if learned > 0 {
        ferrodir_shard::sleep_precisely(std::time::Duration::from_micros(learned)).await;
    }
}

/// Folds one failed check's duration into the worker's moving average.
fn learn_failed_check(worker: &Worker, took: std::time::Duration) {
    worker.failed_check_us.set(moved_average(worker.failed_check_us.get(), took));
}

/// Folds one bookkeeping write's duration into the server's moving average (a lost update
/// between two workers costs one sample, nothing more).
fn learn_failure_write(config: &DirectoryConfig, took: std::time::Duration) {
    let average = &config.passwords.failure_write_us;
    let old = average.load(std::sync::atomic::Ordering::Relaxed);
    average.store(moved_average(old, took), std::sync::atomic::Ordering::Relaxed);
}

/// `old` (microseconds; 0: none yet) moved towards `took` by an eighth.
fn moved_average(old: u64, took: std::time::Duration) -> u64 {
    let sample = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
    let next = if old == 0 { sample } else { old - old / 8 + sample / 8 };
    next.max(1)
}

/// The entry named `dn`; none when there is no such entry, or when the access rules give
/// no `auth` on its userPassword (slapd asks for it, as the still anonymous connection):
/// the bind then checks the dummy hash and fails like a wrong password, so the rules can't
/// be probed, by the answer or by its timing.
async fn target(
    worker: &Worker,
    transport: &Transport,
    dn: &NormDn,
) -> Result<Option<(EntryId, Arc<EntryRecord>)>, LdapError> {
    let Ok(located) = locate(worker, dn).await else {
        return Ok(None);
    };
    let Some(record) = worker.fetch(located.id).await? else {
        return Ok(None);
    };
    if !access::may_authenticate(&worker.config(), transport, dn, &record.entry) {
        return Ok(None);
    }
    Ok(Some((located.id, record)))
}
