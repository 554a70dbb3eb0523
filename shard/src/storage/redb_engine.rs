//! The default engine: redb, one file per shard. A commit is durable before
//! [`KvEngine::commit`] returns, one of two ways:
//! - with the shard's write log (`[limits] write_log_bytes`, the default): the batch is
//!   appended to `shard-NNN.wal` and synced there ([`super::writelog`]), then applied to redb
//!   with `Durability::None`; a checkpoint (a durable redb commit) makes the redb file whole
//!   by itself whenever the log is full, before a bulk load, on [`KvEngine::checkpoint`] and
//!   when the engine is dropped. Opening the file replays the log's records that redb's
//!   durable state lacks;
//! - without it (`write_log_bytes = 0`), or for a batch larger than the log: a redb commit
//!   with `Durability::Immediate` (fdatasync), which also carries every earlier one.
//!
//! Faults (docs/ARCHITECTURE.md, "Faults"): an existing file is checked page by page before
//! use ([`RedbEngine::open_existing`]); a failed commit reopens the file read-only
//! ([`super::frozen`]) so reads go on. A commit refused only for lack of space leaves the
//! file's state known ([`super::watched`]): writes are refused until a retry, at most once
//! a second, reopens the file for writing and replays the write log. Any other failure
//! stops the shard's writes until a restart. A read that makes redb panic on a damaged page
//! returns an error instead.

use std::ops::Bound;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redb::{Database, DatabaseError, ReadOnlyTable, ReadableDatabase, ReadableTable, TableDefinition};

use super::watched::Watch;
use super::writelog::{Record, WriteLog};
use super::{
    prefix_end, BulkSink, KvEngine, KvSnapshot, Mutation, OpenError, StorageError, StorageOptions,
    StorageResult,
};

const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");
/// The write log's bookkeeping in the redb file: [`APPLIED`] → the sequence number of the
/// newest log record whose batch this file holds; [`LOG_ID`] → the id its log's records
/// carry, drawn once.
const LOG_STATE: TableDefinition<&str, u64> = TableDefinition::new("write_log");
const APPLIED: &str = "applied";
const LOG_ID: &str = "id";
/// How often a shard refused for lack of space tries to take writes again: each try
/// reopens the file, so not at every refused write.
const SPACE_RETRY: Duration = Duration::from_secs(1);

pub struct RedbEngine {
    path: PathBuf,
    /// Reads and writes go through this database. After a failed commit it is replaced by a
    /// read-only reopen of the file: redb fails every later operation of a database that saw
    /// an I/O error, reads of pages not in its cache included.
    db: ArcSwap<Database>,
    /// Why this shard takes no more writes: set by its first failed commit whose outcome is
    /// not known (anything but a lack of space), for the life of the process. Until a
    /// restart the file is not written again, so a fault can't turn into a half-written
    /// file, and the reads served stay those of the last good commit.
    write_failure: OnceLock<String>,
    /// The writer's record of the file's health; locked by the one writer only, never
    /// while it waits for the write log's lock.
    health: Mutex<Health>,
    /// What the file was opened with: a recovery opens it again the same way.
    options: StorageOptions,
    /// [`KvEngine::commits`]: moved by the commit thread (the one writer) after each commit,
    /// failed ones included (they reopen `db`), and after a bulk load.
    commits: AtomicU64,
    /// The write log, when on. Locked by the one writer (the commit thread, a bulk load, a
    /// checkpoint): never contended on the commit path.
    log: Option<Mutex<WriteLog>>,
}

/// The writer's view of the open database's health.
#[derive(Default)]
struct Health {
    /// How the open database's writes failed (none for the in-memory engine).
    watch: Option<Arc<Watch>>,
    /// Set while commits are refused for lack of space.
    out_of_space: Option<OutOfSpace>,
    /// The seal of the read-only reopen `db` holds now, if it holds one.
    frozen: Option<super::frozen::Seal>,
    /// After each recovery: the read-only reopen that readers may still be reading, with a
    /// read transaction of the recovered database at the state that reopen reads from the
    /// file. redb reuses a page only once no read transaction older than the commit that
    /// freed it is live, so the pin keeps the recovered database from overwriting a page
    /// those readers may still read. Both go once nothing else holds the reopen.
    retired: Vec<Retired>,
}

