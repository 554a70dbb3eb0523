//! Value syntaxes (RFC 4517 §3.3): which values an attribute of a given syntax accepts.
//!
//! Where slapd 2.5 has a validator we accept what it accepts, since it is the reference. Where
//! slapd has none it refuses every value of the syntax ("no validator for syntax"); there we
//! check the RFC 4517 grammar instead (Guide, Enhanced Guide, Teletex Terminal Identifier,
//! Substring Assertion) or, for the syntaxes RFC 4517 dropped (Data Quality, DSA Quality,
//! Protocol Information, Presentation Address), accept anything.
//!
//! The parsers of value formats that matching rules need too (INTEGER, GeneralizedTime,
//! OID, Bit String, UUID, CSN, Name and Optional UID) live here, and
//! [`super::matching`] builds on them.

use crate::dn::{Dn, Rdn};

/// One syntax we know: its OID, its description as slapd publishes it, how to check a value,
/// and whether RFC 4522 requires its values to be transferred with `;binary`.
struct Syntax {
    oid: &'static str,
    desc: &'static str,
    check: fn(&[u8]) -> bool,
    binary: bool,
}

const fn syntax(oid: &'static str, desc: &'static str, check: fn(&[u8]) -> bool) -> Syntax {
    Syntax { oid, desc, check, binary: false }
}

/// A syntax whose values are DER and must travel with `;binary` (RFC 4522). slapd checks
/// the DER structure of certificates and CRLs; we accept any value.
const fn binary(oid: &'static str, desc: &'static str) -> Syntax {
    Syntax { oid, desc, check: any, binary: true }
}

