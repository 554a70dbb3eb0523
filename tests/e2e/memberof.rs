//! memberOf, the in-chain rule and the bit rules through real clients (the ldap3 crate and
//! ldapsearch) on a four-shard server: memberOf with `+` and by name but not with `*`;
//! `(memberOf=G)` alone and combined, on a 1,000-member group, answered from the index
//! (the user's class refuses unindexed searches); uniqueMember groups; compare; nested
//! groups with in-chain on memberOf and member, a cycle, the depth cap answering 11; a
//! group hidden by an access rule; integerBitAndMatch and integerBitOrMatch; the
//! transitive option; and the member index kept whatever `index` says.

use std::collections::{BTreeSet, HashSet};

use ldap3::{LdapResult, Mod, Scope, SearchEntry};

use crate::harness::{bound, tool, Client, Server, ADMIN_DN, ADMIN_PW, BASE};

const USERS: usize = 1000;
/// The chain d0 ⊃ d1 ⊃ ... is longer than memberof_chain_depth_max (16).
const CHAIN: usize = 20;
const GROUPS: &str = "ou=groups,dc=example,dc=com";
const PEOPLE: &str = "ou=people,dc=example,dc=com";

/// Four shards; cn=hidden is unreadable for everyone but the rootDN; authenticated users
/// may not run unindexed searches (so a `(memberOf=G)` that succeeds for them is indexed).
const CONFIG: &str = r#"
shards = 4
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = true
password_hash_on_write = false
[[access_rules]]
to = 'attrs=userPassword'
by = ['self write', 'anonymous auth', '* none']
[[access_rules]]
to = 'dn.base="cn=hidden,ou=groups,dc=example,dc=com"'
by = ['* none']
[[access_rules]]
to = '*'
by = ['* read']
[limits.authenticated]
unindexed_search = "refuse"
search_entries_max = 5000
[log]
level = "warn"
"#;

fn user(i: usize) -> String {
    format!("uid=u{i},{PEOPLE}")
}

fn group(name: &str) -> String {
    format!("cn={name},{GROUPS}")
}

fn ldif() -> String {
    let mut out = String::new();
    for i in 0..USERS {
        let password = if i == 0 { "userPassword: pw\n" } else { "" };
        out.push_str(&format!(
            "dn: {}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\ncn: u{i}\nsn: u\nuid: u{i}\n\
             uidNumber: {i}\ngidNumber: 100\nhomeDirectory: /home/u{i}\n{password}\n",
            user(i)
        ));
    }
    let mut groups: Vec<(String, Vec<String>)> = vec![
        ("big".into(), (0..USERS).map(user).collect()),
        // A cycle: g1 ⊃ g2 ⊃ g3 ⊃ g1.
        ("g1".into(), vec![user(1), group("g2")]),
        ("g2".into(), vec![user(2), group("g3")]),
        ("g3".into(), vec![user(3), group("g1")]),
        ("hidden".into(), vec![user(1)]),
        // A member that does not exist (yet): dangling values are allowed.
        ("dangling".into(), vec![user(5), format!("uid=nobody,{PEOPLE}")]),
    ];
    for d in 0..CHAIN {
        let next = if d + 1 < CHAIN { group(&format!("d{}", d + 1)) } else { user(6) };
        groups.push((format!("d{d}"), vec![next]));
    }
    for (name, members) in groups {
        out.push_str(&format!("dn: {}\nobjectClass: groupOfNames\ncn: {name}\n", group(&name)));
        for m in members {
            out.push_str(&format!("member: {m}\n"));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "dn: {}\nobjectClass: groupOfUniqueNames\ncn: uniq\nuniqueMember: {}#'0101'B\nuniqueMember: {}\n\n",
        group("uniq"),
        user(4),
        user(7)
    ));
    out
}

fn search(client: &mut Client, base: &str, filter: &str, attrs: &[&str]) -> (Vec<SearchEntry>, LdapResult) {
    let result = client.search(base, Scope::Subtree, filter, attrs.to_vec()).expect("search");
    (result.0.into_iter().map(SearchEntry::construct).collect(), result.1)
}

