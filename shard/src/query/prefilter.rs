//! A cheap first look at a stored entry during a scan: can the filter be TRUE at all,
//! given only which attribute types the entry holds?
//!
//! Most unindexed searches assert on types most entries lack (`(description=x)` over
//! people without a description). An assertion on a type the entry lacks is FALSE (RFC
//! 4511 §4.5.1.7: no value matches, and presence is FALSE), so such an entry can be passed
//! over from its attribute names alone, read from the stored record without decoding it
//! (`EntryRecord::any_attribute_name`). The test is conservative: it only ever says "never
//! TRUE" when full evaluation could not return TRUE; anything else is decoded and
//! evaluated as before, so results are exactly those of `eval`.

use ferrodir_proto::filter::Filter;

use crate::rights::TypeSet;
use crate::rules::RuleTable;

/// What a filter needs of an entry's attribute names to possibly be TRUE.
#[derive(Clone, Debug)]
pub enum Prefilter {
    /// Can't tell from the names (NOT, extensible match, objectClass...): evaluate.
    Unknown,
    /// Never TRUE on any entry (an assertion on an unknown or unsearchable type).
    Never,
    /// TRUE only if the entry holds an attribute whose base name is one of these
    /// (lowercased): every name and OID of the asserted type and its subtypes.
    AnyOf(Vec<String>),
    And(Vec<Prefilter>),
    Or(Vec<Prefilter>),
}

