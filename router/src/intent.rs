//! The coordinator's durable intent log. Before a change that spans shards takes its first
//! step, its intent is committed here (fdatasync); after the last step it is cleared. At
//! start, every intent still here is finished or rolled back by [`crate::coordinator`].
//! It lives in `coordinator.redb` beside the shards, whatever their engine.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferrodir_shard::storage::StorageOptions;
use ferrodir_shard::EntryId;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

const INTENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("intents");

/// A change that spans shards, as recorded before it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Intent {
    /// A leaf's DN→ID record moves from (old_parent, old_rdn) to (new_parent, new_rdn).
    MoveLeaf { id: EntryId, old_parent: EntryId, old_rdn: String, new_parent: EntryId, new_rdn: String },
    /// An entry is deleted on its home shard and its DN→ID record on another shard.
    DeleteWithRemoteName { id: EntryId, parent: EntryId, rdn: String },
    /// Referential integrity after a delete or rename of `id`, recorded before the change:
    /// the values naming `old_dn` (and with `subtree` any DN below it) are removed, or
    /// rewritten to `new_dn` once the entry is found at (`new_parent`, `new_rdn`). Recovery
    /// decides from the entry's record whether the change happened; rewriting is idempotent.
    Refint {
        id: EntryId,
        old_dn: String,
        /// `None`: a delete.
        new: Option<RenamedTo>,
        subtree: bool,
    },
    /// One step of an LDAP transaction's commit (`op::transaction`): the undo of an update
    /// it may have applied, encoded by the router, recorded before the update. `txn` is the
    /// sequence number of the transaction's first step (0 in that first step itself). Not
    /// settled by the coordinator's recovery: the server rolls the transaction back through
    /// the router at start.
    Transaction { txn: u64, steps: Vec<u8> },
}

/// Where a renamed entry is once the rename happened, and its DN there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenamedTo {
    pub parent: EntryId,
    pub rdn_norm: String,
    pub dn: String,
}

