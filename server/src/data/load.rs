//! Offline bulk loading (`ferrodir import`, and the example data of a new directory).
//!
//! A pipeline of threads, every queue between them bounded:
//!
//! ```text
//! reader ─chunks─▶ parse worker 0..P (round robin) ─▶ placement ─▶ shard writer 0..N
//! ```
//!
//! - The **reader** cuts the input into chunks of whole records at blank lines, counting
//!   physical lines (for error messages) and bytes (for the progress bar).
//! - **Parse workers** do the per-record work that needs no other record: LDIF parsing, DN
//!   parsing and normalisation, the suffix, the schema check. Chunk `i` goes to worker
//!   `i mod P`, and placement takes results back in the same order, so no reordering buffer
//!   is needed and the outcome does not depend on thread timing.
//! - **Placement** (the calling thread) is the only sequential step, because it needs each
//!   entry's parent: it finds the parent, refuses duplicates, and computes the home shard
//!   exactly as the live server would (`shard_for_child(parent id, normalised RDN)`) and the
//!   id (ids count up per shard in input order). It sends each entry to its shard's writer,
//!   and marks a parent a container when its first child arrives.
//! - One **shard writer** per shard feeds its entries to the shard's [`BulkLoader`], which
//!   stamps the operational attributes, builds the index keys and the record and writes them
//!   into that shard's single bulk transaction, made durable only after the last entry: the
//!   records as appends, every other key through an external sort (runs spilled to the
//!   spill directory past a memory budget) in key order at the end (see `ferrodir_shard`'s
//!   `bulk` module). A failure anywhere drops the channels, every writer abandons its
//!   transaction, and nothing is written.
//!
//! Bad records are judged before placement (parse workers) or at it, in input order, so
//! `--continue` skips exactly what the sequential loader skipped: a bad record, and any
//! record whose parent was skipped.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use anyhow::Context as _;
use ferrodir_proto::dn::Rdn;
use ferrodir_proto::entry::Entry;
use ferrodir_proto::ldif::{LdifReader, LdifRecord};
use ferrodir_proto::schema::check::check_entry;
use ferrodir_proto::schema::DnNormalizer;
use ferrodir_proto::Dn;
use ferrodir_router::DirectoryConfig;
use ferrodir_shard::{
    set_structural_class, shard_for_child, BulkLoader, EntryId, EntryRecord, Fed, LoadStats, Loaded,
    SortSpill,
};

use crate::data::store::Store;

/// A chunk is cut at the first record boundary after this many bytes: large enough that
/// channel traffic is negligible, small enough that the queues hold little.
const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks queued for each parse worker, and parsed chunks queued for placement per worker.
const CHUNKS_QUEUED_PER_WORKER: usize = 2;
/// Batches of placed entries queued for each shard writer (a batch: one chunk's share).
const BATCHES_QUEUED_PER_SHARD: usize = 8;
/// At most this many parse workers, however many cores there are: placement, a single
/// thread, can't use more.
const PARSE_WORKERS_MAX: usize = 8;
/// Memory for the shard writers' sorts, all shards together, unless `--sort-memory` says
/// otherwise: past its share, a writer writes a sorted run to the spill directory. At 2
/// shards a 100k-entry import (about 50 MB of index keys per shard) stays in memory.
pub const SORT_MEMORY_DEFAULT_BYTES: usize = 256 << 20;
/// The smallest share of the sort memory a shard writer gets, however many shards.
const SORT_MEMORY_PER_SHARD_MIN_BYTES: usize = 4 << 10;
/// The directory under the spill directory that holds the sorts' run files.
const SORT_DIR: &str = "import-sort";

#[derive(Debug, Default)]
pub struct LoadReport {
    pub entries: usize,
    /// Records skipped with `--continue` (each was reported through `on_skip`).
    pub skipped: usize,
}

/// Counters a progress display reads while a load runs.
#[derive(Debug, Default)]
pub struct LoadProgress {
    /// Bytes of input read so far (the reader runs a few chunks ahead of placement).
    pub bytes_read: AtomicU64,
    /// Entries placed so far (sent to their shard writers; not yet durable).
    pub entries: AtomicU64,
    /// Set once every record is placed: what remains is the writers' final commit and sync.
    pub input_done: AtomicBool,
}

pub struct LoadOptions<'a> {
    /// Where the shard writers' sorts spill their runs (in a subdirectory, removed after
    /// the load): the data directory being loaded, so that no other filesystem must hold
    /// about as much again as the index keys.
    pub spill_dir: &'a Path,
    /// Memory for the shard writers' sorts, all shards together ([`SORT_MEMORY_DEFAULT_BYTES`]).
    pub sort_memory_bytes: usize,
    /// Skip bad records (after reporting them through `on_skip`) instead of stopping.
    pub keep_going: bool,
    pub progress: Option<&'a LoadProgress>,
    /// Called on the loading thread for each skipped record, in input order.
    pub on_skip: &'a mut dyn FnMut(&str),
}

