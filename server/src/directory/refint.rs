//! `[refint]` resolved against the schema and the indices in force, for the router's
//! coordinator (router/src/coordinator/refint.rs does the work).

use std::sync::Arc;

use anyhow::bail;
use ferrodir_proto::schema::matching::Rule;
use ferrodir_router::RefintConfig;
use ferrodir_shard::IndexKind;

use crate::config::Config;
use crate::data::store::Store;

/// None when refint is off. Refuses an attribute the schema doesn't know or whose equality
/// rule is neither distinguishedNameMatch nor uniqueMemberMatch (its values would not be DNs), and one whose equality
/// index isn't built yet (a data directory that predates the `[refint]` table): references
/// found through a half-built index would be missed.
pub fn resolve(config: &Config, store: &Store) -> anyhow::Result<Option<Arc<RefintConfig>>> {
    let table = &config.refint;
    if !table.enabled {
        return Ok(None);
    }
    let mut attrs = Vec::new();
    for name in &table.attributes {
        let Some(rules) = store.rules.get(name) else {
            bail!("refint.attributes: {name} is not an attribute type of the schema");
        };
        if !matches!(rules.equality, Some(Rule::DistinguishedName | Rule::UniqueMember)) {
            bail!("refint.attributes: {name} does not hold DNs (its equality rule is neither distinguishedNameMatch nor uniqueMemberMatch)");
        }
        if !store.indexes.usable(&rules.canonical, IndexKind::Equality) {
            bail!(
                "refint.attributes: the equality index of {name} is not built yet: stop the server and run \
                 `ferrodir reindex` (refint finds references through it)"
            );
        }
        if !attrs.contains(&rules.canonical) {
            attrs.push(rules.canonical.clone());
        }
    }
    Ok(Some(Arc::new(RefintConfig {
        attrs,
        nothing: (!table.nothing.is_empty()).then(|| table.nothing.clone()),
        modifiers_name: table.modifiers_name.clone(),
        rules: store.rules.clone(),
    })))
}
