//! Durability and the data directory's life cycle, seen from outside the process.
//!
//! - Writes of every kind (add, modify, delete, Modify DN) read back exactly, attribute
//!   values in the order they were sent, after a clean stop (SIGTERM) and after SIGKILL right
//!   after the last acknowledgement; and no acknowledged write is lost when SIGKILL lands in
//!   the middle of a stream of concurrent writes (ARCHITECTURE.md, "Group commit": a reply is
//!   sent only after its batch is durable).
//! - Changes of the tree's shape (first child under a leaf, last child deleted, a leaf moved
//!   to another parent) keep base, one-level and subtree searches and hasSubordinates
//!   consistent before and after restarts ("Changes that span shards"); a parent whose last
//!   child was deleted reads as a leaf on the next request and after SIGKILL right then.
//! - `ferrodir export` lists parents before children, each entry once.
//! - A data directory refuses a config with another shard count and names the way out.
//! - `ferrodir import` into a new data directory, then `serve`, shows the entries; a bad
//!   record stops the import with its line number and loads nothing, unless `--continue`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldap3::{LdapConn, LdapConnSettings, Mod, ResultEntry, Scope};

use crate::harness::{binary, Server, ADMIN_DN, ADMIN_PW, BASE};

/// Every LDAP operation gets this long; a server that hangs fails the test instead of
/// hanging it.
const OP_TIMEOUT: Duration = Duration::from_secs(15);

/// An entry's attributes in the order the server returns them, values in order.
pub type Attrs = Vec<(String, Vec<Vec<u8>>)>;

pub fn admin(server: &Server) -> LdapConn {
    admin_at(&server.url())
}

/// A new connection bound as the rootDN.
pub fn admin_at(url: &str) -> LdapConn {
    let settings = LdapConnSettings::new().set_conn_timeout(Duration::from_secs(10));
    let mut conn = LdapConn::with_settings(settings, url).expect("connect");
    let bound = conn.with_timeout(OP_TIMEOUT).simple_bind(ADMIN_DN, ADMIN_PW).expect("bind");
    assert_eq!(bound.rc, 0, "admin bind: {bound:?}");
    conn
}

/// Builds attributes from text, in order.
pub fn attrs(list: &[(&str, &[&str])]) -> Attrs {
    list.iter()
        .map(|(name, values)| (name.to_string(), values.iter().map(|v| v.as_bytes().to_vec()).collect()))
        .collect()
}

/// Sends an Add and returns its result code and the attributes exactly as they went on the
/// wire. ldap3 takes each attribute's values as a `HashSet` and encodes them in the set's
/// iteration order, which we read off the same set before handing it over.
pub fn add(conn: &mut LdapConn, dn: &str, wanted: &Attrs) -> (u32, Attrs) {
    let (result, sent) = try_add(conn, dn, wanted);
    (result.expect("add: no answer"), sent)
}

/// `add`, but a connection failure is returned instead of failing the test.
pub fn try_add(conn: &mut LdapConn, dn: &str, wanted: &Attrs) -> (Result<u32, ldap3::LdapError>, Attrs) {
    let mut sent = Vec::new();
    let mut request = Vec::new();
    for (name, values) in wanted {
        let set: HashSet<Vec<u8>> = values.iter().cloned().collect();
        sent.push((name.clone(), set.iter().cloned().collect::<Vec<_>>()));
        request.push((name.as_bytes().to_vec(), set));
    }
    let result = conn.with_timeout(OP_TIMEOUT).add(dn, request).map(|r| r.rc);
    (result, sent)
}

pub fn add_ok(conn: &mut LdapConn, dn: &str, wanted: &Attrs) -> Attrs {
    let (rc, sent) = add(conn, dn, wanted);
    assert_eq!(rc, 0, "add {dn}");
    sent
}

/// A Modify whose every change carries at most one value, so the order is ours.
pub fn modify(conn: &mut LdapConn, dn: &str, mods: Vec<Mod<&str>>) -> u32 {
    conn.with_timeout(OP_TIMEOUT).modify(dn, mods).expect("modify: no answer").rc
}

pub fn one(value: &str) -> HashSet<&str> {
    HashSet::from([value])
}

pub fn delete(conn: &mut LdapConn, dn: &str) -> u32 {
    conn.with_timeout(OP_TIMEOUT).delete(dn).expect("delete: no answer").rc
}

pub fn modify_dn(conn: &mut LdapConn, dn: &str, rdn: &str, delete_old: bool, superior: Option<&str>) -> u32 {
    conn.with_timeout(OP_TIMEOUT).modifydn(dn, rdn, delete_old, superior).expect("modify DN: no answer").rc
}

