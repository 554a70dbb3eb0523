//! The persist stage of refreshAndPersist: after the refresh, a Sync Info refreshPresent
//! (refreshDone TRUE) with the cookie, then every committed change in scope, as the shard
//! actors publish them (shard::watermark's feed):
//! - an entry added, or moved or modified into scope: `add`, the whole entry;
//! - an entry modified or renamed within scope: `modify`, the whole entry at its new DN
//!   (a slapd consumer finds it by entryUUID and renames it);
//! - an entry deleted, or moved or modified out of scope: `delete`, its old DN and uuid.
//!
//! Changes are sent in rounds: whatever the feed holds when the search wakes, sorted by
//! CSN across shards. After a round, a Sync Info newcookie carries the watermark read
//! before the round was drained: the shards feed a batch before they publish its CSN, so
//! every change at or below that watermark was in the round or an earlier one.
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
    ProtocolOp, SearchRequest,
};
use ferrodir_proto::ResultCode;
use ferrodir_shard::eval;
use ferrodir_shard::record::EntryRecord;
use ferrodir_shard::watermark::{FeedBatch, Subscription};

use super::{entry_pdu, uuid_octets, Located, LEFT_OUT};
use crate::error::{LdapError, LdapResultOf};
use crate::session::{OpContext, Outbound};

/// How many committed batches a persist search may fall behind before it is dropped.
pub const FEED_BATCHES: usize = 4096;

/// RFC 4533 §3.4.2 e-syncRefreshRequired.
pub const SYNC_REFRESH_REQUIRED: ResultCode = ResultCode(4096);

/// How often an idle persist search looks at its stop signal.
const IDLE_CHECK: Duration = Duration::from_millis(200);

pub(super) async fn follow(
    ctx: &OpContext,
    located: &Located,
    request: &SearchRequest,
    mut cookie: Cookie,
    mut subscription: Subscription,
) -> LdapResultOf<(LdapResult, Option<Vec<Control>>)> {
    let info = SyncInfo::RefreshPresent { cookie: Some(cookie.format().into_bytes()), refresh_done: true };
    intermediate(ctx, info).await?;
    let mut last = super::current_csn();
    loop {
        if ctx.cancelled() {
            return Ok((LdapResult::success(), None));
        }
        if subscription.dropped.load(Ordering::SeqCst) {
            return Ok((dropped(), None));
        }
        let first = match tokio::time::timeout(IDLE_CHECK, subscription.batches.recv()).await {
            Ok(Some(batch)) => Some(batch),
            Ok(None) => return Ok((dropped(), None)),
            Err(_) => None,
        };
        // The watermark before the drain: the round holds every change at or below it.
        let watermark = super::current_csn();
        let mut round: Vec<Arc<FeedBatch>> = first.into_iter().collect();
        while let Ok(batch) = subscription.batches.try_recv() {
            round.push(batch);
        }
        let mut pdus = changes(ctx, located, request, &round)?;
        if watermark.is_some() && watermark != last {
            if let Some(csn) = &watermark {
                cookie.set_csn(csn);
            }
            last = watermark;
            pdus.push(intermediate_pdu(ctx.message_id, SyncInfo::NewCookie(cookie.format().into_bytes()))?);
        }
        if !pdus.is_empty() && ctx.out.send(Outbound::Pdus(pdus)).await.is_err() {
            return Ok((LdapResult::success(), None));
        }
    }
}

fn dropped() -> LdapResult {
    LdapResult::new(
        SYNC_REFRESH_REQUIRED,
        String::new(),
        "the consumer fell behind the provider's change feed; refresh required",
    )
}

/// The round's changes in scope, in CSN order, as entries with their Sync State.
fn changes(
    ctx: &OpContext,
    located: &Located,
    request: &SearchRequest,
    round: &[Arc<FeedBatch>],
) -> LdapResultOf<Vec<Bytes>> {
    let tree = ctx.worker.tree();
    let rules = &ctx.worker.config.rules;
    let hidden = Default::default();
    let mut out: Vec<(String, Bytes)> = Vec::new();
    for batch in round {
        let batch_csn = ferrodir_shard::stamp::csn_of(batch.csn_max);
        for change in &batch.changes {
            let judge = |record: &EntryRecord| -> Option<(String, ferrodir_proto::Dn)> {
                let text = tree.dn_of_child(record.parent, &record.rdn);
                let dn = ferrodir_proto::Dn::parse(&text).ok()?;
                let wanted = located.holds(&dn)
                    && eval::matches_entry(
                        rules,
                        &request.filter,
                        &record.entry,
                        Some(&dn),
                        &hidden,
                        change.id,
                    );
                wanted.then_some((text, dn))
            };
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
            let Some(uuid) =
                record.entry.get("entryUUID").and_then(|a| a.values.first()).and_then(|v| uuid_octets(v))
            else {
                continue;
            };
            let csn = match state {
                SyncStateKind::Delete => batch_csn.clone(),
                _ => record.entry.first_str("entryCSN").map_or_else(|| batch_csn.clone(), str::to_string),
            };
            let attributes = match state {
                SyncStateKind::Delete => Vec::new(),
                _ => content(record),
            };
            let pdu = entry_pdu(ctx.message_id, OctetString::from(dn.into_bytes()), attributes, state, uuid)?;
            out.push((csn, pdu));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    ctx.count_entries(out.len());
    Ok(out.into_iter().map(|(_, pdu)| pdu).collect())
}

/// An entry's stored attributes, user and operational, but those sync content leaves out.
fn content(record: &EntryRecord) -> Vec<PartialAttribute> {
    record
        .entry
        .attrs
        .iter()
        .filter(|a| {
            let name = a.name.to_ascii_lowercase();
            !LEFT_OUT.contains(&name.split(';').next().unwrap_or_default())
        })
        .map(|a| PartialAttribute {
            r#type: OctetString::from(a.name.as_bytes().to_vec()),
            vals: a.values.iter().map(|v| OctetString::from(v.clone())).collect(),
        })
        .collect()
}

fn intermediate_pdu(message_id: u32, info: SyncInfo) -> LdapResultOf<Bytes> {
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
