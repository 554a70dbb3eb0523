//! An entry's attributes as the server stores and returns them. Value order is kept exactly
//! as the client sent it (RFC 4511 §4.1.7 leaves it unordered; clients still notice reorders).

/// One attribute: its description as the client spelled it, and its values in order.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Attribute {
    pub name: String,
    pub values: Vec<Vec<u8>>,
}

impl Attribute {
    pub fn new(name: impl Into<String>, values: Vec<Vec<u8>>) -> Self {
        Self { name: name.into(), values }
    }

    /// The attribute type without options, lowercased: `cn;lang-en` gives `cn`.
    pub fn base_name_lower(&self) -> String {
        base_name_lower(&self.name)
    }
}

/// The attribute type of a description, without options, lowercased.
pub fn base_name_lower(description: &str) -> String {
    description.split(';').next().unwrap_or("").to_ascii_lowercase()
}

/// Whether `description`'s attribute type (options stripped) is `type_lower`, without
/// allocating: `base_name_eq("CN;lang-en", "cn")` is true.
pub fn base_name_eq(description: &str, type_lower: &str) -> bool {
    description.split(';').next().is_some_and(|base| base.eq_ignore_ascii_case(type_lower))
}

/// An entry's attribute list. The DN is kept by whoever owns the entry's position in the tree.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Entry {
    pub attrs: Vec<Attribute>,
}

impl Entry {
    pub fn new(attrs: Vec<Attribute>) -> Self {
        Self { attrs }
    }

    /// The attribute whose description equals `name`, ignoring case.
    pub fn get(&self, name: &str) -> Option<&Attribute> {
        self.attrs.iter().find(|a| a.name.eq_ignore_ascii_case(name))
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut Attribute> {
        self.attrs.iter_mut().find(|a| a.name.eq_ignore_ascii_case(name))
    }

    /// The first value of `name` as UTF-8, if present and valid.
    pub fn first_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|a| a.values.first()).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Whether the entry holds `objectClass: class` (case-insensitive).
    pub fn has_object_class(&self, class: &str) -> bool {
        self.get("objectclass")
            .is_some_and(|a| a.values.iter().any(|v| v.eq_ignore_ascii_case(class.as_bytes())))
    }

    /// Removes the attribute `name` entirely; returns whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.attrs.len();
        self.attrs.retain(|a| !a.name.eq_ignore_ascii_case(name));
        before != self.attrs.len()
    }

    /// Which attributes a change left exactly as they were: of `self` (the entry after the
    /// change) and of `old` (before it), a flag per attribute, set where the other entry
    /// holds an attribute with the same description, spelled the same, and the same values
    /// in the same order, each paired with at most one. A write checks and indexes only what
    /// is not flagged (`Kept`). A change keeps the order of the attributes it does not touch
    /// (a replaced one moves to the end), so the pairing walks both lists once, looking
    /// further only past a removed attribute.
    pub fn kept_from(&self, old: &Entry) -> Kept {
        let mut new_flags = vec![false; self.attrs.len()];
        let mut old_flags = vec![false; old.attrs.len()];
        let len = old.attrs.len();
        let mut cursor = 0;
        for (attr, new_flag) in self.attrs.iter().zip(new_flags.iter_mut()) {
            let found = (cursor..len)
                .chain(0..cursor.min(len))
                .find(|&j| old_flags.get(j) == Some(&false) && old.attrs.get(j) == Some(attr));
            if let Some(flag) = found.and_then(|j| old_flags.get_mut(j)) {
                *flag = true;
                *new_flag = true;
            }
            if let Some(j) = found {
                cursor = j + 1;
            }
        }
        Kept { new: new_flags, old: old_flags }
    }
}

/// [`Entry::kept_from`]'s answer: `new[i]` for the changed entry's attribute `i`, `old[j]`
/// for the earlier entry's attribute `j`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Kept {
    pub new: Vec<bool>,
    pub old: Vec<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(attrs: &[(&str, &[&str])]) -> Entry {
        Entry::new(
            attrs
                .iter()
                .map(|(name, values)| {
                    Attribute::new(*name, values.iter().map(|v| v.as_bytes().to_vec()).collect())
                })
                .collect(),
        )
    }

    /// A replace moves its attribute to the end and a removal shifts the rest: every
    /// attribute left alone is still paired, and only the changed ones are not.
    #[test]
    fn kept_pairs_the_attributes_a_change_left_alone() {
        let old =
            entry(&[("objectClass", &["top", "person"]), ("cn", &["a"]), ("sn", &["x"]), ("l", &["p"])]);
        let new =
            entry(&[("objectClass", &["top", "person"]), ("sn", &["x"]), ("l", &["q"]), ("cn", &["a"])]);
        let kept = new.kept_from(&old);
        assert_eq!(kept.new, [true, true, false, true]);
        assert_eq!(kept.old, [true, true, true, false]);
        // Same values under another spelling, another order of values, or a second
        // attribute equal to an already paired one: not kept.
        let old = entry(&[("cn", &["a", "b"]), ("sn", &["x"])]);
        let new = entry(&[("CN", &["a", "b"]), ("sn", &["x"]), ("sn", &["x"]), ("cn", &["b", "a"])]);
        let kept = new.kept_from(&old);
        assert_eq!(kept.new, [false, true, false, false]);
        assert_eq!(kept.old, [false, true]);
    }
}
