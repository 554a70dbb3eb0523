//! Referential integrity on one shard: finding the entries whose DN-valued attributes name a
//! DN (or any DN below it), and rewriting those values once the named entry was deleted or
//! renamed. The router's `refint` module decides when; this module only knows entries and
//! index keys.
//!
//! Finding uses the equality index of each attribute (the server requires one for every
//! refint attribute): an exact DN is one posting-prefix read, a subtree is a walk over that
//! attribute's equality keys on the shard, comparing each key's value with the old base.
//! That walk costs one key read per distinct (value, entry) of the attribute on the shard,
//! never a read of any entry, and matches are then checked on the entry itself.

use ferrodir_proto::entry::Entry;
use ferrodir_proto::{Dn, NormDn};

use crate::error::ShardResult;
use crate::id::EntryId;
use crate::index::keys;
use crate::rules::RuleTable;
use crate::storage::KvSnapshot;
use crate::write::modify::{find_attr, value_key};

/// What a deleted or renamed entry's references become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefRewrite {
    /// The refint attributes, as their canonical (index) names.
    pub attrs: Vec<String>,
    /// The DN the references name (the entry's DN before the change).
    pub old: Dn,
    /// Its DN after a rename; `None` after a delete (the values are removed).
    pub new: Option<Dn>,
    /// Whether values naming DNs below `old` change too (a subtree was renamed).
    pub subtree: bool,
    /// The placeholder put in an attribute whose last value was removed (slapd's
    /// `refint_nothing`); `None` removes the attribute.
    pub nothing: Option<Vec<u8>>,
}

impl RefRewrite {
    /// The value `value` becomes: `None` if it doesn't name `old` (or a DN below it, for a
    /// subtree), `Some(None)` if it is removed, `Some(Some(v))` if it is rewritten. `old` is
    /// `self.old` normalised once.
    fn rewrite(&self, rules: &RuleTable, old: &NormDn, value: &[u8]) -> Option<Option<Vec<u8>>> {
        let named = rules.dn().parse(std::str::from_utf8(value).ok()?).ok()?;
        let hit = match named.depth_below(old) {
            Some(0) => true,
            Some(_) => self.subtree,
            None => false,
        };
        if !hit {
            return None;
        }
        let Some(new) = &self.new else { return Some(None) };
        let keep = named.len().saturating_sub(old.len());
        let mut rdns: Vec<_> = named.dn.rdns.into_iter().take(keep).collect();
        rdns.extend(new.rdns.iter().cloned());
        Some(Some(Dn { rdns }.to_string().into_bytes()))
    }

    /// Applies the rewrite to `entry`; false when no value named the old DN (nothing to
    /// write, so a repeated rewrite changes nothing: recovery may run it again).
    pub fn apply(&self, rules: &RuleTable, entry: &mut Entry) -> bool {
        let old = rules.dn().norm(self.old.clone());
        let mut changed = false;
        for name in &self.attrs {
            let Some(index) = find_attr(rules, entry, name) else { continue };
            let Some(attr) = entry.attrs.get_mut(index) else { continue };
            let mut kept: Vec<Vec<u8>> = Vec::with_capacity(attr.values.len());
            let mut touched = false;
            for value in std::mem::take(&mut attr.values) {
                let next = match self.rewrite(rules, &old, &value) {
                    None => Some(value),
                    Some(next) => {
                        touched = true;
                        next
                    }
                };
                if let Some(next) = next {
                    let key = value_key(rules, name, &next);
                    if !kept.iter().any(|v| value_key(rules, name, v) == key) {
                        kept.push(next);
                    }
                }
            }
            if touched {
                changed = true;
                // The placeholder goes only where a removal emptied the attribute (slapd's
                // refint_nothing); a member added later sits beside it, as in slapd.
                if kept.is_empty() {
                    if let Some(nothing) = &self.nothing {
                        kept.push(nothing.clone());
                    }
                }
            }
            attr.values = kept;
            if attr.values.is_empty() {
                entry.attrs.remove(index);
            }
        }
        changed
    }
}

/// Most entry ids one [`find`] returns; more is an error the caller reports (the intent
/// stays, and recovery retries).
pub const FIND_MAX: usize = 1 << 20;

