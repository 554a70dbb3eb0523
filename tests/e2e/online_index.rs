//! Index changes without a restart: a reload that adds an index builds it while the server
//! serves and writes go on, searches use it only once it is complete (an anonymous class
//! that refuses unindexed searches shows which way a search went), the metrics and the log
//! follow the build; a reload that removes an index stops its use at once and clears its
//! keys; a restart finds a built index ready, and a start killed with -9 right away (its
//! build possibly cut short) builds it again at the next.
//! `ferrodir verify` checks the keys on disk after each step, exactly.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldap3::{Mod, Scope};

use crate::harness::{bound, connect_url, free_port, wait_until, Server, ADMIN_DN, ADMIN_PW};

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const ENTRIES: usize = 1200;
const MOVERS: usize = 20;

fn config(index: &[&str], metrics: SocketAddr) -> String {
    let index: Vec<String> = index.iter().map(|i| format!("\"{i}\"")).collect();
    format!(
        "shards = 2\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\n\
         example_data = true\nmetrics_listen = \"{metrics}\"\nindex = [{}]\n\
         [log]\nlevel = \"info\"\n[limits.anonymous]\nunindexed_search = \"refuse\"\n",
        index.join(", ")
    )
}

const BEFORE: &[&str] = &["objectClass eq", "uid eq"];
const AFTER: &[&str] = &["objectClass eq", "uid eq", "employeeNumber eq", "sn sub"];

