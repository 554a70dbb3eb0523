//! Referential integrity (`[refint]`, docs/OPERATIONS.md): deletes and renames, of a leaf and
//! of a subtree, remove or rewrite the values naming the entry in member, uniqueMember,
//! owner, seeAlso and manager. Four shards and a dozen groups, so that groups and members
//! sit on different shards (the odds that all land on one are 4^-11).

use std::collections::{BTreeSet, HashSet};

use ldap3::{Mod, Scope, SearchEntry};

use std::process::Command;

use crate::harness::{binary, bound, tool, Client, Server, ADMIN_DN, ADMIN_PW};

const ROOT: &str = "ou=ri,dc=example,dc=com";
const PEOPLE: &str = "ou=people,ou=ri,dc=example,dc=com";
const SUB: &str = "ou=sub,ou=ri,dc=example,dc=com";
const NOBODY: &str = "cn=nobody,dc=example,dc=com";

fn config(refint: &str) -> String {
    format!(
        "shards = 4\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\n\
         example_data = true\n[log]\nlevel = \"warn\"\n{refint}\n"
    )
}

fn on(extra: &str) -> String {
    config(&format!("[refint]\nenabled = true\nnothing = \"{NOBODY}\"\n{extra}"))
}

fn add(client: &mut Client, dn: &str, attrs: &[(&str, &[&str])]) {
    let attrs: Vec<(&str, HashSet<&str>)> =
        attrs.iter().map(|(k, v)| (*k, v.iter().copied().collect())).collect();
    let result = client.add(dn, attrs).expect("add");
    assert_eq!(result.rc, 0, "add {dn}: {result:?}");
}

fn person(client: &mut Client, parent: &str, uid: &str, extra: &[(&str, &[&str])]) -> String {
    let dn = format!("uid={uid},{parent}");
    let one = [uid];
    let mut attrs: Vec<(&str, &[&str])> =
        vec![("objectClass", &["inetOrgPerson"]), ("uid", &one), ("cn", &one), ("sn", &one)];
    attrs.extend_from_slice(extra);
    add(client, &dn, &attrs);
    dn
}

fn group(client: &mut Client, cn: &str, members: &[&str], extra: &[(&str, &[&str])]) -> String {
    let dn = format!("cn={cn},{ROOT}");
    let one = [cn];
    let mut attrs: Vec<(&str, &[&str])> =
        vec![("objectClass", &["groupOfNames"]), ("cn", &one), ("member", members)];
    attrs.extend_from_slice(extra);
    add(client, &dn, &attrs);
    dn
}

/// The tree: people u0..u5 under ou=people, s0 and s1 under ou=sub.
fn populate(client: &mut Client) {
    for (dn, ou) in [(ROOT, "ri"), (PEOPLE, "people"), (SUB, "sub")] {
        add(client, dn, &[("objectClass", &["organizationalUnit"]), ("ou", &[ou])]);
    }
    for uid in ["u0", "u1", "u2", "u3", "u4", "u5"] {
        person(client, PEOPLE, uid, &[]);
    }
    for uid in ["s0", "s1"] {
        person(client, SUB, uid, &[]);
    }
}

fn read(client: &mut Client, dn: &str, attr: &str) -> BTreeSet<String> {
    let (entries, _) = client
        .search(dn, Scope::Base, "(objectClass=*)", vec![attr])
        .and_then(|r| r.success())
        .unwrap_or_else(|e| panic!("read {dn}: {e}"));
    let entry = SearchEntry::construct(entries.into_iter().next().expect("one entry"));
    entry
        .attrs
        .into_iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(attr))
        .flat_map(|(_, values)| values)
        .map(|v| v.to_ascii_lowercase())
        .collect()
}

fn dns(values: &[&str]) -> BTreeSet<String> {
    values.iter().map(|v| v.to_ascii_lowercase()).collect()
}

fn delete(client: &mut Client, dn: &str) {
    let result = client.delete(dn).expect("delete");
    assert_eq!(result.rc, 0, "delete {dn}: {result:?}");
}

