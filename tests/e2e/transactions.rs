//! LDAP transactions (RFC 5805, issue #25 item 7) over the real binary with four shards:
//! `ldapmodify -E txn=commit` and `txn=abort`, a commit whose last update fails (nothing
//! stays applied), slapd's refusals through raw requests, `transaction_operations_max`, and
//! kill -9 in the middle of a commit (the restart rolls the applied part back).

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ldap3::controls::RawControl;
use ldap3::exop::Exop;
use ldap3::{Scope, SearchEntry};

use crate::harness::{bound, listening_address, tool, wait_until, Server, ADMIN_DN, ADMIN_PW, TEST_CONFIG};

const START: &str = "1.3.6.1.1.21.1";
const END: &str = "1.3.6.1.1.21.3";
const SPEC: &str = "1.3.6.1.1.21.2";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";

fn ldapmodify(server: &Server, extra: &[&str], ldif: &str) -> (i32, String, String) {
    let url = server.url();
    let mut args = vec!["-x", "-H", url.as_str(), "-D", ADMIN_DN, "-w", ADMIN_PW];
    args.extend_from_slice(extra);
    tool("ldapmodify", &args, Some(ldif))
}

/// Every entry under the suffix: DN → its attributes (names lowercased, values sorted),
/// without the operational ones a write changes.
fn tree(server: &Server) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut admin = bound(server, ADMIN_DN, ADMIN_PW);
    let (entries, _) = admin
        .search("dc=example,dc=com", Scope::Subtree, "(objectClass=*)", vec!["*"])
        .unwrap()
        .success()
        .unwrap();
    entries
        .into_iter()
        .map(SearchEntry::construct)
        .map(|e| {
            let attrs = e
                .attrs
                .into_iter()
                .map(|(name, mut values)| {
                    values.sort();
                    (name.to_lowercase(), values)
                })
                .collect();
            (e.dn.to_lowercase(), attrs)
        })
        .collect()
}

/// The script every commit test sends, on entries spread over the four shards: an add, a
/// modify, two renames and a delete. Bob moves to another parent (another shard, most
/// likely) under an RDN value he did not have; Alice is renamed in place under one she
/// had (undoing that must keep the value, which her schema requires).
const SCRIPT: &str = "dn: uid=carol,ou=people,dc=example,dc=com
changetype: add
objectClass: inetOrgPerson
uid: carol
cn: Carol
sn: Carol

dn: uid=alice,ou=people,dc=example,dc=com
changetype: modify
replace: sn
sn: Changed

dn: uid=bob,ou=people,dc=example,dc=com
changetype: modrdn
newrdn: cn=Robert
deleteoldrdn: 1
newsuperior: ou=groups,dc=example,dc=com

dn: uid=alice,ou=people,dc=example,dc=com
changetype: modrdn
newrdn: cn=Alice Liddell
deleteoldrdn: 1

dn: cn=staff,ou=groups,dc=example,dc=com
changetype: delete
";

/// [`SCRIPT`], then an add of an entry that exists: entryAlreadyExists (68) at End.
const FAILING: &str =
    "\ndn: ou=people,dc=example,dc=com\nchangetype: add\nobjectClass: organizationalUnit\nou: people\n";

#[test]
fn a_commit_applies_adds_modifies_renames_and_deletes_across_shards() {
    let server = Server::start_with_config(TEST_CONFIG);
    let (rc, out, err) = ldapmodify(&server, &["-E", "txn=commit"], SCRIPT);
    assert_eq!(rc, 0, "{out}{err}");
    let after = tree(&server);
    assert!(after.contains_key("uid=carol,ou=people,dc=example,dc=com"));
    assert!(!after.contains_key(ALICE) && !after.contains_key(BOB));
    let alice = &after["cn=alice liddell,ou=people,dc=example,dc=com"];
    assert_eq!(alice["sn"], vec!["Changed"]);
    assert!(!alice.contains_key("uid"), "deleteOldRDN removed uid: {alice:?}");
    let bob = &after["cn=robert,ou=groups,dc=example,dc=com"];
    assert_eq!(bob["cn"], vec!["Bob Builder", "Robert"]);
    assert!(!after.contains_key("cn=staff,ou=groups,dc=example,dc=com"));
}

