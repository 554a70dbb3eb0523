//! Where a search looks: a leaf that the candidate walks and the search both name.

use crate::id::EntryId;

/// Where a search looks, with the base already resolved to an id.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Base(EntryId),
    OneLevel(EntryId),
    Subtree(EntryId),
    /// Every entry below the base, not the base itself (OpenLDAP's subordinate scope, 3).
    Children(EntryId),
}
