//! Delete (RFC 4511 §4.8). A leaf whose name and data share a shard is deleted by that
//! shard alone; containers and leaves with a moved name go through the coordinator.

use ferrodir_shard::batch::WriteOp;
use ferrodir_shard::id::shard_for_child;
use ferrodir_shard::EntryId;

use crate::access::check_write;
use crate::coordinator::{DeleteEntry, MaybeDemote};
use crate::error::LdapResultOf;
use crate::op::parse_dn;
use crate::resolve::locate;
use crate::session::OpContext;

pub async fn delete(ctx: &OpContext, dn_bytes: &[u8]) -> LdapResultOf<()> {
    let dn = parse_dn(dn_bytes)?;
    check_write(&ctx.identity)?;
    let target = locate(&ctx.worker, &dn).await?;
    let name_shard = shard_for_child(target.parent, &target.rdn_norm, ctx.worker.shard_count());
    if target.container || name_shard != target.id.shard() {
        return ctx.worker.coordinator.send(DeleteEntry(target)).await?;
    }
    ctx.worker
        .write(target.id.shard(), WriteOp::Delete { id: target.id })
        .await?;
    if target.parent != EntryId::ROOT {
        // Best effort: a full coordinator mailbox only delays a demotion until the next delete.
        let _ = ctx.worker.coordinator.try_send(MaybeDemote(target.parent));
    }
    Ok(())
}
