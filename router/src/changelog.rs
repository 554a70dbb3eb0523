//! cn=changelog: the retro changelog (draft-good-ldap-changelog) in 389-ds's layout, read
//! only, for IdM tools that poll "every change since N" (`[changelog] enabled = true`).
//!
//! - `cn=changelog` is the container; each change is `changeNumber=N,cn=changelog`, a
//!   changeLogEntry with changeNumber, targetDN, changeType, changes (LDIF), newRDN,
//!   deleteOldRDN, newSuperior, changeTime, and creatorsName (who made the change).
//! - The records live in the shards, written in the same commit as their change
//!   (`shard::write::changelog`); a search reads every shard's records in number order and
//!   evaluates the filter on each entry like any other. A filter's bounds on changeNumber
//!   (`>=`, `<=`, `=`, under `&` and `|`) narrow what is read.
//! - Only records at or below the committed watermark (`Hub::watermark`) are shown: shards
//!   commit on their own, and a record that commits later must never have a number below
//!   one a poller already saw.
//! - Paged results (RFC 2696) work as a sync tool uses them: the cookie carries the last
//!   changeNumber sent, sealed like every paged cookie (`op::paged::cookie`).
//! - Who may read: the rootDN, and whoever a rule naming the changelog's DNs grants read
//!   (`access::may_read_changelog`, entry by entry); whoever may read nothing of it gets
//!   noSuchObject, as for cn=Monitor.
//!   Writes are refused (`op::check_writable`: no naming context holds it).

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::{LdapResult, ProtocolOp, SearchRequest, SearchScope};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::{AttrSelection, ChangeKind, ChangeRecord, EntryId, RuleTable};

use crate::access::{self, Subject};
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::op::paged::cookie::Position;
use crate::op::paged::Paging;
use crate::op::rootdse;

/// The changelog's base, as 389-ds names it (the root DSE's `changelog` value).
pub const CHANGELOG_DN: &str = "cn=changelog";

/// The normalised form of [`CHANGELOG_DN`]'s one RDN.
const CHANGELOG_RDN_NORM: &str = "cn=changelog";

/// Records read from each shard per round of a search's merge.
const CHUNK: usize = 256;

/// Whether `dn` is cn=changelog or below it (compared RDN by RDN).
pub fn is_changelog_dn(dn: &NormDn) -> bool {
    dn.rdns.last().is_some_and(|rdn| rdn == CHANGELOG_RDN_NORM)
}

/// The root DSE's changelog attributes (389-ds's): where the changelog is, and its first
/// and last change numbers (0 and 0 while empty).
pub fn root_dse_attributes(hub: &ferrodir_shard::Hub) -> Vec<Attribute> {
    let (first, last) = hub.changelog_bounds();
    vec![
        Attribute::new("changelog", vec![CHANGELOG_DN.as_bytes().to_vec()]),
        Attribute::new("firstChangeNumber", vec![first.to_string().into_bytes()]),
        Attribute::new("lastChangeNumber", vec![last.to_string().into_bytes()]),
    ]
}

/// What a search's base names.
enum Base {
    Container,
    Record(u64),
}

