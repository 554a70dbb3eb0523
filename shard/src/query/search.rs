//! What one search asks of a shard, and the two places it is answered.
//!
//! - **Inline**, on the asking connection's worker thread: a base lookup, or a search whose
//!   indices name only a handful of candidates ([`inline_search`]). Short by construction.
//! - **Scan** (`scan`), on the search thread pool: everything else. A scan never runs on a
//!   thread that hosts a shard actor or connections, so no scan can hold up a writer, a
//!   commit reply or another client's lookup (docs/DECISIONS.md, "Where scans run").
//!
//! Matches are encoded straight into whole LDAPMessage PDUs and sent in chunks over the
//! search's bounded channel: the channel's capacity is the credit the connection's writer
//! grants. Entries and the done marker share that one FIFO, so the marker can't overtake an
//! entry.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use ferrodir_proto::filter::Filter;
use ferrodir_proto::schema::Schema;
use tokio::sync::mpsc;

use crate::core::ShardCore;
use crate::entry::ber;
use crate::entry::compactentry::WantedAttrs;
use crate::entry::record::EntryRecord;
use crate::entry::segments::Cached;
use crate::error::ShardResult;
use crate::id::EntryId;
use crate::query::candidates::{read_plan, Plan};
use crate::query::eval;
use crate::query::scope::Scope;
use crate::query::sortkeys::SortSpec;
use crate::query::stop::{StopReason, StopSignal};
use crate::rights::{EntryRights, EntryRules, TypeSet};
use crate::rules::{RuleTable, COMPUTED};
use crate::skeleton::Skeleton;

/// Entries per chunk sent to the connection, and bytes: whichever fills first.
pub const CHUNK_ENTRIES_MAX: usize = 64;
pub const CHUNK_BYTES_MAX: usize = 64 * 1024;
/// The most candidates a search may have to be answered inline on a worker thread: about
/// 64 entry reads, tens of microseconds. Anything larger goes to the search pool.
pub const INLINE_CANDIDATES_MAX: usize = 64;

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
    /// Types this requester may not read, on every entry (when `per_entry` is None).
    pub hidden: TypeSet,
    /// Types this requester may not search: assertions on them are Undefined. With
    /// `per_entry`, the types unsearchable on an entry no scoped rule names: what the
    /// planner and the prefilter go by (index candidates stay a superset either way).
    pub unsearchable: TypeSet,
    /// Set when the access rules depend on the entry: asked for each entry's own rights,
    /// which replace `hidden` and `unsearchable` there.
    pub per_entry: Option<Arc<dyn EntryRules>>,
    /// Set when the search sorts (RFC 2891): a match is sent as its id and sort keys
    /// (`sortkeys::encode_row`) instead of its PDU, for the router to sort.
    pub sort: Option<Arc<crate::query::sortkeys::SortSpec>>,
    /// Set by the router when the request selects memberOf or its filter needs its values:
    /// how to compute them (`memberof`). None: memberOf costs nothing.
    pub memberof: Option<Arc<crate::memberof::MemberOfQuery>>,
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
        self.all_user || self.names.contains(canonical) || self.wants_with_options(canonical, description)
    }

    fn wants_with_options(&self, canonical: &str, description: &str) -> bool {
        self.with_options.iter().any(|(types, options)| {
            types.iter().any(|t| t == canonical) && eval::has_options(description, options)
        })
    }

    /// Whether a stored attribute goes out: not hidden, and asked for (as a user or an
    /// operational attribute). One rule for segments and direct encoding alike.
    fn selects(&self, hidden: &TypeSet, canonical: &str, description: &str, operational: bool) -> bool {
        if hidden.contains(canonical) {
            return false;
        }
        if operational {
            self.wants_operational(canonical) || self.wants_with_options(canonical, description)
        } else {
            self.wants_user(canonical, description)
        }
    }

    /// Whether any stored attribute could go out: false for a `1.1` selection (a DN-only
    /// read, such as a dynamic group's member search), whose matches need no values decoded
    /// beyond those the filter looks at.
    pub fn wants_stored(&self) -> bool {
        self.all_user
            || self.all_operational
            || !self.names.is_empty()
            || !self.with_options.is_empty()
            || self.sort.is_some()
    }

    fn wants_operational(&self, canonical: &str) -> bool {
        // A mesh's per-attribute CSNs are bookkeeping: only a search that names them (a
        // mesh consumer's) gets them, never `+` (a slapd consumer would refuse the type).
        (self.all_operational && canonical != crate::write::stamp::ATTR_CSN_TYPE)
            || self.names.contains(canonical)
    }

    /// Whether a stored attribute named `name` (a description, options included) goes
    /// out, for senders that encode records themselves (a persist search's changes).
    pub fn selects_stored(&self, rules: &RuleTable, name: &str) -> bool {
        let owned;
        let (canonical, operational) = match rules.get(name) {
            Some(r) => (r.canonical.as_str(), r.operational),
            None => {
                owned = ferrodir_proto::entry::base_name_lower(name);
                (owned.as_str(), crate::write::stamp::STORED_OPERATIONAL.contains(&owned.as_str()))
            }
        };
        self.selects(&self.hidden, canonical, name, operational)
    }
}

