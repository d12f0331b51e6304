//! The core's settings ([`RdConfig`], with each [`ServiceSpec`]), their
//! defaults and their validation ([`RdConfig::validate`]), and why a
//! replica cannot start ([`RdError`]).

use std::collections::BTreeMap;
use std::time::Duration;

use ::durable::promise;
use ftcore::rules::{Rules, TestStart};
use membership::MembershipError;
use timer::{Instant, Lease};

use super::{services, RdRule};

/// Protocol settings (derived from the daemon's config; checked by
/// [`RdConfig::validate`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RdConfig {
    /// `timing.heartbeat_ms`: heartbeats to the successor, and the
    /// owner's `HolderAlive` period while it has token services.
    pub heartbeat: Duration,
    /// `timing.suspect_after_ms`: silence before a neighbour is suspected;
    /// the resend period of an unacknowledged token; the census wait W.
    pub suspect_after: Duration,
    /// `timing.lease_ms`: the owner's majority lease.
    pub lease: Duration,
    /// ρ in parts per million.
    pub drift_ppm: u32,
    /// `token_min_hold_ms`: an idle owner holds the token this long.
    pub token_min_hold: Duration,
    /// `token_lost_after_ms`: no token or HolderAlive seen this long starts
    /// a census.
    pub token_lost_after: Duration,
    /// `lookup_timeout_ms`: a Find not back this long starts one more lap.
    pub lookup_timeout: Duration,
    /// Serve alone (a two-replica ring's survivor) — a partition then
    /// yields two tokens.
    pub allow_minority: bool,
    /// Most token services queued here.
    pub max_queue: usize,
    /// Most command services (and `sleep`s) running here at once (the
    /// worker pool); more are answered `busy`.
    pub workers: usize,
    /// Configured command services by name.
    pub services: BTreeMap<String, ServiceSpec>,
    /// This replica's client address (lookups answer it).
    pub client_addr: String,
    /// The (safety) rules: all on, except in a mutation test
    /// (`ftcore/mutations`).
    pub rules: Rules<RdRule>,
    /// The seq a regenerated token starts at: 0, unless a scenario starts
    /// it near `u64::MAX` to reach the overflow rule (a [`TestStart`]: only
    /// test builds can set it).
    pub first_seq: TestStart<u64>,
}

/// A configured command service (`[services.NAME]`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceSpec {
    /// The program and its first arguments (never a shell); the request's
    /// arguments follow.
    pub command: Vec<String>,
    /// Runs under the token (one at a time in the ring, with a fence).
    pub needs_token: bool,
    /// Killed this long after it started (and at its token lease's end).
    pub timeout: Duration,
}

/// What a config file that sets none of these keys gives on a cluster of
/// [`runtime::config::DEFAULT_CLUSTER_SIZE`] (`token_lost_after` derived;
/// `client_addr` empty): each default is written once, in
/// [`crate::config::RingdConfig`] and [`runtime::config::Timing`].
impl Default for RdConfig {
    fn default() -> Self {
        crate::config::RingdConfig::default()
            .core_with(&runtime::config::Timing::default(), runtime::config::DEFAULT_CLUSTER_SIZE)
    }
}

impl RdConfig {
    /// A lap of the token round `n` replicas: N·(token_min_hold +
    /// heartbeat), an idle hold and a hop at each (a hop's message is
    /// allowed a heartbeat).
    pub fn lap(&self, n: usize) -> Duration {
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        (self.token_min_hold + self.heartbeat).saturating_mul(n32)
    }

    /// `d·(1+ρ)`, rounded up to the microsecond: the longest `d` on
    /// another replica's clock (a grantor's end of a lease).
    pub fn stretched(&self, d: Duration) -> Duration {
        Lease::new(Instant::ZERO, d, self.drift_ppm).grantor_honours_until().saturating_since(Instant::ZERO)
    }