/// First the syntaxes slapd 2.5 publishes, in its order, then those it knows but does not
/// publish (they have no validator there), which its standard schemas still use.
const SYNTAXES: &[Syntax] = &[
    syntax("1.3.6.1.4.1.1466.115.121.1.4", "Audio", any),
    syntax("1.3.6.1.4.1.1466.115.121.1.5", "Binary", any),
    syntax("1.3.6.1.4.1.1466.115.121.1.6", "Bit String", |v| text(v).is_some_and(is_bit_string)),
    syntax("1.3.6.1.4.1.1466.115.121.1.7", "Boolean", |v| matches!(v, b"TRUE" | b"FALSE")),
    binary("1.3.6.1.4.1.1466.115.121.1.8", "Certificate"),
    binary("1.3.6.1.4.1.1466.115.121.1.9", "Certificate List"),
    binary("1.3.6.1.4.1.1466.115.121.1.10", "Certificate Pair"),
    binary("1.3.6.1.4.1.4203.666.11.10.2.1", "X.509 AttributeCertificate"),
    syntax("1.3.6.1.4.1.1466.115.121.1.12", "Distinguished Name", |v| {
        text(v).is_some_and(|t| Dn::parse(t).is_ok())
    }),
    syntax("1.2.36.79672281.1.5.0", "RDN", |v| text(v).is_some_and(|t| Rdn::parse(t).is_ok())),
    syntax("1.3.6.1.4.1.1466.115.121.1.14", "Delivery Method", delivery_method),
    syntax("1.3.6.1.4.1.1466.115.121.1.15", "Directory String", |v| !v.is_empty() && text(v).is_some()),
    syntax("1.3.6.1.4.1.1466.115.121.1.22", "Facsimile Telephone Number", printables),
    syntax("1.3.6.1.4.1.1466.115.121.1.24", "Generalized Time", |v| {
        text(v).and_then(generalized_time).is_some()
    }),
    syntax("1.3.6.1.4.1.1466.115.121.1.26", "IA5 String", <[u8]>::is_ascii),
    syntax("1.3.6.1.4.1.1466.115.121.1.27", "Integer", |v| text(v).and_then(integer).is_some()),
    syntax("1.3.6.1.4.1.1466.115.121.1.28", "JPEG", any),
    syntax("1.3.6.1.4.1.1466.115.121.1.34", "Name And Optional UID", name_and_optional_uid),
    syntax("1.3.6.1.4.1.1466.115.121.1.36", "Numeric String", numeric_string),
    syntax("1.3.6.1.4.1.1466.115.121.1.38", "OID", |v| text(v).is_some_and(is_oid)),
    // RFC 4517 §3.3.27 wants `type$mailbox`; slapd accepts any IA5 string.
    syntax("1.3.6.1.4.1.1466.115.121.1.39", "Other Mailbox", <[u8]>::is_ascii),
    syntax("1.3.6.1.4.1.1466.115.121.1.40", "Octet String", any),
    syntax("1.3.6.1.4.1.1466.115.121.1.41", "Postal Address", postal_address),
    syntax("1.3.6.1.4.1.1466.115.121.1.44", "Printable String", printable),
    syntax("1.3.6.1.4.1.1466.115.121.1.11", "Country String", |v| v.len() == 2 && printable(v)),
    syntax("1.3.6.1.4.1.1466.115.121.1.45", "SubtreeSpecification", |v| text(v).is_some()),
    binary("1.3.6.1.4.1.1466.115.121.1.49", "Supported Algorithm"),
    // RFC 4517 §3.3.31 suggests E.123 form but requires only a Printable String, as slapd.
    syntax("1.3.6.1.4.1.1466.115.121.1.50", "Telephone Number", printable),
    syntax("1.3.6.1.4.1.1466.115.121.1.52", "Telex Number", printables),
    syntax("1.3.6.1.1.1.0.0", "RFC2307 NIS Netgroup Triple", nis_netgroup_triple),
    syntax("1.3.6.1.1.1.0.1", "RFC2307 Boot Parameter", boot_parameter),
    syntax("1.3.6.1.1.16.1", "UUID", |v| text(v).is_some_and(is_uuid)),
    // slapd flags PKCS#8 keys binary without saying so in the published description.
    binary("1.2.840.113549.1.8.1.1", "PKCS#8 PrivateKeyInfo"),
    syntax("1.3.6.1.4.1.1466.115.121.1.3", "Attribute Type Description", non_empty),
    syntax("1.3.6.1.4.1.1466.115.121.1.13", "Data Quality", any),
    syntax("1.3.6.1.4.1.1466.115.121.1.16", "DIT Content Rule Description", non_empty),
    syntax("1.3.6.1.4.1.1466.115.121.1.17", "DIT Structure Rule Description", non_empty),
    syntax("1.3.6.1.4.1.1466.115.121.1.19", "DSA Quality", any),
    syntax("1.3.6.1.4.1.1466.115.121.1.21", "Enhanced Guide", enhanced_guide),
    syntax("1.3.6.1.4.1.1466.115.121.1.23", "Fax", any),
    syntax("1.3.6.1.4.1.1466.115.121.1.25", "Guide", guide),
    syntax("1.3.6.1.4.1.1466.115.121.1.30", "Matching Rule Description", non_empty),
    syntax("1.3.6.1.4.1.1466.115.121.1.31", "Matching Rule Use Description", non_empty),
    syntax("1.3.6.1.4.1.1466.115.121.1.35", "Name Form Description", non_empty),
    syntax("1.3.6.1.4.1.1466.115.121.1.37", "Object Class Description", non_empty),
    syntax("1.3.6.1.4.1.1466.115.121.1.42", "Protocol Information", any),
    syntax("1.3.6.1.4.1.1466.115.121.1.43", "Presentation Address", any),
    syntax("1.3.6.1.4.1.1466.115.121.1.51", "Teletex Terminal Identifier", teletex_terminal_identifier),
    syntax("1.3.6.1.4.1.1466.115.121.1.54", "LDAP Syntax Description", non_empty),
    syntax("1.3.6.1.4.1.1466.115.121.1.58", "Substring Assertion", substring_assertion),
    // The `{ serialNumber .., issuer .. }` assertion of certificateExactMatch; not parsed yet.
    syntax("1.3.6.1.1.15.1", "Certificate Exact Assertion", non_empty),
    syntax("1.3.6.1.4.1.4203.666.11.2.1", "CSN", |v| text(v).is_some_and(is_csn)),
    syntax("1.3.6.1.4.1.4203.666.11.2.4", "CSN SID", |v| v.len() == 3 && v.iter().all(u8::is_ascii_hexdigit)),
];

// Const evaluation: an index out of range fails the build, so nothing here panics at run time.
#[allow(clippy::indexing_slicing)]
static DESCRIPTIONS: [(&str, &str); SYNTAXES.len()] = {
    let mut out = [("", ""); SYNTAXES.len()];
    let mut index = 0;
    while index < SYNTAXES.len() {
        out[index] = (SYNTAXES[index].oid, SYNTAXES[index].desc);
        index += 1;
    }
    out
};

