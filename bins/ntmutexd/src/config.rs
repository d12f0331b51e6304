//! ntmutexd's own configuration keys (beside the common ones).

use std::time::Duration;

use lockservice::LocksConfig;
use runtime::config::{Bound, CommonConfig, ConfigError, DaemonConfig, PeerConfig, Timing, WorstCase, WorstRow};
use serde::{Deserialize, Serialize};
use timer::{Instant, Lease};

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

    /// The worst case of each failover row (docs/ntmutexd.md, "Worst cases
    /// (`--check-config`)"), from the core's settings ([`Self::core`]).
    fn worst_cases(&self, common: &CommonConfig) -> Vec<WorstCase> {
        worst_cases(&self.core(common), &common.peers)
    }
}

/// The worst cases with the core's settings `c` on a cluster of `peers`
/// (in ring order), for the rules that run today: peer messages within
/// `t_msg` (one way), no second failure, one node's clients holding and
/// another's waiting (Kill, Stop), the lock free (Restart). Each term is
/// the value a timer of the core is armed with, or a message bound:
///
/// - `t`: one message (`t_msg`); `rt`: a round trip, which is also the
///   search, M1 and regeneration window ([`NtConfig::window`]);
/// - `acked`: `lease·(1+ρ)`, how long a peer's ack of the holder's lease
///   renewal refuses any other proposer (`lockservice::lease`,
///   `LeaseConfig::honoured_until`), its last renewal acked up to `t`
///   after the fault;
/// - `jitter`: after a `Busy` refusal a proposer retries the window's end
///   plus up to `W/10` (`durable::promise`, `retry_after`);
/// - the restart window `max(W, lease)·(1+ρ)`, a life's first proposal up
///   to W after it, and a new cluster's first proposal `(slot+1)·lease·(1+ρ)`
///   after recovering (NC4), all of the promise component set up with
///   [`NtConfig::promise_setup`].
fn worst_cases(c: &NtConfig, peers: &[PeerConfig]) -> Vec<WorstCase> {
    let n = peers.len();
    let setup = c.promise_setup();
    let stretched = |d: Duration| {
        Lease::new(Instant::ZERO, d, setup.drift_ppm).grantor_honours_until().saturating_since(Instant::ZERO)
    };
    let times = |d: Duration, m: usize| d.saturating_mul(u32::try_from(m).unwrap_or(u32::MAX));
    let sum = |ds: &[Duration]| ds.iter().fold(Duration::ZERO, |a, d| a.saturating_add(*d));
    let (t, rt) = (c.t_msg, c.window());
    let acked = c.lease_config(n).honoured_until(Instant::ZERO).saturating_since(Instant::ZERO);
    let jitter = setup.window / 10;
    // The waiter's predecessors named in its Commit (at most k, all other
    // nodes): the holder first, suspected at once; M1 asks each of the
    // others (`2·t_msg`; alive but out of the queue: suspected), then M2.
    let preds = c.k.min(n.saturating_sub(1)).max(1);
    let two_k = if c.k <= n.saturating_sub(1) { "(2k+5)" } else { "(2N+3)" };
    // Until the regeneration is proposed; then its promises (`rt`) and the
    // new holder's lease renewal (`rt`).
    let finish = |propose: Duration| sum(&[propose, rt, rt]);
    let recover = times(rt, preds);
    // A proposal held off by the acks of the holder's last renewal: the
    // last ack ends `acked` after it (`t` after the fault), a Busy answer
    // (`t`), the retry's jitter, its search (`rt`).
    let busy = (finish(sum(&[t, acked, t, jitter, rt])), "lease_ms·(1+ρ) + lease_ms/10 + 8·t_msg_ms".to_string());

    // Kill: the hint (`t`), M1 and M2 (or M3 at once without a Commit), or
    // the held-off proposal.
    let kill = max_of(vec![(finish(sum(&[t, recover])), format!("{two_k}·t_msg_ms")), busy.clone()]);
    // Stop: the holder's last IAmAlive (`t` after the stop), silence until
    // a liveness check (every heartbeat) finds `suspect_after` passed, M1
    // and M2; or, the waiter's request not committed yet, the COMMIT timer
    // and an M3 window the holder leaves unanswered; or the held-off proposal.
    let stop = max_of(vec![
        (
            finish(sum(&[t, c.suspect_after, c.heartbeat, recover])),
            format!("suspect_after_ms + heartbeat_ms + {two_k}·t_msg_ms"),
        ),
        (finish(sum(&[c.commit_timeout(n), rt])), "(N+7)·t_msg_ms".to_string()),
        busy.clone(),
    ]);
    // A new cluster with --new-cluster: recovered after one Hello round
    // (`rt`); the lowest id (the root, join.rs) proposes `(slot+1)` steps
    // later, after a search (`rt`), then the token to the client's node (`t`).
    let root = peers.iter().enumerate().min_by_key(|(_, p)| p.id).map_or(0, |(slot, _)| slot);
    let steps = times(stretched(setup.lease.max(Duration::from_millis(1))), root + 1);
    let first = sum(&[rt, steps, rt, t]);
    let first_how = match root {
        0 => "lease_ms·(1+ρ) + 9·t_msg_ms".to_string(),
        s => format!("{}·lease_ms·(1+ρ) + 9·t_msg_ms", s + 1),
    };
    // Restarted with the lock free: joined after one Hello round, an M3
    // search, then the token from its idle holder (`rt`); or, the token
    // lost with this node, its own regeneration after the restart window
    // and the first proposal's random delay (up to W), and a search; that
    // proposal held off at most as above by the acks of a client's last
    // renewal before the restart.
    let window = stretched(setup.window.max(setup.lease));
    let restart = max_of(vec![
        (finish(sum(&[window, setup.window, rt])), "lease_ms·(1+ρ) + lease_ms + 6·t_msg_ms".to_string()),
        (sum(&[rt, rt, rt, rt]), "8·t_msg_ms".to_string()),
        busy,
    ]);
    vec![
        WorstCase { row: WorstRow::Kill, bound: Some(kill.0), how: kill.1 },
        WorstCase { row: WorstRow::Stop, bound: Some(stop.0), how: stop.1 },
        WorstCase { row: WorstRow::FirstGrant, bound: Some(finish(first)), how: first_how },
        WorstCase {
            row: WorstRow::FirstGrantWithoutFlag,
            bound: None,
            how: "every peer's answer (a fresh node recovers from all N−1), after lease_ms·(1+ρ)".to_string(),
        },
        WorstCase { row: WorstRow::Restart, bound: Some(restart.0), how: restart.1 },
    ]
}

