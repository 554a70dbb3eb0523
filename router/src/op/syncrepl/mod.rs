//! The provider side of RFC 4533 (LDAP Content Synchronization, "syncrepl"): a search with
//! the Sync Request control, answered as OpenLDAP's syncprov answers a slapd consumer.
//!
//! - refresh without a cookie: every entry in scope, parents before children, each with a
//!   Sync State `add` and its 16-byte entryUUID, then SearchResultDone with a Sync Done
//!   carrying the new cookie (refreshDeletes FALSE: a present phase, so a consumer that had
//!   entries the provider lacks deletes them);
//! - refresh with a cookie, from the shards' delete logs (`refresh.rs`, shard::deletelog)
//!   when every log reaches back to the cookie and the search's filter is
//!   `(objectClass=*)`: the uuids that left the scope since the cookie (deleted, or moved
//!   away) in Sync Info syncIdSet messages with refreshDeletes TRUE, as slapd's
//!   sessionlog sends them, then the entries whose entryCSN is newer than the cookie's as
//!   `add`, then Sync Done with refreshDeletes TRUE (a delete phase);
//! - otherwise: the entries changed since the cookie as `add`, every other entry in scope
//!   as `present` (DN and uuid, no attributes), then Sync Done with refreshDeletes FALSE:
//!   the consumer deletes what was not presented (a present phase), complete or not at
//!   all (it fails instead of ending after a partial scan);
//! - either way, entries whose subtree was moved by a Modify DN since the cookie are sent
//!   as `add` (their own entryCSN did not move, but their DN did);
//! - a cookie newer than the provider: unwillingToPerform (53), as slapd;
//! - refreshAndPersist: the refresh, then a Sync Info refreshPresent or refreshDelete
//!   (refreshDone TRUE, after a present or a delete phase), then every committed change
//!   (`persist.rs`).
//!
//! The cookie's CSN is the committed low-watermark across shards (shard::watermark), read
//! before the entries are collected (by a persisting refresh only once every batch fed
//! before it subscribed counts in it: `fed_before_subscribing`): whatever changes after it is either in this refresh
//! already (sent again next time, which a consumer takes as a no-op by entryCSN) or in the
//! next one. Sync content leaves out the computed attributes (entryDN, hasSubordinates,
//! subschemaSubentry, memberOf) and contextCSN, which a consumer keeps itself.
//!
//! The replication identity is the rootDN (docs/OPERATIONS.md): only it may sync, and it
//! reads every entry and attribute without size or time limits. The refresh holds the
//! scope's entries in memory to put parents before children (bounded by
//! `SYNC_ENTRIES_MAX`).

mod persist;
mod refresh;
pub mod stats;

use std::sync::Arc;

use bytes::Bytes;
use ferrodir_proto::message::sync::{Cookie, SyncDone, SyncMode, SyncRequest, SyncState, SyncStateKind};
use ferrodir_proto::message::sync::{SYNC_DONE_OID, SYNC_REQUEST_OID, SYNC_STATE_OID};
use ferrodir_proto::message::{
    decode_message, encode_message, Control, LdapMessage, LdapResult, OctetString, PartialAttribute,
    ProtocolOp, SearchRequest, SearchResultEntry, SearchScope,
};
use ferrodir_proto::ResultCode;
use ferrodir_shard::{AttrSelection, Hub, Scope, Subscription};

use crate::error::{LdapError, LdapResultOf};
use crate::op::context::{OpContext, Outbound};
use crate::op::read::{self, Flow, Gathered, Sink, Target};
use crate::requester::Identity;

/// The most entries one refresh sends (it holds them to order parents first).
pub const SYNC_ENTRIES_MAX: usize = 1_000_000;

/// Attributes never sent to a consumer: computed here, or kept by the consumer itself.
const LEFT_OUT: &[&str] = &["entrydn", "hassubordinates", "subschemasubentry", "memberof", "contextcsn"];

/// A search with the Sync Request control, as the search pipeline (op::search) carries it:
/// read from the request before anything else, run once the base is located and access
/// settled, its Sync Done kept for the SearchResultDone.
pub(crate) struct Syncing {
    mode: SyncMode,
    cookie: Cookie,
    /// The SearchResultDone's controls once the refresh ended (None: none, an error).
    done: Option<Vec<Control>>,
}

