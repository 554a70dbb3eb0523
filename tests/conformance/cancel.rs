//! Cancel (RFC 3909) against slapd 2.5 (back-mdb with syncprov): ldapsearch's `-e '!cancel'`
//! sends a Cancel right after its search, a refreshAndPersist search that would never end
//! by itself. Both servers must answer the search canceled and the Cancel success, which
//! ldapsearch reports as "cancel got 0", and exit the same way.

use std::process::Command;

use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};

/// ldapsearch's exit code and its report of the Cancel's answer.
fn cancelled_search(server: &Server) -> (i32, String) {
    let url = format!("ldap://{}", server.addr);
    let output = Command::new("ldapsearch")
        .args(["-x", "-H", &url, "-D", MANAGER_DN, "-w", MANAGER_PW, "-b", SUFFIX])
        .args(["-E", "sync=rp", "-e", "!cancel", "1.1"])
        .output()
        .expect("run ldapsearch (ldap-utils)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report = stderr.lines().find(|l| l.contains("cancel got")).unwrap_or("no cancel report").to_string();
    (output.status.code().unwrap_or(-1), report)
}

#[test]
fn a_cancelled_persist_search_ends_as_with_slapd() {
    let ldif = servers::openldap_data("test-ordered.ldif");
    let slapd = servers::start_slapd_provider(&ldif);
    let ferrodir = servers::start_ferrodir(Some(&ldif));
    let theirs = cancelled_search(&slapd);
    assert!(theirs.1.contains("cancel got 0"), "slapd: {theirs:?}");
    assert_eq!(cancelled_search(&ferrodir), theirs, "slapd's on the right");
}
