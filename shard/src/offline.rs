//! What the offline tools (verify, export, reindex, backup, a data directory's opening, the
//! replication consumer's cookie) read and rewrite of a shard's storage, as operations: the
//! on-disk key layout (`index/keys.rs`) stays inside this crate. A tool scans a snapshot
//! through these functions and commits the mutations they return; it never builds a key.

use crate::entry::codec::CorruptRecord;
use crate::entry::record::EntryRecord;
use crate::id::{shard_for_child, EntryId};
use crate::index::config::IndexConfig;
use crate::index::keys;
use crate::rules::RuleTable;
use crate::storage::{KvSnapshot, Mutation, StorageResult, Table};

/// The index tables a reindex rebuilds (every one but the DN and children tables, which
/// every entry has whatever the configuration).
const INDEX_TABLES: [Table; 4] = [Table::Eq, Table::Pres, Table::Sub, Table::Ord];

/// One entry record as a scan of the entries table finds it.
pub enum Stored {
    Entry(EntryId, EntryRecord),
    /// Its key names an id, its value does not decode.
    Undecodable(EntryId, CorruptRecord),
    /// Its key is not an entry key (the raw key).
    BadKey(Vec<u8>),
}

/// Visits every entry record of `snapshot` in id order while `visit` returns true.
pub fn each_entry(snapshot: &dyn KvSnapshot, visit: &mut dyn FnMut(Stored) -> bool) -> StorageResult<()> {
    snapshot.scan_prefix(&keys::entries_prefix(), &mut |key, value| {
        let found = match (keys::trailing_id(key), EntryRecord::decode(value)) {
            (Some(id), Ok(record)) => Stored::Entry(id, record),
            (Some(id), Err(e)) => Stored::Undecodable(id, e),
            (None, _) => Stored::BadKey(key.to_vec()),
        };
        visit(found)
    })
}

/// Whether `snapshot` holds at least one entry.
pub fn has_entries(snapshot: &dyn KvSnapshot) -> StorageResult<bool> {
    let mut found = false;
    snapshot.scan_prefix(&keys::entries_prefix(), &mut |_, _| {
        found = true;
        false
    })?;
    Ok(found)
}

/// Whether a raw key (a backup's copy of every key) is an entry record's.
pub fn is_entry_key(key: &[u8]) -> bool {
    key.first() == Some(&(Table::Entries as u8))
}

/// Visits every key of the equality index (the Bloom filter's fill).
pub fn each_eq_key(snapshot: &dyn KvSnapshot, visit: &mut dyn FnMut(&[u8])) -> StorageResult<()> {
    snapshot.scan_prefix(&keys::table_prefix(Table::Eq), &mut |key, _| {
        visit(key);
        true
    })
}

/// Deletions of every index key of `snapshot` (a reindex starts from none).
pub fn clear_indexes(snapshot: &dyn KvSnapshot) -> StorageResult<Vec<Mutation>> {
    let mut batch = Vec::new();
    for table in INDEX_TABLES {
        snapshot.scan_prefix(&keys::table_prefix(table), &mut |key, _| {
            batch.push(Mutation { key: key.to_vec(), value: None });
            true
        })?;
    }
    Ok(batch)
}

/// Every key of the DN, children and index tables, as [`expected_keys`] writes them (a DN
/// record's key followed by 0xff and its value, the id it names): what a check compares.
pub fn stored_keys(snapshot: &dyn KvSnapshot) -> StorageResult<std::collections::BTreeSet<Vec<u8>>> {
    let mut stored = std::collections::BTreeSet::new();
    for table in [Table::Dn, Table::Children].into_iter().chain(INDEX_TABLES) {
        snapshot.scan_prefix(&keys::table_prefix(table), &mut |key, value| {
            let mut key = key.to_vec();
            if table == Table::Dn {
                key.push(0xff);
                key.extend_from_slice(value);
            }
            stored.insert(key);
            true
        })?;
    }
    Ok(stored)
}

/// The keys entry `id` makes (in [`stored_keys`]' form), with the shard each belongs to:
/// its index keys and its children-table key on its own shard, its DN record on the shard
/// its name places it (`shard_for_child`).
pub fn expected_keys(
    indexes: &IndexConfig,
    rules: &RuleTable,
    id: EntryId,
    record: &EntryRecord,
    shard_count: usize,
) -> Vec<(usize, Vec<u8>)> {
    let home = id.shard();
    let mut out: Vec<(usize, Vec<u8>)> =
        indexes.keys_for(rules, id, &record.entry).into_iter().map(|key| (home, key)).collect();
    out.push((home, keys::child(record.parent, id)));
    let mut dn_key = keys::dn(record.parent, &record.rdn_norm);
    dn_key.push(0xff);
    dn_key.extend_from_slice(&id.to_be_bytes());
    out.push((shard_for_child(record.parent, &record.rdn_norm, shard_count), dn_key));
    out
}

