//! Starting the real `ferrodir` binary for a test: a fresh data directory, a config file, a
//! free loopback port, and helpers to stop, kill and restart it.
//!
//! In process or the binary: spawn the binary ([`Server`]) by default. It is what users
//! run, so its tests keep the command line honest (flags, messages, exit codes, signals,
//! stdout), and a test can kill it. Run the server in the test process through
//! `ferrodir_server::serve(config, listener, shutdown)` (see `in_process.rs`) when the test
//! is about the library's seam itself, or needs to hand it a listener or stop it without a
//! signal. Only one such server per test process: the shard and router crates still keep
//! a few settings in process-wide statics.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ldap3::{LdapConn, LdapConnSettings};

pub const ADMIN_DN: &str = "cn=admin,dc=example,dc=com";
pub const ADMIN_PW: &str = "secret";
pub const BASE: &str = "dc=example,dc=com";

/// Config used by every test unless it passes its own: four shards, so that even a 2-core
/// machine exercises the cross-shard paths. Reads of other shards take the default path
/// (`remote_reads = "snapshot"`); see [`message_reads_config`] for the other one.
pub const TEST_CONFIG: &str = r#"
shards = 4
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = true
[log]
level = "warn"
"#;

/// TEST_CONFIG with `remote_reads = "message"`: reads of other shards are messages to their
/// actors. A few tests of ops and concurrency run on it too, so that path stays covered.
pub fn message_reads_config() -> String {
    TEST_CONFIG.replacen("[log]", "remote_reads = \"message\"\n[log]", 1)
}

pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    config_path: PathBuf,
    /// Where the server's stderr (its log) goes; None: the test's own stderr.
    log_path: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_ferrodir")
}

impl Server {
    pub fn start() -> Self {
        Self::start_with_config(TEST_CONFIG)
    }

    /// Starts with `config` (TOML) in a new temporary data directory.
    pub fn start_with_config(config: &str) -> Self {
        Self::start_in(config, false)
    }

    /// As [`Server::start_with_config`], with the server's log (stderr) kept in a file that
    /// [`Server::log`] reads: for a test that waits for the server to say it did something.
    pub fn start_logged(config: &str) -> Self {
        Self::start_in(config, true)
    }

    fn start_in(config: &str, logged: bool) -> Self {
        Self::start_at(config, "127.0.0.1:0".parse().unwrap(), logged)
    }

    /// Starts with `config` on the address `listen` (chosen beforehand: peers of a mesh
    /// name each other in their configs), its log kept when `logged`.
    pub fn start_at(config: &str, listen: std::net::SocketAddr, logged: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data_dir = dir.path().join("data");
        let config_path = dir.path().join("ferrodir.toml");
        let log_path = logged.then(|| dir.path().join("stderr.log"));
        std::fs::write(&config_path, config).expect("write config");
        let (child, addr) = spawn(&config_path, &data_dir, listen, log_path.as_deref());
        Self { child: Some(child), addr, data_dir, config_path, log_path, _dir: dir }
    }

