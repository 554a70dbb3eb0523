//! The writer thread behind each log the workers fill (the access log, `accesslog`, and the
//! audit log, `auditlog`): a thread of its own that drains every worker's bounded
//! [`LogBuffer`] into standard output or a file.
//!
//! The workers never wait for it and never wake it (that cost a system call per line): it
//! collects the buffers every [`POLL_INTERVAL`], swapping each for an empty one, and a full
//! buffer drops what is added to it and counts it. A file is appended to and reopened on
//! SIGUSR1, so logrotate can move it away and signal (`postrotate kill -USR1 <pid>`); every
//! writer listens for the signal, so one SIGUSR1 reopens all of them. Or the writer rotates
//! the file itself by size and age (`rotation`). A reload that names
//! another file moves the writer there ([`Mover`]).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use ferrodir_router::accesslog::LogBuffer;

/// The most capacity the writer keeps in its spare buffer between polls.
const SPARE_BYTES_MAX: usize = 1 << 20;

/// How often the writer collects the workers' buffers.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The writer's buffer: what it holds reaches the file when it fills, or at the flush.
const BUFFER_BYTES: usize = 64 * 1024;

/// One log: what it is called in messages and where it goes.
#[derive(Clone, Debug)]
pub struct LogFile {
    /// "the access log", "the audit log".
    pub what: &'static str,
    /// The writer thread's name.
    pub thread: &'static str,
    /// "-" for standard output, else a file appended to.
    pub path: String,
    /// The permissions of a file it creates (before the umask); an existing file keeps its own.
    pub mode: u32,
    /// How long written text may wait in the writer's buffer; zero: flushed after every
    /// collection that found something.
    pub flush_interval: Duration,
    /// Built-in rotation of the file (`rotation`); None: logrotate's job, or standard output.
    pub rotation: Option<super::rotation::Rotation>,
}

/// Where the text goes.
enum Output {
    Stdout(std::io::BufWriter<std::io::Stdout>),
    File(std::io::BufWriter<std::fs::File>, super::rotation::Progress),
}

impl Output {
    fn open(log: &LogFile) -> anyhow::Result<Self> {
        if log.path == "-" {
            return Ok(Output::Stdout(std::io::BufWriter::with_capacity(BUFFER_BYTES, std::io::stdout())));
        }
        let path = PathBuf::from(&log.path);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(log.mode)
            .open(&path)
            .with_context(|| format!("opening {} {}", log.what, path.display()))?;
        let written = file.metadata().map_or(0, |m| m.len());
        let progress = super::rotation::Progress { written, opened: Instant::now() };
        Ok(Output::File(std::io::BufWriter::with_capacity(BUFFER_BYTES, file), progress))
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Output::Stdout(w) => w,
            Output::File(w, _) => w,
        }
    }

    /// Writes `text`, counting it toward the file's rotation.
    fn write_text(&mut self, text: &[u8]) {
        if let Output::File(_, progress) = self {
            progress.written += text.len() as u64;
        }
        let _ = self.writer().write_all(text);
    }

    /// Rotates the file when its size or age says so (`log.rotation`), and opens it anew.
    fn rotate_if_due(&mut self, log: &LogFile) {
        let (Some(rotation), Output::File(_, progress)) = (&log.rotation, &*self) else { return };
        if !rotation.due(progress) {
            return;
        }
        let _ = self.writer().flush();
        match rotation.rotate(std::path::Path::new(&log.path)) {
            Ok(_) => self.reopen(log),
            Err(e) => {
                tracing::error!(error = %e, "cannot rotate {}; writing on", log.what);
                // Not again at every collection: the next try when as much again is written.
                if let Output::File(_, progress) = self {
                    progress.written = 0;
                    progress.opened = Instant::now();
                }
            }
        }
    }

    /// After logrotate moved the file away: the same path, anew.
    fn reopen(&mut self, log: &LogFile) {
        if let Output::File(..) = self {
            let _ = self.writer().flush();
            match Output::open(log) {
                Ok(fresh) => *self = fresh,
                Err(e) => tracing::error!(error = format!("{e:#}"), "cannot reopen {}; writing on", log.what),
            }
        }
    }
}

