//! End-to-end tests: the real `ferrodir` binary on a loopback port, driven by real clients
//! (the ldap3 crate, OpenLDAP's command-line tools) and by raw BER for broken input.

mod accesslog;
mod acl;
mod backup;
mod cache;
mod cli;
mod concurrency;
mod fanout;
mod faults;
mod footprint;
mod harness;
mod hostile;
mod import;
mod isolation;
mod limits;
mod memberof;
mod metrics;
mod monitor;
mod ops;
mod paging;
mod passwords;
mod persistence;
mod raw;
mod refint;
mod replication;
mod semantics;
mod sort;
mod syncrepl;
mod systemd;
mod tls;
mod verify;
