//! End-to-end tests: the real `ferrodir` binary on a loopback port, driven by real clients
//! (the ldap3 crate, OpenLDAP's command-line tools) and by raw BER for broken input; and
//! the same server run in process through `ferrodir_server::serve` (`in_process`). When to
//! use which: harness.rs.

mod accesslog;
mod acl;
mod aliases;
mod auditlog;
mod backup;
mod bindtiming;
mod cache;
mod cancel;
mod changelog;
mod cli;
mod concurrency;
mod credentials;
mod dynlist;
mod fanout;
mod faults;
mod footprint;
mod harness;
mod hostile;
mod import;
mod in_process;
mod isolation;
mod limits;
mod memberof;
mod mesh;
mod mesh_faults;
mod metrics;
mod monitor;
mod online_index;
mod ops;
mod paging;
mod passwords;
mod persistence;
mod ppolicy;
mod proxy_authz;
mod raw;
mod refint;
mod reload;
mod replication;
mod scram;
mod semantics;
mod sort;
mod startcache;
mod syncrepl;
mod systemd;
mod tls;
mod transactions;
mod unique;
mod verify;
mod write_controls;
