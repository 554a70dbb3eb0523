//! The tree skeleton: every container entry (one with children) with its parent and RDN.
//!
//! It is small (a flat `ou=people` with a million leaves has a handful of containers), so every
//! worker reads the same immutable copy without a lock and DN resolution never leaves the
//! worker. The coordinator in `router` is its only writer: it builds a new version and
//! publishes it through [`SkeletonCell`]; a search pins the version it started with.
//!
//! A configured suffix (`dc=example,dc=com`) is one node whose "RDN" is the whole suffix DN,
//! under the virtual root [`EntryId::ROOT`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::id::EntryId;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerNode {
    pub id: EntryId,
    pub parent: EntryId,
    pub rdn: String,
    pub rdn_norm: String,
    /// The full DN as it is sent to clients, built from the RDNs up to the suffix.
    pub dn: Arc<str>,
}

/// One immutable version of the skeleton.
///
/// Cloning one copies no map: the maps sit behind one `Arc` that every clone shares (the
/// coordinator's own copy, the published one, each worker's handle, every pinned search).
/// A change copies them once, for the new version (`Arc::make_mut`), where it used to be
/// copied again on publication and once more by every worker that reloaded it.
#[derive(Clone, Debug, Default)]
pub struct Skeleton {
    pub version: u64,
    maps: Arc<Maps>,
}

#[derive(Clone, Debug, Default)]
struct Maps {
    nodes: HashMap<EntryId, ContainerNode>,
    /// parent → normalised RDN → child container: looked up by `&str`, no allocation.
    by_name: HashMap<EntryId, HashMap<String, EntryId>>,
    child_containers: HashMap<EntryId, Vec<EntryId>>,
    /// DN→ID records that must resolve to nothing: parent → normalised RDN → the id the
    /// stale record names. A cross-shard change that failed half way (a shard could not
    /// commit) can leave a record its entry no longer agrees with, on a shard that takes no
    /// more writes; start-up recovery removes it, and until then the coordinator withdraws
    /// it here so no read finds the entry under that name. Almost always empty.
    withdrawn: HashMap<EntryId, HashMap<String, EntryId>>,
}

/// What DN resolution against the skeleton found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    /// The deepest container on the DN's path (ROOT if none).
    pub deepest: EntryId,
    /// How many of the DN's normalised RDNs (from the right, the suffix counting as one) were
    /// matched to containers.
    pub matched: usize,
}

impl Maps {
    fn insert_node(&mut self, id: EntryId, parent: EntryId, rdn: String, rdn_norm: String) {
        let dn: Arc<str> = match self.nodes.get(&parent) {
            Some(p) => format!("{},{}", rdn, p.dn).into(),
            None => rdn.clone().into(),
        };
        self.by_name.entry(parent).or_default().insert(rdn_norm.clone(), id);
        self.child_containers.entry(parent).or_default().push(id);
        self.nodes.insert(id, ContainerNode { id, parent, rdn, rdn_norm, dn });
    }
}

impl Skeleton {
    /// Builds a version from container records `(id, parent, rdn, rdn_norm)`. Records whose
    /// parent chain doesn't reach the root are returned as orphans for `verify` to report.
    pub fn build(
        version: u64,
        records: impl IntoIterator<Item = (EntryId, EntryId, String, String)>,
    ) -> (Self, Vec<EntryId>) {
        let mut pending: HashMap<EntryId, (EntryId, String, String)> = HashMap::new();
        for (id, parent, rdn, rdn_norm) in records {
            pending.insert(id, (parent, rdn, rdn_norm));
        }
        let mut maps = Maps::default();
        // Place nodes top-down: a node is placed once its parent is (iterative, no recursion).
        let mut frontier = vec![EntryId::ROOT];
        let mut by_parent: HashMap<EntryId, Vec<EntryId>> = HashMap::new();
        for (id, (parent, _, _)) in &pending {
            by_parent.entry(*parent).or_default().push(*id);
        }
        while let Some(parent) = frontier.pop() {
            for child in by_parent.remove(&parent).unwrap_or_default() {
                if let Some((p, rdn, rdn_norm)) = pending.remove(&child) {
                    maps.insert_node(child, p, rdn, rdn_norm);
                    frontier.push(child);
                }
            }
        }
        let orphans = pending.into_keys().collect();
        (Skeleton { version, maps: Arc::new(maps) }, orphans)
    }

    /// The next version, with `change` made to a copy of the maps: the one copy a
    /// structural change makes (the others holding this version share it until they drop it).
    fn changed(&self, change: impl FnOnce(&mut Maps)) -> Self {
        let mut next = self.clone();
        next.version += 1;
        change(Arc::make_mut(&mut next.maps));
        next
    }

