//! Value normalisation, shared by DN normalisation, index keys and filter evaluation so that
//! all three agree on what "equal" means.
//!
//! The [`AvaNormalizer`] trait is how a DN's values are normalised; the schema's
//! implementation (`schema::DnNormalizer`) applies each type's equality rule. Where no schema
//! is known ([`PlainAvas`], [`normalize_value`]), every attribute uses caseIgnoreMatch with
//! RFC 4518 insignificant-space handling, except the few listed in [`is_octet_attribute`],
//! which compare as octet strings.

/// The version of these normalisation rules. Index keys and DN→ID records are built from
/// them, so a data directory records the version it was built with (its manifest), and a
/// server with other rules refuses to open it.
pub const NORMALIZATION_VERSION: u32 = 2;

/// How a DN's attribute-value assertions are normalised: the attribute's canonical name and
/// its value under the type's equality rule (RFC 4517 distinguishedNameMatch compares RDNs by
/// each type's equality). There is no process-wide one: whoever parses or normalises a DN is
/// handed one, the schema's (`schema::DnNormalizer`, held by the shard's rule table) in the
/// server, [`PlainAvas`] where no schema is known, so two callers can't silently disagree
/// because one of them ran before a global was set.
pub trait AvaNormalizer: Send + Sync {
    /// The normalised (attribute, value) of one AVA. `attr_lower` is the type as written,
    /// lowercased and without an `oid.` prefix.
    fn normalize_ava(&self, attr_lower: &str, value: &[u8]) -> (String, Vec<u8>);

    /// Appends `type=value` as [`crate::dn::Ava::normalized`] writes it (the value escaped
    /// as RFC 4514 §2.4 asks) to `out`. What every DN a request names goes through, so a
    /// normaliser that can do it without the two owned parts of `normalize_ava` should.
    fn write_normalized_ava(&self, attr_lower: &str, value: &[u8], out: &mut String) {
        let (attr, value) = self.normalize_ava(attr_lower, value);
        out.push_str(&attr);
        out.push('=');
        crate::escape::push_escaped_value(out, &value);
    }
}

/// Normalisation without a schema: the type stays as written (lowercased) and the value
/// uses [`normalize_value`]. Also what a schema-aware normaliser does for a type it doesn't
/// know.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainAvas;

impl AvaNormalizer for PlainAvas {
    fn normalize_ava(&self, attr_lower: &str, value: &[u8]) -> (String, Vec<u8>) {
        (attr_lower.to_string(), normalize_value(attr_lower, value))
    }
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
