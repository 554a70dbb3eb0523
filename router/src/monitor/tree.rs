//! The entries of cn=Monitor, built at read time from [`Sources`]: slapd 2.5's back-monitor
//! layout and names (cn=Connections, cn=Operations, cn=Statistics, cn=Threads, cn=Time,
//! cn=Databases, cn=Listeners...), plus Ferrodir's own cn=Shards. Every value that exists
//! in Ferrodir comes from the counters the metrics endpoint reads; the few slapd entries
//! that describe machinery Ferrodir lacks say so in their values (see docs/OPERATIONS.md).

use std::time::{SystemTime, UNIX_EPOCH};

use ferrodir_proto::entry::{Attribute, Entry};

use super::{ConnectionInfo, Sources, MONITOR_DN};
use crate::op::controls;
use crate::op::rootdse::SUBSCHEMA_DN;
use crate::stats::{OpKind, ResultClass, WorkerStats};

/// One entry of the subtree: its DN as clients see it and every attribute, user and
/// operational together (the search splits them by the schema's usage).
#[derive(Clone, Debug)]
pub struct MonitorEntry {
    pub dn: String,
    pub entry: Entry,
}

/// slapd's cn=Operations children, in its order, with the counters behind each.
const OPERATIONS: [(&str, OpKind); 10] = [
    ("Bind", OpKind::Bind),
    ("Unbind", OpKind::Unbind),
    ("Search", OpKind::Search),
    ("Compare", OpKind::Compare),
    ("Modify", OpKind::Modify),
    ("Modrdn", OpKind::ModDn),
    ("Add", OpKind::Add),
    ("Delete", OpKind::Delete),
    ("Abandon", OpKind::Abandon),
    ("Extended", OpKind::Extended),
];

/// `YYYYMMDDHHMMSSZ` (GeneralizedTime, UTC) of `at`.
fn generalized(at: SystemTime) -> String {
    let seconds = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{}Z", ferrodir_shard::civil_time(seconds))
}

/// Collects entries in slapd's order; each gets the operational attributes slapd adds.
struct Builder {
    entries: Vec<MonitorEntry>,
    stamp: String,
}

impl Builder {
    /// Adds `cn=<rdn>,<parent>` of `class` with `attrs`; returns its DN.
    fn add(&mut self, rdn: &str, parent: &str, class: &str, attrs: Vec<(&str, Vec<String>)>) -> String {
        let dn = if parent.is_empty() { format!("cn={rdn}") } else { format!("cn={rdn},{parent}") };
        let stamp = self.stamp.clone();
        self.add_at(&dn, rdn, class, attrs, &stamp);
        dn
    }

    fn add_at(&mut self, dn: &str, rdn: &str, class: &str, attrs: Vec<(&str, Vec<String>)>, stamp: &str) {
        let mut all = vec![attr("objectClass", vec![class.to_string()]), attr("cn", vec![rdn.to_string()])];
        all.extend(attrs.into_iter().filter(|(_, v)| !v.is_empty()).map(|(n, v)| attr(n, v)));
        all.extend([
            attr("structuralObjectClass", vec![class.to_string()]),
            attr("creatorsName", vec![String::new()]),
            attr("modifiersName", vec![String::new()]),
            attr("createTimestamp", vec![stamp.to_string()]),
            attr("modifyTimestamp", vec![stamp.to_string()]),
            attr("entryDN", vec![dn.to_string()]),
            attr("subschemaSubentry", vec![SUBSCHEMA_DN.to_string()]),
        ]);
        self.entries.push(MonitorEntry { dn: dn.to_string(), entry: Entry::new(all) });
    }

    fn container(&mut self, rdn: &str, what: &str, attrs: Vec<(&str, Vec<String>)>) -> String {
        let mut all = vec![("description", one(format!("This subsystem contains {what}.")))];
        all.extend(attrs);
        self.add(rdn, MONITOR_DN, "monitorContainer", all)
    }

    fn counter(&mut self, rdn: &str, parent: &str, value: u64) {
        self.add(rdn, parent, "monitorCounterObject", vec![("monitorCounter", one(value))]);
    }

    fn info(&mut self, rdn: &str, parent: &str, info: Option<String>, description: &str) {
        let mut attrs = vec![("monitoredInfo", info.into_iter().collect())];
        if !description.is_empty() {
            attrs.push(("description", one(description)));
        }
        self.add(rdn, parent, "monitoredObject", attrs);
    }

