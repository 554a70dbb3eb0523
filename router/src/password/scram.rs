//! SCRAM keys (RFC 5802 §3) and the `{SCRAM-SHA-256}` / `{SCRAM-SHA-512}` userPassword
//! schemes that store them, so that a SCRAM bind never needs the password itself.
//!
//! Stored form (what Dovecot's passdb and GNU SASL's `--mkpasswd` write; no OpenLDAP or
//! 389-ds release has a SCRAM userPassword scheme to copy):
//! `{SCRAM-SHA-256}<iterations>,<salt>,<StoredKey>,<ServerKey>`, standard base64 with
//! padding. Also read: RFC 5803's authPassword layout under the same prefix,
//! `<iterations>:<salt>$<StoredKey>:<ServerKey>`, and `<iterations>$<salt>$<StoredKey>:
//! <ServerKey>`. New values: 16 random salt bytes and 4096 iterations (RFC 7677's minimum,
//! and what Cyrus SASL and Dovecot use).
//!
//! The password is used as the bytes given, without SASLprep, as Cyrus SASL does: for ASCII
//! passwords the two are the same.
//!
//! A simple bind against a stored value derives the keys from the offered password with
//! the value's salt and iterations and compares both keys.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq as _;

/// Iterations of new values.
pub const ITERATIONS: u32 = 4096;
/// The most iterations a stored value may ask a check for (as `pbkdf2.rs`).
pub const ITERATIONS_MAX: u32 = super::pbkdf2::ITERATIONS_MAX;
/// The longest salt a stored value may hold, in bytes.
const SALT_BYTES_MAX: usize = 256;

/// The hash function of a SCRAM mechanism (RFC 7677: SHA-256; SHA-512 as registered by
/// draft-melnikov-scram-sha-512).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    /// The scheme's name (and the SASL mechanism's, less `-PLUS`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "SCRAM-SHA-256",
            Self::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The hash's output length, in bytes: the length of every key.
    pub fn len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha512 => 64,
        }
    }

    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha256 => Sha256::digest(data).to_vec(),
            Self::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC accepts keys of any length: new_from_slice cannot fail.
        match self {
            Self::Sha256 => match <Hmac<Sha256> as KeyInit>::new_from_slice(key) {
                Ok(mut mac) => {
                    mac.update(data);
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            },
            Self::Sha512 => match <Hmac<Sha512> as KeyInit>::new_from_slice(key) {
                Ok(mut mac) => {
                    mac.update(data);
                    mac.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            },
        }
    }

    /// Hi() of RFC 5802 §2.2: PBKDF2 with this HMAC, one block.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.len()];
        match self {
            Self::Sha256 => pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out),
            Self::Sha512 => pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out),
        }
        out
    }
}

/// What a server keeps of a password for SCRAM (RFC 5802 §3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    pub hash: Hash,
    pub iterations: u32,
    pub salt: Vec<u8>,
    /// H(ClientKey): checks the client's proof.
    pub stored_key: Vec<u8>,
    /// Signs the server's answer, proving it knew the keys too.
    pub server_key: Vec<u8>,
}

impl Keys {
    /// The keys of `password` with `salt` and `iterations`.
    pub fn derive(hash: Hash, password: &[u8], salt: &[u8], iterations: u32) -> Self {
        let salted = hash.salted_password(password, salt, iterations);
        let client_key = hash.hmac(&salted, b"Client Key");
        Self {
            hash,
            iterations,
            salt: salt.to_vec(),
            stored_key: hash.digest(&client_key),
            server_key: hash.hmac(&salted, b"Server Key"),
        }
    }

    /// A stored value's keys (`encoded`: what follows `{SCRAM-SHA-...}`); None when
    /// malformed, over the caps, or with keys of the wrong length.
    pub fn parse(hash: Hash, encoded: &str) -> Option<Self> {
        let (iterations, salt, stored, server) = split_fields(encoded)?;
        if iterations.is_empty() || !iterations.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let iterations: u32 = iterations.parse().ok()?;
        let salt = STANDARD.decode(salt).ok()?;
        let stored_key = STANDARD.decode(stored).ok()?;
        let server_key = STANDARD.decode(server).ok()?;
        let fits = (1..=ITERATIONS_MAX).contains(&iterations)
            && (1..=SALT_BYTES_MAX).contains(&salt.len())
            && stored_key.len() == hash.len()
            && server_key.len() == hash.len();
        fits.then_some(Self { hash, iterations, salt, stored_key, server_key })
    }

    /// The value to store, `{SCRAM-SHA-...}` prefix included.
    pub fn encode(&self) -> String {
        format!(
            "{{{}}}{},{},{},{}",
            self.hash.name(),
            self.iterations,
            STANDARD.encode(&self.salt),
            STANDARD.encode(&self.stored_key),
            STANDARD.encode(&self.server_key)
        )
    }

