//! Password Modify (RFC 3062, 1.3.6.1.4.1.4203.1.11.1), as slapd answers it:
//! - in cleartext from a non-loopback peer with `require_tls_for_binds`:
//!   confidentialityRequired (13), checked first: the request itself carries passwords,
//!   and such a peer can't be bound anyway (its simple binds get 13 too);
//! - anonymous: strongerAuthRequired (8), "only authenticated users may change passwords";
//! - a requestValue that isn't a `PasswdModifyRequestValue`: protocolError (2);
//! - no userIdentity: the bound identity's own entry. The rootDN has none (its password is
//!   `root_password` in the config): unwillingToPerform (53);
//! - oldPasswd, when given, must match a stored value, else unwillingToPerform (53),
//!   "unwilling to verify old password" (slapd's passwd.c);
//! - who may change whose password: the access rules, `write` on the target's userPassword
//!   (`access::may_write_attr`; the default rules let users change their own);
//! - no newPasswd: the server generates one and returns it in genPasswd.
//!
//! The new value is hashed with `password_scheme` (when `password_hash_on_write` is on) and
//! replaces every userPassword value through the same shard write as a Modify, so it is
//! durable before the answer.

use ferrodir_proto::entry::Attribute;
use ferrodir_proto::ldif::{LdifMod, ModOp};
use ferrodir_proto::message::{
    ExtendedResponse, LdapResult, OctetString, PasswdModifyRequest, PasswdModifyResponse,
};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::WriteOp;

use crate::access;
use crate::auditlog::Change;
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::op::{check_writable, parse_dn};
use crate::requester::Identity;

pub use ferrodir_proto::message::PASSWORD_MODIFY_OID;

/// Characters of generated passwords: letters and digits without the look-alikes
/// (0/O/o, 1/l/I), so that a password read off a screen is typed right.
const GENERATED_ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
/// 16 of 56 characters: about 93 bits.
const GENERATED_CHARS: usize = 16;

pub async fn password_modify(ctx: &OpContext, request_value: Option<&[u8]>) -> ExtendedResponse {
    let (result, response_value) = match change(ctx, request_value).await {
        Ok(None) => (LdapResult::success(), None),
        Ok(Some(generated)) => {
            match (PasswdModifyResponse { gen_passwd: Some(OctetString::from(generated)) }).encode_value() {
                Ok(value) => (LdapResult::success(), Some(OctetString::from(value))),
                Err(e) => (LdapError::internal(format!("cannot encode the response: {e}")).to_result(), None),
            }
        }
        Err(e) => (e.to_result(), None),
    };
    ExtendedResponse { result, response_name: None, response_value }
}

/// Changes the password; returns the generated one, if the request had none.
async fn change(ctx: &OpContext, request_value: Option<&[u8]>) -> LdapResultOf<Option<Vec<u8>>> {
    let config = &ctx.config;
    if !ctx.transport.password_allowed(config.require_tls_for_binds) {
        return Err(LdapError::new(ResultCode::CONFIDENTIALITY_REQUIRED, "TLS confidentiality required"));
    }
    if ctx.identity == Identity::Anonymous {
        return Err(LdapError::new(
            ResultCode::STRONGER_AUTH_REQUIRED,
            "only authenticated users may change passwords",
        ));
    }
    let request = match request_value {
        // RFC 3062 §2: the requestValue may be absent; then every field is.
        None => PasswdModifyRequest::default(),
        Some(bytes) => PasswdModifyRequest::decode_value(bytes)
            .map_err(|_| LdapError::protocol("data decoding error"))?,
    };
    let target = match &request.user_identity {
        Some(identity) => parse_dn(config, identity)?,
        None => bound_dn(&ctx.identity)?,
    };
    if config.is_root_dn(&target) {
        return Err(LdapError::unwilling("the rootDN's password is root_password in the configuration"));
    }
    check_writable(config, &target)?;
    config.disk.check()?;
    let subject = access::subject(ctx).await;
    let located = access::locate(ctx, &subject, &target).await?;
    let entry = access::entry_for_rules(ctx, &subject, located.id).await?;
    access::may_write_attr(config, &subject, &target, entry.as_ref(), "userPassword")?;
    if let Some(old) = &request.old_passwd {
        let stored = match ctx.worker.fetch(located.id).await? {
            Some(record) => record.entry.get("userPassword").map(|a| a.values.clone()).unwrap_or_default(),
            None => Vec::new(),
        };
        if !config.passwords.check(stored, old.to_vec()).await? {
            return Err(LdapError::unwilling("unwilling to verify old password"));
        }
    }
    let (new, generated) = match &request.new_passwd {
        Some(new) if new.is_empty() => return Err(LdapError::unwilling("new password is empty")),
        Some(new) => (new.to_vec(), None),
        None => {
            let generated = generate();
            (generated.clone(), Some(generated))
        }
    };
    // The password policy's rules, on the value before it is hashed.
    let mut more = Vec::new();
    if let Some(record) = ctx.worker.fetch(located.id).await? {
        let own = matches!(&ctx.identity, Identity::User(me) if me.same_entry(&target));
        let old_given = request.old_passwd.is_some();
        let values = [new.clone()];
        more = crate::ppolicy::new_password(ctx, &record.entry, Some(&record.entry), &values, own, old_given)
            .await?;
    }
    let values = config.passwords.for_storage(vec![new]).await?;
    let mut changes = vec![LdifMod { op: ModOp::Replace, attr: Attribute::new("userPassword", values) }];
    changes.extend(more);
    // slapd's Password Modify is a modify to its overlays: slapo-auditlog logs it as one.
    let audit = crate::op::audit::prepare(ctx, &target, Change::Modify(&changes));
    let op = WriteOp::Modify { id: located.id, changes, author: ctx.identity.author() };
    ctx.worker.write(located.id.shard(), op).await?;
    crate::op::audit::committed(ctx, audit);
    Ok(generated)
}

fn bound_dn(identity: &Identity) -> LdapResultOf<NormDn> {
    match identity {
        Identity::Root(dn) | Identity::User(dn) => Ok(dn.as_ref().clone()),
        Identity::Anonymous => Err(LdapError::new(
            ResultCode::STRONGER_AUTH_REQUIRED,
            "only authenticated users may change passwords",
        )),
    }
}

/// A random password of [`GENERATED_CHARS`] characters from [`GENERATED_ALPHABET`].
fn generate() -> Vec<u8> {
    use rand::seq::SliceRandom as _;
    let mut rng = rand::thread_rng();
    (0..GENERATED_CHARS).filter_map(|_| GENERATED_ALPHABET.choose(&mut rng).copied()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_passwords_are_long_and_unambiguous() {
        let first = generate();
        assert_eq!(first.len(), GENERATED_CHARS);
        assert!(first.iter().all(|c| GENERATED_ALPHABET.contains(c)));
        assert!(!first.iter().any(|c| b"0O1lI".contains(c)));
        assert_ne!(first, generate());
    }
}