    /// hasSubordinates on every entry, from the DNs built.
    fn finish(mut self) -> Vec<MonitorEntry> {
        let dns: Vec<String> = self.entries.iter().map(|e| e.dn.to_ascii_lowercase()).collect();
        for entry in &mut self.entries {
            let suffix = format!(",{}", entry.dn.to_ascii_lowercase());
            let has = dns.iter().any(|dn| dn.strip_suffix(&suffix).is_some_and(|rest| !rest.contains(',')));
            entry.entry.attrs.push(attr("hasSubordinates", one(if has { "TRUE" } else { "FALSE" })));
        }
        self.entries
    }
}

fn attr(name: &str, values: Vec<String>) -> Attribute {
    Attribute::new(name, values.into_iter().map(String::into_bytes).collect())
}

fn one(value: impl ToString) -> Vec<String> {
    vec![value.to_string()]
}

fn bool_text(value: bool) -> &'static str {
    if value {
        "TRUE"
    } else {
        "FALSE"
    }
}

/// The counters of every worker, summed.
struct Totals {
    workers: Vec<std::sync::Arc<WorkerStats>>,
}

impl Totals {
    fn sum(&self, f: impl Fn(&WorkerStats) -> u64) -> u64 {
        self.workers.iter().map(|w| f(w)).fold(0, u64::saturating_add)
    }

    fn initiated(&self, kind: OpKind) -> u64 {
        self.sum(|w| w.initiated_count(kind))
    }

    fn completed(&self, kind: OpKind) -> u64 {
        self.sum(|w| ResultClass::ALL.iter().map(|c| w.completed_count(kind, *c)).sum())
    }
}

/// What the tree needs from the directory's configuration.
pub struct Setup<'a> {
    /// The naming contexts, as configured.
    pub suffixes: Vec<&'a str>,
    pub vendor_version: &'a str,
    /// The schema's DN normaliser (a consumer's base is matched to its naming context).
    pub dn_rules: &'a ferrodir_proto::schema::DnNormalizer,
}

impl<'a> Setup<'a> {
    pub fn of(config: &'a crate::config::DirectoryConfig) -> Self {
        Self {
            suffixes: config.suffixes.iter().map(|s| s.display.as_str()).collect(),
            vendor_version: &config.vendor_version,
            dn_rules: config.dn_rules(),
        }
    }
}

/// Every entry of cn=Monitor as of `now`, parents before children.
pub fn build(config: &Setup<'_>, sources: &Sources, now: SystemTime) -> Vec<MonitorEntry> {
    let mut b = Builder { entries: Vec::with_capacity(80), stamp: generalized(sources.started) };
    let totals = Totals { workers: sources.workers() };
    let connections = sources.connections.snapshot();
    let server = sources.server();
    b.add(
        "Monitor",
        "",
        "monitorServer",
        vec![
            (
                "description",
                vec![
                    "This subtree contains monitoring/managing objects.".into(),
                    "This object contains information about this server.".into(),
                    "Most of the information is held in operational attributes, which must be explicitly requested.".into(),
                ],
            ),
            ("monitoredInfo", one(format!("Ferrodir {}", config.vendor_version))),
        ],
    );
    backends(&mut b, config);
    connections_subtree(
        &mut b,
        &connections,
        server.map_or(0, |s| s.connections_accepted()),
        server.map_or(0, |s| s.max_file_descriptors()),
    );
    databases(&mut b, config, server.map(|s| s.shards()).unwrap_or_default());
    consumers(&mut b, config, server.map(|s| s.consumers()).unwrap_or_default());
    listeners(&mut b, server.map(|s| s.listeners()).unwrap_or_default());
    b.container("Log", "information about logging", vec![]);
    operations(&mut b, &totals);
    // Ferrodir has no overlays: the container slapd publishes, empty.
    b.container("Overlays", "information about available overlays", vec![]);
    b.container("SASL", "information about SASL", vec![]);
    shards(&mut b, server.map(|s| s.shards()).unwrap_or_default());
    statistics(&mut b, &totals);
    threads(&mut b, &totals);
    time(&mut b, sources.started, now);
    b.container("TLS", "information about TLS", vec![]);
    let waiters = b.container("Waiters", "information about read/write waiters", vec![]);
    // Every open connection's reader waits on its socket between requests; writers that
    // block on a slow peer are not counted.
    b.counter("Read", &waiters, connections.len() as u64);
    b.counter("Write", &waiters, 0);
    b.finish()
}

fn listeners(b: &mut Builder, listeners: Vec<super::ListenerInfo>) {
    let parent = b.container("Listeners", "information about active listeners", vec![]);
    for (i, listener) in listeners.into_iter().enumerate() {
        b.add(
            &format!("Listener {i}"),
            &parent,
            "monitoredObject",
            vec![
                ("monitorConnectionLocalAddress", one(listener.local_address)),
                ("labeledURI", one(listener.url)),
            ],
        );
    }
}

