//! Benchmark tools for Ferrodir. They speak raw BER over TCP (framed with
//! [`ferrodir_proto::frame::check_frame`], encoded with [`ferrodir_proto::message`]) so that
//! the tools themselves cost as little per operation as possible.
//!
//! # Layout
//! - [`wire`]: the few BER helpers both tools need on their hot path: read a whole
//!   message's ID and operation tag without decoding it, and write a message around
//!   pre-encoded operation bytes.
//! - [`responder`]: `ldap-null-responder`, a server that does no directory work at all and
//!   answers every request with a canned success; the ceiling a load generator and loopback
//!   TCP reach on this machine.
//! - [`latency`]: `ldap-latency`, a closed-loop client that measures per-operation latency
//!   into an HDR histogram; [`template`] renders the entry names it asks for and
//!   [`xorshift`] picks them, deterministically, uniformly or by Zipf's law ([`zipf`]). [`tls`]: its LDAPS and StartTLS
//!   connections (rustls, ring; full handshakes, the server verified against a CA file).
//! - [`isolation`]: `ldap-isolation`, unindexed scans beside a lookup-and-modify probe, and
//!   scans stopped early by Abandon, a close or a limit (issue #9).
//! - [`searchload`]: `ldap-search-load`, one search in a closed loop with the paged-results
//!   and sort controls (issue #11), and a check mode that decodes the answer.
//! - [`loginstorm`]: `ldap-login-storm`, logins as SSSD or Keycloak do them (find the
//!   user, bind as it, read its groups by member and by memberOf) on pooled connections
//!   (issue #28).
//! - [`repllag`]: `ldap-repl-lag`, replication lag from a provider to a consumer under a
//!   sustained write load (issue #13).
//! - [`conn`]: the plain-TCP connection the request/response tools share (stream,
//!   buffers, messageIDs, framing, a simple bind).
//! - [`error`]: the crate's one error type.
//! - `bin/`: the command lines; they only parse arguments and call the library.

pub mod conn;
pub mod error;
pub mod isolation;
pub mod latency;
pub mod loginstorm;
pub mod repllag;
pub mod responder;
pub mod searchload;
pub mod template;
pub mod tls;
pub mod wire;
pub mod xorshift;
pub mod zipf;

pub use error::Error;
