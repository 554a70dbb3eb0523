//! The default engine: redb, one file per shard, committed with fdatasync
//! (`Durability::Immediate`) before [`KvEngine::commit`] returns.
//!
//! Faults (docs/ARCHITECTURE.md, "Faults"): an existing file is checked page by page before
//! use ([`RedbEngine::open_existing`]); the first failed commit stops the shard's writes until
//! a restart and reopens the file read-only ([`super::frozen`]) so reads go on; a read that
//! makes redb panic on a damaged page returns an error instead.

use std::ops::Bound;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use redb::{Database, DatabaseError, ReadOnlyTable, ReadableDatabase, ReadableTable, TableDefinition};

use super::{prefix_end, BulkSink, KvEngine, KvSnapshot, Mutation, OpenError, StorageError, StorageResult};

const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

pub struct RedbEngine {
    path: PathBuf,
    /// Reads and writes go through this database. After a failed commit it is replaced by a
    /// read-only reopen of the file: redb fails every later operation of a database that saw
    /// an I/O error, reads of pages not in its cache included.
    db: ArcSwap<Database>,
    /// Why this shard takes no more writes: set by its first failed commit, for the life of
    /// the process. Until a restart the file is not written again, so a fault can't turn into
    /// a half-written file, and the reads served stay those of the last good commit.
    write_failure: OnceLock<String>,
    /// [`KvEngine::commits`]: moved by the commit thread (the one writer) after each commit,
    /// failed ones included (they reopen `db`), and after a bulk load.
    commits: AtomicU64,
}

fn err(e: impl std::fmt::Display) -> StorageError {
    StorageError(e.to_string())
}

impl RedbEngine {
    pub fn open(path: &Path) -> StorageResult<Self> {
        let db = super::powercut::open_redb(path).map_err(err)?;
        // Create the table up front so that read transactions can always open it.
        let txn = db.begin_write().map_err(err)?;
        txn.open_table(KV).map_err(err)?;
        txn.commit().map_err(err)?;
        Ok(Self {
            path: path.to_path_buf(),
            db: ArcSwap::from_pointee(db),
            write_failure: OnceLock::new(),
            commits: AtomicU64::new(0),
        })
    }

    /// Opens the file of a shard that must already exist: a missing or empty file is damage
    /// (creating a new, empty one would serve a directory with entries missing), and every
    /// page is checked against its checksum first. redb trusts a file that was closed cleanly
    /// and may panic, or return garbage, on a page damaged since; the check costs about one
    /// read of the file (docs/DECISIONS.md).
    pub fn open_existing(path: &Path) -> Result<Self, OpenError> {
        check_file(path)?;
        Self::open(path).map_err(OpenError::Other)
    }

    /// The error every write gets once a commit has failed.
    fn refuse_after_failure(&self) -> StorageResult<()> {
        match self.write_failure.get() {
            Some(cause) => Err(StorageError(format!(
                "writes stopped after a failed commit ({cause}); fix the cause, then restart the server"
            ))),
            None => Ok(()),
        }
    }

    /// Stops writes for good and reopens the file for reads; called on a failed commit.
    fn fail_writes(&self, cause: &StorageError) {
        if self.write_failure.set(cause.0.clone()).is_err() {
            return;
        }
        tracing::error!(file = %self.path.display(), error = %cause, "commit failed: this shard takes no more writes until the server restarts");
        match super::frozen::open_frozen(&self.path) {
            Ok(db) => self.db.store(Arc::new(db)),
            Err(e) => tracing::error!(
                file = %self.path.display(),
                error = %e,
                "cannot reopen the shard for reads: reads of data not in the cache fail"
            ),
        }
    }
}

/// Checks an existing shard file before it is served: present, not empty, every page's
/// checksum right (redb's integrity check). A failure of the check is [`OpenError::Damaged`].
fn check_file(path: &Path) -> Result<(), OpenError> {
    open_checked(path)?.close().map_err(classify)
}

