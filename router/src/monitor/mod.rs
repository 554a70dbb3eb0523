//! cn=Monitor: a read-only subtree in slapd's back-monitor layout and names, so that tools
//! written for slapd (openldap_exporter, the Grafana openldap mixin) read Ferrodir unchanged.
//!
//! - [`Sources`]: where the values come from. One owner each, read here: every worker's
//!   [`WorkerStats`] (the counters the metrics endpoint sums), and what only the server
//!   knows (listeners, accepted connections, shards) behind [`ServerFacts`], set once at
//!   start. The open connections are a table written on connect, bind and close only, never
//!   per operation, and bounded by `connections_max` (an entry lives as long as its socket).
//! - [`tree`]: the entries, built at read time from the sources (about 60: cheap, and a
//!   monitor read is rare).
//! - [`search`]: base, one-level and subtree searches over them, for the rootDN and the
//!   configured `monitor_readers` only; everyone else finds nothing (noSuchObject).
//!
//! Writes under cn=Monitor are refused (`op::check_writable`): unwillingToPerform, as
//! back-monitor answers.

pub mod search;
pub mod tree;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use crate::stats::WorkerStats;

/// The subtree's base, as slapd names it.
pub const MONITOR_DN: &str = "cn=Monitor";

/// The normalised form of [`MONITOR_DN`]'s one RDN (the same with and without a schema).
const MONITOR_RDN_NORM: &str = "cn=monitor";

/// Whether `dn` is cn=Monitor or below it (compared RDN by RDN, so an escaped comma in a
/// value can't fake it).
pub fn is_monitor_dn(dn: &ferrodir_proto::NormDn) -> bool {
    dn.rdns.last().is_some_and(|rdn| rdn == MONITOR_RDN_NORM)
}

/// One bound listener, for cn=Listener N.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerInfo {
    /// `ldap://127.0.0.1:389/`, `ldaps://...`, `ldapi://%2Frun%2Fferrodir.sock/`.
    pub url: String,
    /// slapd's form: `IP=127.0.0.1:389`, `PATH=/run/ferrodir.sock`.
    pub local_address: String,
}

/// One shard's state, for cn=Shard N.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardFacts {
    /// False after a failed commit: the shard refuses writes until restarted.
    pub writable: bool,
    pub commits: u64,
    pub failed_commits: u64,
    /// Entries held by the shard.
    pub entries: u64,
}

/// What the server (sockets, the accept loop, the shards' engines) knows and the router
/// doesn't: implemented by `server` over the same counters its metrics endpoint reads.
pub trait ServerFacts: Send + Sync {
    /// Connections accepted since start, every listener together.
    fn connections_accepted(&self) -> u64;
    fn listeners(&self) -> Vec<ListenerInfo>;
    fn shards(&self) -> Vec<ShardFacts>;
    /// The process's soft limit on open files (slapd's cn=Max File Descriptors).
    fn max_file_descriptors(&self) -> u64;
    /// The replication consumers (slapd's `cn=Consumer NNN` under their database).
    fn consumers(&self) -> Vec<ConsumerFacts> {
        Vec::new()
    }
}

/// One replication consumer, as slapd's olmSyncReplInstance entry shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerFacts {
    pub rid: u32,
    /// Its search base (which database it belongs to).
    pub search_base: String,
    /// olmSRProviderURIList, olmSRSyncPhase, ... with their values (empty: left out).
    pub attributes: Vec<(String, Vec<String>)>,
}

/// One open connection, for cn=Connection N.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// `IP=203.0.113.5:40112`, or `PATH=...` on ldapi.
    pub peer_address: String,
    pub local_address: String,
    /// The listener's URL.
    pub listener: String,
    pub started: SystemTime,
    /// The DN it is bound as; empty while anonymous.
    pub authz_dn: String,
}

/// The open connections by number. Written on connect, bind and close (one short lock,
/// never across an await); read by a monitor search.
#[derive(Default)]
pub struct ConnectionTable {
    open: Mutex<BTreeMap<u64, ConnectionInfo>>,
}

