//! Building an index while the shard serves: the writer's steps of an online build
//! (`WriteOp::Index`), each a bounded piece of work staged in a batch with the clients'
//! writes, so that no step holds the writer for long and each is as durable as they are.
//!
//! Whoever drives the build (the server's index builder) sends, to every shard:
//! 1. [`IndexWork::Configure`] with the target configuration minus the indices to build,
//!    removing their readiness marks: from this batch on no write adds their keys;
//! 2. [`IndexWork::Clear`] for each of them until none is left: keys an earlier
//!    configuration left behind (an index removed and configured again) are gone;
//! 3. [`IndexWork::Configure`] with the whole target: from here every write maintains them;
//! 4. [`IndexWork::Build`] from the first entry to the last: each step adds the keys of the
//!    entries it visits, as they are staged (an entry a write changed since its last commit
//!    is indexed as that write left it, so a step and a write never disagree);
//! 5. [`IndexWork::Mark`] once every shard is through.
//!
//! Each step is sent after the previous one's answer, which comes once its batch is
//! durable: so a step reads a snapshot that holds every batch staged before it. Until the
//! marks are set searches don't use the index (`IndexConfig::usable`, in the router's copy
//! of the configuration); a restart half-way finds no mark and builds again.

use std::sync::Arc;

use crate::core::ShardCore;
use crate::entry::record::EntryRecord;
use crate::error::ShardResult;
use crate::id::EntryId;
use crate::index::config::{IndexConfig, IndexKind};
use crate::index::{keys, marks};
use crate::storage::Mutation;

/// One step of an online index build (the module's doc comment has the order).
#[derive(Debug, Clone)]
pub enum IndexWork {
    /// The indices writes maintain from this batch on; the marks of `unmark` are removed
    /// in the same batch.
    Configure { indexes: Arc<IndexConfig>, unmark: Vec<(String, IndexKind)> },
    /// Delete up to `limit` keys of one index (answered with how many: 0 when none is left).
    Clear { attr: String, kind: IndexKind, limit: usize },
    /// Add the keys `indexes` gives the first `limit` entries after `after` (None: from the
    /// first). Answered with the entries visited and the last one's id, or None once the
    /// shard has no entry left past them.
    Build { indexes: Arc<IndexConfig>, after: Option<EntryId>, limit: usize },
    /// Mark these indices ready on this shard.
    Mark { ready: Vec<(String, IndexKind)> },
}

/// What a step stages: its keys and marks, the indices writes maintain from its batch on
/// (a [`IndexWork::Configure`]), how much it did and where the next [`IndexWork::Build`]
/// starts (None: the shard has no entry left past it).
#[derive(Default)]
pub(crate) struct Planned {
    pub keys: Vec<Mutation>,
    pub indexes: Option<Arc<IndexConfig>>,
    pub done: usize,
    pub next: Option<EntryId>,
}

/// Plans one step on `core`'s shard; `staged` gives an entry as the writer's batches left
/// it (a write waiting in a batch changed or deleted it since its commit).
pub(crate) fn plan(
    core: &ShardCore,
    work: IndexWork,
    staged: &dyn Fn(EntryId) -> ShardResult<Option<Arc<EntryRecord>>>,
) -> ShardResult<Planned> {
    let mut planned = Planned::default();
    match work {
        IndexWork::Configure { indexes, unmark } => {
            planned.keys.extend(unmark.iter().map(|(attr, kind)| marks::mark(attr, *kind, false)));
            planned.indexes = Some(indexes);
        }
        IndexWork::Clear { attr, kind, limit } => {
            let prefix = keys::index_attr_prefix(kind.table(), &attr);
            let keys = &mut planned.keys;
            core.snapshot().scan_prefix(&prefix, &mut |key, _| {
                keys.push(Mutation { key: key.to_vec(), value: None });
                keys.len() < limit
            })?;
            planned.done = planned.keys.len();
        }
        IndexWork::Build { indexes, after, limit } => {
            build(core, &indexes, after, limit, staged, &mut planned)?
        }
        IndexWork::Mark { ready } => {
            planned.keys.extend(ready.iter().map(|(attr, kind)| marks::mark(attr, *kind, true)));
        }
    }
    Ok(planned)
}

