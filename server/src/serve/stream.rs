//! The byte streams a connection runs over: plain TCP, TLS over TCP (LDAPS or after
//! StartTLS), and a Unix-domain socket (ldapi). Each is split into a read half, owned by
//! the connection's reader, and a write half, owned by its writer task.
//!
//! Plain TCP and Unix sockets wait for readiness before they take a read buffer, so an idle
//! connection holds none (connection.rs). TLS reads through rustls, which may already hold
//! decrypted bytes, so a TLS connection reads straight into its buffer.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWrite, Interest, ReadHalf, WriteHalf};
use tokio::net::{tcp, unix, TcpStream, UnixStream};
use tokio_rustls::server::TlsStream;

pub type Tls = TlsStream<TcpStream>;

/// A whole stream, before it is split or after its halves are put back together.
pub enum Stream {
    Tcp(TcpStream),
    Tls(Box<Tls>),
    Unix(UnixStream),
}

impl Stream {
    pub fn split(self) -> (Reader, Writer) {
        match self {
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                (Reader::Tcp(r), Writer::Tcp(w))
            }
            Stream::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (Reader::Tls(r), Writer::Tls(w))
            }
            Stream::Unix(s) => {
                let (r, w) = s.into_split();
                (Reader::Unix(r), Writer::Unix(w))
            }
        }
    }
}

pub enum Reader {
    Tcp(tcp::OwnedReadHalf),
    Tls(ReadHalf<Tls>),
    Unix(unix::OwnedReadHalf),
}

impl Reader {
    /// Waits until a read may make progress. Cancel safe.
    pub async fn ready(&self) -> io::Result<()> {
        match self {
            Reader::Tcp(r) => r.readable().await,
            Reader::Unix(r) => r.readable().await,
            // rustls may hold plaintext already: let the read itself wait.
            Reader::Tls(_) => Ok(()),
        }
    }

    /// Reads what is there into `buf`. For plain sockets after [`Self::ready`] it does not
    /// wait (WouldBlock if readiness was spurious); for TLS it waits for bytes. Cancel safe.
    ///
    /// A plain socket's read that leaves room in `buf` took all the socket held, so its
    /// readiness is cleared with it: the next [`Self::ready`] waits for the reactor rather
    /// than trying a read that could only say WouldBlock, one system call less per request
    /// (a client waiting for each answer sends one request per read). Bytes that arrive
    /// after the read raise a new readiness event, which the clearing does not touch (tokio
    /// clears only the event the read was tried under).
    pub async fn read_into(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Reader::Tcp(r) => read_draining(r.as_ref(), buf, |buf| r.try_read_buf(buf)),
            Reader::Unix(r) => read_draining(r.as_ref(), buf, |buf| r.try_read_buf(buf)),
            Reader::Tls(r) => r.read_buf(buf).await,
        }
    }

    /// Puts the halves of a plain TCP stream back together (for StartTLS).
    pub fn reunite(self, writer: Writer) -> Option<TcpStream> {
        match (self, writer) {
            (Reader::Tcp(r), Writer::Tcp(w)) => r.reunite(w).ok(),
            _ => None,
        }
    }
}

/// The plain sockets' readiness clearing (`Reader::read_into`).
trait ClearsReadiness {
    fn try_readable_io(&self, f: impl FnOnce() -> io::Result<usize>) -> io::Result<usize>;
}

impl ClearsReadiness for TcpStream {
    fn try_readable_io(&self, f: impl FnOnce() -> io::Result<usize>) -> io::Result<usize> {
        self.try_io(Interest::READABLE, f)
    }
}

impl ClearsReadiness for UnixStream {
    fn try_readable_io(&self, f: impl FnOnce() -> io::Result<usize>) -> io::Result<usize> {
        self.try_io(Interest::READABLE, f)
    }
}

/// `read` into `buf` under `socket`'s read readiness; a short read (bytes, and room left)
/// clears that readiness and still answers with its bytes.
fn read_draining(
    socket: &impl ClearsReadiness,
    buf: &mut BytesMut,
    read: impl FnOnce(&mut BytesMut) -> io::Result<usize>,
) -> io::Result<usize> {
    let room = buf.capacity() - buf.len();
    let mut got = 0;
    let outcome = socket.try_readable_io(|| {
        got = read(buf)?;
        if got > 0 && got < room {
            // Not an error: the way to tell tokio the socket is drained.
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(got)
        }
    });
    match outcome {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
        other => other,
    }
}

pub enum Writer {
    Tcp(tcp::OwnedWriteHalf),
    Tls(WriteHalf<Tls>),
    Unix(unix::OwnedWriteHalf),
}

impl AsyncWrite for Writer {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            Writer::Tls(w) => Pin::new(w).poll_write(cx, buf),
            Writer::Unix(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_flush(cx),
            Writer::Tls(w) => Pin::new(w).poll_flush(cx),
            Writer::Unix(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            Writer::Tls(w) => Pin::new(w).poll_shutdown(cx),
            Writer::Unix(w) => Pin::new(w).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Writer::Tcp(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            Writer::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            Writer::Unix(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Writer::Tcp(w) => w.is_write_vectored(),
            Writer::Tls(w) => w.is_write_vectored(),
            Writer::Unix(w) => w.is_write_vectored(),
        }
    }
}
