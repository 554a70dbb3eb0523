//! LDAP transactions (RFC 5805), answered as slapd 2.5 answers them (docs/CONFORMANCE.md,
//! "Transactions"):
//!
//! - Start Transaction (1.3.6.1.1.21.1) opens the connection's one transaction and answers
//!   its identifier; a second one while it is open is busy (51), "Too many transactions";
//!   an anonymous connection gets strongerAuthRequired (8), as its writes would.
//! - An Add, Delete, Modify or Modify DN carrying the Transaction Specification control
//!   (1.3.6.1.1.21.2) is checked as slapd checks it then (the control critical, the
//!   identifier the open one, the DN's syntax, the other controls and the request limits),
//!   queued, and answered success at once: its real outcome comes with End.
//! - End Transaction (1.3.6.1.1.21.3) with commit FALSE drops the queue ("transaction
//!   aborted"); with commit TRUE it applies the updates in order. The first that fails
//!   stops the commit: the ones already applied are undone, and End answers that update's
//!   result code with `txnEndRes { messageID }` naming it.
//!
//! A Bind or the connection closing drops the open transaction. At most
//! `[limits] transaction_operations_max` updates, and [`BYTES_MAX`] bytes of requests, are
//! queued per transaction: one more is adminLimitExceeded (11) and is not queued.
//!
//! Undo: before an update is applied its entry's before-image is read (as the server, every
//! attribute), and an undo is kept — delete what an Add created, add back what a Delete
//! removed, rename back and restore the user attributes of what a Modify or Modify DN
//! changed. The undos run in reverse order, as the rootDN.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferrodir_proto::message::{
    AddRequest, Change, Control, ExtendedRequest, ExtendedResponse, LdapResult, ModifyDnRequest,
    ModifyOperation, ModifyRequest, OctetString, PartialAttribute, ProtocolOp,
};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::EntryRecord;

use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::requester::Identity;

/// RFC 5805 §2.1: the Start Transaction request's requestName.
pub const START_OID: &str = "1.3.6.1.1.21.1";
/// RFC 5805 §2.2: the Transaction Specification control.
pub const SPEC_OID: &str = crate::op::controls::TXN_SPEC_OID;
/// RFC 5805 §2.3: the End Transaction request's requestName.
pub const END_OID: &str = "1.3.6.1.1.21.3";

/// OpenLDAP's LDAP_X_TXN_ID_INVALID (0x4121): an update or End naming a transaction this
/// connection has not open. RFC 5805 names no code for it; slapd answers this one.
pub const INVALID_ID: ResultCode = ResultCode(0x4121);

/// Bytes of queued requests one transaction may hold (the requests' encoded sizes): with
/// `transaction_operations_max` it bounds what an open transaction keeps in memory.
pub const BYTES_MAX: usize = 16 << 20;

/// Fresh identifiers, unique in the process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One queued update.
struct Queued {
    message_id: u32,
    op: ProtocolOp,
    /// Its controls, without the transaction's.
    controls: Option<Vec<Control>>,
}

/// The connection's open transaction.
struct Open {
    id: Vec<u8>,
    updates: Vec<Queued>,
    bytes: usize,
}

/// A connection's transaction slot: at most one open (RFC 5805 lets a server limit that;
/// slapd allows one).
#[derive(Default)]
pub struct Slot(RefCell<Option<Open>>);

impl Slot {
    /// Drops the open transaction (a Bind; the connection closing drops the slot).
    pub fn drop_open(&self) {
        self.0.borrow_mut().take();
    }
}

fn named(request: &ExtendedRequest, oid: &str) -> bool {
    request.request_name.as_ref() == oid.as_bytes()
}

pub fn is_start(request: &ExtendedRequest) -> bool {
    named(request, START_OID)
}

pub fn is_end(request: &ExtendedRequest) -> bool {
    named(request, END_OID)
}

/// Whether `op` may be part of a transaction (RFC 5805 §2.2: the update operations).
pub fn is_update(op: &ProtocolOp) -> bool {
    matches!(
        op,
        ProtocolOp::AddRequest(_)
            | ProtocolOp::DelRequest(_)
            | ProtocolOp::ModifyRequest(_)
            | ProtocolOp::ModifyDnRequest(_)
    )
}

/// The Transaction Specification control among `controls`, if any.
pub fn spec(controls: Option<&[Control]>) -> Option<&Control> {
    controls?.iter().find(|c| c.control_type.as_ref() == SPEC_OID.as_bytes())
}

fn extended(code: ResultCode, text: &str) -> ExtendedResponse {
    ExtendedResponse { result: LdapResult::error(code, text), response_name: None, response_value: None }
}