/// The DNs a successful subtree search of the whole suffix returns, lowercased.
fn dns(client: &mut Client, filter: &str) -> BTreeSet<String> {
    let (entries, done) = search(client, BASE, filter, &["1.1"]);
    assert_eq!(done.rc, 0, "{filter}: {done:?}");
    entries.into_iter().map(|e| e.dn.to_ascii_lowercase()).collect()
}

fn set(dns: &[String]) -> BTreeSet<String> {
    dns.iter().map(|d| d.to_ascii_lowercase()).collect()
}

fn member_of(client: &mut Client, dn: &str, attrs: &[&str]) -> Option<BTreeSet<String>> {
    let result = client.search(dn, Scope::Base, "(objectClass=*)", attrs.to_vec()).expect("search");
    assert_eq!(result.1.rc, 0, "{dn}: {:?}", result.1);
    let entry = SearchEntry::construct(result.0.into_iter().next().expect("the entry"));
    let values = entry.attrs.iter().find(|(name, _)| name.eq_ignore_ascii_case("memberOf"));
    values.map(|(name, values)| {
        assert_eq!(name, "memberOf", "spelled as the schema spells it");
        values.iter().map(|v| v.to_ascii_lowercase()).collect()
    })
}

#[test]
fn memberof_in_chain_and_bit_rules() {
    let server = Server::start_with_config(CONFIG);
    let url = server.url();
    let (code, _, err) = tool("ldapadd", &["-x", "-H", &url, "-D", ADMIN_DN, "-w", ADMIN_PW], Some(&ldif()));
    assert_eq!(code, 0, "ldapadd: {err}");
    let mut root = bound(&server, ADMIN_DN, ADMIN_PW);
    let mut alice = bound(&server, &user(0), "pw");

    // memberOf with `+` and by name, never with `*`; on users spread over the four shards.
    let u1 = member_of(&mut root, &user(1), &["+"]).expect("memberOf with +");
    assert_eq!(u1, set(&[group("big"), group("g1"), group("hidden")]));
    assert_eq!(member_of(&mut root, &user(1), &["memberOf"]), Some(u1.clone()));
    assert_eq!(member_of(&mut root, &user(1), &["*"]), None, "* returns no operational attribute");
    assert_eq!(member_of(&mut root, &user(1), &[]), None);
    for i in 10..30 {
        assert_eq!(member_of(&mut alice, &user(i), &["memberOf"]), Some(set(&[group("big")])), "u{i}");
    }
    // A subtree search returns it on every entry, whichever shard holds it.
    let (entries, done) = search(&mut root, PEOPLE, "(uid=u2*)", &["memberOf"]);
    assert_eq!(done.rc, 0);
    assert_eq!(entries.len(), 111);
    assert!(entries.iter().all(|e| e.attrs.get("memberOf").is_some_and(|v| v.len() >= 1)));
    // uniqueMember, with and without the optional UID.
    assert_eq!(member_of(&mut root, &user(4), &["memberOf"]), Some(set(&[group("big"), group("uniq")])));
    assert_eq!(member_of(&mut root, &user(7), &["memberOf"]), Some(set(&[group("big"), group("uniq")])));
    assert_eq!(dns(&mut alice, &format!("(memberOf={})", group("uniq"))), set(&[user(4), user(7)]));
    // Nested groups are memberships too (direct ones only, by default).
    assert_eq!(member_of(&mut root, &group("g2"), &["memberOf"]), Some(set(&[group("g1")])));

    // A group the requester may not read is not among the values, nor matched by a filter.
    assert_eq!(member_of(&mut alice, &user(1), &["+"]), Some(set(&[group("big"), group("g1")])));
    assert_eq!(dns(&mut root, &format!("(memberOf={})", group("hidden"))), set(&[user(1)]));
    assert!(dns(&mut alice, &format!("(memberOf={})", group("hidden"))).is_empty());

    // (memberOf=G) on 1,000 members, for a user whose class refuses unindexed searches.
    let all_users: BTreeSet<String> = (0..USERS).map(|i| user(i).to_ascii_lowercase()).collect();
    assert_eq!(dns(&mut alice, &format!("(memberOf={})", group("big"))), all_users);
    assert_eq!(
        dns(&mut alice, "(memberOf=CN=Big, OU=Groups,DC=Example,DC=Com)"),
        all_users,
        "distinguishedNameMatch"
    );
    let (_, done) = search(&mut alice, BASE, "(description=x)", &["1.1"]);
    assert_eq!(done.rc, 53, "the class does refuse unindexed searches: {done:?}");
    // Combined with &, | and !.
    let in_u1x: BTreeSet<String> =
        (0..USERS).filter(|i| i.to_string().starts_with('1')).map(|i| user(i).to_ascii_lowercase()).collect();
    assert_eq!(dns(&mut alice, &format!("(&(memberOf={})(uid=u1*))", group("big"))), in_u1x);
    assert_eq!(
        dns(&mut alice, &format!("(|(memberOf={})(uid=u5))", group("g1"))),
        set(&[user(1), group("g2"), user(5)])
    );
    assert_eq!(
        dns(&mut alice, &format!("(&(memberOf={})(memberOf={}))", group("big"), group("g2"))),
        set(&[user(2)])
    );
    let groups_not_in_g1 =
        dns(&mut root, &format!("(&(objectClass=groupOfNames)(!(memberOf={})))", group("g1")));
    assert!(!groups_not_in_g1.contains(&group("g2").to_ascii_lowercase()));
    assert!(groups_not_in_g1.contains(&group("g1").to_ascii_lowercase()));
    assert!(groups_not_in_g1.contains(&group("big").to_ascii_lowercase()));
    assert!(dns(&mut root, &format!("(memberOf=uid=nobody,{PEOPLE})")).is_empty());
    assert_eq!(dns(&mut root, &format!("(memberOf={})", group("dangling"))), set(&[user(5)]));
    // Presence and substrings are evaluated from the values (a scan, for the rootDN).
    let with_groups = dns(&mut root, "(memberOf=*)");
    assert!(with_groups.is_superset(&all_users));
    assert!(with_groups.contains(&group("g1").to_ascii_lowercase()));
    assert!(!with_groups.contains(&group("big").to_ascii_lowercase()));
    assert_eq!(dns(&mut alice, "(&(uid=u3)(memberOf=*))"), set(&[user(3)]));
    assert!(dns(&mut alice, "(&(uid=u3)(!(memberOf=*)))").is_empty());

    // Compare.
    assert_eq!(root.compare(&user(1), "memberOf", group("g1")).expect("compare").0.rc, 6);
    assert_eq!(root.compare(&user(1), "memberOf", group("g2")).expect("compare").0.rc, 5);
    assert_eq!(alice.compare(&user(1), "memberOf", group("hidden")).expect("compare").0.rc, 5);

    // Nobody writes it: NO-USER-MODIFICATION.
    let refused = root.modify(&user(9), vec![Mod::Add("memberOf", HashSet::from([group("g1").as_str()]))]);
    assert_ne!(refused.expect("modify").rc, 0, "memberOf is not writable");

    // In-chain on memberOf: everything below g1, through the cycle (which ends).
    let chain = "1.2.840.113556.1.4.1941";
    let below_g1 = set(&[user(1), group("g2"), user(2), group("g3"), user(3), group("g1")]);
    assert_eq!(dns(&mut alice, &format!("(memberOf:{chain}:={})", group("g1"))), below_g1);
    assert_eq!(dns(&mut alice, &format!("(memberOf={})", group("g1"))), set(&[user(1), group("g2")]));
    // In-chain on member: every group above u2.
    let above_u2 = set(&[group("big"), group("g2"), group("g1"), group("g3")]);
    assert_eq!(dns(&mut alice, &format!("(member:{chain}:={})", user(2))), above_u2);
    assert_eq!(dns(&mut alice, &format!("(member={})", user(2))), set(&[group("big"), group("g2")]));
    assert_eq!(
        dns(&mut alice, &format!("(&(objectClass=groupOfNames)(member:{chain}:={}))", user(3))),
        set(&[group("big"), group("g3"), group("g2"), group("g1")])
    );
    // Deeper than memberof_chain_depth_max: adminLimitExceeded, both ways.
    let (_, done) = search(&mut alice, BASE, &format!("(memberOf:{chain}:={})", group("d0")), &["1.1"]);
    assert_eq!(done.rc, 11, "{done:?}");
    let (_, done) = search(&mut alice, BASE, &format!("(member:{chain}:={})", user(6)), &["1.1"]);
    assert_eq!(done.rc, 11, "{done:?}");
    // Within the cap it answers.
    assert_eq!(dns(&mut alice, &format!("(memberOf:{chain}:={})", group("d15"))).len(), CHAIN - 15);

    // The bit rules on an integer attribute.
    let and: BTreeSet<String> =
        (0..USERS).filter(|i| i & 6 == 6).map(|i| user(i).to_ascii_lowercase()).collect();
    let or: BTreeSet<String> =
        (0..USERS).filter(|i| i & 6 != 0).map(|i| user(i).to_ascii_lowercase()).collect();
    assert_eq!(dns(&mut root, "(uidNumber:1.2.840.113556.1.4.803:=6)"), and);
    assert_eq!(dns(&mut root, "(uidNumber:1.2.840.113556.1.4.804:=6)"), or);
    assert_eq!(dns(&mut root, "(&(uid=u7)(uidNumber:integerBitAndMatch:=5))"), set(&[user(7)]));

    // ldapsearch shows it too, and cn=Subschema lists the rules.
    let (code, out, err) = tool(
        "ldapsearch",
        &["-x", "-LLL", "-H", &url, "-b", &user(3), "-s", "base", "(objectClass=*)", "+"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("memberOf: {}", group("g3"))), "{out}");
    let (code, out, _) = tool(
        "ldapsearch",
        &[
            "-x",
            "-LLL",
            "-o",
            "ldif-wrap=no",
            "-H",
            &url,
            "-b",
            "cn=Subschema",
            "-s",
            "base",
            "(objectClass=*)",
            "matchingRules",
            "attributeTypes",
        ],
        None,
    );
    assert_eq!(code, 0);
    for oid in ["1.2.840.113556.1.4.1941", "1.2.840.113556.1.4.803", "1.2.840.113556.1.4.804"] {
        assert!(out.contains(&format!("matchingRules: ( {oid} ")), "{oid} not listed");
    }
    assert!(
        out.contains("attributeTypes: ( 1.2.840.113556.1.2.102 NAME 'memberOf'"),
        "memberOf not published"
    );
}

