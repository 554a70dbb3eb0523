//! The index-ready marks: one meta key per (attribute, kind) on each shard, saying that
//! index is complete there. An index configured after data exists is maintained by writes
//! but used by searches only once it was built (online by the server, `write::indexing`,
//! or offline by `ferrodir reindex`) and the mark set on every shard (docs/ARCHITECTURE.md,
//! "Indices"). Opening a data directory reads the marks; reindex, the bulk loader and the
//! online build write them: this module is their one owner.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use crate::index::config::{IndexConfig, IndexKind};
use crate::index::keys;
use crate::storage::{KvEngine, Mutation, StorageResult};

/// The meta-key prefix of index readiness marks: `index:<attr>:<kind>`.
const READY_PREFIX: &str = "index:";

fn ready_key(attr: &str, kind: IndexKind) -> Vec<u8> {
    keys::meta(&format!("{READY_PREFIX}{attr}:{}", kind.name()))
}

/// The mark of one index, set (`ready`) or removed.
pub fn mark(attr: &str, kind: IndexKind, ready: bool) -> Mutation {
    Mutation { key: ready_key(attr, kind), value: ready.then(|| b"ready".to_vec()) }
}

/// Every index marked ready in `snapshot`, configured or not (a mark left by an index
/// since removed from the configuration names an index nothing maintains any more).
pub fn marked(snapshot: &dyn crate::storage::KvSnapshot) -> StorageResult<BTreeSet<(String, IndexKind)>> {
    let prefix = ready_prefix();
    let mut out = BTreeSet::new();
    snapshot.scan_prefix(&prefix, &mut |key, _| {
        let name = key.get(prefix.len()..).and_then(|rest| std::str::from_utf8(rest).ok());
        if let Some((attr, kind)) = name.and_then(|n| n.rsplit_once(':')) {
            if let Some(kind) = IndexKind::from_name(kind) {
                out.insert((attr.to_string(), kind));
            }
        }
        true
    })?;
    Ok(out)
}

/// The key prefix every readiness mark starts with (reindex removes them all first).
pub fn ready_prefix() -> Vec<u8> {
    keys::meta(READY_PREFIX)
}

/// Marks saying every configured index is complete on a shard.
pub fn ready_marks(indexes: &IndexConfig) -> Vec<Mutation> {
    indexes
        .configured()
        .into_iter()
        .map(|(attr, kind)| Mutation { key: ready_key(&attr, kind), value: Some(b"ready".to_vec()) })
        .collect()
}

/// Marks every configured index complete on every shard (a new, empty data directory).
pub fn mark_all_ready(engines: &[Arc<dyn KvEngine>], indexes: &IndexConfig) -> StorageResult<()> {
    let marks = ready_marks(indexes);
    for engine in engines {
        engine.commit(&marks)?;
    }
    Ok(())
}

/// The configured indices marked complete on every shard.
pub fn ready_everywhere(
    engines: &[Arc<dyn KvEngine>],
    indexes: &IndexConfig,
) -> StorageResult<HashSet<(String, IndexKind)>> {
    let mut ready = HashSet::new();
    'index: for (attr, kind) in indexes.configured() {
        for engine in engines {
            if engine.snapshot()?.get(&ready_key(&attr, kind))?.is_none() {
                continue 'index;
            }
        }
        ready.insert((attr, kind));
    }
    Ok(ready)
}