struct OutOfSpace {
    cause: String,
    tried: Instant,
}

struct Retired {
    _pin: redb::ReadTransaction,
    reopen: Arc<Database>,
    seal: Option<super::frozen::Seal>,
}

impl Drop for Retired {
    /// The reopen goes after the pin, sealed first: its close must not read the file.
    fn drop(&mut self) {
        if let Some(seal) = &self.seal {
            seal.seal();
        }
    }
}

fn err(e: impl std::fmt::Display) -> StorageError {
    StorageError(e.to_string())
}

/// Creates the tables up front, so that read transactions can always open them, and draws
/// the write log's id once: the id the file's log records carry.
fn create_tables(db: &Database) -> StorageResult<u64> {
    let txn = db.begin_write().map_err(err)?;
    txn.open_table(KV).map_err(err)?;
    let log_id = {
        let mut state = txn.open_table(LOG_STATE).map_err(err)?;
        let stored = state.get(LOG_ID).map_err(err)?.map(|v| v.value());
        match stored {
            Some(id) => id,
            None => {
                let id = rand::random::<u64>();
                state.insert(LOG_ID, id).map_err(err)?;
                id
            }
        }
    };
    txn.commit().map_err(err)?;
    Ok(log_id)
}

impl RedbEngine {
    /// Opens (creating if needed) the file at `path` with `options`, and the write log they
    /// ask for (`write_log_bytes`, 0: none), replaying the log's records first. A file that
    /// had a log keeps being replayed from it even when opened without one, so that turning
    /// the setting off loses nothing.
    pub fn open(path: &Path, options: &StorageOptions) -> StorageResult<Self> {
        let (db, watch) = super::open::open_watched(path, options).map_err(err)?;
        let log_id = create_tables(&db)?;
        let log_path = log_path(path);
        let log_bytes = options.write_log_bytes;
        let log = if log_bytes > 0 || log_path.exists() {
            let mut log = open_log(&log_path, log_bytes.max(super::writelog::PAGE), log_id, options)?;
            replay(&db, &mut log, &log_path)?;
            if log_bytes > 0 {
                Some(Mutex::new(log))
            } else {
                drop(log);
                std::fs::remove_file(&log_path).map_err(err)?;
                None
            }
        } else {
            None
        };
        Ok(Self {
            path: path.to_path_buf(),
            db: ArcSwap::from_pointee(db),
            write_failure: OnceLock::new(),
            health: Mutex::new(Health { watch: Some(watch), ..Health::default() }),
            options: options.clone(),
            commits: AtomicU64::new(0),
            log,
        })
    }

    /// A database in memory, for unit tests of the crates above: no file, no write log, and
    /// nothing survives the value. A failed commit stops its writes as for a file, but there
    /// is no file to reopen for reads.
    pub fn in_memory() -> StorageResult<Self> {
        let db =
            redb::Builder::new().create_with_backend(redb::backends::InMemoryBackend::new()).map_err(err)?;
        create_tables(&db)?;
        Ok(Self {
            path: PathBuf::from("(in memory)"),
            db: ArcSwap::from_pointee(db),
            write_failure: OnceLock::new(),
            health: Mutex::default(),
            options: StorageOptions::default(),
            commits: AtomicU64::new(0),
            log: None,
        })
    }

    /// Opens the file of a shard that must already exist: a missing or empty file is damage
    /// (creating a new, empty one would serve a directory with entries missing), and every
    /// page is checked against its checksum first. redb trusts a file that was closed cleanly
    /// and may panic, or return garbage, on a page damaged since; the check costs about one
    /// read of the file (docs/DECISIONS.md).
    pub fn open_existing(path: &Path, options: &StorageOptions) -> Result<Self, OpenError> {
        check_file(path)?;
        Self::open(path, options).map_err(OpenError::Other)
    }

