//! Attribute uniqueness, as slapd's slapo-unique (`[[unique]]`): within a rule's subtrees,
//! no two entries (that match its filter) share a value of any of its attributes. Each
//! attribute is unique on its own: with `uid` and `mail`, an entry's mail may equal another
//! entry's uid.
//!
//! Checking is a search of the shards for the value (op::unique), so two writes of one
//! value on two shards could both find nothing and both commit. Each write therefore first
//! claims its values here: a claim is a lock per (rule, type, normalised value), taken in
//! one order, held until the write is answered. A second write of the same value waits,
//! then searches, and finds the first one's entry if it committed. Claims live only while
//! writes of constrained values are in flight (the map holds nothing else), and writes of
//! other values never meet: no lock is shared by unrelated writes.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use ferrodir_proto::filter::Filter;
use ferrodir_proto::NormDn;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// One `[[unique]]` table, resolved against the schema.
#[derive(Debug, Clone)]
pub struct UniqueRule {
    /// Canonical attribute type names (lowercase), each unique on its own.
    pub attrs: Vec<String>,
    /// The subtrees a value is unique within; never empty (the suffixes when not given).
    pub bases: Vec<NormDn>,
    /// Only entries that match it count, the written one and the others alike.
    pub filter: Option<Filter>,
}

impl UniqueRule {
    /// Whether `dn` lies within one of the rule's subtrees.
    pub fn covers(&self, dn: &NormDn) -> bool {
        self.bases.iter().any(|base| dn.is_descendant_or_self_of(base))
    }
}

/// What one claim is keyed by: the rule's index, the canonical type, the value's
/// equality key.
type ClaimKey = (usize, String, Vec<u8>);

/// How many stripes the claims are spread over: writes of unrelated values rarely meet on
/// one stripe's (short, never awaited) lock.
const STRIPES: usize = 64;

type Stripe = std::sync::Mutex<HashMap<ClaimKey, Arc<Mutex<()>>>>;

/// The configured rules and the claims of the writes in flight.
#[derive(Debug)]
pub struct Uniqueness {
    pub rules: Vec<UniqueRule>,
    /// Shared with the rules a reload puts in place ([`Uniqueness::with_rules`]): a write
    /// that started before it and one that starts after still meet on their claims.
    stripes: Arc<Vec<Stripe>>,
}

impl Default for Uniqueness {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

/// A write's claims, released when it is dropped (after the write was answered).
pub struct Claims<'a> {
    owner: &'a Uniqueness,
    held: Vec<(ClaimKey, OwnedMutexGuard<()>)>,
}

impl Uniqueness {
    pub fn new(rules: Vec<UniqueRule>) -> Self {
        Self { rules, stripes: Arc::new((0..STRIPES).map(|_| Stripe::default()).collect()) }
    }

    /// Other rules over the same claims (a reload).
    pub fn with_rules(&self, rules: Vec<UniqueRule>) -> Self {
        Self { rules, stripes: self.stripes.clone() }
    }

    fn stripe(&self, key: &ClaimKey) -> Option<std::sync::MutexGuard<'_, HashMap<ClaimKey, Arc<Mutex<()>>>>> {
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        let stripe = self.stripes.get(hasher.finish() as usize % STRIPES)?;
        Some(stripe.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Claims every key, in sorted order (two writes that share keys take them in the same
    /// order, so neither waits on the other while holding what it waits for).
    pub async fn claim(&self, mut keys: Vec<ClaimKey>) -> Claims<'_> {
        keys.sort();
        keys.dedup();
        let mut held = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(lock) = self.stripe(&key).map(|mut map| map.entry(key.clone()).or_default().clone())
            else {
                continue;
            };
            held.push((key, lock.lock_owned().await));
        }
        Claims { owner: self, held }
    }

    /// How many claims exist (tests: none are left behind).
    pub fn claims_held(&self) -> usize {
        self.stripes.iter().map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len()).sum()
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        for (key, guard) in self.held.drain(..) {
            drop(guard);
            // The map's own reference is the last one: nobody holds or waits for it.
            if let Some(mut map) = self.owner.stripe(&key) {
                if map.get(&key).is_some_and(|lock| Arc::strong_count(lock) == 1) {
                    map.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(value: &str) -> ClaimKey {
        (0, "mail".into(), value.as_bytes().to_vec())
    }

    #[tokio::test]
    async fn a_claim_waits_for_the_same_value_only_and_leaves_nothing_behind() {
        let unique = Arc::new(Uniqueness::new(Vec::new()));
        let first = unique.claim(vec![key("a"), key("b")]).await;
        // Another value is free.
        let other = unique.claim(vec![key("c")]).await;
        drop(other);
        let waiting = {
            let unique = unique.clone();
            tokio::spawn(async move {
                let _second = unique.claim(vec![key("b")]).await;
            })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the second claim of b waits for the first");
        drop(first);
        waiting.await.unwrap();
        assert_eq!(unique.claims_held(), 0);
    }
}
