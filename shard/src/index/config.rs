//! Which attributes are indexed, and the index keys an entry contributes.
//!
//! Configured per attribute like slapd's `index` directive: `"cn eq,pres,sub"`, plus `ord`
//! for ordering. Keys are built from each attribute's own matching rules ([`RuleTable`]):
//! an equality key is the value normalised by the equality rule, so index lookups and filter
//! evaluation agree on what "equal" means. Postings are one key per (value, entry), so adding
//! an entry never rewrites a long list.
//!
//! An index that was configured after data was loaded is maintained by every write but not
//! used by searches until `ferrodir reindex` has built it (its "ready" mark): no search is
//! answered from a half-built index.

use std::collections::{BTreeSet, HashMap, HashSet};

use ferrodir_proto::entry::{Attribute, Entry, Kept};
use ferrodir_proto::schema::matching::{self, Rule};
use ferrodir_proto::schema::DnNormalizer;
use ferrodir_proto::value::PlainAvas;

use crate::id::EntryId;
use crate::index::eqkey;
use crate::index::keys;
use crate::rules::{AttrRules, RuleTable};

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct IndexKinds {
    pub equality: bool,
    pub presence: bool,
    pub substring: bool,
    pub ordering: bool,
}

/// One kind of index, for readiness marks.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IndexKind {
    Equality,
    Presence,
    Substring,
    Ordering,
}

impl IndexKind {
    pub const ALL: [IndexKind; 4] = [Self::Equality, Self::Presence, Self::Substring, Self::Ordering];

    pub fn name(self) -> &'static str {
        match self {
            Self::Equality => "eq",
            Self::Presence => "pres",
            Self::Substring => "sub",
            Self::Ordering => "ord",
        }
    }

    /// The kind a readiness mark or a directive names (`eq`, `pres`, `sub`, `ord`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The table holding this kind's postings.
    pub(crate) fn table(self) -> crate::storage::Table {
        use crate::storage::Table;
        match self {
            Self::Equality => Table::Eq,
            Self::Presence => Table::Pres,
            Self::Substring => Table::Sub,
            Self::Ordering => Table::Ord,
        }
    }

    fn of(self, kinds: IndexKinds) -> bool {
        match self {
            Self::Equality => kinds.equality,
            Self::Presence => kinds.presence,
            Self::Substring => kinds.substring,
            Self::Ordering => kinds.ordering,
        }
    }
}

/// The per-attribute index configuration of every shard, keyed by canonical attribute name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexConfig {
    by_attr: HashMap<String, IndexKinds>,
    /// (attribute, kind) pairs searches may use; None means all configured ones.
    searchable: Option<HashSet<(String, IndexKind)>>,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("bad index directive {directive:?}: {reason}")]
pub struct IndexConfigError {
    pub directive: String,
    pub reason: String,
}

impl IndexConfig {
    /// Parses directives like `"objectClass eq"`, `"cn,sn eq,pres,sub"`; attribute names are
    /// mapped to their canonical names through `rules`.
    pub fn from_directives<S: AsRef<str>>(
        directives: &[S],
        rules: &RuleTable,
    ) -> Result<Self, IndexConfigError> {
        let mut config = Self::default();
        for directive in directives {
            let directive = directive.as_ref();
            let bad = |reason: &str| IndexConfigError {
                directive: directive.to_string(),
                reason: reason.to_string(),
            };
            let mut parts = directive.split_whitespace();
            let attrs = parts.next().ok_or_else(|| bad("empty"))?;
            let kinds_text = parts.next().unwrap_or("eq");
            let mut kinds = IndexKinds::default();
            for kind in kinds_text.split(',') {
                match kind {
                    "eq" | "approx" => kinds.equality = true,
                    "pres" => kinds.presence = true,
                    "sub" | "subinitial" | "subany" | "subfinal" => kinds.substring = true,
                    "ord" => kinds.ordering = true,
                    other => return Err(bad(&format!("unsupported index kind {other:?}"))),
                }
            }
            for attr in attrs.split(',') {
                let slot = config.by_attr.entry(rules.canonical(attr)).or_default();
                slot.equality |= kinds.equality;
                slot.presence |= kinds.presence;
                slot.substring |= kinds.substring;
                slot.ordering |= kinds.ordering;
            }
        }
        Ok(config)
    }

    /// Every configured (attribute, kind) pair.
    pub fn configured(&self) -> BTreeSet<(String, IndexKind)> {
        let mut out = BTreeSet::new();
        for (attr, kinds) in &self.by_attr {
            for kind in IndexKind::ALL {
                if kind.of(*kinds) {
                    out.insert((attr.clone(), kind));
                }
            }
        }
        out
    }

