//! The core's settings ([`TwConfig`]), their validation and the error
//! that names what is wrong ([`TwError`]).

use std::time::Duration;

use durable::promise;
use ftcore::rules::{Rules, TestStart};
use lockservice::lease::LeaseConfig;

use super::TwRule;

/// Protocol settings (derived from the daemon's config; checked by
/// [`TwConfig::validate`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TwConfig {
    /// `ring_timeout_ms`: a hand-off unconfirmed this long is retransmitted.
    pub ring_timeout: Duration,
    /// `max_retransmits` (r).
    pub max_retransmits: u32,
    /// `max_hold_ms`: every visit ends this long after the token arrived.
    pub max_hold: Duration,
    /// `token_min_hold_ms`: an idle process holds the token this long.
    pub token_min_hold: Duration,
    /// δ, `max_datagram_delay_ms`.
    pub max_delay: Duration,
    /// `bypass_after_ms`: a successor silent this long after the last
    /// transmission to it is bypassed.
    pub bypass_after: Duration,
    /// W, `token_lost_after_ms`: no token seen this long starts a Claim;
    /// also the promise window and a Claim's deadline.
    pub token_lost_after: Duration,
    /// ρ in parts per million.
    pub drift_ppm: u32,
    /// `timing.lease_ms`: a grant's lease (reliability.md, Pauses and
    /// leases); renewed every third of it.
    pub lease: Duration,
    /// `timing.suspect_after_ms`: only checked against the lease
    /// (`lease·(1+ρ) + lease/3 ≤ suspect_after·(1−ρ)`); tokenwatchd's own
    /// suspicion (`bypass_after`, `token_lost_after`) is the token's.
    pub suspect_after: Duration,
    /// A process whose Claim found no other live process may keep the
    /// token alone.
    pub allow_minority: bool,
    /// The local queue.
    pub max_queue: usize,
    /// `tpc_reserve`: how far ahead of the counter in use the stored one
    /// is set (1: exactly the one in use, a state write per pass; K: a
    /// write every K counts). A restarted process cannot tell a token of
    /// its stored epoch with a count in the last reserved block from a
    /// stale one, and answers it `Stale`: the ring regenerates once.
    pub tpc_reserve: u64,
    /// The (safety) rules: all on, except in a mutation test
    /// (`ftcore/mutations`; `tests/safety.rs`).
    pub rules: Rules<TwRule>,
    /// The least count a regenerated token counts on from: its tpc is
    /// `max(max_tpc, first_tpc) + 1`, or 1 when that would overflow: 0,
    /// unless a scenario starts it near `u64::MAX` to reach the overflow
    /// rule (a [`TestStart`]: only test builds can set it).
    pub first_tpc: TestStart<u64>,
}

/// What a config file that sets none of these keys gives on a cluster of
/// [`runtime::config::DEFAULT_CLUSTER_SIZE`] (`bypass_after` and
/// `token_lost_after` derived): each default is written once, in
/// [`crate::config::TokenwatchdConfig`] and [`runtime::config::Timing`].
impl Default for TwConfig {
    fn default() -> Self {
        crate::config::TokenwatchdConfig::default()
            .core_with(&runtime::config::Timing::default(), runtime::config::DEFAULT_CLUSTER_SIZE)
    }
}

impl TwConfig {
    /// The least `token_lost_after` for `n` processes: `max_hold +
    /// N·(token_min_hold + hop) + r·ring_timeout + ⌈N/2⌉·bypass_after`,
    /// hop = δ + 1 ms (tokenwatchd.md).
    pub fn token_lost_bound(&self, n: usize) -> Duration {
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        let hop = self.max_delay + Duration::from_millis(1);
        self.max_hold
            .saturating_add((self.token_min_hold + hop).saturating_mul(n32))
            .saturating_add(self.ring_timeout.saturating_mul(self.max_retransmits))
            .saturating_add(self.bypass_after.saturating_mul(n32.div_ceil(2)))
    }

    /// The most the random part of the token-lost deadline adds to W
    /// (`token_lost_after / 2`): a process whose token last showed itself
    /// at `t` claims between `t + W` and `t + W + W/2`. The part is drawn
    /// anew each time, so that processes that lost the token together do
    /// not all claim at once.
    pub fn lost_jitter_max(&self) -> Duration {
        self.token_lost_after / 2
    }

