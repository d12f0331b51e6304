//! ntmutexd in the deterministic simulator: clients loop acquire → hold →
//! release on every site while sites crash, restart, pause, lose their
//! clients and are cut off or slowed beyond `t_msg`; the lock and fence
//! invariants are checked after every step as reliability.md's "Invariants
//! by stage" says — those of the stage before leases (`staged_safety`) and,
//! always, those after leases (`lease_safety`: no two client leases
//! overlap, fences rise in grant order) — and every live site's client is
//! served again once faults stop (`Sim::converge`).
//!
//! The long sweep: `SIM_SEEDS=3000 cargo test -p ntmutexd --test sim
//! sweep_seeds` (shard it with `SIM_SEED_FROM`).

mod workload;

use std::collections::BTreeMap;
use std::time::Duration;

use ftcore::{ClientId, NodeId, Protocol};
use lockservice::{LockReply, LockRequest};
use ntmutexd::{Mech, NtConfig, NtEvent};
use sim::{for_seeds, for_seeds_with, Action, FaultPlan, NetConfig, SimError};
use timer::Instant;
use workload::*;

#[test]
fn failure_free_contention_never_recovers_and_serves_everyone() {
    for_seeds(30, |seed| {
        let mut sim = cluster(seed, 5, 3, HEAVY);
        sim.check(safety(Default::default()));
        sim.run_until(Instant::from_millis(3_000))?;
        let w = sim.world();
        // The first token is made by the root's regeneration round (never
        // chosen locally); after that nothing is ever regenerated.
        let first = w.events.iter().position(|(_, _, e)| matches!(e, NtEvent::Regenerated { .. }));
        if let Some(e) = w.events.iter().enumerate().find(|(i, (_, node, e))| {
            matches!(e, NtEvent::RecoveryStarted { .. } | NtEvent::Suspected { .. })
                || (matches!(e, NtEvent::Regenerated { .. }) && (Some(*i) != first || *node != NodeId(1)))
        }) {
            return Err(sim.error(format!("failure-free run recovered: {e:?}")));
        }
        let g = grants(w);
        assert!(g.len() > 100, "seed {seed}: only {} grants", g.len());
        everyone_served_since(w, Instant::from_millis(2_000)).map_err(|m| sim.error(m))
    });
}

#[test]
fn crash_of_the_holder_regenerates_and_service_resumes() {
    for_seeds(40, |seed| {
        let mut sim = cluster(seed, 5, 3, HEAVY);
        let max_fence = std::rc::Rc::new(std::cell::Cell::new(0));
        sim.check(safety(max_fence.clone()));
        sim.run_until(Instant::from_millis(800))?;
        // The token may be in flight: step until somebody holds it.
        let mut holder = None;
        for _ in 0..100 {
            holder = sim.world().live().find(|(_, c)| c.has_token()).map(|(id, _)| id);
            if holder.is_some() {
                break;
            }
            sim.run_for(Duration::from_micros(100))?;
        }
        let Some(holder) = holder else { return Err(sim.error("no token holder")) };
        sim.after(Duration::ZERO, Action::Crash(holder));
        let killed = sim.now();
        sim.run_for(Duration::from_millis(1_500))?;
        let w = sim.world();
        let regen = w.events.iter().any(|(_, _, e)| matches!(e, NtEvent::Regenerated { .. }));
        if !regen {
            return Err(sim.error(format!("holder {holder} crashed but nobody regenerated")));
        }
        let next_grant = grants(w).into_iter().find(|(t, _, _)| *t > killed).map(|(t, _, _)| t);
        let Some(next_grant) = next_grant else { return Err(sim.error("no grant after the crash")) };
        // Detection within suspect_after (+ a heartbeat), then a search and
        // a regeneration round: well under half a second.
        let took = next_grant.saturating_since(killed);
        if took > Duration::from_millis(300) {
            return Err(sim.error(format!("kill -> next grant took {took:?}")));
        }
        everyone_served_since(w, killed + Duration::from_millis(500)).map_err(|m| sim.error(m))
    });
}