/// The longest of `cases` with its formula (the first of equals).
fn max_of(cases: Vec<(Duration, String)>) -> (Duration, String) {
    cases.into_iter().reduce(|a, b| if b.0 > a.0 { b } else { a }).unwrap_or_default()
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

    /// `--check-config`'s rows at the defaults, N = 5 (t_msg 20 ms, k = 3,
    /// heartbeat 50 ms, suspect_after 250 ms, lease 100 ms, ρ = 0.1 %):
    /// each written out in docs/ntmutexd.md, "Worst cases".
    #[test]
    fn worst_cases_at_the_defaults() {
        let cfg = load_minimal::<NtmutexdConfig>(DEFAULT_CLUSTER_SIZE).expect("a minimal config loads");
        let rows: Vec<(WorstRow, Option<u128>, String)> = cfg
            .daemon
            .worst_cases(&cfg.common)
            .into_iter()
            .map(|r| (r.row, r.bound.map(|d| d.as_micros()), r.how))
            .collect();
        let ms = |whole: u128, tenths: u128| Some(whole * 1_000 + tenths * 100);
        let expected = [
            // max(7·20, 100.1 + 10 + 4·20) + 4·20
            (WorstRow::Kill, ms(270, 1), "lease_ms·(1+ρ) + lease_ms/10 + 8·t_msg_ms"),
            // max(250 + 50 + 7·20, 8·20, 190.1) + 4·20
            (WorstRow::Stop, ms(520, 0), "suspect_after_ms + heartbeat_ms + (2k+5)·t_msg_ms"),
            // node 1 (slot 0) proposes 100.1 ms after recovering
            (WorstRow::FirstGrant, ms(280, 1), "lease_ms·(1+ρ) + 9·t_msg_ms"),
            (
                WorstRow::FirstGrantWithoutFlag,
                None,
                "every peer's answer (a fresh node recovers from all N−1), after lease_ms·(1+ρ)",
            ),
            // 100.1 + 100 + 6·20
            (WorstRow::Restart, ms(320, 1), "lease_ms·(1+ρ) + lease_ms + 6·t_msg_ms"),
        ];
        let expected: Vec<(WorstRow, Option<u128>, String)> =
            expected.into_iter().map(|(r, b, h)| (r, b, h.to_string())).collect();
        assert_eq!(rows, expected);

        // The root listed third proposes three steps after recovering.
        let mut common = cfg.common.clone();
        common.peers.rotate_left(3);
        let first = cfg.daemon.worst_cases(&common).into_iter().find(|r| r.row == WorstRow::FirstGrant);
        let first = first.expect("a first-grant row");
        assert_eq!(first.bound, Some(Duration::from_micros(3 * 100_100 + 180_000)));
        assert_eq!(first.how, "3·lease_ms·(1+ρ) + 9·t_msg_ms");

        // Many nodes: the COMMIT timer governs the stop row.
        let mut big = cfg.common.clone();
        big.peers = (1..=40).map(|id| PeerConfig { id, addr: ([127, 0, 0, 1], 7000 + id as u16).into() }).collect();
        let stop = cfg.daemon.worst_cases(&big).into_iter().find(|r| r.row == WorstRow::Stop).expect("a stop row");
        assert_eq!((stop.bound, stop.how.as_str()), (Some(Duration::from_millis(47 * 20)), "(N+7)·t_msg_ms"));
    }
}
