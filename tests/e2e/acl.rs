//! Access rules through real clients: `[[access_rules]]` in slapd's syntax decide search
//! (entries, attributes, filter assertions, the base), compare, add, delete, modify and
//! Modify DN for anonymous, a user, the user on its own entry, a group member and the
//! rootDN; the loopback and TLS conditions; the default rules (Debian's); and a bad rule
//! stopping the server with a message that names it. The differential test against slapd
//! is tests/conformance/acl.rs.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ldap3::{Mod, Scope, SearchEntry};

use crate::harness::{binary, bound, connect_url, Client, Server, ADMIN_DN, ADMIN_PW, BASE};

const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";
const CAROL: &str = "uid=carol,ou=people,dc=example,dc=com";
const SECRET: &str = "ou=secret,dc=example,dc=com";
const DOC: &str = "cn=doc,ou=secret,dc=example,dc=com";

/// alice and bob are in cn=staff (the example data); carol is in no group.
const RULES: &str = r#"
[[access_rules]]
to = 'attrs=userPassword'
by = ['self write', 'anonymous auth', '* none']
[[access_rules]]
to = 'dn.subtree="ou=secret,dc=example,dc=com"'
by = ['group="cn=staff,ou=groups,dc=example,dc=com" write', 'users disclose', '* none']
[[access_rules]]
to = 'dn.children="ou=people,dc=example,dc=com" attrs=mail,description'
by = ['self write', 'users read', '* none']
[[access_rules]]
to = 'attrs=telephoneNumber'
by = ['peername.ip=127.0.0.1 read', '* none']
[[access_rules]]
to = 'attrs=roomNumber'
by = ['ssf=1 read', '* none']
[[access_rules]]
to = '*'
by = ['self write', '* read']
"#;

fn config(extra: &str) -> String {
    format!(
        "shards = 4\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\nexample_data = true\n\
         {extra}\n[log]\nlevel = \"warn\"\n"
    )
}

/// DN (lowercased) → attribute names (lowercased) of a search's entries, and its code and
/// matchedDN.
fn search(
    client: &mut Client,
    base: &str,
    scope: Scope,
    filter: &str,
) -> (BTreeMap<String, BTreeSet<String>>, u32, String) {
    let (entries, result) =
        client.search(base, scope, filter, vec!["*"]).expect("search").success_or_result();
    let found = entries
        .into_iter()
        .map(SearchEntry::construct)
        .map(|e| {
            let names = e.attrs.keys().chain(e.bin_attrs.keys()).map(|n| n.to_lowercase()).collect();
            (e.dn.to_lowercase(), names)
        })
        .collect();
    (found, result.rc, result.matched)
}

trait SuccessOrResult {
    fn success_or_result(self) -> (Vec<ldap3::ResultEntry>, ldap3::LdapResult);
}

impl SuccessOrResult for ldap3::SearchResult {
    fn success_or_result(self) -> (Vec<ldap3::ResultEntry>, ldap3::LdapResult) {
        (self.0, self.1)
    }
}

fn compare(client: &mut Client, dn: &str, attr: &str, value: &str) -> u32 {
    client.compare(dn, attr, value).expect("compare").0.rc
}

fn replace(client: &mut Client, dn: &str, attr: &str, value: &str) -> u32 {
    client.modify(dn, vec![Mod::Replace(attr, [value].into())]).expect("modify").rc
}

fn add_doc(client: &mut Client, dn: &str, cn: &str) -> u32 {
    let attrs =
        vec![("objectClass", ["document"].into()), ("documentIdentifier", [cn].into()), ("cn", [cn].into())];
    client.add(dn, attrs).expect("add").rc
}

/// The rootDN adds carol, ou=secret with cn=doc, and phone and room numbers for alice.
fn populate(root: &mut Client) {
    let carol = vec![
        ("objectClass", ["inetOrgPerson"].into()),
        ("uid", ["carol"].into()),
        ("cn", ["Carol"].into()),
        ("sn", ["C"].into()),
        ("mail", ["carol@example.com"].into()),
        ("userPassword", ["carolpw"].into()),
    ];
    assert_eq!(root.add(CAROL, carol).expect("add carol").rc, 0);
    let secret = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["secret"].into())];
    assert_eq!(root.add(SECRET, secret).expect("add ou=secret").rc, 0);
    assert_eq!(add_doc(root, DOC, "doc"), 0);
    let changes = vec![
        Mod::Replace("telephoneNumber", ["+1 555 0101"].into()),
        Mod::Replace("roomNumber", ["42"].into()),
    ];
    assert_eq!(root.modify(ALICE, changes).expect("modify alice").rc, 0);
}

