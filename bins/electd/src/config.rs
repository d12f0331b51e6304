//! electd's own configuration keys (beside the common ones).

use std::time::Duration;

use runtime::config::{AliasLayer, Bound, CommonConfig, ConfigError, DaemonConfig, Timing};
use serde::{Deserialize, Serialize};

use crate::node::{Algorithm, ElConfig};

/// Keys of `electd.toml` beyond the common ones (electd.md).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct ElectdConfig {
    /// `"relay"` (default) or `"ring"`.
    pub algorithm: Algorithm,
    /// An election hop unacked this long: relay aborts the term, ring skips
    /// the successor.
    pub hop_timeout_ms: u64,
    /// An election not done this long starts term + 1 (0: the bound,
    /// laps × N × hop_timeout_ms + suspect_after_ms).
    pub election_timeout_ms: u64,
    /// The immediate answer (Queued or a denial) to a request is due this
    /// long after it was sent.
    pub request_timeout_ms: u64,
    /// A grant's lease; at least 3·(lease_ms + suspect_after_ms) (0: that
    /// bound, 1050 ms at the default timing).
    pub grant_ttl_ms: u64,
    /// Most requests waiting at the coordinator.
    pub coordinator_max_queue: usize,
    /// A consumer's election start is delayed by a random time up to this.
    pub election_jitter_ms: u64,
    /// Most local clients waiting at once.
    pub max_queue: usize,
}

impl Default for ElectdConfig {
    fn default() -> Self {
        ElectdConfig {
            algorithm: Algorithm::Relay,
            hop_timeout_ms: 100,
            election_timeout_ms: 0,
            request_timeout_ms: 500,
            grant_ttl_ms: 0,
            coordinator_max_queue: 1_024,
            election_jitter_ms: 100,
            max_queue: 1_024,
        }
    }
}

impl DaemonConfig for ElectdConfig {
    const NAME: &'static str = "electd";
    const BOUNDS: &'static [Bound] = &[
        ("hop_timeout_ms", 0, 86_400_000),
        ("election_timeout_ms", 0, 86_400_000),
        ("request_timeout_ms", 0, 86_400_000),
        ("grant_ttl_ms", 0, 86_400_000),
        ("election_jitter_ms", 0, 86_400_000),
    ];

    /// The seed's `ELECTION_ID`, `HOSTID`, `ELECTION_DEST_IPS`,
    /// `ELECTION_DEST_PORT` and `SUCCESSOR_IP` ([`crate::seed_env`]).
    fn env_aliases(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<AliasLayer>, ConfigError> {
        crate::seed_env::layer(var)
    }

    fn validate(&self, common: &CommonConfig) -> Result<(), ConfigError> {
        self.core(common).validate(common.peers.len()).map_err(|e| ConfigError::new(e.key(), e.to_string()))?;
        Ok(())
    }
}

impl ElectdConfig {
    /// The core's settings (0 for `election_timeout_ms` or `grant_ttl_ms`:
    /// derived).
    pub fn core(&self, common: &CommonConfig) -> ElConfig {
        self.core_with(&common.timing, common.peers.len())
    }

    /// The core's settings from these keys and `[timing]` on a cluster of
    /// `n`; [`ElConfig::default`] is this for the defaults.
    pub fn core_with(&self, t: &Timing, n: usize) -> ElConfig {
        let ms = Duration::from_millis;
        let mut c = ElConfig {
            algorithm: self.algorithm,
            heartbeat: ms(t.heartbeat_ms),
            suspect_after: ms(t.suspect_after_ms),
            lease: ms(t.lease_ms),
            drift_ppm: t.drift_ppm,
            hop_timeout: ms(self.hop_timeout_ms),
            election_timeout: ms(self.election_timeout_ms),
            request_timeout: ms(self.request_timeout_ms),
            grant_ttl: ms(self.grant_ttl_ms),
            coordinator_max_queue: self.coordinator_max_queue,
            election_jitter: ms(self.election_jitter_ms),
            max_queue: self.max_queue,
            rules: Default::default(),
            first_counter: Default::default(),
        };
        if self.election_timeout_ms == 0 {
            c.election_timeout = c.derived_election_timeout(n);
        }
        if self.grant_ttl_ms == 0 {
            c.grant_ttl = c.min_grant_ttl();
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use runtime::config::{load_minimal, DEFAULT_CLUSTER_SIZE};

    use super::*;

    /// Each default is written once: the core's `Default` is what a
    /// config file setting none of the keys with a default gives.
    #[test]
    fn the_cores_default_is_an_empty_config_files() {
        let cfg = load_minimal::<ElectdConfig>(DEFAULT_CLUSTER_SIZE).expect("a minimal config loads");
        assert_eq!(cfg.daemon.core(&cfg.common), ElConfig::default());
    }
}
