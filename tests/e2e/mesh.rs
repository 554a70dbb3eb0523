//! Multi-provider replication (`multi_provider = true`) between real binaries on loopback:
//! every node consumes every other one and takes writes. Checked with `*` `+` searches of
//! every node (DNs, values, entryUUID, entryCSN):
//! - a three-node mesh converges from one seeded node, with adds, modifies and deletes
//!   made on every node, and after a node stopped while the others changed;
//! - conflicts made by writing on two nodes that can't see each other (one of them stopped
//!   while the other writes, then the other way round), each resolved the same way on both:
//!   the larger entryCSN wins a concurrently modified entry, a delete wins over a modify, the
//!   entry with the larger entryCSN stays of two added under one DN; the conflicts counter
//!   counts them;
//! - a change is never sent back to the node it came from (the provider's cookie filter).

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use ldap3::{Mod, Scope, SearchEntry};

use crate::harness::{
    bound, free_port, http_get, metric_value, snapshot_of, Server, Snapshot, ADMIN_DN, ADMIN_PW, BASE,
};

/// Node `me` (0-based) of a mesh listening on `addrs`: server_id me+1, one consumer of each
/// other node (rid = its server_id). Only the first node starts with the example data.
fn node_config(me: usize, addrs: &[SocketAddr], metrics: SocketAddr, password_file: &Path) -> String {
    let peers = addrs.iter().enumerate().filter(|(peer, _)| *peer != me).map(|(peer, addr)| (peer, *addr));
    mesh_node_config(me, peers, metrics, password_file)
}

/// Node `me` (0-based) of a mesh: server_id me+1, a consumer (rid = the peer's server_id,
/// retried every second) of each of `peers` (a peer's index and where to reach it), metrics
/// at `metrics`, a 1-s shutdown grace. Only node 0 starts with the example data. Shared by
/// the mesh fault tests, whose peers are reached through relays.
pub(crate) fn mesh_node_config(
    me: usize,
    peers: impl Iterator<Item = (usize, SocketAddr)>,
    metrics: SocketAddr,
    password_file: &Path,
) -> String {
    let mut config = format!(
        r#"
server_id = {}
multi_provider = true
shards = 3
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = {}
metrics_listen = "{metrics}"
[limits]
shutdown_grace_s = 1
[log]
level = "info"
"#,
        me + 1,
        me == 0
    );
    for (peer, addr) in peers {
        config.push_str(&format!(
            r#"
[[replication]]
rid = {}
provider = "ldap://{addr}"
bind_dn = "{ADMIN_DN}"
password_file = "{}"
search_base = "{BASE}"
type = "refreshAndPersist"
retry = "1 +"
"#,
            peer + 1,
            password_file.display()
        ));
    }
    config
}

struct Mesh {
    nodes: Vec<Server>,
    metrics: Vec<SocketAddr>,
    _dir: tempfile::TempDir,
}

fn start_mesh(size: usize) -> Mesh {
    start_mesh_with(size, |_, config| config)
}

/// A mesh whose node configs `edit` changes (node index, config) first.
fn start_mesh_with(size: usize, edit: impl Fn(usize, String) -> String) -> Mesh {
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, format!("{ADMIN_PW}\n")).unwrap();
    let addrs: Vec<SocketAddr> = (0..size).map(|_| free_port()).collect();
    let metrics: Vec<SocketAddr> = (0..size).map(|_| free_port()).collect();
    let nodes = (0..size)
        .map(|me| {
            let config = edit(me, node_config(me, &addrs, metrics[me], &password));
            Server::start_at(&config, addrs[me], true)
        })
        .collect();
    Mesh { nodes, metrics, _dir: dir }
}

/// DN (lower case) → attribute (lower case) → sorted values, of the whole suffix, less
/// contextCSN (each node's own view of the mesh).