/// Whether `value` is valid under the syntax `syntax_oid` (RFC 4517 §3.3). A `{len}` bound
/// after the OID is ignored, as slapd ignores it; unknown syntaxes accept every value.
pub fn validate(syntax_oid: &str, value: &[u8]) -> bool {
    match find(syntax_oid) {
        Some(syntax) => (syntax.check)(value),
        None => true,
    }
}

/// Every syntax we know as (OID, description), for cn=Subschema ldapSyntaxes. This includes
/// the syntaxes slapd leaves out there, so that every syntax an attribute type names is
/// published.
pub fn all() -> &'static [(&'static str, &'static str)] {
    &DESCRIPTIONS
}

/// Whether values of this syntax must be transferred with `;binary` (RFC 4522 §2):
/// certificates, certificate lists and pairs, supported algorithms and, as in slapd,
/// attribute certificates and PKCS#8 keys.
pub fn is_binary(syntax_oid: &str) -> bool {
    find(syntax_oid).is_some_and(|syntax| syntax.binary)
}

fn find(syntax_oid: &str) -> Option<&'static Syntax> {
    let oid = syntax_oid.split('{').next().unwrap_or_default().trim();
    SYNTAXES.iter().find(|syntax| syntax.oid == oid)
}

fn text(value: &[u8]) -> Option<&str> {
    std::str::from_utf8(value).ok()
}

fn any(_: &[u8]) -> bool {
    true
}

fn non_empty(value: &[u8]) -> bool {
    !value.is_empty()
}

/// RFC 4517 §3.3.25 PrintableCharacter (slapd's SLAP_PRINTABLE).
pub(crate) fn is_printable(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"'()+,-./:=? ".contains(&byte)
}

/// RFC 4517 §3.3.29 Printable String: one or more PrintableCharacters.
fn printable(value: &[u8]) -> bool {
    !value.is_empty() && value.iter().all(|&b| is_printable(b))
}

/// Printable Strings joined by `$`, which is how slapd checks Facsimile Telephone Number and
/// Telex Number (RFC 4517 §3.3.11, §3.3.33 also restrict the parts after the first).
fn printables(value: &[u8]) -> bool {
    value.split(|&b| b == b'$').all(printable)
}

/// RFC 4517 §3.3.23: digits and spaces, at least one character.
fn numeric_string(value: &[u8]) -> bool {
    !value.is_empty() && value.iter().all(|&b| b.is_ascii_digit() || b == b' ')
}

/// For the DN-valued syntaxes (Distinguished Name, RDN, Name And Optional UID): whether each
/// RDN of `value` names its types once by `avas`' canonical names, so `cn=a+commonName=b` is
/// refused as slapd refuses it ([`validate`], which has no schema, compares the types as
/// spelled). True for every other syntax, and for a value that is not text (`validate` has
/// its say on that).
pub fn names_types_once(syntax_oid: &str, value: &[u8], avas: &dyn crate::value::AvaNormalizer) -> bool {
    let Some(text) = text(value) else { return true };
    match syntax_oid {
        "1.3.6.1.4.1.1466.115.121.1.12" => Dn::parse_with(text, avas).is_ok(),
        "1.2.36.79672281.1.5.0" => Rdn::parse_with(text, avas).is_ok(),
        "1.3.6.1.4.1.1466.115.121.1.34" => Dn::parse_with(split_uid(text).0, avas).is_ok(),
        _ => true,
    }
}

/// RFC 4517 §3.3.21; slapd also accepts the empty value.
fn name_and_optional_uid(value: &[u8]) -> bool {
    text(value).is_some_and(|t| Dn::parse(split_uid(t).0).is_ok())
}

/// Whether every `\` in `part` starts one of the two-hex-digit `escapes` (either case).
fn escapes_only(part: &[u8], escapes: &[&str]) -> bool {
    part.split(|&b| b == b'\\').skip(1).all(|after| {
        after.get(..2).is_some_and(|code| escapes.iter().any(|e| code.eq_ignore_ascii_case(e.as_bytes())))
    })
}

/// RFC 4517 §3.3.28, as slapd checks it: UTF-8 lines joined by `$`, where `\` may only
/// start `\24` (`$`) or `\5C` (`\`). Like slapd we allow empty lines.
fn postal_address(value: &[u8]) -> bool {
    text(value).is_some() && escapes_only(value, &["24", "5c"])
}

