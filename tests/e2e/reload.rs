//! Reloading the configuration while serving (SIGHUP and `ferrodir reload`): limits,
//! access rules, `[[unique]]` and the root password change for new operations; a
//! connection bound before the reload keeps working; a file that does not validate
//! changes nothing and `ferrodir reload` says why.

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use ldap3::{Scope, SearchEntry};

use crate::harness::{bound, connect_url, wait_until, Server, ADMIN_DN};

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
    let (ok, text) = server.reload();
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
    let (ok, text) = server.reload();
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

/// The root DSE's lastChangeNumber, None when it names no changelog.
fn last_change_number(server: &Server) -> Option<u64> {
    let mut client = connect_url(&server.url());
    let (entries, _) = client
        .search("", Scope::Base, "(objectClass=*)", vec!["changelog", "lastChangeNumber"])
        .expect("root DSE")
        .success()
        .expect("root DSE");
    let entry = SearchEntry::construct(entries.into_iter().next().expect("the root DSE"));
    entry.attrs.get("lastChangeNumber").and_then(|v| v.first()).and_then(|v| v.parse().ok())
}

/// The root identity's view of cn=changelog: (result code, records).
fn changelog_records(server: &Server) -> (u32, usize) {
    let mut admin = bound(server, ADMIN_DN, "cl-secret");
    let search = admin
        .search("cn=changelog", Scope::OneLevel, "(changeNumber>=0)", vec!["changeNumber"])
        .expect("search");
    (search.1.rc, search.0.len())
}

fn describe_alice(server: &Server, text: &str) {
    let mut admin = bound(server, ADMIN_DN, "cl-secret");
    let change = ldap3::Mod::Replace("description", HashSet::from([text]));
    let rc = admin.modify(&format!("uid=alice,{PEOPLE}"), vec![change]).expect("modify").rc;
    assert_eq!(rc, 0, "modify alice");
}

/// `[changelog]` turned on, bounded, and off again, and the audit log moved to another
/// file, by reloads.
#[test]
fn the_changelog_and_the_audit_log_follow_a_reload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (first, second) = (dir.path().join("audit-1.ldif"), dir.path().join("audit-2.ldif"));
    let file = |audit: &std::path::Path, changelog: &str| {
        format!(
            "shards = 1\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"cl-secret\"\n\
             example_data = true\n[log]\nlevel = \"info\"\n[audit_log]\npath = \"{}\"\n{changelog}\n",
            audit.display()
        )
    };
    let server = Server::start_logged(&file(&first, ""));
    describe_alice(&server, "before");
    let read = |path: &std::path::Path| std::fs::read_to_string(path).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(10);
    assert!(wait_until(deadline, || read(&first).contains("description: before")), "{}", read(&first));
    assert_eq!(last_change_number(&server), None, "no changelog yet");
    assert_eq!(changelog_records(&server), (32, 0), "cn=changelog does not exist yet");

    std::fs::write(server.config_path(), file(&second, "[changelog]\nenabled = true\nmax_entries = 3"))
        .expect("config");
    let (ok, text) = server.reload();
    assert!(ok, "{text}");
    for n in 0..5 {
        describe_alice(&server, &format!("after {n}"));
    }
    assert!(last_change_number(&server).is_some(), "the root DSE names the changelog");
    assert_eq!(changelog_records(&server), (0, 3), "five changes recorded, trimmed to max_entries = 3");
    let deadline = Instant::now() + Duration::from_secs(10);
    assert!(wait_until(deadline, || read(&second).contains("description: after 4")), "{}", read(&second));
    let (old, new) = (read(&first), read(&second));
    assert!(old.contains("description: before") && !old.contains("description: after"), "{old}");
    assert!(new.contains("description: after 0") && !new.contains("description: before"), "{new}");

    // A file the server can't open refuses the reload; the changelog stays on.
    let nowhere = dir.path().join("missing-dir").join("audit.ldif");
    std::fs::write(server.config_path(), file(&nowhere, "[changelog]\nenabled = false")).expect("config");
    let (ok, text) = server.reload();
    assert!(!ok && text.contains("audit_log.path"), "{text}");
    assert!(last_change_number(&server).is_some(), "the refused reload changed nothing");

    std::fs::write(server.config_path(), file(&second, "[changelog]\nenabled = false")).expect("config");
    let (ok, text) = server.reload();
    assert!(ok, "{text}");
    assert_eq!(last_change_number(&server), None, "off again");
    assert_eq!(changelog_records(&server).1, 0, "cn=changelog is gone");
}

