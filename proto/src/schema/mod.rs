//! The directory schema (RFC 4512): attribute types, object classes, syntaxes and matching
//! rules, as data.
//!
//! # Layout
//! - `mod.rs`: the [`Schema`] registry and its types: loading, lookups by name, alias or OID,
//!   type and class hierarchies, and the values cn=Subschema publishes.
//! - `parse.rs`: RFC 4512 definitions and OpenLDAP's `.schema` file format.
//! - [`builtin`]: the standard schemas loaded by default (data files under `proto/schema/`,
//!   generated from what slapd 2.5 publishes).
//! - [`check`]: checking an entry against the schema (object class chain, MUST/MAY, ...).
//! - [`dn_rules`]: the DN normaliser built from a schema ([`DnNormalizer`]).
//! - [`gentime`]: GeneralizedTime values as instants, and the server's own time stamps.
//! - [`matching`]: matching rules: normalisation, ordering, substrings (RFC 4517, 4518).
//! - [`phonetic`]: approximate matching of strings (`~=`), as slapd does it.
//! - [`dn_scope`]: OpenLDAP's hidden DN scope rules (dnSubtreeMatch and like).
//! - [`syntax`]: value syntax validation (RFC 4517).

pub mod dn_scope;
pub mod matching;
pub mod phonetic;
pub mod syntax;

pub mod builtin;
pub mod check;
pub mod dn_rules;
pub mod gentime;
mod parse;

pub use dn_rules::DnNormalizer;

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use parse::{AttributeTypeDescription, ObjectClassDescription, OidMacros, SyntaxDescription};

/// Lowercased name, alias or OID → position. Hashed with FNV-1a instead of SipHash: the
/// schema check looks up every attribute of every entry an Add or an import stores. The keys
/// are the schema's own, fixed once loaded; a client's name only picks which fixed chain a
/// lookup walks, so flooding (what SipHash guards against) can't be forced.
type NameIndex = HashMap<String, usize, BuildHasherDefault<Fnv1a>>;

/// FNV-1a over a schema-defined key (see [`NameIndex`]); also the DN normaliser's type map.
#[derive(Default)]
pub(crate) struct Fnv1a(u64);

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
        for &byte in bytes {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = hash;
    }
}

/// The longest SUP chain followed. Chains cannot loop (a SUP must be defined before its
/// subtype), so this only bounds the work on a pathological schema.
const SUP_CHAIN_MAX: usize = 64;

/// The attribute types, object classes and OID macros of one server.
///
/// Definitions are kept in load order, which is the order cn=Subschema publishes them in;
/// names, aliases and OIDs are indexed lowercased.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    attribute_types: Vec<AttributeType>,
    /// Lowercased name, alias or OID → position in `attribute_types`.
    attribute_index: NameIndex,
    object_classes: Vec<ObjectClass>,
    /// Per class (same positions as `object_classes`): the positions of the class and all its
    /// superclasses in [`Schema::superclasses`]' order. Fixed when the class is added, since
    /// every SUP is defined before it and definitions never change: the schema check of
    /// every imported entry walks these several times.
    superclass_chains: Vec<Box<[usize]>>,
    /// Per class (same positions): its MUST and MAY types resolved to positions in
    /// `attribute_types`, fixed when the class is added (its MUST and MAY must name known
    /// types then, and types never change): the schema check compares positions instead
    /// of names.
    class_attrs: Vec<ClassAttrs>,
    class_index: NameIndex,
    /// `ldapsyntax` definitions loaded from files, as (OID, published definition). The
    /// syntaxes the server implements come from [`syntax::all`].
    extra_syntaxes: Vec<(String, String)>,
    /// OIDs of types known but left out of cn=Subschema, as slapd hides them.
    hidden_attribute_oids: HashSet<String>,
    /// OIDs of classes known but left out of cn=Subschema (back-monitor's, SLAP_OC_HIDE).
    hidden_class_oids: HashSet<String>,
    macros: OidMacros,
}

/// A class's MUST and MAY as positions of attribute types.
#[derive(Debug, Clone, Default)]
struct ClassAttrs {
    /// Its own MUST types, in the order the definition lists them.
    must: Box<[usize]>,
    /// Its own MUST and MAY types, sorted.
    allowed: Box<[usize]>,
}

/// RFC 4512 §4.1.2 `usage`. Every kind but `UserApplications` makes a type operational.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Usage {
    #[default]
    UserApplications,
    DirectoryOperation,
    DistributedOperation,
    DsaOperation,
}

