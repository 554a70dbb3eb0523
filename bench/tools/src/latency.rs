//! `ldap-latency`: a closed-loop client that measures how long each operation takes.
//!
//! `connections` TCP connections, each a tokio task with exactly one request outstanding:
//! send, wait for the final response, record the time in the connection's HDR histogram,
//! send the next. Which entry each request names is drawn from `range` by a seeded
//! [`XorShift64`] per connection, so two runs with the same arguments ask for the same
//! entries in the same order. The run stops at `duration` or after `count_max` operations,
//! whichever comes first, and a request without an answer within `op_timeout` ends its
//! connection, so the whole run takes at most `duration + op_timeout` once connected.
//!
//! Only successful operations are counted in `ops` and in the percentiles: a search must
//! end in SearchResultDone success having returned at least one entry, a bind in a
//! BindResponse success. Anything else counts in `errors`.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use ferrodir_proto::filter::Filter;
use ferrodir_proto::frame::{check_frame, FrameLimits};
use ferrodir_proto::message::{
    encode_message_into, AuthenticationChoice, BindRequest, DerefAliases, LdapMessage, OctetString,
    ProtocolOp, SearchRequest, SearchScope, MESSAGE_ID_MAX,
};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::Error;
use crate::template::{FirstRdn, Template};
use crate::wire::{self, tag};
use crate::xorshift::XorShift64;

/// One histogram per connection costs ~100 KiB (u32 counts, 3 significant digits up to
/// [`LATENCY_NS_MAX`]); this keeps the worst case near 100 MiB.
pub const CONNECTIONS_MAX: usize = 1024;
/// Latencies above this are recorded as this (the op timeout cannot exceed it).
pub const LATENCY_NS_MAX: u64 = 10_000_000_000;
/// Search results in a benchmark are small; a bigger PDU means we talk to the wrong thing.
const PDU_BYTES_MAX: usize = 16 * 1024 * 1024;
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// What each operation asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Base-scope search of the rendered DN, `(objectClass=*)`, all user attributes.
    Base,
    /// Subtree search under the template's parent for its first RDN: `(uid=user00042)`.
    UidSub,
    /// Base-scope search of the root DSE (`""`), `(objectClass=*)`, attributes `+`.
    RootDse,
    /// A simple bind on the open connection, as the rendered DN (or `--bind-dn`).
    Bind,
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(text: &str) -> Result<Mode, Error> {
        match text {
            "base" => Ok(Mode::Base),
            "uid-sub" => Ok(Mode::UidSub),
            "rootdse" => Ok(Mode::RootDse),
            "bind" => Ok(Mode::Bind),
            _ => Err(Error::Config(format!("mode {text:?}: expected base, uid-sub, rootdse or bind"))),
        }
    }
}

/// Everything one run needs, already parsed.
#[derive(Debug, Clone)]
pub struct Config {
    /// `host:port`, from [`parse_ldap_url`].
    pub address: String,
    pub mode: Mode,
    pub base_template: Template,
    /// uid-sub only: where the subtree search starts; by default the template's parent.
    pub search_base: Option<String>,
    /// Other modes: bind once per connection, before measuring. Bind mode: bind as this
    /// fixed DN every time instead of the rendered one.
    pub bind_dn: Option<String>,
    /// May hold a placeholder (`password{}`), rendered with the same entry number.
    pub password: Option<Template>,
    pub count_max: u64,
    pub range: Range<u64>,
    pub connections: usize,
    pub duration: Duration,
    pub op_timeout: Duration,
    pub seed: u64,
}

/// `ldap://host:port` (port 389 when left out; a trailing `/` is allowed) to `host:port`.
pub fn parse_ldap_url(url: &str) -> Result<String, Error> {
    let rest = url
        .strip_prefix("ldap://")
        .ok_or_else(|| Error::Config(format!("{url:?}: only ldap:// URLs are supported")))?;
    let host_port = rest.strip_suffix('/').unwrap_or(rest);
    if host_port.is_empty() || host_port.contains('/') {
        return Err(Error::Config(format!("{url:?}: expected ldap://host:port")));
    }
    let has_port = match host_port.rsplit_once(':') {
        Some((host, port)) => !host.ends_with(':') && port.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    };
    let bracketed_v6 = host_port.starts_with('[') && host_port.ends_with(']');
    Ok(if has_port && !bracketed_v6 { host_port.to_string() } else { format!("{host_port}:389") })
}

