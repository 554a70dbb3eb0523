//! Server-side sorting (RFC 2891): the sort keys of one entry and the one comparator that
//! orders them, on every shard and in the router's merge alike.
//!
//! A key's value is the entry's least value of the key's attribute under the key's ordering
//! rule (RFC 2891 §2.2), encoded by [`config::ordering_key_by`], the encoding the `ord`
//! index uses, so that sorting and ordering filters agree on one rule in one place: two
//! keys compare as byte strings. An entry lacking the attribute (or whose values don't
//! normalise, or which the requester may not read) has no key there; slapd's sssvlv orders
//! such entries after all others in forward order and before all others in reverse order
//! (its `node_cmp` multiplies "absent is greater" by the direction), and so do we. The
//! least value is taken in both directions, as sssvlv does.
//!
//! When a search sorts, each shard's part sends, instead of an entry's PDU, one row: its id
//! and its keys ([`encode_row`]); the router decodes them ([`decode_row`]), sorts, and reads
//! each page's entries by id.

use std::cmp::Ordering;

use ferrodir_proto::entry::Entry;
use ferrodir_proto::schema::matching::Rule;
use ferrodir_proto::schema::DnNormalizer;

use crate::id::EntryId;
use crate::index::config;
use crate::rights::TypeSet;
use crate::rules::RuleTable;

/// One key of a sort request, resolved against the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    /// The attribute's canonical (lowercased primary) name.
    pub canonical: String,
    /// The ordering rule, and the rule values are normalised by before encoding.
    pub rule: Rule,
    pub normalize: Rule,
    pub reverse: bool,
}

/// The keys of one sort request, in order of significance.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SortSpec {
    pub keys: Vec<SortKey>,
}

/// One entry's key values: None where it has none.
pub type KeyValues = Vec<Option<Box<[u8]>>>;

/// A sorted search's row: an entry id and its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub id: EntryId,
    pub keys: KeyValues,
}

impl SortKey {
    /// The key of `value` under this key's rule (None: the value doesn't normalise); `dn`
    /// normalises DN-valued ones.
    pub fn encode(&self, value: &[u8], dn: &DnNormalizer) -> Option<Vec<u8>> {
        config::ordering_key_by(self.rule, self.normalize, value, dn)
    }
}

impl SortSpec {
    /// The entry's keys. Only values of the attribute itself count, without options and not
    /// its subtypes (slapd's `attr_find` on the key's description); `hidden` types count as
    /// absent, so that the order discloses nothing the requester may not read.
    pub fn keys_of(&self, rules: &RuleTable, entry: &Entry, hidden: &TypeSet) -> KeyValues {
        self.keys
            .iter()
            .map(|key| {
                if hidden.contains(&key.canonical) {
                    return None;
                }
                entry
                    .attrs
                    .iter()
                    .filter(|attr| !attr.name.contains(';'))
                    .filter(|attr| rules.get(&attr.name).is_some_and(|r| r.canonical == key.canonical))
                    .flat_map(|attr| attr.values.iter())
                    .filter_map(|value| key.encode(value, rules.dn()))
                    .min()
                    .map(Vec::into_boxed_slice)
            })
            .collect()
    }

    /// sssvlv's order of two entries' keys: key by key, absent after present in forward
    /// order (before in reverse), values as byte strings, reversed keys the other way.
    pub fn compare(&self, a: &[Option<Box<[u8]>>], b: &[Option<Box<[u8]>>]) -> Ordering {
        for (i, key) in self.keys.iter().enumerate() {
            let (x, y) = (a.get(i).and_then(Option::as_deref), b.get(i).and_then(Option::as_deref));
            let forward = match (x, y) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(x), Some(y)) => x.cmp(y),
            };
            let ordering = if key.reverse { forward.reverse() } else { forward };
            if ordering != Ordering::Equal {
                return ordering;
            }
        }
        Ordering::Equal
    }

    /// The total order of rows: the keys, then the entry id, so that equal keys come out
    /// the same way on every page and every run.
    pub fn compare_rows(&self, a: &Row, b: &Row) -> Ordering {
        self.compare(&a.keys, &b.keys).then(a.id.cmp(&b.id))
    }
}

/// A row as a shard sends it through the search's channel (in place of an entry's PDU):
/// the id (8 bytes, big-endian), then per key 0 (absent) or 1, a 4-byte length and the key.
pub fn encode_row(id: EntryId, keys: &[Option<Box<[u8]>>]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(8 + keys.iter().map(|k| 5 + k.as_ref().map_or(0, |k| k.len())).sum::<usize>());
    out.extend_from_slice(&id.0.to_be_bytes());
    for key in keys {
        match key {
            None => out.push(0),
            Some(key) => {
                out.push(1);
                out.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_be_bytes());
                out.extend_from_slice(key);
            }
        }
    }
    out
}

