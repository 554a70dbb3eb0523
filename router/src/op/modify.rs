//! Modify (RFC 4511 §4.6): all changes apply or none, on the entry's home shard.

use ferrodir_proto::entry::Attribute;
use ferrodir_proto::ldif::{LdifMod, ModOp};
use ferrodir_proto::message::{ModifyOperation, ModifyRequest};
use ferrodir_shard::batch::WriteOp;

use crate::access::check_write;
use crate::error::{LdapError, LdapResultOf};
use crate::op::{parse_dn, text};
use crate::resolve::locate;
use crate::session::OpContext;

pub async fn modify(ctx: &OpContext, request: ModifyRequest) -> LdapResultOf<()> {
    let dn = parse_dn(&request.object)?;
    check_write(&ctx.identity)?;
    let mut changes = Vec::with_capacity(request.changes.len());
    for change in &request.changes {
        let name = text(&change.modification.r#type)?;
        if name.is_empty() {
            return Err(LdapError::protocol("empty attribute description"));
        }
        crate::op::add::reject_no_user_modification(&ctx.worker.config, name)?;
        let op = match change.operation {
            ModifyOperation::Add => ModOp::Add,
            ModifyOperation::Delete => ModOp::Delete,
            ModifyOperation::Replace => ModOp::Replace,
            ModifyOperation::Increment => ModOp::Increment,
        };
        let values = change.modification.vals.iter().map(|v| v.to_vec()).collect();
        changes.push(LdifMod { op, attr: Attribute::new(name, values) });
    }
    let target = locate(&ctx.worker, &dn).await?;
    ctx.worker
        .write(target.id.shard(), WriteOp::Modify { id: target.id, changes, author: ctx.identity.author() })
        .await?;
    Ok(())
}