/// Start Transaction: a fresh identifier, or slapd's refusal.
pub fn start(slot: &Slot, identity: &Identity, value: Option<&[u8]>) -> ExtendedResponse {
    if value.is_some() {
        return extended(ResultCode::PROTOCOL_ERROR, "no request data expected");
    }
    if matches!(identity, Identity::Anonymous) {
        return extended(ResultCode::STRONGER_AUTH_REQUIRED, "modifications require authentication");
    }
    let mut open = slot.0.borrow_mut();
    if open.is_some() {
        return extended(ResultCode::BUSY, "Too many transactions");
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed).to_string().into_bytes();
    *open = Some(Open { id: id.clone(), updates: Vec::new(), bytes: 0 });
    ExtendedResponse {
        result: LdapResult::success(),
        response_name: None,
        response_value: Some(OctetString::from(id)),
    }
}

/// Checks an update carrying the Transaction Specification control and queues it: the
/// response to send for it now (success when queued).
pub fn queue(
    slot: &Slot,
    ctx: &OpContext,
    op: ProtocolOp,
    controls: Option<Vec<Control>>,
    pdu_bytes: usize,
) -> ProtocolOp {
    let respond = update_response(&op);
    match check_and_queue(slot, ctx, op, controls, pdu_bytes) {
        Ok(()) => respond(LdapResult::success()),
        Err(e) => respond(e.to_result()),
    }
}

fn check_and_queue(
    slot: &Slot,
    ctx: &OpContext,
    op: ProtocolOp,
    controls: Option<Vec<Control>>,
    pdu_bytes: usize,
) -> LdapResultOf<()> {
    let Some(control) = spec(controls.as_deref()) else {
        return Err(LdapError::protocol("no transaction specification control"));
    };
    if !control.criticality {
        return Err(LdapError::protocol("txnSpec control must be marked critical"));
    }
    crate::access::check_not_anonymous(&ctx.identity)?;
    let id = control.control_value.as_deref().unwrap_or_default().to_vec();
    let mut open = slot.0.borrow_mut();
    let open = match open.as_mut() {
        Some(open) if open.id == id => open,
        _ => return Err(LdapError::new(INVALID_ID, "invalid transaction identifier")),
    };
    crate::op::parse_dn(&ctx.config, target_dn(&op))?;
    let rest: Vec<Control> = controls
        .iter()
        .flatten()
        .filter(|c| c.control_type.as_ref() != SPEC_OID.as_bytes())
        .cloned()
        .collect();
    let rest = (!rest.is_empty()).then_some(rest);
    if let Some(refusal) = crate::op::controls::check(rest.as_deref(), false) {
        return Err(from_result(refusal));
    }
    let limits = &ctx.config.limits.request;
    if let Some(refusal) = crate::limits::check_request(limits, &op, rest.as_deref()) {
        return Err(from_result(refusal));
    }
    if open.updates.len() >= limits.transaction_operations_max {
        return Err(LdapError::new(
            ResultCode::ADMIN_LIMIT_EXCEEDED,
            format!("transaction_operations_max ({}) reached", limits.transaction_operations_max),
        ));
    }
    if open.bytes.saturating_add(pdu_bytes) > BYTES_MAX {
        return Err(LdapError::new(
            ResultCode::ADMIN_LIMIT_EXCEEDED,
            format!("the transaction's requests would exceed {BYTES_MAX} bytes"),
        ));
    }
    open.bytes += pdu_bytes;
    open.updates.push(Queued { message_id: ctx.message_id, op, controls: rest });
    Ok(())
}

/// A refusal computed as a result, as an error.
fn from_result(result: LdapResult) -> LdapError {
    LdapError::new(result.result_code, String::from_utf8_lossy(&result.diagnostic_message).into_owned())
}

fn target_dn(op: &ProtocolOp) -> &[u8] {
    match op {
        ProtocolOp::AddRequest(r) => &r.entry,
        ProtocolOp::DelRequest(dn) => dn,
        ProtocolOp::ModifyRequest(r) => &r.object,
        ProtocolOp::ModifyDnRequest(r) => &r.entry,
        _ => &[],
    }
}

