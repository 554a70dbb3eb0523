//! The HTTP endpoint on `metrics_listen`: `GET /metrics` (Prometheus text format),
//! `/healthz` (the process answers) and `/readyz` (ready to serve, [`Metrics::readiness`]).
//!
//! It runs on a thread of its own with a current-thread runtime, so a scrape never takes
//! time from an LDAP worker. It speaks just enough HTTP/1.1 for Prometheus, kubelet
//! probes and `ferrodir healthcheck`: one GET per connection, answered and closed. Every
//! part is bounded: the request head (8 KiB), the time to send it (5 s), connections at
//! once (16; more are closed). A full HTTP stack (hyper) would bring keep-alive, chunked
//! bodies and HTTP/2, none of which these clients need (docs/DECISIONS.md).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use super::Metrics;

const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECTIONS_MAX: usize = 16;

/// Binds `addr` now (so that the address is known and taken before the server says it
/// listens) and serves it on a thread of its own until the process ends.
pub fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> anyhow::Result<SocketAddr> {
    let listener =
        std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr} (metrics)"))?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new().name("metrics".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::error!(error = %e, "no metrics endpoint: cannot start its runtime");
                return;
            }
        };
        runtime.block_on(serve(listener, metrics));
    })?;
    Ok(bound)
}

async fn serve(listener: std::net::TcpListener, metrics: Arc<Metrics>) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let Ok(permit) = slots.clone().try_acquire_owned() else { continue };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &metrics)).await;
            drop(permit);
        });
    }
}

async fn answer(mut stream: tokio::net::TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || head.len() + n > REQUEST_HEAD_BYTES_MAX {
            return Ok(());
        }
        head.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let (status, content_type, body) = route(method, path, metrics);
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    if method != b"HEAD" {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}

fn route(method: &[u8], path: &[u8], metrics: &Metrics) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != b"GET" && method != b"HEAD" {
        return ("405 Method Not Allowed", TEXT, "only GET\n".into());
    }
    // A query string (Prometheus sends none; probes may) is ignored.
    let path = path.split(|&b| b == b'?').next().unwrap_or_default();
    match path {
        b"/metrics" => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", metrics.render()),
        b"/healthz" => ("200 OK", TEXT, "ok\n".into()),
        b"/readyz" => match metrics.readiness() {
            Ok(()) => ("200 OK", TEXT, "ready\n".into()),
            Err(why) => ("503 Service Unavailable", TEXT, format!("not ready: {why}\n")),
        },
        _ => ("404 Not Found", TEXT, "try /metrics, /healthz or /readyz\n".into()),
    }
}

/// `ferrodir healthcheck`: GET `path` from the endpoint at `addr`; Ok with the body when
/// it answers 200.
pub fn check(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let timeout = Duration::from_secs(3);
    let mut stream =
        TcpStream::connect_timeout(&addr, timeout).with_context(|| format!("cannot reach {addr}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut response = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    let status = text.lines().next().unwrap_or_default();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.trim().to_string()).unwrap_or_default();
    if status.split(' ').nth(1) == Some("200") {
        Ok(body)
    } else {
        anyhow::bail!("{addr}{path} answered {status:?}: {body}")
    }
}
