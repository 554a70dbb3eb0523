//! Modify DN (RFC 4511 §4.9) of a leaf or a whole subtree: a new RDN, a new superior, or
//! both. The coordinator moves the name (possibly between shards); the entry keeps its id
//! and home shard, and its descendants don't change at all.

use ferrodir_proto::message::ModifyDnRequest;
use ferrodir_proto::schema::DnNormalizer;
use ferrodir_proto::{NormDn, Rdn, ResultCode};
use ferrodir_shard::EntryId;

use crate::access::{self, check_not_anonymous, Subject};
use crate::acl::rule::Attr;
use crate::auditlog::Change;
use crate::coordinator::{MoveEntry, Origin};
use crate::error::{LdapError, LdapResultOf};
use crate::located::Located;
use crate::op::context::OpContext;
use crate::op::write_controls::{self, WriteControls};
use crate::op::{check_writable, parse_dn, text};
use crate::resolve::locate;

pub async fn modify_dn(ctx: &OpContext, request: ModifyDnRequest) -> LdapResultOf<()> {
    let config = &ctx.config;
    let dn = parse_dn(config, &request.entry)?;
    let new_rdn = config.dn_rules().parse_rdn(text(&request.newrdn)?).map_err(LdapError::invalid_dn)?;
    let new_superior = request.new_superior.as_deref().map(|bytes| parse_dn(config, bytes)).transpose()?;
    check_writable(config, &dn)?;
    check_not_anonymous(&ctx.identity)?;
    let asked = WriteControls::of(ctx)?;
    if let Some(ava) = new_rdn.avas.iter().find(|a| config.rules.get(&a.attr).is_none()) {
        return Err(LdapError::invalid_dn(format!("{}: attribute type undefined", ava.attr)));
    }
    let subject = access::subject(ctx).await;
    // slapd asks about the old parent's `children` before it looks for the entry: a user
    // without that right gets insufficientAccessRights even for a missing entry.
    check_old_parent(ctx, &subject, &dn).await?;
    let target = access::locate(ctx, &subject, &dn).await?;
    let entry = access::entry_for_rules(ctx, &subject, target.id).await?;
    if !subject.is_root() {
        let message = "no write access to old entry";
        access::check_write(config, &subject, &dn, entry.as_ref(), Attr::Entry, message)?;
    }
    if target.parent == EntryId::ROOT {
        // The suffix entry names a whole naming context (slapd: affectsMultipleDSAs).
        return Err(LdapError::new(ResultCode::AFFECTS_MULTIPLE_DSAS, "cannot rename a naming context"));
    }
    let new_parent = match &new_superior {
        Some(superior) => new_parent(ctx, &subject, &dn, superior, &target).await?,
        None => target.parent,
    };
    let old_rdn = dn.dn.rdn().ok_or_else(|| LdapError::invalid_dn("empty DN"))?;
    let dn_rules = config.dn_rules();
    let new_rdn_norm = dn_rules.rdn(&new_rdn);
    let (drop_values, add_values) = naming_changes(dn_rules, old_rdn, &new_rdn, request.deleteoldrdn);
    if !subject.is_root() {
        // The naming values it adds and removes are changes to the entry's attributes.
        for (attr, _) in add_values.iter().chain(&drop_values) {
            access::may_write_attr(config, &subject, &dn, entry.as_ref(), attr)?;
        }
    }
    let new_dn = new_superior
        .as_ref()
        .map(|superior| superior.dn.clone())
        .or_else(|| dn.dn.parent())
        .unwrap_or_default()
        .child(new_rdn.clone());
    let _claims = unique_claims(ctx, &dn, &new_dn, target.id, &add_values).await?;
    // Formatted only when the log is on: the new names are printed for it.
    let audit = match ctx.worker.audit_log {
        Some(_) => {
            let superior = new_superior.as_ref().map(|s| s.dn.to_string());
            let change = Change::ModDn {
                new_rdn: &new_rdn.to_string(),
                delete_old_rdn: request.deleteoldrdn,
                new_superior: superior.as_deref(),
            };
            crate::op::audit::prepare(ctx, &dn, change)
        }
        None => None,
    };
    let id = target.id;
    let check = match &asked.assertion {
        Some(filter) => Some(write_controls::check(ctx, &subject, filter.clone(), id).await),
        // The pre-read needs the entry as it was in the move's batch.
        None if asked.pre_read.is_some() => Some(write_controls::always()),
        None => None,
    };
    let request = MoveEntry {
        check,
        target,
        new_parent,
        new_rdn: new_rdn.to_string(),
        new_rdn_norm,
        drop_values,
        add_values,
        author: ctx.identity.author(),
        delete_old_rdn: request.deleteoldrdn,
        old_dn: dn.dn,
        new_dn,
        origin: Origin::Client,
    };
    let moved = ctx.worker.coordinator.send(request).await??;
    crate::op::audit::committed(ctx, audit);
    if let Some(moved) = moved {
        let (outcome, before, _) = moved.split();
        if let ferrodir_shard::WriteOutcome::Record(after) = outcome {
            write_controls::answer_reads(ctx, &subject, &asked, id, before, Some(after)).await;
        }
    }
    Ok(())
}

