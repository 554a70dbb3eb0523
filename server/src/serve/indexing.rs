//! Building indices while the server serves: after a reload changed `index`, and at start
//! for a configured index no shard finished (a new one, or a build a stop cut short).
//!
//! One builder per server, driven from one worker's thread. A pass takes the configuration
//! the file asks for and, on every shard at once, runs the writer's steps
//! (`shard::write::indexing` has them and why they are in that order): stop maintaining
//! the indices to build, clear whatever keys of them and of removed indices are left, then
//! maintain them and walk every entry, a bounded step at a time, each step a write in the
//! shard's next group commit. Once every shard is through, each is marked ready and the
//! workers get a configuration whose searches use them. A reload during a pass starts a
//! new pass at the next step, from the new configuration.
//!
//! Until then searches go on as before: a filter on an index being built is unindexed
//! (and `unindexed_search = "refuse"` refuses it). Removed indices stop being used at once.
//! Progress goes to the log every few seconds and to the metrics (`IndexBuildStats`).

use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrodir_router::Worker;
use ferrodir_shard::{IndexConfig, IndexKind, IndexWork, ShardResult, WriteOp, WriteOutcome};

use crate::metrics::index_builds::IndexBuildStats;
use crate::metrics::Metrics;

/// Entries a build step indexes: a step is one write in a group commit, a few ms at most.
const BUILD_STEP_ENTRIES: usize = 256;
/// Keys a clearing step deletes.
const CLEAR_STEP_KEYS: usize = 4096;
/// How often a running build logs its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How long a pass that failed (a shard refusing writes) waits before it starts again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// One index: its attribute's canonical name and its kind.
type Index = (String, IndexKind);

struct State {
    /// The indices the configuration asks for (its searchable set unused here).
    target: Arc<IndexConfig>,
    /// Complete on every shard: what searches may use.
    ready: BTreeSet<Index>,
    /// Removed from the configuration (or marked by an earlier one) with keys possibly left
    /// on disk: the next pass clears them.
    stale: BTreeSet<Index>,
    /// Moved on by every new target: a pass of an older one stops at its next step.
    generation: u64,
    running: bool,
}

pub struct IndexBuilder {
    state: Mutex<State>,
    stats: Arc<IndexBuildStats>,
}

/// What one pass does: its generation, the target, the indices it builds and those it clears.
struct Pass {
    generation: u64,
    target: Arc<IndexConfig>,
    build: BTreeSet<Index>,
    clear: BTreeSet<Index>,
}

