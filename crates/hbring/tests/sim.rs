//! The heartbeat ring in the deterministic simulator: crashes, restarts,
//! partitions, pauses and slow links; invariants checked after every step
//! (a suspicion of a live node is allowed only while such a fault, or its
//! after-effect, lasts), convergence after `Sim::converge`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ftcore::{Incarnation, NodeId, Protocol};
use hbring::{HbConfig, HbEvent, HbNode};
use membership::Status;
use sim::{for_seeds, for_seeds_with, Action, FaultPlan, NetConfig, Sim, SimError, World};
use timer::Instant;

const HEARTBEAT: Duration = Duration::from_millis(50);
const SUSPECT: Duration = Duration::from_millis(250);

fn cluster(seed: u64, n: u32, net: NetConfig) -> Sim<HbNode> {
    Sim::new(seed, n, net, HbConfig::new(HEARTBEAT, SUSPECT))
}

fn tcp() -> NetConfig {
    NetConfig::reliable(Duration::from_micros(100), Duration::from_millis(3))
}

/// Safety, after every step: a node is alive at its own current life in
/// its own view, and no view holds a life newer than the node has had.
fn views_are_sane(w: &World<HbNode>) -> Result<(), String> {
    for (id, core) in w.live() {
        let view = core.ring().view();
        let me = view.liveness(id).ok_or("self missing")?;
        if me.status != Status::Alive || me.incarnation != core.incarnation() {
            return Err(format!("{id} sees itself as {me:?}, its life is {}", core.incarnation()));
        }
        for (other, l) in view.entries() {
            let slot = &w.slots[other.0 as usize - 1];
            let real = slot.core.as_ref().map_or(slot.incarnation, |c| c.incarnation());
            if l.incarnation > real {
                return Err(format!(
                    "{id} believes {other} is in life {} but it has only reached {real}",
                    l.incarnation
                ));
            }
        }
    }
    Ok(())
}

/// With a timely network and no partitions, nobody suspects a live life.
fn no_false_suspicion(w: &World<HbNode>) -> Result<(), String> {
    for (_, by, e) in w.step_events() {
        if let HbEvent::Suspected { node, inc } = e {
            if w.core(*node).is_some_and(|c| c.incarnation() == *inc) {
                return Err(format!("{by} suspected {node} in its live life {inc}"));
            }
        }
    }
    Ok(())
}

/// How long after the last pause, partition or slow link ended (and its
/// delayed messages landed) a suspicion may still be raised by it: a
/// detector that missed heartbeats during the fault times out up to
/// `suspect_after` later, and the next heartbeat takes one period.
const GRACE: Duration = Duration::from_millis(250 + 50 + 10);

/// False suspicion only where the fault model allows it: nobody suspects a
/// live life while the network and nodes have been timely for `GRACE`.
fn no_false_suspicion_while_timely(w: &World<HbNode>) -> Result<(), String> {
    if w.timely_for(GRACE) {
        no_false_suspicion(w)
    } else {
        Ok(())
    }
}

/// Liveness, once faults have stopped: every live node's view is exactly
/// the set of live nodes in their current lives, so successors form one
/// cycle through all of them.
fn converged(w: &World<HbNode>) -> Result<(), String> {
    let live: BTreeMap<NodeId, Incarnation> = w.live().map(|(id, c)| (id, c.incarnation())).collect();
    for (id, core) in w.live() {
        let view = core.ring().view();
        // An alive entry's life may lag (it is learned on contact; the view
        // digest covers who is alive and which lives are dead); that it never
        // runs ahead is checked by `views_are_sane`.
        let seen: BTreeSet<NodeId> =
            view.entries().filter(|(_, l)| l.status == Status::Alive).map(|(n, _)| n).collect();
        if seen != live.keys().copied().collect() {
            let wrong: Vec<_> =
                view.entries().filter(|(n, l)| (l.status == Status::Alive) != live.contains_key(n)).collect();
            return Err(format!("{id} (life {}) is wrong about {wrong:?}", core.incarnation()));
        }
    }
    // Following successors from any node visits every live node once.
    if let Some((start, _)) = w.live().next() {
        let mut at = start;
        for _ in 0..live.len() {
            at = w.core(at).and_then(|c| c.ring().view().successor()).unwrap_or(at);
        }
        if at != start {
            return Err(format!("successor walk from {start} did not return after {} hops", live.len()));
        }
    }
    Ok(())
}

fn run_with_faults(seed: u64, n: u32, plan: FaultPlan) -> Result<Sim<HbNode>, SimError> {
    let mut sim = cluster(seed, n, tcp());
    sim.check(views_are_sane);
    sim.check(no_false_suspicion_while_timely);
    sim.random_faults(&plan);
    // Faults stop at plan.end; most restarts, heals and resumes land soon after.
    sim.run_until(plan.end + Duration::from_secs(2))?;
    sim.converge(Duration::from_secs(3))?;
    converged(sim.world()).map_err(|m| sim.error(m))?;
    Ok(sim)
}

