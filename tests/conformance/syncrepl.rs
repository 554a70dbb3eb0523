//! Interoperability with unmodified slapd 2.5 consumers (back-mdb, `syncrepl`) of a
//! ferrodir provider (RFC 4533): one provider and two consumers, refreshOnly and
//! refreshAndPersist, shared by every step:
//! 1. the initial load of 10k entries;
//! 2. an add, a modify, a Modify DN (rename and move), a subtree rename and move, and a
//!    delete while the consumers run (persisting, and refreshing every 2 s);
//! 3. the consumers stopped, changes including deletes, the consumers restarted: a delete
//!    phase from the provider's delete log (checked in its metrics);
//! 4. the consumers stopped, more deletes than the log keeps, restarted: the log was
//!    trimmed past their cookies, so a present phase (checked in the metrics);
//! 5. the provider restarted, more changes.
//! After each step the test waits until every side agrees: every entry compared with
//! ldapsearch `*` `+` (DNs, every value, entryUUID, entryCSN, the timestamps and names),
//! and contextCSN on the suffix.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::servers::{self, MANAGER_DN, MANAGER_PW, SUFFIX};

/// Entries of the initial load (and a few containers).
const PEOPLE: usize = 10_000;
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(90);
/// The provider's `limits.sync_delete_log_max`: small, so that step 4 trims past a cookie.
const DELETE_LOG_MAX: usize = 40;
/// Of its 4 shards, any one's log holding DELETE_LOG_MAX + 1 records trims it; this many
/// deletes do that for certain.
const TRIMMING_DELETES: usize = 4 * DELETE_LOG_MAX + 40;

/// Computed on each side, never replicated (the consumer runs no memberof overlay).
const IGNORED: &[&str] = &["entrydn", "hassubordinates", "subschemasubentry", "contextcsn", "memberof"];

fn initial_ldif() -> String {
    initial_ldif_of(PEOPLE)
}

/// The initial load with `people` users (tests/conformance/consumer.rs uses fewer).
pub(crate) fn initial_ldif_of(people: usize) -> String {
    let mut ldif = format!(
        "dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n\
         dn: ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: people\n\n\
         dn: ou=others,{SUFFIX}\nobjectClass: organizationalUnit\nou: others\n\n"
    );
    for i in 0..people {
        ldif.push_str(&format!(
            "dn: uid=user{i},ou=people,{SUFFIX}\nobjectClass: inetOrgPerson\nuid: user{i}\ncn: User {i}\n\
             sn: Number{i}\nmail: user{i}@example.com\nuserPassword: pw{i}\ndescription: initial\n\n"
        ));
    }
    ldif.push_str(&format!(
        "dn: cn=team,ou=others,{SUFFIX}\nobjectClass: groupOfNames\ncn: team\nmember: uid=user1,ou=people,{SUFFIX}\n\
         member: uid=user2,ou=people,{SUFFIX}\n\n"
    ));
    // A container with children, for the subtree renames.
    ldif.push_str(&format!("dn: ou=dept,ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: dept\n\n"));
    for i in 0..5 {
        ldif.push_str(&format!(
            "dn: cn=member{i},ou=dept,ou=people,{SUFFIX}\nobjectClass: person\ncn: member{i}\nsn: M{i}\n\n"
        ));
    }
    ldif
}

/// A slapd consumer whose database survives a stop and a start.
struct Consumer {
    kind: &'static str,
    dir: tempfile::TempDir,
    conf: PathBuf,
    child: Option<Child>,
    addr: SocketAddr,
}

impl Consumer {
    fn new(provider: SocketAddr, kind: &'static str) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::create_dir(dir.path().join("db")).expect("mkdir db");
        let syncrepl = format!(
            "dbnosync\nindex entryUUID,entryCSN eq\n\
             syncrepl rid=001 provider=ldap://{provider} bindmethod=simple binddn=\"{MANAGER_DN}\" \
             credentials={MANAGER_PW} searchbase=\"{SUFFIX}\" type={kind} interval=00:00:00:02 retry=\"1 +\"\n"
        );
        let conf = dir.path().join("slapd.conf");
        std::fs::write(&conf, servers::slapd_config(dir.path(), &[], &syncrepl)).expect("write slapd.conf");
        let mut consumer = Self { kind, dir, conf, child: None, addr: SocketAddr::from(([127, 0, 0, 1], 0)) };
        consumer.start();
        consumer
    }

