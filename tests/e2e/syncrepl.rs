//! The RFC 4533 provider over the wire, with ldap3's content-sync controls: refreshOnly
//! without a cookie (every entry as add, parents first, a Sync Done cookie in slapd's
//! form), with that cookie after a change (the changed entry as add, the rest present),
//! a cookie newer than the provider (53), a non-root requester (50), contextCSN on the
//! suffix, the server id in CSNs, and refreshAndPersist seeing an add, a modify and a
//! delete. One server for every case. A second server with a small delete log: a refresh
//! with a cookie as a delete phase (syncIdSet of what was deleted or moved out, the
//! changed entries as add, nothing else), a present phase when a filter is set or the log
//! was trimmed past the cookie, and persist searches that send only the attributes asked
//! for and every entry of a subtree moved out of or into their scope.

use std::collections::HashSet;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use ldap3::controls::{
    parse_syncinfo, ControlParser, EntryState, MakeCritical, RefreshMode, SyncDone, SyncInfo, SyncRequest,
    SyncState,
};
use ldap3::{Mod, Scope, SearchEntry};

use crate::harness::{bound, Server, ADMIN_DN, ADMIN_PW, BASE, TEST_CONFIG};

const SYNC_STATE_OID: &str = "1.3.6.1.4.1.4203.1.9.1.2";
const SYNC_DONE_OID: &str = "1.3.6.1.4.1.4203.1.9.1.3";

struct Refresh {
    /// (DN, state, uuid) in the order sent.
    entries: Vec<(String, EntryState, Vec<u8>)>,
    /// The uuids of syncIdSet messages with refreshDeletes TRUE.
    deleted: Vec<Vec<u8>>,
    rc: u32,
    text: String,
    cookie: Option<String>,
    refresh_deletes: bool,
}

fn state_of(entry: &ldap3::ResultEntry) -> (EntryState, Vec<u8>) {
    let control =
        entry.1.iter().find(|c| c.1.ctype == SYNC_STATE_OID).expect("a Sync State control on every entry");
    let state = SyncState::parse(control.1.val.as_deref().expect("a Sync State value"));
    (state.state, state.entry_uuid)
}

fn refresh(client: &mut ldap3::LdapConn, cookie: Option<&str>) -> Refresh {
    refresh_of(client, BASE, "(objectClass=*)", cookie)
}

fn refresh_of(client: &mut ldap3::LdapConn, base: &str, filter: &str, cookie: Option<&str>) -> Refresh {
    let control = SyncRequest {
        mode: RefreshMode::RefreshOnly,
        cookie: cookie.map(|c| c.as_bytes().to_vec()),
        reload_hint: false,
    };
    let mut stream = client
        .with_controls(control.critical())
        .streaming_search(base, Scope::Subtree, filter, vec!["*", "+"])
        .expect("sync search");
    let mut entries = Vec::new();
    let mut deleted = Vec::new();
    while let Some(entry) = stream.next().expect("next") {
        if entry.is_intermediate() {
            match parse_syncinfo(entry) {
                SyncInfo::SyncIdSet { refresh_deletes: true, sync_uuids, .. } => deleted.extend(sync_uuids),
                other => panic!("unexpected Sync Info in a refreshOnly search: {other:?}"),
            }
            continue;
        }
        let (state, uuid) = state_of(&entry);
        entries.push((SearchEntry::construct(entry).dn, state, uuid));
    }
    let result = stream.result();
    let done = result
        .ctrls
        .iter()
        .find(|c| c.1.ctype == SYNC_DONE_OID)
        .map(|c| SyncDone::parse(c.1.val.as_deref().unwrap_or_default()));
    Refresh {
        entries,
        deleted,
        rc: result.rc,
        text: result.text.clone(),
        cookie: done
            .as_ref()
            .and_then(|d| d.cookie.clone())
            .map(|c| String::from_utf8(c).expect("UTF-8 cookie")),
        refresh_deletes: done.is_some_and(|d| d.refresh_deletes),
    }
}

fn is_present(state: &EntryState) -> bool {
    matches!(state, EntryState::Present)
}

fn is_add(state: &EntryState) -> bool {
    matches!(state, EntryState::Add)
}

