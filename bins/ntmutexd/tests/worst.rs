//! `--check-config`'s worst cases in the deterministic simulator: at the
//! daemon's default settings (N = 5), a client of node V holds the lock and
//! a client of node W waits; V's process is killed (its peers hear at once
//! that it is gone, `Action::Kill`) or V is paused (SIGSTOP: silence only,
//! `Action::Pause`). W's client must be granted within the Kill or Stop
//! row of `worst_cases` for the same configuration (docs/ntmutexd.md,
//! "Worst cases (`--check-config`)").
//!
//! The waiter is reached three ways: queued behind V after V's grant (its
//! Commit names V alone); queued behind V while V itself waited (its Commit
//! names V and V's predecessor, which M1 asks first); or hit before its
//! request was committed. Every other seed runs on a network whose one-way
//! delays reach `t_msg`, the rows' assumption.

mod workload;

use std::time::Duration;

use ftcore::{ClientId, NodeId};
use lockservice::LockRequest;
use ntmutexd::{NtConfig, NtNode, NtmutexdConfig};
use runtime::config::{load_minimal, DaemonConfig, WorstRow};
use sim::{for_seeds, Action, NetConfig, Sim, SimError};
use timer::Instant;
use workload::*;

/// The core's settings and the row's bound for the daemon's defaults on
/// five nodes, as `--check-config` computes them.
fn defaults(row: WorstRow) -> (NtConfig, Duration) {
    let cfg = load_minimal::<NtmutexdConfig>(5).expect("a minimal config loads");
    let bound = cfg.daemon.worst_cases(&cfg.common).into_iter().find(|r| r.row == row).and_then(|r| r.bound);
    (cfg.daemon.core(&cfg.common), bound.expect("a bounded row"))
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Stop,
}

/// How the waiter came to wait.
#[derive(Clone, Copy, Debug)]
enum Waiter {
    /// It asked after V was granted: its Commit names V only.
    AfterGrant,
    /// It queued behind V while V waited for U's release: its Commit names
    /// V and U.
    BehindWaiting,
    /// The fault comes within 2 ms of its request, before its Commit.
    JustAsked,
}

/// One run: returns the time from the fault to W's grant.
fn failover(seed: u64, fault: Fault, core: &NtConfig, bound: Duration) -> Result<Duration, SimError> {
    let net = if seed.is_multiple_of(2) {
        net()
    } else {
        // The bound's assumption at its edge: every delay up to t_msg.
        NetConfig::reliable(Duration::from_micros(200), core.t_msg)
    };
    let mut sim: Sim<NtNode> = Sim::new(seed, 5, net, core.clone());
    sim.check(lease_safety());
    let mut ids: Vec<u32> = (1..=5).collect();
    let pick = |sim: &mut Sim<NtNode>, ids: &mut Vec<u32>| {
        let i = sim.rng().range_inclusive(0, ids.len() as u64 - 1) as usize;
        NodeId(ids.remove(i))
    };
    let (v, w, u) = (pick(&mut sim, &mut ids), pick(&mut sim, &mut ids), pick(&mut sim, &mut ids));
    let waiter = [Waiter::AfterGrant, Waiter::BehindWaiting, Waiter::JustAsked][(seed / 2 % 3) as usize];
    let client = |n: NodeId| ClientId(u64::from(n.0));
    let limit = Instant::from_millis(3_000);
    let holds = |n: NodeId| move |w: &sim::World<NtNode>| w.core(n).is_some_and(|c| c.holder().is_some());
    let queued = |n: NodeId| move |w: &sim::World<NtNode>| w.core(n).is_some_and(|c| c.position().is_some());

    // The cluster's first token is made by then.
    sim.run_until(Instant::from_millis(600))?;
    if let Waiter::BehindWaiting = waiter {
        sim.after(Duration::ZERO, acquire(u, client(u)));
        sim.run_until_true(limit, "U holds", holds(u))?;
        sim.after(Duration::ZERO, acquire(v, client(v)));
        sim.run_until_true(limit, "V queued", queued(v))?;
    } else {
        sim.after(Duration::ZERO, acquire(v, client(v)));
        sim.run_until_true(limit, "V holds", holds(v))?;
    }
    sim.after(Duration::ZERO, acquire(w, client(w)));
    match waiter {
        Waiter::AfterGrant => sim.run_until_true(limit, "W queued", queued(w))?,
        Waiter::BehindWaiting => {
            sim.run_until_true(limit, "W queued", queued(w))?;
            sim.after(Duration::ZERO, Action::Request(u, client(u), LockRequest::Release));
            sim.run_until_true(limit, "V holds", holds(v))?;
        }
        Waiter::JustAsked => {}
    }
    // Anywhere in the holder's renewal period (lease/3), or just after
    // the waiter's request.
    let wait = match waiter {
        Waiter::JustAsked => sim.rng().range_inclusive(0, 2_000),
        _ => sim.rng().range_inclusive(0, 40_000),
    };
    sim.run_for(Duration::from_micros(wait))?;
    let at = sim.now();
    if !holds(v)(sim.world()) || sim.world().core(w).is_some_and(|c| c.holder().is_some()) {
        return Err(sim.error(format!("{v} does not hold, or {w} already holds, at the {fault:?}")));
    }
    sim.after(
        Duration::ZERO,
        match fault {
            Fault::Kill => Action::Kill(v),
            Fault::Stop => Action::Pause(v),
        },
    );
    sim.run_until(at + bound + Duration::from_millis(500))?;
    let granted = sim.world().events.iter().find_map(|(t, n, e)| match e {
        ntmutexd::NtEvent::Lock(lockservice::LockEvent::Granted { .. }) if *n == w && *t >= at => Some(*t),
        _ => None,
    });
    let took = granted.map(|t| t.saturating_since(at));
    match took {
        Some(took) if took <= bound => Ok(took),
        _ => Err(sim.error(format!(
            "{fault:?} of holder {v} ({waiter:?}, U = {u}): waiter {w} granted after {took:?}, bound {bound:?}"
        ))),
    }
}

fn holds_within_the_row(fault: Fault, row: WorstRow) {
    let (core, bound) = defaults(row);
    let mut worst = Duration::ZERO;
    for_seeds(20, |seed| {
        let took = failover(seed, fault, &core, bound)?;
        worst = worst.max(took);
        Ok(())
    });
    eprintln!("{fault:?} -> next grant over the seeds: worst {worst:?}, bound {bound:?}");
}

/// `--check-config`'s Kill row: the holder's process dies, its peers hear
/// it at once, the waiter is granted within the row's bound.
#[test]
fn a_killed_holder_is_replaced_within_the_kill_row() {
    holds_within_the_row(Fault::Kill, WorstRow::Kill);
}

/// `--check-config`'s Stop row: the holder is paused (silence only), the
/// waiter is granted within the row's bound.
#[test]
fn a_stopped_holder_is_replaced_within_the_stop_row() {
    holds_within_the_row(Fault::Stop, WorstRow::Stop);
}
