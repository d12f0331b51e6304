//! electd in the deterministic simulator: both algorithms, clients looping
//! acquire → hold → release on every process, while processes (the
//! coordinator included) crash and restart and minorities are partitioned
//! off and healed. Checked after every step: never two coordinators in
//! office in one term; the clients' own replies never show two holders,
//! and their fences rise; no lower-term grant after a grant of a higher
//! term.
//! After the faults (`Sim::converge`): every live process names one live
//! coordinator in office, and every client is served again.
//!
//! The long sweep: `SIM_SEEDS=5000 cargo test --release -p electd --test
//! sim sweep -- --exact --ignored` (about 100 s; shard it with
//! `SIM_SEED_FROM`). The masked rules' sweep: `SIM_SEEDS=300 cargo test
//! --release -p electd --test sim masked -- --ignored`.

mod kit;

use std::time::Duration;

use electd::{Algorithm, ElEvent, ElNode, ElRule};
use ftcore::rules::Rules;
use ftcore::NodeId;
use kit::{
    cluster, config, converged, faults, paused_run_checked, paused_run_without, run_with_faults, safety, Workload,
};
use lockservice::{LockName, NamedEvent};
use sim::{for_seeds, for_seeds_with, Action, FaultPlan};
use timer::Instant;

fn faulty_run(seed: u64, alg: Algorithm) -> Result<(), sim::SimError> {
    faulty_run_without(seed, alg, Rules::ALL_ON)
}

fn faulty_run_without(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), sim::SimError> {
    let n = 3 + (seed % 4) as u32;
    run_with_faults(seed, n, alg, m, &faults(n), safety())
}

#[test]
fn failure_free_elects_the_highest_id_and_serves_everyone() {
    for alg in [Algorithm::Relay, Algorithm::Ring] {
        for_seeds(20, |seed| {
            let n = 3 + (seed % 6) as u32;
            let mut sim = cluster(seed, n, alg);
            sim.check(safety());
            sim.run_until(Instant::from_millis(2_000))?;
            let w = sim.world();
            let offices: Vec<(NodeId, u64)> = w
                .events
                .iter()
                .filter_map(|(_, id, e)| match e {
                    ElEvent::TookOffice { term } => Some((*id, *term)),
                    _ => None,
                })
                .collect();
            if offices.last().map(|(id, _)| *id) != Some(NodeId(n)) {
                return Err(sim.error(format!("{alg:?}: offices {offices:?}, expected {n} last")));
            }
            converged(&mut sim)
        });
    }
}

#[test]
fn crash_of_the_coordinator_fails_over_to_the_next_highest() {
    for alg in [Algorithm::Relay, Algorithm::Ring] {
        coordinator_dies(alg, Action::Crash);
    }
}

/// The coordinator's process is killed on a host that stays up: the
/// transport's hint (`Action::Kill`) starts the election at once instead
/// of after `suspect_after` of silence (a consumer that has not heard the
/// hint yet may still refuse a pre-vote, so single runs vary): the median
/// failover of 20 seeds is below the fastest one by silence.
#[test]
fn kill_of_the_coordinator_fails_over_without_waiting_for_silence() {
    for alg in [Algorithm::Relay, Algorithm::Ring] {
        let mut killed = coordinator_dies(alg, Action::Kill);
        let crashed = coordinator_dies(alg, Action::Crash);
        killed.sort();
        let fastest_silent = crashed.iter().min().copied().unwrap_or_default();
        eprintln!("{alg:?}: failover median {:?} killed, fastest {fastest_silent:?} crashed", killed[killed.len() / 2]);
        assert!(killed[killed.len() / 2] < fastest_silent, "{alg:?}: killed {killed:?}, crashed {crashed:?}");
    }
}

