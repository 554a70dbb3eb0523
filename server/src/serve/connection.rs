//! One client connection: read whole PDUs (framing checked before decoding), hand them to
//! the router's session, and write its responses. Reading and writing run as two tasks on
//! the connection's worker thread, joined by a bounded queue.
//!
//! What the limits do here (each read from the session's current class, so they switch
//! when a Bind succeeds):
//! - A PDU over the class's `pdu_bytes_max` gets a Notice of Disconnection (protocolError)
//!   and the connection closes, as soon as its length octets are in.
//! - At `requests_pending_max` requests in flight the session's dispatch waits for a slot,
//!   and this loop, which awaits it, stops reading: the socket's receive window fills and
//!   TCP holds the client back (slapd's `conn_max_pending` does the same).
//! - With nothing in flight and no request for `idle_timeout_s`, the connection closes.
//!   A connection with an operation outstanding is never idle.
//!
//! Memory: an idle connection holds no read or write buffer. A read buffer of
//! [`READ_BUFFER_BASE_BYTES`] is allocated when bytes arrive and freed once every whole PDU
//! in it has been handed on; a PDU larger than that first reserves its whole size from the
//! shared read budget (`read_buffers_bytes_max`) and, until it gets it, the connection
//! stops reading. A connection never waits for budget while holding some (it releases what
//! it held first), so waiting connections can't deadlock one another. The write buffer
//! exists only while responses are being written.

use std::io::ErrorKind;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use ferrodir_proto::frame::{announced_pdu_bytes, check_frame, FrameLimits};
use ferrodir_router::{ConnectionEntry, ConnectionInfo, Flow, Outbound, Session, Transport, Worker};
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{mpsc, Semaphore};

use std::os::fd::AsRawFd as _;

use ferrodir_router::accesslog::{Line, Value};
use ferrodir_router::stats::{bump, CloseReason, Listener, WorkerStats};

use crate::config::Limits;
use crate::serve::stream::{self, Reader, Stream, Writer};
use crate::serve::tls::TlsContext;

/// The read buffer a connection gets without drawing on the shared budget. Most requests
/// (a search, a bind, a small modify) fit in it whole.
pub const READ_BUFFER_BASE_BYTES: usize = 1024;

/// The write buffer, allocated while a burst of responses is written.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// What every connection shares: the server's limits and the read-buffer budget.
pub struct Shared {
    pub limits: Limits,
    /// `[tls]`, when configured: LDAPS handshakes and StartTLS.
    pub tls: Option<Arc<TlsContext>>,
    /// Test-only (`[testing] loopback_is_remote`): loopback peers count as remote.
    pub loopback_is_remote: bool,
    /// `read_buffers_bytes_max` permits, one per byte of read buffer beyond the base.
    pub read_budget: Arc<Semaphore>,
}

impl Shared {
    pub fn new(limits: Limits, tls: Option<Arc<TlsContext>>) -> Self {
        let read_budget = Arc::new(Semaphore::new(limits.read_buffers_bytes_max.min(Semaphore::MAX_PERMITS)));
        Self { limits, tls, read_budget, loopback_is_remote: false }
    }
}

/// A connection as the accept loop hands it to a worker thread: the socket (still a std
/// one, so that it registers with the worker's own runtime) and what kind it is.
pub enum Incoming {
    Plain(std::net::TcpStream),
    /// LDAPS: the TLS handshake runs first, on the worker.
    Ldaps(std::net::TcpStream),
    /// ldapi, with the peer process's uid and gid.
    Ldapi(std::os::unix::net::UnixStream, Option<(u32, u32)>),
}

impl Incoming {
    pub fn listener(&self) -> Listener {
        match self {
            Incoming::Plain(_) => Listener::Ldap,
            Incoming::Ldaps(_) => Listener::Ldaps,
            Incoming::Ldapi(..) => Listener::Ldapi,
        }
    }
}