#[test]
fn provider_refresh_persist_and_cookies() {
    // A short shutdown grace: the restart below shouldn't wait on the followers'
    // connections, which stay open (as any client's would) until the server closes them.
    let config = format!(
        "{}\n[limits]\nshutdown_grace_s = 1\n",
        TEST_CONFIG.replacen("[log]", "server_id = 7\n[log]", 1)
    );
    let server = Server::start_with_config(&config);
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);

    // The control is advertised.
    let (rs, _) = admin
        .search("", Scope::Base, "(objectClass=*)", vec!["supportedControl"])
        .unwrap()
        .success()
        .unwrap();
    let root = SearchEntry::construct(rs.into_iter().next().unwrap());
    assert!(root.attrs["supportedControl"].iter().any(|c| c == "1.3.6.1.4.1.4203.1.9.1.1"));

    // A write first, so that contextCSN exists and CSNs carry sid 7.
    let res = admin
        .modify(
            "uid=alice,ou=people,dc=example,dc=com",
            vec![Mod::Replace("description", HashSet::from(["one"]))],
        )
        .unwrap();
    assert_eq!(res.rc, 0);

    // refreshOnly, no cookie: everything as add, parents before children.
    let full = refresh(&mut admin.0, None);
    assert_eq!(full.rc, 0, "{}", full.text);
    assert!(full.entries.len() >= 5, "{:?}", full.entries.len());
    assert!(full.entries.iter().all(|(_, s, u)| is_add(s) && u.len() == 16));
    let mut seen = HashSet::new();
    for (dn, _, _) in &full.entries {
        let lower = dn.to_ascii_lowercase();
        if let Some((_, parent)) = lower.split_once(',') {
            if lower != BASE {
                assert!(seen.contains(parent), "{dn} came before its parent");
            }
        }
        seen.insert(lower);
    }
    let uuids: HashSet<_> = full.entries.iter().map(|e| e.2.clone()).collect();
    assert_eq!(uuids.len(), full.entries.len(), "uuids are distinct");
    assert!(!full.refresh_deletes);
    let cookie = full.cookie.clone().expect("a cookie in Sync Done");
    assert!(cookie.starts_with("sid=007,csn=") || cookie.contains(",sid=007,"), "{cookie}");
    assert!(cookie.contains("#007#"), "{cookie}");

    // contextCSN on the suffix: the cookie's CSN when nothing changed since.
    let (rs, _) = admin
        .search(BASE, Scope::Base, "(objectClass=*)", vec!["contextCSN", "entryCSN"])
        .unwrap()
        .success()
        .unwrap();
    let suffix = SearchEntry::construct(rs.into_iter().next().unwrap());
    let context =
        suffix.attrs.get("contextCSN").and_then(|v| v.first()).cloned().expect("contextCSN on the suffix");
    assert!(cookie.ends_with(&format!("csn={context}")), "{cookie} vs {context}");
    // Left out of sync content: the computed attributes.
    let (rs, _) = admin
        .search("uid=alice,ou=people,dc=example,dc=com", Scope::Base, "(objectClass=*)", vec!["entryCSN"])
        .unwrap()
        .success()
        .unwrap();
    let alice = SearchEntry::construct(rs.into_iter().next().unwrap());
    assert!(alice.attrs["entryCSN"][0].contains("#007#"), "{:?}", alice.attrs["entryCSN"]);

    // With the cookie after one change: that entry as add, nothing else (a delete phase
    // from the delete log, nothing deleted).
    let res = admin
        .modify(
            "uid=bob,ou=people,dc=example,dc=com",
            vec![Mod::Replace("description", HashSet::from(["two"]))],
        )
        .unwrap();
    assert_eq!(res.rc, 0);
    let delta = refresh(&mut admin.0, Some(&format!("rid=001,{cookie}")));
    assert_eq!(delta.rc, 0, "{}", delta.text);
    let adds: Vec<_> =
        delta.entries.iter().filter(|e| is_add(&e.1)).map(|e| e.0.to_ascii_lowercase()).collect();
    assert_eq!(adds, ["uid=bob,ou=people,dc=example,dc=com"]);
    assert_eq!(delta.entries.len(), 1, "{:?}", delta.entries);
    assert!(delta.refresh_deletes && delta.deleted.is_empty());
    // With a filter, the same cookie gets a present phase: the rest present.
    let filtered =
        refresh_of(&mut admin.0, BASE, "(|(objectClass=*)(cn=x))", Some(&format!("rid=001,{cookie}")));
    assert_eq!(filtered.rc, 0, "{}", filtered.text);
    assert!(!filtered.refresh_deletes);
    assert_eq!(filtered.entries.iter().filter(|e| is_present(&e.1)).count(), full.entries.len() - 1);
    let next = delta.cookie.expect("a new cookie");
    assert!(next.starts_with("rid=001,"), "{next}");
    assert!(next > format!("rid=001,{cookie}"), "{next} after {cookie}");

    // A cookie from the future.
    let future = refresh(&mut admin.0, Some("rid=001,csn=29991231000000.000000Z#000000#007#000000"));
    assert_eq!(future.rc, 53);
    assert_eq!(future.text, "consumer state is newer than provider!");
    // Another sid's CSN is no state of ours: a full refresh, the foreign CSN kept verbatim.
    let foreign = refresh(&mut admin.0, Some("rid=002,csn=29991231000000.000000Z#000000#001#000000"));
    assert_eq!(foreign.rc, 0);
    assert!(foreign.entries.iter().all(|e| is_add(&e.1)));
    assert!(foreign.cookie.unwrap().contains("29991231000000.000000Z#000000#001#000000;"));

    // Only the replication identity.
    let mut alice_conn = bound(&server, "uid=bob,ou=people,dc=example,dc=com", "password");
    assert_eq!(refresh(&mut alice_conn.0, None).rc, 50);

    // refreshAndPersist: the refresh, refreshPresent, then an add, a modify and a delete;
    // a second one on ou=people sees a move out of its scope as a delete.
    let whole = follow(server.url(), BASE);
    let people = follow(server.url(), "ou=people,dc=example,dc=com");
    let wait_for = |rx: &Receiver<(String, String)>, want: &dyn Fn(&(String, String)) -> bool| {
        let mut got = Vec::new();
        loop {
            let next =
                rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("timed out; got {got:?}"));
            let done = want(&next);
            got.push(next);
            if done {
                return got;
            }
        }
    };
    wait_for(&people, &|m| m.0 == "info" && m.1.starts_with("refreshPresent"));
    let rx = whole;
    let wait_for = |want: &dyn Fn(&(String, String)) -> bool| wait_for(&rx, want);
    let refresh_part = wait_for(&|m| m.0 == "info" && m.1.starts_with("refreshPresent"));
    assert_eq!(refresh_part.len() - 1, full.entries.len(), "{refresh_part:?}");
    let carol = "uid=carol-sync,ou=people,dc=example,dc=com";
    let res = admin
        .add(
            carol,
            vec![
                ("objectClass", HashSet::from(["inetOrgPerson"])),
                ("cn", HashSet::from(["c"])),
                ("sn", HashSet::from(["s"])),
                ("uid", HashSet::from(["carol-sync"])),
            ],
        )
        .unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    let got = wait_for(&|m| m.1 == carol);
    assert_eq!(got.last().unwrap().0, "Add", "{got:?}");
    let res = admin.modify(carol, vec![Mod::Replace("sn", HashSet::from(["t"]))]).unwrap();
    assert_eq!(res.rc, 0);
    let got = wait_for(&|m| m.1 == carol);
    assert_eq!(got.last().unwrap().0, "Modify", "{got:?}");
    let res = admin.delete(carol).unwrap();
    assert_eq!(res.rc, 0);
    let got = wait_for(&|m| m.1 == carol);
    assert_eq!(got.last().unwrap().0, "Delete", "{got:?}");
    // The cookie moves with the watermark.
    let got = wait_for(&|m| m.0 == "info" && m.1.starts_with("newcookie"));
    assert!(got.last().unwrap().1.contains("#007#"), "{got:?}");

    // A Modify DN out of ou=people: a modify at the new DN for the whole suffix, a delete
    // of the old DN for ou=people; and back in: an add.
    let bob = "uid=bob,ou=people,dc=example,dc=com";
    let moved = "uid=bob,ou=groups,dc=example,dc=com";
    let res = admin.modifydn(bob, "uid=bob", true, Some("ou=groups,dc=example,dc=com")).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    let got = wait_for(&|m| m.1 == moved);
    assert_eq!(got.last().unwrap().0, "Modify", "{got:?}");
    let got = wait_for_people(&people, bob);
    assert_eq!(got.0, "Delete");
    let res = admin.modifydn(moved, "uid=bob", true, Some("ou=people,dc=example,dc=com")).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    let got = wait_for_people(&people, bob);
    assert_eq!(got.0, "Add");
    drop((rx, people));

    // contextCSN survives a restart, and later CSNs are above it.
    let before = context_csn(&mut admin);
    drop(admin);
    let mut server = server;
    server.stop();
    server.restart();
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    assert_eq!(context_csn(&mut admin), before);
    let res = admin
        .modify(
            "uid=alice,ou=people,dc=example,dc=com",
            vec![Mod::Replace("description", HashSet::from(["three"]))],
        )
        .unwrap();
    assert_eq!(res.rc, 0);
    assert!(context_csn(&mut admin) > before);
}

