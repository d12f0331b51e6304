//! Bounded exhaustive model check of the ntmutexd core (`sim::model`):
//! from snapshots taken along a simulated run with every fault kind, every
//! interleaving of deliveries, late timers (pauses), a crash with a
//! restart (disk kept or wiped), the failure hint and the clients'
//! releases, up to a depth and a horizon. The judge is reliability.md's
//! stage after leases, from the clients' side (`LockJudge`).

mod workload;

use std::collections::BTreeMap;
use std::time::Duration;

use ftcore::rules::Rules;
use ftcore::{ClientId, NodeId};
use lockservice::check::LockJudge;
use lockservice::LockEvent;
use lockservice::{LockReply, LockRequest};
use ntmutexd::{NtEvent, NtNode, NtRule};
use sim::model::{client_per_node, setting, Bounds, Channel, CoreModel, JudgeOf, Seen, Summary};
use timer::Instant;
use workload::{all_single, cfg_with, cluster_with, everything, keep_clients_coming, net, HEAVY};

const N: u32 = 3;

fn judge(j: &mut LockJudge, t: Instant, node: NodeId, seen: Seen<'_, NtEvent, LockReply>) -> Result<(), String> {
    match seen {
        Seen::Event(NtEvent::Lock(l)) => j.on_event(t, node, l),
        _ => Ok(()),
    }
}

/// Seed `seed`'s run with every fault kind (rules `m` off), checked from a
/// snapshot every `every_ms` between `from_ms` and `until_ms`, each to
/// `bounds`. The simulated clients may let go at any point.
fn check(seed: u64, m: Rules<NtRule>, window: (u64, u64), every_ms: u64, bounds: Bounds) -> Summary {
    check_by(seed, m, window, every_ms, bounds, (LockJudge::new(), judge, LockJudge::grants))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `check`, judged by `by`.
fn check_by<J>(
    seed: u64,
    m: Rules<NtRule>,
    (from_ms, until_ms): (u64, u64),
    every_ms: u64,
    bounds: Bounds,
    by: JudgeOf<NtNode, J>,
) -> Result<Summary, sim::SimError>
where
    J: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static,
{
    let plan = everything(N);
    let mut sim = cluster_with(seed, N, 2, HEAVY, net(), m);
    sim.random_faults(&plan);
    keep_clients_coming(&mut sim, N, Instant::from_millis(500), plan.end);
    let model = CoreModel::new(N, cfg_with(2, m), Channel::Reliable, bounds, by).with_clients(client_per_node(
        N,
        |i| ClientId(u64::from(i)),
        &[LockRequest::Release],
    ));
    let window = (Instant::from_millis(from_ms), plan.end.min(Instant::from_millis(until_ms)));
    model.check_run(&mut sim, Duration::from_millis(every_ms), window)
}

#[test]
fn every_interleaving_near_a_faulty_run_keeps_the_lease_invariants() {
    let b = Bounds::near(Duration::from_millis(4), 7);
    check(0, Rules::ALL_ON, (0, u64::MAX), 400, b).assert_safe("ntmutexd model, seed 0");
}

/// The check is not vacuous: seed 0's run without leases first breaks the
/// lease invariant at 3.266 s; from the snapshot at 3.2 s the model finds
/// a shorter way (the holder's daemon crashes, its peer hears the hint,
/// regenerates and grants while the old client's hold has no end), and
/// with every rule on it finds none.
#[test]
fn without_leases_the_model_finds_two_holders() {
    let b = Bounds::near(Duration::from_millis(1), 12);
    let off = check(0, Rules::all_but(&[NtRule::GrantsUnderLeases]), (3_200, 3_200), 5, b.clone());
    eprintln!("ntmutexd model without leases: {off}");
    assert!(off.broken.first().is_some_and(|b| b.contains("holds until")), "{off}");
    let on = check(0, Rules::ALL_ON, (3_200, 3_200), 5, b);
    on.assert_safe("ntmutexd model, 3.2 s of seed 0");
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
        check(seed, Rules::ALL_ON, (0, u64::MAX), setting("MODEL_EVERY_MS", 200), b.clone())
            .assert_safe(&format!("ntmutexd model, seed {seed}"));
    }
}

/// reliability.md's invariants of the stage before leases that hold
/// always (`workload::staged_safety` without the detector-accurate part):
/// within an epoch fences rise (one token per epoch), and a new token's
/// first fence is above every fence granted before the token was created.
/// The judge of runs without leases.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Staged {
    max_fence: u128,
    /// Epoch → the highest fence granted in it.
    by_epoch: BTreeMap<u64, u128>,
    /// Epoch of each token created (in the model) → the highest fence
    /// granted before.
    created: BTreeMap<u64, u128>,
    grants: u32,
}

fn staged(j: &mut Staged, t: Instant, node: NodeId, seen: Seen<'_, NtEvent, LockReply>) -> Result<(), String> {
    match seen {
        Seen::Event(NtEvent::Regenerated { epoch }) if j.created.insert(*epoch, j.max_fence).is_some() => {
            return Err(format!("{node} created a token of epoch {epoch:#x} a second time"));
        }
        Seen::Event(NtEvent::Lock(LockEvent::Granted { fence, .. })) => {
            let (epoch, _) = lockservice::fence_parts(*fence);
            match j.by_epoch.insert(epoch, *fence) {
                Some(before) if *fence <= before => {
                    return Err(format!("{node} granted fence {fence:#x} at {t} after {before:#x} of the same epoch"));
                }
                Some(_) => {}
                None => {
                    if let Some(before) = j.created.get(&epoch).filter(|b| *fence <= **b) {
                        return Err(format!(
                            "{node} granted fence {fence:#x} at {t}, the first of a token created after {before:#x} was granted"
                        ));
                    }
                }
            }
            j.max_fence = j.max_fence.max(*fence);
            j.grants += 1;
        }
        _ => {}
    }
    Ok(())
}

/// Each rule switched off in turn (`MODEL_ONLY=<switch>[,<switch>…]` for
/// some), checked
/// near `MODEL_SEEDS` runs: with leases, by the lease invariants; with
/// `MODEL_NO_LEASES=1`, leases off too and judged by `Staged`.
/// Prints what breaks.
#[test]
#[ignore]
fn survey() {
    let only = std::env::var("MODEL_ONLY").ok();
    let no_leases = setting("MODEL_NO_LEASES", 0) == 1;
    let b = Bounds::near(Duration::from_millis(setting("MODEL_HORIZON_MS", 4)), setting("MODEL_DEPTH", 8) as usize);
    for (name, m) in all_single() {
        if only.as_deref().is_some_and(|o| !o.split(',').any(|o| o == name)) {
            continue;
        }
        let m = if no_leases { m.without(NtRule::GrantsUnderLeases) } else { m };
        for seed in 0..setting("MODEL_SEEDS", 2) {
            let every = setting("MODEL_EVERY_MS", 200);
            let sum = if no_leases {
                check_by(seed, m, (0, u64::MAX), every, b.clone(), (Staged::default(), staged, |j: &Staged| j.grants))
            } else {
                check_by(seed, m, (0, u64::MAX), every, b.clone(), (LockJudge::new(), judge, LockJudge::grants))
            };
            let sum = match sum {
                Ok(sum) => sum,
                Err(e) => {
                    eprintln!(
                        "{name} seed {seed}: the simulated run itself fails: {}",
                        e.to_string().lines().next().unwrap_or("")
                    );
                    break;
                }
            };
            eprintln!("{name} seed {seed}: {sum}");
            if let Some(first) = sum.broken.first() {
                eprintln!("  {first}");
                break;
            }
        }
    }
}
