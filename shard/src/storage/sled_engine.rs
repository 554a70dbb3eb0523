//! The sled engine, kept selectable as the design card asks. sled 0.34's `flush` calls
//! sync_file_range rather than fsync, so an acknowledged write survives a process crash but
//! not a power cut; the server only opens it with `durability = "process-crash-only"`.
//! sled has no snapshots: a "snapshot" here is a live view.

use std::path::Path;

use super::{KvEngine, KvSnapshot, Mutation, StorageError, StorageResult};

pub struct SledEngine {
    tree: sled::Db,
}

fn err(e: impl std::fmt::Display) -> StorageError {
    StorageError(e.to_string())
}

impl SledEngine {
    pub fn open(path: &Path) -> StorageResult<Self> {
        let tree = sled::Config::new().path(path).open().map_err(err)?;
        Ok(Self { tree })
    }
}

impl KvEngine for SledEngine {
    fn snapshot(&self) -> StorageResult<Box<dyn KvSnapshot>> {
        Ok(Box::new(SledView { tree: self.tree.clone() }))
    }

    fn commit(&self, batch: &[Mutation]) -> StorageResult<()> {
        let mut sled_batch = sled::Batch::default();
        for m in batch {
            match &m.value {
                Some(v) => sled_batch.insert(m.key.as_slice(), v.as_slice()),
                None => sled_batch.remove(m.key.as_slice()),
            }
        }
        self.tree.apply_batch(sled_batch).map_err(err)?;
        self.tree.flush().map_err(err)?;
        Ok(())
    }
}

struct SledView {
    tree: sled::Db,
}

impl KvSnapshot for SledView {
    fn get(&self, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        Ok(self.tree.get(key).map_err(err)?.map(|v| v.to_vec()))
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> StorageResult<()> {
        self.scan_from(prefix, prefix, visit)
    }

    fn scan_from(
        &self,
        prefix: &[u8],
        from: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> StorageResult<()> {
        let from = if from < prefix { prefix } else { from };
        for item in self.tree.range(from..) {
            let (k, v) = item.map_err(err)?;
            if !k.starts_with(prefix) || !visit(&k, &v) {
                break;
            }
        }
        Ok(())
    }
}
