//! Searches under cn=Monitor, answered by the router from [`tree::build`]: base, one-level,
//! subtree and children scopes, filters evaluated with the schema's rules (as the root DSE
//! is), attribute selection with `*`, `+` and supertypes (`monitorCounter` brings its
//! subtypes, as in slapd).
//!
//! Who may read: the rootDN and the DNs in `monitor_readers`. Everyone else gets
//! noSuchObject with no matchedDN for any base under cn=Monitor, as slapd answers with a
//! monitor rule ending `by * none`: the subtree is not disclosed.

use std::time::SystemTime;

use ferrodir_proto::entry::Entry;
use ferrodir_proto::message::{LdapResult, ProtocolOp, SearchRequest, SearchScope};
use ferrodir_proto::schema::{DnNormalizer, Schema};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::AttrSelection;

use super::tree::{self, MonitorEntry};
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::op::rootdse;
use crate::requester::Identity;

/// Whether `identity` may read cn=Monitor: the rootDN, or an entry listed in `readers`.
pub fn may_read(readers: &[NormDn], identity: &Identity) -> bool {
    match identity {
        Identity::Root(_) => true,
        Identity::User(dn) => readers.iter().any(|reader| reader.same_entry(dn)),
        Identity::Anonymous => false,
    }
}

/// Answers a search whose base is cn=Monitor or below it.
pub async fn search(
    ctx: &OpContext,
    request: &SearchRequest,
    base: &NormDn,
    attrs: &AttrSelection,
) -> LdapResultOf<LdapResult> {
    let config = &ctx.config;
    if !may_read(&config.monitor_readers, &ctx.identity) {
        return Err(LdapError::no_such_object(""));
    }
    let entries = tree::build(&tree::Setup::of(config), &config.monitor, SystemTime::now());
    let selected = select(&entries, base, request.scope, config.dn_rules())?;
    let size_limit = usize::try_from(request.size_limit).unwrap_or(usize::MAX);
    let mut sent = 0usize;
    for entry in selected {
        if !ferrodir_shard::filter_matches(&config.rules, &request.filter, &entry.entry, None) {
            continue;
        }
        if request.size_limit != 0 && sent >= size_limit {
            return Ok(LdapResult::new(ResultCode::SIZE_LIMIT_EXCEEDED, String::new(), String::new()));
        }
        if ctx.cancelled() {
            return Ok(LdapResult::success());
        }
        let (user, operational) = split(&config.schema, &entry.entry);
        ctx.respond(ProtocolOp::SearchResultEntry(rootdse::encode(&entry.dn, &user, &operational, attrs)))
            .await;
        ctx.count_entries(1);
        sent += 1;
    }
    Ok(LdapResult::success())
}

/// The entries `scope` reaches from `base`, in the tree's order; noSuchObject (with the
/// deepest existing ancestor as matchedDN) when the base isn't there. `rules`: the schema's
/// DN normaliser, which `base` was normalised by.
pub fn select<'a>(
    entries: &'a [MonitorEntry],
    base: &NormDn,
    scope: SearchScope,
    rules: &DnNormalizer,
) -> LdapResultOf<Vec<&'a MonitorEntry>> {
    let parsed: Vec<(NormDn, &MonitorEntry)> =
        entries.iter().filter_map(|e| rules.parse(&e.dn).ok().map(|dn| (dn, e))).collect();
    if !parsed.iter().any(|(dn, _)| dn.same_entry(base)) {
        let matched = parsed
            .iter()
            .filter(|(dn, _)| base.is_descendant_or_self_of(dn))
            .max_by_key(|(dn, _)| dn.len())
            .map(|(_, e)| e.dn.clone())
            .unwrap_or_default();
        return Err(LdapError::no_such_object(matched));
    }
    let depth = base.len();
    Ok(parsed
        .into_iter()
        .filter(|(dn, _)| {
            dn.is_descendant_or_self_of(base)
                && match scope {
                    SearchScope::BaseObject => dn.len() == depth,
                    SearchScope::SingleLevel => dn.len() == depth + 1,
                    SearchScope::WholeSubtree => true,
                    SearchScope::SubordinateSubtree => dn.len() > depth,
                }
        })
        .map(|(_, e)| e)
        .collect())
}