/// Serves one accepted connection to its end.
pub async fn accept(incoming: Incoming, conn: u64, worker: Rc<Worker>, shared: Arc<Shared>) {
    let listener = incoming.listener();
    // One `serve` await for every kind of connection: an await per branch would each keep
    // its own room in this future, and every connection holds one.
    let Some((stream, transport, monitor_entry)) = open(incoming, conn, &worker, &shared).await else {
        return;
    };
    serve(stream, transport, listener, conn, worker, shared).await;
    // Leaves cn=Connections,cn=Monitor when the connection ends.
    drop(monitor_entry);
}

/// The stream of an accepted connection, after the TLS handshake for LDAPS, and its entry in
/// cn=Monitor's connection table; None when it could not be set up (a failed handshake is
/// counted and logged here).
async fn open(
    incoming: Incoming,
    conn: u64,
    worker: &Worker,
    shared: &Shared,
) -> Option<(Stream, Transport, ConnectionEntry)> {
    match incoming {
        Incoming::Plain(std_stream) => {
            let stream = TcpStream::from_std(std_stream).ok()?;
            no_delay(&stream);
            let local = is_loopback(&stream) && !shared.loopback_is_remote;
            log_connect(worker, conn, &stream, "connection");
            let entry = monitor_entry(worker, conn, &stream, "ldap");
            let transport = Transport { local, peer_name: peer_name(&stream), ..Transport::default() };
            Some((Stream::Tcp(stream), transport, entry))
        }
        Incoming::Ldaps(std_stream) => {
            let stream = TcpStream::from_std(std_stream).ok()?;
            no_delay(&stream);
            let local = is_loopback(&stream) && !shared.loopback_is_remote;
            log_connect(worker, conn, &stream, "SSL connection");
            let entry = monitor_entry(worker, conn, &stream, "ldaps");
            let transport = Transport { local, peer_name: peer_name(&stream), ..Transport::default() };
            // Boxed, here and in `serve`: a handshake's state is kilobytes, and inline it
            // would size every connection's future, plain and idle ones included.
            match Box::pin(handshake(stream, shared, transport)).await {
                Some((tls, transport)) => {
                    log_tls(worker, conn, &tls);
                    Some((Stream::Tls(Box::new(tls)), transport, entry))
                }
                None => {
                    worker.stats.closed(Listener::Ldaps, CloseReason::Tls);
                    log_closed(worker, conn, CloseReason::Tls);
                    None
                }
            }
        }
        Incoming::Ldapi(std_stream, peer_cred) => {
            let stream = UnixStream::from_std(std_stream).ok()?;
            let path = stream
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                .unwrap_or_default();
            if let Some(sink) = &worker.access_log {
                sink.emit(connect_line(conn, stream.as_raw_fd(), "connection", "local".into(), path.clone()));
            }
            let entry = worker.config().monitor.connections.open(
                conn,
                ConnectionInfo {
                    peer_address: format!("PATH={path}"),
                    local_address: format!("PATH={path}"),
                    listener: format!("ldapi://{}/", path.replace('/', "%2F")),
                    started: std::time::SystemTime::now(),
                    authz_dn: String::new(),
                },
            );
            let peer_name = format!("PATH={path}");
            let transport =
                Transport { local: true, ldapi: true, peer_cred, peer_name, ..Transport::default() };
            Some((Stream::Unix(stream), transport, entry))
        }
    }
}

/// The peer as slapd names it: `IP=127.0.0.1:40522`, `IP=[::1]:40522`.
fn peer_name(stream: &TcpStream) -> String {
    stream.peer_addr().map_or_else(|_| String::new(), |a| format!("IP={a}"))
}

/// Connection `conn`'s entry under cn=Monitor's cn=Connections, removed when dropped (at
/// close): written on connect, bind and close only, never per operation.
fn monitor_entry(worker: &Worker, conn: u64, stream: &TcpStream, scheme: &str) -> ConnectionEntry {
    let address =
        |a: std::io::Result<std::net::SocketAddr>| a.map_or_else(|_| "unknown".into(), |a| format!("IP={a}"));
    let local = stream.local_addr().map_or_else(|_| "unknown".into(), |a| a.to_string());
    worker.config().monitor.connections.open(
        conn,
        ConnectionInfo {
            peer_address: address(stream.peer_addr()),
            local_address: address(stream.local_addr()),
            listener: format!("{scheme}://{local}/"),
            started: std::time::SystemTime::now(),
            authz_dn: String::new(),
        },
    )
}

