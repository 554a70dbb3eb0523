//! `ldap-search-load`: one search, repeated in a closed loop, with the controls of issue
//! #11 that ldclt cannot send: simple paged results (RFC 2696) and server-side sorting
//! (RFC 2891), both sent critical.
//!
//! An *operation* is one whole search: with `page_size` > 0 every page up to the one whose
//! response control carries an empty cookie (a full pass), otherwise one request. Each of
//! `connections` TCP connections (bound first, when asked) is a tokio task with exactly one
//! request in flight. An operation counts when every SearchResultDone was success, the
//! paged and sort response controls were there and said success, and the pass returned
//! `expect_entries` entries (when given); anything else is an error, and a server that
//! refuses the control (unavailableCriticalExtension, 12) or another result code ends that
//! connection at once: there is nothing to measure, and the report says why
//! (`first_error`, `result_code`).
//!
//! [`check`] does one operation and decodes every entry: the count, a digest of the DNs in
//! the order received and one of the set (so the harness can compare two servers' answers),
//! and with a sort key whether the entries came in that key's order (values compared
//! case-insensitively with spaces folded, as caseIgnoreOrderingMatch; an entry's least
//! value of the key, its greatest in reverse order, as RFC 2891 §1.1 asks).
//!
//! The timed loop does not decode entries: it frames them and reads their tag, so the
//! client's cost per entry stays small next to the server's (the report gives the client's
//! CPU time to show it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::{
    decode_message, Control, DerefAliases, OctetString, PagedResults, ProtocolOp, SearchRequest, SearchScope,
    PAGED_RESULTS_OID,
};
use hdrhistogram::Histogram;

use crate::conn::Conn;
use crate::error::Error;
use crate::latency::{process_cpu_s, LATENCY_NS_MAX};
use crate::wire::{self, tag};

/// RFC 2891 §1.1: the sort request control.
pub const SORT_REQUEST_OID: &str = "1.2.840.113556.1.4.473";
/// RFC 2891 §1.2: the sort response control.
pub const SORT_RESPONSE_OID: &str = "1.2.840.113556.1.4.474";
/// RFC 4511 Appendix A.1: the server refused a critical control it does not support.
pub const UNAVAILABLE_CRITICAL_EXTENSION: u32 = 12;
pub const CONNECTIONS_MAX: usize = 1024;
/// A paged pass with more pages than this is a server that never ends the search.
const PAGES_PER_PASS_MAX: u64 = 1_000_000;

/// One RFC 2891 sort key: `[-]attribute[:orderingRule]`, as ldapsearch's `-E sss=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    pub attribute: String,
    pub ordering_rule: Option<String>,
    pub reverse: bool,
}

impl std::str::FromStr for SortKey {
    type Err = Error;

