//! `ferrodir backup` and `ferrodir restore`.
//!
//! A backup is a data directory of its own, written from a [`Cut`]: every shard copied key
//! by key from its view into a fresh engine of the same kind (committed in chunks, each
//! durable), the manifest, a fresh intent log (the cut falls between structural changes, so
//! it holds only the intents a disk error left pending, which the restored server recovers
//! at start like the original would) and, written last and synced, the completion marker
//! `ferrodir-backup.toml`. A backup without the marker was interrupted and is refused.
//!
//! Restore copies the backup's files into an empty data directory (the backup itself is
//! only read, so it may sit on read-only media), checks every shard holds as many keys as
//! the marker says, and the caller then runs `verify` on the result.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use ferrodir_router::IntentLog;
use ferrodir_shard::storage::{EngineKind, KvEngine, KvSnapshot, Mutation, StorageOptions};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::data::cut::Cut;
use crate::data::manifest::{self, Manifest, INTENT_LOG_FILE};

/// The completion marker's file name; its presence means the backup is whole.
pub const MARKER_FILE: &str = "ferrodir-backup.toml";
const MARKER_FORMAT_VERSION: u32 = 1;
/// Keys per commit while copying: bounds the memory a copy holds and the size of each
/// transaction, and still amortises each commit's fsync over many keys.
const CHUNK_KEYS_MAX: usize = 4096;
const CHUNK_BYTES_MAX: usize = 4 << 20;

/// What a finished backup records about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupMarker {
    pub format_version: u32,
    pub ferrodir_version: String,
    pub completed_unix_s: u64,
    pub shards: usize,
    pub engine: String,
    pub entries: u64,
    /// Every key of each shard (entries and index keys): restore checks its copy against it.
    pub keys_per_shard: Vec<u64>,
}

impl BackupMarker {
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join(MARKER_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
                "{} has no completion marker ({MARKER_FILE}): the backup did not finish, or this is \
                 not a backup; it cannot be restored",
                dir.display()
            ),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let marker: Self =
            toml::from_str(&text).map_err(|e| anyhow::anyhow!("bad marker {}: {e}", path.display()))?;
        if marker.format_version != MARKER_FORMAT_VERSION {
            anyhow::bail!(
                "{}: marker format {} is not known to this ferrodir",
                path.display(),
                marker.format_version
            );
        }
        Ok(marker)
    }
}

/// One shard's copy.
#[derive(Debug, Default, Clone, Copy)]
struct ShardCopy {
    keys: u64,
    entries: u64,
}

