//! SASL SCRAM (RFC 5802; SHA-256 per RFC 7677, SHA-512 alike): `SCRAM-SHA-256`,
//! `SCRAM-SHA-512`, and under TLS their `-PLUS` forms with channel binding. Two binds:
//!
//! 1. client-first (`n,,n=user,r=nonce`) → saslBindInProgress (14) with the server-first
//!    message (a bind with no initial response gets an empty challenge first, RFC 4422 §5) (`r=nonce+ours,s=salt,i=iterations`); the exchange waits on the session
//!    ([`Pending`], one per connection: any other request or bind drops it);
//! 2. client-final (`c=...,r=...,p=proof`) → success with `v=ServerSignature`, or
//!    invalidCredentials (49) with `e=invalid-proof` (or another `e=` reason).
//!
//! The proof is checked against the stored value chosen at step 1: a `{SCRAM-SHA-...}`
//! value of the mechanism's hash (its own salt and iterations), else a cleartext value
//! (keys derived with a fresh salt and 4096 iterations, as Cyrus SASL does for a cleartext
//! userPassword). A value hashed any other way cannot answer a SCRAM exchange, in slapd with
//! Cyrus SASL as here: the bind fails with invalidCredentials, as for an unknown user. Such
//! users bind with simple binds or PLAIN. An unknown user, or one without a usable value,
//! gets a made-up salt that stays the same for the same name (RFC 5802 §9), and fails at
//! the proof: the exchange tells nobody which accounts exist.
//!
//! The proof check goes through `op::credentials`, as a simple bind's password does: the
//! access rules' `auth`, the password policy (lockout, failure counting, expiry) and the
//! rootDN's `root_password` apply alike.
//!
//! Names: `n=` is a user name, mapped as `uid=NAME,cn=scram-sha-256,cn=auth` (the
//! mechanism's name in lower case, as slapd names SASL identities) through `authz_regexp`,
//! or `dn:...` for a DN. `a=` (the authzid) must be empty or the same identity, as for PLAIN.
//!
//! Result codes follow slapd with Cyrus SASL: a malformed message is `other` (80,
//! SASL_BADPROT), a wrong proof or channel binding invalidCredentials (49, SASL_BADAUTH).
//!
//! `require_tls_for_binds` does not apply: neither the password nor anything it could be
//! recovered from without a dictionary crosses the wire.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ferrodir_proto::{NormDn, ResultCode};

use super::{escape_rdn_value, mapped};
use crate::error::LdapError;
use crate::op::context::OpContext;
use crate::op::credentials::{stored_values, verify_offered, Offered};
use crate::password::scram::{value_digest, Chosen, Hash, Proof, ITERATIONS};
use crate::password::{is_cleartext, scram_keys};
use crate::requester::{Identity, Transport};

/// The mechanisms offered on every connection.
pub const MECHANISMS: &[&str] = &["SCRAM-SHA-256", "SCRAM-SHA-512"];
/// The channel-binding forms, offered where the transport has channel bindings (TLS).
pub const PLUS_MECHANISMS: &[&str] = &["SCRAM-SHA-256-PLUS", "SCRAM-SHA-512-PLUS"];

/// The longest SCRAM message taken, in bytes: far above any real one (a few hundred).
const MESSAGE_BYTES_MAX: usize = 4096;
/// The longest client nonce taken, in bytes.
const NONCE_BYTES_MAX: usize = 256;
/// Random bytes in the server's part of the nonce.
const SERVER_NONCE_BYTES: usize = 24;

/// The hash and `-PLUS`-ness of a SCRAM mechanism name.
pub fn mechanism(name: &[u8]) -> Option<(Hash, bool)> {
    Some(match name {
        b"SCRAM-SHA-256" => (Hash::Sha256, false),
        b"SCRAM-SHA-512" => (Hash::Sha512, false),
        b"SCRAM-SHA-256-PLUS" => (Hash::Sha256, true),
        b"SCRAM-SHA-512-PLUS" => (Hash::Sha512, true),
        _ => return None,
    })
}

