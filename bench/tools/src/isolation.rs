//! `ldap-isolation`: does a long unindexed scan stall the other work of a server (issue #9)?
//!
//! Two modes, each bounded in time and count and stopping by itself:
//!
//! - **load** ([`run_load`]): `scan_connections` anonymous connections, each keeping
//!   `scans_per_connection` subtree searches of the whole suffix with an unindexed filter
//!   that matches nothing (`(description=nomatch)`) outstanding; each one is re-issued when
//!   its SearchResultDone arrives. Beside them one more connection, the *probe*, bound as the
//!   rootDN, does base-scope lookups of random existing entries and durable modifies
//!   (replace `description` on a random entry) at fixed rates, one operation at a time. The
//!   report has completed scans per second and the lookup and modify latency percentiles.
//!   The probe sends nothing new after `duration`; the scanners keep the load on until its
//!   last operation is answered, or `grace` later. An operation still unanswered then is
//!   recorded with the time it had waited so far (and counted in `*_unfinished`): a write
//!   stalled for the whole run reads as a large latency, never as a missing one.
//! - **stop** ([`run_stop`]): repeatedly starts an unindexed scan and stops it: Abandon after
//!   a random delay, closing the connection after a random delay, `sizeLimit=1` on an
//!   unindexed filter that matches many entries, and `timeLimit=1` when a full scan takes
//!   long enough for it to matter. The client cannot see when the server's shards stop
//!   working; the server logs that itself (the harness reads its log). This mode reports what
//!   the client sees: how many stops were sent while the scan was running, and the latency of
//!   the limited searches.

use std::collections::HashMap;
use std::ops::Range;
use std::time::{Duration, Instant};

use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::{
    AuthenticationChoice, BindRequest, Change, DerefAliases, ModifyOperation, ModifyRequest, OctetString,
    PartialAttribute, ProtocolOp, SearchRequest, SearchScope,
};
use hdrhistogram::Histogram;
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, timeout, timeout_at};

use crate::conn::Conn;
use crate::error::Error;
use crate::template::Template;
use crate::wire::{self, tag};
use crate::xorshift::XorShift64;

/// Latencies are recorded in microseconds, up to this (an hour).
const LATENCY_US_MAX: u64 = 3_600_000_000;
/// Connecting and binding must not take longer than this.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
pub const CONNECTIONS_MAX: usize = 256;
pub const SCANS_PER_CONNECTION_MAX: usize = 64;
/// The longest run either mode accepts.
pub const DURATION_MAX: Duration = Duration::from_secs(600);

const RESULT_TIME_LIMIT_EXCEEDED: u32 = 3;
const RESULT_SIZE_LIMIT_EXCEEDED: u32 = 4;

/// A filter from the command line: `attr=value` (equality) or `attr=*` (presence).
pub fn parse_filter(text: &str) -> Result<Filter, Error> {
    let text = text.trim().trim_start_matches('(').trim_end_matches(')');
    let (attribute, value) = text
        .split_once('=')
        .filter(|(a, v)| !a.is_empty() && !v.is_empty() && !a.ends_with(['~', '<', '>', ':']))
        .ok_or_else(|| Error::Config(format!("filter {text:?}: expected attr=value or attr=*")))?;
    if value == "*" {
        Ok(Filter::present(attribute))
    } else if value.contains('*') {
        Err(Error::Config(format!("filter {text:?}: substring filters are not supported here")))
    } else {
        Ok(Filter::equality(attribute, value))
    }
}

/// The load mode's parameters.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub address: String,
    /// Where every scan starts (subtree scope): the suffix.
    pub base: String,
    pub scan_filter: Filter,
    pub scan_connections: usize,
    pub scans_per_connection: usize,
    pub duration: Duration,
    /// How long after `duration` the probe's last operation may still take (under load).
    pub grace: Duration,
    /// The probe starts this long after the scanners, so that it meets the full load.
    pub warmup: Duration,
    /// Lookups per second on the probe connection (0: none).
    pub lookup_rate: f64,
    /// Modifies per second on the probe connection (0: none).
    pub modify_rate: f64,
    /// The DN of entry number n.
    pub dn_template: Template,
    pub range: Range<u64>,
    /// The probe binds as this DN (the rootDN, so that it may modify).
    pub bind_dn: String,
    pub password: String,
    /// The attribute the modifies replace, and the prefix of the values they write.
    pub modify_attribute: String,
    pub modify_value_prefix: String,
    pub seed: u64,
}

