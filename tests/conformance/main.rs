//! Differential conformance test: ferrodir against OpenLDAP slapd 2.5 (back-mdb), loaded
//! with the same data, must give the same answers except where slapd departs from the RFCs.
//! See docs/CONFORMANCE.md for what is compared, what is ignored and why.
//!
//! Layout:
//! - `servers`: start slapd (slapadd + slapd -d 0) and ferrodir (import + serve) on loopback.
//! - `ber`, `filter`, `client`: our own small LDAP client, so that every byte sent is ours.
//! - `catalogue`, `ops_read`, `ops_write`: the operations, numbered per group.
//! - `compare`, `allow`, `differential`: normalising answers, the allowlist, the report.
//! - `acl`: access rules written both ways, compared over a few hundred operations.
//! - `monitor`: cn=Monitor against slapd's back-monitor (DNs, types, the exporter's queries).
//! - `sort`: server-side sort and VLV against slapd with its sssvlv overlay.
//! - `ldif`, `scripts`: OpenLDAP's test003/004/005/026 replayed against their .out files.

mod acl;
mod aliases;
mod allow;
mod ber;
mod cancel;
mod catalogue;
mod client;
mod compare;
mod consumer;
mod differential;
mod dynlist;
mod edges;
mod filter;
mod ldif;
mod mesh;
mod monitor;
mod ops_read;
mod ops_write;
mod ppolicy;
mod proxy_authz;
mod refint;
mod scram;
mod scripts;
mod servers;
mod sort;
mod syncrepl;
mod transactions;
mod unique;
mod write_controls;

use scripts::Replay;
use servers::Server;

/// Replays one OpenLDAP script on fresh instances of both servers and checks every output
/// file: slapd byte for byte (after ldif-filter, case-insensitively, as `diff -i` does),
/// ferrodir after normalisation.
fn check_script(load: Option<&str>, replay: fn(&Server) -> Replay) {
    let ldif = load.map(servers::openldap_data);
    let slapd = servers::start_slapd(ldif.as_deref());
    let ferrodir = servers::start_ferrodir(ldif.as_deref());
    let (reference, ours) = (replay(&slapd), replay(&ferrodir));
    save_outputs("slapd", &reference);
    save_outputs("ferrodir", &ours);
    let mut failures = Vec::new();
    for problem in &reference.problems {
        failures.push(format!("slapd (replay is wrong?): {problem}"));
    }
    for problem in &ours.problems {
        failures.push(format!("ferrodir: {problem}"));
    }
    for (file, slapd_output) in &reference.outputs {
        let expected = match file.strip_prefix('(') {
            Some(_) => String::new(),
            None => std::fs::read_to_string(servers::openldap_data(file)).expect("read .out file"),
        };
        let ferrodir_output = ours.outputs.get(file).cloned().unwrap_or_default();
        let slapd_exact = scripts::exact_difference(&expected, slapd_output);
        if let Some(diff) = &slapd_exact {
            failures.push(format!("slapd does not reproduce {file} (replay is wrong): {diff}"));
        }
        let allowed = allow::script_allowed(file);
        if !allowed.is_empty() && scripts::normalized_difference(&expected, &ferrodir_output, &[]).is_none() {
            failures.push(format!(
                "{file}: allowlisted entries {allowed:?} no longer differ: remove them from allow.rs"
            ));
        }
        if let Some(diff) = scripts::normalized_difference(&expected, &ferrodir_output, &allowed) {
            if slapd_exact.is_some() {
                failures.push(format!("ferrodir does not reproduce {file}: {diff}"));
                continue;
            }
            // slapd printed the file exactly, so its searches split it: compare search by
            // search, which says which search went wrong.
            let searches =
                |r: &Replay| r.searches.iter().filter(|s| s.0 == *file).cloned().collect::<Vec<_>>();
            for ((_, filter, theirs), (_, _, mine)) in searches(&reference).iter().zip(searches(&ours)) {
                if let Some(diff) = scripts::normalized_difference(theirs, &mine, &allowed) {
                    failures.push(format!("ferrodir does not reproduce {file}, search {filter}: {diff}"));
                }
            }
        } else if let Some(diff) = scripts::exact_difference(&expected, &ferrodir_output) {
            println!(
                "note: ferrodir reproduces {file} only after sorting (RFC 4511 §4.5.2 allows it): {diff}"
            );
        }
    }
    for note in slapd.notes.iter().chain(&ferrodir.notes) {
        println!("note: {note}");
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Keeps each replay's output for a look after a failure:
/// `target/tmp/conformance-scripts/{slapd,ferrodir}/FILE`.
fn save_outputs(server: &str, replay: &Replay) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("conformance-scripts").join(server);
    let _ = std::fs::create_dir_all(&dir);
    for (file, output) in &replay.outputs {
        let _ = std::fs::write(dir.join(file), output);
    }
}

#[test]
fn openldap_test003_search() {
    check_script(Some("test-ordered.ldif"), scripts::test003_search);
}

#[test]
fn openldap_test004_modify() {
    check_script(Some("test-ordered.ldif"), scripts::test004_modify);
}

#[test]
fn openldap_test005_modrdn() {
    check_script(Some("test-ordered.ldif"), scripts::test005_modrdn);
}

#[test]
fn openldap_test026_dn() {
    check_script(None, scripts::test026_dn);
}
