//! The read side of a shard: its storage, the last committed snapshot, and the entry cache.
//!
//! A `ShardCore` lives on its worker's thread inside an `Rc`, shared by the shard actor and by
//! that worker's connections, which read it with a direct call (no message, no thread hop).
//! Reads use the last committed snapshot, so a commit in progress never blocks them.
//! Every other worker holds a core of the shard too (a shard view, reading on its own thread),
//! and all of them share the shard's one entry cache (`entrycache`: its doc comment has the
//! rules that keep a version from going stale there). The actor's core is the owner: it
//! alone puts and forgets entries after commits.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::entry::record::EntryRecord;
use crate::entry::segments::Cached;
use crate::entrycache::{EntryCache, Lookup};
use crate::error::ShardResult;
use crate::id::EntryId;
use crate::index::bloom::EqBloom;
use crate::index::config::IndexConfig;
use crate::index::keys;
use crate::rules::RuleTable;
use crate::storage::{KvEngine, KvSnapshot};
use ferrodir_proto::schema::Schema;

/// Static facts about a shard that every part of it needs.
#[derive(Clone, Debug)]
pub struct ShardInfo {
    pub index: usize,
    pub count: usize,
    /// The shard's entry cache, shared by its owner and every shard view; None: no cache
    /// (scans, tools, the replication consumer's views).
    pub entry_cache: Option<Arc<EntryCache>>,
    /// The indices configured when the shard was opened: what its writer maintains until an
    /// online build changes that (`write::indexing`; the writer's own copy is the one in
    /// force). Searches read the router's copy, which also knows which are ready.
    pub indexes: Arc<IndexConfig>,
    pub schema: Arc<Schema>,
    pub rules: Arc<RuleTable>,
    /// This shard's equality-key Bloom filter, read by every worker.
    pub bloom: Arc<EqBloom>,
    /// Which shards may hold each substring gram: one table that every shard writes its
    /// own bit in and every worker reads (`gramsummary`).
    pub grams: Arc<crate::index::gramsummary::GramShards>,
    /// What the directory's shards share about writes: the CSN clock, the watermark, the
    /// change feed (`write/watermark.rs`).
    pub hub: Arc<crate::write::watermark::Hub>,
}

