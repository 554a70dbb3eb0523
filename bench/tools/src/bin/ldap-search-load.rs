//! `ldap-search-load`: one search repeated in a closed loop, with the paged-results and
//! sort controls ldclt cannot send; prints one line of JSON. See
//! `ferrodir_bench::searchload`.

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use ferrodir_bench::searchload::{self, Config, SortKey};
use ferrodir_proto::filter::parse_filter;
use ferrodir_proto::message::SearchScope;

#[derive(Parser)]
#[command(
    name = "ldap-search-load",
    about = "One search in a closed loop, optionally paged (RFC 2696) and sorted (RFC 2891), both critical",
    after_help = "Prints one line: {\"ops\":..,\"entries\":..,\"pages\":..,\"seconds\":..,\"ops_per_s\":..,\
                  \"entries_per_s\":..,\"p50_us\":..,\"p99_us\":..,\"mean_us\":..,\"page_p50_us\":..,\
                  \"page_p99_us\":..,\"errors\":..[,\"result_code\":..][,\"first_error\":..],\"client_cpu_s\":..}; \
                  with --check one operation, every entry decoded: {\"entries\":..,\"pages\":..,\
                  \"result_code\":..,\"diagnostic\":..,\"sort_result\":..,\"in_order\":..,\
                  \"order_digest\":..,\"set_digest\":..,\"first_dns\":[..],\"page_ms\":[..]}"
)]
struct Cli {
    /// ldap://host:port of the server (plain LDAP only).
    #[arg(long)]
    url: String,
    #[arg(long)]
    base: String,
    #[arg(long, default_value = "sub", value_parser = ["base", "one", "sub"])]
    scope: String,
    /// RFC 4515 filter.
    #[arg(long, default_value = "(objectClass=*)")]
    filter: String,
    /// Attributes to return, comma-separated [default: all user attributes].
    #[arg(long, default_value = "")]
    attributes: String,
    /// Page size of the paged-results control; 0 sends none. An operation is then a
    /// whole pass, page after page, to the empty cookie.
    #[arg(long, default_value_t = 0)]
    page_size: u32,
    /// Server-side sort by [-]attribute[:orderingRule] (reverse with -), as ldapsearch -E sss=.
    #[arg(long)]
    sort: Option<String>,
    /// Each operation must return exactly this many entries, or it counts as an error.
    #[arg(long)]
    expect_entries: Option<u64>,
    #[arg(long)]
    bind_dn: Option<String>,
    #[arg(long, default_value = "")]
    password: String,
    #[arg(long, default_value_t = 1)]
    connections: usize,
    #[arg(long, default_value_t = 10.0)]
    duration_s: f64,
    #[arg(long, default_value_t = u64::MAX)]
    count_max: u64,
    /// The longest wait for any one response message.
    #[arg(long, default_value_t = 30_000)]
    op_timeout_ms: u64,
    /// One operation, every entry decoded; print what came back instead of timing.
    #[arg(long)]
    check: bool,
}

fn config(cli: &Cli) -> anyhow::Result<Config> {
    anyhow::ensure!(
        cli.duration_s.is_finite() && cli.duration_s > 0.0 && cli.duration_s <= 86_400.0,
        "--duration-s must be in (0, 86400]"
    );
    let address = ferrodir_bench::latency::parse_ldap_url(&cli.url)?;
    let scope = match cli.scope.as_str() {
        "base" => SearchScope::BaseObject,
        "one" => SearchScope::SingleLevel,
        _ => SearchScope::WholeSubtree,
    };
    Ok(Config {
        address,
        bind: cli.bind_dn.clone().map(|dn| (dn, cli.password.clone())),
        base: cli.base.clone(),
        scope,
        filter: parse_filter(&cli.filter).map_err(|e| anyhow::anyhow!("--filter {:?}: {e}", cli.filter))?,
        attributes: cli
            .attributes
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect(),
        page_size: cli.page_size,
        sort: cli.sort.as_deref().map(str::parse::<SortKey>).transpose()?,
        expect_entries: cli.expect_entries,
        connections: cli.connections,
        duration: Duration::from_secs_f64(cli.duration_s),
        count_max: cli.count_max,
        op_timeout: Duration::from_millis(cli.op_timeout_ms),
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = config(&cli)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let json = if cli.check {
        runtime.block_on(searchload::check(&config)).map(|r| r.to_json())
    } else {
        runtime.block_on(searchload::run(config)).map(|r| r.to_json())
    }
    .with_context(|| format!("against {}", cli.url))?;
    println!("{json}");
    Ok(())
}
