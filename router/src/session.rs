//! The per-connection router: it decodes each request once, captures who is asking, and
//! dispatches the operation. The server's connection task feeds it whole PDUs (already
//! length-checked by `proto::frame`) and drains its [`Outbound`] channel to the socket.
//!
//! Requests are dispatched in arrival order and may run concurrently, up to the identity
//! class's `requests_pending_max` per connection (RFC 4511 §4.1.1.1: answered by
//! messageID). At that limit [`Session::dispatch`] waits for a slot, and since the
//! connection loop awaits it, the server stops reading the socket (slapd does the same):
//! TCP flow control then holds the client back, and nothing queues without bound.
//!
//! A Bind first waits for every operation in flight (RFC 4511 §4.2.1), then runs alone, so
//! a request after it always runs with the new identity. While it holds every slot it also
//! resizes the pool to the new identity's `requests_pending_max`, and the session's
//! [`ClassLimits`] (PDU size, pending requests, idle timeout) switch with it.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferrodir_proto::message::{
    decode_message, encode_message, BindRequest, Control, DecodeError, DecodeFault, ExtendedResponse,
    LdapMessage, LdapResult, OctetString, ProtocolOp,
};
use ferrodir_proto::ResultCode;
use ferrodir_shard::{StopReason, StopSignal};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use crate::limits::{check_controls, check_request, ClassLimits};
use crate::op;
use crate::op::context::{OpContext, Outbound};
use crate::op::extended::START_TLS_OID;
use crate::requester::Identity;
use crate::requester::Transport;
use crate::stats::{BindMethod, OpKind};
use crate::worker::Worker;

/// RFC 4511 §4.4.1: the responseName of a Notice of Disconnection.
pub const NOTICE_OF_DISCONNECTION_OID: &str = "1.3.6.1.4.1.1466.20036";

/// Whether the connection goes on after a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Close,
    /// StartTLS succeeded: the connection discards what it has buffered, takes the socket
    /// back from its writer, runs the TLS handshake and sets the new [`Transport`].
    StartTls,
}

/// What the session learned of a request as it arrived, for the operation's context.
struct Arrival {
    message_id: u32,
    kind: OpKind,
    received: Instant,
    /// The request's number on the connection, for the access log.
    op_number: i64,
}

fn bind_method(request: &BindRequest) -> BindMethod {
    match &request.authentication {
        ferrodir_proto::message::AuthenticationChoice::Sasl(_) => BindMethod::Sasl,
        ferrodir_proto::message::AuthenticationChoice::Simple(p) if p.is_empty() => BindMethod::Anonymous,
        ferrodir_proto::message::AuthenticationChoice::Simple(_) => BindMethod::Simple,
    }
}

/// The metrics label of a request.
fn op_kind(op: &ProtocolOp) -> OpKind {
    match op {
        ProtocolOp::BindRequest(_) => OpKind::Bind,
        ProtocolOp::UnbindRequest => OpKind::Unbind,
        ProtocolOp::SearchRequest(_) => OpKind::Search,
        ProtocolOp::ModifyRequest(_) => OpKind::Modify,
        ProtocolOp::AddRequest(_) => OpKind::Add,
        ProtocolOp::DelRequest(_) => OpKind::Delete,
        ProtocolOp::ModifyDnRequest(_) => OpKind::ModDn,
        ProtocolOp::CompareRequest(_) => OpKind::Compare,
        ProtocolOp::AbandonRequest(_) => OpKind::Abandon,
        _ => OpKind::Extended,
    }
}

