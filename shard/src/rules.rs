//! Per-attribute matching facts, resolved once from the schema: which canonical name an
//! attribute's index keys use, its equality, ordering and substring rules, and which types
//! count as its subtypes in a filter (RFC 4512 §2.5.1: a filter on `name` matches `cn`).
//!
//! Built once at start and shared read-only by every shard, so a filter or an index key
//! never looks anything up in the schema on the hot path beyond one hash probe. The table
//! also carries the schema's DN normaliser ([`RuleTable::dn`]): whoever holds the rules
//! normalises DNs (and DN-valued values) the same way, with nothing process-wide.

use std::collections::HashMap;
use std::sync::Arc;

use ferrodir_proto::schema::matching::{self, Kind, Rule};
use ferrodir_proto::schema::{DnNormalizer, Schema};

/// How one attribute type matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrRules {
    /// The lowercased primary name: the key of its index postings.
    pub canonical: String,
    /// The primary name as the schema spells it: how the attribute is stored and returned,
    /// whichever alias or OID the client used (as slapd does).
    pub display: String,
    pub equality: Option<Rule>,
    pub ordering: Option<Rule>,
    pub substr: Option<Rule>,
    /// Canonical names of this type and all its subtypes.
    pub subtypes: Vec<String>,
    /// Every name and OID (lowercased) of this type and its subtypes: whether a stored
    /// attribute is one of them is a few byte comparisons, no hash (`matches_name`).
    pub names: Vec<String>,
    /// usage is not userApplications (RFC 4512 §2.5.1).
    pub operational: bool,
    /// This type's number in its table ([`RuleTable::by_slot`]): how a cached entry names
    /// its attributes' types in four bytes (`compactentry`).
    pub slot: u32,
}

/// Every attribute type of the schema, by lowercased name, alias and OID, and every object
/// class with its superclasses.
#[derive(Debug, Default)]
pub struct RuleTable {
    by_name: HashMap<String, Arc<AttrRules>, NameHash>,
    /// Every type once, at its `slot`.
    slots: Vec<Arc<AttrRules>>,
    /// Lowercased class name or OID → lowercased primary names of the class and all its
    /// superclasses: `(objectClass=person)` matches an inetOrgPerson (RFC 4512 §2.4.1).
    classes: HashMap<String, Arc<Vec<String>>>,
    /// Lowercased class name or OID → the class's primary name as the schema spells it.
    class_names: HashMap<String, String>,
    /// Lowercased primary names of the structural classes.
    structural: std::collections::HashSet<String>,
    /// How DNs normalise under this schema.
    dn: DnNormalizer,
}

impl AttrRules {
    /// Whether `description` (options allowed) names this type or one of its subtypes.
    pub fn names_match(&self, description: &str) -> bool {
        base_name_in(description.as_bytes(), &self.names)
    }
}

fn rule(name: Option<&String>, kind: Kind) -> Option<Rule> {
    let (rule, found) = matching::lookup(name?)?;
    (found == kind).then_some(rule)
}

/// FNV-1a for the attribute-name table: probed once or more per attribute of every entry a
/// search looks at, where SipHash showed in profiles. The keys are the schema's names,
/// fixed at start; a client's name only chooses which fixed chain it walks, so flooding
/// (what SipHash guards against) can't be forced.
#[derive(Clone, Copy, Debug, Default)]
pub struct NameHash;

impl std::hash::BuildHasher for NameHash {
    type Hasher = Fnv1a;
    fn build_hasher(&self) -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

pub struct Fnv1a(u64);

impl std::hash::Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl RuleTable {
    pub fn from_schema(schema: &Schema) -> Self {
        let mut by_name = HashMap::with_hasher(NameHash);
        let mut slots = Vec::new();
        for attr in schema.attribute_types() {
            let canonical = attr.name().to_ascii_lowercase();
            let subtypes = schema.subtypes(attr).iter().map(|t| t.name().to_ascii_lowercase()).collect();
            let mut names: Vec<String> = schema
                .subtypes(attr)
                .iter()
                .flat_map(|t| t.names.iter().chain(std::iter::once(&t.oid)))
                .map(|n| n.to_ascii_lowercase())
                .collect();
            names.sort();
            names.dedup();
            let rules = Arc::new(AttrRules {
                canonical,
                display: attr.name().to_string(),
                equality: rule(attr.equality.as_ref(), Kind::Equality),
                ordering: rule(attr.ordering.as_ref(), Kind::Ordering),
                substr: rule(attr.substr.as_ref(), Kind::Substrings),
                subtypes,
                names,
                operational: attr.is_operational(),
                slot: u32::try_from(slots.len()).unwrap_or(u32::MAX),
            });
            slots.push(rules.clone());
            by_name.insert(attr.oid.to_ascii_lowercase(), rules.clone());
            for name in &attr.names {
                by_name.insert(name.to_ascii_lowercase(), rules.clone());
                // Also as spelled: stored attributes use the schema's spelling
                // (`objectClass`), so filter evaluation finds them without lowercasing.
                by_name.insert(name.clone(), rules.clone());
            }
        }
        let mut classes = HashMap::new();
        let mut class_names = HashMap::new();
        let mut structural = std::collections::HashSet::new();
        for class in schema.object_classes() {
            if class.kind == ferrodir_proto::schema::ObjectClassKind::Structural {
                structural.insert(class.name().to_ascii_lowercase());
            }
            let lineage: Vec<String> =
                schema.superclasses(class).iter().map(|c| c.name().to_ascii_lowercase()).collect();
            let lineage = Arc::new(lineage);
            for key in class.names.iter().chain(std::iter::once(&class.oid)) {
                classes.insert(key.to_ascii_lowercase(), lineage.clone());
                class_names.insert(key.to_ascii_lowercase(), class.name().to_string());
            }
        }
        Self { by_name, slots, classes, class_names, structural, dn: DnNormalizer::from_schema(schema) }
    }

