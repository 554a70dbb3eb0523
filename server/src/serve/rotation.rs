//! Built-in rotation of a log file (`[access_log] rotate_bytes`, `rotate_age_s`,
//! `keep_files`, `gzip`), as 389-ds rotates its access log: when the file passes a size or
//! an age, the writer thread renames it to `NAME.YYYYMMDD-HHMMSS` and opens `NAME` afresh;
//! a thread of its own then compresses the rotated file (`NAME.….gz`, when `gzip`) and
//! removes the oldest rotated files beyond `keep_files`. The writer itself only renames
//! and opens, so the workers, which never wait for it anyway, never see a rotation.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// When and how a log file rotates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// Rotate once the file holds this many bytes; 0: never by size.
    pub bytes: u64,
    /// Rotate once the file is this old (since it was opened); zero: never by age.
    pub age: Duration,
    /// Rotated files kept (the oldest beyond are removed); 0 keeps none.
    pub keep: usize,
    /// Rotated files are compressed with gzip.
    pub gzip: bool,
}

/// What the writer tracks of the open file.
#[derive(Debug)]
pub struct Progress {
    pub written: u64,
    pub opened: Instant,
}

impl Rotation {
    /// Whether a file that has `progress` is due.
    pub fn due(&self, progress: &Progress) -> bool {
        (self.bytes > 0 && progress.written >= self.bytes)
            || (!self.age.is_zero() && progress.written > 0 && progress.opened.elapsed() >= self.age)
    }

    /// Moves `path` aside under a name with the time (and a counter when that is taken);
    /// then, on a thread of its own, compresses it and prunes the old ones. The caller has
    /// flushed the file and opens `path` again.
    pub fn rotate(&self, path: &Path) -> std::io::Result<PathBuf> {
        let stamp = ferrodir_shard::civil_time(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        );
        let stamp = format!("{}-{}", &stamp[..8], &stamp[8..]);
        let taken = |name: &str| {
            with_suffix(path, name).exists() || with_suffix(path, &format!("{name}.gz")).exists()
        };
        let mut name = stamp.clone();
        let mut n = 1;
        while taken(&name) {
            name = format!("{stamp}-{n}");
            n += 1;
        }
        let target = with_suffix(path, &name);
        std::fs::rename(path, &target)?;
        let job = Job { rotation: self.clone(), base: path.to_path_buf(), rotated: target.clone() };
        if jobs().try_send(job).is_err() {
            // Rotations faster than compression: this one stays as it is (pruned in turn).
            tracing::warn!(file = %target.display(), "log rotation is behind; a rotated file is left uncompressed");
        }
        Ok(target)
    }
}

/// One rotated file to compress, and its log's old files to prune.
struct Job {
    rotation: Rotation,
    base: PathBuf,
    rotated: PathBuf,
}

/// Rotated files waiting for the rotation thread, at most.
const JOBS_MAX: usize = 64;

