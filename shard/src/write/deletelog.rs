//! The shard's durable, bounded delete log: what a refresh with a cookie needs to send a
//! delete phase (RFC 4533 §3.3.2, syncIdSet with refreshDeletes TRUE) instead of a present
//! phase, as slapd's syncprov-sessionlog.
//!
//! Every delete, and every Modify DN (the entry's old DN leaves any scope that held it),
//! stages one record in the same batch as the change: key `L ‖ CSN` (the clock tick of the
//! change's own CSN, big-endian, so the log reads in CSN order), value the entry's uuid, id,
//! whether it was a container (a subtree moved with it) and its old DN. So a record is
//! durable exactly when its change is: a crash loses or keeps both.
//!
//! The log is bounded by `limits.sync_delete_log_max` records per shard. Staging the record
//! that makes one too many also deletes the oldest and stores its CSN as the log's minimum
//! (`meta:deletelog_min`), in the same batch: every change at or below the minimum may be
//! missing from the log, every one above it is there. A shard whose log never recorded
//! anything (a data directory older than the log) counts its highest committed CSN as the
//! minimum, so no cookie from before the log existed is answered from it.
//!
//! The log is kept once replication is in use, not before: a server that never answered a
//! sync search has no consumer to answer from it, and a log of 100,000 records (about 150
//! bytes each in redb) per shard would be the largest thing in a small directory's files.
//! Until a sync search reaches the shard (`ShardActor`'s `KeepDeleteLog`, sent before the
//! search reads the watermark that becomes its cookie), a delete or a Modify DN stages no
//! record and raises the minimum to its own CSN instead, so "every change above the
//! minimum is in the log" holds either way: a cookie from before a change that was not
//! logged gets a present phase. Once kept, the log stays kept (a stored mark,
//! `meta:deletelog_kept`, and any record at all say so after a restart).
//!
//! The actor keeps the CSNs of its log in memory (8 bytes each, at most the bound plus one
//! batch), so trimming needs no read; it reloads them from the snapshot after a failed
//! commit, whose records never landed.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::{ShardError, ShardResult};
use crate::id::EntryId;
use crate::index::keys;
use crate::skeleton::SkeletonCell;
use crate::storage::{KvSnapshot, Mutation, Table};

/// slapd's syncprov-sessionlog is sized by the operator; this is ours when unset.
pub const DEFAULT_MAX: usize = 100_000;

/// What a shard's delete log is built with ([`crate::ShardActor::with_delete_log`]): its
/// bound (`limits.sync_delete_log_max`) and the published skeleton, to name a deleted
/// entry's old DN (entries store only their RDN and parent id; the parent, a container, is
/// in the skeleton).
#[derive(Clone)]
pub struct DeleteLogSettings {
    max: usize,
    skeleton: Option<Arc<SkeletonCell>>,
}

impl Default for DeleteLogSettings {
    /// [`DEFAULT_MAX`] and no skeleton (unit tests of a lone shard).
    fn default() -> Self {
        Self { max: DEFAULT_MAX, skeleton: None }
    }
}

impl DeleteLogSettings {
    /// A log of at most `max` records (at least 1), naming old DNs from `skeleton`.
    pub fn new(max: usize, skeleton: Arc<SkeletonCell>) -> Self {
        Self { max: max.max(1), skeleton: Some(skeleton) }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// The DN an entry under `parent` named `rdn` has now; just the RDN without a skeleton.
    pub fn dn_of(&self, parent: EntryId, rdn: &str) -> String {
        match &self.skeleton {
            Some(cell) => cell.load().dn_of_child(parent, rdn),
            None => rdn.to_string(),
        }
    }
}

/// One entry that left its DN: deleted, or moved by a Modify DN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// The clock tick of the change's CSN.
    pub csn: u64,
    pub uuid: [u8; 16],
    pub id: EntryId,
    /// A Modify DN of a container: its subtree moved with it.
    pub subtree: bool,
    /// Deleted (true) or moved (false).
    pub deleted: bool,
    pub old_dn: String,
}

const FLAG_SUBTREE: u8 = 1;
const FLAG_DELETED: u8 = 2;

pub fn key(csn: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.push(Table::DeleteLog as u8);
    key.extend_from_slice(&csn.to_be_bytes());
    key
}

pub fn prefix() -> Vec<u8> {
    vec![Table::DeleteLog as u8]
}

