//! Reloading the configuration while serving (SIGHUP and `ferrodir reload`): limits,
//! access rules, `[[unique]]` and the root password change for new operations; a
//! connection bound before the reload keeps working; a file that does not validate
//! changes nothing and `ferrodir reload` says why.

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use ldap3::{Scope, SearchEntry};

use crate::harness::{binary, bound, connect_url, output_text, wait_until, Server, ADMIN_DN};

const PEOPLE: &str = "ou=people,dc=example,dc=com";

struct Settings<'a> {
    root_password: &'a str,
    anonymous_entries_max: u32,
    extra: &'a str,
}

fn config(s: &Settings<'_>) -> String {
    format!(
        "shards = 2\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{}\"\n\
         example_data = true\nindex = [\"objectClass eq\", \"uid eq\", \"mail eq\", \"cn eq,sub\"]\n\
         [log]\nlevel = \"info\"\n[limits.anonymous]\nsearch_entries_max = {}\n{}\n",
        s.root_password, s.anonymous_entries_max, s.extra
    )
}

/// Runs `ferrodir reload` for the server: (succeeded, its output).
fn reload(server: &Server) -> (bool, String) {
    let output = Command::new(binary())
        .arg("reload")
        .arg("--config")
        .arg(server.config_path())
        .arg("--data-dir")
        .arg(&server.data_dir)
        .output()
        .expect("run ferrodir reload");
    (output.status.success(), output_text(&output))
}

/// Anonymous search of ou=people's children: (result code, entries).
fn anonymous_people(server: &Server) -> (u32, usize) {
    let mut client = connect_url(&server.url());
    let search = client.search(PEOPLE, Scope::OneLevel, "(objectClass=*)", vec!["mail"]).expect("search");
    (search.1.rc, search.0.len())
}

fn anonymous_mails(server: &Server) -> usize {
    let mut client = connect_url(&server.url());
    let (entries, _) = client
        .search(PEOPLE, Scope::OneLevel, "(uid=alice)", vec!["mail"])
        .expect("search")
        .success()
        .expect("ok");
    entries.into_iter().map(SearchEntry::construct).filter(|e| e.attrs.contains_key("mail")).count()
}

fn add_person(server: &Server, password: &str, uid: &str, mail: &str) -> u32 {
    let mut admin = bound(server, ADMIN_DN, password);
    let attrs = vec![
        ("objectClass", HashSet::from(["inetOrgPerson"])),
        ("uid", HashSet::from([uid])),
        ("cn", HashSet::from([uid])),
        ("sn", HashSet::from([uid])),
        ("mail", HashSet::from([mail])),
    ];
    admin.add(&format!("cn={uid}-{mail},{PEOPLE}"), attrs).expect("add").rc
}

#[test]
fn limits_access_rules_uniqueness_and_the_root_password_change_without_a_restart() {
    let before = Settings { root_password: "first-secret", anonymous_entries_max: 1, extra: "" };
    let server = Server::start_logged(&config(&before));
    // A connection bound before the reload: it stays open and usable.
    let mut held = bound(&server, ADMIN_DN, "first-secret");
    assert_eq!(anonymous_people(&server).0, 4, "sizeLimitExceeded under search_entries_max = 1");
    assert_eq!(anonymous_mails(&server), 1, "the default rules let anyone read mail");
    assert_eq!(add_person(&server, "first-secret", "carol", "alice@example.com"), 0, "no [[unique]] yet");

    let rules = "[[access_rules]]\nto = 'attrs=mail'\nby = ['self read', '* none']\n\
                 [[access_rules]]\nto = '*'\nby = ['* read']\n\
                 [[unique]]\nattributes = [\"uid\"]\nbases = [\"ou=people,dc=example,dc=com\"]\n";
    let after = Settings { root_password: "second-secret", anonymous_entries_max: 0, extra: rules };
    std::fs::write(server.config_path(), config(&after)).expect("config");
    let (ok, text) = reload(&server);
    assert!(ok, "{text}");
    assert!(text.contains("reloaded"), "{text}");

    let (rc, entries) = anonymous_people(&server);
    assert_eq!((rc, entries), (0, 3), "no size limit after the reload (alice, bob, carol)");
    assert_eq!(anonymous_mails(&server), 0, "mail is now readable by its owner only");
    assert_eq!(add_person(&server, "second-secret", "alice", "new@example.com"), 19, "uid unique now");
    let mut old = connect_url(&server.url());
    assert_eq!(old.simple_bind(ADMIN_DN, "first-secret").expect("bind").rc, 49, "old root password");
    // The connection bound before the reload still works.
    let search = held.search(PEOPLE, Scope::Base, "(objectClass=*)", vec!["1.1"]).expect("search");
    assert_eq!((search.1.rc, search.0.len()), (0, 1));

    // A file that does not validate: refused, named, nothing changes.
    let broken = Settings {
        root_password: "third",
        anonymous_entries_max: 1,
        extra: "[[access_rules]]\nto = 'attrs=mail'\nby = ['nonsense grant']\n",
    };
    std::fs::write(server.config_path(), config(&broken)).expect("config");
    let (ok, text) = reload(&server);
    assert!(!ok, "a bad access rule was accepted: {text}");
    assert!(text.contains("access_rules"), "{text}");
    assert_eq!(anonymous_people(&server), (0, 3), "the limits stayed");
    let mut admin = connect_url(&server.url());
    assert_eq!(admin.simple_bind(ADMIN_DN, "second-secret").expect("bind").rc, 0, "the password stayed");
    assert!(server.log().contains("reload refused"), "the log says why");
}

#[test]
fn sighup_reloads_the_file() {
    let before = Settings { root_password: "sig-one", anonymous_entries_max: 1, extra: "" };
    let server = Server::start_logged(&config(&before));
    assert_eq!(anonymous_people(&server).0, 4);
    let after = Settings { root_password: "sig-one", anonymous_entries_max: 0, extra: "" };
    std::fs::write(server.config_path(), config(&after)).expect("config");
    let pid = server.pid().expect("running");
    let status = Command::new("kill").arg("-HUP").arg(pid.to_string()).status().expect("kill -HUP");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    assert!(wait_until(deadline, || server.log().contains("configuration reloaded")), "{}", server.log());
    assert_eq!(anonymous_people(&server), (0, 2));
}
