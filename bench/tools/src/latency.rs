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
//!
//! Connections are plain, LDAPS or StartTLS ([`Transport`], see [`crate::tls`]). In
//! [`Mode::ConnectBind`] each operation is a connection of its own: connect, the TLS
//! handshake if any, a simple bind, then Unbind and close; the latency is from connecting
//! to the BindResponse.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use ferrodir_proto::filter::Filter;
use ferrodir_proto::frame::{check_frame, FrameLimits};
use ferrodir_proto::message::{
    encode_message_into, AuthenticationChoice, BindRequest, DerefAliases, ExtendedRequest, LdapMessage,
    OctetString, ProtocolOp, SearchRequest, SearchScope, MESSAGE_ID_MAX,
};
use hdrhistogram::Histogram;
use tokio::net::TcpStream;

use crate::error::Error;
use crate::template::{FirstRdn, Template};
use crate::tls::{self, Stream, TlsClient, Transport};
use crate::wire::{self, tag};
use crate::xorshift::XorShift64;
use crate::zipf::Picker;

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
    /// A new connection per operation (TLS handshake included): bind as in `Bind`, then
    /// Unbind and close.
    ConnectBind,
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(text: &str) -> Result<Mode, Error> {
        match text {
            "base" => Ok(Mode::Base),
            "uid-sub" => Ok(Mode::UidSub),
            "rootdse" => Ok(Mode::RootDse),
            "bind" => Ok(Mode::Bind),
            "connect-bind" => Ok(Mode::ConnectBind),
            _ => Err(Error::Config(format!(
                "mode {text:?}: expected base, uid-sub, rootdse, bind or connect-bind"
            ))),
        }
    }
}

/// Everything one run needs, already parsed.
#[derive(Debug, Clone)]
pub struct Config {
    /// `host:port`, from [`tls::parse_url`].
    pub address: String,
    /// Plain, LDAPS or StartTLS; the TLS ones need `tls`.
    pub transport: Transport,
    pub tls: Option<TlsClient>,
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
    /// Zipf exponent over `range` (issue #28), None: uniform.
    pub zipf: Option<f64>,
    pub connections: usize,
    pub duration: Duration,
    pub op_timeout: Duration,
    pub seed: u64,
}

/// `ldap://host:port` (port 389 when left out; a trailing `/` is allowed) to `host:port`,
/// for the tools that speak plain LDAP only (ldaps:// is refused).
pub fn parse_ldap_url(url: &str) -> Result<String, Error> {
    match tls::parse_url(url)? {
        (address, Transport::Plain) => Ok(address),
        _ => Err(Error::Config(format!("{url:?}: only ldap:// URLs are supported"))),
    }
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
    /// What the first TLS handshake agreed on (see [`Stream::negotiated`]); None if plain.
    pub tls: Option<String>,
    /// This process's user + system CPU seconds over the measured part, when readable.
    pub client_cpu_s: Option<f64>,
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
        let mut json = format!(
            "{{\"ops\":{},\"seconds\":{:.3},\"ops_per_s\":{:.1},\"p50_us\":{:.1},\"p99_us\":{:.1},\
             \"p999_us\":{:.1},\"errors\":{}",
            self.ops,
            self.seconds,
            self.ops_per_s(),
            self.quantile_us(0.5),
            self.quantile_us(0.99),
            self.quantile_us(0.999),
            self.errors
        );
        if let Some(cpu) = self.client_cpu_s {
            json.push_str(&format!(",\"client_cpu_s\":{cpu:.3}"));
        }
        if let Some(tls) = &self.tls {
            // Debug names of rustls enums: letters, digits and underscores only.
            json.push_str(&format!(",\"tls\":\"{tls}\""));
        }
        json.push('}');
        json
    }
}

/// User + system CPU seconds of this process so far, from `/proc/self/stat` (fields 14 and
/// 15, after the parenthesised command name, which may hold spaces). The kernel reports
/// them in USER_HZ, which is 100 on every architecture Linux exports it for. None off Linux.
pub fn process_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    // after_name starts with field 3 (state): utime is field 14, stime field 15.
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some((user + system) as f64 / 100.0)
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

