//! The coordinator: the one actor that changes the tree's shape. It runs on its own thread,
//! off the read path, and handles one structural change at a time (`AtomicResponse`):
//!
//! - promoting a leaf to a container when its first child arrives, and demoting a container
//!   whose last child left;
//! - deleting a container (which must have no children on any shard);
//! - Modify DN of a leaf or a whole subtree (the name may move between shards);
//! - with `[refint]` on, every delete and Modify DN's referential integrity: the values
//!   naming the entry rewritten on every shard before the answer (`refint`).
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
use ferrodir_shard::{
    shard_for_child, CloseAndCount, EntryId, Fetch, Reopen, ShardActor, ShardError, ShardResult, Skeleton,
    SkeletonCell, Write, WriteOp, WriteOutcome,
};

use crate::auditlog::AuditSink;
use crate::error::{LdapError, LdapResultOf};
use crate::intent::{Intent, IntentLog};
use crate::located::Located;

mod refint;
pub use refint::{Origin, RefintConfig};

pub struct Coordinator {
    inner: Rc<Inner>,
}

struct Inner {
    shards: Vec<Addr<ShardActor>>,
    cell: Arc<SkeletonCell>,
    skeleton: RefCell<Skeleton>,
    log: IntentLog,
    /// Referential integrity after deletes and renames; None when off.
    refint: Option<Arc<RefintConfig>>,
    /// The audit log's queue for the coordinator's own changes (refint's rewrites); None
    /// when the log is off.
    audit: Option<AuditSink>,
}

impl Coordinator {
    pub fn new(
        shards: Vec<Addr<ShardActor>>,
        cell: Arc<SkeletonCell>,
        log: IntentLog,
        refint: Option<Arc<RefintConfig>>,
    ) -> Self {
        let skeleton = (*cell.load()).clone();
        let inner = Inner { shards, cell, skeleton: RefCell::new(skeleton), log, refint, audit: None };
        Self { inner: Rc::new(inner) }
    }

    /// Records the coordinator's own changes (refint's rewrites) in the audit log, through
    /// `sink`. Call before the actor starts.
    pub fn with_audit_log(mut self, sink: AuditSink) -> Self {
        if let Some(inner) = Rc::get_mut(&mut self.inner) {
            inner.audit = Some(sink);
        }
        self
    }
}

impl Actor for Coordinator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(256);
    }
}

impl Inner {
    /// Sends a write and answers with the shard's own error, so that every decision below
    /// can ask it whether the write may have happened (`ShardError::is_outcome_unknown`),
    /// never an LDAP result code.
    async fn write(&self, shard: usize, op: WriteOp) -> ShardResult<WriteOutcome> {
        let addr =
            self.shards.get(shard).ok_or_else(|| ShardError::Unavailable(format!("no shard {shard}")))?;
        // A message lost on the way may have been applied: the outcome is unknown.
        addr.send(Write(op)).await.map_err(|e| ShardError::Unavailable(e.to_string()))?
    }

    fn publish(&self, next: Skeleton) {
        *self.skeleton.borrow_mut() = next.clone();
        self.cell.publish(next);
    }

    async fn promote(&self, id: EntryId) -> LdapResultOf<()> {
        if id == EntryId::ROOT || self.skeleton.borrow().contains(id) {
            return Ok(());
        }
        let outcome = self.write(id.shard(), WriteOp::SetContainer { id, container: true }).await?;
        let WriteOutcome::Record(record) = outcome else {
            return Err(LdapError::new(ResultCode::OTHER, "unexpected shard reply"));
        };
        let next = self.skeleton.borrow().with_container(id, record.parent, &record.rdn, &record.rdn_norm);
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
        if !self.skeleton.borrow().contains(id) {
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
            Ok(_) | Err(ShardError::NoSuchObject) => {
                let next = self.skeleton.borrow().without_container(id);
                self.publish(next);
                Ok(())
            }
            Err(e) => {
                self.reopen(id).await;
                Err(e.into())
            }
        }
    }

    async fn delete_container(&self, target: Located, author: String, check: Check) -> LdapResultOf<Deleted> {
        let id = target.id;
        let children = self.close_and_count(id).await?;
        if children > 0 {
            self.reopen(id).await;
            return Err(LdapError::from(ShardError::NotAllowedOnNonLeaf));
        }
        // It stays closed whatever happens next: it is no longer published as a container,
        // and a later first child would promote (and reopen) it.
        self.delete_closed(target, author, check).await
    }

