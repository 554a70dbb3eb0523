//! The audit log (`[audit_log] path`): one record per committed change, in slapo-auditlog's
//! format, so that whoever reads slapd's audit file reads ours:
//!
//! ```text
//! # modify 1733312345 dc=example,dc=com cn=admin,dc=example,dc=com IP=127.0.0.1:40522 conn=7
//! dn: uid=alice,ou=people,dc=example,dc=com
//! changetype: modify
//! replace: mail
//! mail: alice@example.com
//! -
//! # end modify 1733312345
//!
//! ```
//!
//! The header holds slapd's six fields: the operation (add, modify, delete, modrdn), the
//! commit's Unix time, the entry's naming context, the bind DN (slapd's modifiersName; ours
//! always is the requester), the client's address (`IP=a:port`, `PATH=socket` for ldapi)
//! and the connection number. The change follows as an LDIF change record written by the
//! export's writer (`proto::ldif`: base64 where RFC 2849 requires it, folded lines).
//!
//! **Values as stored.** An operation formats its record ([`prepare`]) from the values it
//! sends to the shard, after the router hashed cleartext userPassword values
//! (`op::stored_password`), so a password appears only as its hash. A value of a secret
//! attribute (userPassword, authPassword) that is not in a known `{SCHEME}` form — stored
//! as given with `password_hash_on_write` off — is written `***`, as the access log masks
//! it: no log holds a password in clear.
//!
//! **Only what committed, without waiting.** The record is appended ([`AuditSink::commit`])
//! after the write was acknowledged durable, on the operation's own worker thread, into
//! the worker's bounded buffer (the access log's [`LogBuffer`]), which the server's log
//! thread swaps out and writes. Operations of one connection run on one worker thread and
//! append as their writes are acknowledged, so a connection's records are in commit order.
//! A full buffer drops the record, counts it (`ferrodir_audit_log_dropped_records_total`)
//! and warns at most every [`DROP_WARNING_INTERVAL`]: a slow disk never holds a write.
//!
//! Unlike slapd, the operational attributes the shard stamps (entryCSN, modifiersName,
//! modifyTimestamp, entryUUID...) are not listed: the header carries the time and the
//! identity, and the record is the change the client asked for, as stored.

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferrodir_proto::entry::Attribute;
use ferrodir_proto::ldif::{write_value_line, LdifMod, ModOp};

use crate::accesslog::{is_secret_attribute, LogBuffer};
use crate::stats::{bump, WorkerStats};

/// How often a worker warns that it dropped audit records, at most.
pub const DROP_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// A change as it goes to the shard.
pub enum Change<'a> {
    /// The new entry's attributes, as stored (the RDN's values and hashed passwords in).
    Add(&'a [Attribute]),
    Delete,
    /// The modifications, with the values sent to the shard.
    Modify(&'a [LdifMod]),
    ModDn {
        new_rdn: &'a str,
        delete_old_rdn: bool,
        new_superior: Option<&'a str>,
    },
}

impl Change<'_> {
    /// slapd's name for the operation, in the header and the changetype.
    fn word(&self) -> &'static str {
        match self {
            Change::Add(_) => "add",
            Change::Delete => "delete",
            Change::Modify(_) => "modify",
            Change::ModDn { .. } => "modrdn",
        }
    }
}

/// A change's record, formatted before the write is sent (the values are at hand then),
/// appended once the write committed.
#[derive(Debug)]
pub struct Pending {
    word: &'static str,
    suffix: String,
    /// `dn:` to the last line of the change, each line ending in a newline.
    body: String,
}

/// Who made a change, and over which connection.
pub struct Requester<'a> {
    /// The bind DN ("" for anonymous).
    pub author: &'a str,
    /// slapd's peer name: `IP=127.0.0.1:40522`, `IP=[::1]:40522`, `PATH=/run/ldapi`.
    pub peer: &'a str,
    /// The connection's number; -1 for the server's own changes (refint), as slapd writes
    /// an internal operation's.
    pub conn: i64,
    /// Under proxied authorization, the bound DN that asked (`author` is the one the change
    /// was made as): written after the connection, `authcDN=...`.
    pub proxied_by: Option<&'a str>,
}

/// The record of a change to the entry `dn` in the naming context `suffix` ("" when none
/// holds it: slapd writes `global`).
pub fn prepare(dn: &str, suffix: &str, change: Change<'_>) -> Pending {
    let mut body = Vec::with_capacity(256);
    // Writing into a Vec can't fail.
    let _ = write_body(&mut body, dn, &change);
    // Every byte written is ASCII (anything else went through base64), but for an attribute
    // description no check upstream has refused.
    let body = String::from_utf8(body).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    let suffix = if suffix.is_empty() { "global".to_string() } else { suffix.to_string() };
    Pending { word: change.word(), suffix, body }
}

