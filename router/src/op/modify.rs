//! Modify (RFC 4511 §4.6): all changes apply or none, on the entry's home shard.

use ferrodir_proto::entry::Attribute;
use ferrodir_proto::ldif::{LdifMod, ModOp};
use ferrodir_proto::message::{ModifyOperation, ModifyRequest};
use ferrodir_shard::{WriteOp, WriteOutcome};

use crate::access::{self, check_not_anonymous};
use crate::auditlog::Change;
use crate::config::DirectoryConfig;
use crate::error::{LdapError, LdapResultOf};
use crate::op::add::canonical_values;
use crate::op::context::OpContext;
use crate::op::write_controls::{self, WriteControls};
use crate::op::{check_writable, parse_dn, text};
use ferrodir_proto::schema::matching::Rule;
use ferrodir_proto::ResultCode;

pub async fn modify(ctx: &OpContext, request: ModifyRequest) -> LdapResultOf<()> {
    let dn = parse_dn(&ctx.config, &request.object)?;
    // An `add` of no values adds nothing: slapd refuses it as it decodes the request
    // (protocolError, before looking at the entry or the requester), and so do we.
    if request
        .changes
        .iter()
        .any(|c| matches!(c.operation, ModifyOperation::Add) && c.modification.vals.is_empty())
    {
        return Err(LdapError::protocol("modify/add operation requires values"));
    }
    check_writable(&ctx.config, &dn)?;
    check_not_anonymous(&ctx.identity)?;
    let asked = WriteControls::of(ctx)?;
    let mut changes = Vec::with_capacity(request.changes.len());
    let mut relaxed = Vec::new();
    for change in &request.changes {
        let name = text(&change.modification.r#type)?;
        if name.is_empty() {
            return Err(LdapError::protocol("empty attribute description"));
        }
        if asked.relax && crate::op::add::no_user_modification(&ctx.config, name) {
            relaxed.push(name.to_string());
        } else {
            crate::op::add::reject_no_user_modification(&ctx.config, name)?;
        }
        let op = match change.operation {
            ModifyOperation::Add => ModOp::Add,
            ModifyOperation::Delete => ModOp::Delete,
            ModifyOperation::Replace => ModOp::Replace,
            ModifyOperation::Increment => ModOp::Increment,
        };
        let values: Vec<Vec<u8>> = change.modification.vals.iter().map(|v| v.to_vec()).collect();
        check_change(&ctx.config, op, name, &values)?;
        let values = canonical_values(&ctx.config, name, values)?;
        if matches!(op, ModOp::Add | ModOp::Replace) {
            crate::ppolicy::policy::check_policy_values(&ctx.config, name, &values)?;
        }
        changes.push(LdifMod { op, attr: Attribute::new(name, values) });
    }
    let subject = access::subject(ctx).await;
    let target = access::locate(ctx, &subject, &dn).await?;
    if !subject.is_root() {
        // slapd's acl_check_modlist: `write` on every attribute a change touches.
        let entry = access::entry_for_rules(ctx, &subject, target.id).await?;
        for change in &changes {
            access::may_write_attr(&ctx.config, &subject, &dn, entry.as_ref(), &change.attr.name)?;
        }
        for name in &relaxed {
            access::may_relax(&ctx.config, &subject, &dn, entry.as_ref(), name)?;
        }
    }
    // Unlocking an account clears the failures that locked it (slapd's ppolicy_modify).
    crate::ppolicy::lockout::with_unlock(&ctx.config, &mut changes);
    password_rules(ctx, &dn, target.id, &mut changes).await?;
    crate::op::stored_password::hash_changes(&ctx.config, &mut changes).await?;
    let _claims = unique_claims(ctx, &dn, target.id, &changes).await?;
    let audit = crate::op::audit::prepare(ctx, &dn, Change::Modify(&changes));
    let op = WriteOp::Modify { id: target.id, changes, author: ctx.identity.author() };
    let op = write_controls::wrap(ctx, &subject, &asked, op, target.id).await;
    let (outcome, before, _) = ctx.worker.write(target.id.shard(), op).await?.split();
    crate::op::audit::committed(ctx, audit);
    if let WriteOutcome::Record(after) = outcome {
        write_controls::answer_reads(ctx, &subject, &asked, target.id, before, Some(after)).await;
    }
    Ok(())
}

/// A change that sets userPassword, of an entry a password policy governs: the new values
/// checked against its rules before they are hashed, and the changes that go with them
/// (pwdChangedTime, pwdHistory) added (crate::ppolicy).
async fn password_rules(
    ctx: &OpContext,
    dn: &ferrodir_proto::NormDn,
    id: ferrodir_shard::EntryId,
    changes: &mut Vec<LdifMod>,
) -> LdapResultOf<()> {
    let is_password = |c: &LdifMod| c.attr.base_name_lower() == "userpassword";
    let new: Vec<Vec<u8>> = changes
        .iter()
        .filter(|c| matches!(c.op, ModOp::Add | ModOp::Replace) && is_password(c))
        .flat_map(|c| c.attr.values.iter().cloned())
        .collect();
    if new.is_empty() {
        return Ok(());
    }
    let old_given =
        changes.iter().any(|c| c.op == ModOp::Delete && is_password(c) && !c.attr.values.is_empty());
    let Some(record) = ctx.worker.fetch(id).await? else { return Ok(()) };
    // The old password given in clear to delete a hashed value: the stored value it matches
    // is what goes (slapd's ppolicy does the same, so that a safe modify can name it).
    let stored = record.entry.get("userPassword").map(|a| a.values.clone()).unwrap_or_default();
    for change in changes.iter_mut().filter(|c| c.op == ModOp::Delete && is_password(c)) {
        for value in change.attr.values.iter_mut().filter(|v| !crate::password::is_hashed(v)) {
            if let Some(at) = ctx.config.passwords.matching(stored.clone(), value.clone()).await? {
                if let Some(hashed) = stored.get(at) {
                    *value = hashed.clone();
                }
            }
        }
    }
    let own = matches!(&ctx.identity, crate::requester::Identity::User(me) if me.same_entry(dn));
    let more =
        crate::ppolicy::new_password(ctx, &record.entry, Some(&record.entry), &new, own, old_given).await?;
    changes.extend(more);
    Ok(())
}

/// Claims and checks the values of `[[unique]]` types the changes add or replace, on the
/// entry as the changes would leave it (crate::op::unique); held until the write is answered.
async fn unique_claims<'c>(
    ctx: &'c OpContext,
    dn: &ferrodir_proto::NormDn,
    id: ferrodir_shard::EntryId,
    changes: &[LdifMod],
) -> LdapResultOf<Option<crate::unique::Claims<'c>>> {
    let config = &ctx.config;
    if !config.unique.rules.iter().any(|rule| rule.covers(dn)) {
        return Ok(None);
    }
    let Some(record) = ctx.worker.fetch(id).await? else { return Ok(None) };
    let mut entry = record.entry.clone();
    let mut changed = Vec::new();
    for change in changes {
        let Some(canonical) = config.rules.get(&change.attr.base_name_lower()).map(|r| r.canonical.clone())
        else {
            continue;
        };
        let at = ferrodir_shard::find_attr(&config.rules, &entry, &change.attr.name);
        match (change.op, at) {
            (ModOp::Replace, Some(at)) => entry.attrs.remove(at).values.clear(),
            (ModOp::Delete, Some(at)) if change.attr.values.is_empty() => {
                entry.attrs.remove(at).values.clear()
            }
            _ => {}
        }
        if matches!(change.op, ModOp::Add | ModOp::Replace) && !change.attr.values.is_empty() {
            entry.attrs.push(change.attr.clone());
            changed.push(canonical);
        }
    }
    let written = crate::op::unique::Written { dn, entry: &entry, changed: Some(&changed), own: Some(dn) };
    crate::op::unique::check(ctx, &written).await
}

