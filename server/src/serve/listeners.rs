//! The listeners (plain LDAP, LDAPS, ldapi), binding them, accepting from all three, and
//! the lines that announce them.

use std::net::IpAddr;

use anyhow::Context as _;

use crate::config::Config;
use crate::serve::connection;

/// Where the plain LDAP listener comes from.
pub enum Listen {
    /// Bound by the caller (a test on 127.0.0.1:0), `config.listen` unused: connections wait
    /// in its backlog until the server accepts them. It keeps the socket options it was
    /// bound with (`socket_receive_buffer_bytes` is not applied to it).
    Bound(std::net::TcpListener),
    /// Bound to `config.listen` once the shards and workers run, as `ferrodir serve` does:
    /// until then connections are refused, and a start that fails earlier (a data
    /// directory in use) says so before it tries the port.
    Configured,
}

impl From<std::net::TcpListener> for Listen {
    fn from(listener: std::net::TcpListener) -> Self {
        Self::Bound(listener)
    }
}

/// A TCP listener whose accepted connections get a receive buffer of `receive_buffer`
/// bytes (`[limits] socket_receive_buffer_bytes`; 0: the kernel's autotuning). Set on the
/// listener, so the window scale offered in the handshake already fits it. Bounded, a
/// client that sends requests without reading answers makes the kernel hold at most twice
/// that much of them once the server stops reading (`requests_pending_max`); left to
/// autotuning, Linux grows it up to `net.ipv4.tcp_rmem`'s maximum (32 MiB on our hosts),
/// per connection.
fn listen_tcp(addr: std::net::SocketAddr, receive_buffer: usize) -> std::io::Result<tokio::net::TcpListener> {
    let socket =
        if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    if receive_buffer > 0 {
        socket.set_recv_buffer_size(u32::try_from(receive_buffer).unwrap_or(u32::MAX))?;
    }
    socket.bind(addr)?;
    socket.listen(1024)
}

/// The listeners: plain LDAP (always), LDAPS and ldapi when configured.
pub struct Listeners {
    plain: tokio::net::TcpListener,
    ldaps: Option<tokio::net::TcpListener>,
    ldapi: Option<(tokio::net::UnixListener, std::path::PathBuf)>,
}

impl Listeners {
    pub fn bind(config: &Config, plain: Listen, tls: bool) -> anyhow::Result<Self> {
        let receive_buffer = config.limits.socket_receive_buffer_bytes;
        let plain = match plain {
            Listen::Bound(listener) => {
                listener.set_nonblocking(true).context("making the bound listener non-blocking")?;
                tokio::net::TcpListener::from_std(listener).context("taking the bound listener")?
            }
            Listen::Configured => listen_tcp(config.listen, receive_buffer)
                .with_context(|| format!("cannot listen on {}", config.listen))?,
        };
        let ldaps = match config.listen_ldaps {
            Some(addr) if tls => Some(
                listen_tcp(addr, receive_buffer)
                    .with_context(|| format!("cannot listen on {addr} (LDAPS)"))?,
            ),
            Some(_) => anyhow::bail!("listen_ldaps needs a [tls] table with cert_file and key_file"),
            None => None,
        };
        let ldapi = match &config.listen_ldapi {
            Some(path) => Some((bind_ldapi(path)?, path.clone())),
            None => None,
        };
        Ok(Self { plain, ldaps, ldapi })
    }

    /// Each listener's URL and local address, for cn=Monitor's cn=Listeners.
    pub fn describe(&self) -> Vec<ferrodir_router::ListenerInfo> {
        use ferrodir_router::ListenerInfo;
        let mut out = Vec::new();
        for (listener, scheme) in [(Some(&self.plain), "ldap"), (self.ldaps.as_ref(), "ldaps")] {
            if let Some(addr) = listener.and_then(|l| l.local_addr().ok()) {
                out.push(ListenerInfo {
                    url: format!("{scheme}://{addr}/"),
                    local_address: format!("IP={addr}"),
                });
            }
        }
        if let Some((_, path)) = &self.ldapi {
            let path = path.display().to_string();
            out.push(ListenerInfo {
                url: format!("ldapi://{}/", path.replace('/', "%2F")),
                local_address: format!("PATH={path}"),
            });
        }
        out
    }

    /// The next accepted connection and, for TCP, its peer's address (for the per-IP
    /// limit). None when an accept failed (retried on the next call).
    pub async fn accept(&self) -> Option<(connection::Incoming, Option<IpAddr>)> {
        use connection::Incoming;
        let ldaps = async {
            match &self.ldaps {
                Some(listener) => listener.accept().await,
                None => std::future::pending().await,
            }
        };
        let ldapi = async {
            match &self.ldapi {
                Some((listener, _)) => listener.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            accepted = self.plain.accept() => {
                let (stream, peer) = accepted.ok()?;
                Some((Incoming::Plain(stream.into_std().ok()?), Some(peer.ip())))
            }
            accepted = ldaps => {
                let (stream, peer) = accepted.ok()?;
                Some((Incoming::Ldaps(stream.into_std().ok()?), Some(peer.ip())))
            }
            accepted = ldapi => {
                let (stream, _) = accepted.ok()?;
                let cred = stream.peer_cred().ok().map(|c| (c.uid(), c.gid()));
                Some((Incoming::Ldapi(stream.into_std().ok()?, cred), None))
            }
        }
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        if let Some((_, path)) = &self.ldapi {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds the ldapi socket, replacing a stale one left by a server that died (but never a
/// socket some running server still answers on). Mode 0666 as slapd's: who may do what is
/// decided by the identity SASL EXTERNAL gives each peer, not by who may connect.
fn bind_ldapi(path: &std::path::Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt as _;
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!("{} is in use by a running server", path.display());
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    let listener = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("cannot listen on {} (ldapi)", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    Ok(listener)
}

/// The listening lines: in the log, and plainly on stdout for a newcomer at the terminal
/// and for whoever waits for "ferrodir listening on ADDR" (tests, scripts).
pub fn announce(config: &Config, listeners: &Listeners, shards: usize) {
    let addr = listeners.plain.local_addr().unwrap_or(config.listen);
    tracing::info!(%addr, shards, data_dir = %config.data_dir.display(), engine = %config.engine, "ferrodir listening");
    // Printed plainly too, for a newcomer reading the terminal and for tests waiting on it.
    if let Some(ldaps) = listeners.ldaps.as_ref().and_then(|l| l.local_addr().ok()) {
        println!("ferrodir listening for LDAPS on {ldaps}");
    }
    if let Some((_, path)) = &listeners.ldapi {
        println!("ferrodir listening for ldapi on {}", path.display());
    }
    println!("ferrodir listening on {addr}");
    if let Some(line) = admin_identity(config) {
        println!("{line}");
    }
    for suffix in &config.suffixes {
        println!("try: ldapsearch -x -H ldap://{addr} -b {suffix}");
    }
}

/// The line that tells a newcomer who the administrator is and where its password comes from.
fn admin_identity(config: &Config) -> Option<String> {
    let dn = &config.root_dn;
    if dn.is_empty() {
        return None;
    }
    Some(if config.root_password.is_empty() {
        format!("admin identity: {dn} cannot bind: no root_password in the config (`ferrodir hash-password` makes one)")
    } else if config.root_password == crate::config::BUILT_IN_ROOT_PASSWORD {
        format!("admin identity: {dn} with the built-in password (see the README; loopback only)")
    } else {
        format!("admin identity: {dn} (password set by root_password in the config)")
    })
}
