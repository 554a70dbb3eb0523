//! slapd's access syntax (slapd.access(5)), the subset Ferrodir enforces, parsed into the
//! compiled rules of `rule`. Each rule arrives as its `<what>` text and its `by` clauses as
//! strings, exactly as slapd.conf writes them, so a test can give both servers the same
//! text. Anything outside the subset is refused with a message naming it, never ignored:
//! a rule that silently means less than it says is a hole.

use std::collections::HashSet;
use std::sync::Arc;

use ferrodir_proto::filter::parse_filter;
use ferrodir_shard::RuleTable;

use crate::acl::rule::{AttrList, By, DnScope, Group, Level, Rule, RuleSet, What, Who};

/// One rule as configured: `to` is slapd's `<what>`, each of `by` one `<who> <level>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleText {
    pub to: String,
    pub by: Vec<String>,
}

impl RuleText {
    pub fn new(to: &str, by: &[&str]) -> Self {
        Self { to: to.to_string(), by: by.iter().map(|b| b.to_string()).collect() }
    }

    /// The rule as one slapd.conf line: `access to <what> by <who> <level> ...`.
    pub fn slapd_line(&self) -> String {
        let mut line = format!("access to {}", self.to);
        for by in &self.by {
            line.push_str(" by ");
            line.push_str(by);
        }
        line
    }
}

/// A rule that can't be compiled: which one (1-based, in configuration order) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("access rule {number} (to {to}): {problem}")]
pub struct RuleError {
    pub number: usize,
    pub to: String,
    pub problem: String,
}

/// Compiles `texts` in order. The attribute types, classes and filters are checked against
/// the schema's `matching` table now, so that a typo stops the server at start.
pub fn compile(texts: &[RuleText], matching: Arc<RuleTable>, origin: &str) -> Result<RuleSet, RuleError> {
    let mut groups = Vec::new();
    let mut rules = Vec::with_capacity(texts.len());
    for (index, text) in texts.iter().enumerate() {
        let fail = |problem: String| RuleError { number: index + 1, to: text.to.clone(), problem };
        let what = parse_what(&text.to, &matching).map_err(fail)?;
        if text.by.is_empty() {
            return Err(fail("no `by` clause (slapd needs at least one)".into()));
        }
        let mut by = Vec::with_capacity(text.by.len());
        for clause in &text.by {
            by.push(
                parse_by(clause, &matching, &mut groups).map_err(|e| fail(format!("by {clause:?}: {e}")))?,
            );
        }
        rules.push(Rule { text: RuleText::slapd_line(text), what, by });
    }
    Ok(RuleSet { rules, groups, matching, origin: origin.to_string() })
}

/// Splits on spaces outside double quotes and parentheses; quotes are dropped, so that
/// `dn.subtree="ou=a b,dc=c"` and `filter=(cn=a b)` each stay one token.
fn tokens(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let (mut quoted, mut depth) = (false, 0usize);
    for c in text.chars() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => {
                depth += 1;
                current.push(c);
            }
            ')' if !quoted => {
                depth = depth.checked_sub(1).ok_or("unbalanced ')'")?;
                current.push(c);
            }
            c if c.is_whitespace() && !quoted && depth == 0 => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if quoted {
        return Err("unterminated '\"'".into());
    }
    if depth > 0 {
        return Err("unbalanced '('".into());
    }
    if !current.is_empty() {
        out.push(current);
    }
    Ok(out)
}

fn parse_what(text: &str, matching: &RuleTable) -> Result<What, String> {
    let mut what = What { dn: DnScope::All, filter: None, attrs: None };
    let (mut seen_dn, mut seen_filter) = (false, false);
    let parts = tokens(text)?;
    if parts.is_empty() {
        return Err("empty <what> (write `*` for everything)".into());
    }
    for part in parts {
        if part == "*" {
            continue;
        }
        let (key, value) = part.split_once('=').ok_or_else(|| format!("{part:?}: expected key=value"))?;
        let key = key.to_ascii_lowercase();
        if key == "dn" || key.starts_with("dn.") {
            if std::mem::replace(&mut seen_dn, true) {
                return Err("more than one dn clause".into());
            }
            what.dn = dn_scope(&key, value, matching)?;
        } else if key == "filter" {
            if std::mem::replace(&mut seen_filter, true) {
                return Err("more than one filter".into());
            }
            let filter = parse_filter(value).map_err(|e| format!("filter {value:?}: {e}"))?;
            what.filter = Some(filter);
        } else if key == "attrs" || key == "attr" {
            if what.attrs.is_some() {
                return Err("more than one attrs list".into());
            }
            what.attrs = Some(attr_list(value, matching)?);
        } else if key.starts_with("val") {
            return Err("value-level rules (val=) are not supported".into());
        } else {
            return Err(format!("{key:?} is not a <what> this server knows (dn, filter, attrs)"));
        }
    }
    Ok(what)
}

