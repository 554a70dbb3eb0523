//! Routing for Ferrodir: from a decoded request to the shards and back.
//!
//! # Layout
//! - `session`: the per-connection router — decodes each PDU once, captures the identity,
//!   dispatches operations concurrently, answers by messageID.
//! - `op`: one file per LDAP operation, and `op::context`: what each runs with.
//! - `worker`: what the connections on one worker thread share (local shard, skeleton copy,
//!   addresses of the other shards).
//! - `resolve`: DN → entry id, through the skeleton and one DN→ID lookup; `located`: the
//!   result, which the coordinator takes too.
//! - `requester`: who asks and over what transport (value types every layer reads).
//! - [`coordinator`], `intent`: the actor that changes the tree's shape across shards, and
//!   its durable intent log.
//! - `access`, [`acl`], `password`: who may do what (the one place operations ask, and
//!   the access rules behind it), and checking passwords.
//! - `config`: naming contexts, root identity, access rules.
//! - `limits`: limits per identity class (size, time, PDU, pending requests, idle) and
//!   on a request's shape.
//! - `error`: the one place failures become LDAP result codes.
//! - [`accesslog`]: access-log lines (389-ds's format or JSON), queued per worker.
//! - [`auditlog`]: the audit log's records (slapo-auditlog's LDIF), queued per worker in
//!   the access log's buffers.
//! - [`stats`]: per-worker counters, summed by the metrics endpoint at scrape time.
//! - `monitor`: cn=Monitor, slapd's back-monitor subtree, built from those counters.
//! - `ppolicy`: password policy (slapd's ppolicy overlay): policies read from the tree,
//!   lockout and the bookkeeping of binds.
//! - `changelog`: cn=changelog, the retro changelog the shards record with every change.

#![forbid(unsafe_code)]
// Library code never panics on input: errors are typed (CONTRIBUTING.md, "Nothing a
// client sends can panic the server"). Tests and benches may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)
)]

mod access;
pub mod accesslog;
pub mod acl;
pub mod auditlog;
mod authz;
mod changelog;
mod config;
pub mod coordinator;
pub mod disk;
mod error;
mod intent;
mod limits;
mod located;
mod memberids;
mod monitor;
mod op;
mod password;
mod ppolicy;
mod requester;
mod resolve;
mod session;
pub mod stats;
mod unique;
mod worker;

#[cfg(test)]
mod testkit;

// The public interface is:
//
// Flat names, for building and running the router (what the server wires together):
pub use config::{AuthzPolicy, DynlistConfig, PpolicyConfig};
pub use config::{AuthzRule, DirectoryConfig, PagedConfig, RemoteReads, ReplicatedArea, Suffix};
pub use coordinator::RefintConfig;
pub use error::LdapError;
pub use intent::{Intent, IntentLog};
pub use limits::{ClassLimits, LimitsConfig, RequestLimits, SortLimits, UnindexedPolicy};
pub use located::Located;
pub use monitor::{ConnectionEntry, ConnectionInfo, ConsumerFacts, ListenerInfo, ServerFacts, ShardFacts};
pub use op::context::Outbound;
pub use op::paged::cookie::CookieKey;
pub use op::syncrepl::stats::{ProviderStats as SyncreplStats, Snapshot as SyncreplSnapshot};
pub use op::transaction::recover as recover_transactions;
pub use password::{verify as password_matches, Argon2Cost, HashPool, PasswordConfig, StorageScheme};
pub use requester::Transport;
pub use resolve::{locate, locate_parent_of};
pub use session::{Flow, Session};
pub use unique::{UniqueRule, Uniqueness};
pub use worker::Worker;
//
// and five facade modules, where flat names would be vague or clash:
// - `coordinator`: the actor that changes the tree's shape across shards, and its messages
//   (`Coordinator`, `AddUnder`, `DeleteEntry`, `MoveEntry`, `MaybeDemote`, `Origin`,
//   `Recover`, `Ping`, `BetweenChanges`);
// - `acl`: compiling access rules (`compile`, `profile`, `RuleSet`, `RuleText`);
// - `stats`: the per-worker counters the metrics endpoint sums (`WorkerStats`, `OpKind`,
//   `ResultClass`, `BindMethod`, `CloseReason`, `Listener`, `Histogram`, `bump`,
//   `LATENCY_BUCKETS_S`; the syncrepl provider's are `syncrepl_snapshot` above);
// - `accesslog`: access-log lines and the per-worker queue (`LogSink`, `LogBuffer`,
//   `LogFormat`, `Line`, `Value`);
// - `auditlog`: the audit log's per-worker sink (`AuditSink`), over the same `LogBuffer`.