/// `txnEndReq ::= SEQUENCE { commit BOOLEAN DEFAULT TRUE, identifier OCTET STRING }`, read
/// by hand (a DEFAULT field): (commit, identifier), or None when malformed.
fn parse_end(value: &[u8]) -> Option<(bool, Vec<u8>)> {
    fn tlv(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let tag = *bytes.first()?;
        let first = *bytes.get(1)?;
        let (len, at) = if first < 0x80 {
            (first as usize, 2)
        } else {
            let n = (first & 0x7f) as usize;
            if n == 0 || n > 4 {
                return None;
            }
            let len = bytes.get(2..2 + n)?.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
            (len, 2 + n)
        };
        let body = bytes.get(at..at.checked_add(len)?)?;
        let rest = bytes.get(at + len..)?;
        Some((tag, body, rest))
    }
    let (tag, body, rest) = tlv(value)?;
    if tag != 0x30 || !rest.is_empty() {
        return None;
    }
    let (mut tag, mut field, mut rest) = tlv(body)?;
    let mut commit = true;
    if tag == 0x01 {
        commit = *field.first()? != 0;
        if field.len() != 1 {
            return None;
        }
        (tag, field, rest) = tlv(rest)?;
    }
    (tag == 0x04 && rest.is_empty()).then(|| (commit, field.to_vec()))
}

/// What an End asks, once checked against the open transaction.
pub enum End {
    /// Answer this now (a refusal, or an abort done).
    Answer(ExtendedResponse),
    /// Commit these updates (`commit`).
    Commit(Pending),
}

/// A transaction taken out of its slot to be committed.
pub struct Pending(Vec<Queued>);

/// End Transaction: aborts, refuses, or takes the transaction out to be committed.
pub fn end(slot: &Slot, value: Option<&[u8]>) -> End {
    let Some(value) = value else {
        return End::Answer(extended(ResultCode::PROTOCOL_ERROR, "request data expected"));
    };
    let Some((commit, id)) = parse_end(value) else {
        return End::Answer(extended(ResultCode::PROTOCOL_ERROR, "request data decoding error"));
    };
    let mut open = slot.0.borrow_mut();
    if open.as_ref().is_none_or(|open| open.id != id) {
        return End::Answer(extended(INVALID_ID, "invalid transaction identifier"));
    }
    let Some(taken) = open.take() else {
        return End::Answer(extended(INVALID_ID, "invalid transaction identifier"));
    };
    if !commit {
        return End::Answer(ExtendedResponse {
            result: LdapResult::new(ResultCode::SUCCESS, String::new(), "transaction aborted"),
            response_name: None,
            response_value: None,
        });
    }
    End::Commit(Pending(taken.updates))
}

/// How to take back one applied update.
enum Undo {
    /// An Add: delete the entry.
    Delete(Vec<u8>),
    /// A Delete: add the entry back (its user attributes).
    Restore { dn: Vec<u8>, before: Arc<EntryRecord> },
    /// A Modify: put the entry's user attributes back as they were.
    Revert { dn: Vec<u8>, before: Arc<EntryRecord> },
    /// A Modify DN: rename back, then revert.
    Rename { now: Vec<u8>, old_rdn: String, old_parent: String, old_dn: Vec<u8>, before: Arc<EntryRecord> },
}

/// Records `undo` as the next step of the transaction `txn` (None: its first) in the intent
/// log, durably, before its update is applied: the step's sequence number.
async fn record(ctx: &OpContext, txn: Option<u64>, undo: &Undo) -> LdapResultOf<u64> {
    let steps = encode_steps(std::slice::from_ref(undo));
    ctx.worker.coordinator.send(crate::coordinator::TransactionStep { txn, steps }).await?
}

/// Clears one step (`whole` false) or the whole transaction from the intent log.
async fn clear(ctx: &OpContext, seq: u64, whole: bool) -> LdapResultOf<()> {
    ctx.worker.coordinator.send(crate::coordinator::ClearTransaction { seq, whole }).await?
}