/// Answers a search whose base is cn=changelog or below it.
pub async fn search(
    ctx: &OpContext,
    request: &SearchRequest,
    base: &NormDn,
    attrs: &AttrSelection,
    paging: Option<&mut Paging>,
) -> LdapResultOf<LdapResult> {
    let config = &ctx.config;
    let subject = access::subject(ctx).await;
    let container = container_entry();
    let container_dn = config.dn_rules().parse(CHANGELOG_DN).map_err(LdapError::invalid_dn)?;
    if !subject.is_root() && !access::changelog_has_rules(config) {
        // As cn=Monitor: not disclosed to whoever may not read it.
        return Err(LdapError::no_such_object(""));
    }
    let container_readable = access::may_read_changelog(config, &subject, &container_dn, &container);
    let position = match &paging {
        Some(paging) if paging.size == 0 => return Ok(LdapResult::success()),
        Some(paging) => paging.position(ctx)?,
        None => Position::default(),
    };
    let base = match base.len() {
        1 => Base::Container,
        2 => Base::Record(record_number(base).ok_or_else(|| LdapError::no_such_object(CHANGELOG_DN))?),
        _ => return Err(LdapError::no_such_object(CHANGELOG_DN)),
    };
    let (with_container, range) = match (&base, request.scope) {
        (Base::Container, SearchScope::BaseObject) => (true, None),
        (Base::Container, SearchScope::WholeSubtree) => (true, Some((1, u64::MAX))),
        (Base::Container, _) => (false, Some((1, u64::MAX))),
        (Base::Record(n), SearchScope::BaseObject | SearchScope::WholeSubtree) => (false, Some((*n, *n))),
        (Base::Record(_), _) => (false, None),
    };
    let mut out = Output::new(ctx, request, attrs, &subject, paging);
    // The container goes with the first page only.
    if with_container && container_readable && position.after.is_none() && out.matches(&container) {
        out.send(CHANGELOG_DN, container).await;
    }
    let Some((lo, hi)) = range else {
        return out.finish(container_readable);
    };
    // A record's own base is looked up whatever the filter says: a filter that does not
    // match it makes an empty answer, not noSuchObject.
    let (filter_lo, filter_hi) = match base {
        Base::Record(_) => (0, u64::MAX),
        Base::Container => number_range(&config.rules, &request.filter),
    };
    let after = position.after.map_or(0, |id| id.0).max(lo.max(filter_lo).saturating_sub(1));
    let upto = hi.min(filter_hi).min(ctx.worker.hub().watermark());
    let found = walk(ctx, after, upto, &mut out, position).await?;
    if let (Base::Record(_), SearchScope::BaseObject, false) = (&base, request.scope, found) {
        return Err(LdapError::no_such_object(CHANGELOG_DN));
    }
    out.finish(container_readable)
}

/// Sends the records numbered in (`after`, `upto`] that match, in number order, merging
/// every shard's; whether any record was in range at all.
async fn walk(
    ctx: &OpContext,
    mut after: u64,
    upto: u64,
    out: &mut Output<'_, '_>,
    position: Position,
) -> LdapResultOf<bool> {
    let mut found = false;
    let shards = ctx.worker.shard_count();
    while after < upto {
        let mut round = Vec::new();
        // The merge is in order up to the lowest last number of a shard that may have more.
        let mut safe = upto;
        for shard in 0..shards {
            let records = ctx.worker.changelog(shard, after, upto, CHUNK).await?;
            if records.len() == CHUNK {
                safe = safe.min(records.last().map_or(upto, |r| r.number));
            }
            round.extend(records);
        }
        round.retain(|r| r.number <= safe);
        round.sort_unstable_by_key(|r| r.number);
        found |= !round.is_empty();
        for record in round {
            if ctx.cancelled() {
                return Ok(found);
            }
            if !out.offer(&record, position).await {
                return Ok(found);
            }
        }
        after = safe;
    }
    Ok(found)
}

/// Where matching entries go: the connection, counted against the size limit and the page.
struct Output<'a, 'c> {
    ctx: &'a OpContext,
    request: &'a SearchRequest,
    attrs: &'a AttrSelection,
    subject: &'a Subject,
    paging: Option<&'c mut Paging>,
    sent: usize,
    /// Records the requester may read that matched (sent or not).
    readable: usize,
    /// The last record sent (the next page starts after it).
    last: Option<u64>,
    result: LdapResult,
}

impl<'a, 'c> Output<'a, 'c> {
    fn new(
        ctx: &'a OpContext,
        request: &'a SearchRequest,
        attrs: &'a AttrSelection,
        subject: &'a Subject,
        paging: Option<&'c mut Paging>,
    ) -> Self {
        Self {
            ctx,
            request,
            attrs,
            subject,
            paging,
            sent: 0,
            readable: 0,
            last: None,
            result: LdapResult::success(),
        }
    }

    /// The search's result: noSuchObject, as if there were no changelog, for a requester
    /// who may read neither the container nor any record it reached.
    fn finish(self, container_readable: bool) -> LdapResultOf<LdapResult> {
        if self.sent == 0 && self.readable == 0 && !container_readable {
            return Err(LdapError::no_such_object(""));
        }
        Ok(self.result)
    }

    fn matches(&self, entry: &Entry) -> bool {
        ferrodir_shard::filter_matches(&self.ctx.config.rules, &self.request.filter, entry, None)
    }

