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
//!
//! A write that fails (the disk full, an I/O error) never stops the writer nor reaches the
//! workers: what it left unwritten is dropped, its items counted in [`LogFile::unwritten`]
//! (the `reason="write_error"` series of the log's dropped counter), and the writer says
//! so in its own log once, then at most every [`FAILURE_REPORT_INTERVAL`] with the count
//! since, and once more when a write works again. Every collection tries again, so the log
//! resumes by itself once there is room.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsFd as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// While writes fail, how often the writer says so (with the count dropped since), at most.
pub const FAILURE_REPORT_INTERVAL: Duration = Duration::from_secs(60);

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
    /// What the log holds, for messages: "lines", "records".
    pub items: &'static str,
    /// The bytes that end each item: a line's newline, or the blank line after an audit
    /// record. Items never hold it inside (values are escaped or base64), so counting it
    /// in what a write left out counts the items lost.
    pub terminator: &'static [u8],
    /// Items a failed write lost (the disk full, an I/O error): the metrics read it.
    pub unwritten: Arc<AtomicU64>,
}

/// Where the text goes: the file, or a duplicate of standard output's descriptor, written
/// with plain write(2) so that a short or failed write is known to the byte (std's own
/// stdout buffers by line and would hide where a failure cut).
struct Target {
    file: File,
    /// Rotation's count, for a file (None for standard output).
    progress: Option<super::rotation::Progress>,
}