/// Loads LDIF content records into an empty store. With `keep_going`, bad records are
/// reported on stderr and skipped; without it the first one stops the load before anything is
/// written. Used by `serve` for the example data of a new directory.
pub fn load_ldif(
    store: &Store,
    data_dir: &Path,
    directory: &DirectoryConfig,
    input: impl BufRead + Send,
    keep_going: bool,
) -> anyhow::Result<LoadReport> {
    let mut report_skip = |problem: &str| eprintln!("skipped: {problem}");
    let options = LoadOptions {
        spill_dir: data_dir,
        sort_memory_bytes: SORT_MEMORY_DEFAULT_BYTES,
        keep_going,
        progress: None,
        on_skip: &mut report_skip,
    };
    load(store, directory, input, options)
}

/// The pipeline described in the module docs.
pub fn load(
    store: &Store,
    directory: &DirectoryConfig,
    input: impl BufRead + Send,
    options: LoadOptions<'_>,
) -> anyhow::Result<LoadReport> {
    ensure_empty(store)?;
    let shard_count = store.engines.len();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, PARSE_WORKERS_MAX);
    let author = directory.root_dn.as_ref().map(|d| d.to_string()).unwrap_or_default();
    let suffixes = SuffixTable::new(directory);
    let progress = options.progress;
    let sort_dir = options.spill_dir.join(SORT_DIR);
    let sort_budget = (options.sort_memory_bytes / shard_count.max(1)).max(SORT_MEMORY_PER_SHARD_MIN_BYTES);
    let loaded = std::thread::scope(|scope| {
        let (chunk_senders, parsed_receivers) = spawn_parsers(scope, store, &suffixes, workers)?;
        let reader = spawn_named(scope, "import-read", move || read_chunks(input, &chunk_senders, progress))?;
        let (shard_senders, writers) = spawn_writers(scope, store, &author, &sort_dir, sort_budget)?;
        let mut placement = Placement::new(shard_count, &suffixes, options.keep_going, options.on_skip);
        // Takes the parse workers' receivers: when it returns, for whatever reason, they are
        // closed, and the workers and the reader wind down.
        let placed = placement.run(parsed_receivers, &shard_senders, progress);
        let read = reader.join().map_err(|_| anyhow::anyhow!("the import's reader panicked"));
        let placed_all = finish_if_all_placed(&placement, placed, read.and_then(|read| read), &shard_senders);
        if let Some(progress) = progress {
            progress.input_done.store(true, Ordering::Relaxed);
        }
        drop(shard_senders);
        let (committed, writer_failure) = join_writers(writers);
        // A writer's own failure is the cause when placement only saw it stop; otherwise the
        // placement's reason (a bad record, a read error) explains why the writers gave up.
        if let Some(e) = writer_failure {
            return Err(e);
        }
        placed_all?;
        if committed != shard_count {
            anyhow::bail!("only {committed} of {shard_count} shards committed the import");
        }
        Ok(LoadReport { entries: placement.entries, skipped: placement.skipped })
    });
    // Empty by now (each sort removes its runs, also when dropped); absent if none spilled.
    let _ = std::fs::remove_dir(&sort_dir);
    loaded
}

/// The parse workers' ends of their channels: chunks in, parsed records out.
type ParseChannels = (Vec<SyncSender<Chunk>>, Vec<Receiver<Vec<Parsed>>>);

/// The parse workers, each with its own channel of chunks in and of parsed records out.
fn spawn_parsers<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    store: &'scope Store,
    suffixes: &'scope SuffixTable,
    workers: usize,
) -> anyhow::Result<ParseChannels> {
    let mut chunk_senders = Vec::with_capacity(workers);
    let mut parsed_receivers = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (chunk_tx, chunk_rx) = sync_channel::<Chunk>(CHUNKS_QUEUED_PER_WORKER);
        let (parsed_tx, parsed_rx) = sync_channel::<Vec<Parsed>>(CHUNKS_QUEUED_PER_WORKER);
        spawn_named(scope, "import-parse", move || parse_worker(store, suffixes, chunk_rx, parsed_tx))?;
        chunk_senders.push(chunk_tx);
        parsed_receivers.push(parsed_rx);
    }
    Ok((chunk_senders, parsed_receivers))
}

type Writer<'scope> = std::thread::ScopedJoinHandle<'scope, anyhow::Result<WriterEnd>>;