/// The stop mode's parameters.
#[derive(Debug, Clone)]
pub struct StopConfig {
    pub address: String,
    pub base: String,
    /// Unindexed, matches nothing: the scan that Abandon, a close or timeLimit stops.
    pub scan_filter: Filter,
    /// Unindexed, matches many entries: the scan that sizeLimit=1 stops.
    pub many_filter: Filter,
    pub duration: Duration,
    /// Attempts per kind of stop, at most.
    pub count_max: u64,
    /// Abandon or close this long after sending the search (uniform, milliseconds).
    pub delay_ms: Range<u64>,
    /// Pause after each attempt, so that stopped scans do not pile up on the server.
    pub pause: Duration,
    /// timeLimit=1 is only tried when a full scan takes at least this long.
    pub time_limit_scan_min: Duration,
    pub seed: u64,
}

// --- requests ----------------------------------------------------------------------------

fn search(base: &str, scope: SearchScope, filter: Filter, size_limit: u32, time_limit: u32) -> ProtocolOp {
    ProtocolOp::SearchRequest(SearchRequest {
        base_object: OctetString::from(base.as_bytes().to_vec()),
        scope,
        deref_aliases: DerefAliases::NeverDerefAliases,
        size_limit,
        time_limit,
        types_only: false,
        filter,
        // "1.1": no attributes, the entries' names only (RFC 4511 §4.5.1.8).
        attributes: vec![OctetString::from_static(b"1.1")],
    })
}

fn simple_bind(name: &str, password: &str) -> ProtocolOp {
    ProtocolOp::BindRequest(BindRequest {
        version: 3,
        name: OctetString::from(name.as_bytes().to_vec()),
        authentication: AuthenticationChoice::Simple(OctetString::from(password.as_bytes().to_vec())),
    })
}

fn replace(dn: &str, attribute: &str, value: &str) -> ProtocolOp {
    ProtocolOp::ModifyRequest(ModifyRequest {
        object: OctetString::from(dn.as_bytes().to_vec()),
        changes: vec![Change {
            operation: ModifyOperation::Replace,
            modification: PartialAttribute {
                r#type: OctetString::from(attribute.as_bytes().to_vec()),
                vals: vec![OctetString::from(value.as_bytes().to_vec())],
            },
        }],
    })
}

// --- one connection ----------------------------------------------------------------------

/// One message as read: its ID, operation tag, and result code when it has one.
#[derive(Debug, Clone, Copy)]
struct Message {
    id: u32,
    op_tag: u8,
    result_code: Option<u32>,
}

/// A connection that may have several requests outstanding; responses are matched by ID.
struct Connection {
    conn: Conn,
}

impl Connection {
    async fn open(address: &str) -> Result<Connection, Error> {
        Ok(Connection { conn: Conn::connect(address, SETUP_TIMEOUT).await? })
    }

    /// Sends one request; returns its messageID.
    async fn send(&mut self, protocol_op: ProtocolOp) -> Result<u32, Error> {
        self.conn.send(protocol_op, None).await
    }

    /// The next whole message. Cancel-safe: bytes read stay in the buffer.
    async fn next_message(&mut self) -> Result<Message, Error> {
        let len = self.conn.read_frame(None).await?;
        let peeked = wire::peek(self.conn.frame(len))?;
        let result_code = match peeked.op_tag {
            tag::SEARCH_RESULT_ENTRY | tag::SEARCH_RESULT_REFERENCE | tag::INTERMEDIATE_RESPONSE => None,
            _ => Some(wire::result_code(peeked.op_content)?),
        };
        let message = Message { id: peeked.message_id, op_tag: peeked.op_tag, result_code };
        self.conn.consume(len);
        if message.id == 0 {
            return Err(Error::Unexpected(format!(
                "Notice of Disconnection (resultCode {})",
                message.result_code.unwrap_or(0)
            )));
        }
        Ok(message)
    }

    /// Reads until the final response to `id`; messages for other IDs (answers to requests
    /// given up on earlier) are skipped. Returns the result code and the entries seen.
    async fn wait_final(&mut self, id: u32) -> Result<(u32, u64), Error> {
        let mut entries = 0;
        loop {
            let message = self.next_message().await?;
            if message.id != id {
                continue;
            }
            match (message.op_tag, message.result_code) {
                (tag::SEARCH_RESULT_ENTRY, _) => entries += 1,
                (_, Some(code)) => return Ok((code, entries)),
                _ => {}
            }
        }
    }

    async fn exchange(&mut self, protocol_op: ProtocolOp) -> Result<(u32, u64), Error> {
        let id = self.send(protocol_op).await?;
        self.wait_final(id).await
    }

    async fn bind(&mut self, dn: &str, password: &str) -> Result<(), Error> {
        let (code, _) = timeout(SETUP_TIMEOUT, self.exchange(simple_bind(dn, password)))
            .await
            .map_err(|_| Error::Timeout(SETUP_TIMEOUT.as_millis() as u64))??;
        if code != 0 {
            return Err(Error::Unexpected(format!("bind as {dn}: resultCode {code}")));
        }
        Ok(())
    }

