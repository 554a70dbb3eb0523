//! Filter evaluation against one entry, with RFC 4511 §4.5.1.7's three-valued logic: a
//! component is TRUE, FALSE or Undefined (`None`), and NOT of Undefined stays Undefined.

use ferrodir_proto::entry::{base_name_eq, base_name_lower, Entry};
use ferrodir_proto::filter::{Filter, Substring, SubstringFilter};
use ferrodir_proto::value::normalize_value;

/// Whether `entry` matches: only TRUE returns the entry.
pub fn matches(filter: &Filter, entry: &Entry) -> bool {
    evaluate(filter, entry) == Some(true)
}

/// Three-valued evaluation. Nesting depth was bounded by the frame check before decoding.
pub fn evaluate(filter: &Filter, entry: &Entry) -> Option<bool> {
    match filter {
        Filter::And(parts) => {
            let mut result = Some(true);
            for part in parts {
                match evaluate(part, entry) {
                    Some(false) => return Some(false),
                    None => result = None,
                    Some(true) => {}
                }
            }
            result
        }
        Filter::Or(parts) => {
            let mut result = Some(false);
            for part in parts {
                match evaluate(part, entry) {
                    Some(true) => return Some(true),
                    None => result = None,
                    Some(false) => {}
                }
            }
            result
        }
        Filter::Not(inner) => evaluate(inner, entry).map(|v| !v),
        Filter::EqualityMatch(ava) | Filter::ApproxMatch(ava) => {
            compare_values(entry, &ava.attribute_desc, &ava.assertion_value, |v, a| v == a)
        }
        Filter::GreaterOrEqual(ava) => {
            compare_values(entry, &ava.attribute_desc, &ava.assertion_value, |v, a| v >= a)
        }
        Filter::LessOrEqual(ava) => {
            compare_values(entry, &ava.attribute_desc, &ava.assertion_value, |v, a| v <= a)
        }
        Filter::Present(attr) => Some(present(entry, attr)),
        Filter::Substrings(sub) => substrings(entry, sub),
        Filter::ExtensibleMatch(mra) => match &mra.r#type {
            // Without a matching rule, an extensible match with a type is an equality match.
            Some(attr) if mra.matching_rule.is_none() => {
                compare_values(entry, attr, &mra.match_value, |v, a| v == a)
            }
            // Named matching rules arrive with the schema layer; until then, Undefined.
            _ => None,
        },
    }
}

fn attr_name(desc: &[u8]) -> Option<String> {
    std::str::from_utf8(desc).ok().map(base_name_lower)
}

fn values_of<'e, 'n>(entry: &'e Entry, name: &'n str) -> impl Iterator<Item = &'e Vec<u8>> + use<'e, 'n> {
    entry.attrs.iter().filter(move |a| base_name_eq(&a.name, name)).flat_map(|a| a.values.iter())
}

fn present(entry: &Entry, desc: &[u8]) -> bool {
    match attr_name(desc) {
        Some(name) => values_of(entry, &name).next().is_some(),
        None => false,
    }
}

fn compare_values(
    entry: &Entry,
    desc: &[u8],
    assertion: &[u8],
    test: impl Fn(&[u8], &[u8]) -> bool,
) -> Option<bool> {
    let name = attr_name(desc)?;
    let assertion = normalize_value(&name, assertion);
    let found = values_of(entry, &name).any(|v| test(&normalize_value(&name, v), &assertion));
    Some(found)
}

fn substrings(entry: &Entry, sub: &SubstringFilter) -> Option<bool> {
    let name = attr_name(&sub.r#type)?;
    let pieces: Vec<(u8, Vec<u8>)> = sub
        .substrings
        .iter()
        .map(|s| match s {
            Substring::Initial(v) => (0, normalize_value(&name, v)),
            Substring::Any(v) => (1, normalize_value(&name, v)),
            Substring::Final(v) => (2, normalize_value(&name, v)),
        })
        .collect();
    let found = values_of(entry, &name).any(|v| substring_match(&normalize_value(&name, v), &pieces));
    Some(found)
}

fn substring_match(value: &[u8], pieces: &[(u8, Vec<u8>)]) -> bool {
    let mut rest = value;
    for (kind, piece) in pieces {
        match kind {
            0 => match rest.strip_prefix(piece.as_slice()) {
                Some(r) => rest = r,
                None => return false,
            },
            2 => return rest.ends_with(piece),
            _ => match find(rest, piece) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            },
        }
    }
    true
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::entry::Attribute;
    use ferrodir_proto::filter::parse_filter;

    fn babs() -> Entry {
        Entry::new(vec![
            Attribute::new("objectClass", vec![b"person".to_vec()]),
            Attribute::new("cn", vec![b"Babs Jensen".to_vec()]),
            Attribute::new("sn", vec![b"Jensen".to_vec()]),
        ])
    }

    fn check(filter: &str) -> Option<bool> {
        evaluate(&parse_filter(filter).unwrap(), &babs())
    }

    #[test]
    fn basic_filters() {
        assert_eq!(check("(cn=babs  JENSEN)"), Some(true));
        assert_eq!(check("(&(objectClass=person)(|(sn=x)(cn=Babs J*)))"), Some(true));
        assert_eq!(check("(!(sn=Jensen))"), Some(false));
        assert_eq!(check("(mail=*)"), Some(false));
        assert_eq!(check("(cn=*jen*)"), Some(true));
        assert_eq!(check("(cn=b*s*n)"), Some(true));
        assert_eq!(check("(cn=b*z*)"), Some(false));
        assert_eq!(check("(&)"), Some(true));
        assert_eq!(check("(|)"), Some(false));
    }

    #[test]
    fn undefined_propagates() {
        assert_eq!(check("(cn:1.2.3:=x)"), None);
        assert_eq!(check("(!(cn:1.2.3:=x))"), None);
        assert_eq!(check("(|(cn:1.2.3:=x)(sn=jensen))"), Some(true));
    }
}
