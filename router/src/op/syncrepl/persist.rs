//! The persist stage of refreshAndPersist: after the refresh, a Sync Info refreshPresent
//! (refreshDone TRUE) with the cookie, then every committed change in scope, as the shard
//! actors publish them (shard::watermark's feed):
//! - an entry added, or moved or modified into scope: `add`, the whole entry;
//! - an entry modified or renamed within scope: `modify`, the whole entry at its new DN
//!   (a slapd consumer finds it by entryUUID and renames it);
//! - an entry deleted, or moved or modified out of scope: `delete`, its old DN and uuid.
//!
//! - a container moved by a Modify DN: the entries of its subtree whose place in or out of
//!   the scope changed with it, as `add` (parents first) or `delete` (children first);
//!   within the scope, the `modify` of the container renames its subtree on the consumer.
//!
//! Changes go out in CSN order across shards: the search reads the watermark, then drains
//! its feed, and sends only the changes at or below that watermark, in CSN order, holding
//! the rest for a later round. The shards feed a batch before they publish its CSN, so
//! every change at or below the watermark has been fed by then: no shard can still commit
//! a lower CSN than one sent. After a round, a Sync Info newcookie carries the watermark.
//! At most [`HELD_MAX`] changes wait for the watermark; more drop the consumer as a slow
//! one is dropped.
//!
//! Entries carry the attributes the Sync Request's search asked for (`*`, `+`, names), less
//! the computed ones, as in the refresh.
//!
//! A consumer that falls more than [`FEED_BATCHES`] batches behind (its connection too slow
//! to take what the shards commit) is dropped: the feed never waits for it. Its search ends
//! with e-syncRefreshRequired (4096, RFC 4533 §3.4.2): a slapd consumer answers with a
//! fresh refresh from its cookie, which is what it needs (busy would have it retry the
//! same way after its retry interval, later). Abandon, Unbind and the connection closing
//! end the search without a response.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferrodir_proto::message::sync::{Cookie, SyncInfo, SyncStateKind, SYNC_INFO_OID};
use ferrodir_proto::message::{
    encode_message, Control, IntermediateResponse, LdapMessage, LdapResult, OctetString, PartialAttribute,
    ProtocolOp, SearchRequest, SearchScope,
};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::{
    uuid_octets, AttrSelection, Change, EntryRecord, FeedBatch, Scope, Skeleton, Subscription,
};

use super::{entry_pdu, stats, Located, LEFT_OUT};
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::{OpContext, Outbound};

/// How many committed batches a persist search may fall behind before it is dropped.
pub const FEED_BATCHES: usize = 4096;

/// How many changes may wait for the watermark (a shard with a batch pending for long).
pub const HELD_MAX: usize = 65_536;

/// RFC 4533 §3.4.2 e-syncRefreshRequired.
pub const SYNC_REFRESH_REQUIRED: ResultCode = ResultCode(4096);

/// How often an idle persist search looks at its stop signal and the watermark.
const IDLE_CHECK: Duration = Duration::from_millis(200);
/// How soon a persist search holding changes looks at the watermark again. A shard feeds
/// a batch before its CSN counts in the watermark, so a search woken by the feed can read
/// the watermark just before it moves: without a quick second look, that change waited for
/// the next batch or IDLE_CHECK (the lag p99 of bench/repl.sh was the write interval).
const HELD_RECHECK: Duration = Duration::from_millis(1);
/// Before that timer (whose tick is a millisecond or two in tokio), a few yields of the
/// worker: the shard publishes the watermark microseconds after the feed, on its own
/// thread, so a look after a yield or two usually finds it passed and the change goes out
/// at once (issue #26: the mesh's lag p99 was within a timer tick of slapd's).
const HELD_YIELDS: usize = 32;

