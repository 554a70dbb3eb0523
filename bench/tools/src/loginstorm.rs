//! `ldap-login-storm`: the load SSSD, Keycloak or a PAM module puts on a directory when many
//! people log in at once (issue #28). One *login* is four operations, as those clients do:
//!
//! 1. on a pooled connection bound as a service account: a subtree search under the people
//!    base for `(uid=<name>)`, which must find exactly one entry (its DN is what step 2
//!    binds as);
//! 2. on a pooled connection kept for binds: a simple bind as that DN with the user's
//!    password, which must succeed;
//! 3. on a service connection: a subtree search under the groups base for
//!    `(member=<the user's DN>)`, attribute `cn` (the user's groups);
//! 4. on a service connection: a base search of the user's entry for `memberOf` (the same
//!    groups, as the server keeps them).
//!
//! Workers run closed loops, one login at a time each; a worker takes a connection from the
//! pool for each step and gives it back after it, so that pools smaller than the worker
//! count queue the way a client library's pool does. Connections are opened (and the
//! service ones bound) before the clock starts and stay open. The run ends at its duration
//! or after `count_max` logins, whichever comes first; logins started before the deadline
//! are finished.
//!
//! With `check_memberof` (the default), a login also fails when step 3 and step 4 disagree
//! on how many groups the user is in, so a server without memberOf cannot look fast by
//! answering step 4 with nothing. (Both count direct memberships: the data has no nested
//! groups.)
//!
//! Users are drawn from `range` uniformly, or with a Zipf distribution of exponent
//! `zipf_s` over the range (user `range.start` the most popular), from a seeded
//! xorshift64* stream per worker: two runs with the same arguments ask for the same users.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrodir_proto::filter::{AttributeValueAssertion, Filter};
use ferrodir_proto::message::{
    decode_message, DerefAliases, OctetString, ProtocolOp, SearchRequest, SearchScope,
};
use hdrhistogram::Histogram;
use tokio::sync::Semaphore;

use crate::conn::Conn;
use crate::error::Error;
use crate::latency::{process_cpu_s, LATENCY_NS_MAX};
use crate::searchload::json_string;
use crate::template::Template;
use crate::wire::{self, tag};
use crate::xorshift::XorShift64;

pub const WORKERS_MAX: usize = 1024;
/// Step names, in order, as the report gives them.
pub const STEPS: [&str; 4] = ["find", "bind", "groups", "memberof"];

/// What to log in as, where, and how hard.
#[derive(Debug, Clone)]
pub struct Config {
    /// host:port, plain LDAP.
    pub address: String,
    /// The service account the search connections bind as (None: anonymous).
    pub service: Option<(String, String)>,
    pub people_base: String,
    pub groups_base: String,
    /// The uid of user number n, e.g. `user{:05}`.
    pub uid: Template,
    /// The password of user number n, e.g. `password{:05}`.
    pub password: Template,
    pub range: Range<u64>,
    /// 0: uniform; otherwise the Zipf exponent.
    pub zipf_s: f64,
    pub workers: usize,
    /// Pool sizes; 0 means one per worker.
    pub search_connections: usize,
    pub bind_connections: usize,
    pub duration: Duration,
    pub count_max: u64,
    pub op_timeout: Duration,
    pub seed: u64,
    pub check_memberof: bool,
}

/// One LDAP connection with one request in flight; every read waits at most `op_timeout`.
struct Connection {
    conn: Conn,
    op_timeout: Duration,
}

/// Why a login failed: a result code, or something that is not one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// An LDAP result code other than success, with the step that got it.
    Code(u32),
    /// Step 1 found no entry, or more than one.
    NotFound,
    /// Step 4 returned no entry.
    NoEntry,
    /// Steps 3 and 4 disagree on the number of groups.
    MemberOfMismatch,
    /// No answer within the operation timeout.
    Timeout,
    /// The connection broke (closed, reset, or a frame we cannot read).
    Broken,
}

