//! Staging writes into a group-commit batch.
//!
//! Each operation is checked against the state the shard will have once every earlier
//! operation commits: the committing batch and the pending one are overlays above the last
//! committed snapshot. A failing operation fails alone and adds nothing to the batch.
//! Replies wait until the batch is durable, successes and failures alike, so that no client
//! is told about state that could still vanish.

use std::collections::HashMap;
use std::sync::Arc;

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::ldif::LdifMod;
use ferrodir_proto::schema::check::{check_changed_entry, Violation};
use ferrodir_proto::{Dn, Rdn};
use tokio::sync::oneshot;

use crate::core::ShardCore;
use crate::entry::record::{EntryRecord, FLAG_CONTAINER};
use crate::error::{ShardError, ShardResult};
use crate::id::{shard_for_child, EntryId};
use crate::index::eqkey;
use crate::rules::RuleTable;
use crate::storage::Mutation;
use crate::write::changelog::{self, ChangeKind, ChangeRecord};
use crate::write::layout;
use crate::write::modify::{apply_changes, find_attr, value_key};
use crate::write::stamp::{set_structural_class, stamp_created, stamp_modified, Stamp};

/// One write a shard can apply by itself.
#[derive(Debug, Clone)]
pub enum WriteOp {
    /// Create an entry on this shard (its home: `shard_for_child(parent, rdn_norm)`), with its
    /// DN→ID record, one-level key and index keys.
    Add {
        parent: EntryId,
        rdn: String,
        rdn_norm: String,
        entry: Entry,
        /// Who asks: stamped as creatorsName and modifiersName.
        author: String,
    },
    /// Delete a leaf entry and its keys; its DN→ID record too when it lives here.
    Delete {
        id: EntryId,
        /// Who asks (the changelog's creatorsName); [`REPLICA_AUTHOR`] from the replication
        /// consumer.
        author: String,
    },
    Modify {
        id: EntryId,
        changes: Vec<LdifMod>,
        author: String,
    },
    /// Mark or unmark an entry as a container (published in the skeleton).
    SetContainer {
        id: EntryId,
        container: bool,
    },
    /// Reserve a DN→ID record on this shard (a Modify DN's new name).
    PutDn {
        parent: EntryId,
        rdn_norm: String,
        id: EntryId,
    },
    /// Remove a DN→ID record if it still names `id`.
    RemoveDn {
        parent: EntryId,
        rdn_norm: String,
        id: EntryId,
    },
    /// Give an entry a new parent and RDN (a Modify DN's entry update): `drop_values` are
    /// removed if present (the old RDN's, with deleteOldRDN), then `add_values` added if
    /// absent (the new RDN's), on the entry as it is when the op is staged.
    Relocate {
        id: EntryId,
        parent: EntryId,
        rdn: String,
        rdn_norm: String,
        drop_values: Vec<(String, Vec<u8>)>,
        add_values: Vec<(String, Vec<u8>)>,
        author: String,
        /// The request's deleteOldRDN (the changelog records it as asked).
        delete_old_rdn: bool,
    },
    /// Referential integrity (the server's own change, no access rules): rewrite or remove
    /// the entry's values that name a deleted or renamed DN. Done without a write when none
    /// does, or when the entry is gone, so that recovery can send it again.
    RewriteRefs {
        id: EntryId,
        rewrite: Arc<crate::refs::RefRewrite>,
        /// Stamped as modifiersName (slapd: "cn=Referential Integrity Overlay").
        author: String,
    },
    /// Replication consumer: create an entry exactly as the provider sent it. Its
    /// entryUUID, entryCSN, creatorsName, createTimestamp, modifiersName and
    /// modifyTimestamp are kept: nothing is stamped (one missing is filled in as an import
    /// fills it). Checked against the schema like any add.
    ReplicaAdd {
        parent: EntryId,
        rdn: String,
        rdn_norm: String,
        entry: Entry,
    },
    /// Replication consumer: replace every attribute of an entry with the provider's
    /// (attributes it no longer carries are removed), its operational stamps included.
    ReplicaReplace {
        id: EntryId,
        entry: Entry,
    },
    /// A change decided from the entry as staged (`write::update`): the router's password
    /// policy bookkeeping. Answered with the entry as it is after (unchanged when the
    /// update had nothing to change: then nothing is written).
    Update {
        id: EntryId,
        update: Arc<dyn crate::write::update::EntryUpdate>,
        /// Stamped as modifiersName.
        author: String,
    },
    /// Store a metadata value (a replication consumer's cookie). It commits in the same
    /// batch as the writes staged before it on this shard, or a later one: never before them.
    PutMeta {
        name: String,
        value: Vec<u8>,
    },
    /// Delete the changelog's records past its age bound (the shard's own timer sends it
    /// to an idle shard; `write::changelog`).
    TrimChangelog,
    /// A step of an online index build (`write::indexing`).
    Index(crate::write::indexing::IndexWork),
    /// A write with a condition on its entry and the entry as it was kept for the answer
    /// (RFC 4528 assertion, RFC 4527 pre-read): answered with [`WriteOutcome::Checked`].
    Checked(Box<CheckedWrite>),
}