#[test]
fn crash_of_a_queue_member_is_repaired_by_m1() {
    for_seeds(40, |seed| {
        let mut sim = cluster(seed, 6, 3, HEAVY);
        sim.check(safety(Default::default()));
        sim.run_until(Instant::from_millis(700))?;
        // A site with a position that is not the holder.
        let victim = sim.world().live().find(|(_, c)| c.position().is_some() && !c.has_token()).map(|(id, _)| id);
        let Some(victim) = victim else { return Ok(()) };
        sim.after(Duration::ZERO, Action::Crash(victim));
        let killed = sim.now();
        sim.run_for(Duration::from_millis(1_500))?;
        let w = sim.world();
        let mechs: Vec<Mech> = w
            .events
            .iter()
            .filter(|(t, _, _)| *t >= killed)
            .filter_map(|(_, _, e)| match e {
                NtEvent::RecoveryStarted { mech } => Some(*mech),
                _ => None,
            })
            .collect();
        if !mechs.contains(&Mech::M1) && !mechs.is_empty() && !mechs.contains(&Mech::M3) {
            return Err(sim.error(format!("queue member crash recovered by {mechs:?}")));
        }
        // The only way a non-holder crash loses the token: it was handed
        // to the crashed site (the sender keeps no copy).
        let regen = w.events.iter().any(|(t, _, e)| *t >= killed && matches!(e, NtEvent::Regenerated { .. }));
        let token_died_there = sim
            .trace()
            .iter()
            .any(|l| l.contains(&format!("->{victim} ")) && l.contains("(receiver down)") && l.contains("Token {"));
        if regen && !token_died_there {
            return Err(sim.error("a non-holder crash regenerated the token while it was not lost"));
        }
        everyone_served_since(w, killed + Duration::from_millis(500)).map_err(|m| sim.error(m))
    });
}

#[test]
fn k_and_more_consecutive_predecessors_failing_go_through_m2() {
    for_seeds(30, |seed| {
        let mut sim = cluster(seed, 8, 1, HEAVY);
        sim.check(safety(Default::default()));
        sim.run_until(Instant::from_millis(700))?;
        // Crash two sites at once (k = 1: M1 cannot skip both).
        let victims: Vec<NodeId> =
            sim.world().live().filter(|(_, c)| c.position().is_some()).map(|(id, _)| id).take(2).collect();
        for v in &victims {
            sim.after(Duration::ZERO, Action::Crash(*v));
        }
        let killed = sim.now();
        sim.run_for(Duration::from_millis(2_000))?;
        everyone_served_since(sim.world(), killed + Duration::from_millis(800)).map_err(|m| sim.error(m))
    });
}

#[test]
fn random_crashes_and_restarts_keep_mutual_exclusion_and_serve_everyone() {
    for_seeds(120, |seed| {
        let n = 3 + (seed % 6) as u32;
        let plan = FaultPlan {
            start: Instant::from_millis(400),
            end: Instant::from_millis(4_000),
            crashes: 5,
            max_down: (n - 1) / 2,
            downtime: (Duration::from_millis(50), Duration::from_millis(1_500)),
            ..FaultPlan::default()
        };
        run_faulty(seed, n, 2, plan).map(|_| ())
    });
}

#[test]
fn same_seed_same_trace() {
    let plan = FaultPlan { crashes: 4, max_down: 2, ..FaultPlan::default() };
    let a = run_faulty(11, 6, 2, plan.clone()).unwrap();
    let b = run_faulty(11, 6, 2, plan).unwrap();
    assert_eq!(a.trace_hash(), b.trace_hash());
    assert_eq!(a.trace().len(), b.trace().len());
}