/// A search's entries (DN, attributes in server order) or its non-zero result code.
pub fn search(
    conn: &mut LdapConn,
    base: &str,
    scope: Scope,
    filter: &str,
    wanted: &[&str],
) -> Result<Vec<(String, Attrs)>, u32> {
    let result = conn
        .with_timeout(OP_TIMEOUT)
        .search(base, scope, filter, wanted.to_vec())
        .expect("search: no answer");
    if result.1.rc != 0 {
        return Err(result.1.rc);
    }
    Ok(result.0.into_iter().map(ordered_entry).collect())
}

/// Reads a SearchResultEntry without ldap3's `SearchEntry`, which keeps attributes in a
/// `HashMap` and so loses their order.
fn ordered_entry(entry: ResultEntry) -> (String, Attrs) {
    let parts = entry.0.match_id(4).and_then(|t| t.expect_constructed()).expect("SearchResultEntry");
    let mut parts = parts.into_iter();
    let dn = parts.next().and_then(|t| t.expect_primitive()).expect("objectName");
    let list = parts.next().and_then(|t| t.expect_constructed()).expect("attributes");
    let mut out = Vec::new();
    for partial in list {
        let mut pair = partial.expect_constructed().expect("PartialAttribute").into_iter();
        let name = pair.next().and_then(|t| t.expect_primitive()).expect("type");
        let values = pair.next().and_then(|t| t.expect_constructed()).expect("vals");
        let values = values.into_iter().map(|v| v.expect_primitive().expect("value")).collect();
        out.push((String::from_utf8(name).expect("utf-8 type"), values));
    }
    (String::from_utf8(dn).expect("utf-8 DN"), out)
}

/// The one entry named `dn`, with its user attributes; `Err(code)` if the search failed.
pub fn read(conn: &mut LdapConn, dn: &str) -> Result<Attrs, u32> {
    let mut found = search(conn, dn, Scope::Base, "(objectClass=*)", &["*"])?;
    assert_eq!(found.len(), 1, "base search of {dn} returned {} entries", found.len());
    let (returned_dn, attrs) = found.remove(0);
    assert!(returned_dn.eq_ignore_ascii_case(dn), "asked for {dn}, got {returned_dn}");
    Ok(attrs)
}

pub fn values<'a>(attrs: &'a Attrs, name: &str) -> Option<&'a Vec<Vec<u8>>> {
    attrs.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
}

fn has_subordinates(conn: &mut LdapConn, dn: &str) -> String {
    let found = search(conn, dn, Scope::Base, "(objectClass=*)", &["hasSubordinates"])
        .unwrap_or_else(|rc| panic!("base search of {dn}: result {rc}"));
    let value = found.first().and_then(|(_, a)| values(a, "hasSubordinates")).and_then(|v| v.first());
    String::from_utf8(value.cloned().unwrap_or_default()).expect("utf-8")
}

fn dns(entries: &[(String, Attrs)]) -> BTreeSet<String> {
    entries.iter().map(|(dn, _)| dn.to_lowercase()).collect()
}

fn person(uid: &str) -> Attrs {
    let photo: Vec<u8> = vec![0x00, 0xff, 0x10, b'\n', 0xfe, uid.len() as u8];
    let mut list = attrs(&[
        ("objectClass", &["top", "person", "organizationalPerson", "inetOrgPerson"]),
        ("uid", &[uid]),
        ("cn", &[&format!("Person {uid}"), &format!("{uid} the second name"), "Zoë Ångström"]),
        ("sn", &[&format!("Surname-{uid}")]),
        (
            "mail",
            &[
                &format!("{uid}-a@example.com"),
                &format!("{uid}-b@example.com"),
                &format!("{uid}-c@example.com"),
            ],
        ),
        ("description", &["trailing space ", ": leading colon", "plain"]),
    ]);
    list.push(("jpegPhoto".into(), vec![photo]));
    list
}

/// What the workload leaves behind: each entry as it must read back, whether its attribute
/// order is fixed (it was only ever added), and the names that must be gone.
struct Expected {
    entries: Vec<(String, Attrs, bool)>,
    gone: Vec<String>,
    container: String,
}