/// The row [`encode_row`] wrote; None if `bytes` is not one.
pub fn decode_row(bytes: &[u8]) -> Option<Row> {
    let (id, mut rest) = bytes.split_first_chunk::<8>()?;
    let mut keys = Vec::new();
    while let Some((&flag, after)) = rest.split_first() {
        match flag {
            0 => {
                keys.push(None);
                rest = after;
            }
            1 => {
                let (len, after) = after.split_first_chunk::<4>()?;
                let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
                if after.len() < len {
                    return None;
                }
                let (key, after) = after.split_at(len);
                keys.push(Some(key.into()));
                rest = after;
            }
            _ => return None,
        }
    }
    Some(Row { id: EntryId(u64::from_be_bytes(*id)), keys })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::entry::Attribute;
    use ferrodir_proto::schema::Schema;

    fn rules() -> RuleTable {
        RuleTable::from_schema(&Schema::standard())
    }

    fn key(canonical: &str, rule: Rule, reverse: bool) -> SortKey {
        SortKey { canonical: canonical.into(), rule, normalize: rule, reverse }
    }

    fn entry(attrs: &[(&str, &[&str])]) -> Entry {
        Entry::new(
            attrs
                .iter()
                .map(|(name, values)| {
                    Attribute::new(*name, values.iter().map(|v| v.as_bytes().to_vec()).collect())
                })
                .collect(),
        )
    }

    /// Sorts named entries by `spec`, as the router does.
    fn order(spec: &SortSpec, entries: &[(&str, Entry)]) -> Vec<String> {
        let rules = rules();
        let mut rows: Vec<(String, Row)> = entries
            .iter()
            .enumerate()
            .map(|(i, (name, e))| {
                (
                    name.to_string(),
                    Row { id: EntryId(i as u64), keys: spec.keys_of(&rules, e, &TypeSet::none()) },
                )
            })
            .collect();
        rows.sort_by(|a, b| spec.compare_rows(&a.1, &b.1));
        rows.into_iter().map(|(name, _)| name).collect()
    }

    fn people() -> Vec<(&'static str, Entry)> {
        // The differential test's data: c and b hold several values, d none.
        vec![
            ("c", entry(&[("description", &["m", "b"])])),
            ("a", entry(&[("description", &["z"])])),
            ("d", entry(&[("sn", &["Delta"])])),
            ("b", entry(&[("description", &["C", "a"])])),
        ]
    }

    #[test]
    fn least_value_first_and_missing_last_in_forward_order() {
        let spec = SortSpec { keys: vec![key("description", Rule::CaseIgnore, false)] };
        assert_eq!(order(&spec, &people()), ["b", "c", "a", "d"]);
    }

    #[test]
    fn reverse_keeps_the_least_value_and_puts_missing_first() {
        let spec = SortSpec { keys: vec![key("description", Rule::CaseIgnore, true)] };
        assert_eq!(order(&spec, &people()), ["d", "a", "c", "b"]);
    }

    #[test]
    fn a_second_key_breaks_ties_in_its_own_direction() {
        let spec = SortSpec {
            keys: vec![key("sn", Rule::CaseIgnore, false), key("givenname", Rule::CaseIgnore, true)],
        };
        let entries = vec![
            ("x1", entry(&[("sn", &["Smith"]), ("givenName", &["Ann"])])),
            ("x2", entry(&[("sn", &["smith"]), ("givenName", &["Bob"])])),
            ("x3", entry(&[("sn", &["Jones"]), ("givenName", &["Zed"])])),
            ("x4", entry(&[("sn", &["Smith"])])),
        ];
        // Smith ties: Bob before Ann (reverse), the one without givenName first (reverse).
        assert_eq!(order(&spec, &entries), ["x3", "x4", "x2", "x1"]);
    }

    #[test]
    fn integers_sort_numerically_and_hidden_types_count_as_absent() {
        let rules = rules();
        let spec = SortSpec { keys: vec![key("uidnumber", Rule::Integer, false)] };
        let entries = vec![
            ("ten", entry(&[("uidNumber", &["10"])])),
            ("minus", entry(&[("uidNumber", &["-3"])])),
            ("nine", entry(&[("uidNumber", &["9"])])),
        ];
        assert_eq!(order(&spec, &entries), ["minus", "nine", "ten"]);
        let hidden = TypeSet::of(vec!["uidnumber".to_string()]);
        assert_eq!(spec.keys_of(&rules, &entries[0].1, &hidden), vec![None]);
    }

    #[test]
    fn options_and_subtypes_are_not_the_key() {
        let rules = rules();
        let spec = SortSpec { keys: vec![key("name", Rule::CaseIgnore, false)] };
        let e = entry(&[("cn", &["a"]), ("name;lang-en", &["b"])]);
        assert_eq!(spec.keys_of(&rules, &e, &TypeSet::none()), vec![None]);
    }

    #[test]
    fn rows_round_trip_and_garbage_is_refused() {
        let keys: KeyValues = vec![Some(b"abc".to_vec().into()), None, Some(Vec::new().into())];
        let bytes = encode_row(EntryId(0x1_0000_0000_0007), &keys);
        assert_eq!(decode_row(&bytes), Some(Row { id: EntryId(0x1_0000_0000_0007), keys }));
        assert_eq!(decode_row(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode_row(&[0; 7]), None);
        assert_eq!(decode_row(&[0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, b'x']), None);
        assert_eq!(decode_row(&[0, 0, 0, 0, 0, 0, 0, 0, 7]), None);
    }
}