/// One writer per shard, each with its own channel and its own sort spilling under
/// `sort_dir`.
fn spawn_writers<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    store: &'scope Store,
    author: &'scope str,
    sort_dir: &'scope Path,
    sort_budget: usize,
) -> anyhow::Result<(Vec<SyncSender<ShardMsg>>, Vec<Writer<'scope>>)> {
    let shard_count = store.engines.len();
    let mut shard_senders = Vec::with_capacity(shard_count);
    let mut writers = Vec::with_capacity(shard_count);
    for shard in 0..shard_count {
        let (tx, rx) = sync_channel::<ShardMsg>(BATCHES_QUEUED_PER_SHARD);
        writers.push(spawn_named(scope, &format!("import-shard-{shard}"), move || {
            let label = format!("shard-{shard:03}");
            let spill = SortSpill { dir: sort_dir, label: &label, budget_bytes: sort_budget };
            write_shard(store, shard, author, spill, rx).with_context(|| format!("shard {shard}"))
        })?);
        shard_senders.push(tx);
    }
    Ok((shard_senders, writers))
}

/// The writers commit only on `Finish`, sent only if every chunk read was placed.
fn finish_if_all_placed(
    placement: &Placement,
    placed: anyhow::Result<usize>,
    read: anyhow::Result<usize>,
    shards: &[SyncSender<ShardMsg>],
) -> anyhow::Result<()> {
    match (placed, read) {
        (Ok(placed), Ok(read)) if placed == read => placement.finish(shards),
        (Ok(placed), Ok(read)) => Err(anyhow::anyhow!("the import read {read} chunks but placed {placed}")),
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}

/// Waits for every writer: how many committed, and the first failure.
fn join_writers(writers: Vec<Writer<'_>>) -> (usize, Option<anyhow::Error>) {
    let mut writer_failure = None;
    let mut committed = 0;
    for writer in writers {
        match writer.join() {
            Ok(Ok(WriterEnd::Committed)) => committed += 1,
            Ok(Ok(WriterEnd::Abandoned)) => {}
            Ok(Err(e)) => {
                writer_failure.get_or_insert(e);
            }
            Err(_) => {
                writer_failure.get_or_insert(anyhow::anyhow!("a shard writer panicked"));
            }
        }
    }
    (committed, writer_failure)
}

/// Named, so that a profile tells the pipeline's stages apart.
fn spawn_named<'scope, 'env, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    name: &str,
    work: impl FnOnce() -> T + Send + 'scope,
) -> anyhow::Result<std::thread::ScopedJoinHandle<'scope, T>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn_scoped(scope, work)
        .with_context(|| format!("cannot start the import thread {name}"))
}

fn ensure_empty(store: &Store) -> anyhow::Result<()> {
    for (index, engine) in store.engines.iter().enumerate() {
        if shard_has_entries(engine.as_ref())? {
            anyhow::bail!(
                "shard {index} already holds entries: import loads only a new, empty data directory"
            );
        }
    }
    Ok(())
}

/// Whether a shard holds at least one entry.
pub fn shard_has_entries(engine: &dyn ferrodir_shard::storage::KvEngine) -> anyhow::Result<bool> {
    Ok(ferrodir_shard::offline::has_entries(engine.snapshot()?.as_ref())?)
}

// --- reader -----------------------------------------------------------------------------

/// Whole LDIF records, and the physical line the first of its lines has in the input.
struct Chunk {
    first_line: usize,
    text: Vec<u8>,
}

/// Sends the input's chunks round robin to the parse workers; returns how many it sent.
/// Stops early, without an error, when the workers are gone (the load already failed).
fn read_chunks(
    input: impl BufRead,
    workers: &[SyncSender<Chunk>],
    progress: Option<&LoadProgress>,
) -> anyhow::Result<usize> {
    let mut sent = 0;
    split_chunks(input, CHUNK_BYTES, &mut |chunk| {
        if let Some(progress) = progress {
            progress.bytes_read.fetch_add(chunk.text.len() as u64, Ordering::Relaxed);
        }
        let accepted = workers[sent % workers.len()].send(chunk).is_ok();
        sent += usize::from(accepted);
        accepted
    })
    .context("cannot read the input")?;
    Ok(sent)
}

/// Cuts `input` into chunks of at least `chunk_bytes` (the last may be smaller) and hands
/// each to `emit` until it returns false.
///
/// A cut goes only before a line that starts a record right after an empty line. Any
/// empty line ends a record (RFC 2849) and resets the LDIF reader to its state between
/// records, so each chunk parses on its own exactly as it would in one pass. One exception:
/// a fresh reader accepts `version: 1` as its first line, which is only legal at the start
/// of the file, so no cut goes before a line starting with `version`.
fn split_chunks(
    mut input: impl BufRead,
    chunk_bytes: usize,
    emit: &mut dyn FnMut(Chunk) -> bool,
) -> std::io::Result<()> {
    let mut chunk = Chunk { first_line: 1, text: Vec::with_capacity(chunk_bytes + 4096) };
    let mut line_number = 0;
    let mut previous_empty = false;
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        line_number += 1;
        let content = line.strip_suffix(b"\n").unwrap_or(&line);
        let content = content.strip_suffix(b"\r").unwrap_or(content);
        let starts_record = previous_empty
            && !matches!(content.first(), None | Some(b' ') | Some(b'#'))
            && !content.get(..7).is_some_and(|head| head.eq_ignore_ascii_case(b"version"));
        if starts_record && chunk.text.len() >= chunk_bytes {
            let next = Chunk { first_line: line_number, text: Vec::with_capacity(chunk_bytes + 4096) };
            if !emit(std::mem::replace(&mut chunk, next)) {
                return Ok(());
            }
        }
        previous_empty = content.is_empty();
        chunk.text.extend_from_slice(&line);
    }
    if !chunk.text.is_empty() {
        emit(chunk);
    }
    Ok(())
}

