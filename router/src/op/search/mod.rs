//! Search (RFC 4511 §4.5), one pipeline for every kind of search:
//!
//! 1. mode: the request's controls choose how the matches reach the client: streamed
//!    ([`stream`]), a page of a paged search (op::paged), a sorted list or VLV window
//!    (op::sort), or a syncrepl refresh and persist (op::syncrepl: rootDN only, its
//!    content read through op::read into its own sink, with no limits and no special
//!    bases);
//! 2. resolve: the base parsed once; the root DSE, cn=Subschema and cn=Monitor answered
//!    from [`special`]; any other base located, aliases dereferenced ([`resolve`]);
//! 3. authorize: the base's access, the region the rules allow, the attributes shown
//!    ([`resolve`]), and memberOf assertions rewritten to id sets (op::memberof);
//! 4. limits: the effective size and time limits ([`limits`]);
//! 5. aliases: with derefInSearching or derefAlways, the aliases in the scope followed
//!    and their targets' scopes added, alias entries left out ([`aliases`]);
//! 6. plan, scatter, gather: op::read, once for all modes, into the mode's sink;
//! 7. send: the entries as the sink sends them, then SearchResultDone with the mode's
//!    response controls.
//!
//! sizeLimit and timeLimit raise the search's stop signal, Abandon and a closing connection
//! the operation's; every shard's part checks both between entries. (Abandon also silences
//! the final response; a size or time limit doesn't.)

mod aliases;
mod limits;
mod resolve;
mod special;
mod stream;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use ferrodir_proto::message::{Control, LdapResult, ProtocolOp, SearchRequest};
use ferrodir_shard::{AttrSelection, Scope};

use crate::error::LdapResultOf;
use crate::op::context::OpContext;
use crate::op::dynlist;
use crate::op::paged::{self, Paging};
use crate::op::parse_dn;
use crate::op::read::Target;
use crate::op::sort::{self, Refusal, Sorting};
use crate::op::syncrepl::{self, Syncing};

/// Answers a search, its final response included.
pub async fn search(ctx: &OpContext, request: SearchRequest) {
    let mut mode = match Mode::from_request(ctx, &request) {
        Ok(mode) => mode,
        Err(refusal) => {
            return ctx.respond_with(ProtocolOp::SearchResultDone(refusal.result), refusal.controls).await;
        }
    };
    let result = match run(ctx, request, &mut mode).await {
        Ok(result) => result,
        Err(e) => e.to_result(),
    };
    let controls = mode.response_controls(&result);
    mode.note(ctx);
    ctx.respond_with(ProtocolOp::SearchResultDone(result), controls).await;
}

/// How the matches reach the client, as the request's controls ask.
enum Mode {
    Stream,
    /// Simple Paged Results (RFC 2696), in entry-id order.
    Paged(Paging),
    /// Server-side sort (RFC 2891), with paging or VLV over the sorted list: op::sort owns
    /// the paged-results control when the sort control is there, as slapd's sssvlv does.
    Sorted(Sorting),
    /// RFC 4533 content synchronisation: a consumer's refresh, and its persist stage.
    Sync(Syncing),
}

impl Mode {
    fn from_request(ctx: &OpContext, request: &SearchRequest) -> Result<Self, Refusal> {
        match Syncing::from_request(ctx) {
            Ok(Some(syncing)) => return Ok(Self::Sync(syncing)),
            Ok(None) => {}
            Err(e) => return Err(Refusal { result: e.to_result(), controls: None }),
        }
        if let Some(sorting) = Sorting::from_request(ctx)? {
            return Ok(Self::Sorted(sorting));
        }
        match Paging::from_request(ctx, request) {
            Ok(Some(paging)) => Ok(Self::Paged(paging)),
            Ok(None) => Ok(Self::Stream),
            Err(e) => Err(Refusal { result: e.to_result(), controls: None }),
        }
    }

    /// The controls of the SearchResultDone (RFC 2696 §3: a paged search's on every one).
    fn response_controls(&self, result: &LdapResult) -> Option<Vec<Control>> {
        match self {
            Self::Stream => None,
            Self::Paged(paging) => paging.response_control().map(|control| vec![control]),
            Self::Sorted(sorting) => sorting.response_controls(result),
            Self::Sync(syncing) => syncing.response_controls(),
        }
    }

    /// 389-ds's access-log note for a paged search, after any index note.
    fn note(&self, ctx: &OpContext) {
        if let Self::Paged(_) = self {
            ctx.note(match ctx.notes.get() {
                Some("A") => "A,P",
                Some("U") => "U,P",
                _ => "P",
            });
        }
    }
}

