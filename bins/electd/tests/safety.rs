//! electd's (safety) rules, each defended by a simulated scenario that
//! passes with the rule and fails with it switched off
//! ([`ElMutations`], off in production). Judged from outside by the
//! checker the sweeps use (`kit::safety`: the clients' own replies never
//! show two holders, fences rise, one coordinator per term), or, for the
//! pre-vote, by the coordinator staying in office.
//!
//! Per rule, `<rule>_holds` runs the scenario with every rule on and
//! `<rule>_is_needed` with that one off, and expects the failure the rule
//! prevents. docs/safety-rules.md lists them.

mod kit;

use std::time::Duration;

use electd::{Algorithm, ElEvent, ElMutations, ElNode};
use ftcore::{ClientId, NodeId};
use kit::{acquire, config, safety};
use lockservice::{LockReply, LockRequest};
use sim::{Action, NetConfig, Sim, SimError};
use timer::Instant;

const ALGS: [Algorithm; 2] = [Algorithm::Relay, Algorithm::Ring];

/// The checker's words for two clients holding the lock at once.
const AT_ONCE: &str = "clients hold the lock at once";

/// `n` processes; each local client that is granted holds for `hold`, then
/// releases; nobody asks but the scenario.
fn cluster(seed: u64, n: u32, alg: Algorithm, m: ElMutations, hold: Duration) -> Sim<ElNode> {
    let net = NetConfig::reliable(Duration::from_micros(200), Duration::from_millis(2));
    let mut sim = Sim::new(seed, n, net, electd::ElConfig { mutations: m, ..config(alg, n) });
    sim.clients(Box::new(move |_, node, client, reply, _| match reply {
        LockReply::Granted { .. } => vec![(hold, Action::Request(node, client, LockRequest::Release))],
        _ => vec![],
    }));
    sim.check(safety());
    sim
}

/// Runs until `n` is in office (it is the highest id).
fn elect(sim: &mut Sim<ElNode>, n: u32) -> Result<(), SimError> {
    sim.run_until(Instant::from_millis(1_500))?;
    if !sim.world().core(NodeId(n)).is_some_and(|c| c.in_office()) {
        return Err(sim.error(format!("{n} is not in office")));
    }
    Ok(())
}

/// Runs in 1 ms steps until `node`'s client is granted (at most `limit`).
fn until_granted(sim: &mut Sim<ElNode>, node: u32, limit: Duration) -> Result<(), SimError> {
    let from = sim.world().replies.len();
    let end = sim.now() + limit;
    while sim.now() < end {
        sim.run_for(Duration::from_millis(1))?;
        if sim.world().replies[from..]
            .iter()
            .any(|(_, n, _, r)| *n == NodeId(node) && matches!(r, LockReply::Granted { .. }))
        {
            return Ok(());
        }
    }
    Err(sim.error(format!("{node}'s client was not granted within {limit:?}")))
}

fn client(n: u32) -> ClientId {
    ClientId(u64::from(n))
}

/// Runs `scenario` for both algorithms and a few seeds: with every rule
/// on it must pass; with `off` it must fail, with a message containing
/// one of `failures`, for at least one run.
fn defended(off: ElMutations, failures: &[&str], scenario: fn(u64, Algorithm, ElMutations) -> Result<(), SimError>) {
    let mut failed = Vec::new();
    for alg in ALGS {
        for seed in 1..=3 {
            if let Err(e) = scenario(seed, alg, ElMutations::default()) {
                panic!("{alg:?} seed {seed} fails with every rule on: {e}");
            }
            match scenario(seed, alg, off) {
                Err(e) if failures.iter().any(|f| e.to_string().contains(f)) => failed.push((alg, seed)),
                Err(e) => panic!("{alg:?} seed {seed} without the rule fails otherwise: {e}"),
                Ok(()) => {}
            }
        }
    }
    assert!(!failed.is_empty(), "no run failed with {off:?}: the scenario does not show the rule");
    eprintln!("{off:?}: {failed:?} fail with one of {failures:?}");
}

// ------------------------------------------------------------ failover gap

/// (safety) Failover gap. 1 holds a grant from 5 (its client holds 400
/// ms); 5 is cut off, and 1's link to 4 is broken so that 1 cannot
/// re-register its grant; 2 asks. 4 takes office: it must not grant
/// before 1's lease (from its last acked renewal) has surely ended.
fn failover_gap(seed: u64, alg: Algorithm, m: ElMutations) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(400));
    elect(&mut sim, 5)?;
    sim.after(Duration::ZERO, acquire(NodeId(1), client(1)));
    until_granted(&mut sim, 1, Duration::from_millis(500))?;
    sim.after(Duration::ZERO, Action::Partition(vec![NodeId(5)]));
    sim.after(Duration::ZERO, Action::Cut(NodeId(1), NodeId(4)));
    sim.after(Duration::from_millis(1), acquire(NodeId(2), client(2)));
    until_granted(&mut sim, 2, Duration::from_millis(2_000))?;
    sim.run_for(Duration::from_millis(500))
}

