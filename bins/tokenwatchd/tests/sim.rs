//! tokenwatchd in the deterministic simulator: clients loop acquire → hold
//! → release on every process over a datagram network that loses,
//! duplicates and reorders, while holders crash and restart, pause, and
//! are cut off. Checked after every step, whatever the faults (grants are
//! leases: reliability.md, Invariants by stage): no two client leases
//! overlap, and fences strictly rise in grant order.
//!
//! The long sweep: `SIM_SEEDS=3000 cargo test --release -p tokenwatchd --test sim`.

mod workload;

use std::collections::BTreeSet;
use std::time::Duration;

use ftcore::rules::Rules;
use ftcore::{ClientId, NodeId};
use sim::{for_seeds, Action, NetConfig, Sim, SimError};
use timer::Instant;
use tokenwatchd::{TwConfig, TwEvent, TwNode};
use workload::*;

#[test]
fn lossy_ring_serves_everyone_with_unique_rising_fences() {
    for_seeds(20, |seed| {
        let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.2, 0.05);
        let mut sim = cluster(seed, 5, net);
        sim.check(safety());
        sim.run_until(Instant::from_millis(15_000))?;
        let g = grants(sim.world());
        let nodes: BTreeSet<NodeId> = g.iter().map(|(_, n, _)| *n).collect();
        if g.len() < 100 || nodes.len() < 5 {
            return Err(sim.error(format!("only {} grants, to {nodes:?}", g.len())));
        }
        Ok(())
    });
}

/// A one-node cluster on a fresh disk serves once its restart window is
/// over (it joined unrecovered and never claimed: no grant ever), and
/// again after a crash and a restart with its state.
#[test]
fn a_one_node_cluster_serves_from_a_fresh_disk_and_after_a_restart() {
    for_seeds(5, |seed| {
        let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.0, 0.0);
        let mut sim = cluster(seed, 1, net);
        sim.check(safety());
        sim.run_until(Instant::from_millis(5_000))?;
        let first = grants(sim.world()).len();
        if first == 0 {
            return Err(sim.error("a lone fresh node granted nothing in 5 s"));
        }
        sim.after(Duration::ZERO, Action::Crash(NodeId(1)));
        sim.run_for(Duration::from_millis(10))?;
        sim.after(Duration::ZERO, Action::Restart(NodeId(1)));
        // The crash lost the clients' requests: a new client asks.
        sim.after(Duration::from_millis(1), acquire(NodeId(1), ClientId(7)));
        sim.run_for(Duration::from_millis(5_000))?;
        if grants(sim.world()).len() <= first {
            return Err(sim.error("no grant after the restart"));
        }
        Ok(())
    });
}

#[test]
fn a_crashed_holder_is_replaced_by_a_regenerated_token() {
    for_seeds(20, |seed| {
        let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.1, 0.0);
        let mut sim = cluster(seed, 5, net);
        sim.check(safety());
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
    for_seeds(20, |seed| every_fault(seed, Rules::ALL_ON).map(|_| ()));
}

/// `tpc_reserve` (the counter stored 16 ahead, a state write every 16
/// counts): the same faults keep every invariant — a restarted process
/// answers tokens of its last block `Stale` and the ring regenerates —
/// and service returns. `SIM_SEEDS=2000 cargo test --release -p
/// tokenwatchd --test sim reserve` for the long run.
#[test]
fn a_tpc_reserve_keeps_every_invariant_through_every_fault() {
    let c = TwConfig { tpc_reserve: 16, ..cfg() };
    for_seeds(20, |seed| {
        every_fault_cfg(seed, c.clone())?;
        pauses_and_partitions_cfg(seed, c.clone()).map(|_| ())
    });
}

/// The faults leases are for, pauses (up to 2 s, beyond a bypass and a
/// lost-token Claim) and partitions, mixed at random with loss, crashes
/// and slow links: no two client leases overlap and fences rise in grant
/// order at every step, and service returns.
#[test]
fn pauses_and_partitions_never_overlap_two_leases() {
    for_seeds(100, |seed| pauses_and_partitions(seed, Rules::ALL_ON).map(|_| ()));
}

/// The holder's process is paused (SIGSTOP) for 2 s while its client
/// holds, far beyond the time the others take to count the token lost
/// and regenerate it. The client keeps its lease to its end (a pause
/// stops the daemon, not the client); the new token grants only after
/// that, with higher fences; the paused process, resumed, grants nothing
/// with its old token and is served again by the new one.
#[test]
fn a_paused_holder_keeps_its_clients_lease_and_the_ring_moves_on() {
    for_seeds(20, |seed| {
        let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.0, 0.0);
        let mut sim = cluster(seed, 5, net);
        sim.check(safety());
        sim.run_until(Instant::from_millis(3_000))?;
        let mut holder = None;
        for _ in 0..50_000 {
            holder = sim.world().live().find(|(_, c)| c.is_holding_a_client()).map(|(id, _)| id);
            if holder.is_some() {
                break;
            }
            sim.run_for(Duration::from_micros(100))?;
        }
        let Some(holder) = holder else { return Err(sim.error("no client held the lock")) };
        sim.after(Duration::ZERO, Action::Pause(holder));
        let paused = sim.now();
        sim.after(Duration::from_secs(2), Action::Resume(holder));
        // Claims that meet may take a few rounds (seed 15: 6.7 s).
        sim.run_for(Duration::from_secs(15))?;
        let w = sim.world();
        let regen = w.events.iter().any(|(t, _, e)| *t > paused && matches!(e, TwEvent::Regenerated { .. }));
        let served_again = grants(w).iter().any(|(t, n, _)| *n == holder && *t > paused + Duration::from_secs(2));
        if !regen || !served_again {
            return Err(sim.error(format!("{holder} paused: regenerated {regen}, served again {served_again}")));
        }
        Ok(())
    });
}

