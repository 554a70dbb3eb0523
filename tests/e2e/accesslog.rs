//! The access log of the real binary: 389-ds's `logconv` (Debian's 389-ds-base) reads the
//! text format and counts the binds, searches and unindexed searches this test sent; the
//! JSON format is one object per line; no password appears in either, not from a simple
//! bind, SASL PLAIN, Password Modify nor a userPassword assertion in a filter; SIGUSR1
//! reopens the file after it was moved away (log rotation).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{tool, Server, ADMIN_DN, ADMIN_PW, BASE, TEST_CONFIG};

const SECRET: &str = "hunter2-never-logged";

fn start(dir: &Path, format: &str) -> Server {
    let config = TEST_CONFIG.replacen(
        "[log]",
        &format!("[access_log]\npath = \"{}\"\nformat = \"{format}\"\n[log]", dir.join("access").display()),
        1,
    );
    Server::start_with_config(&config)
}

/// Waits until the log holds `count` lines matching `pattern` (the writer is asynchronous).
fn wait_for_lines(path: &Path, pattern: &str, count: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.matches(pattern).count() >= count || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run_load(server: &Server) {
    let url = server.url();
    for _ in 0..3 {
        let (code, _, err) = tool("ldapwhoami", &["-x", "-H", &url, "-D", ADMIN_DN, "-w", ADMIN_PW], None);
        assert_eq!(code, 0, "{err}");
    }
    // Two indexed searches (uid is indexed), two unindexed ones (description is not), one
    // with a password assertion in its filter.
    for filter in [
        "(uid=alice)",
        "(uid=bob)",
        "(description=nothing)",
        &format!("(|(description=x)(userPassword={SECRET}))"),
    ] {
        let (code, _, err) = tool("ldapsearch", &["-x", "-H", &url, "-b", BASE, filter, "cn"], None);
        assert_eq!(code, 0, "{filter}: {err}");
    }
    // A paged search of two entries in pages of one: two SearchResultDone, notes=P each.
    let (code, _, err) = tool(
        "ldapsearch",
        &["-x", "-H", &url, "-b", BASE, "-E", "pr=1/noprompt", "(|(uid=alice)(uid=bob))", "cn"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    // A failed bind with the secret as its password, and a Password Modify carrying it.
    let (code, _, _) = tool("ldapwhoami", &["-x", "-H", &url, "-D", ADMIN_DN, "-w", SECRET], None);
    assert_eq!(code, 49);
    let bob = "uid=bob,ou=people,dc=example,dc=com";
    let (code, _, err) =
        tool("ldappasswd", &["-x", "-H", &url, "-D", ADMIN_DN, "-w", ADMIN_PW, "-s", SECRET, bob], None);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn logconv_reads_the_text_log_and_counts_what_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "text");
    run_load(&server);
    let path = dir.path().join("access");
    // 3 + 4 + 1 + 1 + 1 connections, each closed.
    let text = wait_for_lines(&path, " closed - ", 10);
    assert!(!text.contains(SECRET), "a password reached the access log:\n{text}");
    assert!(text.contains("userPassword=***"), "{text}");
    assert!(text.contains(" RESULT err=49 tag=97 "), "{text}");
    assert!(text.contains(" EXT oid=\"1.3.6.1.4.1.4203.1.11.1\""), "{text}");
    let output = Command::new("logconv").arg(&path).output().expect("logconv (Debian package 389-ds-base)");
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{report}{}", String::from_utf8_lossy(&output.stderr));
    let count = |label: &str| -> u64 {
        report
            .lines()
            .find_map(|l| l.strip_prefix(label))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {label:?} in logconv's report:\n{report}"))
    };
    // ldapsearch binds anonymously first; ldappasswd binds as the admin.
    assert_eq!(count("Binds:"), 3 + 4 + 1 + 1 + 1, "{report}");
    assert_eq!(count("Searches:"), 4 + 2, "{report}");
    assert_eq!(count("Unindexed Searches:"), 2, "{report}");
    assert_eq!(count("Paged Searches:"), 2, "{report}");
    assert_eq!(count("Total Connections:"), 10, "{report}");
    // The timings, written with microseconds (389-ds writes nanoseconds), are read: the
    // binds alone take milliseconds.
    let average = |label: &str| -> f64 {
        report
            .lines()
            .find_map(|l| l.strip_prefix(label))
            .and_then(|rest| rest.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {label:?} in logconv's report:\n{report}"))
    };
    assert!(average("Average etime (elapsed time):") > 0.0, "{report}");
    assert!(average("Average optime (op time):") > 0.0, "{report}");
}

#[test]
fn the_json_log_is_one_object_a_line_and_reopens_on_sigusr1() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "json");
    run_load(&server);
    let path = dir.path().join("access");
    let text = wait_for_lines(&path, "\"event\":\"closed\"", 9);
    assert!(!text.contains(SECRET), "a password reached the access log:\n{text}");
    let checked = Command::new("/usr/bin/python3")
        .args(["-c", "import json,sys\nn=0\nfor line in open(sys.argv[1]):\n    o=json.loads(line); assert 'conn' in o and 'event' in o; n+=1\nprint(n)"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(checked.status.success(), "not JSON lines: {}", String::from_utf8_lossy(&checked.stderr));
    assert!(text.contains("\"event\":\"SRCH\"") && text.contains("\"nentries\":1"), "{text}");

    // Rotation: move the file away, SIGUSR1, and the next lines go to a new file there.
    std::fs::rename(&path, dir.path().join("access.1")).unwrap();
    Command::new("kill").args(["-USR1", &server.pid().unwrap().to_string()]).status().unwrap();
    // The reopen creates the file anew at once: its existence says the signal was handled.
    let reopened = crate::harness::wait_until(Instant::now() + Duration::from_secs(10), || path.exists());
    assert!(reopened, "SIGUSR1 did not reopen the access log at {}", path.display());
    let (code, _, err) = tool("ldapwhoami", &["-x", "-H", &server.url()], None);
    assert_eq!(code, 0, "{err}");
    let fresh = wait_for_lines(&path, "\"event\":\"closed\"", 1);
    assert!(fresh.contains("\"event\":\"BIND\""), "nothing written after the reopen: {fresh:?}");
}

/// The rotated files of `base` in `dir` (`access.YYYYMMDD-HHMMSS[-N][.gz]`).
fn rotated_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("access.2")));
    files.sort();
    files
}

