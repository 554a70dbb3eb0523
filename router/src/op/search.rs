//! Search (RFC 4511 §4.5). The router resolves the base once and plans the filter once
//! (`shard::candidates`). A base lookup, and any shard's part that its indices narrow to a
//! handful of entries, is answered inline on this thread; every other shard's part runs on
//! the search pool (`shard::scan`) and streams back. sizeLimit and timeLimit raise the
//! search's stop signal, Abandon and a closing connection the operation's; every shard's
//! part checks both between entries. (Abandon also silences the final response; a size or
//! time limit doesn't.)

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use ferrodir_proto::entry::Entry;
use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::{DerefAliases, LdapResult, ProtocolOp, SearchRequest, SearchScope};
use ferrodir_proto::ResultCode;
use ferrodir_shard::{
    base_entry, base_record, inline_search_into, AttrSelection, InlinePrep, Plan, Planner, Query, Scope,
    SearchChunk, SearchTask, StopReason, StopSignal, CHUNK_ENTRIES_MAX,
};
use tokio::sync::mpsc;

use crate::access;
use crate::acl::view::{Region, RegionKind};
use crate::error::{LdapError, LdapResultOf};
use crate::limits::UnindexedPolicy;
use crate::located::Located;
use crate::op::context::{OpContext, Outbound};
use crate::op::paged::{self, PagedSearch, Paging};
use crate::op::{parse_dn, rootdse};
use crate::requester::Identity;
use crate::resolve::locate;

pub async fn search(ctx: &OpContext, request: SearchRequest) {
    if crate::op::syncrepl::requested(ctx).is_some() {
        // RFC 4533 content synchronisation (a consumer's refresh or persist).
        return crate::op::syncrepl::search(ctx, request).await;
    }
    // Server-side sort and VLV (op::sort) own the paged-results control when the sort
    // control is there, as slapd's sssvlv does.
    let sorting = match crate::op::sort::Sorting::from_request(ctx) {
        Ok(sorting) => sorting,
        Err(refusal) => {
            return ctx.respond_with(ProtocolOp::SearchResultDone(refusal.result), refusal.controls).await;
        }
    };
    let mut paging = match sorting {
        Some(_) => None,
        None => match Paging::from_request(ctx, &request) {
            Ok(paging) => paging,
            Err(e) => return ctx.respond(ProtocolOp::SearchResultDone(e.to_result())).await,
        },
    };
    let result = match run(ctx, request, paging.as_mut(), sorting.as_ref()).await {
        Ok(result) => result,
        Err(e) => e.to_result(),
    };
    // RFC 2696 §3: the response control on every SearchResultDone of a paged search.
    let controls = match &sorting {
        Some(sorting) => sorting.response_controls(&result),
        None => paging.as_ref().and_then(Paging::response_control).map(|control| vec![control]),
    };
    if paging.is_some() {
        // 389-ds's access-log note for a paged search, after any index note.
        ctx.note(match ctx.notes.get() {
            Some("A") => "A,P",
            Some("U") => "U,P",
            _ => "P",
        });
    }
    ctx.respond_with(ProtocolOp::SearchResultDone(result), controls).await;
}

/// The effective limit: the client's, capped by the server's for everyone but the rootDN.
fn limit(client: u32, server: u32, identity: &Identity) -> Option<u32> {
    let server = if matches!(identity, Identity::Root(_)) || server == 0 { None } else { Some(server) };
    match (client, server) {
        (0, s) => s,
        (c, Some(s)) => Some(c.min(s)),
        (c, None) => Some(c),
    }
}