    fn health(&self) -> MutexGuard<'_, Health> {
        // Every change to it is one assignment: a panic can't leave it half-changed.
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a write may go ahead: the error it gets once a commit failed for good, or
    /// while the disk is full. A full disk is retried at most every [`SPACE_RETRY`]: the
    /// write that finds space back recovers the file and goes ahead.
    fn writable(&self) -> StorageResult<()> {
        if let Some(cause) = self.write_failure.get() {
            return Err(StorageError(format!(
                "writes stopped after a failed commit ({cause}); fix the cause, then restart the server"
            )));
        }
        {
            let mut health = self.health();
            // Readers of the reopen a recovery replaced are gone: the pages are free to reuse.
            health.retired.retain(|r| Arc::strong_count(&r.reopen) > 1);
            let Some(full) = health.out_of_space.as_mut() else { return Ok(()) };
            if full.tried.elapsed() < SPACE_RETRY {
                return Err(StorageError(format!(
                    "{}; writes resume by themselves once space is freed",
                    full.cause
                )));
            }
            full.tried = Instant::now();
        }
        self.recover()
    }

    /// After a commit refused for lack of space: opens the file for writing again (redb
    /// recovers it to its last durable commit) and replays the write log into it, durably,
    /// so it holds every acknowledged write; then it replaces the read-only reopen. If there
    /// is still no room the shard stays as it was, and the next try comes later.
    fn recover(&self) -> StorageResult<()> {
        let mut log = self.lock_log();
        let (db, watch) = match super::open::open_watched(&self.path, &self.options) {
            Ok(opened) => opened,
            Err(e) => return Err(self.still_full(format!("cannot reopen the file for writing: {e}"))),
        };
        // At the durable state the read-only reopen reads from the file (see `Health::retired`).
        let pin = db.begin_read().map_err(err)?;
        if let Some(log) = log.as_deref_mut() {
            if let Err(e) = replay(&db, log, &self.path) {
                if !watch.only_out_of_space() {
                    self.stop_writes(&e);
                    return Err(e);
                }
                return Err(self.still_full(e.0));
            }
        }
        let reopen = self.db.swap(Arc::new(db));
        let mut health = self.health();
        let seal = health.frozen.take();
        health.retired.push(Retired { _pin: pin, reopen, seal });
        health.watch = Some(watch);
        health.out_of_space = None;
        drop(health);
        // Views take a fresh snapshot: of the recovered database.
        self.commits.fetch_add(1, Ordering::Release);
        tracing::warn!(file = %self.path.display(), "space is back: this shard takes writes again");
        Ok(())
    }

    /// A recovery that found no room yet: the error the write gets.
    fn still_full(&self, why: String) -> StorageError {
        tracing::debug!(file = %self.path.display(), error = %why, "still no space for this shard's writes");
        let health = self.health();
        let cause = health.out_of_space.as_ref().map_or_else(|| why.clone(), |f| f.cause.clone());
        StorageError(format!("{cause}; writes resume by themselves once space is freed"))
    }

    /// After redb failed a commit (its database latches after an I/O error): a commit
    /// refused only for lack of space refuses writes until space is back
    /// ([`Self::writable`]); any other stops them for good. Either way the file is reopened
    /// for reads. The reopen serves the file's last durable commit, so the write log's
    /// acknowledged records since are applied to it again, in memory (`log`: the log, held
    /// by the failed writer). `refused`: a record of the log whose batch redb refused, left
    /// out of that.
    fn fail_writes(&self, cause: &StorageError, log: Option<&WriteLog>, refused: Option<u64>) {
        let out_of_space = {
            let mut health = self.health();
            let known = health.watch.as_ref().is_some_and(|w| w.only_out_of_space());
            if known {
                health.out_of_space = Some(OutOfSpace { cause: cause.0.clone(), tried: Instant::now() });
            }
            known
        };
        if out_of_space {
            tracing::error!(file = %self.path.display(), error = %cause,
                "commit refused for lack of space: this shard refuses writes until space is freed, reads go on");
        } else if !self.stop_writes(cause) {
            return;
        }
        match super::frozen::open_frozen(&self.path) {
            Ok((db, seal)) => {
                self.health().frozen = Some(seal);
                if let Some(log) = log {
                    let records = log.records().map(|replay| {
                        let mut records = replay.records;
                        records.retain(|r| Some(r.seq) != refused);
                        records
                    });
                    if let Err(e) = records.map_err(err).and_then(|r| apply_records(&db, &r, false)) {
                        tracing::error!(file = %self.path.display(), error = %e,
                            "cannot apply the write log to the read-only reopen: reads miss the writes since the last checkpoint");
                    }
                }
                self.db.store(Arc::new(db))
            }
            Err(e) => tracing::error!(
                file = %self.path.display(),
                error = %e,
                "cannot reopen the shard for reads: reads of data not in the cache fail"
            ),
        }
    }

