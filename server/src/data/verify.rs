//! `ferrodir verify`: an offline check of every shard. Entries decode; every index, one-level
//! and DN→ID key is exactly the set the entries imply; every parent exists and is marked a
//! container; every entry satisfies the schema; the delete log's and the changelog's records
//! decode. Prints one line per problem and a summary; the command exits non-zero when
//! anything is wrong. A damaged shard (a file missing, truncated or failing redb's
//! checksums) is reported, and the other shards still checked.

use std::collections::{BTreeSet, HashMap};

use ferrodir_proto::schema::check::check_entry;
use ferrodir_proto::Dn;
use ferrodir_shard::offline::{self, Stored};
use ferrodir_shard::EntryId;
use ferrodir_shard::EntryRecord;

use crate::data::store::Store;

#[derive(Debug, Default)]
pub struct Report {
    pub entries: usize,
    /// Records in the shards' syncrepl delete logs (none on a server no consumer synced from).
    pub delete_log_records: usize,
    /// Records in the shards' retro changelogs (`[changelog]`).
    pub changelog_records: usize,
    pub problems: Vec<String>,
}

/// Checks every shard of `store`.
pub fn verify(store: &Store) -> anyhow::Result<Report> {
    let mut report = Report::default();
    for (shard, what) in &store.damaged {
        report.problems.push(format!("shard {shard}: {what}"));
    }
    let mut records: HashMap<EntryId, EntryRecord> = HashMap::new();
    let mut actual: Vec<BTreeSet<Vec<u8>>> = vec![BTreeSet::new(); store.engines.len()];
    for (shard, engine) in store.engines.iter().enumerate() {
        let snapshot = engine.snapshot()?;
        offline::each_entry(snapshot.as_ref(), &mut |stored| {
            match stored {
                Stored::Entry(id, record) => {
                    if id.shard() != shard {
                        report
                            .problems
                            .push(format!("shard {shard}: entry {id} belongs to shard {}", id.shard()));
                    }
                    records.insert(id, record);
                }
                Stored::Undecodable(id, e) => {
                    report.problems.push(format!("shard {shard}: entry {id:?} does not decode: {e}"))
                }
                Stored::BadKey(key) => {
                    report.problems.push(format!("shard {shard}: malformed entry key {key:02x?}"))
                }
            }
            true
        })?;
        // The delete log (a sync refresh's delete phase) names entries that are gone, so
        // nothing above checks it: its records must decode. (Its length is not checked: a
        // lowered `sync_delete_log_max` trims it only at the next delete.)
        snapshot.scan_prefix(&ferrodir_shard::delete_log_prefix(), &mut |key, value| {
            report.delete_log_records += 1;
            if let Err(e) = ferrodir_shard::LogRecord::decode(key, value) {
                report.problems.push(format!("shard {shard}: delete log record {key:02x?}: {e}"));
            }
            true
        })?;
        // The changelog names changes, not entries: its records must decode.
        snapshot.scan_prefix(&ferrodir_shard::changelog_prefix(), &mut |key, value| {
            report.changelog_records += 1;
            if let Err(e) = ferrodir_shard::ChangeRecord::decode(key, value) {
                report.problems.push(format!("shard {shard}: changelog record {key:02x?}: {e}"));
            }
            true
        })?;
        actual[shard] = offline::stored_keys(snapshot.as_ref())?;
    }
    report.entries = records.len();
    if !store.damaged.is_empty() {
        // Every key that names an entry of a damaged shard would be reported too: noise
        // that hides the one problem that matters.
        report.problems.push("checks across shards skipped: a shard is damaged".into());
        return Ok(report);
    }
    let expected = expected_keys(store, &records, &mut report);
    for (shard, (want, have)) in expected.iter().zip(&actual).enumerate() {
        for missing in want.difference(have) {
            report.problems.push(format!("shard {shard}: missing key {}", offline::describe_key(missing)));
        }
        for extra in have.difference(want) {
            report
                .problems
                .push(format!("shard {shard}: key with no entry behind it {}", offline::describe_key(extra)));
        }
    }
    Ok(report)
}

/// The keys every shard should hold, from the entries alone; checks parents and schema.
fn expected_keys(
    store: &Store,
    records: &HashMap<EntryId, EntryRecord>,
    report: &mut Report,
) -> Vec<BTreeSet<Vec<u8>>> {
    let shard_count = store.engines.len();
    let mut expected = vec![BTreeSet::new(); shard_count];
    for (&id, record) in records {
        for (shard, key) in offline::expected_keys(&store.indexes, &store.rules, id, record, shard_count) {
            if let Some(keys) = expected.get_mut(shard) {
                keys.insert(key);
            }
        }
        if record.parent != EntryId::ROOT {
            match records.get(&record.parent) {
                None => report
                    .problems
                    .push(format!("entry {id} ({}): parent {} does not exist", record.rdn, record.parent)),
                Some(parent) if !parent.is_container() => report.problems.push(format!(
                    "entry {id} ({}): parent {} is not marked a container",
                    record.rdn, record.parent
                )),
                Some(_) => {}
            }
        }
        let rdn = Dn::parse(&record.rdn).ok().and_then(|dn| dn.rdns.into_iter().next());
        if let Err(violation) = check_entry(&store.schema, &record.entry, rdn.as_ref(), store.rules.dn()) {
            report.problems.push(format!("entry {id} ({}): schema: {}", record.rdn, violation.message));
        }
    }
    expected
}
