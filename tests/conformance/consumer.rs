//! A ferrodir consumer (`[[replication]]`, refreshAndPersist) of an unmodified slapd 2.5
//! provider (back-mdb, syncprov with a session log): the initial load, then adds,
//! modifies, Modify DNs (rename and move) and deletes on slapd while persisting; after
//! each step both sides are compared with ldapsearch `*` `+` (DNs, every value, entryUUID,
//! entryCSN) and contextCSN. Then a second consumer starts from nothing after more changes,
//! deletes among them.

use std::time::{Duration, Instant};

use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};
use crate::syncrepl::{changes, difference, initial_ldif, ldapmodify, PEOPLE};

const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);

fn converge(provider: &Server, consumer: &Server, step: &str) -> Duration {
    let started = Instant::now();
    let mut last = None;
    while started.elapsed() < CONVERGE_TIMEOUT {
        match difference(provider.addr, consumer.addr) {
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
    std::fs::write(&ldif, initial_ldif()).expect("write LDIF");
    let password = dir.path().join("password");
    std::fs::write(&password, MANAGER_PW).expect("write password");
    let provider = servers::start_slapd_provider(&ldif);
    let started = Instant::now();
    let consumer = servers::start_ferrodir_with(None, &consumer_config(&provider, &password));
    converge(&provider, &consumer, "initial load");
    eprintln!(
        "slapd -> ferrodir: initial refresh of {} entries converged in {:?}",
        PEOPLE + 4,
        started.elapsed()
    );
    for n in 0..2 {
        ldapmodify(provider.addr, &changes(n));
        let took = converge(&provider, &consumer, "add, modify, Modify DN, delete while persisting");
        eprintln!("slapd -> ferrodir: round {n} converged in {took:?}");
    }
    // A second consumer from nothing, after more changes and deletes.
    drop(consumer);
    ldapmodify(provider.addr, &changes(2));
    let consumer = servers::start_ferrodir_with(None, &consumer_config(&provider, &password));
    converge(&provider, &consumer, "a fresh consumer after more changes");
}
