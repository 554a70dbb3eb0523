//! A per-shard Bloom filter over equality index keys, so that an equality search from a
//! subtree base (`(uid=jdoe)` over the whole tree) is sent only to the shards that may hold
//! the value, not to all of them: its cost must not grow with the shard count.
//!
//! The owning shard sets bits when it stages a write (a superset of what is committed, so a
//! shard is never wrongly skipped); any worker reads them. Bits are never cleared: deletes
//! leave false positives, which cost an unneeded message, never a wrong answer. The filter
//! is rebuilt from the index at every start.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bits per shard filter: 2^23 bits (1 MiB), with [`HASHES`] hashes about 1% false
/// positives at 800k distinct values per shard.
pub const BITS_LOG2: u32 = 23;
const HASHES: u64 = 5;

pub struct EqBloom {
    words: Vec<AtomicU64>,
}

impl std::fmt::Debug for EqBloom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EqBloom({} bits)", 1u64 << BITS_LOG2)
    }
}

impl Default for EqBloom {
    fn default() -> Self {
        Self::new()
    }
}

impl EqBloom {
    pub fn new() -> Self {
        let words = (0..(1usize << BITS_LOG2) / 64).map(|_| AtomicU64::new(0)).collect();
        Self { words }
    }

    fn positions(key: &[u8]) -> impl Iterator<Item = usize> {
        // Two FNV-1a variants combined by double hashing (Kirsch–Mitzenmacher).
        let mut h1: u64 = 0xcbf2_9ce4_8422_2325;
        let mut h2: u64 = 0x8422_2325_cbf2_9ce4;
        for &byte in key {
            h1 = (h1 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
            h2 = (h2 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(5);
        }
        let mask = (1u64 << BITS_LOG2) - 1;
        (0..HASHES).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2 | 1)) & mask) as usize)
    }

    /// Records an equality posting prefix (`keys::eq_prefix(attr, value)`).
    pub fn insert(&self, key: &[u8]) {
        // Positions are masked to the filter's size, so every word exists.
        for bit in Self::positions(key) {
            if let Some(word) = self.words.get(bit / 64) {
                word.fetch_or(1 << (bit % 64), Ordering::Relaxed);
            }
        }
    }

    /// False only if no entry of this shard has ever held that value.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        // A word out of range (never, see `insert`) answers "maybe", the safe side.
        Self::positions(key).all(|bit| {
            let set = |word: &AtomicU64| word.load(Ordering::Relaxed) & (1 << (bit % 64)) != 0;
            self.words.get(bit / 64).is_none_or(set)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let bloom = EqBloom::new();
        for i in 0..10_000 {
            bloom.insert(format!("uid\0user{i}\0").as_bytes());
        }
        for i in 0..10_000 {
            assert!(bloom.may_contain(format!("uid\0user{i}\0").as_bytes()));
        }
        let false_positives =
            (0..10_000).filter(|i| bloom.may_contain(format!("uid\0other{i}\0").as_bytes())).count();
        assert!(false_positives < 50, "{false_positives}");
    }
}