/// The highest process, in office, dies (`how`); every other process
/// learns that 4 took over within the bound. Returns each seed's failover.
fn coordinator_dies(alg: Algorithm, how: fn(NodeId) -> Action<ElNode>) -> Vec<Duration> {
    let hinted = matches!(how(NodeId(1)), Action::Kill(_));
    let mut took_all = Vec::new();
    {
        for_seeds(20, |seed| {
            let n = 5;
            let mut sim = cluster(seed, n, alg);
            sim.check(safety());
            sim.run_until(Instant::from_millis(1_500))?;
            if !sim.world().core(NodeId(n)).is_some_and(|c| c.in_office()) {
                return Err(sim.error("5 is not in office"));
            }
            sim.after(Duration::ZERO, how(NodeId(n)));
            let killed = sim.now();
            sim.run_for(Duration::from_millis(1_500))?;
            let w = sim.world();
            let known = |id: NodeId| {
                w.events.iter().find_map(|(t, who, e)| {
                    let names_4 = match e {
                        ElEvent::CoordinatorKnown { id: c, .. } => *c == NodeId(4),
                        ElEvent::TookOffice { .. } => *who == NodeId(4),
                        _ => false,
                    };
                    (*who == id && *t > killed && names_4).then_some(*t)
                })
            };
            let mut last = killed;
            for id in 1..n {
                match known(NodeId(id)) {
                    Some(t) => last = last.max(t),
                    None => return Err(sim.error(format!("{alg:?}: {id} never learnt coordinator 4"))),
                }
            }
            // suspect_after (none with the hint) + a pre-vote + one
            // election (+ the heartbeat that tells the followers), with
            // margin for the jitter.
            let c = config(alg, n);
            let detect = if hinted { Duration::ZERO } else { c.suspect_after + c.heartbeat };
            let bound = detect + c.heartbeat + c.election_jitter + c.hop_timeout * 2 + c.election_timeout;
            let took = last.saturating_since(killed);
            if took > bound {
                return Err(sim.error(format!("{alg:?}: failover took {took:?} > {bound:?}")));
            }
            took_all.push(took);
            Ok(())
        });
    }
    took_all
}

#[test]
fn relay_under_crashes_and_partitions() {
    for_seeds(150, |seed| faulty_run(seed, Algorithm::Relay));
}

#[test]
fn ring_under_crashes_and_partitions() {
    for_seeds(150, |seed| faulty_run(seed, Algorithm::Ring));
}

/// Pauses (a stopped process whose clock runs on: false suspicion) and
/// slow links (delays beyond every window) mixed with crashes, wiped disks
/// and partitions.
fn paused_run(seed: u64, alg: Algorithm) -> Result<(), sim::SimError> {
    paused_run_without(seed, alg, Rules::ALL_ON)
}

/// The algorithm a seed's random-fault runs use: they alternate.
fn alg_of(seed: u64) -> Algorithm {
    if seed.is_multiple_of(2) {
        Algorithm::Relay
    } else {
        Algorithm::Ring
    }
}

/// Whether seed `seed`'s paused run (`paused_run`, the very run the sweep
/// checks), every rule on, passes an election deadline (`PastDeadline`:
/// the runs in which `no_election_deadline` changes what happens).
fn passes_a_deadline(seed: u64) -> bool {
    let reached = std::rc::Rc::new(std::cell::Cell::new(false));
    let (seen, mut safe, mut done) = (reached.clone(), kit::safety_under_pauses(), 0);
    let checker = move |w: &sim::World<ElNode>| {
        if w.events[done..].iter().any(|(_, _, e)| matches!(e, ElEvent::PastDeadline { .. })) {
            seen.set(true);
        }
        done = w.events.len();
        safe(w)
    };
    let passed = paused_run_checked(seed, alg_of(seed), Rules::ALL_ON, checker);
    assert!(passed.is_ok(), "seed {seed}, every rule on: {passed:?}");
    reached.get()
}

/// Half the crashes are process kills whose peers hear at once
/// (`Action::Kill`, the hint path: `peer_gone`), among pauses, slow links,
/// wiped disks and partitions.
#[test]
fn both_algorithms_with_killed_processes_among_every_fault() {
    for_seeds(60, |seed| {
        let n = 3 + (seed % 4) as u32;
        let plan = FaultPlan {
            crashes: 4,
            kills: 2,
            wipes: 1,
            pauses: 3,
            pause_len: (Duration::from_millis(10), Duration::from_millis(600)),
            slow_periods: 1,
            slow_extra: Duration::from_millis(60),
            ..faults(n)
        };
        let alg = alg_of(seed);
        run_with_faults(seed, n, alg, Rules::ALL_ON, &plan, kit::safety_under_pauses())
    });
}

