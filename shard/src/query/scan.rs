//! Long searches: one shard's part of a search that the indices can't narrow to a handful
//! of entries, run on the search pool, never on a thread that hosts a shard actor.
//!
//! A scan reads the shard's committed snapshots directly through the engine (no entry
//! cache: scans would only evict what lookups need), and is built to be a good neighbour:
//! - it walks its candidates lazily, a batch at a time, so the first match leaves before the
//!   last candidate is read;
//! - it checks its stop signals before every entry, so Abandon, a closed connection or a
//!   limit stops it within one entry's work;
//! - it yields its thread after each slice of work ([`ScanLimits`], 1 ms by default), so concurrent scans share the
//!   pool fairly;
//! - it reopens its snapshot after 10,000 entries or 100 ms (by default), resuming after
//!   its last id (as back-mdb's `rtxnsize` does), and holds none while it waits for the
//!   client to take a chunk, so no scan pins old pages for long.
//!
//! Reopening means a long scan reads each entry as of some commit during the scan, not all
//! as of one: an entry changed meanwhile is seen in one version or the other, never torn,
//! and the skeleton (the tree's shape) stays the one the search pinned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::core::ShardInfo;
use crate::entry::record::EntryRecord;
use crate::entry::segments::Cached;
use crate::error::ShardResult;
use crate::id::EntryId;
use crate::index::keys;
use crate::query::candidates::{read_plan, OrderedWalk, ScopeWalk};
use crate::query::prefilter::Prefilter;
use crate::query::scope::Scope;
use crate::query::search::{
    encode_entry, filter_needs, judge, selected_names, FilterNeeds, Query, SearchChunk, SearchTask, Window,
    WindowEnd, CHUNK_BYTES_MAX, CHUNK_ENTRIES_MAX,
};
use crate::rights::TypeSet;
use crate::rules::base_name_in;
use crate::rules::RuleTable;
use crate::storage::{KvEngine, KvSnapshot};

/// How a scan shares its thread and how long it may hold one snapshot (config `[limits]`
/// `search_slice_us`, `search_snapshot_entries_max`, `search_snapshot_age_ms`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ScanLimits {
    /// Work between two yields of the thread, in microseconds.
    pub slice_us: u64,
    /// A scan takes a new snapshot after this many entries...
    pub snapshot_entries_max: usize,
    /// ...or this long, whichever comes first.
    pub snapshot_age_ms: u64,
}

impl Default for ScanLimits {
    fn default() -> Self {
        Self { slice_us: 1_000, snapshot_entries_max: 10_000, snapshot_age_ms: 100 }
    }
}
/// Candidate ids read from the one-level index at a time.
const WALK_BATCH: usize = 256;
/// An index candidate set larger than this is no cheaper than walking the scope, and would
/// cost memory per search: walk instead.
const INDEXED_CANDIDATES_MAX: usize = 65_536;

/// What a scan reads one shard through: thread-safe, unlike the worker's `ShardCore`.
pub struct ScanSource {
    pub info: ShardInfo,
    pub engine: Arc<dyn KvEngine>,
    pub limits: ScanLimits,
}

/// Where scans run: a handle to the search pool's runtime (None: cooperatively on the
/// asking worker's thread, the measured alternative) and every shard's source.
#[derive(Clone)]
pub struct ScanPool {
    pub runtime: Option<tokio::runtime::Handle>,
    pub sources: Vec<Arc<ScanSource>>,
}

impl ScanPool {
    /// Starts `task` on shard `shard`'s data. False if there is no such shard.
    pub fn start(&self, shard: usize, task: SearchTask) -> bool {
        let Some(source) = self.sources.get(shard).cloned() else { return false };
        match &self.runtime {
            Some(runtime) => drop(runtime.spawn(run_scan(source, task))),
            None => drop(tokio::task::spawn_local(run_scan(source, task))),
        }
        true
    }
}

/// Runs one shard's part of a search to its end or its stop, then sends `Done`.
pub async fn run_scan(source: Arc<ScanSource>, task: SearchTask) {
    let shard = source.info.index;
    let (result, end) = match scan(&source, &task).await {
        Ok(end) => (Ok(()), end),
        Err(e) => (Err(e), None),
    };
    if let Some(reason) = task.stopped() {
        tracing::debug!(
            target: "ferrodir::search_stop",
            shard,
            reason = reason.as_str(),
            stop_latency_us = task.stop_age_us(),
            "search part stopped"
        );
    }
    let _ = task.sink.send(SearchChunk::Done { shard, result, end }).await;
}

