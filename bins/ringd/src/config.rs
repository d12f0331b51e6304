//! ringd's own configuration keys (beside the common ones).

use std::collections::BTreeMap;
use std::time::Duration;

use runtime::config::{Bound, CommonConfig, ConfigError, DaemonConfig, Timing};
use serde::{Deserialize, Serialize};

use crate::node::{RdConfig, ServiceSpec};

/// Keys of `ringd.toml` beyond the common ones (ringd.md).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default)]
pub struct RingdConfig {
    /// An idle owner holds the token this long before passing it on.
    pub token_min_hold_ms: u64,
    /// No token or HolderAlive seen this long starts a census (0: the
    /// bound plus one `suspect_after_ms`).
    pub token_lost_after_ms: u64,
    /// A lookup lap not back this long is retried once, then answered
    /// with the best known.
    pub lookup_timeout_ms: u64,
    /// Serve alone (the survivor of a two-replica ring); a partition then
    /// yields two tokens.
    pub allow_minority: bool,
    /// Most token services queued at this replica.
    pub max_queue: usize,
    /// Most command services running at once at this replica.
    pub workers: usize,
    /// Command services: `[services.NAME]` tables.
    pub services: BTreeMap<String, ServiceConfig>,
}

/// One `[services.NAME]` table: a command run on request, argv only
/// (never through a shell), the request's arguments appended.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Program and first arguments.
    pub command: Vec<String>,
    /// Run under the token: one at a time in the ring, `FTCOORD_FENCE` set.
    #[serde(default)]
    pub needs_token: bool,
    /// Killed this long after it starts (and, under the token, at its
    /// lease's end). Default 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_timeout_ms() -> u64 {
    10_000
}

impl Default for RingdConfig {
    fn default() -> Self {
        RingdConfig {
            token_min_hold_ms: 30,
            token_lost_after_ms: 0,
            lookup_timeout_ms: 500,
            allow_minority: false,
            max_queue: 1_024,
            workers: 16,
            services: BTreeMap::new(),
        }
    }
}

impl DaemonConfig for RingdConfig {
    const NAME: &'static str = "ringd";
    const BOUNDS: &'static [Bound] = &[
        ("token_min_hold_ms", 0, 86_400_000),
        ("token_lost_after_ms", 0, 86_400_000),
        ("lookup_timeout_ms", 0, 86_400_000),
        ("services.*.timeout_ms", 1, 86_400_000),
    ];

    fn validate(&self, common: &CommonConfig) -> Result<(), ConfigError> {
        if common.limits.max_frame_bytes < crate::node::MIN_FRAME {
            return Err(ConfigError::new(
                "limits.max_frame_bytes",
                format!(
                    "ringd needs at least {} (the token carries the shared state and recent results in one frame)",
                    crate::node::MIN_FRAME
                ),
            ));
        }
        for (name, svc) in &self.services {
            if svc.command.is_empty() || svc.command[0].is_empty() {
                return Err(ConfigError::new(format!("services.{name}.command"), "must name a program"));
            }
            if crate::node::is_builtin(name) {
                return Err(ConfigError::new(format!("services.{name}"), "is a built-in service's name"));
            }
        }
        self.core(common).validate(common.peers.len()).map_err(|e| ConfigError::new(e.key(), e.to_string()))?;
        Ok(())
    }
}

impl RingdConfig {
    /// The core's settings (0 for `token_lost_after_ms`: derived).
    pub fn core(&self, common: &CommonConfig) -> RdConfig {
        RdConfig { client_addr: common.client_addr().to_string(), ..self.core_with(&common.timing, common.peers.len()) }
    }

    /// The core's settings from these keys and `[timing]` on a cluster of
    /// `n`, `client_addr` left empty; [`RdConfig::default`] is this for the
    /// defaults.
    pub fn core_with(&self, t: &Timing, n: usize) -> RdConfig {
        let ms = Duration::from_millis;
        let mut c = RdConfig {
            heartbeat: ms(t.heartbeat_ms),
            suspect_after: ms(t.suspect_after_ms),
            lease: ms(t.lease_ms),
            drift_ppm: t.drift_ppm,
            token_min_hold: ms(self.token_min_hold_ms),
            token_lost_after: ms(self.token_lost_after_ms),
            lookup_timeout: ms(self.lookup_timeout_ms),
            allow_minority: self.allow_minority,
            max_queue: self.max_queue,
            workers: self.workers,
            services: self
                .services
                .iter()
                .map(|(name, s)| {
                    let spec = ServiceSpec {
                        command: s.command.clone(),
                        needs_token: s.needs_token,
                        timeout: ms(s.timeout_ms),
                    };
                    (name.clone(), spec)
                })
                .collect(),
            client_addr: String::new(),
            rules: Default::default(),
            first_seq: Default::default(),
        };
        if self.token_lost_after_ms == 0 {
            c.token_lost_after = c.derived_token_lost_after(n);
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
        let cfg = load_minimal::<RingdConfig>(DEFAULT_CLUSTER_SIZE).expect("a minimal config loads");
        assert_eq!(RdConfig { client_addr: String::new(), ..cfg.daemon.core(&cfg.common) }, RdConfig::default());
    }
}
