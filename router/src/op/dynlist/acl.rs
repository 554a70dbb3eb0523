//! `by group/groupOfURLs/memberURL=DN` access rules: whether a requester is one of the
//! entries a groupOfURLs entry's memberURLs select. Asked once per operation for each group
//! the rules name (`access::subject`), never per entry.
//!
//! As slapd 2.5: its backend_group evaluates a group attribute with URL values this way
//! (dynlist or not), while a plain `by group=DN` (groupOfNames/member) does not count a
//! dynamic group's computed members, and `group/groupOfURLs/member` is refused by its
//! config parser (member is not allowed by groupOfURLs). The requester is a member when its
//! DN is in a memberURL's scope and its own entry matches the URL's filter; no access rule
//! applies to this internal look (the rules are what is being decided).

use ferrodir_proto::entry::Entry;
use ferrodir_proto::NormDn;
use ferrodir_shard::RuleTable;

use super::names::{GROUP_CLASS, MEMBER_URLS_MAX, URL_TYPE};
use super::url::{self, MemberUrl};
use crate::worker::Worker;

/// Whether `group` is a dynamic group (a groupOfURLs entry) whose memberURLs select `user`.
/// False when it isn't one, and when the user's entry can't be read.
pub(crate) async fn is_dynamic_member(
    worker: &Worker,
    rules: &RuleTable,
    group: &Entry,
    user: &NormDn,
) -> bool {
    if !ferrodir_shard::has_class(rules, group, GROUP_CLASS.as_bytes()) {
        return false;
    }
    let urls: Vec<MemberUrl> = group
        .attrs
        .iter()
        .filter(|a| rules.get(&a.name).is_some_and(|r| r.canonical == URL_TYPE))
        .flat_map(|a| a.values.iter())
        .filter_map(|v| std::str::from_utf8(v).ok().and_then(url::parse))
        .take(MEMBER_URLS_MAX)
        .collect();
    let in_scope: Vec<&MemberUrl> = urls.iter().filter(|u| u.selects_dn(rules.dn(), user)).collect();
    if in_scope.is_empty() {
        return false;
    }
    let Ok(located) = crate::resolve::locate(worker, user).await else { return false };
    let Ok(Some(record)) = worker.fetch(located.id).await else { return false };
    in_scope.iter().any(|u| ferrodir_shard::filter_matches(rules, &u.filter, &record.entry, Some(&user.dn)))
}