impl Failure {
    pub fn key(&self) -> String {
        match self {
            Failure::Code(code) => code.to_string(),
            Failure::NotFound => "user-not-found".into(),
            Failure::NoEntry => "no-entry".into(),
            Failure::MemberOfMismatch => "memberof-mismatch".into(),
            Failure::Timeout => "timeout".into(),
            Failure::Broken => "broken-connection".into(),
        }
    }

    /// Whether the connection can still be used after this failure.
    fn connection_usable(&self) -> bool {
        !matches!(self, Failure::Timeout | Failure::Broken)
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        match error {
            Error::Timeout(_) => Failure::Timeout,
            _ => Failure::Broken,
        }
    }
}

/// The final response to a search: entries seen, values of the counted attribute, the code.
struct SearchOutcome {
    entries: u64,
    /// The first entry's DN.
    first_dn: Option<Vec<u8>>,
    /// How many values of the counted attribute the entries carried together.
    values: u64,
    result_code: u32,
}

impl Connection {
    async fn open(
        address: &str,
        bind: Option<&(String, String)>,
        op_timeout: Duration,
    ) -> Result<Connection, Error> {
        let mut connection = Connection { conn: Conn::connect(address, op_timeout).await?, op_timeout };
        if let Some((dn, password)) = bind {
            let code = connection.bind(dn.as_bytes(), password.as_bytes()).await?;
            if code != 0 {
                return Err(Error::Unexpected(format!("bind as {dn}: resultCode {code}")));
            }
        }
        Ok(connection)
    }

    /// A simple bind; its result code.
    async fn bind(&mut self, dn: &[u8], password: &[u8]) -> Result<u32, Error> {
        self.conn.simple_bind(dn, password, Some(self.op_timeout)).await
    }

    /// One search read to its SearchResultDone. `count` names the attribute whose values
    /// are counted (entries are decoded only then, or for the first DN when `want_dn`).
    async fn search(
        &mut self,
        request: SearchRequest,
        want_dn: bool,
        count: Option<&str>,
    ) -> Result<SearchOutcome, Error> {
        let message_id = self.conn.send(ProtocolOp::SearchRequest(request), None).await?;
        let mut outcome = SearchOutcome { entries: 0, first_dn: None, values: 0, result_code: 0 };
        loop {
            let len = self.conn.read_frame(Some(self.op_timeout)).await?;
            let pdu = self.conn.frame(len);
            let answer = wire::peek(pdu)?;
            if answer.message_id != message_id {
                return Err(Error::Unexpected(format!(
                    "messageID {} with tag {:#04x} while waiting for {message_id}",
                    answer.message_id, answer.op_tag
                )));
            }
            match answer.op_tag {
                tag::SEARCH_RESULT_ENTRY => {
                    outcome.entries += 1;
                    if (want_dn && outcome.first_dn.is_none()) || count.is_some() {
                        let message = decode_message(pdu)
                            .map_err(|e| Error::Unexpected(format!("SearchResultEntry: {e}")))?;
                        let ProtocolOp::SearchResultEntry(entry) = message.protocol_op else {
                            return Err(Error::Unexpected("not a SearchResultEntry".into()));
                        };
                        if let Some(name) = count {
                            outcome.values += entry
                                .attributes
                                .iter()
                                .filter(|a| a.r#type.eq_ignore_ascii_case(name.as_bytes()))
                                .map(|a| a.vals.len() as u64)
                                .sum::<u64>();
                        }
                        if want_dn && outcome.first_dn.is_none() {
                            outcome.first_dn = Some(entry.object_name.to_vec());
                        }
                    }
                }
                tag::SEARCH_RESULT_REFERENCE | tag::INTERMEDIATE_RESPONSE => {}
                tag::SEARCH_RESULT_DONE => {
                    outcome.result_code = wire::result_code(answer.op_content)?;
                    self.conn.consume(len);
                    return Ok(outcome);
                }
                other => return Err(Error::Unexpected(format!("response tag {other:#04x}"))),
            }
            self.conn.consume(len);
        }
    }
}

/// A fixed set of open connections that workers borrow one at a time.
struct Pool {
    idle: Mutex<Vec<Connection>>,
    available: Semaphore,
    address: String,
    bind: Option<(String, String)>,
    op_timeout: Duration,
}

impl Pool {
    async fn open(config: &Config, size: usize, bind: Option<(String, String)>) -> Result<Pool, Error> {
        let mut idle = Vec::with_capacity(size);
        for _ in 0..size {
            idle.push(Connection::open(&config.address, bind.as_ref(), config.op_timeout).await?);
        }
        Ok(Pool {
            idle: Mutex::new(idle),
            available: Semaphore::new(size),
            address: config.address.clone(),
            bind,
            op_timeout: config.op_timeout,
        })
    }

