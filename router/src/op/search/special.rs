//! The bases no naming context holds: the root DSE, cn=Subschema (readable by everyone:
//! the rules are for the naming contexts), cn=Monitor (served from the counters, to the
//! rootDN and `monitor_readers` only) and, with `[changelog] enabled`, cn=changelog
//! (crate::changelog: paged on its own, by changeNumber).

use ferrodir_proto::entry::Entry;
use ferrodir_proto::message::{LdapResult, ProtocolOp, SearchRequest, SearchScope};
use ferrodir_proto::NormDn;
use ferrodir_shard::AttrSelection;

use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::op::paged::Paging;
use crate::op::rootdse;

/// The answer to a search of a special base; None: an ordinary base.
pub(super) async fn answer(
    ctx: &OpContext,
    request: &SearchRequest,
    base: &NormDn,
    attrs: &AttrSelection,
    paging: Option<&mut Paging>,
) -> Option<LdapResultOf<LdapResult>> {
    if ctx.config.changelog && crate::changelog::is_changelog_dn(base) {
        return Some(crate::changelog::search(ctx, request, base, attrs, paging).await);
    }
    if base.is_root() || base.is("cn=subschema") {
        return Some(root_or_subschema(ctx, request, base, attrs).await);
    }
    if crate::monitor::is_monitor_dn(base) {
        return Some(crate::monitor::search::search(ctx, request, base, attrs).await);
    }
    None
}

/// The root DSE (base scope only) and cn=Subschema.
async fn root_or_subschema(
    ctx: &OpContext,
    request: &SearchRequest,
    base: &NormDn,
    attrs: &AttrSelection,
) -> LdapResultOf<LdapResult> {
    let (dn, (user, operational)) = if base.is_root() {
        ("", rootdse::root_dse(&ctx.config, &ctx.transport))
    } else {
        (rootdse::SUBSCHEMA_DN, rootdse::subschema(&ctx.config.schema))
    };
    if request.scope != SearchScope::BaseObject {
        // Neither has children a search can reach.
        return if base.is_root() { Err(LdapError::no_such_object("")) } else { Ok(LdapResult::success()) };
    }
    let mut operational = operational;
    if base.is_root() && ctx.config.changelog {
        operational.attrs.extend(crate::changelog::root_dse_attributes(ctx.worker.hub()));
    }
    let mut visible = Entry::new(user.attrs.clone());
    visible.attrs.extend(operational.attrs.iter().cloned());
    if !base.is_root() {
        // slapd matches entryDN on every entry it names, cn=Subschema included, though
        // it does not list it there (not even under `+`).
        visible.attrs.push(ferrodir_proto::entry::Attribute::new("entryDN", vec![dn.as_bytes().to_vec()]));
    }
    if ferrodir_shard::filter_matches(&ctx.config.rules, &request.filter, &visible, None) {
        let entry = rootdse::encode(dn, &user, &operational, attrs);
        ctx.respond(ProtocolOp::SearchResultEntry(entry)).await;
    }
    Ok(LdapResult::success())
}