async fn run(
    ctx: &OpContext,
    mut request: SearchRequest,
    mut paging: Option<&mut Paging>,
    sorting: Option<&crate::op::sort::Sorting>,
) -> LdapResultOf<LdapResult> {
    let config = &ctx.worker.config;
    // Normalised once: the special bases, the suffix, the resolution and the access rules
    // all read this.
    let base = parse_dn(config, &request.base_object)?;
    let mut attrs =
        AttrSelection::from_request(&request.attributes, request.types_only, &config.rules, &config.schema);
    if base.is_root() || base.is("cn=subschema") {
        // Readable by everyone: the rules are for the naming contexts.
        return serve_special(ctx, &request, &base, &attrs).await;
    }
    if crate::monitor::is_monitor_dn(&base) {
        // Served from the counters, to the rootDN and `monitor_readers` only.
        return crate::monitor::search::search(ctx, &request, &base, &attrs).await;
    }
    let position = match paging.as_deref() {
        Some(paging) => Some(paging.position(ctx)?),
        None => None,
    };
    if paging.as_deref().is_some_and(|paging| paging.size == 0) {
        // RFC 2696 §3: a page size of 0 ends the paged search; nothing is held to free.
        return Ok(LdapResult::success());
    }
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
    let kind = match request.scope {
        SearchScope::BaseObject => RegionKind::Base,
        SearchScope::SingleLevel => RegionKind::One,
        SearchScope::WholeSubtree => RegionKind::Subtree,
        SearchScope::SubordinateSubtree => RegionKind::Children,
    };
    // Without DN scopes or `self` in the rules, the region can't matter. The base's last
    // use: it moves into the region rather than being copied (a DN is an allocation per
    // RDN, per AVA and per value).
    let region = (region_known && config.access_rules.uses_dns()).then_some(Region { base, kind });
    if !access::restrict_search(ctx, &subject, region.as_ref(), target.id, &mut attrs).await {
        // No entry may be read: the search finds nothing (the base was searchable).
        return Ok(LdapResult::success());
    }
    crate::op::memberof::prepare(ctx, &subject, &mut request.filter, &mut attrs).await?;
    let scope = match request.scope {
        SearchScope::BaseObject => Scope::Base(target.id),
        SearchScope::SingleLevel => Scope::OneLevel(target.id),
        SearchScope::WholeSubtree => Scope::Subtree(target.id),
        SearchScope::SubordinateSubtree => Scope::Children(target.id),
    };
    let class = config.limits_for(&ctx.identity);
    let size_limit = match paging.as_deref_mut() {
        // slapd's size.pr and size.prtotal: the page is cut, the whole search is counted.
        Some(paging) => {
            if class.paged_page_entries_max != 0 {
                paging.size = paging.size.min(class.paged_page_entries_max);
            }
            limit(request.size_limit, class.paged_total_entries_max, &ctx.identity)
        }
        None => limit(request.size_limit, class.search_entries_max, &ctx.identity),
    };
    let time_limit = limit(request.time_limit, class.search_time_max_s, &ctx.identity);
    let tree = ctx.worker.tree();
    if let Some(sorting) = sorting {
        let input = crate::op::sort::Input {
            tree,
            scope,
            filter: request.filter,
            attrs,
            class,
            size_limit,
            time_limit,
        };
        return crate::op::sort::run(ctx, sorting, input).await;
    }
    if let Scope::Base(id) = scope {
        if position.is_some_and(|p| p.after.is_some()) {
            // The one entry went out with the first page.
            return Ok(LdapResult::success());
        }
        let query =
            Query { message_id: ctx.message_id, skeleton: &tree, filter: &request.filter, attrs: &attrs };
        if let Some(pdu) = lookup(ctx, &query, id).await? {
            if !ctx.cancelled() && size_limit != Some(0) {
                ctx.count_entries(1);
                let _ = ctx.out.send(Outbound::Pdu(pdu)).await;
            }
        }
        return Ok(LdapResult::success());
    }
    let (plan, shards) = plan_shards(ctx, class, &request.filter, &attrs)?;
    if let (Some(paging), Some(position)) = (paging, position) {
        let search = PagedSearch {
            tree,
            scope,
            plan: Arc::new(plan),
            filter: Arc::new(request.filter),
            attrs: Arc::new(attrs),
            shards,
            size_limit,
            deadline: time_limit.map(|s| tokio::time::Instant::now() + Duration::from_secs(u64::from(s))),
        };
        return paged::page(ctx, &search, position, paging).await;
    }
    // Shards whose part is small enough are answered right here; the rest go to the pool.
    // Their matches go out together, a chunk at a time, not one send per shard.
    let mut sent: u64 = 0;
    let mut pooled = Vec::with_capacity(shards.len());
    let query = Query { message_id: ctx.message_id, skeleton: &tree, filter: &request.filter, attrs: &attrs };
    let prep = InlinePrep::default();
    let mut matched = Vec::new();
    for shard in shards {
        let inline = match ctx.worker.readable(shard)? {
            Some(view) => inline_search_into(view, &query, scope, plan.as_ref(), &prep, &mut matched)?,
            None => false,
        };
        if !inline {
            pooled.push(shard);
        }
        let over_limit = size_limit.is_some_and(|max| sent + matched.len() as u64 > u64::from(max));
        if matched.len() >= CHUNK_ENTRIES_MAX || over_limit {
            if let Some(done) = forward(ctx, std::mem::take(&mut matched), &mut sent, size_limit).await {
                return Ok(done);
            }
        }
    }
    if let Some(done) = forward(ctx, matched, &mut sent, size_limit).await {
        return Ok(done);
    }
    if pooled.is_empty() {
        return Ok(LdapResult::success());
    }
    let deadline = time_limit.map(|s| tokio::time::Instant::now() + Duration::from_secs(u64::from(s)));
    let stop = Arc::new(StopSignal::new());
    let spread = Spread {
        tree,
        scope,
        plan: Arc::new(plan),
        filter: Arc::new(request.filter),
        attrs: Arc::new(attrs),
    };
    let outcome = scatter(ctx, &spread, &pooled, &stop, sent, size_limit, deadline).await;
    // Whatever ended the collection, the shards have nothing more to do.
    stop.raise(StopReason::Finished);
    outcome
}

