//! Prometheus metrics and health checks, served on `metrics_listen` by a thread of their
//! own (http.rs), never on an LDAP worker.
//!
//! Nothing here is on the request path: every counter has one writer (a worker thread, the
//! accept loop, a shard's commit thread; router::stats), and a scrape reads them all and
//! sums the workers'. Labels are fixed sets (operation, result class, scope, listener,
//! reason, shard index): never a DN, a filter or a client address.

pub mod engine;
pub(crate) mod family;
pub mod http;
pub mod index_builds;
mod syncrepl;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use ferrodir_router::stats::{
    BindMethod, CloseReason, Listener, OpKind, ResultClass, WorkerStats, LATENCY_BUCKETS_S,
};
use ferrodir_shard::{CoreStats, SkeletonCell};
use prometheus::proto::MetricFamily;
use prometheus::Encoder as _;

use self::engine::{ShardStats, BATCH_BUCKETS};
use self::family::Family;

/// Why the accept loop turned a connection away.
#[derive(Copy, Clone, Debug)]
pub enum Rejection {
    ConnectionsMax,
    PerIp,
}

/// The accept loop's counters: written by the main thread only.
#[derive(Default)]
pub struct ListenerStats {
    accepted: [AtomicU64; Listener::ALL.len()],
    rejected: [[AtomicU64; 2]; Listener::ALL.len()],
}