/// `A..B`: the half-open range of entry numbers, as in Rust.
pub fn parse_range(text: &str) -> Result<Range<u64>, Error> {
    let bad = || Error::Config(format!("range {text:?}: expected START..END with START < END"));
    let (start, end) = text.split_once("..").ok_or_else(bad)?;
    let start: u64 = start.trim().parse().map_err(|_| bad())?;
    let end: u64 = end.trim().parse().map_err(|_| bad())?;
    if start < end {
        Ok(start..end)
    } else {
        Err(bad())
    }
}

/// The result of a run: the one JSON line the tool prints.
#[derive(Debug, Clone)]
pub struct Report {
    pub ops: u64,
    pub errors: u64,
    pub seconds: f64,
    /// Nanoseconds per successful operation.
    pub histogram: Histogram<u32>,
}

impl Report {
    pub fn ops_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ops as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// The latency at `quantile` in microseconds (0 when nothing succeeded).
    pub fn quantile_us(&self, quantile: f64) -> f64 {
        if self.histogram.is_empty() {
            0.0
        } else {
            self.histogram.value_at_quantile(quantile) as f64 / 1000.0
        }
    }

    pub fn to_json(&self) -> String {
        format!(
            "{{\"ops\":{},\"seconds\":{:.3},\"ops_per_s\":{:.1},\"p50_us\":{:.1},\"p99_us\":{:.1},\
             \"p999_us\":{:.1},\"errors\":{}}}",
            self.ops,
            self.seconds,
            self.ops_per_s(),
            self.quantile_us(0.5),
            self.quantile_us(0.99),
            self.quantile_us(0.999),
            self.errors
        )
    }
}

fn new_histogram() -> Result<Histogram<u32>, Error> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).map_err(|e| Error::Config(format!("histogram: {e}")))
}

/// Builds each operation's request from the entry number, per mode.
#[derive(Debug)]
enum Requests {
    Base { dn: Template },
    UidSub { attribute: String, value: Template, search_base: String },
    RootDse,
    Bind { fixed_dn: Option<String>, dn: Template, password: Template },
}

impl Requests {
    fn new(config: &Config) -> Result<Requests, Error> {
        Ok(match config.mode {
            Mode::Base => Requests::Base { dn: config.base_template.clone() },
            Mode::UidSub => {
                let first_rdn = FirstRdn::split(config.base_template.source())?;
                let search_base = config.search_base.clone().unwrap_or(first_rdn.parent);
                Requests::UidSub { attribute: first_rdn.attribute, value: first_rdn.value, search_base }
            }
            Mode::RootDse => Requests::RootDse,
            Mode::Bind => Requests::Bind {
                fixed_dn: config.bind_dn.clone(),
                dn: config.base_template.clone(),
                password: config.password.clone().ok_or_else(|| {
                    Error::Config("bind mode needs --password (it may hold a {} placeholder)".into())
                })?,
            },
        })
    }

    fn request(&self, number: u64) -> ProtocolOp {
        match self {
            Requests::Base { dn } => search(dn.render(number), SearchScope::BaseObject, presence(), vec![]),
            Requests::UidSub { attribute, value, search_base } => {
                let filter = Filter::equality(attribute, value.render(number));
                search(search_base.clone(), SearchScope::WholeSubtree, filter, vec![])
            }
            Requests::RootDse => search(
                String::new(),
                SearchScope::BaseObject,
                presence(),
                vec![OctetString::from_static(b"+")],
            ),
            Requests::Bind { fixed_dn, dn, password } => {
                let name = fixed_dn.clone().unwrap_or_else(|| dn.render(number));
                simple_bind(&name, &password.render(number))
            }
        }
    }