/// Commits `pending` in order; the End's response. The intent log holds, before each
/// update is applied, its undo (one record per update, appended): a crash at any point
/// leaves the steps from which the next start rolls the transaction back (`recover`).
pub async fn commit(ctx: &OpContext, pending: Pending) -> ExtendedResponse {
    // Below `[limits] disk_free_min_bytes` none of it runs: refused whole, before its first
    // update (a rollback's own writes are never refused for space).
    if let Err(refused) = ctx.config.disk.check() {
        let first = pending.0.first().map_or(0, |q| q.message_id);
        return failed(ctx, None, Vec::new(), first, refused).await;
    }
    let mut undos: Vec<Undo> = Vec::new();
    // The transaction's first step's sequence number, once recorded.
    let mut txn = None;
    let mut applied = 0usize;
    for queued in pending.0 {
        let mut op_ctx = ctx.clone();
        op_ctx.message_id = queued.message_id;
        op_ctx.controls = queued.controls;
        op_ctx.response_controls = Default::default();
        let undo = match prepare_undo(&op_ctx, &queued.op).await {
            Ok(undo) => undo,
            Err(e) => return failed(ctx, txn, undos, queued.message_id, e).await,
        };
        let step = match record(ctx, txn, &undo).await {
            Ok(step) => step,
            Err(e) => return failed(ctx, txn, undos, queued.message_id, e).await,
        };
        let txn_now = *txn.get_or_insert(step);
        if let Err(e) = apply(&op_ctx, queued.op).await {
            // Not applied: its undo must not run, even from recovery after a crash during
            // the rollback of the others. (The first step is the whole transaction then.)
            let whole = step == txn_now;
            if let Err(stuck) = clear(ctx, step, whole).await {
                tracing::warn!(error = %stuck, "transaction rollback: a failed update's undo stays logged");
            }
            let txn = if whole { None } else { txn };
            return failed(ctx, txn, undos, queued.message_id, e).await;
        }
        undos.push(undo);
        applied += 1;
        pause_for_crash_test(applied).await;
    }
    if let Some(txn) = txn {
        done(ctx, txn).await;
    }
    ExtendedResponse { result: LdapResult::success(), response_name: None, response_value: None }
}

/// The transaction is committed or rolled back: its steps leave the intent log.
async fn done(ctx: &OpContext, txn: u64) {
    if let Err(e) = clear(ctx, txn, true).await {
        tracing::warn!(txn, error = %e, "transaction done; its steps stay logged until the next start");
    }
}

/// Test-only (the `fault-injection` feature): with `FERRODIR_TEST_TXN_PAUSE_AFTER=n` in the
/// environment, a commit stops for good once its n-th update is applied, so that the crash
/// test can kill the server between two updates of one transaction.
async fn pause_for_crash_test(applied: usize) {
    #[cfg(feature = "fault-injection")]
    {
        let pause = std::env::var("FERRODIR_TEST_TXN_PAUSE_AFTER").ok().and_then(|v| v.parse::<usize>().ok());
        if pause == Some(applied) {
            tracing::warn!(applied, "fault injection: the transaction's commit stops here");
            std::future::pending::<()>().await;
        }
    }
    let _ = applied;
}