/// The queue of the one thread that compresses and prunes, in rotation order (so two jobs
/// never race on one log's files), started at the first rotation.
fn jobs() -> &'static std::sync::mpsc::SyncSender<Job> {
    static JOBS: std::sync::OnceLock<std::sync::mpsc::SyncSender<Job>> = std::sync::OnceLock::new();
    JOBS.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Job>(JOBS_MAX);
        let spawned = std::thread::Builder::new().name("log-rotation".into()).spawn(move || {
            for job in receiver {
                if job.rotation.gzip {
                    if let Err(e) = compress(&job.rotated) {
                        tracing::warn!(file = %job.rotated.display(), error = %e, "cannot compress a rotated log file");
                    }
                }
                if let Err(e) = prune(&job.base, job.rotation.keep) {
                    tracing::warn!(file = %job.base.display(), error = %e, "cannot remove old rotated log files");
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the log rotation thread; rotated files are not compressed or pruned");
        }
        sender
    })
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// `file` → `file.gz` (written beside it, then the original removed).
fn compress(file: &Path) -> std::io::Result<()> {
    let gz = with_suffix(file, "gz");
    let mut input = std::fs::File::open(file)?;
    let output = std::fs::File::create(&gz)?;
    let mut encoder =
        flate2::write::GzEncoder::new(std::io::BufWriter::new(output), flate2::Compression::default());
    std::io::copy(&mut input, &mut encoder)?;
    encoder.finish()?.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::remove_file(file)
}

/// The rotated files of `base` (`base.YYYYMMDD-HHMMSS[-N][.gz]`), oldest first.
pub fn rotated(base: &Path) -> std::io::Result<Vec<PathBuf>> {
    let dir = match base.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Some(name) = base.file_name().and_then(|n| n.to_str()) else { return Ok(Vec::new()) };
    let prefix = format!("{name}.");
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for item in std::fs::read_dir(&dir)? {
        let item = item?;
        let file = item.file_name();
        let Some(file) = file.to_str() else { continue };
        let Some(rest) = file.strip_prefix(&prefix) else { continue };
        let stamp = rest.strip_suffix(".gz").unwrap_or(rest);
        let well_formed = stamp.len() >= 15
            && stamp.as_bytes().get(8) == Some(&b'-')
            && stamp.bytes().enumerate().all(|(i, b)| b.is_ascii_digit() || i == 8 || b == b'-');
        if well_formed {
            found.push((sort_key(stamp), item.path()));
        }
    }
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// `YYYYMMDD-HHMMSS[-N]` as a key that orders by time, then counter.
fn sort_key(stamp: &str) -> String {
    let (time, counter) = match stamp.get(15..) {
        Some(rest) if !rest.is_empty() => {
            (&stamp[..15], rest.trim_start_matches('-').parse::<u64>().unwrap_or(0))
        }
        _ => (stamp, 0),
    };
    format!("{time}{counter:020}")
}

/// Removes the oldest rotated files of `base` beyond `keep`.
fn prune(base: &Path, keep: usize) -> std::io::Result<()> {
    let files = rotated(base)?;
    let excess = files.len().saturating_sub(keep);
    for old in files.into_iter().take(excess) {
        std::fs::remove_file(old)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_by_size_or_age_and_never_empty_by_age() {
        let rotation = Rotation { bytes: 100, age: Duration::from_millis(10), keep: 2, gzip: false };
        let fresh = Progress { written: 0, opened: Instant::now() - Duration::from_secs(1) };
        assert!(!rotation.due(&fresh), "an empty file does not rotate by age");
        assert!(rotation.due(&Progress { written: 1, opened: Instant::now() - Duration::from_secs(1) }));
        assert!(rotation.due(&Progress { written: 100, opened: Instant::now() }));
        assert!(!rotation.due(&Progress { written: 99, opened: Instant::now() }));
    }

    #[test]
    fn rotated_files_are_found_in_order_compressed_and_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("access.log");
        for (stamp, gz) in [
            ("20261201-000000", true),
            ("20261201-000000-2", false),
            ("20261201-000000-10", false),
            ("20261130-235959", true),
        ] {
            let name = if gz { format!("access.log.{stamp}.gz") } else { format!("access.log.{stamp}") };
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        std::fs::write(dir.path().join("access.log.bak"), b"not ours").unwrap();
        let names: Vec<String> = rotated(&base)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "access.log.20261130-235959.gz",
                "access.log.20261201-000000.gz",
                "access.log.20261201-000000-2",
                "access.log.20261201-000000-10"
            ]
        );
        prune(&base, 2).unwrap();
        assert_eq!(rotated(&base).unwrap().len(), 2);
        assert!(dir.path().join("access.log.bak").exists());
        // Compression keeps the content.
        let file = dir.path().join("access.log.20261201-000000-10");
        std::fs::write(&file, b"line one\nline two\n").unwrap();
        compress(&file).unwrap();
        assert!(!file.exists());
        let mut text = String::new();
        let gz = std::fs::File::open(with_suffix(&file, "gz")).unwrap();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz), &mut text).unwrap();
        assert_eq!(text, "line one\nline two\n");
    }
}