    /// A copy with `id` added as a container (its parent must be a container or ROOT).
    pub fn with_container(&self, id: EntryId, parent: EntryId, rdn: &str, rdn_norm: &str) -> Self {
        if self.contains(id) {
            return Self { version: self.version + 1, maps: self.maps.clone() };
        }
        self.changed(|maps| maps.insert_node(id, parent, rdn.to_string(), rdn_norm.to_string()))
    }

    /// A copy without container `id` (which must have no child containers).
    pub fn without_container(&self, id: EntryId) -> Self {
        if !self.contains(id) {
            return Self { version: self.version + 1, maps: self.maps.clone() };
        }
        self.changed(|maps| {
            if let Some(node) = maps.nodes.remove(&id) {
                if let Some(names) = maps.by_name.get_mut(&node.parent) {
                    names.remove(&node.rdn_norm);
                }
                if let Some(siblings) = maps.child_containers.get_mut(&node.parent) {
                    siblings.retain(|c| *c != id);
                }
                maps.child_containers.remove(&id);
            }
        })
    }

    /// A copy where container `id` has a new parent and RDN; every DN below it follows.
    pub fn with_moved(&self, id: EntryId, parent: EntryId, rdn: &str, rdn_norm: &str) -> Self {
        let records = self.maps.nodes.values().map(|n| {
            if n.id == id {
                (id, parent, rdn.to_string(), rdn_norm.to_string())
            } else {
                (n.id, n.parent, n.rdn.clone(), n.rdn_norm.clone())
            }
        });
        let mut next = Skeleton::build(self.version + 1, records).0;
        // Built fresh, so the maps are this version's alone: no copy.
        Arc::make_mut(&mut next.maps).withdrawn = self.maps.withdrawn.clone();
        next
    }

    /// A copy in which the DN→ID record (`parent`, `rdn_norm`) → `id` resolves to nothing.
    pub fn with_withdrawn(&self, parent: EntryId, rdn_norm: &str, id: EntryId) -> Self {
        self.changed(|maps| {
            maps.withdrawn.entry(parent).or_default().insert(rdn_norm.to_string(), id);
        })
    }

    /// A copy in which (`parent`, `rdn_norm`) resolves through its DN→ID record again.
    pub fn without_withdrawn(&self, parent: EntryId, rdn_norm: &str) -> Self {
        self.changed(|maps| {
            if let Some(names) = maps.withdrawn.get_mut(&parent) {
                names.remove(rdn_norm);
                if names.is_empty() {
                    maps.withdrawn.remove(&parent);
                }
            }
        })
    }

    /// Whether the DN→ID record (`parent`, `rdn_norm`) → `id` is withdrawn: the entry it
    /// names is not there under that name.
    pub fn is_withdrawn(&self, parent: EntryId, rdn_norm: &str, id: EntryId) -> bool {
        !self.maps.withdrawn.is_empty()
            && self.maps.withdrawn.get(&parent).and_then(|names| names.get(rdn_norm)) == Some(&id)
    }

    /// Whether some DN→ID record is withdrawn (a cross-shard change failed half way).
    pub fn has_withdrawn(&self) -> bool {
        self.maps.withdrawn.values().any(|names| !names.is_empty())
    }

    pub fn get(&self, id: EntryId) -> Option<&ContainerNode> {
        self.maps.nodes.get(&id)
    }

    pub fn contains(&self, id: EntryId) -> bool {
        self.maps.nodes.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.maps.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.maps.nodes.is_empty()
    }

    pub fn child_named(&self, parent: EntryId, rdn_norm: &str) -> Option<EntryId> {
        self.maps.by_name.get(&parent).and_then(|names| names.get(rdn_norm)).copied()
    }

    /// Walks normalised names from the top (`names[0]` is the suffix) as far as containers go.
    pub fn resolve<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Resolution {
        let mut deepest = EntryId::ROOT;
        let mut matched = 0;
        for name in names {
            match self.maps.by_name.get(&deepest).and_then(|names| names.get(name)) {
                Some(&id) => {
                    deepest = id;
                    matched += 1;
                }
                None => break,
            }
        }
        Resolution { deepest, matched }
    }

    /// The DN of an entry whose parent is `parent`, as sent to clients.
    pub fn dn_of_child(&self, parent: EntryId, rdn: &str) -> String {
        match self.maps.nodes.get(&parent) {
            Some(node) => {
                let mut dn = String::with_capacity(rdn.len() + 1 + node.dn.len());
                dn.push_str(rdn);
                dn.push(',');
                dn.push_str(&node.dn);
                dn
            }
            None => rdn.to_string(),
        }
    }

    /// Whether an entry whose parent is `parent` lies within the subtree of `base` (the base
    /// itself is checked by the caller).
    pub fn parent_within(&self, mut parent: EntryId, base: EntryId) -> bool {
        // The depth of a real tree is small; the bound guards a corrupt cycle.
        for _ in 0..1024 {
            if parent == base {
                return true;
            }
            match self.maps.nodes.get(&parent) {
                Some(node) => parent = node.parent,
                None => return false,
            }
        }
        false
    }

