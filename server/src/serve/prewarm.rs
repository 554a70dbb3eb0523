//! Reading the shard files ahead into the OS page cache after a start (`[limits] prewarm`).
//!
//! Why: after a restart on a cold page cache a lookup reads its pages synchronously, one
//! `pread` at a time on each worker thread, so a server with few workers waits on the disk
//! with its CPUs half idle (docs/BENCHMARKS.md, "Large directories": at 10M entries
//! ferrodir's first 10 s after a cold start read 0.6 GB at a p50 of 1.2 ms, its CPU idle
//! half the time, while slapd's map faults, read ahead by the kernel megabytes at a time,
//! brought in 11 GB). Asking the kernel to
//! read the files ahead (`posix_fadvise(WILLNEED)`) lets the disk stream at its own pace
//! beside the lookups, so the directory is at warm speed within seconds of the start
//! instead of after every page was touched once.
//!
//! What it costs: disk bandwidth for a few seconds after a start, and page cache (memory the
//! kernel gives back under pressure). At most half of the memory available at the start is
//! asked for; a larger directory has the same share of each file read ahead. The thread
//! runs at the lowest CPU and I/O priority and stops at the server's stop.

use std::os::fd::AsRawFd as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// One `posix_fadvise` call's range. Linux reads at most the device's readahead window
/// (`max(read_ahead_kb, max_sectors_kb)`) per call and drops the rest of a larger range
/// silently: 64 MiB calls on a disk with an 8 MiB window read an eighth of each file. 128
/// KiB is the smallest default window; the block layer merges the adjacent reads.
const CHUNK_BYTES: u64 = 128 << 10;

/// Starts reading `files` ahead on a thread of its own; `stop` ends it early.
pub fn start(files: Vec<PathBuf>, stop: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new().name("prewarm".into()).spawn(move || {
        crate::serve::priority::lower_this_thread(19, "prewarm");
        lowest_io_priority();
        run(&files, &stop);
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the prewarm thread; pages are read as lookups need them");
    }
}

fn run(files: &[PathBuf], stop: &AtomicBool) {
    let sizes: Vec<u64> = files.iter().map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)).collect();
    let total: u64 = sizes.iter().sum();
    let budget = available_memory().map_or(0, |bytes| bytes / 2);
    if total == 0 || budget == 0 {
        return;
    }
    // Each file gets the same share: a B-tree's pages are spread over its whole file.
    let share = (budget as f64 / total as f64).min(1.0);
    let started = Instant::now();
    tracing::info!(
        bytes = (total as f64 * share) as u64,
        of = total,
        "reading the shard files ahead into the page cache"
    );
    let mut asked = 0u64;
    for (path, size) in files.iter().zip(&sizes) {
        let want = (*size as f64 * share) as u64;
        let Ok(file) = std::fs::File::open(path) else { continue };
        let mut at = 0u64;
        while at < want {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let len = CHUNK_BYTES.min(want - at);
            // SAFETY: the descriptor is open for the call; fadvise takes no pointers.
            let result = unsafe {
                libc::posix_fadvise(
                    file.as_raw_fd(),
                    i64::try_from(at).unwrap_or(i64::MAX),
                    i64::try_from(len).unwrap_or(i64::MAX),
                    libc::POSIX_FADV_WILLNEED,
                )
            };
            if result != 0 {
                break;
            }
            at += len;
            asked += len;
        }
    }
    tracing::info!(
        bytes = asked,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "shard files read ahead"
    );
}

/// MemAvailable from /proc/meminfo, in bytes.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// The idle I/O class for this thread: its reads go when nothing else waits for the disk
/// (where the I/O scheduler honours classes; elsewhere the call changes nothing).
fn lowest_io_priority() {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: libc::c_long = 13;
    // SAFETY: ioprio_set takes no pointers; who = 0 names the calling thread.
    unsafe {
        libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn available_memory_is_read() {
        assert!(available_memory().is_some_and(|bytes| bytes > 0));
    }

    #[test]
    fn a_stop_before_the_start_reads_nothing_and_returns() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("shard-000.redb");
        std::fs::write(&file, vec![7u8; 1 << 20]).unwrap();
        run(&[file.clone(), dir.path().join("missing")], &AtomicBool::new(true));
        run(&[file], &AtomicBool::new(false));
    }
}
