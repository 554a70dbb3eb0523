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

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use redb::backends::FileBackend;
use redb::{Database, StorageBackend};

const PAGE_BYTES: u64 = 4096;

/// Opens `path` through a [`FrozenFile`]: for reads only, whatever state the filesystem is in.
pub fn open_frozen(path: &Path) -> Result<Database, redb::DatabaseError> {
    redb::Builder::new().create_with_backend(FrozenFile::open(path)?)
}

/// The file as redb last left it, with redb's later writes kept in memory.
#[derive(Debug)]
pub struct FrozenFile {
    file: FileBackend,
    overlay: Mutex<Overlay>,
}

#[derive(Debug)]
struct Overlay {
    /// The length redb sees.
    len: u64,
    /// Page number → the page as redb last wrote it (always `PAGE_BYTES` long).
    pages: BTreeMap<u64, Vec<u8>>,
    /// The file's bytes from here on read as zeros: redb shrank the storage below them.
    zero_from: u64,
}

impl FrozenFile {
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let file = FileBackend::new(file).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Self { file, overlay: Mutex::new(Overlay { len, pages: BTreeMap::new(), zero_from: len }) })
    }

    fn overlay(&self) -> MutexGuard<'_, Overlay> {
        // Pages are replaced whole under the lock, so a panic can't leave half a page.
        self.overlay.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Page `page` as the file holds it: zeros past its end and past `zero_from`.
    fn file_page(&self, page: u64, zero_from: u64) -> io::Result<Vec<u8>> {
        let mut out = vec![0u8; PAGE_BYTES as usize];
        let readable = self.file.len()?.min(zero_from);
        let start = page * PAGE_BYTES;
        if start < readable {
            let end = (start + PAGE_BYTES).min(readable);
            self.file.read(start, &mut out[..(end - start) as usize])?;
        }
        Ok(out)
    }
}

/// Splits `offset..offset + len` into (page, offset in page, bytes, offset in the buffer).
fn page_spans(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let end = offset + len as u64;
    let mut pos = offset;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let take = (PAGE_BYTES - pos % PAGE_BYTES).min(end - pos);
        let span = (pos / PAGE_BYTES, (pos % PAGE_BYTES) as usize, take as usize, (pos - offset) as usize);
        pos += take;
        Some(span)
    })
}

impl StorageBackend for FrozenFile {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.overlay().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let overlay = self.overlay();
        if offset + out.len() as u64 > overlay.len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"));
        }
        for (page, in_page, take, at) in page_spans(offset, out.len()) {
            let dst = &mut out[at..at + take];
            match overlay.pages.get(&page) {
                Some(bytes) => dst.copy_from_slice(&bytes[in_page..in_page + take]),
                None => {
                    dst.copy_from_slice(&self.file_page(page, overlay.zero_from)?[in_page..in_page + take])
                }
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut overlay = self.overlay();
        if len < overlay.len {
            // Bytes past the new end must read as zeros if the storage grows again.
            overlay.pages.split_off(&len.div_ceil(PAGE_BYTES));
            if let Some(bytes) = overlay.pages.get_mut(&(len / PAGE_BYTES)) {
                bytes[(len % PAGE_BYTES) as usize..].fill(0);
            }
            overlay.zero_from = overlay.zero_from.min(len);
        }
        overlay.len = len;
        Ok(())
    }

    /// Nothing to sync: the file is never written.
    fn sync_data(&self) -> Result<(), io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut overlay = self.overlay();
        if offset + data.len() as u64 > overlay.len {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "write past the end"));
        }
        for (page, in_page, take, at) in page_spans(offset, data.len()) {
            if !overlay.pages.contains_key(&page) {
                let bytes = self.file_page(page, overlay.zero_from)?;
                overlay.pages.insert(page, bytes);
            }
            if let Some(bytes) = overlay.pages.get_mut(&page) {
                bytes[in_page..in_page + take].copy_from_slice(&data[at..at + take]);
            }
        }
        Ok(())
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
        let frozen = open_frozen(&path).unwrap();
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

    #[test]
    fn page_spans_cover_the_range() {
        let spans: Vec<_> = page_spans(4090, 10).collect();
        assert_eq!(spans, vec![(0, 4090, 6, 0), (1, 0, 4, 6)]);
    }
}