    /// This configuration reduced to the (attribute, kind) pairs `keep` accepts; every
    /// remaining one searchable as far as `self` lets it be. What a shard writes while an
    /// index is cleared before its online build, and the keys the build adds
    /// (`write::indexing`).
    pub fn restricted(&self, keep: impl Fn(&str, IndexKind) -> bool) -> Self {
        let mut by_attr = HashMap::new();
        for (attr, kinds) in &self.by_attr {
            let kept = IndexKinds {
                equality: kinds.equality && keep(attr, IndexKind::Equality),
                presence: kinds.presence && keep(attr, IndexKind::Presence),
                substring: kinds.substring && keep(attr, IndexKind::Substring),
                ordering: kinds.ordering && keep(attr, IndexKind::Ordering),
            };
            if kept != IndexKinds::default() {
                by_attr.insert(attr.clone(), kept);
            }
        }
        Self { by_attr, searchable: self.searchable.clone() }
    }

    /// The (attribute, kind) pairs searches may use (those configured and ready).
    pub fn searchable(&self) -> BTreeSet<(String, IndexKind)> {
        self.configured().into_iter().filter(|(attr, kind)| self.usable(attr, *kind)).collect()
    }

    /// Whether `other` configures the same indices (readiness aside).
    pub fn same_indices(&self, other: &Self) -> bool {
        self.by_attr == other.by_attr
    }

    /// Restricts searches to the indices marked ready on every shard.
    pub fn set_searchable(&mut self, ready: HashSet<(String, IndexKind)>) {
        self.searchable = Some(ready);
    }

    /// Whether searches may use the `kind` index of canonical attribute `attr`.
    pub fn usable(&self, attr: &str, kind: IndexKind) -> bool {
        let configured = self.by_attr.get(attr).is_some_and(|k| kind.of(*k));
        configured && self.searchable.as_ref().is_none_or(|ready| ready.contains(&(attr.to_string(), kind)))
    }

    /// Every index key `entry` (stored as `id`) contributes, sorted and de-duplicated.
    pub fn keys_for(&self, rules: &RuleTable, id: EntryId, entry: &Entry) -> BTreeSet<Vec<u8>> {
        let mut out = BTreeSet::new();
        self.each_key(rules, id, entry, &mut |key| {
            if !out.contains(key) {
                out.insert(key.to_vec());
            }
        });
        out
    }

    /// The keys of [`IndexConfig::keys_for`], each handed to `visit` as it is built in one
    /// buffer, unsorted, and possibly more than once (two values with one normalised form, a
    /// gram that repeats in a value): `ferrodir import` hands them to its sort, which drops
    /// repeats, instead of allocating a set of vectors per entry.
    pub fn each_key(&self, rules: &RuleTable, id: EntryId, entry: &Entry, visit: &mut dyn FnMut(&[u8])) {
        self.each_key_of(rules, id, entry, &|_| true, visit);
    }

