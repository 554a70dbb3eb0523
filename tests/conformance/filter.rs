//! Search filters: the RFC 4515 string form parsed into a tree, and the tree encoded as the
//! RFC 4511 §4.5.1.7 `Filter` CHOICE. The parser is lenient where a client library would be:
//! it passes attribute descriptions and matching rule names through unchecked, so that the
//! servers, not the test, judge them.

use crate::ber;

#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
    Equality(String, Vec<u8>),
    Substrings { attr: String, initial: Option<Vec<u8>>, any: Vec<Vec<u8>>, last: Option<Vec<u8>> },
    GreaterOrEqual(String, Vec<u8>),
    LessOrEqual(String, Vec<u8>),
    Present(String),
    Approx(String, Vec<u8>),
    Extensible { rule: Option<String>, attr: Option<String>, value: Vec<u8>, dn_attributes: bool },
}

/// Parses one parenthesised filter (RFC 4515 §3); the whole input must be consumed.
pub fn parse(text: &str) -> Result<Filter, String> {
    let bytes = text.as_bytes();
    let (filter, used) = parse_filter(bytes, 0)?;
    if used != bytes.len() {
        return Err(format!("trailing text after filter at byte {used}: {text}"));
    }
    Ok(filter)
}

fn parse_filter(text: &[u8], start: usize) -> Result<(Filter, usize), String> {
    if text.get(start) != Some(&b'(') {
        return Err(format!("expected '(' at byte {start}"));
    }
    let pos = start + 1;
    match text.get(pos) {
        Some(b'&') => parse_list(text, pos + 1).map(|(list, end)| (Filter::And(list), end)),
        Some(b'|') => parse_list(text, pos + 1).map(|(list, end)| (Filter::Or(list), end)),
        Some(b'!') => {
            let (inner, end) = parse_filter(text, pos + 1)?;
            expect_close(text, end).map(|end| (Filter::Not(Box::new(inner)), end))
        }
        Some(_) => {
            let close = find_item_end(text, pos)?;
            let item = parse_item(&text[pos..close])?;
            Ok((item, close + 1))
        }
        None => Err("unterminated filter".into()),
    }
}

fn parse_list(text: &[u8], mut pos: usize) -> Result<(Vec<Filter>, usize), String> {
    let mut list = Vec::new();
    while text.get(pos) == Some(&b'(') {
        let (item, end) = parse_filter(text, pos)?;
        list.push(item);
        pos = end;
    }
    expect_close(text, pos).map(|end| (list, end))
}

fn expect_close(text: &[u8], pos: usize) -> Result<usize, String> {
    match text.get(pos) {
        Some(b')') => Ok(pos + 1),
        _ => Err(format!("expected ')' at byte {pos}")),
    }
}

/// An item ends at the first ')' (values escape their parentheses as \28 and \29).
fn find_item_end(text: &[u8], pos: usize) -> Result<usize, String> {
    text[pos..].iter().position(|b| *b == b')').map(|i| pos + i).ok_or_else(|| "unterminated item".into())
}

fn parse_item(item: &[u8]) -> Result<Filter, String> {
    let eq = item.iter().position(|b| *b == b'=').ok_or("filter item without '='")?;
    let value_text = &item[eq + 1..];
    let before = if eq > 0 { Some(item[eq - 1]) } else { None };
    let left = |skip: usize| String::from_utf8_lossy(&item[..eq - skip]).into_owned();
    match before {
        Some(b'~') => Ok(Filter::Approx(left(1), unescape(value_text)?)),
        Some(b'>') => Ok(Filter::GreaterOrEqual(left(1), unescape(value_text)?)),
        Some(b'<') => Ok(Filter::LessOrEqual(left(1), unescape(value_text)?)),
        Some(b':') => parse_extensible(&left(1), unescape(value_text)?),
        _ => parse_equalish(left(0), value_text),
    }
}