/// `conn=N fd=F slot=F connection from A to B`, as 389-ds writes it.
fn connect_line(conn: u64, fd: i32, what: &'static str, from: String, to: String) -> Line<'static> {
    Line {
        conn,
        op: None,
        word: "",
        fields: vec![
            ("fd", Value::Raw(fd.to_string())),
            ("slot", Value::Raw(fd.to_string())),
            ("", Value::Bare(format!("{what} from {from} to {to}"))),
        ],
    }
}

fn log_connect(worker: &Worker, conn: u64, stream: &TcpStream, what: &'static str) {
    if let Some(sink) = &worker.access_log {
        let ip = |a: std::io::Result<std::net::SocketAddr>| {
            a.map(|a| a.ip().to_canonical().to_string()).unwrap_or_default()
        };
        sink.emit(connect_line(
            conn,
            stream.as_raw_fd(),
            what,
            ip(stream.peer_addr()),
            ip(stream.local_addr()),
        ));
    }
}

/// `conn=N TLS1.3 TLS13_AES_256_GCM_SHA384`, once the handshake is done.
fn log_tls(worker: &Worker, conn: u64, tls: &stream::Tls) {
    if let Some(sink) = &worker.access_log {
        let session = tls.get_ref().1;
        let version = match session.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLS1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLS1.2",
            _ => "TLS",
        };
        let suite = session.negotiated_cipher_suite().map(|s| format!("{:?}", s.suite())).unwrap_or_default();
        sink.emit(Line { conn, op: None, word: version, fields: vec![("", Value::Bare(suite))] });
    }
}

/// `conn=N op=-1 fd=F closed - U1`, with 389-ds's reason codes: U1 the client closed or
/// unbound, T1 idle timeout, B1 a broken PDU, T2 an I/O error or write timeout; B2 (ours) a
/// failed TLS handshake.
fn log_closed(worker: &Worker, conn: u64, reason: CloseReason) {
    if let Some(sink) = &worker.access_log {
        let code = match reason {
            CloseReason::Client => "U1",
            CloseReason::Idle => "T1",
            CloseReason::Protocol => "B1",
            CloseReason::Io => "T2",
            CloseReason::Tls => "B2",
        };
        sink.emit(Line {
            conn,
            op: Some(-1),
            word: "closed",
            fields: vec![("", Value::Bare(format!("- {code}")))],
        });
    }
}

/// TCP_NODELAY: every write we make is a whole response (or a TLS flight) and should
/// leave at once. With Nagle's algorithm on, a small write waits while an earlier segment is
/// unacknowledged, and the client delays its ACK (40 ms on Linux): after a TLS 1.3 handshake
/// the BindResponse queued behind the NewSessionTicket records, and a bind on a new LDAPS
/// connection took 44 ms (docs/BENCHMARKS.md, "TLS (issue #10)"). slapd sets it too.
fn no_delay(stream: &TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
}

fn is_loopback(stream: &TcpStream) -> bool {
    stream.peer_addr().is_ok_and(|addr| addr.ip().to_canonical().is_loopback())
}

/// The TLS handshake (LDAPS, or after StartTLS's response), bounded by
/// `handshake_timeout_s`. A failure closes the connection: it is logged at debug only,
/// since scanners and clients that distrust the certificate cause it all the time.
async fn handshake(
    stream: TcpStream,
    shared: &Shared,
    before: Transport,
) -> Option<(stream::Tls, Transport)> {
    let tls = shared.tls.as_ref()?;
    let (acceptor, tls_server_end_point) = tls.acceptor();
    let accepted = tokio::time::timeout(tls.handshake_timeout(), acceptor.accept(stream)).await;
    let stream = match accepted {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            return None;
        }
    };
    let client_cert_subject = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(crate::serve::tls::certificate_subject);
    let tls_exporter = channel_exporter(stream.get_ref().1);
    let transport =
        Transport { tls: true, client_cert_subject, tls_server_end_point, tls_exporter, ..before };
    Some((stream, transport))
}

