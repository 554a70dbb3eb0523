//! Checking a DN and password: what a simple bind and SASL PLAIN (once its name is mapped
//! to a DN) share. Here, below both, so that neither imports the other for it.

use ferrodir_proto::entry::Attribute;
use ferrodir_proto::ldif::{LdifMod, ModOp};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::{EntryId, WriteOp};

use crate::access;
use crate::config::DirectoryConfig;
use crate::error::LdapError;
use crate::requester::{Identity, Transport};
use crate::resolve::locate;
use crate::worker::Worker;

/// The identity `dn` authenticates as with `password`: the rootDN against `root_password`,
/// an entry against its userPassword values. Every failure is the same invalidCredentials,
/// and takes as long (`PasswordConfig::matching`). A success against a value not in the
/// configured scheme stores the password again in it (`password_upgrade_on_bind`).
/// `transport`: the connection's, which the access rules' `auth` check reads.
pub async fn verify_password(
    worker: &Worker,
    transport: &Transport,
    dn: NormDn,
    password: &[u8],
) -> Result<Identity, LdapError> {
    let invalid = || LdapError::new(ResultCode::INVALID_CREDENTIALS, "");
    let config = &worker.config();
    if config.is_root_dn(&dn) {
        let stored = config.root_password.iter().map(|p| p.as_bytes().to_vec()).collect();
        return match config.passwords.matching(stored, password.to_vec()).await? {
            Some(_) => Ok(Identity::Root(dn.into())),
            None => Err(invalid()),
        };
    }
    let (stored, id) = stored_passwords(worker, transport, &dn).await?;
    let Some(matched) = config.passwords.matching(stored.clone(), password.to_vec()).await? else {
        return Err(invalid());
    };
    let identity = Identity::User(dn.into());
    if let (Some(id), Some(value)) = (id, stored.get(matched)) {
        if config.passwords.upgrades(value) {
            upgrade(worker, config, id, &identity.author(), value, password).await;
        }
    }
    Ok(identity)
}

/// Replaces the matched `old` value with `password` hashed in the configured scheme. The
/// bind succeeds whether or not this does: it is logged and tried again at the next bind.
async fn upgrade(
    worker: &Worker,
    config: &DirectoryConfig,
    id: EntryId,
    dn: &str,
    old: &[u8],
    password: &[u8],
) {
    let new = match config.passwords.hash(password.to_vec()).await {
        Ok(new) => new,
        Err(e) => {
            tracing::debug!(error = %e, "password upgrade on bind: no hash");
            return;
        }
    };
    let changes = vec![
        LdifMod { op: ModOp::Delete, attr: Attribute::new("userPassword", vec![old.to_vec()]) },
        LdifMod { op: ModOp::Add, attr: Attribute::new("userPassword", vec![new]) },
    ];
    let author = dn.to_string();
    match worker.write(id.shard(), WriteOp::Modify { id, changes, author }).await {
        Ok(_) => tracing::info!(dn, scheme = config.passwords.scheme.name(), "password upgraded on bind"),
        Err(e) => {
            tracing::warn!(dn, error = %e.message, "password upgrade on bind failed; the next bind tries again")
        }
    }
}

/// The userPassword values of the entry named `dn`, and its id; none when there is no such
/// entry, or when the access rules give no `auth` on them (slapd asks for it, as the still
/// anonymous connection): the bind then checks the dummy hash and fails like a wrong
/// password, so the rules can't be probed, by the answer or by its timing.
async fn stored_passwords(
    worker: &Worker,
    transport: &Transport,
    dn: &NormDn,
) -> Result<(Vec<Vec<u8>>, Option<EntryId>), LdapError> {
    let Ok(located) = locate(worker, dn).await else {
        return Ok((Vec::new(), None));
    };
    let Some(record) = worker.fetch(located.id).await? else {
        return Ok((Vec::new(), None));
    };
    if !access::may_authenticate(&worker.config(), transport, dn, &record.entry) {
        return Ok((Vec::new(), None));
    }
    let values = record.entry.get("userPassword").map(|attr| attr.values.clone()).unwrap_or_default();
    Ok((values, Some(located.id)))
}