/// A key of [`stored_keys`] for a report: its table letter and its printable bytes.
pub fn describe_key(key: &[u8]) -> String {
    let table = key.first().map(|b| *b as char).unwrap_or('?');
    let text: String =
        key.iter().skip(1).map(|b| if b.is_ascii_graphic() { *b as char } else { '.' }).collect();
    format!("{table}:{text}")
}

/// The mutation that stores `record` as entry `id`'s (a repair of its flags, say).
pub fn put_entry(id: EntryId, record: &EntryRecord) -> Mutation {
    Mutation { key: keys::entry(id), value: Some(record.encode()) }
}

/// The shard metadata value `name` (a replication cookie, the highest CSN committed).
pub fn meta(snapshot: &dyn KvSnapshot, name: &str) -> StorageResult<Option<Vec<u8>>> {
    snapshot.get(&keys::meta(name))
}

/// The key of metadata value `name`: for a tool that lists every key and must skip one.
pub fn meta_key(name: &str) -> Vec<u8> {
    keys::meta(name)
}

/// The keys a fault-injecting test refuses: entry `id`'s record, and the DN record of
/// `rdn_norm` under `parent`.
pub fn entry_key(id: EntryId) -> Vec<u8> {
    keys::entry(id)
}

pub fn dn_key(parent: EntryId, rdn_norm: &str) -> Vec<u8> {
    keys::dn(parent, rdn_norm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::open_in_memory;
    use ferrodir_proto::entry::{Attribute, Entry};

    fn record(parent: EntryId, rdn: &str) -> EntryRecord {
        let entry = Entry::new(vec![
            Attribute::new("objectClass", vec![b"person".to_vec()]),
            Attribute::new("cn", vec![rdn.as_bytes().to_vec()]),
        ]);
        EntryRecord { parent, rdn: format!("cn={rdn}"), rdn_norm: format!("cn={rdn}"), flags: 0, entry }
    }

    #[test]
    fn written_entries_scan_back_and_match_their_expected_keys() {
        let engine = open_in_memory().unwrap();
        let rules = RuleTable::from_schema(&ferrodir_proto::schema::Schema::standard());
        let indexes = IndexConfig::from_directives(&["cn eq"], &rules).unwrap();
        let snapshot = engine.snapshot().unwrap();
        assert!(!has_entries(snapshot.as_ref()).unwrap());
        let id = EntryId(7);
        let rec = record(EntryId::ROOT, "a");
        let mut batch = vec![put_entry(id, &rec)];
        let expected = expected_keys(&indexes, &rules, id, &rec, 1);
        assert_eq!(expected.len(), 3, "the cn equality key, the child key and the DN record: {expected:?}");
        for (shard, key) in &expected {
            assert_eq!(*shard, 0);
            // A DN record's expected key carries its value after 0xff.
            let (key, value) = match key.iter().position(|b| *b == 0xff).filter(|_| key[0] == Table::Dn as u8)
            {
                Some(at) => (key[..at].to_vec(), key[at + 1..].to_vec()),
                None => (key.clone(), Vec::new()),
            };
            batch.push(Mutation { key, value: Some(value) });
        }
        batch.push(Mutation { key: meta_key("x"), value: Some(b"1".to_vec()) });
        engine.commit(&batch).unwrap();
        let snapshot = engine.snapshot().unwrap();
        assert!(has_entries(snapshot.as_ref()).unwrap());
        let mut seen = Vec::new();
        each_entry(snapshot.as_ref(), &mut |s| {
            if let Stored::Entry(id, r) = s {
                seen.push((id, r.rdn));
            }
            true
        })
        .unwrap();
        assert_eq!(seen, vec![(id, "cn=a".to_string())]);
        let stored = stored_keys(snapshot.as_ref()).unwrap();
        let want: std::collections::BTreeSet<Vec<u8>> = expected.into_iter().map(|(_, k)| k).collect();
        assert_eq!(stored, want);
        assert_eq!(meta(snapshot.as_ref(), "x").unwrap(), Some(b"1".to_vec()));
        let clear = clear_indexes(snapshot.as_ref()).unwrap();
        assert!(!clear.is_empty() && clear.iter().all(|m| m.value.is_none()));
        assert!(describe_key(&entry_key(id)).starts_with(&format!("{}:", Table::Entries as u8 as char)));
    }
}
