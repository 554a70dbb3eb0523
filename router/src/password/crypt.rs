//! `{CRYPT}` values (RFC 2307), in the crypt(3) formats of today's Linux systems:
//! sha256-crypt `$5$` and sha512-crypt `$6$` (with an optional `rounds=N`), bcrypt
//! `$2b$`/`$2a$`/`$2y$`, and yescrypt `$y$` (Debian's default since 11). Traditional DES
//! crypt and MD5-crypt `$1$` are not read, and never match; nor do locked accounts' values
//! (`*`, `!...`), which is what they mean.

use sha_crypt::{PasswordHashRef, PasswordVerifier as _, ShaCrypt};
use yescrypt::Yescrypt;

/// The most sha-crypt rounds a stored value may ask for (glibc's default is 5,000; it
/// allows up to 999,999,999).
pub const SHA_CRYPT_ROUNDS_MAX: u32 = 1_000_000;
/// The highest bcrypt cost a stored value may ask for: 2^14 rounds of the key schedule,
/// about a second of one core (common defaults are 10-12).
pub const BCRYPT_COST_MAX: u32 = 14;
/// The most memory a stored yescrypt value may ask for, in bytes (128 × N × r × p; 256 MiB,
/// as for argon2). Debian's default (`j9T`: N = 4096, r = 32) needs 16 MiB.
pub const YESCRYPT_MEMORY_BYTES_MAX: u64 = 256 << 20;
/// The most threads' worth of work (p) a stored yescrypt value may ask for.
const YESCRYPT_P_MAX: u32 = 8;

pub fn verify(encoded: &str, offered: &[u8]) -> bool {
    if encoded.starts_with("$5$") || encoded.starts_with("$6$") {
        return verify_sha_crypt(encoded, offered);
    }
    if ["$2b$", "$2a$", "$2y$"].iter().any(|prefix| encoded.starts_with(prefix)) {
        return verify_bcrypt(encoded, offered);
    }
    if encoded.starts_with("$y$") {
        return verify_yescrypt(encoded, offered);
    }
    false
}

fn verify_sha_crypt(encoded: &str, offered: &[u8]) -> bool {
    let rounds = encoded.split('$').nth(2).and_then(|field| field.strip_prefix("rounds="));
    if let Some(rounds) = rounds {
        let within = rounds.bytes().all(|b| b.is_ascii_digit())
            && rounds.parse::<u32>().is_ok_and(|r| r <= SHA_CRYPT_ROUNDS_MAX);
        if !within {
            return false;
        }
    }
    let Ok(hash) = PasswordHashRef::new(encoded) else { return false };
    ShaCrypt::default().verify_password(offered, hash).is_ok()
}

fn verify_bcrypt(encoded: &str, offered: &[u8]) -> bool {
    // `$2b$NN$`: two decimal digits of cost.
    let cost = encoded
        .get(4..6)
        .filter(|c| c.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|c| c.parse::<u32>().ok());
    if cost.is_none_or(|c| c > BCRYPT_COST_MAX) || encoded.get(6..7) != Some("$") {
        return false;
    }
    // bcrypt reads at most 72 bytes of a password; the crate truncates, as crypt(3) does.
    bcrypt::verify(offered, encoded).unwrap_or(false)
}

fn verify_yescrypt(encoded: &str, offered: &[u8]) -> bool {
    let Ok(hash) = yescrypt::PasswordHashRef::new(encoded) else { return false };
    let Some(field) = hash.fields().next() else { return false };
    let Ok(params) = field.as_str().parse::<yescrypt::Params>() else { return false };
    let memory = 128u64
        .saturating_mul(params.n())
        .saturating_mul(u64::from(params.r()))
        .saturating_mul(u64::from(params.p()));
    if memory > YESCRYPT_MEMORY_BYTES_MAX || params.p() > YESCRYPT_P_MAX {
        return false;
    }
    // The `t` parameter (extra passes) is not exposed by the crate: accept only values
    // without it (t = 0, what libxcrypt writes), i.e. params equal to their t = 0 form.
    let plain = [yescrypt::Mode::Classic, yescrypt::Mode::Worm, yescrypt::Mode::Rw].into_iter().any(|mode| {
        yescrypt::Params::new(mode, params.n(), params.r(), params.p()).is_ok_and(|p| p == params)
    });
    if !plain {
        return false;
    }
    yescrypt::PasswordVerifier::verify_password(&Yescrypt::default(), offered, hash).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::password::verify as verify_stored;

    /// `openssl passwd -6 -salt saltsalt secret`, `openssl passwd -5 -salt saltsalt secret`,
    /// and with rounds (Python's crypt.crypt, libxcrypt).
    const SHA_CRYPT_VECTORS: &[&str] = &[
        "$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1",
        "$5$saltsalt$0IyaXrmV7.sGNS6tirgqHLqX/G.FBvgkYA.lpPdS5sA",
    ];
    /// Python's crypt.crypt('secret', '$2b$05$abcdefghijklmnopqrstuu') (libxcrypt).
    const BCRYPT_VECTOR: &str = "$2b$05$abcdefghijklmnopqrstuuOQiyCxlgf/oeuTqixKmWdcYUh4Hjl0a";
    /// Python's crypt.crypt('secret', '$y$j9T$abcdefghijklmnop$') (libxcrypt, Debian 12).
    const YESCRYPT_VECTOR: &str = "$y$j9T$abcdefghijklmnop$3dL1LkYnZM.OVXuVdnnaKVDlLYT92dRwOzDZ5XiVCe.";

    #[test]
    fn system_crypt_vectors() {
        for vector in SHA_CRYPT_VECTORS.iter().chain([&BCRYPT_VECTOR, &YESCRYPT_VECTOR]) {
            let stored = format!("{{CRYPT}}{vector}");
            assert!(verify_stored(stored.as_bytes(), b"secret"), "{vector}");
            assert!(!verify_stored(stored.as_bytes(), b"secret!"), "{vector}");
        }
    }

    #[test]
    fn sha_crypt_rounds_over_the_cap_are_refused() {
        // Same salt and hash: the check must fail before computing anything.
        let over = format!("$6$rounds={}$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1", SHA_CRYPT_ROUNDS_MAX + 1);
        assert!(!verify(&over, b"secret"));
    }

    #[test]
    fn bcrypt_cost_over_the_cap_is_refused() {
        let over = BCRYPT_VECTOR.replacen("$05$", &format!("${}$", BCRYPT_COST_MAX + 1), 1);
        assert!(!verify(&over, b"secret"));
    }

    #[test]
    fn yescrypt_memory_over_the_cap_is_refused() {
        // The second character after `$y$` encodes log2(N): `J` instead of `9` asks for
        // N = 2^22 with r = 32, 16 GiB.
        let over = YESCRYPT_VECTOR.replacen("$j9T$", "$jJT$", 1);
        assert!(!verify(&over, b"secret"));
    }

    #[test]
    fn locked_and_unknown_crypt_values_never_match() {
        for bad in ["", "*", "!", "!$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1", "$1$saltsalt$abc", "saHW9GdxihkGQ", "$6$", "$2b$5$x", "$2b$ab$abcdefghijklmnopqrstuuOQiyCxlgf/oeuTqixKmWdcYUh4Hjl0a", "$y$j9T$", "$y$$$"] {
            assert!(!verify(bad, b"secret"), "{bad}");
            assert!(!verify(bad, bad.as_bytes()), "{bad}");
        }
    }
}
