//! Running one search on one shard and streaming its matches.
//!
//! Matches are encoded here, on the shard's thread, straight into whole LDAPMessage PDUs, and
//! sent in chunks over the connection's bounded channel: the channel's capacity is the credit
//! the connection's writer grants. Between chunks the task yields, so a large scan never
//! holds up the shard's other work. Entries and the done marker share that one FIFO, so the
//! marker can't overtake an entry.

use std::collections::{BTreeSet, HashSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use ferrodir_proto::filter::Filter;
use ferrodir_proto::schema::Schema;
use tokio::sync::mpsc;

use crate::core::ShardCore;
use crate::error::ShardResult;
use crate::eval;
use crate::id::EntryId;
use crate::index::{assertion_grams, ordering_key, IndexKind};
use crate::keys;
use crate::record::EntryRecord;
use crate::rules::{equality_key, RuleTable};
use crate::segments::{self, Cached};
use crate::skeleton::Skeleton;
use crate::storage::KvSnapshot;

const CHUNK_ENTRIES_MAX: usize = 64;
const CHUNK_BYTES_MAX: usize = 64 * 1024;

/// Where a search looks, with the base already resolved to an id.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Base(EntryId),
    OneLevel(EntryId),
    Subtree(EntryId),
    /// Strictly below the base (scope 3, OpenLDAP's `children`): a subtree without its base.
    Children(EntryId),
}

/// Which attributes a search returns (RFC 4511 §4.5.1.8, RFC 3673 `+`, RFC 4529 `@class`).
/// Names are canonical (see [`RuleTable`]): asking for `commonName` returns `cn`, and asking
/// for a supertype returns its subtypes.
#[derive(Clone, Debug, Default)]
pub struct AttrSelection {
    pub all_user: bool,
    pub all_operational: bool,
    /// Canonical names asked for, with their subtypes.
    pub names: HashSet<String>,
    /// Types asked for with options (`cn;lang-en`): only values carrying those options.
    pub with_options: Vec<(Vec<String>, Vec<String>)>,
    pub types_only: bool,
    /// Canonical names this requester may not read.
    pub hidden: Vec<String>,
}

impl AttrSelection {
    /// From a request's attribute list: empty or `*` means all user attributes, `+` all
    /// operational ones, `1.1` alone means none, `@class` the attributes class allows.
    pub fn from_request<A: AsRef<[u8]>>(
        attributes: &[A],
        types_only: bool,
        rules: &RuleTable,
        schema: &Schema,
    ) -> Self {
        let mut sel = Self { types_only, ..Default::default() };
        if attributes.is_empty() {
            sel.all_user = true;
        }
        for attr in attributes {
            let text = String::from_utf8_lossy(attr.as_ref());
            match text.as_ref() {
                "*" => sel.all_user = true,
                "+" => sel.all_operational = true,
                "1.1" => {}
                other => match other.strip_prefix('@') {
                    Some(class) => sel.add_class(class, rules, schema),
                    None => sel.add_name(other, rules),
                },
            }
        }
        sel
    }

    fn add_name(&mut self, name: &str, rules: &RuleTable) {
        if name.contains(';') {
            let options = name.split(';').skip(1).map(str::to_ascii_lowercase).collect();
            let types = match rules.get(name) {
                Some(r) => r.subtypes.clone(),
                None => vec![rules.canonical(name)],
            };
            self.with_options.push((types, options));
            return;
        }
        match rules.get(name) {
            Some(r) => self.names.extend(r.subtypes.iter().cloned()),
            None => {
                self.names.insert(rules.canonical(name));
            }
        }
    }

    fn add_class(&mut self, class: &str, rules: &RuleTable, schema: &Schema) {
        let Some(class) = schema.object_class(class) else { return };
        for class in schema.superclasses(class) {
            for name in class.must.iter().chain(&class.may) {
                self.add_name(name, rules);
            }
        }
    }

