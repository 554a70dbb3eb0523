//! The retro changelog (`[changelog] enabled = true`): cn=changelog in 389-ds's layout,
//! read by real clients. One test per write operation checks every attribute of its
//! record; the records survive a SIGKILL and numbers keep rising after the restart; python
//! ldap3 reads it as a sync tool does (from a changeNumber on, two entries a page);
//! `max_entries` trims the oldest (firstChangeNumber moves); anonymous and plain users
//! find nothing, a user an access rule names reads it.

use std::collections::HashSet;

use ldap3::{Mod, Scope, SearchEntry};

use crate::harness::{bound, connect_url, tool, wait_until, Client, Server, ADMIN_DN, ADMIN_PW};

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
/// The Python used for the python3-ldap3 test: the system's, where apt installs the module.
const PYTHON: &str = "/usr/bin/python3";

fn config(changelog: &str, extra: &str) -> String {
    format!(
        "shards = 4\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\n\
         example_data = true\n{extra}\n[log]\nlevel = \"warn\"\n[changelog]\nenabled = true\n{changelog}\n"
    )
}

/// The root DSE's (firstChangeNumber, lastChangeNumber), and that it names cn=changelog.
fn root_numbers(client: &mut Client) -> (u64, u64) {
    let (entries, _) = client
        .search(
            "",
            Scope::Base,
            "(objectClass=*)",
            vec!["changelog", "firstChangeNumber", "lastChangeNumber"],
        )
        .expect("root DSE")
        .success()
        .expect("root DSE");
    let entry = SearchEntry::construct(entries.into_iter().next().expect("the root DSE"));
    assert_eq!(entry.attrs.get("changelog"), Some(&vec!["cn=changelog".to_string()]), "{entry:?}");
    let number = |name: &str| -> u64 {
        entry
            .attrs
            .get(name)
            .and_then(|v| v.first())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from the root DSE: {entry:?}"))
    };
    (number("firstChangeNumber"), number("lastChangeNumber"))
}

/// The records from changeNumber `from` on, in the order sent, with every attribute.
fn records_from(client: &mut Client, from: u64) -> Vec<SearchEntry> {
    let filter = format!("(changeNumber>={from})");
    let (entries, _) = client
        .search("cn=changelog", Scope::OneLevel, &filter, vec!["*", "+"])
        .expect("search cn=changelog")
        .success()
        .expect("search cn=changelog");
    entries.into_iter().map(SearchEntry::construct).collect()
}

fn one(entry: &SearchEntry, name: &str) -> String {
    let values = entry.attrs.get(name).unwrap_or_else(|| panic!("{name} missing: {entry:?}"));
    assert_eq!(values.len(), 1, "{name}: {values:?}");
    values[0].clone()
}

fn number(entry: &SearchEntry) -> u64 {
    one(entry, "changeNumber").parse().expect("changeNumber is an integer")
}

/// What every record carries, whatever its change: its DN, classes, number, type, target,
/// time and author.
fn check_common(entry: &SearchEntry, kind: &str, target: &str, after: u64) {
    let n = number(entry);
    assert!(n > after, "changeNumber {n} after {after}");
    assert_eq!(entry.dn, format!("changeNumber={n},cn=changelog"));
    let classes: HashSet<String> =
        entry.attrs["objectClass"].iter().map(|c| c.to_ascii_lowercase()).collect();
    assert_eq!(classes, HashSet::from(["top".to_string(), "changelogentry".to_string()]));
    assert_eq!(one(entry, "changeType"), kind);
    assert_eq!(one(entry, "targetDN").to_ascii_lowercase(), target.to_ascii_lowercase());
    assert!(one(entry, "creatorsName").eq_ignore_ascii_case(ADMIN_DN), "{entry:?}");
    let time = one(entry, "changeTime");
    assert!(time.len() == 15 && time.ends_with('Z') && time.starts_with("20"), "changeTime {time:?}");
}

/// The one record after `after`, once it is there.
fn only_record_after(client: &mut Client, after: u64) -> SearchEntry {
    let mut records = records_from(client, after + 1);
    assert_eq!(records.len(), 1, "one change, one record: {records:?}");
    records.remove(0)
}

