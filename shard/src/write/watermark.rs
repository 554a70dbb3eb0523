//! What the shards of one directory share about their writes, in one value made when the
//! directory is opened and handed to every shard (`ShardInfo::hub`): the CSN clock
//! (`clock.rs`), the committed low-watermark across shards (contextCSN, RFC 4533's provider
//! state), the bounded feed of committed changes that persist searches follow, and on a
//! replica the provider's contextCSN.
//!
//! Each shard publishes two numbers, each written by its own actor only (no counter every
//! core writes, and nothing on the read path):
//! - `floor`: a lower bound of every CSN the shard has staged but not yet committed (the
//!   clock's value + 1 when the first write of an idle shard is staged, before it takes its
//!   CSN), `u64::MAX` when nothing is pending;
//! - `committed`: the highest CSN the shard has committed and made visible.
//!
//! The watermark is `min(max committed, min floor - 1)`: read the committed values first,
//! then the floors, all SeqCst. A CSN `t` below a committed `s` was taken before `s` (the
//! clock is one total order); its shard stored its floor before taking it, so a reader that
//! sees `s` sees that floor too, or a later one set only after `t` was committed. So no CSN
//! at or below the watermark is still pending anywhere, and an idle shard (floor MAX)
//! never holds it back.
//!
//! The feed: a persist search subscribes with a bounded channel; each committed batch's
//! changes go to every subscriber with `try_send`. A subscriber whose channel is full is
//! dropped (its flag raised, its sender removed): a slow consumer never slows a commit.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::entry::record::EntryRecord;
use crate::id::EntryId;
use crate::write::clock::Clock;

/// One shard's published state.
#[derive(Debug)]
pub struct ShardMark {
    floor: AtomicU64,
    committed: AtomicU64,
    /// The highest CSN the shard committed that it stamped itself (not a replicated one).
    own_committed: AtomicU64,
    /// Batches the shard has made visible, CSN or not (a container flag, a DN record):
    /// what a cache of name resolutions is checked against ([`Hub::publications`]).
    published: AtomicU64,
    /// The shard's oldest and newest committed changelog records (`changelog`; 0: none).
    changelog_first: AtomicU64,
    changelog_last: AtomicU64,
}

impl Default for ShardMark {
    fn default() -> Self {
        Self {
            floor: AtomicU64::new(u64::MAX),
            committed: AtomicU64::new(0),
            own_committed: AtomicU64::new(0),
            published: AtomicU64::new(0),
            changelog_first: AtomicU64::new(0),
            changelog_last: AtomicU64::new(0),
        }
    }
}

/// One committed change of an entry: its record before and after (None: absent), and the
/// clock tick of a delete's or a move's own CSN (0 for others: the entry's entryCSN says).
#[derive(Debug, Clone)]
pub struct Change {
    pub id: EntryId,
    pub old: Option<Arc<EntryRecord>>,
    pub new: Option<Arc<EntryRecord>>,
    pub csn: u64,
}

/// What one shard's committed batch changed.
#[derive(Debug)]
pub struct FeedBatch {
    pub shard: usize,
    /// The highest CSN the batch took.
    pub csn_max: u64,
    pub changes: Vec<Change>,
}

/// A persist search's subscription: dropped (the flag raised) when it fell behind.
pub struct Subscription {
    pub batches: mpsc::Receiver<Arc<FeedBatch>>,
    pub dropped: Arc<AtomicBool>,
    id: u64,
    hub: Arc<Hub>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.unsubscribe(self.id);
    }
}

struct Subscriber {
    id: u64,
    sink: mpsc::Sender<Arc<FeedBatch>>,
    dropped: Arc<AtomicBool>,
}

