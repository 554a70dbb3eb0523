//! Running one search on one shard and streaming its matches.
//!
//! Matches are encoded here, on the shard's thread, straight into whole LDAPMessage PDUs, and
//! sent in chunks over the connection's bounded channel: the channel's capacity is the credit
//! the connection's writer grants. Between chunks the task yields, so a large scan never
//! holds up the shard's other work. Entries and the done marker share that one FIFO, so the
//! marker can't overtake an entry.

use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use ferrodir_proto::entry::base_name_lower;
use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::{
    encode_message, LdapMessage, OctetString, PartialAttribute, ProtocolOp, SearchResultEntry,
};
use ferrodir_proto::value::normalize_value;
use tokio::sync::mpsc;

use crate::core::ShardCore;
use crate::error::{ShardError, ShardResult};
use crate::eval;
use crate::id::EntryId;
use crate::keys;
use crate::record::EntryRecord;
use crate::skeleton::Skeleton;
use crate::stamp::STORED_OPERATIONAL;
use crate::storage::KvSnapshot;

const CHUNK_ENTRIES_MAX: usize = 64;
const CHUNK_BYTES_MAX: usize = 64 * 1024;

/// Where a search looks, with the base already resolved to an id.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Base(EntryId),
    OneLevel(EntryId),
    Subtree(EntryId),
}

/// Which attributes a search returns (RFC 4511 §4.5.1.8, RFC 3673 `+`).
#[derive(Clone, Debug, Default)]
pub struct AttrSelection {
    pub all_user: bool,
    pub all_operational: bool,
    /// Lowercased attribute types asked for by name.
    pub names: Vec<String>,
    pub types_only: bool,
    /// Lowercased attribute types this requester may not read.
    pub hidden: Vec<String>,
}

impl AttrSelection {
    /// From a request's attribute list: empty or `*` means all user attributes, `+` all
    /// operational ones, `1.1` alone means none.
    pub fn from_request<A: AsRef<[u8]>>(attributes: &[A], types_only: bool) -> Self {
        let mut sel = Self { types_only, ..Default::default() };
        if attributes.is_empty() {
            sel.all_user = true;
        }
        for attr in attributes {
            match attr.as_ref() {
                b"*" => sel.all_user = true,
                b"+" => sel.all_operational = true,
                b"1.1" => {}
                other => sel.names.push(base_name_lower(&String::from_utf8_lossy(other))),
            }
        }
        sel
    }

    fn wants_user(&self, name_lower: &str) -> bool {
        (self.all_user || self.names.iter().any(|n| n == name_lower))
            && !self.hidden.iter().any(|h| h == name_lower)
    }

    fn wants_operational(&self, name_lower: &str) -> bool {
        self.all_operational || self.names.iter().any(|n| n == name_lower)
    }
}

/// What flows back to the connection from the shards of one search.
#[derive(Debug)]
pub enum SearchChunk {
    /// Whole encoded SearchResultEntry PDUs, one `Bytes` per entry.
    Entries(Vec<Bytes>),
    /// This shard is finished.
    Done { shard: usize, result: ShardResult<()> },
}

pub struct SearchTask {
    pub message_id: u32,
    pub tree: Arc<Skeleton>,
    pub scope: Scope,
    pub filter: Arc<Filter>,
    pub attrs: Arc<AttrSelection>,
    pub sink: mpsc::Sender<SearchChunk>,
    /// Set on sizeLimit, timeLimit, Abandon or Unbind.
    pub cancel: Arc<AtomicBool>,
}

/// Runs `task` on this shard's thread to completion (or cancellation).
pub async fn run_search(core: Rc<ShardCore>, task: SearchTask) {
    let shard = core.info.index;
    let result = stream_matches(&core, &task).await;
    let _ = task.sink.send(SearchChunk::Done { shard, result }).await;
}

async fn stream_matches(core: &ShardCore, task: &SearchTask) -> ShardResult<()> {
    let snapshot = core.snapshot();
    let candidates = candidates(core, snapshot.as_ref(), task)?;
    let mut chunk: Vec<Bytes> = Vec::new();
    let mut chunk_bytes = 0;
    for id in candidates {
        if task.cancel.load(Ordering::Relaxed) {
            return Ok(());
        }
        let Some(record) = core.record_in(snapshot.as_ref(), id)? else {
            continue;
        };
        if !in_scope(&task.tree, task.scope, id, &record) || !eval::matches(&task.filter, &record.entry) {
            continue;
        }
        let pdu = encode_entry(task, id, &record)?;
        chunk_bytes += pdu.len();
        chunk.push(pdu);
        if chunk.len() >= CHUNK_ENTRIES_MAX || chunk_bytes >= CHUNK_BYTES_MAX {
            if task.sink.send(SearchChunk::Entries(std::mem::take(&mut chunk))).await.is_err() {
                return Ok(()); // the connection went away
            }
            chunk_bytes = 0;
            tokio::task::yield_now().await;
        }
    }
    if !chunk.is_empty() {
        let _ = task.sink.send(SearchChunk::Entries(chunk)).await;
    }
    Ok(())
}

