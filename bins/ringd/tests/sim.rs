//! ringd in the deterministic simulator: a client per replica looping
//! counter increments (and, in the every-fault sweep, a 15 ms command
//! under the token on even replicas) while replicas crash and restart,
//! links are partitioned and delayed, and replicas pause. Checked after every step
//! by `kit::safety`; after the faults (`Sim::converge`) the ring re-forms
//! over every replica and every client is served again.
//!
//! The long sweep: `SIM_SEEDS=5000 cargo test --release -p ringd --test sim
//! sweep -- --exact --ignored` (shard it with `SIM_SEED_FROM`).

mod kit;

use std::time::Duration;

use ftcore::rules::Rules;
use ftcore::NodeId;
use kit::{cluster, config, converged, crash_plan, every_fault_plan, safety, served_again, with_job};
use ringd::{RdConfig, RdEvent, RdRule};
use sim::{for_seeds, for_seeds_with, Action, FaultPlan};
use timer::Instant;

#[test]
fn a_quiet_ring_serves_every_client() {
    for_seeds(20, |seed| {
        let n = 3 + (seed % 3) as u32;
        let mut sim = cluster(seed, n, config(n));
        sim.check(safety(true));
        sim.run_for(Duration::from_millis(2_000))?;
        served_again(&sim, n, Duration::from_millis(500))
    });
}

/// Crashes one at a time (the token holder included), restarts. Seed 42
/// once lost an acknowledged increment (a replica with the only copy of
/// it ignored the IAmNewNext of a replica that had rejoined meanwhile).
fn crash_run(seed: u64) -> Result<(), sim::SimError> {
    let n = 3 + (seed % 3) as u32;
    let mut sim = cluster(seed, n, config(n));
    sim.check(safety(true));
    sim.random_faults(&crash_plan());
    sim.run_for(Duration::from_millis(3_500))?;
    converged(&mut sim, n, Duration::from_millis(1_500))
}

#[test]
fn crashes_and_restarts() {
    for_seeds_with(&[42], 150, crash_run);
}

/// Every fault kind: crashes (a minority at a time), partitions, pauses,
/// slow links, a majority down, client disconnects.
fn faulty_run(seed: u64) -> Result<(), sim::SimError> {
    let n = 3 + (seed % 3) as u32;
    // Even replicas' clients run a 15 ms command under the token.
    let mut sim = cluster(seed, n, with_job(config(n), 15, Duration::from_millis(200)));
    sim.check(safety(false));
    sim.random_faults(&every_fault_plan(n));
    sim.run_for(Duration::from_millis(3_500))?;
    converged(&mut sim, n, Duration::from_millis(2_000))
}

#[test]
fn every_fault_kind() {
    // 3252: a census origin that had acked the holder's renewal proposed
    // at once; the old holder, its ack arriving late, ran inside its lease
    // after the new token ran (docs/safety-rules.md, ringd, found while
    // building).
    for_seeds_with(&[3252], 150, faulty_run);
}

/// Every fault kind with half the crashes process kills whose peers hear
/// at once (`Action::Kill`: the ring repairs around them without waiting
/// for silence). 1872 and 4820 (the 5,000-seed sweep of 2026-11-27) ended
/// with three regenerations after the heal: a replica that had been cut
/// off excluded live peers from the view it formed meanwhile, and each
/// excluded owner dropped the token (fixed by the minority's yield,
/// `cut_off_alone` below).
#[test]
fn every_fault_kind_with_killed_processes() {
    for_seeds_with(&[1872, 4820], 60, kill_run);
}

fn kill_run(seed: u64) -> Result<(), sim::SimError> {
    let n = 3 + (seed % 3) as u32;
    let mut sim = cluster(seed, n, with_job(config(n), 15, Duration::from_millis(200)));
    sim.check(safety(false));
    sim.random_faults(&FaultPlan { kills: 2, ..every_fault_plan(n) });
    sim.run_for(Duration::from_millis(3_500))?;
    converged(&mut sim, n, Duration::from_millis(2_000))
}

#[test]
#[ignore = "long sweep: SIM_SEEDS=5000 cargo test --release -p ringd --test sim sweep -- --exact --ignored"]
fn sweep() {
    for_seeds(5_000, |seed| crash_run(seed).and_then(|()| faulty_run(seed)));
}