/// `attr=value`, `attr=*` or a substring assertion, told apart by unescaped stars.
fn parse_equalish(attr: String, value_text: &[u8]) -> Result<Filter, String> {
    if value_text == b"*" {
        return Ok(Filter::Present(attr));
    }
    if !value_text.contains(&b'*') {
        return Ok(Filter::Equality(attr, unescape(value_text)?));
    }
    let pieces: Vec<&[u8]> = value_text.split(|b| *b == b'*').collect();
    let last_index = pieces.len() - 1;
    let initial = if pieces[0].is_empty() { None } else { Some(unescape(pieces[0])?) };
    let last = if pieces[last_index].is_empty() { None } else { Some(unescape(pieces[last_index])?) };
    // Like libldap, empty middle pieces ("a**b") are dropped rather than sent empty.
    let any = pieces[1..last_index]
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| unescape(p))
        .collect::<Result<_, _>>()?;
    Ok(Filter::Substrings { attr, initial, any, last })
}

/// `attr[:dn][:rule]:=value` or `[:dn]:rule:=value` (RFC 4515 §3, extensible).
fn parse_extensible(left: &str, value: Vec<u8>) -> Result<Filter, String> {
    let mut parts = left.split(':');
    let first = parts.next().unwrap_or("");
    let attr = if first.is_empty() { None } else { Some(first.to_string()) };
    let mut dn_attributes = false;
    let mut rule = None;
    for part in parts {
        if part.eq_ignore_ascii_case("dn") && rule.is_none() {
            dn_attributes = true;
        } else {
            rule = Some(part.to_string());
        }
    }
    Ok(Filter::Extensible { rule, attr, value, dn_attributes })
}

/// RFC 4515 §3: `\XX` is the byte 0xXX.
fn unescape(text: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'\\' {
            let hex = text.get(i + 1..i + 3).ok_or("truncated escape in filter value")?;
            let hex = std::str::from_utf8(hex).map_err(|e| e.to_string())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| format!("bad escape \\{hex}"))?);
            i += 3;
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn escape(value: &[u8]) -> String {
    let mut out = String::new();
    for b in value {
        match b {
            b'*' | b'(' | b')' | b'\\' | 0..=0x1f | 0x7f..=0xff => out.push_str(&format!("\\{b:02x}")),
            _ => out.push(*b as char),
        }
    }
    out
}

/// The RFC 4515 string form, for the report.
pub fn to_string(filter: &Filter) -> String {
    let list =
        |op: char, items: &[Filter]| format!("({op}{})", items.iter().map(to_string).collect::<String>());
    match filter {
        Filter::And(items) => list('&', items),
        Filter::Or(items) => list('|', items),
        Filter::Not(inner) => format!("(!{})", to_string(inner)),
        Filter::Equality(a, v) => format!("({a}={})", escape(v)),
        Filter::Substrings { attr, initial, any, last } => {
            let mut text = format!("({attr}=");
            text.push_str(&initial.as_deref().map(escape).unwrap_or_default());
            for piece in any {
                text.push('*');
                text.push_str(&escape(piece));
            }
            text.push('*');
            text.push_str(&last.as_deref().map(escape).unwrap_or_default());
            text + ")"
        }
        Filter::GreaterOrEqual(a, v) => format!("({a}>={})", escape(v)),
        Filter::LessOrEqual(a, v) => format!("({a}<={})", escape(v)),
        Filter::Present(a) => format!("({a}=*)"),
        Filter::Approx(a, v) => format!("({a}~={})", escape(v)),
        Filter::Extensible { rule, attr, value, dn_attributes } => {
            let dn = if *dn_attributes { ":dn" } else { "" };
            let rule = rule.as_ref().map(|r| format!(":{r}")).unwrap_or_default();
            format!("({}{dn}{rule}:={})", attr.as_deref().unwrap_or(""), escape(value))
        }
    }
}

