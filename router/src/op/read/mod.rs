//! Reading the shards for one search: the base lookup, the plan, and the one scatter/gather
//! every kind of search shares (op/search, sorted, paged and syncrepl refresh searches).
//!
//! A search that op::search resolved and authorized is a [`Target`]. A base-scope search
//! reads its one entry ([`lookup`]); any other is planned once ([`plan_shards`]: the
//! filter's plan, and the shards that may hold matches), then scattered: a shard whose
//! indices narrow its part to a handful of entries is answered inline on this thread, every
//! other shard's part runs on the search pool (`shard::scan`) and streams back in chunks
//! ([`scatter`], or [`window`] for one shard's page of a paged search). What the shards
//! find goes to a [`Sink`]: the client's connection, a sorted search's rows, a page, a
//! syncrepl refresh's content. The sink says when it has had enough; the gather loop stops
//! the shards then, and when the timeLimit passes or the operation is abandoned.

mod gather;
mod lookup;
mod plan;
mod scatter;

use std::sync::Arc;

use bytes::Bytes;
use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::SearchScope;
use ferrodir_shard::{AttrSelection, Query, Scope, Skeleton, StopReason, WindowEnd};

use crate::error::LdapResultOf;
use crate::limits::ClassLimits;
use crate::op::context::OpContext;

pub(crate) use lookup::lookup;
pub(crate) use plan::plan_shards;
pub(crate) use scatter::{scatter, window};

/// A resolved search as the shards read it: where, what matches, what each entry shows.
pub(crate) struct Target {
    pub skeleton: Arc<Skeleton>,
    pub scope: Scope,
    pub filter: Arc<Filter>,
    pub attrs: Arc<AttrSelection>,
}

impl Target {
    /// The shards' view of this search, for one read on this thread.
    pub fn query<'a>(&'a self, message_id: u32, hub: &'a ferrodir_shard::Hub) -> Query<'a> {
        Query { message_id, skeleton: &self.skeleton, filter: &self.filter, attrs: &self.attrs, hub }
    }
}

/// The shards' scope of a search whose base resolved to `base`.
pub(crate) fn scope(kind: SearchScope, base: ferrodir_shard::EntryId) -> Scope {
    match kind {
        SearchScope::BaseObject => Scope::Base(base),
        SearchScope::SingleLevel => Scope::OneLevel(base),
        SearchScope::WholeSubtree => Scope::Subtree(base),
        SearchScope::SubordinateSubtree => Scope::Children(base),
    }
}

/// The bounds one search reads under: its identity class's, its effective sizeLimit (None:
/// unlimited) and when its timeLimit passes.
pub(crate) struct Bounds<'a> {
    pub class: &'a ClassLimits,
    pub size_limit: Option<u32>,
    pub deadline: Option<tokio::time::Instant>,
}

/// Whether the search goes on after a sink took a batch.
pub(crate) enum Flow {
    More,
    /// The sink has had enough: the shards still running stop, with this reason.
    Stop(StopReason),
}

/// Where a search's matches go. Each batch holds whole encoded SearchResultEntry PDUs (a
/// sorted search's shards send sort rows in their place), in the order the shards sent them.
pub(crate) trait Sink {
    /// Takes one batch of matches.
    async fn take(&mut self, ctx: &OpContext, pdus: Vec<Bytes>) -> LdapResultOf<Flow>;

    /// Takes the one entry of a base-scope search.
    async fn take_base(&mut self, ctx: &OpContext, pdu: Bytes) -> LdapResultOf<()> {
        self.take(ctx, vec![pdu]).await.map(|_| ())
    }

    /// How many more matches the sink takes before it ends the search (None: no bound).
    /// The inline shards' matches are handed on early when they pass it.
    fn room(&self) -> Option<usize> {
        None
    }
}

/// How the gathering of a search's matches ended.
#[derive(Debug)]
pub(crate) enum Gathered {
    /// Every shard's part ended. `complete`: each sent its end marker; `end`: where the
    /// last windowed part stopped.
    All { complete: bool, end: WindowEnd },
    /// The sink ended the search.
    Stopped,
    /// The search's timeLimit passed.
    TimeLimit,
    /// Abandoned, or the connection closed.
    Cancelled,
}

/// Reads every match of `target` into `sink`: the base entry, or the shards' parts planned
/// under `class` and gathered until `deadline`.
pub(crate) async fn read<S: Sink>(
    ctx: &OpContext,
    target: &Target,
    class: &ClassLimits,
    deadline: Option<tokio::time::Instant>,
    sink: &mut S,
) -> LdapResultOf<Gathered> {
    if let Scope::Base(id) = target.scope {
        if let Some(pdu) = lookup(ctx, &target.query(ctx.message_id, ctx.worker.hub()), id).await? {
            sink.take_base(ctx, pdu).await?;
        }
        return Ok(Gathered::All { complete: true, end: WindowEnd::default() });
    }
    let (plan, shards) = plan_shards(ctx, class, &target.filter, &target.attrs)?;
    scatter(ctx, target, &Arc::new(plan), &shards, deadline, sink).await
}
