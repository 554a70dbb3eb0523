//! A directory inside a unit test: `N` shards in memory (redb's in-memory backend), their
//! actors and the coordinator on the test's actix System, one [`Worker`] over them (shard 0
//! local, the others by message, as on a worker thread of the server), and sessions whose
//! responses a test reads back decoded. Everything runs on the calling thread, so a test
//! drives whole operations, concurrency included, in milliseconds and without sockets.
//!
//! ```ignore
//! testkit::run(async {
//!     let directory = TestDirectory::with_people(2).await;
//!     let mut client = directory.connect();
//!     let found = client.search(SUFFIX, SearchScope::WholeSubtree, "(uid=alice)", &[]).await;
//!     assert_eq!(found.entries.len(), 1);
//! });
//! ```

use std::collections::VecDeque;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::Actor as _;
use ferrodir_proto::filter::parse_filter;
use ferrodir_proto::message::{
    decode_message, encode_message, AddRequest, AuthenticationChoice, BindRequest, DerefAliases, LdapMessage,
    LdapResult, OctetString, PartialAttribute, ProtocolOp, SearchRequest, SearchResultEntry, SearchScope,
};
use ferrodir_proto::schema::Schema;
use ferrodir_proto::ResultCode;
use ferrodir_shard::storage::{open_in_memory, KvEngine};
use ferrodir_shard::{
    EntryCache, EqBloom, GramShards, IndexConfig, RuleTable, ScanLimits, ScanPool, ScanSource, ShardActor,
    ShardCore, ShardInfo, Skeleton, SkeletonCell,
};
use tokio::sync::mpsc;

use crate::config::{DirectoryConfig, Suffix};
use crate::coordinator::Coordinator;
use crate::intent::IntentLog;
use crate::op::context::Outbound;
use crate::password::{HashPool, PasswordConfig, StorageScheme};
use crate::requester::Transport;
use crate::session::{Flow, Session};
use crate::worker::Worker;

/// The naming context every test directory holds.
pub const SUFFIX: &str = "dc=example,dc=com";
pub const ROOT_DN: &str = "cn=admin,dc=example,dc=com";
pub const ROOT_PASSWORD: &str = "secret";
/// The password of every person [`TestDirectory::with_people`] adds.
pub const USER_PASSWORD: &str = "pw";

/// How long a test waits for an answer before it fails as hung: a guard against a test
/// that never ends, not a measure of anything (answers come in microseconds).
const HUNG: Duration = Duration::from_secs(30);

/// Runs `test` on a fresh actix System on this thread.
pub fn run<F: Future>(test: F) -> F::Output {
    actix::System::new().block_on(test)
}

pub struct TestDirectory {
    pub worker: Rc<Worker>,
    /// The config the worker was built from (as the server builds every worker from one):
    /// for the test that the worker takes its references from a copy of its own.
    pub config_given: Arc<DirectoryConfig>,
    /// The coordinator's intent log is a file (its durability is what it is for).
    _files: tempfile::TempDir,
}

impl TestDirectory {
    /// An empty directory of `shards` shards: not even the suffix entry. Call inside [`run`].
    pub async fn open(shards: usize) -> Self {
        Self::open_configured(shards, |_| {}).await
    }

    /// [`TestDirectory::open`], with `configure` changing the directory config first.
    pub async fn open_configured(shards: usize, configure: impl FnOnce(&mut DirectoryConfig)) -> Self {
        let files = tempfile::tempdir().expect("a temporary directory");
        let schema = Arc::new(Schema::standard());
        let rules = Arc::new(RuleTable::from_schema(&schema));
        let directives = ["objectClass eq", "uid eq", "cn eq,sub", "member eq"];
        let indexes = Arc::new(IndexConfig::from_directives(&directives, &rules).expect("index directives"));
        let grams = Arc::new(GramShards::new(shards));
        let blooms: Vec<Arc<EqBloom>> = (0..shards).map(|_| Arc::default()).collect();
        let hub = ferrodir_shard::Hub::new(shards, 0);
        let info = |index: usize| ShardInfo {
            index,
            count: shards,
            entry_cache: Some(Arc::new(EntryCache::new(1 << 20, rules.clone()))),
            indexes: indexes.clone(),
            schema: schema.clone(),
            rules: rules.clone(),
            bloom: blooms[index].clone(),
            grams: grams.clone(),
            hub: hub.clone(),
        };
        let mut cores = Vec::with_capacity(shards);
        let mut actors = Vec::with_capacity(shards);
        let mut sources = Vec::with_capacity(shards);
        for index in 0..shards {
            let engine: Arc<dyn KvEngine> = open_in_memory().expect("an in-memory shard").into();
            let core = Rc::new(ShardCore::new(info(index), engine.clone()).expect("a shard"));
            actors.push(ShardActor::new(core.clone()).expect("a shard actor").start());
            let limits = ScanLimits { slice_us: 1000, snapshot_entries_max: 10_000, snapshot_age_ms: 1000 };
            sources.push(Arc::new(ScanSource {
                info: ShardInfo { entry_cache: None, ..info(index) },
                engine,
                limits,
            }));
            cores.push(core);
        }
        let cell = Arc::new(SkeletonCell::new(Skeleton::default()));
        let log =
            IntentLog::open(&files.path().join("intents.redb"), &Default::default()).expect("an intent log");
        let coordinator = Coordinator::new(actors.clone(), cell.clone(), log, None).start();
        let mut config = directory_config(schema, rules, indexes, blooms);
        configure(&mut config);
        let config = Arc::new(config);
        let local = cores.swap_remove(0);
        let worker = Worker::new(0, local, actors, coordinator, config.clone(), cell)
            // Scans run on this thread (the server's `search_scans = "worker"`).
            .with_scan_pool(ScanPool { runtime: None, sources });
        Self { worker: Rc::new(worker), config_given: config, _files: files }
    }

