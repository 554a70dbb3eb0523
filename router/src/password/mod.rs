//! Passwords: checking a simple bind's password against stored userPassword values, and
//! hashing cleartext values before they are stored.
//!
//! # Layout
//! - this file: [`verify`] (which scheme a stored value uses, and the check), the schemes new
//!   values are stored with ([`StorageScheme`]), and [`PasswordConfig`].
//! - `sha.rs`: RFC 2307 `{SHA}`/`{SSHA}` and OpenLDAP pw-sha2's `{SHA256}`...`{SSHA512}`.
//! - `argon2.rs`: `{ARGON2}` in the PHC string format of OpenLDAP's argon2 module.
//! - `pbkdf2.rs`: `{PBKDF2-SHA512}`, `{PBKDF2-SHA256}`, `{PBKDF2}` (OpenLDAP's pw-pbkdf2 and
//!   389-ds) and 389-ds's own `{PBKDF2_SHA256}`.
//! - `crypt.rs`: `{CRYPT}` with sha-crypt (`$5$`, `$6$`), bcrypt (`$2b$`...) and yescrypt
//!   (`$y$`).
//! - `scram.rs`: `{SCRAM-SHA-256}` and `{SCRAM-SHA-512}`, the keys a SASL SCRAM bind checks
//!   (op::sasl::scram), and the SCRAM arithmetic itself.
//! - `pool.rs`: the threads every hash and check runs on, with their bounded queue.
//!
//! Every stored value's cost parameters are capped (the `*_MAX` constants of each file): a
//! value is chosen by whoever may write userPassword, and a check runs on every bind, so an
//! uncapped iteration count or memory size would let one entry stall or exhaust the server.
//! A value over a cap never matches, like a malformed one or an unknown scheme.

mod argon2;
mod crypt;
mod pbkdf2;
pub mod pool;
pub mod scram;
mod sha;

use std::sync::Arc;

use subtle::ConstantTimeEq as _;

pub use argon2::Cost as Argon2Cost;
pub use pool::{HashPool, PoolError};

/// Whether `offered` matches `stored`: a `{SCHEME}` value checked by its scheme, anything
/// else compared as cleartext. Schemes are named case-insensitively, as slapd does. An
/// unknown scheme never matches: treating it as cleartext would accept the hash itself as
/// the password. Comparisons don't stop at the first differing byte.
pub fn verify(stored: &[u8], offered: &[u8]) -> bool {
    let Some((scheme, encoded)) = split_scheme(stored) else {
        return stored.ct_eq(offered).into();
    };
    let Ok(scheme) = std::str::from_utf8(scheme) else { return false };
    let Ok(encoded) = std::str::from_utf8(encoded) else { return false };
    match scheme.to_ascii_uppercase().as_str() {
        "ARGON2" => argon2::verify(encoded, offered),
        "PBKDF2" | "PBKDF2-SHA1" => pbkdf2::verify(pbkdf2::Prf::Sha1, encoded, offered),
        "PBKDF2-SHA256" => pbkdf2::verify(pbkdf2::Prf::Sha256, encoded, offered),
        "PBKDF2-SHA512" => pbkdf2::verify(pbkdf2::Prf::Sha512, encoded, offered),
        "PBKDF2_SHA256" => pbkdf2::verify_389ds(encoded, offered),
        "CRYPT" => crypt::verify(encoded, offered),
        "SCRAM-SHA-256" => scram::verify(scram::Hash::Sha256, encoded, offered),
        "SCRAM-SHA-512" => scram::verify(scram::Hash::Sha512, encoded, offered),
        other => match sha::Kind::named(other) {
            Some(kind) => sha::verify(kind, encoded, offered),
            None => false,
        },
    }
}

/// Whether `value` is already in a scheme [`verify`] knows, so that hash-on-write stores it
/// as given. A value that merely looks like `{SOMETHING}...` is cleartext (slapd's
/// `hash_cleartext` also hashes what no scheme of its own claims).
pub fn is_hashed(value: &[u8]) -> bool {
    let Some((scheme, _)) = split_scheme(value) else { return false };
    let Ok(scheme) = std::str::from_utf8(scheme) else { return false };
    let upper = scheme.to_ascii_uppercase();
    KNOWN_SCHEMES.contains(&upper.as_str()) || sha::Kind::named(&upper).is_some()
}

/// The schemes [`verify`] checks, besides the SHA family of `sha.rs`.
const KNOWN_SCHEMES: &[&str] = &[
    "ARGON2",
    "PBKDF2",
    "PBKDF2-SHA1",
    "PBKDF2-SHA256",
    "PBKDF2-SHA512",
    "PBKDF2_SHA256",
    "CRYPT",
    "SCRAM-SHA-256",
    "SCRAM-SHA-512",
];