struct SessionState {
    identity: RefCell<Identity>,
    transport: RefCell<Rc<Transport>>,
    /// The limits of `identity`'s class; replaced when a Bind completes.
    limits: Cell<ClassLimits>,
    in_flight: RefCell<HashMap<u32, Arc<StopSignal>>>,
    /// One permit per request that may be pending; `slots_total` of them exist.
    slots: Arc<Semaphore>,
    /// Changed only by a Bind, while it holds every permit.
    slots_total: Cell<u32>,
    /// Set when an operation ended without finishing (it panicked; tokio caught it): its
    /// response is lost, so the connection closes rather than leave the client waiting.
    broken: Cell<bool>,
    broken_notify: Notify,
    /// A Notice of Disconnection was sent (a protocol violation): for the close reason.
    disconnected: Cell<bool>,
    /// The bound password must be changed first (`ppolicy::reset`); set by a Bind, cleared
    /// by the change.
    must_change: Rc<Cell<bool>>,
    /// A SASL exchange between its binds (SCRAM): at most one, dropped by any request other
    /// than the Bind that continues it (RFC 4513 §5.2.1.4 has a client abort by sending
    /// anything else).
    sasl: RefCell<Option<op::sasl::scram::Pending>>,
    /// The connection's open LDAP transaction (RFC 5805, `op::transaction`): dropped by a
    /// Bind, and with the session.
    txn: op::transaction::Slot,
}

/// Held by each spawned operation: releases its slot and its in-flight entry however the
/// operation ends, and marks the session broken if it ended without finishing.
struct OpGuard {
    state: Rc<SessionState>,
    /// Whether the server is stopping, when the operation ends unfinished.
    worker: Rc<Worker>,
    message_id: u32,
    finished: bool,
    _permit: OwnedSemaphorePermit,
}

impl OpGuard {
    /// The operation answered. Consumes the guard, so the task owns all of it.
    fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        // try_: a panic may have unwound out of a borrow elsewhere; never panic in drop.
        if let Ok(mut in_flight) = self.state.in_flight.try_borrow_mut() {
            in_flight.remove(&self.message_id);
        }
        if !self.finished {
            if self.worker.is_stopping() {
                // The workers stop after the shutdown grace: a persist search, say, ends here.
                tracing::debug!(message_id = self.message_id, "an operation ended by the server's shutdown");
            } else {
                tracing::error!(
                    message_id = self.message_id,
                    "an operation ended without an answer (panic): closing its connection"
                );
            }
            self.state.broken.set(true);
            self.state.broken_notify.notify_one();
        }
    }
}

pub struct Session {
    worker: Rc<Worker>,
    out: mpsc::Sender<Outbound>,
    state: Rc<SessionState>,
    /// The connection's number in the access log.
    conn_id: u64,
    /// The next operation's number on this connection (389-ds counts from 0).
    next_op: Cell<i64>,
    /// Sorted searches kept between pages; dropped with the connection.
    sorts: Rc<crate::op::sort::Sessions>,
}

impl Session {
    /// A session that starts anonymous, under the anonymous class's limits.
    pub fn new(worker: Rc<Worker>, out: mpsc::Sender<Outbound>, transport: Transport, conn_id: u64) -> Self {
        let limits = worker.with_config(|config| *config.limits_for(&Identity::Anonymous));
        let slots_total = limits.requests_pending_max.max(1);
        let state = SessionState {
            identity: RefCell::new(Identity::Anonymous),
            transport: RefCell::new(Rc::new(transport)),
            limits: Cell::new(limits),
            in_flight: RefCell::new(HashMap::new()),
            slots: Arc::new(Semaphore::new(slots_total as usize)),
            slots_total: Cell::new(slots_total),
            broken: Cell::new(false),
            broken_notify: Notify::new(),
            disconnected: Cell::new(false),
            must_change: Rc::default(),
            sasl: RefCell::new(None),
            txn: op::transaction::Slot::default(),
        };
        Self {
            worker,
            out,
            state: Rc::new(state),
            conn_id,
            next_op: Cell::new(0),
            sorts: crate::op::sort::Sessions::new(),
        }
    }

    /// Whether an operation of this session panicked: the connection must close.
    pub fn is_broken(&self) -> bool {
        self.state.broken.get()
    }

    /// Resolves once an operation of this session panicked.
    pub async fn broken(&self) {
        while !self.state.broken.get() {
            self.state.broken_notify.notified().await;
        }
    }

