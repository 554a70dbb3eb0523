//! Resolve and authorize: the base located (aliases dereferenced when asked), the
//! requester's access to it settled, and the search narrowed to what the rules let it read.

use ferrodir_proto::entry::Entry;
use ferrodir_proto::filter::{parse_filter, Filter};
use ferrodir_proto::message::{DerefAliases, SearchRequest, SearchScope};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::{AttrSelection, Plan, Planner, Probe, Scope, TypeSet};

use crate::access::{self, EntryAccess, Subject};
use crate::acl::rule::Attr;
use crate::acl::view::{Region, RegionKind};
use crate::error::{LdapError, LdapResultOf};
use crate::located::Located;
use crate::op::context::OpContext;
use crate::resolve::locate;

/// A search the requester may run: who asks, and where the shards look.
pub(super) struct Authorized {
    pub subject: Subject,
    pub scope: Scope,
    /// The base after any dereferencing when finding it: where aliases met while
    /// searching are looked for (`super::aliases`). None: no alias is followed while
    /// searching (neverDerefAliases or derefFindingBaseObj, a base-scope search, or a base
    /// that is itself an alias, which slapd returns as it is).
    pub searching_from: Option<NormDn>,
}

/// Locates the base and settles access. Err: the base is missing or not searchable; None:
/// the search may read no entry, so it finds nothing.
pub(super) async fn authorize(
    ctx: &OpContext,
    request: &SearchRequest,
    base: NormDn,
    attrs: &mut AttrSelection,
) -> LdapResultOf<Option<Authorized>> {
    let config = &ctx.config;
    let subject = access::subject(ctx).await;
    let finding =
        matches!(request.deref_aliases, DerefAliases::DerefFindingBaseObj | DerefAliases::DerefAlways);
    let (base, target) = if finding {
        deref_base(ctx, &subject, base).await?
    } else {
        let target = access::locate(ctx, &subject, &base).await?;
        (base, target)
    };
    // As slapd: the access checked is the dereferenced base's.
    let base_entry = access::entry_for_rules(ctx, &subject, target.id).await?;
    let base_access = access::entry_access(config, &subject, &base, base_entry.as_ref());
    if let Some(refusal) = access::base_refusal(base_access) {
        return Err(refusal);
    }
    let searching =
        matches!(request.deref_aliases, DerefAliases::DerefInSearching | DerefAliases::DerefAlways)
            && request.scope != SearchScope::BaseObject
            && aliases_may_exist(ctx)
            && !is_alias(ctx, &target).await?;
    let searching_from = searching.then(|| base.clone());
    // Without DN scopes or `self` in the rules, the region can't matter. Aliases followed
    // while searching take the search outside the base's region: then it is unknown and
    // every scoped rule stays scoped. The base's last use: it moves into the region rather
    // than being copied (a DN is an allocation per RDN, per AVA and per value).
    let region = (!searching && config.access_rules.uses_dns())
        .then_some(Region { base, kind: region_kind(request.scope) });
    if !access::restrict_search(ctx, &subject, region.as_ref(), target.id, attrs).await {
        return Ok(None);
    }
    Ok(Some(Authorized { subject, scope: crate::op::read::scope(request.scope, target.id), searching_from }))
}

fn region_kind(scope: SearchScope) -> RegionKind {
    match scope {
        SearchScope::BaseObject => RegionKind::Base,
        SearchScope::SingleLevel => RegionKind::One,
        SearchScope::WholeSubtree => RegionKind::Subtree,
        SearchScope::SubordinateSubtree => RegionKind::Children,
    }
}

/// `(objectClass=alias)`: what the aliases stage looks for, and leaves out.
pub(super) fn alias_filter() -> LdapResultOf<Filter> {
    parse_filter("(objectClass=alias)").map_err(|_| LdapError::internal("the alias filter does not parse"))
}

/// Whether some shard may hold an alias entry. False when every shard's Bloom filter says
/// that none holds `objectClass: alias` (most directories have no alias): then a search
/// that asks to dereference while searching costs what a neverDerefAliases one does (no
/// probe, and the access rules specialised to the base's region). The filters are the
/// shards' own, current as of their last commit, as for any search they prune.
fn aliases_may_exist(ctx: &OpContext) -> bool {
    let config = &ctx.config;
    let Ok(filter) = alias_filter() else { return true };
    let unsearchable = TypeSet::default();
    let planner = Planner { indexes: &config.indexes, rules: &config.rules, unsearchable: &unsearchable };
    let plan = planner.plan(&filter);
    let Some(key) = plan.as_ref().and_then(Plan::required_equality) else { return true };
    let probe = Probe::new(key);
    (0..ctx.worker.shard_count())
        .any(|s| config.blooms.get(s).is_none_or(|bloom| bloom.may_contain_probe(&probe)))
}

/// Whether the located entry is an alias entry.
async fn is_alias(ctx: &OpContext, located: &Located) -> LdapResultOf<bool> {
    Ok(ctx.worker.fetch(located.id).await?.is_some_and(|record| record.entry.has_object_class("alias")))
}

/// How many alias entries one dereferencing may go through, as slapd's default
/// `max_deref_depth` (15): one more is aliasDereferencingProblem.
pub(super) const ALIAS_CHAIN_MAX: usize = 15;