impl ListenerStats {
    pub fn accepted(&self, listener: Listener) {
        if let Some(c) = self.accepted.get(listener as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Connections accepted on every listener (cn=Monitor's cn=Total).
    pub fn accepted_total(&self) -> u64 {
        self.accepted.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    pub fn rejected(&self, listener: Listener, why: Rejection) {
        if let Some(c) = self.rejected.get(listener as usize).and_then(|row| row.get(why as usize)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Items the log writers lost to failed writes (the disk full, an I/O error), beside what
/// the workers' full queues dropped (WorkerStats): each a `reason` of the same counter.
#[derive(Default)]
pub struct LogUnwritten {
    pub access_lines: Arc<AtomicU64>,
    pub audit_records: Arc<AtomicU64>,
}

/// How many reloads of the config took effect and how many were refused
/// (`ferrodir_config_reloads_total{result}`; counted by serve/reload.rs).
#[derive(Debug, Default)]
pub struct ReloadCounts {
    pub ok: AtomicU64,
    pub failed: AtomicU64,
}

/// Everything a scrape reads.
pub struct Metrics {
    pub started: SystemTime,
    pub listeners: Arc<ListenerStats>,
    pub shards: Vec<Arc<ShardStats>>,
    pub shard_files: Vec<PathBuf>,
    pub skeleton: Arc<SkeletonCell>,
    /// Filled as each worker starts.
    pub workers: Mutex<Vec<Arc<WorkerStats>>>,
    /// Per shard, from its owning core: cache counters, entries, writes waiting.
    pub caches: Mutex<Vec<(usize, Arc<CoreStats>)>>,
    /// Set once every shard is open and every listener bound.
    pub serving: AtomicBool,
    /// The TLS configuration in force, when there is one (its certificate's expiry).
    pub tls: Mutex<Option<Arc<crate::serve::tls::TlsContext>>>,
    /// The coordinator's count of intents not yet cleared.
    pub intents_pending: Mutex<Option<Arc<std::sync::atomic::AtomicU64>>>,
    /// The directory's write state: contextCSN.
    pub hub: Arc<ferrodir_shard::Hub>,
    /// The syncrepl consumers this server serves as a provider.
    pub syncrepl: Arc<ferrodir_router::SyncreplStats>,
    disk: Arc<ferrodir_router::disk::DiskSpace>,
    /// The replication consumers this server runs (`[[replication]]`).
    pub replication: crate::replication::status::Consumers,
    /// Reloads of the config that took effect, and those refused.
    pub reloads: Arc<ReloadCounts>,
    /// The online index builds (serve/indexing.rs).
    pub index_builds: Arc<index_builds::IndexBuildStats>,
    /// What the log writers could not write (serve/logfile.rs).
    pub log_unwritten: LogUnwritten,
    process: prometheus::Registry,
}

/// What the metrics read beyond the shards and workers: the directory's shared write state
/// and its provider's consumers.
pub struct Sources {
    pub shards: Vec<Arc<ShardStats>>,
    pub shard_files: Vec<PathBuf>,
    pub skeleton: Arc<SkeletonCell>,
    pub hub: Arc<ferrodir_shard::Hub>,
    pub syncrepl: Arc<ferrodir_router::SyncreplStats>,
    /// Free space on the data directory, as the disk monitor last saw it (serve/diskwatch.rs).
    pub disk: Arc<ferrodir_router::disk::DiskSpace>,
}

impl Metrics {
    pub fn new(sources: Sources) -> Self {
        let Sources { shards, shard_files, skeleton, hub, syncrepl, disk } = sources;
        let process = prometheus::Registry::new();
        #[cfg(target_os = "linux")]
        if let Err(e) =
            process.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))
        {
            tracing::warn!(error = %e, "no process metrics");
        }
        Self {
            started: SystemTime::now(),
            listeners: Arc::default(),
            shards,
            shard_files,
            skeleton,
            workers: Mutex::default(),
            caches: Mutex::default(),
            serving: AtomicBool::new(false),
            tls: Mutex::default(),
            intents_pending: Mutex::default(),
            hub,
            syncrepl,
            disk,
            replication: Default::default(),
            reloads: Arc::default(),
            index_builds: Arc::default(),
            log_unwritten: LogUnwritten::default(),
            process,
        }
    }

    /// Ready to serve: every shard open, every listener bound, no shard refusing writes
    /// after a failed commit, free space above `[limits] disk_free_min_bytes`. The reason
    /// when not. (Readiness is about writes: a write Service routes to ready pods only.)
    pub fn readiness(&self) -> Result<(), String> {
        if !self.serving.load(Ordering::Relaxed) {
            return Err("starting".into());
        }
        if self.disk.is_low() {
            return Err(format!(
                "disk space low: {} bytes free, below limits.disk_free_min_bytes ({}); writes are refused",
                self.disk.free(),
                self.disk.min()
            ));
        }
        let failed: Vec<String> = self
            .shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.failed.load(Ordering::Relaxed))
            .map(|(i, _)| i.to_string())
            .collect();
        if failed.is_empty() {
            // A replica is ready once every consumer has caught up (replication::status).
            self.replication.readiness()
        } else {
            Err(format!("shards refusing writes after a failed commit: {}", failed.join(", ")))
        }
    }

    /// The Prometheus text format.
    pub fn render(&self) -> String {
        let mut families = self.process.gather();
        families.extend(self.server_families());
        families.extend(self.operation_families());
        families.extend(self.shard_families());
        families.extend(self.replication.families());
        families.extend(syncrepl::families(&self.syncrepl.snapshot(), &self.hub));
        // A family with no series (the certificate's expiry without [tls]) can't be encoded.
        families.retain(|family| !family.get_metric().is_empty());
        let mut out = Vec::new();
        if let Err(e) = prometheus::TextEncoder::new().encode(&families, &mut out) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// Entries on every shard, as their owners count them.
    pub fn entries_total(&self) -> u64 {
        let caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        caches.iter().map(|(_, stats)| stats.entries.load(Ordering::Relaxed)).sum()
    }

    /// Entries per shard, in shard order, as their owners count them (`shards` long; a
    /// shard not registered counts 0).
    pub fn entries_per_shard(&self, shards: usize) -> Vec<u64> {
        let mut counts = vec![0; shards];
        for (index, stats) in self.caches.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            if let Some(count) = counts.get_mut(*index) {
                *count = stats.entries.load(Ordering::Relaxed);
            }
        }
        counts
    }

    fn workers(&self) -> Vec<Arc<WorkerStats>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn server_families(&self) -> Vec<MetricFamily> {
        let workers = self.workers();
        let mut build = Family::gauge("ferrodir_build_info", "The running build; always 1.");
        build.value(&[("version", env!("CARGO_PKG_VERSION"))], 1.0);
        let mut start =
            Family::gauge("ferrodir_start_time_seconds", "When the server started, in Unix time.");
        start.value(&[], self.started.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()));
        let mut reloads = Family::counter(
            "ferrodir_config_reloads_total",
            "Reloads of the config file (SIGHUP, ferrodir reload), by outcome: ok, or failed (the running configuration stayed).",
        );
        reloads.value(&[("result", "ok")], self.reloads.ok.load(Ordering::Relaxed) as f64);
        reloads.value(&[("result", "failed")], self.reloads.failed.load(Ordering::Relaxed) as f64);
        let mut out = vec![self.tls_expiry_family(), build.done(), start.done(), reloads.done()];
        out.extend(self.disk_families());
        out.extend(self.index_families());
        out.extend(self.connection_families(&workers));
        out.extend(request_families(&workers));
        out.extend(log_drop_families(&workers, &self.log_unwritten));
        out
    }

    /// Free space on the data directory and the threshold below which writes are refused.
    fn disk_families(&self) -> Vec<MetricFamily> {
        let mut free = Family::gauge(
            "ferrodir_disk_free_bytes",
            "Bytes free for the server on the data directory's filesystem, at the disk monitor's last look (once a second).",
        );
        let seen = self.disk.free();
        if seen != u64::MAX {
            free.value(&[], seen as f64);
        }
        let mut min = Family::gauge(
            "ferrodir_disk_free_min_bytes",
            "limits.disk_free_min_bytes: below this many bytes free, writes are refused (0: never).",
        );
        min.value(&[], self.disk.min() as f64);
        let mut low = Family::gauge(
            "ferrodir_disk_space_low",
            "1 while free space is below limits.disk_free_min_bytes and writes are refused with unwillingToPerform.",
        );
        low.value(&[], if self.disk.is_low() { 1.0 } else { 0.0 });
        vec![free.done(), min.done(), low.done()]
    }

    /// The indices and their online builds (serve/indexing.rs).
    fn index_families(&self) -> Vec<MetricFamily> {
        let stats = &self.index_builds;
        let mut ready = Family::gauge(
            "ferrodir_index_ready",
            "Each configured index: 1 once complete on every shard and used by searches, 0 while it is built.",
        );
        for (attr, kind, is_ready) in stats.indexes.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            ready.value(&[("attribute", attr), ("kind", kind)], if *is_ready { 1.0 } else { 0.0 });
        }
        let mut running =
            Family::gauge("ferrodir_index_build_running", "1 while an online index build runs.");
        running.value(&[], if stats.running.load(Ordering::Relaxed) { 1.0 } else { 0.0 });
        let mut progress = Family::gauge(
            "ferrodir_index_build_progress_ratio",
            "The running index build's entries visited over the entries when it started (1: none running).",
        );
        progress.value(&[], stats.progress());
        let mut indexed = Family::counter(
            "ferrodir_index_build_entries_total",
            "Entries visited by online index builds since start.",
        );
        indexed.value(&[], stats.indexed_total.load(Ordering::Relaxed) as f64);
        let mut completed = Family::counter(
            "ferrodir_index_builds_completed_total",
            "Online index builds completed since start.",
        );
        completed.value(&[], stats.completed_total.load(Ordering::Relaxed) as f64);
        vec![ready.done(), running.done(), progress.done(), indexed.done(), completed.done()]
    }

    /// notAfter of the certificate in use; a family with no series without [tls].
    fn tls_expiry_family(&self) -> MetricFamily {
        let mut expiry = Family::gauge(
            "ferrodir_tls_certificate_expiry_timestamp_seconds",
            "notAfter of the TLS certificate in use, in Unix time (absent without [tls]).",
        );
        let tls = self.tls.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(not_after) = tls.and_then(|tls| tls.not_after_s()) {
            expiry.value(&[], not_after as f64);
        }
        expiry.done()
    }

    /// Connections per listener: accepted, rejected at once (by which limit), closed (by
    /// reason), open now.
    fn connection_families(&self, workers: &[Arc<WorkerStats>]) -> Vec<MetricFamily> {
        let mut accepted = Family::counter("ferrodir_connections_accepted_total", "Connections accepted.");
        let mut rejected =
            Family::counter("ferrodir_connections_rejected_total", "Connections closed at once by a limit.");
        let mut closed =
            Family::counter("ferrodir_connections_closed_total", "Connections ended, by reason.");
        let mut open = Family::gauge("ferrodir_connections_open", "Connections open now.");
        for listener in Listener::ALL {
            let name = listener.name();
            let taken =
                self.listeners.accepted.get(listener as usize).map_or(0, |c| c.load(Ordering::Relaxed));
            accepted.value(&[("listener", name)], taken as f64);
            for (why, label) in [(Rejection::ConnectionsMax, "connections_max"), (Rejection::PerIp, "per_ip")]
            {
                let count = self
                    .listeners
                    .rejected
                    .get(listener as usize)
                    .and_then(|row| row.get(why as usize))
                    .map_or(0, |c| c.load(Ordering::Relaxed));
                rejected.value(&[("listener", name), ("reason", label)], count as f64);
            }
            let mut ended = 0.0;
            for reason in CloseReason::ALL {
                let count = sum(workers, |w| w.closed_count(listener, reason));
                ended += count;
                closed.value(&[("listener", name), ("reason", reason.name())], count);
            }
            open.value(&[("listener", name)], (taken as f64 - ended).max(0.0));
        }
        vec![accepted.done(), rejected.done(), closed.done(), open.done()]
    }

    fn operation_families(&self) -> Vec<MetricFamily> {
        let workers = self.workers();
        let mut initiated =
            Family::counter("ferrodir_operations_initiated_total", "Operations received, by operation.");
        let mut completed = Family::counter(
            "ferrodir_operations_completed_total",
            "Operations answered (or abandoned), by operation and result class.",
        );
        let mut in_flight =
            Family::gauge("ferrodir_operations_in_flight", "Operations received and not yet answered.");
        let mut histograms = [
            Family::histogram(
                "ferrodir_operation_queue_seconds",
                "From a request's arrival to its start (waiting for a slot; slapd's qtime, 389-ds's wtime).",
            ),
            Family::histogram(
                "ferrodir_operation_execution_seconds",
                "From an operation's start to its final response (389-ds's optime).",
            ),
            Family::histogram(
                "ferrodir_operation_duration_seconds",
                "From a request's arrival to its final response (slapd's and 389-ds's etime).",
            ),
        ];
        for kind in OpKind::ALL {
            let op = kind.name();
            let started: u64 = workers.iter().map(|w| w.initiated_count(kind)).sum();
            initiated.value(&[("operation", op)], started as f64);
            let mut answered = 0u64;
            for class in ResultClass::ALL {
                let count: u64 = workers.iter().map(|w| w.completed_count(kind, class)).sum();
                answered += count;
                completed.value(&[("operation", op), ("result", class.name())], count as f64);
            }
            in_flight.value(&[("operation", op)], started.saturating_sub(answered) as f64);
            if matches!(kind, OpKind::Unbind | OpKind::Abandon) {
                // Answered by nothing and done on arrival: no latency to show.
                continue;
            }
            for (which, family) in histograms.iter_mut().enumerate() {
                let mut counts = vec![0u64; LATENCY_BUCKETS_S.len() + 1];
                let mut total = 0.0;
                for worker in &workers {
                    if let Some(Some(h)) = worker.latencies(kind).get(which) {
                        let (c, s) = h.read();
                        counts.iter_mut().zip(c).for_each(|(a, b)| *a += b);
                        total += s;
                    }
                }
                family.buckets(&[("operation", op)], &LATENCY_BUCKETS_S, &counts, total);
            }
        }
        let mut out = vec![initiated.done(), completed.done(), in_flight.done()];
        out.extend(histograms.into_iter().map(Family::done));
        out
    }

    fn shard_families(&self) -> Vec<MetricFamily> {
        let mut out = self.commit_families();
        out.extend(self.cache_families());
        let mut skeleton = Family::gauge(
            "ferrodir_skeleton_version",
            "Version of the published tree skeleton (moves on tree changes).",
        );
        skeleton.value(&[], self.skeleton.version() as f64);
        let mut intents = Family::gauge(
            "ferrodir_intents_pending",
            "Cross-shard changes recorded in the intent log and not yet cleared (left to recovery).",
        );
        if let Some(count) = self.intents_pending.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            intents.value(&[], count.load(Ordering::Relaxed) as f64);
        }
        out.extend([skeleton.done(), intents.done()]);
        out
    }

    /// Per shard, from its engine's meters: commits, their duration and size, whether it
    /// takes writes, and its file's size.
    fn commit_families(&self) -> Vec<MetricFamily> {
        let mut commits = Family::counter("ferrodir_shard_commits_total", "Batches committed, by outcome.");
        let mut duration = Family::histogram(
            "ferrodir_shard_commit_duration_seconds",
            "Applying and syncing one batch (fdatasync with redb).",
        );
        let mut batch =
            Family::histogram("ferrodir_shard_commit_mutations", "Key mutations per committed batch.");
        let mut writable = Family::gauge(
            "ferrodir_shard_writable",
            "1 while the shard takes writes; 0 after a failed commit.",
        );
        let mut file = Family::gauge("ferrodir_shard_file_bytes", "Size of the shard's file.");
        for (index, stats) in self.shards.iter().enumerate() {
            let shard = index.to_string();
            let labels = [("shard", shard.as_str())];
            commits.value(
                &[("shard", &shard), ("result", "success")],
                stats.commits_ok.load(Ordering::Relaxed) as f64,
            );
            commits.value(
                &[("shard", &shard), ("result", "failure")],
                stats.commits_failed.load(Ordering::Relaxed) as f64,
            );
            let (counts, sum) = stats.commit_duration.read();
            duration.buckets(&labels, &LATENCY_BUCKETS_S, &counts, sum);
            let counts: Vec<u64> = stats.batch_buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
            batch.buckets(&labels, &BATCH_BUCKETS, &counts, stats.batch_sum.load(Ordering::Relaxed) as f64);
            writable.value(&labels, if stats.failed.load(Ordering::Relaxed) { 0.0 } else { 1.0 });
            let bytes =
                self.shard_files.get(index).and_then(|f| std::fs::metadata(f).ok()).map_or(0, |m| m.len());
            file.value(&labels, bytes as f64);
        }
        vec![commits.done(), duration.done(), batch.done(), writable.done(), file.done()]
    }

    /// Per shard, from its owning core: entry cache lookups and hits, entries, writes waiting.
    fn cache_families(&self) -> Vec<MetricFamily> {
        let mut lookups = Family::counter("ferrodir_shard_cache_lookups_total", "Entry cache lookups.");
        let mut hits = Family::counter("ferrodir_shard_cache_hits_total", "Entry cache hits.");
        let mut entries = Family::gauge("ferrodir_shard_entries", "Entries held by the shard.");
        let mut waiting = Family::gauge(
            "ferrodir_shard_writes_waiting",
            "Writes the shard has taken and not yet answered: staged or being committed (its queue's depth).",
        );
        for (index, core) in self.caches.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let shard = index.to_string();
            lookups.value(&[("shard", &shard)], core.lookups.load(Ordering::Relaxed) as f64);
            hits.value(&[("shard", &shard)], core.hits.load(Ordering::Relaxed) as f64);
            entries.value(&[("shard", &shard)], core.entries.load(Ordering::Relaxed) as f64);
            waiting.value(&[("shard", &shard)], core.writes_waiting.load(Ordering::Relaxed) as f64);
        }
        vec![lookups.done(), hits.done(), entries.done(), waiting.done()]
    }
}

