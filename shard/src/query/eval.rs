//! Filter evaluation against one entry, with RFC 4511 §4.5.1.7's three-valued logic: a
//! component is TRUE, FALSE or Undefined (`None`), and NOT of Undefined stays Undefined.
//!
//! Every assertion goes through the attribute's own matching rules ([`RuleTable`]), and a
//! filter on a type matches its subtypes too (`name` matches `cn` and `sn`). An assertion on
//! an unknown type, or with a value the rule can't read, is Undefined.

use ferrodir_proto::entry::Entry;
use ferrodir_proto::filter::{Filter, MatchingRuleAssertion, Substring, SubstringFilter};
use ferrodir_proto::schema::dn_scope;
use ferrodir_proto::schema::matching::{self, Kind};
use ferrodir_proto::Dn;

use crate::id::EntryId;
use crate::rights::TypeSet;
use crate::rules::{AttrRules, RuleTable};

/// The matching rule of an internal assertion "the entry's id is one of these": what the
/// router turns `(memberOf=G)` and the in-chain rule into (`router::op::memberof`), so that
/// the planner answers it from a list of ids ([`crate::query::candidates::Plan::Ids`]) and
/// evaluation is one binary search. Its value is the ids as sorted big-endian u64s. Not an
/// OID, and the router neutralises it in clients' filters; only [`matches_entry`], which
/// knows the entry's id, evaluates it (elsewhere it is Undefined).
pub const ID_SET_RULE: &str = "ferrodir-entry-id-set";

/// Whether `mra` is an internal id-set assertion (see [`ID_SET_RULE`]).
pub fn is_id_set(mra: &MatchingRuleAssertion) -> bool {
    mra.r#type.is_none() && mra.matching_rule.as_deref() == Some(ID_SET_RULE.as_bytes())
}

/// The id-set assertion for `ids`.
pub fn id_set_filter(ids: &std::collections::BTreeSet<EntryId>) -> Filter {
    let mut value = Vec::with_capacity(ids.len() * 8);
    for id in ids {
        value.extend_from_slice(&id.0.to_be_bytes());
    }
    Filter::ExtensibleMatch(MatchingRuleAssertion {
        matching_rule: Some(ID_SET_RULE.as_bytes().to_vec().into()),
        r#type: None,
        match_value: value.into(),
        dn_attributes: false,
    })
}

/// The ids of an id-set assertion, in order.
pub fn id_set_ids(mra: &MatchingRuleAssertion) -> impl Iterator<Item = EntryId> + '_ {
    mra.match_value
        .chunks_exact(8)
        .filter_map(|chunk| chunk.try_into().ok())
        .map(|b| EntryId(u64::from_be_bytes(b)))
}

fn id_set_contains(mra: &MatchingRuleAssertion, id: EntryId) -> bool {
    let (mut low, mut high) = (0, mra.match_value.len() / 8);
    while low < high {
        let mid = low + (high - low) / 2;
        let Some(at) = mra.match_value.get(mid * 8..mid * 8 + 8).and_then(|b| <[u8; 8]>::try_from(b).ok())
        else {
            return false;
        };
        match u64::from_be_bytes(at).cmp(&id.0) {
            std::cmp::Ordering::Equal => return true,
            std::cmp::Ordering::Less => low = mid + 1,
            std::cmp::Ordering::Greater => high = mid,
        }
    }
    false
}

/// For evaluations with full access (access rules' own filters, the rootDN).
static NOTHING_HIDDEN: TypeSet = TypeSet::none();

/// Whether `entry` matches: only TRUE returns the entry.
pub fn matches(rules: &RuleTable, filter: &Filter, entry: &Entry, dn: Option<&Dn>) -> bool {
    evaluate(rules, filter, entry, dn) == Some(true)
}

/// Whether `entry` matches for a requester who may not search the `hidden` types
/// (canonical names). The prefilter's tests compare against it.
#[cfg(test)]
pub fn matches_visible(
    rules: &RuleTable,
    filter: &Filter,
    entry: &Entry,
    dn: Option<&Dn>,
    hidden: &TypeSet,
) -> bool {
    Eval { rules, hidden, id: None }.evaluate(filter, entry, dn) == Some(true)
}

