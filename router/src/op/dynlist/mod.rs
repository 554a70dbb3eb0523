//! Dynamic groups, as slapd 2.5's slapo-dynlist with `dynlist-attrset groupOfURLs memberURL
//! member`: a `groupOfURLs` entry read by a Search or a Compare shows `member` with the DNs
//! of the entries its memberURLs (`ldap:///BASE??SCOPE?FILTER`, [`url`]) select. The values
//! are computed when the entry is read, never stored.
//!
//! A stage of the search pipeline, after the read: [`Expanding`] wraps the mode's sink
//! (stream, page; a sorted search calls [`Expansion::expand_pdu`] per entry) and rewrites each group entry's PDU before the sink takes it. Each
//! memberURL is a search of its own through `op::read` (the same plan, scatter and gather
//! as any search, inline or on the pool, every shard), under the requester's access rules:
//! a base it may not search, or an entry it may not see, adds no member, as slapd runs
//! dynlist's internal searches as the requester. The matches are collected in a plain sink,
//! so a memberURL that selects another dynamic group adds that group's DN and never expands
//! it (dynlist without nesting).
//!
//! Bounded: at most `[dynlist] members_max` members per group (their DNs are held while the
//! entry is rewritten) and [`MEMBER_URLS_MAX`] memberURLs per entry; past either, the
//! operation ends with adminLimitExceeded (11).
//!
//! `(member=DN)` and `(member=*)` filters match dynamic groups too ([`filter`]).
//!
//! `by group/groupOfURLs/memberURL=` access rules count a dynamic group's members ([`acl`]);
//! a plain `by group=` does not, as in slapd.
//!
//! With `memberof` on, memberOf and `(memberOf=G)` see dynamic groups too ([`member_of`]).
//! Sorted and VLV searches (op::sort) expand each entry they send.
//!
//! A typesOnly search shows the `member` type on a dynamic group with members, as slapd.
//!
//! What it does not do (docs/OPERATIONS.md, "Dynamic groups"): a syncrepl search returns
//! the group entry without computed members (a consumer replicates what is stored).

pub(crate) mod acl;
mod filter;
mod member_of;
mod names;
mod url;

pub use names::MEMBER_URLS_MAX;
use names::{CLASS_TYPE, GROUP_CLASS, GROUP_CLASS_OID, MEMBER_TYPE, URL_TYPE};

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use ferrodir_proto::message::{decode_message, encode_message, PartialAttribute, ProtocolOp, SearchScope};
use ferrodir_proto::ResultCode;
use ferrodir_shard::{AttrSelection, Plan, Planner, Probe, StopReason, TypeSet};

use crate::access::{self, Subject};
use crate::acl::view::{Region, RegionKind};
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::op::read::{self, Flow, Gathered, Sink, Target};

pub(crate) use filter::prepare as prepare_filter;
pub(crate) use member_of::mark as mark_member_of;
pub(crate) use url::MemberUrl;

/// A search's dynlist stage: who reads, what it adds (member values to dynamic groups,
/// memberOf values to their members), and which types it added to the selection (to be
/// taken out again before the entry is sent).
pub(crate) struct Expansion {
    subject: Subject,
    member: bool,
    member_of: bool,
    /// A typesOnly search: a dynamic group with members shows the `member` type alone.
    types_only: bool,
    strip: Vec<String>,
    /// Member → dynamic groups, built at the first entry of a search selecting memberOf.
    index: tokio::sync::OnceCell<member_of::Index>,
}