/// Whether a stored value is cleartext: what [`verify`] compares as it is, with no
/// `{SCHEME}` prefix. A SCRAM bind can derive the keys of such a value only.
pub fn is_cleartext(value: &[u8]) -> bool {
    split_scheme(value).is_none()
}

/// A stored value's SCRAM keys, when it is `{SCRAM-SHA-...}` of `hash`.
pub fn scram_keys(value: &[u8], hash: scram::Hash) -> Option<scram::Keys> {
    let (name, encoded) = split_scheme(value)?;
    if !name.eq_ignore_ascii_case(hash.name().as_bytes()) {
        return None;
    }
    scram::Keys::parse(hash, std::str::from_utf8(encoded).ok()?)
}

/// The longest scheme name looked for between the braces.
const SCHEME_NAME_BYTES_MAX: usize = 32;

/// `{NAME}rest` → (`NAME`, `rest`).
fn split_scheme(stored: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = stored.strip_prefix(b"{")?;
    let close = rest.iter().take(SCHEME_NAME_BYTES_MAX + 1).position(|&b| b == b'}')?;
    let (name, after) = rest.split_at(close);
    Some((name, after.get(1..)?))
}

/// `{SSHA}` of `password` with `salt`, for tests.
#[cfg(test)]
pub fn ssha(password: &[u8], salt: &[u8]) -> String {
    sha::salted(sha::Kind::Ssha, password, salt)
}

/// How new cleartext values are hashed (`password_scheme`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageScheme {
    /// argon2id with these costs ([`argon2::Cost`]; OWASP's minimum by default).
    Argon2(argon2::Cost),
    /// PBKDF2-HMAC-SHA512 with this many iterations ([`pbkdf2::SHA512_ITERATIONS`] by
    /// default), OpenLDAP's format.
    Pbkdf2Sha512(u32),
    /// Salted SHA-512: fast, for compatibility with servers that know nothing better.
    Ssha512,
    /// SCRAM keys (RFC 5802) with SHA-256 / SHA-512, 4096 iterations: what SASL SCRAM binds
    /// check without the password; simple binds check them too.
    ScramSha256,
    ScramSha512,
}

/// A `password_scheme` this server cannot store with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown password_scheme {0:?}: use \"{{ARGON2}}\", \"{{PBKDF2-SHA512}}\", \"{{SSHA512}}\", \"{{SCRAM-SHA-256}}\" or \"{{SCRAM-SHA-512}}\""
)]
pub struct UnknownScheme(pub String);

impl StorageScheme {
    pub fn parse(name: &str) -> Result<Self, UnknownScheme> {
        match name.to_ascii_uppercase().as_str() {
            "{ARGON2}" => Ok(Self::Argon2(argon2::Cost::default())),
            "{PBKDF2-SHA512}" => Ok(Self::Pbkdf2Sha512(pbkdf2::SHA512_ITERATIONS)),
            "{SSHA512}" => Ok(Self::Ssha512),
            "{SCRAM-SHA-256}" => Ok(Self::ScramSha256),
            "{SCRAM-SHA-512}" => Ok(Self::ScramSha512),
            _ => Err(UnknownScheme(name.to_string())),
        }
    }