    /// Sends `record` if it matches and may be read; false once the search must stop (a
    /// full page with more to come, or the size limit).
    async fn offer(&mut self, record: &ChangeRecord, position: Position) -> bool {
        let config = &self.ctx.config;
        let entry = record_entry(record);
        if !self.matches(&entry) {
            return true;
        }
        let dn = record_dn(record.number);
        if !self.subject.is_root() {
            let Ok(norm) = config.dn_rules().parse(&dn) else { return true };
            if !access::may_read_changelog(config, self.subject, &norm, &entry) {
                return true;
            }
        }
        self.readable += 1;
        let page_full = self.paging.as_ref().is_some_and(|p| self.sent >= p.size as usize);
        if page_full {
            // One match more than the page: another page follows.
            // `after` is set even when only the container went out, so the next page does
            // not send it again.
            let next = Position {
                after: Some(EntryId(self.last.unwrap_or(0))),
                sent: position.sent.saturating_add(self.sent as u32),
                part: 0,
            };
            if let Some(paging) = self.paging.as_deref_mut() {
                paging.continue_at(self.ctx, next);
            }
            return false;
        }
        let limit = self.request.size_limit as usize;
        if limit != 0 && position.sent as usize + self.sent >= limit {
            self.result = LdapResult::new(ResultCode::SIZE_LIMIT_EXCEEDED, String::new(), String::new());
            return false;
        }
        self.send(&dn, entry).await;
        self.last = Some(record.number);
        true
    }

    async fn send(&mut self, dn: &str, entry: Entry) {
        let (user, operational) = split(&entry);
        let pdu = rootdse::encode(dn, &user, &operational, self.attrs);
        self.ctx.respond(ProtocolOp::SearchResultEntry(pdu)).await;
        self.ctx.count_entries(1);
        self.sent += 1;
    }
}

/// The changeNumber a record's DN names (`changeNumber=N,cn=changelog`).
fn record_number(dn: &NormDn) -> Option<u64> {
    let rdn = dn.dn.rdns.first()?;
    let [ava] = rdn.avas.as_slice() else { return None };
    let is_number = ava.attr.eq_ignore_ascii_case("changeNumber") || ava.attr == "2.16.840.1.113730.3.1.5";
    if !is_number {
        return None;
    }
    std::str::from_utf8(&ava.value).ok()?.parse().ok()
}

fn record_dn(number: u64) -> String {
    format!("changeNumber={number},{CHANGELOG_DN}")
}

fn attr(name: &str, value: impl Into<Vec<u8>>) -> Attribute {
    Attribute::new(name, vec![value.into()])
}

/// The container entry, as 389-ds shows it (with a class every schema here knows).
fn container_entry() -> Entry {
    Entry::new(vec![
        Attribute::new("objectClass", vec![b"top".to_vec(), b"extensibleObject".to_vec()]),
        attr("cn", "changelog"),
    ])
}

/// A record as its changeLogEntry.
pub fn record_entry(record: &ChangeRecord) -> Entry {
    let mut attrs = vec![
        Attribute::new("objectClass", vec![b"top".to_vec(), b"changeLogEntry".to_vec()]),
        attr("changeNumber", record.number.to_string()),
        attr("targetDN", record.target_dn.as_str()),
        attr("changeType", record.kind.name()),
    ];
    if !record.changes.is_empty() {
        attrs.push(attr("changes", record.changes.clone()));
    }
    if record.kind == ChangeKind::ModRdn {
        attrs.push(attr("newRDN", record.new_rdn.as_str()));
        attrs.push(attr("deleteOldRDN", if record.delete_old_rdn { "TRUE" } else { "FALSE" }));
        if let Some(superior) = &record.new_superior {
            attrs.push(attr("newSuperior", superior.as_str()));
        }
    }
    attrs.push(attr("changeTime", format!("{}Z", ferrodir_shard::civil_time(record.number / 1_000_000))));
    if !record.author.is_empty() {
        attrs.push(attr("creatorsName", record.author.as_str()));
    }
    Entry::new(attrs)
}

/// User and operational attributes (creatorsName is the one operational type here).
fn split(entry: &Entry) -> (Entry, Entry) {
    let (operational, user) =
        entry.attrs.iter().cloned().partition(|a| a.name.eq_ignore_ascii_case("creatorsName"));
    (Entry::new(user), Entry::new(operational))
}

