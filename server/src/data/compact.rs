//! `ferrodir compact`: gives the free space inside a data directory's redb files back to the
//! filesystem, offline.
//!
//! redb reuses the pages that deletes free, so a file stays flat under steady churn, but it
//! returns space only from the end of the file. A file that grew (a big delete after a big
//! load; docs/DECISIONS.md, "Disk footprint under churn") keeps its length until this
//! command moves its live pages to the front and cuts the free tail off.
//! redb's `compact()` needs the database to itself, so the server must be stopped: the
//! command refuses while the admin socket answers, and redb's file lock refuses any file
//! that another process holds open. Each file is checked (redb's integrity check, as at
//! server start) before it is compacted; the data is the same afterwards (`ferrodir export`
//! before and after gives the same LDIF).

use std::path::Path;

use ferrodir_shard::storage::{compact_redb_file, EngineKind, StorageOptions};

use crate::data::manifest::{Manifest, INTENT_LOG_FILE};

/// One file's result.
#[derive(Debug)]
pub struct FileResult {
    pub name: String,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Compacts every shard file of `dir` and the coordinator's intent log.
pub fn compact_dir(dir: &Path) -> anyhow::Result<Vec<FileResult>> {
    let Some(manifest) = Manifest::load(dir)? else {
        anyhow::bail!("{} is not a ferrodir data directory (no manifest)", dir.display());
    };
    let kind = EngineKind::parse(&manifest.engine)
        .ok_or_else(|| anyhow::anyhow!("unknown engine {:?} in the manifest", manifest.engine))?;
    if kind != EngineKind::Redb {
        anyhow::bail!("engine {}: only redb data directories can be compacted", kind.name());
    }
    if crate::admin::client::server_answers(dir) {
        anyhow::bail!("a server is serving {}; stop it, then compact", dir.display());
    }
    let mut files: Vec<_> = (0..manifest.shards).map(|i| kind.shard_path(dir, i)).collect();
    let log = dir.join(INTENT_LOG_FILE);
    if log.exists() {
        files.push(log);
    }
    // No config reaches `compact`: the files open with the defaults, which replay any write
    // log the same way, and the page cache matters little for one pass over each file.
    let options = StorageOptions::default();
    let mut results = Vec::with_capacity(files.len());
    for path in files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let done =
            compact_redb_file(&path, &options).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        results.push(FileResult { name, bytes_before: done.bytes_before, bytes_after: done.bytes_after });
    }
    Ok(results)
}

/// The command: compacts, then prints one line per file and the total.
pub fn run_command(dir: &Path) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let results = compact_dir(dir)?;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    for r in &results {
        println!("{}: {:.1} MiB -> {:.1} MiB", r.name, mib(r.bytes_before), mib(r.bytes_after));
    }
    let before: u64 = results.iter().map(|r| r.bytes_before).sum();
    let after: u64 = results.iter().map(|r| r.bytes_after).sum();
    println!(
        "compacted {} files in {:.1}s: {:.1} MiB -> {:.1} MiB",
        results.len(),
        started.elapsed().as_secs_f64(),
        mib(before),
        mib(after)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_directory_without_a_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let err = compact_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a ferrodir data directory"), "{err}");
    }

    #[test]
    fn refuses_sled() {
        let dir = tempfile::tempdir().unwrap();
        Manifest::current(2, "sled").store(dir.path()).unwrap();
        let err = compact_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("only redb"), "{err}");
    }
}