/// `ignore_stale` (shown masked by the census's `Busy` beside an owner in
/// safety.rs, `stale_rule_masked_by_census_busy`) in random runs: `SIM_SEEDS`
/// seeds of the every-fault run with and without kills; the runs in which
/// a `Stale` reaches a replica owning (or handing on) an older token
/// (`StaleHeeded`), and of those, the ones that fail with the rule off,
/// alone and paired with each other switch (a pair that fails where the
/// other switch alone passes is a mask). `SIM_SEEDS=800 cargo test
/// --release -p ringd --test sim masked -- --ignored --nocapture` (2 min).
#[test]
#[ignore = "survey of the masked rule: SIM_SEEDS=800 cargo test --release -p ringd --test sim masked -- --ignored --nocapture"]
fn masked_rules_sweep() {
    let count: u64 = std::env::var("SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    let run = |seed: u64, kills: u32, m: Rules<RdRule>| -> (Option<bool>, Option<String>) {
        let n = 3 + (seed % 3) as u32;
        let mut sim = cluster(seed, n, RdConfig { rules: m, ..with_job(config(n), 15, Duration::from_millis(200)) });
        sim.check(safety(false));
        sim.random_faults(&FaultPlan { kills, ..every_fault_plan(n) });
        let r = sim
            .run_for(Duration::from_millis(3_500))
            .and_then(|()| converged(&mut sim, n, Duration::from_millis(2_000)));
        let reached = sim.world().events.iter().find_map(|(_, _, e)| match e {
            RdEvent::StaleHeeded { owned } => Some(*owned),
            _ => None,
        });
        (reached, r.err().map(|e| e.to_string().lines().nth(1).unwrap_or_default().trim().to_string()))
    };
    let mut reached = Vec::new();
    for seed in 0..count {
        for kills in [0, 2] {
            let (hit, e) = run(seed, kills, Rules::ALL_ON);
            assert!(e.is_none(), "seed {seed}, {kills} kills, every rule on: {e:?}");
            if let Some(owned) = hit {
                reached.push((seed, kills, owned));
            }
        }
    }
    let owned = reached.iter().filter(|r| r.2).count();
    eprintln!(
        "a Stale reached a holder of an older token in {} of {} runs ({owned} owning it, the others handing it on): {reached:?}",
        reached.len(),
        2 * count
    );
    let others = [
        ("(alone)", Rules::ALL_ON),
        ("no_lease", Rules::all_but(&[RdRule::MajorityLease])),
        ("census_ignores_owner", Rules::all_but(&[RdRule::CensusBusyBesideAnOwner])),
        ("census_without_majority", Rules::all_but(&[RdRule::CensusNeedsAMajority])),
        ("no_stored_epochs", Rules::all_but(&[RdRule::StoredEpochs])),
        ("answer_before_ack", Rules::all_but(&[RdRule::AnswerAfterAck])),
        ("regenerate_from_copy", Rules::all_but(&[RdRule::CopyOnlySuppliesACensus])),
        ("seen_by_seq", Rules::all_but(&[RdRule::SeenAsAPair])),
        ("accept_tokens_for_other_lives", Rules::all_but(&[RdRule::TokensForTheReceiversLifeOnly])),
        ("accept_lower_epochs", Rules::all_but(&[RdRule::LowerEpochsRefused])),
        ("census_in_minority", Rules::all_but(&[RdRule::NoCensusInAMinority])),
        ("no_minority_yield", Rules::all_but(&[RdRule::MinorityYields])),
    ];
    for (name, other) in others {
        let both = other.without(RdRule::StaleStopsOwning);
        let (mut failed, mut masks) = (0, Vec::new());
        for &(seed, kills, _) in &reached {
            if let (_, Some(e)) = run(seed, kills, both) {
                failed += 1;
                if other == Rules::ALL_ON || run(seed, kills, other).1.is_none() {
                    masks.push((seed, kills, e));
                }
            }
        }
        eprintln!("ignore_stale + {name}: {failed} of those fail; not failing with {name} alone: {masks:?}");
    }
}

