//! What cn=Monitor (router::monitor) reads from the server: the accept loop's counters,
//! the bound listeners and each shard's commit counters, the same ones the metrics
//! endpoint reads (metrics/mod.rs). Read-only: every counter keeps its one writer.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ferrodir_router::{ConsumerFacts, ListenerInfo, ServerFacts, ShardFacts};

use crate::metrics::Metrics;

pub struct Facts {
    metrics: Arc<Metrics>,
    listeners: Vec<ListenerInfo>,
    max_file_descriptors: u64,
}

impl Facts {
    pub fn new(metrics: Arc<Metrics>, listeners: Vec<ListenerInfo>) -> Self {
        Self { metrics, listeners, max_file_descriptors: open_files_limit() }
    }
}

impl ServerFacts for Facts {
    fn connections_accepted(&self) -> u64 {
        self.metrics.listeners.accepted_total()
    }

    fn listeners(&self) -> Vec<ListenerInfo> {
        self.listeners.clone()
    }

    fn shards(&self) -> Vec<ShardFacts> {
        let cores = self.metrics.caches.lock().unwrap_or_else(|p| p.into_inner());
        let entries = |index: usize| {
            cores.iter().find(|(i, _)| *i == index).map_or(0, |(_, c)| c.entries.load(Ordering::Relaxed))
        };
        self.metrics
            .shards
            .iter()
            .enumerate()
            .map(|(index, s)| ShardFacts {
                writable: !s.failed.load(Ordering::Relaxed),
                commits: s.commits_ok.load(Ordering::Relaxed),
                failed_commits: s.commits_failed.load(Ordering::Relaxed),
                entries: entries(index),
            })
            .collect()
    }

    fn max_file_descriptors(&self) -> u64 {
        self.max_file_descriptors
    }

    fn consumers(&self) -> Vec<ConsumerFacts> {
        self.metrics
            .replication
            .all()
            .iter()
            .map(|s| ConsumerFacts {
                rid: s.rid,
                search_base: s.search_base.clone(),
                attributes: s.monitor_attributes(),
            })
            .collect()
    }
}

/// The soft RLIMIT_NOFILE, read once at start (slapd's cn=Max File Descriptors shows its
/// descriptor table size); 0 if it can't be read.
fn open_files_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit through a valid pointer to a local.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if rc == 0 {
        limit.rlim_cur
    } else {
        0
    }
}