    /// Whether `password` has these keys (both compared, in constant time).
    fn matches(&self, password: &[u8]) -> bool {
        let offered = Self::derive(self.hash, password, &self.salt, self.iterations);
        let stored = offered.stored_key.ct_eq(&self.stored_key);
        let server = offered.server_key.ct_eq(&self.server_key);
        (stored & server).into()
    }
}

/// `i,salt,stored,server`, `i:salt$stored:server` or `i$salt$stored:server`.
fn split_fields(encoded: &str) -> Option<(&str, &str, &str, &str)> {
    let mut commas = encoded.split(',');
    if let (Some(i), Some(salt), Some(stored), Some(server), None) =
        (commas.next(), commas.next(), commas.next(), commas.next(), commas.next())
    {
        return Some((i, salt, stored, server));
    }
    let (info, value) = encoded.split_once('$')?;
    let (i, salt, value) = match info.split_once(':') {
        Some((i, salt)) => (i, salt, value),
        None => {
            let (salt, value) = value.split_once('$')?;
            (info, salt, value)
        }
    };
    let (stored, server) = value.split_once(':')?;
    Some((i, salt, stored, server))
}

/// A new stored value for `password`: fresh salt, [`ITERATIONS`].
pub fn hash(hash: Hash, password: &[u8]) -> String {
    Keys::derive(hash, password, &super::random_salt(), ITERATIONS).encode()
}

/// Whether `offered` is the password of the stored value `encoded`.
pub fn verify(hash: Hash, encoded: &str, offered: &[u8]) -> bool {
    Keys::parse(hash, encoded).is_some_and(|keys| keys.matches(offered))
}

/// The XOR of two equal-length byte strings (ClientKey = ClientProof XOR ClientSignature).
pub fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// Which stored value a SCRAM exchange took its salt and iterations from, chosen when the
/// client-first message arrived and found again when the proof does (the entry may have
/// changed in between: then nothing matches). Named by a digest, so that a cleartext value
/// is not kept on the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chosen {
    /// A `{SCRAM-SHA-...}` value of the mechanism's hash.
    Keys { digest: [u8; 32] },
    /// A cleartext value: its keys are derived with `salt` and `iterations`, as Cyrus SASL
    /// does for a cleartext userPassword.
    Cleartext { digest: [u8; 32], salt: Vec<u8>, iterations: u32 },
    /// Nothing usable (no such entry, no value, only other schemes): the exchange goes on
    /// with a made-up salt and fails at the proof, so that it tells nobody why.
    Nothing,
}

/// The digest that names a stored value in [`Chosen`].
pub fn value_digest(value: &[u8]) -> [u8; 32] {
    Sha256::digest(value).into()
}

impl Chosen {
    /// The keys of the chosen value among `stored`, and its index.
    fn keys(&self, hash: Hash, stored: &[Vec<u8>]) -> Option<(usize, Keys)> {
        let digest = match self {
            Chosen::Nothing => return None,
            Chosen::Keys { digest } | Chosen::Cleartext { digest, .. } => digest,
        };
        let found = stored.iter().position(|value| value_digest(value) == *digest)?;
        let value = stored.get(found)?;
        let keys = match self {
            Chosen::Cleartext { salt, iterations, .. } => {
                super::is_cleartext(value).then(|| Keys::derive(hash, value, salt, *iterations))?
            }
            _ => super::scram_keys(value, hash)?,
        };
        Some((found, keys))
    }
}

/// A client-final message's proof, to be checked against the stored values.
pub struct Proof {
    pub hash: Hash,
    pub chosen: Chosen,
    /// RFC 5802 §3's AuthMessage.
    pub auth_message: Vec<u8>,
    pub client_proof: Vec<u8>,
    /// Set by a successful check: the ServerSignature the server-final message carries.
    pub server_signature: std::cell::RefCell<Option<Vec<u8>>>,
}

impl Proof {
    /// Which of `stored` the proof is good for (None: none), checked on the pool; on
    /// success [`Proof::server_signature`] is set.
    pub async fn matching(
        &self,
        pool: &super::HashPool,
        stored: Vec<Vec<u8>>,
    ) -> Result<Option<usize>, super::PoolError> {
        let (hash, chosen) = (self.hash, self.chosen.clone());
        let (auth_message, client_proof) = (self.auth_message.clone(), self.client_proof.clone());
        let checked = pool
            .run(move || {
                let (index, keys) = chosen.keys(hash, &stored)?;
                check_proof(&keys, &auth_message, &client_proof).map(|signature| (index, signature))
            })
            .await?;
        Ok(checked.map(|(index, signature)| {
            *self.server_signature.borrow_mut() = Some(signature);
            index
        }))
    }
}

