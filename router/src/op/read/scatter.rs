//! Scatter: each shard's part of a search, inline on this thread when its indices narrow
//! it to a handful of entries, else started on the search pool.

use std::sync::Arc;

use ferrodir_shard::{
    inline_page, inline_search_into, InlinePrep, Plan, SearchTask, StopReason, StopSignal, Window, WindowEnd,
    CHUNK_ENTRIES_MAX,
};
use tokio::sync::mpsc;

use super::gather::gather;
use super::{Flow, Gathered, Sink, Target};
use crate::error::LdapResultOf;
use crate::op::context::OpContext;

/// Runs `target` on every shard of `shards` and hands the matches to `sink`. The inline
/// shards' matches go on together, a chunk at a time, not a batch per shard; the pool's
/// arrive as their scans send them, until every part is done or the sink, the deadline
/// or Abandon ends the search.
pub(crate) async fn scatter<S: Sink>(
    ctx: &OpContext,
    target: &Target,
    plan: &Arc<Option<Plan>>,
    shards: &[usize],
    deadline: Option<tokio::time::Instant>,
    sink: &mut S,
) -> LdapResultOf<Gathered> {
    let (pooled, ended) = inline(ctx, target, plan.as_ref().as_ref(), shards, sink).await?;
    if let Some(ended) = ended {
        return Ok(ended);
    }
    if pooled.is_empty() {
        return Ok(Gathered::All { complete: true, end: WindowEnd::default() });
    }
    let stop = Arc::new(StopSignal::new());
    let capacity = ctx.config.search_chunks_in_flight.max(1) * pooled.len();
    let (chunk_sink, chunks) = mpsc::channel(capacity);
    for &shard in &pooled {
        ctx.worker.start_scan(shard, task(ctx, target, plan, &stop, chunk_sink.clone(), None))?;
    }
    drop(chunk_sink);
    let outcome = gather(ctx, chunks, pooled.len(), &stop, deadline, sink).await;
    // Whatever ended the gathering, the shards have nothing more to do.
    stop.raise(StopReason::Finished);
    outcome
}

/// The inline phase: answers every shard it can here and returns the others, with how the
/// search ended if the sink or Abandon ended it already.
async fn inline<S: Sink>(
    ctx: &OpContext,
    target: &Target,
    plan: Option<&Plan>,
    shards: &[usize],
    sink: &mut S,
) -> LdapResultOf<(Vec<usize>, Option<Gathered>)> {
    let query = target.query(ctx.message_id, ctx.worker.hub());
    let prep = InlinePrep::default();
    let mut pooled = Vec::with_capacity(shards.len());
    let mut matched = Vec::new();
    for &shard in shards {
        let answered = match ctx.worker.readable(shard)? {
            Some(view) => inline_search_into(view, &query, target.scope, plan, &prep, &mut matched)?,
            None => false,
        };
        if !answered {
            pooled.push(shard);
        }
        let over_room = sink.room().is_some_and(|room| matched.len() > room);
        if matched.len() >= CHUNK_ENTRIES_MAX || over_room {
            if let Flow::Stop(_) = sink.take(ctx, std::mem::take(&mut matched)).await? {
                return Ok((pooled, Some(Gathered::Stopped)));
            }
        }
    }
    if ctx.cancelled() {
        return Ok((pooled, Some(Gathered::Cancelled)));
    }
    if !matched.is_empty() {
        if let Flow::Stop(_) = sink.take(ctx, matched).await? {
            return Ok((pooled, Some(Gathered::Stopped)));
        }
    }
    Ok((pooled, None))
}

/// One shard's part of a page (a paged search): the matches after `window.after`, in id
/// order, at most `window.max` of them, inline if its plan names a handful of candidates,
/// else a scan on the search pool.
pub(crate) async fn window<S: Sink>(
    ctx: &OpContext,
    target: &Target,
    plan: &Arc<Option<Plan>>,
    shard: usize,
    window: Window,
    deadline: Option<tokio::time::Instant>,
    sink: &mut S,
) -> LdapResultOf<Gathered> {
    if let Some(view) = ctx.worker.readable(shard)? {
        let query = target.query(ctx.message_id, ctx.worker.hub());
        if let Some((pdus, end)) = inline_page(view, &query, target.scope, plan.as_ref().as_ref(), window)? {
            return Ok(match sink.take(ctx, pdus).await? {
                Flow::More => Gathered::All { complete: true, end },
                Flow::Stop(_) => Gathered::Stopped,
            });
        }
    }
    let stop = Arc::new(StopSignal::new());
    let (chunk_sink, chunks) = mpsc::channel(ctx.config.search_chunks_in_flight.max(1));
    ctx.worker.start_scan(shard, task(ctx, target, plan, &stop, chunk_sink, Some(window)))?;
    let outcome = gather(ctx, chunks, 1, &stop, deadline, sink).await;
    stop.raise(StopReason::Finished);
    outcome
}

/// One shard's part as a task for the search pool.
fn task(
    ctx: &OpContext,
    target: &Target,
    plan: &Arc<Option<Plan>>,
    stop: &Arc<StopSignal>,
    sink: mpsc::Sender<ferrodir_shard::SearchChunk>,
    window: Option<Window>,
) -> SearchTask {
    SearchTask {
        message_id: ctx.message_id,
        skeleton: target.skeleton.clone(),
        scope: target.scope,
        filter: target.filter.clone(),
        attrs: target.attrs.clone(),
        plan: plan.clone(),
        sink,
        stop: stop.clone(),
        op_stop: ctx.cancel.clone(),
        window,
    }
}