    /// Whether the final answer counts as a success: searches must return an entry.
    fn accepts(&self, answer: &Answer) -> bool {
        let entries_wanted = if matches!(self, Requests::Bind { .. }) { 0 } else { 1 };
        answer.result_code == 0 && answer.entries >= entries_wanted
    }
}

fn presence() -> Filter {
    Filter::present("objectClass")
}

fn search(base: String, scope: SearchScope, filter: Filter, attributes: Vec<OctetString>) -> ProtocolOp {
    ProtocolOp::SearchRequest(SearchRequest {
        base_object: OctetString::from(base.into_bytes()),
        scope,
        deref_aliases: DerefAliases::NeverDerefAliases,
        size_limit: 0,
        time_limit: 0,
        types_only: false,
        filter,
        attributes,
    })
}

fn simple_bind(name: &str, password: &str) -> ProtocolOp {
    ProtocolOp::BindRequest(BindRequest {
        version: 3,
        name: OctetString::from(name.as_bytes().to_vec()),
        authentication: AuthenticationChoice::Simple(OctetString::from(password.as_bytes().to_vec())),
    })
}

/// The final answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer {
    result_code: u32,
    /// SearchResultEntry messages before the SearchResultDone.
    entries: u64,
}

/// One client connection with its buffers; one request in flight at a time.
struct Connection {
    stream: TcpStream,
    input: BytesMut,
    output: Vec<u8>,
    next_message_id: u32,
    limits: FrameLimits,
}

impl Connection {
    async fn open(address: &str) -> Result<Connection, Error> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            input: BytesMut::with_capacity(READ_CHUNK_BYTES),
            output: Vec::with_capacity(512),
            next_message_id: 1,
            limits: FrameLimits { pdu_bytes_max: PDU_BYTES_MAX, nesting_depth_max: 64 },
        })
    }

    /// Sends `protocol_op` and reads until its final response (SearchResultDone or
    /// BindResponse), counting the entries on the way.
    async fn exchange(&mut self, protocol_op: ProtocolOp) -> Result<Answer, Error> {
        let message_id = self.next_message_id;
        self.next_message_id = if message_id >= MESSAGE_ID_MAX { 1 } else { message_id + 1 };
        self.output.clear();
        encode_message_into(&LdapMessage { message_id, protocol_op, controls: None }, &mut self.output)?;
        self.stream.write_all(&self.output).await?;
        let mut entries = 0;
        loop {
            let len = self.read_frame().await?;
            let answer = wire::peek(&self.input[..len])?;
            if answer.message_id != message_id {
                let what = if answer.message_id == 0 { " (Notice of Disconnection?)" } else { "" };
                return Err(Error::Unexpected(format!(
                    "messageID {}{what} with tag {:#04x} while waiting for {message_id}",
                    answer.message_id, answer.op_tag
                )));
            }
            let done = match answer.op_tag {
                tag::SEARCH_RESULT_ENTRY => {
                    entries += 1;
                    None
                }
                tag::SEARCH_RESULT_REFERENCE | tag::INTERMEDIATE_RESPONSE => None,
                tag::SEARCH_RESULT_DONE | tag::BIND_RESPONSE => Some(wire::result_code(answer.op_content)?),
                other => return Err(Error::Unexpected(format!("response tag {other:#04x}"))),
            };
            self.input.advance(len);
            if let Some(result_code) = done {
                return Ok(Answer { result_code, entries });
            }
        }
    }

    /// Reads until the buffer starts with one whole message; returns its length.
    async fn read_frame(&mut self) -> Result<usize, Error> {
        loop {
            if let Some(len) = check_frame(&self.input, &self.limits)? {
                return Ok(len);
            }
            self.input.reserve(READ_CHUNK_BYTES);
            if self.stream.read_buf(&mut self.input).await? == 0 {
                return Err(Error::Closed);
            }
        }
    }
}

