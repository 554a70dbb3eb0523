//! `{ARGON2}` values in the PHC string format OpenLDAP's argon2 module reads and writes:
//! `{ARGON2}$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`, salt and hash in base64 without
//! padding. Checks accept argon2i, argon2d and argon2id, versions 0x10 and 0x13 (19), and
//! any parameters under the caps below; new values are argon2id with OWASP's minimum
//! (docs/DECISIONS.md, "Password storage").

use argon2::{Algorithm, Argon2, Params, Version};
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use subtle::ConstantTimeEq as _;

/// Memory of new hashes, in KiB (19 MiB): OWASP's minimum for argon2id with t=2, p=1.
pub const M_COST_KIB: u32 = 19_456;
/// Passes over the memory of new hashes.
pub const T_COST: u32 = 2;
/// Lanes of new hashes. One: each check runs on one pool thread.
pub const P_COST: u32 = 1;
/// Output of new hashes, in bytes.
const HASH_BYTES: usize = 32;

/// The most memory a stored value may ask a check for, in KiB (256 MiB). Each pool thread
/// runs one check at a time, so the pool never holds more than threads × this.
pub const M_COST_KIB_MAX: u32 = 256 * 1024;
/// The most passes a stored value may ask for.
pub const T_COST_MAX: u32 = 16;
/// The most lanes a stored value may ask for.
pub const P_COST_MAX: u32 = 8;
/// The longest salt and hash a stored value may hold, in bytes.
const SALT_BYTES_MAX: usize = 64;
const HASH_BYTES_MAX: usize = 128;
/// RFC 9106 §3.1: salts of at least 8 bytes; outputs of at least 4.
const SALT_BYTES_MIN: usize = 8;
const HASH_BYTES_MIN: usize = 4;

/// Base64 as PHC strings use it: the standard alphabet, written without padding; padding is
/// tolerated when reading.
const PHC_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A parsed `$argon2...` string.
struct Phc {
    algorithm: Algorithm,
    version: Version,
    m_cost_kib: u32,
    t_cost: u32,
    p_cost: u32,
    salt: Vec<u8>,
    hash: Vec<u8>,
}

pub fn verify(encoded: &str, offered: &[u8]) -> bool {
    let Some(phc) = parse(encoded) else { return false };
    let Ok(params) = Params::new(phc.m_cost_kib, phc.t_cost, phc.p_cost, Some(phc.hash.len())) else {
        return false;
    };
    let mut computed = vec![0u8; phc.hash.len()];
    if Argon2::new(phc.algorithm, phc.version, params)
        .hash_password_into(offered, &phc.salt, &mut computed)
        .is_err()
    {
        return false;
    }
    computed.ct_eq(&phc.hash).into()
}

/// `$argon2id$v=19$m=...,t=...,p=...$salt$hash`, within the caps; None otherwise.
fn parse(encoded: &str) -> Option<Phc> {
    let mut fields = encoded.strip_prefix('$')?.split('$');
    let algorithm = match fields.next()? {
        "argon2i" => Algorithm::Argon2i,
        "argon2d" => Algorithm::Argon2d,
        "argon2id" => Algorithm::Argon2id,
        _ => return None,
    };
    let mut field = fields.next()?;
    // Without `v=`, the string is from before version 0x13 (the PHC format's rule).
    let version = match field.strip_prefix("v=") {
        Some(number) => {
            field = fields.next()?;
            match number {
                "19" => Version::V0x13,
                "16" => Version::V0x10,
                _ => return None,
            }
        }
        None => Version::V0x10,
    };
    let (m_cost_kib, t_cost, p_cost) = parse_params(field)?;
    let salt = PHC_BASE64.decode(fields.next()?).ok()?;
    let hash = PHC_BASE64.decode(fields.next()?).ok()?;
    if fields.next().is_some() {
        return None;
    }
    let within_caps = m_cost_kib <= M_COST_KIB_MAX
        && (1..=T_COST_MAX).contains(&t_cost)
        && (1..=P_COST_MAX).contains(&p_cost)
        && (SALT_BYTES_MIN..=SALT_BYTES_MAX).contains(&salt.len())
        && (HASH_BYTES_MIN..=HASH_BYTES_MAX).contains(&hash.len());
    within_caps.then_some(Phc { algorithm, version, m_cost_kib, t_cost, p_cost, salt, hash })
}

/// `m=<KiB>,t=<passes>,p=<lanes>`, in that order (as libargon2 writes and requires).
fn parse_params(field: &str) -> Option<(u32, u32, u32)> {
    let mut parts = field.split(',');
    let mut next = |name: &str| -> Option<u32> {
        let value = parts.next()?.strip_prefix(name)?.strip_prefix('=')?;
        // Digits only: `u32::from_str` would also take a leading `+`.
        value.bytes().all(|b| b.is_ascii_digit()).then(|| value.parse().ok())?
    };
    let params = (next("m")?, next("t")?, next("p")?);
    parts.next().is_none().then_some(params)
}

/// The costs of new values (`password_argon2_m_kib`, `_t`, `_p`); OWASP's minimum by
/// default.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Cost {
    pub m_kib: u32,
    pub t: u32,
    pub p: u32,
}

impl Default for Cost {
    fn default() -> Self {
        Self { m_kib: M_COST_KIB, t: T_COST, p: P_COST }
    }
}

