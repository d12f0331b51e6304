//! Bounded exhaustive model check of the electd core (`sim::model`), both
//! election algorithms: from snapshots taken along a simulated run with
//! crashes and partitions, every interleaving of deliveries, late timers
//! (pauses), a crash with a restart (disk kept or wiped), the failure hint
//! and the clients' releases, up to a depth and a horizon. The judge is
//! reliability.md's stage after leases, from the clients' side
//! (`LockJudge`).

mod kit;

use std::time::Duration;

use electd::{Algorithm, ElConfig, ElEvent, ElRule};
use ftcore::rules::Rules;
use ftcore::{ClientId, NodeId};
use kit::{acquire, acquire_of, cluster_of, cluster_without, config, faults, Workload};
use lockservice::check::LockJudge;
use lockservice::{LockName, LockReply, LockRequest, NamedEvent};
use sim::model::{client_per_node, setting, Bounds, Channel, ClientScript, CoreModel, Seen, Summary};
use timer::Instant;

const N: u32 = 3;

fn judge(j: &mut LockJudge, t: Instant, node: NodeId, seen: Seen<'_, ElEvent, LockReply>) -> Result<(), String> {
    match seen {
        // One lock (the unnamed one) in this model.
        Seen::Event(ElEvent::Lock(NamedEvent::Lock { event, .. })) => j.on_event(t, node, event),
        _ => Ok(()),
    }
}

/// Seed `seed`'s faulty run with `alg` (rules `m` off), checked from a
/// snapshot every `every_ms`, each to `bounds`. The simulated clients may
/// let go at any point.
fn check(seed: u64, alg: Algorithm, m: Rules<ElRule>, every_ms: u64, bounds: Bounds) -> Summary {
    let plan = faults(N);
    let mut sim = cluster_without(seed, N, alg, m);
    sim.random_faults(&plan);
    for t in (600..plan.end.as_micros() / 1_000).step_by(300) {
        for i in 1..=N {
            sim.at(Instant::from_millis(t), acquire(NodeId(i), ClientId(u64::from(i))));
        }
    }
    let cfg = ElConfig { rules: m, ..config(alg, N) };
    let model = CoreModel::new(N, cfg, Channel::Reliable, bounds, (LockJudge::new(), judge, LockJudge::grants))
        .with_clients(client_per_node(N, |i| ClientId(u64::from(i)), &[LockRequest::Release]));
    model
        .check_run(&mut sim, Duration::from_millis(every_ms), (Instant::ZERO, plan.end))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The lease invariants judged per lock name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct NamedJudge(std::collections::BTreeMap<LockName, LockJudge>);

impl NamedJudge {
    fn grants(&self) -> u32 {
        self.0.values().map(LockJudge::grants).sum()
    }
}

fn judge_named(j: &mut NamedJudge, t: Instant, node: NodeId, seen: Seen<'_, ElEvent, LockReply>) -> Result<(), String> {
    match seen {
        Seen::Event(ElEvent::Lock(NamedEvent::Lock { name, event })) => {
            j.0.entry(name.clone()).or_default().on_event(t, node, event).map_err(|e| format!("{name}: {e}"))
        }
        _ => Ok(()),
    }
}

/// Seed `seed`'s faulty run with two clients on every process asking for
/// two names (named-locks.md), checked per name from a snapshot every
/// `every_ms`, each to `bounds`.
fn check_named(
    seed: u64,
    alg: Algorithm,
    m: Rules<ElRule>,
    every_ms: u64,
    bounds: Bounds,
) -> Result<Summary, sim::SimError> {
    let plan = faults(N);
    let load = Workload { names: 2, per_node: 2 };
    let mut sim = cluster_of(seed, N, alg, m, load);
    sim.random_faults(&plan);
    for t in (600..plan.end.as_micros() / 1_000).step_by(300) {
        for i in 1..=N {
            for c in load.clients(i) {
                sim.at(Instant::from_millis(t), acquire_of(NodeId(i), c, load.names));
            }
        }
    }
    let clients = (1..=N)
        .flat_map(|i| {
            load.clients(i).into_iter().map(move |client| ClientScript {
                node: NodeId(i),
                client,
                requests: vec![LockRequest::Release],
                wait: false,
            })
        })
        .collect();
    let model = CoreModel::new(
        N,
        ElConfig { rules: m, ..config(alg, N) },
        Channel::Reliable,
        bounds,
        (NamedJudge::default(), judge_named, NamedJudge::grants),
    )
    .with_clients(clients);
    model.check_run(&mut sim, Duration::from_millis(every_ms), (Instant::ZERO, plan.end))
}

#[test]
fn every_interleaving_near_a_faulty_run_with_two_names_keeps_each_names_lease_invariants() {
    for alg in [Algorithm::Relay, Algorithm::Ring] {
        let b = Bounds::near(Duration::from_millis(4), 6);
        check_named(0, alg, Rules::ALL_ON, 400, b)
            .unwrap_or_else(|e| panic!("{e}"))
            .assert_safe(&format!("electd model, two names, {alg:?}, seed 0"));
    }
}

/// The per-name judge can fail: with a grant counter per name
/// (`counter_per_name`) a name forgotten and asked for again in one office
/// repeats a fence, in the run the model starts from or in the model.
#[test]
fn the_two_name_model_catches_a_counter_per_name() {
    let m = Rules::all_but(&[ElRule::OfficeWideCounter]);
    let caught = [Algorithm::Relay, Algorithm::Ring].into_iter().any(|alg| {
        match check_named(0, alg, m, 400, Bounds::near(Duration::from_millis(4), 4)) {
            Err(e) => e.to_string().contains("granted fence"),
            Ok(sum) => sum.broken.iter().any(|b| b.contains("granted fence")),
        }
    });
    assert!(caught, "no fence repeated within a name with counter_per_name");
}

#[test]
fn every_interleaving_near_a_faulty_run_keeps_the_lease_invariants() {
    for alg in [Algorithm::Relay, Algorithm::Ring] {
        let b = Bounds::near(Duration::from_millis(4), 7);
        check(0, alg, Rules::ALL_ON, 400, b).assert_safe(&format!("electd model, {alg:?}, seed 0"));
    }
}

/// The longer check: `MODEL_SEEDS` seeds (2, from `MODEL_SEED_FROM`), a
/// start every `MODEL_EVERY_MS` (200), `MODEL_DEPTH` steps (8) within
/// `MODEL_HORIZON_MS` (4). Depth 9 and up needs many GB per start.
#[test]
#[ignore]
fn long() {
    let from = setting("MODEL_SEED_FROM", 0);
    let b = Bounds::near(Duration::from_millis(setting("MODEL_HORIZON_MS", 4)), setting("MODEL_DEPTH", 8) as usize);
    for seed in from..from + setting("MODEL_SEEDS", 2) {
        for alg in [Algorithm::Relay, Algorithm::Ring] {
            let sum = check(seed, alg, Rules::ALL_ON, setting("MODEL_EVERY_MS", 200), b.clone());
            sum.assert_safe(&format!("electd model, {alg:?}, seed {seed}"));
        }
    }
}
