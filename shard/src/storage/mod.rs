//! The storage trait a shard writes through, and its two engines.
//!
//! A shard sees its storage as one ordered byte-keyed map. Keys start with a [`Table`] byte so
//! that one atomic batch can touch entries and all their index keys together, on any engine.
//!
//! Durability is explicit: [`KvEngine::commit`] returns only after the batch is as durable as
//! the engine promises ([`EngineKind::durability_promise`]). redb syncs with fdatasync on every
//! commit; sled 0.34 only reaches the OS page cache (see docs/DECISIONS.md).
//!
//! An existing shard opens with [`EngineKind::open_existing`], which refuses a damaged one
//! ([`OpenError::Damaged`]); `frozen` is how a redb shard keeps serving reads after a failed
//! commit.

#[cfg(test)]
mod commit_pages;
mod compact;
mod frozen;
mod open;
mod overlay;
mod powercut;
mod redb_engine;
mod sled_engine;
mod watched;
pub(crate) mod writelog;

use std::path::Path;

pub use compact::{compact_redb_file, Compacted};
pub use open::{open, StorageOptions, TestModes, WRITE_LOG_BYTES_DEFAULT};
pub use redb_engine::{log_path, RedbEngine};
pub use sled_engine::SledEngine;

/// The key spaces of a shard. The byte value is part of the on-disk format.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Table {
    /// entry id (8 bytes BE) → encoded [`crate::entry::record::EntryRecord`].
    Entries = b'E',
    /// parent id (8) ‖ normalised RDN → entry id (8). The DN→ID index.
    Dn = b'D',
    /// parent id (8) ‖ child id (8) → empty. The one-level index.
    Children = b'C',
    /// attr ‖ 0 ‖ normalised value ‖ 0 ‖ id (8) → empty. Equality index, one key per posting.
    Eq = b'Q',
    /// attr ‖ 0 ‖ id (8) → empty. Presence index.
    Pres = b'P',
    /// attr ‖ 0 ‖ 3-byte gram ‖ id (8) → empty. Substring index.
    Sub = b'S',
    /// attr ‖ 0 ‖ ordering key ‖ 0 ‖ id (8) → empty. Ordering index.
    Ord = b'O',
    /// name → value. Per-shard metadata such as the next id.
    Meta = b'M',
    /// CSN (8) → uuid, id, flags, old DN: the delete log (`crate::write::deletelog`).
    DeleteLog = b'L',
    /// changeNumber (8) → kind, target DN, author, changes, new RDN, new superior: the
    /// retro changelog (`crate::write::changelog`).
    Changelog = b'G',
}

/// One change in a batch: `value: None` deletes the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutation {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// Errors from an engine, kept as text: the caller can only report them.
#[derive(Debug, Clone, thiserror::Error)]
#[error("storage: {0}")]
pub struct StorageError(pub String);

pub type StorageResult<T> = Result<T, StorageError>;

/// Why the storage of an existing shard could not be opened.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Missing, empty, truncated, or failing its checksums: the shard can't be trusted, and
    /// the server refuses to serve it.
    #[error("damaged: {0}")]
    Damaged(String),
    /// Anything else: permissions, a lock held by another process, a read-only filesystem.
    #[error("{0}")]
    Other(StorageError),
}

/// A point-in-time read view (redb) or a live view (sled, which has no snapshots).
pub trait KvSnapshot: Send + Sync {
    fn get(&self, key: &[u8]) -> StorageResult<Option<Vec<u8>>>;
    /// Calls `visit` for each key starting with `prefix`, in key order, until it returns false.
    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> StorageResult<()>;

    /// Like [`KvSnapshot::scan_prefix`], but starting at the first key `>= from` (which
    /// starts with `prefix`): how a long scan resumes after its last key in a fresh snapshot
    /// without walking what it already saw. This default walks and skips; the engines seek.
    fn scan_from(
        &self,
        prefix: &[u8],
        from: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> StorageResult<()> {
        self.scan_prefix(prefix, &mut |k, v| if k < from { true } else { visit(k, v) })
    }
}

/// A shard's storage engine.
pub trait KvEngine: Send + Sync {
    fn snapshot(&self) -> StorageResult<Box<dyn KvSnapshot>>;
    /// Applies every mutation atomically and returns once the engine's durability promise holds.
    fn commit(&self, batch: &[Mutation]) -> StorageResult<()>;

    /// How many commits (and reopens) this engine has finished, counted once each is visible
    /// to new snapshots and before its caller hears back. A reader whose snapshot was opened
    /// after it saw this count may keep that snapshot while the count stays the same: no
    /// acknowledged write is missing from it. None: not counted, so every read that must see
    /// the latest commit opens a new snapshot (the safe default for wrappers and tests).
    fn commits(&self) -> Option<u64> {
        None
    }

    /// Makes the engine's own files hold every commit so far without help from a write log
    /// (redb: a durable commit, after which the log starts over; `super::writelog`). Commits
    /// are durable without it; a backup calls it so that the copied files stand alone.
    fn checkpoint(&self) -> StorageResult<()> {
        Ok(())
    }

