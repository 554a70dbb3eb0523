//! The server's TOML configuration. Every limit is a named value with its unit in the name;
//! `deploy/ferrodir.toml` documents each one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use ferrodir_proto::schema::DnNormalizer;
use ferrodir_proto::Dn;
use ferrodir_router::{ClassLimits, LimitsConfig, RequestLimits, UnindexedPolicy};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub listen: SocketAddr,
    /// `listen_ldaps = "HOST:PORT"`: an LDAPS listener (TLS from the first byte); needs `[tls]`.
    pub listen_ldaps: Option<SocketAddr>,
    /// `listen_ldapi = "PATH"`: a Unix-domain socket (ldapi://), where SASL EXTERNAL
    /// authenticates the peer process by its uid and gid.
    pub listen_ldapi: Option<PathBuf>,
    /// `metrics_listen = "HOST:PORT"`: the HTTP endpoint for Prometheus (`/metrics`) and
    /// health checks (`/healthz`, `/readyz`); off when unset.
    pub metrics_listen: Option<SocketAddr>,
    /// `[tls]`: certificate and key, client certificates, protocol versions. With a
    /// certificate configured, StartTLS is offered on the plain listener.
    pub tls: Option<Tls>,
    /// A simple bind, SASL PLAIN or Password Modify in cleartext from a non-loopback peer
    /// gets confidentialityRequired (13).
    pub require_tls_for_binds: bool,
    /// `monitor_readers = ["DN", ...]`: who may read cn=Monitor besides the rootDN (an
    /// exporter's bind DN). Its connection entries show peer addresses and bind DNs, so
    /// nobody else sees the subtree at all.
    pub monitor_readers: Vec<String>,
    /// `[[authz_regexp]]`: how an authenticated SASL name (a client certificate's subject,
    /// ldapi peer credentials, a PLAIN user name) becomes a directory identity, as slapd's
    /// `authz-regexp`: the first rule whose `match` (a regular expression, matched
    /// case-insensitively against the whole name) fits gives the DN `replace` ($1.. are
    /// the groups).
    pub authz_regexp: Vec<AuthzRegexp>,
    pub data_dir: PathBuf,
    /// Naming contexts served.
    pub suffixes: Vec<String>,
    pub root_dn: String,
    /// Cleartext or a hash in any scheme a bind reads (`{ARGON2}`, `{SSHA}`, ...), as
    /// `ferrodir hash-password` prints. Empty (the default of a config file): the rootDN
    /// cannot bind, as slapd without `rootpw`. Only [`Config::embedded`] (no config file)
    /// has one, [`BUILT_IN_ROOT_PASSWORD`], which a server beyond loopback refuses.
    pub root_password: String,
    /// Whether cleartext userPassword values written by Add, Modify and Password Modify are
    /// stored hashed with `password_scheme`. Unset: on, except with `access = "open-read"`
    /// (slapd without ppolicy's hash_cleartext, for differential tests).
    pub password_hash_on_write: Option<bool>,
    /// "{ARGON2}" (argon2id, m=19456 KiB, t=2, p=1), "{PBKDF2-SHA512}", "{SSHA512}", or
    /// "{SCRAM-SHA-256}" / "{SCRAM-SHA-512}" (the keys SASL SCRAM binds check).
    pub password_scheme: String,
    /// argon2id's memory for new `{ARGON2}` values, in KiB (OWASP's minimum, 19456, by
    /// default); with `password_argon2_t` (passes, 2) and `password_argon2_p` (lanes, 1).
    /// docs/OPERATIONS.md has the logins per core each set allows.
    pub password_argon2_m_kib: u32,
    pub password_argon2_t: u32,
    pub password_argon2_p: u32,
    /// Iterations of new `{PBKDF2-SHA512}` values (OWASP's 210,000 by default).
    pub password_pbkdf2_rounds: u32,
    /// A successful simple bind whose stored value is in another scheme (an imported
    /// `{SSHA}`, say) stores the password again in `password_scheme` (389-ds's upgrade on
    /// bind). Default true; needs hash-on-write.
    pub password_upgrade_on_bind: bool,
    /// Threads that hash and check passwords; 0 = one per CPU core but one (at least one).
    pub password_hash_threads: usize,
    /// Hashes and checks waiting for a thread; one more gets busy (51) at once.
    pub password_hash_queue_max: usize,
    /// The nice value of the password threads (0-19), as `search_threads_nice`.
    pub password_hash_threads_nice: i32,
    /// Shards (and worker threads); 0 means one per CPU core. Fixed when the data directory
    /// is created.
    pub shards: usize,
    /// Worker threads that take client connections; 0 means as many as the CPUs this
    /// process may run on, at most the shard count. Every worker hosts its shard's actor
    /// whether or not it takes connections. More busy threads than CPUs make every hop of a
    /// write (connection, shard actor, commit) wait for a time slice of a thread busy with
    /// reads (docs/DECISIONS.md, "Connections on at most one worker per CPU").
    pub connection_workers: usize,
    /// "redb" (default) or "sled".
    pub engine: String,
    /// This server's id (0–4095), the third field of every entryCSN it stamps and the
    /// `sid=` of its syncrepl cookies (RFC 4533 provider, docs/OPERATIONS.md).
    pub server_id: u32,
    /// `multi_provider`: every `[[replication]]` subtree stays writable here, and this node
    /// is one provider of a mesh whose other nodes it consumes (slapd's `multiprovider on`;
    /// docs/OPERATIONS.md, "Multi-provider replication"). Needs a `server_id` of its own.
    pub multi_provider: bool,
    /// What an acknowledged write must survive: "power-loss" (redb) or
    /// "process-crash-only" (required to run sled, which does not fsync).
    pub durability: String,
    /// The built-in access rules: "default" (Debian slapd's) or "open-read" (slapd with
    /// no access lines: everyone reads everything). `access_rules`, when present, replace them.
    pub access: String,
    /// `[[access_rules]]`: access rules in slapd's syntax, in order; first match wins.
    pub access_rules: Vec<AccessRuleTable>,
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
    /// memberOf, computed from member and uniqueMember's equality postings (kept
    /// `eq`-indexed whatever `index` says), and the in-chain rule 1.2.840.113556.1.4.1941. Off: memberOf has no
    /// values and in-chain filters compare DNs only.
    pub memberof: bool,
    /// memberOf lists the groups reached through nested groups too (389-ds), not only the
    /// groups that name the entry (slapd's memberof overlay, Active Directory).
    pub memberof_transitive: bool,
    /// The most levels of nested groups a walk follows (in-chain, transitive memberOf);
    /// deeper answers adminLimitExceeded (11).
    pub memberof_chain_depth_max: usize,
    /// The most entries one walk of the group graph collects; more answers
    /// adminLimitExceeded (11).
    pub memberof_chain_entries_max: usize,
    /// Extra schema files in OpenLDAP's `.schema` format, loaded after the standard ones
    /// (core, cosine, inetOrgPerson, nis, openldap).
    pub schema_files: Vec<PathBuf>,
    /// Load a small example tree when the data directory is created.
    pub example_data: bool,
    pub limits: Limits,
    pub log: Log,
    /// `[access_log]`: a line per connection event and operation, 389-ds's format or JSON.
    pub access_log: AccessLog,
    /// `[audit_log]`: every committed change in slapo-auditlog's LDIF format; on when
    /// `path` is set.
    pub audit_log: AuditLog,
    /// `[refint]`: referential integrity (slapd's refint overlay): a delete or rename
    /// removes or rewrites the values that name the entry. Off by default.
    pub refint: Refint,
    /// `[ppolicy]`: password policy (slapd's ppolicy overlay), see docs/OPERATIONS.md
    /// "Password policy".
    pub ppolicy: Ppolicy,
    /// `[dynlist]`: dynamic groups (slapo-dynlist): a groupOfURLs entry's member values
    /// computed from its memberURLs at read time, see docs/OPERATIONS.md "Dynamic groups".
    pub dynlist: Dynlist,
    /// `[sasl]`: who may act as whom (slapd's `authz-policy`), see docs/OPERATIONS.md,
    /// "Proxied authorization".
    pub sasl: Sasl,
    /// `[[replication]]`: this server replicates these subtrees from RFC 4533 providers
    /// (server/src/replication, docs/OPERATIONS.md "Replication consumer").
    pub replication: Vec<crate::replication::settings::Replication>,
    /// `[[unique]]`: attribute uniqueness (slapd's slapo-unique), see docs/OPERATIONS.md,
    /// "Attribute uniqueness".
    pub unique: Vec<Unique>,
    /// `[changelog]`: the retro changelog under cn=changelog (draft-good-ldap-changelog, as
    /// 389-ds serves it), see docs/OPERATIONS.md, "Changelog". Off by default.
    pub changelog: Changelog,
    /// Fault injection for the crash tests. Accepted only by a binary built with the
    /// `fault-injection` feature; a release build refuses a config that has the table.
    pub testing: Option<Testing>,
    /// The file this configuration was read from (None: the embedded default): what a
    /// reload reads again.
    #[serde(skip)]
    pub source: Option<std::path::PathBuf>,
}