    /// Best effort, bounded: abandon what is still outstanding and unbind.
    async fn close(mut self, outstanding: impl IntoIterator<Item = u32>) {
        let goodbye = async {
            for id in outstanding {
                self.send(ProtocolOp::AbandonRequest(id)).await?;
            }
            self.send(ProtocolOp::UnbindRequest).await?;
            Ok::<_, Error>(())
        };
        let _ = timeout(Duration::from_millis(500), goodbye).await;
    }
}

// --- histograms --------------------------------------------------------------------------

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("static histogram bounds are valid")
}

fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    histogram.saturating_record(micros.clamp(1, LATENCY_US_MAX));
}

/// `"p50_us":..,"p99_us":..,"max_us":..` with a prefix; null when nothing was recorded.
fn percentiles_json(prefix: &str, histogram: &Histogram<u64>) -> String {
    let value = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
    let empty = histogram.is_empty();
    let at = |q: f64| (!empty).then(|| histogram.value_at_quantile(q));
    format!(
        "\"{prefix}_p50_us\":{},\"{prefix}_p99_us\":{},\"{prefix}_max_us\":{}",
        value(at(0.5)),
        value(at(0.99)),
        value((!empty).then(|| histogram.max()))
    )
}

fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// --- load mode ---------------------------------------------------------------------------

/// What the scanners measured together.
#[derive(Debug)]
struct ScanTally {
    scans: u64,
    errors: u64,
    /// Scans still outstanding when the run ended (not counted in `scans`).
    unfinished: u64,
    /// Entries returned (the filter should match none).
    entries: u64,
    histogram: Histogram<u64>,
    first_error: Option<String>,
}

/// One scanner connection: `depth` searches outstanding until `stop` says so, or the hard
/// deadline.
async fn scan_connection(
    mut connection: Connection,
    request: ProtocolOp,
    depth: usize,
    deadline: tokio::time::Instant,
    mut stop: watch::Receiver<bool>,
) -> ScanTally {
    let mut tally = ScanTally {
        scans: 0,
        errors: 0,
        unfinished: 0,
        entries: 0,
        histogram: new_histogram(),
        first_error: None,
    };
    let mut started: HashMap<u32, Instant> = HashMap::with_capacity(depth);
    let work = async {
        for _ in 0..depth {
            let id = connection.send(request.clone()).await?;
            started.insert(id, Instant::now());
        }
        loop {
            let message = connection.next_message().await?;
            match (message.op_tag, message.result_code) {
                (tag::SEARCH_RESULT_ENTRY, _) => tally.entries += 1,
                (tag::SEARCH_RESULT_DONE, Some(code)) => {
                    let Some(at) = started.remove(&message.id) else { continue };
                    if code == 0 {
                        tally.scans += 1;
                        record(&mut tally.histogram, at.elapsed());
                    } else {
                        tally.errors += 1;
                        tally.first_error.get_or_insert_with(|| format!("scan resultCode {code}"));
                    }
                    let id = connection.send(request.clone()).await?;
                    started.insert(id, Instant::now());
                }
                (other, _) => return Err(Error::Unexpected(format!("response tag {other:#04x} to a scan"))),
            }
        }
    };
    let stopped = async move {
        let _ = stop.wait_for(|&stop| stop).await;
        Ok::<(), Error>(())
    };
    let until_stopped = async {
        tokio::select! {
            result = work => result,
            result = stopped => result,
        }
    };
    if let Ok(Err::<(), Error>(error)) = timeout_at(deadline, until_stopped).await {
        tally.errors += 1;
        tally.first_error.get_or_insert_with(|| error.to_string());
    }
    tally.unfinished = started.len() as u64;
    connection.close(started.into_keys()).await;
    tally
}

