//! The replication provider's families: the syncrepl consumers it serves
//! (router's SyncreplStats, read at scrape time) and its contextCSN.

use ferrodir_router::SyncreplSnapshot;
use ferrodir_shard::Hub;

use super::family::Family;

pub fn families(now: &SyncreplSnapshot, hub: &Hub) -> Vec<prometheus::proto::MetricFamily> {
    let mut consumers = Family::gauge(
        "ferrodir_syncrepl_consumers",
        "Syncrepl consumers served now (searches with the Sync Request control), by phase.",
    );
    consumers.value(&[("mode", "refresh")], now.refreshing as f64);
    consumers.value(&[("mode", "persist")], now.persisting as f64);
    let mut lag = Family::gauge(
        "ferrodir_syncrepl_persist_lag_seconds",
        "The slowest persisting consumer's lag: now minus the CSN time of its oldest committed change not yet sent (0: all caught up).",
    );
    lag.value(&[], now.persist_lag_seconds);
    let mut required = Family::counter(
        "ferrodir_syncrepl_refresh_required_total",
        "Persisting consumers dropped for falling behind, with e-syncRefreshRequired (4096).",
    );
    required.value(&[], now.refresh_required_total as f64);
    let mut refreshes = Family::counter(
        "ferrodir_syncrepl_refreshes_total",
        "Refreshes served, by the phase that ended them.",
    );
    refreshes.value(&[("phase", "delete")], now.refreshes_delete_total as f64);
    refreshes.value(&[("phase", "present")], now.refreshes_present_total as f64);
    let mut context = Family::gauge(
        "ferrodir_syncrepl_context_csn_seconds",
        "contextCSN (the committed low-watermark across shards) as Unix time; 0 before the first write.",
    );
    let micros = hub.watermark();
    context.value(&[], micros as f64 / 1e6);
    vec![consumers.done(), lag.done(), required.done(), refreshes.done(), context.done()]
}
