//! The admin socket: a Unix-domain socket in the data directory (`admin.sock`, mode 0600,
//! removed on clean shutdown) through which `ferrodir export` and `ferrodir backup` reach a
//! serving server. redb locks its files, so while a server runs these commands cannot open
//! the data directory themselves; they ask the server, which takes a consistent cut
//! ([`Cut::online`]) and reads from it. When no server answers on the socket, the commands
//! open the directory offline, as before.
//!
//! Only the directory's owner can connect (the file's mode), so the socket carries no
//! authentication. One request per connection, one connection at a time (the admin thread
//! serves them in turn, so at most one cut is open).
//!
//! Protocol: the client sends one line, `export operational`, `export user` or
//! `backup <absolute path>`. The server answers with frames of `kind (1 byte) ‖ length (u32
//! BE) ‖ payload`: `D` carries LDIF bytes, then exactly one of `K` (done; the payload is a
//! summary) or `E` (failed; the payload says why). A stream that ends without `K` is
//! incomplete, and the client says so: a truncated export is never taken for a whole one.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use anyhow::Context as _;
use ferrodir_router::coordinator::Coordinator;
use ferrodir_shard::rules::RuleTable;
use ferrodir_shard::storage::{EngineKind, KvEngine};

use crate::backup;
use crate::cut::{CommitGate, Cut};
use crate::export::{self, ExportOptions};
use crate::manifest::Manifest;

pub const SOCKET_FILE: &str = "admin.sock";
/// A request is one short line; anything longer is not a request.
const REQUEST_BYTES_MAX: usize = 4096;
/// LDIF is sent in data frames of at most this size.
const DATA_FRAME_BYTES_MAX: usize = 64 << 10;
/// The client refuses a frame larger than this (a confused peer, not a ferrodir server).
const FRAME_BYTES_ACCEPTED_MAX: usize = 1 << 20;
/// A client must send its request promptly...
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// ...and keep reading: on sled, a cut holds writes back until the export is sent.
const REPLY_WRITE_TIMEOUT: Duration = Duration::from_secs(60);

const FRAME_DATA: u8 = b'D';
const FRAME_DONE: u8 = b'K';
const FRAME_FAILED: u8 = b'E';

/// What a client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Export(ExportOptions),
    /// Write a backup into this directory (absolute; it must be absent or empty).
    Backup(PathBuf),
}

impl Request {
    fn encode(&self) -> anyhow::Result<Vec<u8>> {
        let mut line = match self {
            Request::Export(options) if options.operational => b"export operational".to_vec(),
            Request::Export(_) => b"export user".to_vec(),
            Request::Backup(to) => {
                let bytes = to.as_os_str().as_bytes();
                if !to.is_absolute() || bytes.contains(&b'\n') || bytes.len() + 8 > REQUEST_BYTES_MAX {
                    anyhow::bail!("unusable backup path {}", to.display());
                }
                [b"backup ".as_slice(), bytes].concat()
            }
        };
        line.push(b'\n');
        Ok(line)
    }

    fn parse(line: &[u8]) -> anyhow::Result<Self> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        match line {
            b"export operational" => Ok(Request::Export(ExportOptions { operational: true })),
            b"export user" => Ok(Request::Export(ExportOptions { operational: false })),
            _ => match line.strip_prefix(b"backup ") {
                Some(path) if Path::new(OsStr::from_bytes(path)).is_absolute() => {
                    Ok(Request::Backup(PathBuf::from(OsStr::from_bytes(path))))
                }
                _ => anyhow::bail!("unknown request {:?}", String::from_utf8_lossy(line)),
            },
        }
    }
}

/// What the admin thread needs from the running server.
pub struct AdminContext {
    pub coordinator: Addr<Coordinator>,
    /// The gated engines, in shard order, and their gates.
    pub engines: Vec<Arc<dyn KvEngine>>,
    pub gates: Vec<Arc<CommitGate>>,
    pub kind: EngineKind,
    pub manifest: Manifest,
    pub rules: Arc<RuleTable>,
}

/// The bound socket; dropping it removes the socket file (clean shutdown).
pub struct AdminSocket {
    path: PathBuf,
}

