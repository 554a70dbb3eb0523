//! Which shards may hold a substring gram: one table for the whole server, so that a
//! substring search from a subtree base (`(cn=user 123*)` over the whole tree) asks only
//! the shards whose entries have every gram the assertion requires, and its cost does not
//! grow with the shard count the way asking every shard does. The equality Bloom filters (`bloom`) do the same for `(uid=x)`.
//!
//! A gram key (`keys::sub_prefix(attribute, gram)`: a substring posting without its id)
//! hashes to two slots; each slot holds one bit per shard. A shard sets its bit in both slots
//! when it stages a posting of the gram (so before the write is acknowledged, and a superset
//! of what is committed); a search ANDs the two slots of each required gram, and the shards
//! whose bit survives every gram may hold a match. Slots shared by several grams, and postings
//! deleted since, only leave bits set: a shard is asked for nothing, never skipped wrongly.
//! Bits are never cleared while the server runs; the table is rebuilt from the substring
//! index at every start ([`GramShards::fill_from`]), so deletes stop costing once restarted.
//!
//! Beside the index's 3-byte grams the table holds 4-byte ones ("wide" grams,
//! `index::IndexConfig::each_wide_gram`), which are in no index: `123` is in about twice as
//! many entries as match `(cn=user 123*)`, ` 123` only in those that match. A shard sets
//! their bits from each entry it stages; at start they are read from the entries themselves.
//!
//! Until it is filled ([`GramShards::enable`]) the table answers "every shard": a table made
//! by a tool or a test that never read the index can't prune anything.
//!
//! Memory: [`SLOTS`] slots of one 64-bit word per 64 shards: 4 MiB for the whole server up to
//! 64 shards, whatever the entry count (4 bytes per entry at 1M). A directory with many
//! distinct grams fills more slots with more bits and prunes less; it never answers wrong.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ferrodir_proto::entry::Entry;

use crate::entry::record::EntryRecord;
use crate::error::ShardResult;
use crate::index::config::IndexConfig;
use crate::rules::RuleTable;
use crate::storage::{KvSnapshot, Table};

/// Slots in the table (2^19).
const SLOTS_LOG2: u32 = 19;
pub const SLOTS: usize = 1 << SLOTS_LOG2;

pub struct GramShards {
    /// 64-bit words per slot: one bit per shard.
    words: usize,
    shards: usize,
    cells: Vec<AtomicU64>,
    /// Set once the table holds every posting of the index ([`GramShards::enable`]).
    enabled: AtomicBool,
    /// Set if a shard beyond the table's width recorded a posting (never, when the table is
    /// made for the directory's shard count): from then on the table prunes nothing.
    overflowed: AtomicBool,
}

impl std::fmt::Debug for GramShards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GramShards({} shards, enabled: {})", self.shards, self.enabled.load(Ordering::Relaxed))
    }
}

impl Default for GramShards {
    /// A table for one shard, never filled: it prunes nothing (tests, tools).
    fn default() -> Self {
        Self::new(1)
    }
}

/// The shards a search may find matches on: a bit per shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardMask(Vec<u64>);

impl ShardMask {
    /// Every shard of `shards`.
    pub fn all(shards: usize) -> Self {
        let mut words = vec![u64::MAX; shards.div_ceil(64).max(1)];
        if let Some(last) = words.last_mut() {
            let rest = shards % 64;
            if rest != 0 {
                *last = (1u64 << rest) - 1;
            }
        }
        Self(words)
    }

    pub fn contains(&self, shard: usize) -> bool {
        self.0.get(shard / 64).is_some_and(|word| word & (1 << (shard % 64)) != 0)
    }

    /// Keeps only the shards `other` holds too.
    pub fn and(&mut self, other: &ShardMask) {
        for (word, o) in self.0.iter_mut().zip(&other.0) {
            *word &= o;
        }
    }