/// A SCRAM exchange between its binds, kept on the session.
pub enum Pending {
    /// The mechanism was named with no initial response (RFC 4422 §5): the server answered
    /// with an empty challenge, and the client-first message comes next.
    Started { hash: Hash, plus: bool },
    /// The server-first message was sent; the client-final message comes next.
    Exchanging(Box<Exchange>),
}

/// What the server-first message committed the exchange to.
pub struct Exchange {
    hash: Hash,
    plus: bool,
    /// The gs2 header `c=` must start with.
    gs2_header: Vec<u8>,
    /// The channel-binding data that must follow it (empty without `p=`).
    binding: Vec<u8>,
    client_first_bare: Vec<u8>,
    server_first: Vec<u8>,
    nonce: Vec<u8>,
    dn: NormDn,
    authzid: Vec<u8>,
    chosen: Chosen,
}

impl Pending {
    /// Whether a bind with mechanism `name` continues this exchange.
    pub fn continued_by(&self, name: &[u8]) -> bool {
        let named = match self {
            Pending::Started { hash, plus } => (*hash, *plus),
            Pending::Exchanging(exchange) => (exchange.hash, exchange.plus),
        };
        mechanism(name) == Some(named)
    }
}

/// One bind of a SCRAM exchange with mechanism (`hash`, `plus`); `pending`: the
/// connection's exchange, when this bind continues it. Answers saslBindInProgress (14)
/// while the exchange goes on, with `step` holding what to send and keep.
pub async fn bind(
    ctx: &OpContext,
    (hash, plus): (Hash, bool),
    pending: Option<Pending>,
    message: &[u8],
    step: &mut super::Step,
) -> Result<Identity, LdapError> {
    let in_progress = || LdapError::new(ResultCode::SASL_BIND_IN_PROGRESS, "");
    match pending {
        Some(Pending::Exchanging(exchange)) => match finish(ctx, *exchange, message).await {
            Ok((identity, last)) => {
                step.server_creds = Some(last);
                Ok(identity)
            }
            Err((error, last)) => {
                step.server_creds = last;
                Err(error)
            }
        },
        None if message.is_empty() => {
            step.server_creds = Some(Vec::new());
            step.pending = Some(Pending::Started { hash, plus });
            Err(in_progress())
        }
        Some(Pending::Started { .. }) | None => {
            let (first, exchange) = start(ctx, hash, plus, message).await?;
            step.server_creds = Some(first);
            step.pending = Some(Pending::Exchanging(Box::new(exchange)));
            Err(in_progress())
        }
    }
}

/// A refusal, with the `e=` server-final message when the exchange got that far.
fn refuse(code: ResultCode, reason: &'static str) -> LdapError {
    LdapError::new(code, reason)
}

fn malformed(what: &'static str) -> LdapError {
    refuse(ResultCode::OTHER, what)
}

fn invalid() -> LdapError {
    refuse(ResultCode::INVALID_CREDENTIALS, "")
}

/// Channel-binding data of `name` on `transport` (RFC 5929, RFC 9266). `ldap` is what
/// OpenLDAP 2.5's libldap names its binding when it hands one to Cyrus SASL
/// (`SASL_CBINDING tls-endpoint`): the data is prefixed with the type, GSS-API style, and
/// the client sends it under the mechanism's plain name. slapd takes it; so does this.
fn binding_data(transport: &Transport, name: &[u8]) -> Option<Vec<u8>> {
    match name {
        b"tls-server-end-point" => transport.tls_server_end_point.clone(),
        b"tls-exporter" => transport.tls_exporter.clone(),
        b"ldap" => {
            let end_point = transport.tls_server_end_point.as_deref()?;
            Some([&b"tls-server-end-point:"[..], end_point].concat())
        }
        _ => None,
    }
}

/// Whether this transport offers the `-PLUS` mechanisms.
pub fn offers_plus(transport: &Transport) -> bool {
    transport.tls_server_end_point.is_some() || transport.tls_exporter.is_some()
}

