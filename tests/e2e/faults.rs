//! Faults of the storage underneath the server (docs/ARCHITECTURE.md, "Faults").
//!
//! - **Full disk** (a 4 MiB tmpfs in a private mount namespace): entries are added until one
//!   fails. It fails with unavailable (52) and a message naming the cause; later writes fail
//!   the same way where their shard is full, and a modify that fails leaves the old value
//!   served. Every acknowledged entry reads back, by base, compare and subtree search, and
//!   no failed one does; /readyz says the shards refuse writes. Once space is freed, every
//!   shard takes writes again by itself, without a restart, and the server is ready again;
//!   a restart then serves every acknowledged write, and `ferrodir verify` passes.
//! - **Low disk space** (`[limits] disk_free_min_bytes`, a 48 MiB tmpfs filled from outside
//!   to below the threshold): writes get unwillingToPerform (53) "disk space low" before the
//!   disk is full, reads go on, /readyz and the metrics say so; once the space is back
//!   writes are taken again by themselves.
//! - **Read-only filesystem** (ext4 on a loop device, mounted `errors=remount-ro`, then
//!   `remount,abort` while serving: the filesystem turns read-only as it does on an ext4
//!   error; a plain `remount,ro` is refused with EBUSY while the server holds its files open
//!   for writing). Writes fail with 52 naming the cause, reads go on, and after a restart on
//!   the repaired filesystem every acknowledged write is there.
//! - **Damaged shard file** (the server stopped; shard 1's file truncated, or bytes in the
//!   middle overwritten): the server refuses to start, exits non-zero, and names shard 1, its
//!   file, and the recovery commands; `ferrodir verify` reports the damage.
//!
//! - **Full access-log filesystem** (a 256 KiB tmpfs holding only the access log, filled by
//!   another file): every operation still succeeds, the lost lines are counted
//!   (`ferrodir_access_log_dropped_lines_total{reason="write_error"}`) and the server's log
//!   says so; once the filler is removed, new lines reach the file again and the log says
//!   that writing resumed.
//!
//! The first, second and fourth need root (mount namespaces, mounts, a loop device). CI runs as root; where
//! these are missing the tests fail, loudly, instead of skipping.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ldap3::{Mod, Scope, SearchEntry};

use crate::harness::{
    binary, connect_url, free_port, http_get, listening_address, metric_value, output_text, wait_until,
    Client, Server, ADMIN_DN, ADMIN_PW,
};

const PEOPLE: &str = "ou=people,dc=example,dc=com";

/// Four shards, reads of other shards from their snapshots (the default, so the reads of a
/// failed shard's reopened file are exercised from every worker), and no entry cache, so
/// every read goes to the storage. The write logs are the smallest allowed (64 KiB, 16
/// records): four of the default 2 MiB would not fit the full-disk test's 4 MiB, and a
/// small log checkpoints every few commits, so faults reach redb's own durable commits as
/// well as the log's appends. No free-space threshold: these tests fill the disk.
const FAULT_CONFIG: &str = r#"
shards = 4
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = true
[limits]
cache_bytes = 0
write_log_bytes = 65536
disk_free_min_bytes = 0
[log]
level = "warn"
"#;

/// A private mount namespace, held open by a sleeping process, with a filesystem mounted
/// at `mnt` that only processes entered into it (`nsenter`) see.
struct Namespace {
    holder: Child,
    mnt: PathBuf,
    dir: tempfile::TempDir,
    /// The config the server in it starts with: `FAULT_CONFIG` unless a test says otherwise,
    /// with `metrics_listen` at [`Namespace::metrics`].
    config_text: String,
    metrics: std::net::SocketAddr,
}

impl Namespace {
    /// Runs `mount_script` (which mounts something at `$MNT`) in a new mount namespace.
    fn new(mount_script: &str) -> Self {
        Self::with_config(mount_script, FAULT_CONFIG)
    }

