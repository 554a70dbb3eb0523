//! Resolve and authorize: the base located (aliases dereferenced when asked), the
//! requester's access to it settled, and the search narrowed to what the rules let it read.

use ferrodir_proto::message::{DerefAliases, SearchRequest, SearchScope};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::{AttrSelection, Scope};

use crate::access::{self, Subject};
use crate::acl::view::{Region, RegionKind};
use crate::error::{LdapError, LdapResultOf};
use crate::located::Located;
use crate::op::context::OpContext;
use crate::resolve::locate;

/// A search the requester may run: who asks, and where the shards look.
pub(super) struct Authorized {
    pub subject: Subject,
    pub scope: Scope,
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
    let mut target = access::locate(ctx, &subject, &base).await?;
    let base_entry = access::entry_for_rules(ctx, &subject, target.id).await?;
    let base_access = access::entry_access(config, &subject, &base, base_entry.as_ref());
    if let Some(refusal) = access::base_refusal(base_access) {
        return Err(refusal);
    }
    let mut region_known = true;
    if matches!(request.deref_aliases, DerefAliases::DerefFindingBaseObj | DerefAliases::DerefAlways) {
        let found = target.id;
        target = deref_base(ctx, target).await?;
        region_known = target.id == found;
    }
    // Without DN scopes or `self` in the rules, the region can't matter. The base's last
    // use: it moves into the region rather than being copied (a DN is an allocation per
    // RDN, per AVA and per value).
    let region = (region_known && config.access_rules.uses_dns())
        .then_some(Region { base, kind: region_kind(request.scope) });
    if !access::restrict_search(ctx, &subject, region.as_ref(), target.id, attrs).await {
        return Ok(None);
    }
    Ok(Some(Authorized { subject, scope: crate::op::read::scope(request.scope, target.id) }))
}

fn region_kind(scope: SearchScope) -> RegionKind {
    match scope {
        SearchScope::BaseObject => RegionKind::Base,
        SearchScope::SingleLevel => RegionKind::One,
        SearchScope::WholeSubtree => RegionKind::Subtree,
        SearchScope::SubordinateSubtree => RegionKind::Children,
    }
}

/// How many aliases in a row a base may go through before it counts as a loop.
const ALIAS_HOPS_MAX: usize = 16;

/// RFC 4511 §4.5.1.3: when finding the base, an alias entry stands for the entry its
/// aliasedObjectName names. A missing target is aliasProblem, a loop aliasDereferencingProblem.
async fn deref_base(ctx: &OpContext, mut target: Located) -> LdapResultOf<Located> {
    for _ in 0..ALIAS_HOPS_MAX {
        let Some(record) = ctx.worker.fetch(target.id).await? else { return Ok(target) };
        if !record.entry.has_object_class("alias") {
            return Ok(target);
        }
        let Some(aliased) = record.entry.first_str("aliasedObjectName") else {
            return Err(LdapError::new(ResultCode::ALIAS_PROBLEM, "alias without aliasedObjectName"));
        };
        let dn = ctx
            .config
            .dn_rules()
            .parse(aliased)
            .map_err(|_| LdapError::new(ResultCode::ALIAS_PROBLEM, "bad aliasedObjectName"))?;
        target = locate(&ctx.worker, &dn)
            .await
            .map_err(|_| LdapError::new(ResultCode::ALIAS_PROBLEM, "aliasedObjectName names no entry"))?;
    }
    Err(LdapError::new(ResultCode::ALIAS_DEREFERENCING_PROBLEM, "alias loop"))
}
