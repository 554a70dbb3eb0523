//! The disk monitor: once a second, how much space the data directory's filesystem has
//! left for the server's user (statvfs's `f_bavail`), into the router's `DiskSpace`, which
//! refuses writes below `[limits] disk_free_min_bytes`. As 389-ds's disk monitoring, it
//! acts before the disk is full; a shard that meets a full disk anyway recovers by itself
//! once space is back (docs/ARCHITECTURE.md, "Faults").

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use ferrodir_router::disk::DiskSpace;

/// How often the filesystem is looked at. Whatever is written between two looks eats into
/// the reserve: a server that writes faster than the reserve per second needs a larger
/// `disk_free_min_bytes` to keep its writes from meeting a full disk (which they survive,
/// with 52 answers until space is back, but without the clear refusal).
const INTERVAL: Duration = Duration::from_secs(1);

/// Bytes available to an unprivileged user on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::other("a NUL byte in the data directory's path"))?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call, and `stats` is a
    // writable statvfs the call fills in; it is read only after the call succeeded.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stats.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised the struct.
    let stats = unsafe { stats.assume_init() };
    Ok((stats.f_bavail as u64).saturating_mul(stats.f_frsize as u64))
}

/// Looks once now (so that a server started on a nearly full disk refuses writes from its
/// first request), then every [`INTERVAL`] on a thread of its own, until the server lets
/// go of `disk`.
pub fn start(data_dir: &Path, disk: &Arc<DiskSpace>) -> anyhow::Result<()> {
    let dir = data_dir.to_path_buf();
    look(&dir, disk);
    let weak = Arc::downgrade(disk);
    std::thread::Builder::new().name("disk-monitor".into()).spawn(move || watch(dir, weak))?;
    Ok(())
}

fn watch(dir: PathBuf, disk: Weak<DiskSpace>) {
    loop {
        std::thread::sleep(INTERVAL);
        let Some(disk) = disk.upgrade() else { return };
        look(&dir, &disk);
    }
}

fn look(dir: &Path, disk: &DiskSpace) {
    match free_bytes(dir) {
        Ok(free) => {
            let (low, changed) = disk.observe(free);
            if changed && low {
                tracing::error!(free_bytes = free, disk_free_min_bytes = disk.min(), data_dir = %dir.display(),
                    "disk space low: client writes are refused (unwillingToPerform) until space is freed");
            } else if changed {
                tracing::warn!(free_bytes = free, data_dir = %dir.display(), "disk space is back: writes are taken again");
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, data_dir = %dir.display(), "cannot read the free space of the data directory")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_bytes_of_a_real_directory() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_bytes(dir.path()).unwrap();
        assert!(free > 0 && free < u64::MAX);
        assert!(free_bytes(&dir.path().join("missing")).is_err());
    }
}