    /// Adds the shards `other` holds.
    pub fn or(&mut self, other: &ShardMask) {
        for (word, o) in self.0.iter_mut().zip(&other.0) {
            *word |= o;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
}

/// The gram key of a substring posting (`keys::sub`): the key without its 8-byte id, which
/// is `keys::sub_prefix(attribute, gram)`, what a search's plan asks for. None for a key of
/// any other table.
pub fn gram_key(index_key: &[u8]) -> Option<&[u8]> {
    let prefix = index_key.get(..index_key.len().checked_sub(8)?)?;
    (prefix.len() > 1 && prefix.first() == Some(&(Table::Sub as u8))).then_some(prefix)
}

/// The two slots of a gram key (FNV-1a, then the high bits folded in).
fn slots(key: &[u8]) -> (usize, usize) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in key {
        h = (h ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 31;
    let h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mask = (SLOTS - 1) as u64;
    let first = (h >> 40) & mask;
    let mut second = (h >> 8) & mask;
    if second == first {
        second = (second + 1) & mask;
    }
    (first as usize, second as usize)
}

impl GramShards {
    pub fn new(shards: usize) -> Self {
        let words = shards.div_ceil(64).max(1);
        let cells = (0..SLOTS * words).map(|_| AtomicU64::new(0)).collect();
        Self {
            words,
            shards: shards.max(1),
            cells,
            enabled: AtomicBool::new(false),
            overflowed: AtomicBool::new(false),
        }
    }

    /// Records that `shard` holds (or may hold) a posting under `gram_key`.
    pub fn insert(&self, shard: usize, gram_key: &[u8]) {
        let (word, bit) = (shard / 64, 1u64 << (shard % 64));
        if word >= self.words {
            self.overflowed.store(true, Ordering::Release);
            return;
        }
        let (a, b) = slots(gram_key);
        for slot in [a, b] {
            if let Some(cell) = self.cells.get(slot * self.words + word) {
                // Read first: once a gram's bit is set (nearly always, after the start's
                // fill), staging leaves the line shared instead of taking it exclusive,
                // so shards on other cores reading or writing nearby slots don't pay.
                if cell.load(Ordering::Relaxed) & bit == 0 {
                    cell.fetch_or(bit, Ordering::Relaxed);
                }
            }
        }
    }

    /// Records a substring posting key (`keys::sub`) staged on `shard`; any other key is
    /// passed over.
    pub fn insert_posting(&self, shard: usize, index_key: &[u8]) {
        if let Some(key) = gram_key(index_key) {
            self.insert(shard, key);
        }
    }

    /// Records the wide grams of an entry version staged on `shard` (`index::IndexConfig::
    /// each_wide_gram`).
    pub fn insert_entry(&self, shard: usize, indexes: &IndexConfig, rules: &RuleTable, entry: &Entry) {
        indexes.each_wide_gram(rules, entry, &mut |key| self.insert(shard, key));
    }

    /// From now on the table prunes: call once it holds every posting of every shard.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Release);
    }

    /// Where a few fixed gram keys land: a saved table is read back only by a build whose
    /// layout and hashing give the same (server/src/data/startcache.rs).
    pub fn layout_fingerprint() -> Vec<u64> {
        let mut out = vec![SLOTS as u64];
        for key in [&b"Scn\0abc"[..], b"Scn\0 12", b""] {
            let (a, b) = slots(key);
            out.extend([a as u64, b as u64]);
        }
        out
    }

    /// The table's cells and whether it overflowed, for the start cache a clean stop
    /// writes (server/src/data/startcache.rs); `words` per slot is implied by the length.
    pub fn cells(&self) -> (Vec<u64>, bool) {
        let cells = self.cells.iter().map(|cell| cell.load(Ordering::Relaxed)).collect();
        (cells, self.overflowed.load(Ordering::Acquire))
    }

    /// Sets the cells [`Self::cells`] gave (ORed in). False, and nothing changed, when they
    /// are not a table of this width. The caller then [`Self::enable`]s it, as after a fill.
    pub fn load_cells(&self, cells: &[u64], overflowed: bool) -> bool {
        if cells.len() != self.cells.len() {
            return false;
        }
        for (cell, bits) in self.cells.iter().zip(cells) {
            cell.fetch_or(*bits, Ordering::Relaxed);
        }
        if overflowed {
            self.overflowed.store(true, Ordering::Release);
        }
        true
    }

    /// Keeps in `mask` only the shards that may hold a posting under `gram_key`.
    pub fn restrict(&self, gram_key: &[u8], mask: &mut ShardMask) {
        if !self.enabled.load(Ordering::Acquire) || self.overflowed.load(Ordering::Acquire) {
            return;
        }
        let (a, b) = slots(gram_key);
        for (i, word) in mask.0.iter_mut().enumerate().take(self.words) {
            let at = |slot: usize| {
                self.cells.get(slot * self.words + i).map_or(u64::MAX, |c| c.load(Ordering::Relaxed))
            };
            *word &= at(a) & at(b);
        }
    }

    /// Sets `shard`'s bits for every gram posting in `snapshot` (that shard's index), reading
    /// one posting per distinct gram: the scan seeks past each gram's postings; then for the
    /// wide grams of every entry, when some attribute has a substring index (one read of
    /// every entry). Run at start for every shard, then [`GramShards::enable`]. An entry
    /// that does not decode stops all pruning: its grams can't be known.
    pub fn fill_from(
        &self,
        shard: usize,
        snapshot: &dyn KvSnapshot,
        indexes: &IndexConfig,
        rules: &RuleTable,
    ) -> ShardResult<()> {
        self.fill_grams(shard, snapshot)?;
        if !Self::fill_reads_entries(indexes) {
            return Ok(());
        }
        snapshot.scan_prefix(&[Table::Entries as u8], &mut |_, value| {
            match EntryRecord::decode(value) {
                Ok(record) => self.insert_entry(shard, indexes, rules, &record.entry),
                Err(_) => self.stop_pruning(),
            }
            true
        })?;
        Ok(())
    }

    /// Whether a fill must read every entry: some attribute has a substring index, and its
    /// wide grams come from the values themselves ([`GramShards::insert_entry`]). A caller
    /// that reads every entry anyway (the server's start) feeds them in itself.
    pub fn fill_reads_entries(indexes: &IndexConfig) -> bool {
        indexes.configured().iter().any(|(_, kind)| *kind == crate::index::config::IndexKind::Substring)
    }

    /// From now on the table prunes nothing: an entry whose grams can't be known (it does
    /// not decode) may hold any.
    pub fn stop_pruning(&self) {
        self.overflowed.store(true, Ordering::Release);
    }

    /// The index's 3-byte grams of [`GramShards::fill_from`], one posting read per gram;
    /// the entries' wide grams are left to the caller.
    pub fn fill_grams(&self, shard: usize, snapshot: &dyn KvSnapshot) -> ShardResult<()> {
        let table = [Table::Sub as u8];
        let mut from = table.to_vec();
        loop {
            let mut next: Option<Vec<u8>> = None;
            snapshot.scan_from(&table, &from, &mut |key, _| {
                if let Some(gram) = gram_key(key) {
                    self.insert(shard, gram);
                    next = crate::storage::prefix_end(gram);
                } else {
                    // Not a posting (never written): step over it.
                    let mut after = key.to_vec();
                    after.push(0);
                    next = Some(after);
                }
                false
            })?;
            match next {
                Some(after) => from = after,
                None => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::EntryId;
    use crate::index::keys;

    fn table(shards: usize) -> GramShards {
        let t = GramShards::new(shards);
        t.enable();
        t
    }

    fn shards_for(t: &GramShards, grams: &[&[u8]]) -> Vec<usize> {
        let mut mask = ShardMask::all(t.shards);
        for gram in grams {
            t.restrict(&keys::sub_prefix("cn", gram), &mut mask);
        }
        (0..t.shards).filter(|s| mask.contains(*s)).collect()
    }

    #[test]
    fn a_posting_key_names_its_gram_key() {
        let key = keys::sub("cn", b"abc", EntryId::new(3, 7));
        assert_eq!(gram_key(&key), Some(keys::sub_prefix("cn", b"abc").as_slice()));
        assert_eq!(gram_key(&keys::eq("cn", b"abc", EntryId(1))), None);
        assert_eq!(gram_key(&keys::entry(EntryId(1))), None);
        assert_eq!(gram_key(b"S"), None);
    }

    #[test]
    fn only_shards_with_every_gram_remain() {
        let t = table(16);
        t.insert_posting(3, &keys::sub("cn", b"abc", EntryId::new(3, 1)));
        t.insert_posting(3, &keys::sub("cn", b"bcd", EntryId::new(3, 1)));
        t.insert_posting(5, &keys::sub("cn", b"abc", EntryId::new(5, 1)));
        t.insert_posting(9, &keys::sub("cn", b"bcd", EntryId::new(9, 1)));
        assert_eq!(shards_for(&t, &[b"abc"]), vec![3, 5]);
        assert_eq!(shards_for(&t, &[b"abc", b"bcd"]), vec![3]);
        assert_eq!(shards_for(&t, &[b"zzz"]), Vec::<usize>::new());
    }

    #[test]
    fn cells_round_trip_into_a_new_table() {
        let t = table(16);
        t.insert_posting(3, &keys::sub("cn", b"abc", EntryId::new(3, 1)));
        t.insert_posting(9, &keys::sub("cn", b"bcd", EntryId::new(9, 1)));
        let (cells, overflowed) = t.cells();
        let copy = GramShards::new(16);
        assert!(copy.load_cells(&cells, overflowed));
        copy.enable();
        assert_eq!(shards_for(&copy, &[b"abc"]), vec![3]);
        assert_eq!(shards_for(&copy, &[b"bcd"]), vec![9]);
        assert!(!GramShards::new(100).load_cells(&cells, false), "another width is refused");
    }

    #[test]
    fn an_unfilled_table_prunes_nothing() {
        let t = GramShards::new(4);
        assert_eq!(shards_for(&t, &[b"abc"]), vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_shard_beyond_the_table_stops_all_pruning() {
        let t = table(2);
        t.insert(0, &keys::sub_prefix("cn", b"abc"));
        assert_eq!(shards_for(&t, &[b"abc"]), vec![0]);
        t.insert(64, &keys::sub_prefix("cn", b"abc"));
        assert_eq!(shards_for(&t, &[b"abc"]), vec![0, 1]);
    }

    #[test]
    fn more_than_64_shards_use_more_words() {
        let t = table(130);
        t.insert(129, &keys::sub_prefix("cn", b"abc"));
        t.insert(64, &keys::sub_prefix("cn", b"abc"));
        assert_eq!(shards_for(&t, &[b"abc"]), vec![64, 129]);
        assert_eq!(ShardMask::all(130).0.len(), 3);
        assert!(!ShardMask::all(130).contains(130));
    }

    /// No false negatives with the table crowded far past its size, and few false positives
    /// at the load of a large directory's distinct grams.
    #[test]
    fn crowded_tables_only_answer_maybe() {
        let t = table(16);
        for i in 0..100_000u32 {
            t.insert((i % 16) as usize, &keys::sub_prefix("cn", &i.to_be_bytes()));
        }
        for i in 0..100_000u32 {
            assert!(shards_for(&t, &[&i.to_be_bytes()]).contains(&((i % 16) as usize)));
        }
        let extra: usize = (0..2_000u32).map(|i| shards_for(&t, &[&i.to_be_bytes()]).len() - 1).sum();
        assert!(extra < 2_000, "{extra} extra shards over 2,000 grams");
    }

    #[test]
    fn filling_from_a_snapshot_reads_every_gram() {
        use crate::storage::{EngineKind, Mutation};
        let dir = tempfile::tempdir().unwrap();
        let engine = EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap();
        let mut batch = Vec::new();
        for seq in 0..50 {
            for gram in [b"abc", b"abd", b"xyz"] {
                batch.push(Mutation {
                    key: keys::sub("cn", gram, EntryId::new(2, seq)),
                    value: Some(Vec::new()),
                });
            }
            batch.push(Mutation {
                key: keys::sub("sn", b"qqq", EntryId::new(2, seq)),
                value: Some(Vec::new()),
            });
            batch.push(Mutation {
                key: keys::eq("cn", b"abc", EntryId::new(2, seq)),
                value: Some(Vec::new()),
            });
        }
        engine.commit(&batch).unwrap();
        let t = GramShards::new(4);
        t.fill_grams(2, engine.snapshot().unwrap().as_ref()).unwrap();
        t.enable();
        for gram in [b"abc", b"abd", b"xyz"] {
            assert_eq!(shards_for(&t, &[gram]), vec![2]);
        }
        let mut mask = ShardMask::all(4);
        t.restrict(&keys::sub_prefix("sn", b"qqq"), &mut mask);
        assert!(mask.contains(2) && !mask.contains(1));
        assert!(shards_for(&t, &[b"abe"]).is_empty());
    }
    /// Every substring posting a shard holds after each acknowledged add, modify, rename and
    /// delete is in the table (no false negative), and a table filled from the shard's file,
    /// as at a restart, holds them too.
    #[test]
    fn every_committed_posting_is_in_the_table_through_writes_and_a_refill() {
        use std::rc::Rc;
        use std::sync::Arc;

        use actix::Actor;
        use ferrodir_proto::entry::{Attribute, Entry};
        use ferrodir_proto::ldif::{LdifMod, ModOp};
        use ferrodir_proto::schema::Schema;

        use crate::actor::{ShardActor, Write};
        use crate::core::{ShardCore, ShardInfo};
        use crate::index::config::IndexConfig;
        use crate::rules::RuleTable;
        use crate::storage::EngineKind;
        use crate::write::batch::{WriteOp, WriteOutcome};

        /// Every gram key of the shard's committed substring postings, and every wide gram
        /// of its committed entries, is in `t` for shard 0.
        fn assert_covers(t: &GramShards, core: &ShardCore, when: &str) -> usize {
            let has = |key: &[u8]| {
                let mut mask = ShardMask::all(2);
                t.restrict(key, &mut mask);
                mask.contains(0)
            };
            let mut postings = 0;
            let snapshot = core.snapshot();
            snapshot
                .scan_prefix(&[Table::Sub as u8], &mut |key, _| {
                    assert!(has(gram_key(key).expect("a posting")), "{when}: {key:?} missing");
                    postings += 1;
                    true
                })
                .unwrap();
            snapshot
                .scan_prefix(&[Table::Entries as u8], &mut |_, value| {
                    let record = EntryRecord::decode(value).unwrap();
                    let mut wide = 0;
                    core.info.indexes.each_wide_gram(&core.info.rules, &record.entry, &mut |key| {
                        assert!(has(key), "{when}: wide {key:?} missing");
                        wide += 1;
                    });
                    assert!(wide > 0, "{when}: an entry without wide grams");
                    true
                })
                .unwrap();
            postings
        }

        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn crate::storage::KvEngine> =
            Arc::from(EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap());
        let schema = Arc::new(Schema::standard());
        let rules = Arc::new(RuleTable::from_schema(&schema));
        let indexes = Arc::new(IndexConfig::from_directives(&["cn eq,sub", "sn sub"], &rules).unwrap());
        // Two shards' width; this one is shard 0, and shard 1 never writes.
        let table = Arc::new(GramShards::new(2));
        table.enable();
        let info = ShardInfo {
            index: 0,
            count: 2,
            entry_cache: None,
            indexes,
            schema,
            rules,
            bloom: Default::default(),
            grams: table.clone(),
            hub: crate::write::watermark::Hub::new(2, 0),
        };
        let system = actix::System::new();
        system.block_on(async {
            let core = Rc::new(ShardCore::new(info, engine.clone()).unwrap());
            let addr = ShardActor::new(core.clone()).unwrap().start();
            let person = |cn: &str, sn: &str| {
                Entry::new(vec![
                    Attribute::new("objectClass", vec![b"person".to_vec()]),
                    Attribute::new("cn", vec![cn.as_bytes().to_vec()]),
                    Attribute::new("sn", vec![sn.as_bytes().to_vec()]),
                ])
            };
            let mut ids = Vec::new();
            for i in 0..30 {
                let cn = format!("gram user {i}");
                let outcome = addr
                    .send(Write(WriteOp::Add {
                        author: "cn=test".into(),
                        parent: crate::id::EntryId::ROOT,
                        rdn: format!("cn={cn}"),
                        rdn_norm: format!("cn={cn}"),
                        entry: person(&cn, "first"),
                    }))
                    .await
                    .unwrap();
                let Ok(WriteOutcome::Added(id)) = outcome else { panic!("add {i}: {outcome:?}") };
                ids.push(id);
                assert_covers(&table, &core, &format!("after add {i}"));
            }
            for (i, id) in ids.iter().enumerate().step_by(3) {
                let attr = Attribute::new("sn", vec![format!("xyzzy{i} quux").into_bytes()]);
                let change = LdifMod { op: ModOp::Replace, attr };
                let modify = WriteOp::Modify { id: *id, changes: vec![change], author: "cn=test".into() };
                assert!(addr.send(Write(modify)).await.unwrap().is_ok(), "modify {i}");
                assert_covers(&table, &core, &format!("after modify {i}"));
            }
            for (i, id) in ids.iter().enumerate().skip(1).step_by(4) {
                let cn = format!("moved name {i}");
                let relocate = WriteOp::Relocate {
                    id: *id,
                    parent: crate::id::EntryId::ROOT,
                    rdn: format!("cn={cn}"),
                    rdn_norm: format!("cn={cn}"),
                    drop_values: vec![("cn".into(), format!("gram user {i}").into_bytes())],
                    add_values: vec![("cn".into(), cn.clone().into_bytes())],
                    author: "cn=test".into(),
                    delete_old_rdn: true,
                };
                assert!(addr.send(Write(relocate)).await.unwrap().is_ok(), "rename {i}");
                assert_covers(&table, &core, &format!("after rename {i}"));
            }
            for (i, id) in ids.iter().enumerate().skip(2).step_by(5) {
                assert!(
                    addr.send(Write(WriteOp::Delete { id: *id, author: "cn=test".into() }))
                        .await
                        .unwrap()
                        .is_ok(),
                    "delete {i}"
                );
                assert_covers(&table, &core, &format!("after delete {i}"));
            }
            // A gram only a rename brought in ("mov"), and one no entry ever had.
            let mut mask = ShardMask::all(2);
            table.restrict(&keys::sub_prefix("cn", b"mov"), &mut mask);
            assert!(mask.contains(0));
            let mut mask = ShardMask::all(2);
            table.restrict(&keys::sub_prefix("cn", b"zzz"), &mut mask);
            assert!(mask.is_empty());
            // A wide gram only a modify brought in, and one no entry had.
            let mut key = Vec::new();
            crate::index::config::wide_key_into(&mut key, "sn", b"zzy3");
            let mut mask = ShardMask::all(2);
            table.restrict(&key, &mut mask);
            assert!(mask.contains(0));
            crate::index::config::wide_key_into(&mut key, "sn", b"zzy4");
            let mut mask = ShardMask::all(2);
            table.restrict(&key, &mut mask);
            assert!(mask.is_empty());
            // As at a restart: a new table filled from the file.
            let refilled = GramShards::new(2);
            refilled.fill_from(0, core.snapshot().as_ref(), &core.info.indexes, &core.info.rules).unwrap();
            refilled.enable();
            let postings = assert_covers(&refilled, &core, "after the refill");
            assert!(postings > 300, "{postings} postings");
        });
    }
}
