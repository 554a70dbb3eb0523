//! Applying what a provider sends, with `Origin::Replication`: the provider's entryUUID,
//! entryCSN and timestamps are kept (`WriteOp::ReplicaAdd`, `ReplicaReplace`), and none of
//! the client-facing rules run (access rules, password hashing, referential integrity,
//! NO-USER-MODIFICATION, limits): the writes go straight to the shards and the coordinator.
//!
//! Local entries are matched by entryUUID, through a map of the replicated subtree's
//! uuids built at start from every shard's committed records and kept by this consumer,
//! the subtree's only writer (clients get a referral). Applying is idempotent: an entry
//! whose entryCSN is not newer than the local one (at the same DN) is left alone, and a
//! delete of an absent entry is nothing, so a change applied twice (after a crash between
//! its commit and its cookie's) changes nothing.
//!
//! Adds of new entries are pipelined, a bounded window of them in flight
//! ([`ADDS_IN_FLIGHT_MAX`]): a refresh sends parents first, so siblings commit together in
//! few batches. Anything that reads the local state first (a known uuid, a name taken, a
//! parent still in flight) waits for the window to drain.

use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::dev::Request;
use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::message::PartialAttribute;
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_router::coordinator::{AddUnder, DeleteEntry, MaybeDemote, MoveEntry, Origin};
use ferrodir_router::{locate, locate_parent_of, LdapError, Located, Worker};
use ferrodir_shard::{
    shard_for_child, CheckedWrite, EntryCheck, EntryId, EntryRecord, ShardActor, ShardCore, ShardError,
    ShardResult, Write, WriteOp, WriteOutcome, REPLICA_AUTHOR,
};

use super::merge;
use super::mesh::{scan_uuids, uuid_of, Conflict, LocalFeed, SharedTombstones};
use super::status::{Applied, Status};

/// New entries' adds in flight at once.
pub const ADDS_IN_FLIGHT_MAX: usize = 256;
/// Attributes a consumer never stores: computed here, or kept by the replica itself.
const LEFT_OUT: &[&str] = &["entrydn", "hassubordinates", "subschemasubentry", "memberof", "contextcsn"];
const PARENT_CLOSED_RETRIES_MAX: u32 = 200;

pub use super::mesh::Uuid;

/// A mesh consumer's condition on a replace: the entry as staged is still older than the
/// provider's entryCSN (this one), so that a local write that committed after the entry
/// was read, with a larger CSN, is not overwritten by an older change.
#[derive(Debug)]
struct OlderThan(String);

impl EntryCheck for OlderThan {
    fn holds(&self, _: EntryId, record: &EntryRecord) -> bool {
        record.entry.first_str("entryCSN").is_none_or(|ours| ours < self.0.as_str())
    }
}

/// A mesh consumer's condition on a merged replace: the entry as staged still has the
/// entryCSN of the version that was merged (no local write committed in between).
#[derive(Debug)]
struct Unchanged(String);

impl EntryCheck for Unchanged {
    fn holds(&self, _: EntryId, record: &EntryRecord) -> bool {
        record.entry.first_str("entryCSN").unwrap_or_default() == self.0
    }
}

/// How often a merge is tried again when a local write changed the entry meanwhile.
const MERGE_TRIES_MAX: usize = 8;

