//! The access log's writer: a thread of its own that drains every worker's bounded buffer
//! (router::accesslog formats the lines there) into standard output or a file.
//!
//! The workers never wait for it: a full buffer drops the line and counts it. The file is
//! appended to and reopened on SIGUSR1, so logrotate can move it away and signal
//! (`postrotate kill -USR1 <pid>`); the writer collects the queues every 20 ms
//! (workers never wake it: that cost a system call per line) and flushes every 200 ms.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use ferrodir_router::accesslog::{LogBuffer, LogFormat};

use crate::config::AccessLog as Settings;

/// The most capacity the writer keeps in its spare buffer between polls.
const SPARE_BYTES_MAX: usize = 1 << 20;

/// How often the writer collects the workers' queues.
const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);

/// How long a line may wait in the writer's buffer before it reaches the file.
const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// The writer's buffer: lines reach the file when it fills or every [`FLUSH_INTERVAL`].
const BUFFER_BYTES: usize = 64 * 1024;

/// Where the lines go.
enum Output {
    Stdout(std::io::BufWriter<std::io::Stdout>),
    File(std::io::BufWriter<std::fs::File>, PathBuf),
}

impl Output {
    fn open(path: &str) -> anyhow::Result<Self> {
        if path == "-" {
            return Ok(Output::Stdout(std::io::BufWriter::with_capacity(BUFFER_BYTES, std::io::stdout())));
        }
        let path = PathBuf::from(path);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening the access log {}", path.display()))?;
        Ok(Output::File(std::io::BufWriter::with_capacity(BUFFER_BYTES, file), path))
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Output::Stdout(w) => w,
            Output::File(w, _) => w,
        }
    }

    /// After logrotate moved the file away: the same path, anew.
    fn reopen(&mut self) {
        if let Output::File(_, path) = self {
            let path = path.display().to_string();
            let _ = self.writer().flush();
            match Output::open(&path) {
                Ok(fresh) => *self = fresh,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "cannot reopen the access log; writing on")
                }
            }
        }
    }
}

/// The format named in the config.
pub fn format(settings: &Settings) -> anyhow::Result<LogFormat> {
    match settings.format.as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => anyhow::bail!("[access_log] format {other:?}: use \"text\" (389-ds's format) or \"json\""),
    }
}

/// Opens the output and starts the writer thread; returns one buffer per worker and the
/// most lines each may hold between two collections. None when the log is off.
pub fn start(settings: &Settings, workers: usize) -> anyhow::Result<Option<(Vec<Arc<LogBuffer>>, usize)>> {
    if !settings.enabled {
        return Ok(None);
    }
    format(settings)?;
    let output = Output::open(&settings.path)?;
    let per_worker = (settings.queue_lines_max / workers.max(1)).max(1);
    let buffers: Vec<Arc<LogBuffer>> = (0..workers).map(|_| Arc::new(LogBuffer::default())).collect();
    let theirs = buffers.clone();
    std::thread::Builder::new().name("access-log".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::error!(error = %e, "no access log: cannot start its runtime");
                return;
            }
        };
        runtime.block_on(write_all(output, theirs));
    })?;
    Ok(Some((buffers, per_worker)))
}

/// Every [`POLL_INTERVAL`], takes what the workers' buffers hold (swapping in an empty
/// one, so neither side allocates per line) and writes it; flushes every
/// [`FLUSH_INTERVAL`] (and whenever the output's buffer fills). Never woken by a worker.
/// Ends once every worker has dropped its sink and the buffers are empty.
async fn write_all(mut output: Output, buffers: Vec<Arc<LogBuffer>>) {
    let mut usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok();
    let mut polls = tokio::time::interval(POLL_INTERVAL);
    let mut last_flush = std::time::Instant::now();
    let mut spare = String::new();
    loop {
        tokio::select! {
            _ = polls.tick() => {}
            Some(()) = async { match usr1.as_mut() { Some(s) => s.recv().await, None => None } } => {
                output.reopen();
            }
        }
        let mut open = false;
        for buffer in &buffers {
            // Checked before taking: a worker that let go of its sink wrote its last line.
            open |= Arc::strong_count(buffer) > 1;
            spare.clear();
            if buffer.take(&mut spare) > 0 {
                let _ = output.writer().write_all(spare.as_bytes());
            }
            // Keep a buffer's worth of capacity, not the largest burst ever seen.
            if spare.capacity() > SPARE_BYTES_MAX {
                spare = String::new();
            }
        }
        if last_flush.elapsed() >= FLUSH_INTERVAL || !open {
            let _ = output.writer().flush();
            last_flush = std::time::Instant::now();
        }
        if !open {
            return;
        }
    }
}
