//! LDIF as OpenLDAP's test scripts see it: a reader for the change records they feed to
//! ldapmodify and ldapadd (RFC 2849), a writer that prints an entry byte for byte as
//! `ldapsearch -LLL` does (libldap's `ldif_sput_wrap`: 78 columns, base64 for unsafe values
//! and for userPassword), the `-S ""` entry order, and ldif-filter's comment removal.

use crate::client::{Change, Entry, ModOp};

#[derive(Debug, Clone)]
pub enum RecordKind {
    /// A record without `changetype`: an entry (ldapadd adds it).
    Content(Vec<(String, Vec<String>)>),
    Add(Vec<(String, Vec<String>)>),
    Delete,
    Modify(Vec<Change>),
    ModRdn {
        new_rdn: String,
        delete_old_rdn: bool,
        new_superior: Option<String>,
    },
}

#[derive(Debug, Clone)]
pub struct Record {
    pub dn: String,
    pub kind: RecordKind,
}

/// Logical lines of one record: continuation lines joined, comments (with their own
/// continuations) dropped.
fn logical_records(text: &str) -> Vec<Vec<String>> {
    let mut records = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut in_comment = false;
    for raw in text.lines() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if let Some(rest) = line.strip_prefix(' ') {
            if !in_comment {
                if let Some(last) = current.last_mut() {
                    last.push_str(rest);
                }
            }
            continue;
        }
        in_comment = line.starts_with('#');
        if in_comment {
            continue;
        }
        if line.is_empty() {
            if !current.is_empty() {
                records.push(std::mem::take(&mut current));
            }
            continue;
        }
        current.push(line.to_string());
    }
    if !current.is_empty() {
        records.push(current);
    }
    records
}

/// `name: value` or `name:: base64`.
fn split_line(line: &str) -> Result<(String, String), String> {
    let colon = line.find(':').ok_or_else(|| format!("LDIF line without ':': {line}"))?;
    let name = line[..colon].to_string();
    let rest = &line[colon + 1..];
    let value = if let Some(encoded) = rest.strip_prefix(':') {
        let bytes = base64_decode(encoded.trim()).ok_or_else(|| format!("bad base64 in: {line}"))?;
        String::from_utf8_lossy(&bytes).into_owned()
    } else {
        // RFC 2849: FILL (any number of spaces) separates the colon from a SAFE-STRING.
        rest.trim_start_matches(' ').to_string()
    };
    Ok((name, value))
}

/// Values grouped per attribute (first spelling of the name, first-seen order).
fn group(lines: &[(String, String)]) -> Vec<(String, Vec<String>)> {
    let mut attrs: Vec<(String, Vec<String>)> = Vec::new();
    for (name, value) in lines {
        match attrs.iter_mut().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
            Some((_, values)) => values.push(value.clone()),
            None => attrs.push((name.clone(), vec![value.clone()])),
        }
    }
    attrs
}

pub fn parse(text: &str) -> Result<Vec<Record>, String> {
    let mut records = Vec::new();
    for lines in logical_records(text) {
        let mut pairs =
            lines.iter().filter(|l| *l != "-").map(|l| split_line(l)).collect::<Result<Vec<_>, _>>()?;
        if pairs.first().is_some_and(|(n, _)| n.eq_ignore_ascii_case("version")) {
            pairs.remove(0);
        }
        if pairs.is_empty() {
            continue;
        }
        let (first, dn) = pairs.remove(0);
        if !first.eq_ignore_ascii_case("dn") {
            return Err(format!("LDIF record starts with {first}, not dn"));
        }
        let changetype = match pairs.first() {
            Some((n, v)) if n.eq_ignore_ascii_case("changetype") => Some(v.to_ascii_lowercase()),
            _ => None,
        };
        if changetype.is_some() {
            pairs.remove(0);
        }
        let kind = match changetype.as_deref() {
            None => RecordKind::Content(group(&pairs)),
            Some("add") => RecordKind::Add(group(&pairs)),
            Some("delete") => RecordKind::Delete,
            Some("modify") => RecordKind::Modify(modify_changes(&lines_after_changetype(&lines))?),
            Some("modrdn") | Some("moddn") => modrdn(&pairs),
            Some(other) => return Err(format!("unknown changetype {other}")),
        };
        records.push(Record { dn, kind });
    }
    Ok(records)
}

/// The raw lines after `dn:` and `changetype:`, keeping the `-` separators.
fn lines_after_changetype(lines: &[String]) -> Vec<String> {
    lines.iter().skip_while(|l| !l.to_ascii_lowercase().starts_with("changetype")).skip(1).cloned().collect()
}

fn modify_changes(lines: &[String]) -> Result<Vec<Change>, String> {
    let mut changes: Vec<Change> = Vec::new();
    let mut open = false;
    for line in lines {
        if line == "-" {
            open = false;
            continue;
        }
        let (name, value) = split_line(line)?;
        if !open {
            let op = match name.to_ascii_lowercase().as_str() {
                "add" => ModOp::Add,
                "delete" => ModOp::Delete,
                "replace" => ModOp::Replace,
                "increment" => ModOp::Increment,
                other => return Err(format!("unknown modify operation {other}")),
            };
            changes.push(Change { op, attr: value, values: Vec::new() });
            open = true;
        } else if let Some(change) = changes.last_mut() {
            change.values.push(value);
        }
    }
    Ok(changes)
}

