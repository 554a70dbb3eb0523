//! How a refresh with a cookie answers: a delete phase from the shards' delete logs
//! (shard::deletelog), or a present phase, and which entries go as `add`.
//!
//! A delete phase is possible when every shard's log reaches back to the cookie (the
//! cookie's CSN is not below any log's minimum: every delete and move after it is logged)
//! and the search's filter is `(objectClass=*)` (a modify can take an entry out of a
//! filter without leaving a record; slapd's syncprov also falls back to a present phase
//! for a search whose filter the log can't judge). It sends, as slapd's sessionlog does,
//! the uuids that left the scope first (Sync Info syncIdSet, refreshDeletes TRUE), then the
//! changed entries as `add`, and ends with refreshDeletes TRUE.
//!
//! Which uuids left: every logged delete or move after the cookie whose old DN was in
//! scope, but for entries still in scope whose entryCSN is at least the record's (moved
//! within the scope: the `add` at their new DN renames them on the consumer; an entry
//! changed later than the move is still there). A Modify DN of a container after the
//! cookie whose old DN was in scope moved a whole subtree whose members left no records
//! of their own: the refresh falls back to a present phase then (which deletes whatever
//! was not presented). An entry below a container moved after the cookie is sent as `add`
//! in either phase: its own entryCSN didn't move, but a consumer that did not hold it
//! before (the subtree moved into scope) needs it whole.
//!
//! The uuids are listed parents first: slapd's consumer deletes a syncIdSet's entries in
//! the reverse order of the list, so children go before their parents.

use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::sync::SyncInfo;
use ferrodir_proto::NormDn;
use ferrodir_shard::{LogView, Skeleton};

use super::{Located, SyncEntry};
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::{OpContext, Outbound};

/// Uuids per syncIdSet message (16 bytes each: 16 KiB).
const UUIDS_PER_MESSAGE: usize = 1024;

/// What a refresh sends.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Plan {
    /// Per entry (in the order given): sent as `add` (else `present`, or nothing in a
    /// delete phase).
    pub changed: Vec<bool>,
    /// A delete phase: the uuids that left the scope, parents first. None: a present phase.
    pub deletes: Option<Vec<[u8; 16]>>,
}

/// Whether a filter is `(objectClass=*)`, the one a delete phase can serve.
fn matches_everything(filter: &Filter) -> bool {
    match filter {
        Filter::Present(name) => name.as_ref().eq_ignore_ascii_case(b"objectClass"),
        _ => false,
    }
}

/// The refresh's points in CSN time: the consumer's cookie (its CSN for this server, as
/// text and as a clock tick) and the provider's watermark read before the scan (`now`,
/// the new cookie). None: no cookie, or nothing ever written.
pub(super) struct Points<'a> {
    pub since: Option<&'a str>,
    pub since_micros: Option<u64>,
    pub now: Option<u64>,
    /// This server's id, which its CSNs carry.
    pub server_id: u32,
    /// A mesh consumer's cookie vector and server id (off a mesh: not on).
    pub mesh: &'a super::Mesh,
}

