//! The admin socket's server side: the admin thread of a serving server, one request at a
//! time, each against a fresh consistent cut (see the module doc of [`super`]).

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use actix::Addr;
use anyhow::Context as _;
use ferrodir_router::coordinator::Coordinator;
use ferrodir_shard::storage::{EngineKind, KvEngine, StorageOptions};
use ferrodir_shard::RuleTable;

use super::{
    Request, DATA_FRAME_BYTES_MAX, FRAME_DATA, FRAME_DONE, FRAME_FAILED, REPLY_WRITE_TIMEOUT,
    REQUEST_BYTES_MAX, REQUEST_READ_TIMEOUT, SOCKET_FILE,
};
use crate::data::backup;
use crate::data::cut::{CommitGate, Cut};
use crate::data::export::{self, ExportOptions};
use crate::data::manifest::Manifest;

/// What the admin thread needs from the running server.
pub struct AdminContext {
    pub coordinator: Addr<Coordinator>,
    /// The gated engines, in shard order, and their gates.
    pub engines: Vec<Arc<dyn KvEngine>>,
    pub gates: Vec<Arc<CommitGate>>,
    pub kind: EngineKind,
    pub manifest: Manifest,
    pub rules: Arc<RuleTable>,
    /// What a backup's redb files open with: the serving directory's settings.
    pub storage: StorageOptions,
    /// `ferrodir reload`: re-reads the config file (serve/reload.rs).
    pub reloader: Arc<crate::serve::reload::Reloader>,
}

/// The bound socket. Dropping it (clean shutdown) ends the admin thread, which lets go of
/// the engines it holds, and removes the socket file.
pub struct AdminSocket {
    path: PathBuf,
    stopping: Arc<AtomicBool>,
    /// Disconnected once the admin thread has ended and dropped what it held.
    ended: mpsc::Receiver<()>,
}

/// How long a stop waits for the admin thread: a request in progress (an online backup)
/// may hold it, and a stop never waits on a request for long.
const STOP_WAIT: Duration = Duration::from_secs(5);

impl Drop for AdminSocket {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        // Wakes the thread's accept, after which it sees `stopping` and ends.
        if UnixStream::connect(&self.path).is_ok()
            && self.ended.recv_timeout(STOP_WAIT) == Err(mpsc::RecvTimeoutError::Timeout)
        {
            tracing::warn!("the admin thread is still busy with a request; not waiting for it");
        }
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
    let stopping = Arc::new(AtomicBool::new(false));
    let stop = stopping.clone();
    let (ended_tx, ended) = mpsc::channel();
    std::thread::Builder::new().name("admin".into()).spawn(move || {
        for stream in listener.incoming() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            match stream {
                Ok(stream) => serve_one(&context, &runtime, stream),
                Err(e) => {
                    tracing::warn!(error = %e, "admin socket: accept failed");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        // What it held first, then the word that it has.
        drop((context, runtime));
        drop(ended_tx);
    })?;
    Ok(AdminSocket { path, stopping, ended })
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
    if request == Request::Reload {
        // No cut: a reload reads no data, except for a new [[unique]] rule's check.
        return context.reloader.reload("ferrodir reload");
    }
    let cut = runtime.block_on(Cut::online(
        &context.coordinator,
        &context.engines,
        &context.gates,
        context.kind,
    ))?;
    match request {
        Request::Export { operational } => {
            let mut out = BufWriter::with_capacity(DATA_FRAME_BYTES_MAX, DataFrames(frames));
            let count = export::export(&cut, &context.rules, ExportOptions { operational }, &mut out)?;
            out.flush()?;
            Ok(format!("exported {count} entries (from the serving server, one consistent cut)"))
        }
        Request::Reload => anyhow::bail!("a reload takes no cut"),
        Request::Backup(to) => {
            let marker = backup::backup(&cut, &context.manifest, context.kind, &context.storage, &to)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_without_its_end_frame_is_incomplete() {
        let (client, server) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            let mut line = Vec::new();
            BufReader::new(&server).read_until(b'\n', &mut line).unwrap();
            FrameSink(&server).frame(FRAME_DATA, b"dn: dc=example,dc=com\n").unwrap();
        });
        let mut out = Vec::new();
        let err =
            super::super::client::call(client, &Request::Export { operational: true }, &mut out).unwrap_err();
        writer.join().unwrap();
        assert!(err.to_string().contains("incomplete"), "{err}");
    }
}