/// Opens an existing file after the checks of [`check_file`], and keeps it open (its file
/// lock held): what offline compaction works on.
pub(super) fn open_checked(path: &Path) -> Result<Database, OpenError> {
    let len = match std::fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(OpenError::Damaged("the file is missing".into()))
        }
        Err(e) => return Err(OpenError::Other(err(e))),
    };
    if len == 0 {
        return Err(OpenError::Damaged("the file is empty".into()));
    }
    // redb calls this hook at 0.3 only when the newest commit fails its checksums and it
    // falls back to the one before. After a crash that is a commit torn mid-write, never
    // acknowledged; after a clean shutdown redb refuses instead (the last commit is 2-phase).
    let rolled_back = Arc::new(AtomicBool::new(false));
    let seen = rolled_back.clone();
    let mut builder = redb::Builder::new();
    builder.set_check_integrity_on_open(true).set_repair_callback(move |session| {
        if (session.progress() - 0.3).abs() < 1e-6 {
            seen.store(true, Ordering::Relaxed);
        }
    });
    let started = std::time::Instant::now();
    let opened = catch_unwind(AssertUnwindSafe(|| builder.open(path)))
        .map_err(|_| OpenError::Damaged("redb panicked while checking it".into()))?;
    let db = opened.map_err(classify)?;
    if rolled_back.load(Ordering::Relaxed) {
        tracing::warn!(
            file = %path.display(),
            "the newest commit failed its checksums and was rolled back to the one before: \
             a commit interrupted by a crash (never acknowledged), or damage"
        );
    }
    tracing::info!(file = %path.display(), bytes = len, elapsed_ms = started.elapsed().as_millis(), "shard file checked");
    Ok(db)
}

/// Damage or some other reason (permissions, a lock, a read-only filesystem) an open failed.
fn classify(e: DatabaseError) -> OpenError {
    match e {
        DatabaseError::Storage(redb::StorageError::Corrupted(what)) => {
            OpenError::Damaged(format!("it fails redb's integrity check: {what}"))
        }
        DatabaseError::Storage(redb::StorageError::Io(io))
            if io.kind() == std::io::ErrorKind::UnexpectedEof =>
        {
            OpenError::Damaged(format!("the file ends early: {io}"))
        }
        DatabaseError::DatabaseAlreadyOpen => OpenError::Other(StorageError(
            "the file is open in another process (is a server using this data directory?)".into(),
        )),
        other => OpenError::Other(err(other)),
    }
}

impl KvEngine for RedbEngine {
    fn snapshot(&self) -> StorageResult<Box<dyn KvSnapshot>> {
        guarded(|| {
            let txn = self.db.load().begin_read().map_err(err)?;
            let table = txn.open_table(KV).map_err(err)?;
            Ok(Box::new(RedbSnapshot { table }) as Box<dyn KvSnapshot>)
        })
    }

    fn commit(&self, batch: &[Mutation]) -> StorageResult<()> {
        self.refuse_after_failure()?;
        let result = commit_batch(&self.db.load(), batch);
        if let Err(e) = &result {
            self.fail_writes(e);
        }
        self.commits.fetch_add(1, Ordering::Release);
        result
    }

    fn commits(&self) -> Option<u64> {
        Some(self.commits.load(Ordering::Acquire))
    }

    /// One write transaction for the whole load: redb keeps its dirty pages within the
    /// cache's write-buffer share and writes the rest to the file as it goes, so memory stays
    /// bounded; the commit then syncs everything at once.
    fn bulk_load(&self, fill: &mut dyn FnMut(&mut dyn BulkSink) -> StorageResult<()>) -> StorageResult<()> {
        // After a failure `db` is the in-memory reopen: a load into it would vanish.
        self.refuse_after_failure()?;
        let mut txn = self.db.load().begin_write().map_err(err)?;
        // Explicit, as in `commit`: the load counts as done only after fdatasync.
        txn.set_durability(redb::Durability::Immediate).map_err(err)?;
        {
            let mut sink = RedbSink { table: txn.open_table(KV).map_err(err)?, pending: Appends::default() };
            // On an error the transaction is dropped, which aborts it.
            fill(&mut sink)?;
            sink.flush_appends()?;
        }
        let result = txn.commit().map_err(err);
        self.commits.fetch_add(1, Ordering::Release);
        result
    }
}

/// One atomic redb transaction holding every mutation of `batch`, synced before it returns.
pub(super) fn commit_batch(db: &Database, batch: &[Mutation]) -> StorageResult<()> {
    let mut txn = db.begin_write().map_err(err)?;
    // Explicit, not a default: the acknowledgement waits for fdatasync.
    txn.set_durability(redb::Durability::Immediate).map_err(err)?;
    {
        let mut table = txn.open_table(KV).map_err(err)?;
        for m in batch {
            match &m.value {
                Some(v) => {
                    table.insert(m.key.as_slice(), v.as_slice()).map_err(err)?;
                }
                None => {
                    table.remove(m.key.as_slice()).map_err(err)?;
                }
            }
        }
    }
    txn.commit().map_err(err)
}

