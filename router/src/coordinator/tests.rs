//! A shard that fails the last step of a cross-shard change: the change is answered as done,
//! the stale name is withdrawn from lookups at once, and start-up recovery removes it.

use std::rc::Rc;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::schema::Schema;
use ferrodir_shard::storage::{EngineKind, KvEngine, KvSnapshot, Mutation, StorageError, StorageResult};
use ferrodir_shard::EntryId;
use ferrodir_shard::{
    shard_for_child, IndexConfig, RuleTable, ShardActor, ShardCore, ShardInfo, Skeleton, SkeletonCell, Write,
    WriteOp, WriteOutcome,
};

use ferrodir_proto::Dn;

use super::{AddUnder, Coordinator, DeleteEntry, MoveEntry, Origin, Recover, RefintConfig};
use crate::intent::IntentLog;
use crate::located::Located;

const SHARDS: usize = 2;

/// Refuses any commit that touches `refused`, as a shard on a full disk refuses them all.
struct Flaky {
    inner: Box<dyn KvEngine>,
    refused: Mutex<Option<Vec<u8>>>,
}

impl Flaky {
    fn refuse(&self, key: Option<Vec<u8>>) {
        *self.refused.lock().unwrap() = key;
    }
}

impl KvEngine for Flaky {
    fn snapshot(&self) -> StorageResult<Box<dyn KvSnapshot>> {
        self.inner.snapshot()
    }

    fn commit(&self, batch: &[Mutation]) -> StorageResult<()> {
        let refused = self.refused.lock().unwrap().clone();
        if refused.is_some_and(|key| batch.iter().any(|m| m.key == key)) {
            return Err(StorageError("I/O error: No space left on device (os error 28)".into()));
        }
        self.inner.commit(batch)
    }
}

fn info(index: usize, hub: &Arc<ferrodir_shard::Hub>) -> ShardInfo {
    let schema = Arc::new(Schema::standard());
    let rules = Arc::new(RuleTable::from_schema(&schema));
    let indexes = Arc::new(IndexConfig::from_directives(&["member,seeAlso eq"], &rules).unwrap());
    ShardInfo {
        index,
        count: SHARDS,
        entry_cache: Some(Arc::new(ferrodir_shard::EntryCache::new(1 << 20, rules.clone()))),
        indexes,
        schema,
        rules,
        bloom: Default::default(),
        grams: Default::default(),
        hub: hub.clone(),
    }
}

fn entry(class: &str, attr: &str, value: &str) -> Entry {
    let mut attrs = vec![
        Attribute::new("objectClass", vec![class.as_bytes().to_vec()]),
        Attribute::new(attr, vec![value.as_bytes().to_vec()]),
    ];
    if class == "person" {
        attrs.push(Attribute::new("sn", vec![b"x".to_vec()]));
    }
    Entry::new(attrs)
}

fn add(parent: EntryId, attr: &str, value: &str, class: &str) -> WriteOp {
    WriteOp::Add {
        parent,
        rdn: format!("{attr}={value}"),
        rdn_norm: format!("{attr}={value}"),
        entry: entry(class, attr, value),
        author: "cn=test".into(),
    }
}

struct Setup {
    cores: Vec<Rc<ShardCore>>,
    engines: Vec<Arc<Flaky>>,
    cell: Arc<SkeletonCell>,
    coordinator: Addr<Coordinator>,
    parent: EntryId,
    leaf: EntryId,
}

/// Two shards, a container `o=p` and a leaf `cn=l` under it.
async fn setup(dir: &std::path::Path) -> Setup {
    setup_with(dir, None).await
}

/// As [`setup`], with referential integrity configured.
async fn setup_with(dir: &std::path::Path, refint: Option<Arc<RefintConfig>>) -> Setup {
    let mut cores = Vec::new();
    let mut engines = Vec::new();
    let mut shards = Vec::new();
    let hub = ferrodir_shard::Hub::new(SHARDS, 0);
    for index in 0..SHARDS {
        let engine = Arc::new(Flaky {
            inner: EngineKind::Redb.open(dir, index, &Default::default()).unwrap(),
            refused: Mutex::new(None),
        });
        let core = Rc::new(ShardCore::new(info(index, &hub), engine.clone()).unwrap());
        shards.push(ShardActor::new(core.clone()).unwrap().start());
        cores.push(core);
        engines.push(engine);
    }
    let cell = Arc::new(SkeletonCell::new(Skeleton::default()));
    let log = IntentLog::open(&dir.join("coordinator.redb"), &Default::default()).unwrap();
    let coordinator = Coordinator::new(shards.clone(), cell.clone(), log, refint).start();
    let home = shard_for_child(EntryId::ROOT, "o=p", SHARDS);
    let added = shards[home].send(Write(add(EntryId::ROOT, "o", "p", "organization"))).await.unwrap();
    let Ok(WriteOutcome::Added(parent)) = added else { panic!("add o=p: {added:?}") };
    let op = add(parent, "cn", "l", "person");
    let added = coordinator.send(AddUnder { parent, shard: shard_for_child(parent, "cn=l", SHARDS), op });
    let Ok(WriteOutcome::Added(leaf)) = added.await.unwrap() else { panic!("add cn=l") };
    Setup { cores, engines, cell, coordinator, parent, leaf }
}