#[test]
fn both_algorithms_under_pauses_slow_links_and_wiped_disks() {
    // 162: a Granted delayed past its lease, re-registered with the next
    // coordinator, came back with a lower fence (found by the sweep; the
    // rule's switch is `reregister_unconfirmed`, its scripted scenario
    // `unconfirmed_grant_at_failover` in tests/safety.rs).
    for_seeds_with(&[162], 100, |seed| paused_run(seed, alg_of(seed)));
}

/// Named locks (named-locks.md): three clients on every process asking
/// for four names, under crashes, kills, wiped disks, pauses, slow links
/// and partitions. Each name is judged on its own (no two holders of a
/// name, its fences rising), and after the faults every client of every
/// live process is served again, whatever name it asks for.
fn named_run(seed: u64) -> Result<(), sim::SimError> {
    let n = 3 + (seed % 4) as u32;
    let load = Workload { names: 4, per_node: 3 };
    let plan = FaultPlan {
        crashes: 3,
        kills: 1,
        wipes: 1,
        pauses: 3,
        pause_len: (Duration::from_millis(10), Duration::from_millis(600)),
        slow_periods: 1,
        slow_extra: Duration::from_millis(60),
        ..faults(n)
    };
    kit::run_of(seed, n, alg_of(seed), Rules::ALL_ON, &plan, load, kit::safety_under_pauses_of(load.names))
}

#[test]
fn several_names_under_every_fault() {
    for_seeds(40, named_run);
}

/// Without faults, names do not serialize: at some instant several names
/// are held at once, by clients of different processes.
#[test]
fn several_names_are_held_at_once() {
    for alg in [Algorithm::Relay, Algorithm::Ring] {
        for_seeds(5, |seed| {
            let load = Workload { names: 4, per_node: 3 };
            let mut sim = kit::cluster_of(seed, 5, alg, Rules::ALL_ON, load);
            sim.check(kit::safety_of(load.names));
            sim.run_until(Instant::from_millis(1_500))?;
            let mut held: std::collections::BTreeMap<LockName, u128> = Default::default();
            let mut most = 0;
            for (_, _, e) in &sim.world().events {
                match e {
                    ElEvent::Lock(NamedEvent::Lock { name, event: lockservice::LockEvent::Granted { fence, .. } }) => {
                        held.insert(name.clone(), *fence);
                    }
                    ElEvent::Lock(NamedEvent::Lock { name, event: lockservice::LockEvent::Released { fence, .. } })
                        if held.get(name) == Some(fence) =>
                    {
                        held.remove(name);
                    }
                    _ => {}
                }
                most = most.max(held.len());
            }
            if most < 3 {
                return Err(sim.error(format!("at most {most} names held at once")));
            }
            Ok(())
        });
    }
}