/// Test-only (the `fault-injection` feature): with `FERRODIR_TEST_TXN_ROLLBACK_PAUSE_AFTER=n`
/// in the environment, a rollback stops for good before its (n+1)-th action (a Modify DN
/// undone counts two: the rename back, then the revert), for the crash test.
async fn pause_rollback_for_crash_test() {
    #[cfg(feature = "fault-injection")]
    {
        thread_local! {
            static ACTIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        }
        let pause = std::env::var("FERRODIR_TEST_TXN_ROLLBACK_PAUSE_AFTER")
            .ok()
            .and_then(|v| v.parse::<usize>().ok());
        if let Some(pause) = pause {
            let done = ACTIONS.with(|a| {
                let done = a.get();
                a.set(done + 1);
                done
            });
            if done == pause {
                tracing::warn!(done, "fault injection: the transaction's rollback stops here");
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The commit stopped at `message_id` with `error`: undo what was applied (`undos`, whose
/// steps are in the transaction `txn`'s intent) and answer.
async fn failed(
    ctx: &OpContext,
    txn: Option<u64>,
    undos: Vec<Undo>,
    message_id: u32,
    error: LdapError,
) -> ExtendedResponse {
    roll_back(ctx, undos).await;
    if let Some(txn) = txn {
        done(ctx, txn).await;
    }
    let mut result = error.to_result();
    // slapd sends the code alone; the diagnostic stays ours.
    result.matched_dn = OctetString::from_static(b"");
    ExtendedResponse { result, response_name: None, response_value: Some(end_response(message_id)) }
}

/// `txnEndRes ::= SEQUENCE { messageID MessageID OPTIONAL, ... }` naming the failed update.
fn end_response(message_id: u32) -> OctetString {
    let mut int = message_id.to_be_bytes().to_vec();
    while int.len() > 1 && int.first() == Some(&0) && int.get(1).is_some_and(|b| b & 0x80 == 0) {
        int.remove(0);
    }
    if int.first().is_some_and(|b| b & 0x80 != 0) {
        int.insert(0, 0);
    }
    let mut out = vec![0x30, (int.len() + 2) as u8, 0x02, int.len() as u8];
    out.extend_from_slice(&int);
    OctetString::from(out)
}

/// Runs one update as the requester (under proxied authorization when it asks for it), as
/// `op::run` would.
async fn apply(ctx: &OpContext, op: ProtocolOp) -> LdapResultOf<()> {
    // A connection that must change its password first may do nothing else
    // (`ppolicy::reset`); in a transaction, not even that.
    if ctx.must_change.get() {
        return Err(LdapError::new(
            ResultCode::INSUFFICIENT_ACCESS_RIGHTS,
            crate::ppolicy::reset::RESTRICTED,
        ));
    }
    let proxied;
    let ctx = match crate::op::proxy_authz::assume(ctx).await? {
        None => ctx,
        Some(next) => {
            proxied = next;
            &proxied
        }
    };
    match op {
        ProtocolOp::AddRequest(req) => crate::op::add::add(ctx, req).await,
        ProtocolOp::DelRequest(dn) => crate::op::delete::delete(ctx, &dn).await,
        ProtocolOp::ModifyRequest(req) => crate::op::modify::modify(ctx, req).await,
        ProtocolOp::ModifyDnRequest(req) => crate::op::moddn::modify_dn(ctx, req).await,
        _ => Err(LdapError::protocol("not an update")),
    }
}

/// The entry named `dn` as stored, or None when there is none.
async fn before_image(ctx: &OpContext, dn: &NormDn) -> LdapResultOf<Option<Arc<EntryRecord>>> {
    match crate::resolve::locate(&ctx.worker, dn).await {
        Ok(found) => ctx.worker.fetch(found.id).await,
        Err(e) if e.code == ResultCode::NO_SUCH_OBJECT => Ok(None),
        Err(e) => Err(e),
    }
}

/// The undo of `op`, from its entry as it is now. An entry missing now makes the update
/// fail by itself; its undo is then never needed.
async fn prepare_undo(ctx: &OpContext, op: &ProtocolOp) -> LdapResultOf<Undo> {
    let dn_bytes = target_dn(op).to_vec();
    let dn = crate::op::parse_dn(&ctx.config, &dn_bytes)?;
    if let ProtocolOp::AddRequest(_) = op {
        return Ok(Undo::Delete(dn_bytes));
    }
    let Some(before) = before_image(ctx, &dn).await? else {
        // The update will fail with noSuchObject: nothing to undo.
        return Ok(Undo::Delete(Vec::new()));
    };
    Ok(match op {
        ProtocolOp::DelRequest(_) => Undo::Restore { dn: dn_bytes, before },
        ProtocolOp::ModifyDnRequest(ModifyDnRequest { newrdn, new_superior, .. }) => {
            let old_parent = dn.dn.parent().map(|p| p.to_string()).unwrap_or_default();
            let parent = match new_superior {
                Some(superior) => String::from_utf8_lossy(superior).into_owned(),
                None => old_parent.clone(),
            };
            let newrdn = String::from_utf8_lossy(newrdn);
            let now = if parent.is_empty() { newrdn.into_owned() } else { format!("{newrdn},{parent}") };
            Undo::Rename {
                now: now.into_bytes(),
                old_rdn: before.rdn.clone(),
                old_parent,
                old_dn: dn_bytes,
                before,
            }
        }
        _ => Undo::Revert { dn: dn_bytes, before },
    })
}

/// The server's own context for undo steps: the rootDN, no controls.
fn as_server(ctx: &OpContext) -> OpContext {
    let mut server = ctx.clone();
    server.identity = Identity::Root(Arc::new(ctx.config.root_dn.clone().unwrap_or_default()));
    server.proxied_by = None;
    server.controls = None;
    server.response_controls = Default::default();
    server
}

/// Whether the schema lets a client write `name` (what an undo may put back).
fn user_attribute(ctx: &OpContext, name: &str) -> bool {
    let base = ferrodir_proto::entry::base_name_lower(name);
    ctx.config.schema.attribute(&base).is_some_and(|t| !t.is_operational() && !t.no_user_modification)
}

fn values(values: &[Vec<u8>]) -> Vec<OctetString> {
    values.iter().map(|v| OctetString::from(v.clone())).collect()
}

/// Runs `undos` in reverse order; a step that fails is logged and the others still run.
async fn roll_back(ctx: &OpContext, undos: Vec<Undo>) {
    for undo in undos.into_iter().rev() {
        if let Err(e) = run_undo(ctx, undo).await {
            // An entry already back as it was (a rollback run twice) answers so.
            if !matches!(e.code, ResultCode::NO_SUCH_OBJECT | ResultCode::ENTRY_ALREADY_EXISTS) {
                tracing::error!(error = %e, "transaction rollback: an undo step failed");
            }
        }
    }
}

/// Rolls back every transaction whose commit a crash interrupted, from the intents it
/// left: run once at start, before the server listens. Answers how many.
pub async fn recover(worker: std::rc::Rc<crate::worker::Worker>) -> LdapResultOf<usize> {
    let pending = worker.coordinator.send(crate::coordinator::PendingTransactions).await??;
    if pending.is_empty() {
        return Ok(0);
    }
    let (out, _unused) = tokio::sync::mpsc::channel(1);
    let ctx = OpContext {
        config: worker.config(),
        worker: worker.clone(),
        out,
        message_id: 0,
        identity: Identity::Anonymous,
        transport: std::rc::Rc::new(crate::requester::Transport::default()),
        kind: None,
        bind_method: None,
        received: std::time::Instant::now(),
        started: std::time::Instant::now(),
        conn_id: 0,
        op_number: -1,
        entries: std::cell::Cell::new(0),
        notes: std::cell::Cell::new(None),
        policy_error: std::cell::Cell::new(None),
        response_controls: Default::default(),
        proxied_by: None,
        must_change: Default::default(),
        log_dn: None,
        cancel: Arc::new(ferrodir_shard::StopSignal::new()),
        controls: None,
        sorts: crate::op::sort::Sessions::new(),
    };
    for (seq, steps) in &pending {
        let Some(undos) = decode_steps(steps) else {
            return Err(LdapError::internal(format!("undecodable transaction intent {seq}")));
        };
        tracing::warn!(seq, steps = undos.len(), "rolling back a transaction a crash interrupted");
        roll_back(&ctx, undos).await;
        clear(&ctx, *seq, true).await?;
    }
    Ok(pending.len())
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// The undo list as the intent stores it: per step a kind byte and length-prefixed fields
/// (DNs, RDNs, and entry records in the shard's own encoding).
fn encode_steps(undos: &[Undo]) -> Vec<u8> {
    let mut out = Vec::new();
    for undo in undos {
        match undo {
            Undo::Delete(dn) => {
                out.push(0);
                put(&mut out, dn);
            }
            Undo::Restore { dn, before } => {
                out.push(1);
                put(&mut out, dn);
                put(&mut out, &before.encode());
            }
            Undo::Revert { dn, before } => {
                out.push(2);
                put(&mut out, dn);
                put(&mut out, &before.encode());
            }
            Undo::Rename { now, old_rdn, old_parent, old_dn, before } => {
                out.push(3);
                put(&mut out, now);
                put(&mut out, old_rdn.as_bytes());
                put(&mut out, old_parent.as_bytes());
                put(&mut out, old_dn);
                put(&mut out, &before.encode());
            }
        }
    }
    out
}

fn decode_steps(mut bytes: &[u8]) -> Option<Vec<Undo>> {
    fn take<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
        let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        let field = bytes.get(4..4usize.checked_add(len)?)?;
        *bytes = bytes.get(4 + len..)?;
        Some(field)
    }
    fn record(bytes: &mut &[u8]) -> Option<Arc<EntryRecord>> {
        EntryRecord::decode(take(bytes)?).ok().map(Arc::new)
    }
    fn text(bytes: &mut &[u8]) -> Option<String> {
        String::from_utf8(take(bytes)?.to_vec()).ok()
    }
    let mut undos = Vec::new();
    while let Some((&kind, rest)) = bytes.split_first() {
        bytes = rest;
        let undo = match kind {
            0 => Undo::Delete(take(&mut bytes)?.to_vec()),
            1 => Undo::Restore { dn: take(&mut bytes)?.to_vec(), before: record(&mut bytes)? },
            2 => Undo::Revert { dn: take(&mut bytes)?.to_vec(), before: record(&mut bytes)? },
            3 => Undo::Rename {
                now: take(&mut bytes)?.to_vec(),
                old_rdn: text(&mut bytes)?,
                old_parent: text(&mut bytes)?,
                old_dn: take(&mut bytes)?.to_vec(),
                before: record(&mut bytes)?,
            },
            _ => return None,
        };
        undos.push(undo);
    }
    Some(undos)
}

async fn run_undo(ctx: &OpContext, undo: Undo) -> LdapResultOf<()> {
    let server = as_server(ctx);
    pause_rollback_for_crash_test().await;
    match undo {
        Undo::Delete(dn) if dn.is_empty() => Ok(()),
        Undo::Delete(dn) => crate::op::delete::delete(&server, &dn).await,
        Undo::Restore { dn, before } => {
            let attributes = before
                .entry
                .attrs
                .iter()
                .filter(|a| user_attribute(ctx, &a.name))
                .map(|a| PartialAttribute {
                    r#type: OctetString::from(a.name.as_bytes()),
                    vals: values(&a.values),
                })
                .collect();
            crate::op::add::add(&server, AddRequest { entry: OctetString::from(dn), attributes }).await
        }
        Undo::Revert { dn, before } => revert(&server, dn, &before).await,
        Undo::Rename { now, old_rdn, old_parent, old_dn, before } => {
            let back = ModifyDnRequest {
                entry: OctetString::from(now),
                newrdn: OctetString::from(old_rdn.into_bytes()),
                // Not true: the entry may have had the current RDN's value before (then
                // removing it could break its schema); the revert puts every value back.
                deleteoldrdn: false,
                new_superior: Some(OctetString::from(old_parent.into_bytes())),
            };
            match crate::op::moddn::modify_dn(&server, back).await {
                // Already renamed back (a rollback run again after a crash between its two
                // halves), or never renamed: the revert is still due.
                Err(e) if e.code == ResultCode::NO_SUCH_OBJECT => {}
                other => other?,
            }
            pause_rollback_for_crash_test().await;
            revert(&server, old_dn, &before).await
        }
    }
}

/// Puts the user attributes of the entry `dn` back to `before`'s: each of `before`'s
/// replaced by its values, each one it did not have removed.
async fn revert(server: &OpContext, dn: Vec<u8>, before: &EntryRecord) -> LdapResultOf<()> {
    let norm = crate::op::parse_dn(&server.config, &dn)?;
    let Some(now) = before_image(server, &norm).await? else {
        return Err(LdapError::new(ResultCode::NO_SUCH_OBJECT, "the entry to revert is gone"));
    };
    let replace = |name: &str, vals: Vec<OctetString>| Change {
        operation: ModifyOperation::Replace,
        modification: PartialAttribute { r#type: OctetString::from(name.as_bytes()), vals },
    };
    let mut changes = Vec::new();
    for attr in now.entry.attrs.iter().filter(|a| user_attribute(server, &a.name)) {
        if before.entry.get(&attr.name).is_none() {
            changes.push(replace(&attr.name, Vec::new()));
        }
    }
    for attr in before.entry.attrs.iter().filter(|a| user_attribute(server, &a.name)) {
        if now.entry.get(&attr.name).map(|a| &a.values) != Some(&attr.values) {
            changes.push(replace(&attr.name, values(&attr.values)));
        }
    }
    if changes.is_empty() {
        return Ok(());
    }
    crate::op::modify::modify(server, ModifyRequest { object: OctetString::from(dn), changes }).await
}

/// The response type of the update `op` (its immediate answer).
fn update_response(op: &ProtocolOp) -> fn(LdapResult) -> ProtocolOp {
    match op {
        ProtocolOp::AddRequest(_) => ProtocolOp::AddResponse,
        ProtocolOp::DelRequest(_) => ProtocolOp::DelResponse,
        ProtocolOp::ModifyRequest(_) => ProtocolOp::ModifyResponse,
        _ => ProtocolOp::ModifyDnResponse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_request_reads_commit_and_identifier() {
        assert_eq!(parse_end(&[0x30, 0x03, 0x04, 0x01, b'7']), Some((true, b"7".to_vec())));
        assert_eq!(
            parse_end(&[0x30, 0x06, 0x01, 0x01, 0x00, 0x04, 0x01, b'7']),
            Some((false, b"7".to_vec()))
        );
        assert_eq!(parse_end(&[0x30, 0x02, 0x04, 0x00]), Some((true, Vec::new())));
        assert_eq!(parse_end(&[0x30, 0x00]), None);
        assert_eq!(parse_end(&[0x30, 0x03, 0x04, 0x01]), None);
        assert_eq!(parse_end(&[0x30, 0x02, 0x04, 0x00, 0x00]), None);
    }

    use crate::testkit::{run, Client, TestDirectory, ROOT_DN, ROOT_PASSWORD, SUFFIX};
    use ferrodir_proto::message::{encode_message, LdapMessage, SearchScope};

    /// Sends `op` under `message_id` with `controls`; its final answer.
    async fn send(
        client: &mut Client,
        message_id: u32,
        op: ProtocolOp,
        controls: Vec<Control>,
    ) -> LdapMessage {
        let controls = (!controls.is_empty()).then_some(controls);
        let pdu = encode_message(&LdapMessage { message_id, protocol_op: op, controls }).unwrap();
        client.session.dispatch(&pdu).await;
        client.answer(message_id).await.pop().unwrap()
    }

    fn extended_op(oid: &str, value: Option<Vec<u8>>) -> ProtocolOp {
        ProtocolOp::ExtendedRequest(ExtendedRequest {
            request_name: OctetString::from(oid.as_bytes()),
            request_value: value.map(OctetString::from),
        })
    }

    fn spec_control(id: &[u8]) -> Vec<Control> {
        vec![Control {
            control_type: OctetString::from(SPEC_OID.as_bytes()),
            criticality: true,
            control_value: Some(OctetString::from(id)),
        }]
    }

    fn end_request(id: &[u8]) -> Vec<u8> {
        let mut out = vec![0x30, id.len() as u8 + 2, 0x04, id.len() as u8];
        out.extend_from_slice(id);
        out
    }

    fn replace_sn(dn: &str, sn: &str) -> ProtocolOp {
        ProtocolOp::ModifyRequest(ModifyRequest {
            object: OctetString::from(dn.as_bytes()),
            changes: vec![Change {
                operation: ModifyOperation::Replace,
                modification: PartialAttribute {
                    r#type: OctetString::from(&b"sn"[..]),
                    vals: vec![OctetString::from(sn.as_bytes())],
                },
            }],
        })
    }

    fn add_person(uid: &str) -> ProtocolOp {
        let attr = |name: &str, value: &str| PartialAttribute {
            r#type: OctetString::from(name.as_bytes()),
            vals: vec![OctetString::from(value.as_bytes())],
        };
        ProtocolOp::AddRequest(AddRequest {
            entry: OctetString::from(format!("uid={uid},ou=people,{SUFFIX}").into_bytes()),
            attributes: vec![
                attr("objectClass", "inetOrgPerson"),
                attr("uid", uid),
                attr("cn", uid),
                attr("sn", uid),
            ],
        })
    }

    fn result(message: &LdapMessage) -> (ResultCode, Option<Vec<u8>>) {
        match &message.protocol_op {
            ProtocolOp::ExtendedResponse(r) => {
                (r.result.result_code, r.response_value.as_ref().map(|v| v.to_vec()))
            }
            ProtocolOp::AddResponse(r) | ProtocolOp::ModifyResponse(r) => (r.result_code, None),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Over three shards: a commit whose last update fails leaves nothing, the same updates
    /// without it are all applied, and each update is answered success when queued.
    #[test]
    fn a_commit_applies_all_or_nothing() {
        run(async {
            let directory = TestDirectory::with_people(3).await;
            let mut client = directory.connect();
            assert_eq!(client.bind(ROOT_DN, ROOT_PASSWORD).await, ResultCode::SUCCESS);
            let alice = format!("uid=alice,ou=people,{SUFFIX}");
            for (round, failing) in [(100u32, true), (200, false)] {
                let started = send(&mut client, round, extended_op(START_OID, None), vec![]).await;
                let (code, id) = result(&started);
                assert_eq!(code, ResultCode::SUCCESS);
                let id = id.unwrap();
                let queued =
                    send(&mut client, round + 1, replace_sn(&alice, "Changed"), spec_control(&id)).await;
                assert_eq!(result(&queued).0, ResultCode::SUCCESS);
                let queued = send(&mut client, round + 2, add_person("carol"), spec_control(&id)).await;
                assert_eq!(result(&queued).0, ResultCode::SUCCESS);
                if failing {
                    let queued = send(&mut client, round + 3, add_person("bob"), spec_control(&id)).await;
                    assert_eq!(result(&queued).0, ResultCode::SUCCESS);
                }
                let ended =
                    send(&mut client, round + 4, extended_op(END_OID, Some(end_request(&id))), vec![]).await;
                let found =
                    client.search(SUFFIX, SearchScope::WholeSubtree, "(objectClass=*)", &["sn"]).await;
                let carol = format!("uid=carol,ou=people,{SUFFIX}");
                if failing {
                    assert_eq!(
                        result(&ended),
                        (ResultCode::ENTRY_ALREADY_EXISTS, Some(end_response(round + 3).to_vec()))
                    );
                    assert_eq!(found.values(&alice, "sn"), vec!["Liddell"]);
                    assert!(!found.dns().contains(&carol));
                } else {
                    assert_eq!(result(&ended), (ResultCode::SUCCESS, None));
                    assert_eq!(found.values(&alice, "sn"), vec!["Changed"]);
                    assert!(found.dns().contains(&carol));
                }
            }
        });
    }

    #[test]
    fn the_end_response_names_the_failed_update() {
        assert_eq!(end_response(20).as_ref(), &[0x30, 0x03, 0x02, 0x01, 0x14]);
        assert_eq!(end_response(200).as_ref(), &[0x30, 0x04, 0x02, 0x02, 0x00, 0xc8]);
    }
}
