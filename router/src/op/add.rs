//! Add (RFC 4511 §4.7). The entry is created on the shard its name places it on. Under a
//! container that is one shard's write; under a leaf, the coordinator first promotes the
//! parent to a container (a change that spans shards).

use std::time::Duration;

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::message::AddRequest;
use ferrodir_proto::ResultCode;
use ferrodir_shard::batch::WriteOp;
use ferrodir_shard::id::shard_for_child;
use ferrodir_shard::EntryId;

use crate::access::check_write;
use crate::config::DirectoryConfig;
use crate::coordinator::AddUnder;
use crate::error::{LdapError, LdapResultOf};
use crate::op::{parse_dn, text};
use crate::resolve::locate_parent_of;
use crate::session::OpContext;
use ferrodir_shard::modify::{find_attr, value_key};

/// How often an add retries while its parent is briefly closed by the coordinator.
const PARENT_CLOSED_RETRIES_MAX: u32 = 200;
const PARENT_CLOSED_RETRY_DELAY_MS: u64 = 5;

pub async fn add(ctx: &OpContext, request: AddRequest) -> LdapResultOf<()> {
    let dn = parse_dn(&request.entry)?;
    check_write(&ctx.identity)?;
    if dn.is_root() {
        return Err(LdapError::new(ResultCode::ENTRY_ALREADY_EXISTS, "the root DSE always exists"));
    }
    let entry = build_entry(&request, &ctx.worker.config)?;
    let (parent, rdn_norm, rdn) = locate_parent_of(&ctx.worker, &dn).await?;
    let parent_id = parent.as_ref().map(|p| p.id).unwrap_or(EntryId::ROOT);
    let shard = shard_for_child(parent_id, &rdn_norm, ctx.worker.shard_count());
    let op = WriteOp::Add { parent: parent_id, rdn, rdn_norm, entry, author: ctx.identity.author() };
    let parent_is_container = parent.as_ref().is_none_or(|p| ctx.worker.tree().contains(p.id));
    if !parent_is_container {
        ctx.worker.coordinator.send(AddUnder { parent: parent_id, shard, op }).await??;
        return Ok(());
    }
    for _ in 0..PARENT_CLOSED_RETRIES_MAX {
        match ctx.worker.write(shard, op.clone()).await {
            Err(e) if e.code == ResultCode::BUSY => {
                tokio::time::sleep(Duration::from_millis(PARENT_CLOSED_RETRY_DELAY_MS)).await;
                // The parent may have been demoted to a leaf meanwhile, or deleted.
                if parent_id != EntryId::ROOT && !ctx.worker.tree().contains(parent_id) {
                    ctx.worker.coordinator.send(AddUnder { parent: parent_id, shard, op }).await??;
                    return Ok(());
                }
            }
            other => return other.map(|_| ()),
        }
    }
    Err(LdapError::new(ResultCode::BUSY, "parent entry is busy"))
}

/// The entry as sent, value order kept; rejects empty and duplicate values and attributes
/// only the server may set. The schema check happens on the shard, on the entry as stored.
fn build_entry(request: &AddRequest, config: &DirectoryConfig) -> LdapResultOf<Entry> {
    let mut entry = Entry::default();
    for attribute in &request.attributes {
        let name = text(&attribute.r#type)?.to_string();
        if name.is_empty() {
            return Err(LdapError::protocol("empty attribute description"));
        }
        if attribute.vals.is_empty() {
            return Err(LdapError::protocol(format!("{name}: no values")));
        }
        reject_no_user_modification(config, &name)?;
        let mut seen = std::collections::HashSet::new();
        for value in &attribute.vals {
            if !seen.insert(value_key(&config.rules, &name, value)) {
                return Err(LdapError::new(
                    ResultCode::ATTRIBUTE_OR_VALUE_EXISTS,
                    format!("{name}: duplicate value"),
                ));
            }
        }
        if find_attr(&config.rules, &entry, &name).is_some() {
            return Err(LdapError::new(
                ResultCode::ATTRIBUTE_OR_VALUE_EXISTS,
                format!("{name}: given twice"),
            ));
        }
        let stored_name = config.rules.display(&name);
        entry.attrs.push(Attribute::new(stored_name, attribute.vals.iter().map(|v| v.to_vec()).collect()));
    }
    Ok(entry)
}

/// RFC 4512 §4.1.2: NO-USER-MODIFICATION attributes are maintained by the server; a client
/// supplying one gets constraintViolation, as slapd answers.
pub fn reject_no_user_modification(config: &DirectoryConfig, name: &str) -> LdapResultOf<()> {
    if config.schema.attribute(name).is_some_and(|a| a.no_user_modification) {
        return Err(LdapError::new(
            ResultCode::CONSTRAINT_VIOLATION,
            format!("{name}: no user modification allowed"),
        ));
    }
    Ok(())
}