/// `dn[.style]=value`, in `<what>` or in `<who>`. slapd's default style is base.
fn dn_scope(key: &str, value: &str, matching: &RuleTable) -> Result<DnScope, String> {
    let style = key.strip_prefix("dn").unwrap_or("").trim_start_matches('.');
    let style = style.split(',').next().unwrap_or("");
    if style == "regex" {
        // The one regex everyone writes means everything; others are not supported.
        if value == ".*" || value == "^.*$" {
            return Ok(DnScope::All);
        }
        return Err(format!("dn.regex={value:?}: regular expressions are not supported; use dn.base, dn.one, dn.subtree or dn.children"));
    }
    if value == "*" && style.is_empty() {
        return Ok(DnScope::All);
    }
    let dn = matching.dn().parse(value).map_err(|e| format!("dn {value:?}: {e}"))?;
    match style {
        "" | "base" | "baseobject" | "exact" => Ok(DnScope::Base(dn)),
        "one" | "onelevel" => Ok(DnScope::One(dn)),
        "sub" | "subtree" => Ok(DnScope::Subtree(dn)),
        "children" => Ok(DnScope::Children(dn)),
        other => Err(format!("dn style {other:?} is not supported (base, one, subtree, children)")),
    }
}

fn attr_list(value: &str, matching: &RuleTable) -> Result<AttrList, String> {
    let mut list = AttrList::default();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.to_ascii_lowercase().as_str() {
            "entry" => list.entry = true,
            "children" => list.children = true,
            _ if item.starts_with('@') || item.starts_with('!') => {
                return Err(format!(
                    "attrs={item}: object class lists are not supported; name the attributes"
                ))
            }
            _ if item.contains(';') => {
                return Err(format!("attrs={item}: attribute options are not supported"))
            }
            _ => {
                let rules =
                    matching.get(item).ok_or_else(|| format!("attrs: unknown attribute type {item:?}"))?;
                list.types.extend(rules.subtypes.iter().cloned());
            }
        }
    }
    if !list.entry && !list.children && list.types.is_empty() {
        return Err("empty attrs list".into());
    }
    Ok(list)
}

fn parse_level(word: &str) -> Result<Level, String> {
    Ok(match word.to_ascii_lowercase().as_str() {
        "none" => Level::None,
        "disclose" => Level::Disclose,
        "auth" => Level::Auth,
        "compare" => Level::Compare,
        "search" => Level::Search,
        "read" => Level::Read,
        "write" => Level::Write,
        "manage" => Level::Manage,
        "add" | "delete" => return Err(format!("level {word:?} (half of write) is not supported")),
        w if w.starts_with(['=', '+', '-']) => {
            return Err(format!("privilege sets ({word}) are not supported"))
        }
        w if w.starts_with("self") || w.starts_with("realself") => {
            return Err(format!("the self modifier ({word}) is not supported"))
        }
        _ => return Err(format!("{word:?} is not an access level")),
    })
}

fn parse_by(text: &str, matching: &RuleTable, groups: &mut Vec<Group>) -> Result<By, String> {
    let mut parts = tokens(text)?;
    if let Some(last) = parts.last().map(|l| l.to_ascii_lowercase()) {
        match last.as_str() {
            "stop" => {
                parts.pop();
            }
            "continue" | "break" => return Err(format!("the {last} control is not supported")),
            _ => {}
        }
    }
    let level_word = parts.pop().ok_or("empty clause")?;
    let level = parse_level(&level_word).map_err(|e| format!("{e} (a clause is `<who> <level>`)"))?;
    if parts.is_empty() {
        return Err("no <who> before the level".into());
    }
    let mut who = Vec::new();
    for part in &parts {
        if let Some(condition) = parse_who(part, matching, groups)? {
            who.push(condition);
        }
    }
    Ok(By { who, level })
}