impl Expansion {
    /// The stage for a search selecting `attrs`, if it needs one: values are asked for,
    /// some shard may hold a groupOfURLs entry, and the selection names `member` (or all
    /// user attributes) or, with `memberof` on, memberOf (or all operational attributes).
    /// Widens `attrs` with objectClass and memberURL when they are not selected, so that
    /// group entries can be recognised and expanded.
    pub fn prepare(ctx: &OpContext, subject: &Subject, attrs: &mut AttrSelection) -> Option<Self> {
        let selects = |attrs: &AttrSelection, name: &str| attrs.all_user || attrs.names.contains(name);
        let member = selects(attrs, MEMBER_TYPE);
        let member_of = ctx.config.memberof.is_some()
            && (attrs.all_operational || attrs.names.contains(ferrodir_shard::MEMBER_OF));
        if attrs.sort.is_some() || !(member || member_of) || !groups_may_exist(ctx) {
            return None;
        }
        if attrs.types_only {
            // No values to read the memberURLs from: each entry is looked up (below).
            return member.then(|| Self {
                subject: subject.clone(),
                member,
                member_of: false,
                types_only: true,
                strip: Vec::new(),
                index: tokio::sync::OnceCell::new(),
            });
        }
        let mut strip = Vec::new();
        for name in [CLASS_TYPE, URL_TYPE] {
            if !selects(attrs, name) {
                attrs.names.insert(name.to_string());
                strip.push(name.to_string());
            }
        }
        Some(Self {
            subject: subject.clone(),
            member,
            member_of,
            types_only: false,
            strip,
            index: tokio::sync::OnceCell::new(),
        })
    }

    /// `pdus` with each dynamic group's member values added (and the types the stage added
    /// taken out again).
    pub async fn expand(&self, ctx: &OpContext, pdus: Vec<Bytes>) -> LdapResultOf<Vec<Bytes>> {
        let mut out = Vec::with_capacity(pdus.len());
        for pdu in pdus {
            out.push(self.expand_pdu(ctx, pdu).await?);
        }
        Ok(out)
    }

