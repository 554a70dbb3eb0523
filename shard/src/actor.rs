//! The shard actor: the one writer of a shard, and the door other workers read it through.
//!
//! It runs on its worker's arbiter thread next to that worker's connections. Writes arrive as
//! [`Write`] messages and are grouped: while one batch is with the commit thread, the next
//! gathers. The commit thread runs the engine's commit (and its fsync) so the worker thread
//! keeps serving reads from the last committed snapshot meanwhile. After a commit returns,
//! the snapshot is refreshed, caches updated, and replies sent in batch order.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::batch::{Overlay, Stager, WriteOp, WriteOutcome};
use crate::commit::{spawn_committer, CommitJob, Committer};
use crate::core::ShardCore;
use crate::error::{ShardError, ShardResult};
use crate::id::EntryId;
use crate::record::EntryRecord;
use crate::search::{run_search, SearchTask};

/// Bounded mailbox: senders wait (`Addr::send`) when a shard is saturated.
pub const MAILBOX_CAPACITY: usize = 1024;

pub struct ShardActor {
    core: Rc<ShardCore>,
    stager: Stager,
    committer: Committer,
    /// Parents under which no child may be added right now (refcounted).
    closed: HashMap<EntryId, usize>,
    started_generation: u64,
    committed_generation: u64,
    drain_waiters: Vec<DrainWaiter>,
}

struct DrainWaiter {
    generation: u64,
    parent: EntryId,
    reply: oneshot::Sender<ShardResult<u64>>,
}

impl ShardActor {
    pub fn new(core: Rc<ShardCore>) -> ShardResult<Self> {
        let next_seq = core.stored_next_seq()?;
        let committer = spawn_committer(core.engine(), core.info.index)?;
        Ok(Self {
            core,
            stager: Stager {
                next_seq,
                ..Default::default()
            },
            committer,
            closed: HashMap::new(),
            started_generation: 0,
            committed_generation: 0,
            drain_waiters: Vec::new(),
        })
    }

    fn start_commit(&mut self, ctx: &mut Context<Self>) {
        if self.stager.committing.is_some() || self.stager.pending.is_empty() {
            return;
        }
        self.started_generation += 1;
        let mut batch = std::mem::take(&mut self.stager.pending);
        batch.generation = self.started_generation;
        let mutations = std::mem::take(&mut batch.mutations);
        self.stager.committing = Some(batch);
        let (done, result) = oneshot::channel();
        if self
            .committer
            .submit(CommitJob { mutations, done })
            .is_err()
        {
            self.finish_commit(
                Err(ShardError::Unavailable("commit thread stopped".into())),
                ctx,
            );
            return;
        }
        ctx.spawn(
            fut::wrap_future::<_, Self>(result).map(|outcome, act, ctx| {
                let outcome = match outcome {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(ShardError::Storage(e)),
                    Err(_) => Err(ShardError::Unavailable("commit thread stopped".into())),
                };
                act.finish_commit(outcome, ctx);
            }),
        );
    }

    fn finish_commit(&mut self, outcome: ShardResult<()>, ctx: &mut Context<Self>) {
        let Some(batch) = self.stager.committing.take() else {
            return;
        };
        self.committed_generation = batch.generation;
        match outcome.and_then(|()| self.core.refresh_snapshot()) {
            Ok(()) => self.publish(batch),
            Err(e) => {
                tracing::error!(shard = self.core.info.index, error = %e, "commit failed");
                fail_all(batch, &e);
                // The pending batch was checked against state that never landed.
                fail_all(std::mem::take(&mut self.stager.pending), &e);
            }
        }
        self.wake_drain_waiters();
        self.start_commit(ctx);
    }

    fn publish(&mut self, batch: Overlay) {
        for (id, record) in batch.touched {
            match record {
                Some(r) => self.core.cache_put(id, r),
                None => self.core.cache_forget(id),
            }
        }
        for (reply, result) in batch.replies {
            let _ = reply.send(result);
        }
    }

    fn wake_drain_waiters(&mut self) {
        let committed = self.committed_generation;
        let waiters = std::mem::take(&mut self.drain_waiters);
        for waiter in waiters {
            if waiter.generation <= committed {
                let _ = waiter.reply.send(self.count_children(waiter.parent));
            } else {
                self.drain_waiters.push(waiter);
            }
        }
    }

