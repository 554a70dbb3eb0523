//! Filter evaluation against one entry, with RFC 4511 §4.5.1.7's three-valued logic: a
//! component is TRUE, FALSE or Undefined (`None`), and NOT of Undefined stays Undefined.
//!
//! Every assertion goes through the attribute's own matching rules ([`RuleTable`]), and a
//! filter on a type matches its subtypes too (`name` matches `cn` and `sn`). An assertion on
//! an unknown type, or with a value the rule can't read, is Undefined.

use ferrodir_proto::entry::Entry;
use ferrodir_proto::filter::{Filter, MatchingRuleAssertion, Substring, SubstringFilter};
use ferrodir_proto::schema::matching::{self, Kind};

use crate::rules::{AttrRules, RuleTable};

/// Whether `entry` matches: only TRUE returns the entry.
pub fn matches(rules: &RuleTable, filter: &Filter, entry: &Entry) -> bool {
    evaluate(rules, filter, entry) == Some(true)
}

/// Three-valued evaluation. Nesting depth was bounded by the frame check before decoding.
pub fn evaluate(rules: &RuleTable, filter: &Filter, entry: &Entry) -> Option<bool> {
    match filter {
        Filter::And(parts) => {
            let mut result = Some(true);
            for part in parts {
                match evaluate(rules, part, entry) {
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
                match evaluate(rules, part, entry) {
                    Some(true) => return Some(true),
                    None => result = None,
                    Some(false) => {}
                }
            }
            result
        }
        Filter::Not(inner) => evaluate(rules, inner, entry).map(|v| !v),
        Filter::EqualityMatch(ava) => equality(rules, entry, &ava.attribute_desc, &ava.assertion_value),
        Filter::ApproxMatch(ava) => {
            let target = target(rules, &ava.attribute_desc)?;
            let rule = target.equality?;
            let mut undefined = false;
            for value in values_of(rules, entry, target) {
                match matching::approx_match(rule, value, &ava.assertion_value) {
                    Some(true) => return Some(true),
                    None => undefined = true,
                    Some(false) => {}
                }
            }
            if undefined {
                None
            } else {
                Some(false)
            }
        }
        Filter::GreaterOrEqual(ava) => {
            ordering(rules, entry, &ava.attribute_desc, &ava.assertion_value, true)
        }
        Filter::LessOrEqual(ava) => ordering(rules, entry, &ava.attribute_desc, &ava.assertion_value, false),
        Filter::Present(desc) => match target(rules, desc) {
            Some(target) => Some(values_of(rules, entry, target).next().is_some()),
            None => Some(false),
        },
        Filter::Substrings(sub) => substrings(rules, entry, sub),
        Filter::ExtensibleMatch(mra) => extensible(rules, entry, mra),
    }
}

fn target<'r>(rules: &'r RuleTable, desc: &[u8]) -> Option<&'r AttrRules> {
    rules.get(std::str::from_utf8(desc).ok()?).map(|r| &**r)
}

/// The values of every attribute of `entry` that is `target` or one of its subtypes.
fn values_of<'e>(
    rules: &'e RuleTable,
    entry: &'e Entry,
    target: &'e AttrRules,
) -> impl Iterator<Item = &'e [u8]> {
    entry
        .attrs
        .iter()
        .filter(move |a| rules.get(&a.name).is_some_and(|r| target.subtypes.contains(&r.canonical)))
        .flat_map(|a| a.values.iter().map(Vec::as_slice))
}

fn equality(rules: &RuleTable, entry: &Entry, desc: &[u8], assertion: &[u8]) -> Option<bool> {
    let target = target(rules, desc)?;
    let rule = target.equality?;
    let wanted = matching::normalize(rule, assertion)?;
    let found =
        values_of(rules, entry, target).any(|v| matching::normalize(rule, v).as_deref() == Some(&wanted));
    Some(found)
}

fn ordering(rules: &RuleTable, entry: &Entry, desc: &[u8], assertion: &[u8], greater: bool) -> Option<bool> {
    let target = target(rules, desc)?;
    let rule = target.ordering?;
    let mut undefined = false;
    for value in values_of(rules, entry, target) {
        match matching::compare(rule, value, assertion) {
            Some(order) if (order.is_ge() && greater) || (order.is_le() && !greater) => return Some(true),
            Some(_) => {}
            None => undefined = true,
        }
    }
    if undefined {
        None
    } else {
        Some(false)
    }
}