    /// The least `token_lost_after` for `n` replicas: `suspect_after + 2
    /// laps + lease·(1+ρ)`, a lap being N·(token_min_hold + heartbeat)
    /// (ringd.md, Regeneration).
    pub fn token_lost_bound(&self, n: usize) -> Duration {
        self.suspect_after.saturating_add(self.lap(n).saturating_mul(2)).saturating_add(self.stretched(self.lease))
    }

    /// The most random delay added to `token_lost_after` each time the
    /// token shows itself (so that replicas do not all census at once):
    /// a census is due at most `token_lost_after + lost_jitter_max` after
    /// the last sign of the token.
    pub fn lost_jitter_max(&self) -> Duration {
        self.suspect_after
    }

    /// The default `token_lost_after` for `n` replicas: the bound plus one
    /// `suspect_after` of margin.
    pub fn derived_token_lost_after(&self, n: usize) -> Duration {
        self.token_lost_bound(n).saturating_add(self.suspect_after)
    }

    /// Checks the settings for `n` replicas: the one place they are
    /// validated (the daemon's `--check-config` calls it too).
    pub fn validate(&self, n: usize) -> Result<(), RdError> {
        if self.heartbeat.is_zero() || self.heartbeat >= self.suspect_after {
            return Err(RdError::Heartbeat);
        }
        // A renewal every heartbeat keeps the lease alive (renew_ms part).
        if self.heartbeat.saturating_mul(2) > self.lease {
            return Err(RdError::LeaseTooShort);
        }
        let need = self.token_lost_bound(n);
        if self.token_lost_after <= need {
            return Err(RdError::LostTooSoon { need });
        }
        if self.lookup_timeout.is_zero() {
            return Err(RdError::ZeroLookupTimeout);
        }

        if self.max_queue == 0 || self.workers == 0 {
            return Err(RdError::ZeroQueue);
        }
        for (name, spec) in &self.services {
            if spec.command.is_empty() || spec.timeout.is_zero() || services::is_builtin(name) {
                return Err(RdError::BadService(name.clone()));
            }
        }
        Ok(())
    }
}

/// Why a replica cannot start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RdError {
    /// `heartbeat_ms` is 0 or not below `suspect_after_ms`.
    #[error("timing.heartbeat_ms must be above 0 and below timing.suspect_after_ms")]
    Heartbeat,
    /// `lease_ms` below two heartbeats.
    #[error("timing.lease_ms must be at least 2 × timing.heartbeat_ms (the owner renews its lease every heartbeat)")]
    LeaseTooShort,
    /// `token_lost_after_ms` not above its bound.
    #[error(
        "token_lost_after_ms must be above suspect_after + 2·N·(token_min_hold + heartbeat) + lease·(1+ρ) = {need:?}"
    )]
    LostTooSoon {
        /// The bound.
        need: Duration,
    },
    /// `lookup_timeout_ms` is 0.
    #[error("lookup_timeout_ms must be above 0")]
    ZeroLookupTimeout,

    /// `max_queue` or `workers` is 0.
    #[error("max_queue and workers must be at least 1")]
    ZeroQueue,
    /// A command service without a command or a timeout, or named as a
    /// built-in.
    #[error("services.{0}: needs a non-empty command, timeout_ms above 0, and a name that is not a built-in")]
    BadService(String),
    /// The promise component refused the settings.
    #[error(transparent)]
    Promise(#[from] promise::ConfigError),
    /// The membership is unusable.
    #[error(transparent)]
    Membership(#[from] MembershipError),
}

impl RdError {
    /// The config key this error is about (`--check-config` names it).
    pub fn key(&self) -> &'static str {
        match self {
            RdError::Heartbeat => "timing.heartbeat_ms",
            RdError::LeaseTooShort => "timing.lease_ms",
            RdError::LostTooSoon { .. } => "token_lost_after_ms",
            RdError::ZeroLookupTimeout => "lookup_timeout_ms",
            RdError::ZeroQueue => "max_queue",
            RdError::BadService(_) => "services",
            RdError::Promise(_) | RdError::Membership(_) => "peers",
        }
    }
}