/// What flows back to the connection from the shards of one search.
#[derive(Debug)]
pub enum SearchChunk {
    /// Whole encoded SearchResultEntry PDUs, one `Bytes` per entry.
    Entries(Vec<Bytes>),
    /// This shard is finished; `end` says where a windowed part stopped.
    Done { shard: usize, result: ShardResult<()>, end: Option<WindowEnd> },
}

/// One page's worth of a paged search (RFC 2696) on one shard: the matches whose ids come
/// after `after`, in id order, at most `max` of them. Entry ids never change (not on rename,
/// not on move), so the id is a total order that concurrent writes can't reshuffle: an
/// entry present for the whole paged search is sent exactly once, any other at most once.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub after: Option<EntryId>,
    pub max: usize,
}

impl Window {
    pub fn admits(&self, id: EntryId) -> bool {
        self.after.is_none_or(|after| id > after)
    }
}

/// Where a windowed part stopped: the last id it sent, and whether a further match exists
/// (looked for, after the `max`th, but not sent).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowEnd {
    pub last: Option<EntryId>,
    pub more: bool,
}

pub struct SearchTask {
    pub message_id: u32,
    pub skeleton: Arc<Skeleton>,
    pub scope: Scope,
    pub filter: Arc<Filter>,
    pub attrs: Arc<AttrSelection>,
    /// How the indices narrow the filter (`candidates::Planner::plan`), decided once by the
    /// router; None walks the scope.
    pub plan: Arc<Option<Plan>>,
    pub sink: mpsc::Sender<SearchChunk>,
    /// Raised by the router: sizeLimit, timeLimit, or nothing more wanted.
    pub stop: Arc<StopSignal>,
    /// The operation's own signal: Abandon, Unbind or the connection closing.
    pub op_stop: Arc<StopSignal>,
    /// Set for a page of a paged search: matches in id order within the window.
    pub window: Option<Window>,
}

impl SearchTask {
    /// Why this search part should stop, if it should.
    pub fn stopped(&self) -> Option<StopReason> {
        self.op_stop.raised().or_else(|| self.stop.raised())
    }

    /// How long ago the stop was raised (for the stop-latency log line).
    pub fn stop_age_us(&self) -> u64 {
        if self.op_stop.is_raised() {
            self.op_stop.age_us()
        } else {
            self.stop.age_us()
        }
    }
}

/// What a search asks of each entry, shared by the streaming path and the inline base path.
pub struct Query<'a> {
    pub message_id: u32,
    pub skeleton: &'a Skeleton,
    pub filter: &'a Filter,
    pub attrs: &'a AttrSelection,
    /// The directory's write state: what a suffix entry's contextCSN says.
    pub hub: &'a crate::write::watermark::Hub,
}

/// What a filter needs put together before it can be evaluated on an entry.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FilterNeeds {
    /// It names a computed attribute (entryDN, hasSubordinates, memberOf, ...).
    pub(crate) computed: bool,
    /// It has a DN-valued assertion (an extensible match with dnAttributes).
    pub(crate) dn: bool,
}

/// Whether the filter needs the computed attributes or the DN before it can be evaluated.
pub(crate) fn filter_needs(rules: &RuleTable, filter: &Filter) -> FilterNeeds {
    let needs_computed = eval::mentions(filter, &|desc, _| {
        std::str::from_utf8(desc)
            .ok()
            .and_then(|d| rules.get(d))
            .is_some_and(|r| COMPUTED.contains(&r.canonical.as_str()))
    });
    let needs_dn = eval::mentions(filter, &|_, dn_attributes| dn_attributes);
    FilterNeeds { computed: needs_computed, dn: needs_dn }
}

