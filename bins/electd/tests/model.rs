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
use kit::{acquire, cluster_without, config, faults};
use lockservice::check::LockJudge;
use lockservice::{LockReply, LockRequest, NamedEvent};
use sim::model::{client_per_node, setting, Bounds, Channel, CoreModel, Seen, Summary};
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
