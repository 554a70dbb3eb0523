//! What "the same answer" means: result code, normalised matchedDN, and for searches the
//! returned entries as a set of (normalised DN, lowercased attribute name → set of values).
//! Diagnostic messages are ignored; so are the values (not the presence) of operational
//! attributes that legitimately differ between two loads of the same data, and the root
//! DSE's vendor and feature lists.

use std::collections::{BTreeMap, BTreeSet};

use crate::client::{Entry, LdapResult, Reply, Request};

/// Operational attributes whose values depend on when and where the data was loaded
/// (RFC 4530 entryUUID, RFC 4512 §3.4 timestamps, OpenLDAP's CSNs): presence only.
const VOLATILE: &[&str] = &["entryuuid", "entrycsn", "createtimestamp", "modifytimestamp", "contextcsn"];

/// Root DSE attributes that describe the implementation, not the data (RFC 4512 §5.1,
/// RFC 3045 vendor*, OpenLDAP's configContext/monitorContext).
const ROOT_DSE_IGNORED: &[&str] = &[
    "supportedcontrol",
    "supportedextension",
    "supportedfeatures",
    "supportedsaslmechanisms",
    "vendorname",
    "vendorversion",
    "configcontext",
    "monitorcontext",
    "altserver",
];

/// RFC 4511 §4.5.1.4: when the size limit is hit, which entries came back is up to the server.
const SIZE_LIMIT_EXCEEDED: i64 = 4;

type Attrs = BTreeMap<String, BTreeSet<Vec<u8>>>;

/// OpenLDAP's cn=config schema: slapd's configuration backend, published in its subschema
/// entry next to the directory schema. Not part of the data's schema, so left out.
const CONFIG_SCHEMA_OID: &str = "1.3.6.1.4.1.4203.1.12.2.";

/// A value of cn=Subschema with OpenLDAP's configuration schema taken out: `None` for an
/// olc* attribute type or object class, olc* names removed from a matchingRuleUse.
fn without_config_schema(attr: &str, value: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(value);
    if text.trim_start_matches(['(', ' ']).starts_with(CONFIG_SCHEMA_OID) {
        return None;
    }
    if attr != "matchingruleuse" {
        return Some(value.to_vec());
    }
    let Some((head, applies)) = text.split_once(" APPLIES ") else { return Some(value.to_vec()) };
    let list = applies.trim_end().trim_end_matches(')').trim().trim_start_matches('(').trim_end_matches(')');
    let names: Vec<&str> =
        list.split('$').map(str::trim).filter(|n| !n.is_empty() && !n.starts_with("olc")).collect();
    match names.len() {
        0 => None,
        1 => Some(format!("{head} APPLIES {} )", names[0]).into_bytes()),
        _ => Some(format!("{head} APPLIES ( {} ) )", names.join(" $ ")).into_bytes()),
    }
}

/// A reply reduced to what must agree.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// `None` when no LDAP result came back.
    pub code: Option<i64>,
    pub failure: Option<String>,
    pub matched: String,
    pub entry_count: usize,
    /// `None` unless a search whose entry set is determined (not sizeLimitExceeded).
    pub entries: Option<BTreeMap<String, Attrs>>,
    pub references: usize,
    pub extended_value: Option<String>,
}

