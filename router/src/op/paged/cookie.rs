//! The paged-results cookie (RFC 2696 leaves its content to the server): the position of a
//! paged search, sealed with an HMAC so that the server keeps nothing between pages.
//!
//! What it holds: the id of the last entry sent (entry ids are the search's total order,
//! see `shard::search::Window`), which of the search's scopes it was in (a search that
//! follows aliases reads several, one after another: `op::search::aliases`), how many
//! entries the whole search has sent so far (size limits count across pages, as slapd
//! counts them) and when it was issued. What the MAC
//! covers besides: the search itself (everything but its timeLimit) and the requester's
//! identity. So a cookie is good for the same search by the same identity on any
//! connection, several may be in use at once on one connection, and one minted for another
//! search or identity, or altered, fails the MAC (protocolError). A cookie older than
//! `paged_cookie_idle_max_s` is stale (unwillingToPerform). The key is per data directory
//! (`paged-results.key`), so cookies survive a restart.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use ferrodir_proto::message::SearchRequest;
use ferrodir_shard::EntryId;

const VERSION: u8 = 2;
/// version, issued (s), flags, after, sent, part.
const BODY_BYTES: usize = 1 + 8 + 1 + 8 + 4 + 2;
const MAC_BYTES: usize = 16;
pub const COOKIE_BYTES: usize = BODY_BYTES + MAC_BYTES;
/// The first version's cookies, without a part (minted before an upgrade, still opened:
/// part 0).
const VERSION_1: u8 = 1;
const BODY_BYTES_1: usize = BODY_BYTES - 2;

/// The server's secret for sealing cookies.
#[derive(Clone)]
pub struct CookieKey([u8; 32]);

impl std::fmt::Debug for CookieKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieKey(..)")
    }
}

impl CookieKey {
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The key's bytes, to keep it in the data directory.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A fresh random key (tests, and a server that can't keep one).
    pub fn random() -> Self {
        use rand::RngCore as _;
        let mut key = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut key);
        Self(key)
    }

    fn mac(&self, search: &SearchDigest, body: &[u8]) -> [u8; MAC_BYTES] {
        // HMAC-SHA256 accepts keys of any length: new_from_slice can't fail here.
        let mut mac = match <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => return [0; MAC_BYTES],
        };
        mac.update(b"ferrodir paged results v1\0");
        mac.update(&search.0);
        mac.update(body);
        let full = mac.finalize().into_bytes();
        let mut out = [0u8; MAC_BYTES];
        for (byte, from) in out.iter_mut().zip(full.iter()) {
            *byte = *from;
        }
        out
    }
}

/// What a cookie is bound to: one search request (less its timeLimit) by one identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchDigest([u8; 32]);

impl SearchDigest {
    pub fn of(request: &SearchRequest, identity: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update((identity.len() as u64).to_be_bytes());
        hasher.update(identity.as_bytes());
        let mut same = request.clone();
        same.time_limit = 0;
        // Encoding a decoded request can't fail; if it did, the digest is of the identity
        // alone plus a marker, and the request's own bytes differ by the base at least.
        match rasn::ber::encode(&same) {
            Ok(bytes) => hasher.update(&bytes),
            Err(_) => hasher.update(request.base_object.as_ref()),
        }
        Self(hasher.finalize().into())
    }
}

/// Where a paged search stands between two pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Position {
    /// The last entry sent; None before the first.
    pub after: Option<EntryId>,
    /// Entries sent by all pages so far.
    pub sent: u32,
    /// Which of the search's scopes `after` is in (0: its own, or the only one).
    pub part: u16,
}

/// Why a cookie is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CookieError {
    /// Not one of ours, altered, or for another search or identity: protocolError (2).
    Invalid,
    /// Ours, but older than the idle limit: unwillingToPerform (53).
    Stale,
}

pub fn mint(key: &CookieKey, search: &SearchDigest, position: Position, now_s: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(COOKIE_BYTES);
    out.push(VERSION);
    out.extend_from_slice(&now_s.to_be_bytes());
    out.push(u8::from(position.after.is_some()));
    out.extend_from_slice(&position.after.map_or(0, |id| id.0).to_be_bytes());
    out.extend_from_slice(&position.sent.to_be_bytes());
    out.extend_from_slice(&position.part.to_be_bytes());
    let mac = key.mac(search, &out);
    out.extend_from_slice(&mac);
    out
}

