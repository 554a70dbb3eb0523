//! `ferrodir import`: bulk-load an LDIF file offline into a new data directory, like slapadd.
//!
//! All or nothing: the load goes into a staging directory beside the target
//! (`<parent>/.<name>.importing`), which becomes the target by one rename only after every
//! shard committed durably, and is removed on any failure. A crash mid-import leaves only
//! the staging directory, which the next import removes before it starts. A lock file
//! inside the staging directory keeps two imports into the same target apart.
//!
//! The target must be absent, an empty directory, or a data directory without entries (as
//! `serve` with `example_data = false` leaves one); one that holds entries is refused.
//!
//! Progress (entries, entries/s, ETA from the bytes of input read) is drawn on stderr when
//! it is a terminal, or printed as plain lines with `--progress always`.

use std::fs::File;
use std::io::{BufReader, IsTerminal as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::config::Config;
use crate::data::load::{self, LoadOptions, LoadProgress, LoadReport};
use crate::data::manifest::Manifest;
use crate::data::store::Store;

/// `--progress`: when to show progress on stderr.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A progress bar when stderr is a terminal, nothing otherwise.
    Auto,
    /// The bar on a terminal; otherwise a plain line every second and when the input is read.
    Always,
    Never,
}

/// How often plain progress lines are printed.
const PLAIN_PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
/// How often the shard files' writeback is started during an import.
const WRITEBACK_INTERVAL: Duration = Duration::from_secs(1);
/// How often the progress bar is updated.
const BAR_REFRESH_INTERVAL: Duration = Duration::from_millis(100);
/// The staging directory's lock file, removed just before the staging directory becomes
/// the target.
const LOCK_FILE: &str = "import.lock";

/// What `ferrodir import` was asked to do, besides the config.
pub struct ImportArgs<'a> {
    pub data_dir: &'a Path,
    pub file: &'a Path,
    pub keep_going: bool,
    pub mode: ProgressMode,
    /// `--sort-memory`: for the shard writers' sorts, all shards together.
    pub sort_memory_bytes: usize,
}

pub fn run(config: &Config, args: ImportArgs<'_>) -> anyhow::Result<()> {
    let ImportArgs { data_dir, file, keep_going, mode, sort_memory_bytes } = args;
    keep_freed_memory();
    let input = File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let input_bytes = input.metadata().map(|m| m.len()).unwrap_or(0);
    let target = Target::inspect(config, data_dir)?;
    let staging = Staging::create(&target.path)?;
    let started = Instant::now();
    let progress = LoadProgress::default();
    let finished = AtomicBool::new(false);
    let report = std::thread::scope(|scope| {
        let display = scope.spawn(|| show_progress(mode, &progress, &finished, input_bytes, started));
        let flusher = scope.spawn(|| start_writeback(staging.path(), &finished));
        let input = BufReader::new(input);
        let loaded = load_into(config, staging.path(), input, keep_going, sort_memory_bytes, &progress);
        finished.store(true, Ordering::Relaxed);
        // Wake both so that they stop now, not at their next tick.
        display.thread().unpark();
        flusher.thread().unpark();
        let _ = display.join();
        let _ = flusher.join();
        loaded
    })?;
    staging.publish(&target)?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "imported {} entries in {seconds:.2}s ({:.0} entries/s), {} skipped",
        report.entries,
        report.entries as f64 / seconds.max(1e-9),
        report.skipped
    );
    Ok(())
}

/// Loads into the staging directory; the store is closed (every file released) on return.
fn load_into(
    config: &Config,
    dir: &Path,
    input: BufReader<File>,
    keep_going: bool,
    sort_memory_bytes: usize,
    progress: &LoadProgress,
) -> anyhow::Result<LoadReport> {
    // The CSNs it stamps carry this server's id (the store's clock).
    let store = Store::open(config, dir)?;
    // Offline: values are stored as the file holds them, never hashed.
    let directory =
        crate::directory::directory_config(config, &store, crate::directory::offline_hash_pool())?;
    let mut report_skip = |problem: &str| eprintln!("skipped: {problem}");
    let options = LoadOptions {
        spill_dir: dir,
        sort_memory_bytes,
        keep_going,
        progress: Some(progress),
        on_skip: &mut report_skip,
    };
    load::load(&store, &directory, input, options)
}

/// mimalloc's `mi_option_purge_delay`: its position in `mi_option_t`, the same in the v2
/// and v3 headers of libmimalloc-sys 0.1 (`c_src/mimalloc/*/include/mimalloc.h`).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

