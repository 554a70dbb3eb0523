//! The aliases stage (RFC 4511 §4.5.1.3, derefInSearching and derefAlways), between limits
//! and the read, as slapd's back-mdb does it: every alias entry the requester can read
//! inside the scope is looked for (a search of its own, `(objectClass=alias)` over the same
//! shards, inline or on the pool); each one's aliasedObjectName is followed, through a chain
//! of aliases, to the entry it stands for; that entry (a one-level search) or its subtree (a
//! subtree or children search, where the aliases inside it are followed in turn) joins the
//! search. Alias entries themselves are then left out of the answer, as slapd does (only a
//! base that is itself an alias, not dereferenced when finding, is returned as it is).
//!
//! Every entry is returned once without a set of the ids sent: the scopes read are kept
//! disjoint (a target inside a scope already read adds nothing, a scope inside a new
//! target's subtree is dropped for it), so what bounds memory is the number of aliases
//! followed, [`ALIASES_MAX`]. An alias that can't be dereferenced (its target missing, a
//! loop, a chain longer than slapd's 15, an alias whose aliasedObjectName the requester
//! may not read) is passed over, as slapd passes over the first three.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::{decode_message, ProtocolOp, SearchScope};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::{AttrSelection, EntryId, Scope, StopReason};

use super::resolve::{alias_filter, Authorized, ALIAS_CHAIN_MAX};
use crate::access::{self, Subject};
use crate::acl::rule::{Attr, Level};
use crate::error::{LdapError, LdapResultOf};
use crate::located::Located;
use crate::op::context::OpContext;
use crate::op::read::{self, Bounds, Flow, Gathered, Sink, Target};
use crate::resolve::locate;

/// How many alias entries one search may meet (in its scope and in the chains followed
/// from there); one more ends it with adminLimitExceeded. slapd has no such bound; this one
/// keeps the scopes list and the set of aliases seen small whatever the tree holds.
pub const ALIASES_MAX: usize = 256;

/// The outcome of the stage: the scopes to read (disjoint; the search's own first unless a
/// target's subtree holds it), and whether alias entries were met (they are then left out
/// of the answer).
pub(super) struct Followed {
    pub scopes: Vec<Scope>,
    pub met: bool,
}

impl Followed {
    /// The search's filter, with alias entries left out when some were met.
    pub fn without_aliases(&self, filter: Filter) -> LdapResultOf<Filter> {
        if !self.met {
            return Ok(filter);
        }
        Ok(Filter::And(vec![filter, Filter::Not(Box::new(alias_filter()?))]))
    }
}

/// Looks for the aliases in the search's scope and follows them. `attrs`: the search's
/// selection, for the access rules the alias entries are read under.
pub(super) async fn follow(
    ctx: &OpContext,
    authorized: &Authorized,
    base: &NormDn,
    kind: SearchScope,
    attrs: &AttrSelection,
    bounds: &Bounds<'_>,
) -> LdapResultOf<Followed> {
    let base_id = scope_id(authorized.scope);
    let probe = Target {
        skeleton: ctx.worker.skeleton(),
        scope: authorized.scope,
        filter: Arc::new(alias_filter()?),
        attrs: Arc::new(alias_selection(ctx, attrs)),
    };
    // The roots of the scopes read: the search's own first. A one-level search reads the
    // targets themselves (as base scopes), a subtree or children search their subtrees.
    let mut roots: Vec<(NormDn, EntryId)> = vec![(base.clone(), base_id)];
    let mut pending = VecDeque::from([authorized.scope]);
    let mut seen: HashSet<Vec<String>> = HashSet::new();
    let mut met = false;
    while let Some(scope) = pending.pop_front() {
        let found = aliases_in(ctx, &probe, scope, bounds).await?;
        met |= !found.is_empty();
        for (alias, aliased) in found {
            if !seen.insert(alias.rdns) {
                continue;
            }
            if seen.len() > ALIASES_MAX {
                return Err(too_many());
            }
            let Some(aliased) = aliased else { continue };
            let Some((dn, located)) = chase(ctx, &authorized.subject, &aliased, &mut seen).await? else {
                continue;
            };
            if kind == SearchScope::SingleLevel {
                // The base's children are read already; the base is not in a one-level
                // scope (slapd leaves it out too).
                let known = dn.depth_below(base).is_some_and(|depth| depth <= 1)
                    || roots.iter().skip(1).any(|(root, _)| root.same_entry(&dn));
                if !known {
                    roots.push((dn, located.id));
                }
                continue;
            }
            if roots.iter().any(|(root, _)| dn.is_descendant_or_self_of(root)) {
                continue;
            }
            roots.retain(|(root, _)| !root.is_descendant_or_self_of(&dn));
            roots.push((dn, located.id));
            pending.push_back(read::scope(kind, located.id));
        }
    }
    // In id order (the search's own scope first in a one-level search): the aliases are
    // found in whatever order the shards answer, and a paged search must see the same parts
    // in the same order on every page.
    let scopes = match kind {
        SearchScope::SingleLevel => {
            let mut targets: Vec<EntryId> = roots.iter().skip(1).map(|(_, id)| *id).collect();
            targets.sort_unstable();
            std::iter::once(authorized.scope).chain(targets.into_iter().map(Scope::Base)).collect()
        }
        _ => {
            let mut ids: Vec<EntryId> = roots.iter().map(|(_, id)| *id).collect();
            ids.sort_unstable();
            ids.into_iter().map(|id| read::scope(kind, id)).collect()
        }
    };
    Ok(Followed { scopes, met })
}

