//! The shared entry cache (`shard::entrycache`, issue #14): every worker reads and fills
//! each shard's one cache, so these tests read through connections on every worker.
//!
//! - Read-your-writes across workers: after each acknowledged modify, delete or re-add, a
//!   base read and a subtree search from a connection on every worker see the new state,
//!   though every worker had the old version cached (read twice before the write).
//! - A cache far smaller than the directory (`cache_bytes` of 256 KiB: a couple of entries
//!   per partition) evicts all the time and still answers every read with the entry's own
//!   attributes, before and after modifies.

use ldap3::{LdapConn, Mod, Scope};

use crate::harness::{Server, TEST_CONFIG};
use crate::persistence::{add, admin, attrs, delete, modify, one, read, search, values};

const PEOPLE: &str = "ou=people,dc=example,dc=com";

/// Connections are handed to workers in turn, so eight of them cover the four workers
/// of the test config twice, whatever the admin connections took.
fn readers(server: &Server) -> Vec<LdapConn> {
    (0..8).map(|_| admin(server)).collect()
}

fn person(cn: &str, description: &str) -> crate::persistence::Attrs {
    attrs(&[
        ("objectClass", &["top", "person"]),
        ("cn", &[cn]),
        ("sn", &["S"]),
        ("description", &[description]),
    ])
}

fn description_of(conn: &mut LdapConn, dn: &str) -> Result<String, u32> {
    let entry = read(conn, dn)?;
    let values = values(&entry, "description").expect("a description");
    Ok(String::from_utf8(values[0].clone()).expect("utf-8"))
}

/// The description a subtree search for `(cn=NAME)` from the suffix finds: the path of
/// `(uid=...)` lookups, inline on every shard the Bloom filters keep.
fn description_by_search(conn: &mut LdapConn, cn: &str) -> Option<String> {
    let found = search(conn, "dc=example,dc=com", Scope::Subtree, &format!("(cn={cn})"), &["description"])
        .unwrap_or_else(|rc| panic!("search for {cn}: result {rc}"));
    assert!(found.len() <= 1, "{cn}: {} entries", found.len());
    found
        .first()
        .map(|(_, a)| String::from_utf8(values(a, "description").expect("description")[0].clone()).unwrap())
}

#[test]
fn cache_shared_by_every_worker_reads_back_every_acknowledged_write() {
    let server = Server::start();
    let mut writer = admin(&server);
    let names: Vec<String> = (0..12).map(|i| format!("cache{i:02}")).collect();
    for name in &names {
        let (rc, _) = add(&mut writer, &format!("cn={name},{PEOPLE}"), &person(name, "v0"));
        assert_eq!(rc, 0, "add {name}");
    }
    let mut readers = readers(&server);
    // Every worker caches every entry: twice, so the second read is a hit.
    for reader in readers.iter_mut() {
        for name in &names {
            for _ in 0..2 {
                assert_eq!(description_of(reader, &format!("cn={name},{PEOPLE}")).unwrap(), "v0");
            }
        }
    }
    for round in 1..=6 {
        for name in &names {
            let dn = format!("cn={name},{PEOPLE}");
            let value = format!("v{round}");
            assert_eq!(modify(&mut writer, &dn, vec![Mod::Replace("description", one(&value))]), 0);
            for (i, reader) in readers.iter_mut().enumerate() {
                assert_eq!(description_of(reader, &dn).unwrap(), value, "reader {i}, {dn} after the modify");
                assert_eq!(
                    description_by_search(reader, name).as_deref(),
                    Some(value.as_str()),
                    "reader {i}"
                );
            }
        }
    }
    // A delete is seen everywhere at once, and so is an add under the same name.
    for name in names.iter().take(4) {
        let dn = format!("cn={name},{PEOPLE}");
        assert_eq!(delete(&mut writer, &dn), 0);
        for reader in readers.iter_mut() {
            assert_eq!(description_of(reader, &dn), Err(32), "{dn} after its delete");
            assert_eq!(description_by_search(reader, name), None);
        }
        let (rc, _) = add(&mut writer, &dn, &person(name, "reborn"));
        assert_eq!(rc, 0);
        for reader in readers.iter_mut() {
            assert_eq!(description_of(reader, &dn).unwrap(), "reborn");
            assert_eq!(description_by_search(reader, name).as_deref(), Some("reborn"));
        }
    }
}

#[test]
fn cache_far_smaller_than_the_directory_still_answers_every_read() {
    let config = TEST_CONFIG.replacen("[log]", "[limits]\ncache_bytes = 262144\n[log]", 1);
    let server = Server::start_with_config(&config);
    let mut writer = admin(&server);
    let names: Vec<String> = (0..300).map(|i| format!("small{i:03}")).collect();
    for name in &names {
        let (rc, _) = add(&mut writer, &format!("cn={name},{PEOPLE}"), &person(name, &format!("d-{name}")));
        assert_eq!(rc, 0, "add {name}");
    }
    let mut readers = readers(&server);
    for pass in 0..2 {
        for (i, name) in names.iter().enumerate() {
            let reader = &mut readers[(i + pass) % 8];
            let dn = format!("cn={name},{PEOPLE}");
            assert_eq!(description_of(reader, &dn).unwrap(), format!("d-{name}"), "pass {pass}");
        }
    }
    for name in names.iter().step_by(7) {
        let dn = format!("cn={name},{PEOPLE}");
        assert_eq!(modify(&mut writer, &dn, vec![Mod::Replace("description", one("changed"))]), 0);
    }
    for (i, name) in names.iter().enumerate() {
        let want = if i % 7 == 0 { "changed".to_string() } else { format!("d-{name}") };
        for reader in readers.iter_mut().take(4) {
            assert_eq!(description_of(reader, &format!("cn={name},{PEOPLE}")).unwrap(), want);
        }
    }
}
