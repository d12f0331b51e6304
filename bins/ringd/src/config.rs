//! ringd's own configuration keys (beside the common ones).

use std::time::Duration;

use runtime::config::{check_range, CommonConfig, ConfigError, DaemonConfig};
use serde::{Deserialize, Serialize};

use crate::node::{RdConfig, RdError};

/// Keys of `ringd.toml` beyond the common ones (ringd.md).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
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
}

impl Default for RingdConfig {
    fn default() -> Self {
        RingdConfig {
            token_min_hold_ms: 10,
            token_lost_after_ms: 0,
            lookup_timeout_ms: 500,
            allow_minority: false,
            max_queue: 1_024,
        }
    }
}

impl DaemonConfig for RingdConfig {
    const NAME: &'static str = "ringd";

    fn validate(&self, common: &CommonConfig) -> Result<(), ConfigError> {
        for (key, v) in [
            ("token_min_hold_ms", self.token_min_hold_ms),
            ("token_lost_after_ms", self.token_lost_after_ms),
            ("lookup_timeout_ms", self.lookup_timeout_ms),
        ] {
            check_range(key, v, 0, 86_400_000)?;
        }
        if let Err(e) = self.core(common).validate(common.peers.len()) {
            let key = match e {
                RdError::Heartbeat => "timing.heartbeat_ms",
                RdError::LeaseTooShort => "timing.lease_ms",
                RdError::LostTooSoon { .. } => "token_lost_after_ms",
                RdError::ZeroLookupTimeout => "lookup_timeout_ms",
                RdError::ZeroQueue => "max_queue",
                RdError::Promise(_) | RdError::Membership(_) => "peers",
            };
            return Err(ConfigError::new(key, e.to_string()));
        }
        Ok(())
    }
}

impl RingdConfig {
    /// The core's settings (0 for `token_lost_after_ms`: derived).
    pub fn core(&self, common: &CommonConfig) -> RdConfig {
        let ms = Duration::from_millis;
        let t = &common.timing;
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
            client_addr: common.client_addr().to_string(),
            mutations: Default::default(),
            first_seq: 0,
        };
        if self.token_lost_after_ms == 0 {
            c.token_lost_after = c.derived_token_lost_after(common.peers.len());
        }
        c
    }
}
