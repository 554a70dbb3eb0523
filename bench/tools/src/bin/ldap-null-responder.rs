//! `ldap-null-responder --listen 127.0.0.1:PORT [--threads N]`: an LDAP server that answers
//! every request with a canned success and does nothing else; see
//! `ferrodir_bench::responder`. Prints `listening on ADDR` once it accepts connections.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Parser;
use tokio::net::TcpListener;

#[derive(Parser)]
#[command(
    name = "ldap-null-responder",
    about = "A do-nothing LDAP server: the ceiling of a load generator and loopback TCP"
)]
struct Cli {
    /// Address to listen on; port 0 picks a free one (printed on stdout).
    #[arg(long)]
    listen: String,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, default_value_t = 10_000)]
    connections_max: usize,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(cli.threads >= 1, "--threads must be at least 1");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async {
        let listener =
            TcpListener::bind(&cli.listen).await.with_context(|| format!("listening on {}", cli.listen))?;
        let address = listener.local_addr()?;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "listening on {address}")?;
        stdout.flush()?;
        tokio::select! {
            served = ferrodir_bench::responder::serve(listener, cli.connections_max) => Ok(served?),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}