fn scope_id(scope: Scope) -> EntryId {
    match scope {
        Scope::Base(id) | Scope::OneLevel(id) | Scope::Subtree(id) | Scope::Children(id) => id,
    }
}

fn too_many() -> LdapError {
    LdapError::new(
        ResultCode::ADMIN_LIMIT_EXCEEDED,
        format!("the search meets more than {ALIASES_MAX} aliases"),
    )
}

/// The probe's selection: aliasedObjectName only, under the search's access rules (what the
/// requester may not read of an alias is not followed).
fn alias_selection(ctx: &OpContext, attrs: &AttrSelection) -> AttrSelection {
    let config = &ctx.config;
    let mut selection =
        AttrSelection::from_request(&["aliasedObjectName"], false, &config.rules, &config.schema);
    selection.hidden = attrs.hidden.clone();
    selection.unsearchable = attrs.unsearchable.clone();
    selection.per_entry = attrs.per_entry.clone();
    selection
}

/// The alias entries in `scope` the requester can read: each one's DN, and its
/// aliasedObjectName when the requester may read that.
async fn aliases_in(
    ctx: &OpContext,
    probe: &Target,
    scope: Scope,
    bounds: &Bounds<'_>,
) -> LdapResultOf<Vec<(NormDn, Option<String>)>> {
    let part = Target {
        skeleton: probe.skeleton.clone(),
        scope,
        filter: probe.filter.clone(),
        attrs: probe.attrs.clone(),
    };
    let mut sink = Aliases { found: Vec::new(), over: false };
    match read::read(ctx, &part, bounds.class, bounds.deadline, &mut sink).await? {
        Gathered::TimeLimit => Err(LdapError::new(ResultCode::TIME_LIMIT_EXCEEDED, "")),
        _ if sink.over => Err(too_many()),
        _ => Ok(sink.found),
    }
}

/// The entry an alias met while searching stands for, through a chain of aliases (each
/// added to `seen`); None when it can't be dereferenced.
async fn chase(
    ctx: &OpContext,
    subject: &Subject,
    first: &str,
    seen: &mut HashSet<Vec<String>>,
) -> LdapResultOf<Option<(NormDn, Located)>> {
    let mut aliased = first.to_owned();
    // The alias met is the first of the chain; `hop` counts those after it.
    for hop in 1..=ALIAS_CHAIN_MAX {
        let Ok(dn) = ctx.config.dn_rules().parse(&aliased) else { return Ok(None) };
        let Ok(located) = locate(&ctx.worker, &dn).await else { return Ok(None) };
        let Some(record) = ctx.worker.fetch(located.id).await? else { return Ok(None) };
        let entry = &record.entry;
        if !entry.has_object_class("alias") {
            return Ok(Some((dn, located)));
        }
        if hop == ALIAS_CHAIN_MAX {
            // Too long a chain. As slapd, the alias past the bound is not marked seen: met
            // in the scope, it is followed from there.
            return Ok(None);
        }
        if !seen.insert(dn.rdns.clone()) {
            // A loop, or an alias followed already.
            return Ok(None);
        }
        if seen.len() > ALIASES_MAX {
            return Err(too_many());
        }
        let readable = access::entry_access(&ctx.config, subject, &dn, Some(entry))
            != access::EntryAccess::Nothing
            && access::level(&ctx.config, subject, &dn, Some(entry), Attr::Type("aliasedobjectname"))
                >= Level::Read;
        let Some(next) = entry.first_str("aliasedObjectName").filter(|_| readable) else { return Ok(None) };
        aliased = next.to_owned();
    }
    Ok(None)
}

/// The probe's sink: each alias entry's DN and aliasedObjectName, decoded from the PDUs the
/// shards encoded; at most [`ALIASES_MAX`] of them.
struct Aliases {
    found: Vec<(NormDn, Option<String>)>,
    over: bool,
}

impl Aliases {
    fn add(&mut self, ctx: &OpContext, pdu: &Bytes) {
        let Ok(message) = decode_message(pdu) else { return };
        let ProtocolOp::SearchResultEntry(entry) = message.protocol_op else { return };
        let Some(dn) =
            std::str::from_utf8(&entry.object_name).ok().and_then(|t| ctx.config.dn_rules().parse(t).ok())
        else {
            return;
        };
        let aliased = entry
            .attributes
            .iter()
            .filter(|a| {
                std::str::from_utf8(&a.r#type)
                    .ok()
                    .and_then(|name| ctx.config.rules.get(name))
                    .is_some_and(|rules| rules.canonical == "aliasedobjectname")
            })
            .flat_map(|a| a.vals.first())
            .find_map(|v| std::str::from_utf8(v).ok().map(str::to_owned));
        self.found.push((dn, aliased));
    }
}

impl Sink for Aliases {
    async fn take(&mut self, ctx: &OpContext, pdus: Vec<Bytes>) -> LdapResultOf<Flow> {
        for pdu in &pdus {
            if self.found.len() >= ALIASES_MAX {
                self.over = true;
                return Ok(Flow::Stop(StopReason::SizeLimit));
            }
            self.add(ctx, pdu);
        }
        Ok(Flow::More)
    }

    fn room(&self) -> Option<usize> {
        Some(ALIASES_MAX.saturating_sub(self.found.len()))
    }
}