fn in_scope(tree: &Skeleton, scope: Scope, id: EntryId, record: &EntryRecord) -> bool {
    match scope {
        Scope::Base(base) => id == base,
        Scope::OneLevel(parent) => record.parent == parent,
        Scope::Subtree(base) => id == base || tree.parent_within(record.parent, base),
    }
}

/// The ids to examine on this shard: from an index when the filter allows, else from scope.
fn candidates(core: &ShardCore, snapshot: &dyn KvSnapshot, task: &SearchTask) -> ShardResult<Vec<EntryId>> {
    if let Scope::Base(id) = task.scope {
        return Ok(if id.shard() == core.info.index { vec![id] } else { Vec::new() });
    }
    if let Some(ids) = indexed(core, snapshot, &task.filter)? {
        return Ok(ids.into_iter().collect());
    }
    match task.scope {
        Scope::OneLevel(parent) => core.children(snapshot, parent),
        Scope::Subtree(base) => {
            let mut out = Vec::new();
            if base != EntryId::ROOT && base.shard() == core.info.index {
                out.push(base);
            }
            for container in task.tree.containers_under(base) {
                out.extend(core.children(snapshot, container)?);
            }
            Ok(out)
        }
        Scope::Base(_) => Ok(Vec::new()),
    }
}

/// Candidate ids from the equality and presence indices, or None if the filter can't use them.
fn indexed(
    core: &ShardCore,
    snapshot: &dyn KvSnapshot,
    filter: &Filter,
) -> ShardResult<Option<BTreeSet<EntryId>>> {
    let indexes = &core.info.indexes;
    match filter {
        Filter::EqualityMatch(ava) => {
            let name = base_name_lower(&String::from_utf8_lossy(&ava.attribute_desc));
            if !indexes.kinds(&name).equality {
                return Ok(None);
            }
            let value = normalize_value(&name, &ava.assertion_value);
            let ids = core.postings(snapshot, &keys::eq_prefix(&name, &value))?;
            Ok(Some(ids.into_iter().collect()))
        }
        Filter::Present(attr) => {
            let name = base_name_lower(&String::from_utf8_lossy(attr));
            if !indexes.kinds(&name).presence {
                return Ok(None);
            }
            Ok(Some(core.postings(snapshot, &keys::pres_prefix(&name))?.into_iter().collect()))
        }
        Filter::And(parts) => {
            let mut best: Option<BTreeSet<EntryId>> = None;
            for part in parts {
                if let Some(ids) = indexed(core, snapshot, part)? {
                    best = Some(match best {
                        Some(prev) => prev.intersection(&ids).copied().collect(),
                        None => ids,
                    });
                }
            }
            Ok(best)
        }
        Filter::Or(parts) if !parts.is_empty() => {
            let mut all = BTreeSet::new();
            for part in parts {
                match indexed(core, snapshot, part)? {
                    Some(ids) => all.extend(ids),
                    None => return Ok(None),
                }
            }
            Ok(Some(all))
        }
        _ => Ok(None),
    }
}

/// One SearchResultEntry PDU for `record`, with the requested attributes.
fn encode_entry(task: &SearchTask, id: EntryId, record: &EntryRecord) -> ShardResult<Bytes> {
    let sel = &task.attrs;
    // A container's DN comes from the pinned skeleton, like its descendants', so that a
    // subtree Modify DN is seen whole or not at all.
    let dn = match task.tree.get(id) {
        Some(node) => node.dn.to_string(),
        None => task.tree.dn_of_child(record.parent, &record.rdn),
    };
    let mut attributes = Vec::new();
    for attr in &record.entry.attrs {
        let name = base_name_lower(&attr.name);
        let wanted = if STORED_OPERATIONAL.contains(&name.as_str()) {
            sel.wants_operational(&name)
        } else {
            sel.wants_user(&name)
        };
        if !wanted {
            continue;
        }
        let vals = if sel.types_only {
            Vec::new()
        } else {
            attr.values.iter().map(|v| OctetString::from(v.as_slice())).collect()
        };
        attributes.push(PartialAttribute { r#type: OctetString::from(attr.name.as_bytes()), vals });
    }
    let container = task.tree.contains(id);
    let has_subordinates: &'static [u8] = if container { b"TRUE" } else { b"FALSE" };
    let operational: [(&str, OctetString); 3] = [
        ("entrydn", OctetString::from(dn.as_bytes())),
        ("hassubordinates", OctetString::from_static(has_subordinates)),
        ("subschemasubentry", OctetString::from_static(b"cn=Subschema")),
    ];
    for (name, value) in operational {
        if sel.wants_operational(name) {
            let vals = if sel.types_only { Vec::new() } else { vec![value] };
            attributes.push(PartialAttribute {
                r#type: OctetString::from_static(display_name(name).as_bytes()),
                vals,
            });
        }
    }
    let message = LdapMessage {
        message_id: task.message_id,
        protocol_op: ProtocolOp::SearchResultEntry(SearchResultEntry {
            object_name: OctetString::from(dn.into_bytes()),
            attributes,
        }),
        controls: None,
    };
    encode_message(&message).map(Bytes::from).map_err(|e| ShardError::Unavailable(format!("encode: {e}")))
}

fn display_name(lower: &str) -> &'static str {
    match lower {
        "entrydn" => "entryDN",
        "hassubordinates" => "hasSubordinates",
        _ => "subschemaSubentry",
    }
}