/// A write, the condition its entry must meet when it is staged, if any.
#[derive(Debug, Clone)]
pub struct CheckedWrite {
    pub op: WriteOp,
    pub check: Option<Arc<dyn crate::write::update::EntryCheck>>,
}

/// The author of a [`WriteOp::Relocate`] sent by the replication consumer: the entry's
/// stamps are the provider's, so the move stamps nothing (the replace that follows it
/// carries the provider's values).
pub const REPLICA_AUTHOR: &str = "";

#[derive(Debug, Clone)]
pub enum WriteOutcome {
    Added(EntryId),
    /// The entry as it is after the write.
    Record(Arc<EntryRecord>),
    /// The entry as it was, and whether its parent still has a child on this shard once the
    /// batch holding the delete is durable (filled in after the commit). When it has none,
    /// the router asks the coordinator to demote the parent before answering the client.
    Deleted {
        record: Arc<EntryRecord>,
        parent_has_children_here: bool,
    },
    Done,
    /// A step of an online index build: how much it did, and where the next one starts
    /// (`write::indexing`).
    Progress {
        done: usize,
        next: Option<EntryId>,
    },
    /// A [`WriteOp::Checked`]'s: the entry as it was before (None for an Add) and as the
    /// write left it (None for a Delete), both as staged in the write's batch, and the
    /// write's own outcome.
    Checked {
        before: Option<Arc<EntryRecord>>,
        after: Option<Arc<EntryRecord>>,
        outcome: Box<WriteOutcome>,
    },
}

impl WriteOutcome {
    /// The write's own outcome, inside any [`WriteOutcome::Checked`].
    pub fn inner(&self) -> &WriteOutcome {
        match self {
            WriteOutcome::Checked { outcome, .. } => outcome.inner(),
            other => other,
        }
    }

    /// [`WriteOutcome::inner`], to fill in after the commit.
    pub fn inner_mut(&mut self) -> &mut WriteOutcome {
        match self {
            WriteOutcome::Checked { outcome, .. } => outcome.inner_mut(),
            other => other,
        }
    }

    /// The write's own outcome, and the entry as it was and as it is (a
    /// [`WriteOutcome::Checked`]'s; None and None otherwise).
    pub fn split(self) -> (WriteOutcome, Option<Arc<EntryRecord>>, Option<Arc<EntryRecord>>) {
        match self {
            WriteOutcome::Checked { before, after, outcome } => ((*outcome).split().0, before, after),
            other => (other, None, None),
        }
    }
}

pub type Reply = oneshot::Sender<ShardResult<WriteOutcome>>;

/// The state and effects of one batch.
#[derive(Default)]
pub struct Overlay {
    records: HashMap<EntryId, Option<Arc<EntryRecord>>>,
    dns: HashMap<(EntryId, String), Option<EntryId>>,
    pub mutations: Vec<Mutation>,
    pub replies: Vec<(Reply, ShardResult<WriteOutcome>)>,
    pub touched: Vec<(EntryId, Option<Arc<EntryRecord>>)>,
    /// The batch number, counted per shard, for waiters on "everything staged so far".
    pub generation: u64,
    /// A lower bound of the CSNs this batch took (`watermark`), set when its first write
    /// was staged; and the highest it took (0: none).
    pub csn_floor: Option<u64>,
    pub csn_max: u64,
    /// The highest CSN this batch stamped itself (a local write's; 0: none): on a mesh
    /// node, replicated entries keep their own CSNs, which count in `csn_max` but are no
    /// change of this server id (`watermark::Hub::own_watermark`).
    pub own_csn_max: u64,
    /// The entries' changes, for persist searches (`watermark::Hub::feed`): those that
    /// change what LDAP shows (not a container flag).
    pub changes: Vec<crate::write::watermark::Change>,
    /// The highest changelog record the batch stages (0: none).
    pub changelog_last: u64,
}

impl Overlay {
    pub fn is_empty(&self) -> bool {
        self.replies.is_empty()
    }
}

/// The two overlays of a shard's writer: `committing` is with the commit thread, `pending`
/// gathers the next batch.
pub struct Stager {
    pub pending: Overlay,
    pub committing: Option<Overlay>,
    pub next_seq: u64,
    /// The delete log's CSNs (`deletelog`): its records are staged with their changes.
    pub deletelog: crate::write::deletelog::DeleteLog,
    /// The delete log's bound and the skeleton its records' old DNs come from.
    pub deletelog_settings: crate::write::deletelog::DeleteLogSettings,
    /// The retro changelog's numbers (`changelog`): its records are staged with their
    /// changes, when it is enabled.
    pub changelog: crate::write::changelog::Changelog,
    pub changelog_settings: crate::write::changelog::ChangelogSettings,
    /// The indices writes maintain: the shard's configuration at start
    /// (`ShardInfo::indexes`), then whatever an online build set (`write::indexing`).
    pub indexes: Arc<crate::index::config::IndexConfig>,
}

