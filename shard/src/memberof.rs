//! memberOf, a virtual operational attribute: the groups whose `member` or `uniqueMember`
//! names an entry, computed when a search asks for it and never stored.
//!
//! The source of truth is the equality index of member and uniqueMember (both `eq` in the
//! default config; the server refuses to start with memberOf on and either index missing).
//! An equality posting is keyed by (type, normalised value, entry id), so the postings under
//! (member, X's normalised DN) on every shard are exactly the groups naming X: a reverse
//! index written by the group's own shard in the same commit as the group's change, with
//! no DN resolved at write time (docs/DECISIONS.md, "memberOf: where its index lives").
//!
//! Reading it needs every shard: [`Groups`] reads each shard's last committed snapshot
//! through its engine, from any thread (the inline path on a worker, a scan on the search
//! pool), as the scans already do. What one search needs travels in [`MemberOfQuery`],
//! on the search's `AttrSelection`: None unless the request selects memberOf (`+` or by
//! name) or its filter mentions it, so nobody else pays.
//!
//! Access: a group the requester may not read is not among the values (and a filter on
//! memberOf doesn't see it). With one answer for every entry (`per_entry` None) every
//! group that exists is readable; otherwise the search's own `EntryRules` is asked.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};

use ferrodir_proto::entry::{Attribute, Entry};

use crate::entry::record::EntryRecord;
use crate::error::{ShardError, ShardResult};
use crate::id::EntryId;
use crate::index::keys;
use crate::rights::EntryRules;
use crate::rules::base_name_in;
use crate::rules::RuleTable;
use crate::skeleton::Skeleton;
use crate::storage::KvEngine;

/// The types whose values name a group's members (canonical names).
pub const MEMBER_TYPES: [&str; 2] = ["member", "uniquemember"];
/// memberOf's canonical name.
pub const MEMBER_OF: &str = "memberof";
/// Groups whose DN one search remembers; past this it reads them again.
const GROUP_CACHE_MAX: usize = 4096;

/// The memberOf options (config `memberof_transitive`, `memberof_chain_depth_max`,
/// `memberof_chain_entries_max`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MemberOfOptions {
    /// memberOf lists every group reached through nested groups (389-ds), not only the
    /// groups naming the entry itself (slapd's overlay, Active Directory).
    pub transitive: bool,
    /// The most levels of nesting a walk of the group graph follows (the in-chain rule,
    /// transitive memberOf); a deeper graph answers adminLimitExceeded (11).
    pub chain_depth_max: usize,
    /// The most entries one walk may collect; more answers adminLimitExceeded (11).
    pub chain_entries_max: usize,
}

impl Default for MemberOfOptions {
    fn default() -> Self {
        Self { transitive: false, chain_depth_max: 16, chain_entries_max: 100_000 }
    }
}

/// Every shard's committed data, read-only: what memberOf is computed from.
pub struct Groups {
    engines: Vec<Arc<dyn KvEngine>>,
    rules: Arc<RuleTable>,
    pub options: MemberOfOptions,
}

impl fmt::Debug for Groups {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Groups").field("shards", &self.engines.len()).field("options", &self.options).finish()
    }
}

/// Which groups the requester may read, decided over the whole directory by the router.
#[derive(Clone, Debug)]
pub enum GroupAccess {
    /// Every entry (the rootDN, or rules that are the same for every entry).
    Every,
    /// No entry at all: memberOf is always empty.
    NoGroup,
    /// As these rules say of each group.
    PerEntry(Arc<dyn EntryRules>),
}

impl GroupAccess {
    /// Whether the requester may read group `id` (`record` holds at least the attributes
    /// the rules' filters read).
    pub fn may_read(&self, tree: &Skeleton, id: EntryId, record: &EntryRecord) -> bool {
        match self {
            GroupAccess::Every => true,
            GroupAccess::NoGroup => false,
            GroupAccess::PerEntry(rules) => rules.rights(tree, id, record).is_some(),
        }
    }
}

impl Groups {
    pub fn new(engines: Vec<Arc<dyn KvEngine>>, rules: Arc<RuleTable>, options: MemberOfOptions) -> Self {
        Self { engines, rules, options }
    }