/// Messages per critical section under light uniform load, failure-free
/// (performance.md: ≤ log2(N) + 2 at N = 32), lease traffic counted
/// apart. Prints the figures.
#[test]
fn messages_per_critical_section_light_load() {
    for n in [8u32, 16, 32] {
        let (cs, msgs, per_cs, lease_per_s) = messages_per_cs(n);
        let bound = f64::from(n).log2() + 2.0;
        eprintln!(
            "N = {n}: {cs} critical sections, {msgs} messages, {per_cs:.2} per CS (bound {bound:.2}); \
             lease traffic {lease_per_s:.0} messages/s, apart"
        );
        assert!(per_cs <= bound, "N = {n}: {per_cs:.2} messages per CS exceeds {bound:.2}");
    }
}

/// Crashes and restarts (a minority at a time), partitions, pauses, slow
/// links beyond `t_msg` and client disconnects, mixed: every fault kind but
/// majority-down episodes (see `every_fault_kind_with_a_majority_down`).
/// Seeds 0..40 pass; longer sweeps of it find the stale-token bug of
/// `a_falsely_suspected_holder_keeps_its_stale_token`.
#[test]
fn every_fault_kind_keeps_the_staged_invariants_and_serves_everyone() {
    // 2701: the silent stale holder of seed 676 (sweep_regressions); 2862:
    // a paused holder whose answers all went to a crashed site (a stalled
    // holder now asks every peer for the epoch in use).
    for_seeds_with(&[2701, 2862], 40, every_fault_kind_but_majority_down);
}

fn every_fault_kind_but_majority_down(seed: u64) -> Result<(), SimError> {
    let n = 3 + (seed % 6) as u32;
    let plan = FaultPlan { majority_downs: 0, ..everything(n) };
    run_faulty(seed, n, 2, plan).map(|_| ())
}

/// The daemon's liveness probes (one peer asked `AreYouAlive` per
/// heartbeat, for status) add messages whose answers reach the detector's
/// and M1's handlers: every fault kind, with them on, keeps the same
/// invariants.
#[test]
fn every_fault_kind_with_liveness_probes() {
    for_seeds(40, |seed| {
        let n = 3 + (seed % 6) as u32;
        let base = cfg(2);
        let config = NtConfig { liveness_every: Some(base.heartbeat), ..base };
        run_faulty_cfg(seed, n, everything(n), config).map(|_| ())
    });
}

/// Regression seeds of `every_fault_kind_but_majority_down` that found a
/// falsely suspected token holder never told of the newer epoch (two
/// tokens long after the detector was accurate again): any message from a
/// suspected peer unsuspects it, so when the stale holder's late reply
/// reached the regenerator after the regeneration, the probes stopped and
/// nothing carried the new epoch to it. Fixed: a site that hears from a
/// site behind its epoch answers with the newer one (node/mod.rs). Seen
/// (N = 3, after a pause or a slow period): 210 (two tokens after
/// converging), 258 (the site that suspected the holder crashed), 450.
#[test]
fn a_falsely_suspected_holder_learns_the_newer_epoch() {
    for_seeds_with(STALE_TOKEN_REGRESSIONS, 0, every_fault_kind_but_majority_down);
}

const STALE_TOKEN_REGRESSIONS: &[u64] = &[210, 258, 450];

/// Every fault kind, a majority-down episode included. Its regression
/// seeds broke "a new token's first fence exceeds every fence granted
/// before it was created" before epochs and promises were stored and the
/// first token came from a promise round (foundation.md, Durable state):
///
/// - 30, 186, 283, 378 (N = 3): a majority restarted while the one survivor
///   was partitioned away or paused; seeing no running site they
///   bootstrapped a token again, with the first epoch (0x400) below the
///   survivor's;
/// - 240 (N = 3): the survivor, partitioned off, proposed a regeneration at
///   the epoch it last knew (0x4001); after the heal a restarted site that
///   had acked 0x4400 in its previous life acked it, and the token of
///   epoch 0x4001 granted below fences of 0x4400 already granted.
#[test]
fn every_fault_kind_with_a_majority_down() {
    // The long sweep: SIM_SEEDS=3000.
    for_seeds_with(MAJORITY_DOWN_REGRESSIONS, 60, |seed| {
        let n = 3 + (seed % 6) as u32;
        run_faulty(seed, n, 2, everything(n)).map(|_| ())
    });
}