    fn wants_user(&self, canonical: &str, description: &str) -> bool {
        (self.all_user || self.names.contains(canonical) || self.wants_with_options(canonical, description))
            && !self.hidden.iter().any(|h| h == canonical)
    }

    fn wants_with_options(&self, canonical: &str, description: &str) -> bool {
        self.with_options.iter().any(|(types, options)| {
            types.iter().any(|t| t == canonical) && eval::has_options(description, options)
        })
    }

    fn wants_operational(&self, canonical: &str) -> bool {
        self.all_operational || self.names.contains(canonical)
    }
}

/// What flows back to the connection from the shards of one search.
#[derive(Debug)]
pub enum SearchChunk {
    /// Whole encoded SearchResultEntry PDUs, one `Bytes` per entry.
    Entries(Vec<Bytes>),
    /// This shard is finished.
    Done { shard: usize, result: ShardResult<()> },
}

pub struct SearchTask {
    pub message_id: u32,
    pub tree: Arc<Skeleton>,
    pub scope: Scope,
    pub filter: Arc<Filter>,
    pub attrs: Arc<AttrSelection>,
    pub sink: mpsc::Sender<SearchChunk>,
    /// Set on sizeLimit, timeLimit, Abandon or Unbind.
    pub cancel: Arc<AtomicBool>,
}

/// Runs `task` on this shard's thread to completion (or cancellation).
pub async fn run_search(core: Rc<ShardCore>, task: SearchTask) {
    let shard = core.info.index;
    let result = stream_matches(&core, &task).await;
    let _ = task.sink.send(SearchChunk::Done { shard, result }).await;
}

/// What a search asks of each entry, shared by the streaming path and the inline base path.
pub struct Query<'a> {
    pub message_id: u32,
    pub tree: &'a Skeleton,
    pub filter: &'a Filter,
    pub attrs: &'a AttrSelection,
}

/// Whether the filter needs the computed attributes or the DN before it can be evaluated.
fn filter_needs(rules: &RuleTable, filter: &Filter) -> (bool, bool) {
    let needs_computed = eval::mentions(filter, &|desc, _| {
        std::str::from_utf8(desc)
            .ok()
            .and_then(|d| rules.get(d))
            .is_some_and(|r| COMPUTED.contains(&r.canonical.as_str()))
    });
    let needs_dn = eval::mentions(filter, &|_, dn_attributes| dn_attributes);
    (needs_computed, needs_dn)
}

/// Evaluates the filter on one entry, putting together only what the filter needs.
fn entry_matches(
    rules: &RuleTable,
    query: &Query,
    needs: (bool, bool),
    id: EntryId,
    record: &EntryRecord,
) -> bool {
    let (needs_computed, needs_dn) = needs;
    if !needs_computed && !needs_dn {
        return eval::matches(rules, query.filter, &record.entry, None);
    }
    let dn_text = entry_dn(query.tree, id, record);
    let dn = if needs_dn { ferrodir_proto::Dn::parse(&dn_text).ok() } else { None };
    if !needs_computed {
        return eval::matches(rules, query.filter, &record.entry, dn.as_ref());
    }
    let mut entry = record.entry.clone();
    for (name, value) in computed_attributes(query.tree, id, &dn_text) {
        entry.attrs.push(ferrodir_proto::entry::Attribute::new(name, vec![value.to_vec()]));
    }
    eval::matches(rules, query.filter, &entry, dn.as_ref())
}

/// A base-scope search of an entry of this shard, answered inline by the caller on the
/// shard's own thread: no task, no channel. The common lookup takes this path.
pub fn base_entry(core: &ShardCore, query: &Query, id: EntryId) -> ShardResult<Option<Bytes>> {
    let snapshot = core.snapshot();
    let Some(cached) = core.cached(snapshot.as_ref(), id)? else { return Ok(None) };
    let rules = &core.info.rules;
    if !entry_matches(rules, query, filter_needs(rules, query.filter), id, &cached.record) {
        return Ok(None);
    }
    Ok(Some(encode_entry(rules, query, id, &cached)))
}

