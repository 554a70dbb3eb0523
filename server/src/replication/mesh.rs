//! What a consumer needs when this node is one provider of a mesh (`multi_provider`):
//! clients and the consumers of the other peers write the same subtree as this consumer,
//! so its map of uuids can't be its own record of what it applied, and the conflicts
//! between concurrent writes on different nodes must resolve the same way everywhere.
//!
//! - [`LocalFeed`]: the map of uuids follows every committed write of this node, through
//!   the shards' change feed (`shard::watermark`), subscribed before the map is first read:
//!   an entry a client added here, or another consumer applied, is known by its uuid, so a
//!   remote rename of it renames it and never adds a copy. A feed that overflowed (this
//!   consumer busy while clients wrote thousands of batches) rebuilds the map from the
//!   shards.
//! - [`SharedTombstones`]: the uuids deleted here (from the feed, and at start from the delete
//!   logs), so that a change of an entry that arrives after its delete is dropped: the
//!   delete wins, whichever order the two reach a node in.
//! - [`Conflict`]: the kinds `ferrodir_replication_conflicts_total{kind}` counts.
//!
//! The rules themselves (docs/OPERATIONS.md, "Multi-provider replication") are applied in
//! `apply`: the larger entryCSN wins an entry (its attributes, its DN); of two entries
//! added under one DN on two nodes, the one with the larger entryCSN stays; a delete wins
//! over a concurrent change; an entry whose parent is gone gets a glue parent.

use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

use ferrodir_proto::NormDn;
use ferrodir_router::Worker;
use ferrodir_shard::{EntryId, EntryRecord, ShardCore, Subscription};

/// An entry's uuid (entryUUID's 16 octets).
pub type Uuid = [u8; 16];

/// Committed batches the local feed may hold before it overflows (the map is rebuilt then).
const FEED_BATCHES: usize = 16_384;
/// Deleted uuids remembered by default (`[limits] sync_delete_log_max`'s default, slapd's
/// sessionlog's); the oldest are forgotten first.
pub const TOMBSTONES_MAX: usize = 100_000;

/// `ferrodir_replication_conflicts_total{kind}`'s kinds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// A change lost to a concurrent change of the same entry with a larger entryCSN.
    Modify = 0,
    /// Two entries added under one DN on two nodes: the one with the smaller entryCSN lost.
    Add = 1,
    /// A change of an entry deleted on another node (the delete won).
    Delete = 2,
    /// A rename lost to a concurrent change of the same entry with a larger entryCSN.
    Rename = 3,
    /// An entry arrived whose parent was deleted here: a glue parent was made for it.
    Glue = 4,
}

pub const CONFLICT_NAMES: [&str; 5] = ["modify", "add", "delete", "rename", "glue"];

impl Conflict {
    pub fn name(self) -> &'static str {
        CONFLICT_NAMES.get(self as usize).copied().unwrap_or("other")
    }
}

/// The node's tombstones, one set shared by every consumer of the node: the uuids deleted
/// here (from the change feed, and at start from the delete logs), and those whose delete
/// reached a consumer before their entry did (a node adds and deletes an entry; its delete
/// comes here by one path while the add is still on its way by another: nothing was deleted
/// here, so the feed has no record of it). Either way a later change of the uuid is dropped:
/// the delete wins. In memory only: after a restart the delete logs, and the providers'
/// refreshes for early deletes, answer for them.
#[derive(Clone, Default)]
pub struct SharedTombstones(std::sync::Arc<std::sync::Mutex<Tombstones>>);

impl SharedTombstones {
    /// A set that remembers at most `max` uuids (`[limits] sync_delete_log_max`: a delete
    /// older than the delete logs reach is out of a peer's delete phase too).
    pub fn with_max(max: usize) -> Self {
        Self(std::sync::Arc::new(std::sync::Mutex::new(Tombstones { max, ..Tombstones::default() })))
    }

    pub fn insert(&self, uuid: Uuid) {
        if let Ok(mut set) = self.0.lock() {
            set.insert(uuid);
        }
    }

    pub fn contains(&self, uuid: &Uuid) -> bool {
        self.0.lock().is_ok_and(|set| set.contains(uuid))
    }
}

/// The uuids deleted on this node, at most `max` ([`TOMBSTONES_MAX`] by default), oldest
/// forgotten first.
pub struct Tombstones {
    set: HashSet<Uuid>,
    order: VecDeque<Uuid>,
    max: usize,
}

impl Default for Tombstones {
    fn default() -> Self {
        Self { set: HashSet::new(), order: VecDeque::new(), max: TOMBSTONES_MAX }
    }
}