/// RFC 4517 §3.3.5: `pdm *( WSP "$" WSP pdm )`, method names in any case.
fn delivery_method(value: &[u8]) -> bool {
    const METHODS: [&str; 10] =
        ["any", "mhs", "physical", "telex", "teletex", "g3fax", "g4fax", "ia5", "videotex", "telephone"];
    let Some(text) = text(value) else { return false };
    let is_method = |m: &str| METHODS.iter().any(|method| method.eq_ignore_ascii_case(m.trim_matches(' ')));
    !text.starts_with(' ') && !text.ends_with(' ') && text.split('$').all(is_method)
}

/// slapd's AD_CHAR: the characters of an attribute description.
fn is_ad_char(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b';')
}

/// RFC 2307 nisNetgroupTriple `(host,user,domain)`, each part possibly empty, checked like
/// slapd's nisNetgroupTripleValidate.
fn nis_netgroup_triple(value: &[u8]) -> bool {
    let Some(inner) = value.strip_prefix(b"(").and_then(|v| v.strip_suffix(b")")) else { return false };
    inner.split(|&b| b == b',').count() == 3 && inner.iter().all(|&b| b == b',' || is_ad_char(b))
}

/// RFC 2307 bootParameter `key=server:path`, checked like slapd's bootParameterValidate.
fn boot_parameter(value: &[u8]) -> bool {
    let Some((key, rest)) = split_once(value, b'=') else { return false };
    let Some((server, path)) = split_once(rest, b':') else { return false };
    key.iter().chain(server).all(|&b| is_ad_char(b)) && path.iter().all(|&b| is_printable(b))
}

/// RFC 4517 §3.3.30: `[initial] "*" *(any "*") [final]`, with `*` and `\` inside a piece
/// only as `\2A` and `\5C`.
fn substring_assertion(value: &[u8]) -> bool {
    let pieces: Vec<&[u8]> = value.split(|&b| b == b'*').collect();
    let inner_pieces_non_empty =
        pieces.len() >= 2 && pieces.iter().skip(1).take(pieces.len() - 2).all(|p| !p.is_empty());
    inner_pieces_non_empty && pieces.iter().all(|piece| escapes_only(piece, &["2a", "5c"]))
}

/// RFC 4517 §3.3.32: a Printable String, then `$key:value` parameters whose values escape
/// `$` and `\` as `\24` and `\5C`.
fn teletex_terminal_identifier(value: &[u8]) -> bool {
    const KEYS: [&str; 5] = ["graphic", "control", "misc", "page", "private"];
    let mut fields = value.split(|&b| b == b'$');
    let parameter = |field: &[u8]| match split_once(field, b':') {
        Some((name, value)) => {
            KEYS.iter().any(|key| key.as_bytes().eq_ignore_ascii_case(name))
                && escapes_only(value, &["24", "5c"])
        }
        None => false,
    };
    fields.next().is_some_and(printable) && fields.all(parameter)
}

/// RFC 4517 §3.3.14 Guide: `[ object-class "#" ] criteria`.
fn guide(value: &[u8]) -> bool {
    let Some(text) = text(value) else { return false };
    match text.split_once('#') {
        Some((class, criteria)) => is_oid(class.trim_matches(' ')) && is_criteria(criteria),
        None => is_criteria(text),
    }
}

/// RFC 4517 §3.3.10 Enhanced Guide: `object-class "#" WSP criteria WSP "#" WSP subset`.
fn enhanced_guide(value: &[u8]) -> bool {
    let Some(text) = text(value) else { return false };
    let parts: Vec<&str> = text.split('#').collect();
    let [class, criteria, subset] = parts.as_slice() else { return false };
    let subset = subset.trim_start_matches(' ');
    is_oid(class.trim_matches(' '))
        && is_criteria(criteria.trim_matches(' '))
        && ["baseobject", "oneLevel", "wholeSubtree"].iter().any(|s| s.eq_ignore_ascii_case(subset))
}

/// The deepest nesting of `(` and `!` accepted in Guide criteria: a bound on recursion.
const CRITERIA_DEPTH_MAX: usize = 32;

/// RFC 4517 §3.3.10 criteria. `|` and `&` both join terms, so for validation they need no
/// precedence.
fn is_criteria(text: &str) -> bool {
    let mut rest = text.as_bytes();
    criteria(&mut rest, 0) && rest.is_empty()
}

fn criteria(rest: &mut &[u8], depth: usize) -> bool {
    loop {
        if !term(rest, depth) {
            return false;
        }
        match rest.split_first() {
            Some((b'|' | b'&', after)) => *rest = after,
            _ => return true,
        }
    }
}

