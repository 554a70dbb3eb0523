//! The access log: a line per connection event and per operation, in 389-ds's access-log
//! format (so `logconv` reads it) or as JSON, written off the hot path.
//!
//! Each worker formats its lines straight into a buffer of its own ([`LogBuffer`]: one
//! uncontended lock per line, no allocation per line once the buffer has grown), which the
//! log thread (server's accesslog.rs) swaps for an empty one every 20 ms: no queue is
//! shared by the cores, no line is a separate allocation, no sender ever wakes the writer.
//! A full buffer drops the line and counts it (`ferrodir_access_log_dropped_lines_total`):
//! a slow disk never stalls a request. Timestamps reuse the formatted second; durations
//! are written with integer arithmetic (BENCHMARKS.md, "The access log's cost").
//!
//! What is logged never includes a password: binds log the DN and the method, Password
//! Modify only its OID, and an assertion value on userPassword (or authPassword) in a
//! filter prints as `***`.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::{AuthenticationChoice, ProtocolOp};

use crate::stats::{bump, WorkerStats};

/// How lines are written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// 389-ds's access-log lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// A field's value.
pub enum Value {
    /// Quoted (and escaped) in text: `dn="..."`.
    Str(String),
    /// As it is: `err=0`, `scope=2`, `attrs=ALL`.
    Raw(String),
    /// Free text without a key (389-ds's `connection from A to B`).
    Bare(String),
}

/// One line of a connection event: `conn=N [op=M] WORD k=v ...`. Operations' lines are
/// written without this (see [`LogSink::request`], [`LogSink::result`]).
pub struct Line<'a> {
    pub conn: u64,
    /// 389-ds writes op=-1 for connection-level events after the connection's start.
    pub op: Option<i64>,
    pub word: &'a str,
    pub fields: Vec<(&'a str, Value)>,
}

/// One worker's lines waiting for the log thread.
#[derive(Debug, Default)]
pub struct LogBuffer {
    pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    text: String,
    lines: usize,
}

impl LogBuffer {
    /// Moves the waiting lines into `out` (which must be empty; its capacity is kept for
    /// the next lines) and returns how many there were.
    pub fn take(&self, out: &mut String) -> usize {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::swap(&mut pending.text, out);
        std::mem::take(&mut pending.lines)
    }

    /// Appends `text` (whole records: the audit log's, `crate::auditlog`) as one more
    /// item, unless the buffer already holds `bytes_max` bytes or would hold more with it;
    /// false when it was left out. A record larger than the whole bound still goes into an
    /// empty buffer: one request's size is bounded by the PDU limit, and dropping every
    /// such change would leave the log silent about exactly those.
    pub fn append_within(&self, text: &str, bytes_max: usize) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let held = pending.text.len();
        if held > 0 && held.saturating_add(text.len()) > bytes_max {
            return false;
        }
        pending.text.push_str(text);
        pending.lines += 1;
        true
    }
}

/// One worker's way into the access log.
pub struct LogSink {
    buffer: Arc<LogBuffer>,
    lines_max: usize,
    format: LogFormat,
    stats: Arc<WorkerStats>,
}

impl LogSink {
    /// A sink writing into `buffer`, which holds at most `lines_max` lines between two
    /// collections by the log thread.
    pub fn new(buffer: Arc<LogBuffer>, lines_max: usize, format: LogFormat, stats: Arc<WorkerStats>) -> Self {
        Self { buffer, lines_max: lines_max.max(1), format, stats }
    }

    /// A connection event's line.
    pub fn emit(&self, line: Line<'_>) {
        self.write(line.conn, line.op, line.word, |w| {
            for (key, value) in &line.fields {
                match value {
                    Value::Str(s) => w.quoted(key, s.as_bytes()),
                    Value::Raw(s) => w.raw(key, s),
                    Value::Bare(s) => w.bare(s),
                }
            }
        });
    }

    /// The line that logs a request as it arrives.
    pub fn request(&self, conn: u64, op: i64, request: &ProtocolOp) {
        self.write(conn, Some(op), request_word(request), |w| request_fields(w, request));
    }