/// A name under `parent` whose DN→ID record lives on another shard than `cn=l`'s.
fn name_elsewhere(parent: EntryId) -> String {
    let old_shard = shard_for_child(parent, "cn=l", SHARDS);
    (0..100)
        .map(|i| format!("m{i}"))
        .find(|name| shard_for_child(parent, &format!("cn={name}"), SHARDS) != old_shard)
        .unwrap()
}

fn delete(target: Located) -> DeleteEntry {
    let dn = Dn::parse(&format!("{},o=p", target.rdn_norm)).unwrap();
    DeleteEntry { target, dn, origin: Origin::Client, author: "cn=test".into(), check: None }
}

fn lookup(s: &Setup, rdn_norm: &str) -> Option<EntryId> {
    let shard = shard_for_child(s.parent, rdn_norm, SHARDS);
    s.cores[shard].lookup_dn(s.parent, rdn_norm).unwrap()
}

#[test]
fn a_failed_last_step_withdraws_the_stale_name_until_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let system = actix::System::new();
    system.block_on(async {
        let s = setup(dir.path()).await;
        let (parent, leaf) = (s.parent, s.leaf);
        let name = name_elsewhere(parent);
        let new_rdn = format!("cn={name}");

        // Modify DN: the old name's shard refuses the removal of the old name.
        let old_shard = shard_for_child(parent, "cn=l", SHARDS);
        s.engines[old_shard].refuse(Some(ferrodir_shard::offline::dn_key(parent, "cn=l")));
        let moved = s.coordinator.send(MoveEntry {
            target: Located { id: leaf, parent, rdn_norm: "cn=l".into(), container: false },
            new_parent: parent,
            new_rdn: new_rdn.clone(),
            new_rdn_norm: new_rdn.clone(),
            drop_values: vec![("cn".into(), b"l".to_vec())],
            add_values: vec![("cn".into(), name.as_bytes().to_vec())],
            author: "cn=test".into(),
            delete_old_rdn: true,
            old_dn: Dn::parse("cn=l,o=p").unwrap(),
            new_dn: Dn::parse(&format!("{new_rdn},o=p")).unwrap(),
            origin: Origin::Client,
            check: None,
        });
        moved.await.unwrap().expect("the move is decided once the entry moved");
        assert_eq!(lookup(&s, "cn=l"), Some(leaf), "the old name is still stored");
        assert!(s.cell.load().is_withdrawn(parent, "cn=l", leaf), "but not withdrawn from lookups");
        assert_eq!(lookup(&s, &new_rdn), Some(leaf));

        // Delete: the name's shard (not the entry's) refuses the removal of the name.
        let name_shard = shard_for_child(parent, &new_rdn, SHARDS);
        assert_ne!(name_shard, leaf.shard());
        s.engines[name_shard].refuse(Some(ferrodir_shard::offline::dn_key(parent, &new_rdn)));
        let target = Located { id: leaf, parent, rdn_norm: new_rdn.clone(), container: false };
        s.coordinator.send(delete(target)).await.unwrap().expect("the delete is decided");
        assert!(s.cores[leaf.shard()].record(leaf).unwrap().is_none());
        assert!(s.cell.load().is_withdrawn(parent, &new_rdn, leaf));

        // As at the next start: both intents are still logged, and recovery removes both names.
        for engine in &s.engines {
            engine.refuse(None);
        }
        let recovered = s.coordinator.send(Recover).await.unwrap().unwrap();
        assert_eq!(recovered, 2, "an intent was cleared before its change was finished");
        assert_eq!(lookup(&s, "cn=l"), None);
        assert_eq!(lookup(&s, &new_rdn), None);
    });
}

fn move_leaf_to(s: &Setup, new_rdn: &str, name: &str) -> MoveEntry {
    MoveEntry {
        target: Located { id: s.leaf, parent: s.parent, rdn_norm: "cn=l".into(), container: false },
        new_parent: s.parent,
        new_rdn: new_rdn.into(),
        new_rdn_norm: new_rdn.into(),
        drop_values: vec![("cn".into(), b"l".to_vec())],
        add_values: vec![("cn".into(), name.as_bytes().to_vec())],
        author: "cn=test".into(),
        delete_old_rdn: true,
        old_dn: Dn::parse("cn=l,o=p").unwrap(),
        new_dn: Dn::parse(&format!("{new_rdn},o=p")).unwrap(),
        origin: Origin::Client,
        check: None,
    }
}

