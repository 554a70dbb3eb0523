//! Value normalisation, shared by DN normalisation, index keys and filter evaluation so that
//! all three agree on what "equal" means.
//!
//! Until the schema layer lands (matching rules per attribute type), every attribute uses
//! caseIgnoreMatch with RFC 4518 insignificant-space handling, except the few listed in
//! [`is_octet_attribute`], which compare as octet strings.

/// The version of these normalisation rules. Index keys and DN→ID records are built from
/// them, so a data directory records the version it was built with (its manifest), and a
/// server with other rules refuses to open it.
pub const NORMALIZATION_VERSION: u32 = 2;

/// How a DN's attribute-value assertions are normalised once a schema is known: the
/// attribute's canonical name and its value under the type's equality rule (RFC 4517
/// distinguishedNameMatch compares RDNs by each type's equality). Installed once at start.
pub type AvaNormalizer = dyn Fn(&str, &[u8]) -> Option<(String, Vec<u8>)> + Send + Sync;

static AVA_NORMALIZER: std::sync::OnceLock<Box<AvaNormalizer>> = std::sync::OnceLock::new();

/// Installs the schema-aware AVA normaliser; only the first call takes effect.
pub fn install_ava_normalizer(normalizer: Box<AvaNormalizer>) -> bool {
    AVA_NORMALIZER.set(normalizer).is_ok()
}

/// The normalised (attribute, value) of one AVA of a DN. `attr_lower` is the lowercased type
/// as written; without an installed normaliser (or for a type it doesn't know), the type
/// stays as written and the value uses [`normalize_value`].
pub fn normalize_ava(attr_lower: &str, value: &[u8]) -> (String, Vec<u8>) {
    if let Some(found) = AVA_NORMALIZER.get().and_then(|n| n(attr_lower, value)) {
        return found;
    }
    (attr_lower.to_string(), normalize_value(attr_lower, value))
}

/// Attributes compared byte for byte (octetStringMatch).
pub fn is_octet_attribute(attr_lower: &str) -> bool {
    matches!(attr_lower, "userpassword" | "jpegphoto" | "usercertificate" | "photo")
}

/// The normalised form of `value` under `attr_lower`'s equality rule.
///
/// caseIgnoreMatch (RFC 4518 §2): fold case, drop leading and trailing spaces, and collapse
/// inner runs of spaces to one.
pub fn normalize_value(attr_lower: &str, value: &[u8]) -> Vec<u8> {
    if is_octet_attribute(attr_lower) {
        return value.to_vec();
    }
    match std::str::from_utf8(value) {
        Ok(text) => fold_spaces_and_case(text).into_bytes(),
        // Not UTF-8: compare as octets rather than guessing an encoding.
        Err(_) => value.to_vec(),
    }
}

/// Case-folds and collapses insignificant spaces (RFC 4518 §2.6.1).
pub fn fold_spaces_and_case(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pending_space = false;
    for ch in text.trim_matches(' ').chars() {
        if ch == ' ' {
            pending_space = true;
            continue;
        }
        if pending_space {
            out.push(' ');
            pending_space = false;
        }
        for lower in ch.to_lowercase() {
            out.push(lower);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_ignore_folds_and_collapses() {
        assert_eq!(normalize_value("cn", b"  Babs   JENSEN "), b"babs jensen".to_vec());
    }

    #[test]
    fn octet_attributes_are_kept() {
        assert_eq!(normalize_value("userpassword", b" Secret "), b" Secret ".to_vec());
    }
}
