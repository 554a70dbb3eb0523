//! The external sort of one shard writer of `ferrodir import`: every key the writer puts,
//! except the entry records, goes through it, and reaches redb in key order at the end.
//!
//! Why sorted: redb inserts a key greater than every key in its tree at the rightmost leaf,
//! in place, and when that leaf is full starts a new one and leaves the full one packed. A
//! key inserted anywhere else lands in some leaf in the middle, and a full leaf there is
//! split in half. An import hands a shard its index keys in entry order, which is many
//! insertion points at once (one per index value and per substring gram), so unsorted every
//! insert walks to another leaf, most leaves end up half full, and the file is twice the
//! size. The entry records themselves need no sorting: a shard's ids count up in input
//! order, so they arrive as appends already (the writer puts them straight into redb).
//!
//! The structure used: almost every key is a posting, `prefix ‖ id` (8 bytes, big-endian)
//! with an empty value (the index tables and the one-level table), and since ids count up,
//! the postings of one prefix arrive sorted. So the sorter keeps, per prefix, its ids in
//! arrival order (a hash map), and sorts only the distinct prefixes when it writes a run:
//! about 4 per user entry (its uid, mail and cn values; objectClass values and grams are
//! shared by many) instead of about 20 keys. Any other key (DN→ID, metadata) is kept and
//! sorted as a key-value pair.
//!
//! Memory is bounded: once what it holds reaches `budget_bytes` (an estimate, overheads
//! included), it writes a sorted run to a file in the spill directory and starts again.
//! [`SortedKeys::finish`] merges the runs (and what is still in memory) with one buffer per
//! run; at [`RUNS_MAX`] runs they are first merged into one, so the merge's memory does not
//! grow with the input either. Run files are removed as soon as they are merged.
//!
//! Order is all this changes: redb sorts whatever it gets, so a key emitted out of place
//! (possible where one posting prefix is a proper prefix of another, e.g. an equality value
//! that holds a NUL byte) costs a split, never a wrong tree. Equal keys keep their put order
//! (runs merge oldest first), so the last put of a key wins as it would in redb directly.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::storage::{StorageError, StorageResult, Table};

/// Runs merged at once; more are first merged into one run.
pub const RUNS_MAX: usize = 32;
/// The read buffer of each run during a merge, and the write buffer of a run being written.
const RUN_BUFFER_BYTES: usize = 256 * 1024;
/// Estimated bytes per distinct posting prefix beyond its own bytes and its ids: the hash
/// slot (key box, id vector, control byte, load factor), two allocations' rounding, and
/// the sorted vector a run is written from.
const PREFIX_OVERHEAD_BYTES: usize = 128;
/// Estimated bytes per key-value pair beyond its own bytes.
const PAIR_OVERHEAD_BYTES: usize = 64;

/// A key-value pair that is not a posting, held until its run is written.
type Pair = (Box<[u8]>, Box<[u8]>);

const TAG_PAIR: u8 = 0;
const TAG_POSTINGS: u8 = 1;

/// Where a writer emits the sorted keys (a redb bulk load; a run file while merging runs).
pub trait SortedOut {
    fn pair(&mut self, key: &[u8], value: &[u8]) -> StorageResult<()>;
    /// `count` postings of `prefix` follow, each as one call to [`SortedOut::posting`].
    fn postings(&mut self, prefix: &[u8], count: u32) -> StorageResult<()>;
    fn posting(&mut self, id: [u8; 8]) -> StorageResult<()>;
}

/// The keys one shard writer put, sorted at the end. See the module docs.
pub struct SortedKeys {
    spill_dir: PathBuf,
    /// Names this writer's run files apart from another writer's in the same directory.
    label: String,
    budget_bytes: usize,
    used_bytes: usize,
    postings: HashMap<Box<[u8]>, Postings, BuildHasherDefault<FxHasher>>,
    pairs: Vec<Pair>,
    /// Run files, oldest first.
    runs: Vec<PathBuf>,
    runs_written: usize,
}

struct Postings {
    /// 8-byte big-endian ids as they arrived.
    ids: Vec<[u8; 8]>,
    /// False once an id arrived that is not greater than the one before (never in an
    /// import, whose ids count up; sorted before the run is written).
    ascending: bool,
}

