//! Server-side sorting (RFC 2891) and Virtual List View (draft-ietf-ldapext-ldapv3-vlv-09),
//! answered as OpenLDAP slapd's sssvlv overlay answers them, across shards.
//!
//! A sorted search collects every match's id and sort keys from the shards (`collect`),
//! sorts them with the one comparator of `shard::sortkeys`, and sends the entries it has to
//! send by reading each by id (a base read, which applies the access rules and the
//! attribute selection again). With the paged-results control (RFC 2696) or VLV, the
//! sorted rows stay on the server between requests in a per-connection session (`store`),
//! as sssvlv keeps its tree: the next page or window is a slice of them, not a new sort.
//! When the sort control is present this module owns the paged-results control too.
//!
//! Result codes, as sssvlv (checked against slapd by tests/conformance/sort.rs):
//! - a key naming an unknown attribute: noSuchAttribute (16); no ordering rule (the
//!   attribute has none, or the one named is unknown or not an ordering rule):
//!   inappropriateMatching (18); either way whatever the criticality, without sortResult;
//! - more keys than `sort_keys_max`: unwillingToPerform (53); VLV with paged results: 53;
//! - no free session slot on the connection, or the session asked for is busy: busy (51);
//! - VLV without the sort control: virtualListViewError (76) with a VLV response whose
//!   result is sortControlMissing (60); an offset past the list: 76 with offsetRangeError
//!   (61) (slapd 2.5 puts 76 and 77 in the VLV response there, its fallback values for
//!   names its ldap.h lacks; we send the draft's);
//! - more matches than `sort_entries_max`: adminLimitExceeded (11), with sortResult 11,
//!   and no entries (RFC 2891 would send a non-critical search's entries unsorted; that
//!   would take the memory the limit exists to bound);
//! - a sizeLimit cuts the sorted list: sizeLimitExceeded (4) after the first entries, no
//!   sortResult; every other result carries sortResult with the search's result code.

pub mod collect;
pub mod store;
pub mod vlv;

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferrodir_proto::message::sort_vlv::{
    decode_sort_keys, encode_sort_result, encode_vlv_response, VlvRequest, VlvTarget, SORT_REQUEST_OID,
    SORT_RESPONSE_OID, VLV_REQUEST_OID, VLV_RESPONSE_OID,
};
use ferrodir_proto::message::{Control, LdapResult, OctetString, PagedResults, PAGED_RESULTS_OID};
use ferrodir_proto::schema::matching::{self, Kind as RuleKind};
use ferrodir_proto::ResultCode;
use ferrodir_shard::{SortKey, SortRow, SortSpec};

use crate::error::LdapResultOf;
use crate::op::context::{OpContext, Outbound};
use crate::op::read::{self, Bounds, Target};
use collect::Collected;
use store::{Kept, Kind, Refused, Slot};

pub use store::Sessions;

/// The draft's virtualListViewError result code, and its VLV results.
const VLV_ERROR: ResultCode = ResultCode(76);
const SORT_CONTROL_MISSING: u32 = 60;
const OFFSET_RANGE_ERROR: u32 = 61;

/// What a sorted search continues, or starts.
enum Mode {
    Plain,
    Paged { size: usize },
    Vlv { before: usize, after: usize, target: VlvTarget },
}

/// A request refused before it ran, with the response controls to send.
pub struct Refusal {
    pub result: LdapResult,
    pub controls: Option<Vec<Control>>,
}

impl Refusal {
    fn plain(code: ResultCode, text: &str) -> Self {
        Self { result: LdapResult::error(code, text), controls: None }
    }
}

/// What the response controls report, filled in as the search runs.
#[derive(Default)]
struct Outcome {
    /// No sort (or paged) response: a sizeLimit cut the list, or VLV answers alone.
    without_sort_result: bool,
    /// Paged: the rows left and the cookie that continues (empty: the end).
    paged: Option<(usize, Vec<u8>)>,
    /// VLV: target position, content count, result, contextID.
    vlv: Option<(usize, usize, u32, Vec<u8>)>,
}

/// One sorted search's request, its session slot and its outcome.
pub struct Sorting {
    spec: Arc<SortSpec>,
    mode: Mode,
    slot: RefCell<Option<Slot>>,
    /// The rows a continuation resumes with.
    resumed: RefCell<Option<Kept>>,
    outcome: RefCell<Outcome>,
}

fn oid_is(control: &Control, oid: &str) -> bool {
    control.control_type.as_ref() == oid.as_bytes()
}

fn protocol_error(text: &str) -> Refusal {
    Refusal::plain(ResultCode::PROTOCOL_ERROR, text)
}

