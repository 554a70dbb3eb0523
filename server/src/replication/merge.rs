//! Merging two versions of one entry attribute by attribute, as a mesh node does when a
//! peer sends an entry it holds too (`multi_provider`): every attribute, and the entry's
//! name, goes to the version whose change of it has the larger CSN. The CSNs come from
//! each version's ferrodirAttrCSN (`shard::write::stamp`: `<CSN> <key>`, keys an attribute
//! description, `@dn` or `@add`); a version without them (a slapd peer's) counts every
//! attribute and its name at its entryCSN.
//!
//! Each attribute is a last-writer-wins register, so merging is commutative, associative
//! and idempotent: every node that has seen the same versions holds the same entry, in any
//! order of arrival. Two concurrent modifies of different attributes both survive, and a
//! rename concurrent with a modify keeps both (the modify follows the entry).

use std::collections::BTreeMap;

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_shard::{attribute_csns, set_attribute_csns};

/// Attributes each version stamps for itself, merged by the rules in [`merge`]: those the
/// shard does not track per attribute.
const STAMPS: &[&str] = ferrodir_shard::ATTR_CSN_UNTRACKED;

/// The outcome of a merge.
#[derive(Debug)]
pub struct Merged {
    pub entry: Entry,
    /// The name goes to the remote version's DN.
    pub remote_name: bool,
    /// The merged entry differs from the local one (a write is needed).
    pub changed: bool,
    /// Some local change was kept against the remote version, and some remote change was
    /// taken: the two were concurrent (a conflict, resolved attribute by attribute).
    pub concurrent: bool,
}

/// Whether `entry` carries per-attribute CSNs.
pub fn tracked(entry: &Entry) -> bool {
    !attribute_csns(entry).is_empty()
}

struct Version<'a> {
    entry: &'a Entry,
    csns: BTreeMap<String, String>,
    entry_csn: String,
}

impl<'a> Version<'a> {
    fn of(entry: &'a Entry) -> Self {
        Self {
            entry,
            csns: attribute_csns(entry).into_iter().collect(),
            entry_csn: entry.first_str("entryCSN").unwrap_or_default().to_string(),
        }
    }

    /// The CSN of the last change of `key` in this version.
    fn csn(&self, key: &str) -> &str {
        self.csns.get(key).or_else(|| self.csns.get("@add")).map_or(self.entry_csn.as_str(), String::as_str)
    }

    /// The values of the attributes described `key` (lower case), as stored.
    fn attrs(&self, key: &str) -> Vec<&'a Attribute> {
        self.entry.attrs.iter().filter(|a| a.name.eq_ignore_ascii_case(key)).collect()
    }
}

fn sorted_values(attrs: &[&Attribute]) -> Vec<Vec<u8>> {
    let mut values: Vec<Vec<u8>> = attrs.iter().flat_map(|a| a.values.iter().cloned()).collect();
    values.sort();
    values
}

