//! The server run inside the test process through `ferrodir_server::serve`, the library
//! entry point, on a listener the test bound: reachable with ldap3, stopped through its
//! shutdown future, and leaving its data directory free for the next process.

use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use ldap3::{Scope, SearchEntry};

use crate::harness::{binary, connect_url, output_text, ADMIN_DN, ADMIN_PW, BASE, TEST_CONFIG};

/// How long the server may take to stop once told to (the grace for open connections is
/// not used: the test closes its connection first).
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn serve_in_process_answers_and_stops_on_its_shutdown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let config_path = dir.path().join("ferrodir.toml");
    std::fs::write(&config_path, TEST_CONFIG).expect("write config");
    let mut config = ferrodir_server::Config::parse(TEST_CONFIG).expect("config");
    config.data_dir = data_dir.clone();
    // Not on stdout, which this process shares with the test runner.
    config.access_log.path = dir.path().join("access.log").display().to_string();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local address");

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (done_tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        let shutdown = async move {
            let _ = stopped.await;
        };
        let _ = done_tx.send(ferrodir_server::serve(config, listener, shutdown));
    });

    // The listener is bound already: the connection waits in its backlog until the server
    // accepts (or is refused at once, should the server fail to start and drop it).
    let mut client = connect_url(&format!("ldap://{addr}"));
    let bind = client.simple_bind(ADMIN_DN, ADMIN_PW).expect("bind");
    assert_eq!(bind.rc, 0, "bind: {bind:?}");
    let found = client.search(BASE, Scope::Subtree, "(objectClass=organizationalUnit)", vec!["ou"]);
    let (entries, _) = found.expect("search").success().expect("search result");
    let mut names: Vec<String> =
        entries.into_iter().map(|e| SearchEntry::construct(e).dn.to_lowercase()).collect();
    names.sort();
    assert_eq!(
        names,
        ["ou=groups,dc=example,dc=com", "ou=people,dc=example,dc=com"],
        "the example entries' units"
    );
    let attrs = vec![
        ("objectClass", HashSet::from(["top", "organizationalUnit"])),
        ("ou", HashSet::from(["in-process"])),
    ];
    let added = client.add("ou=in-process,dc=example,dc=com", attrs).expect("add");
    assert_eq!(added.rc, 0, "add: {added:?}");
    client.unbind().expect("unbind");

    stop.send(()).expect("the server is still running");
    let outcome = done.recv_timeout(STOP_TIMEOUT).expect("serve returns once its shutdown completes");
    outcome.expect("serve stopped cleanly");
    assert_port_closed(addr);

    // The data directory is free: another process opens every shard, and finds the write.
    let verify = run_tool(&["verify", "--config"], &config_path, &data_dir);
    assert!(verify.status.success(), "verify after an in-process stop: {}", output_text(&verify));
    let export = run_tool(&["export", "--config"], &config_path, &data_dir);
    assert!(export.status.success(), "export after an in-process stop: {}", output_text(&export));
    let ldif = String::from_utf8_lossy(&export.stdout);
    assert!(ldif.contains("dn: ou=in-process,dc=example,dc=com"), "the added entry is exported:\n{ldif}");
}

/// Nothing listens on `addr` any more: a connection is refused.
fn assert_port_closed(addr: SocketAddr) {
    let refused = TcpStream::connect_timeout(&addr, Duration::from_secs(5));
    assert!(refused.is_err(), "{addr} still accepts connections after serve returned");
}

/// Runs the `ferrodir` binary with `args`, then the config and the data directory.
fn run_tool(args: &[&str], config: &std::path::Path, data_dir: &std::path::Path) -> std::process::Output {
    Command::new(binary())
        .args(args)
        .arg(config)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .expect("run ferrodir")
}