#[test]
fn transitive_memberof_lists_nested_groups() {
    let config =
        CONFIG.replacen("password_hash_on_write", "memberof_transitive = true\npassword_hash_on_write", 1);
    let server = Server::start_with_config(&config);
    let url = server.url();
    let text = format!(
        "dn: {}\nobjectClass: groupOfNames\ncn: inner\nmember: uid=alice,{PEOPLE}\n\n\
         dn: {}\nobjectClass: groupOfNames\ncn: outer\nmember: {}\n\n",
        group("inner"),
        group("outer"),
        group("inner")
    );
    let (code, _, err) = tool("ldapadd", &["-x", "-H", &url, "-D", ADMIN_DN, "-w", ADMIN_PW], Some(&text));
    assert_eq!(code, 0, "ldapadd: {err}");
    let mut root = bound(&server, ADMIN_DN, ADMIN_PW);
    let alice = format!("uid=alice,{PEOPLE}");
    let groups = member_of(&mut root, &alice, &["memberOf"]).expect("memberOf");
    assert!(groups.is_superset(&set(&[group("inner"), group("outer")])), "{groups:?}");
    let members = dns(&mut root, &format!("(memberOf={})", group("outer")));
    assert_eq!(members, set(&[group("inner"), alice]));
}

/// memberOf is read from member's equality index, so `memberof` keeps that index whatever
/// `index` says.
#[test]
fn memberof_keeps_the_member_index_whatever_the_config_says() {
    let config =
        CONFIG.replacen("password_hash_on_write", "index = [\"objectClass eq\"]\npassword_hash_on_write", 1);
    let server = Server::start_with_config(&config);
    let mut root = bound(&server, ADMIN_DN, ADMIN_PW);
    let alice = format!("uid=alice,{PEOPLE}");
    let staff = group("staff");
    assert_eq!(member_of(&mut root, &alice, &["memberOf"]), Some(set(&[staff.clone()])));
    let mut alice_client = bound(&server, &alice, "password");
    let (_, done) = search(&mut alice_client, BASE, &format!("(member={alice})"), &["1.1"]);
    assert_eq!(done.rc, 0, "(member=...) is indexed: {done:?}");
}

