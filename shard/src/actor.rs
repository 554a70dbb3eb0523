//! The shard actor: the one writer of a shard, and the door other workers read it through.
//!
//! It runs on its worker's arbiter thread next to that worker's connections. Writes arrive as
//! [`Write`] messages and are grouped: while one batch is with the commit thread, the next
//! gathers. The commit thread runs the engine's commit (and its fsync) so the worker thread
//! keeps serving reads from the last committed snapshot meanwhile. After a commit returns,
//! the snapshot is refreshed, caches updated, and replies sent in batch order.

use std::collections::HashSet;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::core::ShardCore;
use crate::entry::record::EntryRecord;
use crate::error::{ShardError, ShardResult};
use crate::id::EntryId;
use crate::write::batch::{Overlay, Stager, WriteOp, WriteOutcome};
use crate::write::commit::{spawn_committer, CommitJob, Committer};

/// Bounded mailbox: senders wait (`Addr::send`) when a shard is saturated.
pub const MAILBOX_CAPACITY: usize = 1024;

/// The default of `[limits] commit_coalesce_us`: how long the next commit may wait for the
/// writers the last one answered ([`ShardActor::with_commit_coalesce`]). 500 µs since the
/// write log made a commit's sync short (one page): bench/ab.sh's modify load gave 3,213 and
/// 3,619 modifies/s at 500 against 2,365 and 2,585 at 250, and 500 and 1,000 alike.
pub const COMMIT_COALESCE_DEFAULT: Duration = Duration::from_micros(500);

/// A wait for writers to come back before the next commit starts.
struct Coalescing {
    /// Start as soon as this many writes are staged.
    target: usize,
    /// Starts the commit when the wait is over, whatever is staged.
    timer: SpawnHandle,
}

pub struct ShardActor {
    core: Rc<ShardCore>,
    stager: Stager,
    committer: Committer,
    /// Parents under which no child may be added: being checked for children, or no longer
    /// containers (demoted or deleted). Routers holding an older skeleton may still send adds
    /// under them; those fail with `ParentClosed` and are retried. Only the coordinator,
    /// which is serial, changes this set. It grows with container demotions and deletions
    /// since start (few: containers are a small part of a tree) and starts empty.
    closed: HashSet<EntryId>,
    started_generation: u64,
    committed_generation: u64,
    drain_waiters: Vec<DrainWaiter>,
    /// The longest a commit waits for more writes after the last one was answered; zero:
    /// every commit starts as soon as the last one is done.
    coalesce: Duration,
    coalescing: Option<Coalescing>,
    /// Times `coalesce` to the microsecond (`alarm`); made on the actor's thread at its first
    /// wait (None until then). Some(None) if the timerfd could not be made: then `run_later`,
    /// which rounds the wait up to the next millisecond.
    alarm: Option<Option<crate::alarm::Alarm>>,
    /// The changelog's trimming timer, while it has an age bound.
    trim_timer: Option<SpawnHandle>,
    /// Failed commits in a row, and when the last was logged: a shard that refuses writes
    /// (a full disk, or stopped) logs the first failure, then a count once a minute, not a
    /// line per batch.
    failures: FailureLog,
}

#[derive(Default)]
struct FailureLog {
    in_a_row: u64,
    unlogged: u64,
    logged_at: Option<std::time::Instant>,
}

/// How often a shard that keeps failing its commits says so again.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

struct DrainWaiter {
    generation: u64,
    parent: EntryId,
    reply: oneshot::Sender<ShardResult<u64>>,
}

/// The metadata key of the highest CSN the shard stamped itself and committed.
const OWN_CSN_MAX: &str = "own_csn_max";

impl ShardActor {
    pub fn new(core: Rc<ShardCore>) -> ShardResult<Self> {
        // The actor's core is the shard's owner: it publishes every commit to the shared
        // entry cache (`entrycache`).
        core.become_owner()?;
        let next_seq = core.stored_next_seq()?;
        core.info.hub.restore(core.info.index, core.stored_csn_max()?);
        core.info.hub.own_committed(core.info.index, core.stored_u64(OWN_CSN_MAX)?);
        let committer = spawn_committer(core.engine(), core.info.index)?;
        let deletelog = crate::write::deletelog::DeleteLog::load(core.snapshot().as_ref())?;
        let changelog = crate::write::changelog::Changelog::load(core.snapshot().as_ref())?;
        core.info.hub.set_changelog(core.info.index, changelog.first(), changelog.committed_last());
        let stager = Stager { deletelog, changelog, ..Stager::new(&core, next_seq) };
        Ok(Self {
            core,
            stager,
            committer,
            closed: HashSet::new(),
            started_generation: 0,
            committed_generation: 0,
            drain_waiters: Vec::new(),
            coalesce: Duration::ZERO,
            coalescing: None,
            alarm: None,
            trim_timer: None,
            failures: FailureLog::default(),
        })
    }

    /// Group commit across round trips (`[limits] commit_coalesce_us`). Writers wait for
    /// their acknowledgement, so the writes a commit answers come back as new writes about
    /// one loopback round trip later. Starting the next commit at once, with whatever
    /// arrived during the last fsync, splits the writers into two halves that take turns,
    /// each half one fsync. Waiting up to `wait` after a commit, or until as many writes are
    /// staged as it answered plus those already waiting, lets one fsync carry both halves.
    /// Nothing is acknowledged before its fsync, so durability is unchanged: only fewer
    /// fsyncs per acknowledged write, for at most `wait` more latency. A writer that does
    /// not come back costs nothing more: the wait ends with its timer, a timerfd (`alarm`)
    /// so that 250 µs means 250 µs and not tokio's next millisecond tick.
    pub fn with_commit_coalesce(mut self, wait: Duration) -> Self {
        self.coalesce = wait;
        self
    }

    /// The delete log's bound and the skeleton that names its records' old DNs; without
    /// this, [`crate::write::deletelog::DEFAULT_MAX`] and bare RDNs (a lone shard in a test).
    pub fn with_delete_log(mut self, settings: crate::write::deletelog::DeleteLogSettings) -> Self {
        self.stager.deletelog_settings = settings;
        self
    }

    /// Records every client change in the retro changelog (`write::changelog`), within
    /// `settings`' bounds; without this, nothing is recorded.
    pub fn with_changelog(mut self, settings: crate::write::changelog::ChangelogSettings) -> Self {
        self.stager.changelog_settings = settings;
        self
    }