    /// The scheme's name between braces, as its values start.
    pub fn name(self) -> &'static str {
        match self {
            Self::Argon2(_) => "ARGON2",
            Self::Pbkdf2Sha512(_) => "PBKDF2-SHA512",
            Self::Ssha512 => "SSHA512",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The scheme with the costs the config sets (`password_argon2_*`,
    /// `password_pbkdf2_rounds`); Err names a cost out of range.
    pub fn with_costs(self, argon2: argon2::Cost, pbkdf2_rounds: u32) -> Result<Self, String> {
        argon2.check()?;
        if !(pbkdf2::ITERATIONS_MIN..=pbkdf2::ITERATIONS_MAX).contains(&pbkdf2_rounds) {
            return Err(format!(
                "password_pbkdf2_rounds {pbkdf2_rounds} is out of range: {}-{}",
                pbkdf2::ITERATIONS_MIN,
                pbkdf2::ITERATIONS_MAX
            ));
        }
        Ok(match self {
            Self::Argon2(_) => Self::Argon2(argon2),
            Self::Pbkdf2Sha512(_) => Self::Pbkdf2Sha512(pbkdf2_rounds),
            other => other,
        })
    }

    /// Whether `stored` is a value in this scheme (its name compared without case).
    pub fn holds(self, stored: &[u8]) -> bool {
        split_scheme(stored).is_some_and(|(name, _)| name.eq_ignore_ascii_case(self.name().as_bytes()))
    }

    /// `password` hashed with a fresh random salt, `{SCHEME}` prefix included.
    pub fn hash(self, password: &[u8]) -> String {
        match self {
            Self::Argon2(cost) => argon2::hash_with(password, cost),
            Self::Pbkdf2Sha512(iterations) => pbkdf2::hash_with(password, iterations),
            Self::Ssha512 => sha::salted(sha::Kind::Ssha512, password, &random_salt()),
            Self::ScramSha256 => scram::hash(scram::Hash::Sha256, password),
            Self::ScramSha512 => scram::hash(scram::Hash::Sha512, password),
        }
    }
}

/// Salt for new hashes: 16 bytes (128 bits), what OWASP and RFC 9106 ask for.
fn random_salt() -> [u8; 16] {
    use rand::RngCore as _;
    let mut salt = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut salt);
    salt
}

/// How the router stores and checks passwords, built by `server` from its config.
#[derive(Clone, Debug)]
pub struct PasswordConfig {
    /// `password_hash_on_write`: cleartext userPassword values written by Add, Modify and
    /// Password Modify are stored hashed with `scheme`.
    pub hash_on_write: bool,
    pub scheme: StorageScheme,
    /// Where hashes and checks run: never on a worker thread.
    pub pool: Arc<HashPool>,
    /// A hash with `scheme` of a random password nobody knows. A bind with nothing to check
    /// against (unknown DN, entry without userPassword) checks against it, so that its
    /// answer takes as long as a wrong password's.
    pub dummy_hash: Arc<[u8]>,
    /// `password_upgrade_on_bind`: a successful bind whose matching value is not in
    /// `scheme` stores the password again in `scheme` (389-ds's upgrade on bind).
    pub upgrade_on_bind: bool,
    /// How long failure bookkeeping writes (pwdFailureTime, under a policy) took lately, in
    /// microseconds (a moving average; 0: none yet): what a failed bind that writes nothing
    /// waits (op::credentials). One for the whole server, kept across reloads: a worker
    /// that never wrote one must wait as long. Written by failures under a policy only,
    /// each of which waits for a sync anyway.
    pub failure_write_us: Arc<std::sync::atomic::AtomicU64>,
}

impl PasswordConfig {
    pub fn new(hash_on_write: bool, scheme: StorageScheme, pool: Arc<HashPool>) -> Self {
        let unknowable = random_salt();
        let dummy_hash: Arc<[u8]> = scheme.hash(&unknowable).into_bytes().into();
        Self {
            hash_on_write,
            scheme,
            pool,
            dummy_hash,
            upgrade_on_bind: true,
            failure_write_us: Arc::default(),
        }
    }

    /// With `password_upgrade_on_bind` set as given.
    pub fn with_upgrade_on_bind(mut self, upgrade: bool) -> Self {
        self.upgrade_on_bind = upgrade;
        self
    }

    /// Whether one of `stored` matches `offered`, checked on the pool.
    pub async fn check(&self, stored: Vec<Vec<u8>>, offered: Vec<u8>) -> Result<bool, PoolError> {
        Ok(self.matching(stored, offered).await?.is_some())
    }

    /// Which of `stored` matches `offered` (None: none), checked on the pool. A failure
    /// costs at least what a value in the configured scheme costs: when no stored value is
    /// in it (no value at all, cleartext, a cheaper scheme such as `{SSHA}`), the dummy hash
    /// is checked too. So a wrong password takes as long whether the DN exists, has a
    /// password, or holds any scheme, and timing tells nobody which accounts exist or which
    /// are stored cheaply.
    pub async fn matching(&self, stored: Vec<Vec<u8>>, offered: Vec<u8>) -> Result<Option<usize>, PoolError> {
        let dummy = self.dummy_hash.clone();
        let scheme = self.scheme;
        self.pool
            .run(move || {
                let matched = stored.iter().position(|value| verify(value, &offered));
                if matched.is_none() && !stored.iter().any(|value| scheme.holds(value)) {
                    let _ = verify(&dummy, &offered);
                }
                matched
            })
            .await
    }

    /// Whether a bind that matched `stored` should store its password again in the
    /// configured scheme.
    pub fn upgrades(&self, stored: &[u8]) -> bool {
        self.upgrade_on_bind && self.hash_on_write && !self.scheme.holds(stored)
    }

    /// `password` hashed in the configured scheme, on the pool.
    pub async fn hash(&self, password: Vec<u8>) -> Result<Vec<u8>, PoolError> {
        let scheme = self.scheme;
        self.pool.run(move || scheme.hash(&password).into_bytes()).await
    }