/// RFC 9266 `tls-exporter`, for SCRAM's -PLUS mechanisms: under TLS 1.3 only (under TLS
/// 1.2 it is safe only with the extended master secret, which rustls doesn't report).
fn channel_exporter(session: &rustls::ServerConnection) -> Option<Vec<u8>> {
    if session.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3) {
        return None;
    }
    let exported = session.export_keying_material([0u8; 32], b"EXPORTER-Channel-Binding", Some(b""));
    exported.ok().map(|bytes| bytes.to_vec())
}

/// Why a connection's read loop ended.
enum End {
    Close(CloseReason),
    /// StartTLS succeeded: hand the socket to the TLS handshake.
    StartTls,
}

pub async fn serve(
    stream: Stream,
    transport: Transport,
    listener: Listener,
    conn: u64,
    worker: Rc<Worker>,
    shared: Arc<Shared>,
) {
    let log_worker = worker.clone();
    let limits = &shared.limits;
    let stats = worker.stats.clone();
    let (out, mut queue) = mpsc::channel(limits.outbound_pdus_queued_max.max(1));
    let write_timeout = Duration::from_secs(limits.write_timeout_s.max(1));
    let session = Session::new(worker, out, transport, conn);
    let mut buf = ReadBuffer::new(shared.read_budget.clone());
    let mut stream = stream;
    loop {
        let (mut reader, writer) = stream.split();
        let writer_task = actix::spawn(write_loop(writer, queue, write_timeout, stats.clone()));
        match read_loop(&mut reader, &session, &mut buf, limits, &stats).await {
            End::Close(reason) => {
                stats.closed(listener, reason);
                log_closed(&log_worker, conn, reason);
                session.cancel_all();
                drop(session);
                drop(buf);
                let _ = writer_task.await;
                break;
            }
            End::StartTls => {
                // RFC 4511 §4.14.1: nothing the client sent after StartTLS and before the
                // handshake may be taken as a request (it would be plaintext injected into
                // the protected session), so what is buffered is dropped.
                buf.clear();
                let Ok(Some((writer, returned))) = writer_task.await else {
                    stats.closed(listener, CloseReason::Io);
                    log_closed(&log_worker, conn, CloseReason::Io);
                    break;
                };
                queue = returned;
                let Some(tcp) = reader.reunite(writer) else { break };
                let Some((tls, transport)) =
                    Box::pin(handshake(tcp, &shared, (*session.transport()).clone())).await
                else {
                    stats.closed(listener, CloseReason::Tls);
                    log_closed(&log_worker, conn, CloseReason::Tls);
                    break;
                };
                log_tls(&log_worker, conn, &tls);
                session.set_transport(transport);
                stream = Stream::Tls(Box::new(tls));
            }
        }
    }
    tracing::debug!("connection closed");
}

/// Reads and dispatches whole PDUs until the connection ends or StartTLS succeeds.
async fn read_loop(
    reader: &mut Reader,
    session: &Session,
    buf: &mut ReadBuffer,
    limits: &Limits,
    stats: &WorkerStats,
) -> End {
    loop {
        loop {
            let frame_limits = FrameLimits {
                pdu_bytes_max: session.limits().pdu_bytes_max,
                nesting_depth_max: limits.ber_nesting_depth_max,
            };
            match check_frame(buf.data(), &frame_limits) {
                Ok(Some(len)) => {
                    let pdu = buf.take(len);
                    bump(&stats.pdus_in, 1);
                    // Boxed: an idle connection's future then holds no room for a dispatch
                    // (a Bind's included), only a busy one allocates it.
                    match Box::pin(session.dispatch(&pdu)).await {
                        Flow::Close if session.is_disconnected() => return End::Close(CloseReason::Protocol),
                        Flow::Close => return End::Close(CloseReason::Client),
                        Flow::StartTls => return End::StartTls,
                        Flow::Continue if session.is_broken() => return End::Close(CloseReason::Io),
                        Flow::Continue => {}
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "framing error");
                    session.disconnect(&e.to_string()).await;
                    return End::Close(CloseReason::Protocol);
                }
            }
        }
        // check_frame accepted the header, so the announced size is within the limit.
        let announced = announced_pdu_bytes(buf.data()).ok().flatten();
        if !buf.prepare(announced).await {
            return End::Close(CloseReason::Io);
        }
        match read_some(reader, buf, session).await {
            Ok(0) => return End::Close(CloseReason::Client),
            Ok(n) => bump(&stats.bytes_in, n as u64),
            Err(e) if e.kind() == ErrorKind::TimedOut => return End::Close(CloseReason::Idle),
            Err(_) => return End::Close(CloseReason::Io),
        }
    }
}