pub struct Hub {
    clock: Clock,
    marks: Vec<ShardMark>,
    subscribers: Mutex<Vec<Subscriber>>,
    /// How many subscribers there are: a shard with none takes no lock.
    count: AtomicUsize,
    next_id: AtomicU64,
    /// On a replica (a replication consumer, server/src/replication): the provider's
    /// contextCSN values, those of the last cookie committed with its data. The suffix entry
    /// publishes them instead of the local watermark, and this server's own provider hands
    /// them on in its cookies, so that a chain provider → replica → replica compares one set
    /// of CSNs. Empty: not a replica (or no cookie committed yet).
    replicated: Mutex<Vec<String>>,
    /// One provider of a mesh (`multi_provider`): contextCSN is a vector, this server's own
    /// watermark beside the newest CSN of every other server id its consumers committed.
    multi_provider: AtomicBool,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("shards", &self.marks.len())
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// The hub of a directory of `shards` shards whose CSNs carry `server_id`; made before
    /// any shard starts.
    pub fn new(shards: usize, server_id: u32) -> Arc<Self> {
        Arc::new(Self {
            clock: Clock::new(server_id),
            marks: (0..shards).map(|_| ShardMark::default()).collect(),
            subscribers: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            replicated: Mutex::new(Vec::new()),
            multi_provider: AtomicBool::new(false),
        })
    }

    /// Makes this directory one provider of a mesh (set once, at start).
    pub fn set_multi_provider(&self, on: bool) {
        self.multi_provider.store(on, Ordering::SeqCst);
    }

    pub fn multi_provider(&self) -> bool {
        self.multi_provider.load(Ordering::Relaxed)
    }

    /// A mesh consumer's cookie is durable: each of its CSNs raises that server id's value,
    /// none lowers one (several consumers commit cookies in any order).
    pub fn merge_replicated_context(&self, csns: &[String]) {
        let mut held = self.replicated.lock().unwrap_or_else(|p| p.into_inner());
        for csn in csns {
            let sid = ferrodir_proto::message::sync::csn_sid(csn);
            match held.iter_mut().find(|c| ferrodir_proto::message::sync::csn_sid(c) == sid) {
                Some(old) if old.as_str() < csn.as_str() => *old = csn.clone(),
                Some(_) => {}
                None => held.push(csn.clone()),
            }
        }
        held.sort_by_key(|c| ferrodir_proto::message::sync::csn_sid(c));
    }

    /// The directory's CSN clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The replication consumer, after a cookie is durable: its CSNs are the contextCSN now.
    pub fn set_replicated_context(&self, csns: Vec<String>) {
        *self.replicated.lock().unwrap_or_else(|p| p.into_inner()) = csns;
    }

