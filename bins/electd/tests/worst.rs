//! electd's worst cases (`--check-config`; electd.md, "Worst cases
//! (`--check-config`)") hold in the simulator, at the daemon's default
//! settings on N = 5: the bounds are `ElectdConfig::worst_cases` of a
//! config file that sets nothing but the peers, and the simulated cores
//! run that file's settings.
//!
//! The scenario of the kill and stop rows: the coordinator (5, in office)
//! grants the lock to its own client, which keeps it; a client of another
//! node (1 to 4 by seed; 4 is the next coordinator, whose client is served
//! through the loopback) asks and is queued; then 5's process is killed
//! (its peers hear at once: `Action::Kill`, the transport's hint) or
//! stopped (silence only: `Action::Pause`). The waiting client must be
//! granted within the row's bound, and not before the failover gap (the
//! grant comes from a new coordinator). Half the seeds run on a network
//! as slow as the bounds assume ([`net`]).

mod kit;

use std::time::Duration;

use electd::{ElConfig, ElEvent, ElNode, ElectdConfig};
use ftcore::{ClientId, NodeId};
use lockservice::LockReply;
use runtime::config::{load_minimal, DaemonConfig, WorstRow, DEFAULT_CLUSTER_SIZE};
use sim::{for_seeds, Action, NetConfig, Sim, SimError, World};
use timer::Instant;

/// The default settings on N = 5 and the bound of `row` there.
fn defaults(row: WorstRow) -> (ElConfig, Duration) {
    let cfg = load_minimal::<ElectdConfig>(DEFAULT_CLUSTER_SIZE).expect("a minimal config loads");
    let c = cfg.daemon.core(&cfg.common);
    assert_eq!(c, ElConfig::default(), "the simulated cores run the daemon's defaults");
    let bound = cfg.daemon.worst_cases(&cfg.common).into_iter().find(|r| r.row == row).and_then(|r| r.bound);
    (c, bound.unwrap_or_else(|| panic!("no bound for {row:?} at the defaults")))
}

/// The network of `seed`: even seeds the kit's (one-way delays 0.2–2
/// ms), odd ones as slow as the bounds allow at the defaults: a message
/// and its answer within `hop_timeout` (100 ms), and, which is less, a
/// heartbeat acked within `lease·(1−ρ) − heartbeat` (49.9 ms: the
/// coordinator keeps its quorum lease; slower, a request is denied
/// `no_quorum` now and then and asked again `request_timeout` later).
fn net(seed: u64) -> NetConfig {
    let max = if seed.is_multiple_of(2) { Duration::from_millis(2) } else { Duration::from_micros(24_900) };
    NetConfig::reliable(Duration::from_micros(200), max)
}

/// Five processes with settings `c` on the network of `seed`; nobody
/// asks but the scenario, and no client releases. Runs until 5 is in
/// office and has been for two seconds.
fn five_with_5_in_office(seed: u64, c: ElConfig) -> Result<Sim<ElNode>, SimError> {
    let mut sim = Sim::new(seed, 5, net(seed), c);
    sim.check(kit::safety_under_pauses());
    let five = NodeId(5);
    sim.run_until_true(Instant::from_millis(30_000), "5 in office", |w| w.core(five).is_some_and(|c| c.in_office()))?;
    sim.run_for(Duration::from_secs(2))?;
    Ok(sim)
}

/// When `client` of `node` was granted at or after `since`.
fn granted_at(w: &World<ElNode>, node: NodeId, client: ClientId, since: Instant) -> Option<Instant> {
    w.replies.iter().find_map(|(t, n, cl, r)| {
        (*t >= since && *n == node && *cl == client && matches!(r, LockReply::Granted { .. })).then_some(*t)
    })
}

/// What a run of the scenario shows: from the fault to the start of the
/// term whose coordinator grants (the first `ElectionStarted` of the term
/// of the last office taken before the grant), its election (to that
/// office), and from the office to the waiting client's grant.
#[derive(Clone, Copy, Debug)]
struct Failover {
    /// The fault's time.
    at: Instant,
    to_term: Duration,
    election: Duration,
    to_grant: Duration,
}