    /// The limits the session runs under now: its identity class's. The connection loop
    /// reads them for every frame it checks, so they change when a Bind succeeds.
    pub fn limits(&self) -> ClassLimits {
        self.state.limits.get()
    }

    /// Requests dispatched and not yet answered. A connection with any is never idle.
    pub fn requests_pending(&self) -> usize {
        let total = self.state.slots_total.get() as usize;
        total.saturating_sub(self.state.slots.available_permits())
    }

    /// The refusal to send before running a request: an unsupported critical control, or a
    /// request shaped past the request limits.
    fn refusal(&self, op: &ProtocolOp, controls: Option<&[Control]>) -> Option<LdapResult> {
        op::controls::check(controls, matches!(op, ProtocolOp::SearchRequest(_)))
            .or_else(|| self.worker.with_config(|config| check_request(&config.limits.request, op, controls)))
    }

    /// Handles one whole PDU. Returns `Flow::Close` after Unbind or a protocol violation.
    pub async fn dispatch(&self, pdu: &[u8]) -> Flow {
        let message = match decode_message(pdu) {
            Ok(message) => message,
            Err(e) => return self.refuse_undecodable(e).await,
        };
        let LdapMessage { message_id, protocol_op, controls } = message;
        let arrival = self.arrive(message_id, &protocol_op);
        // Only a Bind may continue a SASL exchange (it takes the exchange itself).
        if !matches!(protocol_op, ProtocolOp::BindRequest(_)) {
            self.state.sasl.borrow_mut().take();
        }
        match protocol_op {
            ProtocolOp::UnbindRequest => {
                self.answered_at_once(&arrival);
                self.cancel_all();
                Flow::Close
            }
            ProtocolOp::AbandonRequest(target) => {
                if let Some(flag) = self.state.in_flight.borrow().get(&target) {
                    flag.raise(StopReason::Abandon);
                }
                self.answered_at_once(&arrival);
                Flow::Continue
            }
            ProtocolOp::BindRequest(request) => self.bind(arrival, request, controls).await,
            ProtocolOp::ExtendedRequest(request)
                if request.request_name.as_ref() == START_TLS_OID.as_bytes() =>
            {
                self.start_tls(message_id, request.request_value.is_some()).await
            }
            ProtocolOp::ExtendedRequest(request)
                if request.request_name.as_ref() == op::cancel::CANCEL_OID.as_bytes() =>
            {
                self.cancel(arrival, request.request_value.as_deref())
            }
            ProtocolOp::ExtendedRequest(request) if op::transaction::is_start(&request) => {
                self.transaction_start(arrival, request.request_value.as_deref()).await
            }
            ProtocolOp::ExtendedRequest(request) if op::transaction::is_end(&request) => {
                self.transaction_end(arrival, request.request_value.as_deref()).await
            }
            op if op::transaction::is_update(&op) && op::transaction::spec(controls.as_deref()).is_some() => {
                self.transaction_queue(arrival, op, controls, pdu.len()).await
            }
            op if op::is_request(&op) => self.spawn_operation(arrival, op, controls).await,
            _ => {
                // A response PDU, or an op we don't know: RFC 4511 §4.1.1.
                self.disconnect("unexpected protocolOp").await;
                Flow::Close
            }
        }
    }

    /// Counts a decoded request, numbers it on the connection and logs it.
    fn arrive(&self, message_id: u32, op: &ProtocolOp) -> Arrival {
        let received = Instant::now();
        let kind = op_kind(op);
        let stats = &self.worker.stats;
        stats.initiated(kind);
        let op_number = self.next_op.get();
        self.next_op.set(op_number + 1);
        if let Some(sink) = &self.worker.access_log {
            sink.request(self.conn_id, op_number, op);
        }
        if let ProtocolOp::SearchRequest(request) = op {
            stats.search_scope(request.scope as usize);
        }
        Arrival { message_id, kind, received, op_number }
    }

