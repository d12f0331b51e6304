//! What electd's simulator tests share: the timings, the acquire action
//! and the safety checker judged from outside (events and the clients'
//! own replies).
// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use electd::{Algorithm, ElConfig, ElEvent, ElNode, ElRule};
use ftcore::rules::{Rule, Rules};
use ftcore::{ClientId, NodeId};
use lockservice::{LockReply, LockRequest};
use sim::{Action, FaultPlan, NetConfig, Sim, World};
use timer::Instant;

/// Small timings (heartbeat 10 ms, suspect_after 40 ms, lease 29 ms — the
/// longest that `lease·(1+ρ) + heartbeat ≤ suspect_after·(1−ρ)` allows —,
/// hop 6 ms, grant_ttl 250 ms), the election timeout derived for `n`.
pub fn config(alg: Algorithm, n: u32) -> ElConfig {
    let mut c = ElConfig {
        algorithm: alg,
        heartbeat: Duration::from_millis(10),
        suspect_after: Duration::from_millis(40),
        lease: Duration::from_millis(29),
        hop_timeout: Duration::from_millis(6),
        request_timeout: Duration::from_millis(30),
        grant_ttl: Duration::from_millis(250),
        election_jitter: Duration::from_millis(10),
        ..ElConfig::default()
    };
    c.election_timeout = c.derived_election_timeout(n as usize);
    c
}

/// A local client of `node` asks for the lock (waiting up to a minute).
pub fn acquire(node: NodeId, client: ClientId) -> Action<ElNode> {
    Action::Request(node, client, LockRequest::Acquire { timeout_ms: 60_000 })
}

/// Safety after every step (electd.md, Invariants 2–4).
pub fn safety() -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    checker(true)
}

/// Safety under pauses: as [`safety`], except that a client whose process
/// is paused while it holds is no longer counted as holding by its
/// replies (a paused daemon cannot tell its client `LockLost`); the
/// client stops at its lease's end on its own, and the lease check
/// (`LeaseChecker`, in both) judges exclusion by that, always.
pub fn safety_under_pauses() -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    checker(false)
}

fn checker(judge_paused_holders: bool) -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    let mut seen_events = 0usize;
    let mut seen_replies = 0usize;
    let mut office: BTreeMap<u64, NodeId> = BTreeMap::new();
    let mut holding: BTreeMap<(NodeId, ClientId), u128> = BTreeMap::new();
    let mut max_fence = 0u128;
    let mut max_grant_term = 0u64;
    let mut leases = lockservice::check::LeaseChecker::new();
    move |w| {
        for (t, node, e) in &w.events[seen_events..] {
            // reliability.md's stage after leases, always: no two client
            // leases overlap, fences rise in grant order (pauses included).
            if let ElEvent::Lock(le) = e {
                leases.on_event(*t, *node, le)?;
            }
            // No lower-term grant after the first grant of a higher term.
            if let ElEvent::Granted { fence, .. } = e {
                let term = lockservice::fence_parts(*fence).0;
                if term < max_grant_term {
                    return Err(format!("{node} granted in term {term} after a grant of term {max_grant_term}"));
                }
                max_grant_term = term;
            }
            if let ElEvent::TookOffice { term } = e {
                if let Some(other) = office.insert(*term, *node) {
                    if other != *node {
                        return Err(format!("two coordinators in term {term}: {other} and {node}"));
                    }
                }
            }
        }
        seen_events = w.events.len();
        for (_, node, client, reply) in &w.replies[seen_replies..] {
            match reply {
                LockReply::Granted { fence, .. } => {
                    if *fence <= max_fence {
                        return Err(format!("{node} granted fence {fence:#x} after {max_fence:#x}"));
                    }
                    max_fence = *fence;
                    holding.insert((*node, *client), *fence);
                }
                LockReply::Released | LockReply::LockLost { .. } => {
                    holding.remove(&(*node, *client));
                }
                _ => {}
            }
        }
        seen_replies = w.replies.len();
        // A crashed process's clients are gone with it.
        holding.retain(|(node, _), _| w.is_up(*node) && (judge_paused_holders || !w.is_paused(*node)));
        if holding.len() > 1 {
            return Err(format!("clients hold the lock at once: {holding:x?}"));
        }
        Ok(())
    }
}

