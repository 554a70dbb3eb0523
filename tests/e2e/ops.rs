//! LDAP operations through a real client (the ldap3 crate, sync `LdapConn`): searches with
//! every scope, the common filter kinds and attribute selections; binds and Who am I?;
//! add, modify (including increment), compare, modify DN and delete as the rootDN with their
//! result codes in corner cases; access refusals; search limits and errors; the root DSE; and
//! a bulk add that a subtree search must return in full across the four shards.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use ldap3::exop::WhoAmI;
use ldap3::{LdapResult, Mod, Scope, SearchEntry, SearchOptions};

use crate::harness::{connect_url, message_reads_config, Client, Server, ADMIN_DN, ADMIN_PW, BASE};

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const GROUPS: &str = "ou=groups,dc=example,dc=com";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";
const STAFF: &str = "cn=staff,ou=groups,dc=example,dc=com";
const EXAMPLE_DNS: [&str; 6] = [BASE, PEOPLE, GROUPS, ALICE, BOB, STAFF];

fn connect(server: &Server) -> Client {
    connect_url(&server.url())
}

fn bound(server: &Server, dn: &str, password: &str) -> Client {
    let mut client = connect(server);
    let result = client.simple_bind(dn, password).expect("bind");
    assert_eq!(result.rc, 0, "bind as {dn}: {result:?}");
    client
}

fn admin(server: &Server) -> Client {
    bound(server, ADMIN_DN, ADMIN_PW)
}

fn set<'a>(values: &[&'a str]) -> HashSet<&'a str> {
    values.iter().copied().collect()
}

fn sorted(values: &[&str]) -> BTreeSet<String> {
    values.iter().map(|v| v.to_string()).collect()
}

/// Runs a search; returns its entries and its SearchResultDone.
fn search(
    client: &mut Client,
    base: &str,
    scope: Scope,
    filter: &str,
    attrs: &[&str],
) -> (Vec<SearchEntry>, LdapResult) {
    let result = client.search(base, scope, filter, attrs.to_vec()).expect("search");
    let entries = result.0.into_iter().map(SearchEntry::construct).collect();
    (entries, result.1)
}

/// The DNs a successful search returns, lowercased.
fn dns(client: &mut Client, base: &str, scope: Scope, filter: &str) -> BTreeSet<String> {
    let (entries, done) = search(client, base, scope, filter, &["1.1"]);
    assert_eq!(done.rc, 0, "search {base} {filter}: {done:?}");
    entries.iter().map(|e| e.dn.to_ascii_lowercase()).collect()
}

/// The entry at `dn` with `attrs`, or None if the base search says noSuchObject.
fn read(client: &mut Client, dn: &str, attrs: &[&str]) -> Option<SearchEntry> {
    let (mut entries, done) = search(client, dn, Scope::Base, "(objectClass=*)", attrs);
    if done.rc == 32 {
        return None;
    }
    assert_eq!(done.rc, 0, "read {dn}: {done:?}");
    assert_eq!(entries.len(), 1, "read {dn}");
    entries.pop()
}

/// The values of `attr` (case-insensitive name) in `entry`; empty if it is absent.
fn values(entry: &SearchEntry, attr: &str) -> BTreeSet<String> {
    entry
        .attrs
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(attr))
        .flat_map(|(_, vals)| vals.iter().cloned())
        .collect()
}

fn has_attr(entry: &SearchEntry, attr: &str) -> bool {
    entry.attrs.keys().chain(entry.bin_attrs.keys()).any(|n| n.eq_ignore_ascii_case(attr))
}

fn read_values(client: &mut Client, dn: &str, attr: &str) -> BTreeSet<String> {
    let entry = read(client, dn, &[attr]).unwrap_or_else(|| panic!("{dn} is missing"));
    values(&entry, attr)
}

fn has_subordinates(client: &mut Client, dn: &str) -> String {
    let entry = read(client, dn, &["hasSubordinates"]).unwrap_or_else(|| panic!("{dn} missing"));
    let vals = values(&entry, "hasSubordinates");
    assert_eq!(vals.len(), 1, "hasSubordinates of {dn}: {vals:?}");
    vals.into_iter().next().unwrap_or_default()
}

fn whoami(client: &mut Client) -> String {
    let (exop, result) = client.extended(WhoAmI).expect("who am i").success().expect("success");
    assert_eq!(result.rc, 0);
    String::from_utf8(exop.val.unwrap_or_default()).expect("utf-8 authzId")
}

fn add_ou(client: &mut Client, dn: &str, ou: &str) -> LdapResult {
    let attrs = vec![("objectClass", set(&["top", "organizationalUnit"])), ("ou", set(&[ou]))];
    client.add(dn, attrs).expect("add")
}

fn add_person(client: &mut Client, dn: &str, uid: &str) -> LdapResult {
    let cn = format!("Person {uid}");
    let attrs = vec![
        ("objectClass", set(&["top", "person", "organizationalPerson", "inetOrgPerson"])),
        ("uid", set(&[uid])),
        ("cn", set(&[cn.as_str()])),
        ("sn", set(&[uid])),
    ];
    client.add(dn, attrs).expect("add")
}

// ---- search ----

