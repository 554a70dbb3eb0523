//! Limits per identity class, like slapd's `limits` directive: one set for anonymous
//! sessions, one for authenticated ones, overrides for listed DNs (a replicator, a
//! monitoring account), and none of the policy limits for the rootDN.
//!
//! Two kinds of limit live here:
//! - [`ClassLimits`]: what depends on who is bound. Searches read them when they start; the
//!   server's connection loop reads the session's current set (`Session::limits`) every
//!   time it checks a frame or takes a request slot, so they switch when a Bind succeeds.
//! - [`RequestLimits`]: the shape of one request (filter depth and size, controls,
//!   attributes), the same for everyone; checked once per request by [`check_request`]
//!   before the operation runs. Going past one answers that operation with
//!   adminLimitExceeded (11) and a diagnostic naming the limit; the connection goes on.
//!
//! Where a limit says "0 = unlimited", 0 switches it off.

use std::collections::HashMap;
use std::time::Duration;

use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::{Control, LdapResult, ProtocolOp};
use ferrodir_proto::ResultCode;

use crate::requester::Identity;

/// What a search that no index can answer (a full scan of its scope) is allowed to do.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UnindexedPolicy {
    /// Run it, bounded by the class's time limit (slapd's behaviour).
    Allow,
    /// Refuse it with unwillingToPerform (53), "Search is not indexed" (389-ds's
    /// `nsslapd-require-index`).
    Refuse,
}

/// The limits of one identity class. `Copy`, so a session keeps its own copy and the
/// connection loop reads it without a lock.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ClassLimits {
    /// Entries one search may return (slapd's `size`); 0 = unlimited. A client's smaller
    /// sizeLimit wins.
    pub search_entries_max: u32,
    /// Seconds one search may run (slapd's `time`); 0 = unlimited. A client's smaller
    /// timeLimit wins.
    pub search_time_max_s: u32,
    /// Searches no index can answer: allowed (bounded by the time limit) or refused.
    pub unindexed_search: UnindexedPolicy,
    /// Entries in one page of a paged search (RFC 2696; slapd's `size.pr`); 0 = unlimited.
    /// A larger requested page is cut to this (the cookie carries the search on).
    pub paged_page_entries_max: u32,
    /// Entries over all pages of one paged search (slapd's `size.prtotal`); 0 = unlimited.
    /// The page that reaches it ends the search with sizeLimitExceeded.
    pub paged_total_entries_max: u32,
    /// The largest request PDU, header included (slapd's `sockbuf_max_incoming` and
    /// `_auth`). A larger one gets a Notice of Disconnection and the connection closes.
    pub pdu_bytes_max: usize,
    /// Requests one connection may have in flight (slapd's `conn_max_pending` and `_auth`).
    /// At the limit the server stops reading the connection until one finishes.
    pub requests_pending_max: u32,
    /// Close a connection with nothing in flight and no request for this long; 0 = never.
    pub idle_timeout_s: u64,
}

impl ClassLimits {
    /// Anonymous sessions: slapd's size and time limits, its incoming PDU size and pending
    /// requests before bind, and an idle timeout.
    pub const ANONYMOUS: Self = Self {
        search_entries_max: 500,
        search_time_max_s: 3600,
        unindexed_search: UnindexedPolicy::Allow,
        paged_page_entries_max: 500,
        paged_total_entries_max: 500,
        pdu_bytes_max: 262_143,
        requests_pending_max: 100,
        idle_timeout_s: 300,
    };

    /// Authenticated sessions: slapd's limits once bound, no idle timeout.
    pub const AUTHENTICATED: Self =
        Self { pdu_bytes_max: 4_194_303, requests_pending_max: 1000, idle_timeout_s: 0, ..Self::ANONYMOUS };

    /// The rootDN's: no size, time, paging, index or idle limit. The PDU size and pending
    /// requests stay the authenticated class's: they bound the server's memory, not what
    /// the rootDN may see.
    pub fn root(authenticated: &Self) -> Self {
        Self {
            search_entries_max: 0,
            search_time_max_s: 0,
            unindexed_search: UnindexedPolicy::Allow,
            paged_page_entries_max: 0,
            paged_total_entries_max: 0,
            idle_timeout_s: 0,
            ..*authenticated
        }
    }
}

