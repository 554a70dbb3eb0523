//! Gather: the chunks the search pool's scans send, handed to the sink as they arrive.

use std::sync::Arc;

use ferrodir_shard::{SearchChunk, StopReason, StopSignal, WindowEnd};
use tokio::sync::mpsc;

use super::{Flow, Gathered, Sink};
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;

/// Takes chunks from `parts` scans until each has sent its end, the sink has had enough,
/// the deadline passes or the operation is abandoned (raising `stop` for the shards with
/// the reason). A failed part fails the search once every part has ended.
pub(super) async fn gather<S: Sink>(
    ctx: &OpContext,
    mut chunks: mpsc::Receiver<SearchChunk>,
    parts: usize,
    stop: &Arc<StopSignal>,
    deadline: Option<tokio::time::Instant>,
    sink: &mut S,
) -> LdapResultOf<Gathered> {
    let (mut done, mut end) = (0, WindowEnd::default());
    let mut failure: Option<LdapError> = None;
    while done < parts {
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, chunks.recv()).await {
                Ok(chunk) => chunk,
                Err(_) => {
                    stop.raise(StopReason::TimeLimit);
                    return Ok(Gathered::TimeLimit);
                }
            },
            None => chunks.recv().await,
        };
        let Some(chunk) = next else { break };
        if ctx.cancelled() {
            return Ok(Gathered::Cancelled);
        }
        match chunk {
            SearchChunk::Entries(pdus) => match sink.take(ctx, pdus).await {
                Ok(Flow::More) => {}
                Ok(Flow::Stop(reason)) => {
                    stop.raise(reason);
                    return Ok(Gathered::Stopped);
                }
                Err(e) => {
                    stop.raise(StopReason::Finished);
                    return Err(e);
                }
            },
            SearchChunk::Done { result, end: part_end, .. } => {
                done += 1;
                end = part_end.unwrap_or_default();
                if let Err(e) = result {
                    failure.get_or_insert(LdapError::from(e));
                }
            }
        }
    }
    if ctx.cancelled() {
        return Ok(Gathered::Cancelled);
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(Gathered::All { complete: done == parts, end }),
    }
}