    fn from_str(text: &str) -> Result<SortKey, Error> {
        let (reverse, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (attribute, ordering_rule) = match rest.split_once(':') {
            Some((attribute, rule)) => (attribute, Some(rule.to_string())),
            None => (rest, None),
        };
        let name_ok =
            |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !name_ok(attribute) || !ordering_rule.as_deref().is_none_or(name_ok) {
            return Err(Error::Config(format!("sort key {text:?}: expected [-]attribute[:orderingRule]")));
        }
        Ok(SortKey { attribute: attribute.to_string(), ordering_rule, reverse })
    }
}

impl SortKey {
    /// RFC 2891 §1.1: `SortKeyList ::= SEQUENCE OF SEQUENCE { attributeType
    /// AttributeDescription, orderingRule [0] MatchingRuleId OPTIONAL, reverseOrder [1]
    /// BOOLEAN DEFAULT FALSE }`, with this one key.
    pub fn control_value(&self) -> Vec<u8> {
        let mut key = Vec::new();
        wire::push_tlv(&mut key, tag::OCTET_STRING, self.attribute.as_bytes());
        if let Some(rule) = &self.ordering_rule {
            wire::push_tlv(&mut key, 0x80, rule.as_bytes());
        }
        if self.reverse {
            wire::push_tlv(&mut key, 0x81, &[0xff]);
        }
        let mut one = Vec::new();
        wire::push_tlv(&mut one, 0x30, &key);
        let mut list = Vec::new();
        wire::push_tlv(&mut list, 0x30, &one);
        list
    }
}

/// RFC 2891 §1.2: the sortResult of a `SortResult ::= SEQUENCE { sortResult ENUMERATED,
/// attributeType [0] AttributeDescription OPTIONAL }`.
pub fn sort_result(value: &[u8]) -> Result<u32, Error> {
    wire::result_code(wire::tlv_content(value)?)
}

/// What to search for, how and how hard.
#[derive(Debug, Clone)]
pub struct Config {
    /// host:port, plain LDAP.
    pub address: String,
    pub bind: Option<(String, String)>,
    pub base: String,
    pub scope: SearchScope,
    pub filter: Filter,
    /// Empty: all user attributes.
    pub attributes: Vec<String>,
    /// 0: no paging.
    pub page_size: u32,
    pub sort: Option<SortKey>,
    pub expect_entries: Option<u64>,
    pub connections: usize,
    pub duration: Duration,
    pub count_max: u64,
    /// The longest wait for any one response message.
    pub op_timeout: Duration,
}

/// One connection, one request in flight; every read waits at most `op_timeout`.
struct Connection {
    conn: Conn,
    op_timeout: Duration,
}

/// The SearchResultDone of one request: its code, and the controls we look at.
#[derive(Debug, Default)]
struct Done {
    result_code: u32,
    diagnostic: String,
    /// The paged response control's cookie; None when the control was missing.
    cookie: Option<Vec<u8>>,
    /// The sort response control's sortResult; None when the control was missing.
    sort_result: Option<u32>,
}

/// One entry as check mode keeps it: its DN and its values of the sort key.
type Decoded = (String, Vec<String>);

/// One operation (a pass, or one search): what came back.
#[derive(Debug, Default)]
struct Outcome {
    entries: u64,
    pages: u64,
    /// The first non-success result code, or 0.
    result_code: u32,
    diagnostic: String,
    sort_result: Option<u32>,
    /// Check mode only: every entry decoded.
    decoded: Vec<Decoded>,
    page_nanos: Vec<u64>,
}

impl Connection {
    async fn open(config: &Config) -> Result<Connection, Error> {
        let mut conn = Conn::connect(&config.address, config.op_timeout).await?;
        if let Some((dn, password)) = &config.bind {
            let code = conn.simple_bind(dn.as_bytes(), password.as_bytes(), Some(config.op_timeout)).await?;
            if code != 0 {
                return Err(Error::Unexpected(format!("bind as {dn}: resultCode {code}")));
            }
        }
        Ok(Connection { conn, op_timeout: config.op_timeout })
    }

    /// One search request with `controls`, read to its SearchResultDone. Entries are
    /// counted, or decoded into `decoded` (DN, the values of `key`) when it is Some.
    async fn search(
        &mut self,
        request: &SearchRequest,
        controls: Vec<Control>,
        mut decoded: Option<(&mut Vec<Decoded>, Option<&str>)>,
    ) -> Result<(u64, Done), Error> {
        let message_id = self.conn.send(ProtocolOp::SearchRequest(request.clone()), Some(controls)).await?;
        let mut entries = 0;
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
                    entries += 1;
                    if let Some((out, key)) = decoded.as_mut() {
                        out.push(entry_of(pdu, *key)?);
                    }
                }
                tag::SEARCH_RESULT_REFERENCE | tag::INTERMEDIATE_RESPONSE => {}
                tag::SEARCH_RESULT_DONE => {
                    let done = done_of(pdu)?;
                    self.conn.consume(len);
                    return Ok((entries, done));
                }
                other => return Err(Error::Unexpected(format!("response tag {other:#04x}"))),
            }
            self.conn.consume(len);
        }
    }

    /// One operation: a single search, or with paging every page to the end.
    async fn operation(
        &mut self,
        config: &Config,
        request: &SearchRequest,
        decode: bool,
    ) -> Result<Outcome, Error> {
        let mut outcome = Outcome::default();
        let mut cookie = Vec::new();
        let key = config.sort.as_ref().map(|k| k.attribute.as_str());
        loop {
            let mut controls = Vec::new();
            if let Some(sort) = &config.sort {
                controls.push(control(SORT_REQUEST_OID, sort.control_value()));
            }
            if config.page_size > 0 {
                let value =
                    PagedResults { size: config.page_size, cookie: OctetString::from(cookie.clone()) }
                        .encode_value()
                        .map_err(|e| Error::Config(format!("paged control: {e}")))?;
                controls.push(control(PAGED_RESULTS_OID, value));
            }
            let started = Instant::now();
            let decoded = if decode { Some((&mut outcome.decoded, key)) } else { None };
            let (entries, done) = self.search(request, controls, decoded).await?;
            outcome.page_nanos.push(nanos_since(started));
            outcome.entries += entries;
            outcome.pages += 1;
            if done.result_code != 0 {
                outcome.result_code = done.result_code;
                outcome.diagnostic = done.diagnostic;
                return Ok(outcome);
            }
            if config.sort.is_some() {
                match done.sort_result {
                    None => return Err(Error::Unexpected("no sort response control".into())),
                    Some(0) => {}
                    Some(code) => {
                        outcome.sort_result = Some(code);
                        return Ok(outcome);
                    }
                }
                outcome.sort_result = done.sort_result;
            }
            if config.page_size == 0 {
                return Ok(outcome);
            }
            match done.cookie {
                None => return Err(Error::Unexpected("no paged results response control".into())),
                Some(next) if next.is_empty() => return Ok(outcome),
                Some(next) => cookie = next,
            }
            if outcome.pages >= PAGES_PER_PASS_MAX {
                return Err(Error::Unexpected(format!("more than {PAGES_PER_PASS_MAX} pages")));
            }
        }
    }
}

