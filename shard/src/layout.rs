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
