//! Ferrodir's server: sockets, TLS, connections, config, metrics, replication and the data
//! directory's tools, as a library. The `ferrodir` binary (main.rs) is its command line;
//! tests run the same server in process through [`serve`].
//!
//! # Layout
//! - `config.rs`: the TOML configuration, which every command reads.
//! - `serve/`: the serving path: `runtime` (the phases of [`serve`]: worker threads, shard
//!   actors, the coordinator, the accept loop, shutdown), `listeners`, `per_ip`,
//!   `connection` (one client connection's read and write loops), `stream`, `tls`,
//!   `search_pool`, `priority`, `systemd`, `accesslog`, `monitor`, `paged_key`.
//! - `directory/`: what the router serves with, built from the config and the data
//!   directory (`refint`: `[refint]` resolved).
//! - `data/`: the data directory and its tools: `store` (opening the shards), `manifest`
//!   (what a data directory is fixed to, its file names), `load` and `export` (LDIF in and
//!   out; `import`: the import command's staging directory and progress display; each
//!   shard's write stage is the shard crate's bulk loader), `reindex`, `backup` (backup and restore), `cut` (a consistent
//!   cut of every shard, taken while serving), `compact`, `verify`.
//! - `commands.rs`: the offline commands (import, verify, export, ...), one function each;
//!   `prompt.rs`: reading a password for `hash-password`.
//! - `admin/`: the admin socket through which export and backup reach a serving server
//!   (the protocol, its server and its client).
//! - `metrics/`: the HTTP endpoint; `replication/`: the RFC 4533 consumer
//!   (`[[replication]]`): its connection to the provider, applying, the cookie store and its
//!   status (metrics, cn=Monitor, /readyz).

// The allocator main.rs installs. Linked into the library too: the import tunes it
// (`mi_option_set` in data/import.rs), in the binary and in tests alike.
extern crate mimalloc as _;

mod admin;
mod config;
mod data;
mod directory;
mod metrics;
mod prompt;
mod replication;
mod serve;

pub mod commands;

// The public interface is:
pub use config::Config;
pub use serve::listeners::Listen;
pub use serve::runtime::serve;