/// Every fault kind, timed for hbring (heartbeat 50 ms, suspect after
/// 250 ms): pauses and slow links (up to 300 ms extra) both shorter and
/// longer than `suspect_after`, so some cause false suspicion and some do
/// not; partitions; a majority down.
fn everything(n: u32) -> FaultPlan {
    FaultPlan { slow_extra: Duration::from_millis(300), ..FaultPlan::everything(n) }
}

#[test]
fn failure_free_ring_never_suspects_anyone() {
    for_seeds(20, |seed| {
        let mut sim = cluster(seed, 5, tcp());
        sim.check(views_are_sane);
        sim.check(|w| match w.step_events().iter().find(|(_, _, e)| matches!(e, HbEvent::Suspected { .. })) {
            Some(e) => Err(format!("suspicion in a failure-free run: {e:?}")),
            None => Ok(()),
        });
        sim.run_until(Instant::from_millis(10_000))?;
        converged(sim.world()).map_err(|m| sim.error(m))
    });
}

#[test]
fn crash_of_one_node_is_detected_and_the_ring_repairs_in_time() {
    for_seeds(20, |seed| {
        let mut sim = cluster(seed, 5, tcp());
        sim.check(views_are_sane);
        sim.check(no_false_suspicion);
        sim.run_until(Instant::from_millis(1_000))?;
        sim.at(Instant::from_millis(1_000), Action::Crash(NodeId(3)));
        sim.run_until(Instant::from_millis(3_000))?;
        let w = sim.world();
        // A neighbour (2 by acks, or 4 by heartbeats) suspected it within
        // suspect_after + one heartbeat + delays.
        let suspected = w
            .events
            .iter()
            .find(|(_, _, e)| matches!(e, HbEvent::Suspected { node: NodeId(3), .. }))
            .map(|(t, _, _)| *t)
            .ok_or_else(|| sim.error("nobody suspected 3"))?;
        let detect = suspected.saturating_since(Instant::from_millis(1_000));
        assert!(detect <= SUSPECT + HEARTBEAT + Duration::from_millis(10), "seed {seed}: detection took {detect:?}");
        // The repair was measured at 4, and 2 now heartbeats 4.
        let took = w.events.iter().find_map(|(_, by, e)| match e {
            HbEvent::Repaired { new_predecessor: NodeId(2), took } if *by == NodeId(4) => Some(*took),
            _ => None,
        });
        let took = took.expect("4 saw its new predecessor 2");
        assert!(took <= Duration::from_millis(60), "seed {seed}: repair took {took:?}");
        assert_eq!(w.core(NodeId(2)).unwrap().ring().view().successor(), Some(NodeId(4)));
        converged(w).map_err(|m| sim.error(m))
    });
}

#[test]
fn two_neighbours_dying_together_are_both_removed() {
    for_seeds(20, |seed| {
        let mut sim = cluster(seed, 6, tcp());
        sim.check(views_are_sane);
        sim.check(no_false_suspicion);
        sim.at(Instant::from_millis(700), Action::Crash(NodeId(3)));
        sim.at(Instant::from_millis(700), Action::Crash(NodeId(4)));
        sim.run_until(Instant::from_millis(2_500))?;
        assert_eq!(sim.world().core(NodeId(2)).unwrap().ring().view().successor(), Some(NodeId(5)), "seed {seed}");
        converged(sim.world()).map_err(|m| sim.error(m))
    });
}

#[test]
fn restarted_node_rejoins_at_its_configured_position() {
    for_seeds(20, |seed| {
        let mut sim = cluster(seed, 5, tcp());
        sim.check(views_are_sane);
        sim.check(no_false_suspicion);
        sim.at(Instant::from_millis(500), Action::Crash(NodeId(2)));
        sim.at(Instant::from_millis(1_500), Action::Restart(NodeId(2)));
        sim.run_until(Instant::from_millis(3_000))?;
        let w = sim.world();
        assert_eq!(w.core(NodeId(1)).unwrap().ring().view().successor(), Some(NodeId(2)), "seed {seed}");
        assert_eq!(w.core(NodeId(2)).unwrap().ring().view().successor(), Some(NodeId(3)), "seed {seed}");
        converged(w).map_err(|m| sim.error(m))
    });
}

#[test]
fn quick_restart_before_detection_is_seen_as_a_new_life() {
    for_seeds(20, |seed| {
        let mut sim = cluster(seed, 4, tcp());
        sim.check(views_are_sane);
        sim.at(Instant::from_millis(500), Action::Crash(NodeId(3)));
        sim.at(Instant::from_millis(520), Action::Restart(NodeId(3)));
        sim.run_until(Instant::from_millis(2_000))?;
        let w = sim.world();
        let up = w.events.iter().any(|(_, _, e)| matches!(e, HbEvent::Up { node: NodeId(3), .. }));
        assert!(up, "seed {seed}: nobody noticed 3's new life");
        converged(w).map_err(|m| sim.error(m))
    });
}

