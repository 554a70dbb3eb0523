//! Where a named entry is: what resolving a DN gives ([`crate::resolve`]), and what the
//! operations hand the coordinator for a change. A value type below both, so that the
//! coordinator needs nothing of the resolver (which reads through the worker, which holds
//! the coordinator's address).

use ferrodir_shard::EntryId;

/// An entry that exists, and where its name lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    pub id: EntryId,
    pub parent: EntryId,
    pub rdn_norm: String,
    /// Whether it is a container in the skeleton the resolution used.
    pub container: bool,
}
