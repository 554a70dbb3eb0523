//! Compare (RFC 4511 §4.10): compareTrue or compareFalse by the attribute's equality rule,
//! noSuchAttribute when the entry lacks it.

use ferrodir_proto::entry::base_name_lower;
use ferrodir_proto::message::{CompareRequest, LdapResult};
use ferrodir_proto::value::normalize_value;
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
    let name = base_name_lower(text(&request.ava.attribute_desc)?);
    if name.is_empty() {
        return Err(LdapError::protocol("empty attribute description"));
    }
    let target = locate(&ctx.worker, &dn).await?;
    let record = ctx.worker.fetch(target.id).await?.ok_or_else(|| LdapError::no_such_object(""))?;
    if !may_read(&ctx.worker.config, &ctx.identity, &name) {
        return Err(LdapError::new(ResultCode::INSUFFICIENT_ACCESS_RIGHTS, ""));
    }
    let assertion = normalize_value(&name, &request.ava.assertion_value);
    let mut values = record
        .entry
        .attrs
        .iter()
        .filter(|a| base_name_lower(&a.name) == name)
        .flat_map(|a| a.values.iter())
        .peekable();
    if values.peek().is_none() {
        return Err(LdapError::new(ResultCode::NO_SUCH_ATTRIBUTE, ""));
    }
    if values.any(|v| normalize_value(&name, v) == assertion) {
        Ok(ResultCode::COMPARE_TRUE)
    } else {
        Ok(ResultCode::COMPARE_FALSE)
    }
}