fn substrings(rules: &RuleTable, entry: &Entry, sub: &SubstringFilter) -> Option<bool> {
    let target = target(rules, &sub.r#type)?;
    let rule = target.substr?;
    let mut initial = None;
    let mut any = Vec::new();
    let mut final_ = None;
    for piece in &sub.substrings {
        match piece {
            Substring::Initial(v) => initial = Some(v.as_ref()),
            Substring::Any(v) => any.push(v.as_ref()),
            Substring::Final(v) => final_ = Some(v.as_ref()),
        }
    }
    let mut undefined = false;
    for value in values_of(rules, entry, target) {
        match matching::substrings_match(rule, value, initial, &any, final_) {
            Some(true) => return Some(true),
            None => undefined = true,
            Some(false) => {}
        }
    }
    if undefined {
        None
    } else {
        Some(false)
    }
}

/// RFC 4511 §4.5.1.7.7. With a type and no rule, the type's equality rule; with a rule, that
/// rule over the type's values, or over every attribute's values when no type is given.
/// (dnAttributes would also test the entry's DN components: not yet, so it is Undefined.)
fn extensible(rules: &RuleTable, entry: &Entry, mra: &MatchingRuleAssertion) -> Option<bool> {
    if mra.dn_attributes {
        return None;
    }
    let rule = match &mra.matching_rule {
        Some(name) => match matching::lookup(std::str::from_utf8(name).ok()?)? {
            (rule, Kind::Equality) => rule,
            _ => return None,
        },
        None => target(rules, mra.r#type.as_ref()?)?.equality?,
    };
    let wanted = matching::normalize(rule, &mra.match_value)?;
    let hit = |value: &[u8]| matching::normalize(rule, value).as_deref() == Some(&wanted);
    let found = match &mra.r#type {
        Some(desc) => values_of(rules, entry, target(rules, desc)?).any(hit),
        None => entry.attrs.iter().flat_map(|a| a.values.iter()).any(|v| hit(v)),
    };
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::entry::Attribute;
    use ferrodir_proto::filter::parse_filter;
    use ferrodir_proto::schema::Schema;

    fn babs() -> Entry {
        Entry::new(vec![
            Attribute::new("objectClass", vec![b"person".to_vec()]),
            Attribute::new("cn", vec![b"Babs Jensen".to_vec()]),
            Attribute::new("sn", vec![b"Jensen".to_vec()]),
            Attribute::new("telephoneNumber", vec![b"+1 555-1234".to_vec()]),
        ])
    }

    fn check(filter: &str) -> Option<bool> {
        let rules = RuleTable::from_schema(&Schema::standard());
        evaluate(&rules, &parse_filter(filter).unwrap(), &babs())
    }

    #[test]
    fn basic_filters() {
        assert_eq!(check("(cn=babs  JENSEN)"), Some(true));
        assert_eq!(check("(commonName=babs jensen)"), Some(true));
        assert_eq!(check("(2.5.4.3=babs jensen)"), Some(true));
        assert_eq!(check("(&(objectClass=person)(|(sn=x)(cn=Babs J*)))"), Some(true));
        assert_eq!(check("(!(sn=Jensen))"), Some(false));
        assert_eq!(check("(mail=*)"), Some(false));
        assert_eq!(check("(cn=*jen*)"), Some(true));
        assert_eq!(check("(cn=b*s*n)"), Some(true));
        assert_eq!(check("(cn=b*z*)"), Some(false));
        assert_eq!(check("(&)"), Some(true));
        assert_eq!(check("(|)"), Some(false));
        assert_eq!(check("(telephoneNumber=+15551234)"), Some(true));
    }

    #[test]
    fn subtypes_and_undefined() {
        assert_eq!(check("(name=jensen)"), Some(true));
        assert_eq!(check("(noSuchAttribute=x)"), None);
        assert_eq!(check("(!(noSuchAttribute=x))"), None);
        assert_eq!(check("(|(noSuchAttribute=x)(sn=jensen))"), Some(true));
        assert_eq!(check("(cn:caseExactMatch:=Babs Jensen)"), Some(true));
        assert_eq!(check("(cn:caseExactMatch:=babs jensen)"), Some(false));
    }
}