/// Writes a backup of `cut` into `to`, which must be absent or an empty directory; its redb
/// files open with `options`.
pub fn backup(
    cut: &Cut,
    manifest: &Manifest,
    kind: EngineKind,
    options: &StorageOptions,
    to: &Path,
) -> anyhow::Result<BackupMarker> {
    ensure_empty_target(to)?;
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    let copies = std::thread::scope(|scope| {
        let handles: Vec<_> = cut
            .views
            .iter()
            .enumerate()
            .map(|(index, view)| {
                scope.spawn(move || -> anyhow::Result<ShardCopy> {
                    let engine =
                        kind.open(to, index, options).map_err(|e| anyhow::anyhow!("shard {index}: {e}"))?;
                    copy_view(view.as_ref(), engine.as_ref())
                        .with_context(|| format!("copying shard {index}"))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().map_err(|_| anyhow::anyhow!("a backup thread panicked"))?)
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let log = IntentLog::open(&to.join(INTENT_LOG_FILE), options).map_err(|e| anyhow::anyhow!("{e}"))?;
    for intent in &cut.intents {
        log.record(intent).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    drop(log);
    manifest.store(to)?;
    sync_tree(to)?;
    let marker = BackupMarker {
        format_version: MARKER_FORMAT_VERSION,
        ferrodir_version: env!("CARGO_PKG_VERSION").to_string(),
        completed_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        shards: copies.len(),
        engine: kind.name().to_string(),
        entries: copies.iter().map(|c| c.entries).sum(),
        keys_per_shard: copies.iter().map(|c| c.keys).collect(),
    };
    write_durably(to, MARKER_FILE, toml::to_string(&marker)?.as_bytes())?;
    Ok(marker)
}

/// Copies every key of `view` into `engine`, in chunks.
fn copy_view(view: &dyn KvSnapshot, engine: &dyn KvEngine) -> anyhow::Result<ShardCopy> {
    let mut copied = ShardCopy::default();
    let mut chunk: Vec<Mutation> = Vec::with_capacity(CHUNK_KEYS_MAX);
    let mut chunk_bytes = 0;
    let mut failure = None;
    view.scan_prefix(&[], &mut |key, value| {
        copied.keys += 1;
        copied.entries += u64::from(ferrodir_shard::offline::is_entry_key(key));
        chunk_bytes += key.len() + value.len();
        chunk.push(Mutation { key: key.to_vec(), value: Some(value.to_vec()) });
        if chunk.len() >= CHUNK_KEYS_MAX || chunk_bytes >= CHUNK_BYTES_MAX {
            if let Err(e) = engine.commit(&chunk) {
                failure = Some(e);
                return false;
            }
            chunk.clear();
            chunk_bytes = 0;
        }
        true
    })?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    if !chunk.is_empty() {
        engine.commit(&chunk)?;
    }
    // The copy's shard file must stand alone: restore copies it without its write log.
    engine.checkpoint()?;
    Ok(copied)
}

/// Copies the backup in `from` into the data directory `to`. `to` must be absent or empty
/// unless `force`, which first removes the files of a data directory there (refusing while
/// a server holds it). The caller verifies the result. Redb files open with `options`.
pub fn restore(from: &Path, to: &Path, force: bool, options: &StorageOptions) -> anyhow::Result<Restored> {
    let marker = BackupMarker::load(from)?;
    let manifest = Manifest::load(from)?.ok_or_else(|| {
        anyhow::anyhow!("{} has no {}: not a ferrodir backup", from.display(), manifest::FILE_NAME)
    })?;
    if manifest.shards != marker.shards || manifest.engine != marker.engine {
        anyhow::bail!(
            "{}: the manifest ({} shards, {}) and the completion marker ({} shards, {}) disagree",
            from.display(),
            manifest.shards,
            manifest.engine,
            marker.shards,
            marker.engine
        );
    }
    let kind = EngineKind::parse(&manifest.engine)
        .ok_or_else(|| anyhow::anyhow!("{}: unknown engine {:?}", from.display(), manifest.engine))?;
    let sources: Vec<PathBuf> = (0..manifest.shards).map(|i| shard_path(kind, from, i)).collect();
    if let Some(missing) = sources.iter().find(|path| !path.exists()) {
        anyhow::bail!("{}: the backup is incomplete", missing.display());
    }
    if force {
        clear_data_dir(to, options)?;
    }
    ensure_empty_target(to)?;
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for (index, source) in sources.iter().enumerate() {
        copy_path(source, &shard_path(kind, to, index))?;
    }
    // The backup's intent log, when it has one: it holds the intents a disk error left
    // pending at the cut, which the restored server must recover like the original.
    let log_source = from.join(INTENT_LOG_FILE);
    if log_source.exists() {
        copy_path(&log_source, &to.join(INTENT_LOG_FILE))?;
    }
    let pending = IntentLog::open(&to.join(INTENT_LOG_FILE), options)
        .and_then(|log| log.pending())
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .len();
    manifest.store(to)?;
    sync_tree(to)?;
    Ok(Restored { marker, pending_intents: pending })
}

/// What a restore found.
#[derive(Debug)]
pub struct Restored {
    pub marker: BackupMarker,
    /// Changes left half done at the cut (by a disk error); the server finishes them at
    /// start, and `verify` reports them until it has.
    pub pending_intents: usize,
}

/// `ferrodir backup`: asks the serving server through its admin socket when one answers
/// (the server writes the backup), else copies the data directory itself.
pub fn run_backup_command(config: &Config, data_dir: &Path, to: &Path) -> anyhow::Result<()> {
    // The server resolves no relative path against its own working directory.
    let to = std::path::absolute(to).with_context(|| format!("bad backup path {}", to.display()))?;
    let summary = match crate::admin::client::connect(data_dir)? {
        Some(stream) => {
            crate::admin::client::call(stream, &crate::admin::Request::Backup(to), &mut std::io::sink())?
        }
        None => {
            let store = crate::data::cut::open_offline(config, data_dir)?;
            let kind = EngineKind::parse(&store.manifest.engine)
                .ok_or_else(|| anyhow::anyhow!("unknown engine {:?}", store.manifest.engine))?;
            let marker =
                backup(&Cut::offline(&store, data_dir)?, &store.manifest, kind, &store.storage, &to)?;
            format!(
                "backed up {} entries ({} keys) of {} shards to {}",
                marker.entries,
                marker.keys_per_shard.iter().sum::<u64>(),
                marker.shards,
                to.display()
            )
        }
    };
    eprintln!("{summary}");
    Ok(())
}

/// `ferrodir restore`: copies the backup, checks the copy's key counts against the marker,
/// and runs `verify` on the restored directory; fails if anything is off.
pub fn run_restore_command(config: &Config, from: &Path, to: &Path, force: bool) -> anyhow::Result<()> {
    let options = crate::data::store::storage_options(config, config.shard_count(), false);
    let Restored { marker, pending_intents } = restore(from, to, force, &options)?;
    let store = crate::data::store::Store::open(config, to)?;
    let keys = count_keys(&store.engines)?;
    if keys != marker.keys_per_shard {
        anyhow::bail!(
            "the restored shards hold {keys:?} keys, the backup's marker says {:?}: the backup is damaged",
            marker.keys_per_shard
        );
    }
    if pending_intents > 0 {
        // verify would report the half-done changes that recovery is about to settle.
        eprintln!(
            "restored {} into {}; it holds {pending_intents} changes a disk error interrupted, which the \
             server finishes when it starts: start it, stop it, then run `ferrodir verify`",
            from.display(),
            to.display()
        );
        return Ok(());
    }
    let report = crate::data::verify::verify(&store)?;
    for problem in &report.problems {
        println!("problem: {problem}");
    }
    if !report.problems.is_empty() {
        anyhow::bail!(
            "the restored directory {} has {} problems (see above)",
            to.display(),
            report.problems.len()
        );
    }
    eprintln!(
        "restored {} entries of {} shards from {} into {}; verify found no problems",
        report.entries,
        marker.shards,
        from.display(),
        to.display()
    );
    Ok(())
}

/// Counts each shard's keys, for comparison with the marker after a restore.
pub fn count_keys(engines: &[Arc<dyn KvEngine>]) -> anyhow::Result<Vec<u64>> {
    engines
        .iter()
        .map(|engine| {
            let mut keys = 0u64;
            engine.snapshot()?.scan_prefix(&[], &mut |_, _| {
                keys += 1;
                true
            })?;
            Ok(keys)
        })
        .collect()
}

/// Where shard `index` lives; the names `EngineKind::open` uses.
pub fn shard_path(kind: EngineKind, dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("shard-{index:03}.{}", kind.name()))
}

/// Refuses a directory that holds anything: a backup or restore never mixes with old files.
fn ensure_empty_target(dir: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            Some(entry) => anyhow::bail!(
                "{} is not empty (it holds {:?}); choose a new directory",
                dir.display(),
                entry?.file_name()
            ),
            None => Ok(()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", dir.display())),
    }
}

/// `restore --force`: removes a data directory's own files from `dir` (and nothing else),
/// after checking that no server holds them.
fn clear_data_dir(dir: &Path, options: &StorageOptions) -> anyhow::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    if crate::admin::client::server_answers(dir) {
        anyhow::bail!("a server is serving {}; stop it before restoring over it", dir.display());
    }
    if let Some(existing) = Manifest::load(dir)? {
        if let Some(kind) = EngineKind::parse(&existing.engine) {
            // Opening takes each engine's lock: it fails while another process holds it.
            for index in 0..existing.shards {
                kind.open(dir, index, options).map_err(|e| {
                    anyhow::anyhow!(
                        "cannot take shard {index} of {}: {e} (is a server using it?)",
                        dir.display()
                    )
                })?;
            }
        }
    }
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = name.starts_with("shard-")
            || name.starts_with(manifest::FILE_NAME)
            || name == INTENT_LOG_FILE
            || name.starts_with(MARKER_FILE)
            || name == crate::admin::SOCKET_FILE;
        if !ours {
            continue;
        }
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        }
        .with_context(|| format!("cannot remove {}", path.display()))?;
    }
    Ok(())
}

/// Copies a file, or a directory tree (sled keeps a shard in a directory).
fn copy_path(from: &Path, to: &Path) -> anyhow::Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
        for entry in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
            let entry = entry?;
            copy_path(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(from, to)
            .map(|_| ())
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))
    }
}