/// Whether `entry` matches for a requester who may not search the `hidden` types
/// (canonical names), for the stored entry `id`, which internal id-set assertions
/// ([`ID_SET_RULE`]) are evaluated against.
pub fn matches_entry(
    rules: &RuleTable,
    filter: &Filter,
    entry: &Entry,
    dn: Option<&Dn>,
    hidden: &TypeSet,
    id: EntryId,
) -> bool {
    Eval { rules, hidden, id: Some(id) }.evaluate(filter, entry, dn) == Some(true)
}

/// Three-valued evaluation. Nesting depth was bounded by the frame check before decoding.
pub fn evaluate(rules: &RuleTable, filter: &Filter, entry: &Entry, dn: Option<&Dn>) -> Option<bool> {
    Eval { rules, hidden: &NOTHING_HIDDEN, id: None }.evaluate(filter, entry, dn)
}

/// One evaluation's context: the rules, and the types the requester may not search. As in
/// slapd, an assertion on such a type is Undefined whatever the entry holds, so that no
/// filter (`(userPassword=x)`, `(userPassword=*)`, `(!(userPassword=x))`, a typeless
/// extensible match, dnAttributes) tells anything about its values.
struct Eval<'a> {
    rules: &'a RuleTable,
    hidden: &'a TypeSet,
    /// The entry's id, when known: id-set assertions are Undefined without it.
    id: Option<EntryId>,
}

impl Eval<'_> {
    fn is_hidden(&self, canonical: &str) -> bool {
        self.hidden.contains(canonical)
    }

    /// The named type, or None (Undefined) when unknown or hidden.
    fn target(&self, desc: &[u8]) -> Option<Target<'_>> {
        let target = target(self.rules, desc)?;
        (!self.is_hidden(&target.rules.canonical)).then_some(target)
    }

    fn evaluate(&self, filter: &Filter, entry: &Entry, dn: Option<&Dn>) -> Option<bool> {
        let rules = self.rules;
        let hidden = self.hidden;
        match filter {
            Filter::And(parts) => {
                let mut result = Some(true);
                for part in parts {
                    match self.evaluate(part, entry, dn) {
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
                    match self.evaluate(part, entry, dn) {
                        Some(true) => return Some(true),
                        None => result = None,
                        Some(false) => {}
                    }
                }
                result
            }
            Filter::Not(inner) => self.evaluate(inner, entry, dn).map(|v| !v),
            Filter::EqualityMatch(ava) => {
                let target = self.target(&ava.attribute_desc)?;
                equality(rules, entry, &target, &ava.assertion_value, hidden)
            }
            Filter::ApproxMatch(ava) => {
                let target = self.target(&ava.attribute_desc)?;
                // Types without an approximate rule use equality (slapd's filter.c), and
                // objectClass equality knows the class hierarchy.
                if target.rules.canonical == "objectclass" {
                    return equality(rules, entry, &target, &ava.assertion_value, hidden);
                }
                let rule = target.rules.equality?;
                any_value(
                    values_of(rules, entry, &target, hidden)
                        .map(|value| approx(rule, value, &ava.assertion_value, rules.dn())),
                )
            }
            Filter::GreaterOrEqual(ava) | Filter::LessOrEqual(ava) => {
                let target = self.target(&ava.attribute_desc)?;
                let greater = matches!(filter, Filter::GreaterOrEqual(_));
                ordering(rules, entry, &target, &ava.assertion_value, greater, hidden)
            }
            Filter::Present(desc) => match target(rules, desc) {
                Some(target) if self.is_hidden(&target.rules.canonical) => None,
                Some(target) => Some(values_of(rules, entry, &target, hidden).next().is_some()),
                None => Some(false),
            },
            Filter::Substrings(sub) => {
                let target = self.target(&sub.r#type)?;
                substrings(rules, entry, &target, sub, hidden)
            }
            Filter::ExtensibleMatch(mra) if is_id_set(mra) => self.id.map(|id| id_set_contains(mra, id)),
            Filter::ExtensibleMatch(mra) => {
                let typed = match &mra.r#type {
                    Some(desc) => Some(self.target(desc)?),
                    None => None,
                };
                extensible(rules, entry, typed, mra, dn, hidden)
            }
        }
    }
}

