//! The operations' side of the audit log (`crate::auditlog`): a write formats its record
//! from the values it sends to the shard ([`prepare`], nothing when the log is off), and
//! appends it only once the write was acknowledged durable ([`committed`]).

use ferrodir_proto::NormDn;

use crate::auditlog::{self, Change, Pending, Requester};
use crate::op::context::OpContext;

/// The record of a change to `dn`, when the audit log is on.
pub fn prepare(ctx: &OpContext, dn: &NormDn, change: Change<'_>) -> Option<Pending> {
    ctx.worker.audit_log.as_ref()?;
    let suffix = ctx.config.suffix_of(dn).map_or("", |s| s.display.as_str());
    Some(auditlog::prepare(&dn.dn.to_string(), suffix, change))
}

/// The change of `pending` committed: its record goes to the log, as the requester's.
pub fn committed(ctx: &OpContext, pending: Option<Pending>) {
    let (Some(sink), Some(pending)) = (&ctx.worker.audit_log, pending) else { return };
    let author = ctx.identity.author();
    let conn = i64::try_from(ctx.conn_id).unwrap_or(i64::MAX);
    let asker = ctx.proxied_by.as_ref().map(|who| who.author());
    let who =
        Requester { author: &author, peer: &ctx.transport.peer_name, conn, proxied_by: asker.as_deref() };
    sink.commit(&pending, &who);
}
