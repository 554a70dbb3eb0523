//! `ferrodir export`, `backup` and `restore`, online and offline:
//!
//! - An export taken while writers run is one consistent cut: a subtree renamed back and
//!   forth between two parents (on other shards) is never half moved, each writer's acked
//!   adds form a prefix of its sequence, and a counter modified after each add never runs
//!   ahead of the adds. It lists parents first, loads into `ferrodir import` (and exports
//!   back byte for byte) and into slapadd, with and without operational attributes.
//! - A backup taken under the same writers restores into a new directory that verifies,
//!   serves the same cut and takes new writes.
//! - Restore refuses a backup without its completion marker and a non-empty target (unless
//!   --force, which still refuses a directory a server is serving).
//! - With the server stopped, export and backup work offline as before.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ldap3::Mod;

use crate::harness::{connect_url, Client, Server, ADMIN_DN, ADMIN_PW, BASE};
use crate::persistence::{ldif_dns, run_binary};

const COMMAND_LIMIT: Duration = Duration::from_secs(120);
/// Leaves under the subtree the mover renames back and forth.
const TREE_LEAVES: usize = 6;
/// Adds per writer: enough to overlap several exports, few enough for a 2-core machine.
const ADDS_PER_WRITER_MAX: usize = 150;
const ADDERS: usize = 3;

/// An import target with another shard count than the server's, and no example entries.
const IMPORT_CONFIG: &str = r#"
shards = 2
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = false
[log]
level = "warn"
"#;

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn bound(server: &Server) -> Client {
    let mut conn = connect_url(&server.url());
    let result = conn.simple_bind(ADMIN_DN, ADMIN_PW).expect("bind");
    assert_eq!(result.rc, 0, "admin bind");
    conn
}

fn add(conn: &mut Client, dn: &str, class: &str, rdn: (&str, &str)) {
    let mut attrs = vec![("objectClass", BTreeSet::from(["top", class])), (rdn.0, BTreeSet::from([rdn.1]))];
    if class == "person" {
        attrs.push(("sn", BTreeSet::from(["S"])));
    }
    let rc =
        conn.add(dn, attrs.into_iter().map(|(a, v)| (a, v.into_iter().collect())).collect()).expect("add").rc;
    assert_eq!(rc, 0, "add {dn}");
}

fn tree_dn(side: char) -> String {
    format!("ou=tree,ou=side-{side},{BASE}")
}

/// The fixed part of the tree the writers work in.
fn set_up(server: &Server) {
    let mut conn = bound(server);
    for ou in ["writers", "side-a", "side-b"] {
        add(&mut conn, &format!("ou={ou},{BASE}"), "organizationalUnit", ("ou", ou));
    }
    add(&mut conn, &tree_dn('a'), "organizationalUnit", ("ou", "tree"));
    for leaf in 0..TREE_LEAVES {
        add(&mut conn, &format!("cn=leaf{leaf},{}", tree_dn('a')), "person", ("cn", &format!("leaf{leaf}")));
    }
    add(&mut conn, &format!("cn=counter,ou=writers,{BASE}"), "person", ("cn", "counter"));
}

/// Writers that run until stopped: adders (each adds `cn=w<i>-<n>` in order), a counter
/// writer (adds `cn=m-<n>`, then sets the counter's description to n) and a mover (renames
/// the subtree between side-a and side-b). `progress` counts acknowledged writes.
struct Writers {
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicUsize>,
    handles: Vec<JoinHandle<()>>,
}