#[test]
fn anonymous_subtree_search_returns_the_example_tree() {
    let server = Server::start();
    let mut client = connect(&server);
    let (entries, done) = search(&mut client, BASE, Scope::Subtree, "(objectClass=*)", &[]);
    assert_eq!(done.rc, 0, "{done:?}");
    let found: BTreeSet<String> = entries.iter().map(|e| e.dn.clone()).collect();
    assert_eq!(found, sorted(&EXAMPLE_DNS));
    let alice = entries.iter().find(|e| e.dn == ALICE).expect("alice");
    assert_eq!(values(alice, "cn"), sorted(&["Alice Liddell"]));
    assert_eq!(values(alice, "mail"), sorted(&["alice@example.com"]));
    assert_eq!(values(alice, "objectClass").len(), 4);
}

#[test]
fn base_and_one_level_scopes() {
    base_and_one_level_scopes_on(&Server::start());
}

#[test]
fn base_and_one_level_scopes_with_message_reads() {
    base_and_one_level_scopes_on(&Server::start_with_config(&message_reads_config()));
}

fn base_and_one_level_scopes_on(server: &Server) {
    let mut client = connect(server);
    assert_eq!(dns(&mut client, BASE, Scope::Base, "(objectClass=*)"), sorted(&[BASE]));
    assert_eq!(dns(&mut client, ALICE, Scope::Base, "(objectClass=*)"), sorted(&[ALICE]));
    assert_eq!(dns(&mut client, BASE, Scope::OneLevel, "(objectClass=*)"), sorted(&[PEOPLE, GROUPS]));
    assert_eq!(dns(&mut client, PEOPLE, Scope::OneLevel, "(objectClass=*)"), sorted(&[ALICE, BOB]));
    assert_eq!(dns(&mut client, ALICE, Scope::OneLevel, "(objectClass=*)"), sorted(&[]));
    // A base search whose filter doesn't match the base returns nothing, successfully.
    assert_eq!(dns(&mut client, BASE, Scope::Base, "(objectClass=person)"), sorted(&[]));
}

#[test]
fn filters_select_the_right_entries() {
    filters_select_the_right_entries_on(&Server::start());
}

#[test]
fn filters_select_the_right_entries_with_message_reads() {
    filters_select_the_right_entries_on(&Server::start_with_config(&message_reads_config()));
}

fn filters_select_the_right_entries_on(server: &Server) {
    let mut client = connect(server);
    let cases: &[(&str, &[&str])] = &[
        ("(uid=alice)", &[ALICE]),
        ("(cn=Bob Builder)", &[BOB]),
        ("(&(objectClass=person)(sn=Liddell))", &[ALICE]),
        ("(&(objectClass=person)(sn=Nobody))", &[]),
        ("(|(uid=alice)(uid=bob))", &[ALICE, BOB]),
        ("(|(cn=staff)(ou=groups))", &[GROUPS, STAFF]),
        ("(!(objectClass=person))", &[BASE, PEOPLE, GROUPS, STAFF]),
        ("(&(objectClass=inetOrgPerson)(!(uid=bob)))", &[ALICE]),
        ("(mail=*)", &[ALICE, BOB]),
        ("(member=*)", &[STAFF]),
        ("(givenName=*)", &[ALICE]),
        ("(cn=Ali*)", &[ALICE]),
        ("(cn=*Build*)", &[BOB]),
        ("(mail=*@example.com)", &[ALICE, BOB]),
        ("(cn=A*ce*dell)", &[ALICE]),
        ("(cn=A*xyz*dell)", &[]),
        // caseIgnoreMatch: the assertion's case doesn't matter.
        ("(cn=alice liddell)", &[ALICE]),
        ("(UID=ALICE)", &[ALICE]),
        ("(ou=PEOPLE)", &[PEOPLE]),
        ("(member=UID=Alice,OU=People,DC=Example,DC=Com)", &[STAFF]),
        ("(cn=nobody)", &[]),
    ];
    for (filter, expected) in cases {
        let found = dns(&mut client, BASE, Scope::Subtree, filter);
        assert_eq!(found, sorted(expected), "filter {filter}");
    }
}

#[test]
fn attribute_selection() {
    let server = Server::start();
    let mut client = connect(&server);
    // Named attributes only.
    let entry = read(&mut client, ALICE, &["cn", "mail"]).expect("alice");
    let names: BTreeSet<String> = entry.attrs.keys().map(|k| k.to_ascii_lowercase()).collect();
    assert_eq!(names, sorted(&["cn", "mail"]));
    // 1.1: no attributes at all.
    let entry = read(&mut client, ALICE, &["1.1"]).expect("alice");
    assert!(entry.attrs.is_empty() && entry.bin_attrs.is_empty(), "1.1 gave {entry:?}");
    // *: every user attribute, no operational ones.
    let entry = read(&mut client, ALICE, &["*"]).expect("alice");
    for attr in ["objectClass", "uid", "cn", "sn", "givenName", "mail"] {
        assert!(has_attr(&entry, attr), "* lacks {attr}: {entry:?}");
    }
    assert!(!has_attr(&entry, "entryDN") && !has_attr(&entry, "hasSubordinates"), "{entry:?}");
    // +: operational attributes only.
    let entry = read(&mut client, PEOPLE, &["+"]).expect("people");
    assert_eq!(values(&entry, "entryDN"), sorted(&[PEOPLE]));
    assert_eq!(values(&entry, "hasSubordinates"), sorted(&["TRUE"]));
    assert!(!has_attr(&entry, "ou") && !has_attr(&entry, "objectClass"), "{entry:?}");
    let entry = read(&mut client, ALICE, &["+"]).expect("alice");
    assert_eq!(values(&entry, "hasSubordinates"), sorted(&["FALSE"]));
    // * and + together, and a named operational attribute beside a user one.
    let entry = read(&mut client, ALICE, &["*", "+"]).expect("alice");
    assert!(has_attr(&entry, "uid") && has_attr(&entry, "entryDN"), "{entry:?}");
    let entry = read(&mut client, ALICE, &["uid", "entryDN"]).expect("alice");
    assert_eq!(values(&entry, "entryDN"), sorted(&[ALICE]));
    assert_eq!(values(&entry, "uid"), sorted(&["alice"]));
    assert!(!has_attr(&entry, "cn"), "{entry:?}");
}

