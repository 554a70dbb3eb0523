//! The differential run: the whole catalogue against slapd, then against ferrodir, each on
//! its own fresh load of test-ordered.ldif, and a report of every operation whose answers
//! differ and that the allowlist does not explain.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::allow::{self, Known};
use crate::catalogue::{Catalogue, Op, Who, MANAGER_DN, MANAGER_PW};
use crate::client::{Auth, Client, Reply, Request};
use crate::compare::{self, clip};
use crate::servers::{self, Server};
use crate::{ops_read, ops_write};

const LINE_CHARS_MAX: usize = 420;

/// One connection per identity, opened and bound on first use, reopened after a failure.
struct Sessions<'a> {
    server: &'a Server,
    clients: HashMap<Who, Client>,
}

impl Sessions<'_> {
    fn client(&mut self, who: Who) -> Result<&mut Client, String> {
        if !self.clients.contains_key(&who) {
            let mut client = Client::connect(self.server.addr)?;
            let credentials = match who {
                Who::Anonymous => None,
                Who::Manager => Some((MANAGER_DN, MANAGER_PW)),
                Who::User(dn, password) => Some((dn, password)),
            };
            if let Some((dn, password)) = credentials {
                let bind = Request::Bind { version: 3, dn: dn.into(), auth: Auth::Simple(password.into()) };
                match client.call(&bind) {
                    Reply::Result(r) if r.code == 0 => {}
                    other => return Err(format!("session bind as {dn} failed: {other:?}")),
                }
            }
            self.clients.insert(who, client);
        }
        Ok(self.clients.get_mut(&who).expect("just inserted"))
    }

    fn run(&mut self, op: &Op) -> Reply {
        if matches!(op.request, Request::Bind { .. }) {
            // A bind changes the connection's identity: give each its own connection.
            return match Client::connect(self.server.addr) {
                Ok(mut client) => client.call(&op.request),
                Err(e) => Reply::Failed(e),
            };
        }
        let reply = match self.client(op.who) {
            Ok(client) => client.call(&op.request),
            Err(e) => Reply::Failed(e),
        };
        if self.clients.get(&op.who).is_some_and(|c| c.broken) {
            self.clients.remove(&op.who);
        }
        reply
    }
}

/// The whole catalogue against one server, however slow it is: past this budget the
/// remaining operations are not sent, so the test ends in minutes, not hours, and fails.
const RUN_BUDGET: Duration = Duration::from_secs(120);

/// One server's answers to a catalogue, one per operation.
pub struct Answers {
    pub server: &'static str,
    pub replies: Vec<Reply>,
    /// How many operations, at the end, were left unsent because the budget ran out: their
    /// replies are placeholders, and the same placeholder on both sides would look like
    /// agreement.
    pub unsent: usize,
}

pub fn run_all(server: &Server, ops: &[Op]) -> Answers {
    let mut sessions = Sessions { server, clients: HashMap::new() };
    let deadline = Instant::now() + RUN_BUDGET;
    let mut unsent = 0;
    let replies = ops
        .iter()
        .map(|op| {
            if Instant::now() > deadline {
                unsent += 1;
                return Reply::Failed(format!("not sent: the run took longer than {RUN_BUDGET:?}"));
            }
            sessions.run(op)
        })
        .collect();
    Answers { server: server.name, replies, unsent }
}

/// Why a run cannot be compared, one line per reason: operations left unsent, and for the
/// reference (`reference`: slapd) every operation it gave no LDAP answer to, since there is
/// then nothing to compare ferrodir's answer with. Empty when the run is complete.
pub fn incomplete(ops: &[Op], answers: &Answers, reference: bool) -> Vec<String> {
    let mut lines = Vec::new();
    if answers.unsent > 0 {
        let first = ops.len() - answers.unsent;
        lines.push(format!(
            "{}: {} of {} operations not sent (from {} on): the run took longer than {RUN_BUDGET:?}",
            answers.server,
            answers.unsent,
            ops.len(),
            ops.get(first).map_or("?", |op| op.id.as_str())
        ));
    }
    if reference {
        let sent = ops.len() - answers.unsent;
        for (op, reply) in ops.iter().zip(&answers.replies).take(sent) {
            if let Reply::Failed(why) = reply {
                lines.push(clip(
                    &format!("{} {}: {} gave no LDAP answer ({why})", op.id, op.text, answers.server),
                    LINE_CHARS_MAX,
                ));
            }
        }
    }
    lines
}

pub fn catalogue() -> Catalogue {
    let mut c = Catalogue::default();
    ops_read::add_all(&mut c);
    ops_write::add_all(&mut c);
    c.assert_unique_ids();
    c
}

#[derive(Default)]
struct Tally {
    ops: usize,
    differ: usize,
    allowed: usize,
}