impl Writers {
    fn start(server: &Server) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::new();
        for writer in 0..=ADDERS {
            let (stop, progress, mut conn) = (stop.clone(), progress.clone(), bound(server));
            handles.push(std::thread::spawn(move || {
                for n in 0..ADDS_PER_WRITER_MAX {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let name =
                        if writer < ADDERS { format!("w{writer}-{n:03}") } else { format!("m-{n:03}") };
                    add(&mut conn, &format!("cn={name},ou=writers,{BASE}"), "person", ("cn", &name));
                    if writer == ADDERS {
                        let counter = format!("cn=counter,ou=writers,{BASE}");
                        let value = n.to_string();
                        let mods = vec![Mod::Replace("description", [value.as_str()].into_iter().collect())];
                        assert_eq!(conn.modify(&counter, mods).expect("modify").rc, 0, "modify counter");
                    }
                    progress.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        let (stop_mover, progress_mover, mut conn) = (stop.clone(), progress.clone(), bound(server));
        handles.push(std::thread::spawn(move || {
            let mut side = 'a';
            while !stop_mover.load(Ordering::SeqCst) {
                let to = if side == 'a' { 'b' } else { 'a' };
                let superior = format!("ou=side-{to},{BASE}");
                let rc =
                    conn.modifydn(&tree_dn(side), "ou=tree", true, Some(&superior)).expect("modify DN").rc;
                assert_eq!(rc, 0, "move the subtree to side-{to}");
                side = to;
                progress_mover.fetch_add(1, Ordering::SeqCst);
            }
        }));
        Self { stop, progress, handles }
    }

    fn progress(&self) -> usize {
        self.progress.load(Ordering::SeqCst)
    }

    /// Waits until at least `writes` more writes were acknowledged.
    fn wait_for(&self, writes: usize) {
        let goal = self.progress() + writes;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while self.progress() < goal {
            assert!(std::time::Instant::now() < deadline, "the writers made no progress");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn finish(self) {
        self.stop.store(true, Ordering::SeqCst);
        for handle in self.handles {
            handle.join().expect("a writer failed");
        }
    }
}

/// An LDIF file's records: DN (lowercased) and attributes (names lowercased).
fn records(ldif: &str) -> Vec<(String, Vec<(String, String)>)> {
    let dns = ldif_dns(ldif);
    let blocks: Vec<&str> = ldif.split("\n\n").filter(|block| !block.trim().is_empty()).collect();
    assert_eq!(blocks.len(), dns.len(), "one DN per record");
    dns.into_iter()
        .zip(blocks)
        .map(|(dn, block)| {
            let unfolded = block.replace("\n ", "");
            let attrs = unfolded
                .lines()
                .skip(1)
                .filter_map(|line| line.split_once(':'))
                .map(|(name, value)| (name.to_lowercase(), value.trim_start_matches(':').trim().to_string()))
                .collect();
            (dn.to_lowercase(), attrs)
        })
        .collect()
}

/// Asserts that an export is one consistent cut of the writers' work, listed parents first.
fn check_cut(ldif: &str, when: &str) {
    let records = records(ldif);
    let listed: Vec<&String> = records.iter().map(|(dn, _)| dn).collect();
    let unique: BTreeSet<&String> = listed.iter().copied().collect();
    assert_eq!(unique.len(), listed.len(), "{when}: an entry is listed twice");
    let base = BASE.to_lowercase();
    for (index, dn) in listed.iter().enumerate() {
        if **dn != base {
            let parent = dn.split_once(',').map(|(_, parent)| parent).unwrap_or("");
            let at = listed.iter().position(|d| *d == parent);
            assert!(at.is_some_and(|at| at < index), "{when}: {dn} comes before its parent");
        }
    }
    // The subtree is entirely on one side, with all its leaves.
    let sides: Vec<char> = ['a', 'b'].into_iter().filter(|s| unique.contains(&tree_dn(*s))).collect();
    assert_eq!(sides.len(), 1, "{when}: the moving subtree is on sides {sides:?}");
    let leaves = listed.iter().filter(|dn| dn.ends_with(&format!(",{}", tree_dn(sides[0])))).count();
    assert_eq!(leaves, TREE_LEAVES, "{when}: the subtree holds {leaves} leaves");
    // Each writer's adds form a prefix of its sequence.
    let mut seen: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for dn in &listed {
        let Some(name) =
            dn.strip_prefix("cn=").and_then(|rest| rest.strip_suffix(&format!(",ou=writers,{base}")))
        else {
            continue;
        };
        if let Some((writer, n)) = name.rsplit_once('-') {
            seen.entry(writer.to_string()).or_default().insert(n.parse().expect("sequence number"));
        }
    }
    for (writer, numbers) in &seen {
        assert_eq!(
            numbers.len(),
            numbers.last().map_or(0, |last| last + 1),
            "{when}: {writer} has gaps: {numbers:?}"
        );
    }
    // The counter is modified after each add of the counter writer: never ahead of it.
    let counter_dn = format!("cn=counter,ou=writers,{base}");
    let counter = records.iter().find(|(dn, _)| *dn == counter_dn).expect("the counter entry");
    let counted =
        counter.1.iter().find(|(name, _)| name == "description").map(|(_, v)| v.parse::<usize>().expect("n"));
    let added = seen.get("m").map_or(0, |numbers| numbers.len());
    match counted {
        None => assert!(added <= 1, "{when}: {added} counter adds, counter never set"),
        Some(n) => assert!(added == n + 1 || added == n + 2, "{when}: counter at {n} after {added} adds"),
    }
}

const OPERATIONAL: [&str; 7] = [
    "structuralobjectclass",
    "entryuuid",
    "creatorsname",
    "createtimestamp",
    "entrycsn",
    "modifiersname",
    "modifytimestamp",
];

/// Every record has every stored operational attribute (`present`), or none has any.
fn check_operational(ldif: &str, present: bool) {
    for (dn, attrs) in records(ldif) {
        for wanted in OPERATIONAL {
            let has = attrs.iter().any(|(name, _)| name == wanted);
            assert_eq!(has, present, "{dn}: {wanted} present: {has}");
        }
        assert!(attrs.iter().any(|(name, _)| name == "objectclass"), "{dn}: no objectClass");
    }
}

fn export(server: &Server, extra: &[&str]) -> String {
    let mut args =
        vec!["export", "--config", text(server.config_path()), "--data-dir", text(&server.data_dir)];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = run_binary(&args, COMMAND_LIMIT);
    assert_eq!(code, 0, "export {extra:?}: {stderr}");
    stdout
}

/// Imports `ldif` into a new directory under `dir`, verifies it, and returns its operational
/// export: import must take its own output, with or without operational attributes.
fn import_and_export_back(dir: &Path, name: &str, ldif: &str) -> String {
    let file = dir.join(format!("{name}.ldif"));
    std::fs::write(&file, ldif).expect("write LDIF");
    let config = dir.join("import.toml");
    std::fs::write(&config, IMPORT_CONFIG).expect("write config");
    let data = dir.join(format!("{name}-data"));
    let common = ["--config", text(&config), "--data-dir", text(&data)];
    let (code, _, stderr) = run_binary(&[&["import"], &common[..], &[text(&file)]].concat(), COMMAND_LIMIT);
    assert_eq!(code, 0, "import of {name}: {stderr}");
    let (code, stdout, stderr) = run_binary(&[&["verify"], &common[..]].concat(), COMMAND_LIMIT);
    assert_eq!(code, 0, "verify after importing {name}: {stdout}{stderr}");
    let (code, stdout, stderr) = run_binary(&[&["export"], &common[..]].concat(), COMMAND_LIMIT);
    assert_eq!(code, 0, "export after importing {name}: {stderr}");
    stdout
}

/// Loads `ldif` into a fresh back-mdb database with slapadd; returns its exit code and output.
fn slapadd(dir: &Path, name: &str, ldif: &str) -> (i32, String) {
    let work = dir.join(format!("slapd-{name}"));
    std::fs::create_dir_all(work.join("db")).expect("slapd dir");
    let file = work.join("data.ldif");
    std::fs::write(&file, ldif).expect("write LDIF");
    let mut conf = String::new();
    for schema in ["core", "cosine", "inetorgperson", "nis"] {
        conf.push_str(&format!("include /etc/ldap/schema/{schema}.schema\n"));
    }
    // Debian builds the backends as modules; other builds link back-mdb in.
    if Path::new("/usr/lib/ldap/back_mdb.la").exists() {
        conf.push_str("modulepath /usr/lib/ldap\nmoduleload back_mdb\n");
    }
    conf.push_str(&format!(
        "database mdb\nmaxsize 67108864\nsuffix \"{BASE}\"\nrootdn \"{ADMIN_DN}\"\ndirectory {}\n",
        work.join("db").display()
    ));
    let conf_path = work.join("slapd.conf");
    std::fs::write(&conf_path, conf).expect("write slapd.conf");
    let program = if Path::new("/usr/sbin/slapadd").exists() { "/usr/sbin/slapadd" } else { "slapadd" };
    let output = std::process::Command::new(program)
        .args(["-f", text(&conf_path), "-l", text(&file)])
        .output()
        .unwrap_or_else(|e| panic!("cannot run slapadd (install slapd): {e}"));
    let said =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), said)
}

#[test]
fn export_while_serving_is_one_consistent_cut_that_imports_and_slapadds() {
    let server = Server::start();
    set_up(&server);
    let writers = Writers::start(&server);
    let mut exports = Vec::new();
    for round in 0..6 {
        writers.wait_for(5);
        let operational = round % 2 == 0;
        let ldif = export(&server, if operational { &[] } else { &["--no-operational"] });
        check_cut(&ldif, &format!("export {round} while writing"));
        check_operational(&ldif, operational);
        exports.push((operational, ldif));
    }
    writers.finish();
    let distinct: BTreeSet<&String> = exports.iter().map(|(_, ldif)| ldif).collect();
    assert!(distinct.len() > 2, "the writers did not change anything between exports");

    let dir = tempfile::tempdir().expect("tempdir");
    for (operational, ldif) in exports.iter().rev().take(2) {
        let name = if *operational { "operational" } else { "user" };
        let back = import_and_export_back(dir.path(), name, ldif);
        if *operational {
            // Import keeps every operational value, so the round trip is exact.
            assert_eq!(&back, ldif, "export → import → export changed the LDIF");
        } else {
            assert_eq!(ldif_dns(&back), ldif_dns(ldif), "export → import → export changed the entries");
            check_operational(&back, true);
        }
        let (code, said) = slapadd(dir.path(), name, ldif);
        assert_eq!(code, 0, "slapadd of the {name} export: {said}");
    }
}

#[test]
fn backup_while_serving_restores_verifies_and_serves() {
    let server = Server::start();
    set_up(&server);
    let writers = Writers::start(&server);
    writers.wait_for(20);
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("backup");
    let args = ["backup", "--data-dir", text(&server.data_dir), "--to", text(&backup)];
    let (code, _, stderr) = run_binary(&args, COMMAND_LIMIT);
    assert_eq!(code, 0, "backup while serving: {stderr}");
    assert!(stderr.contains("backed up"), "{stderr}");
    writers.wait_for(5);
    writers.finish();
    assert!(backup.join("ferrodir-backup.toml").is_file(), "no completion marker");

    let restored = dir.path().join("restored");
    let args = ["restore", "--from", text(&backup), "--data-dir", text(&restored)];
    let (code, _, stderr) = run_binary(&args, COMMAND_LIMIT);
    assert_eq!(code, 0, "restore: {stderr}");
    assert!(stderr.contains("verify found no problems"), "{stderr}");

    // A server on the restored directory serves the cut the backup took...
    let mut second = Server::start();
    second.stop();
    second.data_dir = restored.clone();
    second.restart();
    let served = export(&second, &[]);
    check_cut(&served, "the restored directory");
    let from_backup = {
        let args = ["export", "--data-dir", text(&backup)];
        let (code, stdout, stderr) = run_binary(&args, COMMAND_LIMIT);
        assert_eq!(code, 0, "offline export of the backup: {stderr}");
        stdout
    };
    assert_eq!(served, from_backup, "the restored server serves something else than the backup holds");
    // ...its entries answer searches, and it takes new writes on every shard.
    let mut conn = bound(&second);
    let found = conn
        .search(&format!("ou=writers,{BASE}"), ldap3::Scope::OneLevel, "(objectClass=person)", vec!["1.1"])
        .expect("search")
        .success()
        .expect("search result")
        .0
        .len();
    let listed = ldif_dns(&served).iter().filter(|dn| dn.ends_with(&format!(",ou=writers,{BASE}"))).count();
    assert_eq!(found, listed, "entries under ou=writers");
    for n in 0..8 {
        add(&mut conn, &format!("cn=after-{n},ou=writers,{BASE}"), "person", ("cn", &format!("after-{n}")));
    }
    let side = if ldif_dns(&served).contains(&tree_dn('a')) { 'a' } else { 'b' };
    let other = if side == 'a' { 'b' } else { 'a' };
    let superior = format!("ou=side-{other},{BASE}");
    let rc = conn.modifydn(&tree_dn(side), "ou=tree", true, Some(&superior)).expect("move").rc;
    assert_eq!(rc, 0, "move the subtree on the restored directory");
    drop(conn);
    second.stop();
    let args = ["verify", "--data-dir", text(&restored)];
    let (code, stdout, stderr) = run_binary(&args, COMMAND_LIMIT);
    assert_eq!(code, 0, "verify after writes on the restored directory: {stdout}{stderr}");
}

#[test]
fn restore_refuses_an_unfinished_backup_and_a_non_empty_target() {
    let mut server = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("backup");
    let args = ["backup", "--data-dir", text(&server.data_dir), "--to", text(&backup)];
    assert_eq!(run_binary(&args, COMMAND_LIMIT).0, 0, "backup");
    let (code, _, stderr) = run_binary(&args, COMMAND_LIMIT);
    assert_ne!(code, 0, "a backup into a non-empty directory succeeded");
    assert!(stderr.contains("not empty"), "{stderr}");

    // A backup cut short before its marker.
    let unfinished = dir.path().join("unfinished");
    std::fs::create_dir(&unfinished).expect("mkdir");
    for entry in std::fs::read_dir(&backup).expect("read backup") {
        let entry = entry.expect("entry");
        if entry.file_name() != "ferrodir-backup.toml" {
            std::fs::copy(entry.path(), unfinished.join(entry.file_name())).expect("copy");
        }
    }
    let target = dir.path().join("target");
    let restore = |from: &PathBuf, to: &PathBuf, force: bool| {
        let mut args = vec!["restore", "--from", text(from), "--data-dir", text(to)];
        if force {
            args.push("--force");
        }
        run_binary(&args, COMMAND_LIMIT)
    };
    let (code, _, stderr) = restore(&unfinished, &target, false);
    assert_ne!(code, 0, "restored a backup without its completion marker");
    assert!(stderr.contains("ferrodir-backup.toml") && stderr.contains("did not finish"), "{stderr}");
    assert!(!target.exists(), "a refused restore created the target");

    assert_eq!(restore(&backup, &target, false).0, 0, "restore into a new directory");
    let (code, _, stderr) = restore(&backup, &target, false);
    assert_ne!(code, 0, "restored over a non-empty directory without --force");
    assert!(stderr.contains("not empty"), "{stderr}");
    let (code, _, stderr) = restore(&backup, &target, true);
    assert_eq!(code, 0, "restore --force: {stderr}");

    let (code, _, stderr) = restore(&backup, &server.data_dir, true);
    assert_ne!(code, 0, "restored over a directory a server is serving");
    assert!(stderr.contains("serving"), "{stderr}");
    assert!(bound(&server).simple_bind(ADMIN_DN, ADMIN_PW).is_ok(), "the server stopped serving");
    server.stop();
}

#[test]
fn offline_export_and_backup_still_work_and_the_socket_is_private() {
    let mut server = Server::start();
    set_up(&server);
    let socket = server.data_dir.join("admin.sock");
    let mode = std::fs::metadata(&socket).expect("admin.sock while serving").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "admin.sock mode {mode:o}");
    let online = export(&server, &[]);
    server.stop();
    assert!(!socket.exists(), "admin.sock left behind by a clean shutdown");

    let offline = export(&server, &[]);
    assert_eq!(online, offline, "online and offline exports of the same data differ");
    check_cut(&offline, "offline export");
    check_operational(&offline, true);
    check_operational(&export(&server, &["--no-operational"]), false);

    let dir = tempfile::tempdir().expect("tempdir");
    let backup = dir.path().join("backup");
    let args = ["backup", "--data-dir", text(&server.data_dir), "--to", text(&backup)];
    let (code, _, stderr) = run_binary(&args, COMMAND_LIMIT);
    assert_eq!(code, 0, "offline backup: {stderr}");
    let restored = dir.path().join("restored");
    let args = ["restore", "--from", text(&backup), "--data-dir", text(&restored)];
    let (code, _, stderr) = run_binary(&args, COMMAND_LIMIT);
    assert_eq!(code, 0, "restore: {stderr}");
    let args = ["export", "--data-dir", text(&restored)];
    let (code, stdout, stderr) = run_binary(&args, COMMAND_LIMIT);
    assert_eq!(code, 0, "export of the restored directory: {stderr}");
    assert_eq!(stdout, offline, "the restored directory exports differently");

    let missing = dir.path().join("missing");
    let (code, stdout, stderr) = run_binary(&["export", "--data-dir", text(&missing)], COMMAND_LIMIT);
    assert_eq!((code, stdout.as_str()), (0, ""), "export of a directory that does not exist: {stderr}");
    assert!(stderr.contains("no data directory") && !missing.exists(), "{stderr}");
    let nothing = dir.path().join("nothing");
    let args = ["backup", "--data-dir", text(&missing), "--to", text(&nothing)];
    let (code, _, stderr) = run_binary(&args, COMMAND_LIMIT);
    assert_ne!(code, 0, "backed up a directory that does not exist");
    assert!(stderr.contains("not a ferrodir data directory") && !missing.exists(), "{stderr}");
}
