//! The LDAPv3 data model and wire format. No I/O, no async runtime.
//!
//! # Layout
//! - [`frame`]: find one whole LDAPMessage in a byte stream (length, indefinite-length and
//!   nesting checks) before any decoder runs.
//! - [`message`]: the RFC 4511 ASN.1 module as Rust types, encoded with `rasn`'s BER codec,
//!   plus [`message::decode_message`] which decodes the messageID first.
//! - [`filter`]: the search filter model (shared with the wire types) and the RFC 4515
//!   string parser and printer.
//! - [`dn`]: distinguished names (RFC 4514): parse, print, normalise (with an explicit
//!   [`value::AvaNormalizer`]; [`NormDn`]: a DN normalised once).
//! - [`value`]: value normalisation used by DNs, indices and filter evaluation.
//! - `escape.rs`: RFC 4514 value escaping, which `dn` and `value` share.
//! - [`entry`]: an entry's attributes as the server stores and returns them.
//! - [`ldif`]: RFC 2849 reader and writer.
//! - [`result_code`]: LDAP result codes as an open set (RFC 4511 §4.1.9 and later RFCs).
//! - `proptests.rs` (tests only): round-trip properties of the message, filter and DN codecs.

#![forbid(unsafe_code)]
// Library code never panics on input: errors are typed (CONTRIBUTING.md, "Nothing a
// client sends can panic the server"). Tests and benches may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)
)]

// The public interface is: the data model's modules below, each a value type or codec other
// crates build on (the wire types, DNs, filters, schema, LDIF), and the common names
// re-exported at the root. `escape` is private: callers print DNs through `dn`.
pub mod dn;
pub mod entry;
mod escape;
pub mod filter;
pub mod frame;
pub mod ldif;
pub mod message;
pub mod result_code;
pub mod schema;
pub mod value;

#[cfg(test)]
mod proptests;

pub use dn::{Dn, NormDn, Rdn};
pub use entry::{Attribute, Entry};
pub use result_code::ResultCode;
