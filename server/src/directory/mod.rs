//! What the router is given to serve with: its `DirectoryConfig`, built from the parsed
//! config and the opened data directory. One place for the serving path (serve/runtime.rs)
//! and the offline tools (data/import.rs, data/load.rs, main.rs) alike, so that neither
//! reaches into the other.

pub mod refint;
pub mod unique;

use std::sync::Arc;

use ferrodir_proto::schema::DnNormalizer;
use ferrodir_proto::NormDn;
use ferrodir_router::acl::{self, RuleText};
use ferrodir_router::{CookieKey, DirectoryConfig, HashPool, PasswordConfig, RemoteReads, Suffix};

use crate::config::Config;
use crate::data::store::Store;

/// For the offline paths (loading the example data, import): they store values as given
/// and check none, so they need no threads.
pub fn offline_hash_pool() -> Arc<HashPool> {
    Arc::new(HashPool::offline())
}

pub fn directory_config(
    config: &Config,
    store: &Store,
    hash_pool: Arc<HashPool>,
) -> anyhow::Result<DirectoryConfig> {
    // Every configured DN is normalised once, here, by the schema's rules.
    let dn_rules = store.rules.dn();
    let names = Names::parse(config, dn_rules)?;
    let access_rules = Arc::new(access_rules(config, &store.rules)?);
    let suffix_dns: Vec<NormDn> =
        names.suffixes.iter().map(|s| NormDn::new(s.dn.clone(), dn_rules)).collect();
    let unique = Arc::new(unique::resolve(config, &store.rules, &store.indexes, &suffix_dns)?);
    Ok(DirectoryConfig {
        suffixes: names.suffixes,
        root_dn: names.root_dn,
        root_password: (!config.root_password.is_empty()).then(|| config.root_password.clone()),
        passwords: PasswordConfig::new(config.password_hash_on_write(), config.storage_scheme()?, hash_pool)
            .with_upgrade_on_bind(config.password_upgrade_on_bind),
        access_rules,
        require_tls_for_binds: config.require_tls_for_binds,
        tls_offered: config.tls.is_some(),
        authz_rules: authz_rules(config)?,
        authz_policy: config.sasl.authz_policy.router(),
        limits: config.limits.resolve(dn_rules)?,
        search_chunks_in_flight: config.limits.search_chunks_in_flight,
        sort: sort_limits(&config.limits),
        vendor_version: env!("CARGO_PKG_VERSION").to_string(),
        remote_reads: remote_reads(config)?,
        schema: store.schema.clone(),
        rules: store.rules.clone(),
        blooms: store.blooms.clone(),
        indexes: store.indexes.clone(),
        monitor_readers: names.monitor_readers,
        monitor: Arc::default(),
        syncrepl: Arc::default(),
        unique,
        // The offline tools never page: a key for this run; `serve` reads the kept one.
        paged: ferrodir_router::PagedConfig {
            key: CookieKey::random(),
            cookie_idle_max_s: config.limits.paged_cookie_idle_max_s,
        },
        refint: refint::resolve(config, store)?,
        memberof: memberof_groups(config, store)?,
        replicated: replicated_areas(config, dn_rules)?,
        ppolicy: ppolicy(config, dn_rules)?,
        changelog: config.changelog.enabled,
        dynlist: ferrodir_router::DynlistConfig { members_max: config.dynlist.members_max },
        disk: Arc::new(ferrodir_router::disk::DiskSpace::new(config.limits.disk_free_min_bytes)),
    })
}

/// `current` with what a reload may change taken from `next` (a re-read config file):
/// access rules, limits (`disk_free_min_bytes` included, applied at the disk monitor's
/// next look), authorization rules, cn=Monitor's readers, the root password, TLS for
/// binds, uniqueness. What lives for the server's life (its caches, counters,
/// claims, paged-results key, schema and indexes) is kept. Errors name what does not
/// validate; nothing changes then.
pub fn reloaded(current: &DirectoryConfig, next: &Config) -> anyhow::Result<DirectoryConfig> {
    let dn_rules = current.rules.dn();
    let names = Names::parse(next, dn_rules)?;
    let suffix_dns: Vec<NormDn> =
        current.suffixes.iter().map(|s| NormDn::new(s.dn.clone(), dn_rules)).collect();
    let rules = unique::resolve(next, &current.rules, &current.indexes, &suffix_dns)?;
    let mut out = current.clone();
    out.access_rules = Arc::new(access_rules(next, &current.rules)?);
    out.limits = next.limits.resolve(dn_rules)?;
    out.authz_rules = authz_rules(next)?;
    out.authz_policy = next.sasl.authz_policy.router();
    out.monitor_readers = names.monitor_readers;
    out.root_password = (!next.root_password.is_empty()).then(|| next.root_password.clone());
    out.require_tls_for_binds = next.require_tls_for_binds;
    out.search_chunks_in_flight = next.limits.search_chunks_in_flight;
    out.sort = sort_limits(&next.limits);
    out.unique = Arc::new(current.unique.with_rules(rules.rules));
    out.passwords = current.passwords.clone().with_upgrade_on_bind(next.password_upgrade_on_bind);
    out.ppolicy = ppolicy(next, dn_rules)?;
    out.changelog = next.changelog.enabled;
    out.dynlist = ferrodir_router::DynlistConfig { members_max: next.dynlist.members_max };
    // Last: nothing above may fail once the shared value changed.
    out.disk.set_min(next.limits.disk_free_min_bytes);
    Ok(out)
}

