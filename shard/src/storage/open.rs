//! How every redb file of a data directory is opened: [`open`] for the file, [`open_log_file`]
//! for a shard's write log, both with the settings of one [`StorageOptions`] value that the
//! server builds from its config and passes down. No setting lives in a process global, so
//! two stores in one process (tests, tools) can open with different settings.

use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::Arc;

use redb::backends::FileBackend;
use redb::{Database, StorageBackend};

use super::powercut::PowerCutBackend;
use super::watched::{Watch, Watched};

/// The write log's size per shard unless the config says otherwise: 512 KiB, 128 records of
/// one page (one kept spare), each checkpoint carrying up to that many commits. Between two
/// checkpoints redb cannot reuse the pages the non-durable commits freed from the durable
/// state, so a larger log lets churn grow the files further: with 2 MiB the footprint test's
/// files doubled (9.0 → 16.8 MB), with 512 KiB they stayed at 9.0-10.1 MB.
pub const WRITE_LOG_BYTES_DEFAULT: u64 = 512 << 10;

/// redb's own page cache size, used when nothing else is asked for.
const CACHE_BYTES_DEFAULT: usize = 1 << 30;

/// The settings redb files open with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageOptions {
    /// redb's page cache per file, in bytes (`[limits] storage_cache_bytes_per_shard`).
    pub cache_bytes: usize,
    /// The size of each shard's write log (`super::writelog`), 0 for none (`[limits]
    /// write_log_bytes`).
    pub write_log_bytes: u64,
    /// Crash-test fault injection; off unless the server's `fault-injection` build reads a
    /// `[testing]` section.
    pub test_modes: TestModes,
}

impl Default for StorageOptions {
    fn default() -> Self {
        Self {
            cache_bytes: CACHE_BYTES_DEFAULT,
            write_log_bytes: WRITE_LOG_BYTES_DEFAULT,
            test_modes: TestModes::default(),
        }
    }
}

/// The crash tests' switches (`[testing]`), served by the test backend in `super::powercut`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TestModes {
    /// Unsynced writes live only in the process's memory, so a kill loses them as a power
    /// cut would.
    pub simulate_power_cut: bool,
    /// `sync_data` makes nothing durable: a deliberately broken server that the crash test
    /// must catch under a simulated power cut.
    pub ack_before_sync: bool,
}

impl TestModes {
    fn any(self) -> bool {
        self.simulate_power_cut || self.ack_before_sync
    }
}

/// Opens (creating if needed) a redb file with `options`' page cache, through the test
/// backend when a test mode is on. Every redb file of a data directory opens through here.
pub fn open(path: &Path, options: &StorageOptions) -> Result<Database, redb::DatabaseError> {
    let mut builder = redb::Builder::new();
    builder.set_cache_size(options.cache_bytes);
    let modes = options.test_modes;
    if !modes.any() {
        return builder.create(path);
    }
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
    builder.create_with_backend(PowerCutBackend::new(file, modes.simulate_power_cut, modes.ack_before_sync)?)
}

/// [`open`] for a shard's file: the same settings, written through a [`Watched`] backend
/// whose [`Watch`] tells how a failed commit failed (a full disk is one a shard recovers
/// from by itself, docs/ARCHITECTURE.md "Faults").
pub fn open_watched(
    path: &Path,
    options: &StorageOptions,
) -> Result<(Database, Arc<Watch>), redb::DatabaseError> {
    let mut builder = redb::Builder::new();
    builder.set_cache_size(options.cache_bytes);
    let modes = options.test_modes;
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
    let inner: Box<dyn StorageBackend> = if modes.any() {
        Box::new(PowerCutBackend::new(file, modes.simulate_power_cut, modes.ack_before_sync)?)
    } else {
        Box::new(FileBackend::new(file)?)
    };
    let (backend, watch) = Watched::new(inner);
    Ok((builder.create_with_backend(backend)?, watch))
}

/// Opens (creating if needed) a shard's write log file, through the test backend when a
/// test mode is on: under a simulated power cut its unsynced records die with the process,
/// and `ack_before_sync` makes its syncs do nothing, as for the redb file.
pub(crate) fn open_log_file(path: &Path, options: &StorageOptions) -> io::Result<Box<dyn StorageBackend>> {
    let modes = options.test_modes;
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
    if !modes.any() {
        return Ok(Box::new(FileBackend::new(file).map_err(|e| io::Error::other(e.to_string()))?));
    }
    Ok(Box::new(PowerCutBackend::new(file, modes.simulate_power_cut, modes.ack_before_sync)?))
}
