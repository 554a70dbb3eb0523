//! The access log: a line per connection event and per operation, in 389-ds's access-log
//! format (so `logconv` reads it) or as JSON, written off the hot path.
//!
//! Each worker formats its own lines and hands them to the log thread (server's
//! accesslog.rs) through a bounded channel of its own, so no queue is shared by the cores.
//! A full channel drops the line and counts it (`ferrodir_access_log_dropped_lines_total`):
//! a slow disk never stalls a request. What is logged never includes a password: binds
//! log the DN and the method, Password Modify only its OID, and an assertion value on
//! userPassword (or authPassword) in a filter prints as `***`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::{AuthenticationChoice, ProtocolOp};
use std::sync::mpsc::SyncSender;

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

/// One line: `conn=N [op=M] WORD k=v ...`.
pub struct Line<'a> {
    pub conn: u64,
    /// 389-ds writes op=-1 for connection-level events after the connection's start.
    pub op: Option<i64>,
    pub word: &'a str,
    pub fields: Vec<(&'a str, Value)>,
}

/// One worker's way into the access log.
pub struct LogSink {
    tx: SyncSender<String>,
    format: LogFormat,
    stats: Arc<WorkerStats>,
}

impl LogSink {
    pub fn new(tx: SyncSender<String>, format: LogFormat, stats: Arc<WorkerStats>) -> Self {
        Self { tx, format, stats }
    }

    /// Formats and queues `line`; a full queue drops it and counts the drop. The writer
    /// polls the queues rather than being woken: a wake per line cost a system call per
    /// line, more than all the rest of the log (BENCHMARKS.md, "The access log's cost").
    pub fn emit(&self, line: Line<'_>) {
        let text = match self.format {
            LogFormat::Text => text_line(&line, SystemTime::now()),
            LogFormat::Json => json_line(&line, SystemTime::now()),
        };
        if self.tx.try_send(text).is_err() {
            bump(&self.stats.access_log_dropped, 1);
        }
    }
}

