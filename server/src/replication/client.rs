//! The consumer's side of one LDAP connection to its provider: TCP (plain, LDAPS or with
//! StartTLS, verified against `tls_ca_file`), a simple bind, and whole LDAPMessages read
//! with the same framing checks the server applies to its clients (bounded PDU size and
//! nesting), decoded with our own codec.

use std::sync::Arc;
use std::time::Duration;

use ferrodir_proto::frame::{check_frame, FrameLimits};
use ferrodir_proto::message::{
    decode_message, encode_message, AuthenticationChoice, BindRequest, ExtendedRequest, LdapMessage,
    OctetString, ProtocolOp,
};
use ferrodir_proto::ResultCode;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::settings::{ProviderUrl, Replication};

/// The largest PDU taken from a provider: an entry with large values fits, a runaway
/// length does not make us allocate.
pub const PDU_BYTES_MAX: usize = 64 * 1024 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a bind or StartTLS answer may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
const START_TLS_OID: &str = "1.3.6.1.4.1.1466.20037";
const READ_CHUNK: usize = 64 * 1024;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Why a session with the provider ended.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the provider: {0}")]
    Connect(String),
    #[error("TLS with the provider: {0}")]
    Tls(String),
    #[error("the provider refused {what}: {code} {message}")]
    Refused { what: &'static str, code: ResultCode, message: String },
    #[error("the provider sent a bad PDU: {0}")]
    Protocol(String),
    #[error("connection to the provider: {0}")]
    Io(#[from] std::io::Error),
    #[error("the provider closed the connection")]
    Closed,
}

pub struct Client {
    /// Our end of the connection (`IP=127.0.0.1:40112`, cn=Monitor's olmSRConnection).
    pub local: String,
    io: Box<dyn Io>,
    buf: bytes::BytesMut,
    next_id: u32,
    limits: FrameLimits,
}

impl Client {
    /// Connects, runs TLS as configured, and binds.
    pub async fn connect(settings: &Replication, password: &str) -> Result<Self, ClientError> {
        let url = ProviderUrl::parse(&settings.provider).map_err(|e| ClientError::Connect(e.to_string()))?;
        let addr = format!("{}:{}", url.host, url.port);
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr))
            .await
            .map_err(|_| ClientError::Connect(format!("{addr}: timed out")))?
            .map_err(|e| ClientError::Connect(format!("{addr}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        keepalive(&tcp);
        let local = tcp.local_addr().map(|a| format!("IP={a}")).unwrap_or_default();
        let limits = FrameLimits { pdu_bytes_max: PDU_BYTES_MAX, ..FrameLimits::default() };
        let mut client = if url.tls {
            let tls = tls_connect(settings, &url.host, tcp).await?;
            Self { local: local.clone(), io: Box::new(tls), buf: bytes::BytesMut::new(), next_id: 1, limits }
        } else {
            Self { local, io: Box::new(tcp), buf: bytes::BytesMut::new(), next_id: 1, limits }
        };
        if settings.starttls {
            client = client.start_tls(settings, &url.host).await?;
        }
        client.bind(&settings.bind_dn, password).await?;
        Ok(client)
    }

    async fn start_tls(mut self, settings: &Replication, host: &str) -> Result<Self, ClientError> {
        let request = ExtendedRequest {
            request_name: OctetString::from(START_TLS_OID.as_bytes()),
            request_value: None,
        };
        let id = self.send(ProtocolOp::ExtendedRequest(request), None).await?;
        let answer =
            tokio::time::timeout(ANSWER_TIMEOUT, self.read()).await.map_err(|_| ClientError::Closed)??;
        match answer.protocol_op {
            ProtocolOp::ExtendedResponse(r) if answer.message_id == id => {
                if r.result.result_code != ResultCode::SUCCESS {
                    return Err(refused("StartTLS", &r.result));
                }
            }
            _ => return Err(ClientError::Protocol("expected the StartTLS response".into())),
        }
        if !self.buf.is_empty() {
            return Err(ClientError::Protocol("data after the StartTLS response".into()));
        }
        // The plain stream is replaced by the TLS one over the same socket.
        let tls = tls_connect(settings, host, self.io).await?;
        Ok(Self {
            local: self.local,
            io: Box::new(tls),
            buf: self.buf,
            next_id: self.next_id,
            limits: self.limits,
        })
    }

    async fn bind(&mut self, dn: &str, password: &str) -> Result<(), ClientError> {
        let request = BindRequest {
            version: 3,
            name: OctetString::from(dn.as_bytes().to_vec()),
            authentication: AuthenticationChoice::Simple(OctetString::from(password.as_bytes().to_vec())),
        };
        let id = self.send(ProtocolOp::BindRequest(request), None).await?;
        let answer =
            tokio::time::timeout(ANSWER_TIMEOUT, self.read()).await.map_err(|_| ClientError::Closed)??;
        match answer.protocol_op {
            ProtocolOp::BindResponse(r) if answer.message_id == id => {
                if r.result.result_code != ResultCode::SUCCESS {
                    return Err(refused("the bind", &r.result));
                }
                Ok(())
            }
            _ => Err(ClientError::Protocol("expected the bind response".into())),
        }
    }

    /// Sends one request; returns its message id.
    pub async fn send(
        &mut self,
        op: ProtocolOp,
        controls: Option<Vec<ferrodir_proto::message::Control>>,
    ) -> Result<u32, ClientError> {
        let message_id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let pdu = encode_message(&LdapMessage { message_id, protocol_op: op, controls })
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.io.write_all(&pdu).await?;
        self.io.flush().await?;
        Ok(message_id)
    }

    /// The next whole message from the provider.
    pub async fn read(&mut self) -> Result<LdapMessage, ClientError> {
        loop {
            if let Some(message) = self.buffered()? {
                return Ok(message);
            }
            self.buf.reserve(READ_CHUNK);
            if self.io.read_buf(&mut self.buf).await? == 0 {
                return Err(ClientError::Closed);
            }
        }
    }

    /// A whole message already read from the socket, if any (no I/O).
    pub fn buffered(&mut self) -> Result<Option<LdapMessage>, ClientError> {
        let Some(len) =
            check_frame(&self.buf, &self.limits).map_err(|e| ClientError::Protocol(e.to_string()))?
        else {
            return Ok(None);
        };
        // O(1): the buffer's start moves past the message.
        let pdu = self.buf.split_to(len);
        decode_message(&pdu).map(Some).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Whether a whole message waits in the buffer (the next `read` needs no I/O).
    pub fn has_buffered(&self) -> bool {
        matches!(check_frame(&self.buf, &self.limits), Ok(Some(_)))
    }

    /// Unbinds and closes, ignoring errors (the session is over either way).
    pub async fn close(mut self) {
        let _ = self.send(ProtocolOp::UnbindRequest, None).await;
        let _ = self.io.shutdown().await;
    }
}

/// TCP keepalive (idle 60 s, then 3 probes 10 s apart): a persisting consumer only reads,
/// so without it a provider that vanished without closing the connection (a host gone, a
/// network cut) would never be noticed. Best effort: a failure only loses the probes.
fn keepalive(tcp: &TcpStream) {
    use std::os::fd::AsRawFd as _;
    let fd = tcp.as_raw_fd();
    for (level, name, value) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 60),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 10),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3),
    ] {
        let value: libc::c_int = value;
        // SAFETY: setsockopt reads one c_int through a valid pointer to a local, on a
        // socket this stream owns and keeps open for the call.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                std::ptr::addr_of!(value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            tracing::debug!(name, "replication: cannot set a TCP keepalive option");
        }
    }
}