/// `n` processes, a client per process looping acquire → hold 1–15 ms →
/// release → think 0–10 ms.
pub fn cluster(seed: u64, n: u32, alg: Algorithm) -> Sim<ElNode> {
    cluster_without(seed, n, alg, Rules::ALL_ON)
}

/// As [`cluster`], with the rules in `m` switched off.
pub fn cluster_without(seed: u64, n: u32, alg: Algorithm, m: Rules<ElRule>) -> Sim<ElNode> {
    let net = NetConfig::reliable(Duration::from_micros(200), Duration::from_millis(2));
    let mut sim = Sim::new(seed, n, net, ElConfig { rules: m, ..config(alg, n) });
    sim.clients(Box::new(move |_, node, client, reply, rng| {
        let ms = |rng: &mut timer::SeededRng, lo, hi| Duration::from_millis(rng.range_inclusive(lo, hi));
        match reply {
            LockReply::Granted { .. } => vec![(ms(rng, 1, 15), Action::Request(node, client, LockRequest::Release))],
            LockReply::Released | LockReply::TimedOut | LockReply::LockLost { .. } => {
                vec![(ms(rng, 0, 10), acquire(node, client))]
            }
            LockReply::Refused { .. } | LockReply::Renewed { .. } => vec![],
        }
    }));
    for i in 1..=n {
        sim.at(Instant::from_millis(20 + u64::from(i)), acquire(NodeId(i), ClientId(u64::from(i))));
    }
    sim
}

/// `n` processes with the settings given; each local client that is
/// granted holds for `hold`, then releases; nobody asks but the scenario.
/// Checked by [`safety`].
pub fn cluster_with(seed: u64, n: u32, c: ElConfig, hold: Duration) -> Sim<ElNode> {
    let net = NetConfig::reliable(Duration::from_micros(200), Duration::from_millis(2));
    let mut sim = Sim::new(seed, n, net, c);
    sim.clients(Box::new(move |_, node, client, reply, _| match reply {
        LockReply::Granted { .. } => vec![(hold, Action::Request(node, client, LockRequest::Release))],
        _ => vec![],
    }));
    sim.check(safety());
    sim
}

/// The random faults of the sweeps: crashes (a minority down at once)
/// and partitions.
pub fn faults(n: u32) -> FaultPlan {
    FaultPlan {
        start: Instant::from_millis(600),
        end: Instant::from_millis(4_000),
        crashes: 4,
        max_down: (n - 1) / 2,
        downtime: (Duration::from_millis(50), Duration::from_millis(800)),
        partitions: 2,
        partition_len: (Duration::from_millis(50), Duration::from_millis(600)),
        ..FaultPlan::default()
    }
}

/// Every rule but the masked ones (`no_majority`, `no_election_deadline`,
/// `renew_adopted_at_once`, `reelect_in_office`, and `short_grant_ttl`,
/// which only lifts a bound) and the counter's wrap, each switched off
/// alone, by its switch's name: the partners the mask surveys pair a
/// masked switch with.
pub fn other_switches() -> Vec<(&'static str, Rules<ElRule>)> {
    [
        ElRule::FailoverGap,
        ElRule::QuorumLease,
        ElRule::LeaseFromAckedRenewal,
        ElRule::PreVote,
        ElRule::StoredTerms,
        ElRule::OneVotePerTerm,
        ElRule::StaleTermAnswered,
        ElRule::LateJoinersActive,
        ElRule::HopAcks,
        ElRule::NoOfficeAtTheLoadedTerm,
        ElRule::StepDownAtAHigherTerm,
        ElRule::HeartbeatQuorum,
        ElRule::ConfirmedGrantsReregistered,
    ]
    .into_iter()
    .map(|r| (r.switch(), Rules::all_but(&[r])))
    .collect()
}