    /// Counts as done a request that gets no response (Unbind, Abandon).
    fn answered_at_once(&self, arrival: &Arrival) {
        let elapsed = arrival.received.elapsed();
        self.worker.stats.completed(arrival.kind, ResultCode::SUCCESS, Duration::ZERO, elapsed);
    }

    /// Waits for the operations in flight, then binds alone; the session takes the new
    /// identity and resizes its pool of slots to that identity's class.
    async fn bind(&self, arrival: Arrival, request: BindRequest, controls: Option<Vec<Control>>) -> Flow {
        let Ok(all) = self.state.slots.clone().acquire_many_owned(self.state.slots_total.get()).await else {
            return Flow::Close;
        };
        let mut ctx = self.context(arrival.message_id, Arc::new(StopSignal::new()));
        (ctx.kind, ctx.received, ctx.bind_method) =
            (Some(arrival.kind), arrival.received, Some(bind_method(&request)));
        ctx.op_number = arrival.op_number;
        if self.worker.access_log.is_some() {
            ctx.log_dn = Some(String::from_utf8_lossy(&request.name).into_owned());
        }
        let refusal = op::controls::check_bind(controls.as_deref()).or_else(|| {
            self.worker.with_config(|config| check_controls(&config.limits.request, controls.as_deref()))
        });
        // Whatever this bind is, the exchange under way ends here or goes on from it.
        let pending = self.state.sasl.borrow_mut().take();
        // As slapd: a Bind ends the connection's transaction (its End then names none).
        self.state.txn.drop_open();
        if let Some(refusal) = refusal {
            ctx.respond(op::bind::response(refusal)).await;
        } else {
            // The Password Policy control asks for its answer on the BindResponse.
            ctx.controls = controls;
            let (identity, pending) = op::bind::bind(&ctx, request, pending).await;
            *self.state.sasl.borrow_mut() = pending;
            self.set_identity(identity);
        }
        // Nothing else holds a slot now: resize the pool to the identity's class.
        all.forget();
        let slots_total = self.state.limits.get().requests_pending_max.max(1);
        self.state.slots.add_permits(slots_total as usize);
        self.state.slots_total.set(slots_total);
        Flow::Continue
    }

    /// Takes a slot (waiting for one at the limit), then runs the operation on its own
    /// task, so that the next request is read while it runs.
    async fn spawn_operation(
        &self,
        arrival: Arrival,
        op: ProtocolOp,
        controls: Option<Vec<Control>>,
    ) -> Flow {
        let Ok(permit) = self.state.slots.clone().acquire_owned().await else {
            return Flow::Close;
        };
        let message_id = arrival.message_id;
        let cancel = Arc::new(StopSignal::new());
        self.state.in_flight.borrow_mut().insert(message_id, cancel.clone());
        let mut ctx = self.context(message_id, cancel);
        (ctx.kind, ctx.received, ctx.op_number) = (Some(arrival.kind), arrival.received, arrival.op_number);
        let refusal = self.refusal(&op, controls.as_deref());
        ctx.controls = controls;
        let guard = OpGuard {
            state: self.state.clone(),
            worker: self.worker.clone(),
            message_id,
            finished: false,
            _permit: permit,
        };
        // A panic in the operation is caught by tokio, which drops this future and
        // with it the guard: slot and in-flight entry are released, and the
        // connection is closed (its response is lost). Other connections go on.
        actix::spawn(async move {
            match refusal {
                Some(result) => op::respond_error(&ctx, &op, result).await,
                None => op::run(&ctx, op).await,
            }
            guard.finish();
        });
        Flow::Continue
    }

