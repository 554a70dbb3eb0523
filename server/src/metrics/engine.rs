//! Each shard's commits, measured where they happen: a wrapper around the shard's engine
//! (installed at start like the commit gates of cut.rs), so the commit thread, the only
//! caller of `commit`, is the only writer of its shard's counters.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ferrodir_router::stats::Histogram;
use ferrodir_shard::storage::{KvEngine, KvSnapshot, Mutation, StorageResult};

/// Upper bounds of the mutations-per-commit buckets: how well group commit batches.
pub const BATCH_BUCKETS: [f64; 11] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0];

#[derive(Default)]
pub struct ShardStats {
    pub commits_ok: AtomicU64,
    pub commits_failed: AtomicU64,
    /// Applying and syncing one batch (fdatasync dominates with redb).
    pub commit_duration: Histogram,
    /// Mutations per commit, counted per bucket of [`BATCH_BUCKETS`] (the last: above).
    pub batch_buckets: [AtomicU64; BATCH_BUCKETS.len() + 1],
    pub batch_sum: AtomicU64,
    /// Set by a failed commit, cleared by the next one that succeeds (a shard that was
    /// refused space takes writes again once there is room; after any other failure none
    /// succeeds until a restart: ARCHITECTURE.md, "Faults"). While set the server is not
    /// ready.
    pub failed: AtomicBool,
}

impl ShardStats {
    fn observe_batch(&self, mutations: usize) {
        let size = mutations as f64;
        let slot = BATCH_BUCKETS.iter().position(|&bound| size <= bound).unwrap_or(BATCH_BUCKETS.len());
        if let Some(bucket) = self.batch_buckets.get(slot) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.batch_sum.fetch_add(mutations as u64, Ordering::Relaxed);
    }
}

struct MeteredEngine {
    inner: Arc<dyn KvEngine>,
    stats: Arc<ShardStats>,
}

impl KvEngine for MeteredEngine {
    fn snapshot(&self) -> StorageResult<Box<dyn KvSnapshot>> {
        self.inner.snapshot()
    }

    fn commit(&self, batch: &[Mutation]) -> StorageResult<()> {
        let started = Instant::now();
        let result = self.inner.commit(batch);
        self.stats.commit_duration.observe(started.elapsed());
        self.stats.observe_batch(batch.len());
        match &result {
            Ok(()) => {
                if self.stats.failed.load(Ordering::Relaxed) {
                    self.stats.failed.store(false, Ordering::Relaxed);
                }
                self.stats.commits_ok.fetch_add(1, Ordering::Relaxed)
            }
            Err(_) => {
                self.stats.failed.store(true, Ordering::Relaxed);
                self.stats.commits_failed.fetch_add(1, Ordering::Relaxed)
            }
        };
        result
    }

    fn commits(&self) -> Option<u64> {
        self.inner.commits()
    }

    fn checkpoint(&self) -> StorageResult<()> {
        self.inner.checkpoint()
    }
}

/// Wraps every engine; returns each shard's counters.
pub fn install(engines: &mut [Arc<dyn KvEngine>]) -> Vec<Arc<ShardStats>> {
    engines
        .iter_mut()
        .map(|engine| {
            let stats = Arc::new(ShardStats::default());
            *engine = Arc::new(MeteredEngine { inner: engine.clone(), stats: stats.clone() });
            stats
        })
        .collect()
}