/// An attribute type with its SUP already resolved.
#[derive(Debug, Clone)]
pub struct AttributeType {
    pub oid: String,
    pub names: Vec<String>,
    pub desc: Option<String>,
    /// The supertype as the definition names it.
    pub sup: Option<String>,
    /// Effective rules and syntax, already inherited from SUP when not given (RFC 4512 §4.1.2).
    pub equality: Option<String>,
    pub ordering: Option<String>,
    pub substr: Option<String>,
    /// The syntax OID, without the `{len}` bound (which stays in `definition`).
    pub syntax: Option<String>,
    pub single_value: bool,
    pub collective: bool,
    pub no_user_modification: bool,
    pub usage: Usage,
    pub obsolete: bool,
    /// The definition as published in cn=Subschema attributeTypes (RFC 4512 §4.1.2 form).
    pub definition: String,
}

impl AttributeType {
    /// The first NAME, or the OID for a type without one; what messages and responses use.
    pub fn name(&self) -> &str {
        self.names.first().map_or(&self.oid, String::as_str)
    }

    /// RFC 4512 §3.4: operational attributes are those whose usage is not userApplications.
    pub fn is_operational(&self) -> bool {
        self.usage != Usage::UserApplications
    }
}

/// RFC 4512 §2.4 kinds of object class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectClassKind {
    Abstract,
    Structural,
    Auxiliary,
}

/// An object class. `sup`, `must` and `may` are as the definition names them; resolve them
/// with [`Schema::object_class`] and [`Schema::attribute`].
#[derive(Debug, Clone)]
pub struct ObjectClass {
    pub oid: String,
    pub names: Vec<String>,
    pub desc: Option<String>,
    pub sup: Vec<String>,
    pub kind: ObjectClassKind,
    pub must: Vec<String>,
    pub may: Vec<String>,
    pub obsolete: bool,
    /// The definition as published in cn=Subschema objectClasses (RFC 4512 §4.1.1 form).
    pub definition: String,
}

impl ObjectClass {
    /// The first NAME, or the OID for a class without one.
    pub fn name(&self) -> &str {
        self.names.first().map_or(&self.oid, String::as_str)
    }
}

/// A schema file or definition that cannot be loaded. The message names the line and the
/// definition.
#[derive(Debug, Clone, thiserror::Error)]
#[error("schema: {0}")]
pub struct SchemaError(pub String);

/// Whether a loaded definition appears in cn=Subschema.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Visibility {
    Published,
    Hidden,
}

impl Schema {
    /// The standard schemas (built-in data files): slapd's operational types and classes,
    /// core, cosine, inetorgperson, nis and openldap.
    pub fn standard() -> Schema {
        builtin::standard()
    }

    /// An empty schema (for tests).
    pub fn empty() -> Schema {
        Schema::default()
    }

    /// Adds the definitions of an OpenLDAP `.schema` file: `attributetype ( ... )` /
    /// `attributetypes`, `objectclass ( ... )` / `objectclasses`, `objectidentifier NAME OID`
    /// macros (and `NAME:suffix` uses, e.g. `OLcfgAt:1.2`), `ldapsyntax ( ... )`, comments
    /// (#), continuation lines (leading whitespace), case-insensitive keywords. A definition
    /// may reference a SUP defined earlier in the same or an earlier loaded file. Errors name
    /// the line. On error nothing of the file is kept.
    pub fn load_openldap_schema(&mut self, text: &str) -> Result<(), SchemaError> {
        self.load(text, Visibility::Published)
    }

    /// Loads into a copy and keeps it only if the whole file loads, so that a broken file
    /// cannot leave half its definitions behind.
    fn load(&mut self, text: &str, visibility: Visibility) -> Result<(), SchemaError> {
        let mut next = self.clone();
        for directive in parse::directives(text).map_err(SchemaError)? {
            next.apply(&directive, visibility).map_err(|message| {
                SchemaError(format!("line {}: {}: {message}", directive.line, directive.keyword))
            })?;
        }
        *self = next;
        Ok(())
    }

    fn apply(&mut self, directive: &parse::Directive, visibility: Visibility) -> Result<(), String> {
        let text = directive.rest.as_str();
        match directive.keyword.to_ascii_lowercase().as_str() {
            "attributetype" | "attributetypes" => {
                let description = parse::attribute_type(text, &self.macros)?;
                self.add_attribute_type(description, visibility)
            }
            "objectclass" | "objectclasses" => {
                let description = parse::object_class(text, &self.macros)?;
                self.add_object_class(description, visibility)
            }
            "ldapsyntax" | "ldapsyntaxes" => {
                let description = parse::ldap_syntax(text, &self.macros)?;
                self.add_ldap_syntax(description)
            }
            "objectidentifier" => match text.split_whitespace().collect::<Vec<_>>().as_slice() {
                [name, value] => self.macros.define(name, value),
                _ => Err("expected a name and an OID".to_string()),
            },
            _ => Err("unknown directive".to_string()),
        }
    }