    /// Offline bulk loading (`ferrodir import`): everything `fill` puts becomes durable at
    /// once, as [`KvEngine::commit`] makes a batch, when `fill` returns Ok; an error from
    /// `fill` abandons the load and writes nothing. The caller streams its writes instead of
    /// building one batch. This default still collects them in memory and commits once (sled);
    /// redb overrides it with one write transaction whose dirty pages spill to the file.
    fn bulk_load(&self, fill: &mut dyn FnMut(&mut dyn BulkSink) -> StorageResult<()>) -> StorageResult<()> {
        let mut collected =
            CollectingSink { before: self.snapshot()?, batch: Vec::new(), latest: Default::default() };
        fill(&mut collected)?;
        self.commit(&collected.batch)
    }
}

/// Where a bulk load writes ([`KvEngine::bulk_load`]).
pub trait BulkSink {
    fn put(&mut self, key: &[u8], value: &[u8]) -> StorageResult<()>;
    /// Reads a key back, including one put or appended earlier in the same load.
    fn get(&mut self, key: &[u8]) -> StorageResult<Option<Vec<u8>>>;
    /// A put from a caller that hands its keys over in ascending order (an import's entry
    /// records, its sorted index keys): an engine may buffer such runs and write them a
    /// leaf at a time instead of one tree descent per key. Any order still stores the same
    /// content as [`BulkSink::put`] (the last put or append of a key wins); keys out of
    /// order only lose the speed.
    fn append(&mut self, key: &[u8], value: &[u8]) -> StorageResult<()> {
        self.put(key, value)
    }
}

/// The default bulk sink: the whole load as one batch, over the state before it.
struct CollectingSink {
    before: Box<dyn KvSnapshot>,
    batch: Vec<Mutation>,
    /// Key → its last put in `batch`.
    latest: std::collections::HashMap<Vec<u8>, usize>,
}

impl BulkSink for CollectingSink {
    fn put(&mut self, key: &[u8], value: &[u8]) -> StorageResult<()> {
        self.latest.insert(key.to_vec(), self.batch.len());
        self.batch.push(Mutation { key: key.to_vec(), value: Some(value.to_vec()) });
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        match self.latest.get(key) {
            Some(&at) => Ok(self.batch.get(at).and_then(|m| m.value.clone())),
            None => self.before.get(key),
        }
    }
}

/// A shard's storage in memory (redb over its in-memory backend), for the unit tests of the
/// crates above: nothing is written to disk and nothing survives the value.
pub fn open_in_memory() -> StorageResult<Box<dyn KvEngine>> {
    Ok(Box::new(RedbEngine::in_memory()?))
}

/// Which engine a data directory uses; fixed in the manifest.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EngineKind {
    Redb,
    Sled,
}

impl EngineKind {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "redb" => Some(Self::Redb),
            "sled" => Some(Self::Sled),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Redb => "redb",
            Self::Sled => "sled",
        }
    }

    /// What an acknowledged write survives on this engine.
    pub fn durability_promise(self) -> &'static str {
        match self {
            Self::Redb => "power-loss",
            Self::Sled => "process-crash-only",
        }
    }

    /// Where shard `shard_index`'s storage lives under `dir` (a file for redb, a directory
    /// for sled).
    pub fn shard_path(self, dir: &Path, shard_index: usize) -> std::path::PathBuf {
        match self {
            Self::Redb => dir.join(format!("shard-{shard_index:03}.redb")),
            Self::Sled => dir.join(format!("shard-{shard_index:03}.sled")),
        }
    }

    /// Opens the storage of a shard that must already exist (its data directory has a
    /// manifest): never creates it, and checks it before use where the engine can (redb:
    /// every page's checksum). See [`OpenError`].
    pub fn open_existing(
        self,
        dir: &Path,
        shard_index: usize,
        options: &StorageOptions,
    ) -> Result<Box<dyn KvEngine>, OpenError> {
        let path = self.shard_path(dir, shard_index);
        match self {
            Self::Redb => Ok(Box::new(RedbEngine::open_existing(&path, options)?)),
            Self::Sled => {
                if !path.exists() {
                    return Err(OpenError::Damaged("the shard's directory is missing".into()));
                }
                Ok(Box::new(SledEngine::open(&path).map_err(OpenError::Other)?))
            }
        }
    }

    /// Opens (creating if needed) the storage of shard `shard_index` under `dir`; `options`
    /// apply to redb only (sled has its own defaults).
    pub fn open(
        self,
        dir: &Path,
        shard_index: usize,
        options: &StorageOptions,
    ) -> StorageResult<Box<dyn KvEngine>> {
        match self {
            Self::Redb => {
                Ok(Box::new(RedbEngine::open(&dir.join(format!("shard-{shard_index:03}.redb")), options)?))
            }
            Self::Sled => Ok(Box::new(SledEngine::open(&dir.join(format!("shard-{shard_index:03}.sled")))?)),
        }
    }
}

