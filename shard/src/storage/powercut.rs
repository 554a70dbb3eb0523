//! A redb storage backend for crash tests that simulates a power cut.
//!
//! kill -9 alone cannot catch an acknowledgement sent before the sync: the OS page cache
//! survives the process, so an unsynced write still reaches the disk. This backend keeps every
//! write since the last `sync_data` in the process's own memory and writes it to the file only
//! inside `sync_data` (followed by a real fdatasync). When the process dies, whatever was not
//! synced dies with it, exactly as after a power cut at that instant. A server that replied
//! before syncing then loses acknowledged writes, and the crash test sees it.
//!
//! Chosen by [`super::open`] when `StorageOptions::test_modes` (the `[testing]` config
//! section, for tests) asks for it:
//! - `simulate_power_cut`: the behaviour above;
//! - `ack_before_sync`: `sync_data` makes nothing durable, a deliberately broken server that
//!   the crash test must catch under a simulated power cut (and that plain kill -9 misses).
//!
//! The model is the strict one (nothing unsynced survives); real disks may also keep some
//! unsynced pages, which redb's commit protocol (checksummed commit slots) is built to handle.

use std::fs::File;
use std::io;
use std::ops::Bound;
use std::sync::Mutex;

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use super::overlay::PageOverlay;

/// Unsynced pages live here until `sync_data`; the file holds only synced data.
#[derive(Debug)]
pub(crate) struct PowerCutBackend {
    file: FileBackend,
    pending: Mutex<PageOverlay>,
    /// Keep unsynced writes in memory (else they go straight to the file).
    power_cut: bool,
    /// `sync_data` does nothing.
    skip_sync: bool,
}

impl PowerCutBackend {
    pub(crate) fn new(file: File, power_cut: bool, skip_sync: bool) -> io::Result<Self> {
        let len = file.metadata()?.len();
        let file = FileBackend::new(file).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Self { file, pending: Mutex::new(PageOverlay::new(len)), power_cut, skip_sync })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PageOverlay> {
        // A panic while holding the lock leaves whole pages, never half-written ones.
        self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl StorageBackend for PowerCutBackend {
    fn len(&self) -> Result<u64, io::Error> {
        if !self.power_cut {
            return self.file.len();
        }
        Ok(self.lock().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        if !self.power_cut {
            return self.file.read(offset, out);
        }
        self.lock().read(&self.file, offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        if !self.power_cut {
            return self.file.set_len(len);
        }
        self.lock().set_len(len);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        if self.skip_sync {
            return Ok(());
        }
        if self.power_cut {
            self.lock().flush(&self.file)?;
        }
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        if !self.power_cut {
            return self.file.write(offset, data);
        }
        self.lock().write(&self.file, offset, data)
    }

    fn close(&self) -> Result<(), io::Error> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::overlay::PAGE_BYTES as PAGE;
    use redb::Database;
    use redb::{ReadableDatabase, TableDefinition};
    use std::fs::OpenOptions;
    use std::path::Path;

    const T: TableDefinition<u64, u64> = TableDefinition::new("t");

    fn open(path: &Path) -> Database {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).unwrap();
        redb::Builder::new().create_with_backend(PowerCutBackend::new(file, true, false).unwrap()).unwrap()
    }

    fn put(db: &Database, key: u64, durability: redb::Durability) {
        let mut txn = db.begin_write().unwrap();
        txn.set_durability(durability).unwrap();
        txn.open_table(T).unwrap().insert(key, key * 10).unwrap();
        txn.commit().unwrap();
    }

    fn keys(db: &Database) -> Vec<u64> {
        let txn = db.begin_read().unwrap();
        let Ok(table) = txn.open_table(T) else { return Vec::new() };
        use redb::ReadableTable;
        table.iter().unwrap().map(|item| item.unwrap().0.value()).collect()
    }

    #[test]
    fn synced_commits_survive_and_unsynced_ones_vanish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.redb");
        let db = open(&path);
        for key in 0..200 {
            put(&db, key, redb::Durability::Immediate);
        }
        assert_eq!(keys(&db).len(), 200, "the live view sees every commit");
        for key in 200..400 {
            put(&db, key, redb::Durability::None);
        }
        assert_eq!(keys(&db).len(), 400);
        // The power cut: only the file survives, not the process's memory. A copy of the file
        // stands in for it (the live database still holds its lock on the original).
        let copy = dir.path().join("after-power-cut.redb");
        std::fs::copy(&path, &copy).unwrap();
        drop(db);
        let reopened = Database::create(&copy).unwrap();
        assert_eq!(keys(&reopened), (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn reads_see_writes_across_page_edges() {
        let dir = tempfile::tempdir().unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.path().join("b"))
            .unwrap();
        let backend = PowerCutBackend::new(file, true, false).unwrap();
        backend.set_len(3 * PAGE).unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        backend.write(PAGE - 100, &data).unwrap();
        let mut out = vec![0u8; 5000];
        backend.read(PAGE - 100, &mut out).unwrap();
        assert_eq!(out, data);
        backend.sync_data().unwrap();
        backend.set_len(PAGE).unwrap();
        backend.set_len(2 * PAGE).unwrap();
        let mut tail = vec![1u8; 100];
        backend.read(PAGE, &mut tail).unwrap();
        assert!(tail.iter().all(|&b| b == 0), "bytes past a shrink read as zero after growing");
    }
}