fn control(oid: &str, value: Vec<u8>) -> Control {
    Control {
        control_type: OctetString::from(oid.as_bytes().to_vec()),
        criticality: true,
        control_value: Some(OctetString::from(value)),
    }
}

fn nanos_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// The SearchResultDone's code, diagnostic and the response controls we know.
fn done_of(pdu: &[u8]) -> Result<Done, Error> {
    let message = decode_message(pdu).map_err(|e| Error::Unexpected(format!("SearchResultDone: {e}")))?;
    let ProtocolOp::SearchResultDone(result) = message.protocol_op else {
        return Err(Error::Unexpected("not a SearchResultDone".into()));
    };
    let mut done = Done {
        result_code: result.result_code.0,
        diagnostic: String::from_utf8_lossy(&result.diagnostic_message).into_owned(),
        ..Done::default()
    };
    for control in message.controls.unwrap_or_default() {
        let value = control.control_value.as_deref().unwrap_or_default();
        if *control.control_type == *PAGED_RESULTS_OID.as_bytes() {
            let paged = PagedResults::decode_value(value)
                .map_err(|e| Error::Unexpected(format!("paged response control: {e}")))?;
            done.cookie = Some(paged.cookie.to_vec());
        } else if *control.control_type == *SORT_RESPONSE_OID.as_bytes() {
            done.sort_result = Some(sort_result(value)?);
        }
    }
    Ok(done)
}

/// An entry's DN and the values of `key` (none asked: none returned).
fn entry_of(pdu: &[u8], key: Option<&str>) -> Result<Decoded, Error> {
    let message = decode_message(pdu).map_err(|e| Error::Unexpected(format!("SearchResultEntry: {e}")))?;
    let ProtocolOp::SearchResultEntry(entry) = message.protocol_op else {
        return Err(Error::Unexpected("not a SearchResultEntry".into()));
    };
    let dn = String::from_utf8_lossy(&entry.object_name).into_owned();
    let values = match key {
        None => Vec::new(),
        Some(key) => entry
            .attributes
            .iter()
            .filter(|a| a.r#type.eq_ignore_ascii_case(key.as_bytes()))
            .flat_map(|a| a.vals.iter().map(|v| String::from_utf8_lossy(v).into_owned()))
            .collect(),
    };
    Ok((dn, values))
}

fn request_of(config: &Config) -> SearchRequest {
    SearchRequest {
        base_object: OctetString::from(config.base.clone().into_bytes()),
        scope: config.scope,
        deref_aliases: DerefAliases::NeverDerefAliases,
        size_limit: 0,
        time_limit: 0,
        types_only: false,
        filter: config.filter.clone(),
        attributes: config.attributes.iter().map(|a| OctetString::from(a.clone().into_bytes())).collect(),
    }
}

/// caseIgnoreOrderingMatch's view of a value, near enough for our data: ASCII case folded,
/// leading and trailing spaces dropped, inner runs of spaces as one (RFC 4518 §2.6.1).
pub fn fold(value: &str) -> String {
    value.split(' ').filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ").to_ascii_lowercase()
}

/// Whether `keys` (each entry's values of the sort key) are in the key's order; None when
/// an entry lacks the key (the servers may place those differently; our data has none).
pub fn in_order(keys: &[Vec<String>], reverse: bool) -> Option<bool> {
    let sort_values: Option<Vec<String>> = keys
        .iter()
        .map(|values| {
            let folded = values.iter().map(|v| fold(v));
            if reverse {
                folded.max()
            } else {
                folded.min()
            }
        })
        .collect();
    let values = sort_values?;
    Some(values.windows(2).all(|w| if reverse { w[0] >= w[1] } else { w[0] <= w[1] }))
}

/// FNV-1a, 64 bits, of a DN with ASCII case folded.
fn dn_hash(dn: &str) -> u64 {
    dn.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b.to_ascii_lowercase())).wrapping_mul(0x100_0000_01b3)
    })
}

