//! What every connection on one worker thread shares: the local shard (called directly),
//! the addresses of the other shards, the worker's copy of the skeleton, the coordinator and
//! the directory config. One `Worker` per thread, behind an `Rc`: nothing here is written by
//! more than one core.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use actix::prelude::SendError;
use actix::Addr;
use ferrodir_shard::{
    EntryId, EntryRecord, Fetch, Lookup, ScanPool, SearchTask, ShardActor, ShardCore, ShardError,
    ShardResult, Skeleton, SkeletonCell, Stage, WriteOp, WriteOutcome,
};

use crate::accesslog::LogSink;
use crate::auditlog::AuditSink;
use crate::config::DirectoryConfig;
use crate::coordinator::Coordinator;
use crate::error::{LdapError, LdapResultOf};
use crate::stats::WorkerStats;

/// How often a worker lets go of its shard views' snapshots
/// ([`Worker::release_shard_view_snapshots`]): the longest an idle view holds an old version
/// of another shard's file.
pub const SHARD_VIEW_RELEASE: std::time::Duration = std::time::Duration::from_millis(100);

pub struct Worker {
    pub index: usize,
    pub local: Rc<ShardCore>,
    pub shards: Vec<Addr<ShardActor>>,
    pub coordinator: Addr<Coordinator>,
    /// The configuration new operations start with ([`Worker::config`]); replaced whole by
    /// a reload ([`Worker::set_config`]). Each worker holds its own copy, so that taking it
    /// per operation counts on this thread's cache line only.
    config: RefCell<Arc<DirectoryConfig>>,
    skeleton_cell: Arc<SkeletonCell>,
    skeleton_cache: RefCell<Arc<Skeleton>>,
    /// With `remote_reads = "snapshot"`: a read-only view of every other shard, read from
    /// its last committed snapshot on this thread (LMDB-style) instead of by message. No
    /// entry cache: the owning shard alone knows when its entries change. (Not replicas:
    /// in this code base a replica is a replication consumer.)
    shard_views: Vec<Option<Rc<ShardCore>>>,
    /// Where long searches run (`shard::scan`): never on this thread's shard actor.
    scans: Option<ScanPool>,
    /// This worker's counters: written only on this thread, summed at scrape time.
    pub stats: Arc<WorkerStats>,
    /// This worker's queue into the access log; None when the log is off.
    pub access_log: Option<LogSink>,
    /// This worker's queue into the audit log; None when `[audit_log] path` is unset.
    pub audit_log: Option<AuditSink>,
    /// Groups' resolved member ids, for memberOf searches (`memberids`).
    pub member_ids: RefCell<crate::memberids::MemberIds>,
    /// Password policies read from the tree, for binds (`ppolicy::lookup`).
    pub policies: RefCell<crate::ppolicy::cache::PolicyCache>,
    /// Set once the server stops this worker ([`Worker::stopping`]): an operation dropped
    /// after that was cut off by the shutdown, not by a panic.
    stopping: Cell<bool>,
    /// How long this worker's failed password checks took lately (microseconds, a moving
    /// average; 0: none yet): what a bind to a locked account waits instead of hashing
    /// (op::credentials). This thread's alone: no counter every core writes.
    pub failed_check_us: Cell<u64>,
}

impl Worker {
    pub fn new(
        index: usize,
        local: Rc<ShardCore>,
        shards: Vec<Addr<ShardActor>>,
        coordinator: Addr<Coordinator>,
        config: Arc<DirectoryConfig>,
        skeleton_cell: Arc<SkeletonCell>,
    ) -> Self {
        let skeleton = Arc::new((*skeleton_cell.load()).clone());
        // A copy of its own, as a reload hands each worker one (server's serve::reload):
        // every operation takes the config (`Worker::config`: an `Arc` clone, and its drop),
        // and on the one `Arc` all workers were built from, that count is a cache line every
        // core writes twice per operation (issue #28: a cost that grows with the cores).
        let config = Arc::new((*config).clone());
        Self {
            index,
            local,
            shards,
            coordinator,
            config: RefCell::new(config),
            skeleton_cell,
            skeleton_cache: RefCell::new(skeleton),
            shard_views: Vec::new(),
            scans: None,
            stats: Arc::default(),
            access_log: None,
            audit_log: None,
            member_ids: RefCell::default(),
            policies: RefCell::default(),
            stopping: Cell::new(false),
            failed_check_us: Cell::new(0),
        }
    }

    /// Writes access-log lines through `sink`.
    pub fn with_access_log(mut self, sink: LogSink) -> Self {
        self.access_log = Some(sink);
        self
    }

    /// Writes audit records of committed changes through `sink`.
    pub fn with_audit_log(mut self, sink: AuditSink) -> Self {
        self.audit_log = Some(sink);
        self
    }

    /// Runs long searches on `pool`.
    pub fn with_scan_pool(mut self, pool: ScanPool) -> Self {
        self.scans = Some(pool);
        self
    }

    /// Reads other shards from their snapshots directly, through `views` (one per shard,
    /// None for this worker's own and for any read by message; see `shard_views`).
    pub fn with_shard_views(mut self, views: Vec<Option<Rc<ShardCore>>>) -> Self {
        self.shard_views = views;
        self
    }

