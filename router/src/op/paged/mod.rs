//! Simple Paged Results (RFC 2696) across shards, with nothing kept between pages.
//!
//! The order is the entry id: immutable (not changed by rename or move) and shard-major
//! (its top bits name the home shard, `shard::id`), so a page walks the shards in turn,
//! starting at the shard of the last id sent, asking each for the matches after that id in
//! id order (`shard::search::Window`), inline on this thread when its indices narrow it to
//! a handful, else as a scan on the search pool. Each part sends what fits in the page and
//! looks for one match more, so the last page knows it is the last and its cookie is empty.
//! A page holds at most one page of entries in memory, and one part runs at a time.
//!
//! The position travels in the cookie (`cookie`), sealed under the data directory's key:
//! the client may run several paged searches on one connection, continue one on another
//! connection, or drop it without telling us. slapd allows one per connection and keeps
//! its state on the server.
//!
//! Under concurrent writes, an entry that exists unchanged for the whole paged search is
//! sent exactly once (its id is either before or after every cursor); an entry added,
//! deleted or moved in or out of scope meanwhile is sent at most once.
//!
//! Size limits count across pages, as slapd counts them (its `size.prtotal` defaults to
//! the hard limit): the page that would pass the limit stops at it with sizeLimitExceeded.

pub mod cookie;

use std::sync::Arc;

use bytes::Bytes;
use ferrodir_proto::message::{
    Control, LdapResult, OctetString, PagedResults, SearchRequest, PAGED_RESULTS_OID,
};
use ferrodir_proto::ResultCode;
use ferrodir_shard::{Scope, StopReason, Window};

use self::cookie::{CookieError, Position, SearchDigest};
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::{OpContext, Outbound};
use crate::op::read::{self, Bounds, Flow, Gathered, Sink, Target};
use crate::requester::Identity;

/// A search's paged-results control, decoded, and the cookie its response will carry.
#[derive(Debug)]
pub struct Paging {
    pub size: u32,
    cookie: Vec<u8>,
    digest: SearchDigest,
    /// The response's cookie: empty unless another page follows.
    pub next: Vec<u8>,
}

impl Paging {
    /// The request's paged-results control, if it has one. Two of them, or a value that is
    /// not a `realSearchControlValue`, is a protocolError (slapd's answer too).
    pub fn from_request(ctx: &OpContext, request: &SearchRequest) -> LdapResultOf<Option<Self>> {
        let mut found =
            ctx.controls.iter().flatten().filter(|c| c.control_type.as_ref() == PAGED_RESULTS_OID.as_bytes());
        let Some(control) = found.next() else { return Ok(None) };
        if found.next().is_some() {
            return Err(LdapError::new(
                ResultCode::PROTOCOL_ERROR,
                "paged results control specified multiple times",
            ));
        }
        let value = control.control_value.as_deref().unwrap_or_default();
        let value = PagedResults::decode_value(value).map_err(|_| {
            LdapError::new(ResultCode::PROTOCOL_ERROR, "paged results control value is malformed")
        })?;
        Ok(Some(Self {
            size: value.size,
            cookie: value.cookie.to_vec(),
            digest: SearchDigest::of(request, &identity_key(&ctx.identity)),
            next: Vec::new(),
        }))
    }

    /// Whether this is a paged search's first request (it carries no cookie).
    pub fn is_first(&self) -> bool {
        self.cookie.is_empty()
    }

    /// Where the search stands: the start, or what the cookie says.
    pub fn position(&self, ctx: &OpContext) -> LdapResultOf<Position> {
        if self.cookie.is_empty() {
            return Ok(Position::default());
        }
        let paged = &ctx.config.paged;
        cookie::open(&paged.key, &self.digest, &self.cookie, now_s(), paged.cookie_idle_max_s).map_err(|e| {
            match e {
                CookieError::Invalid => {
                    LdapError::new(ResultCode::PROTOCOL_ERROR, "paged results cookie is invalid")
                }
                CookieError::Stale => {
                    LdapError::new(ResultCode::UNWILLING_TO_PERFORM, "paged results cookie is stale")
                }
            }
        })
    }

    /// Another page follows, from `next`: its cookie goes in the response (what a search
    /// that pages on its own, cn=changelog, calls).
    pub fn continue_at(&mut self, ctx: &OpContext, next: Position) {
        let paged = &ctx.config.paged;
        self.next = cookie::mint(&paged.key, &self.digest, next, now_s());
    }

    /// The control for the SearchResultDone: size 0 (no estimate), and the cookie.
    pub fn response_control(&self) -> Option<Control> {
        let value =
            PagedResults { size: 0, cookie: OctetString::from(self.next.clone()) }.encode_value().ok()?;
        Some(Control {
            control_type: OctetString::from_static(PAGED_RESULTS_OID.as_bytes()),
            criticality: false,
            control_value: Some(OctetString::from(value)),
        })
    }
}

