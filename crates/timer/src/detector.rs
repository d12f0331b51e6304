//! Failure detectors: decide from heartbeat arrival times whether a peer is
//! suspected.
//!
//! A core keeps one detector per watched peer, feeds it every sign of life
//! and arms a timer at [`FailureDetector::suspect_at`]; when that timer fires
//! it asks [`FailureDetector::is_suspected`]. Detectors are plain values
//! (no clock, no float fields) so cores that hold them stay `Hash + Eq`.

use std::collections::VecDeque;
use std::time::Duration;

use crate::Instant;

/// Turns heartbeat arrival times into suspicion of one peer.
pub trait FailureDetector {
    /// Records that a sign of life arrived at `now`.
    fn heartbeat(&mut self, now: Instant);
    /// Starts watching afresh at `now` (a new peer to watch): the grace
    /// period runs from `now`. Each detector documents what it keeps.
    fn reset(&mut self, now: Instant);
    /// Whether the peer is suspected at `now`.
    fn is_suspected(&self, now: Instant) -> bool;
    /// The instant from which it will be suspected if no heartbeat arrives
    /// (what the core arms its timer at).
    fn suspect_at(&self) -> Instant;
}

/// Whether this process itself stalled: a timer due at `due` fires at
/// `now`, more than `limit` late (SIGSTOP, a stalled VM). Whatever its peers
/// sent meanwhile waits unread, so the silence it measured across the stall
/// is its own: a core waits a little before acting on it (suspecting a
/// neighbour, counting a token lost), and reads its queued input first.
pub fn stalled(due: Instant, now: Instant, limit: Duration) -> bool {
    now.saturating_since(due) > limit
}

/// The classic fixed-timeout detector: suspect once `timeout` has passed
/// since the last heartbeat.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HeartbeatDetector {
    timeout: Duration,
    last: Instant,
}

impl HeartbeatDetector {
    /// A detector that starts watching at `now`, so the peer has `timeout`
    /// to show a first sign of life.
    pub fn new(timeout: Duration, now: Instant) -> Self {
        HeartbeatDetector { timeout, last: now }
    }

    /// The configured timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The latest heartbeat (or the instant watching started).
    pub fn last_heartbeat(&self) -> Instant {
        self.last
    }
}

impl FailureDetector for HeartbeatDetector {
    /// A heartbeat older than the latest one is ignored (messages reorder).
    fn heartbeat(&mut self, now: Instant) {
        self.last = self.last.max(now);
    }

    /// Forgets the previous peer entirely: the timeout runs from `now`, even
    /// if `now` is earlier than the last heartbeat seen.
    fn reset(&mut self, now: Instant) {
        self.last = now;
    }

    fn is_suspected(&self, now: Instant) -> bool {
        now >= self.suspect_at()
    }

    fn suspect_at(&self) -> Instant {
        self.last + self.timeout
    }
}

/// The φ accrual failure detector (Hayashibara et al. 2004), computed as
/// Akka's `PhiAccrualFailureDetector` does.
///
/// It keeps a window of recent heartbeat inter-arrival times, models them as
/// a normal distribution (standard deviation at least `min_std_dev`, mean
/// lengthened by `acceptable_pause`) and reports
/// φ = −log₁₀ P(next heartbeat arrives later than now). The peer is
/// suspected when φ reaches the threshold, so a peer with a jittery history
/// is given longer than one with a steady one.
///
/// Like Akka, the window starts with two synthetic intervals,
/// `first_interval ± first_interval / 4`, so the first real intervals are
/// judged against that estimate; the real ones push them out as the window
/// fills. The threshold is stored in thousandths so the type stays `Eq +
/// Hash`; φ itself is computed on demand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PhiAccrualDetector {
    intervals: VecDeque<u64>,
    max_samples: usize,
    threshold_milli: u32,
    min_std_dev: Duration,
    acceptable_pause: Duration,
    first_interval: Duration,
    /// The latest heartbeat, or the instant watching started.
    last: Instant,
    /// Whether `last` is a real heartbeat (only then does the next one make
    /// an interval).
    primed: bool,
}