/// ringd.md: with two replicas the survivor of a crash is alone. With
/// `allow_minority` it keeps or regenerates the token from its own copy
/// and serves alone (no acknowledged increment lost); without, it answers
/// token services `no_quorum`. Once the other restarts both are served.
#[test]
fn a_two_replica_survivor_serves_alone_only_with_allow_minority() {
    use api::ring::{ExecError, RingReply};
    use ftcore::NodeId;
    use sim::Action;
    for_seeds(10, |seed| {
        for allow in [true, false] {
            let mut cfg = config(2);
            cfg.allow_minority = allow;
            let mut sim = cluster(seed, 2, cfg);
            sim.check(safety(true));
            sim.run_for(Duration::from_millis(500))?;
            sim.after(Duration::ZERO, Action::Crash(NodeId(2)));
            sim.run_for(Duration::from_millis(1_000))?;
            let since = Instant::from_micros(sim.now().as_micros() - 500_000);
            let recent = |ok: bool| {
                sim.world().replies.iter().any(|(t, n, _, r)| {
                    *t >= since
                        && *n == NodeId(1)
                        && match r {
                            RingReply::Executed { outcome: Ok(_), .. } => ok,
                            RingReply::Executed { outcome: Err(ExecError::NoQuorum), .. } => !ok,
                            _ => false,
                        }
                })
            };
            if allow && !recent(true) {
                return Err(sim.error("the survivor did not serve alone with allow_minority"));
            }
            if !allow && (recent(true) || !recent(false)) {
                return Err(sim.error("the survivor served alone (or answered no no_quorum) without allow_minority"));
            }
            sim.after(Duration::ZERO, Action::Restart(NodeId(2)));
            sim.run_for(Duration::from_millis(1_000))?;
            converged(&mut sim, 2, Duration::from_millis(500))?;
        }
        Ok(())
    });
}

/// `sim::bytes`, the fuzz targets' driver (`fuzz/`, core_ringd), over 20,000
/// seeded random inputs: peer messages and client requests decoded as the
/// real types, clients leaving, links lost, peers unreachable, time
/// passing, from a fresh or a decoded stored state. The core never panics
/// and never asks to be woken in the past after handling that time.
#[test]
fn arbitrary_inputs_never_panic_the_core() {
    let d = sim::wire_decoders!(ringd::RdNode);
    let handled = sim::bytes::smoke(|| config(3), &d, 20_000, 7);
    assert!(handled > 200_000, "only {handled} inputs decoded and handled");
}

/// One replica cut off alone for 1.5 s (N = 3..5, the replica cut off
/// chosen by the seed, the token's owner in about 40 % of the runs), then
/// the heal: no regeneration follows, and every client is served again.
/// ringd.md's Invariants 5 allow one; with these liveness rules none is
/// needed, and each one's switch makes some runs regenerate
/// (`each_rule_of_the_heal_is_needed`):
///
/// - a replica whose ring is a minority yields to a life it holds dead
///   (it rejoins, presuming everyone alive) instead of excluding it
///   (`hbring`): else the healed replica excludes the owner, which drops
///   the token;
/// - a replica whose ring is a minority proposes no census (`census.rs`):
///   each proposal is a promise to itself that, on the heal, refuses the
///   majority's token (`Stale`);
/// - a new life's token-lost deadline starts with it (`repair.rs`): an
///   overdue one censuses at once on rejoining.
fn cut_off_alone(seed: u64, m: Rules<RdRule>) -> Result<(), sim::SimError> {
    let n = 3 + (seed % 3) as u32;
    let mut sim = cluster(seed, n, RdConfig { rules: m, ..config(n) });
    sim.check(safety(false));
    sim.run_for(Duration::from_millis(300))?;
    let alone = NodeId(1 + (seed / 3 % u64::from(n)) as u32);
    sim.after(Duration::ZERO, Action::Partition(vec![alone]));
    sim.run_for(Duration::from_millis(1_500))?;
    let from = sim.world().events.len();
    sim.after(Duration::ZERO, Action::Heal);
    sim.run_for(Duration::from_millis(1_500))?;
    let regenerations =
        sim.world().events[from..].iter().filter(|(_, _, e)| matches!(e, RdEvent::Regenerated { .. })).count();
    if regenerations > 0 {
        return Err(sim.error(format!("{regenerations} regenerations after {alone} was cut off alone")));
    }
    served_again(&sim, n, Duration::from_millis(500))
}

