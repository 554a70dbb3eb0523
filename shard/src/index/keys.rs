//! Key layouts of the shard's tables (see [`crate::storage::Table`]). Fixed-width ids are
//! big-endian so that keys sort by id.

use crate::id::EntryId;
use crate::storage::{KvSnapshot, StorageResult, Table};

pub fn entry(id: EntryId) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.push(Table::Entries as u8);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

pub fn entries_prefix() -> Vec<u8> {
    vec![Table::Entries as u8]
}

pub fn dn(parent: EntryId, rdn_norm: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(9 + rdn_norm.len());
    key.push(Table::Dn as u8);
    key.extend_from_slice(&parent.to_be_bytes());
    key.extend_from_slice(rdn_norm.as_bytes());
    key
}

pub fn child(parent: EntryId, child: EntryId) -> Vec<u8> {
    let mut key = children_prefix(parent);
    key.extend_from_slice(&child.to_be_bytes());
    key
}

pub fn children_prefix(parent: EntryId) -> Vec<u8> {
    let mut key = Vec::with_capacity(17);
    key.push(Table::Children as u8);
    key.extend_from_slice(&parent.to_be_bytes());
    key
}

/// The prefix of all equality postings of (`attr_lower`, `value_norm`).
pub fn eq_prefix(attr_lower: &str, value_norm: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(3 + attr_lower.len() + value_norm.len() + 8);
    eq_prefix_into(&mut key, attr_lower, value_norm);
    key
}

/// [`eq_prefix`] into `key` (cleared first): a caller building many keys reuses one buffer.
pub fn eq_prefix_into(key: &mut Vec<u8>, attr_lower: &str, value_norm: &[u8]) {
    key.clear();
    key.push(Table::Eq as u8);
    key.extend_from_slice(attr_lower.as_bytes());
    key.push(0);
    key.extend_from_slice(value_norm);
    key.push(0);
}

/// The prefix of every equality posting of `attr_lower` (a referential-integrity walk).
pub fn eq_attr_prefix(attr_lower: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + attr_lower.len());
    key.push(Table::Eq as u8);
    key.extend_from_slice(attr_lower.as_bytes());
    key.push(0);
    key
}

#[cfg(test)]
pub fn eq(attr_lower: &str, value_norm: &[u8], id: EntryId) -> Vec<u8> {
    let mut key = eq_prefix(attr_lower, value_norm);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

pub fn pres_prefix(attr_lower: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + attr_lower.len() + 8);
    key.push(Table::Pres as u8);
    key.extend_from_slice(attr_lower.as_bytes());
    key.push(0);
    key
}

#[cfg(test)]
pub fn pres(attr_lower: &str, id: EntryId) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + attr_lower.len() + 8);
    pres_into(&mut key, attr_lower, id);
    key
}

/// [`pres`] into `key` (cleared first).
pub fn pres_into(key: &mut Vec<u8>, attr_lower: &str, id: EntryId) {
    key.clear();
    key.push(Table::Pres as u8);
    key.extend_from_slice(attr_lower.as_bytes());
    key.push(0);
    key.extend_from_slice(&id.to_be_bytes());
}

/// attr ‖ 0 ‖ gram ‖ id: a substring gram posting.
#[cfg(test)]
pub fn sub(attr_lower: &str, gram: &[u8], id: EntryId) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + attr_lower.len() + gram.len() + 8);
    sub_into(&mut key, attr_lower, gram, id);
    key
}

/// [`sub`] into `key` (cleared first).
pub fn sub_into(key: &mut Vec<u8>, attr_lower: &str, gram: &[u8], id: EntryId) {
    key.clear();
    key.push(Table::Sub as u8);
    key.extend_from_slice(attr_lower.as_bytes());
    key.push(0);
    key.extend_from_slice(gram);
    key.extend_from_slice(&id.to_be_bytes());
}

pub fn sub_prefix(attr_lower: &str, gram: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + attr_lower.len() + gram.len() + 8);
    key.push(Table::Sub as u8);
    key.extend_from_slice(attr_lower.as_bytes());
    key.push(0);
    key.extend_from_slice(gram);
    key
}

/// attr ‖ 0 ‖ ordering key ‖ 0 ‖ id, an ordering posting (keys of one attribute sort in the
/// rule's order), into `key` (cleared first).
pub fn ord_into(key: &mut Vec<u8>, attr_lower: &str, order_key: &[u8], id: EntryId) {
    key.clear();
    key.push(Table::Ord as u8);
    key.extend_from_slice(attr_lower.as_bytes());
    key.push(0);
    key.extend_from_slice(order_key);
    key.push(0);
    key.extend_from_slice(&id.to_be_bytes());
}

pub fn ord_attr_prefix(attr_lower: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + attr_lower.len());
    key.push(Table::Ord as u8);
    key.extend_from_slice(attr_lower.as_bytes());
    key.push(0);
    key
}

/// The prefix of every posting of one attribute in one index table: table ‖ attr ‖ 0
/// (every index key starts so: an online build clears an index by it).
pub fn index_attr_prefix(table: Table, attr_lower: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + attr_lower.len());
    key.push(table as u8);
    key.extend_from_slice(attr_lower.as_bytes());
    key.push(0);
    key
}

/// The prefix of every key of one index table (for reindex).
pub fn table_prefix(table: Table) -> Vec<u8> {
    vec![table as u8]
}

pub fn meta(name: &str) -> Vec<u8> {
    let mut key = vec![Table::Meta as u8];
    key.extend_from_slice(name.as_bytes());
    key
}

/// The numbers that follow the table byte of a log table's keys (table ‖ u64 BE ‖ ...), in
/// key order: what the delete log and the changelog read of themselves at start.
pub fn numbers_under(
    snapshot: &dyn KvSnapshot,
    prefix: &[u8],
) -> StorageResult<std::collections::VecDeque<u64>> {
    let mut numbers = std::collections::VecDeque::new();
    snapshot.scan_prefix(prefix, &mut |key, _| {
        if let Some(n) = key.get(1..9).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
            numbers.push_back(u64::from_be_bytes(n));
        }
        true
    })?;
    Ok(numbers)
}

/// The id at the end of a posting key (the last 8 bytes).
pub fn trailing_id(key: &[u8]) -> Option<EntryId> {
    let start = key.len().checked_sub(8)?;
    EntryId::from_be_slice(key.get(start..)?)
}
