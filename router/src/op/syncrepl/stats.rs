//! What the metrics endpoint shows of the syncrepl consumers this provider serves: how
//! many are refreshing and how many persisting, how far the slowest persisting one lags
//! behind in CSN time, how many refreshes took a delete or a present phase, and how many
//! consumers were dropped for falling behind (e-syncRefreshRequired).
//!
//! Consumers are few (replicas, not clients), so each one registers its state in the
//! provider's list under a mutex when its search starts and leaves it when the search ends;
//! the search updates its own atomics without the lock, and a scrape walks the list.
//! Nothing here is on the path of an ordinary operation. One [`ProviderStats`] per
//! directory (`DirectoryConfig::syncrepl`), shared by its workers and read by the metrics
//! endpoint.

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

/// The provider's consumers and counters.
#[derive(Debug, Default)]
pub struct ProviderStats {
    consumers: Mutex<Vec<Weak<ConsumerState>>>,
    refresh_required: AtomicU64,
    refreshes_delete: AtomicU64,
    refreshes_present: AtomicU64,
}

/// Held by a sync search for its whole run: it counts as a consumer while held.
pub struct Registration(Arc<ConsumerState>);

impl Registration {
    /// The refresh is over: persisting now.
    pub fn persisting(&self) {
        self.0.persisting.store(true, Ordering::Relaxed);
    }

    /// The oldest change not yet handed to the connection (a clock tick; 0: none).
    pub fn unsent_since(&self, micros: u64) {
        self.0.oldest_unsent.store(micros, Ordering::Relaxed);
    }
}

impl ProviderStats {
    /// A sync search starts: it counts as a consumer while the registration is held.
    pub fn register(&self) -> Registration {
        let state = Arc::new(ConsumerState::default());
        let mut list = self.consumers.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&state));
        Registration(state)
    }

    /// A refresh ended: with a delete phase (true) or a present phase.
    pub fn refreshed(&self, delete_phase: bool) {
        let counter = if delete_phase { &self.refreshes_delete } else { &self.refreshes_present };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A persisting consumer was dropped with e-syncRefreshRequired.
    pub fn refresh_required(&self) {
        self.refresh_required.fetch_add(1, Ordering::Relaxed);
    }

    /// What a scrape reads.
    pub fn snapshot(&self) -> Snapshot {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0);
        let mut out = Snapshot {
            refresh_required_total: self.refresh_required.load(Ordering::Relaxed),
            refreshes_delete_total: self.refreshes_delete.load(Ordering::Relaxed),
            refreshes_present_total: self.refreshes_present.load(Ordering::Relaxed),
            ..Default::default()
        };
        let list = self.consumers.lock().unwrap_or_else(|p| p.into_inner());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumers_are_counted_while_registered() {
        let stats = ProviderStats::default();
        let a = stats.register();
        let b = stats.register();
        b.persisting();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64;
        b.unsent_since(now - 2_000_000);
        let during = stats.snapshot();
        assert_eq!((during.refreshing, during.persisting), (1, 1));
        assert!(during.persist_lag_seconds >= 2.0);
        drop((a, b));
        stats.refresh_required();
        stats.refreshed(true);
        let after = stats.snapshot();
        assert_eq!((after.refreshing, after.persisting, after.persist_lag_seconds), (0, 0, 0.0));
        assert_eq!(
            (after.refresh_required_total, after.refreshes_delete_total, after.refreshes_present_total),
            (1, 1, 0)
        );
    }

    #[test]
    fn two_providers_count_apart() {
        let (one, two) = (ProviderStats::default(), ProviderStats::default());
        let _held = one.register();
        assert_eq!(one.snapshot().refreshing, 1);
        assert_eq!(two.snapshot().refreshing, 0);
    }
}