/// What one connection measured.
struct Tally {
    histogram: Histogram<u32>,
    ops: u64,
    errors: u64,
    /// Why the connection stopped early, if it did.
    fatal: Option<Error>,
}

/// The shared stop conditions of every connection.
struct Limits {
    deadline: Instant,
    count_max: u64,
    op_timeout: Duration,
    /// Operations claimed so far, across connections; one past `count_max` stops.
    claimed: AtomicU64,
}

async fn drive(
    mut connection: Connection,
    requests: Arc<Requests>,
    limits: Arc<Limits>,
    range: Range<u64>,
    mut rng: XorShift64,
) -> Result<Tally, Error> {
    let mut tally = Tally { histogram: new_histogram()?, ops: 0, errors: 0, fatal: None };
    let span = range.end - range.start;
    while Instant::now() < limits.deadline
        && limits.claimed.fetch_add(1, Ordering::Relaxed) < limits.count_max
    {
        let request = requests.request(range.start + rng.below(span));
        let started = Instant::now();
        match tokio::time::timeout(limits.op_timeout, connection.exchange(request)).await {
            Ok(Ok(answer)) if requests.accepts(&answer) => {
                let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                tally.histogram.saturating_record(nanos.max(1));
                tally.ops += 1;
            }
            Ok(Ok(_)) => tally.errors += 1,
            Ok(Err(error)) => {
                tally.errors += 1;
                tally.fatal = Some(error);
                break;
            }
            Err(_) => {
                tally.errors += 1;
                tally.fatal = Some(Error::Timeout(limits.op_timeout.as_millis() as u64));
                break;
            }
        }
    }
    Ok(tally)
}