fn snapshot(server: &Server) -> Snapshot {
    let mut client = bound(server, ADMIN_DN, ADMIN_PW);
    let Ok(result) = client.search(BASE, Scope::Subtree, "(objectClass=*)", vec!["*", "+"]) else {
        return Snapshot::new();
    };
    let Ok((entries, _)) = result.success() else { return Snapshot::new() };
    snapshot_of(entries, |k| k != "contextcsn")
}

/// Waits until every running node shows the same content; returns it.
fn converge(nodes: &[&Server], what: &str) -> Snapshot {
    let limit = Duration::from_secs(30);
    let deadline = Instant::now() + limit;
    loop {
        let snaps: Vec<Snapshot> = nodes.iter().map(|n| snapshot(n)).collect();
        if !snaps[0].is_empty() && snaps.iter().all(|s| *s == snaps[0]) {
            return snaps.into_iter().next().unwrap_or_default();
        }
        if Instant::now() > deadline {
            let first = &snaps[0];
            for (i, other) in snaps.iter().enumerate().skip(1) {
                let missing: Vec<_> = first.keys().filter(|k| !other.contains_key(*k)).collect();
                let extra: Vec<_> = other.keys().filter(|k| !first.contains_key(*k)).collect();
                let differ: Vec<_> = first
                    .iter()
                    .filter(|(k, v)| other.get(*k).is_some_and(|o| o != *v))
                    .map(|(k, v)| (k, v, other.get(k)))
                    .take(2)
                    .collect();
                eprintln!("node {i} vs node 0: missing {missing:?}, extra {extra:?}, differing {differ:#?}");
            }
            for (i, n) in nodes.iter().enumerate() {
                let log = n.log();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                eprintln!("node {i} log tail: {tail:#?}");
            }
            panic!("{what}: the nodes differ after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn add(server: &Server, dn: &str, attrs: &[(&str, &[&str])]) {
    let mut client = bound(server, ADMIN_DN, ADMIN_PW);
    let attrs: Vec<(&str, std::collections::HashSet<&str>)> =
        attrs.iter().map(|(k, v)| (*k, v.iter().copied().collect())).collect();
    let result = client.add(dn, attrs).expect("add");
    assert_eq!(result.rc, 0, "add {dn}: {result:?}");
}

fn person(server: &Server, uid: &str) {
    let dn = format!("uid={uid},ou=people,{BASE}");
    add(server, &dn, &[("objectClass", &["inetOrgPerson"]), ("uid", &[uid]), ("cn", &[uid]), ("sn", &["S"])]);
}

fn set_description(server: &Server, dn: &str, value: &str) {
    let mut client = bound(server, ADMIN_DN, ADMIN_PW);
    let values = std::collections::HashSet::from([value]);
    let result = client.modify(dn, vec![Mod::Replace("description", values)]).expect("modify");
    assert_eq!(result.rc, 0, "modify {dn}: {result:?}");
}

fn delete(server: &Server, dn: &str) {
    let mut client = bound(server, ADMIN_DN, ADMIN_PW);
    let result = client.delete(dn).expect("delete");
    assert_eq!(result.rc, 0, "delete {dn}: {result:?}");
}

/// A counter's value in the node's metrics (0 when absent).
fn metric(addr: SocketAddr, line_prefix: &str) -> f64 {
    metric_value(addr, line_prefix).unwrap_or(0.0)
}

fn wait_ready(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(addr, "/readyz").0 != 200 {
        assert!(Instant::now() < deadline, "node at {addr} not ready (caught up with its peers) in 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn values(snap: &Snapshot, dn: &str, attr: &str) -> Vec<String> {
    snap.get(&dn.to_ascii_lowercase()).and_then(|e| e.get(attr)).cloned().unwrap_or_default()
}

#[test]
fn a_three_node_mesh_converges_with_writes_on_every_node() {
    let mut mesh = start_mesh(3);
    let seeded =
        converge(&mesh.nodes.iter().collect::<Vec<_>>(), "the seeded node's data reaches the others");
    assert!(seeded.len() >= 4, "{seeded:?}");
    for addr in &mesh.metrics {
        wait_ready(*addr);
    }
    // Writes on every node: adds, a modify of an entry another node added, a delete.
    for (i, node) in mesh.nodes.iter().enumerate() {
        for k in 0..5 {
            person(node, &format!("n{i}-{k}"));
        }
    }
    set_description(&mesh.nodes[1], &format!("uid=n0-0,ou=people,{BASE}"), "changed on node 1");
    delete(&mesh.nodes[2], &format!("uid=n1-4,ou=people,{BASE}"));
    let all: Vec<&Server> = mesh.nodes.iter().collect();
    let snap = converge(&all, "writes on every node");
    for i in 0..3 {
        for k in 0..5 {
            let dn = format!("uid=n{i}-{k},ou=people,{BASE}").to_ascii_lowercase();
            assert_eq!(snap.contains_key(&dn), !(i == 1 && k == 4), "{dn}");
        }
    }
    assert_eq!(values(&snap, &format!("uid=n0-0,ou=people,{BASE}"), "description"), ["changed on node 1"]);
    // Each node's own contextCSN vector names every server id that wrote.
    let mut client = bound(&mesh.nodes[0], ADMIN_DN, ADMIN_PW);
    let (entries, _) =
        client.search(BASE, Scope::Base, "(objectClass=*)", vec!["contextCSN"]).unwrap().success().unwrap();
    let csns = SearchEntry::construct(entries.into_iter().next().unwrap()).attrs["contextCSN"].clone();
    for sid in ["#001#", "#002#", "#003#"] {
        assert!(csns.iter().any(|c| c.contains(sid)), "contextCSN {csns:?} lacks {sid}");
    }
    // No change went back to its origin as a conflict: nothing was concurrent here.
    for addr in &mesh.metrics {
        assert_eq!(metric(*addr, "ferrodir_replication_conflicts_total{kind=\"modify\"}"), 0.0);
    }

    // A node stopped while the others write catches up when it comes back, and what it
    // wrote before it stopped is still everywhere.
    mesh.nodes[2].stop();
    person(&mesh.nodes[0], "while-down-0");
    person(&mesh.nodes[1], "while-down-1");
    set_description(&mesh.nodes[0], &format!("uid=n2-0,ou=people,{BASE}"), "changed while node 2 was down");
    delete(&mesh.nodes[1], &format!("uid=n2-1,ou=people,{BASE}"));
    let deletes_before: f64 = mesh.metrics[..2]
        .iter()
        .map(|m| metric(*m, "ferrodir_syncrepl_refreshes_total{phase=\"delete\"}"))
        .sum();
    mesh.nodes[2].restart();
    let all: Vec<&Server> = mesh.nodes.iter().collect();
    let snap = converge(&all, "a restarted node catches up");
    let deletes_after: f64 = mesh.metrics[..2]
        .iter()
        .map(|m| metric(*m, "ferrodir_syncrepl_refreshes_total{phase=\"delete\"}"))
        .sum();
    assert!(
        deletes_after >= deletes_before + 2.0,
        "the restarted node resumed from its cookies with delete phases"
    );
    for dn in ["uid=while-down-0", "uid=while-down-1", "uid=n2-2"] {
        assert!(snap.contains_key(&format!("{dn},ou=people,{BASE}").to_ascii_lowercase()), "{dn}");
    }
    assert!(!snap.contains_key(&format!("uid=n2-1,ou=people,{BASE}").to_ascii_lowercase()));
    assert_eq!(
        values(&snap, &format!("uid=n2-0,ou=people,{BASE}"), "description"),
        ["changed while node 2 was down"]
    );
    // And it takes writes again.
    person(&mesh.nodes[2], "after-restart");
    let snap = converge(&mesh.nodes.iter().collect::<Vec<_>>(), "a write on the restarted node");
    assert!(snap.contains_key(&format!("uid=after-restart,ou=people,{BASE}").to_ascii_lowercase()));
}

#[test]
fn conflicts_resolve_the_same_way_on_both_nodes() {
    let mut mesh = start_mesh(2);
    converge(&mesh.nodes.iter().collect::<Vec<_>>(), "the seeded node's data reaches the other");
    for k in ["x", "z", "y", "r", "t"] {
        person(&mesh.nodes[0], k);
    }
    add(
        &mesh.nodes[0],
        &format!("ou=tmp,{BASE}"),
        &[("objectClass", &["organizationalUnit"]), ("ou", &["tmp"])],
    );
    converge(&mesh.nodes.iter().collect::<Vec<_>>(), "the entries the conflicts are about");
    let dn = |uid: &str| format!("uid={uid},ou=people,{BASE}");

    // Node 1 down: node 0 changes x, deletes z and adds w. Node 0 down, node 1 up: node 1
    // changes x later, modifies z, and adds its own w. Neither has seen the other's.
    mesh.nodes[1].stop();
    set_description(&mesh.nodes[0], &dn("x"), "from node 0");
    delete(&mesh.nodes[0], &dn("z"));
    add(
        &mesh.nodes[0],
        &dn("w"),
        &[("objectClass", &["inetOrgPerson"]), ("uid", &["w"]), ("cn", &["from node 0"]), ("sn", &["S"])],
    );
    // y: node 0 changes telephoneNumber, node 1 (later) description; r: node 0 renames it,
    // node 1 (later) changes its description.
    let mut client = bound(&mesh.nodes[0], ADMIN_DN, ADMIN_PW);
    let phone = std::collections::HashSet::from(["+1 555 0100"]);
    assert_eq!(client.modify(&dn("y"), vec![Mod::Replace("telephoneNumber", phone)]).unwrap().rc, 0);
    assert_eq!(client.modifydn(&dn("r"), "uid=r2", true, None).unwrap().rc, 0);
    assert_eq!(client.modifydn(&dn("t"), "uid=t-a", true, None).unwrap().rc, 0);
    assert_eq!(client.delete(&format!("ou=tmp,{BASE}")).unwrap().rc, 0);
    drop(client);
    mesh.nodes[0].stop();
    mesh.nodes[1].restart();
    set_description(&mesh.nodes[1], &dn("y"), "from node 1");
    set_description(&mesh.nodes[1], &dn("r"), "from node 1");
    set_description(&mesh.nodes[1], &dn("x"), "from node 1");
    let mut client = bound(&mesh.nodes[1], ADMIN_DN, ADMIN_PW);
    assert_eq!(client.modifydn(&dn("t"), "uid=t-b", true, None).unwrap().rc, 0);
    drop(client);
    add(
        &mesh.nodes[1],
        &format!("uid=kid,ou=tmp,{BASE}"),
        &[("objectClass", &["inetOrgPerson"]), ("uid", &["kid"]), ("cn", &["kid"]), ("sn", &["K"])],
    );
    set_description(&mesh.nodes[1], &dn("z"), "modified on node 1 after node 0 deleted it");
    add(
        &mesh.nodes[1],
        &dn("w"),
        &[("objectClass", &["inetOrgPerson"]), ("uid", &["w"]), ("cn", &["from node 1"]), ("sn", &["S"])],
    );
    mesh.nodes[0].restart();

    let snap = converge(&mesh.nodes.iter().collect::<Vec<_>>(), "after the conflicts");
    // The larger CSN wins x's description (node 1 wrote last).
    assert_eq!(values(&snap, &dn("x"), "description"), ["from node 1"]);
    // Concurrent modifies of different attributes both survive.
    assert_eq!(values(&snap, &dn("y"), "telephonenumber"), ["+1 555 0100"]);
    assert_eq!(values(&snap, &dn("y"), "description"), ["from node 1"]);
    // A rename and a concurrent modify: the modify follows the entry to its new name.
    assert!(!snap.contains_key(&dn("r").to_ascii_lowercase()), "r was renamed on node 0");
    assert_eq!(values(&snap, &dn("r2"), "description"), ["from node 1"]);
    // The delete wins over the later modify.
    assert!(!snap.contains_key(&dn("z").to_ascii_lowercase()), "z was deleted on node 0: {snap:?}");
    // Two renames: the larger CSN (node 1's) names the entry.
    let t: Vec<&String> = snap.keys().filter(|k| k.starts_with("uid=t")).collect();
    assert_eq!(
        t,
        [&dn("t-b").to_ascii_lowercase()],
        "{:?}",
        snap.iter().filter(|(k, _)| k.starts_with("uid=t")).collect::<Vec<_>>()
    );
    // A child added under a parent deleted elsewhere: the parent is glue, the child stays.
    let tmp = format!("ou=tmp,{BASE}").to_ascii_lowercase();
    assert!(snap.contains_key(&format!("uid=kid,{tmp}")), "the child stays: {snap:?}");
    let classes = snap.get(&tmp).and_then(|e| e.get("objectclass")).cloned().unwrap_or_default();
    assert!(classes.iter().any(|c| c.eq_ignore_ascii_case("glue")), "ou=tmp is glue: {classes:?}");
    // Of the two w, the one with the larger entryCSN (node 1's) stays, with its uuid.
    assert_eq!(values(&snap, &dn("w"), "cn"), ["from node 1"]);
    let counted = |kind: &str| {
        mesh.metrics
            .iter()
            .map(|m| metric(*m, &format!("ferrodir_replication_conflicts_total{{kind=\"{kind}\"}}")))
            .sum::<f64>()
    };
    // A conflict is counted where the losing change arrives. Node 0 holds its own w when
    // node 1's comes, whatever the order of the two refreshes; whether the older x and
    // the modify of z reach the other node depends on which refresh runs first (a node
    // that already took the winner sends that instead).
    assert!(counted("add") >= 1.0, "node 0 met node 1's w, which replaced its own");
    let logs: String = mesh.nodes.iter().map(Server::log).collect();
    assert!(logs.contains("replication conflict"), "the log names each conflict");
    // Observability: the CSN of each server id in the metrics, and per peer in cn=Monitor
    // its state, lag and conflicts.
    for sid in ["1", "2"] {
        let line = format!("ferrodir_replication_sid_csn_seconds{{sid=\"{sid}\"}}");
        assert!(metric(mesh.metrics[0], &line) > 1.7e9, "{line}");
    }
    let mut client = bound(&mesh.nodes[0], ADMIN_DN, ADMIN_PW);
    let (entries, _) = client
        .search(
            "cn=Consumer 002,cn=Database 1,cn=Databases,cn=Monitor",
            Scope::Base,
            "(objectClass=*)",
            vec!["*", "+"],
        )
        .unwrap()
        .success()
        .unwrap();
    let peer = SearchEntry::construct(entries.into_iter().next().expect("cn=Consumer 002"));
    assert_eq!(peer.attrs["olmSRSyncPhase"], ["Persist"]);
    let info = &peer.attrs["monitoredInfo"];
    assert!(info.iter().any(|v| v.starts_with("lag ")), "{info:?}");
    assert!(
        info.iter().any(|v| v.starts_with("conflicts ") && !v.contains("add=0")),
        "node 0 met an add conflict: {info:?}"
    );
}

#[test]
fn a_peer_with_the_same_server_id_is_refused_and_named() {
    // Node 1 wrongly has node 0's server_id.
    let mesh =
        start_mesh_with(
            2,
            |me, config| if me == 1 { config.replace("server_id = 2", "server_id = 1") } else { config },
        );
    let deadline = Instant::now() + Duration::from_secs(20);
    let (provider_said, consumer_said) = loop {
        let provider = mesh.nodes[0].log().contains("a mesh peer connected with this node's own server_id");
        let consumer = mesh.nodes[1].log().contains("is both this node's and the consumer's");
        if (provider && consumer) || Instant::now() > deadline {
            break (provider, consumer);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(provider_said, "node 0 logs the refusal: {}", mesh.nodes[0].log());
    assert!(consumer_said, "node 1 logs why, with node 0's URL: {}", mesh.nodes[1].log());
    let consumer_log = mesh.nodes[1].log();
    assert!(consumer_log.contains(&mesh.nodes[0].addr.to_string()), "the consumer's log names the provider");
    // Nothing replicated: node 1 has no suffix entry, and is not ready.
    assert!(snapshot(&mesh.nodes[1]).is_empty());
    assert_ne!(http_get(mesh.metrics[1], "/readyz").0, 200);
}

#[test]
fn a_node_behind_every_delete_log_reloads_with_a_present_phase() {
    // Node 0 keeps 3 delete-log records: a peer away for more deletes than that can't get
    // a delete phase and must be given a present phase, which deletes what is gone.
    let mut mesh = start_mesh_with(2, |me, config| {
        if me == 0 {
            config.replace("[limits]\n", "[limits]\nsync_delete_log_max = 3\n")
        } else {
            config
        }
    });
    for k in 0..12 {
        person(&mesh.nodes[0], &format!("d{k}"));
    }
    converge(&mesh.nodes.iter().collect::<Vec<_>>(), "the entries to delete");
    let presents = |m: &Mesh| metric(m.metrics[0], "ferrodir_syncrepl_refreshes_total{phase=\"present\"}");
    let before = presents(&mesh);
    mesh.nodes[1].stop();
    for k in 0..10 {
        delete(&mesh.nodes[0], &format!("uid=d{k},ou=people,{BASE}"));
    }
    person(&mesh.nodes[0], "after-deletes");
    mesh.nodes[1].restart();
    let snap = converge(&mesh.nodes.iter().collect::<Vec<_>>(), "a node behind the delete log");
    for k in 0..10 {
        assert!(!snap.contains_key(&format!("uid=d{k},ou=people,{BASE}").to_ascii_lowercase()), "d{k}");
    }
    assert!(snap.contains_key(&format!("uid=d11,ou=people,{BASE}").to_ascii_lowercase()));
    assert!(presents(&mesh) > before, "node 0 served node 1 a present phase");
}

/// A TLV with a definite length (short or long form).
fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    if body.len() < 0x80 {
        out.push(body.len() as u8);
    } else {
        let len = (body.len() as u32).to_be_bytes();
        let skip = len.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (4 - skip) as u8);
        out.extend_from_slice(&len[skip..]);
    }
    out.extend_from_slice(body);
    out
}

/// Reads one LDAP message from `stream`; its message id (None: the peer closed).
fn read_message(stream: &mut std::net::TcpStream) -> Option<u8> {
    use std::io::Read;
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).ok()?;
    let len = if head[1] < 0x80 {
        head[1] as usize
    } else {
        let mut bytes = vec![0u8; (head[1] & 0x7f) as usize];
        stream.read_exact(&mut bytes).ok()?;
        bytes.iter().fold(0usize, |n, b| n << 8 | *b as usize)
    };
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).ok()?;
    // 02 01 id: the message ids ferrodir's consumer uses are small.
    body.get(2).copied()
}

#[test]
fn a_provider_sending_a_malformed_sync_message_is_dropped_and_retried() {
    use std::io::Write;
    // A fake peer: binds anyone, then answers the sync search with an entry whose Sync
    // State control does not decode, and closes.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = listener.local_addr().unwrap();
    let sessions = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = sessions.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(20) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let Some(bind) = read_message(&mut stream) else { continue };
            let done = [tlv(0x0a, &[0]), tlv(0x04, b""), tlv(0x04, b"")].concat();
            let _ = stream.write_all(&tlv(0x30, &[tlv(0x02, &[bind]), tlv(0x61, &done)].concat()));
            let Some(search) = read_message(&mut stream) else { continue };
            let entry = tlv(0x64, &[tlv(0x04, BASE.as_bytes()), tlv(0x30, b"")].concat());
            let control =
                tlv(0x30, &[tlv(0x04, b"1.3.6.1.4.1.4203.1.9.1.2"), tlv(0x04, &[0xff, 0xff, 0x01])].concat());
            let message = [tlv(0x02, &[search]), entry, tlv(0xa0, &control)].concat();
            let _ = stream.write_all(&tlv(0x30, &message));
        }
    });
    let node = Server::start_logged(&format!(
        r#"
server_id = 1
multi_provider = true
shards = 2
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = true
[log]
level = "info"
[[replication]]
rid = 2
provider = "ldap://{fake}"
bind_dn = "{ADMIN_DN}"
password_file = "/dev/null"
search_base = "{BASE}"
type = "refreshAndPersist"
retry = "1 +"
"#
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    while sessions.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        assert!(Instant::now() < deadline, "the consumer retried on its schedule: {}", node.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The node kept serving throughout, and took writes.
    person(&node, "still-serving");
    let snap = snapshot(&node);
    assert!(snap.contains_key(&format!("uid=still-serving,ou=people,{BASE}").to_ascii_lowercase()));
    assert!(node.log().contains("Sync State"), "the log says what was malformed: {}", node.log());
    assert!(node.log().contains("replication session ended"), "{}", node.log());
}

#[test]
fn a_read_replica_follows_any_node_of_the_mesh() {
    let mesh = start_mesh(2);
    converge(&mesh.nodes.iter().collect::<Vec<_>>(), "the mesh");
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, format!("{ADMIN_PW}\n")).unwrap();
    // A plain read replica (no multi_provider) of node 0.
    let replica = Server::start_logged(&format!(
        r#"
shards = 2
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = false
[log]
level = "info"
[[replication]]
rid = 9
provider = "ldap://{}"
bind_dn = "{ADMIN_DN}"
password_file = "{}"
search_base = "{BASE}"
type = "refreshAndPersist"
retry = "1 +"
"#,
        mesh.nodes[0].addr,
        password.display()
    ));
    // A write on the other node reaches the replica through node 0.
    person(&mesh.nodes[1], "seen-by-the-replica");
    let snap = converge(&[&mesh.nodes[0], &mesh.nodes[1], &replica], "a replica of node 0");
    assert!(snap.contains_key(&format!("uid=seen-by-the-replica,ou=people,{BASE}").to_ascii_lowercase()));
    // It stays read-only, and the bookkeeping attribute of the mesh never reaches it.
    let mut client = bound(&replica, ADMIN_DN, ADMIN_PW);
    let refused = client.delete(&format!("uid=seen-by-the-replica,ou=people,{BASE}")).unwrap();
    assert_eq!(refused.rc, 53);
    let (entries, _) = client
        .search(BASE, Scope::Subtree, "(objectClass=*)", vec!["*", "+", "ferrodirAttrCSN"])
        .unwrap()
        .success()
        .unwrap();
    let carried = entries
        .into_iter()
        .map(SearchEntry::construct)
        .filter(|e| e.attrs.contains_key("ferrodirAttrCSN"))
        .count();
    assert_eq!(carried, 0, "a replica asks for * and +, which leave ferrodirAttrCSN out");
    // A mesh node shows it to a search that names it, and `+` leaves it out.
    let mut node = bound(&mesh.nodes[1], ADMIN_DN, ADMIN_PW);
    let dn = format!("uid=seen-by-the-replica,ou=people,{BASE}");
    let named = node
        .search(&dn, Scope::Base, "(objectClass=*)", vec!["ferrodirAttrCSN"])
        .unwrap()
        .success()
        .unwrap()
        .0;
    assert!(SearchEntry::construct(named.into_iter().next().unwrap()).attrs.contains_key("ferrodirAttrCSN"));
    let plus = node.search(&dn, Scope::Base, "(objectClass=*)", vec!["+"]).unwrap().success().unwrap().0;
    assert!(!SearchEntry::construct(plus.into_iter().next().unwrap()).attrs.contains_key("ferrodirAttrCSN"));
}

#[test]
fn uniqueness_holds_per_node_and_refint_rewrites_replicate() {
    let mut mesh = start_mesh_with(2, |_, config| {
        config.replace(
            "[limits]\n",
            "[refint]\nenabled = true\n[[unique]]\nattributes = [\"mail\"]\n[limits]\n",
        )
    });
    converge(&mesh.nodes.iter().collect::<Vec<_>>(), "the mesh");
    fn with_mail(uid: &str) -> Vec<(&'static str, Vec<&str>)> {
        vec![
            ("objectClass", vec!["inetOrgPerson"]),
            ("uid", vec![uid]),
            ("cn", vec![uid]),
            ("sn", vec!["S"]),
            ("mail", vec!["same@example.com"]),
        ]
    }
    let add_owned = |server: &Server, uid: &str| {
        let attrs = with_mail(uid);
        let borrowed: Vec<(&str, &[&str])> = attrs.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        add(server, &format!("uid={uid},ou=people,{BASE}"), &borrowed);
    };
    // On one node a second entry with the same mail is refused (19).
    add_owned(&mesh.nodes[0], "m1");
    converge(&mesh.nodes.iter().collect::<Vec<_>>(), "m1");
    let mut client = bound(&mesh.nodes[1], ADMIN_DN, ADMIN_PW);
    let attrs: Vec<(&str, std::collections::HashSet<&str>)> =
        with_mail("m2").into_iter().map(|(k, v)| (k, v.into_iter().collect())).collect();
    let refused = client.add(&format!("uid=m2,ou=people,{BASE}"), attrs).unwrap();
    assert_eq!(refused.rc, 19, "each node checks against its own data: {refused:?}");
    drop(client);
    // Two nodes that can't see each other both accept a value: both entries replicate.
    delete(&mesh.nodes[0], &format!("uid=m1,ou=people,{BASE}"));
    converge(&mesh.nodes.iter().collect::<Vec<_>>(), "m1 deleted");
    mesh.nodes[1].stop();
    add_owned(&mesh.nodes[0], "a1");
    mesh.nodes[0].stop();
    mesh.nodes[1].restart();
    add(
        &mesh.nodes[1],
        &format!("uid=a2,ou=people,{BASE}"),
        &[
            ("objectClass", &["inetOrgPerson"]),
            ("uid", &["a2"]),
            ("cn", &["a2"]),
            ("sn", &["S"]),
            ("mail", &["same@example.com"]),
        ],
    );
    mesh.nodes[0].restart();
    let snap = converge(&mesh.nodes.iter().collect::<Vec<_>>(), "a value taken on two nodes at once");
    for uid in ["a1", "a2"] {
        assert_eq!(
            values(&snap, &format!("uid={uid},ou=people,{BASE}"), "mail"),
            ["same@example.com"],
            "{uid}"
        );
    }
    // Referential integrity: a delete on one node empties the references on every node.
    add(
        &mesh.nodes[0],
        &format!("cn=team,ou=groups,{BASE}"),
        &[
            ("objectClass", &["groupOfNames"]),
            ("cn", &["team"]),
            ("member", &[&format!("uid=a1,ou=people,{BASE}"), &format!("uid=a2,ou=people,{BASE}")]),
        ],
    );
    converge(&mesh.nodes.iter().collect::<Vec<_>>(), "the group");
    delete(&mesh.nodes[1], &format!("uid=a1,ou=people,{BASE}"));
    let snap = converge(&mesh.nodes.iter().collect::<Vec<_>>(), "refint's rewrite");
    assert_eq!(
        values(&snap, &format!("cn=team,ou=groups,{BASE}"), "member"),
        [format!("uid=a2,ou=people,{BASE}")]
    );
}