    async fn delete_closed(&self, target: Located, author: String, check: Check) -> LdapResultOf<Deleted> {
        let id = target.id;
        self.write(id.shard(), WriteOp::SetContainer { id, container: false }).await?;
        let next = self.skeleton.borrow().without_container(id);
        self.publish(next);
        self.delete_leaf(target, author, check).await
    }

    /// Deletes a leaf whose DN→ID record lives on another shard than the entry. Answers
    /// the entry as it was.
    async fn delete_leaf(&self, target: Located, author: String, check: Check) -> LdapResultOf<Deleted> {
        let id = target.id;
        let name_shard = shard_for_child(target.parent, &target.rdn_norm, self.shards.len());
        let delete = checked(WriteOp::Delete { id, author }, check);
        let deleted;
        if name_shard == id.shard() {
            deleted = self.write(id.shard(), delete).await?;
        } else {
            let intent =
                Intent::DeleteWithRemoteName { id, parent: target.parent, rdn: target.rdn_norm.clone() };
            let seq = self
                .log
                .record(&intent)
                .map_err(|e| LdapError::new(ResultCode::UNAVAILABLE, e.to_string()))?;
            deleted = match self.write(id.shard(), delete).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    // Refused for sure (the entry is still there): nothing for recovery to
                    // do. Otherwise the delete may have happened, and recovery decides from
                    // the entry.
                    if !e.is_outcome_unknown() {
                        self.clear_intent(seq);
                    }
                    return Err(e.into());
                }
            };
            let remove = WriteOp::RemoveDn { parent: target.parent, rdn_norm: target.rdn_norm.clone(), id };
            match self.write(name_shard, remove).await {
                Ok(_) => self.clear_intent(seq),
                // The delete is decided: the entry is gone for good, and start-up recovery
                // removes the name from the intent. Until then nobody finds it.
                Err(e) => {
                    tracing::warn!(error = %e, shard = name_shard, "delete done, its name stays until restart; withdrawn");
                    self.withdraw(target.parent, &target.rdn_norm, id);
                }
            }
        }
        if target.parent != EntryId::ROOT {
            self.demote_after(target.parent).await;
        }
        Ok(match deleted.inner() {
            WriteOutcome::Deleted { record, .. } => Some(record.clone()),
            _ => None,
        })
    }

    /// Publishes a skeleton in which the DN→ID record (`parent`, `rdn_norm`) → `id` resolves to
    /// nothing: a failed shard still holds it, and the entry is not there under that name.
    fn withdraw(&self, parent: EntryId, rdn_norm: &str, id: EntryId) {
        let next = self.skeleton.borrow().with_withdrawn(parent, rdn_norm, id);
        self.publish(next);
    }

    /// Clears a finished change's intent. A failure leaves it in the log, harmless: recovery
    /// at the next start finds the change complete and only makes the names agree again.
    fn clear_intent(&self, seq: u64) {
        if let Err(e) = self.log.clear(seq) {
            tracing::warn!(seq, error = %e, "change done, but its intent stays in the log until the next start");
        }
    }

    /// Demotes `parent` if a finished change left it childless. A failure is logged, not
    /// returned: the change itself is done, and a container without children is harmless
    /// (the next start settles its flag).
    async fn demote_after(&self, parent: EntryId) {
        if let Err(e) = self.demote_if_childless(parent).await {
            tracing::warn!(%parent, error = %e, "could not demote a container left without children");
        }
    }

    /// Modify DN of any entry. Only the entry's own record and its DN→ID record change:
    /// descendants store their parent's id, and their DNs come from the skeleton, which is
    /// republished in one step after the entry moved. A search pinned to the old skeleton
    /// sees the whole subtree at its old place, one pinned to the new one sees it all moved.
    async fn move_entry(&self, req: MoveEntry) -> LdapResultOf<Option<WriteOutcome>> {
        let (id, old_parent, new_parent) = (req.target.id, req.target.parent, req.new_parent);
        let container = self.skeleton.borrow().contains(id);
        if container && (new_parent == id || self.skeleton.borrow().parent_within(new_parent, id)) {
            return Err(LdapError::unwilling("cannot move an entry below itself"));
        }
        self.promote(new_parent).await?;
        let intent = Intent::MoveLeaf {
            id,
            old_parent,
            old_rdn: req.target.rdn_norm.clone(),
            new_parent,
            new_rdn: req.new_rdn_norm.clone(),
        };
        let seq = self.log.record(&intent).map_err(unavailable)?;
        // Set when a reservation could not be released: it is durable, and only recovery
        // (from the intent) removes it.
        let mut reservation_left = false;
        let mut moved = None;
        let result = self.move_steps(req, container, &mut reservation_left, &mut moved).await;
        // A step whose outcome is unknown may have half-happened, a reservation that could not
        // be released is still stored, and a move whose old name is still stored is not
        // finished: recovery decides those, from the intent. Only a step the shard refused
        // for sure, with everything before it undone, ends the change here.
        let finished = match &result {
            Ok(finished) => *finished,
            Err(e) => !e.is_outcome_unknown() && !reservation_left,
        };
        if finished {
            self.clear_intent(seq);
        }
        if result.is_ok() && old_parent != new_parent && old_parent != EntryId::ROOT {
            self.demote_after(old_parent).await;
        }
        result.map(|_| moved).map_err(LdapError::from)
    }

    /// A move's steps, in order: reserve the new name, move the entry (releasing the
    /// reservation if that fails), republish the skeleton, remove the old name. Ok(false):
    /// moved, but the old name could not be removed; it stays withdrawn until recovery.
    async fn move_steps(
        &self,
        req: MoveEntry,
        container: bool,
        reservation_left: &mut bool,
        moved: &mut Option<WriteOutcome>,
    ) -> ShardResult<bool> {
        let MoveEntry {
            target,
            new_parent,
            new_rdn,
            new_rdn_norm,
            drop_values,
            add_values,
            author,
            delete_old_rdn,
            check,
            ..
        } = req;
        let id = target.id;
        let count = self.shards.len();
        let new_name_shard = shard_for_child(new_parent, &new_rdn_norm, count);
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
            delete_old_rdn,
        };
        let relocate = checked(relocate, check);
        let relocated = self.write(id.shard(), relocate).await;
        if let Err(e) = relocated {
            let release = WriteOp::RemoveDn { parent: new_parent, rdn_norm: new_rdn_norm.clone(), id };
            if let Err(stuck) = self.write(new_name_shard, release).await {
                // The reservation stays on a failed shard (recovery removes it): until
                // then the new name must not find the entry, which did not move.
                self.withdraw(new_parent, &new_rdn_norm, id);
                *reservation_left = true;
                return Err(stuck);
            }
            return Err(e);
        }
        *moved = relocated.ok();
        if self.skeleton.borrow().is_withdrawn(new_parent, &new_rdn_norm, id) {
            // Moved back under a name an earlier failure withdrew: it is right again.
            let next = self.skeleton.borrow().without_withdrawn(new_parent, &new_rdn_norm);
            self.publish(next);
        }
        if container {
            let next = self.skeleton.borrow().with_moved(id, new_parent, &new_rdn, &new_rdn_norm);
            self.publish(next);
        }
        if (target.parent, &target.rdn_norm) != (new_parent, &new_rdn_norm) {
            let old_name_shard = shard_for_child(target.parent, &target.rdn_norm, count);
            let old = WriteOp::RemoveDn { parent: target.parent, rdn_norm: target.rdn_norm.clone(), id };
            if let Err(e) = self.write(old_name_shard, old).await {
                // The move is decided: the entry and its new name are durable, and so is
                // the intent, from which start-up recovery removes the old name. Until
                // then the old name is withdrawn; the intent must stay.
                tracing::warn!(error = %e, shard = old_name_shard, "moved; the old name stays until restart, withdrawn");
                self.withdraw(target.parent, &target.rdn_norm, id);
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Finishes or rolls back every intent left by a crash or a failed shard: the entry's
    /// record decides, and each name the intent touched is made to agree with it. That also
    /// covers a step whose outcome was unknown (a commit that failed after it reached the
    /// disk) and an intent left behind by a change that finished, or was followed by others.
    async fn recover(&self) -> LdapResultOf<usize> {
        let pending = self.log.pending().map_err(|e| LdapError::new(ResultCode::OTHER, e.to_string()))?;
        for (seq, intent) in &pending {
            match intent.clone() {
                Intent::MoveLeaf { id, old_parent, old_rdn, new_parent, new_rdn } => {
                    let record = self.fetch(id).await?;
                    self.settle_name(old_parent, old_rdn, id, record.as_deref()).await?;
                    self.settle_name(new_parent, new_rdn, id, record.as_deref()).await?;
                }
                Intent::DeleteWithRemoteName { id, parent, rdn } => {
                    let record = self.fetch(id).await?;
                    self.settle_name(parent, rdn, id, record.as_deref()).await?;
                }
                refint @ Intent::Refint { .. } => self.settle_refint(&refint).await?,
                // Rolled back by the server through the router (`op::transaction::recover`).
                Intent::Transaction { .. } => continue,
            }
            self.log.clear(*seq).map_err(|e| LdapError::new(ResultCode::OTHER, e.to_string()))?;
            tracing::info!(?intent, "recovered an interrupted cross-shard change");
        }
        Ok(pending.len())
    }

    /// Makes the DN→ID record (`parent`, `rdn_norm`) → `id` agree with the entry's `record`:
    /// there if the entry is there under that name, gone otherwise (`RemoveDn` removes only a
    /// record that names `id`).
    async fn settle_name(
        &self,
        parent: EntryId,
        rdn_norm: String,
        id: EntryId,
        record: Option<&ferrodir_shard::EntryRecord>,
    ) -> LdapResultOf<()> {
        let shard = shard_for_child(parent, &rdn_norm, self.shards.len());
        let agrees = record.is_some_and(|r| r.parent == parent && r.rdn_norm == rdn_norm);
        let op = if agrees {
            WriteOp::PutDn { parent, rdn_norm, id }
        } else {
            WriteOp::RemoveDn { parent, rdn_norm, id }
        };
        match self.write(shard, op).await {
            Err(ShardError::AlreadyExists) => {
                // Another entry holds the name: not something recovery can decide.
                tracing::error!(%id, %parent, "recovery: the entry's name is held by another entry; run ferrodir verify");
                Ok(())
            }
            other => other.map(|_| ()).map_err(LdapError::from),
        }
    }

    async fn fetch(&self, id: EntryId) -> LdapResultOf<Option<Arc<ferrodir_shard::EntryRecord>>> {
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
    Ok(inner.write(msg.shard, msg.op).await?)
});

/// Delete an entry the router could not delete on one shard: a container, a leaf whose
/// name lives on another shard, or any entry when referential integrity is on.
#[derive(Message)]
#[rtype(result = "LdapResultOf<Deleted>")]
pub struct DeleteEntry {
    pub target: Located,
    /// Its DN, as the client named it (what referential integrity looks for).
    pub dn: ferrodir_proto::Dn,
    pub origin: Origin,
    /// Who asks (the changelog's creatorsName; `ferrodir_shard::REPLICA_AUTHOR` for the
    /// replication consumer).
    pub author: String,
    /// A condition the entry must meet when its delete is staged (the assertion control).
    pub check: Check,
}

serial_handler!(DeleteEntry, LdapResultOf<Deleted>, |inner, msg| {
    let DeleteEntry { target, dn, origin, author, check } = msg;
    let refint = inner.refint_begin(origin, refint::delete_intent(target.id, &dn))?;
    let result = if inner.skeleton.borrow().contains(target.id) {
        inner.delete_container(target, author, check).await
    } else {
        inner.delete_leaf(target, author, check).await
    };
    inner.refint_end(refint).await;
    result
});

/// After a leaf under `parent` was deleted: demote `parent` if it has no children left.
#[derive(Message)]
#[rtype(result = "LdapResultOf<()>")]
pub struct MaybeDemote(pub EntryId);

serial_handler!(MaybeDemote, LdapResultOf<()>, |inner, msg| inner.demote_if_childless(msg.0).await);

/// Modify DN of an entry, leaf or subtree. Answers the move's outcome (the entry as moved;
/// with a check, as it was too).
#[derive(Message)]
#[rtype(result = "LdapResultOf<Option<WriteOutcome>>")]
pub struct MoveEntry {
    pub target: Located,
    pub new_parent: EntryId,
    pub new_rdn: String,
    pub new_rdn_norm: String,
    pub drop_values: Vec<(String, Vec<u8>)>,
    pub add_values: Vec<(String, Vec<u8>)>,
    pub author: String,
    /// The request's deleteOldRDN (recorded by the changelog).
    pub delete_old_rdn: bool,
    /// The entry's DN before and after, as the client named them (referential integrity).
    pub old_dn: ferrodir_proto::Dn,
    pub new_dn: ferrodir_proto::Dn,
    pub origin: Origin,
    /// A condition the entry must meet when its move is staged (the assertion control).
    pub check: Check,
}

serial_handler!(MoveEntry, LdapResultOf<Option<WriteOutcome>>, |inner, msg| {
    let intent = Intent::Refint {
        id: msg.target.id,
        old_dn: msg.old_dn.to_string(),
        new: Some(crate::intent::RenamedTo {
            parent: msg.new_parent,
            rdn_norm: msg.new_rdn_norm.clone(),
            dn: msg.new_dn.to_string(),
        }),
        subtree: inner.skeleton.borrow().contains(msg.target.id),
    };
    let refint = inner.refint_begin(msg.origin, intent)?;
    let result = inner.move_entry(msg).await;
    inner.refint_end(refint).await;
    result
});

/// Finish or roll back interrupted changes; sent once at start, before serving.
#[derive(Message)]
#[rtype(result = "LdapResultOf<usize>")]
pub struct Recover;

serial_handler!(Recover, LdapResultOf<usize>, |inner, _msg| inner.recover().await);

/// Records one step of an LDAP transaction's commit (`op::transaction`), `txn` None for
/// its first: answers the step's sequence number once it is durable (the first's names the
/// transaction).
#[derive(Message)]
#[rtype(result = "LdapResultOf<u64>")]
pub struct TransactionStep {
    pub txn: Option<u64>,
    pub steps: Vec<u8>,
}

serial_handler!(TransactionStep, LdapResultOf<u64>, |inner, msg| {
    let intent = Intent::Transaction { txn: msg.txn.unwrap_or(0), steps: msg.steps };
    inner.log.record(&intent).map_err(unavailable)
});

/// Clears one step of a transaction (an update that failed, so was not applied), or with
/// `whole`, every step of the transaction `seq` names (its commit or rollback is done), in
/// one durable write.
#[derive(Message)]
#[rtype(result = "LdapResultOf<()>")]
pub struct ClearTransaction {
    pub seq: u64,
    pub whole: bool,
}

serial_handler!(ClearTransaction, LdapResultOf<()>, |inner, msg| {
    if !msg.whole {
        return inner.log.clear(msg.seq).map_err(unavailable);
    }
    let seqs: Vec<u64> = inner
        .log
        .pending()
        .map_err(unavailable)?
        .into_iter()
        .filter(|(seq, intent)| {
            matches!(intent, Intent::Transaction { txn, .. } if *seq == msg.seq || *txn == msg.seq)
        })
        .map(|(seq, _)| seq)
        .collect();
    inner.log.clear_all(&seqs).map_err(unavailable)
});

/// The transactions an earlier run left in the log, oldest first, each as its first step's
/// sequence number and its steps' undo lists joined in order (to roll back at start).
#[derive(Message)]
#[rtype(result = "LdapResultOf<Vec<(u64, Vec<u8>)>>")]
pub struct PendingTransactions;

serial_handler!(PendingTransactions, LdapResultOf<Vec<(u64, Vec<u8>)>>, |inner, _msg| {
    let mut transactions: Vec<(u64, Vec<u8>)> = Vec::new();
    for (seq, intent) in inner.log.pending().map_err(unavailable)? {
        let Intent::Transaction { txn, steps } = intent else { continue };
        let key = if txn == 0 { seq } else { txn };
        match transactions.iter_mut().find(|(k, _)| *k == key) {
            Some((_, joined)) => joined.extend_from_slice(&steps),
            None => transactions.push((key, steps)),
        }
    }
    Ok(transactions)
});

/// Answered in turn after the changes before it: proves the coordinator makes progress
/// (the systemd watchdog ping).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Ping;

serial_handler!(Ping, (), |_inner, _msg| ());

/// Runs a closure on the coordinator's thread between two structural changes: the handler
/// is serial like every other, so no promotion, container delete or Modify DN is half done
/// while it runs, and none starts until it returns. `ferrodir export` and `backup` use it to
/// open one snapshot per shard (server/src/data/cut.rs). It gets the intent log, to read the
/// intents still pending (a change cut short by a disk error, left for recovery at the
/// next start), which a backup must carry. The closure must be short: every structural
/// change waits for it. It reports through whatever channel it captured.
#[derive(Message)]
#[rtype(result = "()")]
pub struct BetweenChanges(pub Box<dyn FnOnce(&IntentLog) + Send>);

serial_handler!(BetweenChanges, (), |inner, msg| (msg.0)(&inner.log));

#[cfg(test)]
mod tests;

/// A condition on the entry a write changes, judged when the write is staged (the
/// assertion control, `op::write_controls`); None: none.
pub type Check = Option<std::sync::Arc<dyn ferrodir_shard::EntryCheck>>;

/// A deleted entry as it was, when the delete's outcome carried it.
pub type Deleted = Option<std::sync::Arc<ferrodir_shard::EntryRecord>>;

/// `op` with its condition: a `WriteOp::Checked` when there is one (its outcome then
/// carries the entry as it was too).
fn checked(op: WriteOp, check: Check) -> WriteOp {
    match check {
        Some(check) => WriteOp::Checked(Box::new(ferrodir_shard::CheckedWrite { op, check: Some(check) })),
        None => op,
    }
}