/// The VLV request a control carries (protocolError if it doesn't parse).
fn parse_vlv(control: &Control) -> Result<(usize, usize, VlvTarget, Vec<u8>), Refusal> {
    let value =
        control.control_value.as_deref().ok_or_else(|| protocol_error("vlv control value is absent"))?;
    let request =
        VlvRequest::decode_value(value).map_err(|_| protocol_error("vlv control value is invalid"))?;
    let count = |n: i64| usize::try_from(n).map_err(|_| protocol_error("vlv control value is invalid"));
    let (before, after) = (count(request.before_count)?, count(request.after_count)?);
    if let VlvTarget::ByOffset(by) = &request.target {
        count(by.offset)?;
        count(by.content_count)?;
    }
    Ok((before, after, request.target, request.context_id.map(|c| c.to_vec()).unwrap_or_default()))
}

/// The keys of a sort control, resolved against the schema, as sssvlv's `build_key`.
fn parse_keys(ctx: &OpContext, control: &Control) -> Result<SortSpec, Refusal> {
    let value = control
        .control_value
        .as_deref()
        .ok_or_else(|| protocol_error("sorted results control value is absent"))?;
    if value.is_empty() {
        return Err(protocol_error("sorted results control value is empty"));
    }
    let items = decode_sort_keys(value).map_err(|_| protocol_error("serverSort control: decoding error"))?;
    if items.is_empty() {
        return Err(protocol_error("serverSort control: decoding error"));
    }
    let rules = &ctx.config.rules;
    let mut keys = Vec::with_capacity(items.len());
    for item in items {
        let name = String::from_utf8_lossy(&item.attribute_type);
        let unknown = || {
            Refusal::plain(
                ResultCode::NO_SUCH_ATTRIBUTE,
                "serverSort control: Unrecognized attribute type in sort key",
            )
        };
        let attr = rules.get(&name).filter(|_| !name.contains(';')).ok_or_else(unknown)?;
        let no_rule =
            || Refusal::plain(ResultCode::INAPPROPRIATE_MATCHING, "serverSort control: No ordering rule");
        let (rule, normalize) = match &item.ordering_rule {
            Some(named) => {
                let named = String::from_utf8_lossy(named);
                match matching::lookup(&named) {
                    Some((rule, RuleKind::Ordering)) => (rule, rule),
                    _ => return Err(no_rule()),
                }
            }
            None => {
                let rule = attr.ordering.ok_or_else(no_rule)?;
                (rule, attr.equality.unwrap_or(rule))
            }
        };
        keys.push(SortKey {
            canonical: attr.canonical.clone(),
            rule,
            normalize,
            reverse: item.reverse_order,
        });
    }
    Ok(SortSpec { keys })
}

/// The controls that make a sorted search, each at most once.
#[derive(Default)]
struct Requested<'c> {
    sort: Option<&'c Control>,
    vlv: Option<&'c Control>,
    paged: Option<&'c Control>,
}

impl<'c> Requested<'c> {
    fn of(ctx: &'c OpContext) -> Result<Self, Refusal> {
        let mut found = Self::default();
        for control in ctx.controls.iter().flatten() {
            let slot = if oid_is(control, SORT_REQUEST_OID) {
                &mut found.sort
            } else if oid_is(control, VLV_REQUEST_OID) {
                &mut found.vlv
            } else if oid_is(control, PAGED_RESULTS_OID) {
                &mut found.paged
            } else {
                continue;
            };
            if slot.replace(control).is_some() {
                return Err(protocol_error("control specified multiple times"));
            }
        }
        Ok(found)
    }
}

/// The page size and cookie of a paged-results control.
fn parse_paged(control: &Control) -> Result<(usize, Vec<u8>), Refusal> {
    let value = control.control_value.as_deref().unwrap_or_default();
    let value = PagedResults::decode_value(value)
        .map_err(|_| protocol_error("paged results control value is invalid"))?;
    Ok((usize::try_from(value.size).unwrap_or(usize::MAX), value.cookie.to_vec()))
}

type VlvRequested = (usize, usize, VlvTarget, Vec<u8>);