/// The type a filter names, with the options it requires (`cn;lang-en` only matches
/// values of `cn` carrying the `lang-en` option; RFC 4512 §2.5).
struct Target<'r> {
    rules: &'r AttrRules,
    options: Vec<String>,
}

fn target<'r>(rules: &'r RuleTable, desc: &[u8]) -> Option<Target<'r>> {
    let desc = std::str::from_utf8(desc).ok()?;
    let options = desc.split(';').skip(1).map(str::to_ascii_lowercase).collect();
    Some(Target { rules: rules.get(desc)?, options })
}

/// Whether an attribute description carries every option in `required`.
pub fn has_options(description: &str, required: &[String]) -> bool {
    required.iter().all(|want| description.split(';').skip(1).any(|have| have.eq_ignore_ascii_case(want)))
}

/// The values of every attribute of `entry` that is the target type or one of its
/// subtypes, with the target's options, leaving out the types in `hidden`.
fn values_of<'e>(
    rules: &'e RuleTable,
    entry: &'e Entry,
    target: &'e Target<'e>,
    hidden: &'e TypeSet,
) -> impl Iterator<Item = &'e [u8]> {
    entry
        .attrs
        .iter()
        .filter(move |a| {
            // Names first (a few byte comparisons); the hidden check needs the type.
            target.rules.names_match(&a.name)
                && (hidden.is_empty() || rules.get(&a.name).is_some_and(|r| !hidden.contains(&r.canonical)))
                && (target.options.is_empty() || has_options(&a.name, &target.options))
        })
        .flat_map(|a| a.values.iter().map(Vec::as_slice))
}

fn equality(
    rules: &RuleTable,
    entry: &Entry,
    target: &Target,
    assertion: &[u8],
    hidden: &TypeSet,
) -> Option<bool> {
    if target.rules.canonical == "objectclass" {
        return Some(has_class(rules, entry, assertion));
    }
    let rule = target.rules.equality?;
    let wanted = matching::normalize(rule, assertion, rules.dn())?;
    let found = values_of(rules, entry, target, hidden)
        .any(|v| matching::normalize(rule, v, rules.dn()).as_deref() == Some(&wanted));
    Some(found)
}

/// Approximate match: for directory and IA5 strings slapd's phonetic rule (every word of
/// the assertion sounds like a word of the value, in order: `phonetic`); other rules use
/// `matching::approx_match` (equality, as slapd for types without an approximate rule).
fn approx(
    rule: matching::Rule,
    value: &[u8],
    assertion: &[u8],
    dn: &ferrodir_proto::schema::DnNormalizer,
) -> Option<bool> {
    use matching::Rule::*;
    if !matches!(rule, CaseIgnore | CaseExact | CaseIgnoreIa5 | CaseExactIa5) {
        return matching::approx_match(rule, value, assertion, dn);
    }
    let (value, assertion) = (std::str::from_utf8(value).ok()?, std::str::from_utf8(assertion).ok()?);
    Some(ferrodir_proto::schema::phonetic::approx_words_match(value, assertion))
}

/// Whether the entry is of `class`, directly or through a subclass (RFC 4512 §2.4.1).
pub fn has_class(rules: &RuleTable, entry: &Entry, class: &[u8]) -> bool {
    let Some(wanted) = rules.class_lineage(class).and_then(|l| l.first()) else { return false };
    entry
        .attrs
        .iter()
        .filter(|a| a.name.eq_ignore_ascii_case("objectClass"))
        .flat_map(|a| a.values.iter())
        .any(|v| rules.class_lineage(v).is_some_and(|lineage| lineage.contains(wanted)))
}

