//! Per-worker counters for the metrics endpoint.
//!
//! Nothing here is written by more than one thread: each worker thread owns one
//! [`WorkerStats`] and is the only writer of its atomics (relaxed stores on cache lines no
//! other core writes), so counting an operation costs a few uncontended additions and
//! never bounces a cache line between cores. The metrics endpoint, on a thread of its own,
//! reads every worker's counters at scrape time and sums them. What can be derived is not
//! counted twice: operations in flight are initiated minus completed, connections open are
//! accepted minus closed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ferrodir_proto::ResultCode;

/// An LDAP operation, as a metrics label.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    Bind,
    Unbind,
    Search,
    Modify,
    Add,
    Delete,
    ModDn,
    Compare,
    Abandon,
    Extended,
}

impl OpKind {
    pub const ALL: [OpKind; 10] = [
        OpKind::Bind,
        OpKind::Unbind,
        OpKind::Search,
        OpKind::Modify,
        OpKind::Add,
        OpKind::Delete,
        OpKind::ModDn,
        OpKind::Compare,
        OpKind::Abandon,
        OpKind::Extended,
    ];

    /// The label value (slapd's cn=Operations names, lowercased).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Bind => "bind",
            OpKind::Unbind => "unbind",
            OpKind::Search => "search",
            OpKind::Modify => "modify",
            OpKind::Add => "add",
            OpKind::Delete => "delete",
            OpKind::ModDn => "modrdn",
            OpKind::Compare => "compare",
            OpKind::Abandon => "abandon",
            OpKind::Extended => "extended",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A result code, as a small fixed set of label values (never the code itself: bounded
/// cardinality whatever a client provokes).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ResultClass {
    /// success, compareTrue/compareFalse, saslBindInProgress.
    Success,
    /// noSuchObject, entryAlreadyExists, notAllowedOnNonLeaf, noSuchAttribute...: the
    /// request named something that is not (or already) there.
    NotFound,
    /// invalidCredentials, insufficientAccessRights, strongerAuthRequired,
    /// confidentialityRequired, inappropriateAuthentication, authMethodNotSupported.
    Denied,
    /// Limits: sizeLimitExceeded, timeLimitExceeded, adminLimitExceeded, busy.
    Limit,
    /// The client's request was wrong: protocolError, invalidDNSyntax, schema violations,
    /// unwillingToPerform, unavailableCriticalExtension...
    ClientError,
    /// The server failed: operationsError, unavailable, other.
    ServerError,
    /// Abandoned (or its connection closed) before it answered: no response was sent.
    Abandoned,
}

impl ResultClass {
    pub const ALL: [ResultClass; 7] = [
        ResultClass::Success,
        ResultClass::NotFound,
        ResultClass::Denied,
        ResultClass::Limit,
        ResultClass::ClientError,
        ResultClass::ServerError,
        ResultClass::Abandoned,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ResultClass::Success => "success",
            ResultClass::NotFound => "not_found",
            ResultClass::Denied => "denied",
            ResultClass::Limit => "limit",
            ResultClass::ClientError => "client_error",
            ResultClass::ServerError => "server_error",
            ResultClass::Abandoned => "abandoned",
        }
    }

    pub fn of(code: ResultCode) -> Self {
        match code.0 {
            0 | 5 | 6 | 14 => ResultClass::Success,
            16 | 20 | 32 | 66 | 68 => ResultClass::NotFound,
            7 | 8 | 13 | 48 | 49 | 50 => ResultClass::Denied,
            3 | 4 | 11 | 51 => ResultClass::Limit,
            1 | 52 | 80 => ResultClass::ServerError,
            118 => ResultClass::Abandoned,
            _ => ResultClass::ClientError,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How a Bind authenticated, as a label.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BindMethod {
    Anonymous,
    Simple,
    Sasl,
}

impl BindMethod {
    pub const ALL: [BindMethod; 3] = [BindMethod::Anonymous, BindMethod::Simple, BindMethod::Sasl];

    pub fn name(self) -> &'static str {
        match self {
            BindMethod::Anonymous => "anonymous",
            BindMethod::Simple => "simple",
            BindMethod::Sasl => "sasl",
        }
    }
}

/// Why a connection ended, as a label.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// The client unbound or closed its side.
    Client,
    /// Idle for the class's `idle_timeout_s`.
    Idle,
    /// A broken PDU or a protocol violation (Notice of Disconnection sent).
    Protocol,
    /// A TLS handshake failed or timed out.
    Tls,
    /// A read or write error, or the peer didn't read within `write_timeout_s`.
    Io,
}

impl CloseReason {
    pub const ALL: [CloseReason; 5] =
        [CloseReason::Client, CloseReason::Idle, CloseReason::Protocol, CloseReason::Tls, CloseReason::Io];

    pub fn name(self) -> &'static str {
        match self {
            CloseReason::Client => "client",
            CloseReason::Idle => "idle",
            CloseReason::Protocol => "protocol_error",
            CloseReason::Tls => "tls_handshake",
            CloseReason::Io => "io",
        }
    }
}

/// Which listener a connection came in on, as a label.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Listener {
    Ldap,
    Ldaps,
    Ldapi,
}

impl Listener {
    pub const ALL: [Listener; 3] = [Listener::Ldap, Listener::Ldaps, Listener::Ldapi];

    pub fn name(self) -> &'static str {
        match self {
            Listener::Ldap => "ldap",
            Listener::Ldaps => "ldaps",
            Listener::Ldapi => "ldapi",
        }
    }
}

/// Upper bounds of the latency buckets, in seconds: 50 µs to 10 s.
pub const LATENCY_BUCKETS_S: [f64; 17] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0,
];

