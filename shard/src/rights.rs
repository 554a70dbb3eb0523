//! What a requester may see of the entries a search examines, in the form a shard can apply
//! without knowing anything of access rules (those live in the router, `router::acl`).
//!
//! The router decides, once per search, either one answer for every entry
//! ([`AttrSelection::hidden`](crate::query::search::AttrSelection) and `unsearchable`, the common
//! case: the rules don't depend on which entry it is) or hands the shard an [`EntryRules`]
//! object that answers per entry. The shard asks it before it evaluates the filter, and
//! leaves out an entry the requester may not read, silently, as slapd does.

use std::fmt::Debug;
use std::sync::Arc;

use crate::entry::record::EntryRecord;
use crate::id::EntryId;
use crate::skeleton::Skeleton;

/// A set of attribute types by canonical name (see `rules::RuleTable`): the listed types,
/// or every type but the listed ones. Access rules need both: "userPassword" is hidden from
/// most requesters, and `to attrs=entry,cn by * read` leaves only cn visible.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeSet {
    /// True: the set is every type *except* `names`.
    complement: bool,
    names: Vec<String>,
}

impl TypeSet {
    /// No type at all.
    pub const fn none() -> Self {
        Self { complement: false, names: Vec::new() }
    }

    /// Exactly `names` (canonical).
    pub fn of(names: Vec<String>) -> Self {
        Self { complement: false, names }
    }

    /// Every type but `names` (canonical).
    pub fn all_but(names: Vec<String>) -> Self {
        Self { complement: true, names }
    }

    pub fn contains(&self, canonical: &str) -> bool {
        self.names.iter().any(|name| name == canonical) != self.complement
    }

    /// Whether the set holds no type, so that checking it can be skipped.
    pub fn is_empty(&self) -> bool {
        !self.complement && self.names.is_empty()
    }
}

/// What one requester may do with one entry's attributes, as a search needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntryRights {
    /// Types whose values may not be returned (no `read`).
    pub hidden: TypeSet,
    /// Types a filter may not test (no `search`): an assertion on one is Undefined.
    pub unsearchable: TypeSet,
}

/// Per-entry access, for a search whose rules depend on the entry (a rule for a subtree or
/// a filter, or `self`). Implemented by the router; called on the search pool's threads.
pub trait EntryRules: Send + Sync + Debug {
    /// The requester's rights on entry `id`, or None when it may not read the entry at all
    /// (the entry is left out of the results without a word). `record` holds at least the
    /// attributes [`Self::filter_names`] names.
    fn rights(&self, tree: &Skeleton, id: EntryId, record: &EntryRecord) -> Option<Arc<EntryRights>>;

    /// The attribute names (lowercased, every name and OID) the rules' own filters read, so
    /// that a scan decodes them before it asks; None: the rules need the whole entry.
    fn filter_names(&self) -> Option<&[String]>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_set_is_a_list_or_its_complement() {
        let hidden = TypeSet::of(vec!["userpassword".into()]);
        assert!(hidden.contains("userpassword") && !hidden.contains("cn"));
        let only_cn_visible = TypeSet::all_but(vec!["cn".into()]);
        assert!(!only_cn_visible.contains("cn") && only_cn_visible.contains("sn"));
        assert!(TypeSet::none().is_empty() && !hidden.is_empty() && !TypeSet::all_but(vec![]).is_empty());
    }
}
