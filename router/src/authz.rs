//! Who may act as whom: slapd's authorization rules (`authz-policy`, the authzTo and
//! authzFrom attributes), for the proxied authorization control (RFC 4370, `op::proxy_authz`).
//!
//! `[sasl] authz_policy` says which rules count: `none` (nobody may act as another; the
//! default, as slapd's), `to` (the authenticated entry's authzTo names the target), `from`
//! (the target entry's authzFrom names the authenticated identity), `any` (either), `all`
//! (both). Acting as oneself is always allowed, and so is the rootDN acting as anyone.
//!
//! A rule value is one of slapd's forms:
//! - `*`: anyone;
//! - `dn:DN`, `dn.exact:DN`, `dn.base:DN`: that entry; `dn.subtree:DN` it or below it,
//!   `dn.children:DN` below it, `dn.onelevel:DN` (`dn.one:`) its children; `dn.regex:RE`
//!   a normalised DN the regular expression matches whole;
//! - `u:NAME`: the DN the name maps to (`uid=NAME,cn=auth` through `authz_regexp`);
//! - `ldap:///BASE??SCOPE?FILTER`: an entry within BASE and SCOPE that matches FILTER.
//!
//! Any other form (slapd's `group/...` sets among them) never matches: it grants nothing.

use ferrodir_proto::filter::{parse_filter, Filter};
use ferrodir_proto::NormDn;

use crate::config::{AuthzPolicy, DirectoryConfig};
use crate::worker::Worker;

/// Whether `authc` (the bound identity) may act as `authz`, under `config`'s policy.
pub async fn authorized(worker: &Worker, config: &DirectoryConfig, authc: &NormDn, authz: &NormDn) -> bool {
    if authc.same_entry(authz) || config.is_root_dn(authc) {
        return true;
    }
    let to = || async { names(worker, config, authc, "authzTo", authz).await };
    let from = || async { names(worker, config, authz, "authzFrom", authc).await };
    match config.authz_policy {
        AuthzPolicy::None => false,
        AuthzPolicy::To => to().await,
        AuthzPolicy::From => from().await,
        AuthzPolicy::Any => to().await || from().await,
        AuthzPolicy::All => to().await && from().await,
    }
}

/// Whether a value of `attr` on the entry `holder` names `who`.
async fn names(worker: &Worker, config: &DirectoryConfig, holder: &NormDn, attr: &str, who: &NormDn) -> bool {
    let Ok(located) = crate::resolve::locate(worker, holder).await else { return false };
    let Ok(Some(record)) = worker.fetch(located.id).await else { return false };
    let Some(values) = record.entry.get(attr).map(|a| a.values.clone()) else { return false };
    for value in values {
        let Ok(text) = std::str::from_utf8(&value) else { continue };
        if rule_names(worker, config, text, who).await {
            return true;
        }
    }
    false
}

/// Whether the rule `text` (one authzTo or authzFrom value) names `who`.
async fn rule_names(worker: &Worker, config: &DirectoryConfig, text: &str, who: &NormDn) -> bool {
    let text = text.trim();
    if text == "*" {
        return true;
    }
    if let Some(url) = text.strip_prefix("ldap:///") {
        return url_names(worker, config, url, who).await;
    }
    if let Some(name) = text.strip_prefix("u:") {
        return user_dn(config, name).is_some_and(|dn| dn.same_entry(who));
    }
    let Some((style, pattern)) = text.split_once(':') else { return false };
    let style = style.to_ascii_lowercase();
    if style == "dn.regex" {
        let anchored = format!("^(?i:{pattern})$");
        return regex::Regex::new(&anchored).is_ok_and(|re| re.is_match(&who.joined()));
    }
    let Ok(dn) = config.dn_rules().parse(pattern) else { return false };
    match style.as_str() {
        "dn" | "dn.exact" | "dn.base" => who.same_entry(&dn),
        "dn.subtree" => who.is_descendant_or_self_of(&dn),
        "dn.children" => who.depth_below(&dn).is_some_and(|depth| depth > 0),
        "dn.onelevel" | "dn.one" => who.depth_below(&dn) == Some(1),
        _ => false,
    }
}

/// `BASE??SCOPE?FILTER` (the part of an `ldap:///` URL after the slashes): whether `who`
/// lies within the base and scope and its entry matches the filter.
async fn url_names(worker: &Worker, config: &DirectoryConfig, url: &str, who: &NormDn) -> bool {
    let mut parts = url.splitn(4, '?');
    let base = parts.next().unwrap_or_default();
    let _attrs = parts.next();
    let scope = parts.next().unwrap_or_default().to_ascii_lowercase();
    let filter = parts.next().unwrap_or_default();
    let Ok(base) = config.dn_rules().parse(&percent_decoded(base)) else { return false };
    let Some(depth) = who.depth_below(&base) else { return false };
    let within = match scope.as_str() {
        "" | "base" => depth == 0,
        "one" | "onelevel" => depth == 1,
        "sub" | "subtree" => true,
        "children" | "subordinate" => depth > 0,
        _ => false,
    };
    if !within {
        return false;
    }
    let filter: Filter = match filter {
        "" => Filter::present("objectClass"),
        text => match parse_filter(&percent_decoded(text)) {
            Ok(filter) => filter,
            Err(_) => return false,
        },
    };
    let Ok(located) = crate::resolve::locate(worker, who).await else { return false };
    let Ok(Some(record)) = worker.fetch(located.id).await else { return false };
    ferrodir_shard::filter_matches(&config.rules, &filter, &record.entry, None)
}

/// The DN a user name stands for in an authzId or a `u:` rule: `uid=NAME,cn=auth`,
/// rewritten by the first matching `authz_regexp` (as slapd names a name without a SASL
/// mechanism); None when that is no DN.
pub fn user_dn(config: &DirectoryConfig, name: &str) -> Option<NormDn> {
    let escaped: String = name
        .chars()
        .enumerate()
        .flat_map(|(i, c)| {
            let escape = matches!(c, '"' | '+' | ',' | ';' | '<' | '>' | '\\' | '=')
                || (i == 0 && (c == '#' || c == ' '));
            escape.then_some('\\').into_iter().chain(std::iter::once(c))
        })
        .collect();
    let name = format!("uid={escaped},cn=auth");
    if let Some(rule) = config.authz_rules.iter().find(|rule| rule.pattern.is_match(&name)) {
        let captures = rule.pattern.captures(&name)?;
        let mut replaced = String::new();
        captures.expand(&rule.replace, &mut replaced);
        return config.dn_rules().parse(&replaced).ok();
    }
    config.dn_rules().parse(&name).ok()
}

/// `%XX` escapes of a URL part decoded (an invalid one is kept as it is).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (b, hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parts_are_decoded() {
        assert_eq!(percent_decoded("(uid=a%2Ab)"), "(uid=a*b)");
        assert_eq!(percent_decoded("100%"), "100%");
    }
}
