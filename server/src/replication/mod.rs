//! The replication consumer (RFC 4533, "syncrepl"): this server keeps a subtree in step
//! with a provider (slapd with syncprov, or another ferrodir), one task per
//! `[[replication]]` entry.
//!
//! # Layout
//! - [`settings`]: the `[[replication]]` keys, their checks, slapd's retry schedule.
//! - [`client`]: the connection to the provider (TCP, LDAPS or StartTLS, a simple bind),
//!   our own codec, bounded PDUs.
//! - [`consumer`]: one consumer's loop: the sync search, its phases, cookie commits,
//!   retries.
//! - [`apply`]: applying entries, deletes and present phases to the shards with
//!   `Origin::Replication`.
//! - [`cookie`]: the durable cookie, committed after the data it covers.
//! - [`mesh`]: what a consumer needs when this node is one provider of a mesh
//!   (`multi_provider`): the uuid map following local writes, tombstones, conflicts.
//! - [`merge`]: two versions of one entry merged attribute by attribute (a mesh node).
//! - [`status`]: state, lag and counters for metrics, cn=Monitor and /readyz.
//!
//! Each consumer runs on one worker thread (the one of shard `i mod N` for the i-th entry),
//! as a connection would, and writes through the same shard actors and coordinator.

pub mod apply;
pub mod client;
pub mod consumer;
pub mod cookie;
pub mod merge;
pub mod mesh;
pub mod settings;
pub mod status;