/// The pipeline's stages, in order; the result for the SearchResultDone.
async fn run(ctx: &OpContext, mut request: SearchRequest, mode: &mut Mode) -> LdapResultOf<LdapResult> {
    let config = &ctx.config;
    // Normalised once: the special bases, the suffix, the resolution and the access rules
    // all read this.
    let base = parse_dn(config, &request.base_object)?;
    crate::op::write_controls::refuse_copy(ctx, &base)?;
    let mut attrs =
        AttrSelection::from_request(&request.attributes, request.types_only, &config.rules, &config.schema);
    let syncing = matches!(mode, Mode::Sync(_));
    if !syncing {
        let paging = match mode {
            Mode::Paged(paging) => Some(paging),
            _ => None,
        };
        if let Some(answer) = special::answer(ctx, &request, &base, &attrs, paging).await {
            return answer;
        }
    }
    // A sync search compares DNs with its base (whether a moved entry left its scope).
    let sync_base = syncing.then(|| base.clone());
    let position = match mode {
        Mode::Paged(paging) => Some(paging.position(ctx)?),
        _ => None,
    };
    if let (Mode::Paged(paging), Some(start)) = (&mut *mode, position) {
        if paging.size == 0 {
            // RFC 2696 §3: a page size of 0 ends the paged search; nothing is held to free.
            // On a first request there is nothing to end: as slapd, no entries and a cookie
            // for the first page (RFC 2696: empty only when no entries are left).
            if paging.is_first() {
                paging.continue_at(ctx, start);
            }
            return Ok(LdapResult::success());
        }
    }
    let Some(authorized) = resolve::authorize(ctx, &request, base, &mut attrs).await? else {
        // No entry may be read: the search finds nothing (the base was searchable).
        return Ok(LdapResult::success());
    };
    if let (Mode::Sync(syncing), Some(base)) = (&mut *mode, sync_base) {
        let located = syncrepl::Located {
            base,
            scope: authorized.scope,
            kind: request.scope,
            rules: config.rules.clone(),
        };
        return syncrepl::run(ctx, syncing, &request, located).await;
    }
    if let Some(filter) = crate::op::write_controls::WriteControls::of(ctx)?.assertion {
        // RFC 4528 on a Search: the base entry must match, or assertionFailed.
        let base = match authorized.scope {
            Scope::Base(id) | Scope::OneLevel(id) | Scope::Subtree(id) | Scope::Children(id) => id,
        };
        if !crate::op::write_controls::holds_on(ctx, &authorized.subject, &filter, base).await? {
            return Err(crate::op::write_controls::failed());
        }
    }
    // (memberOf=G) for a dynamic G: marked before op::memberof, resolved after (op::dynlist).
    let marks = dynlist::mark_member_of(ctx, &authorized.subject, &mut request.filter).await?;
    crate::op::memberof::prepare(ctx, &authorized.subject, &mut request.filter, &mut attrs).await?;
    marks.resolve(&mut request.filter);
    // Dynamic groups: member assertions see their members; their member values are
    // computed as their entries go out (op::dynlist).
    dynlist::prepare_filter(ctx, &authorized.subject, &mut request.filter).await?;
    let expansion = match mode {
        Mode::Stream | Mode::Paged(_) | Mode::Sorted(_) => {
            dynlist::Expansion::prepare(ctx, &authorized.subject, &mut attrs)
        }
        _ => None,
    };
    let expansion = expansion.as_ref();
    let paging = match mode {
        Mode::Paged(paging) => Some(paging),
        _ => None,
    };
    let bounds = limits::bounds(ctx, &request, paging);
    let followed = match &authorized.searching_from {
        Some(base) => Some(aliases::follow(ctx, &authorized, base, request.scope, &attrs, &bounds).await?),
        None => None,
    };
    let filter = match &followed {
        Some(followed) => followed.without_aliases(request.filter)?,
        None => request.filter,
    };
    let target = Target {
        skeleton: ctx.worker.skeleton(),
        scope: authorized.scope,
        filter: Arc::new(filter),
        attrs: Arc::new(attrs),
    };
    // The scopes read, one after another: the search's own, or those the aliases it follows
    // add (disjoint, in the same order on every page).
    let scopes = match followed {
        Some(followed) if followed.scopes != [target.scope] => followed.scopes,
        _ => vec![target.scope],
    };
    let base_only = scopes.iter().all(|scope| matches!(scope, Scope::Base(_)));
    match (mode, position) {
        (Mode::Sorted(sorting), _) => sort::run(ctx, sorting, &target, &scopes, &bounds, expansion).await,
        (Mode::Paged(paging), Some(position)) if !base_only => {
            paged::page(ctx, &target, &scopes, &bounds, position, paging, expansion).await
        }
        // A paged base search: the one entry goes out with the first page.
        (Mode::Paged(_), Some(position)) if position.after.is_some() => Ok(LdapResult::success()),
        _ if scopes.len() > 1 => stream::send_scopes(ctx, &target, &scopes, &bounds, expansion).await,
        _ => stream::send(ctx, &target, &bounds, expansion).await,
    }
}