impl Target {
    fn open(log: &LogFile) -> anyhow::Result<Self> {
        if log.path == "-" {
            let fd = std::io::stdout().as_fd().try_clone_to_owned().context("duplicating standard output")?;
            return Ok(Target { file: File::from(fd), progress: None });
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
        Ok(Target { file, progress: Some(progress) })
    }

    /// Writes as much of `bytes` as it can: how much was written, and the error that
    /// stopped it short.
    fn write(&mut self, bytes: &[u8]) -> (usize, Option<std::io::Error>) {
        // Standard output's lock, held while writing to its duplicate: whatever else the
        // process prints (println!) waits, and can't land inside a chunk on a pipe, where
        // a write over PIPE_BUF is not atomic.
        let _stdout = self.progress.is_none().then(|| std::io::stdout().lock());
        let mut done = 0;
        let mut error = None;
        while let Some(rest) = bytes.get(done..).filter(|rest| !rest.is_empty()) {
            match self.file.write(rest) {
                Ok(0) => error = Some(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => error = Some(e),
            }
            if error.is_some() {
                break;
            }
        }
        if let Some(progress) = &mut self.progress {
            progress.written += done as u64;
        }
        (done, error)
    }
}

/// Since when writes fail, and what was lost: for the messages, at most one a
/// [`FAILURE_REPORT_INTERVAL`].
struct Failing {
    since: Instant,
    reported: Instant,
    lost_since_report: u64,
    lost: u64,
}

/// The writer's side of the output: the target, the text not yet written to it, and
/// whether writes are failing.
struct Output {
    target: Target,
    pending: Vec<u8>,
    failing: Option<Failing>,
    /// A failed write stopped inside an item: the file ends with part of it, and the next
    /// write first ends that fragment, so that what follows starts an item of its own.
    torn: bool,
}

impl Output {
    fn open(log: &LogFile) -> anyhow::Result<Self> {
        Ok(Self {
            target: Target::open(log)?,
            pending: Vec::with_capacity(BUFFER_BYTES),
            failing: None,
            torn: false,
        })
    }

    /// Buffers `text` (whole items), writing when the buffer fills.
    fn write_text(&mut self, log: &LogFile, text: &[u8]) {
        if self.pending.len() + text.len() > BUFFER_BYTES {
            self.flush(log);
        }
        if text.len() >= BUFFER_BYTES {
            self.emit(log, text);
        } else {
            self.pending.extend_from_slice(text);
        }
    }

    /// Writes what the buffer holds.
    fn flush(&mut self, log: &LogFile) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        self.emit(log, &pending);
        self.pending = pending;
        self.pending.clear();
    }

    /// Writes `bytes` (whole items). What a failure leaves unwritten is gone: its items are
    /// counted in `log.unwritten`, and the condition is logged ([`Output::failed`]); the
    /// next write tries again, so writing resumes by itself once the disk has room.
    fn emit(&mut self, log: &LogFile, bytes: &[u8]) {
        if self.torn {
            // Not counted: the fragment's item was counted when its write failed.
            match self.target.write(log.terminator) {
                (_, None) => self.torn = false,
                (_, Some(e)) => return self.failed(log, e, count_items(bytes, log.terminator)),
            }
        }
        match self.target.write(bytes) {
            (_, None) => self.written(log),
            (done, Some(e)) => {
                let written = bytes.get(..done).unwrap_or_default();
                self.torn = !written.is_empty() && !written.ends_with(log.terminator);
                self.failed(log, e, lost_items(bytes, done, log.terminator));
            }
        }
    }

    fn failed(&mut self, log: &LogFile, error: std::io::Error, lost: u64) {
        log.unwritten.fetch_add(lost, Ordering::Relaxed);
        let now = Instant::now();
        let Some(failing) = &mut self.failing else {
            tracing::error!(
                error = %error,
                path = %log.path,
                dropped = lost,
                "cannot write {}: its {} are dropped and counted until writing works again",
                log.what,
                log.items,
            );
            self.failing = Some(Failing { since: now, reported: now, lost_since_report: 0, lost });
            return;
        };
        failing.lost += lost;
        failing.lost_since_report += lost;
        if now.duration_since(failing.reported) >= FAILURE_REPORT_INTERVAL {
            tracing::error!(
                error = %error,
                path = %log.path,
                dropped = failing.lost_since_report,
                failing_for_s = now.duration_since(failing.since).as_secs(),
                "still cannot write {}: {} dropped since the last message",
                log.what,
                log.items,
            );
            failing.reported = now;
            failing.lost_since_report = 0;
        }
    }

    fn written(&mut self, log: &LogFile) {
        if let Some(failing) = self.failing.take() {
            tracing::warn!(
                path = %log.path,
                dropped = failing.lost,
                failed_for_s = failing.since.elapsed().as_secs(),
                "{} is written again; {} were dropped while writes failed",
                log.what,
                log.items,
            );
        }
    }

    /// Rotates the file when its size or age says so (`log.rotation`), and opens it anew.
    fn rotate_if_due(&mut self, log: &LogFile) {
        let (Some(rotation), Some(progress)) = (&log.rotation, &self.target.progress) else { return };
        if !rotation.due(progress) {
            return;
        }
        self.flush(log);
        match rotation.rotate(std::path::Path::new(&log.path)) {
            Ok(_) => self.reopen(log),
            Err(e) => {
                tracing::error!(error = %e, "cannot rotate {}; writing on", log.what);
                // Not again at every collection: the next try when as much again is written.
                if let Some(progress) = &mut self.target.progress {
                    progress.written = 0;
                    progress.opened = Instant::now();
                }
            }
        }
    }

    /// After logrotate moved the file away: the same path, anew.
    fn reopen(&mut self, log: &LogFile) {
        if self.target.progress.is_some() {
            self.flush(log);
            match Target::open(log) {
                Ok(fresh) => {
                    self.target = fresh;
                    // A new file starts clean: no fragment to end.
                    self.torn = false;
                }
                Err(e) => tracing::error!(error = format!("{e:#}"), "cannot reopen {}; writing on", log.what),
            }
        }
    }
}

/// How many of the items in `bytes` a write that stopped after `done` bytes lost: those
/// whose terminator is not all written, the one it cut inside included. Counting from a
/// terminator's length less one byte back counts an item whose two-byte terminator the
/// write cut in the middle.
fn lost_items(bytes: &[u8], done: usize, terminator: &[u8]) -> u64 {
    let from = done.saturating_sub(terminator.len().saturating_sub(1));
    count_items(bytes.get(from..).unwrap_or_default(), terminator)
}

/// How many items end (their `terminator` complete) in `bytes`.
fn count_items(bytes: &[u8], terminator: &[u8]) -> u64 {
    match terminator {
        [] => 0,
        [byte] => bytes.iter().filter(|b| *b == byte).count() as u64,
        _ => bytes.windows(terminator.len()).filter(|w| *w == terminator).count() as u64,
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
            output.flush(&log);
            let moved = LogFile { path, ..log.clone() };
            match Target::open(&moved) {
                Ok(fresh) => {
                    output.target = fresh;
                    output.torn = false;
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
                output.write_text(&log, spare.as_bytes());
                unflushed = true;
            }
            // Keep a buffer's worth of capacity, not the largest burst ever seen.
            if spare.capacity() > SPARE_BYTES_MAX {
                spare = String::new();
            }
        }
        if unflushed && (last_flush.elapsed() >= log.flush_interval || !open) {
            output.flush(&log);
            last_flush = Instant::now();
            unflushed = false;
        }
        output.rotate_if_due(&log);
        if !open {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_write_counts_every_item_not_wholly_written() {
        let lines = b"one\ntwo\nthree\n";
        assert_eq!(lost_items(lines, 0, b"\n"), 3);
        assert_eq!(lost_items(lines, 4, b"\n"), 2, "cut after a whole line");
        assert_eq!(lost_items(lines, 5, b"\n"), 2, "cut inside the second line");
        assert_eq!(lost_items(lines, lines.len() - 1, b"\n"), 1, "cut before the last newline");
        let records = b"# a\nx: 1\n\n# b\nx: 2\n\n";
        assert_eq!(lost_items(records, 0, b"\n\n"), 2);
        assert_eq!(lost_items(records, 9, b"\n\n"), 2, "cut between the first record's two newlines");
        assert_eq!(lost_items(records, 10, b"\n\n"), 1, "cut after the first record");
        assert_eq!(lost_items(records, 14, b"\n\n"), 1, "cut inside the second");
    }

    /// /dev/full answers every write with ENOSPC: nothing is written, every line is
    /// counted, once per failed write, and the writer keeps going.
    #[test]
    fn a_full_device_drops_and_counts_every_line() {
        let unwritten = Arc::new(AtomicU64::new(0));
        let log = LogFile {
            what: "the access log",
            thread: "test",
            path: "/dev/full".into(),
            mode: 0o600,
            flush_interval: Duration::ZERO,
            rotation: None,
            items: "lines",
            terminator: b"\n",
            unwritten: unwritten.clone(),
        };
        let mut output = Output::open(&log).expect("open /dev/full");
        output.write_text(&log, b"a\nb\n");
        output.flush(&log);
        assert_eq!(unwritten.load(Ordering::Relaxed), 2);
        let big = "line\n".repeat(BUFFER_BYTES / 5 + 1);
        output.write_text(&log, big.as_bytes());
        output.write_text(&log, b"c\n");
        output.flush(&log);
        assert_eq!(unwritten.load(Ordering::Relaxed), 2 + (BUFFER_BYTES / 5 + 1) as u64 + 1);
        assert!(output.failing.is_some() && !output.torn);
    }
}