fn person(uid: &str) -> Vec<(&'static str, HashSet<String>)> {
    let one = |v: &str| HashSet::from([v.to_string()]);
    vec![
        ("objectClass", one("inetOrgPerson")),
        ("uid", one(uid)),
        ("cn", one(uid)),
        ("sn", one("Tester")),
        ("userPassword", one("clear-text-pw")),
    ]
}

fn add(client: &mut Client, dn: &str, attrs: Vec<(&'static str, HashSet<String>)>) {
    let attrs: Vec<(&str, HashSet<&str>)> =
        attrs.iter().map(|(k, v)| (*k, v.iter().map(String::as_str).collect())).collect();
    let result = client.add(dn, attrs).expect("add");
    assert_eq!(result.rc, 0, "add {dn}: {result:?}");
}

#[test]
fn an_add_is_recorded_with_its_attributes_and_hashed_password() {
    let server = Server::start_with_config(&config("", ""));
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let (_, before) = root_numbers(&mut admin);
    let dn = format!("uid=cl-add,{PEOPLE}");
    add(&mut admin, &dn, person("cl-add"));
    let record = only_record_after(&mut admin, before);
    check_common(&record, "add", &dn, before);
    let changes = one(&record, "changes");
    for line in ["objectClass: inetOrgPerson", "uid: cl-add", "cn: cl-add", "sn: Tester"] {
        assert!(changes.lines().any(|l| l == line), "{line:?} missing from:\n{changes}");
    }
    let password = changes.lines().find(|l| l.starts_with("userPassword")).expect("userPassword line");
    assert!(!changes.contains("clear-text-pw"), "the clear password is recorded:\n{changes}");
    assert!(password.starts_with("userPassword: {") || password.starts_with("userPassword:: "), "{password}");
    for absent in ["newRDN", "deleteOldRDN", "newSuperior"] {
        assert!(!record.attrs.contains_key(absent), "{absent} on an add: {record:?}");
    }
    let (first, last) = root_numbers(&mut admin);
    assert_eq!(last, number(&record), "lastChangeNumber is the add's");
    assert!(first > 0 && first <= last);
    // The record is also its own base, and filters on its type and target find it.
    let base = format!("changeNumber={},cn=changelog", number(&record));
    let (found, _) =
        admin.search(&base, Scope::Base, "(objectClass=*)", vec!["changeType"]).unwrap().success().unwrap();
    assert_eq!(found.len(), 1);
    let filter = format!("(&(changeType=add)(targetDN={dn}))");
    let (found, _) =
        admin.search("cn=changelog", Scope::Subtree, &filter, vec!["1.1"]).unwrap().success().unwrap();
    assert_eq!(found.len(), 1, "{filter}");
    let filter = format!("(&(changeType=delete)(targetDN={dn}))");
    let (found, _) =
        admin.search("cn=changelog", Scope::Subtree, &filter, vec!["1.1"]).unwrap().success().unwrap();
    assert!(found.is_empty(), "{filter}");
}

#[test]
fn a_modify_is_recorded_as_its_modification_list() {
    let server = Server::start_with_config(&config("", ""));
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let dn = format!("uid=cl-mod,{PEOPLE}");
    add(&mut admin, &dn, person("cl-mod"));
    let (_, before) = root_numbers(&mut admin);
    let changes = vec![
        Mod::Replace("description", HashSet::from(["first line"])),
        Mod::Add("mail", HashSet::from(["cl-mod@example.com"])),
        Mod::Delete("sn", HashSet::new()),
        Mod::Add("sn", HashSet::from(["Renamed"])),
    ];
    assert_eq!(admin.modify(&dn, changes).expect("modify").rc, 0);
    let record = only_record_after(&mut admin, before);
    check_common(&record, "modify", &dn, before);
    assert_eq!(
        one(&record, "changes"),
        "replace: description\ndescription: first line\n-\nadd: mail\nmail: cl-mod@example.com\n-\n\
         delete: sn\n-\nadd: sn\nsn: Renamed\n-\n"
    );
    for absent in ["newRDN", "deleteOldRDN", "newSuperior"] {
        assert!(!record.attrs.contains_key(absent), "{absent} on a modify: {record:?}");
    }
    // A new password is recorded as stored: hashed.
    let (_, before) = root_numbers(&mut admin);
    let replace = vec![Mod::Replace("userPassword", HashSet::from(["another-clear-pw"]))];
    assert_eq!(admin.modify(&dn, replace).expect("modify").rc, 0);
    let record = only_record_after(&mut admin, before);
    let changes = one(&record, "changes");
    assert!(changes.starts_with("replace: userPassword\nuserPassword"), "{changes}");
    assert!(!changes.contains("another-clear-pw"), "the clear password is recorded:\n{changes}");
}

#[test]
fn a_modify_dn_is_recorded_with_its_new_rdn_and_superior() {
    let server = Server::start_with_config(&config("", ""));
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let other = "ou=moved,dc=example,dc=com";
    let ou = vec![
        ("objectClass", HashSet::from(["organizationalUnit".to_string()])),
        ("ou", HashSet::from(["moved".to_string()])),
    ];
    add(&mut admin, other, ou);
    let dn = format!("uid=cl-ren,{PEOPLE}");
    add(&mut admin, &dn, person("cl-ren"));
    // A move under another parent, dropping the old RDN's value.
    let (_, before) = root_numbers(&mut admin);
    let result = admin.modifydn(&dn, "uid=cl-ren2", true, Some(other)).expect("modify dn");
    assert_eq!(result.rc, 0, "{result:?}");
    let record = only_record_after(&mut admin, before);
    check_common(&record, "modrdn", &dn, before);
    assert_eq!(one(&record, "newRDN"), "uid=cl-ren2");
    assert_eq!(one(&record, "deleteOldRDN"), "TRUE");
    assert!(one(&record, "newSuperior").eq_ignore_ascii_case(other), "{record:?}");
    assert!(!record.attrs.contains_key("changes"), "{record:?}");
    // A rename in place that keeps the old value: no newSuperior, deleteOldRDN FALSE.
    let moved = format!("uid=cl-ren2,{other}");
    let (_, before) = root_numbers(&mut admin);
    assert_eq!(admin.modifydn(&moved, "uid=cl-ren3", false, None).expect("modify dn").rc, 0);
    let record = only_record_after(&mut admin, before);
    check_common(&record, "modrdn", &moved, before);
    assert_eq!(one(&record, "newRDN"), "uid=cl-ren3");
    assert_eq!(one(&record, "deleteOldRDN"), "FALSE");
    assert!(!record.attrs.contains_key("newSuperior"), "{record:?}");
}

#[test]
fn a_delete_is_recorded_with_its_target() {
    let server = Server::start_with_config(&config("", ""));
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let dn = format!("uid=cl-del,{PEOPLE}");
    add(&mut admin, &dn, person("cl-del"));
    let (_, before) = root_numbers(&mut admin);
    assert_eq!(admin.delete(&dn).expect("delete").rc, 0);
    let record = only_record_after(&mut admin, before);
    check_common(&record, "delete", &dn, before);
    for absent in ["changes", "newRDN", "deleteOldRDN", "newSuperior"] {
        assert!(!record.attrs.contains_key(absent), "{absent} on a delete: {record:?}");
    }
    // The default rules (`to * by * read`) do not reach the changelog: only the rootDN
    // reads it.
    for (who, mut client) in
        [("anonymous", connect_url(&server.url())), ("a user", bound(&server, ALICE, "password"))]
    {
        let result =
            client.search("cn=changelog", Scope::Subtree, "(objectClass=*)", vec!["*"]).expect("search");
        assert_eq!((result.1.rc, result.0.len()), (32, 0), "{who} reads the changelog");
    }
}

#[test]
fn records_survive_a_kill_and_numbers_keep_rising() {
    let mut server = Server::start_with_config(&config("", ""));
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let (_, start) = root_numbers(&mut admin);
    for i in 0..3 {
        let value = format!("before {i}");
        let change = vec![Mod::Replace("description", HashSet::from([value.as_str()]))];
        assert_eq!(admin.modify(ALICE, change).expect("modify").rc, 0);
    }
    let before: Vec<u64> = records_from(&mut admin, start + 1).iter().map(number).collect();
    assert_eq!(before.len(), 3, "{before:?}");
    drop(admin);
    // SIGKILL: every acknowledged change and its record were committed together.
    server.kill();
    server.restart();
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let after: Vec<u64> = records_from(&mut admin, start + 1).iter().map(number).collect();
    assert_eq!(after, before, "the records after a kill");
    let (_, last) = root_numbers(&mut admin);
    assert_eq!(last, *before.last().unwrap());
    let change = vec![Mod::Replace("description", HashSet::from(["after the restart"]))];
    assert_eq!(admin.modify(ALICE, change).expect("modify").rc, 0);
    let record = only_record_after(&mut admin, last);
    assert!(number(&record) > last, "numbering goes on above {last}");
    assert_eq!(one(&record, "changes"), "replace: description\ndescription: after the restart\n-\n");
}

#[test]
fn a_sync_tool_reads_from_a_change_number_on_two_a_page_with_python_ldap3() {
    let check = std::process::Command::new(PYTHON).args(["-c", "import ldap3"]).output();
    let ok = check.as_ref().is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{PYTHON} cannot import ldap3: install it with `apt-get install -y python3-ldap3` ({check:?})"
    );
    let server = Server::start_with_config(&config("", ""));
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let (_, last) = root_numbers(&mut admin);
    // Seven changes of every kind, on entries spread over the shards.
    let mut expected = Vec::new();
    for i in 0..3 {
        add(&mut admin, &format!("uid=sync{i},{PEOPLE}"), person(&format!("sync{i}")));
        expected.push(("add".to_string(), format!("uid=sync{i},{PEOPLE}")));
    }
    let change = vec![Mod::Replace("description", HashSet::from(["synced"]))];
    assert_eq!(admin.modify(&format!("uid=sync0,{PEOPLE}"), change).expect("modify").rc, 0);
    expected.push(("modify".into(), format!("uid=sync0,{PEOPLE}")));
    assert_eq!(admin.modifydn(&format!("uid=sync1,{PEOPLE}"), "uid=sync1b", true, None).unwrap().rc, 0);
    expected.push(("modrdn".into(), format!("uid=sync1,{PEOPLE}")));
    assert_eq!(admin.delete(&format!("uid=sync2,{PEOPLE}")).expect("delete").rc, 0);
    expected.push(("delete".into(), format!("uid=sync2,{PEOPLE}")));
    let change = vec![Mod::Replace("description", HashSet::from(["alice synced"]))];
    assert_eq!(admin.modify(ALICE, change).expect("modify").rc, 0);
    expected.push(("modify".into(), ALICE.to_string()));
    // The tool remembers the last number it saw and asks for everything after it, paged.
    let script = r#"
import sys, ldap3
host, port = sys.argv[1].rsplit(":", 1)
server = ldap3.Server(host, port=int(port), get_info=ldap3.NONE)
conn = ldap3.Connection(server, user=sys.argv[2], password=sys.argv[3], auto_bind=True, raise_exceptions=True)
cookie, pages, seen = None, 0, []
while True:
    conn.search("cn=changelog", "(changeNumber>=%d)" % (int(sys.argv[4]) + 1), search_scope=ldap3.LEVEL,
                attributes=["changeNumber", "changeType", "targetDN"], paged_size=2, paged_cookie=cookie)
    pages += 1
    for e in conn.entries:
        seen.append("%d\t%s\t%s" % (int(e.changeNumber.value), e.changeType.value, e.targetDN.value))
    cookie = conn.result["controls"]["1.2.840.113556.1.4.319"]["value"]["cookie"]
    if not cookie:
        break
print("pages\t%d" % pages)
print("\n".join(seen))
"#;
    let output = std::process::Command::new(PYTHON)
        .args(["-c", script, &server.addr.to_string(), ADMIN_DN, ADMIN_PW, &last.to_string()])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("pages\t4"), "seven records two a page: {stdout}");
    let seen: Vec<Vec<&str>> = lines.map(|line| line.split('\t').collect()).collect();
    let numbers: Vec<u64> = seen.iter().map(|r| r[0].parse().unwrap()).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "in changeNumber order: {numbers:?}");
    assert!(numbers[0] > last);
    let got: Vec<(String, String)> =
        seen.iter().map(|r| (r[1].to_string(), r[2].to_ascii_lowercase())).collect();
    let expected: Vec<(String, String)> =
        expected.into_iter().map(|(kind, dn)| (kind, dn.to_ascii_lowercase())).collect();
    assert_eq!(got, expected);
    // ldapsearch pages the whole subtree one entry a page: the container once, then every
    // record once.
    let url = server.url();
    let args = [
        "-x",
        "-LLL",
        "-H",
        &url,
        "-D",
        ADMIN_DN,
        "-w",
        ADMIN_PW,
        "-b",
        "cn=changelog",
        "-E",
        "pr=1/noprompt",
    ];
    // Under `timeout`: a cookie that sent the container again would page forever.
    let (rc, out, err) =
        tool("timeout", &[&["60", "ldapsearch"][..], &args[..], &["(objectClass=*)", "1.1"]].concat(), None);
    assert_eq!(rc, 0, "ldapsearch (124: it kept paging): {err}");
    let dns: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("dn: ")).collect();
    let unique: HashSet<&str> = dns.iter().copied().collect();
    assert_eq!(dns.len(), unique.len(), "an entry sent twice: {dns:?}");
    assert_eq!(dns.first(), Some(&"cn=changelog"));
    assert_eq!(dns.len(), 1 + records_from(&mut admin, 0).len(), "{dns:?}");
}