/// Ids of the entries on this shard whose `attrs` (canonical names) hold `base_norm` (a
/// normalised DN) or, with `subtree`, any DN below it. May hold ids that don't match after
/// all (an escaped `,` in a value); [`RefRewrite::apply`] checks each on its entry.
pub fn find(
    snapshot: &dyn KvSnapshot,
    attrs: &[String],
    base_norm: &str,
    subtree: bool,
) -> ShardResult<Vec<EntryId>> {
    let mut out = Vec::new();
    for attr in attrs {
        if !subtree {
            snapshot.scan_prefix(&keys::eq_prefix(attr, base_norm.as_bytes()), &mut |k, _| {
                if let Some(id) = keys::trailing_id(k) {
                    out.push(id);
                }
                out.len() < FIND_MAX
            })?;
            continue;
        }
        let prefix = keys::eq_attr_prefix(attr);
        snapshot.scan_prefix(&prefix, &mut |k, _| {
            // prefix ‖ value ‖ 0 ‖ id (8 bytes)
            let value = k.len().checked_sub(9).and_then(|end| k.get(prefix.len()..end));
            if value.is_some_and(|v| names_below(v, base_norm.as_bytes())) {
                if let Some(id) = keys::trailing_id(k) {
                    out.push(id);
                }
            }
            out.len() < FIND_MAX
        })?;
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Whether the normalised DN `value` is `base` or ends with `,base` at an unescaped comma.
fn names_below(value: &[u8], base: &[u8]) -> bool {
    if value == base {
        return true;
    }
    let Some(head) = value.len().checked_sub(base.len() + 1) else { return false };
    if !value.ends_with(base) || value.get(head) != Some(&b',') {
        return false;
    }
    let backslashes = value.get(..head).unwrap_or_default().iter().rev().take_while(|&&b| b == b'\\').count();
    backslashes % 2 == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::entry::Attribute;
    use ferrodir_proto::schema::Schema;

    fn attribute(name: &str, values: &[&str]) -> Attribute {
        Attribute::new(name, values.iter().map(|v| v.as_bytes().to_vec()).collect())
    }

    fn rules() -> RuleTable {
        RuleTable::from_schema(&Schema::standard())
    }

    fn rw(old: &str, new: Option<&str>, subtree: bool, nothing: Option<&str>) -> RefRewrite {
        RefRewrite {
            attrs: vec!["member".into(), "seealso".into()],
            old: Dn::parse(old).unwrap(),
            new: new.map(|n| Dn::parse(n).unwrap()),
            subtree,
            nothing: nothing.map(|n| n.as_bytes().to_vec()),
        }
    }

    fn values(entry: &Entry, name: &str) -> Vec<String> {
        entry
            .get(name)
            .map(|a| a.values.iter().map(|v| String::from_utf8_lossy(v).into_owned()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn delete_removes_every_spelling_and_leaves_others() {
        let rules = rules();
        let mut e = Entry::new(vec![
            attribute("member", &["CN=A, DC=X", "cn=b,dc=x", "cn=a+sn=b,dc=x"]),
            attribute("seeAlso", &["cn=a,dc=x"]),
            attribute("description", &["cn=a,dc=x"]),
        ]);
        assert!(rw("cn=a,dc=x", None, false, None).apply(&rules, &mut e));
        assert_eq!(values(&e, "member"), vec!["cn=b,dc=x", "cn=a+sn=b,dc=x"]);
        assert!(e.get("seeAlso").is_none());
        assert_eq!(values(&e, "description"), vec!["cn=a,dc=x"], "not a refint attribute");
        assert!(!rw("cn=a,dc=x", None, false, None).apply(&rules, &mut e), "idempotent");
    }

    #[test]
    fn last_value_becomes_the_placeholder() {
        let rules = rules();
        let mut e = Entry::new(vec![attribute("member", &["cn=a,dc=x"])]);
        assert!(rw("cn=a,dc=x", None, false, Some("cn=nobody")).apply(&rules, &mut e));
        assert_eq!(values(&e, "member"), vec!["cn=nobody"]);
    }

    #[test]
    fn subtree_rename_rewrites_descendants_only_with_subtree() {
        let rules = rules();
        let start = || {
            Entry::new(vec![attribute(
                "member",
                &["cn=m+sn=n,ou=t,dc=x", "ou=t,dc=x", "ou=tt,dc=x", "cn=a\\,ou=t,dc=x"],
            )])
        };
        let mut e = start();
        assert!(rw("ou=t,dc=x", Some("ou=u,dc=x"), true, None).apply(&rules, &mut e));
        assert_eq!(
            values(&e, "member"),
            vec!["cn=m+sn=n,ou=u,dc=x", "ou=u,dc=x", "ou=tt,dc=x", "cn=a\\,ou=t,dc=x"]
        );
        let mut leaf = start();
        assert!(rw("ou=t,dc=x", Some("ou=u,dc=x"), false, None).apply(&rules, &mut leaf));
        assert_eq!(
            values(&leaf, "member"),
            vec!["cn=m+sn=n,ou=t,dc=x", "ou=u,dc=x", "ou=tt,dc=x", "cn=a\\,ou=t,dc=x"]
        );
    }

    #[test]
    fn rename_onto_a_value_already_there_keeps_one() {
        let rules = rules();
        let mut e = Entry::new(vec![attribute("member", &["cn=a,dc=x", "cn=b,dc=x"])]);
        assert!(rw("cn=a,dc=x", Some("cn=B,dc=x"), false, None).apply(&rules, &mut e));
        assert_eq!(values(&e, "member"), vec!["cn=B,dc=x"], "one value, whichever spelling");
    }

    #[test]
    fn names_below_respects_escaped_commas() {
        assert!(names_below(b"ou=t,dc=x", b"ou=t,dc=x"));
        assert!(names_below(b"cn=a,ou=t,dc=x", b"ou=t,dc=x"));
        assert!(names_below(b"cn=a\\\\,ou=t,dc=x", b"ou=t,dc=x"), "an escaped backslash, then a separator");
        assert!(!names_below(b"cn=a\\,ou=t,dc=x", b"ou=t,dc=x"));
        assert!(!names_below(b"cn=aou=t,dc=x", b"ou=t,dc=x"));
        assert!(!names_below(b"dc=x", b"ou=t,dc=x"));
    }
}