    /// The groups, on every shard, whose member or uniqueMember equals `dn` under the
    /// type's equality rule (distinguishedNameMatch, uniqueMemberMatch): read from the
    /// equality postings, with the key the index writes (`eqkey::lookup`).
    pub fn naming(&self, dn: &str) -> ShardResult<Vec<EntryId>> {
        // (prefix, whether it is the "value with an optional UID" form, RFC 4517 §3.3.21)
        let mut prefixes = Vec::with_capacity(MEMBER_TYPES.len() + 1);
        for name in MEMBER_TYPES {
            let Some(attr) = self.rules.get(name) else { continue };
            let crate::index::eqkey::Lookup::Value(exact) =
                crate::index::eqkey::lookup(&self.rules, attr, dn.as_bytes())
            else {
                continue;
            };
            if name == "uniquemember" {
                // `DN#'0101'B` names the entry too, though uniqueMemberMatch keeps the UID.
                let mut with_uid = exact.clone();
                with_uid.pop();
                with_uid.push(b'#');
                prefixes.push((with_uid, true));
            }
            prefixes.push((exact, false));
        }
        let mut found = Vec::new();
        for engine in &self.engines {
            let snapshot = engine.snapshot()?;
            for (prefix, with_uid) in &prefixes {
                snapshot.scan_prefix(prefix, &mut |key, _| {
                    // key: prefix ‖ ['0101'B ‖ 0 ‖] id (8)
                    let uid_ok = !*with_uid
                        || key.get(prefix.len()..key.len().saturating_sub(9)).is_some_and(is_bit_string_uid);
                    if uid_ok {
                        if let Some(id) = keys::trailing_id(key) {
                            found.push(id);
                        }
                    }
                    true
                })?;
            }
        }
        found.sort_unstable();
        found.dedup();
        Ok(found)
    }

    /// The group `id`'s DN if it exists and the requester may read it. Decodes only what
    /// the rules' own filters read (nothing at all without per-entry rules).
    pub fn visible_dn(
        &self,
        tree: &Skeleton,
        access: &GroupAccess,
        id: EntryId,
    ) -> ShardResult<Option<String>> {
        if matches!(access, GroupAccess::NoGroup) {
            return Ok(None);
        }
        let Some(engine) = self.engines.get(id.shard()) else { return Ok(None) };
        let Some(bytes) = engine.snapshot()?.get(&keys::entry(id))? else { return Ok(None) };
        let (names, whole): (&[String], bool) = match access {
            GroupAccess::PerEntry(rules) => {
                (rules.filter_names().unwrap_or(&[]), rules.filter_names().is_none())
            }
            _ => (&[], false),
        };
        let record = if whole {
            EntryRecord::decode(&bytes)?
        } else {
            EntryRecord::decode_selected(&bytes, &|name| base_name_in(name, names))?
        };
        if !access.may_read(tree, id, &record) {
            return Ok(None);
        }
        Ok(Some(match tree.get(id) {
            Some(node) => node.dn.to_string(),
            None => tree.dn_of_child(record.parent, &record.rdn),
        }))
    }

    /// The groups that contain the entry named `dn`: directly, or (with `transitive`)
    /// through nested groups, walking up level by level. A group is followed only if the
    /// requester may read it; cycles end because each group is visited once. More levels
    /// than `chain_depth_max` or more groups than `chain_entries_max` is
    /// [`ShardError::AdminLimitExceeded`].
    /// `dns` gives a group's DN if the requester may read it ([`Groups::visible_dn`],
    /// possibly remembered).
    pub fn containing(
        &self,
        dn: &str,
        transitive: bool,
        dns: &mut dyn FnMut(EntryId) -> ShardResult<Option<Arc<str>>>,
    ) -> ShardResult<Vec<(EntryId, Arc<str>)>> {
        let mut out = Vec::new();
        let mut visited = HashSet::new();
        let mut frontier: Vec<Arc<str>> = vec![Arc::from(dn)];
        let mut depth = 0;
        while !frontier.is_empty() {
            depth += 1;
            let mut next = Vec::new();
            for member in &frontier {
                for group in self.naming(member)? {
                    if !visited.insert(group) {
                        continue;
                    }
                    let Some(group_dn) = dns(group)? else { continue };
                    if depth > self.options.chain_depth_max {
                        return Err(too_deep(self.options.chain_depth_max));
                    }
                    if out.len() >= self.options.chain_entries_max {
                        return Err(too_many(self.options.chain_entries_max));
                    }
                    out.push((group, group_dn.clone()));
                    next.push(group_dn);
                }
            }
            if !transitive {
                break;
            }
            frontier = next;
        }
        Ok(out)
    }
}