/// What the probe measured.
#[derive(Debug)]
struct ProbeTally {
    lookups: u64,
    modifies: u64,
    lookup_errors: u64,
    modify_errors: u64,
    lookup_unfinished: u64,
    modify_unfinished: u64,
    /// Slots skipped because the previous operation took longer than the interval.
    late: u64,
    lookup: Histogram<u64>,
    modify: Histogram<u64>,
    first_error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProbeOp {
    Lookup,
    Modify,
}

/// The next time of a fixed-rate schedule; slots already missed by more than one interval
/// are skipped (and counted), so a stall is not followed by a burst.
fn advance(next: &mut tokio::time::Instant, interval: Duration, late: &mut u64) {
    *next += interval;
    let now = tokio::time::Instant::now();
    if *next + interval < now {
        let missed = (now - *next).as_nanos() / interval.as_nanos().max(1);
        *late += missed as u64;
        *next = now;
    }
}

/// Sends operations on schedule from `start` until `end`; the last one may take until
/// `deadline`.
async fn probe(
    mut connection: Connection,
    config: &LoadConfig,
    start: tokio::time::Instant,
    end: tokio::time::Instant,
    deadline: tokio::time::Instant,
) -> ProbeTally {
    let mut tally = ProbeTally {
        lookups: 0,
        modifies: 0,
        lookup_errors: 0,
        modify_errors: 0,
        lookup_unfinished: 0,
        modify_unfinished: 0,
        late: 0,
        lookup: new_histogram(),
        modify: new_histogram(),
        first_error: None,
    };
    let interval = |rate: f64| (rate > 0.0).then(|| Duration::from_secs_f64(1.0 / rate));
    let (lookup_every, modify_every) = (interval(config.lookup_rate), interval(config.modify_rate));
    let mut next_lookup = start;
    // Half an interval apart, so that the two kinds do not always arrive together.
    let mut next_modify = start + modify_every.map_or(Duration::ZERO, |i| i / 2);
    let mut rng = XorShift64::new(config.seed, 1_000_000);
    let span = config.range.end - config.range.start;
    let mut in_flight: Option<(ProbeOp, Instant)> = None;
    let mut sequence = 0u64;
    let work = async {
        loop {
            let op = match (lookup_every, modify_every) {
                (Some(_), Some(_)) if next_modify < next_lookup => ProbeOp::Modify,
                (Some(_), _) => ProbeOp::Lookup,
                (None, Some(_)) => ProbeOp::Modify,
                (None, None) => {
                    sleep_until(end).await;
                    return Ok(());
                }
            };
            let at = if op == ProbeOp::Lookup { next_lookup } else { next_modify };
            if at >= end {
                return Ok(());
            }
            sleep_until(at).await;
            let dn = config.dn_template.render(config.range.start + rng.below(span));
            let request = match op {
                ProbeOp::Lookup => search(&dn, SearchScope::BaseObject, Filter::present("objectClass"), 0, 0),
                ProbeOp::Modify => {
                    sequence += 1;
                    let value = format!("{}{sequence}-{}", config.modify_value_prefix, rng.below(1 << 30));
                    replace(&dn, &config.modify_attribute, &value)
                }
            };
            in_flight = Some((op, Instant::now()));
            let (code, entries) = connection.exchange(request).await?;
            let Some((_, sent)) = in_flight.take() else { unreachable!("set above") };
            let elapsed = sent.elapsed();
            match op {
                ProbeOp::Lookup if code == 0 && entries >= 1 => {
                    tally.lookups += 1;
                    record(&mut tally.lookup, elapsed);
                }
                ProbeOp::Modify if code == 0 => {
                    tally.modifies += 1;
                    record(&mut tally.modify, elapsed);
                }
                ProbeOp::Lookup => {
                    tally.lookup_errors += 1;
                    tally.first_error.get_or_insert_with(|| format!("lookup of {dn}: resultCode {code}"));
                }
                ProbeOp::Modify => {
                    tally.modify_errors += 1;
                    tally.first_error.get_or_insert_with(|| format!("modify of {dn}: resultCode {code}"));
                }
            }
            match op {
                ProbeOp::Lookup => {
                    advance(&mut next_lookup, lookup_every.unwrap_or_default(), &mut tally.late)
                }
                ProbeOp::Modify => {
                    advance(&mut next_modify, modify_every.unwrap_or_default(), &mut tally.late)
                }
            }
        }
    };
    if let Ok(Err::<(), Error>(error)) = timeout_at(deadline, work).await {
        let errors = match in_flight.map(|(op, _)| op) {
            Some(ProbeOp::Modify) => &mut tally.modify_errors,
            _ => &mut tally.lookup_errors,
        };
        *errors += 1;
        tally.first_error.get_or_insert_with(|| format!("probe connection: {error}"));
        in_flight = None;
    }
    // Unanswered at the end: it waited at least this long; record that, never drop it.
    if let Some((op, sent)) = in_flight {
        let elapsed = sent.elapsed();
        match op {
            ProbeOp::Lookup => {
                tally.lookup_unfinished += 1;
                record(&mut tally.lookup, elapsed);
            }
            ProbeOp::Modify => {
                tally.modify_unfinished += 1;
                record(&mut tally.modify, elapsed);
            }
        }
    }
    connection.close(std::iter::empty()).await;
    tally
}

/// The load mode's result: the JSON line the tool prints.
#[derive(Debug)]
pub struct LoadReport {
    /// How long the scanners ran (from the start until the probe's last answer).
    pub seconds: f64,
    pub probe_seconds: f64,
    config_summary: String,
    scans: ScanTally,
    probe: ProbeTally,
}

impl LoadReport {
    pub fn scans(&self) -> u64 {
        self.scans.scans
    }
    pub fn lookups(&self) -> u64 {
        self.probe.lookups
    }
    pub fn modifies(&self) -> u64 {
        self.probe.modifies
    }
    pub fn errors(&self) -> u64 {
        self.scans.errors + self.probe.lookup_errors + self.probe.modify_errors
    }
    pub fn scans_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.scans.scans as f64 / self.seconds
        } else {
            0.0
        }
    }

    pub fn to_json(&self) -> String {
        let (s, p) = (&self.scans, &self.probe);
        let first_error = s.first_error.as_ref().or(p.first_error.as_ref());
        format!(
            "{{\"mode\":\"load\",{},\"seconds\":{:.3},\"probe_seconds\":{:.3},\"scans\":{},\"scans_per_s\":{:.3},\
             \"scan_errors\":{},\"scans_unfinished\":{},\"scan_entries\":{},{},\
             \"lookups\":{},\"lookup_errors\":{},\"lookup_unfinished\":{},{},\
             \"modifies\":{},\"modify_errors\":{},\"modify_unfinished\":{},{},\
             \"probe_late\":{},\"errors\":{},\"first_error\":{}}}",
            self.config_summary,
            self.seconds,
            self.probe_seconds,
            s.scans,
            self.scans_per_s(),
            s.errors,
            s.unfinished,
            s.entries,
            percentiles_json("scan", &s.histogram),
            p.lookups,
            p.lookup_errors,
            p.lookup_unfinished,
            percentiles_json("lookup", &p.lookup),
            p.modifies,
            p.modify_errors,
            p.modify_unfinished,
            percentiles_json("modify", &p.modify),
            p.late,
            self.errors(),
            first_error.map_or("null".to_string(), |e| json_string(e)),
        )
    }
}