    /// The changelog's age bound, checked now and then: an idle shard's expired records are
    /// deleted by a write of their own (a busy shard trims them with each record it stages).
    fn trim_changelog(&mut self, ctx: &mut Context<Self>) {
        let settings = &self.stager.changelog_settings;
        if !self.stager.changelog.has_expired(settings, crate::write::changelog::now_micros()) {
            return;
        }
        // Nobody waits for the answer.
        let (reply, _) = oneshot::channel();
        self.stage_write(WriteOp::TrimChangelog, reply, ctx);
    }

    /// After a commit that answered `answered` writes: the next commit now, or once the
    /// writers are back (or `coalesce` has passed).
    fn next_commit(&mut self, answered: usize, ctx: &mut Context<Self>) {
        let staged = self.stager.pending.replies.len();
        let target = staged + answered;
        if self.coalesce.is_zero() || answered == 0 || staged >= target {
            self.start_commit(ctx);
            return;
        }
        let timer = match self.precise_wait() {
            Some(rung) => ctx.spawn(fut::wrap_future::<_, Self>(rung).map(|_, act, ctx| act.waited(ctx))),
            None => ctx.run_later(self.coalesce, |act, ctx| act.waited(ctx)),
        };
        self.coalescing = Some(Coalescing { target, timer });
    }

    /// The coalescing wait ran out: commit whatever is staged.
    fn waited(&mut self, ctx: &mut Context<Self>) {
        self.coalescing = None;
        self.start_commit(ctx);
        self.count_waiting();
    }

    /// The alarm armed for `coalesce`, and what resolves when it rings; None when no timerfd
    /// can be had (the caller falls back to tokio's millisecond timer). An alarm that fails
    /// to ring (an I/O error on the timerfd) ends the wait too: a commit is never left
    /// waiting for a timer.
    fn precise_wait(&mut self) -> Option<impl std::future::Future<Output = ()> + 'static> {
        let shard = self.core.info.index;
        let alarm = self.alarm.get_or_insert_with(|| match crate::alarm::Alarm::new() {
            Ok(alarm) => Some(alarm),
            Err(e) => {
                tracing::warn!(shard, error = %e, "no timerfd: group commit waits round up to a millisecond");
                None
            }
        });
        let alarm = alarm.as_ref()?;
        alarm.set(self.coalesce).ok()?;
        let rung = alarm.rung();
        Some(async move {
            let _ = rung.await;
        })
    }

    /// A write was staged: start its commit unless a wait for more is on and not yet met.
    fn staged(&mut self, ctx: &mut Context<Self>) {
        if let Some(coalescing) = &self.coalescing {
            if self.stager.pending.replies.len() < coalescing.target {
                return;
            }
            ctx.cancel_future(coalescing.timer);
            self.coalescing = None;
            if let Some(Some(alarm)) = &self.alarm {
                // Nobody waits for it now: do not wake the thread for it.
                let _ = alarm.disarm();
            }
        }
        self.start_commit(ctx);
    }

    fn start_commit(&mut self, ctx: &mut Context<Self>) {
        if self.stager.committing.is_some() || self.stager.pending.is_empty() {
            return;
        }
        self.started_generation += 1;
        let mut batch = std::mem::take(&mut self.stager.pending);
        batch.generation = self.started_generation;
        let mut mutations = std::mem::take(&mut batch.mutations);
        // The delete log's minimum, fixed before any commit moves csn_max past it.
        self.stager.deletelog.settle(&mut mutations);
        if batch.csn_max > 0 {
            // contextCSN survives a restart (and seeds the clock there).
            mutations.push(crate::storage::Mutation {
                key: crate::index::keys::meta("csn_max"),
                value: Some(batch.csn_max.to_be_bytes().to_vec()),
            });
        }
        if batch.own_csn_max > 0 && self.core.info.hub.multi_provider() {
            // And a mesh node's own server id's value (`Hub::own_watermark`); elsewhere
            // nothing reads it, and a commit writes no more than it did.
            mutations.push(crate::storage::Mutation {
                key: crate::index::keys::meta(OWN_CSN_MAX),
                value: Some(batch.own_csn_max.to_be_bytes().to_vec()),
            });
        }
        self.stager.committing = Some(batch);
        let (done, result) = oneshot::channel();
        if self.committer.submit(CommitJob { mutations, done }).is_err() {
            self.finish_commit(Err(ShardError::Unavailable("commit thread stopped".into())), ctx);
            return;
        }
        ctx.spawn(fut::wrap_future::<_, Self>(result).map(|outcome, act, ctx| {
            let outcome = match outcome {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(ShardError::Storage(e)),
                Err(_) => Err(ShardError::Unavailable("commit thread stopped".into())),
            };
            let shard = act.core.info.index;
            // Publishing or rolling back half-way would serve a batch that is half there.
            crate::fatal::abort_on_panic("publishing a commit", shard, || act.finish_commit(outcome, ctx));
        }));
    }

    fn finish_commit(&mut self, outcome: ShardResult<()>, ctx: &mut Context<Self>) {
        let Some(batch) = self.stager.committing.take() else {
            return;
        };
        self.committed_generation = batch.generation;
        let mut answered = 0;
        match outcome.and_then(|()| self.core.refresh_snapshot()) {
            Ok(()) => {
                answered = batch.replies.len();
                if self.failures.in_a_row > 0 {
                    tracing::warn!(
                        shard = self.core.info.index,
                        failed_commits = self.failures.in_a_row,
                        "commits succeed again"
                    );
                    self.failures = FailureLog::default();
                }
                self.core.cache_reopen_if_closed();
                self.publish(batch);
            }
            Err(e) => {
                let pending = std::mem::take(&mut self.stager.pending);
                // Nothing of either batch will ever be visible: nothing pending holds the
                // watermark back.
                self.core.info.hub.committed(self.core.info.index, 0, u64::MAX);
                self.roll_back(&batch, &pending, &e);
                // The failed batches' log records never landed.
                match crate::write::deletelog::DeleteLog::load(self.core.snapshot().as_ref()) {
                    Ok(mut log) => {
                        if self.stager.deletelog.is_kept() {
                            log.keep();
                        }
                        self.stager.deletelog = log
                    }
                    Err(e) => {
                        tracing::error!(shard = self.core.info.index, error = %e, "delete log not reloaded")
                    }
                }
                match crate::write::changelog::Changelog::load(self.core.snapshot().as_ref()) {
                    Ok(log) => self.stager.changelog = log,
                    Err(e) => {
                        tracing::error!(shard = self.core.info.index, error = %e, "changelog not reloaded")
                    }
                }
                let shard = self.core.info.index;
                fail_all(batch, shard, &e);
                // The pending batch was checked against state that never landed.
                fail_all(pending, shard, &e);
            }
        }
        self.wake_drain_waiters();
        self.next_commit(answered, ctx);
        self.count_waiting();
    }

    /// After a failed commit: nothing of the failed batches is visible, and reads go on.
    /// Their changes lived only in the two overlays, which are dropped with them; the read
    /// snapshot and the entry cache change only in `publish`, so no read saw them. The
    /// entries they touched are dropped from the cache all the same, and the snapshot is
    /// taken anew: after a failed commit the engine reopens its file for reads (redb fails
    /// every later read of the old handle that misses its cache), and the cache must not
    /// disagree with what that reopen shows.
    fn roll_back(&mut self, batch: &Overlay, pending: &Overlay, error: &ShardError) {
        let shard = self.core.info.index;
        let log = &mut self.failures;
        log.in_a_row += 1;
        if log.logged_at.is_none_or(|at| at.elapsed() >= FAILURE_LOG_INTERVAL) {
            let unlogged = std::mem::take(&mut log.unlogged);
            tracing::error!(shard, error = %error, failed_since_last_line = unlogged,
                "commit failed: every write of the batch fails with unavailable");
            log.logged_at = Some(std::time::Instant::now());
        } else {
            log.unlogged += 1;
        }
        // The shared entry cache closes until the next successful commit: no label could
        // tell a shard view's old read from the file's state after the failure.
        self.core.cache_close();
        for (id, _) in batch.touched.iter().chain(&pending.touched) {
            self.core.cache_forget(*id);
        }
        if let Err(e) = self.core.refresh_snapshot() {
            tracing::error!(shard, error = %e, "no fresh read snapshot after the failed commit; reads keep the last one");
        }
    }

    fn publish(&mut self, mut batch: Overlay) {
        if batch.changelog_last > 0 || self.stager.changelog_settings.is_enabled() {
            let log = &mut self.stager.changelog;
            log.committed(batch.changelog_last);
            // Before the watermark passes the batch's CSNs: the root DSE never shows a
            // watermark above a record it does not count yet.
            self.core.info.hub.set_changelog(self.core.info.index, log.first(), log.committed_last());
        }
        self.publish_csns(&mut batch);
        for (id, record) in batch.touched {
            match record {
                Some(r) => self.core.cache_put(id, r),
                None => self.core.cache_forget(id),
            }
        }
        self.core.cache_published();
        let snapshot = self.core.snapshot();
        let stats = self.core.counters();
        let (mut added, mut deleted) = (0u64, 0u64);
        for (reply, mut result) in batch.replies {
            match result.as_ref().map(WriteOutcome::inner) {
                Ok(WriteOutcome::Added(_)) => added += 1,
                Ok(WriteOutcome::Deleted { .. }) => deleted += 1,
                _ => {}
            }
            if let Ok(WriteOutcome::Deleted { record, parent_has_children_here }) =
                result.as_mut().map(WriteOutcome::inner_mut)
            {
                // Judged on the state just made durable, so that of two deletes of the last
                // two children, whichever batch commits last sees none left.
                *parent_has_children_here =
                    self.core.has_children(snapshot.as_ref(), record.parent).unwrap_or(true);
            }
            let _ = reply.send(result);
        }
        // One writer (this actor): a load and a store, no read-modify-write across cores.
        let entries = stats.entries.load(Ordering::Relaxed);
        stats.entries.store((entries + added).saturating_sub(deleted), Ordering::Relaxed);
    }

    /// The batch is visible: moves this shard's part of the watermark and hands the
    /// batch's changes to the persist searches (`watermark.rs`), without waiting on them.
    fn publish_csns(&mut self, batch: &mut Overlay) {
        let hub = &self.core.info.hub;
        let shard = self.core.info.index;
        // Fed before its CSN counts in the watermark: a persist search that reads the
        // watermark and then drains its feed has every change at or below it.
        let changes = std::mem::take(&mut batch.changes);
        hub.feed(crate::write::watermark::FeedBatch { shard, csn_max: batch.csn_max, changes });
        hub.own_committed(shard, batch.own_csn_max);
        hub.committed(shard, batch.csn_max, self.stager.pending.csn_floor.unwrap_or(u64::MAX));
    }

    /// Publishes the write queue's depth for the metrics endpoint.
    fn count_waiting(&self) {
        let committing = self.stager.committing.as_ref().map_or(0, |b| b.replies.len());
        let waiting = (self.stager.pending.replies.len() + committing) as u64;
        self.core.counters().writes_waiting.store(waiting, Ordering::Relaxed);
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
        Ok(u64::from(self.core.has_children(snapshot.as_ref(), parent)?))
    }
}