/// The candidates of one scan: an index's ids, the scope's one-level index, or (for a
/// subtree search from a naming context, which covers nearly the whole shard) the entries
/// table itself, read in id order with no lookup per entry.
///
/// A windowed scan (a page of a paged search) needs its candidates in id order: index ids
/// and the table already are; a scope walk is merged in id order ([`OrderedWalk`]), or,
/// over too many containers, replaced by the table from the window's start.
enum Source {
    Ids(std::collections::btree_set::IntoIter<EntryId>),
    Walk(ScopeWalk),
    Ordered(OrderedWalk),
    Table { after: Option<EntryId> },
}

impl Source {
    /// The task's candidates: its index plan's ids when the plan reads few enough, else
    /// the scope's.
    fn for_task(
        source: &ScanSource,
        task: &SearchTask,
        reader: &mut SnapshotReader,
        stop: &dyn Fn() -> bool,
    ) -> ShardResult<Self> {
        let window = task.window;
        let scope_source = || Source::for_scope(&task.skeleton, task.scope, source.info.index, window);
        let Some(plan) = task.plan.as_ref() else { return Ok(scope_source()) };
        let snapshot = reader.snapshot()?;
        let Some(mut ids) = read_plan(plan, snapshot.as_ref(), INDEXED_CANDIDATES_MAX, stop)? else {
            return Ok(scope_source());
        };
        if let Some(after) = window.and_then(|w| w.after) {
            ids = ids.split_off(&EntryId(after.0.saturating_add(1)));
        }
        // An id names its home shard: the others' ids (an id-set plan, such as
        // memberOf's, carries every shard's) would only be lookups that miss.
        let shard = source.info.index;
        ids.retain(|id| id.shard() == shard);
        Ok(Source::Ids(ids.into_iter()))
    }

    /// One batch: up to WALK_BATCH candidates examined without awaiting, their matches
    /// added to `matches`. False once the candidates are exhausted.
    fn next_batch(
        &mut self,
        judge: &Judge,
        reader: &mut SnapshotReader,
        batch: &mut Vec<EntryId>,
        stop: &dyn Fn() -> bool,
        matches: &mut Vec<(EntryId, Bytes)>,
    ) -> ShardResult<bool> {
        Ok(match self {
            Source::Table { after } => {
                let snapshot = reader.snapshot()?;
                let (seen, last) = judge.table_batch(snapshot.as_ref(), *after, stop, matches)?;
                reader.entries += seen;
                *after = last.or(*after);
                seen >= WALK_BATCH
            }
            Source::Ids(ids) => {
                batch.clear();
                batch.extend(ids.by_ref().take(WALK_BATCH));
                judge.id_batch(reader, batch, stop, matches)?;
                !batch.is_empty()
            }
            Source::Walk(walk) => {
                batch.clear();
                let more = walk.next_batch(reader.snapshot()?.as_ref(), WALK_BATCH, batch)?;
                judge.id_batch(reader, batch, stop, matches)?;
                more
            }
            Source::Ordered(walk) => {
                batch.clear();
                let more = walk.next_batch(reader.snapshot()?.as_ref(), WALK_BATCH, batch)?;
                judge.id_batch(reader, batch, stop, matches)?;
                more
            }
        })
    }

    fn for_scope(
        skeleton: &crate::skeleton::Skeleton,
        scope: Scope,
        shard: usize,
        window: Option<Window>,
    ) -> Self {
        let covers_context = match scope {
            Scope::Subtree(base) | Scope::Children(base) => {
                base == EntryId::ROOT || skeleton.get(base).is_some_and(|node| node.parent == EntryId::ROOT)
            }
            _ => false,
        };
        let after = window.and_then(|w| w.after);
        if covers_context {
            return Source::Table { after };
        }
        match window {
            None => Source::Walk(ScopeWalk::new(skeleton, scope, shard)),
            Some(_) => match OrderedWalk::new(skeleton, scope, shard, after) {
                Some(walk) => Source::Ordered(walk),
                None => Source::Table { after },
            },
        }
    }
}

/// The snapshot a scan reads, reopened as the module doc says.
struct SnapshotReader<'a> {
    engine: &'a dyn KvEngine,
    limits: ScanLimits,
    snapshot: Option<Arc<dyn KvSnapshot>>,
    opened: Instant,
    entries: usize,
}