impl Stager {
    /// The writer of `core`'s shard, allocating ids from `next_seq`, maintaining the indices
    /// the shard was opened with; no delete log or changelog records until their settings
    /// and loaded state are set.
    pub fn new(core: &ShardCore, next_seq: u64) -> Self {
        Self {
            pending: Overlay::default(),
            committing: None,
            next_seq,
            deletelog: Default::default(),
            deletelog_settings: Default::default(),
            changelog: Default::default(),
            changelog_settings: Default::default(),
            indexes: core.info.indexes.clone(),
        }
    }

    fn record(&self, core: &ShardCore, id: EntryId) -> ShardResult<Option<Arc<EntryRecord>>> {
        if let Some(r) = self.pending.records.get(&id) {
            return Ok(r.clone());
        }
        if let Some(r) = self.committing.as_ref().and_then(|c| c.records.get(&id)) {
            return Ok(r.clone());
        }
        core.record_to_change(id)
    }

    fn dn(&self, core: &ShardCore, parent: EntryId, rdn_norm: &str) -> ShardResult<Option<EntryId>> {
        let key = (parent, rdn_norm.to_string());
        if let Some(d) = self.pending.dns.get(&key) {
            return Ok(*d);
        }
        if let Some(d) = self.committing.as_ref().and_then(|c| c.dns.get(&key)) {
            return Ok(*d);
        }
        core.lookup_dn(parent, rdn_norm)
    }

    /// Checks `op` against the staged state and, if it succeeds, adds its effects to the
    /// pending batch. The reply is queued either way.
    pub fn stage(&mut self, core: &ShardCore, op: WriteOp, closed: &dyn Fn(EntryId) -> bool, reply: Reply) {
        if self.pending.csn_floor.is_none() {
            // Before this write takes a CSN: the watermark must not pass it.
            let floor = core.info.hub.clock().now() + 1;
            self.pending.csn_floor = Some(floor);
            if self.committing.is_none() {
                core.info.hub.set_floor(core.info.index, floor);
            }
        }
        let mut effects = Effects::default();
        let result = self.plan(core, op, closed, &mut effects);
        if result.is_ok() {
            self.apply(core, effects);
        }
        self.pending.replies.push((reply, result));
    }

    /// A replicated entry keeps the provider's entryCSN: counted into the pending batch's
    /// highest all the same, and the clock moved to it (the floor of the next batch starts
    /// above it), so that this server's watermark passes the entries it holds and a persist
    /// search of a replica (a chain) sends them instead of holding them.
    fn count_replicated_csn(&mut self, core: &ShardCore, entry: &ferrodir_proto::entry::Entry) {
        if let Some(micros) = entry.first_str("entryCSN").and_then(crate::write::stamp::micros_of_csn) {
            self.pending.csn_max = self.pending.csn_max.max(micros);
            core.info.hub.clock().seed(micros);
        }
    }

    /// The next CSN, counted into the pending batch's highest.
    fn stamp(&mut self, core: &ShardCore, author: &str) -> Stamp {
        let stamp = core.info.hub.clock().stamp(author);
        self.pending.csn_max = self.pending.csn_max.max(stamp.micros);
        self.pending.own_csn_max = self.pending.own_csn_max.max(stamp.micros);
        stamp
    }

