//! The start cache: what a clean stop leaves in the data directory so that the next start
//! need not read every shard file before it answers.
//!
//! A start used to read each shard whole, three times over: redb's integrity check (every
//! page against its checksum), the fill of the equality Bloom filters and the gram table
//! (every posting and every entry), and the scan for container records and entry counts
//! (every entry again). At one million entries that kept a cold start from answering for
//! 23 to 52 s; at ten million it would be minutes (docs/BENCHMARKS.md, "Large directories").
//!
//! A clean stop knows all of it already: the filters, the gram table, the skeleton's
//! container records and each shard's entry count are in memory, and every shard was just
//! checkpointed. [`save`] writes them to `start-cache` after the last thread holding a shard
//! has ended, with each shard file's identity as the stop left it (device, inode, size,
//! modification and change times, of the `.redb` file and its write log). The next start
//! ([`take`]) uses them only when every file is still exactly that one and the settings the
//! structures depend on are unchanged; then it skips the integrity check too, since nothing
//! has written the files since this server closed them (docs/DECISIONS.md, "Every start
//! checks each shard file"). Anything else (a crash, an offline tool that opened a shard for
//! writing, a restored backup, another build, another index or schema) and the start reads
//! everything, as before.
//!
//! The file is removed, durably, as it is read, before any shard is opened for writing: it
//! describes the directory at one instant, and only a start that follows that stop may use
//! it. A power cut after that can't bring it back to describe files changed since.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use ferrodir_shard::storage::EngineKind;
use ferrodir_shard::{EntryId, EqBloom, GramShards, Skeleton};

use crate::config::Config;

/// The file's name in the data directory.
pub const FILE_NAME: &str = "start-cache";
const MAGIC: &[u8; 16] = b"ferrodir-start\0\x01";

/// What [`take`] read back: used by the start in place of reading the shards.
#[derive(Debug)]
pub struct StartCache {
    /// Entries per shard at the stop.
    pub entry_counts: Vec<u64>,
    /// The skeleton's container records `(id, parent, rdn, rdn_norm)` at the stop.
    pub containers: Vec<(EntryId, EntryId, String, String)>,
    blooms: Vec<Vec<u64>>,
    gram_cells: Vec<u64>,
    gram_overflowed: bool,
}

impl StartCache {
    /// Loads the filters and the gram table (then enabled, as after a fill). False when
    /// they don't fit the structures (another size): the caller fills them instead.
    pub fn load_filters(&self, blooms: &[std::sync::Arc<EqBloom>], grams: &GramShards) -> bool {
        if blooms.len() != self.blooms.len() {
            return false;
        }
        let fits = blooms.iter().zip(&self.blooms).all(|(bloom, bits)| bloom.bits().len() == bits.len());
        if !fits || !grams.load_cells(&self.gram_cells, self.gram_overflowed) {
            return false;
        }
        for (bloom, bits) in blooms.iter().zip(&self.blooms) {
            bloom.load_bits(bits);
        }
        grams.enable();
        true
    }

    /// The skeleton the stop had.
    pub fn skeleton(&self) -> Skeleton {
        Skeleton::build(1, self.containers.iter().cloned()).0
    }
}

/// What [`save`] writes, gathered once every shard has stopped.
pub struct Stopped<'a> {
    pub blooms: &'a [std::sync::Arc<EqBloom>],
    pub grams: &'a GramShards,
    pub skeleton: &'a Skeleton,
    pub entry_counts: Vec<u64>,
}

/// A digest of what the saved structures depend on besides the files: the build (its
/// version, and where its filters and gram table put a few fixed keys), the
/// shard count and engine, the index directives (which postings exist, which attributes
/// have wide grams), the schema files' text (how values normalise) and the uniqueness rules
/// (a start checks them against the data unless nothing changed).
pub fn digest(config: &Config, shards: usize, kind: EngineKind) -> u64 {
    let mut hash = Fnv::default();
    hash.add(env!("CARGO_PKG_VERSION").as_bytes());
    // A build with the same version but another filter or table hashing (a developer's)
    // must not read these bits back.
    for word in EqBloom::layout_fingerprint().into_iter().chain(GramShards::layout_fingerprint()) {
        hash.add(&word.to_le_bytes());
    }
    hash.add(&(shards as u64).to_le_bytes());
    hash.add(kind.name().as_bytes());
    for directive in config.index_directives() {
        hash.add(directive.as_bytes());
        hash.add(b"\n");
    }
    for path in &config.schema_files {
        hash.add(path.as_os_str().as_encoded_bytes());
        // An unreadable schema file stops the start anyway (store::load_schema).
        hash.add(&std::fs::read(path).unwrap_or_default());
    }
    hash.add(format!("{:?}", config.unique).as_bytes());
    hash.0
}