extern "C" {
    /// mimalloc's (the global allocator, `main.rs`): sets one of its options at run time.
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    #[cfg(test)]
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
}

/// Tells the allocator to keep the memory freed during the import instead of handing it
/// back to the kernel a second after (mimalloc v3's default purge delay): the pipeline frees and
/// allocates its batches all the time, and every page handed back was faulted in and
/// zeroed by the kernel again on its next use, about a tenth of the import's CPU
/// (`clear_page_erms` in a profile of 100k entries). Peak memory stays what the import
/// holds at once; the process ends after the import anyway.
fn keep_freed_memory() {
    // SAFETY: a plain call into the linked allocator with a valid option and value; it
    // only stores the value, read the next time mimalloc considers a purge.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
}

/// `--sort-memory`: bytes, or a number with K, M or G (binary: 1K = 1024 bytes).
pub fn parse_memory_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last() {
        Some((at, 'k' | 'K')) => (&text[..at], 10),
        Some((at, 'm' | 'M')) => (&text[..at], 20),
        Some((at, 'g' | 'G')) => (&text[..at], 30),
        _ => (text, 0),
    };
    let number: usize =
        digits.trim().parse().map_err(|_| format!("{text:?} is no size (say 256M, 64K, 1G)"))?;
    number
        .checked_mul(1 << shift)
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| format!("{text:?}: the size must be above 0 and fit in memory"))
}

// --- the target and the staging directory -----------------------------------------------

/// The data directory the import will become.
struct Target {
    path: PathBuf,
    /// It exists and holds an empty data directory, whose files the import replaces.
    holds_empty_data_dir: bool,
}

impl Target {
    /// Refuses a target that holds entries or files of something else.
    fn inspect(config: &Config, data_dir: &Path) -> anyhow::Result<Self> {
        let path = absolute(data_dir)?;
        if !path.exists() {
            return Ok(Self { path, holds_empty_data_dir: false });
        }
        if !path.is_dir() {
            anyhow::bail!("{} exists and is not a directory", path.display());
        }
        if Manifest::load(&path)?.is_none() {
            if std::fs::read_dir(&path)?.next().is_some() {
                anyhow::bail!(
                    "{} is neither empty nor a ferrodir data directory: import makes a new data directory",
                    path.display()
                );
            }
            return Ok(Self { path, holds_empty_data_dir: false });
        }
        let store = Store::open(config, &path)?;
        for (index, engine) in store.engines.iter().enumerate() {
            if load::shard_has_entries(engine.as_ref())? {
                anyhow::bail!(
                    "shard {index} of {} already holds entries: import loads only a new, empty data directory",
                    path.display()
                );
            }
        }
        Ok(Self { path, holds_empty_data_dir: true })
    }

    /// Removes the files of the empty data directory the import replaces, manifest first
    /// (without it the directory is no data directory), so that the rename can replace the
    /// directory. Files of other kinds stay, and the rename then fails and names the target.
    fn clear_empty_data_dir(&self) -> anyhow::Result<()> {
        std::fs::remove_file(Manifest::path(&self.path))?;
        for item in std::fs::read_dir(&self.path)? {
            let item = item?;
            let name = item.file_name().to_string_lossy().into_owned();
            let ours = name.starts_with("shard-") || name == "coordinator.redb";
            if ours && item.file_type()?.is_dir() {
                std::fs::remove_dir_all(item.path())?;
            } else if ours {
                std::fs::remove_file(item.path())?;
            }
        }
        Ok(())
    }
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    let path = std::path::absolute(path).with_context(|| format!("bad data directory {}", path.display()))?;
    match path.file_name() {
        Some(_) => Ok(path),
        // `dir/..` and the like: let the filesystem say what it names.
        None => path.canonicalize().with_context(|| format!("bad data directory {}", path.display())),
    }
}

/// The staging directory of one import, locked for its life and removed on drop unless
/// published.
struct Staging {
    path: PathBuf,
    /// Holds the lock; closing it releases the lock.
    lock: Option<File>,
    published: bool,
}