impl Intent {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut put = |id: EntryId, text: &str| {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&(text.len() as u32).to_be_bytes());
            out.extend_from_slice(text.as_bytes());
        };
        match self {
            Intent::MoveLeaf { id, old_parent, old_rdn, new_parent, new_rdn } => {
                put(*id, "M");
                put(*old_parent, old_rdn);
                put(*new_parent, new_rdn);
            }
            Intent::DeleteWithRemoteName { id, parent, rdn } => {
                put(*id, "D");
                put(*parent, rdn);
            }
            Intent::Transaction { txn, steps } => {
                put(EntryId(*txn), "T");
                out.extend_from_slice(&(steps.len() as u32).to_be_bytes());
                out.extend_from_slice(steps);
            }
            Intent::Refint { id, old_dn, new, subtree } => {
                put(*id, "R");
                put(EntryId(u64::from(*subtree)), old_dn);
                if let Some(new) = new {
                    put(new.parent, &new.rdn_norm);
                    put(EntryId(0), &new.dn);
                }
            }
        }
        out
    }

    fn decode(mut bytes: &[u8]) -> Option<Self> {
        let mut take = || -> Option<(EntryId, String)> {
            let id = EntryId::from_be_slice(bytes.get(..8)?)?;
            let len = u32::from_be_bytes(bytes.get(8..12)?.try_into().ok()?) as usize;
            let (record, rest) = bytes.get(12..)?.split_at_checked(len)?;
            let text = String::from_utf8(record.to_vec()).ok()?;
            bytes = rest;
            Some((id, text))
        };
        let (id, kind) = take()?;
        if kind == "T" {
            let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
            let steps = bytes.get(4..)?;
            return (steps.len() == len).then(|| Intent::Transaction { txn: id.0, steps: steps.to_vec() });
        }
        match kind.as_str() {
            "M" => {
                let (old_parent, old_rdn) = take()?;
                let (new_parent, new_rdn) = take()?;
                Some(Intent::MoveLeaf { id, old_parent, old_rdn, new_parent, new_rdn })
            }
            "D" => {
                let (parent, rdn) = take()?;
                Some(Intent::DeleteWithRemoteName { id, parent, rdn })
            }
            "R" => {
                let (subtree, old_dn) = take()?;
                let new = match take() {
                    None => None,
                    Some((parent, rdn_norm)) => Some(RenamedTo { parent, rdn_norm, dn: take()?.1 }),
                };
                Some(Intent::Refint { id, old_dn, new, subtree: subtree.0 != 0 })
            }
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("intent log: {0}")]
pub struct IntentLogError(String);

fn err(e: impl std::fmt::Display) -> IntentLogError {
    IntentLogError(e.to_string())
}

pub struct IntentLog {
    db: Database,
    /// Intents recorded and not yet cleared, for `ferrodir_intents_pending`: written only
    /// by the log's owner (the coordinator), read by the metrics thread.
    pending_count: Arc<AtomicU64>,
}

impl IntentLog {
    /// Opens (creating if needed) the log at `path`, with the data directory's storage
    /// settings (page cache, crash-test modes) like its shard files.
    pub fn open(path: &Path, options: &StorageOptions) -> Result<Self, IntentLogError> {
        let db = ferrodir_shard::storage::open(path, options).map_err(err)?;
        let txn = db.begin_write().map_err(err)?;
        txn.open_table(INTENTS).map_err(err)?;
        txn.commit().map_err(err)?;
        let count = {
            let txn = db.begin_read().map_err(err)?;
            let table = txn.open_table(INTENTS).map_err(err)?;
            table.len().map_err(err)?
        };
        Ok(Self { db, pending_count: Arc::new(AtomicU64::new(count)) })
    }

    /// How many intents wait to be cleared (a crash or a failed step leaves them for
    /// recovery); shared with the metrics.
    pub fn pending_count(&self) -> Arc<AtomicU64> {
        self.pending_count.clone()
    }

    /// Durably records `intent` and returns its sequence number.
    pub fn record(&self, intent: &Intent) -> Result<u64, IntentLogError> {
        let mut txn = self.db.begin_write().map_err(err)?;
        txn.set_durability(redb::Durability::Immediate).map_err(err)?;
        let seq = {
            let mut table = txn.open_table(INTENTS).map_err(err)?;
            let next = table.last().map_err(err)?.map(|(k, _)| k.value() + 1).unwrap_or(1);
            table.insert(next, intent.encode().as_slice()).map_err(err)?;
            next
        };
        txn.commit().map_err(err)?;
        self.pending_count.fetch_add(1, Ordering::Relaxed);
        Ok(seq)
    }

    /// Clears every intent in `seqs` in one durable write: a transaction's steps leave
    /// together.
    pub fn clear_all(&self, seqs: &[u64]) -> Result<(), IntentLogError> {
        let mut txn = self.db.begin_write().map_err(err)?;
        txn.set_durability(redb::Durability::Immediate).map_err(err)?;
        let mut removed = 0;
        {
            let mut table = txn.open_table(INTENTS).map_err(err)?;
            for seq in seqs {
                removed += u64::from(table.remove(*seq).map_err(err)?.is_some());
            }
        }
        txn.commit().map_err(err)?;
        self.pending_count.fetch_sub(removed, Ordering::Relaxed);
        Ok(())
    }

    pub fn clear(&self, seq: u64) -> Result<(), IntentLogError> {
        let mut txn = self.db.begin_write().map_err(err)?;
        txn.set_durability(redb::Durability::Immediate).map_err(err)?;
        let removed = txn.open_table(INTENTS).map_err(err)?.remove(seq).map_err(err)?.is_some();
        txn.commit().map_err(err)?;
        if removed {
            self.pending_count.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Intents not yet cleared, oldest first. Undecodable ones are reported as errors.
    pub fn pending(&self) -> Result<Vec<(u64, Intent)>, IntentLogError> {
        let txn = self.db.begin_read().map_err(err)?;
        let table = txn.open_table(INTENTS).map_err(err)?;
        let mut out = Vec::new();
        for item in table.iter().map_err(err)? {
            let (k, v) = item.map_err(err)?;
            let intent =
                Intent::decode(v.value()).ok_or_else(|| err(format!("undecodable intent {}", k.value())))?;
            out.push((k.value(), intent));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_clear_pending() {
        let dir = tempfile::tempdir().unwrap();
        let log = IntentLog::open(&dir.path().join("c.redb"), &StorageOptions::default()).unwrap();
        let a = Intent::MoveLeaf {
            id: EntryId(5),
            old_parent: EntryId(1),
            old_rdn: "uid=a".into(),
            new_parent: EntryId(2),
            new_rdn: "uid=b".into(),
        };
        let b = Intent::DeleteWithRemoteName { id: EntryId(6), parent: EntryId(1), rdn: "cn=x".into() };
        let c = Intent::Refint { id: EntryId(7), old_dn: "cn=y,dc=x".into(), new: None, subtree: false };
        let d = Intent::Refint {
            id: EntryId(8),
            old_dn: "ou=t,dc=x".into(),
            new: Some(RenamedTo { parent: EntryId(2), rdn_norm: "ou=u".into(), dn: "ou=u,dc=x".into() }),
            subtree: true,
        };
        let sa = log.record(&a).unwrap();
        let sb = log.record(&b).unwrap();
        let sc = log.record(&c).unwrap();
        let sd = log.record(&d).unwrap();
        let t = Intent::Transaction { txn: 0, steps: vec![1, 2, 0, 255] };
        let st = log.record(&t).unwrap();
        let t2 = Intent::Transaction { txn: st, steps: vec![9; 300] };
        let st2 = log.record(&t2).unwrap();
        assert_eq!(log.pending().unwrap().get(4..), Some(&[(st, t), (st2, t2)][..]));
        log.clear_all(&[st, st2]).unwrap();
        log.clear(sa).unwrap();
        // Clearing twice counts once.
        log.clear(sa).unwrap();
        assert_eq!(log.pending().unwrap(), vec![(sb, b), (sc, c), (sd, d)]);
        assert_eq!(log.pending_count().load(Ordering::Relaxed), 3);
        drop(log);
        // Reopened, the count starts from what the file holds.
        let log = IntentLog::open(&dir.path().join("c.redb"), &StorageOptions::default()).unwrap();
        assert_eq!(log.pending_count().load(Ordering::Relaxed), 3);
    }
}