/// The search's plan (None: unindexed, which the class may refuse) and the shards that may
/// hold matches (a required equality value prunes by the shards' Bloom filters).
pub(crate) fn plan_shards(
    ctx: &OpContext,
    class: &crate::limits::ClassLimits,
    filter: &Filter,
    attrs: &AttrSelection,
) -> LdapResultOf<(Option<Plan>, Vec<usize>)> {
    let config = &ctx.worker.config;
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

/// A base-scope search: the entry read on this thread when its shard is readable here,
/// else fetched from its shard's actor.
pub(crate) async fn lookup(
    ctx: &OpContext,
    query: &Query<'_>,
    id: ferrodir_shard::EntryId,
) -> LdapResultOf<Option<Bytes>> {
    if let Some(view) = ctx.worker.readable(id.shard())? {
        return Ok(base_entry(view, query, id)?);
    }
    let Some(record) = ctx.worker.fetch(id).await? else { return Ok(None) };
    let pdu = base_record(&ctx.worker.config.rules, query, id, record);
    ferrodir_shard::check_memberof_query(query.attrs.memberof.as_ref())?;
    Ok(pdu)
}

/// Sends entries within the size limit; Some(result) when the search is over.
async fn forward(
    ctx: &OpContext,
    mut pdus: Vec<Bytes>,
    sent: &mut u64,
    size_limit: Option<u32>,
) -> Option<LdapResult> {
    if ctx.cancelled() {
        // Abandoned: send nothing more.
        return Some(LdapResult::success());
    }
    let mut exceeded = false;
    if let Some(max) = size_limit {
        let room = usize::try_from(u64::from(max).saturating_sub(*sent)).unwrap_or(usize::MAX);
        if pdus.len() > room {
            pdus.truncate(room);
            exceeded = true;
        }
    }
    *sent += pdus.len() as u64;
    ctx.count_entries(pdus.len());
    if !pdus.is_empty() && ctx.out.send(Outbound::Pdus(pdus)).await.is_err() {
        return Some(LdapResult::success());
    }
    exceeded.then(|| LdapResult::new(ResultCode::SIZE_LIMIT_EXCEEDED, String::new(), String::new()))
}

/// What every shard's part of one search shares.
struct Spread {
    tree: Arc<ferrodir_shard::Skeleton>,
    scope: Scope,
    plan: Arc<Option<Plan>>,
    filter: Arc<Filter>,
    attrs: Arc<AttrSelection>,
}

/// Starts the search on each of `shards` in the pool and forwards their entries until every
/// one is done, or a limit or Abandon stops the search.
async fn scatter(
    ctx: &OpContext,
    spread: &Spread,
    shards: &[usize],
    stop: &Arc<StopSignal>,
    mut sent: u64,
    size_limit: Option<u32>,
    deadline: Option<tokio::time::Instant>,
) -> LdapResultOf<LdapResult> {
    let capacity = ctx.worker.config.search_chunks_in_flight.max(1) * shards.len();
    let (sink, mut chunks) = mpsc::channel(capacity);
    for &shard in shards {
        let task = SearchTask {
            message_id: ctx.message_id,
            skeleton: spread.tree.clone(),
            scope: spread.scope,
            filter: spread.filter.clone(),
            attrs: spread.attrs.clone(),
            plan: spread.plan.clone(),
            sink: sink.clone(),
            stop: stop.clone(),
            op_stop: ctx.cancel.clone(),
            window: None,
        };
        ctx.worker.start_scan(shard, task)?;
    }
    drop(sink);
    let mut done = 0;
    let mut failure: Option<LdapError> = None;
    while done < shards.len() {
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, chunks.recv()).await {
                Ok(chunk) => chunk,
                Err(_) => {
                    stop.raise(StopReason::TimeLimit);
                    return Ok(LdapResult::new(
                        ResultCode::TIME_LIMIT_EXCEEDED,
                        String::new(),
                        String::new(),
                    ));
                }
            },
            None => chunks.recv().await,
        };
        let Some(chunk) = next else { break };
        match chunk {
            SearchChunk::Entries(pdus) => {
                if let Some(result) = forward(ctx, pdus, &mut sent, size_limit).await {
                    let reason = if result.result_code == ResultCode::SIZE_LIMIT_EXCEEDED {
                        StopReason::SizeLimit
                    } else {
                        StopReason::Finished
                    };
                    stop.raise(reason);
                    return Ok(result);
                }
            }
            SearchChunk::Done { result, .. } => {
                done += 1;
                if let Err(e) = result {
                    failure.get_or_insert(LdapError::from(e));
                }
            }
        }
    }
    if ctx.cancelled() {
        return Ok(LdapResult::success());
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(LdapResult::success()),
    }
}

/// The root DSE (base scope only) and cn=Subschema.
async fn serve_special(
    ctx: &OpContext,
    request: &SearchRequest,
    base: &ferrodir_proto::NormDn,
    attrs: &AttrSelection,
) -> LdapResultOf<LdapResult> {
    let (dn, (user, operational)) = if base.is_root() {
        ("", rootdse::root_dse(&ctx.worker.config))
    } else {
        (rootdse::SUBSCHEMA_DN, rootdse::subschema(&ctx.worker.config.schema))
    };
    if request.scope != SearchScope::BaseObject {
        // Neither has children a search can reach.
        return if base.is_root() { Err(LdapError::no_such_object("")) } else { Ok(LdapResult::success()) };
    }
    let mut visible = Entry::new(user.attrs.clone());
    visible.attrs.extend(operational.attrs.iter().cloned());
    if ferrodir_shard::filter_matches(&ctx.worker.config.rules, &request.filter, &visible, None) {
        let entry = rootdse::encode(dn, &user, &operational, attrs);
        ctx.respond(ProtocolOp::SearchResultEntry(entry)).await;
    }
    Ok(LdapResult::success())
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
            .worker
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
