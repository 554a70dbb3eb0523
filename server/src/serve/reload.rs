//! Reloading the configuration while serving: SIGHUP (systemd's ExecReload) and `ferrodir
//! reload` (through the admin socket, which answers with the outcome).
//!
//! A reload re-reads the config file the server started with and checks it whole first; a
//! file that does not parse, check or compile changes nothing, and the log (and `ferrodir
//! reload`) says why. Otherwise each worker is handed its own copy of the new directory
//! configuration (`Worker::set_config`): an operation takes the configuration once when it
//! starts, so operations already running finish under the old settings and new ones use the
//! new; no connection is touched. What changes: access rules, limits, authorization rules,
//! cn=Monitor's readers, the root password, `require_tls_for_binds`, `[[unique]]`,
//! `[ppolicy]`, the TLS certificate and key, and `index`: a removed index stops being used
//! at once, an added one is built online and used once complete (serve/indexing.rs).
//! `[changelog]` (its shards are told, each by its own worker) and the audit log's file
//! (its writer moves there; the new file is opened first, a failure refuses the reload).
//! What needs a restart (listeners, shards, suffixes, schema, replication, refint,
//! memberOf, turning the audit log on or off) is named in a warning and left as it was.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use actix_rt::ArbiterHandle;
use ferrodir_router::DirectoryConfig;
use ferrodir_shard::storage::KvEngine;
use ferrodir_shard::SkeletonCell;

use crate::config::Config;
use crate::metrics::{Metrics, ReloadCounts};
use crate::serve::indexing::IndexBuilder;
use crate::serve::tls::TlsContext;

pub struct Reloader {
    /// The file the server started with; None: the embedded default (nothing to re-read).
    source: Option<PathBuf>,
    /// The file's settings and the directory configuration in force, replaced together.
    current: Mutex<(Config, Arc<DirectoryConfig>)>,
    /// Every worker's thread, to hand each its copy, and what hands it over there (the
    /// serving runtime's: it knows where a thread keeps its worker).
    workers: WorkerThreads,
    /// For the uniqueness check of new `[[unique]]` rules over the data.
    engines: Vec<Arc<dyn KvEngine>>,
    skeleton: Arc<SkeletonCell>,
    /// Set once the listeners are open (the TLS context is made with them).
    tls: Mutex<Option<Arc<TlsContext>>>,
    pub counts: Arc<ReloadCounts>,
    /// The online index builds, and what their progress is read from (the shards' entries).
    indexes: Arc<IndexBuilder>,
    metrics: Arc<Metrics>,
    /// Moves the audit log's writer; None when the log is off.
    audit: Option<crate::serve::logfile::Mover>,
}

/// What a reloader hands its work to: every worker's thread, and how to reach the worker
/// there (the serving runtime's: it knows where a thread keeps its worker).
pub struct WorkerThreads {
    pub handles: Vec<ArbiterHandle>,
    pub deliver: fn(Arc<DirectoryConfig>),
    pub current: fn() -> Option<std::rc::Rc<ferrodir_router::Worker>>,
}

impl Reloader {
    pub fn new(
        config: &Config,
        directory: Arc<DirectoryConfig>,
        workers: WorkerThreads,
        engines: Vec<Arc<dyn KvEngine>>,
        skeleton: Arc<SkeletonCell>,
        indexes: Arc<IndexBuilder>,
        metrics: Arc<Metrics>,
        audit: Option<crate::serve::logfile::Mover>,
    ) -> Self {
        Self {
            source: config.source.clone(),
            current: Mutex::new((config.clone(), directory)),
            workers,
            engines,
            skeleton,
            tls: Mutex::new(None),
            counts: metrics.reloads.clone(),
            indexes,
            metrics,
            audit,
        }
    }

