//! tokenwatchd's own configuration keys (beside the common ones).

use std::time::Duration;

use durable::promise::{AckStep, PromiseNode};
use ftcore::{Context, Incarnation};
use membership::Membership;
use runtime::config::{Bound, CommonConfig, ConfigError, DaemonConfig, Timing, WorstCase, WorstRow};
use serde::{Deserialize, Serialize};
use timer::Instant;

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

    /// The failover rows (tokenwatchd.md, Worst cases), from the settings
    /// the core arms its timers with ([`TokenwatchdConfig::core`]). Claims
    /// that meet both fail and back off by a promise window or more, and
    /// may meet again, so every row that waits for a Claim among several
    /// possible claimants has no bound (`None`); its `how` gives the time
    /// when one Claim is alone.
    fn worst_cases(&self, common: &CommonConfig) -> Vec<WorstCase> {
        let n = common.peers.len();
        let c = self.core(common);
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        // δ per hop or answer: `k` of them.
        let hops = |k: u32| c.max_delay.saturating_mul(k);
        let w = c.token_lost_after;
        let (restart_window, first_turn) = first_claims(&c, n32);
        let case = |row, bound, how: String| WorstCase { row, bound, how };

        let one_claim = self.failover_by_one_claim(common);
        let failover = if n < 3 {
            "with N < 3 a Claim needs the lost process's promise".to_string()
        } else {
            format!(
                "Claims that meet fail and back off; one Claim alone: 1.5·token_lost_after_ms + bypass_after_ms \
                 + (3N−2)·max_datagram_delay_ms = {} ms",
                ceil_ms(one_claim)
            )
        };

        // NC4: each node recovers within 2δ of the start (Join, JoinAck);
        // the first-listed claims one turn after that, the k-th listed k
        // turns after, and the first Claim reaches the second-listed
        // within δ: its turn can come first (the Claims may meet) only
        // if 3δ ≥ a turn. Then the lap (Nδ), the token to the client's
        // node ((N−1)δ) and a lease round (2δ).
        let first_grant = first_turn.map(|turn| (turn, turn.saturating_add(hops(2 * n32 + 3))));
        let (first_bound, first_how) = match first_grant {
            None => (None, "a single fresh node never recovers".to_string()),
            Some((turn, t)) if hops(3) < turn => (Some(t), "lease_ms·(1+ρ) + (2N+3)·max_datagram_delay_ms".to_string()),
            Some((_, t)) => (
                None,
                format!(
                    "NC4 turns may meet (3·max_datagram_delay_ms ≥ lease_ms·(1+ρ)); else \
                     lease_ms·(1+ρ) + (2N+3)·max_datagram_delay_ms = {} ms",
                    ceil_ms(t)
                ),
            ),
        };

        // The restart window, then each node's first Claim up to W later.
        let alone = restart_window.saturating_add(w).saturating_add(hops(2 * n32 + 1));
        let without_flag = format!(
            "needs every peer's answer, then first Claims may meet; one Claim alone: \
             max(token_lost_after_ms, lease_ms)·(1+ρ) + token_lost_after_ms + (2N+1)·max_datagram_delay_ms = {} ms",
            ceil_ms(alone)
        );

        let (restart, restart_how) = if n < 3 {
            (None, "with N < 3 a pending hand-off needs the restarted node's promise".to_string())
        } else {
            // The token's way to it: every other visit (each ending at
            // max_hold) and hop; or a hand-off to it was pending: the
            // bypass, a Claim lap skipping it, the new token's hop. Then
            // a lease round (2δ).
            let lap = c.max_hold.saturating_mul(n32 - 1).saturating_add(hops(n32 + 3));
            let bypass = c.bypass_after.saturating_add(hops(n32 + 2));
            let mut t = lap.max(bypass);
            let mut how = "max((N−1)·max_hold_ms + (N+3)·max_datagram_delay_ms, \
                           bypass_after_ms + (N+2)·max_datagram_delay_ms)"
                .to_string();
            if c.tpc_reserve > 1 {
                // It answers the token of its last block `Stale`: one
                // regeneration, once the lease acks given behind the
                // last holder (lease·(1+ρ) twice) no longer refuse it and
                // the retry's random part (up to W/10,
                // `PromiseNode::retry_after`) has passed.
                let lease = c.lease_config(n).honoured_until(Instant::ZERO).saturating_since(Instant::ZERO);
                t = t.saturating_add(lease.saturating_mul(2)).saturating_add(w / 10).saturating_add(hops(n32 + 3));
                how += " + 2·lease_ms·(1+ρ) + token_lost_after_ms/10 + (N+3)·max_datagram_delay_ms";
            }
            (Some(t), how)
        };

        vec![
            case(WorstRow::Kill, None, failover.clone()),
            case(WorstRow::Stop, None, failover),
            case(WorstRow::FirstGrant, first_bound, first_how),
            case(WorstRow::FirstGrantWithoutFlag, None, without_flag),
            case(WorstRow::Restart, restart, restart_how),
        ]
    }
}

