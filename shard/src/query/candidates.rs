//! Which entries a search examines on one shard: from the indices when the filter allows,
//! else by walking the scope's one-level index, lazily and resumably.
//!
//! Planning is separate from reading so that one function decides what "indexed" means:
//! the router asks [`plan`] whether a search is unindexed (to apply the unindexed-search
//! policy) and every shard reads the same plan, so the two can't disagree.
//!
//! Assertions on attributes the requester may not search never use an index (or a Bloom
//! filter): they evaluate to Undefined on every entry (see `eval`), and an index would
//! answer by their values.

use std::collections::BTreeSet;

use ferrodir_proto::filter::{Filter, Substring};

use crate::error::ShardResult;
use crate::id::EntryId;
use crate::index::config::{assertion_grams, assertion_wide_keys, ordering_key, IndexConfig, IndexKind};
use crate::index::eqkey::{self, Lookup};
use crate::index::gramsummary::{GramShards, ShardMask};
use crate::index::keys;
use crate::query::scope::Scope;
use crate::rights::TypeSet;
use crate::rules::{AttrRules, RuleTable};
use crate::skeleton::Skeleton;
use crate::storage::KvSnapshot;

/// How the indices can narrow a filter, decided from the filter and the configuration only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Every equality posting under this key prefix (attribute and normalised value): also
    /// the key a shard's Bloom filter is asked for.
    Equality(Vec<u8>),
    /// Every presence posting under this key prefix.
    Postings(Vec<u8>),
    /// Nothing can match (an equality on an unknown object class).
    Empty,
    /// Substring grams of one attribute; `wide`: the gram table's keys of the assertion's
    /// 4-byte grams (`index::assertion_wide_keys`), which only prune shards.
    Grams { canonical: String, grams: Vec<Vec<u8>>, wide: Vec<Vec<u8>> },
    /// An ordering range over one attribute.
    Range { prefix: Vec<u8>, bound: Vec<u8>, greater: bool },
    /// The intersection of the parts that are indexed (at least one).
    And(Vec<Plan>),
    /// The union of the parts (every part indexed).
    Or(Vec<Plan>),
    /// Exactly these entries (sorted), named by an internal id-set assertion: the members
    /// of a group the router resolved for `(memberOf=G)` or the in-chain rule
    /// (`eval::ID_SET_RULE`). Ids of other shards are simply absent from this one.
    Ids(std::sync::Arc<[EntryId]>),
}

/// What a plan needs to know of the directory.
#[derive(Copy, Clone)]
pub struct Planner<'a> {
    pub indexes: &'a IndexConfig,
    pub rules: &'a RuleTable,
    /// Canonical names the requester may not search.
    pub unsearchable: &'a TypeSet,
}