/// What the requester may see of one entry: the search's rights, or the entry's own.
pub(crate) enum Seen<'a> {
    Everywhere(&'a AttrSelection),
    Own(Arc<EntryRights>),
}

impl Seen<'_> {
    pub(crate) fn hidden(&self) -> &TypeSet {
        match self {
            Seen::Everywhere(sel) => &sel.hidden,
            Seen::Own(rights) => &rights.hidden,
        }
    }

    pub(crate) fn unsearchable(&self) -> &TypeSet {
        match self {
            Seen::Everywhere(sel) => &sel.unsearchable,
            Seen::Own(rights) => &rights.unsearchable,
        }
    }
}

/// The requester's rights on one entry; None when it may not read the entry, which a
/// search then leaves out without a word (slapd's `read` on `entry`).
pub(crate) fn seen<'a>(query: &Query<'a>, id: EntryId, record: &EntryRecord) -> Option<Seen<'a>> {
    match &query.attrs.per_entry {
        None => Some(Seen::Everywhere(query.attrs)),
        Some(per_entry) => per_entry.rights(query.skeleton, id, record).map(Seen::Own),
    }
}

/// Whether the entry is in scope, readable and matches: its rights if so.
pub(crate) fn judge<'a>(
    rules: &RuleTable,
    query: &Query<'a>,
    scope: Scope,
    needs: FilterNeeds,
    id: EntryId,
    record: &EntryRecord,
) -> Option<Seen<'a>> {
    judge_candidate(rules, query, scope, needs, id, record, None)
}

/// The type of a filter that is one equality assertion whose plan reads exactly its own
/// equality postings: every candidate such a plan names holds a value whose equality key
/// (`eqkey`, the normalised value, NUL-terminated in the posting key) is the assertion's,
/// in the same snapshot, so the filter is true of it unless the requester may not search
/// that type on that entry. None for anything else (an option in the description, a type
/// with subtypes, objectClass, a plan of another filter): those are evaluated.
///
/// Only for rules whose normalised values never hold a NUL byte: the string rules drop
/// NUL (RFC 4518 §2.2) and distinguishedNameMatch escapes it (`\00`). Under another
/// (octetStringMatch keeps bytes as they are) a stored value `K\0X` would be filed under a
/// key that starts with the assertion's prefix `K\0`, and its entry would be a candidate
/// without a value equal to K.
///
/// Evaluating `(member=<DN>)` on a group re-normalises every member value, one DN parse
/// each: a login's group lookup spent most of its time there on groups of 1,000 members
/// (docs/BENCHMARKS.md, "Login storm (issue #28)").
pub(crate) fn indexed_equality<'r>(rules: &'r RuleTable, filter: &Filter, plan: &Plan) -> Option<&'r str> {
    let (Filter::EqualityMatch(ava), Plan::Equality(prefix)) = (filter, plan) else { return None };
    if ava.attribute_desc.contains(&b';') {
        return None;
    }
    let attr = rules.get(std::str::from_utf8(&ava.attribute_desc).ok()?)?;
    use ferrodir_proto::schema::matching::Rule;
    let no_nul = matches!(
        attr.equality,
        Some(
            Rule::CaseIgnore
                | Rule::CaseExact
                | Rule::CaseIgnoreIa5
                | Rule::CaseExactIa5
                | Rule::DistinguishedName
        )
    );
    if !no_nul || attr.subtypes.len() > 1 || attr.canonical == "objectclass" {
        return None;
    }
    match crate::index::eqkey::lookup(rules, attr, &ava.assertion_value) {
        crate::index::eqkey::Lookup::Value(own) if own == *prefix => Some(attr.canonical.as_str()),
        _ => None,
    }
}

