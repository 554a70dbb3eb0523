//! The serving path: worker threads and the accept loop (`runtime`), connections
//! (`connection`) over plain TCP, TLS or ldapi (`stream`), TLS configuration and reload
//! (`tls`), the search pool (`search_pool`) and thread priorities (`priority`), systemd
//! notification (`systemd`), the access-log writer (`accesslog`), what cn=Monitor reads
//! (`monitor`), and `[refint]` resolved for the router (`refint`).

pub mod accesslog;
pub mod connection;
pub mod monitor;
pub mod priority;
pub mod runtime;
pub mod search_pool;
pub mod stream;
pub mod systemd;
pub mod tls;
