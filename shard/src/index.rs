//! Which attributes are indexed, and the index keys an entry contributes.
//!
//! Configured per attribute like slapd's `index` directive: `"cn eq,pres"`. An equality key is
//! the attribute's normalised value ([`ferrodir_proto::value::normalize_value`]), so index
//! lookups and filter evaluation agree on equality.

use std::collections::{BTreeSet, HashMap};

use ferrodir_proto::entry::{base_name_lower, Entry};
use ferrodir_proto::value::normalize_value;

use crate::id::EntryId;
use crate::keys;

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexKinds {
    pub equality: bool,
    pub presence: bool,
}

/// The per-attribute index configuration of every shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexConfig {
    by_attr: HashMap<String, IndexKinds>,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("bad index directive {directive:?}: {reason}")]
pub struct IndexConfigError {
    pub directive: String,
    pub reason: String,
}

impl IndexConfig {
    /// Parses directives like `"objectClass eq"`, `"cn,sn eq,pres"`.
    pub fn from_directives<S: AsRef<str>>(directives: &[S]) -> Result<Self, IndexConfigError> {
        let mut config = Self::default();
        for directive in directives {
            let directive = directive.as_ref();
            let bad = |reason: &str| IndexConfigError {
                directive: directive.to_string(),
                reason: reason.to_string(),
            };
            let mut parts = directive.split_whitespace();
            let attrs = parts.next().ok_or_else(|| bad("empty"))?;
            let kinds_text = parts.next().unwrap_or("eq");
            let mut kinds = IndexKinds::default();
            for kind in kinds_text.split(',') {
                match kind {
                    "eq" => kinds.equality = true,
                    "pres" => kinds.presence = true,
                    other => return Err(bad(&format!("unsupported index kind {other:?}"))),
                }
            }
            for attr in attrs.split(',') {
                let slot = config.by_attr.entry(attr.to_ascii_lowercase()).or_default();
                slot.equality |= kinds.equality;
                slot.presence |= kinds.presence;
            }
        }
        Ok(config)
    }

    pub fn kinds(&self, attr_lower: &str) -> IndexKinds {
        self.by_attr.get(attr_lower).copied().unwrap_or_default()
    }

    /// Every index key `entry` (stored as `id`) contributes, sorted and de-duplicated.
    pub fn keys_for(&self, id: EntryId, entry: &Entry) -> BTreeSet<Vec<u8>> {
        let mut out = BTreeSet::new();
        for attr in &entry.attrs {
            let name = base_name_lower(&attr.name);
            let kinds = self.kinds(&name);
            if kinds.presence && !attr.values.is_empty() {
                out.insert(keys::pres(&name, id));
            }
            if kinds.equality {
                for value in &attr.values {
                    out.insert(keys::eq(&name, &normalize_value(&name, value), id));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::entry::Attribute;

    #[test]
    fn directives_and_keys() {
        let config = IndexConfig::from_directives(&["objectClass eq", "cn,uid eq,pres"]).unwrap();
        assert!(config.kinds("cn").presence);
        assert!(!config.kinds("objectclass").presence);
        let entry = Entry::new(vec![
            Attribute::new("cn;lang-en", vec![b"Babs  Jensen".to_vec()]),
            Attribute::new("sn", vec![b"Jensen".to_vec()]),
        ]);
        let keys = config.keys_for(EntryId(5), &entry);
        assert!(keys.contains(&keys::eq("cn", b"babs jensen", EntryId(5))));
        assert!(keys.contains(&keys::pres("cn", EntryId(5))));
        assert_eq!(keys.len(), 2);
        assert!(IndexConfig::from_directives(&["cn sub"]).is_err());
    }
}
