//! The equality-key rule, in one place: which equality posting prefixes a stored value is
//! filed under, which one an equality assertion looks up, and which bytes of a posting a
//! shard's Bloom filter records.
//!
//! Four paths depend on it: the index keys an entry contributes ([`IndexConfig::keys_for`],
//! used by staging and by import), the planner's lookup ([`crate::query::candidates::Planner`],
//! also the key the router asks the Bloom filters for, `Plan::required_equality`), the
//! Bloom insert when a write is staged (`batch`) and the Bloom fill when a server opens its
//! data directory. If any of them computed the key on its own and drifted, a search would
//! silently miss entries (an index lookup finds no posting, or a shard is pruned that
//! holds the value), so all of them call the functions here.
//!
//! [`IndexConfig::keys_for`]: crate::index::config::IndexConfig::keys_for

use crate::index::keys;
use crate::rules::{equality_key, AttrRules, RuleTable};
use crate::storage::Table;

/// The equality posting prefixes (`keys::eq_prefix`) one stored value of `attr` is filed
/// under, its own key first. Most values have one: the value normalised by the type's
/// equality rule. An objectClass value also stands for its superclasses, as in filters
/// (`(objectClass=person)` matches an inetOrgPerson), so it is filed under the lowercased
/// primary name of the class and of each superclass. Empty when the value is invalid under
/// the rule, or an unknown class: no equality assertion can find it by the index.
pub fn stored_prefixes(rules: &RuleTable, attr: &AttrRules, value: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    each_stored_prefix(rules, attr, std::iter::once(value), &mut |prefix| out.push(prefix.to_vec()));
    out
}

/// [`stored_prefixes`] of every value in `values`, each prefix handed to `visit` as it is
/// built in one buffer (no allocation per key: an import builds millions). A prefix two
/// values share comes once per value, except a superclass that several objectClass values
/// share (top, person, ... of an inetOrgPerson), which comes once.
pub fn each_stored_prefix<'v>(
    rules: &RuleTable,
    attr: &AttrRules,
    values: impl IntoIterator<Item = &'v [u8]>,
    visit: &mut dyn FnMut(&[u8]),
) {
    let mut prefix = Vec::with_capacity(64);
    if is_class(attr) {
        let mut seen: Vec<&str> = Vec::new();
        for value in values {
            for class in rules.class_lineage(value).into_iter().flat_map(|lineage| lineage.iter()) {
                if !seen.contains(&class.as_str()) {
                    seen.push(class);
                    keys::eq_prefix_into(&mut prefix, &attr.canonical, class.as_bytes());
                    visit(&prefix);
                }
            }
        }
        return;
    }
    for value in values {
        if let Some(key) = equality_key(rules, attr, value) {
            keys::eq_prefix_into(&mut prefix, &attr.canonical, &key);
            visit(&prefix);
        }
    }
}

/// What an equality assertion `(attr=value)` reads from the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Every posting under this prefix. Also what a shard's Bloom filter is asked for.
    Value(Vec<u8>),
    /// objectClass: the postings under the class's own name, which every entry of the class
    /// or a subclass holds. Not worth a Bloom probe: the common classes are on every shard.
    Class(Vec<u8>),
    /// An unknown object class: no entry holds it.
    NoSuchClass,
    /// The value is invalid under the type's equality rule: the index can't answer (the
    /// filter evaluates it, to Undefined).
    Invalid,
}

/// The lookup of an equality assertion: by definition the first of the prefixes the same
/// value is stored under ([`stored_prefixes`]), so the two sides can't disagree.
pub fn lookup(rules: &RuleTable, attr: &AttrRules, value: &[u8]) -> Lookup {
    match (stored_prefixes(rules, attr, value).into_iter().next(), is_class(attr)) {
        (Some(prefix), false) => Lookup::Value(prefix),
        (Some(prefix), true) => Lookup::Class(prefix),
        (None, true) => Lookup::NoSuchClass,
        (None, false) => Lookup::Invalid,
    }
}

/// What a shard's Bloom filter records for an index key: an equality posting's prefix (the
/// key without its 8-byte id, what [`Lookup::Value`] carries); None for any other key.
pub fn bloom_key(index_key: &[u8]) -> Option<&[u8]> {
    let prefix = index_key.get(..index_key.len().checked_sub(8)?)?;
    (prefix.len() > 1 && prefix.first() == Some(&(Table::Eq as u8))).then_some(prefix)
}