/// Merges the local and the remote version of one entry. `rdn`: the attribute values the
/// chosen name needs (each `(type, value)` of the RDN the caller will give the entry),
/// added if the merged attributes lack them.
pub fn merge(local: &Entry, remote: &Entry, rdn_of: impl Fn(bool) -> Vec<(String, Vec<u8>)>) -> Merged {
    let (ours, theirs) = (Version::of(local), Version::of(remote));
    let mut keys: Vec<String> =
        local.attrs.iter().chain(remote.attrs.iter()).map(|a| a.name.to_ascii_lowercase()).collect();
    keys.sort();
    keys.dedup();
    let (mut took_remote, mut kept_local) = (false, false);
    let mut attrs: Vec<Attribute> = Vec::new();
    let mut csns: BTreeMap<String, String> = ours.csns.clone();
    for (key, csn) in &theirs.csns {
        match csns.get(key) {
            Some(held) if held.as_str() >= csn.as_str() => {}
            _ => {
                csns.insert(key.clone(), csn.clone());
            }
        }
    }
    for key in &keys {
        let base = key.split(';').next().unwrap_or_default();
        if STAMPS.contains(&base) {
            continue;
        }
        let (mine, yours) = (ours.attrs(key), theirs.attrs(key));
        let differ = sorted_values(&mine) != sorted_values(&yours);
        let remote_wins = theirs.csn(key) > ours.csn(key);
        if differ {
            if remote_wins {
                took_remote = true;
            } else if theirs.csn(key) != ours.csn(key) {
                kept_local = true;
            }
        }
        let chosen = if remote_wins { yours } else { mine };
        attrs.extend(chosen.into_iter().cloned());
        // Every attribute the merge saw keeps the winning CSN explicitly: a version
        // without CSNs (a slapd peer's) implies them, and the next merge must compare the
        // values held with the change that put them there.
        csns.insert(key.clone(), ours.csn(key).max(theirs.csn(key)).to_string());
    }
    let remote_name = theirs.csn("@dn") > ours.csn("@dn");
    csns.insert("@dn".to_string(), ours.csn("@dn").max(theirs.csn("@dn")).to_string());
    for (name, value) in rdn_of(remote_name) {
        match attrs.iter_mut().find(|a| a.name.eq_ignore_ascii_case(&name)) {
            Some(attr) if attr.values.iter().any(|v| v.eq_ignore_ascii_case(&value)) => {}
            Some(attr) => attr.values.push(value),
            None => attrs.push(Attribute::new(name, vec![value])),
        }
    }
    // Stamps: the newer version's modifier and time, the larger entryCSN; the creation's
    // (the same entity on both sides) as the local version has them.
    let newer = if theirs.entry_csn > ours.entry_csn { &theirs } else { &ours };
    for name in ["entryCSN", "modifiersName", "modifyTimestamp"] {
        attrs.extend(newer.attrs(&name.to_ascii_lowercase()).into_iter().cloned());
    }
    // The creation's from the version whose Add is the later: the same on both sides for
    // one entry, and a glue entry (which stands for the entry's delete) over the original.
    let (created, other) =
        if theirs.csn("@add") > ours.csn("@add") { (&theirs, &ours) } else { (&ours, &theirs) };
    for name in ["entryUUID", "creatorsName", "createTimestamp"] {
        let key = name.to_ascii_lowercase();
        let from = if created.attrs(&key).is_empty() { other } else { created };
        attrs.extend(from.attrs(&key).into_iter().cloned());
    }
    let mut entry = Entry::new(attrs);
    // A write only when something moved: values, the name, or a CSN above what the local
    // version held (explicit or implied). Restating the local CSNs is no change, so an
    // older copy come back by another path writes nothing and so sends nothing on.
    let raised = csns.iter().any(|(key, csn)| csn.as_str() > ours.csn(key));
    let map: Vec<(String, String)> = csns.into_iter().collect();
    let mut without_map = entry.clone();
    set_attribute_csns(&mut entry, &map);
    let mut local_without_map = local.clone();
    set_attribute_csns(&mut local_without_map, &[]);
    set_attribute_csns(&mut without_map, &[]);
    let changed = remote_name || raised || !same_content(&without_map, &local_without_map);
    Merged { entry, remote_name, changed, concurrent: took_remote && kept_local }
}