/// A failure to apply: the session ends and the consumer retries from its cookie.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("{0}")]
    Ldap(#[from] LdapError),
    #[error("shard: {0}")]
    Shard(#[from] ShardError),
    #[error("the provider sent {0}")]
    Bad(String),
}

impl From<actix::MailboxError> for ApplyError {
    fn from(e: actix::MailboxError) -> Self {
        ApplyError::Shard(ShardError::Unavailable(e.to_string()))
    }
}

type Result<T> = std::result::Result<T, ApplyError>;

struct PendingAdd {
    uuid: Uuid,
    dn_norm: String,
    csn: Option<String>,
    /// The shard, the parent and the write, to retry it alone if the parent was closed.
    shard: usize,
    parent: EntryId,
    op: WriteOp,
    reply: Request<ShardActor, Write>,
}

pub struct Applier {
    worker: Rc<Worker>,
    base: NormDn,
    uuids: HashMap<Uuid, EntryId>,
    window: VecDeque<PendingAdd>,
    in_flight_dns: HashSet<String>,
    in_flight_uuids: HashSet<Uuid>,
    /// Types the schema lacks, logged once each.
    unknown_types: HashSet<String>,
    status: std::sync::Arc<Status>,
    /// Set when this node is one provider of a mesh (`multi_provider`): others write the
    /// subtree too ([`super::mesh`]).
    mesh: Option<MeshState>,
}

/// A mesh consumer's view of the writes it did not make itself.
struct MeshState {
    local: LocalFeed,
    /// Deleted uuids, shared by the node's consumers.
    tombstones: SharedTombstones,
}

impl Applier {
    /// Reads the uuids of every committed entry at or under `base`. `multi_provider`: this
    /// node is one provider of a mesh ([`super::mesh`]).
    pub fn new(
        worker: Rc<Worker>,
        views: &[Rc<ShardCore>],
        base: NormDn,
        status: std::sync::Arc<Status>,
        multi_provider: bool,
        tombstones: SharedTombstones,
    ) -> Result<Self> {
        // Subscribed before the map is read: no write in between is missed.
        let local = multi_provider.then(|| LocalFeed::subscribe(&worker, views));
        let uuids = scan_uuids(&worker, views, &base)?;
        Ok(Self {
            worker,
            base,
            uuids,
            window: VecDeque::new(),
            in_flight_dns: HashSet::new(),
            in_flight_uuids: HashSet::new(),
            unknown_types: HashSet::new(),
            status,
            mesh: local.map(|local| MeshState { local, tombstones }),
        })
    }

    /// A mesh node: the uuids its delete logs hold that no entry has any more are deleted
    /// ones (a move's record names a uuid still present).
    pub async fn load_tombstones(&mut self) -> Result<()> {
        let Some(mesh) = &mut self.mesh else { return Ok(()) };
        for shard in 0..self.worker.shard_count() {
            let view = self.worker.delete_log(shard, 0).await?;
            for record in view.records {
                if record.deleted && !self.uuids.contains_key(&record.uuid) {
                    mesh.tombstones.insert(record.uuid);
                }
            }
        }
        Ok(())
    }

    /// A mesh node: the uuid map and the tombstones brought up to every local write.
    /// Below `[limits] disk_free_min_bytes` the consumer pauses as client writes do: the
    /// session ends and the retry schedule brings it back, from its cookie, once there is
    /// room (router `disk`).
    fn check_space(&self) -> Result<()> {
        Ok(self.worker.config().disk.check()?)
    }

    fn follow_local(&mut self) -> Result<()> {
        let Some(mesh) = &mut self.mesh else { return Ok(()) };
        if !mesh.local.follow(&mut self.uuids, &mesh.tombstones) {
            tracing::info!(
                rid = self.status.rid,
                "replication: the local change feed overflowed; reading the uuids again"
            );
            mesh.local.rebuild(&self.worker, &self.base, &mut self.uuids)?;
        }
        Ok(())
    }

    fn conflict(&self, kind: Conflict, dn: &NormDn, detail: &str) {
        self.status.conflict(kind);
        tracing::info!(rid = self.status.rid, kind = kind.name(), dn = %dn, detail, "replication conflict");
    }

    /// How many entries of the replicated subtree this replica holds.
    pub fn known(&self) -> usize {
        self.uuids.len() + self.window.len()
    }

    /// Waits until every write sent so far is durable.
    pub async fn drain(&mut self) -> Result<()> {
        while let Some(pending) = self.window.pop_front() {
            self.finish(pending).await?;
        }
        Ok(())
    }

    async fn finish(&mut self, pending: PendingAdd) -> Result<()> {
        self.in_flight_dns.remove(&pending.dn_norm);
        self.in_flight_uuids.remove(&pending.uuid);
        let (outcome, op) = match pending.reply.await? {
            Err(ShardError::ParentClosed) => {
                (retry_closed(&self.worker, pending.shard, pending.parent, pending.op).await, None)
            }
            other => (other, Some(pending.op)),
        };
        match outcome {
            Err(ShardError::AlreadyExists) if self.mesh.is_some() => {
                self.added_elsewhere(pending.uuid, pending.csn, op).await
            }
            Ok(WriteOutcome::Added(id)) => {
                self.uuids.insert(pending.uuid, id);
                self.status.count(Applied::Add);
                if let Some(csn) = &pending.csn {
                    self.status.applied_csn(csn);
                }
                Ok(())
            }
            Ok(_) => Err(ApplyError::Bad("an unexpected shard reply".into())),
            Err(e) => Err(e.into()),
        }
    }

    /// A mesh node: an add of this consumer found its name taken when it committed. When
    /// the taker is the same entry (its uuid), another consumer of this node brought it by
    /// another path meanwhile: no failure (the session used to end and refresh again for
    /// it); the provider's version replaces it if still newer, as in [`Self::update`].
    async fn added_elsewhere(&mut self, uuid: Uuid, csn: Option<String>, op: Option<WriteOp>) -> Result<()> {
        self.follow_local()?;
        let Some(&id) = self.uuids.get(&uuid) else { return Err(ShardError::AlreadyExists.into()) };
        let (Some(WriteOp::ReplicaAdd { entry, .. }), Some(theirs)) = (op, csn) else { return Ok(()) };
        let Some(record) = self.worker.fetch(id).await? else { return Ok(()) };
        if record.entry.first_str("entryCSN").is_some_and(|ours| ours >= theirs.as_str()) {
            return Ok(());
        }
        let replace = WriteOp::ReplicaReplace { id, entry };
        let check: Option<Arc<dyn EntryCheck>> = Some(Arc::new(OlderThan(theirs.clone())));
        match self.write(id.shard(), WriteOp::Checked(Box::new(CheckedWrite { op: replace, check }))).await {
            Err(ApplyError::Shard(ShardError::AssertionFailed)) => {}
            other => {
                other?;
                self.status.count(Applied::Modify);
                self.status.applied_csn(&theirs);
            }
        }
        Ok(())
    }

    /// A `present` state: the entry is unchanged.
    pub fn present(&self) {
        self.status.count(Applied::Present);
    }

    /// A sync `add` or `modify`: the entry as the provider has it now.
    pub async fn upsert(
        &mut self,
        dn_bytes: &[u8],
        attributes: Vec<PartialAttribute>,
        uuid: Uuid,
    ) -> Result<()> {
        self.check_space()?;
        let dn = std::str::from_utf8(dn_bytes)
            .ok()
            .and_then(|t| self.worker.config().dn_rules().parse(t).ok())
            .ok_or_else(|| ApplyError::Bad(format!("a bad DN {:?}", String::from_utf8_lossy(dn_bytes))))?;
        if !dn.is_descendant_or_self_of(&self.base) {
            return Err(ApplyError::Bad(format!("an entry outside the search base: {dn}")));
        }
        let entry = self.entry_of(attributes, &uuid);
        let csn = entry.first_str("entryCSN").map(str::to_string);
        let dn_norm = dn.joined();
        let parent_norm = dn.parent().map(|p| p.joined()).unwrap_or_default();
        if self.mesh.is_some() {
            // Others write here too: everything they committed is seen before deciding.
            self.drain().await?;
            self.follow_local()?;
            if self.mesh.as_ref().is_some_and(|m| m.tombstones.contains(&uuid)) {
                self.conflict(Conflict::Delete, &dn, "a change of an entry deleted here: the delete wins");
                return Ok(());
            }
        }
        let known = self.uuids.contains_key(&uuid) || self.in_flight_uuids.contains(&uuid);
        if known || self.in_flight_dns.contains(&parent_norm) || self.in_flight_dns.contains(&dn_norm) {
            self.drain().await?;
        }
        if let Some(&id) = self.uuids.get(&uuid) {
            match self.worker.fetch(id).await? {
                Some(record) => return self.update(id, &record, &dn, entry, csn).await,
                None => {
                    self.uuids.remove(&uuid);
                }
            }
        }
        let (parent, rdn_norm, rdn) = match locate_parent_of(&self.worker, &dn).await {
            Err(e) if e.code == ResultCode::NO_SUCH_OBJECT && self.mesh.is_some() => {
                // Its parent was deleted here while another node added it: a glue parent.
                self.glue_parents(&dn).await?;
                locate_parent_of(&self.worker, &dn).await?
            }
            other => other?,
        };
        match locate(&self.worker, &dn).await {
            Ok(existing) if self.mesh.is_some() => {
                return self.same_name(existing.id, &dn, uuid, entry, csn).await;
            }
            // Another entry holds the name: it becomes this one (its uuid changes).
            Ok(existing) => return self.take_over(existing.id, uuid, entry, csn).await,
            Err(e) if e.code == ResultCode::NO_SUCH_OBJECT => {}
            Err(e) => return Err(e.into()),
        }
        let parent_id = parent.as_ref().map_or(EntryId::ROOT, |p| p.id);
        let shard = shard_for_child(parent_id, &rdn_norm, self.worker.shard_count());
        let op = WriteOp::ReplicaAdd { parent: parent_id, rdn, rdn_norm, entry };
        self.add(uuid, dn_norm, csn, shard, parent_id, op).await
    }

    /// The entry already under this name becomes the provider's `uuid` (a name taken over).
    async fn take_over(&mut self, id: EntryId, uuid: Uuid, entry: Entry, csn: Option<String>) -> Result<()> {
        self.drain().await?;
        let record = self.worker.fetch(id).await?.ok_or(ShardError::NoSuchObject)?;
        if let Some(old) = uuid_of(&record) {
            self.uuids.remove(&old);
        }
        self.write(id.shard(), WriteOp::ReplicaReplace { id, entry }).await?;
        self.uuids.insert(uuid, id);
        self.status.count(Applied::Modify);
        if let Some(csn) = &csn {
            self.status.applied_csn(csn);
        }
        Ok(())
    }

    /// A mesh node met an entry of another uuid under the name `dn`: the same entry (its
    /// uuid was not in the map yet), or two entries added under one name on two nodes. Of
    /// those the one with the larger entryCSN stays, on every node alike.
    async fn same_name(
        &mut self,
        id: EntryId,
        dn: &NormDn,
        uuid: Uuid,
        entry: Entry,
        csn: Option<String>,
    ) -> Result<()> {
        let record = self.worker.fetch(id).await?.ok_or(ShardError::NoSuchObject)?;
        if uuid_of(&record) == Some(uuid) {
            self.uuids.insert(uuid, id);
            return self.update(id, &record, dn, entry, csn).await;
        }
        let ours = record.entry.first_str("entryCSN").map(str::to_string);
        if let (Some(theirs), Some(ours)) = (&csn, &ours) {
            if theirs <= ours {
                self.conflict(
                    Conflict::Add,
                    dn,
                    "added on two nodes: the entry added here has the larger entryCSN and stays",
                );
                return Ok(());
            }
        }
        self.conflict(
            Conflict::Add,
            dn,
            "added on two nodes: the other node's entry has the larger entryCSN and replaces this one",
        );
        self.take_over(id, uuid, entry, csn).await
    }

    /// Makes the missing ancestors of `dn` inside the replicated subtree, as slapd's
    /// syncrepl makes glue entries: `objectClass: glue`, the RDN's values, a CSN older than
    /// any real change (so that the real entry, if it comes, replaces it), a fresh uuid.
    async fn glue_parents(&mut self, dn: &NormDn) -> Result<()> {
        let mut missing = Vec::new();
        let mut at = dn.parent();
        while let Some(parent) = at {
            if !parent.is_descendant_or_self_of(&self.base) || locate(&self.worker, &parent).await.is_ok() {
                break;
            }
            at = parent.parent();
            missing.push(parent);
        }
        for parent in missing.into_iter().rev() {
            // The deleted parent's own uuid when this node's delete log still has it: the
            // peer that deleted it turns it into the same glue entry (`delete_id`), so
            // both hold one entry.
            // Its CSN is then the delete's: the glue is what the delete left of the parent,
            // newer than the parent the other node still holds, which it replaces there.
            let (uuid, csn) = match self.deleted_uuid_at(&parent).await? {
                Some((uuid, micros)) => (uuid, self.worker.hub().clock().csn_of(micros)),
                None => (*uuid::Uuid::new_v4().as_bytes(), GLUE_CSN.to_string()),
            };
            let Some(attrs) = glue_entry(&parent, &uuid, &csn) else { continue };
            let (grand, rdn_norm, rdn_text) = locate_parent_of(&self.worker, &parent).await?;
            let grand_id = grand.as_ref().map_or(EntryId::ROOT, |p| p.id);
            let shard = shard_for_child(grand_id, &rdn_norm, self.worker.shard_count());
            let op = WriteOp::ReplicaAdd { parent: grand_id, rdn: rdn_text, rdn_norm, entry: attrs };
            self.add(uuid, parent.joined(), None, shard, grand_id, op).await?;
            self.drain().await?;
            self.conflict(
                Conflict::Glue,
                &parent,
                "a glue entry made for a child whose parent was deleted here",
            );
        }
        Ok(())
    }

    /// The uuid of the entry last deleted under the name `dn`, and the clock tick of the
    /// delete, from this node's delete logs.
    async fn deleted_uuid_at(&self, dn: &NormDn) -> Result<Option<(Uuid, u64)>> {
        let mut found: Option<(u64, Uuid)> = None;
        for shard in 0..self.worker.shard_count() {
            for record in self.worker.delete_log(shard, 0).await?.records {
                let same = record.deleted
                    && self
                        .worker
                        .config()
                        .dn_rules()
                        .parse(&record.old_dn)
                        .is_ok_and(|old| old.same_entry(dn));
                if same && found.is_none_or(|(csn, _)| record.csn > csn) {
                    found = Some((record.csn, record.uuid));
                }
            }
        }
        Ok(found.map(|(csn, uuid)| (uuid, csn)))
    }

    /// A new entry: under a container, into the window of adds in flight; under a leaf,
    /// through the coordinator (which makes the parent a container first).
    async fn add(
        &mut self,
        uuid: Uuid,
        dn_norm: String,
        csn: Option<String>,
        shard: usize,
        parent_id: EntryId,
        op: WriteOp,
    ) -> Result<()> {
        let parent_is_container = parent_id == EntryId::ROOT || self.worker.skeleton().contains(parent_id);
        if !parent_is_container {
            self.drain().await?;
            let outcome = self.worker.coordinator.send(AddUnder { parent: parent_id, shard, op }).await??;
            return self.added(uuid, outcome, csn);
        }
        if self.window.len() >= ADDS_IN_FLIGHT_MAX {
            if let Some(front) = self.window.pop_front() {
                self.finish(front).await?;
            }
        }
        let addr = self
            .worker
            .shards
            .get(shard)
            .ok_or_else(|| ShardError::Unavailable(format!("no shard {shard}")))?;
        let reply = addr.send(Write(op.clone()));
        self.in_flight_dns.insert(dn_norm.clone());
        self.in_flight_uuids.insert(uuid);
        self.window.push_back(PendingAdd { uuid, dn_norm, csn, shard, parent: parent_id, op, reply });
        Ok(())
    }

    fn added(&mut self, uuid: Uuid, outcome: WriteOutcome, csn: Option<String>) -> Result<()> {
        let WriteOutcome::Added(id) = outcome else {
            return Err(ApplyError::Bad("an unexpected shard reply".into()));
        };
        self.uuids.insert(uuid, id);
        self.status.count(Applied::Add);
        if let Some(csn) = &csn {
            self.status.applied_csn(csn);
        }
        Ok(())
    }

    /// A known entry: renamed if the provider has it elsewhere, replaced if it is newer.
    async fn update(
        &mut self,
        id: EntryId,
        record: &EntryRecord,
        dn: &NormDn,
        entry: Entry,
        csn: Option<String>,
    ) -> Result<()> {
        let local_dn = self.dn_of(record)?;
        if self.mesh.is_some() && (merge::tracked(&record.entry) || merge::tracked(&entry)) {
            return self.merge_into(id, record, &local_dn, dn, entry, csn).await;
        }
        let same_dn = local_dn.same_entry(dn);
        let local_csn = record.entry.first_str("entryCSN");
        let older = matches!((&csn, local_csn), (Some(theirs), Some(ours)) if theirs.as_str() <= ours);
        if older && self.mesh.is_some() {
            // The larger entryCSN wins the whole entry, its DN included. A copy come back
            // by another path (the same CSN, or an older one of the same node) is no conflict.
            let ours = local_csn.unwrap_or_default();
            let theirs = csn.as_deref().unwrap_or_default();
            if theirs != ours && super::mesh::sid_of(theirs) != super::mesh::sid_of(ours) {
                let kind = if same_dn { Conflict::Modify } else { Conflict::Rename };
                self.conflict(kind, dn, "a change lost to a concurrent one with a larger entryCSN");
            }
            return Ok(());
        }
        if same_dn && older {
            return Ok(());
        }
        if !same_dn {
            self.rename(id, record, &local_dn, dn).await?;
        }
        let replace = WriteOp::ReplicaReplace { id, entry };
        let op = match (&self.mesh, csn.clone()) {
            // Clients write here too: the entry read above may have changed since. The
            // replace holds only if the entry as staged is still older than the provider's,
            // judged in the batch that commits it; else the newer local write stays.
            (Some(_), Some(theirs)) => WriteOp::Checked(Box::new(CheckedWrite {
                op: replace,
                check: Some(Arc::new(OlderThan(theirs))),
            })),
            _ => replace,
        };
        match self.write(id.shard(), op).await {
            Err(ApplyError::Shard(ShardError::AssertionFailed)) => {
                self.conflict(
                    Conflict::Modify,
                    dn,
                    "a change lost to a concurrent local one with a larger entryCSN",
                );
                return Ok(());
            }
            other => other?,
        };
        self.status.count(Applied::Modify);
        if let Some(csn) = &csn {
            self.status.applied_csn(csn);
        }
        Ok(())
    }

    /// A mesh node: the provider's version of a known entry merged with the local one,
    /// attribute by attribute and for the name ([`merge`]); written only if it changes
    /// something.
    async fn merge_into(
        &mut self,
        id: EntryId,
        record: &EntryRecord,
        local_dn: &NormDn,
        dn: &NormDn,
        entry: Entry,
        csn: Option<String>,
    ) -> Result<()> {
        let mut current: Option<(std::sync::Arc<EntryRecord>, NormDn)> = None;
        for _ in 0..MERGE_TRIES_MAX {
            let (record, local_dn) = match &current {
                Some((record, dn)) => (record.as_ref(), dn),
                None => (record, local_dn),
            };
            let rdn_of = |remote: bool| -> Vec<(String, Vec<u8>)> {
                let name = if remote { dn } else { local_dn };
                name.dn
                    .rdn()
                    .map(|r| r.avas.iter().map(|a| (a.attr.clone(), a.value.clone())).collect())
                    .unwrap_or_default()
            };
            let mut merged = merge::merge(&record.entry, &entry, rdn_of);
            if !merged.changed {
                return Ok(());
            }
            if merged.concurrent {
                self.conflict(
                    Conflict::Modify,
                    dn,
                    "concurrent changes of one entry, merged attribute by attribute",
                );
                // The merged entry holds changes the provider lacks: it is a change of this
                // node's, with a CSN of its own, so that it goes to every peer, the provider
                // included (an entryCSN of the provider's would be taken for its own and
                // never sent back to it).
                let stamp = self.worker.hub().clock().stamp("");
                if let Some(attr) = merged.entry.get_mut("entryCSN") {
                    attr.values = vec![stamp.csn.into_bytes()];
                }
            }
            if merged.remote_name && !local_dn.same_entry(dn) {
                self.rename(id, record, local_dn, dn).await?;
            }
            // Clients write here too: the merge holds only if the entry as staged is still
            // the version merged (its entryCSN unchanged), judged in the batch that commits
            // it; else it is merged again with what committed meanwhile.
            let read = record.entry.first_str("entryCSN").unwrap_or_default().to_string();
            let replace = WriteOp::ReplicaReplace { id, entry: merged.entry };
            let check: Option<Arc<dyn EntryCheck>> = Some(Arc::new(Unchanged(read)));
            match self
                .write(id.shard(), WriteOp::Checked(Box::new(CheckedWrite { op: replace, check })))
                .await
            {
                Err(ApplyError::Shard(ShardError::AssertionFailed)) => {
                    let Some(fresh) = self.worker.fetch(id).await? else { return Ok(()) };
                    let fresh_dn = self.dn_of(&fresh)?;
                    current = Some((fresh, fresh_dn));
                    continue;
                }
                other => other?,
            };
            self.status.count(Applied::Modify);
            if let Some(csn) = &csn {
                self.status.applied_csn(csn);
            }
            return Ok(());
        }
        Err(ApplyError::Bad(format!("{dn} kept changing while it was merged; retrying the session")))
    }

    /// Modify DN of a local entry to where the provider has it (its subtree follows).
    async fn rename(
        &mut self,
        id: EntryId,
        record: &EntryRecord,
        old_dn: &NormDn,
        new_dn: &NormDn,
    ) -> Result<()> {
        if record.parent == EntryId::ROOT {
            return Err(ApplyError::Bad(format!("a rename of the naming context {old_dn}")));
        }
        // A different entry under the new name goes first (the provider deleted it).
        if let Ok(other) = locate(&self.worker, new_dn).await {
            if other.id != id {
                self.delete_id(other.id).await?;
            }
        }
        let (parent, new_rdn_norm, new_rdn) = locate_parent_of(&self.worker, new_dn).await?;
        let new_parent = parent.map_or(EntryId::ROOT, |p| p.id);
        let old_rdn = old_dn.dn.rdn().cloned().ok_or_else(|| ApplyError::Bad("an empty DN".into()))?;
        let new_rdn_parsed = new_dn.dn.rdn().cloned().ok_or_else(|| ApplyError::Bad("an empty DN".into()))?;
        // The replace that follows sets every value; these only keep the schema on the way:
        // the new RDN's values added, and the old RDN's dropped only where the new RDN names
        // the same type (a single-valued naming attribute can't hold both; a type the new
        // RDN doesn't name may be a MUST of the entry and stays until the replace).
        let drop_values = old_rdn
            .avas
            .iter()
            .filter(|old| new_rdn_parsed.avas.iter().any(|new| new.attr.eq_ignore_ascii_case(&old.attr)))
            .map(|a| (a.attr.clone(), a.value.clone()))
            .collect();
        let add_values = new_rdn_parsed.avas.iter().map(|a| (a.attr.clone(), a.value.clone())).collect();
        let target = Located {
            id,
            parent: record.parent,
            rdn_norm: record.rdn_norm.clone(),
            container: self.worker.skeleton().contains(id),
        };
        let request = MoveEntry {
            target,
            new_parent,
            new_rdn,
            new_rdn_norm,
            drop_values,
            add_values,
            author: REPLICA_AUTHOR.to_string(),
            // Not recorded: the changelog leaves replicated changes out.
            delete_old_rdn: false,
            old_dn: old_dn.dn.clone(),
            new_dn: new_dn.dn.clone(),
            origin: Origin::Replication,
            check: None,
        };
        self.worker.coordinator.send(request).await??;
        Ok(())
    }

    /// A sync `delete` (or a syncIdSet uuid with refreshDeletes): nothing if absent.
    pub async fn delete(&mut self, uuid: &Uuid) -> Result<()> {
        self.check_space()?;
        self.drain().await?;
        self.follow_local()?;
        let Some(&id) = self.uuids.get(uuid) else {
            // A mesh: the entry may still come by another path; its delete wins then too.
            if let Some(mesh) = &self.mesh {
                mesh.tombstones.insert(*uuid);
            }
            return Ok(());
        };
        self.delete_id(id).await
    }

    /// Deletes a local entry, its local descendants first if it has any.
    async fn delete_id(&mut self, id: EntryId) -> Result<()> {
        let Some(record) = self.worker.fetch(id).await? else {
            self.forget(id);
            return Ok(());
        };
        let dn = self.dn_of(&record)?;
        match self.delete_one(id, &record, &dn).await {
            Err(ApplyError::Ldap(e))
                if e.code == ResultCode::NOT_ALLOWED_ON_NON_LEAF && self.mesh.is_some() =>
            {
                // A mesh: the children were added here or by a third node while the peer
                // deleted their parent. As slapd, the parent becomes a glue entry and the
                // children stay; the node that sends them to the peer gets the same glue.
                let uuid = uuid_of(&record).unwrap_or_else(|| *uuid::Uuid::new_v4().as_bytes());
                let Some(glue) = glue_entry(&dn, &uuid, GLUE_CSN) else { return Err(ApplyError::Ldap(e)) };
                self.write(id.shard(), WriteOp::ReplicaReplace { id, entry: glue }).await?;
                self.conflict(
                    Conflict::Glue,
                    &dn,
                    "a deleted parent with children added elsewhere became a glue entry",
                );
                Ok(())
            }
            Err(ApplyError::Ldap(e)) if e.code == ResultCode::NOT_ALLOWED_ON_NON_LEAF => {
                // Children the provider has not deleted (yet): the provider's order is not
                // relied on, the subtree goes deepest first.
                let below = self.local_descendants(&dn).await?;
                for (child, child_record, child_dn) in below {
                    self.delete_one(child, &child_record, &child_dn).await?;
                }
                let record = self.worker.fetch(id).await?.ok_or(ShardError::NoSuchObject)?;
                self.delete_one(id, &record, &dn).await
            }
            other => other,
        }
    }

    async fn delete_one(&mut self, id: EntryId, record: &EntryRecord, dn: &NormDn) -> Result<()> {
        let target = Located {
            id,
            parent: record.parent,
            rdn_norm: record.rdn_norm.clone(),
            container: self.worker.skeleton().contains(id),
        };
        let name_shard = shard_for_child(target.parent, &target.rdn_norm, self.worker.shard_count());
        if target.container || name_shard != id.shard() {
            let request = DeleteEntry {
                target,
                dn: dn.dn.clone(),
                origin: Origin::Replication,
                author: REPLICA_AUTHOR.to_string(),
                check: None,
            };
            self.worker.coordinator.send(request).await??;
        } else {
            let outcome = self
                .worker
                .write(id.shard(), WriteOp::Delete { id, author: REPLICA_AUTHOR.to_string() })
                .await?;
            let maybe_last_child = match outcome {
                WriteOutcome::Deleted { parent_has_children_here, .. } => !parent_has_children_here,
                _ => true,
            };
            if record.parent != EntryId::ROOT && maybe_last_child {
                self.worker.coordinator.send(MaybeDemote(record.parent)).await??;
            }
        }
        self.forget(id);
        self.status.count(Applied::Delete);
        Ok(())
    }

    fn forget(&mut self, id: EntryId) {
        self.uuids.retain(|_, v| *v != id);
    }

    /// Every local entry of the subtree strictly below `dn`, deepest first.
    async fn local_descendants(
        &self,
        dn: &NormDn,
    ) -> Result<Vec<(EntryId, std::sync::Arc<EntryRecord>, NormDn)>> {
        let mut below = Vec::new();
        let ids: Vec<EntryId> = self.uuids.values().copied().collect();
        for id in ids {
            let Some(record) = self.worker.fetch(id).await? else { continue };
            let child_dn = self.dn_of(&record)?;
            if child_dn.len() > dn.len() && child_dn.is_descendant_or_self_of(dn) {
                below.push((id, record, child_dn));
            }
        }
        below.sort_by_key(|(_, _, d)| std::cmp::Reverse(d.len()));
        Ok(below)
    }

    /// The end of a present phase: every local entry of the subtree the provider did not
    /// present is deleted, deepest first.
    /// `cookie`: the provider's cookie at the end of the phase; a mesh node deletes only the
    /// entries the provider must have had (entryCSN at or below its CSN of that server id),
    /// never those written here or by another peer since.
    pub async fn delete_unpresented(
        &mut self,
        presented: &HashSet<Uuid>,
        cookie: Option<&[u8]>,
    ) -> Result<usize> {
        self.check_space()?;
        self.drain().await?;
        self.follow_local()?;
        let provider_csns = cookie.map(super::cookie::csns).unwrap_or_default();
        let gone: Vec<EntryId> =
            self.uuids.iter().filter(|(u, _)| !presented.contains(*u)).map(|(_, id)| *id).collect();
        let mut victims = Vec::with_capacity(gone.len());
        for id in gone {
            match self.worker.fetch(id).await? {
                Some(record) if self.mesh.is_some() && !covered(&record, &provider_csns) => {}
                Some(record) => {
                    let dn = self.dn_of(&record)?;
                    victims.push((id, dn.len()));
                }
                None => self.forget(id),
            }
        }
        victims.sort_by_key(|(_, depth)| std::cmp::Reverse(*depth));
        let count = victims.len();
        for (id, _) in victims {
            self.delete_id(id).await?;
        }
        Ok(count)
    }

    async fn write(&self, shard: usize, op: WriteOp) -> Result<WriteOutcome> {
        Ok(self.worker.write_to_shard(shard, op).await?)
    }

    fn dn_of(&self, record: &EntryRecord) -> Result<NormDn> {
        let text = self.worker.skeleton().dn_of_child(record.parent, &record.rdn);
        self.worker
            .config()
            .dn_rules()
            .parse(&text)
            .map_err(|e| ApplyError::Bad(format!("a local DN that does not parse: {e}")))
    }

    /// The entry to store: the provider's attributes but those a consumer never stores and
    /// types this schema lacks (logged), with the uuid of the Sync State control.
    fn entry_of(&mut self, attributes: Vec<PartialAttribute>, uuid: &Uuid) -> Entry {
        let schema = self.worker.config().schema.clone();
        let mut attrs = Vec::with_capacity(attributes.len());
        for attr in attributes {
            let name = String::from_utf8_lossy(&attr.r#type).into_owned();
            let base = ferrodir_proto::entry::base_name_lower(&name);
            if LEFT_OUT.contains(&base.as_str()) || base == "entryuuid" {
                continue;
            }
            if schema.attribute(&base).is_none() {
                if self.unknown_types.len() < 1024 && self.unknown_types.insert(base.clone()) {
                    tracing::warn!(rid = self.status.rid, attr = %name, "the provider sent a type this schema lacks; not stored (logged once)");
                }
                continue;
            }
            attrs.push(Attribute::new(name, attr.vals.into_iter().map(|v| v.to_vec()).collect()));
        }
        attrs.push(Attribute::new("entryUUID", vec![uuid_text(uuid).into_bytes()]));
        Entry::new(attrs)
    }
}

/// A glue entry named `dn` (as slapd's syncrepl makes them for a missing parent): glue,
/// with extensibleObject for its RDN's values, the given uuid and entryCSN (by default one
/// older than any real change, so that any real version of the entry replaces it), and
/// fixed stamps: the same entry on every node that makes it.
fn glue_entry(dn: &NormDn, uuid: &Uuid, csn: &str) -> Option<Entry> {
    let rdn = dn.dn.rdn()?;
    let mut attrs = vec![
        Attribute::new("objectClass", vec![b"top".to_vec(), b"glue".to_vec(), b"extensibleObject".to_vec()]),
        Attribute::new("structuralObjectClass", vec![b"glue".to_vec()]),
        Attribute::new("entryCSN", vec![csn.as_bytes().to_vec()]),
        Attribute::new("entryUUID", vec![uuid_text(uuid).into_bytes()]),
        // Fixed stamps: a glue entry made on two nodes is the same entry.
        Attribute::new("creatorsName", vec![Vec::new()]),
        Attribute::new("createTimestamp", vec![GLUE_TIME.as_bytes().to_vec()]),
        Attribute::new("modifiersName", vec![Vec::new()]),
        Attribute::new("modifyTimestamp", vec![GLUE_TIME.as_bytes().to_vec()]),
    ];
    for ava in &rdn.avas {
        attrs.push(Attribute::new(ava.attr.clone(), vec![ava.value.clone()]));
    }
    Some(Entry::new(attrs))
}

/// A glue entry's CSN: older than every real change.
const GLUE_CSN: &str = "19700101000000.000000Z#000000#000#000000";
const GLUE_TIME: &str = "19700101000000Z";

/// Whether a provider whose cookie holds `csns` must have had the entry `record`: its
/// entryCSN is at or below the provider's CSN of the same server id.
fn covered(record: &EntryRecord, csns: &[String]) -> bool {
    let Some(csn) = record.entry.first_str("entryCSN") else { return false };
    let sid = super::mesh::sid_of(csn);
    csns.iter().any(|c| super::mesh::sid_of(c) == sid && csn <= c.as_str())
}

/// Retries, alone, an add whose parent was briefly closed by the coordinator (or demoted
/// meanwhile: then through the coordinator, which promotes it again).
async fn retry_closed(
    worker: &Worker,
    shard: usize,
    parent: EntryId,
    op: WriteOp,
) -> ShardResult<WriteOutcome> {
    for _ in 0..PARENT_CLOSED_RETRIES_MAX {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if parent != EntryId::ROOT && !worker.skeleton().contains(parent) {
            let sent = worker.coordinator.send(AddUnder { parent, shard, op }).await;
            return sent
                .map_err(|e| ShardError::Unavailable(e.to_string()))?
                .map_err(|e| ShardError::Unavailable(e.to_string()));
        }
        match worker.write_to_shard(shard, op.clone()).await {
            Err(ShardError::ParentClosed) => continue,
            other => return other,
        }
    }
    Err(ShardError::ParentClosed)
}

/// The text form of a uuid (RFC 4122, lower case).
pub fn uuid_text(uuid: &Uuid) -> String {
    uuid::Uuid::from_bytes(*uuid).hyphenated().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_shard::uuid_octets;

    #[test]
    fn uuid_round_trip() {
        let text = "0f2b9a3e-4c1d-4e5f-8a9b-0c1d2e3f4a5b";
        assert_eq!(uuid_text(&uuid_octets(text.as_bytes()).unwrap()), text);
        assert!(uuid_octets(b"xyz").is_none());
        // RFC 4122's simple form (no hyphens) names the same uuid.
        assert_eq!(uuid_octets(text.replace('-', "").as_bytes()), uuid_octets(text.as_bytes()));
    }
}
