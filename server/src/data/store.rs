//! Opening a data directory: manifest checks, the shards' engines, and the skeleton read
//! back from the shards' container records.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use ferrodir_shard::offline::Stored;
use ferrodir_shard::{EntryId, EntryRecord, ShardCore, ShardInfo};

use ferrodir_proto::schema::Schema;
use ferrodir_shard::{EntryCache, EqBloom, GramShards, Hub, IndexConfig, RuleTable};

use ferrodir_shard::storage::Mutation;
use ferrodir_shard::storage::{
    EngineKind, KvEngine, KvSnapshot, OpenError, StorageError, StorageOptions, StorageResult,
};
use ferrodir_shard::{indexes_ready_everywhere, mark_indexes_ready, Skeleton, FLAG_CONTAINER};

use crate::config::Config;
use crate::data::manifest::Manifest;
use crate::data::startcache;

pub struct Store {
    pub manifest: Manifest,
    pub engines: Vec<Arc<dyn KvEngine>>,
    /// The configured indices, those complete on every shard searchable.
    pub indexes: Arc<IndexConfig>,
    /// Indices marked on some shard but no longer configured: their keys are left over,
    /// and serving clears them (serve/indexing.rs).
    pub stale_indexes: std::collections::BTreeSet<(String, ferrodir_shard::IndexKind)>,
    pub schema: Arc<Schema>,
    pub rules: Arc<RuleTable>,
    /// Per shard: the equality-key Bloom filter, rebuilt from the index at every open.
    pub blooms: Vec<Arc<EqBloom>>,
    /// Which shards may hold each substring gram, for all shards (`gramsummary`); filled
    /// with the Bloom filters.
    pub grams: Arc<GramShards>,
    /// Per shard: its entry cache, shared by its owner and every replica (`shard::entrycache`);
    /// sized by `[limits] cache_bytes` when serving, empty for tools.
    pub entry_caches: Vec<Arc<EntryCache>>,
    /// What the shards share about writes: the CSN clock (its CSNs carry `server_id`), the
    /// watermark, the change feed (`shard::write::watermark`). One per open directory, so
    /// that two in one process (the in-process tests) keep their clocks apart.
    pub hub: Arc<Hub>,
    /// The settings its redb files were opened with; every other redb file of the directory
    /// (the coordinator's intent log, a backup's copies) opens with them too.
    pub storage: StorageOptions,
    /// Whether the directory was created by this open.
    pub created: bool,
    /// Shards found damaged (index, what is wrong); only [`Store::open_salvaging`] opens
    /// with any, each as an empty shard that refuses writes.
    pub damaged: Damage,
    /// What the last clean stop saved, when this serving open may use it: the start takes
    /// it (serve/runtime.rs `prepare`) and reads no shard whole.
    pub start_cache: Option<startcache::StartCache>,
}

/// What one shard's start scan found (`Store::read_all`).
struct ShardScan {
    containers: Vec<(EntryId, EntryRecord)>,
    entries: u64,
}

/// Whether opening existing shard files checks every page against its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// Every file (docs/DECISIONS.md: "Every start checks each shard file").
    Every,
    /// None: each file is provably the one this server closed cleanly (startcache.rs).
    Unchanged,
}

/// Creates `dir` (and any missing parent) mode 0700 whatever the umask: the shard files
/// inside hold password hashes. An existing directory keeps its mode
/// ([`warn_if_others_may_read`] says when that is too open).
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    // DirBuilder's mode is still masked by the umask; 0700 is what is meant.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot set the mode of {}", dir.display()))
}

/// A warning at start when the group or others have any access to the data directory
/// (made before 0700 was the rule, or opened up by hand): its files hold password hashes.
pub fn warn_if_others_may_read(dir: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(metadata) = std::fs::metadata(dir) {
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                data_dir = %dir.display(),
                mode = format!("{mode:o}"),
                "the data directory is open to its group or others, and its files hold password hashes: chmod 700 it"
            );
        }
    }
}

/// The engine named in the config, refusing sled unless its weaker promise is accepted.
pub fn engine_kind(config: &Config) -> anyhow::Result<EngineKind> {
    let kind = EngineKind::parse(&config.engine)
        .ok_or_else(|| anyhow::anyhow!("unknown engine {:?}: use \"redb\" or \"sled\"", config.engine))?;
    if config.durability != kind.durability_promise() {
        anyhow::bail!(
            "engine {} gives durability {:?}, but the config asks for {:?}; set durability = {:?} to accept it",
            kind.name(),
            kind.durability_promise(),
            config.durability,
            kind.durability_promise()
        );
    }
    if kind == EngineKind::Sled {
        tracing::warn!(
            "engine sled: acknowledged writes survive a process crash but NOT a power loss (no fsync)"
        );
    }
    Ok(kind)
}

