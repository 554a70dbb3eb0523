//! Checking a DN and password: what a simple bind and SASL PLAIN (once its name is mapped
//! to a DN) share. Here, below both, so that neither imports the other for it.

use ferrodir_proto::{NormDn, ResultCode};

use crate::access;
use crate::error::LdapError;
use crate::requester::{Identity, Transport};
use crate::resolve::locate;
use crate::worker::Worker;

/// The identity `dn` authenticates as with `password`: the rootDN against `root_password`,
/// an entry against its userPassword values. Every failure is the same invalidCredentials.
/// `transport`: the connection's, which the access rules' `auth` check reads.
pub async fn verify_password(
    worker: &Worker,
    transport: &Transport,
    dn: NormDn,
    password: &[u8],
) -> Result<Identity, LdapError> {
    let invalid = || LdapError::new(ResultCode::INVALID_CREDENTIALS, "");
    let config = &worker.config();
    let (stored, identity) = if config.is_root_dn(&dn) {
        let stored = config.root_password.iter().map(|p| p.as_bytes().to_vec()).collect();
        (stored, Identity::Root(dn.into()))
    } else {
        (stored_passwords(worker, transport, &dn).await?, Identity::User(dn.into()))
    };
    if config.passwords.check(stored, password.to_vec()).await? {
        Ok(identity)
    } else {
        Err(invalid())
    }
}

/// The userPassword values of the entry named `dn`; none when there is no such entry, or
/// when the access rules give no `auth` on them (slapd asks for it, as the still anonymous
/// connection): the bind then checks the dummy hash and fails like a wrong password, so
/// the rules can't be probed, by the answer or by its timing.
async fn stored_passwords(
    worker: &Worker,
    transport: &Transport,
    dn: &NormDn,
) -> Result<Vec<Vec<u8>>, LdapError> {
    let Ok(located) = locate(worker, dn).await else {
        return Ok(Vec::new());
    };
    let Some(record) = worker.fetch(located.id).await? else {
        return Ok(Vec::new());
    };
    if !access::may_authenticate(&worker.config(), transport, dn, &record.entry) {
        return Ok(Vec::new());
    }
    Ok(record.entry.get("userPassword").map(|attr| attr.values.clone()).unwrap_or_default())
}
