//! tokenwatchd's own configuration keys (beside the common ones).

use std::time::Duration;

use runtime::config::{Bound, CommonConfig, ConfigError, DaemonConfig, Timing};
use serde::{Deserialize, Serialize};

use crate::node::TwConfig;

/// Keys of `tokenwatchd.toml` beyond the common ones (tokenwatchd.md).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct TokenwatchdConfig {
    /// A hand-off unconfirmed this long is retransmitted; set it near
    /// `1.5 × N × (p99 one-way delay + forwarding)`.
    pub ring_timeout_ms: u64,
    /// Retransmissions before a bypass (r).
    pub max_retransmits: u32,
    /// Every visit of the token ends this long after it arrived (0 refused).
    pub max_hold_ms: u64,
    /// An idle process holds the token this long before passing it on.
    pub token_min_hold_ms: u64,
    /// δ: the longest a datagram may take (at least `chaos.delay_ms`).
    pub max_datagram_delay_ms: u64,
    /// A successor silent this long after the last transmission to it is
    /// bypassed (at least max_hold + ring_timeout + δ; 0: exactly that).
    pub bypass_after_ms: u64,
    /// No token seen this long starts a Claim (above the bound
    /// `--check-config` names; 0: the bound plus a quarter).
    pub token_lost_after_ms: u64,
    /// A process whose Claim finds nobody else live keeps the token alone.
    pub allow_minority: bool,
    /// Most local clients waiting at once.
    pub max_queue: usize,
    /// Token passing counts stored ahead (1: a state write per pass; K: a
    /// write every K, and a restart costs one regeneration).
    pub tpc_reserve: u64,
    /// Fault injection on outgoing datagrams, for demos and tests (off:
    /// all zero). Logged loudly at start when on.
    pub chaos: ChaosConfig,
}

/// `[chaos]`: faults injected into this node's outgoing datagrams.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ChaosConfig {
    /// Probability (0 to 1) that a datagram is not sent.
    pub drop_rate: f64,
    /// Probability (0 to 1) that a datagram is sent twice.
    pub dup_rate: f64,
    /// Each datagram waits a random time up to this long (at most
    /// `max_datagram_delay_ms`).
    pub delay_ms: u64,
}

impl Default for TokenwatchdConfig {
    fn default() -> Self {
        TokenwatchdConfig {
            ring_timeout_ms: 100,
            max_retransmits: 3,
            max_hold_ms: 2_000,
            token_min_hold_ms: 30,
            max_datagram_delay_ms: 50,
            bypass_after_ms: 0,
            token_lost_after_ms: 0,
            allow_minority: false,
            max_queue: 1_024,
            tpc_reserve: 1,
            chaos: ChaosConfig::default(),
        }
    }
}

impl DaemonConfig for TokenwatchdConfig {
    const NAME: &'static str = "tokenwatchd";
    const BOUNDS: &'static [Bound] = &[
        ("ring_timeout_ms", 0, 3_600_000),
        ("max_hold_ms", 0, 86_400_000),
        ("token_min_hold_ms", 0, 3_600_000),
        ("max_datagram_delay_ms", 0, 3_600_000),
        ("bypass_after_ms", 0, 86_400_000),
        ("token_lost_after_ms", 0, 86_400_000),
        ("chaos.drop_rate", 0, 1),
        ("chaos.dup_rate", 0, 1),
        ("max_retransmits", 0, 100),
    ];

    fn chaos(&self) -> Option<wire::Chaos> {
        let c = &self.chaos;
        (c.drop_rate > 0.0 || c.dup_rate > 0.0 || c.delay_ms > 0).then(|| wire::Chaos {
            drop_rate: c.drop_rate,
            dup_rate: c.dup_rate,
            delay: Duration::from_millis(c.delay_ms),
        })
    }

    fn validate(&self, common: &CommonConfig) -> Result<(), ConfigError> {
        if self.chaos.delay_ms > self.max_datagram_delay_ms {
            return Err(ConfigError::new(
                "chaos.delay_ms",
                format!("must be at most max_datagram_delay_ms ({}): δ bounds every delay", self.max_datagram_delay_ms),
            ));
        }
        self.core(common).validate(common.peers.len()).map_err(|e| ConfigError::new(e.key(), e.to_string()))?;
        Ok(())
    }
}

impl TokenwatchdConfig {
    /// The core's settings (0 for `bypass_after_ms` / `token_lost_after_ms`
    /// means: derived from the others).
    pub fn core(&self, common: &CommonConfig) -> TwConfig {
        self.core_with(&common.timing, common.peers.len())
    }

    /// The core's settings from these keys and `[timing]` on a cluster of
    /// `n`; [`TwConfig::default`] is this for the defaults.
    pub fn core_with(&self, timing: &Timing, n: usize) -> TwConfig {
        let ms = Duration::from_millis;
        let mut c = TwConfig {
            ring_timeout: ms(self.ring_timeout_ms),
            max_retransmits: self.max_retransmits,
            max_hold: ms(self.max_hold_ms),
            token_min_hold: ms(self.token_min_hold_ms),
            max_delay: ms(self.max_datagram_delay_ms),
            bypass_after: ms(self.bypass_after_ms),
            token_lost_after: ms(self.token_lost_after_ms),
            drift_ppm: timing.drift_ppm,
            lease: timing.lease(),
            suspect_after: timing.suspect_after(),
            allow_minority: self.allow_minority,
            max_queue: self.max_queue,
            tpc_reserve: self.tpc_reserve,
            rules: Default::default(),
            first_tpc: Default::default(),
        };
        if self.bypass_after_ms == 0 {
            c.bypass_after = c.max_hold + c.ring_timeout + c.max_delay;
        }
        if self.token_lost_after_ms == 0 {
            let bound = c.token_lost_bound(n);
            c.token_lost_after = bound + bound / 4;
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use runtime::config::{load_minimal, PeerConfig, DEFAULT_CLUSTER_SIZE};

    use super::*;

    /// Each default is written once: the core's `Default` is what a
    /// config file setting none of the keys with a default gives.
    #[test]
    fn the_cores_default_is_an_empty_config_files() {
        let cfg = load_minimal::<TokenwatchdConfig>(DEFAULT_CLUSTER_SIZE).expect("a minimal config loads");
        assert_eq!(cfg.daemon.core(&cfg.common), TwConfig::default());
    }

    fn common(lease_ms: u64, suspect_after_ms: u64) -> CommonConfig {
        let peers = (1..=3)
            .map(|id| PeerConfig { id, addr: format!("127.0.0.1:{}", 7300 + id).parse().expect("an address") })
            .collect();
        let timing = Timing { lease_ms, suspect_after_ms, ..Timing::default() };
        CommonConfig { node_id: 1, peers, timing, ..CommonConfig::default() }
    }

    #[test]
    fn the_lease_must_end_before_a_peer_could_suspect_the_process() {
        let c = TokenwatchdConfig::default();
        // The defaults: 100·1.001 + 33.3 ≤ 250·0.999.
        assert_eq!(c.validate(&common(100, 250)), Ok(()));
        let core = c.core(&common(100, 250));
        assert_eq!((core.lease, core.suspect_after), (Duration::from_millis(100), Duration::from_millis(250)));
        // 200·1.001 + 66.7 > 250·0.999: refused, naming timing.lease_ms.
        let e = c.validate(&common(200, 250)).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("timing.lease_ms"), "{e}");
        assert!(e.message.contains("must not exceed suspect_after_ms"), "{e}");
    }
}