    /// `base` (if a container) and every container below it.
    pub fn containers_under(&self, base: EntryId) -> Vec<EntryId> {
        let mut out = Vec::new();
        let mut stack = vec![base];
        while let Some(id) = stack.pop() {
            if self.maps.nodes.contains_key(&id) || id == EntryId::ROOT {
                out.push(id);
            }
            if let Some(children) = self.maps.child_containers.get(&id) {
                stack.extend(children.iter().copied());
            }
        }
        out
    }

    pub fn nodes(&self) -> impl Iterator<Item = &ContainerNode> {
        self.maps.nodes.values()
    }
}

/// Where the current skeleton version is published. Readers check the version number (a
/// read-only shared word) and re-load only when it changed.
pub struct SkeletonCell {
    current: ArcSwap<Skeleton>,
    version: AtomicU64,
}

impl SkeletonCell {
    pub fn new(initial: Skeleton) -> Self {
        let version = initial.version;
        Self { current: ArcSwap::from_pointee(initial), version: AtomicU64::new(version) }
    }

    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub fn load(&self) -> Arc<Skeleton> {
        self.current.load_full()
    }

    /// Publishes `next` atomically. Only the coordinator calls this.
    pub fn publish(&self, next: Skeleton) {
        let version = next.version;
        self.current.store(Arc::new(next));
        self.version.store(version, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Skeleton {
        let (s, orphans) = Skeleton::build(
            1,
            vec![
                (EntryId(2), EntryId(1), "ou=People".into(), "ou=people".into()),
                (EntryId(1), EntryId::ROOT, "dc=example,dc=com".into(), "dc=example,dc=com".into()),
                (EntryId(9), EntryId(77), "ou=lost".into(), "ou=lost".into()),
            ],
        );
        assert_eq!(orphans, vec![EntryId(9)]);
        s
    }

    #[test]
    fn builds_dns_and_resolves() {
        let s = sample();
        assert_eq!(&*s.get(EntryId(2)).unwrap().dn, "ou=People,dc=example,dc=com");
        let r = s.resolve(["dc=example,dc=com", "ou=people", "uid=x"]);
        assert_eq!(r, Resolution { deepest: EntryId(2), matched: 2 });
        assert_eq!(s.dn_of_child(EntryId(2), "uid=x"), "uid=x,ou=People,dc=example,dc=com");
        assert!(s.parent_within(EntryId(2), EntryId(1)));
        assert!(!s.parent_within(EntryId(1), EntryId(2)));
        assert_eq!(s.containers_under(EntryId(1)).len(), 2);
    }

    #[test]
    fn copy_on_write_changes() {
        let s = sample();
        let t = s.with_container(EntryId(3), EntryId(2), "cn=g", "cn=g");
        assert!(t.contains(EntryId(3)) && !s.contains(EntryId(3)));
        let moved = t.with_moved(EntryId(2), EntryId(1), "ou=Staff", "ou=staff");
        assert_eq!(&*moved.get(EntryId(3)).unwrap().dn, "cn=g,ou=Staff,dc=example,dc=com");
        let u = t.without_container(EntryId(3));
        assert!(!u.contains(EntryId(3)));
        assert_eq!(u.version, s.version + 2);
    }

    #[test]
    fn clones_share_one_copy_and_a_change_makes_one() {
        let s = sample();
        let published = s.clone();
        let worker = Arc::new(published.clone());
        assert!(Arc::ptr_eq(&s.maps, &worker.maps), "a worker's handle copied the maps");
        let t = s.with_container(EntryId(3), EntryId(2), "cn=g", "cn=g");
        assert!(!Arc::ptr_eq(&s.maps, &t.maps));
        assert!(!worker.contains(EntryId(3)), "a change reached a version already published");
        assert!(Arc::ptr_eq(&t.maps, &t.clone().maps));
    }

    #[test]
    fn withdrawn_names_hide_one_id_until_put_back() {
        let s = sample().with_withdrawn(EntryId(2), "uid=x", EntryId(7));
        assert!(s.is_withdrawn(EntryId(2), "uid=x", EntryId(7)));
        // Another entry that takes the name later is not hidden.
        assert!(!s.is_withdrawn(EntryId(2), "uid=x", EntryId(8)));
        let moved = s.with_moved(EntryId(2), EntryId(1), "ou=Staff", "ou=staff");
        assert!(moved.is_withdrawn(EntryId(2), "uid=x", EntryId(7)), "a move forgot a withdrawal");
        let back = moved.without_withdrawn(EntryId(2), "uid=x");
        assert!(!back.is_withdrawn(EntryId(2), "uid=x", EntryId(7)));
        assert_eq!(back.version, s.version + 2);
    }
}