impl Store {
    /// Opens `data_dir`, creating it if it has no manifest. Refuses if any shard is damaged
    /// (missing, empty, truncated, failing its checksums), naming each and the way to recover.
    pub fn open(config: &Config, data_dir: &Path) -> anyhow::Result<Self> {
        Self::open_with(config, data_dir, false, false)
    }

    /// [`Store::open`] for `ferrodir serve`: `[limits] cache_bytes` is split between redb's
    /// page caches and the entry caches (a tool's open gives it all to redb).
    pub fn open_serving(config: &Config, data_dir: &Path) -> anyhow::Result<Self> {
        Self::open_with(config, data_dir, false, true)
    }

    /// Opens `data_dir` even with damaged shards, for `ferrodir verify` and `export`: each
    /// stands in as an empty shard that refuses writes, and is listed in `damaged`.
    pub fn open_salvaging(config: &Config, data_dir: &Path) -> anyhow::Result<Self> {
        Self::open_with(config, data_dir, true, false)
    }

    fn open_with(config: &Config, data_dir: &Path, salvage: bool, serving: bool) -> anyhow::Result<Self> {
        let kind = engine_kind(config)?;
        create_private_dir(data_dir)?;
        let wanted = (config.shards > 0).then_some(config.shards);
        let (manifest, created) = match Manifest::load(data_dir)? {
            Some(m) => {
                m.check(data_dir, wanted, kind.name())?;
                (m, false)
            }
            None if salvage => anyhow::bail!("{} is not a ferrodir data directory", data_dir.display()),
            None => {
                let m = Manifest::current(config.shard_count(), kind.name());
                m.store(data_dir)?;
                (m, true)
            }
        };
        let storage = storage_options(config, manifest.shards, serving);
        // A serving start after a clean stop, with every shard file as that stop left it,
        // reads what it needs from the start cache instead of the shards (startcache.rs).
        let start_cache = if serving && !created {
            startcache::take(
                data_dir,
                kind,
                manifest.shards,
                startcache::digest(config, manifest.shards, kind),
            )
        } else {
            None
        };
        let check = if start_cache.is_some() { Check::Unchanged } else { Check::Every };
        let (engines, damaged) =
            open_engines(kind, data_dir, manifest.shards, created, salvage, check, &storage)?;
        let schema = Arc::new(load_schema(config)?);
        let rules = Arc::new(RuleTable::from_schema(&schema));
        let mut indexes = IndexConfig::from_directives(&config.index_directives(), &rules)?;
        if created {
            mark_indexes_ready(&engines, &indexes)?;
        }
        let ready = indexes_ready_everywhere(&engines, &indexes)?;
        let configured = indexes.configured();
        for (attr, kind) in &configured {
            if !ready.contains(&(attr.clone(), *kind)) {
                tracing::warn!(
                    attr,
                    kind = kind.name(),
                    "index not built yet: searches won't use it until it is built (online once the server \
                     serves, or offline by `ferrodir reindex`)"
                );
            }
        }
        let mut stale_indexes = std::collections::BTreeSet::new();
        for engine in &engines {
            let marked = ferrodir_shard::indexes_marked(engine.snapshot()?.as_ref())?;
            stale_indexes.extend(marked.into_iter().filter(|index| !configured.contains(index)));
        }
        indexes.set_searchable(ready);
        // Filled when the server starts (`read_all`, or the start cache), after any initial load.
        let blooms = engines.iter().map(|_| Arc::new(EqBloom::new())).collect();
        let grams = Arc::new(GramShards::new(engines.len()));
        let per_shard = if serving { config.limits.entry_cache_bytes_per_shard(manifest.shards) } else { 0 };
        let entry_caches =
            engines.iter().map(|_| Arc::new(EntryCache::new(per_shard, rules.clone()))).collect();
        let hub = Hub::new(manifest.shards, config.server_id);
        hub.set_multi_provider(config.multi_provider);
        Ok(Self {
            hub,
            manifest,
            engines,
            indexes: Arc::new(indexes),
            stale_indexes,
            schema,
            rules,
            blooms,
            grams,
            entry_caches,
            storage,
            created,
            damaged,
            start_cache,
        })
    }

    pub fn shard_info(&self, index: usize, _config: &Config) -> ShardInfo {
        ShardInfo {
            index,
            count: self.engines.len(),
            entry_cache: self.entry_caches.get(index).cloned(),
            indexes: self.indexes.clone(),
            schema: self.schema.clone(),
            rules: self.rules.clone(),
            bloom: self.blooms[index].clone(),
            grams: self.grams.clone(),
            hub: self.hub.clone(),
        }
    }

