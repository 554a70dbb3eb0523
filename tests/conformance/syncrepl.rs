//! Interoperability with an unmodified slapd 2.5 consumer (back-mdb, `syncrepl`) of a
//! ferrodir provider (RFC 4533), refreshOnly and refreshAndPersist: the initial load,
//! then an add, a modify, a Modify DN (rename and move) and a delete on ferrodir; then the
//! consumer stopped, changes including deletes, the consumer restarted (its present phase
//! deletes what is gone). After each step the test waits until
//! both sides agree: every entry compared with ldapsearch `*` `+` (DNs, every value,
//! entryUUID, entryCSN, the timestamps and names), and contextCSN on the suffix.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};

/// Entries of the initial load. The 10k converges too (measured: 47 s for the
/// initial refreshOnly load, both cases 75 s, on a loaded 2-core machine), mostly the slapd
/// consumer's own adds and the comparisons: too long for CI, so 1k here.
pub(crate) const PEOPLE: usize = 1_000;
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Computed on each side, never replicated (the consumer runs no memberof overlay).
const IGNORED: &[&str] = &["entrydn", "hassubordinates", "subschemasubentry", "contextcsn", "memberof"];

pub(crate) fn initial_ldif() -> String {
    let mut ldif = format!(
        "dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n\
         dn: ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: people\n\n\
         dn: ou=others,{SUFFIX}\nobjectClass: organizationalUnit\nou: others\n\n"
    );
    for i in 0..PEOPLE {
        ldif.push_str(&format!(
            "dn: uid=user{i},ou=people,{SUFFIX}\nobjectClass: inetOrgPerson\nuid: user{i}\ncn: User {i}\n\
             sn: Number{i}\nmail: user{i}@example.com\nuserPassword: pw{i}\ndescription: initial\n\n"
        ));
    }
    ldif.push_str(&format!(
        "dn: cn=team,ou=others,{SUFFIX}\nobjectClass: groupOfNames\ncn: team\nmember: uid=user1,ou=people,{SUFFIX}\n\
         member: uid=user2,ou=people,{SUFFIX}\n\n"
    ));
    ldif
}

/// A slapd consumer whose database survives a stop and a start.
struct Consumer {
    dir: tempfile::TempDir,
    conf: PathBuf,
    child: Option<Child>,
    addr: SocketAddr,
}

impl Consumer {
    fn new(provider: SocketAddr, kind: &str) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::create_dir(dir.path().join("db")).expect("mkdir db");
        let syncrepl = format!(
            "dbnosync\nindex entryUUID,entryCSN eq\n\
             syncrepl rid=001 provider=ldap://{provider} bindmethod=simple binddn=\"{MANAGER_DN}\" \
             credentials={MANAGER_PW} searchbase=\"{SUFFIX}\" type={kind} interval=00:00:00:02 retry=\"1 +\"\n"
        );
        let conf = dir.path().join("slapd.conf");
        std::fs::write(&conf, servers::slapd_config(dir.path(), &[], &syncrepl)).expect("write slapd.conf");
        let mut consumer = Self { dir, conf, child: None, addr: SocketAddr::from(([127, 0, 0, 1], 0)) };
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
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
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
fn snapshot(addr: SocketAddr) -> BTreeMap<String, Vec<String>> {
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
pub(crate) fn difference(provider: SocketAddr, consumer: SocketAddr) -> Option<String> {
    let (ours, theirs) = (snapshot(provider), snapshot(consumer));
    let (csn_ours, csn_theirs) = (context_csn(provider), context_csn(consumer));
    let mut problems = Vec::new();
    if ours.is_empty() {
        problems.push("the provider returned nothing".to_string());
    }
    for (dn, lines) in &ours {
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

fn converge(provider: &Server, consumer: &Consumer, step: &str) -> Duration {
    let started = Instant::now();
    let mut last = None;
    while started.elapsed() < CONVERGE_TIMEOUT {
        match difference(provider.addr, consumer.addr) {
            None => return started.elapsed(),
            Some(diff) => last = Some(diff),
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!(
        "{step}: the consumer did not converge in {CONVERGE_TIMEOUT:?}: {last:?}\nconsumer log:\n{}",
        consumer.log_tail()
    );
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

fn provider() -> Server {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ldif = dir.path().join("initial.ldif");
    std::fs::write(&ldif, initial_ldif()).expect("write LDIF");
    servers::start_ferrodir_with(Some(&ldif), "server_id = 1\n")
}

#[test]
fn slapd_consumer_refresh_only() {
    let provider = provider();
    let mut consumer = Consumer::new(provider.addr, "refreshOnly");
    let initial = converge(&provider, &consumer, "initial load");
    eprintln!("refreshOnly: initial load of {} entries converged in {initial:?}", PEOPLE + 4);
    ldapmodify(provider.addr, &changes(0));
    converge(&provider, &consumer, "add, modify, Modify DN, delete");
    // Stopped, changes with deletes, restarted: the present phase deletes what is gone.
    consumer.stop();
    ldapmodify(provider.addr, &changes(1));
    ldapmodify(provider.addr, &format!("dn: uid=user100,ou=people,{SUFFIX}\nchangetype: delete\n\n"));
    consumer.start();
    converge(&provider, &consumer, "after the consumer's restart");
}

#[test]
fn slapd_consumer_refresh_and_persist() {
    let provider = provider();
    let mut consumer = Consumer::new(provider.addr, "refreshAndPersist");
    converge(&provider, &consumer, "initial load");
    for n in 2..4 {
        ldapmodify(provider.addr, &changes(n));
        let took = converge(&provider, &consumer, "add, modify, Modify DN, delete while persisting");
        eprintln!("refreshAndPersist: round {n} converged in {took:?}");
    }
    // Restarted after changes with deletes: the refresh's present phase (ended by the
    // refreshPresent message) deletes what is gone.
    consumer.stop();
    ldapmodify(provider.addr, &changes(4));
    consumer.start();
    converge(&provider, &consumer, "after the persisting consumer's restart");
}