#[test]
fn an_abort_applies_nothing() {
    let server = Server::start_with_config(TEST_CONFIG);
    let before = tree(&server);
    let (rc, out, err) = ldapmodify(&server, &["-E", "txn=abort"], SCRIPT);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(tree(&server), before);
}

#[test]
fn a_failing_update_makes_the_whole_commit_apply_nothing() {
    let server = Server::start_with_config(TEST_CONFIG);
    let before = tree(&server);
    let failing = format!("{SCRIPT}{FAILING}");
    let (rc, out, err) = ldapmodify(&server, &["-E", "txn=commit"], &failing);
    assert_eq!(rc, 68, "{out}{err}");
    assert_eq!(tree(&server), before, "every applied update was undone");
}

fn control(id: &[u8], critical: bool) -> RawControl {
    RawControl { ctype: SPEC.into(), crit: critical, val: Some(id.to_vec()) }
}

/// `txnEndReq` with `commit` and `id`.
fn end_value(commit: bool, id: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    if !commit {
        body.extend_from_slice(&[0x01, 0x01, 0x00]);
    }
    body.extend_from_slice(&[0x04, id.len() as u8]);
    body.extend_from_slice(id);
    let mut out = vec![0x30, body.len() as u8];
    out.extend_from_slice(&body);
    out
}

fn start(admin: &mut crate::harness::Client) -> (u32, Vec<u8>) {
    let result = admin.extended(Exop { name: Some(START.into()), val: None }).unwrap();
    (result.1.rc, result.0.val.unwrap_or_default())
}

fn end(admin: &mut crate::harness::Client, commit: bool, id: &[u8]) -> (u32, String, Option<Vec<u8>>) {
    let result = admin.extended(Exop { name: Some(END.into()), val: Some(end_value(commit, id)) }).unwrap();
    (result.1.rc, result.1.text.clone(), result.0.val)
}

#[test]
fn refusals_and_answers_follow_slapd() {
    let server = Server::start_with_config(TEST_CONFIG);
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let (rc, id) = start(&mut admin);
    assert_eq!(rc, 0);
    assert!(!id.is_empty(), "a fresh identifier");
    // One transaction per connection: busy.
    assert_eq!(start(&mut admin).0, 51);
    // An update is answered success at once, and applied only at End.
    let mods = vec![ldap3::Mod::Replace("sn", std::collections::HashSet::from(["Queued"]))];
    let result = admin.with_controls(control(&id, true)).modify(ALICE, mods.clone()).unwrap();
    assert_eq!(result.rc, 0);
    let mut other = bound(&server, ADMIN_DN, ADMIN_PW);
    let sn = |client: &mut crate::harness::Client| {
        let (entries, _) =
            client.search(ALICE, Scope::Base, "(objectClass=*)", vec!["sn"]).unwrap().success().unwrap();
        SearchEntry::construct(entries.into_iter().next().unwrap()).attrs["sn"].clone()
    };
    assert_ne!(sn(&mut other), vec!["Queued"], "not applied before End");
    // The unknown identifier: 0x4121; not critical: protocolError; a Search: 12.
    let result = admin.with_controls(control(b"nope", true)).modify(ALICE, mods.clone()).unwrap();
    assert_eq!(result.rc, 0x4121);
    let result = admin.with_controls(control(&id, false)).modify(ALICE, mods.clone()).unwrap();
    assert_eq!(result.rc, 2);
    let result =
        admin.with_controls(control(&id, true)).search(ALICE, Scope::Base, "(objectClass=*)", vec!["1.1"]);
    assert_eq!(result.unwrap().1.rc, 12);
    // Another connection can't use it.
    let result = other.with_controls(control(&id, true)).modify(ALICE, mods.clone()).unwrap();
    assert_eq!(result.rc, 0x4121);
    // End with an unknown identifier, then the commit.
    assert_eq!(end(&mut admin, true, b"nope").0, 0x4121);
    let (rc, _, value) = end(&mut admin, true, &id);
    assert_eq!((rc, value), (0, None));
    assert_eq!(sn(&mut other), vec!["Queued"]);
    // The transaction is over: its identifier is unknown now.
    assert_eq!(end(&mut admin, true, &id).0, 0x4121);
    // An abort says so.
    let (_, id) = start(&mut admin);
    assert_eq!(end(&mut admin, false, &id), (0, "transaction aborted".into(), None));
    // A failed commit names the update that failed.
    let (_, id) = start(&mut admin);
    let _ = admin.with_controls(control(&id, true)).modify(ALICE, mods.clone()).unwrap();
    let failing = admin.with_controls(control(&id, true)).delete("uid=nobody,ou=people,dc=example,dc=com");
    assert_eq!(failing.unwrap().rc, 0);
    let (rc, _, value) = end(&mut admin, true, &id);
    assert_eq!(rc, 32);
    let value = value.expect("txnEndRes");
    assert_eq!(value.get(..4), Some(&[0x30, 0x03, 0x02, 0x01][..]), "{value:?}");
    // A Bind ends the open transaction.
    let (_, id) = start(&mut admin);
    admin.simple_bind(ADMIN_DN, ADMIN_PW).unwrap();
    assert_eq!(end(&mut admin, true, &id).0, 0x4121);
    // Anonymous: strongerAuthRequired, as slapd.
    let mut anonymous = bound(&server, "", "");
    assert_eq!(start(&mut anonymous).0, 8);
    // Advertised: Start and End in supportedExtension, the control in supportedControl.
    let (entries, _) = anonymous
        .search("", Scope::Base, "(objectClass=*)", vec!["supportedExtension", "supportedControl"])
        .unwrap()
        .success()
        .unwrap();
    let root = SearchEntry::construct(entries.into_iter().next().unwrap());
    for oid in [START, END] {
        assert!(root.attrs["supportedExtension"].iter().any(|v| v == oid), "{oid}: {root:?}");
    }
    assert!(root.attrs["supportedControl"].iter().any(|v| v == SPEC), "{root:?}");
}