    /// 1 if `parent` has a child on this shard, else 0: the scan stops at the first one.
    fn count_children(&self, parent: EntryId) -> ShardResult<u64> {
        let snapshot = self.core.snapshot();
        Ok(u64::from(
            self.core.has_children(snapshot.as_ref(), parent)?,
        ))
    }
}

fn fail_all(batch: Overlay, error: &ShardError) {
    for (reply, _) in batch.replies {
        let _ = reply.send(Err(ShardError::Unavailable(error.to_string())));
    }
}

impl Actor for ShardActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
    }
}

/// Apply one write; answered after the batch holding it is durable.
#[derive(Message)]
#[rtype(result = "ShardResult<WriteOutcome>")]
pub struct Write(pub WriteOp);

impl Handler<Write> for ShardActor {
    type Result = ResponseFuture<ShardResult<WriteOutcome>>;

    fn handle(&mut self, msg: Write, ctx: &mut Context<Self>) -> Self::Result {
        let (reply, answer) = oneshot::channel();
        let closed = &self.closed;
        self.stager
            .stage(&self.core, msg.0, &|p| closed.contains_key(&p), reply);
        self.start_commit(ctx);
        Box::pin(async move {
            answer
                .await
                .unwrap_or_else(|_| Err(ShardError::Unavailable("shard stopped".into())))
        })
    }
}

/// Look up a DN→ID record held by this shard.
#[derive(Message)]
#[rtype(result = "ShardResult<Option<EntryId>>")]
pub struct Lookup {
    pub parent: EntryId,
    pub rdn_norm: String,
}

impl Handler<Lookup> for ShardActor {
    type Result = ShardResult<Option<EntryId>>;

    fn handle(&mut self, msg: Lookup, _: &mut Context<Self>) -> Self::Result {
        self.core.lookup_dn(msg.parent, &msg.rdn_norm)
    }
}

/// Read one entry by id.
#[derive(Message)]
#[rtype(result = "ShardResult<Option<Arc<EntryRecord>>>")]
pub struct Fetch(pub EntryId);

impl Handler<Fetch> for ShardActor {
    type Result = ShardResult<Option<Arc<EntryRecord>>>;

    fn handle(&mut self, msg: Fetch, _: &mut Context<Self>) -> Self::Result {
        self.core.record(msg.0)
    }
}

/// Start streaming a search's matches from this shard into the task's sink.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Search(pub SearchTask);

impl Handler<Search> for ShardActor {
    type Result = ();

    fn handle(&mut self, msg: Search, _: &mut Context<Self>) {
        actix::spawn(run_search(self.core.clone(), msg.0));
    }
}

/// Close `parent` to new children, wait until every write staged before now is durable, and
/// say whether it has children on this shard (1) or not (0). Part of the coordinator's delete/demote protocol.
#[derive(Message)]
#[rtype(result = "ShardResult<u64>")]
pub struct CloseAndCount(pub EntryId);

impl Handler<CloseAndCount> for ShardActor {
    type Result = ResponseFuture<ShardResult<u64>>;

    fn handle(&mut self, msg: CloseAndCount, _: &mut Context<Self>) -> Self::Result {
        *self.closed.entry(msg.0).or_insert(0) += 1;
        let generation = if !self.stager.pending.is_empty() {
            self.started_generation + 1
        } else if self.stager.committing.is_some() {
            self.started_generation
        } else {
            let count = self.count_children(msg.0);
            return Box::pin(async move { count });
        };
        let (reply, answer) = oneshot::channel();
        self.drain_waiters.push(DrainWaiter {
            generation,
            parent: msg.0,
            reply,
        });
        Box::pin(async move {
            answer
                .await
                .unwrap_or_else(|_| Err(ShardError::Unavailable("shard stopped".into())))
        })
    }
}

/// Undo one [`CloseAndCount`].
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reopen(pub EntryId);

impl Handler<Reopen> for ShardActor {
    type Result = ();

    fn handle(&mut self, msg: Reopen, _: &mut Context<Self>) {
        if let Some(count) = self.closed.get_mut(&msg.0) {
            *count -= 1;
            if *count == 0 {
                self.closed.remove(&msg.0);
            }
        }
    }
}
