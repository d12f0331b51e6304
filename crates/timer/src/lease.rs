//! Lease arithmetic under bounded clock drift.
//!
//! Clocks on different nodes run at rates that differ by at most ρ (given in
//! parts per million). A lease of `ttl` taken at local time `t` is therefore
//! trusted by its holder only until `t + ttl·(1 − ρ)` and honoured by its
//! grantor until `t + ttl·(1 + ρ)`: the holder stops acting on it before the
//! grantor could possibly think it over, whichever clock runs fast. ringd's
//! token lease, electd's grants and quorum lease and the lock services'
//! `max_hold_ms` all go through this one helper.
//!
//! Arithmetic is in integers (nanoseconds in `u128`, results in whole
//! microseconds). Each side rounds in its safe direction: the holder's end
//! rounds down (it gives up a little early), the grantor's end rounds up (it
//! waits a little longer).

use std::time::Duration;

use crate::Instant;

const PPM: u128 = 1_000_000;
const NANOS_PER_MICRO: u128 = 1_000;

/// A lease of `ttl` taken at local time `taken_at`, with clocks that drift
/// apart by at most `drift_ppm` parts per million.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// When the lease was taken, on the local clock of whoever holds this value.
    pub taken_at: Instant,
    /// The nominal duration of the lease.
    pub ttl: Duration,
    /// The clock-drift bound ρ, in parts per million.
    pub drift_ppm: u32,
}

impl Lease {
    /// A lease of `ttl` taken at `taken_at`, under drift bound `drift_ppm`.
    pub fn new(taken_at: Instant, ttl: Duration, drift_ppm: u32) -> Self {
        Lease { taken_at, ttl, drift_ppm }
    }

    /// The end of the lease for its holder: `taken_at + ttl·(1 − ρ)`,
    /// rounded down to the microsecond (and no later than `taken_at` if
    /// ρ ≥ 1).
    pub fn holder_valid_until(&self) -> Instant {
        self.taken_at + shrink(self.ttl, self.drift_ppm)
    }

    /// The end of the lease for its grantor, who must not grant it to anyone
    /// else before then: `taken_at + ttl·(1 + ρ)`, rounded up to the
    /// microsecond.
    pub fn grantor_honours_until(&self) -> Instant {
        let ns = self.ttl.as_nanos() * (PPM + u128::from(self.drift_ppm));
        let us = ns.div_ceil(PPM * NANOS_PER_MICRO);
        self.taken_at + Duration::from_micros(u64::try_from(us).unwrap_or(u64::MAX))
    }

    /// Whether the holder may still act on the lease at `now`.
    pub fn holder_valid(&self, now: Instant) -> bool {
        now < self.holder_valid_until()
    }

    /// Whether the grantor is free to grant again at `now`.
    pub fn grantor_bound_passed(&self, now: Instant) -> bool {
        now >= self.grantor_honours_until()
    }

    /// The longest lease a holder may take, by its own clock, so that it runs
    /// out at least `margin` before peers that suspect it after `suspect_after`
    /// of silence on their clocks could act: their `suspect_after` may be as
    /// short as `suspect_after·(1 − ρ)` on the holder's clock. Rounded down to
    /// the microsecond; zero if the margin eats it all.
    pub fn max_lease_for(suspect_after: Duration, drift_ppm: u32, margin: Duration) -> Duration {
        shrink(suspect_after, drift_ppm).saturating_sub(margin)
    }
}