    /// Stops writes for good; false if they were stopped already.
    fn stop_writes(&self, cause: &StorageError) -> bool {
        if self.write_failure.set(cause.0.clone()).is_err() {
            return false;
        }
        tracing::error!(file = %self.path.display(), error = %cause, "commit failed: this shard takes no more writes until the server restarts");
        true
    }

    fn lock_log(&self) -> Option<MutexGuard<'_, WriteLog>> {
        // The log's state changes only between whole appends: a panicking writer aborts the
        // process (`fatal::abort_on_panic`) before anyone else could see it.
        self.log.as_ref().map(|log| log.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A durable redb commit of `batch` (possibly empty) that also makes every record of
    /// the log durable in the file, after which the log starts over.
    fn commit_durable(&self, batch: &[Mutation], log: Option<&mut WriteLog>) -> StorageResult<()> {
        let applied = log.as_ref().map(|log| log.next_seq() - 1);
        let result = commit_batch(&self.db.load(), batch, redb::Durability::Immediate, applied);
        match result {
            Ok(()) => {
                if let Some(log) = log {
                    log.start_over();
                }
                Ok(())
            }
            Err(e) => {
                self.fail_writes(&e, log.as_deref(), None);
                Err(e)
            }
        }
    }

    /// A batch through the write log: appended and synced there, then applied to redb
    /// without durability. A full log is checkpointed first.
    fn commit_logged(&self, batch: &[Mutation], log: &mut WriteLog) -> StorageResult<()> {
        if !log.can_hold(batch) {
            return self.commit_durable(batch, Some(log));
        }
        if !log.has_room(batch) {
            self.commit_durable(&[], Some(log))?;
        }
        let seq = match log.append(batch) {
            Ok(seq) => seq,
            Err(e) => {
                // redb has not seen the batch and is intact: reads go on from it as it is.
                let e = StorageError(format!("write log: {e}"));
                self.stop_writes(&e);
                return Err(e);
            }
        };
        // No record number stored with it: only a checkpoint's durable state survives a
        // crash, and the checkpoint stores the number (replaying records the file already
        // holds, after a clean close, changes nothing).
        commit_batch(&self.db.load(), batch, redb::Durability::None, None).inspect_err(|e| {
            // The batch is answered as failed: its record must not come back at the next
            // start. If even the cancel can't be written, the outcome is unknown, as after a
            // failed fdatasync (docs/ARCHITECTURE.md, "Faults").
            if let Err(cancel) = log.cancel(seq) {
                tracing::error!(file = %self.path.display(), error = %cancel,
                    "cannot cancel the refused batch's record in the write log: the next start may apply it");
            }
            self.fail_writes(e, Some(log), Some(seq));
        })
    }
}

/// Where the write log of the shard file `path` lives: beside it, `.wal` for `.redb`.
pub fn log_path(path: &Path) -> PathBuf {
    path.with_extension("wal")
}

fn open_log(path: &Path, bytes: u64, id: u64, options: &StorageOptions) -> StorageResult<WriteLog> {
    let created = !path.exists();
    let file = super::open::open_log_file(path, options)
        .map_err(|e| StorageError(format!("{}: {e}", path.display())))?;
    let log =
        WriteLog::open(file, bytes, 1, id).map_err(|e| StorageError(format!("{}: {e}", path.display())))?;
    if created {
        // The new file's name must be durable before a record in it is acknowledged.
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(err)?;
        }
    }
    Ok(log)
}

/// The newest log record `db`'s durable state holds.
fn applied(db: &Database) -> StorageResult<u64> {
    let txn = db.begin_read().map_err(err)?;
    let table = txn.open_table(LOG_STATE).map_err(err)?;
    Ok(table.get(APPLIED).map_err(err)?.map(|v| v.value()).unwrap_or(0))
}