    /// Registers an attribute type, inheriting rules and syntax from its SUP.
    fn add_attribute_type(
        &mut self,
        d: AttributeTypeDescription,
        visibility: Visibility,
    ) -> Result<(), String> {
        let label = label(&d.oid, &d.names);
        check_new_keys(&self.attribute_index, &d.oid, &d.names, "attribute type")?;
        let sup = match &d.sup {
            Some(sup) => Some(
                self.attribute(sup)
                    .ok_or_else(|| format!("{label}: SUP '{sup}' is not a known attribute type"))?,
            ),
            None => None,
        };
        // RFC 4512 §4.1.2: "each attribute type description must contain at least one of the
        // SUP or SYNTAX fields"; collective types are user types; NO-USER-MODIFICATION only
        // makes sense for operational ones.
        if sup.is_none() && d.syntax.is_none() {
            return Err(format!("{label}: neither SUP nor SYNTAX given"));
        }
        if d.collective && d.usage != Usage::UserApplications {
            return Err(format!("{label}: COLLECTIVE requires USAGE userApplications"));
        }
        if d.no_user_modification && d.usage == Usage::UserApplications {
            return Err(format!("{label}: NO-USER-MODIFICATION requires an operational USAGE"));
        }
        let inherit = |own: &Option<String>, from_sup: fn(&AttributeType) -> &Option<String>| {
            own.clone().or_else(|| sup.and_then(|s| from_sup(s).clone()))
        };
        let attribute = AttributeType {
            equality: inherit(&d.equality, |s| &s.equality),
            ordering: inherit(&d.ordering, |s| &s.ordering),
            substr: inherit(&d.substr, |s| &s.substr),
            syntax: inherit(&d.syntax, |s| &s.syntax),
            definition: d.definition(),
            oid: d.oid,
            names: d.names,
            desc: d.desc,
            sup: d.sup,
            single_value: d.single_value,
            collective: d.collective,
            no_user_modification: d.no_user_modification,
            usage: d.usage,
            obsolete: d.obsolete,
        };
        if visibility == Visibility::Hidden {
            self.hidden_attribute_oids.insert(attribute.oid.clone());
        }
        index_keys(&mut self.attribute_index, &attribute.oid, &attribute.names, self.attribute_types.len());
        self.attribute_types.push(attribute);
        Ok(())
    }

    /// Registers an object class once its superclasses and attribute types are known, as
    /// slapd requires; a misspelt MUST would otherwise make every entry of the class fail.
    fn add_object_class(&mut self, d: ObjectClassDescription, visibility: Visibility) -> Result<(), String> {
        let label = label(&d.oid, &d.names);
        check_new_keys(&self.class_index, &d.oid, &d.names, "object class")?;
        if let Some(sup) = d.sup.iter().find(|sup| self.object_class(sup).is_none()) {
            return Err(format!("{label}: SUP '{sup}' is not a known object class"));
        }
        for (list, names) in [("MUST", &d.must), ("MAY", &d.may)] {
            if let Some(name) = names.iter().find(|name| self.attribute(name).is_none()) {
                return Err(format!("{label}: {list} '{name}' is not a known attribute type"));
            }
        }
        let class = ObjectClass {
            definition: d.definition(),
            oid: d.oid,
            names: d.names,
            desc: d.desc,
            sup: d.sup,
            kind: d.kind,
            must: d.must,
            may: d.may,
            obsolete: d.obsolete,
        };
        if visibility == Visibility::Hidden {
            self.hidden_class_oids.insert(class.oid.clone());
        }
        let position = self.object_classes.len();
        index_keys(&mut self.class_index, &class.oid, &class.names, position);
        self.object_classes.push(class);
        let Some(class) = self.object_classes.last() else {
            return Err(format!("{label}: not stored"));
        };
        let chain = self.walk_superclasses(class).iter().filter_map(|c| self.position_of_class(c)).collect();
        let resolve = |names: &[String]| -> Vec<usize> {
            names.iter().filter_map(|name| caseless_get(&self.attribute_index, name)).collect()
        };
        let must = resolve(&class.must);
        let mut allowed = resolve(&class.may);
        allowed.extend_from_slice(&must);
        allowed.sort_unstable();
        allowed.dedup();
        self.superclass_chains.push(chain);
        self.class_attrs.push(ClassAttrs { must: must.into(), allowed: allowed.into() });
        Ok(())
    }

    fn add_ldap_syntax(&mut self, d: SyntaxDescription) -> Result<(), String> {
        let known = syntax::all().iter().any(|(oid, _)| *oid == d.oid);
        if known || self.extra_syntaxes.iter().any(|(oid, _)| *oid == d.oid) {
            return Err(format!("syntax {} is already defined", d.oid));
        }
        self.extra_syntaxes.push((d.oid.clone(), d.definition()));
        Ok(())
    }

