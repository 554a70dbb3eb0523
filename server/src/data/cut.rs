//! A consistent cut: one read view per shard, all showing the directory as it was at one
//! instant, taken while the server keeps serving. `ferrodir export` and `ferrodir backup`
//! read from it.
//!
//! Two things make the views agree with each other:
//!
//! - **Between structural changes.** A change of the tree's shape (promotion, container
//!   delete, Modify DN) is several shard writes made by the coordinator one after another.
//!   The cut is taken inside a coordinator handler ([`BetweenChanges`]), so none is half done.
//! - **No commit crosses the cut.** Every other write touches one shard, but a client may
//!   chain writes on different shards (add A, wait for success, add B). Views opened one
//!   after another could hold B and miss A. So each shard's engine sits behind a
//!   [`CommitGate`]: the cut pauses every gate (waiting for the commit in flight, if any),
//!   opens the views, then resumes. A write is acknowledged only after its commit returns,
//!   and a commit held at a gate returns only after the resume. So if a view holds B, B
//!   committed before the cut; A was acknowledged before B was sent, so A committed earlier
//!   still, and its shard's view holds it too. Writes pause for as long as it takes to open
//!   N read transactions (plus the commit in flight, at most one fsync).
//!
//! redb views are point-in-time snapshots, so the gates reopen at once. sled has no
//! snapshots (its "snapshot" is a live view), so on sled the cut keeps the gates paused
//! until it is dropped: writes wait for the whole export or backup; reads go on.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use actix::Addr;
use ferrodir_router::coordinator::{BetweenChanges, Coordinator};
use ferrodir_router::{Intent, IntentLog};
use ferrodir_shard::storage::{EngineKind, KvEngine, KvSnapshot, Mutation, StorageError, StorageResult};

use crate::config::Config;
use crate::data::manifest::Manifest;
use crate::data::store::Store;

/// How long a cut waits for the commits in flight to finish before it gives up. A commit
/// is one fsync; this much means the disk is stuck, and the cut must not hold writes longer.
pub const COMMIT_WAIT_MAX: Duration = Duration::from_secs(30);

/// One read view per shard, all at the same instant.
pub struct Cut {
    pub views: Vec<Box<dyn KvSnapshot>>,
    /// The intent log's pending intents at that instant, oldest first: changes a disk error
    /// cut short, which the shards show half done until recovery (at the next start)
    /// finishes or undoes them. A backup carries them so that its restore recovers them too.
    pub intents: Vec<Intent>,
    /// Held for live views (sled): commits wait until the cut is dropped.
    _paused: Option<Paused>,
}

impl Cut {
    /// The views of a data directory nobody else has open: nothing commits meanwhile.
    pub fn offline(store: &Store, data_dir: &Path) -> anyhow::Result<Self> {
        let views = store.engines.iter().map(|engine| engine.snapshot()).collect::<Result<_, _>>()?;
        let log_path = data_dir.join(crate::data::manifest::INTENT_LOG_FILE);
        let intents = if log_path.exists() {
            let log = IntentLog::open(&log_path, &store.storage).map_err(|e| anyhow::anyhow!("{e}"))?;
            log.pending().map_err(|e| anyhow::anyhow!("{e}"))?.into_iter().map(|(_, i)| i).collect()
        } else {
            Vec::new()
        };
        Ok(Self { views, intents, _paused: None })
    }

    /// The views of a serving directory, opened on the coordinator's thread between two
    /// structural changes, with every shard's commits paused.
    pub async fn online(
        coordinator: &Addr<Coordinator>,
        engines: &[Arc<dyn KvEngine>],
        gates: &[Arc<CommitGate>],
        kind: EngineKind,
    ) -> anyhow::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (engines, gates) = (engines.to_vec(), gates.to_vec());
        let open = move |log: &IntentLog| {
            let opened = (|| -> anyhow::Result<Cut> {
                let paused = Paused::all(&gates, COMMIT_WAIT_MAX)?;
                let views = engines.iter().map(|engine| engine.snapshot()).collect::<Result<_, _>>()?;
                let pending = log.pending().map_err(|e| anyhow::anyhow!("{e}"))?;
                // Only a live view needs the writes held back for as long as it is read.
                let keep = (kind == EngineKind::Sled).then_some(paused);
                Ok(Cut { views, intents: pending.into_iter().map(|(_, i)| i).collect(), _paused: keep })
            })();
            let _ = tx.send(opened);
        };
        coordinator
            .send(BetweenChanges(Box::new(open)))
            .await
            .map_err(|e| anyhow::anyhow!("the coordinator is not running: {e}"))?;
        rx.recv().map_err(|_| anyhow::anyhow!("the coordinator dropped the cut"))?
    }
}

/// Opens a data directory for an offline cut, refusing one that does not exist (opening
/// would create it, and a backup of nothing would look like success).
pub fn open_offline(config: &Config, data_dir: &Path) -> anyhow::Result<Store> {
    if Manifest::load(data_dir)?.is_none() {
        anyhow::bail!(
            "{} is not a ferrodir data directory (no {})",
            data_dir.display(),
            crate::data::manifest::FILE_NAME
        );
    }
    Store::open(config, data_dir)
}

