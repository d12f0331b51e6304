//! How a node is configured for promises, and the window arithmetic (all
//! through [`timer::Lease`], so that every daemon rounds the same safe way).

use std::collections::BTreeSet;
use std::time::Duration;

use ftcore::rules::Rules;
use membership::NodeId;
use timer::{Instant, Lease};

use super::SLOTS;

const PPM: u64 = 1_000_000;

/// How a node is configured for promises. Fixed for a node's life.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// Configured nodes in order; a node's slot is its index here.
    pub members: Vec<NodeId>,
    /// This node.
    pub me: NodeId,
    /// W: the promise window and the proposal deadline (ntmutexd `lease_ms`,
    /// tokenwatchd `token_lost_after_ms`, ringd `suspect_after_ms`, electd
    /// `election_timeout_ms`).
    pub window: Duration,
    /// The daemon's lease; the restart window is `max(W, lease)·(1+ρ)`.
    pub lease: Duration,
    /// ρ in parts per million; must be below 1 000 000.
    pub drift_ppm: u32,
    /// Whether a promise refuses higher proposals of others for `W·(1+ρ)`.
    /// ringd and electd turn it off: their majority leases stop a late
    /// lower proposal from acting.
    pub promise_window: bool,
    /// Started with `--new-cluster` (one-shot): a fresh node may then
    /// recover from ⌊N/2⌋ others that have nothing in use.
    pub new_cluster: bool,
    /// The component's (safety) rules: all on, except in a mutation test
    /// (`ftcore/mutations`).
    pub rules: Rules<PromiseRule>,
}

ftcore::rules! {
    /// The promise component's (safety) rules (docs/foundation.md, Durable
    /// state). The scenarios are the model checks of `tests/model.rs`.
    pub enum PromiseRule {
        /// A (re)started node promises, adopts and proposes nothing for the
        /// restart window `max(W, lease)·(1+ρ)`: the promise and lease
        /// windows of its previous life lived in memory.
        RestartWindow {
            switch: "no_restart_window",
            spec: "docs/foundation.md, Durable state",
            scenario: "mutation_no_restart_window_is_caught",
        },
        /// NC2/NC3: a fresh node that waived its restart window under
        /// `--new-cluster` recovers early only from answers that are all
        /// `none` or zeros; any value above zero revokes the waiver.
        NewClusterGuard {
            switch: "no_new_cluster_guard",
            spec: "docs/foundation.md, Fresh nodes (NC2, NC3)",
            scenario: "mutation_no_new_cluster_guard_is_caught",
        },
        /// A proposal equal to the threshold is refused: a value is
        /// promised to one proposer only.
        TiesRefused {
            switch: "accept_ties",
            spec: "docs/foundation.md, Durable state",
            scenario: "mutation_accept_ties_is_caught",
        },
        /// At the top of the value space a proposer stops (`Invalid`),
        /// never wraps to round 0 of its slot.
        StopAtTheTop {
            switch: "wrap_at_the_top",
            spec: "docs/foundation.md, Durable state",
            scenario: "mutation_wrap_at_the_top_is_caught",
        },
    }
}

/// A configuration the component cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `me` is not among `members`.
    #[error("this node {0} is not among the configured members")]
    NotAMember(NodeId),
    /// A node is listed twice.
    #[error("node {0} is configured twice")]
    Duplicate(NodeId),
    /// More nodes than slots.
    #[error("{0} configured nodes, at most {SLOTS} fit in the slot encoding")]
    TooMany(usize),
    /// W is zero.
    #[error("the promise window W must be above zero")]
    ZeroWindow,
    /// ρ ≥ 1.
    #[error("drift_ppm {0} must be below 1000000")]
    Drift(u32),
}

impl Config {
    /// A configuration with the defaults a token daemon wants: promise
    /// window on, no lease beyond W, ρ = 0, not a new cluster.
    pub fn new(members: Vec<NodeId>, me: NodeId, window: Duration) -> Self {
        Config {
            members,
            me,
            window,
            lease: Duration::ZERO,
            drift_ppm: 0,
            promise_window: true,
            new_cluster: false,
            rules: Rules::ALL_ON,
        }
    }

    /// Checks the configuration and returns this node's slot.
    pub fn validate(&self) -> Result<u16, ConfigError> {
        if self.members.len() as u64 > SLOTS {
            return Err(ConfigError::TooMany(self.members.len()));
        }
        let mut seen = BTreeSet::new();
        for m in &self.members {
            if !seen.insert(*m) {
                return Err(ConfigError::Duplicate(*m));
            }
        }
        if self.window.is_zero() {
            return Err(ConfigError::ZeroWindow);
        }
        if u64::from(self.drift_ppm) >= PPM {
            return Err(ConfigError::Drift(self.drift_ppm));
        }
        let slot = self.members.iter().position(|m| *m == self.me).ok_or(ConfigError::NotAMember(self.me))?;
        u16::try_from(slot).map_err(|_| ConfigError::TooMany(self.members.len()))
    }

    /// Nodes that make a majority of the configured ones.
    pub fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }

    pub(super) fn is_member(&self, id: NodeId) -> bool {
        self.members.contains(&id)
    }

    /// `d·(1+ρ)`, rounded up.
    pub(super) fn stretched(&self, d: Duration) -> Duration {
        Lease::new(Instant::ZERO, d, self.drift_ppm).grantor_honours_until().saturating_since(Instant::ZERO)
    }

    /// `W·(1+ρ)` after `at`: until then a promise holds.
    pub(super) fn promise_ends(&self, at: Instant) -> Instant {
        Lease::new(at, self.window, self.drift_ppm).grantor_honours_until()
    }

    /// `W·(1−ρ)` after `sent`: a proposal must be complete before then.
    pub(super) fn deadline(&self, sent: Instant) -> Instant {
        Lease::new(sent, self.window, self.drift_ppm).holder_valid_until()
    }

    /// `max(W, lease)·(1+ρ)` after `start`.
    /// The window a life of this config may bind itself for: `max(W, lease)`.
    pub(super) fn binding(&self) -> Duration {
        self.window.max(self.lease)
    }

    /// When a life started at `start` may promise again: the longest
    /// binding (this config's, or a previous life's `stored`) stretched by
    /// (1+ρ).
    pub(super) fn restart_ends(&self, start: Instant, stored: Duration) -> Instant {
        Lease::new(start, self.binding().max(stored), self.drift_ppm).grantor_honours_until()
    }

    /// `W·(1+ρ)/(1−ρ)`, rounded up to the microsecond.
    pub(super) fn retry_base(&self) -> Duration {
        let w = self.window.as_micros();
        let num = w * u128::from(PPM + u64::from(self.drift_ppm));
        let den = u128::from(PPM - u64::from(self.drift_ppm).min(PPM - 1));
        Duration::from_micros(u64::try_from(num.div_ceil(den)).unwrap_or(u64::MAX))
    }
}
