//! `ldap-login-storm`: logins (find the user, bind as the user, read the user's groups by
//! member and by memberOf) in closed loops on pooled connections; prints one line of JSON.
//! See `ferrodir_bench::loginstorm`.

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use ferrodir_bench::latency::{parse_ldap_url, parse_range};
use ferrodir_bench::loginstorm::{self, Config};
use ferrodir_bench::template::Template;

#[derive(Parser)]
#[command(
    name = "ldap-login-storm",
    about = "Login storm: per login a service-account search for the user, a bind as the user, \
             a search of the user's groups by member and a read of its memberOf, on pooled connections",
    after_help = "Prints one line: {\"logins\":..,\"seconds\":..,\"logins_per_s\":..,\"p50_us\":..,\
                  \"p99_us\":..,\"p999_us\":..,\"mean_us\":..,\"failures\":..,\"failures_by_code\":{\"49\":..},\
                  \"steps\":[\"find\",\"bind\",\"groups\",\"memberof\"],\"step_p50_us\":[..],\"step_p99_us\":[..],\
                  \"groups_per_login\":..,\"workers\":..,\"search_connections\":..,\"bind_connections\":..\
                  [,\"first_error\":..],\"client_cpu_s\":..}"
)]
struct Cli {
    /// ldap://host:port of the server (plain LDAP only).
    #[arg(long)]
    url: String,
    /// The service account the search pool binds as (anonymous when left out).
    #[arg(long)]
    service_dn: Option<String>,
    #[arg(long, default_value = "")]
    service_password: String,
    #[arg(long, default_value = "ou=people,dc=example,dc=com")]
    people_base: String,
    #[arg(long, default_value = "ou=groups,dc=example,dc=com")]
    groups_base: String,
    /// The uid of user n: {} / {:N} / {:0N} is replaced by n.
    #[arg(long, default_value = "user{:05}")]
    uid_template: String,
    /// The password of user n.
    #[arg(long, default_value = "password{:05}")]
    password_template: String,
    /// User numbers to draw from, START..END (END excluded).
    #[arg(long, default_value = "0..10000")]
    range: String,
    /// Draw users with a Zipf distribution of this exponent (0: uniform).
    #[arg(long, default_value_t = 0.0)]
    zipf: f64,
    /// Concurrent login workers, each one login at a time.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Connections in the service-account pool [default: one per worker].
    #[arg(long, default_value_t = 0)]
    search_connections: usize,
    /// Connections in the bind pool [default: one per worker].
    #[arg(long, default_value_t = 0)]
    bind_connections: usize,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    /// Stop after this many logins (over all workers).
    #[arg(long, default_value_t = u64::MAX)]
    count_max: u64,
    /// The longest wait for any one response message.
    #[arg(long, default_value_t = 10_000)]
    op_timeout_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Do not fail a login whose memberOf count differs from its groups-by-member count.
    #[arg(long)]
    no_memberof_check: bool,
    /// Tokio worker threads (1: a single-threaded runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

fn config(cli: &Cli) -> anyhow::Result<Config> {
    anyhow::ensure!(
        cli.duration_s.is_finite() && cli.duration_s > 0.0 && cli.duration_s <= 86_400.0,
        "--duration-s must be in (0, 86400]"
    );
    Ok(Config {
        address: parse_ldap_url(&cli.url)?,
        service: cli.service_dn.clone().map(|dn| (dn, cli.service_password.clone())),
        people_base: cli.people_base.clone(),
        groups_base: cli.groups_base.clone(),
        uid: Template::parse(&cli.uid_template)?,
        password: Template::parse(&cli.password_template)?,
        range: parse_range(&cli.range)?,
        zipf_s: cli.zipf,
        workers: cli.workers,
        search_connections: cli.search_connections,
        bind_connections: cli.bind_connections,
        duration: Duration::from_secs_f64(cli.duration_s),
        count_max: cli.count_max,
        op_timeout: Duration::from_millis(cli.op_timeout_ms),
        seed: cli.seed,
        check_memberof: !cli.no_memberof_check,
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = config(&cli)?;
    anyhow::ensure!((1..=64).contains(&cli.threads), "--threads must be 1..=64");
    let runtime = if cli.threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(cli.threads).enable_all().build()
    }
    .context("starting the tokio runtime")?;
    let report = runtime.block_on(loginstorm::run(config)).with_context(|| format!("against {}", cli.url))?;
    println!("{}", report.to_json());
    Ok(())
}