impl<'a> Planner<'a> {
    fn usable(&self, desc: &[u8], kind: IndexKind) -> Option<&'a AttrRules> {
        let attr = self.rules.get(std::str::from_utf8(desc).ok()?)?;
        // Only the type itself is indexed under its name: a supertype's filter must scan.
        if attr.subtypes.len() > 1 || self.unsearchable.contains(&attr.canonical) {
            return None;
        }
        self.indexes.usable(&attr.canonical, kind).then_some(attr.as_ref())
    }

    /// The plan for `filter`, or None if it can use no index (an unindexed search).
    pub fn plan(&self, filter: &Filter) -> Option<Plan> {
        match filter {
            Filter::EqualityMatch(ava) => {
                let attr = self.usable(&ava.attribute_desc, IndexKind::Equality)?;
                // The key the index and the Bloom filters file the value under (`eqkey`).
                match eqkey::lookup(self.rules, attr, &ava.assertion_value) {
                    Lookup::Value(prefix) => Some(Plan::Equality(prefix)),
                    Lookup::Class(prefix) => Some(Plan::Postings(prefix)),
                    Lookup::NoSuchClass => Some(Plan::Empty),
                    Lookup::Invalid => None,
                }
            }
            Filter::Present(desc) => {
                let attr = self.usable(desc, IndexKind::Presence)?;
                Some(Plan::Postings(keys::pres_prefix(&attr.canonical)))
            }
            Filter::Substrings(sub) => {
                let attr = self.usable(&sub.r#type, IndexKind::Substring)?;
                let (mut initial, mut any, mut final_) = (None, Vec::new(), None);
                for piece in &sub.substrings {
                    match piece {
                        Substring::Initial(v) => initial = Some(v.as_ref()),
                        Substring::Any(v) => any.push(v.as_ref()),
                        Substring::Final(v) => final_ = Some(v.as_ref()),
                    }
                }
                let grams = assertion_grams(attr, initial, &any, final_);
                let wide = assertion_wide_keys(attr, initial, &any, final_);
                (!grams.is_empty()).then(|| Plan::Grams { canonical: attr.canonical.clone(), grams, wide })
            }
            Filter::GreaterOrEqual(ava) | Filter::LessOrEqual(ava) => {
                let attr = self.usable(&ava.attribute_desc, IndexKind::Ordering)?;
                let bound = ordering_key(attr, &ava.assertion_value, self.rules.dn())?;
                let greater = matches!(filter, Filter::GreaterOrEqual(_));
                Some(Plan::Range { prefix: keys::ord_attr_prefix(&attr.canonical), bound, greater })
            }
            Filter::ExtensibleMatch(mra) if crate::query::eval::is_id_set(mra) => {
                Some(Plan::Ids(crate::query::eval::id_set_ids(mra).collect()))
            }
            Filter::And(parts) => {
                let plans: Vec<Plan> = parts.iter().filter_map(|p| self.plan(p)).collect();
                (!plans.is_empty()).then_some(Plan::And(plans))
            }
            Filter::Or(parts) if !parts.is_empty() => {
                parts.iter().map(|p| self.plan(p)).collect::<Option<Vec<_>>>().map(Plan::Or)
            }
            _ => None,
        }
    }
}

impl Plan {
    /// The equality posting prefix every match must have: the plan itself, or one part of
    /// an AND, being an indexed equality. Shards whose Bloom filter lacks it hold no match.
    /// Read from the plan, so the value is normalised once per search.
    pub fn required_equality(&self) -> Option<&[u8]> {
        match self {
            Plan::Equality(prefix) => Some(prefix),
            Plan::And(parts) => parts.iter().find_map(Plan::required_equality),
            _ => None,
        }
    }

    /// The shards that may hold a match by the substring grams the plan requires, from the
    /// server's gram table (`gramsummary`): a shard lacking one gram of an assertion every
    /// match must satisfy holds no match, as reading that gram's postings there would find
    /// none; likewise for its 4-byte grams, which every matching value has and whose bits
    /// the shard set when it staged the entry. None: the plan requires no gram (or an OR has
    /// a part that doesn't), so every shard may hold matches.
    pub fn gram_shards(&self, table: &GramShards, shards: usize) -> Option<ShardMask> {
        match self {
            Plan::Grams { canonical, grams, wide } => {
                let mut mask = ShardMask::all(shards);
                for gram in grams {
                    table.restrict(&keys::sub_prefix(canonical, gram), &mut mask);
                }
                for key in wide {
                    table.restrict(key, &mut mask);
                }
                Some(mask)
            }
            // Every part is required: any part's gram prunes.
            Plan::And(parts) => {
                parts.iter().filter_map(|part| part.gram_shards(table, shards)).reduce(|mut a, b| {
                    a.and(&b);
                    a
                })
            }
            // A match satisfies some part: only when every part prunes does the union.
            Plan::Or(parts) => {
                let masks =
                    parts.iter().map(|part| part.gram_shards(table, shards)).collect::<Option<Vec<_>>>()?;
                masks.into_iter().reduce(|mut a, b| {
                    a.or(&b);
                    a
                })
            }
            _ => None,
        }
    }
}

/// A substring gram with more postings than this is too common to narrow a search.
const GRAM_POSTINGS_MAX: usize = 256;
/// When every gram of an assertion is over [`GRAM_POSTINGS_MAX`] (a large shard), the two
/// rarest under this cap are intersected instead of scanning the scope.
const GRAM_POSTINGS_FALLBACK_MAX: usize = 4096;
/// A candidate set this small is evaluated directly rather than narrowed further.
const CANDIDATES_SMALL: usize = 64;