#[test]
fn types_only_returns_names_without_values() {
    let server = Server::start();
    let mut client = connect(&server);
    client.with_search_options(SearchOptions::new().typesonly(true));
    let (entries, done) = search(&mut client, ALICE, Scope::Base, "(objectClass=*)", &["cn", "mail"]);
    assert_eq!(done.rc, 0, "{done:?}");
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert!(has_attr(entry, "cn") && has_attr(entry, "mail"), "{entry:?}");
    assert!(entry.attrs.values().all(Vec::is_empty), "typesOnly gave values: {entry:?}");
}

#[test]
fn user_password_is_only_readable_by_its_owner_and_the_admin() {
    let server = Server::start();
    let mut anonymous = connect(&server);
    let mut alice = bound(&server, ALICE, "password");
    let mut root = admin(&server);
    for (who, client) in [("anonymous", &mut anonymous), ("alice", &mut alice)] {
        for attrs in [&[][..], &["*"][..], &["userPassword"][..], &["*", "+"][..]] {
            for dn in [ALICE, BOB] {
                let entry = read(client, dn, attrs).expect("entry");
                // The default rules (Debian's): `self write` on userPassword.
                let own = who == "alice" && dn == ALICE;
                assert_eq!(has_attr(&entry, "userPassword"), own, "{who} read {dn} {attrs:?}: {entry:?}");
            }
        }
        // Naming it in a filter doesn't bring others' back either.
        let (entries, _) = search(client, BASE, Scope::Subtree, "(userPassword=*)", &["*"]);
        let own = |e: &SearchEntry| who == "alice" && e.dn.eq_ignore_ascii_case(ALICE);
        assert!(entries.iter().all(|e| has_attr(e, "userPassword") == own(e)), "{who}: {entries:?}");
    }
    assert_eq!(read_values(&mut root, BOB, "userPassword"), sorted(&["password"]));
    let entry = read(&mut root, ALICE, &[]).expect("alice");
    let stored = values(&entry, "userPassword");
    let binary = entry.bin_attrs.keys().any(|k| k.eq_ignore_ascii_case("userPassword"));
    // Stored hashed: the example's {SSHA}, upgraded to {ARGON2} by alice's bind above
    // (password_upgrade_on_bind).
    assert!(stored.iter().any(|v| v.starts_with("{ARGON2}")) || binary, "{entry:?}");
}

// ---- bind and Who am I? ----

#[test]
fn binds_and_who_am_i() {
    let server = Server::start();
    let mut client = connect(&server);
    assert_eq!(whoami(&mut client), "", "anonymous authzId");
    for (dn, password) in [(ADMIN_DN, ADMIN_PW), (ALICE, "password"), (BOB, "password")] {
        let result = client.simple_bind(dn, password).expect("bind");
        assert_eq!(result.rc, 0, "bind as {dn}: {result:?}");
        assert_eq!(whoami(&mut client).to_ascii_lowercase(), format!("dn:{dn}"));
    }
    // An anonymous bind returns the connection to anonymous.
    let result = client.simple_bind("", "").expect("bind");
    assert_eq!(result.rc, 0, "{result:?}");
    assert_eq!(whoami(&mut client), "");
}

#[test]
fn failed_binds_do_not_reveal_which_dns_exist() {
    let server = Server::start();
    let mut client = connect(&server);
    let attempts = [
        (ALICE, "wrong"),
        (BOB, "wrong"),
        (ADMIN_DN, "wrong"),
        ("uid=nobody,ou=people,dc=example,dc=com", "password"),
        ("uid=nobody,ou=nowhere,dc=example,dc=com", "password"),
        ("cn=admin,dc=other,dc=org", "secret"),
        // An entry without userPassword.
        (PEOPLE, "password"),
    ];
    let mut texts = BTreeSet::new();
    for (dn, password) in attempts {
        let result = client.simple_bind(dn, password).expect("bind");
        assert_eq!(result.rc, 49, "bind as {dn} / {password}: {result:?}");
        assert_eq!(result.matched, "", "bind as {dn}: {result:?}");
        texts.insert(result.text);
        // A failed bind leaves the connection anonymous (RFC 4511 §4.2.1).
        assert_eq!(whoami(&mut client), "");
    }
    assert_eq!(texts.len(), 1, "diagnostics differ: {texts:?}");
}