const MIN_KEY: &str = "deletelog_min";
/// Stored once the log is kept (replication in use); absent before.
pub const KEPT_KEY: &str = "deletelog_kept";

impl LogRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(25 + self.old_dn.len());
        let mut flags = 0;
        if self.subtree {
            flags |= FLAG_SUBTREE;
        }
        if self.deleted {
            flags |= FLAG_DELETED;
        }
        out.push(flags);
        out.extend_from_slice(&self.uuid);
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(self.old_dn.as_bytes());
        out
    }

    /// A stored record from its key and value.
    pub fn decode(key: &[u8], value: &[u8]) -> ShardResult<Self> {
        let bad = || ShardError::Corrupt(crate::entry::codec::CorruptRecord("delete log record"));
        let csn = key
            .get(1..9)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_be_bytes)
            .ok_or_else(bad)?;
        if key.len() != 9 || key.first() != Some(&(Table::DeleteLog as u8)) {
            return Err(bad());
        }
        let flags = *value.first().ok_or_else(bad)?;
        let uuid = value.get(1..17).and_then(|b| <[u8; 16]>::try_from(b).ok()).ok_or_else(bad)?;
        let id = value.get(17..25).and_then(EntryId::from_be_slice).ok_or_else(bad)?;
        let old_dn = std::str::from_utf8(value.get(25..).ok_or_else(bad)?).map_err(|_| bad())?.to_string();
        Ok(Self {
            csn,
            uuid,
            id,
            subtree: flags & FLAG_SUBTREE != 0,
            deleted: flags & FLAG_DELETED != 0,
            old_dn,
        })
    }
}

fn stored_u64(snapshot: &dyn KvSnapshot, name: &str) -> ShardResult<Option<u64>> {
    Ok(snapshot
        .get(&keys::meta(name))?
        .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
        .map(u64::from_be_bytes))
}

/// The log's minimum in `snapshot`: changes at or below it may be missing.
pub fn stored_min(snapshot: &dyn KvSnapshot) -> ShardResult<u64> {
    match stored_u64(snapshot, MIN_KEY)? {
        Some(min) => Ok(min),
        None => Ok(stored_u64(snapshot, "csn_max")?.unwrap_or(0)),
    }
}

/// What a refresh reads of one shard's log.
#[derive(Debug, Default)]
pub struct LogView {
    pub min: u64,
    /// The records after the cookie's CSN, in CSN order.
    pub records: Vec<LogRecord>,
}

/// The records of `snapshot`'s log with a CSN above `after`, and its minimum.
pub fn read(snapshot: &dyn KvSnapshot, after: u64) -> ShardResult<LogView> {
    let min = stored_min(snapshot)?;
    let mut records = Vec::new();
    let mut failure = None;
    let from = key(after.saturating_add(1));
    snapshot.scan_from(&prefix(), &from, &mut |k, v| match LogRecord::decode(k, v) {
        Ok(record) => {
            records.push(record);
            true
        }
        Err(e) => {
            failure = Some(e);
            false
        }
    })?;
    match failure {
        Some(e) => Err(e),
        None => Ok(LogView { min, records }),
    }
}

/// The actor's picture of its log: the CSNs it holds, oldest first, and its minimum.
#[derive(Debug, Default)]
pub struct DeleteLog {
    csns: VecDeque<u64>,
    min: u64,
    /// Whether `meta:deletelog_min` holds `min` (a log from before this one's first record
    /// has none; a change not logged raises `min` past what is stored).
    min_stored: bool,
    /// Whether changes are logged: replication is in use (`keep`).
    kept: bool,
}

impl DeleteLog {
    /// Reads the log's CSNs and minimum from the shard's committed state.
    pub fn load(snapshot: &dyn KvSnapshot) -> ShardResult<Self> {
        let csns = keys::numbers_under(snapshot, &prefix())?;
        let stored = stored_u64(snapshot, MIN_KEY)?;
        let marked = snapshot.get(&keys::meta(KEPT_KEY))?.is_some();
        Ok(Self {
            kept: marked || !csns.is_empty(),
            csns,
            min: stored_min(snapshot)?,
            min_stored: stored.is_some(),
        })
    }

    /// Whether changes are logged now.
    pub fn is_kept(&self) -> bool {
        self.kept
    }

    /// Logs every change from now on (a sync search reached the shard). Whether the log was
    /// not kept before: then the caller stores the mark (`KEPT_KEY`), so a restart keeps it.
    pub fn keep(&mut self) -> bool {
        !std::mem::replace(&mut self.kept, true)
    }

