//! electd's own configuration keys (beside the common ones).

use std::time::Duration;

use durable::promise::{self, PromiseNode};
use membership::NodeId;
use runtime::config::{AliasLayer, Bound, CommonConfig, ConfigError, DaemonConfig, Timing, WorstCase, WorstRow};
use serde::{Deserialize, Serialize};
use timer::Instant;

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
    /// Most requests waiting at the coordinator for one lock.
    pub coordinator_max_queue: usize,
    /// A consumer's election start is delayed by a random time up to this.
    pub election_jitter_ms: u64,
    /// Most local clients waiting at once for one lock.
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

    /// The worst case of each failover row (electd.md, "Worst cases
    /// (`--check-config`)"), from the core's settings ([`Self::core`]).
    fn worst_cases(&self, common: &CommonConfig) -> Vec<WorstCase> {
        worst_cases(&self.core(common), common.peers.len())
    }
}

/// The worst cases with the core's settings `c` on a cluster of `n`, for
/// the code that runs today (electd.md, "Worst cases (`--check-config`)",
/// says why each term is there). Assumed: a peer message, and a message
/// with the answer it causes, take at most `hop_timeout`; the coordinator
/// in office keeps its quorum lease; no second failure; no retry timer
/// restarts an election under way (nothing bounds how often one does),
/// and with `ring` at most one election fails (two initiators of a term).
///
/// Each term is a value a timer of the core is armed with, or a message:
/// `election_jitter` (a consumer's election start), `prevote_timeout`,
/// `election_timeout` (a term's start to its coordinator in office: the
/// office deadline; also the promise window W), `failover_gap`,
/// `request_timeout` (a denied request is asked again), `suspect_after`
/// and `heartbeat` (a silent coordinator is suspected at a check), the
/// promise component's restart window, and a new cluster's first
/// proposals, `(slot+1)·lease·(1+ρ)` after recovering (NC4).
fn worst_cases(c: &ElConfig, n: usize) -> Vec<WorstCase> {
    let n32 = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    let hops = |k: u32| c.hop_timeout.saturating_mul(k);
    let sum = |ds: &[Duration]| ds.iter().fold(Duration::ZERO, |a, d| a.saturating_add(*d));
    // From office to the waiting client granted: its request is queued
    // within `request_timeout + hop` (asked before the office, denied, it
    // is asked again then) or `heartbeat + 2·hop` (it learns of the office
    // by a heartbeat: below `failover_gap + hop`); granted once the gap
    // is over; then `Granted` and the renewal's round trip.
    let served = c.failover_gap().max(c.request_timeout).saturating_add(hops(3));
    let served_how = "max((lease_ms + grant_ttl_ms)·(1+ρ) + hop_timeout_ms, request_timeout_ms)";
    // From the last term start to its coordinator in office: one election
    // (relay); ring: a failed one, the retry (within `election_timeout`),
    // its pre-vote and the election.
    let (elect, elect_hops, elect_ets) = match c.algorithm {
        Algorithm::Relay => (c.election_timeout, 0, 1),
        Algorithm::Ring => (c.election_timeout.saturating_mul(3).saturating_add(c.prevote_timeout()), 2, 3),
    };
    let ets = |k: u32| if k == 1 { "election_timeout_ms".to_string() } else { format!("{k}·election_timeout_ms") };
    let elect_how = ets(elect_ets);
    let (prevote, jitter, et) = (c.prevote_timeout(), c.election_jitter, c.election_timeout);

    // Kill: the hint (a message), the consumers' jittered starts and their
    // pre-votes (the last one starts the last term), one election.
    let kill = sum(&[hops(1), jitter, prevote, elect, served]);
    let kill_how = format!("election_jitter_ms + {elect_how} + {}·hop_timeout_ms + {served_how}", 6 + elect_hops);

    // Stop: the last heartbeat (a message), the check (every heartbeat)
    // that finds `suspect_after` passed, the jittered starts and their
    // pre-votes. Relay: the stopped node's predecessor, N−2 hops from any
    // initiator, sends it its own id and aborts the term a hop timeout
    // later (a hop of an older term times out unheeded: each term it joins
    // before starts that over), retries within a hop timeout, a pre-vote.
    let (abort, stop_hops) = match c.algorithm {
        Algorithm::Relay => (sum(&[hops(n32.saturating_sub(2)), hops(2), prevote]), "(N+8)".to_string()),
        Algorithm::Ring => (Duration::ZERO, (6 + elect_hops).to_string()),
    };
    let stop = sum(&[hops(1), c.suspect_after, c.heartbeat, jitter, prevote, abort, elect, served]);
    let stop_how = format!(
        "suspect_after_ms + heartbeat_ms + election_jitter_ms + {elect_how} + {stop_hops}·hop_timeout_ms + {served_how}"
    );

    // --new-cluster: recovered by the Hello round at `suspect_after` (a
    // round trip); the last-listed node's first proposal N steps later
    // (an election still under way is restarted by it), its pre-vote.
    let step = c.stretched(c.lease.max(Duration::from_millis(1)));
    let first = sum(&[c.suspect_after, hops(1), step.saturating_mul(n32), prevote, elect, served]);
    let first_how =
        format!("suspect_after_ms + N·lease_ms·(1+ρ) + {elect_how} + {}·hop_timeout_ms + {served_how}", 6 + elect_hops);

    // A node alone restarts, or starts without the flag, like any fresh
    // node with every peer answering: the restart window, its first
    // proposal within W, a pre-vote, one election.
    let fresh = restart_window(c, n).map(|w| sum(&[w, et, prevote, elect, served]));
    let fresh_how = format!(
        "alone: max(election_timeout_ms, lease_ms)·(1+ρ) + {} + {}·hop_timeout_ms + {served_how}",
        ets(elect_ets + 1),
        5 + elect_hops
    );
    let no_majority = "N < 3 keeps no majority after a failure".to_string();
    let (kill, stop, first, restart) = match n {
        0 | 1 => ((None, no_majority.clone()), (None, no_majority), (fresh, fresh_how.clone()), (fresh, fresh_how)),
        // The coordinator stepped down without its majority: the other
        // node's retry (within `election_timeout`), a pre-vote, one election.
        2 => (
            (None, no_majority.clone()),
            (None, no_majority),
            (Some(first), first_how),
            (
                Some(sum(&[et, prevote, elect, served])),
                format!("{} + {}·hop_timeout_ms + {served_how}", ets(elect_ets + 1), 5 + elect_hops),
            ),
        ),
        // Restarted with its state file: it follows the coordinator of the
        // next heartbeat (within `heartbeat + hop`; following and acking
        // need no promise: its restart window does not apply), then its
        // request with the `Granted`, and the renewal: two round trips.
        _ => (
            (Some(kill), kill_how),
            (Some(stop), stop_how),
            (Some(first), first_how),
            (Some(sum(&[c.heartbeat, hops(3)])), "heartbeat_ms + 3·hop_timeout_ms".to_string()),
        ),
    };
    let row = |row, (bound, how): (Option<Duration>, String)| WorstCase { row, bound, how };
    vec![
        row(WorstRow::Kill, kill),
        row(WorstRow::Stop, stop),
        row(WorstRow::FirstGrant, first),
        row(
            WorstRow::FirstGrantWithoutFlag,
            (None, "a fresh node recovers only once every peer answers its Hello".to_string()),
        ),
        row(WorstRow::Restart, restart),
    ]
}