#[test]
fn bind_with_dn_and_empty_password_is_refused() {
    let server = Server::start();
    let mut client = connect(&server);
    for dn in [ALICE, ADMIN_DN] {
        let result = client.simple_bind(dn, "").expect("bind");
        assert_eq!(result.rc, 53, "unauthenticated bind as {dn}: {result:?}");
        assert_eq!(whoami(&mut client), "");
    }
}

// ---- add ----

#[test]
fn add_then_search_finds_it() {
    let server = Server::start();
    let mut root = admin(&server);
    let carol = "uid=carol,ou=people,dc=example,dc=com";
    assert_eq!(add_person(&mut root, carol, "carol").rc, 0);
    assert_eq!(read_values(&mut root, carol, "cn"), sorted(&["Person carol"]));
    let mut anonymous = connect(&server);
    assert_eq!(dns(&mut anonymous, BASE, Scope::Subtree, "(uid=carol)"), sorted(&[carol]));
    assert_eq!(
        dns(&mut anonymous, PEOPLE, Scope::OneLevel, "(objectClass=person)"),
        sorted(&[ALICE, BOB, carol])
    );
}

#[test]
fn add_errors() {
    let server = Server::start();
    let mut root = admin(&server);
    let result = add_person(&mut root, ALICE, "alice");
    assert_eq!(result.rc, 68, "duplicate: {result:?}");

    let result = add_person(&mut root, "uid=x,ou=missing,ou=people,dc=example,dc=com", "x");
    assert_eq!(result.rc, 32, "missing parent: {result:?}");
    assert_eq!(result.matched.to_ascii_lowercase(), PEOPLE, "{result:?}");
    // Below a leaf: the leaf is the deepest existing ancestor.
    let result = add_person(&mut root, "uid=x,uid=y,uid=alice,ou=people,dc=example,dc=com", "x");
    assert_eq!(result.rc, 32, "missing parent below a leaf: {result:?}");
    assert_eq!(result.matched.to_ascii_lowercase(), ALICE, "{result:?}");

    let no_class = vec![("ou", set(&["x"]))];
    let result = root.add("ou=x,dc=example,dc=com", no_class).expect("add");
    assert_eq!(result.rc, 65, "no objectClass: {result:?}");

    // Like slapd, an entry that lacks its RDN value gets it added (RFC 4512 §2.3.1 needs it).
    let attrs = vec![("objectClass", set(&["organizationalUnit"])), ("ou", set(&["other"]))];
    let result = root.add("ou=x,dc=example,dc=com", attrs).expect("add");
    assert_eq!(result.rc, 0, "RDN value missing: {result:?}");
    let added = read(&mut root, "ou=x,dc=example,dc=com", &["ou"]).expect("added entry");
    assert_eq!(values(&added, "ou"), sorted(&["other", "x"]));
    assert_eq!(root.delete("ou=x,dc=example,dc=com").expect("delete").rc, 0);

    // None of the failures left anything behind.
    let all = dns(&mut root, BASE, Scope::Subtree, "(objectClass=*)");
    assert_eq!(all, sorted(&EXAMPLE_DNS));
}

// ---- modify ----

#[test]
fn modify_add_replace_delete() {
    modify_add_replace_delete_on(&Server::start());
}

#[test]
fn modify_add_replace_delete_with_message_reads() {
    modify_add_replace_delete_on(&Server::start_with_config(&message_reads_config()));
}

fn modify_add_replace_delete_on(server: &Server) {
    let mut root = admin(server);
    let changes = vec![
        Mod::Add("mail", set(&["liddell@example.com"])),
        Mod::Add("description", set(&["first", "second"])),
        Mod::Replace("sn", set(&["Hargreaves"])),
    ];
    assert_eq!(root.modify(ALICE, changes).expect("modify").rc, 0);
    let entry = read(&mut root, ALICE, &["mail", "description", "sn"]).expect("alice");
    assert_eq!(values(&entry, "mail"), sorted(&["alice@example.com", "liddell@example.com"]));
    assert_eq!(values(&entry, "description"), sorted(&["first", "second"]));
    assert_eq!(values(&entry, "sn"), sorted(&["Hargreaves"]));
    assert_eq!(dns(&mut root, BASE, Scope::Subtree, "(sn=hargreaves)"), sorted(&[ALICE]));
    assert_eq!(dns(&mut root, BASE, Scope::Subtree, "(sn=Liddell)"), sorted(&[]));

    let changes = vec![
        Mod::Delete("mail", set(&["alice@example.com"])),
        Mod::Delete("description", HashSet::new()),
        Mod::Replace("givenName", HashSet::new()),
        Mod::Replace("title", set(&["Queen"])),
    ];
    assert_eq!(root.modify(ALICE, changes).expect("modify").rc, 0);
    let entry = read(&mut root, ALICE, &["*"]).expect("alice");
    assert_eq!(values(&entry, "mail"), sorted(&["liddell@example.com"]));
    assert!(!has_attr(&entry, "description"), "{entry:?}");
    assert!(!has_attr(&entry, "givenName"), "{entry:?}");
    assert_eq!(values(&entry, "title"), sorted(&["Queen"]));
    assert_eq!(dns(&mut root, BASE, Scope::Subtree, "(description=*)"), sorted(&[]));
    assert_eq!(dns(&mut root, BASE, Scope::Subtree, "(title=queen)"), sorted(&[ALICE]));
}

