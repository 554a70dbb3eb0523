//! TLS for the load generators: LDAPS (TLS from the first byte) and StartTLS (RFC 4511
//! §4.14, RFC 4513 §3) on a plain connection, with rustls and the ring provider (what the
//! server uses), verifying the server's certificate against a CA file.
//!
//! Every handshake is a full one: session resumption is off in the client, so "a bind on a
//! new TLS connection" pays for the key exchange and the server's signature every time, on
//! every server alike. [`Stream`] hides whether a connection is plain or TLS from the
//! clients, which only need to write a request, read into a buffer and close.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use bytes::BytesMut;
use rustls::client::Resumption;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::error::Error;

/// How a connection reaches LDAP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// LDAP over TCP, no TLS.
    Plain,
    /// `ldaps://`: the TLS handshake right after connecting.
    Ldaps,
    /// The StartTLS extended operation on a plain connection, then the handshake.
    StartTls,
}

/// `ldap://host[:port][/]` or `ldaps://host[:port][/]` to `host:port` (ports 389 and 636
/// when left out) and the transport the scheme implies.
pub fn parse_url(url: &str) -> Result<(String, Transport), Error> {
    let (rest, transport, default_port) = if let Some(rest) = url.strip_prefix("ldap://") {
        (rest, Transport::Plain, 389)
    } else if let Some(rest) = url.strip_prefix("ldaps://") {
        (rest, Transport::Ldaps, 636)
    } else {
        return Err(Error::Config(format!("{url:?}: only ldap:// and ldaps:// URLs are supported")));
    };
    let host_port = rest.strip_suffix('/').unwrap_or(rest);
    if host_port.is_empty() || host_port.contains('/') {
        return Err(Error::Config(format!("{url:?}: expected ldap://host:port or ldaps://host:port")));
    }
    let has_port = match host_port.rsplit_once(':') {
        Some((host, port)) => !host.ends_with(':') && port.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    };
    let bracketed_v6 = host_port.starts_with('[') && host_port.ends_with(']');
    let address =
        if has_port && !bracketed_v6 { host_port.to_string() } else { format!("{host_port}:{default_port}") };
    Ok((address, transport))
}

/// The host part of `host:port` (brackets of an IPv6 literal removed): the name the
/// server's certificate must carry (a DNS name, or an IP address in its SAN).
pub fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _port)| host);
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host)
}

/// A client configuration: the CAs it trusts and the name it expects in the certificate.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
    server_name: ServerName<'static>,
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsClient").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

impl TlsClient {
    /// Trusts the certificates in the PEM file `ca_file` and expects `server_name` (a DNS
    /// name or an IP address) in the server's certificate. TLS 1.3 and 1.2, rustls' default
    /// cipher suites and key exchange groups, no resumption.
    pub fn new(ca_file: &Path, server_name: &str) -> Result<TlsClient, Error> {
        let certs = CertificateDer::pem_file_iter(ca_file)
            .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
            .map_err(|e| Error::Config(format!("reading CA certificates from {}: {e}", ca_file.display())))?;
        if certs.is_empty() {
            return Err(Error::Config(format!("no certificate in {}", ca_file.display())));
        }
        let mut roots = RootCertStore::empty();
        for cert in certs {
            roots.add(cert).map_err(|e| Error::Config(format!("a CA in {}: {e}", ca_file.display())))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS versions: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.resumption = Resumption::disabled();
        let server_name = ServerName::try_from(server_name.to_string())
            .map_err(|e| Error::Config(format!("server name {server_name:?}: {e}")))?;
        Ok(TlsClient { connector: TlsConnector::from(Arc::new(config)), server_name })
    }

    /// The TLS handshake over `tcp`, which must be at the start of the TLS stream (LDAPS
    /// right after connecting, StartTLS right after the success response).
    pub async fn handshake(&self, tcp: TcpStream) -> Result<Stream, Error> {
        let stream = self.connector.connect(self.server_name.clone(), tcp).await?;
        Ok(Stream::Tls(Box::new(stream)))
    }
}

/// A connection's byte stream, plain or TLS.
#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// Writes all of `bytes` and hands them to the socket (a TLS record is sent, not held).
    pub async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Plain(tcp) => tcp.write_all(bytes).await,
            Stream::Tls(tls) => {
                tls.write_all(bytes).await?;
                tls.flush().await
            }
        }
    }

    /// Reads what is there into `buffer`; 0 at the end of the stream.
    pub async fn read_buf(&mut self, buffer: &mut BytesMut) -> std::io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.read_buf(buffer).await,
            Stream::Tls(tls) => tls.read_buf(buffer).await,
        }
    }

    /// Ends the stream: TLS sends close_notify first (RFC 8446 §6.1); then the TCP write
    /// side is shut. Errors are ignored: the peer may have closed already (after Unbind).
    pub async fn close(mut self) {
        let _ = match &mut self {
            Stream::Plain(tcp) => tcp.shutdown().await,
            Stream::Tls(tls) => tls.shutdown().await,
        };
    }

    /// For TLS: "TLSv1_3 TLS13_AES_256_GCM_SHA384 X25519", what the handshake agreed on.
    pub fn negotiated(&self) -> Option<String> {
        let Stream::Tls(tls) = self else { return None };
        let (_, connection) = tls.get_ref();
        let name = |d: Option<String>| d.unwrap_or_else(|| "?".into());
        Some(format!(
            "{} {} {}",
            name(connection.protocol_version().map(|v| format!("{v:?}"))),
            name(connection.negotiated_cipher_suite().map(|s| format!("{:?}", s.suite()))),
            name(connection.negotiated_key_exchange_group().map(|g| format!("{:?}", g.name()))),
        ))
    }

    pub fn into_plain(self) -> Result<TcpStream, Error> {
        match self {
            Stream::Plain(tcp) => Ok(tcp),
            Stream::Tls(_) => Err(Error::Unexpected("StartTLS on a TLS connection".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_hosts() {
        assert_eq!(parse_url("ldap://127.0.0.1:3389").unwrap(), ("127.0.0.1:3389".into(), Transport::Plain));
        assert_eq!(
            parse_url("ldaps://127.0.0.1:3636/").unwrap(),
            ("127.0.0.1:3636".into(), Transport::Ldaps)
        );
        assert_eq!(parse_url("ldaps://localhost").unwrap(), ("localhost:636".into(), Transport::Ldaps));
        assert_eq!(parse_url("ldaps://[::1]").unwrap(), ("[::1]:636".into(), Transport::Ldaps));
        assert!(parse_url("ldapi://%2ftmp%2fs").is_err());
        assert!(parse_url("ldaps://h:1/dc=x").is_err());
        assert_eq!(host_of("127.0.0.1:636"), "127.0.0.1");
        assert_eq!(host_of("[::1]:636"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }
}