/// Runs a read, turning a redb panic into an error. redb does not check checksums on reads
/// and may panic on a page damaged after the start-up check; the client gets an error
/// result, and the worker thread lives on.
fn guarded<T>(read: impl FnOnce() -> StorageResult<T>) -> StorageResult<T> {
    catch_unwind(AssertUnwindSafe(read)).unwrap_or_else(|_| {
        Err(StorageError(
            "redb panicked reading a damaged page; run `ferrodir verify` on this data directory".into(),
        ))
    })
}

struct RedbSink<'txn> {
    table: redb::Table<'txn, &'static [u8], &'static [u8]>,
    /// Appended pairs not yet in the table, ascending.
    pending: Appends,
}

/// Appended bytes buffered before they go into the table through one cursor: redb's
/// `CursorMut::insert_before` collects an ascending run and packs it into full leaves with
/// one update of the parent path per MiB, where `Table::insert` descends the tree, looks
/// each page up and rewrites the leaf for every key (about 0.6 µs per key of an import's
/// sorted stream, most of its redb time).
const APPEND_BUFFER_BYTES: usize = 8 << 20;

/// Ascending key-value pairs in one byte buffer (no allocation per pair).
#[derive(Default)]
struct Appends {
    bytes: Vec<u8>,
    /// Per pair: where its key starts, where its value starts, where it ends.
    bounds: Vec<(usize, usize, usize)>,
}

impl Appends {
    /// Pair `at`; None past the end.
    fn pair(&self, at: usize) -> Option<(&[u8], &[u8])> {
        let &(key, value, end) = self.bounds.get(at)?;
        Some((self.bytes.get(key..value)?, self.bytes.get(value..end)?))
    }

    fn last_key(&self) -> Option<&[u8]> {
        self.bounds.last().and_then(|&(key, value, _)| self.bytes.get(key..value))
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
        self.bounds.push((start, start + key.len(), self.bytes.len()));
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.bounds.clear();
    }
}

impl RedbSink<'_> {
    /// Writes the buffered appends into the table. A key the cursor refuses (one that is
    /// already in the table, or that does not fit the gap: an existing key lies between it
    /// and the one before) gets a cursor of its own at its place, and if that one refuses
    /// it too (the key is there), a plain insert, which replaces the value as a put would.
    fn flush_appends(&mut self) -> StorageResult<()> {
        let Self { table, pending } = self;
        let mut at = 0;
        while let Some((first, _)) = pending.pair(at) {
            let opened_at = at;
            let refused = {
                let mut cursor = table.lower_bound_mut(Bound::Included(first)).map_err(err)?;
                let mut refused = false;
                while let Some((key, value)) = pending.pair(at) {
                    match cursor.insert_before(key, value) {
                        Ok(()) => at += 1,
                        Err(redb::CursorError::UnorderedKey) => {
                            refused = true;
                            break;
                        }
                        Err(e) => return Err(err(e)),
                    }
                }
                cursor.close().map_err(err)?;
                refused
            };
            if refused && at == opened_at {
                // Refused right at its own place: the key exists. Replace its value.
                if let Some((key, value)) = pending.pair(at) {
                    table.insert(key, value).map_err(err)?;
                }
                at += 1;
            }
        }
        pending.clear();
        Ok(())
    }
}

impl BulkSink for RedbSink<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> StorageResult<()> {
        self.flush_appends()?;
        self.table.insert(key, value).map_err(err)?;
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        self.flush_appends()?;
        Ok(self.table.get(key).map_err(err)?.map(|v| v.value().to_vec()))
    }

    fn append(&mut self, key: &[u8], value: &[u8]) -> StorageResult<()> {
        if self.pending.last_key().is_some_and(|last| key <= last) {
            // Not ascending: what is buffered first, then this key as a put (which also
            // keeps "the last put wins" for a repeated key).
            return self.put(key, value);
        }
        self.pending.push(key, value);
        if self.pending.bytes.len() >= APPEND_BUFFER_BYTES {
            self.flush_appends()?;
        }
        Ok(())
    }
}

struct RedbSnapshot {
    table: ReadOnlyTable<&'static [u8], &'static [u8]>,
}