    /// Starts the online index builder on the first worker's thread when it has work and
    /// is not running already (a running one picks up a new target by itself).
    pub fn start_index_build(self: &Arc<Self>) {
        if !self.indexes.has_work() || !self.indexes.claim() {
            return;
        }
        let Some(handle) = self.workers.handles.first() else { return };
        let (reloader, current) = (self.clone(), self.workers.current);
        handle.spawn_fn(move || {
            let Some(worker) = current() else { return };
            let (builder, metrics) = (reloader.indexes.clone(), reloader.metrics.clone());
            actix_rt::spawn(async move {
                crate::serve::indexing::run(builder, worker, metrics, move || reloader.publish_indexes())
                    .await;
            });
        });
    }

    /// Hands every worker the configuration in force with the indices now complete
    /// searchable (a build finished).
    fn publish_indexes(&self) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let mut directory = (*current.1).clone();
        directory.indexes = Arc::new(self.indexes.searchable());
        self.deliver(&directory);
        current.1 = Arc::new(directory);
    }

    /// The audit log's new file when the reload names another one, opened (created 0600)
    /// first: a path the server can't write refuses the reload.
    fn audit_moves(&self, running: &Config, next: &Config) -> anyhow::Result<Option<String>> {
        let (Some(old), Some(new)) = (&running.audit_log.path, &next.audit_log.path) else { return Ok(None) };
        if old == new || self.audit.is_none() {
            return Ok(None);
        }
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(new)
            .map_err(|e| anyhow::anyhow!("audit_log.path {new}: {e}"))?;
        Ok(Some(new.clone()))
    }

    /// Hands every shard its changelog settings, each through its own worker.
    fn deliver_changelog(&self, changelog: &crate::config::Changelog) {
        let settings = match changelog.enabled {
            true => ferrodir_shard::ChangelogSettings::new(
                changelog.per_shard(self.engines.len()),
                changelog.max_age_s,
                Some(self.skeleton.clone()),
            ),
            false => ferrodir_shard::ChangelogSettings::default(),
        };
        for worker in &self.workers.handles {
            let (settings, current) = (settings.clone(), self.workers.current);
            worker.spawn_fn(move || {
                if let Some(worker) = current() {
                    worker.set_changelog(settings);
                }
            });
        }
    }

    /// Hands each worker its own copy of `directory`.
    fn deliver(&self, directory: &DirectoryConfig) {
        for worker in &self.workers.handles {
            let copy = Arc::new(directory.clone());
            let deliver = self.workers.deliver;
            worker.spawn_fn(move || deliver(copy));
        }
    }

    pub fn set_tls(&self, tls: Option<Arc<TlsContext>>) {
        *self.tls.lock().unwrap_or_else(|p| p.into_inner()) = tls;
    }

    /// Re-reads and applies the config file; the outcome, for the log and `ferrodir
    /// reload`. `why`: what asked (SIGHUP, the admin socket).
    pub fn reload(self: &Arc<Self>, why: &str) -> anyhow::Result<String> {
        let outcome = self.try_reload();
        match &outcome {
            Ok(summary) => {
                self.counts.ok.fetch_add(1, Ordering::Relaxed);
                tracing::info!(why, "{summary}");
            }
            Err(e) => {
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    why,
                    error = format!("{e:#}"),
                    "reload refused: the running configuration stays"
                );
            }
        }
        outcome
    }

    fn try_reload(self: &Arc<Self>) -> anyhow::Result<String> {
        let tls = self.tls.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(path) = &self.source else {
            if let Some(tls) = &tls {
                tls.reload("reload");
            }
            anyhow::bail!("no config file (the embedded default): nothing to re-read");
        };
        let mut next = Config::load(path)?;
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        // The command line's choices (--data-dir, --listen) stay as they are.
        next.data_dir = current.0.data_dir.clone();
        next.listen = current.0.listen;
        next.source = current.0.source.clone();
        let mut directory = crate::directory::reloaded(&current.1, &next)?;
        let indexes = index_config(&current.0, &next, &current.1.rules)?;
        if directory.unique.rules.len() != current.1.unique.rules.len() || !next.unique.is_empty() {
            crate::directory::unique::refuse_duplicates(
                &directory.unique,
                &directory.rules,
                &self.engines,
                &self.skeleton.load(),
            )?;
        }
        let audit_moves = self.audit_moves(&current.0, &next)?;
        let kept = needs_restart(&current.0, &next);
        if !kept.is_empty() {
            tracing::warn!(
                settings = kept.join(", "),
                "changed in the file but not reloaded: restart to apply"
            );
        }
        // Removed indices leave the searches' configuration now, added ones once built.
        let building = self.indexes.retarget(indexes);
        directory.indexes = Arc::new(self.indexes.searchable());
        self.deliver(&directory);
        if changelog_changed(&current.0.changelog, &next.changelog) {
            self.deliver_changelog(&next.changelog);
        }
        if let (Some(path), Some(audit)) = (audit_moves, &self.audit) {
            tracing::info!(path, "the audit log moves to a new file");
            audit.move_to(path);
        }
        if let Some(tls) = &tls {
            tls.reload("reload");
        }
        *current = (next, Arc::new(directory));
        drop(current);
        if building {
            self.start_index_build();
        }
        let mut summary = format!("configuration reloaded from {}", path.display());
        if !kept.is_empty() {
            summary += &format!(" (needs a restart, left as it was: {})", kept.join(", "));
        }
        if building {
            summary += "; index changes are being applied online (searches use a new index once it is built)";
        }
        Ok(summary)
    }
}