impl Prefilter {
    /// Built once per scan. `hidden`: canonical names the requester may not search.
    pub fn new(rules: &RuleTable, filter: &Filter, hidden: &TypeSet) -> Self {
        let assertion = |desc: &[u8]| -> Prefilter {
            let Some(attr) = std::str::from_utf8(desc).ok().and_then(|d| rules.get(d)) else {
                return Prefilter::Never; // unknown type: Undefined, or FALSE for presence
            };
            if hidden.contains(&attr.canonical) {
                return Prefilter::Never; // Undefined (see eval)
            }
            // objectClass is in every entry; computed types are in none as stored.
            if attr.canonical == "objectclass" || crate::rules::COMPUTED.contains(&attr.canonical.as_str()) {
                return Prefilter::Unknown;
            }
            Prefilter::AnyOf(attr.names.clone())
        };
        match filter {
            Filter::EqualityMatch(ava)
            | Filter::ApproxMatch(ava)
            | Filter::GreaterOrEqual(ava)
            | Filter::LessOrEqual(ava) => assertion(&ava.attribute_desc),
            Filter::Present(desc) => assertion(desc),
            Filter::Substrings(sub) => assertion(&sub.r#type),
            Filter::And(parts) => Prefilter::And(parts.iter().map(|p| Self::new(rules, p, hidden)).collect()),
            Filter::Or(parts) => Prefilter::Or(parts.iter().map(|p| Self::new(rules, p, hidden)).collect()),
            Filter::Not(_) | Filter::ExtensibleMatch(_) => Prefilter::Unknown,
        }
    }

    /// Whether this tells anything: a scan with an `Unknown` prefilter skips the name walk.
    pub fn is_useful(&self) -> bool {
        !matches!(self, Prefilter::Unknown)
    }

    /// False only when the filter can't be TRUE on an entry whose attribute names `has`
    /// answers for (`has(names)`: does the entry hold one of `names`).
    pub fn may_match(&self, has: &mut dyn FnMut(&[String]) -> bool) -> bool {
        match self {
            Prefilter::Unknown => true,
            Prefilter::Never => false,
            Prefilter::AnyOf(names) => has(names),
            Prefilter::And(parts) => parts.iter().all(|p| p.may_match(has)),
            Prefilter::Or(parts) => parts.iter().any(|p| p.may_match(has)),
        }
    }
}

/// Every name (lowercased) of every attribute type `filter` asserts on, subtypes included:
/// what evaluating it can look at. None when it may look at any attribute (a typeless
/// extensible match, or a type the schema doesn't know), so the whole entry is needed.
/// Computed attributes and the DN are added by the caller, not stored.
pub fn referenced_names(rules: &RuleTable, filter: &Filter) -> Option<Vec<String>> {
    fn collect(rules: &RuleTable, filter: &Filter, out: &mut Vec<String>) -> Option<()> {
        let mut add = |desc: &[u8]| -> Option<()> {
            let attr = rules.get(std::str::from_utf8(desc).ok()?)?;
            out.extend(attr.names.iter().cloned());
            Some(())
        };
        match filter {
            Filter::EqualityMatch(ava)
            | Filter::ApproxMatch(ava)
            | Filter::GreaterOrEqual(ava)
            | Filter::LessOrEqual(ava) => add(&ava.attribute_desc),
            Filter::Present(desc) => add(desc),
            Filter::Substrings(sub) => add(&sub.r#type),
            // An id set reads no attribute (eval::ID_SET_RULE).
            Filter::ExtensibleMatch(mra) if crate::query::eval::is_id_set(mra) => Some(()),
            Filter::ExtensibleMatch(mra) => add(mra.r#type.as_deref()?),
            Filter::Not(inner) => collect(rules, inner, out),
            Filter::And(parts) | Filter::Or(parts) => {
                parts.iter().try_for_each(|part| collect(rules, part, out))
            }
        }
    }
    let mut names = Vec::new();
    collect(rules, filter, &mut names)?;
    names.sort();
    names.dedup();
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::base_name_in;
    use ferrodir_proto::entry::{Attribute, Entry};
    use ferrodir_proto::filter::parse_filter;
    use ferrodir_proto::schema::Schema;

    use crate::entry::record::EntryRecord;
    use crate::id::EntryId;
    use crate::query::eval;

    /// The prefilter never rejects an entry that full evaluation matches.
    #[test]
    fn never_rejects_a_match() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let entry = Entry::new(vec![
            Attribute::new("objectClass", vec![b"person".to_vec()]),
            Attribute::new("commonName;lang-en", vec![b"Babs".to_vec()]),
            Attribute::new("sn", vec![b"Jensen".to_vec()]),
        ]);
        let record = EntryRecord {
            parent: EntryId(1),
            rdn: "cn=Babs".into(),
            rdn_norm: "cn=babs".into(),
            flags: 0,
            entry,
        };
        let bytes = record.encode();
        let filters = [
            ("(cn=babs)", true),
            ("(name=jensen)", true),
            ("(2.5.4.3=babs)", true),
            ("(description=x)", false),
            ("(&(sn=jensen)(description=*))", false),
            ("(|(description=x)(sn=jensen))", true),
            ("(!(description=x))", true),
            ("(objectClass=person)", true),
            ("(noSuchType=x)", false),
            ("(userPassword=*)", false),
            ("(hasSubordinates=FALSE)", true),
            ("(!(sn=jensen))", true),
            ("(!(cn=nobody))", true),
            ("(&(objectClass=person)(!(sn=x)))", true),
            ("(cn:caseExactMatch:=Babs)", true),
        ];
        let hidden = TypeSet::of(vec!["userpassword".to_string()]);
        for (text, may) in filters {
            let filter = parse_filter(text).unwrap();
            let pre = Prefilter::new(&rules, &filter, &hidden);
            let mut has = |names: &[String]| {
                EntryRecord::any_attribute_name(&bytes, &mut |name| base_name_in(name, names)).unwrap()
            };
            assert_eq!(pre.may_match(&mut has), may, "{text}");
            let full = eval::matches_visible(&rules, &filter, &record.entry, None, &hidden);
            if full {
                assert!(may, "{text} matches but was rejected");
            }
            // Evaluated on only the attributes it names, the filter gives the same answer.
            if let Some(names) = referenced_names(&rules, &filter) {
                let partial =
                    EntryRecord::decode_selected(&bytes, &|name| base_name_in(name, &names)).unwrap();
                let partly = eval::matches_visible(&rules, &filter, &partial.entry, None, &hidden);
                assert_eq!(partly, full, "{text} on the referenced attributes only");
            }
        }
    }
}