fn context_csn(admin: &mut ldap3::LdapConn) -> String {
    let (rs, _) =
        admin.search(BASE, Scope::Base, "(objectClass=*)", vec!["contextCSN"]).unwrap().success().unwrap();
    let suffix = SearchEntry::construct(rs.into_iter().next().unwrap());
    suffix.attrs.get("contextCSN").and_then(|v| v.first()).cloned().expect("contextCSN on the suffix")
}

/// The next message about `dn` on a follower (skipping Sync Info messages).
fn wait_for_people(rx: &Receiver<(String, String)>, dn: &str) -> (String, String) {
    loop {
        let next = rx.recv_timeout(Duration::from_secs(20)).expect("a change on the ou=people follower");
        if next.1 == dn {
            return next;
        }
    }
}

/// A refreshAndPersist search under `base` on its own connection and thread: each entry
/// as (state, lowercased DN), each Sync Info as ("info", what). It ends with the server.
fn follow(url: String, base: &'static str) -> Receiver<(String, String)> {
    let (tx, rx) = std::sync::mpsc::channel::<(String, String)>();
    std::thread::spawn(move || {
        let mut conn = ldap3::LdapConn::new(&url).expect("connect");
        conn.simple_bind(ADMIN_DN, ADMIN_PW).unwrap();
        let control = SyncRequest { mode: RefreshMode::RefreshAndPersist, cookie: None, reload_hint: false };
        let mut stream = conn
            .with_controls(control.critical())
            .streaming_search(base, Scope::Subtree, "(objectClass=*)", vec!["*", "+"])
            .expect("persist search");
        let mut refreshed = 0;
        while let Ok(Some(entry)) = stream.next() {
            if entry.is_intermediate() {
                let what = match parse_syncinfo(entry) {
                    SyncInfo::RefreshPresent { refresh_done: true, .. } => {
                        format!("refreshPresent {refreshed}")
                    }
                    SyncInfo::NewCookie(c) => format!("newcookie {}", String::from_utf8_lossy(&c)),
                    other => format!("{other:?}"),
                };
                if tx.send(("info".into(), what)).is_err() {
                    break;
                }
                continue;
            }
            let (state, _) = state_of(&entry);
            let dn = SearchEntry::construct(entry).dn.to_ascii_lowercase();
            if tx.send((format!("{state:?}"), dn)).is_err() {
                break;
            }
            refreshed += 1;
        }
    });
    rx
}

