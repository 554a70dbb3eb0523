//! Answering a search on one shard: which entries it examines (candidates, the undecoded
//! prefilter), filter evaluation, the inline and pooled paths (search, scan), sort keys, and
//! the signals that stop a search.

pub(crate) mod candidates;
pub(crate) mod eval;
pub(crate) mod prefilter;
pub(crate) mod scan;
pub(crate) mod scope;
pub(crate) mod search;
pub(crate) mod sortkeys;
pub(crate) mod stop;