/// `[ppolicy]`, its DN normalised by the schema's rules.
fn ppolicy(config: &Config, dn_rules: &DnNormalizer) -> anyhow::Result<ferrodir_router::PpolicyConfig> {
    let default_policy = match &config.ppolicy.default_policy {
        Some(text) => Some(
            dn_rules.parse(text).map_err(|e| anyhow::anyhow!("bad ppolicy.default_policy {text:?}: {e}"))?,
        ),
        None => None,
    };
    Ok(ferrodir_router::PpolicyConfig { default_policy })
}

/// The DNs the config names, normalised: suffixes, the root identity, cn=Monitor's readers.
struct Names {
    suffixes: Vec<Suffix>,
    root_dn: Option<NormDn>,
    monitor_readers: Vec<NormDn>,
}

impl Names {
    fn parse(config: &Config, dn_rules: &DnNormalizer) -> anyhow::Result<Self> {
        let mut suffixes = Vec::new();
        for text in &config.suffixes {
            let dn = dn_rules.parse(text).map_err(|e| anyhow::anyhow!("bad suffix {text:?}: {e}"))?;
            suffixes.push(Suffix::new(dn.dn, dn_rules));
        }
        let root_dn = if config.root_dn.is_empty() {
            None
        } else {
            Some(dn_rules.parse(&config.root_dn).map_err(|e| anyhow::anyhow!("bad root_dn: {e}"))?)
        };
        let monitor_readers = config
            .monitor_readers
            .iter()
            .map(|text| {
                dn_rules.parse(text).map_err(|e| anyhow::anyhow!("bad monitor_readers DN {text:?}: {e}"))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { suffixes, root_dn, monitor_readers })
    }
}

fn authz_rules(config: &Config) -> anyhow::Result<Vec<ferrodir_router::AuthzRule>> {
    config
        .authz_regexp
        .iter()
        .map(|rule| {
            ferrodir_router::AuthzRule::new(&rule.pattern, &rule.replace)
                .map_err(|e| anyhow::anyhow!("authz_regexp {:?}: {e}", rule.pattern))
        })
        .collect()
}

fn sort_limits(limits: &crate::config::Limits) -> ferrodir_router::SortLimits {
    ferrodir_router::SortLimits {
        entries_max: limits.sort_entries_max,
        keys_max: limits.sort_keys_max,
        sessions_per_connection_max: limits.sort_sessions_per_connection_max,
        session_idle: std::time::Duration::from_secs(limits.sort_session_idle_s),
    }
}

fn remote_reads(config: &Config) -> anyhow::Result<RemoteReads> {
    match config.remote_reads.as_str() {
        "message" => Ok(RemoteReads::Message),
        "snapshot" => Ok(RemoteReads::Snapshot),
        other => anyhow::bail!("unknown remote_reads {other:?}: use \"message\" or \"snapshot\""),
    }
}

/// The areas `[[replication]]` consumers write, where local writes are referred to the provider.
fn replicated_areas(
    config: &Config,
    dn_rules: &DnNormalizer,
) -> anyhow::Result<Vec<ferrodir_router::ReplicatedArea>> {
    config
        .replication
        .iter()
        .map(|r| {
            Ok(ferrodir_router::ReplicatedArea {
                base: dn_rules
                    .parse(&r.search_base)
                    .map_err(|e| anyhow::anyhow!("bad search_base {:?}: {e}", r.search_base))?,
                update_referral: r.update_referral.clone(),
                writable: config.multi_provider,
            })
        })
        .collect()
}

/// memberOf's source (router::op::memberof): every shard's engine. Its values come from
/// the equality postings of member and uniqueMember, which `memberof` keeps configured
/// (`Config::index_directives`); on a data directory that had neither, they stay
/// incomplete until `ferrodir reindex` builds them, and the start says so.
fn memberof_groups(config: &Config, store: &Store) -> anyhow::Result<Option<Arc<ferrodir_shard::Groups>>> {
    if !config.memberof {
        return Ok(None);
    }
    for canonical in ferrodir_shard::MEMBER_TYPES {
        if !store.indexes.usable(canonical, ferrodir_shard::IndexKind::Equality) {
            tracing::warn!(
                attr = canonical,
                "memberOf and (memberOf=...) miss older memberships until `ferrodir reindex` builds this index"
            );
        }
    }
    let options = ferrodir_shard::MemberOfOptions {
        transitive: config.memberof_transitive,
        chain_depth_max: config.memberof_chain_depth_max,
        chain_entries_max: config.memberof_chain_entries_max,
    };
    let groups = ferrodir_shard::Groups::new(store.engines.clone(), store.rules.clone(), options);
    Ok(Some(Arc::new(groups)))
}

/// The access rules, compiled once: `[[access_rules]]` when given, else the built-in set
/// `access` names. A rule that doesn't compile stops the server, naming the rule.
fn access_rules(config: &Config, rules: &Arc<ferrodir_shard::RuleTable>) -> anyhow::Result<acl::RuleSet> {
    let (texts, origin) = if config.access_rules.is_empty() {
        let texts = acl::profile(&config.access).ok_or_else(|| {
            anyhow::anyhow!("unknown access profile {:?}: use \"default\" or \"open-read\"", config.access)
        })?;
        (texts, config.access.clone())
    } else {
        let texts =
            config.access_rules.iter().map(|r| RuleText { to: r.to.clone(), by: r.by.clone() }).collect();
        (texts, "access_rules".to_string())
    };
    acl::compile(&texts, rules.clone(), &origin).map_err(|e| anyhow::anyhow!("[[access_rules]]: {e}"))
}
