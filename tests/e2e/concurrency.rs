//! Concurrent clients against the invariants of ARCHITECTURE.md, "Changes that span shards":
//! an entry's parent exists, an entry with children can't be deleted, DNs are unique.
//!
//! - Churn: many clients add and delete children of one parent while others keep deleting
//!   (and re-adding) that parent. Every result code is checked against what the client
//!   knows; afterwards the tree (by search, and by export after stop) has no orphans, no
//!   duplicate DN, exactly the children the clients believe exist, and a parent delete
//!   never succeeded while a child certainly existed.
//! - Racing adds of one DN (under a container and under a leaf that the race promotes):
//!   exactly one wins, the others get entryAlreadyExists, and the winner's entry is stored.
//! - Readers during writes (adds, multi-attribute modifies, deletes) only ever see whole
//!   entries: every attribute of one add or one modify together.
//! - Several first children added at once under the same leaf all succeed, and the leaf
//!   then has hasSubordinates TRUE and all of them one level below.
//!
//! Each thread has its own connection bound as the rootDN and a fixed number of operations.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use ldap3::{LdapConn, Mod, Scope};

use crate::harness::{message_reads_config, Server, BASE};
use crate::persistence::{
    add, admin, admin_at, attrs, delete, ldif_dns, modify, one, read, search, values, Attrs,
};

const CHURN_PARENT: &str = "ou=churn,dc=example,dc=com";
const CHURN_CHILD_WORKERS: usize = 8;
/// Add/delete pairs per child worker; each ends with one more add, so children remain.
const CHURN_PAIRS_PER_WORKER: usize = 150;
const CHURN_PARENT_WORKERS: usize = 2;
const CHURN_PARENT_ATTEMPTS: usize = 200;

const CODE_SUCCESS: u32 = 0;
const CODE_NO_SUCH_OBJECT: u32 = 32;
const CODE_BUSY: u32 = 51;
const CODE_NOT_ALLOWED_ON_NON_LEAF: u32 = 66;
const CODE_ALREADY_EXISTS: u32 = 68;

fn ou(name: &str) -> Attrs {
    attrs(&[("objectClass", &["top", "organizationalUnit"]), ("ou", &[name])])
}

fn person(cn: &str, description: &str) -> Attrs {
    attrs(&[
        ("objectClass", &["top", "person"]),
        ("cn", &[cn]),
        ("sn", &["S"]),
        ("description", &[description]),
    ])
}

/// Between an acknowledged add and the delete request that ended it, a child certainly
/// existed.
struct Life {
    dn: String,
    added: Instant,
    delete_sent: Option<Instant>,
}

