//! What one operation runs with: [`OpContext`], captured by the session at dispatch, and
//! [`Outbound`], what goes to the connection's writer. Every operation under `op/` takes
//! these; they live here, below the operations and the session, so that `session` imports
//! `op` and never the other way round.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use crate::config::DirectoryConfig;
use std::time::Instant;

use bytes::Bytes;
use ferrodir_proto::message::{encode_message, Control, LdapMessage, LdapResult, ProtocolOp};
use ferrodir_proto::ResultCode;
use ferrodir_shard::StopSignal;
use tokio::sync::mpsc;

use crate::access::Asker;
use crate::accesslog;
use crate::requester::{Identity, Transport};
use crate::stats::{BindMethod, OpKind};
use crate::worker::Worker;

/// What the connection's writer sends.
#[derive(Debug)]
pub enum Outbound {
    Pdu(Bytes),
    Pdus(Vec<Bytes>),
    /// Flush what came before, then close the connection.
    Close,
    /// Flush what came before, then stop writing and hand the socket back to the
    /// connection (StartTLS: the TLS handshake follows the success response).
    Handover,
}

/// Everything one operation needs, captured at dispatch.
#[derive(Clone)]
pub struct OpContext {
    pub worker: Rc<Worker>,
    /// The configuration the operation runs under from start to end (taken at dispatch:
    /// a reload changes only the operations that start after it).
    pub config: Arc<DirectoryConfig>,
    pub out: mpsc::Sender<Outbound>,
    pub message_id: u32,
    pub identity: Identity,
    /// The connection's transport when the request was dispatched.
    pub transport: Rc<Transport>,
    /// For the metrics: which operation, when its PDU arrived and when it started.
    /// None for answers to what never was an operation (an undecodable PDU).
    pub kind: Option<OpKind>,
    pub bind_method: Option<BindMethod>,
    pub received: Instant,
    pub started: Instant,
    /// For the access log: the connection's number, this operation's number on it, the
    /// entries it sent, 389-ds's notes, and for a Bind its DN.
    pub conn_id: u64,
    pub op_number: i64,
    pub entries: Cell<u64>,
    pub notes: Cell<Option<&'static str>>,
    pub log_dn: Option<String>,
    /// Raised by Abandon, Unbind or the connection closing; every shard's part of a search
    /// checks it between entries.
    pub cancel: Arc<StopSignal>,
    /// The request's controls (already checked: every critical one is supported).
    pub controls: Option<Vec<Control>>,
    /// What the password policy says of this operation's new password, for the Password
    /// Policy response control on an Add, a Modify or a Password Modify (`ppolicy`).
    pub policy_error: Cell<Option<ferrodir_proto::message::ppolicy::PolicyError>>,
    /// The connection's bind was told changeAfterReset: until its password is changed, it
    /// may only change it (`ppolicy::reset`). Shared with the session.
    pub must_change: std::rc::Rc<Cell<bool>>,
    /// The connection's sorted sessions (op::sort), kept between a sorted search's pages.
    pub sorts: Rc<crate::op::sort::store::Sessions>,
    /// Under proxied authorization (`op::proxy_authz`), the bound identity that asked:
    /// `identity` is then the one the operation runs as.
    pub proxied_by: Option<Identity>,
    /// Response controls the operation gathered for its final response (pre-read and
    /// post-read, `op::write_controls`).
    pub response_controls: std::cell::RefCell<Vec<Control>>,
}

impl Asker for OpContext {
    fn config(&self) -> &DirectoryConfig {
        &self.config
    }

    fn worker(&self) -> &Worker {
        &self.worker
    }

    fn identity(&self) -> &Identity {
        &self.identity
    }

    fn transport(&self) -> &Transport {
        &self.transport
    }
}

impl OpContext {
    pub fn cancelled(&self) -> bool {
        self.cancel.is_raised()
    }

    /// Sends one response PDU with this operation's messageID. An abandoned operation gets
    /// no response (RFC 4511 §4.11). A final response is counted in the worker's stats.
    /// The password policy refused this operation's new password.
    pub fn set_policy_error(&self, error: ferrodir_proto::message::ppolicy::PolicyError) {
        self.policy_error.set(Some(error));
    }

    /// The Password Policy response control of an Add, a Modify or a Password Modify: when
    /// the request asked for it and the policy refused the password (slapd sends none when
    /// it has nothing to say there).
    pub fn policy_controls(&self) -> Option<Vec<Control>> {
        use ferrodir_proto::message::ppolicy::{PasswordPolicyResponse, PASSWORD_POLICY_OID};
        let oid = PASSWORD_POLICY_OID.as_bytes();
        let asked = self.controls.iter().flatten().any(|c| c.control_type.as_ref() == oid);
        let error = self.policy_error.get();
        if !asked || error.is_none() {
            return None;
        }
        let response = PasswordPolicyResponse { warning: None, error };
        let value = response.encode_value().ok()?;
        Some(vec![Control {
            control_type: ferrodir_proto::message::OctetString::from_static(oid),
            criticality: false,
            control_value: Some(ferrodir_proto::message::OctetString::from(value)),
        }])
    }

