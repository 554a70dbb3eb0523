//! The serving path: starting, running and stopping the server (`runtime`), its listeners
//! (`listeners`) and the per-IP limit at accept (`per_ip`), connections (`connection`) over
//! plain TCP, TLS or ldapi (`stream`), TLS configuration and reload (`tls`), the search
//! pool (`search_pool`) and thread priorities (`priority`), systemd notification
//! (`systemd`), the log writer thread (`logfile`) behind the access log (`accesslog`) and
//! the audit log (`auditlog`), what cn=Monitor reads (`monitor`), the key that seals
//! paged-results cookies (`paged_key`), reloading the config (`reload`), online index
//! builds (`indexing`), and the refusal
//! to serve known credentials beyond loopback (`exposure`).

pub mod accesslog;
pub mod auditlog;
pub mod connection;
pub mod diskwatch;
pub mod exposure;
pub mod indexing;
pub mod listeners;
pub mod logfile;
pub mod monitor;
pub mod paged_key;
pub mod per_ip;
pub mod prewarm;
pub mod priority;
pub mod reload;
pub mod rotation;
pub mod runtime;
pub mod search_pool;
pub mod stream;
pub mod systemd;
pub mod tls;
