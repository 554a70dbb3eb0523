//! Compare (RFC 4511 §4.10): compareTrue or compareFalse by the attribute's equality rule
//! (subtypes included), noSuchAttribute when the entry lacks it, undefinedAttributeType for
//! a type the schema doesn't know.

use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::message::{CompareRequest, LdapResult};
use ferrodir_proto::schema::matching;
use ferrodir_proto::ResultCode;
use ferrodir_shard::{has_class, has_options};

use crate::access::{self, Subject};
use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::op::{parse_dn, rootdse, text};

pub async fn compare(ctx: &OpContext, request: CompareRequest) -> LdapResult {
    match evaluate(ctx, request).await {
        Ok(code) => LdapResult::new(code, String::new(), String::new()),
        Err(e) => e.to_result(),
    }
}

async fn evaluate(ctx: &OpContext, request: CompareRequest) -> LdapResultOf<ResultCode> {
    let dn = parse_dn(&ctx.config, &request.entry)?;
    crate::op::write_controls::refuse_copy(ctx, &dn)?;
    let desc = text(&request.ava.attribute_desc)?;
    if desc.is_empty() {
        return Err(LdapError::protocol("empty attribute description"));
    }
    let config = &ctx.config;
    let subject = access::subject(ctx).await;
    let (mut entry, special) = target_entry(ctx, &subject, &dn).await?;
    if !special && config.rules.get(desc).is_some_and(|r| r.canonical == ferrodir_shard::MEMBER_OF) {
        let shown = entry.first_str("entryDN").unwrap_or_default().to_string();
        let mut values = crate::op::memberof::compare_values(ctx, &subject, &shown).await?;
        // Dynamic groups' members list them too (op::dynlist).
        values.extend(crate::op::dynlist::compare_member_of(ctx, &subject, &entry, &shown).await?);
        if !values.is_empty() {
            entry.attrs.push(Attribute::new("memberOf", values));
        }
    }
    let mut dynamic_group = false;
    if !special && config.rules.get(desc).is_some_and(|r| r.canonical == "member") {
        // A dynamic group's computed members (op::dynlist), as slapd's dynlist compares.
        if let Some(values) = crate::op::dynlist::compare_values(ctx, &subject, &entry).await? {
            dynamic_group = true;
            if !values.is_empty() {
                entry.attrs.push(Attribute::new("member", values));
            }
        }
    }
    if let Some(filter) = crate::op::write_controls::WriteControls::of(ctx)?.assertion {
        // RFC 4528 on a Compare: the target must match, or assertionFailed.
        let holds = match special {
            true => ferrodir_shard::filter_matches(&config.rules, &filter, &entry, None),
            false => {
                let id = access::locate(ctx, &subject, &dn).await?.id;
                crate::op::write_controls::holds_on(ctx, &subject, &filter, id).await?
            }
        };
        if !holds {
            return Err(crate::op::write_controls::failed());
        }
    }
    let rules = config.rules.get(desc).ok_or_else(|| {
        LdapError::new(ResultCode::UNDEFINED_ATTRIBUTE_TYPE, format!("{desc}: attribute type undefined"))
    })?;
    // The root DSE and cn=Subschema are open to everyone; entries go by the rules.
    if !special {
        if let Some(refusal) = access::compare_refusal(config, &subject, &dn, &entry, &rules.canonical) {
            return Err(refusal);
        }
    }
    if rules.canonical == "objectclass" {
        if config.rules.class_lineage(&request.ava.assertion_value).is_none() {
            return Err(LdapError::new(
                ResultCode::INVALID_ATTRIBUTE_SYNTAX,
                "objectClass: value invalid per syntax",
            ));
        }
        return Ok(if has_class(&config.rules, &entry, &request.ava.assertion_value) {
            ResultCode::COMPARE_TRUE
        } else {
            ResultCode::COMPARE_FALSE
        });
    }
    let rule = rules.equality.ok_or_else(|| {
        LdapError::new(ResultCode::INAPPROPRIATE_MATCHING, format!("{desc}: no equality matching rule"))
    })?;
    let dn_rules = config.dn_rules();
    let assertion = matching::normalize(rule, &request.ava.assertion_value, dn_rules).ok_or_else(|| {
        LdapError::new(ResultCode::INVALID_ATTRIBUTE_SYNTAX, format!("{desc}: value invalid per syntax"))
    })?;
    let options: Vec<String> = desc.split(';').skip(1).map(str::to_ascii_lowercase).collect();
    let mut values = entry
        .attrs
        .iter()
        .filter(|a| config.rules.get(&a.name).is_some_and(|r| rules.subtypes.contains(&r.canonical)))
        .filter(|a| has_options(&a.name, &options))
        .flat_map(|a| a.values.iter())
        .peekable();
    if values.peek().is_none() && !dynamic_group {
        return Err(LdapError::new(ResultCode::NO_SUCH_ATTRIBUTE, ""));
    }
    if values.any(|v| matching::normalize(rule, v, dn_rules).as_deref() == Some(&assertion)) {
        Ok(ResultCode::COMPARE_TRUE)
    } else {
        Ok(ResultCode::COMPARE_FALSE)
    }
}

/// The entry a Compare looks at, with the attributes computed at read time, and whether it
/// is the root DSE or cn=Subschema (which come from the router; every other entry from
/// its shard).
async fn target_entry(
    ctx: &OpContext,
    subject: &Subject,
    dn: &ferrodir_proto::NormDn,
) -> LdapResultOf<(Entry, bool)> {
    let config = &ctx.config;
    let (user, operational) = if dn.is_root() {
        rootdse::root_dse(config, &ctx.transport)
    } else if dn.is("cn=subschema") {
        rootdse::subschema(&config.schema)
    } else {
        let target = access::locate(ctx, subject, dn).await?;
        let record = ctx.worker.fetch(target.id).await?.ok_or_else(|| LdapError::no_such_object(""))?;
        let skeleton = ctx.worker.skeleton();
        let shown = match skeleton.get(target.id) {
            Some(node) => node.dn.to_string(),
            None => skeleton.dn_of_child(record.parent, &record.rdn),
        };
        let mut entry = record.entry.clone();
        let has_subordinates = if skeleton.contains(target.id) { "TRUE" } else { "FALSE" };
        for (name, value) in [
            ("entryDN", shown.as_str()),
            ("hasSubordinates", has_subordinates),
            ("subschemaSubentry", "cn=Subschema"),
        ] {
            entry.attrs.push(Attribute::new(name, vec![value.as_bytes().to_vec()]));
        }
        return Ok((entry, false));
    };
    let mut entry = user;
    entry.attrs.extend(operational.attrs);
    Ok((entry, true))
}