/// `[ppolicy] default_policy` set by a reload: the policy applies to the next change.
#[test]
fn a_default_password_policy_set_by_a_reload_applies_to_the_next_change() {
    let file = |ppolicy: &str| {
        format!(
            "shards = 2\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"pp-secret\"\n\
             example_data = true\n[log]\nlevel = \"info\"\n{ppolicy}\n"
        )
    };
    let server = Server::start_logged(&file(""));
    let policy = "cn=strict,dc=example,dc=com";
    let mut admin = bound(&server, ADMIN_DN, "pp-secret");
    let attrs = vec![
        ("objectClass", HashSet::from(["organizationalRole", "pwdPolicy"])),
        ("cn", HashSet::from(["strict"])),
        ("pwdAttribute", HashSet::from(["userPassword"])),
        ("pwdCheckQuality", HashSet::from(["2"])),
        ("pwdMinLength", HashSet::from(["20"])),
    ];
    assert_eq!(admin.add(policy, attrs).expect("add policy").rc, 0);
    // Alice changes her own password (the root identity's changes are not checked, as slapd).
    let alice = format!("uid=alice,{PEOPLE}");
    let current = std::cell::RefCell::new("password".to_string());
    let set_password = |password: &str| {
        let mut client = bound(&server, &alice, &current.borrow());
        let change = ldap3::Mod::Replace("userPassword", HashSet::from([password]));
        let rc = client.modify(&alice, vec![change]).expect("modify").rc;
        if rc == 0 {
            *current.borrow_mut() = password.to_string();
        }
        rc
    };
    assert_eq!(set_password("short-one"), 0, "no policy yet");

    std::fs::write(server.config_path(), file(&format!("[ppolicy]\ndefault_policy = \"{policy}\"")))
        .expect("config");
    let (ok, text) = server.reload();
    assert!(ok, "{text}");
    assert_eq!(set_password("short-two"), 19, "pwdMinLength = 20 now applies");
    assert_eq!(set_password("a-password-of-twenty-five"), 0, "long enough");
}

#[test]
fn dynlist_members_max_set_by_a_reload_applies_to_the_next_search() {
    let file = |members_max: usize| {
        format!(
            "shards = 2\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"dl-secret\"\n\
             example_data = true\n[log]\nlevel = \"info\"\n[dynlist]\nmembers_max = {members_max}\n"
        )
    };
    let server = Server::start_logged(&file(100));
    let mut admin = bound(&server, ADMIN_DN, "dl-secret");
    let group = "cn=everyone,dc=example,dc=com";
    let url = format!("ldap:///{PEOPLE}??one?(objectClass=inetOrgPerson)");
    let attrs = vec![
        ("objectClass", HashSet::from(["groupOfURLs"])),
        ("cn", HashSet::from(["everyone"])),
        ("memberURL", HashSet::from([url.as_str()])),
    ];
    assert_eq!(admin.add(group, attrs).expect("add group").rc, 0);
    let members = |admin: &mut crate::harness::Client| {
        let search = admin.search(group, Scope::Base, "(objectClass=*)", vec!["member"]).expect("search");
        let count = search
            .0
            .into_iter()
            .map(SearchEntry::construct)
            .map(|e| e.attrs.get("member").map_or(0, Vec::len))
            .sum::<usize>();
        (search.1.rc, count)
    };
    let (rc, count) = members(&mut admin);
    assert_eq!(rc, 0);
    assert!(count >= 2, "the example data's people are members: {count}");

    std::fs::write(server.config_path(), file(1)).expect("config");
    let (ok, text) = server.reload();
    assert!(ok, "{text}");
    let mut admin = bound(&server, ADMIN_DN, "dl-secret");
    assert_eq!(members(&mut admin).0, 11, "members_max = 1 now applies: adminLimitExceeded");
}
