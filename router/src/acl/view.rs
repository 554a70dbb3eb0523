//! A search's access, decided once per search: the rules specialised to this requester and
//! this search's region, so that the shards do as little as possible per entry.
//!
//! 1. Each rule's clauses are reduced to two levels: on the requester's own entry and on
//!    any other (`self` is the only `<who>` that depends on the entry; groups and the
//!    transport were settled when the operation started).
//! 2. A rule for a DN scope that covers the whole search region counts as unscoped; one
//!    disjoint from it is dropped.
//! 3. If no scoped rule is left and the requester's own entry gets nothing special, one
//!    answer holds for every entry ([`Decision::Uniform`]): the default rules for anonymous
//!    cost one small computation per search and nothing per entry.
//! 4. Otherwise the shards get a [`PerEntry`] (`shard::rights::EntryRules`): the rest of
//!    the rules' DN scopes resolved to entry ids (compared against the pinned skeleton, no
//!    DN is built per entry), the requester's entry id, and a cache of rights by which
//!    scoped rules matched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ferrodir_shard::{referenced_names, EntryId, EntryRecord, EntryRights, EntryRules, Skeleton, TypeSet};

use crate::acl::decide::Subject;
use crate::acl::rule::{Attr, DnScope, Level, NormDn, RuleSet};

/// What a search covers, for comparing with the rules' DN scopes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RegionKind {
    Base,
    One,
    Subtree,
    Children,
}

#[derive(Clone, Debug)]
pub struct Region {
    pub base: NormDn,
    pub kind: RegionKind,
}

/// How one rule relates to one search.
#[derive(Clone, Debug)]
struct Applied {
    rule: usize,
    /// Some: the rule covers only some of the region's entries; the scope to check, which
    /// [`Draft::finish`] resolves to ids.
    scoped: Option<DnScope>,
    self_level: Level,
    other_level: Level,
}

/// The rules specialised to one requester and one region, before DN scopes are resolved.
#[derive(Debug)]
pub struct Draft {
    set: Arc<RuleSet>,
    applied: Vec<Applied>,
    /// Whether the requester's own entry gets other levels than the rest.
    self_matters: bool,
}

/// A rule's DN scope in entry ids, checked against a search's pinned skeleton.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum IdScope {
    All,
    /// The base entry does not exist: the scope covers nothing.
    Nothing,
    Base(EntryId),
    One(EntryId),
    Subtree(EntryId),
    Children(EntryId),
}

impl IdScope {
    fn contains(self, skeleton: &Skeleton, id: EntryId, parent: EntryId) -> bool {
        match self {
            IdScope::All => true,
            IdScope::Nothing => false,
            IdScope::Base(base) => id == base,
            IdScope::One(base) => parent == base,
            IdScope::Subtree(base) => id == base || skeleton.parent_within(parent, base),
            IdScope::Children(base) => id != base && skeleton.parent_within(parent, base),
        }
    }
}

/// What the router tells the shards.
#[derive(Debug)]
pub enum Decision {
    /// One answer for every entry; `entries_readable` false means none is returned.
    Uniform {
        entries_readable: bool,
        rights: EntryRights,
    },
    PerEntry(Arc<PerEntry>),
}

/// Specialises `set` to `subject` and the search's `region` (None: unknown, as after an
/// alias was dereferenced; every scoped rule then stays scoped).
pub fn draft(set: &Arc<RuleSet>, subject: &Subject, region: Option<&Region>) -> Draft {
    let mut applied = Vec::with_capacity(set.rules.len());
    let mut self_matters = false;
    for (index, rule) in set.rules.iter().enumerate() {
        let scoped = match region.map(|r| relation(&rule.what.dn, r)) {
            Some(Relation::Disjoint) => continue,
            Some(Relation::Covers) if rule.what.filter.is_none() => None,
            _ if !rule.what.is_scoped() => None,
            _ => Some(rule.what.dn.clone()),
        };
        let other_level = subject.clause_level(rule, &|| false);
        let self_level =
            if subject.user().is_some() { subject.clause_level(rule, &|| true) } else { other_level };
        self_matters |= self_level != other_level;
        applied.push(Applied { rule: index, scoped, self_level, other_level });
    }
    Draft { set: set.clone(), applied, self_matters }
}

