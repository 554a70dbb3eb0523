//! Applying a Modify's changes to an entry (RFC 4511 §4.6): all of them or none, since the
//! caller applies them to a copy.

use ferrodir_proto::entry::{base_name_lower, Attribute, Entry};
use ferrodir_proto::ldif::{LdifMod, ModOp};
use ferrodir_proto::value::normalize_value;

use crate::error::{ShardError, ShardResult};

/// Applies `changes` in order to `entry`.
pub fn apply_changes(entry: &mut Entry, changes: &[LdifMod]) -> ShardResult<()> {
    for change in changes {
        let name = base_name_lower(&change.attr.name);
        match change.op {
            ModOp::Add => add_values(entry, &change.attr, &name)?,
            ModOp::Delete => delete_values(entry, &change.attr, &name)?,
            ModOp::Replace => {
                entry.remove(&change.attr.name);
                if !change.attr.values.is_empty() {
                    entry.attrs.push(dedup(&change.attr, &name)?);
                }
            }
            ModOp::Increment => increment(entry, &change.attr)?,
        }
    }
    Ok(())
}

fn dedup(attr: &Attribute, name: &str) -> ShardResult<Attribute> {
    let mut seen = std::collections::HashSet::new();
    for value in &attr.values {
        if !seen.insert(normalize_value(name, value)) {
            return Err(ShardError::AttributeOrValueExists(attr.name.clone()));
        }
    }
    Ok(attr.clone())
}

fn add_values(entry: &mut Entry, attr: &Attribute, name: &str) -> ShardResult<()> {
    if attr.values.is_empty() {
        return Err(ShardError::ConstraintViolation(format!("{}: no values to add", attr.name)));
    }
    let incoming = dedup(attr, name)?;
    match entry.get_mut(&attr.name) {
        Some(existing) => {
            for value in incoming.values {
                let norm = normalize_value(name, &value);
                if existing.values.iter().any(|v| normalize_value(name, v) == norm) {
                    return Err(ShardError::AttributeOrValueExists(attr.name.clone()));
                }
                existing.values.push(value);
            }
        }
        None => entry.attrs.push(incoming),
    }
    Ok(())
}

fn delete_values(entry: &mut Entry, attr: &Attribute, name: &str) -> ShardResult<()> {
    if attr.values.is_empty() {
        if !entry.remove(&attr.name) {
            return Err(ShardError::NoSuchAttribute(attr.name.clone()));
        }
        return Ok(());
    }
    let existing = entry.get_mut(&attr.name).ok_or_else(|| ShardError::NoSuchAttribute(attr.name.clone()))?;
    for value in &attr.values {
        let norm = normalize_value(name, value);
        let before = existing.values.len();
        existing.values.retain(|v| normalize_value(name, v) != norm);
        if existing.values.len() == before {
            return Err(ShardError::NoSuchAttribute(attr.name.clone()));
        }
    }
    if existing.values.is_empty() {
        entry.remove(&attr.name);
    }
    Ok(())
}

/// RFC 4525: add the given integer to every value of the attribute.
fn increment(entry: &mut Entry, attr: &Attribute) -> ShardResult<()> {
    let delta = match attr.values.as_slice() {
        [one] => parse_int(one)
            .ok_or_else(|| ShardError::ConstraintViolation("increment value is not an integer".into()))?,
        _ => return Err(ShardError::ConstraintViolation("increment needs exactly one value".into())),
    };
    let existing = entry.get_mut(&attr.name).ok_or_else(|| ShardError::NoSuchAttribute(attr.name.clone()))?;
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

    fn m(op: ModOp, name: &str, values: &[&str]) -> LdifMod {
        LdifMod { op, attr: Attribute::new(name, values.iter().map(|v| v.as_bytes().to_vec()).collect()) }
    }

    #[test]
    fn add_delete_replace_increment() {
        let mut e = Entry::new(vec![Attribute::new("cn", vec![b"a".to_vec()])]);
        apply_changes(&mut e, &[m(ModOp::Add, "cn", &["b"]), m(ModOp::Add, "uidNumber", &["5"])]).unwrap();
        assert_eq!(e.get("cn").unwrap().values.len(), 2);
        assert!(matches!(
            apply_changes(&mut e.clone(), &[m(ModOp::Add, "CN", &["A"])]),
            Err(ShardError::AttributeOrValueExists(_))
        ));
        assert!(matches!(
            apply_changes(&mut e.clone(), &[m(ModOp::Delete, "cn", &["zz"])]),
            Err(ShardError::NoSuchAttribute(_))
        ));
        apply_changes(&mut e, &[m(ModOp::Increment, "uidnumber", &["-2"])]).unwrap();
        assert_eq!(e.first_str("uidNumber"), Some("3"));
        apply_changes(&mut e, &[m(ModOp::Replace, "cn", &["z"]), m(ModOp::Delete, "uidNumber", &[])])
            .unwrap();
        assert_eq!(e.get("cn").unwrap().values, vec![b"z".to_vec()]);
        assert!(e.get("uidnumber").is_none());
    }
}