/// A refreshAndPersist search under `base` asking for `attrs`: each change after the
/// refresh as (state, lowercased DN, attribute names sent), on its own thread.
fn follow_changes(
    url: String,
    base: &'static str,
    attrs: Vec<&'static str>,
) -> Receiver<(String, String, Vec<String>)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut conn = ldap3::LdapConn::new(&url).expect("connect");
        conn.simple_bind(ADMIN_DN, ADMIN_PW).unwrap();
        let control = SyncRequest { mode: RefreshMode::RefreshAndPersist, cookie: None, reload_hint: false };
        let mut stream = conn
            .with_controls(control.critical())
            .streaming_search(base, Scope::Subtree, "(objectClass=*)", attrs)
            .expect("persist search");
        let mut persisting = false;
        while let Ok(Some(entry)) = stream.next() {
            if entry.is_intermediate() {
                if let SyncInfo::RefreshPresent { refresh_done: true, .. } = parse_syncinfo(entry) {
                    persisting = true;
                    let _ = ready_tx.send(());
                }
                continue;
            }
            if !persisting {
                continue;
            }
            let (state, _) = state_of(&entry);
            let entry = SearchEntry::construct(entry);
            let mut names: Vec<String> = entry.attrs.keys().cloned().collect();
            names.sort();
            if tx.send((format!("{state:?}"), entry.dn.to_ascii_lowercase(), names)).is_err() {
                break;
            }
        }
        // The search ended (it shouldn't before the test drops it): say how.
        let result = stream.result();
        let _ = tx.send(("ended".into(), format!("{} {}", result.rc, result.text), Vec::new()));
    });
    ready_rx.recv_timeout(Duration::from_secs(20)).expect("the persist search's refresh ended");
    rx
}

