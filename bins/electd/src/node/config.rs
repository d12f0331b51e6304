//! The core's settings and their validation: the election algorithm, the
//! protocol settings ([`ElConfig`], checked in one place by
//! [`ElConfig::validate`]) and why a process cannot start ([`ElError`]).

use std::time::Duration;

use durable::promise;
use ftcore::rules::{Rules, TestStart};
use serde::{Deserialize, Serialize};
use timer::{Instant, Lease};

use super::ElRule;

/// Which election algorithm runs (`algorithm` in the config).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Dolev-Klawe-Rodeh / Peterson relay election (seed 003).
    #[default]
    Relay,
    /// Alive-list ring election (seed 004).
    Ring,
}

impl Algorithm {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Algorithm::Relay => "relay",
            Algorithm::Ring => "ring",
        }
    }
}

/// Protocol settings (from the daemon's config; checked by
/// [`ElConfig::validate`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ElConfig {
    /// `algorithm`.
    pub algorithm: Algorithm,
    /// `timing.heartbeat_ms`: the coordinator's heartbeat period.
    pub heartbeat: Duration,
    /// `timing.suspect_after_ms`: a coordinator silent this long is suspected.
    pub suspect_after: Duration,
    /// `timing.lease_ms`: the quorum lease.
    pub lease: Duration,
    /// ρ in parts per million.
    pub drift_ppm: u32,
    /// `hop_timeout_ms`: an election hop unacked this long skips (ring) or
    /// aborts (relay) the successor.
    pub hop_timeout: Duration,
    /// `election_timeout_ms` (0 in the config: derived,
    /// [`ElConfig::derived_election_timeout`]).
    pub election_timeout: Duration,
    /// `request_timeout_ms`: the immediate answer to a request.
    pub request_timeout: Duration,
    /// `grant_ttl_ms`.
    pub grant_ttl: Duration,
    /// `coordinator_max_queue`.
    pub coordinator_max_queue: usize,
    /// `election_jitter_ms`: a consumer's election start is delayed up to this.
    pub election_jitter: Duration,
    /// Most local clients waiting at once for one lock.
    pub max_queue: usize,
    /// `limits.max_locks`: names known at once, here and at the coordinator.
    pub max_locks: usize,
    /// The (safety) rules: all on, except in a mutation test
    /// (`ftcore/mutations`: `tests/safety.rs` switches each off in the
    /// scenario that shows it needed; no config key sets them).
    pub rules: Rules<ElRule>,
    /// The grant counter a new term's grants count up from: 0, unless a
    /// scenario starts it near `u64::MAX` to reach the overflow rule (a
    /// [`TestStart`]: only test builds can set it).
    pub first_counter: TestStart<u64>,
}

/// What a config file that sets none of these keys gives on a cluster of
/// [`runtime::config::DEFAULT_CLUSTER_SIZE`] (`election_timeout` derived):
/// each default is written once, in [`crate::config::ElectdConfig`] and
/// [`runtime::config::Timing`].
impl Default for ElConfig {
    fn default() -> Self {
        crate::config::ElectdConfig::default()
            .core_with(&runtime::config::Timing::default(), runtime::config::DEFAULT_CLUSTER_SIZE)
    }
}

impl ElConfig {
    /// `election_timeout` for `n` processes: relay `(2⌊log2 n⌋ + 2)` laps,
    /// ring three laps, plus `suspect_after` (a lap: `n × hop_timeout`).
    pub fn derived_election_timeout(&self, n: usize) -> Duration {
        let n32 = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        let lap = self.hop_timeout.saturating_mul(n32);
        let laps = match self.algorithm {
            Algorithm::Relay => 2 * n32.ilog2() + 2,
            Algorithm::Ring => 3,
        };
        lap.saturating_mul(laps).saturating_add(self.suspect_after)
    }

    /// The least `grant_ttl`: `3·(lease + suspect_after)`.
    pub fn min_grant_ttl(&self) -> Duration {
        (self.lease + self.suspect_after) * 3
    }

    /// The failover gap: a coordinator grants nothing for
    /// `(lease + grant_ttl)·(1+ρ) + hop_timeout` after taking office
    /// (electd.md, "Failover gap").
    pub fn failover_gap(&self) -> Duration {
        self.stretched(self.lease + self.grant_ttl) + self.hop_timeout
    }

    /// How long a pre-vote waits for its answers: `2 × hop_timeout`.
    pub fn prevote_timeout(&self) -> Duration {
        self.hop_timeout * 2
    }