    /// What the promise component is set up with: W is the promise window
    /// and a Claim's deadline, and with the lease it makes the restart
    /// window (`max(W, lease)·(1+ρ)`).
    pub fn promise_setup(&self) -> promise::Setup {
        promise::Setup {
            window: self.token_lost_after,
            lease: self.lease,
            drift_ppm: self.drift_ppm,
            promise_window: self.rules.on(TwRule::PromiseWindow),
            rules: promise::rules_from(self.rules, |x| match x {
                TwRule::RestartWindow => Some(promise::PromiseRule::RestartWindow),
                TwRule::TiesRefused => Some(promise::PromiseRule::TiesRefused),
                _ => None,
            }),
        }
    }

    /// The lease settings for `n` processes.
    pub fn lease_config(&self, n: usize) -> LeaseConfig {
        LeaseConfig { lease: self.lease, drift_ppm: self.drift_ppm, sites: n, lossy: true }
    }

    /// Checks the settings for `n` processes: the one place they are
    /// validated (the daemon's `--check-config` calls it too).
    pub fn validate(&self, n: usize) -> Result<(), TwError> {
        if self.max_hold.is_zero() {
            return Err(TwError::ZeroMaxHold);
        }
        if self.ring_timeout.is_zero() {
            return Err(TwError::ZeroRingTimeout);
        }
        let need = self.max_hold + self.ring_timeout + self.max_delay;
        if self.bypass_after < need {
            return Err(TwError::BypassTooSoon { need });
        }
        let need = self.token_lost_bound(n);
        if self.token_lost_after <= need {
            return Err(TwError::LostTooSoon { need });
        }
        if self.max_queue == 0 {
            return Err(TwError::ZeroQueue);
        }
        if !(1..=MAX_TPC_RESERVE).contains(&self.tpc_reserve) {
            return Err(TwError::Reserve(self.tpc_reserve));
        }
        if self.lease.is_zero() {
            return Err(TwError::LeaseTooLong("lease_ms must be above 0".into()));
        }
        // reliability.md: a lease and one renewal period end before any
        // peer could suspect the process.
        self.lease_config(n).check_against(self.suspect_after).map_err(TwError::LeaseTooLong)?;
        Ok(())
    }
}

/// The largest `tpc_reserve`.
pub const MAX_TPC_RESERVE: u64 = 1_000_000;

/// Why a process cannot start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TwError {
    /// `max_hold_ms` is 0.
    #[error("max_hold_ms must be above 0 (every visit ends)")]
    ZeroMaxHold,
    /// `ring_timeout_ms` is 0.
    #[error("ring_timeout_ms must be above 0")]
    ZeroRingTimeout,
    /// `bypass_after_ms` below `max_hold + ring_timeout + δ`.
    #[error("bypass_after_ms must be at least max_hold_ms + ring_timeout_ms + max_datagram_delay_ms = {need:?}")]
    BypassTooSoon {
        /// The bound.
        need: Duration,
    },
    /// `token_lost_after_ms` not above its bound.
    #[error(
        "token_lost_after_ms must be above max_hold + N·(token_min_hold + δ + 1 ms) + r·ring_timeout + ⌈N/2⌉·bypass_after = {need:?}"
    )]
    LostTooSoon {
        /// The bound.
        need: Duration,
    },
    /// `max_queue` is 0.
    #[error("max_queue must be at least 1")]
    ZeroQueue,
    /// `tpc_reserve` outside 1..=[`MAX_TPC_RESERVE`].
    #[error("tpc_reserve must be 1 to 1000000, not {0}")]
    Reserve(u64),
    /// `lease_ms` is 0 or does not fit in `suspect_after_ms`
    /// (reliability.md, Pauses and leases).
    #[error("timing: {0}")]
    LeaseTooLong(String),
    /// The promise component refused the settings.
    #[error(transparent)]
    Promise(#[from] promise::ConfigError),
}

impl TwError {
    /// The config key this error is about (`--check-config` names it).
    pub fn key(&self) -> &'static str {
        match self {
            TwError::ZeroMaxHold => "max_hold_ms",
            TwError::ZeroRingTimeout => "ring_timeout_ms",
            TwError::BypassTooSoon { .. } => "bypass_after_ms",
            TwError::LostTooSoon { .. } => "token_lost_after_ms",
            TwError::ZeroQueue => "max_queue",
            TwError::Reserve(_) => "tpc_reserve",
            TwError::LeaseTooLong(_) => "timing.lease_ms",
            TwError::Promise(_) => "peers",
        }
    }
}
