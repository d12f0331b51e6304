//! The core's settings ([`NtConfig`]), their validation and why a site
//! cannot start ([`NtError`]).

use std::time::Duration;

use durable::promise;
use ftcore::rules::Rules;
use lockservice::lease::LeaseConfig;
use lockservice::LocksConfig;
use timer::Instant;

use super::rules::NtRule;

/// Protocol settings (derived from the daemon's config).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NtConfig {
    /// How many predecessors a COMMIT names (M1 recovers fewer than k
    /// consecutive failures without a broadcast).
    pub k: usize,
    /// Upper bound on one-way delay plus processing.
    pub t_msg: Duration,
    /// Interval between liveness checks of the closest predecessor.
    pub heartbeat: Duration,
    /// Silence of the closest predecessor after which it is suspected.
    pub suspect_after: Duration,
    /// W: the promise window, and the deadline of a regeneration
    /// (`timing.lease_ms`).
    pub lease: Duration,
    /// ρ, the clock-drift bound, in parts per million.
    pub drift_ppm: u32,
    /// The local lock service.
    pub locks: LocksConfig,
    /// Every this often one peer, in turn, is asked `AreYouAlive`, so
    /// that `ftctl status` and `peer_up` show a peer that stopped
    /// answering even while no lock traffic reaches it (the protocol's own
    /// detector watches only the token's path). Status only: a silent peer
    /// is shown down, not suspected. `None`: no such probes (the
    /// simulator's message counts).
    pub liveness_every: Option<Duration>,
    /// The (safety) rules: all on, except in a mutation test
    /// (`ftcore/mutations`; `tests/safety.rs`, docs/safety-rules.md).
    pub rules: Rules<NtRule>,
}

/// What a config file that sets none of these keys gives: each default
/// is written once, in [`crate::config::NtmutexdConfig`] and
/// [`runtime::config::Timing`].
impl Default for NtConfig {
    fn default() -> Self {
        crate::config::NtmutexdConfig::default().core_with(&runtime::config::Timing::default())
    }
}

impl NtConfig {
    /// The lease settings for a cluster of `sites`.
    pub fn lease_config(&self, sites: usize) -> LeaseConfig {
        LeaseConfig { lease: self.lease, drift_ppm: self.drift_ppm, sites, lossy: false }
    }

    /// What the promise component is set up with (foundation.md, Durable
    /// state): W = `lease` is the promise window and the proposal
    /// deadline, and with the lease it sizes the restart window
    /// `max(W, lease)·(1+ρ)`.
    pub fn promise_setup(&self) -> promise::Setup {
        promise::Setup {
            window: self.lease,
            lease: self.lease,
            drift_ppm: self.drift_ppm,
            promise_window: self.rules.on(NtRule::PromiseWindow),
            rules: promise::rules_from(self.rules, |x| match x {
                NtRule::RestartWindow => Some(promise::PromiseRule::RestartWindow),
                NtRule::TiesRefused => Some(promise::PromiseRule::TiesRefused),
                _ => None,
            }),
        }
    }

    /// A search, M1 or regeneration window: one round trip, `2·t_msg`
    /// (closed early once every awaited peer has answered).
    pub fn window(&self) -> Duration {
        self.t_msg * 2
    }

    /// The COMMIT timer and the linking wait on a cluster of `sites`:
    /// `(N + 1)·t_msg`, as a request may be forwarded up to N − 1 times on
    /// a degenerate tree.
    pub fn commit_timeout(&self, sites: usize) -> Duration {
        self.t_msg.saturating_mul(u32::try_from(sites).unwrap_or(u32::MAX).saturating_add(1))
    }

    /// Checks the settings for a cluster of `sites`: the one place they
    /// are validated (the daemon's config check calls it too).
    pub fn validate(&self, sites: usize) -> Result<(), NtError> {
        if sites > MAX_SITES {
            return Err(NtError::TooManySites { max: MAX_SITES, configured: sites });
        }
        if self.k == 0 {
            return Err(NtError::ZeroK);
        }
        // reliability.md: a lease and one renewal period end before any
        // peer could suspect the site.
        // (Without leases, a mutation test's setting, the bound is moot.)
        if self.rules.on(NtRule::GrantsUnderLeases) {
            self.lease_config(sites).check_against(self.suspect_after).map_err(NtError::LeaseTooLong)?;
        }
        // A regeneration's search and ack windows (2 t_msg) fit in the
        // promise window's proposal deadline W·(1−ρ).
        let deadline = timer::Lease::new(Instant::ZERO, self.lease, self.drift_ppm).holder_valid_until();
        if Instant::ZERO + self.t_msg * 2 > deadline {
            return Err(NtError::WindowTooShort { t_msg: self.t_msg, lease: self.lease });
        }
        Ok(())
    }
}

/// Why a site cannot start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NtError {
    /// This node is not one of the configured members.
    #[error(transparent)]
    Membership(#[from] membership::MembershipError),
    /// Epochs carry a 10-bit slot: at most 1024 sites.
    #[error("at most {max} sites are supported, {configured} configured")]
    TooManySites {
        /// The limit.
        max: usize,
        /// How many are configured.
        configured: usize,
    },
    /// A COMMIT must name at least one predecessor.
    #[error("k must be at least 1")]
    ZeroK,
    /// Regeneration windows do not fit in the promise window.
    #[error("2 × t_msg ({t_msg:?}) must fit in lease_ms·(1−ρ) (lease_ms = {lease:?})")]
    WindowTooShort {
        /// The configured t_msg.
        t_msg: Duration,
        /// The configured lease.
        lease: Duration,
    },
    /// `lease_ms` does not fit in `suspect_after_ms` (reliability.md).
    #[error("timing: {0}")]
    LeaseTooLong(String),
    /// The promise component refused the settings.
    #[error(transparent)]
    Promise(#[from] promise::ConfigError),
}

impl NtError {
    /// The config key this error is about (`--check-config` names it).
    pub fn key(&self) -> &'static str {
        match self {
            NtError::ZeroK => "k",
            NtError::WindowTooShort { .. } | NtError::LeaseTooLong(_) => "timing.lease_ms",
            NtError::TooManySites { .. } | NtError::Membership(_) | NtError::Promise(_) => "peers",
        }
    }
}

/// Most configured sites (epochs are `round·2¹⁰ + slot`).
pub const MAX_SITES: usize = promise::SLOTS as usize;
