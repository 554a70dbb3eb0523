//! No known credentials off loopback. A server that other hosts can reach (its LDAP, LDAPS
//! or metrics listener bound to an address outside 127.0.0.0/8 and ::1, the unspecified
//! 0.0.0.0 and :: included) refuses to start while the rootDN's password is the built-in
//! one, or while the example entries hold their published passwords: the README prints
//! both, so such a server would be anyone's. On loopback they stay, so that the README's
//! first command works as it is (docs/DECISIONS.md, "No known credentials off loopback").
//!
//! Two checks, both before any listener is bound: [`check_config`] before the data
//! directory is opened (the built-in root password; example entries about to be loaded
//! into a new directory), so that a refused start leaves nothing behind, and
//! [`check_directory`] once it is open (example entries an earlier start on loopback
//! loaded and nobody has changed since).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ferrodir_router::DirectoryConfig;
use ferrodir_shard::{shard_for_child, EntryRecord, ShardCore, ShardInfo, Skeleton};

use crate::config::{Config, BUILT_IN_ROOT_PASSWORD};
use crate::data::example::{EXAMPLE_LDIF, EXAMPLE_PASSWORD};
use crate::data::store::Store;
use crate::serve::listeners::Listen;

/// The listeners of `config` (with `listen` for the plain one) that other hosts can reach:
/// (what it is, its address).
pub fn exposed_listeners(config: &Config, listen: &Listen) -> Vec<(&'static str, SocketAddr)> {
    let plain = match listen {
        Listen::Bound(listener) => listener.local_addr().ok(),
        Listen::Configured => Some(config.listen),
    };
    [("ldap", plain), ("ldaps", config.listen_ldaps), ("metrics", config.metrics_listen)]
        .into_iter()
        .filter_map(|(what, addr)| addr.filter(|a| beyond_loopback(*a)).map(|a| (what, a)))
        .collect()
}

/// Whether other hosts can reach `addr`: anything but 127.0.0.0/8 and ::1 (an IPv4-mapped
/// loopback address, ::ffff:127.0.0.1, is loopback too).
pub fn beyond_loopback(addr: SocketAddr) -> bool {
    match addr.ip() {
        IpAddr::V4(ip) => !ip.is_loopback(),
        IpAddr::V6(ip) => !(ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())),
    }
}

/// Before the data directory is opened: refuses a server beyond loopback whose rootDN has
/// the built-in password (in cleartext or hashed), or that would load the example entries
/// into a new data directory (`new_directory`).
pub fn check_config(config: &Config, listen: &Listen, new_directory: bool) -> anyhow::Result<()> {
    let exposed = exposed_listeners(config, listen);
    if exposed.is_empty() {
        return Ok(());
    }
    let mut known = Vec::new();
    if !config.root_dn.is_empty()
        && ferrodir_router::password_matches(
            config.root_password.as_bytes(),
            BUILT_IN_ROOT_PASSWORD.as_bytes(),
        )
    {
        known.push(format!("the rootDN {} has the built-in password", config.root_dn));
    }
    if config.example_data && new_directory {
        known.push(
            "example_data = true would load the example entries, whose passwords are published".to_string(),
        );
    }
    refuse(&exposed, &known)
}

/// Once the data directory is open: refuses a server beyond loopback while an example entry
/// still holds a userPassword that [`EXAMPLE_PASSWORD`] matches (loaded by an earlier start
/// on loopback). A few point reads, and a password check for each value found.
pub fn check_directory(
    config: &Config,
    listen: &Listen,
    store: &Store,
    directory: &DirectoryConfig,
    skeleton: &Skeleton,
) -> anyhow::Result<()> {
    let exposed = exposed_listeners(config, listen);
    if exposed.is_empty() {
        return Ok(());
    }
    let mut known = Vec::new();
    for dn in example_dns_with_passwords() {
        let Some(record) = entry_by_dn(config, store, directory, skeleton, &dn)? else { continue };
        let values = record.entry.get("userPassword").map(|a| a.values.as_slice()).unwrap_or_default();
        if values.iter().any(|v| ferrodir_router::password_matches(v, EXAMPLE_PASSWORD.as_bytes())) {
            known.push(format!("the example entry {dn} still has its published password"));
        }
    }
    refuse(&exposed, &known)
}

/// The DNs of the example entries that carry a userPassword.
fn example_dns_with_passwords() -> Vec<String> {
    let reader = ferrodir_proto::ldif::LdifReader::new(EXAMPLE_LDIF.as_bytes());
    reader
        .filter_map(Result::ok)
        .filter_map(|(_, record)| match record {
            ferrodir_proto::ldif::LdifRecord::Content { dn, attrs }
                if attrs.iter().any(|a| a.name.eq_ignore_ascii_case("userPassword")) =>
            {
                Some(dn)
            }
            _ => None,
        })
        .collect()
}

