//! A shard's entry cache, shared by the shard's owner and every other worker's view of it,
//! bounded in bytes.
//!
//! One cache per shard holds each entry once, compactly ([`CompactEntry`]), and every core
//! of the shard (the owner's and each worker's view) reads and fills it, so a subtree search
//! that reads most entries through other workers' views does not decode them from redb each
//! time (why one shared cache: docs/DECISIONS.md, "One cache budget"). No global lock: the cache is split into
//! [`PARTITIONS`] partitions by entry id, each behind its own `RwLock`, so readers of
//! different entries touch different locks and readers of the same one only share a read
//! lock. A hit writes nothing else but a CLOCK reference bit, and only when it is not set
//! already; eviction is CLOCK over each partition's entries, by bytes.
//!
//! # Generations, and why a stale version can't stay
//!
//! Every snapshot a core reads through carries a *label*: the engine's commit count
//! ([`crate::storage::KvEngine::commits`]) read just before the snapshot was opened, so the
//! snapshot holds at least every commit up to its label. The owner (the shard actor's core,
//! the only writer) labels its snapshot exactly: it opens it right after its own commit
//! and nothing else commits meanwhile. After each commit the owner *publishes* it: it puts
//! or forgets every entry the batch touched, stamped with the commit's label, and then
//! stores the label in [`EntryCache::published`]. Only then are the batch's writers
//! answered. The invariant, for an entry `e` and the cache at any moment:
//!
//! > If the cache holds a version of `e`, it is the version of the last published commit
//! > that wrote `e` (or, if none did since the cache opened, the stored one).
//!
//! Three rules keep it:
//!
//! 1. *Publish replaces.* The owner's put or forget of `e` for commit `g` happens under
//!    `e`'s partition lock and raises the partition's `stamp` to `g`.
//! 2. *Insert only what no publish has overtaken.* A reader that missed and read `e` from
//!    a snapshot labelled `l` may insert it only if its partition's stamp is at most `l`,
//!    checked under the partition's write lock. A stamp above `l` means a commit the
//!    snapshot may not hold was published for this partition after the reader's snapshot
//!    was taken, and its version of `e` may be older: the insert is refused. A stamp at
//!    most `l` means every published change to the partition is in the snapshot, so the
//!    version read is the latest published one; a commit published later replaces it by
//!    rule 1. This is the interleaving `insert_after_invalidate` tests: a view that read
//!    version `g` can't put it back after the owner committed `g + 1` and forgot it.
//! 3. *Read only what matches the snapshot.* A reader uses the cache at all only when
//!    `published >= l` (every commit its snapshot holds is published; otherwise it reads
//!    its snapshot), and takes a hit only if the version's own label (`since`: the commit
//!    that put it, or the label of the snapshot it was read from) is at most `l`. So a
//!    reader never sees a version newer than its snapshot, nor one older than it. (A
//!    view's label is a lower bound: redb counts a commit just after making it visible,
//!    so for that instant a snapshot may hold one commit more than its label says, and a
//!    hit may give that commit's predecessor. Never a version that outlives the publish:
//!    counting after the commit, not before, is what keeps rule 2 sound.)
//!
//! A snapshot that is not a core's current one (a search pinned to an older one) has no
//! label here and bypasses the cache, as does every core of an engine that counts no
//! commits (sled: its views are live anyway), the owner excepted, which labels its own.
//!
//! Read-your-writes: a writer is answered after the publish, and any later read opens a
//! snapshot labelled at or above the write's commit (the engine counts a commit before its
//! writer is answered, `ShardCore::refresh_snapshot_if_moved`), which by rule 3 gets the
//! published version or reads its snapshot.
//!
//! After a failed commit the owner closes the cache for good ([`EntryCache::close`]): the
//! commit may have reached the file without the engine counting it, so no label can tell.
//!
//! Until the owner opens the cache ([`EntryCache::open`], when its actor starts) every
//! read bypasses it: tools and start-up passes that commit straight to the engine never
//! leave a version behind that no publish would replace.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::entry::codec::CorruptRecord;
use crate::entry::compactentry::CompactEntry;
use crate::entry::record::EntryRecord;
use crate::id::EntryId;
use crate::rules::RuleTable;

/// Partitions per shard: each its own lock, budget share and CLOCK.
pub const PARTITIONS: usize = 64;

/// What a cached entry costs beyond its own bytes: its map slot, its CLOCK slot and the
/// allocator's rounding, about.
pub const SLOT_OVERHEAD: usize = 64;