/// The logs' dropped items, by reason: `queue_full` (a worker's queue was full: the writer
/// fell behind), `write_error` (the writer's write failed: the disk full, an I/O error).
/// One counter for both, so what watched the total before still sees every loss.
fn log_drop_families(workers: &[Arc<WorkerStats>], unwritten: &LogUnwritten) -> Vec<MetricFamily> {
    let mut access = Family::counter(
        "ferrodir_access_log_dropped_lines_total",
        "Access-log lines dropped: by reason queue_full (the log's writer fell behind) or write_error \
         (its write failed: the disk full, an I/O error).",
    );
    access.value(&[("reason", "queue_full")], sum(workers, |w| w.access_log_dropped.load(Ordering::Relaxed)));
    access.value(&[("reason", "write_error")], unwritten.access_lines.load(Ordering::Relaxed) as f64);
    let mut audit = Family::counter(
        "ferrodir_audit_log_dropped_records_total",
        "Audit-log records of committed changes dropped: by reason queue_full (the log's writer fell \
         behind) or write_error (its write failed: the disk full, an I/O error).",
    );
    audit.value(&[("reason", "queue_full")], sum(workers, |w| w.audit_log_dropped.load(Ordering::Relaxed)));
    audit.value(&[("reason", "write_error")], unwritten.audit_records.load(Ordering::Relaxed) as f64);
    vec![access.done(), audit.done()]
}