/// Seeds per loss rate in the default run (`SIM_SEEDS` overrides).
const PER_RATE: u64 = 60;

#[test]
fn no_loss_within_the_bounds() {
    for_seeds(PER_RATE, |seed| within_bounds(seed, 0.0).map(|_| ()));
}

#[test]
fn ten_percent_loss_within_the_bounds() {
    for_seeds(PER_RATE, |seed| within_bounds(seed, 0.10).map(|_| ()));
}

#[test]
fn thirty_percent_loss_within_the_bounds() {
    for_seeds(PER_RATE, |seed| within_bounds(seed, 0.30).map(|_| ()));
}

#[test]
fn forty_five_percent_loss_within_the_bounds() {
    for_seeds(PER_RATE, |seed| within_bounds(seed, 0.45).map(|_| ()));
}

/// The long sweep: 5,000 seeds of every scenario above (about 70 minutes
/// on one thread of a 2-core VM in release). Shard it with `SIM_SEED_FROM`.
#[test]
#[ignore = "long sweep: cargo test --release -p tokenwatchd --test sim -- --ignored sweep"]
fn sweep_5000_seeds_of_every_scenario() {
    for_seeds(5_000, |seed| {
        for loss in [0.0, 0.10, 0.30, 0.45] {
            within_bounds(seed, loss)?;
        }
        pauses_and_partitions(seed, Rules::ALL_ON)?;
        every_fault(seed, Rules::ALL_ON).map(|_| ())
    });
}

/// 10^6 token passes at 30 % loss (5 % duplication, reordering), clients
/// locking throughout: at no step do two processes hold the token, and no
/// fence is granted twice or out of order.
#[test]
#[ignore = "long: cargo test --release -p tokenwatchd --test sim -- --ignored million"]
fn a_million_passes_at_30_percent_loss_never_duplicate_the_token() {
    use std::cell::Cell;
    use std::rc::Rc;
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.30, 0.05);
    let mut sim = cluster_cfg(1, 5, net, cfg_with_retransmits(5)).without_trace();
    let passes = Rc::new(Cell::new(0u64));
    let (count, started) = (passes.clone(), std::time::Instant::now());
    let (mut fences, mut max, mut holders_max) = (BTreeSet::new(), 0u128, 0usize);
    sim.check(move |w| {
        let holders = w.live().filter(|(_, c)| c.has_token()).count();
        holders_max = holders_max.max(holders);
        if holders > 1 {
            return Err(format!("{holders} processes hold the token"));
        }
        for (_, _, e) in w.step_events() {
            match e {
                TwEvent::Passed { .. } => count.set(count.get() + 1),
                TwEvent::Lock(lockservice::LockEvent::Granted { fence, .. }) => {
                    if !fences.insert(*fence) || *fence <= max {
                        return Err(format!("fence {fence:#x} granted twice or after {max:#x}"));
                    }
                    max = *fence;
                }
                _ => {}
            }
        }
        Ok(())
    });
    while passes.get() < 1_000_000 {
        sim.run_for(Duration::from_secs(10)).unwrap_or_else(|e| panic!("{e}"));
        sim.forget_history();
    }
    let w = sim.world();
    eprintln!(
        "{} passes in {} simulated ({} messages) in {:?}: never two holders",
        passes.get(),
        w.now,
        w.messages_sent(),
        started.elapsed()
    );
}