/// Reads and removes the start cache of `data_dir`: Some only if it was written by a clean
/// stop of this directory, with `digest`, and no shard file has changed since. Says why at
/// info level when it is there but can't be used.
pub fn take(data_dir: &Path, kind: EngineKind, shards: usize, digest: u64) -> Option<StartCache> {
    let path = data_dir.join(FILE_NAME);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot read the start cache; reading the shards instead");
            return None;
        }
    };
    if let Err(e) = remove_durably(&path) {
        // Kept, it could describe files that change from now on: don't use it.
        tracing::warn!(file = %path.display(), error = %e, "cannot remove the start cache; reading the shards instead");
        return None;
    }
    match decode(&bytes, data_dir, kind, shards, digest) {
        Ok(cache) => Some(cache),
        Err(why) => {
            tracing::info!(why, "the start cache does not fit this start; reading the shards instead");
            None
        }
    }
}

/// Writes the start cache of `data_dir` (atomically: a new file renamed into place, synced).
/// Call only after a clean stop: every shard checkpointed and every thread holding one ended.
pub fn save(data_dir: &Path, kind: EngineKind, digest: u64, stopped: &Stopped<'_>) -> anyhow::Result<()> {
    let shards = stopped.blooms.len();
    let mut out = Vec::with_capacity(shards * (1 << 20) + (4 << 20));
    out.extend_from_slice(MAGIC);
    put_u64(&mut out, digest);
    put_u64(&mut out, shards as u64);
    for shard in 0..shards {
        for identity in identities(data_dir, kind, shard)? {
            Identity::encode(&identity, &mut out);
        }
        put_u64(&mut out, stopped.entry_counts.get(shard).copied().unwrap_or(0));
    }
    for bloom in stopped.blooms {
        put_words(&mut out, &bloom.bits());
    }
    let (cells, overflowed) = stopped.grams.cells();
    put_words(&mut out, &cells);
    out.push(u8::from(overflowed));
    let nodes: Vec<_> = stopped.skeleton.nodes().collect();
    put_u64(&mut out, nodes.len() as u64);
    for node in nodes {
        put_u64(&mut out, node.id.0);
        put_u64(&mut out, node.parent.0);
        put_text(&mut out, &node.rdn);
        put_text(&mut out, &node.rdn_norm);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());

    let path = data_dir.join(FILE_NAME);
    let temporary = data_dir.join(format!("{FILE_NAME}.new"));
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)
            .with_context(|| format!("cannot create {}", temporary.display()))?;
        file.write_all(&out).with_context(|| format!("cannot write {}", temporary.display()))?;
        file.sync_all().with_context(|| format!("cannot sync {}", temporary.display()))?;
    }
    std::fs::rename(&temporary, &path).with_context(|| format!("cannot rename into {}", path.display()))?;
    sync_dir(data_dir)?;
    Ok(())
}

fn remove_durably(path: &Path) -> std::io::Result<()> {
    std::fs::remove_file(path)?;
    match path.parent() {
        Some(dir) => sync_dir(dir).map_err(std::io::Error::other),
        None => Ok(()),
    }
}

fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync the directory {}", dir.display()))
}

/// A file as the filesystem names and last changed it. The change time (ctime) moves with
/// every write and every metadata change and can't be set back from user space, so a file
/// with the same identity has not been written since it was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Identity {
    /// None for a file that isn't there (a write log not made yet).
    fn of(path: &Path) -> anyhow::Result<Option<Self>> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot stat {}", path.display())),
        };
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Ok(Some(Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }))
    }

    fn encode(this: &Option<Self>, out: &mut Vec<u8>) {
        match this {
            None => out.push(0),
            Some(id) => {
                out.push(1);
                put_u64(out, id.dev);
                put_u64(out, id.ino);
                put_u64(out, id.size);
                out.extend_from_slice(&id.mtime_ns.to_le_bytes());
                out.extend_from_slice(&id.ctime_ns.to_le_bytes());
            }
        }
    }

    fn decode(input: &mut Reader<'_>) -> Result<Option<Self>, &'static str> {
        match input.u8()? {
            0 => Ok(None),
            1 => Ok(Some(Self {
                dev: input.u64()?,
                ino: input.u64()?,
                size: input.u64()?,
                mtime_ns: input.i128()?,
                ctime_ns: input.i128()?,
            })),
            _ => Err("a file identity is malformed"),
        }
    }
}

/// The files of shard `shard` whose identity must not change: the shard file and its write
/// log.
fn shard_files(data_dir: &Path, kind: EngineKind, shard: usize) -> [PathBuf; 2] {
    let file = kind.shard_path(data_dir, shard);
    let log = ferrodir_shard::storage::log_path(&file);
    [file, log]
}

