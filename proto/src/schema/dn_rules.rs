//! The schema's DN normaliser: each AVA of a DN by its type's canonical name and equality
//! rule, so `CN=Foo`, `commonName=foo` and `2.5.4.3=foo` name the same entry (RFC 4517
//! distinguishedNameMatch compares RDNs by each type's equality).
//!
//! A value, built once from the schema and handed to whoever parses or normalises DNs (the
//! shard's `RuleTable` holds the server's). There is no process-wide normaliser, so a unit
//! test and the server can't disagree about it by which of them set a global first.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::matching::{self, Kind, Rule};
use super::Schema;
use crate::dn::{Dn, DnError, NormDn, Rdn};
use crate::value::{normalize_value, AvaNormalizer};

/// Lowercased attribute name, alias or OID → how its AVAs normalise. Empty: no schema, which
/// normalises as [`crate::value::PlainAvas`] does. Hashed with FNV-1a, as the schema's own
/// name index is: every AVA of every DN a request names looks up its type here.
#[derive(Clone, Debug, Default)]
pub struct DnNormalizer {
    types: HashMap<String, AvaType, BuildHasherDefault<super::Fnv1a>>,
}

#[derive(Clone, Debug)]
struct AvaType {
    /// The lowercased primary name: `commonName` and `2.5.4.3` become `cn`.
    canonical: String,
    equality: Option<Rule>,
}

impl DnNormalizer {
    /// Normalisation without a schema: types as written, values caseIgnore.
    pub fn plain() -> Self {
        Self::default()
    }

    pub fn from_schema(schema: &Schema) -> Self {
        let mut types = HashMap::default();
        for attr in schema.attribute_types() {
            let equality = attr
                .equality
                .as_ref()
                .and_then(|name| matching::lookup(name))
                .and_then(|(rule, kind)| (kind == Kind::Equality).then_some(rule));
            let ava = AvaType { canonical: attr.name().to_ascii_lowercase(), equality };
            types.insert(attr.oid.to_ascii_lowercase(), ava.clone());
            for name in &attr.names {
                types.insert(name.to_ascii_lowercase(), ava.clone());
            }
        }
        Self { types }
    }

    /// Parses `text` (RFC 4514) and normalises it once.
    pub fn parse(&self, text: &str) -> Result<NormDn, DnError> {
        Ok(self.norm(Dn::parse_with(text, self)?))
    }

    /// Parses one RDN, its types compared by canonical name.
    pub fn parse_rdn(&self, text: &str) -> Result<Rdn, DnError> {
        Rdn::parse_with(text, self)
    }

    /// Normalises a parsed DN once.
    pub fn norm(&self, dn: Dn) -> NormDn {
        NormDn::new(dn, self)
    }

    /// The whole normalised form of `dn`.
    pub fn dn(&self, dn: &Dn) -> String {
        dn.normalized(self)
    }

    /// The normalised form of one RDN.
    pub fn rdn(&self, rdn: &Rdn) -> String {
        rdn.normalized(self)
    }
}

impl AvaNormalizer for DnNormalizer {
    /// A known type: its canonical name and the value under its equality rule (the value as
    /// it is when the type has none or the value is invalid under it). An unknown type: as
    /// without a schema.
    fn normalize_ava(&self, attr_lower: &str, value: &[u8]) -> (String, Vec<u8>) {
        match self.types.get(attr_lower) {
            Some(ava) => {
                let key = ava.equality.and_then(|rule| matching::normalize(rule, value, self));
                (ava.canonical.clone(), key.unwrap_or_else(|| value.to_vec()))
            }
            None => (attr_lower.to_string(), normalize_value(attr_lower, value)),
        }
    }

    fn write_normalized_ava(&self, attr_lower: &str, value: &[u8], out: &mut String) {
        match self.types.get(attr_lower) {
            Some(ava) => {
                out.push_str(&ava.canonical);
                out.push('=');
                match ava.equality.and_then(|rule| matching::normalize(rule, value, self)) {
                    Some(key) => crate::escape::push_escaped_value(out, &key),
                    None => crate::escape::push_escaped_value(out, value),
                }
            }
            None => {
                out.push_str(attr_lower);
                out.push('=');
                crate::escape::push_escaped_value(out, &normalize_value(attr_lower, value));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::PlainAvas;

    #[test]
    fn names_compare_by_canonical_type_and_values_by_its_equality() {
        let schema = DnNormalizer::from_schema(&Schema::standard());
        let norm = |text: &str| schema.parse(text).unwrap().joined();
        assert_eq!(norm("commonName=Foo  Bar,DC=Example"), "cn=foo bar,dc=example");
        assert_eq!(norm("2.5.4.3=foo,OID.0.9.2342.19200300.100.1.25=x"), "cn=foo,dc=x");
        // telephoneNumberMatch drops spaces and hyphens; caseIgnore (plain) keeps them.
        assert_eq!(norm(r"telephoneNumber=\+1 555-1234"), r"telephonenumber=\+15551234");
        assert_eq!(
            Dn::parse(r"telephoneNumber=\+1 555-1234").unwrap().normalized(&PlainAvas),
            r"telephonenumber=\+1 555-1234"
        );
        // An unknown type normalises as without a schema.
        assert_eq!(norm("x-Unknown=A  B"), "x-unknown=a b");
        assert_eq!(DnNormalizer::plain().parse("commonName=Foo").unwrap().joined(), "commonname=foo");
    }

    #[test]
    fn an_rdn_names_each_canonical_type_once() {
        let schema = DnNormalizer::from_schema(&Schema::standard());
        for text in ["cn=a+commonName=b,dc=x", "2.5.4.3=a+CN=b"] {
            assert!(matches!(schema.parse(text), Err(DnError::RepeatedAttributeType { .. })), "{text}");
            assert!(Dn::parse(text).is_ok(), "{text}: without a schema the names differ");
        }
        assert!(matches!(schema.parse_rdn("cn=a+commonName=b"), Err(DnError::RepeatedAttributeType { .. })));
    }
}
