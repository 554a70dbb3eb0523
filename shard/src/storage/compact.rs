//! Offline compaction of one redb file (`ferrodir compact`): moves the live pages to the
//! front of the file and cuts off the free tail.
//!
//! redb reuses freed pages but gives space back to the filesystem only from the end of the
//! file: a file that grew while something pinned freed pages (an idle read transaction:
//! docs/DECISIONS.md, "Disk footprint under churn") keeps its size after the pin goes, even once
//! most of it is free. `Database::compact` needs the database to itself (no read or write
//! transaction anywhere), so this runs with the server stopped; redb's file lock makes
//! sure of that.
//!
//! Crash safety: compaction is a series of redb commits (2-phase), each of which leaves a
//! consistent file; an interrupted compaction leaves the file as of its last commit, with
//! the same data, and redb's repair runs at the next open.

use std::path::Path;

use redb::CompactionError;

use super::redb_engine::open_checked;
use super::{OpenError, StorageError, StorageOptions};

/// Sizes of one file before and after compaction, in bytes of file length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compacted {
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Compacts the redb file at `path`. Refuses a damaged file (the same checks as the server's
/// open: present, not empty, every checksum right) and one another process holds open.
/// `options`: how a shard file's write log is replayed into it first.
pub fn compact_redb_file(path: &Path, options: &StorageOptions) -> Result<Compacted, OpenError> {
    // Records of the write log that the file lacks (a server killed since its last
    // checkpoint) go into it first, so that the compacted file holds every write.
    if super::log_path(path).exists() {
        drop(open_checked(path)?);
        drop(super::RedbEngine::open(path, options).map_err(OpenError::Other)?);
    }
    let mut db = open_checked(path)?;
    let bytes_before = file_len(path)?;
    db.compact().map_err(|e| match e {
        CompactionError::TransactionInProgress => OpenError::Other(StorageError(
            "a transaction is in progress on the file (is a server using this data directory?)".into(),
        )),
        other => OpenError::Other(StorageError(format!("compaction failed: {other}"))),
    })?;
    drop(db);
    Ok(Compacted { bytes_before, bytes_after: file_len(path)? })
}

fn file_len(path: &Path) -> Result<u64, OpenError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| OpenError::Other(StorageError(format!("{}: {e}", path.display()))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{KvEngine, Mutation, RedbEngine};

    fn put(i: u32) -> Mutation {
        Mutation { key: format!("E{i:06}").into_bytes(), value: Some(vec![(i % 251) as u8; 1500]) }
    }

    /// A file grown by many entries, most of them deleted again, shrinks; what is left reads
    /// back the same; a file held open by another handle is refused.
    #[test]
    fn compaction_shrinks_a_file_and_keeps_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-000.redb");
        {
            let engine = RedbEngine::open(&path, &StorageOptions::default()).unwrap();
            for chunk in (0..6000u32).collect::<Vec<_>>().chunks(500) {
                engine.commit(&chunk.iter().map(|&i| put(i)).collect::<Vec<_>>()).unwrap();
            }
            let deletes: Vec<_> = (100..6000u32)
                .map(|i| Mutation { key: format!("E{i:06}").into_bytes(), value: None })
                .collect();
            engine.commit(&deletes).unwrap();
            // Held open: compaction must refuse, not wait or corrupt.
            let refused = compact_redb_file(&path, &StorageOptions::default()).unwrap_err();
            assert!(refused.to_string().contains("another process"), "{refused}");
        }
        let done = compact_redb_file(&path, &StorageOptions::default()).unwrap();
        assert!(
            done.bytes_after * 4 < done.bytes_before,
            "{} bytes before, {} after",
            done.bytes_before,
            done.bytes_after
        );
        let engine = RedbEngine::open_existing(&path, &StorageOptions::default()).unwrap();
        let view = engine.snapshot().unwrap();
        let mut seen = 0;
        view.scan_prefix(b"E", &mut |k, v| {
            let i: u32 = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
            assert_eq!(v, put(i).value.unwrap().as_slice());
            seen += 1;
            true
        })
        .unwrap();
        assert_eq!(seen, 100);
    }

    #[test]
    fn compaction_refuses_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let err =
            compact_redb_file(&dir.path().join("shard-009.redb"), &StorageOptions::default()).unwrap_err();
        assert!(matches!(err, OpenError::Damaged(_)), "{err}");
    }
}
