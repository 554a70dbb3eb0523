//! memberOf for dynamic groups, as slapd 2.5's `dynlist-attrset groupOfURLs memberURL
//! member+memberOf`: with `memberof` on, an entry a dynamic group's memberURLs select lists
//! that group in its memberOf, and `(memberOf=G)` for a dynamic G matches G's computed
//! members. As slapd, an entry that is itself a dynamic group (with memberURLs) gets no
//! memberOf from this.
//!
//! - Values: the first entry of a search that selects memberOf builds, once for the
//!   search, the map from member to dynamic groups (every dynamic group the requester can
//!   see, expanded as the requester: [`super::members`], each within `members_max`); each
//!   entry sent then gains its groups.
//! - Filters: op::memberof turns `(memberOf=G)` into the id set of G's stored members and
//!   makes any id set a client wrote Undefined. So [`mark`] runs before it and puts a
//!   placeholder (a presence assertion on a type no schema has) beside each `(memberOf=G)`
//!   whose G is a dynamic group, and [`Marks::resolve`] runs after it and puts the id set
//!   of G's computed members in the placeholder's place.

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use ferrodir_proto::filter::{parse_filter, Filter};
use ferrodir_proto::message::SearchScope;
use ferrodir_shard::{id_set_filter, EntryId, MEMBER_OF};

use super::filter::Groups;
use super::url::MemberUrl;
use super::{members, select};
use crate::access::Subject;
use crate::error::LdapResultOf;
use crate::op::context::OpContext;

/// The placeholders' attribute type: no schema defines it, so a placeholder left in place
/// is Undefined, and a client can't write one that [`Marks::resolve`] would take for its own
/// (it resolves only the numbers it handed out, and a client's is made Undefined).
const PLACEHOLDER: &str = "x-ferrodir-dynlist-member-of-";

/// The dynamic groups' computed members found for a filter's `(memberOf=G)` assertions,
/// one id set per placeholder.
#[derive(Default)]
pub(crate) struct Marks {
    sets: Vec<BTreeSet<EntryId>>,
}

/// Puts a placeholder beside each `(memberOf=G)` of `filter` whose G is a dynamic group the
/// requester can see, remembering G's computed members. Nothing is read unless memberOf is
/// on and the filter names it.
pub(crate) async fn mark(ctx: &OpContext, subject: &Subject, filter: &mut Filter) -> LdapResultOf<Marks> {
    let mut marks = Marks::default();
    neutralise(filter);
    if ctx.config.memberof.is_none() || !super::groups_may_exist(ctx) {
        return Ok(marks);
    }
    let mut wanted = Vec::new();
    super::filter::walk(filter, &mut |leaf| {
        if let Some(group) = member_of_value(ctx, leaf) {
            wanted.push(group);
        }
    });
    let mut found: Vec<(String, Option<usize>)> = Vec::new();
    for group in wanted {
        if found.iter().any(|(g, _)| *g == group) {
            continue;
        }
        let ids = match group_urls(ctx, subject, &group).await? {
            Some(urls) => Some(member_ids(ctx, subject, &urls).await?),
            None => None,
        };
        let slot = ids.map(|ids| {
            marks.sets.push(ids);
            marks.sets.len() - 1
        });
        found.push((group, slot));
    }
    super::filter::rewrite(filter, &mut |leaf| {
        let group = member_of_value(ctx, leaf)?;
        let slot = found.iter().find(|(g, _)| *g == group).and_then(|(_, slot)| *slot)?;
        Some(Filter::Or(vec![
            leaf.clone(),
            Filter::Present(format!("{PLACEHOLDER}{slot}").into_bytes().into()),
        ]))
    });
    Ok(marks)
}

impl Marks {
    /// Puts each placeholder's id set in its place (after op::memberof has run).
    pub fn resolve(self, filter: &mut Filter) {
        if self.sets.is_empty() {
            return;
        }
        super::filter::rewrite(filter, &mut |leaf| {
            let Filter::Present(desc) = leaf else { return None };
            let slot: usize = std::str::from_utf8(desc).ok()?.strip_prefix(PLACEHOLDER)?.parse().ok()?;
            self.sets.get(slot).map(id_set_filter)
        });
    }
}

/// Makes a client's own placeholder assertions plain presence of an unknown type
/// (Undefined): only [`mark`] may write one that resolves.
fn neutralise(filter: &mut Filter) {
    super::filter::rewrite(filter, &mut |leaf| match leaf {
        Filter::Present(desc) if desc.to_ascii_lowercase().starts_with(PLACEHOLDER.as_bytes()) => {
            Some(Filter::Present(Bytes::from_static(b"x-ferrodir-undefined").into()))
        }
        _ => None,
    });
}

/// G of a `(memberOf=G)` leaf.
fn member_of_value(ctx: &OpContext, leaf: &Filter) -> Option<String> {
    let Filter::EqualityMatch(ava) = leaf else { return None };
    let desc = std::str::from_utf8(&ava.attribute_desc).ok()?;
    if ctx.config.rules.get(desc)?.canonical != MEMBER_OF {
        return None;
    }
    Some(String::from_utf8_lossy(&ava.assertion_value).into_owned())
}

/// The memberURLs of the dynamic group `group`, if it is one the requester can see.
async fn group_urls(ctx: &OpContext, subject: &Subject, group: &str) -> LdapResultOf<Option<Vec<String>>> {
    let Ok(filter) = parse_filter("(objectClass=groupOfURLs)") else { return Ok(None) };
    let probe = MemberUrl { base: group.to_string(), scope: SearchScope::BaseObject, filter };
    let mut sink = Groups::default();
    select(ctx, subject, &probe, &mut sink, &["memberURL"]).await?;
    Ok(sink.found.into_iter().next().map(|(_, urls)| urls).filter(|urls| !urls.is_empty()))
}

/// The ids of the entries `urls` select, dynamic groups left out (slapd gives them no
/// memberOf).
async fn member_ids(ctx: &OpContext, subject: &Subject, urls: &[String]) -> LdapResultOf<BTreeSet<EntryId>> {
    let mut ids = BTreeSet::new();
    for dn in members(ctx, subject, urls).await? {
        let Ok(dn) = ctx.config.dn_rules().parse(&dn) else { continue };
        let Ok(located) = crate::resolve::locate(&ctx.worker, &dn).await else { continue };
        let Some(record) = ctx.worker.fetch(located.id).await? else { continue };
        if !super::is_dynamic_group(&ctx.config.rules, &record.entry) {
            ids.insert(located.id);
        }
    }
    Ok(ids)
}

/// Member (by normalised DN) → the dynamic groups (as stored) that list it, for the
/// memberOf values of one search.
pub(crate) type Index = HashMap<Vec<String>, Vec<String>>;

/// Builds the [`Index`] over every dynamic group the requester can see.
pub(crate) async fn index(ctx: &OpContext, subject: &Subject) -> LdapResultOf<Index> {
    let mut index = Index::new();
    for (group, urls) in super::filter::visible_groups(ctx, subject).await? {
        // Bounded: at most GROUPS_MAX groups, each at most members_max members.
        for member in members(ctx, subject, &urls).await? {
            let Ok(dn) = ctx.config.dn_rules().parse(&member) else { continue };
            index.entry(dn.rdns).or_default().push(group.clone());
        }
    }
    Ok(index)
}
