//! One consumer's life: connect, bind, the sync search with the stored cookie, apply what
//! comes, commit cookies after their data; on failure wait as the retry schedule says and
//! start again from the last committed cookie.

use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::sync::{
    SyncDone, SyncInfo, SyncMode, SyncRequest, SyncState, SyncStateKind, SYNC_DONE_OID, SYNC_INFO_OID,
    SYNC_REQUEST_OID, SYNC_STATE_OID,
};
use ferrodir_proto::message::{
    Control, DerefAliases, LdapMessage, LdapResult, OctetString, ProtocolOp, SearchRequest,
    SearchResultEntry, SearchScope,
};
use ferrodir_proto::ResultCode;
use ferrodir_router::Worker;
use ferrodir_shard::ShardCore;

use super::apply::{Applier, ApplyError, Uuid};
use super::client::{Client, ClientError};
use super::cookie;
use super::settings::{Replication, RetrySchedule};
use super::status::{State, Status};

/// RFC 4533 §3.4.2 e-syncRefreshRequired.
const SYNC_REFRESH_REQUIRED: ResultCode = ResultCode(4096);
/// Changes applied in persist before the cookie is committed even though more keep coming.
const CHANGES_PER_COOKIE_MAX: usize = 256;

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("applying: {0}")]
    Apply(#[from] ApplyError),
    #[error("{0}")]
    Other(String),
}

enum Ended {
    /// refreshOnly: the refresh completed.
    Refreshed,
    /// The provider asked for a full reload (4096).
    RefreshRequired,
}