impl Syncing {
    /// The search's Sync Request, if it carries one. Refused: a malformed control or cookie
    /// (protocolError), or a requester other than the rootDN.
    pub(crate) fn from_request(ctx: &OpContext) -> LdapResultOf<Option<Self>> {
        let Some(control) = ctx
            .controls
            .as_ref()
            .and_then(|cs| cs.iter().find(|c| c.control_type.as_ref() == SYNC_REQUEST_OID.as_bytes()))
        else {
            return Ok(None);
        };
        let value = control.control_value.as_deref().unwrap_or_default();
        let sync = SyncRequest::decode_value(value)
            .map_err(|e| LdapError::new(ResultCode::PROTOCOL_ERROR, format!("Sync Request control: {e}")))?;
        if !matches!(ctx.identity, Identity::Root(_)) {
            return Err(LdapError::new(
                ResultCode::INSUFFICIENT_ACCESS_RIGHTS,
                "only the rootDN may replicate (the replication identity)",
            ));
        }
        let cookie = match &sync.cookie {
            Some(bytes) => Cookie::parse(bytes)
                .map_err(|e| LdapError::new(ResultCode::PROTOCOL_ERROR, format!("Sync cookie: {e}")))?,
            None => Cookie::default(),
        };
        Ok(Some(Self { mode: sync.mode, cookie, done: None }))
    }

    /// The controls of the SearchResultDone: the Sync Done of a refresh that ended.
    pub(crate) fn response_controls(&self) -> Option<Vec<Control>> {
        self.done.clone()
    }
}

/// The refresh (its content read through op::read, as any search's), then the persist
/// stage or the Sync Done. `located`: the base and scope the pipeline resolved.
pub(crate) async fn run(
    ctx: &OpContext,
    syncing: &mut Syncing,
    request: &SearchRequest,
    scope: Located,
) -> LdapResultOf<LdapResult> {
    // Deletes and Modify DNs are logged from here on, before the cookie's CSN is read.
    ctx.worker.keep_delete_logs().await?;
    let registration = ctx.config.syncrepl.register();
    let mut cookie = std::mem::take(&mut syncing.cookie);
    // A mesh peer names itself in its cookie: what it wrote is never sent back to it.
    let mesh = Mesh::of(ctx, &cookie);
    let own_sid = ctx.worker.hub().clock().server_id();
    if mesh.on && mesh.peer_sid == Some(own_sid) {
        // Two nodes with one server_id would take each other's changes for their own.
        tracing::error!(
            conn = ctx.conn_id,
            server_id = own_sid,
            "a mesh peer connected with this node's own server_id; refused"
        );
        return Err(LdapError::new(
            ResultCode::UNWILLING_TO_PERFORM,
            format!(
                "server_id {own_sid} is both this node's and the consumer's: every node of a mesh needs its own"
            ),
        ));
    }
    // A replica applies its provider's entries in the provider's order (a refresh: parents
    // first), not in CSN order, so no CSN splits what it has committed from what its feed
    // will bring: a refresh it serves sends every entry whole, later ones included (a
    // consumer takes a copy it has as a no-op by entryCSN).
    let replica = !ctx.config.replicated.is_empty();
    let hub = ctx.worker.hub();
    let subscription = subscribe(hub, syncing.mode, replica).await?;
    let now = current_csn(hub);
    let theirs_of_ours = cookie.csn_for(own_sid).map(str::to_string);
    let since = stamp(hub.clock().server_id(), &mut cookie, now.as_deref())?;
    if hub.multi_provider() {
        // The whole vector: every server id's newest CSN this node holds, its own being that
        // of its own writes (`Hub::own_watermark`), not the watermark `stamp` put there.
        cookie.csns.retain(|c| ferrodir_proto::message::sync::csn_sid(c) != Some(own_sid));
        if let Some(csn) = &theirs_of_ours {
            cookie.set_csn(csn);
        }
        for csn in hub.context_csns() {
            cookie.set_csn(&csn);
        }
    }
    // Every Modify DN committed up to `now` is in the skeleton the scan reads.
    settle_tree(ctx).await;
    let entries = collect(ctx, request, &scope).await?;
    if ctx.cancelled() {
        return Ok(LdapResult::success());
    }
    let points = refresh::Points {
        since: since.as_deref(),
        since_micros: since.as_deref().and_then(ferrodir_shard::micros_of_csn),
        now: if replica { None } else { now.as_deref().and_then(ferrodir_shard::micros_of_csn) },
        server_id: hub.clock().server_id(),
        mesh: &mesh,
    };
    let refresh_deletes = refresh(ctx, request, &scope, entries, &points).await?;
    ctx.config.syncrepl.refreshed(refresh_deletes);
    if let Some(subscription) = subscription {
        let (result, controls) =
            persist::follow(ctx, &scope, request, cookie, subscription, refresh_deletes, registration, &mesh)
                .await?;
        syncing.done = controls;
        return Ok(result);
    }
    let done = SyncDone { cookie: Some(cookie.format().into_bytes()), refresh_deletes };
    syncing.done = Some(vec![response_control(SYNC_DONE_OID, done.encode_value())]);
    Ok(LdapResult::success())
}