impl Tombstones {
    pub fn insert(&mut self, uuid: Uuid) {
        if !self.set.insert(uuid) {
            return;
        }
        self.order.push_back(uuid);
        while self.order.len() > self.max {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    pub fn contains(&self, uuid: &Uuid) -> bool {
        self.set.contains(uuid)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.order.len()
    }
}

/// This node's committed writes, as they reach the uuid map.
pub struct LocalFeed {
    feed: Subscription,
    /// Read views of every shard, for a rebuild after an overflow.
    views: Vec<Rc<ShardCore>>,
}

impl LocalFeed {
    /// Subscribes to the shards' feed: call before the map is first read, so that no
    /// write between the read and the subscription is missed.
    pub fn subscribe(worker: &Worker, views: &[Rc<ShardCore>]) -> Self {
        Self { feed: worker.hub().subscribe(FEED_BATCHES), views: views.to_vec() }
    }

    /// Brings `uuids` and `tombstones` up to every write committed so far. Ok(false): the
    /// feed overflowed; the caller rebuilds the map with [`scan_uuids`] and resubscribes.
    pub fn follow(&mut self, uuids: &mut HashMap<Uuid, EntryId>, tombstones: &SharedTombstones) -> bool {
        if self.feed.dropped.load(std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        while let Ok(batch) = self.feed.batches.try_recv() {
            for change in &batch.changes {
                let old = change.old.as_deref().and_then(uuid_of);
                let new = change.new.as_deref().and_then(uuid_of);
                if let Some(old) = old.filter(|o| Some(*o) != new) {
                    // Deleted, or its name taken over by another uuid (an add conflict lost).
                    if uuids.get(&old) == Some(&change.id) {
                        uuids.remove(&old);
                    }
                    tombstones.insert(old);
                }
                if let Some(new) = new {
                    uuids.insert(new, change.id);
                }
            }
        }
        true
    }

    /// After an overflow: a fresh subscription, then the map read again.
    pub fn rebuild(
        &mut self,
        worker: &Worker,
        base: &NormDn,
        uuids: &mut HashMap<Uuid, EntryId>,
    ) -> ferrodir_shard::ShardResult<()> {
        self.feed = worker.hub().subscribe(FEED_BATCHES);
        *uuids = scan_uuids(worker, &self.views, base)?;
        Ok(())
    }
}

/// The uuid of every committed entry at or under `base`, read from every shard.
pub fn scan_uuids(
    worker: &Worker,
    views: &[Rc<ShardCore>],
    base: &NormDn,
) -> ferrodir_shard::ShardResult<HashMap<Uuid, EntryId>> {
    let mut uuids = HashMap::new();
    let skeleton = worker.skeleton();
    for view in views {
        view.refresh_snapshot()?;
        let snapshot = view.snapshot();
        for id in view.all_ids(&*snapshot)? {
            let Some(record) = view.record_in(&*snapshot, id)? else { continue };
            let in_scope =
                (worker.config().dn_rules().parse(&skeleton.dn_of_child(record.parent, &record.rdn)))
                    .is_ok_and(|dn| dn.is_descendant_or_self_of(base));
            if let (true, Some(uuid)) = (in_scope, uuid_of(&record)) {
                uuids.insert(uuid, id);
            }
        }
        view.release_snapshot();
    }
    Ok(uuids)
}

pub fn uuid_of(record: &EntryRecord) -> Option<Uuid> {
    record.entry.get("entryUUID").and_then(|a| a.values.first()).and_then(|v| ferrodir_shard::uuid_octets(v))
}

/// The server id of an entryCSN (its third `#` field).
pub fn sid_of(csn: &str) -> Option<u32> {
    ferrodir_proto::message::sync::csn_sid(csn)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One consumer's early delete is seen by the others (clones share the set).
    #[test]
    fn early_deletes_are_shared_by_the_consumers() {
        let one = SharedTombstones::default();
        let other = one.clone();
        one.insert([7; 16]);
        assert!(other.contains(&[7; 16]));
        assert!(!other.contains(&[8; 16]));
    }

    #[test]
    fn tombstones_forget_the_oldest_past_their_bound() {
        let mut t = Tombstones::default();
        let uuid = |i: usize| {
            let mut u = [0u8; 16];
            u[..8].copy_from_slice(&(i as u64).to_be_bytes());
            u
        };
        for i in 0..TOMBSTONES_MAX + 3 {
            t.insert(uuid(i));
        }
        t.insert(uuid(TOMBSTONES_MAX + 2));
        assert_eq!(t.len(), TOMBSTONES_MAX);
        assert!(!t.contains(&uuid(0)) && !t.contains(&uuid(2)));
        assert!(t.contains(&uuid(3)) && t.contains(&uuid(TOMBSTONES_MAX + 2)));
    }

    #[test]
    fn conflict_names_follow_the_enum() {
        assert_eq!(Conflict::Modify.name(), "modify");
        assert_eq!(Conflict::Glue.name(), "glue");
        assert_eq!(Conflict::Delete.name(), "delete");
    }
}