/// RFC 4511 §4.5.1.3: when finding the base, an alias entry stands for the entry its
/// aliasedObjectName names, through a chain of aliases. As slapd's back-mdb, an alias on
/// the way (the deepest existing entry of a base that does not exist) stands for its
/// target too: the rest of the base is looked for below it. A missing target or a loop is
/// aliasProblem (slapd's "aliasedObject not found", "circular alias"), a chain longer than
/// [`ALIAS_CHAIN_MAX`] aliasDereferencingProblem, each with the alias as matchedDN when
/// the requester may disclose it. The requester must be able to read each alias's
/// aliasedObjectName (slapd does not ask: docs/CONFORMANCE.md).
async fn deref_base(ctx: &OpContext, subject: &Subject, mut dn: NormDn) -> LdapResultOf<(NormDn, Located)> {
    let mut visited: Vec<Vec<String>> = Vec::new();
    loop {
        let (alias_dn, alias_id, stub) = match locate(&ctx.worker, &dn).await {
            Ok(located) => (dn.clone(), located, 0),
            Err(error) if error.code == ResultCode::NO_SUCH_OBJECT && !error.matched_dn.is_empty() => {
                let Ok(matched) = ctx.config.dn_rules().parse(&error.matched_dn) else {
                    return Err(access::undisclosed(ctx, subject, error).await);
                };
                let Ok(located) = locate(&ctx.worker, &matched).await else {
                    return Err(access::undisclosed(ctx, subject, error).await);
                };
                let stub = dn.len().saturating_sub(matched.len());
                (matched, located, stub)
            }
            Err(error) => return Err(access::undisclosed(ctx, subject, error).await),
        };
        let entry = ctx.worker.fetch(alias_id.id).await?.map(|record| record.entry.clone());
        let Some(entry) = entry.filter(|e| e.has_object_class("alias")) else {
            if stub == 0 {
                return Ok((dn, alias_id));
            }
            // The deepest existing entry is no alias: the base does not exist.
            return Err(
                access::undisclosed(ctx, subject, LdapError::no_such_object(alias_dn.to_string())).await
            );
        };
        // In slapd's order: the depth first, then the loop.
        if visited.len() >= ALIAS_CHAIN_MAX {
            let code = ResultCode::ALIAS_DEREFERENCING_PROBLEM;
            return Err(alias_error(ctx, subject, code, "maximum deref depth exceeded", &alias_dn, &entry));
        }
        if visited.contains(&alias_dn.rdns) {
            let code = ResultCode::ALIAS_PROBLEM;
            return Err(alias_error(ctx, subject, code, "circular alias", &alias_dn, &entry));
        }
        visited.push(alias_dn.rdns.clone());
        let level =
            access::level(&ctx.config, subject, &alias_dn, Some(&entry), Attr::Type("aliasedobjectname"));
        if level < crate::acl::rule::Level::Read {
            let error = match access::entry_access(&ctx.config, subject, &alias_dn, Some(&entry)) {
                EntryAccess::Nothing => LdapError::new(ResultCode::NO_SUCH_OBJECT, ""),
                _ => LdapError::new(
                    ResultCode::INSUFFICIENT_ACCESS_RIGHTS,
                    "no read access to aliasedObjectName",
                ),
            };
            return Err(error);
        }
        let target = entry
            .first_str("aliasedObjectName")
            .and_then(|aliased| ctx.config.dn_rules().parse(aliased).ok())
            .ok_or_else(|| {
                alias_error(
                    ctx,
                    subject,
                    ResultCode::ALIAS_PROBLEM,
                    "alias has no valid aliasedObjectName",
                    &alias_dn,
                    &entry,
                )
            })?;
        if locate(&ctx.worker, &target).await.is_err() {
            return Err(alias_error(
                ctx,
                subject,
                ResultCode::ALIAS_PROBLEM,
                "aliasedObject not found",
                &alias_dn,
                &entry,
            ));
        }
        dn = below(&dn, stub, target);
    }
}

/// The first `stub` RDNs of `dn` put below `target`.
fn below(dn: &NormDn, stub: usize, mut target: NormDn) -> NormDn {
    let stub = stub.min(dn.len());
    let (Some(rdns), Some(norms)) = (dn.dn.rdns.get(..stub), dn.rdns.get(..stub)) else { return target };
    target.dn.rdns.splice(0..0, rdns.iter().cloned());
    target.rdns.splice(0..0, norms.iter().cloned());
    target
}

/// An alias that can't be dereferenced, with the alias as matchedDN; noSuchObject without
/// it when the requester may not disclose the alias (slapd's back-mdb search).
fn alias_error(
    ctx: &OpContext,
    subject: &Subject,
    code: ResultCode,
    message: &str,
    alias: &NormDn,
    entry: &Entry,
) -> LdapError {
    match access::entry_access(&ctx.config, subject, alias, Some(entry)) {
        EntryAccess::Nothing => LdapError::new(ResultCode::NO_SUCH_OBJECT, ""),
        _ => {
            let mut error = LdapError::new(code, message);
            error.matched_dn = alias.to_string();
            error
        }
    }
}
