//! `--check-config`'s failover rows (`TokenwatchdConfig::worst_cases`,
//! tokenwatchd.md, Worst cases) against the simulator, at the daemon's
//! default settings on 5 nodes (not the fast timings of
//! `workload::cfg`), over a network that loses nothing and delivers
//! every datagram within δ (`max_datagram_delay_ms`).
//!
//! A client of node V holds the lock, a client of node U asks for it, and
//! V's daemon is killed (SIGKILL; tokenwatchd takes no hint from the
//! transport) or stopped (SIGSTOP, for good): U's client must be granted
//! within the row's bound, and, whenever only one process claimed, within
//! the time one Claim alone takes. The rows have no bound because Claims
//! that meet both fail and back off, and may meet again (seeds 0, 2 and 6
//! of the Kill runs take 25–37 s, against 20 s for one Claim; in a sweep
//! of 400 seeds a third of the runs take longer than one Claim, and seed
//! 21's kill 106 s): that is checked too, so a fix that bounds them makes
//! this test ask for the rows to change. The killed node is then
//! restarted with its state and a client of it asks: granted within the
//! Restart row (about 2 s here: the waiter's client holds until
//! `max_hold`).
//!
//! `SIM_SEEDS=400 cargo test --release -p tokenwatchd --test worst -- --nocapture` for a
//! longer sweep.

mod workload;

use std::collections::BTreeSet;
use std::time::Duration;

use ftcore::{ClientId, NodeId};
use lockservice::{LockReply, LockRequest};
use runtime::config::{CommonConfig, DaemonConfig, PeerConfig, WorstRow};
use sim::{for_seeds, Action, NetConfig, Sim, SimError, World};
use timer::Instant;
use tokenwatchd::{TokenwatchdConfig, TwConfig, TwEvent, TwNode};
use workload::safety;

/// The cluster of `ftlab drill`: 5 nodes, every setting at its default.
fn five_nodes() -> CommonConfig {
    let peers = (1..=5)
        .map(|id| PeerConfig { id, addr: format!("127.0.0.1:{}", 7300 + id).parse().expect("an address") })
        .collect();
    CommonConfig { node_id: 1, peers, ..CommonConfig::default() }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Kill,
    Stop,
}

/// What one run measured.
struct Failover {
    /// The fault → the waiting client granted.
    took: Duration,
    /// How many processes started Claims after the fault.
    claimants: usize,
    /// After a kill: the node restarted → its client granted.
    restart: Option<Duration>,
}

fn acquire(node: NodeId, client: ClientId) -> Action<TwNode> {
    Action::Request(node, client, LockRequest::Acquire { timeout_ms: 600_000 })
}

/// When `client` of `node` was first granted.
fn granted(w: &World<TwNode>, node: NodeId, client: ClientId) -> Option<Instant> {
    w.replies
        .iter()
        .find(|(_, n, c, r)| *n == node && *c == client && matches!(r, LockReply::Granted { .. }))
        .map(|(t, _, _, _)| *t)
}

/// Runs `client` of `node` asking now until it is granted (at most
/// `limit` later); returns how long that took.
fn ask(sim: &mut Sim<TwNode>, node: NodeId, client: ClientId, limit: Duration) -> Result<Duration, SimError> {
    let at = sim.now();
    sim.after(Duration::ZERO, acquire(node, client));
    let what = format!("{node}'s client {client:?} was not granted");
    sim.run_until_true(at + limit, &what, |w| granted(w, node, client).is_some())?;
    Ok(granted(sim.world(), node, client).map_or(Duration::ZERO, |t| t.saturating_since(at)))
}