/// One `[[access_rules]]` entry: slapd's `access to <to> by <by[0]> by <by[1]> ...`, e.g.
/// `to = 'attrs=userPassword'`, `by = ["self write", "anonymous auth", "* none"]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessRuleTable {
    pub to: String,
    pub by: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub connections_max: usize,
    /// Connections open at once from one client IP address; 0 = unlimited. One more is
    /// closed as soon as it is accepted.
    pub connections_per_ip_max: usize,
    /// Whether loopback clients (127.0.0.0/8, ::1) are exempt from `connections_per_ip_max`.
    pub connections_per_ip_exempt_loopback: bool,
    /// Every connection's read buffer beyond its first `READ_BUFFER_BASE_BYTES` draws from
    /// this one budget; a connection that cannot get budget for a PDU stops reading until
    /// it can. Must be at least the largest class's `pdu_bytes_max`.
    pub read_buffers_bytes_max: usize,
    pub ber_nesting_depth_max: usize,
    /// Nesting of a search filter (`(cn=x)` is 1); deeper gets adminLimitExceeded.
    pub filter_depth_max: usize,
    /// Items in a search filter; more gets adminLimitExceeded.
    pub filter_elements_max: usize,
    /// Controls on one request; more gets adminLimitExceeded.
    pub controls_per_request_max: usize,
    /// Attributes in a search's list, an add, or a modify's changes; more gets
    /// adminLimitExceeded.
    pub attributes_per_request_max: usize,
    /// Updates one LDAP transaction (RFC 5805) may queue; one more: adminLimitExceeded (11).
    pub transaction_operations_max: usize,
    pub search_chunks_in_flight: usize,
    /// Matches one sorted search (RFC 2891) may collect; more: adminLimitExceeded (11).
    pub sort_entries_max: usize,
    /// Keys in one sort control; more: unwillingToPerform (53), as slapd's sssvlv-maxkeys.
    pub sort_keys_max: usize,
    /// Records each shard's delete log keeps (deletes and Modify DNs, for a sync refresh's
    /// delete phase), as slapd's syncprov-sessionlog; the oldest are trimmed.
    pub sync_delete_log_max: usize,
    /// Below this many bytes free on the data directory's filesystem client writes get
    /// unwillingToPerform (53) "disk space low", and replication consumers pause, until
    /// the space is back (router `disk`); 0: never. The reserve is left for the server's
    /// own bookkeeping and checkpoints.
    pub disk_free_min_bytes: u64,
    /// After a start, read the shard files ahead into the OS page cache (at most half the
    /// memory available), at the lowest CPU and I/O priority (serve/prewarm.rs), so that a
    /// restart on a cold cache is at warm speed within seconds. False: pages are read as
    /// lookups need them.
    pub prewarm: bool,
    /// Sorted searches running or kept (paged, VLV) per connection; one more: busy (51),
    /// as slapd's sssvlv-maxperconn.
    pub sort_sessions_per_connection_max: usize,
    /// A kept sorted session unused for this long is dropped (its cookie then gets
    /// protocolError).
    pub sort_session_idle_s: u64,
    /// A scan's work between two yields of its thread, in microseconds.
    pub search_slice_us: u64,
    /// How long a shard's next commit may wait, in microseconds, for the writers its last
    /// commit answered to send their next write (`ShardActor::with_commit_coalesce`); 0:
    /// each commit starts as soon as the last one is done.
    pub commit_coalesce_us: u64,
    /// Bytes of each shard's write log (`shard-NNN.wal`, written in full at creation): a
    /// commit appends its batch there and syncs one contiguous record instead of redb's
    /// scattered pages, and a durable redb commit (a checkpoint) runs each time the log
    /// fills. 0: no log, every commit is a durable redb commit (docs/DECISIONS.md, "A write
    /// log in front of redb").
    pub write_log_bytes: u64,
    /// SO_RCVBUF of client connections, in bytes (`runtime::listen_tcp`); 0: the kernel's
    /// autotuning, which may grow it to tens of MB per connection.
    pub socket_receive_buffer_bytes: usize,
    /// A scan takes a fresh snapshot after this many entries, or after
    /// `search_snapshot_age_ms`, whichever comes first (as back-mdb's rtxnsize).
    pub search_snapshot_entries_max: usize,
    pub search_snapshot_age_ms: u64,
    /// A paged-results cookie not used for this long is stale (unwillingToPerform): the
    /// server keeps nothing per paged search, so this only bounds how old a position a
    /// client may come back with.
    pub paged_cookie_idle_max_s: u64,
    /// The server's whole cache budget, in bytes: redb's page caches and the entry caches
    /// together, whatever the shard count ([`Limits::storage_cache_bytes_per_file`],
    /// [`Limits::entry_cache_bytes_per_shard`]; docs/OPERATIONS.md, "Memory and caches").
    pub cache_bytes: usize,
    /// Responses queued per connection before operations wait for the socket.
    pub outbound_pdus_queued_max: usize,
    /// Close a connection whose peer doesn't read a response for this long.
    pub write_timeout_s: u64,
    /// How long shutdown waits for connections to finish.
    pub shutdown_grace_s: u64,
    /// `[limits.anonymous]`: overrides of the anonymous class's defaults.
    pub anonymous: ClassLimitsTable,
    /// `[limits.authenticated]`: overrides of the authenticated class's defaults.
    pub authenticated: ClassLimitsTable,
    /// `[[limits.identities]]`: a DN and overrides of the authenticated class for it.
    pub identities: Vec<ClassLimitsTable>,
    /// Retired keys, kept only to name their replacements (see [`Config::check`]).
    pub pdu_bytes_max: Option<toml::Value>,
    pub ops_in_flight_per_connection_max: Option<toml::Value>,
    pub search_entries_max: Option<toml::Value>,
    pub search_time_max_s: Option<toml::Value>,
    pub idle_timeout_s: Option<toml::Value>,
    pub entry_cache_entries_max: Option<toml::Value>,
    pub storage_cache_bytes_per_shard: Option<toml::Value>,
}