/// RFC 5802 §7 `saslname`: `=2C` is `,`, `=3D` is `=`, any other `=` is malformed.
fn sasl_name(raw: &[u8]) -> Result<String, LdapError> {
    let text = std::str::from_utf8(raw).map_err(|_| malformed("a SCRAM name is not UTF-8"))?;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('=') {
        out.push_str(rest.get(..at).unwrap_or_default());
        let code = rest.get(at + 1..at + 3).unwrap_or_default();
        out.push(match code {
            "2C" | "2c" => ',',
            "3D" | "3d" => '=',
            _ => return Err(malformed("invalid-username-encoding")),
        });
        rest = rest.get(at + 3..).unwrap_or_default();
    }
    out.push_str(rest);
    Ok(out)
}

/// The parts of a client-first message.
#[derive(Debug, PartialEq, Eq)]
struct ClientFirst<'a> {
    /// `n`, `y`, or the channel-binding name of `p=`.
    flag: Flag<'a>,
    authzid: Vec<u8>,
    gs2_header: &'a [u8],
    bare: &'a [u8],
    user: String,
    nonce: &'a [u8],
}

#[derive(Debug, PartialEq, Eq)]
enum Flag<'a> {
    /// `n`: the client does not do channel binding.
    No,
    /// `y`: it does, but thinks the server does not.
    Yes,
    /// `p=NAME`: it binds to the channel with NAME.
    Bound(&'a [u8]),
}

fn parse_client_first(message: &[u8]) -> Result<ClientFirst<'_>, LdapError> {
    if message.len() > MESSAGE_BYTES_MAX {
        return Err(malformed("SCRAM message too long"));
    }
    let mut header = message.splitn(3, |&b| b == b',');
    let (Some(flag), Some(authzid), Some(bare)) = (header.next(), header.next(), header.next()) else {
        return Err(malformed("no gs2 header"));
    };
    let gs2_header = message.get(..flag.len() + authzid.len() + 2).unwrap_or_default();
    let flag = match flag {
        b"n" => Flag::No,
        b"y" => Flag::Yes,
        _ => match flag.strip_prefix(b"p=") {
            Some(name) if !name.is_empty() => Flag::Bound(name),
            _ => return Err(malformed("bad gs2 channel-binding flag")),
        },
    };
    let authzid = match authzid {
        b"" => Vec::new(),
        _ => match authzid.strip_prefix(b"a=") {
            Some(name) => sasl_name(name)?.into_bytes(),
            None => return Err(malformed("bad gs2 authzid")),
        },
    };
    let mut fields = bare.split(|&b| b == b',');
    let user = match fields.next() {
        Some(field) if field.starts_with(b"m=") => return Err(malformed("extensions-not-supported")),
        Some(field) => field.strip_prefix(b"n=").ok_or_else(|| malformed("no user name"))?,
        None => return Err(malformed("no user name")),
    };
    let nonce = fields.next().and_then(|f| f.strip_prefix(b"r=")).ok_or_else(|| malformed("no nonce"))?;
    if nonce.is_empty() || nonce.len() > NONCE_BYTES_MAX || !nonce.iter().all(|&b| (0x21..=0x7e).contains(&b))
    {
        return Err(malformed("bad nonce"));
    }
    let user = sasl_name(user)?;
    if user.is_empty() {
        return Err(malformed("empty user name"));
    }
    Ok(ClientFirst { flag, authzid, gs2_header, bare, user, nonce })
}

/// The parts of a client-final message.
#[derive(Debug, PartialEq, Eq)]
struct ClientFinal<'a> {
    channel_binding: Vec<u8>,
    nonce: &'a [u8],
    without_proof: &'a [u8],
    proof: Vec<u8>,
}