fn identities(data_dir: &Path, kind: EngineKind, shard: usize) -> anyhow::Result<[Option<Identity>; 2]> {
    let [file, log] = shard_files(data_dir, kind, shard);
    Ok([Identity::of(&file)?, Identity::of(&log)?])
}

fn decode(
    bytes: &[u8],
    data_dir: &Path,
    kind: EngineKind,
    shards: usize,
    digest: u64,
) -> Result<StartCache, &'static str> {
    if kind != EngineKind::Redb {
        return Err("only redb shard files are cached");
    }
    let (body, crc) = bytes.split_at_checked(bytes.len().saturating_sub(4)).ok_or("the file is truncated")?;
    let crc: [u8; 4] = crc.try_into().map_err(|_| "the file is truncated")?;
    if bytes.len() < MAGIC.len() + 4 || crc32fast::hash(body) != u32::from_le_bytes(crc) {
        return Err("the file fails its checksum");
    }
    let mut input = Reader(body);
    if input.take(MAGIC.len())? != MAGIC {
        return Err("the file is not a start cache of this version");
    }
    if input.u64()? != digest {
        return Err("the build, the shard count, the indices, the schema or the uniqueness rules changed since the stop");
    }
    if input.u64()? != shards as u64 {
        return Err("the shard count changed");
    }
    let mut entry_counts = Vec::with_capacity(shards);
    for shard in 0..shards {
        let saved = [Identity::decode(&mut input)?, Identity::decode(&mut input)?];
        let now = identities(data_dir, kind, shard).map_err(|_| "a shard file can't be examined")?;
        if saved[0].is_none() || saved != now {
            return Err("a shard file changed since the stop");
        }
        entry_counts.push(input.u64()?);
    }
    let mut blooms = Vec::with_capacity(shards);
    for _ in 0..shards {
        blooms.push(input.words()?);
    }
    let gram_cells = input.words()?;
    let gram_overflowed = input.u8()? != 0;
    let count = input.u64()?;
    let mut containers = Vec::new();
    for _ in 0..count {
        let id = EntryId(input.u64()?);
        let parent = EntryId(input.u64()?);
        let rdn = input.text()?;
        let rdn_norm = input.text()?;
        containers.push((id, parent, rdn, rdn_norm));
    }
    if !input.0.is_empty() {
        return Err("the file has bytes after its end");
    }
    Ok(StartCache { entry_counts, containers, blooms, gram_cells, gram_overflowed })
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_words(out: &mut Vec<u8>, words: &[u64]) {
    put_u64(out, words.len() as u64);
    for word in words {
        put_u64(out, *word);
    }
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    put_u64(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

/// Bounds-checked reads from the file's bytes: a short or odd file is refused, never a panic.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        let (head, rest) = self.0.split_at_checked(n).ok_or("the file is truncated")?;
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, &'static str> {
        let bytes: [u8; 8] = self.take(8)?.try_into().map_err(|_| "the file is truncated")?;
        Ok(u64::from_le_bytes(bytes))
    }

    fn i128(&mut self) -> Result<i128, &'static str> {
        let bytes: [u8; 16] = self.take(16)?.try_into().map_err(|_| "the file is truncated")?;
        Ok(i128::from_le_bytes(bytes))
    }

    fn words(&mut self) -> Result<Vec<u64>, &'static str> {
        let count = usize::try_from(self.u64()?).map_err(|_| "a length is out of range")?;
        let bytes = self.take(count.checked_mul(8).ok_or("a length is out of range")?)?;
        Ok(bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect())
    }

    fn text(&mut self) -> Result<String, &'static str> {
        let len = usize::try_from(self.u64()?).map_err(|_| "a length is out of range")?;
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| "a name is not UTF-8")
    }
}

