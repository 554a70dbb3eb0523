//! `(member=DN)` and `(member=*)` in a search's filter, matching dynamic groups too, as slapd
//! 2.5's dynlist answers them: before the search is planned, each such assertion becomes
//! `(|(member=DN) <the dynamic groups DN is a member of>)`, the groups given as an internal
//! id-set assertion (`shard::eval::ID_SET_RULE`, the one op::memberof writes), which the
//! planner reads as exactly those candidates.
//!
//! The dynamic groups are found by a search of their own (`(objectClass=groupOfURLs)` under
//! every suffix, through op::read, as the requester), at most [`GROUPS_MAX`] of them; for
//! `(member=DN)` each memberURL is asked whether it selects DN (DN in its scope, and a
//! base search of DN with its filter finds it), for `(member=*)` whether it selects
//! anything. Other assertions on member (substrings, ordering, extensible) see stored values
//! only (docs/OPERATIONS.md, "Dynamic groups").

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use ferrodir_proto::filter::{parse_filter, Filter};
use ferrodir_proto::message::{decode_message, ProtocolOp, SearchScope};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::{id_set_filter, AttrSelection, EntryId, Scope, StopReason};

use super::url::{self, MemberUrl};
use super::{select, Collect, MEMBER_TYPE, URL_TYPE};
use crate::access::{self, Subject};
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::op::read::{self, Flow, Gathered, Sink, Target};

/// The most dynamic groups a filter on member may have to consider; one more ends the
/// search with adminLimitExceeded rather than answer without them.
pub const GROUPS_MAX: usize = 1024;

/// What the filter asks of member.
#[derive(Default)]
struct Asks {
    values: Vec<String>,
    present: bool,
}

/// Rewrites the member assertions of `filter` (module doc). Nothing is read when the filter
/// names no member or no shard may hold a dynamic group.
pub(crate) async fn prepare(ctx: &OpContext, subject: &Subject, filter: &mut Filter) -> LdapResultOf<()> {
    let mut asks = Asks::default();
    walk(filter, &mut |leaf| match leaf {
        Filter::EqualityMatch(ava) if is_member(ctx, &ava.attribute_desc) => {
            asks.values.push(String::from_utf8_lossy(&ava.assertion_value).into_owned());
        }
        Filter::Present(desc) if is_member(ctx, desc) => asks.present = true,
        _ => {}
    });
    if (asks.values.is_empty() && !asks.present) || !super::groups_may_exist(ctx) {
        return Ok(());
    }
    let groups = dynamic_groups(ctx, subject).await?;
    if groups.is_empty() {
        return Ok(());
    }
    let mut answers: Vec<(String, BTreeSet<EntryId>)> = Vec::new();
    for value in &asks.values {
        let mut ids = BTreeSet::new();
        if let Ok(dn) = ctx.config.dn_rules().parse(value) {
            for (id, urls) in &groups {
                if selects_dn(ctx, subject, urls, &dn).await? {
                    ids.insert(*id);
                }
            }
        }
        answers.push((value.clone(), ids));
    }
    let mut nonempty = BTreeSet::new();
    if asks.present {
        for (id, urls) in &groups {
            if selects_any(ctx, subject, urls).await? {
                nonempty.insert(*id);
            }
        }
    }
    rewrite(filter, &mut |leaf| {
        let ids = match leaf {
            Filter::EqualityMatch(ava) if is_member(ctx, &ava.attribute_desc) => {
                let value = String::from_utf8_lossy(&ava.assertion_value);
                answers.iter().find(|(v, _)| *v == value).map(|(_, ids)| ids)?
            }
            Filter::Present(desc) if is_member(ctx, desc) => &nonempty,
            _ => return None,
        };
        (!ids.is_empty()).then(|| Filter::Or(vec![leaf.clone(), id_set_filter(ids)]))
    });
    Ok(())
}

fn is_member(ctx: &OpContext, desc: &[u8]) -> bool {
    std::str::from_utf8(desc)
        .ok()
        .and_then(|d| ctx.config.rules.get(d))
        .is_some_and(|r| r.canonical == MEMBER_TYPE)
}

pub(super) fn walk(filter: &Filter, visit: &mut dyn FnMut(&Filter)) {
    match filter {
        Filter::And(parts) | Filter::Or(parts) => parts.iter().for_each(|p| walk(p, visit)),
        Filter::Not(inner) => walk(inner, visit),
        leaf => visit(leaf),
    }
}

pub(super) fn rewrite(filter: &mut Filter, replace: &mut dyn FnMut(&Filter) -> Option<Filter>) {
    match filter {
        Filter::And(parts) | Filter::Or(parts) => parts.iter_mut().for_each(|p| rewrite(p, replace)),
        Filter::Not(inner) => rewrite(inner, replace),
        leaf => {
            if let Some(new) = replace(leaf) {
                *leaf = new;
            }
        }
    }
}