    /// What a start without a start cache reads, in one pass over each shard (one thread
    /// per shard): its Bloom filter from the equality postings, its part of the gram table
    /// from the substring postings and (with a substring index) every entry's values, its
    /// container records and its entry count from the same decode of every entry. Then the
    /// container flags of entries with no children left on any shard are cleared (a crash
    /// between a last child's delete and its parent's demotion leaves such a flag behind),
    /// and the skeleton is built from the rest. Runs before serving, while nothing else
    /// uses the shards. Returns the skeleton, the counts and how many flags were cleared.
    pub fn read_all(&self, config: &Config) -> anyhow::Result<(Skeleton, Vec<u64>, usize)> {
        let wide_grams = GramShards::fill_reads_entries(&self.indexes);
        let scans: Vec<anyhow::Result<ShardScan>> = std::thread::scope(|scope| {
            let scanning: Vec<_> = (0..self.engines.len())
                .map(|index| scope.spawn(move || self.scan_shard(index, wide_grams)))
                .collect();
            scanning
                .into_iter()
                .enumerate()
                .map(|(index, handle)| {
                    handle
                        .join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("shard {index}: its start scan panicked")))
                })
                .collect()
        });
        let scans = scans.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        self.grams.enable();
        self.settle(config, scans)
    }

    /// One shard's part of [`Store::read_all`].
    fn scan_shard(&self, index: usize, wide_grams: bool) -> anyhow::Result<ShardScan> {
        let context = || format!("shard {index}");
        let snapshot = self.engines[index].snapshot().with_context(context)?;
        self.grams.fill_grams(index, snapshot.as_ref()).with_context(context)?;
        let bloom = &self.blooms[index];
        ferrodir_shard::offline::each_eq_key(snapshot.as_ref(), &mut |key| {
            // The same key staging records (`eqkey::bloom_key`).
            if let Some(prefix) = ferrodir_shard::bloom_key(key) {
                bloom.insert(prefix);
            }
        })
        .with_context(context)?;
        let mut scan = ShardScan { containers: Vec::new(), entries: 0 };
        let mut failure = None;
        ferrodir_shard::offline::each_entry(snapshot.as_ref(), &mut |stored| match stored {
            Stored::Entry(id, record) => {
                scan.entries += 1;
                if wide_grams {
                    self.grams.insert_entry(index, &self.indexes, &self.rules, &record.entry);
                }
                if record.is_container() {
                    scan.containers.push((id, record));
                }
                true
            }
            Stored::Undecodable(id, e) => {
                self.grams.stop_pruning();
                failure = Some(format!("entry {id:?}: {e}"));
                false
            }
            Stored::BadKey(_) => true,
        })
        .with_context(context)?;
        match failure {
            Some(what) => Err(anyhow::anyhow!("shard {index}: {what}")),
            None => Ok(scan),
        }
    }

    /// Clears the container flag of the scanned containers without children on any shard,
    /// and builds the skeleton from the others.
    fn settle(&self, config: &Config, scans: Vec<ShardScan>) -> anyhow::Result<(Skeleton, Vec<u64>, usize)> {
        let cores: Vec<ShardCore> = (0..self.engines.len())
            .map(|i| ShardCore::new(self.shard_info(i, config), self.engines[i].clone()))
            .collect::<Result<_, _>>()?;
        let snapshots: Vec<_> = cores.iter().map(|c| c.snapshot()).collect();
        let mut records = Vec::new();
        let mut counts = Vec::with_capacity(self.engines.len());
        let mut settled = 0;
        for (index, scan) in scans.into_iter().enumerate() {
            counts.push(scan.entries);
            let mut batch = Vec::new();
            for (id, mut record) in scan.containers {
                let mut has_children = false;
                for (other, snapshot) in cores.iter().zip(&snapshots) {
                    has_children |= other.has_children(snapshot.as_ref(), id)?;
                }
                if has_children {
                    records.push((id, record.parent, record.rdn, record.rdn_norm));
                } else {
                    record.flags &= !FLAG_CONTAINER;
                    batch.push(ferrodir_shard::offline::put_entry(id, &record));
                }
            }
            if !batch.is_empty() {
                settled += batch.len();
                self.engines[index].commit(&batch).with_context(|| format!("shard {index}"))?;
            }
        }
        let (skeleton, orphans) = Skeleton::build(1, records);
        if !orphans.is_empty() {
            tracing::warn!(
                count = orphans.len(),
                "containers whose parent chain is broken; run ferrodir verify"
            );
        }
        Ok((skeleton, counts, settled))
    }
}