    /// Checks one op against the staged state and gathers its effects into `fx`; nothing
    /// is staged until `apply`, so a failing op adds nothing to the batch.
    fn plan(
        &mut self,
        core: &ShardCore,
        op: WriteOp,
        closed: &dyn Fn(EntryId) -> bool,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        match op {
            WriteOp::Add { parent, rdn, rdn_norm, entry, author } => {
                let id = self.claim_id(core, parent, &rdn_norm, closed, fx)?;
                self.plan_add(core, id, EntryRecord { parent, rdn, rdn_norm, flags: 0, entry }, &author, fx)
            }
            WriteOp::Delete { id, author } => self.plan_delete(core, id, &author, fx),
            WriteOp::Modify { id, changes, author } => self.plan_modify(core, id, &changes, &author, fx),
            WriteOp::SetContainer { id, container } => self.plan_set_container(core, id, container, fx),
            WriteOp::PutDn { parent, rdn_norm, id } => {
                self.plan_put_dn(core, parent, rdn_norm, id, closed, fx)
            }
            WriteOp::RemoveDn { parent, rdn_norm, id } => {
                if self.dn(core, parent, &rdn_norm)? == Some(id) {
                    fx.dns.push((parent, rdn_norm, None));
                }
                Ok(WriteOutcome::Done)
            }
            WriteOp::Relocate {
                id,
                parent,
                rdn,
                rdn_norm,
                drop_values,
                add_values,
                author,
                delete_old_rdn,
            } => {
                let old = self.existing(core, id)?;
                let entry = renamed_entry(&core.info.rules, &old.entry, &drop_values, &add_values);
                let next = EntryRecord { parent, rdn, rdn_norm, flags: old.flags, entry };
                self.plan_relocate(core, id, old, next, Renaming { author: &author, delete_old_rdn }, fx)
            }
            WriteOp::RewriteRefs { id, rewrite, author } => {
                self.plan_rewrite_refs(core, id, &rewrite, &author, fx)
            }
            WriteOp::ReplicaAdd { parent, rdn, rdn_norm, entry } => {
                let id = self.claim_id(core, parent, &rdn_norm, closed, fx)?;
                self.plan_replica_add(core, id, EntryRecord { parent, rdn, rdn_norm, flags: 0, entry }, fx)
            }
            WriteOp::ReplicaReplace { id, entry } => self.plan_replica_replace(core, id, entry, fx),
            WriteOp::Update { id, update, author } => {
                self.plan_update(core, id, update.as_ref(), &author, fx)
            }
            WriteOp::PutMeta { name, value } => {
                fx.meta.push(Mutation { key: crate::index::keys::meta(&name), value: Some(value) });
                Ok(WriteOutcome::Done)
            }
            WriteOp::TrimChangelog => {
                fx.trim_changelog = true;
                Ok(WriteOutcome::Done)
            }
            WriteOp::Index(work) => {
                let planned = crate::write::indexing::plan(core, work, &|id| self.record(core, id))?;
                fx.keys = planned.keys;
                fx.indexes = planned.indexes;
                Ok(WriteOutcome::Progress { done: planned.done, next: planned.next })
            }
            WriteOp::Checked(checked) => self.plan_checked(core, *checked, closed, fx),
        }
    }

    /// A write whose entry must meet a condition, judged on the entry as staged (an Add's
    /// on the entry to add), before anything of the write is: false fails it alone.
    fn plan_checked(
        &mut self,
        core: &ShardCore,
        checked: CheckedWrite,
        closed: &dyn Fn(EntryId) -> bool,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        let CheckedWrite { op, check } = checked;
        let target = match &op {
            WriteOp::Modify { id, .. }
            | WriteOp::Delete { id, .. }
            | WriteOp::Relocate { id, .. }
            | WriteOp::Update { id, .. }
            | WriteOp::ReplicaReplace { id, .. } => Some(*id),
            _ => None,
        };
        let before = match target {
            Some(id) => self.record(core, id)?,
            None => None,
        };
        if let Some(check) = &check {
            let holds = match (&op, &before, target) {
                (WriteOp::Add { parent, rdn, rdn_norm, entry, .. }, _, _) => {
                    let record = EntryRecord {
                        parent: *parent,
                        rdn: rdn.clone(),
                        rdn_norm: rdn_norm.clone(),
                        flags: 0,
                        entry: entry.clone(),
                    };
                    check.holds(EntryId::new(core.info.index, self.next_seq), &record)
                }
                (_, Some(record), Some(id)) => check.holds(id, record),
                // No entry: the write itself answers (noSuchObject).
                _ => true,
            };
            if !holds {
                return Err(ShardError::AssertionFailed);
            }
        }
        let outcome = self.plan(core, op, closed, fx)?;
        let after = match (&outcome, &fx.added) {
            (WriteOutcome::Record(record), _) => Some(record.clone()),
            (WriteOutcome::Added(_), Some((_, record))) => Some(record.clone()),
            _ => None,
        };
        Ok(WriteOutcome::Checked { before, after, outcome: Box::new(outcome) })
    }

    /// The staged record of `id`, or NoSuchObject.
    fn existing(&self, core: &ShardCore, id: EntryId) -> ShardResult<Arc<EntryRecord>> {
        self.record(core, id)?.ok_or(ShardError::NoSuchObject)
    }

    /// A new entry's ID, once its parent is open and its DN free: the sequence moves on
    /// only for an add that passes both checks.
    fn claim_id(
        &mut self,
        core: &ShardCore,
        parent: EntryId,
        rdn_norm: &str,
        closed: &dyn Fn(EntryId) -> bool,
        fx: &mut Effects,
    ) -> ShardResult<EntryId> {
        if closed(parent) {
            return Err(ShardError::ParentClosed);
        }
        if self.dn(core, parent, rdn_norm)?.is_some() {
            return Err(ShardError::AlreadyExists);
        }
        let id = EntryId::new(core.info.index, self.next_seq);
        self.next_seq += 1;
        fx.next_seq = Some(self.next_seq);
        Ok(id)
    }

    fn plan_add(
        &mut self,
        core: &ShardCore,
        id: EntryId,
        mut record: EntryRecord,
        author: &str,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        check_schema(core, &mut record, None)?;
        let stamp = self.stamp(core, author);
        stamp_created(&mut record.entry, &stamp);
        mesh_stamp(core, None, &mut record.entry, &stamp, false);
        if self.changelog_settings.is_enabled() {
            fx.changelog = Some(ChangeRecord {
                changes: changelog::added_ldif(&record.entry),
                ..self.change(ChangeKind::Add, stamp.micros, &record, author)
            });
        }
        fx.added = Some((id, Arc::new(record)));
        Ok(WriteOutcome::Added(id))
    }