    /// Cancel (RFC 3909, `op::cancel`): runs on its own task, answered once the operation
    /// it names has answered, while the connection reads on.
    fn cancel(&self, arrival: Arrival, value: Option<&[u8]>) -> Flow {
        let mut ctx = self.context(arrival.message_id, Arc::new(StopSignal::new()));
        (ctx.kind, ctx.received, ctx.op_number) = (Some(arrival.kind), arrival.received, arrival.op_number);
        let target = op::cancel::target(value);
        let state = self.state.clone();
        actix::spawn(async move {
            let response = match target {
                None => op::cancel::malformed(),
                Some(id) if id == ctx.message_id => op::cancel::cannot_cancel(),
                Some(id) => {
                    let signal = state.in_flight.borrow().get(&id).cloned();
                    let gone = || !state.in_flight.borrow().contains_key(&id);
                    op::cancel::cancel(signal, gone).await
                }
            };
            ctx.respond(ProtocolOp::ExtendedResponse(response)).await;
        });
        Flow::Continue
    }

    /// Start Transaction (RFC 5805, `op::transaction`): answered at once.
    async fn transaction_start(&self, arrival: Arrival, value: Option<&[u8]>) -> Flow {
        let ctx = self.arrived_context(&arrival);
        let response = op::transaction::start(&self.state.txn, &ctx.identity, value);
        ctx.respond(ProtocolOp::ExtendedResponse(response)).await;
        Flow::Continue
    }

    /// An update with the Transaction Specification control: checked, queued and answered
    /// at once.
    async fn transaction_queue(
        &self,
        arrival: Arrival,
        op: ProtocolOp,
        controls: Option<Vec<Control>>,
        pdu_bytes: usize,
    ) -> Flow {
        let ctx = self.arrived_context(&arrival);
        let response = op::transaction::queue(&self.state.txn, &ctx, op, controls, pdu_bytes);
        ctx.respond(response).await;
        Flow::Continue
    }

    /// End Transaction: an abort or a refusal is answered at once; a commit runs on its own
    /// task holding a slot (a Bind waits for it), while the connection reads on.
    async fn transaction_end(&self, arrival: Arrival, value: Option<&[u8]>) -> Flow {
        let ctx = self.arrived_context(&arrival);
        let pending = match op::transaction::end(&self.state.txn, value) {
            op::transaction::End::Answer(response) => {
                ctx.respond(ProtocolOp::ExtendedResponse(response)).await;
                return Flow::Continue;
            }
            op::transaction::End::Commit(pending) => pending,
        };
        let Ok(permit) = self.state.slots.clone().acquire_owned().await else {
            return Flow::Close;
        };
        let guard = OpGuard {
            state: self.state.clone(),
            worker: self.worker.clone(),
            message_id: arrival.message_id,
            finished: false,
            _permit: permit,
        };
        actix::spawn(async move {
            let response = op::transaction::commit(&ctx, pending).await;
            ctx.respond(ProtocolOp::ExtendedResponse(response)).await;
            guard.finish();
        });
        Flow::Continue
    }

    /// The context of a request the session answers itself.
    fn arrived_context(&self, arrival: &Arrival) -> OpContext {
        let mut ctx = self.context(arrival.message_id, Arc::new(StopSignal::new()));
        (ctx.kind, ctx.received, ctx.op_number) = (Some(arrival.kind), arrival.received, arrival.op_number);
        ctx
    }

