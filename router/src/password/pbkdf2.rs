//! PBKDF2 (RFC 8018 §5.2) values, in two layouts:
//! - OpenLDAP's pw-pbkdf2 module (contrib/slapd-modules/passwd/pbkdf2):
//!   `{PBKDF2-SHA512}<iterations>$<salt>$<derived key>`, salt and key in "adapted base64"
//!   (`.` for `+`, no padding). 389-ds writes the same layout in standard base64 with
//!   padding (`pwdhash -s PBKDF2-SHA512`); both are read. `{PBKDF2}` and `{PBKDF2-SHA1}` use
//!   HMAC-SHA1.
//! - 389-ds's own `{PBKDF2_SHA256}` (pbkdf2_pwd.c): standard base64 of a 4-byte big-endian
//!   iteration count, a 64-byte salt and a 256-byte HMAC-SHA256 key, 324 bytes in all
//!   (checked against `pwdhash -s PBKDF2_SHA256`).

use base64::engine::general_purpose::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use sha1::Sha1;
use sha2::{Sha256, Sha512};
use subtle::ConstantTimeEq as _;

/// Iterations of new `{PBKDF2-SHA512}` values: OWASP's 2023 figure for PBKDF2-HMAC-SHA512.
pub const SHA512_ITERATIONS: u32 = 210_000;
/// The most iterations a stored value may ask a check for. Above every default in use
/// (OWASP's 600,000 for HMAC-SHA256 included); about a second of one core for SHA-512.
pub const ITERATIONS_MAX: u32 = 1_000_000;
/// The longest salt and derived key a stored value may hold, in bytes (389-ds's key is 256).
const SALT_BYTES_MAX: usize = 256;
const KEY_BYTES_MAX: usize = 512;

/// 389-ds's `{PBKDF2_SHA256}` layout, in bytes.
const DS389_ITERATIONS_BYTES: usize = 4;
const DS389_SALT_BYTES: usize = 64;
const DS389_KEY_BYTES: usize = 256;

/// The derived key of new values, in bytes (SHA-512's output, as OpenLDAP writes).
const NEW_KEY_BYTES: usize = 64;

/// The HMAC a value's key was derived with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Prf {
    Sha1,
    Sha256,
    Sha512,
}

/// Base64 with the standard alphabet and no padding, tolerant of padding when reading: the
/// adapted form becomes this once its `.` are `+` again.
const UNPADDED: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

fn derive(prf: Prf, password: &[u8], salt: &[u8], iterations: u32, out: &mut [u8]) {
    match prf {
        Prf::Sha1 => pbkdf2::pbkdf2_hmac::<Sha1>(password, salt, iterations, out),
        Prf::Sha256 => pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, out),
        Prf::Sha512 => pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, out),
    }
}

fn check(prf: Prf, offered: &[u8], salt: &[u8], iterations: u32, key: &[u8]) -> bool {
    let within_caps = (1..=ITERATIONS_MAX).contains(&iterations)
        && (1..=SALT_BYTES_MAX).contains(&salt.len())
        && (1..=KEY_BYTES_MAX).contains(&key.len());
    if !within_caps {
        return false;
    }
    let mut computed = vec![0u8; key.len()];
    derive(prf, offered, salt, iterations, &mut computed);
    computed.ct_eq(key).into()
}