    /// The RESULT line of an operation.
    pub fn result(&self, conn: u64, op: i64, outcome: &Outcome) {
        self.write(conn, Some(op), "RESULT", |w| result_fields(w, outcome));
    }

    fn write(&self, conn: u64, op: Option<i64>, word: &str, fields: impl FnOnce(&mut LineWriter<'_>)) {
        let at = SystemTime::now();
        let mut pending = self.buffer.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.lines >= self.lines_max {
            drop(pending);
            bump(&self.stats.access_log_dropped, 1);
            return;
        }
        pending.lines += 1;
        let mut writer = LineWriter::start(&mut pending.text, self.format, at, conn, op, word);
        fields(&mut writer);
        writer.finish();
    }
}

/// Writes one line into a buffer, field by field, in either format.
pub struct LineWriter<'a> {
    out: &'a mut String,
    format: LogFormat,
}

impl<'a> LineWriter<'a> {
    fn start(
        out: &'a mut String,
        format: LogFormat,
        at: SystemTime,
        conn: u64,
        op: Option<i64>,
        word: &str,
    ) -> Self {
        match format {
            LogFormat::Text => {
                push_timestamp(out, at);
                out.push_str(" conn=");
                push_decimal(out, conn);
                if let Some(op) = op {
                    out.push_str(" op=");
                    push_signed(out, op);
                }
                if !word.is_empty() {
                    out.push(' ');
                    out.push_str(word);
                }
            }
            LogFormat::Json => {
                out.push_str("{\"time\":\"");
                push_timestamp(out, at);
                out.push_str("\",\"conn\":");
                push_decimal(out, conn);
                if let Some(op) = op {
                    out.push_str(",\"op\":");
                    push_signed(out, op);
                }
                out.push_str(",\"event\":");
                json_string(out, word);
            }
        }
        Self { out, format }
    }

    fn key(&mut self, key: &str) {
        match self.format {
            LogFormat::Text => {
                self.out.push(' ');
                self.out.push_str(key);
                self.out.push('=');
            }
            LogFormat::Json => {
                self.out.push(',');
                json_string(self.out, if key.is_empty() { "text" } else { key });
                self.out.push(':');
            }
        }
    }

    /// `key="value"` (text), a JSON string; invalid UTF-8 shows as U+FFFD.
    pub fn quoted(&mut self, key: &str, value: &[u8]) {
        self.key(key);
        let value = String::from_utf8_lossy(value);
        match self.format {
            LogFormat::Text => {
                self.out.push('"');
                escape_text(self.out, &value);
                self.out.push('"');
            }
            LogFormat::Json => json_string(self.out, &value),
        }
    }

    /// `key=value` (text); in JSON a number when it looks like one, else a string.
    pub fn raw(&mut self, key: &str, value: &str) {
        self.key(key);
        match self.format {
            LogFormat::Text => escape_text(self.out, value),
            LogFormat::Json if looks_numeric(value) => self.out.push_str(value),
            LogFormat::Json => json_string(self.out, value),
        }
    }

    pub fn number(&mut self, key: &str, value: u64) {
        self.key(key);
        push_decimal(self.out, value);
    }

    /// Seconds with microseconds (truncated): `0.000023`. 389-ds writes nanoseconds
    /// (`0.000023456`); the three digits more say nothing an operator acts on, and cost 9
    /// bytes on every RESULT line (docs/OPERATIONS.md, "The access log"). logconv reads
    /// either.
    pub fn seconds(&mut self, key: &str, value: Duration) {
        self.key(key);
        push_decimal(self.out, value.as_secs());
        self.out.push('.');
        push_micros(self.out, value.subsec_micros());
    }

    /// Text without a key (389-ds's `connection from A to B`); `text` in JSON.
    pub fn bare(&mut self, value: &str) {
        match self.format {
            LogFormat::Text => {
                self.out.push(' ');
                escape_text(self.out, value);
            }
            LogFormat::Json => {
                self.out.push_str(",\"text\":");
                json_string(self.out, value);
            }
        }
    }

