//! No known credentials off loopback (issue 24): a server other hosts could reach refuses
//! to start with the built-in root password or the example entries' published passwords,
//! and says how to set one; a config file without root_password leaves the rootDN unable to
//! bind; `ferrodir hash-password` makes a value that binds; the data directory and its files
//! are the user's alone whatever the umask, and one opened up gets a warning. On loopback
//! with no config file, the README's first command still binds as the rootDN with the
//! built-in password.
//!
//! The refused servers never accept traffic: they exit before binding any port. The one
//! server started on 0.0.0.0 (port 0) is reached on 127.0.0.1 only, and stopped at once.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{binary, connect_url, listening_address, output_text, Server, ADMIN_DN, BASE};

/// How long a refused start may take to exit, and a server to start.
const START_LIMIT: Duration = Duration::from_secs(60);

/// `ferrodir ARGS` run to its end (a refused start exits on its own), killed at START_LIMIT.
fn run_to_end(args: &[&str], cwd: &Path) -> Output {
    let mut child = Command::new(binary())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ferrodir");
    let deadline = Instant::now() + START_LIMIT;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ferrodir {args:?} did not exit within {START_LIMIT:?}: it should have refused to start");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// `ferrodir hash-password [--config FILE]` with `input` on standard input: its stdout.
fn hash_password(input: &str, config: Option<&Path>) -> String {
    let mut command = Command::new(binary());
    command.arg("hash-password");
    if let Some(path) = config {
        command.arg("--config").arg(path);
    }
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write stdin");
    let output = child.wait_with_output().expect("wait");
    assert!(output.status.success(), "hash-password failed: {}", output_text(&output));
    String::from_utf8(output.stdout).expect("utf-8").trim_end().to_string()
}

/// A simple bind's result code against `addr`.
fn bind_code(addr: &str, dn: &str, password: &str) -> u32 {
    let mut client = connect_url(&format!("ldap://{addr}"));
    client.simple_bind(dn, password).expect("bind").rc
}

/// Waits for the "listening" line of a server started with piped stdout; its address.
fn wait_listening(child: &mut Child) -> String {
    let lines = listening_address(child.stdout.take().expect("stdout"));
    match lines.recv_timeout(START_LIMIT) {
        Ok(addr) => addr,
        Err(_) => {
            let _ = child.kill();
            let status = child.wait().expect("wait");
            panic!("the server did not start within {START_LIMIT:?} ({status}); its log is above");
        }
    }
}

/// SIGTERM by PID, then a clean exit.
fn stop(mut child: Child) {
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "the server did not stop within 20s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// No config file: on 0.0.0.0 refused, naming the fix, before the data directory is made;
/// on loopback the rootDN binds with the built-in password, as the README shows.
#[test]
fn the_built_in_password_serves_loopback_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let refused = run_to_end(&["serve", "--listen", "0.0.0.0:0"], dir.path());
    let text = output_text(&refused);
    assert!(!refused.status.success(), "started on 0.0.0.0 with the built-in password: {text}");
    for needed in
        ["beyond loopback", "ldap on 0.0.0.0:0", "built-in password", "root_password", "hash-password"]
    {
        assert!(text.contains(needed), "the refusal does not say {needed:?}: {text}");
    }
    assert!(!dir.path().join("ferrodir-data").exists(), "a refused start made the data directory");

    // The README's first command, on a loopback port: the default data directory in cwd.
    let mut child = Command::new(binary())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ferrodir");
    let addr = wait_listening(&mut child);
    let code = bind_code(&addr, ADMIN_DN, "secret");
    let alice = bind_code(&addr, &format!("uid=alice,ou=people,{BASE}"), "password");
    stop(child);
    assert_eq!((code, alice), (0, 0), "the built-in rootDN password and the example's on loopback");
}

/// A config file without root_password: the rootDN cannot bind (49), its built-in password
/// neither. The example entries it loaded on loopback then keep it from starting on 0.0.0.0,
/// and the refusal names those whose password is still the published one.
#[test]
fn without_root_password_the_root_dn_cannot_bind_and_examples_stay_on_loopback() {
    let config = "shards = 2\nsuffixes = [\"dc=example,dc=com\"]\nroot_dn = \"cn=admin,dc=example,dc=com\"\n\
                  example_data = true\n[log]\nlevel = \"warn\"\n";
    let mut server = Server::start_with_config(config);
    let addr = server.addr.to_string();
    assert_eq!(bind_code(&addr, ADMIN_DN, "secret"), 49, "the built-in password without root_password");
    assert_eq!(bind_code(&addr, &format!("uid=bob,ou=people,{BASE}"), "password"), 0);
    // Alice changes hers: only bob's is still the published one.
    let alice = format!("uid=alice,ou=people,{BASE}");
    let mut client = connect_url(&format!("ldap://{addr}"));
    assert_eq!(client.simple_bind(&alice, "password").expect("bind").rc, 0);
    let changed = client
        .modify(
            &alice,
            vec![ldap3::Mod::Replace("userPassword", std::collections::HashSet::from(["her own"]))],
        )
        .expect("modify");
    assert_eq!(changed.rc, 0, "{changed:?}");
    drop(client);
    server.stop();
    // Opened up by hand: the next start warns.
    std::fs::set_permissions(&server.data_dir, std::fs::Permissions::from_mode(0o750)).expect("chmod");

    let config_path = server.config_path().to_str().expect("utf-8 path").to_string();
    let data_dir = server.data_dir.to_str().expect("utf-8 path").to_string();
    let args = ["serve", "--config", &config_path, "--data-dir", &data_dir, "--listen", "0.0.0.0:0"];
    let refused = run_to_end(&args, server.data_dir.parent().expect("parent"));
    let text = output_text(&refused);
    assert!(!refused.status.success(), "started on 0.0.0.0 with the example passwords: {text}");
    assert!(text.contains("uid=bob,ou=people,dc=example,dc=com"), "the refusal does not name bob: {text}");
    assert!(!text.contains("uid=alice"), "alice changed her password, yet the refusal names her: {text}");
    assert!(text.contains("open to its group or others") && text.contains("chmod 700"), "no warning: {text}");
    assert!(!text.contains("built-in password"), "no root password is not the built-in one: {text}");
}

/// `hash-password` from standard input makes a root_password that binds; with it, a server
/// on 0.0.0.0 starts; started under umask 000, its data directory is 0700 and every file in
/// it 0600.
#[test]
fn a_hashed_root_password_serves_beyond_loopback_in_a_private_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hashed = hash_password("my own pass\n", None);
    assert!(hashed.starts_with("{ARGON2}$argon2id$"), "the default scheme: {hashed}");
    let config = dir.path().join("ferrodir.toml");
    std::fs::write(&config, "password_scheme = \"{SSHA512}\"\n").expect("write config");
    assert!(hash_password("x", Some(&config)).starts_with("{SSHA512}"), "--config's password_scheme");
    std::fs::write(
        &config,
        format!(
            "shards = 2\nsuffixes = [\"{BASE}\"]\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{hashed}\"\n\
             example_data = false\n[log]\nlevel = \"warn\"\n"
        ),
    )
    .expect("write config");
    let data_dir = dir.path().join("data");
    let mut child = Command::new("sh")
        .args(["-c", "umask 000 && exec \"$0\" \"$@\"", binary()])
        .args(["serve", "--listen", "0.0.0.0:0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(&data_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start ferrodir");
    let addr = wait_listening(&mut child);
    let port = addr.rsplit(':').next().expect("port");
    let local = format!("127.0.0.1:{port}");
    let codes = (bind_code(&local, ADMIN_DN, "my own pass"), bind_code(&local, ADMIN_DN, "secret"));
    let modes = modes_under(&data_dir);
    stop(child);
    assert!(addr.starts_with("0.0.0.0:"), "{addr}");
    assert_eq!(codes, (0, 49), "the hashed password binds, the built-in one does not");
    assert!(modes.len() > 3, "the data directory's files: {modes:?}");
    for (path, mode, is_dir) in &modes {
        let wanted = if *is_dir { 0o700 } else { 0o600 };
        let all: Vec<String> = modes.iter().map(|(p, m, _)| format!("{p} {m:o}")).collect();
        assert_eq!(*mode, wanted, "{path} is {mode:o} under umask 000; all: {all:?}");
    }
}

/// (path, permission bits, whether a directory) of `dir` and every directory and regular
/// file under it (sockets, such as admin.sock, are for connecting, not reading).
fn modes_under(dir: &Path) -> Vec<(String, u32, bool)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let metadata = std::fs::symlink_metadata(&path).expect("stat");
        let mode = metadata.permissions().mode() & 0o777;
        if metadata.is_dir() {
            found.push((path.display().to_string(), mode, true));
            for entry in std::fs::read_dir(&path).expect("read_dir") {
                pending.push(entry.expect("entry").path());
            }
        } else if metadata.is_file() {
            found.push((path.display().to_string(), mode, false));
        }
    }
    found
}