    pub fn len(&self) -> usize {
        self.csns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.csns.is_empty()
    }

    pub fn min(&self) -> u64 {
        self.min
    }

    /// Stores the minimum if what is stored is not it (a shard older than the log: its
    /// highest committed CSN when it started, so that later commits don't move it; or
    /// raised by changes not logged). Once per commit.
    pub fn settle(&mut self, out: &mut Vec<Mutation>) {
        if !self.min_stored {
            out.push(Mutation { key: keys::meta(MIN_KEY), value: Some(self.min.to_be_bytes().to_vec()) });
            self.min_stored = true;
        }
    }

    /// The mutations that log `record` within a bound of `max` records: its put, the
    /// oldest records' deletes and the new minimum. While the log is not kept, only the
    /// minimum moves (to the record's CSN), stored by the commit's `settle`.
    pub fn record(&mut self, record: &LogRecord, max: usize, out: &mut Vec<Mutation>) {
        if !self.kept {
            if record.csn > self.min {
                self.min = record.csn;
                self.min_stored = false;
            }
            return;
        }
        out.push(Mutation { key: key(record.csn), value: Some(record.encode()) });
        self.csns.push_back(record.csn);
        let mut trimmed = false;
        while self.csns.len() > max.max(1) {
            let Some(oldest) = self.csns.pop_front() else { break };
            out.push(Mutation { key: key(oldest), value: None });
            self.min = self.min.max(oldest);
            trimmed = true;
        }
        if trimmed || !self.min_stored {
            out.push(Mutation { key: keys::meta(MIN_KEY), value: Some(self.min.to_be_bytes().to_vec()) });
            self.min_stored = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::EngineKind;

    fn record(csn: u64, dn: &str) -> LogRecord {
        LogRecord {
            csn,
            uuid: [csn as u8; 16],
            id: EntryId(csn),
            subtree: csn.is_multiple_of(2),
            deleted: csn.is_multiple_of(3),
            old_dn: dn.into(),
        }
    }

    #[test]
    fn records_round_trip_and_bad_ones_are_refused() {
        let r = record(42, "uid=a,ou=people,dc=example,dc=com");
        assert_eq!(LogRecord::decode(&key(42), &r.encode()).unwrap(), r);
        assert!(LogRecord::decode(&key(42), &r.encode()[..10]).is_err());
        assert!(LogRecord::decode(&[b'L', 1, 2], &r.encode()).is_err());
    }

    #[test]
    fn the_log_stays_bounded_and_records_its_minimum_durably() {
        let dir = tempfile::tempdir().unwrap();
        let engine = EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap();
        // A shard from before the log: its highest committed CSN is the minimum.
        engine
            .commit(&[Mutation { key: keys::meta("csn_max"), value: Some(5u64.to_be_bytes().to_vec()) }])
            .unwrap();
        let mut log = DeleteLog::load(engine.snapshot().unwrap().as_ref()).unwrap();
        assert_eq!(log.min(), 5);
        // Not kept yet: a change only raises the minimum.
        let mut batch = Vec::new();
        log.record(&record(7, "cn=7"), 3, &mut batch);
        assert!(batch.is_empty());
        log.settle(&mut batch);
        engine.commit(&batch).unwrap();
        assert_eq!((log.len(), log.min()), (0, 7));
        assert_eq!(read(engine.snapshot().unwrap().as_ref(), 0).unwrap().min, 7);
        assert!(log.keep() && !log.keep());
        for csn in 10..15 {
            let mut batch = Vec::new();
            log.record(&record(csn, &format!("cn={csn}")), 3, &mut batch);
            engine.commit(&batch).unwrap();
        }
        assert_eq!(log.len(), 3);
        assert_eq!(log.min(), 11);
        let snapshot = engine.snapshot().unwrap();
        let view = read(snapshot.as_ref(), 0).unwrap();
        assert_eq!(view.min, 11);
        assert_eq!(view.records.iter().map(|r| r.csn).collect::<Vec<_>>(), [12, 13, 14]);
        assert_eq!(read(snapshot.as_ref(), 13).unwrap().records.len(), 1);
        // After a restart the same picture comes back from storage.
        let again = DeleteLog::load(snapshot.as_ref()).unwrap();
        assert_eq!((again.len(), again.min()), (3, 11));
        assert!(again.min_stored && again.is_kept());
    }
}