/// Adds, modifies, deletes and renames, asserting that each is acknowledged.
fn write_workload(conn: &mut LdapConn) -> Expected {
    let container = format!("ou=persist,{BASE}");
    let ou = attrs(&[
        ("objectClass", &["top", "organizationalUnit"]),
        ("ou", &["persist"]),
        ("description", &["first", "second", "third"]),
    ]);
    let ou_sent = add_ok(conn, &container, &ou);
    let mut sent = BTreeMap::new();
    for n in 1..=6 {
        let uid = format!("p{n}");
        let dn = format!("uid={uid},{container}");
        sent.insert(n, add_ok(conn, &dn, &person(&uid)));
    }
    // p1: one Modify with several changes, applied in order.
    let p1 = format!("uid=p1,{container}");
    let mods = vec![
        Mod::Replace("sn", one("Changed")),
        Mod::Add("mail", one("p1-extra@example.com")),
        Mod::Delete("mail", one("p1-b@example.com")),
        Mod::Add("description", one("added later")),
        Mod::Delete("jpegPhoto", HashSet::new()),
    ];
    assert_eq!(modify(conn, &p1, mods), 0, "modify {p1}");
    let mut p1_attrs = sent[&1].clone();
    p1_attrs.retain(|(name, _)| name != "jpegPhoto");
    for (name, vals) in p1_attrs.iter_mut() {
        match name.as_str() {
            "sn" => *vals = vec![b"Changed".to_vec()],
            "mail" => {
                vals.retain(|v| v != b"p1-b@example.com");
                vals.push(b"p1-extra@example.com".to_vec());
            }
            "description" => vals.push(b"added later".to_vec()),
            _ => {}
        }
    }
    assert_eq!(delete(conn, &format!("uid=p2,{container}")), 0, "delete p2");
    let p3 = format!("uid=p3,{container}");
    assert_eq!(modify_dn(conn, &p3, "uid=p3-renamed", true, None), 0, "modrdn p3");
    let p4 = format!("uid=p4,{container}");
    assert_eq!(modify_dn(conn, &p4, "uid=p4-alias", false, None), 0, "modrdn p4");
    let renamed = |n: usize, uids: &[&str]| {
        let mut list = sent[&n].clone();
        for (name, vals) in list.iter_mut() {
            if name == "uid" {
                *vals = uids.iter().map(|u| u.as_bytes().to_vec()).collect();
            }
        }
        list
    };
    let entries = vec![
        (container.clone(), ou_sent, true),
        (p1, p1_attrs, false),
        (format!("uid=p3-renamed,{container}"), renamed(3, &["p3-renamed"]), false),
        (format!("uid=p4-alias,{container}"), renamed(4, &["p4", "p4-alias"]), false),
        (format!("uid=p5,{container}"), sent[&5].clone(), true),
        (format!("uid=p6,{container}"), sent[&6].clone(), true),
    ];
    let gone = vec![format!("uid=p2,{container}"), p3, p4];
    Expected { entries, gone, container }
}

/// Attribute names and values in order, attribute order aside (Replace and Modify DN may
/// move an attribute); values of RDN attributes as a set.
fn by_name(list: &Attrs, rdn_attr: Option<&str>) -> BTreeMap<String, Vec<Vec<u8>>> {
    list.iter()
        .map(|(name, vals)| {
            let mut vals = vals.clone();
            if Some(name.as_str()) == rdn_attr {
                vals.sort();
            }
            (name.to_lowercase(), vals)
        })
        .collect()
}

fn verify(conn: &mut LdapConn, expected: &Expected, when: &str) {
    for (dn, want, exact_order) in &expected.entries {
        let got = read(conn, dn).unwrap_or_else(|rc| panic!("{when}: {dn} is missing (result {rc})"));
        if *exact_order {
            assert_eq!(&got, want, "{when}: {dn} does not read back as sent");
        } else {
            assert_eq!(by_name(&got, Some("uid")), by_name(want, Some("uid")), "{when}: {dn}");
        }
    }
    for dn in &expected.gone {
        assert_eq!(read(conn, dn), Err(32), "{when}: {dn} should be gone");
    }
    let children =
        search(conn, &expected.container, Scope::OneLevel, "(objectClass=*)", &["1.1"]).expect("one-level");
    let want: BTreeSet<String> =
        expected.entries.iter().skip(1).map(|(dn, _, _)| dn.to_lowercase()).collect();
    assert_eq!(dns(&children), want, "{when}: children of {}", expected.container);
}

/// The whole tree, every user attribute and hasSubordinates, sorted by DN.
fn snapshot(conn: &mut LdapConn) -> Vec<(String, Attrs)> {
    let mut all =
        search(conn, BASE, Scope::Subtree, "(objectClass=*)", &["*", "hasSubordinates"]).expect("subtree");
    all.sort_by_key(|a| a.0.to_lowercase());
    all
}

#[test]
fn sigterm_restart_keeps_every_write_exactly() {
    let mut server = Server::start();
    let mut conn = admin(&server);
    let expected = write_workload(&mut conn);
    verify(&mut conn, &expected, "before stop");
    let before = snapshot(&mut conn);
    drop(conn);
    server.stop();
    server.restart();
    let mut conn = admin(&server);
    verify(&mut conn, &expected, "after SIGTERM and restart");
    assert_eq!(snapshot(&mut conn), before, "the tree changed across a clean restart");
}

#[test]
fn sigkill_right_after_acknowledgement_keeps_every_write() {
    let mut server = Server::start();
    let mut conn = admin(&server);
    let expected = write_workload(&mut conn);
    // No read in between: the last acknowledgement is all the server had to go on.
    server.kill();
    drop(conn);
    server.restart();
    let mut conn = admin(&server);
    verify(&mut conn, &expected, "after SIGKILL and restart");
}

