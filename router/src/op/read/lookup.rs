//! One entry read by id: a base-scope search, or a sorted search sending its rows.

use bytes::Bytes;
use ferrodir_shard::{base_entry, base_record, Query};

use crate::error::LdapResultOf;
use crate::op::context::OpContext;

/// The entry `id` as the search sends it, if it matches: read on this thread when its
/// shard is readable here, else fetched from its shard's actor.
pub(crate) async fn lookup(
    ctx: &OpContext,
    query: &Query<'_>,
    id: ferrodir_shard::EntryId,
) -> LdapResultOf<Option<Bytes>> {
    if let Some(view) = ctx.worker.readable(id.shard())? {
        return Ok(base_entry(view, query, id)?);
    }
    let Some(record) = ctx.worker.fetch(id).await? else { return Ok(None) };
    let pdu = base_record(&ctx.config.rules, query, id, record);
    ferrodir_shard::check_memberof_query(query.attrs.memberof.as_ref())?;
    Ok(pdu)
}