#[test]
fn modify_errors_change_nothing() {
    let server = Server::start();
    let mut root = admin(&server);
    let cases: Vec<(Vec<Mod<&str>>, u32, &str)> = vec![
        (vec![Mod::Delete("mail", set(&["nobody@example.com"]))], 16, "missing value"),
        (vec![Mod::Delete("description", HashSet::new())], 16, "missing attribute"),
        (vec![Mod::Add("mail", set(&["ALICE@example.com"]))], 20, "existing value"),
        (vec![Mod::Delete("uid", set(&["alice"]))], 67, "RDN value"),
        (vec![Mod::Delete("uid", HashSet::new())], 67, "RDN attribute"),
        (vec![Mod::Replace("uid", set(&["alicia"]))], 67, "RDN value replaced"),
        // All or nothing: the valid first change must not survive the failing second.
        (
            vec![Mod::Replace("sn", set(&["Changed"])), Mod::Delete("mail", set(&["nobody@example.com"]))],
            16,
            "atomicity",
        ),
    ];
    for (changes, code, what) in cases {
        let result = root.modify(ALICE, changes).expect("modify");
        assert_eq!(result.rc, code, "{what}: {result:?}");
    }
    let entry = read(&mut root, ALICE, &["uid", "sn", "mail"]).expect("alice");
    assert_eq!(values(&entry, "uid"), sorted(&["alice"]));
    assert_eq!(values(&entry, "sn"), sorted(&["Liddell"]));
    assert_eq!(values(&entry, "mail"), sorted(&["alice@example.com"]));

    let missing = "uid=nobody,ou=people,dc=example,dc=com";
    let result = root.modify(missing, vec![Mod::Replace("sn", set(&["x"]))]).expect("modify");
    assert_eq!(result.rc, 32, "missing entry: {result:?}");
    assert_eq!(result.matched.to_ascii_lowercase(), PEOPLE, "{result:?}");
}

#[test]
fn modify_increment() {
    let server = Server::start();
    let mut root = admin(&server);
    // uidNumber is allowed by no class of bob's: extensibleObject lets the schema accept it.
    let result = root
        .modify(
            BOB,
            vec![Mod::Add("objectClass", set(&["extensibleObject"])), Mod::Add("uidNumber", set(&["1000"]))],
        )
        .expect("modify");
    assert_eq!(result.rc, 0, "{result:?}");
    let result = root.modify(BOB, vec![Mod::Increment("uidNumber", "5")]).expect("modify");
    assert_eq!(result.rc, 0, "{result:?}");
    assert_eq!(read_values(&mut root, BOB, "uidNumber"), sorted(&["1005"]));
    let result = root.modify(BOB, vec![Mod::Increment("uidNumber", "-7")]).expect("modify");
    assert_eq!(result.rc, 0, "{result:?}");
    assert_eq!(read_values(&mut root, BOB, "uidNumber"), sorted(&["998"]));
    // RFC 4525: incrementing an absent attribute is noSuchAttribute.
    let result = root.modify(BOB, vec![Mod::Increment("gidNumber", "1")]).expect("modify");
    assert_eq!(result.rc, 16, "{result:?}");
}

// ---- compare ----

#[test]
fn compare_results() {
    let server = Server::start();
    let mut client = connect(&server);
    let cases = [
        (ALICE, "cn", "Alice Liddell", 6),
        (ALICE, "cn", "alice   liddell", 6),
        (ALICE, "objectClass", "inetOrgPerson", 6),
        (ALICE, "mail", "bob@example.com", 5),
        (STAFF, "member", BOB, 6),
        (ALICE, "description", "anything", 16),
    ];
    for (dn, attr, value, code) in cases {
        let result = client.compare(dn, attr, value).expect("compare").0;
        assert_eq!(result.rc, code, "compare {dn} {attr}={value}: {result:?}");
    }
    let result = client.compare("uid=nobody,ou=people,dc=example,dc=com", "cn", "x").expect("c").0;
    assert_eq!(result.rc, 32, "{result:?}");
    // userPassword can't be read anonymously, so it can't be compared either.
    let result = client.compare(BOB, "userPassword", "password").expect("compare").0;
    assert_eq!(result.rc, 50, "{result:?}");
    let result = admin(&server).compare(BOB, "userPassword", "password").expect("compare").0;
    assert_eq!(result.rc, 6, "{result:?}");
}

// ---- modify DN ----