fn parse_client_final(message: &[u8]) -> Result<ClientFinal<'_>, LdapError> {
    if message.len() > MESSAGE_BYTES_MAX {
        return Err(malformed("SCRAM message too long"));
    }
    let proof_at = message.windows(3).rposition(|w| w == b",p=").ok_or_else(|| malformed("no proof"))?;
    let without_proof = message.get(..proof_at).unwrap_or_default();
    let proof = message.get(proof_at + 3..).unwrap_or_default();
    let proof = STANDARD.decode(proof).map_err(|_| malformed("invalid-encoding"))?;
    let mut fields = without_proof.split(|&b| b == b',');
    let channel_binding =
        fields.next().and_then(|f| f.strip_prefix(b"c=")).ok_or_else(|| malformed("no channel binding"))?;
    let channel_binding = STANDARD.decode(channel_binding).map_err(|_| malformed("invalid-encoding"))?;
    let nonce = fields.next().and_then(|f| f.strip_prefix(b"r=")).ok_or_else(|| malformed("no nonce"))?;
    Ok(ClientFinal { channel_binding, nonce, without_proof, proof })
}

/// Answers a client-first message with the server-first one.
async fn start(
    ctx: &OpContext,
    hash: Hash,
    plus: bool,
    message: &[u8],
) -> Result<(Vec<u8>, Exchange), LdapError> {
    let transport = &ctx.transport;
    if plus && !offers_plus(transport) {
        return Err(LdapError::new(
            ResultCode::AUTH_METHOD_NOT_SUPPORTED,
            "SCRAM -PLUS needs TLS (channel binding)",
        ));
    }
    let first = parse_client_first(message)?;
    let data = match (plus, &first.flag) {
        // Cyrus SASL's client binds under the plain name too (see `binding_data`).
        (_, Flag::Bound(name)) => {
            if !offers_plus(transport) {
                return Err(malformed("channel-binding-not-supported"));
            }
            binding_data(transport, name).ok_or_else(|| malformed("unsupported-channel-binding-type"))?
        }
        (true, _) => return Err(malformed("a -PLUS mechanism needs p= in the gs2 header")),
        // RFC 5802 §6: a client that binds where it can tells us so; when we offer
        // channel binding here, "y" means someone removed the -PLUS mechanisms on the way.
        (false, Flag::Yes) if offers_plus(transport) => {
            return Err(refuse(ResultCode::INVALID_CREDENTIALS, "server-does-support-channel-binding"))
        }
        (false, _) => Vec::new(),
    };
    let dn = name_dn(ctx, hash, plus, &first.user)?;
    let stored = stored_values(&ctx.worker, transport, &dn).await?;
    let (chosen, salt, iterations) = choose(hash, &dn, &stored);
    let mut nonce = first.nonce.to_vec();
    nonce.extend_from_slice(server_nonce().as_bytes());
    let mut server_first = b"r=".to_vec();
    server_first.extend_from_slice(&nonce);
    server_first.extend_from_slice(format!(",s={},i={iterations}", STANDARD.encode(&salt)).as_bytes());
    let exchange = Exchange {
        hash,
        plus,
        gs2_header: first.gs2_header.to_vec(),
        binding: data,
        client_first_bare: first.bare.to_vec(),
        server_first: server_first.clone(),
        nonce,
        dn,
        authzid: first.authzid,
        chosen,
    };
    Ok((server_first, exchange))
}