/// What one writer thread was told: per entry, the attributes it sent and whether its add
/// and its modify were acknowledged (false: the request went out but no answer came).
type Outcomes = Vec<(String, Attrs, bool, bool)>;

fn kill_writer(server_url: String, writer: usize, acked: Arc<AtomicUsize>) -> Outcomes {
    let mut conn = admin_at(&server_url);
    let mut outcomes = Outcomes::new();
    for i in 0..150 {
        let dn = format!("cn=w{writer}-{i},ou=people,{BASE}");
        let (result, sent) = try_add(&mut conn, &dn, &kill_entry(&format!("w{writer}-{i}")));
        let Ok(code) = result else {
            outcomes.push((dn, sent, false, false));
            return outcomes;
        };
        assert_eq!(code, 0, "add {dn} refused before the kill");
        acked.fetch_add(1, Ordering::SeqCst);
        let mods = vec![Mod::Replace("description", one("v2"))];
        match conn.with_timeout(OP_TIMEOUT).modify(&dn, mods) {
            Ok(result) => {
                assert_eq!(result.rc, 0, "modify {dn} refused before the kill");
                outcomes.push((dn, sent, true, true));
            }
            Err(_) => {
                outcomes.push((dn, sent, true, false));
                return outcomes;
            }
        }
    }
    outcomes
}

fn kill_entry(cn: &str) -> Attrs {
    attrs(&[
        ("objectClass", &["top", "person"]),
        ("cn", &[cn]),
        ("sn", &["Writer"]),
        ("description", &["v1"]),
        ("telephoneNumber", &["+1 555 0100", "+1 555 0101"]),
    ])
}

#[test]
fn sigkill_during_concurrent_writes_loses_no_acknowledged_write() {
    let mut server = Server::start();
    let acked = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (url, acked) = (server.url(), acked.clone());
            std::thread::spawn(move || kill_writer(url, w, acked))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.load(Ordering::SeqCst) < 120 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        acked.load(Ordering::SeqCst) >= 120,
        "writers too slow: {} adds in 30 s",
        acked.load(Ordering::SeqCst)
    );
    server.kill();
    let outcomes: Vec<_> = writers.into_iter().flat_map(|w| w.join().expect("writer panicked")).collect();
    server.restart();
    let mut conn = admin(&server);
    let mut acknowledged = 0;
    for (dn, sent, added, modified) in &outcomes {
        match read(&mut conn, dn) {
            Ok(got) => {
                let description = values(&got, "description").cloned().unwrap_or_default();
                let mut want = sent.clone();
                if *modified || description != vec![b"v1".to_vec()] {
                    // A modify acknowledged, or one in flight at the kill that made it.
                    for (name, vals) in want.iter_mut() {
                        if name == "description" {
                            *vals = vec![b"v2".to_vec()];
                        }
                    }
                }
                assert_eq!(by_name(&got, None), by_name(&want, None), "{dn} after SIGKILL");
            }
            Err(rc) => assert!(!added, "acknowledged add of {dn} lost after SIGKILL (result {rc})"),
        }
        acknowledged += usize::from(*added);
    }
    assert!(acknowledged >= 120, "only {acknowledged} acknowledged adds recorded");
}

/// The tree the structural test must leave: each DN and its children.
fn structural_tree() -> BTreeMap<String, Vec<String>> {
    let under = |rdns: &[&str], parent: &str| -> Vec<String> {
        rdns.iter().map(|r| format!("{r},{parent}")).collect()
    };
    let people = format!("ou=people,{BASE}");
    let groups = format!("ou=groups,{BASE}");
    let leafy = format!("ou=leafy,{BASE}");
    let emptied = format!("ou=emptied,{BASE}");
    let solo = format!("ou=solo,{BASE}");
    let mut tree = BTreeMap::new();
    tree.insert(
        BASE.to_string(),
        vec![people.clone(), groups.clone(), leafy.clone(), emptied.clone(), solo.clone()],
    );
    tree.insert(people.clone(), under(&["uid=alice"], &people));
    tree.insert(groups, vec![]);
    tree.insert(leafy.clone(), under(&["cn=c1", "uid=bob"], &leafy));
    tree.insert(emptied, vec![]);
    tree.insert(solo.clone(), under(&["cn=staff"], &solo));
    for leaf in [
        format!("uid=alice,{people}"),
        format!("cn=c1,{leafy}"),
        format!("uid=bob,{leafy}"),
        format!("cn=staff,{solo}"),
    ] {
        tree.insert(leaf, vec![]);
    }
    tree
}

