//! What each consumer reports while it runs, for the metrics endpoint, /readyz and
//! cn=Monitor. One writer per consumer (its task); readers take atomics or a short lock.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use super::settings::Replication;

/// `ferrodir_replication_consumer_state`'s values.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    Connecting = 0,
    Refreshing = 1,
    Persisting = 2,
    /// refreshOnly, between two refreshes.
    Idle = 3,
    Retrying = 4,
}

impl State {
    /// cn=Monitor's olmSRSyncPhase, slapd's words where slapd has one.
    fn phase(self) -> &'static str {
        match self {
            State::Connecting => "Connecting",
            State::Refreshing => "Refresh",
            State::Persisting => "Persist",
            State::Idle => "Idle",
            State::Retrying => "Retrying",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => State::Refreshing,
            2 => State::Persisting,
            3 => State::Idle,
            4 => State::Retrying,
            _ => State::Connecting,
        }
    }
}

/// `ferrodir_replication_applied_total{kind}`.
#[derive(Copy, Clone, Debug)]
pub enum Applied {
    Add = 0,
    Modify = 1,
    Delete = 2,
    Present = 3,
}

const APPLIED_NAMES: [&str; 4] = ["add", "modify", "delete", "present"];

pub struct Status {
    pub rid: u32,
    pub provider: String,
    pub search_base: String,
    pub persist: bool,
    /// One consumer of a mesh node (`multi_provider`): ready once its first refresh is
    /// done, and still ready while its peer is away (`is_ready`).
    mesh: bool,
    state: AtomicU8,
    /// The first refresh finished (refreshAndPersist: and the consumer is persisting).
    ready: AtomicBool,
    /// Nothing from the provider waits to be applied (persist only).
    caught_up: AtomicBool,
    /// The time in the newest entryCSN applied, in microseconds since the epoch.
    newest_csn_micros: AtomicU64,
    applied: [AtomicU64; 4],
    /// Multi-provider conflicts this consumer resolved, by `mesh::Conflict`.
    conflicts: [AtomicU64; 5],
    /// Unix seconds of the last connect and of the last message (0: never).
    last_connect_s: AtomicU64,
    last_contact_s: AtomicU64,
    next_connect_s: AtomicU64,
    cookie_received: Mutex<String>,
    cookie_sent: Mutex<String>,
    connection: Mutex<String>,
}