/// Checks a client-final message; the identity and the server-final message. On failure,
/// the error and the server-final `e=` message when there is one. As Cyrus SASL: another
/// nonce, or a `c=` that doesn't repeat the gs2 header, is a protocol fault (80); other
/// channel-binding data is an authentication failure (49).
async fn finish(
    ctx: &OpContext,
    pending: Exchange,
    message: &[u8],
) -> Result<(Identity, Vec<u8>), (LdapError, Option<Vec<u8>>)> {
    let last = parse_client_final(message).map_err(|e| (e, None))?;
    let error = |reason: &str| (invalid(), Some(format!("e={reason}").into_bytes()));
    if last.nonce != pending.nonce.as_slice() {
        return Err((malformed("nonce mismatch"), None));
    }
    let Some(binding) = last.channel_binding.strip_prefix(pending.gs2_header.as_slice()) else {
        return Err((malformed("channel binding does not repeat the gs2 header"), None));
    };
    if binding != pending.binding.as_slice() {
        return Err(error("channel-bindings-dont-match"));
    }
    let mut auth_message = pending.client_first_bare.clone();
    auth_message.push(b',');
    auth_message.extend_from_slice(&pending.server_first);
    auth_message.push(b',');
    auth_message.extend_from_slice(last.without_proof);
    let proof = Proof {
        hash: pending.hash,
        chosen: pending.chosen,
        auth_message,
        client_proof: last.proof,
        server_signature: Default::default(),
    };
    let verified = verify_offered(&ctx.worker, &ctx.transport, pending.dn, Offered::Scram(&proof)).await;
    let identity = match verified.identity {
        Ok(identity) => identity,
        Err(e) if e.code == ResultCode::INVALID_CREDENTIALS => return Err(error("invalid-proof")),
        Err(e) => return Err((e, None)),
    };
    let identity = super::authorize(ctx, identity, &pending.authzid).await.map_err(|e| (e, None))?;
    let signature = proof.server_signature.borrow_mut().take().unwrap_or_default();
    Ok((identity, format!("v={}", STANDARD.encode(signature)).into_bytes()))
}

/// The DN a SCRAM user name stands for (see the module doc).
fn name_dn(ctx: &OpContext, hash: Hash, plus: bool, user: &str) -> Result<NormDn, LdapError> {
    let config = &ctx.config;
    let name = match user.strip_prefix("dn:") {
        Some(dn) => dn.to_string(),
        None => {
            let user = user.strip_prefix("u:").unwrap_or(user);
            let suffix = if plus { "-plus" } else { "" };
            let mechanism = hash.name().to_ascii_lowercase();
            format!("uid={},cn={mechanism}{suffix},cn=auth", escape_rdn_value(user))
        }
    };
    match mapped(config, &name) {
        Some(dn) => Ok(dn),
        None => config.dn_rules().parse(&name).map_err(|_| invalid()),
    }
}

/// The stored value an exchange uses, its salt and its iterations (see the module doc).
fn choose(hash: Hash, dn: &NormDn, stored: &[Vec<u8>]) -> (Chosen, Vec<u8>, u32) {
    if let Some((value, keys)) = stored.iter().find_map(|v| scram_keys(v, hash).map(|k| (v, k))) {
        return (Chosen::Keys { digest: value_digest(value) }, keys.salt, keys.iterations);
    }
    if let Some(value) = stored.iter().find(|v| is_cleartext(v)) {
        let salt = random_bytes::<16>().to_vec();
        let chosen =
            Chosen::Cleartext { digest: value_digest(value), salt: salt.clone(), iterations: ITERATIONS };
        return (chosen, salt, ITERATIONS);
    }
    (Chosen::Nothing, made_up_salt(hash, dn), ITERATIONS)
}

/// A salt for a name with nothing to check against: the same for the same name and
/// mechanism while the server runs, as a stored value's would be.
fn made_up_salt(hash: Hash, dn: &NormDn) -> Vec<u8> {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    let key = KEY.get_or_init(random_bytes::<32>);
    let mut data = hash.name().as_bytes().to_vec();
    data.push(0);
    data.extend_from_slice(dn.to_string().to_ascii_lowercase().as_bytes());
    let mac = Hash::Sha256.hmac(key, &data);
    mac.get(..16).unwrap_or_default().to_vec()
}

fn random_bytes<const N: usize>() -> [u8; N] {
    use rand::RngCore as _;
    let mut bytes = [0u8; N];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes
}

