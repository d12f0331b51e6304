//! What tokenwatchd's simulation tests share: the settings, a cluster of
//! looping clients, the grant list and the safety checker (the invariants
//! after leases, reliability.md: checked always, pauses and partitions
//! included).
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::time::Duration;

use ftcore::rules::Rules;
use ftcore::{ClientId, NodeId};
use lockservice::{LockEvent, LockReply, LockRequest};
use sim::{Action, FaultPlan, NetConfig, Sim, World};
use timer::Instant;
use tokenwatchd::{TwConfig, TwEvent, TwNode, TwRule};

pub fn cfg() -> TwConfig {
    cfg_with_retransmits(3)
}

/// `cfg` with `r` retransmissions (more under heavy loss: a hand-off is
/// bypassed only when all `r + 1` transmissions or their ACKs are lost).
pub fn cfg_with_retransmits(r: u32) -> TwConfig {
    let mut c = TwConfig {
        ring_timeout: Duration::from_millis(20),
        max_retransmits: r,
        max_hold: Duration::from_millis(100),
        token_min_hold: Duration::from_millis(2),
        max_delay: Duration::from_millis(5),
        bypass_after: Duration::from_millis(130),
        token_lost_after: Duration::ZERO,
        drift_ppm: 1_000,
        // Renewed every 10 ms; lease·(1+ρ) + lease/3 = 40.03 ms fits in
        // suspect_after·(1−ρ) = 59.94 ms.
        lease: Duration::from_millis(30),
        suspect_after: Duration::from_millis(60),
        allow_minority: false,
        max_queue: 64,
        tpc_reserve: 1,
        rules: Rules::ALL_ON,
        first_tpc: Default::default(),
    };
    c.token_lost_after = c.token_lost_bound(5) + Duration::from_millis(50);
    c
}

pub fn acquire(node: NodeId, client: ClientId) -> Action<TwNode> {
    Action::Request(node, client, LockRequest::Acquire { timeout_ms: 60_000 })
}

pub fn cluster(seed: u64, n: u32, net: NetConfig) -> Sim<TwNode> {
    cluster_with(seed, n, net, Rules::ALL_ON)
}

/// `cluster` with the rules in `m` switched off (tests/safety.rs).
pub fn cluster_with(seed: u64, n: u32, net: NetConfig, m: Rules<TwRule>) -> Sim<TwNode> {
    cluster_cfg(seed, n, net, TwConfig { rules: m, ..cfg() })
}

/// `cluster` with these settings.
pub fn cluster_cfg(seed: u64, n: u32, net: NetConfig, config: TwConfig) -> Sim<TwNode> {
    cluster_holding(seed, n, net, config, (1, 20))
}

/// `cluster_cfg` whose clients hold the lock between `hold.0` and
/// `hold.1` ms (unless they lose it first).
pub fn cluster_holding(seed: u64, n: u32, net: NetConfig, config: TwConfig, hold: (u64, u64)) -> Sim<TwNode> {
    let mut sim = Sim::new(seed, n, net, config);
    sim.clients(Box::new(move |_, node, client, reply, rng| {
        let ms = |rng: &mut timer::SeededRng, lo, hi| Duration::from_millis(rng.range_inclusive(lo, hi));
        match reply {
            LockReply::Granted { .. } => {
                vec![(ms(rng, hold.0, hold.1), Action::Request(node, client, LockRequest::Release))]
            }
            LockReply::Released | LockReply::TimedOut | LockReply::LockLost { .. } => {
                vec![(ms(rng, 1, 30), acquire(node, client))]
            }
            LockReply::Refused { .. }
            | LockReply::Renewed { .. }
            | LockReply::Locks { .. }
            | LockReply::Leader { .. } => {
                vec![]
            }
        }
    }));
    for i in 1..=n {
        sim.at(Instant::from_millis(10 + u64::from(i)), acquire(NodeId(i), ClientId(u64::from(i))));
    }
    sim
}

