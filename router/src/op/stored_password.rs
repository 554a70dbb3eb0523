//! userPassword values on their way to a shard. With `password_hash_on_write` on, Add,
//! Modify (add and replace) and Password Modify store each cleartext value hashed with
//! `password_scheme`, computed on the hash pool before the write is sent; values already
//! in a scheme the server reads (`{SSHA}...`, `{ARGON2}...`) are stored as given. The
//! offline paths (import, restore) never come here: they store what the file holds.
//!
//! A Modify that deletes a specific userPassword value compares the value as sent with the
//! values as stored, as slapd does: a cleartext value does not match its stored hash, so
//! deleting by cleartext answers noSuchAttribute. Delete the attribute (no values) or
//! replace it instead.

use ferrodir_proto::entry::Entry;
use ferrodir_proto::ldif::{LdifMod, ModOp};

use crate::config::DirectoryConfig;
use crate::error::LdapResultOf;

/// Whether the attribute description `name` (options allowed) is userPassword, by any of
/// its names or its OID.
pub fn is_user_password(config: &DirectoryConfig, name: &str) -> bool {
    let base = name.split(';').next().unwrap_or(name);
    match config.schema.attribute(base) {
        Some(attr) => attr.name().eq_ignore_ascii_case("userPassword"),
        None => base.eq_ignore_ascii_case("userPassword"),
    }
}

/// Hashes the cleartext userPassword values of an entry about to be added.
pub async fn hash_entry(config: &DirectoryConfig, entry: &mut Entry) -> LdapResultOf<()> {
    for attr in entry.attrs.iter_mut().filter(|a| is_user_password(config, &a.name)) {
        let values = std::mem::take(&mut attr.values);
        attr.values = config.passwords.for_storage(values).await?;
    }
    Ok(())
}

/// Hashes the cleartext userPassword values a Modify adds or replaces with.
pub async fn hash_changes(config: &DirectoryConfig, changes: &mut [LdifMod]) -> LdapResultOf<()> {
    for change in changes.iter_mut() {
        if matches!(change.op, ModOp::Add | ModOp::Replace) && is_user_password(config, &change.attr.name) {
            let values = std::mem::take(&mut change.attr.values);
            change.attr.values = config.passwords.for_storage(values).await?;
        }
    }
    Ok(())
}
