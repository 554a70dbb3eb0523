//! What the metrics endpoint shows of the syncrepl consumers this provider serves: how
//! many are refreshing and how many persisting, how far the slowest persisting one lags
//! behind in CSN time, how many refreshes took a delete or a present phase, and how many
//! consumers were dropped for falling behind (e-syncRefreshRequired).
//!
//! Consumers are few (replicas, not clients), so each one registers its state in one
//! process-wide list under a mutex when its search starts and leaves it when the search
//! ends; the search updates its own atomics without the lock, and a scrape walks the list.
//! Nothing here is on the path of an ordinary operation.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

/// One consumer's search.
#[derive(Debug, Default)]
pub struct ConsumerState {
    persisting: AtomicBool,
    /// The clock tick (CSN time) of the oldest change committed and not yet handed to the
    /// connection; 0 when caught up.
    oldest_unsent: AtomicU64,
}

static CONSUMERS: Mutex<Vec<Weak<ConsumerState>>> = Mutex::new(Vec::new());
static REFRESH_REQUIRED: AtomicU64 = AtomicU64::new(0);
static REFRESHES_DELETE: AtomicU64 = AtomicU64::new(0);
static REFRESHES_PRESENT: AtomicU64 = AtomicU64::new(0);

/// Held by a sync search for its whole run: it counts as a consumer while held.
pub struct Registration(Arc<ConsumerState>);

impl Registration {
    pub fn new() -> Self {
        let state = Arc::new(ConsumerState::default());
        let mut list = CONSUMERS.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&state));
        Self(state)
    }

    /// The refresh is over: persisting now.
    pub fn persisting(&self) {
        self.0.persisting.store(true, Ordering::Relaxed);
    }

    /// The oldest change not yet handed to the connection (a clock tick; 0: none).
    pub fn unsent_since(&self, micros: u64) {
        self.0.oldest_unsent.store(micros, Ordering::Relaxed);
    }
}

impl Default for Registration {
    fn default() -> Self {
        Self::new()
    }
}

/// A refresh ended: with a delete phase (true) or a present phase.
pub fn refreshed(delete_phase: bool) {
    let counter = if delete_phase { &REFRESHES_DELETE } else { &REFRESHES_PRESENT };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A persisting consumer was dropped with e-syncRefreshRequired.
pub fn refresh_required() {
    REFRESH_REQUIRED.fetch_add(1, Ordering::Relaxed);
}

/// What a scrape reads.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Snapshot {
    pub refreshing: u64,
    pub persisting: u64,
    /// The slowest persisting consumer's lag: now minus the CSN time of its oldest unsent
    /// change (0 when every one is caught up).
    pub persist_lag_seconds: f64,
    pub refresh_required_total: u64,
    pub refreshes_delete_total: u64,
    pub refreshes_present_total: u64,
}

pub fn snapshot() -> Snapshot {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0);
    let mut out = Snapshot {
        refresh_required_total: REFRESH_REQUIRED.load(Ordering::Relaxed),
        refreshes_delete_total: REFRESHES_DELETE.load(Ordering::Relaxed),
        refreshes_present_total: REFRESHES_PRESENT.load(Ordering::Relaxed),
        ..Default::default()
    };
    let list = CONSUMERS.lock().unwrap_or_else(|p| p.into_inner());
    for state in list.iter().filter_map(Weak::upgrade) {
        if state.persisting.load(Ordering::Relaxed) {
            out.persisting += 1;
            let since = state.oldest_unsent.load(Ordering::Relaxed);
            if since > 0 {
                let lag = now.saturating_sub(since) as f64 / 1e6;
                out.persist_lag_seconds = out.persist_lag_seconds.max(lag);
            }
        } else {
            out.refreshing += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumers_are_counted_while_registered() {
        let before = snapshot();
        let a = Registration::new();
        let b = Registration::new();
        b.persisting();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64;
        b.unsent_since(now - 2_000_000);
        let during = snapshot();
        // Other tests may register consumers of their own at the same time: at least ours.
        assert!(during.refreshing > before.refreshing || during.refreshing >= 1);
        assert!(during.persisting >= 1);
        assert!(during.persist_lag_seconds >= 2.0);
        drop((a, b));
        refresh_required();
        assert!(snapshot().refresh_required_total > before.refresh_required_total);
    }
}