    /// StartTLS (RFC 4511 §4.14), refused as slapd refuses it: with a request value
    /// (protocolError), when no certificate is configured (protocolError), on a connection
    /// already under TLS or an ldapi socket, and while other operations are outstanding
    /// (operationsError). On success the session drops to anonymous, as slapd does by
    /// default (its `disallow tls_2_anon` is off): a bind made in the clear is not carried
    /// into the protected session. The connection then sends the response and hands over.
    async fn start_tls(&self, message_id: u32, has_value: bool) -> Flow {
        let transport = self.transport();
        let refusal = if has_value {
            Some((ResultCode::PROTOCOL_ERROR, "no request data expected"))
        } else if !self.worker.with_config(|config| config.tls_offered) {
            // Not offered (no certificate), so not in supportedExtension: an operation the
            // server does not recognise, protocolError (RFC 4511 §4.12), as slapd answers.
            Some((ResultCode::PROTOCOL_ERROR, "unsupported extended operation"))
        } else if transport.tls || transport.ldapi {
            Some((ResultCode::OPERATIONS_ERROR, "TLS already started"))
        } else if self.requests_pending() > 0 {
            Some((ResultCode::OPERATIONS_ERROR, "cannot start TLS when operations are outstanding"))
        } else {
            None
        };
        let mut ctx = self.context(message_id, Arc::new(StopSignal::new()));
        ctx.kind = Some(OpKind::Extended);
        ctx.op_number = self.next_op.get() - 1;
        let (result, flow) = match refusal {
            Some((code, text)) => (LdapResult::error(code, text), Flow::Continue),
            None => (LdapResult::success(), Flow::StartTls),
        };
        let response = ExtendedResponse {
            result,
            response_name: Some(OctetString::from_static(START_TLS_OID.as_bytes())),
            response_value: None,
        };
        ctx.respond(ProtocolOp::ExtendedResponse(response)).await;
        if flow == Flow::StartTls {
            self.set_identity(Identity::Anonymous);
            let _ = self.out.send(Outbound::Handover).await;
        }
        flow
    }

    /// A PDU that did not decode: an unknown ENUMERATED value in a search or modify gets
    /// that operation's protocolError response and the connection goes on (slapd does so);
    /// anything else is a decoding error, answered with a Notice of Disconnection.
    async fn refuse_undecodable(&self, error: DecodeError) -> Flow {
        tracing::debug!(message_id = ?error.message_id, reason = %error.reason, "undecodable PDU");
        if let (Some(message_id), DecodeFault::UnknownEnumerated(field)) = (error.message_id, error.fault) {
            if let Some(response) = op::unknown_enumerated_response(field) {
                self.context(message_id, Arc::new(StopSignal::new())).respond(response).await;
                return Flow::Continue;
            }
        }
        self.disconnect("decoding error").await;
        Flow::Close
    }

    /// The connection's transport now.
    pub fn transport(&self) -> Rc<Transport> {
        self.state.transport.borrow().clone()
    }

    /// Replaces the transport (after StartTLS): later requests see the new one.
    pub fn set_transport(&self, transport: Transport) {
        *self.state.transport.borrow_mut() = Rc::new(transport);
    }

    fn set_identity(&self, identity: Identity) {
        // cn=Monitor's connection entry shows the bound DN: updated here, on Bind only.
        self.worker.with_config(|config| {
            config.monitor.connections.bound(self.conn_id, identity.author());
            self.state.limits.set(*config.limits_for(&identity));
        });
        *self.state.identity.borrow_mut() = identity;
    }

    fn context(&self, message_id: u32, cancel: Arc<StopSignal>) -> OpContext {
        OpContext {
            worker: self.worker.clone(),
            config: self.worker.config(),
            out: self.out.clone(),
            message_id,
            identity: self.state.identity.borrow().clone(),
            transport: self.state.transport.borrow().clone(),
            kind: None,
            bind_method: None,
            received: Instant::now(),
            started: Instant::now(),
            conn_id: self.conn_id,
            op_number: -1,
            entries: Cell::new(0),
            notes: Cell::new(None),
            policy_error: Cell::new(None),
            response_controls: Default::default(),
            proxied_by: None,
            must_change: self.state.must_change.clone(),
            log_dn: None,
            cancel,
            controls: None,
            sorts: self.sorts.clone(),
        }
    }

    /// Stops every operation in flight (Unbind, or the connection closing).
    pub fn cancel_all(&self) {
        for flag in self.state.in_flight.borrow().values() {
            flag.raise(StopReason::Closed);
        }
    }

    /// Whether the session ended with a Notice of Disconnection.
    pub fn is_disconnected(&self) -> bool {
        self.state.disconnected.get()
    }

