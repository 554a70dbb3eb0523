//! `ldap-isolation`: unindexed scans beside a lookup-and-modify probe (load mode), or scans
//! stopped by Abandon, a close, sizeLimit or timeLimit (stop mode); prints one line of JSON.
//! See `ferrodir_bench::isolation`.

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use ferrodir_bench::isolation::{self, parse_filter, LoadConfig, StopConfig};
use ferrodir_bench::latency::{parse_ldap_url, parse_range};
use ferrodir_bench::template::Template;

#[derive(Parser)]
#[command(
    name = "ldap-isolation",
    about = "Unindexed scans against a lookup/modify probe, or scans stopped early (issue #9)",
    after_help = "Prints one line of JSON; see bench/tools/README.md for its fields."
)]
struct Cli {
    /// load: scanners plus the probe; stop: scans stopped by Abandon, close, size/time limit.
    #[arg(long, value_parser = ["load", "stop"])]
    mode: String,
    /// ldap://host:port of the server.
    #[arg(long)]
    url: String,
    /// Where the scans start (subtree): the suffix.
    #[arg(long, default_value = "dc=example,dc=com")]
    base: String,
    /// Stop after this many seconds (at most 600).
    #[arg(long, default_value_t = 20.0)]
    duration_s: f64,
    /// The scans' filter: unindexed, matching nothing. attr=value or attr=*.
    #[arg(long, default_value = "description=nomatch")]
    scan_filter: String,
    /// load: anonymous scanner connections.
    #[arg(long, default_value_t = 4)]
    scan_connections: usize,
    /// load: scans outstanding at once on each scanner connection (pipelined).
    #[arg(long, default_value_t = 1)]
    scans_per_connection: usize,
    /// load: the probe sends nothing new after --duration-s; its last operation may take
    /// this much longer (the scanners go on meanwhile) before it counts as unanswered.
    #[arg(long, default_value_t = 10.0)]
    grace_s: f64,
    /// load: the probe starts this long after the scanners.
    #[arg(long, default_value_t = 1.0)]
    warmup_s: f64,
    /// load: the probe's base-scope lookups per second (0: none).
    #[arg(long, default_value_t = 20.0)]
    lookup_rate: f64,
    /// load: the probe's modifies per second (0: none).
    #[arg(long, default_value_t = 10.0)]
    modify_rate: f64,
    /// load: the DN of entry number n: {} / {:N} / {:0N} is replaced by n.
    #[arg(long, default_value = "uid=user{:05},ou=people,dc=example,dc=com")]
    base_template: String,
    /// load: entry numbers to pick from, START..END (END excluded).
    #[arg(long, default_value = "0..10000")]
    range: String,
    /// load: the probe binds as this DN (it must be allowed to modify the entries).
    #[arg(long, default_value = "cn=admin,dc=example,dc=com")]
    bind_dn: String,
    #[arg(long, default_value = "secret")]
    password: String,
    /// load: the attribute the modifies replace.
    #[arg(long, default_value = "description")]
    modify_attribute: String,
    /// load: the modifies write PREFIX<sequence>-<random>; it must not match --scan-filter.
    #[arg(long, default_value = "probe-")]
    modify_value_prefix: String,
    /// stop: the sizeLimit=1 search's filter: unindexed, matching many entries.
    #[arg(long, default_value = "givenName=User")]
    many_filter: String,
    /// stop: attempts per kind of stop, at most.
    #[arg(long, default_value_t = 200)]
    stop_count_max: u64,
    /// stop: Abandon or close this many milliseconds after the search, START..END.
    #[arg(long, default_value = "5..51")]
    stop_delay_ms: String,
    /// stop: pause after each attempt (milliseconds).
    #[arg(long, default_value_t = 200)]
    stop_pause_ms: u64,
    /// stop: try timeLimit=1 only if a full scan takes at least this long (milliseconds).
    #[arg(long, default_value_t = 1500)]
    time_limit_scan_min_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Tokio worker threads of the client (1: a single-threaded runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

fn seconds(value: f64, name: &str) -> anyhow::Result<Duration> {
    anyhow::ensure!(value.is_finite() && (0.0..=600.0).contains(&value), "--{name} must be in [0, 600]");
    Ok(Duration::from_secs_f64(value))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(cli.threads >= 1, "--threads must be at least 1");
    let address = parse_ldap_url(&cli.url)?;
    let duration = seconds(cli.duration_s, "duration-s")?;
    let scan_filter = parse_filter(&cli.scan_filter)?;
    let runtime = if cli.threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(cli.threads).enable_all().build()
    }
    .context("starting the tokio runtime")?;
    let line = if cli.mode == "load" {
        let config = LoadConfig {
            address,
            base: cli.base.clone(),
            scan_filter,
            scan_connections: cli.scan_connections,
            scans_per_connection: cli.scans_per_connection,
            duration,
            grace: seconds(cli.grace_s, "grace-s")?,
            warmup: seconds(cli.warmup_s, "warmup-s")?,
            lookup_rate: cli.lookup_rate,
            modify_rate: cli.modify_rate,
            dn_template: Template::parse(&cli.base_template)?,
            range: parse_range(&cli.range)?,
            bind_dn: cli.bind_dn.clone(),
            password: cli.password.clone(),
            modify_attribute: cli.modify_attribute.clone(),
            modify_value_prefix: cli.modify_value_prefix.clone(),
            seed: cli.seed,
        };
        runtime
            .block_on(isolation::run_load(&config))
            .with_context(|| format!("against {}", cli.url))?
            .to_json()
    } else {
        let config = StopConfig {
            address,
            base: cli.base.clone(),
            scan_filter,
            many_filter: parse_filter(&cli.many_filter)?,
            duration,
            count_max: cli.stop_count_max,
            delay_ms: parse_range(&cli.stop_delay_ms)?,
            pause: Duration::from_millis(cli.stop_pause_ms),
            time_limit_scan_min: Duration::from_millis(cli.time_limit_scan_min_ms),
            seed: cli.seed,
        };
        runtime
            .block_on(isolation::run_stop(&config))
            .with_context(|| format!("against {}", cli.url))?
            .to_json()
    };
    println!("{line}");
    Ok(())
}
