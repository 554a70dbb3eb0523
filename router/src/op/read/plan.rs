//! Planning a search once for every shard: the filter's plan and the shards worth asking.

use ferrodir_proto::filter::Filter;
use ferrodir_proto::ResultCode;
use ferrodir_shard::{AttrSelection, Plan, Planner};

use crate::error::{LdapError, LdapResultOf};
use crate::limits::{ClassLimits, UnindexedPolicy};
use crate::op::context::OpContext;

/// The search's plan (None: unindexed, which the class may refuse) and the shards that may
/// hold matches, in increasing order: a required equality value prunes by the shards' Bloom
/// filters, required grams by their gram summaries, a memberOf id set by the ids' shards.
pub(crate) fn plan_shards(
    ctx: &OpContext,
    class: &ClassLimits,
    filter: &Filter,
    attrs: &AttrSelection,
) -> LdapResultOf<(Option<Plan>, Vec<usize>)> {
    let config = &ctx.config;
    let planner =
        Planner { indexes: &config.indexes, rules: &config.rules, unsearchable: &attrs.unsearchable };
    let plan = planner.plan(filter);
    if plan.is_none() {
        crate::stats::bump(&ctx.worker.stats.unindexed_searches, 1);
        ctx.note("A");
    }
    if plan.is_none() && class.unindexed_search == UnindexedPolicy::Refuse {
        // 389-ds's require-index: refuse before any shard starts walking its scope.
        return Err(LdapError::new(ResultCode::UNWILLING_TO_PERFORM, "Search is not indexed"));
    }
    let mut shards: Vec<usize> = match plan.as_ref().and_then(Plan::required_equality) {
        // Only the shards whose filter may hold the value (and so the matches).
        Some(key) => {
            let probe = ferrodir_shard::Probe::new(key);
            (0..ctx.worker.shard_count())
                .filter(|s| config.blooms.get(*s).is_none_or(|bloom| bloom.may_contain_probe(&probe)))
                .collect()
        }
        None => (0..ctx.worker.shard_count()).collect(),
    };
    if let Some(mask) =
        plan.as_ref().and_then(|p| p.gram_shards(&ctx.worker.local.info.grams, ctx.worker.shard_count()))
    {
        // Only the shards that may hold every gram a match needs (`shard::gramsummary`).
        shards.retain(|s| mask.contains(*s));
    }
    crate::op::memberof::prune_shards(plan.as_ref(), &mut shards);
    Ok((plan, shards))
}
