//! Checking an entry against the schema, as an Add or Modify must before storing it
//! (RFC 4512 §2.4-§2.5, RFC 4511 §4.7 and §4.6).
//!
//! The checks and their order follow slapd 2.5, whose result codes and messages clients
//! and test suites rely on: first each attribute on its own (is the type defined, is each
//! value valid for its syntax), as slapd's `slap_mods_check` does before anything else; then
//! the entry as a whole, in `entry_schema_check`'s order: SINGLE-VALUE, the objectClass
//! attribute, the structural class chain, the RDN, MUST, and finally that every attribute
//! is allowed by some class.

use super::{AttributeType, ObjectClass, ObjectClassKind, Schema};
use crate::dn::Rdn;
use crate::entry::{Attribute, Entry};
use crate::value::AvaNormalizer;
use crate::ResultCode;

/// Why an entry or attribute does not fit the schema: the result code to answer with and
/// slapd's diagnostic message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub code: ResultCode,
    pub message: String,
}

impl Violation {
    fn new(code: ResultCode, message: impl Into<String>) -> Violation {
        Violation { code, message: message.into() }
    }
}

/// What a check learned, for the operational attributes the server stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The most specific structural class's first NAME: the value of structuralObjectClass
    /// (RFC 4512 §3.4.5).
    pub structural_class: String,
}

/// The OID of objectClass (RFC 4512 §3.3), whose values must name known classes.
const OBJECT_CLASS_OID: &str = "2.5.4.0";
/// The OID of extensibleObject (RFC 4512 §4.3), which allows any user attribute.
const EXTENSIBLE_OBJECT_OID: &str = "1.3.6.1.4.1.1466.101.120.111";

/// Checks a whole entry as it would be stored after an Add or Modify. `rdn`: the entry's RDN
/// (its values must be present, else 64 namingViolation). User-supplied attribute
/// descriptions may be names, aliases or OIDs, with options.
///
/// NO-USER-MODIFICATION types are accepted: the server adds those itself, and refusing them
/// from clients is the router's job. `dn`: the schema's DN normaliser (DN-valued values, and
/// the RDN's values as DNs compare them).
pub fn check_entry(
    schema: &Schema,
    entry: &Entry,
    rdn: Option<&Rdn>,
    dn: &dyn AvaNormalizer,
) -> Result<Checked, Violation> {
    check_changed_entry(schema, entry, &[], rdn, dn)
}

/// [`check_entry`] for a stored entry after a change (a Modify, a Modify DN, a referential
/// integrity rewrite): `kept[i]` says that attribute `i` is exactly as it was stored
/// ([`Entry::kept_from`]), so its values, checked against their syntax when they were
/// written, are not validated again. As slapd: `slap_mods_check` validates the values a
/// Modify names, and `entry_schema_check` then checks the whole entry's shape, as here
/// (the type of every attribute, SINGLE-VALUE, that each objectClass value names a known
/// class, the class chain, the RDN, MUST and MAY). A missing flag counts as changed.
pub fn check_changed_entry(
    schema: &Schema,
    entry: &Entry,
    kept: &[bool],
    rdn: Option<&Rdn>,
    dn: &dyn AvaNormalizer,
) -> Result<Checked, Violation> {
    let mut typed: Vec<(&Attribute, &AttributeType)> = Vec::with_capacity(entry.attrs.len());
    for (position, attribute) in entry.attrs.iter().enumerate() {
        let attribute_type = find_type(schema, &attribute.name)?;
        let syntax = !kept.get(position).copied().unwrap_or(false);
        check_values(schema, &attribute.name, attribute_type, &attribute.values, syntax, dn)?;
        typed.push((attribute, attribute_type));
    }
    check_single_values(&typed)?;
    let class_values: Vec<&[u8]> = typed
        .iter()
        .filter(|(_, t)| t.oid == OBJECT_CLASS_OID)
        .flat_map(|(a, _)| a.values.iter().map(Vec::as_slice))
        .collect();
    if class_values.is_empty() {
        return Err(Violation::new(ResultCode::OBJECT_CLASS_VIOLATION, "no objectClass attribute"));
    }
    // Values were checked above: each names a known class.
    let listed: Vec<(&str, &ObjectClass)> = class_values
        .iter()
        .filter_map(|v| std::str::from_utf8(v).ok())
        .filter_map(|written| schema.object_class(written).map(|class| (written, class)))
        .collect();
    let structural = structural_class(schema, &listed)?;
    if let Some(rdn) = rdn {
        check_naming(schema, &typed, rdn, dn)?;
    }
    check_required(schema, &typed, &listed, structural)?;
    if !listed.iter().any(|(_, class)| class.oid == EXTENSIBLE_OBJECT_OID) {
        check_allowed(schema, &typed, &listed)?;
    }
    Ok(Checked { structural_class: structural.name().to_string() })
}

