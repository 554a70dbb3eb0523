//! memberOf and the Active Directory group rules in searches and compares.
//!
//! Before a search is planned, [`prepare`] rewrites its filter:
//! - `(memberOf=G)`: the router reads G (if the requester may read it), resolves its
//!   member and uniqueMember values to entry ids, and puts an id-set assertion in its place
//!   (`shard::eval::ID_SET_RULE`), which the planner turns into exactly those candidates
//!   (`Plan::Ids`) and evaluation answers by id: an indexed lookup, not a scan. With
//!   `memberof_transitive` on, memberOf is transitive, so the set is G's whole chain.
//! - `(memberOf:1.2.840.113556.1.4.1941:=G)` (LDAP_MATCHING_RULE_IN_CHAIN): every entry G
//!   contains, through nested groups, walking down from G.
//! - `(member:1.2.840.113556.1.4.1941:=X)` (or uniqueMember): every group that contains X
//!   through nested groups, walking up through the member postings (`shard::memberof`).
//!
//! Walks visit each group once (so cycles end), follow only groups the requester may read,
//! and stop with adminLimitExceeded (11) past `memberof_chain_depth_max` levels or
//! `memberof_chain_entries_max` entries. Other assertions on memberOf (presence,
//! substrings) are evaluated on each candidate from its computed values. An id-set
//! assertion in a client's own filter is made Undefined: only the router may write one.
//!
//! Which groups the requester may read is decided over the whole directory (the search's
//! own view is reduced to its region, and groups usually live elsewhere).

use std::collections::BTreeSet;
use std::sync::Arc;

use ferrodir_proto::filter::{Filter, MatchingRuleAssertion};
use ferrodir_proto::schema::matching::{self, Rule};
use ferrodir_proto::schema::DnNormalizer;
use ferrodir_proto::NormDn;
use ferrodir_shard::{
    id_set_filter, is_id_set, memberof_too_deep, memberof_too_many, AttrSelection, EntryId, EntryRecord,
    GroupAccess, Groups, MemberOfQuery, Plan, Skeleton, MEMBER_OF, MEMBER_TYPES,
};

use crate::access::{self, Subject};
use crate::error::LdapResultOf;
use crate::op::context::OpContext;

/// One assertion the router answers from the group graph.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ask {
    /// `(memberOf=G)`: G's members (its chain, with `memberof_transitive`).
    Members(String),
    /// In-chain on memberOf: every entry G contains, transitively.
    Chain(String),
    /// In-chain on member or uniqueMember: every group containing X, transitively.
    Containers(String),
    /// Not answerable (a value that is no DN): Undefined.
    Undefined,
}

/// Rewrites the memberOf and in-chain assertions of `filter` (module doc) and, when the
/// request selects memberOf or its filter still needs its values, sets `attrs.memberof`.
pub async fn prepare(
    ctx: &OpContext,
    subject: &Subject,
    filter: &mut Filter,
    attrs: &mut AttrSelection,
) -> LdapResultOf<()> {
    let config = &ctx.config;
    let Some(groups) = config.memberof.clone() else {
        neutralise(filter, &mut |_| None);
        return Ok(());
    };
    let rules = &config.rules;
    let unsearchable = attrs.per_entry.is_none() && attrs.unsearchable.contains(MEMBER_OF);
    let mut asks = Vec::new();
    let mut in_filter = false;
    walk(filter, &mut |f| {
        let ask = classify(rules, f, unsearchable);
        if ask.is_none() && mentions_member_of(rules, f) {
            in_filter = true;
        }
        if let Some(ask) = ask {
            asks.push(ask);
        }
    });
    let wants_values = attrs.all_operational || attrs.names.contains(MEMBER_OF);
    if asks.is_empty() && !in_filter && !wants_values {
        neutralise(filter, &mut |_| None);
        return Ok(());
    }
    let access = group_access(ctx, subject).await;
    let skeleton = ctx.worker.skeleton();
    asks.sort();
    asks.dedup();
    let mut answers = Vec::with_capacity(asks.len());
    for ask in asks {
        let ids = answer(ctx, &groups, &access, &skeleton, &ask).await?;
        answers.push((ask, ids));
    }
    neutralise(filter, &mut |f| {
        let ask = classify(rules, f, unsearchable)?;
        let ids = answers.iter().find(|(a, _)| *a == ask).and_then(|(_, ids)| ids.as_ref());
        Some(match ids {
            Some(ids) => id_set_filter(ids),
            None => undefined(),
        })
    });
    if in_filter || wants_values {
        attrs.memberof = Some(Arc::new(MemberOfQuery::new(groups, access, in_filter)));
    }
    Ok(())
}