fn metrics_text(addr: SocketAddr) -> String {
    let Ok(mut stream) = TcpStream::connect(addr) else { return String::new() };
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = write!(stream, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

/// An anonymous subtree search: (result code, DNs).
fn anonymous(server: &Server, filter: &str) -> (u32, HashSet<String>) {
    let mut client = connect_url(&server.url());
    let ldap3::SearchResult(entries, result) =
        client.search(PEOPLE, Scope::Subtree, filter, vec!["1.1"]).expect("search");
    let dns = entries.into_iter().map(|e| ldap3::SearchEntry::construct(e).dn.to_lowercase()).collect();
    (result.rc, dns)
}

fn person_dn(n: usize) -> String {
    format!("uid=p{n},{PEOPLE}")
}

fn populate(server: &Server) {
    let mut admin = bound(server, ADMIN_DN, ADMIN_PW);
    for n in 0..ENTRIES {
        let (uid, number, sn) = (format!("p{n}"), format!("{n}"), format!("surname{n}"));
        let attrs = vec![
            ("objectClass", HashSet::from(["inetOrgPerson"])),
            ("uid", HashSet::from([uid.as_str()])),
            ("cn", HashSet::from([uid.as_str()])),
            ("sn", HashSet::from([sn.as_str()])),
            ("employeeNumber", HashSet::from([number.as_str()])),
        ];
        assert_eq!(admin.add(&person_dn(n), attrs).expect("add").rc, 0);
    }
}

/// Writes while the build runs: the first MOVERS entries get new employeeNumbers over and
/// over, new entries are added. Returns each mover's last number and the entries added.
fn write_during(
    server: &Server,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(Vec<String>, Vec<String>)> {
    let url = server.url();
    std::thread::spawn(move || {
        let mut admin = connect_url(&url);
        admin.simple_bind(ADMIN_DN, ADMIN_PW).expect("bind").success().expect("bound");
        let mut last: Vec<String> = (0..MOVERS).map(|n| n.to_string()).collect();
        let mut added = Vec::new();
        let mut round = 0;
        while !stop.load(Ordering::Relaxed) {
            round += 1;
            for (n, slot) in last.iter_mut().enumerate() {
                let value = format!("moved-{n}-{round}");
                let change = Mod::Replace("employeeNumber", HashSet::from([value.as_str()]));
                assert_eq!(admin.modify(&person_dn(n), vec![change]).expect("modify").rc, 0);
                *slot = value;
            }
            let uid = format!("late{round}");
            let number = format!("late-number-{round}");
            let attrs = vec![
                ("objectClass", HashSet::from(["inetOrgPerson"])),
                ("uid", HashSet::from([uid.as_str()])),
                ("cn", HashSet::from([uid.as_str()])),
                ("sn", HashSet::from(["latecomer"])),
                ("employeeNumber", HashSet::from([number.as_str()])),
            ];
            assert_eq!(admin.add(&format!("uid={uid},{PEOPLE}"), attrs).expect("add").rc, 0);
            added.push(uid);
        }
        (last, added)
    })
}

fn verify_clean(server: &Server, when: &str) {
    let (ok, text) = server.verify();
    assert!(ok && text.contains("0 problems"), "{when}: verify:\n{text}");
}

#[test]
fn an_index_added_by_a_reload_is_built_online_and_used_once_complete() {
    let metrics = free_port();
    let mut server = Server::start_logged(&config(BEFORE, metrics));
    populate(&server);
    assert_eq!(anonymous(&server, "(employeeNumber=7)").0, 53, "unindexed: refused");
    assert!(metrics_text(metrics).contains("ferrodir_index_ready{attribute=\"uid\",kind=\"eq\"} 1"));

    let stop = Arc::new(AtomicBool::new(false));
    let writer = write_during(&server, stop.clone());
    std::thread::sleep(Duration::from_millis(200));
    std::fs::write(server.config_path(), config(AFTER, metrics)).expect("config");
    let (ok, text) = server.reload();
    assert!(ok && text.contains("online"), "{text}");
    let deadline = Instant::now() + Duration::from_secs(120);
    assert!(
        wait_until(deadline, || anonymous(&server, "(employeeNumber=7)").0 == 0),
        "the index never became usable:\n{}",
        server.log()
    );
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let (last, added) = writer.join().expect("writer");
    assert!(!added.is_empty(), "no write happened during the build");

    // Every value is found through the index, as the data holds it now.
    assert_eq!(anonymous(&server, "(employeeNumber=7)"), (0, HashSet::new()), "moved away");
    assert_eq!(anonymous(&server, "(employeeNumber=777)").1, HashSet::from([person_dn(777)]));
    for (n, value) in last.iter().enumerate() {
        let found = anonymous(&server, &format!("(employeeNumber={value})"));
        assert_eq!(found, (0, HashSet::from([person_dn(n)])), "mover {n}");
    }
    let latest = added.last().expect("added");
    let round = latest.trim_start_matches("late");
    let found = anonymous(&server, &format!("(employeeNumber=late-number-{round})"));
    assert_eq!(found.1, HashSet::from([format!("uid={latest},{PEOPLE}")]));
    let (rc, latecomers) = anonymous(&server, "(sn=*atecome*)");
    assert_eq!((rc, latecomers.len()), (0, added.len()), "the substring index holds every late add");
    let log = server.log();
    assert!(log.contains("building indexes online") && log.contains("indexes built"), "{log}");
    let text = metrics_text(metrics);
    for series in [
        "ferrodir_index_ready{attribute=\"employeenumber\",kind=\"eq\"} 1",
        "ferrodir_index_ready{attribute=\"sn\",kind=\"sub\"} 1",
        "ferrodir_index_build_running 0",
        "ferrodir_index_builds_completed_total 1",
    ] {
        assert!(text.contains(series), "{series} in:\n{text}");
    }
    assert!(!text.contains("ferrodir_index_build_entries_total 0\n"), "{text}");

    // A restart finds it ready: no build, used at once.
    server.stop();
    verify_clean(&server, "after the online build");
    server.restart();
    assert_eq!(anonymous(&server, "(employeeNumber=777)").0, 0, "ready after a restart");

    // Removed: unusable at once, its keys cleared in the background.
    std::fs::write(server.config_path(), config(BEFORE, metrics)).expect("config");
    let (ok, text) = server.reload();
    assert!(ok, "{text}");
    assert_eq!(anonymous(&server, "(employeeNumber=777)").0, 53, "removed: unindexed again");
    let deadline = Instant::now() + Duration::from_secs(60);
    assert!(
        wait_until(deadline, || server.log().contains("removed indexes' keys cleared")),
        "{}",
        server.log()
    );
    server.stop();
    verify_clean(&server, "after the removal");

    // Configured again while stopped: the start builds it; kill -9 half-way, and the next
    // start builds it again from nothing.
    std::fs::write(server.config_path(), config(AFTER, metrics)).expect("config");
    server.restart();
    server.kill();
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(120);
    assert!(
        wait_until(deadline, || anonymous(&server, "(employeeNumber=777)").0 == 0),
        "not built after the restart:\n{}",
        server.log()
    );
    server.stop();
    verify_clean(&server, "after a build cut short by kill -9");
}
