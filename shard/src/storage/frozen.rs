//! A read-only way back into a shard's redb file after a commit failed.
//!
//! After an I/O error redb latches: every later operation on that `Database` fails with
//! `PreviousIo`, reads of pages not in its cache included. Reopening the file the normal way
//! is no way out: on a read-only filesystem it can't be opened for writing, and opening a file
//! that was not closed cleanly starts with a repair, which writes. This backend lets redb do
//! that repair in memory: it reads the file, keeps every write redb makes in process memory,
//! and never writes, truncates or syncs the file. A database opened on it serves the last
//! commit that reached the file, and nothing it does can make the file worse. It takes no
//! file lock: the latched database still holds one, and this one never writes.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redb::backends::FileBackend;
use redb::{Database, StorageBackend};

use super::overlay::PageOverlay;

/// Opens `path` through a [`FrozenFile`]: for reads only, whatever state the filesystem is
/// in. With it, its [`Seal`].
pub fn open_frozen(path: &Path) -> Result<(Database, Seal), redb::DatabaseError> {
    let file = FrozenFile::open(path)?;
    let seal = Seal(file.sealed.clone());
    Ok((redb::Builder::new().create_with_backend(file)?, seal))
}

/// Cuts a frozen database off from the file, for when the file is being written again (a
/// shard that recovered from a full disk): redb's close of the frozen database would read
/// pages the recovered one has rewritten since. Sealed, every read of the file fails, so the
/// close stops with an error instead of acting on pages that are no longer its own. Sealed
/// only once no reader holds the database.
#[derive(Debug)]
pub struct Seal(Arc<AtomicBool>);

impl Seal {
    pub fn seal(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The file as redb last left it, with redb's later writes kept in memory.
#[derive(Debug)]
pub struct FrozenFile {
    file: FileBackend,
    overlay: Mutex<PageOverlay>,
    sealed: Arc<AtomicBool>,
}

impl FrozenFile {
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let file = FileBackend::new(file).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Self { file, overlay: Mutex::new(PageOverlay::new(len)), sealed: Arc::default() })
    }

    fn overlay(&self) -> MutexGuard<'_, PageOverlay> {
        // Pages are replaced whole under the lock, so a panic can't leave half a page.
        self.overlay.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StorageBackend for FrozenFile {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.overlay().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        if self.sealed.load(Ordering::Acquire) {
            return Err(io::Error::other("the read-only reopen was retired: the file is written again"));
        }
        self.overlay().read(&self.file, offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.overlay().set_len(len);
        Ok(())
    }

    /// Nothing to sync: the file is never written.
    fn sync_data(&self) -> Result<(), io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.overlay().write(&self.file, offset, data)
    }
}

#[cfg(test)]
mod tests {
    use redb::{ReadableDatabase, TableDefinition};

    use super::*;

    const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");

    #[test]
    fn reads_the_last_commit_and_never_writes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.redb");
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(T).unwrap();
            for i in 0..2000u64 {
                table.insert(i, vec![7u8; 300].as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
        // Still open, as after a failed commit: the file is marked as needing recovery.
        let before = std::fs::read(&path).unwrap();
        let (frozen, _) = open_frozen(&path).unwrap();
        {
            let txn = frozen.begin_read().unwrap();
            let table = txn.open_table(T).unwrap();
            assert_eq!(table.get(1999).unwrap().unwrap().value(), vec![7u8; 300].as_slice());
            // Writes work, in memory only.
            let txn = frozen.begin_write().unwrap();
            txn.open_table(T).unwrap().insert(5000, b"x".as_slice()).unwrap();
            txn.commit().unwrap();
        }
        drop(frozen);
        assert!(std::fs::read(&path).unwrap() == before, "the frozen database wrote the file");
        drop(db);
    }
}