    /// A connection, waiting at most until `deadline` (None: the run is over).
    async fn take(&self, deadline: Instant) -> Option<Connection> {
        let permit = tokio::time::timeout_at(deadline.into(), self.available.acquire()).await.ok()?.ok()?;
        permit.forget();
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn give_back(&self, connection: Connection) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(connection);
        self.available.add_permits(1);
    }

    /// Gives the connection back after a step, or when the step broke it, a new one in its
    /// place (if that cannot be opened the pool stays one short).
    async fn finish<T>(&self, connection: Connection, result: &Result<T, Failure>) {
        match result {
            Err(failure) if !failure.connection_usable() => {
                drop(connection);
                if let Ok(fresh) = Connection::open(&self.address, self.bind.as_ref(), self.op_timeout).await
                {
                    self.give_back(fresh);
                }
            }
            _ => self.give_back(connection),
        }
    }
}

/// Zipf(s) over `0..n` by inverse transform on a precomputed CDF.
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n as usize);
        let mut total = 0.0;
        for k in 1..=n {
            total += 1.0 / (k as f64).powf(s);
            cdf.push(total);
        }
        for value in &mut cdf {
            *value /= total;
        }
        Zipf { cdf }
    }

    /// The rank (0: the most popular) for a uniform draw `u` in [0, 1).
    pub fn rank(&self, u: f64) -> u64 {
        self.cdf.partition_point(|&c| c <= u).min(self.cdf.len().saturating_sub(1)) as u64
    }
}

/// Where the user numbers come from.
enum Picker {
    Uniform,
    Zipf(Arc<Zipf>),
}

impl Picker {
    fn pick(&self, rng: &mut XorShift64, range: &Range<u64>) -> u64 {
        match self {
            Picker::Uniform => range.start + rng.below(range.end - range.start),
            Picker::Zipf(zipf) => {
                range.start + zipf.rank((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
            }
        }
    }
}

/// What the run measured, over every worker.
#[derive(Debug)]
pub struct Report {
    pub logins: u64,
    pub failures: BTreeMap<String, u64>,
    pub seconds: f64,
    pub login_histogram: Histogram<u32>,
    pub step_histograms: [Histogram<u32>; 4],
    /// Groups found by step 3 over all successful logins.
    pub groups: u64,
    pub first_error: Option<String>,
    pub client_cpu_s: Option<f64>,
    pub workers: usize,
    pub search_connections: usize,
    pub bind_connections: usize,
}

impl Report {
    pub fn failures_total(&self) -> u64 {
        self.failures.values().sum()
    }

    pub fn logins_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.logins as f64 / self.seconds
        } else {
            0.0
        }
    }

