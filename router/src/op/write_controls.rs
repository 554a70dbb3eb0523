//! The controls a write (and, for the assertion, a Search or a Compare) may carry beyond
//! the core protocol, as slapd 2.5 answers them:
//! - **assertion** (RFC 4528): a filter the target entry must match, judged under the
//!   requester's search access. On a write it is judged by the shard's writer on the
//!   entry as staged, in the batch that commits the write (`shard::EntryCheck`): false
//!   answers assertionFailed (122) and nothing is written. On a Search (the base entry)
//!   and a Compare (the target), it is read like a base search with that filter.
//! - **pre-read / post-read** (RFC 4527): the entry as it was before the change and as it
//!   is after, from the same commit (the writer returns the staged record it changed),
//!   shown with the requested attributes under the requester's read access.
//! - **relax rules** (OpenLDAP): the rootDN, or an identity with `manage` access, may
//!   write NO-USER-MODIFICATION attributes (createTimestamp, entryUUID, ...) to migrate
//!   entries.
//!
//! A malformed value answers protocolError, as slapd does.

use std::sync::Arc;

use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::write_controls::{
    decode_assertion, decode_attribute_selection, encode_read_entry, ASSERTION_OID, POST_READ_OID,
    PRE_READ_OID, RELAX_OID,
};
use ferrodir_proto::message::{Control, OctetString, ProtocolOp};
use ferrodir_proto::ResultCode;
use ferrodir_shard::{
    AttrSelection, EntryCheck, EntryId, EntryRecord, EntryRules, Query, RuleTable, Skeleton, TypeSet,
};

use crate::access::{self, Subject};
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;

/// What the request's controls ask of a write.
#[derive(Default)]
pub struct WriteControls {
    pub assertion: Option<Filter>,
    pub pre_read: Option<Vec<OctetString>>,
    pub post_read: Option<Vec<OctetString>>,
    pub relax: bool,
}

impl WriteControls {
    /// Read from the operation's controls; a value that does not decode is protocolError.
    pub fn of(ctx: &OpContext) -> LdapResultOf<Self> {
        let mut out = Self::default();
        for control in ctx.controls.iter().flatten() {
            let value = control.control_value.as_deref();
            match std::str::from_utf8(&control.control_type).unwrap_or_default() {
                ASSERTION_OID => {
                    let bytes = value.ok_or_else(|| LdapError::protocol("assertion control value absent"))?;
                    let filter = decode_assertion(bytes)
                        .map_err(|_| LdapError::protocol("assertion control value is invalid"))?;
                    out.assertion = Some(filter);
                }
                PRE_READ_OID => {
                    let attrs = decode_attribute_selection(value)
                        .map_err(|_| LdapError::protocol("preread control value is invalid"))?;
                    out.pre_read = Some(attrs);
                }
                POST_READ_OID => {
                    let attrs = decode_attribute_selection(value)
                        .map_err(|_| LdapError::protocol("postread control value is invalid"))?;
                    out.post_read = Some(attrs);
                }
                RELAX_OID => out.relax = true,
                _ => {}
            }
        }
        Ok(out)
    }

    /// Whether the write must go as a `WriteOp::Checked` (its entry judged, or kept).
    pub fn checked(&self) -> bool {
        self.assertion.is_some() || self.pre_read.is_some()
    }
}

/// The assertion as the shard's writer judges it: the filter, with the types the requester
/// may not search Undefined (the search's rules, decided for the whole search or per entry).
#[derive(Debug)]
struct Assertion {
    filter: Filter,
    rules: Arc<RuleTable>,
    skeleton: Arc<Skeleton>,
    unsearchable: TypeSet,
    per_entry: Option<Arc<dyn EntryRules>>,
    /// The requester may read no entry at all: nothing can match.
    blind: bool,
}

impl EntryCheck for Assertion {
    fn holds(&self, id: EntryId, record: &EntryRecord) -> bool {
        if self.blind {
            return false;
        }
        let rights;
        let hidden = match &self.per_entry {
            Some(per_entry) => match per_entry.rights(&self.skeleton, id, record) {
                Some(found) => {
                    rights = found;
                    &rights.unsearchable
                }
                None => return false,
            },
            None => &self.unsearchable,
        };
        ferrodir_shard::filter_matches_entry(&self.rules, &self.filter, &record.entry, None, hidden, id)
    }
}

/// The requester's rights as a search of `id` would have them (the rootDN: every right).
async fn selection(
    ctx: &OpContext,
    subject: &Subject,
    id: EntryId,
    names: &[OctetString],
) -> (AttrSelection, bool) {
    let mut attrs = AttrSelection::from_request(names, false, &ctx.config.rules, &ctx.config.schema);
    let readable = access::restrict_search(ctx, subject, None, id, &mut attrs).await;
    (attrs, readable)
}

/// The shard-side check of `filter` for the requester, on entry `id` (for an Add, the
/// parent's id: only the rules' shape is decided from it).
pub async fn check(ctx: &OpContext, subject: &Subject, filter: Filter, id: EntryId) -> Arc<dyn EntryCheck> {
    let (attrs, readable) = selection(ctx, subject, id, &[]).await;
    Arc::new(Assertion {
        filter,
        rules: ctx.config.rules.clone(),
        skeleton: ctx.worker.skeleton(),
        unsearchable: attrs.unsearchable,
        per_entry: attrs.per_entry,
        blind: !readable,
    })
}