/// FNV-1a, 64 bits: a digest of settings, not a defence against anyone.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn add(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stopped_dir(dir: &Path, shards: usize) -> (Vec<std::sync::Arc<EqBloom>>, GramShards, Skeleton) {
        for shard in 0..shards {
            std::fs::write(EngineKind::Redb.shard_path(dir, shard), format!("shard {shard}")).unwrap();
        }
        let blooms: Vec<_> = (0..shards).map(|_| std::sync::Arc::new(EqBloom::new())).collect();
        blooms[1].insert(b"uid\0jdoe\0");
        let grams = GramShards::new(shards);
        grams.insert(0, b"Scn\0abc");
        let suffix = EntryId::new(0, 1);
        let people = EntryId::new(1, 2);
        let (skeleton, _) = Skeleton::build(
            1,
            [
                (suffix, EntryId::ROOT, "dc=example,dc=com".to_string(), "dc=example,dc=com".to_string()),
                (people, suffix, "ou=People".to_string(), "ou=people".to_string()),
            ],
        );
        (blooms, grams, skeleton)
    }

    fn save_in(dir: &Path, shards: usize, digest: u64) {
        let (blooms, grams, skeleton) = stopped_dir(dir, shards);
        let stopped =
            Stopped { blooms: &blooms, grams: &grams, skeleton: &skeleton, entry_counts: vec![5, 7] };
        save(dir, EngineKind::Redb, digest, &stopped).unwrap();
    }

    #[test]
    fn a_clean_stop_is_read_back_once() {
        let dir = tempfile::tempdir().unwrap();
        save_in(dir.path(), 2, 42);
        let cache = take(dir.path(), EngineKind::Redb, 2, 42).expect("the cache fits");
        assert_eq!(cache.entry_counts, vec![5, 7]);
        let skeleton = cache.skeleton();
        assert_eq!(skeleton.len(), 2);
        let people = skeleton.get(EntryId::new(1, 2)).expect("ou=People is a container");
        assert_eq!(&*people.dn, "ou=People,dc=example,dc=com");
        let blooms: Vec<_> = (0..2).map(|_| std::sync::Arc::new(EqBloom::new())).collect();
        let grams = GramShards::new(2);
        assert!(cache.load_filters(&blooms, &grams));
        assert!(blooms[1].may_contain(b"uid\0jdoe\0"));
        assert!(!blooms[0].may_contain(b"uid\0jdoe\0"));
        let (saved, _) = stopped_dir(dir.path(), 2).1.cells();
        assert_eq!(grams.cells().0, saved, "the gram table is the stop's");
        assert!(saved.iter().any(|cell| *cell != 0));
        assert!(!dir.path().join(FILE_NAME).exists(), "taken means removed");
        assert!(take(dir.path(), EngineKind::Redb, 2, 42).is_none());
    }

    #[test]
    fn a_shard_file_written_since_the_stop_voids_it() {
        let dir = tempfile::tempdir().unwrap();
        save_in(dir.path(), 2, 42);
        // The same size, other bytes: the change time moves.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(EngineKind::Redb.shard_path(dir.path(), 1), "shard X").unwrap();
        assert!(take(dir.path(), EngineKind::Redb, 2, 42).is_none());
        assert!(!dir.path().join(FILE_NAME).exists());
    }

    #[test]
    fn a_write_log_made_since_the_stop_voids_it() {
        let dir = tempfile::tempdir().unwrap();
        save_in(dir.path(), 2, 42);
        let log = ferrodir_shard::storage::log_path(&EngineKind::Redb.shard_path(dir.path(), 0));
        std::fs::write(log, "records").unwrap();
        assert!(take(dir.path(), EngineKind::Redb, 2, 42).is_none());
    }

    #[test]
    fn other_settings_or_another_shard_count_void_it() {
        let dir = tempfile::tempdir().unwrap();
        save_in(dir.path(), 2, 42);
        assert!(take(dir.path(), EngineKind::Redb, 2, 43).is_none());
        save_in(dir.path(), 2, 42);
        assert!(take(dir.path(), EngineKind::Redb, 3, 42).is_none());
        save_in(dir.path(), 2, 42);
        assert!(take(dir.path(), EngineKind::Sled, 2, 42).is_none());
    }

    #[test]
    fn the_digest_follows_the_settings_and_nothing_else() {
        let config = Config::default();
        let digest_of = |config: &Config, shards| digest(config, shards, EngineKind::Redb);
        assert_eq!(digest_of(&config, 2), digest_of(&Config::default(), 2));
        assert_ne!(digest_of(&config, 2), digest_of(&config, 3));
        assert_ne!(digest_of(&config, 2), digest(&config, 2, EngineKind::Sled));
        let mut indexed = Config::default();
        indexed.index.push("sn sub".into());
        assert_ne!(digest_of(&config, 2), digest_of(&indexed, 2));
    }

    #[test]
    fn a_damaged_or_cut_file_is_refused_without_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        save_in(dir.path(), 2, 42);
        let path = dir.path().join(FILE_NAME);
        let whole = std::fs::read(&path).unwrap();
        for cut in [0, 3, 16, 40, whole.len() / 2, whole.len() - 1] {
            std::fs::write(&path, &whole[..cut]).unwrap();
            assert!(take(dir.path(), EngineKind::Redb, 2, 42).is_none(), "cut at {cut}");
        }
        let mut flipped = whole.clone();
        flipped[whole.len() / 3] ^= 0x40;
        std::fs::write(&path, &flipped).unwrap();
        assert!(take(dir.path(), EngineKind::Redb, 2, 42).is_none());
    }
}