/// Grants in order: (time, node, fence).
pub fn grants(w: &World<TwNode>) -> Vec<(Instant, NodeId, u128)> {
    w.events
        .iter()
        .filter_map(|(t, n, e)| match e {
            TwEvent::Lock(LockEvent::Granted { fence, .. }) => Some((*t, *n, *fence)),
            _ => None,
        })
        .collect()
}

/// The invariants after leases (reliability.md, Invariants by stage),
/// checked after every step, whatever the faults: each grant holds from
/// its grant until the earlier of its client's release (or disconnect) and
/// its latest `lease_until` (a crash, a `LockLost` or a lost token ends
/// nothing sooner: the client outlives its daemon until its lease ends);
/// no grant while another's hold lasts; fences strictly rise in grant
/// order, so none is granted twice. A `Renewed` only ever extends a hold
/// that still lasts.
///
/// And no process ever holds the token without a successor
/// ([`a_holder_always_has_a_successor`]).
pub fn safety() -> impl FnMut(&World<TwNode>) -> Result<(), String> {
    let mut done = 0usize;
    let mut leases = lockservice::check::LeaseChecker::new();
    move |w: &World<TwNode>| {
        for (t, node, e) in &w.events[done..] {
            if let TwEvent::Lock(e) = e {
                leases.on_event(*t, *node, e)?;
            }
        }
        done = w.events.len();
        a_holder_always_has_a_successor(w)
    }
}

/// The precondition of the minority holder rule never arises: no process
/// holds the token with every other process bypassed (so the rule, which
/// drops such a token, is never reached while Claims need a majority of
/// adopters; docs/safety-rules.md, tokenwatchd).
pub fn a_holder_always_has_a_successor(w: &World<TwNode>) -> Result<(), String> {
    match w.live().find(|(_, core)| core.holds_without_a_successor()) {
        Some((id, core)) => {
            let bypassed: Vec<String> = core.bypassed().iter().map(|b| b.to_string()).collect();
            Err(format!(
                "{id} holds the token with no successor: every other process bypassed ({})",
                bypassed.join(", ")
            ))
        }
        None => Ok(()),
    }
}

/// Every fault at once (crashes and restarts, partitions, pauses up to
/// 400 ms, slow links beyond δ, a majority down, client disconnects) over
/// 10 % loss and 5 % duplication, the fence promise checked after every
/// step; then the faults stop and every process must be served again.
pub fn every_fault(seed: u64, m: Rules<TwRule>) -> Result<Sim<TwNode>, sim::SimError> {
    every_fault_cfg(seed, TwConfig { rules: m, ..cfg() })
}

/// `every_fault` with these settings.
pub fn every_fault_cfg(seed: u64, config: TwConfig) -> Result<Sim<TwNode>, sim::SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.1, 0.05);
    let mut sim = cluster_cfg(seed, 5, net, config);
    // Pauses and slow links beyond δ: with leases every invariant holds.
    sim.check(safety());
    let clients = (1..=5).map(|i| (NodeId(i), ClientId(u64::from(i)))).collect();
    let plan = FaultPlan {
        start: Instant::from_millis(2_000),
        end: Instant::from_millis(8_000),
        pause_len: (Duration::from_millis(10), Duration::from_millis(400)),
        slow_extra: Duration::from_millis(20),
        ..FaultPlan::everything(5).with_clients(clients)
    };
    sim.random_faults(&plan);
    everyone_served_after_the_faults(sim, "")
}

/// Pauses and partitions, the faults leases exist for, over 10 % loss and
/// 5 % duplication, with a few crashes and slow links beyond δ: pauses of
/// up to 2 s (longer than a bypass, `max_hold` + r·`ring_timeout` +
/// `bypass_after`, and than a lost-token Claim, W and its jitter), so
/// that paused holders, paused successors and cut-off minorities come
/// back to a ring that moved on without them. The lease invariants are
/// checked after every step; then every process must be served again.
pub fn pauses_and_partitions(seed: u64, m: Rules<TwRule>) -> Result<Sim<TwNode>, sim::SimError> {
    pauses_and_partitions_cfg(seed, TwConfig { rules: m, ..cfg() })
}