#[test]
fn a_replica_cut_off_alone_makes_no_regeneration_on_the_heal() {
    for_seeds(30, |seed| cut_off_alone(seed, Rules::ALL_ON));
}

#[test]
fn each_rule_of_the_heal_is_needed() {
    let switches = [
        ("no_minority_yield", Rules::all_but(&[RdRule::MinorityYields])),
        ("census_in_minority", Rules::all_but(&[RdRule::NoCensusInAMinority])),
        ("keep_lost_deadline_on_rejoin", Rules::all_but(&[RdRule::LostDeadlineStartsWithTheLife])),
    ];
    for (name, m) in switches {
        let failed: Vec<u64> = (0..30)
            .filter(|s| cut_off_alone(*s, m).is_err_and(|e| e.message.contains("regenerations after")))
            .collect();
        eprintln!("{name}: seeds {failed:?} of 0..30 regenerate after the heal");
        assert!(!failed.is_empty(), "{name}: no run of 30 regenerated after the heal without the rule");
    }
}

/// A job under the token outlives a pause of another replica: replica 1
/// runs a 300 ms command under the token; 40 ms in, another replica is
/// paused: its successor or predecessor for 100 ms (over `suspect_after`,
/// 40 ms), or any other for 250 ms (over `token_lost_after`). On resume
/// its overdue timers fire first, more than a heartbeat late: the replica
/// itself stalled, so it suspects no neighbour (a fresh `suspect_after`)
/// and waits a heartbeat before a census, reading its queued heartbeats and
/// HolderAlives first. Before 2026-11-27 a resumed neighbour suspected
/// both of its own, answered their heartbeats `Excluded`, and the owner
/// stopped owning and killed the job (10 of 10 seeds); a replica resumed
/// after `token_lost_after` proposed a census at once, answered the
/// owner's HolderAlive `Stale`, and the owner gave the token up (20 of 20).
#[test]
fn a_job_outlives_a_pause_of_another_replica() {
    use api::ring::RingReply;
    use ftcore::ClientId;
    let long = config(5).token_lost_after + Duration::from_millis(50);
    for (whom, pause) in [("successor", 100), ("predecessor", 100), ("successor", 0), ("third", 0)] {
        let pause = if pause == 0 { long } else { Duration::from_millis(pause) };
        for_seeds(10, |seed| {
            let mut sim = sim::Sim::new(seed, 5, kit::net(), with_job(config(5), 300, Duration::from_secs(2)));
            sim.check(safety(false));
            sim.clients(Box::new(|_, _, _, _, _| vec![]));
            sim.run_until(Instant::from_millis(3_000))?;
            sim.after(Duration::ZERO, kit::job(NodeId(1), ClientId(1), 1));
            let started = |w: &sim::World<_>| w.jobs.iter().any(|j| j.node == NodeId(1));
            sim.run_until_true(Instant::from_millis(5_000), "1's job never started", started)?;
            sim.run_for(Duration::from_millis(40))?;
            let view = sim.world().core(NodeId(1)).map(|c| c.ring().view().clone());
            let victim = view.and_then(|v| match whom {
                "successor" => v.successor(),
                "predecessor" => v.predecessor(),
                _ => v.successor().and_then(|s| sim.world().core(s)?.ring().view().successor()),
            });
            let Some(n) = victim else { return Err(sim.error(format!("1 has no {whom}"))) };
            sim.after(Duration::ZERO, Action::Pause(n));
            sim.after(pause, Action::Resume(n));
            sim.run_for(Duration::from_millis(1_300))?;
            let told: Vec<_> = sim.world().replies.iter().filter(|r| r.1 == NodeId(1)).map(|r| &r.3).collect();
            match told.as_slice() {
                [RingReply::Executed { outcome: Ok(_), .. }] => Ok(()),
                _ => Err(sim.error(format!("{pause:?} pause of {n} ({whom}): 1's client was told {told:?}"))),
            }
        });
    }
}
