//! Known, justified differences from slapd: operations where ferrodir follows an RFC that
//! slapd departs from, or where the RFCs leave the answer to the server. Each entry names
//! the RFC section; docs/CONFORMANCE.md has the same list with the reasoning. A missing
//! feature or a bug never goes here: the test must fail until it is fixed.
//!
//! An entry whose operation no longer differs, or whose id no longer exists, fails the test
//! too, so that the list stays true.

use std::collections::{BTreeMap, BTreeSet};

use crate::compare::Answer;

pub enum Known {
    /// Ferrodir's answer must have exactly this summary (as the report prints it, e.g.
    /// `rc=53` or `rc=0 n=2`).
    Ferrodir(&'static str),
    /// The answers agree except in the values of `attr` (schema descriptions, RFC 4512
    /// §4.1, named by their OID), and there exactly as listed: the OIDs only slapd lists,
    /// those only ferrodir lists, and those both list with different descriptions.
    Values {
        attr: &'static str,
        slapd_only: &'static [&'static str],
        ferrodir_only: &'static [&'static str],
        unlike: &'static [&'static str],
    },
}

/// For [`Known::Values`]: None if `slapd` and `ferrodir` differ exactly as `known` names,
/// else what differs otherwise. Other kinds: None.
pub fn unexplained(known: &Known, slapd: &Answer, ferrodir: &Answer) -> Option<String> {
    let Known::Values { attr, slapd_only, ferrodir_only, unlike } = known else { return None };
    let (mut a, mut b) = (slapd.clone(), ferrodir.clone());
    let (theirs, ours) = (take_values(&mut a, attr), take_values(&mut b, attr));
    if let Some(detail) = crate::compare::difference(&a, &b) {
        return Some(format!("besides {attr}: {detail}"));
    }
    let only = |x: &BTreeMap<String, Vec<u8>>, y: &BTreeMap<String, Vec<u8>>| -> BTreeSet<String> {
        x.keys().filter(|oid| !y.contains_key(*oid)).cloned().collect()
    };
    let found = [
        ("only slapd lists", only(&theirs, &ours), *slapd_only),
        ("only ferrodir lists", only(&ours, &theirs), *ferrodir_only),
        (
            "both list, differently",
            theirs
                .iter()
                .filter(|(oid, v)| ours.get(*oid).is_some_and(|w| w != *v))
                .map(|(o, _)| o.clone())
                .collect(),
            *unlike,
        ),
    ];
    let mut problems = Vec::new();
    for (what, got, expected) in found {
        let expected: BTreeSet<String> = expected.iter().map(|s| s.to_string()).collect();
        if got != expected {
            problems.push(format!("{attr}: {what} {got:?}, allow.rs says {expected:?}"));
        }
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// Removes `attr` from every entry of `answer`; returns its values by OID (the first word
/// after the opening parenthesis).
fn take_values(answer: &mut Answer, attr: &str) -> BTreeMap<String, Vec<u8>> {
    let mut by_oid = BTreeMap::new();
    for attrs in answer.entries.iter_mut().flat_map(|entries| entries.values_mut()) {
        for value in attrs.remove(&attr.to_ascii_lowercase()).into_iter().flatten() {
            let text = String::from_utf8_lossy(&value);
            let oid = text.trim_start_matches(['(', ' ']).split(' ').next().unwrap_or("").to_string();
            by_oid.insert(oid, value);
        }
    }
    by_oid
}

pub struct Allowed {
    pub op: &'static str,
    pub known: Known,
    pub reason: &'static str,
}

pub const ALLOWED: &[Allowed] = &[
    Allowed {
        op: "modify-042",
        known: Known::Ferrodir("rc=67"),
        reason: "RFC 4511 App. A.2: removing an RDN value is notAllowedOnRDN (67); slapd says namingViolation (64)",
    },
    Allowed {
        op: "modify-043",
        known: Known::Ferrodir("rc=67"),
        reason: "RFC 4511 App. A.2: replacing away an RDN value is notAllowedOnRDN (67); slapd says 64",
    },
    Allowed {
        op: "compare-019",
        known: Known::Ferrodir("rc=6"),
        reason: "RFC 5020 §2 gives entryDN distinguishedNameMatch, so Compare works (RFC 4511 §4.10); \
                 slapd refuses entryDN compares with unwillingToPerform (53)",
    },
    Allowed {
        op: "dse-023",
        known: Known::Ferrodir("rc=0 n=0"),
        reason: "RFC 4511 §4.5.1.2: a one-level search of an existing entry without subordinates \
                 succeeds with no entries; slapd answers noSuchObject (32) under cn=Subschema",
    },
    Allowed {
        op: "dse-021",
        known: Known::Values {
            attr: "ldapSyntaxes",
            slapd_only: &[],
            // The 20 syntaxes, every one used by an attribute type of the standard schemas.
            ferrodir_only: &[
                "1.3.6.1.1.15.1",
                "1.3.6.1.4.1.1466.115.121.1.3",
                "1.3.6.1.4.1.1466.115.121.1.13",
                "1.3.6.1.4.1.1466.115.121.1.16",
                "1.3.6.1.4.1.1466.115.121.1.17",
                "1.3.6.1.4.1.1466.115.121.1.19",
                "1.3.6.1.4.1.1466.115.121.1.21",
                "1.3.6.1.4.1.1466.115.121.1.23",
                "1.3.6.1.4.1.1466.115.121.1.25",
                "1.3.6.1.4.1.1466.115.121.1.30",
                "1.3.6.1.4.1.1466.115.121.1.31",
                "1.3.6.1.4.1.1466.115.121.1.35",
                "1.3.6.1.4.1.1466.115.121.1.37",
                "1.3.6.1.4.1.1466.115.121.1.42",
                "1.3.6.1.4.1.1466.115.121.1.43",
                "1.3.6.1.4.1.1466.115.121.1.51",
                "1.3.6.1.4.1.1466.115.121.1.54",
                "1.3.6.1.4.1.1466.115.121.1.58",
                "1.3.6.1.4.1.4203.666.11.2.1",
                "1.3.6.1.4.1.4203.666.11.2.4",
            ],
            unlike: &[],
        },
        reason: "RFC 4512 §4.2: ldapSyntaxes lists the syntaxes the server supports; ferrodir also \
                 publishes 20 syntaxes its attribute types use that slapd implements but hides",
    },
    Allowed {
        op: "dse-022",
        known: Known::Values {
            attr: "matchingRules",
            // certificateExactMatch, certificateListExactMatch.
            slapd_only: &["2.5.13.34", "2.5.13.38"],
            // Active Directory's in-chain rule (LDAP_MATCHING_RULE_IN_CHAIN).
            ferrodir_only: &["1.2.840.113556.1.4.1941"],
            unlike: &[],
        },
        reason: "RFC 4512 §4.2: matchingRules lists the rules the server implements; ferrodir does not \
                 implement certificateExactMatch or certificateListExactMatch (RFC 4523), so it doesn't \
                 list them, and lists Active Directory's in-chain rule 1.2.840.113556.1.4.1941, which slapd \
                 does not have",
    },
    Allowed {
        op: "dse-024",
        known: Known::Values {
            attr: "matchingRuleUse",
            // The certificate rules (dse-022), and rules slapd applies through its tables of
            // compatible syntaxes (presentationAddressMatch, protocolInformationMatch,
            // caseIgnoreSubstringsMatch, caseExactSubstringsMatch).
            slapd_only: &["2.5.13.4", "2.5.13.7", "2.5.13.22", "2.5.13.24", "2.5.13.34", "2.5.13.38"],
            // The in-chain rule (dse-022), and rules whose types ferrodir finds by syntax.
            ferrodir_only: &[
                "1.2.840.113556.1.4.1941",
                "1.3.6.1.1.16.2",
                "1.3.6.1.1.16.3",
                "1.3.6.1.4.1.1466.109.114.3",
                "1.3.6.1.4.1.4203.1.2.1",
                "2.5.13.19",
            ],
            // The APPLIES lists: slapd adds the types of compatible syntaxes (c,
            // telephoneNumber, ...) and ferrodir lists objectClass under objectIdentifierMatch.
            unlike: &[
                "1.3.6.1.4.1.1466.109.114.1",
                "1.3.6.1.4.1.1466.109.114.2",
                "2.5.13.0",
                "2.5.13.2",
                "2.5.13.3",
                "2.5.13.5",
                "2.5.13.6",
                "2.5.13.30",
            ],
        },
        reason: "RFC 4512 §4.1.4: matchingRuleUse follows from the rules implemented (see dse-022) and \
                 from which types each rule applies to; ferrodir derives it from syntaxes alone, slapd \
                 also from its tables of compatible syntaxes",
    },
    Allowed {
        op: "filter-148",
        known: Known::Ferrodir("rc=0 n=1"),
        reason: "RFC 4511 §4.5.1.7.7 with RFC 4517 §4.2.26: objectIdentifierMatch of `person` and the \
                 stored value `person` is TRUE; slapd returns no entry for an explicit objectIdentifierMatch \
                 on objectClass",
    },
];

pub fn find(op: &str) -> Option<&'static Allowed> {
    ALLOWED.iter().find(|a| a.op == op)
}

/// Entries of OpenLDAP's expected outputs where ferrodir rightly differs from slapd:
/// (file, normalised DN, reason). Those entries are left out of that file's comparison.
pub const SCRIPT_ALLOWED: &[(&str, &str, &str)] = &[];

pub fn script_allowed(file: &str) -> Vec<&'static str> {
    SCRIPT_ALLOWED.iter().filter(|(f, _, _)| *f == file).map(|(_, dn, _)| *dn).collect()
}