/// RFC 5802 §3: whether `client_proof` proves knowledge of the ClientKey behind `keys`;
/// then the ServerSignature.
pub fn check_proof(keys: &Keys, auth_message: &[u8], client_proof: &[u8]) -> Option<Vec<u8>> {
    let hash = keys.hash;
    if client_proof.len() != hash.len() {
        return None;
    }
    let client_signature = hash.hmac(&keys.stored_key, auth_message);
    let client_key = xor(client_proof, &client_signature);
    let good: bool = hash.digest(&client_key).ct_eq(&keys.stored_key).into();
    good.then(|| hash.hmac(&keys.server_key, auth_message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::password::verify as verify_stored;

    /// RFC 7677 §3's password and salt, as GNU SASL's `--mkpasswd` writes them (its test
    /// suite, tests/scram-mkpasswd): the keys computed here must be those.
    const RFC7677: &str = "{SCRAM-SHA-256}4096,W22ZaJ0SNY7soEsUEjb6gQ==,WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=";

    #[test]
    fn the_rfc_7677_keys() {
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let keys = Keys::derive(Hash::Sha256, b"pencil", &salt, 4096);
        assert_eq!(keys.encode(), RFC7677);
        assert!(verify_stored(RFC7677.as_bytes(), b"pencil"));
        assert!(!verify_stored(RFC7677.as_bytes(), b"pencil2"));
        assert!(crate::password::is_hashed(RFC7677.as_bytes()));
    }

    /// RFC 7677 §3's whole exchange: the client's proof checks, and the server's signature
    /// is the one the RFC shows.
    #[test]
    fn the_rfc_7677_exchange() {
        let keys = Keys::parse(Hash::Sha256, RFC7677.split_once('}').unwrap().1).unwrap();
        let bare = "n=user,r=rOprNGfwEbeRWgbNEkqO";
        let server_first =
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let without_proof = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let auth_message = format!("{bare},{server_first},{without_proof}");
        let proof = STANDARD.decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=").unwrap();
        let signature = check_proof(&keys, auth_message.as_bytes(), &proof).expect("the RFC's proof");
        assert_eq!(STANDARD.encode(signature), "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        let mut wrong = proof.clone();
        wrong[0] ^= 1;
        assert!(check_proof(&keys, auth_message.as_bytes(), &wrong).is_none());
        assert!(check_proof(&keys, auth_message.as_bytes(), &proof[1..]).is_none());
    }

    #[test]
    fn rfc_5803_and_dollar_layouts_read_the_same_keys() {
        let keys = Keys::parse(Hash::Sha256, RFC7677.split_once('}').unwrap().1).unwrap();
        let b64 = |b: &[u8]| STANDARD.encode(b);
        let rfc5803 = format!("4096:{}${}:{}", b64(&keys.salt), b64(&keys.stored_key), b64(&keys.server_key));
        let dollar = format!("4096${}${}:{}", b64(&keys.salt), b64(&keys.stored_key), b64(&keys.server_key));
        assert_eq!(Keys::parse(Hash::Sha256, &rfc5803).as_ref(), Some(&keys));
        assert_eq!(Keys::parse(Hash::Sha256, &dollar).as_ref(), Some(&keys));
    }

    #[test]
    fn sha512_round_trips_and_wrong_lengths_never_match() {
        let value = hash(Hash::Sha512, b"secret");
        assert!(value.starts_with("{SCRAM-SHA-512}4096,"), "{value}");
        assert!(verify_stored(value.as_bytes(), b"secret"));
        assert!(!verify_stored(value.as_bytes(), b"secreT"));
        // SHA-512 keys under the SHA-256 name: wrong length, never a match.
        let renamed = value.replacen("SCRAM-SHA-512", "SCRAM-SHA-256", 1);
        assert!(!verify_stored(renamed.as_bytes(), b"secret"));
    }

    #[test]
    fn malformed_values_never_match() {
        for bad in [
            "",
            "4096",
            "4096,c2FsdA==,AA==",
            "0,c2FsdA==,AA==,AA==",
            "x,c2FsdA==,AA==,AA==",
            "4096,!!,AA==,AA==",
        ] {
            assert!(Keys::parse(Hash::Sha256, bad).is_none(), "{bad}");
        }
        let over = format!(
            "{},c2FsdA==,{},{}",
            ITERATIONS_MAX + 1,
            STANDARD.encode([0; 32]),
            STANDARD.encode([0; 32])
        );
        assert!(Keys::parse(Hash::Sha256, &over).is_none());
    }
}
