//! A worker's cache of groups' resolved member ids, for memberOf searches.
//!
//! `(memberOf=G)` turns into the ids of G's member values, and resolving a thousand member
//! DNs (parse, normalise, a skeleton walk and a DN→ID lookup each) was about 40% of such a
//! search. The resolution depends on nothing but the directory's names and the group's
//! values, so a worker keeps it per group, valid while nothing anywhere was written:
//! filled under the count of batches every shard has published
//! (`shard::watermark::Hub::publications`, read before the data) and the skeleton's
//! version, and dropped whole as soon as either moves. A directory under writes gets
//! nothing from it and loses nothing by it; one mostly read (the usual case for group
//! lookups at login) resolves each group once.
//!
//! Bounded: at most [`GROUPS_MAX`] groups, only groups of at most [`MEMBERS_MAX`] resolved
//! members, and at most [`IDS_MAX`] ids in all (8 MB per worker). Who may read which group is decided after, on every search: the ids
//! are the same for everyone.

use std::collections::HashMap;
use std::rc::Rc;

use ferrodir_shard::EntryId;

/// Groups kept per worker.
pub const GROUPS_MAX: usize = 64;
/// Larger groups are resolved every time (their ids would crowd out the rest).
pub const MEMBERS_MAX: usize = 100_000;
/// Ids kept per worker, every group together.
pub const IDS_MAX: usize = 1_000_000;

/// What the cached resolutions were read under: every shard's published batches and the
/// skeleton's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Token {
    pub publications: u64,
    pub skeleton: u64,
}

#[derive(Default)]
pub struct MemberIds {
    token: Option<Token>,
    groups: HashMap<EntryId, Rc<[EntryId]>>,
    /// The ids held by `groups`, all together.
    ids: usize,
}

impl MemberIds {
    /// The ids resolved for `group` under `token`, if still good.
    pub fn get(&mut self, token: Token, group: EntryId) -> Option<Rc<[EntryId]>> {
        if self.token != Some(token) {
            self.token = Some(token);
            self.groups.clear();
            self.ids = 0;
            return None;
        }
        self.groups.get(&group).cloned()
    }

    /// Keeps `ids` for `group`, resolved from data read after `token` was taken.
    pub fn put(&mut self, token: Token, group: EntryId, ids: Rc<[EntryId]>) {
        if self.token != Some(token) {
            // Something moved while this group was resolved: what it read may be either.
            return;
        }
        if ids.len() > MEMBERS_MAX {
            return;
        }
        if let Some(old) = self.groups.remove(&group) {
            self.ids -= old.len();
        }
        // Evict arbitrary groups until this one fits both bounds.
        while self.groups.len() >= GROUPS_MAX || self.ids + ids.len() > IDS_MAX {
            let Some(victim) = self.groups.keys().next().copied() else { break };
            if let Some(old) = self.groups.remove(&victim) {
                self.ids -= old.len();
            }
        }
        self.ids += ids.len();
        self.groups.insert(group, ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u64) -> Rc<[EntryId]> {
        (0..n).map(EntryId).collect::<Vec<_>>().into()
    }

    #[test]
    fn resolutions_last_until_anything_moves() {
        let mut cache = MemberIds::default();
        let t0 = Token { publications: 7, skeleton: 1 };
        let g = EntryId(100);
        assert!(cache.get(t0, g).is_none());
        cache.put(t0, g, ids(3));
        assert_eq!(cache.get(t0, g).as_deref().map(<[EntryId]>::len), Some(3));
        // A write anywhere, or a new skeleton: everything is dropped.
        let t1 = Token { publications: 8, skeleton: 1 };
        assert!(cache.get(t1, g).is_none());
        assert!(cache.get(t1, g).is_none(), "dropped, not kept under the new token");
        cache.put(t1, g, ids(2));
        assert!(cache.get(Token { publications: 8, skeleton: 2 }, g).is_none());
        // Filled under a token that moved meanwhile: not kept.
        cache.put(t1, g, ids(2));
        assert!(cache.get(Token { publications: 8, skeleton: 2 }, g).is_none());
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut cache = MemberIds::default();
        let t = Token::default();
        assert!(cache.get(t, EntryId(0)).is_none());
        for g in 0..(GROUPS_MAX as u64 + 10) {
            cache.put(t, EntryId(g), ids(1));
        }
        assert_eq!(cache.groups.len(), GROUPS_MAX);
        cache.put(t, EntryId(9_999), ids(MEMBERS_MAX as u64 + 1));
        assert!(cache.get(t, EntryId(9_999)).is_none());
    }

    #[test]
    fn the_ids_kept_are_bounded_in_all() {
        let mut cache = MemberIds::default();
        let t = Token::default();
        assert!(cache.get(t, EntryId(0)).is_none());
        for g in 0..20u64 {
            cache.put(t, EntryId(g), ids(MEMBERS_MAX as u64));
        }
        assert!(cache.ids <= IDS_MAX);
        assert_eq!(cache.ids, cache.groups.values().map(|v| v.len()).sum::<usize>());
        assert!(cache.get(t, EntryId(19)).is_some(), "the last one put is kept");
    }
}