impl Cost {
    /// Err names what is out of range: within argon2's own bounds (m at least 8 KiB a lane)
    /// and the caps a check accepts, so that every value written can be checked.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=P_COST_MAX).contains(&self.p) {
            return Err(format!("password_argon2_p {} is out of range: 1-{P_COST_MAX}", self.p));
        }
        if !(1..=T_COST_MAX).contains(&self.t) {
            return Err(format!("password_argon2_t {} is out of range: 1-{T_COST_MAX}", self.t));
        }
        let least = 8 * self.p;
        if !(least..=M_COST_KIB_MAX).contains(&self.m_kib) {
            return Err(format!(
                "password_argon2_m_kib {} is out of range: {least}-{M_COST_KIB_MAX} (at least 8 KiB a lane)",
                self.m_kib
            ));
        }
        Ok(())
    }
}

/// A new `{ARGON2}` value with `cost`.
pub fn hash_with(password: &[u8], cost: Cost) -> String {
    let Cost { m_kib, t, p } = cost;
    let salt = super::random_salt();
    let mut output = [0u8; HASH_BYTES];
    let hashed = Params::new(m_kib, t, p, Some(HASH_BYTES)).and_then(|params| {
        Argon2::new(Algorithm::Argon2id, Version::V0x13, params).hash_password_into(
            password,
            &salt,
            &mut output,
        )
    });
    if hashed.is_err() {
        // The costs are checked with the config (`Cost::check`); should this still be
        // reached, the value stored never matches, which fails closed.
        return "{ARGON2}!".to_string();
    }
    format!(
        "{{ARGON2}}$argon2id$v=19$m={m_kib},t={t},p={p}${}${}",
        PHC_BASE64.encode(salt),
        PHC_BASE64.encode(output)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::password::verify as verify_stored;

    /// `slappasswd -o module-load=argon2 -h {ARGON2} -s secret` (Debian's slapd builds the
    /// module against libargon2, whose default is argon2i).
    const SLAPPASSWD_ARGON2I: &str =
        "{ARGON2}$argon2i$v=19$m=4096,t=3,p=1$qjpkhMs9TIRGP5742kfU3Q$XJ58LbSyvu4hkSayXkOG27qfMy3ynkfHIcmFw2IGteQ";

    #[test]
    fn slappasswd_vector() {
        assert!(verify_stored(SLAPPASSWD_ARGON2I.as_bytes(), b"secret"));
        assert!(!verify_stored(SLAPPASSWD_ARGON2I.as_bytes(), b"secret "));
    }

    #[test]
    fn argon2id_and_argon2d_with_other_parameters() {
        let salt = b"0123456789abcdef";
        for (algorithm, label) in [(Algorithm::Argon2id, "argon2id"), (Algorithm::Argon2d, "argon2d")] {
            let params = Params::new(1024, 1, 2, Some(24)).unwrap();
            let mut out = [0u8; 24];
            Argon2::new(algorithm, Version::V0x13, params).hash_password_into(b"pw", salt, &mut out).unwrap();
            let value = format!(
                "${label}$v=19$m=1024,t=1,p=2${}${}",
                PHC_BASE64.encode(salt),
                PHC_BASE64.encode(out)
            );
            assert!(verify(&value, b"pw"), "{value}");
            assert!(!verify(&value, b"pW"), "{value}");
        }
    }

    #[test]
    fn caps_are_refused() {
        let tail = "$c2FsdHNhbHRzYWx0$XJ58LbSyvu4hkSayXkOG27qfMy3ynkfHIcmFw2IGteQ";
        for params in [
            format!("m={},t=1,p=1", M_COST_KIB_MAX + 1),
            format!("m=4096,t={},p=1", T_COST_MAX + 1),
            format!("m=4096,t=1,p={}", P_COST_MAX + 1),
        ] {
            assert!(parse(&format!("$argon2id$v=19${params}{tail}")).is_none(), "{params}");
        }
        assert!(parse(&format!("$argon2id$v=19$m=4096,t=1,p=1{tail}")).is_some());
    }

    #[test]
    fn malformed_never_matches() {
        for bad in [
            "",
            "$argon2id",
            "$argon2x$v=19$m=4096,t=3,p=1$qjpkhMs9TIRGP5742kfU3Q$XJ58LbSyvu4hkSayXkOG27qfMy3ynkfHIcmFw2IGteQ",
            "$argon2i$v=18$m=4096,t=3,p=1$qjpkhMs9TIRGP5742kfU3Q$XJ58LbSyvu4hkSayXkOG27qfMy3ynkfHIcmFw2IGteQ",
            "$argon2i$v=19$t=3,m=4096,p=1$qjpkhMs9TIRGP5742kfU3Q$XJ58LbSyvu4hkSayXkOG27qfMy3ynkfHIcmFw2IGteQ",
            "$argon2i$v=19$m=+4096,t=3,p=1$qjpkhMs9TIRGP5742kfU3Q$XJ58LbSyvu4hkSayXkOG27qfMy3ynkfHIcmFw2IGteQ",
            "$argon2i$v=19$m=4096,t=3,p=1$qjpkhMs9TIRGP5742kfU3Q$XJ58LbSyvu4hkSayXkOG27qfMy3ynkfHIcmFw2IGteQ$",
            "$argon2i$v=19$m=4096,t=3,p=1$qjpk$XJ58LbSyvu4hkSayXkOG27qfMy3ynkfHIcmFw2IGteQ",
            "$argon2i$v=19$m=4096,t=3,p=1$qjpkhMs9TIRGP5742kfU3Q$!!",
            "$argon2i$v=19$m=4096,t=0,p=1$qjpkhMs9TIRGP5742kfU3Q$XJ58LbSyvu4hkSayXkOG27qfMy3ynkfHIcmFw2IGteQ",
        ] {
            assert!(!verify(bad, b"secret"), "{bad}");
        }
    }
}