fn check_load(config: &LoadConfig) -> Result<(), Error> {
    if config.scan_connections > CONNECTIONS_MAX {
        return Err(Error::Config(format!("--scan-connections must be 0..={CONNECTIONS_MAX}")));
    }
    if config.scans_per_connection == 0 || config.scans_per_connection > SCANS_PER_CONNECTION_MAX {
        return Err(Error::Config(format!("--scans-per-connection must be 1..={SCANS_PER_CONNECTION_MAX}")));
    }
    if config.duration.is_zero() || config.duration > DURATION_MAX || config.warmup >= config.duration {
        return Err(Error::Config("--duration-s must be in (warmup, 600]".into()));
    }
    if config.grace > DURATION_MAX {
        return Err(Error::Config("--grace-s must be in [0, 600]".into()));
    }
    for rate in [config.lookup_rate, config.modify_rate] {
        if !(0.0..=10_000.0).contains(&rate) {
            return Err(Error::Config("rates must be in [0, 10000] per second".into()));
        }
    }
    if config.range.is_empty() {
        return Err(Error::Config("--range is empty".into()));
    }
    // The modifies must never write what the scanners look for.
    if let Filter::EqualityMatch(ava) = &config.scan_filter {
        let same_attribute =
            ava.attribute_desc.as_ref().eq_ignore_ascii_case(config.modify_attribute.as_bytes());
        let value = String::from_utf8_lossy(ava.assertion_value.as_ref()).to_ascii_lowercase();
        if same_attribute && value.starts_with(&config.modify_value_prefix.to_ascii_lowercase()) {
            return Err(Error::Config("the modifies' values could match the scan filter".into()));
        }
    }
    Ok(())
}

/// Opens every connection (the probe binds), then runs scanners and probe until the
/// deadline. Failures while connecting abort the run; later ones are counted as errors.
pub async fn run_load(config: &LoadConfig) -> Result<LoadReport, Error> {
    check_load(config)?;
    let mut scanners = Vec::with_capacity(config.scan_connections);
    for _ in 0..config.scan_connections {
        scanners.push(Connection::open(&config.address).await?);
    }
    let mut probe_connection = Connection::open(&config.address).await?;
    probe_connection.bind(&config.bind_dn, &config.password).await?;

    let request = search(&config.base, SearchScope::WholeSubtree, config.scan_filter.clone(), 0, 0);
    let started = Instant::now();
    let start = tokio::time::Instant::now();
    let end = start + config.duration;
    let deadline = end + config.grace;
    let (stop, stopped) = watch::channel(false);
    let tasks: Vec<_> = scanners
        .into_iter()
        .map(|c| {
            let task =
                scan_connection(c, request.clone(), config.scans_per_connection, deadline, stopped.clone());
            tokio::spawn(task)
        })
        .collect();
    let probe_start = start + config.warmup;
    let probe_tally = probe(probe_connection, config, probe_start, end, deadline).await;
    let probe_seconds = (tokio::time::Instant::now().min(deadline) - probe_start).as_secs_f64();
    let seconds = started.elapsed().as_secs_f64();
    let _ = stop.send(true);

    let mut scans = ScanTally {
        scans: 0,
        errors: 0,
        unfinished: 0,
        entries: 0,
        histogram: new_histogram(),
        first_error: None,
    };
    for task in tasks {
        let tally = task.await.map_err(|e| Error::Unexpected(format!("scanner task: {e}")))?;
        scans.scans += tally.scans;
        scans.errors += tally.errors;
        scans.unfinished += tally.unfinished;
        scans.entries += tally.entries;
        let _ = scans.histogram.add(&tally.histogram);
        if scans.first_error.is_none() {
            scans.first_error = tally.first_error;
        }
    }
    let config_summary = format!(
        "\"scan_connections\":{},\"scans_per_connection\":{},\"lookup_rate\":{},\"modify_rate\":{}",
        config.scan_connections, config.scans_per_connection, config.lookup_rate, config.modify_rate
    );
    Ok(LoadReport { seconds, probe_seconds, config_summary, scans, probe: probe_tally })
}