enum Relation {
    Covers,
    Disjoint,
    Partial,
}

/// How a rule's DN scope relates to a search region: it covers every entry the search can
/// return, none of them, or some.
fn relation(scope: &DnScope, region: &Region) -> Relation {
    let Some(rule_base) = scope.base() else { return Relation::Covers };
    let b = &region.base;
    let covers = match (scope, region.kind) {
        (_, RegionKind::Base) => scope.contains(b),
        (DnScope::Subtree(_), _) => b.depth_below(rule_base).is_some(),
        (DnScope::Children(_), RegionKind::One | RegionKind::Children) => b.depth_below(rule_base).is_some(),
        (DnScope::Children(_), RegionKind::Subtree) => b.depth_below(rule_base).is_some_and(|d| d > 0),
        (DnScope::One(_), RegionKind::One) => b.rdns == rule_base.rdns,
        _ => false,
    };
    if covers {
        return Relation::Covers;
    }
    let related = b.depth_below(rule_base).is_some() || rule_base.depth_below(b).is_some();
    if region.kind == RegionKind::Base || !related {
        Relation::Disjoint
    } else {
        Relation::Partial
    }
}

impl Region {
    /// Whether an entry named `dn` can be among the search's results.
    pub fn may_hold(&self, dn: &NormDn) -> bool {
        match (dn.depth_below(&self.base), self.kind) {
            (None, _) => false,
            (Some(depth), RegionKind::Base) => depth == 0,
            (Some(depth), RegionKind::One) => depth == 1,
            (Some(_), RegionKind::Subtree) => true,
            (Some(depth), RegionKind::Children) => depth > 0,
        }
    }
}

impl Draft {
    /// Forgets what is special about the requester's own entry: for a search that can't
    /// return it.
    pub fn without_self(mut self) -> Self {
        self.self_matters = false;
        self
    }

    /// The DNs whose entry ids [`Self::finish`] needs, in order: each scoped rule's base.
    pub fn bases(&self) -> Vec<&NormDn> {
        self.applied.iter().filter_map(|a| a.scoped.as_ref().and_then(DnScope::base)).collect()
    }

    /// Whether [`Self::finish`] needs the requester's entry id.
    pub fn needs_self_id(&self) -> bool {
        self.self_matters
    }

    /// Whether every entry gets the same answer (then no id is needed at all).
    pub fn is_uniform(&self) -> bool {
        !self.self_matters && self.applied.iter().all(|a| a.scoped.is_none())
    }

    /// The decision, given the ids of [`Self::bases`] (None: no such entry) in order and
    /// the requester's entry id.
    pub fn finish(self, base_ids: &[Option<EntryId>], self_id: Option<EntryId>) -> Decision {
        if self.is_uniform() {
            let all = vec![true; self.applied.len()];
            let (entries_readable, rights) = compute(&self.set, &self.applied, &all, false);
            return Decision::Uniform { entries_readable, rights };
        }
        let mut ids = base_ids.iter();
        let scopes: Vec<Option<IdScope>> = self
            .applied
            .iter()
            .map(|a| {
                a.scoped.as_ref().map(|scope| {
                    let id = if scope.base().is_some() { ids.next().copied().flatten() } else { None };
                    match (scope, id) {
                        (DnScope::All, _) => IdScope::All,
                        (_, None) => IdScope::Nothing,
                        (DnScope::Base(_), Some(id)) => IdScope::Base(id),
                        (DnScope::One(_), Some(id)) => IdScope::One(id),
                        (DnScope::Subtree(_), Some(id)) => IdScope::Subtree(id),
                        (DnScope::Children(_), Some(id)) => IdScope::Children(id),
                    }
                })
            })
            .collect();
        let filter_names = self.filter_names();
        let unscoped: Vec<bool> = self.applied.iter().map(|a| a.scoped.is_none()).collect();
        let (_, ordinary) = compute(&self.set, &self.applied, &unscoped, false);
        let fixed = scopes.iter().all(Option::is_none).then(|| {
            [false, true].map(|is_self| {
                let (readable, rights) = compute(&self.set, &self.applied, &unscoped, is_self);
                readable.then(|| Arc::new(rights))
            })
        });
        Decision::PerEntry(Arc::new(PerEntry {
            set: self.set,
            applied: self.applied,
            scopes,
            self_id: if self.self_matters { self_id } else { None },
            filter_names,
            ordinary,
            fixed,
            cache: Mutex::new(HashMap::new()),
        }))
    }

