//! The read side of a shard: its storage, the last committed snapshot, and the entry cache.
//!
//! A `ShardCore` lives on its worker's thread inside an `Rc`, shared by the shard actor and by
//! that worker's connections, which read it with a direct call (no message, no thread hop).
//! Reads use the last committed snapshot, so a commit in progress never blocks them.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::bloom::EqBloom;
use crate::error::ShardResult;
use crate::id::EntryId;
use crate::index::IndexConfig;
use crate::keys;
use crate::record::EntryRecord;
use crate::rules::RuleTable;
use crate::segments::Cached;
use crate::storage::{KvEngine, KvSnapshot};
use ferrodir_proto::schema::Schema;

/// Static facts about a shard that every part of it needs.
#[derive(Clone, Debug)]
pub struct ShardInfo {
    pub index: usize,
    pub count: usize,
    pub entry_cache_entries_max: usize,
    pub indexes: Arc<IndexConfig>,
    pub schema: Arc<Schema>,
    pub rules: Arc<RuleTable>,
    /// This shard's equality-key Bloom filter, read by every worker.
    pub bloom: Arc<EqBloom>,
}

pub struct ShardCore {
    pub info: ShardInfo,
    engine: Arc<dyn KvEngine>,
    snapshot: RefCell<Arc<dyn KvSnapshot>>,
    cache: RefCell<HashMap<EntryId, Arc<Cached>>>,
    /// Written by this core's thread only; read by the metrics endpoint.
    stats: Arc<CoreStats>,
}

/// A shard's counters for the metrics endpoint and cn=Monitor. Each has one writer, the
/// thread of the core that holds them: lookups and hits by the reads of that core, entries
/// and writes waiting by the shard's actor (the owning core only).
#[derive(Default, Debug)]
pub struct CoreStats {
    pub lookups: AtomicU64,
    pub hits: AtomicU64,
    /// Entries on the shard: counted once at startup (while the skeleton is built, in the
    /// same scan), then moved by each committed add and delete.
    pub entries: AtomicU64,
    /// Writes the shard has taken and not yet answered: staged for the next batch, or in the
    /// batch being committed. Its write queue's depth (actix does not tell its mailbox's).
    pub writes_waiting: AtomicU64,
}

impl ShardCore {
    pub fn new(info: ShardInfo, engine: Arc<dyn KvEngine>) -> ShardResult<Self> {
        let snapshot: Arc<dyn KvSnapshot> = Arc::from(engine.snapshot()?);
        Ok(Self {
            info,
            engine,
            snapshot: RefCell::new(snapshot),
            cache: RefCell::new(HashMap::new()),
            stats: Arc::default(),
        })
    }

    /// This core's counters, to hand to the metrics endpoint.
    pub fn stats(&self) -> Arc<CoreStats> {
        self.stats.clone()
    }

    pub fn counters(&self) -> &CoreStats {
        &self.stats
    }

    pub fn engine(&self) -> Arc<dyn KvEngine> {
        self.engine.clone()
    }

    /// The last committed snapshot; a search holds it for its whole run.
    pub fn snapshot(&self) -> Arc<dyn KvSnapshot> {
        self.snapshot.borrow().clone()
    }

    /// Called after each commit, before replies go out.
    pub fn refresh_snapshot(&self) -> ShardResult<()> {
        let next: Arc<dyn KvSnapshot> = Arc::from(self.engine.snapshot()?);
        *self.snapshot.borrow_mut() = next;
        Ok(())
    }

    /// An entry by id, from the cache or the last committed snapshot.
    pub fn record(&self, id: EntryId) -> ShardResult<Option<Arc<EntryRecord>>> {
        let snapshot = self.snapshot();
        Ok(self.cached(snapshot.as_ref(), id)?.map(|c| c.record.clone()))
    }

    /// An entry by id as of `snapshot`.
    pub fn record_in(&self, snapshot: &dyn KvSnapshot, id: EntryId) -> ShardResult<Option<Arc<EntryRecord>>> {
        Ok(self.cached(snapshot, id)?.map(|c| c.record.clone()))
    }