/// Checks one attribute's values against its syntax and SINGLE-VALUE, and that the type
/// exists. Used also for Modify before applying.
pub fn check_attribute(
    schema: &Schema,
    name: &str,
    values: &[Vec<u8>],
    dn: &dyn AvaNormalizer,
) -> Result<(), Violation> {
    let attribute_type = find_type(schema, name)?;
    check_values(schema, name, attribute_type, values, true, dn)?;
    if attribute_type.single_value && values.len() > 1 {
        return Err(multiple_values(attribute_type, name));
    }
    Ok(())
}

/// RFC 4511 §4.7: an Add naming an unknown type fails with undefinedAttributeType.
fn find_type<'s>(schema: &'s Schema, name: &str) -> Result<&'s AttributeType, Violation> {
    schema.attribute(name).ok_or_else(|| {
        Violation::new(ResultCode::UNDEFINED_ATTRIBUTE_TYPE, format!("{name}: attribute type undefined"))
    })
}

/// Each value must be valid for the type's syntax (RFC 4512 §2.5; not checked again
/// without `syntax`: values stored unchanged); an objectClass value must also name a known
/// class, which slapd reports the same way (always checked).
fn check_values(
    schema: &Schema,
    name: &str,
    attribute_type: &AttributeType,
    values: &[Vec<u8>],
    syntax: bool,
    dn: &dyn AvaNormalizer,
) -> Result<(), Violation> {
    let is_object_class = attribute_type.oid == OBJECT_CLASS_OID;
    if !syntax && !is_object_class {
        return Ok(());
    }
    for (index, value) in values.iter().enumerate() {
        let valid_syntax =
            !syntax || attribute_type.syntax.as_deref().is_none_or(|oid| value_is_valid(oid, value, dn));
        let known_class = !is_object_class
            || std::str::from_utf8(value).is_ok_and(|class| schema.object_class(class).is_some());
        if !valid_syntax || !known_class {
            return Err(Violation::new(
                ResultCode::INVALID_ATTRIBUTE_SYNTAX,
                format!("{name}: value #{index} invalid per syntax"),
            ));
        }
    }
    Ok(())
}

/// The syntax module's verdict on one value.
fn value_is_valid(syntax_oid: &str, value: &[u8], dn: &dyn AvaNormalizer) -> bool {
    super::syntax::validate(syntax_oid, value) && super::syntax::names_types_once(syntax_oid, value, dn)
}

/// How slapd names an attribute in entry-level messages: the type's first NAME plus the
/// options the client wrote (`cn;lang-en`).
fn canonical_description(attribute_type: &AttributeType, written: &str) -> String {
    match written.split_once(';') {
        Some((_, options)) => format!("{};{options}", attribute_type.name()),
        None => attribute_type.name().to_string(),
    }
}

fn multiple_values(attribute_type: &AttributeType, written: &str) -> Violation {
    Violation::new(
        ResultCode::CONSTRAINT_VIOLATION,
        format!("attribute '{}' cannot have multiple values", canonical_description(attribute_type, written)),
    )
}