/// What one checked operation returned.
#[derive(Debug)]
pub struct CheckReport {
    pub entries: u64,
    pub pages: u64,
    pub result_code: u32,
    pub diagnostic: String,
    pub sort_result: Option<u32>,
    /// With a sort key: whether the entries came in its order.
    pub in_order: Option<bool>,
    /// Digest of the DNs in the order received, and of the set (order ignored).
    pub order_digest: u64,
    pub set_digest: u64,
    pub first_dns: Vec<String>,
    /// How long each page (or the one search) took, from the request to its
    /// SearchResultDone, in ms: whether later pages cost more than earlier ones.
    pub page_ms: Vec<f64>,
}

impl CheckReport {
    pub fn to_json(&self) -> String {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "null".into());
        format!(
            "{{\"entries\":{},\"pages\":{},\"result_code\":{},\"diagnostic\":{},\"sort_result\":{},\
             \"in_order\":{},\"order_digest\":\"{:016x}\",\"set_digest\":\"{:016x}\",\"first_dns\":[{}],\
             \"page_ms\":[{}]}}",
            self.entries,
            self.pages,
            self.result_code,
            json_string(&self.diagnostic),
            opt(self.sort_result.map(|c| c.to_string())),
            opt(self.in_order.map(|b| b.to_string())),
            self.order_digest,
            self.set_digest,
            self.first_dns.iter().map(|d| json_string(d)).collect::<Vec<_>>().join(","),
            self.page_ms.iter().map(|ms| format!("{ms:.2}")).collect::<Vec<_>>().join(",")
        )
    }
}