/// The changeNumber bounds `filter` implies, [lo, hi]: an entry outside them cannot match,
/// so those records are not read. Anything it does not bound gives the whole range.
fn number_range(rules: &RuleTable, filter: &Filter) -> (u64, u64) {
    const ALL: (u64, u64) = (0, u64::MAX);
    let is_number = |desc: &[u8]| {
        std::str::from_utf8(desc)
            .ok()
            .and_then(|d| rules.get(d))
            .is_some_and(|r| r.canonical == "changenumber")
    };
    let value = |v: &[u8]| std::str::from_utf8(v).ok().and_then(|t| t.trim().parse::<u64>().ok());
    match filter {
        Filter::And(parts) => parts.iter().fold(ALL, |(lo, hi), part| {
            let (l, h) = number_range(rules, part);
            (lo.max(l), hi.min(h))
        }),
        Filter::Or(parts) if !parts.is_empty() => parts.iter().fold((u64::MAX, 0), |(lo, hi), part| {
            let (l, h) = number_range(rules, part);
            (lo.min(l), hi.max(h))
        }),
        Filter::EqualityMatch(ava) if is_number(&ava.attribute_desc) => {
            value(&ava.assertion_value).map_or(ALL, |n| (n, n))
        }
        Filter::GreaterOrEqual(ava) if is_number(&ava.attribute_desc) => {
            value(&ava.assertion_value).map_or(ALL, |n| (n, u64::MAX))
        }
        Filter::LessOrEqual(ava) if is_number(&ava.attribute_desc) => {
            value(&ava.assertion_value).map_or(ALL, |n| (0, n))
        }
        _ => ALL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::schema::Schema;

    fn rules() -> RuleTable {
        RuleTable::from_schema(&Schema::standard())
    }

    fn range(text: &str) -> (u64, u64) {
        number_range(&rules(), &ferrodir_proto::filter::parse_filter(text).unwrap())
    }

    #[test]
    fn changelog_filters_bound_the_numbers_read() {
        assert_eq!(range("(changeNumber>=5)"), (5, u64::MAX));
        assert_eq!(range("(&(changeNumber>=5)(changenumber<=9)(targetDN=x))"), (5, 9));
        assert_eq!(range("(|(changeNumber=3)(changeNumber=7))"), (3, 7));
        assert_eq!(range("(|(changeNumber=3)(cn=x))"), (0, u64::MAX));
        assert_eq!(range("(!(changeNumber>=5))"), (0, u64::MAX));
        assert_eq!(range("(2.16.840.1.113730.3.1.5<=4)"), (0, 4));
        assert_eq!(range("(objectClass=*)"), (0, u64::MAX));
    }

    #[test]
    fn a_record_is_a_change_log_entry() {
        let record = ChangeRecord {
            number: 1_700_000_000_123_456,
            kind: ChangeKind::ModRdn,
            target_dn: "uid=a,ou=people,dc=example,dc=com".into(),
            author: "cn=Manager,dc=example,dc=com".into(),
            changes: Vec::new(),
            new_rdn: "uid=b".into(),
            delete_old_rdn: true,
            new_superior: Some("ou=groups,dc=example,dc=com".into()),
        };
        let entry = record_entry(&record);
        assert_eq!(entry.first_str("changeNumber"), Some("1700000000123456"));
        assert_eq!(entry.first_str("changeType"), Some("modrdn"));
        assert_eq!(entry.first_str("deleteOldRDN"), Some("TRUE"));
        assert_eq!(entry.first_str("changeTime"), Some("20231114221320Z"));
        assert!(entry.get("changes").is_none());
        let rules = rules();
        let filter =
            ferrodir_proto::filter::parse_filter("(&(changeNumber>=1700000000000000)(changeType=MODRDN))")
                .unwrap();
        assert!(ferrodir_shard::filter_matches(&rules, &filter, &entry, None));
        let dn = ferrodir_proto::schema::DnNormalizer::from_schema(&Schema::standard());
        let base = dn.parse(&record_dn(42)).unwrap();
        assert!(is_changelog_dn(&base));
        assert_eq!(record_number(&base), Some(42));
        assert_eq!(record_number(&dn.parse("cn=x,cn=changelog").unwrap()), None);
    }
}