/// Lets a cut stop one shard's commits for a moment. The shard's commit thread passes
/// through it around every engine commit (see [`GatedEngine`]).
#[derive(Default)]
pub struct CommitGate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    committing: bool,
    /// How many cuts hold the gate paused; commits start only at zero.
    paused: usize,
}

impl CommitGate {
    fn enter(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while state.paused > 0 {
            state = self.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        state.committing = true;
    }

    fn leave(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.committing = false;
        self.changed.notify_all();
    }

    /// Stops new commits and waits until the one in flight (if any) has returned; gives up
    /// (and lets commits go on) at `deadline`.
    fn pause(&self, deadline: Instant) -> StorageResult<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.paused += 1;
        while state.committing {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(state);
                self.resume();
                return Err(StorageError(format!(
                    "a commit did not finish within {}s; no consistent cut taken",
                    COMMIT_WAIT_MAX.as_secs()
                )));
            }
            state = self.changed.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        Ok(())
    }

    fn resume(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.paused = state.paused.saturating_sub(1);
        self.changed.notify_all();
    }
}

/// Every shard's gate, paused; dropping it lets commits go on.
pub struct Paused(Vec<Arc<CommitGate>>);

impl Paused {
    /// Pauses the gates one by one. A commit stopped at an earlier gate is not acknowledged
    /// before the resume, so pausing them in turn (not all at once) still gives one instant.
    fn all(gates: &[Arc<CommitGate>], wait_max: Duration) -> StorageResult<Self> {
        let deadline = Instant::now() + wait_max;
        let mut held = Paused(Vec::with_capacity(gates.len()));
        for gate in gates {
            gate.pause(deadline)?;
            held.0.push(gate.clone());
        }
        Ok(held)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        for gate in &self.0 {
            gate.resume();
        }
    }
}

/// An engine whose commits pass through a [`CommitGate`]; reads go straight through. The
/// trait's provided methods are left to their defaults, which write through `commit` and
/// so through the gate too.
pub struct GatedEngine {
    inner: Arc<dyn KvEngine>,
    gate: Arc<CommitGate>,
}

impl KvEngine for GatedEngine {
    fn snapshot(&self) -> StorageResult<Box<dyn KvSnapshot>> {
        self.inner.snapshot()
    }

    fn commit(&self, batch: &[Mutation]) -> StorageResult<()> {
        self.gate.enter();
        // Left on drop, so that even a panicking engine can't keep a cut waiting.
        let _inside = Inside(&self.gate);
        self.inner.commit(batch)
    }

    fn commits(&self) -> Option<u64> {
        self.inner.commits()
    }

    fn checkpoint(&self) -> StorageResult<()> {
        self.inner.checkpoint()
    }
}

/// A commit between `enter` and `leave`.
struct Inside<'a>(&'a CommitGate);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Puts every engine behind a gate of its own; returns the gates, in shard order. Called
/// once when serving starts, before anything else holds the engines.
pub fn install_gates(engines: &mut [Arc<dyn KvEngine>]) -> Vec<Arc<CommitGate>> {
    engines
        .iter_mut()
        .map(|engine| {
            let gate = Arc::new(CommitGate::default());
            *engine = Arc::new(GatedEngine { inner: engine.clone(), gate: gate.clone() });
            gate
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paused_gate_holds_commits_until_resumed() {
        let gate = Arc::new(CommitGate::default());
        let paused = Paused::all(std::slice::from_ref(&gate), Duration::from_secs(1)).unwrap();
        let committed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The writer's thread id, once it is about to enter: 0 until then.
        let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let (g, c, t) = (gate.clone(), committed.clone(), tid.clone());
        let writer = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            t.store(unsafe { libc::gettid() }, std::sync::atomic::Ordering::SeqCst);
            g.enter();
            c.store(true, std::sync::atomic::Ordering::SeqCst);
            g.leave();
        });
        // Wait until the writer sleeps at the gate (its only blocking point: the gate's lock
        // is free) or, were the gate broken, has committed: not for a while.
        let asleep = || {
            let tid = tid.load(std::sync::atomic::Ordering::SeqCst);
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
            // The state follows the command name's closing parenthesis.
            tid != 0 && stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('S'))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !asleep() && !committed.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer neither slept at the gate nor committed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!committed.load(std::sync::atomic::Ordering::SeqCst), "a commit passed a paused gate");
        drop(paused);
        writer.join().unwrap();
        assert!(committed.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn a_pause_waits_for_the_commit_in_flight_and_gives_up_in_time() {
        let gate = Arc::new(CommitGate::default());
        gate.enter();
        assert!(Paused::all(std::slice::from_ref(&gate), Duration::from_millis(50)).is_err());
        // Giving up resumed the gate: the next commit is not held.
        gate.leave();
        gate.enter();
        gate.leave();
        assert!(Paused::all(&[gate], Duration::from_millis(50)).is_ok());
    }
}
