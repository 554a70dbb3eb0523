//! A ferrodir consumer (`[[replication]]`, refreshAndPersist) of an unmodified slapd 2.5
//! provider (back-mdb, syncprov with a session log): the initial load, then adds,
//! modifies, Modify DNs (rename and move) and deletes on slapd while persisting; after
//! each step both sides are compared with ldapsearch `*` `+` (DNs, every value, entryUUID,
//! entryCSN) and contextCSN. Then the consumer is stopped, slapd changes (deletes among
//! them), and the consumer restarts from its committed cookie: slapd answers from its
//! session log with a delete phase (syncIdSet), which must leave both sides equal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};
use crate::syncrepl::{changes, difference, initial_ldif_of, ldapmodify, snapshot};

const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);
/// Users of the initial load: the slapd interop test's data, at a size CI can wait for.
const PEOPLE: usize = 1_000;

/// A ferrodir consumer whose data directory outlives a stop and a start.
struct Replica {
    dir: tempfile::TempDir,
    config: PathBuf,
    child: Option<Child>,
    addr: SocketAddr,
}

impl Replica {
    fn new(extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let config = dir.path().join("ferrodir.toml");
        std::fs::write(&config, servers::ferrodir_config(true, extra)).expect("write config");
        let addr = SocketAddr::from(([127, 0, 0, 1], servers::free_port()));
        let mut replica = Self { dir, config, child: None, addr };
        replica.start();
        replica
    }

    fn start(&mut self) {
        let child = servers::spawn_ferrodir(
            &self.config,
            &self.dir.path().join("data"),
            self.addr,
            &self.dir.path().join("ferrodir.log"),
        );
        self.child = Some(child.expect("the ferrodir consumer did not start"));
    }

    /// SIGTERM, as an operator stops it.
    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            servers::terminate(child, Duration::from_secs(20));
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn converge(provider: &Server, consumer: &Replica, step: &str) -> Duration {
    let started = Instant::now();
    let mut last = None;
    while started.elapsed() < CONVERGE_TIMEOUT {
        match difference(&snapshot(provider.addr), provider.addr, consumer.addr) {
            None => return started.elapsed(),
            Some(diff) => last = Some(diff),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{step}: the ferrodir consumer did not converge in {CONVERGE_TIMEOUT:?}: {last:?}");
}

fn consumer_config(provider: &Server, password: &std::path::Path) -> String {
    format!(
        "[[replication]]\nrid = 1\nprovider = \"ldap://{}\"\nbind_dn = \"{MANAGER_DN}\"\n\
         password_file = \"{}\"\nsearch_base = \"{SUFFIX}\"\ntype = \"refreshAndPersist\"\nretry = \"1 +\"\n",
        provider.addr,
        password.display()
    )
}

#[test]
fn ferrodir_consumer_of_a_slapd_provider() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ldif = dir.path().join("initial.ldif");
    let initial = initial_ldif_of(PEOPLE);
    let entries = initial.matches("\ndn: ").count() + 1;
    std::fs::write(&ldif, initial).expect("write LDIF");
    let password = dir.path().join("password");
    std::fs::write(&password, MANAGER_PW).expect("write password");
    let provider = servers::start_slapd_provider(&ldif);
    let started = Instant::now();
    let mut consumer = Replica::new(&consumer_config(&provider, &password));
    converge(&provider, &consumer, "initial load");
    eprintln!("slapd -> ferrodir: initial refresh of {entries} entries converged in {:?}", started.elapsed());
    for n in 0..2 {
        ldapmodify(provider.addr, &changes(n));
        let took = converge(&provider, &consumer, "add, modify, Modify DN, delete while persisting");
        eprintln!("slapd -> ferrodir: round {n} converged in {took:?}");
    }
    // Stopped; changes, deletes among them; restarted from its cookie (a delete phase).
    consumer.stop();
    ldapmodify(provider.addr, &changes(2));
    consumer.start();
    let took = converge(&provider, &consumer, "the consumer restarted after more changes");
    eprintln!("slapd -> ferrodir: the restarted consumer converged in {took:?}");
}
