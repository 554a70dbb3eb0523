//! Collecting a sorted search's matches: every shard's part (inline, or a scan on the search
//! pool, through op::read's one scatter/gather) sends one row per match, its id and sort
//! keys (`shard::sortkeys`), in place of the entry's PDU; this sink gathers them, at most
//! `sort_entries_max`, and sorts them with the shards' comparator.

use std::sync::Arc;

use bytes::Bytes;
use ferrodir_shard::{decode_sort_row, Scope, SortRow, SortSpec, StopReason};

use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::op::read::{self, Bounds, Flow, Gathered, Sink, Target};

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

/// The rows of every entry `target` matches in `scopes` (its own scope alone, or the
/// disjoint scopes of a search that follows aliases), sorted by `spec`.
pub(crate) async fn collect(
    ctx: &OpContext,
    target: &Target,
    scopes: &[Scope],
    bounds: &Bounds<'_>,
    spec: &Arc<SortSpec>,
) -> LdapResultOf<Collected> {
    let mut attrs = (*target.attrs).clone();
    attrs.sort = Some(spec.clone());
    let attrs = Arc::new(attrs);
    let mut sink = Rows { rows: Vec::new(), max: ctx.config.sort.entries_max };
    for &scope in scopes {
        let rows_of = Target {
            skeleton: target.skeleton.clone(),
            scope,
            filter: target.filter.clone(),
            attrs: attrs.clone(),
        };
        let gathered = match scope {
            // A followed alias's target in a one-level search: its row, read by id.
            Scope::Base(id) if scopes.len() > 1 => {
                let query = rows_of.query(ctx.message_id, ctx.worker.hub());
                let rows: Vec<Bytes> = read::lookup(ctx, &query, id).await?.into_iter().collect();
                match sink.take(ctx, rows).await? {
                    Flow::More => continue,
                    Flow::Stop(_) => Gathered::Stopped,
                }
            }
            _ => read::read(ctx, &rows_of, bounds.class, bounds.deadline, &mut sink).await?,
        };
        match gathered {
            Gathered::All { .. } => {}
            Gathered::Stopped => return Ok(Collected::TooMany),
            Gathered::TimeLimit => return Ok(Collected::TimeLimit),
            Gathered::Cancelled => return Ok(Collected::Cancelled),
        }
    }
    // The keys, then the id: one total order, the same on every page.
    sink.rows.sort_unstable_by(|a, b| spec.compare_rows(a, b));
    Ok(Collected::Rows(sink.rows))
}

/// The sink of a sorted search's rows, bounded by `sort_entries_max`.
struct Rows {
    rows: Vec<SortRow>,
    max: usize,
}

impl Sink for Rows {
    async fn take(&mut self, _ctx: &OpContext, pdus: Vec<Bytes>) -> LdapResultOf<Flow> {
        for pdu in pdus {
            let row = decode_sort_row(&pdu)
                .ok_or_else(|| LdapError::internal("a shard sent a malformed sort row"))?;
            self.rows.push(row);
        }
        Ok(if self.rows.len() > self.max { Flow::Stop(StopReason::Finished) } else { Flow::More })
    }

    fn room(&self) -> Option<usize> {
        Some(self.max.saturating_sub(self.rows.len()))
    }
}
