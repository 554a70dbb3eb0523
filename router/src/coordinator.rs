//! The coordinator: the one actor that changes the tree's shape. It runs on its own thread,
//! off the read path, and handles one structural change at a time (`AtomicResponse`):
//!
//! - promoting a leaf to a container when its first child arrives, and demoting a container
//!   whose last child left;
//! - deleting a container (which must have no children on any shard);
//! - Modify DN of a leaf or a whole subtree (the name may move between shards).
//!
//! Each change follows one order: write a durable intent when more than one shard's data
//! changes, apply each shard's step (each step is a normal group-committed write), publish
//! the new skeleton version, clear the intent. Searches pin one skeleton version, so they
//! see a change entirely or not at all. At start, [`Coordinator::recover`] finishes or rolls
//! back every intent left behind by a crash.
//!
//! Closing a parent: to decide "no children" without racing concurrent adds, the
//! coordinator asks every shard to close the parent to new children and count, after
//! everything already staged is durable. Adds that meet a closed parent fail with
//! `ParentClosed` and are retried by the router. A parent found childless stays closed
//! (it is demoted or deleted), so an add routed with an older skeleton can't slip under a
//! leaf; promotion reopens it.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use actix::prelude::*;
use ferrodir_proto::ResultCode;
use ferrodir_shard::actor::{CloseAndCount, Fetch, Reopen, ShardActor, Write};
use ferrodir_shard::batch::{WriteOp, WriteOutcome};
use ferrodir_shard::id::shard_for_child;
use ferrodir_shard::skeleton::{Skeleton, SkeletonCell};
use ferrodir_shard::{EntryId, ShardError};

use crate::error::{LdapError, LdapResultOf};
use crate::intent::{Intent, IntentLog};
use crate::resolve::Located;

pub struct Coordinator {
    inner: Rc<Inner>,
}

struct Inner {
    shards: Vec<Addr<ShardActor>>,
    cell: Arc<SkeletonCell>,
    tree: RefCell<Skeleton>,
    log: IntentLog,
}

impl Coordinator {
    pub fn new(shards: Vec<Addr<ShardActor>>, cell: Arc<SkeletonCell>, log: IntentLog) -> Self {
        let tree = (*cell.load()).clone();
        Self { inner: Rc::new(Inner { shards, cell, tree: RefCell::new(tree), log }) }
    }
}

impl Actor for Coordinator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(256);
    }
}

impl Inner {
    async fn write(&self, shard: usize, op: WriteOp) -> LdapResultOf<WriteOutcome> {
        let addr = self.shards.get(shard).ok_or_else(|| LdapError::new(ResultCode::OTHER, "bad shard"))?;
        Ok(addr.send(Write(op)).await??)
    }

    fn publish(&self, next: Skeleton) {
        *self.tree.borrow_mut() = next.clone();
        self.cell.publish(next);
    }

    async fn promote(&self, id: EntryId) -> LdapResultOf<()> {
        if id == EntryId::ROOT || self.tree.borrow().contains(id) {
            return Ok(());
        }
        let outcome = self.write(id.shard(), WriteOp::SetContainer { id, container: true }).await?;
        let WriteOutcome::Record(record) = outcome else {
            return Err(LdapError::new(ResultCode::OTHER, "unexpected shard reply"));
        };
        let next = self.tree.borrow().with_container(id, record.parent, &record.rdn, &record.rdn_norm);
        self.publish(next);
        // It may have been a container before, demoted and left closed.
        self.reopen(id).await;
        Ok(())
    }

    /// Closes `id` to new children on every shard and counts its children.
    async fn close_and_count(&self, id: EntryId) -> LdapResultOf<u64> {
        let mut total = 0;
        let mut failure = None;
        for shard in &self.shards {
            match shard.send(CloseAndCount(id)).await {
                Ok(Ok(n)) => total += n,
                Ok(Err(e)) => failure = Some(LdapError::from(e)),
                Err(e) => failure = Some(LdapError::from(e)),
            }
        }
        match failure {
            Some(e) => {
                self.reopen(id).await;
                Err(e)
            }
            None => Ok(total),
        }
    }

    async fn reopen(&self, id: EntryId) {
        for shard in &self.shards {
            let _ = shard.send(Reopen(id)).await;
        }
    }

    async fn demote_if_childless(&self, id: EntryId) -> LdapResultOf<()> {
        if !self.tree.borrow().contains(id) {
            return Ok(());
        }
        let children = self.close_and_count(id).await?;
        if children > 0 {
            self.reopen(id).await;
            return Ok(());
        }
        // Demoted: it stays closed on every shard, so an add sent with an older skeleton
        // (where it was still a container) can't land under a leaf. Promotion reopens it.
        match self.write(id.shard(), WriteOp::SetContainer { id, container: false }).await {
            Ok(_) | Err(LdapError { code: ResultCode::NO_SUCH_OBJECT, .. }) => {
                let next = self.tree.borrow().without_container(id);
                self.publish(next);
                Ok(())
            }
            Err(e) => {
                self.reopen(id).await;
                Err(e)
            }
        }
    }