impl Status {
    fn new(settings: &Replication, mesh: bool) -> Self {
        Self {
            rid: settings.rid,
            provider: settings.provider.clone(),
            search_base: settings.search_base.clone(),
            persist: settings.persist(),
            mesh,
            state: AtomicU8::new(State::Connecting as u8),
            ready: AtomicBool::new(false),
            caught_up: AtomicBool::new(false),
            newest_csn_micros: AtomicU64::new(0),
            applied: Default::default(),
            conflicts: Default::default(),
            last_connect_s: AtomicU64::new(0),
            last_contact_s: AtomicU64::new(0),
            next_connect_s: AtomicU64::new(0),
            cookie_received: Mutex::new(String::new()),
            cookie_sent: Mutex::new(String::new()),
            connection: Mutex::new(String::new()),
        }
    }

    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Relaxed))
    }

    pub fn set_state(&self, state: State) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    pub fn set_caught_up(&self, caught_up: bool) {
        self.caught_up.store(caught_up, Ordering::Relaxed);
    }

    pub fn count(&self, kind: Applied) {
        if let Some(c) = self.applied.get(kind as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn conflict(&self, kind: super::mesh::Conflict) {
        if let Some(c) = self.conflicts.get(kind as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An entry with this entryCSN was applied.
    pub fn applied_csn(&self, csn: &str) {
        if let Some(micros) = ferrodir_shard::micros_of_csn(csn) {
            self.newest_csn_micros.fetch_max(micros, Ordering::Relaxed);
        }
    }

    pub fn connected(&self, local: String) {
        self.last_connect_s.store(unix_now_s(), Ordering::Relaxed);
        *lock(&self.connection) = local;
    }

    pub fn contact(&self) {
        self.last_contact_s.store(unix_now_s(), Ordering::Relaxed);
    }

    pub fn next_connect_in(&self, seconds: u64) {
        self.next_connect_s.store(unix_now_s() + seconds, Ordering::Relaxed);
    }

    pub fn cookie_received(&self, cookie: &[u8]) {
        *lock(&self.cookie_received) = String::from_utf8_lossy(cookie).into_owned();
    }

    pub fn cookie_sent(&self, cookie: &[u8]) {
        *lock(&self.cookie_sent) = String::from_utf8_lossy(cookie).into_owned();
    }

    /// Seconds behind the provider: 0 while persisting with nothing waiting; otherwise now
    /// minus the time in the newest CSN applied (0 before the first).
    pub fn lag_seconds(&self) -> f64 {
        if self.state() == State::Persisting && self.caught_up.load(Ordering::Relaxed) {
            return 0.0;
        }
        let newest = self.newest_csn_micros.load(Ordering::Relaxed);
        if newest == 0 {
            return 0.0;
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        now.saturating_sub(newest) as f64 / 1e6
    }

    /// Ready for reads: the first refresh done, and persisting (refreshAndPersist). A mesh
    /// node's consumer stays ready once its first refresh since the start is done: when a
    /// peer goes away, every other node's consumer of it reconnects, and taking all of them
    /// out of the write Service would turn one node's failure into the whole mesh's.
    pub fn is_ready(&self) -> bool {
        let ready = self.ready.load(Ordering::Relaxed);
        if self.mesh {
            return ready;
        }
        ready && (!self.persist || self.state() == State::Persisting)
    }

    /// cn=Monitor's attributes for this consumer (slapd's olmSyncReplInstance).
    pub fn monitor_attributes(&self) -> Vec<(String, Vec<String>)> {
        let time = |s: u64| {
            if s == 0 {
                Vec::new()
            } else {
                vec![format!("{}Z", ferrodir_shard::civil_time(s))]
            }
        };
        let text = |m: &Mutex<String>| {
            let v = lock(m).clone();
            if v.is_empty() {
                Vec::new()
            } else {
                vec![v]
            }
        };
        let mut attributes: Vec<(String, Vec<String>)> = vec![
            ("olmSRProviderURIList".into(), vec![self.provider.clone()]),
            ("olmSRConnection".into(), text(&self.connection)),
            ("olmSRSyncPhase".into(), vec![self.state().phase().to_string()]),
            ("olmSRNextConnect".into(), time(self.next_connect_s.load(Ordering::Relaxed))),
            ("olmSRLastConnect".into(), time(self.last_connect_s.load(Ordering::Relaxed))),
            ("olmSRLastContact".into(), time(self.last_contact_s.load(Ordering::Relaxed))),
            ("olmSRLastCookieRcvd".into(), text(&self.cookie_received)),
            ("olmSRLastCookieSent".into(), text(&self.cookie_sent)),
        ];
        if self.mesh {
            // A mesh peer's lag and the conflicts met applying its changes (its CSN per
            // server id is olmSRLastCookieRcvd's; this node's own, the suffix's contextCSN).
            let conflicts: Vec<String> = super::mesh::CONFLICT_NAMES
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    format!("{name}={}", self.conflicts.get(i).map_or(0, |c| c.load(Ordering::Relaxed)))
                })
                .collect();
            attributes.push((
                "monitoredInfo".into(),
                vec![
                    format!("lag {:.3} s", self.lag_seconds()),
                    format!("conflicts {}", conflicts.join(" ")),
                ],
            ));
        }
        attributes
    }
}

fn lock(m: &Mutex<String>) -> std::sync::MutexGuard<'_, String> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn unix_now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The status of every replication consumer of one server: registered as each starts,
/// read by /readyz, the metrics endpoint and cn=Monitor.
#[derive(Default)]
pub struct Consumers(Mutex<Vec<Arc<Status>>>);

impl Consumers {
    /// The status of a consumer about to start.
    /// `mesh`: this node is one provider of a mesh (`multi_provider`).
    pub fn register(&self, settings: &Replication, mesh: bool) -> Arc<Status> {
        let status = Arc::new(Status::new(settings, mesh));
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(status.clone());
        status
    }

    /// Every consumer's status.
    pub fn all(&self) -> Vec<Arc<Status>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// /readyz: every consumer has finished its first refresh (refreshAndPersist: and persists).
    pub fn readiness(&self) -> Result<(), String> {
        let waiting: Vec<String> =
            self.all().iter().filter(|s| !s.is_ready()).map(|s| format!("rid={:03}", s.rid)).collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!("replication not caught up: {}", waiting.join(", ")))
        }
    }

    /// The metric families of every consumer.
    pub fn families(&self) -> Vec<prometheus::proto::MetricFamily> {
        families(&self.all())
    }
}

fn families(consumers: &[Arc<Status>]) -> Vec<prometheus::proto::MetricFamily> {
    use crate::metrics::family::Family;
    if consumers.is_empty() {
        return Vec::new();
    }
    let mut state = Family::gauge(
        "ferrodir_replication_consumer_state",
        "Replication consumer state: 0 connecting, 1 refreshing, 2 persisting, 3 idle (refreshOnly), 4 retrying.",
    );
    let mut lag = Family::gauge(
        "ferrodir_replication_lag_seconds",
        "Now minus the time in the newest applied CSN while behind; 0 when caught up in persist.",
    );
    let mut applied =
        Family::counter("ferrodir_replication_applied_total", "Changes applied from the provider, by kind.");
    let mut conflicts = Family::counter(
        "ferrodir_replication_conflicts_total",
        "Multi-provider conflicts resolved, by kind (modify, add, delete, rename, glue).",
    );
    for (i, name) in super::mesh::CONFLICT_NAMES.iter().enumerate() {
        let total: u64 =
            consumers.iter().map(|c| c.conflicts.get(i).map_or(0, |a| a.load(Ordering::Relaxed))).sum();
        conflicts.value(&[("kind", name)], total as f64);
    }
    for c in consumers {
        let rid = c.rid.to_string();
        state.value(&[("rid", &rid)], f64::from(c.state() as u8));
        lag.value(&[("rid", &rid)], c.lag_seconds());
        for (i, name) in APPLIED_NAMES.iter().enumerate() {
            let v = c.applied.get(i).map_or(0, |a| a.load(Ordering::Relaxed));
            applied.value(&[("rid", &rid), ("kind", name)], v as f64);
        }
    }
    vec![state.done(), lag.done(), applied.done(), conflicts.done()]
}