    /// Looks a type up by name, alias or numeric OID, ignoring case. A full attribute
    /// description is accepted too: `cn;lang-en` finds `cn` (RFC 4512 §2.5: options do not
    /// change the type).
    pub fn attribute(&self, name_or_oid: &str) -> Option<&AttributeType> {
        let base = name_or_oid.split(';').next().unwrap_or_default();
        caseless_get(&self.attribute_index, base).and_then(|i| self.attribute_types.get(i))
    }

    /// Looks a class up by name or numeric OID, ignoring case.
    pub fn object_class(&self, name_or_oid: &str) -> Option<&ObjectClass> {
        caseless_get(&self.class_index, name_or_oid).and_then(|i| self.object_classes.get(i))
    }

    /// All attribute types in load order, hidden ones included.
    pub fn attribute_types(&self) -> impl Iterator<Item = &AttributeType> {
        self.attribute_types.iter()
    }

    /// All object classes in load order.
    pub fn object_classes(&self) -> impl Iterator<Item = &ObjectClass> {
        self.object_classes.iter()
    }

    /// `attr` itself and every type whose SUP chain reaches it (a filter on `name` matches
    /// cn, sn, ...: RFC 4512 §2.5.1).
    pub fn subtypes(&self, attr: &AttributeType) -> Vec<&AttributeType> {
        self.attribute_types.iter().filter(|t| self.is_subtype_of(t, attr)).collect()
    }

    /// Whether `ancestor` is `attr` or on its SUP chain.
    pub fn is_subtype_of(&self, attr: &AttributeType, ancestor: &AttributeType) -> bool {
        let mut current = attr;
        for _ in 0..SUP_CHAIN_MAX {
            if current.oid == ancestor.oid {
                return true;
            }
            match current.sup.as_deref().and_then(|sup| self.attribute(sup)) {
                Some(next) => current = next,
                None => return false,
            }
        }
        false
    }

    /// The class and all its superclasses, most specific first: every class comes before
    /// all of its own superclasses (RFC 4512 §2.4.1 allows several SUPs, so this is a
    /// topological order, not a chain).
    /// The classes returned are this schema's own (`class` is looked up by OID); for a class
    /// from another schema, its superclasses as this one knows them.
    pub fn superclasses(&self, class: &ObjectClass) -> Vec<&ObjectClass> {
        let chain = self.position_of_class(class).and_then(|at| self.superclass_chains.get(at));
        match chain {
            Some(chain) => chain.iter().filter_map(|&at| self.object_classes.get(at)).collect(),
            None => self.walk_superclasses(class),
        }
    }

    /// Where `class` is in `object_classes`: found by address when it is this schema's own
    /// (no hashing: what the schema check hands back), else by OID.
    fn position_of_class(&self, class: &ObjectClass) -> Option<usize> {
        let size = std::mem::size_of::<ObjectClass>();
        let start = self.object_classes.as_ptr() as usize;
        let address = class as *const ObjectClass as usize;
        let offset = address.wrapping_sub(start);
        if address >= start && offset.is_multiple_of(size) && offset / size < self.object_classes.len() {
            return Some(offset / size);
        }
        caseless_get(&self.class_index, &class.oid)
    }

    /// Where `attribute` is in `attribute_types`: by address when it is this schema's own,
    /// else by OID.
    fn position_of_attribute(&self, attribute: &AttributeType) -> Option<usize> {
        let size = std::mem::size_of::<AttributeType>();
        let start = self.attribute_types.as_ptr() as usize;
        let address = attribute as *const AttributeType as usize;
        let offset = address.wrapping_sub(start);
        if address >= start && offset.is_multiple_of(size) && offset / size < self.attribute_types.len() {
            return Some(offset / size);
        }
        caseless_get(&self.attribute_index, &attribute.oid)
    }

    /// The positions of `class`'s own MUST types (in its order) and of its MUST and MAY
    /// types (sorted); None for a class this schema does not hold.
    pub(crate) fn class_attribute_positions(&self, class: &ObjectClass) -> Option<(&[usize], &[usize])> {
        let attrs = self.class_attrs.get(self.position_of_class(class)?)?;
        Some((&attrs.must, &attrs.allowed))
    }

    /// The position of `attribute` among this schema's types, for
    /// [`Schema::class_attribute_positions`].
    pub(crate) fn attribute_position(&self, attribute: &AttributeType) -> Option<usize> {
        self.position_of_attribute(attribute)
    }