    /// The changelog record of a change of `kind` to the entry `record` (its DN before the
    /// change) at `number`, with nothing in `changes` yet.
    fn change(&self, kind: ChangeKind, number: u64, record: &EntryRecord, author: &str) -> ChangeRecord {
        ChangeRecord {
            number,
            kind,
            target_dn: self.changelog_settings.dn_of(record.parent, &record.rdn),
            author: author.to_string(),
            changes: Vec::new(),
            new_rdn: String::new(),
            delete_old_rdn: false,
            new_superior: None,
        }
    }

    /// Whether a change by `author` goes to the changelog: it is on, and the change is not
    /// the replication consumer's (which copies a provider's changes: its changelog has them).
    fn logs_change(&self, author: &str) -> bool {
        self.changelog_settings.is_enabled() && author != REPLICA_AUTHOR
    }

    fn plan_delete(
        &mut self,
        core: &ShardCore,
        id: EntryId,
        author: &str,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        let old = self.existing(core, id)?;
        if old.is_container() {
            return Err(ShardError::NotAllowedOnNonLeaf);
        }
        let dn_here = shard_for_child(old.parent, &old.rdn_norm, core.info.count) == core.info.index;
        if dn_here && self.dn(core, old.parent, &old.rdn_norm)? == Some(id) {
            fx.dns.push((old.parent, old.rdn_norm.clone(), None));
        }
        // A delete takes a CSN too: the watermark (contextCSN) moves past it.
        let csn = self.stamp(core, "").micros;
        fx.logged = log_record(&self.deletelog_settings, csn, id, &old, true);
        fx.csn = csn;
        if self.logs_change(author) {
            fx.changelog = Some(self.change(ChangeKind::Delete, csn, &old, author));
        }
        fx.records.push((id, Some(old.clone()), None));
        Ok(WriteOutcome::Deleted { record: old, parent_has_children_here: true })
    }

    fn plan_modify(
        &mut self,
        core: &ShardCore,
        id: EntryId,
        changes: &[LdifMod],
        author: &str,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        let old = self.existing(core, id)?;
        let mut next = (*old).clone();
        apply_changes(&core.info.rules, &mut next.entry, changes)?;
        let stamp = self.stamp(core, author);
        stamp_modified(&mut next.entry, &stamp);
        mesh_stamp(core, Some(&old.entry), &mut next.entry, &stamp, false);
        if self.changelog_settings.is_enabled() {
            fx.changelog = Some(ChangeRecord {
                changes: changelog::modified_ldif(changes),
                ..self.change(ChangeKind::Modify, stamp.micros, &old, author)
            });
        }
        if next.parent != EntryId::ROOT {
            check_rdn_kept(&core.info.rules, &next)?;
        }
        check_structural_kept(&core.info.rules, &old, &next)?;
        check_schema(core, &mut next, Some(&old.entry))?;
        Ok(replaced(id, old, next, fx))
    }

    /// `update`'s changes to the staged entry, applied as a Modify's; none: no write.
    fn plan_update(
        &mut self,
        core: &ShardCore,
        id: EntryId,
        update: &dyn crate::write::update::EntryUpdate,
        author: &str,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        let old = self.existing(core, id)?;
        let changes = match update.changes(&old.entry) {
            Some(changes) if !changes.is_empty() => changes,
            _ => return Ok(WriteOutcome::Record(old)),
        };
        let mut next = (*old).clone();
        apply_changes(&core.info.rules, &mut next.entry, &changes)?;
        let stamp = self.stamp(core, author);
        stamp_modified(&mut next.entry, &stamp);
        mesh_stamp(core, Some(&old.entry), &mut next.entry, &stamp, false);
        check_schema(core, &mut next, Some(&old.entry))?;
        Ok(replaced(id, old, next, fx))
    }

    fn plan_set_container(
        &mut self,
        core: &ShardCore,
        id: EntryId,
        container: bool,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        let old = self.existing(core, id)?;
        let mut next = (*old).clone();
        next.flags = if container { next.flags | FLAG_CONTAINER } else { next.flags & !FLAG_CONTAINER };
        Ok(replaced(id, old, next, fx))
    }

    fn plan_put_dn(
        &mut self,
        core: &ShardCore,
        parent: EntryId,
        rdn_norm: String,
        id: EntryId,
        closed: &dyn Fn(EntryId) -> bool,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        match self.dn(core, parent, &rdn_norm)? {
            Some(existing) if existing != id => return Err(ShardError::AlreadyExists),
            Some(_) => {}
            None => {
                if closed(parent) {
                    return Err(ShardError::ParentClosed);
                }
                fx.dns.push((parent, rdn_norm, Some(id)));
            }
        }
        Ok(WriteOutcome::Done)
    }