/// Applies the log's records that `db` lacks in one durable commit, and numbers the log's
/// next record after every record it holds. After this the log holds nothing redb lacks.
fn replay(db: &Database, log: &mut WriteLog, path: &Path) -> StorageResult<()> {
    let applied = applied(db)?;
    let replay = log.records().map_err(|e| StorageError(format!("{}: {e}", path.display())))?;
    // The run read must begin at or before the first record the file lacks.
    if let (Some(first), Some(newest)) = (replay.first, replay.newest) {
        if newest > applied && first > applied + 1 {
            return Err(StorageError(format!(
                "{}: the write log starts at record {first} but the shard file holds only up to {applied}: \
                 records are missing (was the shard file replaced by an older copy?)",
                path.display()
            )));
        }
    }
    let newer: Vec<Record> = replay.records.into_iter().filter(|r| r.seq > applied).collect();
    if !newer.is_empty() {
        let started = std::time::Instant::now();
        apply_records(db, &newer, true)?;
        tracing::info!(file = %path.display(), records = newer.len(), elapsed_ms = started.elapsed().as_millis(),
            "replayed the write log's records the shard file lacked");
    }
    log.set_next_seq(replay.newest.unwrap_or(0).max(applied) + 1);
    log.start_over();
    Ok(())
}

/// Applies `records` to `db` in one commit (durable or not), recording the newest as
/// applied. Records `db` already holds may be among them: each mutation is a whole value,
/// so applying them again changes nothing.
fn apply_records(db: &Database, records: &[Record], durable: bool) -> StorageResult<()> {
    let Some(newest) = records.last() else { return Ok(()) };
    let all: Vec<Mutation> = records.iter().flat_map(|r| r.mutations.iter().cloned()).collect();
    let durability = if durable { redb::Durability::Immediate } else { redb::Durability::None };
    commit_batch(db, &all, durability, Some(newest.seq))
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
            let db = self.db.load_full();
            let txn = db.begin_read().map_err(err)?;
            let table = txn.open_table(KV).map_err(err)?;
            Ok(Box::new(RedbSnapshot { table, _db: db }) as Box<dyn KvSnapshot>)
        })
    }

    fn commit(&self, batch: &[Mutation]) -> StorageResult<()> {
        self.writable()?;
        let result = match self.lock_log() {
            Some(mut log) => self.commit_logged(batch, &mut log),
            None => self.commit_durable(batch, None),
        };
        self.commits.fetch_add(1, Ordering::Release);
        result
    }

    fn checkpoint(&self) -> StorageResult<()> {
        self.writable()?;
        match self.lock_log() {
            Some(mut log) if log.used() > 0 => self.commit_durable(&[], Some(&mut log)),
            _ => Ok(()),
        }
    }

    fn commits(&self) -> Option<u64> {
        Some(self.commits.load(Ordering::Acquire))
    }

    /// One write transaction for the whole load: redb keeps its dirty pages within the
    /// cache's write-buffer share and writes the rest to the file as it goes, so memory stays
    /// bounded; the commit then syncs everything at once.
    fn bulk_load(&self, fill: &mut dyn FnMut(&mut dyn BulkSink) -> StorageResult<()>) -> StorageResult<()> {
        // After a failure `db` is the in-memory reopen: a load into it would vanish.
        self.writable()?;
        // The load's durable commit makes the log's records durable in redb too; hold the
        // log so that it starts over after it.
        let mut log = self.lock_log();
        let mut txn = self.db.load().begin_write().map_err(err)?;
        // Explicit, as in `commit`: the load counts as done only after fdatasync.
        txn.set_durability(redb::Durability::Immediate).map_err(err)?;
        {
            let mut sink = RedbSink { table: txn.open_table(KV).map_err(err)?, pending: Appends::default() };
            // On an error the transaction is dropped, which aborts it.
            fill(&mut sink)?;
            sink.flush_appends()?;
        }
        if let Some(log) = log.as_deref() {
            txn.open_table(LOG_STATE).map_err(err)?.insert(APPLIED, log.next_seq() - 1).map_err(err)?;
        }
        let result = txn.commit().map_err(err);
        if result.is_ok() {
            if let Some(log) = log.as_deref_mut() {
                log.start_over();
            }
        }
        self.commits.fetch_add(1, Ordering::Release);
        result
    }
}

impl Drop for RedbEngine {
    /// A clean close leaves the redb file whole by itself: a copy of it (restore) or a tool
    /// that reads it without the log sees every write.
    fn drop(&mut self) {
        if self.write_failure.get().is_none() {
            if let Err(e) = self.checkpoint() {
                tracing::warn!(file = %self.path.display(), error = %e, "no checkpoint at close: the next open replays the write log");
            }
        }
    }
}