/// Any subset of one identity class's limits (router's `ClassLimits`), each overriding the
/// class it applies to. Units and meaning are those of `ClassLimits`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassLimitsTable {
    /// The identity a `[[limits.identities]]` entry is for; only there. (Not a separate
    /// struct with `#[serde(flatten)]`: serde can't deny unknown keys through a flatten.)
    pub dn: Option<String>,
    pub search_entries_max: Option<u32>,
    pub search_time_max_s: Option<u32>,
    pub unindexed_search: Option<UnindexedSearch>,
    /// Unset: the `search_entries_max` set in the same table, else the base class's.
    pub paged_page_entries_max: Option<u32>,
    /// Unset: the `search_entries_max` set in the same table, else the base class's.
    pub paged_total_entries_max: Option<u32>,
    pub pdu_bytes_max: Option<usize>,
    pub requests_pending_max: Option<u32>,
    pub idle_timeout_s: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnindexedSearch {
    Allow,
    Refuse,
}

impl ClassLimitsTable {
    /// `base` with this table's keys applied.
    pub fn apply(&self, base: &ClassLimits) -> ClassLimits {
        let search_entries_max = self.search_entries_max.unwrap_or(base.search_entries_max);
        // slapd: size.pr and size.prtotal default to the size limit, so a table that sets
        // only the size limit moves them with it.
        let paged = |own: Option<u32>, inherited: u32| {
            own.or(self.search_entries_max.map(|_| search_entries_max)).unwrap_or(inherited)
        };
        ClassLimits {
            search_entries_max,
            search_time_max_s: self.search_time_max_s.unwrap_or(base.search_time_max_s),
            unindexed_search: match self.unindexed_search {
                Some(UnindexedSearch::Allow) => UnindexedPolicy::Allow,
                Some(UnindexedSearch::Refuse) => UnindexedPolicy::Refuse,
                None => base.unindexed_search,
            },
            paged_page_entries_max: paged(self.paged_page_entries_max, base.paged_page_entries_max),
            paged_total_entries_max: paged(self.paged_total_entries_max, base.paged_total_entries_max),
            pdu_bytes_max: self.pdu_bytes_max.unwrap_or(base.pdu_bytes_max),
            requests_pending_max: self.requests_pending_max.unwrap_or(base.requests_pending_max),
            idle_timeout_s: self.idle_timeout_s.unwrap_or(base.idle_timeout_s),
        }
    }
}

impl Limits {
    /// Every class's limits, as the router reads them.
    /// `dn_rules`: the schema's DN normaliser, which the listed identities' DNs are keyed by.
    pub fn resolve(&self, dn_rules: &DnNormalizer) -> anyhow::Result<LimitsConfig> {
        let anonymous = self.anonymous.apply(&ClassLimits::ANONYMOUS);
        let authenticated = self.authenticated.apply(&ClassLimits::AUTHENTICATED);
        let mut identities = HashMap::new();
        if self.anonymous.dn.is_some() || self.authenticated.dn.is_some() {
            anyhow::bail!(
                "dn belongs in [[limits.identities]], not in [limits.anonymous] or [limits.authenticated]"
            );
        }
        for identity in &self.identities {
            let Some(text) = &identity.dn else {
                anyhow::bail!("every [[limits.identities]] entry needs a dn");
            };
            let dn = dn_rules
                .parse(text)
                .map_err(|e| anyhow::anyhow!("bad dn {text:?} in [[limits.identities]]: {e}"))?;
            identities.insert(dn.rdns, identity.apply(&authenticated));
        }
        Ok(LimitsConfig {
            anonymous,
            authenticated,
            identities,
            root: ClassLimits::root(&authenticated),
            request: RequestLimits {
                filter_depth_max: self.filter_depth_max,
                filter_elements_max: self.filter_elements_max,
                controls_per_request_max: self.controls_per_request_max,
                attributes_per_request_max: self.attributes_per_request_max,
                transaction_operations_max: self.transaction_operations_max,
            },
        })
    }
}

/// One `[[unique]]` table: within `bases` (every suffix when empty), no two entries that
/// match `filter` share a value of any one of `attributes`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unique {
    pub attributes: Vec<String>,
    #[serde(default)]
    pub bases: Vec<String>,
    #[serde(default)]
    pub filter: Option<String>,
}

/// `[refint]`, see docs/OPERATIONS.md, "Referential integrity".
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Refint {
    pub enabled: bool,
    /// DN-valued attribute types whose values name entries (slapd's `refint_attributes`).
    /// Each is equality-indexed whenever refint is on (added to `index` if missing).
    pub attributes: Vec<String>,
    /// The DN put in an attribute whose last value a delete removed (slapd's
    /// `refint_nothing`); "" removes the attribute, which a MUST attribute refuses.
    pub nothing: String,
    /// The identity refint writes as: stamped as modifiersName (slapd's
    /// `refint_modifiersName`).
    pub modifiers_name: String,
}

impl Refint {
    /// Its DNs parse and it names attributes, when enabled.
    fn check(&self) -> anyhow::Result<()> {
        if self.enabled {
            for (key, dn) in [("nothing", &self.nothing), ("modifiers_name", &self.modifiers_name)] {
                Dn::parse(dn).map_err(|e| anyhow::anyhow!("refint.{key} {dn:?} is not a DN: {e}"))?;
            }
            if self.attributes.is_empty() {
                anyhow::bail!(
                    "refint.attributes is empty: name the attributes, or set refint.enabled = false"
                );
            }
        }
        Ok(())
    }
}

impl Default for Refint {
    fn default() -> Self {
        Self {
            enabled: false,
            attributes: ["member", "uniqueMember", "owner", "seeAlso", "manager"].map(String::from).to_vec(),
            nothing: String::new(),
            modifiers_name: "cn=Referential Integrity Overlay".into(),
        }
    }
}