/// The daemon's settings when its config leaves them at their defaults
/// (`ftlab up`, `ftlab chaos`): `bypass_after = max_hold + ring_timeout +
/// δ` (2.15 s) and `token_lost_after` a quarter above its bound (11.3 s at
/// N = 5).
fn daemon_defaults() -> TwConfig {
    let mut c = TwConfig::default();
    c.bypass_after = c.max_hold + c.ring_timeout + c.max_delay;
    let bound = c.token_lost_bound(5);
    c.token_lost_after = bound + bound / 4;
    c
}

/// `ftlab chaos tokenwatchd --kills 4 --pause` in the simulator, with the
/// daemon's default settings: once the first token serves, four faults,
/// each on a random process, a SIGKILL and a restart or (half the time) a
/// SIGSTOP and a SIGCONT, down 100–1,500 ms; the next fault 1 s after
/// service came back. Returns, for each fault, how long after it a client
/// was granted again.
fn chaos_gaps(seed: u64, c: &TwConfig) -> Result<(Sim<TwNode>, Vec<Duration>), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(2), 0.0, 0.0);
    let mut sim = cluster_cfg(seed, 5, net, c.clone());
    // Pauses beyond bypass_after − max_hold: fences only.
    sim.check(safety());
    let served_after = |sim: &mut Sim<TwNode>, at: Instant| -> Result<Option<Instant>, SimError> {
        let give_up = at + Duration::from_secs(60);
        while sim.now() < give_up {
            sim.run_for(Duration::from_millis(5))?;
            if let Some(t) = grants(sim.world()).into_iter().map(|(t, _, _)| t).find(|t| *t > at) {
                return Ok(Some(t));
            }
        }
        Ok(None)
    };
    if served_after(&mut sim, Instant::ZERO)?.is_none() {
        return Err(sim.error("no first token"));
    }
    let mut gaps = Vec::new();
    for k in 0..4u64 {
        sim.run_for(Duration::from_secs(1))?;
        let node = NodeId(u32::try_from(sim.rng().range_inclusive(1, 5)).unwrap_or(1));
        let down = Duration::from_millis(sim.rng().range_inclusive(100, 1_500));
        let kill = sim.rng().chance(0.5);
        let at = sim.now();
        if kill {
            sim.after(Duration::ZERO, Action::Crash(node));
            sim.after(down, Action::Restart(node));
        } else {
            sim.after(Duration::ZERO, Action::Pause(node));
            sim.after(down, Action::Resume(node));
        }
        // A client on every process asks again once the process is back.
        for i in 1..=5u32 {
            let client = ClientId(1_000 * (k + 1) + u64::from(i));
            sim.after(down + Duration::from_millis(1), acquire(NodeId(i), client));
        }
        let what = if kill { "SIGKILL" } else { "SIGSTOP" };
        let Some(t) = served_after(&mut sim, at)? else {
            return Err(sim.error(format!("fault {k} ({what} {node} for {down:?}): no grant within 60 s")));
        };
        gaps.push(t.saturating_since(at));
    }
    Ok((sim, gaps))
}