/// `"!" term / attributetype "$" match-type / "(" criteria ")" / "?true" / "?false"`.
fn term(rest: &mut &[u8], depth: usize) -> bool {
    if depth > CRITERIA_DEPTH_MAX {
        return false;
    }
    match rest.split_first() {
        Some((b'!', after)) => {
            *rest = after;
            term(rest, depth + 1)
        }
        Some((b'(', after)) => {
            *rest = after;
            if !criteria(rest, depth + 1) {
                return false;
            }
            eat_keyword(rest, &[")"])
        }
        Some((b'?', _)) => eat_keyword(rest, &["?true", "?false"]),
        _ => {
            let Some((attribute, after)) = split_once(rest, b'$') else { return false };
            let attribute_ok = std::str::from_utf8(attribute).is_ok_and(is_oid);
            *rest = after;
            attribute_ok && eat_keyword(rest, &["EQ", "SUBSTR", "GE", "LE", "APPROX"])
        }
    }
}

/// The bytes before and after the first `separator`, which neither half holds.
fn split_once(bytes: &[u8], separator: u8) -> Option<(&[u8], &[u8])> {
    let mut halves = bytes.splitn(2, |&b| b == separator);
    Some((halves.next()?, halves.next()?))
}

/// Consumes the first of `keywords` that `rest` starts with, ignoring case (RFC 5234 quoted
/// strings are case-insensitive).
fn eat_keyword(rest: &mut &[u8], keywords: &[&str]) -> bool {
    for keyword in keywords {
        if let Some(head) = rest.get(..keyword.len()) {
            if head.eq_ignore_ascii_case(keyword.as_bytes()) {
                *rest = rest.get(keyword.len()..).unwrap_or_default();
                return true;
            }
        }
    }
    false
}

/// RFC 4517 §3.3.16 INTEGER: `"0"` or an optional `-` and digits without leading zeros. Like
/// slapd we accept no `+`, no leading zeros and no `-0`, so every integer has exactly one
/// valid spelling, which is therefore canonical.
pub(crate) fn integer(text: &str) -> Option<&str> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let canonical = text == "0" || !digits.starts_with('0');
    (canonical && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(text)
}

/// RFC 4517 §3.3.2 Bit String: `'0101'B`.
pub(crate) fn is_bit_string(text: &str) -> bool {
    let bits = text.strip_prefix('\'').and_then(|t| t.strip_suffix("'B"));
    bits.is_some_and(|bits| bits.bytes().all(|b| b == b'0' || b == b'1'))
}

/// RFC 4512 §1.4 oid: a descriptor or a numericoid.
pub(crate) fn is_oid(text: &str) -> bool {
    let mut bytes = text.bytes();
    let descr = bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'-');
    descr || is_numericoid(text)
}

/// RFC 4512 §1.4 numericoid: `number 1*( "." number )`, numbers without leading zeros.
pub(crate) fn is_numericoid(text: &str) -> bool {
    let arc_ok = |arc: &str| {
        !arc.is_empty() && arc.bytes().all(|b| b.is_ascii_digit()) && (arc == "0" || !arc.starts_with('0'))
    };
    text.contains('.') && text.split('.').all(arc_ok)
}

