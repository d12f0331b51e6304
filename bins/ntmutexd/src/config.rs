//! ntmutexd's own configuration keys (beside the common ones).

use std::time::Duration;

use lockservice::LocksConfig;
use runtime::config::{Bound, CommonConfig, ConfigError, DaemonConfig, Timing};
use serde::{Deserialize, Serialize};

use crate::node::NtConfig;

/// Keys of `ntmutexd.toml` beyond the common ones.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct NtmutexdConfig {
    /// Predecessors named in each COMMIT (M1 recovers up to k-1
    /// consecutive failures without a broadcast).
    pub k: usize,
    /// Upper bound on one-way message delay plus processing, in ms. Search
    /// windows are 2 × t_msg, the COMMIT timer (N + 1) × t_msg.
    pub t_msg_ms: u64,
    /// Revoke a hold after this long (0: never): the holder gets
    /// `LockLost`, its lease is renewed no more, and the token moves on
    /// when it releases or its lease ends.
    pub max_hold_ms: u64,
    /// Most local clients waiting at once.
    pub max_queue: usize,
}

impl Default for NtmutexdConfig {
    fn default() -> Self {
        NtmutexdConfig { k: 3, t_msg_ms: 20, max_hold_ms: 0, max_queue: 1_024 }
    }
}

impl DaemonConfig for NtmutexdConfig {
    const NAME: &'static str = "ntmutexd";
    const BOUNDS: &'static [Bound] = &[("t_msg_ms", 1, u64::MAX), ("max_queue", 1, u64::MAX)];

    fn validate(&self, common: &CommonConfig) -> Result<(), ConfigError> {
        // The core's own checks, named by the key they concern.
        self.core(common).validate(common.peers.len()).map_err(|e| ConfigError::new(e.key(), e.to_string()))?;
        // (safety) Whatever a crashed peer sent on the same FIFO connection
        // arrives before it is suspected.
        let need = common.timing.heartbeat_ms + self.t_msg_ms;
        if common.timing.suspect_after_ms < need {
            return Err(ConfigError::new(
                "timing.suspect_after_ms",
                format!("must be at least timing.heartbeat_ms + t_msg_ms = {need}"),
            ));
        }
        Ok(())
    }
}

impl NtmutexdConfig {
    /// The core's settings.
    pub fn core(&self, common: &CommonConfig) -> NtConfig {
        self.core_with(&common.timing)
    }

    /// The core's settings from these keys and `[timing]` (none depends on
    /// the cluster's size); [`NtConfig::default`] is this for the defaults.
    pub fn core_with(&self, timing: &Timing) -> NtConfig {
        NtConfig {
            k: self.k,
            t_msg: Duration::from_millis(self.t_msg_ms),
            heartbeat: timing.heartbeat(),
            suspect_after: timing.suspect_after(),
            lease: timing.lease(),
            drift_ppm: timing.drift_ppm,
            locks: LocksConfig {
                max_queue: self.max_queue,
                max_hold: (self.max_hold_ms > 0).then(|| Duration::from_millis(self.max_hold_ms)),
                // A request's round trip: at most 2·t_msg.
                try_window: 2 * Duration::from_millis(self.t_msg_ms),
            },
            // One peer in turn per heartbeat: a silent peer shows down in
            // status within (N − 1)·heartbeat + suspect_after.
            liveness_every: Some(timing.heartbeat()),
            rules: Default::default(),
        }
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
        let cfg = load_minimal::<NtmutexdConfig>(DEFAULT_CLUSTER_SIZE).expect("a minimal config loads");
        assert_eq!(cfg.daemon.core(&cfg.common), NtConfig::default());
    }
}