#[test]
fn deletes_and_renames_rewrite_references_on_every_shard() {
    let server = Server::start_with_config(&on(""));
    let mut c = bound(&server, ADMIN_DN, ADMIN_PW);
    populate(&mut c);
    let u = |n: u32| format!("uid=u{n},{PEOPLE}");
    let s = |n: u32| format!("uid=s{n},{SUB}");
    let (u0, u1, u2, u3, u4, u5, s0, s1) = (u(0), u(1), u(2), u(3), u(4), u(5), s(0), s(1));
    // u0 is named in every refint attribute, in several spellings.
    let u0_spaced = format!("UID=U0 ,  OU=People,OU=RI,DC=Example,DC=COM");
    let u0_oid = format!("0.9.2342.19200300.100.1.1=u0,{PEOPLE}");
    let names = group(&mut c, "names", &[&u0, &u1, &s0], &[("owner", &[&u0]), ("seeAlso", &[&u0_spaced])]);
    let spelled = group(&mut c, "spelled", &[&u0_oid, &u5], &[]);
    let unique_dn = format!("cn=unique,{ROOT}");
    add(
        &mut c,
        &unique_dn,
        &[("objectClass", &["groupOfUniqueNames"]), ("cn", &["unique"]), ("uniqueMember", &[&u0, &u2])],
    );
    let last = group(&mut c, "last", &[&u3], &[]);
    let boss = person(&mut c, ROOT, "boss", &[("manager", &[&u0]), ("seeAlso", &[&s1])]);
    let mut others = Vec::new();
    for i in 0..6 {
        others.push(group(&mut c, &format!("spread{i}"), &[&u0, &u4], &[]));
    }

    delete(&mut c, &u0);
    assert_eq!(read(&mut c, &names, "member"), dns(&[&u1, &s0]));
    // As slapd's refint_nothing: the placeholder goes into any refint attribute a delete
    // empties, not only a MUST one.
    assert_eq!(read(&mut c, &names, "owner"), dns(&[NOBODY]));
    assert_eq!(read(&mut c, &names, "seeAlso"), dns(&[NOBODY]), "another spelling of the DN");
    assert_eq!(read(&mut c, &spelled, "member"), dns(&[&u5]), "the OID form of the DN");
    assert_eq!(read(&mut c, &unique_dn, "uniqueMember"), dns(&[&u2]));
    assert_eq!(read(&mut c, &boss, "manager"), dns(&[NOBODY]));
    for dn in &others {
        assert_eq!(read(&mut c, dn, "member"), dns(&[&u4]), "{dn}");
    }
    assert_eq!(read(&mut c, &names, "modifiersName"), dns(&["cn=Referential Integrity Overlay"]));

    // A leaf renamed in place.
    let renamed = c.modifydn(&u1, "uid=u1x", true, None).expect("modrdn");
    assert_eq!(renamed.rc, 0, "{renamed:?}");
    let u1x = format!("uid=u1x,{PEOPLE}");
    assert_eq!(read(&mut c, &names, "member"), dns(&[&u1x, &s0]));

    // A leaf moved to another parent (its name may move shards).
    let moved = c.modifydn(&u2, "uid=u2", true, Some(SUB)).expect("modrdn");
    assert_eq!(moved.rc, 0, "{moved:?}");
    assert_eq!(read(&mut c, &unique_dn, "uniqueMember"), dns(&[&format!("uid=u2,{SUB}")]));

    // A whole subtree renamed with ldapmodrdn: every member's DN changes.
    let url = server.url();
    let (code, _, err) =
        tool("ldapmodrdn", &["-x", "-H", &url, "-D", ADMIN_DN, "-w", ADMIN_PW, "-r", SUB, "ou=moved"], None);
    assert_eq!(code, 0, "ldapmodrdn: {err}");
    let moved_sub = format!("ou=moved,{ROOT}");
    assert_eq!(read(&mut c, &names, "member"), dns(&[&u1x, &format!("uid=s0,{moved_sub}")]));
    assert_eq!(read(&mut c, &boss, "seeAlso"), dns(&[&format!("uid=s1,{moved_sub}")]));
    assert_eq!(read(&mut c, &unique_dn, "uniqueMember"), dns(&[&format!("uid=u2,{moved_sub}")]));

    // The last member: the placeholder takes its place (member is a MUST of groupOfNames),
    // and leaves again when a real member arrives and the next rewrite finds both.
    let (code, _, err) = tool("ldapdelete", &["-x", "-H", &url, "-D", ADMIN_DN, "-w", ADMIN_PW, &u3], None);
    assert_eq!(code, 0, "ldapdelete: {err}");
    assert_eq!(read(&mut c, &last, "member"), dns(&[NOBODY]));
    let joined = c.modify(&last, vec![Mod::Add("member", HashSet::from([u5.as_str()]))]).expect("modify");
    assert_eq!(joined.rc, 0, "{joined:?}");
    assert_eq!(read(&mut c, &last, "member"), dns(&[NOBODY, &u5]));
}