/// Seeds of `every_fault_kind_with_a_majority_down` that fail today.
/// 1747 (found in a 3,000-seed run): a holder cut off during a regeneration
/// answered the Hellos of restarting sites with its old epoch, and was
/// never told the newer one (HelloAck had no "sender is behind" answer).
/// 210 (found with leases in a 600-seed run): a holder whose renewal was
/// refused dropped its token and ended its client's hold at once; its own
/// regeneration then granted a new client while the old one's lease (and
/// CMD, until ftctl's SIGKILL) still ran. A lost hold now lasts until its
/// lease ends (`LocalLocks::lose`).
const MAJORITY_DOWN_REGRESSIONS: &[u64] = &[30, 186, 210, 240, 283, 378, 1747];

/// The long sweep runs with `SIM_SEEDS=3000` (each seed is also the
/// simulation's seed, so the printed `SIM_SEED` reruns it exactly); a short
/// one always runs.
#[test]
fn sweep_seeds() {
    for_seeds(10, sweep_seed);
}

fn sweep_seed(seed: u64) -> Result<(), SimError> {
    let n = 4 + (seed % 5) as u32;
    let plan = FaultPlan { crashes: 6, majority_downs: 0, ..everything(n) };
    run_faulty(seed, n, 3, plan).map(|_| ())
}

/// The sweep with half its crashes process kills on hosts that stay up
/// (peers hear at once that the process is gone, `Action::Kill`): the hint
/// path (ntmutexd's `peer_gone`) under every other fault. Long run:
/// `SIM_SEEDS=3000 cargo test --release -p ntmutexd --test sim sweep_seeds_with_kills`.
#[test]
fn sweep_seeds_with_kills() {
    for_seeds(10, |seed| {
        let n = 4 + (seed % 5) as u32;
        let plan = FaultPlan { crashes: 6, kills: 3, majority_downs: 0, ..everything(n) };
        run_faulty(seed, n, 3, plan).map(|_| ())
    });
}

/// Site 2 takes the token once and its client leaves; a lease later
/// (nothing of 2's binds anyone any more) its process dies — `kill`: its
/// peers hear at once (`Action::Kill`), else its host vanishes with it
/// (`Action::Crash`) — and site 4 asks 0.1 ms later. Returns the time
/// from the death to 4's grant.
fn idle_holder_dies(seed: u64, kill: bool) -> Result<Duration, SimError> {
    let mut sim = sites(seed, 5, 3);
    sim.check(safety(Default::default()));
    sim.check(lease_safety());
    sim.clients(Box::new(|_, node, client, reply, _| match reply {
        LockReply::Granted { .. } => {
            vec![(Duration::from_millis(2), Action::Request(node, client, LockRequest::Release))]
        }
        _ => vec![],
    }));
    sim.at(Instant::from_millis(300), acquire(NodeId(2), ClientId(2)));
    let dies = Instant::from_millis(500);
    sim.at(dies, if kill { Action::Kill(NodeId(2)) } else { Action::Crash(NodeId(2)) });
    sim.at(dies + Duration::from_micros(100), acquire(NodeId(4), ClientId(4)));
    sim.run_until(Instant::from_millis(499))?;
    if !sim.world().core(NodeId(2)).is_some_and(|c| c.has_token()) {
        return Err(sim.error("site 2 does not hold the token idle when it dies"));
    }
    sim.run_until(dies + Duration::from_millis(500))?;
    let granted = grants(sim.world()).into_iter().find(|(t, node, _)| *t > dies && *node == NodeId(4));
    granted.map(|(t, _, _)| t.saturating_since(dies)).ok_or_else(|| sim.error("site 4 never granted"))
}