/// The shards that may hold a match of a plan that lists its candidates: those some
/// listed id lives on (the others are not asked at all).
pub fn prune_shards(plan: Option<&Plan>, shards: &mut Vec<usize>) {
    let Some(ids) = plan.and_then(required_ids) else { return };
    shards.retain(|shard| ids.iter().any(|id| id.shard() == *shard));
}

fn required_ids(plan: &Plan) -> Option<&[EntryId]> {
    match plan {
        Plan::Ids(ids) => Some(ids),
        Plan::And(parts) => parts.iter().find_map(required_ids),
        _ => None,
    }
}

/// A Compare of memberOf: the target's memberOf values, as a search would return them.
pub async fn compare_values(ctx: &OpContext, subject: &Subject, dn: &str) -> LdapResultOf<Vec<Vec<u8>>> {
    let Some(groups) = ctx.config.memberof.clone() else { return Ok(Vec::new()) };
    let access = group_access(ctx, subject).await;
    let query = MemberOfQuery::new(groups, access, false);
    let values = query.values(&ctx.worker.skeleton(), dn);
    query.check()?;
    Ok(values.iter().map(|v| v.as_bytes().to_vec()).collect())
}

/// Which groups the requester may read, over the whole directory.
async fn group_access(ctx: &OpContext, subject: &Subject) -> GroupAccess {
    if subject.is_root() {
        return GroupAccess::Every;
    }
    let mut view = AttrSelection::default();
    if !access::restrict_search(ctx, subject, None, EntryId::ROOT, &mut view).await {
        return GroupAccess::NoGroup;
    }
    match view.per_entry {
        Some(rules) => GroupAccess::PerEntry(rules),
        None => GroupAccess::Every,
    }
}

/// Calls `visit` on every leaf assertion.
fn walk(filter: &Filter, visit: &mut dyn FnMut(&Filter)) {
    match filter {
        Filter::And(parts) | Filter::Or(parts) => parts.iter().for_each(|p| walk(p, visit)),
        Filter::Not(inner) => walk(inner, visit),
        leaf => visit(leaf),
    }
}

/// Replaces leaves by what `replace` gives, and a client's id-set assertions by an
/// Undefined one.
fn neutralise(filter: &mut Filter, replace: &mut dyn FnMut(&Filter) -> Option<Filter>) {
    match filter {
        Filter::And(parts) | Filter::Or(parts) => parts.iter_mut().for_each(|p| neutralise(p, replace)),
        Filter::Not(inner) => neutralise(inner, replace),
        Filter::ExtensibleMatch(mra) if is_id_set(mra) => *filter = undefined(),
        leaf => {
            if let Some(new) = replace(leaf) {
                *leaf = new;
            }
        }
    }
}

/// An assertion every entry evaluates to Undefined: a matching rule nobody knows.
fn undefined() -> Filter {
    Filter::ExtensibleMatch(MatchingRuleAssertion {
        matching_rule: Some(b"ferrodir-undefined".to_vec().into()),
        r#type: None,
        match_value: Vec::new().into(),
        dn_attributes: false,
    })
}

/// The canonical type a description names, if it carries no options.
fn canonical<'a>(rules: &'a ferrodir_shard::RuleTable, desc: &[u8]) -> Option<&'a str> {
    let desc = std::str::from_utf8(desc).ok()?;
    if desc.contains(';') {
        return None;
    }
    rules.get(desc).map(|r| r.canonical.as_str())
}

