//! Delete (RFC 4511 §4.8). A leaf whose name and data share a shard is deleted by that
//! shard alone; containers and leaves with a moved name go through the coordinator.

use ferrodir_proto::NormDn;
use ferrodir_shard::{shard_for_child, EntryId, WriteOp, WriteOutcome};

use crate::access::{self, check_not_anonymous};
use crate::acl::rule::Attr;
use crate::auditlog::Change;
use crate::coordinator::{Check, DeleteEntry, Deleted, MaybeDemote, Origin};
use crate::error::LdapResultOf;
use crate::located::Located;
use crate::op::context::OpContext;
use crate::op::write_controls::{self, WriteControls};
use crate::op::{check_writable, parse_dn};

pub async fn delete(ctx: &OpContext, dn_bytes: &[u8]) -> LdapResultOf<()> {
    let dn = parse_dn(&ctx.config, dn_bytes)?;
    check_writable(&ctx.config, &dn)?;
    check_not_anonymous(&ctx.identity)?;
    let asked = WriteControls::of(ctx)?;
    let subject = access::subject(ctx).await;
    let target = access::locate(ctx, &subject, &dn).await?;
    if !subject.is_root() {
        // slapd: `write` on the parent's `children`, then on the entry's `entry`.
        let config = &ctx.config;
        let parent = access::entry_for_rules(ctx, &subject, target.parent).await?;
        let parent_dn = dn.parent().unwrap_or_default();
        let message = "no write access to parent";
        access::check_write(config, &subject, &parent_dn, parent.as_ref(), Attr::Children, message)?;
        let entry = access::entry_for_rules(ctx, &subject, target.id).await?;
        access::check_write(config, &subject, &dn, entry.as_ref(), Attr::Entry, "no write access to entry")?;
    }
    let audit = crate::op::audit::prepare(ctx, &dn, Change::Delete);
    let check = match &asked.assertion {
        Some(filter) => Some(write_controls::check(ctx, &subject, filter.clone(), target.id).await),
        None => None,
    };
    let id = target.id;
    let before = remove(ctx, target, dn, check).await?;
    crate::op::audit::committed(ctx, audit);
    write_controls::answer_reads(ctx, &subject, &asked, id, before, None).await;
    Ok(())
}

/// Deletes the located entry: on its shard alone when it is a leaf whose name is on that
/// shard too, else through the coordinator. Answers the entry as it was.
async fn remove(ctx: &OpContext, target: Located, dn: NormDn, check: Check) -> LdapResultOf<Deleted> {
    let name_shard = shard_for_child(target.parent, &target.rdn_norm, ctx.worker.shard_count());
    if target.container || name_shard != target.id.shard() || ctx.config.refint.is_some() {
        let author = ctx.identity.author();
        return ctx
            .worker
            .coordinator
            .send(DeleteEntry { target, dn: dn.dn, origin: Origin::Client, author, check })
            .await?;
    }
    let op = WriteOp::Delete { id: target.id, author: ctx.identity.author() };
    let op = match check {
        Some(check) => WriteOp::Checked(Box::new(ferrodir_shard::CheckedWrite { op, check: Some(check) })),
        None => op,
    };
    let outcome = ctx.worker.write(target.id.shard(), op).await?;
    let (maybe_last_child, before) = match outcome.inner() {
        WriteOutcome::Deleted { parent_has_children_here, record } => {
            (!parent_has_children_here, Some(record.clone()))
        }
        _ => (true, None),
    };
    if target.parent != EntryId::ROOT && maybe_last_child {
        // The parent may have lost its last child: settle that before answering, so that
        // the client's next read (and a restart) sees hasSubordinates FALSE.
        ctx.worker.coordinator.send(MaybeDemote(target.parent)).await??;
    }
    Ok(before)
}