/// One `<who>` condition; None for `*` (no condition).
fn parse_who(part: &str, matching: &RuleTable, groups: &mut Vec<Group>) -> Result<Option<Who>, String> {
    match part.to_ascii_lowercase().as_str() {
        "*" => return Ok(None),
        "anonymous" => return Ok(Some(Who::Anonymous)),
        "users" => return Ok(Some(Who::Users)),
        "self" => return Ok(Some(Who::SelfEntry)),
        _ => {}
    }
    let (key, value) =
        part.split_once('=').ok_or_else(|| format!("{part:?} is not a <who> this server knows"))?;
    let key = key.to_ascii_lowercase();
    if key == "dn" || key.starts_with("dn.") {
        return Ok(match dn_scope(&key, value, matching)? {
            DnScope::All => None,
            scope => Some(Who::Dn(scope)),
        });
    }
    if key == "group" || key.starts_with("group/") || key.starts_with("group.") {
        let group = parse_group(&key, value, matching)?;
        let index = match groups.iter().position(|g| *g == group) {
            Some(index) => index,
            None => {
                groups.push(group);
                groups.len() - 1
            }
        };
        return Ok(Some(Who::Group(index)));
    }
    let number = || value.parse::<u32>().map_err(|_| format!("{key}={value:?}: expected a number"));
    match key.as_str() {
        "ssf" | "transport_ssf" => Ok((number()? > 0).then_some(Who::Confidential)),
        "tls_ssf" => Ok((number()? > 0).then_some(Who::Tls)),
        "peername.ip" if value.starts_with("127.") && value.parse::<std::net::Ipv4Addr>().is_ok() => {
            Ok(Some(Who::LoopbackIp))
        }
        "peername.ipv6" if value == "::1" => Ok(Some(Who::LoopbackIp)),
        "peername.ip" | "peername.ipv6" => Err(format!(
            "{part}: only loopback peers (peername.ip=127.0.0.1, peername.ipv6=::1) are supported"
        )),
        _ => Err(format!("{key:?} is not a <who> this server knows")),
    }
}

/// `group[/class[/attr]][.exact]=DN`.
fn parse_group(key: &str, value: &str, matching: &RuleTable) -> Result<Group, String> {
    let (path, style) = match key.split_once('.') {
        Some((path, style)) => (path, style),
        None => (key, "exact"),
    };
    if style != "exact" {
        return Err(format!("group style {style:?} is not supported (exact)"));
    }
    let mut pieces = path.split('/').skip(1);
    let class = pieces.next().unwrap_or("groupOfNames").to_string();
    let member = pieces.next().unwrap_or("member");
    if pieces.next().is_some() {
        return Err(format!("{key}: expected group[/class[/attribute]]"));
    }
    if matching.class_lineage(class.as_bytes()).is_none() {
        return Err(format!("group: unknown object class {class:?}"));
    }
    let member_attr = matching
        .get(member)
        .ok_or_else(|| format!("group: unknown attribute type {member:?}"))?
        .canonical
        .clone();
    let dn = matching.dn().parse(value).map_err(|e| format!("group {value:?}: {e}"))?;
    Ok(Group { dn, class, member_attr })
}

/// The built-in rule sets `access = "..."` selects.
pub fn profile(name: &str) -> Option<Vec<RuleText>> {
    match name {
        // Debian's slapd: passwords for binds and their owner, shadowLastChange writable
        // by its owner, everything else readable by all.
        "default" => Some(vec![
            RuleText::new("attrs=userPassword", &["self write", "anonymous auth", "* none"]),
            RuleText::new("attrs=shadowLastChange", &["self write", "* read"]),
            RuleText::new("*", &["* read"]),
        ]),
        // slapd with no access lines: `access to * by * read`.
        "open-read" => Some(vec![RuleText::new("*", &["* read"])]),
        _ => None,
    }
}