/// `d·(1 − ρ)`, rounded down to whole microseconds, zero if ρ ≥ 1.
fn shrink(d: Duration, drift_ppm: u32) -> Duration {
    let factor = PPM.saturating_sub(u128::from(drift_ppm));
    let us = d.as_nanos() * factor / (PPM * NANOS_PER_MICRO);
    Duration::from_micros(u64::try_from(us).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn us(x: u64) -> Instant {
        Instant::from_micros(x)
    }

    #[test]
    fn no_drift_is_exact() {
        let l = Lease::new(us(1_000), Duration::from_millis(500), 0);
        assert_eq!(l.holder_valid_until(), us(501_000));
        assert_eq!(l.grantor_honours_until(), us(501_000));
    }

    #[test]
    fn drift_shrinks_holder_and_stretches_grantor() {
        // ρ = 1000 ppm = 0.1 %: 10 s becomes 9.99 s and 10.01 s.
        let l = Lease::new(us(0), Duration::from_secs(10), 1_000);
        assert_eq!(l.holder_valid_until(), us(9_990_000));
        assert_eq!(l.grantor_honours_until(), us(10_010_000));
    }

    #[test]
    fn rounding_goes_the_safe_way() {
        // 1001 µs · (1 ∓ 0.001) = 999.999 µs and 1002.001 µs.
        let l = Lease::new(us(10), Duration::from_micros(1_001), 1_000);
        assert_eq!(l.holder_valid_until(), us(10 + 999));
        assert_eq!(l.grantor_honours_until(), us(10 + 1_003));
        // Sub-microsecond ttl: the holder gets nothing, the grantor waits 1 µs.
        let l = Lease::new(us(10), Duration::from_nanos(1), 0);
        assert_eq!(l.holder_valid_until(), us(10));
        assert_eq!(l.grantor_honours_until(), us(11));
    }

    #[test]
    fn validity_edges() {
        let l = Lease::new(us(100), Duration::from_micros(1_000), 100_000); // ρ = 10 %
        assert_eq!(l.holder_valid_until(), us(1_000));
        assert_eq!(l.grantor_honours_until(), us(1_200));
        assert!(l.holder_valid(us(100)));
        assert!(l.holder_valid(us(999)));
        assert!(!l.holder_valid(us(1_000)));
        assert!(!l.grantor_bound_passed(us(1_199)));
        assert!(l.grantor_bound_passed(us(1_200)));
    }

    #[test]
    fn drift_of_one_or_more_leaves_holder_nothing() {
        let l = Lease::new(us(5), Duration::from_secs(1), 1_000_000);
        assert_eq!(l.holder_valid_until(), us(5));
        assert!(!l.holder_valid(us(5)));
        assert_eq!(l.grantor_honours_until(), us(2_000_005));
        let l = Lease::new(us(5), Duration::from_secs(1), u32::MAX);
        assert_eq!(l.holder_valid_until(), us(5));
    }

    #[test]
    fn saturates_at_end_of_time() {
        let l = Lease::new(us(u64::MAX - 10), Duration::MAX, u32::MAX);
        assert_eq!(l.holder_valid_until(), us(u64::MAX - 10));
        assert_eq!(l.grantor_honours_until(), us(u64::MAX));
    }

    #[test]
    fn max_lease_exact_values() {
        assert_eq!(Lease::max_lease_for(Duration::from_secs(3), 0, Duration::ZERO), Duration::from_secs(3));
        // 3 s · (1 − 0.0005) − 100 ms = 2.9985 s − 0.1 s.
        assert_eq!(
            Lease::max_lease_for(Duration::from_secs(3), 500, Duration::from_millis(100)),
            Duration::from_micros(2_898_500)
        );
        assert_eq!(Lease::max_lease_for(Duration::from_millis(50), 0, Duration::from_millis(60)), Duration::ZERO);
        assert_eq!(Lease::max_lease_for(Duration::from_secs(1), 2_000_000, Duration::ZERO), Duration::ZERO);
    }

    proptest! {
        #[test]
        fn holder_end_le_nominal_le_grantor_end(
            taken in 0u64..=u64::MAX,
            ttl_ns in 0u64..=u64::MAX,
            drift in 0u32..=2_000_000,
        ) {
            let ttl = Duration::from_nanos(ttl_ns);
            let l = Lease::new(us(taken), ttl, drift);
            let nominal_floor = us(taken) + Duration::from_micros(ttl_ns / 1_000);
            let nominal_ceil = us(taken) + Duration::from_micros(ttl_ns.div_ceil(1_000));
            prop_assert!(l.holder_valid_until() <= nominal_floor);
            prop_assert!(nominal_ceil <= l.grantor_honours_until());
            prop_assert!(l.holder_valid_until() <= l.grantor_honours_until());
            prop_assert!(l.holder_valid_until() >= us(taken));
        }

        #[test]
        fn max_lease_never_outlasts_suspicion(
            after_us in 0u64..10_000_000_000,
            drift in 0u32..=1_000_000,
            margin_us in 0u64..10_000_000,
        ) {
            let after = Duration::from_micros(after_us);
            let margin = Duration::from_micros(margin_us);
            let ttl = Lease::max_lease_for(after, drift, margin);
            prop_assert!(ttl <= after);
            prop_assert!(ttl == Duration::ZERO || ttl + margin <= after);
        }
    }
}
