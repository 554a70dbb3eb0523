//! What the online index builds (serve/indexing.rs) publish for the metrics: written by
//! the builder on its worker's thread, read by a scrape (`ferrodir_index_*`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// The builds' state and counters.
#[derive(Debug, Default)]
pub struct IndexBuildStats {
    pub running: AtomicBool,
    /// Entries the pass in progress (or the last one) visited, and the entries the
    /// directory held when it started.
    pub visited: AtomicU64,
    pub entries: AtomicU64,
    /// Entries visited by every pass since start.
    pub indexed_total: AtomicU64,
    pub completed_total: AtomicU64,
    /// Every configured index and whether searches use it.
    pub indexes: Mutex<Vec<(String, &'static str, bool)>>,
}

impl IndexBuildStats {
    /// The pass's progress, 0 to 1 (1 when no build runs).
    pub fn progress(&self) -> f64 {
        if !self.running.load(Ordering::Relaxed) {
            return 1.0;
        }
        let all = self.entries.load(Ordering::Relaxed).max(1) as f64;
        (self.visited.load(Ordering::Relaxed) as f64 / all).min(1.0)
    }
}