/// Names of the attribute types a list covers, for tests and messages.
pub fn covered_types(list: &AttrList) -> HashSet<&str> {
    list.types.iter().map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::schema::Schema;

    fn matching() -> Arc<RuleTable> {
        Arc::new(RuleTable::from_schema(&Schema::standard()))
    }

    fn one(to: &str, by: &[&str]) -> Result<RuleSet, RuleError> {
        compile(&[RuleText::new(to, by)], matching(), "test")
    }

    #[test]
    fn the_profiles_compile() {
        for name in ["default", "open-read"] {
            compile(&profile(name).unwrap(), matching(), name).unwrap();
        }
        assert!(profile("nonsense").is_none());
    }

    #[test]
    fn what_clauses_combine_dn_filter_and_attributes() {
        let set = one(
            r#"dn.subtree="ou=people, dc=example,dc=com" filter=(objectClass=person) attrs=cn,mail,entry"#,
            &["self write", "users read", "* none"],
        )
        .unwrap();
        let rule = &set.rules[0];
        assert!(
            matches!(&rule.what.dn, DnScope::Subtree(base) if base.rdns == ["ou=people", "dc=example", "dc=com"])
        );
        assert!(rule.what.filter.is_some());
        let attrs = rule.what.attrs.as_ref().unwrap();
        assert!(attrs.entry && !attrs.children && covered_types(attrs) == HashSet::from(["cn", "mail"]));
        assert_eq!(rule.by.len(), 3);
        assert_eq!(rule.by[0].who, vec![Who::SelfEntry]);
        assert_eq!(rule.by[2].who, vec![]);
        assert_eq!(rule.by[2].level, Level::None);
    }

    #[test]
    fn a_supertype_covers_its_subtypes() {
        let set = one("attrs=name", &["* none"]).unwrap();
        let types = covered_types(set.rules[0].what.attrs.as_ref().unwrap());
        assert!(types.contains("cn") && types.contains("sn") && types.contains("name"));
    }

    #[test]
    fn who_clauses_combine_and_groups_are_shared() {
        let set = compile(
            &[
                RuleText::new(
                    "*",
                    &["group=\"cn=admins,dc=example,dc=com\" ssf=128 write", "peername.ip=127.0.0.1 read"],
                ),
                RuleText::new(
                    "attrs=cn",
                    &[
                        "group/groupOfUniqueNames/uniqueMember=cn=staff,dc=example,dc=com read",
                        "group=cn=admins,dc=example,dc=com read stop",
                    ],
                ),
            ],
            matching(),
            "test",
        )
        .unwrap();
        assert_eq!(set.groups.len(), 2);
        assert_eq!(set.rules[0].by[0].who, vec![Who::Group(0), Who::Confidential]);
        assert_eq!(set.rules[0].by[1].who, vec![Who::LoopbackIp]);
        assert_eq!(set.rules[1].by[0].who, vec![Who::Group(1)]);
        assert_eq!(set.rules[1].by[1].who, vec![Who::Group(0)]);
        assert_eq!(set.groups[1].member_attr, "uniquemember");
        assert_eq!(set.groups[0].class, "groupOfNames");
    }

    #[test]
    fn bad_rules_name_the_rule_and_the_problem() {
        let cases = [
            ("attrs=noSuchType", "* read", "unknown attribute type"),
            ("dn.regex=\"^uid=.*\"", "* read", "regular expressions"),
            ("filter=(cn=", "* read", "filter"),
            ("*", "* writ", "not an access level"),
            ("*", "read", "no <who>"),
            ("*", "* read continue", "continue"),
            ("*", "sockurl=ldap:// read", "not a <who>"),
            ("*", "peername.ip=10.0.0.1 read", "only loopback"),
            ("*", "group/noSuchClass=cn=x read", "unknown object class"),
            ("attrs=@person", "* read", "object class lists"),
            ("bogus=1", "* read", "not a <what>"),
        ];
        for (to, by, expected) in cases {
            let error = one(to, &[by]).unwrap_err();
            assert_eq!(error.number, 1);
            let message = error.to_string();
            assert!(message.contains(expected), "{to} / {by}: {message}");
            assert!(message.contains(to), "{message} names the rule");
        }
        let error = compile(
            &[RuleText::new("*", &["* read"]), RuleText::new("attrs=x-unknown", &["* read"])],
            matching(),
            "test",
        )
        .unwrap_err();
        assert_eq!(error.number, 2);
    }

    #[test]
    fn the_slapd_line_is_the_rule_as_slapd_conf_writes_it() {
        let text = RuleText::new("attrs=userPassword", &["self write", "anonymous auth", "* none"]);
        assert_eq!(
            text.slapd_line(),
            "access to attrs=userPassword by self write by anonymous auth by * none"
        );
    }
}
