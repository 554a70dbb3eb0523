//! The `ferrodir` binary: the command line (serve, import, export, ...) and logging, over
//! the `ferrodir_server` library. SIGTERM and SIGINT stop `ferrodir serve` (the shutdown
//! it passes to [`ferrodir_server::serve`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use ferrodir_server::{commands, Config, Listen};

/// mimalloc instead of glibc's malloc: the import pipeline frees on one thread what another
/// allocated (parsed entries travel from parse workers to shard writers), which glibc's
/// arenas handle with locks and heap trimming; with mimalloc `ferrodir import` of 100k
/// entries took about a fifth less CPU (docs/BENCHMARKS.md, "Import").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
        progress: commands::ProgressMode,
        /// Memory for sorting the index keys, all shards together (K, M, G: binary units);
        /// past it, sorted runs go to files in the data directory being made.
        #[arg(long, value_parser = commands::parse_memory_size, default_value_t = commands::SORT_MEMORY_DEFAULT_BYTES)]
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
    /// Ask the server serving DIR to re-read its config file (as SIGHUP does): access
    /// rules, limits, uniqueness, TLS files... Prints what happened; exits non-zero when the
    /// file was refused (the running configuration then stays).
    Reload {
        #[arg(long)]
        config: Option<PathBuf>,
        /// The served data directory (default: the config's `data_dir`).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Give the free space inside the data directory's files back to the filesystem
    /// (offline: stop the server first). The data stays the same.
    Compact {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Print a password hashed with the config's password_scheme (default {ARGON2}), for
    /// root_password or a userPassword value, like slappasswd. The password is read from
    /// the terminal (not echoed, asked twice) or the first line of standard input; never
    /// from an argument.
    HashPassword {
        /// Take password_scheme from this config file.
        #[arg(long)]
        config: Option<PathBuf>,
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
        None => Ok(Config::embedded()),
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
    // Every file and directory this process makes is its user's alone, whatever umask it
    // was started with: the data directory's files (shards, write logs, intent log,
    // manifest, paged-cookie key, import's sort runs), backups, the access log. They hold
    // password hashes. The systemd unit sets the same (UMask=0077); this covers every other
    // way of starting it. The ldapi socket is made 0666 on purpose (serve/listeners.rs).
    // SAFETY: umask only sets this process's file mode creation mask.
    unsafe { libc::umask(0o077) };
    match cli.command {
        Command::Serve { config, listen, data_dir } => serve(config.as_ref(), listen, data_dir),
        Command::Import { config, data_dir, keep_going, progress, sort_memory, file } => {
            let config = start(config.as_ref())?;
            let args = commands::ImportArgs {
                data_dir: &data_dir,
                file: &file,
                keep_going,
                mode: progress,
                sort_memory_bytes: sort_memory,
            };
            commands::import(&config, args)
        }
        Command::Verify { config, data_dir } => commands::verify(&start(config.as_ref())?, &data_dir),
        Command::Healthcheck { config, addr, live } => healthcheck(config.as_ref(), addr, live),
        Command::Reindex { config, data_dir } => commands::reindex(&start(config.as_ref())?, &data_dir),
        Command::Export { config, data_dir, no_operational } => {
            commands::export(&start(config.as_ref())?, &data_dir, !no_operational)
        }
        Command::Backup { config, data_dir, to } => {
            commands::backup(&start(config.as_ref())?, &data_dir, &to)
        }
        Command::Reload { config, data_dir } => {
            let config = start(config.as_ref())?;
            let summary = commands::reload(&data_dir.unwrap_or(config.data_dir))?;
            println!("{summary}");
            Ok(())
        }
        Command::Compact { config, data_dir } => {
            start(config.as_ref())?;
            commands::compact(&data_dir)
        }
        Command::HashPassword { config } => commands::hash_password(&load_config(config.as_ref())?),
        Command::Restore { config, from, data_dir, force } => {
            commands::restore(&start(config.as_ref())?, &from, &data_dir, force)
        }
    }
}

/// What every command but healthcheck does first: its config, then logging as it says.
fn start(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    let config = load_config(path)?;
    init_logging(&config);
    Ok(config)
}

/// `ferrodir serve`: the config with the command line's overrides, until SIGTERM or SIGINT.
fn serve(
    path: Option<&PathBuf>,
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    let mut config = load_config(path)?;
    if let Some(listen) = listen {
        config.listen = listen;
    }
    if let Some(dir) = data_dir {
        config.data_dir = dir;
    }
    init_logging(&config);
    ferrodir_server::serve(config, Listen::Configured, shutdown_signal())
}

/// `ferrodir healthcheck`: exits 1, with the reason on stderr, when the server isn't ready.
fn healthcheck(path: Option<&PathBuf>, addr: Option<SocketAddr>, live: bool) -> anyhow::Result<()> {
    let config = load_config(path)?;
    let Some(addr) = addr.or(config.metrics_listen) else {
        anyhow::bail!("no endpoint to ask: set metrics_listen in the config or pass --addr");
    };
    match commands::healthcheck(addr, live) {
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

/// SIGTERM (systemd's stop, `kill`) or SIGINT (Ctrl-C). Installed when the accept loop
/// first polls it; before that, either signal ends the process at once.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}