/// `d` in whole milliseconds, rounded up.
fn ceil_ms(d: Duration) -> u128 {
    d.as_micros().div_ceil(1000)
}

/// What the promise component makes of `c` for the first-listed of `n`
/// nodes started on a new disk at time zero: its restart window
/// (`max(W, lease)·(1+ρ)`), and, started with `--new-cluster` and
/// recovered from a majority of the others that know nothing (NC2), how
/// long after that its first Claim is due (NC4's first turn,
/// `lease·(1+ρ)`; `None` when it cannot recover so).
fn first_claims(c: &TwConfig, n: u32) -> (Duration, Option<Duration>) {
    let membership = Membership::of_size(n.max(1));
    let ids: Vec<_> = membership.ids().collect();
    let mut ctx = Context::<(), ()>::new(ids[0], Incarnation(1), membership, Instant::ZERO, ());
    let since = |t: Instant| t.saturating_since(Instant::ZERO);
    let Ok(plain) = PromiseNode::for_core(&ctx, c.promise_setup(), None) else {
        return (Duration::MAX, None);
    };
    let restart_window = since(plain.restart_window_ends());
    ctx.new_cluster = true;
    let Ok(mut fresh) = PromiseNode::for_core(&ctx, c.promise_setup(), None) else {
        return (restart_window, None);
    };
    let _ = fresh.recovery_round(1, Instant::ZERO);
    for peer in &ids[1..] {
        if let AckStep::Recovered { .. } = fresh.on_hello_ack(*peer, 1, None, Instant::ZERO) {
            break;
        }
    }
    (restart_window, fresh.first_proposal_in_new_cluster(Instant::ZERO).map(since))
}

impl TokenwatchdConfig {
    /// The holder's daemon killed or stopped (silence only: over UDP
    /// tokenwatchd takes no hint from the transport) → a client waiting
    /// at another process granted, when one process claims alone (its
    /// Claim may be refused by a process that saw the token later, and
    /// retried, but meets no other): the last to see the token, the
    /// holder's predecessor, has its hand-off confirmed by the ACK (N−1
    /// hops); some process claims at most W plus the deadline's random
    /// part ([`TwConfig::lost_jitter_max`]) after that; the Claim's lap
    /// waits `bypass_after` at the silent process and takes N−1 hops; the
    /// new token takes at most N−2 hops to the waiter, which grants after
    /// a lease round (2δ).
    pub fn failover_by_one_claim(&self, common: &CommonConfig) -> Duration {
        let c = self.core(common);
        let n = u32::try_from(common.peers.len()).unwrap_or(u32::MAX);
        c.token_lost_after
            .saturating_add(c.lost_jitter_max())
            .saturating_add(c.bypass_after)
            .saturating_add(c.max_delay.saturating_mul((3 * n).saturating_sub(2)))
    }

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

    fn peers(n: u32) -> Vec<PeerConfig> {
        (1..=n)
            .map(|id| PeerConfig { id, addr: format!("127.0.0.1:{}", 7300 + id).parse().expect("an address") })
            .collect()
    }

    /// Each row as (row, bound in µs, how).
    fn rows(c: &TokenwatchdConfig, common: &CommonConfig) -> Vec<(WorstRow, Option<u128>, String)> {
        c.worst_cases(common).into_iter().map(|r| (r.row, r.bound.map(|b| b.as_micros()), r.how)).collect()
    }