pub(super) fn plan(
    located: &Located,
    filter: &Filter,
    points: &Points,
    log: Option<&Vec<LogView>>,
    skeleton: &Skeleton,
    entries: &[SyncEntry],
) -> Plan {
    let (since, since_micros) = (points.since, points.since_micros);
    let csn_of = |micros: u64| ferrodir_shard::format_csn(micros, points.server_id);
    let now = points.now.map(csn_of);
    let records = || log.into_iter().flatten().flat_map(|view| &view.records);
    // Roots of subtrees moved since the cookie and up to `now`, where they are now.
    let moved: Vec<NormDn> = records()
        .filter(|r| r.subtree && points.now.is_none_or(|now| r.csn <= now))
        .filter_map(|r| skeleton.get(r.id))
        .filter_map(|node| located.parse(&node.dn))
        .collect();
    let changed: Vec<bool> = entries
        .iter()
        .map(|entry| {
            // Changed after `now`: not sent whole in this refresh (its DN may come from a
            // skeleton not yet showing a later Modify DN); the next refresh, or the persist
            // stage, sends it, since the new cookie is `now`.
            if let (Some(now), Some(csn)) = (&now, &entry.csn) {
                if csn > now {
                    return false;
                }
            }
            let newer = match (since, &entry.csn) {
                // A mesh: per server id, and what the consumer wrote itself goes back as
                // `present` only.
                _ if points.mesh.on => {
                    points.mesh.newer_than_cookie(entry.csn.as_deref())
                        && !points.mesh.written_by_peer(entry.csn.as_deref())
                }
                (Some(since), Some(csn)) => csn.as_str() > since,
                _ => true,
            };
            newer || moved.iter().any(|root| entry.parsed.is_descendant_or_self_of(root))
        })
        .collect();
    let covered = match (since_micros, log) {
        (Some(since), Some(views)) => !views.is_empty() && views.iter().all(|v| v.min <= since),
        _ => false,
    };
    let subtree_left = records().any(|r| {
        r.subtree
            && located
                .parse(&r.old_dn)
                .is_some_and(|old| located.holds(&old) || located.base.is_descendant_or_self_of(&old))
    });
    if !covered || !matches_everything(filter) || subtree_left {
        return Plan { changed, deletes: None };
    }
    let mut left: Vec<(usize, u64, [u8; 16])> = Vec::new();
    for record in records() {
        let Some(old) = located.parse(&record.old_dn) else { continue };
        if !located.holds(&old) {
            continue;
        }
        let record_csn = csn_of(record.csn);
        // A mesh: an entry still in scope never left it, whatever its CSN (a rename this
        // node applied from a peer is logged at this node's clock, later than the entry's
        // CSN); the entry itself, sent when newer than the cookie, carries its name.
        let still_here = entries.iter().any(|e| {
            e.uuid == record.uuid
                && (points.mesh.on || e.csn.as_deref().is_some_and(|csn| csn >= record_csn.as_str()))
        });
        if !still_here {
            left.push((old.len(), record.csn, record.uuid));
        }
    }
    left.sort();
    let mut seen = std::collections::HashSet::new();
    let deletes =
        left.into_iter().filter(|(_, _, uuid)| seen.insert(*uuid)).map(|(_, _, uuid)| uuid).collect();
    Plan { changed, deletes: Some(deletes) }
}

/// Puts `entries` back where they were at `now` (the new cookie): the skeleton the scan
/// read may already show a container moved after it (its log record says where it was),
/// and an entry sent below the moved container's new place before the move itself is sent
/// would be moved there alone by a slapd consumer, which makes glue entries for the new
/// place and then refuses the container's own move (68). Moves are undone latest first.
pub(super) fn undo_later_moves(
    entries: &mut [SyncEntry],
    log: &[LogView],
    now: u64,
    skeleton: &Skeleton,
    located: &Located,
) {
    let mut later: Vec<&ferrodir_shard::LogRecord> =
        log.iter().flat_map(|v| &v.records).filter(|r| r.subtree && !r.deleted && r.csn > now).collect();
    if later.is_empty() {
        return;
    }
    later.sort_by_key(|r| r.csn);
    // (CSN, DN right after the move, DN before it): after a move comes the next move's old
    // DN, or where the skeleton has the container now.
    let moves: Vec<(u64, String, String)> = later
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let after = match later.iter().skip(i + 1).find(|next| next.id == r.id) {
                Some(next) => next.old_dn.clone(),
                None => skeleton.get(r.id)?.dn.to_string(),
            };
            Some((r.csn, after, r.old_dn.clone()))
        })
        .collect();
    for entry in entries.iter_mut() {
        let Ok(text) = std::str::from_utf8(&entry.dn) else { continue };
        let before = super::persist::undo_moves(text.to_string(), now, &moves);
        if before != text {
            if let Some(parsed) = located.parse(&before) {
                entry.depth = parsed.len();
                entry.parsed = parsed;
                entry.dn = ferrodir_proto::message::OctetString::from(before.into_bytes());
            }
        }
    }
}

/// Sends the delete phase's uuids as Sync Info syncIdSet messages, refreshDeletes TRUE.
pub(super) async fn send_deletes(ctx: &OpContext, uuids: &[[u8; 16]]) -> LdapResultOf<()> {
    let mut pdus = Vec::new();
    for chunk in uuids.chunks(UUIDS_PER_MESSAGE) {
        let info = SyncInfo::SyncIdSet { cookie: None, refresh_deletes: true, uuids: chunk.to_vec() };
        pdus.push(super::persist::intermediate_pdu(ctx.message_id, info)?);
    }
    if pdus.is_empty() {
        return Ok(());
    }
    ctx.out.send(Outbound::Pdus(pdus)).await.map_err(|_| LdapError::internal("the connection closed"))
}

#[cfg(test)]
mod tests {
    use ferrodir_proto::message::{OctetString, SearchScope};
    use ferrodir_shard::{EntryId, LogRecord, Scope};