/// Answers every write of `batch` with unavailable (LDAP 52), naming the cause.
fn fail_all(batch: Overlay, shard: usize, error: &ShardError) {
    for (reply, _) in batch.replies {
        let message = format!("shard {shard} could not commit the change: {error}");
        let _ = reply.send(Err(ShardError::Unavailable(message)));
    }
}

impl Actor for ShardActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        self.arm_trim_timer(ctx);
    }
}

impl ShardActor {
    /// The changelog's trimming timer, as its settings ask: none without an age bound.
    fn arm_trim_timer(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.trim_timer.take() {
            ctx.cancel_future(timer);
        }
        let max_age_s = self.stager.changelog_settings.max_age_s();
        if self.stager.changelog_settings.is_enabled() && max_age_s > 0 {
            // A quarter of the age bound, between 1 s and a minute: an expired record
            // outlives its bound by at most that on an idle shard.
            let every = Duration::from_secs((max_age_s / 4).clamp(1, 60));
            self.trim_timer = Some(ctx.run_interval(every, |act, ctx| act.trim_changelog(ctx)));
        }
    }
}

/// New changelog settings (a reload): from the next staged write on, changes are recorded
/// or not, and trimmed to the new bounds, as they say.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetChangelog(pub crate::write::changelog::ChangelogSettings);

impl Handler<SetChangelog> for ShardActor {
    type Result = ();

    fn handle(&mut self, msg: SetChangelog, ctx: &mut Context<Self>) {
        self.stager.changelog_settings = msg.0;
        if self.stager.changelog_settings.is_enabled() {
            let log = &self.stager.changelog;
            self.core.info.hub.set_changelog(self.core.info.index, log.first(), log.committed_last());
        }
        self.arm_trim_timer(ctx);
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
        self.stage_write(msg.0, reply, ctx);
        Box::pin(async move {
            answer.await.unwrap_or_else(|_| Err(ShardError::Unavailable("shard stopped".into())))
        })
    }
}