// --- parse workers ----------------------------------------------------------------------

/// A record ready for placement, or why it can't be loaded.
enum Parsed {
    Entry(ParsedEntry),
    Bad(String),
}

struct ParsedEntry {
    line: usize,
    /// As written in the LDIF, for messages.
    dn_text: String,
    /// The entry's RDN as written; the suffix's display form for a suffix entry.
    rdn: String,
    /// The entry's own normalised RDN (its leftmost).
    rdn_norm: String,
    /// Its parent's normalised RDNs, leftmost first: one allocation shared by the entries
    /// of one parent that come in a row (records come grouped by parent), which placement
    /// recognises by address before it compares them.
    parent_norm: Arc<[String]>,
    /// Index into the configured suffixes.
    suffix: usize,
    entry: Entry,
}

/// The configured suffixes with their normalised RDNs, to find an entry's suffix from its
/// own normalised RDNs without normalising anything again.
struct SuffixTable {
    suffixes: Vec<(Vec<String>, String, String)>,
}

impl SuffixTable {
    fn new(directory: &DirectoryConfig) -> Self {
        let suffixes = directory
            .suffixes
            .iter()
            .map(|s| {
                (
                    s.dn.rdns.iter().map(|r| directory.dn_rules().rdn(r)).collect(),
                    s.display.clone(),
                    s.norm.clone(),
                )
            })
            .collect();
        Self { suffixes }
    }

    /// The longest suffix the normalised RDNs `[rdn_norm] ++ parent_norm` fall under, as
    /// `DirectoryConfig::suffix_of` finds it.
    fn of(&self, rdn_norm: &str, parent_norm: &[String]) -> Option<usize> {
        let ends_with = |suffix: &[String]| match suffix.len().checked_sub(parent_norm.len()) {
            None | Some(0) => parent_norm.ends_with(suffix),
            Some(1) => suffix.split_first().is_some_and(|(own, rest)| own == rdn_norm && rest == parent_norm),
            Some(_) => false,
        };
        (0..self.suffixes.len())
            .filter(|&i| ends_with(&self.suffixes[i].0))
            .max_by_key(|&i| self.suffixes[i].0.len())
    }

    fn len_of(&self, suffix: usize) -> usize {
        self.suffixes[suffix].0.len()
    }

    fn display(&self, suffix: usize) -> &str {
        &self.suffixes[suffix].1
    }

    fn norm(&self, suffix: usize) -> &str {
        &self.suffixes[suffix].2
    }
}

fn parse_worker(
    store: &Store,
    suffixes: &SuffixTable,
    chunks: Receiver<Chunk>,
    out: SyncSender<Vec<Parsed>>,
) {
    let mut parsed_capacity = 0;
    let mut parents = ParentCache::default();
    for chunk in chunks {
        let line_offset = chunk.first_line - 1;
        let mut parsed = Vec::with_capacity(parsed_capacity);
        for item in LdifReader::new(chunk.text.as_slice()) {
            parsed.push(match item {
                Ok((line, record)) => {
                    let line = line + line_offset;
                    parse_entry(store, suffixes, &mut parents, line, record)
                        .map_or_else(|e| Parsed::Bad(format!("line {line}: {e}")), Parsed::Entry)
                }
                Err(mut e) => {
                    e.line += line_offset;
                    Parsed::Bad(e.to_string())
                }
            });
        }
        // The next chunk is likely alike: size its vector once.
        parsed_capacity = parsed_capacity.max(parsed.len());
        if out.send(parsed).is_err() {
            return;
        }
    }
}

/// The parent RDNs a parse worker normalised last, and their normalised form.
#[derive(Default)]
struct ParentCache {
    last: Option<(Vec<Rdn>, Arc<[String]>)>,
}

impl ParentCache {
    /// The normalised form of `parent` (RDNs, leftmost first), normalised again only when
    /// it differs from the last one asked for.
    fn normalized(&mut self, parent: &[Rdn], rules: &DnNormalizer) -> Arc<[String]> {
        match &self.last {
            Some((rdns, norm)) if rdns.as_slice() == parent => norm.clone(),
            _ => {
                let norm: Arc<[String]> = parent.iter().map(|rdn| rules.rdn(rdn)).collect();
                self.last = Some((parent.to_vec(), norm.clone()));
                norm
            }
        }
    }
}