    /// Checks the settings for `n` processes: the one place they are
    /// validated (the daemon's `--check-config` calls it too).
    pub fn validate(&self, n: usize) -> Result<(), ElError> {
        if self.heartbeat.is_zero() || self.heartbeat >= self.lease {
            return Err(ElError::Heartbeat);
        }
        // reliability.md (Pauses and leases), heartbeats in the part of
        // renew_ms (electd.md): lease·(1+ρ) + heartbeat ≤ suspect_after·(1−ρ).
        let need = self.stretched(self.lease) + self.heartbeat;
        let room = self.shrunk(self.suspect_after);
        if need > room {
            return Err(ElError::LeaseTooLong { need, room });
        }
        if self.hop_timeout.is_zero() {
            return Err(ElError::ZeroHopTimeout);
        }
        if self.request_timeout.is_zero() {
            return Err(ElError::ZeroRequestTimeout);
        }
        let need = self.derived_election_timeout(n);
        if self.election_timeout < need {
            return Err(ElError::ElectionTimeoutTooShort { need });
        }
        if self.grant_ttl < self.min_grant_ttl() && self.rules.on(ElRule::GrantTtlBound) {
            return Err(ElError::GrantTtlTooShort { need: self.min_grant_ttl() });
        }
        if self.coordinator_max_queue == 0 || self.max_queue == 0 || self.max_locks == 0 {
            return Err(ElError::ZeroQueue);
        }
        Ok(())
    }

    /// A quorum lease or grant taken at `at` for `ttl`, with this drift.
    pub(super) fn lease_at(&self, at: Instant, ttl: Duration) -> Lease {
        Lease::new(at, ttl, self.drift_ppm)
    }

    /// `d·(1+ρ)`, rounded up.
    pub fn stretched(&self, d: Duration) -> Duration {
        Lease::new(Instant::ZERO, d, self.drift_ppm).grantor_honours_until().saturating_since(Instant::ZERO)
    }

    /// `d·(1−ρ)`, rounded down.
    pub(super) fn shrunk(&self, d: Duration) -> Duration {
        Lease::new(Instant::ZERO, d, self.drift_ppm).holder_valid_until().saturating_since(Instant::ZERO)
    }
}

/// Why a process cannot start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ElError {
    /// `heartbeat_ms` is 0 or not below `lease_ms`.
    #[error(
        "timing.heartbeat_ms must be above 0 and below timing.lease_ms (the quorum lease is renewed by heartbeats)"
    )]
    Heartbeat,
    /// The quorum lease and a heartbeat do not fit in the suspicion time.
    #[error(
        "timing.lease_ms·(1+ρ) + timing.heartbeat_ms = {need:?} must not exceed timing.suspect_after_ms·(1−ρ) = {room:?}"
    )]
    LeaseTooLong {
        /// The left side.
        need: Duration,
        /// The right side.
        room: Duration,
    },
    /// `hop_timeout_ms` is 0.
    #[error("hop_timeout_ms must be above 0")]
    ZeroHopTimeout,
    /// `request_timeout_ms` is 0.
    #[error("request_timeout_ms must be above 0")]
    ZeroRequestTimeout,
    /// `election_timeout_ms` below its bound.
    #[error("election_timeout_ms must be at least laps × N × hop_timeout_ms + suspect_after_ms = {need:?} (0: exactly that)")]
    ElectionTimeoutTooShort {
        /// The bound.
        need: Duration,
    },
    /// `grant_ttl_ms` below `3·(lease_ms + suspect_after_ms)`.
    #[error("grant_ttl_ms must be at least 3·(lease_ms + suspect_after_ms) = {need:?}")]
    GrantTtlTooShort {
        /// The bound.
        need: Duration,
    },
    /// A queue bound is 0.
    #[error("coordinator_max_queue, max_queue and limits.max_locks must be at least 1")]
    ZeroQueue,
    /// The promise component refused the settings.
    #[error(transparent)]
    Promise(#[from] promise::ConfigError),
}

impl ElError {
    /// The config key this error is about (`--check-config` names it).
    pub fn key(&self) -> &'static str {
        match self {
            ElError::Heartbeat => "timing.heartbeat_ms",
            ElError::LeaseTooLong { .. } => "timing.lease_ms",
            ElError::ZeroHopTimeout => "hop_timeout_ms",
            ElError::ZeroRequestTimeout => "request_timeout_ms",
            ElError::ElectionTimeoutTooShort { .. } => "election_timeout_ms",
            ElError::GrantTtlTooShort { .. } => "grant_ttl_ms",
            ElError::ZeroQueue => "coordinator_max_queue",
            ElError::Promise(_) => "peers",
        }
    }
}
