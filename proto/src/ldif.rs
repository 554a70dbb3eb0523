//! LDIF (RFC 2849): a streaming reader for content and change records, and a writer for
//! content records as export produces them.
//!
//! The reader works in two steps: it collects one record's logical lines (comments dropped,
//! folded lines joined) up to the next blank line, then parses them. A whole record is
//! consumed before it is parsed, so after an error the reader already stands at the next
//! record, and a caller that goes on after bad records (`--continue`) simply keeps iterating.
//!
//! Values are raw bytes. The reader is lenient where slapd is (UTF-8 in plain values, a value
//! starting with `<` or `:` after the separating spaces); the writer is strict and base64
//! encodes anything that is not a SAFE-STRING.

use std::io::{BufRead, Write};

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;

use crate::entry::Attribute;

/// One LDIF record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LdifRecord {
    /// A content record (no changetype) — what import/export use.
    Content {
        dn: String,
        attrs: Vec<Attribute>,
    },
    Add {
        dn: String,
        attrs: Vec<Attribute>,
    },
    Delete {
        dn: String,
    },
    Modify {
        dn: String,
        mods: Vec<LdifMod>,
    },
    ModDn {
        dn: String,
        new_rdn: String,
        delete_old_rdn: bool,
        new_superior: Option<String>,
    },
}

/// One `add:`/`delete:`/`replace:`/`increment:` block of a modify record. `attr.values` holds
/// the listed values, which may be none (delete or replace the whole attribute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LdifMod {
    pub op: ModOp,
    pub attr: Attribute,
}

/// The modification kinds of RFC 4511 §4.6, plus increment from RFC 4525.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModOp {
    Add,
    Delete,
    Replace,
    Increment,
}

/// A malformed record or an unreadable input, with the 1-based physical line it was found on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct LdifError {
    pub line: usize,
    pub message: String,
}

/// Shorthand for returning an [`LdifError`].
fn fail<T>(line: usize, message: impl Into<String>) -> Result<T, LdifError> {
    Err(LdifError { line, message: message.into() })
}

/// The writer folds physical lines at this width, the continuation's leading space included
/// (RFC 2849 note 2 allows folding anywhere; 76 is what slapcat and others use).
const LINE_WIDTH_MAX: usize = 76;

/// Base64 as RFC 2849 note 10 uses it (RFC 2045 alphabet), read without insisting on the
/// trailing `=` padding, which some producers leave out.
const BASE64_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Reads LDIF records one at a time, yielding `(line of the record's dn:, record)`.
pub struct LdifReader<R: BufRead> {
    input: R,
    /// The number of the last physical line read (1-based).
    line_number: usize,
    /// The optional `version: 1` line may only open the file.
    at_file_start: bool,
    allow_file_urls: bool,
    finished: bool,
}

/// A line after unfolding, tagged with the physical line it started on.
struct LogicalLine {
    number: usize,
    text: Vec<u8>,
}