/// Reads a plan, giving up (None) when the set would hold more than `cap` ids: a caller on
/// a latency-sensitive thread asks with a small cap and hands bigger searches elsewhere,
/// and a very large set is no cheaper than walking the scope. `stop` ends long reads early
/// (the result is then incomplete, and the caller stops too).
pub fn read_plan(
    plan: &Plan,
    snapshot: &dyn KvSnapshot,
    cap: usize,
    stop: &dyn Fn() -> bool,
) -> ShardResult<Option<BTreeSet<EntryId>>> {
    match plan {
        Plan::Empty => Ok(Some(BTreeSet::new())),
        Plan::Ids(ids) => Ok((ids.len() <= cap).then(|| ids.iter().copied().collect())),
        Plan::Equality(prefix) | Plan::Postings(prefix) => postings_capped(snapshot, prefix, cap, stop),
        Plan::Grams { canonical, grams, .. } => read_grams(snapshot, canonical, grams, cap, stop),
        Plan::Range { prefix, bound, greater } => read_range(snapshot, prefix, bound, *greater, cap, stop),
        Plan::And(parts) => read_and(parts, snapshot, cap, stop),
        Plan::Or(parts) => read_or(parts, snapshot, cap, stop),
    }
}

/// Common grams ("use" of "user 123") match nearly everything: reading their postings
/// costs more than it saves. Like back-mdb's all-IDs cutoff, a gram with more than
/// GRAM_POSTINGS_MAX postings is skipped; later grams of a piece tend to be rarer, so they
/// are tried first, and a small candidate set ends the search (the filter is evaluated on
/// every candidate anyway). In a large shard every gram may be over the cutoff ("111" of
/// "user 1111" at 100k entries): then the first two grams under a higher cap are
/// intersected.
fn read_grams(
    snapshot: &dyn KvSnapshot,
    canonical: &str,
    grams: &[Vec<u8>],
    cap: usize,
    stop: &dyn Fn() -> bool,
) -> ShardResult<Option<BTreeSet<EntryId>>> {
    let narrow = |list_cap: usize, lists_max: usize| {
        narrow_grams(snapshot, canonical, grams, list_cap, lists_max, stop)
    };
    let mut found = narrow(GRAM_POSTINGS_MAX.min(cap.max(1)), usize::MAX)?;
    if found.is_none() && cap >= GRAM_POSTINGS_FALLBACK_MAX {
        found = narrow(GRAM_POSTINGS_FALLBACK_MAX, 2)?;
    }
    Ok(found.filter(|ids| ids.len() <= cap))
}

/// The intersection of up to `lists_max` gram posting lists of at most `list_cap` ids
/// each, rarest-looking (last) first, stopping once the set is small.
fn narrow_grams(
    snapshot: &dyn KvSnapshot,
    canonical: &str,
    grams: &[Vec<u8>],
    list_cap: usize,
    lists_max: usize,
    stop: &dyn Fn() -> bool,
) -> ShardResult<Option<BTreeSet<EntryId>>> {
    let mut found: Option<BTreeSet<EntryId>> = None;
    let mut lists = 0;
    for gram in grams.iter().rev() {
        let prefix = keys::sub_prefix(canonical, gram);
        let Some(ids) = postings_capped(snapshot, &prefix, list_cap, stop)? else { continue };
        let narrowed = match found {
            Some(prev) => prev.intersection(&ids).copied().collect(),
            None => ids,
        };
        let small = narrowed.len() <= CANDIDATES_SMALL;
        found = Some(narrowed);
        lists += 1;
        if small || lists >= lists_max {
            break;
        }
    }
    Ok(found)
}

/// The ids whose ordering key under `prefix` is at or above (`greater`) or at or below
/// `bound`, or None past `cap`.
fn read_range(
    snapshot: &dyn KvSnapshot,
    prefix: &[u8],
    bound: &[u8],
    greater: bool,
    cap: usize,
    stop: &dyn Fn() -> bool,
) -> ShardResult<Option<BTreeSet<EntryId>>> {
    let mut ids = BTreeSet::new();
    let mut over = false;
    snapshot.scan_prefix(prefix, &mut |key, _| {
        // attr ‖ 0 ‖ ordering key ‖ 0 ‖ id (8)
        let Some(order_key) = key.get(prefix.len()..key.len().saturating_sub(9)) else { return true };
        let keep = if greater { order_key >= bound } else { order_key <= bound };
        if keep {
            if let Some(id) = keys::trailing_id(key) {
                ids.insert(id);
            }
        }
        over = ids.len() > cap;
        !over && !stop()
    })?;
    Ok((!over).then_some(ids))
}

