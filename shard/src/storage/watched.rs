//! The backend a shard's redb file is written through: the file as redb's own backend (or
//! the crash tests' one) handles it, plus a [`Watch`] of how its writes failed.
//!
//! redb reports a failed commit as one I/O error and then latches the database; it does not
//! say which step failed. That step decides what the shard may do next
//! (docs/ARCHITECTURE.md, "Faults"):
//! - the filesystem refused room for a page (ENOSPC or EDQUOT from a write or a growth of
//!   the file): nothing of the commit is durable, and the last durable commit is whole,
//!   since redb writes a commit's pages to free space before the header that names them.
//!   The state is known, so writes may resume once there is room again;
//! - a sync failed: which pages reached the disk is unknown (after a failed fsync Linux may
//!   drop the dirty pages and report success next time), so the shard must stop writing
//!   until an operator restarts it, whatever the error was.

use std::io;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redb::{BackendError, StorageBackend};

/// How the writes of one opened database failed, set by its backend.
#[derive(Debug, Default)]
pub struct Watch {
    sync_failed: AtomicBool,
    out_of_space: AtomicBool,
    /// A write failed for another reason (EIO, EROFS...).
    other_failed: AtomicBool,
}

impl Watch {
    /// Whether the failures seen leave the file's last durable commit whole and nothing
    /// else in doubt: a write refused for lack of space, and no failed sync.
    pub fn only_out_of_space(&self) -> bool {
        self.out_of_space.load(Ordering::Acquire)
            && !self.sync_failed.load(Ordering::Acquire)
            && !self.other_failed.load(Ordering::Acquire)
    }

    /// A watch that saw a write refused for space (tests of the engine's recovery).
    #[cfg(test)]
    pub fn out_of_space_seen() -> Self {
        let watch = Self::default();
        watch.saw(&io::Error::from_raw_os_error(libc_codes::ENOSPC));
        watch
    }

    fn saw(&self, e: &io::Error) {
        let flag = if is_out_of_space(e) { &self.out_of_space } else { &self.other_failed };
        flag.store(true, Ordering::Release);
    }
}

/// ENOSPC (the filesystem is full) or EDQUOT (the user's quota is).
pub fn is_out_of_space(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded)
        || matches!(e.raw_os_error(), Some(libc_codes::ENOSPC | libc_codes::EDQUOT))
}

/// The two errno values, spelled here so the crate needs no libc for them (Linux values).
mod libc_codes {
    pub const ENOSPC: i32 = 28;
    pub const EDQUOT: i32 = 122;
}

/// A backend that passes every call through and notes failed writes and syncs in its watch.
#[derive(Debug)]
pub struct Watched {
    inner: Box<dyn StorageBackend>,
    watch: Arc<Watch>,
}

impl Watched {
    pub fn new(inner: Box<dyn StorageBackend>) -> (Self, Arc<Watch>) {
        let watch = Arc::new(Watch::default());
        (Self { inner, watch: watch.clone() }, watch)
    }
}

impl StorageBackend for Watched {
    fn len(&self) -> Result<u64, io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.inner.set_len(len).inspect_err(|e| self.watch.saw(e))
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.inner.sync_data().inspect_err(|_| self.watch.sync_failed.store(true, Ordering::Release))
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.inner.write(offset, data).inspect_err(|e| self.watch.saw(e))
    }

    fn close(&self) -> Result<(), io::Error> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend whose writes fail with `write_error` and whose syncs fail when `sync_fails`.
    #[derive(Debug)]
    struct Failing {
        write_error: Option<i32>,
        sync_fails: bool,
    }

    impl StorageBackend for Failing {
        fn len(&self) -> Result<u64, io::Error> {
            Ok(0)
        }
        fn read(&self, _: u64, _: &mut [u8]) -> Result<(), io::Error> {
            Ok(())
        }
        fn set_len(&self, _: u64) -> Result<(), io::Error> {
            Ok(())
        }
        fn sync_data(&self) -> Result<(), io::Error> {
            if self.sync_fails {
                return Err(io::Error::from_raw_os_error(libc_codes::ENOSPC));
            }
            Ok(())
        }
        fn write(&self, _: u64, _: &[u8]) -> Result<(), io::Error> {
            match self.write_error {
                Some(code) => Err(io::Error::from_raw_os_error(code)),
                None => Ok(()),
            }
        }
    }

    fn watched(write_error: Option<i32>, sync_fails: bool) -> (Watched, Arc<Watch>) {
        Watched::new(Box::new(Failing { write_error, sync_fails }))
    }

    #[test]
    fn a_write_refused_for_space_is_known_a_failed_sync_is_not() {
        let (full, watch) = watched(Some(libc_codes::ENOSPC), false);
        assert!(!watch.only_out_of_space(), "nothing failed yet");
        assert!(full.write(0, b"x").is_err());
        assert!(watch.only_out_of_space());
        // A sync that fails afterwards puts the outcome in doubt, even with ENOSPC.
        let (full_then_sync, watch) = watched(Some(libc_codes::ENOSPC), true);
        assert!(full_then_sync.write(0, b"x").is_err());
        assert!(full_then_sync.sync_data().is_err());
        assert!(!watch.only_out_of_space());
        // EIO is never "only out of space"; EDQUOT is.
        let (eio, watch) = watched(Some(5), false);
        assert!(eio.write(0, b"x").is_err());
        assert!(!watch.only_out_of_space());
        watch.saw(&io::Error::from_raw_os_error(libc_codes::ENOSPC));
        assert!(!watch.only_out_of_space(), "an EIO before the ENOSPC keeps the doubt");
        let (quota, watch) = watched(Some(libc_codes::EDQUOT), false);
        assert!(quota.write(0, b"x").is_err());
        assert!(watch.only_out_of_space());
    }
}