fn refused(what: &'static str, result: &ferrodir_proto::message::LdapResult) -> ClientError {
    ClientError::Refused {
        what,
        code: result.result_code,
        message: String::from_utf8_lossy(&result.diagnostic_message).into_owned(),
    }
}

async fn tls_connect<S: AsyncRead + AsyncWrite + Unpin>(
    settings: &Replication,
    host: &str,
    stream: S,
) -> Result<tokio_rustls::client::TlsStream<S>, ClientError> {
    let ca = settings.tls_ca_file.as_ref().ok_or_else(|| ClientError::Tls("no tls_ca_file".into()))?;
    let mut roots = rustls::RootCertStore::empty();
    let certs =
        CertificateDer::pem_file_iter(ca).map_err(|e| ClientError::Tls(format!("{}: {e}", ca.display())))?;
    for cert in certs {
        let cert = cert.map_err(|e| ClientError::Tls(format!("{}: {e}", ca.display())))?;
        roots.add(cert).map_err(|e| ClientError::Tls(format!("{}: {e}", ca.display())))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name =
        ServerName::try_from(host.to_string()).map_err(|e| ClientError::Tls(format!("{host}: {e}")))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    tokio::time::timeout(ANSWER_TIMEOUT, connector.connect(name, stream))
        .await
        .map_err(|_| ClientError::Tls("handshake timed out".into()))?
        .map_err(|e| ClientError::Tls(e.to_string()))
}