/// A process paused or killed and restarted costs at most a detection and
/// a Claim lap (performance.md: SIGKILL of the holder → token passes again
/// within `token_lost_after` + one Claim lap): `token_lost_after` plus the
/// random part of its deadline (up to W/2), or a bypass (`max_hold` +
/// r·`ring_timeout` + `bypass_after`), whatever the fault, wherever the
/// token was, and however soon after the last regeneration (whose promise
/// windows end within W of it). Two Claims that meet (lost deadlines within
/// a lap of each other) both fail, and the promise windows their adopters
/// keep refuse the other for W·(1+ρ) (foundation.md): such a fault may take
/// one window and a retry's jitter (W/10) more, W + W/8, and it is rare: at
/// most one fault of a run.
///
/// Before the fix, a Claim refused by a process in its restart window, or
/// by one whose refusals of older claimants ran on with every Claim it
/// refused, or a ring of bypasses of live successors, left promise windows
/// that refused the next Claim, and the claimants backed off by up to 4·W
/// more: service came back after 25 s to over a minute.
#[test]
fn after_each_pause_or_kill_service_returns_within_token_lost_after_and_a_lap() {
    let c = daemon_defaults();
    let w = c.token_lost_after;
    let bound = w + w / 2 + c.max_hold + c.ring_timeout * c.max_retransmits + c.bypass_after;
    let met = bound + w + w / 8;
    for_seeds(40, |seed| {
        let (sim, gaps) = chaos_gaps(seed, &c)?;
        let over = gaps.iter().filter(|g| **g > bound).count();
        if gaps.iter().any(|g| *g > met) || over > 1 {
            return Err(sim.error(format!(
                "service came back {gaps:?} after the faults: above {bound:?} ({over} of them), or {met:?}"
            )));
        }
        Ok(())
    });
}

/// `sim::bytes`, the fuzz targets' driver (`fuzz/`, core_tokenwatchd), over
/// 20,000 seeded random inputs: peer messages and client requests decoded
/// as the real types, clients leaving, links lost, peers unreachable, time
/// passing, from a fresh or a decoded stored state. The core never panics
/// and never asks to be woken in the past after handling that time.
#[test]
fn arbitrary_inputs_never_panic_the_core() {
    let d = sim::wire_decoders!(tokenwatchd::TwNode);
    let handled = sim::bytes::smoke(cfg, &d, 20_000, 7);
    assert!(handled > 200_000, "only {handled} inputs decoded and handled");
}

/// A holder keeps its lock through another process's long pause: node 3
/// is paused (SIGSTOP) for longer than `token_lost_after`, and resumed
/// 20 ms after node 1's client is granted (it holds 80 ms, under
/// `max_hold`). A known liveness weakness, not fixed: on resume 3's
/// overdue token-lost timer fires before it reads its queued input; it
/// claims at once, refuses the holder's queued renewals with its proposal,
/// and the holder drops the token: `LockLost` (seeds 6, 16, … of 0–19).
/// Safety holds (the checker runs). A fix tried on 2026-11-27 (a last
/// look of `ring_timeout` before a Claim on silence, and a holding
/// renewal counting as the token seen) passes this test but moves Claim
/// timing under six scripted mask scenarios of tests/safety.rs, which
/// would need re-tuning first.
#[test]
#[ignore = "known liveness weakness: a process resumed after token_lost_after claims before reading the holder's renewals"]
fn a_holder_keeps_its_lock_through_another_process_s_long_pause() {
    use lockservice::{LockReply, LockRequest};
    for_seeds(20, |seed| {
        let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(2), 0.0, 0.0);
        let c = cfg();
        let lost = c.token_lost_after;
        let mut sim = Sim::new(seed, 5, net, c);
        sim.clients(Box::new(|_, node, client, reply, _| match reply {
            LockReply::Granted { .. } => {
                vec![(Duration::from_millis(80), Action::Request(node, client, LockRequest::Release))]
            }
            _ => vec![],
        }));
        sim.check(safety());
        sim.run_until(Instant::from_millis(3_000))?;
        sim.after(Duration::ZERO, Action::Pause(NodeId(3)));
        sim.run_for(lost + Duration::from_millis(100))?;
        sim.after(Duration::ZERO, acquire(NodeId(1), ClientId(1)));
        let granted = |w: &sim::World<TwNode>| {
            w.replies.iter().any(|r| r.1 == NodeId(1) && matches!(r.3, LockReply::Granted { .. }))
        };
        // If 3 was paused with the token, it is lost: Claims that meet
        // may take a few rounds (as in the paused-holder test above).
        let end = sim.now() + Duration::from_secs(15);
        sim.run_until_true(end, "1's client was not granted", granted)?;
        sim.run_for(Duration::from_millis(20))?;
        sim.after(Duration::ZERO, Action::Resume(NodeId(3)));
        sim.run_for(Duration::from_millis(300))?;
        let told: Vec<_> = sim.world().replies.iter().filter(|r| r.1 == NodeId(1)).map(|r| &r.3).collect();
        if lockservice::check::held_until_released(&told) {
            Ok(())
        } else {
            Err(sim.error(format!("1's client was told {told:?}")))
        }
    });
}