    /// The provider's contextCSN values a replica holds (empty: none).
    pub fn replicated_context(&self) -> Vec<String> {
        self.replicated.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// contextCSN as the suffix entry publishes it: a replica's provider values, or the
    /// committed watermark as a CSN (nothing before the first write).
    pub fn context_csns(&self) -> Vec<String> {
        let mut csns = self.replicated_context();
        if self.multi_provider() {
            // Ours from the watermark, never from a peer's cookie (it can only lag).
            let sid = self.clock.server_id();
            csns.retain(|c| ferrodir_proto::message::sync::csn_sid(c) != Some(sid));
            let micros = self.own_watermark();
            if micros > 0 {
                csns.push(self.clock.csn_of(micros));
            }
            // Before the node's first write: no value of its own (a consumer's cookie keeps
            // whatever it had).
            csns.sort_by_key(|c| ferrodir_proto::message::sync::csn_sid(c));
            return csns;
        }
        if csns.is_empty() {
            let micros = self.watermark();
            if micros > 0 {
                csns.push(self.clock.csn_of(micros));
            }
        }
        csns
    }

    fn mark(&self, shard: usize) -> Option<&ShardMark> {
        self.marks.get(shard)
    }

    /// A shard stored `micros` as its highest committed CSN before a restart.
    pub fn restore(&self, shard: usize, micros: u64) {
        if let Some(mark) = self.mark(shard) {
            mark.committed.fetch_max(micros, Ordering::SeqCst);
        }
        self.clock.seed(micros);
    }

    /// The shard's actor: nothing was pending and a write is about to take its CSN.
    pub fn set_floor(&self, shard: usize, floor: u64) {
        if let Some(mark) = self.mark(shard) {
            mark.floor.store(floor, Ordering::SeqCst);
        }
    }

    /// The shard's actor, before `committed`: the highest CSN of the batch it stamped itself.
    pub fn own_committed(&self, shard: usize, micros: u64) {
        if let Some(mark) = self.mark(shard) {
            if micros > 0 {
                mark.own_committed.fetch_max(micros, Ordering::SeqCst);
            }
        }
    }

    /// The shard's actor: a batch is committed and visible; `next_floor` is the floor of
    /// the batch still gathering (MAX: none).
    pub fn committed(&self, shard: usize, csn_max: u64, next_floor: u64) {
        if let Some(mark) = self.mark(shard) {
            if csn_max > 0 {
                mark.committed.fetch_max(csn_max, Ordering::SeqCst);
            }
            mark.floor.store(next_floor, Ordering::SeqCst);
            // After the commit is visible: whoever reads the new count reads the new data.
            mark.published.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// How many batches every shard together has made visible: it moves with every write
    /// that lands anywhere. Read before reading the data a cache is filled from, a cache
    /// filled under one count is good while the count stays the same.
    pub fn publications(&self) -> u64 {
        self.marks.iter().map(|m| m.published.load(Ordering::SeqCst)).sum()
    }

    /// The shard's actor, after a commit (or at start): its oldest and newest committed
    /// changelog records (0, 0: none).
    pub fn set_changelog(&self, shard: usize, first: u64, last: u64) {
        if let Some(mark) = self.mark(shard) {
            mark.changelog_first.store(first, Ordering::SeqCst);
            mark.changelog_last.store(last, Ordering::SeqCst);
        }
    }

    /// The changelog's firstChangeNumber and lastChangeNumber as the root DSE shows them
    /// (0, 0: empty): the oldest record any shard holds, and the newest at or below the
    /// watermark (a shard whose newest record is above it contributes none: a lower bound,
    /// never a number a later commit could undercut).
    pub fn changelog_bounds(&self) -> (u64, u64) {
        let watermark = self.watermark();
        let (mut first, mut last) = (u64::MAX, 0);
        for mark in &self.marks {
            let shard_first = mark.changelog_first.load(Ordering::SeqCst);
            let shard_last = mark.changelog_last.load(Ordering::SeqCst);
            if shard_first == 0 || shard_last == 0 || shard_first > watermark {
                continue;
            }
            first = first.min(shard_first);
            if shard_last <= watermark {
                last = last.max(shard_last);
            }
        }
        if first == u64::MAX {
            (0, 0)
        } else {
            (first, last.max(first))
        }
    }

    /// The watermark of this server id's own changes: the highest CSN a shard stamped
    /// itself and committed, bounded by what is still pending as `watermark` is. On a mesh
    /// node it is the contextCSN of its own server id: the plain watermark also counts the
    /// replicated entries' CSNs (they raise the clock), and a slapd peer, whose present phase
    /// deletes what it was not shown up to the largest CSN of the cookie, would take a
    /// value that runs ahead of the entries this node holds for a promise it can't keep.
    /// Kept across restarts (each shard stores its own highest, `own_csn_max`); 0 before
    /// the node's first write.
    pub fn own_watermark(&self) -> u64 {
        let own = self.marks.iter().map(|m| m.own_committed.load(Ordering::SeqCst)).max().unwrap_or(0);
        let floor = self.marks.iter().map(|m| m.floor.load(Ordering::SeqCst)).min().unwrap_or(u64::MAX);
        own.min(floor.saturating_sub(1))
    }

    /// The committed low-watermark (a clock tick; 0 when nothing was ever committed).
    pub fn watermark(&self) -> u64 {
        let committed = self.marks.iter().map(|m| m.committed.load(Ordering::SeqCst)).max().unwrap_or(0);
        let floor = self.marks.iter().map(|m| m.floor.load(Ordering::SeqCst)).min().unwrap_or(u64::MAX);
        committed.min(floor.saturating_sub(1))
    }

    /// Whether no shard still has a CSN at or below `micros` staged and not yet committed
    /// and fed (every floor is above it). A shard sets its floor before its next write
    /// takes a CSN and moves it only after that batch is fed and committed.
    pub fn settled_past(&self, micros: u64) -> bool {
        self.marks.iter().all(|m| m.floor.load(Ordering::SeqCst) > micros)
    }

    /// Follows every shard's committed changes through a channel of `capacity` batches.
    pub fn subscribe(self: &Arc<Self>, capacity: usize) -> Subscription {
        let (sink, batches) = mpsc::channel(capacity.max(1));
        let dropped = Arc::new(AtomicBool::new(false));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subscribers.push(Subscriber { id, sink, dropped: dropped.clone() });
        self.count.store(subscribers.len(), Ordering::SeqCst);
        Subscription { batches, dropped, id, hub: self.clone() }
    }

    fn unsubscribe(&self, id: u64) {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subscribers.retain(|s| s.id != id);
        self.count.store(subscribers.len(), Ordering::SeqCst);
    }

    /// Whether anyone follows the feed (a shard with no follower keeps no change list).
    pub fn followed(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// The shard's actor, after `committed`: hands the batch to every subscriber without
    /// waiting; a full subscriber is dropped.
    pub fn feed(&self, batch: FeedBatch) {
        if batch.changes.is_empty() || !self.followed() {
            return;
        }
        let batch = Arc::new(batch);
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subscribers.retain(|s| match s.sink.try_send(batch.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                s.dropped.store(true, Ordering::SeqCst);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
        self.count.store(subscribers.len(), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub_of(shards: usize) -> Arc<Hub> {
        Hub::new(shards, 0)
    }

    #[test]
    fn settled_past_waits_for_every_staged_csn_at_or_below() {
        let hub = hub_of(2);
        assert!(hub.settled_past(1_000), "nothing pending anywhere");
        hub.set_floor(0, 100);
        assert!(hub.settled_past(99));
        assert!(!hub.settled_past(100), "shard 0 may still commit 100");
        hub.committed(0, 105, u64::MAX);
        hub.set_floor(1, 110);
        assert!(hub.settled_past(109) && !hub.settled_past(110));
        hub.committed(1, 111, 112);
        assert!(!hub.settled_past(112), "the batch gathering after the commit holds 112");
        hub.committed(1, 112, u64::MAX);
        assert!(hub.settled_past(u64::MAX - 1));
    }

    #[test]
    fn pending_writes_hold_the_watermark_and_idle_shards_do_not() {
        let hub = hub_of(3);
        assert_eq!(hub.watermark(), 0);
        hub.set_floor(0, 100);
        hub.committed(0, 105, u64::MAX);
        // Shard 1 staged a write at 110 and hasn't committed; shard 2 committed 120.
        hub.set_floor(1, 110);
        hub.committed(2, 120, u64::MAX);
        assert_eq!(hub.watermark(), 109);
        hub.committed(1, 111, u64::MAX);
        assert_eq!(hub.watermark(), 120);
        // Shard 0 has a next batch pending.
        hub.committed(0, 0, 130);
        assert_eq!(hub.watermark(), 120);
    }

    #[test]
    fn changelog_bounds_show_only_records_under_the_watermark() {
        let hub = hub_of(2);
        assert_eq!(hub.changelog_bounds(), (0, 0), "empty");
        hub.committed(0, 120, u64::MAX);
        hub.set_changelog(0, 100, 120);
        assert_eq!(hub.changelog_bounds(), (100, 120));
        // Shard 1 has a write at 125 pending and committed a record at 130 before it: 130
        // stays hidden until 125 commits, since a poller could skip 125 otherwise.
        hub.set_floor(1, 125);
        hub.committed(1, 130, 125);
        hub.set_changelog(1, 110, 130);
        assert_eq!(hub.watermark(), 124);
        assert_eq!(hub.changelog_bounds(), (100, 120));
        hub.committed(1, 131, u64::MAX);
        assert_eq!(hub.changelog_bounds(), (100, 130));
    }

    #[test]
    fn a_full_subscriber_is_dropped() {
        let hub = hub_of(1);
        let sub = hub.subscribe(1);
        let batch = || FeedBatch {
            shard: 0,
            csn_max: 1,
            changes: vec![Change { id: EntryId(1), old: None, new: None, csn: 0 }],
        };
        hub.feed(batch());
        assert!(!sub.dropped.load(Ordering::SeqCst));
        hub.feed(batch());
        assert!(sub.dropped.load(Ordering::SeqCst));
        assert!(!hub.followed());
    }
}