/// Everything about one record that needs no other record, including the schema check.
fn parse_entry(
    store: &Store,
    suffixes: &SuffixTable,
    parents: &mut ParentCache,
    line: usize,
    record: LdifRecord,
) -> Result<ParsedEntry, String> {
    let (dn_text, attrs) = match record {
        LdifRecord::Content { dn, attrs } | LdifRecord::Add { dn, attrs } => (dn, attrs),
        _ => return Err("import takes content records only".into()),
    };
    let dn = Dn::parse_with(&dn_text, store.rules.dn()).map_err(|e| format!("bad DN {dn_text:?}: {e}"))?;
    let under_no_suffix = || format!("{dn_text} is under no configured suffix");
    let (own, parent) = dn.rdns.split_first().ok_or_else(under_no_suffix)?;
    let rdn_norm = store.rules.dn().rdn(own);
    let parent_norm = parents.normalized(parent, store.rules.dn());
    let suffix = suffixes.of(&rdn_norm, &parent_norm).ok_or_else(under_no_suffix)?;
    let is_suffix = dn.len() == suffixes.len_of(suffix);
    let mut entry = Entry::new(attrs);
    let checked = check_entry(&store.schema, &entry, dn.rdn(), store.rules.dn())
        .map_err(|v| format!("{dn_text}: {} ({})", v.message, v.code))?;
    check_structural_given(&store.rules, &entry, &checked.structural_class).map_err(|given| {
        format!(
            "{dn_text}: structural object class modification from '{given}' to '{}' not allowed ({})",
            checked.structural_class,
            ferrodir_proto::ResultCode::OBJECT_CLASS_MODS_PROHIBITED
        )
    })?;
    // As an Add stores it: the class the check found, in the schema's spelling.
    set_structural_class(&mut entry, checked.structural_class);
    let rdn = match dn.rdn() {
        Some(rdn) if !is_suffix => rdn.to_string(),
        _ => suffixes.display(suffix).to_string(),
    };
    Ok(ParsedEntry { line, dn_text, rdn, rdn_norm, parent_norm, suffix, entry })
}

/// slapadd's rule for a structuralObjectClass the LDIF carries (an export of another
/// server): it must name the class the schema check found (any spelling, alias or OID);
/// Err with the value given otherwise.
fn check_structural_given(
    rules: &ferrodir_shard::RuleTable,
    entry: &Entry,
    found: &str,
) -> Result<(), String> {
    let Some(given) = entry.get("structuralObjectClass").and_then(|a| a.values.first()) else {
        return Ok(());
    };
    let named = rules.class_lineage(given).and_then(|lineage| lineage.first());
    match named {
        Some(class) if class.eq_ignore_ascii_case(found) => Ok(()),
        _ => Err(String::from_utf8_lossy(given).into_owned()),
    }
}

// --- placement --------------------------------------------------------------------------

/// What a shard writer is asked to do, in placement order.
enum ShardWork {
    Entry {
        id: EntryId,
        parent: EntryId,
        rdn: String,
        rdn_norm: String,
        entry: Entry,
    },
    /// The entry (already sent to this shard) got its first child.
    Container(EntryId),
}

enum ShardMsg {
    Work(Vec<ShardWork>),
    /// Every entry is placed: write the shard's metadata and commit.
    Finish {
        next_seq: u64,
    },
}

struct Placement<'a> {
    shard_count: usize,
    suffixes: &'a SuffixTable,
    keep_going: bool,
    on_skip: &'a mut dyn FnMut(&str),
    /// parent id → normalised RDN → id: the DN→ID index of what is placed so far. A parent
    /// is here once it has a child, so membership also says "already marked a container".
    children: HashMap<EntryId, HashMap<Box<str>, EntryId>>,
    /// The last parent found, by its normalised RDNs: records come grouped by parent.
    last_parent: Option<(Arc<[String]>, EntryId)>,
    next_seq: Vec<u64>,
    entries: usize,
    skipped: usize,
}

impl<'a> Placement<'a> {
    fn new(
        shard_count: usize,
        suffixes: &'a SuffixTable,
        keep_going: bool,
        on_skip: &'a mut dyn FnMut(&str),
    ) -> Self {
        Self {
            shard_count,
            suffixes,
            keep_going,
            on_skip,
            children: HashMap::new(),
            last_parent: None,
            next_seq: vec![1; shard_count],
            entries: 0,
            skipped: 0,
        }
    }