    fn start(&mut self) {
        let (slapd, _) = servers::slapd_programs();
        for _attempt in 0..5 {
            let port = if self.addr.port() == 0 { servers::free_port() } else { self.addr.port() };
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.path().join("slapd.log"))
                .expect("slapd.log");
            let mut child = Command::new(&slapd)
                .args(["-d", "sync", "-h", &format!("ldap://127.0.0.1:{port}/"), "-f"])
                .arg(&self.conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start slapd");
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            if servers::wait_listening(&mut child, addr) {
                self.addr = addr;
                self.child = Some(child);
                return;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("the slapd consumer did not start; its log:\n{}", self.log_tail());
    }

    /// SIGTERM, as an operator stops it: back-mdb closes cleanly.
    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            servers::terminate(child, Duration::from_secs(10));
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("slapd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Every entry under the suffix as `DN (lowercased) → sorted "type: value" lines`.
pub(crate) fn snapshot(addr: SocketAddr) -> BTreeMap<String, Vec<String>> {
    let output = Command::new("ldapsearch")
        .args([
            "-LLL",
            "-o",
            "ldif-wrap=no",
            "-x",
            "-H",
            &format!("ldap://{addr}"),
            "-D",
            MANAGER_DN,
            "-w",
            MANAGER_PW,
        ])
        .args(["-b", SUFFIX, "(objectClass=*)", "*", "+"])
        .output()
        .expect("run ldapsearch");
    let text = String::from_utf8_lossy(&output.stdout);
    let mut entries = BTreeMap::new();
    for record in text.split("\n\n").filter(|r| !r.trim().is_empty()) {
        let mut dn = String::new();
        let mut lines = Vec::new();
        for line in record.lines() {
            let Some((name, value)) = line.split_once(':') else { continue };
            let name = name.to_ascii_lowercase();
            if name == "dn" {
                dn = value.trim().to_ascii_lowercase();
            } else if !IGNORED.contains(&name.as_str()) {
                lines.push(format!("{name}:{value}"));
            }
        }
        lines.sort();
        entries.insert(dn, lines);
    }
    entries
}

fn context_csn(addr: SocketAddr) -> Option<String> {
    let output = Command::new("ldapsearch")
        .args(["-LLL", "-x", "-H", &format!("ldap://{addr}"), "-D", MANAGER_DN, "-w", MANAGER_PW])
        .args(["-s", "base", "-b", SUFFIX, "(objectClass=*)", "contextCSN"])
        .output()
        .expect("run ldapsearch");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.lines().find_map(|l| l.strip_prefix("contextCSN: ").map(str::to_string))
}

/// What differs between the two sides, briefly; None when they agree.
pub(crate) fn difference(
    ours: &BTreeMap<String, Vec<String>>,
    provider: SocketAddr,
    consumer: SocketAddr,
) -> Option<String> {
    let theirs = snapshot(consumer);
    let (csn_ours, csn_theirs) = (context_csn(provider), context_csn(consumer));
    let mut problems = Vec::new();
    if ours.is_empty() {
        problems.push("the provider returned nothing".to_string());
    }
    for (dn, lines) in ours {
        match theirs.get(dn) {
            None => problems.push(format!("missing on the consumer: {dn}")),
            Some(other) if other != lines => {
                let only_ours: Vec<_> = lines.iter().filter(|l| !other.contains(l)).collect();
                let only_theirs: Vec<_> = other.iter().filter(|l| !lines.contains(l)).collect();
                problems.push(format!("{dn}: provider only {only_ours:?}, consumer only {only_theirs:?}"));
            }
            Some(_) => {}
        }
    }
    for dn in theirs.keys().filter(|dn| !ours.contains_key(*dn)) {
        problems.push(format!("extra on the consumer: {dn}"));
    }
    if csn_ours.is_none() || csn_ours != csn_theirs {
        problems.push(format!("contextCSN: provider {csn_ours:?}, consumer {csn_theirs:?}"));
    }
    if problems.is_empty() {
        return None;
    }
    let count = problems.len();
    problems.truncate(5);
    Some(format!("{count} differences, first: {}", problems.join("; ")))
}

/// Waits until every consumer agrees with the provider. contextCSN (one base search) is
/// compared first and often; the whole content only once the contextCSNs agree, and at
/// most every 2 s (two searches of 10k entries cost the 2-core machine about a second).
fn converge(provider: SocketAddr, consumers: &[&Consumer], step: &str) -> Duration {
    let started = Instant::now();
    let mut last = None;
    let mut compared: Option<Instant> = None;
    while started.elapsed() < CONVERGE_TIMEOUT {
        let ours = context_csn(provider);
        let agree = ours.is_some() && consumers.iter().all(|c| context_csn(c.addr) == ours);
        if !agree {
            last = Some(format!(
                "contextCSN: provider {ours:?}, consumers {:?}",
                consumers.iter().map(|c| context_csn(c.addr)).collect::<Vec<_>>()
            ));
        } else if compared.is_none_or(|at| at.elapsed() > Duration::from_secs(2)) {
            compared = Some(Instant::now());
            let ours = snapshot(provider);
            match consumers
                .iter()
                .find_map(|c| difference(&ours, provider, c.addr).map(|d| format!("{}: {d}", c.kind)))
            {
                None => return started.elapsed(),
                Some(diff) => last = Some(diff),
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let logs: Vec<String> =
        consumers.iter().map(|c| format!("{} consumer log:\n{}", c.kind, c.log_tail())).collect();
    for c in consumers {
        // The whole log, for a look after the temporary directory is gone.
        let log = std::fs::read_to_string(c.dir.path().join("slapd.log")).unwrap_or_default();
        let _ = std::fs::write(std::env::temp_dir().join(format!("syncrepl-{}.log", c.kind)), log);
    }
    panic!("{step}: the consumers did not converge in {CONVERGE_TIMEOUT:?}: {last:?}\n{}", logs.join("\n"));
}

pub(crate) fn ldapmodify(addr: SocketAddr, ldif: &str) {
    use std::io::Write;
    let mut child = Command::new("ldapmodify")
        .args(["-x", "-H", &format!("ldap://{addr}"), "-D", MANAGER_DN, "-w", MANAGER_PW])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ldapmodify");
    child.stdin.take().expect("stdin").write_all(ldif.as_bytes()).expect("write LDIF");
    let output = child.wait_with_output().expect("ldapmodify");
    assert!(output.status.success(), "ldapmodify failed: {}", String::from_utf8_lossy(&output.stderr));
}

pub(crate) fn changes(n: usize) -> String {
    format!(
        "dn: uid=new{n},ou=people,{SUFFIX}\nchangetype: add\nobjectClass: inetOrgPerson\nuid: new{n}\ncn: New {n}\nsn: N\n\n\
         dn: uid=user{a},ou=people,{SUFFIX}\nchangetype: modify\nreplace: description\ndescription: changed {n}\n-\nadd: telephoneNumber\ntelephoneNumber: +1 555 {n}\n\n\
         dn: uid=user{b},ou=people,{SUFFIX}\nchangetype: modrdn\nnewrdn: uid=renamed{n}\ndeleteoldrdn: 1\n\n\
         dn: uid=user{c},ou=people,{SUFFIX}\nchangetype: modrdn\nnewrdn: uid=user{c}\ndeleteoldrdn: 0\nnewsuperior: ou=others,{SUFFIX}\n\n\
         dn: uid=user{d},ou=people,{SUFFIX}\nchangetype: delete\n\n",
        a = 10 + n * 10,
        b = 11 + n * 10,
        c = 12 + n * 10,
        d = 13 + n * 10,
    )
}

/// A ferrodir provider on a fixed port, so that it can be restarted under the consumers.
struct Provider {
    dir: tempfile::TempDir,
    addr: SocketAddr,
    metrics: SocketAddr,
    child: Option<Child>,
}

impl Provider {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let metrics = SocketAddr::from(([127, 0, 0, 1], servers::free_port()));
        let extra = format!(
            "server_id = 1\nmetrics_listen = \"{metrics}\"\n[limits]\nsync_delete_log_max = {DELETE_LOG_MAX}\n"
        );
        std::fs::write(dir.path().join("ferrodir.toml"), servers::ferrodir_config(true, &extra))
            .expect("config");
        let ldif = dir.path().join("initial.ldif");
        std::fs::write(&ldif, initial_ldif()).expect("write LDIF");
        let output = Command::new(env!("CARGO_BIN_EXE_ferrodir"))
            .args(["import", "--config"])
            .arg(dir.path().join("ferrodir.toml"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg(&ldif)
            .output()
            .expect("run ferrodir import");
        assert!(output.status.success(), "import failed: {}", String::from_utf8_lossy(&output.stderr));
        let mut provider = Self {
            dir,
            addr: SocketAddr::from(([127, 0, 0, 1], servers::free_port())),
            metrics,
            child: None,
        };
        provider.start();
        provider
    }

    fn start(&mut self) {
        let dir = self.dir.path();
        let child = servers::spawn_ferrodir(
            &dir.join("ferrodir.toml"),
            &dir.join("data"),
            self.addr,
            &dir.join("ferrodir.log"),
        );
        match child {
            Some(child) => self.child = Some(child),
            None => panic!("ferrodir did not start: {}", self.log()),
        }
    }

    /// SIGTERM, as an operator restarts it.
    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            servers::terminate(child, Duration::from_secs(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("ferrodir.log")).unwrap_or_default()
    }

    /// A counter or gauge from /metrics: the sum of the series whose line starts `series`.
    fn metric(&self, series: &str) -> f64 {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.metrics).expect("connect to the metrics endpoint");
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").expect("request /metrics");
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("read /metrics");
        text.lines()
            .filter(|l| l.starts_with(series))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn subtree_changes() -> String {
    format!(
        "dn: ou=dept,ou=people,{SUFFIX}\nchangetype: modrdn\nnewrdn: ou=division\ndeleteoldrdn: 1\n\n\
         dn: cn=member0,ou=division,ou=people,{SUFFIX}\nchangetype: modify\nreplace: sn\nsn: Moved\n\n\
         dn: ou=division,ou=people,{SUFFIX}\nchangetype: modrdn\nnewrdn: ou=division\ndeleteoldrdn: 1\nnewsuperior: ou=others,{SUFFIX}\n\n"
    )
}

fn deletes(range: std::ops::Range<usize>) -> String {
    range.map(|i| format!("dn: uid=user{i},ou=people,{SUFFIX}\nchangetype: delete\n\n")).collect()
}

/// One provider, a refreshOnly and a refreshAndPersist consumer, every step of the issue.
#[test]
fn slapd_consumers_of_a_ferrodir_provider() {
    let mut provider = Provider::new();
    let started = Instant::now();
    let mut only = Consumer::new(provider.addr, "refreshOnly");
    let mut persist = Consumer::new(provider.addr, "refreshAndPersist");
    let took = converge(provider.addr, &[&only, &persist], "initial load");
    eprintln!(
        "initial refresh of {} entries to two slapd consumers converged in {took:?} ({:?} with their start)",
        PEOPLE + 10,
        started.elapsed()
    );

    // 2. While they run: leaf changes, then a subtree renamed and moved.
    ldapmodify(provider.addr, &changes(0));
    ldapmodify(provider.addr, &subtree_changes());
    let took = converge(provider.addr, &[&only, &persist], "changes and subtree renames while running");
    eprintln!("changes while persisting converged in {took:?}");

    // 3. Stopped, changes with deletes, restarted: a delete phase from the log.
    only.stop();
    persist.stop();
    let delete_phases = provider.metric("ferrodir_syncrepl_refreshes_total{phase=\"delete\"}");
    ldapmodify(provider.addr, &changes(1));
    ldapmodify(provider.addr, &deletes(500..505));
    only.start();
    persist.start();
    let took = converge(provider.addr, &[&only, &persist], "after the consumers' restart (delete phase)");
    eprintln!("after the consumers' restart (delete phase): converged in {took:?}");
    let after = provider.metric("ferrodir_syncrepl_refreshes_total{phase=\"delete\"}");
    assert!(after >= delete_phases + 2.0, "delete phases: {delete_phases} before, {after} after");

    // 4. Stopped, more deletes than the log keeps: a present phase.
    only.stop();
    persist.stop();
    let present_phases = provider.metric("ferrodir_syncrepl_refreshes_total{phase=\"present\"}");
    ldapmodify(provider.addr, &deletes(1000..1000 + TRIMMING_DELETES));
    only.start();
    persist.start();
    let took = converge(
        provider.addr,
        &[&only, &persist],
        "after the consumers' restart (log trimmed: present phase)",
    );
    eprintln!("after the consumers' restart (log trimmed: present phase): converged in {took:?}");
    let after = provider.metric("ferrodir_syncrepl_refreshes_total{phase=\"present\"}");
    assert!(after >= present_phases + 2.0, "present phases: {present_phases} before, {after} after");
    assert_eq!(provider.metric("ferrodir_syncrepl_consumers{mode=\"persist\"}"), 1.0);

    // 5. The provider restarted under them, then more changes.
    provider.stop();
    provider.start();
    ldapmodify(provider.addr, &changes(2));
    let took = converge(provider.addr, &[&only, &persist], "after the provider's restart");
    eprintln!("after the provider's restart: converged in {took:?}");
    eprintln!("every step passed in {:?}", started.elapsed());
}