    fn filter_names(&self) -> Option<Vec<String>> {
        let mut names = Vec::new();
        for applied in self.applied.iter().filter(|a| a.scoped.is_some()) {
            let rule = self.set.rules.get(applied.rule)?;
            if let Some(filter) = &rule.what.filter {
                names.extend(referenced_names(&self.set.matching, filter)?);
            }
        }
        names.sort();
        names.dedup();
        Some(names)
    }
}

/// Rights on an entry that `matched[i]` says which applied rules cover: whether the entry
/// may be read, and which types are hidden and unsearchable.
fn compute(set: &RuleSet, applied: &[Applied], matched: &[bool], is_self: bool) -> (bool, EntryRights) {
    let live = || {
        applied
            .iter()
            .zip(matched)
            .filter(|(_, m)| **m)
            .filter_map(|(a, _)| Some((a, set.rules.get(a.rule)?)))
    };
    let level_of = |attr: Attr| {
        live().find(|(_, rule)| rule.what.covers(attr)).map_or(Level::None, |(a, _)| {
            if is_self {
                a.self_level
            } else {
                a.other_level
            }
        })
    };
    let mut mentioned: Vec<&str> = live()
        .filter_map(|(_, rule)| rule.what.attrs.as_ref())
        .flat_map(|l| l.types.iter().map(String::as_str))
        .collect();
    mentioned.sort_unstable();
    mentioned.dedup();
    // The level of a type no list names: the first rule for every attribute.
    let others = live().find(|(_, rule)| rule.what.attrs.is_none()).map_or(Level::None, |(a, _)| {
        if is_self {
            a.self_level
        } else {
            a.other_level
        }
    });
    let set_for = |needed: Level| {
        let below: Vec<String> = mentioned
            .iter()
            .filter(|name| (level_of(Attr::Type(name)) < needed) == (others >= needed))
            .map(|name| name.to_string())
            .collect();
        if others >= needed {
            TypeSet::of(below)
        } else {
            TypeSet::all_but(below)
        }
    };
    let rights = EntryRights { hidden: set_for(Level::Read), unsearchable: set_for(Level::Search) };
    (level_of(Attr::Entry) >= Level::Read, rights)
}

/// Which applied rules matched an entry, and whether it is the requester's own.
type RightsKey = (Vec<bool>, bool);

/// Per-entry access for one search (see the module doc).
#[derive(Debug)]
pub struct PerEntry {
    set: Arc<RuleSet>,
    applied: Vec<Applied>,
    /// Per applied rule: its scope in ids, or None when it covers every entry.
    scopes: Vec<Option<IdScope>>,
    self_id: Option<EntryId>,
    filter_names: Option<Vec<String>>,
    /// Rights on an entry no scoped rule covers, not the requester's: what the planner and
    /// the prefilter go by.
    ordinary: EntryRights,
    /// When no rule is scoped (only `self` differs): the rights on others' and on the
    /// requester's entry, computed up front.
    fixed: Option<[Option<Arc<EntryRights>>; 2]>,
    /// Rights by which scoped rules matched (a bit each, in order) and `self`.
    cache: Mutex<HashMap<RightsKey, Option<Arc<EntryRights>>>>,
}