    /// Adds a control to the operation's final response.
    pub fn add_response_control(&self, control: Control) {
        self.response_controls.borrow_mut().push(control);
    }

    /// A write's response controls: the Password Policy control's, then those the
    /// operation gathered.
    pub fn write_response_controls(&self) -> Option<Vec<Control>> {
        let mut controls = self.policy_controls().unwrap_or_default();
        controls.extend(self.response_controls.take());
        (!controls.is_empty()).then_some(controls)
    }

    pub async fn respond(&self, op: ProtocolOp) {
        self.respond_with(op, None).await;
    }

    /// [`Self::respond`] with response controls (e.g. a paged search's cookie).
    pub async fn respond_with(&self, op: ProtocolOp, controls: Option<Vec<Control>>) {
        let mut op = op;
        let mut code = final_code(&op);
        if matches!(op, ProtocolOp::SearchResultEntry(_)) {
            self.count_entries(1);
        }
        match self.cancel.raised() {
            None => {}
            // RFC 3909: a cancelled read answers canceled (118); a write has gone too far
            // once it runs (its shard commits it), so it answers as it is, and the Cancel
            // says tooLate. Nothing but the final response goes out after a Cancel.
            Some(ferrodir_shard::StopReason::Cancel) if code.is_some() => {
                if matches!(self.kind, Some(OpKind::Search | OpKind::Compare)) {
                    op = canceled(op);
                    code = Some(ResultCode::CANCELED);
                    self.cancel.set_answered(true);
                }
            }
            // Abandoned (or the connection closed): no response at all (RFC 4511 §4.11).
            Some(_) => {
                if code.is_some() {
                    self.record(ResultCode::CANCELED);
                }
                return;
            }
        }
        if let Some(code) = code {
            if self.cancel.answered().is_none() {
                self.cancel.set_answered(false);
            }
            self.record(code);
        }
        let message = LdapMessage { message_id: self.message_id, protocol_op: op, controls };
        match encode_message(&message) {
            Ok(pdu) => {
                let _ = self.out.send(Outbound::Pdu(Bytes::from(pdu))).await;
            }
            Err(e) => tracing::error!(error = %e, "cannot encode a response"),
        }
    }
}

/// `op` (a final response) answering canceled (118), its diagnostic emptied.
fn canceled(op: ProtocolOp) -> ProtocolOp {
    let result = LdapResult::error(ResultCode::CANCELED, "");
    match op {
        ProtocolOp::SearchResultDone(_) => ProtocolOp::SearchResultDone(result),
        ProtocolOp::CompareResponse(_) => ProtocolOp::CompareResponse(result),
        other => other,
    }
}

/// The result code of a final response; None for entries, references and intermediate
/// responses, which an operation may send many of.
fn final_code(op: &ProtocolOp) -> Option<ResultCode> {
    let result = match op {
        ProtocolOp::BindResponse(r) => &r.result,
        ProtocolOp::SearchResultDone(r)
        | ProtocolOp::ModifyResponse(r)
        | ProtocolOp::AddResponse(r)
        | ProtocolOp::DelResponse(r)
        | ProtocolOp::ModifyDnResponse(r)
        | ProtocolOp::CompareResponse(r) => r,
        ProtocolOp::ExtendedResponse(r) => &r.result,
        _ => return None,
    };
    Some(result.result_code)
}

impl OpContext {
    /// `count` more entries went to the client (for the access log's nentries).
    pub fn count_entries(&self, count: usize) {
        self.entries.set(self.entries.get() + count as u64);
    }

    /// 389-ds's notes for the RESULT line ("A": no index narrowed the search).
    pub fn note(&self, notes: &'static str) {
        self.notes.set(Some(notes));
    }

    fn record(&self, code: ResultCode) {
        let Some(kind) = self.kind else { return };
        let stats = &self.worker.stats;
        let (queue_wait, execution) = (self.started - self.received, self.started.elapsed());
        stats.completed(kind, code, queue_wait, execution);
        if let Some(method) = self.bind_method {
            stats.bind(method, code == ResultCode::SUCCESS);
        }
        if let Some(sink) = &self.worker.access_log {
            let outcome = accesslog::Outcome {
                authzid: self.proxied_by.as_ref().map(|_| {
                    self.identity.authz_id(&|oid| self.config.rules.get(oid).map(|r| r.display.clone()))
                }),
                code: code.0,
                tag: response_tag(kind),
                entries: self.entries.get(),
                queue_wait,
                execution,
                notes: self.notes.get(),
                dn: self.log_dn.clone(),
            };
            sink.result(self.conn_id, self.op_number, &outcome);
        }
    }
}

/// The protocolOp tag number of `kind`'s final response, as 389-ds logs it (tag=).
fn response_tag(kind: OpKind) -> u8 {
    match kind {
        OpKind::Bind => 97,
        OpKind::Search => 101,
        OpKind::Modify => 103,
        OpKind::Add => 105,
        OpKind::Delete => 107,
        OpKind::ModDn => 109,
        OpKind::Compare => 111,
        OpKind::Extended => 120,
        OpKind::Unbind | OpKind::Abandon => 0,
    }
}