impl Staging {
    /// Creates (or takes over a stale) `<parent>/.<name>.importing`, locked.
    fn create(target: &Path) -> anyhow::Result<Self> {
        let (parent, name) = match (target.parent(), target.file_name()) {
            (Some(parent), Some(name)) => (parent, name.to_string_lossy()),
            _ => anyhow::bail!("{} cannot be a data directory", target.display()),
        };
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        let path = parent.join(format!(".{name}.importing"));
        std::fs::create_dir_all(&path).with_context(|| format!("cannot create {}", path.display()))?;
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path.join(LOCK_FILE))
            .with_context(|| format!("cannot create the lock in {}", path.display()))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
                "another import into {} is running (it holds {})",
                target.display(),
                path.display()
            ),
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
        let staging = Self { path, lock: Some(lock), published: false };
        staging.remove_leftovers()?;
        Ok(staging)
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Whatever a crashed import left here, all but the lock file.
    fn remove_leftovers(&self) -> anyhow::Result<()> {
        for item in std::fs::read_dir(&self.path)? {
            let item = item?;
            if item.file_name() == LOCK_FILE {
                continue;
            }
            tracing::warn!(path = %item.path().display(), "removing what an interrupted import left");
            if item.file_type()?.is_dir() {
                std::fs::remove_dir_all(item.path())?;
            } else {
                std::fs::remove_file(item.path())?;
            }
        }
        Ok(())
    }

    /// Makes the staging directory the target: every shard is already durable; the staging
    /// directory's entries are synced, then one rename, then the parent directory is synced
    /// so that the rename itself survives a crash.
    fn publish(mut self, target: &Target) -> anyhow::Result<()> {
        std::fs::remove_file(self.path.join(LOCK_FILE))?;
        sync_dir(&self.path)?;
        if target.holds_empty_data_dir {
            target.clear_empty_data_dir()?;
        }
        std::fs::rename(&self.path, &target.path).with_context(|| {
            format!("cannot move the imported data from {} to {}", self.path.display(), target.path.display())
        })?;
        self.published = true;
        if let Some(parent) = target.path.parent() {
            sync_dir(parent)?;
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.published {
            if let Err(e) = std::fs::remove_dir_all(&self.path) {
                eprintln!("cannot remove the staging directory {}: {e}", self.path.display());
            }
        }
        // Released only now, after the directory is gone or published.
        drop(self.lock.take());
    }
}

/// Until `finished`, starts the kernel's writeback of what the shard files hold every
/// [`WRITEBACK_INTERVAL`], without waiting for it. The engines write a large load into the
/// page cache as they go, and the kernel would otherwise write it out only at the final
/// sync: this spreads that I/O over the load, which keeps the final commit short.
/// Durability does not depend on it: each shard's commit still syncs everything.
fn start_writeback(dir: &Path, finished: &AtomicBool) {
    while !finished.load(Ordering::Relaxed) {
        std::thread::park_timeout(WRITEBACK_INTERVAL);
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            if entry.file_name() != LOCK_FILE && entry.file_type().is_ok_and(|t| t.is_file()) {
                if let Ok(file) = File::open(entry.path()) {
                    start_file_writeback(&file);
                }
            }
        }
    }
}

#[cfg(target_os = "linux")]
fn start_file_writeback(file: &File) {
    use std::os::fd::AsRawFd as _;
    // SAFETY: a valid open descriptor; offset 0 and length 0 name the whole file, and
    // SYNC_FILE_RANGE_WRITE only starts writeback of dirty pages, changing no data.
    // A failure (say, a filesystem without support) only loses the head start.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_file_writeback(_file: &File) {}

fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("cannot sync {}", dir.display()))
}

// --- progress ---------------------------------------------------------------------------

/// Shows progress until the load is `finished` (set, then the thread unparked).
fn show_progress(
    mode: ProgressMode,
    progress: &LoadProgress,
    finished: &AtomicBool,
    input_bytes: u64,
    started: Instant,
) {
    let terminal = std::io::stderr().is_terminal();
    match mode {
        ProgressMode::Never => {}
        ProgressMode::Auto | ProgressMode::Always if terminal => draw_bar(progress, finished, input_bytes),
        ProgressMode::Auto => {}
        ProgressMode::Always => print_lines(progress, finished, input_bytes, started),
    }
}

