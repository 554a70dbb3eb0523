//! `ferrodir reindex`: rebuild every shard's indices offline after the index configuration
//! changed, then mark each configured index ready. Until an index is marked ready on every
//! shard, searches don't use it (see `shard::index`).

use anyhow::Context as _;
use ferrodir_shard::offline::{self, Stored};
use ferrodir_shard::storage::Mutation;
use ferrodir_shard::{index_ready_marks, index_ready_prefix};

use crate::data::store::Store;

/// Rebuilds all shards in parallel; returns the number of entries indexed.
pub fn reindex(store: &Store) -> anyhow::Result<usize> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..store.engines.len())
            .map(|shard| {
                scope.spawn(move || reindex_shard(store, shard).with_context(|| format!("shard {shard}")))
            })
            .collect();
        let mut total = 0;
        for handle in handles {
            total += handle.join().map_err(|_| anyhow::anyhow!("a reindex thread panicked"))??;
        }
        Ok(total)
    })
}

fn reindex_shard(store: &Store, shard: usize) -> anyhow::Result<usize> {
    let engine = &store.engines[shard];
    let snapshot = engine.snapshot()?;
    let mut batch = offline::clear_indexes(snapshot.as_ref())?;
    snapshot.scan_prefix(&index_ready_prefix(), &mut |key, _| {
        batch.push(Mutation { key: key.to_vec(), value: None });
        true
    })?;
    let mut entries = 0;
    let mut failure = None;
    offline::each_entry(snapshot.as_ref(), &mut |stored| match stored {
        Stored::Entry(id, record) => {
            entries += 1;
            for index_key in store.indexes.keys_for(&store.rules, id, &record.entry) {
                batch.push(Mutation { key: index_key, value: Some(Vec::new()) });
            }
            true
        }
        Stored::Undecodable(id, e) => {
            failure = Some(anyhow::anyhow!("entry {id:?}: {e}"));
            false
        }
        Stored::BadKey(_) => true,
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    batch.extend(index_ready_marks(&store.indexes));
    engine.commit(&batch)?;
    Ok(entries)
}