impl KvSnapshot for RedbSnapshot {
    fn get(&self, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        guarded(|| Ok(self.table.get(key).map_err(err)?.map(|v| v.value().to_vec())))
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> StorageResult<()> {
        self.scan_from(prefix, prefix, visit)
    }

    fn scan_from(
        &self,
        prefix: &[u8],
        from: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> StorageResult<()> {
        // A panic of the visitor is ours, not damage: it goes on unwinding.
        let mut visitor_panic = None;
        let from = if from < prefix { prefix } else { from };
        let scanned = guarded(|| {
            let range = match prefix_end(prefix) {
                Some(end) if from >= end.as_slice() => return Ok(()),
                Some(end) => self.table.range(from..end.as_slice()).map_err(err)?,
                None => self.table.range(from..).map_err(err)?,
            };
            for item in range {
                let (k, v) = item.map_err(err)?;
                match catch_unwind(AssertUnwindSafe(|| visit(k.value(), v.value()))) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(panic) => {
                        visitor_panic = Some(panic);
                        break;
                    }
                }
            }
            Ok(())
        });
        if let Some(panic) = visitor_panic {
            resume_unwind(panic);
        }
        scanned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(path: &Path) {
        let engine = RedbEngine::open(path).unwrap();
        let batch: Vec<Mutation> = (0..3000u32)
            .map(|i| Mutation { key: format!("E{i:06}").into_bytes(), value: Some(vec![i as u8; 200]) })
            .collect();
        engine.commit(&batch).unwrap();
    }

    fn damaged(path: &Path) -> String {
        match RedbEngine::open_existing(path) {
            Err(OpenError::Damaged(what)) => what,
            Err(other) => panic!("expected damage, got {other}"),
            Ok(_) => panic!("a damaged file opened"),
        }
    }

    #[test]
    fn open_existing_refuses_missing_empty_truncated_and_overwritten_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-001.redb");
        assert!(damaged(&path).contains("missing"));
        std::fs::write(&path, b"").unwrap();
        assert!(damaged(&path).contains("empty"));
        std::fs::remove_file(&path).unwrap();

        filled(&path);
        let intact = std::fs::read(&path).unwrap();
        let engine = RedbEngine::open_existing(&path).unwrap();
        assert_eq!(engine.snapshot().unwrap().get(b"E002999").unwrap(), Some(vec![2999u32 as u8; 200]));
        drop(engine);

        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(intact.len() as u64 / 2).unwrap();
        drop(file);
        assert!(damaged(&path).contains("truncated"), "{}", damaged(&path));

        let mut garbage = intact.clone();
        let middle = garbage.len() / 2;
        for (i, byte) in garbage[middle..middle + 4096].iter_mut().enumerate() {
            *byte = (i as u8).wrapping_mul(31).wrapping_add(7);
        }
        std::fs::write(&path, &garbage).unwrap();
        let what = damaged(&path);
        assert!(!what.is_empty());
    }

    /// A redb panic (on a page damaged after the start-up check) becomes an error; a panic
    /// of the caller's own visitor still unwinds.
    #[test]
    fn redb_panics_become_errors_and_visitor_panics_unwind() {
        let failed = guarded::<()>(|| panic!("unreachable page type"));
        assert!(failed.unwrap_err().0.contains("ferrodir verify"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-000.redb");
        filled(&path);
        let engine = RedbEngine::open(&path).unwrap();
        let view = engine.snapshot().unwrap();
        let ours =
            catch_unwind(AssertUnwindSafe(|| view.scan_prefix(b"E", &mut |_, _| panic!("a bug of ours"))));
        assert!(ours.is_err(), "a visitor's panic was turned into a storage error");
    }

    #[test]
    fn after_a_failed_commit_writes_stop_and_reads_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-000.redb");
        filled(&path);
        let engine = RedbEngine::open_existing(&path).unwrap();
        engine.fail_writes(&StorageError("I/O error: No space left on device (os error 28)".into()));
        let refused = engine.commit(&[Mutation { key: b"Ex".to_vec(), value: Some(b"1".to_vec()) }]);
        let message = refused.unwrap_err().0;
        assert!(message.contains("No space left") && message.contains("restart"), "{message}");
        let view = engine.snapshot().unwrap();
        assert_eq!(view.get(b"E000042").unwrap(), Some(vec![42u8; 200]));
        let mut count = 0;
        view.scan_prefix(b"E", &mut |_, _| {
            count += 1;
            true
        })
        .unwrap();
        assert_eq!(count, 3000);
    }
}