/// Runs one `[[replication]]` consumer forever (or until its retry schedule is used up).
///
/// `tombstones`: the deleted uuids, shared by every consumer of this node (a mesh; its
/// deletes and those that came before their entry: `mesh::SharedTombstones`).
pub async fn run(
    settings: Replication,
    worker: Rc<Worker>,
    views: Vec<Rc<ShardCore>>,
    status: Arc<Status>,
    tombstones: super::mesh::SharedTombstones,
) {
    let rid = settings.rid;
    let Ok(base) = worker.config().dn_rules().parse(&settings.search_base) else { return };
    let Ok(schedule) = RetrySchedule::parse(&settings.retry) else { return };
    let mut applier = match Applier::new(
        worker.clone(),
        &views,
        base,
        status.clone(),
        worker.hub().multi_provider(),
        tombstones,
    ) {
        Ok(applier) => applier,
        Err(e) => {
            tracing::error!(rid, error = %e, "replication: cannot read the local entries; the consumer does not start");
            return;
        }
    };
    let mut stored = match views.first().map(|v| cookie::load(v, rid)).transpose() {
        Ok(c) => c.flatten(),
        Err(e) => {
            tracing::error!(rid, error = %e, "replication: cannot read the cookie; the consumer does not start");
            return;
        }
    };
    drop(views);
    if let Err(e) = applier.load_tombstones().await {
        tracing::error!(rid, error = %e, "replication: cannot read the delete logs; the consumer does not start");
        return;
    }
    if let Some(c) = &stored {
        publish_context(&worker, c);
    }
    tracing::info!(rid, provider = %settings.provider, entries = applier.known(), cookie = ?stored.as_deref().map(String::from_utf8_lossy), "replication consumer starting");
    let mut attempt = 0u64;
    loop {
        status.set_state(State::Connecting);
        let outcome = session(&settings, &worker, &mut applier, &mut stored, &status, &mut attempt).await;
        match outcome {
            Ok(Ended::Refreshed) => {
                attempt = 0;
                status.set_state(State::Idle);
                status.next_connect_in(settings.interval_s);
                tokio::time::sleep(Duration::from_secs(settings.interval_s)).await;
            }
            Ok(Ended::RefreshRequired) => {
                tracing::info!(
                    rid,
                    "replication: the provider asks for a full reload (e-syncRefreshRequired)"
                );
                stored = None;
            }
            Err(e) => {
                let _ = applier.drain().await;
                status.set_state(State::Retrying);
                let Some(delay) = schedule.delay(attempt) else {
                    tracing::error!(rid, error = %e, "replication: retries used up; the consumer stops");
                    return;
                };
                tracing::warn!(rid, error = %e, retry_in_s = delay.as_secs(), "replication session ended");
                status.next_connect_in(delay.as_secs());
                attempt += 1;
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// `mesh_sid`: this node's server id when it is one provider of a mesh (sent in the cookie).
fn sync_request(
    settings: &Replication,
    stored: Option<&[u8]>,
    mesh_sid: Option<u32>,
) -> (SearchRequest, Vec<Control>, Vec<u8>) {
    let request = SearchRequest {
        base_object: OctetString::from(settings.search_base.clone().into_bytes()),
        scope: SearchScope::WholeSubtree,
        deref_aliases: DerefAliases::NeverDerefAliases,
        size_limit: 0,
        time_limit: 0,
        types_only: false,
        filter: Filter::Present(OctetString::from_static(b"objectClass")),
        attributes: vec![OctetString::from_static(b"*"), OctetString::from_static(b"+")],
    };
    let mut request = request;
    if mesh_sid.is_some() {
        // A mesh peer's per-attribute CSNs, which `+` leaves out (`merge`); a slapd
        // provider ignores a type it doesn't know.
        request.attributes.push(OctetString::from_static(b"ferrodirAttrCSN"));
    }
    let cookie = cookie::outgoing(stored, settings.rid, mesh_sid);
    let mode = if settings.persist() { SyncMode::RefreshAndPersist } else { SyncMode::RefreshOnly };
    let value = SyncRequest { mode, cookie: Some(cookie.clone()), reload_hint: false }.encode_value();
    let control = Control {
        control_type: OctetString::from(SYNC_REQUEST_OID.as_bytes()),
        criticality: true,
        control_value: Some(value.into()),
    };
    (request, vec![control], cookie)
}

/// What one session has received and not yet committed.
struct Progress {
    /// The uuids presented in the current present phase.
    presented: HashSet<Uuid>,
    /// The newest cookie received, not yet committed.
    pending_cookie: Option<Vec<u8>>,
    /// Changes applied since the last cookie commit.
    uncommitted: usize,
    refreshing: bool,
}

async fn session(
    settings: &Replication,
    worker: &Worker,
    applier: &mut Applier,
    stored: &mut Option<Vec<u8>>,
    status: &Status,
    attempt: &mut u64,
) -> Result<Ended, SessionError> {
    let password = settings.password().map_err(|e| SessionError::Other(format!("{e:#}")))?;
    let mut client = Client::connect(settings, &password).await?;
    drop(password);
    status.connected(client.local.clone());
    let hub = worker.hub();
    let mesh_sid = hub.multi_provider().then(|| hub.clock().server_id());
    let (request, controls, sent) = sync_request(settings, stored.as_deref(), mesh_sid);
    status.cookie_sent(&sent);
    let search_id = client.send(ProtocolOp::SearchRequest(request), Some(controls)).await?;
    status.set_state(State::Refreshing);
    let mut progress =
        Progress { presented: HashSet::new(), pending_cookie: None, uncommitted: 0, refreshing: true };
    let result =
        follow(settings, worker, applier, stored, status, attempt, &mut client, search_id, &mut progress)
            .await;
    client.close().await;
    result
}

#[allow(clippy::too_many_arguments)]
async fn follow(
    settings: &Replication,
    worker: &Worker,
    applier: &mut Applier,
    stored: &mut Option<Vec<u8>>,
    status: &Status,
    attempt: &mut u64,
    client: &mut Client,
    search_id: u32,
    progress: &mut Progress,
) -> Result<Ended, SessionError> {
    loop {
        // Nothing more waiting: commit the cookie of what was applied (persist batches
        // cookies this way; a refresh commits at its end).
        if !progress.refreshing && !client.has_buffered() {
            status.set_caught_up(true);
            commit_pending(settings, worker, applier, stored, status, progress).await?;
        }
        let message = client.read().await?;
        status.contact();
        if !progress.refreshing {
            status.set_caught_up(!client.has_buffered());
        }
        if message.message_id != search_id {
            if message.message_id == 0 {
                return Err(SessionError::Other("the provider sent a notice of disconnection".into()));
            }
            continue;
        }
        let LdapMessage { protocol_op, controls, .. } = message;
        match protocol_op {
            ProtocolOp::SearchResultEntry(entry) => {
                let state = sync_state(controls.as_deref())?;
                sync_entry(applier, progress, entry, state).await?;
                if progress.uncommitted >= CHANGES_PER_COOKIE_MAX && !progress.refreshing {
                    commit_pending(settings, worker, applier, stored, status, progress).await?;
                }
            }
            ProtocolOp::IntermediateResponse(response) => {
                if response.response_name.as_deref() != Some(SYNC_INFO_OID.as_bytes()) {
                    continue;
                }
                let value = response.response_value.as_deref().unwrap_or_default();
                let info = SyncInfo::decode_value(value)
                    .map_err(|e| SessionError::Other(format!("Sync Info: {e}")))?;
                sync_info(settings, worker, applier, stored, status, attempt, progress, info).await?;
            }
            ProtocolOp::SearchResultDone(result) => {
                let ended = search_done(settings, applier, progress, &result, controls.as_deref()).await?;
                commit_pending(settings, worker, applier, stored, status, progress).await?;
                if settings.persist() {
                    return Err(SessionError::Other("the provider ended the persist search".into()));
                }
                refresh_finished(settings, status, attempt, progress);
                return Ok(ended);
            }
            _ => {}
        }
    }
}

/// One entry of the sync search, by its Sync State: present, added or modified, deleted.
async fn sync_entry(
    applier: &mut Applier,
    progress: &mut Progress,
    entry: SearchResultEntry,
    state: SyncState,
) -> Result<(), SessionError> {
    match state.state {
        SyncStateKind::Present => {
            progress.presented.insert(state.entry_uuid);
            applier.present();
        }
        SyncStateKind::Add | SyncStateKind::Modify => {
            if progress.refreshing {
                progress.presented.insert(state.entry_uuid);
            }
            applier.upsert(&entry.object_name, entry.attributes, state.entry_uuid).await?;
        }
        SyncStateKind::Delete => applier.delete(&state.entry_uuid).await?,
    }
    progress.uncommitted += 1;
    if let Some(c) = state.cookie {
        progress.pending_cookie = Some(c);
    }
    Ok(())
}

/// The end of the sync search: a refresh the provider requires (`Ok(RefreshRequired)`, to
/// commit nothing), a failure, or the end of a refresh, whose present phase deletes what
/// was not presented (then `Ok(Refreshed)`, once the caller committed its cookie).
async fn search_done(
    settings: &Replication,
    applier: &mut Applier,
    progress: &mut Progress,
    result: &LdapResult,
    controls: Option<&[Control]>,
) -> Result<Ended, SessionError> {
    if result.result_code == SYNC_REFRESH_REQUIRED {
        return Ok(Ended::RefreshRequired);
    }
    if result.result_code != ResultCode::SUCCESS {
        return Err(SessionError::Other(format!(
            "the sync search failed: {} {}",
            result.result_code,
            String::from_utf8_lossy(&result.diagnostic_message)
        )));
    }
    let done = sync_done(controls)?;
    if !done.refresh_deletes {
        let deleted = applier.delete_unpresented(&progress.presented, done.cookie.as_deref()).await?;
        tracing::debug!(rid = settings.rid, deleted, "present phase: entries not presented deleted");
    }
    if let Some(c) = done.cookie {
        progress.pending_cookie = Some(c);
    }
    Ok(Ended::Refreshed)
}

#[allow(clippy::too_many_arguments)]
async fn sync_info(
    settings: &Replication,
    worker: &Worker,
    applier: &mut Applier,
    stored: &mut Option<Vec<u8>>,
    status: &Status,
    attempt: &mut u64,
    progress: &mut Progress,
    info: SyncInfo,
) -> Result<(), SessionError> {
    let present_phase = matches!(info, SyncInfo::RefreshPresent { .. });
    match info {
        SyncInfo::NewCookie(c) => progress.pending_cookie = Some(c),
        SyncInfo::RefreshDelete { cookie, refresh_done }
        | SyncInfo::RefreshPresent { cookie, refresh_done } => {
            if present_phase {
                let deleted = applier.delete_unpresented(&progress.presented, cookie.as_deref()).await?;
                tracing::debug!(rid = settings.rid, deleted, "present phase: entries not presented deleted");
            }
            // A delete phase ends with nothing more to do: what was not mentioned stays.
            progress.presented.clear();
            if let Some(c) = cookie {
                progress.pending_cookie = Some(c);
            }
            if refresh_done {
                commit_pending(settings, worker, applier, stored, status, progress).await?;
                refresh_finished(settings, status, attempt, progress);
            }
        }
        SyncInfo::SyncIdSet { cookie: c, refresh_deletes, uuids } => {
            if refresh_deletes {
                for uuid in &uuids {
                    applier.delete(uuid).await?;
                }
            } else {
                progress.presented.extend(uuids.iter().copied());
                for _ in &uuids {
                    applier.present();
                }
            }
            if let Some(c) = c {
                progress.pending_cookie = Some(c);
            }
        }
    }
    Ok(())
}

fn refresh_finished(settings: &Replication, status: &Status, attempt: &mut u64, progress: &mut Progress) {
    if progress.refreshing {
        tracing::info!(rid = settings.rid, "replication: refresh done");
    }
    progress.refreshing = false;
    *attempt = 0;
    if settings.persist() {
        status.set_state(State::Persisting);
    }
    status.set_ready();
}

/// Commits the newest cookie received, after every write before it is durable.
async fn commit_pending(
    settings: &Replication,
    worker: &Worker,
    applier: &mut Applier,
    stored: &mut Option<Vec<u8>>,
    status: &Status,
    progress: &mut Progress,
) -> Result<(), SessionError> {
    let Some(c) = progress.pending_cookie.take() else { return Ok(()) };
    let hub = worker.hub();
    let own = hub.clock().server_id();
    if hub.multi_provider()
        && ferrodir_proto::message::sync::Cookie::parse(&c).is_ok_and(|k| k.sid == Some(own))
    {
        // The provider (a slapd, say) stamps its changes with this node's own server_id.
        return Err(SessionError::Other(format!(
            "the provider {} has this node's server_id {own}: every node of a mesh needs its own",
            settings.provider
        )));
    }
    applier.drain().await?;
    progress.uncommitted = 0;
    status.cookie_received(&c);
    if stored.as_deref() == Some(c.as_slice()) {
        return Ok(());
    }
    cookie::commit(worker, settings.rid, &c).await.map_err(ApplyError::from)?;
    publish_context(worker, &c);
    *stored = Some(c);
    Ok(())
}

/// A durable cookie's CSNs become this server's contextCSN: a replica's are its provider's,
/// a mesh node's raise the value of each server id its peers report (several consumers).
fn publish_context(worker: &Worker, cookie: &[u8]) {
    let hub = worker.hub();
    match hub.multi_provider() {
        true => hub.merge_replicated_context(&cookie::csns(cookie)),
        false => hub.set_replicated_context(cookie::csns(cookie)),
    }
}

fn control_value<'a>(controls: Option<&'a [Control]>, oid: &str) -> Option<&'a [u8]> {
    controls?
        .iter()
        .find(|c| c.control_type.as_ref() == oid.as_bytes())
        .map(|c| c.control_value.as_deref().unwrap_or_default())
}

fn sync_state(controls: Option<&[Control]>) -> Result<SyncState, SessionError> {
    let value = control_value(controls, SYNC_STATE_OID)
        .ok_or_else(|| SessionError::Other("an entry without a Sync State control".into()))?;
    SyncState::decode_value(value).map_err(|e| SessionError::Other(format!("Sync State: {e}")))
}

fn sync_done(controls: Option<&[Control]>) -> Result<SyncDone, SessionError> {
    match control_value(controls, SYNC_DONE_OID) {
        Some(value) => {
            SyncDone::decode_value(value).map_err(|e| SessionError::Other(format!("Sync Done: {e}")))
        }
        None => Ok(SyncDone::default()),
    }
}