/// `[ppolicy]`, see docs/OPERATIONS.md, "Password policy". Policies themselves are
/// pwdPolicy entries in the tree, edited over LDAP.
/// `[sasl]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Sasl {
    /// Which authorization rules let an identity act as another (the proxied
    /// authorization control): `none` (the default, as slapd's), `to` (authzTo of the
    /// authenticated entry), `from` (authzFrom of the target), `any`, `all`.
    pub authz_policy: AuthzPolicy,
}

/// `[sasl] authz_policy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthzPolicy {
    #[default]
    None,
    To,
    From,
    Any,
    All,
}

impl AuthzPolicy {
    pub fn router(self) -> ferrodir_router::AuthzPolicy {
        match self {
            Self::None => ferrodir_router::AuthzPolicy::None,
            Self::To => ferrodir_router::AuthzPolicy::To,
            Self::From => ferrodir_router::AuthzPolicy::From,
            Self::Any => ferrodir_router::AuthzPolicy::Any,
            Self::All => ferrodir_router::AuthzPolicy::All,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Ppolicy {
    /// The DN of the pwdPolicy entry that governs every entry without a pwdPolicySubentry
    /// (slapd's `ppolicy_default`); unset: only entries that name a policy have one.
    pub default_policy: Option<String>,
}

impl Ppolicy {
    fn check(&self) -> anyhow::Result<()> {
        if let Some(dn) = &self.default_policy {
            Dn::parse(dn).map_err(|e| anyhow::anyhow!("ppolicy.default_policy {dn:?} is not a DN: {e}"))?;
        }
        Ok(())
    }
}

/// `[dynlist]`, see docs/OPERATIONS.md, "Dynamic groups".
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Dynlist {
    /// The most member values one dynamic group computes (its memberURLs' matches, without
    /// repeats); one more ends the Search or Compare that reads the group with
    /// adminLimitExceeded (11), rather than holding an unbounded list in memory. slapd
    /// has no such bound.
    pub members_max: usize,
}

impl Default for Dynlist {
    fn default() -> Self {
        Self { members_max: 10_000 }
    }
}

impl Dynlist {
    fn check(&self) -> anyhow::Result<()> {
        if self.members_max == 0 || self.members_max > 1_000_000 {
            anyhow::bail!("dynlist.members_max must be between 1 and 1000000");
        }
        Ok(())
    }
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
    /// Treat loopback peers as remote, so that tests on 127.0.0.1 can see what a client on
    /// another host gets (`require_tls_for_binds`, loopback-only access rules).
    pub loopback_is_remote: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthzRegexp {
    #[serde(rename = "match")]
    pub pattern: String,
    pub replace: String,
}

/// `[tls]`. Files are PEM; they are read at start, on SIGHUP, and whenever their
/// modification time changes (checked every `reload_poll_s`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// CAs whose client certificates are accepted (for SASL EXTERNAL); empty: none asked.
    pub client_ca_file: Option<PathBuf>,
    /// "never" (no certificate asked), "try" (asked, verified if sent) or "demand" (the
    /// handshake fails without a valid one).
    pub client_certs: String,
    /// The lowest TLS version accepted: "1.2" or "1.3".
    pub min_version: String,
    /// How often the certificate and key files are checked for a change, in seconds
    /// (Kubernetes rotates mounted Secrets without a signal); 0 = only on SIGHUP.
    pub reload_poll_s: u64,
    /// How long a TLS handshake may take before the connection is closed.
    pub handshake_timeout_s: u64,
}

impl Default for Tls {
    fn default() -> Self {
        Self {
            cert_file: PathBuf::new(),
            key_file: PathBuf::new(),
            client_ca_file: None,
            client_certs: "never".into(),
            min_version: "1.2".into(),
            reload_poll_s: 60,
            handshake_timeout_s: 10,
        }
    }
}

/// `[changelog]`, off by default.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Changelog {
    pub enabled: bool,
    /// The most records kept, all shards together (each shard keeps its share, rounded up);
    /// the oldest go first.
    pub max_entries: usize,
    /// Records older than this many seconds are trimmed; 0: only `max_entries` bounds it.
    pub max_age_s: u64,
}

impl Default for Changelog {
    fn default() -> Self {
        Self { enabled: false, max_entries: 100_000, max_age_s: 7 * 86_400 }
    }
}

impl Changelog {
    /// What shard `count` keeps of `max_entries` (rounded up, at least 1).
    pub fn per_shard(&self, count: usize) -> usize {
        self.max_entries.div_ceil(count.max(1)).max(1)
    }
}

/// `[access_log]`, on by default.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLog {
    pub enabled: bool,
    /// "-" for standard output (the default: systemd's journal, a container's log), or a
    /// file, appended to and reopened on SIGUSR1.
    pub path: String,
    /// "text" (389-ds's access-log format, read by logconv) or "json".
    pub format: String,
    /// Lines queued toward the writer, shared out between the workers; beyond it lines are
    /// dropped and counted (ferrodir_access_log_dropped_lines_total).
    pub queue_lines_max: usize,
    /// Built-in rotation of a file (`serve::rotation`): once it holds this many bytes (0:
    /// never by size)...
    pub rotate_bytes: u64,
    /// ...or is this many seconds old (0: never by age), the file is renamed
    /// `PATH.YYYYMMDD-HHMMSS` and opened anew.
    pub rotate_age_s: u64,
    /// Rotated files kept; the oldest beyond are removed.
    pub keep_files: usize,
    /// Rotated files are compressed (`PATH.YYYYMMDD-HHMMSS.gz`).
    pub gzip: bool,
}

impl Default for AccessLog {
    fn default() -> Self {
        Self {
            enabled: true,
            path: "-".into(),
            format: "text".into(),
            queue_lines_max: 65_536,
            rotate_bytes: 0,
            rotate_age_s: 0,
            keep_files: 10,
            gzip: false,
        }
    }
}

impl AccessLog {
    /// The rotation the keys ask for; None when neither size nor age is set.
    pub fn rotation(&self) -> Option<crate::serve::rotation::Rotation> {
        (self.rotate_bytes > 0 || self.rotate_age_s > 0).then(|| crate::serve::rotation::Rotation {
            bytes: self.rotate_bytes,
            age: std::time::Duration::from_secs(self.rotate_age_s),
            keep: self.keep_files,
            gzip: self.gzip,
        })
    }

    fn check_rotation(&self) -> anyhow::Result<()> {
        if self.rotation().is_some() && self.path == "-" {
            anyhow::bail!(
                "[access_log] rotate_bytes and rotate_age_s rotate a file: set `path` to one (standard output is the journal's to rotate)"
            );
        }
        Ok(())
    }
}

/// `[audit_log]`, off unless `path` is set (docs/OPERATIONS.md, "The audit log").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditLog {
    /// The file every committed change is appended to, as slapo-auditlog writes it
    /// (created 0600, reopened on SIGUSR1). Unset: no audit log.
    pub path: Option<String>,
    /// Bytes of records queued toward the writer, shared out between the workers; beyond
    /// it records are dropped, counted (ferrodir_audit_log_dropped_records_total) and
    /// warned about, never waited for.
    pub queue_bytes_max: usize,
}