/// The session slot the search runs in: the kept session its cookie or contextID names,
/// with its rows, or a new one.
fn session(
    ctx: &OpContext,
    paged: Option<&(usize, Vec<u8>)>,
    vlv: Option<&VlvRequested>,
) -> Result<(Slot, Option<Kept>), Refusal> {
    let limits = ctx.config.sort;
    let (max, idle) = (limits.sessions_per_connection_max, limits.session_idle);
    let busy = || Refusal::plain(ResultCode::BUSY, "Other sort requests already in progress");
    let resumed = match (paged, vlv) {
        (Some((size, cookie)), _) if !cookie.is_empty() => {
            match ctx.sorts.resume(Kind::Paged, cookie, idle) {
                Ok((slot, _)) if *size == 0 => {
                    // pageSize 0 with a cookie: the client is done; free the session.
                    drop(slot);
                    return Err(Refusal::plain(ResultCode::SUCCESS, ""));
                }
                Ok(resumed) => Some(resumed),
                Err(Refused::Busy) => return Err(busy()),
                Err(Refused::Unknown) => return Err(protocol_error("paged results cookie is invalid")),
            }
        }
        (_, Some((_, _, _, context))) if !context.is_empty() => {
            match ctx.sorts.resume(Kind::Vlv, context, idle) {
                Ok(resumed) => Some(resumed),
                Err(Refused::Busy) => return Err(busy()),
                Err(Refused::Unknown) => None, // an unknown context starts a new list
            }
        }
        _ => None,
    };
    Ok(match resumed {
        Some((slot, kept)) => (slot, Some(kept)),
        None => (ctx.sorts.reserve(max, idle).map_err(|_| busy())?, None),
    })
}

impl Sorting {
    /// The sorted search the request's controls ask for, if any: parsed, checked and with
    /// its session slot taken. Err: the answer to send instead (nothing runs).
    pub fn from_request(ctx: &OpContext) -> Result<Option<Self>, Refusal> {
        let requested = Requested::of(ctx)?;
        let vlv = requested.vlv.map(parse_vlv).transpose()?;
        let Some(sort) = requested.sort else {
            if vlv.is_none() {
                return Ok(None); // not a sorted search: paging alone is op::paged's
            }
            let response = encode_vlv_response(0, 0, SORT_CONTROL_MISSING, None);
            return Err(Refusal {
                result: LdapResult::error(VLV_ERROR, "Sort control is required with VLV"),
                controls: Some(vec![response_control(VLV_RESPONSE_OID, response)]),
            });
        };
        let spec = parse_keys(ctx, sort)?;
        if spec.keys.len() > ctx.config.sort.keys_max {
            return Err(Refusal::plain(ResultCode::UNWILLING_TO_PERFORM, "Too many sort keys"));
        }
        let paged = requested.paged.map(parse_paged).transpose()?;
        if paged.is_some() && vlv.is_some() {
            return Err(Refusal::plain(
                ResultCode::UNWILLING_TO_PERFORM,
                "VLV incompatible with PagedResults",
            ));
        }
        let (slot, kept) = session(ctx, paged.as_ref(), vlv.as_ref())?;
        let mode = match (paged, vlv) {
            (Some((size, _)), _) => Mode::Paged { size },
            (None, Some((before, after, target, _))) => Mode::Vlv { before, after, target },
            (None, None) => Mode::Plain,
        };
        // A continuation goes on with the order it started with.
        let spec = kept.as_ref().map(|k| k.spec.clone()).unwrap_or_else(|| Arc::new(spec));
        Ok(Some(Self {
            spec,
            mode,
            slot: RefCell::new(Some(slot)),
            resumed: RefCell::new(kept),
            outcome: RefCell::new(Outcome::default()),
        }))
    }

    /// The response controls for the search's final result.
    pub fn response_controls(&self, result: &LdapResult) -> Option<Vec<Control>> {
        let outcome = self.outcome.borrow();
        let mut controls = Vec::new();
        if !outcome.without_sort_result {
            controls.push(response_control(SORT_RESPONSE_OID, encode_sort_result(result.result_code.0)));
            if let Mode::Paged { .. } = self.mode {
                let (left, cookie) = outcome.paged.clone().unwrap_or_default();
                let value = PagedResults { size: clamp(left), cookie: OctetString::from(cookie) };
                let value = value.encode_value().unwrap_or_default();
                controls.push(response_control(PAGED_RESULTS_OID, value));
            }
        }
        if let Mode::Vlv { .. } = self.mode {
            let (target, count, code, context) = outcome.vlv.clone().unwrap_or_default();
            let value = encode_vlv_response(clamp(target), clamp(count), code, Some(&context));
            controls.push(response_control(VLV_RESPONSE_OID, value));
        }
        (!controls.is_empty()).then_some(controls)
    }
}

fn clamp(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX).min(ferrodir_proto::message::MESSAGE_ID_MAX)
}

