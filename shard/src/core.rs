//! The read side of a shard: its storage, the last committed snapshot, and the entry cache.
//!
//! A `ShardCore` lives on its worker's thread inside an `Rc`, shared by the shard actor and by
//! that worker's connections, which read it with a direct call (no message, no thread hop).
//! Reads use the last committed snapshot, so a commit in progress never blocks them.

use std::cell::{Cell, RefCell};
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
    /// None once released ([`ShardCore::release_snapshot`]): the next read opens a fresh one.
    snapshot: RefCell<Option<Arc<dyn KvSnapshot>>>,
    /// The engine's commit count read just before `snapshot` was opened
    /// ([`ShardCore::refresh_snapshot_if_moved`]); None: unknown, refresh on the next read.
    snapshot_commits: Cell<Option<u64>>,
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
        let commits = engine.commits();
        let snapshot: Arc<dyn KvSnapshot> = Arc::from(engine.snapshot()?);
        Ok(Self {
            info,
            engine,
            snapshot: RefCell::new(Some(snapshot)),
            snapshot_commits: Cell::new(commits),
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

    /// The last committed snapshot; a search holds it for its whole run. After a release,
    /// a fresh one (an engine that cannot open one gives a view whose reads fail with why).
    pub fn snapshot(&self) -> Arc<dyn KvSnapshot> {
        if let Some(current) = self.snapshot.borrow().as_ref() {
            return current.clone();
        }
        let fresh: Arc<dyn KvSnapshot> = match self.engine.snapshot() {
            Ok(fresh) => Arc::from(fresh),
            Err(e) => return Arc::new(FailedSnapshot(e)),
        };
        *self.snapshot.borrow_mut() = Some(fresh.clone());
        fresh
    }

    /// Called after each commit, before replies go out.
    pub fn refresh_snapshot(&self) -> ShardResult<()> {
        let commits = self.engine.commits();
        let next: Arc<dyn KvSnapshot> = Arc::from(self.engine.snapshot()?);
        *self.snapshot.borrow_mut() = Some(next);
        self.snapshot_commits.set(commits);
        Ok(())
    }

    /// For a replica (another worker's read view of this shard): brings the snapshot up to
    /// the shard's last commit, opening a new read transaction only if a commit finished
    /// since the held one was opened (issue #14: a remote base lookup used to open two).
    /// The count is read before the snapshot is opened, so a commit racing with the open is
    /// at worst seen twice, never missed; and the engine counts a commit before its writer
    /// is answered, so every acknowledged write is in the snapshot kept.
    pub fn refresh_snapshot_if_moved(&self) -> ShardResult<()> {
        if let (Some(now), Some(taken)) = (self.engine.commits(), self.snapshot_commits.get()) {
            if now == taken && self.snapshot.borrow().is_some() {
                return Ok(());
            }
        }
        self.refresh_snapshot()
    }

    /// Lets go of the held snapshot, so that this core pins no old version of the file.
    /// redb reuses a page freed by a commit only once no read transaction older than that
    /// commit is live: a replica that another worker reads now and then, holding the
    /// snapshot of its last read in between, made every page freed since unusable and the
    /// file grew under churn (issue #14). Reads in flight keep their own `Arc`.
    pub fn release_snapshot(&self) {
        self.snapshot.borrow_mut().take();
        self.snapshot_commits.set(None);
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
        let record = Arc::new(EntryRecord::decode(&bytes)?);
        let is_current = self.snapshot.borrow().as_ref().is_some_and(|current| {
            std::ptr::addr_eq(Arc::as_ptr(current), snapshot as *const dyn KvSnapshot)
        });
        if is_current && self.info.entry_cache_entries_max > 0 {
            let cached = Arc::new(Cached::new(record));
            self.cache_insert(id, cached.clone());
            return Ok(Some(cached));
        }
        // Not kept (a replica's read: replicas cache nothing; or an older snapshot's): sent
        // once and dropped, so it is encoded straight from its attributes. Building every
        // segment for one send cost a remote base lookup about a fifth of its instructions.
        Ok(Some(Arc::new(Cached::transient(record))))
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

    /// Whether this core holds a snapshot now (tests of the release).
    pub fn holds_snapshot(&self) -> bool {
        self.snapshot.borrow().is_some()
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

/// What [`ShardCore::snapshot`] gives when the engine could not open a snapshot: every read
/// fails with the engine's error, through the same path as any storage error.
struct FailedSnapshot(crate::storage::StorageError);

impl KvSnapshot for FailedSnapshot {
    fn get(&self, _key: &[u8]) -> crate::storage::StorageResult<Option<Vec<u8>>> {
        Err(self.0.clone())
    }

    fn scan_prefix(
        &self,
        _prefix: &[u8],
        _visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> crate::storage::StorageResult<()> {
        Err(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{EngineKind, Mutation};

    fn info() -> ShardInfo {
        let schema = Arc::new(Schema::standard());
        let rules = Arc::new(RuleTable::from_schema(&schema));
        let indexes = Arc::new(IndexConfig::from_directives(&["cn eq"], &rules).unwrap());
        ShardInfo {
            index: 0,
            count: 1,
            entry_cache_entries_max: 0,
            indexes,
            schema,
            rules,
            bloom: Default::default(),
        }
    }

    fn key(i: u32) -> Vec<u8> {
        keys::entry(EntryId(u64::from(i)))
    }

    /// Adds then deletes 400 entries of 1.5 KB, 12 times, 50 per commit (as the shard actor
    /// commits batches); returns the file's length after the first and the last cycle.
    fn churn(engine: &dyn KvEngine, path: &std::path::Path, between: &dyn Fn()) -> (u64, u64) {
        let mut first = 0;
        for cycle in 0..12u32 {
            for chunk in (10_000..10_400u32).collect::<Vec<_>>().chunks(50) {
                let adds: Vec<_> = chunk
                    .iter()
                    .map(|&i| Mutation { key: key(i), value: Some(vec![cycle as u8; 1500]) })
                    .collect();
                engine.commit(&adds).unwrap();
                between();
            }
            for chunk in (10_000..10_400u32).collect::<Vec<_>>().chunks(50) {
                engine
                    .commit(&chunk.iter().map(|&i| Mutation { key: key(i), value: None }).collect::<Vec<_>>())
                    .unwrap();
                between();
            }
            if cycle == 0 {
                first = std::fs::metadata(path).unwrap().len();
            }
        }
        (first, std::fs::metadata(path).unwrap().len())
    }

    /// The mechanism behind issue #14, on redb itself: a core (another worker's replica)
    /// that keeps the snapshot of its last read makes every page freed since unusable, so
    /// the file grows with every cycle; released, it pins nothing and the file stays flat.
    #[test]
    fn a_held_snapshot_makes_churn_grow_the_file_and_a_released_one_does_not() {
        let run = |release: bool| {
            let dir = tempfile::tempdir().unwrap();
            let engine: Arc<dyn KvEngine> = Arc::from(EngineKind::Redb.open(dir.path(), 0).unwrap());
            let base: Vec<_> =
                (0..1000u32).map(|i| Mutation { key: key(i), value: Some(vec![7; 1500]) }).collect();
            engine.commit(&base).unwrap();
            let replica = ShardCore::new(info(), engine.clone()).unwrap();
            assert!(replica.snapshot().get(&key(3)).unwrap().is_some());
            let between = || {
                if release {
                    replica.release_snapshot();
                }
            };
            churn(engine.as_ref(), &dir.path().join("shard-000.redb"), &between)
        };
        let (held_first, held_last) = run(false);
        let (released_first, released_last) = run(true);
        assert!(
            held_last > held_first * 3,
            "a held snapshot should make the file grow: {held_first} -> {held_last} bytes"
        );
        assert!(
            released_last <= released_first + released_first / 4,
            "churn grew the file with no snapshot held: {released_first} -> {released_last} bytes"
        );
    }

    /// After a release the next read opens a fresh snapshot and sees the last commit.
    #[test]
    fn a_released_snapshot_is_reopened_at_the_last_commit() {
        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn KvEngine> = Arc::from(EngineKind::Redb.open(dir.path(), 0).unwrap());
        let core = ShardCore::new(info(), engine.clone()).unwrap();
        assert!(core.snapshot().get(&key(1)).unwrap().is_none());
        engine.commit(&[Mutation { key: key(1), value: Some(b"x".to_vec()) }]).unwrap();
        let before = core.snapshot();
        core.release_snapshot();
        assert!(!core.holds_snapshot());
        assert_eq!(core.snapshot().get(&key(1)).unwrap(), Some(b"x".to_vec()));
        assert!(core.holds_snapshot());
        // A read that took the old snapshot before the release still reads it.
        assert!(before.get(&key(1)).unwrap().is_none());
    }

    /// A replica keeps its read transaction while the shard commits nothing, and opens a new
    /// one as soon as a commit has finished: it never misses an acknowledged write.
    #[test]
    fn a_replica_reuses_its_snapshot_until_a_commit_finishes() {
        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn KvEngine> = Arc::from(EngineKind::Redb.open(dir.path(), 0).unwrap());
        let replica = ShardCore::new(info(), engine.clone()).unwrap();
        let first = replica.snapshot();
        replica.refresh_snapshot_if_moved().unwrap();
        assert!(Arc::ptr_eq(&first, &replica.snapshot()), "no commit: the same read transaction");
        engine.commit(&[Mutation { key: key(1), value: Some(b"x".to_vec()) }]).unwrap();
        replica.refresh_snapshot_if_moved().unwrap();
        let second = replica.snapshot();
        assert!(!Arc::ptr_eq(&first, &second), "a commit finished: a new read transaction");
        assert_eq!(second.get(&key(1)).unwrap(), Some(b"x".to_vec()));
        replica.refresh_snapshot_if_moved().unwrap();
        assert!(Arc::ptr_eq(&second, &replica.snapshot()));
        // Released (every 100 ms), it opens one again on the next read.
        replica.release_snapshot();
        replica.refresh_snapshot_if_moved().unwrap();
        assert!(replica.holds_snapshot());
    }

    /// Only a read the cache keeps builds segments: a replica's (no cache) and a read of an
    /// older snapshot are sent transient, encoded straight from the record.
    #[test]
    fn reads_the_cache_does_not_keep_are_transient() {
        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn KvEngine> = Arc::from(EngineKind::Redb.open(dir.path(), 0).unwrap());
        let id = EntryId(5);
        let entry = ferrodir_proto::entry::Entry::new(vec![ferrodir_proto::entry::Attribute::new(
            "cn",
            vec![b"x".to_vec()],
        )]);
        let record = EntryRecord {
            parent: EntryId::ROOT,
            rdn: "cn=x".into(),
            rdn_norm: "cn=x".into(),
            flags: 0,
            entry,
        };
        engine.commit(&[Mutation { key: keys::entry(id), value: Some(record.encode()) }]).unwrap();

        let replica = ShardCore::new(info(), engine.clone()).unwrap();
        let snapshot = replica.snapshot();
        assert!(!replica.cached(snapshot.as_ref(), id).unwrap().unwrap().is_kept());

        let owner =
            ShardCore::new(ShardInfo { entry_cache_entries_max: 10, ..info() }, engine.clone()).unwrap();
        let old = owner.snapshot();
        engine.commit(&[Mutation { key: keys::entry(EntryId(6)), value: Some(record.encode()) }]).unwrap();
        owner.refresh_snapshot().unwrap();
        assert!(!owner.cached(old.as_ref(), id).unwrap().unwrap().is_kept(), "an older snapshot's read");
        let current = owner.snapshot();
        let first = owner.cached(current.as_ref(), id).unwrap().unwrap();
        assert!(first.is_kept());
        let again = owner.cached(current.as_ref(), id).unwrap().unwrap();
        assert!(Arc::ptr_eq(&first, &again), "kept reads come from the cache");
    }
}