impl Default for AuditLog {
    fn default() -> Self {
        Self { path: None, queue_bytes_max: 64 << 20 }
    }
}

impl AuditLog {
    /// A path that names a file, and room for records.
    fn check(&self) -> anyhow::Result<()> {
        if let Some(path) = &self.path {
            if path.is_empty() || path == "-" {
                anyhow::bail!("audit_log.path {path:?}: name a file, or leave the key out for no audit log");
            }
        }
        if self.queue_bytes_max < AUDIT_QUEUE_BYTES_MIN {
            anyhow::bail!(
                "audit_log.queue_bytes_max {} is too small: at least {AUDIT_QUEUE_BYTES_MIN}",
                self.queue_bytes_max
            );
        }
        Ok(())
    }
}

/// The smallest `[audit_log] queue_bytes_max`: a few records per worker.
const AUDIT_QUEUE_BYTES_MIN: usize = 64 * 1024;

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
            listen_ldaps: None,
            listen_ldapi: None,
            metrics_listen: None,
            tls: None,
            require_tls_for_binds: true,
            monitor_readers: Vec::new(),
            authz_regexp: Vec::new(),
            data_dir: PathBuf::from("ferrodir-data"),
            suffixes: vec!["dc=example,dc=com".into()],
            root_dn: "cn=admin,dc=example,dc=com".into(),
            root_password: String::new(),
            password_hash_on_write: None,
            password_scheme: "{ARGON2}".into(),
            password_argon2_m_kib: 19_456,
            password_argon2_t: 2,
            password_argon2_p: 1,
            password_pbkdf2_rounds: 210_000,
            password_upgrade_on_bind: true,
            password_hash_threads: 0,
            password_hash_queue_max: 1024,
            password_hash_threads_nice: 10,
            shards: 0,
            connection_workers: 0,
            engine: "redb".into(),
            server_id: 0,
            multi_provider: false,
            durability: "power-loss".into(),
            access: "default".into(),
            access_rules: Vec::new(),
            remote_reads: "snapshot".into(),
            search_scans: "pool".into(),
            search_threads: 0,
            search_threads_nice: 10,
            index: vec![
                "objectClass eq".into(),
                "uid,mail,cn,sn,member,uniqueMember,memberUid eq".into(),
                "uid pres".into(),
            ],
            memberof: true,
            memberof_transitive: false,
            memberof_chain_depth_max: 16,
            memberof_chain_entries_max: 100_000,
            schema_files: Vec::new(),
            example_data: true,
            limits: Limits::default(),
            log: Log::default(),
            access_log: AccessLog::default(),
            audit_log: AuditLog::default(),
            refint: Refint::default(),
            ppolicy: Ppolicy::default(),
            dynlist: Dynlist::default(),
            sasl: Sasl::default(),
            replication: Vec::new(),
            unique: Vec::new(),
            changelog: Changelog::default(),
            testing: None,
            source: None,
        }
    }
}

impl Limits {
    /// No retired key, no zero where at least 1 is needed, the write log and commit
    /// coalescing within their bounds.
    fn check_values(&self) -> anyhow::Result<()> {
        let retired = [
            &self.pdu_bytes_max,
            &self.ops_in_flight_per_connection_max,
            &self.search_entries_max,
            &self.search_time_max_s,
            &self.idle_timeout_s,
            &self.entry_cache_entries_max,
            &self.storage_cache_bytes_per_shard,
        ];
        for ((key, replacement), value) in RETIRED_LIMITS.iter().zip(retired) {
            if value.is_some() {
                anyhow::bail!("limits.{key} was replaced by {replacement}");
            }
        }
        for (key, value) in [
            ("sort_entries_max", self.sort_entries_max as u64),
            ("sort_keys_max", self.sort_keys_max as u64),
            ("sort_sessions_per_connection_max", self.sort_sessions_per_connection_max as u64),
            ("sort_session_idle_s", self.sort_session_idle_s),
            ("sync_delete_log_max", self.sync_delete_log_max as u64),
            ("transaction_operations_max", self.transaction_operations_max as u64),
        ] {
            if value == 0 {
                anyhow::bail!("limits.{key} must be at least 1");
            }
        }
        if self.write_log_bytes > 0 && !(64 * 1024..=1 << 30).contains(&self.write_log_bytes) {
            anyhow::bail!(
                "limits.write_log_bytes ({}) must be 0 (no write log) or between 65536 and 1073741824",
                self.write_log_bytes
            );
        }
        if self.commit_coalesce_us > 100_000 {
            anyhow::bail!(
                "limits.commit_coalesce_us ({}) is above 100000 (100 ms): every write would wait that long",
                self.commit_coalesce_us
            );
        }
        Ok(())
    }

    /// The read buffers hold at least the largest PDU a class may send. Only the bounds are
    /// checked here, before any schema is loaded.
    fn check_buffers(&self) -> anyhow::Result<()> {
        let resolved = self.resolve(&DnNormalizer::plain())?;
        let pdu_ceiling = resolved.pdu_bytes_ceiling();
        if self.read_buffers_bytes_max < pdu_ceiling {
            anyhow::bail!(
                "limits.read_buffers_bytes_max ({}) is smaller than the largest pdu_bytes_max ({pdu_ceiling})",
                self.read_buffers_bytes_max
            );
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections_max: 4096,
            connections_per_ip_max: 256,
            connections_per_ip_exempt_loopback: true,
            read_buffers_bytes_max: 256 * 1024 * 1024,
            ber_nesting_depth_max: 64,
            filter_depth_max: 32,
            filter_elements_max: 4096,
            controls_per_request_max: 32,
            attributes_per_request_max: 1024,
            transaction_operations_max: 1000,
            search_chunks_in_flight: 4,
            sort_entries_max: 100_000,
            sync_delete_log_max: ferrodir_shard::DELETE_LOG_MAX_DEFAULT,
            disk_free_min_bytes: DISK_FREE_MIN_BYTES_DEFAULT,
            prewarm: true,
            sort_keys_max: 5,
            sort_sessions_per_connection_max: 5,
            sort_session_idle_s: 300,
            search_slice_us: 1_000,
            commit_coalesce_us: ferrodir_shard::COMMIT_COALESCE_DEFAULT.as_micros() as u64,
            write_log_bytes: ferrodir_shard::storage::WRITE_LOG_BYTES_DEFAULT,
            socket_receive_buffer_bytes: 256 * 1024,
            search_snapshot_entries_max: 10_000,
            search_snapshot_age_ms: 100,
            paged_cookie_idle_max_s: 3600,
            cache_bytes: CACHE_BYTES_DEFAULT,
            outbound_pdus_queued_max: 256,
            write_timeout_s: 60,
            shutdown_grace_s: 10,
            anonymous: ClassLimitsTable::default(),
            authenticated: ClassLimitsTable::default(),
            identities: Vec::new(),
            pdu_bytes_max: None,
            ops_in_flight_per_connection_max: None,
            search_entries_max: None,
            search_time_max_s: None,
            idle_timeout_s: None,
            entry_cache_entries_max: None,
            storage_cache_bytes_per_shard: None,
        }
    }
}