    pub fn to_json(&self) -> String {
        let us = |h: &Histogram<u32>, q: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(q) as f64 / 1000.0
            }
        };
        let steps = |q: f64| {
            self.step_histograms.iter().map(|h| format!("{:.1}", us(h, q))).collect::<Vec<_>>().join(",")
        };
        let failures = self
            .failures
            .iter()
            .map(|(key, count)| format!("{}:{count}", json_string(key)))
            .collect::<Vec<_>>()
            .join(",");
        let mut json = format!(
            "{{\"logins\":{},\"seconds\":{:.3},\"logins_per_s\":{:.2},\"p50_us\":{:.1},\"p99_us\":{:.1},\
             \"p999_us\":{:.1},\"mean_us\":{:.1},\"failures\":{},\"failures_by_code\":{{{failures}}},\
             \"steps\":[{}],\"step_p50_us\":[{}],\"step_p99_us\":[{}],\"groups_per_login\":{:.2},\
             \"workers\":{},\"search_connections\":{},\"bind_connections\":{}",
            self.logins,
            self.seconds,
            self.logins_per_s(),
            us(&self.login_histogram, 0.5),
            us(&self.login_histogram, 0.99),
            us(&self.login_histogram, 0.999),
            if self.login_histogram.is_empty() { 0.0 } else { self.login_histogram.mean() / 1000.0 },
            self.failures_total(),
            STEPS.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(","),
            steps(0.5),
            steps(0.99),
            if self.logins > 0 { self.groups as f64 / self.logins as f64 } else { 0.0 },
            self.workers,
            self.search_connections,
            self.bind_connections,
        );
        if let Some(error) = &self.first_error {
            json.push_str(&format!(",\"first_error\":{}", json_string(error)));
        }
        if let Some(cpu) = self.client_cpu_s {
            json.push_str(&format!(",\"client_cpu_s\":{cpu:.3}"));
        }
        json.push('}');
        json
    }
}

fn new_histogram() -> Result<Histogram<u32>, Error> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).map_err(|e| Error::Config(format!("histogram: {e}")))
}

fn nanos_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1)
}

fn validate(config: &Config) -> Result<(), Error> {
    if config.workers == 0 || config.workers > WORKERS_MAX {
        return Err(Error::Config(format!("--workers must be 1..={WORKERS_MAX}")));
    }
    if config.search_connections > WORKERS_MAX || config.bind_connections > WORKERS_MAX {
        return Err(Error::Config(format!("pool sizes must be at most {WORKERS_MAX}")));
    }
    if config.range.is_empty() {
        return Err(Error::Config("--range is empty".into()));
    }
    if !(config.zipf_s.is_finite() && config.zipf_s >= 0.0) {
        return Err(Error::Config("--zipf must be 0 (uniform) or a positive exponent".into()));
    }
    if config.zipf_s > 0.0 && config.range.end - config.range.start > 100_000_000 {
        return Err(Error::Config("--zipf over more than 100M users".into()));
    }
    Ok(())
}

fn search_request(base: Vec<u8>, scope: SearchScope, filter: Filter, attributes: &[&str]) -> SearchRequest {
    SearchRequest {
        base_object: OctetString::from(base),
        scope,
        deref_aliases: DerefAliases::NeverDerefAliases,
        size_limit: 0,
        time_limit: 0,
        types_only: false,
        filter,
        attributes: attributes.iter().map(|a| OctetString::from(a.as_bytes().to_vec())).collect(),
    }
}

fn equality(attribute: &str, value: Vec<u8>) -> Filter {
    Filter::EqualityMatch(AttributeValueAssertion {
        attribute_desc: OctetString::from(attribute.as_bytes().to_vec()),
        assertion_value: OctetString::from(value),
    })
}

/// One worker's share: counts and histograms.
struct Tally {
    logins: u64,
    groups: u64,
    failures: BTreeMap<String, u64>,
    first_error: Option<String>,
    login: Histogram<u32>,
    steps: [Histogram<u32>; 4],
}

/// Step 1: exactly one entry, whose DN is returned.
async fn find_user(c: &mut Connection, request: SearchRequest) -> Result<Vec<u8>, Failure> {
    let outcome = c.search(request, true, None).await?;
    match (outcome.result_code, outcome.entries, outcome.first_dn) {
        (0, 1, Some(dn)) => Ok(dn),
        (0, _, _) => Err(Failure::NotFound),
        (code, _, _) => Err(Failure::Code(code)),
    }
}