#[test]
fn the_attribute_list_is_configurable() {
    let server = Server::start_with_config(&on("attributes = [\"member\"]"));
    let mut c = bound(&server, ADMIN_DN, ADMIN_PW);
    populate(&mut c);
    let u0 = format!("uid=u0,{PEOPLE}");
    let u1 = format!("uid=u1,{PEOPLE}");
    let g = group(&mut c, "g", &[&u0, &u1], &[("seeAlso", &[&u0])]);
    delete(&mut c, &u0);
    assert_eq!(read(&mut c, &g, "member"), dns(&[&u1]));
    assert_eq!(read(&mut c, &g, "seeAlso"), dns(&[&u0]), "seeAlso is not in the list");
}

#[test]
fn disabled_rewrites_nothing() {
    let server = Server::start_with_config(&config(""));
    let mut c = bound(&server, ADMIN_DN, ADMIN_PW);
    populate(&mut c);
    let u0 = format!("uid=u0,{PEOPLE}");
    let u1 = format!("uid=u1,{PEOPLE}");
    let g = group(&mut c, "g", &[&u0, &u1], &[]);
    delete(&mut c, &u0);
    let renamed = c.modifydn(&u1, "uid=u1x", true, None).expect("modrdn");
    assert_eq!(renamed.rc, 0, "{renamed:?}");
    assert_eq!(read(&mut c, &g, "member"), dns(&[&u0, &u1]));
}

/// A data directory created without `[refint]` has no index on owner, seeAlso and manager:
/// turning refint on must not miss their references, so the server refuses to start until
/// `ferrodir reindex` has built them, and starts after.
#[test]
fn turning_refint_on_needs_the_equality_indices_built() {
    let mut server = Server::start_with_config(&config(""));
    server.stop();
    std::fs::write(server.config_path(), on("")).expect("write config");
    let run = |command: &str, extra: &[&str]| {
        Command::new(binary())
            .arg(command)
            .arg("--config")
            .arg(server.config_path())
            .arg("--data-dir")
            .arg(&server.data_dir)
            .args(extra)
            .output()
            .expect("run ferrodir")
    };
    let refused = run("serve", &["--listen", "127.0.0.1:0"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "started without the indices refint needs");
    assert!(stderr.contains("ferrodir reindex"), "{stderr}");
    let reindexed = run("reindex", &[]);
    assert!(reindexed.status.success(), "{}", String::from_utf8_lossy(&reindexed.stderr));
    server.restart();
    let mut c = bound(&server, ADMIN_DN, ADMIN_PW);
    populate(&mut c);
    let u0 = format!("uid=u0,{PEOPLE}");
    let boss = person(&mut c, ROOT, "boss", &[("manager", &[&u0])]);
    delete(&mut c, &u0);
    assert_eq!(read(&mut c, &boss, "manager"), dns(&[NOBODY]));
}