#[test]
fn max_entries_trims_the_oldest_records() {
    // Four shards share eight records: two each.
    let server = Server::start_with_config(&config("max_entries = 8", ""));
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let mut numbers = Vec::new();
    for i in 0..40 {
        let dn = format!("uid=trim{i},{PEOPLE}");
        add(&mut admin, &dn, person(&format!("trim{i}")));
        numbers.push(number(&records_from(&mut admin, 0).into_iter().last().expect("the add's record")));
    }
    let kept: Vec<u64> = records_from(&mut admin, 0).iter().map(number).collect();
    assert!(!kept.is_empty() && kept.len() <= 8, "at most max_entries records: {kept:?}");
    assert_eq!(kept.last(), numbers.last(), "the newest change is kept");
    assert!(!kept.contains(&numbers[0]), "the oldest change is trimmed");
    let (first, last) = root_numbers(&mut admin);
    assert_eq!(first, kept[0], "firstChangeNumber moved to the oldest record kept");
    assert!(first > numbers[0]);
    assert_eq!(last, *numbers.last().unwrap());
}

#[test]
fn max_age_s_trims_old_records_of_an_idle_server() {
    let server = Server::start_with_config(&config("max_age_s = 1", ""));
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let change = vec![Mod::Replace("description", HashSet::from(["short-lived"]))];
    assert_eq!(admin.modify(ALICE, change).expect("modify").rc, 0);
    assert_eq!(records_from(&mut admin, 0).len(), 1, "recorded");
    // No more writes: the shard's timer trims the record once it is a second old.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    assert!(wait_until(deadline, || records_from(&mut admin, 0).is_empty()), "the record outlived max_age_s");
    assert_eq!(root_numbers(&mut admin), (0, 0), "an empty changelog's numbers");
}