fn check_structure(conn: &mut LdapConn, when: &str) {
    let tree = structural_tree();
    let all = search(conn, BASE, Scope::Subtree, "(objectClass=*)", &["1.1"]).expect("subtree search");
    let want: BTreeSet<String> = tree.keys().map(|dn| dn.to_lowercase()).collect();
    assert_eq!(dns(&all), want, "{when}: subtree search");
    assert_eq!(all.len(), want.len(), "{when}: subtree search returned a DN twice");
    for (dn, children) in &tree {
        let level = search(conn, dn, Scope::OneLevel, "(objectClass=*)", &["1.1"])
            .unwrap_or_else(|rc| panic!("{when}: one-level search of {dn}: result {rc}"));
        let want: BTreeSet<String> = children.iter().map(|c| c.to_lowercase()).collect();
        assert_eq!(dns(&level), want, "{when}: children of {dn}");
        let sub = search(conn, dn, Scope::Subtree, "(objectClass=*)", &["1.1"]).expect("subtree");
        let below = tree
            .keys()
            .filter(|d| d.to_lowercase().ends_with(&format!(",{}", dn.to_lowercase())) || *d == dn);
        assert_eq!(dns(&sub), below.map(|d| d.to_lowercase()).collect(), "{when}: subtree of {dn}");
        let flag = if children.is_empty() { "FALSE" } else { "TRUE" };
        assert_eq!(has_subordinates(conn, dn), flag, "{when}: hasSubordinates of {dn}");
    }
    for gone in [
        "uid=bob,ou=people",
        "cn=staff,ou=groups",
        "cn=gone,ou=emptied",
        "cn=again,ou=emptied",
        "cn=c2,ou=leafy",
    ] {
        assert_eq!(read(conn, &format!("{gone},{BASE}")), Err(32), "{when}: {gone} should be gone");
    }
    let staff = read(conn, &format!("cn=staff,ou=solo,{BASE}")).expect("moved group");
    let members =
        attrs(&[("member", &[&format!("uid=alice,ou=people,{BASE}"), &format!("uid=bob,ou=people,{BASE}")])]);
    assert_eq!(values(&staff, "member"), Some(&members[0].1), "{when}: moved group's members");
    let bob = read(conn, &format!("uid=bob,ou=leafy,{BASE}")).expect("moved bob");
    assert_eq!(values(&bob, "mail"), Some(&vec![b"bob@example.com".to_vec()]), "{when}: moved bob's mail");
}

#[test]
fn tree_shape_changes_stay_consistent_across_restarts() {
    let mut server = Server::start();
    let mut conn = admin(&server);
    let ou = |name: &str| attrs(&[("objectClass", &["top", "organizationalUnit"]), ("ou", &[name])]);
    let cn = |name: &str| attrs(&[("objectClass", &["top", "person"]), ("cn", &[name]), ("sn", &["S"])]);
    add_ok(&mut conn, &format!("ou=leafy,{BASE}"), &ou("leafy"));
    // The first child turns the leaf into a container.
    add_ok(&mut conn, &format!("cn=c1,ou=leafy,{BASE}"), &cn("c1"));
    add_ok(&mut conn, &format!("cn=c2,ou=leafy,{BASE}"), &cn("c2"));
    // A container whose last child leaves becomes a leaf again, twice.
    let emptied = format!("ou=emptied,{BASE}");
    add_ok(&mut conn, &emptied, &ou("emptied"));
    for child in ["again", "gone"] {
        add_ok(&mut conn, &format!("cn={child},{emptied}"), &cn(child));
        assert_eq!(has_subordinates(&mut conn, &emptied), "TRUE", "{emptied} with cn={child}");
        assert_eq!(delete(&mut conn, &format!("cn={child},{emptied}")), 0);
    }
    // Moving a leaf under a leaf promotes the new parent and empties the old one.
    add_ok(&mut conn, &format!("ou=solo,{BASE}"), &ou("solo"));
    let staff = format!("cn=staff,ou=groups,{BASE}");
    assert_eq!(modify_dn(&mut conn, &staff, "cn=staff", true, Some(&format!("ou=solo,{BASE}"))), 0);
    let bob = format!("uid=bob,ou=people,{BASE}");
    assert_eq!(modify_dn(&mut conn, &bob, "uid=bob", true, Some(&format!("ou=leafy,{BASE}"))), 0);
    assert_eq!(delete(&mut conn, &format!("cn=c2,ou=leafy,{BASE}")), 0);
    check_structure(&mut conn, "right after the writes");
    drop(conn);
    server.stop();
    server.restart();
    check_structure(&mut admin(&server), "after SIGTERM and restart");
    server.kill();
    server.restart();
    check_structure(&mut admin(&server), "after SIGKILL and restart");
}

/// Adds `ou=emptied` with one child and deletes the child; returns the parent's DN.
fn empty_a_container(conn: &mut LdapConn) -> String {
    let emptied = format!("ou=emptied,{BASE}");
    let child = format!("cn=gone,{emptied}");
    add_ok(conn, &emptied, &attrs(&[("objectClass", &["top", "organizationalUnit"]), ("ou", &["emptied"])]));
    add_ok(conn, &child, &attrs(&[("objectClass", &["top", "person"]), ("cn", &["gone"]), ("sn", &["S"])]));
    assert_eq!(has_subordinates(conn, &emptied), "TRUE", "{emptied} with a child");
    assert_eq!(delete(conn, &child), 0, "delete {child}");
    emptied
}