/// A committed change waiting to go out, with the clock tick of its CSN.
struct Held {
    micros: u64,
    change: Change,
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn follow(
    ctx: &OpContext,
    located: &Located,
    request: &SearchRequest,
    mut cookie: Cookie,
    mut subscription: Subscription,
    delete_phase: bool,
    registration: stats::Registration,
    mesh: &super::Mesh,
) -> LdapResultOf<(LdapResult, Option<Vec<Control>>)> {
    let formatted = Some(cookie.format().into_bytes());
    let info = if delete_phase {
        SyncInfo::RefreshDelete { cookie: formatted, refresh_done: true }
    } else {
        SyncInfo::RefreshPresent { cookie: formatted, refresh_done: true }
    };
    intermediate(ctx, info).await?;
    registration.persisting();
    let config = &ctx.config;
    let attrs = AttrSelection::from_request(&request.attributes, false, &config.rules, &config.schema);
    let mut held: Vec<Held> = Vec::new();
    // The CSN of the last cookie sent: a change between the refresh's watermark and now
    // still moves the next one.
    let mut last = cookie.csn_for(ctx.worker.hub().clock().server_id()).map(str::to_string);
    loop {
        if ctx.cancelled() {
            return Ok((LdapResult::success(), None));
        }
        if subscription.dropped.load(Ordering::SeqCst) || held.len() > HELD_MAX {
            return Ok((dropped(ctx), None));
        }
        let first = if watermark_passes_soon(ctx, &held).await {
            None
        } else {
            let wait = if held.is_empty() { IDLE_CHECK } else { HELD_RECHECK };
            let waited = tokio::select! {
                waited = tokio::time::timeout(wait, subscription.batches.recv()) => waited,
                // Abandoned, cancelled or closed: stop now, not at the next check.
                () = ctx.cancel.wait() => return Ok((LdapResult::success(), None)),
            };
            match waited {
                Ok(Some(batch)) => Some(batch),
                Ok(None) => return Ok((dropped(ctx), None)),
                Err(_) => None,
            }
        };
        // The watermark before the drain: every change at or below it has been fed.
        let (mark, watermark) = watermarks(ctx);
        hold(first.into_iter().chain(std::iter::from_fn(|| subscription.batches.try_recv().ok())), &mut held);
        let ready = take_ready(ctx, &mut subscription, &mut held, mark).await;
        registration.unsent_since(ready.first().or(held.first()).map_or(0, |h| h.micros));
        let mut pdus = changes(ctx, located, request, &attrs, &ready, &held, mesh).await?;
        // Never past a change still held: read after the watermark, the vector may already
        // name a change that is held for the next round.
        let own_sid = ctx.worker.hub().clock().server_id();
        let watermark = watermark.map(|vector| sent_vector(&vector, &held, own_sid));
        if watermark.is_some() && watermark != last {
            if let Some(csn) = &watermark {
                for csn in csn.split(';') {
                    cookie.set_csn(csn);
                }
            }
            last = watermark;
            pdus.push(intermediate_pdu(ctx.message_id, SyncInfo::NewCookie(cookie.format().into_bytes()))?);
        }
        if !pdus.is_empty() && ctx.out.send(Outbound::Pdus(pdus)).await.is_err() {
            return Ok((LdapResult::success(), None));
        }
        registration.unsent_since(held.first().map_or(0, |h| h.micros));
    }
}

/// Whether the watermark passes the oldest held change within [`HELD_YIELDS`] yields of
/// this worker (false at once when nothing is held).
async fn watermark_passes_soon(ctx: &OpContext, held: &[Held]) -> bool {
    let Some(oldest) = held.first().map(|h| h.micros) else { return false };
    for _ in 0..HELD_YIELDS {
        if ctx.worker.hub().watermark() >= oldest {
            return true;
        }
        tokio::task::yield_now().await;
    }
    false
}

/// The watermark as a clock tick (what may be sent), and as the CSN the next cookie carries.
fn watermarks(ctx: &OpContext) -> (u64, Option<String>) {
    let hub = ctx.worker.hub();
    let mark = hub.watermark();
    // A replica hands on its provider's state as the cookie (`current_csn`), so that a
    // chain shows one set of CSNs; its own watermark still says what may be sent.
    let watermark = if hub.multi_provider() {
        // A mesh node's cookie is the vector (';'-joined here, split when set).
        let csns = hub.context_csns();
        (!csns.is_empty()).then(|| csns.join(";"))
    } else if ctx.config.replicated.is_empty() {
        (mark > 0).then(|| hub.clock().csn_of(mark))
    } else {
        super::current_csn(hub)
    };
    (mark, watermark)
}

/// The cookie's CSNs (`vector`, ';'-joined) capped below the changes still `held`: each
/// server id's CSN just below the oldest held change of that id (a change's id is its
/// entryCSN's; a delete's, this node's `own_sid`). A mesh node's vector is its contextCSN,
/// read after the watermark, so it can name a change committed since, held for the next
/// round; a consumer given that cookie first would take the change as already had when it
/// comes (slapd ignores an entry whose entryCSN is not past its cookie's for that id, and
/// its consumers of the other nodes share that state, so the entry was lost there).
fn sent_vector(vector: &str, held: &[Held], own_sid: u32) -> String {
    let sid_of = |h: &Held| {
        h.change
            .new
            .as_ref()
            .and_then(|r| r.entry.first_str("entryCSN"))
            .and_then(ferrodir_proto::message::sync::csn_sid)
            .unwrap_or(own_sid)
    };
    let capped: Vec<String> = vector
        .split(';')
        .map(|csn| {
            let sid = ferrodir_proto::message::sync::csn_sid(csn);
            let oldest = held.iter().filter(|h| Some(sid_of(h)) == sid).map(|h| h.micros).min();
            match (oldest, ferrodir_shard::micros_of_csn(csn), sid) {
                (Some(oldest), Some(micros), Some(sid)) if micros >= oldest => {
                    ferrodir_shard::format_csn(oldest.saturating_sub(1), sid)
                }
                _ => csn.to_string(),
            }
        })
        .collect();
    capped.join(";")
}

/// Adds the changes of `batches` to `held`, in CSN order.
fn hold(batches: impl Iterator<Item = Arc<FeedBatch>>, held: &mut Vec<Held>) {
    for batch in batches {
        for change in &batch.changes {
            held.push(Held { micros: change_micros(change, batch.csn_max), change: change.clone() });
        }
    }
    held.sort_by_key(|h| h.micros);
}

/// Takes the held changes at or below `mark` out of `held`, in CSN order.
async fn take_ready(
    ctx: &OpContext,
    subscription: &mut Subscription,
    held: &mut Vec<Held>,
    mark: u64,
) -> Vec<Held> {
    let ready_count = held.partition_point(|h| h.micros <= mark);
    let ready: Vec<Held> = held.drain(..ready_count).collect();
    if !ready.is_empty() {
        // A moved container's skeleton is published after its move commits: the DNs
        // of these changes are read from the skeleton once it shows every move...
        super::settle_tree(ctx).await;
        // ...and every move it shows is then in the feed (fed before it was published):
        // those later than a change are undone for that change's DNs (`changes`).
        hold(std::iter::from_fn(|| subscription.batches.try_recv().ok()), held);
    }
    ready
}

/// The clock tick of a change's CSN: a delete's or a move's own, else the entry's
/// entryCSN, else its batch's highest.
fn change_micros(change: &Change, batch_max: u64) -> u64 {
    if change.csn > 0 {
        return change.csn;
    }
    change
        .new
        .as_ref()
        .and_then(|r| r.entry.first_str("entryCSN"))
        .and_then(ferrodir_shard::micros_of_csn)
        .unwrap_or(batch_max)
}

fn dropped(ctx: &OpContext) -> LdapResult {
    ctx.config.syncrepl.refresh_required();
    LdapResult::new(
        SYNC_REFRESH_REQUIRED,
        String::new(),
        "the consumer fell behind the provider's change feed; refresh required",
    )
}

/// The changes in scope, in CSN order (they come sorted), as entries with their Sync State.
async fn changes(
    ctx: &OpContext,
    located: &Located,
    request: &SearchRequest,
    attrs: &AttrSelection,
    ready: &[Held],
    later: &[Held],
    mesh: &super::Mesh,
) -> LdapResultOf<Vec<Bytes>> {
    let skeleton = ctx.worker.skeleton();
    let rules = &ctx.config.rules;
    let hidden = Default::default();
    // The skeleton already shows the moves, so a change before one gets its DN with the
    // move undone.
    let moves = moves(&skeleton, ready.iter().chain(later));
    let mut out: Vec<Bytes> = Vec::new();
    for held in ready {
        let change = &held.change;
        let judge = |record: &EntryRecord| -> Option<(String, NormDn)> {
            let text = undo_moves(skeleton.dn_of_child(record.parent, &record.rdn), held.micros, &moves);
            let dn = located.parse(&text)?;
            let wanted = located.holds(&dn)
                && ferrodir_shard::filter_matches_entry(
                    rules,
                    &request.filter,
                    &record.entry,
                    Some(&dn.dn),
                    &hidden,
                    change.id,
                );
            wanted.then_some((text, dn))
        };
        if let (Some(old), Some(new)) = (&change.old, &change.new) {
            if new.is_container() && (old.parent != new.parent || old.rdn_norm != new.rdn_norm) {
                let old_dn = skeleton.dn_of_child(old.parent, &old.rdn);
                let new_dn = skeleton.dn_of_child(new.parent, &new.rdn);
                if let Some(pdus) = subtree_moved(ctx, located, request, change, &old_dn, &new_dn).await? {
                    out.extend(pdus);
                    continue;
                }
            }
        }
        let before = change.old.as_deref().and_then(judge);
        let after = change.new.as_deref().and_then(judge);
        let (state, record, dn) = match (&change.new, after, before) {
            (Some(new), Some((dn, _)), None) => (SyncStateKind::Add, new, dn),
            (Some(new), Some((dn, _)), Some(_)) => (SyncStateKind::Modify, new, dn),
            (_, None, Some((dn, _))) => match &change.old {
                Some(old) => (SyncStateKind::Delete, old, dn),
                None => continue,
            },
            _ => continue,
        };
        if state != SyncStateKind::Delete && mesh.written_by_peer(record.entry.first_str("entryCSN")) {
            // The consumer's own change, come back through this node: never sent back.
            continue;
        }
        let Some(uuid) =
            record.entry.get("entryUUID").and_then(|a| a.values.first()).and_then(|v| uuid_octets(v))
        else {
            continue;
        };
        let attributes = match state {
            SyncStateKind::Delete => Vec::new(),
            _ => content(rules, attrs, record),
        };
        out.push(entry_pdu(ctx.message_id, OctetString::from(dn.into_bytes()), attributes, state, uuid)?);
    }
    ctx.count_entries(out.len());
    Ok(out)
}

/// The containers `changes` moved: (CSN, DN now, DN before).
fn moves<'h>(skeleton: &Skeleton, changes: impl Iterator<Item = &'h Held>) -> Vec<(u64, String, String)> {
    changes
        .filter_map(|h| {
            let (old, new) = (h.change.old.as_ref()?, h.change.new.as_ref()?);
            let moved = new.is_container() && (old.parent != new.parent || old.rdn_norm != new.rdn_norm);
            moved.then(|| {
                (
                    h.micros,
                    skeleton.dn_of_child(new.parent, &new.rdn),
                    skeleton.dn_of_child(old.parent, &old.rdn),
                )
            })
        })
        .collect()
}

