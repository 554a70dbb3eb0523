//! Search (RFC 4511 §4.5). The router resolves the base once, then starts the search on the
//! base's shard (base scope) or on every shard (one-level and subtree), and streams the
//! entries to the connection as the shards produce them. sizeLimit, timeLimit and Abandon
//! set the search's stop flag, which stops every shard's scan. (Abandon is the operation's
//! own cancel flag: it also silences the final response; a size or time limit doesn't.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrodir_proto::entry::Entry;
use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::{DerefAliases, LdapResult, ProtocolOp, SearchRequest, SearchScope};
use ferrodir_proto::ResultCode;
use ferrodir_shard::eval;
use ferrodir_shard::index::IndexKind;
use ferrodir_shard::keys;
use ferrodir_shard::rules::equality_key;
use ferrodir_shard::search::{base_entry, AttrSelection, Query, Scope, SearchChunk, SearchTask};
use tokio::sync::mpsc;

use crate::access::{hidden_attributes, Identity};
use crate::config::DirectoryConfig;
use crate::error::{LdapError, LdapResultOf};
use crate::op::{parse_dn, rootdse};
use crate::resolve::{locate, Located};
use crate::session::{OpContext, Outbound};

pub async fn search(ctx: &OpContext, request: SearchRequest) {
    let result = match run(ctx, request).await {
        Ok(result) => result,
        Err(e) => e.to_result(),
    };
    ctx.respond(ProtocolOp::SearchResultDone(result)).await;
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

async fn run(ctx: &OpContext, request: SearchRequest) -> LdapResultOf<LdapResult> {
    let config = &ctx.worker.config;
    let base = parse_dn(&request.base_object)?;
    let mut attrs =
        AttrSelection::from_request(&request.attributes, request.types_only, &config.rules, &config.schema);
    attrs.hidden = hidden_attributes(config, &ctx.identity);
    if base.is_root() || base.normalized() == "cn=subschema" {
        return serve_special(ctx, &request, &base, &attrs).await;
    }
    let mut target = locate(&ctx.worker, &base).await?;
    if matches!(request.deref_aliases, DerefAliases::DerefFindingBaseObj | DerefAliases::DerefAlways) {
        target = deref_base(ctx, target).await?;
    }
    let scope = match request.scope {
        SearchScope::BaseObject => Scope::Base(target.id),
        SearchScope::SingleLevel => Scope::OneLevel(target.id),
        SearchScope::WholeSubtree => Scope::Subtree(target.id),
        SearchScope::SubordinateSubtree => Scope::Children(target.id),
    };
    if let Scope::Base(id) = scope {
        if let Some(view) = ctx.worker.readable(id.shard())? {
            // The common lookup: the entry is readable on this thread (this worker's shard,
            // or any shard with remote_reads = "snapshot"). Answer inline.
            let tree = ctx.worker.tree();
            let query =
                Query { message_id: ctx.message_id, tree: &tree, filter: &request.filter, attrs: &attrs };
            if let Some(pdu) = base_entry(view, &query, id)? {
                if !ctx.cancelled() {
                    let _ = ctx.out.send(Outbound::Pdu(pdu)).await;
                }
            }
            return Ok(LdapResult::success());
        }
    }
    let shards: Vec<usize> = match scope {
        Scope::Base(id) => vec![id.shard()],
        _ => match equality_key_of(config, &request.filter) {
            // Only the shards whose filter may hold the value (and so the matches).
            Some(key) => {
                (0..ctx.worker.shard_count()).filter(|s| config.blooms[*s].may_contain(&key)).collect()
            }
            None => (0..ctx.worker.shard_count()).collect(),
        },
    };
    if shards.is_empty() {
        return Ok(LdapResult::success());
    }
    let size_limit = limit(request.size_limit, config.search_entries_max, &ctx.identity);
    let time_limit = limit(request.time_limit, config.search_time_max_s, &ctx.identity);
    let capacity = config.search_chunks_in_flight.max(1) * shards.len();
    let (sink, chunks) = mpsc::channel(capacity);
    let stop = Arc::new(AtomicBool::new(false));
    let tree = ctx.worker.tree();
    let filter = Arc::new(request.filter);
    let attrs = Arc::new(attrs);
    for &shard in &shards {
        let task = SearchTask {
            message_id: ctx.message_id,
            tree: tree.clone(),
            scope,
            filter: filter.clone(),
            attrs: attrs.clone(),
            sink: sink.clone(),
            cancel: stop.clone(),
        };
        ctx.worker.start_search(shard, task).await?;
    }
    drop(sink);
    let deadline = time_limit.map(|s| tokio::time::Instant::now() + Duration::from_secs(u64::from(s)));
    let outcome = collect(ctx, &stop, chunks, shards.len(), size_limit, deadline).await;
    // Whatever ended the collection, the shards have nothing more to do.
    stop.store(true, Ordering::Relaxed);
    outcome
}

/// Forwards entries until every shard is done, or a limit or Abandon stops the search.
async fn collect(
    ctx: &OpContext,
    stop: &AtomicBool,
    mut chunks: mpsc::Receiver<SearchChunk>,
    shards: usize,
    size_limit: Option<u32>,
    deadline: Option<tokio::time::Instant>,
) -> LdapResultOf<LdapResult> {
    let mut done = 0;
    let mut sent: u64 = 0;
    let mut failure: Option<LdapError> = None;
    while done < shards {
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, chunks.recv()).await {
                Ok(chunk) => chunk,
                Err(_) => {
                    stop.store(true, Ordering::Relaxed);
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
            SearchChunk::Entries(mut pdus) => {
                if ctx.cancelled() {
                    // Abandoned: stop the shards and send nothing more.
                    stop.store(true, Ordering::Relaxed);
                    return Ok(LdapResult::success());
                }
                let mut exceeded = false;
                if let Some(max) = size_limit {
                    let room = u64::from(max).saturating_sub(sent) as usize;
                    if pdus.len() > room {
                        pdus.truncate(room);
                        exceeded = true;
                    }
                }
                sent += pdus.len() as u64;
                if !pdus.is_empty() && ctx.out.send(Outbound::Pdus(pdus)).await.is_err() {
                    stop.store(true, Ordering::Relaxed);
                    return Ok(LdapResult::success());
                }
                if exceeded {
                    stop.store(true, Ordering::Relaxed);
                    return Ok(LdapResult::new(
                        ResultCode::SIZE_LIMIT_EXCEEDED,
                        String::new(),
                        String::new(),
                    ));
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
    match failure {
        Some(e) => Err(e),
        None => Ok(LdapResult::success()),
    }
}

/// The root DSE (base scope only) and cn=Subschema.
async fn serve_special(
    ctx: &OpContext,
    request: &SearchRequest,
    base: &ferrodir_proto::Dn,
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
    if eval::matches(&ctx.worker.config.rules, &request.filter, &visible, None) {
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
        let dn = ferrodir_proto::Dn::parse(aliased)
            .map_err(|_| LdapError::new(ResultCode::ALIAS_PROBLEM, "bad aliasedObjectName"))?;
        target = locate(&ctx.worker, &dn)
            .await
            .map_err(|_| LdapError::new(ResultCode::ALIAS_PROBLEM, "aliasedObjectName names no entry"))?;
    }
    Err(LdapError::new(ResultCode::ALIAS_DEREFERENCING_PROBLEM, "alias loop"))
}

/// The equality posting prefix a filter requires of every match: the filter itself, or one
/// part of an AND, being an equality on a type with a complete equality index. Shards
/// whose Bloom filter lacks it hold no match.
fn equality_key_of(config: &DirectoryConfig, filter: &Filter) -> Option<Vec<u8>> {
    match filter {
        Filter::EqualityMatch(ava) => {
            let rules = config.rules.get(std::str::from_utf8(&ava.attribute_desc).ok()?)?;
            if rules.subtypes.len() > 1 || !config.indexes.usable(&rules.canonical, IndexKind::Equality) {
                return None;
            }
            let value = if rules.canonical == "objectclass" {
                config.rules.class_lineage(&ava.assertion_value)?.first()?.as_bytes().to_vec()
            } else {
                equality_key(rules, &ava.assertion_value)?
            };
            Some(keys::eq_prefix(&rules.canonical, &value))
        }
        Filter::And(parts) => parts.iter().find_map(|part| equality_key_of(config, part)),
        _ => None,
    }
}