fn response_control(oid: &'static str, value: Vec<u8>) -> Control {
    Control {
        control_type: OctetString::from_static(oid.as_bytes()),
        criticality: false,
        control_value: Some(OctetString::from(value)),
    }
}

/// Runs a sorted search of `target` over `scopes` (its own, or those a search that follows
/// aliases reads), which op::search resolved and authorized, within
/// `bounds`: the rows collected (or resumed), the page or window of them sent, and the
/// session kept for the next request.
/// `expansion`: the dynlist stage, applied to each entry sent.
pub(crate) async fn run(
    ctx: &OpContext,
    sorting: &Sorting,
    target: &Target,
    scopes: &[ferrodir_shard::Scope],
    bounds: &Bounds<'_>,
    expansion: Option<&crate::op::dynlist::Expansion>,
) -> LdapResultOf<LdapResult> {
    let resumed = sorting.resumed.borrow_mut().take();
    let (rows, next) = match resumed {
        Some(kept) => (kept.rows, kept.next),
        None => match collect::collect(ctx, target, scopes, bounds, &sorting.spec).await? {
            Collected::Rows(rows) => (rows, 0),
            Collected::TooMany => {
                return Ok(LdapResult::error(ResultCode::ADMIN_LIMIT_EXCEEDED, "sort_entries_max exceeded"));
            }
            Collected::TimeLimit => return Ok(LdapResult::error(ResultCode::TIME_LIMIT_EXCEEDED, "")),
            Collected::Cancelled => return Ok(LdapResult::success()),
        },
    };
    let (start, end) = match slice(ctx, sorting, &rows, next) {
        Ok(range) => range,
        Err(Slice::Unnormalised) => {
            return Ok(LdapResult::error(VLV_ERROR, "VLV assertion value does not normalise"))
        }
        Err(Slice::OutOfRange) => {
            keep_vlv(sorting, rows, ctx.config.sort.session_idle);
            return Ok(LdapResult::error(VLV_ERROR, "VLV offset is out of range"));
        }
    };
    if let Some(ended) =
        send_rows(ctx, sorting, target, rows.get(start..end).unwrap_or(&[]), bounds, expansion).await?
    {
        return Ok(ended);
    }
    keep(ctx, sorting, rows, end);
    Ok(LdapResult::success())
}

/// Why a VLV request has no window.
enum Slice {
    /// The greaterThanOrEqual value does not normalise under the first key's rule.
    Unnormalised,
    /// offsetRangeError.
    OutOfRange,
}

/// The rows to send, `start..end`: all of them, the page from `next`, or the VLV window
/// (whose target and count go into the outcome).
fn slice(ctx: &OpContext, sorting: &Sorting, rows: &[SortRow], next: usize) -> Result<(usize, usize), Slice> {
    let n = rows.len();
    let (before, after, target) = match &sorting.mode {
        Mode::Plain => return Ok((0, n)),
        Mode::Paged { size } => return Ok((next.min(n), next.saturating_add(*size).min(n))),
        Mode::Vlv { before, after, target } => (*before, *after, target),
    };
    let window = match target {
        VlvTarget::ByOffset(by) => {
            let offset = usize::try_from(by.offset).unwrap_or(0);
            let count = usize::try_from(by.content_count).unwrap_or(0);
            vlv::by_offset(n, before, after, offset, count)
        }
        VlvTarget::GreaterThanOrEqual(value) => {
            let first = sorting.spec.keys.first().and_then(|k| k.encode(value, ctx.config.rules.dn()));
            let Some(assertion) = first else {
                let mut outcome = sorting.outcome.borrow_mut();
                outcome.without_sort_result = true;
                outcome.vlv = Some((0, n, ResultCode::INAPPROPRIATE_MATCHING.0, Vec::new()));
                return Err(Slice::Unnormalised);
            };
            Ok(vlv::by_value(n, before, after, first_not_below(&sorting.spec, rows, assertion)))
        }
    };
    let mut outcome = sorting.outcome.borrow_mut();
    match window {
        Ok(window) => {
            outcome.vlv = Some((window.target, n, 0, Vec::new()));
            Ok((window.start, window.end))
        }
        Err(vlv::RangeError) => {
            outcome.without_sort_result = true;
            outcome.vlv = Some((0, n, OFFSET_RANGE_ERROR, Vec::new()));
            Err(Slice::OutOfRange)
        }
    }
}