    /// The attribute type at a position [`Schema::attribute_position`] gave.
    pub(crate) fn attribute_at(&self, position: usize) -> Option<&AttributeType> {
        self.attribute_types.get(position)
    }

    /// [`Schema::superclasses`] by walking the SUP chains.
    fn walk_superclasses(&self, class: &ObjectClass) -> Vec<&ObjectClass> {
        let mut visited = HashSet::new();
        let mut post_order = Vec::new();
        match self.object_class(&class.oid) {
            Some(own) => self.visit_superclasses(own, &mut visited, &mut post_order, 0),
            None => {
                for sup in class.sup.iter().filter_map(|name| self.object_class(name)) {
                    self.visit_superclasses(sup, &mut visited, &mut post_order, 1);
                }
            }
        }
        post_order.reverse();
        post_order
    }

    /// Depth-first post-order walk; its reverse is a topological order.
    fn visit_superclasses<'a>(
        &'a self,
        class: &'a ObjectClass,
        visited: &mut HashSet<&'a str>,
        post_order: &mut Vec<&'a ObjectClass>,
        depth: usize,
    ) {
        if depth > SUP_CHAIN_MAX || !visited.insert(class.oid.as_str()) {
            return;
        }
        for sup in class.sup.iter().filter_map(|name| self.object_class(name)) {
            self.visit_superclasses(sup, visited, post_order, depth + 1);
        }
        post_order.push(class);
    }

    /// The values of cn=Subschema's attributeTypes, objectClasses, ldapSyntaxes,
    /// matchingRules and matchingRuleUse (RFC 4512 §4.2), in that order, as (attribute name,
    /// values).
    pub fn subschema_values(&self) -> Vec<(&'static str, Vec<String>)> {
        let published =
            || self.attribute_types.iter().filter(|t| !self.hidden_attribute_oids.contains(&t.oid));
        let attribute_types = published().map(|t| t.definition.clone()).collect();
        let object_classes = self
            .object_classes
            .iter()
            .filter(|c| !self.hidden_class_oids.contains(&c.oid))
            .map(|c| c.definition.clone())
            .collect();
        let mut ldap_syntaxes: Vec<String> = syntax::all()
            .iter()
            .map(|(oid, desc)| format!("( {oid} DESC {}{} )", parse::quote(desc), syntax_extensions(oid)))
            .collect();
        ldap_syntaxes.extend(self.extra_syntaxes.iter().map(|(_, definition)| definition.clone()));
        let rules = matching_rules();
        let matching_rules = rules
            .iter()
            .map(|(oid, name, syntax)| format!("( {oid} NAME {} SYNTAX {syntax} )", parse::quote(name)));
        // RFC 4512 §4.1.4: matchingRuleUse lists the types a rule can be used with in an
        // extensible match. As slapd decides it, that is the types whose syntax is the rule's
        // assertion syntax (slapd also admits a per-rule list of compatible syntaxes, which we
        // do not have), whatever rules the type names itself.
        let matching_rule_use = rules.iter().filter_map(|&(oid, name, syntax)| {
            let applies: Vec<String> = published()
                .filter(|t| t.syntax.as_deref() == Some(syntax))
                .map(|t| t.name().to_string())
                .collect();
            (!applies.is_empty()).then(|| {
                format!("( {oid} NAME {} {} )", parse::quote(name), parse::format_oids("APPLIES", &applies))
            })
        });
        vec![
            ("attributeTypes", attribute_types),
            ("objectClasses", object_classes),
            ("ldapSyntaxes", ldap_syntaxes),
            ("matchingRules", matching_rules.collect()),
            ("matchingRuleUse", matching_rule_use.collect()),
        ]
    }
}

/// The server's matching rules as (OID, name, assertion syntax OID), from [`matching`].
fn matching_rules() -> Vec<(&'static str, &'static str, &'static str)> {
    matching::all().iter().filter_map(|(rule, kind)| matching::describe(*rule, *kind)).collect()
}

/// The extension fields slapd 2.5 publishes with a syntax: RFC 4522 §2's binary transfer
/// requirement, and the `X-NOT-HUMAN-READABLE` flag that RFC 2252 §4.3.2 set on these
/// syntaxes and slapd still shows.
fn syntax_extensions(oid: &str) -> &'static str {
    const NOT_HUMAN_READABLE: &str = " X-NOT-HUMAN-READABLE 'TRUE'";
    const BINARY: &str = " X-BINARY-TRANSFER-REQUIRED 'TRUE' X-NOT-HUMAN-READABLE 'TRUE'";
    match oid {
        // Audio, Binary, JPEG.
        "1.3.6.1.4.1.1466.115.121.1.4" | "1.3.6.1.4.1.1466.115.121.1.5" | "1.3.6.1.4.1.1466.115.121.1.28" => {
            NOT_HUMAN_READABLE
        }
        // Certificate, Certificate List, Certificate Pair, Supported Algorithm, X.509
        // AttributeCertificate.
        "1.3.6.1.4.1.1466.115.121.1.8"
        | "1.3.6.1.4.1.1466.115.121.1.9"
        | "1.3.6.1.4.1.1466.115.121.1.10"
        | "1.3.6.1.4.1.1466.115.121.1.49"
        | "1.3.6.1.4.1.4203.666.11.10.2.1" => BINARY,
        _ => "",
    }
}