fn ordering(
    rules: &RuleTable,
    entry: &Entry,
    target: &Target,
    assertion: &[u8],
    greater: bool,
    hidden: &TypeSet,
) -> Option<bool> {
    let rule = target.rules.ordering?;
    any_value(values_of(rules, entry, target, hidden).map(|value| {
        matching::compare(rule, value, assertion)
            .map(|order| if greater { order.is_ge() } else { order.is_le() })
    }))
}

fn substrings(
    rules: &RuleTable,
    entry: &Entry,
    target: &Target,
    sub: &SubstringFilter,
    hidden: &TypeSet,
) -> Option<bool> {
    // Misordered, repeated or empty substrings from the wire: Undefined, as slapd has it.
    if !sub.is_well_formed() {
        return None;
    }
    let rule = target.rules.substr?;
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
    any_value(
        values_of(rules, entry, target, hidden)
            .map(|value| matching::substrings_match(rule, value, initial, &any, final_)),
    )
}

/// RFC 4511 §4.5.1.7: TRUE if some value matches, else Undefined if some value couldn't be
/// evaluated, else FALSE.
fn any_value(results: impl Iterator<Item = Option<bool>>) -> Option<bool> {
    let mut undefined = false;
    for result in results {
        match result {
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

/// RFC 4511 §4.5.1.7.7. With a type and no rule, the type's equality rule; with a rule,
/// that rule over the type's values, or over every attribute's values when no type is given.
/// With dnAttributes, the AVAs of the entry's DN count as values too. An ordering rule asks
/// whether a value is less than the assertion (RFC 4517 §4.2).
fn extensible(
    rules: &RuleTable,
    entry: &Entry,
    typed: Option<Target>,
    mra: &MatchingRuleAssertion,
    dn: Option<&Dn>,
    hidden: &TypeSet,
) -> Option<bool> {
    let rule_name = mra.matching_rule.as_deref().and_then(|n| std::str::from_utf8(n).ok());
    if let Some(scope) = rule_name.and_then(dn_scope::lookup) {
        // OpenLDAP's DN scope rules, on the values of a DN-valued type.
        let target =
            typed.as_ref().filter(|t| t.rules.equality == Some(matching::Rule::DistinguishedName))?;
        dn_scope::matches(scope, b"", &mra.match_value, rules.dn())?;
        let hit = |v: &[u8]| dn_scope::matches(scope, v, &mra.match_value, rules.dn()) == Some(true);
        return Some(values_of(rules, entry, target, hidden).any(hit));
    }
    let (rule, kind) = match &mra.matching_rule {
        Some(name) => matching::lookup(std::str::from_utf8(name).ok()?)?,
        None => (typed.as_ref()?.rules.equality?, Kind::Equality),
    };
    let bits = matches!(rule, matching::Rule::IntegerBitAnd | matching::Rule::IntegerBitOr);
    let hit = |value: &[u8]| -> bool {
        match kind {
            Kind::Equality if bits => matching::bit_match(rule, value, &mra.match_value) == Some(true),
            Kind::Equality => {
                let wanted = matching::normalize(rule, &mra.match_value, rules.dn());
                wanted.is_some() && matching::normalize(rule, value, rules.dn()) == wanted
            }
            Kind::Ordering => {
                matching::compare(rule, value, &mra.match_value) == Some(std::cmp::Ordering::Less)
            }
            Kind::Substrings => false,
        }
    };
    if kind == Kind::Equality {
        matching::normalize(rule, &mra.match_value, rules.dn())?;
    }
    let visible = |name: &str| rules.get(name).is_none_or(|r| !hidden.contains(&r.canonical));
    let mut found = match &typed {
        Some(target) => values_of(rules, entry, target, hidden).any(hit),
        None => entry.attrs.iter().filter(|a| visible(&a.name)).flat_map(|a| a.values.iter()).any(|v| hit(v)),
    };
    if !found && mra.dn_attributes {
        let dn = dn?;
        found = dn.rdns.iter().flat_map(|rdn| rdn.avas.iter()).any(|ava| {
            let type_ok = typed.as_ref().is_none_or(|t| {
                rules.get(&ava.attr).is_some_and(|r| t.rules.subtypes.contains(&r.canonical))
            });
            type_ok && visible(&ava.attr) && hit(&ava.value)
        });
    }
    Some(found)
}

/// Whether `filter` mentions an attribute for which `wanted` is true (to know whether a
/// search needs computed attributes or the entry's DN before it can evaluate).
pub fn mentions(filter: &Filter, wanted: &dyn Fn(&[u8], bool) -> bool) -> bool {
    match filter {
        Filter::And(parts) | Filter::Or(parts) => parts.iter().any(|p| mentions(p, wanted)),
        Filter::Not(inner) => mentions(inner, wanted),
        Filter::EqualityMatch(a)
        | Filter::ApproxMatch(a)
        | Filter::GreaterOrEqual(a)
        | Filter::LessOrEqual(a) => wanted(&a.attribute_desc, false),
        Filter::Present(desc) => wanted(desc, false),
        Filter::Substrings(sub) => wanted(&sub.r#type, false),
        // An id set was answered from the ids it lists, not from any attribute.
        Filter::ExtensibleMatch(mra) if is_id_set(mra) => false,
        Filter::ExtensibleMatch(mra) => wanted(mra.r#type.as_deref().unwrap_or_default(), mra.dn_attributes),
    }
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
        evaluate(&rules, &parse_filter(filter).unwrap(), &babs(), None)
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
    fn approximate_as_slapd() {
        // Phonetic words, in order, for strings; equality for the rest, objectClass too.
        assert_eq!(check("(cn~=babbs jenson)"), Some(true));
        assert_eq!(check("(cn~=jensen babs)"), Some(false));
        assert_eq!(check("(objectClass~=PERSON)"), Some(true));
        assert_eq!(check("(objectClass~=top)"), Some(true));
        assert_eq!(check("(telephoneNumber~=+15551234)"), Some(true));
    }

    #[test]
    fn dn_scope_rules_on_a_dn_valued_type() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let mut entry = babs();
        entry.attrs.push(Attribute::new("seeAlso", vec![b"cn=x,ou=People,dc=example,dc=com".to_vec()]));
        let eval = |f: &str| evaluate(&rules, &parse_filter(f).unwrap(), &entry, None);
        assert_eq!(eval("(seeAlso:dnSubtreeMatch:=ou=people,dc=example,dc=com)"), Some(true));
        assert_eq!(eval("(seeAlso:dnOneLevelMatch:=dc=example,dc=com)"), Some(false));
        assert_eq!(eval("(seeAlso:dnSuperiorMatch:=cn=y,cn=x,ou=people,dc=example,dc=com)"), Some(true));
        // Not a DN-valued type, or not a DN: Undefined.
        assert_eq!(eval("(cn:dnSubtreeMatch:=dc=com)"), None);
        assert_eq!(eval("(seeAlso:dnSubtreeMatch:=not a dn)"), None);
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

    #[test]
    fn assertions_on_hidden_types_are_undefined() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let mut entry = babs();
        entry.attrs.push(Attribute::new("userPassword", vec![b"secret".to_vec()]));
        let hidden = TypeSet::of(vec!["userpassword".to_string()]);
        let open = TypeSet::none();
        let check = |filter: &str, hidden: &TypeSet| {
            Eval { rules: &rules, hidden, id: None }.evaluate(&parse_filter(filter).unwrap(), &entry, None)
        };
        for filter in [
            "(userPassword=secret)",
            "(userPassword=*)",
            "(!(userPassword=wrong))",
            "(userPassword~=secret)",
            "(userPassword:octetStringMatch:=secret)",
        ] {
            assert_eq!(check(filter, &open), Some(true), "{filter} when visible");
            assert_eq!(check(filter, &hidden), None, "{filter} when hidden");
        }
        // A typeless extensible match skips hidden values and still sees the others.
        assert_eq!(check("(:octetStringMatch:=secret)", &open), Some(true));
        assert_eq!(check("(:octetStringMatch:=secret)", &hidden), Some(false));
        assert_eq!(check("(:caseIgnoreMatch:=jensen)", &hidden), Some(true));
        assert_eq!(check("(|(userPassword=secret)(sn=jensen))", &hidden), Some(true));
        // Only sn searchable: cn is Undefined, sn still answers.
        let only_sn = TypeSet::all_but(vec!["sn".to_string()]);
        assert_eq!(check("(cn=babs jensen)", &only_sn), None);
        assert_eq!(check("(sn=jensen)", &only_sn), Some(true));
    }

    #[test]
    fn bit_rules_on_integers() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let entry = Entry::new(vec![
            Attribute::new("objectClass", vec![b"posixAccount".to_vec()]),
            Attribute::new("uidNumber", vec![b"7".to_vec()]),
        ]);
        let check = |f: &str| evaluate(&rules, &parse_filter(f).unwrap(), &entry, None);
        assert_eq!(check("(uidNumber:1.2.840.113556.1.4.803:=6)"), Some(true));
        assert_eq!(check("(uidNumber:1.2.840.113556.1.4.803:=8)"), Some(false));
        assert_eq!(check("(uidNumber:1.2.840.113556.1.4.804:=12)"), Some(true));
        assert_eq!(check("(uidNumber:1.2.840.113556.1.4.804:=8)"), Some(false));
        assert_eq!(check("(uidNumber:integerBitAndMatch:=3)"), Some(true));
        assert_eq!(check("(uidNumber:1.2.840.113556.1.4.803:=x)"), None, "not an integer");
        assert_eq!(check("(!(uidNumber:1.2.840.113556.1.4.803:=8))"), Some(true));
    }

    #[test]
    fn id_sets_match_by_entry_id_only() {
        let rules = RuleTable::from_schema(&Schema::standard());
        let ids: std::collections::BTreeSet<EntryId> =
            [EntryId::new(0, 3), EntryId::new(1, 9), EntryId::new(2, 1)].into_iter().collect();
        let filter = id_set_filter(&ids);
        let Filter::ExtensibleMatch(mra) = &filter else { panic!() };
        assert_eq!(id_set_ids(mra).collect::<std::collections::BTreeSet<_>>(), ids);
        let hidden = TypeSet::none();
        for id in &ids {
            assert!(matches_entry(&rules, &filter, &babs(), None, &hidden, *id));
        }
        assert!(!matches_entry(&rules, &filter, &babs(), None, &hidden, EntryId::new(1, 8)));
        let negated = Filter::Not(Box::new(filter.clone()));
        assert!(matches_entry(&rules, &negated, &babs(), None, &hidden, EntryId::new(1, 8)));
        // Without the id (any other caller): Undefined, so neither it nor its negation matches.
        assert_eq!(evaluate(&rules, &filter, &babs(), None), None);
        assert!(!mentions(&filter, &|_, _| true));
    }

    /// RFC 4511 §4.5.1.7.2 substrings that only the wire can carry (a final before an any,
    /// an empty value) are Undefined, as in slapd, rather than matched leniently.
    #[test]
    fn malformed_substrings_are_undefined() {
        use ferrodir_proto::message::OctetString;
        let rules = RuleTable::from_schema(&Schema::standard());
        let v = |s: &'static str| OctetString::from_static(s.as_bytes());
        let sub = |parts| Filter::Substrings(SubstringFilter { r#type: v("cn"), substrings: parts });
        let misordered = sub(vec![Substring::Final(v("Jensen")), Substring::Any(v("Babs"))]);
        let empty = sub(vec![Substring::Initial(v("Babs")), Substring::Any(v(""))]);
        for filter in [misordered, empty] {
            assert_eq!(evaluate(&rules, &filter, &babs(), None), None, "{filter:?}");
            let negated = Filter::Not(Box::new(filter));
            assert_eq!(evaluate(&rules, &negated, &babs(), None), None);
        }
        let fine = sub(vec![Substring::Initial(v("Babs")), Substring::Final(v("Jensen"))]);
        assert_eq!(evaluate(&rules, &fine, &babs(), None), Some(true));
    }
}