/// [`judge`] for a candidate of the index, where `exact` ([`indexed_equality`]) names the
/// type whose postings named it: then the filter holds without being evaluated, unless the
/// type is unsearchable on this entry (then it is evaluated, with the type hidden).
fn judge_candidate<'a>(
    rules: &RuleTable,
    query: &Query<'a>,
    scope: Scope,
    needs: FilterNeeds,
    id: EntryId,
    record: &EntryRecord,
    exact: Option<&str>,
) -> Option<Seen<'a>> {
    if !in_scope(query.skeleton, scope, id, record) {
        return None;
    }
    let seen = seen(query, id, record)?;
    let answered = exact.is_some_and(|canonical| !seen.unsearchable().contains(canonical));
    (answered || entry_matches(rules, query, needs, id, record, seen.unsearchable())).then_some(seen)
}

/// Evaluates the filter on one entry, putting together only what the filter needs.
pub(crate) fn entry_matches(
    rules: &RuleTable,
    query: &Query,
    needs: FilterNeeds,
    id: EntryId,
    record: &EntryRecord,
    hidden: &TypeSet,
) -> bool {
    let FilterNeeds { computed: needs_computed, dn: needs_dn } = needs;
    if !needs_computed && !needs_dn {
        return eval::matches_entry(rules, query.filter, &record.entry, None, hidden, id);
    }
    let dn_text = entry_dn(query.skeleton, id, record);
    let dn = if needs_dn { ferrodir_proto::Dn::parse(&dn_text).ok() } else { None };
    if !needs_computed {
        return eval::matches_entry(rules, query.filter, &record.entry, dn.as_ref(), hidden, id);
    }
    let mut entry = record.entry.clone();
    for (name, _, value) in computed_attributes(query.skeleton, id, &dn_text) {
        entry.attrs.push(ferrodir_proto::entry::Attribute::new(name, vec![value.to_vec()]));
    }
    if let Some(memberof) = query.attrs.memberof.as_ref().filter(|m| m.in_filter) {
        memberof.add_to(query.skeleton, &dn_text, &mut entry);
    }
    eval::matches_entry(rules, query.filter, &entry, dn.as_ref(), hidden, id)
}

/// A base-scope search of an entry of this shard, answered inline by the caller on the
/// shard's own thread: no task, no channel. The common lookup takes this path.
pub fn base_entry(core: &ShardCore, query: &Query, id: EntryId) -> ShardResult<Option<Bytes>> {
    let snapshot = core.snapshot();
    let Some(cached) = core.cached(snapshot.as_ref(), id)? else { return Ok(None) };
    let rules = &core.info.rules;
    let needs = filter_needs(rules, query.filter);
    let names = OnceCell::new();
    let record = for_filter(rules, query, &cached, &names)?;
    let Some(seen) = judge(rules, query, Scope::Base(id), needs, id, &record) else {
        crate::memberof::check(query.attrs.memberof.as_ref())?;
        return Ok(None);
    };
    let pdu = encode_entry(rules, query, id, &cached, seen.hidden());
    crate::memberof::check(query.attrs.memberof.as_ref())?;
    Ok(Some(pdu))
}

/// The record `judge` needs of `cached`: a cached entry decoded for the filter's attributes
/// (`names`, worked out once per search, on the first cached entry), a transient one as read.
fn for_filter<'c>(
    rules: &RuleTable,
    query: &Query,
    cached: &'c Cached,
    wanted: &OnceCell<Option<WantedAttrs>>,
) -> ShardResult<Cow<'c, EntryRecord>> {
    let wanted = match cached {
        Cached::Kept(_) => wanted
            .get_or_init(|| {
                selected_names(rules, query.filter, query.attrs).map(|n| WantedAttrs::new(rules, n))
            })
            .as_ref(),
        Cached::Transient(_) => None,
    };
    Ok(cached.for_filter(wanted)?)
}

/// The attribute names decoded before a candidate is judged: those the filter reads and
/// those the access rules' own filters read. None: decode whole entries. A scan decodes
/// stored records this way, and a cached entry (`compactentry`) is decoded likewise.
pub(crate) fn selected_names(
    rules: &RuleTable,
    filter: &Filter,
    attrs: &AttrSelection,
) -> Option<Vec<String>> {
    let mut names = crate::query::prefilter::referenced_names(rules, filter)?;
    if let Some(per_entry) = &attrs.per_entry {
        names.extend(per_entry.filter_names()?.iter().cloned());
        names.sort();
        names.dedup();
    }
    Some(names)
}