/// Every part is required: the readable parts' intersection, ended early once small.
fn read_and(
    parts: &[Plan],
    snapshot: &dyn KvSnapshot,
    cap: usize,
    stop: &dyn Fn() -> bool,
) -> ShardResult<Option<BTreeSet<EntryId>>> {
    let mut best: Option<BTreeSet<EntryId>> = None;
    for part in parts {
        if let Some(ids) = read_plan(part, snapshot, cap, stop)? {
            best = Some(match best {
                Some(prev) => prev.intersection(&ids).copied().collect(),
                None => ids,
            });
            if best.as_ref().is_some_and(|b| b.len() <= CANDIDATES_SMALL) {
                break;
            }
        }
    }
    Ok(best)
}

/// A match satisfies some part: the union, or None if any part is unreadable or the
/// union passes `cap`.
fn read_or(
    parts: &[Plan],
    snapshot: &dyn KvSnapshot,
    cap: usize,
    stop: &dyn Fn() -> bool,
) -> ShardResult<Option<BTreeSet<EntryId>>> {
    let mut all = BTreeSet::new();
    for part in parts {
        match read_plan(part, snapshot, cap, stop)? {
            Some(ids) if all.len() + ids.len() <= cap => all.extend(ids),
            _ => return Ok(None),
        }
    }
    Ok(Some(all))
}

/// The postings under `prefix`, or None if there are more than `cap`.
fn postings_capped(
    snapshot: &dyn KvSnapshot,
    prefix: &[u8],
    cap: usize,
    stop: &dyn Fn() -> bool,
) -> ShardResult<Option<BTreeSet<EntryId>>> {
    let mut ids = BTreeSet::new();
    let mut too_many = false;
    snapshot.scan_prefix(prefix, &mut |key, _| {
        if ids.len() >= cap {
            too_many = true;
            return false;
        }
        if let Some(id) = keys::trailing_id(key) {
            ids.insert(id);
        }
        !stop()
    })?;
    Ok((!too_many).then_some(ids))
}

/// The entries in a scope on one shard, read from its one-level index a batch at a time.
/// It keeps its place as (container, last id), so a scan can continue in a newer snapshot
/// exactly after the last entry it examined.
pub struct ScopeWalk {
    /// The base itself, when it is an entry of this shard and the scope includes it.
    base: Option<EntryId>,
    containers: Vec<EntryId>,
    at: usize,
    after: Option<EntryId>,
}

impl ScopeWalk {
    pub fn new(skeleton: &Skeleton, scope: Scope, shard: usize) -> Self {
        let (base, containers) = match scope {
            Scope::Base(id) => (Some(id), Vec::new()),
            Scope::OneLevel(parent) => (None, vec![parent]),
            Scope::Subtree(base) => {
                let own = (base != EntryId::ROOT).then_some(base);
                (own, skeleton.containers_under(base))
            }
            Scope::Children(base) => (None, skeleton.containers_under(base)),
        };
        Self { base: base.filter(|id| id.shard() == shard), containers, at: 0, after: None }
    }

    /// Appends up to `max` more ids to `out`; false once the walk is over.
    pub fn next_batch(
        &mut self,
        snapshot: &dyn KvSnapshot,
        max: usize,
        out: &mut Vec<EntryId>,
    ) -> ShardResult<bool> {
        if let Some(base) = self.base.take() {
            out.push(base);
        }
        let wanted = out.len() + max.max(1);
        while out.len() < wanted {
            let Some(&parent) = self.containers.get(self.at) else { return Ok(false) };
            let prefix = keys::children_prefix(parent);
            let from = match self.after {
                Some(last) => keys::child(parent, EntryId(last.0.saturating_add(1))),
                None => prefix.clone(),
            };
            let mut exhausted = true;
            snapshot.scan_from(&prefix, &from, &mut |key, _| {
                if out.len() >= wanted {
                    exhausted = false;
                    return false;
                }
                if let Some(id) = keys::trailing_id(key) {
                    out.push(id);
                }
                true
            })?;
            if exhausted {
                self.at += 1;
                self.after = None;
            } else {
                self.after = out.last().copied();
            }
        }
        Ok(true)
    }
}

