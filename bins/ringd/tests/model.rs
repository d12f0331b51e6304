//! Bounded exhaustive model check of the ringd core (`sim::model`): from
//! snapshots taken along a simulated run with every fault kind, every
//! interleaving of deliveries, late timers (pauses), a crash with a
//! restart (disk kept or wiped), the failure hint and one more increment
//! per replica, up to a depth and a horizon. The judge is the kit's
//! `RingJudge` (rising fences, one regeneration per epoch, one result per
//! request id).

mod kit;

use std::time::Duration;

use api::ring::{RingReply, RingRequest};
use ftcore::{ClientId, NodeId};
use kit::{cluster, config, every_fault_plan, RingJudge};
use ringd::RdEvent;
use sim::model::{setting, Bounds, Channel, ClientScript, CoreModel, Seen, Summary};
use timer::Instant;

const N: u32 = 3;

fn judge(j: &mut RingJudge, _: Instant, node: NodeId, seen: Seen<'_, RdEvent, RingReply>) -> Result<(), String> {
    match seen {
        Seen::Event(e) => j.on_event(node, e),
        Seen::Reply(_, r) => j.on_reply(node, r).map(|_| ()),
    }
}

fn progress(j: &RingJudge) -> u32 {
    j.done
}

/// Seed `seed`'s run with every fault kind, checked from a snapshot every
/// `every_ms`, each to `bounds`; a new client per replica asks for one
/// increment at any point.
fn check(seed: u64, every_ms: u64, bounds: Bounds) -> Summary {
    let plan = every_fault_plan(N);
    let mut sim = cluster(seed, N, config(N));
    sim.random_faults(&plan);
    let incr = |i: u32| RingRequest::Execute {
        request_id: (100 + u64::from(i)) << 32,
        service: "counter.incr".into(),
        args: vec!["c".into()],
    };
    let clients = (1..=N)
        .map(|i| ClientScript {
            node: NodeId(i),
            client: ClientId(100 + u64::from(i)),
            requests: vec![incr(i)],
            wait: false,
        })
        .collect();
    let model = CoreModel::new(N, config(N), Channel::Reliable, bounds, (RingJudge::default(), judge, progress))
        .with_clients(clients);
    model
        .check_run(&mut sim, Duration::from_millis(every_ms), (Instant::ZERO, plan.end))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_interleaving_near_a_faulty_run_keeps_the_ring_invariants() {
    check(0, 300, Bounds::near(Duration::from_millis(4), 6)).assert_safe("ringd model, seed 0");
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
        check(seed, setting("MODEL_EVERY_MS", 200), b.clone()).assert_safe(&format!("ringd model, seed {seed}"));
    }
}