/// Reads what the socket has into `buf`. Ok(0) means the peer closed the connection;
/// TimedOut that it was idle (nothing in flight, no bytes) for the session's
/// `idle_timeout_s`.
async fn read_some(reader: &mut Reader, buf: &mut ReadBuffer, session: &Session) -> std::io::Result<usize> {
    loop {
        let idle_timeout_s = session.limits().idle_timeout_s;
        // Plain sockets wait for readiness before a buffer is taken (an idle connection
        // holds none); TLS waits inside the read (stream.rs).
        let read = async {
            reader.ready().await?;
            reader.read_into(buf.spare()).await
        };
        let timed = async {
            if idle_timeout_s == 0 {
                Some(read.await)
            } else {
                tokio::time::timeout(Duration::from_secs(idle_timeout_s), read).await.ok()
            }
        };
        let outcome = tokio::select! {
            // An operation panicked: its answer is lost, so the connection ends (Session).
            () = session.broken() => return Err(ErrorKind::BrokenPipe.into()),
            outcome = timed => outcome,
        };
        match outcome {
            None => {
                if session.requests_pending() == 0 {
                    tracing::debug!(idle_timeout_s, "closing an idle connection");
                    return Err(ErrorKind::TimedOut.into());
                }
            }
            Some(Ok(n)) => return Ok(n),
            Some(Err(e)) if e.kind() == ErrorKind::WouldBlock => {}
            Some(Err(e)) => return Err(e),
        }
    }
}

/// One connection's read buffer and the share of the read budget it holds.
struct ReadBuffer {
    bytes: BytesMut,
    budget: Arc<Semaphore>,
    /// Permits taken from `budget` (and forgotten there) for this buffer.
    held: usize,
}

impl ReadBuffer {
    fn new(budget: Arc<Semaphore>) -> Self {
        Self { bytes: BytesMut::new(), budget, held: 0 }
    }

    fn data(&self) -> &[u8] {
        &self.bytes
    }

    /// Drops everything buffered (StartTLS: see `serve`).
    fn clear(&mut self) {
        self.bytes.clear();
    }

    /// Splits off the first `len` bytes (one whole PDU).
    fn take(&mut self, len: usize) -> BytesMut {
        self.bytes.split_to(len)
    }

    /// Sizes the buffer for the PDU being read: `announced` bytes (when its header is in),
    /// else the base. Budget beyond the base is taken for the whole PDU at once, after
    /// giving back what was held. Returns false if the budget can never be had.
    async fn prepare(&mut self, announced: Option<usize>) -> bool {
        if self.bytes.is_empty() {
            // Nothing buffered: hold nothing until bytes arrive (see `spare`).
            self.bytes = BytesMut::new();
            self.release();
            return true;
        }
        let want = announced.unwrap_or(0).max(READ_BUFFER_BASE_BYTES);
        let need = want - READ_BUFFER_BASE_BYTES;
        // Giving budget back means giving the memory back too: a fresh, smaller buffer.
        let shrink = need < self.held;
        if need != self.held {
            self.release();
            if need > 0 {
                let Ok(count) = u32::try_from(need) else { return false };
                let Ok(permits) = self.budget.acquire_many(count).await else { return false };
                permits.forget();
                self.held = need;
            }
        }
        // Exactly `want` bytes, so that the buffer can't grow past what the budget counts
        // (BytesMut would otherwise double its allocation as it pleases).
        if self.bytes.capacity() < want || shrink {
            let mut resized = BytesMut::with_capacity(want);
            resized.extend_from_slice(&self.bytes);
            self.bytes = resized;
        }
        true
    }