async fn stream_matches(core: &ShardCore, task: &SearchTask) -> ShardResult<()> {
    let snapshot = core.snapshot();
    let candidates = candidates(core, snapshot.as_ref(), task)?;
    let mut chunk: Vec<Bytes> = Vec::new();
    let mut chunk_bytes = 0;
    let rules = &core.info.rules;
    let query =
        Query { message_id: task.message_id, tree: &task.tree, filter: &task.filter, attrs: &task.attrs };
    let needs = filter_needs(rules, &task.filter);
    for id in candidates {
        if task.cancel.load(Ordering::Relaxed) {
            return Ok(());
        }
        let Some(cached) = core.cached(snapshot.as_ref(), id)? else {
            continue;
        };
        let record = &cached.record;
        if !in_scope(&task.tree, task.scope, id, record) || !entry_matches(rules, &query, needs, id, record) {
            continue;
        }
        let pdu = encode_entry(rules, &query, id, &cached);
        chunk_bytes += pdu.len();
        chunk.push(pdu);
        if chunk.len() >= CHUNK_ENTRIES_MAX || chunk_bytes >= CHUNK_BYTES_MAX {
            if task.sink.send(SearchChunk::Entries(std::mem::take(&mut chunk))).await.is_err() {
                return Ok(()); // the connection went away
            }
            chunk_bytes = 0;
            tokio::task::yield_now().await;
        }
    }
    if !chunk.is_empty() {
        let _ = task.sink.send(SearchChunk::Entries(chunk)).await;
    }
    Ok(())
}

fn in_scope(tree: &Skeleton, scope: Scope, id: EntryId, record: &EntryRecord) -> bool {
    match scope {
        Scope::Base(base) => id == base,
        Scope::OneLevel(parent) => record.parent == parent,
        Scope::Subtree(base) => id == base || tree.parent_within(record.parent, base),
        Scope::Children(base) => tree.parent_within(record.parent, base),
    }
}

/// The ids to examine on this shard: from an index when the filter allows, else from scope.
fn candidates(core: &ShardCore, snapshot: &dyn KvSnapshot, task: &SearchTask) -> ShardResult<Vec<EntryId>> {
    if let Scope::Base(id) = task.scope {
        return Ok(if id.shard() == core.info.index { vec![id] } else { Vec::new() });
    }
    if let Some(ids) = indexed(core, snapshot, &task.filter)? {
        return Ok(ids.into_iter().collect());
    }
    match task.scope {
        Scope::OneLevel(parent) => core.children(snapshot, parent),
        Scope::Subtree(base) | Scope::Children(base) => {
            let mut out = Vec::new();
            if base != EntryId::ROOT && base.shard() == core.info.index && task.scope == Scope::Subtree(base)
            {
                out.push(base);
            }
            for container in task.tree.containers_under(base) {
                out.extend(core.children(snapshot, container)?);
            }
            Ok(out)
        }
        Scope::Base(_) => Ok(Vec::new()),
    }
}

/// A substring gram with more postings than this is too common to narrow a search.
const GRAM_POSTINGS_MAX: usize = 256;
/// When every gram of an assertion is over [`GRAM_POSTINGS_MAX`] (a large shard), the two
/// rarest under this cap are intersected instead of scanning the scope.
const GRAM_POSTINGS_FALLBACK_MAX: usize = 4096;
/// A candidate set this small is evaluated directly rather than narrowed further.
const CANDIDATES_SMALL: usize = 64;

/// The postings under `prefix`, or None if there are more than `cap` (the scan stops
/// there).
fn postings_capped(
    snapshot: &dyn KvSnapshot,
    prefix: &[u8],
    cap: usize,
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
        true
    })?;
    Ok((!too_many).then_some(ids))
}