impl Mode {
    fn binds(self) -> bool {
        matches!(self, Mode::Bind | Mode::ConnectBind)
    }
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
            Mode::Bind | Mode::ConnectBind => Requests::Bind {
                fixed_dn: config.bind_dn.clone(),
                dn: config.base_template.clone(),
                password: config.password.clone().ok_or_else(|| {
                    Error::Config("bind modes need --password (it may hold a {} placeholder)".into())
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

/// Where and how to connect: the address, the transport and, for TLS, the client.
#[derive(Debug)]
struct Target {
    address: String,
    transport: Transport,
    tls: Option<TlsClient>,
}

/// RFC 4511 §4.14.1: the StartTLS extended operation's name.
const START_TLS_OID: &[u8] = b"1.3.6.1.4.1.1466.20037";

/// One client connection with its buffers; one request in flight at a time.
struct Connection {
    stream: Stream,
    input: BytesMut,
    output: Vec<u8>,
    next_message_id: u32,
    limits: FrameLimits,
}

impl Connection {
    fn new(stream: Stream) -> Connection {
        Connection {
            stream,
            input: BytesMut::with_capacity(READ_CHUNK_BYTES),
            output: Vec::with_capacity(512),
            next_message_id: 1,
            limits: FrameLimits { pdu_bytes_max: PDU_BYTES_MAX, nesting_depth_max: 64 },
        }
    }

    /// Connects, and for LDAPS or StartTLS completes the TLS handshake.
    async fn open(target: &Target) -> Result<Connection, Error> {
        let tcp = TcpStream::connect(&target.address).await?;
        tcp.set_nodelay(true)?;
        let mut connection = Connection::new(Stream::Plain(tcp));
        let tls = match (target.transport, &target.tls) {
            (Transport::Plain, _) => return Ok(connection),
            (_, None) => return Err(Error::Config("TLS needs a CA file (--ca-file)".into())),
            (_, Some(tls)) => tls,
        };
        if target.transport == Transport::StartTls {
            connection.start_tls().await?;
        }
        let next_message_id = connection.next_message_id;
        let mut connection = Connection::new(tls.handshake(connection.stream.into_plain()?).await?);
        connection.next_message_id = next_message_id;
        Ok(connection)
    }

    /// RFC 4511 §4.14: ask for TLS; the handshake may start once success came back and
    /// nothing else was sent after it.
    async fn start_tls(&mut self) -> Result<(), Error> {
        let request = ProtocolOp::ExtendedRequest(ExtendedRequest {
            request_name: OctetString::from_static(START_TLS_OID),
            request_value: None,
        });
        let answer = self.exchange(request).await?;
        if answer.result_code != 0 {
            return Err(Error::Unexpected(format!("StartTLS refused: resultCode {}", answer.result_code)));
        }
        if !self.input.is_empty() {
            return Err(Error::Unexpected("bytes after the StartTLS response".into()));
        }
        Ok(())
    }

    /// Sends `protocol_op` and reads until its final response (SearchResultDone,
    /// BindResponse or ExtendedResponse), counting the entries on the way.
    async fn exchange(&mut self, protocol_op: ProtocolOp) -> Result<Answer, Error> {
        let message_id = self.send(protocol_op).await?;
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
                tag::SEARCH_RESULT_DONE | tag::BIND_RESPONSE | tag::EXTENDED_RESPONSE => {
                    Some(wire::result_code(answer.op_content)?)
                }
                other => return Err(Error::Unexpected(format!("response tag {other:#04x}"))),
            };
            self.input.advance(len);
            if let Some(result_code) = done {
                return Ok(Answer { result_code, entries });
            }
        }
    }

    /// Encodes and writes one request; returns its messageID.
    async fn send(&mut self, protocol_op: ProtocolOp) -> Result<u32, Error> {
        let message_id = self.next_message_id;
        self.next_message_id = if message_id >= MESSAGE_ID_MAX { 1 } else { message_id + 1 };
        self.output.clear();
        encode_message_into(&LdapMessage { message_id, protocol_op, controls: None }, &mut self.output)?;
        self.stream.write_all(&self.output).await?;
        Ok(message_id)
    }

    /// RFC 4511 §4.3: Unbind (no response), then close our side (TLS: close_notify).
    async fn unbind_and_close(mut self) -> Result<(), Error> {
        self.send(ProtocolOp::UnbindRequest).await?;
        self.stream.close().await;
        Ok(())
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

impl Tally {
    /// Counts the outcome of one operation started at `started`; false when the loop
    /// must stop (the connection broke or timed out).
    fn count(&mut self, started: Instant, outcome: Result<Result<bool, Error>, Error>) -> bool {
        match outcome {
            Ok(Ok(true)) => {
                let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                self.histogram.saturating_record(nanos.max(1));
                self.ops += 1;
                true
            }
            Ok(Ok(false)) => {
                self.errors += 1;
                true
            }
            Ok(Err(error)) | Err(error) => {
                self.errors += 1;
                self.fatal = Some(error);
                false
            }
        }
    }
}

/// The shared stop conditions of every connection.
struct Limits {
    deadline: Instant,
    count_max: u64,
    op_timeout: Duration,
    /// Operations claimed so far, across connections; one past `count_max` stops.
    claimed: AtomicU64,
}

impl Limits {
    fn another(&self) -> bool {
        Instant::now() < self.deadline && self.claimed.fetch_add(1, Ordering::Relaxed) < self.count_max
    }

    fn timed_out(&self) -> Error {
        Error::Timeout(self.op_timeout.as_millis() as u64)
    }
}

/// One open connection, one request at a time, until the limits say stop.
async fn drive(
    mut connection: Connection,
    requests: Arc<Requests>,
    limits: Arc<Limits>,
    picker: Arc<Picker>,
    mut rng: XorShift64,
) -> Result<Tally, Error> {
    let mut tally = Tally { histogram: new_histogram()?, ops: 0, errors: 0, fatal: None };
    while limits.another() {
        let request = requests.request(picker.pick(&mut rng));
        let started = Instant::now();
        let outcome = tokio::time::timeout(limits.op_timeout, connection.exchange(request))
            .await
            .map_err(|_| limits.timed_out())
            .map(|answer| answer.map(|answer| requests.accepts(&answer)));
        if !tally.count(started, outcome) {
            break;
        }
    }
    Ok(tally)
}

/// Connect-bind mode: a new connection per operation, bind, Unbind, close. A failed
/// connection is an error like any other; the loop goes on with the next one.
async fn drive_connect(
    target: Arc<Target>,
    requests: Arc<Requests>,
    limits: Arc<Limits>,
    picker: Arc<Picker>,
    mut rng: XorShift64,
) -> Result<Tally, Error> {
    let mut tally = Tally { histogram: new_histogram()?, ops: 0, errors: 0, fatal: None };
    while limits.another() {
        let request = requests.request(picker.pick(&mut rng));
        let started = Instant::now();
        let once = async {
            let mut connection = Connection::open(&target).await?;
            let answer = connection.exchange(request).await?;
            let accepted = requests.accepts(&answer);
            let latency_end = Instant::now();
            connection.unbind_and_close().await?;
            Ok::<_, Error>((accepted, latency_end))
        };
        match tokio::time::timeout(limits.op_timeout, once).await {
            Ok(Ok((true, latency_end))) => {
                let nanos = u64::try_from((latency_end - started).as_nanos()).unwrap_or(u64::MAX);
                tally.histogram.saturating_record(nanos.max(1));
                tally.ops += 1;
            }
            Ok(Ok((false, _))) => tally.errors += 1,
            Ok(Err(error)) => {
                tally.errors += 1;
                tally.fatal.get_or_insert(error);
            }
            Err(_) => {
                tally.errors += 1;
                tally.fatal.get_or_insert(limits.timed_out());
            }
        }
    }
    Ok(tally)
}

/// Connects every connection (binding first when asked), then measures until the duration
/// or the count is reached. Connection failures after the start are counted as errors and
/// reported on stderr; failures before it abort the run. In connect-bind mode one
/// connection is opened and closed before the clock starts, so that a server that cannot
/// be reached (or a certificate that does not verify) fails the run at once.
pub async fn run(config: &Config) -> Result<Report, Error> {
    check(config)?;
    let requests = Arc::new(Requests::new(config)?);
    let picker = Arc::new(match config.zipf {
        None => Picker::uniform(config.range.clone()),
        Some(s) => Picker::zipf(config.range.clone(), s)
            .ok_or_else(|| Error::Config(format!("--zipf {s}: expected a finite exponent >= 0")))?,
    });
    let target = Arc::new(Target {
        address: config.address.clone(),
        transport: config.transport,
        tls: config.tls.clone(),
    });
    let setup_timeout = |_| Error::Timeout(config.op_timeout.as_millis() as u64);
    let mut connections = Vec::with_capacity(config.connections);
    let mut negotiated = None;
    for _ in 0..config.connections {
        let mut connection = tokio::time::timeout(config.op_timeout, Connection::open(&target))
            .await
            .map_err(setup_timeout)??;
        negotiated = negotiated.or_else(|| connection.stream.negotiated());
        if config.mode == Mode::ConnectBind {
            connection.unbind_and_close().await?;
            break;
        }
        if let (Some(dn), false) = (&config.bind_dn, config.mode.binds()) {
            let password = config.password.as_ref().map(|p| p.render(0)).unwrap_or_default();
            let answer = connection.exchange(simple_bind(dn, &password)).await?;
            if answer.result_code != 0 {
                return Err(Error::Unexpected(format!("bind as {dn}: resultCode {}", answer.result_code)));
            }
        }
        connections.push(connection);
    }

    let cpu_before = process_cpu_s();
    let started = Instant::now();
    let limits = Arc::new(Limits {
        deadline: started + config.duration,
        count_max: config.count_max,
        op_timeout: config.op_timeout,
        claimed: AtomicU64::new(0),
    });
    let tasks: Vec<_> = (0..config.connections)
        .zip(connections.into_iter().map(Some).chain(std::iter::repeat_with(|| None)))
        .map(|(index, connection)| {
            let rng = XorShift64::new(config.seed, index as u64);
            let (requests, limits, picker) =
                (Arc::clone(&requests), Arc::clone(&limits), Arc::clone(&picker));
            match connection {
                Some(connection) => tokio::spawn(drive(connection, requests, limits, picker, rng)),
                None => tokio::spawn(drive_connect(Arc::clone(&target), requests, limits, picker, rng)),
            }
        })
        .collect();

    let mut report = Report {
        ops: 0,
        errors: 0,
        seconds: 0.0,
        histogram: new_histogram()?,
        tls: negotiated,
        client_cpu_s: None,
    };
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
    report.client_cpu_s = cpu_before.zip(process_cpu_s()).map(|(before, after)| after - before);
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
    if config.password.is_some() && config.bind_dn.is_none() && !config.mode.binds() {
        return Err(Error::Config("--password needs --bind-dn outside the bind modes".into()));
    }
    if config.transport != Transport::Plain && config.tls.is_none() {
        return Err(Error::Config("ldaps:// and --starttls need --ca-file".into()));
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
        assert!(parse_ldap_url("ldaps://h:636").is_err(), "plain-only tools refuse ldaps://");
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
            transport: Transport::Plain,
            tls: None,
            mode,
            base_template: Template::parse("uid=user{:05},ou=people,dc=example,dc=com").unwrap(),
            search_base: None,
            bind_dn: None,
            password: None,
            count_max,
            range: 0..10_000,
            zipf: None,
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
                json.starts_with("{\"ops\":300,\"seconds\":")
                    && (json.ends_with(",\"errors\":0}") || json.contains(",\"errors\":0,\"client_cpu_s\":"))
                    && !json.contains("\"tls\""),
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

    /// A CA and a server certificate for 127.0.0.1 (ECDSA P-256, rcgen's default), as PEM
    /// files in a directory of the test's own; returns the CA file and a server config.
    fn pki(name: &str) -> (std::path::PathBuf, Arc<rustls::ServerConfig>) {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert =
            CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &issuer).unwrap();
        let dir = std::env::temp_dir().join(format!("ferrodir-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, issuer.pem()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap();
        (ca_file, Arc::new(config))
    }

    /// The null responder behind TLS: LDAPS, or (`starttls`) one StartTLS request answered
    /// in the clear first.
    async fn tls_responder(listener: TcpListener, config: Arc<rustls::ServerConfig>, starttls: bool) {
        let responses = Arc::new(responder::Responses::new().unwrap());
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        loop {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let (responses, acceptor) = (Arc::clone(&responses), acceptor.clone());
            tokio::spawn(async move {
                if starttls {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut input = BytesMut::new();
                    let len = loop {
                        if let Some(len) = check_frame(&input, &FrameLimits::default()).unwrap() {
                            break len;
                        }
                        assert!(tcp.read_buf(&mut input).await.unwrap() > 0);
                    };
                    assert_eq!(wire::peek(&input[..len]).unwrap().op_tag, tag::EXTENDED_REQUEST);
                    let mut out = Vec::new();
                    responses.answer(&input[..len], &mut out).unwrap();
                    tcp.write_all(&out).await.unwrap();
                }
                let tls = acceptor.accept(tcp).await.unwrap();
                let _ = responder::serve_connection(tls, &responses).await;
            });
        }
    }

    #[tokio::test]
    async fn measures_over_ldaps_and_starttls() {
        for (name, transport) in [("ldaps", Transport::Ldaps), ("starttls", Transport::StartTls)] {
            let (ca_file, server_config) = pki(name);
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap().to_string();
            let server =
                tokio::spawn(tls_responder(listener, server_config, transport == Transport::StartTls));
            let mut base = config(address.clone(), Mode::Base, 200);
            base.transport = transport;
            base.tls = Some(TlsClient::new(&ca_file, "127.0.0.1").unwrap());
            let report = run(&base).await.unwrap();
            assert_eq!((report.ops, report.errors), (200, 0), "{name}");
            let negotiated = report.tls.clone().unwrap();
            assert!(negotiated.starts_with("TLSv1_3 TLS13_"), "{negotiated}");
            assert!(
                report.to_json().ends_with(&format!(",\"tls\":\"{negotiated}\"}}")),
                "{}",
                report.to_json()
            );

            let mut connect = config(address.clone(), Mode::ConnectBind, 30);
            connect.transport = transport;
            connect.tls = base.tls.clone();
            connect.bind_dn = Some("cn=admin,dc=example,dc=com".into());
            connect.password = Some(Template::parse("secret").unwrap());
            let report = run(&connect).await.unwrap();
            assert_eq!((report.ops, report.errors), (30, 0), "{name}");

            // A CA that did not sign the server's certificate: the run fails before the clock.
            let (other_ca, _) = pki(&format!("{name}-other"));
            base.tls = Some(TlsClient::new(&other_ca, "127.0.0.1").unwrap());
            assert!(run(&base).await.is_err(), "{name}: an unknown CA must fail the handshake");
            // Without a client, TLS is refused by the config check.
            base.tls = None;
            assert!(matches!(run(&base).await, Err(Error::Config(_))));
            server.abort();
            for file in [ca_file, other_ca] {
                let _ = std::fs::remove_dir_all(file.parent().unwrap());
            }
        }
    }

    #[tokio::test]
    async fn connect_bind_over_plain_tcp() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(responder::serve(listener, 16));
        let mut connect = config(address, Mode::ConnectBind, 40);
        connect.password = Some(Template::parse("password{}").unwrap());
        let report = run(&connect).await.unwrap();
        assert_eq!((report.ops, report.errors), (40, 0));
        assert!(report.tls.is_none());
        server.abort();
    }

    #[test]
    fn own_cpu_time_is_readable_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu_s().is_some_and(|s| s >= 0.0));
        }
    }
}
