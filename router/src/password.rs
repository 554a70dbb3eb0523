//! Checking a simple bind's password against a stored userPassword value: cleartext, or the
//! RFC 2307 schemes `{SSHA}` and `{SHA}` (salted and unsalted SHA-1, base64).

use base64::Engine as _;
use sha1::{Digest, Sha1};

/// Whether `offered` matches `stored`. Comparisons don't stop at the first differing byte.
pub fn verify(stored: &[u8], offered: &[u8]) -> bool {
    if let Some(encoded) = strip_scheme(stored, b"{SSHA}") {
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
            return false;
        };
        if raw.len() <= 20 {
            return false;
        }
        let (digest, salt) = raw.split_at(20);
        let mut hasher = Sha1::new();
        hasher.update(offered);
        hasher.update(salt);
        return constant_time_eq(&hasher.finalize(), digest);
    }
    if let Some(encoded) = strip_scheme(stored, b"{SHA}") {
        let Ok(digest) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
            return false;
        };
        return constant_time_eq(&Sha1::digest(offered), &digest);
    }
    if stored.first() == Some(&b'{') && stored.contains(&b'}') {
        // An unknown scheme never matches; treating it as cleartext would accept the hash.
        return false;
    }
    constant_time_eq(stored, offered)
}

/// `{SSHA}` of `password` with `salt`, for the example data and tests.
pub fn ssha(password: &[u8], salt: &[u8]) -> String {
    let mut hasher = Sha1::new();
    hasher.update(password);
    hasher.update(salt);
    let mut raw = hasher.finalize().to_vec();
    raw.extend_from_slice(salt);
    format!("{{SSHA}}{}", base64::engine::general_purpose::STANDARD.encode(raw))
}

fn strip_scheme<'a>(stored: &'a [u8], scheme: &[u8]) -> Option<&'a [u8]> {
    let (prefix, rest) = stored.split_at_checked(scheme.len())?;
    prefix.eq_ignore_ascii_case(scheme).then_some(rest)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        assert!(verify(b"secret", b"secret"));
        assert!(!verify(b"secret", b"Secret"));
        let hashed = ssha(b"secret", b"salt1234");
        assert!(verify(hashed.as_bytes(), b"secret"));
        assert!(!verify(hashed.as_bytes(), b"secreT"));
        assert!(verify(b"{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=", b"secret"));
        assert!(!verify(b"{CRYPT}abc", b"{CRYPT}abc"));
    }
}