/// `dn` as it was at `micros`: the moves of containers above it after that CSN undone,
/// latest first.
pub(super) fn undo_moves(mut dn: String, micros: u64, moves: &[(u64, String, String)]) -> String {
    for (_, now, before) in moves.iter().rev().filter(|m| m.0 > micros) {
        if dn == *now {
            dn.clone_from(before);
        } else if let Some(below) = dn.strip_suffix(now.as_str()).filter(|b| b.ends_with(',')) {
            dn = format!("{below}{before}");
        }
    }
    dn
}

/// A container moved from `old_dn` to `new_dn`: every entry of its subtree (read now,
/// at its new place) whose membership of the scope changed, as `add` (parents first) or
/// `delete` at its old DN (children first), and the container itself as `modify` when it
/// stays in scope (a slapd consumer renames it, and its subtree with it). None when the
/// move can't change any entry's membership (neither place meets the scope; or both lie
/// within a subtree scope): the container alone is judged, as any change.
async fn subtree_moved(
    ctx: &OpContext,
    located: &Located,
    request: &SearchRequest,
    change: &Change,
    old_dn: &str,
    new_dn: &str,
) -> LdapResultOf<Option<Vec<Bytes>>> {
    let (Some(old_root), Some(new_root)) = (located.parse(old_dn), located.parse(new_dn)) else {
        return Ok(None);
    };
    let meets = |root: &NormDn| located.holds(root) || located.base.is_descendant_or_self_of(root);
    let whole = matches!(located.kind, SearchScope::WholeSubtree | SearchScope::SubordinateSubtree);
    if !(meets(&old_root) || meets(&new_root))
        || (whole && located.holds(&old_root) && located.holds(&new_root))
    {
        return Ok(None);
    }
    let moved = Located {
        base: new_root.clone(),
        scope: Scope::Subtree(change.id),
        kind: SearchScope::WholeSubtree,
        rules: located.rules.clone(),
    };
    let subtree_request = SearchRequest {
        base_object: OctetString::from(new_dn.as_bytes().to_vec()),
        scope: SearchScope::WholeSubtree,
        ..request.clone()
    };
    let entries = super::collect(ctx, &subtree_request, &moved).await?;
    let mut adds = Vec::new();
    let mut deletes = Vec::new();
    for entry in entries {
        let Ok(text) = std::str::from_utf8(&entry.dn) else { continue };
        // The entry's DN below the container, over the container's old DN.
        let Some(below) = text.len().checked_sub(new_dn.len()).and_then(|cut| text.get(..cut)) else {
            continue;
        };
        let old_text = format!("{below}{old_dn}");
        let Some(old) = located.parse(&old_text) else { continue };
        let (was_in, is_in) = (located.holds(&old), located.holds(&entry.parsed));
        if is_in && !was_in {
            adds.push(entry_pdu(ctx.message_id, entry.dn, entry.attributes, SyncStateKind::Add, entry.uuid)?);
        } else if was_in && !is_in {
            let dn = OctetString::from(old_text.into_bytes());
            deletes.push(entry_pdu(ctx.message_id, dn, Vec::new(), SyncStateKind::Delete, entry.uuid)?);
        } else if is_in && entry.depth == new_root.len() {
            adds.push(entry_pdu(
                ctx.message_id,
                entry.dn,
                entry.attributes,
                SyncStateKind::Modify,
                entry.uuid,
            )?);
        }
    }
    // collect() gives parents first.
    deletes.reverse();
    adds.extend(deletes);
    Ok(Some(adds))
}