/// The indices `next` configures, with the ones refint and memberOf need as they run now
/// (turning either on or off needs a restart, and their indices stay until then).
fn index_config(
    running: &Config,
    next: &Config,
    rules: &ferrodir_shard::RuleTable,
) -> anyhow::Result<ferrodir_shard::IndexConfig> {
    let mut effective = next.clone();
    effective.refint = running.refint.clone();
    effective.memberof = running.memberof;
    Ok(ferrodir_shard::IndexConfig::from_directives(&effective.index_directives(), rules)?)
}

/// The settings that differ between `old` and `new` and that a reload does not apply.
fn needs_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut kept = Vec::new();
    let mut check = |name: &'static str, same: bool| {
        if !same {
            kept.push(name);
        }
    };
    check("listen_ldaps", old.listen_ldaps == new.listen_ldaps);
    check("listen_ldapi", old.listen_ldapi == new.listen_ldapi);
    check("metrics_listen", old.metrics_listen == new.metrics_listen);
    check("suffixes", old.suffixes == new.suffixes);
    check("root_dn", old.root_dn == new.root_dn);
    check("shards", old.shards == new.shards);
    check("schema_files", old.schema_files == new.schema_files);
    check("memberof", old.memberof == new.memberof);
    check("refint.enabled", old.refint.enabled == new.refint.enabled);
    check("replication", old.replication.len() == new.replication.len());
    check("server_id", old.server_id == new.server_id);
    check("multi_provider", old.multi_provider == new.multi_provider);
    check(
        "access_log (rotation and the rest of it)",
        old.access_log.rotation() == new.access_log.rotation()
            && old.access_log.path == new.access_log.path
            && old.access_log.enabled == new.access_log.enabled
            && old.access_log.format == new.access_log.format,
    );
    check("engine", old.engine == new.engine);
    check(
        "audit_log.path (turning the log on or off)",
        old.audit_log.path.is_some() == new.audit_log.path.is_some(),
    );
    check("audit_log.queue_bytes_max", old.audit_log.queue_bytes_max == new.audit_log.queue_bytes_max);
    kept
}

fn changelog_changed(old: &crate::config::Changelog, new: &crate::config::Changelog) -> bool {
    old.enabled != new.enabled || old.max_entries != new.max_entries || old.max_age_s != new.max_age_s
}
