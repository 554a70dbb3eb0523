//! The crash test: concurrent writers against the real binary, SIGKILL at random moments,
//! restart, and check that nothing acknowledged was lost and nothing unacknowledged was
//! half-applied.
//!
//! Needs the server's `fault-injection` feature (`required-features`; tests/run.sh enables
//! it). With `[testing] simulate_power_cut = true` every redb file goes through a backend that
//! keeps unsynced writes in process memory, so SIGKILL acts as a power cut: an
//! acknowledgement sent before its sync shows up as a lost write. `broken_server_is_caught`
//! proves the test can see that, by running a server that acknowledges before syncing.
//!
//! Cycles: `FERRODIR_CRASH_CYCLES` (default 50 for redb, 10 for sled); seed:
//! `FERRODIR_CRASH_SEED`. `tests/crash/soak.sh` runs any count.

#[allow(dead_code)]
#[path = "../e2e/harness.rs"]
mod harness;
mod model;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::{connect_url, wait_until, Server, ADMIN_DN, ADMIN_PW};
use ldap3::{Mod, Scope, SearchEntry};
use model::{Model, Observed, Op, SUBTREE_MEMBERS};

const WRITERS: usize = 4;
/// How long a cycle waits for its writers' first acknowledged write before it fails.
const FIRST_ACK_TIMEOUT: Duration = Duration::from_secs(30);
/// refint's placeholder: what a reference attribute holds once its last value's entry left.
const PLACEHOLDER: &str = "cn=nobody,dc=example,dc=com";
/// The attributes whose values name entries: after every restart, each names an entry that
/// exists, or is the placeholder.
const REFERENCES: [&str; 3] = ["member", "manager", "seeAlso"];

fn config(engine: &str, power_cut: bool, ack_before_sync: bool) -> String {
    config_refint(engine, power_cut, ack_before_sync, true)
}

fn config_refint(engine: &str, power_cut: bool, ack_before_sync: bool, refint: bool) -> String {
    let durability = if engine == "sled" { "process-crash-only" } else { "power-loss" };
    format!(
        r#"
shards = 4
engine = "{engine}"
durability = "{durability}"
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = true
[log]
level = "error"
[refint]
enabled = {refint}
nothing = "{PLACEHOLDER}"
[testing]
simulate_power_cut = {power_cut}
ack_before_sync = {ack_before_sync}
"#
    )
}

/// A small deterministic generator (xorshift64*), seeded per run and printed, so a failing
/// run can be repeated.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn set(values: &[&'static str]) -> HashSet<&'static str> {
    values.iter().copied().collect()
}

/// Creates each writer's containers and subtree; these are acknowledged before any kill.
fn setup(url: &str, models: &[Model]) {
    let mut conn = connect_url(url);
    conn.simple_bind(ADMIN_DN, ADMIN_PW).expect("bind").success().expect("bind ok");
    for m in models {
        let ou = |dn: &str, name: String| (dn.to_string(), name);
        let mut dns = vec![ou(&m.root(), format!("w{}", m.writer))];
        for which in ['a', 'b'] {
            dns.push(ou(&m.container(which), which.to_string()));
        }
        dns.push(ou(&m.subtree_dn(m.subtree), m.subtree.to_string()));
        for (dn, name) in dns {
            let attrs = vec![("objectClass", set(&["organizationalUnit"])), ("ou", [name.as_str()].into())];
            conn.add(&dn, attrs).expect("add").success().expect("setup add");
        }
        for i in 0..SUBTREE_MEMBERS {
            let cn = format!("s{i}");
            let attrs = vec![("objectClass", set(&["organizationalRole"])), ("cn", [cn.as_str()].into())];
            conn.add(&m.member_dn(m.subtree, i), attrs).expect("add").success().expect("setup add");
        }
        let members: Vec<String> = (0..SUBTREE_MEMBERS).map(|i| m.member_dn(m.subtree, i)).collect();
        let attrs = vec![
            ("objectClass", set(&["groupOfNames"])),
            ("cn", set(&["g"])),
            ("member", members.iter().map(String::as_str).collect()),
        ];
        conn.add(&m.group_dn(), attrs).expect("add").success().expect("setup add");
    }
}

struct Outcome {
    model: Model,
    /// Sent, and the connection died before the reply.
    in_doubt: Option<Op>,
    acked: u64,
    refused: Vec<String>,
}