fn build(
    core: &ShardCore,
    indexes: &IndexConfig,
    after: Option<EntryId>,
    limit: usize,
    staged: &dyn Fn(EntryId) -> ShardResult<Option<Arc<EntryRecord>>>,
    planned: &mut Planned,
) -> ShardResult<()> {
    let prefix = keys::entries_prefix();
    let from = match after {
        // Just past `after`'s key: the next id in key order.
        Some(id) => {
            let mut key = keys::entry(id);
            key.push(0);
            key
        }
        None => prefix.clone(),
    };
    let mut ids = Vec::with_capacity(limit.min(4096));
    core.snapshot().scan_from(&prefix, &from, &mut |key, _| {
        if let Some(id) = keys::trailing_id(key) {
            ids.push(id);
        }
        ids.len() < limit
    })?;
    let rules = &core.info.rules;
    for id in &ids {
        let Some(record) = staged(*id)? else { continue };
        indexes.each_key(rules, *id, &record.entry, &mut |key| {
            planned.keys.push(Mutation { key: key.to_vec(), value: Some(Vec::new()) });
        });
        // Only ever a bit more set: the table errs towards "maybe" (`gramsummary`).
        core.info.grams.insert_entry(core.info.index, indexes, rules, &record.entry);
    }
    planned.done = ids.len();
    planned.next = if ids.len() < limit { None } else { ids.last().copied() };
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::rc::Rc;

    use actix::prelude::*;
    use ferrodir_proto::entry::{Attribute, Entry};
    use ferrodir_proto::schema::Schema;

    use super::*;
    use crate::actor::{ShardActor, Write};
    use crate::core::ShardInfo;
    use crate::rules::RuleTable;
    use crate::storage::Table;
    use crate::write::batch::{WriteOp, WriteOutcome};

    fn shard(index: &[&str]) -> Rc<ShardCore> {
        let schema = Arc::new(Schema::standard());
        let rules = Arc::new(RuleTable::from_schema(&schema));
        let info = ShardInfo {
            index: 0,
            count: 1,
            entry_cache: None,
            indexes: Arc::new(IndexConfig::from_directives(index, &rules).unwrap()),
            schema,
            rules,
            bloom: Default::default(),
            grams: Default::default(),
            hub: crate::write::watermark::Hub::new(1, 0),
        };
        let engine: Arc<dyn crate::storage::KvEngine> = Arc::from(crate::storage::open_in_memory().unwrap());
        Rc::new(ShardCore::new(info, engine).unwrap())
    }

    async fn add_person(addr: &Addr<ShardActor>, cn: &str, sn: &str) -> EntryId {
        let op = WriteOp::Add {
            author: "cn=test".into(),
            parent: EntryId::ROOT,
            rdn: format!("cn={cn}"),
            rdn_norm: format!("cn={cn}"),
            entry: Entry::new(vec![
                Attribute::new("objectClass", vec![b"person".to_vec()]),
                Attribute::new("cn", vec![cn.as_bytes().to_vec()]),
                Attribute::new("sn", vec![sn.as_bytes().to_vec()]),
            ]),
        };
        match addr.send(Write(op)).await.unwrap().unwrap() {
            WriteOutcome::Added(id) => id,
            other => panic!("{other:?}"),
        }
    }

    fn held(core: &ShardCore, table: Table, attr: &str) -> BTreeSet<Vec<u8>> {
        let mut out = BTreeSet::new();
        core.snapshot()
            .scan_prefix(&keys::index_attr_prefix(table, attr), &mut |key, _| {
                out.insert(key.to_vec());
                true
            })
            .unwrap();
        out
    }

    /// Stale keys are cleared, the build adds exactly what a shard configured so from the
    /// start holds, a write staged between two steps is indexed as written, and the marks
    /// are set at the end.
    #[test]
    fn a_build_in_steps_gives_the_keys_writes_give() {
        let system = actix::System::new();
        system.block_on(async {
            let core = shard(&["objectClass eq"]);
            let addr = ShardActor::new(core.clone()).unwrap().start();
            for n in 0..25 {
                add_person(&addr, &format!("p{n}"), &format!("sn{n}")).await;
            }
            let rules = core.info.rules.clone();
            let target =
                Arc::new(IndexConfig::from_directives(&["objectClass eq", "sn eq,sub"], &rules).unwrap());
            let building: Vec<(String, IndexKind)> =
                vec![("sn".into(), IndexKind::Equality), ("sn".into(), IndexKind::Substring)];
            let send = |work: IndexWork| addr.send(Write(WriteOp::Index(work)));
            // A stale posting, as an index removed earlier leaves behind.
            let mut stale = keys::eq_prefix("sn", b"gone");
            stale.extend_from_slice(&EntryId::new(0, 999).to_be_bytes());
            core.engine().commit(&[Mutation { key: stale.clone(), value: Some(Vec::new()) }]).unwrap();
            core.refresh_snapshot().unwrap();

            let without = Arc::new(target.restricted(|a, k| !building.contains(&(a.to_string(), k))));
            send(IndexWork::Configure { indexes: without, unmark: building.clone() }).await.unwrap().unwrap();
            for (attr, kind) in &building {
                loop {
                    let work = IndexWork::Clear { attr: attr.clone(), kind: *kind, limit: 7 };
                    match send(work).await.unwrap().unwrap() {
                        WriteOutcome::Progress { done: 0, .. } => break,
                        WriteOutcome::Progress { .. } => {}
                        other => panic!("{other:?}"),
                    }
                }
            }
            assert!(held(&core, Table::Eq, "sn").is_empty(), "cleared");
            send(IndexWork::Configure { indexes: target.clone(), unmark: Vec::new() })
                .await
                .unwrap()
                .unwrap();
            let only = Arc::new(target.restricted(|a, k| building.contains(&(a.to_string(), k))));
            let (mut after, mut visited, mut steps) = (None, 0, 0);
            loop {
                let work = IndexWork::Build { indexes: only.clone(), after, limit: 10 };
                let WriteOutcome::Progress { done, next } = send(work).await.unwrap().unwrap() else {
                    panic!("not a progress")
                };
                visited += done;
                steps += 1;
                if steps == 1 {
                    // A write between two steps: the target configuration maintains it.
                    add_person(&addr, "late", "latecomer").await;
                }
                match next {
                    Some(id) => after = Some(id),
                    None => break,
                }
            }
            assert_eq!(visited, 26, "every entry once");
            send(IndexWork::Mark { ready: building.clone() }).await.unwrap().unwrap();

            let mut expected = BTreeSet::new();
            crate::offline::each_entry(core.snapshot().as_ref(), &mut |stored| {
                if let crate::offline::Stored::Entry(id, record) = stored {
                    expected.extend(only.keys_for(&rules, id, &record.entry));
                }
                true
            })
            .unwrap();
            let mut keys = held(&core, Table::Eq, "sn");
            keys.extend(held(&core, Table::Sub, "sn"));
            assert!(!keys.contains(&stale), "the stale posting is gone");
            assert_eq!(keys, expected);
            assert!(
                keys.iter().any(|k| k.windows(9).any(|w| w == b"latecomer")),
                "the late write is indexed"
            );
            let marked = marks::marked(core.snapshot().as_ref()).unwrap();
            assert!(building.iter().all(|b| marked.contains(b)), "{marked:?}");
        });
    }
}