    /// A directory holding the suffix entry, `ou=people` under it, and two people, `alice`
    /// and `bob`, each with userPassword [`USER_PASSWORD`], all added by the rootDN.
    pub async fn with_people(shards: usize) -> Self {
        Self::with_people_configured(shards, |_| {}).await
    }

    /// [`TestDirectory::with_people`], with `configure` changing the directory config first.
    pub async fn with_people_configured(shards: usize, configure: impl FnOnce(&mut DirectoryConfig)) -> Self {
        let directory = Self::open_configured(shards, configure).await;
        let mut root = directory.connect();
        assert_eq!(root.bind(ROOT_DN, ROOT_PASSWORD).await, ResultCode::SUCCESS);
        let adds: [(&str, Attrs<'_>); 4] = [
            (SUFFIX, &[("objectClass", &["domain"]), ("dc", &["example"])]),
            ("ou=people,dc=example,dc=com", &[("objectClass", &["organizationalUnit"]), ("ou", &["people"])]),
            ("uid=alice,ou=people,dc=example,dc=com", &person("alice")),
            ("uid=bob,ou=people,dc=example,dc=com", &person("bob")),
        ];
        for (dn, attrs) in adds {
            let result = root.add(dn, attrs).await;
            assert_eq!(result.result_code, ResultCode::SUCCESS, "adding {dn}: {result:?}");
        }
        directory
    }

    /// A session over a loopback TCP connection, anonymous until it binds.
    pub fn connect(&self) -> Client {
        self.connect_over(Transport { local: true, ..Transport::default() })
    }

    pub fn connect_over(&self, transport: Transport) -> Client {
        let (out, answers) = mpsc::channel(1024);
        let session = Session::new(self.worker.clone(), out, transport, 1);
        Client { session, answers, queued: VecDeque::new(), next_id: 1, closed: false }
    }
}

/// An entry's attributes as a test writes them: (type, values).
pub type Attrs<'a> = &'a [(&'a str, &'a [&'a str])];

/// The attributes of an inetOrgPerson named `uid`.
fn person(uid: &'static str) -> [(&'static str, &'static [&'static str]); 5] {
    let (cn, sn): (&'static [&'static str], &'static [&'static str]) = match uid {
        "alice" => (&["Alice Liddell"], &["Liddell"]),
        _ => (&["Bob Builder"], &["Builder"]),
    };
    let uid: &'static [&'static str] = if uid == "alice" { &["alice"] } else { &["bob"] };
    [
        ("objectClass", &["inetOrgPerson"]),
        ("uid", uid),
        ("cn", cn),
        ("sn", sn),
        ("userPassword", &[USER_PASSWORD]),
    ]
}

/// A directory config over the standard schema and no index, for tests of what reads the
/// config only.
pub fn test_config() -> DirectoryConfig {
    let schema = Arc::new(Schema::standard());
    let rules = Arc::new(RuleTable::from_schema(&schema));
    let no_index: &[&str] = &[];
    let indexes = Arc::new(IndexConfig::from_directives(no_index, &rules).expect("no index"));
    directory_config(schema, rules, indexes, Vec::new())
}

