//! The bulk loader: one shard's write stage of an offline load (`ferrodir import`, and the
//! example data of a new directory). The caller reads, checks and places the entries (which
//! shard, which id, which parent); a [`BulkLoader`] over each shard's engine stores them in
//! that shard's single bulk transaction ([`KvEngine::bulk_load`]), made durable only after
//! the last entry.
//!
//! An entry is stored as an Add stores it ([`layout::each_new_entry_key`]), stamped with the
//! import's author. Its record goes into the transaction as it comes, as an append
//! ([`BulkSink::append`]: a shard's ids count up, and redb takes an ascending run a leaf at a
//! time). Every other key goes through an external sort ([`sort`], runs spilled to a
//! directory past a memory budget) and into the transaction in key order at the end,
//! appended the same way, with the shard's metadata (next sequence number, last CSN, the
//! index-ready marks). The entries that got children are flagged as containers at the end
//! too, so that no read breaks the run of records. A feed that stops before its end abandons
//! the transaction, and nothing is written.

pub(crate) mod sort;

use std::path::Path;
use std::time::Instant;

use crate::entry::record::{EntryRecord, FLAG_CONTAINER};
use crate::id::EntryId;
use crate::index::config::IndexConfig;
use crate::index::keys;
use crate::index::marks::ready_marks;
use crate::rules::RuleTable;
use crate::storage::{BulkSink, KvEngine, StorageError, StorageResult, Table};
use crate::write::clock::Clock;
use crate::write::layout;
use crate::write::stamp::stamp_imported;
use sort::{SortedKeys, SortedOut};

/// Why a bulk load failed. Its text is the storage error's (or the sort file's) as is.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum BulkError {
    #[error(transparent)]
    Storage(#[from] StorageError),
}

pub type BulkResult<T> = Result<T, BulkError>;

impl From<BulkError> for StorageError {
    fn from(error: BulkError) -> Self {
        match error {
            BulkError::Storage(e) => e,
        }
    }
}

/// Where a shard's sort spills its runs past its memory budget.
#[derive(Debug, Clone, Copy)]
pub struct SortSpill<'a> {
    /// Created when the first run is written; the caller removes it (empty) after the load.
    pub dir: &'a Path,
    /// Names this shard's run files apart from another shard's in the same directory.
    pub label: &'a str,
    /// Memory the sort holds before it writes a run (an estimate, overheads included).
    pub budget_bytes: usize,
}

/// How a feed ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    /// Every entry of the shard was put: write its metadata and commit, with `next_seq`
    /// the shard's next sequence number to allocate.
    Complete { next_seq: u64 },
    /// The input stopped early (the caller knows why): abandon the transaction.
    Stopped,
}

/// How a load ended, when nothing failed on the shard's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    /// Committed and synced.
    Committed(LoadStats),
    /// The feed stopped: nothing was written.
    Abandoned,
}

/// What the end of a committed load cost, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadStats {
    /// Sorted runs spilled to files.
    pub runs: usize,
    /// From the last entry to the last sorted key in the transaction.
    pub sorted_ms: u64,
    /// The commit and sync that followed.
    pub commit_ms: u64,
}

/// One shard's bulk load. See the module docs.
pub struct BulkLoader<'a> {
    engine: &'a dyn KvEngine,
    indexes: &'a IndexConfig,
    rules: &'a RuleTable,
    /// The creatorsName and modifiersName of every entry loaded.
    author: &'a str,
    /// The directory's CSN clock (`write/clock.rs`): every entry's entryCSN.
    clock: &'a Clock,
    sorted: SortedKeys,
}

impl<'a> BulkLoader<'a> {
    pub fn new(
        engine: &'a dyn KvEngine,
        indexes: &'a IndexConfig,
        rules: &'a RuleTable,
        author: &'a str,
        clock: &'a Clock,
        spill: SortSpill<'_>,
    ) -> Self {
        let sorted = SortedKeys::new(spill.dir, spill.label, spill.budget_bytes);
        Self { engine, indexes, rules, author, clock, sorted }
    }