fn next_change(rx: &Receiver<(String, String, Vec<String>)>) -> (String, String, Vec<String>) {
    rx.recv_timeout(Duration::from_secs(20)).expect("a change on the follower")
}

fn uuid_of(admin: &mut ldap3::LdapConn, dn: &str) -> Vec<u8> {
    let (rs, _) =
        admin.search(dn, Scope::Base, "(objectClass=*)", vec!["entryUUID"]).unwrap().success().unwrap();
    let text = SearchEntry::construct(rs.into_iter().next().unwrap()).attrs["entryUUID"][0].replace('-', "");
    (0..16).map(|i| u8::from_str_radix(&text[i * 2..i * 2 + 2], 16).unwrap()).collect()
}

fn add_person(admin: &mut ldap3::LdapConn, dn: &str, uid: &str) {
    let res = admin
        .add(
            dn,
            vec![
                ("objectClass", HashSet::from(["inetOrgPerson"])),
                ("cn", HashSet::from([uid])),
                ("sn", HashSet::from(["s"])),
                ("uid", HashSet::from([uid])),
                ("mail", HashSet::from(["m@example.com"])),
            ],
        )
        .unwrap();
    assert_eq!(res.rc, 0, "{dn}: {res:?}");
}

#[test]
fn delete_phase_trimmed_log_and_persist_attributes_and_subtrees() {
    // Reads of other shards by message: the delete log is read through the shard actors.
    let config = format!(
        "{}\n[limits]\nsync_delete_log_max = 3\nshutdown_grace_s = 1\n",
        crate::harness::message_reads_config()
    );
    let server = Server::start_with_config(&config);
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let people = "ou=people,dc=example,dc=com";
    add_person(&mut admin, "uid=gone,ou=people,dc=example,dc=com", "gone");
    add_person(&mut admin, "uid=away,ou=people,dc=example,dc=com", "away");
    add_person(&mut admin, "uid=within,ou=people,dc=example,dc=com", "within");
    let full = refresh_of(&mut admin.0, people, "(objectClass=*)", None);
    assert_eq!(full.rc, 0, "{}", full.text);
    let cookie = full.cookie.expect("a cookie");
    let gone = uuid_of(&mut admin, "uid=gone,ou=people,dc=example,dc=com");
    let away = uuid_of(&mut admin, "uid=away,ou=people,dc=example,dc=com");
    let within = uuid_of(&mut admin, "uid=within,ou=people,dc=example,dc=com");

    // A delete, a move out of ou=people and a rename within it.
    assert_eq!(admin.delete("uid=gone,ou=people,dc=example,dc=com").unwrap().rc, 0);
    let res = admin.modifydn(
        "uid=away,ou=people,dc=example,dc=com",
        "uid=away",
        true,
        Some("ou=groups,dc=example,dc=com"),
    );
    assert_eq!(res.unwrap().rc, 0);
    let res = admin.modifydn("uid=within,ou=people,dc=example,dc=com", "uid=inside", true, None);
    assert_eq!(res.unwrap().rc, 0);
    let delta = refresh_of(&mut admin.0, people, "(objectClass=*)", Some(&cookie));
    assert_eq!(delta.rc, 0, "{}", delta.text);
    assert!(delta.refresh_deletes, "a delete phase");
    let deleted: HashSet<_> = delta.deleted.iter().cloned().collect();
    assert_eq!(deleted, HashSet::from([gone.clone(), away.clone()]), "{:?}", delta.deleted);
    let sent: Vec<_> =
        delta.entries.iter().map(|e| (e.0.to_ascii_lowercase(), is_add(&e.1), e.2.clone())).collect();
    assert_eq!(sent, [("uid=inside,ou=people,dc=example,dc=com".to_string(), true, within)]);

    // More deletes than the log keeps (3 per shard, 4 shards): trimmed past the cookie.
    for i in 0..16 {
        add_person(&mut admin, &format!("uid=t{i},ou=people,dc=example,dc=com"), &format!("t{i}"));
    }
    for i in 0..16 {
        assert_eq!(admin.delete(&format!("uid=t{i},ou=people,dc=example,dc=com")).unwrap().rc, 0);
    }
    let stale = refresh_of(&mut admin.0, people, "(objectClass=*)", Some(&cookie));
    assert_eq!(stale.rc, 0, "{}", stale.text);
    assert!(!stale.refresh_deletes, "a present phase");
    assert!(stale.deleted.is_empty());
    assert!(stale.entries.iter().any(|e| is_present(&e.1)), "{:?}", stale.entries);
    // The log's minimum survives a restart (verify checks the log's records too).
    drop(admin);
    let mut server = server;
    server.stop();
    let verify = std::process::Command::new(crate::harness::binary())
        .args(["verify", "--config"])
        .arg(server.config_path())
        .arg("--data-dir")
        .arg(&server.data_dir)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success(), "{report}");
    // Kept since the first sync search, trimmed to 3 per shard.
    let records: usize = report
        .split(" delete-log records")
        .next()
        .and_then(|head| head.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no delete-log count: {report}"));
    assert!((1..=12).contains(&records), "{records} delete-log records: {report}");
    server.restart();
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let again = refresh_of(&mut admin.0, people, "(objectClass=*)", Some(&cookie));
    assert!(!again.refresh_deletes, "the minimum was stored");

    // Persist: only the attributes asked for; a subtree moved out of and back into scope.
    let rx = follow_changes(server.url(), people, vec!["sn", "entryCSN"]);
    add_person(&mut admin, "uid=fresh,ou=people,dc=example,dc=com", "fresh");
    let (state, dn, names) = next_change(&rx);
    assert_eq!((state.as_str(), dn.as_str()), ("Add", "uid=fresh,ou=people,dc=example,dc=com"));
    assert_eq!(names, ["entryCSN", "sn"]);
    let res = admin
        .add(
            "ou=team,ou=people,dc=example,dc=com",
            vec![("objectClass", HashSet::from(["organizationalUnit"])), ("ou", HashSet::from(["team"]))],
        )
        .unwrap();
    assert_eq!(res.rc, 0);
    add_person(&mut admin, "uid=m1,ou=team,ou=people,dc=example,dc=com", "m1");
    assert_eq!(next_change(&rx).1, "ou=team,ou=people,dc=example,dc=com");
    assert_eq!(next_change(&rx).1, "uid=m1,ou=team,ou=people,dc=example,dc=com");
    let res = admin.modifydn(
        "ou=team,ou=people,dc=example,dc=com",
        "ou=team",
        true,
        Some("ou=groups,dc=example,dc=com"),
    );
    assert_eq!(res.unwrap().rc, 0);
    let child_out = next_change(&rx);
    let parent_out = next_change(&rx);
    assert_eq!(
        [(child_out.0.as_str(), child_out.1.as_str()), (parent_out.0.as_str(), parent_out.1.as_str())],
        [
            ("Delete", "uid=m1,ou=team,ou=people,dc=example,dc=com"),
            ("Delete", "ou=team,ou=people,dc=example,dc=com")
        ],
        "children leave first"
    );
    let res = admin.modifydn("ou=team,ou=groups,dc=example,dc=com", "ou=team", true, Some(people));
    assert_eq!(res.unwrap().rc, 0);
    let parent_in = next_change(&rx);
    let child_in = next_change(&rx);
    assert_eq!(
        [(parent_in.0.as_str(), parent_in.1.as_str()), (child_in.0.as_str(), child_in.1.as_str())],
        [
            ("Add", "ou=team,ou=people,dc=example,dc=com"),
            ("Add", "uid=m1,ou=team,ou=people,dc=example,dc=com")
        ],
        "parents enter first"
    );
    assert_eq!(child_in.2, ["entryCSN", "sn"]);
}

