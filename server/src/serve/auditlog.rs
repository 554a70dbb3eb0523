//! The audit log's writer (`[audit_log] path`): the shared log thread (`logfile`) over
//! every worker's bounded buffer, which router::auditlog fills with the records of
//! committed changes. The file is created 0600 (it holds password hashes), flushed after
//! every collection that found records (at most every 20 ms), and reopened on SIGUSR1.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ferrodir_router::accesslog::LogBuffer;

use crate::config::AuditLog as Settings;
use crate::serve::logfile::{self, LogFile};

/// Opens the file and starts the writer thread, which counts the records a failed write
/// lost in `unwritten`; returns one buffer per worker, the most
/// bytes each may hold between two collections, and the writer. None when the log is off.
pub fn start(
    settings: &Settings,
    workers: usize,
    unwritten: Arc<AtomicU64>,
) -> anyhow::Result<Option<(Vec<Arc<LogBuffer>>, usize, logfile::Writer)>> {
    let Some(path) = settings.path.clone() else { return Ok(None) };
    let per_worker = (settings.queue_bytes_max / workers.max(1)).max(1);
    let buffers: Vec<Arc<LogBuffer>> = (0..workers).map(|_| Arc::new(LogBuffer::default())).collect();
    let log = LogFile {
        what: "the audit log",
        thread: "audit-log",
        path,
        mode: 0o600,
        flush_interval: std::time::Duration::ZERO,
        rotation: None,
        items: "records",
        // A record ends with a blank line; LDIF never holds one inside a record.
        terminator: b"\n\n",
        unwritten,
    };
    let writer = logfile::start(log, buffers.clone())?;
    Ok(Some((buffers, per_worker, writer)))
}