/// One writer: random operations on its own part of the tree until the server dies. Each
/// acknowledged write also counts in `acks`, which the cycle waits on before its kill.
fn writer(url: String, mut model: Model, seed: u64, acks: Arc<AtomicU64>) -> Outcome {
    let mut rng = Rng(seed | 1);
    let outcome = |model: Model, in_doubt, acked, refused| Outcome { model, in_doubt, acked, refused };
    let settings = ldap3::LdapConnSettings::new().set_conn_timeout(Duration::from_secs(5));
    let Ok(mut conn) = ldap3::LdapConn::with_settings(settings, &url) else {
        return outcome(model, None, 0, Vec::new());
    };
    match conn.simple_bind(ADMIN_DN, ADMIN_PW) {
        Ok(res) if res.rc == 0 => {}
        _ => return outcome(model, None, 0, Vec::new()),
    }
    let mut acked = 0;
    let mut refused = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let op = model.next_op(rng.next());
        let sent = match &op {
            Op::Add { n, parent } => {
                let uid = model.uid(*n);
                // References for refint to keep right: its manager is the oldest leaf still
                // there (deleted and moved by later operations), its seeAlso a subtree member.
                let manager = match model.leaves.iter().next() {
                    Some((&m, leaf)) => model.leaf_dn(m, leaf.parent),
                    None => model.member_dn(model.subtree, 0),
                };
                let see_also = model.member_dn(model.subtree, 1);
                let attrs = vec![
                    ("objectClass", set(&["inetOrgPerson"])),
                    ("uid", [uid.as_str()].into()),
                    ("cn", [uid.as_str()].into()),
                    ("sn", set(&["v0"])),
                    ("description", set(&["v0"])),
                    ("manager", [manager.as_str()].into()),
                    ("seeAlso", [see_also.as_str()].into()),
                ];
                conn.with_timeout(Duration::from_secs(30)).add(&model.leaf_dn(*n, *parent), attrs)
            }
            Op::Modify { n, version } => {
                let leaf = &model.leaves[n];
                let v = format!("v{version}");
                let mods = vec![
                    Mod::Replace("description", [v.as_str()].into()),
                    Mod::Replace("sn", [v.as_str()].into()),
                ];
                conn.with_timeout(Duration::from_secs(30)).modify(&model.leaf_dn(*n, leaf.parent), mods)
            }
            Op::Delete { n } => {
                let leaf = &model.leaves[n];
                conn.with_timeout(Duration::from_secs(30)).delete(&model.leaf_dn(*n, leaf.parent))
            }
            Op::Move { n, to } => {
                let leaf = &model.leaves[n];
                let rdn = format!("uid={}", model.uid(*n));
                let dn = model.leaf_dn(*n, leaf.parent);
                let superior = model.container(*to);
                conn.with_timeout(Duration::from_secs(30)).modifydn(&dn, &rdn, true, Some(&superior))
            }
            Op::RenameSubtree { to } => {
                let dn = model.subtree_dn(model.subtree);
                conn.with_timeout(Duration::from_secs(30)).modifydn(&dn, &format!("ou={to}"), true, None)
            }
        };
        match sent {
            Ok(res) if res.rc == 0 => {
                model.apply(&op);
                acked += 1;
                acks.fetch_add(1, Ordering::SeqCst);
            }
            Ok(res) => refused.push(format!("{op:?}: {} {}", res.rc, res.text)),
            Err(_) => return outcome(model, Some(op), acked, refused),
        }
    }
    outcome(model, None, acked, refused)
}

/// Everything under one writer's root, by normalised DN.
fn observe(conn: &mut ldap3::LdapConn, root: &str) -> Result<Observed, String> {
    let (entries, _) = conn
        .with_timeout(Duration::from_secs(30))
        .search(root, Scope::Subtree, "(objectClass=*)", vec!["description", "sn"])
        .and_then(|r| r.success())
        .map_err(|e| format!("search {root}: {e}"))?;
    let mut out = Observed::new();
    for entry in entries {
        let entry = SearchEntry::construct(entry);
        let first = |name: &str| entry.attrs.get(name).and_then(|v| v.first().cloned());
        // The fixed entries carry no description; sn matters only beside it.
        let description = first("description");
        let sn = description.as_ref().and(first("sn"));
        out.insert(entry.dn.to_lowercase(), (description, sn));
    }
    Ok(out)
}

fn describe_difference(expected: &Observed, observed: &Observed) -> String {
    let mut lines = Vec::new();
    for (dn, value) in expected {
        match observed.get(dn) {
            None => lines.push(format!("missing {dn}")),
            Some(found) if found != value => lines.push(format!("{dn}: expected {value:?}, found {found:?}")),
            _ => {}
        }
    }
    for dn in observed.keys().filter(|dn| !expected.contains_key(*dn)) {
        lines.push(format!("unexpected {dn}"));
    }
    lines.join("; ")
}