/// What a mesh provider (`multi_provider`) knows of the consumer it serves: the CSNs its
/// cookie holds, one per server id, and its own server id (the cookie's `sid=`). Off a
/// mesh, empty: the single-provider rules apply (one CSN, this server's).
#[derive(Debug, Default)]
pub(crate) struct Mesh {
    pub on: bool,
    /// The consumer's server id: entries whose entryCSN names it came from it.
    pub peer_sid: Option<u32>,
    /// The consumer's CSN per server id, from its cookie.
    pub csns: Vec<String>,
}

impl Mesh {
    fn of(ctx: &OpContext, cookie: &Cookie) -> Self {
        if !ctx.worker.hub().multi_provider() {
            return Self::default();
        }
        Self { on: true, peer_sid: cookie.sid, csns: cookie.csns.clone() }
    }

    /// Whether the consumer wrote the entry whose entryCSN is `csn` (the last change of it
    /// is its own): not sent back to it.
    pub fn written_by_peer(&self, csn: Option<&str>) -> bool {
        match (self.peer_sid, csn.and_then(ferrodir_proto::message::sync::csn_sid)) {
            (Some(peer), Some(sid)) => self.on && peer == sid,
            _ => false,
        }
    }

    /// Whether the consumer may lack the entry whose entryCSN is `csn`: its cookie holds
    /// no CSN of that server id, or an older one.
    pub fn newer_than_cookie(&self, csn: Option<&str>) -> bool {
        let Some(csn) = csn else { return true };
        let sid = ferrodir_proto::message::sync::csn_sid(csn);
        match self.csns.iter().find(|c| ferrodir_proto::message::sync::csn_sid(c) == sid) {
            Some(held) => csn > held.as_str(),
            None => true,
        }
    }
}

/// A refreshAndPersist search's feed, subscribed before the watermark is read: no change
/// after it can be missed.
async fn subscribe(hub: &Arc<Hub>, mode: SyncMode, replica: bool) -> LdapResultOf<Option<Subscription>> {
    let subscription = match mode {
        SyncMode::RefreshAndPersist => Some(hub.subscribe(persist::FEED_BATCHES)),
        SyncMode::RefreshOnly => None,
    };
    if subscription.is_some() && !replica {
        fed_before_subscribing(hub).await?;
    }
    Ok(subscription)
}

/// Puts the provider's state `now` into the cookie and returns the consumer's CSN for this
/// server (None: no cookie). A consumer newer than the provider is refused, as slapd does.
fn stamp(sid: u32, cookie: &mut Cookie, now: Option<&str>) -> LdapResultOf<Option<String>> {
    let since = cookie.csn_for(sid).map(str::to_string);
    if let (Some(theirs), Some(ours)) = (since.as_deref(), now) {
        if theirs > ours {
            return Err(LdapError::new(
                ResultCode::UNWILLING_TO_PERFORM,
                "consumer state is newer than provider!",
            ));
        }
    }
    if let Some(ours) = now {
        cookie.set_csn(ours);
    }
    cookie.sid = (sid != 0).then_some(sid);
    Ok(since)
}