fn statistics(b: &mut Builder, totals: &Totals) {
    use std::sync::atomic::Ordering::Relaxed;
    let parent = b.container("Statistics", "statistics", vec![]);
    b.counter("Bytes", &parent, totals.sum(|w| w.bytes_out.load(Relaxed)));
    b.counter("PDU", &parent, totals.sum(|w| w.pdus_out.load(Relaxed)));
    b.counter("Entries", &parent, totals.sum(|w| w.entries_returned.load(Relaxed)));
    // Ferrodir sends no referrals.
    b.counter("Referrals", &parent, 0);
}

fn time(b: &mut Builder, started: SystemTime, now: SystemTime) {
    let parent = b.container("Time", "information about time", vec![]);
    b.add("Start", &parent, "monitoredObject", vec![("monitorTimestamp", one(generalized(started)))]);
    b.add("Current", &parent, "monitoredObject", vec![("monitorTimestamp", one(generalized(now)))]);
    let uptime = now.duration_since(started).map_or(0, |d| d.as_secs());
    b.add("Uptime", &parent, "monitoredObject", vec![("monitoredInfo", one(uptime))]);
}

fn backends(b: &mut Builder, config: &Setup<'_>) {
    let parent = b.container(
        "Backends",
        "information about available backends",
        vec![("monitoredInfo", vec!["ferrodir".into(), "monitor".into()])],
    );
    let databases = config.suffixes.len();
    let data_dbs: Vec<String> =
        (1..=databases).map(|i| format!("cn=Database {i},cn=Databases,{MONITOR_DN}")).collect();
    let controls: Vec<String> = controls::SUPPORTED.iter().map(|c| c.to_string()).collect();
    for (i, (name, see_also)) in [
        ("ferrodir", data_dbs),
        ("monitor", vec![format!("cn=Database {},cn=Databases,{MONITOR_DN}", databases + 1)]),
    ]
    .into_iter()
    .enumerate()
    {
        b.add(
            &format!("Backend {i}"),
            &parent,
            "monitoredObject",
            vec![
                ("monitoredInfo", one(name)),
                ("monitorRuntimeConfig", one("FALSE")),
                ("supportedControl", controls.clone()),
                ("seeAlso", see_also),
            ],
        );
    }
}

fn connections_subtree(b: &mut Builder, open: &[(u64, ConnectionInfo)], accepted: u64, max_fds: u64) {
    let parent = b.container("Connections", "information about connections", vec![]);
    for (number, info) in open {
        let dn = format!("cn=Connection {number},{parent}");
        let attrs = vec![
            ("monitorConnectionNumber", one(number)),
            ("monitorConnectionProtocol", one(3)),
            ("monitorConnectionAuthzDN", one(&info.authz_dn)),
            ("monitorConnectionListener", one(&info.listener)),
            ("monitorConnectionPeerDomain", one("unknown")),
            ("monitorConnectionPeerAddress", one(&info.peer_address)),
            ("monitorConnectionLocalAddress", one(&info.local_address)),
            ("monitorConnectionStartTime", one(generalized(info.started))),
        ];
        b.add_at(
            &dn,
            &format!("Connection {number}"),
            "monitorConnection",
            attrs,
            &generalized(info.started),
        );
    }
    b.counter("Max File Descriptors", &parent, max_fds);
    b.counter("Total", &parent, accepted);
    b.counter("Current", &parent, open.len() as u64);
}

fn databases(b: &mut Builder, config: &Setup<'_>, shards: Vec<super::ShardFacts>) {
    let read_only = bool_text(shards.iter().any(|s| !s.writable));
    let mut contexts = vec![String::new()];
    contexts.extend(config.suffixes.iter().map(|s| s.to_string()));
    let parent = b.container(
        "Databases",
        "information about configured databases",
        vec![("readOnly", one("FALSE")), ("namingContexts", contexts), ("monitorContext", one(MONITOR_DN))],
    );
    let common = |info: &str| vec![("monitoredInfo", one(info)), ("monitorIsShadow", one("FALSE"))];
    let mut frontend = common("frontend");
    frontend.extend([("namingContexts", one("")), ("readOnly", one("FALSE"))]);
    b.add("Frontend", &parent, "monitoredObject", frontend);
    // Numbered from 1: slapd's Database 0 is cn=config, which Ferrodir doesn't have.
    let backend_dn = |i: usize| format!("cn=Backend {i},cn=Backends,{MONITOR_DN}");
    for (i, suffix) in config.suffixes.iter().enumerate() {
        let mut attrs = common("ferrodir");
        attrs.extend([
            ("namingContexts", one(suffix)),
            ("readOnly", one(read_only)),
            ("seeAlso", one(backend_dn(0))),
        ]);
        b.add(&format!("Database {}", i + 1), &parent, "monitoredObject", attrs);
    }
    let mut monitor = common("monitor");
    monitor.extend([
        ("monitorContext", one(MONITOR_DN)),
        ("readOnly", one("FALSE")),
        ("seeAlso", one(backend_dn(1))),
    ]);
    b.add(&format!("Database {}", config.suffixes.len() + 1), &parent, "monitoredObject", monitor);
}