/// issue 15's process-crash target, in the simulator (t_msg = 5 ms,
/// suspect_after = 60 ms, one-way delays 0.2–3 ms): a killed idle holder
/// is replaced within a few round trips of the hint, where silence costs
/// the Commit timer ((N + 1)·t_msg = 30 ms) and a search window first.
#[test]
fn a_killed_idle_holder_is_replaced_within_round_trips_of_the_hint() {
    let (mut hinted, mut silent) = (Vec::new(), Vec::new());
    for seed in 0..20 {
        hinted.push(idle_holder_dies(seed, true).unwrap_or_else(|e| panic!("{e}")));
        silent.push(idle_holder_dies(seed, false).unwrap_or_else(|e| panic!("{e}")));
    }
    let worst = |v: &[Duration]| v.iter().copied().max().unwrap_or_default();
    eprintln!("death -> next grant over 20 seeds, worst: killed {:?}, crashed {:?}", worst(&hinted), worst(&silent));
    // The hint, a search of the live sites, a promise round and a lease
    // renewal: four round trips of at most 6 ms.
    assert!(worst(&hinted) <= Duration::from_millis(25), "killed: {hinted:?}");
    assert!(silent.iter().all(|s| *s >= 6 * T_MSG), "crashed: {silent:?}");
}

/// Seeds of `sweep_seeds` that failed before regenerations were promised
/// through stored promise windows (the first 300 seeds were swept): 105
/// (N = 4) — n4 collects acks for proposal 0x1803 during a slow period,
/// is paused, and meanwhile n3 regenerates 0x2002 and grants; on resume n4
/// handles its overdue regeneration timer first (as a paused process
/// does) and completes 0x1803 from its old state, granting 0x180300000001
/// after 0x20020000001c: the concurrent-regeneration bug of
/// `regeneration_race_with_delays_up_to_twice_t_msg`, reached by a pause.
/// Now the proposal's deadline (`lease·(1−ρ)` after sending) abandons it.
#[test]
fn sweep_regressions() {
    for_seeds_with(SWEEP_FAILING, 0, sweep_seed);
}

/// 676 (found in the 3,000-seed sweep): a holder falsely suspected during
/// a pause answered an old probe with `IAmAlive`, which unsuspected it
/// without telling it the newer epoch (probes and their answers did not
/// get the "sender is behind" answer), and it granted old-epoch fences for
/// as long as nobody wrote to it.
const SWEEP_FAILING: &[u64] = &[105, 676];

/// Messages per recovery, by mechanism (printed; M1 is bounded by the spec:
/// at most k + 3, no broadcast).
#[test]
fn messages_per_recovery_by_mechanism() {
    let k = 3;
    // M1: the middle of the queue dies; its successor asks the next
    // predecessor.
    let mut sim = quiet_queue(1, 6, k);
    sim.run_until(Instant::from_millis(600)).unwrap();
    assert_eq!(sim.world().core(NodeId(4)).unwrap().position(), Some(3), "queue 1→…→6 formed");
    sim.after(Duration::ZERO, Action::Crash(NodeId(4)));
    let (mech, m1) = recovery_messages(&mut sim, Instant::from_millis(2_000)).expect("a recovery");
    let total: u64 = m1.values().sum();
    eprintln!("M1 recovery ({mech:?}): {total} messages {m1:?}");
    assert_eq!(mech, Mech::M1);
    assert!(!m1.contains_key("search_prev") && !m1.contains_key("search_queue"), "M1 must not broadcast");
    let own: u64 =
        ["are_you_alive", "i_am_alive", "connection", "commit"].iter().map(|k| m1.get(k).copied().unwrap_or(0)).sum();
    assert!(own <= k as u64 + 3 + 2, "M1 used {own} messages");

    // M2: k = 1 and two consecutive predecessors die.
    let mut sim = quiet_queue(2, 6, 1);
    sim.run_until(Instant::from_millis(600)).unwrap();
    sim.after(Duration::ZERO, Action::Crash(NodeId(3)));
    sim.after(Duration::ZERO, Action::Crash(NodeId(4)));
    let (mech, m2) = recovery_messages(&mut sim, Instant::from_millis(2_000)).expect("a recovery");
    eprintln!("M2 recovery ({mech:?}): {} messages {m2:?}", m2.values().sum::<u64>());

    // M3: a restarted site makes its first request through M3.
    let mut sim = quiet_queue(3, 6, k);
    sim.run_until(Instant::from_millis(600)).unwrap();
    sim.after(Duration::ZERO, Action::Crash(NodeId(6)));
    sim.run_for(Duration::from_millis(300)).unwrap();
    sim.after(Duration::ZERO, Action::Restart(NodeId(6)));
    sim.after(Duration::from_millis(100), acquire(NodeId(6), ClientId(60)));
    let (mech, m3) = recovery_messages(&mut sim, Instant::from_millis(3_000)).expect("a recovery");
    eprintln!("M3 recovery ({mech:?}): {} messages {m3:?}", m3.values().sum::<u64>());
    assert_eq!(mech, Mech::M3);
}