impl SortedKeys {
    /// `spill_dir` is created when the first run is written; the caller removes it.
    pub fn new(spill_dir: &Path, label: &str, budget_bytes: usize) -> Self {
        Self {
            spill_dir: spill_dir.to_path_buf(),
            label: label.to_string(),
            budget_bytes,
            used_bytes: 0,
            postings: HashMap::default(),
            pairs: Vec::new(),
            runs: Vec::new(),
            runs_written: 0,
        }
    }

    /// Takes one key (the last put of equal keys wins at the end).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> StorageResult<()> {
        match posting_split(key, value) {
            Some((prefix, id)) => self.put_posting(prefix, id),
            None => {
                self.used_bytes += key.len() + value.len() + PAIR_OVERHEAD_BYTES;
                self.pairs.push((key.into(), value.into()));
            }
        }
        if self.used_bytes >= self.budget_bytes {
            self.spill()?;
        }
        Ok(())
    }

    fn put_posting(&mut self, prefix: &[u8], id: [u8; 8]) {
        if let Some(list) = self.postings.get_mut(prefix) {
            let capacity = list.ids.capacity();
            match list.ids.last() {
                // The same key again (an entry's index keys may repeat): stored once.
                Some(last) if *last == id => return,
                Some(last) if *last > id => list.ascending = false,
                _ => {}
            }
            list.ids.push(id);
            self.used_bytes += (list.ids.capacity() - capacity) * 8;
        } else {
            self.used_bytes += prefix.len() + 8 + PREFIX_OVERHEAD_BYTES;
            let ids = vec![id];
            self.postings.insert(prefix.into(), Postings { ids, ascending: true });
        }
    }

    /// Runs written so far (for tests and the log).
    pub fn runs_written(&self) -> usize {
        self.runs_written
    }

    /// Writes what is in memory as a sorted run file.
    fn spill(&mut self) -> StorageResult<()> {
        if self.runs.len() + 1 >= RUNS_MAX {
            self.merge_runs_into_one()?;
        }
        if self.runs.is_empty() {
            std::fs::create_dir_all(&self.spill_dir).map_err(|e| io_error(&self.spill_dir, e))?;
        }
        let run = self.take_memory();
        let path = self.next_run_path();
        let mut writer = RunWriter::create(&path)?;
        run.emit(&mut writer)?;
        writer.finish()?;
        self.runs.push(path);
        Ok(())
    }

    /// Merges every run file into one (oldest first, so equal keys keep their order).
    fn merge_runs_into_one(&mut self) -> StorageResult<()> {
        let path = self.next_run_path();
        let mut writer = RunWriter::create(&path)?;
        let sources = open_runs(&self.runs)?;
        merge(sources, &mut writer)?;
        writer.finish()?;
        remove_runs(&std::mem::take(&mut self.runs))?;
        self.runs.push(path);
        Ok(())
    }

    fn next_run_path(&mut self) -> PathBuf {
        self.runs_written += 1;
        self.spill_dir.join(format!("{}-run-{:05}", self.label, self.runs_written))
    }

    /// What is in memory, sorted, leaving the sorter empty (its hash table's capacity kept
    /// for the next run, which will be alike).
    fn take_memory(&mut self) -> MemoryRun {
        let mut postings: Vec<(Box<[u8]>, Postings)> = self.postings.drain().collect();
        postings.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (_, list) in postings.iter_mut().filter(|(_, list)| !list.ascending) {
            list.ids.sort_unstable();
            list.ids.dedup();
        }
        let mut pairs = std::mem::take(&mut self.pairs);
        // Stable: equal keys stay in put order.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        self.used_bytes = 0;
        MemoryRun { postings, pairs }
    }

    /// Emits every key put, in key order, into `out`, and removes the run files.
    pub fn finish(mut self, out: &mut dyn SortedOut) -> StorageResult<()> {
        let memory = self.take_memory();
        if self.runs.is_empty() {
            return memory.emit(out);
        }
        if self.runs.len() + 1 > RUNS_MAX {
            self.merge_runs_into_one()?;
        }
        let mut sources = open_runs(&self.runs)?;
        sources.push(Source::Memory(MemorySource::new(memory)));
        merge(sources, out)?;
        remove_runs(&std::mem::take(&mut self.runs))
    }
}

