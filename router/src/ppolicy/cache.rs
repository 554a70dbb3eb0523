//! A worker's copy of the password policies it read from the tree (`lookup`), valid while
//! nothing anywhere was written. Apart from `lookup`, which reads through the worker, so
//! that the worker can hold it without a circle.

use std::collections::HashMap;
use std::sync::Arc;

use crate::memberids::Token;
use crate::ppolicy::policy::Policy;

/// Policies kept per worker.
pub const POLICIES_MAX: usize = 64;

/// A worker's policies read from the tree, by the policy entry's normalised DN.
#[derive(Default)]
pub struct PolicyCache {
    token: Option<Token>,
    policies: HashMap<String, Option<Arc<Policy>>>,
}

impl PolicyCache {
    pub fn get(&mut self, token: Token, key: &str) -> Option<Option<Arc<Policy>>> {
        if self.token != Some(token) {
            self.token = Some(token);
            self.policies.clear();
            return None;
        }
        self.policies.get(key).cloned()
    }

    pub fn put(&mut self, token: Token, key: String, policy: Option<Arc<Policy>>) {
        if self.token != Some(token) {
            return;
        }
        if self.policies.len() >= POLICIES_MAX {
            self.policies.clear();
        }
        self.policies.insert(key, policy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_last_until_anything_moves_and_are_bounded() {
        let mut cache = PolicyCache::default();
        let t0 = Token { publications: 1, skeleton: 1 };
        assert!(cache.get(t0, "cn=p").is_none());
        cache.put(t0, "cn=p".into(), None);
        assert_eq!(cache.get(t0, "cn=p"), Some(None));
        let t1 = Token { publications: 2, skeleton: 1 };
        assert!(cache.get(t1, "cn=p").is_none());
        // Filled under a token that moved meanwhile: not kept.
        cache.put(t0, "cn=q".into(), None);
        assert!(cache.get(t1, "cn=q").is_none());
        for i in 0..(POLICIES_MAX + 5) {
            cache.put(t1, format!("cn={i}"), None);
        }
        assert!(cache.policies.len() <= POLICIES_MAX);
    }
}