/// The four steps of one login for user `n`; Ok(groups) or why it failed. Step times go
/// into `steps`. None: the run ended while waiting for a connection.
async fn login(
    config: &Config,
    search: &Pool,
    binds: &Pool,
    n: u64,
    deadline_hard: Instant,
    steps: &mut [Histogram<u32>; 4],
) -> Option<Result<u64, (Failure, String)>> {
    let uid = config.uid.render(n).into_bytes();
    let password = config.password.render(n).into_bytes();
    let people = config.people_base.as_bytes().to_vec();
    let fail = |step: usize, failure: Failure| {
        Some(Err((failure.clone(), format!("{} of user {n}: {}", STEPS[step], failure.key()))))
    };

    // 1. Find the user.
    let started = Instant::now();
    let find =
        search_request(people, SearchScope::WholeSubtree, equality("uid", uid), &["uid", "cn", "mail"]);
    let mut c = search.take(deadline_hard).await?;
    let found = find_user(&mut c, find).await;
    search.finish(c, &found).await;
    let dn = match found {
        Ok(dn) => dn,
        Err(failure) => return fail(0, failure),
    };
    steps[0].saturating_record(nanos_since(started));

    // 2. Bind as the user.
    let started = Instant::now();
    let mut c = binds.take(deadline_hard).await?;
    let bound = match c.bind(&dn, &password).await {
        Ok(0) => Ok(()),
        Ok(code) => Err(Failure::Code(code)),
        Err(error) => Err(Failure::from(error)),
    };
    binds.finish(c, &bound).await;
    if let Err(failure) = bound {
        return fail(1, failure);
    }
    steps[1].saturating_record(nanos_since(started));

    // 3. The groups naming the user.
    let started = Instant::now();
    let groups_request = search_request(
        config.groups_base.as_bytes().to_vec(),
        SearchScope::WholeSubtree,
        equality("member", dn.clone()),
        &["cn"],
    );
    let mut c = search.take(deadline_hard).await?;
    let groups = match c.search(groups_request, false, None).await {
        Ok(outcome) if outcome.result_code == 0 => Ok(outcome.entries),
        Ok(outcome) => Err(Failure::Code(outcome.result_code)),
        Err(error) => Err(Failure::from(error)),
    };
    search.finish(c, &groups).await;
    let groups = match groups {
        Ok(groups) => groups,
        Err(failure) => return fail(2, failure),
    };
    steps[2].saturating_record(nanos_since(started));

    // 4. The user's memberOf.
    let started = Instant::now();
    let read = search_request(
        dn,
        SearchScope::BaseObject,
        Filter::Present(OctetString::from(&b"objectClass"[..])),
        &["memberOf"],
    );
    let mut c = search.take(deadline_hard).await?;
    let member_of = match c.search(read, false, Some("memberOf")).await {
        Ok(SearchOutcome { result_code: 0, entries: 1, values, .. }) => Ok(values),
        Ok(SearchOutcome { result_code: 0, .. }) => Err(Failure::NoEntry),
        Ok(outcome) => Err(Failure::Code(outcome.result_code)),
        Err(error) => Err(Failure::from(error)),
    };
    search.finish(c, &member_of).await;
    let member_of = match member_of {
        Ok(values) => values,
        Err(failure) => return fail(3, failure),
    };
    steps[3].saturating_record(nanos_since(started));
    if config.check_memberof && member_of != groups {
        return Some(Err((
            Failure::MemberOfMismatch,
            format!("user {n}: {groups} groups name it as member, its memberOf has {member_of} values"),
        )));
    }
    Some(Ok(groups))
}

async fn worker(
    index: usize,
    config: Arc<Config>,
    search: Arc<Pool>,
    binds: Arc<Pool>,
    picker: Arc<Picker>,
    deadline: Instant,
    claimed: Arc<std::sync::atomic::AtomicU64>,
) -> Result<Tally, Error> {
    use std::sync::atomic::Ordering;
    let mut tally = Tally {
        logins: 0,
        groups: 0,
        failures: BTreeMap::new(),
        first_error: None,
        login: new_histogram()?,
        steps: [new_histogram()?, new_histogram()?, new_histogram()?, new_histogram()?],
    };
    let mut rng = XorShift64::new(config.seed, index as u64);
    // A login that began before the deadline may wait for connections a while after it.
    let deadline_hard = deadline + config.op_timeout;
    while Instant::now() < deadline && claimed.fetch_add(1, Ordering::Relaxed) < config.count_max {
        let n = picker.pick(&mut rng, &config.range);
        let started = Instant::now();
        match login(&config, &search, &binds, n, deadline_hard, &mut tally.steps).await {
            None => break,
            Some(Ok(groups)) => {
                tally.login.saturating_record(nanos_since(started));
                tally.logins += 1;
                tally.groups += groups;
            }
            Some(Err((failure, why))) => {
                *tally.failures.entry(failure.key()).or_default() += 1;
                tally.first_error.get_or_insert(why);
            }
        }
    }
    Ok(tally)
}