impl Drop for SortedKeys {
    /// An abandoned import leaves no run files (the staging directory goes too, but the
    /// example data of `serve` spills into the data directory itself).
    fn drop(&mut self) {
        for run in &self.runs {
            let _ = std::fs::remove_file(run);
        }
    }
}

/// `(prefix, id)` for a posting key: one of the tables whose keys end in an id, with an
/// empty value; None for any other key.
fn posting_split<'k>(key: &'k [u8], value: &[u8]) -> Option<(&'k [u8], [u8; 8])> {
    const CHILDREN: u8 = Table::Children as u8;
    const EQ: u8 = Table::Eq as u8;
    const PRES: u8 = Table::Pres as u8;
    const SUB: u8 = Table::Sub as u8;
    const ORD: u8 = Table::Ord as u8;
    let posting_table = matches!(key.first(), Some(&(CHILDREN | EQ | PRES | SUB | ORD)));
    if !posting_table || !value.is_empty() || key.len() <= 9 {
        return None;
    }
    let (prefix, id) = key.split_at(key.len() - 8);
    Some((prefix, id.try_into().ok()?))
}

fn open_runs(paths: &[PathBuf]) -> StorageResult<Vec<Source>> {
    paths.iter().map(|p| Ok(Source::File(FileSource::open(p)?))).collect()
}

fn remove_runs(paths: &[PathBuf]) -> StorageResult<()> {
    for path in paths {
        std::fs::remove_file(path).map_err(|e| io_error(path, e))?;
    }
    Ok(())
}

fn io_error(path: &Path, e: std::io::Error) -> StorageError {
    StorageError(format!("import sort file {}: {e}", path.display()))
}

// --- runs in memory ---------------------------------------------------------------------

struct MemoryRun {
    postings: Vec<(Box<[u8]>, Postings)>,
    pairs: Vec<Pair>,
}

impl MemoryRun {
    fn emit(self, out: &mut dyn SortedOut) -> StorageResult<()> {
        let mut source = MemorySource::new(self);
        while source.advance() {
            source.emit_current(out)?;
        }
        Ok(())
    }
}

/// A memory run read in key order: the sorted postings and the sorted pairs, merged.
struct MemorySource {
    postings: std::vec::IntoIter<(Box<[u8]>, Postings)>,
    pairs: std::vec::IntoIter<Pair>,
    next_posting: Option<(Box<[u8]>, Postings)>,
    next_pair: Option<Pair>,
    current: Option<MemoryItem>,
}

enum MemoryItem {
    Postings(Box<[u8]>, Vec<[u8; 8]>),
    Pair(Box<[u8]>, Box<[u8]>),
}

impl MemorySource {
    fn new(run: MemoryRun) -> Self {
        let mut postings = run.postings.into_iter();
        let mut pairs = run.pairs.into_iter();
        let (next_posting, next_pair) = (postings.next(), pairs.next());
        Self { postings, pairs, next_posting, next_pair, current: None }
    }

    fn advance(&mut self) -> bool {
        let take_posting = match (&self.next_posting, &self.next_pair) {
            (Some(posting), Some(pair)) => posting.0 <= pair.0,
            (posting, _) => posting.is_some(),
        };
        self.current = if take_posting {
            let next = self.postings.next();
            std::mem::replace(&mut self.next_posting, next).map(|(p, l)| MemoryItem::Postings(p, l.ids))
        } else {
            let next = self.pairs.next();
            std::mem::replace(&mut self.next_pair, next).map(|(k, v)| MemoryItem::Pair(k, v))
        };
        self.current.is_some()
    }

    fn key(&self) -> &[u8] {
        match &self.current {
            Some(MemoryItem::Postings(prefix, _)) => prefix,
            Some(MemoryItem::Pair(key, _)) => key,
            None => &[],
        }
    }

    fn emit_current(&mut self, out: &mut dyn SortedOut) -> StorageResult<()> {
        match &self.current {
            Some(MemoryItem::Postings(prefix, ids)) => {
                out.postings(prefix, count_of(ids.len())?)?;
                ids.iter().try_for_each(|id| out.posting(*id))
            }
            Some(MemoryItem::Pair(key, value)) => out.pair(key, value),
            None => Ok(()),
        }
    }
}