/// False suspicion: the holder is cut off, the others regenerate without
/// it. Mutual exclusion cannot hold while the detector is wrong; fences
/// still order every grant of one token, regenerations only raise epochs,
/// and after the partition heals the stale holder drops its token (its
/// client is told LockLost) so a single token remains.
#[test]
fn false_suspicion_of_the_holder_keeps_fences_ordered_and_one_token_after_healing() {
    for_seeds(30, |seed| {
        let mut sim = cluster(seed, 5, 2, HEAVY);
        sim.run_until(Instant::from_millis(700))?;
        let holder = find_holder(&mut sim, 1000)?;
        sim.after(Duration::ZERO, Action::Partition(vec![holder]));
        sim.after(Duration::from_millis(800), Action::Heal);
        let cut = sim.now();
        let healed = cut + Duration::from_millis(800);
        sim.run_for(Duration::from_millis(2_500))?;
        let w = sim.world();
        // Per epoch, fences strictly increase in grant order.
        let mut last_per_epoch: BTreeMap<u64, u128> = BTreeMap::new();
        for (t, n, f) in grants(w) {
            let (epoch, _) = lockservice::fence_parts(f);
            if let Some(prev) = last_per_epoch.insert(epoch, f) {
                if f <= prev {
                    return Err(sim.error(format!("{t} {n}: fence {f:#x} after {prev:#x} in epoch {epoch}")));
                }
            }
        }
        let regens = regenerated_epochs(w);
        if regens.windows(2).any(|p| p[1] <= p[0]) {
            return Err(sim.error(format!("regenerated epochs not increasing: {regens:?}")));
        }
        // The majority side went on without the cut-off holder.
        let served_meanwhile =
            grants(w).iter().any(|(t, n, _)| *t > cut + Duration::from_millis(100) && *t < healed && *n != holder);
        if !served_meanwhile {
            return Err(sim.error("the majority was not served while the holder was cut off"));
        }
        // After healing: one token, and everyone served again.
        let tokens = w.live().filter(|(_, c)| c.has_token()).count();
        if tokens > 1 {
            return Err(sim.error(format!("{tokens} tokens after healing")));
        }
        everyone_served_since(w, healed + Duration::from_millis(300)).map_err(|m| sim.error(m))
    });
}

