//! systemd integration (`Type=notify`, deploy/ferrodir.service): READY=1 once every shard
//! is open and every listener bound, STOPPING=1 when shutdown begins, RELOADING=1 around
//! a SIGHUP's reload (runtime.rs), and, with `WatchdogSec=`, a
//! keep-alive sent only after the coordinator and every shard actor have answered a ping:
//! a wedged worker thread or coordinator stops the pings and systemd restarts the service.
//! Without `NOTIFY_SOCKET` (not run by systemd) every call is a no-op.

use std::time::Duration;

use actix::Addr;
use ferrodir_router::coordinator::{Coordinator, Ping as CoordinatorPing};
use ferrodir_shard::{Ping as ShardPing, ShardActor};
use sd_notify::NotifyState;

pub fn ready() {
    let _ = sd_notify::notify(false, &[NotifyState::Ready]);
}

pub fn reloading() {
    let _ = sd_notify::notify(false, &[NotifyState::Reloading]);
}

pub fn stopping() {
    let _ = sd_notify::notify(false, &[NotifyState::Stopping]);
}

/// With `WatchdogSec=` set, pings every half interval; returns at once otherwise. Spawned
/// on the main thread's runtime.
pub async fn watchdog(coordinator: Addr<Coordinator>, shards: Vec<Addr<ShardActor>>) {
    let mut usec = 0u64;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return;
    }
    let period = Duration::from_micros(usec / 2);
    let mut ticks = tokio::time::interval(period);
    loop {
        ticks.tick().await;
        // Each ping may take at most the period; a late answer is a missed keep-alive.
        let alive = tokio::time::timeout(period, async {
            coordinator.send(CoordinatorPing).await.is_ok()
                && futures_all(shards.iter().map(|shard| shard.send(ShardPing))).await
        })
        .await
        .unwrap_or(false);
        if alive {
            let _ = sd_notify::notify(false, &[NotifyState::Watchdog]);
        } else {
            tracing::error!("watchdog: the coordinator or a shard did not answer; no keep-alive sent");
        }
    }
}

async fn futures_all<F, T, E>(pings: impl Iterator<Item = F>) -> bool
where
    F: std::future::Future<Output = Result<T, E>>,
{
    for ping in pings {
        if ping.await.is_err() {
            return false;
        }
    }
    true
}