fn count_of(len: usize) -> StorageResult<u32> {
    u32::try_from(len)
        .map_err(|_| StorageError("an import sort run holds too many postings of one key".into()))
}

// --- run files --------------------------------------------------------------------------

/// A run file: records in key order, each `tag (1) ‖ key length (4) ‖ key`, then for a pair
/// `value length (4) ‖ value`, for postings `count (4) ‖ count ids (8 each)`. Lengths are
/// little-endian; the file is read only by this process.
struct RunWriter {
    path: PathBuf,
    file: BufWriter<File>,
}

impl RunWriter {
    fn create(path: &Path) -> StorageResult<Self> {
        let file = File::create(path).map_err(|e| io_error(path, e))?;
        Ok(Self { path: path.to_path_buf(), file: BufWriter::with_capacity(RUN_BUFFER_BYTES, file) })
    }

    fn write(&mut self, bytes: &[u8]) -> StorageResult<()> {
        self.file.write_all(bytes).map_err(|e| io_error(&self.path, e))
    }

    fn write_len(&mut self, len: usize) -> StorageResult<()> {
        let len = u32::try_from(len).map_err(|_| StorageError("an import key or value over 4 GiB".into()))?;
        self.write(&len.to_le_bytes())
    }

    /// Flushed, not synced: a run lives only as long as the import that wrote it.
    fn finish(mut self) -> StorageResult<()> {
        self.file.flush().map_err(|e| io_error(&self.path, e))
    }
}

impl SortedOut for RunWriter {
    fn pair(&mut self, key: &[u8], value: &[u8]) -> StorageResult<()> {
        self.write(&[TAG_PAIR])?;
        self.write_len(key.len())?;
        self.write(key)?;
        self.write_len(value.len())?;
        self.write(value)
    }

    fn postings(&mut self, prefix: &[u8], count: u32) -> StorageResult<()> {
        self.write(&[TAG_POSTINGS])?;
        self.write_len(prefix.len())?;
        self.write(prefix)?;
        self.write(&count.to_le_bytes())
    }

    fn posting(&mut self, id: [u8; 8]) -> StorageResult<()> {
        self.write(&id)
    }
}

struct FileSource {
    path: PathBuf,
    file: BufReader<File>,
    tag: u8,
    key: Vec<u8>,
    /// The pair's value, or unused.
    value: Vec<u8>,
    /// The postings' count, or unused.
    count: u32,
}

impl FileSource {
    fn open(path: &Path) -> StorageResult<Self> {
        let file = File::open(path).map_err(|e| io_error(path, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            file: BufReader::with_capacity(RUN_BUFFER_BYTES, file),
            tag: TAG_PAIR,
            key: Vec::new(),
            value: Vec::new(),
            count: 0,
        })
    }

    fn read(&mut self, buf: &mut [u8]) -> StorageResult<()> {
        self.file.read_exact(buf).map_err(|e| io_error(&self.path, e))
    }

    fn read_u32(&mut self) -> StorageResult<u32> {
        let mut bytes = [0; 4];
        self.read(&mut bytes)?;
        Ok(u32::from_le_bytes(bytes))
    }

    fn read_into(&mut self, into: fn(&mut Self) -> &mut Vec<u8>) -> StorageResult<()> {
        let len = self.read_u32()? as usize;
        let mut buf = std::mem::take(into(self));
        buf.resize(len, 0);
        let read = self.read(&mut buf);
        *into(self) = buf;
        read
    }

    /// Reads the next record's header (a pair whole); false at the end of the file.
    fn advance(&mut self) -> StorageResult<bool> {
        let mut tag = [0u8; 1];
        match self.file.read(&mut tag) {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            Err(e) => return Err(io_error(&self.path, e)),
        }
        self.tag = tag[0];
        self.read_into(|s| &mut s.key)?;
        match self.tag {
            TAG_PAIR => self.read_into(|s| &mut s.value)?,
            TAG_POSTINGS => self.count = self.read_u32()?,
            other => {
                return Err(StorageError(format!(
                    "import sort file {}: bad tag {other}",
                    self.path.display()
                )))
            }
        }
        Ok(true)
    }