/// Compares the restarted server with each writer's model (allowing the in-flight operation
/// to have happened, entirely) and checks that the equality index and hasSubordinates agree.
/// Returns how many in-flight operations were found applied.
fn check(url: &str, outcomes: &mut [Outcome]) -> Result<usize, String> {
    let mut conn = connect_url(url);
    conn.simple_bind(ADMIN_DN, ADMIN_PW).and_then(|r| r.success()).map_err(|e| format!("bind: {e}"))?;
    let mut applied = 0;
    for outcome in outcomes.iter_mut() {
        let model = &mut outcome.model;
        let observed = observe(&mut conn, &model.root())?;
        let before = model.expected();
        if observed != before {
            let Some(op) = &outcome.in_doubt else {
                return Err(format!(
                    "writer {}: acknowledged state differs (nothing was in flight): {}",
                    model.writer,
                    describe_difference(&before, &observed)
                ));
            };
            let mut after = model.clone();
            after.apply(op);
            if observed != after.expected() {
                return Err(format!(
                    "writer {}: neither the acknowledged state nor it plus the in-flight {op:?}: \
                     against acknowledged: {}; against applied: {}",
                    model.writer,
                    describe_difference(&before, &observed),
                    describe_difference(&after.expected(), &observed)
                ));
            }
            *model = after;
            applied += 1;
        }
        check_references(&mut conn, &model.root(), &observed)?;
        for (&n, leaf) in &model.leaves {
            let filter = format!("(uid={})", model.uid(n));
            let (found, _) = conn
                .with_timeout(Duration::from_secs(30))
                .search(model::SUFFIX, Scope::Subtree, &filter, vec!["1.1"])
                .and_then(|r| r.success())
                .map_err(|e| format!("search {filter}: {e}"))?;
            let dns: Vec<String> =
                found.into_iter().map(|e| SearchEntry::construct(e).dn.to_lowercase()).collect();
            if dns != vec![model.leaf_dn(n, leaf.parent)] {
                return Err(format!(
                    "index: {filter} found {dns:?}, expected {}",
                    model.leaf_dn(n, leaf.parent)
                ));
            }
        }
        let nonempty = model.nonempty_containers();
        for which in ['a', 'b'] {
            let dn = model.container(which);
            let (found, _) = conn
                .with_timeout(Duration::from_secs(30))
                .search(&dn, Scope::Base, "(objectClass=*)", vec!["hasSubordinates"])
                .and_then(|r| r.success())
                .map_err(|e| format!("search {dn}: {e}"))?;
            let has = found
                .into_iter()
                .next()
                .map(SearchEntry::construct)
                .and_then(|e| e.attrs.get("hasSubordinates").and_then(|v| v.first().cloned()));
            let want = if nonempty.contains(&which) { "TRUE" } else { "FALSE" };
            if has.as_deref() != Some(want) {
                return Err(format!("{dn}: hasSubordinates {has:?}, expected {want}"));
            }
        }
    }
    Ok(applied)
}

/// Referential integrity held through the crash: every value of member, manager and seeAlso
/// under `root` names an entry that exists (`entries`) or is the placeholder. A delete or
/// rename acknowledged (or in flight) before the cut whose references were not rewritten
/// leaves one naming a DN that is gone.
fn check_references(conn: &mut ldap3::LdapConn, root: &str, entries: &Observed) -> Result<(), String> {
    let (found, _) = conn
        .with_timeout(Duration::from_secs(30))
        .search(root, Scope::Subtree, "(|(member=*)(manager=*)(seeAlso=*))", REFERENCES.to_vec())
        .and_then(|r| r.success())
        .map_err(|e| format!("search references under {root}: {e}"))?;
    for entry in found.into_iter().map(SearchEntry::construct) {
        for (name, values) in &entry.attrs {
            for value in values {
                let value = value.to_lowercase();
                if value != PLACEHOLDER && !entries.contains_key(&value) {
                    return Err(format!("refint: {} {name}: {value} names no entry", entry.dn));
                }
            }
        }
    }
    Ok(())
}

fn verify_offline(server: &Server) -> Result<(), String> {
    match server.verify() {
        (true, _) => Ok(()),
        (false, report) => Err(format!("verify failed: {report}")),
    }
}

struct Summary {
    cycles: u64,
    acked: u64,
    in_doubt: u64,
    in_doubt_applied: usize,
    refused: usize,
}

