//! Disk footprint under add/delete churn (issue #14): repeated cycles of adding and deleting
//! the same number of entries leave the shard files about as large as after the first
//! cycle, and `ferrodir compact` on the stopped server gives the free space back with the
//! data unchanged (export before and after equal, `ferrodir verify` clean).
//!
//! Before the fix, every idle worker's replica of the other shards kept the redb read
//! transaction of its last read, so no page freed since could be reused: each cycle added
//! about its own size to the files. Later, every delete stored a syncrepl delete-log record
//! on a server no consumer had ever synced from (bounded, but 100,000 per shard): the files
//! grew by the records until the bound.

use std::process::Command;

use crate::harness::{binary, output_text, tool, Server, ADMIN_DN, ADMIN_PW};

/// Entries added and then deleted per cycle.
const CHURN: usize = 2000;
const CYCLES: usize = 5;
/// Clients at once (each an ldapadd or ldapdelete of its share): writes share commits, so
/// the test stays fast, and connections land on every worker.
const CLIENTS: usize = 8;
/// The most file bytes one live churn entry may take at the peak of a cycle (measured: about
/// 2 KB with the fix, over 40 KB without it).
const PEAK_BYTES_PER_ENTRY_MAX: u64 = 6 * 1024;
/// The most the files may grow from the first cycle to the last, per entry churned in a
/// cycle. Measured: no growth at all (9,003,008 bytes after every cycle); over 40 KB per
/// entry per cycle with pinned pages; about 140 bytes per delete per cycle (10.1 MB after
/// five cycles) while every delete went to the syncrepl delete log with no consumer ever
/// connected, which is what this bound catches (`shard::deletelog` is kept only once a
/// sync search came).
const GROWTH_BYTES_PER_ENTRY_MAX: u64 = 256;

/// Four shards (four workers): one client connection leaves three workers idle, whose
/// replicas were the ones that pinned old versions of the files.
const CONFIG: &str = r#"
shards = 4
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = true
index = ["objectClass eq", "cn eq,sub"]
[log]
level = "warn"
"#;

fn ldif(cycle: usize) -> String {
    (0..CHURN)
        .map(|i| {
            format!(
                "dn: cn=churn{i:05},ou=people,dc=example,dc=com\nobjectClass: person\ncn: churn{i:05}\n\
                 sn: cycle {cycle}\ndescription: {}\n\n",
                "padding for a realistic entry size ".repeat(8)
            )
        })
        .collect()
}

fn dns() -> String {
    (0..CHURN).map(|i| format!("cn=churn{i:05},ou=people,dc=example,dc=com\n")).collect()
}

/// Runs `name` (ldapadd or ldapdelete) over `input` split into CLIENTS parts at once; the
/// parts are records separated by blank lines (ldapadd) or lines (ldapdelete).
fn ldap(server: &Server, name: &str, input: &str) {
    let url = server.url();
    let records: Vec<&str> = if name == "ldapadd" {
        input.split("\n\n").filter(|r| !r.trim().is_empty()).collect()
    } else {
        input.lines().collect()
    };
    let joiner = if name == "ldapadd" { "\n\n" } else { "\n" };
    let parts: Vec<String> = (0..CLIENTS)
        .map(|c| records.iter().skip(c).step_by(CLIENTS).copied().collect::<Vec<_>>().join(joiner) + joiner)
        .collect();
    std::thread::scope(|scope| {
        for part in &parts {
            let url = &url;
            scope.spawn(move || {
                let (code, _, err) =
                    tool(name, &["-x", "-H", url, "-D", ADMIN_DN, "-w", ADMIN_PW], Some(part));
                assert_eq!(code, 0, "{name}: {err}");
            });
        }
    });
}

/// Bytes of the data directory's redb files (their lengths: what the file claims).
fn files_bytes(server: &Server) -> u64 {
    std::fs::read_dir(&server.data_dir)
        .expect("read data dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".redb"))
        .map(|e| e.metadata().expect("metadata").len())
        .sum()
}

fn compact(server: &Server) -> (bool, String) {
    let output = Command::new(binary())
        .arg("compact")
        .arg("--config")
        .arg(server.config_path())
        .arg("--data-dir")
        .arg(&server.data_dir)
        .output()
        .expect("run compact");
    (output.status.success(), output_text(&output))
}

#[test]
fn churn_stays_flat_and_offline_compaction_shrinks_with_data_intact() {
    let mut server = Server::start_with_config(CONFIG);
    let start = files_bytes(&server);
    let mut sizes = Vec::new();
    for cycle in 0..CYCLES {
        ldap(&server, "ldapadd", &ldif(cycle));
        ldap(&server, "ldapdelete", &dns());
        sizes.push(files_bytes(&server));
    }
    eprintln!("footprint: {start} bytes at start, {sizes:?} after each cycle");
    // With freed pages pinned, every cycle grew the files by tens of KB per entry churned;
    // reused, the files hold the peak of CHURN live entries (about 2 KB each with their
    // index keys) with room to spare, and later cycles add at most a little (redb grows a
    // file by regions, so small files move in steps).
    let bound = start + (CHURN as u64) * PEAK_BYTES_PER_ENTRY_MAX;
    let (first, last) = (sizes[0], sizes[CYCLES - 1]);
    assert!(sizes.iter().all(|&s| s <= bound), "churn grew the files past {bound} bytes: {sizes:?}");
    let growth = last.saturating_sub(first);
    assert!(
        growth <= (CHURN as u64) * GROWTH_BYTES_PER_ENTRY_MAX,
        "the files grew under repeated churn: {sizes:?} bytes after each cycle"
    );

    // A serving server's files cannot be compacted.
    let (ok, text) = compact(&server);
    assert!(!ok, "compact ran while the server served: {text}");
    assert!(text.contains("stop it"), "{text}");

    // One more big add, then its delete: the files grew to hold the peak, and keep that
    // length (redb gives back space only from the end) until compacted.
    ldap(&server, "ldapadd", &ldif(CYCLES).replace("cn=churn", "cn=peak").replace("cn: churn", "cn: peak"));
    ldap(&server, "ldapadd", &ldif(CYCLES));
    ldap(&server, "ldapdelete", &dns().replace("cn=churn", "cn=peak"));
    ldap(&server, "ldapdelete", &dns());
    server.stop();
    let before = files_bytes(&server);
    let exported = server.export();
    let (ok, text) = compact(&server);
    assert!(ok, "compact failed: {text}");
    assert!(text.contains("shard-000.redb") && text.contains("compacted"), "{text}");
    let after = files_bytes(&server);
    assert!(after < before, "compaction did not shrink the files: {before} -> {after} bytes\n{text}");
    assert_eq!(server.export(), exported, "the data changed in compaction");
    let (clean, report) = server.verify();
    assert!(clean, "verify after compaction: {report}");
    // No consumer ever synced from this server: its deletes left no delete-log records.
    assert!(report.contains("(0 delete-log records)"), "{report}");

    // And it serves as before.
    server.restart();
    let url = server.url();
    let (code, out, err) = tool(
        "ldapsearch",
        &["-x", "-LLL", "-H", &url, "-b", "ou=people,dc=example,dc=com", "-s", "one", "1.1"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("churn") && !out.contains("peak"), "{out}");
}