/// After the faults: every live process names one live coordinator, which
/// is in office, and every process's client was served again. (Which one:
/// the highest id among its term's voters; a healthy coordinator keeps
/// office when a higher id restarts, so not always the highest live id.)
pub fn converged(sim: &mut Sim<ElNode>) -> Result<(), sim::SimError> {
    sim.converge(Duration::from_millis(3_000))?;
    let w = sim.world();
    let views: Vec<String> = w
        .live()
        .map(|(id, c)| format!("{id}: term {} coordinator {:?} follows {:?}", c.term(), c.coordinator(), c.follows()))
        .collect();
    let named = w.live().find_map(|(_, c)| c.coordinator());
    let Some(leader) = named.filter(|l| w.live().any(|(id, _)| id == *l)) else {
        return Err(sim.error(format!("no live coordinator named\n{}", views.join("\n"))));
    };
    for (id, c) in w.live() {
        if c.coordinator() != Some(leader) {
            return Err(sim.error(format!(
                "{id} names {:?}, not {leader} as the others\n{}",
                c.coordinator(),
                views.join("\n")
            )));
        }
    }
    if !w.core(leader).is_some_and(|c| c.in_office()) {
        return Err(sim.error(format!("{leader} is not in office\n{}", views.join("\n"))));
    }
    let since = Instant::from_micros(w.now.as_micros().saturating_sub(1_500_000));
    let served: Vec<NodeId> = w
        .replies
        .iter()
        .filter(|(t, _, _, r)| *t >= since && matches!(r, LockReply::Granted { .. }))
        .map(|(_, n, _, _)| *n)
        .collect();
    for (id, _) in w.live() {
        if !served.contains(&id) {
            return Err(sim.error(format!("{id}'s client not served after the faults\n{}", views.join("\n"))));
        }
    }
    Ok(())
}

/// `n` processes under `plan`, checked by `checker` after every step,
/// then [`converged`].
pub fn run_with_faults(
    seed: u64,
    n: u32,
    alg: Algorithm,
    m: Rules<ElRule>,
    plan: &FaultPlan,
    checker: impl FnMut(&sim::World<ElNode>) -> Result<(), String> + 'static,
) -> Result<(), sim::SimError> {
    let mut sim = cluster_without(seed, n, alg, m).without_trace();
    sim.check(checker);
    sim.random_faults(plan);
    // Restarted processes get their client back (one already waiting or
    // holding is refused, changing nothing).
    for t in (600..8_000).step_by(300) {
        for i in 1..=n {
            sim.at(Instant::from_millis(t), acquire(NodeId(i), ClientId(u64::from(i))));
        }
    }
    sim.run_until(Instant::from_millis(5_000))?;
    converged(&mut sim)
}

pub fn paused_run_without(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), sim::SimError> {
    paused_run_checked(seed, alg, m, safety_under_pauses())
}

/// The paused run of `seed`, checked by `checker` after every step.
pub fn paused_run_checked(
    seed: u64,
    alg: Algorithm,
    m: Rules<ElRule>,
    checker: impl FnMut(&sim::World<ElNode>) -> Result<(), String> + 'static,
) -> Result<(), sim::SimError> {
    let n = 3 + (seed % 4) as u32;
    let plan = FaultPlan {
        crashes: 2,
        wipes: 1,
        pauses: 4,
        pause_len: (Duration::from_millis(10), Duration::from_millis(600)),
        slow_periods: 2,
        slow_extra: Duration::from_millis(60),
        ..faults(n)
    };
    run_with_faults(seed, n, alg, m, &plan, checker)
}
