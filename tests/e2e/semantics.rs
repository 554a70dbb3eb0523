//! Directory semantics through a real client (the ldap3 crate, sync `LdapConn`), with the result
//! codes slapd gives: schema checks on add and modify (65, 64, 17, 19, 21); operational
//! attributes (`+`, entryUUID, entryCSN, timestamps, creators/modifiers); attribute names by
//! alias, OID, supertype and `@objectClass`; matching rules (telephoneNumber, integer ordering,
//! caseIgnore); subtree Modify DN, including atomicity for concurrent searches; aliases
//! dereferenced when finding the base; multiple suffixes; cn=Subschema; Compare; the offline
//! `ferrodir reindex` command; and sizeLimit.

use std::collections::{BTreeSet, HashSet};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldap3::{DerefAliases, LdapResult, Mod, Scope, SearchEntry, SearchOptions};

use crate::harness::{binary, connect_url, Client, Server, ADMIN_DN, ADMIN_PW, BASE};

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const GROUPS: &str = "ou=groups,dc=example,dc=com";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";

/// The operational attributes the server keeps or computes (RFC 4512 §3.4, RFC 4530, RFC 5020).
const OPERATIONAL: &str = "entryUUID entryCSN createTimestamp modifyTimestamp creatorsName \
    modifiersName structuralObjectClass entryDN hasSubordinates subschemaSubentry";

fn connect(url: &str) -> Client {
    connect_url(url)
}

fn admin(url: &str) -> Client {
    let mut client = connect(url);
    let result = client.simple_bind(ADMIN_DN, ADMIN_PW).expect("bind");
    assert_eq!(result.rc, 0, "admin bind: {result:?}");
    client
}

fn set<'a>(values: &[&'a str]) -> HashSet<&'a str> {
    values.iter().copied().collect()
}

fn sorted(values: &[&str]) -> BTreeSet<String> {
    values.iter().map(|v| v.to_string()).collect()
}

fn search(
    client: &mut Client,
    base: &str,
    scope: Scope,
    filter: &str,
    attrs: &[&str],
) -> (Vec<SearchEntry>, LdapResult) {
    let result = client.search(base, scope, filter, attrs.to_vec()).expect("search");
    (result.0.into_iter().map(SearchEntry::construct).collect(), result.1)
}

/// The DNs a successful search returns, lowercased.
fn dns(client: &mut Client, base: &str, scope: Scope, filter: &str) -> BTreeSet<String> {
    let (entries, done) = search(client, base, scope, filter, &["1.1"]);
    assert_eq!(done.rc, 0, "search {base} {filter}: {done:?}");
    entries.iter().map(|e| e.dn.to_ascii_lowercase()).collect()
}