    /// An entry and its encoded segments, from the cache or `snapshot`. Only reads from the
    /// current snapshot fill the cache: a search pinned to an older one must not put an old
    /// version of an entry back after a commit replaced it.
    pub fn cached(&self, snapshot: &dyn KvSnapshot, id: EntryId) -> ShardResult<Option<Arc<Cached>>> {
        let counting = self.info.entry_cache_entries_max > 0;
        if counting {
            self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(hit) = self.cache.borrow().get(&id) {
            if counting {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(Some(hit.clone()));
        }
        let Some(bytes) = snapshot.get(&keys::entry(id))? else {
            return Ok(None);
        };
        let cached = Arc::new(Cached::new(Arc::new(EntryRecord::decode(&bytes)?)));
        let current = self.snapshot.borrow();
        let is_current = std::ptr::addr_eq(Arc::as_ptr(&current), snapshot as *const dyn KvSnapshot);
        drop(current);
        if is_current {
            self.cache_insert(id, cached.clone());
        }
        Ok(Some(cached))
    }

    /// The id named by (`parent`, `rdn_norm`) in this shard's DN→ID index.
    pub fn lookup_dn(&self, parent: EntryId, rdn_norm: &str) -> ShardResult<Option<EntryId>> {
        let snapshot = self.snapshot();
        Ok(snapshot.get(&keys::dn(parent, rdn_norm))?.and_then(|v| EntryId::from_be_slice(&v)))
    }

    /// Whether `parent` has at least one child on this shard.
    pub fn has_children(&self, snapshot: &dyn KvSnapshot, parent: EntryId) -> ShardResult<bool> {
        let mut found = false;
        snapshot.scan_prefix(&keys::children_prefix(parent), &mut |_, _| {
            found = true;
            false
        })?;
        Ok(found)
    }

    /// Every entry id on this shard.
    pub fn all_ids(&self, snapshot: &dyn KvSnapshot) -> ShardResult<Vec<EntryId>> {
        let mut out = Vec::new();
        snapshot.scan_prefix(&keys::entries_prefix(), &mut |k, _| {
            if let Some(id) = keys::trailing_id(k) {
                out.push(id);
            }
            true
        })?;
        Ok(out)
    }

    /// Ids of the postings under an index key prefix.
    pub fn postings(&self, snapshot: &dyn KvSnapshot, prefix: &[u8]) -> ShardResult<Vec<EntryId>> {
        let mut out = Vec::new();
        snapshot.scan_prefix(prefix, &mut |k, _| {
            if let Some(id) = keys::trailing_id(k) {
                out.push(id);
            }
            true
        })?;
        Ok(out)
    }

    /// Caches the committed version of an entry (after a commit).
    pub fn cache_put(&self, id: EntryId, record: Arc<EntryRecord>) {
        self.cache_insert(id, Arc::new(Cached::new(record)));
    }

    fn cache_insert(&self, id: EntryId, cached: Arc<Cached>) {
        let mut cache = self.cache.borrow_mut();
        if cache.len() >= self.info.entry_cache_entries_max && !cache.contains_key(&id) {
            // Evict an arbitrary entry: no recency bookkeeping on the hit path.
            if let Some(victim) = cache.keys().next().copied() {
                cache.remove(&victim);
            }
        }
        if self.info.entry_cache_entries_max > 0 {
            cache.insert(id, cached);
        }
    }

    pub fn cache_forget(&self, id: EntryId) {
        self.cache.borrow_mut().remove(&id);
    }

    /// Every container record on this shard: the shard's part of the skeleton at startup.
    pub fn container_records(&self) -> ShardResult<Vec<(EntryId, EntryRecord)>> {
        Ok(self.scan_containers()?.0)
    }

    /// Every container record on this shard, and how many entries it holds, in one scan.
    pub fn scan_containers(&self) -> ShardResult<(Vec<(EntryId, EntryRecord)>, u64)> {
        let snapshot = self.snapshot();
        let mut out = Vec::new();
        let mut entries = 0u64;
        let mut failure = None;
        snapshot.scan_prefix(&keys::entries_prefix(), &mut |k, v| match (
            keys::trailing_id(k),
            EntryRecord::decode(v),
        ) {
            (Some(id), Ok(record)) => {
                entries += 1;
                if record.is_container() {
                    out.push((id, record));
                }
                true
            }
            (_, Err(e)) => {
                failure = Some(e);
                false
            }
            (None, _) => true,
        })?;
        match failure {
            Some(e) => Err(e.into()),
            None => Ok((out, entries)),
        }
    }

    /// The highest CSN (a clock tick) the shard ever committed, from its metadata; 0: none.
    pub fn stored_csn_max(&self) -> ShardResult<u64> {
        let snapshot = self.snapshot();
        Ok(snapshot
            .get(&keys::meta("csn_max"))?
            .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0))
    }

    /// The next sequence number to allocate, from the shard's metadata.
    pub fn stored_next_seq(&self) -> ShardResult<u64> {
        let snapshot = self.snapshot();
        Ok(snapshot
            .get(&keys::meta("next_seq"))?
            .and_then(|v| EntryId::from_be_slice(&v))
            .map(|id| id.0)
            .unwrap_or(1))
    }
}
