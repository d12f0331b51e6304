//! The only randomness a core may use: a value seeded by its driver.

/// A small deterministic random number generator (SplitMix64) that cores
/// keep as plain state: it is `Clone + Hash + Eq`, so a core holding one can
/// still be model-checked, and the same seed gives the same draws on every
/// machine. Not for cryptography.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SeededRng {
    state: u64,
}

impl SeededRng {
    /// A generator whose whole future is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        SeededRng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value uniform in `lo..=hi` (`lo` if the range is empty).
    pub fn range_inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        let span = hi - lo;
        if span == u64::MAX {
            return self.next_u64();
        }
        // Rejection sampling keeps the draw unbiased.
        let n = span + 1;
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let x = self.next_u64();
            if x < zone {
                return lo + x % n;
            }
        }
    }

    /// A duration uniform in `lo..=hi`, at microsecond resolution.
    pub fn duration_between(&mut self, lo: std::time::Duration, hi: std::time::Duration) -> std::time::Duration {
        let lo_us = u64::try_from(lo.as_micros()).unwrap_or(u64::MAX);
        let hi_us = u64::try_from(hi.as_micros()).unwrap_or(u64::MAX);
        std::time::Duration::from_micros(self.range_inclusive(lo_us, hi_us))
    }

    /// True with probability `p` (clamped to 0..=1).
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        // 53 random bits make a uniform f64 in [0, 1).
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn same_seed_same_draws() {
        let mut a = SeededRng::new(42);
        let mut b = SeededRng::new(42);
        let xs: Vec<u64> = (0..16).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..16).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut c = SeededRng::new(43);
        assert_ne!(xs[0], c.next_u64());
    }

    #[test]
    fn known_first_value_is_stable_across_platforms() {
        // SplitMix64 reference output for seed 0.
        assert_eq!(SeededRng::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn ranges_stay_inside_and_cover() {
        let mut r = SeededRng::new(7);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let x = r.range_inclusive(10, 14);
            assert!((10..=14).contains(&x));
            seen[(x - 10) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(r.range_inclusive(9, 3), 9);
        let d = r.duration_between(Duration::from_millis(1), Duration::from_millis(2));
        assert!(d >= Duration::from_millis(1) && d <= Duration::from_millis(2));
    }

    #[test]
    fn chance_extremes_and_rate() {
        let mut r = SeededRng::new(1);
        assert!(!r.chance(0.0));
        assert!(r.chance(1.0));
        let hits = (0..10_000).filter(|_| r.chance(0.3)).count();
        assert!((2_700..3_300).contains(&hits), "{hits}");
    }
}