    /// Sends a Notice of Disconnection (RFC 4511 §4.4.1) with protocolError, then closes.
    pub async fn disconnect(&self, reason: &str) {
        self.state.disconnected.set(true);
        self.cancel_all();
        let notice = LdapMessage {
            message_id: 0,
            protocol_op: ProtocolOp::ExtendedResponse(ExtendedResponse {
                result: LdapResult::new(ResultCode::PROTOCOL_ERROR, String::new(), reason),
                response_name: Some(OctetString::from_static(NOTICE_OF_DISCONNECTION_OID.as_bytes())),
                response_value: None,
            }),
            controls: None,
        };
        if let Ok(pdu) = encode_message(&notice) {
            let _ = self.out.send(Outbound::Pdu(Bytes::from(pdu))).await;
        }
        let _ = self.out.send(Outbound::Close).await;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.cancel_all();
    }
}

#[cfg(test)]
mod tests {
    use ferrodir_proto::message::{ProtocolOp, SearchScope};
    use ferrodir_proto::ResultCode;

    use super::Flow;
    use crate::testkit::{run, search_request, TestDirectory, SUFFIX};

    /// Requests sent one after another without waiting run concurrently; each answer
    /// carries its request's messageID, whatever order they finish in.
    #[test]
    fn a_pipeline_of_requests_is_answered_by_message_id() {
        run(async {
            let directory = TestDirectory::with_people(2).await;
            let mut client = directory.connect();
            let mut sent = Vec::new();
            for uid in ["alice", "bob", "nobody"] {
                let filter = format!("(uid={uid})");
                let request = search_request(SUFFIX, SearchScope::WholeSubtree, &filter, &["uid"]);
                let (message_id, flow) = client.send(ProtocolOp::SearchRequest(request)).await;
                assert_eq!(flow, Flow::Continue);
                sent.push((message_id, uid));
            }
            // Read the answers in the reverse order of the requests.
            for (message_id, uid) in sent.into_iter().rev() {
                let answer = client.answer(message_id).await;
                assert!(answer.iter().all(|m| m.message_id == message_id));
                let entries: Vec<_> = answer
                    .iter()
                    .filter_map(|m| match &m.protocol_op {
                        ProtocolOp::SearchResultEntry(e) => {
                            Some(String::from_utf8_lossy(&e.object_name).into_owned())
                        }
                        _ => None,
                    })
                    .collect();
                let expected: Vec<String> = match uid {
                    "nobody" => Vec::new(),
                    uid => vec![format!("uid={uid},ou=people,dc=example,dc=com")],
                };
                assert_eq!(entries, expected);
                let Some(ProtocolOp::SearchResultDone(done)) = answer.last().map(|m| &m.protocol_op) else {
                    panic!("no SearchResultDone for {message_id}: {answer:?}");
                };
                assert_eq!(done.result_code, ResultCode::SUCCESS);
            }
            assert_eq!(client.session.requests_pending(), 0);
        });
    }

    #[test]
    fn unbind_closes_the_session_without_an_answer() {
        run(async {
            let directory = TestDirectory::open(1).await;
            let mut client = directory.connect();
            assert_eq!(client.bind("", "").await, ResultCode::SUCCESS);
            let (_, flow) = client.send(ProtocolOp::UnbindRequest).await;
            assert_eq!(flow, Flow::Close);
            assert!(!client.saw_close(), "the connection closes the socket; nothing is sent");
            assert!(!client.session.is_disconnected());
        });
    }

    #[test]
    fn an_undecodable_pdu_gets_a_notice_of_disconnection_and_closes() {
        run(async {
            let directory = TestDirectory::open(1).await;
            let mut client = directory.connect();
            assert_eq!(client.session.dispatch(&[0x30, 0x03, 0x02, 0x01]).await, Flow::Close);
            let notice = client.answer(0).await;
            let Some(ProtocolOp::ExtendedResponse(response)) = notice.first().map(|m| &m.protocol_op) else {
                panic!("no notice: {notice:?}");
            };
            assert_eq!(response.result.result_code, ResultCode::PROTOCOL_ERROR);
            assert!(client.saw_close());
            assert!(client.session.is_disconnected());
        });
    }
}
