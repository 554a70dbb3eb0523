//! The server's TOML configuration. Every limit is a named value with its unit in the name;
//! `deploy/ferrodir.toml` documents each one.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Naming contexts served.
    pub suffixes: Vec<String>,
    pub root_dn: String,
    /// Cleartext or `{SSHA}`.
    pub root_password: String,
    /// Shards (and worker threads); 0 means one per CPU core. Fixed when the data directory
    /// is created.
    pub shards: usize,
    /// "redb" (default) or "sled".
    pub engine: String,
    /// What an acknowledged write must survive: "power-loss" (redb) or
    /// "process-crash-only" (required to run sled, which does not fsync).
    pub durability: String,
    /// "default" (safe) or "open-read" (slapd with no ACLs).
    pub access: String,
    /// How a worker reads a shard it doesn't own: "message" (to the shard's actor) or
    /// "snapshot" (the shard's last committed snapshot, read directly, LMDB-style).
    pub remote_reads: String,
    /// Where long searches (scans) run: "pool" (the search threads below, never a thread that
    /// hosts a shard's writer or connections) or "worker" (cooperatively on the asking
    /// connection's worker thread, yielding every millisecond: the measured alternative, see
    /// docs/DECISIONS.md).
    pub search_scans: String,
    /// Threads of the search pool; 0 means one per CPU core.
    pub search_threads: usize,
    /// The nice value of the search threads (0-19): how much the scheduler favours lookups,
    /// writes and commits over scans when the CPUs are busy. 0 treats them alike.
    pub search_threads_nice: i32,
    /// slapd-style index directives: "attr[,attr] eq[,pres][,sub][,ord]".
    pub index: Vec<String>,
    /// Extra schema files in OpenLDAP's `.schema` format, loaded after the standard ones
    /// (core, cosine, inetOrgPerson, nis, openldap).
    pub schema_files: Vec<PathBuf>,
    /// Load a small example tree when the data directory is created.
    pub example_data: bool,
    pub limits: Limits,
    pub log: Log,
    /// Fault injection for the crash tests; never set in production.
    pub testing: Testing,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub connections_max: usize,
    pub ops_in_flight_per_connection_max: u32,
    pub pdu_bytes_max: usize,
    pub ber_nesting_depth_max: usize,
    pub search_entries_max: u32,
    pub search_time_max_s: u32,
    pub search_chunks_in_flight: usize,
    pub entry_cache_entries_max: usize,
    /// redb's page cache per shard file (decoded pages, on top of the OS page cache).
    pub storage_cache_bytes_per_shard: usize,
    /// Responses queued per connection before operations wait for the socket.
    pub outbound_pdus_queued_max: usize,
    /// Close a connection with no request for this long; 0 disables.
    pub idle_timeout_s: u64,
    /// Close a connection whose peer doesn't read a response for this long.
    pub write_timeout_s: u64,
    /// How long shutdown waits for connections to finish.
    pub shutdown_grace_s: u64,
}

/// Switches for the crash tests (tests/crash). Both default to off.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Testing {
    /// Keep every unsynced write in process memory, so that SIGKILL acts as a power cut.
    pub simulate_power_cut: bool,
    /// Acknowledge writes without syncing: a deliberately broken server, used to prove that
    /// the crash test catches lost acknowledged writes.
    pub ack_before_sync: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    /// A tracing filter: "info", "ferrodir=debug", ...
    pub level: String,
    /// "text" or "json".
    pub format: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 3389)),
            data_dir: PathBuf::from("ferrodir-data"),
            suffixes: vec!["dc=example,dc=com".into()],
            root_dn: "cn=admin,dc=example,dc=com".into(),
            root_password: "secret".into(),
            shards: 0,
            engine: "redb".into(),
            durability: "power-loss".into(),
            access: "default".into(),
            remote_reads: "snapshot".into(),
            search_scans: "pool".into(),
            search_threads: 0,
            search_threads_nice: 10,
            index: vec![
                "objectClass eq".into(),
                "uid,mail,cn,sn,member,uniqueMember,memberUid eq".into(),
                "uid pres".into(),
            ],
            schema_files: Vec::new(),
            example_data: true,
            limits: Limits::default(),
            log: Log::default(),
            testing: Testing::default(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections_max: 4096,
            ops_in_flight_per_connection_max: 64,
            pdu_bytes_max: 16 * 1024 * 1024,
            ber_nesting_depth_max: 64,
            search_entries_max: 500,
            search_time_max_s: 3600,
            search_chunks_in_flight: 4,
            entry_cache_entries_max: 100_000,
            storage_cache_bytes_per_shard: 1 << 30,
            outbound_pdus_queued_max: 256,
            idle_timeout_s: 0,
            write_timeout_s: 60,
            shutdown_grace_s: 10,
        }
    }
}

impl Default for Log {
    fn default() -> Self {
        Self { level: "info".into(), format: "text".into() }
    }
}

impl Config {
    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("bad config {}: {e}", path.display()))
    }

    /// Threads of the search pool.
    pub fn search_thread_count(&self) -> usize {
        if self.search_threads > 0 {
            self.search_threads
        } else {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        }
    }

    /// Shards to create a new data directory with.
    pub fn shard_count(&self) -> usize {
        if self.shards > 0 {
            self.shards
        } else {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_config_parses() {
        let text = include_str!("../../deploy/ferrodir.toml");
        let config: Config = toml::from_str(text).unwrap();
        assert_eq!(config.suffixes, vec!["dc=example,dc=com".to_string()]);
        assert!(config.limits.pdu_bytes_max > 0);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        assert!(toml::from_str::<Config>("listn = \"127.0.0.1:1\"").is_err());
    }
}