/// Compares every operation; returns the report and how many problems it found: differences
/// the allowlist does not explain, stale allowlist entries, and the `incomplete` lines.
fn report(
    ops: &[Op],
    slapd: &[Reply],
    ferrodir: &[Reply],
    notes: &[String],
    incomplete: &[String],
) -> (String, usize) {
    let mut lines = incomplete.to_vec();
    let mut tally: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut allowed_lines = Vec::new();
    for (op, (s, f)) in ops.iter().zip(slapd.iter().zip(ferrodir)) {
        let group = op.id.rsplit_once('-').map(|(g, _)| g).unwrap_or(&op.id);
        let t = tally.entry(group).or_default();
        t.ops += 1;
        let (a, b) = (compare::answer(s), compare::answer(f));
        let difference = compare::difference(&a, &b);
        let (sa, fa) = (compare::summary(&a, &op.request), compare::summary(&b, &op.request));
        let line = |detail: &str| {
            clip(&format!("{} {} | slapd: {sa} | ferrodir: {fa} | {detail}", op.id, op.text), LINE_CHARS_MAX)
        };
        match (difference, allow::find(&op.id)) {
            (None, None) => {}
            (None, Some(_)) => lines.push(line("allowlisted, but now agrees: remove it from allow.rs")),
            (Some(detail), None) => {
                t.differ += 1;
                lines.push(line(&detail));
            }
            (Some(_), Some(allowed)) => match allowed.known {
                Known::Ferrodir(expected) if expected != fa => {
                    t.differ += 1;
                    lines.push(line(&format!(
                        "allowlisted: ferrodir should answer `{expected}` ({})",
                        allowed.reason
                    )));
                }
                Known::Values { .. } if allow::unexplained(&allowed.known, &a, &b).is_some() => {
                    t.differ += 1;
                    let detail = allow::unexplained(&allowed.known, &a, &b).unwrap_or_default();
                    lines.push(line(&format!("allowlisted for named values only: {detail}")));
                }
                _ => {
                    t.allowed += 1;
                    allowed_lines.push(format!("{} ({})", op.id, allowed.reason));
                }
            },
        }
    }
    for stale in allow::ALLOWED.iter().filter(|a| !ops.iter().any(|op| op.id == a.op)) {
        lines.push(format!("{}: allowlisted, but no such operation", stale.op));
    }
    let mut text = String::new();
    let differ: usize = tally.values().map(|t| t.differ).sum();
    let _ = writeln!(
        text,
        "conformance: {} operations, {differ} unexplained differences, {} incomplete",
        ops.len(),
        incomplete.len()
    );
    for note in notes {
        let _ = writeln!(text, "note: {note}");
    }
    for (group, t) in &tally {
        let _ =
            writeln!(text, "  {group:<8} {:>4} ops {:>4} differ {:>3} allowed", t.ops, t.differ, t.allowed);
    }
    if !allowed_lines.is_empty() {
        let _ = writeln!(text, "allowed differences: {}", allowed_lines.join(", "));
    }
    for line in &lines {
        let _ = writeln!(text, "{line}");
    }
    (text, lines.len())
}

/// Every operation with both answers, agreeing or not: for reading the catalogue.
pub fn transcript(ops: &[Op], slapd: &[Reply], ferrodir: &[Reply]) -> String {
    let mut text = String::new();
    for (op, (s, f)) in ops.iter().zip(slapd.iter().zip(ferrodir)) {
        let (a, b) = (compare::answer(s), compare::answer(f));
        let mark = if a == b { "  " } else { "!=" };
        let (sa, fa) = (compare::summary(&a, &op.request), compare::summary(&b, &op.request));
        let _ = writeln!(text, "{mark} {} {} | slapd: {sa} | ferrodir: {fa}", op.id, op.text);
    }
    text
}

#[test]
fn differential() {
    let ldif = servers::openldap_data("test-ordered.ldif");
    let catalogue = catalogue();
    assert!(catalogue.ops.len() >= 400, "only {} operations", catalogue.ops.len());
    let slapd = servers::start_slapd(Some(&ldif));
    let ferrodir = servers::start_ferrodir(Some(&ldif));
    let slapd_answers = run_all(&slapd, &catalogue.ops);
    let ferrodir_answers = run_all(&ferrodir, &catalogue.ops);
    let mut unusable = incomplete(&catalogue.ops, &slapd_answers, true);
    unusable.extend(incomplete(&catalogue.ops, &ferrodir_answers, false));
    let (slapd_replies, ferrodir_replies) = (&slapd_answers.replies, &ferrodir_answers.replies);
    let notes: Vec<String> = slapd.notes.iter().chain(&ferrodir.notes).cloned().collect();
    let (text, problems) = report(&catalogue.ops, slapd_replies, ferrodir_replies, &notes, &unusable);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("conformance-report.txt");
    let _ = std::fs::write(&path, &text);
    let _ = std::fs::write(
        dir.join("conformance-all.txt"),
        transcript(&catalogue.ops, slapd_replies, ferrodir_replies),
    );
    println!("{text}(report also in {})", path.display());
    assert_eq!(problems, 0, "ferrodir differs from slapd in {problems} operations; see the report above");
}