/// The rootDN and its password, the suffix, the built-in `default` access rules (passwords
/// for binds only, everything else readable by all), and the limits' defaults.
fn directory_config(
    schema: Arc<Schema>,
    rules: Arc<RuleTable>,
    indexes: Arc<IndexConfig>,
    blooms: Vec<Arc<EqBloom>>,
) -> DirectoryConfig {
    let dn_rules = rules.dn();
    let suffix = dn_rules.parse(SUFFIX).expect("the suffix");
    let profile = crate::acl::profile("default").expect("the default access rules");
    let access_rules = crate::acl::compile(&profile, rules.clone(), "test").expect("access rules");
    let pool = Arc::new(HashPool::start(1, 64, || {}).expect("a hash thread"));
    DirectoryConfig {
        suffixes: vec![Suffix::new(suffix.dn, dn_rules)],
        root_dn: Some(dn_rules.parse(ROOT_DN).expect("the rootDN")),
        root_password: Some(ROOT_PASSWORD.to_string()),
        passwords: PasswordConfig::new(false, StorageScheme::Ssha512, pool),
        access_rules: Arc::new(access_rules),
        require_tls_for_binds: false,
        tls_offered: false,
        authz_rules: Vec::new(),
        authz_policy: Default::default(),
        limits: crate::limits::LimitsConfig::default(),
        search_chunks_in_flight: 4,
        sort: Default::default(),
        vendor_version: "test".into(),
        remote_reads: crate::config::RemoteReads::Message,
        blooms,
        indexes,
        schema,
        rules,
        monitor_readers: Vec::new(),
        monitor: Arc::default(),
        syncrepl: Arc::default(),
        unique: Arc::default(),
        refint: None,
        memberof: None,
        paged: Default::default(),
        replicated: Vec::new(),
        ppolicy: Default::default(),
        changelog: false,
        dynlist: Default::default(),
        disk: Arc::default(),
    }
}

/// What a search sent back.
#[derive(Debug)]
pub struct Found {
    pub entries: Vec<SearchResultEntry>,
    pub result: LdapResult,
}

impl Found {
    /// The DNs of the entries, in the order they came.
    pub fn dns(&self) -> Vec<String> {
        self.entries.iter().map(|e| String::from_utf8_lossy(&e.object_name).into_owned()).collect()
    }

    /// The values of `attr` in the entry named `dn` (none when the entry or the attribute
    /// was not sent).
    pub fn values(&self, dn: &str, attr: &str) -> Vec<String> {
        let entry = self.entries.iter().find(|e| e.object_name.as_ref() == dn.as_bytes());
        entry
            .into_iter()
            .flat_map(|e| e.attributes.iter())
            .filter(|a| a.r#type.eq_ignore_ascii_case(attr.as_bytes()))
            .flat_map(|a| a.vals.iter().map(|v| String::from_utf8_lossy(v).into_owned()))
            .collect()
    }
}

/// One connection's side of the conversation: requests go to [`Session::dispatch`] as
/// encoded PDUs, answers come back from the session's outbound channel, decoded. Answers
/// to other messageIDs than the one awaited are kept for later.
pub struct Client {
    pub session: Session,
    answers: mpsc::Receiver<Outbound>,
    queued: VecDeque<LdapMessage>,
    next_id: u32,
    /// The session sent `Outbound::Close`.
    pub closed: bool,
}

impl Client {
    /// Dispatches `op` under the next messageID; returns that ID and the session's flow.
    pub async fn send(&mut self, op: ProtocolOp) -> (u32, Flow) {
        let message_id = self.next_id;
        self.next_id += 1;
        let message = LdapMessage { message_id, protocol_op: op, controls: None };
        let pdu = encode_message(&message).expect("an encodable request");
        (message_id, self.session.dispatch(&pdu).await)
    }

    /// Every message answering `message_id`, up to and including its final response.
    pub async fn answer(&mut self, message_id: u32) -> Vec<LdapMessage> {
        let mut got = Vec::new();
        loop {
            let position = self.queued.iter().position(|m| m.message_id == message_id);
            let message = match position.and_then(|at| self.queued.remove(at)) {
                Some(message) => message,
                None => {
                    self.receive().await;
                    continue;
                }
            };
            let last = is_final(&message.protocol_op);
            got.push(message);
            if last {
                return got;
            }
        }
    }

    /// Waits for the next thing the session sends and queues its messages.
    async fn receive(&mut self) {
        let next = tokio::time::timeout(HUNG, self.answers.recv()).await;
        match next.expect("the session answered") {
            Some(Outbound::Pdu(pdu)) => self.queued.push_back(decode(&pdu)),
            Some(Outbound::Pdus(pdus)) => self.queued.extend(pdus.iter().map(|pdu| decode(pdu))),
            Some(Outbound::Close) => self.closed = true,
            Some(Outbound::Handover) => {}
            None => panic!("the session's channel closed while an answer was awaited"),
        }
    }