/// The delete log is kept from a server's first sync search on: a delete before it leaves
/// no record (the server's files carry no log nobody asked for), and one after a restart
/// that came before any write is still logged, so a consumer's cookie from before the
/// restart gets a delete phase.
#[test]
fn the_delete_log_is_kept_from_the_first_sync_search_across_a_restart() {
    let config = format!("{}\n[limits]\nshutdown_grace_s = 1\n", crate::harness::message_reads_config());
    let mut server = Server::start_with_config(&config);
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let people = "ou=people,dc=example,dc=com";
    for uid in ["early", "late"] {
        add_person(&mut admin, &format!("uid={uid},{people}"), uid);
    }
    assert_eq!(admin.delete(&format!("uid=early,{people}")).unwrap().rc, 0);
    let late = uuid_of(&mut admin, &format!("uid=late,{people}"));
    let full = refresh_of(&mut admin.0, people, "(objectClass=*)", None);
    assert_eq!(full.rc, 0, "{}", full.text);
    let cookie = full.cookie.expect("a cookie");
    drop(admin);
    server.stop();
    let (clean, report) = server.verify();
    assert!(clean && report.contains("(0 delete-log records)"), "the early delete was logged: {report}");
    server.restart();
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    assert_eq!(admin.delete(&format!("uid=late,{people}")).unwrap().rc, 0);
    let delta = refresh_of(&mut admin.0, people, "(objectClass=*)", Some(&cookie));
    assert_eq!(delta.rc, 0, "{}", delta.text);
    assert!(delta.refresh_deletes, "a delete phase after the restart");
    assert_eq!(delta.deleted, [late]);
    assert!(delta.entries.is_empty(), "{:?}", delta.entries);
}