    /// `--check-config`'s rows at the defaults on 5 nodes (W = 11 443.75
    /// ms, `bypass_after` = 2150 ms, δ = 50 ms, lease·(1+ρ) = 100.1 ms).
    /// Only a restarted node has a bound: every other row waits for a
    /// Claim that may meet another (tests/worst.rs shows them meet).
    #[test]
    fn worst_cases_at_the_defaults_on_five_nodes() {
        let common = CommonConfig { node_id: 1, peers: peers(5), ..CommonConfig::default() };
        let c = TokenwatchdConfig::default();
        let none = |row, how: &str| (row, None, how.to_string());
        assert_eq!(
            rows(&c, &common),
            vec![
                none(
                    WorstRow::Kill,
                    "Claims that meet fail and back off; one Claim alone: 1.5·token_lost_after_ms + bypass_after_ms \
                     + (3N−2)·max_datagram_delay_ms = 19966 ms"
                ),
                none(
                    WorstRow::Stop,
                    "Claims that meet fail and back off; one Claim alone: 1.5·token_lost_after_ms + bypass_after_ms \
                     + (3N−2)·max_datagram_delay_ms = 19966 ms"
                ),
                none(
                    WorstRow::FirstGrant,
                    "NC4 turns may meet (3·max_datagram_delay_ms ≥ lease_ms·(1+ρ)); else \
                     lease_ms·(1+ρ) + (2N+3)·max_datagram_delay_ms = 751 ms"
                ),
                none(
                    WorstRow::FirstGrantWithoutFlag,
                    "needs every peer's answer, then first Claims may meet; one Claim alone: \
                     max(token_lost_after_ms, lease_ms)·(1+ρ) + token_lost_after_ms \
                     + (2N+1)·max_datagram_delay_ms = 23449 ms"
                ),
                (
                    WorstRow::Restart,
                    Some(8_400_000),
                    "max((N−1)·max_hold_ms + (N+3)·max_datagram_delay_ms, \
                     bypass_after_ms + (N+2)·max_datagram_delay_ms)"
                        .to_string()
                ),
            ]
        );
        // 19 965.625 ms with one Claim: 11 443.75 + 5 721.875 + 2150 + 13·50.
        assert_eq!(c.failover_by_one_claim(&common), Duration::from_micros(19_965_625));
    }

    /// A first grant is bounded once NC4's turns cannot meet (3δ below
    /// lease·(1+ρ)); a counter stored ahead costs a restarted node one
    /// regeneration; N < 3 has no failover.
    #[test]
    fn worst_cases_that_change_with_the_settings() {
        let common = CommonConfig { node_id: 1, peers: peers(5), ..CommonConfig::default() };
        let fast = TokenwatchdConfig { max_datagram_delay_ms: 30, ..TokenwatchdConfig::default() };
        let first = rows(&fast, &common).into_iter().find(|r| r.0 == WorstRow::FirstGrant);
        // 100.1 + 13·30 ms.
        let how = "lease_ms·(1+ρ) + (2N+3)·max_datagram_delay_ms".to_string();
        assert_eq!(first, Some((WorstRow::FirstGrant, Some(490_100), how)));

        let reserve = TokenwatchdConfig { tpc_reserve: 16, ..TokenwatchdConfig::default() };
        let restart = rows(&reserve, &common).into_iter().find(|r| r.0 == WorstRow::Restart);
        // 8400 + 2·100.1 + 11 443.75/10 + 8·50 ms.
        let how = "max((N−1)·max_hold_ms + (N+3)·max_datagram_delay_ms, \
                   bypass_after_ms + (N+2)·max_datagram_delay_ms) \
                   + 2·lease_ms·(1+ρ) + token_lost_after_ms/10 + (N+3)·max_datagram_delay_ms"
            .to_string();
        assert_eq!(restart, Some((WorstRow::Restart, Some(10_144_575), how)));

        let two = CommonConfig { node_id: 1, peers: peers(2), ..CommonConfig::default() };
        let bounded: Vec<WorstRow> =
            fast.worst_cases(&two).into_iter().filter(|r| r.bound.is_some()).map(|r| r.row).collect();
        assert_eq!(bounded, vec![WorstRow::FirstGrant]);
    }

    fn common(lease_ms: u64, suspect_after_ms: u64) -> CommonConfig {
        let peers = peers(3);
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
