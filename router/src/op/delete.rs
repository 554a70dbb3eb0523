//! Delete (RFC 4511 §4.8). A leaf whose name and data share a shard is deleted by that
//! shard alone; containers and leaves with a moved name go through the coordinator.

use ferrodir_shard::batch::{WriteOp, WriteOutcome};
use ferrodir_shard::id::shard_for_child;
use ferrodir_shard::EntryId;

use crate::access::{check_not_anonymous, check_write};
use crate::coordinator::{DeleteEntry, MaybeDemote};
use crate::error::LdapResultOf;
use crate::op::{check_writable, parse_dn};
use crate::resolve::locate;
use crate::session::OpContext;

pub async fn delete(ctx: &OpContext, dn_bytes: &[u8]) -> LdapResultOf<()> {
    let dn = parse_dn(dn_bytes)?;
    check_writable(&ctx.worker.config, &dn)?;
    check_not_anonymous(&ctx.identity)?;
    let target = locate(&ctx.worker, &dn).await?;
    check_write(&ctx.identity)?;
    let name_shard = shard_for_child(target.parent, &target.rdn_norm, ctx.worker.shard_count());
    if target.container || name_shard != target.id.shard() {
        return ctx.worker.coordinator.send(DeleteEntry(target)).await?;
    }
    let outcome = ctx.worker.write(target.id.shard(), WriteOp::Delete { id: target.id }).await?;
    let maybe_last_child = match outcome {
        WriteOutcome::Deleted { parent_has_children_here, .. } => !parent_has_children_here,
        _ => true,
    };
    if target.parent != EntryId::ROOT && maybe_last_child {
        // The parent may have lost its last child: settle that before answering, so that
        // the client's next read (and a restart) sees hasSubordinates FALSE.
        ctx.worker.coordinator.send(MaybeDemote(target.parent)).await??;
    }
    Ok(())
}