#[test]
fn transaction_operations_max_bounds_a_transaction() {
    let config = TEST_CONFIG.replacen("[log]", "[limits]\ntransaction_operations_max = 2\n[log]", 1);
    let server = Server::start_with_config(&config);
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let (_, id) = start(&mut admin);
    for (n, value) in ["one", "two", "three"].into_iter().enumerate() {
        let mods = vec![ldap3::Mod::Replace("description", std::collections::HashSet::from([value]))];
        let result = admin.with_controls(control(&id, true)).modify(ALICE, mods).unwrap();
        let expected = if n < 2 { 0 } else { 11 };
        assert_eq!(result.rc, expected, "update {n}: {result:?}");
    }
    assert_eq!(end(&mut admin, true, &id).0, 0);
    let mut reader = bound(&server, ADMIN_DN, ADMIN_PW);
    let (entries, _) =
        reader.search(ALICE, Scope::Base, "(objectClass=*)", vec!["description"]).unwrap().success().unwrap();
    let entry = SearchEntry::construct(entries.into_iter().next().unwrap());
    assert_eq!(entry.attrs["description"], vec!["two"], "the refused third update is not part of it");
}

/// The server started by hand, to give it the fault-injection switch that stops a commit
/// after its n-th update; its log goes to `log`.
fn spawn(server: &Server, pause_after: Option<(&str, usize)>, log: &std::path::Path) -> Child {
    let stderr = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("server log");
    let mut command = Command::new(crate::harness::binary());
    command
        .arg("serve")
        .arg("--config")
        .arg(server.config_path())
        .arg("--data-dir")
        .arg(&server.data_dir)
        .arg("--listen")
        .arg(server.addr.to_string())
        .stdout(Stdio::piped())
        .stderr(stderr);
    if let Some((switch, n)) = pause_after {
        command.env(switch, n.to_string());
    }
    let mut child = command.spawn().expect("start ferrodir");
    let rx = listening_address(child.stdout.take().expect("stdout"));
    rx.recv_timeout(Duration::from_secs(30)).expect("listening");
    child
}

