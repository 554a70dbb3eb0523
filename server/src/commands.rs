//! The commands of `ferrodir` that work on a data directory without serving it (import,
//! verify, reindex, export, backup, restore, compact), the health check and
//! `hash-password`, one function each, for the command line in main.rs. Each reports as the command line shows it.

use std::net::SocketAddr;
use std::path::Path;

use crate::config::Config;
use crate::data::store::Store;
use crate::data::{backup, compact, export, reindex, verify};

pub use crate::data::import::{parse_memory_size, ImportArgs, ProgressMode};
pub use crate::data::load::SORT_MEMORY_DEFAULT_BYTES;

/// `ferrodir import`: bulk-loads an LDIF file into a new data directory.
pub fn import(config: &Config, args: ImportArgs<'_>) -> anyhow::Result<()> {
    crate::data::import::run(config, args)
}

/// `ferrodir verify`: checks every shard offline; an error when anything is wrong.
pub fn verify(config: &Config, data_dir: &Path) -> anyhow::Result<()> {
    let store = Store::open_salvaging(config, data_dir)?;
    let report = verify::verify(&store)?;
    for problem in &report.problems {
        println!("problem: {problem}");
    }
    println!(
        "verified {} entries on {} shards ({} delete-log records): {} problems",
        report.entries,
        store.engines.len(),
        report.delete_log_records,
        report.problems.len()
    );
    if !report.problems.is_empty() {
        anyhow::bail!(
            "{} problems found; to recover, export what can be read and import it into a new data directory",
            report.problems.len()
        );
    }
    Ok(())
}

/// `ferrodir healthcheck`: asks a running server's metrics endpoint whether it is ready
/// (`/readyz`) or, `live`, alive (`/healthz`); its answer's body.
pub fn healthcheck(addr: SocketAddr, live: bool) -> anyhow::Result<String> {
    let path = if live { "/healthz" } else { "/readyz" };
    crate::metrics::http::check(addr, path)
}

/// `ferrodir reindex`: rebuilds every index offline.
pub fn reindex(config: &Config, data_dir: &Path) -> anyhow::Result<()> {
    let store = Store::open(config, data_dir)?;
    let started = std::time::Instant::now();
    let entries = reindex::reindex(&store)?;
    eprintln!("reindexed {entries} entries in {:.2}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// `ferrodir export`: every entry as LDIF on stdout, `operational` attributes included or not.
pub fn export(config: &Config, data_dir: &Path, operational: bool) -> anyhow::Result<()> {
    export::run_command(config, data_dir, export::ExportOptions { operational })
}

/// `ferrodir backup`: copies every shard into `to`, consistently, even while serving.
pub fn backup(config: &Config, data_dir: &Path, to: &Path) -> anyhow::Result<()> {
    backup::run_backup_command(config, data_dir, to)
}

/// `ferrodir restore`: a finished backup into `data_dir`, then verified.
pub fn restore(config: &Config, from: &Path, data_dir: &Path, force: bool) -> anyhow::Result<()> {
    backup::run_restore_command(config, from, data_dir, force)
}

/// `ferrodir reload`: asks the server serving `data_dir` (its admin socket) to re-read its
/// config file; returns its summary, or why it refused the file.
pub fn reload(data_dir: &Path) -> anyhow::Result<String> {
    let Some(stream) = crate::admin::client::connect(data_dir)? else {
        anyhow::bail!("no server is serving {} (no admin socket answers)", data_dir.display());
    };
    crate::admin::client::call(stream, &crate::admin::Request::Reload, &mut std::io::sink())
}

/// `ferrodir compact`: gives the free space inside the data directory's files back.
pub fn compact(data_dir: &Path) -> anyhow::Result<()> {
    compact::run_command(data_dir)
}

/// `ferrodir hash-password` (slappasswd's job): a password read from the terminal (no echo)
/// or standard input, never from an argument, printed hashed with `password_scheme`, ready
/// for `root_password` or a userPassword value.
pub fn hash_password(config: &Config) -> anyhow::Result<()> {
    let scheme = config.storage_scheme()?;
    let password = crate::prompt::read_password()?;
    println!("{}", scheme.hash(&password));
    Ok(())
}