/// Sends the entries of `rows`, each read again by id (which applies the access rules and
/// the attribute selection to the entry as it is now). Some(result): the sending ended
/// early (sizeLimit, Abandon).
async fn send_rows(
    ctx: &OpContext,
    sorting: &Sorting,
    target: &Target,
    rows: &[SortRow],
    bounds: &Bounds<'_>,
    expansion: Option<&crate::op::dynlist::Expansion>,
) -> LdapResultOf<Option<LdapResult>> {
    let query = target.query(ctx.message_id, ctx.worker.hub());
    let mut sent: u64 = 0;
    for row in rows {
        if ctx.cancelled() {
            return Ok(Some(LdapResult::success()));
        }
        if bounds.size_limit.is_some_and(|max| sent >= u64::from(max)) {
            sorting.outcome.borrow_mut().without_sort_result = true;
            return Ok(Some(LdapResult::error(ResultCode::SIZE_LIMIT_EXCEEDED, "")));
        }
        let Some(pdu) = read::lookup(ctx, &query, row.id).await? else { continue };
        let pdu = match expansion {
            Some(expansion) => expansion.expand_pdu(ctx, pdu).await?,
            None => pdu,
        };
        sent += 1;
        send(ctx, pdu).await;
    }
    Ok(None)
}

/// Keeps the rows for the next page (with a cookie, while rows are left) or VLV window.
fn keep(ctx: &OpContext, sorting: &Sorting, rows: Vec<SortRow>, end: usize) {
    let idle = ctx.config.sort.session_idle;
    match &sorting.mode {
        Mode::Plain => {}
        Mode::Paged { .. } => {
            let left = rows.len() - end;
            let slot = if left > 0 { sorting.slot.borrow_mut().take() } else { None };
            let cookie = match slot {
                Some(slot) => {
                    slot.keep(Kind::Paged, Kept { rows, next: end, spec: sorting.spec.clone() }, idle)
                }
                None => Vec::new(),
            };
            sorting.outcome.borrow_mut().paged = Some((left, cookie));
        }
        Mode::Vlv { .. } => keep_vlv(sorting, rows, idle),
    }
}

/// Keeps a VLV list for the next window and records its contextID.
fn keep_vlv(sorting: &Sorting, rows: Vec<SortRow>, idle: Duration) {
    let Some(slot) = sorting.slot.borrow_mut().take() else { return };
    let context = slot.keep(Kind::Vlv, Kept { rows, next: 0, spec: sorting.spec.clone() }, idle);
    if let Some(vlv) = sorting.outcome.borrow_mut().vlv.as_mut() {
        vlv.3 = context;
    }
}

/// The index of the first row not below `assertion` under the first key, the other keys
/// absent: sssvlv's comparison of its search node with the tree's.
fn first_not_below(spec: &SortSpec, rows: &[SortRow], assertion: Vec<u8>) -> usize {
    let mut probe = vec![None; spec.keys.len()];
    if let Some(first) = probe.first_mut() {
        *first = Some(assertion.into_boxed_slice());
    }
    rows.partition_point(|row| spec.compare(&row.keys, &probe) == std::cmp::Ordering::Less)
}

async fn send(ctx: &OpContext, pdu: Bytes) {
    ctx.count_entries(1);
    let _ = ctx.out.send(Outbound::Pdu(pdu)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::schema::matching::Rule;
    use ferrodir_shard::EntryId;

    #[test]
    fn greater_or_equal_finds_the_first_row_not_below_in_either_direction() {
        let key = |reverse| SortKey {
            canonical: "sn".into(),
            rule: Rule::CaseIgnore,
            normalize: Rule::CaseIgnore,
            reverse,
        };
        let rows = |values: &[Option<&str>]| -> Vec<SortRow> {
            values
                .iter()
                .enumerate()
                .map(|(i, v)| SortRow { id: EntryId(i as u64), keys: vec![v.map(|v| v.as_bytes().into())] })
                .collect()
        };
        let forward = SortSpec { keys: vec![key(false)] };
        let list = rows(&[Some("alpha"), Some("bravo"), Some("charlie"), None]);
        assert_eq!(first_not_below(&forward, &list, b"b".to_vec()), 1);
        assert_eq!(first_not_below(&forward, &list, b"bravo".to_vec()), 1);
        assert_eq!(first_not_below(&forward, &list, b"d".to_vec()), 3); // before the keyless
        let reverse = SortSpec { keys: vec![key(true)] };
        let list = rows(&[None, Some("charlie"), Some("bravo"), Some("alpha")]);
        // In reverse, "not below" means not after in the reversed order: bravo and on.
        assert_eq!(first_not_below(&reverse, &list, b"bz".to_vec()), 2);
        assert_eq!(first_not_below(&reverse, &list, b"a".to_vec()), 4);
    }
}