    fn emit_current(&mut self, out: &mut dyn SortedOut) -> StorageResult<()> {
        if self.tag == TAG_PAIR {
            return out.pair(&self.key, &self.value);
        }
        out.postings(&self.key, self.count)?;
        for _ in 0..self.count {
            let mut id = [0u8; 8];
            self.read(&mut id)?;
            out.posting(id)?;
        }
        Ok(())
    }
}

// --- the merge --------------------------------------------------------------------------

enum Source {
    File(FileSource),
    Memory(MemorySource),
}

impl Source {
    fn advance(&mut self) -> StorageResult<bool> {
        match self {
            Self::File(file) => file.advance(),
            Self::Memory(memory) => Ok(memory.advance()),
        }
    }

    fn key(&self) -> &[u8] {
        match self {
            Self::File(file) => &file.key,
            Self::Memory(memory) => memory.key(),
        }
    }

    fn emit_current(&mut self, out: &mut dyn SortedOut) -> StorageResult<()> {
        match self {
            Self::File(file) => file.emit_current(out),
            Self::Memory(memory) => memory.emit_current(out),
        }
    }
}

/// Merges sorted sources into `out`: a binary min-heap of source indices by (current key,
/// source index), so equal keys come oldest source first.
fn merge(mut sources: Vec<Source>, out: &mut dyn SortedOut) -> StorageResult<()> {
    let mut heap = Vec::with_capacity(sources.len());
    for (index, source) in sources.iter_mut().enumerate() {
        if source.advance()? {
            heap.push(index);
        }
    }
    // Every index in the heap names a source: `get` never misses.
    fn key(sources: &[Source], i: usize) -> Option<&[u8]> {
        sources.get(i).map(Source::key)
    }
    let less = |sources: &[Source], a: usize, b: usize| (key(sources, a), a) < (key(sources, b), b);
    for start in (0..heap.len() / 2).rev() {
        sift_down(&mut heap, start, &|a, b| less(&sources, a, b));
    }
    while let Some(&top) = heap.first() {
        let source =
            sources.get_mut(top).ok_or_else(|| StorageError("import sort: a merge lost a run".into()))?;
        source.emit_current(out)?;
        if !source.advance()? {
            heap.swap_remove(0);
        }
        sift_down(&mut heap, 0, &|a, b| less(&sources, a, b));
    }
    Ok(())
}

fn sift_down(heap: &mut [usize], mut at: usize, less: &dyn Fn(usize, usize) -> bool) {
    loop {
        let mut smallest = at;
        for child in [2 * at + 1, 2 * at + 2] {
            if let (Some(&candidate), Some(&current)) = (heap.get(child), heap.get(smallest)) {
                if less(candidate, current) {
                    smallest = child;
                }
            }
        }
        if smallest == at {
            return;
        }
        heap.swap(at, smallest);
        at = smallest;
    }
}

// --- hashing ----------------------------------------------------------------------------