fn is_class(attr: &AttrRules) -> bool {
    attr.canonical == "objectclass"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::EntryId;
    use crate::index::bloom::EqBloom;
    use crate::index::config::IndexConfig;
    use crate::query::candidates::{Plan, Planner};
    use crate::rights::TypeSet;
    use ferrodir_proto::entry::{Attribute, Entry};
    use ferrodir_proto::filter::parse_filter;
    use ferrodir_proto::schema::Schema;

    /// One equality posting: a prefix of [`stored_prefixes`] followed by the entry's id.
    fn posting(mut prefix: Vec<u8>, id: EntryId) -> Vec<u8> {
        prefix.extend_from_slice(&id.to_be_bytes());
        prefix
    }

    /// The insert side (the index keys staging and import write, and the Bloom filter fed
    /// from them as staging and the fill at open feed it) against the lookup side (the
    /// planner, and the router's Bloom probe with the plan's key): every assertion that
    /// must match the entry finds its posting and passes the Bloom filter.
    #[test]
    fn insert_and_lookup_sides_agree() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let indexes = IndexConfig::from_directives(
            &["objectClass eq", "cn,mail,telephoneNumber,uid eq", "sn eq,sub"],
            &rules,
        )
        .unwrap();
        let id = EntryId::new(1, 42);
        let entry = Entry::new(vec![
            Attribute::new("objectClass", vec![b"top".to_vec(), b"inetOrgPerson".to_vec()]),
            // Multi-valued, needing normalisation (case, inner and outer spaces).
            Attribute::new("commonName", vec![b"Babs  Jensen".to_vec(), b" BJ".to_vec()]),
            // An option: filed under the type itself.
            Attribute::new("cn;lang-de", vec![b"B\xc3\xa4rbel".to_vec()]),
            Attribute::new("sn", vec![b"Jensen".to_vec()]),
            Attribute::new("mail", vec![b"Babs@Example.COM".to_vec()]),
            Attribute::new("telephoneNumber", vec![b"+1 555-1234".to_vec()]),
            Attribute::new("UID", vec![b"bjensen".to_vec()]),
        ]);
        let stored = indexes.keys_for(&rules, id, &entry);
        let bloom = EqBloom::new();
        for key in &stored {
            if let Some(prefix) = bloom_key(key) {
                bloom.insert(prefix);
            }
        }
        let unsearchable = TypeSet::default();
        let planner = Planner { indexes: &indexes, rules: &rules, unsearchable: &unsearchable };
        let finds = |text: &str| -> bool {
            match planner.plan(&parse_filter(text).unwrap()) {
                Some(Plan::Equality(prefix)) => {
                    let hit = stored.contains(&posting(prefix.clone(), id));
                    // The router's probe: a shard holding the value is never pruned.
                    assert!(
                        !hit || bloom.may_contain(&prefix),
                        "{text}: indexed but pruned by the Bloom filter"
                    );
                    hit
                }
                Some(Plan::Postings(prefix)) => stored.contains(&posting(prefix, id)),
                Some(Plan::Empty) => false,
                other => panic!("{text}: not an indexed equality: {other:?}"),
            }
        };
        for text in [
            "(cn=babs jensen)",
            "(CN=BABS JENSEN)",
            "(commonName= Babs Jensen )",
            "(2.5.4.3=bj)",
            "(cn=b\\c3\\a4rbel)",
            "(cn;lang-de=B\\c3\\a4rbel)",
            "(mail=babs@example.com)",
            "(telephoneNumber=+15551234)",
            "(telephoneNumber=+1 555 1234)",
            "(uid=BJensen)",
            "(userid=bjensen)",
            "(sn=JENSEN)",
            "(objectClass=inetOrgPerson)",
            "(objectClass=PERSON)",
            "(objectClass=organizationalPerson)",
            "(objectClass=2.5.6.6)",
            "(objectClass=top)",
        ] {
            assert!(finds(text), "{text}: the index misses the entry");
        }
        // The test can fail: values the entry lacks find nothing.
        for text in
            ["(cn=babs)", "(mail=other@example.com)", "(objectClass=groupOfNames)", "(objectClass=nosuch)"]
        {
            assert!(!finds(text), "{text}: found an entry without the value");
        }
        // A supertype's assertion must not use the type's own postings (`name` matches cn
        // and sn by subtyping, each filed under its own name): it scans.
        assert_eq!(planner.plan(&parse_filter("(name=jensen)").unwrap()), None);
    }

    #[test]
    fn bloom_key_is_the_equality_prefix_only() {
        let id = EntryId::new(0, 7);
        let eq = keys::eq("cn", b"x", id);
        assert_eq!(bloom_key(&eq), Some(keys::eq_prefix("cn", b"x").as_slice()));
        assert_eq!(bloom_key(&keys::pres("cn", id)), None);
        assert_eq!(bloom_key(&keys::sub("cn", b"abc", id)), None);
        assert_eq!(bloom_key(&keys::entry(id)), None);
        assert_eq!(bloom_key(b"Q"), None);
    }
}