#[test]
fn only_the_root_dn_and_users_a_rule_names_read_the_changelog() {
    let rules = "[[access_rules]]\nto = 'dn.subtree=\"cn=changelog\"'\n\
                 by = ['dn.exact=\"uid=alice,ou=people,dc=example,dc=com\" read', '* none']\n\
                 [[access_rules]]\nto = '*'\nby = ['* read']\n";
    let server = Server::start_with_config(&config("", rules));
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let change = vec![Mod::Replace("description", HashSet::from(["seen by alice"]))];
    assert_eq!(admin.modify(ALICE, change).expect("modify").rc, 0);
    assert!(!records_from(&mut admin, 0).is_empty());
    let search_rc = |client: &mut Client| {
        let result =
            client.search("cn=changelog", Scope::Subtree, "(objectClass=*)", vec!["*"]).expect("search");
        (result.1.rc, result.0.len())
    };
    let mut anonymous = connect_url(&server.url());
    assert_eq!(search_rc(&mut anonymous), (32, 0), "anonymous finds nothing");
    let mut bob = bound(&server, "uid=bob,ou=people,dc=example,dc=com", "password");
    assert_eq!(search_rc(&mut bob), (32, 0), "a user no rule names finds nothing");
    let mut alice = bound(&server, ALICE, "password");
    let (rc, count) = search_rc(&mut alice);
    assert_eq!(rc, 0);
    assert!(count >= 2, "the container and the records: {count}");
    // The root DSE says where it is to everyone (389-ds does too).
    let mut anonymous = connect_url(&server.url());
    let (first, last) = root_numbers(&mut anonymous);
    assert!(first > 0 && last >= first);
    // Nobody writes it.
    let result = admin.delete(&format!("changeNumber={last},cn=changelog")).expect("delete");
    assert_eq!(result.rc, 53, "{result:?}");
}
