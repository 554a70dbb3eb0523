//! Applying a Modify's changes to an entry (RFC 4511 §4.6): all of them or none, since the
//! caller applies them to a copy. Attributes are found by type, whatever name or alias the
//! client used (`commonName` changes `cn`), and values compared by the type's equality rule.

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::ldif::{LdifMod, ModOp};

use crate::error::{ShardError, ShardResult};
use crate::rules::{equality_key, RuleTable};

/// Applies `changes` in order to `entry`.
pub fn apply_changes(rules: &RuleTable, entry: &mut Entry, changes: &[LdifMod]) -> ShardResult<()> {
    for change in changes {
        match change.op {
            ModOp::Add => add_values(rules, entry, &change.attr)?,
            ModOp::Delete => delete_values(rules, entry, &change.attr)?,
            ModOp::Replace => {
                remove_attr(rules, entry, &change.attr.name);
                if !change.attr.values.is_empty() {
                    let mut attr = dedup(rules, &change.attr)?;
                    attr.name = rules.display(&attr.name);
                    entry.attrs.push(attr);
                }
            }
            ModOp::Increment => increment(rules, entry, &change.attr)?,
        }
    }
    Ok(())
}

/// The comparison key of a value of `name`: its equality-normalised form, or the bytes
/// themselves for a type without an equality rule.
pub fn value_key(rules: &RuleTable, name: &str, value: &[u8]) -> Vec<u8> {
    rules.get(name).and_then(|r| equality_key(rules, r, value)).unwrap_or_else(|| value.to_vec())
}

/// The index in `entry.attrs` of the attribute of the same type as `name` (options included).
pub fn find_attr(rules: &RuleTable, entry: &Entry, name: &str) -> Option<usize> {
    let wanted = TypeOf::new(rules, name);
    let options = options_of(name);
    entry.attrs.iter().position(|a| {
        options_of(&a.name).eq_ignore_ascii_case(options) && wanted.matches(&TypeOf::new(rules, &a.name))
    })
}

/// The options of an attribute description as written (`lang-en` of `cn;lang-en`).
fn options_of(name: &str) -> &str {
    name.split_once(';').map_or("", |(_, options)| options)
}