/// The entry named `dn`, read from the shards' committed state before serving: its parent
/// from the skeleton (every entry with children is a container there), then its DN record
/// and its entry on their shards. None when no such entry exists or `dn` is outside every
/// suffix.
fn entry_by_dn(
    config: &Config,
    store: &Store,
    directory: &DirectoryConfig,
    skeleton: &Skeleton,
    dn: &str,
) -> anyhow::Result<Option<Arc<EntryRecord>>> {
    let norm = directory.dn_rules().parse(dn).map_err(|e| anyhow::anyhow!("bad example DN {dn:?}: {e}"))?;
    let Some(suffix) = directory.suffix_of(&norm) else { return Ok(None) };
    let below = norm.len() - suffix.dn.len();
    // Names from the top: the suffix (one name under the virtual root), then each RDN.
    let mut names: Vec<&str> = vec![suffix.norm.as_str()];
    names.extend(norm.rdns.iter().take(below).rev().map(String::as_str));
    let Some((leaf, parents)) = names.split_last() else { return Ok(None) };
    let found = skeleton.resolve(parents.iter().copied());
    if found.matched != parents.len() {
        return Ok(None);
    }
    // Cores of their own, without the entry caches: nothing read here is left behind for
    // the shard actors, which open those caches when they start.
    let core = |index: usize| -> anyhow::Result<ShardCore> {
        let engine = store.engines.get(index).ok_or_else(|| anyhow::anyhow!("no shard {index}"))?;
        let info = ShardInfo { entry_cache: None, ..store.shard_info(index, config) };
        Ok(ShardCore::new(info, engine.clone())?)
    };
    let home = shard_for_child(found.deepest, leaf, store.engines.len());
    let Some(id) = core(home)?.lookup_dn(found.deepest, leaf)? else { return Ok(None) };
    Ok(core(id.shard())?.record(id)?)
}

/// An error naming the exposed listeners, the known credentials and the ways out, when
/// there are any known credentials.
fn refuse(exposed: &[(&str, SocketAddr)], known: &[String]) -> anyhow::Result<()> {
    if known.is_empty() {
        return Ok(());
    }
    let listeners: Vec<String> = exposed.iter().map(|(what, addr)| format!("{what} on {addr}")).collect();
    anyhow::bail!(
        "refusing to serve beyond loopback ({}) with known credentials: {}. \
         Set root_password in a config file to a password of your own (`ferrodir hash-password` \
         reads one and prints the hash to paste there), set example_data = false for a new data \
         directory and change or delete the example entries' passwords, or listen on 127.0.0.1 \
         (docs/OPERATIONS.md, \"Passwords\")",
        listeners.join(", "),
        known.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_127_8_and_1() {
        for addr in ["127.0.0.1:389", "127.1.2.3:1", "[::1]:389", "[::ffff:127.0.0.1]:389"] {
            assert!(!beyond_loopback(addr.parse().unwrap()), "{addr}");
        }
        for addr in ["0.0.0.0:389", "[::]:389", "10.0.0.1:389", "[fe80::1]:1", "[::ffff:10.0.0.1]:1"] {
            assert!(beyond_loopback(addr.parse().unwrap()), "{addr}");
        }
    }

    #[test]
    fn the_built_in_password_is_refused_beyond_loopback_only() {
        let embedded = Config::embedded();
        assert!(check_config(&embedded, &Listen::Configured, true).is_ok(), "the README's first command");
        let exposed = Config { listen: "0.0.0.0:389".parse().unwrap(), ..Config::embedded() };
        let error = check_config(&exposed, &Listen::Configured, false).unwrap_err().to_string();
        assert!(error.contains("ldap on 0.0.0.0:389") && error.contains("built-in password"), "{error}");
        assert!(error.contains("root_password") && error.contains("ferrodir hash-password"), "{error}");
        // The metrics port counts too; a hash of "secret" is still "secret".
        let hashed = Config {
            metrics_listen: Some("0.0.0.0:9390".parse().unwrap()),
            root_password: ferrodir_router::StorageScheme::Ssha512.hash(b"secret"),
            example_data: false,
            ..Config::default()
        };
        let error = check_config(&hashed, &Listen::Configured, true).unwrap_err().to_string();
        assert!(error.contains("metrics on 0.0.0.0:9390") && !error.contains("would load"), "{error}");
        // A password of one's own, and no example entries: starts.
        let own = Config { root_password: "own".into(), example_data: false, ..exposed.clone() };
        assert!(check_config(&own, &Listen::Configured, true).is_ok());
        // The example entries: refused for a new directory only (an existing one is read).
        let examples = Config { root_password: "own".into(), ..exposed };
        let error = check_config(&examples, &Listen::Configured, true).unwrap_err().to_string();
        assert!(error.contains("example_data = true would load") && !error.contains("rootDN"), "{error}");
        assert!(check_config(&examples, &Listen::Configured, false).is_ok());
    }

    #[test]
    fn the_example_entries_with_passwords_are_alice_and_bob() {
        let dns = example_dns_with_passwords();
        assert_eq!(dns, ["uid=alice,ou=people,dc=example,dc=com", "uid=bob,ou=people,dc=example,dc=com"]);
    }
}