/// Claims and checks `[[unique]]` values for the renamed entry (crate::op::unique): the
/// naming values the new RDN adds, or every value when the move brings the entry into a
/// rule's subtrees; held until the move is answered.
async fn unique_claims<'c>(
    ctx: &'c OpContext,
    old_dn: &NormDn,
    new_dn: &ferrodir_proto::Dn,
    id: EntryId,
    add_values: &[(String, Vec<u8>)],
) -> LdapResultOf<Option<crate::unique::Claims<'c>>> {
    let config = &ctx.config;
    let new_dn = NormDn::new(new_dn.clone(), config.dn_rules());
    if !config.unique.rules.iter().any(|rule| rule.covers(&new_dn)) {
        return Ok(None);
    }
    let Some(record) = ctx.worker.fetch(id).await? else { return Ok(None) };
    let mut entry = record.entry.clone();
    for (attr, value) in add_values {
        entry.attrs.push(ferrodir_proto::entry::Attribute::new(attr, vec![value.clone()]));
    }
    let moved_in = config.unique.rules.iter().any(|rule| rule.covers(&new_dn) && !rule.covers(old_dn));
    let changed: Vec<String> = add_values
        .iter()
        .filter_map(|(attr, _)| config.rules.get(attr).map(|r| r.canonical.clone()))
        .collect();
    let written = crate::op::unique::Written {
        dn: &new_dn,
        entry: &entry,
        changed: (!moved_in).then_some(changed.as_slice()),
        own: Some(old_dn),
    };
    crate::op::unique::check(ctx, &written).await
}

/// The id of `superior`, the entry's new parent: in the same naming context as `dn`, not
/// the entry itself, and with `write` on its `children`.
async fn new_parent(
    ctx: &OpContext,
    subject: &Subject,
    dn: &NormDn,
    superior: &NormDn,
    target: &Located,
) -> LdapResultOf<EntryId> {
    let config = &ctx.config;
    let same_context = config.suffix_of(superior).map(|s| &s.norm) == config.suffix_of(dn).map(|s| &s.norm);
    if !same_context {
        return Err(LdapError::new(
            ResultCode::AFFECTS_MULTIPLE_DSAS,
            "newSuperior is in another naming context",
        ));
    }
    let parent = locate(&ctx.worker, superior).await.map_err(|mut e| {
        // slapd names no matchedDN for a missing newSuperior.
        e.matched_dn.clear();
        e
    })?;
    check_new_parent(ctx, subject, superior, parent.id).await?;
    if parent.id == target.id {
        return Err(LdapError::new(ResultCode::UNWILLING_TO_PERFORM, "cannot move an entry below itself"));
    }
    if !ctx.worker.skeleton().contains(parent.id) {
        crate::op::add::refuse_alias_parent(ctx, parent.id).await?;
    }
    Ok(parent.id)
}

/// (attribute, value) pairs a rename takes out of or puts into the entry.
type NamingValues = Vec<(String, Vec<u8>)>;

/// The naming values a rename drops (the old RDN's that the new one lacks, when
/// `delete_old_rdn`) and adds (the new RDN's), as (attribute, value) pairs.
fn naming_changes(
    rules: &DnNormalizer,
    old_rdn: &Rdn,
    new_rdn: &Rdn,
    delete_old_rdn: bool,
) -> (NamingValues, NamingValues) {
    let drop_values = if delete_old_rdn {
        old_rdn
            .avas
            .iter()
            .filter(|old| !new_rdn.avas.iter().any(|new| same_ava(rules, old, new)))
            .map(|a| (a.attr.clone(), a.value.clone()))
            .collect()
    } else {
        Vec::new()
    };
    let add_values = new_rdn.avas.iter().map(|a| (a.attr.clone(), a.value.clone())).collect();
    (drop_values, add_values)
}

/// `write` on the old parent's `children`, when the parent exists (a missing one is left
/// to the entry's own lookup to answer).
async fn check_old_parent(
    ctx: &OpContext,
    subject: &Subject,
    dn: &ferrodir_proto::NormDn,
) -> LdapResultOf<()> {
    if subject.is_root() {
        return Ok(());
    }
    let parent_dn = dn.parent().unwrap_or_default();
    let parent_id = if ctx.config.suffix_of(&parent_dn).is_some() {
        match crate::resolve::locate(&ctx.worker, &parent_dn).await {
            Ok(parent) => parent.id,
            Err(_) => return Ok(()),
        }
    } else {
        EntryId::ROOT // the suffix entry's parent: the root DSE
    };
    let parent = access::entry_for_rules(ctx, subject, parent_id).await?;
    let message = "no write access to old parent's children";
    access::check_write(&ctx.config, subject, &parent_dn, parent.as_ref(), Attr::Children, message)
}

/// `write` on the new parent's `children` (slapd: "no write access to new superior's
/// children").
async fn check_new_parent(
    ctx: &OpContext,
    subject: &Subject,
    superior: &ferrodir_proto::NormDn,
    id: EntryId,
) -> LdapResultOf<()> {
    if subject.is_root() {
        return Ok(());
    }
    let entry = access::entry_for_rules(ctx, subject, id).await?;
    let message = "no write access to new superior's children";
    access::check_write(&ctx.config, subject, superior, entry.as_ref(), Attr::Children, message)
}

fn same_ava(rules: &DnNormalizer, a: &ferrodir_proto::dn::Ava, b: &ferrodir_proto::dn::Ava) -> bool {
    a.normalized(rules) == b.normalized(rules)
}