/// The settings the redb files of `config`'s data directory open with: redb's page cache per
/// file out of the one budget (`Limits::storage_cache_bytes_per_file`, for `shards` files,
/// `serving` or a tool), the write log's size, and the crash-test modes, which only a build
/// with the `fault-injection` feature reads from `[testing]` (Config::check).
pub fn storage_options(config: &Config, shards: usize, serving: bool) -> StorageOptions {
    #[allow(unused_mut)]
    let mut options = StorageOptions {
        cache_bytes: config.limits.storage_cache_bytes_per_file(shards, serving),
        write_log_bytes: config.limits.write_log_bytes,
        ..StorageOptions::default()
    };
    #[cfg(feature = "fault-injection")]
    if let Some(testing) = &config.testing {
        options.test_modes = ferrodir_shard::storage::TestModes {
            simulate_power_cut: testing.simulate_power_cut,
            ack_before_sync: testing.ack_before_sync,
        };
        tracing::warn!(?testing, "crash-test fault injection is on: not for real data");
    }
    options
}

/// Shards found damaged: (index, what is wrong).
pub type Damage = Vec<(usize, String)>;

/// Opens every shard's engine. A new directory's shards are created; an existing one's must
/// be there and intact (`open_existing`), or, when salvaging, are replaced by empty ones.
fn open_engines(
    kind: EngineKind,
    data_dir: &Path,
    shards: usize,
    created: bool,
    salvage: bool,
    check: Check,
    options: &StorageOptions,
) -> anyhow::Result<(Vec<Arc<dyn KvEngine>>, Damage)> {
    let mut engines: Vec<Arc<dyn KvEngine>> = Vec::with_capacity(shards);
    let mut damaged = Vec::new();
    let open_one = |shard: usize| {
        if created || check == Check::Unchanged {
            kind.open(data_dir, shard, options).map_err(OpenError::Other)
        } else {
            kind.open_existing(data_dir, shard, options)
        }
    };
    // The check reads each file whole: one thread per shard, so a start is as long as its
    // largest shard's check rather than the sum (docs/DECISIONS.md).
    let opened: Vec<_> = std::thread::scope(|scope| {
        let opening: Vec<_> = (0..shards).map(|shard| scope.spawn(move || open_one(shard))).collect();
        opening
            .into_iter()
            .map(|handle| {
                handle.join().unwrap_or_else(|_| Err(OpenError::Damaged("opening the shard panicked".into())))
            })
            .collect()
    });
    for (shard, opened) in opened.into_iter().enumerate() {
        match opened {
            Ok(engine) => engines.push(Arc::from(engine)),
            Err(OpenError::Damaged(what)) => {
                let path = kind.shard_path(data_dir, shard);
                tracing::error!(shard, file = %path.display(), "shard is damaged: {what}");
                damaged.push((shard, format!("{} is damaged: {what}", path.display())));
                engines.push(Arc::new(Unreadable { shard }));
            }
            Err(e) => anyhow::bail!(
                "cannot open shard {shard} in {}: {e} (if another ferrodir holds it, stop that one first)",
                data_dir.display()
            ),
        }
    }
    if !damaged.is_empty() && !salvage {
        anyhow::bail!("{}", damage_report(data_dir, &damaged));
    }
    Ok((engines, damaged))
}

/// What a refused start says: every damaged shard, and the way back to a directory that
/// can be served. The server never serves a damaged shard: it might answer with entries
/// missing, or with wrong ones.
fn damage_report(data_dir: &Path, damaged: &Damage) -> String {
    let dir = data_dir.display();
    let mut out = String::new();
    for (shard, what) in damaged {
        out.push_str(&format!("shard {shard}: {what}\n"));
    }
    out.push_str(&format!(
        "ferrodir will not serve a damaged shard. To recover (with the same --config as the server):\n\
         1. ferrodir verify --data-dir {dir}    lists every problem\n\
         2. ferrodir export --data-dir {dir} > saved.ldif    saves every entry that can still be read \
         (the damaged shards' entries are not in it: take them from a backup)\n\
         3. ferrodir import --data-dir NEW-DIR saved.ldif, then serve from NEW-DIR"
    ));
    out
}

/// A damaged shard's stand-in when salvaging: no entries, and no writes.
struct Unreadable {
    shard: usize,
}

impl KvEngine for Unreadable {
    fn snapshot(&self) -> StorageResult<Box<dyn KvSnapshot>> {
        Ok(Box::new(Unreadable { shard: self.shard }))
    }

    fn commit(&self, _: &[Mutation]) -> StorageResult<()> {
        Err(StorageError(format!("shard {} is damaged and takes no writes", self.shard)))
    }
}

impl KvSnapshot for Unreadable {
    fn get(&self, _: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        Ok(None)
    }

    fn scan_prefix(&self, _: &[u8], _: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> StorageResult<()> {
        Ok(())
    }
}

/// The standard schemas plus the config's extra files.
pub fn load_schema(config: &Config) -> anyhow::Result<Schema> {
    let mut schema = Schema::standard();
    for path in &config.schema_files {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read schema {}", path.display()))?;
        schema.load_openldap_schema(&text).with_context(|| format!("schema file {}", path.display()))?;
    }
    Ok(schema)
}