/// `[limits] cache_bytes` by default: 1 GiB for the whole server. A cached gen-data user
/// takes about 1.1 KB, so the entry caches' 768 MiB hold about 700,000 of them, and the
/// server stays near a gigabyte whatever its shard count (docs/BENCHMARKS.md).
pub const CACHE_BYTES_DEFAULT: usize = 1 << 30;

impl Limits {
    /// redb's page cache for each redb file (the shards' and `coordinator.redb`). Serving,
    /// a quarter of `cache_bytes` over the shard files: redb keeps index and entry pages
    /// there, while the entry caches keep what answers reads. Offline tools (import,
    /// reindex, verify, export and backup without a server) have no entry caches, so the
    /// whole budget goes to redb, over the shard files.
    pub fn storage_cache_bytes_per_file(&self, shards: usize, serving: bool) -> usize {
        let share = if serving { self.cache_bytes / 4 } else { self.cache_bytes };
        share / shards.max(1)
    }

    /// One shard's entry cache while serving: the other three quarters of `cache_bytes`,
    /// evenly over the shards.
    pub fn entry_cache_bytes_per_shard(&self, shards: usize) -> usize {
        (self.cache_bytes - self.cache_bytes / 4) / shards.max(1)
    }
}

/// The index memberOf is read from (see [`Config::index_directives`]).
pub const MEMBEROF_INDEX: &str = "member,uniqueMember eq";

/// `[limits] disk_free_min_bytes` by default: 64 MiB, room for every shard's checkpoint
/// (a write log's worth of pages, 512 KiB by default) and redb's growth of a file by a
/// region, with margin, so that writes stop with a clear answer before any commit meets a
/// full disk.
pub const DISK_FREE_MIN_BYTES_DEFAULT: u64 = 64 << 20;

/// Keys of `[limits]` that were replaced, with what replaces them.
const RETIRED_LIMITS: &[(&str, &str)] = &[
    ("pdu_bytes_max", "limits.anonymous.pdu_bytes_max and limits.authenticated.pdu_bytes_max"),
    (
        "ops_in_flight_per_connection_max",
        "limits.anonymous.requests_pending_max and limits.authenticated.requests_pending_max",
    ),
    ("search_entries_max", "limits.anonymous.search_entries_max and limits.authenticated.search_entries_max"),
    ("search_time_max_s", "limits.anonymous.search_time_max_s and limits.authenticated.search_time_max_s"),
    ("idle_timeout_s", "limits.anonymous.idle_timeout_s and limits.authenticated.idle_timeout_s"),
    (
        "entry_cache_entries_max",
        "limits.cache_bytes (one budget in bytes for the whole server, entry caches and redb's page caches together)",
    ),
    (
        "storage_cache_bytes_per_shard",
        "limits.cache_bytes (one budget in bytes for the whole server, entry caches and redb's page caches together)",
    ),
];

impl Default for Log {
    fn default() -> Self {
        Self { level: "info".into(), format: "text".into() }
    }
}

/// The rootDN's password when no config file is given at all (`ferrodir serve` as the
/// README's first command runs it): known to everyone, so serving it beyond loopback is
/// refused (serve/exposure.rs).
pub const BUILT_IN_ROOT_PASSWORD: &str = "secret";

