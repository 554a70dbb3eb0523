//! Collecting a sorted search's matches: every shard's part (inline, or a scan on the search
//! pool) sends one row per match, its id and sort keys (`shard::sortkeys`), in place of the
//! entry's PDU, through the same bounded channel as a plain search; the router gathers
//! them, at most `sort_entries_max`, and sorts them with the shards' comparator.

use std::sync::Arc;

use ferrodir_shard::{
    decode_sort_row, inline_search, AttrSelection, Query, Scope, SearchChunk, SearchTask, SortRow, SortSpec,
    StopReason, StopSignal,
};
use tokio::sync::mpsc;

use super::Input;
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;

/// How a collection ended.
pub enum Collected {
    /// Every match, sorted.
    Rows(Vec<SortRow>),
    /// More than `sort_entries_max` matches.
    TooMany,
    /// The search's timeLimit passed.
    TimeLimit,
    /// Abandoned, or the connection closed.
    Cancelled,
}

fn push_rows(rows: &mut Vec<SortRow>, pdus: Vec<bytes::Bytes>) -> LdapResultOf<()> {
    for pdu in pdus {
        rows.push(
            decode_sort_row(&pdu).ok_or_else(|| LdapError::internal("a shard sent a malformed sort row"))?,
        );
    }
    Ok(())
}

/// The rows of every entry the search matches, sorted by `spec`.
pub async fn collect(
    ctx: &OpContext,
    input: &Input<'_>,
    spec: &Arc<SortSpec>,
    deadline: Option<tokio::time::Instant>,
) -> LdapResultOf<Collected> {
    let max = ctx.worker.config.sort.entries_max;
    let mut sort_attrs = input.attrs.clone();
    sort_attrs.sort = Some(spec.clone());
    let attrs = &sort_attrs;
    let mut rows = Vec::new();
    if let Scope::Base(id) = input.scope {
        let query = Query { message_id: ctx.message_id, skeleton: &input.tree, filter: &input.filter, attrs };
        if let Some(pdu) = crate::op::search::lookup(ctx, &query, id).await? {
            push_rows(&mut rows, vec![pdu])?;
        }
        return Ok(Collected::Rows(rows));
    }
    let (plan, shards) = crate::op::search::plan_shards(ctx, input.class, &input.filter, attrs)?;
    let mut pooled = Vec::with_capacity(shards.len());
    for shard in shards {
        let query = Query { message_id: ctx.message_id, skeleton: &input.tree, filter: &input.filter, attrs };
        let inline = match ctx.worker.readable(shard)? {
            Some(view) => inline_search(view, &query, input.scope, plan.as_ref())?,
            None => None,
        };
        match inline {
            Some(pdus) => push_rows(&mut rows, pdus)?,
            None => pooled.push(shard),
        }
        if rows.len() > max {
            return Ok(Collected::TooMany);
        }
    }
    if !pooled.is_empty() {
        let stop = Arc::new(StopSignal::new());
        let outcome = scatter(ctx, input, attrs, plan, &pooled, (&stop, deadline), &mut rows).await;
        // Whatever ended the collection, the shards have nothing more to do.
        stop.raise(StopReason::Finished);
        if let Some(ended) = outcome? {
            return Ok(ended);
        }
    }
    // The keys, then the id: one total order, the same on every page.
    rows.sort_unstable_by(|a, b| spec.compare_rows(a, b));
    Ok(Collected::Rows(rows))
}

/// Runs the search's part on each pooled shard and gathers their rows. Some(how) when the
/// collection ended early.
async fn scatter(
    ctx: &OpContext,
    input: &Input<'_>,
    attrs: &AttrSelection,
    plan: Option<ferrodir_shard::Plan>,
    shards: &[usize],
    (stop, deadline): (&Arc<StopSignal>, Option<tokio::time::Instant>),
    rows: &mut Vec<SortRow>,
) -> LdapResultOf<Option<Collected>> {
    let max = ctx.worker.config.sort.entries_max;
    let capacity = ctx.worker.config.search_chunks_in_flight.max(1) * shards.len();
    let (sink, mut chunks) = mpsc::channel(capacity);
    let (filter, attrs, plan) = (Arc::new(input.filter.clone()), Arc::new(attrs.clone()), Arc::new(plan));
    for &shard in shards {
        let task = SearchTask {
            message_id: ctx.message_id,
            skeleton: input.tree.clone(),
            scope: input.scope,
            filter: filter.clone(),
            attrs: attrs.clone(),
            plan: plan.clone(),
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
                    return Ok(Some(Collected::TimeLimit));
                }
            },
            None => chunks.recv().await,
        };
        let Some(chunk) = next else { break };
        if ctx.cancelled() {
            return Ok(Some(Collected::Cancelled));
        }
        match chunk {
            SearchChunk::Entries(pdus) => {
                push_rows(rows, pdus)?;
                if rows.len() > max {
                    return Ok(Some(Collected::TooMany));
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
        return Ok(Some(Collected::Cancelled));
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(None),
    }
}
