//! A Ferrodir shard: one partition of the directory, owned by one actix actor.
//!
//! # Layout
//! Five rooms, and the pieces that tie them together at the top:
//! - [`entry`]: how an entry is stored (record), cached (compact form) and sent (segments),
//!   over one bounds-checked codec.
//! - [`index`]: the on-disk key layout, per-attribute index configuration and the keys an
//!   entry contributes, the equality-key rule, and the Bloom filters and gram table that skip
//!   shards.
//! - [`query`]: one shard's part of a search: candidates, the prefilter, filter evaluation,
//!   the inline path and the pooled scan, sort keys, and the signals that stop a search.
//! - [`write`]: group commit (staging, the commit thread), Modify, the keys a stored entry
//!   writes, operational stamps and the CSN clock, the watermark hub and the delete log.
//! - [`storage`]: the byte-level storage trait and its engines (redb default, sled), what a
//!   shard does when its file fails (docs/ARCHITECTURE.md, "Faults"), and
//!   [`storage::open`], which every redb file opens through with the
//!   [`storage::StorageOptions`] (page cache, write log size, crash-test modes) its caller
//!   passes: no storage setting is a process global.
//! - [`bulk`]: one shard's write stage of an offline load: its bulk transaction, the
//!   external sort of its keys, its metadata.
//!
//! At the top, because every room uses them or they use every room:
//! - [`actor`]: the shard actor and its messages (uses every room).
//! - [`core`]: the read side (snapshot, entry cache), shared on the worker thread; its
//!   [`entrycache`] is shared by the owner and every worker's view of the shard.
//! - [`skeleton`]: the tree of container entries every worker reads (queries and writes).
//! - [`memberof`]: the memberOf virtual attribute and walks of the group graph (queries
//!   over index postings of several shards).
//! - [`refs`]: referential integrity: finding and rewriting values that name a DN (a query
//!   that feeds writes).
//! - [`rules`], [`rights`], [`id`], [`error`]: each attribute type's matching rules, what a
//!   requester may see (as the router decided it), entry ids and placement, and the error
//!   type: the ground floor every room stands on.
//! - [`fatal`], [`alarm`]: a panic in the write path aborts the process; timers that flag a
//!   stuck actor.
//!
//! Every module is `pub(crate)`; other crates use the names re-exported below (the public
//! interface), plus `storage` and `offline` (what the offline tools read and rewrite of a
//! shard, as operations: the key layout never leaves this crate).

#![forbid(unsafe_code)]
// Library code never panics on input: errors are typed (CONTRIBUTING.md, "Nothing a
// client sends can panic the server"). Tests and benches may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)
)]

pub(crate) mod actor;
pub(crate) mod alarm;
pub use crate::alarm::sleep_precisely;
pub(crate) mod bulk;
pub(crate) mod core;
pub(crate) mod entry;
pub(crate) mod entrycache;
pub(crate) mod error;
pub(crate) mod fatal;
pub(crate) mod id;
pub(crate) mod index;
pub(crate) mod memberof;
pub mod offline;
pub(crate) mod query;
pub(crate) mod refs;
pub(crate) mod rights;
pub(crate) mod rules;
pub(crate) mod skeleton;
pub mod storage;
pub(crate) mod write;

// The public interface is:
//
// The shard actor, its read side and the messages the router sends it.
pub use crate::actor::{
    CloseAndCount, Fetch, FindRefs, KeepDeleteLog, Lookup, Ping, ReadChangelog, ReadDeleteLog, Reopen,
    SetChangelog, ShardActor, Stage, Write, COMMIT_COALESCE_DEFAULT,
};
pub use crate::core::{CoreStats, ShardCore, ShardInfo};
pub use crate::entrycache::EntryCache;
pub use crate::error::{ShardError, ShardResult};
// Entries, ids and placement.
pub use crate::entry::record::{EntryRecord, FLAG_CONTAINER};
pub use crate::id::{shard_for_child, EntryId, PLACEMENT_VERSION};
pub use crate::skeleton::{Skeleton, SkeletonCell};
// Writes.
pub use crate::refs::RefRewrite;
pub use crate::write::batch::{CheckedWrite, Stager, WriteOp, WriteOutcome, REPLICA_AUTHOR};
pub use crate::write::clock::{Clock, SERVER_ID_MAX};
pub use crate::write::indexing::IndexWork;
pub use crate::write::modify::{find_attr, value_key};
pub use crate::write::stamp::{
    attribute_csns, civil_time, format_csn, micros_of_csn, set_attribute_csns, set_structural_class,
    stamp_imported, uuid_octets, Stamp, ATTR_CSN_TYPE, UNTRACKED as ATTR_CSN_UNTRACKED,
};
pub use crate::write::update::{EntryCheck, EntryUpdate};
// Matching, indexing and the filters that skip shards.
pub use crate::index::bloom::{EqBloom, Probe};
pub use crate::index::config::{IndexConfig, IndexKind};
pub use crate::index::eqkey::bloom_key;
pub use crate::index::gramsummary::GramShards;
pub use crate::query::eval::{
    has_class, has_options, id_set_filter, is_id_set, matches as filter_matches,
    matches_entry as filter_matches_entry, mentions as filter_mentions, ID_SET_RULE,
};
pub use crate::query::prefilter::referenced_names;
pub use crate::rights::{EntryRights, EntryRules, TypeSet};
pub use crate::rules::RuleTable;
// Searches.
pub use crate::query::candidates::{Plan, Planner};
pub use crate::query::scan::{ScanLimits, ScanPool, ScanSource};
pub use crate::query::scope::Scope;
pub use crate::query::search::{
    base_entry, base_record, inline_page, inline_search, inline_search_into, AttrSelection, InlinePrep,
    Query, SearchChunk, SearchTask, Window, WindowEnd, CHUNK_ENTRIES_MAX,
};
pub use crate::query::sortkeys::{decode_row as decode_sort_row, Row as SortRow, SortKey, SortSpec};
pub use crate::query::stop::{StopReason, StopSignal};
// memberOf.
pub use crate::memberof::{
    check as check_memberof_query, too_deep as memberof_too_deep, too_many as memberof_too_many, GroupAccess,
    Groups, MemberOfOptions, MemberOfQuery, MEMBER_OF, MEMBER_TYPES,
};
// Sync: the delete log and the watermark hub.
pub use crate::write::deletelog::{
    prefix as delete_log_prefix, read as read_delete_log, DeleteLogSettings, LogRecord, LogView,
    DEFAULT_MAX as DELETE_LOG_MAX_DEFAULT, KEPT_KEY as DELETE_LOG_KEPT_KEY,
};
pub use crate::write::watermark::{Change, FeedBatch, Hub, Subscription};
// The retro changelog (cn=changelog).
pub use crate::write::changelog::{
    prefix as changelog_prefix, read as read_changelog, ChangeKind, ChangeRecord, ChangelogSettings,
};
// Offline loads: one shard's bulk transaction, and the index-ready marks.
pub use crate::bulk::{BulkError, BulkLoader, BulkResult, Fed, LoadStats, Loaded, ShardWriter, SortSpill};
pub use crate::index::marks::{
    mark as index_mark, mark_all_ready as mark_indexes_ready, marked as indexes_marked,
    ready_everywhere as indexes_ready_everywhere, ready_marks as index_ready_marks,
    ready_prefix as index_ready_prefix,
};
// `storage` (storage engines) and `offline` (what the offline tools read and rewrite of a
// shard, the key layout kept inside) are public modules of their own.
