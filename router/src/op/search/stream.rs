//! The plain search's sink: matches go to the client as they arrive, within the sizeLimit.

use bytes::Bytes;
use ferrodir_proto::message::LdapResult;
use ferrodir_proto::ResultCode;
use ferrodir_shard::{Scope, StopReason};

use crate::error::LdapResultOf;
use crate::op::context::{OpContext, Outbound};
use crate::op::dynlist::{Expanding, Expansion};
use crate::op::read::{self, Bounds, Flow, Gathered, Sink, Target};

/// Sends every match of `target` within `bounds`; the result for the SearchResultDone.
/// `expansion`: the dynlist stage, in front of the sink.
pub(super) async fn send(
    ctx: &OpContext,
    target: &Target,
    bounds: &Bounds<'_>,
    expansion: Option<&Expansion>,
) -> LdapResultOf<LdapResult> {
    let mut stream = Stream { size_limit: bounds.size_limit, sent: 0, result: LdapResult::success() };
    let mut sink = Expanding { inner: &mut stream, expansion };
    let gathered = read::read(ctx, target, bounds.class, bounds.deadline, &mut sink).await?;
    let sink = stream;
    Ok(match gathered {
        Gathered::Stopped => sink.result,
        Gathered::TimeLimit => LdapResult::new(ResultCode::TIME_LIMIT_EXCEEDED, String::new(), String::new()),
        Gathered::All { .. } | Gathered::Cancelled => LdapResult::success(),
    })
}

/// Sends every match of each of `scopes` in turn, under the one sizeLimit and timeLimit:
/// a search that follows aliases (`super::aliases`), whose scopes are disjoint. A base
/// scope (a one-level search's alias target) counts against the sizeLimit as any match.
pub(super) async fn send_scopes(
    ctx: &OpContext,
    target: &Target,
    scopes: &[Scope],
    bounds: &Bounds<'_>,
    expansion: Option<&Expansion>,
) -> LdapResultOf<LdapResult> {
    let mut stream = Stream { size_limit: bounds.size_limit, sent: 0, result: LdapResult::success() };
    let mut sink = Expanding { inner: &mut stream, expansion };
    for &scope in scopes {
        let part = Target {
            skeleton: target.skeleton.clone(),
            scope,
            filter: target.filter.clone(),
            attrs: target.attrs.clone(),
        };
        let gathered = match scope {
            Scope::Base(id) => {
                let query = part.query(ctx.message_id, ctx.worker.hub());
                let pdus: Vec<Bytes> = read::lookup(ctx, &query, id).await?.into_iter().collect();
                match sink.take(ctx, pdus).await? {
                    Flow::More => Gathered::All { complete: true, end: Default::default() },
                    Flow::Stop(_) => Gathered::Stopped,
                }
            }
            _ => read::read(ctx, &part, bounds.class, bounds.deadline, &mut sink).await?,
        };
        match gathered {
            Gathered::All { .. } => {}
            Gathered::Stopped => return Ok(sink.inner.result.clone()),
            Gathered::TimeLimit => {
                return Ok(LdapResult::new(ResultCode::TIME_LIMIT_EXCEEDED, String::new(), String::new()))
            }
            Gathered::Cancelled => return Ok(LdapResult::success()),
        }
        if ctx.cancelled() {
            return Ok(LdapResult::success());
        }
    }
    Ok(LdapResult::success())
}

/// Entries to the connection, counted against the sizeLimit.
struct Stream {
    size_limit: Option<u32>,
    sent: u64,
    /// The result when the sink ended the search: sizeLimitExceeded, or success (Abandon,
    /// the connection gone).
    result: LdapResult,
}

impl Sink for Stream {
    async fn take(&mut self, ctx: &OpContext, mut pdus: Vec<Bytes>) -> LdapResultOf<Flow> {
        if ctx.cancelled() {
            // Abandoned: send nothing more.
            return Ok(Flow::Stop(StopReason::Finished));
        }
        let mut exceeded = false;
        if let Some(room) = self.room() {
            if pdus.len() > room {
                pdus.truncate(room);
                exceeded = true;
            }
        }
        self.sent += pdus.len() as u64;
        ctx.count_entries(pdus.len());
        if !pdus.is_empty() && ctx.out.send(Outbound::Pdus(pdus)).await.is_err() {
            return Ok(Flow::Stop(StopReason::Finished));
        }
        if exceeded {
            self.result = LdapResult::new(ResultCode::SIZE_LIMIT_EXCEEDED, String::new(), String::new());
            return Ok(Flow::Stop(StopReason::SizeLimit));
        }
        Ok(Flow::More)
    }

    async fn take_base(&mut self, ctx: &OpContext, pdu: Bytes) -> LdapResultOf<()> {
        // A base search's one entry: a sizeLimit of 0 sends nothing, and is no error.
        if !ctx.cancelled() && self.size_limit != Some(0) {
            ctx.count_entries(1);
            let _ = ctx.out.send(Outbound::Pdu(pdu)).await;
        }
        Ok(())
    }

    fn room(&self) -> Option<usize> {
        let max = self.size_limit?;
        Some(usize::try_from(u64::from(max).saturating_sub(self.sent)).unwrap_or(usize::MAX))
    }
}