/// The three forms of RFC 2849 `value-spec`, still encoded.
#[derive(Clone, Copy)]
enum ValueSpec<'a> {
    Plain(&'a [u8]),
    Base64(&'a [u8]),
    Url(&'a [u8]),
}

impl<R: BufRead> LdifReader<R> {
    pub fn new(r: R) -> Self {
        LdifReader { input: r, line_number: 0, at_file_start: true, allow_file_urls: true, finished: false }
    }

    /// Whether `attr:< file://...` values are read from the filesystem (the default). Turn it
    /// off for LDIF from an untrusted source: RFC 2849's security considerations warn that such
    /// a file can pull any readable file into the directory.
    #[must_use]
    pub fn allow_file_urls(mut self, allow: bool) -> Self {
        self.allow_file_urls = allow;
        self
    }

    /// Reads one physical line without its line ending (LF or CR LF). `None` at the end.
    fn read_physical_line(&mut self, buf: &mut Vec<u8>) -> Result<Option<usize>, LdifError> {
        buf.clear();
        match self.input.read_until(b'\n', buf) {
            Ok(0) => Ok(None),
            Ok(_) => {
                self.line_number += 1;
                if buf.last() == Some(&b'\n') {
                    buf.pop();
                }
                if buf.last() == Some(&b'\r') {
                    buf.pop();
                }
                Ok(Some(self.line_number))
            }
            Err(err) => {
                self.finished = true;
                fail(self.line_number + 1, format!("cannot read input: {err}"))
            }
        }
    }

    /// Collects the logical lines of the next record, up to a blank line or the end, skipping
    /// blank lines and comments before it. `Ok(None)` at the end of the input. A misplaced
    /// continuation line is reported only once the whole record has been consumed.
    fn read_record_lines(&mut self) -> Result<Option<Vec<LogicalLine>>, LdifError> {
        let mut lines: Vec<LogicalLine> = Vec::new();
        let mut after_comment = false;
        let mut first_error = None;
        let mut buf = Vec::new();
        while let Some(number) = self.read_physical_line(&mut buf)? {
            let started = !lines.is_empty() || first_error.is_some();
            match buf.first() {
                None if started => break,
                None => after_comment = false,
                // RFC 2849 note 2: a line starting with a space continues the previous line,
                // comments included (note 3); that one space is dropped.
                Some(b' ') if after_comment => {}
                Some(b' ') => match lines.last_mut() {
                    Some(last) => last.text.extend_from_slice(buf.get(1..).unwrap_or_default()),
                    // Spaces alone between records: a blank line to the eye, so treat as one.
                    None if !started && buf.iter().all(|&b| b == b' ') => {}
                    None => {
                        let message = "a continuation line (leading space) has nothing to continue";
                        first_error.get_or_insert(LdifError { line: number, message: message.into() });
                    }
                },
                Some(b'#') => after_comment = true,
                Some(_) => {
                    lines.push(LogicalLine { number, text: std::mem::take(&mut buf) });
                    after_comment = false;
                }
            }
        }
        match first_error {
            Some(err) => Err(err),
            None if lines.is_empty() => Ok(None),
            None => Ok(Some(lines)),
        }
    }
}

impl<R: BufRead> Iterator for LdifReader<R> {
    type Item = Result<(usize, LdifRecord), LdifError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.finished {
            let lines = match self.read_record_lines() {
                Ok(Some(lines)) => lines,
                Ok(None) => {
                    self.finished = true;
                    return None;
                }
                Err(err) => return Some(Err(err)),
            };
            let mut record = lines.as_slice();
            if std::mem::take(&mut self.at_file_start) {
                match strip_version_line(record) {
                    // `version: 1` alone, then a blank line: the first record comes next.
                    Ok([]) => continue,
                    Ok(rest) => record = rest,
                    Err(err) => return Some(Err(err)),
                }
            }
            return Some(parse_record(record, self.allow_file_urls));
        }
        None
    }
}

/// RFC 2849 `version-spec`: optional here (as in slapd), and it must say 1 (note 1).
fn strip_version_line(lines: &[LogicalLine]) -> Result<&[LogicalLine], LdifError> {
    let Some((first, rest)) = lines.split_first() else {
        return Ok(lines);
    };
    match split_line(first)? {
        (name, _) if !name.eq_ignore_ascii_case("version") => Ok(lines),
        (_, ValueSpec::Plain(value)) if trim_spaces(value) == b"1" => Ok(rest),
        _ => fail(first.number, "unsupported LDIF version: only 'version: 1' is known"),
    }
}

/// Parses one record's logical lines into a record.
fn parse_record(lines: &[LogicalLine], urls: bool) -> Result<(usize, LdifRecord), LdifError> {
    let Some((first, mut rest)) = lines.split_first() else {
        return fail(0, "empty record");
    };
    let line = first.number;
    let (name, spec) = split_line(first)?;
    if !name.eq_ignore_ascii_case("dn") {
        return fail(line, format!("a record must start with 'dn:', found '{name}:'"));
    }
    let dn = utf8_value(resolve_value(spec, line, urls)?, "dn", line)?;
    // RFC 2849 note 9: controls, between dn and changetype, may be ignored.
    while let Some((_, after)) = rest.split_first().filter(|(l, _)| has_name(l, "control")) {
        rest = after;
    }
    let Some((kind_line, body)) = rest.split_first().filter(|(l, _)| has_name(l, "changetype")) else {
        let attrs = parse_attributes(rest, line, urls)?;
        return Ok((line, LdifRecord::Content { dn, attrs }));
    };
    let (_, spec) = split_line(kind_line)?;
    let kind = resolve_value(spec, kind_line.number, urls)?;
    let record = match trim_spaces(&kind).to_ascii_lowercase().as_slice() {
        b"add" => LdifRecord::Add { dn, attrs: parse_attributes(body, line, urls)? },
        b"delete" => match body.first() {
            None => LdifRecord::Delete { dn },
            Some(extra) => return fail(extra.number, "a delete record takes no further lines"),
        },
        b"modify" => LdifRecord::Modify { dn, mods: parse_modifications(body, urls)? },
        b"modrdn" | b"moddn" => parse_moddn(dn, body, line, urls)?,
        other => {
            let kind = String::from_utf8_lossy(other);
            let message = format!("unknown changetype '{kind}' (add, delete, modify, modrdn, moddn)");
            return fail(kind_line.number, message);
        }
    };
    Ok((line, record))
}

fn has_name(line: &LogicalLine, name: &str) -> bool {
    split_line(line).is_ok_and(|(found, _)| found.eq_ignore_ascii_case(name))
}

/// The `attrval-spec` lines of a content or add record (RFC 2849 wants at least one), merged
/// by attribute description: ignoring case, keeping the first spelling and the value order.
fn parse_attributes(lines: &[LogicalLine], dn_line: usize, urls: bool) -> Result<Vec<Attribute>, LdifError> {
    if lines.is_empty() {
        return fail(dn_line, "the record has a dn but no attributes");
    }
    let mut attrs: Vec<Attribute> = Vec::new();
    for line in lines {
        let (name, spec) = split_line(line)?;
        if ["dn", "changetype", "control"].iter().any(|word| name.eq_ignore_ascii_case(word)) {
            let message = format!("unexpected '{name}:' in a record (is a blank line missing?)");
            return fail(line.number, message);
        }
        let value = resolve_value(spec, line.number, urls)?;
        match attrs.iter_mut().find(|attr| attr.name.eq_ignore_ascii_case(name)) {
            Some(attr) => attr.values.push(value),
            None => attrs.push(Attribute::new(name, vec![value])),
        }
    }
    Ok(attrs)
}

/// RFC 2849 `change-modify`: blocks of `op: attr`, that attribute's values, and `-`. The last
/// `-` may be left out at the end of the record, as slapd allows.
fn parse_modifications(lines: &[LogicalLine], urls: bool) -> Result<Vec<LdifMod>, LdifError> {
    let mut mods = Vec::new();
    let mut remaining = lines;
    while let Some((header, mut block)) = remaining.split_first() {
        let (op_name, spec) = split_line(header)?;
        let op = match op_name.to_ascii_lowercase().as_str() {
            "add" => ModOp::Add,
            "delete" => ModOp::Delete,
            "replace" => ModOp::Replace,
            "increment" => ModOp::Increment,
            _ => {
                let message = format!("expected add:, delete:, replace: or increment:, not '{op_name}:'");
                return fail(header.number, message);
            }
        };
        let attr_name = utf8_value(resolve_value(spec, header.number, urls)?, "name", header.number)?;
        let attr_name = attr_name.trim_matches(' ');
        if !is_attribute_description(attr_name.as_bytes()) {
            return fail(header.number, format!("'{attr_name}' is not an attribute description"));
        }
        let mut values = Vec::new();
        while let Some((line, after)) = block.split_first() {
            block = after;
            if trim_spaces(&line.text) == b"-" {
                break;
            }
            let (name, spec) = split_line(line)?;
            if !name.eq_ignore_ascii_case(attr_name) {
                let message = format!("'{name}:' in the '{op_name}: {attr_name}' block (no '-'?)");
                return fail(line.number, message);
            }
            values.push(resolve_value(spec, line.number, urls)?);
        }
        remaining = block;
        mods.push(LdifMod { op, attr: Attribute::new(attr_name, values) });
    }
    Ok(mods)
}

/// RFC 2849 `change-moddn`: `newrdn` and `deleteoldrdn` are required, `newsuperior` optional.
fn parse_moddn(
    dn: String,
    lines: &[LogicalLine],
    dn_line: usize,
    urls: bool,
) -> Result<LdifRecord, LdifError> {
    let (mut new_rdn, mut delete_old_rdn, mut new_superior) = (None, None, None);
    for line in lines {
        let (name, spec) = split_line(line)?;
        let value = resolve_value(spec, line.number, urls)?;
        let was_unset = match name.to_ascii_lowercase().as_str() {
            "newrdn" => new_rdn.replace(utf8_value(value, name, line.number)?).is_none(),
            "newsuperior" => new_superior.replace(utf8_value(value, name, line.number)?).is_none(),
            "deleteoldrdn" => match trim_spaces(&value) {
                b"0" => delete_old_rdn.replace(false).is_none(),
                b"1" => delete_old_rdn.replace(true).is_none(),
                _ => return fail(line.number, "deleteoldrdn must be 0 or 1"),
            },
            _ => return fail(line.number, format!("unexpected '{name}:' in a modrdn record")),
        };
        if !was_unset {
            return fail(line.number, format!("'{name}:' given twice"));
        }
    }
    let Some(new_rdn) = new_rdn else {
        return fail(dn_line, "modrdn record without 'newrdn:'");
    };
    let Some(delete_old_rdn) = delete_old_rdn else {
        return fail(dn_line, "modrdn record without 'deleteoldrdn:'");
    };
    Ok(LdifRecord::ModDn { dn, new_rdn, delete_old_rdn, new_superior })
}

/// Splits `name: value`, `name:: base64` or `name:< url` at the first colon and checks the
/// name is an attribute description.
fn split_line(line: &LogicalLine) -> Result<(&str, ValueSpec<'_>), LdifError> {
    let text = line.text.as_slice();
    let Some(colon) = text.iter().position(|&b| b == b':') else {
        return fail(line.number, "expected 'name: value', found no ':'");
    };
    let (name_bytes, after_name) = text.split_at(colon);
    let name = match std::str::from_utf8(name_bytes) {
        Ok(name) if is_attribute_description(name.as_bytes()) => name,
        _ => {
            let shown = String::from_utf8_lossy(name_bytes);
            return fail(line.number, format!("'{shown}' is not an attribute description"));
        }
    };
    // RFC 2849 value-spec: FILL (spaces) separates the indicator from the value.
    // `after_name` starts with the ':' found above.
    let spec = match after_name.get(1..).unwrap_or_default() {
        [b':', rest @ ..] => ValueSpec::Base64(skip_leading_spaces(rest)),
        [b'<', rest @ ..] => ValueSpec::Url(skip_leading_spaces(rest)),
        rest => ValueSpec::Plain(skip_leading_spaces(rest)),
    };
    Ok((name, spec))
}

/// RFC 4512 §2.5 `AttributeType *(";" option)`, loosely: a name or numeric OID, then options,
/// all from ALPHA / DIGIT / "-" / "." / ";". The schema layer checks the rest.
fn is_attribute_description(name: &[u8]) -> bool {
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b';');
    name.first().is_some_and(u8::is_ascii_alphanumeric) && name.iter().all(allowed)
}

