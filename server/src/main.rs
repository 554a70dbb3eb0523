//! The `ferrodir` binary.
//!
//! # Layout
//! - `main.rs`: the command line (serve, import, export) and logging.
//! - `config.rs`: the TOML configuration; `manifest.rs`: what a data directory is fixed to.
//! - `store.rs`: opening a data directory's shards; `load.rs` and `export.rs`: LDIF in and out;
//!   `reindex.rs`: rebuilding indices.
//! - `runtime.rs`: worker threads, shard actors, the coordinator and the accept loop.
//! - `connection.rs`: one client connection's read and write loops.

mod config;
mod connection;
mod export;
mod load;
mod manifest;
mod reindex;
mod runtime;
mod store;
mod verify;

use std::io::BufReader;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::store::Store;

const EXAMPLE_LDIF: &str = include_str!("example.ldif");

#[derive(Parser)]
#[command(name = "ferrodir", version, about = "An LDAPv3 directory server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve LDAP. With no config file, serves dc=example,dc=com on 127.0.0.1:3389 from
    /// ./ferrodir-data, created with example entries on first start.
    Serve {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        listen: Option<SocketAddr>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Bulk-load an LDIF file into a new data directory (offline, like slapadd).
    Import {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data_dir: PathBuf,
        /// Skip bad records (reported with their line numbers) instead of stopping.
        #[arg(long = "continue")]
        keep_going: bool,
        file: PathBuf,
    },
    /// Check every shard offline: entries against indices, parent links, schema. Exits
    /// non-zero on any problem.
    Verify {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Rebuild every index offline (after the index configuration changed).
    Reindex {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Write every entry as LDIF to standard output, parents first (offline, like slapcat).
    Export {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data_dir: PathBuf,
    },
}

fn load_config(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    match path {
        Some(path) => Config::load(path),
        None => Ok(Config::default()),
    }
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log.level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if config.log.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config, listen, data_dir } => {
            let mut config = load_config(config.as_ref())?;
            if let Some(listen) = listen {
                config.listen = listen;
            }
            if let Some(dir) = data_dir {
                config.data_dir = dir;
            }
            init_logging(&config);
            let store = Store::open(&config, &config.data_dir)?;
            if store.created && config.example_data {
                let directory = runtime::directory_config(&config, &store)?;
                let report = load::load_ldif(&store, &directory, EXAMPLE_LDIF.as_bytes(), false)?;
                tracing::info!(entries = report.entries, "new data directory: loaded the example entries");
            }
            let system = actix_rt::System::new();
            system.block_on(runtime::serve(config, store))
        }
        Command::Import { config, data_dir, keep_going, file } => {
            let config = load_config(config.as_ref())?;
            init_logging(&config);
            let store = Store::open(&config, &data_dir)?;
            let directory = runtime::directory_config(&config, &store)?;
            let input =
                std::fs::File::open(&file).with_context(|| format!("cannot open {}", file.display()))?;
            let started = std::time::Instant::now();
            let report = load::load_ldif(&store, &directory, BufReader::new(input), keep_going)?;
            for problem in &report.skipped {
                eprintln!("skipped: {problem}");
            }
            let seconds = started.elapsed().as_secs_f64();
            eprintln!(
                "imported {} entries in {:.2}s ({:.0} entries/s), {} skipped",
                report.entries,
                seconds,
                report.entries as f64 / seconds.max(1e-9),
                report.skipped.len()
            );
            Ok(())
        }
        Command::Verify { config, data_dir } => {
            let config = load_config(config.as_ref())?;
            init_logging(&config);
            let store = Store::open(&config, &data_dir)?;
            let report = verify::verify(&store)?;
            for problem in &report.problems {
                println!("problem: {problem}");
            }
            println!(
                "verified {} entries on {} shards: {} problems",
                report.entries,
                store.engines.len(),
                report.problems.len()
            );
            if !report.problems.is_empty() {
                anyhow::bail!("{} problems found; to recover, export what can be read and import it into a new data directory", report.problems.len());
            }
            Ok(())
        }
        Command::Reindex { config, data_dir } => {
            let config = load_config(config.as_ref())?;
            init_logging(&config);
            let store = Store::open(&config, &data_dir)?;
            let started = std::time::Instant::now();
            let entries = reindex::reindex(&store)?;
            eprintln!("reindexed {entries} entries in {:.2}s", started.elapsed().as_secs_f64());
            Ok(())
        }
        Command::Export { config, data_dir } => {
            let config = load_config(config.as_ref())?;
            init_logging(&config);
            let store = Store::open(&config, &data_dir)?;
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            let count = export::export(&store, &config, &mut out)?;
            eprintln!("exported {count} entries");
            Ok(())
        }
    }
}
