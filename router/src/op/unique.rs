//! `[[unique]]` on the write path (crate::unique holds the rules and the claims): before an
//! Add, a Modify or a Modify DN is sent to its shard, the values it would leave on the entry
//! of every constrained type are claimed, then looked for on every shard within the rule's
//! subtrees. Another entry holding one is a constraintViolation (19), as slapo-unique
//! answers. The claims are held until the caller drops them, after its write was answered.
//!
//! The search runs as the server (no access rules, no limits): a value is unique whether or
//! not the writer may read the entry that holds it, as with slapd. The answer then says only
//! that the value is taken, never where.

use bytes::Bytes;
use ferrodir_proto::entry::Entry;
use ferrodir_proto::filter::{AttributeValueAssertion, Filter};
use ferrodir_proto::message::{decode_message, OctetString, ProtocolOp};
use ferrodir_proto::{NormDn, ResultCode};
use ferrodir_shard::{AttrSelection, RuleTable, Scope};

use crate::error::{LdapError, LdapResultOf};
use crate::op::context::OpContext;
use crate::op::read::{self, Flow, Sink, Target};
use crate::unique::{Claims, UniqueRule};

/// What a write would leave on an entry, for the check.
pub(crate) struct Written<'a> {
    /// The entry's DN after the write.
    pub dn: &'a NormDn,
    /// The entry after the write (an Add's, a Modify's result, a renamed entry).
    pub entry: &'a Entry,
    /// Only these canonical types changed (None: every type counts, as for an Add or an
    /// entry moved into a rule's subtrees).
    pub changed: Option<&'a [String]>,
    /// The entry's DN before the write, when it exists already: its own values are no
    /// conflict.
    pub own: Option<&'a NormDn>,
}

/// One value to look for.
struct Wanted {
    rule: usize,
    attr: String,
    value: Vec<u8>,
}

/// Claims and checks the constrained values of `written`. None: no rule applies.
pub(crate) async fn check<'c>(ctx: &'c OpContext, written: &Written<'_>) -> LdapResultOf<Option<Claims<'c>>> {
    let unique = &ctx.config.unique;
    if unique.is_empty() {
        return Ok(None);
    }
    let rules = &ctx.config.rules;
    let wanted = constrained_values(rules, &unique.rules, written);
    if wanted.is_empty() {
        return Ok(None);
    }
    let keys = wanted
        .iter()
        .map(|w| (w.rule, w.attr.clone(), ferrodir_shard::value_key(rules, &w.attr, &w.value)))
        .collect();
    let claims = unique.claim(keys).await;
    for w in &wanted {
        let Some(rule) = unique.rules.get(w.rule) else { continue };
        if taken(ctx, rule, &w.attr, &w.value, written.own).await? {
            return Err(LdapError::new(
                ResultCode::CONSTRAINT_VIOLATION,
                format!("some attributes not unique: {}", w.attr),
            ));
        }
    }
    Ok(Some(claims))
}

/// The values of `written` that a rule constrains: the entry lies in the rule's subtrees,
/// matches its filter, and the type changed.
fn constrained_values(rules: &RuleTable, unique: &[UniqueRule], written: &Written<'_>) -> Vec<Wanted> {
    let mut out = Vec::new();
    for (index, rule) in unique.iter().enumerate() {
        if !rule.covers(written.dn) {
            continue;
        }
        if let Some(filter) = &rule.filter {
            if !ferrodir_shard::filter_matches(rules, filter, written.entry, Some(&written.dn.dn)) {
                continue;
            }
        }
        for attr in &written.entry.attrs {
            let canonical = match rules.get(&ferrodir_proto::entry::base_name_lower(&attr.name)) {
                Some(r) => r.canonical.clone(),
                None => continue,
            };
            if !rule.attrs.contains(&canonical) {
                continue;
            }
            if written.changed.is_some_and(|changed| !changed.contains(&canonical)) {
                continue;
            }
            for value in &attr.values {
                out.push(Wanted { rule: index, attr: canonical.clone(), value: value.clone() });
            }
        }
    }
    out
}

/// Whether an entry other than `own` holds `value` of `attr` within the rule's subtrees.
async fn taken(
    ctx: &OpContext,
    rule: &UniqueRule,
    attr: &str,
    value: &[u8],
    own: Option<&NormDn>,
) -> LdapResultOf<bool> {
    let config = &ctx.config;
    let equal = Filter::EqualityMatch(AttributeValueAssertion {
        attribute_desc: OctetString::from(attr.as_bytes().to_vec()),
        assertion_value: OctetString::from(value.to_vec()),
    });
    let filter = match &rule.filter {
        Some(f) => Filter::And(vec![equal, f.clone()]),
        None => equal,
    };
    let filter = std::sync::Arc::new(filter);
    let attrs =
        std::sync::Arc::new(AttrSelection::from_request(&["1.1"], false, &config.rules, &config.schema));
    for base in &rule.bases {
        let Ok(found) = crate::resolve::locate(&ctx.worker, base).await else { continue };
        let target = Target {
            skeleton: ctx.worker.skeleton(),
            scope: Scope::Subtree(found.id),
            filter: filter.clone(),
            attrs: attrs.clone(),
        };
        let mut sink = Holders { rules: config.rules.clone(), own, other: false };
        read::read(ctx, &target, &config.limits.root, None, &mut sink).await?;
        if sink.other {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether any entry found is not the written one.
struct Holders<'a> {
    rules: std::sync::Arc<RuleTable>,
    own: Option<&'a NormDn>,
    other: bool,
}

impl Sink for Holders<'_> {
    async fn take(&mut self, _ctx: &OpContext, pdus: Vec<Bytes>) -> LdapResultOf<Flow> {
        for pdu in pdus {
            let Ok(message) = decode_message(&pdu) else { continue };
            let ProtocolOp::SearchResultEntry(found) = message.protocol_op else { continue };
            let dn = std::str::from_utf8(&found.object_name).ok().and_then(|d| self.rules.dn().parse(d).ok());
            let is_own = matches!((dn, self.own), (Some(dn), Some(own)) if dn.same_entry(own));
            if !is_own {
                self.other = true;
                return Ok(Flow::Stop(ferrodir_shard::StopReason::Finished));
            }
        }
        Ok(Flow::More)
    }
}