impl Config {
    /// The configuration with no config file: the defaults, the example entries, and the
    /// built-in root password, for a first try on loopback. A config file that leaves out
    /// `root_password` gets none (docs/DECISIONS.md, "No known credentials off loopback").
    pub fn embedded() -> Self {
        Self { root_password: BUILT_IN_ROOT_PASSWORD.into(), ..Self::default() }
    }

    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config {}: {e}", path.display()))?;
        let mut config =
            Self::parse(&text).map_err(|e| anyhow::anyhow!("bad config {}: {e:#}", path.display()))?;
        config.source = Some(path.to_path_buf());
        Ok(config)
    }

    /// Parses and checks a config's TOML text.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let config: Self = toml::from_str(text)?;
        config.check()?;
        Ok(config)
    }

    /// What TOML alone can't say: retired keys (named with their replacements) and limits
    /// that contradict each other.
    /// `password_scheme` with its costs (`password_argon2_*`, `password_pbkdf2_rounds`).
    pub fn storage_scheme(&self) -> anyhow::Result<ferrodir_router::StorageScheme> {
        let cost = ferrodir_router::Argon2Cost {
            m_kib: self.password_argon2_m_kib,
            t: self.password_argon2_t,
            p: self.password_argon2_p,
        };
        ferrodir_router::StorageScheme::parse(&self.password_scheme)?
            .with_costs(cost, self.password_pbkdf2_rounds)
            .map_err(|e| anyhow::anyhow!(e))
    }

    pub fn check(&self) -> anyhow::Result<()> {
        if self.testing.is_some() && !cfg!(feature = "fault-injection") {
            anyhow::bail!(
                "the [testing] table (fault injection for the crash tests) is not available in this build: \
                 remove it, or build ferrodir with --features fault-injection (never for real data)"
            );
        }
        self.storage_scheme()?;
        crate::replication::settings::check(&self.replication, &self.suffixes, self.multi_provider)?;
        if self.server_id > ferrodir_shard::SERVER_ID_MAX {
            anyhow::bail!("server_id {} is out of range: 0-4095 (three hex digits in a CSN)", self.server_id);
        }
        if self.multi_provider && self.server_id == 0 {
            anyhow::bail!(
                "multi_provider = true needs a server_id of this node's own, 1-4095 (every node of the mesh a different one)"
            );
        }
        self.refint.check()?;
        self.audit_log.check()?;
        self.access_log.check_rotation()?;
        self.ppolicy.check()?;
        self.dynlist.check()?;
        if self.changelog.max_entries == 0 {
            anyhow::bail!("changelog.max_entries must be at least 1");
        }
        self.limits.check_values()?;
        if self.memberof_chain_depth_max == 0 || self.memberof_chain_entries_max == 0 {
            anyhow::bail!("memberof_chain_depth_max and memberof_chain_entries_max must be at least 1");
        }
        self.limits.check_buffers()?;
        Ok(())
    }

    /// The index directives in force: `index`, plus an equality index for every refint
    /// attribute when refint is on (it finds references through them), and of member and
    /// uniqueMember with `memberof` on, whatever `index` says: memberOf is read from them
    /// (shard::memberof), so without them it would silently have no values.
    pub fn index_directives(&self) -> Vec<String> {
        let mut directives = self.index.clone();
        if self.refint.enabled {
            directives.extend(self.refint.attributes.iter().map(|a| format!("{a} eq")));
        }
        if self.memberof {
            directives.push(MEMBEROF_INDEX.to_string());
        }
        directives
    }

    /// Which workers take client connections, spread evenly over the `shards` workers:
    /// `connection_workers` of them, or one per CPU this process may run on
    /// (`available_parallelism` honours the affinity mask and the cgroup's CPU quota).
    pub fn connection_worker_indices(&self, shards: usize) -> Vec<usize> {
        let wanted = match self.connection_workers {
            0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            n => n,
        };
        spread(wanted, shards)
    }

    /// Threads of the search pool.
    pub fn search_thread_count(&self) -> usize {
        if self.search_threads > 0 {
            self.search_threads
        } else {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        }
    }

    /// Threads of the password hash pool: `password_hash_threads`, or one per core but one,
    /// so that a burst of argon2 binds always leaves a core to the workers.
    pub fn password_hash_thread_count(&self) -> usize {
        if self.password_hash_threads > 0 {
            return self.password_hash_threads;
        }
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        cores.saturating_sub(1).max(1)
    }

    /// `password_hash_on_write`, defaulted by the access profile.
    pub fn password_hash_on_write(&self) -> bool {
        self.password_hash_on_write.unwrap_or(self.access != "open-read")
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

/// `wanted` of `count` indices (at least one, at most all), spread evenly: 2 of 16 are
/// 0 and 8, so that the workers taking connections don't crowd one end.
fn spread(wanted: usize, count: usize) -> Vec<usize> {
    let taken = wanted.clamp(1, count.max(1));
    (0..taken).map(|k| k * count.max(1) / taken).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_workers_are_spread_and_bounded_by_the_shards() {
        assert_eq!(spread(1, 2), vec![0]);
        assert_eq!(spread(2, 16), vec![0, 8]);
        assert_eq!(spread(16, 2), vec![0, 1], "never more than the workers there are");
        assert_eq!(spread(3, 4), vec![0, 1, 2]);
        assert_eq!(spread(0, 4), vec![0], "at least one");
        let config = Config { connection_workers: 4, ..Config::default() };
        assert_eq!(config.connection_worker_indices(8), vec![0, 2, 4, 6]);
    }

    #[test]
    fn sample_config_parses() {
        let text = include_str!("../../deploy/ferrodir.toml");
        let config = Config::parse(text).unwrap();
        assert_eq!(config.suffixes, vec!["dc=example,dc=com".to_string()]);
        // The sample states the defaults.
        let limits = config.limits.resolve(&DnNormalizer::plain()).unwrap();
        assert_eq!(limits, Limits::default().resolve(&DnNormalizer::plain()).unwrap());
        assert_eq!(limits.anonymous, ClassLimits::ANONYMOUS);
        assert_eq!(limits.authenticated, ClassLimits::AUTHENTICATED);
        assert_eq!(limits.anonymous.pdu_bytes_max, 262_143);
        assert_eq!(limits.authenticated.requests_pending_max, 1000);
        let defaults = Config::default();
        assert_eq!(config.limits.disk_free_min_bytes, DISK_FREE_MIN_BYTES_DEFAULT);
        assert_eq!(config.password_scheme, defaults.password_scheme);
        assert_eq!(config.password_hash_threads, defaults.password_hash_threads);
        assert_eq!(config.password_hash_queue_max, defaults.password_hash_queue_max);
        assert_eq!(config.password_hash_threads_nice, defaults.password_hash_threads_nice);
        assert_eq!(config.password_hash_on_write(), defaults.password_hash_on_write());
        // Turned on by the sample, on a loopback port that is not the exporters' 9330/9389.
        assert_eq!(config.metrics_listen, Some(SocketAddr::from(([127, 0, 0, 1], 9390))));
        assert!(config.require_tls_for_binds && config.tls.is_none());
        assert_eq!(config.audit_log.path, None, "the sample leaves the audit log off");
        assert_eq!(config.audit_log.queue_bytes_max, defaults.audit_log.queue_bytes_max);
        // The sample's [changelog] states the defaults.
        assert!(!config.changelog.enabled);
        assert_eq!(config.changelog.max_entries, defaults.changelog.max_entries);
        assert_eq!(config.changelog.max_age_s, defaults.changelog.max_age_s);
    }

    #[test]
    fn changelog_keys_parse_and_max_entries_is_shared_out() {
        let config = Config::parse("[changelog]\nenabled = true\nmax_entries = 10\nmax_age_s = 0\n").unwrap();
        assert!(config.changelog.enabled);
        assert_eq!((config.changelog.max_entries, config.changelog.max_age_s), (10, 0));
        assert_eq!(config.changelog.per_shard(4), 3, "rounded up");
        assert_eq!(config.changelog.per_shard(16), 1, "at least one");
        let zero = Config::parse("[changelog]\nenabled = true\nmax_entries = 0\n").unwrap_err();
        assert!(zero.to_string().contains("changelog.max_entries"), "{zero}");
        assert!(Config::parse("[changelog]\nmax_rows = 1\n").is_err(), "an unknown key");
    }

    #[test]
    fn tls_and_sasl_keys_parse() {
        let config = Config::parse(
            "listen_ldaps = \"127.0.0.1:636\"\nlisten_ldapi = \"/run/x\"\n\
             [[authz_regexp]]\nmatch = \"a\"\nreplace = \"cn=b\"\n\
             [tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\nclient_certs = \"try\"",
        )
        .unwrap();
        let tls = config.tls.unwrap();
        assert_eq!(
            (tls.client_certs.as_str(), tls.min_version.as_str(), tls.reload_poll_s),
            ("try", "1.2", 60)
        );
        assert_eq!(config.authz_regexp.len(), 1);
        assert!(Config::parse("[tls]\ncert = \"x\"").is_err(), "unknown keys in [tls] are refused");
    }

    #[test]
    fn transaction_operations_max_reaches_the_router_and_is_at_least_1() {
        let config = Config::parse("[limits]\ntransaction_operations_max = 7").unwrap();
        let limits = config.limits.resolve(&DnNormalizer::plain()).unwrap();
        assert_eq!(limits.request.transaction_operations_max, 7);
        assert_eq!(Config::default().limits.transaction_operations_max, 1000);
        let error =
            Config::parse("[limits]\ntransaction_operations_max = 0").map(|_| ()).unwrap_err().to_string();
        assert!(error.contains("transaction_operations_max"), "{error}");
    }

    #[test]
    fn the_testing_table_needs_the_fault_injection_feature() {
        let parsed = Config::parse("[testing]\nsimulate_power_cut = true");
        if cfg!(feature = "fault-injection") {
            assert!(parsed.unwrap().testing.is_some_and(|t| t.simulate_power_cut));
        } else {
            let message = parsed.unwrap_err().to_string();
            assert!(message.contains("[testing]") && message.contains("fault-injection"), "{message}");
        }
    }

    #[test]
    fn access_rules_are_tables_of_slapd_text() {
        let text = "access = \"open-read\"\n[[access_rules]]\nto = 'attrs=userPassword'\n\
                    by = ['self write', 'anonymous auth', '* none']\n[[access_rules]]\nto = '*'\nby = ['* read']\n";
        let config = Config::parse(text).unwrap();
        assert_eq!(config.access_rules.len(), 2);
        assert_eq!(config.access_rules[0].by, ["self write", "anonymous auth", "* none"]);
        assert!(Config::parse("[[access_rules]]\nto = '*'\nby = ['* read']\nwho = 'x'").is_err());
        assert!(Config::parse("[[access_rules]]\nto = '*'").is_err(), "by is required");
    }

    #[test]
    fn unknown_keys_are_rejected() {
        assert!(toml::from_str::<Config>("listn = \"127.0.0.1:1\"").is_err());
        assert!(Config::parse("[limits.anonymous]\npdu_max = 1").is_err());
    }

    #[test]
    fn retired_keys_name_their_replacements() {
        let error = Config::parse("[limits]\npdu_bytes_max = 100").unwrap_err().to_string();
        assert!(error.contains("limits.anonymous.pdu_bytes_max"), "{error}");
        let error = Config::parse("[limits]\nops_in_flight_per_connection_max = 8").unwrap_err().to_string();
        assert!(error.contains("requests_pending_max"), "{error}");
        for key in ["entry_cache_entries_max = 100000", "storage_cache_bytes_per_shard = 1073741824"] {
            let error = Config::parse(&format!("[limits]\n{key}")).unwrap_err().to_string();
            assert!(error.contains("limits.cache_bytes"), "{error}");
        }
    }

    /// One budget whatever the shard count: a quarter to redb's page caches while serving,
    /// the rest to the entry caches; offline tools give it all to redb.
    #[test]
    fn the_cache_budget_does_not_grow_with_the_shards() {
        let limits = Config::parse("[limits]\ncache_bytes = 1600").unwrap().limits;
        for shards in [1, 2, 16] {
            let total = shards
                * (limits.storage_cache_bytes_per_file(shards, true)
                    + limits.entry_cache_bytes_per_shard(shards));
            assert!(total <= 1600 && total + 2 * shards >= 1600, "{shards} shards: {total}");
            assert!(shards * limits.storage_cache_bytes_per_file(shards, false) <= 1600);
        }
        assert_eq!(limits.storage_cache_bytes_per_file(2, true), 200);
        assert_eq!(limits.entry_cache_bytes_per_shard(2), 600);
        assert_eq!(Config::default().limits.cache_bytes, 1 << 30);
    }

    #[test]
    fn identities_override_the_authenticated_class() {
        let text = r#"
[limits.authenticated]
search_entries_max = 100
[[limits.identities]]
dn = "cn=Replicator,dc=example,dc=com"
search_entries_max = 0
search_time_max_s = 0
"#;
        let limits = Config::parse(text).unwrap().limits.resolve(&DnNormalizer::plain()).unwrap();
        assert_eq!(limits.authenticated.paged_total_entries_max, 100, "paged limits follow the size limit");
        let key: Vec<String> = ["cn=replicator", "dc=example", "dc=com"].map(String::from).into();
        let replicator = &limits.identities[&key];
        assert_eq!((replicator.search_entries_max, replicator.paged_page_entries_max), (0, 0));
        assert_eq!(replicator.pdu_bytes_max, ClassLimits::AUTHENTICATED.pdu_bytes_max);
    }

    #[test]
    fn password_storage_keys() {
        let config = Config::default();
        assert!(config.password_hash_on_write());
        assert_eq!(config.password_scheme, "{ARGON2}");
        assert!(config.password_hash_thread_count() >= 1);
        let open = Config::parse("access = \"open-read\"").unwrap();
        assert!(!open.password_hash_on_write(), "slapd without hash_cleartext");
        let forced = Config::parse("access = \"open-read\"\npassword_hash_on_write = true").unwrap();
        assert!(forced.password_hash_on_write());
        let error = Config::parse("password_scheme = \"{MD5}\"").unwrap_err().to_string();
        assert!(error.contains("password_scheme") && error.contains("{MD5}"), "{error}");
        assert!(Config::parse("password_scheme = \"{PBKDF2-SHA512}\"").is_ok());
    }

    /// A config file that leaves out root_password gets none (the rootDN cannot bind); only
    /// the embedded default, with no config file, has the built-in one.
    #[test]
    fn only_the_embedded_default_has_a_root_password() {
        assert_eq!(Config::parse("shards = 1").unwrap().root_password, "");
        assert_eq!(Config::default().root_password, "");
        assert_eq!(Config::embedded().root_password, BUILT_IN_ROOT_PASSWORD);
        assert_eq!(Config::parse("root_password = \"x\"").unwrap().root_password, "x");
    }

    #[test]
    fn the_audit_log_is_on_when_its_path_is_set() {
        assert_eq!(Config::default().audit_log.path, None);
        let config = Config::parse("[audit_log]\npath = \"/var/log/ferrodir/audit.ldif\"").unwrap();
        assert_eq!(config.audit_log.path.as_deref(), Some("/var/log/ferrodir/audit.ldif"));
        assert_eq!(config.audit_log.queue_bytes_max, 64 << 20);
        for bad in ["path = \"\"", "path = \"-\"", "path = \"/x\"\nqueue_bytes_max = 10"] {
            let error = Config::parse(&format!("[audit_log]\n{bad}")).unwrap_err().to_string();
            assert!(error.contains("audit_log."), "{bad}: {error}");
        }
        assert!(Config::parse("[audit_log]\nenabled = true").is_err(), "on by its path only");
    }

    #[test]
    fn read_budget_must_hold_the_largest_pdu() {
        let text = "[limits]\nread_buffers_bytes_max = 1000";
        assert!(Config::parse(text).is_err());
    }

    #[test]
    fn dynlist_members_max_parses_and_is_bounded() {
        assert_eq!(Config::default().dynlist.members_max, 10_000);
        let config = Config::parse("[dynlist]\nmembers_max = 5").unwrap();
        assert_eq!(config.dynlist.members_max, 5);
        let error = Config::parse("[dynlist]\nmembers_max = 0").unwrap_err().to_string();
        assert!(error.contains("dynlist.members_max"), "{error}");
    }

    #[test]
    fn ppolicy_names_a_default_policy_by_dn() {
        assert!(Config::default().ppolicy.default_policy.is_none());
        let text = "[ppolicy]\ndefault_policy = \"cn=default,ou=policies,dc=example,dc=com\"";
        let config = Config::parse(text).unwrap();
        assert_eq!(
            config.ppolicy.default_policy.as_deref(),
            Some("cn=default,ou=policies,dc=example,dc=com")
        );
        let error = Config::parse("[ppolicy]\ndefault_policy = \"not a dn\"").unwrap_err().to_string();
        assert!(error.contains("ppolicy.default_policy"), "{error}");
        assert!(Config::parse("[ppolicy]\ndefault = \"cn=x\"").is_err(), "unknown keys are refused");
    }
}