impl SnapshotReader<'_> {
    fn snapshot(&mut self) -> ShardResult<Arc<dyn KvSnapshot>> {
        let stale = self.entries >= self.limits.snapshot_entries_max
            || self.opened.elapsed() >= Duration::from_millis(self.limits.snapshot_age_ms);
        match &self.snapshot {
            Some(snapshot) if !stale => Ok(snapshot.clone()),
            _ => {
                let fresh: Arc<dyn KvSnapshot> = Arc::from(self.engine.snapshot()?);
                self.snapshot = Some(fresh.clone());
                self.opened = Instant::now();
                self.entries = 0;
                Ok(fresh)
            }
        }
    }

    /// Lets go of the snapshot (before waiting on the client).
    fn release(&mut self) {
        self.snapshot = None;
    }
}

/// Scans to the end, a stop, or (windowed) the window's end: Some(where) for a window.
async fn scan(source: &ScanSource, task: &SearchTask) -> ShardResult<Option<WindowEnd>> {
    let mut reader = SnapshotReader {
        engine: source.engine.as_ref(),
        limits: source.limits,
        snapshot: None,
        opened: Instant::now(),
        entries: 0,
    };
    let stop = || task.stopped().is_some();
    let window = task.window;
    let mut candidates = Source::for_task(source, task, &mut reader, &stop)?;
    let mut end = window.map(|_| WindowEnd::default());
    let mut window_sent = 0;
    let judge = Judge::new(&source.info.rules, &source.info.hub, task);
    let mut chunk = Chunk::default();
    let mut batch: Vec<EntryId> = Vec::with_capacity(WALK_BATCH);
    let mut matches: Vec<(EntryId, Bytes)> = Vec::new();
    let mut slice_start = Instant::now();
    loop {
        let more = candidates.next_batch(&judge, &mut reader, &mut batch, &stop, &mut matches)?;
        if stop() {
            return Ok(end);
        }
        if let (Some(window), Some(end)) = (window, end.as_mut()) {
            keep_window_share(window, end, &mut window_sent, &mut matches);
        }
        let window_full = end.is_some_and(|e| e.more);
        if !chunk.send_matches(&mut matches, &mut reader, &task.sink).await {
            return Ok(end); // the search is over on the router's side
        }
        if !more || window_full {
            break;
        }
        if slice_start.elapsed() >= Duration::from_micros(source.limits.slice_us) {
            tokio::task::yield_now().await;
            slice_start = Instant::now();
        }
    }
    if !chunk.pdus.is_empty() {
        let _ = task.sink.send(SearchChunk::Entries(chunk.pdus)).await;
    }
    crate::memberof::check(task.attrs.memberof.as_ref())?;
    Ok(end)
}

/// Keeps the window's share of `matches`; a match beyond it only says that more exist.
fn keep_window_share(
    window: Window,
    end: &mut WindowEnd,
    sent: &mut usize,
    matches: &mut Vec<(EntryId, Bytes)>,
) {
    let room = window.max.saturating_sub(*sent);
    if matches.len() > room {
        matches.truncate(room);
        end.more = true;
    }
    *sent += matches.len();
    if let Some((id, _)) = matches.last() {
        end.last = Some(*id);
    }
}

/// The matches gathered for the router's next message.
#[derive(Default)]
struct Chunk {
    pdus: Vec<Bytes>,
    bytes: usize,
}

impl Chunk {
    /// Moves `matches` into the chunk, sending each chunk that fills up. False once the
    /// router has stopped listening.
    async fn send_matches(
        &mut self,
        matches: &mut Vec<(EntryId, Bytes)>,
        reader: &mut SnapshotReader<'_>,
        sink: &mpsc::Sender<SearchChunk>,
    ) -> bool {
        for (_, pdu) in matches.drain(..) {
            self.bytes += pdu.len();
            self.pdus.push(pdu);
            if self.pdus.len() >= CHUNK_ENTRIES_MAX || self.bytes >= CHUNK_BYTES_MAX {
                // Hold no snapshot while the client takes its time.
                reader.release();
                if sink.send(SearchChunk::Entries(std::mem::take(&mut self.pdus))).await.is_err() {
                    return false;
                }
                self.bytes = 0;
            }
        }
        true
    }
}

/// What a scan asks of each candidate.
struct Judge<'a> {
    rules: &'a RuleTable,
    query: Query<'a>,
    scope: Scope,
    needs: FilterNeeds,
    prefilter: Prefilter,
    /// The attribute names the filter looks at: only those are decoded to evaluate it.
    selected: Option<Vec<String>>,
}