/// Whether one of `urls` selects the entry `dn`: `dn` is in its scope and a base search of
/// it with the URL's filter, as the requester, finds it.
async fn selects_dn(
    ctx: &OpContext,
    subject: &Subject,
    urls: &[MemberUrl],
    dn: &NormDn,
) -> LdapResultOf<bool> {
    for url in urls {
        if !url.selects_dn(ctx.config.dn_rules(), dn) {
            continue;
        }
        let probe =
            MemberUrl { base: dn.to_string(), scope: SearchScope::BaseObject, filter: url.filter.clone() };
        let mut found = Collect::new(1);
        select(ctx, subject, &probe, &mut found, &["1.1"]).await?;
        if !found.dns.is_empty() || found.over {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The dynamic groups (as stored) whose memberURLs select `dn`: a Compare's memberOf.
pub(super) async fn groups_selecting(
    ctx: &OpContext,
    subject: &Subject,
    dn: &NormDn,
) -> LdapResultOf<Vec<String>> {
    let mut found = Vec::new();
    for (group, urls) in visible_groups(ctx, subject).await? {
        let urls: Vec<MemberUrl> = urls.iter().filter_map(|u| url::parse(u)).collect();
        if selects_dn(ctx, subject, &urls, dn).await? {
            found.push(group);
        }
    }
    Ok(found)
}

/// Whether one of `urls` selects any entry.
async fn selects_any(ctx: &OpContext, subject: &Subject, urls: &[MemberUrl]) -> LdapResultOf<bool> {
    for url in urls {
        let mut found = Collect::new(1);
        select(ctx, subject, url, &mut found, &["1.1"]).await?;
        if !found.dns.is_empty() || found.over {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Every dynamic group the requester can see, with its memberURLs (those it may read),
/// under every suffix, as ids and parsed URLs.
async fn dynamic_groups(ctx: &OpContext, subject: &Subject) -> LdapResultOf<Vec<(EntryId, Vec<MemberUrl>)>> {
    let config = &ctx.config;
    let mut groups = Vec::new();
    for (dn, urls) in visible_groups(ctx, subject).await? {
        let Ok(dn) = config.dn_rules().parse(&dn) else { continue };
        let Ok(located) = crate::resolve::locate(&ctx.worker, &dn).await else { continue };
        let urls: Vec<MemberUrl> = urls.iter().filter_map(|u| url::parse(u)).collect();
        if !urls.is_empty() {
            groups.push((located.id, urls));
        }
    }
    Ok(groups)
}

/// Every dynamic group the requester can see, its DN as stored and its memberURL values
/// (those it may read), under every suffix; adminLimitExceeded past [`GROUPS_MAX`].
pub(super) async fn visible_groups(
    ctx: &OpContext,
    subject: &Subject,
) -> LdapResultOf<Vec<(String, Vec<String>)>> {
    let config = &ctx.config;
    let filter = parse_filter("(objectClass=groupOfURLs)")
        .map_err(|_| LdapError::internal("the dynamic group filter does not parse"))?;
    let mut sink = Groups::default();
    for suffix in &config.suffixes {
        let base = NormDn::new(suffix.dn.clone(), config.dn_rules());
        let Ok(located) = crate::resolve::locate(&ctx.worker, &base).await else { continue };
        let mut attrs = AttrSelection::from_request(&["memberURL"], false, &config.rules, &config.schema);
        if !access::restrict_search(ctx, subject, None, located.id, &mut attrs).await {
            continue;
        }
        let target = Target {
            skeleton: ctx.worker.skeleton(),
            scope: Scope::Subtree(located.id),
            filter: Arc::new(filter.clone()),
            attrs: Arc::new(attrs),
        };
        let class = config.limits_for(&ctx.identity);
        if let Gathered::TimeLimit = read::read(ctx, &target, class, None, &mut sink).await? {
            return Err(LdapError::new(ResultCode::TIME_LIMIT_EXCEEDED, ""));
        }
        if sink.over {
            return Err(LdapError::new(
                ResultCode::ADMIN_LIMIT_EXCEEDED,
                format!("a filter on member would have to consider more than {GROUPS_MAX} dynamic groups"),
            ));
        }
    }
    Ok(sink.found)
}

/// The group search's sink: each group's DN and memberURL values.
#[derive(Default)]
pub(super) struct Groups {
    pub found: Vec<(String, Vec<String>)>,
    over: bool,
}

impl Sink for Groups {
    async fn take(&mut self, ctx: &OpContext, pdus: Vec<Bytes>) -> LdapResultOf<Flow> {
        for pdu in &pdus {
            let Ok(message) = decode_message(pdu) else { continue };
            let ProtocolOp::SearchResultEntry(entry) = message.protocol_op else { continue };
            if self.found.len() >= GROUPS_MAX {
                self.over = true;
                return Ok(Flow::Stop(StopReason::SizeLimit));
            }
            let urls = entry
                .attributes
                .iter()
                .filter(|a| {
                    std::str::from_utf8(&a.r#type)
                        .ok()
                        .and_then(|n| ctx.config.rules.get(n))
                        .is_some_and(|r| r.canonical == URL_TYPE)
                })
                .flat_map(|a| a.vals.iter())
                .filter_map(|v| std::str::from_utf8(v).ok().map(str::to_owned))
                .collect();
            self.found.push((String::from_utf8_lossy(&entry.object_name).into_owned(), urls));
        }
        Ok(Flow::More)
    }
}