    use super::*;

    const SINCE: u64 = 1_764_547_200_000_000;

    fn located(base: &str, kind: SearchScope) -> Located {
        let rules = std::sync::Arc::new(ferrodir_shard::RuleTable::default());
        Located { base: rules.dn().parse(base).unwrap(), scope: Scope::Subtree(EntryId(1)), kind, rules }
    }

    fn entry(dn: &str, uuid: u8, csn: u64) -> SyncEntry {
        let parsed = ferrodir_proto::schema::DnNormalizer::plain().parse(dn).unwrap();
        SyncEntry {
            dn: OctetString::from(dn.as_bytes().to_vec()),
            depth: parsed.len(),
            parsed,
            uuid: [uuid; 16],
            csn: Some(ferrodir_shard::format_csn(csn, 0)),
            attributes: Vec::new(),
        }
    }

    fn record(csn: u64, uuid: u8, dn: &str, deleted: bool, subtree: bool) -> LogRecord {
        LogRecord { csn, uuid: [uuid; 16], id: EntryId(u64::from(uuid)), subtree, deleted, old_dn: dn.into() }
    }

    fn everything() -> Filter {
        Filter::Present(OctetString::from_static(b"objectClass"))
    }

    fn run(log: Vec<LogView>, entries: &[SyncEntry], filter: &Filter) -> Plan {
        let since = ferrodir_shard::format_csn(SINCE, 0);
        let scope = located("ou=people,dc=example,dc=com", SearchScope::WholeSubtree);
        let skeleton = Skeleton::default();
        let points = Points {
            since: Some(&since),
            since_micros: Some(SINCE),
            now: Some(SINCE + 10),
            server_id: 0,
            mesh: &super::super::Mesh::default(),
        };
        plan(&scope, filter, &points, Some(&log), &skeleton, entries)
    }

    #[test]
    fn deletes_and_moves_out_of_scope_are_sent_and_moves_within_are_not() {
        let entries = [
            entry("uid=old,ou=people,dc=example,dc=com", 1, SINCE - 5),
            entry("uid=moved,ou=people,dc=example,dc=com", 2, SINCE + 3),
        ];
        let log = vec![
            LogView {
                min: SINCE - 100,
                records: vec![record(SINCE + 1, 7, "uid=gone,ou=people,dc=example,dc=com", true, false)],
            },
            LogView {
                min: 0,
                records: vec![
                    // Moved within the scope: its add renames it.
                    record(SINCE + 3, 2, "uid=before,ou=people,dc=example,dc=com", false, false),
                    // Moved out of the scope.
                    record(SINCE + 4, 8, "uid=away,ou=people,dc=example,dc=com", false, false),
                    // Deleted outside the scope.
                    record(SINCE + 2, 9, "uid=x,ou=others,dc=example,dc=com", true, false),
                ],
            },
        ];
        let plan = run(log, &entries, &everything());
        assert_eq!(plan.changed, [false, true]);
        assert_eq!(plan.deletes, Some(vec![[7; 16], [8; 16]]));
    }

    #[test]
    fn entries_changed_after_the_new_cookie_wait_for_the_next_refresh() {
        let entries = [
            entry("uid=a,ou=people,dc=example,dc=com", 1, SINCE + 5),
            entry("uid=b,ou=people,dc=example,dc=com", 2, SINCE + 11),
        ];
        let plan = run(vec![LogView { min: 0, records: Vec::new() }], &entries, &everything());
        assert_eq!(plan.changed, [true, false]);
    }

    #[test]
    fn a_trimmed_log_a_filter_or_a_subtree_moved_away_make_a_present_phase() {
        let entries = [entry("uid=a,ou=people,dc=example,dc=com", 1, SINCE + 1)];
        let trimmed = vec![LogView { min: SINCE + 1, records: Vec::new() }];
        assert_eq!(run(trimmed, &entries, &everything()).deletes, None);
        let fine = || vec![LogView { min: SINCE, records: Vec::new() }];
        assert_eq!(run(fine(), &entries, &everything()).deletes, Some(Vec::new()));
        let filtered = Filter::Present(OctetString::from_static(b"uid"));
        assert_eq!(run(fine(), &entries, &filtered).deletes, None);
        let subtree = vec![LogView {
            min: SINCE,
            records: vec![record(SINCE + 2, 4, "ou=team,ou=people,dc=example,dc=com", false, true)],
        }];
        assert_eq!(run(subtree, &entries, &everything()).deletes, None);
    }
}