/// A JSON string literal (quotes, backslashes and control characters escaped).
pub fn json_string(text: &str) -> String {
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

/// One operation with every entry decoded: is the answer right?
pub async fn check(config: &Config) -> Result<CheckReport, Error> {
    validate(config)?;
    let mut connection = Connection::open(config).await?;
    let outcome = connection.operation(config, &request_of(config), true).await?;
    let keys: Vec<Vec<String>> = outcome.decoded.iter().map(|(_, values)| values.clone()).collect();
    let hashes: Vec<u64> = outcome.decoded.iter().map(|(dn, _)| dn_hash(dn)).collect();
    Ok(CheckReport {
        entries: outcome.entries,
        pages: outcome.pages,
        result_code: outcome.result_code,
        diagnostic: outcome.diagnostic,
        sort_result: outcome.sort_result,
        in_order: config.sort.as_ref().and_then(|k| in_order(&keys, k.reverse)),
        order_digest: hashes
            .iter()
            .fold(0xcbf2_9ce4_8422_2325, |d, &h| (d ^ h).wrapping_mul(0x100_0000_01b3)),
        set_digest: hashes.iter().fold(0u64, |d, &h| d.wrapping_add(h)),
        first_dns: outcome.decoded.iter().take(3).map(|(dn, _)| dn.clone()).collect(),
        page_ms: outcome.page_nanos.iter().map(|&nanos| nanos as f64 / 1e6).collect(),
    })
}

/// What the timed loop measured, over every connection.
#[derive(Debug)]
pub struct Report {
    pub ops: u64,
    pub entries: u64,
    pub pages: u64,
    pub errors: u64,
    pub seconds: f64,
    pub ops_histogram: Histogram<u32>,
    pub page_histogram: Histogram<u32>,
    pub first_error: Option<String>,
    /// The result code that stopped a connection, when one did (12: the control refused).
    pub result_code: Option<u32>,
    pub client_cpu_s: Option<f64>,
}

impl Report {
    pub fn to_json(&self) -> String {
        let per_s = |n: u64| if self.seconds > 0.0 { n as f64 / self.seconds } else { 0.0 };
        let us = |h: &Histogram<u32>, q: f64| {
            if h.is_empty() {
                0.0
            } else {
                h.value_at_quantile(q) as f64 / 1000.0
            }
        };
        let mut json = format!(
            "{{\"ops\":{},\"entries\":{},\"pages\":{},\"seconds\":{:.3},\"ops_per_s\":{:.2},\"entries_per_s\":{:.1},\
             \"p50_us\":{:.1},\"p99_us\":{:.1},\"mean_us\":{:.1},\"page_p50_us\":{:.1},\"page_p99_us\":{:.1},\"errors\":{}",
            self.ops,
            self.entries,
            self.pages,
            self.seconds,
            per_s(self.ops),
            per_s(self.entries),
            us(&self.ops_histogram, 0.5),
            us(&self.ops_histogram, 0.99),
            if self.ops_histogram.is_empty() { 0.0 } else { self.ops_histogram.mean() / 1000.0 },
            us(&self.page_histogram, 0.5),
            us(&self.page_histogram, 0.99),
            self.errors
        );
        if let Some(code) = self.result_code {
            json.push_str(&format!(",\"result_code\":{code}"));
        }
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

fn validate(config: &Config) -> Result<(), Error> {
    if config.connections == 0 || config.connections > CONNECTIONS_MAX {
        return Err(Error::Config(format!("--connections must be 1..={CONNECTIONS_MAX}")));
    }
    if config.page_size > 0 && config.page_size > i32::MAX as u32 {
        return Err(Error::Config("--page-size above maxInt".into()));
    }
    Ok(())
}

/// One connection's share of the run.
#[derive(Default)]
struct Tally {
    ops: u64,
    entries: u64,
    pages: u64,
    errors: u64,
    first_error: Option<String>,
    result_code: Option<u32>,
}

async fn drive(
    mut connection: Connection,
    config: Arc<Config>,
    deadline: Instant,
    claimed: Arc<std::sync::atomic::AtomicU64>,
) -> Result<(Tally, Histogram<u32>, Histogram<u32>), Error> {
    use std::sync::atomic::Ordering;
    let (mut ops_histogram, mut page_histogram) = (new_histogram()?, new_histogram()?);
    let mut tally = Tally::default();
    let request = request_of(&config);
    while Instant::now() < deadline && claimed.fetch_add(1, Ordering::Relaxed) < config.count_max {
        let started = Instant::now();
        match connection.operation(&config, &request, false).await {
            Ok(outcome) => {
                for &nanos in &outcome.page_nanos {
                    page_histogram.saturating_record(nanos);
                }
                tally.pages += outcome.pages;
                let wrong = if outcome.result_code != 0 {
                    tally.result_code = Some(outcome.result_code);
                    Some(format!("resultCode {} ({})", outcome.result_code, outcome.diagnostic))
                } else if let Some(code) = outcome.sort_result.filter(|&c| c != 0) {
                    Some(format!("sortResult {code}"))
                } else {
                    config
                        .expect_entries
                        .filter(|&want| want != outcome.entries)
                        .map(|want| format!("{} entries, expected {want}", outcome.entries))
                };
                match wrong {
                    None => {
                        ops_histogram.saturating_record(nanos_since(started));
                        tally.ops += 1;
                        tally.entries += outcome.entries;
                    }
                    Some(why) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(why);
                        // A refusal or a wrong answer repeats: stop measuring it.
                        break;
                    }
                }
            }
            Err(error) => {
                tally.errors += 1;
                tally.first_error.get_or_insert(error.to_string());
                break;
            }
        }
    }
    Ok((tally, ops_histogram, page_histogram))
}

/// Opens (and binds) every connection, then repeats the operation until the duration or
/// the count is reached; operations started before the deadline are finished.
pub async fn run(config: Config) -> Result<Report, Error> {
    validate(&config)?;
    let mut connections = Vec::with_capacity(config.connections);
    for _ in 0..config.connections {
        connections.push(Connection::open(&config).await?);
    }
    let config = Arc::new(config);
    let claimed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let cpu_before = process_cpu_s();
    let started = Instant::now();
    let deadline = started + config.duration;
    let tasks: Vec<_> = connections
        .into_iter()
        .map(|c| tokio::spawn(drive(c, Arc::clone(&config), deadline, Arc::clone(&claimed))))
        .collect();
    let mut report = Report {
        ops: 0,
        entries: 0,
        pages: 0,
        errors: 0,
        seconds: 0.0,
        ops_histogram: new_histogram()?,
        page_histogram: new_histogram()?,
        first_error: None,
        result_code: None,
        client_cpu_s: None,
    };
    for task in tasks {
        let (tally, ops, pages) =
            task.await.map_err(|e| Error::Unexpected(format!("connection task: {e}")))??;
        report.ops += tally.ops;
        report.entries += tally.entries;
        report.pages += tally.pages;
        report.errors += tally.errors;
        report.first_error = report.first_error.or(tally.first_error);
        report.result_code = report.result_code.or(tally.result_code);
        // Same bounds on both sides: adding cannot fail.
        let _ = report.ops_histogram.add(&ops);
        let _ = report.page_histogram.add(&pages);
    }
    report.seconds = started.elapsed().as_secs_f64();
    report.client_cpu_s = cpu_before.zip(process_cpu_s()).map(|(before, after)| after - before);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_keys_parse_and_encode_as_ldapsearch_sends_them() {
        let key: SortKey = "-cn:caseIgnoreOrderingMatch".parse().unwrap();
        assert_eq!(
            key,
            SortKey {
                attribute: "cn".into(),
                ordering_rule: Some("caseIgnoreOrderingMatch".into()),
                reverse: true
            }
        );
        // ldapsearch -E sss=sn: 30 06 30 04 04 02 's' 'n'.
        let plain: SortKey = "sn".parse().unwrap();
        assert_eq!(plain.control_value(), vec![0x30, 0x06, 0x30, 0x04, 0x04, 0x02, b's', b'n']);
        let mut value = key.control_value();
        assert_eq!(&value[..4], &[0x30, 0x22, 0x30, 0x20]);
        assert_eq!(&value[value.len() - 3..], &[0x81, 0x01, 0xff]);
        value.truncate(6);
        assert_eq!(&value[4..], &[0x04, 0x02]);
        for bad in ["", "-", "cn:", "c n", "cn:rule:x"] {
            assert!(bad.parse::<SortKey>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sort_result_reads_the_enumerated() {
        // slapd's answer: SEQUENCE { ENUMERATED 0 }, "MAMKAQA=" in ldapsearch's output.
        assert_eq!(sort_result(&[0x30, 0x03, 0x0a, 0x01, 0x00]).unwrap(), 0);
        assert_eq!(sort_result(&[0x30, 0x07, 0x0a, 0x01, 0x12, 0x80, 0x02, b'c', b'n']).unwrap(), 18);
        assert!(sort_result(&[0x30, 0x03, 0x02, 0x01, 0x00]).is_err());
        assert!(sort_result(&[0x30]).is_err());
    }

    #[test]
    fn order_check_folds_case_and_spaces_and_sees_disorder() {
        let keys = |vals: &[&str]| vals.iter().map(|v| vec![v.to_string()]).collect::<Vec<_>>();
        assert_eq!(in_order(&keys(&["user 1", "User 1001", "user  2"]), false), Some(true));
        assert_eq!(in_order(&keys(&["user 2", "user 1001"]), false), Some(false));
        assert_eq!(in_order(&keys(&["user 2", "user 1001"]), true), Some(true));
        // Several values: the least forwards, the greatest in reverse.
        let multi = vec![vec!["b".to_string(), "a".to_string()], vec!["a0".to_string()]];
        assert_eq!(in_order(&multi, false), Some(true));
        assert_eq!(in_order(&multi, true), Some(true));
        assert_eq!(in_order(&[vec![], vec!["a".to_string()]], false), None);
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