    /// One entry's PDU with its computed values added (and the types the stage added taken
    /// out again); a PDU that is no group and no member of one comes back as it was.
    pub async fn expand_pdu(&self, ctx: &OpContext, pdu: Bytes) -> LdapResultOf<Bytes> {
        if self.types_only {
            return self.type_only(ctx, pdu).await;
        }
        // A `*` search in a directory with dynamic groups: an entry whose bytes don't even
        // name memberURL is no group to expand, and there is nothing to take out.
        if !self.member_of && self.strip.is_empty() && !names_member_url(&pdu) {
            return Ok(pdu);
        }
        let Ok(mut message) = decode_message(&pdu) else { return Ok(pdu) };
        let ProtocolOp::SearchResultEntry(entry) = &mut message.protocol_op else { return Ok(pdu) };
        let rules = &ctx.config.rules;
        let canonical = |a: &PartialAttribute| {
            std::str::from_utf8(&a.r#type).ok().and_then(|name| rules.get(name)).map(|r| r.canonical.clone())
        };
        let is_group =
            entry.attributes.iter().filter(|a| canonical(a).as_deref() == Some(CLASS_TYPE)).any(|a| {
                a.vals.iter().any(|v| {
                    v.eq_ignore_ascii_case(GROUP_CLASS.as_bytes()) || v.as_ref() == GROUP_CLASS_OID.as_bytes()
                })
            });
        let dynamic = is_group
            && entry
                .attributes
                .iter()
                .any(|a| canonical(a).as_deref() == Some(URL_TYPE) && !a.vals.is_empty());
        let group_of = match self.member_of && !dynamic {
            true => self.groups_of(ctx, &entry.object_name).await?,
            false => Vec::new(),
        };
        if !(is_group && self.member) && group_of.is_empty() && self.strip.is_empty() {
            return Ok(pdu);
        }
        let urls: Vec<String> = entry
            .attributes
            .iter()
            .filter(|a| canonical(a).as_deref() == Some(URL_TYPE))
            .flat_map(|a| a.vals.iter())
            .filter_map(|v| std::str::from_utf8(v).ok().map(str::to_owned))
            .collect();
        let group_dn = String::from_utf8_lossy(&entry.object_name).into_owned();
        let members = match self.member && is_group && !urls.is_empty() {
            true => self.members_shown(ctx, &group_dn, &urls).await?,
            false => Vec::new(),
        };
        entry.attributes.retain(|a| canonical(a).is_none_or(|c| !self.strip.contains(&c)));
        if !members.is_empty() {
            add_values(entry, MEMBER_TYPE, "member", members, &canonical);
        }
        if !group_of.is_empty() {
            add_values(entry, ferrodir_shard::MEMBER_OF, "memberOf", group_of, &canonical);
        }
        let encoded = encode_message(&message).map_err(|e| LdapError::internal(format!("dynlist: {e}")))?;
        Ok(Bytes::from(encoded))
    }

    /// A typesOnly search's entry: a dynamic group (read from its shard, the PDU has no
    /// values) with computed members gains the `member` type, without values, as slapd.
    async fn type_only(&self, ctx: &OpContext, pdu: Bytes) -> LdapResultOf<Bytes> {
        let Some(name) = entry_name(&pdu).and_then(|n| std::str::from_utf8(n).ok()) else { return Ok(pdu) };
        let Ok(dn) = ctx.config.dn_rules().parse(name) else { return Ok(pdu) };
        let Ok(located) = crate::resolve::locate(&ctx.worker, &dn).await else { return Ok(pdu) };
        let Some(record) = ctx.worker.fetch(located.id).await? else { return Ok(pdu) };
        if !is_dynamic_group(&ctx.config.rules, &record.entry) {
            return Ok(pdu);
        }
        let urls: Vec<String> = record
            .entry
            .attrs
            .iter()
            .filter(|a| ctx.config.rules.get(&a.name).is_some_and(|r| r.canonical == URL_TYPE))
            .flat_map(|a| a.values.iter())
            .filter_map(|v| std::str::from_utf8(v).ok().map(str::to_owned))
            .collect();
        let name = name.to_owned();
        if self.members_shown(ctx, &name, &urls).await?.is_empty() {
            return Ok(pdu);
        }
        let Ok(mut message) = decode_message(&pdu) else { return Ok(pdu) };
        let ProtocolOp::SearchResultEntry(entry) = &mut message.protocol_op else { return Ok(pdu) };
        let rules = &ctx.config.rules;
        let has_member = entry.attributes.iter().any(|a| {
            std::str::from_utf8(&a.r#type)
                .ok()
                .and_then(|n| rules.get(n))
                .is_some_and(|r| r.canonical == MEMBER_TYPE)
        });
        if !has_member {
            entry
                .attributes
                .push(PartialAttribute { r#type: Bytes::from_static(b"member").into(), vals: Vec::new() });
        }
        let encoded = encode_message(&message).map_err(|e| LdapError::internal(format!("dynlist: {e}")))?;
        Ok(Bytes::from(encoded))
    }

    /// The dynamic groups whose memberURLs select the entry `dn` (memberOf values).
    async fn groups_of(&self, ctx: &OpContext, dn: &[u8]) -> LdapResultOf<Vec<String>> {
        let index = self.index.get_or_try_init(|| member_of::index(ctx, &self.subject)).await?;
        let Some(dn) = std::str::from_utf8(dn).ok().and_then(|t| ctx.config.dn_rules().parse(t).ok()) else {
            return Ok(Vec::new());
        };
        Ok(index.get(&dn.rdns).cloned().unwrap_or_default())
    }

    /// The computed members of the group `group_dn`, if the requester may read its member
    /// attribute (slapd's dynlist checks read access to it too).
    async fn members_shown(
        &self,
        ctx: &OpContext,
        group_dn: &str,
        urls: &[String],
    ) -> LdapResultOf<Vec<String>> {
        let config = &ctx.config;
        let Ok(dn) = config.dn_rules().parse(group_dn) else { return Ok(Vec::new()) };
        if !self.subject.is_root() {
            let entry = match crate::resolve::locate(&ctx.worker, &dn).await {
                Ok(located) => access::entry_for_rules(ctx, &self.subject, located.id).await?,
                Err(_) => None,
            };
            let level = access::level(
                config,
                &self.subject,
                &dn,
                entry.as_ref(),
                crate::acl::rule::Attr::Type(MEMBER_TYPE),
            );
            if level < crate::acl::Level::Read {
                return Ok(Vec::new());
            }
        }
        members(ctx, &self.subject, urls).await
    }
}

/// Adds `members` to the entry's attribute `name` (canonical) spelled `spelled` (after any
/// values it holds, without repeating one), as slapd's dynlist appends them.
fn add_values(
    entry: &mut ferrodir_proto::message::SearchResultEntry,
    name: &str,
    spelled: &'static str,
    members: Vec<String>,
    canonical: &dyn Fn(&PartialAttribute) -> Option<String>,
) {
    match entry.attributes.iter_mut().find(|a| canonical(a).as_deref() == Some(name)) {
        Some(stored) => {
            let have: HashSet<Vec<u8>> = stored.vals.iter().map(|v| v.to_ascii_lowercase()).collect();
            for member in members {
                if !have.contains(&member.to_ascii_lowercase().into_bytes()) {
                    stored.vals.push(member.into_bytes().into());
                }
            }
        }
        None => entry.attributes.push(PartialAttribute {
            r#type: Bytes::from_static(spelled.as_bytes()).into(),
            vals: members.into_iter().map(|m| m.into_bytes().into()).collect(),
        }),
    }
}

/// The DNs (as stored) of the entries `urls` select that `subject` may see, each once, in
/// the order found; adminLimitExceeded past `[dynlist] members_max` or [`MEMBER_URLS_MAX`].
pub(crate) async fn members(
    ctx: &OpContext,
    subject: &Subject,
    urls: &[String],
) -> LdapResultOf<Vec<String>> {
    if urls.len() > MEMBER_URLS_MAX {
        return Err(LdapError::new(
            ResultCode::ADMIN_LIMIT_EXCEEDED,
            format!("dynamic group has more than {MEMBER_URLS_MAX} memberURL values"),
        ));
    }
    let mut found = Collect::new(ctx.config.dynlist.members_max);
    for text in urls {
        let Some(url) = url::parse(text) else { continue };
        select(ctx, subject, &url, &mut found, &["1.1"]).await?;
        if found.over {
            break;
        }
    }
    if found.over {
        return Err(LdapError::new(
            ResultCode::ADMIN_LIMIT_EXCEEDED,
            format!("dynamic group has more than {} members ([dynlist] members_max)", found.max),
        ));
    }
    Ok(found.dns)
}

/// Adds to `found` the entries one memberURL selects: a search of its own, through
/// op::read, as the requester. A base that is missing, outside the directory or not
/// searchable by the requester selects nothing.
async fn select<S: Sink>(
    ctx: &OpContext,
    subject: &Subject,
    url: &MemberUrl,
    found: &mut S,
    selection: &[&str],
) -> LdapResultOf<()> {
    let config = &ctx.config;
    let Ok(base) = config.dn_rules().parse(&url.base) else { return Ok(()) };
    if base.is_root() {
        return Ok(());
    }
    let Ok(located) = crate::resolve::locate(&ctx.worker, &base).await else { return Ok(()) };
    let base_entry = access::entry_for_rules(ctx, subject, located.id).await?;
    if access::base_refusal(access::entry_access(config, subject, &base, base_entry.as_ref())).is_some() {
        return Ok(());
    }
    let mut attrs = AttrSelection::from_request(selection, false, &config.rules, &config.schema);
    let region = config.access_rules.uses_dns().then(|| Region { base, kind: region_kind(url.scope) });
    if !access::restrict_search(ctx, subject, region.as_ref(), located.id, &mut attrs).await {
        return Ok(());
    }
    let mut filter = url.filter.clone();
    crate::op::memberof::prepare(ctx, subject, &mut filter, &mut attrs).await?;
    let target = Target {
        skeleton: ctx.worker.skeleton(),
        scope: read::scope(url.scope, located.id),
        filter: Arc::new(filter),
        attrs: Arc::new(attrs),
    };
    let class = ctx.config.limits_for(&ctx.identity);
    match read::read(ctx, &target, class, None, found).await? {
        Gathered::All { .. } | Gathered::Stopped => Ok(()),
        Gathered::TimeLimit => Err(LdapError::new(ResultCode::TIME_LIMIT_EXCEEDED, "")),
        Gathered::Cancelled => Ok(()),
    }
}

fn region_kind(scope: SearchScope) -> RegionKind {
    match scope {
        SearchScope::BaseObject => RegionKind::Base,
        SearchScope::SingleLevel => RegionKind::One,
        SearchScope::WholeSubtree => RegionKind::Subtree,
        SearchScope::SubordinateSubtree => RegionKind::Children,
    }
}

/// Whether some shard may hold a groupOfURLs entry: false when every shard's Bloom filter
/// says none holds `objectClass: groupOfURLs`, so a directory without dynamic groups pays
/// nothing for this stage.
fn groups_may_exist(ctx: &OpContext) -> bool {
    let config = &ctx.config;
    let Ok(filter) = ferrodir_proto::filter::parse_filter("(objectClass=groupOfURLs)") else { return true };
    let unsearchable = TypeSet::default();
    let planner = Planner { indexes: &config.indexes, rules: &config.rules, unsearchable: &unsearchable };
    let plan = planner.plan(&filter);
    let Some(key) = plan.as_ref().and_then(Plan::required_equality) else { return true };
    let probe = Probe::new(key);
    (0..ctx.worker.shard_count())
        .any(|s| config.blooms.get(s).is_none_or(|bloom| bloom.may_contain_probe(&probe)))
}

/// The member searches' sink: each selected entry's DN once (by its normalised form), at
/// most `max`.
struct Collect {
    max: usize,
    seen: HashSet<String>,
    dns: Vec<String>,
    over: bool,
}

impl Collect {
    fn new(max: usize) -> Self {
        Self { max, seen: HashSet::new(), dns: Vec::new(), over: false }
    }
}

impl Sink for Collect {
    async fn take(&mut self, _ctx: &OpContext, pdus: Vec<Bytes>) -> LdapResultOf<Flow> {
        for pdu in &pdus {
            // The DN as the shards wrote it: one entry is always sent under the same bytes
            // (its stored spelling), so the bytes tell repeats apart without parsing.
            let Some(name) = entry_name(pdu) else { continue };
            let Ok(text) = std::str::from_utf8(name) else { continue };
            if self.seen.contains(text) {
                continue;
            }
            if self.dns.len() >= self.max {
                self.over = true;
                return Ok(Flow::Stop(StopReason::SizeLimit));
            }
            self.seen.insert(text.to_owned());
            self.dns.push(text.to_owned());
        }
        Ok(Flow::More)
    }
}

/// Whether `pdu` holds the bytes `memberURL` in any case, or its OID: a PDU without them
/// has no memberURL attribute.
fn names_member_url(pdu: &[u8]) -> bool {
    const URL_OID: &[u8] = b"2.16.840.1.113730.3.1.198";
    pdu.windows(URL_TYPE.len()).any(|w| w.eq_ignore_ascii_case(URL_TYPE.as_bytes()))
        || pdu.windows(URL_OID.len()).any(|w| w == URL_OID)
}

/// The objectName of an encoded SearchResultEntry PDU (`30 L 02 L id 64 L 04 L name`),
/// read without decoding the rest: the member searches need nothing else of their
/// matches. None for anything else.
fn entry_name(pdu: &[u8]) -> Option<&[u8]> {
    /// The tag at `at`, and the content's start and end.
    fn tlv(pdu: &[u8], at: usize) -> Option<(u8, usize, usize)> {
        let tag = *pdu.get(at)?;
        let first = *pdu.get(at + 1)?;
        let (start, length) = if first < 0x80 {
            (at + 2, usize::from(first))
        } else {
            let k = usize::from(first & 0x7F);
            if k == 0 || k > 4 {
                return None;
            }
            let bytes = pdu.get(at + 2..at + 2 + k)?;
            (at + 2 + k, bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b)))
        };
        let end = start.checked_add(length)?;
        (end <= pdu.len()).then_some((tag, start, end))
    }
    let (0x30, message, _) = tlv(pdu, 0)? else { return None };
    let (0x02, _, id_end) = tlv(pdu, message)? else { return None };
    let (0x64, entry, _) = tlv(pdu, id_end)? else { return None };
    let (0x04, start, end) = tlv(pdu, entry)? else { return None };
    pdu.get(start..end)
}

/// A sink with the dynlist stage in front: each batch is expanded, then handed on.
pub(crate) struct Expanding<'a, S> {
    pub inner: &'a mut S,
    pub expansion: Option<&'a Expansion>,
}

impl<S: Sink> Sink for Expanding<'_, S> {
    async fn take(&mut self, ctx: &OpContext, pdus: Vec<Bytes>) -> LdapResultOf<Flow> {
        let pdus = match self.expansion {
            Some(expansion) if !pdus.is_empty() => expansion.expand(ctx, pdus).await?,
            _ => pdus,
        };
        self.inner.take(ctx, pdus).await
    }