/// `(memberOf=G)` searches resolve G's members once per worker while nothing is written
/// (router/src/memberids.rs): a write anywhere must show in the next search. Covered: a
/// dangling member value whose entry appears, a member renamed away (no referential
/// integrity), a member deleted, a value added to the group, all on one connection (one
/// worker, one cache).
#[test]
fn memberof_searches_see_every_write_after_them() {
    let server = Server::start_with_config(CONFIG);
    let mut root = bound(&server, ADMIN_DN, ADMIN_PW);
    let person = |root: &mut Client, uid: &str| {
        let attrs = vec![
            ("objectClass", HashSet::from(["inetOrgPerson"])),
            ("cn", HashSet::from([uid])),
            ("sn", HashSet::from(["s"])),
            ("uid", HashSet::from([uid])),
        ];
        assert_eq!(root.add(&format!("uid={uid},{PEOPLE}"), attrs).unwrap().rc, 0, "add {uid}");
    };
    // The example data may hold either container already: -c goes on past "already exists".
    let ldif = format!(
        "dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n\n\
         dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups\n"
    );
    let args = ["-x", "-c", "-H", &server.url(), "-D", ADMIN_DN, "-w", ADMIN_PW];
    let (code, _, err) = tool("ldapadd", &args, Some(&ldif));
    assert!(code == 0 || code == 68, "{err}");
    for uid in ["a", "b", "c"] {
        person(&mut root, uid);
    }
    let (a, b, c, late) = (user_dn("a"), user_dn("b"), user_dn("c"), user_dn("late"));
    let members = HashSet::from([a.as_str(), b.as_str(), late.as_str()]);
    let attrs = vec![
        ("objectClass", HashSet::from(["groupOfNames"])),
        ("cn", HashSet::from(["cached"])),
        ("member", members),
    ];
    assert_eq!(root.add(&group("cached"), attrs).unwrap().rc, 0);
    let filter = format!("(memberOf={})", group("cached"));
    let found = |root: &mut Client| {
        let (entries, done) = search(root, BASE, &filter, &["1.1"]);
        assert_eq!(done.rc, 0);
        entries.into_iter().map(|e| e.dn.to_ascii_lowercase()).collect::<BTreeSet<_>>()
    };
    let lower = |dns: &[&String]| dns.iter().map(|d| d.to_ascii_lowercase()).collect::<BTreeSet<_>>();
    assert_eq!(found(&mut root), lower(&[&a, &b]));
    assert_eq!(found(&mut root), lower(&[&a, &b]), "the same answer from the cache");
    // The dangling value's entry appears.
    person(&mut root, "late");
    assert_eq!(found(&mut root), lower(&[&a, &b, &late]));
    // A member renamed away (nothing rewrites the group's value): no longer a member.
    assert_eq!(root.modifydn(&a, "uid=a2", true, None).unwrap().rc, 0);
    assert_eq!(found(&mut root), lower(&[&b, &late]));
    // A member deleted.
    assert_eq!(root.delete(&b).unwrap().rc, 0);
    assert_eq!(found(&mut root), lower(&[&late]));
    // A value added to the group.
    let add = vec![Mod::Add("member", HashSet::from([c.as_str()]))];
    assert_eq!(root.modify(&group("cached"), add).unwrap().rc, 0);
    assert_eq!(found(&mut root), lower(&[&late, &c]));
}

fn user_dn(uid: &str) -> String {
    format!("uid={uid},{PEOPLE}")
}