    /// `next` is the entry under its new name, its values already renamed.
    fn plan_relocate(
        &mut self,
        core: &ShardCore,
        id: EntryId,
        old: Arc<EntryRecord>,
        mut next: EntryRecord,
        renaming: Renaming<'_>,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        let author = renaming.author;
        check_schema(core, &mut next, Some(&old.entry))?;
        let stamp = self.stamp(core, author);
        if self.logs_change(author) {
            let new_superior =
                (next.parent != old.parent).then(|| self.changelog_settings.dn_of_container(next.parent));
            fx.changelog = Some(ChangeRecord {
                new_rdn: next.rdn.clone(),
                delete_old_rdn: renaming.delete_old_rdn,
                new_superior: new_superior.map(Option::unwrap_or_default),
                ..self.change(ChangeKind::ModRdn, stamp.micros, &old, author)
            });
        }
        // A replicated move keeps the provider's stamps (the replace that follows
        // carries them); it is logged at this server's clock all the same, later
        // than the provider's CSN, so a delete phase served from here errs towards
        // sending a delete the consumer already had, never towards missing one.
        if author != REPLICA_AUTHOR {
            stamp_modified(&mut next.entry, &stamp);
            mesh_stamp(core, Some(&old.entry), &mut next.entry, &stamp, true);
        }
        // The old DN leaves every scope that held it: logged for delete phases.
        fx.logged = log_record(&self.deletelog_settings, stamp.micros, id, &old, false);
        fx.csn = stamp.micros;
        Ok(replaced(id, old, next, fx))
    }

    fn plan_rewrite_refs(
        &mut self,
        core: &ShardCore,
        id: EntryId,
        rewrite: &crate::refs::RefRewrite,
        author: &str,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        let Some(old) = self.record(core, id)? else { return Ok(WriteOutcome::Done) };
        let mut next = (*old).clone();
        if !rewrite.apply(&core.info.rules, &mut next.entry) {
            return Ok(WriteOutcome::Done);
        }
        let stamp = self.stamp(core, author);
        stamp_modified(&mut next.entry, &stamp);
        mesh_stamp(core, Some(&old.entry), &mut next.entry, &stamp, false);
        check_schema(core, &mut next, Some(&old.entry))?;
        Ok(replaced(id, old, next, fx))
    }

    fn plan_replica_add(
        &mut self,
        core: &ShardCore,
        id: EntryId,
        mut record: EntryRecord,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        crate::write::stamp::stamp_imported(&mut record.entry, &core.info.hub.clock().stamp(""));
        self.count_replicated_csn(core, &record.entry);
        check_schema(core, &mut record, None)?;
        fx.added = Some((id, Arc::new(record)));
        Ok(WriteOutcome::Added(id))
    }

    fn plan_replica_replace(
        &mut self,
        core: &ShardCore,
        id: EntryId,
        mut entry: Entry,
        fx: &mut Effects,
    ) -> ShardResult<WriteOutcome> {
        let old = self.existing(core, id)?;
        crate::write::stamp::stamp_imported(&mut entry, &core.info.hub.clock().stamp(""));
        self.count_replicated_csn(core, &entry);
        let mut next = EntryRecord {
            parent: old.parent,
            rdn: old.rdn.clone(),
            rdn_norm: old.rdn_norm.clone(),
            flags: old.flags,
            entry,
        };
        check_schema(core, &mut next, None)?;
        Ok(replaced(id, old, next, fx))
    }

    fn apply(&mut self, core: &ShardCore, fx: Effects) {
        let batch = &mut self.pending;
        if let Some(record) = &fx.logged {
            self.deletelog.record(record, self.deletelog_settings.max(), &mut batch.mutations);
        }
        let now = crate::write::changelog::now_micros();
        if let Some(record) = &fx.changelog {
            self.changelog.record(record, &self.changelog_settings, now, &mut batch.mutations);
            batch.changelog_last = batch.changelog_last.max(record.number);
        }
        if fx.trim_changelog {
            self.changelog.trim_expired(&self.changelog_settings, now, &mut batch.mutations);
        }
        if let Some(indexes) = fx.indexes {
            self.indexes = indexes;
        }
        let (indexes, rules) = (&self.indexes, &core.info.rules);
        let first = batch.mutations.len();
        let touched_first = batch.touched.len();
        if let Some(next) = fx.next_seq {
            batch.mutations.push(layout::next_seq(next));
        }
        batch.mutations.extend(fx.meta);
        batch.mutations.extend(fx.keys);
        if let Some((id, record)) = fx.added {
            // The layout `ferrodir import` writes too.
            batch.mutations.extend(layout::new_entry(indexes, rules, id, &record));
            batch.changes.push(crate::write::watermark::Change {
                id,
                old: None,
                new: Some(record.clone()),
                csn: 0,
            });
            batch.dns.insert((record.parent, record.rdn_norm.clone()), Some(id));
            batch.records.insert(id, Some(record.clone()));
            batch.touched.push((id, Some(record)));
        }
        for (parent, rdn_norm, target) in fx.dns {
            batch.mutations.push(layout::dn_record(parent, &rdn_norm, target));
            batch.dns.insert((parent, rdn_norm), target);
        }
        for (id, old, new) in fx.records {
            layout::entry_mutations(indexes, rules, id, old.as_deref(), new.as_deref(), &mut batch.mutations);
            let csn = |r: &Option<Arc<EntryRecord>>| {
                r.as_ref().map(|r| r.entry.first_str("entryCSN").map(str::to_string))
            };
            if csn(&old) != csn(&new) {
                batch.changes.push(crate::write::watermark::Change {
                    id,
                    old: old.clone(),
                    new: new.clone(),
                    csn: fx.csn,
                });
            }
            batch.records.insert(id, new.clone());
            batch.touched.push((id, new));
        }
        for put in batch.mutations.iter().skip(first).filter(|m| m.value.is_some()) {
            // Staged, so possibly not committed yet: the filter may only err towards "maybe".
            if let Some(prefix) = eqkey::bloom_key(&put.key) {
                core.info.bloom.insert(prefix);
            }
            core.info.grams.insert_posting(core.info.index, &put.key);
        }
        for (_, record) in batch.touched.iter().skip(touched_first) {
            if let Some(record) = record {
                core.info.grams.insert_entry(core.info.index, indexes, rules, &record.entry);
            }
        }
    }
}

