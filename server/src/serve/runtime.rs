//! Starting, running and stopping the server: [`serve`], one function per phase. Open the
//! data directory, build what the router serves with, start the shards, the coordinator
//! and the workers, bind and announce the listeners, accept until shutdown, stop.
//!
//! Threads: one worker thread (an actix arbiter) per shard, each holding its shard actor
//! and the connections assigned to it; the coordinator on a thread of its own; the accept
//! loop on the thread that called [`serve`], handing each connection to a worker in turn;
//! the admin socket (admin/) on a thread of its own; the password hash pool
//! (`router::password::pool`) and the search pool on threads of their own, at a lower
//! priority.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use anyhow::Context as _;
use ferrodir_router::accesslog::{LogBuffer, LogFormat, LogSink};
use ferrodir_router::auditlog::AuditSink;
use ferrodir_router::coordinator::{Coordinator, Recover};
use ferrodir_router::{DirectoryConfig, HashPool, IntentLog, RemoteReads, Worker};
use ferrodir_shard::storage::KvEngine;
use ferrodir_shard::{ScanPool, ShardActor, ShardCore, ShardInfo, SkeletonCell};
use tokio::sync::{oneshot, Semaphore};

use crate::config::Config;
use crate::data::cut::CommitGate;
use crate::data::store::Store;
use crate::metrics::Metrics;
use crate::serve::connection;
use crate::serve::listeners::{announce, Listen, Listeners};
use crate::serve::paged_key::paged_key;
use crate::serve::per_ip::PerIp;
use crate::serve::search_pool::SearchPool;
use crate::serve::tls::TlsContext;