/// Connects every connection (binding first when asked), then measures until the duration
/// or the count is reached. Connection failures after the start are counted as errors and
/// reported on stderr; failures before it abort the run.
pub async fn run(config: &Config) -> Result<Report, Error> {
    check(config)?;
    let requests = Arc::new(Requests::new(config)?);
    let mut connections = Vec::with_capacity(config.connections);
    for _ in 0..config.connections {
        let mut connection = tokio::time::timeout(config.op_timeout, Connection::open(&config.address))
            .await
            .map_err(|_| Error::Timeout(config.op_timeout.as_millis() as u64))??;
        if let (Some(dn), false) = (&config.bind_dn, config.mode == Mode::Bind) {
            let password = config.password.as_ref().map(|p| p.render(0)).unwrap_or_default();
            let answer = connection.exchange(simple_bind(dn, &password)).await?;
            if answer.result_code != 0 {
                return Err(Error::Unexpected(format!("bind as {dn}: resultCode {}", answer.result_code)));
            }
        }
        connections.push(connection);
    }

    let started = Instant::now();
    let limits = Arc::new(Limits {
        deadline: started + config.duration,
        count_max: config.count_max,
        op_timeout: config.op_timeout,
        claimed: AtomicU64::new(0),
    });
    let tasks: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(index, connection)| {
            let rng = XorShift64::new(config.seed, index as u64);
            let task =
                drive(connection, Arc::clone(&requests), Arc::clone(&limits), config.range.clone(), rng);
            tokio::spawn(task)
        })
        .collect();

    let mut report = Report { ops: 0, errors: 0, seconds: 0.0, histogram: new_histogram()? };
    for (index, task) in tasks.into_iter().enumerate() {
        let tally = task.await.map_err(|e| Error::Unexpected(format!("connection task: {e}")))??;
        report.ops += tally.ops;
        report.errors += tally.errors;
        // Same bounds on both sides: adding cannot fail.
        let _ = report.histogram.add(&tally.histogram);
        if let Some(error) = tally.fatal {
            eprintln!("connection {index} stopped: {error}");
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn check(config: &Config) -> Result<(), Error> {
    if config.connections == 0 || config.connections > CONNECTIONS_MAX {
        return Err(Error::Config(format!("--connections must be 1..={CONNECTIONS_MAX}")));
    }
    if config.op_timeout.is_zero() || config.op_timeout.as_nanos() > u128::from(LATENCY_NS_MAX) {
        return Err(Error::Config(format!("--op-timeout-ms must be 1..={}", LATENCY_NS_MAX / 1_000_000)));
    }
    if config.range.is_empty() {
        return Err(Error::Config("--range is empty".into()));
    }
    if config.password.is_some() && config.bind_dn.is_none() && config.mode != Mode::Bind {
        return Err(Error::Config("--password needs --bind-dn outside bind mode".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::responder;
    use tokio::net::TcpListener;

    #[test]
    fn urls() {
        assert_eq!(parse_ldap_url("ldap://127.0.0.1:3389").unwrap(), "127.0.0.1:3389");
        assert_eq!(parse_ldap_url("ldap://localhost/").unwrap(), "localhost:389");
        assert_eq!(parse_ldap_url("ldap://[::1]:3389/").unwrap(), "[::1]:3389");
        assert_eq!(parse_ldap_url("ldap://[::1]").unwrap(), "[::1]:389");
        assert!(parse_ldap_url("ldaps://h:636").is_err());
        assert!(parse_ldap_url("ldap://h:1/dc=x").is_err());
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("0..10000").unwrap(), 0..10_000);
        for bad in ["5..5", "9..1", "1-2", "a..3", "..3"] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
    }

    fn config(address: String, mode: Mode, count_max: u64) -> Config {
        Config {
            address,
            mode,
            base_template: Template::parse("uid=user{:05},ou=people,dc=example,dc=com").unwrap(),
            search_base: None,
            bind_dn: None,
            password: None,
            count_max,
            range: 0..10_000,
            connections: 3,
            duration: Duration::from_secs(20),
            op_timeout: Duration::from_secs(5),
            seed: 1,
        }
    }

    #[test]
    fn requests_per_mode() {
        let mut config = config(String::new(), Mode::UidSub, 1);
        let requests = Requests::new(&config).unwrap();
        let ProtocolOp::SearchRequest(search) = requests.request(42) else { panic!("not a search") };
        assert_eq!(search.base_object, OctetString::from_static(b"ou=people,dc=example,dc=com"));
        assert_eq!(search.filter, Filter::equality("uid", "user00042"));
        assert_eq!(search.scope, SearchScope::WholeSubtree);

        config.mode = Mode::Bind;
        assert!(Requests::new(&config).is_err(), "bind mode needs a password");
        config.password = Some(Template::parse("password{}").unwrap());
        let ProtocolOp::BindRequest(bind) = Requests::new(&config).unwrap().request(7) else { panic!() };
        assert_eq!(bind.name, OctetString::from_static(b"uid=user00007,ou=people,dc=example,dc=com"));
        assert_eq!(bind.authentication, AuthenticationChoice::Simple(OctetString::from_static(b"password7")));
    }

    #[tokio::test]
    async fn measures_against_the_null_responder() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(responder::serve(listener, 16));
        for mode in [Mode::Base, Mode::UidSub, Mode::RootDse] {
            let report = run(&config(address.clone(), mode, 300)).await.unwrap();
            assert_eq!((report.ops, report.errors), (300, 0), "{mode:?}");
            assert!(report.quantile_us(0.5) > 0.0);
            let json = report.to_json();
            assert!(
                json.starts_with("{\"ops\":300,\"seconds\":") && json.ends_with(",\"errors\":0}"),
                "{json}"
            );
        }
        let mut bind = config(address.clone(), Mode::Bind, 50);
        bind.password = Some(Template::parse("password{}").unwrap());
        let report = run(&bind).await.unwrap();
        assert_eq!((report.ops, report.errors), (50, 0));
        // Bound by time too: an unreachable count stops at the deadline.
        let mut timed = config(address, Mode::Base, u64::MAX);
        timed.duration = Duration::from_millis(200);
        let report = run(&timed).await.unwrap();
        assert!(report.ops > 0 && report.seconds < 5.0, "{}", report.to_json());
        server.abort();
    }
}