/// A [`Write`] whose answer goes to `reply`, once the batch holding it is durable, instead
/// of back through the message: what the routers send (`Worker::write_to_shard`, by
/// `try_send`, waiting for room with `send` only when the mailbox is full). A [`Write`]'s
/// answer takes two steps (the batch's reply wakes the actor's boxed future, which then
/// answers the message); this one takes one, and the actor's thread does not run again for
/// it after the commit.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stage {
    pub op: WriteOp,
    pub reply: crate::write::batch::Reply,
}

impl Handler<Stage> for ShardActor {
    type Result = ();

    fn handle(&mut self, msg: Stage, ctx: &mut Context<Self>) {
        self.stage_write(msg.op, msg.reply, ctx);
    }
}

impl ShardActor {
    fn stage_write(&mut self, op: WriteOp, reply: crate::write::batch::Reply, ctx: &mut Context<Self>) {
        let shard = self.core.info.index;
        // A panic while staging leaves overlays, cache and Bloom bits half-updated.
        crate::fatal::abort_on_panic("staging a write", shard, || {
            let closed = &self.closed;
            self.stager.stage(&self.core, op, &|p| closed.contains(&p), reply);
            self.staged(ctx);
            self.count_waiting();
        });
    }
}

/// Answered at once: proves the shard's thread and mailbox are alive (the systemd
/// watchdog ping).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Ping;

impl Handler<Ping> for ShardActor {
    type Result = ();

    fn handle(&mut self, _: Ping, _: &mut Context<Self>) {}
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

/// The ids of this shard's entries whose `attrs` (canonical names) name `base_norm`, or with
/// `subtree` any DN below it, in the last committed snapshot: the candidates of a
/// referential-integrity rewrite (`crate::refs::find`; its cost is there).
#[derive(Message)]
#[rtype(result = "ShardResult<Vec<EntryId>>")]
pub struct FindRefs {
    pub attrs: Vec<String>,
    pub base_norm: String,
    pub subtree: bool,
}

impl Handler<FindRefs> for ShardActor {
    type Result = ShardResult<Vec<EntryId>>;

    fn handle(&mut self, msg: FindRefs, _: &mut Context<Self>) -> Self::Result {
        crate::refs::find(self.core.snapshot().as_ref(), &msg.attrs, &msg.base_norm, msg.subtree)
    }
}

/// This shard's delete-log records after a CSN, and its minimum (`deletelog::read`), in
/// the last committed snapshot: a sync refresh's delete phase.
#[derive(Message)]
#[rtype(result = "ShardResult<crate::write::deletelog::LogView>")]
pub struct ReadDeleteLog {
    pub after: u64,
}

impl Handler<ReadDeleteLog> for ShardActor {
    type Result = ShardResult<crate::write::deletelog::LogView>;

    fn handle(&mut self, msg: ReadDeleteLog, _: &mut Context<Self>) -> Self::Result {
        crate::write::deletelog::read(self.core.snapshot().as_ref(), msg.after)
    }
}

/// This shard's changelog records numbered above `after` and at most `upto`, at most `max`
/// of them (`changelog::read`), in the last committed snapshot: a cn=changelog search.
#[derive(Message)]
#[rtype(result = "ShardResult<Vec<crate::write::changelog::ChangeRecord>>")]
pub struct ReadChangelog {
    pub after: u64,
    pub upto: u64,
    pub max: usize,
}

impl Handler<ReadChangelog> for ShardActor {
    type Result = ShardResult<Vec<crate::write::changelog::ChangeRecord>>;

    fn handle(&mut self, msg: ReadChangelog, _: &mut Context<Self>) -> Self::Result {
        crate::write::changelog::read(self.core.snapshot().as_ref(), msg.after, msg.upto, msg.max)
    }
}

/// Keep the delete log from now on (`deletelog`: a server logs deletes and Modify DNs once
/// replication is in use). A sync search sends it to every shard before it reads the
/// watermark that becomes its cookie: every change staged after the answer is logged.
/// Answers whether the log was not kept before (then the sender stores the mark at once,
/// `deletelog::KEPT_KEY`, so that a restart before the next write keeps logging).
#[derive(Message)]
#[rtype(result = "bool")]
pub struct KeepDeleteLog;

impl Handler<KeepDeleteLog> for ShardActor {
    type Result = bool;

    fn handle(&mut self, _: KeepDeleteLog, _: &mut Context<Self>) -> Self::Result {
        self.stager.deletelog.keep()
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
        self.closed.insert(msg.0);
        let generation = if !self.stager.pending.is_empty() {
            self.started_generation + 1
        } else if self.stager.committing.is_some() {
            self.started_generation
        } else {
            let count = self.count_children(msg.0);
            return Box::pin(async move { count });
        };
        let (reply, answer) = oneshot::channel();
        self.drain_waiters.push(DrainWaiter { generation, parent: msg.0, reply });
        Box::pin(async move {
            answer.await.unwrap_or_else(|_| Err(ShardError::Unavailable("shard stopped".into())))
        })
    }
}

/// Open `parent` to new children again (it is, or has become, a container).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Reopen(pub EntryId);

impl Handler<Reopen> for ShardActor {
    type Result = ();

    fn handle(&mut self, msg: Reopen, _: &mut Context<Self>) {
        self.closed.remove(&msg.0);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use ferrodir_proto::entry::{Attribute, Entry};

    use super::*;
    use crate::core::ShardInfo;
    use crate::index::config::IndexConfig;
    use crate::rules::RuleTable;
    use crate::storage::{EngineKind, KvEngine, KvSnapshot, Mutation, StorageResult};
    use ferrodir_proto::schema::Schema;

    /// Counts commits, to see that concurrent writers share them.
    struct Counting {
        inner: Box<dyn KvEngine>,
        commits: AtomicUsize,
    }

    impl KvEngine for Counting {
        fn snapshot(&self) -> StorageResult<Box<dyn KvSnapshot>> {
            self.inner.snapshot()
        }
        fn commit(&self, batch: &[Mutation]) -> StorageResult<()> {
            self.commits.fetch_add(1, Ordering::SeqCst);
            self.inner.commit(batch)
        }
    }

    /// Fails every commit while `failing` is set, as a full or read-only disk does.
    struct Failing {
        inner: Box<dyn KvEngine>,
        failing: std::sync::atomic::AtomicBool,
    }

    impl KvEngine for Failing {
        fn snapshot(&self) -> StorageResult<Box<dyn KvSnapshot>> {
            self.inner.snapshot()
        }
        fn commit(&self, batch: &[Mutation]) -> StorageResult<()> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(crate::storage::StorageError("No space left on device (os error 28)".into()));
            }
            self.inner.commit(batch)
        }
    }