// --- stop mode ---------------------------------------------------------------------------

/// Abandon or close: how often the stop went out while the scan still ran.
#[derive(Debug, Default)]
struct StopTally {
    attempts: u64,
    /// The stop was sent before the scan's SearchResultDone arrived.
    stopped: u64,
    /// The scan finished before the delay was up; nothing was stopped.
    finished_first: u64,
    errors: u64,
}

impl StopTally {
    fn json(&self) -> String {
        format!(
            "{{\"attempts\":{},\"stopped\":{},\"finished_first\":{},\"errors\":{}}}",
            self.attempts, self.stopped, self.finished_first, self.errors
        )
    }
}

/// sizeLimit or timeLimit: the client sees the whole search, so its latency is measured.
#[derive(Debug)]
struct LimitTally {
    attempts: u64,
    /// Ended with the expected result code (sizeLimitExceeded, timeLimitExceeded).
    limited: u64,
    /// Ended otherwise (success, another code, a broken connection).
    other: u64,
    histogram: Histogram<u64>,
    first_other: Option<String>,
}

impl LimitTally {
    fn new() -> LimitTally {
        LimitTally { attempts: 0, limited: 0, other: 0, histogram: new_histogram(), first_other: None }
    }

    fn json(&self) -> String {
        format!(
            "{{\"attempts\":{},\"limited\":{},\"other\":{},{},\"first_other\":{}}}",
            self.attempts,
            self.limited,
            self.other,
            percentiles_json("client", &self.histogram),
            self.first_other.as_ref().map_or("null".to_string(), |e| json_string(e))
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopKind {
    Abandon,
    Close,
    SizeLimit,
    TimeLimit,
}

/// The stop mode's result.
#[derive(Debug)]
pub struct StopReport {
    pub seconds: f64,
    /// How long one full unindexed scan took, alone (the second of two).
    pub full_scan_ms: f64,
    abandon: StopTally,
    close: StopTally,
    size_limit: LimitTally,
    /// None when a full scan is too short for timeLimit=1 to stop anything.
    time_limit: Option<LimitTally>,
}

impl StopReport {
    pub fn to_json(&self) -> String {
        format!(
            "{{\"mode\":\"stop\",\"seconds\":{:.3},\"full_scan_ms\":{:.1},\"abandon\":{},\"close\":{},\
             \"size_limit\":{},\"time_limit\":{}}}",
            self.seconds,
            self.full_scan_ms,
            self.abandon.json(),
            self.close.json(),
            self.size_limit.json(),
            self.time_limit
                .as_ref()
                .map_or("{\"skipped\":\"a full scan takes under the minimum\"}".into(), |t| t.json())
        )
    }

    pub fn attempts(&self) -> u64 {
        self.abandon.attempts
            + self.close.attempts
            + self.size_limit.attempts
            + self.time_limit.as_ref().map_or(0, |t| t.attempts)
    }
}

fn check_stop(config: &StopConfig) -> Result<(), Error> {
    if config.duration.is_zero() || config.duration > DURATION_MAX {
        return Err(Error::Config("--duration-s must be in (0, 600]".into()));
    }
    if config.delay_ms.is_empty() || config.delay_ms.end > 60_000 {
        return Err(Error::Config("--stop-delay-ms must be START..END with START < END <= 60000".into()));
    }
    if config.count_max == 0 {
        return Err(Error::Config("--stop-count-max must be at least 1".into()));
    }
    Ok(())
}

/// Starts a scan on `connection` and stops it after `delay` (Abandon, or the caller
/// closes the connection), unless its SearchResultDone comes first.
async fn scan_then_stop(
    connection: &mut Connection,
    request: ProtocolOp,
    delay: Duration,
    kind: StopKind,
    tally: &mut StopTally,
) -> Result<(), Error> {
    tally.attempts += 1;
    let id = connection.send(request).await?;
    match timeout(delay, connection.wait_final(id)).await {
        Ok(Ok(_)) => tally.finished_first += 1,
        Ok(Err(error)) => return Err(error),
        Err(_) => {
            if kind == StopKind::Abandon {
                connection.send(ProtocolOp::AbandonRequest(id)).await?;
            }
            tally.stopped += 1;
        }
    }
    Ok(())
}

async fn limited_search(
    connection: &mut Connection,
    request: ProtocolOp,
    expected: u32,
    wait: Duration,
    tally: &mut LimitTally,
) -> Result<(), Error> {
    tally.attempts += 1;
    let sent = Instant::now();
    let outcome = timeout(wait, connection.exchange(request)).await;
    match outcome {
        Ok(Ok((code, _))) if code == expected => {
            tally.limited += 1;
            record(&mut tally.histogram, sent.elapsed());
            Ok(())
        }
        Ok(Ok((code, entries))) => {
            tally.other += 1;
            tally.first_other.get_or_insert_with(|| {
                format!("resultCode {code} after {entries} entries, expected {expected}")
            });
            Ok(())
        }
        Ok(Err(error)) => Err(error),
        Err(_) => Err(Error::Timeout(wait.as_millis() as u64)),
    }
}

/// Times one full scan (twice; the second counts), then cycles through the kinds of stop
/// until the deadline or until every kind has had `count_max` attempts.
pub async fn run_stop(config: &StopConfig) -> Result<StopReport, Error> {
    check_stop(config)?;
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + config.duration;
    let scan = search(&config.base, SearchScope::WholeSubtree, config.scan_filter.clone(), 0, 0);
    let mut calibration = Connection::open(&config.address).await?;
    let mut full_scan = Duration::ZERO;
    for _ in 0..2 {
        let sent = Instant::now();
        let (code, _) = timeout_at(deadline, calibration.exchange(scan.clone()))
            .await
            .map_err(|_| Error::Config("one full scan takes longer than --duration-s".into()))??;
        if code != 0 {
            return Err(Error::Unexpected(format!("full scan: resultCode {code}")));
        }
        full_scan = sent.elapsed();
    }
    calibration.close(std::iter::empty()).await;

    let mut kinds = vec![StopKind::Abandon, StopKind::Close, StopKind::SizeLimit];
    let mut time_limit = None;
    if full_scan >= config.time_limit_scan_min {
        kinds.push(StopKind::TimeLimit);
        time_limit = Some(LimitTally::new());
    }
    let mut report = StopReport {
        seconds: 0.0,
        full_scan_ms: full_scan.as_secs_f64() * 1e3,
        abandon: StopTally::default(),
        close: StopTally::default(),
        size_limit: LimitTally::new(),
        time_limit,
    };
    let mut rng = XorShift64::new(config.seed, 2_000_000);
    let mut abandon_connection = Connection::open(&config.address).await?;
    let mut limit_connection = Connection::open(&config.address).await?;
    let size_request = search(&config.base, SearchScope::WholeSubtree, config.many_filter.clone(), 1, 0);
    let time_request = search(&config.base, SearchScope::WholeSubtree, config.scan_filter.clone(), 0, 1);
    let limit_wait = full_scan * 2 + Duration::from_secs(5);
    let span = config.delay_ms.end - config.delay_ms.start;

    let attempts_of = |report: &StopReport, kind: StopKind| match kind {
        StopKind::Abandon => report.abandon.attempts,
        StopKind::Close => report.close.attempts,
        StopKind::SizeLimit => report.size_limit.attempts,
        StopKind::TimeLimit => report.time_limit.as_ref().map_or(u64::MAX, |t| t.attempts),
    };
    let mut turn = 0usize;
    let work = async {
        loop {
            let open: Vec<StopKind> =
                kinds.iter().copied().filter(|&k| attempts_of(&report, k) < config.count_max).collect();
            if open.is_empty() {
                return Ok::<(), Error>(());
            }
            let kind = open[turn % open.len()];
            turn += 1;
            let delay = Duration::from_millis(config.delay_ms.start + rng.below(span));
            let result = match kind {
                StopKind::Abandon => {
                    scan_then_stop(&mut abandon_connection, scan.clone(), delay, kind, &mut report.abandon)
                        .await
                }
                StopKind::Close => {
                    let mut connection = Connection::open(&config.address).await?;
                    let result =
                        scan_then_stop(&mut connection, scan.clone(), delay, kind, &mut report.close).await;
                    drop(connection); // the close is the stop
                    result
                }
                StopKind::SizeLimit => {
                    limited_search(
                        &mut limit_connection,
                        size_request.clone(),
                        RESULT_SIZE_LIMIT_EXCEEDED,
                        limit_wait,
                        &mut report.size_limit,
                    )
                    .await
                }
                StopKind::TimeLimit => {
                    let tally = report.time_limit.as_mut().expect("only scheduled when present");
                    limited_search(
                        &mut limit_connection,
                        time_request.clone(),
                        RESULT_TIME_LIMIT_EXCEEDED,
                        limit_wait,
                        tally,
                    )
                    .await
                }
            };
            if let Err(error) = result {
                // Count it and go on with fresh connections; a dead server ends at the deadline.
                eprintln!("stop run, {kind:?}: {error}");
                match kind {
                    StopKind::Abandon => {
                        report.abandon.errors += 1;
                        abandon_connection = Connection::open(&config.address).await?;
                    }
                    StopKind::Close => report.close.errors += 1,
                    StopKind::SizeLimit | StopKind::TimeLimit => {
                        let tally = match kind {
                            StopKind::SizeLimit => &mut report.size_limit,
                            _ => report.time_limit.as_mut().expect("only scheduled when present"),
                        };
                        tally.other += 1;
                        tally.first_other.get_or_insert_with(|| error.to_string());
                        limit_connection = Connection::open(&config.address).await?;
                    }
                }
            }
            sleep(config.pause).await;
        }
    };
    if let Ok(Err(error)) = timeout_at(deadline, work).await {
        eprintln!("stop run ended early: {error}");
    }
    abandon_connection.close(std::iter::empty()).await;
    limit_connection.close(std::iter::empty()).await;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::responder;
    use tokio::net::TcpListener;

    #[test]
    fn filters() {
        assert_eq!(
            parse_filter("(description=nomatch)").unwrap(),
            Filter::equality("description", "nomatch")
        );
        assert_eq!(parse_filter("givenName=User").unwrap(), Filter::equality("givenName", "User"));
        assert_eq!(parse_filter("description=*").unwrap(), Filter::present("description"));
        for bad in ["description", "=x", "cn=a*b", "cn>=3"] {
            assert!(parse_filter(bad).is_err(), "{bad}");
        }
    }

    fn load_config(address: String) -> LoadConfig {
        LoadConfig {
            address,
            base: "dc=example,dc=com".into(),
            scan_filter: Filter::equality("description", "nomatch"),
            scan_connections: 2,
            scans_per_connection: 3,
            duration: Duration::from_millis(600),
            grace: Duration::from_secs(2),
            warmup: Duration::from_millis(100),
            lookup_rate: 200.0,
            modify_rate: 100.0,
            dn_template: Template::parse("uid=user{:05},ou=people,dc=example,dc=com").unwrap(),
            range: 0..1000,
            bind_dn: "cn=admin,dc=example,dc=com".into(),
            password: "secret".into(),
            modify_attribute: "description".into(),
            modify_value_prefix: "probe-".into(),
            seed: 1,
        }
    }

    #[test]
    fn modifies_never_write_the_scanned_value() {
        let mut config = load_config(String::new());
        assert!(check_load(&config).is_ok());
        config.scan_filter = Filter::equality("Description", "probe-1-2");
        assert!(check_load(&config).is_err());
    }

    #[test]
    fn schedule_skips_missed_slots() {
        let interval = Duration::from_millis(10);
        let mut late = 0;
        let mut next = tokio::time::Instant::now() - Duration::from_millis(100);
        advance(&mut next, interval, &mut late);
        assert!(late >= 8, "{late}");
        assert!(next <= tokio::time::Instant::now());
    }

    // The null responder answers every search with one entry and success: the scanners and
    // the probe count completed operations, and the run stops by itself.
    #[tokio::test]
    async fn load_against_the_null_responder() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(responder::serve(listener, 16));
        let report = run_load(&load_config(address)).await.unwrap();
        assert!(report.scans() > 10, "{}", report.to_json());
        assert!(report.lookups() > 10 && report.modifies() > 5, "{}", report.to_json());
        assert_eq!(report.errors(), 0, "{}", report.to_json());
        let json = report.to_json();
        assert!(json.starts_with("{\"mode\":\"load\",") && json.contains("\"lookup_p99_us\":"), "{json}");
        server.abort();
    }

    // Against the null responder every scan finishes at once: the stops find nothing to
    // stop, and the limited searches end in success (counted as "other").
    #[tokio::test]
    async fn stop_against_the_null_responder() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(responder::serve(listener, 16));
        let config = StopConfig {
            address,
            base: "dc=example,dc=com".into(),
            scan_filter: Filter::equality("description", "nomatch"),
            many_filter: Filter::equality("givenName", "User"),
            duration: Duration::from_secs(5),
            count_max: 3,
            delay_ms: 5..10,
            pause: Duration::from_millis(1),
            time_limit_scan_min: Duration::from_secs(1),
            seed: 1,
        };
        let report = run_stop(&config).await.unwrap();
        let json = report.to_json();
        assert_eq!(report.attempts(), 9, "{json}");
        assert_eq!(report.abandon.finished_first + report.close.finished_first, 6, "{json}");
        assert_eq!(report.size_limit.other, 3, "{json}");
        assert!(json.contains("\"time_limit\":{\"skipped\""), "{json}");
        server.abort();
    }
}