    /// Places every parsed chunk in input order; returns how many chunks it took. Without
    /// `keep_going`, the first bad record is the error. On any error the shard writers see
    /// their channel close without `Finish` and abandon their transactions.
    fn run(
        &mut self,
        parsed: Vec<Receiver<Vec<Parsed>>>,
        shards: &[SyncSender<ShardMsg>],
        progress: Option<&LoadProgress>,
    ) -> anyhow::Result<usize> {
        let mut chunks = 0;
        while let Ok(records) = parsed[chunks % parsed.len()].recv() {
            chunks += 1;
            let mut work: Vec<Vec<ShardWork>> = (0..self.shard_count).map(|_| Vec::new()).collect();
            let placed_before = self.entries;
            for record in records {
                let outcome = match record {
                    Parsed::Entry(parsed) => self.place(parsed, &mut work),
                    Parsed::Bad(problem) => Err(problem),
                };
                if let Err(problem) = outcome {
                    if !self.keep_going {
                        anyhow::bail!("{problem} (nothing was imported; --continue skips bad records)");
                    }
                    self.skipped += 1;
                    (self.on_skip)(&problem);
                }
            }
            for (shard, batch) in work.into_iter().enumerate().filter(|(_, b)| !b.is_empty()) {
                shards[shard].send(ShardMsg::Work(batch)).map_err(|_| writer_gone(shard))?;
            }
            if let Some(progress) = progress {
                progress.entries.fetch_add((self.entries - placed_before) as u64, Ordering::Relaxed);
            }
        }
        Ok(chunks)
    }

    /// Tells every writer that the input is complete, with its shard's next sequence number.
    fn finish(&self, shards: &[SyncSender<ShardMsg>]) -> anyhow::Result<()> {
        for (shard, sender) in shards.iter().enumerate() {
            sender
                .send(ShardMsg::Finish { next_seq: self.next_seq[shard] })
                .map_err(|_| writer_gone(shard))?;
        }
        Ok(())
    }

    fn place(&mut self, parsed: ParsedEntry, work: &mut [Vec<ShardWork>]) -> Result<(), String> {
        let ParsedEntry { line, dn_text, rdn, rdn_norm, parent_norm, suffix, entry } = parsed;
        let (parent, rdn_norm) = if parent_norm.len() + 1 == self.suffixes.len_of(suffix) {
            (EntryId::ROOT, self.suffixes.norm(suffix).to_string())
        } else {
            let parent = self
                .find_parent(&parent_norm, suffix)
                .ok_or_else(|| format!("line {line}: parent of {dn_text} not loaded before it"))?;
            (parent, rdn_norm)
        };
        if self.children.get(&parent).is_some_and(|c| c.contains_key(rdn_norm.as_str())) {
            return Err(format!("line {line}: duplicate entry {dn_text}"));
        }
        let shard = shard_for_child(parent, &rdn_norm, self.shard_count);
        let id = EntryId::new(shard, self.next_seq[shard]);
        self.next_seq[shard] += 1;
        let siblings = self.children.entry(parent).or_insert_with(|| {
            // First child: its parent becomes a container, on the shard that holds it.
            if parent != EntryId::ROOT {
                work[parent.shard()].push(ShardWork::Container(parent));
            }
            HashMap::new()
        });
        siblings.insert(rdn_norm.as_str().into(), id);
        work[shard].push(ShardWork::Entry { id, parent, rdn, rdn_norm, entry });
        self.entries += 1;
        Ok(())
    }

    /// The id of the entry whose normalised RDNs are `rdns_norm` (leftmost first), walking
    /// down from the suffix entry; None if any of them was not placed.
    fn find_parent(&mut self, rdns_norm: &Arc<[String]>, suffix: usize) -> Option<EntryId> {
        if let Some((cached, id)) = &self.last_parent {
            if Arc::ptr_eq(cached, rdns_norm) || cached == rdns_norm {
                return Some(*id);
            }
        }
        let below_suffix = rdns_norm.len() - self.suffixes.len_of(suffix);
        let mut id = *self.children.get(&EntryId::ROOT)?.get(self.suffixes.norm(suffix))?;
        for rdn in rdns_norm[..below_suffix].iter().rev() {
            id = *self.children.get(&id)?.get(rdn.as_str())?;
        }
        self.last_parent = Some((rdns_norm.clone(), id));
        Some(id)
    }
}

fn writer_gone(shard: usize) -> anyhow::Error {
    anyhow::anyhow!("the writer of shard {shard} stopped")
}

// --- shard writers ----------------------------------------------------------------------

/// How a shard writer ended, when nothing failed on its side.
enum WriterEnd {
    Committed,
    /// Its channel closed without `Finish`: placement stopped, and says why.
    Abandoned,
}