/// The scenario above with `fault` (kill or pause of 5), the waiting
/// client of `waiter`.
fn failover(seed: u64, c: ElConfig, fault: fn(NodeId) -> Action<ElNode>, waiter: NodeId) -> Result<Failover, SimError> {
    let (five, holder, waiting) = (NodeId(5), ClientId(5), ClientId(1));
    let mut sim = five_with_5_in_office(seed, c)?;
    let asked = sim.now();
    sim.after(Duration::ZERO, kit::acquire(five, holder));
    sim.run_until_true(asked + Duration::from_secs(2), "5's client granted", |w| {
        granted_at(w, five, holder, asked).is_some()
    })?;
    sim.after(Duration::ZERO, kit::acquire(waiter, waiting));
    sim.run_for(Duration::from_millis(100))?;
    let at = sim.now();
    sim.after(Duration::ZERO, fault(five));
    sim.run_until_true(at + Duration::from_secs(30), "the waiting client granted", |w| {
        granted_at(w, waiter, waiting, at).is_some()
    })?;
    let w = sim.world();
    let granted = granted_at(w, waiter, waiting, at).unwrap_or(at);
    let since_fault = || w.events.iter().filter(|(t, _, _)| *t >= at && *t <= granted);
    let office = since_fault()
        .filter_map(|(t, _, e)| match e {
            ElEvent::TookOffice { term } => Some((*t, *term)),
            _ => None,
        })
        .next_back();
    let Some((office, term)) = office else { return Err(sim.error("granted without a new office")) };
    let started = since_fault().find_map(|(t, _, e)| match e {
        ElEvent::ElectionStarted { term: s, .. } if *s == term => Some(*t),
        _ => None,
    });
    let Some(started) = started else { return Err(sim.error(format!("term {term} in office, never started"))) };
    Ok(Failover {
        at,
        to_term: started.saturating_since(at),
        election: office.saturating_since(started),
        to_grant: granted.saturating_since(office),
    })
}

/// The waiting client of 1 to 4 (by seed) granted within `row`'s bound
/// after `fault` of the coordinator, over 20 seeds. The bound's election,
/// `election_timeout_ms` (the office deadline), is far above what an
/// election takes here (tens of ms), so the rest of it is checked too,
/// with the election's own time in its place: from the fault to the
/// last term's start, and from its office to the grant, at most the
/// bound less `election_timeout`; the grant at most
/// `max(failover_gap, request_timeout) + 3·hop_timeout` after the office
/// (the last term of every failover row), and not before the gap.
fn within_the_bound(row: WorstRow, fault: fn(NodeId) -> Action<ElNode>) {
    let (c, bound) = defaults(row);
    let gap = c.failover_gap();
    let served = gap.max(c.request_timeout) + c.hop_timeout * 3;
    let rest = bound - c.election_timeout;
    let mut took = Vec::new();
    for_seeds(20, |seed| {
        let waiter = NodeId(1 + (seed / 2 % 4) as u32);
        let f = failover(seed, c.clone(), fault, waiter)?;
        let total = f.to_term + f.election + f.to_grant;
        if total > bound || f.to_term + f.to_grant > rest || f.to_grant > served || f.to_grant < gap {
            return Err(SimError::new(
                seed,
                f.at,
                format!(
                    "{row:?}: {waiter}'s client granted {total:?} after the fault ({f:?}): the bound is {bound:?}, \
                     {rest:?} without the election, [{gap:?}, {served:?}] from the office"
                ),
            ));
        }
        took.push((total, f.to_term + f.to_grant));
        Ok(())
    });
    let (total, rest_seen) = (took.iter().map(|t| t.0).max(), took.iter().map(|t| t.1).max());
    eprintln!(
        "{row:?}: fault → grant up to {total:?} (bound {bound:?}), without the election up to {rest_seen:?} ({rest:?})"
    );
}

#[test]
fn kill_of_the_coordinator_holding_the_lock_grants_the_waiter_within_the_bound() {
    within_the_bound(WorstRow::Kill, Action::Kill);
}

#[test]
fn stop_of_the_coordinator_holding_the_lock_grants_the_waiter_within_the_bound() {
    within_the_bound(WorstRow::Stop, Action::Pause);
}

/// The restart row: a node other than the coordinator crashes, comes back
/// a second later with its state file, and a client of it asks at once
/// (the lock free): granted within the bound, over 20 seeds.
#[test]
fn a_restarted_node_serves_its_client_within_the_bound() {
    let (c, bound) = defaults(WorstRow::Restart);
    let mut took = Vec::new();
    for_seeds(20, |seed| {
        let node = NodeId(1 + (seed / 2 % 4) as u32);
        let mut sim = five_with_5_in_office(seed, c.clone())?;
        sim.after(Duration::ZERO, Action::Crash(node));
        sim.run_for(Duration::from_secs(1))?;
        let at = sim.now();
        sim.after(Duration::ZERO, Action::Restart(node));
        sim.after(Duration::ZERO, kit::acquire(node, ClientId(1)));
        sim.run_until_true(at + Duration::from_secs(10), "the restarted node's client granted", |w| {
            granted_at(w, node, ClientId(1), at).is_some()
        })?;
        let t = granted_at(sim.world(), node, ClientId(1), at).unwrap_or(at).saturating_since(at);
        if t > bound {
            return Err(sim.error(format!("{node} restarted: its client granted {t:?} after, above {bound:?}")));
        }
        took.push(t);
        Ok(())
    });
    took.sort();
    eprintln!("Restart: restart → grant {:?} to {:?} (bound {bound:?})", took[0], took[took.len() - 1]);
}