/// The identity as the cookie is bound to it (the rootDN and an entry of the same DN are
/// different identities).
fn identity_key(identity: &Identity) -> String {
    match identity {
        Identity::Anonymous => String::new(),
        Identity::Root(dn) => format!("root:{}", dn.joined()),
        Identity::User(dn) => format!("user:{}", dn.joined()),
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Sends one page of `target` and sets `paging.next` when another follows. `scopes`: the
/// parts read one after another, in this order on every page (the target's own scope
/// alone, or the disjoint scopes of a search that follows aliases); the cookie says which
/// part the last entry sent was in.
pub(crate) async fn page(
    ctx: &OpContext,
    target: &Target,
    scopes: &[Scope],
    bounds: &Bounds<'_>,
    position: Position,
    paging: &mut Paging,
    expansion: Option<&crate::op::dynlist::Expansion>,
) -> LdapResultOf<LdapResult> {
    let (plan, shards) = read::plan_shards(ctx, bounds.class, &target.filter, &target.attrs)?;
    let plan = Arc::new(plan);
    let remaining = bounds.size_limit.map(|limit| limit.saturating_sub(position.sent) as usize);
    if remaining == Some(0) {
        return Ok(size_limit_exceeded());
    }
    let want = remaining.map_or(paging.size as usize, |r| r.min(paging.size as usize));
    let mut page_sink = PageSink { sent: 0 };
    // The dynlist stage in front of the page (op::dynlist).
    let mut sink = crate::op::dynlist::Expanding { inner: &mut page_sink, expansion };
    let mut next = None;
    'parts: for (part, &scope) in scopes.iter().enumerate().skip(usize::from(position.part)) {
        // The cookie's `after` holds in its own part only; a later part starts at its first.
        let after = position.after.filter(|_| part == usize::from(position.part));
        let start = after.map_or(0, |id| id.shard());
        let in_part = Target {
            skeleton: target.skeleton.clone(),
            scope,
            filter: target.filter.clone(),
            attrs: target.attrs.clone(),
        };
        if let Scope::Base(id) = scope {
            // A followed alias's target in a one-level search: one entry, by id.
            if after.is_some() {
                continue;
            }
            let query = in_part.query(ctx.message_id, ctx.worker.hub());
            let Some(pdu) = read::lookup(ctx, &query, id).await? else { continue };
            if sink.inner.sent >= want {
                next = Some(Position { after: None, sent: 0, part: part_index(part) });
                break;
            }
            if let Flow::Stop(_) = sink.take(ctx, vec![pdu]).await? {
                return Ok(LdapResult::success());
            }
            continue;
        }
        let mut last = after;
        for &shard in shards.iter().filter(|s| **s >= start) {
            let window =
                Window { after: after.filter(|id| id.shard() == shard), max: want - sink.inner.sent };
            let end =
                match read::window(ctx, &in_part, &plan, shard, window, bounds.deadline, &mut sink).await? {
                    Gathered::All { end, .. } => end,
                    Gathered::TimeLimit => {
                        return Ok(LdapResult::new(
                            ResultCode::TIME_LIMIT_EXCEEDED,
                            String::new(),
                            String::new(),
                        ));
                    }
                    // Abandoned, or the connection gone.
                    Gathered::Stopped | Gathered::Cancelled => return Ok(LdapResult::success()),
                };
            last = end.last.or(last);
            if end.more {
                next = Some(Position { after: last, sent: 0, part: part_index(part) });
                break 'parts;
            }
            if ctx.cancelled() {
                return Ok(LdapResult::success());
            }
        }
    }
    if let Some(next) = next {
        if remaining.is_some_and(|r| sink.inner.sent >= r) {
            return Ok(size_limit_exceeded());
        }
        let next = Position { sent: position.sent.saturating_add(sink.inner.sent as u32), ..next };
        let paged = &ctx.config.paged;
        paging.next = cookie::mint(&paged.key, &paging.digest, next, now_s());
    }
    Ok(LdapResult::success())
}

/// A part's index as the cookie holds it: parts are far fewer than u16::MAX
/// (op::search::aliases::ALIASES_MAX bounds them).
fn part_index(part: usize) -> u16 {
    u16::try_from(part).unwrap_or(u16::MAX)
}

fn size_limit_exceeded() -> LdapResult {
    LdapResult::new(ResultCode::SIZE_LIMIT_EXCEEDED, String::new(), String::new())
}

/// A page's sink: every part's matches go to the connection as they come (each part asks
/// for no more than the page has room for), counted.
struct PageSink {
    sent: usize,
}

impl Sink for PageSink {
    async fn take(&mut self, ctx: &OpContext, pdus: Vec<Bytes>) -> LdapResultOf<Flow> {
        if ctx.cancelled() {
            return Ok(Flow::Stop(StopReason::Finished));
        }
        self.sent += pdus.len();
        ctx.count_entries(pdus.len());
        if !pdus.is_empty() && ctx.out.send(Outbound::Pdus(pdus)).await.is_err() {
            return Ok(Flow::Stop(StopReason::Finished));
        }
        Ok(Flow::More)
    }
}