/// `'0101'B`: the optional UID of a uniqueMember value.
fn is_bit_string_uid(bytes: &[u8]) -> bool {
    bytes.len() >= 3
        && bytes.first() == Some(&b'\'')
        && bytes.ends_with(b"'B")
        && bytes.get(1..bytes.len() - 2).is_some_and(|bits| bits.iter().all(|b| matches!(b, b'0' | b'1')))
}

pub fn too_deep(max: usize) -> ShardError {
    ShardError::AdminLimitExceeded(format!("group nesting deeper than memberof_chain_depth_max ({max})"))
}

pub fn too_many(max: usize) -> ShardError {
    ShardError::AdminLimitExceeded(format!(
        "more than memberof_chain_entries_max ({max}) entries in a group chain"
    ))
}

/// What one search needs to compute memberOf: the groups' source, which groups the
/// requester may read, the DNs of groups it has already read, and the first error (a chain
/// cap), which ends the search with that error ([`MemberOfQuery::check`]).
pub struct MemberOfQuery {
    groups: Arc<Groups>,
    access: GroupAccess,
    /// The filter asserts on memberOf other than through an id set (presence, substrings):
    /// each candidate needs its values before it is evaluated.
    pub in_filter: bool,
    seen: Mutex<HashMap<EntryId, Option<Arc<str>>>>,
    failure: Mutex<Option<ShardError>>,
}

impl fmt::Debug for MemberOfQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemberOfQuery")
            .field("groups", &self.groups)
            .field("in_filter", &self.in_filter)
            .finish()
    }
}

impl MemberOfQuery {
    pub fn new(groups: Arc<Groups>, access: GroupAccess, in_filter: bool) -> Self {
        Self { groups, access, in_filter, seen: Mutex::default(), failure: Mutex::default() }
    }

    /// memberOf of the entry named `dn`, as the requester may see it: group DNs in id order.
    /// After a failure, nothing (the search ends with the failure).
    pub fn values(&self, tree: &Skeleton, dn: &str) -> Vec<Arc<str>> {
        if self.failed() {
            return Vec::new();
        }
        let mut dns = |id: EntryId| self.group_dn(tree, id);
        match self.groups.containing(dn, self.groups.options.transitive, &mut dns) {
            Ok(found) => found.into_iter().map(|(_, dn)| dn).collect(),
            Err(e) => {
                self.fail(e);
                Vec::new()
            }
        }
    }

    fn group_dn(&self, tree: &Skeleton, id: EntryId) -> ShardResult<Option<Arc<str>>> {
        if let Some(known) = self.seen.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
            return Ok(known.clone());
        }
        let dn: Option<Arc<str>> = self.groups.visible_dn(tree, &self.access, id)?.map(Arc::from);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() < GROUP_CACHE_MAX {
            seen.insert(id, dn.clone());
        }
        Ok(dn)
    }

    /// Adds memberOf to `entry` (a copy being evaluated against a filter).
    pub fn add_to(&self, tree: &Skeleton, dn: &str, entry: &mut Entry) {
        let values = self.values(tree, dn);
        if !values.is_empty() {
            entry
                .attrs
                .push(Attribute::new("memberOf", values.iter().map(|v| v.as_bytes().to_vec()).collect()));
        }
    }

    fn fail(&self, error: ShardError) {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(error);
    }

    fn failed(&self) -> bool {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// The error that ended memberOf's computation for this search, if any.
    pub fn check(&self) -> ShardResult<()> {
        match self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The error memberOf's computation met in this search, if it is on (see
/// [`MemberOfQuery::check`]): the inline paths and scans end with it.
pub fn check(query: Option<&Arc<MemberOfQuery>>) -> ShardResult<()> {
    query.map_or(Ok(()), |q| q.check())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unique_member_uid_is_a_quoted_bit_string() {
        assert!(is_bit_string_uid(b"'0101'B"));
        assert!(is_bit_string_uid(b"''B"));
        assert!(!is_bit_string_uid(b"'012'B"));
        assert!(!is_bit_string_uid(b"y,dc=x"));
        assert!(!is_bit_string_uid(b"'B"));
    }

    #[test]
    fn caps_answer_admin_limit_exceeded() {
        assert!(
            matches!(too_deep(16), ShardError::AdminLimitExceeded(m) if m.contains("memberof_chain_depth_max"))
        );
        assert!(matches!(too_many(5), ShardError::AdminLimitExceeded(m) if m.contains("(5)")));
        let defaults = MemberOfOptions::default();
        assert!(!defaults.transitive && defaults.chain_depth_max > 0 && defaults.chain_entries_max > 0);
    }
}