#[derive(Default)]
struct Effects {
    next_seq: Option<u64>,
    /// A new entry (an Add): its record, DN→ID record and keys, as `layout::new_entry` lays them out.
    added: Option<(EntryId, Arc<EntryRecord>)>,
    dns: Vec<(EntryId, String, Option<EntryId>)>,
    records: Vec<RecordChange>,
    /// Metadata values (`WriteOp::PutMeta`).
    meta: Vec<Mutation>,
    /// A delete or a move: its delete-log record.
    logged: Option<crate::write::deletelog::LogRecord>,
    /// The clock tick of a delete's or a move's CSN (0: the entry's entryCSN says).
    csn: u64,
    /// The change's changelog record, when the changelog is on.
    changelog: Option<ChangeRecord>,
    /// `WriteOp::TrimChangelog`.
    trim_changelog: bool,
    /// An online build's index keys and readiness marks (`write::indexing`).
    keys: Vec<Mutation>,
    /// The indices writes maintain from now on (`write::indexing`).
    indexes: Option<Arc<crate::index::config::IndexConfig>>,
}

/// Who asked for a Modify DN, and how (what its changelog record says).
struct Renaming<'a> {
    author: &'a str,
    delete_old_rdn: bool,
}

/// `old` replaced by `next` in the batch: the op's outcome is the new record.
/// On a node of a multi-provider mesh, a local change's per-attribute CSNs
/// (`stamp::stamp_attribute_csns`); elsewhere nothing (no attribute, no cost).
fn mesh_stamp(core: &ShardCore, old: Option<&Entry>, new: &mut Entry, stamp: &Stamp, renamed: bool) {
    if core.info.hub.multi_provider() {
        crate::write::stamp::stamp_attribute_csns(old, new, &stamp.csn, renamed);
    }
}

fn replaced(id: EntryId, old: Arc<EntryRecord>, next: EntryRecord, fx: &mut Effects) -> WriteOutcome {
    let next = Arc::new(next);
    fx.records.push((id, Some(old), Some(next.clone())));
    WriteOutcome::Record(next)
}

/// A moved entry's values: the old RDN's `drop_values` removed if present, then the new
/// RDN's `add_values` added if absent.
fn renamed_entry(
    rules: &RuleTable,
    old: &Entry,
    drop_values: &[(String, Vec<u8>)],
    add_values: &[(String, Vec<u8>)],
) -> Entry {
    let mut entry = old.clone();
    for (name, value) in drop_values {
        remove_value(rules, &mut entry, name, value);
    }
    for (name, value) in add_values {
        add_value_if_absent(rules, &mut entry, name, value);
    }
    entry
}

/// The delete-log record of `old` leaving its DN at `csn`; None for an entry without an
/// entryUUID (none is stored without one).
fn log_record(
    settings: &crate::write::deletelog::DeleteLogSettings,
    csn: u64,
    id: EntryId,
    old: &EntryRecord,
    deleted: bool,
) -> Option<crate::write::deletelog::LogRecord> {
    let uuid =
        old.entry.first_str("entryUUID").and_then(|u| crate::write::stamp::uuid_octets(u.as_bytes()))?;
    Some(crate::write::deletelog::LogRecord {
        csn,
        uuid,
        id,
        subtree: old.is_container(),
        deleted,
        old_dn: settings.dn_of(old.parent, &old.rdn),
    })
}

/// An entry's record before and after a staged write (`None`: absent).
type RecordChange = (EntryId, Option<Arc<EntryRecord>>, Option<Arc<EntryRecord>>);