/// User and operational attributes, by the schema's usage (back-monitor's types are
/// dSAOperation: they come with `+` or by name, as in slapd).
fn split(schema: &Schema, entry: &Entry) -> (Entry, Entry) {
    let (operational, user) = entry
        .attrs
        .iter()
        .cloned()
        .partition(|a| schema.attribute(&a.name).is_some_and(|t| t.is_operational()));
    (Entry::new(user), Entry::new(operational))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::Sources;

    fn entries() -> Vec<MonitorEntry> {
        let plain = DnNormalizer::plain();
        let setup =
            tree::Setup { suffixes: vec!["dc=example,dc=com"], vendor_version: "test", dn_rules: &plain };
        tree::build(&setup, &Sources::default(), SystemTime::now())
    }

    fn dn(text: &str) -> NormDn {
        DnNormalizer::plain().parse(text).unwrap()
    }

    fn select<'a>(
        entries: &'a [MonitorEntry],
        base: &NormDn,
        scope: SearchScope,
    ) -> LdapResultOf<Vec<&'a MonitorEntry>> {
        super::select(entries, base, scope, &DnNormalizer::plain())
    }

    fn dns(found: &[&MonitorEntry]) -> Vec<String> {
        found.iter().map(|e| e.dn.clone()).collect()
    }

    #[test]
    fn monitor_scopes_reach_what_slapd_reaches() {
        let entries = entries();
        let base = select(&entries, &dn("cn=monitor"), SearchScope::BaseObject).unwrap();
        assert_eq!(dns(&base), ["cn=Monitor"]);
        let one = dns(&select(&entries, &dn("cn=Operations,cn=Monitor"), SearchScope::SingleLevel).unwrap());
        assert_eq!(one.len(), 10);
        assert!(one.contains(&"cn=Search,cn=Operations,cn=Monitor".to_string()));
        let sub = select(&entries, &dn("cn=Time,cn=Monitor"), SearchScope::WholeSubtree).unwrap();
        assert_eq!(
            dns(&sub),
            [
                "cn=Time,cn=Monitor",
                "cn=Start,cn=Time,cn=Monitor",
                "cn=Current,cn=Time,cn=Monitor",
                "cn=Uptime,cn=Time,cn=Monitor"
            ]
        );
        let children = select(&entries, &dn("cn=Time,cn=Monitor"), SearchScope::SubordinateSubtree).unwrap();
        assert_eq!(children.len(), 3);
    }

    #[test]
    fn a_missing_monitor_entry_names_its_deepest_ancestor() {
        let entries = entries();
        let err =
            select(&entries, &dn("cn=Nope,cn=Operations,cn=Monitor"), SearchScope::BaseObject).unwrap_err();
        let result = err.to_result();
        assert_eq!(result.result_code, ResultCode::NO_SUCH_OBJECT);
        assert_eq!(result.matched_dn.as_ref(), b"cn=Operations,cn=Monitor");
    }

    #[test]
    fn monitor_counters_are_operational_and_containers_know_their_children() {
        let schema = Schema::standard();
        let entries = entries();
        let search = entries.iter().find(|e| e.dn == "cn=Search,cn=Operations,cn=Monitor").unwrap();
        let (user, operational) = split(&schema, &search.entry);
        assert!(user.get("cn").is_some() && user.get("monitorOpCompleted").is_none());
        assert_eq!(operational.first_str("monitorOpCompleted"), Some("0"));
        assert_eq!(operational.first_str("hasSubordinates"), Some("FALSE"));
        let operations = entries.iter().find(|e| e.dn == "cn=Operations,cn=Monitor").unwrap();
        assert_eq!(operations.entry.first_str("hasSubordinates"), Some("TRUE"));
    }

    #[test]
    fn only_the_root_dn_and_listed_readers_may_read_the_monitor() {
        let readers = [dn("cn=Exporter,dc=example,dc=com")];
        assert!(may_read(&readers, &Identity::Root(dn("cn=Manager,dc=example,dc=com").into())));
        assert!(may_read(&readers, &Identity::User(dn("CN=exporter, dc=example,dc=com").into())));
        assert!(!may_read(&readers, &Identity::User(dn("cn=Someone,dc=example,dc=com").into())));
        assert!(!may_read(&readers, &Identity::Anonymous));
    }
}