pub fn open(
    key: &CookieKey,
    search: &SearchDigest,
    cookie: &[u8],
    now_s: u64,
    idle_max_s: u64,
) -> Result<Position, CookieError> {
    let body_bytes = match cookie.first() {
        Some(&VERSION) => BODY_BYTES,
        Some(&VERSION_1) => BODY_BYTES_1,
        _ => return Err(CookieError::Invalid),
    };
    if cookie.len() != body_bytes + MAC_BYTES {
        return Err(CookieError::Invalid);
    }
    let (body, mac) = cookie.split_at(body_bytes);
    let expected = key.mac(search, body);
    if !bool::from(subtle::ConstantTimeEq::ct_eq(&expected[..], mac)) {
        return Err(CookieError::Invalid);
    }
    let field = |at: usize, len: usize| body.get(at..at + len).ok_or(CookieError::Invalid);
    let issued = u64::from_be_bytes(field(1, 8)?.try_into().map_err(|_| CookieError::Invalid)?);
    let after_id = u64::from_be_bytes(field(10, 8)?.try_into().map_err(|_| CookieError::Invalid)?);
    let sent = u32::from_be_bytes(field(18, 4)?.try_into().map_err(|_| CookieError::Invalid)?);
    let part = match body_bytes {
        BODY_BYTES => u16::from_be_bytes(field(22, 2)?.try_into().map_err(|_| CookieError::Invalid)?),
        _ => 0,
    };
    let after = match field(9, 1)? {
        [0] => None,
        [1] => Some(EntryId(after_id)),
        _ => return Err(CookieError::Invalid),
    };
    if now_s.saturating_sub(issued) > idle_max_s {
        return Err(CookieError::Stale);
    }
    Ok(Position { after, sent, part })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::filter::parse_filter;
    use ferrodir_proto::message::{DerefAliases, OctetString, SearchScope};

    fn request(filter: &str, time_limit: u32) -> SearchRequest {
        SearchRequest {
            base_object: OctetString::from_static(b"dc=example,dc=com"),
            scope: SearchScope::WholeSubtree,
            deref_aliases: DerefAliases::NeverDerefAliases,
            size_limit: 0,
            time_limit,
            types_only: false,
            filter: parse_filter(filter).unwrap(),
            attributes: vec![],
        }
    }

    #[test]
    fn a_cookie_opens_for_its_search_and_identity_only() {
        let key = CookieKey::random();
        let search = SearchDigest::of(&request("(uid=*)", 0), "uid=a");
        let position = Position { after: Some(EntryId(77)), sent: 12, part: 3 };
        let cookie = mint(&key, &search, position, 1000);
        assert_eq!(open(&key, &search, &cookie, 1001, 60), Ok(position));
        // The time limit may change between pages.
        assert_eq!(
            open(&key, &SearchDigest::of(&request("(uid=*)", 5), "uid=a"), &cookie, 1001, 60),
            Ok(position)
        );
        for other in [
            SearchDigest::of(&request("(uid=*)", 0), "uid=b"),
            SearchDigest::of(&request("(cn=*)", 0), "uid=a"),
        ] {
            assert_eq!(open(&key, &other, &cookie, 1001, 60), Err(CookieError::Invalid));
        }
        assert_eq!(open(&CookieKey::random(), &search, &cookie, 1001, 60), Err(CookieError::Invalid));
    }

    #[test]
    fn a_first_version_cookie_still_opens_in_the_first_part() {
        let key = CookieKey::random();
        let search = SearchDigest::of(&request("(uid=*)", 0), "");
        let mut body = vec![VERSION_1];
        body.extend_from_slice(&1000u64.to_be_bytes());
        body.push(1);
        body.extend_from_slice(&77u64.to_be_bytes());
        body.extend_from_slice(&5u32.to_be_bytes());
        let mac = key.mac(&search, &body);
        body.extend_from_slice(&mac);
        assert_eq!(
            open(&key, &search, &body, 1000, 60),
            Ok(Position { after: Some(EntryId(77)), sent: 5, part: 0 })
        );
    }

    #[test]
    fn altered_truncated_and_old_cookies_are_refused() {
        let key = CookieKey::random();
        let search = SearchDigest::of(&request("(uid=*)", 0), "");
        let cookie = mint(&key, &search, Position { after: None, sent: 0, part: 0 }, 1000);
        for at in 0..cookie.len() {
            let mut bad = cookie.clone();
            bad[at] ^= 0x01;
            assert_eq!(open(&key, &search, &bad, 1000, 60), Err(CookieError::Invalid), "byte {at}");
        }
        for len in 0..cookie.len() {
            assert_eq!(open(&key, &search, &cookie[..len], 1000, 60), Err(CookieError::Invalid));
        }
        assert_eq!(open(&key, &search, &cookie, 1061, 60), Err(CookieError::Stale));
        assert!(open(&key, &search, &cookie, 1060, 60).is_ok());
    }
}