/// Whether two entries hold the same attributes and values, in any order.
fn same_content(a: &Entry, b: &Entry) -> bool {
    let view = |e: &Entry| {
        let mut m: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        for attr in &e.attrs {
            m.entry(attr.name.to_ascii_lowercase()).or_default().extend(attr.values.iter().cloned());
        }
        for values in m.values_mut() {
            values.sort();
        }
        m
    };
    view(a) == view(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pairs: &[(&str, &str)], csns: &[(&str, &str)]) -> Entry {
        let mut e = Entry::new(Vec::new());
        for (name, value) in pairs {
            match e.attrs.iter_mut().find(|a| a.name == *name) {
                Some(a) => a.values.push(value.as_bytes().to_vec()),
                None => e.attrs.push(Attribute::new(*name, vec![value.as_bytes().to_vec()])),
            }
        }
        let map: Vec<(String, String)> = csns.iter().map(|(k, c)| (k.to_string(), c.to_string())).collect();
        set_attribute_csns(&mut e, &map);
        e
    }

    fn get(e: &Entry, name: &str) -> Vec<String> {
        e.attrs
            .iter()
            .filter(|a| a.name.eq_ignore_ascii_case(name))
            .flat_map(|a| a.values.iter().map(|v| String::from_utf8_lossy(v).into_owned()))
            .collect()
    }

    fn none(_: bool) -> Vec<(String, Vec<u8>)> {
        Vec::new()
    }

    #[test]
    fn concurrent_modifies_of_different_attributes_both_survive_in_either_order() {
        let base = [("cn", "x"), ("objectClass", "person")];
        let a = entry(
            &[base[0], base[1], ("sn", "from a"), ("description", "old"), ("entryCSN", "2")],
            &[("@add", "1"), ("sn", "2")],
        );
        let b = entry(
            &[base[0], base[1], ("sn", "old"), ("description", "from b"), ("entryCSN", "3")],
            &[("@add", "1"), ("description", "3")],
        );
        let ab = merge(&a, &b, none);
        let ba = merge(&b, &a, none);
        for m in [&ab, &ba] {
            assert_eq!(get(&m.entry, "sn"), ["from a"]);
            assert_eq!(get(&m.entry, "description"), ["from b"]);
            assert_eq!(get(&m.entry, "entryCSN"), ["3"]);
            assert!(m.concurrent && m.changed);
        }
        assert!(same_content(&ab.entry, &ba.entry), "the same entry on both nodes");
        // Merging again changes nothing (idempotent): no write, so no echo.
        let again = merge(&ab.entry, &b, none);
        assert!(!again.changed);
    }

    #[test]
    fn the_same_attribute_goes_to_the_larger_csn_and_an_older_copy_changes_nothing() {
        let a = entry(&[("description", "a"), ("entryCSN", "5")], &[("@add", "1"), ("description", "5")]);
        let b = entry(&[("description", "b"), ("entryCSN", "4")], &[("@add", "1"), ("description", "4")]);
        let m = merge(&a, &b, none);
        assert_eq!(get(&m.entry, "description"), ["a"]);
        assert!(!m.changed);
        let m = merge(&b, &a, none);
        assert_eq!(get(&m.entry, "description"), ["a"]);
        assert!(m.changed && !m.concurrent);
    }

    #[test]
    fn a_rename_and_a_modify_both_survive() {
        // a renamed the entry at 2 (its RDN value cn=y); b changed description at 3.
        let a = entry(
            &[("cn", "x"), ("cn", "y"), ("description", "old"), ("entryCSN", "2")],
            &[("@add", "1"), ("@dn", "2"), ("cn", "2")],
        );
        let b = entry(
            &[("cn", "x"), ("description", "new"), ("entryCSN", "3")],
            &[("@add", "1"), ("description", "3")],
        );
        let rdn = |remote: bool| {
            if remote {
                vec![("cn".to_string(), b"x".to_vec())]
            } else {
                vec![("cn".to_string(), b"y".to_vec())]
            }
        };
        let at_b = merge(&b, &a, rdn);
        assert!(at_b.remote_name, "b takes a's name");
        let at_a = merge(&a, &b, |remote: bool| rdn(!remote));
        assert!(!at_a.remote_name, "a keeps its name");
        for m in [&at_a, &at_b] {
            assert_eq!(get(&m.entry, "description"), ["new"]);
            let mut cn = get(&m.entry, "cn");
            cn.sort();
            assert_eq!(cn, ["x", "y"]);
        }
    }

    #[test]
    fn a_version_without_csns_counts_everything_at_its_entry_csn() {
        // A slapd peer's newer version against a local change older than it.
        let local = entry(
            &[("description", "mine"), ("sn", "s"), ("entryCSN", "2")],
            &[("@add", "1"), ("description", "2")],
        );
        let slapd = entry(&[("description", "theirs"), ("sn", "t"), ("entryCSN", "3")], &[]);
        let m = merge(&local, &slapd, none);
        assert_eq!(get(&m.entry, "description"), ["theirs"]);
        assert_eq!(get(&m.entry, "sn"), ["t"]);
    }
}