/// A counter summed over the workers.
fn sum(workers: &[Arc<WorkerStats>], count: impl Fn(&WorkerStats) -> u64) -> f64 {
    workers.iter().map(|w| count(w)).sum::<u64>() as f64
}

/// Requests summed over the workers: binds (by method and outcome), searches (by scope,
/// unindexed, entries sent), PDUs and bytes each way.
fn request_families(workers: &[Arc<WorkerStats>]) -> Vec<MetricFamily> {
    let mut binds = Family::counter("ferrodir_binds_total", "Binds, by method and outcome.");
    for method in BindMethod::ALL {
        for (ok, label) in [(true, "success"), (false, "failure")] {
            binds.value(
                &[("method", method.name()), ("result", label)],
                sum(workers, |w| w.bind_count(method, ok)),
            );
        }
    }
    let mut searches = Family::counter("ferrodir_searches_total", "Searches, by scope.");
    for (i, scope) in ["base", "one", "sub", "children"].into_iter().enumerate() {
        searches.value(&[("scope", scope)], sum(workers, |w| w.scope_count(i)));
    }
    let counter = |name: &str, help: &str, count: fn(&WorkerStats) -> &AtomicU64| {
        let mut family = Family::counter(name, help);
        family.value(&[], sum(workers, |w| count(w).load(Ordering::Relaxed)));
        family.done()
    };
    vec![
        binds.done(),
        searches.done(),
        counter("ferrodir_searches_unindexed_total", "Searches no index narrows (389-ds's notes=A).", |w| {
            &w.unindexed_searches
        }),
        counter("ferrodir_search_entries_returned_total", "SearchResultEntry PDUs sent.", |w| {
            &w.entries_returned
        }),
        counter("ferrodir_received_pdus_total", "LDAP PDUs received.", |w| &w.pdus_in),
        counter("ferrodir_received_bytes_total", "Bytes received on LDAP connections (after TLS).", |w| {
            &w.bytes_in
        }),
        counter("ferrodir_sent_pdus_total", "LDAP PDUs sent.", |w| &w.pdus_out),
        counter("ferrodir_sent_bytes_total", "Bytes sent on LDAP connections (before TLS).", |w| {
            &w.bytes_out
        }),
    ]
}
