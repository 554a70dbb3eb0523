//! A Ferrodir shard: one partition of the directory, owned by one actix actor.
//!
//! # Layout
//! - [`id`]: entry ids and placement (which shard holds what).
//! - [`storage`]: the byte-level storage trait and its engines (redb default, sled), and
//!   what a shard does when its file fails (docs/ARCHITECTURE.md, "Faults").
//! - [`keys`], [`codec`], [`record`]: how entries and index postings are laid out on disk;
//!   [`layout`]: the keys storing or changing an entry writes (staging and import alike).
//! - [`index`]: per-attribute index configuration and the keys an entry contributes.
//! - [`bloom`]: per-shard Bloom filters of equality keys, to skip shards on equality searches.
//! - [`gramsummary`]: which shards may hold a substring gram, to skip shards on substring
//!   searches.
//! - [`eqkey`]: the equality-key rule that index keys, lookups and Bloom filters share.
//! - [`rules`]: each attribute type's matching rules, resolved once from the schema.
//! - [`rights`]: what a requester may see of an entry, as the router decided it (the
//!   shard knows no access rules).
//! - [`core`]: the read side (snapshot, entry cache), shared on the worker thread.
//! - [`entrycache`], [`compactentry`]: each shard's entry cache, shared by its owner and
//!   every worker's replica, bounded in bytes, and the compact form it keeps entries in.
//! - [`batch`], [`commit`]: group commit — staging writes against uncommitted state, and the
//!   thread that syncs each batch.
//! - [`actor`]: the shard actor and its messages.
//! - [`fatal`]: a panic in the write path (staging, commit, publish) aborts the process.
//! - [`search`], [`eval`]: what a search asks of a shard, answered inline (lookups), and
//!   filter evaluation (assertions on types the requester may not search are Undefined).
//! - [`memberof`]: the memberOf virtual attribute, from member/uniqueMember's equality
//!   postings on every shard, and the walks of the group graph.
//! - [`candidates`]: which entries a search examines: index plans, lazy scope walks.
//! - [`prefilter`]: skipping entries that lack every type a filter needs, undecoded.
//! - [`scan`]: long searches on the search pool, never on a shard actor's thread.
//! - [`stop`]: the signals (Abandon, limits, a closed connection) that stop a search.
//! - [`segments`]: pre-encoded attribute segments and the SearchResultEntry encoder.
//! - [`modify`]: applying a Modify's changes to an entry.
//! - [`refs`]: referential integrity: finding and rewriting the values that name a DN.
//! - [`skeleton`]: the tree of container entries every worker reads.
//! - [`stamp`]: the operational attributes stamped on every write, and the CSN clock.
//! - [`deletelog`]: the durable, bounded log of deletes and moves that a sync refresh's
//!   delete phase reads.

#![forbid(unsafe_code)]
// Library code never panics on input: errors are typed (STYLE.md 4, 14). Tests and
// benches may unwrap.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)
)]

pub mod actor;
pub mod alarm;
pub mod batch;
pub mod bloom;
pub mod candidates;
pub mod codec;
pub mod commit;
pub mod compactentry;
pub mod core;
pub mod deletelog;
pub mod entrycache;
pub mod eqkey;
pub mod error;
pub mod eval;
pub mod fatal;
pub mod gramsummary;
pub mod id;
pub mod index;
pub mod keys;
pub mod layout;
pub mod memberof;
pub mod modify;
pub mod prefilter;
pub mod record;
pub mod refs;
pub mod rights;
pub mod rules;
pub mod scan;
pub mod search;
pub mod segments;
pub mod skeleton;
pub mod sortkeys;
pub mod stamp;
pub mod stop;
pub mod storage;
pub mod watermark;

// The public interface is:
//
// The shard actor, its read side and the messages the router sends it.
pub use crate::actor::{
    CloseAndCount, Fetch, FindRefs, KeepDeleteLog, Lookup, Ping, ReadDeleteLog, Reopen, ShardActor, Stage,
    Write, COMMIT_COALESCE_DEFAULT,
};
pub use crate::core::{CoreStats, ShardCore, ShardInfo};
pub use crate::entrycache::EntryCache;
pub use crate::error::{ShardError, ShardResult};
// Entries, ids and placement.
pub use crate::id::{shard_for_child, EntryId, PLACEMENT_VERSION};
pub use crate::record::{EntryRecord, FLAG_CONTAINER};
pub use crate::skeleton::{Skeleton, SkeletonCell};
// Writes.
pub use crate::batch::{Stager, WriteOp, WriteOutcome, REPLICA_AUTHOR};
pub use crate::modify::{find_attr, value_key};
pub use crate::refs::RefRewrite;
pub use crate::stamp::{
    civil_time, clock_now, csn_of, micros_of_csn, server_id, set_server_id, set_structural_class,
    stamp_imported, Stamp, SERVER_ID_MAX,
};
// Matching, indexing and the filters that skip shards.
pub use crate::bloom::{EqBloom, Probe};
pub use crate::eqkey::bloom_key;
pub use crate::eval::{
    has_class, has_options, id_set_filter, is_id_set, matches as filter_matches,
    matches_entry as filter_matches_entry, mentions as filter_mentions, ID_SET_RULE,
};
pub use crate::gramsummary::GramShards;
pub use crate::index::{IndexConfig, IndexKind};
pub use crate::prefilter::referenced_names;
pub use crate::rights::{EntryRights, EntryRules, TypeSet};
pub use crate::rules::RuleTable;
// Searches.
pub use crate::candidates::{Plan, Planner};
pub use crate::scan::{ScanLimits, ScanPool, ScanSource};
pub use crate::search::{
    base_entry, base_record, inline_page, inline_search, inline_search_into, AttrSelection, InlinePrep,
    Query, Scope, SearchChunk, SearchTask, Window, WindowEnd, CHUNK_ENTRIES_MAX,
};
pub use crate::sortkeys::{decode_row as decode_sort_row, Row as SortRow, SortKey, SortSpec};
pub use crate::stop::{StopReason, StopSignal};
// memberOf.
pub use crate::memberof::{
    check as check_memberof_query, too_deep as memberof_too_deep, too_many as memberof_too_many, GroupAccess,
    Groups, MemberOfOptions, MemberOfQuery, MEMBER_OF, MEMBER_TYPES,
};
// Sync: the delete log and the watermark hub.
pub use crate::deletelog::{
    install_tree as install_delete_log_skeleton, prefix as delete_log_prefix, read as read_delete_log,
    set_max as set_delete_log_max, LogRecord, LogView, DEFAULT_MAX as DELETE_LOG_MAX_DEFAULT,
    KEPT_KEY as DELETE_LOG_KEPT_KEY,
};
pub use crate::watermark::{
    hub as watermark_hub, install as install_watermark_hub, replicated_context, set_replicated_context,
    Change, FeedBatch, Hub, Subscription,
};
// `storage` (storage engines, a module of its own) and, until the bulk loader and the offline
// tools move behind operations, `keys` and `layout` are public modules too.
