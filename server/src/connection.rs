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
use ferrodir_router::{Flow, Outbound, Session, Transport, Worker};
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};

use crate::config::Limits;

/// The read buffer a connection gets without drawing on the shared budget. Most requests
/// (a search, a bind, a small modify) fit in it whole.
pub const READ_BUFFER_BASE_BYTES: usize = 1024;

/// The write buffer, allocated while a burst of responses is written.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// What every connection shares: the server's limits and the read-buffer budget.
pub struct Shared {
    pub limits: Limits,
    /// `read_buffers_bytes_max` permits, one per byte of read buffer beyond the base.
    pub read_budget: Arc<Semaphore>,
}

impl Shared {
    pub fn new(limits: Limits) -> Self {
        let read_budget = Arc::new(Semaphore::new(limits.read_buffers_bytes_max.min(Semaphore::MAX_PERMITS)));
        Self { limits, read_budget }
    }
}

pub async fn serve(stream: TcpStream, worker: Rc<Worker>, shared: Arc<Shared>) {
    let peer = stream.peer_addr().ok();
    let _ = stream.set_nodelay(true);
    let (reader, writer) = stream.into_split();
    let limits = &shared.limits;
    let (out, queue) = mpsc::channel(limits.outbound_pdus_queued_max.max(1));
    let write_timeout = Duration::from_secs(limits.write_timeout_s.max(1));
    let writer_task = actix::spawn(write_loop(writer, queue, write_timeout));
    let local = peer.is_some_and(|addr| addr.ip().to_canonical().is_loopback());
    let session = Session::new(worker, out, Transport { local, ..Transport::default() });
    let mut buf = ReadBuffer::new(shared.read_budget.clone());
    'connection: loop {
        loop {
            let frame_limits = FrameLimits {
                pdu_bytes_max: session.limits().pdu_bytes_max,
                nesting_depth_max: limits.ber_nesting_depth_max,
            };
            match check_frame(buf.data(), &frame_limits) {
                Ok(Some(len)) => {
                    let pdu = buf.take(len);
                    // Boxed: an idle connection's future then holds no room for a dispatch
                    // (a Bind's included), only a busy one allocates it.
                    if Box::pin(session.dispatch(&pdu)).await == Flow::Close || session.is_broken() {
                        break 'connection;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(?peer, error = %e, "framing error");
                    session.disconnect(&e.to_string()).await;
                    break 'connection;
                }
            }
        }
        // check_frame accepted the header, so the announced size is within the limit.
        let announced = announced_pdu_bytes(buf.data()).ok().flatten();
        if !buf.prepare(announced).await {
            break;
        }
        match read_some(&reader, &mut buf, &session).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    tracing::debug!(?peer, "connection closed");
    session.cancel_all();
    drop(session);
    drop(buf);
    let _ = writer_task.await;
}

/// Reads what the socket has into `buf`. Ok(0) means the peer closed the connection, or it
/// was idle (nothing in flight, no bytes) for the session's `idle_timeout_s`.
async fn read_some(
    reader: &OwnedReadHalf,
    buf: &mut ReadBuffer,
    session: &Session,
) -> std::io::Result<usize> {
    loop {
        let idle_timeout_s = session.limits().idle_timeout_s;
        let readable = async {
            if idle_timeout_s == 0 {
                reader.readable().await.map(|()| true)
            } else {
                let waited =
                    tokio::time::timeout(Duration::from_secs(idle_timeout_s), reader.readable()).await;
                waited.map_or(Ok(false), |ready| ready.map(|()| true))
            }
        };
        let ready = tokio::select! {
            // An operation panicked: its answer is lost, so the connection ends (Session).
            () = session.broken() => return Ok(0),
            ready = readable => ready?,
        };
        if !ready {
            if session.requests_pending() == 0 {
                tracing::debug!(idle_timeout_s, "closing an idle connection");
                return Ok(0);
            }
            continue;
        }
        match reader.try_read_buf(buf.spare()) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
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

/// Drains the response queue to the socket, flushing when the queue runs dry so that a
/// burst of responses goes out in few writes. The write buffer lives for one burst only.
async fn write_loop(mut writer: OwnedWriteHalf, mut queue: mpsc::Receiver<Outbound>, timeout: Duration) {
    while let Some(first) = queue.recv().await {
        let mut buffered = BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer);
        let mut next = Some(first);
        while let Some(item) = next.take() {
            let result = match item {
                Outbound::Pdu(pdu) => tokio::time::timeout(timeout, buffered.write_all(&pdu)).await,
                Outbound::Pdus(pdus) => {
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
                    return;
                }
            };
            if !matches!(result, Ok(Ok(()))) {
                return;
            }
            next = queue.try_recv().ok();
        }
        if !matches!(tokio::time::timeout(timeout, buffered.flush()).await, Ok(Ok(()))) {
            return;
        }
        writer = buffered.into_inner();
    }
    let _ = writer.shutdown().await;
}