    /// Whether the session has sent `Outbound::Close`, reading what it sent so far.
    pub fn saw_close(&mut self) -> bool {
        while let Ok(sent) = self.answers.try_recv() {
            match sent {
                Outbound::Pdu(pdu) => self.queued.push_back(decode(&pdu)),
                Outbound::Pdus(pdus) => self.queued.extend(pdus.iter().map(|pdu| decode(pdu))),
                Outbound::Close => self.closed = true,
                Outbound::Handover => {}
            }
        }
        self.closed
    }

    /// Sends `op` and returns its final response's result.
    pub async fn result_of(&mut self, op: ProtocolOp) -> LdapResult {
        let (message_id, _) = self.send(op).await;
        let answer = self.answer(message_id).await;
        let last = answer.last().expect("a final response");
        result_of(&last.protocol_op).cloned().expect("a response with a result")
    }

    /// A simple bind; an empty `dn` and password bind anonymously.
    pub async fn bind(&mut self, dn: &str, password: &str) -> ResultCode {
        let request = BindRequest {
            version: 3,
            name: OctetString::from(dn.as_bytes().to_vec()),
            authentication: AuthenticationChoice::Simple(OctetString::from(password.as_bytes().to_vec())),
        };
        self.result_of(ProtocolOp::BindRequest(request)).await.result_code
    }

    pub async fn add(&mut self, dn: &str, attrs: Attrs<'_>) -> LdapResult {
        let attributes = attrs
            .iter()
            .map(|(name, values)| PartialAttribute {
                r#type: OctetString::from(name.as_bytes().to_vec()),
                vals: values.iter().map(|v| OctetString::from(v.as_bytes().to_vec())).collect(),
            })
            .collect();
        let request = AddRequest { entry: OctetString::from(dn.as_bytes().to_vec()), attributes };
        self.result_of(ProtocolOp::AddRequest(request)).await
    }

    /// A search with no size limit.
    pub async fn search(&mut self, base: &str, scope: SearchScope, filter: &str, attrs: &[&str]) -> Found {
        self.search_request(search_request(base, scope, filter, attrs)).await
    }

    pub async fn search_request(&mut self, request: SearchRequest) -> Found {
        let (message_id, _) = self.send(ProtocolOp::SearchRequest(request)).await;
        let mut entries = Vec::new();
        let mut result = None;
        for message in self.answer(message_id).await {
            match message.protocol_op {
                ProtocolOp::SearchResultEntry(entry) => entries.push(entry),
                ProtocolOp::SearchResultDone(done) => result = Some(done),
                _ => {}
            }
        }
        Found { entries, result: result.expect("a SearchResultDone") }
    }
}

/// A SearchRequest as a client sends it, with no size or time limit.
pub fn search_request(base: &str, scope: SearchScope, filter: &str, attrs: &[&str]) -> SearchRequest {
    SearchRequest {
        base_object: OctetString::from(base.as_bytes().to_vec()),
        scope,
        deref_aliases: DerefAliases::NeverDerefAliases,
        size_limit: 0,
        time_limit: 0,
        types_only: false,
        filter: parse_filter(filter).expect("a filter"),
        attributes: attrs.iter().map(|a| OctetString::from(a.as_bytes().to_vec())).collect(),
    }
}

fn decode(pdu: &[u8]) -> LdapMessage {
    decode_message(pdu).expect("the session sends decodable PDUs")
}

/// Whether `op` ends its operation's answer (an entry, a reference or an intermediate
/// response does not).
fn is_final(op: &ProtocolOp) -> bool {
    !matches!(
        op,
        ProtocolOp::SearchResultEntry(_)
            | ProtocolOp::SearchResultReference(_)
            | ProtocolOp::IntermediateResponse(_)
    )
}

/// The result a response carries.
fn result_of(op: &ProtocolOp) -> Option<&LdapResult> {
    match op {
        ProtocolOp::BindResponse(r) => Some(&r.result),
        ProtocolOp::SearchResultDone(r)
        | ProtocolOp::ModifyResponse(r)
        | ProtocolOp::AddResponse(r)
        | ProtocolOp::DelResponse(r)
        | ProtocolOp::ModifyDnResponse(r)
        | ProtocolOp::CompareResponse(r) => Some(r),
        ProtocolOp::ExtendedResponse(r) => Some(&r.result),
        _ => None,
    }
}