impl ConnectionTable {
    /// Records connection `conn`; it is removed when the returned guard drops.
    pub fn open(self: &Arc<Self>, conn: u64, info: ConnectionInfo) -> ConnectionEntry {
        self.lock().insert(conn, info);
        ConnectionEntry { table: self.clone(), conn }
    }

    /// A Bind completed on `conn`: its new identity (empty for anonymous).
    pub fn bound(&self, conn: u64, authz_dn: String) {
        if let Some(info) = self.lock().get_mut(&conn) {
            info.authz_dn = authz_dn;
        }
    }

    pub fn snapshot(&self) -> Vec<(u64, ConnectionInfo)> {
        self.lock().iter().map(|(n, info)| (*n, info.clone())).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ConnectionInfo>> {
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A connection's place in the [`ConnectionTable`]; gives it back when dropped.
pub struct ConnectionEntry {
    table: Arc<ConnectionTable>,
    conn: u64,
}

impl Drop for ConnectionEntry {
    fn drop(&mut self) {
        self.table.lock().remove(&self.conn);
    }
}

/// Everything cn=Monitor reads (see the module doc). Filled at start by `server`; the
/// router only reads it, except for the connection table's connect/bind/close updates.
pub struct Sources {
    pub started: SystemTime,
    workers: Mutex<Vec<Arc<WorkerStats>>>,
    server: OnceLock<Arc<dyn ServerFacts>>,
    pub connections: Arc<ConnectionTable>,
}

impl Default for Sources {
    fn default() -> Self {
        Self {
            started: SystemTime::now(),
            workers: Mutex::default(),
            server: OnceLock::new(),
            connections: Arc::default(),
        }
    }
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources").field("started", &self.started).finish_non_exhaustive()
    }
}

impl Sources {
    /// A worker's counters, as it starts.
    pub fn add_worker(&self, stats: Arc<WorkerStats>) {
        self.workers.lock().unwrap_or_else(|p| p.into_inner()).push(stats);
    }

    /// The server's facts, once its listeners are bound; later calls are ignored.
    pub fn set_server(&self, facts: Arc<dyn ServerFacts>) {
        let _ = self.server.set(facts);
    }

    pub fn workers(&self) -> Vec<Arc<WorkerStats>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn server(&self) -> Option<&Arc<dyn ServerFacts>> {
        self.server.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ConnectionInfo {
        ConnectionInfo {
            peer_address: "IP=127.0.0.1:5".into(),
            local_address: "IP=127.0.0.1:389".into(),
            listener: "ldap://127.0.0.1:389/".into(),
            started: SystemTime::UNIX_EPOCH,
            authz_dn: String::new(),
        }
    }

    #[test]
    fn monitor_connection_entries_live_as_long_as_their_guard() {
        let table = Arc::new(ConnectionTable::default());
        let first = table.open(7, info());
        let _second = table.open(8, info());
        table.bound(7, "cn=Manager".into());
        let open = table.snapshot();
        assert_eq!(open.len(), 2);
        assert_eq!(open[0].1.authz_dn, "cn=Manager");
        drop(first);
        assert_eq!(table.snapshot().iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![8]);
    }

    #[test]
    fn monitor_dns_are_recognised_by_their_last_rdn() {
        let rules =
            ferrodir_proto::schema::DnNormalizer::from_schema(&ferrodir_proto::schema::Schema::standard());
        let dn = |text: &str| rules.parse(text).unwrap();
        assert!(is_monitor_dn(&dn("commonName=monitor")));
        assert!(is_monitor_dn(&ferrodir_proto::schema::DnNormalizer::plain().parse(MONITOR_DN).unwrap()));
        assert!(is_monitor_dn(&dn("CN=Monitor")));
        assert!(is_monitor_dn(&dn("cn=Total,cn=Connections,cn=Monitor")));
        assert!(!is_monitor_dn(&dn("cn=Monitors")));
        assert!(!is_monitor_dn(&dn("cn=x\\,cn=Monitor")));
        assert!(!is_monitor_dn(&dn("cn=Monitor,dc=example,dc=com")));
    }
}