/// What the router answers for this leaf, if anything. An assertion on memberOf the
/// requester may not search stays as it is (Undefined, as every such assertion).
fn classify(rules: &ferrodir_shard::RuleTable, leaf: &Filter, unsearchable: bool) -> Option<Ask> {
    match leaf {
        Filter::EqualityMatch(ava)
            if !unsearchable && canonical(rules, &ava.attribute_desc) == Some(MEMBER_OF) =>
        {
            Some(dn_of(rules.dn(), &ava.assertion_value).map_or(Ask::Undefined, Ask::Members))
        }
        Filter::ExtensibleMatch(mra) if !mra.dn_attributes => {
            let rule = std::str::from_utf8(mra.matching_rule.as_deref()?).ok()?;
            if matching::lookup(rule)?.0 != Rule::InChain {
                return None;
            }
            let target = canonical(rules, mra.r#type.as_deref()?)?;
            let dn = dn_of(rules.dn(), &mra.match_value);
            if target == MEMBER_OF {
                if unsearchable {
                    return None;
                }
                Some(dn.map_or(Ask::Undefined, Ask::Chain))
            } else if MEMBER_TYPES.contains(&target) {
                Some(dn.map_or(Ask::Undefined, Ask::Containers))
            } else {
                None
            }
        }
        _ => None,
    }
}

fn mentions_member_of(rules: &ferrodir_shard::RuleTable, leaf: &Filter) -> bool {
    ferrodir_shard::filter_mentions(leaf, &|desc, _| {
        std::str::from_utf8(desc).ok().and_then(|d| rules.get(d)).is_some_and(|r| r.canonical == MEMBER_OF)
    })
}

/// The DN a value names (a uniqueMember value may end in `#'0101'B`, RFC 4517 §3.3.21),
/// as given.
fn dn_of(rules: &DnNormalizer, value: &[u8]) -> Option<String> {
    let text = dn_text(value)?;
    rules.parse(text).is_ok().then(|| text.to_string())
}

/// The DN a member value names, parsed and normalised (once: it is resolved from this).
fn parsed_dn_of(rules: &DnNormalizer, value: &[u8]) -> Option<NormDn> {
    rules.parse(dn_text(value)?).ok()
}

/// A value's DN part: RFC 4517 §3.3.21, a trailing `#'bits'B` is the UID, as slapd reads it.
fn dn_text(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?;
    Some(match text.rsplit_once("#'") {
        Some((dn, uid))
            if uid.strip_suffix("'B").is_some_and(|bits| bits.bytes().all(|b| matches!(b, b'0' | b'1'))) =>
        {
            dn
        }
        _ => text,
    })
}

/// The ids an assertion stands for; None when it is Undefined.
async fn answer(
    ctx: &OpContext,
    groups: &Groups,
    access: &GroupAccess,
    skeleton: &Skeleton,
    ask: &Ask,
) -> LdapResultOf<Option<BTreeSet<EntryId>>> {
    let options = groups.options;
    Ok(Some(match ask {
        Ask::Undefined => return Ok(None),
        Ask::Members(group) => {
            members_down(ctx, access, skeleton, group, options.transitive, &options).await?
        }
        Ask::Chain(group) => members_down(ctx, access, skeleton, group, true, &options).await?,
        Ask::Containers(member) => {
            let mut dns = |id: EntryId| -> ferrodir_shard::ShardResult<Option<Arc<str>>> {
                Ok(groups.visible_dn(skeleton, access, id)?.map(Arc::from))
            };
            groups.containing(member, true, &mut dns)?.into_iter().map(|(id, _)| id).collect()
        }
    }))
}

/// The entries `group` contains: its members, and with `nested` the members of the groups
/// among them, level by level. A group the requester may not read contributes nothing;
/// each entry is visited once (cycles end); a chain deeper than
/// `memberof_chain_depth_max` or larger than `memberof_chain_entries_max` is
/// adminLimitExceeded.
async fn members_down(
    ctx: &OpContext,
    access: &GroupAccess,
    skeleton: &Skeleton,
    group: &str,
    nested: bool,
    options: &ferrodir_shard::MemberOfOptions,
) -> LdapResultOf<BTreeSet<EntryId>> {
    let mut found = BTreeSet::new();
    // Read before any of the data: resolutions made from it are good while it holds.
    let token = resolution_token(ctx.worker.hub(), skeleton);
    let Ok(group) = ctx.config.dn_rules().parse(group) else { return Ok(found) };
    let Some(start) = resolve(ctx, &group).await? else { return Ok(found) };
    let mut visited = BTreeSet::from([start]);
    let mut frontier = vec![start];
    let mut depth = 0;
    while !frontier.is_empty() {
        depth += 1;
        let mut next = Vec::new();
        for id in frontier {
            let Some(record) = ctx.worker.fetch(id).await? else { continue };
            if !access.may_read(skeleton, id, &record) {
                continue;
            }
            let members = member_ids(ctx, token, id, &record).await?;
            if members.is_empty() {
                continue;
            }
            if depth > options.chain_depth_max {
                return Err(memberof_too_deep(options.chain_depth_max).into());
            }
            for &member_id in members.iter() {
                if found.insert(member_id) && found.len() > options.chain_entries_max {
                    return Err(memberof_too_many(options.chain_entries_max).into());
                }
                if nested && visited.insert(member_id) {
                    next.push(member_id);
                }
            }
        }
        frontier = next;
    }
    Ok(found)
}

/// What a group's resolved member ids are cached under (`crate::memberids`).
fn resolution_token(hub: &ferrodir_shard::Hub, skeleton: &Skeleton) -> Option<crate::memberids::Token> {
    Some(crate::memberids::Token { publications: hub.publications(), skeleton: skeleton.version })
}

/// The ids of the entries a group's member and uniqueMember values name (dangling ones
/// left out), from the worker's cache when nothing was written since it was filled.
async fn member_ids(
    ctx: &OpContext,
    token: Option<crate::memberids::Token>,
    group: EntryId,
    record: &EntryRecord,
) -> LdapResultOf<std::rc::Rc<[EntryId]>> {
    if let Some(token) = token {
        if let Some(ids) = ctx.worker.member_ids.borrow_mut().get(token, group) {
            return Ok(ids);
        }
    }
    let mut ids = Vec::new();
    for member in member_dns(ctx, record) {
        if let Some(id) = resolve(ctx, &member).await? {
            ids.push(id);
        }
    }
    let ids: std::rc::Rc<[EntryId]> = ids.into();
    if let Some(token) = token {
        ctx.worker.member_ids.borrow_mut().put(token, group, ids.clone());
    }
    Ok(ids)
}

/// The DNs a group's member and uniqueMember values name.
fn member_dns(ctx: &OpContext, record: &EntryRecord) -> Vec<NormDn> {
    let rules = &ctx.config.rules;
    record
        .entry
        .attrs
        .iter()
        .filter(|a| rules.get(&a.name).is_some_and(|r| MEMBER_TYPES.contains(&r.canonical.as_str())))
        .flat_map(|a| a.values.iter())
        .filter_map(|v| parsed_dn_of(rules.dn(), v))
        .collect()
}

/// The id of the entry `dn` names; None if there is none (a dangling member value).
async fn resolve(ctx: &OpContext, dn: &NormDn) -> LdapResultOf<Option<EntryId>> {
    match crate::resolve::locate(&ctx.worker, dn).await {
        Ok(found) => Ok(Some(found.id)),
        Err(e) if e.code == ferrodir_proto::ResultCode::NO_SUCH_OBJECT => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::filter::parse_filter;
    use ferrodir_proto::schema::Schema;
    use ferrodir_shard::RuleTable;

    fn asks(filter: &str) -> Vec<Option<Ask>> {
        let rules = RuleTable::from_schema(&Schema::standard());
        let mut out = Vec::new();
        walk(&parse_filter(filter).unwrap(), &mut |f| out.push(classify(&rules, f, false)));
        out
    }

    #[test]
    fn memberof_and_in_chain_assertions_are_recognised() {
        let g = "cn=g,dc=example,dc=com".to_string();
        assert_eq!(asks("(memberOf=cn=g,dc=example,dc=com)"), vec![Some(Ask::Members(g.clone()))]);
        assert_eq!(
            asks("(1.2.840.113556.1.2.102=cn=g,dc=example,dc=com)"),
            vec![Some(Ask::Members(g.clone()))]
        );
        assert_eq!(
            asks("(&(uid=x)(memberOf:1.2.840.113556.1.4.1941:=cn=g,dc=example,dc=com))"),
            vec![None, Some(Ask::Chain(g.clone()))]
        );
        assert_eq!(
            asks("(member:1.2.840.113556.1.4.1941:=cn=g,dc=example,dc=com)"),
            vec![Some(Ask::Containers(g.clone()))]
        );
        assert_eq!(asks("(memberOf=not a dn)"), vec![Some(Ask::Undefined)]);
        assert_eq!(asks("(memberOf=*)"), vec![None]);
        assert_eq!(asks("(memberOf;x-opt=cn=g,dc=example,dc=com)"), vec![None]);
        assert_eq!(asks("(cn:1.2.840.113556.1.4.1941:=cn=g,dc=example,dc=com)"), vec![None]);
    }

    #[test]
    fn a_clients_id_set_is_made_undefined() {
        let ids: BTreeSet<EntryId> = [EntryId::new(0, 1)].into_iter().collect();
        let mut filter = Filter::And(vec![id_set_filter(&ids)]);
        neutralise(&mut filter, &mut |_| None);
        let Filter::And(parts) = &filter else { panic!() };
        let Filter::ExtensibleMatch(mra) = &parts[0] else { panic!() };
        assert!(!is_id_set(mra));
    }

    #[test]
    fn unique_member_values_lose_their_uid() {
        let rules = DnNormalizer::plain();
        assert_eq!(dn_of(&rules, b"cn=a,dc=x").as_deref(), Some("cn=a,dc=x"));
        assert_eq!(dn_of(&rules, b"cn=a,dc=x#'0101'B").as_deref(), Some("cn=a,dc=x"));
        assert_eq!(dn_of(&rules, b"not a dn"), None);
        assert_eq!(parsed_dn_of(&rules, b"cn=a,dc=x#'0101'B"), rules.parse("cn=a,dc=x").ok());
        assert_eq!(parsed_dn_of(&rules, b"cn=a,dc=x#'01'B,dc=y").map(|d| d.len()), Some(3));
    }
}
