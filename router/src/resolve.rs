//! DN → entry id resolution. The skeleton answers every container on the path locally;
//! only the last RDN, if it names a leaf, costs one lookup on the shard that holds its
//! DN→ID record (a direct call when that shard is this worker's).

use ferrodir_proto::NormDn;
use ferrodir_shard::shard_for_child;

use crate::error::{LdapError, LdapResultOf};
use crate::located::Located;
use crate::worker::Worker;

/// The normalised names from the top: the suffix first, then each RDN below it. `dn` was
/// normalised once, by whoever parsed it; the suffix match and the names both read that
/// (a memberOf search resolves a thousand member DNs this way).
pub fn names_from_top(worker: &Worker, dn: &NormDn) -> LdapResultOf<Vec<String>> {
    worker.with_config(|config| {
        let suffix = config.suffix_of(dn).ok_or_else(|| LdapError::no_such_object(""))?;
        let below = dn.len() - suffix.dn.len();
        let mut rdn_norms: Vec<String> = Vec::with_capacity(below + 1);
        rdn_norms.extend(dn.rdns.iter().take(below).cloned());
        rdn_norms.push(suffix.norm.clone());
        rdn_norms.reverse();
        Ok(rdn_norms)
    })
}

/// Finds the entry named `dn`, or noSuchObject with the deepest existing ancestor as
/// matchedDN (RFC 4511 §4.1.9).
pub async fn locate(worker: &Worker, dn: &NormDn) -> LdapResultOf<Located> {
    let names = names_from_top(worker, dn)?;
    let skeleton = worker.skeleton();
    let found = skeleton.resolve(names.iter().map(String::as_str));
    let parent = found.deepest;
    let matched_dn = |depth: usize| -> String {
        if depth == 0 {
            String::new()
        } else {
            dn.dn.ancestors_suffix(dn.len() - names.len() + depth).to_string()
        }
    };
    if found.matched == names.len() {
        let node = skeleton.get(parent).ok_or_else(|| LdapError::no_such_object(""))?;
        return Ok(Located {
            id: parent,
            parent: node.parent,
            rdn_norm: node.rdn_norm.clone(),
            container: true,
        });
    }
    let next = names.get(found.matched).ok_or_else(|| LdapError::internal("resolved past the DN"))?;
    let shard = shard_for_child(parent, next, worker.shard_count());
    // A name a failed cross-shard change left behind resolves to nothing (Skeleton::withdrawn).
    let id = worker.lookup(shard, parent, next).await?.filter(|id| !skeleton.is_withdrawn(parent, next, *id));
    match id {
        Some(id) if found.matched + 1 == names.len() => {
            Ok(Located { id, parent, rdn_norm: next.clone(), container: skeleton.contains(id) })
        }
        // A leaf on the path: the DN is below an entry with no children.
        Some(_) => Err(LdapError::no_such_object(matched_dn(found.matched + 1))),
        None => Err(LdapError::no_such_object(matched_dn(found.matched))),
    }
}

/// Resolves the parent under which `dn` would be created, as (parent id, is container,
/// normalised RDN of `dn` under it, display RDN).
pub async fn locate_parent_of(
    worker: &Worker,
    dn: &NormDn,
) -> LdapResultOf<(Option<Located>, String, String)> {
    let suffix_entry = worker.with_config(|config| {
        let suffix = config.suffix_of(dn).ok_or_else(|| LdapError::no_such_object(""))?;
        // The suffix entry itself hangs under the virtual root.
        Ok::<_, LdapError>(
            (dn.len() == suffix.dn.len()).then(|| (suffix.norm.clone(), suffix.display.clone())),
        )
    })?;
    if let Some((norm, display)) = suffix_entry {
        return Ok((None, norm, display));
    }
    let parent_dn = dn.parent().unwrap_or_default();
    let (Some(rdn), Some(rdn_norm)) = (dn.dn.rdn(), dn.rdn_norm()) else {
        return Err(LdapError::invalid_dn("empty DN"));
    };
    let parent = locate(worker, &parent_dn).await?;
    Ok((Some(parent), rdn_norm.to_string(), rdn.to_string()))
}