/// Bounds on the shape of one request, the same for every identity.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Nesting of a search filter: a lone `(cn=x)` is 1, `(&(cn=x))` is 2.
    pub filter_depth_max: usize,
    /// Filter items in one search filter (AND, OR, NOT and every assertion count 1 each).
    pub filter_elements_max: usize,
    /// Controls attached to one request.
    pub controls_per_request_max: usize,
    /// Attribute descriptions in one request: a search's attribute list, an add's
    /// attributes, a modify's changes.
    pub attributes_per_request_max: usize,
    /// Updates queued in one LDAP transaction (RFC 5805, `op::transaction`); one more is
    /// adminLimitExceeded.
    pub transaction_operations_max: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        Self {
            filter_depth_max: 32,
            filter_elements_max: 4096,
            controls_per_request_max: 32,
            attributes_per_request_max: 1024,
            transaction_operations_max: 1000,
        }
    }
}

/// Every class's limits, resolved from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitsConfig {
    pub anonymous: ClassLimits,
    pub authenticated: ClassLimits,
    /// Listed identities, by normalised RDNs (`NormDn::rdns`, looked up without joining or
    /// normalising anything): the authenticated class with their overrides.
    pub identities: HashMap<Vec<String>, ClassLimits>,
    pub root: ClassLimits,
    pub request: RequestLimits,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            anonymous: ClassLimits::ANONYMOUS,
            authenticated: ClassLimits::AUTHENTICATED,
            identities: HashMap::new(),
            root: ClassLimits::root(&ClassLimits::AUTHENTICATED),
            request: RequestLimits::default(),
        }
    }
}

impl LimitsConfig {
    /// The limits `identity` runs under. The rootDN is exempt from every policy limit; a
    /// listed DN gets its own set; any other bound DN the authenticated class's.
    pub fn for_identity(&self, identity: &Identity) -> &ClassLimits {
        match identity {
            Identity::Anonymous => &self.anonymous,
            Identity::Root(_) => &self.root,
            Identity::User(dn) => self.identities.get(dn.rdns.as_slice()).unwrap_or(&self.authenticated),
        }
    }

    /// The most requests any class may have pending: the size of a session's slot pool.
    pub fn requests_pending_ceiling(&self) -> u32 {
        self.classes().map(|c| c.requests_pending_max.max(1)).max().unwrap_or(1)
    }

    /// The largest PDU any class may send.
    pub fn pdu_bytes_ceiling(&self) -> usize {
        self.classes().map(|c| c.pdu_bytes_max).max().unwrap_or(0)
    }

    fn classes(&self) -> impl Iterator<Item = &ClassLimits> {
        [&self.anonymous, &self.authenticated, &self.root].into_iter().chain(self.identities.values())
    }
}

/// The refusal to send if a request is shaped past `limits`: adminLimitExceeded with a
/// diagnostic that names the limit (RFC 4511 §4.1.9: the server's administrative limit).
pub fn check_request(
    limits: &RequestLimits,
    op: &ProtocolOp,
    controls: Option<&[Control]>,
) -> Option<LdapResult> {
    if let Some(refused) = check_controls(limits, controls) {
        return Some(refused);
    }
    let attributes = match op {
        ProtocolOp::SearchRequest(search) => {
            if let Some(refused) = check_filter(limits, &search.filter) {
                return Some(refused);
            }
            search.attributes.len()
        }
        ProtocolOp::AddRequest(add) => add.attributes.len(),
        ProtocolOp::ModifyRequest(modify) => modify.changes.len(),
        _ => 0,
    };
    (attributes > limits.attributes_per_request_max).then(|| {
        refusal(format!(
            "{attributes} attributes exceed attributes_per_request_max ({})",
            limits.attributes_per_request_max
        ))
    })
}

/// The refusal to send if a request (a Bind included) carries too many controls.
pub fn check_controls(limits: &RequestLimits, controls: Option<&[Control]>) -> Option<LdapResult> {
    let count = controls.map_or(0, <[Control]>::len);
    (count > limits.controls_per_request_max).then(|| {
        refusal(format!(
            "{count} controls exceed controls_per_request_max ({})",
            limits.controls_per_request_max
        ))
    })
}

