//! The access log's writer: the shared log thread (`logfile`) over every worker's bounded
//! buffer (router::accesslog formats the lines there), to standard output or a file,
//! flushed every 200 ms and reopened on SIGUSR1.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ferrodir_router::accesslog::{LogBuffer, LogFormat};

use crate::config::AccessLog as Settings;
use crate::serve::logfile::{self, LogFile};

/// How long a line may wait in the writer's buffer before it reaches the file.
const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// The format named in the config.
pub fn format(settings: &Settings) -> anyhow::Result<LogFormat> {
    match settings.format.as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => anyhow::bail!("[access_log] format {other:?}: use \"text\" (389-ds's format) or \"json\""),
    }
}

/// Opens the output and starts the writer thread, which counts the lines a failed write
/// lost in `unwritten`; returns one buffer per worker, the most
/// lines each may hold between two collections, and the writer. None when the log is off.
pub fn start(
    settings: &Settings,
    workers: usize,
    unwritten: Arc<AtomicU64>,
) -> anyhow::Result<Option<(Vec<Arc<LogBuffer>>, usize, logfile::Writer)>> {
    if !settings.enabled {
        return Ok(None);
    }
    format(settings)?;
    let per_worker = (settings.queue_lines_max / workers.max(1)).max(1);
    let buffers: Vec<Arc<LogBuffer>> = (0..workers).map(|_| Arc::new(LogBuffer::default())).collect();
    let log = LogFile {
        what: "the access log",
        thread: "access-log",
        path: settings.path.clone(),
        mode: 0o666,
        flush_interval: FLUSH_INTERVAL,
        rotation: settings.rotation(),
        items: "lines",
        terminator: b"\n",
        unwritten,
    };
    let writer = logfile::start(log, buffers.clone())?;
    Ok(Some((buffers, per_worker, writer)))
}
