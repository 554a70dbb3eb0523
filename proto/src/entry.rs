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
}