    /// The filter as logged (RFC 4515, secrets masked), escaped as it is written.
    fn filter(&mut self, key: &str, filter: &Filter) {
        self.key(key);
        if let Some((name, operator, value)) = plain_leaf(filter) {
            // Nothing in it to escape, in either format (see plain_leaf).
            self.out.push_str("\"(");
            self.out.push_str(name);
            self.out.push_str(operator);
            self.out.push_str(value);
            self.out.push_str(")\"");
            return;
        }
        let masked = filter.display_masked(&is_secret_attribute);
        match self.format {
            LogFormat::Text => {
                self.out.push('"');
                let _ = write!(Escaping { out: self.out, json: false }, "{masked}");
                self.out.push('"');
            }
            LogFormat::Json => {
                self.out.push('"');
                let _ = write!(Escaping { out: self.out, json: true }, "{masked}");
                self.out.push('"');
            }
        }
    }

    fn finish(self) {
        match self.format {
            LogFormat::Text => self.out.push('\n'),
            LogFormat::Json => self.out.push_str("}\n"),
        }
    }
}

/// A presence or equality filter whose attribute and value print as they are, in RFC 4515,
/// in the text format and in JSON: (name, operator, value). Most searches' filters are such
/// (`(objectClass=*)`, `(uid=alice)`), and writing them directly skips the formatting
/// machinery the general printer goes through (callgrind: a third of a base lookup's
/// log cost). None for anything else, and for an assertion on a secret attribute (the
/// printer masks it).
fn plain_leaf(filter: &Filter) -> Option<(&str, &'static str, &str)> {
    match filter {
        Filter::Present(attribute) => Some((plain_name(attribute)?, "=*", "")),
        Filter::EqualityMatch(ava) if !is_secret_attribute(&ava.attribute_desc) => {
            Some((plain_name(&ava.attribute_desc)?, "=", plain_value(&ava.assertion_value)?))
        }
        _ => None,
    }
}

/// An attribute description the printer writes as it is.
fn plain_name(bytes: &[u8]) -> Option<&str> {
    let plain = !bytes.is_empty()
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b';'));
    if plain {
        std::str::from_utf8(bytes).ok()
    } else {
        None
    }
}

/// Printable ASCII that neither RFC 4515 nor the log's own quoting escapes.
fn plain_value(bytes: &[u8]) -> Option<&str> {
    let plain =
        bytes.iter().all(|&b| (0x20..0x7f).contains(&b) && !matches!(b, b'*' | b'(' | b')' | b'\\' | b'"'));
    if plain {
        std::str::from_utf8(bytes).ok()
    } else {
        None
    }
}

/// A `fmt::Write` that escapes what passes through it, as [`escape_text`] or
/// [`json_string`] would (without the quotes).
struct Escaping<'a> {
    out: &'a mut String,
    json: bool,
}

impl std::fmt::Write for Escaping<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.json {
            json_escape(self.out, s);
        } else {
            escape_text(self.out, s);
        }
        Ok(())
    }
}

fn looks_numeric(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
}

/// `value` in decimal, without `core::fmt`: every line has several numbers, and the
/// formatting machinery costs more than the rest of the line (callgrind).
fn push_decimal(out: &mut String, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        if let Some(d) = digits.get_mut(at) {
            *d = b'0' + (value % 10) as u8;
        }
        value /= 10;
        if value == 0 || at == 0 {
            break;
        }
    }
    push_digits(out, digits.get(at..).unwrap_or_default());
}

/// ASCII digits. As chars: callgrind counted a third more instructions through
/// `str::from_utf8` and `push_str` for these few bytes.
fn push_digits(out: &mut String, digits: &[u8]) {
    out.extend(digits.iter().map(|&d| char::from(d)));
}

fn push_signed(out: &mut String, value: i64) {
    if value < 0 {
        out.push('-');
    }
    push_decimal(out, value.unsigned_abs());
}

/// Nine digits, zero-padded.
fn push_nanos(out: &mut String, nanos: u32) {
    push_padded::<9>(out, nanos);
}

/// Six digits, zero-padded.
fn push_micros(out: &mut String, micros: u32) {
    push_padded::<6>(out, micros);
}

