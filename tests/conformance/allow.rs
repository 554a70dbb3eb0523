//! Known, justified differences from slapd: operations where ferrodir follows an RFC that
//! slapd departs from, or where the RFCs leave the answer to the server. Each entry names
//! the RFC section; docs/CONFORMANCE.md has the same list with the reasoning. A missing
//! feature or a bug never goes here: the test must fail until it is fixed.
//!
//! An entry whose operation no longer differs, or whose id no longer exists, fails the test
//! too, so that the list stays true.

pub enum Known {
    /// Ferrodir's answer must have exactly this summary (as the report prints it, e.g.
    /// `rc=53` or `rc=0 n=2`).
    Ferrodir(&'static str),
    /// Any answer from ferrodir is accepted: for answers the RFCs leave to the server
    /// (none so far).
    #[allow(dead_code)]
    Differs,
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
        known: Known::Differs,
        reason: "RFC 4512 §4.2: ldapSyntaxes lists the syntaxes the server supports; ferrodir also \
                 publishes 20 syntaxes its attribute types use that slapd implements but hides",
    },
    Allowed {
        op: "dse-022",
        known: Known::Differs,
        reason: "RFC 4512 §4.2: matchingRules lists the rules the server implements; ferrodir does not \
                 implement certificateExactMatch or certificateListExactMatch (RFC 4523), so it doesn't \
                 list them, and lists Active Directory's in-chain rule 1.2.840.113556.1.4.1941, which slapd \
                 does not have",
    },
    Allowed {
        op: "dse-024",
        known: Known::Differs,
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