impl PhiAccrualDetector {
    /// Default threshold: φ = 8.0 (Akka's default).
    pub const DEFAULT_THRESHOLD_MILLI: u32 = 8_000;
    /// Default window: the last 100 intervals.
    pub const DEFAULT_MAX_SAMPLES: usize = 100;
    /// Default floor on the standard deviation: 100 ms (Akka's default).
    pub const DEFAULT_MIN_STD_DEV: Duration = Duration::from_millis(100);

    /// A detector that expects heartbeats about every `first_interval` and
    /// starts watching at `now`, with the default threshold, window and
    /// standard-deviation floor and no acceptable pause. Adjust with the
    /// `with_*` methods before feeding it.
    pub fn new(first_interval: Duration, now: Instant) -> Self {
        let mut d = PhiAccrualDetector {
            intervals: VecDeque::new(),
            max_samples: Self::DEFAULT_MAX_SAMPLES,
            threshold_milli: Self::DEFAULT_THRESHOLD_MILLI,
            min_std_dev: Self::DEFAULT_MIN_STD_DEV,
            acceptable_pause: Duration::ZERO,
            first_interval,
            last: now,
            primed: false,
        };
        d.seed();
        d
    }

    /// Sets the threshold in thousandths of φ (8000 = φ 8.0).
    pub fn with_threshold_milli(mut self, threshold_milli: u32) -> Self {
        self.threshold_milli = threshold_milli;
        self
    }

    /// Sets how many intervals the window keeps (at least 2; smaller values
    /// are raised to 2).
    pub fn with_max_samples(mut self, max_samples: usize) -> Self {
        self.max_samples = max_samples.max(2);
        while self.intervals.len() > self.max_samples {
            self.intervals.pop_front();
        }
        self
    }

    /// Sets the floor on the standard deviation, so a perfectly regular
    /// history does not make the smallest delay look fatal.
    pub fn with_min_std_dev(mut self, min_std_dev: Duration) -> Self {
        self.min_std_dev = min_std_dev;
        self
    }

    /// Sets a pause (e.g. a GC or a slow disk) tolerated on top of the mean
    /// interval.
    pub fn with_acceptable_pause(mut self, acceptable_pause: Duration) -> Self {
        self.acceptable_pause = acceptable_pause;
        self
    }

    /// The threshold in thousandths of φ.
    pub fn threshold_milli(&self) -> u32 {
        self.threshold_milli
    }

    /// Intervals in the window (synthetic bootstrap ones included), in
    /// microseconds, oldest first.
    pub fn intervals(&self) -> impl Iterator<Item = u64> + '_ {
        self.intervals.iter().copied()
    }

    /// The latest heartbeat (or the instant watching started).
    pub fn last_heartbeat(&self) -> Instant {
        self.last
    }

    /// The suspicion level at `now`: 0 right after a heartbeat, growing
    /// without bound (up to infinity) as silence lasts.
    pub fn phi(&self, now: Instant) -> f64 {
        let (mean, std) = self.distribution();
        phi_of(micros(now.saturating_since(self.last)), mean, std)
    }

    fn seed(&mut self) {
        let mean = micros(self.first_interval);
        let dev = mean / 4;
        self.intervals.clear();
        self.intervals.push_back(mean - dev);
        self.intervals.push_back(mean + dev);
    }

    fn push(&mut self, interval: u64) {
        if self.intervals.len() >= self.max_samples {
            self.intervals.pop_front();
        }
        self.intervals.push_back(interval);
    }

    /// Mean (acceptable pause included) and standard deviation, in
    /// microseconds.
    fn distribution(&self) -> (f64, f64) {
        let n = self.intervals.len().max(1) as f64;
        let mean = self.intervals.iter().map(|x| *x as f64).sum::<f64>() / n;
        let var = self.intervals.iter().map(|x| (*x as f64 - mean).powi(2)).sum::<f64>() / n;
        // At least one microsecond, so φ never divides by zero.
        let std = var.sqrt().max(micros(self.min_std_dev) as f64).max(1.0);
        (mean + micros(self.acceptable_pause) as f64, std)
    }

    fn threshold(&self) -> f64 {
        f64::from(self.threshold_milli) / 1000.0
    }
}