#[test]
fn rename_with_and_without_deleting_the_old_rdn() {
    let server = Server::start();
    let mut root = admin(&server);
    let alicia = "uid=alicia,ou=people,dc=example,dc=com";
    let result = root.modifydn(ALICE, "uid=alicia", true, None).expect("modrdn");
    assert_eq!(result.rc, 0, "{result:?}");
    assert!(read(&mut root, ALICE, &[]).is_none(), "old DN still there");
    let entry = read(&mut root, alicia, &["uid", "cn", "entryDN"]).expect("renamed entry");
    assert_eq!(values(&entry, "uid"), sorted(&["alicia"]));
    assert_eq!(values(&entry, "cn"), sorted(&["Alice Liddell"]));
    assert_eq!(values(&entry, "entryDN"), sorted(&[alicia]));
    // The new name authenticates with the old password.
    let result = connect(&server).simple_bind(alicia, "password").expect("bind");
    assert_eq!(result.rc, 0, "{result:?}");

    let robert = "uid=robert,ou=people,dc=example,dc=com";
    let result = root.modifydn(BOB, "uid=robert", false, None).expect("modrdn");
    assert_eq!(result.rc, 0, "{result:?}");
    assert!(read(&mut root, BOB, &[]).is_none(), "old DN still there");
    assert_eq!(read_values(&mut root, robert, "uid"), sorted(&["bob", "robert"]));
    assert_eq!(dns(&mut root, BASE, Scope::Subtree, "(uid=bob)"), sorted(&[robert]));
    assert_eq!(dns(&mut root, PEOPLE, Scope::OneLevel, "(objectClass=*)"), sorted(&[alicia, robert]));
}

#[test]
fn move_to_another_parent() {
    let server = Server::start();
    let mut root = admin(&server);
    // To an existing container.
    let moved = "uid=bob,ou=groups,dc=example,dc=com";
    let result = root.modifydn(BOB, "uid=bob", true, Some(GROUPS)).expect("move");
    assert_eq!(result.rc, 0, "{result:?}");
    assert!(read(&mut root, BOB, &[]).is_none());
    assert_eq!(read_values(&mut root, moved, "uid"), sorted(&["bob"]));
    assert_eq!(dns(&mut root, GROUPS, Scope::OneLevel, "(objectClass=*)"), sorted(&[STAFF, moved]));

    // To a leaf, which becomes a container; with a new RDN at the same time.
    let leaf = "ou=leaf,dc=example,dc=com";
    assert_eq!(add_ou(&mut root, leaf, "leaf").rc, 0);
    assert_eq!(has_subordinates(&mut root, leaf), "FALSE");
    let result = root.modifydn(ALICE, "uid=alicia", true, Some(leaf)).expect("move");
    assert_eq!(result.rc, 0, "{result:?}");
    let moved = "uid=alicia,ou=leaf,dc=example,dc=com";
    assert!(read(&mut root, ALICE, &[]).is_none());
    assert_eq!(read_values(&mut root, moved, "uid"), sorted(&["alicia"]));
    assert_eq!(has_subordinates(&mut root, leaf), "TRUE");
    assert_eq!(dns(&mut root, leaf, Scope::Subtree, "(objectClass=*)"), sorted(&[leaf, moved]));
    assert_eq!(dns(&mut root, BASE, Scope::Subtree, "(cn=alice liddell)"), sorted(&[moved]));

    // To a missing parent.
    let result = root.modifydn(moved, "uid=alicia", true, Some("ou=nowhere,dc=example,dc=com"));
    assert_eq!(result.expect("move").rc, 32);
}

#[test]
fn rename_onto_an_existing_dn_fails() {
    let server = Server::start();
    let mut root = admin(&server);
    let result = root.modifydn(BOB, "uid=alice", true, None).expect("modrdn");
    assert_eq!(result.rc, 68, "{result:?}");
    let result = root.modifydn(STAFF, "ou=people", true, Some(BASE)).expect("move");
    assert_eq!(result.rc, 68, "{result:?}");
    assert_eq!(read_values(&mut root, BOB, "uid"), sorted(&["bob"]));
    assert_eq!(read_values(&mut root, STAFF, "cn"), sorted(&["staff"]));
    let result = root.modifydn("uid=nobody,ou=people,dc=example,dc=com", "uid=x", true, None);
    assert_eq!(result.expect("modrdn").rc, 32);
}

// ---- delete ----

#[test]
fn delete_leaf_non_leaf_and_missing() {
    let server = Server::start();
    let mut root = admin(&server);
    let result = root.delete(PEOPLE).expect("delete");
    assert_eq!(result.rc, 66, "non-leaf: {result:?}");
    assert!(read(&mut root, PEOPLE, &[]).is_some());
    let result = root.delete(BASE).expect("delete");
    assert_eq!(result.rc, 66, "suffix: {result:?}");

    assert_eq!(root.delete(BOB).expect("delete").rc, 0);
    assert!(read(&mut root, BOB, &[]).is_none());
    assert_eq!(dns(&mut root, BASE, Scope::Subtree, "(uid=bob)"), sorted(&[]));
    let result = root.delete(BOB).expect("delete");
    assert_eq!(result.rc, 32, "deleted twice: {result:?}");
    assert_eq!(result.matched.to_ascii_lowercase(), PEOPLE, "{result:?}");
    let result = root.delete("uid=x,ou=nowhere,dc=example,dc=com").expect("delete");
    assert_eq!(result.rc, 32, "{result:?}");
    assert_eq!(result.matched.to_ascii_lowercase(), BASE, "{result:?}");
}