    /// The index keys that differ between `old` and `new`, one entry before and after a
    /// change whose untouched attributes `kept` flags ([`Entry::kept_from`]): each entry's
    /// keys ([`IndexConfig::keys_for`]), restricted to the indexed types of which some
    /// attribute was not kept. Every key names its type, and a type whose attributes were
    /// all kept contributes the same keys to both sets, so the difference between the two is
    /// that of the full sets; but only the attributes a change touched are normalised and
    /// cut into grams, not the whole entry twice (a Modify of one unindexed attribute builds
    /// no key at all).
    pub fn changed_keys(
        &self,
        rules: &RuleTable,
        id: EntryId,
        old: &Entry,
        new: &Entry,
        kept: &Kept,
    ) -> (BTreeSet<Vec<u8>>, BTreeSet<Vec<u8>>) {
        fn unkept<'e>(entry: &'e Entry, flags: &'e [bool]) -> impl Iterator<Item = &'e Attribute> + 'e {
            entry
                .attrs
                .iter()
                .enumerate()
                .filter(|(i, _)| !flags.get(*i).copied().unwrap_or(false))
                .map(|(_, a)| a)
        }
        let mut touched: Vec<&str> = Vec::new();
        for attr in unkept(old, &kept.old).chain(unkept(new, &kept.new)) {
            let Some(attr_rules) = rules.get(&attr.name) else { continue };
            let name = attr_rules.canonical.as_str();
            if self.by_attr.contains_key(name) && !touched.contains(&name) {
                touched.push(name);
            }
        }
        if touched.is_empty() {
            return (BTreeSet::new(), BTreeSet::new());
        }
        let keys = |entry: &Entry| {
            let mut out = BTreeSet::new();
            self.each_key_of(rules, id, entry, &|name| touched.contains(&name), &mut |key| {
                if !out.contains(key) {
                    out.insert(key.to_vec());
                }
            });
            out
        };
        (keys(old), keys(new))
    }

    /// [`IndexConfig::each_key`] for the attributes whose canonical type `wanted` accepts.
    fn each_key_of(
        &self,
        rules: &RuleTable,
        id: EntryId,
        entry: &Entry,
        wanted: &dyn Fn(&str) -> bool,
        visit: &mut dyn FnMut(&[u8]),
    ) {
        let mut key = Vec::with_capacity(64);
        let id_bytes = id.to_be_bytes();
        for attr in &entry.attrs {
            let Some(attr_rules) = rules.get(&attr.name) else { continue };
            let name = &attr_rules.canonical;
            let Some(kinds) = self.by_attr.get(name).copied() else { continue };
            if !wanted(name) {
                continue;
            }
            if kinds.presence && !attr.values.is_empty() {
                keys::pres_into(&mut key, name, id);
                visit(&key);
            }
            if kinds.equality {
                // The one rule lookups and the Bloom filters use too (`eqkey`).
                let values = attr.values.iter().map(Vec::as_slice);
                eqkey::each_stored_prefix(rules, attr_rules, values, &mut |prefix| {
                    key.clear();
                    key.extend_from_slice(prefix);
                    key.extend_from_slice(&id_bytes);
                    visit(&key);
                });
            }
            for value in &attr.values {
                if kinds.substring {
                    if let Some(form) = substring_form(attr_rules, value) {
                        for gram in grams(&anchored(&form)) {
                            keys::sub_into(&mut key, name, gram, id);
                            visit(&key);
                        }
                    }
                }
                if kinds.ordering {
                    if let Some(order) = ordering_key(attr_rules, value, rules.dn()) {
                        keys::ord_into(&mut key, name, &order, id);
                        visit(&key);
                    }
                }
            }
        }
    }
}

impl IndexConfig {
    /// The wide-gram keys of `entry` (`gramsummary`: 4-byte windows of each substring-indexed
    /// value, anchored like the index's grams), each handed to `visit`, possibly repeated.
    /// They are in no index, only in the server's gram table, where they prune shards more
    /// sharply than the index's 3-byte grams do.
    pub fn each_wide_gram(&self, rules: &RuleTable, entry: &Entry, visit: &mut dyn FnMut(&[u8])) {
        let mut key = Vec::with_capacity(32);
        for attr in &entry.attrs {
            let Some(attr_rules) = rules.get(&attr.name) else { continue };
            if !self.by_attr.get(&attr_rules.canonical).is_some_and(|k| k.substring) {
                continue;
            }
            for value in &attr.values {
                if let Some(form) = substring_form(attr_rules, value) {
                    for gram in anchored(&form).windows(WIDE_GRAM_BYTES) {
                        wide_key_into(&mut key, &attr_rules.canonical, gram);
                        visit(&key);
                    }
                }
            }
        }
    }
}

/// Bytes of a substring gram.
pub const GRAM_BYTES: usize = 3;
/// Bytes of a wide gram: kept only in the gram table (`gramsummary`), never in the index.
pub const WIDE_GRAM_BYTES: usize = 4;
/// The first byte of a wide-gram key; no table of the store starts with it.
const WIDE_MARK: u8 = b'w';

/// The gram table's key of a wide gram of `attr_lower` (into `key`, cleared first).
pub fn wide_key_into(key: &mut Vec<u8>, attr_lower: &str, gram: &[u8]) {
    key.clear();
    key.push(WIDE_MARK);
    key.extend_from_slice(attr_lower.as_bytes());
    key.push(0);
    key.extend_from_slice(gram);
}
const INITIAL_MARK: u8 = 0x01;
const FINAL_MARK: u8 = 0x02;

/// The form substring grams are cut from: the equality-normalised value, for the string
/// rules whose substring preparation agrees with their equality preparation (RFC 4518).
/// Grams only preselect candidates; the filter is still evaluated on each of them.
pub fn substring_form(rules: &AttrRules, value: &[u8]) -> Option<Vec<u8>> {
    match rules.equality? {
        Rule::CaseIgnore
        | Rule::CaseExact
        | Rule::CaseIgnoreIa5
        | Rule::CaseExactIa5
        | Rule::TelephoneNumber
        // None of these reads a DN: no schema normaliser is needed.
        | Rule::NumericString => matching::normalize(rules.equality?, value, &PlainAvas),
        _ => None,
    }
}