#[derive(Default)]
struct ChurnLog {
    /// (operation, result code) → count.
    codes: BTreeMap<(&'static str, u32), usize>,
    lives: Vec<Life>,
    /// Children this client believes exist at the end.
    present: Vec<String>,
    /// Successful parent deletes: when sent, when answered.
    parent_deletes: Vec<(Instant, Instant)>,
    violations: Vec<String>,
}

impl ChurnLog {
    fn count(&mut self, op: &'static str, code: u32) {
        *self.codes.entry((op, code)).or_default() += 1;
    }
}

fn churn_child_worker(url: &str, worker: usize) -> ChurnLog {
    let mut conn = admin_at(url);
    let mut log = ChurnLog::default();
    let cn = format!("t{worker}");
    let dn = format!("cn={cn},{CHURN_PARENT}");
    let mut life: Option<Life> = None;
    for step in 0..=2 * CHURN_PAIRS_PER_WORKER {
        if let Some(current) = life.as_mut() {
            current.delete_sent = Some(Instant::now());
            let code = delete(&mut conn, &dn);
            log.count("child delete", code);
            match code {
                CODE_SUCCESS => log.lives.extend(life.take()),
                CODE_BUSY => current.delete_sent = None,
                other => {
                    log.violations
                        .push(format!("delete {dn} (add acknowledged, not deleted since): result {other}"));
                    log.lives.extend(life.take());
                }
            }
        } else {
            let code = add(&mut conn, &dn, &person(&cn, &format!("step {step}"))).0;
            log.count("child add", code);
            match code {
                CODE_SUCCESS => {
                    life = Some(Life { dn: dn.clone(), added: Instant::now(), delete_sent: None })
                }
                CODE_NO_SUCH_OBJECT | CODE_BUSY => {}
                other => log
                    .violations
                    .push(format!("add {dn} (absent as far as its only writer knows): result {other}")),
            }
        }
        // Some room between a worker's children, so that the parent is empty now and then.
        std::thread::sleep(Duration::from_millis(1 + (worker % 4) as u64));
    }
    if let Some(current) = life {
        log.present.push(current.dn.clone());
        log.lives.push(current);
    }
    log
}

fn churn_parent_worker(url: &str) -> ChurnLog {
    let mut conn = admin_at(url);
    let mut log = ChurnLog::default();
    for _ in 0..CHURN_PARENT_ATTEMPTS {
        let sent = Instant::now();
        let code = delete(&mut conn, CHURN_PARENT);
        log.count("parent delete", code);
        match code {
            CODE_SUCCESS => log.parent_deletes.push((sent, Instant::now())),
            CODE_NOT_ALLOWED_ON_NON_LEAF | CODE_BUSY => {}
            CODE_NO_SUCH_OBJECT => {
                let code = add(&mut conn, CHURN_PARENT, &ou("churn")).0;
                log.count("parent add", code);
                if ![CODE_SUCCESS, CODE_ALREADY_EXISTS, CODE_BUSY].contains(&code) {
                    log.violations.push(format!("re-add of {CHURN_PARENT}: result {code}"));
                }
            }
            other => log.violations.push(format!("delete {CHURN_PARENT}: result {other}")),
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    log
}

/// No orphans and no duplicates among `dns` (all under BASE, BASE included).
fn check_tree(dns: &[String], source: &str) {
    let lower: Vec<String> = dns.iter().map(|dn| dn.to_lowercase()).collect();
    let unique: BTreeSet<&String> = lower.iter().collect();
    assert_eq!(unique.len(), lower.len(), "{source}: a DN appears twice: {lower:?}");
    let base = BASE.to_lowercase();
    assert!(unique.contains(&base), "{source}: the suffix entry is missing");
    for dn in &lower {
        if dn == &base {
            continue;
        }
        let parent = dn.split_once(',').map(|(_, p)| p.to_string()).unwrap_or_default();
        assert!(unique.contains(&parent), "{source}: orphan {dn} (no parent {parent:?})");
    }
}

fn subtree_dns(conn: &mut LdapConn) -> Vec<String> {
    let found = search(conn, BASE, Scope::Subtree, "(objectClass=*)", &["1.1"]).expect("subtree search");
    found.into_iter().map(|(dn, _)| dn).collect()
}

#[test]
fn churn_under_one_parent_keeps_the_tree_consistent() {
    let mut server = Server::start();
    let mut conn = admin(&server);
    assert_eq!(add(&mut conn, CHURN_PARENT, &ou("churn")).0, CODE_SUCCESS);
    let url = server.url();
    let started = Instant::now();
    let logs: Vec<ChurnLog> = std::thread::scope(|scope| {
        let children: Vec<_> = (0..CHURN_CHILD_WORKERS)
            .map(|w| {
                scope.spawn({
                    let url = &url;
                    move || churn_child_worker(url, w)
                })
            })
            .collect();
        let parents: Vec<_> =
            (0..CHURN_PARENT_WORKERS).map(|_| scope.spawn(|| churn_parent_worker(&url))).collect();
        children.into_iter().chain(parents).map(|h| h.join().expect("worker panicked")).collect()
    });
    let elapsed = started.elapsed();
    let mut codes: BTreeMap<(&str, u32), usize> = BTreeMap::new();
    for log in &logs {
        for (key, n) in &log.codes {
            *codes.entry(*key).or_default() += n;
        }
    }
    eprintln!("churn: {elapsed:?}, result codes {codes:?}");
    let violations: Vec<&String> = logs.iter().flat_map(|l| &l.violations).collect();
    assert!(violations.is_empty(), "unexpected results: {violations:#?}");
    let total: usize = codes.values().sum();
    let busy: usize = codes.iter().filter(|((_, code), _)| *code == CODE_BUSY).map(|(_, n)| n).sum();
    assert!(busy * 20 < total, "{busy} of {total} operations got busy (51)");
    // A parent delete that succeeded must not overlap a time when a child certainly existed.
    let lives: Vec<&Life> = logs.iter().flat_map(|l| &l.lives).collect();
    for (sent, answered) in logs.iter().flat_map(|l| &l.parent_deletes) {
        for life in &lives {
            let ended = life.delete_sent.unwrap_or_else(Instant::now);
            assert!(
                !(life.added < *sent && *answered < ended),
                "{CHURN_PARENT} deleted at {:?}..{:?} while {} existed ({:?}..{:?})",
                *sent - started,
                *answered - started,
                life.dn,
                life.added - started,
                ended - started
            );
        }
    }
    let present: BTreeSet<String> =
        logs.iter().flat_map(|l| &l.present).map(|dn| dn.to_lowercase()).collect();
    check_churn_state(&mut conn, &present, "after the churn");
    drop(conn);
    server.stop();
    let exported = ldif_dns(&server.export());
    check_tree(&exported, "export after the churn");
    server.restart();
    let mut conn = admin(&server);
    let searched = subtree_dns(&mut conn);
    let as_set = |dns: &[String]| dns.iter().map(|d| d.to_lowercase()).collect::<BTreeSet<_>>();
    assert_eq!(as_set(&exported), as_set(&searched), "export and subtree search disagree");
    check_churn_state(&mut conn, &present, "after restart");
    // Quiet now: with its children deleted, the parent must be deletable.
    for dn in &present {
        assert_eq!(delete(&mut conn, dn), CODE_SUCCESS, "delete {dn}");
    }
    if read(&mut conn, CHURN_PARENT).is_ok() {
        assert_eq!(delete(&mut conn, CHURN_PARENT), CODE_SUCCESS, "{CHURN_PARENT} without children");
    }
    assert_eq!(read(&mut conn, CHURN_PARENT), Err(CODE_NO_SUCH_OBJECT));
}

fn check_churn_state(conn: &mut LdapConn, present: &BTreeSet<String>, when: &str) {
    let everything = subtree_dns(conn);
    check_tree(&everything, when);
    let suffix = format!(",{}", CHURN_PARENT.to_lowercase());
    let below: BTreeSet<String> =
        everything.iter().map(|dn| dn.to_lowercase()).filter(|dn| dn.ends_with(&suffix)).collect();
    assert_eq!(&below, present, "{when}: subtree search below {CHURN_PARENT} vs acknowledged adds");
    match read(conn, CHURN_PARENT) {
        Ok(_) => {
            let level = search(conn, CHURN_PARENT, Scope::OneLevel, "(objectClass=*)", &["hasSubordinates"])
                .expect("one-level");
            let seen: BTreeSet<String> = level.iter().map(|(dn, _)| dn.to_lowercase()).collect();
            assert_eq!(&seen, present, "{when}: children of {CHURN_PARENT} vs acknowledged adds");
            assert_eq!(seen.len(), level.len(), "{when}: a child listed twice");
            let flag = search(conn, CHURN_PARENT, Scope::Base, "(objectClass=*)", &["hasSubordinates"])
                .expect("base");
            let flag = values(&flag[0].1, "hasSubordinates").cloned().unwrap_or_default();
            let want = if present.is_empty() { "FALSE" } else { "TRUE" };
            assert_eq!(flag, vec![want.as_bytes().to_vec()], "{when}: hasSubordinates of {CHURN_PARENT}");
        }
        Err(code) => {
            assert_eq!(code, CODE_NO_SUCH_OBJECT);
            assert!(
                present.is_empty(),
                "{when}: {CHURN_PARENT} is gone but these adds were acknowledged: {present:?}"
            );
        }
    }
    for dn in present {
        let got = read(conn, dn).unwrap_or_else(|code| panic!("{when}: {dn}: result {code}"));
        assert!(values(&got, "description").is_some(), "{when}: {dn} incomplete: {got:?}");
    }
}

const RACERS: usize = 6;
const RACE_ROUNDS: usize = 40;

/// Round `r` races for one DN: under ou=people (a container) on even rounds, under a fresh
/// leaf on odd rounds (the race also promotes it). Odd racers spell the DN in upper case.
fn race_dn(round: usize, racer: usize) -> String {
    let parent =
        if round.is_multiple_of(2) { format!("ou=people,{BASE}") } else { format!("ou=race{round},{BASE}") };
    if racer.is_multiple_of(2) {
        format!("cn=racer{round},{parent}")
    } else {
        format!("CN=RACER{round},{parent}")
    }
}

#[test]
fn racing_adds_of_one_dn_have_one_winner() {
    racing_adds_of_one_dn_have_one_winner_on(&Server::start());
}

#[test]
fn racing_adds_of_one_dn_have_one_winner_with_message_reads() {
    racing_adds_of_one_dn_have_one_winner_on(&Server::start_with_config(&message_reads_config()));
}

fn racing_adds_of_one_dn_have_one_winner_on(server: &Server) {
    let mut conn = admin(server);
    for round in (1..RACE_ROUNDS).step_by(2) {
        assert_eq!(
            add(&mut conn, &format!("ou=race{round},{BASE}"), &ou(&format!("race{round}"))).0,
            CODE_SUCCESS
        );
    }
    let barrier = Barrier::new(RACERS);
    let url = server.url();
    let codes: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..RACERS)
            .map(|racer| {
                let (url, barrier) = (&url, &barrier);
                scope.spawn(move || {
                    let mut conn = admin_at(url);
                    (0..RACE_ROUNDS)
                        .map(|round| {
                            let dn = race_dn(round, racer);
                            let cn = dn.split(',').next().unwrap_or_default()[3..].to_string();
                            barrier.wait();
                            add(&mut conn, &dn, &person(&cn, &format!("racer {racer}"))).0
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("racer panicked")).collect()
    });
    for round in 0..RACE_ROUNDS {
        let results: Vec<u32> = codes.iter().map(|per_racer| per_racer[round]).collect();
        let winners: Vec<usize> = (0..RACERS).filter(|&r| results[r] == CODE_SUCCESS).collect();
        assert_eq!(winners.len(), 1, "round {round}: results {results:?}");
        assert!(
            results.iter().all(|&c| c == CODE_SUCCESS || c == CODE_ALREADY_EXISTS),
            "round {round}: losers must get 68: {results:?}"
        );
        let dn = race_dn(round, 0);
        let stored = read(&mut conn, &dn).unwrap_or_else(|code| panic!("round {round}: {dn}: result {code}"));
        let want = format!("racer {}", winners[0]);
        assert_eq!(
            values(&stored, "description"),
            Some(&vec![want.into_bytes()]),
            "round {round}: not the winner's entry"
        );
        let parent = dn.split_once(',').map(|(_, p)| p).unwrap_or_default();
        let level = search(&mut conn, parent, Scope::OneLevel, &format!("(cn=racer{round})"), &["1.1"])
            .expect("one-level");
        assert_eq!(level.len(), 1, "round {round}: {dn} listed {} times", level.len());
    }
}

const RW_WRITERS: usize = 4;
const RW_ENTRIES_PER_WRITER: usize = 24;
const RW_VERSIONS: usize = 3;
const RW_READERS: usize = 4;
const RW_READS_PER_READER: usize = 120;
const RW_PARENT: &str = "ou=rw,dc=example,dc=com";

fn rw_entry(cn: &str) -> Attrs {
    attrs(&[
        ("objectClass", &["top", "person", "organizationalPerson", "inetOrgPerson"]),
        ("cn", &[cn]),
        ("sn", &["Whole"]),
        ("description", &["v0"]),
        ("title", &["v0"]),
        ("mail", &["v0-a@example.com", "v0-b@example.com"]),
        ("employeeNumber", &[cn]),
    ])
}

/// One Modify that moves three attributes to `version` together.
fn rw_bump(conn: &mut LdapConn, dn: &str, version: usize) -> u32 {
    let v = format!("v{version}");
    let (a, b) = (format!("v{version}-a@example.com"), format!("v{version}-b@example.com"));
    let mods = vec![
        Mod::Replace("description", one(&v)),
        Mod::Replace("title", one(&v)),
        Mod::Replace("mail", one(&a)),
        Mod::Add("mail", one(&b)),
    ];
    modify(conn, dn, mods)
}

/// Whether `attrs` is a whole entry written by `rw_entry` and `rw_bump`; returns its version.
fn rw_check(dn: &str, got: &Attrs) -> Result<usize, String> {
    let text = |name: &str| -> Vec<String> {
        values(got, name)
            .map(|vs| vs.iter().map(|v| String::from_utf8_lossy(v).into_owned()).collect())
            .unwrap_or_default()
    };
    let cn = dn.split(',').next().unwrap_or_default().trim_start_matches("cn=").to_string();
    let classes: BTreeSet<String> = text("objectClass").into_iter().collect();
    let want_classes: BTreeSet<String> =
        ["top", "person", "organizationalPerson", "inetOrgPerson"].map(String::from).into();
    let description = text("description");
    let version: usize = description
        .first()
        .and_then(|d| d.strip_prefix('v'))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{dn}: description {description:?}"))?;
    let v = format!("v{version}");
    let mut mail = text("mail");
    if version == 0 {
        mail.sort(); // sent as one set: any order
    }
    let whole = classes == want_classes
        && text("cn") == [cn.clone()]
        && text("sn") == ["Whole"]
        && description == [v.clone()]
        && text("title") == [v.clone()]
        && mail == [format!("{v}-a@example.com"), format!("{v}-b@example.com")]
        && text("employeeNumber") == [cn];
    if whole {
        Ok(version)
    } else {
        Err(format!("{dn}: torn or incomplete entry {got:?}"))
    }
}

fn rw_writer(url: &str, writer: usize) -> Vec<(String, usize)> {
    let mut conn = admin_at(url);
    let mut survivors = Vec::new();
    for i in 0..RW_ENTRIES_PER_WRITER {
        let cn = format!("w{writer}-{i}");
        let dn = format!("cn={cn},{RW_PARENT}");
        assert_eq!(add(&mut conn, &dn, &rw_entry(&cn)).0, CODE_SUCCESS, "add {dn}");
        for version in 1..=RW_VERSIONS {
            assert_eq!(rw_bump(&mut conn, &dn, version), CODE_SUCCESS, "modify {dn} to v{version}");
        }
        if i % 3 == 0 {
            assert_eq!(delete(&mut conn, &dn), CODE_SUCCESS, "delete {dn}");
        } else {
            survivors.push((dn.to_lowercase(), RW_VERSIONS));
        }
    }
    survivors
}

/// Reads the parent's children, entries by name, and entries by a filter; returns how many
/// entries it saw, and the problems.
fn rw_reader(url: &str, reader: usize) -> (usize, Vec<String>) {
    let mut conn = admin_at(url);
    let mut seen = 0;
    let mut problems = Vec::new();
    for round in 0..RW_READS_PER_READER {
        let (base, scope, filter) = match round % 3 {
            0 => (RW_PARENT.to_string(), Scope::OneLevel, "(objectClass=person)".to_string()),
            1 => {
                let (w, i) = ((reader + round) % RW_WRITERS, round % RW_ENTRIES_PER_WRITER);
                (format!("cn=w{w}-{i},{RW_PARENT}"), Scope::Base, "(objectClass=*)".to_string())
            }
            _ => (BASE.to_string(), Scope::Subtree, format!("(title=v{})", round % (RW_VERSIONS + 1))),
        };
        let entries = match search(&mut conn, &base, scope, &filter, &["*"]) {
            Ok(entries) => entries,
            Err(CODE_NO_SUCH_OBJECT) if scope == Scope::Base => continue,
            Err(code) => {
                problems.push(format!("search {base} {filter}: result {code}"));
                continue;
            }
        };
        for (dn, got) in &entries {
            seen += 1;
            match rw_check(dn, got) {
                Ok(version) if filter.starts_with("(title=") && filter != format!("(title=v{version})") => {
                    problems.push(format!("{dn} at v{version} matched {filter}"));
                }
                Ok(_) => {}
                Err(problem) => problems.push(problem),
            }
        }
    }
    (seen, problems)
}

#[test]
fn readers_see_whole_entries_during_writes() {
    readers_see_whole_entries_during_writes_on(&Server::start());
}

#[test]
fn readers_see_whole_entries_during_writes_with_message_reads() {
    readers_see_whole_entries_during_writes_on(&Server::start_with_config(&message_reads_config()));
}

fn readers_see_whole_entries_during_writes_on(server: &Server) {
    let mut conn = admin(server);
    assert_eq!(add(&mut conn, RW_PARENT, &ou("rw")).0, CODE_SUCCESS);
    let seed = format!("cn=seed,{RW_PARENT}");
    assert_eq!(add(&mut conn, &seed, &rw_entry("seed")).0, CODE_SUCCESS);
    let url = server.url();
    let (survivors, reads) = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..RW_WRITERS)
            .map(|w| {
                scope.spawn({
                    let url = &url;
                    move || rw_writer(url, w)
                })
            })
            .collect();
        let readers: Vec<_> = (0..RW_READERS)
            .map(|r| {
                scope.spawn({
                    let url = &url;
                    move || rw_reader(url, r)
                })
            })
            .collect();
        let survivors: Vec<(String, usize)> =
            writers.into_iter().flat_map(|h| h.join().expect("writer panicked")).collect();
        let reads: Vec<(usize, Vec<String>)> =
            readers.into_iter().map(|h| h.join().expect("reader panicked")).collect();
        (survivors, reads)
    });
    let problems: Vec<&String> = reads.iter().flat_map(|(_, p)| p).collect();
    assert!(problems.is_empty(), "readers saw: {problems:#?}");
    let seen: usize = reads.iter().map(|(n, _)| n).sum();
    assert!(seen > 0, "the readers saw no entries at all");
    let mut want: BTreeMap<String, usize> = survivors.into_iter().collect();
    want.insert(seed.to_lowercase(), 0);
    let level = search(&mut conn, RW_PARENT, Scope::OneLevel, "(objectClass=*)", &["*"]).expect("one-level");
    let mut got = BTreeMap::new();
    for (dn, entry) in &level {
        let version = rw_check(dn, entry).unwrap_or_else(|problem| panic!("at the end: {problem}"));
        got.insert(dn.to_lowercase(), version);
    }
    assert_eq!(got, want, "children of {RW_PARENT} at the end");
}

const SPROUT_ROUNDS: usize = 10;
const SPROUT_CLIENTS: usize = 8;

#[test]
fn first_children_added_at_once_under_a_leaf_all_land() {
    let server = Server::start();
    let mut conn = admin(&server);
    let leaf = |round: usize| format!("ou=sprout{round},ou=people,{BASE}");
    for round in 0..SPROUT_ROUNDS {
        assert_eq!(add(&mut conn, &leaf(round), &ou(&format!("sprout{round}"))).0, CODE_SUCCESS);
        let flag = search(&mut conn, &leaf(round), Scope::Base, "(objectClass=*)", &["hasSubordinates"])
            .expect("base");
        assert_eq!(values(&flag[0].1, "hasSubordinates"), Some(&vec![b"FALSE".to_vec()]), "a new leaf");
    }
    let barrier = Barrier::new(SPROUT_CLIENTS);
    let url = server.url();
    let codes: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..SPROUT_CLIENTS)
            .map(|client| {
                let (url, barrier, leaf) = (&url, &barrier, &leaf);
                scope.spawn(move || {
                    let mut conn = admin_at(url);
                    (0..SPROUT_ROUNDS)
                        .map(|round| {
                            let dn = format!("cn=kid{client},{}", leaf(round));
                            barrier.wait();
                            add(&mut conn, &dn, &person(&format!("kid{client}"), "first")).0
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("client panicked")).collect()
    });
    for round in 0..SPROUT_ROUNDS {
        let results: Vec<u32> = codes.iter().map(|c| c[round]).collect();
        assert!(results.iter().all(|&c| c == CODE_SUCCESS), "round {round}: results {results:?}");
        let parent = leaf(round);
        let flag =
            search(&mut conn, &parent, Scope::Base, "(objectClass=*)", &["hasSubordinates"]).expect("base");
        assert_eq!(values(&flag[0].1, "hasSubordinates"), Some(&vec![b"TRUE".to_vec()]), "{parent}");
        let level =
            search(&mut conn, &parent, Scope::OneLevel, "(objectClass=*)", &["1.1"]).expect("one-level");
        let got: BTreeSet<String> = level.iter().map(|(dn, _)| dn.to_lowercase()).collect();
        let want: BTreeSet<String> =
            (0..SPROUT_CLIENTS).map(|c| format!("cn=kid{c},{parent}").to_lowercase()).collect();
        assert_eq!(got, want, "children of {parent}");
        assert_eq!(level.len(), SPROUT_CLIENTS, "{parent}: a child listed twice");
        for dn in &want {
            assert!(read(&mut conn, dn).is_ok(), "{dn} is not readable by name");
        }
        let subtree =
            search(&mut conn, &parent, Scope::Subtree, "(objectClass=*)", &["1.1"]).expect("subtree");
        assert_eq!(subtree.len(), SPROUT_CLIENTS + 1, "subtree of {parent}");
    }
    check_tree(&subtree_dns(&mut conn), "after the first children");
}