/// Sends the refresh: the delete phase's uuids, if it is one, then the changed entries as
/// `add` and (in a present phase) the others as `present`. True: a delete phase.
async fn refresh(
    ctx: &OpContext,
    request: &SearchRequest,
    scope: &Located,
    mut entries: Vec<SyncEntry>,
    points: &refresh::Points<'_>,
) -> LdapResultOf<bool> {
    // Read after the entries: a delete after their scan is in it, and sent. Without a
    // cookie only the moves after `now` matter (`undo_later_moves`).
    let log = match points.since_micros.or(points.now) {
        Some(after) => Some(delete_log(ctx, after).await?),
        None => None,
    };
    if let (Some(log), Some(now)) = (&log, points.now) {
        refresh::undo_later_moves(&mut entries, log, now, &ctx.worker.skeleton(), scope);
    }
    let log = if points.since_micros.is_some() { log } else { None };
    let plan = refresh::plan(scope, &request.filter, points, log.as_ref(), &ctx.worker.skeleton(), &entries);
    if let Some(uuids) = &plan.deletes {
        refresh::send_deletes(ctx, uuids).await?;
    }
    let mut pdus = Vec::with_capacity(entries.len().min(1024));
    for (entry, changed) in entries.into_iter().zip(plan.changed) {
        let pdu = if changed {
            entry_pdu(ctx.message_id, entry.dn, entry.attributes, SyncStateKind::Add, entry.uuid)?
        } else if plan.deletes.is_none() {
            entry_pdu(ctx.message_id, entry.dn, Vec::new(), SyncStateKind::Present, entry.uuid)?
        } else {
            continue;
        };
        pdus.push(pdu);
        if pdus.len() == 256 {
            send(ctx, std::mem::take(&mut pdus)).await?;
        }
    }
    send(ctx, pdus).await?;
    Ok(plan.deletes.is_some())
}