impl FailureDetector for PhiAccrualDetector {
    /// Records the interval since the previous heartbeat. A heartbeat not
    /// later than the latest one (reordered or duplicated) is ignored.
    fn heartbeat(&mut self, now: Instant) {
        if now < self.last || (self.primed && now == self.last) {
            return;
        }
        if self.primed {
            self.push(micros(now.saturating_since(self.last)));
        }
        self.last = now;
        self.primed = true;
    }

    /// Clears the history back to the bootstrap estimate (a new peer's
    /// intervals owe nothing to the old one's) and gives it the grace from
    /// `now`; its first heartbeat then starts the interval count.
    fn reset(&mut self, now: Instant) {
        self.seed();
        self.last = now;
        self.primed = false;
    }

    fn is_suspected(&self, now: Instant) -> bool {
        self.phi(now) >= self.threshold()
    }

    /// Found by binary search over microseconds of silence, φ being
    /// monotonic in it. The search is bounded at mean + 64 standard
    /// deviations, where φ is already infinite.
    fn suspect_at(&self) -> Instant {
        let (mean, std) = self.distribution();
        let threshold = self.threshold();
        let bound = mean + 64.0 * std;
        let mut hi = if bound >= u64::MAX as f64 { u64::MAX } else { bound.ceil() as u64 };
        if phi_of(hi, mean, std) < threshold {
            // Unreachable for any finite threshold; suspect at the bound.
            return self.last + Duration::from_micros(hi);
        }
        let mut lo = 0u64;
        if phi_of(lo, mean, std) >= threshold {
            return self.last;
        }
        // Invariant: φ(lo) < threshold <= φ(hi).
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if phi_of(mid, mean, std) >= threshold {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        self.last + Duration::from_micros(hi)
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// φ after `elapsed` µs of silence, for normally distributed intervals with
/// the given mean and standard deviation (µs). Uses Akka's logistic
/// approximation of the normal CDF; the two branches are the same formula,
/// arranged to stay accurate (and free of ∞/∞) on either side of the mean.
fn phi_of(elapsed: u64, mean: f64, std: f64) -> f64 {
    let t = elapsed as f64;
    let y = (t - mean) / std;
    let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
    if t > mean {
        -(e / (1.0 + e)).log10()
    } else {
        -(1.0 - 1.0 / (1.0 + e)).log10()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(x: u64) -> Instant {
        Instant::from_millis(x)
    }

    #[test]
    fn heartbeat_detector_fixed_timeout() {
        let mut d = HeartbeatDetector::new(Duration::from_millis(500), ms(1_000));
        assert_eq!(d.timeout(), Duration::from_millis(500));
        assert_eq!(d.suspect_at(), ms(1_500));
        assert!(!d.is_suspected(ms(1_499)));
        assert!(d.is_suspected(ms(1_500)));
        d.heartbeat(ms(1_200));
        assert_eq!(d.last_heartbeat(), ms(1_200));
        assert_eq!(d.suspect_at(), ms(1_700));
        assert!(!d.is_suspected(ms(1_500)));
        assert!(!d.is_suspected(Instant::from_micros(1_699_999)));
        assert!(d.is_suspected(ms(1_700)));
    }

    #[test]
    fn heartbeat_detector_ignores_old_heartbeats() {
        let mut d = HeartbeatDetector::new(Duration::from_millis(100), ms(0));
        d.heartbeat(ms(50));
        d.heartbeat(ms(20));
        assert_eq!(d.suspect_at(), ms(150));
        d.heartbeat(ms(50));
        assert_eq!(d.suspect_at(), ms(150));
    }

    #[test]
    fn heartbeat_detector_reset_starts_afresh() {
        let mut d = HeartbeatDetector::new(Duration::from_millis(100), ms(0));
        d.heartbeat(ms(500));
        d.reset(ms(300));
        assert_eq!(d.suspect_at(), ms(400));
        assert_eq!(d, HeartbeatDetector::new(Duration::from_millis(100), ms(300)));
    }

    #[test]
    fn heartbeat_detector_saturates_at_end_of_time() {
        let end = Instant::from_micros(u64::MAX);
        let d = HeartbeatDetector::new(Duration::from_secs(1), end);
        assert_eq!(d.suspect_at(), end);
    }

    /// A detector fed `n` heartbeats, the k-th at `start + k·period ± jitter`.
    fn fed(d: &mut PhiAccrualDetector, start: u64, period_ms: u64, jitter_ms: &[u64], n: usize) -> Instant {
        let mut t = ms(start);
        for k in 0..n {
            let j = jitter_ms[k % jitter_ms.len()];
            t = ms(start + k as u64 * period_ms + j);
            d.heartbeat(t);
        }
        t
    }

    #[test]
    fn phi_regular_heartbeats() {
        let mut d = PhiAccrualDetector::new(Duration::from_millis(100), ms(0));
        let last = fed(&mut d, 0, 100, &[0, 3, 1, 4, 2], 200);
        assert_eq!(d.intervals().count(), PhiAccrualDetector::DEFAULT_MAX_SAMPLES);
        assert!(d.phi(last) < 0.5, "{}", d.phi(last));
        assert!(!d.is_suspected(last + Duration::from_millis(150)));
        assert!(d.is_suspected(last + Duration::from_secs(1)));
        assert!(d.phi(last + Duration::from_millis(150)) < d.phi(last + Duration::from_millis(300)));
        // The suspicion point lies between the two.
        let at = d.suspect_at();
        assert!(at > last + Duration::from_millis(150) && at < last + Duration::from_secs(1), "{at}");
    }

    #[test]
    fn phi_suspect_at_matches_is_suspected() {
        let mut d = PhiAccrualDetector::new(Duration::from_millis(100), ms(0));
        let last = fed(&mut d, 0, 100, &[0, 7, 2], 50);
        let at = d.suspect_at();
        assert!(at > last);
        assert!(d.is_suspected(at));
        assert!(!d.is_suspected(Instant::from_micros(at.as_micros() - 1)));
        assert!(d.phi(at) >= 8.0);
    }

    #[test]
    fn phi_irregular_history_widens_tolerance() {
        let small_floor = Duration::from_millis(1);
        let mut steady = PhiAccrualDetector::new(Duration::from_millis(100), ms(0)).with_min_std_dev(small_floor);
        let mut jittery = steady.clone();
        let a = fed(&mut steady, 0, 100, &[0], 101);
        // Same mean interval, alternating 50 ms and 150 ms.
        let b = fed(&mut jittery, 0, 100, &[0, 50], 101);
        assert_eq!(a, b);
        assert!(jittery.suspect_at() > steady.suspect_at());
        let probe = a + Duration::from_millis(200);
        assert!(steady.is_suspected(probe));
        assert!(!jittery.is_suspected(probe));
    }

    #[test]
    fn phi_bootstrap_before_any_heartbeat() {
        let d = PhiAccrualDetector::new(Duration::from_millis(100), ms(1_000));
        assert_eq!(d.intervals().collect::<Vec<_>>(), vec![75_000, 125_000]);
        assert_eq!(d.phi(ms(1_000)), d.phi(ms(900)), "time before the start counts as no silence");
        assert!(!d.is_suspected(ms(1_150)));
        assert!(d.is_suspected(ms(3_000)));
        // The first heartbeat only primes; the second makes an interval.
        let mut d = d;
        d.heartbeat(ms(1_030));
        assert_eq!(d.intervals().count(), 2);
        d.heartbeat(ms(1_130));
        assert_eq!(d.intervals().collect::<Vec<_>>(), vec![75_000, 125_000, 100_000]);
    }

    #[test]
    fn phi_ignores_reordered_and_duplicate_heartbeats() {
        let mut d = PhiAccrualDetector::new(Duration::from_millis(100), ms(0));
        d.heartbeat(ms(100));
        d.heartbeat(ms(200));
        let before = d.clone();
        d.heartbeat(ms(200));
        d.heartbeat(ms(150));
        assert_eq!(d, before);
    }

    #[test]
    fn phi_window_is_bounded() {
        let mut d = PhiAccrualDetector::new(Duration::from_millis(100), ms(0)).with_max_samples(3);
        fed(&mut d, 0, 10, &[0], 10);
        assert_eq!(d.intervals().collect::<Vec<_>>(), vec![10_000, 10_000, 10_000]);
        let d = d.with_max_samples(0);
        assert_eq!(d.intervals().count(), 2);
    }

    #[test]
    fn phi_reset_clears_history() {
        let mut d = PhiAccrualDetector::new(Duration::from_millis(100), ms(0));
        fed(&mut d, 0, 10, &[0], 20);
        d.reset(ms(5_000));
        assert_eq!(d, PhiAccrualDetector::new(Duration::from_millis(100), ms(5_000)));
        assert_eq!(d.last_heartbeat(), ms(5_000));
    }

    #[test]
    fn phi_threshold_and_pause_move_suspicion() {
        let base = PhiAccrualDetector::new(Duration::from_millis(100), ms(0));
        let low = base.clone().with_threshold_milli(1_000);
        let high = base.clone().with_threshold_milli(12_000);
        assert_eq!(high.threshold_milli(), 12_000);
        assert!(low.suspect_at() < base.suspect_at());
        assert!(base.suspect_at() < high.suspect_at());
        let paused = base.clone().with_acceptable_pause(Duration::from_secs(3));
        assert_eq!(paused.suspect_at(), base.suspect_at() + Duration::from_secs(3));
        // Threshold 0: suspected from the start.
        let zero = base.with_threshold_milli(0);
        assert_eq!(zero.suspect_at(), ms(0));
        assert!(zero.is_suspected(ms(0)));
    }

    #[test]
    fn phi_huge_threshold_is_bounded() {
        let d = PhiAccrualDetector::new(Duration::from_millis(100), ms(0)).with_threshold_milli(u32::MAX);
        let at = d.suspect_at();
        assert!(at < ms(100_000), "{at}");
        assert!(d.is_suspected(at));
    }

    #[test]
    fn detectors_are_usable_as_trait_objects() {
        let mut ds: Vec<Box<dyn FailureDetector>> = vec![
            Box::new(HeartbeatDetector::new(Duration::from_millis(300), ms(0))),
            Box::new(PhiAccrualDetector::new(Duration::from_millis(100), ms(0))),
        ];
        for d in &mut ds {
            d.heartbeat(ms(100));
            assert!(!d.is_suspected(ms(150)));
            assert!(d.is_suspected(ms(100_000)));
        }
    }

    proptest! {
        #[test]
        fn phi_suspect_at_is_the_boundary(
            gaps in proptest::collection::vec(1u64..500_000, 0..30),
            threshold in 0u32..20_000,
            floor in 0u64..200_000,
        ) {
            let mut d = PhiAccrualDetector::new(Duration::from_millis(100), ms(0))
                .with_threshold_milli(threshold)
                .with_min_std_dev(Duration::from_micros(floor));
            let mut t = 0u64;
            for g in gaps {
                t += g;
                d.heartbeat(Instant::from_micros(t));
            }
            let at = d.suspect_at();
            prop_assert!(at >= d.last_heartbeat());
            prop_assert!(d.is_suspected(at));
            if at > d.last_heartbeat() {
                prop_assert!(!d.is_suspected(Instant::from_micros(at.as_micros() - 1)));
            }
        }

        #[test]
        fn phi_is_monotonic_in_silence(a in 0u64..10_000_000, b in 0u64..10_000_000) {
            let d = PhiAccrualDetector::new(Duration::from_millis(100), ms(0));
            let (lo, hi) = (a.min(b), a.max(b));
            prop_assert!(d.phi(Instant::from_micros(lo)) <= d.phi(Instant::from_micros(hi)));
        }
    }
}