    /// The schema's DN normaliser: canonical type names, each type's equality rule.
    pub fn dn(&self) -> &DnNormalizer {
        &self.dn
    }

    /// The lowercased primary names of `class` and its superclasses; None for an unknown class.
    pub fn class_lineage(&self, class: &[u8]) -> Option<&Arc<Vec<String>>> {
        // Lowercased on the stack: every objectClass value of every stored entry comes here.
        // Only a plain name (nothing to trim) takes this path; the rest is trimmed as text.
        let plain = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
        let mut buf = [0u8; 64];
        match buf.get_mut(..class.len()) {
            Some(lowered) if class.is_ascii() && plain(class.first()) && plain(class.last()) => {
                lowered.copy_from_slice(class);
                lowered.make_ascii_lowercase();
                self.classes.get(std::str::from_utf8(lowered).ok()?)
            }
            _ => self.classes.get(&String::from_utf8_lossy(class).trim().to_ascii_lowercase()),
        }
    }

    /// Whether `class` (a lowercased primary name) is structural.
    pub fn is_structural(&self, class: &str) -> bool {
        self.structural.contains(class)
    }

    /// The schema's spelling of a class given by name, alias or OID (as slapd stores it).
    pub fn class_name(&self, class: &str) -> Option<&str> {
        self.class_names.get(&class.trim().to_ascii_lowercase()).map(String::as_str)
    }

    /// The rules of an attribute description (`cn`, `commonName`, `2.5.4.3`, `cn;lang-en`).
    pub fn get(&self, description: &str) -> Option<&Arc<AttrRules>> {
        let base = description.split(';').next().unwrap_or("");
        match self.by_name.get(base) {
            Some(found) => Some(found),
            None if base.bytes().any(|b| b.is_ascii_uppercase()) => {
                self.by_name.get(&base.to_ascii_lowercase())
            }
            None => None,
        }
    }

    /// The description with its type spelled as the schema's primary name, options kept:
    /// `commonName;lang-en` gives `cn;lang-en`. Unknown types are kept as written.
    pub fn display(&self, description: &str) -> String {
        match (self.get(description), description.split_once(';')) {
            (Some(rules), Some((_, options))) => format!("{};{options}", rules.display),
            (Some(rules), None) => rules.display.clone(),
            (None, _) => description.to_string(),
        }
    }

    /// The canonical (index key) name of a description; unknown types keep their own name.
    /// The rules of the type numbered `slot` ([`AttrRules::slot`]).
    pub fn by_slot(&self, slot: u32) -> Option<&AttrRules> {
        self.slots.get(slot as usize).map(Arc::as_ref)
    }

    pub fn canonical(&self, description: &str) -> String {
        match self.get(description) {
            Some(rules) => rules.canonical.clone(),
            None => ferrodir_proto::entry::base_name_lower(description),
        }
    }
}

/// The equality key of `value` under `rules` (one of `table`'s): the index key and the
/// form compared by equality filters. None when the value is invalid for the rule.
pub fn equality_key(table: &RuleTable, rules: &AttrRules, value: &[u8]) -> Option<Vec<u8>> {
    match rules.equality {
        Some(rule) => matching::normalize(rule, value, &table.dn),
        None => None,
    }
}
/// Whether an attribute description's base name (before any `;option`) is one of `names`
/// (lowercased), ignoring case.
pub fn base_name_in(description: &[u8], names: &[String]) -> bool {
    let base = match description.iter().position(|&b| b == b';') {
        Some(at) => description.get(..at).unwrap_or(description),
        None => description,
    };
    names.iter().any(|name| name.as_bytes().eq_ignore_ascii_case(base))
}

/// The attributes computed at send time (lowercased names), not stored. memberOf is one
/// (`memberof`), computed only when the search carries an `AttrSelection::memberof`.
pub const COMPUTED: [&str; 4] = ["entrydn", "hassubordinates", "subschemasubentry", "memberof"];