/// An entry's stored attributes the search asked for, but those sync content leaves out.
fn content(
    rules: &ferrodir_shard::RuleTable,
    attrs: &AttrSelection,
    record: &EntryRecord,
) -> Vec<PartialAttribute> {
    record
        .entry
        .attrs
        .iter()
        .filter(|a| {
            let name = a.name.to_ascii_lowercase();
            !LEFT_OUT.contains(&name.split(';').next().unwrap_or_default())
                && attrs.selects_stored(rules, &a.name)
        })
        .map(|a| PartialAttribute {
            r#type: OctetString::from(a.name.as_bytes().to_vec()),
            vals: a.values.iter().map(|v| OctetString::from(v.clone())).collect(),
        })
        .collect()
}

pub(super) fn intermediate_pdu(message_id: u32, info: SyncInfo) -> LdapResultOf<Bytes> {
    let message = LdapMessage {
        message_id,
        protocol_op: ProtocolOp::IntermediateResponse(IntermediateResponse {
            response_name: Some(OctetString::from(SYNC_INFO_OID.as_bytes())),
            response_value: Some(OctetString::from(info.encode_value())),
        }),
        controls: None,
    };
    encode_message(&message)
        .map(Bytes::from)
        .map_err(|e| LdapError::internal(format!("encoding a Sync Info message: {e}")))
}