/// An attribute description's type, compared as `RuleTable::canonical` compares it but
/// without building that string for every attribute an entry holds: a known type by its
/// canonical name, an unknown one by its base name, ignoring case.
enum TypeOf<'a> {
    Known(&'a str),
    Unknown(&'a str),
}

impl<'a> TypeOf<'a> {
    fn new(rules: &'a RuleTable, name: &'a str) -> Self {
        match rules.get(name) {
            Some(found) => TypeOf::Known(found.canonical.as_str()),
            None => TypeOf::Unknown(name.split(';').next().unwrap_or("")),
        }
    }

    fn matches(&self, other: &TypeOf<'_>) -> bool {
        match (self, other) {
            (TypeOf::Known(a), TypeOf::Known(b)) => a == b,
            // An unknown type's canonical form is its lowercased base name, which a known
            // type's canonical name may happen to equal.
            (TypeOf::Known(known), TypeOf::Unknown(base)) | (TypeOf::Unknown(base), TypeOf::Known(known)) => {
                base.eq_ignore_ascii_case(known) && known.bytes().all(|b| !b.is_ascii_uppercase())
            }
            (TypeOf::Unknown(a), TypeOf::Unknown(b)) => a.eq_ignore_ascii_case(b),
        }
    }
}

fn remove_attr(rules: &RuleTable, entry: &mut Entry, name: &str) -> bool {
    match find_attr(rules, entry, name) {
        Some(index) => {
            entry.attrs.remove(index);
            true
        }
        None => false,
    }
}

fn dedup(rules: &RuleTable, attr: &Attribute) -> ShardResult<Attribute> {
    let mut seen = std::collections::HashSet::new();
    for value in &attr.values {
        if !seen.insert(value_key(rules, &attr.name, value)) {
            return Err(ShardError::AttributeOrValueExists(attr.name.clone()));
        }
    }
    Ok(attr.clone())
}

fn add_values(rules: &RuleTable, entry: &mut Entry, attr: &Attribute) -> ShardResult<()> {
    if attr.values.is_empty() {
        return Err(ShardError::ConstraintViolation(format!("{}: no values to add", attr.name)));
    }
    let mut incoming = dedup(rules, attr)?;
    incoming.name = rules.display(&incoming.name);
    match find_attr(rules, entry, &attr.name).and_then(|index| entry.attrs.get_mut(index)) {
        Some(existing) => {
            for value in incoming.values {
                let key = value_key(rules, &attr.name, &value);
                if existing.values.iter().any(|v| value_key(rules, &attr.name, v) == key) {
                    return Err(ShardError::AttributeOrValueExists(attr.name.clone()));
                }
                existing.values.push(value);
            }
        }
        None => entry.attrs.push(incoming),
    }
    Ok(())
}

fn delete_values(rules: &RuleTable, entry: &mut Entry, attr: &Attribute) -> ShardResult<()> {
    if attr.values.is_empty() {
        if !remove_attr(rules, entry, &attr.name) {
            return Err(ShardError::NoSuchAttribute(attr.name.clone()));
        }
        return Ok(());
    }
    let no_such = || ShardError::NoSuchAttribute(attr.name.clone());
    let index = find_attr(rules, entry, &attr.name).ok_or_else(no_such)?;
    let existing = entry.attrs.get_mut(index).ok_or_else(no_such)?;
    for value in &attr.values {
        let key = value_key(rules, &attr.name, value);
        let before = existing.values.len();
        existing.values.retain(|v| value_key(rules, &attr.name, v) != key);
        if existing.values.len() == before {
            return Err(ShardError::NoSuchAttribute(attr.name.clone()));
        }
    }
    if existing.values.is_empty() {
        entry.attrs.remove(index);
    }
    Ok(())
}

/// RFC 4525: add the given integer to every value of the attribute.
fn increment(rules: &RuleTable, entry: &mut Entry, attr: &Attribute) -> ShardResult<()> {
    let delta = match attr.values.as_slice() {
        [one] => parse_int(one)
            .ok_or_else(|| ShardError::ConstraintViolation("increment value is not an integer".into()))?,
        _ => return Err(ShardError::ConstraintViolation("increment needs exactly one value".into())),
    };
    let existing = find_attr(rules, entry, &attr.name)
        .and_then(|index| entry.attrs.get_mut(index))
        .ok_or_else(|| ShardError::NoSuchAttribute(attr.name.clone()))?;
    for value in &mut existing.values {
        let current = parse_int(value)
            .ok_or_else(|| ShardError::ConstraintViolation("value is not an integer".into()))?;
        let next = current
            .checked_add(delta)
            .ok_or_else(|| ShardError::ConstraintViolation("integer overflow".into()))?;
        *value = next.to_string().into_bytes();
    }
    Ok(())
}

fn parse_int(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::schema::Schema;

    fn m(op: ModOp, name: &str, values: &[&str]) -> LdifMod {
        LdifMod { op, attr: Attribute::new(name, values.iter().map(|v| v.as_bytes().to_vec()).collect()) }
    }

    #[test]
    fn add_delete_replace_increment() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let mut e = Entry::new(vec![Attribute::new("cn", vec![b"a".to_vec()])]);
        apply_changes(
            &rules,
            &mut e,
            &[m(ModOp::Add, "commonName", &["b"]), m(ModOp::Add, "uidNumber", &["5"])],
        )
        .unwrap();
        assert_eq!(e.get("cn").unwrap().values.len(), 2);
        assert!(matches!(
            apply_changes(&rules, &mut e.clone(), &[m(ModOp::Add, "CN", &["A"])]),
            Err(ShardError::AttributeOrValueExists(_))
        ));
        assert!(matches!(
            apply_changes(&rules, &mut e.clone(), &[m(ModOp::Delete, "cn", &["zz"])]),
            Err(ShardError::NoSuchAttribute(_))
        ));
        apply_changes(&rules, &mut e, &[m(ModOp::Increment, "uidnumber", &["-2"])]).unwrap();
        assert_eq!(e.first_str("uidNumber"), Some("3"));
        apply_changes(
            &rules,
            &mut e,
            &[m(ModOp::Replace, "2.5.4.3", &["z"]), m(ModOp::Delete, "uidNumber", &[])],
        )
        .unwrap();
        assert_eq!(e.get("cn").unwrap().values, vec![b"z".to_vec()]);
        assert!(e.get("uidnumber").is_none());
    }

    /// A type by any of its names, options compared ignoring case and never mixed with the
    /// type without them, an unknown type by its base name.
    #[test]
    fn find_attr_matches_types_as_canonical_names_do() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let e = Entry::new(vec![
            Attribute::new("cn", vec![b"a".to_vec()]),
            Attribute::new("cn;lang-EN", vec![b"b".to_vec()]),
            Attribute::new("x-Unknown", vec![b"c".to_vec()]),
        ]);
        assert_eq!(find_attr(&rules, &e, "commonName"), Some(0));
        assert_eq!(find_attr(&rules, &e, "2.5.4.3;LANG-en"), Some(1));
        assert_eq!(find_attr(&rules, &e, "cn;lang-de"), None);
        assert_eq!(find_attr(&rules, &e, "X-UNKNOWN"), Some(2));
        assert_eq!(find_attr(&rules, &e, "sn"), None);
    }
}
