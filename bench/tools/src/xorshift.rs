//! A seeded xorshift64* generator (Vigna, "An experimental exploration of Marsaglia's
//! xorshift generators, scrambled", 2016): enough to spread requests over entries the same
//! way in every run, without a `rand` dependency.

#[derive(Debug, Clone)]
pub struct XorShift64 {
    state: u64,
}

impl XorShift64 {
    /// A generator for `stream` (e.g. a connection's index) under `seed`. The pair is run
    /// through SplitMix64 so that neighbouring streams start far apart and the state is
    /// never zero (zero is xorshift's one fixed point).
    pub fn new(seed: u64, stream: u64) -> XorShift64 {
        let mixed = splitmix64(seed ^ splitmix64(stream.wrapping_add(1)));
        XorShift64 { state: if mixed == 0 { 0x9e37_79b9_7f4a_7c15 } else { mixed } }
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..bound` (`bound` > 0). Plain modulo: the bias is below
    /// `bound / 2^64`, far under anything a benchmark could notice.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

fn splitmix64(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_per_seed_and_stream() {
        let draw = |seed, stream| {
            let mut rng = XorShift64::new(seed, stream);
            (0..8).map(|_| rng.below(10_000)).collect::<Vec<_>>()
        };
        assert_eq!(draw(1, 0), draw(1, 0));
        assert_ne!(draw(1, 0), draw(1, 1));
        assert_ne!(draw(1, 0), draw(2, 0));
    }

    #[test]
    fn covers_a_small_range_evenly() {
        let mut rng = XorShift64::new(42, 0);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[rng.below(10) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
    }
}