/// Decodes a value-spec to the value's bytes.
fn resolve_value(spec: ValueSpec<'_>, line: usize, urls: bool) -> Result<Vec<u8>, LdifError> {
    match spec {
        // SAFE-CHAR excludes NUL, CR and LF: such values must come base64 encoded.
        ValueSpec::Plain(value) if value.iter().any(|&b| b == 0 || b == b'\r') => {
            fail(line, "NUL or CR in a plain value; such values need base64 ('::')")
        }
        ValueSpec::Plain(value) => Ok(value.to_vec()),
        ValueSpec::Base64(encoded) => BASE64_LENIENT
            .decode(trim_spaces(encoded))
            .or_else(|err| fail(line, format!("invalid base64 value: {err}"))),
        ValueSpec::Url(url) => read_file_url(trim_spaces(url), line, urls),
    }
}

/// RFC 2849 note 6: the content of a `file://` URL is the value. Only local files (empty
/// host or `localhost`) are supported; anything else is an error rather than an empty value.
fn read_file_url(url: &[u8], line: usize, urls: bool) -> Result<Vec<u8>, LdifError> {
    let shown = String::from_utf8_lossy(url);
    if !urls {
        return fail(line, format!("URL values are disabled for this input: '{shown}'"));
    }
    let lowercase = url.to_ascii_lowercase();
    let path_start = if lowercase.starts_with(b"file:///") {
        7
    } else if lowercase.starts_with(b"file://localhost/") {
        16
    } else {
        return fail(line, format!("only local file:// URLs are supported, not '{shown}'"));
    };
    let Some(path) =
        percent_decode(url.get(path_start..).unwrap_or_default()).and_then(|p| String::from_utf8(p).ok())
    else {
        return fail(line, format!("bad %-escape or non-UTF-8 path in '{shown}'"));
    };
    std::fs::read(&path).or_else(|err| fail(line, format!("cannot read '{path}': {err}")))
}