/// The smallest key greater than every key starting with `prefix`, or None if there is none.
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(engine: &dyn KvEngine) {
        let put = |k: &[u8], v: &[u8]| Mutation { key: k.to_vec(), value: Some(v.to_vec()) };
        engine.commit(&[put(b"Pa1", b"1"), put(b"Pa2", b"2"), put(b"Pb1", b"3")]).unwrap();
        let before = engine.snapshot().unwrap();
        engine.commit(&[Mutation { key: b"Pa1".to_vec(), value: None }]).unwrap();
        let after = engine.snapshot().unwrap();
        assert_eq!(after.get(b"Pa1").unwrap(), None);
        assert_eq!(after.get(b"Pa2").unwrap(), Some(b"2".to_vec()));
        let mut seen = Vec::new();
        after
            .scan_prefix(b"Pa", &mut |k, _| {
                seen.push(k.to_vec());
                true
            })
            .unwrap();
        assert_eq!(seen, vec![b"Pa2".to_vec()]);
        drop(before);
        bulk(engine);
    }

    /// A bulk load reads back its own puts, and leaves nothing if `fill` fails.
    fn bulk(engine: &dyn KvEngine) {
        let failed = engine.bulk_load(&mut |sink| {
            sink.put(b"Bx", b"lost")?;
            Err(StorageError("stop".into()))
        });
        assert!(failed.is_err());
        engine
            .bulk_load(&mut |sink| {
                sink.put(b"By", b"1")?;
                sink.put(b"By", b"2")?;
                assert_eq!(sink.get(b"By")?, Some(b"2".to_vec()));
                assert_eq!(sink.get(b"Pa2")?, Some(b"2".to_vec()));
                Ok(())
            })
            .unwrap();
        let view = engine.snapshot().unwrap();
        assert_eq!(view.get(b"By").unwrap(), Some(b"2".to_vec()));
        assert_eq!(view.get(b"Bx").unwrap(), None, "a failed bulk load left a key behind");
        drop(view);
        appends(engine);
    }

    /// Appends store what puts of the same keys would, whatever their order: ascending
    /// runs around and between existing keys, a key equal to an existing one (replaced),
    /// repeats and keys out of order, reads in between, and enough keys for several
    /// buffered runs.
    fn appends(engine: &dyn KvEngine) {
        let mut expected: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = std::collections::BTreeMap::new();
        let view = engine.snapshot().unwrap();
        view.scan_prefix(&[], &mut |k, v| {
            expected.insert(k.to_vec(), v.to_vec());
            true
        })
        .unwrap();
        drop(view);
        let mut puts: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        // Before, between and after the keys already there (`By`, `Pa2`, `Pb1`).
        for i in 0..20_000u32 {
            puts.push((format!("A{i:06}").into_bytes(), vec![b'a'; (i % 300) as usize]));
        }
        puts.push((b"By".to_vec(), b"replaced".to_vec()));
        for i in 0..5_000u32 {
            puts.push((format!("Pa3{i:05}").into_bytes(), Vec::new()));
        }
        // Repeats and a step back.
        puts.push((b"Pa300010".to_vec(), b"again".to_vec()));
        puts.push((b"Pa200000".to_vec(), b"back".to_vec()));
        for i in 0..20_000u32 {
            puts.push((format!("Z{i:06}").into_bytes(), i.to_be_bytes().to_vec()));
        }
        puts.push((b"Z000005".to_vec(), b"last".to_vec()));
        engine
            .bulk_load(&mut |sink| {
                for (n, (key, value)) in puts.iter().enumerate() {
                    sink.append(key, value)?;
                    if n == 30_000 {
                        assert_eq!(sink.get(b"Pa300001")?, Some(Vec::new()), "an append read back");
                        assert_eq!(sink.get(b"By")?, Some(b"replaced".to_vec()));
                    }
                }
                Ok(())
            })
            .unwrap();
        for (key, value) in &puts {
            expected.insert(key.clone(), value.clone());
        }
        let mut stored = std::collections::BTreeMap::new();
        engine
            .snapshot()
            .unwrap()
            .scan_prefix(&[], &mut |k, v| {
                stored.insert(k.to_vec(), v.to_vec());
                true
            })
            .unwrap();
        assert_eq!(stored.len(), expected.len());
        assert!(stored == expected, "appends stored other content than puts would");
    }

    #[test]
    fn redb_engine_commits_and_scans() {
        let dir = tempfile::tempdir().unwrap();
        exercise(EngineKind::Redb.open(dir.path(), 0, &StorageOptions::default()).unwrap().as_ref());
    }

    #[test]
    fn sled_engine_commits_and_scans() {
        let dir = tempfile::tempdir().unwrap();
        exercise(EngineKind::Sled.open(dir.path(), 0, &StorageOptions::default()).unwrap().as_ref());
    }

    #[test]
    fn prefix_end_carries() {
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
    }
}