    fn test_info(index: &[&str]) -> ShardInfo {
        let schema = Arc::new(Schema::standard());
        let rules = Arc::new(RuleTable::from_schema(&schema));
        let indexes = Arc::new(IndexConfig::from_directives(index, &rules).unwrap());
        ShardInfo {
            index: 0,
            count: 1,
            entry_cache: Some(Arc::new(crate::entrycache::EntryCache::new(1 << 20, rules.clone()))),
            indexes,
            schema,
            rules,
            bloom: Default::default(),
            grams: Default::default(),
            hub: crate::write::watermark::Hub::new(1, 0),
        }
    }

    fn add(name: &str, parent: EntryId) -> Write {
        Write(WriteOp::Add {
            author: "cn=test".into(),
            parent,
            rdn: format!("cn={name}"),
            rdn_norm: format!("cn={}", name.to_lowercase()),
            entry: Entry::new(vec![
                Attribute::new("objectClass", vec![b"person".to_vec()]),
                Attribute::new("cn", vec![name.as_bytes().to_vec()]),
                Attribute::new("sn", vec![b"x".to_vec()]),
            ]),
        })
    }

    #[test]
    fn group_commit_batches_and_checks_against_staged_state() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Counting {
            inner: EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap(),
            commits: AtomicUsize::new(0),
        });
        let info = test_info(&["cn eq"]);
        let system = actix::System::new();
        system.block_on(async {
            let core = Rc::new(ShardCore::new(info, engine.clone()).unwrap());
            let addr = ShardActor::new(core.clone()).unwrap().start();
            let mut pending = Vec::new();
            for i in 0..200 {
                pending.push(actix::spawn(addr.send(add(&format!("e{i}"), EntryId::ROOT))));
            }
            // The same name twice in flight: exactly one wins, judged against staged state.
            pending.push(actix::spawn(addr.send(add("e7", EntryId::ROOT))));
            let mut added = 0;
            let mut exists = 0;
            for handle in pending {
                match handle.await.unwrap().unwrap() {
                    Ok(WriteOutcome::Added(_)) => added += 1,
                    Err(ShardError::AlreadyExists) => exists += 1,
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!((added, exists), (200, 1));
            let commits = engine.commits.load(Ordering::SeqCst);
            assert!(commits < 100, "200 concurrent adds took {commits} commits");
            // Replies came after the commit: the snapshot already shows every entry.
            assert!(core.lookup_dn(EntryId::ROOT, "cn=e199").unwrap().is_some());
            let index_hits =
                core.postings(core.snapshot().as_ref(), &crate::index::keys::eq_prefix("cn", b"e5")).unwrap();
            assert_eq!(index_hits.len(), 1);
        });
    }

    /// Closed-loop writers (each waits for its answer before its next write) split into two
    /// halves that take turns when each commit starts at once; with a coalescing wait, the
    /// writers a commit answered are waited for and one commit carries them all.
    ///
    /// The coalesced run waits up to an hour: the writers never stop before the 200th add
    /// is acknowledged, so every wait must end because its writers came back, never by its
    /// timer; one that ran out would stall the run past its deadline.
    #[test]
    fn coalescing_lets_one_commit_carry_the_writers_it_waits_for() {
        const WRITERS: usize = 8;
        const ADDS: usize = 200;
        let run = |wait: Duration| {
            let dir = tempfile::tempdir().unwrap();
            let engine = Arc::new(Counting {
                inner: EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap(),
                commits: AtomicUsize::new(0),
            });
            let system = actix::System::new();
            system.block_on(async {
                let core = Rc::new(ShardCore::new(test_info(&["cn eq"]), engine.clone()).unwrap());
                let addr = ShardActor::new(core.clone()).unwrap().with_commit_coalesce(wait).start();
                let acked = Rc::new(std::cell::Cell::new(0usize));
                for w in 0..WRITERS {
                    let (addr, acked) = (addr.clone(), acked.clone());
                    actix::spawn(async move {
                        let mut i = 0;
                        while acked.get() < ADDS {
                            let outcome = addr.send(add(&format!("w{w}-{i}"), EntryId::ROOT)).await.unwrap();
                            assert!(matches!(outcome, Ok(WriteOutcome::Added(_))), "{outcome:?}");
                            acked.set(acked.get() + 1);
                            i += 1;
                        }
                    });
                }
                let all_acked = async {
                    while acked.get() < ADDS {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                };
                let finished = tokio::time::timeout(Duration::from_secs(60), all_acked).await;
                assert!(
                    finished.is_ok(),
                    "{} of {ADDS} adds acknowledged in 60 s with a {wait:?} wait: a coalescing wait ran \
                     out although its writers came back",
                    acked.get()
                );
                for w in 0..WRITERS {
                    assert!(core.lookup_dn(EntryId::ROOT, &format!("cn=w{w}-0")).unwrap().is_some());
                }
            });
            engine.commits.load(Ordering::SeqCst)
        };
        let at_once = run(Duration::ZERO);
        let coalesced = run(Duration::from_secs(3600));
        assert!(
            coalesced * 10 <= at_once * 7,
            "{ADDS} adds from {WRITERS} closed-loop writers: {coalesced} commits coalesced, {at_once} without"
        );
    }

    fn replace_sn(id: EntryId, value: &str) -> Write {
        use ferrodir_proto::ldif::{LdifMod, ModOp};
        let change =
            LdifMod { op: ModOp::Replace, attr: Attribute::new("sn", vec![value.as_bytes().to_vec()]) };
        Write(WriteOp::Modify { id, changes: vec![change], author: "cn=test".into() })
    }

    /// A failed commit fails every write of its batch and of the pending one with
    /// unavailable, naming the cause, and no read ever sees their changes: not the added
    /// entry, its name or its index keys, not the modified value.
    #[test]
    fn failed_commit_fails_the_batch_and_shows_nothing_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Failing {
            inner: EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap(),
            failing: std::sync::atomic::AtomicBool::new(false),
        });
        let system = actix::System::new();
        system.block_on(async {
            let core = Rc::new(ShardCore::new(test_info(&["cn eq", "sn eq"]), engine.clone()).unwrap());
            let addr = ShardActor::new(core.clone()).unwrap().start();
            let Ok(WriteOutcome::Added(kept)) = addr.send(add("kept", EntryId::ROOT)).await.unwrap() else {
                panic!("add failed")
            };
            // Read once so the cache holds the committed version.
            assert!(core.record(kept).unwrap().is_some());
            engine.failing.store(true, Ordering::SeqCst);
            // Several writes in flight: one committing batch, the rest pending behind it.
            let mut pending = Vec::new();
            for i in 0..20 {
                pending.push(actix::spawn(addr.send(add(&format!("lost{i}"), EntryId::ROOT))));
            }
            pending.push(actix::spawn(addr.send(replace_sn(kept, "changed"))));
            for handle in pending {
                match handle.await.unwrap().unwrap() {
                    Err(ShardError::Unavailable(message)) => {
                        assert!(message.contains("shard 0") && message.contains("No space left"), "{message}")
                    }
                    other => panic!("expected unavailable, got {other:?}"),
                }
            }
            assert_eq!(core.lookup_dn(EntryId::ROOT, "cn=lost0").unwrap(), None);
            let snapshot = core.snapshot();
            assert!(core
                .postings(snapshot.as_ref(), &crate::index::keys::eq_prefix("cn", b"lost3"))
                .unwrap()
                .is_empty());
            assert!(core
                .postings(snapshot.as_ref(), &crate::index::keys::eq_prefix("sn", b"changed"))
                .unwrap()
                .is_empty());
            let record = core.record(kept).unwrap().unwrap();
            assert_eq!(record.entry.first_str("sn"), Some("x"), "the failed modify is served");
            // Reads and later writes keep working once the disk does.
            engine.failing.store(false, Ordering::SeqCst);
            assert!(matches!(
                addr.send(add("lost0", EntryId::ROOT)).await.unwrap(),
                Ok(WriteOutcome::Added(_))
            ));
        });
    }

    /// With the changelog on, each client change leaves one record in its own commit,
    /// numbered by its CSN tick and read back through the actor's message; a failed
    /// commit's records never show; the hub publishes the committed bounds.
    #[test]
    fn changes_are_recorded_in_the_changelog_in_their_commit() {
        use crate::write::changelog::{ChangeKind, ChangelogSettings};
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Failing {
            inner: EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap(),
            failing: std::sync::atomic::AtomicBool::new(false),
        });
        let system = actix::System::new();
        system.block_on(async {
            let core = Rc::new(ShardCore::new(test_info(&[]), engine.clone()).unwrap());
            let settings = ChangelogSettings::new(100, 0, None);
            let addr = ShardActor::new(core.clone()).unwrap().with_changelog(settings).start();
            let all = || ReadChangelog { after: 0, upto: u64::MAX, max: 100 };
            let Ok(WriteOutcome::Added(id)) = addr.send(add("a", EntryId::ROOT)).await.unwrap() else {
                panic!("add failed")
            };
            let Write(modify) = replace_sn(id, "changed");
            let Ok(WriteOutcome::Record(record)) = addr.send(Write(modify)).await.unwrap() else {
                panic!("modify failed")
            };
            let log = addr.send(all()).await.unwrap().unwrap();
            let kinds: Vec<_> =
                log.iter().map(|r| (r.kind, r.target_dn.as_str(), r.author.as_str())).collect();
            assert_eq!(
                kinds,
                [(ChangeKind::Add, "cn=a", "cn=test"), (ChangeKind::Modify, "cn=a", "cn=test")]
            );
            let stamped =
                crate::write::stamp::micros_of_csn(record.entry.first_str("entryCSN").unwrap()).unwrap();
            assert_eq!(log[1].number, stamped, "the changeNumber is the change's CSN tick");
            assert_eq!(String::from_utf8_lossy(&log[1].changes), "replace: sn\nsn: changed\n-\n");
            assert_eq!(core.info.hub.changelog_bounds(), (log[0].number, log[1].number));
            engine.failing.store(true, Ordering::SeqCst);
            let delete = WriteOp::Delete { id, author: "cn=test".into() };
            assert!(addr.send(Write(delete.clone())).await.unwrap().is_err());
            engine.failing.store(false, Ordering::SeqCst);
            assert_eq!(addr.send(all()).await.unwrap().unwrap().len(), 2, "a failed commit records nothing");
            addr.send(Write(delete)).await.unwrap().unwrap();
            let log = addr.send(all()).await.unwrap().unwrap();
            assert_eq!(log.last().map(|r| r.kind), Some(ChangeKind::Delete));
            // The replication consumer's changes are its provider's: not recorded.
            let Ok(WriteOutcome::Added(b)) = addr.send(add("b", EntryId::ROOT)).await.unwrap() else {
                panic!("add failed")
            };
            let replicated = WriteOp::Delete { id: b, author: crate::write::batch::REPLICA_AUTHOR.into() };
            addr.send(Write(replicated)).await.unwrap().unwrap();
            assert_eq!(addr.send(all()).await.unwrap().unwrap().len(), 4);
        });
    }

    /// A delete and a Modify DN each leave a delete-log record, committed with them (read
    /// back through the actor's message), once the log is kept (before, a delete only
    /// raises the minimum); a failed commit's records never show.
    #[test]
    fn deletes_and_moves_are_logged_in_their_commit() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Failing {
            inner: EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap(),
            failing: std::sync::atomic::AtomicBool::new(false),
        });
        let system = actix::System::new();
        system.block_on(async {
            let core = Rc::new(ShardCore::new(test_info(&[]), engine.clone()).unwrap());
            let addr = ShardActor::new(core.clone()).unwrap().start();
            let mut ids = Vec::new();
            for name in ["z", "a", "b", "c"] {
                let Ok(WriteOutcome::Added(id)) = addr.send(add(name, EntryId::ROOT)).await.unwrap() else {
                    panic!("add failed")
                };
                ids.push(id);
            }
            let unkept = ids.remove(0);
            let before = addr.send(ReadDeleteLog { after: 0 }).await.unwrap().unwrap();
            assert!(before.records.is_empty());
            // No sync search yet: a delete leaves no record, and the minimum passes it.
            addr.send(Write(WriteOp::Delete { id: unkept, author: "cn=test".into() }))
                .await
                .unwrap()
                .unwrap();
            let unlogged = addr.send(ReadDeleteLog { after: 0 }).await.unwrap().unwrap();
            assert!(unlogged.records.is_empty());
            assert!(unlogged.min > before.min, "{} after {}", unlogged.min, before.min);
            assert!(!crate::write::deletelog::DeleteLog::load(core.snapshot().as_ref()).unwrap().is_kept());
            assert!(addr.send(KeepDeleteLog).await.unwrap(), "not kept before");
            assert!(!addr.send(KeepDeleteLog).await.unwrap(), "kept once asked");
            let uuid_of = |id: EntryId| {
                let record = core.record(id).unwrap().unwrap();
                crate::write::stamp::uuid_octets(record.entry.first_str("entryUUID").unwrap().as_bytes())
                    .unwrap()
            };
            let (uuid_a, uuid_b) = (uuid_of(ids[0]), uuid_of(ids[1]));
            addr.send(Write(WriteOp::Delete { id: ids[0], author: "cn=test".into() }))
                .await
                .unwrap()
                .unwrap();
            let relocate = WriteOp::Relocate {
                id: ids[1],
                parent: EntryId::ROOT,
                rdn: "cn=b2".into(),
                rdn_norm: "cn=b2".into(),
                drop_values: Vec::new(),
                add_values: vec![("cn".into(), b"b2".to_vec())],
                author: "cn=test".into(),
                delete_old_rdn: false,
            };
            let Ok(WriteOutcome::Record(moved)) = addr.send(Write(relocate)).await.unwrap() else {
                panic!("relocate failed")
            };
            let log = addr.send(ReadDeleteLog { after: 0 }).await.unwrap().unwrap();
            let got: Vec<_> = log.records.iter().map(|r| (r.uuid, r.deleted, r.old_dn.as_str())).collect();
            assert_eq!(got, [(uuid_a, true, "cn=a"), (uuid_b, false, "cn=b")]);
            // The move's record carries the CSN the entry was stamped with.
            let stamped =
                crate::write::stamp::micros_of_csn(moved.entry.first_str("entryCSN").unwrap()).unwrap();
            assert_eq!(log.records[1].csn, stamped);
            assert_eq!(addr.send(ReadDeleteLog { after: stamped }).await.unwrap().unwrap().records.len(), 0);
            // A failed commit: its delete's record never shows, and the log goes on after it.
            engine.failing.store(true, Ordering::SeqCst);
            assert!(addr
                .send(Write(WriteOp::Delete { id: ids[2], author: "cn=test".into() }))
                .await
                .unwrap()
                .is_err());
            engine.failing.store(false, Ordering::SeqCst);
            assert_eq!(addr.send(ReadDeleteLog { after: 0 }).await.unwrap().unwrap().records.len(), 2);
            addr.send(Write(WriteOp::Delete { id: ids[2], author: "cn=test".into() }))
                .await
                .unwrap()
                .unwrap();
            let last = addr.send(ReadDeleteLog { after: 0 }).await.unwrap().unwrap();
            assert_eq!((last.records.len(), last.min), (3, unlogged.min));
            // A restart keeps logging: the mark is stored.
            assert!(crate::write::deletelog::DeleteLog::load(core.snapshot().as_ref()).unwrap().is_kept());
        });
    }

    /// A router's write (`Stage`, by `try_send`) is answered on its own channel once its
    /// batch is durable, and a failure comes back the same way.
    #[test]
    fn a_staged_write_answers_on_its_own_channel() {
        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn KvEngine> =
            Arc::from(EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap());
        let system = actix::System::new();
        system.block_on(async {
            let core = Rc::new(ShardCore::new(test_info(&["cn eq"]), engine).unwrap());
            let addr = ShardActor::new(core.clone()).unwrap().start();
            let stage = |op: WriteOp| {
                let (reply, answer) = oneshot::channel();
                addr.try_send(Stage { op, reply }).unwrap();
                answer
            };
            let Write(op) = add("s", EntryId::ROOT);
            let Ok(WriteOutcome::Added(id)) = stage(op.clone()).await.unwrap() else { panic!("add failed") };
            // Answered after the commit: the snapshot shows it.
            assert!(core.record(id).unwrap().is_some());
            assert!(matches!(stage(op).await.unwrap(), Err(ShardError::AlreadyExists)));
            let Write(modify) = replace_sn(id, "changed");
            let Ok(WriteOutcome::Record(record)) = stage(modify).await.unwrap() else {
                panic!("modify failed")
            };
            assert_eq!(record.entry.first_str("sn"), Some("changed"));
            assert_eq!(core.record(id).unwrap().unwrap().entry.first_str("sn"), Some("changed"));
        });
    }

    /// Adds a description value numbered after those the staged entry has, or nothing once
    /// there are `up_to`: what each of many updates sent at once sees is the state the
    /// earlier ones left.
    #[derive(Debug)]
    struct Count {
        up_to: usize,
    }

    impl crate::write::update::EntryUpdate for Count {
        fn changes(&self, entry: &Entry) -> Option<Vec<ferrodir_proto::ldif::LdifMod>> {
            let have = entry.get("description").map_or(0, |a| a.values.len());
            (have < self.up_to).then(|| {
                vec![ferrodir_proto::ldif::LdifMod {
                    op: ferrodir_proto::ldif::ModOp::Add,
                    attr: Attribute::new("description", vec![format!("n{have}").into_bytes()]),
                }]
            })
        }
    }

    #[test]
    fn updates_sent_at_once_each_see_the_ones_staged_before() {
        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn KvEngine> =
            Arc::from(EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap());
        let system = actix::System::new();
        system.block_on(async {
            let core = Rc::new(ShardCore::new(test_info(&[]), engine).unwrap());
            let addr = ShardActor::new(core.clone()).unwrap().start();
            let Ok(WriteOutcome::Added(id)) = addr.send(add("u", EntryId::ROOT)).await.unwrap() else {
                panic!("add failed")
            };
            let csn_before = core.record(id).unwrap().unwrap().entry.first_str("entryCSN").map(str::to_owned);
            let update: Arc<dyn crate::write::update::EntryUpdate> = Arc::new(Count { up_to: 8 });
            let pending: Vec<_> = (0..10)
                .map(|_| {
                    let op = WriteOp::Update { id, update: update.clone(), author: "cn=policy".into() };
                    actix::spawn(addr.send(Write(op)))
                })
                .collect();
            for handle in pending {
                assert!(matches!(handle.await.unwrap().unwrap(), Ok(WriteOutcome::Record(_))));
            }
            let record = core.record(id).unwrap().unwrap();
            let values: Vec<&[u8]> =
                record.entry.get("description").unwrap().values.iter().map(|v| &v[..]).collect();
            let expected: Vec<Vec<u8>> = (0..8).map(|i| format!("n{i}").into_bytes()).collect();
            assert_eq!(values, expected.iter().map(|v| &v[..]).collect::<Vec<_>>(), "none lost, none past 8");
            // Stamped like any change, so that it replicates.
            assert_eq!(record.entry.first_str("modifiersName"), Some("cn=policy"));
            assert_ne!(record.entry.first_str("entryCSN").map(str::to_owned), csn_before);
        });
    }

    #[test]
    fn closed_parent_refuses_children_and_containers_refuse_delete() {
        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn KvEngine> =
            Arc::from(EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap());
        let info = test_info(&[]);
        let system = actix::System::new();
        system.block_on(async {
            let core = Rc::new(ShardCore::new(info, engine).unwrap());
            let addr = ShardActor::new(core).unwrap().start();
            let Ok(WriteOutcome::Added(parent)) = addr.send(add("p", EntryId::ROOT)).await.unwrap() else {
                panic!("add failed")
            };
            assert_eq!(addr.send(CloseAndCount(parent)).await.unwrap().unwrap(), 0);
            assert!(matches!(addr.send(add("c", parent)).await.unwrap(), Err(ShardError::ParentClosed)));
            addr.send(Reopen(parent)).await.unwrap();
            assert!(matches!(addr.send(add("c", parent)).await.unwrap(), Ok(WriteOutcome::Added(_))));
            assert_eq!(addr.send(CloseAndCount(parent)).await.unwrap().unwrap(), 1);
            let promote = WriteOp::SetContainer { id: parent, container: true };
            addr.send(Write(promote)).await.unwrap().unwrap();
            let delete =
                addr.send(Write(WriteOp::Delete { id: parent, author: "cn=test".into() })).await.unwrap();
            assert!(matches!(delete, Err(ShardError::NotAllowedOnNonLeaf)));
        });
    }

    /// The replication consumer's writes: the provider's stamps are stored as sent (an add
    /// and a full replace, which removes what the new entry lacks), a metadata value commits.
    #[test]
    fn replica_writes_keep_the_providers_stamps() {
        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn KvEngine> =
            Arc::from(EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap());
        let system = actix::System::new();
        system.block_on(async {
            let core = Rc::new(ShardCore::new(test_info(&[]), engine).unwrap());
            let addr = ShardActor::new(core.clone()).unwrap().start();
            let stamped = |csn: &str, extra: Option<&str>| {
                let mut attrs = vec![
                    Attribute::new("objectClass", vec![b"person".to_vec()]),
                    Attribute::new("cn", vec![b"r".to_vec()]),
                    Attribute::new("sn", vec![b"x".to_vec()]),
                    Attribute::new("entryUUID", vec![b"0f2b9a3e-4c1d-4e5f-8a9b-0c1d2e3f4a5b".to_vec()]),
                    Attribute::new("entryCSN", vec![csn.as_bytes().to_vec()]),
                    Attribute::new("creatorsName", vec![b"cn=provider".to_vec()]),
                    Attribute::new("createTimestamp", vec![b"20200101000000Z".to_vec()]),
                    Attribute::new("modifiersName", vec![b"cn=provider".to_vec()]),
                    Attribute::new("modifyTimestamp", vec![b"20200101000000Z".to_vec()]),
                ];
                if let Some(value) = extra {
                    attrs.push(Attribute::new("description", vec![value.as_bytes().to_vec()]));
                }
                Entry::new(attrs)
            };
            let csn = "20200101000000.000001Z#000000#00a#000000";
            let op = WriteOp::ReplicaAdd {
                parent: EntryId::ROOT,
                rdn: "cn=r".into(),
                rdn_norm: "cn=r".into(),
                entry: stamped(csn, Some("gone later")),
            };
            let Ok(WriteOutcome::Added(id)) = addr.send(Write(op)).await.unwrap() else { panic!("add") };
            let record = core.record(id).unwrap().unwrap();
            assert_eq!(record.entry.first_str("entryCSN"), Some(csn));
            assert_eq!(record.entry.first_str("creatorsName"), Some("cn=provider"));
            assert_eq!(record.entry.first_str("entryUUID"), Some("0f2b9a3e-4c1d-4e5f-8a9b-0c1d2e3f4a5b"));
            let later = "20200101000000.000002Z#000000#00a#000000";
            let replace = WriteOp::ReplicaReplace { id, entry: stamped(later, None) };
            addr.send(Write(replace)).await.unwrap().unwrap();
            let record = core.record(id).unwrap().unwrap();
            assert_eq!(record.entry.first_str("entryCSN"), Some(later));
            assert!(record.entry.get("description").is_none(), "a replace keeps what the provider dropped");
            assert_eq!(record.entry.first_str("structuralObjectClass"), Some("person"));
            // A checked replace is judged on the entry as staged: a mesh consumer's "only
            // if still older than mine" fails when a newer write came in between.
            #[derive(Debug)]
            struct OlderThan(&'static str);
            impl crate::write::update::EntryCheck for OlderThan {
                fn holds(&self, _: EntryId, record: &EntryRecord) -> bool {
                    record.entry.first_str("entryCSN").is_none_or(|csn| csn < self.0)
                }
            }
            let stale = "20200101000000.000001Z#000000#00b#000000";
            let check: Option<Arc<dyn crate::write::update::EntryCheck>> = Some(Arc::new(OlderThan(stale)));
            let op = WriteOp::ReplicaReplace { id, entry: stamped(stale, Some("stale")) };
            let checked = WriteOp::Checked(Box::new(crate::write::batch::CheckedWrite { op, check }));
            assert!(matches!(addr.send(Write(checked)).await.unwrap(), Err(ShardError::AssertionFailed)));
            assert_eq!(core.record(id).unwrap().unwrap().entry.first_str("entryCSN"), Some(later));
            let newer = "20200101000000.000003Z#000000#00b#000000";
            let check: Option<Arc<dyn crate::write::update::EntryCheck>> = Some(Arc::new(OlderThan(newer)));
            let op = WriteOp::ReplicaReplace { id, entry: stamped(newer, None) };
            addr.send(Write(WriteOp::Checked(Box::new(crate::write::batch::CheckedWrite { op, check }))))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(core.record(id).unwrap().unwrap().entry.first_str("entryCSN"), Some(newer));
            let meta = WriteOp::PutMeta { name: "replication.cookie.001".into(), value: b"rid=001".to_vec() };
            addr.send(Write(meta)).await.unwrap().unwrap();
            let stored = core.snapshot().get(&crate::index::keys::meta("replication.cookie.001")).unwrap();
            assert_eq!(stored.as_deref(), Some(&b"rid=001"[..]));
        });
    }
}
