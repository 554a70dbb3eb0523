//! A memberURL value (RFC 4516 LDAP URL, `ldap:///BASE??SCOPE?FILTER`) read as slapd's
//! dynlist reads it: the base, the scope and the filter of the search that selects the
//! group's members. The attribute list is not used (with `dynlist-attrset groupOfURLs
//! memberURL member`, slapd adds the selected entries' DNs as member values). A URL that
//! names a host, or a critical extension, selects nothing, as slapd skips it.

use ferrodir_proto::filter::{parse_filter, Filter};
use ferrodir_proto::message::SearchScope;

/// One memberURL, parsed; the base still as text (the caller normalises it with the
/// schema's DN rules).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MemberUrl {
    pub base: String,
    pub scope: SearchScope,
    pub filter: Filter,
}

impl MemberUrl {
    /// Whether `dn` is in this URL's scope (its filter aside). False when the base is no DN.
    pub fn selects_dn(
        &self,
        dn_rules: &ferrodir_proto::schema::DnNormalizer,
        dn: &ferrodir_proto::NormDn,
    ) -> bool {
        let Ok(base) = dn_rules.parse(&self.base) else { return false };
        match self.scope {
            SearchScope::BaseObject => dn.same_entry(&base),
            SearchScope::SingleLevel => dn.depth_below(&base) == Some(1),
            SearchScope::WholeSubtree => dn.is_descendant_or_self_of(&base),
            SearchScope::SubordinateSubtree => dn.depth_below(&base).is_some_and(|d| d >= 1),
        }
    }
}

/// Parses `text`; None when it is not an `ldap:///` URL this server can search.
pub(crate) fn parse(text: &str) -> Option<MemberUrl> {
    let text = text.trim();
    let scheme_end = text.find("://")?;
    if !text.get(..scheme_end)?.eq_ignore_ascii_case("ldap") {
        return None;
    }
    let rest = text.get(scheme_end + 3..)?;
    let (host, rest) = match rest.find('/') {
        Some(at) => (rest.get(..at)?, rest.get(at + 1..)?),
        None => (rest, ""),
    };
    if !host.is_empty() {
        // Another server's entries: slapd's dynlist refuses such a URL ("illegal URI").
        return None;
    }
    let mut parts = rest.splitn(5, '?');
    let base = decode(parts.next().unwrap_or(""))?;
    let _attributes = parts.next();
    let scope = match decode(parts.next().unwrap_or(""))?.to_ascii_lowercase().as_str() {
        "" | "base" => SearchScope::BaseObject,
        "one" => SearchScope::SingleLevel,
        "sub" => SearchScope::WholeSubtree,
        "children" | "subord" | "subordinate" => SearchScope::SubordinateSubtree,
        _ => return None,
    };
    let filter_text = decode(parts.next().unwrap_or(""))?;
    let filter_text = if filter_text.is_empty() { "(objectClass=*)".to_string() } else { filter_text };
    // RFC 4516 §2: a filter may come without its outer parentheses.
    let filter_text = if filter_text.starts_with('(') { filter_text } else { format!("({filter_text})") };
    let filter = parse_filter(&filter_text).ok()?;
    if let Some(extensions) = parts.next() {
        // RFC 4516 §2.1: a critical extension this server does not know refuses the URL.
        if extensions.split(',').any(|e| e.trim_start().starts_with('!')) {
            return None;
        }
    }
    Some(MemberUrl { base, scope, filter })
}

/// RFC 3986 percent-decoding of one URL part, as UTF-8; None when malformed.
fn decode(part: &str) -> Option<String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = part.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_scope_and_filter() {
        let url = parse("ldap:///ou=People,dc=example,dc=com??sub?(objectClass=person)").unwrap();
        assert_eq!(url.base, "ou=People,dc=example,dc=com");
        assert_eq!(url.scope, SearchScope::WholeSubtree);
        assert_eq!(url.filter, parse_filter("(objectClass=person)").unwrap());
        let url = parse("LDAP:///ou=a,dc=x??one").unwrap();
        assert_eq!(url.scope, SearchScope::SingleLevel);
        assert_eq!(url.filter, parse_filter("(objectClass=*)").unwrap());
        assert_eq!(parse("ldap:///cn=x,dc=x").unwrap().scope, SearchScope::BaseObject);
        assert_eq!(parse("ldap:///dc=x??children?uid=a").unwrap().filter, parse_filter("(uid=a)").unwrap());
    }

    #[test]
    fn percent_decoding() {
        let url = parse("ldap:///ou=A%20B,dc=x??sub?(cn=J%2A)").unwrap();
        assert_eq!(url.base, "ou=A B,dc=x");
        assert_eq!(url.filter, parse_filter("(cn=J*)").unwrap());
        assert!(parse("ldap:///ou=A%2,dc=x").is_none());
    }

    #[test]
    fn what_selects_nothing() {
        assert!(parse("ldap://elsewhere.example/dc=x??sub").is_none(), "a host");
        assert!(parse("http:///dc=x").is_none(), "another scheme");
        assert!(parse("ldap:///dc=x??deep").is_none(), "an unknown scope");
        assert!(parse("ldap:///dc=x??sub?(cn=").is_none(), "a broken filter");
        assert!(parse("ldap:///dc=x??sub?(cn=a)?!e-critical").is_none(), "a critical extension");
        assert!(parse("ldap:///dc=x??sub?(cn=a)?e-other").is_some());
        assert!(parse("not a url").is_none());
    }
}