fn anchored(form: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(form.len() + 2);
    out.push(INITIAL_MARK);
    out.extend_from_slice(form);
    out.push(FINAL_MARK);
    out
}

/// Every window of [`GRAM_BYTES`] bytes.
pub fn grams(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.windows(GRAM_BYTES)
}

/// The grams a substring assertion requires: its initial piece anchored at the start, its
/// final piece at the end, every piece's inner grams.
pub fn assertion_grams(
    rules: &AttrRules,
    initial: Option<&[u8]>,
    any: &[&[u8]],
    final_: Option<&[u8]>,
) -> Vec<Vec<u8>> {
    assertion_windows(rules, initial, any, final_, GRAM_BYTES)
}

/// The wide-gram keys (`wide_key_into`) a substring assertion requires: the 4-byte windows of
/// its pieces, anchored as [`assertion_grams`] anchors them, for the gram table.
pub fn assertion_wide_keys(
    rules: &AttrRules,
    initial: Option<&[u8]>,
    any: &[&[u8]],
    final_: Option<&[u8]>,
) -> Vec<Vec<u8>> {
    let mut key = Vec::new();
    assertion_windows(rules, initial, any, final_, WIDE_GRAM_BYTES)
        .into_iter()
        .map(|gram| {
            wide_key_into(&mut key, &rules.canonical, &gram);
            key.clone()
        })
        .collect()
}

fn assertion_windows(
    rules: &AttrRules,
    initial: Option<&[u8]>,
    any: &[&[u8]],
    final_: Option<&[u8]>,
    width: usize,
) -> Vec<Vec<u8>> {
    let mut pieces = Vec::new();
    if let Some(piece) = initial.and_then(|p| substring_form(rules, p)) {
        let mut anchored = vec![INITIAL_MARK];
        anchored.extend_from_slice(&piece);
        pieces.push(anchored);
    }
    for piece in any.iter().filter_map(|p| substring_form(rules, p)) {
        pieces.push(piece);
    }
    if let Some(mut piece) = final_.and_then(|p| substring_form(rules, p)) {
        piece.push(FINAL_MARK);
        pieces.push(piece);
    }
    // In piece order (the search tries the last, usually rarest, grams first), no repeats.
    let mut out: Vec<Vec<u8>> = Vec::new();
    for piece in &pieces {
        for gram in piece.windows(width) {
            if !out.iter().any(|g| g.as_slice() == gram) {
                out.push(gram.to_vec());
            }
        }
    }
    out
}

/// A key that sorts like the ordering rule: integers as sign, length and digits; other
/// rules by their normalised form (generalizedTime normalises to UTC, so it sorts too).
pub fn ordering_key(rules: &AttrRules, value: &[u8], dn: &DnNormalizer) -> Option<Vec<u8>> {
    let rule = rules.ordering?;
    ordering_key_by(rule, equality_or(rules, rule), value, dn)
}

/// [`ordering_key`] under a given ordering rule, the value normalised by `normalize` (the
/// attribute's equality rule, or the ordering rule itself when a client names one): the
/// one key encoding that the `ord` index and server-side sorting (`sortkeys`) share.
/// `dn` normalises a DN-valued `normalize` rule.
pub fn ordering_key_by(rule: Rule, normalize: Rule, value: &[u8], dn: &DnNormalizer) -> Option<Vec<u8>> {
    let norm = matching::normalize(normalize, value, dn)?;
    if rule != Rule::Integer {
        return Some(norm);
    }
    let (negative, digits) = match norm.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, norm.as_slice()),
    };
    let len = u32::try_from(digits.len()).ok()?;
    let mut key = Vec::with_capacity(digits.len() + 5);
    if negative {
        // Larger magnitudes sort first: complement the length and digits.
        key.push(0);
        key.extend_from_slice(&(!len).to_be_bytes());
        key.extend(digits.iter().map(|d| b'9' - (d - b'0')));
    } else {
        key.push(1);
        key.extend_from_slice(&len.to_be_bytes());
        key.extend_from_slice(digits);
    }
    Some(key)
}