/// The holder's node V hit by `fault` while a client of U waits (V and U
/// drawn from the seed, the fault up to 20 ms after the grant at V, the
/// ring idle for up to 3 s before). `limit`: how long each wait may take.
fn failover(seed: u64, fault: Fault, core: &TwConfig, limit: Duration) -> Result<Failover, SimError> {
    let net = NetConfig::datagram(Duration::from_micros(100), core.max_delay, 0.0, 0.0);
    let mut sim = Sim::new(seed, 5, net, core.clone());
    sim.check(safety());
    let v = NodeId(u32::try_from(sim.rng().range_inclusive(1, 5)).unwrap_or(1));
    let u = NodeId((v.0 + u32::try_from(sim.rng().range_inclusive(0, 3)).unwrap_or(0)) % 5 + 1);
    // No --new-cluster in the simulator: the first token comes after the
    // restart window, when the first Claims do not meet (not timed here).
    sim.run_until_true(Instant::ZERO + limit, "no token", |w| w.live().any(|(_, c)| c.has_token()))?;
    let idle = Duration::from_millis(sim.rng().range_inclusive(0, 3_000));
    sim.run_for(idle)?;
    ask(&mut sim, v, ClientId(1), limit)?;
    sim.after(Duration::ZERO, acquire(u, ClientId(2)));
    let after = Duration::from_millis(sim.rng().range_inclusive(0, 20));
    sim.run_for(after)?;
    let at = sim.now();
    sim.after(Duration::ZERO, if fault == Fault::Kill { Action::Kill(v) } else { Action::Pause(v) });
    let what = format!("{fault:?} of {v}: {u}'s client was not granted");
    sim.run_until_true(at + limit, &what, |w| granted(w, u, ClientId(2)).is_some())?;
    let w = sim.world();
    let took = granted(w, u, ClientId(2)).map_or(Duration::ZERO, |t| t.saturating_since(at));
    let claimants: BTreeSet<NodeId> = w
        .events
        .iter()
        .filter(|(t, _, e)| *t >= at && matches!(e, TwEvent::ClaimStarted { .. }))
        .map(|(_, n, _)| *n)
        .collect();
    let restart = match fault {
        Fault::Kill => {
            sim.after(Duration::ZERO, Action::Restart(v));
            Some(ask(&mut sim, v, ClientId(3), limit)?)
        }
        Fault::Stop => None,
    };
    Ok(Failover { took, claimants: claimants.len(), restart })
}

#[test]
fn the_failover_rows_hold_in_the_simulator_and_meeting_claims_leave_them_unbounded() {
    let daemon = TokenwatchdConfig::default();
    let common = five_nodes();
    let core = daemon.core(&common);
    let rows = daemon.worst_cases(&common);
    let bound = |row: WorstRow| rows.iter().find(|r| r.row == row).and_then(|r| r.bound);
    let one_claim = daemon.failover_by_one_claim(&common);
    let restart = bound(WorstRow::Restart);
    // Every wait gives up well past any time seen (106 s in 800 runs).
    let limit = Duration::from_secs(300);
    let mut longest = Duration::ZERO;
    for (fault, row) in [(Fault::Kill, WorstRow::Kill), (Fault::Stop, WorstRow::Stop)] {
        let bound = bound(row);
        for_seeds(10, |seed| {
            let f = failover(seed, fault, &core, limit)?;
            let fail = |what: String| Err(SimError::new(seed, Instant::ZERO, what));
            if bound.is_some_and(|b| f.took > b) {
                return fail(format!("{fault:?}: granted after {:?}, above the {row:?} row's {bound:?}", f.took));
            }
            if f.claimants == 1 && f.took > one_claim {
                return fail(format!("{fault:?}: one claimant, granted after {:?}, above {one_claim:?}", f.took));
            }
            if let (Some(r), Some(b)) = (f.restart, restart) {
                if r > b {
                    return fail(format!("restarted, its client granted after {r:?}, above the Restart row's {b:?}"));
                }
            }
            // Shown with --nocapture, for a survey of a longer sweep.
            eprintln!("{fault:?} seed {seed}: {:?}, {} claimants, restart {:?}", f.took, f.claimants, f.restart);
            longest = longest.max(f.took);
            Ok(())
        });
    }
    // Claims met in some run and outlasted one Claim: no bound holds.
    if std::env::var_os("SIM_SEED").is_none() {
        assert!(
            longest > one_claim,
            "no failover took longer than one Claim ({one_claim:?}): if Claims no longer meet, give the rows bounds"
        );
        assert_eq!((bound(WorstRow::Kill), bound(WorstRow::Stop)), (None, None));
    }
}