/// RFC 4530 §2.1: the RFC 4122 string form, hex digits in either case.
pub(crate) fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.bytes().enumerate().all(|(at, b)| match at {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// An OpenLDAP CSN, `time#count#sid#mod`: a GeneralizedTime of 15 or 22 characters and hex
/// fields of 6, 3 (or the pre-2.4 2) and 6 digits, as slapd's csnValidate checks.
pub(crate) fn is_csn(text: &str) -> bool {
    let fields: Vec<&str> = text.split('#').collect();
    let [time, count, sid, modifier] = fields.as_slice() else { return false };
    let hex = |field: &str, lengths: &[usize]| {
        lengths.contains(&field.len()) && field.bytes().all(|b| b.is_ascii_hexdigit())
    };
    matches!(time.len(), 15 | 22)
        && generalized_time(time).is_some()
        && hex(count, &[6])
        && hex(sid, &[2, 3])
        && hex(modifier, &[6])
}

/// Splits `dn#'0101'B` into the DN and its UID (RFC 4517 §3.3.21). Like slapd, the part after
/// the last `#` is a UID only when it is a valid Bit String; otherwise it belongs to the DN.
pub(crate) fn split_uid(text: &str) -> (&str, Option<&str>) {
    match text.rsplit_once('#') {
        Some((dn, uid)) if is_bit_string(uid) => (dn, Some(uid)),
        _ => (text, None),
    }
}

/// Parses RFC 4517 §3.3.13 GeneralizedTime, `YYYYMMDDHH[MM[SS]][(.|,)fraction](Z|±HH[MM])`,
/// and returns the same instant in UTC as `YYYYMMDDHHMMSS[.fraction]Z`, without trailing
/// fraction zeros, so that equal instants have equal forms.
///
/// A fraction belongs to the last unit given (RFC 4517: ".5" after the hour is 30 minutes);
/// slapd 2.5 instead always reads it as a fraction of a second. A leap second (60) is kept,
/// as slapd allows it. Fractions of an hour or minute are exact to 30 digits; further digits
/// are ignored. Dates use the proleptic Gregorian calendar; years outside 0000-9999 after
/// the shift to UTC are rejected, as slapd does.
pub(crate) fn generalized_time(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut at = 0;
    let two_digits = |at: &mut usize| -> Option<i64> {
        let &[tens, ones] = bytes.get(*at..*at + 2)? else { return None };
        (tens.is_ascii_digit() && ones.is_ascii_digit()).then(|| {
            *at += 2;
            i64::from(tens - b'0') * 10 + i64::from(ones - b'0')
        })
    };
    let year = two_digits(&mut at)? * 100 + two_digits(&mut at)?;
    let (month, day, hour) = (two_digits(&mut at)?, two_digits(&mut at)?, two_digits(&mut at)?);
    let minute = two_digits(&mut at);
    let second = if minute.is_some() { two_digits(&mut at) } else { None };
    let mut fraction = "";
    if let Some(b'.' | b',') = bytes.get(at) {
        let digits = bytes.iter().skip(at + 1).take_while(|b| b.is_ascii_digit()).count();
        fraction = text.get(at + 1..at + 1 + digits).filter(|f| !f.is_empty())?.trim_end_matches('0');
        at += 1 + digits;
    }
    let offset_minutes = match (bytes.get(at), text.get(at + 1..)) {
        (Some(b'Z'), Some("")) => 0,
        (Some(sign @ (b'+' | b'-')), Some(zone)) if zone.len() == 2 || zone.len() == 4 => {
            let mut zone_at = at + 1;
            let zone_hour = two_digits(&mut zone_at)?;
            let zone_minute = if zone.len() == 4 { two_digits(&mut zone_at)? } else { 0 };
            if zone_hour > 23 || zone_minute > 59 {
                return None;
            }
            (zone_hour * 60 + zone_minute) * if *sign == b'-' { -1 } else { 1 }
        }
        _ => return None,
    };
    let valid = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour <= 23
        && minute.unwrap_or(0) <= 59
        && second.unwrap_or(0) <= 60;
    if !valid {
        return None;
    }
    // Turn a fraction of an hour or minute into whole seconds plus a fraction of a second.
    let (extra_seconds, fraction) = match (minute, second) {
        (_, Some(_)) => (0, fraction.to_owned()),
        (Some(_), None) => scale_fraction(fraction, 60),
        (None, None) => scale_fraction(fraction, 3600),
    };
    // The offset is whole minutes, so seconds and fraction are unaffected by the shift.
    let total_minutes = days_from_civil(year, month, day) * 1440 + hour * 60 + minute.unwrap_or(0)
        - offset_minutes
        + extra_seconds / 60;
    let second = second.unwrap_or(0) + extra_seconds % 60;
    let (year, month, day) = civil_from_days(total_minutes.div_euclid(1440));
    if !(0..=9999).contains(&year) {
        return None;
    }
    let (hour, minute) = (total_minutes.rem_euclid(1440) / 60, total_minutes.rem_euclid(60));
    let mut out = format!("{year:04}{month:02}{day:02}{hour:02}{minute:02}{second:02}");
    if !fraction.is_empty() {
        out.push('.');
        out.push_str(&fraction);
    }
    out.push('Z');
    Some(out)
}

/// `0.digits × factor` as (whole seconds, fraction-of-a-second digits without trailing zeros).
fn scale_fraction(digits: &str, factor: u128) -> (i64, String) {
    let digits = &digits[..digits.len().min(30)];
    let (Ok(numerator), Ok(width)) = (digits.parse::<u128>(), u32::try_from(digits.len())) else {
        return (0, String::new());
    };
    let denominator = 10u128.pow(width);
    let scaled = numerator * factor;
    let whole = i64::try_from(scaled / denominator).unwrap_or(0);
    let rest = format!("{:0width$}", scaled % denominator, width = digits.len());
    (whole, rest.trim_end_matches('0').to_owned())
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`]: (year, month, day) of a count of days since
/// 1970-01-01. Also used to print generalized times (`shard::stamp`).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The values of `attribute` in the cn=Subschema entry slapd 2.5.13 publishes with the
    /// core, cosine, inetorgperson, nis, openldap and test schemas loaded.
    pub(crate) fn slapd_subschema(attribute: &str) -> Vec<String> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/conformance/schema/slapd-2.5.13-subschema.ldif"
        );
        let ldif = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read slapd's subschema fixture {path}: {e}"));
        // Unfold RFC 2849 continuation lines before splitting.
        let unfolded = ldif.replace("\r\n", "\n").replace("\n ", "");
        let prefix = format!("{attribute}: ");
        unfolded.lines().filter_map(|line| line.strip_prefix(&prefix)).map(str::to_owned).collect()
    }

    /// The word after each `keyword` in the definitions.
    pub(crate) fn words_after(definitions: &[String], keyword: &str) -> Vec<String> {
        let mut found = Vec::new();
        for definition in definitions {
            let words: Vec<&str> = definition.split_whitespace().collect();
            for pair in words.windows(2).filter(|pair| pair[0] == keyword) {
                found.push(pair[1].to_owned());
            }
        }
        found
    }

    #[test]
    fn every_syntax_slapd_uses_or_publishes_is_listed() {
        let attribute_types = slapd_subschema("attributeTypes");
        let used = words_after(&attribute_types, "SYNTAX");
        assert!(used.len() > 200, "the fixture should hold slapd's attribute types");
        for oid in used {
            let base = oid.split('{').next().unwrap_or_default();
            assert!(all().iter().any(|(known, _)| *known == base), "syntax {oid} is not in syntax::all()");
        }
        for definition in slapd_subschema("ldapSyntaxes") {
            let oid = definition.split_whitespace().nth(1).unwrap_or_default();
            let desc = definition.split('\'').nth(1).unwrap_or_default();
            assert!(all().contains(&(oid, desc)), "slapd publishes {definition}");
        }
    }

    #[test]
    fn bounds_unknown_and_binary_syntaxes() {
        assert!(validate("1.3.6.1.4.1.1466.115.121.1.15{256}", b"x"));
        assert!(!validate("1.3.6.1.4.1.1466.115.121.1.15{256}", b""));
        assert!(validate("1.2.3.4.5", b"\xff anything"));
        assert!(is_binary("1.3.6.1.4.1.1466.115.121.1.8"));
        assert!(is_binary("1.3.6.1.4.1.1466.115.121.1.9{1024}"));
        assert!(!is_binary("1.3.6.1.4.1.1466.115.121.1.28"), "JPEG is not human-readable, but not ;binary");
        assert!(!is_binary("1.3.6.1.4.1.1466.115.121.1.15"));
        assert!(!is_binary("1.2.3.4.5"));
    }

    #[test]
    fn values_per_syntax() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (".6", &["'0101'B", "''B"], &["0101", "'012'B", "'01'b"]),
            (".7", &["TRUE", "FALSE"], &["true", "", "T"]),
            (".11", &["US", "de"], &["USA", "U", "é"]),
            (".12", &["cn=Babs,dc=example", ""], &["cn", "=x"]),
            (".14", &["any", "telephone $ g3fax", "IA5$Mhs"], &["fax", " any", "any $", "any mhs"]),
            (".15", &["x", "é"], &[""]),
            (".22", &["+1 555 1234$twoDimensional"], &["$", "+1$$x", "a@b"]),
            (".24", &["20240101120000Z", "2024010112+0100"], &["20240101120000", "2024"]),
            (".26", &["", "a@b"], &["é"]),
            (".27", &["0", "-1", "123456789012345678901234567890"], &["01", "+1", "-0", "1.5", "", "-"]),
            (".34", &["cn=a,o=x#'01'B", "cn=a,o=x", ""], &["cn#'01'B"]),
            (".36", &["1 2 3"], &["", "12a"]),
            (".38", &["2.5.4.3", "cn", "x-foo"], &["2", "01.2", "1cn", "cn_x", ""]),
            (".41", &["1 Main St$Town", "a\\24b$c\\5cd$$", ""], &["a\\b", "a\\2"]),
            (".44", &["Hello (World) +1 = 2?"], &["", "a@b", "a_b"]),
            (".50", &["+1 555-1234"], &["", "555_1234"]),
            (".52", &["1234$US$ans"], &["1234$$x"]),
            (".58", &["a*", "*b", "a*b*c", "*", "a\\2Ab*"], &["abc", "a**b", "a\\x*", ""]),
            (
                ".21",
                &["person#(sn$EQ)#oneLevel", "person # sn$EQ|!cn$substr # wholeSubtree"],
                &["person#(sn$EQ)#everywhere", "person#(sn$EQ#baseobject", "#sn$EQ#baseobject"],
            ),
            (
                ".25",
                &["person#(sn$EQ&cn$APPROX)", "?true", "sn$GE|?false"],
                &["person#", "sn", "(sn$EQ", "sn$XX"],
            ),
            (".51", &["1234$graphic:a\\24b", "1234"], &["1234$color:x", "$graphic:x", "1234$page:\\"]),
            ("1.3.6.1.1.1.0.0", &["(host,user,domain)", "(,,)"], &["(a,b)", "host,user,domain", "(a b,c,d)"]),
            ("1.3.6.1.1.1.0.1", &["root=server:/export/root"], &["root", "root=server", "r@=s:p"]),
            (
                "1.3.6.1.1.16.1",
                &["597ae2f6-16a6-1027-98f4-abcdefabcdef", "597AE2F6-16A6-1027-98F4-ABCDEFABCDEF"],
                &["597ae2f616a6102798f4abcdefabcdef", "597ae2f6-16a6-1027-98f4-abcdefabcdeg"],
            ),
            (
                "1.3.6.1.4.1.4203.666.11.2.1",
                &["20240101120000.123456Z#000001#00a#000000", "20240101120000Z#000001#01#000000"],
                &["20240101120000.123456Z#1#2#3", "20240101120000.123456Z#000001#00a"],
            ),
            ("1.3.6.1.4.1.4203.666.11.2.4", &["00a"], &["0a", "xyz"]),
            ("1.2.36.79672281.1.5.0", &["cn=a+sn=b"], &["cn=a,dc=b"]),
            (".3", &["( 2.5.4.3 NAME 'cn' )"], &[""]),
        ];
        for (oid, valid, invalid) in cases {
            let oid = if oid.starts_with('.') {
                format!("1.3.6.1.4.1.1466.115.121.1{oid}")
            } else {
                oid.to_string()
            };
            for value in *valid {
                assert!(validate(&oid, value.as_bytes()), "{oid} should accept {value:?}");
            }
            for value in *invalid {
                assert!(!validate(&oid, value.as_bytes()), "{oid} should reject {value:?}");
            }
        }
        assert!(!validate("1.3.6.1.4.1.1466.115.121.1.15", b"\xff"), "Directory Strings are UTF-8");
        let deep = format!("{}sn$EQ{}", "(".repeat(40), ")".repeat(40));
        assert!(!validate("1.3.6.1.4.1.1466.115.121.1.25", deep.as_bytes()), "nesting is bounded");
    }

    #[test]
    fn generalized_time_normalises_to_utc() {
        let cases = [
            ("199412161032Z", "19941216103200Z"),
            ("199412160532-0500", "19941216103200Z"),
            ("20240101000000+01", "20231231230000Z"),
            ("20240229235959.500-0100", "20240301005959.5Z"),
            ("20240301005959,5Z", "20240301005959.5Z"),
            ("20240101000000.000Z", "20240101000000Z"),
            ("2024010112.5Z", "20240101123000Z"),
            ("202401011201.25Z", "20240101120115Z"),
            ("2024010112.0001Z", "20240101120000.36Z"),
            ("20170101005960+0100", "20161231235960Z"),
            ("20000229120000Z", "20000229120000Z"),
        ];
        for (input, utc) in cases {
            assert_eq!(generalized_time(input).as_deref(), Some(utc), "{input}");
        }
        for invalid in [
            "20240230000000Z",
            "20230229000000Z",
            "21000229000000Z",
            "20241301000000Z",
            "2024010124Z",
            "20240101000061Z",
            "20240101000000",
            "2024010100Z ",
            "202401010Z",
            "20240101000000.Z",
            "20240101000000+2400",
            "20240101000000+013",
            "00000101000000+0100",
            "99991231230000-0100",
            "２０２４0101000000Z",
            "",
        ] {
            assert_eq!(generalized_time(invalid), None, "{invalid:?}");
        }
    }
}