    async fn delete_container(&self, target: Located) -> LdapResultOf<()> {
        let id = target.id;
        let children = self.close_and_count(id).await?;
        if children > 0 {
            self.reopen(id).await;
            return Err(LdapError::from(ShardError::NotAllowedOnNonLeaf));
        }
        // It stays closed whatever happens next: it is no longer published as a container,
        // and a later first child would promote (and reopen) it.
        self.delete_closed(target).await
    }

    async fn delete_closed(&self, target: Located) -> LdapResultOf<()> {
        let id = target.id;
        self.write(id.shard(), WriteOp::SetContainer { id, container: false }).await?;
        let next = self.tree.borrow().without_container(id);
        self.publish(next);
        self.delete_leaf(target).await
    }

    /// Deletes a leaf whose DN→ID record lives on another shard than the entry.
    async fn delete_leaf(&self, target: Located) -> LdapResultOf<()> {
        let id = target.id;
        let name_shard = shard_for_child(target.parent, &target.rdn_norm, self.shards.len());
        if name_shard == id.shard() {
            self.write(id.shard(), WriteOp::Delete { id }).await?;
        } else {
            let intent =
                Intent::DeleteWithRemoteName { id, parent: target.parent, rdn: target.rdn_norm.clone() };
            let seq = self
                .log
                .record(&intent)
                .map_err(|e| LdapError::new(ResultCode::UNAVAILABLE, e.to_string()))?;
            self.write(id.shard(), WriteOp::Delete { id }).await?;
            self.write(
                name_shard,
                WriteOp::RemoveDn { parent: target.parent, rdn_norm: target.rdn_norm, id },
            )
            .await?;
            self.log.clear(seq).map_err(|e| LdapError::new(ResultCode::UNAVAILABLE, e.to_string()))?;
        }
        if target.parent != EntryId::ROOT {
            self.demote_if_childless(target.parent).await?;
        }
        Ok(())
    }

    /// Modify DN of any entry. Only the entry's own record and its DN→ID record change:
    /// descendants store their parent's id, and their DNs come from the skeleton, which is
    /// republished in one step after the entry moved. A search pinned to the old skeleton
    /// sees the whole subtree at its old place, one pinned to the new one sees it all moved.
    async fn move_entry(&self, req: MoveEntry) -> LdapResultOf<()> {
        let MoveEntry { target, new_parent, new_rdn, new_rdn_norm, drop_values, add_values, author } = req;
        let id = target.id;
        let container = self.tree.borrow().contains(id);
        if container && (new_parent == id || self.tree.borrow().parent_within(new_parent, id)) {
            return Err(LdapError::unwilling("cannot move an entry below itself"));
        }
        self.promote(new_parent).await?;
        let count = self.shards.len();
        let old_name_shard = shard_for_child(target.parent, &target.rdn_norm, count);
        let new_name_shard = shard_for_child(new_parent, &new_rdn_norm, count);
        let intent = Intent::MoveLeaf {
            id,
            old_parent: target.parent,
            old_rdn: target.rdn_norm.clone(),
            new_parent,
            new_rdn: new_rdn_norm.clone(),
        };
        let seq = self.log.record(&intent).map_err(unavailable)?;
        let steps = async {
            let reserve = WriteOp::PutDn { parent: new_parent, rdn_norm: new_rdn_norm.clone(), id };
            self.write(new_name_shard, reserve).await?;
            let relocate = WriteOp::Relocate {
                id,
                parent: new_parent,
                rdn: new_rdn.clone(),
                rdn_norm: new_rdn_norm.clone(),
                drop_values,
                add_values,
                author,
            };
            if let Err(e) = self.write(id.shard(), relocate).await {
                let release = WriteOp::RemoveDn { parent: new_parent, rdn_norm: new_rdn_norm.clone(), id };
                self.write(new_name_shard, release).await?;
                return Err(e);
            }
            if container {
                let next = self.tree.borrow().with_moved(id, new_parent, &new_rdn, &new_rdn_norm);
                self.publish(next);
            }
            if (target.parent, &target.rdn_norm) != (new_parent, &new_rdn_norm) {
                let old = WriteOp::RemoveDn { parent: target.parent, rdn_norm: target.rdn_norm, id };
                self.write(old_name_shard, old).await?;
            }
            Ok(())
        };
        let result: LdapResultOf<()> = steps.await;
        // A step that failed with `unavailable` may have half-happened: recovery decides.
        if result.is_ok() || result.as_ref().is_err_and(|e| e.code != ResultCode::UNAVAILABLE) {
            self.log.clear(seq).map_err(unavailable)?;
        }
        if result.is_ok() && target.parent != new_parent && target.parent != EntryId::ROOT {
            self.demote_if_childless(target.parent).await?;
        }
        result
    }

