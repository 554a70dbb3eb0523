//! The default engine: redb, one file per shard, committed with fdatasync
//! (`Durability::Immediate`) before [`KvEngine::commit`] returns.

use std::path::Path;

use redb::{Database, ReadOnlyTable, ReadableDatabase, TableDefinition};

use super::{prefix_end, KvEngine, KvSnapshot, Mutation, StorageError, StorageResult};

const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

pub struct RedbEngine {
    db: Database,
}

fn err(e: impl std::fmt::Display) -> StorageError {
    StorageError(e.to_string())
}

impl RedbEngine {
    pub fn open(path: &Path) -> StorageResult<Self> {
        let db = super::powercut::open_redb(path).map_err(err)?;
        // Create the table up front so that read transactions can always open it.
        let txn = db.begin_write().map_err(err)?;
        txn.open_table(KV).map_err(err)?;
        txn.commit().map_err(err)?;
        Ok(Self { db })
    }
}

impl KvEngine for RedbEngine {
    fn snapshot(&self) -> StorageResult<Box<dyn KvSnapshot>> {
        let txn = self.db.begin_read().map_err(err)?;
        let table = txn.open_table(KV).map_err(err)?;
        Ok(Box::new(RedbSnapshot { table }))
    }

    fn commit(&self, batch: &[Mutation]) -> StorageResult<()> {
        let mut txn = self.db.begin_write().map_err(err)?;
        // Explicit, not a default: the acknowledgement waits for fdatasync.
        txn.set_durability(redb::Durability::Immediate).map_err(err)?;
        {
            let mut table = txn.open_table(KV).map_err(err)?;
            for m in batch {
                match &m.value {
                    Some(v) => {
                        table.insert(m.key.as_slice(), v.as_slice()).map_err(err)?;
                    }
                    None => {
                        table.remove(m.key.as_slice()).map_err(err)?;
                    }
                }
            }
        }
        txn.commit().map_err(err)
    }
}

struct RedbSnapshot {
    table: ReadOnlyTable<&'static [u8], &'static [u8]>,
}

impl KvSnapshot for RedbSnapshot {
    fn get(&self, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        Ok(self.table.get(key).map_err(err)?.map(|v| v.value().to_vec()))
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> StorageResult<()> {
        let range = match prefix_end(prefix) {
            Some(end) => self.table.range(prefix..end.as_slice()).map_err(err)?,
            None => self.table.range(prefix..).map_err(err)?,
        };
        for item in range {
            let (k, v) = item.map_err(err)?;
            if !visit(k.value(), v.value()) {
                break;
            }
        }
        Ok(())
    }
}