impl Drop for AdminSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds `<data_dir>/admin.sock` and serves it on a thread of its own. The caller holds the
/// data directory's engines, so a socket file already there is a crashed server's: replaced.
pub fn start(data_dir: &Path, context: AdminContext) -> anyhow::Result<AdminSocket> {
    let path = data_dir.join(SOCKET_FILE);
    // Bound under a temporary name and renamed once its mode is 0600, so that nobody else
    // can connect in between.
    let tmp = data_dir.join(format!("{SOCKET_FILE}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).with_context(|| format!("cannot bind {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot rename to {}", path.display()))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("admin".into()).spawn(move || {
        for stream in listener.incoming() {
            match stream {
                Ok(stream) => serve_one(&context, &runtime, stream),
                Err(e) => {
                    tracing::warn!(error = %e, "admin socket: accept failed");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    })?;
    Ok(AdminSocket { path })
}

fn serve_one(context: &AdminContext, runtime: &tokio::runtime::Runtime, stream: UnixStream) {
    let outcome = (|| -> anyhow::Result<()> {
        stream.set_read_timeout(Some(REQUEST_READ_TIMEOUT))?;
        stream.set_write_timeout(Some(REPLY_WRITE_TIMEOUT))?;
        let mut line = Vec::new();
        BufReader::new((&stream).take(REQUEST_BYTES_MAX as u64)).read_until(b'\n', &mut line)?;
        if line.is_empty() {
            // A probe (`server_answers`): it only wanted to know that someone is here.
            return Ok(());
        }
        let mut frames = FrameSink(&stream);
        let reply = Request::parse(&line).and_then(|request| {
            tracing::info!(?request, "admin request");
            run(context, runtime, request, &mut frames)
        });
        match reply {
            Ok(summary) => frames.frame(FRAME_DONE, summary.as_bytes())?,
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "admin request failed");
                frames.frame(FRAME_FAILED, format!("{e:#}").as_bytes())?;
            }
        }
        Ok(())
    })();
    if let Err(e) = outcome {
        tracing::warn!(error = format!("{e:#}"), "admin connection ended early");
    }
}

/// Runs one request against a fresh cut; returns the summary line.
fn run(
    context: &AdminContext,
    runtime: &tokio::runtime::Runtime,
    request: Request,
    frames: &mut FrameSink<'_>,
) -> anyhow::Result<String> {
    let cut = runtime.block_on(Cut::online(
        &context.coordinator,
        &context.engines,
        &context.gates,
        context.kind,
    ))?;
    match request {
        Request::Export(options) => {
            let mut out = BufWriter::with_capacity(DATA_FRAME_BYTES_MAX, DataFrames(frames));
            let count = export::export(&cut, &context.rules, options, &mut out)?;
            out.flush()?;
            Ok(format!("exported {count} entries (from the serving server, one consistent cut)"))
        }
        Request::Backup(to) => {
            let marker = backup::backup(&cut, &context.manifest, context.kind, &to)?;
            Ok(format!(
                "backed up {} entries ({} keys) of {} shards to {}",
                marker.entries,
                marker.keys_per_shard.iter().sum::<u64>(),
                marker.shards,
                to.display()
            ))
        }
    }
}

/// Writes frames to the client.
struct FrameSink<'a>(&'a UnixStream);

impl FrameSink<'_> {
    fn frame(&mut self, kind: u8, payload: &[u8]) -> std::io::Result<()> {
        let length = u32::try_from(payload.len()).map_err(std::io::Error::other)?;
        let mut header = [0u8; 5];
        header[0] = kind;
        header[1..].copy_from_slice(&length.to_be_bytes());
        self.0.write_all(&header)?;
        self.0.write_all(payload)
    }
}

/// LDIF bytes, each write sent as data frames (a `BufWriter` in front sizes them).
struct DataFrames<'a, 'b>(&'a mut FrameSink<'b>);

impl Write for DataFrames<'_, '_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let taken = bytes.len().min(DATA_FRAME_BYTES_MAX);
        self.0.frame(FRAME_DATA, &bytes[..taken])?;
        Ok(taken)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The serving server's socket for `data_dir`, or None when no server answers there (no
/// socket, or a crashed server's socket file): the caller then works offline.
pub fn connect(data_dir: &Path) -> anyhow::Result<Option<UnixStream>> {
    let path = data_dir.join(SOCKET_FILE);
    match UnixStream::connect(&path) {
        Ok(stream) => Ok(Some(stream)),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::InvalidInput
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e).with_context(|| format!("cannot connect to {}", path.display())),
    }
}

/// Whether a server is serving `data_dir` (its admin socket answers).
pub fn server_answers(data_dir: &Path) -> bool {
    matches!(connect(data_dir), Ok(Some(_)))
}

/// Sends `request` and copies the LDIF it returns (if any) to `out`; returns the server's
/// summary, or its error.
pub fn call(mut stream: UnixStream, request: &Request, out: &mut impl Write) -> anyhow::Result<String> {
    stream.write_all(&request.encode()?)?;
    let mut reader = BufReader::new(stream);
    let mut payload = Vec::new();
    loop {
        let mut header = [0u8; 5];
        reader.read_exact(&mut header).map_err(|e| {
            anyhow::anyhow!("the server closed the connection before the end ({e}): the output is incomplete")
        })?;
        let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if length > FRAME_BYTES_ACCEPTED_MAX {
            anyhow::bail!("admin socket: a frame of {length} bytes; is this a ferrodir server?");
        }
        payload.resize(length, 0);
        reader.read_exact(&mut payload).map_err(|e| {
            anyhow::anyhow!("the server closed the connection before the end ({e}): the output is incomplete")
        })?;
        match header[0] {
            FRAME_DATA => out.write_all(&payload)?,
            FRAME_DONE => return Ok(String::from_utf8_lossy(&payload).into_owned()),
            FRAME_FAILED => anyhow::bail!("the server: {}", String::from_utf8_lossy(&payload)),
            other => anyhow::bail!("admin socket: unknown frame kind {other:#04x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for request in [
            Request::Export(ExportOptions { operational: true }),
            Request::Export(ExportOptions { operational: false }),
            Request::Backup(PathBuf::from("/var/backups/ferrodir 1")),
        ] {
            assert_eq!(Request::parse(&request.encode().unwrap()).unwrap(), request);
        }
        assert!(Request::Backup(PathBuf::from("relative")).encode().is_err());
        assert!(Request::parse(b"backup relative\n").is_err());
        assert!(Request::parse(b"drop everything\n").is_err());
    }

    #[test]
    fn a_stream_without_its_end_frame_is_incomplete() {
        let (client, server) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            let mut line = Vec::new();
            BufReader::new(&server).read_until(b'\n', &mut line).unwrap();
            FrameSink(&server).frame(FRAME_DATA, b"dn: dc=example,dc=com\n").unwrap();
        });
        let mut out = Vec::new();
        let err = call(client, &Request::Export(ExportOptions { operational: true }), &mut out).unwrap_err();
        writer.join().unwrap();
        assert!(err.to_string().contains("incomplete"), "{err}");
    }
}