#[test]
fn a_move_the_shard_refused_for_sure_clears_its_intent() {
    let dir = tempfile::tempdir().unwrap();
    let system = actix::System::new();
    system.block_on(async {
        let s = setup(dir.path()).await;
        let taken_shard = shard_for_child(s.parent, "cn=taken", SHARDS);
        let op = add(s.parent, "cn", "taken", "person");
        let added = s.coordinator.send(AddUnder { parent: s.parent, shard: taken_shard, op }).await.unwrap();
        assert!(matches!(added, Ok(WriteOutcome::Added(_))), "{added:?}");

        // The reservation of the new name is refused (entryAlreadyExists): nothing happened.
        let moved = s.coordinator.send(move_leaf_to(&s, "cn=taken", "taken")).await.unwrap();
        assert_eq!(moved.unwrap_err().code, ferrodir_proto::ResultCode::ENTRY_ALREADY_EXISTS);
        let recovered = s.coordinator.send(Recover).await.unwrap().unwrap();
        assert_eq!(recovered, 0, "a change known not to have happened left its intent behind");
        assert_eq!(lookup(&s, "cn=l"), Some(s.leaf));
    });
}

#[test]
fn a_move_whose_outcome_is_unknown_is_left_to_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let system = actix::System::new();
    system.block_on(async {
        let s = setup(dir.path()).await;
        let name = name_elsewhere(s.parent);
        let new_rdn = format!("cn={name}");

        // Relocating the entry fails with a storage error: the commit may have reached the
        // disk, so the coordinator may not decide, whatever LDAP code that error maps to.
        s.engines[s.leaf.shard()].refuse(Some(ferrodir_shard::offline::entry_key(s.leaf)));
        let moved = s.coordinator.send(move_leaf_to(&s, &new_rdn, &name)).await.unwrap();
        assert!(moved.is_err());
        s.engines[s.leaf.shard()].refuse(None);

        let recovered = s.coordinator.send(Recover).await.unwrap().unwrap();
        assert_eq!(recovered, 1, "an intent was cleared although the outcome was unknown");
        // The entry did not move: recovery keeps the old name and drops the new one.
        assert_eq!(lookup(&s, "cn=l"), Some(s.leaf));
        assert_eq!(lookup(&s, &new_rdn), None);
    });
}

fn refint_config(nothing: Option<&str>) -> Option<Arc<RefintConfig>> {
    Some(Arc::new(RefintConfig {
        attrs: vec!["member".into(), "seealso".into()],
        nothing: nothing.map(String::from),
        modifiers_name: "cn=Referential Integrity Overlay".into(),
        rules: Arc::new(RuleTable::from_schema(&Schema::standard())),
    }))
}

/// Adds `cn=<name>` under the root, on another shard than the leaf's entry, a groupOfNames
/// whose member and seeAlso hold `members`.
async fn add_group(s: &Setup, members: &[&str]) -> EntryId {
    let name = (0..100)
        .map(|i| format!("g{i}"))
        .find(|n| shard_for_child(EntryId::ROOT, &format!("cn={n}"), SHARDS) != s.leaf.shard())
        .unwrap();
    let values: Vec<Vec<u8>> = members.iter().map(|m| m.as_bytes().to_vec()).collect();
    let entry = Entry::new(vec![
        Attribute::new("objectClass", vec![b"groupOfNames".to_vec()]),
        Attribute::new("cn", vec![name.as_bytes().to_vec()]),
        Attribute::new("member", values.clone()),
        Attribute::new("seeAlso", values),
    ]);
    let rdn = format!("cn={name}");
    let op = WriteOp::Add {
        parent: EntryId::ROOT,
        rdn: rdn.clone(),
        rdn_norm: rdn,
        entry,
        author: "cn=test".into(),
    };
    let shard = shard_for_child(EntryId::ROOT, &format!("cn={name}"), SHARDS);
    let added = s.coordinator.send(AddUnder { parent: EntryId::ROOT, shard, op }).await.unwrap();
    let Ok(WriteOutcome::Added(id)) = added else { panic!("add group: {added:?}") };
    id
}

fn values_of(s: &Setup, id: EntryId, name: &str) -> Vec<String> {
    let record = s.cores[id.shard()].record(id).unwrap().unwrap();
    record
        .entry
        .get(name)
        .map(|a| a.values.iter().map(|v| String::from_utf8_lossy(v).into_owned()).collect())
        .unwrap_or_default()
}

fn leaf_target(s: &Setup) -> Located {
    Located { id: s.leaf, parent: s.parent, rdn_norm: "cn=l".into(), container: false }
}

