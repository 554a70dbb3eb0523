//! Binds that do not list accounts (issue #24, item 6): a failed bind costs at least a hash
//! in the configured scheme whether the DN exists, has no password, or holds a cheap scheme;
//! and a successful bind against a value in another scheme stores it again in the
//! configured one (`password_upgrade_on_bind`).
//!
//! The timing check here is deliberately loose (a factor of two between medians; before the
//! change the cheap scheme answered a hundred times faster): the 10% figure is measured by
//! `bench/bind-timing.py` and recorded in docs/BENCHMARKS.md.

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use ldap3::{Scope, SearchEntry};

use crate::harness::{bound, connect_url, Server, ADMIN_DN, ADMIN_PW};

const PEOPLE: &str = "ou=people,dc=example,dc=com";

fn config(extra: &str) -> String {
    format!(
        "shards = 2\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\n\
         example_data = true\npassword_scheme = \"{{ARGON2}}\"\n{extra}\n[log]\nlevel = \"info\"\n"
    )
}

/// `{SSHA}` of `password`, as slappasswd makes it (python's hashlib: the test depends on no
/// hashing code of the server).
fn ssha(password: &str) -> String {
    let script = "import hashlib,base64,os,sys\ns=os.urandom(4)\n\
                  print('{SSHA}'+base64.b64encode(hashlib.sha1(sys.argv[1].encode()+s).digest()+s).decode())";
    let output = Command::new("python3").args(["-c", script, password]).output().expect("python3");
    assert!(output.status.success());
    String::from_utf8(output.stdout).expect("utf-8").trim().to_string()
}

fn add_user(server: &Server, uid: &str, password: &str) -> String {
    let mut admin = bound(server, ADMIN_DN, ADMIN_PW);
    let dn = format!("uid={uid},{PEOPLE}");
    let attrs = vec![
        ("objectClass", HashSet::from(["inetOrgPerson"])),
        ("uid", HashSet::from([uid])),
        ("cn", HashSet::from([uid])),
        ("sn", HashSet::from([uid])),
        ("userPassword", HashSet::from([password])),
    ];
    assert_eq!(admin.add(&dn, attrs).expect("add").rc, 0);
    dn
}

fn stored_password(server: &Server, dn: &str) -> String {
    let mut admin = bound(server, ADMIN_DN, ADMIN_PW);
    let (entries, _) = admin
        .search(dn, Scope::Base, "(objectClass=*)", vec!["userPassword"])
        .expect("search")
        .success()
        .expect("ok");
    let entry = SearchEntry::construct(entries.into_iter().next().expect("the entry"));
    let values = entry.bin_attrs.get("userPassword").cloned().unwrap_or_default();
    let text = entry.attrs.get("userPassword").cloned().unwrap_or_default();
    values
        .into_iter()
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .chain(text)
        .next()
        .unwrap_or_default()
}

fn bind_rc(server: &Server, dn: &str, password: &str) -> u32 {
    let mut client = connect_url(&server.url());
    client.simple_bind(dn, password).expect("bind").rc
}

#[test]
fn a_bind_upgrades_a_cheap_scheme_and_only_when_asked() {
    let server = Server::start_with_config(&config(""));
    let dn = add_user(&server, "legacy", &ssha("old-pw"));
    assert!(stored_password(&server, &dn).starts_with("{SSHA}"));
    assert_eq!(bind_rc(&server, &dn, "wrong"), 49);
    assert!(stored_password(&server, &dn).starts_with("{SSHA}"), "a failed bind upgrades nothing");
    assert_eq!(bind_rc(&server, &dn, "old-pw"), 0);
    let upgraded = stored_password(&server, &dn);
    assert!(upgraded.starts_with("{ARGON2}"), "{upgraded}");
    assert_eq!(bind_rc(&server, &dn, "old-pw"), 0, "the upgraded value binds");
    assert_eq!(bind_rc(&server, &dn, "wrong"), 49);

    let off = Server::start_with_config(&config("password_upgrade_on_bind = false"));
    let dn = add_user(&off, "kept", &ssha("pw"));
    assert_eq!(bind_rc(&off, &dn, "pw"), 0);
    assert!(stored_password(&off, &dn).starts_with("{SSHA}"), "upgrade off: the value stays");
}

/// The median time of `count` failed binds as each of `dns`, each on a fresh connection.
/// The kinds take turns, one bind each per round, so that a slow moment of a loaded machine
/// (the other tests run meanwhile) hits every kind alike.
fn median_failed_binds(server: &Server, dns: &[&str], count: usize) -> Vec<Duration> {
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(count); dns.len()];
    for _ in 0..count {
        for (kind, dn) in dns.iter().enumerate() {
            let mut client = connect_url(&server.url());
            let started = Instant::now();
            let rc = client.simple_bind(dn, "not-the-password").expect("bind").rc;
            times[kind].push(started.elapsed());
            assert_eq!(rc, 49);
        }
    }
    times
        .into_iter()
        .map(|mut kind| {
            kind.sort();
            kind[count / 2]
        })
        .collect()
}

#[test]
fn a_failed_bind_takes_as_long_for_a_cheap_scheme_as_for_an_unknown_dn() {
    let server = Server::start_with_config(&config("password_upgrade_on_bind = false"));
    let cheap = add_user(&server, "cheap", &ssha("pw"));
    let strong = add_user(&server, "strong", "pw");
    let unknown = format!("uid=nobody,{PEOPLE}");
    // A locked account (a policy with pwdLockout, locked for good by the administrator):
    // its bind checks no password, and waits as long as a failed check takes instead.
    let locked = add_user(&server, "locked", "pw");
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let policy = vec![
        ("objectClass", HashSet::from(["organizationalRole", "pwdPolicy"])),
        ("cn", HashSet::from(["lock"])),
        ("pwdAttribute", HashSet::from(["userPassword"])),
        ("pwdLockout", HashSet::from(["TRUE"])),
    ];
    assert_eq!(admin.add("cn=lock,dc=example,dc=com", policy).expect("add").rc, 0);
    let lock = vec![
        ldap3::Mod::Replace("pwdPolicySubentry", HashSet::from(["cn=lock,dc=example,dc=com"])),
        ldap3::Mod::Replace("pwdAccountLockedTime", HashSet::from(["000001010000Z"])),
    ];
    assert_eq!(admin.modify(&locked, lock).expect("modify").rc, 0);
    assert_eq!(bind_rc(&server, &locked, "pw"), 49, "locked: even the right password fails");
    // Warm up the hash threads and the connections' path.
    let _ = median_failed_binds(&server, &[&unknown], 3);
    let medians = median_failed_binds(&server, &[&cheap, &unknown, &strong, &locked], 15);
    let (low, high) = (medians.iter().min().expect("3"), medians.iter().max().expect("3"));
    assert!(
        low.as_secs_f64() * 2.0 >= high.as_secs_f64(),
        "medians for an {{SSHA}} user, an unknown DN, an {{ARGON2}} user and a locked one: {medians:?}"
    );
}
