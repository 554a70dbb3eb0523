//! Indices: the key layout of the shard's tables, which attributes are indexed and the keys
//! an entry contributes, the equality-key rule they share, and the two summaries (Bloom
//! filters, the gram table) that let a search skip whole shards, and the marks that say an
//! index is complete on a shard.

pub(crate) mod bloom;
pub(crate) mod config;
pub(crate) mod eqkey;
pub(crate) mod gramsummary;
pub mod keys;
pub(crate) mod marks;
