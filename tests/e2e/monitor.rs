//! cn=Monitor through real clients: the rootDN reads slapd's back-monitor layout; anonymous
//! and an ordinary user find nothing (noSuchObject, no matchedDN); an entry listed in
//! `monitor_readers` reads it; cn=Search's monitorOpCompleted grows by the searches sent;
//! a connection entry shows its peer and bind DN; every write is refused. The comparison
//! with slapd's own monitor database is tests/conformance/monitor.rs.

use ldap3::{LdapError, Mod, Scope, SearchEntry};

use crate::harness::{bound, Client, Server, ADMIN_DN, ADMIN_PW};

const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";
const SEARCH_DN: &str = "cn=Search,cn=Operations,cn=Monitor";

fn start() -> Server {
    Server::start_with_config(&format!(
        "shards = 2\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\nexample_data = true\n\
         monitor_readers = [\"{BOB}\"]\n[log]\nlevel = \"warn\"\n"
    ))
}

/// The entries a search returns, or its result code when it failed.
fn search(
    client: &mut Client,
    base: &str,
    scope: Scope,
    filter: &str,
    attrs: &[&str],
) -> Result<Vec<SearchEntry>, (u32, String)> {
    match client.search(base, scope, filter, attrs.to_vec()).expect("search sent").success() {
        Ok((entries, _)) => Ok(entries.into_iter().map(SearchEntry::construct).collect()),
        Err(LdapError::LdapResult { result }) => Err((result.rc, result.matched)),
        Err(e) => panic!("search of {base}: {e}"),
    }
}

fn counter(client: &mut Client, dn: &str, attr: &str) -> u64 {
    let entries = search(client, dn, Scope::Base, "(objectClass=*)", &[attr]).expect("monitor entry");
    let value = entries.first().and_then(|e| e.attrs.get(attr)).and_then(|v| v.first()).cloned();
    value.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{dn} has no numeric {attr}: {entries:?}"))
}

#[test]
fn the_root_dn_reads_the_monitor_tree_in_slapds_layout() {
    let server = start();
    let mut root = bound(&server, ADMIN_DN, ADMIN_PW);
    let entries =
        search(&mut root, "cn=Monitor", Scope::Subtree, "(objectClass=*)", &["1.1"]).expect("subtree");
    let dns: Vec<String> = entries.iter().map(|e| e.dn.clone()).collect();
    for dn in [
        "cn=Monitor",
        "cn=Total,cn=Connections,cn=Monitor",
        "cn=Current,cn=Connections,cn=Monitor",
        SEARCH_DN,
        "cn=Modrdn,cn=Operations,cn=Monitor",
        "cn=Bytes,cn=Statistics,cn=Monitor",
        "cn=PDU,cn=Statistics,cn=Monitor",
        "cn=Entries,cn=Statistics,cn=Monitor",
        "cn=Referrals,cn=Statistics,cn=Monitor",
        "cn=Max,cn=Threads,cn=Monitor",
        "cn=Start,cn=Time,cn=Monitor",
        "cn=Current,cn=Time,cn=Monitor",
        "cn=Uptime,cn=Time,cn=Monitor",
        "cn=Database 1,cn=Databases,cn=Monitor",
        "cn=Listener 0,cn=Listeners,cn=Monitor",
        "cn=Shard 0,cn=Shards,cn=Monitor",
        "cn=Shard 1,cn=Shards,cn=Monitor",
    ] {
        assert!(dns.iter().any(|d| d == dn), "{dn} missing from {dns:?}");
    }
    // One level: the ten operations; base: one entry; '+' brings the counters.
    let ops = search(
        &mut root,
        "cn=Operations,cn=Monitor",
        Scope::OneLevel,
        "(objectClass=monitorOperation)",
        &["1.1"],
    );
    assert_eq!(ops.expect("one level").len(), 10);
    let listener =
        search(&mut root, "cn=Listener 0,cn=Listeners,cn=Monitor", Scope::Base, "(objectClass=*)", &["+"]);
    let listener = listener.expect("listener");
    let local = listener[0].attrs.get("monitorConnectionLocalAddress").cloned().unwrap_or_default();
    assert_eq!(local, vec![format!("IP={}", server.url().trim_start_matches("ldap://"))]);
    // Filters follow the schema: integer ordering on monitorCounter.
    let big = search(&mut root, "cn=Statistics,cn=Monitor", Scope::OneLevel, "(monitorCounter>=1)", &["1.1"]);
    assert!(big.expect("ordering filter").iter().any(|e| e.dn == "cn=PDU,cn=Statistics,cn=Monitor"));
    // A DN that isn't there names its deepest ancestor, as slapd does.
    let missing = search(&mut root, "cn=Nope,cn=Operations,cn=Monitor", Scope::Base, "(objectClass=*)", &[]);
    assert_eq!(missing.unwrap_err(), (32, "cn=Operations,cn=Monitor".to_string()));
}

