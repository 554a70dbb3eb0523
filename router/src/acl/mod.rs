//! Access rules in slapd's model (slapd.access(5)): `access to <what> by <who> <level>`,
//! first match wins, an implicit `by * none` after every rule's clauses and after the last
//! rule, and the rootDN above them all.
//!
//! - [`rule`]: the compiled rules and levels.
//! - [`parse`]: slapd's syntax (the subset enforced) and the built-in rule sets.
//! - [`decide`]: one question (a requester, an entry, an attribute) answered.
//! - [`view`]: a search's rules decided once per search, and per entry on the shards
//!   (`shard::rights::EntryRules`) only where they differ between entries.
//!
//! Operations never call these directly: they ask `crate::access`.

pub mod decide;
pub mod parse;
pub mod rule;
pub mod view;

pub use parse::{compile, profile, RuleError, RuleText};
pub use rule::{Level, RuleSet};
