//! `[[unique]]` resolved against the schema and the suffixes, for the router
//! (router/src/unique.rs, op/unique.rs do the work), and the check at start that the data
//! already holds no duplicates: turning uniqueness on over data that breaks it would leave
//! every later write of those entries refused for values it did not add.

use std::collections::HashMap;

use anyhow::bail;
use ferrodir_proto::NormDn;
use ferrodir_router::{UniqueRule, Uniqueness};
use ferrodir_shard::offline::{self, Stored};
use ferrodir_shard::{IndexKind, Skeleton};

use crate::config::Config;

/// The rules of `[[unique]]`. Refuses a type the schema doesn't know or one without an
/// equality rule (no two values could be compared), a base outside every suffix and a
/// filter that doesn't parse; warns of a type whose equality index is not usable (every
/// constrained write then scans its subtrees).
pub fn resolve(
    config: &Config,
    schema_rules: &ferrodir_shard::RuleTable,
    indexes: &ferrodir_shard::IndexConfig,
    suffixes: &[NormDn],
) -> anyhow::Result<Uniqueness> {
    let dn_rules = schema_rules.dn();
    let mut rules = Vec::new();
    for (n, table) in config.unique.iter().enumerate() {
        let at = format!("unique[{n}]");
        if table.attributes.is_empty() {
            bail!("{at}.attributes: name at least one attribute type");
        }
        let mut attrs = Vec::new();
        for name in &table.attributes {
            let Some(rule) = schema_rules.get(name) else {
                bail!("{at}.attributes: {name} is not an attribute type of the schema");
            };
            if rule.equality.is_none() {
                bail!("{at}.attributes: {name} has no equality matching rule");
            }
            if !indexes.usable(&rule.canonical, IndexKind::Equality) {
                tracing::warn!(
                    attribute = %name,
                    "[[unique]]: no usable equality index: each write of it searches its subtrees whole; add `{name} eq` to `index`"
                );
            }
            if !attrs.contains(&rule.canonical) {
                attrs.push(rule.canonical.clone());
            }
        }
        let mut bases = Vec::new();
        for text in &table.bases {
            let base = dn_rules.parse(text).map_err(|e| anyhow::anyhow!("{at}.bases: {text}: {e}"))?;
            if !suffixes.iter().any(|s| base.is_descendant_or_self_of(s)) {
                bail!("{at}.bases: {text} is under no suffix of this server");
            }
            bases.push(base);
        }
        if bases.is_empty() {
            bases = suffixes.to_vec();
        }
        let filter = match &table.filter {
            Some(text) => Some(
                ferrodir_proto::filter::parse_filter(text)
                    .map_err(|e| anyhow::anyhow!("{at}.filter: {text}: {e}"))?,
            ),
            None => None,
        };
        rules.push(UniqueRule { attrs, bases, filter });
    }
    Ok(Uniqueness::new(rules))
}

/// Refuses to start over entries that break a rule, naming the first few pairs.
pub fn refuse_duplicates(
    unique: &Uniqueness,
    rules: &ferrodir_shard::RuleTable,
    engines: &[std::sync::Arc<dyn ferrodir_shard::storage::KvEngine>],
    skeleton: &Skeleton,
) -> anyhow::Result<()> {
    if unique.is_empty() {
        return Ok(());
    }
    // (rule, type, value key) → the DN that holds it first.
    let mut seen: HashMap<(usize, String, Vec<u8>), String> = HashMap::new();
    let mut duplicates = Vec::new();
    for engine in engines {
        let snapshot = engine.snapshot()?;
        offline::each_entry(snapshot.as_ref(), &mut |stored| {
            let Stored::Entry(id, record) = stored else { return true };
            let dn_text = match skeleton.get(id) {
                Some(node) => node.dn.to_string(),
                None => skeleton.dn_of_child(record.parent, &record.rdn),
            };
            let Ok(dn) = rules.dn().parse(&dn_text) else { return true };
            for (index, rule) in unique.rules.iter().enumerate() {
                if !rule.covers(&dn) {
                    continue;
                }
                if let Some(filter) = &rule.filter {
                    if !ferrodir_shard::filter_matches(rules, filter, &record.entry, Some(&dn.dn)) {
                        continue;
                    }
                }
                for attr in &record.entry.attrs {
                    let Some(canonical) = rules
                        .get(&attr.base_name_lower())
                        .map(|r| r.canonical.clone())
                        .filter(|c| rule.attrs.contains(c))
                    else {
                        continue;
                    };
                    for value in &attr.values {
                        let key =
                            (index, canonical.clone(), ferrodir_shard::value_key(rules, &canonical, value));
                        match seen.get(&key) {
                            Some(first) if first != &dn_text => duplicates.push(format!(
                                "{canonical}={} in \"{first}\" and \"{dn_text}\"",
                                String::from_utf8_lossy(value)
                            )),
                            Some(_) => {}
                            None => {
                                seen.insert(key, dn_text.clone());
                            }
                        }
                    }
                }
            }
            true
        })?;
    }
    if duplicates.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = duplicates.iter().take(10).map(String::as_str).collect();
    bail!(
        "[[unique]]: the data already holds {} duplicate value(s), e.g. {}; remove them (or the rule) before starting",
        duplicates.len(),
        shown.join("; ")
    )
}