/// How messages name a definition: its first NAME, else its OID.
fn label(oid: &str, names: &[String]) -> String {
    match names.first() {
        Some(name) => format!("'{name}'"),
        None => oid.to_string(),
    }
}

/// RFC 4512 §6.2: an OID names one element, and names within a kind must be unique, so a
/// definition reusing either is refused rather than shadowing the first.
fn check_new_keys(index: &NameIndex, oid: &str, names: &[String], kind: &str) -> Result<(), String> {
    if index.contains_key(oid) {
        return Err(format!("{kind} {oid} is already defined"));
    }
    let mut seen = HashSet::new();
    for name in names {
        let key = name.to_ascii_lowercase();
        if index.contains_key(&key) || !seen.insert(key) {
            return Err(format!("{kind} name '{name}' is already in use"));
        }
    }
    Ok(())
}

/// `index[name lowercased]` without allocating for the lowercase copy: every entry an
/// import or an Add checks looks up each of its types and classes here.
fn caseless_get(index: &NameIndex, name: &str) -> Option<usize> {
    if !name.bytes().any(|b| b.is_ascii_uppercase()) {
        return index.get(name).copied();
    }
    let mut buf = [0u8; 64];
    match buf.get_mut(..name.len()) {
        Some(lowered) => {
            lowered.copy_from_slice(name.as_bytes());
            lowered.make_ascii_lowercase();
            // ASCII lowercasing keeps UTF-8 valid.
            index.get(std::str::from_utf8(lowered).ok()?).copied()
        }
        None => index.get(&name.to_ascii_lowercase()).copied(),
    }
}