/// `value`'s last N decimal digits, zero-padded.
fn push_padded<const N: usize>(out: &mut String, value: u32) {
    let mut digits = [b'0'; N];
    let mut rest = value;
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    push_digits(out, &digits);
}

thread_local! {
    /// The last second formatted on this thread: `[01/Dec/2026:10:00:00.`.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// `[01/Dec/2026:10:00:00.123456789 +0000]`: 389-ds's timestamp, in UTC. The part up to
/// the second is formatted once per second per thread.
fn push_timestamp(out: &mut String, at: SystemTime) {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs();
    SECOND.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != secs {
            cached.1 = second_prefix(secs);
            cached.0 = secs;
        }
        out.push_str(&cached.1);
    });
    push_nanos(out, since.subsec_nanos());
    out.push_str(" +0000]");
}

fn second_prefix(secs: u64) -> String {
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month_name = MONTHS.get(month.saturating_sub(1) as usize).copied().unwrap_or("Jan");
    format!(
        "[{day:02}/{month_name}/{year:04}:{:02}:{:02}:{:02}.",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The whole timestamp as a string (tests, and whoever needs one).
pub fn timestamp(at: SystemTime) -> String {
    let mut out = String::new();
    push_timestamp(&mut out, at);
    out
}

/// Days since 1970-01-01 to (year, month 1-12, day 1-31), proleptic Gregorian (Howard
/// Hinnant's civil_from_days).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Quotes and backslashes escaped, control characters as `\xx`: a value can't end its
/// field early or start a forged line.
fn escape_text(out: &mut String, value: &str) {
    // Most values (DNs, filters) are printable ASCII with nothing to escape: one pass over
    // the bytes instead of a char decode each (perf: half the log's cost on a worker).
    if value.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\') {
        out.push_str(value);
        return;
    }
    let mut run_start = 0;
    for (at, c) in value.char_indices() {
        if c == '"' || c == '\\' || c.is_control() {
            out.push_str(value.get(run_start..at).unwrap_or_default());
            if c.is_control() {
                let _ = write!(out, "\\{:02x}", u32::from(c));
            } else {
                out.push('\\');
                out.push(c);
            }
            run_start = at + c.len_utf8();
        }
    }
    out.push_str(value.get(run_start..).unwrap_or_default());
}

fn json_string(out: &mut String, value: &str) {
    out.push('"');
    json_escape(out, value);
    out.push('"');
}

fn json_escape(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// Whether values of attribute description `name` are secrets no log may show.
pub fn is_secret_attribute(name: &[u8]) -> bool {
    let base = name.split(|&b| b == b';').next().unwrap_or_default();
    [&b"userpassword"[..], b"2.5.4.35", b"authpassword", b"1.3.6.1.4.1.4203.1.3.4"]
        .iter()
        .any(|secret| base.eq_ignore_ascii_case(secret))
}

/// The filter as logged: its RFC 4515 string with secret values masked.
pub fn masked_filter(filter: &Filter) -> String {
    filter.display_masked(&is_secret_attribute).to_string()
}

/// 389-ds's word for a request: BIND, SRCH, ADD, MOD, DEL, MODRDN, CMP, EXT, ABANDON, UNBIND.
fn request_word(request: &ProtocolOp) -> &'static str {
    match request {
        ProtocolOp::BindRequest(_) => "BIND",
        ProtocolOp::SearchRequest(_) => "SRCH",
        ProtocolOp::AddRequest(_) => "ADD",
        ProtocolOp::DelRequest(_) => "DEL",
        ProtocolOp::ModifyRequest(_) => "MOD",
        ProtocolOp::ModifyDnRequest(_) => "MODRDN",
        ProtocolOp::CompareRequest(_) => "CMP",
        ProtocolOp::ExtendedRequest(_) => "EXT",
        ProtocolOp::AbandonRequest(_) => "ABANDON",
        ProtocolOp::UnbindRequest => "UNBIND",
        _ => "UNKNOWN",
    }
}

/// A request's fields. Never a credential: a Bind logs its DN and method.
fn request_fields(w: &mut LineWriter<'_>, request: &ProtocolOp) {
    match request {
        ProtocolOp::BindRequest(bind) => {
            w.quoted("dn", &bind.name);
            match &bind.authentication {
                AuthenticationChoice::Simple(_) => w.raw("method", "128"),
                AuthenticationChoice::Sasl(_) => w.raw("method", "sasl"),
            }
            w.number("version", u64::from(bind.version));
            if let AuthenticationChoice::Sasl(sasl) = &bind.authentication {
                w.raw("mech", &String::from_utf8_lossy(&sasl.mechanism));
            }
        }
        ProtocolOp::SearchRequest(search) => {
            w.quoted("base", &search.base_object);
            w.number("scope", search.scope as u64);
            w.filter("filter", &search.filter);
            if search.attributes.is_empty() {
                w.raw("attrs", "ALL");
            } else {
                let mut joined = Vec::with_capacity(64);
                for (i, attr) in search.attributes.iter().enumerate() {
                    if i > 0 {
                        joined.push(b' ');
                    }
                    joined.extend_from_slice(attr);
                }
                w.quoted("attrs", &joined);
            }
        }
        ProtocolOp::AddRequest(add) => w.quoted("dn", &add.entry),
        ProtocolOp::DelRequest(target) => w.quoted("dn", target),
        ProtocolOp::ModifyRequest(modify) => w.quoted("dn", &modify.object),
        ProtocolOp::ModifyDnRequest(moddn) => {
            w.quoted("dn", &moddn.entry);
            w.quoted("newrdn", &moddn.newrdn);
            w.number("deleteoldrdn", u64::from(moddn.deleteoldrdn));
            if let Some(superior) = &moddn.new_superior {
                w.quoted("newsuperior", superior);
            }
        }
        ProtocolOp::CompareRequest(compare) => {
            w.quoted("dn", &compare.entry);
            w.quoted("attr", &compare.ava.attribute_desc);
        }
        ProtocolOp::ExtendedRequest(extended) => w.quoted("oid", &extended.request_name),
        ProtocolOp::AbandonRequest(target) => w.number("msgid", u64::from(*target)),
        _ => {}
    }
}

/// What the RESULT line of an operation says.
pub struct Outcome {
    pub code: u32,
    /// The response's protocolOp tag number (97 BindResponse, 101 SearchResultDone...).
    pub tag: u8,
    pub entries: u64,
    pub queue_wait: Duration,
    pub execution: Duration,
    /// 389-ds's notes: "A" for a search no index narrowed, "P" for a paged search.
    pub notes: Option<&'static str>,
    /// A Bind's DN, as 389-ds logs it on the result.
    pub dn: Option<String>,
    /// Under proxied authorization, the identity the operation ran as (389-ds's
    /// `authzid=`); the connection's BIND line names the one that asked.
    pub authzid: Option<String>,
}

fn result_fields(w: &mut LineWriter<'_>, outcome: &Outcome) {
    w.number("err", u64::from(outcome.code));
    w.number("tag", u64::from(outcome.tag));
    w.number("nentries", outcome.entries);
    w.seconds("wtime", outcome.queue_wait);
    w.seconds("optime", outcome.execution);
    w.seconds("etime", outcome.queue_wait + outcome.execution);
    if let Some(notes) = outcome.notes {
        w.raw("notes", notes);
    }
    if let Some(dn) = &outcome.dn {
        w.quoted("dn", dn.as_bytes());
    }
    if let Some(authzid) = &outcome.authzid {
        w.quoted("authzid", authzid.as_bytes());
    }
}

/// One formatted line, for the tests and tools: `fields` as [`LogSink`] would write them.
pub fn format_line(format: LogFormat, at: SystemTime, line: &Line<'_>) -> String {
    let mut out = String::new();
    let mut w = LineWriter::start(&mut out, format, at, line.conn, line.op, line.word);
    for (key, value) in &line.fields {
        match value {
            Value::Str(s) => w.quoted(key, s.as_bytes()),
            Value::Raw(s) => w.raw(key, s),
            Value::Bare(s) => w.bare(s),
        }
    }
    w.finish();
    out
}

/// A request's line as [`LogSink::request`] writes it.
pub fn format_request(format: LogFormat, at: SystemTime, conn: u64, op: i64, request: &ProtocolOp) -> String {
    let mut out = String::new();
    let mut w = LineWriter::start(&mut out, format, at, conn, Some(op), request_word(request));
    request_fields(&mut w, request);
    w.finish();
    out
}

/// A RESULT line as [`LogSink::result`] writes it.
pub fn format_result(format: LogFormat, at: SystemTime, conn: u64, op: i64, outcome: &Outcome) -> String {
    let mut out = String::new();
    let mut w = LineWriter::start(&mut out, format, at, conn, Some(op), "RESULT");
    result_fields(&mut w, outcome);
    w.finish();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_written_as_format_would() {
        for value in [0u64, 7, 10, 99, 100, 12_345, u64::from(u32::MAX), u64::MAX] {
            let mut out = String::new();
            push_decimal(&mut out, value);
            assert_eq!(out, value.to_string());
        }
        for value in [0i64, -1, 42, i64::MIN, i64::MAX] {
            let mut out = String::new();
            push_signed(&mut out, value);
            assert_eq!(out, value.to_string());
        }
    }

    #[test]
    fn timestamps_are_389ds_style() {
        let at = UNIX_EPOCH + Duration::new(1_796_119_081, 5);
        assert_eq!(timestamp(at), "[01/Dec/2026:09:58:01.000000005 +0000]");
        assert_eq!(timestamp(UNIX_EPOCH), "[01/Jan/1970:00:00:00.000000000 +0000]");
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn lines_escape_what_could_forge_a_field() {
        let line = Line {
            conn: 3,
            op: Some(1),
            word: "SRCH",
            fields: vec![("base", Value::Str("o=\"x\"\n[forged]".into())), ("scope", Value::Raw("2".into()))],
        };
        let text = format_line(LogFormat::Text, UNIX_EPOCH, &line);
        assert!(text.ends_with(" conn=3 op=1 SRCH base=\"o=\\\"x\\\"\\0a[forged]\" scope=2\n"), "{text}");
        let json = format_line(LogFormat::Json, UNIX_EPOCH, &line);
        assert!(json.contains("\"base\":\"o=\\\"x\\\"\\u000a[forged]\",\"scope\":2}"), "{json}");
    }

    #[test]
    fn plain_values_pass_and_every_control_is_escaped() {
        let mut out = String::new();
        escape_text(&mut out, "uid=user00001,ou=people,dc=example,dc=com");
        assert_eq!(out, "uid=user00001,ou=people,dc=example,dc=com");
        out.clear();
        // DEL and a C1 control (NEL) as well as the ASCII ones; other non-ASCII stays.
        escape_text(&mut out, "a\u{7f}b\u{85}c\td é");
        assert_eq!(out, "a\\7fb\\85c\\09d é");
    }

    /// The direct path for plain filters writes what the general printer writes.
    #[test]
    fn plain_filters_are_written_as_the_printer_writes_them() {
        for text in [
            "(objectClass=*)",
            "(uid=user00042)",
            "(cn=John Smith, Jr.)",
            "(mail=a@example.com)",
            "(cn=)",
            "(userPassword=secret)",
            "(cn=a\\2ab)",
            "(cn=caf\\c3\\a9)",
            "(cn;lang-fr=x)",
            "(&(uid=a)(cn=b))",
        ] {
            let filter = ferrodir_proto::filter::parse_filter(text).unwrap();
            for format in [LogFormat::Text, LogFormat::Json] {
                let mut direct = String::new();
                LineWriter { out: &mut direct, format }.filter("filter", &filter);
                let mut printed = String::new();
                let mut w = LineWriter { out: &mut printed, format };
                w.key("filter");
                let masked = masked_filter(&filter);
                w.out.push('"');
                let _ = write!(Escaping { out: w.out, json: format == LogFormat::Json }, "{masked}");
                w.out.push('"');
                assert_eq!(direct, printed, "{text} ({format:?})");
            }
            assert_eq!(
                plain_leaf(&filter).is_some(),
                !text.contains(['&', '\\']) && !text.contains("Password")
            );
        }
    }

    #[test]
    fn password_assertions_are_masked() {
        let filter = ferrodir_proto::filter::parse_filter(
            "(&(uid=alice)(userPassword=secret)(|(userpassword;x=a*b)(:caseExactMatch:=secret2)))",
        )
        .unwrap();
        let logged = masked_filter(&filter);
        assert!(!logged.contains("secret") && !logged.contains("a*b"), "{logged}");
        assert!(logged.contains("(uid=alice)") && logged.contains("(userPassword=***)"), "{logged}");
    }

    fn search(filter: &str, attributes: &[&str]) -> ProtocolOp {
        use ferrodir_proto::message::{DerefAliases, OctetString, SearchRequest, SearchScope};
        ProtocolOp::SearchRequest(SearchRequest {
            base_object: OctetString::from_static(b"ou=\"q\",dc=example,dc=com"),
            scope: SearchScope::WholeSubtree,
            deref_aliases: DerefAliases::NeverDerefAliases,
            size_limit: 0,
            time_limit: 0,
            types_only: false,
            filter: ferrodir_proto::filter::parse_filter(filter).unwrap(),
            attributes: attributes.iter().map(|a| OctetString::from(a.as_bytes().to_vec())).collect(),
        })
    }

    #[test]
    fn requests_and_results_in_both_formats() {
        let at = UNIX_EPOCH + Duration::new(1_796_119_081, 123_456_789);
        let request = search("(&(uid=a\\22b)(userPassword=x))", &["cn", "mail"]);
        assert_eq!(
            format_request(LogFormat::Text, at, 4, 2, &request),
            "[01/Dec/2026:09:58:01.123456789 +0000] conn=4 op=2 SRCH base=\"ou=\\\"q\\\",dc=example,dc=com\" \
             scope=2 filter=\"(&(uid=a\\\"b)(userPassword=***))\" attrs=\"cn mail\"\n"
        );
        assert_eq!(
            format_request(LogFormat::Json, at, 4, 2, &search("(cn=*)", &[])),
            "{\"time\":\"[01/Dec/2026:09:58:01.123456789 +0000]\",\"conn\":4,\"op\":2,\"event\":\"SRCH\",\
             \"base\":\"ou=\\\"q\\\",dc=example,dc=com\",\"scope\":2,\"filter\":\"(cn=*)\",\"attrs\":\"ALL\"}\n"
        );
        let outcome = Outcome {
            code: 0,
            tag: 101,
            entries: 7,
            queue_wait: Duration::from_nanos(1_500),
            execution: Duration::new(2, 5),
            notes: Some("A"),
            dn: None,
            authzid: None,
        };
        assert_eq!(
            format_result(LogFormat::Text, at, 4, 2, &outcome),
            "[01/Dec/2026:09:58:01.123456789 +0000] conn=4 op=2 RESULT err=0 tag=101 nentries=7 \
             wtime=0.000001 optime=2.000000 etime=2.000001 notes=A\n"
        );
        assert!(format_result(LogFormat::Json, at, 4, 2, &outcome).ends_with(
            ",\"event\":\"RESULT\",\"err\":0,\"tag\":101,\"nentries\":7,\"wtime\":0.000001,\
                        \"optime\":2.000000,\"etime\":2.000001,\"notes\":\"A\"}\n"
        ));
    }

    #[test]
    fn a_full_buffer_drops_and_counts() {
        let buffer = Arc::new(LogBuffer::default());
        let stats = Arc::new(WorkerStats::default());
        let sink = LogSink::new(buffer.clone(), 2, LogFormat::Text, stats.clone());
        for op in 0..5 {
            sink.request(1, op, &ProtocolOp::UnbindRequest);
        }
        let mut out = String::new();
        assert_eq!(buffer.take(&mut out), 2);
        assert_eq!(out.lines().count(), 2);
        assert_eq!(stats.access_log_dropped.load(std::sync::atomic::Ordering::Relaxed), 3);
        // Taken: room again.
        sink.request(1, 9, &ProtocolOp::UnbindRequest);
        let mut next = String::new();
        assert_eq!(buffer.take(&mut next), 1);
        assert!(next.ends_with(" conn=1 op=9 UNBIND\n"), "{next}");
    }
}