fn write_body(out: &mut Vec<u8>, dn: &str, change: &Change<'_>) -> std::io::Result<()> {
    write_value_line(out, "dn", dn.as_bytes())?;
    write_value_line(out, "changetype", change.word().as_bytes())?;
    match change {
        Change::Add(attrs) => {
            for attr in attrs.iter() {
                write_values(out, attr)?;
            }
        }
        Change::Delete => {}
        Change::Modify(mods) => {
            for change in mods.iter() {
                let op = match change.op {
                    ModOp::Add => "add",
                    ModOp::Delete => "delete",
                    ModOp::Replace => "replace",
                    ModOp::Increment => "increment",
                };
                write_value_line(out, op, change.attr.name.as_bytes())?;
                write_values(out, &change.attr)?;
                out.extend_from_slice(b"-\n");
            }
        }
        Change::ModDn { new_rdn, delete_old_rdn, new_superior } => {
            write_value_line(out, "newrdn", new_rdn.as_bytes())?;
            write_value_line(out, "deleteoldrdn", if *delete_old_rdn { b"1" } else { b"0" })?;
            if let Some(superior) = new_superior {
                write_value_line(out, "newsuperior", superior.as_bytes())?;
            }
        }
    }
    Ok(())
}

/// One line per value; a secret attribute's value only when it is a hash.
fn write_values(out: &mut Vec<u8>, attr: &Attribute) -> std::io::Result<()> {
    let secret = is_secret_attribute(attr.name.as_bytes());
    for value in &attr.values {
        let shown: &[u8] = if secret && !crate::password::is_hashed(value) { b"***" } else { value };
        write_value_line(out, &attr.name, shown)?;
    }
    Ok(())
}

/// The whole record of `pending`, committed at `at` (Unix seconds) by `who`.
pub fn format_record(pending: &Pending, who: &Requester<'_>, at: u64) -> String {
    let mut out = String::with_capacity(pending.body.len() + 160);
    let _ = write!(out, "# {} {at} ", pending.word);
    push_header_field(&mut out, &pending.suffix);
    if !who.author.is_empty() {
        out.push(' ');
        push_header_field(&mut out, who.author);
    }
    out.push(' ');
    push_header_field(&mut out, who.peer);
    let _ = write!(out, " conn={}", who.conn);
    if let Some(asker) = who.proxied_by {
        out.push_str(" authcDN=");
        push_header_field(&mut out, asker);
    }
    out.push('\n');
    out.push_str(&pending.body);
    let _ = write!(out, "# end {} {at}\n\n", pending.word);
    out
}

/// A header field as it is, but control characters as `\XX`: a DN holding a newline can't
/// end the comment and start a forged line.
fn push_header_field(out: &mut String, field: &str) {
    for c in field.chars() {
        if c.is_control() {
            let _ = write!(out, "\\{:02X}", u32::from(c));
        } else {
            out.push(c);
        }
    }
}

/// One worker's way into the audit log.
pub struct AuditSink {
    buffer: Arc<LogBuffer>,
    /// What the buffer may hold between two collections by the log thread.
    bytes_max: usize,
    stats: Arc<WorkerStats>,
    /// When this worker last warned about dropped records, and how many it dropped since.
    warned_at: Cell<Option<Instant>>,
    dropped_since: Cell<u64>,
}

impl AuditSink {
    pub fn new(buffer: Arc<LogBuffer>, bytes_max: usize, stats: Arc<WorkerStats>) -> Self {
        Self {
            buffer,
            bytes_max: bytes_max.max(1),
            stats,
            warned_at: Cell::new(None),
            dropped_since: Cell::new(0),
        }
    }