    /// Runs the shard's bulk transaction: `feed` puts the entries through the
    /// [`ShardWriter`] it is given; on [`Fed::Complete`] the sorted keys and the metadata
    /// follow and the transaction commits (durably).
    pub fn run(self, feed: impl FnOnce(&mut ShardWriter<'_>) -> BulkResult<Fed>) -> BulkResult<Loaded> {
        let Self { engine, indexes, rules, author, clock, sorted } = self;
        // In Options: each is consumed inside a closure that could run again.
        let mut feed = Some(feed);
        let mut sorted = Some(sorted);
        let mut abandoned = false;
        let mut stats = None;
        let outcome = engine.bulk_load(&mut |sink| {
            let (Some(feed), Some(mut sorted)) = (feed.take(), sorted.take()) else {
                return Err(StorageError("the import's shard writer ran twice".into()));
            };
            let mut writer = ShardWriter {
                sink: &mut *sink,
                sorted: &mut sorted,
                indexes,
                rules,
                author,
                clock,
                containers: Vec::new(),
            };
            let fed = feed(&mut writer)?;
            let containers = writer.containers;
            let Fed::Complete { next_seq } = fed else {
                abandoned = true;
                return Err(StorageError("the import stopped before its end".into()));
            };
            stats = Some(finish(sink, sorted, indexes, &containers, next_seq, clock.now())?);
            Ok(())
        });
        match (outcome, stats) {
            (Ok(()), Some((runs, started, commit_started))) => Ok(Loaded::Committed(LoadStats {
                runs,
                sorted_ms: commit_started.duration_since(started).as_millis() as u64,
                commit_ms: commit_started.elapsed().as_millis() as u64,
            })),
            (Ok(()), None) => Err(StorageError("the import's shard writer did not run".into()).into()),
            (Err(_), _) if abandoned => Ok(Loaded::Abandoned),
            (Err(e), _) => Err(e.into()),
        }
    }
}

/// After the last entry: flags the containers, adds the metadata to the sort and puts the
/// sorted keys into the transaction. Returns the runs spilled, when the sort's end began and
/// when it was done.
fn finish(
    sink: &mut dyn BulkSink,
    mut sorted: SortedKeys,
    indexes: &IndexConfig,
    containers: &[EntryId],
    next_seq: u64,
    csn_max: u64,
) -> StorageResult<(usize, Instant, Instant)> {
    for &id in containers {
        mark_container(sink, id)?;
    }
    for mark in ready_marks(indexes) {
        sorted.put(&mark.key, mark.value.as_deref().unwrap_or_default())?;
    }
    let next_seq = layout::next_seq(next_seq);
    sorted.put(&next_seq.key, next_seq.value.as_deref().unwrap_or_default())?;
    // The load's last CSN: the suffix's contextCSN once the server starts.
    sorted.put(&keys::meta("csn_max"), &csn_max.to_be_bytes())?;
    let started = Instant::now();
    let runs = sorted.runs_written();
    sorted.finish(&mut SinkOut { sink, key: Vec::new(), prefix_len: 0 })?;
    Ok((runs, started, Instant::now()))
}

/// What a feed writes through: one shard's open bulk transaction.
pub struct ShardWriter<'s> {
    sink: &'s mut dyn BulkSink,
    sorted: &'s mut SortedKeys,
    indexes: &'s IndexConfig,
    rules: &'s RuleTable,
    author: &'s str,
    clock: &'s Clock,
    /// Entries that got a first child: flagged after the last entry, so that the entry
    /// records go in as one ascending run (a read in between would end it).
    containers: Vec<EntryId>,
}

impl ShardWriter<'_> {
    /// Stamps and stores one new entry: its record straight into the transaction (a
    /// shard's ids count up in placement order: appends), its other keys into the sort.
    pub fn put_entry(&mut self, id: EntryId, mut record: EntryRecord) -> BulkResult<()> {
        stamp_imported(&mut record.entry, &self.clock.stamp(self.author));
        // The layout an Add stages (`layout::new_entry`), so both store an entry alike;
        // visited key by key (a repeated index key is dropped by the sort).
        let mut failed = None;
        let (sink, sorted) = (&mut *self.sink, &mut *self.sorted);
        layout::each_new_entry_key(self.indexes, self.rules, id, &record, &mut |key, value| {
            if failed.is_some() {
                return;
            }
            let put = if key.first() == Some(&(Table::Entries as u8)) {
                sink.append(key, value)
            } else {
                sorted.put(key, value)
            };
            if let Err(e) = put {
                failed = Some(e);
            }
        });
        failed.map_or(Ok(()), |e| Err(e.into()))
    }

    /// Flags entry `id` (already put) as a container: it got a child. Done at the end.
    pub fn mark_container(&mut self, id: EntryId) {
        self.containers.push(id);
    }
}

/// Flags a stored entry as a container (it got a child).
fn mark_container(sink: &mut dyn BulkSink, id: EntryId) -> StorageResult<()> {
    let key = keys::entry(id);
    let stored = sink.get(&key)?.ok_or_else(|| StorageError(format!("entry {id:?} vanished")))?;
    let mut record = EntryRecord::decode(&stored).map_err(|e| StorageError(e.to_string()))?;
    record.flags |= FLAG_CONTAINER;
    sink.put(&key, &record.encode())
}

/// The sorted keys, into the bulk transaction.
struct SinkOut<'a> {
    sink: &'a mut dyn BulkSink,
    /// The posting key being built: its prefix, then one id after another.
    key: Vec<u8>,
    prefix_len: usize,
}

impl SortedOut for SinkOut<'_> {
    fn pair(&mut self, key: &[u8], value: &[u8]) -> StorageResult<()> {
        self.sink.append(key, value)
    }

    fn postings(&mut self, prefix: &[u8], _count: u32) -> StorageResult<()> {
        self.key.clear();
        self.key.extend_from_slice(prefix);
        self.prefix_len = prefix.len();
        Ok(())
    }

    fn posting(&mut self, id: [u8; 8]) -> StorageResult<()> {
        self.key.truncate(self.prefix_len);
        self.key.extend_from_slice(&id);
        self.sink.append(&self.key, &[])
    }
}
