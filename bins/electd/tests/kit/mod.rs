//! What electd's simulator tests share: the timings, the acquire action
//! and the safety checker judged from outside (events and the clients'
//! own replies).
// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

pub mod elections;

use std::collections::BTreeMap;
use std::time::Duration;

use electd::{Algorithm, ElConfig, ElEvent, ElNode, ElRule};
use ftcore::rules::{Rule, Rules};
use ftcore::{ClientId, NodeId};
use lockservice::{LockName, LockReply, LockRequest, NamedEvent};
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

/// A local client of `node` asks for the unnamed lock (waiting up to a
/// minute).
pub fn acquire(node: NodeId, client: ClientId) -> Action<ElNode> {
    Action::Request(node, client, LockRequest::Acquire { timeout_ms: 60_000 })
}

/// The lock `client` asks for in a run with `names` locks: the unnamed
/// lock when `names` ≤ 1, else `lock-{client mod names}`.
pub fn lock_for(client: ClientId, names: u64) -> LockName {
    if names <= 1 {
        return LockName::unnamed();
    }
    LockName::parse(&format!("lock-{}", client.0 % names)).expect("a valid name")
}

/// A local client of `node` asks for its lock of `names` ([`lock_for`]).
pub fn acquire_of(node: NodeId, client: ClientId, names: u64) -> Action<ElNode> {
    let req = if names <= 1 {
        LockRequest::Acquire { timeout_ms: 60_000 }
    } else {
        LockRequest::AcquireNamed { name: lock_for(client, names), timeout_ms: 60_000 }
    };
    Action::Request(node, client, req)
}

/// Safety after every step (electd.md, Invariants 2–4).
pub fn safety() -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    checker(true, |_| LockName::unnamed())
}

/// [`safety`] of a run whose clients ask for `names` locks ([`lock_for`]),
/// judged per name.
pub fn safety_of(names: u64) -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    checker(true, move |c| lock_for(c, names))
}

/// [`safety`] of a run whose client `c` asks for lock `lock_of(c)`.
pub fn safety_by(lock_of: impl Fn(ClientId) -> LockName + 'static) -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    checker(true, lock_of)
}

/// Safety under pauses: as [`safety`], except that a client whose process
/// is paused while it holds is no longer counted as holding by its
/// replies (a paused daemon cannot tell its client `LockLost`); the
/// client stops at its lease's end on its own, and the lease check
/// (`LeaseChecker`, in both) judges exclusion by that, always.
pub fn safety_under_pauses() -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    checker(false, |_| LockName::unnamed())
}

/// [`safety_under_pauses`] of a run with `names` locks, per name.
pub fn safety_under_pauses_of(names: u64) -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    checker(false, move |c| lock_for(c, names))
}