fn remove_value(rules: &RuleTable, entry: &mut Entry, name: &str, value: &[u8]) {
    let key = value_key(rules, name, value);
    let Some(index) = find_attr(rules, entry, name) else { return };
    let Some(attr) = entry.attrs.get_mut(index) else { return };
    attr.values.retain(|v| value_key(rules, name, v) != key);
    if attr.values.is_empty() {
        entry.attrs.remove(index);
    }
}

fn add_value_if_absent(rules: &RuleTable, entry: &mut Entry, name: &str, value: &[u8]) {
    let key = value_key(rules, name, value);
    match find_attr(rules, entry, name).and_then(|index| entry.attrs.get_mut(index)) {
        Some(attr) => {
            if !attr.values.iter().any(|v| value_key(rules, name, v) == key) {
                attr.values.push(value.to_vec());
            }
        }
        None => entry.attrs.push(Attribute::new(rules.display(name), vec![value.to_vec()])),
    }
}

/// The RDN of a record as a parsed [`Rdn`]: a suffix entry's "RDN" is its whole DN, whose
/// first RDN names it.
fn parsed_rdn(record_rdn: &str) -> Option<Rdn> {
    Dn::parse(record_rdn).ok().and_then(|dn| dn.rdns.into_iter().next())
}

/// Checks that every value of the entry's RDN is still in the entry (RFC 4511 §4.6: a Modify
/// may not remove them).
fn check_rdn_kept(rules: &RuleTable, record: &EntryRecord) -> ShardResult<()> {
    let Some(rdn) = parsed_rdn(&record.rdn) else { return Ok(()) };
    for ava in &rdn.avas {
        let key = value_key(rules, &ava.attr, &ava.value);
        let present = find_attr(rules, &record.entry, &ava.attr)
            .and_then(|i| record.entry.attrs.get(i))
            .is_some_and(|attr| attr.values.iter().any(|v| value_key(rules, &ava.attr, v) == key));
        if !present {
            return Err(ShardError::NotAllowedOnRdn(ava.attr.clone()));
        }
    }
    Ok(())
}

/// Checks the entry against the schema and records its structural object class. `old`:
/// the stored entry a change started from, whose attributes left as they were have their
/// values' syntax checked no more (`check_changed_entry`), nor the modification stamps
/// this shard just wrote (`stamp_modified`: no client may write them, the router refuses
/// NO-USER-MODIFICATION types); None checks everything.
fn check_schema(core: &ShardCore, record: &mut EntryRecord, old: Option<&Entry>) -> ShardResult<()> {
    let rdn = parsed_rdn(&record.rdn);
    let mut kept = old.map(|old| record.entry.kept_from(old).new).unwrap_or_default();
    for (flag, attr) in kept.iter_mut().zip(&record.entry.attrs) {
        *flag = *flag || MODIFY_STAMPS.iter().any(|stamp| attr.name.eq_ignore_ascii_case(stamp));
    }
    let checked =
        check_changed_entry(&core.info.schema, &record.entry, &kept, rdn.as_ref(), core.info.rules.dn())
            .map_err(ShardError::Schema)?;
    set_structural_class(&mut record.entry, checked.structural_class);
    Ok(())
}

/// The attributes `stamp_modified` writes on every change of an entry.
const MODIFY_STAMPS: [&str; 3] = ["entryCSN", "modifiersName", "modifyTimestamp"];

/// RFC 4512 §2.4.2: an entry's structural object class can't change (slapd:
/// objectClassModsProhibited). Checked before the rest of the schema, as slapd does: the
/// new objectClass values must still hold the old structural class, and any other
/// structural class among them must be one of its superclasses.
fn check_structural_kept(rules: &RuleTable, old: &EntryRecord, new: &EntryRecord) -> ShardResult<()> {
    let Some(before) = old.entry.first_str("structuralObjectClass") else { return Ok(()) };
    let Some(lineage) = rules.class_lineage(before.as_bytes()) else { return Ok(()) };
    let values: Vec<&Vec<u8>> = new
        .entry
        .attrs
        .iter()
        .filter(|a| a.name.eq_ignore_ascii_case("objectClass"))
        .flat_map(|a| &a.values)
        .collect();
    // No class at all, or an unknown one: the schema check names that problem instead.
    if values.is_empty() || values.iter().any(|v| rules.class_lineage(v).is_none()) {
        return Ok(());
    }
    let mut keeps = false;
    for value in values {
        let Some(class) = rules.class_lineage(value).and_then(|l| l.first()) else { continue };
        if Some(class) == lineage.first() {
            keeps = true;
        } else if rules.is_structural(class) && !lineage.contains(class) {
            return Err(prohibited(before, class));
        }
    }
    if keeps {
        Ok(())
    } else {
        Err(prohibited(before, "(none)"))
    }
}

fn prohibited(before: &str, after: &str) -> ShardError {
    ShardError::Schema(Violation {
        code: ferrodir_proto::ResultCode::OBJECT_CLASS_MODS_PROHIBITED,
        message: format!("structural object class modification from '{before}' to '{after}' not allowed"),
    })
}