/// The entry at `dn` with `attrs`, or None on noSuchObject.
fn read(client: &mut Client, dn: &str, attrs: &[&str]) -> Option<SearchEntry> {
    let (mut entries, done) = search(client, dn, Scope::Base, "(objectClass=*)", attrs);
    if done.rc == 32 {
        return None;
    }
    assert_eq!((done.rc, entries.len()), (0, 1), "read {dn}: {done:?}");
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

/// The single value of `attr`; fails unless there is exactly one.
fn one(entry: &SearchEntry, attr: &str) -> String {
    let vals = values(entry, attr);
    assert_eq!(vals.len(), 1, "{attr} of {}: {entry:?}", entry.dn);
    vals.into_iter().next().unwrap_or_default()
}

fn has_attr(entry: &SearchEntry, attr: &str) -> bool {
    entry.attrs.keys().chain(entry.bin_attrs.keys()).any(|n| n.eq_ignore_ascii_case(attr))
}

/// Attribute names exactly as the server spelled them.
fn names(entry: &SearchEntry) -> BTreeSet<String> {
    entry.attrs.keys().chain(entry.bin_attrs.keys()).cloned().collect()
}

/// Adds `"<dn>; attr: value; ..."` (see [`parse_entry`]).
fn add(client: &mut Client, text: &str) -> LdapResult {
    let (dn, attrs) = parse_entry(text);
    client.add(dn, attrs).expect("add")
}

fn add_ou(client: &mut Client, dn: &str, ou: &str) -> LdapResult {
    add(client, &format!("{dn}; objectClass: top; objectClass: organizationalUnit; ou: {ou}"))
}

fn add_person(client: &mut Client, dn: &str, uid: &str) -> LdapResult {
    add(client, &format!("{dn}; objectClass: inetOrgPerson; uid: {uid}; cn: {uid}; sn: {uid}"))
}

/// An inetOrgPerson + posixAccount entry `uid=<uid>,<parent>` with the given cn and uidNumber.
fn add_posix(client: &mut Client, parent: &str, uid: &str, cn: &str, uid_number: &str) -> String {
    let dn = format!("uid={uid},{parent}");
    let text = format!(
        "{dn}; objectClass: inetOrgPerson; objectClass: posixAccount; uid: {uid}; cn: {cn}; sn: {uid}; \
         uidNumber: {uid_number}; gidNumber: 100; homeDirectory: /home/{uid}"
    );
    let result = add(client, &text);
    assert_eq!(result.rc, 0, "add {dn}: {result:?}");
    dn.to_ascii_lowercase()
}

/// hasSubordinates of `dn`, polled until it reads `want` or 2 s pass (a demotion after the
/// last child leaves is asynchronous; see ops.rs).
fn wait_has_subordinates(client: &mut Client, dn: &str, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let entry = read(client, dn, &["hasSubordinates"]).unwrap_or_else(|| panic!("{dn} missing"));
        let seen = one(&entry, "hasSubordinates");
        if seen == want || Instant::now() > deadline {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A config like `harness::TEST_CONFIG`, with `extra` top-level keys.
fn config(extra: &str) -> String {
    format!(
        "shards = 4\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\nexample_data = true\n\
         {extra}\n[log]\nlevel = \"warn\"\n"
    )
}

// ---- schema checks ----

const PERSON: &str = "objectClass: top; objectClass: person; objectClass: inetOrgPerson";
const OU: &str = "objectClass: top; objectClass: organizationalUnit";
const POSIX: &str = "objectClass: inetOrgPerson; objectClass: posixAccount; gidNumber: 100";

/// `"<dn>; attr: value; attr: value"` as a DN and the attributes of an Add request.
fn parse_entry(text: &str) -> (&str, Vec<(&str, HashSet<&str>)>) {
    let mut parts = text.split("; ");
    let dn = parts.next().unwrap_or_default();
    let mut attrs: Vec<(&str, HashSet<&str>)> = Vec::new();
    for part in parts {
        let (name, value) = part.split_once(": ").unwrap_or_else(|| panic!("bad case {part}"));
        match attrs.iter_mut().find(|(n, _)| *n == name) {
            Some((_, values)) => {
                values.insert(value);
            }
            None => attrs.push((name, set(&[value]))),
        }
    }
    (dn, attrs)
}

#[test]
fn add_checks_the_schema() {
    let server = Server::start();
    let mut root = admin(&server.url());
    let cases: Vec<(String, u32, &str)> = vec![
        ("ou=c1,dc=example,dc=com; ou: c1".into(), 65, "no objectClass"),
        (format!("ou=c2,dc=example,dc=com; {OU}; objectClass: noSuchClass; ou: c2"), 21, "unknown class"),
        ("dc=c3,dc=example,dc=com; objectClass: dcObject; dc: c3".into(), 65, "no structural class"),
        (
            format!("ou=c4,dc=example,dc=com; {OU}; objectClass: device; ou: c4; cn: c4"),
            65,
            "two structurals",
        ),
        (format!("uid=c5,{PEOPLE}; {PERSON}; uid: c5; cn: c5"), 65, "inetOrgPerson without sn"),
        (format!("ou=c6,dc=example,dc=com; {OU}; ou: c6; mail: c6@example.com"), 65, "mail on an ou"),
        (format!("ou=c7,dc=example,dc=com; {OU}; ou: c7; noSuchAttribute: x"), 17, "unknown type"),
        (
            format!("uid=c8,{PEOPLE}; {PERSON}; uid: c8; cn: c8; sn: c8; displayName: 1; displayName: 2"),
            19,
            "two values of SINGLE-VALUE displayName",
        ),
        (
            format!("uid=c9,{PEOPLE}; {POSIX}; uid: c9; cn: c9; sn: c9; uidNumber: abc; homeDirectory: /h"),
            21,
            "uidNumber: abc",
        ),
        (
            format!("displayName=z,{PEOPLE}; {PERSON}; cn: c10; sn: c10; displayName: other"),
            64,
            "SINGLE-VALUE naming attribute with another value",
        ),
        (
            format!("entryUUID=2f3b1a4e-8c1d-4f5e-9a6b-0c1d2e3f4a5b,dc=example,dc=com; {OU}; ou: c11"),
            64,
            "operational naming attribute",
        ),
    ];
    // Every case runs; the wrong answers are reported together.
    let mut wrong = Vec::new();
    for (text, code, what) in &cases {
        let result = add(&mut root, text);
        let (code, dn) = (*code, parse_entry(text).0);
        if result.rc != code {
            wrong.push(format!("{what}: add {dn}: want {code}, got {result:?}"));
        }
        if result.rc != 0 {
            assert!(read(&mut root, dn, &[]).is_none(), "{what}: {dn} was added anyway");
        }
    }

    // slapd 2.5 adds the RDN's value when the entry lacks it (entry_naming_check with
    // add_naming); it answers 64 only when it can't (the two cases above).
    let dn = "ou=named,dc=example,dc=com";
    let result = add(&mut root, &format!("{dn}; objectClass: organizationalUnit; ou: other"));
    assert_eq!(result.rc, 0, "RDN value missing from the entry: {result:?}");
    let entry = read(&mut root, dn, &["ou"]).expect("ou=named");
    assert_eq!(values(&entry, "ou"), sorted(&["named", "other"]));

    // extensibleObject allows any attribute the schema knows.
    let dn = "ou=ext,dc=example,dc=com";
    let text = format!("{dn}; {OU}; objectClass: extensibleObject; ou: ext; mail: ext@example.com");
    assert_eq!(add(&mut root, &text).rc, 0, "extensibleObject");
    let entry = read(&mut root, dn, &["mail"]).expect("ou=ext");
    assert_eq!(values(&entry, "mail"), sorted(&["ext@example.com"]));

    let dn = add_posix(&mut root, PEOPLE, "posix", "Posix User", "1234");
    let entry =
        read(&mut root, &dn, &["uidNumber", "homeDirectory", "structuralObjectClass"]).expect("posix");
    assert_eq!(values(&entry, "uidNumber"), sorted(&["1234"]));
    assert_eq!(values(&entry, "homeDirectory"), sorted(&["/home/posix"]));
    assert!(one(&entry, "structuralObjectClass").eq_ignore_ascii_case("inetOrgPerson"), "{entry:?}");
    assert!(wrong.is_empty(), "wrong result codes:\n{}", wrong.join("\n"));
}

#[test]
fn modify_checks_the_schema_and_changes_nothing_on_failure() {
    let server = Server::start();
    let mut root = admin(&server.url());
    let uuid = "2f3b1a4e-8c1d-4f5e-9a6b-0c1d2e3f4a5b";
    let cases: Vec<(Vec<Mod<&str>>, u32, &str)> = vec![
        (vec![Mod::Delete("sn", HashSet::new())], 65, "removing MUST sn"),
        (vec![Mod::Add("uidNumber", set(&["5"]))], 65, "uidNumber not allowed by inetOrgPerson"),
        (vec![Mod::Add("noSuchAttribute", set(&["x"]))], 17, "unknown attribute type"),
        (vec![Mod::Add("displayName", set(&["One", "Two"]))], 19, "SINGLE-VALUE displayName"),
        (vec![Mod::Replace("entryUUID", set(&[uuid]))], 19, "entryUUID is NO-USER-MODIFICATION"),
        (vec![Mod::Replace("createTimestamp", set(&["20200101000000Z"]))], 19, "createTimestamp"),
        // RFC 4511 Appendix A.2: removing an RDN value is notAllowedOnRDN (67); slapd 2.5.13
        // answers 64, a difference docs/CONFORMANCE.md lists.
        (vec![Mod::Delete("uid", set(&["alice"]))], 67, "removing the RDN value"),
        (vec![Mod::Replace("uid", set(&["alicia"]))], 67, "replacing the RDN value"),
    ];
    let before = read(&mut root, ALICE, &["*", "+"]).expect("alice");
    let mut wrong = Vec::new();
    for (changes, code, what) in cases {
        let result = root.modify(ALICE, changes).expect("modify");
        if result.rc != code {
            wrong.push(format!("{what}: want {code}, got {result:?}"));
        }
    }
    let after = read(&mut root, ALICE, &["*", "+"]).expect("alice");
    assert_eq!(before.attrs, after.attrs, "a failed modify changed alice");
    assert_eq!(values(&after, "sn"), sorted(&["Liddell"]));
    assert!(!has_attr(&after, "uidNumber") && !has_attr(&after, "displayName"), "{after:?}");
    assert!(wrong.is_empty(), "wrong result codes:\n{}", wrong.join("\n"));
}

// ---- operational attributes ----

fn is_generalized_time(value: &str) -> bool {
    value.len() == 15 && value[..14].bytes().all(|b| b.is_ascii_digit()) && value.ends_with('Z')
}

fn is_uuid(value: &str) -> bool {
    let groups: Vec<&str> = value.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// OpenLDAP's CSN form: `YYYYMMDDHHMMSS.ffffffZ#000000#000#000000`.
fn is_csn(value: &str) -> bool {
    let parts: Vec<&str> = value.split('#').collect();
    parts.len() == 4
        && parts[0].len() == 22
        && parts[0][..14].bytes().all(|b| b.is_ascii_digit())
        && parts[0][14..].starts_with('.')
        && parts[0].ends_with('Z')
}

#[test]
fn operational_attributes_are_stamped_and_kept_apart() {
    let server = Server::start();
    let mut root = admin(&server.url());
    let carol = "uid=carol,ou=people,dc=example,dc=com";
    assert_eq!(add_person(&mut root, carol, "carol").rc, 0);

    let created = read(&mut root, carol, &["+"]).expect("carol");
    for attr in OPERATIONAL.split_whitespace() {
        assert!(has_attr(&created, attr), "+ lacks {attr}: {created:?}");
    }
    assert!(!has_attr(&created, "uid") && !has_attr(&created, "objectClass"), "{created:?}");
    let uuid = one(&created, "entryUUID");
    assert!(is_uuid(&uuid), "entryUUID {uuid}");
    let csn = one(&created, "entryCSN");
    assert!(is_csn(&csn), "entryCSN {csn}");
    let create_time = one(&created, "createTimestamp");
    assert!(is_generalized_time(&create_time), "createTimestamp {create_time}");
    assert!(is_generalized_time(&one(&created, "modifyTimestamp")), "{created:?}");
    assert!(one(&created, "creatorsName").eq_ignore_ascii_case(ADMIN_DN), "{created:?}");
    assert!(one(&created, "modifiersName").eq_ignore_ascii_case(ADMIN_DN), "{created:?}");
    assert!(one(&created, "structuralObjectClass").eq_ignore_ascii_case("inetOrgPerson"), "{created:?}");
    assert_eq!(one(&created, "entryDN").to_ascii_lowercase(), carol);
    assert_eq!(one(&created, "hasSubordinates"), "FALSE");
    assert!(one(&created, "subschemaSubentry").eq_ignore_ascii_case("cn=Subschema"), "{created:?}");

    // `*` (and no list at all) returns no operational attribute; naming one returns it alone.
    for attrs in [&["*"][..], &[][..]] {
        let entry = read(&mut root, carol, attrs).expect("carol");
        assert!(has_attr(&entry, "uid"), "{attrs:?}: {entry:?}");
        for attr in OPERATIONAL.split_whitespace() {
            assert!(!has_attr(&entry, attr), "{attrs:?} returned {attr}: {entry:?}");
        }
    }
    let entry = read(&mut root, carol, &["entryUUID"]).expect("carol");
    assert_eq!(names(&entry).len(), 1, "{entry:?}");
    assert_eq!(one(&entry, "entryUUID"), uuid);

    // Timestamps have one-second resolution: wait so that the modify's is later.
    std::thread::sleep(Duration::from_millis(1100));
    let result = root.modify(carol, vec![Mod::Replace("description", set(&["changed"]))]).expect("modify");
    assert_eq!(result.rc, 0, "{result:?}");
    let modified = read(&mut root, carol, &["+"]).expect("carol");
    assert_eq!(one(&modified, "entryUUID"), uuid);
    assert_eq!(one(&modified, "createTimestamp"), create_time);
    assert!(one(&modified, "modifyTimestamp") > create_time, "{created:?} then {modified:?}");
    assert!(one(&modified, "entryCSN") > csn, "{created:?} then {modified:?}");
    assert!(one(&modified, "modifiersName").eq_ignore_ascii_case(ADMIN_DN), "{modified:?}");

    // entryCSN rises with every write, across entries (likely on different shards) too.
    let mut last = one(&modified, "entryCSN");
    for round in 0..6 {
        let dn = if round % 2 == 0 { ALICE } else { carol };
        let value = format!("round {round}");
        let changes = vec![Mod::Replace("description", set(&[value.as_str()]))];
        assert_eq!(root.modify(dn, changes).expect("modify").rc, 0);
        let next = one(&read(&mut root, dn, &["entryCSN"]).expect("entry"), "entryCSN");
        assert!(next > last, "round {round}: entryCSN {next} after {last}");
        last = next;
    }
}

// ---- names, OIDs, subtypes and matching rules ----

#[test]
fn attribute_names_oids_and_subtypes() {
    let server = Server::start();
    let mut root = admin(&server.url());
    let carol = "uid=carol,ou=people,dc=example,dc=com";
    let text = format!(
        "{carol}; objectClass: inetOrgPerson; uid: carol; commonName: Carol Xyz; surname: Xyz; \
         mail: Carol@Example.com; telephoneNumber: +1 555-123-4567"
    );
    assert_eq!(add(&mut root, &text).rc, 0);

    // Stored and returned under the schema's primary names, whatever name is asked for.
    for requested in
        [&["*"][..], &["commonName", "surname"][..], &["2.5.4.3", "2.5.4.4"][..], &["cn", "sn"][..]]
    {
        let entry = read(&mut root, carol, requested).expect("carol");
        let got = names(&entry);
        assert!(got.contains("cn") && got.contains("sn"), "{requested:?}: {got:?}");
        assert!(!got.contains("commonName") && !got.contains("surname"), "{requested:?}: {got:?}");
        assert!(!got.contains("2.5.4.3"), "{requested:?}: {got:?}");
        assert_eq!(values(&entry, "cn"), BTreeSet::from(["Carol Xyz".to_string()]), "{requested:?}");
    }
    // `name` is the supertype of cn and sn: asking for it returns both, and nothing else.
    let entry = read(&mut root, carol, &["name"]).expect("carol");
    assert_eq!(names(&entry), BTreeSet::from(["cn".to_string(), "sn".to_string()]), "{entry:?}");

    let cases: &[(&str, &[&str])] = &[
        ("(2.5.4.3=Carol Xyz)", &[carol]),
        ("(commonName=carol xyz)", &[carol]),
        ("(name=Carol Xyz)", &[carol]),
        ("(name=xyz)", &[carol]),
        ("(name=Liddell)", &[ALICE]),
        ("(cn=CAROL   XYZ)", &[carol]),
        ("(mail=CAROL@EXAMPLE.COM)", &[carol]),
        ("(uid=CAROL)", &[carol]),
        // telephoneNumberMatch ignores spaces and hyphens.
        ("(telephoneNumber=+15551234567)", &[carol]),
        ("(telephoneNumber=+1-555 123 45-67)", &[carol]),
        ("(telephoneNumber=+15551234568)", &[]),
    ];
    for (filter, expected) in cases {
        assert_eq!(dns(&mut root, BASE, Scope::Subtree, filter), sorted(expected), "filter {filter}");
    }
}

#[test]
fn integer_ordering_and_object_class_selection() {
    let server = Server::start();
    let mut root = admin(&server.url());
    let n99 = add_posix(&mut root, PEOPLE, "n99", "n99", "99");
    let n100 = add_posix(&mut root, PEOPLE, "n100", "n100", "100");
    let n1000 = add_posix(&mut root, PEOPLE, "n1000", "n1000", "1000");
    // integerOrderingMatch: as strings, "99" >= "100" and "1000" <= "100" would flip.
    let cases: &[(&str, &[&str])] = &[
        ("(uidNumber>=100)", &[&n100, &n1000]),
        ("(uidNumber<=100)", &[&n99, &n100]),
        ("(uidNumber>=101)", &[&n1000]),
        ("(uidNumber=100)", &[&n100]),
        ("(&(uidNumber>=99)(uidNumber<=999))", &[&n99, &n100]),
    ];
    for (filter, expected) in cases {
        assert_eq!(dns(&mut root, BASE, Scope::Subtree, filter), sorted(expected), "filter {filter}");
    }

    // RFC 4529: @class selects the attributes that class allows (inherited ones included).
    let entry = read(&mut root, &n100, &["@posixAccount"]).expect("n100");
    let got = names(&entry);
    for attr in ["uidNumber", "gidNumber", "homeDirectory", "uid", "cn"] {
        assert!(got.contains(attr), "@posixAccount lacks {attr}: {got:?}");
    }
    assert!(!got.contains("sn"), "@posixAccount returned sn: {got:?}");
    let entry = read(&mut root, &n100, &["@inetOrgPerson"]).expect("n100");
    let got = names(&entry);
    for attr in ["cn", "sn", "uid"] {
        assert!(got.contains(attr), "@inetOrgPerson lacks {attr}: {got:?}");
    }
    for attr in ["uidNumber", "gidNumber", "homeDirectory"] {
        assert!(!got.contains(attr), "@inetOrgPerson returned {attr}: {got:?}");
    }
}

// ---- subtree Modify DN ----

#[test]
fn subtree_rename_and_move() {
    let server = Server::start();
    let mut root = admin(&server.url());
    let sub = "ou=sub,ou=people,dc=example,dc=com";
    assert_eq!(add_ou(&mut root, sub, "sub").rc, 0);
    assert_eq!(add_person(&mut root, &format!("uid=deep,{sub}"), "deep").rc, 0);
    let tree = |top: &str| -> Vec<String> {
        ["", "uid=alice,", "uid=bob,", "ou=sub,", "uid=deep,ou=sub,"]
            .iter()
            .map(|p| format!("{p}{top}"))
            .collect()
    };
    let check_at = |root: &mut Client, top: &str, old: &str| {
        for dn in tree(top) {
            let entry = read(root, &dn, &["entryDN"]).unwrap_or_else(|| panic!("{dn} missing"));
            assert_eq!(one(&entry, "entryDN").to_ascii_lowercase(), dn);
        }
        for dn in tree(old) {
            assert!(read(root, &dn, &[]).is_none(), "{dn} still there");
        }
        let all: Vec<String> = tree(top);
        let children: BTreeSet<String> = all[1..4].iter().cloned().collect();
        assert_eq!(dns(root, top, Scope::OneLevel, "(objectClass=*)"), children);
        assert_eq!(dns(root, top, Scope::Subtree, "(objectClass=*)"), all.iter().cloned().collect());
        assert_eq!(dns(root, BASE, Scope::Subtree, "(uid=deep)"), BTreeSet::from([all[4].clone()]));
        let (_, done) = search(root, old, Scope::Subtree, "(objectClass=*)", &["1.1"]);
        assert_eq!(done.rc, 32, "search under the old name {old}: {done:?}");
    };

    // Rename in place.
    let persons = "ou=persons,dc=example,dc=com";
    assert_eq!(root.modifydn(PEOPLE, "ou=persons", true, None).expect("modrdn").rc, 0);
    check_at(&mut root, persons, PEOPLE);
    assert_eq!(values(&read(&mut root, persons, &["ou"]).expect("persons"), "ou"), sorted(&["persons"]));

    // Move under a leaf, which becomes a container.
    let holder = "ou=holder,dc=example,dc=com";
    assert_eq!(add_ou(&mut root, holder, "holder").rc, 0);
    assert_eq!(wait_has_subordinates(&mut root, holder, "FALSE"), "FALSE");
    let moved = "ou=persons,ou=holder,dc=example,dc=com";
    assert_eq!(root.modifydn(persons, "ou=persons", true, Some(holder)).expect("move").rc, 0);
    check_at(&mut root, moved, persons);
    assert_eq!(wait_has_subordinates(&mut root, holder, "TRUE"), "TRUE");

    // Below itself: loopDetect.
    for target in [moved.to_string(), format!("ou=sub,{moved}")] {
        let result = root.modifydn(moved, "ou=persons", true, Some(&target)).expect("move");
        assert_eq!(result.rc, 53, "move {moved} under {target}: {result:?}");
    }

    // Back home under its first name; the holder has no children any more.
    assert_eq!(root.modifydn(moved, "ou=people", true, Some(BASE)).expect("move").rc, 0);
    check_at(&mut root, PEOPLE, moved);
    assert_eq!(wait_has_subordinates(&mut root, holder, "FALSE"), "FALSE");
    assert_eq!(wait_has_subordinates(&mut root, PEOPLE, "TRUE"), "TRUE");

    // Onto an existing DN.
    let result = root.modifydn(PEOPLE, "ou=groups", true, None).expect("modrdn");
    assert_eq!(result.rc, 68, "{result:?}");
    let result = root.modifydn(PEOPLE, "ou=holder", true, Some(BASE)).expect("move");
    assert_eq!(result.rc, 68, "{result:?}");
    check_at(&mut root, PEOPLE, "ou=nowhere,dc=example,dc=com");
    assert_eq!(dns(&mut root, GROUPS, Scope::Subtree, "(objectClass=*)").len(), 2);
}

#[test]
fn searches_never_see_half_a_subtree_rename() {
    const EXTRA: usize = 20;
    const RENAMES: usize = 20;
    let server = Server::start();
    let url = server.url();
    let mut root = admin(&url);
    for i in 0..EXTRA {
        let uid = format!("p{i:02}");
        assert_eq!(add_person(&mut root, &format!("uid={uid},{PEOPLE}"), &uid).rc, 0);
    }
    let expected = EXTRA + 2;
    let done = Arc::new(AtomicBool::new(false));
    let renamer = {
        let done = Arc::clone(&done);
        let url = url.clone();
        std::thread::spawn(move || {
            let mut root = admin(&url);
            let names = [("ou=people", "ou=folks"), ("ou=folks", "ou=people")];
            let outcome = (0..RENAMES).try_for_each(|round| {
                let (from, to) = names[round % 2];
                let result = root.modifydn(&format!("{from},{BASE}"), to, true, None).expect("modrdn");
                if result.rc == 0 {
                    Ok(())
                } else {
                    Err(format!("round {round}: rename {from} -> {to}: {result:?}"))
                }
            });
            done.store(true, Ordering::SeqCst);
            outcome
        })
    };

    let mut reader = connect(&url);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = [0usize; 2];
    while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
        let found = dns(&mut reader, BASE, Scope::Subtree, "(objectClass=inetOrgPerson)");
        let under = |parent: &str| found.iter().all(|dn| dn.ends_with(&format!(",{parent},{BASE}")));
        let (people, folks) = (under("ou=people"), under("ou=folks"));
        assert!(people || folks, "a search saw a mix of old and new names: {found:?}");
        assert_eq!(found.len(), expected, "a search during a rename lost entries: {found:?}");
        seen[usize::from(folks)] += 1;
    }
    let outcome = renamer.join().expect("renamer thread");
    assert_eq!(outcome, Ok(()));
    assert!(done.load(Ordering::SeqCst), "the renames did not finish within 120s");
    assert!(seen.iter().sum::<usize>() > 0, "no search ran during the renames");
    // An even number of renames: everything is back under ou=people.
    let found = dns(&mut reader, BASE, Scope::Subtree, "(objectClass=inetOrgPerson)");
    assert_eq!(found.len(), expected);
    assert!(found.iter().all(|dn| dn.ends_with(&format!(",{PEOPLE}"))), "{found:?}");
}

// ---- aliases ----

#[test]
fn aliases_are_dereferenced_when_finding_the_base() {
    let server = Server::start();
    let mut root = admin(&server.url());
    let alias = "cn=pal,dc=example,dc=com";
    let dangling = "cn=dangling,dc=example,dc=com";
    for (dn, cn, target) in [(alias, "pal", PEOPLE), (dangling, "dangling", "ou=missing,dc=example,dc=com")] {
        let text = format!(
            "{dn}; objectClass: alias; objectClass: extensibleObject; cn: {cn}; \
             aliasedObjectName: {target}"
        );
        assert_eq!(add(&mut root, &text).rc, 0, "add {dn}");
    }
    let mut client = connect(&server.url());
    let finding = || SearchOptions::new().deref(DerefAliases::Finding);

    client.with_search_options(finding());
    let (entries, done) = search(&mut client, alias, Scope::Base, "(objectClass=*)", &["ou"]);
    assert_eq!((done.rc, entries.len()), (0, 1), "{done:?} {entries:?}");
    assert_eq!(entries[0].dn.to_ascii_lowercase(), PEOPLE);
    assert_eq!(values(&entries[0], "ou"), sorted(&["people"]));

    client.with_search_options(finding());
    let (entries, done) = search(&mut client, alias, Scope::OneLevel, "(objectClass=*)", &["1.1"]);
    assert_eq!(done.rc, 0, "{done:?}");
    let found: BTreeSet<String> = entries.iter().map(|e| e.dn.to_ascii_lowercase()).collect();
    assert_eq!(found, sorted(&[ALICE, BOB]));

    // Without dereferencing, the alias entry itself.
    for options in [None, Some(SearchOptions::new().deref(DerefAliases::Never))] {
        if let Some(options) = options {
            client.with_search_options(options);
        }
        let (entries, done) = search(&mut client, alias, Scope::Base, "(objectClass=*)", &["*"]);
        assert_eq!((done.rc, entries.len()), (0, 1), "{done:?}");
        assert_eq!(entries[0].dn.to_ascii_lowercase(), alias);
        assert!(values(&entries[0], "objectClass").iter().any(|v| v.eq_ignore_ascii_case("alias")));
        assert_eq!(one(&entries[0], "aliasedObjectName").to_ascii_lowercase(), PEOPLE);
    }

    // A non-alias base is unaffected by deref.
    client.with_search_options(finding());
    let (entries, done) = search(&mut client, ALICE, Scope::Base, "(objectClass=*)", &["1.1"]);
    assert_eq!((done.rc, entries.len()), (0, 1), "{done:?}");
    assert_eq!(entries[0].dn.to_ascii_lowercase(), ALICE);

    // An alias whose target doesn't exist: aliasProblem.
    client.with_search_options(finding());
    let (entries, done) = search(&mut client, dangling, Scope::Base, "(objectClass=*)", &["1.1"]);
    assert!(entries.is_empty(), "{entries:?}");
    assert_eq!(done.rc, 33, "{done:?}");
}

// ---- multiple suffixes ----

#[test]
fn two_naming_contexts() {
    let server = Server::start_with_config(&config(r#"suffixes = ["dc=example,dc=com", "o=other"]"#));
    let mut root = admin(&server.url());
    assert_eq!(add(&mut root, "o=other; objectClass: organization; o: other").rc, 0, "add o=other");
    assert_eq!(add_ou(&mut root, "ou=unit,o=other", "unit").rc, 0);

    let (entries, done) = search(&mut root, "", Scope::Base, "(objectClass=*)", &["namingContexts"]);
    assert_eq!((done.rc, entries.len()), (0, 1), "{done:?}");
    let contexts: BTreeSet<String> =
        values(&entries[0], "namingContexts").iter().map(|v| v.to_ascii_lowercase()).collect();
    assert_eq!(contexts, sorted(&[BASE, "o=other"]), "{entries:?}");

    assert_eq!(
        dns(&mut root, "o=other", Scope::Subtree, "(objectClass=*)"),
        sorted(&["o=other", "ou=unit,o=other"])
    );
    assert_eq!(dns(&mut root, BASE, Scope::Subtree, "(ou=*)"), sorted(&[PEOPLE, GROUPS]));
    assert_eq!(dns(&mut root, BASE, Scope::OneLevel, "(objectClass=*)"), sorted(&[PEOPLE, GROUPS]));
    let mut anonymous = connect(&server.url());
    assert_eq!(
        dns(&mut anonymous, "ou=unit,o=other", Scope::Base, "(ou=unit)"),
        sorted(&["ou=unit,o=other"])
    );

    for (base, matched) in [("ou=x,dc=nowhere,dc=org", ""), ("o=third", ""), ("ou=x,o=other", "o=other")] {
        let (entries, done) = search(&mut anonymous, base, Scope::Subtree, "(objectClass=*)", &["1.1"]);
        assert!(entries.is_empty(), "{base}: {entries:?}");
        assert_eq!(done.rc, 32, "{base}: {done:?}");
        assert_eq!(done.matched.to_ascii_lowercase(), matched, "{base}: {done:?}");
    }
}

// ---- cn=Subschema ----

#[test]
fn subschema_entry_publishes_the_schema() {
    let server = Server::start();
    let mut client = connect(&server.url());
    let (entries, done) = search(&mut client, "", Scope::Base, "(objectClass=*)", &["subschemaSubentry"]);
    assert_eq!((done.rc, entries.len()), (0, 1), "{done:?}");
    assert_eq!(one(&entries[0], "subschemaSubentry"), "cn=Subschema");

    let kinds = ["attributeTypes", "objectClasses", "ldapSyntaxes", "matchingRules", "matchingRuleUse"];
    let (entries, done) = search(&mut client, "cn=Subschema", Scope::Base, "(objectClass=subschema)", &kinds);
    assert_eq!((done.rc, entries.len()), (0, 1), "{done:?}");
    let schema = &entries[0];
    for kind in kinds {
        assert!(!values(schema, kind).is_empty(), "{kind} is empty");
    }
    let types = values(schema, "attributeTypes");
    assert!(
        types.iter().any(|t| t.starts_with("( 2.5.4.3 NAME ( 'cn' 'commonName' )")),
        "no cn definition among {} attributeTypes",
        types.len()
    );
    let classes = values(schema, "objectClasses");
    assert!(classes.iter().any(|c| c.starts_with("( 2.5.6.6 NAME 'person'")), "no person class");
    assert!(classes.iter().any(|c| c.contains("NAME 'inetOrgPerson'")), "no inetOrgPerson class");
    assert!(classes.iter().any(|c| c.contains("NAME 'posixAccount'")), "no posixAccount class");
    let syntaxes = values(schema, "ldapSyntaxes");
    assert!(
        syntaxes.iter().any(|s| s.starts_with("( 1.3.6.1.4.1.1466.115.121.1.15 ")),
        "no Directory String"
    );
    let rules = values(schema, "matchingRules");
    assert!(rules.iter().any(|r| r.contains("NAME 'caseIgnoreMatch'")), "no caseIgnoreMatch");

    // RFC 4512 §4.2: these are operational, so `*` doesn't return them.
    let (entries, done) = search(&mut client, "cn=Subschema", Scope::Base, "(objectClass=*)", &["*"]);
    assert_eq!((done.rc, entries.len()), (0, 1), "{done:?}");
    for kind in kinds {
        assert!(!has_attr(&entries[0], kind), "* returned {kind}");
    }
}

// ---- compare ----

#[test]
fn compare_uses_the_schema() {
    let server = Server::start();
    let mut client = connect(&server.url());
    let cases = [
        ("noSuchAttribute", "x", 17),
        ("commonName", "Alice Liddell", 6),
        ("commonName", "ALICE LIDDELL", 6),
        ("2.5.4.3", "alice liddell", 6),
        ("commonName", "Bob Builder", 5),
        ("name", "Liddell", 6),
    ];
    for (attr, value, code) in cases {
        let result = client.compare(ALICE, attr, value).expect("compare").0;
        assert_eq!(result.rc, code, "compare {attr}={value}: {result:?}");
    }
}

// ---- DNs by the schema's types ----

/// Every DN a request names is normalised by the schema's rules (the normaliser the server
/// hands the router, issue #14): a base, a bind name and the rootDN by alias or OID, and a
/// multi-valued RDN that names one type twice under two names is invalidDNSyntax.
#[test]
fn dns_name_entries_by_the_schemas_types() {
    let server = Server::start();
    let mut client = connect(&server.url());
    for base in [
        "UID=Alice, OU=People, DC=Example, DC=Com",
        "0.9.2342.19200300.100.1.1=alice,2.5.4.11=people,dc=example,dc=com",
        "userid=ALICE,organizationalUnitName=people,domainComponent=example,dc=com",
    ] {
        let (entries, done) = search(&mut client, base, Scope::Base, "(objectClass=*)", &["uid"]);
        assert_eq!((done.rc, entries.len()), (0, 1), "{base}: {done:?}");
        assert_eq!(entries[0].attrs["uid"], ["alice"], "{base}");
    }
    // The rootDN, by an alias of its type; a user by the OID of uid.
    let result = client.simple_bind("commonName=ADMIN,dc=example,dc=com", ADMIN_PW).expect("bind");
    assert_eq!(result.rc, 0, "rootDN by alias: {result:?}");
    let (entries, done) = search(
        &mut client,
        "2.5.4.3=nobody,ou=people,dc=example,dc=com",
        Scope::Base,
        "(objectClass=*)",
        &["1.1"],
    );
    assert_eq!((done.rc, entries.len(), done.matched.as_str()), (32, 0, PEOPLE), "{done:?}");
    let bob = "0.9.2342.19200300.100.1.1=Bob,ou=people,dc=example,dc=com";
    let result = client.simple_bind(bob, "password").expect("bind");
    assert_eq!(result.rc, 0, "bob by uid's OID: {result:?}");
    let mut admin = admin(&server.url());
    let twice = "cn=a+commonName=b,ou=people,dc=example,dc=com";
    let result = add(&mut admin, &format!("{twice}; objectClass: person; cn: a; cn: b; sn: x"));
    assert_eq!(result.rc, 34, "{twice}: {result:?}");
}

// ---- reindex ----

/// Runs `ferrodir reindex` on a stopped server's data directory, within 60 s.
fn run_reindex(server: &Server) {
    let mut child = Command::new(binary())
        .arg("reindex")
        .arg("--config")
        .arg(server.config_path())
        .arg("--data-dir")
        .arg(&server.data_dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run reindex");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("wait for reindex") {
            assert!(status.success(), "reindex failed: {status}");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("reindex did not finish within 60s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs each (filter, expected DNs) as a subtree search from the suffix.
fn check_searches(server: &Server, cases: &[(&str, BTreeSet<String>)], when: &str) {
    let mut client = connect(&server.url());
    for (filter, expected) in cases {
        assert_eq!(&dns(&mut client, BASE, Scope::Subtree, filter), expected, "{when}: {filter}");
    }
}

#[test]
fn new_indices_give_the_same_results_before_and_after_reindex() {
    let mut server = Server::start_with_config(&config(r#"index = ["objectClass eq"]"#));
    let mut root = admin(&server.url());
    let rows = [("u1", "xfoo", "1"), ("u3", "afoob", "3"), ("u4", "bar", "4"), ("u5", "foobar", "5")];
    let rows2 = [("u9", "baz", "9"), ("u10", "FOO", "10"), ("u50", "qux", "50")];
    let mut dn_of = std::collections::HashMap::new();
    for (uid, cn, number) in rows.iter().chain(rows2.iter()) {
        dn_of.insert(*uid, add_posix(&mut root, PEOPLE, uid, cn, number));
    }
    drop(root);
    let expect = |uids: &[&str]| -> BTreeSet<String> { uids.iter().map(|u| dn_of[u].clone()).collect() };
    // As strings, "10" < "5": the ordering index must compare integers.
    let mut cases = [
        ("(cn=*foo*)", expect(&["u1", "u3", "u5", "u10"])),
        ("(uidNumber>=5)", expect(&["u5", "u9", "u10", "u50"])),
        ("(&(cn=*foo*)(uidNumber>=5))", expect(&["u5", "u10"])),
        ("(cn=foo*)", expect(&["u5", "u10"])),
        ("(uidNumber<=4)", expect(&["u1", "u3", "u4"])),
    ];
    check_searches(&server, &cases, "with the first index set");

    server.stop();
    let wider = config(r#"index = ["objectClass eq", "cn sub", "uidNumber ord"]"#);
    std::fs::write(server.config_path(), wider).expect("write config");
    server.restart();
    check_searches(&server, &cases, "new indices configured, not yet built");
    // A write while the indices are unbuilt must be found after the reindex too.
    let u7 = add_posix(&mut admin(&server.url()), PEOPLE, "u7", "zfooz", "7");
    for case in &mut cases[..3] {
        case.1.insert(u7.clone());
    }
    check_searches(&server, &cases, "after a write with unbuilt indices");

    server.stop();
    run_reindex(&server);
    server.restart();
    check_searches(&server, &cases, "after reindex");
}

// ---- limits ----

#[test]
fn size_limit_one() {
    let server = Server::start();
    let mut client = connect(&server.url());
    assert_eq!(dns(&mut client, PEOPLE, Scope::Subtree, "(objectClass=*)").len(), 3);
    client.with_search_options(SearchOptions::new().sizelimit(1));
    let (entries, done) = search(&mut client, PEOPLE, Scope::Subtree, "(objectClass=*)", &["1.1"]);
    assert_eq!(done.rc, 4, "{done:?}");
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!([PEOPLE, ALICE, BOB].contains(&entries[0].dn.to_ascii_lowercase().as_str()), "{entries:?}");
}