/// The Fx hash (rustc's): a multiply and rotate per 8 bytes. The keys are index keys of
/// the import's own input, hashed by an offline tool: no flooding to defend against, and
/// SipHash would cost more than the table lookup.
#[derive(Default)]
struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            for (to, from) in word.iter_mut().zip(rest) {
                *to = *from;
            }
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    /// Mixed (splitmix64's finalizer): the table takes its bucket from the low bits, which
    /// after a multiply depend only on the input's low bits (the table byte and the start
    /// of the attribute name, the same for every key of an index).
    fn finish(&self) -> u64 {
        let mut h = self.hash;
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^ (h >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Keys and values, in the order a sort emitted them or a test put them.
    type Keys = Vec<(Vec<u8>, Vec<u8>)>;

    /// Collects what a sort emits, as full keys.
    #[derive(Default)]
    struct Collected {
        keys: Vec<(Vec<u8>, Vec<u8>)>,
        prefix: Vec<u8>,
        expected_postings: u32,
    }

    impl SortedOut for Collected {
        fn pair(&mut self, key: &[u8], value: &[u8]) -> StorageResult<()> {
            assert_eq!(self.expected_postings, 0);
            self.keys.push((key.to_vec(), value.to_vec()));
            Ok(())
        }
        fn postings(&mut self, prefix: &[u8], count: u32) -> StorageResult<()> {
            assert_eq!(self.expected_postings, 0);
            assert!(count > 0);
            self.prefix = prefix.to_vec();
            self.expected_postings = count;
            Ok(())
        }
        fn posting(&mut self, id: [u8; 8]) -> StorageResult<()> {
            self.expected_postings -= 1;
            let mut key = self.prefix.clone();
            key.extend_from_slice(&id);
            self.keys.push((key, Vec::new()));
            Ok(())
        }
    }

    fn posting(table: Table, attr: &str, value: &str, id: u64) -> Vec<u8> {
        let mut key = vec![table as u8];
        key.extend_from_slice(attr.as_bytes());
        key.push(0);
        key.extend_from_slice(value.as_bytes());
        key.push(0);
        key.extend_from_slice(&id.to_be_bytes());
        key
    }

    /// Keys like an import's: per entry, shared and unique postings and a DN pair, ids
    /// counting up; a few metadata pairs at the end.
    fn import_like(entries: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for id in 1..=entries {
            out.push((posting(Table::Eq, "objectclass", "person", id), Vec::new()));
            out.push((posting(Table::Eq, "uid", &format!("user{:05}", (id * 7919) % 10007), id), Vec::new()));
            out.push((posting(Table::Sub, "cn", &format!("g{}", id % 13), id), Vec::new()));
            let mut child = vec![Table::Children as u8];
            child.extend_from_slice(&(id % 3).to_be_bytes());
            child.extend_from_slice(&id.to_be_bytes());
            out.push((child, Vec::new()));
            let mut dn = vec![Table::Dn as u8];
            dn.extend_from_slice(format!("uid=u{}", (id * 31) % 1009).as_bytes());
            out.push((dn, id.to_be_bytes().to_vec()));
        }
        out.push((b"Mnext_seq".to_vec(), b"1".to_vec()));
        out.push((b"Mcsn_max".to_vec(), b"2".to_vec()));
        out
    }

    /// What redb would hold after the same puts, in its order.
    fn expected(puts: &[(Vec<u8>, Vec<u8>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        puts.iter().cloned().collect::<BTreeMap<_, _>>().into_iter().collect()
    }

    fn sorted_by(puts: &[(Vec<u8>, Vec<u8>)], budget_bytes: usize) -> (Keys, usize) {
        let dir = tempfile::tempdir().unwrap();
        let mut sorter = SortedKeys::new(dir.path(), "shard-000", budget_bytes);
        for (key, value) in puts {
            sorter.put(key, value).unwrap();
        }
        let runs = sorter.runs_written();
        let mut out = Collected::default();
        sorter.finish(&mut out).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "run files left behind");
        (out.keys, runs)
    }

    #[test]
    fn keys_come_out_in_key_order_from_memory_alone() {
        let puts = import_like(2000);
        let (keys, runs) = sorted_by(&puts, usize::MAX);
        assert_eq!(runs, 0);
        // The DN pairs repeat names under different ids: the last put wins, as in redb.
        assert_eq!(dedup_last(keys), expected(&puts));
    }

    #[test]
    fn keys_come_out_in_key_order_over_many_spilled_runs() {
        let puts = import_like(20_000);
        // Small enough for far more than RUNS_MAX runs: intermediate merges happen too.
        let (keys, runs) = sorted_by(&puts, 8 * 1024);
        assert!(runs > 2 * RUNS_MAX, "{runs} runs");
        assert_eq!(dedup_last(keys), expected(&puts));
    }

    #[test]
    fn postings_that_arrive_out_of_order_are_sorted() {
        let puts: Vec<_> =
            [5u64, 3, 9, 1].iter().map(|&id| (posting(Table::Eq, "cn", "a", id), Vec::new())).collect();
        let (keys, _) = sorted_by(&puts, usize::MAX);
        assert_eq!(keys, expected(&puts));
    }

    /// Equal keys come out in put order (consecutive); keeps the last of each, as redb would.
    fn dedup_last(keys: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for (key, value) in keys {
            match out.last_mut() {
                Some(last) if last.0 == key => last.1 = value,
                _ => out.push((key, value)),
            }
        }
        for pair in out.windows(2) {
            assert!(pair[0].0 < pair[1].0, "out of order: {:?} then {:?}", pair[0].0, pair[1].0);
        }
        out
    }
}