#[test]
fn failover_gap_holds() {
    for alg in ALGS {
        failover_gap(7, alg, ElMutations::default()).unwrap();
    }
}

#[test]
fn failover_gap_is_needed() {
    defended(ElMutations { no_failover_gap: true, ..Default::default() }, &[AT_ONCE], failover_gap);
}

// ------------------------------------------------------------ quorum lease

/// (safety) Quorum lease. 1 holds a grant from 5 (its client holds 1.5
/// s); 5 and 1 are cut off together from 2, 3, 4; 2 asks. 5 must stop
/// renewing once no majority acks its heartbeats, so 1's lease ends
/// before 4 (elected by the majority) grants to 2.
fn quorum_lease(seed: u64, alg: Algorithm, m: ElMutations) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(1_500));
    elect(&mut sim, 5)?;
    sim.after(Duration::ZERO, acquire(NodeId(1), client(1)));
    until_granted(&mut sim, 1, Duration::from_millis(500))?;
    sim.after(Duration::ZERO, Action::Partition(vec![NodeId(5), NodeId(1)]));
    sim.after(Duration::from_millis(1), acquire(NodeId(2), client(2)));
    until_granted(&mut sim, 2, Duration::from_millis(2_000))?;
    sim.run_for(Duration::from_millis(500))
}

#[test]
fn quorum_lease_holds() {
    for alg in ALGS {
        quorum_lease(7, alg, ElMutations::default()).unwrap();
    }
}

#[test]
fn quorum_lease_is_needed() {
    defended(ElMutations { no_quorum_lease: true, ..Default::default() }, &[AT_ONCE], quorum_lease);
}

// ---------------------------------------------- holder lease from a renewal

/// (safety) On `Granted` the holder starts only once a renewal is acked.
/// 3 is coordinator; what 3 sends 1 is held back while 1 asks, then 2:
/// 3 grants 1, hears no renewal, lets the grant lapse and grants 2 (who
/// holds 300 ms). Then the held `Granted` reaches 1: it must not start
/// on a grant its coordinator no longer honours.
fn lease_from_renewal(seed: u64, alg: Algorithm, m: ElMutations) -> Result<(), SimError> {
    let mut sim = cluster(seed, 3, alg, m, Duration::from_millis(300));
    elect(&mut sim, 3)?;
    sim.after(Duration::ZERO, Action::Hold(NodeId(3), NodeId(1)));
    sim.after(Duration::from_millis(1), acquire(NodeId(1), client(1)));
    sim.after(Duration::from_millis(5), acquire(NodeId(2), client(2)));
    until_granted(&mut sim, 2, Duration::from_millis(1_000))?;
    sim.after(Duration::ZERO, Action::Release(NodeId(3), NodeId(1)));
    sim.run_for(Duration::from_millis(600))
}

#[test]
fn lease_from_renewal_holds() {
    for alg in ALGS {
        lease_from_renewal(7, alg, ElMutations::default()).unwrap();
    }
}

#[test]
fn lease_from_renewal_is_needed() {
    defended(
        ElMutations { lease_from_granted: true, ..Default::default() },
        // The stale grant is used: two holders, or its fence below the one after it.
        &[AT_ONCE, "granted fence"],
        lease_from_renewal,
    );
}

// ---------------------------------------------------------------- pre-vote

/// (+) Pre-vote. 1 can send but hears nothing (every link into it is
/// cut): it suspects the coordinator and tries to elect, again and again.
/// 5 must stay in office in its term, and 2's client must be served.
fn prevote(seed: u64, alg: Algorithm, m: ElMutations) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(5));
    elect(&mut sim, 5)?;
    let term = sim.world().core(NodeId(5)).map(|c| c.term()).unwrap_or_default();
    let cut_at = sim.now();
    for i in 2..=5 {
        sim.after(Duration::ZERO, Action::Cut(NodeId(i), NodeId(1)));
    }
    sim.run_for(Duration::from_millis(2_000))?;
    let w = sim.world();
    let deposed: Vec<String> = w
        .events
        .iter()
        .filter(|(t, id, e)| *t >= cut_at && *id == NodeId(5) && matches!(e, ElEvent::SteppedDown { .. }))
        .map(|(t, _, e)| format!("{t:?} {e:?}"))
        .collect();
    if !deposed.is_empty() || w.core(NodeId(5)).map(|c| c.term()) != Some(term) {
        return Err(sim.error(format!("a one-way process deposed the coordinator of term {term}: {deposed:?}")));
    }
    sim.after(Duration::ZERO, acquire(NodeId(2), client(2)));
    until_granted(&mut sim, 2, Duration::from_millis(500))
}

#[test]
fn prevote_holds() {
    for alg in ALGS {
        prevote(7, alg, ElMutations::default()).unwrap();
    }
}

#[test]
fn prevote_is_needed() {
    defended(ElMutations { no_prevote: true, ..Default::default() }, &["deposed the coordinator"], prevote);
}
