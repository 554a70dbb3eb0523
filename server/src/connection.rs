//! One client connection: read whole PDUs (framing checked before decoding), hand them to
//! the router's session, and write its responses. Reading and writing run as two tasks on
//! the connection's worker thread, joined by a bounded queue.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use ferrodir_proto::frame::{check_frame, FrameLimits};
use ferrodir_router::{Flow, Outbound, Session, Worker};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::config::Limits;

const READ_BUFFER_BYTES: usize = 16 * 1024;

pub async fn serve(stream: TcpStream, worker: Rc<Worker>, limits: Arc<Limits>) {
    let peer = stream.peer_addr().ok();
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let (out, queue) = mpsc::channel(limits.outbound_pdus_queued_max.max(1));
    let write_timeout = Duration::from_secs(limits.write_timeout_s.max(1));
    let writer_task = actix::spawn(write_loop(writer, queue, write_timeout));
    let session = Session::new(worker, out, limits.ops_in_flight_per_connection_max);
    let frame_limits =
        FrameLimits { pdu_bytes_max: limits.pdu_bytes_max, nesting_depth_max: limits.ber_nesting_depth_max };
    let idle = (limits.idle_timeout_s > 0).then(|| Duration::from_secs(limits.idle_timeout_s));
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    'connection: loop {
        loop {
            match check_frame(&buf, &frame_limits) {
                Ok(Some(len)) => {
                    let pdu = buf.split_to(len);
                    if session.dispatch(&pdu).await == Flow::Close {
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
        let read = match idle {
            Some(limit) => match tokio::time::timeout(limit, reader.read_buf(&mut buf)).await {
                Ok(r) => r,
                Err(_) => break,
            },
            None => reader.read_buf(&mut buf).await,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    session.cancel_all();
    drop(session);
    let _ = writer_task.await;
}

/// Drains the response queue to the socket, flushing when the queue runs dry so that a
/// burst of responses goes out in few writes.
async fn write_loop(writer: OwnedWriteHalf, mut queue: mpsc::Receiver<Outbound>, timeout: Duration) {
    let mut writer = BufWriter::with_capacity(64 * 1024, writer);
    while let Some(first) = queue.recv().await {
        let mut next = Some(first);
        while let Some(item) = next.take() {
            let result = match item {
                Outbound::Pdu(pdu) => tokio::time::timeout(timeout, writer.write_all(&pdu)).await,
                Outbound::Pdus(pdus) => {
                    tokio::time::timeout(timeout, async {
                        for pdu in &pdus {
                            writer.write_all(pdu).await?;
                        }
                        Ok(())
                    })
                    .await
                }
                Outbound::Close => {
                    let _ = tokio::time::timeout(timeout, writer.flush()).await;
                    let _ = writer.shutdown().await;
                    return;
                }
            };
            if !matches!(result, Ok(Ok(()))) {
                return;
            }
            next = queue.try_recv().ok();
        }
        if !matches!(tokio::time::timeout(timeout, writer.flush()).await, Ok(Ok(()))) {
            return;
        }
    }
    let _ = writer.shutdown().await;
}