#[test]
fn last_child_deleted_reads_back_as_leaf_at_once() {
    let server = Server::start();
    let mut conn = admin(&server);
    let emptied = empty_a_container(&mut conn);
    // Read-your-writes: the very next request sees the parent without children.
    let level = search(&mut conn, &emptied, Scope::OneLevel, "(objectClass=*)", &["1.1"]).expect("one-level");
    assert!(level.is_empty(), "{emptied} still lists {level:?}");
    assert_eq!(
        has_subordinates(&mut conn, &emptied),
        "FALSE",
        "{emptied} right after its last child was deleted"
    );
}

#[test]
fn last_child_deleted_then_sigkill_restarts_as_leaf() {
    let mut server = Server::start();
    let mut conn = admin(&server);
    let emptied = empty_a_container(&mut conn);
    server.kill();
    drop(conn);
    server.restart();
    let mut conn = admin(&server);
    let level = search(&mut conn, &emptied, Scope::OneLevel, "(objectClass=*)", &["1.1"]).expect("one-level");
    assert!(level.is_empty(), "{emptied} lists {level:?} after restart");
    assert_eq!(has_subordinates(&mut conn, &emptied), "FALSE", "{emptied} after SIGKILL and restart");
}

/// The DNs of an LDIF file's records, in order (folded lines joined, `dn::` decoded).
pub fn ldif_dns(text: &str) -> Vec<String> {
    let mut logical: Vec<String> = Vec::new();
    for line in text.lines() {
        match line.strip_prefix(' ') {
            Some(rest) => logical.last_mut().expect("continuation first").push_str(rest),
            None => logical.push(line.to_string()),
        }
    }
    let mut dns = Vec::new();
    let mut at_record_start = true;
    for line in logical {
        if line.is_empty() {
            at_record_start = true;
            continue;
        }
        if at_record_start && !line.starts_with('#') && !line.starts_with("version:") {
            let dn = if let Some(b64) = line.strip_prefix("dn::") {
                String::from_utf8(base64_decode(b64.trim())).expect("utf-8 DN")
            } else {
                line.strip_prefix("dn:")
                    .unwrap_or_else(|| panic!("record starts with {line:?}"))
                    .trim()
                    .to_string()
            };
            dns.push(dn);
            at_record_start = false;
        }
    }
    dns
}

fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits: u32 = 0;
    let mut count = 0;
    let mut out = Vec::new();
    for byte in text.bytes().filter(|b| *b != b'=') {
        let value = ALPHABET.iter().position(|a| *a == byte).expect("base64 character") as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    out
}

fn parent_of(dn: &str) -> Option<&str> {
    dn.split_once(',').map(|(_, parent)| parent)
}

#[test]
fn export_lists_parents_first_and_each_entry_once() {
    let mut server = Server::start();
    let mut conn = admin(&server);
    let ou = |name: &str| attrs(&[("objectClass", &["top", "organizationalUnit"]), ("ou", &[name])]);
    let cn = |name: &str| attrs(&[("objectClass", &["top", "person"]), ("cn", &[name]), ("sn", &["S"])]);
    let mut expected: Vec<String> = search(&mut conn, BASE, Scope::Subtree, "(objectClass=*)", &["1.1"])
        .expect("example tree")
        .into_iter()
        .map(|(dn, _)| dn)
        .collect();
    // A leaf created early, moved later under a parent created after it.
    let early = format!("cn=early,ou=people,{BASE}");
    add_ok(&mut conn, &early, &cn("early"));
    let mut parent = BASE.to_string();
    for depth in 1..=4 {
        parent = format!("ou=level{depth},{parent}");
        add_ok(&mut conn, &parent, &ou(&format!("level{depth}")));
        expected.push(parent.clone());
        for leaf in ["a", "b", "Zoë"] {
            let dn = format!("cn={leaf}{depth},{parent}");
            add_ok(&mut conn, &dn, &cn(&format!("{leaf}{depth}")));
            expected.push(dn);
        }
    }
    assert_eq!(modify_dn(&mut conn, &early, "cn=early", true, Some(&parent)), 0);
    expected.push(format!("cn=early,{parent}"));
    assert_eq!(delete(&mut conn, &format!("cn=b2,ou=level2,ou=level1,{BASE}")), 0);
    expected.retain(|dn| !dn.starts_with("cn=b2,"));
    drop(conn);
    server.stop();
    let ldif = server.export();
    let listed = ldif_dns(&ldif);
    let lower: Vec<String> = listed.iter().map(|dn| dn.to_lowercase()).collect();
    let unique: BTreeSet<&String> = lower.iter().collect();
    assert_eq!(unique.len(), lower.len(), "an entry appears twice in the export:\n{ldif}");
    let want: BTreeSet<String> = expected.iter().map(|dn| dn.to_lowercase()).collect();
    assert_eq!(lower.iter().cloned().collect::<BTreeSet<_>>(), want, "exported DNs");
    for (index, dn) in lower.iter().enumerate() {
        if dn == &BASE.to_lowercase() {
            continue;
        }
        let parent = parent_of(dn).expect("a parent");
        let at = lower.iter().position(|d| d == parent);
        assert!(at.is_some_and(|at| at < index), "{dn} is listed before its parent (or without it)");
    }
    assert!(ldif.contains("dn:: "), "the non-ASCII DNs should be base64 (dn::)");
    for record in ldif.split("\n\n").filter(|r| !r.trim().is_empty()) {
        assert!(record.contains("\nobjectClass: "), "a record without objectClass: {record}");
    }
}

