//! Attribute uniqueness (`[[unique]]`, slapo-unique): Add, Modify and Modify DN answer
//! constraintViolation (19) for a value another entry in the rule's subtrees holds; a
//! value outside them, or held by the written entry itself, is no conflict; concurrent
//! adds of one value on different shards let exactly one through; a data directory that
//! already breaks a rule refuses to start, naming the duplicates.

use std::collections::HashSet;
use std::process::Command;

use ldap3::Mod;

use crate::harness::{binary, bound, output_text, Server, ADMIN_DN, ADMIN_PW};

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const OTHER: &str = "ou=other,dc=example,dc=com";

fn config(unique: &str) -> String {
    format!(
        "shards = 4\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\n\
         example_data = true\nindex = [\"objectClass eq\", \"uid eq\", \"mail eq\", \"cn eq,sub\"]\n\
         [log]\nlevel = \"warn\"\n{unique}\n"
    )
}

const RULE: &str =
    "[[unique]]\nattributes = [\"uid\", \"mail\"]\nbases = [\"ou=people,dc=example,dc=com\"]\n";

fn person(uid: &str, mail: &str) -> Vec<(&'static str, HashSet<String>)> {
    let one = |v: &str| HashSet::from([v.to_string()]);
    vec![
        ("objectClass", one("inetOrgPerson")),
        ("uid", one(uid)),
        ("cn", one(uid)),
        ("sn", one(uid)),
        ("mail", one(mail)),
    ]
}

fn add_rc(client: &mut crate::harness::Client, dn: &str, attrs: Vec<(&'static str, HashSet<String>)>) -> u32 {
    let attrs: Vec<(&str, HashSet<&str>)> =
        attrs.iter().map(|(k, v)| (*k, v.iter().map(String::as_str).collect())).collect();
    client.add(dn, attrs).expect("add").rc
}

#[test]
fn adds_modifies_and_renames_keep_values_unique_within_the_bases() {
    let server = Server::start_with_config(&config(RULE));
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let ou = vec![
        ("objectClass", HashSet::from(["organizationalUnit".to_string()])),
        ("ou", HashSet::from(["other".to_string()])),
    ];
    assert_eq!(add_rc(&mut admin, OTHER, ou), 0);
    assert_eq!(add_rc(&mut admin, &format!("uid=u1,{PEOPLE}"), person("u1", "one@example.com")), 0);
    // Another entry's uid, and another's mail, in any letter case mail's rule ignores.
    assert_eq!(add_rc(&mut admin, &format!("cn=u1b,{PEOPLE}"), person("u1", "fresh@example.com")), 19);
    assert_eq!(add_rc(&mut admin, &format!("uid=u2,{PEOPLE}"), person("u2", "ONE@example.com")), 19);
    assert_eq!(add_rc(&mut admin, &format!("uid=u2,{PEOPLE}"), person("u2", "two@example.com")), 0);
    // Outside the rule's base the same values are no conflict.
    assert_eq!(add_rc(&mut admin, &format!("uid=u1,{OTHER}"), person("u1", "one@example.com")), 0);
    // Each attribute is unique on its own: a mail equal to another entry's uid is fine.
    assert_eq!(add_rc(&mut admin, &format!("uid=u3,{PEOPLE}"), person("u3", "u1")), 0);

    // Modify: replacing or adding a taken value is refused; the entry's own value is not.
    let u2 = format!("uid=u2,{PEOPLE}");
    let taken = HashSet::from(["one@example.com"]);
    let rc = admin.modify(&u2, vec![Mod::Replace("mail", taken.clone())]).expect("modify").rc;
    assert_eq!(rc, 19, "replace with another entry's mail");
    let rc = admin.modify(&u2, vec![Mod::Add("mail", taken)]).expect("modify").rc;
    assert_eq!(rc, 19, "add another entry's mail");
    let own = HashSet::from(["two@example.com"]);
    let rc = admin.modify(&u2, vec![Mod::Replace("mail", own)]).expect("modify").rc;
    assert_eq!(rc, 0, "replacing a value with itself");
    let rc = admin.modify(&u2, vec![Mod::Replace("description", HashSet::from(["x"]))]).expect("modify").rc;
    assert_eq!(rc, 0, "a change of an unconstrained type");

    // Modify DN: a new RDN value another entry holds, and a move into the base that brings
    // a taken value, are refused; a rename to a free value goes through.
    let rc = admin.modifydn(&u2, "uid=u1", false, None).expect("modify dn").rc;
    assert_eq!(rc, 19, "rename to another entry's uid");
    let rc = admin.modifydn(&format!("uid=u1,{OTHER}"), "uid=u1", true, Some(PEOPLE)).expect("modify dn").rc;
    assert!(rc == 19 || rc == 68, "moving a duplicate into the base: {rc}");
    let rc = admin.modifydn(&format!("uid=u1,{OTHER}"), "uid=u9", true, Some(PEOPLE)).expect("modify dn").rc;
    assert_eq!(rc, 19, "the moved entry's mail is taken in the base");
    let rc = admin.modifydn(&u2, "uid=u4", true, None).expect("modify dn").rc;
    assert_eq!(rc, 0, "rename to a free uid");
}

#[test]
fn concurrent_adds_of_one_value_on_different_shards_let_exactly_one_through() {
    let server = Server::start_with_config(&config(RULE));
    let url = server.url();
    // Sixteen names: with four shards the adds land on several of them.
    let outcomes: Vec<u32> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let url = url.clone();
                scope.spawn(move || {
                    let mut client = crate::harness::connect_url(&url);
                    client.simple_bind(ADMIN_DN, ADMIN_PW).expect("bind").success().expect("bind ok");
                    add_rc(
                        &mut client,
                        &format!("uid=racer{i},{PEOPLE}"),
                        person(&format!("racer{i}"), "same@example.com"),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("writer")).collect()
    });
    assert_eq!(outcomes.iter().filter(|rc| **rc == 0).count(), 1, "{outcomes:?}");
    assert!(outcomes.iter().all(|rc| *rc == 0 || *rc == 19), "{outcomes:?}");
}

#[test]
fn a_data_directory_that_breaks_a_rule_refuses_to_start() {
    let mut server = Server::start_with_config(&config(""));
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    assert_eq!(add_rc(&mut admin, &format!("uid=d1,{PEOPLE}"), person("d1", "dup@example.com")), 0);
    assert_eq!(add_rc(&mut admin, &format!("uid=d2,{PEOPLE}"), person("d2", "dup@example.com")), 0);
    drop(admin);
    server.stop();
    std::fs::write(server.config_path(), config(RULE)).expect("config");
    let mut child = Command::new(binary())
        .arg("serve")
        .arg("--config")
        .arg(server.config_path())
        .arg("--data-dir")
        .arg(&server.data_dir)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run ferrodir serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let exited = crate::harness::wait_until(deadline, || matches!(child.try_wait(), Ok(Some(_))));
    if !exited {
        let _ = child.kill();
    }
    let output = child.wait_with_output().expect("its output");
    let text = output_text(&output);
    assert!(exited && !output.status.success(), "started over duplicates: {text}");
    assert!(text.contains("dup@example.com") && text.contains("uid=d1") && text.contains("uid=d2"), "{text}");
}