#[test]
fn refint_removes_a_deleted_entrys_references_on_other_shards() {
    let dir = tempfile::tempdir().unwrap();
    let system = actix::System::new();
    system.block_on(async {
        let s = setup_with(dir.path(), refint_config(None)).await;
        let group = add_group(&s, &["CN=L, O=P", "cn=other,o=p"]).await;
        s.coordinator.send(delete(leaf_target(&s))).await.unwrap().unwrap();
        assert_eq!(values_of(&s, group, "member"), vec!["cn=other,o=p"]);
        assert_eq!(values_of(&s, group, "seeAlso"), vec!["cn=other,o=p"]);
        assert_eq!(values_of(&s, group, "modifiersName"), vec!["cn=Referential Integrity Overlay"]);
    });
}

#[test]
fn refint_puts_the_placeholder_in_place_of_the_last_member() {
    let dir = tempfile::tempdir().unwrap();
    let system = actix::System::new();
    system.block_on(async {
        let s = setup_with(dir.path(), refint_config(Some("cn=nobody"))).await;
        let group = add_group(&s, &["cn=l,o=p"]).await;
        s.coordinator.send(delete(leaf_target(&s))).await.unwrap().unwrap();
        assert_eq!(values_of(&s, group, "member"), vec!["cn=nobody"]);
    });
}

#[test]
fn refint_rewrites_a_renamed_entrys_references() {
    let dir = tempfile::tempdir().unwrap();
    let system = actix::System::new();
    system.block_on(async {
        let s = setup_with(dir.path(), refint_config(None)).await;
        let group = add_group(&s, &["cn=l,o=p"]).await;
        s.coordinator.send(move_leaf_to(&s, "cn=renamed", "renamed")).await.unwrap().unwrap();
        assert_eq!(values_of(&s, group, "member"), vec!["cn=renamed,o=p"]);
    });
}

/// The hook a replication consumer will use: a replicated change brings the supplier's own
/// reference rewrites, so refint leaves it alone.
#[test]
fn refint_skips_replicated_changes() {
    let dir = tempfile::tempdir().unwrap();
    let system = actix::System::new();
    system.block_on(async {
        let s = setup_with(dir.path(), refint_config(None)).await;
        let group = add_group(&s, &["cn=l,o=p"]).await;
        let mut request = delete(leaf_target(&s));
        request.origin = Origin::Replication;
        s.coordinator.send(request).await.unwrap().unwrap();
        assert!(s.cores[s.leaf.shard()].record(s.leaf).unwrap().is_none(), "deleted");
        assert_eq!(values_of(&s, group, "member"), vec!["cn=l,o=p"], "a replicated delete was rewritten");
    });
}

/// The delete is done, the group's shard fails the rewrite (its outcome unknown): the
/// intent stays, and recovery at the next start removes the reference.
#[test]
fn refint_left_unfinished_is_finished_by_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let system = actix::System::new();
    system.block_on(async {
        let s = setup_with(dir.path(), refint_config(None)).await;
        let group = add_group(&s, &["cn=l,o=p", "cn=other,o=p"]).await;
        s.engines[group.shard()].refuse(Some(ferrodir_shard::offline::entry_key(group)));
        s.coordinator.send(delete(leaf_target(&s))).await.unwrap().expect("the delete is done");
        s.engines[group.shard()].refuse(None);
        assert!(s.cores[s.leaf.shard()].record(s.leaf).unwrap().is_none());
        assert_eq!(values_of(&s, group, "member"), vec!["cn=l,o=p", "cn=other,o=p"]);
        let recovered = s.coordinator.send(Recover).await.unwrap().unwrap();
        assert_eq!(recovered, 1, "the refint intent was not left for recovery");
        assert_eq!(values_of(&s, group, "member"), vec!["cn=other,o=p"]);
    });
}

/// A delete refused (here: the entry has children) rewrites nothing and leaves no intent.
#[test]
fn refint_does_nothing_for_a_refused_delete() {
    let dir = tempfile::tempdir().unwrap();
    let system = actix::System::new();
    system.block_on(async {
        let s = setup_with(dir.path(), refint_config(None)).await;
        let group = add_group(&s, &["o=p"]).await;
        let target = Located { id: s.parent, parent: EntryId::ROOT, rdn_norm: "o=p".into(), container: true };
        let request = DeleteEntry {
            target,
            dn: Dn::parse("o=p").unwrap(),
            origin: Origin::Client,
            author: "cn=test".into(),
            check: None,
        };
        assert!(s.coordinator.send(request).await.unwrap().is_err());
        assert_eq!(values_of(&s, group, "member"), vec!["o=p"]);
        assert_eq!(s.coordinator.send(Recover).await.unwrap().unwrap(), 0);
    });
}