/// `pauses_and_partitions` with these settings.
pub fn pauses_and_partitions_cfg(seed: u64, config: TwConfig) -> Result<Sim<TwNode>, sim::SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.1, 0.05);
    let mut sim = cluster_cfg(seed, 5, net, config);
    sim.check(safety());
    let plan = FaultPlan {
        start: Instant::from_millis(2_000),
        end: Instant::from_millis(8_000),
        crashes: 2,
        max_down: 1,
        downtime: (Duration::from_millis(50), Duration::from_millis(1_000)),
        partitions: 3,
        partition_len: (Duration::from_millis(50), Duration::from_millis(1_500)),
        pauses: 6,
        pause_len: (Duration::from_millis(5), Duration::from_millis(2_000)),
        slow_periods: 2,
        slow_extra: Duration::from_millis(30),
        ..FaultPlan::default()
    };
    sim.random_faults(&plan);
    everyone_served_after_the_faults(sim, "after pauses and partitions, ")
}

/// Within the bounds, an unconfirmed hand-off is sent again no later than
/// `ring_timeout` after its last transmission (until `r` resends): checked
/// on the cores after every step.
pub fn retransmits_in_time(c: &TwConfig) -> impl FnMut(&World<TwNode>) -> Result<(), String> {
    let (ring_timeout, r) = (c.ring_timeout, c.max_retransmits);
    move |w: &World<TwNode>| {
        for (id, core) in w.live().filter(|(id, _)| !w.is_paused(*id)) {
            if let Some((last, resends)) = core.unconfirmed_handoff() {
                if resends < r && w.now > last + ring_timeout {
                    return Err(format!("{id}: hand-off last sent at {last}, not sent again by {}", w.now));
                }
            }
        }
        Ok(())
    }
}

/// The end of a 5-process fault run whose faults fall in 2–8 s: clients
/// come back every second (after disconnects and restarts), the run goes
/// on to 12 s and converges; then every process must be served within
/// 20 s. `what` prefixes the error.
fn everyone_served_after_the_faults(mut sim: Sim<TwNode>, what: &str) -> Result<Sim<TwNode>, sim::SimError> {
    let mut t = Instant::from_millis(2_000);
    while t < Instant::from_millis(40_000) {
        for i in 1..=5 {
            sim.at(t, acquire(NodeId(i), ClientId(u64::from(i))));
        }
        t = t + Duration::from_secs(1);
    }
    sim.run_until(Instant::from_millis(12_000))?;
    sim.converge(Duration::from_secs(3))?;
    let settled = sim.now();
    sim.run_for(Duration::from_secs(20))?;
    let served: BTreeSet<NodeId> =
        grants(sim.world()).into_iter().filter(|(t, _, _)| *t > settled).map(|(_, n, _)| n).collect();
    if served.len() < 5 {
        return Err(sim.error(format!("{what}after the faults only {served:?} were served again")));
    }
    Ok(sim)
}

/// Within the bounds at a datagram loss rate: crashes and restarts (one
/// with a wiped disk), partitions isolating a minority, 5 % duplication
/// and reordering (delays 0.2–5 ms). One holder at a time, fences unique
/// and rising, lost hand-offs resent within the ring timeout; once the
/// faults stop every process is served again.
pub fn within_bounds(seed: u64, loss: f64) -> Result<Sim<TwNode>, sim::SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), loss, 0.05);
    // Enough resends that a hand-off is rarely bypassed at this loss rate.
    let r = if loss >= 0.4 {
        8
    } else if loss >= 0.2 {
        5
    } else {
        3
    };
    let config = cfg_with_retransmits(r);
    let mut sim = cluster_cfg(seed, 5, net, config.clone());
    sim.check(safety());
    sim.check(retransmits_in_time(&config));
    let plan = FaultPlan {
        start: Instant::from_millis(2_000),
        end: Instant::from_millis(8_000),
        crashes: 4,
        max_down: 2,
        wipes: 1,
        partitions: 2,
        ..FaultPlan::default()
    };
    sim.random_faults(&plan);
    everyone_served_after_the_faults(sim, &format!("at {:.0} % loss, ", loss * 100.0))
}