    async fn take_base(&mut self, ctx: &OpContext, pdu: Bytes) -> LdapResultOf<()> {
        let pdu = match self.expansion {
            Some(expansion) => expansion.expand_pdu(ctx, pdu).await?,
            None => pdu,
        };
        self.inner.take_base(ctx, pdu).await
    }

    fn room(&self) -> Option<usize> {
        self.inner.room()
    }
}

/// The memberOf values a Compare of `entry` (shown as `dn`) reads from dynamic groups,
/// with `memberof` on; none for an entry that is itself a dynamic group (as slapd).
pub(crate) async fn compare_member_of(
    ctx: &OpContext,
    subject: &Subject,
    entry: &ferrodir_proto::entry::Entry,
    dn: &str,
) -> LdapResultOf<Vec<Vec<u8>>> {
    if ctx.config.memberof.is_none() || !groups_may_exist(ctx) || is_dynamic_group(&ctx.config.rules, entry) {
        return Ok(Vec::new());
    }
    let Ok(dn) = ctx.config.dn_rules().parse(dn) else { return Ok(Vec::new()) };
    Ok(filter::groups_selecting(ctx, subject, &dn).await?.into_iter().map(String::into_bytes).collect())
}

/// Whether `entry` is a dynamic group: a groupOfURLs with memberURL values. slapd gives such
/// an entry no memberOf from dynamic groups; a groupOfURLs without memberURL gets them.
fn is_dynamic_group(rules: &ferrodir_shard::RuleTable, entry: &ferrodir_proto::entry::Entry) -> bool {
    ferrodir_shard::has_class(rules, entry, GROUP_CLASS.as_bytes())
        && entry
            .attrs
            .iter()
            .any(|a| rules.get(&a.name).is_some_and(|r| r.canonical == URL_TYPE) && !a.values.is_empty())
}