    /// What the server has logged so far (only when started with [`Server::start_logged`]).
    pub fn log(&self) -> String {
        let path = self.log_path.as_ref().expect("the server was not started with start_logged");
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// The server's process ID (for reading /proc/PID/status); None once stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn url(&self) -> String {
        format!("ldap://{}", self.addr)
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            let status = wait_timeout(&mut child, Duration::from_secs(20));
            assert!(status.is_some(), "server did not stop within 20s of SIGTERM");
        }
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same data directory and the same port.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop or kill the server first");
        let (child, addr) = spawn(&self.config_path, &self.data_dir, self.addr, self.log_path.as_deref());
        self.child = Some(child);
        self.addr = addr;
    }

    /// Runs `ferrodir export` on the (stopped) server's data directory.
    pub fn export(&self) -> String {
        let output = Command::new(binary())
            .args(["export", "--config"])
            .arg(&self.config_path)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .output()
            .expect("run export");
        assert!(output.status.success(), "export failed: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).expect("utf-8 LDIF")
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// `ferrodir reload` for the running server (through its admin socket): (succeeded,
    /// its output).
    pub fn reload(&self) -> (bool, String) {
        let output = Command::new(binary())
            .arg("reload")
            .arg("--config")
            .arg(&self.config_path)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .output()
            .expect("run ferrodir reload");
        (output.status.success(), output_text(&output))
    }

    /// `ferrodir verify` on the (stopped) server's data directory: (passed, stdout + stderr).
    pub fn verify(&self) -> (bool, String) {
        let output = Command::new(binary())
            .arg("verify")
            .arg("--config")
            .arg(&self.config_path)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .output()
            .expect("run verify");
        (output.status.success(), output_text(&output))
    }
}

/// A finished command's stdout followed by its stderr, as text.
pub fn output_text(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// Reads a starting server's stdout on a thread of its own and delivers the address from its
/// "ferrodir listening on ADDR" line (the port may have been 0).
pub fn listening_address(stdout: std::process::ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("ferrodir listening on ") {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    rx
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(config: &Path, data_dir: &Path, listen: SocketAddr, log: Option<&Path>) -> (Child, SocketAddr) {
    // A restart reuses the port; the old socket may linger briefly.
    for _attempt in 0..50 {
        let stderr = match log {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new().create(true).append(true).open(path).expect("server log file"),
            ),
            None => Stdio::inherit(),
        };
        let mut child = Command::new(binary())
            .arg("serve")
            .arg("--config")
            .arg(config)
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(listen.to_string())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start ferrodir");
        let rx = listening_address(child.stdout.take().expect("stdout"));
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => return (child, addr.parse().expect("listen address")),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    panic!("ferrodir did not start listening on {listen}");
}

fn wait_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    None
}

/// Runs an OpenLDAP command-line tool; returns (exit code, stdout, stderr).
pub fn tool(name: &str, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    tool_with_env(name, args, stdin, &[])
}

/// Runs an OpenLDAP tool against `server` bound as `who` (DN, password) with `extra`
/// arguments and `stdin`: (exit code, stdout, stderr). The tools exit with the LDAP
/// result code.
pub fn tool_as(
    server: &Server,
    name: &str,
    who: (&str, &str),
    extra: &[&str],
    stdin: Option<&str>,
) -> (i32, String, String) {
    let url = server.url();
    let mut args = vec!["-x", "-H", url.as_str(), "-D", who.0, "-w", who.1];
    args.extend_from_slice(extra);
    tool(name, &args, stdin)
}

/// [`tool`] with extra environment variables (e.g. `LDAPTLS_CACERT`).
pub fn tool_with_env(
    name: &str,
    args: &[&str],
    stdin: Option<&str>,
    env: &[(&str, &str)],
) -> (i32, String, String) {
    use std::io::Write;
    let mut child = Command::new(name)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {name} (install ldap-utils): {e}"));
    if let Some(input) = stdin {
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write stdin");
    }
    drop(child.stdin.take());
    let output = child.wait_with_output().expect("wait");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// How long any one LDAP operation of a test may take.
pub const OP_TIMEOUT: Duration = Duration::from_secs(30);

/// An `LdapConn` whose every operation carries [`OP_TIMEOUT`]: ldap3's timeout applies to
/// the next operation only, so `deref_mut` (which every `LdapConn` method goes through,
/// since they all take `&mut self`) sets it again each time.
pub struct Client(pub LdapConn);

impl Deref for Client {
    type Target = LdapConn;
    fn deref(&self) -> &LdapConn {
        &self.0
    }
}

impl DerefMut for Client {
    fn deref_mut(&mut self) -> &mut LdapConn {
        self.0.with_timeout(OP_TIMEOUT)
    }
}

/// A connection to `url` whose operations time out.
pub fn connect_url(url: &str) -> Client {
    let settings = LdapConnSettings::new().set_conn_timeout(OP_TIMEOUT);
    Client(LdapConn::with_settings(settings, url).expect("connect"))
}

/// A connection to `server` bound as `dn` with `password` (anonymous when `dn` is empty);
/// the bind must succeed.
pub fn bound(server: &Server, dn: &str, password: &str) -> Client {
    let mut client = connect_url(&server.url());
    if !dn.is_empty() {
        let result = client.simple_bind(dn, password).expect("bind");
        assert_eq!(result.rc, 0, "bind as {dn}: {result:?}");
    }
    client
}

/// Polls `check` every 20 ms until it holds (true) or `deadline` passes (false, after one
/// last look): how a test waits for something the server does in its own time, instead of
/// sleeping a fixed while and hoping it was long enough.
pub fn wait_until(deadline: std::time::Instant, mut check: impl FnMut() -> bool) -> bool {
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free TCP port on loopback (bound, then let go: for a config that needs the address
/// before the server starts).
pub fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("its address")
}

/// A plain HTTP GET of the metrics endpoint: (status code, whole response); (0, "") when
/// nothing answers.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> (u32, String) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5))
    else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let _ = write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

/// A sample's value in the metrics (the first line that starts with `line_prefix`);
/// None when absent.
pub fn metric_value(addr: std::net::SocketAddr, line_prefix: &str) -> Option<f64> {
    let (_, text) = http_get(addr, "/metrics");
    text.lines()
        .find(|l| l.starts_with(line_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A whole subtree's content for comparing servers: lowercased DN → lowercased attribute
/// name → its sorted values, attributes for which `keep` says no left out.
pub type Snapshot = std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<String>>>;

/// [`Snapshot`] of search results (`ResultEntry`s as ldap3 returns them).
pub fn snapshot_of(entries: Vec<ldap3::ResultEntry>, keep: impl Fn(&str) -> bool) -> Snapshot {
    entries
        .into_iter()
        .map(ldap3::SearchEntry::construct)
        .map(|e| {
            let attrs = e
                .attrs
                .into_iter()
                .map(|(k, mut v)| {
                    v.sort();
                    (k.to_ascii_lowercase(), v)
                })
                .filter(|(k, _)| keep(k))
                .collect();
            (e.dn.to_ascii_lowercase(), attrs)
        })
        .collect()
}
