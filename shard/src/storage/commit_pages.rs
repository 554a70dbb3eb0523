//! How many pages one redb commit writes, by what the commit holds: a measurement of the
//! storage side of a durable write's cost, not a check. Pages and bytes are
//! counted by a backend that wraps redb's own file backend, so the numbers are exact and do
//! not depend on the machine's load. Run on a copy of a real shard file (the original is
//! left alone), e.g. one `bench/commit-io.sh` or `ferrodir import` wrote:
//!
//! ```sh
//! FERRODIR_SHARD_FILE=/path/data/shard-000.redb \
//!   cargo test -p ferrodir-shard --lib commit_pages -- --ignored --nocapture
//! ```

use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::schema::Schema;
use redb::backends::FileBackend;
use redb::{BackendError, Database, ReadableDatabase, StorageBackend, TableDefinition};

use super::redb_engine::commit_batch;
use super::Mutation;
use crate::entry::record::EntryRecord;
use crate::id::EntryId;
use crate::index::config::IndexConfig;
use crate::index::keys;
use crate::rules::RuleTable;

const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

#[derive(Default, Debug)]
struct Counts {
    writes: AtomicU64,
    bytes: AtomicU64,
    syncs: AtomicU64,
}

/// redb's file backend, counting what goes to the file.
#[derive(Debug)]
struct Counting {
    file: FileBackend,
    counts: Arc<Counts>,
}

impl StorageBackend for Counting {
    fn len(&self) -> Result<u64, io::Error> {
        self.file.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.file.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.file.set_len(len)
    }
    fn sync_data(&self) -> Result<(), io::Error> {
        self.counts.syncs.fetch_add(1, Ordering::Relaxed);
        self.file.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.counts.writes.fetch_add(1, Ordering::Relaxed);
        self.counts.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        self.file.write(offset, data)
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

fn open_counting(path: &Path) -> (Database, Arc<Counts>) {
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let counts = Arc::new(Counts::default());
    let backend = Counting { file: FileBackend::new(file).unwrap(), counts: counts.clone() };
    let db = redb::Builder::new().set_cache_size(256 << 20).create_with_backend(backend).unwrap();
    (db, counts)
}

/// A small deterministic generator (xorshift64*), so that runs pick the same entries.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }
}

#[test]
#[ignore = "a measurement: needs FERRODIR_SHARD_FILE, prints pages per commit"]
fn commit_pages() {
    let Ok(source) = std::env::var("FERRODIR_SHARD_FILE") else {
        panic!("set FERRODIR_SHARD_FILE to a shard file (it is copied, not changed)");
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.redb");
    std::fs::copy(&source, &path).unwrap();
    let (db, counts) = open_counting(&path);

    // Every entry record, and the id of ou=people (the parent of the adds below).
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut people = None;
    let mut next_seq = 0u64;
    {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(KV).unwrap();
        for item in table.range(keys::entries_prefix().as_slice()..b"F".as_slice()).unwrap() {
            let (k, v) = item.unwrap();
            entries.push((k.value().to_vec(), v.value().to_vec()));
        }
        for item in table.range(b"D".as_slice()..b"E".as_slice()).unwrap() {
            let (k, v) = item.unwrap();
            if k.value().ends_with(b"ou=people") {
                people = EntryId::from_be_slice(v.value());
            }
        }
        if let Some(v) = table.get(keys::meta("next_seq").as_slice()).unwrap() {
            next_seq = u64::from_be_bytes(v.value().try_into().unwrap());
        }
    }
    assert!(!entries.is_empty(), "no entry records in {source}");
    let shard = EntryId::from_be_slice(&entries[0].0[1..]).unwrap().shard();
    let rules = RuleTable::from_schema(&Schema::standard());
    // bench/lib/common.sh's indices.
    let indexes =
        IndexConfig::from_directives(&["objectClass eq", "uid,mail eq", "cn eq,sub"], &rules).unwrap();
    println!("{source}: {} entries, shard {shard}, ou=people {people:?}", entries.len());

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut csn = 1u64 << 50;
    let mut seq = next_seq + 1_000_000;
    let csn_max = |csn: u64| Mutation { key: keys::meta("csn_max"), value: Some(csn.to_be_bytes().to_vec()) };
    let mut run = |what: &str, commits: usize, make: &mut dyn FnMut(&mut Rng) -> Vec<Mutation>| {
        // One commit first, so that a scenario does not pay for the one before it.
        commit_batch(&db, &make(&mut rng), redb::Durability::Immediate, None).unwrap();
        let (w0, b0, s0) = (
            counts.writes.load(Ordering::Relaxed),
            counts.bytes.load(Ordering::Relaxed),
            counts.syncs.load(Ordering::Relaxed),
        );
        let mut keys_written = 0;
        for _ in 0..commits {
            let batch = make(&mut rng);
            keys_written += batch.len();
            commit_batch(&db, &batch, redb::Durability::Immediate, None).unwrap();
        }
        let n = commits as f64;
        let writes = (counts.writes.load(Ordering::Relaxed) - w0) as f64 / n;
        let bytes = (counts.bytes.load(Ordering::Relaxed) - b0) as f64 / n;
        let syncs = (counts.syncs.load(Ordering::Relaxed) - s0) as f64 / n;
        println!(
            "{what:<44} keys/commit {:>5.1}  pwrites/commit {writes:>6.1}  KiB/commit {:>7.1}  fdatasyncs/commit {syncs:.2}",
            keys_written as f64 / n,
            bytes / 1024.0
        );
    };
    let replace = |rng: &mut Rng| {
        let (k, v) = &entries[rng.below(entries.len())];
        Mutation { key: k.clone(), value: Some(v.clone()) }
    };
    run("empty commit", 300, &mut |_| Vec::new());
    run("csn_max only", 300, &mut |_| {
        csn += 1;
        vec![csn_max(csn)]
    });
    run("1 entry record replaced (same size)", 300, &mut |rng| vec![replace(rng)]);
    run("1 entry record + csn_max (a modify)", 300, &mut |rng| {
        csn += 1;
        vec![replace(rng), csn_max(csn)]
    });
    run("3 entry records + csn_max (3 modifies)", 300, &mut |rng| {
        csn += 1;
        vec![replace(rng), replace(rng), replace(rng), csn_max(csn)]
    });
    let Some(parent) = people else { return };
    let mut add = |_: &mut Rng, n: usize| {
        let mut out = Vec::new();
        for _ in 0..n {
            seq += 1;
            let name = format!("bench{:07}", seq % 10_000_000);
            let record = EntryRecord {
                parent,
                rdn: format!("cn={name}"),
                rdn_norm: format!("cn={name}"),
                flags: 0,
                entry: Entry::new(vec![
                    // What ldclt's `add,person` sends.
                    Attribute::new("objectClass", vec![b"person".to_vec()]),
                    Attribute::new("cn", vec![name.into_bytes()]),
                    Attribute::new("sn", vec![b"toto sn".to_vec()]),
                ]),
            };
            out.extend(crate::write::layout::new_entry(&indexes, &rules, EntryId::new(shard, seq), &record));
        }
        csn += 1;
        out.push(crate::write::layout::next_seq(seq + 1));
        out.push(csn_max(csn));
        out
    };
    run("1 add (person, cn eq,sub) + next_seq + csn", 300, &mut |rng| add(rng, 1));
    run("3 adds + next_seq + csn", 300, &mut |rng| add(rng, 3));
}