/// RFC 4512 §4.1.2 SINGLE-VALUE, counted per attribute description: `sn` and `surname` are
/// one attribute, `cn;lang-en` and `cn` are two (RFC 4512 §2.5.2).
fn check_single_values(typed: &[(&Attribute, &AttributeType)]) -> Result<(), Violation> {
    // An entry has few attributes: a list, not a hash map (every imported entry comes here).
    let mut counts: Vec<((&str, &str), usize)> = Vec::new();
    for (attribute, attribute_type) in typed.iter().filter(|(_, t)| t.single_value) {
        let options = attribute.name.split_once(';').map_or("", |(_, o)| o);
        let same = |((oid, o), _): &&mut ((&str, &str), usize)| {
            *oid == attribute_type.oid && o.eq_ignore_ascii_case(options)
        };
        let count = match counts.iter_mut().find(same) {
            Some((_, count)) => {
                *count += attribute.values.len();
                *count
            }
            None => {
                counts.push(((attribute_type.oid.as_str(), options), attribute.values.len()));
                attribute.values.len()
            }
        };
        if count > 1 {
            return Err(multiple_values(attribute_type, &attribute.name));
        }
    }
    Ok(())
}

/// RFC 4512 §2.4.2: an entry has exactly one structural class chain. Follows slapd's
/// `structural_class`: walking the listed classes in order, a structural class replaces the
/// current one if it is a subclass of it; one on another branch is accepted only if a later
/// listed structural class is a subclass of both (the multiple inheritance of
/// OpenLDAPperson). Superclasses count as present even if not listed.
fn structural_class<'s>(
    schema: &'s Schema,
    listed: &[(&str, &'s ObjectClass)],
) -> Result<&'s ObjectClass, Violation> {
    let is_subclass = |class: &ObjectClass, ancestor: &ObjectClass| {
        schema.superclasses(class).iter().any(|c| c.oid == ancestor.oid)
    };
    let mut current: Option<(&str, &ObjectClass)> = None;
    for (position, &(written, class)) in listed.iter().enumerate() {
        if class.kind != ObjectClassKind::Structural {
            continue;
        }
        match current {
            None => current = Some((written, class)),
            Some((_, chosen)) if is_subclass(class, chosen) => current = Some((written, class)),
            Some((_, chosen)) if is_subclass(chosen, class) => {}
            Some((chosen_written, chosen)) => {
                let joined = listed.iter().skip(position + 1).any(|(_, later)| {
                    later.kind == ObjectClassKind::Structural
                        && is_subclass(later, chosen)
                        && is_subclass(later, class)
                });
                if !joined {
                    return Err(Violation::new(
                        ResultCode::OBJECT_CLASS_VIOLATION,
                        format!("invalid structural object class chain ({chosen_written}/{written})"),
                    ));
                }
            }
        }
    }
    current.map(|(_, class)| class).ok_or_else(|| {
        Violation::new(ResultCode::OBJECT_CLASS_VIOLATION, "no structural object class provided")
    })
}

/// RFC 4511 §4.7: "the entry's RDN ... attribute values ... must be present". Values are
/// compared in normalised form, as DNs compare them.
fn check_naming(
    schema: &Schema,
    typed: &[(&Attribute, &AttributeType)],
    rdn: &Rdn,
    dn: &dyn AvaNormalizer,
) -> Result<(), Violation> {
    let naming = |message: String| Violation::new(ResultCode::NAMING_VIOLATION, message);
    for ava in &rdn.avas {
        let Some(attribute_type) = schema.attribute(&ava.attr) else {
            return Err(naming(format!("naming attribute '{}' is not recognized", ava.attr)));
        };
        let key = ava.attr.to_ascii_lowercase();
        let wanted = dn.normalize_ava(&key, &ava.value).1;
        let mut values =
            typed.iter().filter(|(_, t)| t.oid == attribute_type.oid).flat_map(|(a, _)| &a.values).peekable();
        if values.peek().is_none() {
            return Err(naming(format!("naming attribute '{}' is not present in entry", ava.attr)));
        }
        if !values.any(|v| dn.normalize_ava(&key, v).1 == wanted) {
            return Err(naming(format!("value of naming attribute '{}' is not present in entry", ava.attr)));
        }
    }
    Ok(())
}