fn equality_or(rules: &AttrRules, ordering: Rule) -> Rule {
    rules.equality.unwrap_or(ordering)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::entry::Attribute;
    use ferrodir_proto::schema::Schema;

    fn rules() -> RuleTable {
        RuleTable::from_schema(&Schema::standard())
    }

    #[test]
    fn directives_map_aliases_to_canonical_names() {
        let rules = rules();
        let config = IndexConfig::from_directives(
            &["objectClass eq", "commonName,uid eq,pres,sub", "uidNumber ord"],
            &rules,
        )
        .unwrap();
        assert!(config.usable("cn", IndexKind::Presence));
        assert!(config.usable("cn", IndexKind::Substring));
        assert!(!config.usable("objectclass", IndexKind::Presence));
        assert!(config.usable("uidnumber", IndexKind::Ordering));
        assert!(IndexConfig::from_directives(&["cn bogus"], &rules).is_err());
    }

    #[test]
    fn unready_indices_are_not_searchable() {
        let rules = rules();
        let mut config = IndexConfig::from_directives(&["cn eq,sub"], &rules).unwrap();
        config.set_searchable(HashSet::from([("cn".to_string(), IndexKind::Equality)]));
        assert!(config.usable("cn", IndexKind::Equality));
        assert!(!config.usable("cn", IndexKind::Substring));
    }

    #[test]
    fn keys_follow_matching_rules() {
        let rules = rules();
        let config =
            IndexConfig::from_directives(&["cn eq,pres,sub", "telephoneNumber eq", "uidNumber ord"], &rules)
                .unwrap();
        let entry = Entry::new(vec![
            Attribute::new("commonName", vec![b"Babs  Jensen".to_vec()]),
            Attribute::new("telephoneNumber", vec![b"+1 555-1234".to_vec()]),
            Attribute::new("uidNumber", vec![b"42".to_vec()]),
        ]);
        let keys = config.keys_for(&rules, EntryId(5), &entry);
        assert!(keys.contains(&keys::eq("cn", b"babs jensen", EntryId(5))));
        assert!(keys.contains(&keys::pres("cn", EntryId(5))));
        assert!(keys.contains(&keys::eq("telephonenumber", b"+15551234", EntryId(5))));
        assert!(keys.contains(&keys::sub("cn", b"\x01ba", EntryId(5))));
        assert!(keys.contains(&keys::sub("cn", b"en\x02", EntryId(5))));
        let cn = rules.get("cn").unwrap();
        let wanted = assertion_grams(cn, Some(b"BABS".as_slice()), &[b"jen".as_slice()], None);
        for gram in &wanted {
            assert!(keys.contains(&keys::sub("cn", gram, EntryId(5))), "{gram:?}");
        }
    }

    /// Every wide key an assertion requires is among the entry's when the entry matches.
    #[test]
    fn an_entry_has_every_wide_key_its_matching_assertions_need() {
        let rules = rules();
        let config = IndexConfig::from_directives(&["cn sub", "sn eq"], &rules).unwrap();
        let entry = Entry::new(vec![
            Attribute::new("commonName", vec![b"Babs  Jensen".to_vec(), b"user 1234".to_vec()]),
            Attribute::new("sn", vec![b"Jensen".to_vec()]),
        ]);
        let mut keys = BTreeSet::new();
        config.each_wide_gram(&rules, &entry, &mut |k| {
            keys.insert(k.to_vec());
        });
        let cn = rules.get("cn").unwrap();
        for (initial, any, final_) in [
            (Some(b"babs j".as_slice()), vec![], None),
            (Some(b"USER 12".as_slice()), vec![], None),
            (None, vec![b"ser 1".as_slice()], Some(b"234".as_slice())),
            (None, vec![b"ensen".as_slice()], None),
        ] {
            let wanted = assertion_wide_keys(cn, initial, &any, final_);
            assert!(!wanted.is_empty());
            for key in wanted {
                assert!(keys.contains(&key), "{key:?}");
            }
        }
        // sn has no substring index: no wide keys for it; a piece of 3 bytes has none.
        assert!(keys.iter().all(|k| k.starts_with(b"wcn\0")));
        assert_eq!(assertion_wide_keys(cn, Some(b"abc"), &[], None).len(), 1);
        assert!(assertion_wide_keys(cn, Some(b"ab"), &[], None).is_empty());
        assert!(assertion_wide_keys(cn, None, &[b"abc".as_slice()], None).is_empty());
    }

    #[test]
    fn integer_ordering_keys_sort_numerically() {
        let rules = rules();
        let uid_number = rules.get("uidNumber").unwrap();
        let mut keys: Vec<(Vec<u8>, i64)> = [-100i64, -5, -1, 0, 3, 10, 100, 12345]
            .iter()
            .map(|n| (ordering_key(uid_number, n.to_string().as_bytes(), rules.dn()).unwrap(), *n))
            .collect();
        keys.sort();
        let sorted: Vec<i64> = keys.into_iter().map(|(_, n)| n).collect();
        assert_eq!(sorted, vec![-100, -5, -1, 0, 3, 10, 100, 12345]);
    }
}