/// How long a persisting refresh waits for the batches committing as it subscribed.
const FED_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits until every CSN the clock had handed out when the persist search subscribed is
/// committed, fed and counted in the watermark. A batch fed just before the subscription is
/// not in the feed; without this wait its CSN could be above the watermark read next
/// (`now`, another shard still committing a lower one), and the refresh leaves out entries
/// above `now` for the feed to bring: that entry would reach the consumer only at its next
/// refresh. After the wait every such batch is at or below `now`, so in the refresh, and
/// every later one is in the feed. A shard that stays stuck longer than [`FED_WAIT_MAX`]
/// (a failing disk) gets the consumer busy (51), which it retries.
async fn fed_before_subscribing(hub: &Hub) -> LdapResultOf<()> {
    let taken = hub.clock().now();
    let deadline = std::time::Instant::now() + FED_WAIT_MAX;
    while !hub.settled_past(taken) {
        if std::time::Instant::now() > deadline {
            return Err(LdapError::new(
                ResultCode::BUSY,
                "the provider's shards are still committing; retry",
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    Ok(())
}

/// Waits until the coordinator is between two structural changes: it publishes a moved
/// container's skeleton only after the move commits, and a container's DN comes from the
/// skeleton, so a scan in that gap would send the container with its new entryCSN at its
/// old DN (and a slapd consumer ignores a later copy with the same entryCSN).
async fn settle_tree(ctx: &OpContext) {
    if ctx.worker.coordinator.send(crate::coordinator::Ping).await.is_err() {
        tracing::warn!("the coordinator did not answer; the skeleton may lag a Modify DN");
    }
}

/// Every shard's delete-log records after `after`, with its minimum.
async fn delete_log(ctx: &OpContext, after: u64) -> LdapResultOf<Vec<ferrodir_shard::LogView>> {
    let mut views = Vec::with_capacity(ctx.worker.shard_count());
    for shard in 0..ctx.worker.shard_count() {
        views.push(ctx.worker.delete_log(shard, after).await?);
    }
    Ok(views)
}

/// The committed low-watermark as a CSN; None before the first write.
fn current_csn(hub: &Hub) -> Option<String> {
    // A replica hands on its provider's state (shard::watermark::Hub::replicated_context);
    // a mesh node's own CSN is its watermark (the others go into its cookie beside it).
    if let Some(csn) = hub.replicated_context().into_iter().max().filter(|_| !hub.multi_provider()) {
        return Some(csn);
    }
    let micros = hub.watermark();
    (micros > 0).then(|| hub.clock().csn_of(micros))
}

async fn send(ctx: &OpContext, pdus: Vec<Bytes>) -> LdapResultOf<()> {
    if pdus.is_empty() {
        return Ok(());
    }
    ctx.count_entries(pdus.len());
    ctx.out.send(Outbound::Pdus(pdus)).await.map_err(|_| LdapError::internal("the connection closed"))
}

fn response_control(oid: &str, value: Vec<u8>) -> Control {
    Control {
        control_type: OctetString::from(oid.as_bytes()),
        criticality: false,
        control_value: Some(value.into()),
    }
}

/// One SearchResultEntry with its Sync State control.
fn entry_pdu(
    message_id: u32,
    dn: OctetString,
    attributes: Vec<PartialAttribute>,
    state: SyncStateKind,
    uuid: [u8; 16],
) -> LdapResultOf<Bytes> {
    let control = SyncState { state, entry_uuid: uuid, cookie: None };
    let message = LdapMessage {
        message_id,
        protocol_op: ProtocolOp::SearchResultEntry(SearchResultEntry { object_name: dn, attributes }),
        controls: Some(vec![response_control(SYNC_STATE_OID, control.encode_value())]),
    };
    encode_message(&message)
        .map(Bytes::from)
        .map_err(|e| LdapError::internal(format!("encoding an entry: {e}")))
}

/// The search's base and scope, resolved once.
pub(crate) struct Located {
    pub base: ferrodir_proto::NormDn,
    pub scope: Scope,
    pub kind: SearchScope,
    /// The schema's rules: every DN the search compares is normalised by them ([`Self::parse`]).
    pub rules: std::sync::Arc<ferrodir_shard::RuleTable>,
}

impl Located {
    /// `text` parsed and normalised as the base was; None if it is no DN.
    pub fn parse(&self, text: &str) -> Option<ferrodir_proto::NormDn> {
        self.rules.dn().parse(text).ok()
    }

    /// Whether `dn` lies in the search's scope.
    pub fn holds(&self, dn: &ferrodir_proto::NormDn) -> bool {
        if !dn.is_descendant_or_self_of(&self.base) {
            return false;
        }
        let depth = dn.len().saturating_sub(self.base.len());
        match self.kind {
            SearchScope::BaseObject => depth == 0,
            SearchScope::SingleLevel => depth == 1,
            SearchScope::WholeSubtree => true,
            SearchScope::SubordinateSubtree => depth >= 1,
        }
    }
}

/// One entry of sync content.
pub(crate) struct SyncEntry {
    pub dn: OctetString,
    pub parsed: ferrodir_proto::NormDn,
    pub depth: usize,
    pub uuid: [u8; 16],
    pub csn: Option<String>,
    pub attributes: Vec<PartialAttribute>,
}

/// Sync content of an encoded SearchResultEntry: without the attributes left out, with
/// its uuid, CSN and depth. None: not an entry, or one without an entryUUID.
/// `wanted`: what the consumer asked for (entryUUID and entryCSN are read either way, and
/// sent only if asked for).
fn sync_entry(pdu: &[u8], wanted: &ContentAttrs) -> Option<SyncEntry> {
    let message = decode_message(pdu).ok()?;
    let ProtocolOp::SearchResultEntry(entry) = message.protocol_op else { return None };
    let mut uuid = None;
    let mut csn = None;
    let mut attributes = Vec::with_capacity(entry.attributes.len());
    for attr in entry.attributes {
        let name = String::from_utf8_lossy(&attr.r#type).to_ascii_lowercase();
        let base = name.split(';').next().unwrap_or_default().to_string();
        if LEFT_OUT.contains(&base.as_str()) {
            continue;
        }
        if base == "entryuuid" {
            uuid = attr.vals.first().and_then(|v| ferrodir_shard::uuid_octets(v));
        } else if base == "entrycsn" {
            csn = attr.vals.first().map(|v| String::from_utf8_lossy(v).into_owned());
        }
        if wanted.0.selects_stored(wanted.1, &String::from_utf8_lossy(&attr.r#type)) {
            attributes.push(attr);
        }
    }
    let parsed = std::str::from_utf8(&entry.object_name).ok().and_then(|d| wanted.1.dn().parse(d).ok())?;
    Some(SyncEntry { dn: entry.object_name, depth: parsed.len(), parsed, uuid: uuid?, csn, attributes })
}

/// The attributes a consumer asked for, and the rules that name them.
struct ContentAttrs<'a>(&'a AttrSelection, &'a ferrodir_shard::RuleTable);

/// Every entry in scope that matches, parents before children, read whole: a present
/// phase after a partial scan would have the consumer delete the rest, so any failed or
/// unfinished shard fails the refresh.
async fn collect(
    ctx: &OpContext,
    request: &SearchRequest,
    located: &Located,
) -> LdapResultOf<Vec<SyncEntry>> {
    let config = &ctx.config;
    let wanted = AttrSelection::from_request(&request.attributes, false, &config.rules, &config.schema);
    // The uuid and CSN of every entry are needed whatever the consumer asked for.
    let mut asked = request.attributes.clone();
    if asked.is_empty() {
        asked.push(OctetString::from_static(b"*"));
    }
    asked.extend([OctetString::from_static(b"entryUUID"), OctetString::from_static(b"entryCSN")]);
    let target = Target {
        skeleton: ctx.worker.skeleton(),
        scope: located.scope,
        filter: Arc::new(request.filter.clone()),
        attrs: Arc::new(AttrSelection::from_request(&asked, false, &config.rules, &config.schema)),
    };
    let mut sink = Content { wanted: ContentAttrs(&wanted, &config.rules), entries: Vec::new() };
    let class = config.limits_for(&ctx.identity);
    match read::read(ctx, &target, class, None, &mut sink).await? {
        Gathered::All { complete: false, .. } if !ctx.cancelled() => {
            return Err(LdapError::internal("a shard's scan ended without its end"));
        }
        // Abandoned: the caller sends nothing more.
        Gathered::All { .. } | Gathered::Cancelled => {}
        Gathered::Stopped | Gathered::TimeLimit => {
            return Err(LdapError::internal("a refresh's scan ended early"));
        }
    }
    let mut entries = sink.entries;
    // Parents before children: a DN's depth orders them; stable within a depth.
    entries.sort_by_key(|e| e.depth);
    Ok(entries)
}

/// The sink of a refresh: each match as sync content, at most [`SYNC_ENTRIES_MAX`].
struct Content<'a> {
    wanted: ContentAttrs<'a>,
    entries: Vec<SyncEntry>,
}

impl Sink for Content<'_> {
    async fn take(&mut self, _ctx: &OpContext, pdus: Vec<Bytes>) -> LdapResultOf<Flow> {
        self.entries.extend(pdus.iter().filter_map(|p| sync_entry(p, &self.wanted)));
        if self.entries.len() > SYNC_ENTRIES_MAX {
            return Err(LdapError::new(ResultCode::ADMIN_LIMIT_EXCEEDED, "too many entries to synchronise"));
        }
        Ok(Flow::More)
    }

    fn room(&self) -> Option<usize> {
        Some(SYNC_ENTRIES_MAX.saturating_sub(self.entries.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_and_content() {
        let uuid = ferrodir_shard::uuid_octets(b"0f2b9a3e-4c1d-4e5f-8a9b-0c1d2e3f4a5b").unwrap();
        let attr = |name: &str, value: &str| PartialAttribute {
            r#type: OctetString::from(name.as_bytes().to_vec()),
            vals: vec![OctetString::from(value.as_bytes().to_vec())],
        };
        let message = LdapMessage {
            message_id: 3,
            protocol_op: ProtocolOp::SearchResultEntry(SearchResultEntry {
                object_name: OctetString::from_static(b"cn=a,dc=example,dc=com"),
                attributes: vec![
                    attr("cn", "a"),
                    attr("entryUUID", "0f2b9a3e-4c1d-4e5f-8a9b-0c1d2e3f4a5b"),
                    attr("entryCSN", "20261201000000.000000Z#000000#000#000000"),
                    attr("hasSubordinates", "FALSE"),
                    attr("entryDN", "cn=a,dc=example,dc=com"),
                    attr("memberOf", "cn=g,dc=example,dc=com"),
                ],
            }),
            controls: None,
        };
        let schema = ferrodir_proto::schema::Schema::standard();
        let rules = ferrodir_shard::RuleTable::from_schema(&schema);
        let all = AttrSelection::from_request(&["*", "+"], false, &rules, &schema);
        let entry = sync_entry(&encode_message(&message).unwrap(), &ContentAttrs(&all, &rules)).unwrap();
        assert_eq!(entry.depth, 3);
        assert_eq!(entry.uuid, uuid);
        assert_eq!(entry.csn.as_deref(), Some("20261201000000.000000Z#000000#000#000000"));
        let names: Vec<_> =
            entry.attributes.iter().map(|a| String::from_utf8_lossy(&a.r#type).into_owned()).collect();
        assert_eq!(names, ["cn", "entryUUID", "entryCSN"]);
        // Asked for cn alone: its uuid and CSN are still read, and not sent.
        let cn = AttrSelection::from_request(&["cn"], false, &rules, &schema);
        let entry = sync_entry(&encode_message(&message).unwrap(), &ContentAttrs(&cn, &rules)).unwrap();
        assert_eq!((entry.uuid, entry.csn.is_some()), (uuid, true));
        assert_eq!(entry.attributes.len(), 1);
    }
}