    /// The read view of `shard` usable on this thread without a message: the local shard,
    /// or a shard view brought up to the shard's last commit (a new read transaction only
    /// when a commit finished since the one it holds).
    pub fn readable(&self, shard: usize) -> LdapResultOf<Option<&ShardCore>> {
        if shard == self.index {
            return Ok(Some(&self.local));
        }
        match self.shard_views.get(shard).and_then(Option::as_ref) {
            Some(view) => {
                view.refresh_snapshot_if_moved()?;
                Ok(Some(view))
            }
            None => Ok(None),
        }
    }

    /// Lets go of every shard view's snapshot (`ShardCore::release_snapshot`). The server
    /// calls this every [`SHARD_VIEW_RELEASE`] on the worker's thread, so that a view read
    /// now and then pins no old read transaction of its shard while idle: redb cannot reuse
    /// pages freed after the oldest live reader began, and such readers make the shard
    /// files grow many times over under add/delete churn. Safe at any moment: every read
    /// of a view goes through [`Worker::readable`], which refreshes it first, and no read
    /// keeps a view across an await.
    pub fn release_shard_view_snapshots(&self) {
        for view in self.shard_views.iter().flatten() {
            view.release_snapshot();
        }
    }

    /// Starts, on the calling worker thread, the task that calls
    /// [`Worker::release_shard_view_snapshots`] every [`SHARD_VIEW_RELEASE`]; it ends with
    /// the worker. Does nothing without shard views.
    pub fn start_shard_view_release(worker: &Rc<Self>) {
        if worker.shard_views.iter().all(Option::is_none) {
            return;
        }
        let weak = Rc::downgrade(worker);
        actix::spawn(async move {
            let mut tick = tokio::time::interval(SHARD_VIEW_RELEASE);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(worker) => worker.release_shard_view_snapshots(),
                    None => return,
                }
            }
        });
    }

    /// The configuration in force now: an operation takes it once, when it starts, and runs
    /// under it to the end (a reload mid-way changes nothing for it).
    pub fn config(&self) -> Arc<DirectoryConfig> {
        self.config.borrow().clone()
    }

    /// Runs `f` on the configuration in force now, without taking a reference to it: for the
    /// checks a request goes through before it becomes an operation, and for name
    /// resolution, which run once or more per request (taking the `Arc` there would be a
    /// count written and released each time). `f` can't await, so no reload lands inside.
    pub fn with_config<R>(&self, f: impl FnOnce(&DirectoryConfig) -> R) -> R {
        f(&self.config.borrow())
    }

    /// A reload: operations that start from now on run under `next`.
    pub fn set_config(&self, next: Arc<DirectoryConfig>) {
        *self.config.borrow_mut() = next;
    }

    /// The server is about to stop this worker, dropping the operations still running.
    pub fn stopping(&self) {
        self.stopping.set(true);
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.get()
    }

    /// The directory's write state (`shard::write::watermark`): the CSN clock, the
    /// watermark, the change feed. Borrowed, never cloned per operation: its count would be
    /// one every core writes.
    pub fn hub(&self) -> &Arc<ferrodir_shard::Hub> {
        &self.local.info.hub
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The current skeleton. Re-loaded only when the published version number moved, so the
    /// common case reads one shared word that nobody writes. Each worker keeps its own copy,
    /// so the reference counting of requests on this worker touches no cache line another
    /// core writes (only searches fanned out to other shards share it).
    pub fn skeleton(&self) -> Arc<Skeleton> {
        let published = self.skeleton_cell.version();
        let mut cached = self.skeleton_cache.borrow_mut();
        if cached.version != published {
            *cached = Arc::new((*self.skeleton_cell.load()).clone());
        }
        cached.clone()
    }

    /// Looks up a DN→ID record on the shard that holds it: a direct call when local.
    pub async fn lookup(
        &self,
        shard: usize,
        parent: EntryId,
        rdn_norm: &str,
    ) -> LdapResultOf<Option<EntryId>> {
        if let Some(view) = self.readable(shard)? {
            return Ok(view.lookup_dn(parent, rdn_norm)?);
        }
        let addr = self.shard(shard)?;
        Ok(addr.send(Lookup { parent, rdn_norm: rdn_norm.to_string() }).await??)
    }

    /// Reads an entry from its home shard: a direct call when local.
    pub async fn fetch(&self, id: EntryId) -> LdapResultOf<Option<Arc<EntryRecord>>> {
        if let Some(view) = self.readable(id.shard())? {
            return Ok(view.record(id)?);
        }
        Ok(self.shard(id.shard())?.send(Fetch(id)).await??)
    }

    /// Sends a write to a shard's actor; answered once the batch holding it is durable.
    pub async fn write(&self, shard: usize, op: WriteOp) -> LdapResultOf<WriteOutcome> {
        Ok(self.write_to_shard(shard, op).await?)
    }

    /// Like [`Worker::write`], answered with the shard's own error, for callers that decide
    /// what to do from it (a retry on a closed parent) rather than from an LDAP code.
    ///
    /// The write goes by `try_send` with its own reply channel (`actor::Stage`): the
    /// mailbox stays bounded (when it is full this waits for room with `send`), and the
    /// batch's reply reaches this operation directly.
    pub async fn write_to_shard(&self, shard: usize, op: WriteOp) -> ShardResult<WriteOutcome> {
        let addr =
            self.shards.get(shard).ok_or_else(|| ShardError::Unavailable(format!("no shard {shard}")))?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        match addr.try_send(Stage { op, reply }) {
            Ok(()) => {}
            Err(SendError::Full(stage)) => {
                addr.send(stage).await.map_err(|e| ShardError::Unavailable(e.to_string()))?
            }
            Err(SendError::Closed(_)) => return Err(ShardError::Unavailable("shard stopped".into())),
        }
        answer.await.unwrap_or_else(|_| Err(ShardError::Unavailable("shard stopped".into())))
    }

    /// Starts one shard's part of a long search on the search pool.
    pub fn start_scan(&self, shard: usize, task: SearchTask) -> LdapResultOf<()> {
        let started = self.scans.as_ref().is_some_and(|pool| pool.start(shard, task));
        if started {
            Ok(())
        } else {
            Err(LdapError::new(
                ferrodir_proto::ResultCode::OTHER,
                format!("no search pool for shard {shard}"),
            ))
        }
    }

    /// A shard's delete-log records after `after` and its minimum (a sync refresh's delete
    /// phase): read here when the shard is readable on this thread, else asked of its actor.
    pub async fn delete_log(&self, shard: usize, after: u64) -> LdapResultOf<ferrodir_shard::LogView> {
        if let Some(view) = self.readable(shard)? {
            return Ok(ferrodir_shard::read_delete_log(view.snapshot().as_ref(), after)?);
        }
        let ask = ferrodir_shard::ReadDeleteLog { after };
        Ok(self.shard(shard)?.send(ask).await??)
    }

    /// A shard's changelog records numbered in (`after`, `upto`], at most `max` (a
    /// cn=changelog search): read here when the shard is readable on this thread, else
    /// asked of its actor.
    pub async fn changelog(
        &self,
        shard: usize,
        after: u64,
        upto: u64,
        max: usize,
    ) -> LdapResultOf<Vec<ferrodir_shard::ChangeRecord>> {
        if let Some(view) = self.readable(shard)? {
            return Ok(ferrodir_shard::read_changelog(view.snapshot().as_ref(), after, upto, max)?);
        }
        let ask = ferrodir_shard::ReadChangelog { after, upto, max };
        Ok(self.shard(shard)?.send(ask).await??)
    }

    /// Has every shard keep its delete log from now on (a sync search, before it reads the
    /// watermark its cookie carries: `shard::deletelog`). A shard that did not keep it
    /// before stores the mark durably before this returns, if it can write.
    pub async fn keep_delete_logs(&self) -> LdapResultOf<()> {
        for (index, shard) in self.shards.iter().enumerate() {
            let newly = shard.send(ferrodir_shard::KeepDeleteLog).await.map_err(|e| {
                LdapError::new(
                    ferrodir_proto::ResultCode::UNAVAILABLE,
                    format!("a shard did not answer: {e}"),
                )
            })?;
            if newly {
                let name = ferrodir_shard::DELETE_LOG_KEPT_KEY.to_string();
                if let Err(e) = self.write(index, WriteOp::PutMeta { name, value: vec![1] }).await {
                    // Still kept while this server runs; a restart without the mark keeps the
                    // log only if it holds records (a failed write stops the shard's writes).
                    tracing::warn!(shard = index, error = %e.message, "the delete log's mark was not stored");
                }
            }
        }
        Ok(())
    }

    /// Hands this worker's own shard new changelog settings (a reload; each worker its own
    /// shard, on its thread).
    pub fn set_changelog(&self, settings: ferrodir_shard::ChangelogSettings) {
        if let Some(addr) = self.shards.get(self.index) {
            addr.do_send(ferrodir_shard::SetChangelog(settings));
        }
    }

    fn shard(&self, index: usize) -> LdapResultOf<&Addr<ShardActor>> {
        self.shards
            .get(index)
            .ok_or_else(|| LdapError::new(ferrodir_proto::ResultCode::OTHER, format!("no shard {index}")))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::testkit::{run, TestDirectory};

    /// The config a worker is built from is shared with the other workers; the worker must
    /// count its per-operation references on a copy of its own, and keep none to the shared
    /// one, or every operation on every core writes the same reference count.
    #[test]
    fn a_worker_takes_references_to_its_own_copy_of_the_config() {
        run(async {
            let directory = TestDirectory::open(2).await;
            let shared = &directory.config_given;
            let taken = directory.worker.config();
            assert!(!Arc::ptr_eq(shared, &taken), "the worker hands out the shared config");
            assert_eq!(Arc::strong_count(shared), 1, "the worker keeps a reference to the shared config");
            assert_eq!(taken.vendor_version, shared.vendor_version);
            assert_eq!(taken.suffixes.len(), shared.suffixes.len());
        });
    }
}
