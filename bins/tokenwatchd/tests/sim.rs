//! tokenwatchd in the deterministic simulator: clients loop acquire → hold
//! → release on every process over a datagram network that loses,
//! duplicates and reorders, while holders crash and restart. Checked after
//! every step: no fence is granted twice, fences rise in grant order, and
//! (within the bounds: no pauses, delays ≤ δ) at most one client holds.
//!
//! The long sweep: `SIM_SEEDS=3000 cargo test --release -p tokenwatchd --test sim`.

mod workload;

use std::collections::BTreeSet;
use std::time::Duration;

use ftcore::NodeId;
use sim::{for_seeds, Action, NetConfig};
use timer::Instant;
use tokenwatchd::{TwEvent, TwMutations};
use workload::*;

#[test]
fn lossy_ring_serves_everyone_with_unique_rising_fences() {
    for_seeds(20, |seed| {
        let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.2, 0.05);
        let mut sim = cluster(seed, 5, net);
        sim.check(safety(true));
        sim.run_until(Instant::from_millis(15_000))?;
        let g = grants(sim.world());
        let nodes: BTreeSet<NodeId> = g.iter().map(|(_, n, _)| *n).collect();
        if g.len() < 100 || nodes.len() < 5 {
            return Err(sim.error(format!("only {} grants, to {nodes:?}", g.len())));
        }
        Ok(())
    });
}

#[test]
fn a_crashed_holder_is_replaced_by_a_regenerated_token() {
    for_seeds(20, |seed| {
        let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.1, 0.0);
        let mut sim = cluster(seed, 5, net);
        sim.check(safety(true));
        sim.run_until(Instant::from_millis(3_000))?;
        let mut holder = None;
        for _ in 0..50_000 {
            holder = sim.world().live().find(|(_, c)| c.has_token()).map(|(id, _)| id);
            if holder.is_some() {
                break;
            }
            sim.run_for(Duration::from_micros(200))?;
        }
        let Some(holder) = holder else { return Err(sim.error("no holder")) };
        sim.after(Duration::ZERO, Action::Crash(holder));
        let killed = sim.now();
        sim.run_for(Duration::from_millis(15_000))?;
        let w = sim.world();
        let regen = w.events.iter().any(|(t, _, e)| *t > killed && matches!(e, TwEvent::Regenerated { .. }));
        let served: BTreeSet<NodeId> =
            grants(w).into_iter().filter(|(t, _, _)| *t > killed).map(|(_, n, _)| n).collect();
        if !regen || served.len() < 4 {
            return Err(sim.error(format!("after killing {holder}: regenerated {regen}, served {served:?}")));
        }
        Ok(())
    });
}

#[test]
fn every_fault_at_once_never_grants_a_fence_twice_and_service_returns() {
    for_seeds(20, |seed| every_fault(seed, TwMutations::default()).map(|_| ()));
}