/// Opens both pools, then runs the workers until the duration or the count is reached.
pub async fn run(config: Config) -> Result<Report, Error> {
    validate(&config)?;
    let search_size = if config.search_connections == 0 { config.workers } else { config.search_connections };
    let bind_size = if config.bind_connections == 0 { config.workers } else { config.bind_connections };
    let search = Arc::new(Pool::open(&config, search_size, config.service.clone()).await?);
    let binds = Arc::new(Pool::open(&config, bind_size, None).await?);
    let picker = Arc::new(if config.zipf_s > 0.0 {
        Picker::Zipf(Arc::new(Zipf::new(config.range.end - config.range.start, config.zipf_s)))
    } else {
        Picker::Uniform
    });
    let workers = config.workers;
    let config = Arc::new(config);
    let claimed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let cpu_before = process_cpu_s();
    let started = Instant::now();
    let deadline = started + config.duration;
    let tasks: Vec<_> = (0..workers)
        .map(|i| {
            tokio::spawn(worker(
                i,
                Arc::clone(&config),
                Arc::clone(&search),
                Arc::clone(&binds),
                Arc::clone(&picker),
                deadline,
                Arc::clone(&claimed),
            ))
        })
        .collect();
    let mut report = Report {
        logins: 0,
        failures: BTreeMap::new(),
        seconds: 0.0,
        login_histogram: new_histogram()?,
        step_histograms: [new_histogram()?, new_histogram()?, new_histogram()?, new_histogram()?],
        groups: 0,
        first_error: None,
        client_cpu_s: None,
        workers,
        search_connections: search_size,
        bind_connections: bind_size,
    };
    for task in tasks {
        let tally = task.await.map_err(|e| Error::Unexpected(format!("worker task: {e}")))??;
        report.logins += tally.logins;
        report.groups += tally.groups;
        for (key, count) in tally.failures {
            *report.failures.entry(key).or_default() += count;
        }
        report.first_error = report.first_error.or(tally.first_error);
        // Same bounds on both sides: adding cannot fail.
        let _ = report.login_histogram.add(&tally.login);
        for (total, step) in report.step_histograms.iter_mut().zip(&tally.steps) {
            let _ = total.add(step);
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    report.client_cpu_s = cpu_before.zip(process_cpu_s()).map(|(before, after)| after - before);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_ranks_favour_the_first_users() {
        let zipf = Zipf::new(1000, 1.0);
        let mut rng = XorShift64::new(7, 0);
        let mut counts = vec![0u32; 1000];
        let picker = Picker::Zipf(Arc::new(zipf));
        for _ in 0..100_000 {
            counts[picker.pick(&mut rng, &(0..1000)) as usize] += 1;
        }
        // H(1000) ≈ 7.485: rank 0 gets ~13.4%, rank 1 half that, rank 9 a tenth of it.
        assert!((12_000..15_000).contains(&counts[0]), "{}", counts[0]);
        assert!((5_800..7_600).contains(&counts[1]), "{}", counts[1]);
        assert!(counts[0] > 8 * counts[9], "{} vs {}", counts[0], counts[9]);
        assert!(counts.iter().all(|&c| c < 15_000));
    }

    #[test]
    fn zipf_rank_stays_in_range_at_the_edges() {
        let zipf = Zipf::new(10, 1.2);
        assert_eq!(zipf.rank(0.0), 0);
        assert_eq!(zipf.rank(0.999_999_999), 9);
        assert_eq!(zipf.rank(1.0), 9);
        let one = Zipf::new(1, 1.0);
        assert_eq!(one.rank(0.5), 0);
    }

    #[test]
    fn uniform_picks_cover_the_range_offset() {
        let mut rng = XorShift64::new(1, 3);
        let range = 100..110;
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let n = Picker::Uniform.pick(&mut rng, &range);
            assert!(range.contains(&n));
            seen[(n - 100) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn failures_have_stable_keys() {
        assert_eq!(Failure::Code(49).key(), "49");
        assert_eq!(Failure::MemberOfMismatch.key(), "memberof-mismatch");
        assert!(Failure::Code(51).connection_usable());
        assert!(!Failure::Broken.connection_usable());
        assert_eq!(Failure::from(Error::Timeout(5)), Failure::Timeout);
        assert_eq!(Failure::from(Error::Closed), Failure::Broken);
    }

    #[test]
    fn report_json_lists_failures_by_code() {
        let mut failures = BTreeMap::new();
        failures.insert("49".to_string(), 3);
        failures.insert("memberof-mismatch".to_string(), 1);
        let mut login = new_histogram().unwrap();
        login.record(2_000_000).unwrap();
        let report = Report {
            logins: 1,
            failures,
            seconds: 2.0,
            login_histogram: login,
            step_histograms: [
                new_histogram().unwrap(),
                new_histogram().unwrap(),
                new_histogram().unwrap(),
                new_histogram().unwrap(),
            ],
            groups: 3,
            first_error: Some("bind of user 4: 49".into()),
            client_cpu_s: None,
            workers: 2,
            search_connections: 2,
            bind_connections: 1,
        };
        let json = report.to_json();
        assert!(
            json.contains("\"failures\":4,\"failures_by_code\":{\"49\":3,\"memberof-mismatch\":1}"),
            "{json}"
        );
        assert!(json.contains("\"logins_per_s\":0.50"), "{json}");
        assert!(json.contains("\"groups_per_login\":3.00"), "{json}");
        assert!(json.contains("\"first_error\":\"bind of user 4: 49\""), "{json}");
    }

    fn responder_config(address: String, check_memberof: bool) -> Config {
        Config {
            address,
            service: Some(("cn=svc,dc=example,dc=com".into(), "secret".into())),
            people_base: "ou=people,dc=example,dc=com".into(),
            groups_base: "ou=groups,dc=example,dc=com".into(),
            uid: Template::parse("user{:05}").unwrap(),
            password: Template::parse("password{:05}").unwrap(),
            range: 0..100,
            zipf_s: 0.0,
            workers: 3,
            search_connections: 2,
            bind_connections: 1,
            duration: Duration::from_secs(5),
            count_max: 50,
            op_timeout: Duration::from_secs(5),
            seed: 1,
            check_memberof,
        }
    }

    /// The null responder answers every search with one entry (named after the base, no
    /// memberOf) and every bind with success: each login's four steps go through it, the
    /// count bound stops the run, and the pools (smaller than the worker count) are shared.
    #[tokio::test]
    async fn logs_in_against_the_null_responder() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(crate::responder::serve(listener, 16));
        let report = run(responder_config(address.clone(), false)).await.unwrap();
        assert_eq!(report.logins, 50, "{}", report.to_json());
        assert_eq!(report.failures_total(), 0);
        assert_eq!(report.groups, 50, "one 'group' entry per login");
        assert!(report.step_histograms.iter().all(|h| h.len() == 50));
        assert_eq!((report.search_connections, report.bind_connections), (2, 1));

        // With the memberOf check on, step 4's entry has no memberOf while step 3 found
        // one entry: every login fails, and says why.
        let report = run(responder_config(address, true)).await.unwrap();
        assert_eq!(report.logins, 0);
        assert_eq!(report.failures.get("memberof-mismatch"), Some(&50), "{}", report.to_json());
        assert!(report.first_error.as_deref().unwrap_or("").contains("memberOf has 0 values"));
        server.abort();
    }

    #[tokio::test]
    async fn unreachable_server_fails_before_the_clock() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        drop(listener);
        assert!(run(responder_config(address, true)).await.is_err());
    }
}