#[test]
fn the_access_log_rotates_by_size_compresses_and_keeps_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let config = TEST_CONFIG.replacen(
        "[log]",
        &format!(
            "[access_log]\npath = \"{}\"\nrotate_bytes = 3000\nkeep_files = 2\ngzip = true\n[log]",
            dir.path().join("access").display()
        ),
        1,
    );
    let server = Server::start_with_config(&config);
    let mut client = crate::harness::bound(&server, ADMIN_DN, ADMIN_PW);
    // About 200 bytes of log per search: several rotations' worth.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut searches = 0;
    loop {
        for _ in 0..20 {
            client.search(BASE, ldap3::Scope::Subtree, "(uid=alice)", vec!["cn"]).unwrap().success().unwrap();
            searches += 1;
        }
        let files = rotated_files(dir.path());
        let gz = files.iter().filter(|p| p.extension().is_some_and(|e| e == "gz")).count();
        if searches >= 200 && gz == 2 && files.len() == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "after {searches} searches: {files:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Each rotated file is a whole gzip file of the log's lines, about rotate_bytes long.
    for file in rotated_files(dir.path()) {
        let mut text = String::new();
        let gz = std::fs::File::open(&file).unwrap();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz), &mut text).unwrap();
        assert!(
            text.len() >= 3000 && text.len() < 3000 + 64 * 1024,
            "{}: {} bytes",
            file.display(),
            text.len()
        );
        assert!(text.lines().all(|l| l.starts_with('[')), "whole lines only: {text}");
        assert!(text.contains(" SRCH base="), "{text}");
    }
    // The live file goes on.
    let live = std::fs::read_to_string(dir.path().join("access")).unwrap_or_default();
    assert!(live.len() < 3000 + 64 * 1024, "the live file was rotated: {} bytes", live.len());
}

#[test]
fn the_access_log_rotates_by_age_and_refuses_to_rotate_standard_output() {
    let dir = tempfile::tempdir().unwrap();
    let config = TEST_CONFIG.replacen(
        "[log]",
        &format!("[access_log]\npath = \"{}\"\nrotate_age_s = 1\n[log]", dir.path().join("access").display()),
        1,
    );
    let server = Server::start_with_config(&config);
    let mut client = crate::harness::bound(&server, ADMIN_DN, ADMIN_PW);
    let deadline = Instant::now() + Duration::from_secs(20);
    while rotated_files(dir.path()).is_empty() {
        client.search(BASE, ldap3::Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap();
        assert!(Instant::now() < deadline, "no rotation by age");
        std::thread::sleep(Duration::from_millis(200));
    }
    let rotated = rotated_files(dir.path());
    assert!(rotated.iter().all(|p| p.extension().is_none_or(|e| e != "gz")), "gzip is off: {rotated:?}");
    // Rotation of standard output is refused at start, naming the keys.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, TEST_CONFIG.replacen("[log]", "[access_log]\nrotate_bytes = 1000\n[log]", 1))
        .unwrap();
    let output = Command::new(crate::harness::binary())
        .args(["serve", "--config"])
        .arg(&bad)
        .arg("--data-dir")
        .arg(dir.path().join("data2"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("rotate_bytes and rotate_age_s rotate a file"));
}