/// Feeds one shard's placed entries to its bulk loader as they arrive; on `Finish`, the
/// loader writes the sorted keys and commits (durably).
fn write_shard(
    store: &Store,
    shard: usize,
    author: &str,
    spill: SortSpill<'_>,
    work: Receiver<ShardMsg>,
) -> anyhow::Result<WriterEnd> {
    let loader = BulkLoader::new(
        store.engines[shard].as_ref(),
        &store.indexes,
        &store.rules,
        author,
        store.hub.clock(),
        spill,
    );
    let loaded = loader.run(|writer| {
        for message in work.iter() {
            match message {
                ShardMsg::Work(batch) => {
                    for item in batch {
                        match item {
                            ShardWork::Container(id) => writer.mark_container(id),
                            ShardWork::Entry { id, parent, rdn, rdn_norm, entry } => {
                                let record = EntryRecord { parent, rdn, rdn_norm, flags: 0, entry };
                                writer.put_entry(id, record)?;
                            }
                        }
                    }
                }
                ShardMsg::Finish { next_seq } => return Ok(Fed::Complete { next_seq }),
            }
        }
        // Placement stopped early (a bad record, a read error): abandon the transaction.
        Ok(Fed::Stopped)
    })?;
    match loaded {
        Loaded::Committed(LoadStats { runs, sorted_ms, commit_ms }) => {
            tracing::info!(shard, runs, sorted_ms, commit_ms, "import: shard committed and synced");
            Ok(WriterEnd::Committed)
        }
        Loaded::Abandoned => Ok(WriterEnd::Abandoned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use ferrodir_shard::{ShardCore, Stager, WriteOp, WriteOutcome};
    use std::collections::BTreeMap;

    /// Stored operational values that differ between any two writes (time, identity).
    const STAMPED: [&str; 4] = ["entryUUID", "entryCSN", "createTimestamp", "modifyTimestamp"];

    const LDIF: &str = "\
dn: dc=example,dc=com
objectClass: domain
dc: example

dn: ou=People,dc=example,dc=com
objectClass: organizationalUnit
ou: People
structuralObjectClass: ORGANIZATIONALUNIT

dn: uid=bjensen,ou=People,dc=example,dc=com
objectClass: top
objectClass: inetOrgPerson
uid: bjensen
cn: Babs  Jensen
cn: BJ
cn;lang-de:: QsOkcmJlbA==
sn: Jensen
mail: Babs@Example.COM
telephoneNumber: +1 555-1234

dn: cn=staff,dc=example,dc=com
objectClass: groupOfNames
cn: staff
member: UID=bjensen, OU=people, DC=example, DC=com
";

    fn config() -> Config {
        let mut config = Config::default();
        config.shards = 1;
        config.suffixes = vec!["dc=example,dc=com".into()];
        config.root_dn = "cn=admin,dc=example,dc=com".into();
        config.index.extend(["cn,sn sub".into(), "telephoneNumber,entryUUID eq".into(), "cn pres".into()]);
        config
    }

    /// Every key of the shard and its value, entries decoded, less what differs by write.
    fn contents(store: &Store) -> BTreeMap<Vec<u8>, String> {
        let mut out = BTreeMap::new();
        let stamped: Vec<String> = STAMPED.iter().map(|n| n.to_ascii_lowercase()).collect();
        store.engines[0]
            .snapshot()
            .unwrap()
            .scan_prefix(&[], &mut |key, value| {
                let index_attr = key.get(1..).and_then(|k| k.split(|&b| b == 0).next());
                let is_index = matches!(key.first(), Some(b'Q' | b'P' | b'S' | b'O'));
                if is_index && index_attr.is_some_and(|a| stamped.iter().any(|s| s.as_bytes() == a)) {
                    return true;
                }
                // The highest CSN committed: a time, and written by the shard actor's commit
                // (which this test's staging skips), not by staging.
                if key == ferrodir_shard::offline::meta_key("csn_max").as_slice() {
                    return true;
                }
                let shown = if key.first() == Some(&b'E') {
                    let mut record = EntryRecord::decode(value).unwrap();
                    record.entry.attrs.retain(|a| !STAMPED.iter().any(|s| a.name.eq_ignore_ascii_case(s)));
                    format!("{record:?}")
                } else {
                    format!("{value:?}")
                };
                out.insert(key.to_vec(), shown);
                true
            })
            .unwrap();
        out
    }

    /// The Add path as the router and coordinator drive it, staged and committed on one shard.
    fn add_all(store: &Store, config: &Config, directory: &DirectoryConfig) {
        let core = ShardCore::new(store.shard_info(0, config), store.engines[0].clone()).unwrap();
        let mut stager = Stager::new(&core, core.stored_next_seq().unwrap());
        let mut ids: HashMap<String, EntryId> = HashMap::new();
        let mut containers = std::collections::HashSet::new();
        let author = directory.root_dn.as_ref().unwrap().to_string();
        for item in LdifReader::new(LDIF.as_bytes()) {
            let LdifRecord::Content { dn, attrs } = item.unwrap().1 else { panic!("content records only") };
            let dn = Dn::parse(&dn).unwrap();
            let suffix = &directory.suffixes[0];
            let dn_rules = directory.dn_rules();
            let (parent, rdn, rdn_norm) = if dn.normalized(dn_rules) == suffix.norm {
                (EntryId::ROOT, suffix.display.clone(), suffix.norm.clone())
            } else {
                let parent = ids[&dn.parent().unwrap().normalized(dn_rules)];
                let rdn = dn.rdn().unwrap();
                (parent, rdn.to_string(), rdn.normalized(dn_rules))
            };
            if parent != EntryId::ROOT && containers.insert(parent) {
                let (reply, _) = tokio::sync::oneshot::channel();
                stager.stage(&core, WriteOp::SetContainer { id: parent, container: true }, &|_| false, reply);
            }
            let op = WriteOp::Add { parent, rdn, rdn_norm, entry: Entry::new(attrs), author: author.clone() };
            let (reply, _) = tokio::sync::oneshot::channel();
            stager.stage(&core, op, &|_| false, reply);
            match &stager.pending.replies.last().unwrap().1 {
                Ok(WriteOutcome::Added(id)) => ids.insert(dn.normalized(dn_rules), *id),
                other => panic!("{dn}: {other:?}"),
            };
        }
        store.engines[0].commit(&stager.pending.mutations).unwrap();
    }

    #[test]
    fn an_imported_entry_is_stored_as_an_added_one() {
        let config = config();
        let (imported_dir, added_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let imported = Store::open(&config, imported_dir.path()).unwrap();
        let directory =
            crate::directory::directory_config(&config, &imported, crate::directory::offline_hash_pool())
                .unwrap();
        let report = load_ldif(&imported, imported_dir.path(), &directory, LDIF.as_bytes(), false).unwrap();
        assert_eq!(report.entries, 4);
        let added = Store::open(&config, added_dir.path()).unwrap();
        add_all(&added, &config, &directory);
        let (imported, added) = (contents(&imported), contents(&added));
        let only_imported: Vec<_> = imported.iter().filter(|(k, v)| added.get(*k) != Some(v)).collect();
        let only_added: Vec<_> = added.iter().filter(|(k, v)| imported.get(*k) != Some(v)).collect();
        assert!(
            only_imported.is_empty() && only_added.is_empty(),
            "imported only: {only_imported:#?}\nadded only: {only_added:#?}"
        );
        // The test can fail: the entries and their index keys are there.
        assert!(imported.len() > 40, "{}", imported.len());
        let records = imported.values().filter(|v| v.contains("structuralObjectClass")).count();
        assert_eq!(records, 4, "{imported:#?}");
    }

    #[test]
    fn a_structural_class_other_than_the_schemas_is_refused() {
        let config = config();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&config, dir.path()).unwrap();
        let directory =
            crate::directory::directory_config(&config, &store, crate::directory::offline_hash_pool())
                .unwrap();
        let ldif = "dn: dc=example,dc=com\nobjectClass: domain\ndc: example\nstructuralObjectClass: person\n";
        let error =
            load_ldif(&store, dir.path(), &directory, ldif.as_bytes(), false).unwrap_err().to_string();
        assert!(error.contains("structural object class modification from 'person' to 'domain'"), "{error}");
    }

    fn chunks_of(text: &str, chunk_bytes: usize) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        split_chunks(text.as_bytes(), chunk_bytes, &mut |c| {
            out.push((c.first_line, String::from_utf8(c.text).unwrap()));
            true
        })
        .unwrap();
        out
    }

    #[test]
    fn chunks_are_whole_records_with_their_first_line() {
        let text = "version: 1\n\ndn: a=1\na: 1\n\n\ndn: a=2\na: 2\n continued\n\n# note\n\ndn: a=3\n";
        let chunks = chunks_of(text, 1);
        let joined: String = chunks.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(joined, text, "chunks lose or reorder nothing");
        let firsts: Vec<usize> = chunks.iter().map(|(line, _)| *line).collect();
        // Cuts before each `dn:` that follows an empty line; never before `version:`, a
        // continuation or a comment.
        assert_eq!(firsts, vec![1, 3, 7, 13]);
        for (first, chunk) in &chunks {
            let line = text.lines().nth(first - 1).unwrap();
            assert_eq!(chunk.lines().next(), Some(line));
        }
    }

    #[test]
    fn no_cut_before_a_version_line_or_below_the_size() {
        let text = "dn: a=1\n\nversion: 1\n\ndn: a=2\n";
        let chunks = chunks_of(text, 1);
        assert_eq!(chunks.iter().map(|(l, _)| *l).collect::<Vec<_>>(), vec![1, 5]);
        assert_eq!(chunks_of(text, 1 << 20).len(), 1);
    }

    #[test]
    fn crlf_empty_lines_end_records() {
        let text = "dn: a=1\r\n\r\ndn: a=2\r\n";
        assert_eq!(chunks_of(text, 1).iter().map(|(l, _)| *l).collect::<Vec<_>>(), vec![1, 3]);
    }
}