    /// [`Namespace::new`], the server started with `config` (top-level keys first).
    fn with_config(mount_script: &str, config: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mkdir mnt");
        let script = format!("set -e; {mount_script}; echo mounted; exec sleep 3600");
        let mut holder = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .env("MNT", &mnt)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run unshare (util-linux): {e}; these tests need root"));
        let mut line = String::new();
        let stdout = holder.stdout.take().expect("stdout");
        let _ = BufReader::new(stdout).read_line(&mut line);
        if line.trim() != "mounted" {
            let output = holder.wait_with_output().expect("wait");
            panic!(
                "cannot set up the test filesystem ({mount_script}): {}\nthese tests need root: \
                 mount namespaces, mounts and loop devices (CI runs as root)",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let metrics = free_port();
        let config_text = format!("metrics_listen = \"{metrics}\"\n{config}");
        Self { holder, mnt, dir, config_text, metrics }
    }

    /// /readyz: (ready, the reason when not).
    fn readiness(&self) -> (bool, String) {
        let (code, text) = http_get(self.metrics, "/readyz");
        (code == 200, text)
    }

    /// `program` run inside the namespace.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command.args(["-t", &self.holder.id().to_string(), "-m", "--", program]);
        command
    }

    /// Runs a shell script inside the namespace; it must succeed.
    fn sh(&self, script: &str) {
        let output = self.command("sh").args(["-c", script]).env("MNT", &self.mnt).output().expect("nsenter");
        assert!(output.status.success(), "{script}: {}", String::from_utf8_lossy(&output.stderr));
    }

    fn data_dir(&self) -> PathBuf {
        self.mnt.join("data")
    }

    fn config(&self) -> PathBuf {
        let path = self.dir.path().join("ferrodir.toml");
        if !path.exists() {
            std::fs::write(&path, &self.config_text).expect("write config");
        }
        path
    }

    /// `ferrodir verify` on the namespace's data directory: (passed, output).
    fn verify(&self) -> (bool, String) {
        let output = self
            .command(binary())
            .arg("verify")
            .arg("--config")
            .arg(self.config())
            .arg("--data-dir")
            .arg(self.data_dir())
            .output()
            .expect("run verify");
        (output.status.success(), text(&output))
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

fn text(output: &Output) -> String {
    output_text(output)
}

/// The server, started inside a namespace.
struct NsServer {
    child: Option<Child>,
    url: String,
}

impl NsServer {
    fn start(ns: &Namespace) -> Self {
        Self::start_with(ns, &ns.config(), &ns.data_dir(), Stdio::inherit())
    }

    /// With another config and data directory, its log (stderr) going to `stderr`.
    fn start_with(ns: &Namespace, config: &Path, data_dir: &Path, stderr: Stdio) -> Self {
        let mut child = ns
            .command(binary())
            .arg("serve")
            .arg("--config")
            .arg(config)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start ferrodir");
        let rx = listening_address(child.stdout.take().expect("stdout"));
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            panic!("ferrodir did not start in the namespace");
        };
        Self { child: Some(child), url: format!("ldap://{addr}") }
    }

    fn admin(&self) -> Client {
        let mut conn = connect_url(&self.url);
        conn.simple_bind(ADMIN_DN, ADMIN_PW).expect("bind").success().expect("bind ok");
        conn
    }

    /// SIGTERM, then wait for the exit.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            panic!("ferrodir did not stop within 30s of SIGTERM");
        }
    }
}

impl Drop for NsServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Adds a person under ou=people; returns (result code, diagnostic message).
fn add_person(conn: &mut Client, uid: &str, description: &str) -> (u32, String) {
    let dn = format!("uid={uid},{PEOPLE}");
    let attrs = vec![
        ("objectClass", HashSet::from(["inetOrgPerson"])),
        ("uid", HashSet::from([uid])),
        ("cn", HashSet::from([uid])),
        ("sn", HashSet::from(["before"])),
        ("description", HashSet::from([description])),
    ];
    let result = conn.add(&dn, attrs).expect("add: no answer");
    (result.rc, result.text)
}

fn replace_sn(conn: &mut Client, uid: &str, sn: &str) -> (u32, String) {
    let dn = format!("uid={uid},{PEOPLE}");
    let result = conn.modify(&dn, vec![Mod::Replace("sn", HashSet::from([sn]))]).expect("modify: no answer");
    (result.rc, result.text)
}

/// A failed write must say unavailable (or other) and why, in words.
fn assert_clean_failure(what: &str, (rc, message): &(u32, String), cause: &[&str]) {
    assert!(
        *rc == 52 || *rc == 80,
        "{what}: result {rc} ({message}), expected unavailable (52) or other (80)"
    );
    assert!(
        cause.iter().any(|c| message.contains(c)),
        "{what}: the message {message:?} does not name the cause"
    );
}

