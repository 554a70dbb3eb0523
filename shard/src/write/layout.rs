//! What storing an entry writes: its record, its DN→ID record, its one-level key and its
//! index keys, in one place for every writer. Staging (`batch`) and the offline import
//! (`ferrodir import`) both build a new entry's keys with [`new_entry`], so an imported
//! entry and an added one are stored alike (the same export, the same index keys); every
//! later change goes through [`entry_mutations`].

use crate::entry::record::EntryRecord;
use crate::id::EntryId;
use crate::index::config::IndexConfig;
use crate::index::keys;
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
/// Between two versions of one entry, only the index keys of the attribute types the
/// change touched are built and compared ([`IndexConfig::changed_keys`]).
pub fn entry_mutations(
    indexes: &IndexConfig,
    rules: &RuleTable,
    id: EntryId,
    old: Option<&EntryRecord>,
    new: Option<&EntryRecord>,
    out: &mut Vec<Mutation>,
) {
    let (old_keys, new_keys) = match (old, new) {
        // A change of a stored entry: only the keys of the types it touched.
        (Some(old), Some(new)) => {
            let kept = new.entry.kept_from(&old.entry);
            indexes.changed_keys(rules, id, &old.entry, &new.entry, &kept)
        }
        _ => (
            old.map(|r| indexes.keys_for(rules, id, &r.entry)).unwrap_or_default(),
            new.map(|r| indexes.keys_for(rules, id, &r.entry)).unwrap_or_default(),
        ),
    };
    if old_keys.is_empty() {
        // No old keys (an Add, every entry of an import, or a change whose touched types
        // had none): the new keys as they are, uncopied.
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

    /// A change's mutations, built from the keys of the types it touched only, are those of
    /// the full key sets before and after: replaced, added and removed values, a type
    /// spelled two ways or with options, a change of an unindexed type (no index key).
    #[test]
    fn a_change_writes_the_difference_of_the_full_key_sets() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let indexes = IndexConfig::from_directives(
            &["objectClass eq", "uid,mail eq", "cn eq,sub,pres", "sn pres"],
            &rules,
        )
        .unwrap();
        let record = |attrs: Vec<Attribute>| EntryRecord {
            parent: EntryId::new(0, 3),
            rdn: "uid=anna".into(),
            rdn_norm: "uid=anna".into(),
            flags: 0,
            entry: Entry::new(attrs),
        };
        let attr = |name: &str, values: &[&str]| {
            Attribute::new(name, values.iter().map(|v| v.as_bytes().to_vec()).collect())
        };
        let base = vec![
            attr("objectClass", &["top", "person", "inetOrgPerson"]),
            attr("cn", &["Anna Smith"]),
            attr("commonName;lang-en", &["Anna"]),
            attr("sn", &["Smith"]),
            attr("uid", &["anna"]),
            attr("description", &["old"]),
        ];
        let mut changes: Vec<Vec<Attribute>> = Vec::new();
        let mut replaced = base.clone();
        replaced.retain(|a| a.name != "description");
        replaced.push(attr("description", &["new"]));
        changes.push(replaced);
        let mut cn = base.clone();
        cn[1] = attr("cn", &["Anna Smith", "A. Smith"]);
        changes.push(cn);
        let mut gone = base.clone();
        gone.remove(2);
        gone.remove(3);
        changes.push(gone);
        let mut moved = base.clone();
        let sn = moved.remove(3);
        moved.push(sn);
        moved.push(attr("mail", &["anna@example.com"]));
        changes.push(moved);
        let id = EntryId::new(0, 9);
        let old = record(base.clone());
        for attrs in changes {
            let new = record(attrs);
            let mut out = Vec::new();
            entry_mutations(&indexes, &rules, id, Some(&old), Some(&new), &mut out);
            let got: BTreeMap<Vec<u8>, Option<Vec<u8>>> = out.into_iter().map(|m| (m.key, m.value)).collect();
            let (before, after) =
                (indexes.keys_for(&rules, id, &old.entry), indexes.keys_for(&rules, id, &new.entry));
            let mut want: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            for key in before.difference(&after) {
                want.insert(key.clone(), None);
            }
            for key in after.difference(&before) {
                want.insert(key.clone(), Some(Vec::new()));
            }
            want.insert(keys::entry(id), Some(new.encode()));
            assert_eq!(got, want, "{:?}", new.entry.attrs);
        }
    }

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