#[test]
fn partitioned_minority_is_excluded_then_rejoins_after_heal() {
    for_seeds(20, |seed| {
        let mut sim = cluster(seed, 5, tcp());
        sim.check(views_are_sane);
        sim.at(Instant::from_millis(500), Action::Partition(vec![NodeId(2)]));
        sim.at(Instant::from_millis(2_000), Action::Heal);
        sim.run_until(Instant::from_millis(1_900))?;
        assert!(!sim.world().core(NodeId(1)).unwrap().ring().view().is_alive(NodeId(2)), "seed {seed}");
        sim.run_until(Instant::from_millis(4_000))?;
        let w = sim.world();
        let rejoined = w.events.iter().any(|(_, id, e)| *id == NodeId(2) && matches!(e, HbEvent::Rejoined { .. }));
        assert!(rejoined, "seed {seed}: 2 never rejoined");
        converged(w).map_err(|m| sim.error(m))
    });
}

#[test]
fn random_crashes_and_restarts_keep_views_sane_and_converge() {
    for_seeds(150, |seed| {
        let n = 3 + (seed % 6) as u32;
        let plan = FaultPlan { crashes: 6, max_down: (n - 1) / 2, ..FaultPlan::default() };
        run_with_faults(seed, n, plan).map(|_| ())
    });
}

#[test]
fn random_partitions_and_crashes_converge_after_healing() {
    // Pinned: 4974 failed under a version in between the fixes of
    // 2026-11-27 (see `SWEEP_REGRESSIONS`); it passes before and after.
    for_seeds_with(&[4974], 100, |seed| {
        let n = 4 + (seed % 5) as u32;
        let plan = FaultPlan { crashes: 4, max_down: 2, partitions: 3, ..FaultPlan::default() };
        run_with_faults(seed, n, plan).map(|_| ())
    });
}

#[test]
fn every_fault_kind_keeps_views_sane_and_converges() {
    // Pinned: 3209 and 4355, found by 15,000 seeds of this family (a
    // neighbour suspected in its live life while two views disagreed after
    // crashes; fixed on 2026-11-27 by telling a new predecessor our
    // digest, during a pending repair too), and 15460 (a node rejoined
    // after `Excluded` with nothing to presume alive again told only its
    // dead successor: it now tells its predecessor always).
    for_seeds_with(&[3209, 4355, 15460], 60, |seed| {
        let n = 3 + (seed % 6) as u32;
        run_with_faults(seed, n, everything(n)).map(|_| ())
    });
}

#[test]
fn same_seed_same_trace() {
    let plan = FaultPlan { crashes: 5, max_down: 2, partitions: 2, ..FaultPlan::default() };
    let a = run_with_faults(7, 6, plan.clone()).unwrap();
    let b = run_with_faults(7, 6, plan.clone()).unwrap();
    let c = run_with_faults(8, 6, plan).unwrap();
    assert_eq!(a.trace(), b.trace());
    assert_eq!(a.trace_hash(), b.trace_hash());
    assert_ne!(a.trace_hash(), c.trace_hash());
}

#[test]
fn a_thousand_nodes_form_a_ring_and_repair_it() {
    let mut sim = cluster(1, 1_000, tcp()).without_trace();
    sim.check(no_false_suspicion);
    sim.at(Instant::from_millis(600), Action::Crash(NodeId(500)));
    // One lap of the report is ~1000 hops of up to 3 ms.
    sim.run_until(Instant::from_millis(4_000)).unwrap();
    let w = sim.world();
    assert_eq!(w.core(NodeId(499)).unwrap().ring().view().successor(), Some(NodeId(501)));
    converged(w).unwrap();
}

/// The long sweep, every fault kind: `cargo test -p hbring --test sim --
/// --ignored` (shard it with `SIM_SEED_FROM` / `SIM_SEEDS`).
#[test]
#[ignore]
fn sweep_thousands_of_seeds() {
    for_seeds_with(SWEEP_REGRESSIONS, 3_000, sweep_seed);
}

/// Seeds of the sweep that failed, each a node suspecting a neighbour in
/// its live life while their views disagreed after crashes, run in every
/// `cargo test` (fixed on 2026-11-27, `HbRing`). With the ring as it was:
/// 11625 and 24377 (a restart, or a death, its new predecessor's view and
/// its own disagreed on: the new predecessor is told our digest). Without
/// telling a new predecessor that had just heartbeat us: 3928 (it had
/// moved on). Without the heartbeat to an old successor when a node comes
/// alive between us: 25238. 6005 failed only under a version in between
/// (it passes before and after).
const SWEEP_REGRESSIONS: &[u64] = &[3928, 6005, 11625, 24377, 25238];

#[test]
fn sweep_regression_seeds() {
    for &seed in SWEEP_REGRESSIONS {
        if let Err(e) = sweep_seed(seed) {
            panic!("sweep seed {seed} failed:\n{e}");
        }
    }
}

/// One run of the sweep: 3–12 nodes, eight crashes, up to two partitions.
fn sweep_seed(seed: u64) -> Result<(), SimError> {
    let n = 3 + (seed % 10) as u32;
    let plan = FaultPlan { crashes: 8, partitions: (seed % 3) as u32, ..everything(n) };
    run_with_faults(seed, n, plan).map(|_| ())
}
