//! Offline bulk loading (`ferrodir import`, and the example data of a new directory).
//!
//! Placement is computed here exactly as the live server would compute it: each entry's
//! home shard is `shard_for_child(parent id, normalised RDN)`, parents become containers as
//! their first child is read. Each shard's entries are then committed in one durable
//! transaction, all shards in parallel.

use std::collections::HashMap;
use std::io::BufRead;

use anyhow::Context as _;
use ferrodir_proto::ldif::{LdifReader, LdifRecord};
use ferrodir_proto::schema::check::check_entry;
use ferrodir_proto::schema::Schema;
use ferrodir_proto::Dn;
use ferrodir_router::DirectoryConfig;
use ferrodir_shard::id::shard_for_child;
use ferrodir_shard::keys;
use ferrodir_shard::record::{EntryRecord, FLAG_CONTAINER};
use ferrodir_shard::stamp::{stamp_imported, Stamp};
use ferrodir_shard::storage::Mutation;
use ferrodir_shard::EntryId;

use crate::store::Store;

#[derive(Debug, Default)]
pub struct LoadReport {
    pub entries: usize,
    pub skipped: Vec<String>,
}

struct Placed {
    id: EntryId,
    record: EntryRecord,
}

/// Loads LDIF content records into an empty store. With `keep_going`, bad records are
/// reported and skipped; without it the first one stops the load before anything is written.
pub fn load_ldif(
    store: &Store,
    directory: &DirectoryConfig,
    input: impl BufRead,
    keep_going: bool,
) -> anyhow::Result<LoadReport> {
    ensure_empty(store)?;
    let shard_count = store.engines.len();
    let mut placed: Vec<Placed> = Vec::new();
    let mut by_dn: HashMap<String, usize> = HashMap::new();
    let mut next_seq = vec![1u64; shard_count];
    let mut report = LoadReport::default();
    for item in LdifReader::new(input) {
        let outcome = item.map_err(|e| e.to_string()).and_then(|(line, record)| {
            place(directory, &store.schema, record, &mut placed, &mut by_dn, &mut next_seq, shard_count)
                .map_err(|e| format!("line {line}: {e}"))
        });
        if let Err(problem) = outcome {
            if !keep_going {
                anyhow::bail!("{problem} (nothing was imported; --continue skips bad records)");
            }
            report.skipped.push(problem);
        }
    }
    report.entries = placed.len();
    commit_all(store, placed, &next_seq)?;
    Ok(report)
}

fn ensure_empty(store: &Store) -> anyhow::Result<()> {
    for (index, engine) in store.engines.iter().enumerate() {
        let mut found = false;
        engine.snapshot()?.scan_prefix(&keys::entries_prefix(), &mut |_, _| {
            found = true;
            false
        })?;
        if found {
            anyhow::bail!(
                "shard {index} already holds entries: import loads only a new, empty data directory"
            );
        }
    }
    Ok(())
}

fn place(
    directory: &DirectoryConfig,
    schema: &Schema,
    record: LdifRecord,
    placed: &mut Vec<Placed>,
    by_dn: &mut HashMap<String, usize>,
    next_seq: &mut [u64],
    shard_count: usize,
) -> Result<(), String> {
    let (dn_text, attrs) = match record {
        LdifRecord::Content { dn, attrs } | LdifRecord::Add { dn, attrs } => (dn, attrs),
        _ => return Err("import takes content records only".into()),
    };
    let dn = Dn::parse(&dn_text).map_err(|e| format!("bad DN {dn_text:?}: {e}"))?;
    let dn_norm = dn.normalized();
    if by_dn.contains_key(&dn_norm) {
        return Err(format!("duplicate entry {dn_text}"));
    }
    let suffix =
        directory.suffix_of(&dn).ok_or_else(|| format!("{dn_text} is under no configured suffix"))?;
    let (parent, rdn, rdn_norm) = if dn.len() == suffix.dn.len() {
        (EntryId::ROOT, suffix.display.clone(), suffix.norm.clone())
    } else {
        let parent_norm = dn.parent().unwrap_or_default().normalized();
        let &parent_index =
            by_dn.get(&parent_norm).ok_or_else(|| format!("parent of {dn_text} not loaded before it"))?;
        let parent = &mut placed[parent_index];
        parent.record.flags |= FLAG_CONTAINER;
        let rdn = dn.rdn().ok_or("empty DN")?;
        (parent.id, rdn.to_string(), rdn.normalized())
    };
    let mut entry = ferrodir_proto::Entry::new(attrs);
    let named_by = if parent == EntryId::ROOT { dn.rdns.first() } else { dn.rdn() };
    let checked = check_entry(schema, &entry, named_by)
        .map_err(|v| format!("{dn_text}: {} ({})", v.message, v.code))?;
    if entry.get("structuralObjectClass").is_none() {
        entry.attrs.insert(
            0,
            ferrodir_proto::Attribute::new(
                "structuralObjectClass",
                vec![checked.structural_class.into_bytes()],
            ),
        );
    }
    stamp_imported(
        &mut entry,
        &Stamp::now(&directory.root_dn.as_ref().map(|d| d.to_string()).unwrap_or_default()),
    );
    let shard = shard_for_child(parent, &rdn_norm, shard_count);
    let id = EntryId::new(shard, next_seq[shard]);
    next_seq[shard] += 1;
    by_dn.insert(dn_norm, placed.len());
    placed.push(Placed { id, record: EntryRecord { parent, rdn, rdn_norm, flags: 0, entry } });
    Ok(())
}

fn commit_all(store: &Store, placed: Vec<Placed>, next_seq: &[u64]) -> anyhow::Result<()> {
    let mut per_shard: Vec<Vec<Mutation>> = vec![Vec::new(); store.engines.len()];
    for Placed { id, record } in placed {
        let batch = &mut per_shard[id.shard()];
        for key in store.indexes.keys_for(&store.rules, id, &record.entry) {
            batch.push(Mutation { key, value: Some(Vec::new()) });
        }
        batch.push(Mutation { key: keys::child(record.parent, id), value: Some(Vec::new()) });
        batch.push(Mutation {
            key: keys::dn(record.parent, &record.rdn_norm),
            value: Some(id.to_be_bytes().to_vec()),
        });
        batch.push(Mutation { key: keys::entry(id), value: Some(record.encode()) });
    }
    for (shard, batch) in per_shard.iter_mut().enumerate() {
        batch.extend(crate::reindex::ready_marks(store));
        batch.push(Mutation {
            key: keys::meta("next_seq"),
            value: Some(next_seq[shard].to_be_bytes().to_vec()),
        });
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = per_shard
            .iter()
            .zip(&store.engines)
            .enumerate()
            .map(|(index, (batch, engine))| {
                scope.spawn(move || engine.commit(batch).with_context(|| format!("committing shard {index}")))
            })
            .collect();
        for handle in handles {
            handle.join().map_err(|_| anyhow::anyhow!("an import thread panicked"))??;
        }
        Ok(())
    })
}