/// fsyncs every file and directory under `dir` (and `dir`), so that the marker, written
/// after this, never reaches the disk before the data it vouches for.
fn sync_tree(dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            std::fs::File::open(&path)
                .and_then(|file| file.sync_all())
                .with_context(|| format!("cannot sync {}", path.display()))?;
        }
    }
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync {}", dir.display()))
}

/// Writes `name` in `dir` atomically and durably: temp file, fsync, rename, fsync the dir.
fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_view_copies_every_key_in_chunks() {
        let from_dir = tempfile::tempdir().unwrap();
        let to_dir = tempfile::tempdir().unwrap();
        let from = EngineKind::Redb.open(from_dir.path(), 0, &Default::default()).unwrap();
        let batch: Vec<Mutation> = (0..(CHUNK_KEYS_MAX as u32 * 2 + 7))
            .map(|i| Mutation { key: format!("Q{i:08}").into_bytes(), value: Some(vec![1; 3]) })
            .collect();
        from.commit(&batch).unwrap();
        let to = EngineKind::Redb.open(to_dir.path(), 0, &Default::default()).unwrap();
        let copied = copy_view(from.snapshot().unwrap().as_ref(), to.as_ref()).unwrap();
        assert_eq!(copied.keys, batch.len() as u64);
        assert_eq!(count_keys(&[Arc::from(to)]).unwrap(), vec![batch.len() as u64]);
    }

    #[test]
    fn pending_intents_travel_through_backup_and_restore() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let config = Config { shards: 2, ..Config::default() };
        let store = crate::data::store::Store::open(&config, &data).unwrap();
        let intent = ferrodir_router::Intent::DeleteWithRemoteName {
            id: ferrodir_shard::EntryId::new(1, 7),
            parent: ferrodir_shard::EntryId::ROOT,
            rdn: "cn=x".into(),
        };
        IntentLog::open(&data.join(INTENT_LOG_FILE), &store.storage).unwrap().record(&intent).unwrap();
        let cut = Cut::offline(&store, &data).unwrap();
        assert_eq!(cut.intents, vec![intent]);
        let backup_dir = dir.path().join("backup");
        let marker = backup(&cut, &store.manifest, EngineKind::Redb, &store.storage, &backup_dir).unwrap();
        assert_eq!(marker.shards, 2);
        drop((cut, store));
        let restored =
            restore(&backup_dir, &dir.path().join("restored"), false, &Default::default()).unwrap();
        assert_eq!((restored.marker, restored.pending_intents), (marker, 1));
    }

    #[test]
    fn a_backup_without_its_marker_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = restore(dir.path(), &dir.path().join("target"), false, &Default::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(MARKER_FILE), "{err}");
    }
}