#[test]
fn access_rules_decide_every_operation() {
    let server = Server::start_with_config(&config(RULES));
    let mut root = bound(&server, ADMIN_DN, ADMIN_PW);
    populate(&mut root);
    let mut anonymous = bound(&server, "", "");
    // carol binds: anonymous has `auth` on her password.
    let mut carol = bound(&server, CAROL, "carolpw");
    let mut alice = bound(&server, ALICE, "password");

    // Search: entries anonymous may not see are left out; the base is answered as absent.
    let (found, rc, _) = search(&mut anonymous, BASE, Scope::Subtree, "(objectClass=*)");
    assert_eq!(rc, 0);
    assert!(!found.contains_key(SECRET) && !found.contains_key(DOC), "{found:?}");
    let alice_attrs = &found[ALICE];
    assert!(!alice_attrs.contains("mail") && !alice_attrs.contains("userpassword"), "{alice_attrs:?}");
    assert!(alice_attrs.contains("telephonenumber"), "loopback peers read phone numbers: {alice_attrs:?}");
    assert!(!alice_attrs.contains("roomnumber"), "rooms need TLS: {alice_attrs:?}");
    let (_, rc, matched) = search(&mut anonymous, SECRET, Scope::Base, "(objectClass=*)");
    assert_eq!((rc, matched.as_str()), (32, ""), "no disclose: noSuchObject, no matchedDN");
    let (_, rc, matched) =
        search(&mut anonymous, &format!("cn=nothing,{SECRET}"), Scope::Base, "(objectClass=*)");
    assert_eq!((rc, matched.as_str()), (32, ""), "the matchedDN would disclose ou=secret");
    // Filters on what may not be searched are Undefined, even NOT of them.
    let (found, _, _) = search(&mut anonymous, BASE, Scope::Subtree, "(mail=*)");
    assert!(found.is_empty(), "{found:?}");
    let (found, _, _) = search(&mut anonymous, BASE, Scope::Subtree, "(!(mail=nobody@example.com))");
    assert!(!found.contains_key(ALICE), "{found:?}");

    // carol: users `disclose` on ou=secret, read elsewhere, write on her own entry.
    let (_, rc, _) = search(&mut carol, SECRET, Scope::Base, "(objectClass=*)");
    assert_eq!(rc, 50, "disclose only: insufficientAccessRights");
    let (found, _, _) = search(&mut carol, BASE, Scope::Subtree, "(mail=*)");
    assert!(found.contains_key(ALICE) && found.contains_key(CAROL), "{found:?}");
    assert!(!found[ALICE].contains("userpassword") && found[CAROL].contains("userpassword"), "{found:?}");
    assert_eq!(compare(&mut carol, ALICE, "mail", "alice@example.com"), 6);
    assert_eq!(compare(&mut carol, ALICE, "userPassword", "password"), 50, "disclosed, not comparable");
    assert_eq!(compare(&mut anonymous, DOC, "cn", "doc"), 32, "not even disclosed");
    assert_eq!(replace(&mut carol, ALICE, "mail", "stolen@example.com"), 50);
    assert_eq!(replace(&mut carol, CAROL, "description", "carol's own"), 0, "self write");
    assert_eq!(add_doc(&mut carol, &format!("cn=new,{SECRET}"), "new"), 50);
    assert_eq!(carol.delete(DOC).expect("delete").rc, 50);
    assert_eq!(carol.modifydn(DOC, "cn=moved", true, None).expect("modrdn").rc, 50);
    assert_eq!(replace(&mut anonymous, CAROL, "description", "x"), 8, "anonymous: strongerAuthRequired");

    // alice, a member of cn=staff, writes below ou=secret.
    let (found, rc, _) = search(&mut alice, SECRET, Scope::Subtree, "(objectClass=*)");
    assert_eq!((rc, found.len()), (0, 2), "{found:?}");
    assert_eq!(replace(&mut alice, DOC, "description", "reviewed"), 0);
    let new = format!("cn=new,{SECRET}");
    assert_eq!(add_doc(&mut alice, &new, "new"), 0);
    assert_eq!(alice.modifydn(&new, "cn=renamed", true, None).expect("modrdn").rc, 0);
    // Moving out of ou=secret needs write on ou=people's children: alice has only read.
    let renamed = format!("cn=renamed,{SECRET}");
    let rc =
        alice.modifydn(&renamed, "cn=renamed", true, Some("ou=people,dc=example,dc=com")).expect("move").rc;
    assert_eq!(rc, 50);
    assert_eq!(alice.delete(&renamed).expect("delete").rc, 0);
    assert_eq!(replace(&mut alice, BOB, "description", "by alice"), 50, "not self");

    // The rootDN is above the rules.
    let (found, _, _) = search(&mut root, BASE, Scope::Subtree, "(userPassword=*)");
    assert!(found.contains_key(ALICE) && found.contains_key(BOB) && found.contains_key(CAROL), "{found:?}");
    assert_eq!(replace(&mut root, DOC, "description", "by the rootDN"), 0);
}

#[test]
fn the_default_rules_let_users_change_only_their_own_password() {
    let server = Server::start_with_config(&config(""));
    let mut alice = bound(&server, ALICE, "password");
    let mut bob = bound(&server, BOB, "password");
    assert_eq!(replace(&mut bob, ALICE, "userPassword", "bobs-choice"), 50);
    assert_eq!(replace(&mut alice, ALICE, "description", "mine"), 50, "everything else: read");
    assert_eq!(replace(&mut alice, ALICE, "userPassword", "new-secret"), 0, "self write");
    let mut again = connect_url(&server.url());
    assert_eq!(again.simple_bind(ALICE, "new-secret").expect("bind").rc, 0);
    assert_eq!(compare(&mut bob, ALICE, "userPassword", "new-secret"), 50);
}

/// A rule that doesn't compile stops the server at start, naming the rule and the problem.
#[test]
fn a_bad_rule_stops_the_server_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config_path = dir.path().join("ferrodir.toml");
    let rules = "[[access_rules]]\nto = '*'\nby = ['* read']\n[[access_rules]]\nto = 'attrs=noSuchType'\nby = ['* read']\n";
    std::fs::write(&config_path, config(rules)).expect("write config");
    let mut child = Command::new(binary())
        .arg("serve")
        .arg("--config")
        .arg(&config_path)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ferrodir");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ferrodir started with a bad access rule");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().expect("output");
    let text =
        String::from_utf8_lossy(&output.stderr).into_owned() + &String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("access rule 2") && text.contains("noSuchType"), "{text}");
}