/// Judges each lock name on its own: its clients' leases never overlap
/// and its fences rise (from the events and from the clients' replies).
fn checker(
    judge_paused_holders: bool,
    lock_of: impl Fn(ClientId) -> LockName + 'static,
) -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    let mut seen_events = 0usize;
    let mut seen_replies = 0usize;
    let mut office: BTreeMap<u64, NodeId> = BTreeMap::new();
    let mut holding: BTreeMap<(NodeId, ClientId), u128> = BTreeMap::new();
    let mut max_fence: BTreeMap<LockName, u128> = BTreeMap::new();
    let mut max_grant_term = 0u64;
    let mut leases: BTreeMap<LockName, lockservice::check::LeaseChecker> = BTreeMap::new();
    move |w| {
        for (t, node, e) in &w.events[seen_events..] {
            // reliability.md's stage after leases, always: no two client
            // leases of one name overlap, its fences rise in grant order
            // (pauses included).
            if let ElEvent::Lock(NamedEvent::Lock { name, event }) = e {
                leases
                    .entry(name.clone())
                    .or_default()
                    .on_event(*t, *node, event)
                    .map_err(|e| format!("{name}: {e}"))?;
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
                    let name = lock_of(*client);
                    let max = max_fence.entry(name.clone()).or_default();
                    if *fence <= *max {
                        return Err(format!("{node} granted {name} fence {fence:#x} after {max:#x}"));
                    }
                    *max = *fence;
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
        let mut per_name: BTreeMap<LockName, Vec<(NodeId, ClientId)>> = BTreeMap::new();
        for (node, client) in holding.keys() {
            per_name.entry(lock_of(*client)).or_default().push((*node, *client));
        }
        if let Some((name, holders)) = per_name.iter().find(|(_, h)| h.len() > 1) {
            return Err(format!("clients hold {name} at once: {holders:?} ({holding:x?})"));
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
    cluster_of(seed, n, alg, m, Workload::ONE_LOCK)
}

/// Who asks for what: `per_node` clients on every process, asking for
/// `names` locks ([`lock_for`]; 1: all the unnamed lock).
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Locks asked for.
    pub names: u64,
    /// Clients per process.
    pub per_node: u64,
}

impl Workload {
    /// One client per process, one lock (the families before named locks).
    pub const ONE_LOCK: Workload = Workload { names: 1, per_node: 1 };

    /// The clients of process `i`: `i` for one per process, else
    /// `100·i + k`.
    pub fn clients(self, i: u32) -> Vec<ClientId> {
        if self.per_node <= 1 {
            return vec![ClientId(u64::from(i))];
        }
        (0..self.per_node).map(|k| ClientId(100 * u64::from(i) + k)).collect()
    }
}

/// As [`cluster_without`], with the clients of `load`.
pub fn cluster_of(seed: u64, n: u32, alg: Algorithm, m: Rules<ElRule>, load: Workload) -> Sim<ElNode> {
    let net = NetConfig::reliable(Duration::from_micros(200), Duration::from_millis(2));
    let mut sim = Sim::new(seed, n, net, ElConfig { rules: m, ..config(alg, n) });
    sim.clients(Box::new(move |_, node, client, reply, rng| {
        let ms = |rng: &mut timer::SeededRng, lo, hi| Duration::from_millis(rng.range_inclusive(lo, hi));
        match reply {
            LockReply::Granted { .. } => vec![(ms(rng, 1, 15), Action::Request(node, client, LockRequest::Release))],
            LockReply::Released | LockReply::TimedOut | LockReply::LockLost { .. } => {
                vec![(ms(rng, 0, 10), acquire_of(node, client, load.names))]
            }
            LockReply::Refused { .. }
            | LockReply::Renewed { .. }
            | LockReply::Locks { .. }
            | LockReply::Leader { .. } => {
                vec![]
            }
        }
    }));
    for i in 1..=n {
        for c in load.clients(i) {
            sim.at(Instant::from_millis(20 + u64::from(i)), acquire_of(NodeId(i), c, load.names));
        }
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
        ElRule::OfficeWideCounter,
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
    converged_of(sim, Workload::ONE_LOCK)
}

/// [`converged`] for the clients of `load`: every client of every live
/// process was served again, whatever lock it asks for (no name blocks
/// another's progress after the faults).
pub fn converged_of(sim: &mut Sim<ElNode>, load: Workload) -> Result<(), sim::SimError> {
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
    let served: Vec<(NodeId, ClientId)> = w
        .replies
        .iter()
        .filter(|(t, _, _, r)| *t >= since && matches!(r, LockReply::Granted { .. }))
        .map(|(_, n, c, _)| (*n, *c))
        .collect();
    for (id, _) in w.live() {
        for c in load.clients(id.0) {
            if !served.contains(&(id, c)) {
                let name = lock_for(c, load.names);
                return Err(
                    sim.error(format!("{id}'s client {c} ({name}) not served after the faults\n{}", views.join("\n")))
                );
            }
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
    run_of(seed, n, alg, m, plan, Workload::ONE_LOCK, checker)
}

/// [`run_with_faults`] with the clients of `load`.
pub fn run_of(
    seed: u64,
    n: u32,
    alg: Algorithm,
    m: Rules<ElRule>,
    plan: &FaultPlan,
    load: Workload,
    checker: impl FnMut(&sim::World<ElNode>) -> Result<(), String> + 'static,
) -> Result<(), sim::SimError> {
    let mut sim = cluster_of(seed, n, alg, m, load).without_trace();
    sim.check(checker);
    sim.random_faults(plan);
    // Restarted processes get their clients back (one already waiting or
    // holding is refused, changing nothing).
    for t in (600..8_000).step_by(300) {
        for i in 1..=n {
            for c in load.clients(i) {
                sim.at(Instant::from_millis(t), acquire_of(NodeId(i), c, load.names));
            }
        }
    }
    sim.run_until(Instant::from_millis(5_000))?;
    converged_of(&mut sim, load)
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