async fn intermediate(ctx: &OpContext, info: SyncInfo) -> LdapResultOf<()> {
    let pdu = intermediate_pdu(ctx.message_id, info)?;
    ctx.out.send(Outbound::Pdu(pdu)).await.map_err(|_| LdapError::internal("the connection closed"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{sent_vector, undo_moves, Held};

    /// A cookie names no CSN of a server id at or past a change of that id still held.
    #[test]
    fn the_cookie_stops_below_the_changes_still_held() {
        use ferrodir_proto::entry::{Attribute, Entry};
        use ferrodir_shard::{format_csn, Change, EntryId, EntryRecord};
        let change = |micros: u64, sid: u32| {
            let entry =
                Entry::new(vec![Attribute::new("entryCSN", vec![format_csn(micros, sid).into_bytes()])]);
            let record = EntryRecord {
                parent: EntryId::ROOT,
                rdn: String::new(),
                rdn_norm: String::new(),
                flags: 0,
                entry,
            };
            Held { micros, change: Change { id: EntryId::ROOT, old: None, new: Some(record.into()), csn: 0 } }
        };
        let vector = [format_csn(500, 1), format_csn(600, 2), format_csn(700, 3)].join(";");
        // Nothing held: the vector as it is.
        assert_eq!(sent_vector(&vector, &[], 1), vector);
        // Sid 1's change at 450 and sid 3's at 700 are held; sid 2's is older than its CSN's.
        let held = [change(450, 1), change(700, 3), change(800, 2)];
        let capped = [format_csn(449, 1), format_csn(600, 2), format_csn(699, 3)].join(";");
        assert_eq!(sent_vector(&vector, &held, 1), capped);
        // A held delete (no entry) counts as this node's own.
        let delete =
            Held { micros: 300, change: Change { id: EntryId::ROOT, old: None, new: None, csn: 300 } };
        assert!(sent_vector(&vector, &[delete], 2).contains(&format_csn(299, 2)));
    }

    #[test]
    fn later_moves_are_undone_for_earlier_changes() {
        let moves = vec![
            (10, "ou=division,ou=people,dc=x".to_string(), "ou=dept,ou=people,dc=x".to_string()),
            (20, "ou=division,ou=others,dc=x".to_string(), "ou=division,ou=people,dc=x".to_string()),
        ];
        // The skeleton shows both moves; a change at 15 happened between them.
        let now = "cn=m0,ou=division,ou=others,dc=x".to_string();
        assert_eq!(undo_moves(now.clone(), 15, &moves), "cn=m0,ou=division,ou=people,dc=x");
        assert_eq!(undo_moves(now.clone(), 5, &moves), "cn=m0,ou=dept,ou=people,dc=x");
        assert_eq!(undo_moves(now.clone(), 25, &moves), now);
        assert_eq!(undo_moves("ou=division,ou=others,dc=x".into(), 15, &moves), "ou=division,ou=people,dc=x");
        // A name that merely ends alike is not below the container.
        assert_eq!(
            undo_moves("ou=xdivision,ou=others,dc=x".into(), 15, &moves),
            "ou=xdivision,ou=others,dc=x"
        );
    }
}