/// Base-scope search of an entry read elsewhere (from another shard's actor, by message).
pub fn base_record(rules: &RuleTable, query: &Query, id: EntryId, record: Arc<EntryRecord>) -> Option<Bytes> {
    let needs = filter_needs(rules, query.filter);
    let hidden = judge(rules, query, Scope::Base(id), needs, id, &record)?.hidden().clone();
    Some(encode_entry(rules, query, id, &Cached::Transient(record), &hidden))
}

/// A one-level, subtree or children search of this shard answered right here, when its
/// plan names at most [`INLINE_CANDIDATES_MAX`] candidates: the common `(uid=x)` lookup
/// costs no thread hop and never waits behind a scan. None: too big (or unindexed), run
/// it on the search pool instead.
pub fn inline_search(
    core: &ShardCore,
    query: &Query,
    scope: Scope,
    plan: Option<&Plan>,
) -> ShardResult<Option<Vec<Bytes>>> {
    let mut out = Vec::new();
    let answered = inline_search_into(core, query, scope, plan, &InlinePrep::default(), &mut out)?;
    Ok(answered.then_some(out))
}

/// What an inline search works out from the filter and the selection alone, once for all
/// the shards it asks (a subtree search asks every shard), and only once a shard has a
/// candidate to judge: a shard with none costs its index read and nothing more.
#[derive(Default)]
pub struct InlinePrep {
    needs: OnceCell<FilterNeeds>,
    names: OnceCell<Option<WantedAttrs>>,
}

/// [`inline_search`], appending the matches to `out`, with `prep` shared by the shards of
/// one search. False: too big (or unindexed) for this thread; nothing was appended.
pub fn inline_search_into(
    core: &ShardCore,
    query: &Query,
    scope: Scope,
    plan: Option<&Plan>,
    prep: &InlinePrep,
    out: &mut Vec<Bytes>,
) -> ShardResult<bool> {
    let Some(plan) = plan else { return Ok(false) };
    let snapshot = core.snapshot();
    let Some(ids) = read_plan(plan, snapshot.as_ref(), INLINE_CANDIDATES_MAX, &|| false)? else {
        return Ok(false);
    };
    let rules = &core.info.rules;
    let mut exact_cell = None;
    for id in ids.into_iter().filter(|id| id.shard() == core.info.index) {
        let Some(cached) = core.cached(snapshot.as_ref(), id)? else { continue };
        let needs = *prep.needs.get_or_init(|| filter_needs(rules, query.filter));
        let exact = *exact_cell.get_or_insert_with(|| indexed_equality(rules, query.filter, plan));
        let record = for_filter(rules, query, &cached, &prep.names)?;
        if let Some(seen) = judge_candidate(rules, query, scope, needs, id, &record, exact) {
            out.push(encode_entry(rules, query, id, &cached, seen.hidden()));
        }
    }
    crate::memberof::check(query.attrs.memberof.as_ref())?;
    Ok(true)
}

/// [`inline_search`] for one page of a paged search: the plan's candidates are already in
/// id order, so the window is a cut of them. None: too big (or unindexed) for this thread.
pub fn inline_page(
    core: &ShardCore,
    query: &Query,
    scope: Scope,
    plan: Option<&Plan>,
    window: Window,
) -> ShardResult<Option<(Vec<Bytes>, WindowEnd)>> {
    let Some(plan) = plan else { return Ok(None) };
    let snapshot = core.snapshot();
    let Some(ids) = read_plan(plan, snapshot.as_ref(), INLINE_CANDIDATES_MAX, &|| false)? else {
        return Ok(None);
    };
    let rules = &core.info.rules;
    let needs = filter_needs(rules, query.filter);
    let names = OnceCell::new();
    let (mut out, mut end) = (Vec::new(), WindowEnd::default());
    for id in ids.into_iter().filter(|id| id.shard() == core.info.index && window.admits(*id)) {
        let Some(cached) = core.cached(snapshot.as_ref(), id)? else { continue };
        let Some(seen) = judge(rules, query, scope, needs, id, &*for_filter(rules, query, &cached, &names)?)
        else {
            continue;
        };
        if out.len() >= window.max {
            end.more = true;
            break;
        }
        out.push(encode_entry(rules, query, id, &cached, seen.hidden()));
        end.last = Some(id);
    }
    crate::memberof::check(query.attrs.memberof.as_ref())?;
    Ok(Some((out, end)))
}