    /// `values` as they are to be stored: each cleartext one hashed with the configured
    /// scheme (on the pool), already-hashed ones as given. Unchanged when hash-on-write is
    /// off, or when no value needs hashing (then the pool is not asked).
    pub async fn for_storage(&self, values: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, PoolError> {
        if !self.hash_on_write || values.iter().all(|v| is_hashed(v)) {
            return Ok(values);
        }
        let scheme = self.scheme;
        self.pool
            .run(move || {
                values
                    .into_iter()
                    .map(|v| if is_hashed(&v) { v } else { scheme.hash(&v).into_bytes() })
                    .collect()
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleartext_and_unknown_schemes() {
        assert!(verify(b"secret", b"secret"));
        assert!(!verify(b"secret", b"Secret"));
        assert!(!verify(b"secret", b"secret2"));
        assert!(!verify(b"{CRYPT}abc", b"{CRYPT}abc"));
        assert!(!verify(b"{NOSUCH}secret", b"secret"));
        assert!(!verify(b"{NOSUCH}secret", b"{NOSUCH}secret"));
        // No closing brace within reach: cleartext.
        assert!(verify(b"{secret", b"{secret"));
    }

    #[test]
    fn scheme_names_are_case_insensitive() {
        let hashed = ssha(b"secret", b"salt1234");
        let lower = hashed.replacen("{SSHA}", "{ssha}", 1);
        assert!(verify(lower.as_bytes(), b"secret"));
    }

    #[test]
    fn storage_schemes_round_trip() {
        for name in
            ["{ARGON2}", "{PBKDF2-SHA512}", "{SSHA512}", "{argon2}", "{SCRAM-SHA-256}", "{scram-sha-512}"]
        {
            let scheme = StorageScheme::parse(name).unwrap();
            let hashed = scheme.hash(b"secret");
            assert!(hashed.to_ascii_uppercase().starts_with(&name.to_ascii_uppercase()), "{hashed}");
            assert!(is_hashed(hashed.as_bytes()));
            assert!(verify(hashed.as_bytes(), b"secret"), "{hashed}");
            assert!(!verify(hashed.as_bytes(), b"secreT"), "{hashed}");
            assert_ne!(scheme.hash(b"secret"), hashed, "a fresh salt each time");
        }
        let error = StorageScheme::parse("{MD5}").unwrap_err().to_string();
        assert!(error.contains("{MD5}") && error.contains("{ARGON2}"), "{error}");
    }

    #[test]
    fn the_default_hash_is_openldaps_argon2id_format() {
        let hashed = StorageScheme::parse("{ARGON2}").unwrap().hash(b"secret");
        assert!(hashed.starts_with("{ARGON2}$argon2id$v=19$m=19456,t=2,p=1$"), "{hashed}");
    }

    #[test]
    fn costs_are_settable_within_what_a_check_accepts() {
        let cost = argon2::Cost { m_kib: 8192, t: 1, p: 1 };
        let scheme = StorageScheme::parse("{ARGON2}").unwrap().with_costs(cost, 50_000).unwrap();
        let hashed = scheme.hash(b"secret");
        assert!(hashed.starts_with("{ARGON2}$argon2id$v=19$m=8192,t=1,p=1$"), "{hashed}");
        assert!(verify(hashed.as_bytes(), b"secret"));
        let pbkdf2 = StorageScheme::parse("{PBKDF2-SHA512}").unwrap().with_costs(cost, 50_000).unwrap();
        let hashed = pbkdf2.hash(b"secret");
        assert!(hashed.starts_with("{PBKDF2-SHA512}50000$"), "{hashed}");
        assert!(verify(hashed.as_bytes(), b"secret"));
        let ssha = StorageScheme::parse("{SSHA512}").unwrap();
        assert_eq!(ssha.with_costs(cost, 50_000).unwrap(), ssha);
        for (bad, rounds) in [
            (argon2::Cost { m_kib: 7, t: 1, p: 1 }, 50_000),
            (argon2::Cost { m_kib: 8192, t: 0, p: 1 }, 50_000),
            (argon2::Cost { m_kib: 8192, t: 1, p: 9 }, 50_000),
            (argon2::Cost { m_kib: 300 * 1024, t: 1, p: 1 }, 50_000),
            (argon2::Cost::default(), 999),
            (argon2::Cost::default(), 2_000_000),
        ] {
            assert!(scheme.with_costs(bad, rounds).is_err(), "{bad:?} {rounds}");
        }
    }

    #[test]
    fn what_counts_as_hashed() {
        assert!(is_hashed(b"{SSHA}abc"));
        assert!(is_hashed(b"{crypt}$6$x$y"));
        assert!(is_hashed(b"{PBKDF2_SHA256}AAAA"));
        assert!(!is_hashed(b"secret"));
        assert!(!is_hashed(b"{my password}"));
        assert!(!is_hashed(b"{MD5}abc"));
    }
}