    /// Room to read into: the base buffer if none is allocated.
    fn spare(&mut self) -> &mut BytesMut {
        if self.bytes.capacity() == self.bytes.len() {
            let mut fresh = BytesMut::with_capacity(READ_BUFFER_BASE_BYTES.max(self.bytes.len() + 1));
            fresh.extend_from_slice(&self.bytes);
            self.bytes = fresh;
        }
        &mut self.bytes
    }

    fn release(&mut self) {
        if self.held > 0 {
            self.budget.add_permits(self.held);
            self.held = 0;
        }
    }
}

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        self.release();
    }
}

/// Counts PDUs and bytes sent, and the SearchResultEntry PDUs among them (told apart by
/// the protocolOp tag after the messageID: no decoding).
fn count_out(stats: &WorkerStats, pdus: &[bytes::Bytes]) {
    let mut bytes = 0u64;
    let mut entries = 0u64;
    for pdu in pdus {
        bytes += pdu.len() as u64;
        if op_tag(pdu) == Some(SEARCH_RESULT_ENTRY_TAG) {
            entries += 1;
        }
    }
    bump(&stats.pdus_out, pdus.len() as u64);
    bump(&stats.bytes_out, bytes);
    if entries > 0 {
        bump(&stats.entries_returned, entries);
    }
}

/// RFC 4511 §4.5.2: `[APPLICATION 4]`, constructed.
const SEARCH_RESULT_ENTRY_TAG: u8 = 0x64;

/// The protocolOp tag of an encoded LDAPMessage: skip the SEQUENCE header and the
/// messageID (definite lengths: we encoded it).
fn op_tag(pdu: &[u8]) -> Option<u8> {
    let after_header = skip_header(pdu)?;
    let id = pdu.get(after_header..)?;
    let (&_int_tag, rest) = id.split_first()?;
    let (&id_len, rest) = rest.split_first()?;
    rest.get(usize::from(id_len)).copied()
}

/// The offset past a TLV's tag and length octets.
fn skip_header(tlv: &[u8]) -> Option<usize> {
    let first = *tlv.get(1)?;
    Some(if first < 0x80 { 2 } else { 2 + usize::from(first & 0x7f) })
}

/// Drains the response queue to the socket, flushing when the queue runs dry so that a
/// burst of responses goes out in few writes. The write buffer lives for one burst only.
/// On [`Outbound::Handover`] it flushes and returns the socket's write half and the queue
/// (StartTLS); otherwise it ends with None when the connection is done.
async fn write_loop(
    mut writer: Writer,
    mut queue: mpsc::Receiver<Outbound>,
    timeout: Duration,
    stats: Arc<WorkerStats>,
) -> Option<(Writer, mpsc::Receiver<Outbound>)> {
    while let Some(first) = queue.recv().await {
        let mut buffered = BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer);
        let mut next = Some(first);
        while let Some(item) = next.take() {
            let result = match item {
                Outbound::Pdu(pdu) => {
                    count_out(&stats, std::slice::from_ref(&pdu));
                    tokio::time::timeout(timeout, buffered.write_all(&pdu)).await
                }
                Outbound::Pdus(pdus) => {
                    count_out(&stats, &pdus);
                    tokio::time::timeout(timeout, async {
                        for pdu in &pdus {
                            buffered.write_all(pdu).await?;
                        }
                        Ok(())
                    })
                    .await
                }
                Outbound::Close => {
                    let _ = tokio::time::timeout(timeout, buffered.flush()).await;
                    let _ = buffered.shutdown().await;
                    return None;
                }
                Outbound::Handover => {
                    return match tokio::time::timeout(timeout, buffered.flush()).await {
                        Ok(Ok(())) => Some((buffered.into_inner(), queue)),
                        _ => None,
                    };
                }
            };
            if !matches!(result, Ok(Ok(()))) {
                return None;
            }
            next = queue.try_recv().ok();
        }
        if !matches!(tokio::time::timeout(timeout, buffered.flush()).await, Ok(Ok(()))) {
            return None;
        }
        writer = buffered.into_inner();
    }
    let _ = writer.shutdown().await;
    None
}
