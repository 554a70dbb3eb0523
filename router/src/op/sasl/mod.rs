//! SASL binds (RFC 4513 §5.2, RFC 4422): EXTERNAL and PLAIN, both single-step, and the
//! SCRAM family (`scram.rs`), in two steps.
//!
//! - **EXTERNAL** (RFC 4422 appendix A) takes the identity the transport already proved:
//!   the subject of a verified TLS client certificate, or on the ldapi socket the peer
//!   process's uid and gid, named as slapd names them,
//!   `gidNumber=G+uidNumber=U,cn=peercred,cn=external,cn=auth`.
//! - **PLAIN** (RFC 4616) carries `authzid NUL authcid NUL password`; the authcid is a DN
//!   (`dn:...`) or a user name, named `uid=NAME,cn=plain,cn=auth` for mapping. The password
//!   is checked exactly as a simple bind's. PLAIN is taken only where it is confidential
//!   (TLS or ldapi) while `require_tls_for_binds` holds: unlike a simple bind, loopback TCP
//!   is no exemption, since a mechanism that exists to be used under TLS has no cleartext
//!   clients to keep working.
//!
//! Either name then goes through `authz_regexp` (first match wins) to become a DN; a name
//! no rule maps is used as it is, as slapd does. A DN that is the rootDN binds as the
//! rootDN. An authzid other than the authenticated identity itself is refused: proxied
//! authorization is not offered.
//!
//! A multi-step mechanism's exchange waits on the session between its binds
//! ([`scram::Pending`]): a bind with the same mechanism continues it; any other bind or
//! request drops it (session.rs), so a connection holds at most one.

pub mod scram;

use ferrodir_proto::message::SaslCredentials;
use ferrodir_proto::schema::DnNormalizer;
use ferrodir_proto::{NormDn, ResultCode};

use crate::config::DirectoryConfig;
use crate::error::LdapError;
use crate::op::context::OpContext;
use crate::op::credentials::verify_password;
use crate::requester::Identity;

/// The single-step mechanisms, offered on every connection.
const SINGLE_STEP: &[&str] = &["EXTERNAL", "PLAIN"];

/// The mechanisms listed in the root DSE's supportedSASLMechanisms, as this transport
/// offers them: the SCRAM `-PLUS` forms only where there is a channel to bind to (TLS).
pub fn mechanisms(transport: &crate::requester::Transport) -> Vec<&'static str> {
    let mut all = SINGLE_STEP.to_vec();
    all.extend_from_slice(scram::MECHANISMS);
    if scram::offers_plus(transport) {
        all.extend_from_slice(scram::PLUS_MECHANISMS);
    }
    all
}

/// What a SASL bind step leaves besides its outcome: the serverSaslCreds to answer with,
/// and an exchange still under way (whose bind answers saslBindInProgress).
#[derive(Default)]
pub struct Step {
    pub server_creds: Option<Vec<u8>>,
    pub pending: Option<scram::Pending>,
}

/// One SASL bind. `pending`: the exchange the connection has under way, if any.
pub async fn authenticate(
    ctx: &OpContext,
    credentials: SaslCredentials,
    pending: Option<scram::Pending>,
    step: &mut Step,
) -> Result<Identity, LdapError> {
    let offered = credentials.credentials.as_deref().unwrap_or_default();
    let mechanism = credentials.mechanism.as_ref();
    if let Some(named) = scram::mechanism(mechanism) {
        let continued = pending.filter(|p| p.continued_by(mechanism));
        return scram::bind(ctx, named, continued, offered, step).await;
    }
    match mechanism {
        b"EXTERNAL" => external(ctx, offered).await,
        b"PLAIN" => plain(ctx, offered).await,
        _ => Err(LdapError::new(ResultCode::AUTH_METHOD_NOT_SUPPORTED, "SASL mechanism not supported")),
    }
}

async fn external(ctx: &OpContext, authzid: &[u8]) -> Result<Identity, LdapError> {
    let transport = &ctx.transport;
    let name = if let Some(subject) = &transport.client_cert_subject {
        subject.clone()
    } else if let (true, Some((uid, gid))) = (transport.ldapi, transport.peer_cred) {
        format!("gidNumber={gid}+uidNumber={uid},cn=peercred,cn=external,cn=auth")
    } else {
        return Err(LdapError::new(
            ResultCode::INAPPROPRIATE_AUTHENTICATION,
            "SASL EXTERNAL needs a TLS client certificate or the ldapi socket",
        ));
    };
    let identity = identity_for(&ctx.config, &name)?;
    authorize(ctx, identity, authzid).await
}

async fn plain(ctx: &OpContext, message: &[u8]) -> Result<Identity, LdapError> {
    let config = &ctx.config;
    if config.require_tls_for_binds && !ctx.transport.confidential() {
        return Err(LdapError::new(ResultCode::CONFIDENTIALITY_REQUIRED, "SASL PLAIN needs TLS or ldapi"));
    }
    let mut parts = message.splitn(3, |&b| b == 0);
    let (Some(authzid), Some(authcid), Some(password)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(LdapError::new(ResultCode::INVALID_CREDENTIALS, "malformed PLAIN message"));
    };
    let invalid = || LdapError::new(ResultCode::INVALID_CREDENTIALS, "");
    let authcid = std::str::from_utf8(authcid).map_err(|_| invalid())?;
    if authcid.is_empty() || password.is_empty() {
        return Err(invalid());
    }
    let name = match authcid.strip_prefix("dn:") {
        Some(dn) => dn.to_string(),
        None => {
            let user = authcid.strip_prefix("u:").unwrap_or(authcid);
            format!("uid={},cn=plain,cn=auth", escape_rdn_value(user))
        }
    };
    let dn = match mapped(config, &name) {
        Some(dn) => dn,
        None => config.dn_rules().parse(&name).map_err(|_| invalid())?,
    };
    let identity = verify_password(&ctx.worker, &ctx.transport, dn, password).await?;
    authorize(ctx, identity, authzid).await
}