#[test]
fn deleting_the_last_child_demotes_the_parent() {
    let server = Server::start();
    let mut root = admin(&server);
    assert_eq!(has_subordinates(&mut root, GROUPS), "TRUE");
    assert_eq!(root.delete(STAFF).expect("delete").rc, 0);
    // Demotion is asynchronous (the coordinator closes the parent on every shard).
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut seen = has_subordinates(&mut root, GROUPS);
    while seen != "FALSE" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        seen = has_subordinates(&mut root, GROUPS);
    }
    assert_eq!(seen, "FALSE", "ou=groups still has subordinates after 2s");
    // Now a leaf, it can be deleted, or given a child again.
    assert_eq!(add_ou(&mut root, "ou=sub,ou=groups,dc=example,dc=com", "sub").rc, 0);
    assert_eq!(has_subordinates(&mut root, GROUPS), "TRUE");
    assert_eq!(root.delete("ou=sub,ou=groups,dc=example,dc=com").expect("delete").rc, 0);
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut result = root.delete(GROUPS).expect("delete");
    while result.rc == 66 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        result = root.delete(GROUPS).expect("delete");
    }
    assert_eq!(result.rc, 0, "{result:?}");
    assert_eq!(dns(&mut root, BASE, Scope::OneLevel, "(objectClass=*)"), sorted(&[PEOPLE]));
}

// ---- access ----

#[test]
fn anonymous_writes_need_authentication() {
    let server = Server::start();
    let mut client = connect(&server);
    assert_eq!(add_ou(&mut client, "ou=x,dc=example,dc=com", "x").rc, 8);
    let result = client.modify(ALICE, vec![Mod::Replace("sn", set(&["x"]))]).expect("modify");
    assert_eq!(result.rc, 8, "{result:?}");
    assert_eq!(client.delete(BOB).expect("delete").rc, 8);
    assert_eq!(client.modifydn(BOB, "uid=x", true, None).expect("modrdn").rc, 8);
    let mut root = admin(&server);
    assert_eq!(dns(&mut root, BASE, Scope::Subtree, "(objectClass=*)"), sorted(&EXAMPLE_DNS));
    assert_eq!(read_values(&mut root, ALICE, "sn"), sorted(&["Liddell"]));
}

#[test]
fn users_may_not_write() {
    let server = Server::start();
    let mut alice = bound(&server, ALICE, "password");
    // Not even her own entry.
    let result = alice.modify(ALICE, vec![Mod::Replace("sn", set(&["x"]))]).expect("modify");
    assert_eq!(result.rc, 50, "{result:?}");
    assert_eq!(add_ou(&mut alice, "ou=x,dc=example,dc=com", "x").rc, 50);
    assert_eq!(alice.delete(BOB).expect("delete").rc, 50);
    assert_eq!(alice.modifydn(BOB, "uid=x", true, None).expect("modrdn").rc, 50);
    let mut root = admin(&server);
    assert_eq!(dns(&mut root, BASE, Scope::Subtree, "(objectClass=*)"), sorted(&EXAMPLE_DNS));
    assert_eq!(read_values(&mut root, ALICE, "sn"), sorted(&["Liddell"]));
}

// ---- search errors and limits ----

#[test]
fn search_of_a_missing_base() {
    let server = Server::start();
    let mut client = connect(&server);
    let base = "uid=x,ou=nowhere,dc=example,dc=com";
    let (entries, done) = search(&mut client, base, Scope::Subtree, "(objectClass=*)", &[]);
    assert!(entries.is_empty());
    assert_eq!(done.rc, 32, "{done:?}");
    assert_eq!(done.matched.to_ascii_lowercase(), BASE, "{done:?}");
    let (_, done) = search(&mut client, "uid=x,ou=people,dc=example,dc=com", Scope::Base, "(a=*)", &[]);
    assert_eq!(done.rc, 32, "{done:?}");
    assert_eq!(done.matched.to_ascii_lowercase(), PEOPLE, "{done:?}");
    let (entries, done) = search(&mut client, "dc=other,dc=org", Scope::Subtree, "(a=*)", &[]);
    assert!(entries.is_empty());
    assert_eq!(done.rc, 32, "{done:?}");
    assert_eq!(done.matched, "", "{done:?}");
}

#[test]
fn size_limit_stops_a_search() {
    let server = Server::start();
    let mut client = connect(&server);
    client.with_search_options(SearchOptions::new().sizelimit(2));
    let (entries, done) = search(&mut client, BASE, Scope::Subtree, "(objectClass=*)", &[]);
    assert_eq!(done.rc, 4, "{done:?}");
    assert_eq!(entries.len(), 2, "{entries:?}");
    for entry in &entries {
        assert!(EXAMPLE_DNS.contains(&entry.dn.as_str()), "{}", entry.dn);
    }
    // A limit the result fits in is not exceeded.
    client.with_search_options(SearchOptions::new().sizelimit(6));
    let (entries, done) = search(&mut client, BASE, Scope::Subtree, "(objectClass=*)", &[]);
    assert_eq!((done.rc, entries.len()), (0, 6), "{done:?}");
}

// ---- root DSE ----