/// RFC 4512 §2.4: every MUST of every class the entry belongs to, superclasses included.
/// As in slapd, the structural classes are checked through the most specific one, and a
/// message names the class as the entry lists it.
fn check_required(
    schema: &Schema,
    typed: &[(&Attribute, &AttributeType)],
    listed: &[(&str, &ObjectClass)],
    structural: &ObjectClass,
) -> Result<(), Violation> {
    // The types present, as positions of the schema's types (an entry has few: a list).
    let present_at: Vec<usize> = typed
        .iter()
        .filter(|(a, _)| !a.values.is_empty())
        .filter_map(|(_, t)| schema.attribute_position(t))
        .collect();
    let requires = |written: &str, name: &str| {
        Violation::new(
            ResultCode::OBJECT_CLASS_VIOLATION,
            format!("object class '{written}' requires attribute '{name}'"),
        )
    };
    for &(written, class) in listed {
        if class.kind == ObjectClassKind::Structural && class.oid != structural.oid {
            continue;
        }
        for superclass in schema.superclasses(class) {
            if let Some((must, _)) = schema.class_attribute_positions(superclass) {
                if let Some(&missing) = must.iter().find(|at| !present_at.contains(at)) {
                    let name = schema.attribute_at(missing).map_or("", AttributeType::name);
                    return Err(requires(written, name));
                }
                continue;
            }
            for required in &superclass.must {
                let present = |t: &AttributeType| {
                    typed.iter().any(|(a, typed)| !a.values.is_empty() && typed.oid == t.oid)
                };
                let missing = schema.attribute(required).is_none_or(|t| !present(t));
                if missing {
                    let name = schema.attribute(required).map_or(required.as_str(), AttributeType::name);
                    return Err(requires(written, name));
                }
            }
        }
    }
    Ok(())
}