/// slapd 2.5's syncrepl entries: `cn=Consumer NNN` (the rid) under the database of the
/// naming context it replicates, class olmSyncReplInstance.
fn consumers(b: &mut Builder, config: &Setup<'_>, consumers: Vec<super::ConsumerFacts>) {
    for consumer in consumers {
        let Ok(base) = config.dn_rules.parse(&consumer.search_base) else { continue };
        let database = config.suffixes.iter().position(|s| {
            config.dn_rules.parse(s).is_ok_and(|suffix| base.is_descendant_or_self_of(&suffix))
        });
        let Some(index) = database else { continue };
        let parent = format!("cn=Database {},cn=Databases,{MONITOR_DN}", index + 1);
        let attrs = consumer.attributes.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        b.add(&format!("Consumer {:03}", consumer.rid), &parent, "olmSyncReplInstance", attrs);
    }
}

fn operations(b: &mut Builder, totals: &Totals) {
    let (initiated, completed) = OPERATIONS.iter().fold((0u64, 0u64), |(i, c), (_, kind)| {
        (i.saturating_add(totals.initiated(*kind)), c.saturating_add(totals.completed(*kind)))
    });
    let parent = b.container(
        "Operations",
        "information about performed operations",
        vec![("monitorOpInitiated", one(initiated)), ("monitorOpCompleted", one(completed))],
    );
    for (name, kind) in OPERATIONS {
        let attrs = vec![
            ("monitorOpInitiated", one(totals.initiated(kind))),
            ("monitorOpCompleted", one(totals.completed(kind))),
        ];
        b.add(name, &parent, "monitorOperation", attrs);
    }
}

/// Ferrodir's own: one entry per shard (every naming context is spread over all shards,
/// so they sit in a container of their own rather than under one cn=Database).
fn shards(b: &mut Builder, shards: Vec<super::ShardFacts>) {
    let parent = b.add(
        "Shards",
        MONITOR_DN,
        "monitorContainer",
        vec![("description", one("This subsystem contains information about the shards (Ferrodir)."))],
    );
    for (i, shard) in shards.into_iter().enumerate() {
        let state = if shard.writable { "writable" } else { "refusing writes after a failed commit" };
        let dn = b.add(
            &format!("Shard {i}"),
            &parent,
            "monitoredObject",
            vec![("monitoredInfo", one(state)), ("readOnly", one(bool_text(!shard.writable)))],
        );
        b.counter("Commits", &dn, shard.commits);
        b.counter("Failed Commits", &dn, shard.failed_commits);
        b.counter("Entries", &dn, shard.entries);
    }
}

fn threads(b: &mut Builder, totals: &Totals) {
    let parent = b.container("Threads", "information about threads", vec![]);
    let workers = totals.workers.len() as u64;
    let in_flight = OpKind::ALL
        .iter()
        .map(|k| totals.initiated(*k).saturating_sub(totals.completed(*k)))
        .fold(0, u64::saturating_add);
    let rows: [(&str, Option<String>, &str); 10] = [
        ("Max", Some(workers.to_string()), "Maximum number of threads as configured"),
        ("Max Pending", Some("0".into()), "Maximum number of pending threads"),
        ("Open", Some(workers.to_string()), "Number of open threads"),
        ("Starting", Some("0".into()), "Number of threads being started"),
        ("Active", Some(in_flight.to_string()), "Number of active threads"),
        ("Pending", Some("0".into()), "Number of pending threads"),
        ("Backload", Some(in_flight.to_string()), "Number of active plus pending threads"),
        ("State", Some("running".into()), "Thread pool state"),
        ("Runqueue", None, "Queue of running threads - besides those handling operations"),
        ("Tasklist", None, "List of running plus standby threads - besides those handling operations"),
    ];
    for (rdn, info, description) in rows {
        b.info(rdn, &parent, info, description);
    }
}