fn draw_bar(progress: &LoadProgress, finished: &AtomicBool, input_bytes: u64) {
    let bar =
        indicatif::ProgressBar::with_draw_target(Some(input_bytes), indicatif::ProgressDrawTarget::stderr());
    let style = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{wide_bar}] {percent:>3}% {msg} ETA {eta}",
    )
    .map(|s| s.progress_chars("=> "));
    if let Ok(style) = style {
        bar.set_style(style);
    }
    let started = Instant::now();
    while !finished.load(Ordering::Relaxed) {
        bar.set_position(progress.bytes_read.load(Ordering::Relaxed));
        let mut message = entries_message(progress, started);
        if progress.input_done.load(Ordering::Relaxed) {
            message.push_str("; committing and syncing");
        }
        bar.set_message(message);
        std::thread::park_timeout(BAR_REFRESH_INTERVAL);
    }
    bar.finish_and_clear();
}

/// Plain lines for a log or a test: one a second, and one when the whole input is placed,
/// before the final commit and sync (or when the load ended early).
fn print_lines(progress: &LoadProgress, finished: &AtomicBool, input_bytes: u64, started: Instant) {
    let mut next = started + PLAIN_PROGRESS_INTERVAL;
    loop {
        let done = progress.input_done.load(Ordering::Relaxed) || finished.load(Ordering::Relaxed);
        if done || Instant::now() >= next {
            let read = progress.bytes_read.load(Ordering::Relaxed);
            let percent = (read * 100).checked_div(input_bytes).map_or(100, |p| p.min(100));
            let eta = match eta_s(started.elapsed(), read, input_bytes) {
                Some(seconds) => format!("ETA {seconds}s"),
                None => "ETA ?".to_string(),
            };
            eprintln!("progress: {}, {percent}% of input, {eta}", entries_message(progress, started));
            next += PLAIN_PROGRESS_INTERVAL;
        }
        if done {
            return;
        }
        // Wakes often enough to print the last line soon after the input is placed.
        std::thread::park_timeout(next.saturating_duration_since(Instant::now()).min(BAR_REFRESH_INTERVAL));
    }
}

fn entries_message(progress: &LoadProgress, started: Instant) -> String {
    let entries = progress.entries.load(Ordering::Relaxed);
    let rate = entries as f64 / started.elapsed().as_secs_f64().max(1e-3);
    format!("{entries} entries, {rate:.0} entries/s")
}

/// Seconds left at the rate the input has been read so far.
fn eta_s(elapsed: Duration, read: u64, total: u64) -> Option<u64> {
    if read == 0 || total == 0 {
        return None;
    }
    let left = total.saturating_sub(read) as f64;
    Some((elapsed.as_secs_f64() * left / read as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_take_binary_units_and_refuse_zero_and_words() {
        assert_eq!(parse_memory_size("4096"), Ok(4096));
        assert_eq!(parse_memory_size("64K"), Ok(64 << 10));
        assert_eq!(parse_memory_size("256m"), Ok(256 << 20));
        assert_eq!(parse_memory_size("1G"), Ok(1 << 30));
        assert!(parse_memory_size("0").is_err());
        assert!(parse_memory_size("lots").is_err());
        assert!(parse_memory_size("M").is_err());
    }

    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        // SAFETY: reads and sets an option of the linked allocator.
        let before = unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // mimalloc v3's default purge_delay (ms, `src/options.c`): the position names it.
            assert_eq!(before, 1000, "option {MI_OPTION_PURGE_DELAY} is not purge_delay");
        }
        keep_freed_memory();
        assert_eq!(unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) }, -1);
        // SAFETY: as above; put back for the other tests of this process.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, before) };
    }

    #[test]
    fn eta_follows_the_rate_so_far() {
        assert_eq!(eta_s(Duration::from_secs(10), 25, 100), Some(30));
        assert_eq!(eta_s(Duration::from_secs(10), 100, 100), Some(0));
        assert_eq!(eta_s(Duration::from_secs(10), 0, 100), None);
    }

    #[test]
    fn a_dropped_staging_dir_is_removed_and_a_stale_one_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("data");
        let staging = Staging::create(&target).unwrap();
        let path = staging.path().to_path_buf();
        std::fs::write(path.join("shard-000.redb"), b"half").unwrap();
        let second = Staging::create(&target);
        assert!(
            second.is_err_and(|e| e.to_string().contains("another import")),
            "the lock keeps imports apart"
        );
        drop(staging);
        assert!(!path.exists(), "an unpublished staging directory stays behind");
        // A crashed import leaves its staging directory, unlocked: the next one clears it.
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("shard-000.redb"), b"stale").unwrap();
        let staging = Staging::create(&target).unwrap();
        assert!(!path.join("shard-000.redb").exists());
        drop(staging);
    }
}