fn modrdn(pairs: &[(String, String)]) -> RecordKind {
    let get = |key: &str| pairs.iter().find(|(n, _)| n.eq_ignore_ascii_case(key)).map(|(_, v)| v.clone());
    RecordKind::ModRdn {
        new_rdn: get("newrdn").unwrap_or_default(),
        delete_old_rdn: get("deleteoldrdn").as_deref() == Some("1"),
        new_superior: get("newsuperior"),
    }
}

const LINE_WIDTH: usize = 78;
const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let bits = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[(bits >> (18 - 6 * i) & 0x3f) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut bits = 0u32;
    let mut count = 0;
    for c in text.bytes().filter(|c| *c != b'=' && !c.is_ascii_whitespace()) {
        bits = bits << 6 | BASE64.iter().position(|b| *b == c)? as u32;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    Some(out)
}

/// One `name: value` line as libldap's ldif_sput_wrap writes it for LDIF_PUT_VALUE.
pub fn put_value(out: &mut String, name: &str, value: &[u8]) {
    out.push_str(name);
    out.push(':');
    if value.is_empty() {
        out.push('\n');
        return;
    }
    let graph = |b: u8| (0x21..=0x7e).contains(&b);
    let must_base64 =
        name.eq_ignore_ascii_case("userPassword") || name == "2.5.4.35" || name.contains(";binary");
    let safe = graph(value[0])
        && value[0] != b':'
        && value[0] != b'<'
        && graph(value[value.len() - 1])
        && value.iter().all(|b| (0x20..=0x7e).contains(b));
    let (prefix, text) = if safe && !must_base64 {
        (" ", String::from_utf8_lossy(value).into_owned())
    } else {
        (": ", base64_encode(value))
    };
    out.push_str(prefix);
    let mut column = name.len() + 1 + prefix.len();
    for c in text.chars() {
        if column >= LINE_WIDTH {
            out.push_str("\n ");
            column = 1;
        }
        out.push(c);
        column += 1;
    }
    out.push('\n');
}

/// An entry as `ldapsearch -LLL` prints it, blank line included.
pub fn write_entry(out: &mut String, entry: &Entry, types_only: bool) {
    put_value(out, "dn", entry.dn.as_bytes());
    for (name, values) in &entry.attrs {
        if types_only {
            out.push_str(name);
            out.push_str(":\n");
        }
        for value in values {
            put_value(out, name, value);
        }
    }
    out.push('\n');
}

/// `ldapsearch -S ""`: libldap's ldap_sort_entries with no attribute sorts by the DN's
/// RDN values (ldap_explode_dn with notypes), leftmost first, each compared with strcasecmp.
pub fn sort_like_ldapsearch(entries: &mut [Entry]) {
    entries
        .sort_by_cached_key(|e| rdn_values(&e.dn).iter().map(|v| v.to_ascii_lowercase()).collect::<Vec<_>>());
}

/// The RDN values of a DN, types stripped, escapes kept.
fn rdn_values(dn: &str) -> Vec<String> {
    split_unescaped(dn, ',')
        .iter()
        .map(|rdn| {
            split_unescaped(rdn, '+')
                .iter()
                .map(|ava| ava.split_once('=').map(|(_, v)| v.trim()).unwrap_or(ava.trim()).to_string())
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect()
}

pub fn split_unescaped(text: &str, separator: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in text.chars() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == separator {
            parts.push(String::new());
            continue;
        }
        parts.last_mut().expect("never empty").push(c);
    }
    parts
}

/// ldif-filter as OpenLDAP's tests run it for back-mdb: comments removed, nothing sorted.
pub fn strip_comments(text: &str) -> String {
    let mut out = String::new();
    let mut in_comment = false;
    for line in text.lines() {
        if !line.starts_with(' ') {
            in_comment = line.starts_with('#');
        }
        if !in_comment {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip() {
        for text in ["", "a", "ab", "abc", " Jensen ", "bjensen"] {
            assert_eq!(base64_decode(&base64_encode(text.as_bytes())).unwrap(), text.as_bytes());
        }
        assert_eq!(base64_encode(b" Jensen "), "IEplbnNlbiA=");
    }

    #[test]
    fn wraps_like_libldap() {
        let mut out = String::new();
        let dn = "cn=Barbara Jensen,ou=Information Technology Division,ou=People,dc=example,dc=com";
        put_value(&mut out, "dn", dn.as_bytes());
        assert_eq!(
            out,
            "dn: cn=Barbara Jensen,ou=Information Technology Division,ou=People,dc=example,\n dc=com\n"
        );
        let mut out = String::new();
        put_value(&mut out, "userPassword", b"bjensen");
        put_value(&mut out, "sn", b" Jensen ");
        put_value(&mut out, "member", b"");
        assert_eq!(out, "userPassword:: YmplbnNlbg==\nsn:: IEplbnNlbiA=\nmember:\n");
    }

    #[test]
    fn reads_change_records() {
        let text =
            "version: 1\n\n# c\ndn: cn=a,dc=x\n# EMBEDDED\n CONTINUED\nchangetype: modify\nadd: drink\n\
                    drink: Pils\n-\ndelete: sn\n-\n\ndn: cn=b,dc=x\nchangetype: delete\n";
        let records = parse(text).unwrap();
        assert_eq!(records.len(), 2);
        match &records[0].kind {
            RecordKind::Modify(changes) => {
                assert_eq!(changes.len(), 2);
                assert_eq!(changes[0].values, vec!["Pils".to_string()]);
                assert!(changes[1].values.is_empty());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(records[1].kind, RecordKind::Delete));
    }
}