fn index_keys(index: &mut NameIndex, oid: &str, names: &[String], position: usize) {
    index.insert(oid.to_string(), position);
    for name in names {
        index.insert(name.to_ascii_lowercase(), position);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standard() -> Schema {
        Schema::standard()
    }

    #[test]
    fn cn_inherits_rules_and_syntax_from_name() {
        let schema = standard();
        let cn = schema.attribute("cn").unwrap();
        assert_eq!(cn.sup.as_deref(), Some("name"));
        assert_eq!(cn.equality.as_deref(), Some("caseIgnoreMatch"));
        assert_eq!(cn.substr.as_deref(), Some("caseIgnoreSubstringsMatch"));
        assert_eq!(cn.syntax.as_deref(), Some("1.3.6.1.4.1.1466.115.121.1.15"));
        // The published definition keeps only what was written.
        assert_eq!(
            cn.definition,
            "( 2.5.4.3 NAME ( 'cn' 'commonName' ) DESC 'RFC4519: common name(s) for which the entity is known by' SUP name )"
        );
        // Two levels: seeAlso SUP distinguishedName.
        let see_also = schema.attribute("seeAlso").unwrap();
        assert_eq!(see_also.equality.as_deref(), Some("distinguishedNameMatch"));
    }

    #[test]
    fn lookups_by_alias_oid_case_and_options() {
        let schema = standard();
        for key in ["cn", "CN", "commonName", "COMMONNAME", "2.5.4.3", "cn;lang-en", "commonName;binary"] {
            assert_eq!(schema.attribute(key).map(|t| t.oid.as_str()), Some("2.5.4.3"), "{key}");
        }
        assert_eq!(schema.attribute("2.5.4.3").unwrap().name(), "cn");
        assert!(schema.attribute("noSuchType").is_none());
        assert!(schema.attribute("").is_none());
        assert_eq!(schema.object_class("INETORGPERSON").unwrap().oid, "2.16.840.1.113730.3.2.2");
        assert_eq!(schema.object_class("2.5.6.6").unwrap().name(), "person");
        assert_eq!(schema.object_class("LDAProotDSE").unwrap().name(), "OpenLDAProotDSE");
    }

    #[test]
    fn operational_types_from_the_brief_are_known() {
        let schema = standard();
        for name in [
            "entryUUID",
            "entryCSN",
            "entryDN",
            "hasSubordinates",
            "subschemaSubentry",
            "structuralObjectClass",
            "createTimestamp",
            "modifyTimestamp",
            "creatorsName",
            "modifiersName",
            "namingContexts",
            "supportedControl",
            "supportedExtension",
            "supportedFeatures",
            "supportedLDAPVersion",
            "supportedSASLMechanisms",
            "vendorName",
            "vendorVersion",
            "ldapSyntaxes",
            "matchingRules",
            "matchingRuleUse",
            "attributeTypes",
            "objectClasses",
            "altServer",
            "ref",
            "contextCSN",
        ] {
            let t = schema.attribute(name).unwrap_or_else(|| panic!("{name} missing"));
            assert!(t.is_operational(), "{name}");
        }
        assert_eq!(schema.attribute("1.3.6.1.1.16.4").unwrap().name(), "entryUUID");
        assert!(!schema.attribute("aliasedObjectName").unwrap().is_operational());
        assert_eq!(schema.attribute("ref").unwrap().usage, Usage::DistributedOperation);
        assert_eq!(schema.attribute("namingContexts").unwrap().usage, Usage::DsaOperation);
        for class in
            ["top", "alias", "extensibleObject", "subschema", "subentry", "referral", "OpenLDAProotDSE"]
        {
            assert!(schema.object_class(class).is_some(), "{class}");
        }
    }

    #[test]
    fn subtypes_of_name_include_cn_and_sn() {
        let schema = standard();
        let name = schema.attribute("name").unwrap();
        let subtypes: Vec<&str> = schema.subtypes(name).iter().map(|t| t.name()).collect();
        for expected in ["name", "cn", "sn", "givenName", "ou", "o", "c", "l", "st", "title"] {
            assert!(subtypes.contains(&expected), "{expected} in {subtypes:?}");
        }
        assert!(!subtypes.contains(&"description"));
        let cn = schema.attribute("cn").unwrap();
        assert!(schema.is_subtype_of(cn, name));
        assert!(schema.is_subtype_of(cn, cn));
        assert!(!schema.is_subtype_of(name, cn));
    }

    #[test]
    fn superclasses_are_topologically_ordered() {
        let schema = standard();
        let person = schema.object_class("OpenLDAPperson").unwrap();
        let names: Vec<&str> = schema.superclasses(person).iter().map(|c| c.name()).collect();
        assert_eq!(names[0], "OpenLDAPperson");
        assert_eq!(names.len(), 6, "{names:?}");
        let position = |n: &str| names.iter().position(|x| *x == n).unwrap();
        assert!(position("inetOrgPerson") < position("organizationalPerson"));
        assert!(position("organizationalPerson") < position("person"));
        assert!(position("pilotPerson") < position("person"));
        assert_eq!(names[5], "top");
        let top = schema.object_class("top").unwrap();
        assert_eq!(schema.superclasses(top).len(), 1);
    }

    #[test]
    fn load_rejects_duplicates_and_unknown_references_with_line_numbers() {
        let mut schema = standard();
        let cases = [
            ("attributetype ( 2.5.4.3 NAME 'other' SYNTAX 1.2 )", "line 1", "already defined"),
            ("\n\nattributetype ( 9.9.9 NAME 'CN' SYNTAX 1.2 )", "line 3", "already in use"),
            ("attributetype ( 9.9.9 NAME 'x' SUP nothing )", "line 1", "SUP 'nothing'"),
            ("attributetype ( 9.9.9 NAME 'x' )", "line 1", "neither SUP nor SYNTAX"),
            ("# c\nobjectclass ( 9.9.8 NAME 'y' SUP nothing )", "line 2", "SUP 'nothing'"),
            ("objectclass ( 9.9.8 NAME 'y' MUST ( cn $ nothing ) )", "line 1", "MUST 'nothing'"),
            (
                "attributetype ( 9.9.9 NAME 'x' SYNTAX 1.2 NO-USER-MODIFICATION )",
                "line 1",
                "NO-USER-MODIFICATION",
            ),
            ("frobnicate ( 1.2 )", "line 1", "unknown directive"),
            ("objectidentifier OnlyName", "line 1", "expected a name"),
            ("attributetype ( 9.9.9 NAME 'x'\n  SYNTAX 1.2", "line 1", "missing ')'"),
        ];
        for (text, line, reason) in cases {
            let message = schema.load_openldap_schema(text).unwrap_err().to_string();
            assert!(message.contains(line) && message.contains(reason), "{text:?}: {message}");
        }
        // Nothing of a failed file stays behind.
        let failed = "attributetype ( 9.9.1 NAME 'fine' SYNTAX 1.2 )\nattributetype ( 9.9.2 NAME 'bad' )";
        assert!(schema.load_openldap_schema(failed).is_err());
        assert!(schema.attribute("fine").is_none());
    }

    #[test]
    fn macros_and_keywords_in_any_case() {
        let mut schema = standard();
        let text = "ObjectIdentifier Ex 1.3.6.1.4.1.99999\nobjectidentifier ExAt Ex:1\n\
                    ATTRIBUTETYPES ( ExAt:1 NAME 'exThing' SUP name )\n\
                    objectClass ( Ex:2.1 NAME 'exObject' AUXILIARY MAY exThing )\n\
                    ldapSyntax ( Ex:3.1 DESC 'Example' )";
        schema.load_openldap_schema(text).unwrap();
        let thing = schema.attribute("1.3.6.1.4.1.99999.1.1").unwrap();
        assert_eq!(thing.name(), "exThing");
        assert_eq!(thing.definition, "( 1.3.6.1.4.1.99999.1.1 NAME 'exThing' SUP name )");
        assert_eq!(schema.object_class("exobject").unwrap().kind, ObjectClassKind::Auxiliary);
        // Macros persist for later files.
        schema.load_openldap_schema("attributetype ( ExAt:2 NAME 'exOther' SUP name )").unwrap();
        assert_eq!(schema.attribute("exOther").unwrap().oid, "1.3.6.1.4.1.99999.1.2");
        let values = schema.subschema_values();
        let syntaxes = &values[2].1;
        assert!(syntaxes.iter().any(|v| v == "( 1.3.6.1.4.1.99999.3.1 DESC 'Example' )"));
    }

    #[test]
    fn subschema_values_publish_definitions_in_order() {
        let schema = standard();
        let values = schema.subschema_values();
        let names: Vec<&str> = values.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            names,
            ["attributeTypes", "objectClasses", "ldapSyntaxes", "matchingRules", "matchingRuleUse"]
        );
        let types = &values[0].1;
        assert!(types[0].starts_with("( 2.5.4.0 NAME 'objectClass'"));
        // Hidden types are known but not published.
        assert!(schema.attribute("subtreeSpecification").is_some());
        assert!(!types.iter().any(|d| d.contains("'subtreeSpecification'")));
        assert_eq!(values[1].1[0], schema.object_class("top").unwrap().definition);
    }

    fn slapd_subschema() -> String {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/conformance/schema/slapd-2.5.13-subschema.ldif");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{} is missing: {e}", path.display()))
    }

    #[test]
    fn syntaxes_and_rules_are_published_as_slapd_does() {
        let ldif = slapd_subschema();
        let values = standard().subschema_values();
        // Every syntax slapd publishes is there verbatim (Ferrodir publishes a few more).
        for line in ldif.lines().filter_map(|l| l.strip_prefix("ldapSyntaxes: ")) {
            assert!(values[2].1.iter().any(|v| v == line), "ldapSyntaxes missing {line}");
        }
        // A rule both servers have is described identically.
        for ours in &values[3].1 {
            let oid = ours.split_whitespace().nth(1).unwrap_or_default();
            let prefix = format!("matchingRules: ( {oid} ");
            if let Some(theirs) = ldif.lines().find(|l| l.starts_with(&prefix)) {
                assert_eq!(Some(ours.as_str()), theirs.strip_prefix("matchingRules: "));
            }
        }
    }

    #[test]
    fn matching_rule_use_lists_types_by_syntax() {
        let mut schema = standard();
        let test_schema = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/conformance/openldap/test.schema");
        let text = std::fs::read_to_string(&test_schema)
            .unwrap_or_else(|e| panic!("{} is missing: {e}", test_schema.display()));
        schema.load_openldap_schema(&text).unwrap();
        let values = schema.subschema_values();
        let find = |oid: &str| values[4].1.iter().find(|v| v.starts_with(&format!("( {oid} "))).cloned();
        // slapd lists olcIndexHash64 too, from cn=config's schema, which Ferrodir does not load;
        // the pwd* types in the same order as a slapd with the ppolicy overlay.
        assert_eq!(
            find("2.5.13.13").as_deref(),
            Some(
                "( 2.5.13.13 NAME 'booleanMatch' APPLIES ( hasSubordinates $ pwdReset $ pwdLockout $ \
                 pwdMustChange $ pwdAllowUserChange $ pwdSafeModify $ testObsolete ) )"
            )
        );
        // By syntax, not by the rules a type names: vendorName (caseExactMatch) qualifies for
        // caseIgnoreMatch, as in slapd.
        let case_ignore = find("2.5.13.2").unwrap_or_default();
        assert!(case_ignore.contains(" vendorName ") && case_ignore.contains(" cn "), "{case_ignore}");
        // Hidden types are left out.
        let first_component = find("2.5.13.29").unwrap_or_default();
        assert!(!first_component.contains("dITStructureRules"), "{first_component}");
    }
}