impl PerEntry {
    pub fn ordinary(&self) -> &EntryRights {
        &self.ordinary
    }
}

impl EntryRules for PerEntry {
    fn rights(&self, skeleton: &Skeleton, id: EntryId, record: &EntryRecord) -> Option<Arc<EntryRights>> {
        let is_self = self.self_id == Some(id);
        if let Some(fixed) = &self.fixed {
            return fixed.get(usize::from(is_self)).cloned().flatten();
        }
        let matched: Vec<bool> = self
            .applied
            .iter()
            .zip(&self.scopes)
            .map(|(applied, scope)| match scope {
                None => true,
                Some(scope) => {
                    scope.contains(skeleton, id, record.parent)
                        && self.set.rules.get(applied.rule).is_some_and(|rule| {
                            rule.what.filter.as_ref().is_none_or(|f| {
                                ferrodir_shard::filter_matches(&self.set.matching, f, &record.entry, None)
                            })
                        })
                }
            })
            .collect();
        let key = (matched, is_self);
        // A poisoned lock only means another scan panicked mid-insert: compute afresh.
        if let Some(hit) = self.cache.lock().ok().and_then(|cache| cache.get(&key).cloned()) {
            return hit;
        }
        let (readable, rights) = compute(&self.set, &self.applied, &key.0, is_self);
        let answer = readable.then(|| Arc::new(rights));
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() < CACHE_ENTRIES_MAX {
                cache.insert(key, answer.clone());
            }
        }
        answer
    }

    fn filter_names(&self) -> Option<&[String]> {
        self.filter_names.as_deref()
    }
}

/// Distinct combinations of matched rules one search remembers; beyond it, computed each
/// time (the count is at most 2^scoped rules, and small in practice).
const CACHE_ENTRIES_MAX: usize = 1024;

#[cfg(test)]
mod tests {
    use ferrodir_proto::entry::{Attribute, Entry};

    use super::*;
    use crate::acl::decide::tests::{anonymous, norm, set, user};
    use crate::acl::parse::{profile, RuleText};

    const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";

    fn record(parent: EntryId, entry: &Entry) -> EntryRecord {
        EntryRecord { parent, rdn: String::new(), rdn_norm: String::new(), flags: 0, entry: entry.clone() }
    }

    fn region(base: &str, kind: RegionKind) -> Region {
        Region { base: norm(base), kind }
    }

    #[test]
    fn the_default_rules_are_uniform_for_anonymous() {
        let rules = Arc::new(set(&profile("default").unwrap()));
        let d = draft(&rules, &anonymous(), Some(&region("dc=example,dc=com", RegionKind::Subtree)));
        assert!(d.is_uniform());
        let Decision::Uniform { entries_readable, rights } = d.finish(&[], None) else { panic!("uniform") };
        assert!(entries_readable);
        assert!(rights.hidden.contains("userpassword") && !rights.hidden.contains("shadowlastchange"));
        assert!(rights.unsearchable.contains("userpassword") && !rights.unsearchable.contains("cn"));
    }

    #[test]
    fn a_user_sees_its_own_password_only() {
        let rules = Arc::new(set(&profile("default").unwrap()));
        let d = draft(&rules, &user(ALICE), None);
        assert!(!d.is_uniform() && d.needs_self_id() && d.bases().is_empty());
        let Decision::PerEntry(per_entry) = d.finish(&[], Some(EntryId(7))) else { panic!("per entry") };
        let skeleton = Skeleton::default();
        let record = record(EntryId::ROOT, &Entry::default());
        let own = per_entry.rights(&skeleton, EntryId(7), &record).unwrap();
        let other = per_entry.rights(&skeleton, EntryId(8), &record).unwrap();
        assert!(!own.hidden.contains("userpassword") && !own.unsearchable.contains("userpassword"));
        assert!(other.hidden.contains("userpassword") && other.unsearchable.contains("userpassword"));
        assert!(per_entry.ordinary().unsearchable.contains("userpassword"));
    }