/// The most containers an [`OrderedWalk`] merges; a scope with more is walked through the
/// entries table in id order instead (each batch reads up to a batch from every container).
pub const ORDERED_CONTAINERS_MAX: usize = 64;

/// A scope's entries on one shard in id order, for a page of a paged search: each batch
/// takes up to `max` ids after the cursor from every container's one-level range (each is
/// in id order), keeps the `max` smallest, and moves the cursor to the last of them. The
/// smallest `max` ids of the union are among each range's smallest `max`, so nothing is
/// skipped; the cursor is an id, so a reopened snapshot continues exactly after it.
pub struct OrderedWalk {
    base: Option<EntryId>,
    containers: Vec<EntryId>,
    cursor: Option<EntryId>,
}

impl OrderedWalk {
    /// None when the scope has more than [`ORDERED_CONTAINERS_MAX`] containers.
    pub fn new(skeleton: &Skeleton, scope: Scope, shard: usize, after: Option<EntryId>) -> Option<Self> {
        let walk = ScopeWalk::new(skeleton, scope, shard);
        if walk.containers.len() > ORDERED_CONTAINERS_MAX {
            return None;
        }
        Some(Self { base: walk.base, containers: walk.containers, cursor: after })
    }

    /// Appends up to `max` more ids (in increasing order) to `out`; false once the walk is over.
    pub fn next_batch(
        &mut self,
        snapshot: &dyn KvSnapshot,
        max: usize,
        out: &mut Vec<EntryId>,
    ) -> ShardResult<bool> {
        let max = max.max(1);
        let admits = |id: EntryId, cursor: Option<EntryId>| cursor.is_none_or(|c| id > c);
        let mut gathered: Vec<EntryId> = Vec::new();
        if let Some(base) = self.base.filter(|b| admits(*b, self.cursor)) {
            gathered.push(base);
        }
        for &parent in &self.containers {
            let prefix = keys::children_prefix(parent);
            let from = match self.cursor {
                Some(last) => keys::child(parent, EntryId(last.0.saturating_add(1))),
                None => prefix.clone(),
            };
            let mut taken = 0;
            snapshot.scan_from(&prefix, &from, &mut |key, _| {
                if let Some(id) = keys::trailing_id(key) {
                    gathered.push(id);
                    taken += 1;
                }
                taken < max
            })?;
        }
        gathered.sort_unstable();
        gathered.dedup();
        // Fewer than `max` in all: no range was cut short, so nothing is left.
        let more = gathered.len() >= max;
        gathered.truncate(max);
        if let Some(&last) = gathered.last() {
            self.cursor = Some(last);
        }
        out.extend_from_slice(&gathered);
        Ok(more)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{EngineKind, Mutation};

    #[test]
    fn scope_walk_resumes_after_its_last_id_in_a_new_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let engine = EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap();
        let parent = EntryId::new(0, 1);
        let put = |ids: std::ops::Range<u64>| {
            let batch: Vec<Mutation> = ids
                .map(|seq| Mutation {
                    key: keys::child(parent, EntryId::new(0, seq)),
                    value: Some(Vec::new()),
                })
                .collect();
            engine.commit(&batch).unwrap();
        };
        put(10..30);
        let skeleton = Skeleton::default();
        let mut walk = ScopeWalk::new(&skeleton, Scope::OneLevel(parent), 0);
        let mut seen = Vec::new();
        assert!(walk.next_batch(engine.snapshot().unwrap().as_ref(), 7, &mut seen).unwrap());
        assert_eq!(seen.len(), 7);
        // Entries added behind the walk's place are not seen; those ahead are.
        put(2..5);
        put(30..33);
        let snapshot = engine.snapshot().unwrap();
        while walk.next_batch(snapshot.as_ref(), 7, &mut seen).unwrap() {}
        let seqs: Vec<u64> = seen.iter().map(|id| id.seq()).collect();
        assert_eq!(seqs, (10..33).collect::<Vec<_>>());
    }
}