impl IndexBuilder {
    /// `target`: the indices configured at start, with those ready on every shard
    /// searchable; `stale`: indices marked on some shard but no longer configured.
    pub fn new(target: &IndexConfig, stale: BTreeSet<Index>, stats: Arc<IndexBuildStats>) -> Self {
        let ready = target.searchable();
        let builder = Self {
            state: Mutex::new(State {
                target: Arc::new(target.clone()),
                ready,
                stale,
                generation: 0,
                running: false,
            }),
            stats,
        };
        builder.publish_stats();
        builder
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The configuration searches use now: the target, with the indices complete everywhere.
    pub fn searchable(&self) -> IndexConfig {
        let state = self.state();
        let mut config = (*state.target).clone();
        config.set_searchable(state.ready.iter().cloned().collect());
        config
    }

    /// A reload's indices: those removed stop being searchable now and are cleared by the
    /// next pass, those added are built by it. Whether a pass has anything to do.
    pub fn retarget(&self, target: IndexConfig) -> bool {
        let mut state = self.state();
        let configured = target.configured();
        for removed in state.target.configured().difference(&configured) {
            state.stale.insert(removed.clone());
        }
        state.ready.retain(|index| configured.contains(index));
        state.stale.retain(|index| !configured.contains(index));
        let changed = !state.target.same_indices(&target);
        state.target = Arc::new(target);
        if changed {
            state.generation += 1;
        }
        drop(state);
        self.publish_stats();
        self.has_work()
    }

    /// Whether the shards need a pass: an index to build or keys to clear.
    pub fn has_work(&self) -> bool {
        let state = self.state();
        !state.stale.is_empty() || state.target.configured().iter().any(|i| !state.ready.contains(i))
    }

    /// Claims the running slot; false when a pass loop already runs (it picks up the
    /// new target itself).
    pub fn claim(&self) -> bool {
        let mut state = self.state();
        !std::mem::replace(&mut state.running, true)
    }

    fn next_pass(&self) -> Option<Pass> {
        let mut state = self.state();
        let build: BTreeSet<Index> =
            state.target.configured().into_iter().filter(|i| !state.ready.contains(i)).collect();
        if build.is_empty() && state.stale.is_empty() {
            state.running = false;
            return None;
        }
        let clear = build.union(&state.stale).cloned().collect();
        Some(Pass { generation: state.generation, target: state.target.clone(), build, clear })
    }

    fn current(&self, generation: u64) -> bool {
        self.state().generation == generation
    }

    /// A pass finished on every shard: its indices are ready, its stale ones gone. False
    /// when the target moved on meanwhile (the next pass starts over).
    fn finished(&self, pass: &Pass) -> bool {
        let mut state = self.state();
        if state.generation != pass.generation {
            return false;
        }
        state.ready.extend(pass.build.iter().cloned());
        for cleared in &pass.clear {
            state.stale.remove(cleared);
        }
        drop(state);
        self.publish_stats();
        true
    }

    fn publish_stats(&self) {
        let state = self.state();
        let list = state
            .target
            .configured()
            .into_iter()
            .map(|index| {
                let ready = state.ready.contains(&index);
                (index.0, index.1.name(), ready)
            })
            .collect();
        *self.stats.indexes.lock().unwrap_or_else(|p| p.into_inner()) = list;
    }
}

/// Names a set of indices for the log: `cn sub, uidNumber ord`.
fn names(indexes: &BTreeSet<Index>) -> String {
    indexes.iter().map(|(attr, kind)| format!("{attr} {}", kind.name())).collect::<Vec<_>>().join(", ")
}

/// Runs passes until the builder has nothing left to do, on `worker`'s thread; `done` is
/// called after each pass that completed (the reloader hands the workers the configuration
/// whose searches use the new indices).
pub async fn run(builder: Arc<IndexBuilder>, worker: Rc<Worker>, metrics: Arc<Metrics>, done: impl Fn()) {
    while let Some(pass) = builder.next_pass() {
        if worker.is_stopping() {
            return;
        }
        let started = Instant::now();
        let entries = metrics.entries_total();
        builder.stats.visited.store(0, Ordering::Relaxed);
        builder.stats.entries.store(entries, Ordering::Relaxed);
        builder.stats.running.store(true, Ordering::Relaxed);
        if !pass.build.is_empty() {
            tracing::info!(
                indexes = names(&pass.build),
                entries,
                "building indexes online; searches use them once every shard is done"
            );
        }
        match run_pass(&builder, &worker, &pass).await {
            Ok(true) => {
                if builder.finished(&pass) {
                    builder.stats.completed_total.fetch_add(1, Ordering::Relaxed);
                    done();
                    if !pass.build.is_empty() {
                        tracing::info!(
                            indexes = names(&pass.build),
                            entries = builder.stats.visited.load(Ordering::Relaxed),
                            seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
                            "indexes built: searches use them now"
                        );
                    }
                    if !pass.clear.is_subset(&pass.build) {
                        let removed = pass.clear.difference(&pass.build).cloned().collect();
                        tracing::info!(indexes = names(&removed), "removed indexes' keys cleared");
                    }
                }
            }
            Ok(false) => tracing::info!("index configuration changed during a build: starting over"),
            Err(e) => {
                tracing::warn!(error = %e, "index build failed; trying again in {}s", RETRY_AFTER.as_secs());
                actix_rt::time::sleep(RETRY_AFTER).await;
            }
        }
        builder.stats.running.store(false, Ordering::Relaxed);
    }
}

/// Every shard's steps, the shards at once. Ok(false): the target moved on, stopped early.
async fn run_pass(builder: &Arc<IndexBuilder>, worker: &Rc<Worker>, pass: &Pass) -> ShardResult<bool> {
    let progress = Rc::new(std::cell::Cell::new(Instant::now()));
    let shards: Vec<_> = (0..worker.shard_count())
        .map(|shard| {
            let (builder, worker, progress) = (builder.clone(), worker.clone(), progress.clone());
            let steps = Steps {
                shard,
                generation: pass.generation,
                without: Arc::new(pass.target.restricted(|a, k| !pass.build.contains(&(a.to_string(), k)))),
                target: pass.target.clone(),
                only: Arc::new(pass.target.restricted(|a, k| pass.build.contains(&(a.to_string(), k)))),
                build: pass.build.iter().cloned().collect(),
                clear: pass.clear.iter().cloned().collect(),
            };
            actix_rt::spawn(async move { steps.run(&builder, &worker, &progress).await })
        })
        .collect();
    let mut outcome = Ok(true);
    for handle in shards {
        let result =
            handle.await.unwrap_or_else(|e| Err(ferrodir_shard::ShardError::Unavailable(e.to_string())));
        match (&outcome, result) {
            (Ok(true), other) => outcome = other,
            (Ok(false), Err(e)) => outcome = Err(e),
            _ => {}
        }
    }
    if outcome.as_ref().is_ok_and(|all| *all) {
        // Every shard is through: only now does any shard say its index is complete.
        for shard in 0..worker.shard_count() {
            let mark = IndexWork::Mark { ready: pass.build.iter().cloned().collect() };
            worker.write_to_shard(shard, WriteOp::Index(mark)).await?;
        }
    }
    outcome
}

/// One shard's part of a pass.
struct Steps {
    shard: usize,
    generation: u64,
    /// The target without the indices being built, the target, and only those.
    without: Arc<IndexConfig>,
    target: Arc<IndexConfig>,
    only: Arc<IndexConfig>,
    build: Vec<Index>,
    clear: Vec<Index>,
}

impl Steps {
    async fn run(
        self,
        builder: &IndexBuilder,
        worker: &Worker,
        progress: &std::cell::Cell<Instant>,
    ) -> ShardResult<bool> {
        let shard = self.shard;
        let step = |work: IndexWork| worker.write_to_shard(shard, WriteOp::Index(work));
        step(IndexWork::Configure { indexes: self.without.clone(), unmark: self.clear.clone() }).await?;
        for (attr, kind) in &self.clear {
            loop {
                if !builder.current(self.generation) || worker.is_stopping() {
                    return Ok(false);
                }
                let work = IndexWork::Clear { attr: attr.clone(), kind: *kind, limit: CLEAR_STEP_KEYS };
                if let WriteOutcome::Progress { done: 0, .. } = step(work).await? {
                    break;
                }
            }
        }
        step(IndexWork::Configure { indexes: self.target.clone(), unmark: Vec::new() }).await?;
        if self.build.is_empty() {
            return Ok(true);
        }
        let mut after = None;
        loop {
            if !builder.current(self.generation) || worker.is_stopping() {
                return Ok(false);
            }
            let work = IndexWork::Build { indexes: self.only.clone(), after, limit: BUILD_STEP_ENTRIES };
            let WriteOutcome::Progress { done, next } = step(work).await? else { return Ok(false) };
            let stats = &builder.stats;
            let visited = stats.visited.fetch_add(done as u64, Ordering::Relaxed) + done as u64;
            stats.indexed_total.fetch_add(done as u64, Ordering::Relaxed);
            if progress.get().elapsed() >= PROGRESS_EVERY {
                progress.set(Instant::now());
                let entries = stats.entries.load(Ordering::Relaxed);
                tracing::info!(
                    visited,
                    entries,
                    percent = format!("{:.0}", stats.progress() * 100.0),
                    "building indexes"
                );
            }
            match next {
                Some(id) => after = Some(id),
                None => return Ok(true),
            }
        }
    }
}
