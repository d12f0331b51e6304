//! Clocks and the instant type every core uses.

use std::time::Duration;

/// A point in monotonic time, in microseconds since the clock's origin.
///
/// Unlike `std::time::Instant`, this is a plain value: the simulator can
/// create any instant, cores can derive `Hash`, and traces print the same on
/// every run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct Instant(u64);

impl Instant {
    /// The clock's origin.
    pub const ZERO: Instant = Instant(0);

    /// An instant `micros` microseconds after the origin.
    pub const fn from_micros(micros: u64) -> Self {
        Instant(micros)
    }

    /// An instant `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Self {
        Instant(millis.saturating_mul(1000))
    }

    /// Microseconds since the origin.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at the end of time.
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX)))
    }
}

impl std::ops::Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl std::fmt::Display for Instant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

/// Something that tells the time.
pub trait Clock {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The operating system's monotonic clock (CLOCK_MONOTONIC), read as
/// microseconds since that clock's own origin (boot): every process on a
/// host reads the same value at the same moment, so a daemon can hand a
/// local client an absolute deadline (a lock's `lease_until`) that the
/// client checks against its own reading ([`monotonic_now`]).
#[derive(Clone, Copy, Debug)]
pub struct RealClock {
    origin: std::time::Instant,
    /// CLOCK_MONOTONIC at `origin`, read just *before* it: every instant
    /// this clock returns is at most the true reading (by the nanoseconds
    /// between the two reads), so a deadline it hands out is never later,
    /// on the client's clock, than the daemon meant.
    origin_micros: u64,
}

impl RealClock {
    /// A clock reading CLOCK_MONOTONIC.
    pub fn new() -> Self {
        let origin_micros = monotonic_now().as_micros();
        RealClock { origin: std::time::Instant::now(), origin_micros }
    }

    /// The `std` instant corresponding to `at` (for sleeping until it).
    pub fn to_std(&self, at: Instant) -> std::time::Instant {
        let ahead = Duration::from_micros(at.as_micros().saturating_sub(self.origin_micros));
        self.origin.checked_add(ahead).unwrap_or(self.origin + Duration::from_secs(86_400 * 365 * 100))
    }
}

/// CLOCK_MONOTONIC now, in whole microseconds (rounded down): the clock
/// of [`RealClock`] and of the lock deadlines daemons hand their local
/// clients.
pub fn monotonic_now() -> Instant {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let micros = u64::try_from(t.tv_nsec).unwrap_or(0) / 1_000;
    Instant(secs.saturating_mul(1_000_000).saturating_add(micros))
}

impl Default for RealClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for RealClock {
    fn now(&self) -> Instant {
        let elapsed = u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX);
        Instant(self.origin_micros.saturating_add(elapsed))
    }
}

/// A clock that only moves when told to (the simulator's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SimClock {
    now: Instant,
}

impl SimClock {
    /// A clock standing at the origin.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock to `at`; never backwards.
    pub fn advance_to(&mut self, at: Instant) {
        self.now = self.now.max(at);
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instant_arithmetic_saturates() {
        let t = Instant::from_millis(5);
        assert_eq!(t.as_micros(), 5_000);
        assert_eq!((t + Duration::from_millis(2)).as_micros(), 7_000);
        assert_eq!(t.saturating_since(Instant::from_millis(9)), Duration::ZERO);
        assert_eq!(Instant::from_millis(9).saturating_since(t), Duration::from_millis(4));
        assert_eq!(Instant::from_micros(u64::MAX) + Duration::from_secs(1), Instant::from_micros(u64::MAX));
        assert_eq!(Instant::from_micros(1_500_000).to_string(), "1.500000s");
    }

    #[test]
    fn sim_clock_never_goes_back() {
        let mut c = SimClock::new();
        c.advance_to(Instant::from_millis(10));
        c.advance_to(Instant::from_millis(3));
        assert_eq!(c.now(), Instant::from_millis(10));
        c.advance(Duration::from_millis(1));
        assert_eq!(c.now(), Instant::from_millis(11));
    }

    #[test]
    fn real_clock_is_monotonic_and_maps_back() {
        let c = RealClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        assert!(c.to_std(b) >= c.to_std(a));
    }

    #[test]
    fn real_clock_reads_clock_monotonic() {
        // Two readers of one host agree: the daemon's clock never runs
        // ahead of another process's CLOCK_MONOTONIC.
        let c = RealClock::new();
        let ours = c.now();
        let theirs = monotonic_now();
        assert!(ours <= theirs, "{ours} > {theirs}");
        assert!(theirs.saturating_since(ours) < Duration::from_secs(1), "{ours} vs {theirs}");
    }
}