/// One atomic redb transaction holding every mutation of `batch`; with
/// `Durability::Immediate`, synced before it returns. `applied`: the newest write log record
/// the file holds after it.
pub(super) fn commit_batch(
    db: &Database,
    batch: &[Mutation],
    durability: redb::Durability,
    applied: Option<u64>,
) -> StorageResult<()> {
    let mut txn = db.begin_write().map_err(err)?;
    // Explicit, not a default: without the log the acknowledgement waits for fdatasync.
    txn.set_durability(durability).map_err(err)?;
    if let Some(seq) = applied {
        txn.open_table(LOG_STATE).map_err(err)?.insert(APPLIED, seq).map_err(err)?;
    }
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
    /// Held so that a recovery knows when the last reader of a replaced read-only reopen is
    /// gone (`Health::retired`).
    _db: Arc<Database>,
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

    /// A file opened with a write log of `log_bytes` (0: none) and otherwise the defaults.
    fn open_with_log(path: &Path, log_bytes: u64) -> StorageResult<RedbEngine> {
        RedbEngine::open(path, &StorageOptions { write_log_bytes: log_bytes, ..StorageOptions::default() })
    }

    fn filled(path: &Path) {
        let engine = RedbEngine::open(path, &StorageOptions::default()).unwrap();
        let batch: Vec<Mutation> = (0..3000u32)
            .map(|i| Mutation { key: format!("E{i:06}").into_bytes(), value: Some(vec![i as u8; 200]) })
            .collect();
        engine.commit(&batch).unwrap();
    }

    fn damaged(path: &Path) -> String {
        match RedbEngine::open_existing(path, &StorageOptions::default()) {
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
        let engine = RedbEngine::open_existing(&path, &StorageOptions::default()).unwrap();
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
        let engine = RedbEngine::open(&path, &StorageOptions::default()).unwrap();
        let view = engine.snapshot().unwrap();
        let ours =
            catch_unwind(AssertUnwindSafe(|| view.scan_prefix(b"E", &mut |_, _| panic!("a bug of ours"))));
        assert!(ours.is_err(), "a visitor's panic was turned into a storage error");
    }

    fn put(key: &str, value: &str) -> Mutation {
        Mutation { key: key.as_bytes().to_vec(), value: Some(value.as_bytes().to_vec()) }
    }

    fn value(engine: &RedbEngine, key: &str) -> Option<String> {
        engine.snapshot().unwrap().get(key.as_bytes()).unwrap().map(|v| String::from_utf8(v).unwrap())
    }

    /// What a kill -9 leaves of a live engine's files: their bytes as the OS holds them now
    /// (redb's non-durable commits live in its memory only), copied to `to`.
    fn crash_image(path: &Path, to: &Path, with_log: bool) -> PathBuf {
        std::fs::create_dir_all(to).unwrap();
        let copy = to.join(path.file_name().unwrap());
        std::fs::copy(path, &copy).unwrap();
        if with_log {
            std::fs::copy(log_path(path), log_path(&copy)).unwrap();
        }
        copy
    }

    /// Commits acknowledged through the write log survive a crash across several
    /// checkpoints (a 16-page log, 40 one-page records), deletes included; the redb file
    /// alone lacks the ones since the last checkpoint, so the log is what keeps them.
    #[test]
    fn log_commits_survive_a_crash_and_the_file_alone_lacks_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-000.redb");
        let engine = open_with_log(&path, 16 * super::super::writelog::PAGE).unwrap();
        for i in 0..40 {
            engine
                .commit(&[put(&format!("E{i:03}"), &format!("v{i}")), put("Elast", &format!("{i}"))])
                .unwrap();
        }
        engine.commit(&[Mutation { key: b"E007".to_vec(), value: None }]).unwrap();
        let crashed = crash_image(&path, &dir.path().join("crash"), true);
        let lacking = crash_image(&path, &dir.path().join("no-log"), false);
        drop(engine);

        let reopened = open_with_log(&crashed, 16 * super::super::writelog::PAGE).unwrap();
        for i in (0..40).filter(|&i| i != 7) {
            assert_eq!(value(&reopened, &format!("E{i:03}")), Some(format!("v{i}")), "E{i:03}");
        }
        assert_eq!(value(&reopened, "E007"), None, "the delete was lost");
        assert_eq!(value(&reopened, "Elast").as_deref(), Some("39"));
        // More commits after the replay are numbered after the replayed ones and survive too.
        reopened.commit(&[put("Eafter", "1")]).unwrap();
        let again = crash_image(&crashed, &dir.path().join("crash-2"), true);
        drop(reopened);
        let twice = open_with_log(&again, 16 * super::super::writelog::PAGE).unwrap();
        assert_eq!(value(&twice, "Eafter").as_deref(), Some("1"));
        assert_eq!(value(&twice, "E039").as_deref(), Some("v39"));

        // Opened without its log, the crash image misses the commits since the last checkpoint.
        let file_only = open_with_log(&lacking, 0).unwrap();
        assert_ne!(
            value(&file_only, "Elast").as_deref(),
            Some("39"),
            "the redb file held every commit by itself"
        );
    }

    /// A batch larger than the log goes to redb durably by itself, carrying the logged ones
    /// before it; a clean close checkpoints, so the file then stands alone; turning the log
    /// off replays and removes it.
    #[test]
    fn large_batches_clean_closes_and_turning_the_log_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-000.redb");
        let pages = 4 * super::super::writelog::PAGE;
        let engine = open_with_log(&path, pages).unwrap();
        engine.commit(&[put("Ea", "1")]).unwrap();
        let big: Vec<Mutation> = (0..100).map(|i| put(&format!("Eb{i:03}"), &"x".repeat(300))).collect();
        engine.commit(&big).unwrap();
        engine.commit(&[put("Ec", "3")]).unwrap();
        let crashed = crash_image(&path, &dir.path().join("crash"), true);
        drop(engine);
        let reopened = open_with_log(&crashed, pages).unwrap();
        assert_eq!(value(&reopened, "Ea").as_deref(), Some("1"));
        assert_eq!(value(&reopened, "Eb099").map(|v| v.len()), Some(300));
        assert_eq!(value(&reopened, "Ec").as_deref(), Some("3"));
        reopened.commit(&[put("Ed", "4")]).unwrap();
        drop(reopened);
        // A clean close checkpointed: the file alone holds everything.
        let alone = crash_image(&crashed, &dir.path().join("alone"), false);
        let file_only = open_with_log(&alone, 0).unwrap();
        assert_eq!(value(&file_only, "Ed").as_deref(), Some("4"));
        drop(file_only);
        // Turning the log off: a crash image with unapplied records is replayed, then the log
        // file goes.
        let engine = open_with_log(&crashed, pages).unwrap();
        engine.commit(&[put("Ee", "5")]).unwrap();
        let image = crash_image(&crashed, &dir.path().join("off"), true);
        drop(engine);
        let off = open_with_log(&image, 0).unwrap();
        assert_eq!(value(&off, "Ee").as_deref(), Some("5"));
        assert!(!log_path(&image).exists());
    }

    /// A shard file older than its log's first record (replaced by an older copy) is
    /// refused rather than served with writes missing in the middle.
    #[test]
    fn a_log_that_does_not_follow_its_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-000.redb");
        let pages = 4 * super::super::writelog::PAGE;
        let engine = open_with_log(&path, pages).unwrap();
        engine.commit(&[put("Ea", "1")]).unwrap();
        let old = crash_image(&path, &dir.path().join("old"), false);
        for i in 0..10 {
            engine.commit(&[put(&format!("E{i}"), "2")]).unwrap();
        }
        let crashed = crash_image(&path, &dir.path().join("crash"), true);
        drop(engine);
        std::fs::copy(&old, &crashed).unwrap();
        let refused = open_with_log(&crashed, pages).err().expect("opened");
        assert!(refused.0.contains("records are missing"), "{refused}");
    }

    /// Another shard file put where this one was (a restore over an old data directory)
    /// gets nothing from the log left beside it.
    #[test]
    fn a_log_left_beside_another_shard_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-000.redb");
        let pages = 4 * super::super::writelog::PAGE;
        let engine = open_with_log(&path, pages).unwrap();
        engine.commit(&[put("Ea", "old")]).unwrap();
        let crashed = crash_image(&path, &dir.path().join("crash"), true);
        drop(engine);
        let other = dir.path().join("other").join("shard-000.redb");
        std::fs::create_dir_all(other.parent().unwrap()).unwrap();
        drop(open_with_log(&other, 0).unwrap());
        std::fs::copy(&other, &crashed).unwrap();
        let reopened = open_with_log(&crashed, pages).unwrap();
        assert_eq!(value(&reopened, "Ea"), None, "another file's log was replayed into this one");
        reopened.commit(&[put("Eb", "new")]).unwrap();
        let again = crash_image(&crashed, &dir.path().join("crash-2"), true);
        drop(reopened);
        let twice = open_with_log(&again, pages).unwrap();
        assert_eq!(value(&twice, "Eb").as_deref(), Some("new"));
        assert_eq!(value(&twice, "Ea"), None);
    }

    #[test]
    fn after_a_failed_commit_writes_stop_and_reads_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-000.redb");
        filled(&path);
        let engine = RedbEngine::open_existing(&path, &StorageOptions::default()).unwrap();
        engine.fail_writes(
            &StorageError("I/O error: No space left on device (os error 28)".into()),
            None,
            None,
        );
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

    #[test]
    fn after_a_commit_refused_for_space_writes_resume_with_every_acknowledged_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-000.redb");
        filled(&path);
        let engine = open_with_log(&path, 64 << 10).unwrap();
        // Acknowledged through the log only: not in the file's durable state yet.
        engine.commit(&[put("Ea", "logged")]).unwrap();
        // As after a write that ENOSPC refused: the watch says so, and redb latched.
        engine.health().watch = Some(Arc::new(Watch::out_of_space_seen()));
        {
            let log = engine.lock_log();
            engine.fail_writes(
                &StorageError("I/O error: No space left on device (os error 28)".into()),
                log.as_deref(),
                None,
            );
        }
        let refused = engine.commit(&[put("Eb", "refused")]).unwrap_err().0;
        assert!(refused.contains("No space left") && refused.contains("resume"), "{refused}");
        assert!(!refused.contains("restart"), "{refused}");
        // Reads go on from the read-only reopen, the logged write included.
        let before = engine.snapshot().unwrap();
        assert_eq!(value(&engine, "Ea").as_deref(), Some("logged"));
        assert_eq!(value(&engine, "Eb"), None);

        // Space is back; the next write after the retry interval recovers and lands.
        engine.health().out_of_space.as_mut().unwrap().tried -= SPACE_RETRY;
        engine.commit(&[put("Eb", "after")]).unwrap();
        assert_eq!(value(&engine, "Ea").as_deref(), Some("logged"));
        assert_eq!(value(&engine, "Eb").as_deref(), Some("after"));
        // Churn with checkpoints: the snapshot taken before the recovery still reads its
        // pages (the recovered file does not reuse them while it lives).
        for round in 0..40u32 {
            let batch: Vec<Mutation> = (0..3000u32)
                .step_by(7)
                .map(|i| Mutation {
                    key: format!("E{i:06}").into_bytes(),
                    value: Some(vec![round as u8; 300]),
                })
                .collect();
            engine.commit(&batch).unwrap();
            engine.checkpoint().unwrap();
        }
        assert_eq!(before.get(b"E000042").unwrap(), Some(vec![42u8; 200]));
        assert_eq!(engine.health().retired.len(), 1, "the reopen is retired while a reader holds it");
        drop(before);
        engine.commit(&[put("Ec", "c")]).unwrap();
        assert!(engine.health().retired.is_empty(), "the reopen outlived its last reader");
        drop(engine);
        let reopened = open_with_log(&path, 64 << 10).unwrap();
        assert_eq!(value(&reopened, "Ea").as_deref(), Some("logged"));
        assert_eq!(value(&reopened, "Eb").as_deref(), Some("after"));
        assert_eq!(value(&reopened, "Ec").as_deref(), Some("c"));
    }

    #[test]
    fn in_memory_engine_reads_its_writes() {
        let engine = RedbEngine::in_memory().unwrap();
        let key = b"E\0\0\0\0\0\0\0\x01".to_vec();
        engine.commit(&[Mutation { key: key.clone(), value: Some(b"v".to_vec()) }]).unwrap();
        assert_eq!(engine.snapshot().unwrap().get(&key).unwrap().as_deref(), Some(&b"v"[..]));
        assert_eq!(engine.snapshot().unwrap().get(b"E\0").unwrap(), None);
    }
}
