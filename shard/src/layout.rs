//! What storing an entry writes: its record, its DN→ID record, its one-level key and its
//! index keys, in one place for every writer. Staging (`batch`) and the offline import
//! (`ferrodir import`) both build a new entry's keys with [`new_entry`], so an imported
//! entry and an added one are stored alike (the same export, the same index keys); every
//! later change goes through [`entry_mutations`].

use crate::id::EntryId;
use crate::index::IndexConfig;
use crate::keys;
use crate::record::EntryRecord;
use crate::rules::RuleTable;
use crate::storage::Mutation;

/// The mutations that store `record` as the new entry `id` on its home shard (which also
/// holds its DN→ID record: `shard_for_child(parent, rdn_norm)` names both). Puts only.
pub fn new_entry(
    indexes: &IndexConfig,
    rules: &RuleTable,
    id: EntryId,
    record: &EntryRecord,
) -> Vec<Mutation> {
    let mut out = vec![dn_record(record.parent, &record.rdn_norm, Some(id))];
    entry_mutations(indexes, rules, id, None, Some(record), &mut out);
    out
}

/// The keys and values of [`new_entry`], each handed to `visit` (index keys as
/// [`IndexConfig::each_key`] builds them: unsorted, a repeat possible) instead of collected:
/// the offline import's path, which sorts them itself. Its DN→ID record first, its entry
/// record last. A test below holds it to [`new_entry`].
pub fn each_new_entry_key(
    indexes: &IndexConfig,
    rules: &RuleTable,
    id: EntryId,
    record: &EntryRecord,
    visit: &mut dyn FnMut(&[u8], &[u8]),
) {
    visit(&keys::dn(record.parent, &record.rdn_norm), &id.to_be_bytes());
    indexes.each_key(rules, id, &record.entry, &mut |key| visit(key, &[]));
    visit(&keys::child(record.parent, id), &[]);
    visit(&keys::entry(id), &record.encode());
}

/// The DN→ID record of (`parent`, `rdn_norm`): naming `target`, or removed.
pub fn dn_record(parent: EntryId, rdn_norm: &str, target: Option<EntryId>) -> Mutation {
    Mutation { key: keys::dn(parent, rdn_norm), value: target.map(|id| id.to_be_bytes().to_vec()) }
}

/// The shard's next sequence number to allocate (`ShardCore::stored_next_seq` reads it).
pub fn next_seq(next: u64) -> Mutation {
    Mutation { key: keys::meta("next_seq"), value: Some(next.to_be_bytes().to_vec()) }
}

/// The entry, one-level and index mutations that turn `old` into `new` (`None`: absent).
pub fn entry_mutations(
    indexes: &IndexConfig,
    rules: &RuleTable,
    id: EntryId,
    old: Option<&EntryRecord>,
    new: Option<&EntryRecord>,
    out: &mut Vec<Mutation>,
) {
    let old_keys = old.map(|r| indexes.keys_for(rules, id, &r.entry)).unwrap_or_default();
    let new_keys = new.map(|r| indexes.keys_for(rules, id, &r.entry)).unwrap_or_default();
    if old_keys.is_empty() {
        // A new entry (an Add, every entry of an import): its keys as they are, uncopied.
        out.extend(new_keys.into_iter().map(|key| Mutation { key, value: Some(Vec::new()) }));
    } else {
        for gone in old_keys.difference(&new_keys) {
            out.push(Mutation { key: gone.clone(), value: None });
        }
        for added in new_keys.difference(&old_keys) {
            out.push(Mutation { key: added.clone(), value: Some(Vec::new()) });
        }
    }
    let old_parent = old.map(|r| r.parent);
    let new_parent = new.map(|r| r.parent);
    if old_parent != new_parent {
        if let Some(p) = old_parent {
            out.push(Mutation { key: keys::child(p, id), value: None });
        }
        if let Some(p) = new_parent {
            out.push(Mutation { key: keys::child(p, id), value: Some(Vec::new()) });
        }
    }
    out.push(Mutation { key: keys::entry(id), value: new.map(EntryRecord::encode) });
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::entry::{Attribute, Entry};
    use ferrodir_proto::schema::Schema;
    use std::collections::BTreeMap;

    /// The import's visited layout and the Add's mutations store the same keys and values.
    #[test]
    fn visited_keys_are_the_new_entry_mutations() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let indexes = IndexConfig::from_directives(
            &["objectClass eq", "uid,mail eq", "cn eq,sub,pres", "uidNumber ord"],
            &rules,
        )
        .unwrap();
        let entry = Entry::new(vec![
            Attribute::new(
                "objectClass",
                vec![b"top".to_vec(), b"person".to_vec(), b"inetOrgPerson".to_vec()],
            ),
            // Two values with one normalised form, and a gram that repeats.
            Attribute::new("cn", vec![b"Anna Anna".to_vec(), b"anna  anna".to_vec()]),
            Attribute::new("sn", vec![b"A".to_vec()]),
            Attribute::new("uid", vec![b"anna".to_vec()]),
            Attribute::new("uidNumber", vec![b"42".to_vec()]),
        ]);
        let id = EntryId::new(1, 9);
        let record = EntryRecord {
            parent: EntryId::new(0, 3),
            rdn: "uid=anna".into(),
            rdn_norm: "uid=anna".into(),
            flags: 0,
            entry,
        };
        let added: BTreeMap<Vec<u8>, Option<Vec<u8>>> =
            new_entry(&indexes, &rules, id, &record).into_iter().map(|m| (m.key, m.value)).collect();
        let mut visited = BTreeMap::new();
        let mut visits = 0;
        each_new_entry_key(&indexes, &rules, id, &record, &mut |key, value| {
            visits += 1;
            visited.insert(key.to_vec(), Some(value.to_vec()));
        });
        assert_eq!(visited, added);
        assert!(visits > added.len(), "the test entry has repeated keys: {visits} visits");
        assert!(added.len() > 15, "{}", added.len());
    }
}
