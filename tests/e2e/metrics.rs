//! The metrics endpoint (`metrics_listen`) of the real binary: counts that follow what a
//! client did, `promtool check metrics` on the output, a real Prometheus server scraping
//! it and answering a non-zero rate of completed operations, `/healthz`, `/readyz` and
//! `ferrodir healthcheck`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::collections::HashSet;

use ldap3::{Scope, SearchEntry};

use crate::harness::{binary, bound, free_port, tool, Server, ADMIN_DN, ADMIN_PW, BASE, TEST_CONFIG};

fn start() -> (Server, SocketAddr) {
    let metrics = free_port();
    let config = format!("metrics_listen = \"{metrics}\"\n{TEST_CONFIG}");
    (Server::start_with_config(&config), metrics)
}

/// A plain HTTP GET: (status code, body).
pub(crate) fn get(addr: SocketAddr, path: &str) -> (u32, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// The value of the sample `series` (name and labels exactly as written) in `text`.
pub(crate) fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

fn searches(server: &Server, count: usize) {
    for _ in 0..count {
        let (code, _, err) =
            tool("ldapsearch", &["-x", "-H", &server.url(), "-b", BASE, "(uid=alice)", "uid"], None);
        assert_eq!(code, 0, "{err}");
    }
}

#[test]
fn counters_follow_what_clients_did() {
    let (server, metrics) = start();
    let (status, before) = get(metrics, "/metrics");
    assert_eq!(status, 200);
    let search_ok = "ferrodir_operations_completed_total{operation=\"search\",result=\"success\"}";
    let bind_fail = "ferrodir_binds_total{method=\"simple\",result=\"failure\"}";
    let n0 = sample(&before, search_ok);
    searches(&server, 5);
    let (code, _, _) = tool(
        "ldapwhoami",
        &["-x", "-H", &server.url(), "-D", "cn=admin,dc=example,dc=com", "-w", "wrong"],
        None,
    );
    assert_eq!(code, 49);
    let (_, after) = get(metrics, "/metrics");
    assert_eq!(sample(&after, search_ok) - n0, 5.0);
    assert!(sample(&after, "ferrodir_search_entries_returned_total") >= 5.0);
    assert_eq!(sample(&after, bind_fail), 1.0);
    assert!(
        sample(&after, "ferrodir_operations_completed_total{operation=\"bind\",result=\"denied\"}") >= 1.0
    );
    assert!(sample(&after, "ferrodir_connections_accepted_total{listener=\"ldap\"}") >= 6.0);
    assert!(sample(&after, "ferrodir_shard_commits_total{shard=\"0\",result=\"success\"}") >= 0.0);
    assert_eq!(sample(&after, "ferrodir_shard_writable{shard=\"0\"}"), 1.0);
    assert!(after.contains("ferrodir_operation_duration_seconds_bucket{operation=\"search\",le=\"+Inf\"}"));
    assert!(after.contains("process_resident_memory_bytes"));
    // Bounded cardinality: no DN, filter or address ever becomes a label.
    assert!(!after.contains("alice") && !after.contains("127.0.0.1"), "{after}");
}

/// The sum over shards of a per-shard series, and how many shards showed it.
fn per_shard_sum(text: &str, name: &str) -> (f64, usize) {
    let prefix = format!("{name}{{shard=\"");
    let values: Vec<f64> = text
        .lines()
        .filter(|line| line.starts_with(&prefix))
        .filter_map(|line| line.rsplit(' ').next().and_then(|v| v.parse().ok()))
        .collect();
    (values.iter().sum(), values.len())
}

#[test]
fn shard_entry_counts_follow_adds_deletes_and_restarts() {
    let (mut server, metrics) = start();
    let mut root = bound(&server, ADMIN_DN, ADMIN_PW);
    let count_entries = |root: &mut crate::harness::Client| {
        let (entries, result) =
            root.search(BASE, Scope::Subtree, "(objectClass=*)", vec!["1.1"]).unwrap().success().unwrap();
        assert_eq!(result.rc, 0);
        entries.len() as f64
    };
    let present = count_entries(&mut root);
    let (_, text) = get(metrics, "/metrics");
    assert_eq!(per_shard_sum(&text, "ferrodir_shard_entries"), (present, 4), "{text}");
    let (waiting, shards) = per_shard_sum(&text, "ferrodir_shard_writes_waiting");
    assert_eq!((waiting, shards), (0.0, 4));

    for i in 0..6 {
        let dn = format!("cn=counted{i},{BASE}");
        let attrs = vec![("objectClass", HashSet::from(["person"])), ("sn", HashSet::from(["x"]))];
        assert_eq!(root.add(&dn, attrs).unwrap().rc, 0);
    }
    assert_eq!(root.delete(&format!("cn=counted0,{BASE}")).unwrap().rc, 0);
    let (_, text) = get(metrics, "/metrics");
    assert_eq!(per_shard_sum(&text, "ferrodir_shard_entries").0, present + 5.0, "{text}");
    // cn=Monitor's shard entries carry the same counts.
    let (shards, _) = root
        .search("cn=Shards,cn=Monitor", Scope::Subtree, "(cn=Entries)", vec!["monitorCounter"])
        .unwrap()
        .success()
        .unwrap();
    let monitored: f64 = shards
        .into_iter()
        .map(SearchEntry::construct)
        .map(|e| e.attrs["monitorCounter"][0].parse::<f64>().unwrap())
        .sum();
    assert_eq!(monitored, present + 5.0);
    drop(root);

    // Counted again from the files at startup.
    server.stop();
    server.restart();
    let mut root = bound(&server, ADMIN_DN, ADMIN_PW);
    assert_eq!(count_entries(&mut root), present + 5.0);
    let (_, text) = get(metrics, "/metrics");
    assert_eq!(per_shard_sum(&text, "ferrodir_shard_entries").0, present + 5.0, "{text}");
}

#[test]
fn promtool_accepts_the_output() {
    let (server, metrics) = start();
    searches(&server, 2);
    let (_, text) = get(metrics, "/metrics");
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus)");
    promtool.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let output = promtool.wait_with_output().unwrap();
    let report =
        String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "promtool check metrics: {report}");
    assert!(report.trim().is_empty(), "promtool has remarks: {report}");
}

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_prometheus_server_scrapes_a_rate_of_completed_operations() {
    let (server, metrics) = start();
    let dir = tempfile::tempdir().unwrap();
    let web = free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: ferrodir\n    static_configs:\n      - targets: ['{metrics}']\n"
        ),
    )
    .unwrap();
    let _prometheus = Prometheus(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package prometheus)"),
    );
    let query = "/api/v1/query?query=sum(rate(ferrodir_operations_completed_total%5B5s%5D))";
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        searches(&server, 10);
        if let Ok(stream) = TcpStream::connect(web) {
            drop(stream);
            let (status, body) = get(web, query);
            last = body.clone();
            // {"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[t,"R"]}]}}
            let rate = body
                .rsplit_once(",\"")
                .and_then(|(_, tail)| tail.split('"').next())
                .and_then(|r| r.parse::<f64>().ok());
            if status == 200 && rate.is_some_and(|r| r > 0.0) {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("Prometheus never saw a non-zero rate of completed operations; last answer: {last}");
}

#[test]
fn health_endpoints_and_the_healthcheck_command() {
    let (server, metrics) = start();
    assert_eq!(get(metrics, "/healthz"), (200, "ok\n".to_string()));
    assert_eq!(get(metrics, "/readyz"), (200, "ready\n".to_string()));
    assert_eq!(get(metrics, "/nothing").0, 404);
    let run = |args: &[&str]| Command::new(binary()).arg("healthcheck").args(args).output().unwrap();
    let ready = run(&["--config", server.config_path().to_str().unwrap()]);
    assert!(ready.status.success(), "{}", String::from_utf8_lossy(&ready.stderr));
    let live = run(&["--addr", &metrics.to_string(), "--live"]);
    assert!(live.status.success());
    let nobody = run(&["--addr", &free_port().to_string()]);
    assert_eq!(nobody.status.code(), Some(1), "a server that does not answer is not healthy");
}
