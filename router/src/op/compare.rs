//! Compare (RFC 4511 §4.10): compareTrue or compareFalse by the attribute's equality rule
//! (subtypes included), noSuchAttribute when the entry lacks it, undefinedAttributeType for
//! a type the schema doesn't know.

use ferrodir_proto::message::{CompareRequest, LdapResult};
use ferrodir_proto::schema::matching;
use ferrodir_proto::ResultCode;

use crate::access::may_read;
use crate::error::{LdapError, LdapResultOf};
use crate::op::{parse_dn, text};
use crate::resolve::locate;
use crate::session::OpContext;

pub async fn compare(ctx: &OpContext, request: CompareRequest) -> LdapResult {
    match evaluate(ctx, request).await {
        Ok(code) => LdapResult::new(code, String::new(), String::new()),
        Err(e) => e.to_result(),
    }
}

async fn evaluate(ctx: &OpContext, request: CompareRequest) -> LdapResultOf<ResultCode> {
    let dn = parse_dn(&request.entry)?;
    let desc = text(&request.ava.attribute_desc)?;
    if desc.is_empty() {
        return Err(LdapError::protocol("empty attribute description"));
    }
    let config = &ctx.worker.config;
    let target = locate(&ctx.worker, &dn).await?;
    let record = ctx.worker.fetch(target.id).await?.ok_or_else(|| LdapError::no_such_object(""))?;
    let rules = config.rules.get(desc).ok_or_else(|| {
        LdapError::new(ResultCode::UNDEFINED_ATTRIBUTE_TYPE, format!("{desc}: attribute type undefined"))
    })?;
    if !may_read(config, &ctx.identity, &rules.canonical) {
        return Err(LdapError::new(ResultCode::INSUFFICIENT_ACCESS_RIGHTS, ""));
    }
    let rule = rules.equality.ok_or_else(|| {
        LdapError::new(ResultCode::INAPPROPRIATE_MATCHING, format!("{desc}: no equality matching rule"))
    })?;
    let assertion = matching::normalize(rule, &request.ava.assertion_value).ok_or_else(|| {
        LdapError::new(ResultCode::INVALID_ATTRIBUTE_SYNTAX, format!("{desc}: value invalid per syntax"))
    })?;
    let mut values = record
        .entry
        .attrs
        .iter()
        .filter(|a| config.rules.get(&a.name).is_some_and(|r| rules.subtypes.contains(&r.canonical)))
        .flat_map(|a| a.values.iter())
        .peekable();
    if values.peek().is_none() {
        return Err(LdapError::new(ResultCode::NO_SUCH_ATTRIBUTE, ""));
    }
    if values.any(|v| matching::normalize(rule, v).as_deref() == Some(&assertion)) {
        Ok(ResultCode::COMPARE_TRUE)
    } else {
        Ok(ResultCode::COMPARE_FALSE)
    }
}