#[test]
fn only_the_root_dn_and_monitor_readers_see_the_monitor() {
    let server = start();
    let mut anonymous = bound(&server, "", "");
    let mut alice = bound(&server, ALICE, "password");
    for client in [&mut anonymous, &mut alice] {
        for base in ["cn=Monitor", SEARCH_DN] {
            let refused = search(client, base, Scope::Subtree, "(objectClass=*)", &[]);
            assert_eq!(refused.unwrap_err(), (32, String::new()), "{base}");
        }
    }
    let mut bob = bound(&server, BOB, "password");
    let entries = search(
        &mut bob,
        "cn=Connections,cn=Monitor",
        Scope::OneLevel,
        "(objectClass=monitorConnection)",
        &["+"],
    );
    let entries = entries.expect("a monitor reader reads");
    // Three connections are open; bob's own entry shows its bind DN and peer.
    assert_eq!(entries.len(), 3, "{entries:?}");
    let mine = entries
        .iter()
        .find(|e| e.attrs.get("monitorConnectionAuthzDN").is_some_and(|v| v.iter().any(|d| d == BOB)));
    let mine = mine.unwrap_or_else(|| panic!("no connection bound as bob: {entries:?}"));
    let peer = mine.attrs.get("monitorConnectionPeerAddress").cloned().unwrap_or_default();
    assert!(peer.first().is_some_and(|p| p.starts_with("IP=127.0.0.1:")), "{peer:?}");
    drop(alice);
    drop(anonymous);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(counter(&mut bob, "cn=Current,cn=Connections,cn=Monitor", "monitorCounter"), 1);
}

#[test]
fn monitor_counters_move_after_operations() {
    let server = start();
    let mut root = bound(&server, ADMIN_DN, ADMIN_PW);
    let before = counter(&mut root, SEARCH_DN, "monitorOpCompleted");
    let mut user = bound(&server, ALICE, "password");
    for _ in 0..5 {
        user.search("dc=example,dc=com", Scope::Base, "(objectClass=*)", vec!["1.1"])
            .expect("search")
            .success()
            .expect("ok");
    }
    let after = counter(&mut root, SEARCH_DN, "monitorOpCompleted");
    // The five searches, plus the first read of the counter itself (this one is in flight).
    assert_eq!(after, before + 6, "before {before}, after {after}");
    let initiated = counter(&mut root, SEARCH_DN, "monitorOpInitiated");
    assert!(initiated > after, "the search reading the counter is initiated, not completed");
    assert!(counter(&mut root, "cn=Bind,cn=Operations,cn=Monitor", "monitorOpCompleted") >= 2);
    assert!(counter(&mut root, "cn=Total,cn=Connections,cn=Monitor", "monitorCounter") >= 2);
    assert!(counter(&mut root, "cn=Entries,cn=Statistics,cn=Monitor", "monitorCounter") >= 5);
    assert!(counter(&mut root, "cn=Uptime,cn=Time,cn=Monitor", "monitoredInfo") < 600);
}

#[test]
fn writes_under_the_monitor_are_refused() {
    let server = start();
    let mut root = bound(&server, ADMIN_DN, ADMIN_PW);
    let dn = "cn=Total,cn=Connections,cn=Monitor";
    let add =
        root.add("cn=X,cn=Monitor", vec![("objectClass", ["monitorContainer"].into()), ("cn", ["X"].into())]);
    assert_eq!(add.expect("add sent").rc, 53);
    let modify = root.modify(dn, vec![Mod::Replace("description", ["x"].into())]);
    assert_eq!(modify.expect("modify sent").rc, 53);
    assert_eq!(root.delete(dn).expect("delete sent").rc, 53);
    assert_eq!(root.modifydn(dn, "cn=T", true, None).expect("moddn sent").rc, 53);
}