/// The sn every acknowledged entry must have, by uid; failed adds are absent.
type Expected = BTreeMap<String, String>;

/// Every expected entry reads back with its sn by a base search and a compare; no other
/// `fill` entry exists (a subtree search finds exactly the expected ones); `absent` entries
/// are not found by base search or compare.
fn check_reads(conn: &mut Client, expected: &Expected, absent: &[String]) {
    for (uid, sn) in expected {
        let dn = format!("uid={uid},{PEOPLE}");
        let found = conn.search(&dn, Scope::Base, "(objectClass=*)", vec!["sn"]).expect("search");
        assert_eq!(found.1.rc, 0, "base search of acknowledged {dn}: {:?}", found.1);
        assert_eq!(found.0.len(), 1, "{dn} not returned");
        let entry = SearchEntry::construct(found.0[0].clone());
        assert_eq!(entry.attrs.get("sn"), Some(&vec![sn.clone()]), "{dn}: wrong sn served");
        let compared = conn.compare(&dn, "sn", sn.as_str()).expect("compare");
        assert_eq!(compared.0.rc, 6, "compare of {dn} sn={sn}: {:?}", compared.0);
    }
    for uid in absent {
        let dn = format!("uid={uid},{PEOPLE}");
        let found = conn.search(&dn, Scope::Base, "(objectClass=*)", vec!["sn"]).expect("search");
        assert_eq!(found.1.rc, 32, "the failed add {dn} is served: {:?}", found.0);
        let compared = conn.compare(&dn, "sn", "before").expect("compare");
        assert_eq!(compared.0.rc, 32, "compare finds the failed add {dn}");
    }
    let all = conn.search(PEOPLE, Scope::Subtree, "(uid=fill*)", vec!["uid"]).expect("search");
    assert_eq!(all.1.rc, 0, "subtree search: {:?}", all.1);
    let mut served: Vec<String> = all
        .0
        .into_iter()
        .filter_map(|e| SearchEntry::construct(e).attrs.get("uid").and_then(|v| v.first().cloned()))
        .collect();
    served.sort();
    let wanted: Vec<String> = expected.keys().cloned().collect();
    assert_eq!(served, wanted, "the subtree search serves other entries than the acknowledged ones");
}

/// Adds `fill` entries of about 6 KiB until one fails; returns the acknowledged ones and
/// the first failure's uid and result.
fn fill_until_failure(conn: &mut Client, expected: &mut Expected) -> (String, (u32, String)) {
    let padding = "x".repeat(6000);
    for i in 0..5000 {
        let uid = format!("fill{i:05}");
        let result = add_person(conn, &uid, &padding);
        if result.0 == 0 {
            expected.insert(uid, "before".into());
        } else {
            return (uid, result);
        }
    }
    panic!("5000 adds of 6 KiB into a 4 MiB filesystem, and none failed");
}

