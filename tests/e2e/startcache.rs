//! The start cache (server/src/data/startcache.rs) seen from outside: a clean stop leaves
//! it, the next start uses it and answers exactly as a start that read every shard would
//! (equality searches routed by the loaded Bloom filters, substring searches by the loaded
//! gram table, the tree's containers, the entry counts); a start after SIGKILL, or after a
//! shard file was touched while the server was stopped, reads the shards instead.

use std::collections::BTreeSet;

use ldap3::Scope;

use crate::harness::{free_port, metric_value, Server, TEST_CONFIG};
use crate::persistence::{add_ok, admin, attrs, search};

const PEOPLE: &str = "ou=cached,dc=example,dc=com";
const USERS: usize = 40;

fn config(metrics: std::net::SocketAddr) -> String {
    let config = TEST_CONFIG.replace("level = \"warn\"", "level = \"info\"");
    let config = config.replace(
        "example_data = true",
        "example_data = true\nindex = [\"objectClass eq\", \"uid,cn eq\", \"cn sub\", \"uid pres\"]",
    );
    format!("metrics_listen = \"{metrics}\"\n{config}")
}

fn user(conn: &mut ldap3::LdapConn, n: usize, parent: &str) {
    let uid = format!("cached{n:03}");
    let cn = format!("Cached Person {n:03}");
    add_ok(
        conn,
        &format!("uid={uid},{parent}"),
        &attrs(&[
            ("objectClass", &["top", "person", "organizationalPerson", "inetOrgPerson"]),
            ("uid", &[&uid]),
            ("cn", &[&cn]),
            ("sn", &["Cached"]),
        ]),
    );
}

/// What every start must answer the same: each user found by equality (exactly one DN), a
/// substring search's DNs, a one-level search under the nested container, and the entry
/// count the shards report.
#[derive(Debug, PartialEq)]
struct Answers {
    by_uid: Vec<BTreeSet<String>>,
    substring: BTreeSet<String>,
    nested: BTreeSet<String>,
    entries: f64,
}

fn answers(server: &Server, metrics: std::net::SocketAddr, users: usize) -> Answers {
    let mut conn = admin(server);
    let dns = |found: Vec<(String, crate::persistence::Attrs)>| -> BTreeSet<String> {
        found.into_iter().map(|(dn, _)| dn.to_lowercase()).collect()
    };
    let by_uid = (0..users)
        .map(|n| {
            let filter = format!("(uid=cached{n:03})");
            dns(search(&mut conn, "dc=example,dc=com", Scope::Subtree, &filter, &["1.1"])
                .expect("uid search"))
        })
        .collect();
    let substring =
        dns(search(&mut conn, "dc=example,dc=com", Scope::Subtree, "(cn=cached person 01*)", &["1.1"])
            .expect("substring search"));
    let nested =
        dns(search(&mut conn, &format!("ou=inner,{PEOPLE}"), Scope::OneLevel, "(objectClass=*)", &["1.1"])
            .expect("one-level search"));
    let entries = metric_sum(metrics, "ferrodir_shard_entries{");
    Answers { by_uid, substring, nested, entries }
}

/// The sum of every series of a metric family (one per shard).
fn metric_sum(metrics: std::net::SocketAddr, prefix: &str) -> f64 {
    let (_, text) = crate::harness::http_get(metrics, "/metrics");
    text.lines()
        .filter(|line| line.starts_with(prefix))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_clean_stop_leaves_a_start_cache_the_next_start_answers_from() {
    let metrics = free_port();
    let mut server = Server::start_logged(&config(metrics));
    let mut conn = admin(&server);
    add_ok(&mut conn, PEOPLE, &attrs(&[("objectClass", &["organizationalUnit"]), ("ou", &["cached"])]));
    let inner = format!("ou=inner,{PEOPLE}");
    add_ok(&mut conn, &inner, &attrs(&[("objectClass", &["organizationalUnit"]), ("ou", &["inner"])]));
    for n in 0..USERS {
        user(&mut conn, n, if n % 4 == 0 { &inner } else { PEOPLE });
    }
    drop(conn);
    let before = answers(&server, metrics, USERS);
    assert!(before.by_uid.iter().all(|found| found.len() == 1), "every user is found once: {before:?}");
    assert_eq!(before.substring.len(), 10, "cached person 010..019: {:?}", before.substring);
    assert_eq!(before.nested.len(), USERS / 4);
    assert!(metric_value(metrics, "ferrodir_shard_entries{").is_some(), "the shards report their entries");
    let cache = server.data_dir.join("start-cache");

    server.stop();
    assert!(server.log().contains("saved the start cache"), "a clean stop saves it:\n{}", server.log());
    assert!(cache.exists(), "the start cache is in the data directory");
    server.restart();
    let log = server.log();
    assert!(log.contains("started from the start cache"), "the start used it:\n{log}");
    assert!(!cache.exists(), "a start that takes the cache removes it");
    assert_eq!(answers(&server, metrics, USERS), before, "the same answers after a start from the cache");

    // Writes go on and are found through the loaded filters.
    let mut conn = admin(&server);
    user(&mut conn, USERS, &inner);
    drop(conn);
    let after_add = answers(&server, metrics, USERS + 1);
    assert_eq!(after_add.by_uid.last().map(BTreeSet::len), Some(1), "the new user is found by uid");
    assert_eq!(after_add.entries, before.entries + 1.0);

    // SIGKILL leaves no cache: the next start reads every shard, and answers the same.
    server.kill();
    assert!(!cache.exists());
    server.restart();
    let starts_from_cache = server.log().matches("started from the start cache").count();
    assert_eq!(starts_from_cache, 1, "no start from a cache after SIGKILL");
    assert_eq!(answers(&server, metrics, USERS + 1), after_add, "the same answers after reading every shard");

    // A shard file changed while the server was stopped voids the cache.
    server.stop();
    assert!(cache.exists());
    let log_file = server.data_dir.join("shard-002.wal");
    let handle = std::fs::OpenOptions::new().append(true).open(&log_file).expect("open a write log");
    handle.set_modified(std::time::SystemTime::now()).expect("touch it");
    drop(handle);
    server.restart();
    let log = server.log();
    assert!(log.contains("a shard file changed since the stop"), "the touched file voids it:\n{log}");
    assert_eq!(log.matches("started from the start cache").count(), 1);
    assert_eq!(answers(&server, metrics, USERS + 1), after_add);
    server.stop();
}
