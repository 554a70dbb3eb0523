//! RFC 2307's `{SHA}` and `{SSHA}` (SHA-1), and the SHA-2 schemes of OpenLDAP's pw-sha2
//! module: base64 of the digest, followed by the salt for the salted (`S`) forms. slapd
//! accepts a salt of any length; so does this.

use base64::Engine as _;
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha384, Sha512};
use subtle::ConstantTimeEq as _;

/// One scheme of the family.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Sha,
    Ssha,
    Sha256,
    Ssha256,
    Sha384,
    Ssha384,
    Sha512,
    Ssha512,
}

impl Kind {
    /// The kind an upper-case scheme name (without braces) names.
    pub fn named(upper: &str) -> Option<Self> {
        Some(match upper {
            "SHA" => Self::Sha,
            "SSHA" => Self::Ssha,
            "SHA256" => Self::Sha256,
            "SSHA256" => Self::Ssha256,
            "SHA384" => Self::Sha384,
            "SSHA384" => Self::Ssha384,
            "SHA512" => Self::Sha512,
            "SSHA512" => Self::Ssha512,
            _ => return None,
        })
    }

    fn label(self) -> &'static str {
        match self {
            Self::Sha => "SHA",
            Self::Ssha => "SSHA",
            Self::Sha256 => "SHA256",
            Self::Ssha256 => "SSHA256",
            Self::Sha384 => "SHA384",
            Self::Ssha384 => "SSHA384",
            Self::Sha512 => "SHA512",
            Self::Ssha512 => "SSHA512",
        }
    }

    fn salted(self) -> bool {
        matches!(self, Self::Ssha | Self::Ssha256 | Self::Ssha384 | Self::Ssha512)
    }

    /// The digest of `password` followed by `salt`.
    fn digest(self, password: &[u8], salt: &[u8]) -> Vec<u8> {
        fn of<D: Digest>(password: &[u8], salt: &[u8]) -> Vec<u8> {
            let mut hasher = D::new();
            hasher.update(password);
            hasher.update(salt);
            hasher.finalize().to_vec()
        }
        match self {
            Self::Sha | Self::Ssha => of::<Sha1>(password, salt),
            Self::Sha256 | Self::Ssha256 => of::<Sha256>(password, salt),
            Self::Sha384 | Self::Ssha384 => of::<Sha384>(password, salt),
            Self::Sha512 | Self::Ssha512 => of::<Sha512>(password, salt),
        }
    }

    fn digest_bytes(self) -> usize {
        match self {
            Self::Sha | Self::Ssha => 20,
            Self::Sha256 | Self::Ssha256 => 32,
            Self::Sha384 | Self::Ssha384 => 48,
            Self::Sha512 | Self::Ssha512 => 64,
        }
    }
}

pub fn verify(kind: Kind, encoded: &str, offered: &[u8]) -> bool {
    let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
        return false;
    };
    let Some((digest, salt)) = raw.split_at_checked(kind.digest_bytes()) else {
        return false;
    };
    // An unsalted value has nothing after the digest; a salted one has at least one byte.
    if salt.is_empty() == kind.salted() {
        return false;
    }
    kind.digest(offered, salt).ct_eq(digest).into()
}

/// `{KIND}` of `password` with `salt` (empty for the unsalted kinds).
pub fn salted(kind: Kind, password: &[u8], salt: &[u8]) -> String {
    let salt = if kind.salted() { salt } else { &[] };
    let mut raw = kind.digest(password, salt);
    raw.extend_from_slice(salt);
    format!("{{{}}}{}", kind.label(), base64::engine::general_purpose::STANDARD.encode(raw))
}

#[cfg(test)]
mod tests {
    use crate::password::verify;

    /// Made by `slappasswd -h {SSHA} -s secret` and, for SHA-2,
    /// `slappasswd -o module-load=pw-sha2 -h {SSHA512} -s secret` (and so on).
    const SLAPPASSWD_VECTORS: &[&str] = &[
        "{SSHA}lJLlsY36jdNEg41w6+xHlcMlnF8lsEDY",
        "{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=",
        "{SSHA512}WVlAskRqa/UJRPooeabtYhspwNVlDz8iFIVFLPuOpKB+kCukBmKylQZMMqsc7j3tDSOF4bdxbt1h4EIw+siQv4h384qjVh+y",
        "{SSHA256}OEiYEbtHfDOGZJcOitqt1GLFf+mqBWi8+uf82G4hccGnsx9LlFJN7A==",
        "{SHA256}K7gNU3sdo+OL0wNhqoVWhr3g6s1xYv72ol/pe/Unols=",
        "{SHA512}vSsar3708Jvp9Szi2NWZZ02Bqp1qRCFpbcTZPdBhnWgs5WtNZKnvCXdhztmeD2cmW192CF5bDufKRpayrW/isg==",
    ];

    #[test]
    fn slappasswd_vectors() {
        for vector in SLAPPASSWD_VECTORS {
            assert!(verify(vector.as_bytes(), b"secret"), "{vector}");
            assert!(!verify(vector.as_bytes(), b"Secret"), "{vector}");
            assert!(!verify(vector.as_bytes(), b""), "{vector}");
        }
    }

    #[test]
    fn malformed_never_matches() {
        for bad in [
            "{SSHA}",
            "{SSHA}!!!!",
            // A bare SHA-1 digest is not a salted value.
            "{SSHA}5en6G6MezRroT3XKqkdPOmY/BfQ=",
            // Unsalted with trailing bytes.
            "{SHA}lJLlsY36jdNEg41w6+xHlcMlnF8lsEDY",
            "{SHA256}5en6G6MezRroT3XKqkdPOmY/BfQ=",
        ] {
            assert!(!verify(bad.as_bytes(), b"secret"), "{bad}");
        }
    }
}
