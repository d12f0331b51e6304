//! ringd's own configuration keys (beside the common ones).

use std::collections::BTreeMap;
use std::time::Duration;

use runtime::config::{Bound, CommonConfig, ConfigError, DaemonConfig, Timing, WorstCase, WorstRow};
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

    /// The failover rows (ringd.md, "Worst cases (`--check-config`)"),
    /// from the settings the core arms its timers with
    /// ([`RingdConfig::core_with`]). A grant is a token service run for a
    /// client and answered, no other token service queued on the way; each
    /// peer message is allowed a heartbeat, as a hop is in the lap of
    /// `token_lost_after`'s bound ([`RdConfig::lap`]).
    fn worst_cases(&self, common: &CommonConfig) -> Vec<WorstCase> {
        let n = common.peers.len();
        let c = self.core_with(&common.timing, n);
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        let messages = |k: u32| c.heartbeat.saturating_mul(k);
        // A census at the token-lost deadline: the last sign of the token
        // (a message), `token_lost_after` plus its jitter on a clock up to
        // ρ slow, a rival census started meanwhile (a message: the highest
        // wins), the census's round, the hops to the client's replica (N−2
        // around a dead holder; N−1, with no last sign, at a first start),
        // its lease round and its pass acked. The kill and stop
        // rows' worst case: a holder that made the token itself leaves no
        // frozen copy with its predecessor for ring repair to hand on
        // (with one, the census starts at once, after the acked renewals'
        // `lease·(1+ρ)` at worst).
        let census = c
            .stretched(c.token_lost_after.saturating_add(c.lost_jitter_max()))
            .saturating_add(messages(n32.saturating_add(6)));
        let census_how = "(token_lost_after_ms + suspect_after_ms)·(1+ρ) + (N+6)·heartbeat_ms";
        // One replica down: the others are a majority from N = 3 on.
        let (survivors, majority) = (n - 1, n / 2 + 1);
        let failover = if n == 1 {
            (None, "no other replica".to_string())
        } else if survivors >= majority || self.allow_minority {
            (Some(census), census_how.to_string())
        } else {
            (None, "the survivor is no majority (allow_minority = false)".to_string())
        };
        // The restarted replica's Wanted (its predecessor learns its life
        // from it and the holder passes at once), the token's way to it (a
        // lap at most), its lease round, its pass acked; its restart window
        // holds back no token service. Assumed: the token did not go down
        // with it (then the kill or stop row comes first). Alone, its
        // token always does: a census.
        let restart = if n > 1 {
            let rejoin = c.stretched(c.lap(n)).saturating_add(messages(5));
            (rejoin, "N·(token_min_hold_ms + heartbeat_ms)·(1+ρ) + 5·heartbeat_ms".to_string())
        } else {
            (census, census_how.to_string())
        };
        // A new cluster started with the flag, all up at once: each recovers
        // from its peers' answers (a round trip), and the first census
        // comes at its rank's NC4 turn, `(slot + 1)·lease·(1+ρ)` later, not
        // at the token-lost deadline. A later rank's turn may bring a rival
        // census (the highest wins), the last at `N·lease·(1+ρ)`; then the
        // census's round, the hops to the client's replica (N−1), its lease
        // round and its pass acked.
        let first = c
            .stretched(c.lease.max(Duration::from_millis(1)).saturating_mul(n32))
            .saturating_add(messages(n32.saturating_add(7)));
        let first_how = "N·lease_ms·(1+ρ) + (N+7)·heartbeat_ms";
        // A fresh replica recovers only from every other one's answer (none
        // has values yet); all up at once, its first census waits for the
        // token-lost deadline, as after a kill.
        let without_flag =
            "every peer's answer (fresh: from all N−1; all up at once: the token-lost deadline, as the kill row)";
        vec![
            WorstCase { row: WorstRow::Kill, bound: failover.0, how: failover.1.clone() },
            WorstCase { row: WorstRow::Stop, bound: failover.0, how: failover.1 },
            WorstCase { row: WorstRow::FirstGrant, bound: Some(first), how: first_how.into() },
            WorstCase { row: WorstRow::FirstGrantWithoutFlag, bound: None, how: without_flag.into() },
            WorstCase { row: WorstRow::Restart, bound: Some(restart.0), how: restart.1 },
        ]
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

    /// `--check-config`'s worst cases at the defaults, N = 5 (ringd.md,
    /// "Worst cases"): token_lost_after 1400.1 ms (derived), the census
    /// after (1400.1 + 250)·1.001 = 1651.751 ms, then 11 messages of 50 ms;
    /// a restart's lap 5·80·1.001 = 400.4 ms, then 5 messages.
    #[test]
    fn worst_cases_at_the_defaults() {
        let cfg = load_minimal::<RingdConfig>(DEFAULT_CLUSTER_SIZE).expect("a minimal config loads");
        let rows: Vec<(WorstRow, Option<Duration>, String)> =
            cfg.daemon.worst_cases(&cfg.common).into_iter().map(|r| (r.row, r.bound, r.how)).collect();
        let ms = |ms: u64, us: u64| Some(Duration::from_micros(ms * 1_000 + us));
        let census = "(token_lost_after_ms + suspect_after_ms)·(1+ρ) + (N+6)·heartbeat_ms";
        let expected = [
            (WorstRow::Kill, ms(2_201, 751), census),
            (WorstRow::Stop, ms(2_201, 751), census),
            (WorstRow::FirstGrant, ms(1_100, 500), "N·lease_ms·(1+ρ) + (N+7)·heartbeat_ms"),
            (
                WorstRow::FirstGrantWithoutFlag,
                None,
                "every peer's answer (fresh: from all N−1; all up at once: the token-lost deadline, as the kill row)",
            ),
            (WorstRow::Restart, ms(650, 400), "N·(token_min_hold_ms + heartbeat_ms)·(1+ρ) + 5·heartbeat_ms"),
        ];
        let expected: Vec<_> = expected.into_iter().map(|(r, b, h)| (r, b, h.to_string())).collect();
        assert_eq!(rows, expected);
    }
}
