//! OpenLDAP's DN scope rules, for extensible filters on DN-valued attributes (entryDN above
//! all: `(entryDN:dnSubtreeMatch:=ou=people,dc=example,dc=com)`). slapd 2.5 implements them
//! and hides them from cn=Subschema (SLAP_MR_HIDE), under its experimental OID arc; clients
//! written against slapd use them, so they work here too, hidden the same way.

use crate::dn::Dn;
use crate::value::AvaNormalizer;

/// Where a value's DN lies relative to the asserted one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnScope {
    /// The asserted DN or below it (dnSubtreeMatch).
    Subtree,
    /// Its direct children (dnOneLevelMatch).
    OneLevel,
    /// Below it, itself excluded (dnSubordinateMatch).
    Subordinate,
    /// Above it, itself excluded (dnSuperiorMatch).
    Superior,
}

const RULES: &[(&str, &str, DnScope)] = &[
    ("1.3.6.1.4.1.4203.666.4.8", "dnOneLevelMatch", DnScope::OneLevel),
    ("1.3.6.1.4.1.4203.666.4.9", "dnSubtreeMatch", DnScope::Subtree),
    ("1.3.6.1.4.1.4203.666.4.10", "dnSubordinateMatch", DnScope::Subordinate),
    ("1.3.6.1.4.1.4203.666.4.11", "dnSuperiorMatch", DnScope::Superior),
];

/// The scope rule named `name_or_oid` (a name in any case, or its OID).
pub fn lookup(name_or_oid: &str) -> Option<DnScope> {
    let key = name_or_oid.trim();
    RULES.iter().find(|(oid, name, _)| *oid == key || name.eq_ignore_ascii_case(key)).map(|r| r.2)
}

/// Whether the DN `value` lies in `scope` of the DN `assertion`; None when either is no DN
/// (the assertion is then Undefined, RFC 4511 §4.5.1.7).
pub fn matches(scope: DnScope, value: &[u8], assertion: &[u8], avas: &dyn AvaNormalizer) -> Option<bool> {
    let parse = |bytes: &[u8]| Dn::parse_with(std::str::from_utf8(bytes).ok()?, avas).ok();
    let (value, base) = (parse(value)?, parse(assertion)?);
    Some(match scope {
        DnScope::Subtree => value.is_descendant_or_self_of(&base, avas),
        DnScope::OneLevel => value.len() == base.len() + 1 && value.is_descendant_or_self_of(&base, avas),
        DnScope::Subordinate => value.len() > base.len() && value.is_descendant_or_self_of(&base, avas),
        DnScope::Superior => base.len() > value.len() && base.is_descendant_or_self_of(&value, avas),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::PlainAvas;

    #[test]
    fn scopes() {
        let m = |scope, v: &str, a: &str| matches(scope, v.as_bytes(), a.as_bytes(), &PlainAvas);
        let people = "ou=People,dc=example,dc=com";
        assert_eq!(m(DnScope::Subtree, people, "OU=people, dc=example,dc=com"), Some(true));
        assert_eq!(m(DnScope::Subordinate, people, people), Some(false));
        assert_eq!(m(DnScope::Subordinate, "cn=a,ou=people,dc=example,dc=com", people), Some(true));
        assert_eq!(
            m(DnScope::OneLevel, "cn=a,ou=people,dc=example,dc=com", "dc=example,dc=com"),
            Some(false)
        );
        assert_eq!(m(DnScope::OneLevel, people, "dc=example,dc=com"), Some(true));
        assert_eq!(m(DnScope::Superior, "dc=com", people), Some(true));
        assert_eq!(m(DnScope::Superior, people, people), Some(false));
        assert_eq!(m(DnScope::Subtree, "not a dn", people), None);
        assert_eq!(lookup("DNSUBTREEMATCH"), Some(DnScope::Subtree));
        assert_eq!(lookup("1.3.6.1.4.1.4203.666.4.11"), Some(DnScope::Superior));
    }
}