/// Persist searches started while four writers add entries on every shard: each one ends
/// up with every entry, from its refresh or from its feed. A batch fed just before a
/// search subscribed, while another shard was still committing a lower CSN, used to be in
/// neither (above the refresh's watermark, before the feed).
#[test]
fn persist_searches_started_under_writes_miss_no_entry() {
    let server = Server::start();
    let url = server.url();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (url, stop) = (url.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut admin = ldap3::LdapConn::new(&url).expect("connect");
                admin.simple_bind(ADMIN_DN, ADMIN_PW).unwrap();
                let mut added = Vec::new();
                for i in 0..400 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let uid = format!("race{w}x{i}");
                    let dn = format!("uid={uid},ou=people,dc=example,dc=com");
                    let res = admin
                        .add(
                            &dn,
                            vec![
                                ("objectClass", HashSet::from(["inetOrgPerson"])),
                                ("cn", HashSet::from([uid.as_str()])),
                                ("sn", HashSet::from(["s"])),
                                ("uid", HashSet::from([uid.as_str()])),
                            ],
                        )
                        .unwrap();
                    assert_eq!(res.rc, 0, "{dn}: {res:?}");
                    added.push(dn);
                }
                added
            })
        })
        .collect();
    let mut followers = Vec::new();
    for _ in 0..12 {
        followers.push(follow(url.clone(), BASE));
        std::thread::sleep(Duration::from_millis(80));
    }
    // Writes go on a while after the last follower subscribed, so each has a feed to miss.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let added: Vec<String> = writers.into_iter().flat_map(|w| w.join().expect("writer")).collect();
    assert!(added.len() > 50, "the writers added too little to race: {}", added.len());
    for (n, rx) in followers.iter().enumerate() {
        let mut missing: HashSet<String> = added.iter().map(|dn| dn.to_ascii_lowercase()).collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !missing.is_empty() && std::time::Instant::now() < deadline {
            match rx.recv_timeout(Duration::from_secs(5)) {
                // Present carries no content: a consumer that never had the entry still lacks it.
                Ok((state, dn)) if state == "Add" || state == "Modify" => {
                    missing.remove(&dn);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let mut sample: Vec<&String> = missing.iter().collect();
        sample.sort();
        sample.truncate(5);
        assert!(
            missing.is_empty(),
            "follower {n} never got {} of {} entries, e.g. {sample:?}",
            missing.len(),
            added.len()
        );
    }
}
