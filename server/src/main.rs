//! The `ferrodir` binary.
//!
//! # Layout
//! - `main.rs`: the command line (serve, import, export, ...) and logging.
//! - `config.rs`: the TOML configuration, which every command reads.
//! - `serve/`: the serving path: `runtime` (worker threads, shard actors, the coordinator
//!   and the accept loop), `connection` (one client connection's read and write loops),
//!   `stream`, `tls`, `search_pool`, `priority`, `systemd`, `accesslog`, `monitor`, `refint`.
//! - `data/`: the data directory and its tools: `store` (opening the shards), `manifest`
//!   (what a data directory is fixed to, its file names), `index_marks`, `load` and `export`
//!   (LDIF in and out; `import`: the import command's staging directory and progress
//!   display; `import_sort`), `reindex`, `backup` (backup and restore), `cut` (a consistent
//!   cut of every shard, taken while serving), `compact`, `verify`.
//! - `admin/`: the admin socket through which export and backup reach a serving server
//!   (the protocol, its server and its client).
//! - `metrics/`: the HTTP endpoint; `replication/`: the RFC 4533 consumer
//!   (`[[replication]]`): its connection to the provider, applying, the cookie store and its
//!   status (metrics, cn=Monitor, /readyz).

mod admin;
mod config;
mod data;
mod directory;
mod metrics;
mod replication;
mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::data::store::Store;
use data::{backup, compact, export, import, load, reindex, verify};
use serve::runtime;

/// mimalloc instead of glibc's malloc: the import pipeline frees on one thread what another
/// allocated (parsed entries travel from parse workers to shard writers), which glibc's
/// arenas handle with locks and heap trimming; with mimalloc `ferrodir import` of 100k
/// entries took about a fifth less CPU (docs/BENCHMARKS.md, "Import").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
        /// Progress on stderr: a bar on a terminal (auto), also plain lines when stderr is
        /// not a terminal (always), or none.
        #[arg(long, value_enum, default_value = "auto")]
        progress: import::ProgressMode,
        /// Memory for sorting the index keys, all shards together (K, M, G: binary units);
        /// past it, sorted runs go to files in the data directory being made.
        #[arg(long, value_parser = import::parse_memory_size, default_value_t = load::SORT_MEMORY_DEFAULT_BYTES)]
        sort_memory: usize,
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
    /// Ask a running server whether it is ready (GET /readyz on its `metrics_listen`);
    /// exits 0 when it is, 1 otherwise. For container health checks.
    Healthcheck {
        #[arg(long)]
        config: Option<PathBuf>,
        /// The endpoint to ask, instead of the config's `metrics_listen`.
        #[arg(long)]
        addr: Option<SocketAddr>,
        /// `/healthz` (alive) instead of `/readyz` (ready to serve).
        #[arg(long)]
        live: bool,
    },
    /// Rebuild every index offline (after the index configuration changed).
    Reindex {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Write every entry as LDIF to standard output, parents first, like slapcat. While a
    /// server serves DIR, it asks that server (through DIR/admin.sock) for a consistent cut.
    Export {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data_dir: PathBuf,
        /// Leave out the operational attributes (entryUUID, entryCSN, creatorsName, ...),
        /// which are written by default, as slapcat does.
        #[arg(long)]
        no_operational: bool,
    },
    /// Copy every shard into BACKUP_DIR (new or empty), consistently, even while a server
    /// serves DIR. A finished backup holds ferrodir-backup.toml.
    Backup {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long, value_name = "BACKUP_DIR")]
        to: PathBuf,
    },
    /// Give the free space inside the data directory's files back to the filesystem
    /// (offline: stop the server first). The data stays the same.
    Compact {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Restore a finished backup into DIR (offline; DIR new or empty unless --force), then
    /// verify the result.
    Restore {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, value_name = "BACKUP_DIR")]
        from: PathBuf,
        #[arg(long)]
        data_dir: PathBuf,
        /// Replace the data directory files already in DIR (refused while a server holds it).
        #[arg(long)]
        force: bool,
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
            // Every CSN carries the server id, the example entries' too.
            ferrodir_shard::set_server_id(config.server_id);
            let store = Store::open_serving(&config, &config.data_dir)?;
            if store.created && config.example_data {
                let directory = crate::directory::directory_config(
                    &config,
                    &store,
                    crate::directory::offline_hash_pool(),
                )?;
                let report =
                    load::load_ldif(&store, &config.data_dir, &directory, EXAMPLE_LDIF.as_bytes(), false)?;
                tracing::info!(entries = report.entries, "new data directory: loaded the example entries");
            }
            let system = actix_rt::System::new();
            system.block_on(runtime::serve(config, store))
        }
        Command::Import { config, data_dir, keep_going, progress, sort_memory, file } => {
            let config = load_config(config.as_ref())?;
            init_logging(&config);
            let args = import::ImportArgs {
                data_dir: &data_dir,
                file: &file,
                keep_going,
                mode: progress,
                sort_memory_bytes: sort_memory,
            };
            import::run(&config, args)
        }
        Command::Verify { config, data_dir } => {
            let config = load_config(config.as_ref())?;
            init_logging(&config);
            let store = Store::open_salvaging(&config, &data_dir)?;
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
                anyhow::bail!("{} problems found; to recover, export what can be read and import it into a new data directory", report.problems.len());
            }
            Ok(())
        }
        Command::Healthcheck { config, addr, live } => {
            let config = load_config(config.as_ref())?;
            let Some(addr) = addr.or(config.metrics_listen) else {
                anyhow::bail!("no endpoint to ask: set metrics_listen in the config or pass --addr");
            };
            let path = if live { "/healthz" } else { "/readyz" };
            match metrics::http::check(addr, path) {
                Ok(body) => {
                    println!("{body}");
                    Ok(())
                }
                Err(e) => {
                    eprintln!("{e:#}");
                    std::process::exit(1);
                }
            }
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
        Command::Export { config, data_dir, no_operational } => {
            let config = load_config(config.as_ref())?;
            init_logging(&config);
            export::run_command(&config, &data_dir, export::ExportOptions { operational: !no_operational })
        }
        Command::Backup { config, data_dir, to } => {
            let config = load_config(config.as_ref())?;
            init_logging(&config);
            backup::run_backup_command(&config, &data_dir, &to)
        }
        Command::Compact { config, data_dir } => {
            let config = load_config(config.as_ref())?;
            init_logging(&config);
            compact::run_command(&data_dir)
        }
        Command::Restore { config, from, data_dir, force } => {
            let config = load_config(config.as_ref())?;
            init_logging(&config);
            backup::run_restore_command(&config, &from, &data_dir, force)
        }
    }
}