/// `[01/Dec/2026:10:00:00.123456789 +0000]`: 389-ds's timestamp, in UTC.
pub fn timestamp(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month_name = MONTHS.get(month.saturating_sub(1) as usize).copied().unwrap_or("Jan");
    format!(
        "[{day:02}/{month_name}/{year:04}:{:02}:{:02}:{:02}.{:09} +0000]",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60,
        since.subsec_nanos()
    )
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

fn text_line(line: &Line<'_>, at: SystemTime) -> String {
    let mut out = timestamp(at);
    let _ = write!(out, " conn={}", line.conn);
    if let Some(op) = line.op {
        let _ = write!(out, " op={op}");
    }
    if !line.word.is_empty() {
        out.push(' ');
        out.push_str(line.word);
    }
    for (key, value) in &line.fields {
        out.push(' ');
        match value {
            Value::Str(s) => {
                let _ = write!(out, "{key}=\"");
                escape_text(&mut out, s);
                out.push('"');
            }
            Value::Raw(s) => {
                let _ = write!(out, "{key}=");
                escape_text(&mut out, s);
            }
            Value::Bare(s) => escape_text(&mut out, s),
        }
    }
    out.push('\n');
    out
}

/// Quotes and backslashes escaped, control characters as `\xx`: a value can't end its
/// field early or start a forged line.
fn escape_text(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\{:02x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

fn json_line(line: &Line<'_>, at: SystemTime) -> String {
    let mut out = String::from("{\"time\":");
    json_string(&mut out, &timestamp(at));
    let _ = write!(out, ",\"conn\":{}", line.conn);
    if let Some(op) = line.op {
        let _ = write!(out, ",\"op\":{op}");
    }
    out.push_str(",\"event\":");
    json_string(&mut out, line.word);
    for (key, value) in &line.fields {
        out.push(',');
        json_string(&mut out, if key.is_empty() { "text" } else { key });
        out.push(':');
        match value {
            Value::Raw(s)
                if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.' || b == b'-') =>
            {
                out.push_str(s)
            }
            Value::Str(s) | Value::Raw(s) | Value::Bare(s) => json_string(&mut out, s),
        }
    }
    out.push_str("}\n");
    out
}

fn json_string(out: &mut String, value: &str) {
    out.push('"');
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
    out.push('"');
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

fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The line that logs a request as it arrives (389-ds's words: BIND, SRCH, ADD, MOD, DEL,
/// MODRDN, CMP, EXT, ABANDON, UNBIND). Never a credential: a Bind logs its DN and method.
pub fn request_line(conn: u64, op: i64, request: &ProtocolOp) -> Line<'static> {
    let dn = |bytes: &[u8]| ("dn", Value::Str(text_of(bytes)));
    let (word, fields) = match request {
        ProtocolOp::BindRequest(bind) => {
            let mut fields = vec![dn(&bind.name)];
            match &bind.authentication {
                AuthenticationChoice::Simple(_) => fields.push(("method", Value::Raw("128".into()))),
                AuthenticationChoice::Sasl(_) => fields.push(("method", Value::Raw("sasl".into()))),
            }
            fields.push(("version", Value::Raw(bind.version.to_string())));
            if let AuthenticationChoice::Sasl(sasl) = &bind.authentication {
                fields.push(("mech", Value::Raw(text_of(&sasl.mechanism))));
            }
            ("BIND", fields)
        }
        ProtocolOp::SearchRequest(search) => {
            let attrs = if search.attributes.is_empty() {
                Value::Raw("ALL".into())
            } else {
                Value::Str(search.attributes.iter().map(|a| text_of(a)).collect::<Vec<_>>().join(" "))
            };
            (
                "SRCH",
                vec![
                    ("base", Value::Str(text_of(&search.base_object))),
                    ("scope", Value::Raw((search.scope as u8).to_string())),
                    ("filter", Value::Str(masked_filter(&search.filter))),
                    ("attrs", attrs),
                ],
            )
        }
        ProtocolOp::AddRequest(add) => ("ADD", vec![dn(&add.entry)]),
        ProtocolOp::DelRequest(target) => ("DEL", vec![dn(target)]),
        ProtocolOp::ModifyRequest(modify) => ("MOD", vec![dn(&modify.object)]),
        ProtocolOp::ModifyDnRequest(moddn) => {
            let mut fields = vec![
                dn(&moddn.entry),
                ("newrdn", Value::Str(text_of(&moddn.newrdn))),
                ("deleteoldrdn", Value::Raw(u8::from(moddn.deleteoldrdn).to_string())),
            ];
            if let Some(superior) = &moddn.new_superior {
                fields.push(("newsuperior", Value::Str(text_of(superior))));
            }
            ("MODRDN", fields)
        }
        ProtocolOp::CompareRequest(compare) => {
            ("CMP", vec![dn(&compare.entry), ("attr", Value::Str(text_of(&compare.ava.attribute_desc)))])
        }
        ProtocolOp::ExtendedRequest(extended) => {
            ("EXT", vec![("oid", Value::Str(text_of(&extended.request_name)))])
        }
        ProtocolOp::AbandonRequest(target) => ("ABANDON", vec![("msgid", Value::Raw(target.to_string()))]),
        ProtocolOp::UnbindRequest => ("UNBIND", Vec::new()),
        _ => ("UNKNOWN", Vec::new()),
    };
    Line { conn, op: Some(op), word, fields }
}

/// What the RESULT line of an operation says.
pub struct Outcome {
    pub code: u32,
    /// The response's protocolOp tag number (97 BindResponse, 101 SearchResultDone...).
    pub tag: u8,
    pub entries: u64,
    pub queue_wait: Duration,
    pub execution: Duration,
    /// 389-ds's notes: "A" for a search no index narrowed.
    pub notes: Option<&'static str>,
    /// A Bind's DN, as 389-ds logs it on the result.
    pub dn: Option<String>,
}

pub fn result_line(conn: u64, op: i64, outcome: Outcome) -> Line<'static> {
    let mut fields = vec![
        ("err", Value::Raw(outcome.code.to_string())),
        ("tag", Value::Raw(outcome.tag.to_string())),
        ("nentries", Value::Raw(outcome.entries.to_string())),
        ("wtime", Value::Raw(seconds(outcome.queue_wait))),
        ("optime", Value::Raw(seconds(outcome.execution))),
        ("etime", Value::Raw(seconds(outcome.queue_wait + outcome.execution))),
    ];
    if let Some(notes) = outcome.notes {
        fields.push(("notes", Value::Raw(notes.into())));
    }
    if let Some(dn) = outcome.dn {
        fields.push(("dn", Value::Str(dn)));
    }
    Line { conn, op: Some(op), word: "RESULT", fields }
}

/// Seconds with microseconds, as 389-ds writes wtime/optime/etime.
pub fn seconds(duration: Duration) -> String {
    format!("{:.9}", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let text = text_line(&line, UNIX_EPOCH);
        assert!(text.ends_with(" conn=3 op=1 SRCH base=\"o=\\\"x\\\"\\0a[forged]\" scope=2\n"), "{text}");
        let json = json_line(&line, UNIX_EPOCH);
        assert!(json.contains("\"base\":\"o=\\\"x\\\"\\u000a[forged]\",\"scope\":2}"), "{json}");
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
}