/// `published` before the owner opened the cache: every read bypasses it.
const CLOSED: u64 = u64::MAX;

/// What a read finds ([`EntryCache::get`]).
pub enum Lookup {
    Hit(Arc<CompactEntry>),
    /// Not cached: read the snapshot, then offer it with [`EntryCache::insert`].
    Miss,
    /// The cache can't answer for this snapshot (rule 3): read the snapshot, insert nothing.
    Bypass,
}

pub struct EntryCache {
    partitions: [RwLock<Partition>; PARTITIONS],
    /// Bytes each partition may hold.
    partition_budget: usize,
    /// The label of the last commit the owner published; [`CLOSED`] before it opened.
    published: AtomicU64,
    rules: Arc<RuleTable>,
}

impl std::fmt::Debug for EntryCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryCache")
            .field("budget", &(self.partition_budget * PARTITIONS))
            .field("published", &self.published.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Partition {
    index: HashMap<EntryId, usize, IdHash>,
    slots: Vec<Slot>,
    hand: usize,
    bytes: usize,
    /// The highest label that put or forgot an entry of this partition (rule 1).
    stamp: u64,
}

struct Slot {
    id: EntryId,
    /// The label the version is known current at: its commit's, or its snapshot's.
    since: u64,
    entry: Arc<CompactEntry>,
    charge: usize,
    /// CLOCK's reference bit: set by hits (only if clear), cleared by the hand.
    referenced: AtomicBool,
}

impl EntryCache {
    /// A cache of `budget_bytes` for one shard. Closed until the owner calls
    /// [`EntryCache::open`].
    pub fn new(budget_bytes: usize, rules: Arc<RuleTable>) -> Self {
        let partitions = std::array::from_fn(|_| RwLock::new(Partition::default()));
        Self {
            partitions,
            partition_budget: budget_bytes / PARTITIONS,
            published: AtomicU64::new(CLOSED),
            rules,
        }
    }

    /// Whether any entry can be cached at all.
    pub fn enabled(&self) -> bool {
        self.partition_budget > 0
    }

    /// The owner starts serving with its snapshot labelled `label`: whatever was cached
    /// before (nothing, in the server) is dropped, and reads may use the cache from now on.
    pub fn open(&self, label: u64) {
        for partition in self.partitions.iter() {
            let mut p = write(partition);
            *p = Partition { stamp: label, ..Partition::default() };
        }
        self.published.store(label, Ordering::Release);
    }

    /// Whether [`EntryCache::close`] closed it (or the owner has not opened it yet).
    pub fn is_closed(&self) -> bool {
        self.published.load(Ordering::Acquire) == CLOSED
    }

    /// The compact form of `record`, for this cache.
    pub fn compact(&self, record: &EntryRecord) -> Result<CompactEntry, CorruptRecord> {
        CompactEntry::build(&self.rules, record)
    }

    /// The cached version of `id` for a reader whose snapshot is labelled `label` (rule 3).
    pub fn get(&self, id: EntryId, label: u64) -> Lookup {
        if !self.readable_at(label) {
            return Lookup::Bypass;
        }
        let p = read(self.partition(id));
        let Some(slot) = p.index.get(&id).and_then(|&at| p.slots.get(at)) else { return Lookup::Miss };
        if slot.since > label {
            // Put by a commit after the reader's snapshot: the reader's version is older.
            return Lookup::Bypass;
        }
        if !slot.referenced.load(Ordering::Relaxed) {
            slot.referenced.store(true, Ordering::Relaxed);
        }
        Lookup::Hit(slot.entry.clone())
    }

    fn readable_at(&self, label: u64) -> bool {
        let published = self.published.load(Ordering::Acquire);
        published != CLOSED && published >= label && self.enabled()
    }

    /// Offers the version of `id` a reader read from its snapshot labelled `label` after a
    /// [`Lookup::Miss`]; kept only if no publish overtook that snapshot (rule 2) and no
    /// version is cached already. Whether it was kept.
    pub fn insert(&self, id: EntryId, entry: Arc<CompactEntry>, label: u64) -> bool {
        let mut p = write(self.partition(id));
        // Checked under the lock: a `close` that cleared this partition already shows.
        if !self.readable_at(label) || p.stamp > label || p.index.contains_key(&id) {
            return false;
        }
        p.add(id, entry, label, self.partition_budget)
    }

    /// The owner's put of `id`'s version committed with label `label` (rule 1).
    pub fn put(&self, id: EntryId, entry: Arc<CompactEntry>, label: u64) {
        let mut p = write(self.partition(id));
        p.stamp = p.stamp.max(label);
        p.remove(id);
        if self.enabled() {
            p.add(id, entry, label, self.partition_budget);
        }
    }

    /// The owner's forget of `id` (deleted, or its commit failed), at label `label`.
    pub fn forget(&self, id: EntryId, label: u64) {
        let mut p = write(self.partition(id));
        p.stamp = p.stamp.max(label);
        p.remove(id);
    }

    /// Every entry of a commit labelled `label` is put or forgotten: readers of snapshots
    /// up to `label` may use the cache. Called by the owner before answering the writers.
    /// A closed cache stays closed. (The owner is the only writer of `published`.)
    pub fn publish(&self, label: u64) {
        if self.published.load(Ordering::Relaxed) != CLOSED {
            self.published.store(label, Ordering::Release);
        }
    }

    /// After a failed commit: empties the cache and closes it, so that every read goes to
    /// the storage. Labels can no longer tell versions apart (the engine's count moved
    /// without a version to publish), so nothing may be served from it until the owner's
    /// next successful commit opens it again, empty, at that commit's label
    /// ([`EntryCache::open`]): a reader of an older snapshot neither hits nor inserts then.
    pub fn close(&self) {
        self.published.store(CLOSED, Ordering::Release);
        for partition in self.partitions.iter() {
            *write(partition) = Partition::default();
        }
    }

    /// Entries and bytes held, over all partitions (tests, metrics).
    pub fn usage(&self) -> (usize, usize) {
        self.partitions.iter().fold((0, 0), |(n, b), p| {
            let p = read(p);
            (n + p.slots.len(), b + p.bytes)
        })
    }

    #[allow(clippy::indexing_slicing)] // `% PARTITIONS` is always in bounds
    fn partition(&self, id: EntryId) -> &RwLock<Partition> {
        // Ids count up within a shard: their low bits spread evenly.
        &self.partitions[(id.0 as usize) % PARTITIONS]
    }
}

/// A poisoned partition lock only means a panic while it was held; its data is still
/// consistent (every mutation below completes before anything can panic), so go on.
fn read(lock: &RwLock<Partition>) -> RwLockReadGuard<'_, Partition> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write(lock: &RwLock<Partition>) -> RwLockWriteGuard<'_, Partition> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

impl Partition {
    /// Adds an entry not held, evicting by CLOCK until it fits. False if it can't fit.
    fn add(&mut self, id: EntryId, entry: Arc<CompactEntry>, since: u64, budget: usize) -> bool {
        let charge = entry.bytes() + SLOT_OVERHEAD;
        if charge > budget {
            return false;
        }
        // Each slot is passed over at most twice: once to clear its bit, once to evict it.
        let mut steps = 2 * self.slots.len() + 1;
        while self.bytes + charge > budget && !self.slots.is_empty() && steps > 0 {
            steps -= 1;
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let Some(slot) = self.slots.get(self.hand) else { break };
            if slot.referenced.swap(false, Ordering::Relaxed) {
                self.hand += 1;
            } else {
                let victim = slot.id;
                self.remove(victim);
            }
        }
        if self.bytes + charge > budget {
            return false;
        }
        self.index.insert(id, self.slots.len());
        self.slots.push(Slot { id, since, entry, charge, referenced: AtomicBool::new(false) });
        self.bytes += charge;
        true
    }

    fn remove(&mut self, id: EntryId) {
        let Some(at) = self.index.remove(&id) else { return };
        if at >= self.slots.len() {
            return;
        }
        let removed = self.slots.swap_remove(at);
        self.bytes = self.bytes.saturating_sub(removed.charge);
        if let Some(moved) = self.slots.get(at) {
            self.index.insert(moved.id, at);
        }
    }
}

/// Entry ids are chosen by the server, never by a client: a multiply-shift hash is enough.
#[derive(Clone, Copy, Default)]
struct IdHash;

struct IdHasher(u64);

impl BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::entry::{Attribute, Entry};
    use ferrodir_proto::schema::Schema;

    fn cache(budget: usize) -> EntryCache {
        let rules = Arc::new(RuleTable::from_schema(&Schema::standard()));
        EntryCache::new(budget, rules)
    }

    fn version(cache: &EntryCache, cn: &str) -> Arc<CompactEntry> {
        let record = EntryRecord {
            parent: EntryId(1),
            rdn: format!("cn={cn}"),
            rdn_norm: format!("cn={cn}"),
            flags: 0,
            entry: Entry::new(vec![Attribute::new("cn", vec![cn.as_bytes().to_vec()])]),
        };
        Arc::new(cache.compact(&record).unwrap())
    }

    fn hit(cache: &EntryCache, id: EntryId, label: u64) -> Option<String> {
        match cache.get(id, label) {
            Lookup::Hit(e) => Some(e.rdn().to_string()),
            _ => None,
        }
    }

    #[test]
    fn closed_until_the_owner_opens_it() {
        let c = cache(1 << 20);
        let id = EntryId(5);
        assert!(matches!(c.get(id, 0), Lookup::Bypass));
        assert!(!c.insert(id, version(&c, "a"), 0));
        c.open(3);
        assert!(matches!(c.get(id, 3), Lookup::Miss));
        assert!(c.insert(id, version(&c, "a"), 3));
        assert_eq!(hit(&c, id, 3).as_deref(), Some("cn=a"));
    }

    /// The race of rule 2: a view misses at label 4 and reads version "old" from its
    /// snapshot; before it inserts, the owner commits 5, which changes the entry, and
    /// publishes it (forgetting the entry). The view's insert must be refused, and a
    /// reader at 5 must not see "old".
    #[test]
    fn insert_after_invalidate_is_refused() {
        let c = cache(1 << 20);
        let id = EntryId(9);
        c.open(4);
        assert!(matches!(c.get(id, 4), Lookup::Miss));
        let old = version(&c, "old"); // read from the snapshot labelled 4
        c.forget(id, 5); // the owner's commit 5 changed it
        c.publish(5);
        assert!(!c.insert(id, old.clone(), 4), "a version overtaken by a publish went in");
        assert!(matches!(c.get(id, 5), Lookup::Miss));
        // Same with the owner putting the new version instead of forgetting.
        let id2 = EntryId(10);
        assert!(matches!(c.get(id2, 5), Lookup::Miss));
        c.put(id2, version(&c, "new"), 6);
        c.publish(6);
        assert!(!c.insert(id2, old, 5));
        assert_eq!(hit(&c, id2, 6).as_deref(), Some("cn=new"));
        // A reader whose snapshot holds commit 6 inserts fine.
        assert!(c.insert(EntryId(11), version(&c, "x"), 6));
    }

    /// An insert that wins the race is replaced by the later publish (rule 1).
    #[test]
    fn a_publish_after_an_insert_replaces_it() {
        let c = cache(1 << 20);
        let id = EntryId(2);
        c.open(1);
        assert!(c.insert(id, version(&c, "old"), 1));
        c.put(id, version(&c, "new"), 2);
        c.publish(2);
        assert_eq!(hit(&c, id, 2).as_deref(), Some("cn=new"));
        c.forget(id, 3);
        c.publish(3);
        assert!(matches!(c.get(id, 3), Lookup::Miss));
    }

    /// Rule 3: a reader whose snapshot holds a commit not yet published bypasses the
    /// cache; one whose snapshot is older than a cached version doesn't get it.
    #[test]
    fn readers_see_only_their_snapshots_version() {
        let c = cache(1 << 20);
        let id = EntryId(3);
        c.open(1);
        c.put(id, version(&c, "v2"), 2);
        // The owner is between commit 2 and its publish: a reader at 2 reads its snapshot.
        assert!(matches!(c.get(id, 2), Lookup::Bypass));
        c.publish(2);
        assert_eq!(hit(&c, id, 2).as_deref(), Some("cn=v2"));
        assert!(matches!(c.get(id, 1), Lookup::Bypass), "v2 is newer than a snapshot at 1");
        // Read-your-writes: the writer of 2 is answered now; any later read is at >= 2.
        assert_eq!(hit(&c, id, 2).as_deref(), Some("cn=v2"));
    }

    /// After a failed commit the cache is emptied and stays closed: no hit, no insert, and
    /// a later publish does not reopen it; only the owner's open does.
    #[test]
    fn a_failed_commit_closes_the_cache_until_it_is_opened_again() {
        let c = cache(1 << 20);
        c.open(1);
        assert!(c.insert(EntryId(1), version(&c, "a"), 1));
        c.close();
        assert_eq!(c.usage().0, 0);
        assert!(matches!(c.get(EntryId(1), 1), Lookup::Bypass));
        assert!(!c.insert(EntryId(2), version(&c, "b"), 1));
        c.publish(2);
        assert!(matches!(c.get(EntryId(1), 2), Lookup::Bypass));
        assert!(c.is_closed());
        // Opened again at the owner's next commit, 3: readers of older snapshots neither
        // hit nor insert, readers at 3 use it.
        c.open(3);
        assert!(!c.is_closed());
        assert!(!c.insert(EntryId(2), version(&c, "b"), 2), "a read of a snapshot before the reopen went in");
        assert!(matches!(c.get(EntryId(2), 3), Lookup::Miss));
        assert!(c.insert(EntryId(2), version(&c, "b"), 3));
        assert!(matches!(c.get(EntryId(2), 2), Lookup::Miss | Lookup::Bypass));
        assert_eq!(hit(&c, EntryId(2), 3).as_deref(), Some("cn=b"));
    }

    #[test]
    fn evicts_by_bytes_and_keeps_referenced_entries() {
        let probe = cache(1 << 20);
        let charge = version(&probe, "e000").bytes() + SLOT_OVERHEAD;
        // Four entries' worth per partition.
        let c = cache(4 * charge * PARTITIONS);
        c.open(0);
        let ids: Vec<EntryId> = (0..4).map(|i| EntryId((i * PARTITIONS) as u64)).collect();
        for (i, &id) in ids.iter().enumerate() {
            assert!(c.insert(id, version(&c, &format!("e{i:03}")), 0));
        }
        assert_eq!(c.usage().0, 4);
        // Touch all but the third: it is the one CLOCK evicts.
        for &id in [ids[0], ids[1], ids[3]].iter() {
            assert!(hit(&c, id, 0).is_some());
        }
        let newcomer = EntryId((4 * PARTITIONS) as u64);
        assert!(c.insert(newcomer, version(&c, "e004"), 0));
        assert!(matches!(c.get(ids[2], 0), Lookup::Miss), "the unreferenced entry goes");
        for &id in [ids[0], ids[1], ids[3], newcomer].iter() {
            assert!(hit(&c, id, 0).is_some());
        }
        let (entries, bytes) = c.usage();
        assert_eq!(entries, 4);
        assert!(bytes <= 4 * charge);
        // An entry larger than a partition's share is not kept.
        let tiny = cache(PARTITIONS * 8);
        tiny.open(0);
        assert!(!tiny.insert(EntryId(1), version(&tiny, "big"), 0));
        // No budget: nothing is kept, every read misses.
        let none = cache(0);
        none.open(0);
        none.put(EntryId(1), version(&none, "a"), 1);
        none.publish(1);
        assert!(matches!(none.get(EntryId(1), 1), Lookup::Bypass));
    }

    /// Owner and views on several threads: readers see only their snapshot's version,
    /// and after the owner's last publish every cached version is the last one it wrote,
    /// whatever the interleaving of stale inserts.
    #[test]
    fn concurrent_stale_inserts_never_outlive_a_publish() {
        let c = Arc::new(cache(1 << 22));
        c.open(0);
        let ids: Vec<EntryId> = (0..16).map(EntryId).collect();
        // The model: a snapshot labelled l holds version "l" of every id; the owner's
        // commit g writes version "g" of every id (a put on even g, a forget on odd).
        let label = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (c, label, ids, done) = (c.clone(), label.clone(), ids.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut hits = 0u64;
                    while !done.load(Ordering::Acquire) {
                        let l = label.load(Ordering::Acquire);
                        for &id in &ids {
                            match c.get(id, l) {
                                Lookup::Hit(e) => {
                                    assert_eq!(e.rdn(), format!("cn={l}"), "a reader at {l}");
                                    hits += 1;
                                }
                                Lookup::Miss => {
                                    c.insert(id, version(&c, &l.to_string()), l);
                                }
                                Lookup::Bypass => {}
                            }
                        }
                    }
                    hits
                })
            })
            .collect();
        let rounds = 3000u64;
        for g in 1..=rounds {
            // The engine commits g (its count moves), then the owner publishes it.
            label.store(g, Ordering::Release);
            for &id in &ids {
                if g % 2 == 0 {
                    c.put(id, version(&c, &g.to_string()), g);
                } else {
                    c.forget(id, g);
                }
            }
            c.publish(g);
            if g % 100 == 0 {
                std::thread::yield_now();
            }
        }
        done.store(true, Ordering::Release);
        let hits: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(hits > 0, "the readers never hit: the test tested nothing");
        for &id in &ids {
            match c.get(id, rounds) {
                Lookup::Hit(e) => assert_eq!(e.rdn(), format!("cn={rounds}")),
                Lookup::Miss => {}
                Lookup::Bypass => panic!("published {rounds}"),
            }
        }
    }
}