/// RFC 4512 §2.4: a user attribute must be a MUST or MAY of some class of the entry
/// (auxiliary classes and superclasses included); operational attributes are always allowed
/// (RFC 4512 §3.4).
fn check_allowed(
    schema: &Schema,
    typed: &[(&Attribute, &AttributeType)],
    listed: &[(&str, &ObjectClass)],
) -> Result<(), Violation> {
    // Every class of the entry once. Listed classes are usually each other's superclasses
    // (top, person, ..., inetOrgPerson), so walking from the last listed skips most walks.
    let mut classes: Vec<&ObjectClass> = Vec::new();
    for &(_, class) in listed.iter().rev() {
        if classes.iter().any(|c| c.oid == class.oid) {
            continue;
        }
        for c in schema.superclasses(class) {
            if !classes.iter().any(|seen| seen.oid == c.oid) {
                classes.push(c);
            }
        }
    }
    // A MUST or MAY names a type by one of its names or its OID, ignoring case. Comparing
    // names directly costs far less than resolving every MUST and MAY of every class through
    // the schema (bulk import checks every entry; this was a fifth of its time).
    let names_type = |name: &String, t: &AttributeType| {
        name.eq_ignore_ascii_case(&t.oid) || t.names.iter().any(|n| n.eq_ignore_ascii_case(name))
    };
    let allowed = |t: &AttributeType| {
        let at = schema.attribute_position(t);
        classes.iter().any(|c| match (schema.class_attribute_positions(c), at) {
            // Positions fixed when the class was added: a binary search, no name compared.
            (Some((_, allowed)), Some(at)) => allowed.binary_search(&at).is_ok(),
            _ => c.must.iter().chain(&c.may).any(|name| names_type(name, t)),
        })
    };
    for (attribute, attribute_type) in typed {
        if !attribute_type.is_operational() && !allowed(attribute_type) {
            return Err(Violation::new(
                ResultCode::OBJECT_CLASS_VIOLATION,
                format!("attribute '{}' not allowed", canonical_description(attribute_type, &attribute.name)),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::BufReader;
    use std::path::PathBuf;

    use super::*;
    use crate::dn::Dn;
    use crate::ldif::{LdifReader, LdifRecord};
    use crate::value::PlainAvas;

    fn testdata(relative: &str) -> String {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata").join(relative);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("test data {} is missing or unreadable: {e}", path.display()))
    }

    /// An entry from `name: value` pairs.
    fn entry(pairs: &[(&str, &str)]) -> Entry {
        let mut entry = Entry::default();
        for (name, value) in pairs {
            match entry.get_mut(name) {
                Some(attribute) => attribute.values.push(value.as_bytes().to_vec()),
                None => entry.attrs.push(Attribute::new(*name, vec![value.as_bytes().to_vec()])),
            }
        }
        entry
    }

    fn person() -> Vec<(&'static str, &'static str)> {
        vec![("objectClass", "top"), ("objectClass", "person"), ("cn", "Barbara Jensen"), ("sn", "Jensen")]
    }

    fn check(pairs: &[(&str, &str)], rdn: Option<&str>) -> Result<Checked, Violation> {
        let rdn = rdn.map(|r| Rdn::parse(r).unwrap());
        check_entry(&Schema::standard(), &entry(pairs), rdn.as_ref(), &PlainAvas)
    }

    fn violation(pairs: &[(&str, &str)], rdn: Option<&str>) -> (u32, String) {
        let v = check(pairs, rdn).unwrap_err();
        (v.code.0, v.message)
    }

    #[test]
    fn a_valid_person_passes() {
        let checked = check(&person(), Some("cn=barbara  jensen")).unwrap();
        assert_eq!(checked.structural_class, "person");
    }

    #[test]
    fn inet_org_person_with_posix_account_passes() {
        let pairs = [
            ("objectClass", "inetOrgPerson"),
            ("objectClass", "posixAccount"),
            ("objectClass", "shadowAccount"),
            ("cn", "Barbara Jensen"),
            ("sn", "Jensen"),
            ("uid", "bjensen"),
            ("uidNumber", "1000"),
            ("gidNumber", "1000"),
            ("homeDirectory", "/home/bjensen"),
            ("loginShell", "/bin/sh"),
            ("mail", "bjensen@example.com"),
            ("title", "Engineer"),
        ];
        let checked = check(&pairs, Some("uid=bjensen")).unwrap();
        assert_eq!(checked.structural_class, "inetOrgPerson");
        // posixAccount's MUST applies: dropping homeDirectory fails.
        let without: Vec<_> = pairs.iter().copied().filter(|(n, _)| *n != "homeDirectory").collect();
        assert_eq!(
            violation(&without, None),
            (65, "object class 'posixAccount' requires attribute 'homeDirectory'".to_string())
        );
    }

    #[test]
    fn missing_object_class() {
        assert_eq!(violation(&[("cn", "x")], None), (65, "no objectClass attribute".to_string()));
    }

    #[test]
    fn unknown_object_class_is_invalid_syntax() {
        let mut pairs = vec![("objectClass", "doesNotExist")];
        pairs.extend(person());
        assert_eq!(violation(&pairs, None), (21, "objectClass: value #0 invalid per syntax".to_string()));
    }

    #[test]
    fn structural_class_rules() {
        let aux_only = [("objectClass", "top"), ("objectClass", "dcObject"), ("dc", "example")];
        assert_eq!(violation(&aux_only, None), (65, "no structural object class provided".to_string()));
        let two = [
            ("objectClass", "person"),
            ("objectClass", "organization"),
            ("cn", "a"),
            ("sn", "b"),
            ("o", "c"),
        ];
        assert_eq!(
            violation(&two, None),
            (65, "invalid structural object class chain (person/organization)".to_string())
        );
        // Listing a superclass after its subclass keeps the subclass.
        let pairs =
            [("objectClass", "organizationalPerson"), ("objectClass", "person"), ("cn", "a"), ("sn", "b")];
        assert_eq!(check(&pairs, None).unwrap().structural_class, "organizationalPerson");
        // Two branches joined by a later common subclass (OpenLDAPperson SUP pilotPerson $ inetOrgPerson).
        let joined = [
            ("objectClass", "pilotPerson"),
            ("objectClass", "inetOrgPerson"),
            ("objectClass", "OpenLDAPperson"),
            ("cn", "a"),
            ("sn", "b"),
            ("uid", "c"),
        ];
        assert_eq!(check(&joined, None).unwrap().structural_class, "OpenLDAPperson");
    }

    #[test]
    fn must_attributes_of_superclasses_are_required() {
        // inetOrgPerson alone: sn comes from person, two levels up.
        let pairs = [("objectClass", "inetOrgPerson"), ("cn", "a")];
        assert_eq!(
            violation(&pairs, None),
            (65, "object class 'inetOrgPerson' requires attribute 'sn'".to_string())
        );
        // Present under an alias counts.
        let pairs = [("objectClass", "person"), ("commonName", "a"), ("surname", "b")];
        assert!(check(&pairs, None).is_ok());
    }

    #[test]
    fn attributes_must_be_allowed() {
        let mut pairs = person();
        pairs.push(("mail", "a@example.com"));
        assert_eq!(violation(&pairs, None), (65, "attribute 'mail' not allowed".to_string()));
        let mut pairs = person();
        pairs.push(("2.5.4.12;lang-de", "Chef"));
        assert_eq!(violation(&pairs, None), (65, "attribute 'title;lang-de' not allowed".to_string()));
        // Operational attributes need no class; NO-USER-MODIFICATION ones are the server's.
        let mut pairs = person();
        pairs.extend([("entryUUID", "597ae2f6-16a6-1027-98f4-d28b5365dc14"), ("ref", "ldap://x/")]);
        assert!(check(&pairs, None).is_ok());
    }

    #[test]
    fn extensible_object_allows_any_user_attribute() {
        let pairs = [
            ("objectClass", "organizationalUnit"),
            ("objectClass", "extensibleObject"),
            ("ou", "People"),
            ("uidNumber", "0"),
            ("mail", "x@example.com"),
        ];
        assert!(check(&pairs, Some("ou=People")).is_ok());
        // Still only defined types.
        let mut pairs = pairs.to_vec();
        pairs.push(("frobnitz", "1"));
        assert_eq!(violation(&pairs, None), (17, "frobnitz: attribute type undefined".to_string()));
    }

    #[test]
    fn undefined_type_single_value_and_syntax() {
        let mut pairs = person();
        pairs.push(("noSuchAttr;x-opt", "1"));
        assert_eq!(violation(&pairs, None), (17, "noSuchAttr;x-opt: attribute type undefined".to_string()));
        let pairs = [("objectClass", "posixGroup"), ("cn", "g"), ("gidNumber", "1"), ("gidNumber", "2")];
        assert_eq!(
            violation(&pairs, None),
            (19, "attribute 'gidNumber' cannot have multiple values".to_string())
        );
        // Spread over two spellings of the same description still counts as two values.
        let mut e = entry(&[("objectClass", "posixGroup"), ("cn", "g"), ("gidNumber", "1")]);
        e.attrs.push(Attribute::new("1.3.6.1.1.1.1.1", vec![b"2".to_vec()]));
        let v = check_entry(&Schema::standard(), &e, None, &PlainAvas).unwrap_err();
        assert_eq!(v.code, ResultCode::CONSTRAINT_VIOLATION);
        let pairs = [("objectClass", "posixGroup"), ("cn", "g"), ("gidNumber", "not a number")];
        assert_eq!(violation(&pairs, None), (21, "gidNumber: value #0 invalid per syntax".to_string()));
    }

    /// A changed entry's values are checked only where the change touched them; the rest
    /// of the checks (here an objectClass value naming no class, a missing MUST) still look
    /// at the whole entry.
    #[test]
    fn a_changed_entry_checks_the_syntax_of_changed_values_only() {
        let schema = Schema::standard();
        let e = entry(&[("objectClass", "posixGroup"), ("cn", "g"), ("gidNumber", "not a number")]);
        let changed = check_changed_entry(&schema, &e, &[false, false, false], None, &PlainAvas).unwrap_err();
        assert_eq!(changed.message, "gidNumber: value #0 invalid per syntax");
        assert!(check_changed_entry(&schema, &e, &[false, false, true], None, &PlainAvas).is_ok());
        let unknown = entry(&[("objectClass", "doesNotExist"), ("cn", "g"), ("gidNumber", "1")]);
        let kept = check_changed_entry(&schema, &unknown, &[true, true, true], None, &PlainAvas).unwrap_err();
        assert_eq!(kept.message, "objectClass: value #0 invalid per syntax");
        let no_gid = entry(&[("objectClass", "posixGroup"), ("cn", "g")]);
        let missing = check_changed_entry(&schema, &no_gid, &[true, true], None, &PlainAvas).unwrap_err();
        assert_eq!(missing.code, ResultCode::OBJECT_CLASS_VIOLATION);
    }

    #[test]
    fn rdn_values_must_be_present() {
        assert_eq!(
            violation(&person(), Some("cn=Someone Else")),
            (64, "value of naming attribute 'cn' is not present in entry".to_string())
        );
        assert_eq!(
            violation(&person(), Some("cn=Barbara Jensen+uid=bjensen")),
            (64, "naming attribute 'uid' is not present in entry".to_string())
        );
        // By alias or OID, and multi-valued RDNs.
        assert!(check(&person(), Some("commonName=BARBARA JENSEN+2.5.4.4=jensen")).is_ok());
    }

    #[test]
    fn check_attribute_for_modify() {
        let schema = Schema::standard();
        assert!(check_attribute(&schema, "cn", &[b"a".to_vec(), b"b".to_vec()], &PlainAvas).is_ok());
        assert_eq!(check_attribute(&schema, "bogus", &[b"a".to_vec()], &PlainAvas).unwrap_err().code.0, 17);
        let two = [b"1".to_vec(), b"2".to_vec()];
        let v = check_attribute(&schema, "uidNumber", &two, &PlainAvas).unwrap_err();
        assert_eq!((v.code.0, v.message.as_str()), (19, "attribute 'uidNumber' cannot have multiple values"));
        let v = check_attribute(&schema, "uidNumber", &[b"x".to_vec()], &PlainAvas).unwrap_err();
        assert_eq!((v.code.0, v.message.as_str()), (21, "uidNumber: value #0 invalid per syntax"));
        let v = check_attribute(&schema, "objectClass", &[b"top".to_vec(), b"nope".to_vec()], &PlainAvas)
            .unwrap_err();
        assert_eq!((v.code.0, v.message.as_str()), (21, "objectClass: value #1 invalid per syntax"));
    }

    #[test]
    fn openldap_test_data_passes_with_test_schema() {
        let mut schema = Schema::standard();
        schema.load_openldap_schema(&testdata("conformance/openldap/test.schema")).unwrap();
        let ldif = testdata("conformance/openldap/test-ordered.ldif");
        let mut checked = 0;
        for record in LdifReader::new(BufReader::new(ldif.as_bytes())) {
            let (line, record) = record.unwrap_or_else(|e| panic!("test-ordered.ldif: {e}"));
            let (LdifRecord::Content { dn, attrs } | LdifRecord::Add { dn, attrs }) = record else {
                panic!("line {line}: expected content records");
            };
            let dn = Dn::parse(&dn).unwrap_or_else(|e| panic!("line {line}: {dn}: {e}"));
            if let Err(v) = check_entry(&schema, &Entry::new(attrs), dn.rdn(), &PlainAvas) {
                panic!("line {line}: {dn}: {} {}", v.code, v.message);
            }
            checked += 1;
        }
        let records = ldif.lines().filter(|l| l.starts_with("dn:")).count();
        assert_eq!(checked, records);
    }
}
