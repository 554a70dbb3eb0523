//! `ldap-repl-lag`: replication lag under a sustained write load, provider to consumer;
//! see `ferrodir_bench::repllag`.

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use ferrodir_bench::repllag::{self, Config, DURATION_MAX};
use ferrodir_bench::template::Template;

#[derive(Parser)]
#[command(
    name = "ldap-repl-lag",
    about = "Writes to a provider at a fixed rate and times when each sampled write shows on a consumer",
    after_help = "Prints one line: {\"writes\":..,\"seconds\":..,\"writes_per_s\":..,\"samples\":..,\
                  \"missing\":..,\"lag_p50_ms\":..,\"lag_p99_ms\":..,\"lag_max_ms\":..,\"write_errors\":..}"
)]
struct Cli {
    /// host:port of the provider (plain LDAP).
    #[arg(long)]
    provider: String,
    /// host:port of the consumer (plain LDAP).
    #[arg(long)]
    consumer: String,
    #[arg(long)]
    bind_dn: String,
    #[arg(long)]
    password: String,
    /// The DN of entry n: {} / {:N} / {:0N} is replaced by n.
    #[arg(long, default_value = "uid=user{:05},ou=people,dc=example,dc=com")]
    dn_template: String,
    /// The first entry number written.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// How many entries the writes go round.
    #[arg(long, default_value_t = 10_000)]
    entries: u64,
    /// Writes per second (one request at a time).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    #[arg(long, default_value_t = 30.0)]
    duration_s: f64,
    /// Every n-th write is timed on the consumer.
    #[arg(long, default_value_t = 5)]
    sample_every: u64,
    /// After the writes stop, how long the consumer may take to show the rest.
    #[arg(long, default_value_t = 60.0)]
    catch_up_s: f64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(
        cli.duration_s.is_finite() && cli.duration_s > 0.0 && cli.duration_s <= DURATION_MAX.as_secs_f64(),
        "--duration-s must be in (0, {}]",
        DURATION_MAX.as_secs()
    );
    anyhow::ensure!(
        cli.catch_up_s.is_finite() && (0.0..=600.0).contains(&cli.catch_up_s),
        "--catch-up-s must be in [0, 600]"
    );
    let config = Config {
        provider: cli.provider.clone(),
        consumer: cli.consumer.clone(),
        bind_dn: cli.bind_dn.clone(),
        password: cli.password.clone(),
        dn: Template::parse(&cli.dn_template)?,
        first: cli.first,
        entries: cli.entries,
        rate: cli.rate,
        duration: Duration::from_secs_f64(cli.duration_s),
        sample_every: cli.sample_every,
        catch_up: Duration::from_secs_f64(cli.catch_up_s),
    };
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting tokio")?;
    let report = runtime.block_on(repllag::run(&config)).context("measuring replication lag")?;
    println!("{}", report.to_json());
    Ok(())
}
