//! The search pool: the threads long searches run on (`shard::scan`), apart from the worker
//! threads that host the shard actors (the writers) and the connections.
//!
//! A multi-threaded tokio runtime: each scan is a task that yields after every slice of
//! work, so concurrent scans share the threads in turn. The threads run at a lower priority
//! (`search_threads_nice`), so when the CPUs are busy the kernel runs a lookup, a write's
//! staging or a commit's replies before the next slice of a scan; when they are idle, scans
//! use them all. Why this and not cooperative yielding on the worker threads:
//! docs/DECISIONS.md, "Where scans run".

use std::sync::Arc;

use anyhow::Context as _;
use ferrodir_shard::{ScanLimits, ScanPool, ScanSource};

use crate::config::Config;
use crate::data::store::Store;

/// The pool's runtime and the handle every worker spawns scans with.
pub struct SearchPool {
    runtime: Option<tokio::runtime::Runtime>,
    pub scans: ScanPool,
}

impl SearchPool {
    pub fn start(config: &Config, store: &Store) -> anyhow::Result<Self> {
        let limits = ScanLimits {
            slice_us: config.limits.search_slice_us.max(1),
            snapshot_entries_max: config.limits.search_snapshot_entries_max.max(1),
            snapshot_age_ms: config.limits.search_snapshot_age_ms,
        };
        let sources = (0..store.engines.len())
            .map(|index| {
                // No entry cache: see shard::scan.
                let info = ferrodir_shard::ShardInfo { entry_cache: None, ..store.shard_info(index, config) };
                Arc::new(ScanSource { info, engine: store.engines[index].clone(), limits })
            })
            .collect();
        let runtime = match config.search_scans.as_str() {
            "pool" => {
                let nice = config.search_threads_nice.clamp(0, 19);
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(config.search_thread_count())
                    .thread_name("search")
                    .on_thread_start(move || crate::serve::priority::lower_this_thread(nice, "search"))
                    .build()
                    .context("cannot start the search threads")?;
                Some(runtime)
            }
            "worker" => None,
            other => anyhow::bail!("unknown search_scans {other:?}: use \"pool\" or \"worker\""),
        };
        let handle = runtime.as_ref().map(|r| r.handle().clone());
        Ok(Self { runtime, scans: ScanPool { runtime: handle, sources } })
    }

    /// Stops the threads without waiting for scans in flight (their connections are gone).
    pub fn shutdown(mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