/// Runs `cycles` kill/restart cycles; Err describes the first violation found.
fn run(config: &str, cycles: u64, seed: u64) -> Result<Summary, String> {
    let mut rng = Rng(seed | 1);
    let mut server = Server::start_with_config(config);
    let mut models: Vec<Model> = (0..WRITERS).map(Model::new).collect();
    setup(&server.url(), &models);
    let mut summary = Summary { cycles: 0, acked: 0, in_doubt: 0, in_doubt_applied: 0, refused: 0 };
    for cycle in 0..cycles {
        let url = server.url();
        let acks = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = models
            .drain(..)
            .map(|m| {
                let (url, seed, acks) = (url.clone(), rng.next(), acks.clone());
                std::thread::spawn(move || writer(url, m, seed, acks))
            })
            .collect();
        // The cut comes at a random moment once writes are flowing: a cycle in which the
        // writers could not connect, bind or write would check nothing and pass.
        let flowing = wait_until(Instant::now() + FIRST_ACK_TIMEOUT, || acks.load(Ordering::SeqCst) > 0);
        if flowing {
            std::thread::sleep(Duration::from_millis(30 + rng.next() % 400));
        }
        server.kill();
        let mut outcomes: Vec<Outcome> = handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a writer panicked".to_string()))
            .collect::<Result<_, _>>()?;
        let cycle_acked: u64 = outcomes.iter().map(|o| o.acked).sum();
        if !flowing || cycle_acked == 0 {
            return Err(format!(
                "cycle {cycle}: no write was acknowledged within {FIRST_ACK_TIMEOUT:?} \
                 (the writers could not connect, bind or write): the cycle would check nothing"
            ));
        }
        // A server that refuses to start after the cut (it finds a shard file empty or
        // damaged: docs/ARCHITECTURE.md, "Faults") has lost data too: a violation to report.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.restart())).is_err() {
            return Err(format!("cycle {cycle}: the server refused to start after the cut (see its stderr)"));
        }
        let applied = check(&server.url(), &mut outcomes).map_err(|e| format!("cycle {cycle}: {e}"))?;
        server.stop();
        verify_offline(&server).map_err(|e| format!("cycle {cycle}: {e}"))?;
        server.restart();
        summary.cycles += 1;
        summary.in_doubt_applied += applied;
        for outcome in outcomes {
            summary.acked += outcome.acked;
            summary.in_doubt += u64::from(outcome.in_doubt.is_some());
            summary.refused += outcome.refused.len();
            for line in outcome.refused.iter().take(3) {
                eprintln!("refused (not applied, reply received): {line}");
            }
            models.push(outcome.model);
        }
    }
    server.stop();
    Ok(summary)
}

fn seed() -> u64 {
    let default = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7);
    env_number("FERRODIR_CRASH_SEED", default)
}

fn run_and_report(name: &str, config: &str, default_cycles: u64) {
    let cycles = env_number("FERRODIR_CRASH_CYCLES", default_cycles);
    let seed = seed();
    let started = Instant::now();
    match run(config, cycles, seed) {
        Ok(s) => eprintln!(
            "crash test {name}: {} kill cycles, {} acknowledged writes all present, {} in flight at a kill \
             ({} found applied, entirely), {} refused; {:.0}s (seed {seed})",
            s.cycles,
            s.acked,
            s.in_doubt,
            s.in_doubt_applied,
            s.refused,
            started.elapsed().as_secs_f64()
        ),
        Err(violation) => panic!("crash test {name} (seed {seed}): {violation}"),
    }
}

#[test]
fn redb_survives_power_cuts() {
    run_and_report("redb, simulated power cut", &config("redb", true, false), 50);
}

#[test]
fn sled_survives_kill_9() {
    // sled syncs nothing: it survives a process kill through the OS page cache, but a power
    // cut would lose acknowledged writes, so it runs without the power-cut backend.
    run_and_report("sled, kill -9", &config("sled", false, false), 10);
}

/// The negative control: a server that acknowledges before syncing must be caught.
#[test]
fn broken_server_is_caught() {
    let seed = seed();
    let result = run(&config("redb", true, true), 5, seed);
    match result {
        Err(violation) => eprintln!("the crash test caught the broken server: {violation}"),
        Ok(s) => panic!(
            "a server acknowledging before sync survived {} power cuts with {} writes: the crash test sees nothing (seed {seed})",
            s.cycles, s.acked
        ),
    }
}

/// Why the power cut is simulated: under a plain SIGKILL the same broken server loses
/// nothing, because the OS page cache outlives the process.
#[test]
fn kill_9_alone_misses_the_broken_server() {
    let seed = seed();
    if let Err(violation) = run(&config("redb", false, true), 5, seed) {
        panic!("a plain SIGKILL was expected to lose nothing (seed {seed}): {violation}");
    }
}

/// The control for the references check: with refint off, deletes and renames leave
/// references naming DNs that are gone, and the check must say so.
#[test]
fn dangling_references_are_caught() {
    let seed = seed();
    match run(&config_refint("redb", true, false, false), 5, seed) {
        Err(violation) if violation.contains("refint:") => {
            eprintln!("the crash test caught the dangling reference: {violation}")
        }
        Err(violation) => panic!("expected a dangling reference, found another violation (seed {seed}): {violation}"),
        Ok(s) => panic!(
            "refint off survived {} cycles with {} writes without a dangling reference: the check sees nothing (seed {seed})",
            s.cycles, s.acked
        ),
    }
}