/// `<iterations>$<salt>$<key>` (OpenLDAP's or 389-ds's).
pub fn verify(prf: Prf, encoded: &str, offered: &[u8]) -> bool {
    let mut fields = encoded.split('$');
    let (Some(iterations), Some(salt), Some(key), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    if iterations.is_empty() || !iterations.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let (Ok(iterations), Some(salt), Some(key)) =
        (iterations.parse::<u32>(), adapted_b64(salt), adapted_b64(key))
    else {
        return false;
    };
    check(prf, offered, &salt, iterations, &key)
}

/// Adapted base64 (`.` for `+`, no padding), or standard base64.
fn adapted_b64(text: &str) -> Option<Vec<u8>> {
    UNPADDED.decode(text.replace('.', "+")).ok()
}

/// 389-ds's `{PBKDF2_SHA256}`.
pub fn verify_389ds(encoded: &str, offered: &[u8]) -> bool {
    let Ok(raw) = STANDARD.decode(encoded) else { return false };
    if raw.len() != DS389_ITERATIONS_BYTES + DS389_SALT_BYTES + DS389_KEY_BYTES {
        return false;
    }
    let (count, rest) = raw.split_at(DS389_ITERATIONS_BYTES);
    let (salt, key) = rest.split_at(DS389_SALT_BYTES);
    let Ok(count) = <[u8; DS389_ITERATIONS_BYTES]>::try_from(count) else { return false };
    check(Prf::Sha256, offered, salt, u32::from_be_bytes(count), key)
}

/// The fewest iterations `password_pbkdf2_rounds` may set (NIST SP 800-132's minimum).
pub const ITERATIONS_MIN: u32 = 1_000;

/// A new `{PBKDF2-SHA512}` value with `iterations` rounds.
pub fn hash_with(password: &[u8], iterations: u32) -> String {
    let salt = super::random_salt();
    let mut key = [0u8; NEW_KEY_BYTES];
    derive(Prf::Sha512, password, &salt, iterations, &mut key);
    let adapted = |bytes: &[u8]| UNPADDED.encode(bytes).replace('+', ".");
    format!("{{PBKDF2-SHA512}}{iterations}${}${}", adapted(&salt), adapted(&key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::password::verify as verify_stored;

    /// `pwdhash -s PBKDF2-SHA512 secret` and friends (389-ds-base 2.3): OpenLDAP's layout in
    /// standard base64.
    const PWDHASH_VECTORS: &[&str] = &[
        "{PBKDF2-SHA512}10000$Js7/75hBUqrIUf+/Q12u0ZG/eU6fbK3A$GuNm2lRaeAGwWXV9G6t1SpQ+iljOte7BNIunysZNj/od/WkH9p3YR+oTSwWq7P1/3DNevkocmxtZ8VkuoRD3gw==",
        "{PBKDF2-SHA256}10000$hAWa21ifTGWbyIYOEoJhYCPI/LU/UZf6$GsWs0zJBQMFjSLWSymv2VR9TyVvTRzDBBbGAfUG8KWQ=",
        "{PBKDF2-SHA1}10000$di+v0vD2exfNXFxCGYLhV146XvBGnWzH$6hy5/ISb6h7bT1MQaT27jbJouX0=",
        "{PBKDF2_SHA256}AAAgAGb4MMxnXZOhgjxOW+y+2QFmL58yCgd5Ru1MprAFqDNMbnZbAa8qyOr088ay02zkD/nrM0XvhU5Ngxcd17d2sR78CtvLv6s11f5G58h4f/cgKX+7DYPeKCQ//c7jf6hOr6sBrC391UG097Pa+o7ViFi25wHt40YM/Bx9C3CciG5Zjl2rchMjtg/vxdp0lJdDiYdSLO9+KUefJhPGnwGedTXV4mdHbjKRize5+pdfp6R9arWMAbNgA1+FLQ0afjJotuCHR1gegRc++ol36Nwa4wA0kQlmYlQMNLfmRj7rRkFfg6qxY6NHVZBT5FcE4linbQ9gFaRAIUpVwj0DCsJrhVdFRf2JfT8V6sUqm/lS04iB4zj1Yp4ecaqFoK2AivMLbttujn4Lp9s1sfFEiKLIrFCNC4B//TSvdsGuvsL6l4NT",
    ];

    #[test]
    fn pwdhash_vectors() {
        for vector in PWDHASH_VECTORS {
            assert!(verify_stored(vector.as_bytes(), b"secret"), "{vector}");
            assert!(!verify_stored(vector.as_bytes(), b"secret1"), "{vector}");
        }
    }

    /// The same SHA-1 value in OpenLDAP's adapted base64, as `{PBKDF2}`.
    #[test]
    fn openldap_adapted_base64() {
        let adapted = "{PBKDF2}10000$di.v0vD2exfNXFxCGYLhV146XvBGnWzH$6hy5/ISb6h7bT1MQaT27jbJouX0";
        assert!(verify_stored(adapted.as_bytes(), b"secret"));
    }

    /// A 389-ds value written here the way pbkdf2_pwd.c lays it out.
    #[test]
    fn ds389_layout_written_by_the_test() {
        let salt = [7u8; DS389_SALT_BYTES];
        let mut key = [0u8; DS389_KEY_BYTES];
        derive(Prf::Sha256, b"secret", &salt, 1000, &mut key);
        let mut raw = 1000u32.to_be_bytes().to_vec();
        raw.extend_from_slice(&salt);
        raw.extend_from_slice(&key);
        let value = format!("{{PBKDF2_SHA256}}{}", STANDARD.encode(&raw));
        assert!(verify_stored(value.as_bytes(), b"secret"));
        assert!(!verify_stored(value.as_bytes(), b"secreT"));
        raw.pop();
        assert!(!verify_389ds(&STANDARD.encode(&raw), b"secret"), "one byte short");
    }

    #[test]
    fn caps_are_refused() {
        let salt = b"salt";
        // Refused before any work: the key need not be right.
        let mut key = [0u8; 8];
        let over = format!("{}${}${}", ITERATIONS_MAX + 1, UNPADDED.encode(salt), UNPADDED.encode(key));
        assert!(!verify(Prf::Sha1, &over, b"pw"));
        derive(Prf::Sha1, b"pw", salt, 2, &mut key);
        let under = format!("2${}${}", UNPADDED.encode(salt), UNPADDED.encode(key));
        assert!(verify(Prf::Sha1, &under, b"pw"));
    }

    #[test]
    fn malformed_never_matches() {
        for bad in [
            "",
            "10000",
            "10000$abc",
            "0$c2FsdA$c2FsdA",
            "+5$c2FsdA$c2FsdA",
            "x$c2FsdA$c2FsdA",
            "5$$c2FsdA",
            "5$c2FsdA$!!",
            "5$a$b$c",
        ] {
            assert!(!verify(Prf::Sha512, bad, b"secret"), "{bad}");
        }
        assert!(!verify_389ds("AAAA", b"secret"));
    }
}