    /// Finishes or rolls back every intent left by a crash.
    async fn recover(&self) -> LdapResultOf<usize> {
        let pending = self.log.pending().map_err(|e| LdapError::new(ResultCode::OTHER, e.to_string()))?;
        let count = self.shards.len();
        for (seq, intent) in &pending {
            match intent.clone() {
                Intent::MoveLeaf { id, old_parent, old_rdn, new_parent, new_rdn } => {
                    let record = self.fetch(id).await?;
                    let moved =
                        record.as_ref().is_some_and(|r| r.parent == new_parent && r.rdn_norm == new_rdn);
                    if moved {
                        let shard = shard_for_child(old_parent, &old_rdn, count);
                        self.write(shard, WriteOp::RemoveDn { parent: old_parent, rdn_norm: old_rdn, id })
                            .await?;
                    } else {
                        let shard = shard_for_child(new_parent, &new_rdn, count);
                        self.write(shard, WriteOp::RemoveDn { parent: new_parent, rdn_norm: new_rdn, id })
                            .await?;
                    }
                }
                Intent::DeleteWithRemoteName { id, parent, rdn } => {
                    if self.fetch(id).await?.is_none() {
                        let shard = shard_for_child(parent, &rdn, count);
                        self.write(shard, WriteOp::RemoveDn { parent, rdn_norm: rdn, id }).await?;
                    }
                }
            }
            self.log.clear(*seq).map_err(|e| LdapError::new(ResultCode::OTHER, e.to_string()))?;
            tracing::info!(?intent, "recovered an interrupted cross-shard change");
        }
        Ok(pending.len())
    }

    async fn fetch(&self, id: EntryId) -> LdapResultOf<Option<Arc<ferrodir_shard::record::EntryRecord>>> {
        let addr =
            self.shards.get(id.shard()).ok_or_else(|| LdapError::new(ResultCode::OTHER, "bad shard"))?;
        Ok(addr.send(Fetch(id)).await??)
    }
}

fn unavailable(error: impl std::fmt::Display) -> LdapError {
    LdapError::new(ResultCode::UNAVAILABLE, error.to_string())
}

macro_rules! serial_handler {
    ($msg:ty, $out:ty, |$inner:ident, $m:ident| $body:expr) => {
        impl Handler<$msg> for Coordinator {
            type Result = AtomicResponse<Self, $out>;

            fn handle(&mut self, $m: $msg, _: &mut Context<Self>) -> Self::Result {
                let $inner = self.inner.clone();
                AtomicResponse::new(Box::pin(fut::wrap_future::<_, Self>(async move { $body })))
            }
        }
    };
}

/// Add a child under `parent`, promoting `parent` to a container first if it is a leaf.
#[derive(Message)]
#[rtype(result = "LdapResultOf<WriteOutcome>")]
pub struct AddUnder {
    pub parent: EntryId,
    pub shard: usize,
    pub op: WriteOp,
}

serial_handler!(AddUnder, LdapResultOf<WriteOutcome>, |inner, msg| {
    inner.promote(msg.parent).await?;
    inner.write(msg.shard, msg.op).await
});

/// Delete an entry the router could not delete on one shard: a container, or a leaf whose
/// name lives on another shard.
#[derive(Message)]
#[rtype(result = "LdapResultOf<()>")]
pub struct DeleteEntry(pub Located);

serial_handler!(DeleteEntry, LdapResultOf<()>, |inner, msg| {
    let target = msg.0;
    if inner.tree.borrow().contains(target.id) {
        inner.delete_container(target).await
    } else {
        inner.delete_leaf(target).await
    }
});

/// After a leaf under `parent` was deleted: demote `parent` if it has no children left.
#[derive(Message)]
#[rtype(result = "LdapResultOf<()>")]
pub struct MaybeDemote(pub EntryId);

serial_handler!(MaybeDemote, LdapResultOf<()>, |inner, msg| inner.demote_if_childless(msg.0).await);

/// Modify DN of an entry, leaf or subtree.
#[derive(Message)]
#[rtype(result = "LdapResultOf<()>")]
pub struct MoveEntry {
    pub target: Located,
    pub new_parent: EntryId,
    pub new_rdn: String,
    pub new_rdn_norm: String,
    pub drop_values: Vec<(String, Vec<u8>)>,
    pub add_values: Vec<(String, Vec<u8>)>,
    pub author: String,
}

serial_handler!(MoveEntry, LdapResultOf<()>, |inner, msg| inner.move_entry(msg).await);

/// Finish or roll back interrupted changes; sent once at start, before serving.
#[derive(Message)]
#[rtype(result = "LdapResultOf<usize>")]
pub struct Recover;

serial_handler!(Recover, LdapResultOf<usize>, |inner, _msg| inner.recover().await);