/// Whether a Search's base or a Compare's target (entry `id`) matches the assertion, read
/// as a base search with it: noSuchObject and the access rules as for the search itself.
pub async fn holds_on(
    ctx: &OpContext,
    subject: &Subject,
    filter: &Filter,
    id: EntryId,
) -> LdapResultOf<bool> {
    let (attrs, readable) = selection(ctx, subject, id, &[OctetString::from_static(b"1.1")]).await;
    if !readable {
        return Ok(false);
    }
    let skeleton = ctx.worker.skeleton();
    let query = Query { message_id: 0, skeleton: &skeleton, filter, attrs: &attrs, hub: ctx.worker.hub() };
    Ok(crate::op::read::lookup(ctx, &query, id).await?.is_some())
}

/// `op` as the shard must take it: a `WriteOp::Checked` when the write carries an
/// assertion or asks for the entry as it was; itself otherwise. `id`: the entry the
/// assertion's rules are decided on (an Add's parent).
pub async fn wrap(
    ctx: &OpContext,
    subject: &Subject,
    asked: &WriteControls,
    op: ferrodir_shard::WriteOp,
    id: EntryId,
) -> ferrodir_shard::WriteOp {
    if !asked.checked() {
        return op;
    }
    let check = match &asked.assertion {
        Some(filter) => Some(check(ctx, subject, filter.clone(), id).await),
        None => None,
    };
    ferrodir_shard::WriteOp::Checked(Box::new(ferrodir_shard::CheckedWrite { op, check }))
}

/// RFC 6171's dontUseCopy on a Search or a Compare of `dn`: on a replica's replicated
/// subtree, the referral to its provider (`update_referral`), or unwillingToPerform
/// without one (slapd: a replica is a copy); elsewhere this server is the authority.
pub fn refuse_copy(ctx: &OpContext, dn: &ferrodir_proto::NormDn) -> LdapResultOf<()> {
    let asked = ctx.controls.iter().flatten().any(|c| {
        c.control_type.as_ref() == ferrodir_proto::message::write_controls::DONT_USE_COPY_OID.as_bytes()
    });
    if !asked {
        return Ok(());
    }
    match ctx.config.replicated.iter().find_map(|area| area.refusal(dn)) {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}

/// A check that always holds: what a write sends to have the entry as it was kept (a
/// pre-read without an assertion, through the coordinator).
pub fn always() -> Arc<dyn EntryCheck> {
    Arc::new(Always)
}

#[derive(Debug)]
struct Always;

impl EntryCheck for Always {
    fn holds(&self, _: EntryId, _: &EntryRecord) -> bool {
        true
    }
}

/// The answer to a failed assertion.
pub fn failed() -> LdapError {
    LdapError::new(ResultCode::ASSERTION_FAILED, "assertion failed")
}

/// The pre-read or post-read response control (`oid`) showing `record` (entry `id`) with
/// the selected attributes under the requester's read access; None when it may not read
/// the entry (slapd then sends none).
pub async fn read_entry(
    ctx: &OpContext,
    subject: &Subject,
    oid: &'static str,
    names: &[OctetString],
    id: EntryId,
    record: Arc<EntryRecord>,
) -> Option<Control> {
    let (attrs, readable) = selection(ctx, subject, id, names).await;
    if !readable {
        return None;
    }
    let skeleton = ctx.worker.skeleton();
    let everything = Filter::present("objectClass");
    let query = Query {
        message_id: 0,
        skeleton: &skeleton,
        filter: &everything,
        attrs: &attrs,
        hub: ctx.worker.hub(),
    };
    let pdu = ferrodir_shard::base_record(&ctx.config.rules, &query, id, record)?;
    let message = ferrodir_proto::message::decode_message(&pdu).ok()?;
    let ProtocolOp::SearchResultEntry(entry) = message.protocol_op else { return None };
    let value = encode_read_entry(&entry).ok()?;
    Some(Control {
        control_type: OctetString::from_static(oid.as_bytes()),
        criticality: false,
        control_value: Some(OctetString::from(value)),
    })
}

/// Adds the pre-read and post-read controls a write asked for to its response: `before`
/// and `after` the entry's records from the write's commit (None: none, as for a Delete's
/// after).
pub async fn answer_reads(
    ctx: &OpContext,
    subject: &Subject,
    asked: &WriteControls,
    id: EntryId,
    before: Option<Arc<EntryRecord>>,
    after: Option<Arc<EntryRecord>>,
) {
    if let (Some(names), Some(record)) = (&asked.pre_read, before) {
        if let Some(control) = read_entry(ctx, subject, PRE_READ_OID, names, id, record).await {
            ctx.add_response_control(control);
        }
    }
    if let (Some(names), Some(record)) = (&asked.post_read, after) {
        if let Some(control) = read_entry(ctx, subject, POST_READ_OID, names, id, record).await {
            ctx.add_response_control(control);
        }
    }
}