#[test]
fn root_dse() {
    let server = Server::start();
    let mut client = connect(&server);
    for attrs in [
        vec!["+"],
        vec![
            "namingContexts",
            "supportedLDAPVersion",
            "supportedExtension",
            "vendorName",
            "vendorVersion",
            "subschemaSubentry",
        ],
    ] {
        let (entries, done) = search(&mut client, "", Scope::Base, "(objectClass=*)", &attrs);
        assert_eq!(done.rc, 0, "{done:?}");
        assert_eq!(entries.len(), 1, "{entries:?}");
        let dse = &entries[0];
        assert_eq!(dse.dn, "");
        let contexts: Vec<String> =
            values(dse, "namingContexts").iter().map(|v| v.to_ascii_lowercase()).collect();
        assert!(contexts.contains(&BASE.to_string()), "{dse:?}");
        assert!(values(dse, "supportedLDAPVersion").contains("3"), "{dse:?}");
        assert!(values(dse, "supportedExtension").contains("1.3.6.1.4.1.4203.1.11.3"), "{dse:?}");
        assert!(!values(dse, "vendorName").is_empty(), "{dse:?}");
        assert!(!values(dse, "vendorVersion").is_empty(), "{dse:?}");
        assert_eq!(values(dse, "subschemaSubentry").len(), 1, "{dse:?}");
    }
    // The root DSE's attributes are operational: `*` shows objectClass only.
    let (entries, done) = search(&mut client, "", Scope::Base, "(objectClass=*)", &["*"]);
    assert_eq!((done.rc, entries.len()), (0, 1), "{done:?}");
    assert!(has_attr(&entries[0], "objectClass"), "{:?}", entries[0]);
    assert!(!has_attr(&entries[0], "namingContexts"), "{:?}", entries[0]);
    // And the subschema entry it names can be read.
    let subschema = values(&entries_of_rootdse(&mut client), "subschemaSubentry");
    let dn = subschema.into_iter().next().expect("subschemaSubentry");
    let (entries, done) = search(&mut client, &dn, Scope::Base, "(objectClass=*)", &["*", "+"]);
    assert_eq!((done.rc, entries.len()), (0, 1), "{dn}: {done:?}");
}

fn entries_of_rootdse(client: &mut Client) -> SearchEntry {
    let (mut entries, done) = search(client, "", Scope::Base, "(objectClass=*)", &["+"]);
    assert_eq!((done.rc, entries.len()), (0, 1), "{done:?}");
    entries.remove(0)
}

// ---- fan-out ----

#[test]
fn bulk_add_then_subtree_search_returns_all() {
    const COUNT: usize = 300;
    let server = Server::start();
    let mut root = admin(&server);
    let bulk = "ou=bulk,dc=example,dc=com";
    assert_eq!(add_ou(&mut root, bulk, "bulk").rc, 0);
    let mut expected = BTreeSet::new();
    for i in 0..COUNT {
        let uid = format!("user{i:03}");
        let dn = format!("uid={uid},{bulk}");
        let result = add_person(&mut root, &dn, &uid);
        assert_eq!(result.rc, 0, "add {dn}: {result:?}");
        expected.insert(dn);
    }
    let found = dns(&mut root, bulk, Scope::Subtree, "(objectClass=person)");
    assert_eq!(found.len(), COUNT);
    assert_eq!(found, expected);
    let found = dns(&mut root, bulk, Scope::OneLevel, "(objectClass=*)");
    assert_eq!(found, expected);
    let mut with_base = expected.clone();
    with_base.insert(bulk.to_string());
    assert_eq!(dns(&mut root, bulk, Scope::Subtree, "(objectClass=*)"), with_base);
    // Substring over the whole tree: user100..user199.
    let hundreds = dns(&mut root, BASE, Scope::Subtree, "(uid=user1*)");
    assert_eq!(hundreds.len(), 100, "{hundreds:?}");
    // Entries carry their attributes, whichever shard served them.
    let (entries, done) = search(&mut root, bulk, Scope::OneLevel, "(uid=user2*)", &["cn"]);
    assert_eq!((done.rc, entries.len()), (0, 100), "{done:?}");
    for entry in entries {
        let uid = entry.dn.split(',').next().and_then(|r| r.strip_prefix("uid=")).expect("uid");
        assert_eq!(values(&entry, "cn"), sorted(&[&format!("Person {uid}")]), "{}", entry.dn);
    }
}

/// A request whose handling panics (a test-only extended operation, the `fault-injection`
/// feature) loses its connection at once, not after a timeout, and nothing else: another
/// connection opened before goes on, and new ones are accepted.
#[cfg(feature = "fault-injection")]
#[test]
fn a_panicking_request_drops_its_connection_not_the_server() {
    const PANIC_OID: &str = "1.3.6.1.4.1.99999.666.1";
    let server = Server::start();
    let mut bystander = admin(&server);
    let mut victim = admin(&server);
    let started = Instant::now();
    let answered = victim.extended(ldap3::exop::Exop { name: Some(PANIC_OID.into()), val: None });
    assert!(answered.is_err(), "the panicking request was answered: {answered:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "the connection was left hanging");
    assert_eq!(whoami(&mut bystander), format!("dn:{ADMIN_DN}"));
    let mut fresh = admin(&server);
    assert_eq!(whoami(&mut fresh), format!("dn:{ADMIN_DN}"));
    for _ in 0..3 {
        let mut again = admin(&server);
        let answered = again.extended(ldap3::exop::Exop { name: Some(PANIC_OID.into()), val: None });
        assert!(answered.is_err());
    }
    assert_eq!(whoami(&mut bystander), format!("dn:{ADMIN_DN}"));
}
