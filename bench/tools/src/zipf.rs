//! Which entry a request names: uniformly over a range, or Zipf-distributed over it (issue
//! #28: a real directory has a few hot entries, most are rarely read).
//!
//! [`Zipf`] draws a rank k in 1..=n with probability proportional to 1/k^s, by
//! rejection-inversion (W. Hörmann and G. Derflinger, "Rejection-inversion to generate
//! variates from monotone discrete distributions", ACM TOMACS 6(3), 1996): constant memory
//! and a few floating-point operations per draw whatever n is, so 10M entries need no
//! table. [`Picker`] maps rank k to entry `start + ((k - 1) * stride) mod n` with a stride
//! near n/φ coprime with n: a permutation of the range, so that the hot entries are spread
//! over the whole id range (and over both servers' pages and shards) instead of being
//! user0000000..user0000009, which would sit in the same few pages.

use std::ops::Range;

use crate::xorshift::XorShift64;

/// Zipf's law over ranks 1..=n with exponent `s` (s = 0: uniform; s = 1: the classic law).
#[derive(Debug, Clone)]
pub struct Zipf {
    n: f64,
    s: f64,
    /// H(1.5) - h(1): the upper end of the inverted integral, where rank 1 begins.
    h_x1: f64,
    /// H(n + 0.5): its lower end.
    h_n: f64,
    /// Draws with k - x at most this are accepted without the second test.
    squeeze: f64,
}

impl Zipf {
    /// `n` ≥ 1 ranks, exponent `s` ≥ 0 (finite).
    pub fn new(n: u64, s: f64) -> Option<Zipf> {
        if n == 0 || !s.is_finite() || s < 0.0 {
            return None;
        }
        let mut zipf = Zipf { n: n as f64, s, h_x1: 0.0, h_n: 0.0, squeeze: 0.0 };
        zipf.h_x1 = zipf.big_h(1.5) - 1.0;
        zipf.h_n = zipf.big_h(zipf.n + 0.5);
        zipf.squeeze = 2.0 - zipf.big_h_inv(zipf.big_h(2.5) - zipf.h(2.0));
        Some(zipf)
    }

    /// A rank in 1..=n.
    pub fn sample(&self, rng: &mut XorShift64) -> u64 {
        loop {
            let uniform = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
            let u = self.h_n + uniform * (self.h_x1 - self.h_n);
            let x = self.big_h_inv(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.squeeze || u >= self.big_h(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    /// h(x) = x^-s, the density the ranks follow.
    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// H(x) = ∫ h = (x^(1-s) - 1) / (1 - s), which is ln x at s = 1; written so that it is
    /// continuous through s = 1.
    fn big_h(&self, x: f64) -> f64 {
        let log_x = x.ln();
        expm1_over_x((1.0 - self.s) * log_x) * log_x
    }

    fn big_h_inv(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.s)).max(-1.0);
        (ln1p_over_x(t) * y).exp()
    }
}

/// (e^x - 1) / x, 1 at x = 0.
fn expm1_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * (0.5 + x / 6.0)
    }
}

/// ln(1 + x) / x, 1 at x = 0.
fn ln1p_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x / 3.0)
    }
}

/// How a request's entry number is chosen.
#[derive(Debug, Clone)]
pub struct Picker {
    range: Range<u64>,
    zipf: Option<(Zipf, u64)>,
}

impl Picker {
    /// Uniform over `range` (not empty).
    pub fn uniform(range: Range<u64>) -> Picker {
        Picker { range, zipf: None }
    }

    /// Zipf with exponent `s` over `range` (not empty), hot entries spread (module doc).
    pub fn zipf(range: Range<u64>, s: f64) -> Option<Picker> {
        let span = range.end.checked_sub(range.start).filter(|&span| span > 0)?;
        let zipf = Zipf::new(span, s)?;
        let mut stride = ((span as f64) * 0.618_033_988_749_895) as u64;
        stride = stride.max(1);
        while gcd(stride, span) != 1 {
            stride += 1;
        }
        Some(Picker { range, zipf: Some((zipf, stride % span.max(1))) })
    }

    pub fn pick(&self, rng: &mut XorShift64) -> u64 {
        let span = self.range.end - self.range.start;
        match &self.zipf {
            None => self.range.start + rng.below(span),
            Some((zipf, stride)) => {
                let rank = zipf.sample(rng) - 1;
                self.range.start + ((u128::from(rank) * u128::from(*stride)) % u128::from(span)) as u64
            }
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: u64, s: f64, draws: u32) -> Vec<u32> {
        let zipf = Zipf::new(n, s).unwrap();
        let mut rng = XorShift64::new(7, 0);
        let mut counts = vec![0u32; n as usize + 1];
        for _ in 0..draws {
            let k = zipf.sample(&mut rng);
            assert!((1..=n).contains(&k), "{k}");
            counts[k as usize] += 1;
        }
        counts
    }

    #[test]
    fn zipf_one_follows_one_over_k() {
        // P(k) = 1 / (k * H_n); H_1000 = 7.4855.
        let draws = 400_000;
        let c = counts(1000, 1.0, draws);
        let harmonic: f64 = (1..=1000).map(|k| 1.0 / k as f64).sum();
        for k in [1usize, 2, 3, 10, 100] {
            let expected = f64::from(draws) / (k as f64 * harmonic);
            let got = f64::from(c[k]);
            assert!((got - expected).abs() < 0.05 * expected + 30.0, "rank {k}: {got} vs {expected}");
        }
        // The ten hottest of 1,000 entries take about 39% of the draws.
        let top10: u32 = c[1..=10].iter().sum();
        assert!((0.37..0.41).contains(&(f64::from(top10) / f64::from(draws))), "{top10}");
    }

    #[test]
    fn zipf_zero_is_uniform_and_other_exponents_work() {
        let c = counts(10, 0.0, 100_000);
        assert!(c[1..].iter().all(|&n| (9_000..11_000).contains(&n)), "{c:?}");
        let c = counts(50, 1.5, 100_000);
        assert!(c[1] > c[2] && c[2] > c[4] && c[4] > c[50], "{c:?}");
        assert_eq!(counts(1, 1.0, 100)[1], 100);
        assert!(
            Zipf::new(0, 1.0).is_none() && Zipf::new(5, -1.0).is_none() && Zipf::new(5, f64::NAN).is_none()
        );
    }

    #[test]
    fn picker_permutes_the_range_and_stays_in_it() {
        for (range, s) in [(0..1000u64, 1.0), (5..6, 1.0), (100..10_100, 0.5)] {
            let picker = Picker::zipf(range.clone(), s).unwrap();
            let (_, stride) = picker.zipf.clone().unwrap();
            let span = range.end - range.start;
            let mut seen: Vec<u64> = (0..span).map(|rank| range.start + (rank * stride) % span).collect();
            seen.sort_unstable();
            assert_eq!(seen, range.clone().collect::<Vec<_>>(), "a permutation");
            let mut rng = XorShift64::new(1, 0);
            for _ in 0..10_000 {
                assert!(range.contains(&picker.pick(&mut rng)));
            }
        }
        // The hottest entries are not neighbours.
        let picker = Picker::zipf(0..1_000_000, 1.0).unwrap();
        let (_, stride) = picker.zipf.clone().unwrap();
        assert!(stride > 100_000 && stride < 900_000, "{stride}");
        assert!(Picker::zipf(3..3, 1.0).is_none());
    }
}