/// Graceful leave (SIGTERM) of the holder hands the token on: nobody has to
/// regenerate, and everyone left is served.
#[test]
fn graceful_leave_of_the_holder_hands_the_token_on() {
    for_seeds(30, |seed| {
        let mut sim = cluster(seed, 5, 2, HEAVY);
        sim.check(safety(Default::default()));
        sim.run_until(Instant::from_millis(700))?;
        let holder = find_holder(&mut sim, 1000)?;
        sim.after(Duration::ZERO, Action::Shutdown(holder));
        sim.run_for(Duration::from_millis(100))?;
        if !sim.world().core(holder).is_some_and(|c| c.is_left()) {
            return Err(sim.error(format!("{holder} did not finish leaving")));
        }
        // The process exits once it has left.
        sim.after(Duration::ZERO, Action::Crash(holder));
        let left = sim.now();
        sim.run_for(Duration::from_millis(1_500))?;
        let w = sim.world();
        if let Some(e) = w.events.iter().find(|(t, _, e)| *t >= left && matches!(e, NtEvent::Regenerated { .. })) {
            return Err(sim.error(format!("the token was regenerated after a graceful leave: {e:?}")));
        }
        everyone_served_since(w, left + Duration::from_millis(500)).map_err(|m| sim.error(m))
    });
}

/// Invariant 4: M1 and M2 keep the relative order of the surviving queued
/// requests (the queue is 1 → 2 → … → 6; sites die in the middle).
#[test]
fn m1_and_m2_preserve_the_order_of_surviving_requests() {
    for (k, victims, expect_mech) in [(3, vec![4], Mech::M1), (1, vec![3, 4], Mech::M2)] {
        let mut sim = queue_holding(5, 6, k, Duration::from_millis(400));
        sim.check(safety(Default::default()));
        sim.run_until(Instant::from_millis(500)).unwrap();
        let w = sim.world();
        for i in 1..=6u32 {
            assert_eq!(w.core(NodeId(i)).unwrap().position(), Some(u64::from(i) - 1), "queue 1→…→6 formed");
        }
        for v in &victims {
            sim.after(Duration::ZERO, Action::Crash(NodeId(*v)));
        }
        let killed = sim.now();
        sim.run_for(Duration::from_secs(4)).unwrap();
        let w = sim.world();
        let mechs: Vec<Mech> = w
            .events
            .iter()
            .filter_map(|(_, _, e)| match e {
                NtEvent::Recovered { mech, .. } => Some(*mech),
                _ => None,
            })
            .collect();
        assert_eq!(mechs, vec![expect_mech], "k = {k}, victims {victims:?}");
        let order: Vec<u32> = grants(w).into_iter().filter(|(t, _, _)| *t >= killed).map(|(_, n, _)| n.0).collect();
        let survivors: Vec<u32> = (2..=6).filter(|i| !victims.contains(i)).collect();
        assert_eq!(&order[..survivors.len()], &survivors[..], "grant order after the crash, k = {k}");
    }
}

/// Delays beyond `t_msg` throughout (N = 4, crashes as in the default
/// plan), so the detector is never accurate and only the invariants that
/// hold always are checked: two live sites may both regenerate, and the one
/// with the lower epoch must not complete second and grant a smaller fence
/// than one already granted.
fn delays_beyond_t_msg(seed: u64, net: NetConfig) -> Result<(), SimError> {
    let n = 4;
    let mut sim = cluster_on(seed, n, 2, HEAVY, net);
    sim.check(staged_safety(None));
    sim.random_faults(&FaultPlan::default());
    keep_clients_coming(&mut sim, n, Instant::from_millis(500), Instant::from_millis(6_000));
    sim.run_until(Instant::from_millis(6_000))
}

/// The audit's configuration: every delay exactly `2·t_msg`. With today's
/// node.rs no regeneration completes in it (a round trip, `4·t_msg`,
/// outlasts the `2·t_msg` regeneration window, so every attempt gives up),
/// and 2 000 seeds found no violation; the next variant exercises the race.
#[test]
#[ignore = "sweep for the concurrent-regeneration bug (issue 7); run with --ignored"]
fn regeneration_race_with_every_delay_at_twice_t_msg() {
    for_seeds(200, |seed| delays_beyond_t_msg(seed, net().every_delay(2 * T_MSG)));
}

