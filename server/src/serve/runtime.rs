//! Starting the server: one worker thread (an actix arbiter) per shard, each holding its
//! shard actor and the connections assigned to it; the coordinator on a thread of its own;
//! the accept loop on the main thread, handing each connection to a worker in turn; the
//! admin socket (admin.rs) on a thread of its own; the password hash pool
//! (`router::password::pool`) on threads of its own, at a lower priority.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use anyhow::Context as _;
use ferrodir_router::coordinator::{Coordinator, Recover};
use ferrodir_router::{CookieKey, HashPool, IntentLog, RemoteReads, Worker};
use ferrodir_shard::{ShardActor, ShardCore, ShardInfo, SkeletonCell};
use tokio::sync::{oneshot, Semaphore};

use crate::config::Config;
use crate::data::store::Store;
use crate::serve::connection;

thread_local! {
    /// The worker owned by this arbiter thread; set once at start.
    static WORKER: RefCell<Option<Rc<Worker>>> = const { RefCell::new(None) };
    static LOCAL_SHARD: RefCell<Option<Rc<ShardCore>>> = const { RefCell::new(None) };
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

/// The key that seals paged-results cookies: `paged-results.key` in the data directory
/// (32 random bytes, mode 0600, made at the first start), so cookies outlive a restart.
/// Without it (a read-only directory, a damaged file) a fresh key for this run only.
fn paged_key(data_dir: &std::path::Path) -> CookieKey {
    let path = data_dir.join("paged-results.key");
    match std::fs::read(&path) {
        Ok(bytes) => match <[u8; 32]>::try_from(bytes.as_slice()) {
            Ok(key) => return CookieKey::new(key),
            Err(_) => {
                tracing::warn!(path = %path.display(), "paged results key is not 32 bytes: using a key for this run only")
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = CookieKey::random();
            match write_key(&path, &key) {
                Ok(()) => return key,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot keep the paged results key: cookies will not outlive this run")
                }
            }
            return key;
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the paged results key: using a key for this run only")
        }
    }
    CookieKey::random()
}

fn write_key(path: &std::path::Path, key: &CookieKey) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(key.bytes())?;
    file.sync_all()
}