/// Walks `filter` with an explicit stack (worker threads have small stacks), counting items
/// and depth, and stops as soon as either limit is passed.
fn check_filter(limits: &RequestLimits, filter: &Filter) -> Option<LdapResult> {
    let mut stack: Vec<(&Filter, usize)> = vec![(filter, 1)];
    let mut elements = 0usize;
    while let Some((item, depth)) = stack.pop() {
        elements += 1;
        if elements > limits.filter_elements_max {
            return Some(refusal(format!(
                "filter has more than filter_elements_max ({}) items",
                limits.filter_elements_max
            )));
        }
        if depth > limits.filter_depth_max {
            return Some(refusal(format!(
                "filter nests deeper than filter_depth_max ({})",
                limits.filter_depth_max
            )));
        }
        match item {
            Filter::And(parts) | Filter::Or(parts) => stack.extend(parts.iter().map(|p| (p, depth + 1))),
            Filter::Not(inner) => stack.push((inner, depth + 1)),
            _ => {}
        }
    }
    None
}

fn refusal(message: String) -> LdapResult {
    LdapResult::new(ResultCode::ADMIN_LIMIT_EXCEEDED, String::new(), message)
}

/// The bounds on sorting (`[limits]` sort_*).
#[derive(Debug, Clone, Copy)]
pub struct SortLimits {
    /// Matches one sorted search may collect; more: adminLimitExceeded (11).
    pub entries_max: usize,
    /// Keys in one sort control; more: unwillingToPerform (53). sssvlv's default, 5.
    pub keys_max: usize,
    /// Sorted searches running or kept per connection; one more: busy (51). sssvlv's 5.
    pub sessions_per_connection_max: usize,
    /// A kept session unused this long is dropped.
    pub session_idle: Duration,
}

impl Default for SortLimits {
    fn default() -> Self {
        Self {
            entries_max: 100_000,
            keys_max: 5,
            sessions_per_connection_max: 5,
            session_idle: Duration::from_secs(300),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::message::OctetString;

    fn present() -> Filter {
        Filter::Present(OctetString::from_static(b"objectClass"))
    }

    fn nested(depth: usize) -> Filter {
        (1..depth).fold(present(), |inner, _| Filter::And(vec![inner]))
    }

    #[test]
    fn filter_depth_and_size_are_bounded() {
        let limits =
            RequestLimits { filter_depth_max: 3, filter_elements_max: 4, ..RequestLimits::default() };
        assert!(check_filter(&limits, &nested(3)).is_none());
        let deep = check_filter(&limits, &nested(4)).unwrap();
        assert_eq!(deep.result_code, ResultCode::ADMIN_LIMIT_EXCEEDED);
        assert!(check_filter(&limits, &Filter::Or(vec![present(), present(), present()])).is_none());
        assert!(
            check_filter(&limits, &Filter::Or(vec![present(), present(), present(), present()])).is_some()
        );
    }

    #[test]
    fn identities_resolve_by_normalized_dn() {
        let mut config = LimitsConfig::default();
        let replicator = ClassLimits { search_entries_max: 0, ..ClassLimits::AUTHENTICATED };
        let rules = ferrodir_proto::schema::DnNormalizer::plain();
        let listed = rules.parse("cn=Replicator,dc=example,dc=com").unwrap();
        config.identities.insert(listed.rdns, replicator);
        let same = rules.parse("CN=replicator, DC=Example,DC=com").unwrap();
        assert_eq!(config.for_identity(&Identity::User(same.into())), &replicator);
        let other = rules.parse("uid=alice,dc=example,dc=com").unwrap();
        assert_eq!(config.for_identity(&Identity::User(other.into())), &ClassLimits::AUTHENTICATED);
        assert_eq!(config.for_identity(&Identity::Anonymous), &ClassLimits::ANONYMOUS);
        assert_eq!(config.for_identity(&Identity::Root(Default::default())).search_entries_max, 0);
        assert_eq!(config.requests_pending_ceiling(), 1000);
    }
}