/// A name costs nothing once idle (named-locks.md, "Idle cost"): 2,000
/// names, each taken once by a client of a random process and released;
/// then nothing per name is left anywhere (no local queue, no queue or
/// holder at the coordinator), and in an idle second the only messages
/// are the coordinator's heartbeats and their acks.
#[test]
fn idle_names_cost_nothing() -> Result<(), sim::SimError> {
    use ftcore::Protocol;
    use sim::NetConfig;
    let n = 5;
    let net = NetConfig::reliable(Duration::from_micros(200), Duration::from_millis(2));
    let mut sim = sim::Sim::new(11, n, net, config(Algorithm::Relay, n));
    sim.clients(Box::new(|_, node, client, reply, _| match reply {
        lockservice::LockReply::Granted { .. } => {
            vec![(Duration::from_millis(1), Action::Request(node, client, lockservice::LockRequest::Release))]
        }
        _ => vec![],
    }));
    let job = |i: u64| LockName::parse(&format!("job-{i}")).expect("a valid name");
    sim.check(kit::safety_by(move |c| job(c.0 - 1_000)));
    sim.run_until(Instant::from_millis(1_500))?;
    for i in 0..2_000u64 {
        let name = job(i);
        let node = NodeId(1 + (i % u64::from(n)) as u32);
        let req = lockservice::LockRequest::AcquireNamed { name, timeout_ms: 60_000 };
        sim.at(Instant::from_millis(1_500 + i / 4), Action::Request(node, ftcore::ClientId(1_000 + i), req));
    }
    sim.run_until(Instant::from_millis(3_000))?;
    let granted = sim.world().replies.iter().filter(|r| matches!(r.3, lockservice::LockReply::Granted { .. })).count();
    assert_eq!(granted, 2_000, "every name granted once");
    for (id, c) in sim.world().live() {
        let s = c.status();
        let detail = |k: &str| s.details.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        assert_eq!(detail("locks_active").as_deref(), Some("0"), "{id} knows no lock: {s:?}");
        assert_eq!(detail("grants_held").as_deref(), Some("0"), "{id} holds no grant: {s:?}");
        if c.in_office() {
            assert_eq!(detail("names").as_deref(), Some("0"), "the coordinator knows no name: {s:?}");
        }
    }
    let before = sim.world().sent_by_kind.clone();
    sim.run_for(Duration::from_secs(1))?;
    let idle: Vec<(&str, u64)> = sim
        .world()
        .sent_by_kind
        .iter()
        .map(|(k, v)| (*k, v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect();
    assert!(
        idle.iter().all(|(k, _)| ["heartbeat", "heartbeat_ack"].contains(k)),
        "only heartbeats while idle: {idle:?}"
    );
    Ok(())
}

#[test]
#[ignore = "long: SIM_SEEDS=5000"]
fn sweep() {
    for_seeds(5_000, |seed| {
        let alg = alg_of(seed);
        faulty_run(seed, alg)?;
        paused_run(seed, alg)?;
        named_run(seed)
    });
}

type Run = fn(u64, Algorithm, Rules<ElRule>) -> Result<(), sim::SimError>;

/// Both random-fault families for `seeds` (the algorithm alternating by
/// seed) with the rules in `m` switched off: the runs that fail.
fn failing_runs(m: Rules<ElRule>, seeds: std::ops::Range<u64>) -> Vec<(&'static str, u64, String)> {
    let families: [(&str, Run); 2] = [("faulty", faulty_run_without), ("paused", paused_run_without)];
    let mut failed = Vec::new();
    for seed in seeds {
        let alg = alg_of(seed);
        for (family, run) in families {
            if let Err(e) = run(seed, alg, m) {
                failed.push((family, seed, e.to_string().lines().nth(1).unwrap_or("").trim().to_string()));
            }
        }
    }
    failed
}

/// Whether a failed run broke one of `kit::safety`'s checks (a grant out
/// of order or beside another, a renewal of an ended hold, two
/// coordinators of a term), not liveness.
fn is_a_safety_failure(e: &str) -> bool {
    ["granted", "renewed", "two coordinators", "hold the lock at once"].iter().any(|s| e.contains(s))
}

/// The rules docs/safety-rules.md lists as masked (each is covered by
/// another rule, so no run breaks safety without it): the random-fault
/// sweeps with each switched off (a liveness failure is printed: seeds
/// 1373 and 2987 of 3,000 with `no_majority`). If one ever breaks safety,
/// a scenario now shows the rule: move it to "shown" there.
#[test]
#[ignore = "long: SIM_SEEDS (100) seeds of both families per masked rule"]
fn masked_rules_break_no_sweep() {
    let count: u64 = std::env::var("SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    for m in [
        Rules::all_but(&[ElRule::MajorityOfVoters]),
        Rules::all_but(&[ElRule::ElectionDeadline]),
        Rules::all_but(&[ElRule::AdoptedRenewalWaits]),
        Rules::all_but(&[ElRule::OneOfficePerTerm]),
    ] {
        let failed = failing_runs(m, 0..count);
        eprintln!("{m:?}: {} runs fail: {failed:?}", failed.len());
        let unsafe_: Vec<_> = failed.iter().filter(|f| is_a_safety_failure(&f.2)).collect();
        assert!(unsafe_.is_empty(), "{m:?} broke a clients' check in {} runs: {unsafe_:?}", unsafe_.len());
    }
    // Not vacuous: some of those runs pass a deadline (seeds 40, 42, 44 of
    // the first 100 paused runs, 2026-11-27).
    let reached: Vec<u64> = (0..count).filter(|s| passes_a_deadline(*s)).collect();
    eprintln!("paused runs passing an election deadline: {} of {count}: {reached:?}", reached.len());
    assert!(!reached.is_empty(), "no run passed an election deadline: the sweep shows nothing of that rule");
    // And paired with every other switch, over those runs: a pair that
    // breaks a clients' check where the other switch alone passes would be
    // a mask (none so far); a pair that fails only on liveness is printed.
    let others =
        kit::other_switches().into_iter().chain([("no_majority", Rules::all_but(&[ElRule::MajorityOfVoters]))]);
    let mut masks = Vec::new();
    for (name, other) in others {
        let failing: Vec<(u64, String)> = reached
            .iter()
            .filter_map(|&seed| {
                let alg = alg_of(seed);
                let both = paused_run_without(seed, alg, other.without(ElRule::ElectionDeadline)).err()?;
                paused_run_without(seed, alg, other).is_ok().then_some((seed, both.message))
            })
            .collect();
        eprintln!("no_election_deadline + {name}: failing only as a pair: {failing:?}");
        masks.extend(failing.into_iter().filter(|(_, e)| is_a_safety_failure(e)).map(|f| (name, f)));
    }
    assert!(masks.is_empty(), "a mask of the election deadline (move it to shown): {masks:?}");
}

/// `sim::bytes`, the fuzz targets' driver (`fuzz/`, core_electd), over 20,000
/// seeded random inputs: peer messages and client requests decoded as the
/// real types, clients leaving, links lost, peers unreachable, time
/// passing, from a fresh or a decoded stored state. The core never panics
/// and never asks to be woken in the past after handling that time.
#[test]
fn arbitrary_inputs_never_panic_the_core() {
    let d = sim::wire_decoders!(ElNode);
    let handled = sim::bytes::smoke(|| config(Algorithm::Relay, 3), &d, 20_000, 7);
    assert!(handled > 200_000, "only {handled} inputs decoded and handled");
}

/// A grant outlives its coordinator (electd.md, the failover gap's
/// exception): the client of `h` (1, or 4, the next coordinator itself)
/// holds for four `grant_ttl`s; the coordinator, 5, dies (crash, or kill
/// with the transport's hint) a `grant_ttl` in. The new coordinator, 4,
/// adopts the grant (`h` re-registers it with its old fence, again on each
/// of 4's heartbeats, or 4's own on taking office, until 4 is in office
/// and echoes it; then renews every heartbeat until 4 acks, past the wait
/// of `lease·(1+ρ)` after taking office) and renews it: the client is
/// never told it lost the lock, and releases it itself. Before 2026-11-27
/// the one re-registration reached 4 before it took office, was denied
/// and never sent again, and every run lost the grant.
#[test]
fn a_holder_keeps_its_grant_through_a_failover() {
    use lockservice::check::held_until_released;
    for alg in [Algorithm::Relay, Algorithm::Ring] {
        for (h, how) in [(1, Action::Crash as fn(NodeId) -> Action<ElNode>), (1, Action::Kill), (4, Action::Crash)] {
            for_seeds(10, |seed| {
                let c = config(alg, 5);
                let ttl = c.grant_ttl;
                let mut sim = kit::cluster_with(seed, 5, c, ttl * 4);
                sim.run_until(Instant::from_millis(1_500))?;
                sim.after(Duration::ZERO, kit::acquire(NodeId(h), ftcore::ClientId(1)));
                sim.run_for(ttl)?;
                let Some((_, fence)) = sim.world().core(NodeId(h)).and_then(|c| c.holder(&LockName::unnamed())) else {
                    return Err(sim.error(format!("{h}'s client was not granted")));
                };
                sim.after(Duration::ZERO, how(NodeId(5)));
                sim.run_for(ttl * 2)?;
                let adopted = sim.world().core(NodeId(4)).and_then(|c| c.current_grant(&LockName::unnamed()));
                if adopted != Some((NodeId(h), fence)) {
                    return Err(sim.error(format!("4 honours {adopted:x?}, not {h}'s grant {fence:#x}")));
                }
                sim.run_for(ttl * 2)?;
                let told: Vec<_> =
                    sim.world().replies.iter().filter(|(_, n, _, _)| *n == NodeId(h)).map(|r| &r.3).collect();
                if held_until_released(&told) {
                    Ok(())
                } else {
                    Err(sim.error(format!("{h}'s client was told {told:?}")))
                }
            });
        }
    }
}

/// Adoption at failover is per name: clients of 1 and 2 hold `db` and
/// `jobs/nightly` (each for four `grant_ttl`s) when the coordinator, 5,
/// crashes a `grant_ttl` in. The new coordinator, 4, adopts both grants,
/// each under its own name with its own fence, and renews them: neither
/// client is told it lost its lock, and both release it themselves.
#[test]
fn every_names_holder_keeps_its_grant_through_a_failover() {
    use lockservice::check::held_until_released;
    use lockservice::LockRequest;
    for alg in [Algorithm::Relay, Algorithm::Ring] {
        for_seeds(6, |seed| {
            let c = config(alg, 5);
            let ttl = c.grant_ttl;
            let names = [(1u32, "db"), (2, "jobs/nightly")]
                .map(|(node, name)| (node, LockName::parse(name).expect("a valid name")));
            // Client i of node i asks names[i - 1].
            let net = sim::NetConfig::reliable(Duration::from_micros(200), Duration::from_millis(2));
            let mut sim = sim::Sim::new(seed, 5, net, c);
            sim.clients(Box::new(move |_, node, client, reply, _| match reply {
                lockservice::LockReply::Granted { .. } => {
                    vec![(ttl * 4, Action::Request(node, client, LockRequest::Release))]
                }
                _ => vec![],
            }));
            let by_client = names.clone();
            sim.check(kit::safety_by(move |c| by_client[(c.0 as usize + 1) % 2].1.clone()));
            sim.run_until(Instant::from_millis(1_500))?;
            for (node, name) in &names {
                let req = LockRequest::AcquireNamed { name: name.clone(), timeout_ms: 60_000 };
                let client = ftcore::ClientId(u64::from(*node));
                sim.after(Duration::ZERO, Action::Request(NodeId(*node), client, req));
            }
            sim.run_for(ttl)?;
            let mut fences = Vec::new();
            for (node, name) in &names {
                let Some((_, fence)) = sim.world().core(NodeId(*node)).and_then(|c| c.holder(name)) else {
                    return Err(sim.error(format!("{node}'s client was not granted {name}")));
                };
                fences.push(fence);
            }
            sim.after(Duration::ZERO, Action::Crash(NodeId(5)));
            sim.run_for(ttl * 2)?;
            for ((node, name), fence) in names.iter().zip(&fences) {
                let adopted = sim.world().core(NodeId(4)).and_then(|c| c.current_grant(name));
                if adopted != Some((NodeId(*node), *fence)) {
                    return Err(sim.error(format!("4 honours {adopted:x?} for {name}, not {node}'s {fence:#x}")));
                }
            }
            sim.run_for(ttl * 2)?;
            for (node, name) in &names {
                let told: Vec<_> =
                    sim.world().replies.iter().filter(|(_, n, _, _)| *n == NodeId(*node)).map(|r| &r.3).collect();
                if !held_until_released(&told) {
                    return Err(sim.error(format!("{node}'s client of {name} was told {told:?}")));
                }
            }
            Ok(())
        });
    }
}
