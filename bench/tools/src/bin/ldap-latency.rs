//! `ldap-latency`: a closed-loop LDAP client that prints one line of JSON with throughput
//! and latency percentiles; see `ferrodir_bench::latency`.

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use ferrodir_bench::latency::{self, parse_range, Config, Mode};
use ferrodir_bench::template::Template;
use ferrodir_bench::tls::{self, TlsClient, Transport};

#[derive(Parser)]
#[command(
    name = "ldap-latency",
    about = "Closed-loop LDAP client: one request in flight per connection, latency in an HDR histogram",
    after_help = "Prints one line: {\"ops\":..,\"seconds\":..,\"ops_per_s\":..,\"p50_us\":..,\
                  \"p99_us\":..,\"p999_us\":..,\"errors\":..,\"client_cpu_s\":..}, and with TLS \
                  \"tls\":\"TLSv1_3 <cipher suite> <group>\" at the end"
)]
struct Cli {
    /// ldap://host:port or ldaps://host:port of the server.
    #[arg(long)]
    url: String,
    /// base: base-scope search of the rendered DN; uid-sub: subtree search for its first
    /// RDN; rootdse: read the root DSE; bind: a simple bind per operation; connect-bind: a
    /// new connection per operation (TLS handshake included), bind, unbind, close.
    #[arg(long, value_parser = ["base", "uid-sub", "rootdse", "bind", "connect-bind"])]
    mode: String,
    /// ldap:// only: StartTLS on every connection before anything else.
    #[arg(long)]
    starttls: bool,
    /// PEM file of the CAs that sign the server's certificate (needed for ldaps:// and
    /// --starttls).
    #[arg(long)]
    ca_file: Option<std::path::PathBuf>,
    /// The name the server's certificate must carry [default: the URL's host].
    #[arg(long)]
    server_name: Option<String>,
    /// The DN of entry number n: {} / {:N} / {:0N} is replaced by n.
    #[arg(long, default_value = "uid=user{:05},ou=people,dc=example,dc=com")]
    base_template: String,
    /// uid-sub: where the subtree search starts [default: the template's parent].
    #[arg(long)]
    search_base: Option<String>,
    /// Stop after this many operations over all connections.
    #[arg(long, default_value_t = 100_000_000)]
    count_max: u64,
    /// Entry numbers to pick from, START..END (END excluded).
    #[arg(long, default_value = "0..10000")]
    range: String,
    /// Draw entries by Zipf's law with this exponent (e.g. 1.0: the k-th hottest entry is
    /// asked 1/k as often as the hottest) instead of uniformly; the hot entries are spread
    /// over the range (ferrodir_bench::zipf).
    #[arg(long)]
    zipf: Option<f64>,
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    /// Bind as this DN on every connection before measuring (bind mode: bind as this DN
    /// instead of the rendered one).
    #[arg(long)]
    bind_dn: Option<String>,
    /// Password for --bind-dn or bind mode; may hold the placeholder, e.g. password{}.
    #[arg(long)]
    password: Option<String>,
    /// A request unanswered this long ends its connection (counted as an error).
    #[arg(long, default_value_t = 5_000)]
    op_timeout_ms: u64,
    /// Seed of the entry choice; connection i uses stream i of it.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Tokio worker threads of the client (1: a single-threaded runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

fn config(cli: &Cli) -> anyhow::Result<Config> {
    anyhow::ensure!(
        cli.duration_s.is_finite() && cli.duration_s > 0.0 && cli.duration_s <= 86_400.0,
        "--duration-s must be in (0, 86400]"
    );
    let (address, transport) = match tls::parse_url(&cli.url)? {
        (address, Transport::Plain) if cli.starttls => (address, Transport::StartTls),
        (_, Transport::Ldaps) if cli.starttls => anyhow::bail!("--starttls goes with ldap://, not ldaps://"),
        other => other,
    };
    let tls = match (&cli.ca_file, transport) {
        (None, Transport::Plain) => None,
        (None, _) => anyhow::bail!("ldaps:// and --starttls need --ca-file"),
        (Some(ca_file), _) => {
            let name = cli.server_name.as_deref().unwrap_or_else(|| tls::host_of(&address));
            Some(TlsClient::new(ca_file, name)?)
        }
    };
    Ok(Config {
        address,
        transport,
        tls,
        mode: cli.mode.parse::<Mode>()?,
        base_template: Template::parse(&cli.base_template)?,
        search_base: cli.search_base.clone(),
        bind_dn: cli.bind_dn.clone(),
        password: cli.password.as_deref().map(Template::parse).transpose()?,
        count_max: cli.count_max,
        range: parse_range(&cli.range)?,
        zipf: cli.zipf,
        connections: cli.connections,
        duration: Duration::from_secs_f64(cli.duration_s),
        op_timeout: Duration::from_millis(cli.op_timeout_ms),
        seed: cli.seed,
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = config(&cli)?;
    anyhow::ensure!(cli.threads >= 1, "--threads must be at least 1");
    let runtime = if cli.threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(cli.threads).enable_all().build()
    }
    .context("starting the tokio runtime")?;
    let report = runtime.block_on(latency::run(&config)).with_context(|| format!("against {}", cli.url))?;
    println!("{}", report.to_json());
    Ok(())
}