/// Runs the binary with `args`, waiting at most `limit`; returns (exit code, stdout, stderr).
pub fn run_binary(args: &[&str], limit: Duration) -> (i32, String, String) {
    // coreutils `timeout` bounds the run even if the binary never exits (124: it had to).
    let output = Command::new("timeout")
        .args(["-s", "KILL", &limit.as_secs().to_string(), binary()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ferrodir under timeout");
    let code = output.status.code().unwrap_or(137);
    assert!(code != 124 && code != 137, "ferrodir {args:?} still running after {limit:?}");
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (code, text(output.stdout), text(output.stderr))
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn other_shard_count_is_refused_with_the_way_out() {
    let mut server = Server::start();
    server.stop();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("two.toml");
    let text = format!(
        "shards = 2\nsuffixes = [\"{BASE}\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\n"
    );
    std::fs::write(&config, text).expect("write config");
    let args =
        ["serve", "--config", path(&config), "--data-dir", path(&server.data_dir), "--listen", "127.0.0.1:0"];
    let (code, stdout, stderr) = run_binary(&args, Duration::from_secs(20));
    assert_ne!(code, 0, "serve with shards = 2 on a 4-shard directory started; stderr: {stderr}");
    assert!(!stdout.contains("listening"), "it listened: {stdout}");
    for needle in ["4 shards", "export", "import"] {
        assert!(stderr.contains(needle), "stderr does not mention {needle:?}: {stderr}");
    }
    // The refusal changed nothing: the original config still serves the same data.
    server.restart();
    let alice = read(&mut admin(&server), &format!("uid=alice,ou=people,{BASE}")).expect("alice");
    assert_eq!(values(&alice, "mail"), Some(&vec![b"alice@example.com".to_vec()]));
}

const EMPTY_CONFIG: &str = r#"
shards = 4
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = false
[log]
level = "warn"
"#;

/// LDIF records for an import, and the line each record's `dn:` is on.
fn import_ldif(records: &[String]) -> (String, Vec<usize>) {
    let mut text = String::from("version: 1\n\n");
    let mut lines = Vec::new();
    for record in records {
        lines.push(text.lines().count() + 1);
        text.push_str(record);
        text.push_str("\n\n");
    }
    (text, lines)
}

fn import_records() -> Vec<String> {
    vec![
        format!("dn: {BASE}\nobjectClass: top\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Imported"),
        format!("dn: ou=imported,{BASE}\nobjectClass: top\nobjectClass: organizationalUnit\nou: imported\ndescription: zulu\ndescription: alpha\ndescription: mike"),
        // "cn=Zoë,ou=imported,dc=example,dc=com" in base64, and a folded line.
        "dn:: Y249Wm/DqyxvdT1pbXBvcnRlZCxkYz1leGFtcGxlLGRjPWNvbQ==\nobjectClass: top\nobjectClass: person\ncn:: Wm/Dqw==\nsn: Folded Surn\n ame".to_string(),
        format!("dn: cn=carol,ou=imported,{BASE}\nobjectClass: top\nobjectClass: person\ncn: carol\nsn: C\ntelephoneNumber: 3\ntelephoneNumber: 1\ntelephoneNumber: 2"),
    ]
}

#[test]
fn import_into_new_directory_then_serve() {
    let mut server = Server::start_with_config(EMPTY_CONFIG);
    assert_eq!(read(&mut admin(&server), BASE), Err(32), "example_data = false still loaded the example");
    server.stop();
    let dir = tempfile::tempdir().expect("tempdir");
    let (ldif, _) = import_ldif(&import_records());
    let file = dir.path().join("in.ldif");
    std::fs::write(&file, ldif).expect("write LDIF");
    let data = dir.path().join("imported");
    let args = ["import", "--config", path(server.config_path()), "--data-dir", path(&data), path(&file)];
    let (code, _, stderr) = run_binary(&args, Duration::from_secs(30));
    assert_eq!(code, 0, "import failed: {stderr}");
    assert!(stderr.contains("imported 4 entries"), "{stderr}");
    server.data_dir = data;
    server.restart();
    let mut conn = admin(&server);
    let all = search(&mut conn, BASE, Scope::Subtree, "(objectClass=*)", &["1.1"]).expect("subtree");
    let want: BTreeSet<String> = [
        BASE,
        "ou=imported,dc=example,dc=com",
        "cn=zoë,ou=imported,dc=example,dc=com",
        "cn=carol,ou=imported,dc=example,dc=com",
    ]
    .iter()
    .map(|dn| dn.to_string())
    .collect();
    assert_eq!(dns(&all), want);
    let ou = read(&mut conn, &format!("ou=imported,{BASE}")).expect("ou");
    let want = attrs(&[
        ("objectClass", &["top", "organizationalUnit"]),
        ("ou", &["imported"]),
        ("description", &["zulu", "alpha", "mike"]),
    ]);
    assert_eq!(ou, want, "imported entry, values in file order");
    let zoe = read(&mut conn, &format!("cn=Zoë,ou=imported,{BASE}")).expect("base64 DN entry");
    assert_eq!(values(&zoe, "sn"), Some(&vec![b"Folded Surname".to_vec()]));
    let carol = read(&mut conn, &format!("cn=carol,ou=imported,{BASE}")).expect("carol");
    assert_eq!(values(&carol, "telephoneNumber"), Some(&vec![b"3".to_vec(), b"1".to_vec(), b"2".to_vec()]));
    // The imported directory takes writes like any other.
    let cn = attrs(&[("objectClass", &["top", "person"]), ("cn", &["dave"]), ("sn", &["D"])]);
    add_ok(&mut conn, &format!("cn=dave,cn=carol,ou=imported,{BASE}"), &cn);
    assert_eq!(has_subordinates(&mut conn, &format!("cn=carol,ou=imported,{BASE}")), "TRUE");
}

#[test]
fn import_bad_record_loads_nothing_unless_continue() {
    let mut records = import_records();
    let no_class = format!("dn: cn=noclass,ou=imported,{BASE}\ncn: noclass\nsn: N");
    let orphan = format!("dn: cn=lost,ou=nowhere,{BASE}\nobjectClass: person\ncn: lost\nsn: L");
    let after = format!("dn: cn=after,ou=imported,{BASE}\nobjectClass: person\ncn: after\nsn: A");
    records.insert(2, no_class);
    records.push(orphan);
    records.push(after);
    let (ldif, lines) = import_ldif(&records);
    let (bad_line, orphan_line) = (lines[2], lines[5]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.ldif");
    std::fs::write(&file, &ldif).expect("write LDIF");
    let config = dir.path().join("ferrodir.toml");
    std::fs::write(&config, EMPTY_CONFIG).expect("write config");
    let data = dir.path().join("data");
    let import = |extra: &[&str]| {
        let mut args = vec!["import", "--config", path(&config), "--data-dir", path(&data)];
        args.extend_from_slice(extra);
        args.push(path(&file));
        run_binary(&args, Duration::from_secs(30))
    };
    let (code, _, stderr) = import(&[]);
    assert_ne!(code, 0, "an import with a bad record succeeded: {stderr}");
    assert!(stderr.contains(&format!("line {bad_line}:")), "no line {bad_line} in: {stderr}");
    let export = ["export", "--config", path(&config), "--data-dir", path(&data)];
    let (code, stdout, stderr) = run_binary(&export, Duration::from_secs(30));
    assert_eq!(code, 0, "export: {stderr}");
    assert_eq!(ldif_dns(&stdout), Vec::<String>::new(), "a failed import left entries behind");
    // import refuses a directory that holds entries, so this also proves it is empty.
    let (code, _, stderr) = import(&["--continue"]);
    assert_eq!(code, 0, "import --continue: {stderr}");
    assert!(stderr.contains(&format!("line {bad_line}:")), "bad record not reported: {stderr}");
    assert!(stderr.contains(&format!("line {orphan_line}:")), "orphan not reported: {stderr}");
    assert!(stderr.contains("imported 5 entries") && stderr.contains("2 skipped"), "{stderr}");
    let mut server = Server::start_with_config(EMPTY_CONFIG);
    server.stop();
    server.data_dir = data;
    server.restart();
    let all =
        search(&mut admin(&server), BASE, Scope::Subtree, "(objectClass=*)", &["1.1"]).expect("subtree");
    let want: BTreeSet<String> =
        ["", "ou=imported,", "cn=zoë,ou=imported,", "cn=carol,ou=imported,", "cn=after,ou=imported,"]
            .iter()
            .map(|rdn| format!("{rdn}{BASE}"))
            .collect();
    assert_eq!(dns(&all), want, "what --continue loaded");
}