/// Runs the server until SIGTERM or SIGINT. Must be called inside an actix `System`.
pub async fn serve(config: Config, mut store: Store) -> anyhow::Result<()> {
    // First, before anything clones the engines: commits pass through the gates a
    // consistent cut pauses (cut.rs).
    let gates = crate::data::cut::install_gates(&mut store.engines);
    // Then the meters, around the gates: a commit held at a gate isn't timed as a slow sync.
    let shard_stats = crate::metrics::engine::install(&mut store.engines);
    let mut directory = crate::directory::directory_config(&config, &store, start_hash_pool(&config)?)?;
    directory.paged.key = paged_key(&config.data_dir);
    let directory = Arc::new(directory);
    store.fill_blooms()?;
    let settled = store.settle_containers(&config)?;
    if settled > 0 {
        tracing::info!(settled, "cleared the container flag of entries left without children");
    }
    let (skeleton, entry_counts) = store.skeleton(&config)?;
    let cell = Arc::new(SkeletonCell::new(skeleton));
    let shard_count = store.manifest.shards;
    let shard_files = match ferrodir_shard::storage::EngineKind::parse(&store.manifest.engine) {
        Some(kind) => {
            (0..shard_count).map(|i| crate::data::backup::shard_path(kind, &config.data_dir, i)).collect()
        }
        None => Vec::new(),
    };
    let metrics = Arc::new(crate::metrics::Metrics::new(shard_stats, shard_files, cell.clone()));
    let log_format = crate::serve::accesslog::format(&config.access_log)?;
    let mut log_queues = crate::serve::accesslog::start(&config.access_log, shard_count)?
        .map(|(buffers, lines_max)| buffers.into_iter().map(move |buffer| (buffer, lines_max)));

    // Before any shard starts: CSNs carry the server id, and each shard's actor publishes
    // its part of contextCSN (shard::watermark).
    ferrodir_shard::set_server_id(config.server_id);
    ferrodir_shard::install_watermark_hub(shard_count);
    ferrodir_shard::set_delete_log_max(config.limits.sync_delete_log_max);
    ferrodir_shard::install_delete_log_skeleton(cell.clone());
    let mut arbiters = Vec::with_capacity(shard_count);
    let mut shards = Vec::with_capacity(shard_count);
    for index in 0..shard_count {
        let arbiter = Arbiter::new();
        let info = store.shard_info(index, &config);
        let engine = store.engines[index].clone();
        let entries = entry_counts.get(index).copied().unwrap_or(0);
        let coalesce = std::time::Duration::from_micros(config.limits.commit_coalesce_us);
        let (tx, rx) = oneshot::channel();
        arbiter.spawn(async move {
            let started = ShardCore::new(info, engine).and_then(|core| {
                core.counters().entries.store(entries, std::sync::atomic::Ordering::Relaxed);
                let core = Rc::new(core);
                let actor = ShardActor::new(core.clone())?.with_commit_coalesce(coalesce);
                LOCAL_SHARD.with(|slot| *slot.borrow_mut() = Some(core));
                Ok(actor.start())
            });
            let _ = tx.send(started);
        });
        shards.push(
            rx.await.context("worker thread died")?.with_context(|| format!("starting shard {index}"))?,
        );
        arbiters.push(arbiter);
    }

    let search_pool = crate::serve::search_pool::SearchPool::start(&config, &store)?;

    let coordinator_arbiter = Arbiter::new();
    let log = IntentLog::open(&config.data_dir.join(crate::data::manifest::INTENT_LOG_FILE))?;
    *metrics.intents_pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(log.pending_count());
    let (tx, rx) = oneshot::channel();
    let (coord_shards, coord_cell, refint) = (shards.clone(), cell.clone(), directory.refint.clone());
    coordinator_arbiter.spawn(async move {
        let _ = tx.send(Coordinator::new(coord_shards, coord_cell, log, refint).start());
    });
    let coordinator = rx.await.context("coordinator thread died")?;
    let recovered = coordinator.send(Recover).await?.map_err(|e| anyhow::anyhow!("recovery failed: {e}"))?;
    if recovered > 0 {
        tracing::info!(recovered, "finished interrupted cross-shard changes");
    }

    for (index, arbiter) in arbiters.iter().enumerate() {
        let (tx, rx) = oneshot::channel();
        let (shards, coordinator, directory, cell) =
            (shards.clone(), coordinator.clone(), directory.clone(), cell.clone());
        let scans = search_pool.scans.clone();
        let metrics = metrics.clone();
        let log_queue = log_queues.as_mut().and_then(Iterator::next);
        let replica_sources: Vec<_> = (0..shard_count)
            .map(|i| {
                let wanted = i != index && directory.remote_reads == RemoteReads::Snapshot;
                // A replica shares the shard's entry cache with its owner (`shard::entrycache`).
                wanted.then(|| (store.shard_info(i, &config), store.engines[i].clone()))
            })
            .collect();
        arbiter.spawn(async move {
            let local = LOCAL_SHARD.with(|slot| slot.borrow().clone());
            if let Some(local) = local {
                let replicas = replica_sources
                    .into_iter()
                    .map(|source| {
                        source.and_then(|(info, engine)| ShardCore::new(info, engine).ok().map(Rc::new))
                    })
                    .collect();
                metrics.caches.lock().unwrap_or_else(|p| p.into_inner()).push((index, local.stats()));
                let mut worker = Worker::new(index, local, shards, coordinator, directory, cell)
                    .with_shard_views(replicas)
                    .with_scan_pool(scans);
                if let Some((buffer, lines_max)) = log_queue {
                    let sink = ferrodir_router::accesslog::LogSink::new(
                        buffer,
                        lines_max,
                        log_format,
                        worker.stats.clone(),
                    );
                    worker = worker.with_access_log(sink);
                }
                metrics.workers.lock().unwrap_or_else(|p| p.into_inner()).push(worker.stats.clone());
                worker.config.monitor.add_worker(worker.stats.clone());
                let worker = Rc::new(worker);
                Worker::start_shard_view_release(&worker);
                WORKER.with(|slot| *slot.borrow_mut() = Some(worker));
            }
            let _ = tx.send(());
        });
        rx.await.context("worker thread died")?;
    }

    start_replication(&config, &store, &arbiters);

    // Bound before the listening line, so that whoever waits for that line can use it.
    let admin = start_admin(&config, &store, coordinator.clone(), gates);

    let tls = match &config.tls {
        Some(settings) => Some(crate::serve::tls::TlsContext::load(settings).context("[tls]")?),
        None => None,
    };
    *metrics.tls.lock().unwrap_or_else(|p| p.into_inner()) = tls.clone();
    let listeners = Listeners::bind(&config, tls.is_some()).await?;
    if let Some(addr) = config.metrics_listen {
        let bound = crate::metrics::http::start(addr, metrics.clone())?;
        println!("ferrodir metrics on http://{bound}/metrics");
    }
    directory
        .monitor
        .set_server(Arc::new(crate::serve::monitor::Facts::new(metrics.clone(), listeners.describe())));
    // Ready before the listening line: whoever waits for that line may ask /readyz at once.
    metrics.serving.store(true, std::sync::atomic::Ordering::Relaxed);
    announce(&config, &listeners, shard_count);
    crate::serve::systemd::ready();
    actix::spawn(crate::serve::systemd::watchdog(coordinator.clone(), shards.clone()));
    if let Some(tls) = &tls {
        actix::spawn(tls.clone().poll());
    }
    actix::spawn(reload_on_hangup(tls.clone()));

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
    let shutdown = shutdown_signal();
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
        let conn = conn_id;
        let shared = shared.clone();
        // The closure is sent to the worker; the connection's future stays there.
        let worker_index = takers[next % takers.len()];
        arbiters[worker_index].spawn_fn(move || {
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
    tracing::info!("shutting down: no new connections");
    crate::serve::systemd::stopping();
    drop(listeners);
    let grace = Duration::from_secs(config.limits.shutdown_grace_s);
    let all = u32::try_from(config.limits.connections_max).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(grace, connections.acquire_many(all)).await;
    ferrodir_router::stopping();
    for arbiter in arbiters.iter().chain(std::iter::once(&coordinator_arbiter)) {
        arbiter.stop();
    }
    drop(admin);
    search_pool.shutdown();
    // A clean stop leaves each shard file whole by itself (the write log's records since
    // the last checkpoint made durable in redb), so that tools reading the files, or a copy
    // of them, need no replay. Commits still running finish first (the log's lock).
    for (index, engine) in store.engines.iter().enumerate() {
        if let Err(e) = engine.checkpoint() {
            tracing::warn!(shard = index, error = %e, "no checkpoint at shutdown: the next start replays the write log");
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// Starts one replication consumer per `[[replication]]` entry (server/src/replication),
/// the i-th on worker `i mod N`, with read views of every shard for its start-up scan.
fn start_replication(config: &Config, store: &Store, arbiters: &[Arbiter]) {
    for (i, settings) in config.replication.iter().enumerate() {
        let Some(arbiter) = arbiters.get(i % arbiters.len().max(1)) else { return };
        let status = crate::replication::status::register(settings);
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
                crate::replication::consumer::run(settings, worker, views, status).await;
            });
        });
    }
}

/// Connections open per client IP address, counted at accept and close only (never on the
/// path of a request), so one mutex is no contention.
struct PerIp {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    /// 0 = unlimited.
    max: usize,
    exempt_loopback: bool,
}

/// One admitted connection's place in its IP's count; gives it back when dropped.
struct IpSlot {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl PerIp {
    fn new(limits: &crate::config::Limits) -> Self {
        Self {
            counts: Arc::default(),
            max: limits.connections_per_ip_max,
            exempt_loopback: limits.connections_per_ip_exempt_loopback,
        }
    }

    /// A slot for one more connection from `ip`, or None when it has `max` open. Exempt
    /// connections aren't counted (None is never returned for them).
    fn admit(&self, ip: IpAddr) -> Option<Option<IpSlot>> {
        let ip = ip.to_canonical();
        if self.max == 0 || (self.exempt_loopback && ip.is_loopback()) {
            return Some(None);
        }
        let mut counts = self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = counts.entry(ip).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Some(IpSlot { counts: self.counts.clone(), ip }))
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = counts.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// Starts the admin socket (admin.rs). Without it the server still serves; only online
/// export and backup are unavailable, so a failure is a warning.
fn start_admin(
    config: &Config,
    store: &Store,
    coordinator: Addr<Coordinator>,
    gates: Vec<Arc<crate::data::cut::CommitGate>>,
) -> Option<crate::admin::server::AdminSocket> {
    let kind = ferrodir_shard::storage::EngineKind::parse(&store.manifest.engine)?;
    let context = crate::admin::server::AdminContext {
        coordinator,
        engines: store.engines.clone(),
        gates,
        kind,
        manifest: store.manifest.clone(),
        rules: store.rules.clone(),
    };
    match crate::admin::server::start(&config.data_dir, context) {
        Ok(socket) => Some(socket),
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "no admin socket: export and backup work only offline");
            None
        }
    }
}

/// A TCP listener whose accepted connections get a receive buffer of `receive_buffer`
/// bytes (`[limits] socket_receive_buffer_bytes`; 0: the kernel's autotuning). Set on the
/// listener, so the window scale offered in the handshake already fits it. Bounded, a
/// client that sends requests without reading answers makes the kernel hold at most twice
/// that much of them once the server stops reading (`requests_pending_max`); left to
/// autotuning, Linux grows it up to `net.ipv4.tcp_rmem`'s maximum (32 MiB on our hosts),
/// per connection.
fn listen_tcp(addr: std::net::SocketAddr, receive_buffer: usize) -> std::io::Result<tokio::net::TcpListener> {
    let socket =
        if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    if receive_buffer > 0 {
        socket.set_recv_buffer_size(u32::try_from(receive_buffer).unwrap_or(u32::MAX))?;
    }
    socket.bind(addr)?;
    socket.listen(1024)
}

/// The listeners: plain LDAP (always), LDAPS and ldapi when configured.
struct Listeners {
    plain: tokio::net::TcpListener,
    ldaps: Option<tokio::net::TcpListener>,
    ldapi: Option<(tokio::net::UnixListener, std::path::PathBuf)>,
}

impl Listeners {
    async fn bind(config: &Config, tls: bool) -> anyhow::Result<Self> {
        let receive_buffer = config.limits.socket_receive_buffer_bytes;
        let plain = listen_tcp(config.listen, receive_buffer)
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let ldaps = match config.listen_ldaps {
            Some(addr) if tls => Some(
                listen_tcp(addr, receive_buffer)
                    .with_context(|| format!("cannot listen on {addr} (LDAPS)"))?,
            ),
            Some(_) => anyhow::bail!("listen_ldaps needs a [tls] table with cert_file and key_file"),
            None => None,
        };
        let ldapi = match &config.listen_ldapi {
            Some(path) => Some((bind_ldapi(path)?, path.clone())),
            None => None,
        };
        Ok(Self { plain, ldaps, ldapi })
    }

    /// Each listener's URL and local address, for cn=Monitor's cn=Listeners.
    fn describe(&self) -> Vec<ferrodir_router::ListenerInfo> {
        use ferrodir_router::ListenerInfo;
        let mut out = Vec::new();
        for (listener, scheme) in [(Some(&self.plain), "ldap"), (self.ldaps.as_ref(), "ldaps")] {
            if let Some(addr) = listener.and_then(|l| l.local_addr().ok()) {
                out.push(ListenerInfo {
                    url: format!("{scheme}://{addr}/"),
                    local_address: format!("IP={addr}"),
                });
            }
        }
        if let Some((_, path)) = &self.ldapi {
            let path = path.display().to_string();
            out.push(ListenerInfo {
                url: format!("ldapi://{}/", path.replace('/', "%2F")),
                local_address: format!("PATH={path}"),
            });
        }
        out
    }

    /// The next accepted connection and, for TCP, its peer's address (for the per-IP
    /// limit). None when an accept failed (retried on the next call).
    async fn accept(&self) -> Option<(connection::Incoming, Option<IpAddr>)> {
        use connection::Incoming;
        let ldaps = async {
            match &self.ldaps {
                Some(listener) => listener.accept().await,
                None => std::future::pending().await,
            }
        };
        let ldapi = async {
            match &self.ldapi {
                Some((listener, _)) => listener.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            accepted = self.plain.accept() => {
                let (stream, peer) = accepted.ok()?;
                Some((Incoming::Plain(stream.into_std().ok()?), Some(peer.ip())))
            }
            accepted = ldaps => {
                let (stream, peer) = accepted.ok()?;
                Some((Incoming::Ldaps(stream.into_std().ok()?), Some(peer.ip())))
            }
            accepted = ldapi => {
                let (stream, _) = accepted.ok()?;
                let cred = stream.peer_cred().ok().map(|c| (c.uid(), c.gid()));
                Some((Incoming::Ldapi(stream.into_std().ok()?, cred), None))
            }
        }
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        if let Some((_, path)) = &self.ldapi {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds the ldapi socket, replacing a stale one left by a server that died (but never a
/// socket some running server still answers on). Mode 0666 as slapd's: who may do what is
/// decided by the identity SASL EXTERNAL gives each peer, not by who may connect.
fn bind_ldapi(path: &std::path::Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt as _;
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!("{} is in use by a running server", path.display());
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    let listener = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("cannot listen on {} (ldapi)", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    Ok(listener)
}

fn announce(config: &Config, listeners: &Listeners, shards: usize) {
    let addr = listeners.plain.local_addr().unwrap_or(config.listen);
    tracing::info!(%addr, shards, data_dir = %config.data_dir.display(), engine = %config.engine, "ferrodir listening");
    // Printed plainly too, for a newcomer reading the terminal and for tests waiting on it.
    if let Some(ldaps) = listeners.ldaps.as_ref().and_then(|l| l.local_addr().ok()) {
        println!("ferrodir listening for LDAPS on {ldaps}");
    }
    if let Some((_, path)) = &listeners.ldapi {
        println!("ferrodir listening for ldapi on {}", path.display());
    }
    println!("ferrodir listening on {addr}");
    if !config.root_dn.is_empty() {
        println!("admin identity: {} (password set by root_password in the config)", config.root_dn);
    }
    for suffix in &config.suffixes {
        println!("try: ldapsearch -x -H ldap://{addr} -b {suffix}");
    }
}

/// SIGHUP (systemd's ExecReload) reloads what can change while serving: today the TLS
/// certificate and key. Handled even without TLS, so that a reload never terminates the
/// server (SIGHUP's default action).
async fn reload_on_hangup(tls: Option<Arc<crate::serve::tls::TlsContext>>) {
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => signal,
        Err(e) => {
            tracing::warn!(error = %e, "no SIGHUP handler: reload by restarting");
            return;
        }
    };
    while hangup.recv().await.is_some() {
        crate::serve::systemd::reloading();
        match &tls {
            Some(tls) => tls.reload("SIGHUP"),
            None => tracing::info!("SIGHUP: nothing to reload (no [tls])"),
        }
        crate::serve::systemd::ready();
    }
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}