/// The server's part of the nonce: printable, no comma (base64 of random bytes).
fn server_nonce() -> String {
    STANDARD.encode(random_bytes::<SERVER_NONCE_BYTES>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_first_messages_parse() {
        let first = parse_client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        assert_eq!(first.flag, Flag::No);
        assert_eq!((first.gs2_header, first.bare), (&b"n,,"[..], &b"n=user,r=rOprNGfwEbeRWgbNEkqO"[..]));
        assert_eq!((first.user.as_str(), first.nonce), ("user", &b"rOprNGfwEbeRWgbNEkqO"[..]));
        let first = parse_client_first(b"p=tls-exporter,a=dn:uid=3Da=2Cb,n=u=3Dv,r=abc,x=ext").unwrap();
        assert_eq!(first.flag, Flag::Bound(b"tls-exporter"));
        assert_eq!(first.gs2_header, b"p=tls-exporter,a=dn:uid=3Da=2Cb,");
        assert_eq!((first.authzid.as_slice(), first.user.as_str()), (&b"dn:uid=a,b"[..], "u=v"));
        assert_eq!(parse_client_first(b"y,,n=u,r=x").unwrap().flag, Flag::Yes);
    }

    #[test]
    fn malformed_client_first_messages_are_other_never_a_panic() {
        let long = [b"n,,n=u,r=".as_slice(), &[b'x'; 5000]].concat();
        for bad in [
            &b""[..],
            b"n",
            b"n,",
            b"x,,n=u,r=a",
            b"p=,,n=u,r=a",
            b"n,b=x,n=u,r=a",
            b"n,,m=ext,n=u,r=a",
            b"n,,n=u",
            b"n,,r=a,n=u",
            b"n,,n=,r=a",
            b"n,,n=u=2,r=a",
            b"n,,n=u=41,r=a",
            b"n,,n=u,r=",
            b"n,,n=u,r=a b",
            b"n,,n=\xff,r=a",
            &long,
        ] {
            let error = parse_client_first(bad).unwrap_err();
            assert_eq!(error.code, ResultCode::OTHER, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn client_final_messages_parse_and_malformed_ones_are_other() {
        let last =
            parse_client_final(b"c=biws,r=abc,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=").unwrap();
        assert_eq!((last.channel_binding.as_slice(), last.nonce), (&b"n,,"[..], &b"abc"[..]));
        assert_eq!(last.without_proof, b"c=biws,r=abc");
        assert_eq!(last.proof.len(), 32);
        for bad in [
            &b""[..],
            b"c=biws,r=abc",
            b"c=!!,r=a,p=AA==",
            b"r=a,c=biws,p=AA==",
            b"c=biws,p=AA==",
            b"c=biws,r=a,p=!",
        ] {
            let error = parse_client_final(bad).unwrap_err();
            assert_eq!(error.code, ResultCode::OTHER, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn mechanism_names() {
        assert_eq!(mechanism(b"SCRAM-SHA-256"), Some((Hash::Sha256, false)));
        assert_eq!(mechanism(b"SCRAM-SHA-512-PLUS"), Some((Hash::Sha512, true)));
        assert_eq!(mechanism(b"SCRAM-SHA-1"), None);
    }

    #[test]
    fn the_value_chosen_and_its_salt() {
        let dn = ferrodir_proto::schema::DnNormalizer::plain().parse("uid=a,dc=x").unwrap();
        let scram = crate::password::scram::hash(Hash::Sha256, b"pw");
        let stored = vec![b"{SSHA}abc".to_vec(), b"pw".to_vec(), scram.clone().into_bytes()];
        let (chosen, salt, iterations) = choose(Hash::Sha256, &dn, &stored);
        let keys = scram_keys(scram.as_bytes(), Hash::Sha256).unwrap();
        assert_eq!(
            (chosen, salt, iterations),
            (Chosen::Keys { digest: value_digest(scram.as_bytes()) }, keys.salt, 4096)
        );
        // SHA-512 has no stored keys here: the cleartext value, with a fresh salt each time.
        let (chosen, salt, _) = choose(Hash::Sha512, &dn, &stored);
        assert!(matches!(chosen, Chosen::Cleartext { .. }));
        assert_ne!(salt, choose(Hash::Sha512, &dn, &stored).1);
        // Only another scheme: nothing, with the same made-up salt every time.
        let (chosen, salt, _) = choose(Hash::Sha256, &dn, &stored[..1]);
        assert_eq!(chosen, Chosen::Nothing);
        assert_eq!(salt, choose(Hash::Sha256, &dn, &[]).1);
        assert_ne!(salt, choose(Hash::Sha512, &dn, &[]).1);
    }
}
