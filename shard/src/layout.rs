//! What storing an entry writes: its record, its DN→ID record, its one-level key and its
//! index keys, in one place for every writer. Staging (`batch`) and the offline import
//! (`ferrodir import`) both build a new entry's keys with [`new_entry`], so an imported
//! entry and an added one are stored alike (the same export, the same index keys); every
//! later change goes through [`entry_mutations`].

use ferrodir_proto::entry::{Attribute, Entry};

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
    let (old_keys, new_keys) = match (old, new) {
        (Some(old), Some(new)) => {
            // A change of some attributes (a modify, a rename): only the indexed attributes
            // whose values changed can change keys. Building every key of both versions
            // to diff them was a twentieth of a modify's CPU (issue #14).
            let changed = changed_indexed_attrs(indexes, rules, &old.entry, &new.entry);
            if changed.is_empty() {
                Default::default()
            } else {
                let keep = |attr: &str| changed.contains(&attr);
                (
                    indexes.keys_for_attrs(rules, id, &old.entry, &keep),
                    indexes.keys_for_attrs(rules, id, &new.entry, &keep),
                )
            }
        }
        _ => (
            old.map(|r| indexes.keys_for(rules, id, &r.entry)).unwrap_or_default(),
            new.map(|r| indexes.keys_for(rules, id, &r.entry)).unwrap_or_default(),
        ),
    };
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

/// The canonical names of the indexed attributes whose values differ between `old` and
/// `new`: every attribute description of that type (options and aliases included, which
/// index under the same name) compared in order, names and values byte for byte. A reorder
/// counts as a change; it only costs building that attribute's keys, whose diff is empty.
fn changed_indexed_attrs<'r, 'e>(
    indexes: &IndexConfig,
    rules: &'r RuleTable,
    old: &'e Entry,
    new: &'e Entry,
) -> Vec<&'r str> {
    let indexed = |entry: &Entry| -> Vec<(&'r str, usize)> {
        let mut out = Vec::new();
        for (at, attr) in entry.attrs.iter().enumerate() {
            if let Some(attr_rules) = rules.get(&attr.name) {
                if indexes.indexes_attr(&attr_rules.canonical) {
                    out.push((attr_rules.canonical.as_str(), at));
                }
            }
        }
        out
    };
    let (old_attrs, new_attrs) = (indexed(old), indexed(new));
    let mut changed: Vec<&'r str> = Vec::new();
    for &(name, _) in old_attrs.iter().chain(&new_attrs) {
        if changed.contains(&name) {
            continue;
        }
        let of = |attrs: &[(&str, usize)], entry: &'e Entry| -> Vec<&'e Attribute> {
            attrs.iter().filter(|(n, _)| *n == name).filter_map(|&(_, at)| entry.attrs.get(at)).collect()
        };
        let (before, after) = (of(&old_attrs, old), of(&new_attrs, new));
        let same = before.len() == after.len()
            && before.iter().zip(&after).all(|(b, a)| b.name == a.name && b.values == a.values);
        if !same {
            changed.push(name);
        }
    }
    changed
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

    /// What the diff of every key of both versions gives: the rule `entry_mutations` used
    /// before it skipped the attributes a change leaves alone.
    fn diff_of_all_keys(
        indexes: &IndexConfig,
        rules: &RuleTable,
        id: EntryId,
        old: &EntryRecord,
        new: &EntryRecord,
    ) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        let (before, after) =
            (indexes.keys_for(rules, id, &old.entry), indexes.keys_for(rules, id, &new.entry));
        let mut out: BTreeMap<_, _> = before.difference(&after).map(|k| (k.clone(), None)).collect();
        out.extend(after.difference(&before).map(|k| (k.clone(), Some(Vec::new()))));
        out.insert(keys::entry(id), Some(new.encode()));
        out
    }

    /// A change builds the keys of the changed indexed attributes only, and stores what the
    /// diff of all keys would: unindexed and unchanged attributes, a value changed, added
    /// under an option or removed, an alias, a reorder, a value with the same normalised form.
    #[test]
    fn a_change_rewrites_the_keys_of_changed_attributes_only() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let indexes = IndexConfig::from_directives(
            &["objectClass eq", "uid,mail eq", "cn eq,sub,pres", "uidNumber ord"],
            &rules,
        )
        .unwrap();
        let attr = |name: &str, values: &[&str]| {
            Attribute::new(name, values.iter().map(|v| v.as_bytes().to_vec()).collect())
        };
        let base = vec![
            attr("objectClass", &["top", "person", "inetOrgPerson"]),
            attr("cn", &["Anna Smith"]),
            attr("sn", &["Smith"]),
            attr("uid", &["anna"]),
            attr("mail", &["anna@example.com"]),
            attr("uidNumber", &["42"]),
        ];
        let record = |attrs: Vec<Attribute>| EntryRecord {
            parent: EntryId::new(0, 3),
            rdn: "uid=anna".into(),
            rdn_norm: "uid=anna".into(),
            flags: 0,
            entry: Entry::new(attrs),
        };
        let with = |f: &dyn Fn(&mut Vec<Attribute>)| {
            let mut attrs = base.clone();
            f(&mut attrs);
            attrs
        };
        let cases: Vec<(&str, Vec<Attribute>, usize)> = vec![
            ("unindexed description", with(&|a| a.push(attr("description", &["x"]))), 1),
            ("sn changed (unindexed)", with(&|a| a[2] = attr("sn", &["Jones"])), 1),
            ("cn changed", with(&|a| a[1] = attr("cn", &["Anna Jones"])), 0),
            ("cn under an option", with(&|a| a.push(attr("cn;lang-de", &["Anna Schmidt"]))), 0),
            ("mail removed", with(&|a| drop(a.remove(4))), 0),
            ("cn as commonName", with(&|a| a[1] = attr("commonName", &["Anna Smith"])), 1),
            (
                "objectClass reordered",
                with(&|a| a[0] = attr("objectClass", &["person", "top", "inetOrgPerson"])),
                1,
            ),
            ("uid in other case", with(&|a| a[3] = attr("uid", &["ANNA"])), 1),
            ("uidNumber changed", with(&|a| a[5] = attr("uidNumber", &["43"])), 0),
        ];
        let id = EntryId::new(1, 9);
        let old = record(base.clone());
        for (what, attrs, expected_len) in cases {
            let new = record(attrs);
            let mut out = Vec::new();
            entry_mutations(&indexes, &rules, id, Some(&old), Some(&new), &mut out);
            let stored: BTreeMap<_, _> = out.iter().map(|m| (m.key.clone(), m.value.clone())).collect();
            assert_eq!(stored.len(), out.len(), "{what}: a key twice");
            assert_eq!(stored, diff_of_all_keys(&indexes, &rules, id, &old, &new), "{what}");
            if expected_len > 0 {
                assert_eq!(out.len(), expected_len, "{what}: {out:?}");
            } else {
                assert!(out.len() > 1, "{what}: no index key changed");
            }
        }
        assert!(changed_indexed_attrs(&indexes, &rules, &old.entry, &old.entry).is_empty());
        let renamed = record(with(&|a| a[1] = attr("commonName", &["Anna Smith"])));
        assert_eq!(changed_indexed_attrs(&indexes, &rules, &old.entry, &renamed.entry), vec!["cn"]);
    }
}