/// The BER encoding (RFC 4511 §4.5.1.7).
pub fn encode(filter: &Filter) -> Vec<u8> {
    let ava =
        |tag: u8, attr: &str, value: &[u8]| ber::constructed(tag, &[ber::octets(attr), ber::octets(value)]);
    match filter {
        Filter::And(list) => ber::constructed(0xa0, &list.iter().map(encode).collect::<Vec<_>>()),
        Filter::Or(list) => ber::constructed(0xa1, &list.iter().map(encode).collect::<Vec<_>>()),
        Filter::Not(inner) => ber::tlv(0xa2, &encode(inner)),
        Filter::Equality(attr, value) => ava(0xa3, attr, value),
        Filter::Substrings { attr, initial, any, last } => {
            let mut pieces = Vec::new();
            if let Some(initial) = initial {
                pieces.push(ber::tlv(0x80, initial));
            }
            pieces.extend(any.iter().map(|piece| ber::tlv(0x81, piece)));
            if let Some(last) = last {
                pieces.push(ber::tlv(0x82, last));
            }
            ber::constructed(0xa4, &[ber::octets(attr), ber::constructed(ber::SEQUENCE, &pieces)])
        }
        Filter::GreaterOrEqual(attr, value) => ava(0xa5, attr, value),
        Filter::LessOrEqual(attr, value) => ava(0xa6, attr, value),
        Filter::Present(attr) => ber::tlv(0x87, attr.as_bytes()),
        Filter::Approx(attr, value) => ava(0xa8, attr, value),
        Filter::Extensible { rule, attr, value, dn_attributes } => {
            let mut parts = Vec::new();
            if let Some(rule) = rule {
                parts.push(ber::tlv(0x81, rule.as_bytes()));
            }
            if let Some(attr) = attr {
                parts.push(ber::tlv(0x82, attr.as_bytes()));
            }
            parts.push(ber::tlv(0x83, value));
            if *dn_attributes {
                parts.push(ber::boolean_tagged(0x84, true));
            }
            ber::constructed(0xa9, &parts)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind() {
        assert_eq!(parse("(cn=a\\2ab)").unwrap(), Filter::Equality("cn".into(), b"a*b".to_vec()));
        assert_eq!(parse("(cn=*)").unwrap(), Filter::Present("cn".into()));
        assert_eq!(parse("(&)").unwrap(), Filter::And(vec![]));
        assert_eq!(parse("(|)").unwrap(), Filter::Or(vec![]));
        assert_eq!(parse("(cn=)").unwrap(), Filter::Equality("cn".into(), vec![]));
        assert_eq!(
            parse("(cn=a**b*c*)").unwrap(),
            Filter::Substrings {
                attr: "cn".into(),
                initial: Some(b"a".to_vec()),
                any: vec![b"b".to_vec(), b"c".to_vec()],
                last: None
            }
        );
        assert_eq!(
            parse("(ou:dn:caseIgnoreMatch:=People)").unwrap(),
            Filter::Extensible {
                rule: Some("caseIgnoreMatch".into()),
                attr: Some("ou".into()),
                value: b"People".to_vec(),
                dn_attributes: true
            }
        );
        assert_eq!(
            parse("(:2.5.13.5:=x)").unwrap(),
            Filter::Extensible {
                rule: Some("2.5.13.5".into()),
                attr: None,
                value: b"x".to_vec(),
                dn_attributes: false
            }
        );
        assert!(matches!(parse("(!(a>=1))").unwrap(), Filter::Not(_)));
        for text in ["(&(cn=a*b*c)(!(x:dn:r:=v))(|))", "(cn=\\2a)", "(a>=1)", "(a~=b)", "(:r:=v)"] {
            assert_eq!(to_string(&parse(text).unwrap()), text);
        }
        assert!(parse("(cn=x").is_err());
        assert!(parse("(cn=x))").is_err());
    }

    #[test]
    fn encodes_like_rfc4511() {
        assert_eq!(encode(&parse("(cn=*)").unwrap()), vec![0x87, 2, b'c', b'n']);
        assert_eq!(encode(&parse("(&)").unwrap()), vec![0xa0, 0]);
        assert_eq!(encode(&parse("(!(|))").unwrap()), vec![0xa2, 2, 0xa1, 0]);
    }
}