/// What slapd refuses before touching the entry: increments that aren't one integer on an
/// integer type (RFC 4525 §3), and deleting values of a type that has no equality rule.
fn check_change(config: &DirectoryConfig, op: ModOp, name: &str, values: &[Vec<u8>]) -> LdapResultOf<()> {
    let rules = config.rules.get(name);
    match op {
        ModOp::Increment => {
            let [value] = values else {
                return Err(LdapError::protocol("increment takes exactly one value"));
            };
            if std::str::from_utf8(value).ok().and_then(|v| v.parse::<i64>().ok()).is_none() {
                return Err(LdapError::new(
                    ResultCode::INVALID_ATTRIBUTE_SYNTAX,
                    format!("{name}: value #0 invalid per syntax"),
                ));
            }
            if rules.and_then(|r| r.equality) != Some(Rule::Integer) {
                return Err(LdapError::new(
                    ResultCode::CONSTRAINT_VIOLATION,
                    format!("{name}: increment is only for integer attributes"),
                ));
            }
        }
        ModOp::Delete if !values.is_empty() && rules.is_some_and(|r| r.equality.is_none()) => {
            return Err(LdapError::new(
                ResultCode::INAPPROPRIATE_MATCHING,
                format!("{name}: no equality matching rule"),
            ));
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use ferrodir_proto::message::{
        Change, ModifyOperation, ModifyRequest, OctetString, PartialAttribute, ProtocolOp, SearchScope,
    };
    use ferrodir_proto::ResultCode;

    use crate::testkit::{run, TestDirectory, ROOT_DN, ROOT_PASSWORD};

    const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";

    fn change(operation: ModifyOperation, name: &str, values: &[&str]) -> Change {
        let vals = values.iter().map(|v| OctetString::from(v.as_bytes().to_vec())).collect();
        Change {
            operation,
            modification: PartialAttribute { r#type: OctetString::from(name.as_bytes().to_vec()), vals },
        }
    }

    #[test]
    fn an_add_of_no_values_is_a_protocol_error_and_nothing_is_written() {
        run(async {
            let directory = TestDirectory::with_people(2).await;
            let mut root = directory.connect();
            assert_eq!(root.bind(ROOT_DN, ROOT_PASSWORD).await, ResultCode::SUCCESS);
            for dn in [ALICE, "uid=nobody,ou=people,dc=example,dc=com"] {
                let request = ModifyRequest {
                    object: OctetString::from(dn.as_bytes().to_vec()),
                    changes: vec![
                        change(ModifyOperation::Replace, "description", &["written?"]),
                        change(ModifyOperation::Add, "description", &[]),
                    ],
                };
                let result = root.result_of(ProtocolOp::ModifyRequest(request)).await;
                assert_eq!(result.result_code, ResultCode::PROTOCOL_ERROR, "{dn}: {result:?}");
            }
            let found =
                root.search(ALICE, SearchScope::BaseObject, "(objectClass=*)", &["description"]).await;
            assert!(found.values(ALICE, "description").is_empty());
        });
    }
}