/// The identity an authenticated SASL `name` stands for (see the module doc).
fn identity_for(config: &DirectoryConfig, name: &str) -> Result<Identity, LdapError> {
    let dn = match mapped(config, name) {
        Some(dn) => dn,
        None => config
            .dn_rules()
            .parse(name)
            .map_err(|_| LdapError::new(ResultCode::INVALID_CREDENTIALS, "the SASL name is not a DN"))?,
    };
    if config.is_root_dn(&dn) {
        Ok(Identity::Root(dn.into()))
    } else {
        Ok(Identity::User(dn.into()))
    }
}

/// `name` rewritten by the first `authz_regexp` rule that matches it, if any.
fn mapped(config: &DirectoryConfig, name: &str) -> Option<NormDn> {
    let rule = config.authz_rules.iter().find(|rule| rule.pattern.is_match(name))?;
    let captures = rule.pattern.captures(name)?;
    let mut replaced = String::new();
    captures.expand(&rule.replace, &mut replaced);
    match config.dn_rules().parse(&replaced) {
        Ok(dn) => Some(dn),
        Err(e) => {
            tracing::warn!(name, replaced, error = %e, "authz_regexp produced something that is not a DN");
            None
        }
    }
}

/// The identity a SASL bind ends up as: `identity` (the authenticated one) when the
/// authzid (RFC 4513 §5.2.1.8) is empty or names it, else the one it names (`dn:` or
/// `u:`) when `[sasl] authz_policy`'s rules let `identity` act as it (crate::authz, as
/// slapd's authz-policy governs SASL authzids and the proxy control alike); otherwise
/// insufficientAccessRights (50), as slapd answers a SASL authorization failure.
pub(super) async fn authorize(
    ctx: &OpContext,
    identity: Identity,
    authzid: &[u8],
) -> Result<Identity, LdapError> {
    let refusal = match check_authzid(ctx.config.dn_rules(), &identity, authzid) {
        Ok(()) => return Ok(identity),
        Err(refusal) => refusal,
    };
    let Some(authc) = identity_dn(&identity) else { return Err(refusal) };
    let text = std::str::from_utf8(authzid).map_err(|_| refusal.clone())?;
    let target = match text.strip_prefix("dn:") {
        Some(dn) => ctx.config.dn_rules().parse(dn).ok(),
        None => text.strip_prefix("u:").and_then(|name| crate::authz::user_dn(&ctx.config, name)),
    };
    let Some(target) = target else { return Err(refusal) };
    if !crate::authz::authorized(&ctx.worker, &ctx.config, authc, &target).await {
        return Err(refusal);
    }
    Ok(match ctx.config.is_root_dn(&target) {
        true => Identity::Root(target.into()),
        false => Identity::User(target.into()),
    })
}

/// Whether the authzid asks for nothing but `identity` itself: empty, or its own DN in
/// `dn:` form (insufficientAccessRights otherwise: the caller may still allow it by the
/// authorization rules, [`authorize`]).
fn check_authzid(rules: &DnNormalizer, identity: &Identity, authzid: &[u8]) -> Result<(), LdapError> {
    if authzid.is_empty() {
        return Ok(());
    }
    let same = std::str::from_utf8(authzid)
        .ok()
        .and_then(|text| text.strip_prefix("dn:"))
        .and_then(|dn| rules.parse(dn).ok())
        .zip(identity_dn(identity))
        .is_some_and(|(asked, own)| asked.same_entry(own));
    if same {
        Ok(())
    } else {
        Err(LdapError::new(ResultCode::INSUFFICIENT_ACCESS_RIGHTS, "not authorized to assume that identity"))
    }
}

fn identity_dn(identity: &Identity) -> Option<&NormDn> {
    match identity {
        Identity::Anonymous => None,
        Identity::Root(dn) | Identity::User(dn) => Some(dn.as_ref()),
    }
}

/// RFC 4514 §2.4 escaping of a user name placed into an RDN value.
fn escape_rdn_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        if matches!(c, '"' | '+' | ',' | ';' | '<' | '>' | '\\' | '=') || (i == 0 && (c == '#' || c == ' ')) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_authzid_other_than_oneself_is_refused() {
        let rules = DnNormalizer::plain();
        let alice = Identity::User(rules.parse("uid=alice,dc=example,dc=com").unwrap().into());
        let check = |authzid: &[u8]| check_authzid(&rules, &alice, authzid);
        assert!(check(b"").is_ok());
        assert!(check(b"dn:UID=alice,dc=example,dc=com").is_ok());
        assert_eq!(check(b"dn:uid=bob,dc=example,dc=com").unwrap_err().code, ResultCode(50));
        assert_eq!(check(b"u:bob").unwrap_err().code, ResultCode(50));
    }

    #[test]
    fn user_names_are_escaped_into_the_rdn() {
        assert_eq!(escape_rdn_value("a,b=c"), "a\\,b\\=c");
        assert_eq!(escape_rdn_value("alice"), "alice");
    }
}