    /// Appends the record of a committed change; never waits.
    pub fn commit(&self, pending: &Pending, who: &Requester<'_>) {
        let at = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let record = format_record(pending, who, at);
        if self.buffer.append_within(&record, self.bytes_max) {
            return;
        }
        bump(&self.stats.audit_log_dropped, 1);
        self.dropped_since.set(self.dropped_since.get() + 1);
        let now = Instant::now();
        if self.warned_at.get().is_none_or(|last| now.duration_since(last) >= DROP_WARNING_INTERVAL) {
            tracing::warn!(
                dropped = self.dropped_since.get(),
                "the audit log is behind: change records dropped (ferrodir_audit_log_dropped_records_total); \
                 check the disk under [audit_log] path, or raise queue_bytes_max"
            );
            self.warned_at.set(Some(now));
            self.dropped_since.set(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(name: &str, values: &[&[u8]]) -> Attribute {
        Attribute::new(name, values.iter().map(|v| v.to_vec()).collect())
    }

    const ADMIN: Requester<'static> = Requester {
        author: "cn=admin,dc=example,dc=com",
        peer: "IP=127.0.0.1:40522",
        conn: 7,
        proxied_by: None,
    };

    #[test]
    fn a_modify_is_written_as_slapo_auditlog_writes_it() {
        let mods = [
            LdifMod { op: ModOp::Replace, attr: attr("mail", &[b"alice@example.com"]) },
            LdifMod { op: ModOp::Add, attr: attr("description", &[b"caf\xc3\xa9", b" lead"]) },
            LdifMod { op: ModOp::Delete, attr: attr("telephoneNumber", &[]) },
        ];
        let pending =
            prepare("uid=alice,ou=people,dc=example,dc=com", "dc=example,dc=com", Change::Modify(&mods));
        assert_eq!(
            format_record(&pending, &ADMIN, 1_733_312_345),
            "# modify 1733312345 dc=example,dc=com cn=admin,dc=example,dc=com IP=127.0.0.1:40522 conn=7\n\
             dn: uid=alice,ou=people,dc=example,dc=com\n\
             changetype: modify\n\
             replace: mail\n\
             mail: alice@example.com\n\
             -\n\
             add: description\n\
             description:: Y2Fmw6k=\n\
             description:: IGxlYWQ=\n\
             -\n\
             delete: telephoneNumber\n\
             -\n\
             # end modify 1733312345\n\n"
        );
    }

    #[test]
    fn add_delete_and_modrdn_records() {
        let attrs = [attr("objectClass", &[b"person"]), attr("cn", &[b"Carol"]), attr("sn", &[b"C"])];
        let add = prepare("cn=Carol,dc=example,dc=com", "dc=example,dc=com", Change::Add(&attrs));
        let text = format_record(&add, &ADMIN, 5);
        assert!(text.starts_with("# add 5 dc=example,dc=com cn=admin"), "{text}");
        assert!(
            text.contains("dn: cn=Carol,dc=example,dc=com\nchangetype: add\nobjectClass: person\ncn: Carol\nsn: C\n# end add 5\n\n"),
            "{text}"
        );
        let delete = prepare("cn=Carol,dc=example,dc=com", "dc=example,dc=com", Change::Delete);
        assert!(format_record(&delete, &ADMIN, 5)
            .ends_with("conn=7\ndn: cn=Carol,dc=example,dc=com\nchangetype: delete\n# end delete 5\n\n"));
        let moved = Change::ModDn {
            new_rdn: "cn=Dora",
            delete_old_rdn: true,
            new_superior: Some("ou=x,dc=example,dc=com"),
        };
        let text =
            format_record(&prepare("cn=Carol,dc=example,dc=com", "dc=example,dc=com", moved), &ADMIN, 5);
        assert!(text.starts_with("# modrdn 5 "), "{text}");
        assert!(
            text.contains("changetype: modrdn\nnewrdn: cn=Dora\ndeleteoldrdn: 1\nnewsuperior: ou=x,dc=example,dc=com\n# end modrdn 5\n"),
            "{text}"
        );
    }

    #[test]
    fn passwords_appear_only_hashed() {
        let hashed = crate::password::ssha(b"hunter2", b"salt");
        let attrs =
            [attr("userPassword", &[hashed.as_bytes(), b"hunter2"]), attr("authPassword", &[b"clear"])];
        let text = format_record(
            &prepare("cn=x,dc=example,dc=com", "dc=example,dc=com", Change::Add(&attrs)),
            &ADMIN,
            1,
        );
        assert!(text.contains(&format!("userPassword: {hashed}\n")), "{text}");
        assert!(text.contains("userPassword: ***\nauthPassword: ***\n"), "{text}");
        assert!(!text.contains("hunter2") && !text.contains("clear"), "{text}");
    }

    #[test]
    fn header_fields_cannot_forge_lines() {
        let pending = prepare("cn=x", "", Change::Delete);
        let who = Requester { author: "cn=a\nb", peer: "PATH=/run/ldapi", conn: 1, proxied_by: None };
        let text = format_record(&pending, &who, 1);
        assert!(text.starts_with("# delete 1 global cn=a\\0Ab PATH=/run/ldapi conn=1\ndn: cn=x\n"), "{text}");
    }

    #[test]
    fn a_full_buffer_drops_and_counts() {
        let buffer = Arc::new(LogBuffer::default());
        let stats = Arc::new(WorkerStats::default());
        let pending = prepare("cn=x,dc=example,dc=com", "dc=example,dc=com", Change::Delete);
        let one = format_record(&pending, &ADMIN, 1_733_312_345).len();
        let sink = AuditSink::new(buffer.clone(), one * 2, stats.clone());
        for _ in 0..5 {
            sink.commit(&pending, &ADMIN);
        }
        let mut out = String::new();
        assert_eq!(buffer.take(&mut out), 2);
        assert_eq!(out.matches("# end delete").count(), 2);
        assert_eq!(stats.audit_log_dropped.load(std::sync::atomic::Ordering::Relaxed), 3);
        // A record larger than the bound still goes into an empty buffer.
        let small = AuditSink::new(buffer.clone(), 1, stats);
        small.commit(&pending, &ADMIN);
        let mut next = String::new();
        assert_eq!(buffer.take(&mut next), 1);
    }
}
