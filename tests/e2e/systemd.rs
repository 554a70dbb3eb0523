//! The systemd notification protocol (deploy/ferrodir.service, `Type=notify`): the real
//! binary, with NOTIFY_SOCKET pointing at a datagram socket of the test's, says READY=1
//! once it listens, sends WATCHDOG=1 keep-alives when WATCHDOG_USEC asks for them (each
//! after the coordinator and every shard answered a ping), RELOADING=1 then READY=1 on
//! SIGHUP (which must not stop it, with or without TLS), and STOPPING=1 on SIGTERM.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{binary, listening_address, TEST_CONFIG};

fn messages_until(socket: &UnixDatagram, wanted: &str, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            let done = text.lines().any(|l| l == wanted);
            seen.push(text);
            if done {
                return seen;
            }
        }
    }
    panic!("no {wanted} within {limit:?}; got {seen:?}");
}

#[test]
fn ready_watchdog_reload_and_stopping_reach_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let config = dir.path().join("ferrodir.toml");
    std::fs::write(&config, TEST_CONFIG).unwrap();
    // systemd sets WATCHDOG_PID to the service's PID; `exec` keeps the shell's.
    let mut child = Command::new("sh")
        .args(["-c", "WATCHDOG_PID=$$ exec \"$0\" \"$@\"", binary()])
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "400000")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let listening = listening_address(child.stdout.take().unwrap());
    let addr = listening.recv_timeout(Duration::from_secs(30)).expect("the server starts");
    let pid = child.id().to_string();
    let result = std::panic::catch_unwind(|| {
        messages_until(&socket, "READY=1", Duration::from_secs(10));
        // Keep-alives every 200 ms: two within a second or so.
        messages_until(&socket, "WATCHDOG=1", Duration::from_secs(3));
        messages_until(&socket, "WATCHDOG=1", Duration::from_secs(3));
        // A reload: RELOADING=1 then READY=1, and the server is still there.
        Command::new("kill").args(["-HUP", &pid]).status().unwrap();
        let seen = messages_until(&socket, "READY=1", Duration::from_secs(5));
        assert!(seen.iter().any(|m| m.contains("RELOADING=1")), "{seen:?}");
        let (code, _, err) =
            crate::harness::tool("ldapwhoami", &["-x", "-H", &format!("ldap://{addr}")], None);
        assert_eq!(code, 0, "the server must survive SIGHUP: {err}");
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        messages_until(&socket, "STOPPING=1", Duration::from_secs(10));
    });
    if result.is_err() {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert!(status.success(), "a clean stop after SIGTERM: {status:?}");
}