/// A started writer, to wait for at shutdown.
pub struct Writer {
    /// Disconnected when the thread ends (its sender is dropped with it, panic or not).
    ended: std::sync::mpsc::Receiver<()>,
    mover: Mover,
}

/// Moves a writer to another file (a reload changed its path): it writes what it already
/// collected to the old file and opens the new one at its next collection.
#[derive(Clone, Default)]
pub struct Mover {
    next: Arc<Mutex<Option<String>>>,
}

impl Mover {
    pub fn move_to(&self, path: String) {
        *self.next.lock().unwrap_or_else(|p| p.into_inner()) = Some(path);
    }

    fn take(&self) -> Option<String> {
        self.next.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl Writer {
    /// Waits until the thread wrote what the buffers held and ended, at most until
    /// `deadline`: the workers are gone by then, so it ends within one collection, but a
    /// stuck disk must not hold the process.
    pub fn mover(&self) -> Mover {
        self.mover.clone()
    }

    pub fn wait(&self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        matches!(self.ended.recv_timeout(left), Err(std::sync::mpsc::RecvTimeoutError::Disconnected) | Ok(()))
    }
}

/// Opens the output (an error names the log and the path) and starts the writer thread
/// over `buffers`, one per worker. The thread ends once every worker let go of its
/// buffer and the buffers are empty.
pub fn start(log: LogFile, buffers: Vec<Arc<LogBuffer>>) -> anyhow::Result<Writer> {
    let output = Output::open(&log)?;
    let (ended_tx, ended) = std::sync::mpsc::channel::<()>();
    let mover = Mover::default();
    let moves = mover.clone();
    std::thread::Builder::new().name(log.thread.into()).spawn(move || {
        let _ended = ended_tx;
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::error!(error = %e, "no {}: cannot start its runtime", log.what);
                return;
            }
        };
        runtime.block_on(write_all(log, output, buffers, moves));
    })?;
    Ok(Writer { ended, mover })
}

/// Every [`POLL_INTERVAL`], takes what the workers' buffers hold (swapping in an empty
/// one, so neither side allocates per line) and writes it; flushes every
/// `flush_interval` (and whenever the output's buffer fills); reopens on SIGUSR1, and
/// opens another file when `moves` names one.
async fn write_all(mut log: LogFile, mut output: Output, buffers: Vec<Arc<LogBuffer>>, moves: Mover) {
    let mut usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok();
    let mut polls = tokio::time::interval(POLL_INTERVAL);
    let mut last_flush = Instant::now();
    let mut spare = String::new();
    let mut unflushed = false;
    loop {
        tokio::select! {
            _ = polls.tick() => {}
            Some(()) = async { match usr1.as_mut() { Some(s) => s.recv().await, None => None } } => {
                output.reopen(&log);
            }
        }
        // Before collecting: what is collected after a reload moved the log goes to the new file.
        if let Some(path) = moves.take() {
            let _ = output.writer().flush();
            let moved = LogFile { path, ..log.clone() };
            match Output::open(&moved) {
                Ok(fresh) => {
                    output = fresh;
                    log = moved;
                    unflushed = false;
                }
                Err(e) => tracing::error!(error = format!("{e:#}"), "cannot move {}; writing on", log.what),
            }
        }
        let mut open = false;
        for buffer in &buffers {
            // Checked before taking: a worker that let go of its sink wrote its last line.
            open |= Arc::strong_count(buffer) > 1;
            spare.clear();
            if buffer.take(&mut spare) > 0 {
                output.write_text(spare.as_bytes());
                unflushed = true;
            }
            // Keep a buffer's worth of capacity, not the largest burst ever seen.
            if spare.capacity() > SPARE_BYTES_MAX {
                spare = String::new();
            }
        }
        if unflushed && (last_flush.elapsed() >= log.flush_interval || !open) {
            let _ = output.writer().flush();
            last_flush = Instant::now();
            unflushed = false;
        }
        output.rotate_if_due(&log);
        if !open {
            return;
        }
    }
}