/// RFC 4514 DN, normalised for comparison: lower case, no spaces around `,` `+` `=`, and
/// a special character escaped the one way (`\,`, not `\2C`: RFC 4514 §2.4 allows both, and
/// slapd returns a DN as the client spelled it where ferrodir writes the short form).
pub fn normalize_dn(dn: &str) -> String {
    let dn = unify_escapes(dn);
    crate::ldif::split_unescaped(&dn, ',')
        .iter()
        .map(|rdn| {
            crate::ldif::split_unescaped(rdn, '+')
                .iter()
                .map(|ava| match ava.split_once('=') {
                    Some((t, v)) => format!("{}={}", t.trim(), v.trim()),
                    None => ava.trim().to_string(),
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect::<Vec<_>>()
        .join(",")
        .to_lowercase()
}

/// `\2C` and the other hex escapes of RFC 4514's special characters as `\,` and so on.
fn unify_escapes(dn: &str) -> String {
    let mut out = String::with_capacity(dn.len());
    let mut rest = dn;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let hex = after.get(..2).and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) if b",+\"\\<>;=#".contains(&byte) => {
                out.push('\\');
                out.push(char::from(byte));
                rest = &after[2..];
            }
            _ => {
                let next = after.chars().next().map_or(0, char::len_utf8);
                out.push_str(&rest[at..at + 1 + next]);
                rest = &after[next..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn entry_attrs(entry: &Entry) -> Attrs {
    let root_dse = entry.dn.is_empty();
    let subschema = normalize_dn(&entry.dn) == "cn=subschema";
    let mut attrs = Attrs::new();
    for (name, values) in &entry.attrs {
        let name = name.to_ascii_lowercase();
        let base = name.split(';').next().unwrap_or("").to_string();
        if root_dse && ROOT_DSE_IGNORED.contains(&base.as_str()) {
            continue;
        }
        let set = attrs.entry(name.clone()).or_default();
        if VOLATILE.contains(&base.as_str()) {
            set.insert(b"<present>".to_vec());
        } else if subschema {
            set.extend(values.iter().filter_map(|v| without_config_schema(&name, v)));
        } else {
            set.extend(values.iter().cloned());
        }
    }
    attrs
}

fn from_result(result: &LdapResult) -> Answer {
    Answer {
        code: Some(result.code),
        failure: None,
        matched: normalize_dn(&result.matched),
        entry_count: 0,
        entries: None,
        references: result.referrals.len(),
        extended_value: None,
    }
}

pub fn answer(reply: &Reply) -> Answer {
    match reply {
        Reply::Result(result) => from_result(result),
        Reply::Search { entries, references, done } => {
            let mut answer = from_result(done);
            answer.entry_count = entries.len();
            answer.references += references.len();
            if done.code != SIZE_LIMIT_EXCEEDED {
                answer.entries =
                    Some(entries.iter().map(|e| (normalize_dn(&e.dn), entry_attrs(e))).collect());
            }
            answer
        }
        Reply::Extended { result, value } => {
            let mut answer = from_result(result);
            answer.extended_value = value.as_ref().map(|v| {
                let text = String::from_utf8_lossy(v).into_owned();
                match text.strip_prefix("dn:") {
                    Some(dn) => format!("dn:{}", normalize_dn(dn)),
                    None => text,
                }
            });
            answer
        }
        Reply::Failed(why) => Answer {
            code: None,
            failure: Some(why.clone()),
            matched: String::new(),
            entry_count: 0,
            entries: None,
            references: 0,
            extended_value: None,
        },
    }
}

/// The short form of an answer that the report and the allowlist use.
pub fn summary(answer: &Answer, request: &Request) -> String {
    let mut text = match (answer.code, &answer.failure) {
        (Some(code), _) => format!("rc={code}"),
        (None, Some(why)) => format!("no answer ({why})"),
        (None, None) => "no answer".into(),
    };
    if !answer.matched.is_empty() {
        text.push_str(&format!(" matched={}", answer.matched));
    }
    if matches!(request, Request::Search(_)) {
        text.push_str(&format!(" n={}", answer.entry_count));
    }
    if answer.references > 0 {
        text.push_str(&format!(" refs={}", answer.references));
    }
    if let Some(value) = &answer.extended_value {
        text.push_str(&format!(" value={value}"));
    }
    text
}

fn show_values<'a>(values: impl Iterator<Item = &'a Vec<u8>>) -> String {
    let values: Vec<&Vec<u8>> = values.collect();
    let shown: Vec<String> = values.iter().take(3).map(|v| clip(&String::from_utf8_lossy(v), 40)).collect();
    let more = if values.len() > 3 { format!("|+{}", values.len() - 3) } else { String::new() };
    format!("{{{}{more}}}", shown.join("|"))
}

/// One attribute's difference: present on one side only, or the values each side lacks.
fn attribute_detail(
    name: &str,
    slapd: Option<&BTreeSet<Vec<u8>>>,
    ferrodir: Option<&BTreeSet<Vec<u8>>>,
) -> String {
    match (slapd, ferrodir) {
        (Some(a), None) => format!("{name} {} vs -", show_values(a.iter())),
        (None, Some(b)) => format!("{name} - vs {}", show_values(b.iter())),
        (Some(a), Some(b)) => {
            let only_a = show_values(a.difference(b));
            let only_b = show_values(b.difference(a));
            format!("{name} slapd-only {only_a} ferrodir-only {only_b}")
        }
        (None, None) => String::new(),
    }
}

pub fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    format!("{}…", text.chars().take(max).collect::<String>())
}

/// How two entry sets differ, briefly: DNs only one side returned, then per shared entry
/// the attributes whose values differ (slapd's values, then ferrodir's).
fn entries_detail(slapd: &BTreeMap<String, Attrs>, ferrodir: &BTreeMap<String, Attrs>) -> String {
    let mut parts = Vec::new();
    let only = |a: &BTreeMap<String, Attrs>, b: &BTreeMap<String, Attrs>| -> Vec<String> {
        let name = |dn: &String| if dn.is_empty() { "(root DSE)".to_string() } else { clip(dn, 60) };
        a.keys().filter(|k| !b.contains_key(*k)).map(name).collect()
    };
    let only_slapd = only(slapd, ferrodir);
    let only_ferrodir = only(ferrodir, slapd);
    if !only_slapd.is_empty() {
        parts.push(format!("only slapd: {}", list_some(&only_slapd, 3)));
    }
    if !only_ferrodir.is_empty() {
        parts.push(format!("only ferrodir: {}", list_some(&only_ferrodir, 3)));
    }
    let mut differing = 0;
    for (dn, attrs) in slapd {
        let Some(other) = ferrodir.get(dn) else { continue };
        if attrs == other {
            continue;
        }
        differing += 1;
        if differing > 2 {
            continue;
        }
        let names: BTreeSet<&String> = attrs.keys().chain(other.keys()).collect();
        let diffs: Vec<String> = names
            .into_iter()
            .filter(|n| attrs.get(*n) != other.get(*n))
            .take(6)
            .map(|n| attribute_detail(n, attrs.get(n), other.get(n)))
            .collect();
        let name = if dn.is_empty() { "(root DSE)".to_string() } else { clip(dn, 50) };
        parts.push(format!("{name}: {}", diffs.join(", ")));
    }
    if differing > 2 {
        parts.push(format!("+{} more entries differ", differing - 2));
    }
    parts.join("; ")
}

fn list_some(items: &[String], max: usize) -> String {
    let mut text = items.iter().take(max).cloned().collect::<Vec<_>>().join(" / ");
    if items.len() > max {
        text.push_str(&format!(" (+{})", items.len() - max));
    }
    text
}

/// `None` when the answers agree; otherwise a one-line account of the difference.
pub fn difference(slapd: &Answer, ferrodir: &Answer) -> Option<String> {
    if slapd == ferrodir {
        return None;
    }
    let mut kinds = Vec::new();
    if slapd.code != ferrodir.code {
        kinds.push("result code".to_string());
    }
    if slapd.matched != ferrodir.matched {
        kinds.push("matchedDN".to_string());
    }
    if slapd.entry_count != ferrodir.entry_count && slapd.entries.is_none() {
        kinds.push("entry count".to_string());
    }
    if let (Some(a), Some(b)) = (&slapd.entries, &ferrodir.entries) {
        if a != b {
            kinds.push(entries_detail(a, b));
        }
    }
    if slapd.extended_value != ferrodir.extended_value {
        kinds.push("extended response value".to_string());
    }
    if slapd.references != ferrodir.references {
        kinds.push("referrals".to_string());
    }
    Some(kinds.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dn_normalisation() {
        assert_eq!(normalize_dn("CN=Manager , DC=Example,dc=COM"), "cn=manager,dc=example,dc=com");
        assert_eq!(normalize_dn("cn=a\\, b + sn = c,dc=x"), "cn=a\\, b+sn=c,dc=x");
        assert_eq!(normalize_dn(""), "");
    }

    #[test]
    fn config_schema_is_left_out() {
        let rule = |applies: &str| format!("( 2.5.13.1 NAME 'distinguishedNameMatch' APPLIES {applies} )");
        let slapd = rule("( creatorsName $ olcRootDN $ member )");
        let expected = rule("( creatorsName $ member )");
        assert_eq!(without_config_schema("matchingruleuse", slapd.as_bytes()), Some(expected.into_bytes()));
        assert_eq!(without_config_schema("matchingruleuse", rule("( olcSuffix $ seeAlso )").as_bytes()), {
            Some(rule("seeAlso").into_bytes())
        });
        assert_eq!(without_config_schema("matchingruleuse", rule("olcSuffix").as_bytes()), None);
        let olc = b"( 1.3.6.1.4.1.4203.1.12.2.3.0.1 NAME 'olcConfigFile' )";
        assert_eq!(without_config_schema("attributetypes", olc), None);
    }

    #[test]
    fn volatile_values_compare_by_presence() {
        let entry = |uuid: &str| Entry {
            dn: "cn=a,dc=x".into(),
            attrs: vec![
                ("entryUUID".into(), vec![uuid.as_bytes().to_vec()]),
                ("CN".into(), vec![b"a".to_vec()]),
            ],
        };
        let done = LdapResult::default();
        let one = Reply::Search { entries: vec![entry("1")], references: vec![], done: done.clone() };
        let two = Reply::Search { entries: vec![entry("2")], references: vec![], done };
        assert_eq!(difference(&answer(&one), &answer(&two)), None);
    }
}
