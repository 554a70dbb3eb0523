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
    let mut families = vec![consumers.done(), lag.done(), required.done(), refreshes.done(), context.done()];
    if hub.multi_provider() {
        // A mesh node: the newest CSN it holds of every server id (its own: the watermark).
        let mut per_sid = Family::gauge(
            "ferrodir_replication_sid_csn_seconds",
            "The newest CSN this node holds from each server id of the mesh, as Unix time.",
        );
        for csn in hub.context_csns() {
            let (Some(sid), Some(micros)) =
                (ferrodir_proto::message::sync::csn_sid(&csn), ferrodir_shard::micros_of_csn(&csn))
            else {
                continue;
            };
            per_sid.value(&[("sid", &sid.to_string())], micros as f64 / 1e6);
        }
        families.push(per_sid.done());
    }
    families
}