#[test]
fn full_disk_fails_writes_cleanly_and_keeps_every_acknowledged_one() {
    let ns = Namespace::new("mount -t tmpfs -o size=4m tmpfs \"$MNT\"");
    let mut server = NsServer::start(&ns);
    let mut conn = server.admin();
    let mut expected = Expected::new();
    let (first_failed, failure) = fill_until_failure(&mut conn, &mut expected);
    assert_clean_failure("the add that found the disk full", &failure, &["No space left", "os error 28"]);
    let mut absent = vec![first_failed];
    // Small adds land on every shard: some may still fit, the full shards refuse them.
    for i in 0..12 {
        let uid = format!("fill9{i:04}");
        let result = add_person(&mut conn, &uid, "small");
        match result.0 {
            0 => {
                expected.insert(uid, "before".into());
            }
            _ => {
                assert_clean_failure(
                    &format!("add {uid}"),
                    &result,
                    &["No space left", "os error 28", "writes stopped"],
                );
                absent.push(uid);
            }
        }
    }
    // Modify every acknowledged entry: where it fails, the old value stays served.
    let mut refused = 0;
    for (uid, sn) in expected.iter_mut() {
        let result = replace_sn(&mut conn, uid, "after");
        match result.0 {
            0 => *sn = "after".into(),
            _ => {
                assert_clean_failure(
                    &format!("modify {uid}"),
                    &result,
                    &["No space left", "os error 28", "writes stopped"],
                );
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "no modify failed on a full disk");
    check_reads(&mut conn, &expected, &absent);
    let (ready, why) = ns.readiness();
    assert!(!ready && why.contains("refusing writes"), "ready with full shards: {why}");

    // Space is freed: with no restart, every shard takes writes again (its next write after
    // its retry interval reopens the file and replays its write log).
    ns.sh("mount -o remount,size=64m \"$MNT\"");
    let deadline = Instant::now() + Duration::from_secs(20);
    for (uid, sn) in expected.iter_mut() {
        loop {
            let result = replace_sn(&mut conn, uid, "resumed");
            if result.0 == 0 {
                *sn = "resumed".into();
                break;
            }
            assert_clean_failure(&format!("modify {uid} once space was freed"), &result, &["resume"]);
            assert!(
                Instant::now() < deadline,
                "modify {uid} still refused 20 s after space was freed: {result:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for i in 0..12 {
        let uid = format!("fill8{i:04}");
        let result = add_person(&mut conn, &uid, "after the space came back");
        assert_eq!(result.0, 0, "add {uid} once every shard took a write again: {result:?}");
        expected.insert(uid, "before".into());
    }
    check_reads(&mut conn, &expected, &absent);
    let ready = wait_until(Instant::now() + Duration::from_secs(5), || ns.readiness().0);
    assert!(ready, "not ready once writes resumed: {:?}", ns.readiness());

    // A restart serves every acknowledged write, those before the full disk and since.
    server.stop();
    let mut server = NsServer::start(&ns);
    let mut conn = server.admin();
    check_reads(&mut conn, &expected, &absent);
    let again = add_person(&mut conn, "fill99999", "after the restart");
    assert_eq!(again.0, 0, "no writes after space was freed and the server restarted: {again:?}");
    server.stop();
    let (passed, report) = ns.verify();
    assert!(passed && report.contains("0 problems"), "verify after the full disk: {report}");
}

#[test]
fn low_disk_space_refuses_writes_before_the_disk_is_full_and_they_resume_by_themselves() {
    let config = FAULT_CONFIG.replace("disk_free_min_bytes = 0", "disk_free_min_bytes = 16777216");
    let ns = Namespace::with_config("mount -t tmpfs -o size=48m tmpfs \"$MNT\"", &config);
    let mut server = NsServer::start(&ns);
    let mut conn = server.admin();
    let mut expected = Expected::new();
    for i in 0..8 {
        let uid = format!("fill{i:05}");
        assert_eq!(add_person(&mut conn, &uid, "plenty of space").0, 0, "add {uid}");
        expected.insert(uid, "before".into());
    }
    assert!(ns.readiness().0, "not ready with space to spare: {:?}", ns.readiness());
    assert_eq!(metric_value(ns.metrics, "ferrodir_disk_space_low "), Some(0.0));
    assert_eq!(metric_value(ns.metrics, "ferrodir_disk_free_min_bytes "), Some(16777216.0));

    // Something else fills the filesystem to below the threshold, not to full.
    ns.sh("head -c 34m /dev/zero > \"$MNT/filler\"");
    // Until the monitor's next look, adds still land; then they are refused.
    let mut attempt = 0;
    let mut last = (0, String::new());
    let low = wait_until(Instant::now() + Duration::from_secs(10), || {
        attempt += 1;
        let uid = format!("fill7{attempt:04}");
        last = add_person(&mut conn, &uid, "low space");
        if last.0 == 0 {
            expected.insert(uid, "before".into());
        }
        last.0 == 53 && last.1.contains("disk space low")
    });
    assert!(low, "writes still taken below disk_free_min_bytes: {last:?}");
    let absent = vec![format!("fill7{attempt:04}")];
    let (ready, why) = ns.readiness();
    assert!(!ready && why.contains("disk space low"), "readiness below the threshold: {why}");
    assert_eq!(metric_value(ns.metrics, "ferrodir_disk_space_low "), Some(1.0));
    let free = metric_value(ns.metrics, "ferrodir_disk_free_bytes ").expect("the free space metric");
    assert!(free > 0.0 && free < 16777216.0, "free space reported: {free}");
    // Every kind of write is refused the same way; reads go on.
    let modify = replace_sn(&mut conn, "fill00000", "refused");
    assert_eq!(modify.0, 53, "modify below the threshold: {modify:?}");
    let delete = conn.delete(&format!("uid=fill00001,{PEOPLE}")).expect("delete: no answer");
    assert_eq!(delete.rc, 53, "delete below the threshold: {delete:?}");
    check_reads(&mut conn, &expected, &absent);

    // The space comes back: writes are taken again, with no restart.
    ns.sh("rm \"$MNT/filler\"");
    let resumed = wait_until(Instant::now() + Duration::from_secs(10), || {
        replace_sn(&mut conn, "fill00000", "after").0 == 0
    });
    assert!(
        resumed,
        "writes still refused once space was back: {:?}",
        replace_sn(&mut conn, "fill00000", "after")
    );
    expected.insert("fill00000".into(), "after".into());
    assert_eq!(add_person(&mut conn, "fill00100", "space is back").0, 0);
    expected.insert("fill00100".into(), "before".into());
    check_reads(&mut conn, &expected, &absent);
    let ready = wait_until(Instant::now() + Duration::from_secs(5), || ns.readiness().0);
    assert!(ready, "not ready once space was back: {:?}", ns.readiness());
    assert_eq!(metric_value(ns.metrics, "ferrodir_disk_space_low "), Some(0.0));
    server.stop();
    let (passed, report) = ns.verify();
    assert!(passed && report.contains("0 problems"), "verify after low space: {report}");
}

#[test]
fn read_only_filesystem_fails_writes_and_reads_go_on() {
    let image_dir = tempfile::tempdir().expect("tempdir");
    let image = image_dir.path().join("fs.img");
    std::fs::File::create(&image).and_then(|f| f.set_len(64 << 20)).expect("image");
    let made = Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image).output();
    let made = made.unwrap_or_else(|e| panic!("cannot run mkfs.ext4 (e2fsprogs): {e}"));
    assert!(made.status.success(), "mkfs.ext4: {}", text(&made));
    let ns = Namespace::new(&format!("mount -o loop,errors=remount-ro '{}' \"$MNT\"", image.display()));
    let mut server = NsServer::start(&ns);
    let mut conn = server.admin();
    let mut expected = Expected::new();
    for i in 0..40 {
        let uid = format!("fill{i:05}");
        assert_eq!(add_person(&mut conn, &uid, "on a good disk").0, 0, "add {uid}");
        expected.insert(uid, "before".into());
    }
    for uid in ["fill00003", "fill00017"] {
        assert_eq!(replace_sn(&mut conn, uid, "after").0, 0);
        expected.insert(uid.into(), "after".into());
    }

    // As on an ext4 error: the filesystem turns read-only under the open files.
    ns.sh("mount -o remount,abort \"$MNT\" && ! touch \"$MNT/probe\" 2>/dev/null");
    let cause = ["Read-only file system", "os error 30", "writes stopped"];
    let mut absent = Vec::new();
    for i in 0..8 {
        let uid = format!("fill9{i:04}");
        assert_clean_failure(&format!("add {uid}"), &add_person(&mut conn, &uid, "refused"), &cause);
        absent.push(uid);
    }
    for uid in ["fill00001", "fill00002", "fill00017", "fill00030"] {
        assert_clean_failure(&format!("modify {uid}"), &replace_sn(&mut conn, uid, "refused"), &cause);
    }
    check_reads(&mut conn, &expected, &absent);
    server.stop();

    // A restart on the repaired filesystem: the same image, unmounted (never mounted twice)
    // and mounted again.
    ns.sh("umount \"$MNT\"");
    drop(ns);
    let again = Namespace::new(&format!("mount -o loop '{}' \"$MNT\"", image.display()));
    let mut server = NsServer::start(&again);
    let mut conn = server.admin();
    check_reads(&mut conn, &expected, &absent);
    server.stop();
    let (passed, report) = again.verify();
    assert!(passed && report.contains("0 problems"), "verify after the read-only fault: {report}");
}

/// A stopped server's data directory with entries on every shard, each carrying `MARK`.
fn stopped_with_data() -> Server {
    let mut server = Server::start_with_config(FAULT_CONFIG);
    let mut conn = connect_url(&server.url());
    conn.simple_bind(ADMIN_DN, ADMIN_PW).expect("bind").success().expect("bind ok");
    for i in 0..200 {
        let description = format!("{MARK} {i} {}", "d".repeat(200));
        let (rc, message) = add_person(&mut conn, &format!("fill{i:05}"), &description);
        assert_eq!(rc, 0, "add: {message}");
    }
    drop(conn);
    server.stop();
    server
}

const MARK: &str = "FAULT-TEST-MARK";

/// Starts `ferrodir serve` on a damaged directory: it must exit, non-zero, within the limit.
fn refused_start(server: &Server) -> String {
    let mut child = Command::new(binary())
        .arg("serve")
        .arg("--config")
        .arg(server.config_path())
        .arg("--data-dir")
        .arg(&server.data_dir)
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ferrodir");
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if child.try_wait().expect("wait").is_some() {
            let output = child.wait_with_output().expect("output");
            assert!(!output.status.success(), "ferrodir started on a damaged shard: {}", text(&output));
            return text(&output);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("ferrodir kept running on a damaged shard");
}

/// The refusal names shard 1, its file, and every recovery command; verify reports it.
fn assert_refused_naming_shard_1(server: &Server) {
    let refusal = refused_start(server);
    for needle in ["shard 1", "shard-001.redb", "ferrodir verify", "ferrodir export", "ferrodir import"] {
        assert!(refusal.contains(needle), "the refusal does not say {needle:?}:\n{refusal}");
    }
    let (passed, report) = server.verify();
    assert!(!passed, "verify passed a damaged shard: {report}");
    assert!(
        report.contains("shard 1") && report.contains("damaged"),
        "verify does not report the damage: {report}"
    );
    // The recovery's export saves the other shards' entries and says what it left out.
    let output = Command::new(binary())
        .arg("export")
        .arg("--config")
        .arg(server.config_path())
        .arg("--data-dir")
        .arg(&server.data_dir)
        .output()
        .expect("run export");
    let ldif = String::from_utf8_lossy(&output.stdout);
    let saved = ldif.matches("\ndn: uid=fill").count();
    assert!(saved > 0 && saved < 200, "export saved {saved} of the 200 entries, 3 shards' worth expected");
    let summary = String::from_utf8_lossy(&output.stderr);
    assert!(
        summary.contains("left out, damaged: shard 1"),
        "export does not say what it left out: {summary}"
    );
}

fn shard_1_file(server: &Server) -> PathBuf {
    server.data_dir.join("shard-001.redb")
}

#[test]
fn truncated_shard_file_refuses_to_start() {
    let server = stopped_with_data();
    let path = shard_1_file(&server);
    let len = std::fs::metadata(&path).expect("shard 1 file").len();
    std::fs::OpenOptions::new().write(true).open(&path).and_then(|f| f.set_len(len / 2)).expect("truncate");
    assert_refused_naming_shard_1(&server);
}

#[test]
fn overwritten_bytes_in_a_shard_file_refuse_to_start() {
    let server = stopped_with_data();
    let path = shard_1_file(&server);
    let damaged = overwrite_marks(&path);
    assert!(damaged > 0, "no entry of shard 1 found in its file");
    assert_refused_naming_shard_1(&server);
}

#[test]
fn missing_shard_file_refuses_to_start() {
    let server = stopped_with_data();
    std::fs::remove_file(shard_1_file(&server)).expect("remove");
    assert_refused_naming_shard_1(&server);
}

/// Overwrites every copy of `MARK` in the file, in the middle of live entry records (and of
/// stale copies of them): bytes a page checksum covers. Returns how many.
fn overwrite_marks(path: &Path) -> usize {
    let mut bytes = std::fs::read(path).expect("read shard file");
    let mark = MARK.as_bytes();
    let mut count = 0;
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(mark.len()).position(|w| w == mark) {
        let start = at + found;
        bytes[start..start + mark.len()].copy_from_slice(b"garbage-garbage");
        count += 1;
        at = start + mark.len();
    }
    std::fs::write(path, bytes).expect("write shard file");
    count
}

/// Waits until `done` says yes, at most `within`; panics with `what` otherwise.
fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The access log on a filesystem of its own that fills up: the server keeps serving,
/// counts the lines it could not write, logs the condition, and writes again once there is
/// room, by itself.
#[test]
fn a_full_access_log_filesystem_drops_and_counts_lines_and_recovers() {
    let ns = Namespace::new("mount -t tmpfs -o size=256k tmpfs \"$MNT\"");
    let metrics = free_port();
    let access_log = ns.mnt.join("access.log");
    let config = ns.dir.path().join("access-log.toml");
    // The data directory is outside the small filesystem: only the log fills.
    let data_dir = ns.dir.path().join("data");
    let server_log = ns.dir.path().join("server.log");
    std::fs::write(
        &config,
        format!(
            "metrics_listen = \"{metrics}\"\n{}\n[access_log]\nenabled = true\npath = \"{}\"\n",
            crate::harness::TEST_CONFIG,
            access_log.display()
        ),
    )
    .expect("write config");
    let stderr = std::fs::File::create(&server_log).expect("server log");
    let mut server = NsServer::start_with(&ns, &config, &data_dir, Stdio::from(stderr));
    let mut conn = server.admin();
    let in_file = |needle: &str| {
        let out = ns.command("cat").arg(&access_log).output().expect("cat");
        String::from_utf8_lossy(&out.stdout).contains(needle)
    };
    let search = |conn: &mut Client, uid: &str| {
        let found =
            conn.search(PEOPLE, Scope::Subtree, &format!("(uid={uid})"), vec!["uid"]).expect("search");
        assert_eq!(found.1.rc, 0, "search (uid={uid}) while the access log's disk is full: {:?}", found.1);
    };
    let write_errors = || {
        let (status, body) = crate::metrics::get(metrics, "/metrics");
        assert_eq!(status, 200, "{body}");
        crate::metrics::sample(&body, "ferrodir_access_log_dropped_lines_total{reason=\"write_error\"}")
    };
    search(&mut conn, "before-the-disk-filled");
    wait_for("the first search's line in the access log", Duration::from_secs(10), || {
        in_file("(uid=before-the-disk-filled)")
    });
    assert_eq!(write_errors(), 0.0);

    // Fill the filesystem (dd stops at ENOSPC), then log far more than a page's slack.
    ns.sh("dd if=/dev/zero of=\"$MNT/filler\" bs=4k 2>/dev/null || true; df -k \"$MNT\" >&2");
    let padding = "x".repeat(200);
    for i in 0..400 {
        search(&mut conn, &format!("while-full-{i}-{padding}"));
    }
    // 800 lines (a request and a result per search), of which at most a page's slack fits.
    let mut dropped = 0.0;
    wait_for("700 dropped lines counted with reason write_error", Duration::from_secs(10), || {
        dropped = write_errors();
        dropped >= 700.0
    });
    assert!(dropped <= 800.0, "{dropped} lines counted as dropped, of 800 logged");
    assert!(!in_file("(uid=while-full-399-"), "the last search's line was written to a full disk?");
    let said = || std::fs::read_to_string(&server_log).unwrap_or_default();
    wait_for("the server's log saying the access log cannot be written", Duration::from_secs(10), || {
        said().contains("cannot write the access log")
    });
    assert!(said().contains("No space left"), "the message does not name the cause:\n{}", said());
    assert_eq!(
        said().matches("cannot write the access log").count(),
        1,
        "said more than once a minute:\n{}",
        said()
    );

    // Room again: lines reach the file by themselves.
    ns.sh("rm \"$MNT/filler\"");
    search(&mut conn, "after-the-disk-freed");
    wait_for("a line after the disk was freed", Duration::from_secs(10), || {
        in_file("(uid=after-the-disk-freed)")
    });
    wait_for("the server's log saying the access log is written again", Duration::from_secs(10), || {
        said().contains("the access log is written again")
    });
    // What was torn by the full disk ended where it stopped: every later line is whole.
    let out = ns.command("cat").arg(&access_log).output().expect("cat");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let after = text.lines().skip_while(|line| !line.contains("(uid=after-the-disk-freed)"));
    for line in after {
        assert!(line.starts_with('[') && line.contains(" conn="), "a broken line after recovery: {line:?}");
    }
    assert_eq!(write_errors(), dropped, "lines dropped after the disk was freed");
    drop(conn);
    server.stop();
}