/// A fresh node's restart window, `max(election_timeout, lease)·(1+ρ)`:
/// the promise component's, set up as the core sets it up (W =
/// `election_timeout`). `None` if the component refuses the settings
/// (the core would not start either).
fn restart_window(c: &ElConfig, n: usize) -> Option<Duration> {
    let members: Vec<NodeId> = (1..=u32::try_from(n.max(1)).unwrap_or(u32::MAX)).map(NodeId).collect();
    let cfg = promise::Config {
        lease: c.lease,
        drift_ppm: c.drift_ppm,
        promise_window: false,
        ..promise::Config::new(members, NodeId(1), c.election_timeout)
    };
    let node = PromiseNode::new(cfg, None, Instant::ZERO).ok()?;
    Some(node.restart_window_ends().saturating_since(Instant::ZERO))
}

impl ElectdConfig {
    /// The core's settings (0 for `election_timeout_ms` or `grant_ttl_ms`:
    /// derived).
    pub fn core(&self, common: &CommonConfig) -> ElConfig {
        ElConfig { max_locks: common.limits.max_locks, ..self.core_with(&common.timing, common.peers.len()) }
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
            max_locks: runtime::config::Limits::default().max_locks,
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
    use runtime::config::{load_minimal, worst_cases_toml, DEFAULT_CLUSTER_SIZE};

    use super::*;

    /// Each default is written once: the core's `Default` is what a
    /// config file setting none of the keys with a default gives.
    #[test]
    fn the_cores_default_is_an_empty_config_files() {
        let cfg = load_minimal::<ElectdConfig>(DEFAULT_CLUSTER_SIZE).expect("a minimal config loads");
        assert_eq!(cfg.daemon.core(&cfg.common), ElConfig::default());
    }

    /// `--check-config`'s rows at the defaults, N = 5 (electd.md, "Worst
    /// cases"): hop 100 ms, jitter 100 ms, election_timeout 3250 ms
    /// (derived), the failover gap (100 + 1050)·1.001 + 100 = 1251.15 ms
    /// (above request_timeout, 500 ms), suspect_after 250 ms, heartbeat
    /// 50 ms, a new-cluster step 100·1.001 = 100.1 ms.
    #[test]
    fn worst_cases_at_the_defaults() {
        let cfg = load_minimal::<ElectdConfig>(DEFAULT_CLUSTER_SIZE).expect("a minimal config loads");
        assert_eq!(cfg.daemon.core(&cfg.common).failover_gap(), Duration::from_micros(1_251_150));
        let rows: Vec<(WorstRow, Option<u128>, String)> = cfg
            .daemon
            .worst_cases(&cfg.common)
            .into_iter()
            .map(|r| (r.row, r.bound.map(|d| d.as_micros()), r.how))
            .collect();
        let served = "max((lease_ms + grant_ttl_ms)·(1+ρ) + hop_timeout_ms, request_timeout_ms)";
        let us = |ms: u128, us: u128| Some(ms * 1_000 + us);
        let expected = [
            // 100 + 3250 + 6·100 + 1251.15
            (WorstRow::Kill, us(5_201, 150), format!("election_jitter_ms + election_timeout_ms + 6·hop_timeout_ms + {served}")),
            // 250 + 50 + 100 + 3250 + 13·100 + 1251.15
            (
                WorstRow::Stop,
                us(6_201, 150),
                format!(
                    "suspect_after_ms + heartbeat_ms + election_jitter_ms + election_timeout_ms + (N+8)·hop_timeout_ms + {served}"
                ),
            ),
            // 250 + 5·100.1 + 3250 + 6·100 + 1251.15
            (
                WorstRow::FirstGrant,
                us(5_851, 650),
                format!("suspect_after_ms + N·lease_ms·(1+ρ) + election_timeout_ms + 6·hop_timeout_ms + {served}"),
            ),
            (
                WorstRow::FirstGrantWithoutFlag,
                None,
                "a fresh node recovers only once every peer answers its Hello".to_string(),
            ),
            // 50 + 3·100
            (WorstRow::Restart, us(350, 0), "heartbeat_ms + 3·hop_timeout_ms".to_string()),
        ];
        assert_eq!(rows, expected);
        // As printed, rounded up to the millisecond.
        let text = worst_cases_toml(&cfg);
        for shown in ["5202 ms", "6202 ms", "5852 ms", "unbounded", "350 ms"] {
            assert!(text.contains(shown), "{shown} in {text}");
        }
    }

    /// The rows follow the settings: ring (a failed election, a retry
    /// and another, no abort at the stopped node's predecessor), a longer
    /// request_timeout than the gap, and clusters too small to fail over.
    #[test]
    fn worst_cases_follow_the_settings() {
        let cfg = load_minimal::<ElectdConfig>(DEFAULT_CLUSTER_SIZE).expect("a minimal config loads");
        let bounds = |d: &ElectdConfig, n: usize| -> Vec<Option<u128>> {
            let mut common = cfg.common.clone();
            common.peers.truncate(n);
            d.worst_cases(&common).into_iter().map(|r| r.bound.map(|b| b.as_micros())).collect()
        };
        // ring: election_timeout 3·5·100 + 250 = 1750; the election part
        // 3·1750 + 200 = 5450 instead of 3250.
        let ring = ElectdConfig { algorithm: Algorithm::Ring, ..ElectdConfig::default() };
        assert_eq!(bounds(&ring, 5), [Some(7_401_150), Some(7_701_150), Some(8_051_650), None, Some(350_000)]);
        // request_timeout 2000 ms above the gap: asked again only then.
        let slow = ElectdConfig { request_timeout_ms: 2_000, ..ElectdConfig::default() };
        let fast = bounds(&ElectdConfig::default(), 5);
        let diff = 2_000_000 - 1_251_150;
        assert_eq!(bounds(&slow, 5)[0], fast[0].map(|b| b + diff));
        // N = 3: the relay abort at the stopped node's predecessor is one
        // hop nearer; the election timeout derived for 3 (4·3·100 + 250).
        assert_eq!(
            bounds(&ElectdConfig::default(), 3)[1],
            Some(250_000 + 50_000 + 100_000 + 1_450_000 + 1_100_000 + 1_251_150)
        );
        // N = 2 and 1: no failover; a restart waits for an election.
        let two = bounds(&ElectdConfig::default(), 2);
        assert_eq!((two[0], two[1]), (None, None));
        assert!(two[4].is_some_and(|b| b > 1_251_150));
        let one = bounds(&ElectdConfig::default(), 1);
        assert_eq!((one[0], one[1], one[3]), (None, None, None));
        // Alone: the restart window (election_timeout 2·1·100 + 250 = 450,
        // ·1.001 = 450.45), W, a pre-vote, the election, after office.
        assert_eq!(one[2], Some(450_450 + 450_000 + 200_000 + 450_000 + 1_551_150));
        assert_eq!(one[4], one[2]);
    }
}