pub(crate) fn in_scope(skeleton: &Skeleton, scope: Scope, id: EntryId, record: &EntryRecord) -> bool {
    match scope {
        Scope::Base(base) => id == base,
        Scope::OneLevel(parent) => record.parent == parent,
        Scope::Subtree(base) => id == base || skeleton.parent_within(record.parent, base),
        Scope::Children(base) => id != base && skeleton.parent_within(record.parent, base),
    }
}

/// The entry's DN as sent to clients. A container's comes from the pinned skeleton, like
/// its descendants', so that a subtree Modify DN is seen whole or not at all.
fn entry_dn(skeleton: &Skeleton, id: EntryId, record: &EntryRecord) -> String {
    dn_of(skeleton, id, record.parent, &record.rdn)
}

fn dn_of(skeleton: &Skeleton, id: EntryId, parent: EntryId, rdn: &str) -> String {
    match skeleton.get(id) {
        Some(node) => node.dn.to_string(),
        None => skeleton.dn_of_child(parent, rdn),
    }
}

/// entryDN (RFC 5020), hasSubordinates and subschemaSubentry (RFC 4512 §4.2) of an entry.
/// The computed attributes: each one's name as sent, lowercased (what selection compares,
/// so that sending an entry lowercases nothing), and value.
fn computed_attributes<'a>(
    skeleton: &Skeleton,
    id: EntryId,
    dn: &'a str,
) -> [(&'static str, &'static str, &'a [u8]); 3] {
    let has_subordinates: &'static [u8] = if skeleton.contains(id) { b"TRUE" } else { b"FALSE" };
    [
        ("entryDN", "entrydn", dn.as_bytes()),
        ("hasSubordinates", "hassubordinates", has_subordinates),
        ("subschemaSubentry", "subschemasubentry", b"cn=Subschema"),
    ]
}

/// One SearchResultEntry PDU for `record`, with the requested attributes the requester may
/// read (`hidden`: those it may not).
pub(crate) fn encode_entry(
    rules: &RuleTable,
    query: &Query,
    id: EntryId,
    cached: &Cached,
    hidden: &TypeSet,
) -> Bytes {
    let sel = query.attrs;
    if let Some(sort) = &sel.sort {
        return sort_row(rules, sort, id, cached, hidden);
    }
    let parent = cached.parent();
    let dn = dn_of(query.skeleton, id, parent, cached.rdn());
    let mut attributes = Vec::with_capacity(256);
    if sel.wants_stored() {
        put_stored(rules, sel, cached, hidden, &mut attributes);
    }
    put_computed(query, id, parent, &dn, hidden, &mut attributes);
    Bytes::from(ber::search_result_entry(query.message_id, dn.as_bytes(), &attributes))
}

/// A sorted search's row for the entry instead of the entry: its id and sort keys.
fn sort_row(rules: &RuleTable, sort: &SortSpec, id: EntryId, cached: &Cached, hidden: &TypeSet) -> Bytes {
    let keys = match cached.for_filter(None) {
        Ok(record) => sort.keys_of(rules, &record.entry, hidden),
        // A cached entry `compactentry` encoded always decodes; if not, its keys are
        // absent and it sorts as an entry without them.
        Err(_) => sort.keys_of(rules, &ferrodir_proto::entry::Entry::new(Vec::new()), hidden),
    };
    Bytes::from(crate::query::sortkeys::encode_row(id, &keys))
}

/// Appends the stored attributes the selection returns: a kept entry's pre-encoded
/// segments as they are, a transient one's encoded here.
fn put_stored(
    rules: &RuleTable,
    sel: &AttrSelection,
    cached: &Cached,
    hidden: &TypeSet,
    attributes: &mut Vec<u8>,
) {
    match cached {
        Cached::Kept(compact) => {
            for attr in compact.attributes(rules) {
                if sel.selects(hidden, &attr.canonical, attr.description, attr.operational) {
                    if sel.types_only {
                        ber::put_partial_attribute::<&[u8]>(attributes, attr.description.as_bytes(), &[]);
                    } else {
                        attributes.extend_from_slice(attr.with_values);
                    }
                }
            }
        }
        Cached::Transient(record) => {
            for attr in &record.entry.attrs {
                let owned;
                let (canonical, operational) = match rules.get(&attr.name) {
                    Some(r) => (r.canonical.as_str(), r.operational),
                    None => {
                        owned = ferrodir_proto::entry::base_name_lower(&attr.name);
                        (owned.as_str(), crate::write::stamp::STORED_OPERATIONAL.contains(&owned.as_str()))
                    }
                };
                if sel.selects(hidden, canonical, &attr.name, operational) {
                    let values: &[Vec<u8>] = if sel.types_only { &[] } else { &attr.values };
                    ber::put_partial_attribute(attributes, attr.name.as_bytes(), values);
                }
            }
        }
    }
}

/// Appends the computed attributes the selection asks for: entryDN and its kin, a suffix
/// entry's contextCSN, memberOf.
fn put_computed(
    query: &Query,
    id: EntryId,
    parent: EntryId,
    dn: &str,
    hidden: &TypeSet,
    attributes: &mut Vec<u8>,
) {
    let sel = query.attrs;
    let wanted = |name: &str| sel.wants_operational(name) && !hidden.contains(name);
    for (name, canonical, value) in computed_attributes(query.skeleton, id, dn) {
        if wanted(canonical) {
            let values: &[&[u8]] = if sel.types_only { &[] } else { &[value] };
            attributes.extend(ber::partial_attribute(name.as_bytes(), values));
        }
    }
    if parent == EntryId::ROOT && wanted("contextcsn") {
        let csns = query.hub.context_csns();
        if !csns.is_empty() {
            let values: Vec<&[u8]> =
                if sel.types_only { Vec::new() } else { csns.iter().map(|c| c.as_bytes()).collect() };
            attributes.extend(ber::partial_attribute(b"contextCSN", &values));
        }
    }
    if let Some(memberof) = sel.memberof.as_ref().filter(|_| wanted(crate::memberof::MEMBER_OF)) {
        let values = memberof.values(query.skeleton, dn);
        if !values.is_empty() {
            let values: Vec<&[u8]> =
                if sel.types_only { Vec::new() } else { values.iter().map(|v| v.as_bytes()).collect() };
            attributes.extend(ber::partial_attribute(b"memberOf", &values));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::config::IndexConfig;
    use crate::query::candidates::Planner;
    use ferrodir_proto::filter::parse_filter;

    /// Only a bare equality whose plan is its own postings skips evaluation; an option, an
    /// unindexed or subtyped type, objectClass, or a plan made for another filter do not.
    #[test]
    fn indexed_equality_only_for_a_plan_of_the_same_assertion() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let indexes =
            IndexConfig::from_directives(&["objectClass eq", "member,uid,cn,userPassword eq"], &rules)
                .unwrap();
        let unsearchable = TypeSet::default();
        let planner = Planner { indexes: &indexes, rules: &rules, unsearchable: &unsearchable };
        let exact = |text: &str, plan_of: &str| {
            let plan = planner.plan(&parse_filter(plan_of).unwrap())?;
            indexed_equality(&rules, &parse_filter(text).unwrap(), &plan).map(str::to_string)
        };
        let member = "(member=uid=alice,ou=people,dc=example,dc=com)";
        assert_eq!(exact(member, member).as_deref(), Some("member"));
        // Another spelling of the same DN normalises to the same key.
        let spelled = "(member=UID=Alice, ou=People,dc=example,dc=com)";
        assert_eq!(exact(spelled, member).as_deref(), Some("member"));
        assert_eq!(exact("(UID=bob)", "(uid=bob)").as_deref(), Some("uid"));
        assert_eq!(exact("(uid=bob)", "(uid=alice)"), None, "the plan of another value");
        assert_eq!(exact("(cn;lang-de=bob)", "(cn;lang-de=bob)"), None, "an option");
        // name has subtypes (cn, sn...): not indexed under its own name, never planned.
        assert_eq!(exact("(name=bob)", "(cn=bob)"), None);
        assert_eq!(exact("(objectClass=person)", "(objectClass=person)"), None);
        assert_eq!(exact("(&(uid=bob)(cn=bob))", "(&(uid=bob)(cn=bob))"), None);
        assert_eq!(exact("(uid=bob)", "(&(uid=bob)(cn=bob))"), None);
        // octetStringMatch keeps a NUL, so a longer stored value could share the prefix.
        assert!(planner.plan(&parse_filter("(userPassword=x)").unwrap()).is_some());
        assert_eq!(exact("(userPassword=x)", "(userPassword=x)"), None);
    }
}