/// The member values of `entry` a Compare reads, when it is a dynamic group (a groupOfURLs
/// with memberURLs): computed as a search shows them. None: not a dynamic group. On a
/// dynamic group slapd's dynlist answers compareFalse, never noSuchAttribute, when no value
/// matches, even with no members at all; the caller does the same.
pub(crate) async fn compare_values(
    ctx: &OpContext,
    subject: &Subject,
    entry: &ferrodir_proto::entry::Entry,
) -> LdapResultOf<Option<Vec<Vec<u8>>>> {
    if !ferrodir_shard::has_class(&ctx.config.rules, entry, GROUP_CLASS.as_bytes()) {
        return Ok(None);
    }
    let urls: Vec<String> = entry
        .attrs
        .iter()
        .filter(|a| ctx.config.rules.get(&a.name).is_some_and(|r| r.canonical == URL_TYPE))
        .flat_map(|a| a.values.iter())
        .filter_map(|v| std::str::from_utf8(v).ok().map(str::to_owned))
        .collect();
    if urls.is_empty() {
        return Ok(None);
    }
    Ok(Some(members(ctx, subject, &urls).await?.into_iter().map(String::into_bytes).collect()))
}

#[cfg(test)]
mod tests {
    use ferrodir_proto::message::{LdapMessage, SearchResultEntry};

    use super::*;

    #[test]
    fn entry_name_reads_the_dn_of_an_encoded_entry() {
        for dn in ["uid=a,dc=x".to_string(), format!("cn={},dc=x", "long".repeat(100))] {
            let message = LdapMessage {
                message_id: 70000,
                protocol_op: ProtocolOp::SearchResultEntry(SearchResultEntry {
                    object_name: dn.clone().into_bytes().into(),
                    attributes: vec![PartialAttribute {
                        r#type: b"cn".to_vec().into(),
                        vals: vec![b"a".to_vec().into()],
                    }],
                }),
                controls: None,
            };
            let pdu = encode_message(&message).unwrap();
            assert_eq!(entry_name(&pdu), Some(dn.as_bytes()));
            assert_eq!(entry_name(&pdu[..pdu.len() - 1]), None, "a cut PDU");
        }
        assert_eq!(entry_name(b""), None);
        assert!(names_member_url(b"..MEMBERurl.."));
        assert!(names_member_url(b"..2.16.840.1.113730.3.1.198.."));
        assert!(!names_member_url(b"member: uid=a,dc=x"));
        assert_eq!(entry_name(&[0x30, 0x03, 0x02, 0x01, 0x01]), None);
    }
}