#[test]
fn kill_9_during_a_commit_leaves_all_or_none() {
    let mut server = Server::start_with_config(TEST_CONFIG);
    let before = tree(&server);
    server.stop();
    let dir = tempfile::tempdir().expect("tempdir");
    // Killed after each of the script's five updates (after the fifth, End has not been
    // answered and the steps are still logged): every restart rolls the transaction back.
    for pause_after in 1..=5 {
        let log = dir.path().join(format!("paused-{pause_after}.log"));
        let mut paused = spawn(&server, Some(("FERRODIR_TEST_TXN_PAUSE_AFTER", pause_after)), &log);
        let url = server.url();
        let args = ["-x", "-H", url.as_str(), "-D", ADMIN_DN, "-w", ADMIN_PW, "-E", "txn=commit"];
        let mut client = Command::new("ldapmodify")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ldapmodify");
        {
            use std::io::Write;
            let mut stdin = client.stdin.take().expect("stdin");
            stdin.write_all(SCRIPT.as_bytes()).expect("send the script");
        }
        // The server says when its commit stopped: n updates applied, the rest not.
        let deadline = Instant::now() + Duration::from_secs(30);
        let stopped = wait_until(deadline, || {
            std::fs::read_to_string(&log).unwrap_or_default().contains("the transaction's commit stops here")
        });
        assert!(stopped, "the commit did not stop after update {pause_after}");
        if pause_after == 3 {
            // Half done, and visible: the rename happened.
            let (rc, _, _) = tool(
                "ldapsearch",
                &[
                    "-x",
                    "-H",
                    &url,
                    "-D",
                    ADMIN_DN,
                    "-w",
                    ADMIN_PW,
                    "-b",
                    "cn=Robert,ou=groups,dc=example,dc=com",
                    "-s",
                    "base",
                    "1.1",
                ],
                None,
            );
            assert_eq!(rc, 0, "the third update (the rename) is applied before the kill");
        }
        let _ = paused.kill();
        let _ = paused.wait();
        let _ = client.kill();
        let _ = client.wait();
        // Restarted without the switch: the interrupted transaction is rolled back.
        let log = dir.path().join(format!("restarted-{pause_after}.log"));
        let mut restarted = spawn(&server, None, &log);
        assert_eq!(tree(&server), before, "after update {pause_after}: nothing of the transaction stays");
        assert!(
            std::fs::read_to_string(&log).unwrap_or_default().contains("rolling back a transaction"),
            "the restart rolled it back"
        );
        let _ = Command::new("kill").arg("-TERM").arg(restarted.id().to_string()).status();
        let _ = restarted.wait();
    }
    let (passed, report) = server.verify();
    assert!(passed, "{report}");
}

#[test]
fn kill_9_during_a_failed_commits_rollback_leaves_none() {
    let mut server = Server::start_with_config(TEST_CONFIG);
    let before = tree(&server);
    server.stop();
    let dir = tempfile::tempdir().expect("tempdir");
    // The script's five updates apply, the sixth fails (ou=people exists), and the rollback
    // stops after n of its seven actions (each rename undone is two: back, then revert).
    let failing = format!("{SCRIPT}{FAILING}");
    for pause_after in 0..=6 {
        let log = dir.path().join(format!("paused-{pause_after}.log"));
        let switch = ("FERRODIR_TEST_TXN_ROLLBACK_PAUSE_AFTER", pause_after);
        let mut paused = spawn(&server, Some(switch), &log);
        let url = server.url();
        let args = ["-x", "-H", url.as_str(), "-D", ADMIN_DN, "-w", ADMIN_PW, "-E", "txn=commit"];
        let mut client = Command::new("ldapmodify")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ldapmodify");
        {
            use std::io::Write;
            let mut stdin = client.stdin.take().expect("stdin");
            stdin.write_all(failing.as_bytes()).expect("send the script");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let stopped = wait_until(deadline, || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("the transaction's rollback stops here")
        });
        assert!(stopped, "the rollback did not stop after action {pause_after}");
        let _ = paused.kill();
        let _ = paused.wait();
        let _ = client.kill();
        let _ = client.wait();
        let log = dir.path().join(format!("restarted-{pause_after}.log"));
        let mut restarted = spawn(&server, None, &log);
        assert_eq!(tree(&server), before, "rollback cut after action {pause_after}: nothing stays");
        let _ = Command::new("kill").arg("-TERM").arg(restarted.id().to_string()).status();
        let _ = restarted.wait();
    }
    let (passed, report) = server.verify();
    assert!(passed, "{report}");
}