/// A latency histogram written by one thread: a count per bucket (not cumulative; the
/// endpoint accumulates) and the sum in nanoseconds.
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS_S.len() + 1],
    sum_ns: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let slot =
            LATENCY_BUCKETS_S.iter().position(|&bound| seconds <= bound).unwrap_or(LATENCY_BUCKETS_S.len());
        if let Some(bucket) = self.buckets.get(slot) {
            bump(bucket, 1);
        }
        bump(&self.sum_ns, u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Counts per bucket (the last is above every bound) and the sum in seconds.
    pub fn read(&self) -> (Vec<u64>, f64) {
        let counts = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        (counts, self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9)
    }
}

/// One worker thread's counters (see the module doc).
#[derive(Default)]
pub struct WorkerStats {
    initiated: [AtomicU64; OpKind::ALL.len()],
    completed: [[AtomicU64; ResultClass::ALL.len()]; OpKind::ALL.len()],
    /// From the PDU's arrival to the operation starting (waiting for a pending-request slot
    /// or, for a Bind, for the operations before it).
    queue_wait: [Histogram; OpKind::ALL.len()],
    /// From the operation starting to its final response being queued.
    execution: [Histogram; OpKind::ALL.len()],
    /// Arrival to final response.
    total: [Histogram; OpKind::ALL.len()],
    binds: [[AtomicU64; 2]; BindMethod::ALL.len()],
    /// By scope: base, one, sub, children.
    searches_by_scope: [AtomicU64; 4],
    pub unindexed_searches: AtomicU64,
    pub entries_returned: AtomicU64,
    pub pdus_in: AtomicU64,
    pub bytes_in: AtomicU64,
    pub pdus_out: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Access-log lines dropped because the log thread fell behind.
    pub access_log_dropped: AtomicU64,
    /// Audit-log records dropped because the log thread fell behind (`auditlog`).
    pub audit_log_dropped: AtomicU64,
    closed: [[AtomicU64; CloseReason::ALL.len()]; Listener::ALL.len()],
}

/// A relaxed add on a counter only this thread writes.
pub fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

impl WorkerStats {
    pub fn initiated(&self, kind: OpKind) {
        if let Some(c) = self.initiated.get(kind.index()) {
            bump(c, 1);
        }
    }

    /// An operation's final response: its class and its three latencies.
    pub fn completed(&self, kind: OpKind, code: ResultCode, queue_wait: Duration, execution: Duration) {
        let i = kind.index();
        if let Some(c) = self.completed.get(i).and_then(|row| row.get(ResultClass::of(code).index())) {
            bump(c, 1);
        }
        if let (Some(q), Some(e), Some(t)) =
            (self.queue_wait.get(i), self.execution.get(i), self.total.get(i))
        {
            q.observe(queue_wait);
            e.observe(execution);
            t.observe(queue_wait + execution);
        }
    }

    pub fn bind(&self, method: BindMethod, success: bool) {
        if let Some(c) = self.binds.get(method as usize).and_then(|row| row.get(usize::from(success))) {
            bump(c, 1);
        }
    }

    pub fn search_scope(&self, scope: usize) {
        if let Some(c) = self.searches_by_scope.get(scope) {
            bump(c, 1);
        }
    }

    pub fn closed(&self, listener: Listener, reason: CloseReason) {
        if let Some(c) = self.closed.get(listener as usize).and_then(|row| row.get(reason as usize)) {
            bump(c, 1);
        }
    }

    // ---- read at scrape time ----

    pub fn initiated_count(&self, kind: OpKind) -> u64 {
        self.initiated.get(kind.index()).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    pub fn completed_count(&self, kind: OpKind, class: ResultClass) -> u64 {
        self.completed
            .get(kind.index())
            .and_then(|row| row.get(class.index()))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The histograms of `kind`: queue wait, execution, total.
    pub fn latencies(&self, kind: OpKind) -> [Option<&Histogram>; 3] {
        let i = kind.index();
        [self.queue_wait.get(i), self.execution.get(i), self.total.get(i)]
    }

    pub fn bind_count(&self, method: BindMethod, success: bool) -> u64 {
        self.binds
            .get(method as usize)
            .and_then(|row| row.get(usize::from(success)))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    pub fn scope_count(&self, scope: usize) -> u64 {
        self.searches_by_scope.get(scope).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    pub fn closed_count(&self, listener: Listener, reason: CloseReason) -> u64 {
        self.closed
            .get(listener as usize)
            .and_then(|row| row.get(reason as usize))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_bucket() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(40));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let (counts, sum) = h.read();
        assert_eq!(counts[0], 1);
        assert_eq!(counts[6], 1, "3 ms is in the 5 ms bucket");
        assert_eq!(counts[LATENCY_BUCKETS_S.len()], 1, "above every bound");
        assert!((sum - 60.00304).abs() < 1e-6);
    }

    #[test]
    fn result_codes_fall_into_few_classes() {
        assert_eq!(ResultClass::of(ResultCode::SUCCESS), ResultClass::Success);
        assert_eq!(ResultClass::of(ResultCode::NO_SUCH_OBJECT), ResultClass::NotFound);
        assert_eq!(ResultClass::of(ResultCode::INVALID_CREDENTIALS), ResultClass::Denied);
        assert_eq!(ResultClass::of(ResultCode::SIZE_LIMIT_EXCEEDED), ResultClass::Limit);
        assert_eq!(ResultClass::of(ResultCode::UNAVAILABLE), ResultClass::ServerError);
        assert_eq!(ResultClass::of(ResultCode(123)), ResultClass::ClientError);
    }
}