/// Candidate ids from the indices, or None if the filter can't use them. Only indices
/// marked complete are used (see `index`); anything else falls back to the scope's scan.
fn indexed(
    core: &ShardCore,
    snapshot: &dyn KvSnapshot,
    filter: &Filter,
) -> ShardResult<Option<BTreeSet<EntryId>>> {
    let indexes = &core.info.indexes;
    let rules = &core.info.rules;
    let usable = |desc: &[u8], kind: IndexKind| {
        let attr = rules.get(std::str::from_utf8(desc).ok()?)?;
        indexes.usable(&attr.canonical, kind).then_some(attr)
    };
    let postings = |prefix: &[u8]| -> ShardResult<BTreeSet<EntryId>> {
        Ok(core.postings(snapshot, prefix)?.into_iter().collect())
    };
    match filter {
        Filter::EqualityMatch(ava) => {
            let Some(attr) = usable(&ava.attribute_desc, IndexKind::Equality) else { return Ok(None) };
            // Only the type itself is indexed under its name: a supertype's filter must scan.
            if attr.subtypes.len() > 1 {
                return Ok(None);
            }
            let key = if attr.canonical == "objectclass" {
                // Keys are the lowercased primary names of each class and its superclasses.
                match rules.class_lineage(&ava.assertion_value).and_then(|l| l.first()) {
                    Some(name) => Some(name.as_bytes().to_vec()),
                    None => return Ok(Some(BTreeSet::new())),
                }
            } else {
                equality_key(attr, &ava.assertion_value)
            };
            match key {
                Some(key) => Ok(Some(postings(&keys::eq_prefix(&attr.canonical, &key))?)),
                None => Ok(None),
            }
        }
        Filter::Present(desc) => match usable(desc, IndexKind::Presence) {
            Some(attr) if attr.subtypes.len() == 1 => {
                Ok(Some(postings(&keys::pres_prefix(&attr.canonical))?))
            }
            _ => Ok(None),
        },
        Filter::Substrings(sub) => {
            let Some(attr) = usable(&sub.r#type, IndexKind::Substring) else { return Ok(None) };
            if attr.subtypes.len() > 1 {
                return Ok(None);
            }
            let (mut initial, mut any, mut final_) = (None, Vec::new(), None);
            for piece in &sub.substrings {
                match piece {
                    ferrodir_proto::filter::Substring::Initial(v) => initial = Some(v.as_ref()),
                    ferrodir_proto::filter::Substring::Any(v) => any.push(v.as_ref()),
                    ferrodir_proto::filter::Substring::Final(v) => final_ = Some(v.as_ref()),
                }
            }
            let grams = assertion_grams(attr, initial, &any, final_);
            if grams.is_empty() {
                return Ok(None);
            }
            // Common grams ("use" of "user 123") match nearly everything: reading their
            // postings costs more than it saves. Like back-mdb's all-IDs cutoff, a gram with
            // more than GRAM_POSTINGS_MAX postings is skipped; later grams of a piece tend to
            // be rarer, so they are tried first, and a small candidate set ends the search
            // (the filter is evaluated on every candidate anyway).
            // In a large shard every gram may be over the cutoff ("111" of "user 1111" at
            // 100k entries): then the first two grams under a higher cap are intersected,
            // which still beats evaluating the filter on the whole scope.
            let narrow = |cap: usize, lists_max: usize| -> ShardResult<Option<BTreeSet<EntryId>>> {
                let mut found: Option<BTreeSet<EntryId>> = None;
                let mut lists = 0;
                for gram in grams.iter().rev() {
                    let prefix = keys::sub_prefix(&attr.canonical, gram);
                    let Some(ids) = postings_capped(snapshot, &prefix, cap)? else { continue };
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
            };
            match narrow(GRAM_POSTINGS_MAX, usize::MAX)? {
                Some(found) => Ok(Some(found)),
                None => narrow(GRAM_POSTINGS_FALLBACK_MAX, 2),
            }
        }
        Filter::GreaterOrEqual(ava) | Filter::LessOrEqual(ava) => {
            let Some(attr) = usable(&ava.attribute_desc, IndexKind::Ordering) else { return Ok(None) };
            let Some(bound) = ordering_key(attr, &ava.assertion_value) else { return Ok(None) };
            let greater = matches!(filter, Filter::GreaterOrEqual(_));
            let prefix = keys::ord_attr_prefix(&attr.canonical);
            let mut ids = BTreeSet::new();
            snapshot.scan_prefix(&prefix, &mut |key, _| {
                // attr ‖ 0 ‖ ordering key ‖ 0 ‖ id (8)
                if key.len() >= prefix.len() + 9 {
                    let order_key = &key[prefix.len()..key.len() - 9];
                    let keep =
                        if greater { order_key >= bound.as_slice() } else { order_key <= bound.as_slice() };
                    if keep {
                        if let Some(id) = keys::trailing_id(key) {
                            ids.insert(id);
                        }
                    }
                }
                true
            })?;
            Ok(Some(ids))
        }
        Filter::And(parts) => {
            let mut best: Option<BTreeSet<EntryId>> = None;
            for part in parts {
                if let Some(ids) = indexed(core, snapshot, part)? {
                    best = Some(match best {
                        Some(prev) => prev.intersection(&ids).copied().collect(),
                        None => ids,
                    });
                }
            }
            Ok(best)
        }
        Filter::Or(parts) if !parts.is_empty() => {
            let mut all = BTreeSet::new();
            for part in parts {
                match indexed(core, snapshot, part)? {
                    Some(ids) => all.extend(ids),
                    None => return Ok(None),
                }
            }
            Ok(Some(all))
        }
        _ => Ok(None),
    }
}

/// The attributes computed at send time (lowercased names), not stored.
pub const COMPUTED: [&str; 3] = ["entrydn", "hassubordinates", "subschemasubentry"];

/// The entry's DN as sent to clients. A container's comes from the pinned skeleton, like
/// its descendants', so that a subtree Modify DN is seen whole or not at all.
fn entry_dn(tree: &Skeleton, id: EntryId, record: &EntryRecord) -> String {
    match tree.get(id) {
        Some(node) => node.dn.to_string(),
        None => tree.dn_of_child(record.parent, &record.rdn),
    }
}

/// entryDN (RFC 5020), hasSubordinates and subschemaSubentry (RFC 4512 §4.2) of an entry.
fn computed_attributes<'a>(tree: &Skeleton, id: EntryId, dn: &'a str) -> [(&'static str, &'a [u8]); 3] {
    let has_subordinates: &'static [u8] = if tree.contains(id) { b"TRUE" } else { b"FALSE" };
    [
        ("entryDN", dn.as_bytes()),
        ("hasSubordinates", has_subordinates),
        ("subschemaSubentry", b"cn=Subschema"),
    ]
}

/// One SearchResultEntry PDU for `record`, with the requested attributes.
fn encode_entry(rules: &RuleTable, query: &Query, id: EntryId, cached: &Cached) -> Bytes {
    let sel = query.attrs;
    let record = &cached.record;
    let dn = entry_dn(query.tree, id, record);
    let mut attributes = Vec::with_capacity(256);
    for segment in cached.segments(rules) {
        let wanted = if segment.operational {
            sel.wants_operational(&segment.canonical)
                || sel.wants_with_options(&segment.canonical, &segment.description)
        } else {
            sel.wants_user(&segment.canonical, &segment.description)
        };
        if wanted {
            attributes.extend_from_slice(if sel.types_only {
                &segment.types_only
            } else {
                &segment.with_values
            });
        }
    }
    for (name, value) in computed_attributes(query.tree, id, &dn) {
        if sel.wants_operational(&name.to_ascii_lowercase()) {
            let values: &[&[u8]] = if sel.types_only { &[] } else { &[value] };
            attributes.extend(segments::partial_attribute(name.as_bytes(), values));
        }
    }
    Bytes::from(segments::search_result_entry(query.message_id, dn.as_bytes(), &attributes))
}