    #[test]
    fn a_region_holds_what_its_scope_can_return() {
        let people = "ou=people,dc=example,dc=com";
        assert!(region(people, RegionKind::Subtree).may_hold(&norm(ALICE)));
        assert!(region(people, RegionKind::One).may_hold(&norm(ALICE)));
        assert!(!region(people, RegionKind::Base).may_hold(&norm(ALICE)));
        assert!(region(ALICE, RegionKind::Base).may_hold(&norm(ALICE)));
        assert!(!region(ALICE, RegionKind::Children).may_hold(&norm(ALICE)));
        assert!(!region("ou=groups,dc=example,dc=com", RegionKind::Subtree).may_hold(&norm(ALICE)));
    }

    #[test]
    fn scopes_that_cover_or_miss_the_region_are_settled_up_front() {
        let rules = Arc::new(set(&[
            RuleText::new(r#"dn.subtree="ou=secret,dc=example,dc=com""#, &["* none"]),
            RuleText::new(r#"dn.subtree="dc=example,dc=com" attrs=mail"#, &["* none"]),
            RuleText::new("*", &["* read"]),
        ]));
        let people = region("ou=people,dc=example,dc=com", RegionKind::Subtree);
        let d = draft(&rules, &anonymous(), Some(&people));
        assert!(d.is_uniform(), "ou=secret is elsewhere, the suffix covers ou=people");
        let Decision::Uniform { rights, .. } = d.finish(&[], None) else { panic!("uniform") };
        assert!(rights.hidden.contains("mail") && !rights.hidden.contains("cn"));
        let whole = region("dc=example,dc=com", RegionKind::Subtree);
        let d = draft(&rules, &anonymous(), Some(&whole));
        assert!(!d.is_uniform());
        assert_eq!(d.bases().len(), 1, "only ou=secret is partly in the region");
    }

    #[test]
    fn per_entry_scopes_go_by_ids_and_filters_by_the_entry() {
        let rules = Arc::new(set(&[
            RuleText::new(r#"dn.children="ou=secret,dc=example,dc=com""#, &["* none"]),
            RuleText::new("filter=(objectClass=device) attrs=entry,cn", &["* read"]),
            RuleText::new("filter=(objectClass=device)", &["* none"]),
            RuleText::new("*", &["* read"]),
        ]));
        let d = draft(&rules, &anonymous(), Some(&region("dc=example,dc=com", RegionKind::Subtree)));
        assert_eq!(d.bases().len(), 1);
        let secret = EntryId(3);
        let Decision::PerEntry(per_entry) = d.finish(&[Some(secret)], None) else { panic!("per entry") };
        let skeleton = Skeleton::default();
        let person = Entry::new(vec![Attribute::new("objectClass", vec![b"person".to_vec()])]);
        let device = Entry::new(vec![Attribute::new("objectClass", vec![b"device".to_vec()])]);
        assert!(
            per_entry.rights(&skeleton, EntryId(9), &record(secret, &person)).is_none(),
            "below ou=secret"
        );
        assert!(
            per_entry.rights(&skeleton, secret, &record(EntryId::ROOT, &person)).is_some(),
            "ou=secret itself"
        );
        let seen = per_entry.rights(&skeleton, EntryId(10), &record(EntryId::ROOT, &device)).unwrap();
        assert!(
            !seen.hidden.contains("cn") && seen.hidden.contains("sn") && seen.hidden.contains("objectclass")
        );
        assert_eq!(per_entry.filter_names().map(|n| n.contains(&"objectclass".to_string())), Some(true));
    }
}