impl<'a> Judge<'a> {
    fn new(rules: &'a RuleTable, hub: &'a crate::write::watermark::Hub, task: &'a SearchTask) -> Self {
        Judge {
            rules,
            query: Query {
                message_id: task.message_id,
                skeleton: &task.skeleton,
                filter: &task.filter,
                attrs: &task.attrs,
                hub,
            },
            scope: task.scope,
            needs: filter_needs(rules, &task.filter),
            // With per-entry rights a type unsearchable on most entries may be searchable on
            // some (the requester's own): the prefilter may then only go by the filter.
            prefilter: match task.attrs.per_entry {
                None => Prefilter::new(rules, &task.filter, &task.attrs.unsearchable),
                Some(_) => Prefilter::new(rules, &task.filter, &TypeSet::none()),
            },
            selected: selected_names(rules, &task.filter, &task.attrs),
        }
    }
}

impl Judge<'_> {
    /// Examines `ids`, each read from the (possibly reopened) snapshot.
    fn id_batch(
        &self,
        reader: &mut SnapshotReader,
        ids: &[EntryId],
        stop: &dyn Fn() -> bool,
        matches: &mut Vec<(EntryId, Bytes)>,
    ) -> ShardResult<()> {
        for &id in ids {
            if stop() {
                return Ok(());
            }
            let snapshot = reader.snapshot()?;
            reader.entries += 1;
            let Some(bytes) = snapshot.get(&keys::entry(id))? else { continue };
            if let Some(pdu) = self.examine(id, &bytes)? {
                matches.push((id, pdu));
            }
        }
        Ok(())
    }

    /// Examines up to WALK_BATCH entries of the entries table after `after`, in id order,
    /// straight from the table's pages. Returns how many it saw and the last id.
    fn table_batch(
        &self,
        snapshot: &dyn KvSnapshot,
        after: Option<EntryId>,
        stop: &dyn Fn() -> bool,
        matches: &mut Vec<(EntryId, Bytes)>,
    ) -> ShardResult<(usize, Option<EntryId>)> {
        let prefix = keys::entries_prefix();
        let from = match after {
            Some(last) => keys::entry(EntryId(last.0.saturating_add(1))),
            None => prefix.clone(),
        };
        let (mut seen, mut last, mut failure) = (0, None, None);
        snapshot.scan_from(&prefix, &from, &mut |key, value| {
            if seen >= WALK_BATCH || stop() {
                return false;
            }
            let Some(id) = keys::trailing_id(key) else { return true };
            seen += 1;
            last = Some(id);
            match self.examine(id, value) {
                Ok(Some(pdu)) => matches.push((id, pdu)),
                Ok(None) => {}
                Err(e) => {
                    failure = Some(e);
                    return false;
                }
            }
            true
        })?;
        match failure {
            Some(e) => Err(e),
            None => Ok((seen, last)),
        }
    }

    /// One stored entry: the prefilter, then scope and filter, then the PDU if it matches.
    fn examine(&self, id: EntryId, bytes: &[u8]) -> ShardResult<Option<Bytes>> {
        if self.prefilter.is_useful() {
            let mut has = |names: &[String]| {
                // A record whose names don't parse is decoded below, which reports it.
                EntryRecord::any_attribute_name(bytes, &mut |name| base_name_in(name, names)).unwrap_or(true)
            };
            if !self.prefilter.may_match(&mut has) {
                return Ok(None);
            }
        }
        let record = match &self.selected {
            Some(names) => EntryRecord::decode_selected(bytes, &|name| base_name_in(name, names))?,
            None => EntryRecord::decode(bytes)?,
        };
        let (rules, query) = (self.rules, &self.query);
        let Some(seen) = judge(rules, query, self.scope, self.needs, id, &record) else { return Ok(None) };
        // A match is sent whole, unless the selection sends no stored attribute at all.
        let record = match self.selected.is_some() && self.query.attrs.wants_stored() {
            true => EntryRecord::decode(bytes)?,
            false => record,
        };
        Ok(Some(encode_entry(rules, query, id, &Cached::Transient(Arc::new(record)), seen.hidden())))
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use actix::Actor;
    use ferrodir_proto::entry::{Attribute, Entry};
    use ferrodir_proto::filter::parse_filter;
    use tokio::sync::mpsc;

    use super::*;
    use crate::actor::{ShardActor, Write};
    use crate::core::ShardCore;
    use crate::query::scope::Scope;
    use crate::query::search::AttrSelection;
    use crate::query::stop::{StopReason, StopSignal};
    use crate::skeleton::Skeleton;
    use crate::storage::EngineKind;
    use crate::write::batch::WriteOp;

    fn info() -> ShardInfo {
        crate::core::tests::info()
    }

    fn person(i: usize) -> Write {
        let name = format!("p{i}");
        Write(WriteOp::Add {
            author: "cn=test".into(),
            parent: EntryId::ROOT,
            rdn: format!("cn={name}"),
            rdn_norm: format!("cn={name}"),
            entry: Entry::new(vec![
                Attribute::new("objectClass", vec![b"person".to_vec()]),
                Attribute::new("cn", vec![name.into_bytes()]),
                Attribute::new("sn", vec![b"x".to_vec()]),
            ]),
        })
    }

    /// Runs one scan of every person with `sn=x` (unindexed) and returns how many entries
    /// came back; `before` may raise a stop signal first.
    fn scan_people(entries: usize, before: impl FnOnce(&StopSignal, &StopSignal)) -> usize {
        scan_people_for(entries, AttrSelection::default(), before).len()
    }

    /// The PDUs of one scan of every person with `sn=x` (unindexed), selecting `attrs`.
    fn scan_people_for(
        entries: usize,
        attrs: AttrSelection,
        before: impl FnOnce(&StopSignal, &StopSignal),
    ) -> Vec<Bytes> {
        let dir = tempfile::tempdir().unwrap();
        let engine: Arc<dyn KvEngine> =
            Arc::from(EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap());
        let system = actix::System::new();
        system.block_on(async move {
            let core = Rc::new(ShardCore::new(info(), engine.clone()).unwrap());
            let addr = ShardActor::new(core).unwrap().start();
            for i in 0..entries {
                addr.send(person(i)).await.unwrap().unwrap();
            }
            let (sink, mut chunks) = mpsc::channel(4);
            let (stop, op_stop) = (Arc::new(StopSignal::new()), Arc::new(StopSignal::new()));
            before(&stop, &op_stop);
            let task = SearchTask {
                message_id: 1,
                skeleton: Arc::new(Skeleton::default()),
                scope: Scope::OneLevel(EntryId::ROOT),
                filter: Arc::new(parse_filter("(sn=x)").unwrap()),
                attrs: Arc::new(attrs),
                plan: Arc::new(None),
                sink,
                stop,
                op_stop,
                window: None,
            };
            let source = Arc::new(ScanSource { info: info(), engine, limits: ScanLimits::default() });
            actix::spawn(run_scan(source, task));
            let mut found = Vec::new();
            while let Some(chunk) = chunks.recv().await {
                match chunk {
                    SearchChunk::Entries(pdus) => found.extend(pdus),
                    SearchChunk::Done { result, .. } => {
                        result.unwrap();
                        break;
                    }
                }
            }
            found
        })
    }

    #[test]
    fn a_scan_walks_every_entry_in_batches() {
        // More than one walk batch and more than one chunk.
        assert_eq!(scan_people(700, |_, _| {}), 700);
    }

    #[test]
    fn a_dn_only_match_carries_no_values_and_a_full_one_all() {
        // `1.1`: the filter's type is decoded to judge, nothing is sent but the DN.
        let bare = scan_people_for(3, AttrSelection::default(), |_, _| {});
        assert_eq!(bare.len(), 3);
        for pdu in &bare {
            assert!(!pdu.windows(2).any(|w| w == b"sn"), "a 1.1 match carries no attribute");
            assert!(pdu.windows(4).any(|w| w == b"cn=p"), "the DN is sent");
        }
        // `*`: the whole entry goes out, types the filter did not name included.
        let all = AttrSelection { all_user: true, ..Default::default() };
        let full = scan_people_for(3, all, |_, _| {});
        assert_eq!(full.len(), 3);
        for pdu in &full {
            assert!(pdu.windows(11).any(|w| w == b"objectClass"), "a * match carries objectClass");
            assert!(pdu.windows(6).any(|w| w == b"person"));
        }
    }

    #[test]
    fn a_raised_signal_stops_the_scan_before_its_next_entry() {
        assert_eq!(scan_people(300, |_, op| op.raise(StopReason::Abandon)), 0);
        assert_eq!(scan_people(300, |stop, _| stop.raise(StopReason::SizeLimit)), 0);
    }
}