pub struct ShardCore {
    pub info: ShardInfo,
    engine: Arc<dyn KvEngine>,
    /// None once released ([`ShardCore::release_snapshot`]): the next read opens a fresh one.
    snapshot: RefCell<Option<Arc<dyn KvSnapshot>>>,
    /// The engine's commit count read just before `snapshot` was opened
    /// ([`ShardCore::refresh_snapshot_if_moved`]); None: unknown, refresh on the next read.
    snapshot_commits: Cell<Option<u64>>,
    /// The held snapshot's label in the entry cache (`entrycache`): the commit count before
    /// it was opened, or for the owner of an engine that counts none, its own count of
    /// commits. None: this snapshot can't use the cache.
    label: Cell<Option<u64>>,
    /// Whether this is the shard actor's core ([`ShardCore::become_owner`]).
    owner: Cell<bool>,
    /// The owner's own count of commits, for engines that count none.
    owner_generation: Cell<u64>,
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
            label: Cell::new(commits),
            owner: Cell::new(false),
            owner_generation: Cell::new(0),
            stats: Arc::default(),
        })
    }

    /// Makes this core the shard's owner (its actor's): it labels its own snapshots, and
    /// opens the shared entry cache, empty, at its snapshot. Called once, when the actor
    /// is made, before any other worker reads the shard.
    pub fn become_owner(&self) -> ShardResult<()> {
        self.owner.set(true);
        self.refresh_snapshot()?;
        if let (Some(cache), Some(label)) = (self.info.entry_cache.as_ref(), self.label.get()) {
            cache.open(label);
        }
        Ok(())
    }

    /// The label a snapshot opened now gets (see `label`).
    fn next_label(&self, commits: Option<u64>) -> Option<u64> {
        if !self.owner.get() {
            return commits;
        }
        Some(commits.unwrap_or_else(|| {
            let next = self.owner_generation.get() + 1;
            self.owner_generation.set(next);
            next
        }))
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
        match self.open_snapshot() {
            Ok(fresh) => fresh,
            Err(e) => Arc::new(FailedSnapshot(e)),
        }
    }

    /// Opens a snapshot at the last commit and holds it, with its commit count and label.
    fn open_snapshot(&self) -> crate::storage::StorageResult<Arc<dyn KvSnapshot>> {
        let commits = self.engine.commits();
        let next: Arc<dyn KvSnapshot> = Arc::from(self.engine.snapshot()?);
        *self.snapshot.borrow_mut() = Some(next.clone());
        self.snapshot_commits.set(commits);
        self.label.set(self.next_label(commits));
        Ok(next)
    }

    /// Called after each commit, before replies go out.
    pub fn refresh_snapshot(&self) -> ShardResult<()> {
        self.open_snapshot()?;
        Ok(())
    }

    /// For a shard view (another worker's read view of this shard): brings the snapshot up to
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
    /// commit is live: a shard view that another worker reads now and then, holding the
    /// snapshot of its last read in between, made every page freed since unusable and the
    /// file grew under churn (issue #14). Reads in flight keep their own `Arc`.
    pub fn release_snapshot(&self) {
        self.snapshot.borrow_mut().take();
        self.snapshot_commits.set(None);
        self.label.set(None);
    }

    /// An entry by id, from the cache or the last committed snapshot.
    pub fn record(&self, id: EntryId) -> ShardResult<Option<Arc<EntryRecord>>> {
        let snapshot = self.snapshot();
        self.record_in(snapshot.as_ref(), id)
    }

    /// An entry by id as of `snapshot`.
    pub fn record_in(&self, snapshot: &dyn KvSnapshot, id: EntryId) -> ShardResult<Option<Arc<EntryRecord>>> {
        match self.cached(snapshot, id)? {
            Some(cached) => Ok(Some(cached.record()?)),
            None => Ok(None),
        }
    }

    /// An entry by id for a write that is about to change it (`batch::Stager`): from the
    /// shared cache when it holds the entry, else from the snapshot without filling the
    /// cache, whose copy the write's commit would replace moments later
    /// (`ShardActor::publish` puts the new version).
    pub fn record_to_change(&self, id: EntryId) -> ShardResult<Option<Arc<EntryRecord>>> {
        let snapshot = self.snapshot();
        let snapshot = snapshot.as_ref();
        if let Some((cache, label)) = self.entry_cache().zip(self.label_of(snapshot)) {
            self.stats.lookups.fetch_add(1, Ordering::Relaxed);
            if let Lookup::Hit(entry) = cache.get(id, label) {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(Cached::Kept(entry).record()?));
            }
        }
        match snapshot.get(&keys::entry(id))? {
            Some(bytes) => Ok(Some(Arc::new(EntryRecord::decode(&bytes)?))),
            None => Ok(None),
        }
    }

    /// The label of `snapshot` if it is the one this core holds; None for any other (an
    /// older one a search is pinned to), which then reads around the cache.
    fn label_of(&self, snapshot: &dyn KvSnapshot) -> Option<u64> {
        let current = self.snapshot.borrow();
        let held = current.as_ref()?;
        std::ptr::addr_eq(Arc::as_ptr(held), snapshot as *const dyn KvSnapshot).then(|| self.label.get())?
    }

    fn entry_cache(&self) -> Option<&EntryCache> {
        self.info.entry_cache.as_deref().filter(|c| c.enabled())
    }

    /// An entry, from the shared cache or `snapshot` (which then fills the cache, by the
    /// rules in `entrycache`: only a core's current snapshot, only a version no publish
    /// overtook). A read that misses is sent transient, encoded straight from the record.
    pub fn cached(&self, snapshot: &dyn KvSnapshot, id: EntryId) -> ShardResult<Option<Cached>> {
        let cache = self.entry_cache().zip(self.label_of(snapshot));
        let mut offer = None;
        if let Some((cache, label)) = cache {
            self.stats.lookups.fetch_add(1, Ordering::Relaxed);
            match cache.get(id, label) {
                Lookup::Hit(entry) => {
                    self.stats.hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(Some(Cached::Kept(entry)));
                }
                Lookup::Miss => offer = Some((cache, label)),
                Lookup::Bypass => {}
            }
        }
        let Some(bytes) = snapshot.get(&keys::entry(id))? else {
            return Ok(None);
        };
        let record = Arc::new(EntryRecord::decode(&bytes)?);
        if let Some((cache, label)) = offer {
            if let Ok(compact) = cache.compact(&record) {
                cache.insert(id, Arc::new(compact), label);
            }
        }
        Ok(Some(Cached::Transient(record)))
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

    /// The owner, after a commit: caches the committed version of an entry, under the
    /// label of the snapshot just refreshed (the commit's). [`ShardCore::cache_published`]
    /// follows the batch's puts and forgets.
    pub fn cache_put(&self, id: EntryId, record: Arc<EntryRecord>) {
        let (Some(cache), Some(label)) = (self.info.entry_cache.as_deref(), self.label.get()) else { return };
        match cache.compact(&record) {
            Ok(compact) => cache.put(id, Arc::new(compact), label),
            Err(_) => cache.forget(id, label),
        }
    }

    /// The owner: drops an entry from the cache (deleted, or its commit failed).
    pub fn cache_forget(&self, id: EntryId) {
        if let (Some(cache), Some(label)) = (self.info.entry_cache.as_deref(), self.label.get()) {
            cache.forget(id, label);
        }
    }

    /// The owner, after a failed commit: the shared cache is dropped and read around until
    /// the next successful commit (`EntryCache::close`).
    pub fn cache_close(&self) {
        if let Some(cache) = self.info.entry_cache.as_deref() {
            cache.close();
        }
    }

    /// The owner, after its first successful commit since a failed one (a shard that
    /// recovered from a full disk): the cache opens again, empty, at the snapshot just
    /// refreshed (`EntryCache::close`).
    pub fn cache_reopen_if_closed(&self) {
        if let (Some(cache), Some(label)) = (self.info.entry_cache.as_deref(), self.label.get()) {
            if cache.is_closed() {
                cache.open(label);
            }
        }
    }

    /// The owner: every entry of the commit its snapshot now holds is put or forgotten,
    /// so readers of that snapshot may use the cache. Before the batch's writers are
    /// answered (read-your-writes).
    pub fn cache_published(&self) {
        if let (Some(cache), Some(label)) = (self.info.entry_cache.as_deref(), self.label.get()) {
            cache.publish(label);
        }
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
        self.stored_u64("csn_max")
    }

    /// A big-endian u64 of the shard's metadata (`name`); 0 when absent.
    pub fn stored_u64(&self, name: &str) -> ShardResult<u64> {
        let snapshot = self.snapshot();
        Ok(snapshot
            .get(&keys::meta(name))?
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
pub(crate) mod tests {
    use super::*;
    use crate::storage::{EngineKind, Mutation};

    /// One shard with `cn eq`, no entry cache: shared by the scan tests.
    pub(crate) fn info() -> ShardInfo {
        let schema = Arc::new(Schema::standard());
        let rules = Arc::new(RuleTable::from_schema(&schema));
        let indexes = Arc::new(IndexConfig::from_directives(&["cn eq"], &rules).unwrap());
        ShardInfo {
            index: 0,
            count: 1,
            entry_cache: None,
            indexes,
            schema,
            rules,
            bloom: Default::default(),
            grams: Default::default(),
            hub: crate::write::watermark::Hub::new(1, 0),
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

    /// The mechanism behind issue #14, on redb itself: a core (another worker's shard view)
    /// that keeps the snapshot of its last read makes every page freed since unusable, so
    /// the file grows with every cycle; released, it pins nothing and the file stays flat.
    #[test]
    fn a_held_snapshot_makes_churn_grow_the_file_and_a_released_one_does_not() {
        // Without the write log, so that every commit is a durable one as the mechanism
        // needs (with the log, pages freed between checkpoints are reused at once, and the
        // released case is checked with it below).
        let options =
            |write_log_bytes| crate::storage::StorageOptions { write_log_bytes, ..Default::default() };
        let run = |release: bool, log_bytes: u64| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("shard-000.redb");
            let engine: Arc<dyn KvEngine> =
                Arc::new(crate::storage::RedbEngine::open(&path, &options(log_bytes)).unwrap());
            let base: Vec<_> =
                (0..1000u32).map(|i| Mutation { key: key(i), value: Some(vec![7; 1500]) }).collect();
            engine.commit(&base).unwrap();
            let view = ShardCore::new(info(), engine.clone()).unwrap();
            assert!(view.snapshot().get(&key(3)).unwrap().is_some());
            let between = || {
                if release {
                    view.release_snapshot();
                }
            };
            churn(engine.as_ref(), &dir.path().join("shard-000.redb"), &between)
        };
        let (held_first, held_last) = run(false, 0);
        let (released_first, released_last) = run(true, 0);
        let (logged_first, logged_last) = run(true, crate::storage::WRITE_LOG_BYTES_DEFAULT);
        assert!(
            logged_last <= logged_first + logged_first / 4,
            "churn through the write log grew the file with no snapshot held: {logged_first} -> {logged_last} bytes"
        );
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
        let engine: Arc<dyn KvEngine> =
            Arc::from(EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap());
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

    /// A shard view keeps its read transaction while the shard commits nothing, and opens a new
    /// one as soon as a commit has finished: it never misses an acknowledged write.
    #[test]
    fn a_shard_view_reuses_its_snapshot_until_a_commit_finishes() {
        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn KvEngine> =
            Arc::from(EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap());
        let view = ShardCore::new(info(), engine.clone()).unwrap();
        let first = view.snapshot();
        view.refresh_snapshot_if_moved().unwrap();
        assert!(Arc::ptr_eq(&first, &view.snapshot()), "no commit: the same read transaction");
        engine.commit(&[Mutation { key: key(1), value: Some(b"x".to_vec()) }]).unwrap();
        view.refresh_snapshot_if_moved().unwrap();
        let second = view.snapshot();
        assert!(!Arc::ptr_eq(&first, &second), "a commit finished: a new read transaction");
        assert_eq!(second.get(&key(1)).unwrap(), Some(b"x".to_vec()));
        view.refresh_snapshot_if_moved().unwrap();
        assert!(Arc::ptr_eq(&second, &view.snapshot()));
        // Released (every 100 ms), it opens one again on the next read.
        view.release_snapshot();
        view.refresh_snapshot_if_moved().unwrap();
        assert!(view.holds_snapshot());
    }

    fn record(cn: &str) -> EntryRecord {
        let entry = ferrodir_proto::entry::Entry::new(vec![ferrodir_proto::entry::Attribute::new(
            "cn",
            vec![cn.as_bytes().to_vec()],
        )]);
        EntryRecord {
            parent: EntryId::ROOT,
            rdn: format!("cn={cn}"),
            rdn_norm: format!("cn={cn}"),
            flags: 0,
            entry,
        }
    }

    fn cn_of(cached: &Cached) -> String {
        cached.rdn().to_string()
    }

    /// A redb engine in a temporary directory holding entry 5 ("v1").
    fn engine_holding_entry_5() -> (tempfile::TempDir, Arc<dyn KvEngine>) {
        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn KvEngine> =
            Arc::from(EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap());
        engine
            .commit(&[Mutation { key: keys::entry(EntryId(5)), value: Some(record("v1").encode()) }])
            .unwrap();
        (dir, engine)
    }

    /// An owner and a view sharing one cache, over one redb engine holding entry 5.
    fn owner_and_view() -> (tempfile::TempDir, Arc<dyn KvEngine>, ShardCore, ShardCore) {
        let (dir, engine) = engine_holding_entry_5();
        let base = info();
        let cache = Arc::new(EntryCache::new(1 << 20, base.rules.clone()));
        let shared = ShardInfo { entry_cache: Some(cache), ..base };
        let owner = ShardCore::new(shared.clone(), engine.clone()).unwrap();
        let view = ShardCore::new(shared, engine.clone()).unwrap();
        owner.become_owner().unwrap();
        (dir, engine, owner, view)
    }

    /// What the shard actor does for a commit: commit, refresh, put or forget, publish.
    fn commit_as_owner(engine: &dyn KvEngine, owner: &ShardCore, id: EntryId, version: Option<EntryRecord>) {
        engine
            .commit(&[Mutation { key: keys::entry(id), value: version.as_ref().map(EntryRecord::encode) }])
            .unwrap();
        owner.refresh_snapshot().unwrap();
        match version {
            Some(r) => owner.cache_put(id, Arc::new(r)),
            None => owner.cache_forget(id),
        }
        owner.cache_published();
    }

    /// A view's read fills the shard's one cache; the owner and the view then both
    /// hit it, without decoding the entry again.
    #[test]
    fn a_view_shares_the_owners_cache() {
        let (_dir, _engine, owner, view) = owner_and_view();
        let id = EntryId(5);
        view.refresh_snapshot_if_moved().unwrap();
        let snapshot = view.snapshot();
        let first = view.cached(snapshot.as_ref(), id).unwrap().unwrap();
        assert!(!first.is_kept(), "a miss is sent transient");
        assert!(view.cached(snapshot.as_ref(), id).unwrap().unwrap().is_kept(), "then it is cached");
        let owners = owner.snapshot();
        let hit = owner.cached(owners.as_ref(), id).unwrap().unwrap();
        assert!(hit.is_kept());
        assert_eq!(cn_of(&hit), "cn=v1");
        assert_eq!(*owner.record(id).unwrap().unwrap(), record("v1"), "decoded back whole");
    }

    /// Insert after invalidate, through the cores: a view holding the snapshot of commit
    /// g reads the entry after the owner committed g + 1 and published it (a new version, or
    /// a delete). It reads its own snapshot's version, and neither returns the newer one nor
    /// leaves its older one in the cache; once it moves to g + 1 it reads the new state.
    #[test]
    fn a_view_never_puts_back_a_version_the_owner_replaced() {
        for deleted in [false, true] {
            let (_dir, engine, owner, view) = owner_and_view();
            let id = EntryId(5);
            view.refresh_snapshot_if_moved().unwrap();
            let old = view.snapshot();
            commit_as_owner(engine.as_ref(), &owner, id, (!deleted).then(|| record("v2")));
            // The view has not refreshed: its snapshot still holds v1.
            let read = view.cached(old.as_ref(), id).unwrap().unwrap();
            assert_eq!(cn_of(&read), "cn=v1", "its own snapshot's version");
            assert!(!read.is_kept());
            let again = view.cached(old.as_ref(), id).unwrap().unwrap();
            assert!(!again.is_kept(), "v1 must not have gone into the cache (deleted: {deleted})");
            // Read-your-writes: the writer was answered after the publish; any read now
            // brings its snapshot up to the commit first.
            view.refresh_snapshot_if_moved().unwrap();
            let now = view.snapshot();
            let fresh = view.cached(now.as_ref(), id).unwrap();
            let owners = owner.snapshot();
            let from_owner = owner.cached(owners.as_ref(), id).unwrap();
            if deleted {
                assert!(fresh.is_none() && from_owner.is_none());
            } else {
                assert_eq!(cn_of(&fresh.unwrap()), "cn=v2");
                assert_eq!(cn_of(&from_owner.unwrap()), "cn=v2");
            }
        }
    }

    /// A snapshot that is not the core's current one (a search pinned to an older one)
    /// reads around the cache: it neither gets nor leaves a version.
    #[test]
    fn an_older_snapshot_reads_around_the_cache() {
        let (_dir, engine, owner, _view) = owner_and_view();
        let id = EntryId(5);
        let old = owner.snapshot();
        commit_as_owner(engine.as_ref(), &owner, EntryId(6), Some(record("other")));
        assert!(!owner.cached(old.as_ref(), id).unwrap().unwrap().is_kept());
        let current = owner.snapshot();
        assert!(
            !owner.cached(current.as_ref(), id).unwrap().unwrap().is_kept(),
            "the older read left nothing"
        );
        assert!(owner.cached(current.as_ref(), id).unwrap().unwrap().is_kept());
    }

    /// Before the owner opens the cache (tools, start-up passes that commit straight to the
    /// engine), every read goes around it.
    #[test]
    fn no_owner_no_cache() {
        let (_dir, engine) = engine_holding_entry_5();
        let base = info();
        let cache = Arc::new(EntryCache::new(1 << 20, base.rules.clone()));
        let core = ShardCore::new(ShardInfo { entry_cache: Some(cache.clone()), ..base }, engine).unwrap();
        let snapshot = core.snapshot();
        for _ in 0..2 {
            assert!(!core.cached(snapshot.as_ref(), EntryId(5)).unwrap().unwrap().is_kept());
        }
        assert_eq!(cache.usage().0, 0);
    }
}