/// Resolves `%XX` escapes in a URL path (RFC 3986 §2.1). `None` if one is malformed.
fn percent_decode(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut index = 0;
    while let Some(&byte) = text.get(index) {
        if byte == b'%' {
            let hex = std::str::from_utf8(text.get(index + 1..index + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(byte);
            index += 1;
        }
    }
    Some(out)
}

/// DNs and RDNs must be UTF-8 (RFC 2849 note 7).
fn utf8_value(value: Vec<u8>, what: &str, line: usize) -> Result<String, LdifError> {
    String::from_utf8(value).or_else(|_| fail(line, format!("the {what} is not valid UTF-8")))
}

fn skip_leading_spaces(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| b != b' ').unwrap_or(bytes.len());
    bytes.get(start..).unwrap_or_default()
}

fn trim_spaces(bytes: &[u8]) -> &[u8] {
    let start = skip_leading_spaces(bytes);
    let end = start.iter().rposition(|&b| b != b' ').map_or(0, |last| last + 1);
    start.get(..end).unwrap_or_default()
}

/// Writes one content record (`dn:` then every value of every attribute) and the blank line
/// that ends it. Attributes without values have no LDIF form and are skipped.
pub fn write_entry(out: &mut impl Write, dn: &str, attrs: &[Attribute]) -> std::io::Result<()> {
    write_value_line(out, "dn", dn.as_bytes())?;
    for attr in attrs {
        for value in &attr.values {
            write_value_line(out, &attr.name, value)?;
        }
    }
    out.write_all(b"\n")
}

/// Writes `name: value`, or `name:: base64` when the value is not a SAFE-STRING (RFC 2849
/// notes 4 and 8), folded at [`LINE_WIDTH_MAX`]. An empty value is written `name:` (note 5).
pub fn write_value_line(out: &mut impl Write, name: &str, value: &[u8]) -> std::io::Result<()> {
    let mut line = Vec::with_capacity(name.len() + 3 + value.len() * 4 / 3 + 4);
    line.extend_from_slice(name.as_bytes());
    line.push(b':');
    if !is_safe_string(value) {
        line.extend_from_slice(b": ");
        line.extend_from_slice(STANDARD.encode(value).as_bytes());
    } else if !value.is_empty() {
        line.push(b' ');
        line.extend_from_slice(value);
    }
    write_folded(out, &line)
}

/// RFC 2849 SAFE-STRING, plus note 8: a trailing space also forces base64, so that it
/// survives editors and readers that trim lines. Non-ASCII bytes (even valid UTF-8) are not
/// SAFE-CHARs.
fn is_safe_string(value: &[u8]) -> bool {
    let safe_char = |b: &u8| matches!(b, 0x01..=0x7f) && *b != b'\n' && *b != b'\r';
    let unsafe_init = |b: &u8| matches!(b, b' ' | b':' | b'<');
    !value.first().is_some_and(unsafe_init) && value.last() != Some(&b' ') && value.iter().all(safe_char)
}

/// Writes `line` folded (RFC 2849 note 2): the first physical line holds up to
/// [`LINE_WIDTH_MAX`] bytes, each continuation a space and one byte fewer. Folding at any byte
/// is safe because written lines are ASCII: anything else went through base64.
fn write_folded(out: &mut impl Write, line: &[u8]) -> std::io::Result<()> {
    let (first, mut rest) = line.split_at(line.len().min(LINE_WIDTH_MAX));
    out.write_all(first)?;
    out.write_all(b"\n")?;
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(rest.len().min(LINE_WIDTH_MAX - 1));
        out.write_all(b" ")?;
        out.write_all(chunk)?;
        out.write_all(b"\n")?;
        rest = tail;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Item = Result<(usize, LdifRecord), LdifError>;

    fn read_all(text: &str) -> Vec<Item> {
        LdifReader::new(text.as_bytes()).collect()
    }

    fn records(text: &str) -> Vec<LdifRecord> {
        let ok = |item: Item| item.unwrap_or_else(|err| panic!("{err} in {text:?}")).1;
        read_all(text).into_iter().map(ok).collect()
    }

    fn attr(name: &str, values: &[&str]) -> Attribute {
        Attribute::new(name, values.iter().map(|v| v.as_bytes().to_vec()).collect())
    }

    fn content(record: &LdifRecord) -> (&str, &[Attribute]) {
        match record {
            LdifRecord::Content { dn, attrs } => (dn, attrs),
            other => panic!("expected a content record, got {other:?}"),
        }
    }

    fn mods(record: &LdifRecord) -> &[LdifMod] {
        match record {
            LdifRecord::Modify { mods, .. } => mods,
            other => panic!("expected a modify record, got {other:?}"),
        }
    }

    /// Each item's record line or error line.
    fn lines_of(items: &[Item]) -> Vec<Result<usize, usize>> {
        let line = |item: &Item| item.as_ref().map(|(line, _)| *line).map_err(|err| err.line);
        items.iter().map(line).collect()
    }

    /// A file of the shared OpenLDAP conformance data. `FERRODIR_TESTDATA` overrides where the
    /// `testdata` folder is; by default it sits in `shared/` beside the workspace.
    fn openldap_testdata(name: &str) -> Vec<u8> {
        let testdata = std::env::var_os("FERRODIR_TESTDATA").map_or_else(
            || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata"),
            std::path::PathBuf::from,
        );
        let path = testdata.join("conformance/openldap").join(name);
        std::fs::read(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }

    #[test]
    fn rfc2849_examples_1_to_4() {
        // Example 1 (abridged): a version line, then two entries.
        let text = "version: 1\ndn: cn=Barbara Jensen, ou=Product Development, dc=airius, dc=com
objectclass: top\nobjectclass: person\ncn: Barbara Jensen\ncn: Babs Jensen\nsn: Jensen\n
dn: cn=Bjorn Jensen, ou=Accounting, dc=airius, dc=com\ncn: Bjorn Jensen\n";
        let items = read_all(text);
        assert_eq!(lines_of(&items), [Ok(2), Ok(9)]);
        let recs = records(text);
        let (dn, attrs) = content(&recs[0]);
        assert!(dn.starts_with("cn=Barbara Jensen, ou=Product Development,"), "{dn}");
        assert_eq!(attrs[0], attr("objectclass", &["top", "person"]));
        assert_eq!(attrs[1], attr("cn", &["Barbara Jensen", "Babs Jensen"]));
        // Example 2: no FILL after the colon, and a folded value.
        let text = "version: 1\ndn:cn=Barbara Jensen, dc=airius, dc=com
description:Babs is a big sailing fan, and travels extensively in sea
 rch of perfect sailing conditions.\ntitle:Product Manager\n";
        let recs = records(text);
        let description = "Babs is a big sailing fan, and travels extensively in search of perfect \
                           sailing conditions.";
        assert_eq!(content(&recs[0]).1[0], attr("description", &[description]));
        // Example 3: a folded base64 value holding a CR.
        let text = "version: 1\ndn: cn=Gern Jensen, ou=Product Testing, dc=airius, dc=com
description:: V2hhdCBhIGNhcmVmdWwgcmVhZGVyIHlvdSBhcmUhICBUaGlzIHZhbHVl
 IGlzIGJhc2UtNjQtZW5jb2RlZCBiZWNhdXNlIGl0IGhhcyBhIGNvbnRyb2wgY2hhcmFjdG
 VyIGluIGl0IChhIENSKS4NICBCeSB0aGUgd2F5LCB5b3Ugc2hvdWxkIHJlYWxseSBnZXQg
 b3V0IG1vcmUu\n";
        let description = "What a careful reader you are!  This value is base-64-encoded because \
                           it has a control character in it (a CR).\r  By the way, you should \
                           really get out more.";
        let recs = records(text);
        assert_eq!(content(&recs[0]).1[0], attr("description", &[description]));
        // Example 4 (abridged): a base64 DN, UTF-8 values, options, comments.
        let text = "version: 1\ndn:: b3U95Za25qWt6YOoLG89QWlyaXVz\n# dn:: ou=<JapaneseOU>,o=Airius
ou:: 5Za25qWt6YOo\nou;lang-ja:: 5Za25qWt6YOo\nou;lang-en: Sales\nOU: plain\n";
        let recs = records(text);
        let (dn, attrs) = content(&recs[0]);
        assert_eq!(dn, "ou=営業部,o=Airius");
        assert_eq!(attrs[0], attr("ou", &["営業部", "plain"]));
        assert_eq!(attrs[1], attr("ou;lang-ja", &["営業部"]));
        assert_eq!(attrs[2], attr("ou;lang-en", &["Sales"]));
    }

    #[test]
    fn rfc2849_examples_6_and_7_change_records() {
        let dir = std::env::temp_dir().join(format!("ferrodir-ldif-{}", std::process::id()));
        let photo = dir.join("fiona photo.jpg");
        let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&photo, b"\xffJ"));
        written.unwrap_or_else(|err| panic!("{err}"));
        let url = format!("file://{}", photo.display()).replace(' ', "%20");
        let text = format!(
            "version: 1\n# Add a new entry\ndn: cn=Fiona Jensen, dc=airius, dc=com
changetype: add\nobjectclass: top\ncn: Fiona Jensen\njpegphoto:< {url}\n
# Delete an existing entry\ndn: cn=Robert Jensen, dc=airius, dc=com\nchangetype: delete\n
dn: cn=Paul Jensen, dc=airius, dc=com\nchangetype: modrdn\nnewrdn: cn=Paula Jensen
deleteoldrdn: 1\n\ndn: ou=PD Accountants, dc=airius, dc=com\nchangetype: moddn
newrdn: ou=Product Development Accountants\ndeleteoldrdn: 0
newsuperior: ou=Accounting, dc=airius, dc=com\n
dn: cn=Paula Jensen, dc=airius, dc=com\nchangetype: modify\nadd: postaladdress
postaladdress: 123 Anystreet $ Sunnyvale, CA $ 94086\n-\ndelete: description\n-
replace: telephonenumber\ntelephonenumber: +1 408 555 1234\ntelephonenumber: +1 408 555 5678
-\ndelete: facsimiletelephonenumber\nfacsimiletelephonenumber: +1 408 555 9876\n-\n
dn: cn=Ingrid Jensen, dc=airius, dc=com\nchangetype: modify\nreplace: postaladdress\n-
delete: description\n-\n
# Example 7: a control, accepted and ignored.\ndn: ou=Product Development, dc=airius, dc=com
control: 1.2.840.113556.1.4.805 true\nchangetype: delete\n"
        );
        let recs = records(&text);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(recs.len(), 7);
        let photo_attr = Attribute::new("jpegphoto", vec![b"\xffJ".to_vec()]);
        assert!(matches!(&recs[0], LdifRecord::Add { attrs, .. } if attrs[2] == photo_attr));
        let robert = "cn=Robert Jensen, dc=airius, dc=com";
        assert_eq!(recs[1], LdifRecord::Delete { dn: robert.into() });
        let rename = LdifRecord::ModDn {
            dn: "cn=Paul Jensen, dc=airius, dc=com".into(),
            new_rdn: "cn=Paula Jensen".into(),
            delete_old_rdn: true,
            new_superior: None,
        };
        assert_eq!(recs[2], rename);
        let superior = Some("ou=Accounting, dc=airius, dc=com".to_owned());
        let moved = matches!(&recs[3], LdifRecord::ModDn { delete_old_rdn: false, new_superior, .. }
            if *new_superior == superior);
        assert!(moved, "{:?}", recs[3]);
        let ops: Vec<(ModOp, usize)> = mods(&recs[4]).iter().map(|m| (m.op, m.attr.values.len())).collect();
        use ModOp::{Add, Delete, Replace};
        assert_eq!(ops, [(Add, 1), (Delete, 0), (Replace, 2), (Delete, 1)]);
        let phones = attr("telephonenumber", &["+1 408 555 1234", "+1 408 555 5678"]);
        assert_eq!(mods(&recs[4])[2].attr, phones);
        let replace_all = (Replace, attr("postaladdress", &[]));
        assert_eq!((mods(&recs[5])[0].op, mods(&recs[5])[0].attr.clone()), replace_all);
        assert!(matches!(&recs[6], LdifRecord::Delete { dn } if dn.starts_with("ou=Product")));
    }

    #[test]
    fn errors_carry_line_numbers_and_the_reader_resynchronises() {
        // Example 6 as printed in the RFC has a stray blank line inside a modify record (an
        // erratum): the record ends there, the orphaned rest is reported, and reading goes on.
        let text = "dn: cn=Paula Jensen\nchangetype: modify\nadd: postaladdress
postaladdress: 123 Anystreet\n-\n\ndelete: description\n-\n
dn: cn=bad\ncn: x\nnot an attribute line\ncn: y\n\ndn: cn=ok2\nchangetype: explode\n
dn: cn=bad64\ncn:: !!!!\n\ndn: cn=ok3\ncn: ok3\n";
        let items = read_all(text);
        assert_eq!(lines_of(&items), [Ok(1), Err(7), Err(12), Err(16), Err(19), Ok(21)]);
        let message = items[2].as_ref().map_err(ToString::to_string).err();
        assert!(message.is_some_and(|m| m.starts_with("line 12: ")), "{items:?}");
    }

    #[test]
    fn malformed_records_are_errors_at_the_right_line() {
        let cases: &[(&str, usize)] = &[
            (" leading continuation\ncn: x\n", 1),
            ("dn: cn=a\n", 1),
            ("dn: cn=a\nchangetype: delete\ncn: x\n", 3),
            ("dn: cn=a\nchangetype: modify\nadd: cn\nsn: x\n", 4),
            ("dn: cn=a\nchangetype: modify\nfrobnicate: cn\n", 3),
            ("dn: cn=a\nchangetype: modrdn\nnewrdn: cn=b\n", 1),
            ("dn: a\nchangetype: modrdn\nnewrdn: cn=b\ndeleteoldrdn: 2\n", 4),
            ("dn: a\nchangetype: modrdn\nnewrdn: b=1\nnewrdn: c=1\ndeleteoldrdn: 1\n", 4),
            ("dn: cn=a\ncn: a\ndn: cn=b\n", 3),
            ("dn: cn=a\ncn: a\x00b\n", 2),
            ("dn:: /w==\ncn: a\n", 1),
            ("version: 2\ndn: cn=a\ncn: a\n", 1),
            ("dn: cn=a\nc_n: a\n", 2),
            ("dn: cn=a\nphoto:< http://example.com/x.jpg\n", 2),
            ("dn: cn=a\nphoto:< file:///nonexistent/ferrodir/x.jpg\n", 2),
            ("dn: cn=a\nphoto:< file://otherhost/x.jpg\n", 2),
            ("dn: cn=a\nphoto:< file:///x%2\n", 2),
            (":\n", 1),
        ];
        for (text, line) in cases {
            let items = read_all(text);
            assert_eq!(lines_of(&items), [Err(*line)], "{text:?}: {items:?}");
        }
        let disabled = LdifReader::new("dn: a\nx:< file:///etc/hostname\n".as_bytes());
        assert!(disabled.allow_file_urls(false).all(|item| item.is_err()));
    }

    #[test]
    fn comments_folding_crlf_merging_and_blank_input() {
        let text = "# lead comment\r\n folded comment\r\n\r\n   \r\ndn: cn=a,\r\n dc=example\r\n\
                    #embedded\r\ncn: A\r\nsn: one\r\n  two\r\nCN: again\r\ncn;x-y: en\r\nsn:\r\n\r\n";
        assert_eq!(lines_of(&read_all(text)), [Ok(5)]);
        let recs = records(text);
        let (dn, attrs) = content(&recs[0]);
        assert_eq!(dn, "cn=a,dc=example");
        let (cn, sn) = (attr("cn", &["A", "again"]), attr("sn", &["one two", ""]));
        assert_eq!(attrs, [cn, sn, attr("cn;x-y", &["en"])]);
        assert_eq!(records("version: 1\n\n\ndn: cn=a\ncn: a\n").len(), 1);
        assert!(read_all("").is_empty() && read_all("\n\n# only a comment\n  \n").is_empty());
        let root = records("dn:\nobjectclass: top\n");
        assert_eq!(content(&root[0]), ("", &[attr("objectclass", &["top"])][..]));
    }

    #[test]
    fn openldap_conformance_files() {
        let ordered = openldap_testdata("test-ordered.ldif");
        let items: Vec<Item> = LdifReader::new(ordered.as_slice()).collect();
        assert_eq!(items.len(), 19);
        assert_eq!(lines_of(&items[..1]), [Ok(2)]);
        let recs: Vec<LdifRecord> = items.into_iter().filter_map(|item| Some(item.ok()?.1)).collect();
        assert_eq!(content(&recs[0]).0, "dc=example,dc=com");
        assert!(recs.iter().all(|record| content(record).1.len() > 1));

        let modify = String::from_utf8_lossy(&openldap_testdata("test-modify.ldif")).into_owned();
        let recs = records(&modify);
        assert_eq!(recs.len(), 8);
        assert_eq!(mods(&recs[0]).len(), 5);
        let folded = "cn=James A Jones 2,ou=Information Technology Division,ou=People,dc=example,dc=com";
        assert_eq!(mods(&recs[2])[0].attr.values[0], folded.as_bytes());
        assert!(matches!(&recs[4], LdifRecord::Add { attrs, .. } if attrs.len() == 15));
        let increment = &mods(&recs[6])[1];
        assert_eq!((increment.op, &increment.attr), (ModOp::Increment, &attr("gidNumber", &["-1"])));
        assert!(mods(&recs[7]).is_empty());

        let outputs = ["test.ldif", "test-dn.ldif", "dn.out", "search.out.provider", "modify.out.provider"];
        let modrdn_outputs = (0..4).map(|n| format!("modrdn.out.provider.{n}"));
        for name in outputs.into_iter().map(str::to_owned).chain(modrdn_outputs) {
            let text = openldap_testdata(&name);
            let errors: Vec<LdifError> = LdifReader::new(text.as_slice()).filter_map(Result::err).collect();
            assert_eq!(errors, [], "{name}");
        }
    }

    #[test]
    fn writer_base64_encodes_what_is_not_a_safe_string() {
        let cases: &[(&[u8], &str)] = &[
            (b"plain value", "cn: plain value\n"),
            (b"", "cn:\n"),
            (b" lead", "cn:: IGxlYWQ=\n"),
            (b"trail ", "cn:: dHJhaWwg\n"),
            (b":colon", "cn:: OmNvbG9u\n"),
            (b"<angle", "cn:: PGFuZ2xl\n"),
            (b"a\nb", "cn:: YQpi\n"),
            (b"a\rb", "cn:: YQ1i\n"),
            (b"a\0b", "cn:: YQBi\n"),
            ("é".as_bytes(), "cn:: w6k=\n"),
            (b"inner: colon < ok#", "cn: inner: colon < ok#\n"),
        ];
        for (value, expected) in cases {
            let mut out = Vec::new();
            write_value_line(&mut out, "cn", value).unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(String::from_utf8_lossy(&out), *expected, "{value:?}");
        }
    }

    #[test]
    fn writer_folds_at_76_and_round_trips_through_the_reader() {
        let mut out = Vec::new();
        write_value_line(&mut out, "description", "x".repeat(200).as_bytes())
            .and_then(|()| write_value_line(&mut out, "cn", "y".repeat(72).as_bytes()))
            .unwrap_or_else(|err| panic!("{err}"));
        let text = String::from_utf8_lossy(&out).into_owned();
        let widths: Vec<usize> = text.lines().map(str::len).collect();
        assert_eq!(widths, [76, 76, 63, 76], "{text}");
        assert!(text.lines().nth(1).is_some_and(|line| line.starts_with(" x")));

        let binary: Vec<u8> = (0..=255).collect();
        let entries = vec![
            (
                "cn=Lučić \\+ Co,dc=example,dc=com".to_owned(),
                vec![
                    attr("objectClass", &["top", "person"]),
                    attr("cn", &["Lučić + Co", " spaced ", ""]),
                    attr("description", &[&"long value ".repeat(30), "line\r\nbreak"]),
                    Attribute::new("jpegPhoto", vec![binary]),
                    attr("cn;lang-en", &[":<#"]),
                ],
            ),
            (" leading space,dc=x".to_owned(), vec![attr("sn", &["x"])]),
            (format!("cn={},dc=x", "n".repeat(120)), vec![attr("sn", &["y"])]),
            ("cn=big".to_owned(), vec![attr("description", &[&"z".repeat(1 << 20)])]),
        ];
        let mut out = Vec::new();
        for (dn, attrs) in &entries {
            write_entry(&mut out, dn, attrs).unwrap_or_else(|err| panic!("{err}"));
        }
        let text = String::from_utf8(out).unwrap_or_else(|err| panic!("{err}"));
        assert!(text.lines().all(|line| line.len() <= LINE_WIDTH_MAX && line.is_ascii()));
        let recs = records(&text);
        let read: Vec<(&str, &[Attribute])> = recs.iter().map(content).collect();
        let written: Vec<(&str, &[Attribute])> = entries.iter().map(|(dn, a)| (&dn[..], &a[..])).collect();
        assert_eq!(read, written);
        // A long unfolded line is read as it is.
        let unfolded = format!("dn: cn=big\ndescription: {}\n", "z".repeat(1 << 20));
        assert_eq!(records(&unfolded), records(&text)[3..]);
    }
}