/// Delays uniform up to `2·t_msg`: regenerations complete, concurrently
/// at times, with acks crossing each other. It found the bug the audit
/// described, before promises were stored and windowed: seed 902 (found in a sweep of 2 000): n1 and n4 both suspect
/// a live site and regenerate at once, n1 proposing 0x1800 and n4 0x1c03;
/// n2 and n3 ack 0x1800 and then 0x1c03; n4 completes first and grants
/// 0x1c0300000001, then n1's older acks land, it completes second and
/// grants 0x180000000001 — a smaller fence after a larger one. An ack for
/// a lower proposal must not count once the acker has acked a higher one.
/// Now an acker refuses other proposers for the promise window and lower
/// epochs for ever, and a proposer uses only a majority complete within
/// its deadline. The long sweep: `SIM_SEEDS=2000`.
#[test]
fn regeneration_race_with_delays_up_to_twice_t_msg() {
    let net = NetConfig::reliable(Duration::from_micros(200), 2 * T_MSG);
    for_seeds_with(REGEN_RACE_REGRESSIONS, 40, |seed| delays_beyond_t_msg(seed, net.clone()));
}

/// Seeds of `regeneration_race_with_delays_up_to_twice_t_msg` that found
/// the race before regenerations were promised through stored promise
/// windows (foundation.md): pinned.
const REGEN_RACE_REGRESSIONS: &[u64] = &[902];

/// Cold restarts (issue: durable node state): every site is killed at once
/// and restarted together, twice, under load, sometimes with one disk
/// wiped (a fresh node must recover what the others stored before it
/// promises anything). Checked after every step: no fence granted twice, a
/// new token's first fence above every fence granted before it, and —
/// crashes are no false suspicion — fences strictly increasing across the
/// whole run, in grant order (global, not per epoch).
fn cold_restarts(seed: u64, wipe: bool) -> Result<(), SimError> {
    let n = 3 + (seed % 3) as u32;
    let mut sim = cluster(seed, n, 2, HEAVY);
    sim.check(staged_safety(Some(Duration::ZERO)));
    keep_clients_coming(&mut sim, n, Instant::from_millis(500), Instant::from_millis(6_000));
    for (down, up) in [(900, 960), (2_200, 2_300)] {
        for i in 1..=n {
            sim.at(Instant::from_millis(down), Action::Crash(NodeId(i)));
            sim.at(Instant::from_millis(up), Action::Restart(NodeId(i)));
        }
        if wipe {
            let victim = NodeId(1 + (seed % u64::from(n)) as u32);
            sim.at(Instant::from_millis(up - 1), Action::WipeDisk(victim));
        }
    }
    sim.run_until(Instant::from_millis(4_000))?;
    everyone_served_since(sim.world(), Instant::from_millis(3_000)).map_err(|m| sim.error(m))?;
    // Every token after a cold restart came from a promise round above all
    // that was stored: its epoch exceeds every earlier one.
    let epochs = regenerated_epochs(sim.world());
    if epochs.len() < 3 || epochs.windows(2).any(|w| w[1] <= w[0]) {
        return Err(sim.error(format!("tokens created with epochs {epochs:?}: expected 3+, increasing")));
    }
    Ok(())
}

#[test]
fn cold_restart_of_every_site_keeps_fences_increasing() {
    for_seeds(20, |seed| cold_restarts(seed, false));
}

#[test]
fn cold_restart_with_a_wiped_disk_keeps_fences_increasing() {
    for_seeds(20, |seed| cold_restarts(seed, true));
}

/// `sim::bytes`, the fuzz targets' driver (`fuzz/`, core_ntmutexd), over 20,000
/// seeded random inputs: peer messages and client requests decoded as the
/// real types, clients leaving, links lost, peers unreachable, time
/// passing, from a fresh or a decoded stored state. The core never panics
/// and never asks to be woken in the past after handling that time.
#[test]
fn arbitrary_inputs_never_panic_the_core() {
    let d = sim::wire_decoders!(ntmutexd::NtNode);
    let handled = sim::bytes::smoke(|| cfg(3), &d, 20_000, 7);
    assert!(handled > 200_000, "only {handled} inputs decoded and handled");
}