thread_local! {
    /// The worker owned by this arbiter thread; set once at start.
    static WORKER: RefCell<Option<Rc<Worker>>> = const { RefCell::new(None) };
    static LOCAL_SHARD: RefCell<Option<Rc<ShardCore>>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's worker, if it has one (a reload hands each worker its copy of
/// the new configuration this way).
pub(crate) fn with_worker(f: impl FnOnce(&Worker)) {
    if let Some(worker) = current_worker() {
        f(&worker);
    }
}

/// This thread's worker, if it has one (the online index builder runs on one).
pub(crate) fn current_worker() -> Option<Rc<Worker>> {
    WORKER.with(|slot| slot.borrow().clone())
}

/// How long a stop waits for the logs' writers to write what was queued.
const LOG_WRITERS_GRACE: Duration = Duration::from_secs(5);

/// Runs the server until `shutdown` completes, then stops it: no new connections, up to
/// `[limits] shutdown_grace_s` for the open ones, every shard checkpointed, and every
/// thread that held a shard ended, so that the data directory is free when this returns.
///
/// Blocking: it makes an actix `System` on the calling thread, so call it on a thread that
/// runs no async runtime (in a test, a `std::thread` of its own). `shutdown` is first
/// polled when the accept loop starts, on that System's tokio runtime: a channel's
/// receiver, or tokio's signals (as `ferrodir serve` passes SIGTERM and SIGINT).
///
/// Refuses to start, before any listener is bound, when a listener beyond loopback would
/// serve known credentials (serve/exposure.rs).
///
/// Several servers may run in one process (the in-process tests): each has its own clock,
/// watermark hub and workers.
pub fn serve(
    config: Config,
    listener: impl Into<Listen>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let listen = listener.into();
    let new_directory = crate::data::manifest::Manifest::load(&config.data_dir)?.is_none();
    crate::serve::exposure::check_config(&config, &listen, new_directory)?;
    let store = open_store(&config)?;
    let system = actix_rt::System::new();
    let (threads, stopped) = system.block_on(run(config, store, listen, shutdown))?;
    // The System's own tasks (watchdog, TLS polling, SIGHUP) end with it.
    drop(system);
    threads.join();
    // Every thread that held a shard has ended: the files are as the next start finds them.
    if let Some(stopped) = stopped {
        stopped.save();
    }
    Ok(())
}

/// What a clean stop saves for the next start (data/startcache.rs), kept until every
/// thread holding a shard has ended.
struct StopSave {
    data_dir: std::path::PathBuf,
    kind: ferrodir_shard::storage::EngineKind,
    digest: u64,
    blooms: Vec<Arc<ferrodir_shard::EqBloom>>,
    grams: Arc<ferrodir_shard::GramShards>,
    cell: Arc<SkeletonCell>,
    metrics: Arc<Metrics>,
}

impl StopSave {
    /// None when the stop wasn't clean enough to describe the files by: a shard not
    /// checkpointed (a failed or refused commit), a sled directory (its files aren't
    /// identified), a cross-shard change left half done (the skeleton withdraws a name).
    fn after(config: &Config, store: &Store, prepared: &Prepared, checkpointed: bool) -> Option<Self> {
        let kind = ferrodir_shard::storage::EngineKind::parse(&store.manifest.engine)?;
        let skeleton = prepared.cell.load();
        if !checkpointed || kind != ferrodir_shard::storage::EngineKind::Redb || skeleton.has_withdrawn() {
            return None;
        }
        Some(Self {
            data_dir: config.data_dir.clone(),
            kind,
            digest: crate::data::startcache::digest(config, store.manifest.shards, kind),
            blooms: store.blooms.clone(),
            grams: store.grams.clone(),
            cell: prepared.cell.clone(),
            metrics: prepared.metrics.clone(),
        })
    }

    fn save(self) {
        let skeleton = self.cell.load();
        let stopped = crate::data::startcache::Stopped {
            blooms: &self.blooms,
            grams: &self.grams,
            skeleton: &skeleton,
            entry_counts: self.metrics.entries_per_shard(self.blooms.len()),
        };
        match crate::data::startcache::save(&self.data_dir, self.kind, self.digest, &stopped) {
            Ok(()) => tracing::info!("saved the start cache: the next start reads no shard whole"),
            Err(e) => tracing::warn!(error = %e, "no start cache: the next start reads every shard"),
        }
    }
}

/// Opens the data directory for serving; a new one gets the example entries when the
/// config asks for them.
fn open_store(config: &Config) -> anyhow::Result<Store> {
    // Every CSN carries the server id, the example entries' too (the store's clock).
    let store = Store::open_serving(config, &config.data_dir)?;
    crate::data::store::warn_if_others_may_read(&config.data_dir);
    if store.created && config.example_data {
        let directory =
            crate::directory::directory_config(config, &store, crate::directory::offline_hash_pool())?;
        let report = crate::data::load::load_ldif(
            &store,
            &config.data_dir,
            &directory,
            crate::data::example::EXAMPLE_LDIF.as_bytes(),
            false,
        )?;
        tracing::info!(entries = report.entries, "new data directory: loaded the example entries");
    }
    Ok(store)
}

/// The serving path, phase by phase, inside the actix System. Returns the threads to join
/// once the System is gone.
async fn run(
    config: Config,
    mut store: Store,
    listen: Listen,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<(Threads, Option<StopSave>)> {
    let mut prepared = prepare(&config, &mut store)?;
    crate::serve::exposure::check_directory(
        &config,
        &listen,
        &store,
        &prepared.directory,
        &prepared.cell.load(),
    )?;
    let shard_count = store.manifest.shards;
    let mut threads = Threads::default();
    threads.log_writers = std::mem::take(&mut prepared.log_writers);
    let shards = start_shards(&config, &store, &prepared, &mut threads).await?;
    let search_pool = SearchPool::start(&config, &store)?;
    let coordinator_audit = prepared.coordinator_audit.take();
    let coordinator =
        start_coordinator(&config, &store, &shards, &prepared, coordinator_audit, &mut threads).await?;
    let started = Started { shards, coordinator, scans: search_pool.scans.clone() };
    // Moved into the workers: each log's writer ends once every worker let go of its queue.
    let queues = LogQueues {
        access: std::mem::take(&mut prepared.log_queues),
        audit: std::mem::take(&mut prepared.audit_queues),
    };
    start_workers(&config, &store, &prepared, &started, queues, &threads.workers).await?;
    recover_transactions(&threads.workers).await?;
    start_replication(&config, &store, &threads.workers, &prepared.metrics);
    // Bound before the listening line, so that whoever waits for that line can use it.
    let builder = Arc::new(crate::serve::indexing::IndexBuilder::new(
        &store.indexes,
        store.stale_indexes.clone(),
        prepared.metrics.index_builds.clone(),
    ));
    let reloader = Arc::new(crate::serve::reload::Reloader::new(
        &config,
        prepared.directory.clone(),
        crate::serve::reload::WorkerThreads {
            handles: threads.workers.iter().map(Arbiter::handle).collect(),
            deliver: |copy| with_worker(|worker| worker.set_config(copy)),
            current: current_worker,
        },
        store.engines.clone(),
        prepared.cell.clone(),
        builder,
        prepared.metrics.clone(),
        prepared.audit_mover.clone(),
    ));
    // Indices configured but not complete on every shard (new ones, or a build a stop cut
    // short) are built now, while serving.
    reloader.start_index_build();
    let gates = std::mem::take(&mut prepared.gates);
    let admin = start_admin(&config, &store, started.coordinator.clone(), gates, reloader.clone());
    let (listeners, tls) = open_listeners(&config, listen, &prepared, shard_count)?;
    reloader.set_tls(tls.clone());
    spawn_background(&started, tls.clone(), reloader);
    let prewarm_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if config.limits.prewarm {
        let files = shard_files(&config, &store).into_iter().filter(|path| path.is_file()).collect();
        crate::serve::prewarm::start(files, prewarm_stop.clone());
    }
    let connections =
        accept_until(shutdown, &config, &listeners, tls, &threads.workers, &prepared.metrics).await;
    prewarm_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let running = Running { listeners, connections, admin, search_pool };
    let checkpointed = stop(&config, &store, running, &threads).await;
    let stopped = StopSave::after(&config, &store, &prepared, checkpointed);
    Ok((threads, stopped))
}

/// What serves until shutdown, beside the threads.
struct Running {
    listeners: Listeners,
    /// The connection slots: all back once every connection has closed.
    connections: Arc<Semaphore>,
    admin: Option<crate::admin::server::AdminSocket>,
    search_pool: SearchPool,
}

/// Stops serving: no new connections, up to `shutdown_grace_s` for the open ones to end,
/// then every thread told to stop, the admin socket and the search pool gone, and every
/// shard checkpointed. True when every shard was.
async fn stop(config: &Config, store: &Store, running: Running, threads: &Threads) -> bool {
    tracing::info!("shutting down: no new connections");
    crate::serve::systemd::stopping();
    drop(running.listeners);
    let grace = Duration::from_secs(config.limits.shutdown_grace_s);
    let all = u32::try_from(config.limits.connections_max).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(grace, running.connections.acquire_many(all)).await;
    threads.stopping().await;
    threads.stop();
    drop(running.admin);
    running.search_pool.shutdown();
    let checkpointed = checkpoint(store);
    tracing::info!("stopped");
    checkpointed
}

/// What the serving path builds from the opened data directory before any thread starts.
struct Prepared {
    /// The commit gates a consistent cut pauses (data/cut.rs), one per shard.
    gates: Vec<Arc<CommitGate>>,
    directory: Arc<DirectoryConfig>,
    cell: Arc<SkeletonCell>,
    /// Entries per shard, counted while the skeleton was read.
    entry_counts: Vec<u64>,
    metrics: Arc<Metrics>,
    log_format: LogFormat,
    /// One access-log queue per worker and its line bound; empty when the log is off.
    log_queues: Vec<(Arc<LogBuffer>, usize)>,
    /// One audit-log queue per worker and its byte bound; empty when the log is off.
    audit_queues: Vec<(Arc<LogBuffer>, usize)>,
    /// The coordinator's audit-log queue (refint's rewrites) and its byte bound.
    coordinator_audit: Option<(Arc<LogBuffer>, usize)>,
    /// The logs' writer threads, waited for at the end (`Threads::join`).
    log_writers: Vec<crate::serve::logfile::Writer>,
    /// Moves the audit log's writer to another file (a reload); None when the log is off.
    audit_mover: Option<crate::serve::logfile::Mover>,
}

/// Each worker's queues into the logs, handed out in worker order.
struct LogQueues {
    access: Vec<(Arc<LogBuffer>, usize)>,
    audit: Vec<(Arc<LogBuffer>, usize)>,
}

fn prepare(config: &Config, store: &mut Store) -> anyhow::Result<Prepared> {
    // First, before anything clones the engines: commits pass through the gates a
    // consistent cut pauses (cut.rs).
    let gates = crate::data::cut::install_gates(&mut store.engines);
    // Then the meters, around the gates: a commit held at a gate isn't timed as a slow sync.
    let shard_stats = crate::metrics::engine::install(&mut store.engines);
    let mut directory = crate::directory::directory_config(config, store, start_hash_pool(config)?)?;
    directory.paged.key = paged_key(&config.data_dir);
    crate::serve::diskwatch::start(&config.data_dir, &directory.disk)?;
    let (skeleton, entry_counts) = match store.start_cache.take() {
        // A clean stop's filters, skeleton and counts: nothing to read from the shards.
        Some(cache) if cache.load_filters(&store.blooms, &store.grams) => {
            tracing::info!(
                containers = cache.containers.len(),
                "started from the start cache the last clean stop left (no shard read whole)"
            );
            (cache.skeleton(), cache.entry_counts)
        }
        _ => {
            let (skeleton, entry_counts, settled) = store.read_all(config)?;
            if settled > 0 {
                tracing::info!(settled, "cleared the container flag of entries left without children");
            }
            crate::directory::unique::refuse_duplicates(
                &directory.unique,
                &store.rules,
                &store.engines,
                &skeleton,
            )?;
            (skeleton, entry_counts)
        }
    };
    let cell = Arc::new(SkeletonCell::new(skeleton));
    let metrics = Arc::new(Metrics::new(crate::metrics::Sources {
        shards: shard_stats,
        shard_files: shard_files(config, store),
        skeleton: cell.clone(),
        hub: store.hub.clone(),
        syncrepl: directory.syncrepl.clone(),
        disk: directory.disk.clone(),
    }));
    let log_format = crate::serve::accesslog::format(&config.access_log)?;
    let mut log_writers = Vec::new();
    let log_queues = match crate::serve::accesslog::start(
        &config.access_log,
        store.manifest.shards,
        metrics.log_unwritten.access_lines.clone(),
    )? {
        Some((buffers, lines_max, writer)) => {
            log_writers.push(writer);
            buffers.into_iter().map(|buffer| (buffer, lines_max)).collect()
        }
        None => Vec::new(),
    };
    // One queue per worker, and the last for the coordinator.
    let mut audit_mover = None;
    let mut audit_queues: Vec<(Arc<LogBuffer>, usize)> = match crate::serve::auditlog::start(
        &config.audit_log,
        store.manifest.shards + 1,
        metrics.log_unwritten.audit_records.clone(),
    )? {
        Some((buffers, bytes_max, writer)) => {
            audit_mover = Some(writer.mover());
            log_writers.push(writer);
            buffers.into_iter().map(|buffer| (buffer, bytes_max)).collect()
        }
        None => Vec::new(),
    };
    let coordinator_audit = audit_queues.pop();
    Ok(Prepared {
        gates,
        directory: Arc::new(directory),
        cell,
        entry_counts,
        metrics,
        log_format,
        log_queues,
        audit_queues,
        coordinator_audit,
        log_writers,
        audit_mover,
    })
}

/// Each shard's file, for the metrics of its size on disk.
fn shard_files(config: &Config, store: &Store) -> Vec<std::path::PathBuf> {
    match ferrodir_shard::storage::EngineKind::parse(&store.manifest.engine) {
        Some(kind) => (0..store.manifest.shards)
            .map(|i| crate::data::backup::shard_path(kind, &config.data_dir, i))
            .collect(),
        None => Vec::new(),
    }
}

/// The arbiters of a running server. Dropped (a start that failed half-way), they are
/// told to stop; [`Threads::join`] also waits for them.
#[derive(Default)]
struct Threads {
    /// One per shard, in shard order: its actor, its worker, its connections.
    workers: Vec<Arbiter>,
    coordinator: Option<Arbiter>,
    /// The logs' writers: once the workers and the coordinator are gone, each writes what
    /// their buffers still hold and ends.
    log_writers: Vec<crate::serve::logfile::Writer>,
}

impl Threads {
    /// Tells each worker the server is stopping it: an operation dropped from now on was cut
    /// off by the shutdown (not a panic: a persist search ends this way). Waits until each
    /// worker has taken it in (at most a second): an arbiter runs a queued closure as a
    /// task of its own, and a stop that comes in the same turn drops that task unrun with
    /// the rest, so a mesh node's peers' persist searches were logged as panics.
    async fn stopping(&self) {
        let mut taken = Vec::with_capacity(self.workers.len());
        for arbiter in &self.workers {
            let (told, heard) = tokio::sync::oneshot::channel::<()>();
            arbiter.spawn_fn(move || {
                if let Some(worker) = WORKER.with(|slot| slot.borrow().clone()) {
                    worker.stopping();
                }
                let _ = told.send(());
            });
            taken.push(heard);
        }
        let all_taken = async {
            for heard in taken {
                let _ = heard.await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), all_taken).await;
    }

    fn stop(&self) {
        for arbiter in self.workers.iter().chain(self.coordinator.as_ref()) {
            arbiter.stop();
        }
    }

    /// Stops every thread and waits for it to end, dropping what it held (its shard core,
    /// its worker, its connections).
    fn join(mut self) {
        self.stop();
        for arbiter in std::mem::take(&mut self.workers).into_iter().chain(self.coordinator.take()) {
            let _ = arbiter.join();
        }
        // The last access-log lines and audit records reach their files before serve returns.
        let deadline = std::time::Instant::now() + LOG_WRITERS_GRACE;
        for writer in &self.log_writers {
            if !writer.wait(deadline) {
                tracing::warn!("a log writer did not finish in time; its last lines may be lost");
            }
        }
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One worker thread per shard, each starting its shard's actor (and keeping the core for
/// the worker built there next).
async fn start_shards(
    config: &Config,
    store: &Store,
    prepared: &Prepared,
    threads: &mut Threads,
) -> anyhow::Result<Vec<Addr<ShardActor>>> {
    let shard_count = store.manifest.shards;
    let coalesce = Duration::from_micros(config.limits.commit_coalesce_us);
    let delete_log =
        ferrodir_shard::DeleteLogSettings::new(config.limits.sync_delete_log_max, prepared.cell.clone());
    let changelog = config.changelog.enabled.then(|| {
        let per_shard = config.changelog.per_shard(shard_count);
        ferrodir_shard::ChangelogSettings::new(
            per_shard,
            config.changelog.max_age_s,
            Some(prepared.cell.clone()),
        )
    });
    let entry_counts = &prepared.entry_counts;
    let mut shards = Vec::with_capacity(shard_count);
    for index in 0..shard_count {
        let arbiter = Arbiter::new();
        let info = store.shard_info(index, config);
        let engine = store.engines[index].clone();
        let entries = entry_counts.get(index).copied().unwrap_or(0);
        let delete_log = delete_log.clone();
        let changelog = changelog.clone();
        let (tx, rx) = oneshot::channel();
        arbiter.spawn(async move {
            let started = ShardCore::new(info, engine).and_then(|core| {
                core.counters().entries.store(entries, std::sync::atomic::Ordering::Relaxed);
                let core = Rc::new(core);
                let mut actor =
                    ShardActor::new(core.clone())?.with_commit_coalesce(coalesce).with_delete_log(delete_log);
                if let Some(settings) = changelog {
                    actor = actor.with_changelog(settings);
                }
                LOCAL_SHARD.with(|slot| *slot.borrow_mut() = Some(core));
                Ok(actor.start())
            });
            let _ = tx.send(started);
        });
        threads.workers.push(arbiter);
        shards.push(
            rx.await.context("worker thread died")?.with_context(|| format!("starting shard {index}"))?,
        );
    }
    Ok(shards)
}

/// The coordinator on a thread of its own, after it finished the cross-shard changes an
/// earlier run left in its intent log.
async fn start_coordinator(
    config: &Config,
    store: &Store,
    shards: &[Addr<ShardActor>],
    prepared: &Prepared,
    audit: Option<(Arc<LogBuffer>, usize)>,
    threads: &mut Threads,
) -> anyhow::Result<Addr<Coordinator>> {
    let arbiter = Arbiter::new();
    let log = IntentLog::open(&config.data_dir.join(crate::data::manifest::INTENT_LOG_FILE), &store.storage)?;
    *prepared.metrics.intents_pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(log.pending_count());
    let (tx, rx) = oneshot::channel();
    let (shards, cell, refint) = (shards.to_vec(), prepared.cell.clone(), prepared.directory.refint.clone());
    // Its dropped records are counted with the workers'.
    let audit = audit.map(|(buffer, bytes_max)| {
        let stats = Arc::new(ferrodir_router::stats::WorkerStats::default());
        prepared.metrics.workers.lock().unwrap_or_else(|p| p.into_inner()).push(stats.clone());
        AuditSink::new(buffer, bytes_max, stats)
    });
    arbiter.spawn(async move {
        let mut coordinator = Coordinator::new(shards, cell, log, refint);
        if let Some(sink) = audit {
            coordinator = coordinator.with_audit_log(sink);
        }
        let _ = tx.send(coordinator.start());
    });
    threads.coordinator = Some(arbiter);
    let coordinator = rx.await.context("coordinator thread died")?;
    let recovered = coordinator.send(Recover).await?.map_err(|e| anyhow::anyhow!("recovery failed: {e}"))?;
    if recovered > 0 {
        tracing::info!(recovered, "finished interrupted cross-shard changes");
    }
    Ok(coordinator)
}

/// The actors every worker addresses.
struct Started {
    shards: Vec<Addr<ShardActor>>,
    coordinator: Addr<Coordinator>,
    scans: ScanPool,
}

/// Rolls back, on the first worker's thread, the LDAP transactions whose commit a crash
/// interrupted (`op::transaction::recover`), before the server listens.
async fn recover_transactions(arbiters: &[Arbiter]) -> anyhow::Result<()> {
    let Some(arbiter) = arbiters.first() else { return Ok(()) };
    let (tx, rx) = oneshot::channel();
    // The closure is sent to the worker; the recovery's future stays there.
    arbiter.spawn_fn(move || {
        actix::spawn(async move {
            let result = match WORKER.with(|slot| slot.borrow().clone()) {
                Some(worker) => {
                    ferrodir_router::recover_transactions(worker).await.map_err(|e| e.to_string())
                }
                None => Ok(0),
            };
            let _ = tx.send(result);
        });
    });
    let rolled_back =
        rx.await.context("worker thread died")?.map_err(|e| anyhow::anyhow!("transaction recovery: {e}"))?;
    if rolled_back > 0 {
        tracing::warn!(rolled_back, "rolled back transactions a crash interrupted");
    }
    Ok(())
}

/// A worker on each shard's thread, around the shard core started there.
async fn start_workers(
    config: &Config,
    store: &Store,
    prepared: &Prepared,
    started: &Started,
    queues: LogQueues,
    arbiters: &[Arbiter],
) -> anyhow::Result<()> {
    let mut log_queues = queues.access.into_iter();
    let mut audit_queues = queues.audit.into_iter();
    for (index, arbiter) in arbiters.iter().enumerate() {
        let seed = WorkerSeed {
            index,
            shards: started.shards.clone(),
            coordinator: started.coordinator.clone(),
            directory: prepared.directory.clone(),
            cell: prepared.cell.clone(),
            scans: started.scans.clone(),
            metrics: prepared.metrics.clone(),
            access_log: log_queues.next().map(|(buffer, lines_max)| (buffer, lines_max, prepared.log_format)),
            audit_log: audit_queues.next(),
            view_sources: shard_view_sources(config, store, index, prepared.directory.remote_reads),
        };
        let (tx, rx) = oneshot::channel();
        arbiter.spawn(async move {
            if let Some(local) = LOCAL_SHARD.with(|slot| slot.borrow().clone()) {
                let worker = seed.build(local);
                WORKER.with(|slot| *slot.borrow_mut() = Some(worker));
            }
            let _ = tx.send(());
        });
        rx.await.context("worker thread died")?;
    }
    Ok(())
}

/// What worker `index` reads the other shards through when reads of other shards take
/// snapshots: each shard's info and engine, None for its own and for every shard when
/// reads are messages. A shard view shares the shard's entry cache with its owner
/// (`shard::entrycache`).
fn shard_view_sources(
    config: &Config,
    store: &Store,
    index: usize,
    remote_reads: RemoteReads,
) -> Vec<Option<(ShardInfo, Arc<dyn KvEngine>)>> {
    (0..store.manifest.shards)
        .map(|i| {
            let wanted = i != index && remote_reads == RemoteReads::Snapshot;
            wanted.then(|| (store.shard_info(i, config), store.engines[i].clone()))
        })
        .collect()
}

/// Everything a worker is built from but its local shard, sent to its thread.
struct WorkerSeed {
    index: usize,
    shards: Vec<Addr<ShardActor>>,
    coordinator: Addr<Coordinator>,
    directory: Arc<DirectoryConfig>,
    cell: Arc<SkeletonCell>,
    scans: ScanPool,
    metrics: Arc<Metrics>,
    /// This worker's access-log queue, its line bound and the format.
    access_log: Option<(Arc<LogBuffer>, usize, LogFormat)>,
    /// This worker's audit-log queue and its byte bound.
    audit_log: Option<(Arc<LogBuffer>, usize)>,
    view_sources: Vec<Option<(ShardInfo, Arc<dyn KvEngine>)>>,
}

impl WorkerSeed {
    /// Builds the worker on its own thread, around `local`, and registers its counters
    /// with the metrics and cn=Monitor.
    fn build(self, local: Rc<ShardCore>) -> Rc<Worker> {
        let views = self
            .view_sources
            .into_iter()
            .map(|source| source.and_then(|(info, engine)| ShardCore::new(info, engine).ok().map(Rc::new)))
            .collect();
        let metrics = self.metrics;
        metrics.caches.lock().unwrap_or_else(|p| p.into_inner()).push((self.index, local.stats()));
        let mut worker =
            Worker::new(self.index, local, self.shards, self.coordinator, self.directory, self.cell)
                .with_shard_views(views)
                .with_scan_pool(self.scans);
        if let Some((buffer, lines_max, format)) = self.access_log {
            let sink = LogSink::new(buffer, lines_max, format, worker.stats.clone());
            worker = worker.with_access_log(sink);
        }
        if let Some((buffer, bytes_max)) = self.audit_log {
            let stats = worker.stats.clone();
            worker = worker.with_audit_log(AuditSink::new(buffer, bytes_max, stats));
        }
        metrics.workers.lock().unwrap_or_else(|p| p.into_inner()).push(worker.stats.clone());
        worker.config().monitor.add_worker(worker.stats.clone());
        let worker = Rc::new(worker);
        Worker::start_shard_view_release(&worker);
        worker
    }
}

/// Loads TLS, binds the listeners and the metrics endpoint, and tells the world: cn=Monitor's
/// facts, /readyz, the listening lines, systemd.
fn open_listeners(
    config: &Config,
    listen: Listen,
    prepared: &Prepared,
    shard_count: usize,
) -> anyhow::Result<(Listeners, Option<Arc<TlsContext>>)> {
    let metrics = &prepared.metrics;
    let tls = match &config.tls {
        Some(settings) => Some(TlsContext::load(settings).context("[tls]")?),
        None => None,
    };
    *metrics.tls.lock().unwrap_or_else(|p| p.into_inner()) = tls.clone();
    let listeners = Listeners::bind(config, listen, tls.is_some())?;
    if let Some(addr) = config.metrics_listen {
        let bound = crate::metrics::http::start(addr, metrics.clone())?;
        println!("ferrodir metrics on http://{bound}/metrics");
    }
    prepared
        .directory
        .monitor
        .set_server(Arc::new(crate::serve::monitor::Facts::new(metrics.clone(), listeners.describe())));
    // Ready before the listening line: whoever waits for that line may ask /readyz at once.
    metrics.serving.store(true, std::sync::atomic::Ordering::Relaxed);
    announce(config, &listeners, shard_count);
    crate::serve::systemd::ready();
    Ok((listeners, tls))
}

/// The tasks that run beside the accept loop: systemd's watchdog, TLS certificate
/// polling, SIGHUP.
fn spawn_background(
    started: &Started,
    tls: Option<Arc<TlsContext>>,
    reloader: Arc<crate::serve::reload::Reloader>,
) {
    actix::spawn(crate::serve::systemd::watchdog(started.coordinator.clone(), started.shards.clone()));
    if let Some(tls) = &tls {
        actix::spawn(tls.clone().poll());
    }
    actix::spawn(reload_on_hangup(reloader));
}

/// Accepts connections until `shutdown` completes, handing each to a worker in turn
/// (`connection_workers`). Returns the connection slots, all back once every connection
/// has closed.
async fn accept_until(
    shutdown: impl Future<Output = ()>,
    config: &Config,
    listeners: &Listeners,
    tls: Option<Arc<TlsContext>>,
    arbiters: &[Arbiter],
    metrics: &Metrics,
) -> Arc<Semaphore> {
    let mut shared = connection::Shared::new(config.limits.clone(), tls);
    shared.loopback_is_remote = config.testing.as_ref().is_some_and(|t| t.loopback_is_remote);
    let shared = Arc::new(shared);
    let connections = Arc::new(Semaphore::new(config.limits.connections_max));
    let per_ip = PerIp::new(&config.limits);
    // The workers that take connections, round robin (config.connection_workers).
    let takers = config.connection_worker_indices(arbiters.len());
    tracing::info!(workers = ?takers, "workers taking connections");
    let mut next = 0usize;
    // Connection numbers for the access log; only this loop counts them.
    let mut conn_id = 0u64;
    tokio::pin!(shutdown);
    loop {
        let incoming = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listeners.accept() => accepted,
        };
        let Some((incoming, peer_ip)) = incoming else { continue };
        let listener = incoming.listener();
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::warn!("connection limit reached; refusing a connection");
            metrics.listeners.rejected(listener, crate::metrics::Rejection::ConnectionsMax);
            continue;
        };
        // Over the limit, the stream is dropped here: closed at once, like slapd.
        let Some(ip_slot) = peer_ip.map_or(Some(None), |ip| per_ip.admit(ip)) else {
            tracing::warn!(ip = ?peer_ip, max = config.limits.connections_per_ip_max, "connections per IP limit reached; closing a connection");
            metrics.listeners.rejected(listener, crate::metrics::Rejection::PerIp);
            continue;
        };
        metrics.listeners.accepted(listener);
        conn_id += 1;
        let (conn, shared) = (conn_id, shared.clone());
        // The closure is sent to the worker; the connection's future stays there.
        arbiters[takers[next % takers.len()]].spawn_fn(move || {
            actix::spawn(async move {
                let worker = WORKER.with(|slot| slot.borrow().clone());
                if let Some(worker) = worker {
                    connection::accept(incoming, conn, worker, shared).await;
                }
                drop(ip_slot);
                drop(permit);
            });
        });
        next = next.wrapping_add(1);
    }
    connections
}

/// A clean stop leaves each shard file whole by itself (the write log's records since
/// the last checkpoint made durable in redb), so that tools reading the files, or a copy
/// of them, need no replay. Commits still running finish first (the log's lock).
fn checkpoint(store: &Store) -> bool {
    let mut all = true;
    for (index, engine) in store.engines.iter().enumerate() {
        if let Err(e) = engine.checkpoint() {
            tracing::warn!(shard = index, error = %e, "no checkpoint at shutdown: the next start replays the write log");
            all = false;
        }
    }
    all
}

/// The password threads of a serving server: `password_hash_threads` of them at
/// `password_hash_threads_nice`, sharing a queue of `password_hash_queue_max` jobs.
fn start_hash_pool(config: &Config) -> anyhow::Result<Arc<HashPool>> {
    let nice = config.password_hash_threads_nice;
    let pool =
        HashPool::start(config.password_hash_thread_count(), config.password_hash_queue_max, move || {
            crate::serve::priority::lower_this_thread(nice, "password-hash")
        })
        .context("cannot start the password hash threads")?;
    Ok(Arc::new(pool))
}

/// Starts one replication consumer per `[[replication]]` entry (server/src/replication),
/// the i-th on worker `i mod N`, with read views of every shard for its start-up scan.
fn start_replication(config: &Config, store: &Store, arbiters: &[Arbiter], metrics: &Metrics) {
    // The uuids whose delete came to one consumer before their entry (a mesh): shared, so
    // that the entry, when another consumer brings it, stays deleted.
    let tombstones = crate::replication::mesh::SharedTombstones::with_max(config.limits.sync_delete_log_max);
    for (i, settings) in config.replication.iter().enumerate() {
        let tombstones = tombstones.clone();
        let Some(arbiter) = arbiters.get(i % arbiters.len().max(1)) else { return };
        let status = metrics.replication.register(settings, config.multi_provider);
        let sources: Vec<_> = (0..store.manifest.shards)
            .map(|s| {
                (ShardInfo { entry_cache: None, ..store.shard_info(s, config) }, store.engines[s].clone())
            })
            .collect();
        let settings = settings.clone();
        arbiter.spawn_fn(move || {
            actix::spawn(async move {
                let Some(worker) = WORKER.with(|slot| slot.borrow().clone()) else { return };
                let views = sources
                    .into_iter()
                    .filter_map(|(info, engine)| ShardCore::new(info, engine).ok().map(Rc::new))
                    .collect();
                crate::replication::consumer::run(settings, worker, views, status, tombstones).await;
            });
        });
    }
}

/// Starts the admin socket (admin/). Without it the server still serves; only online
/// export and backup are unavailable, so a failure is a warning.
fn start_admin(
    config: &Config,
    store: &Store,
    coordinator: Addr<Coordinator>,
    gates: Vec<Arc<crate::data::cut::CommitGate>>,
    reloader: Arc<crate::serve::reload::Reloader>,
) -> Option<crate::admin::server::AdminSocket> {
    let kind = ferrodir_shard::storage::EngineKind::parse(&store.manifest.engine)?;
    let context = crate::admin::server::AdminContext {
        coordinator,
        engines: store.engines.clone(),
        gates,
        kind,
        manifest: store.manifest.clone(),
        rules: store.rules.clone(),
        storage: store.storage.clone(),
        reloader,
    };
    match crate::admin::server::start(&config.data_dir, context) {
        Ok(socket) => Some(socket),
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "no admin socket: export and backup work only offline");
            None
        }
    }
}

/// SIGHUP (systemd's ExecReload) reloads what can change while serving (serve/reload.rs).
/// Handled even without a config file, so that a reload never terminates the server
/// (SIGHUP's default action).
async fn reload_on_hangup(reloader: Arc<crate::serve::reload::Reloader>) {
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => signal,
        Err(e) => {
            tracing::warn!(error = %e, "no SIGHUP handler: reload by restarting");
            return;
        }
    };
    while hangup.recv().await.is_some() {
        crate::serve::systemd::reloading();
        // Outcome logged by the reloader.
        let _ = reloader.reload("SIGHUP");
        crate::serve::systemd::ready();
    }
}
