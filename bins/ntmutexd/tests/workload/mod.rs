//! The simulated workload shared by the simulation tests and the bench:
//! cluster construction, simulated clients, the safety checker, and the
//! message-count measurements. (Each includer uses a subset.)
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ftcore::rules::{Rule, Rules};
use ftcore::{ClientId, NodeId};
use lockservice::{LockEvent, LockReply, LockRequest, LocksConfig};
use ntmutexd::{Mech, NtConfig, NtEvent, NtNode, NtRule};
use sim::{Action, FaultPlan, NetConfig, Sim, SimError, World};
use timer::Instant;

pub const T_MSG: Duration = Duration::from_millis(5);

pub fn cfg(k: usize) -> NtConfig {
    NtConfig {
        k,
        t_msg: T_MSG,
        heartbeat: Duration::from_millis(20),
        suspect_after: Duration::from_millis(60),
        lease: Duration::from_millis(30),
        drift_ppm: 1_000,
        locks: LocksConfig { max_queue: 64, max_hold: None, try_window: Duration::ZERO },
        liveness_every: None,
        rules: Default::default(),
    }
}

/// The daemon's default settings (`NtmutexdConfig::default()`: t_msg
/// 20 ms, k = 3, heartbeat 50 ms, suspect_after 250 ms, lease 100 ms), the
/// settings performance.md's targets are stated at, with the rules in `m`
/// switched off.
pub fn defaults_with(m: Rules<NtRule>) -> NtConfig {
    let core = ntmutexd::NtmutexdConfig::default().core(&runtime::config::CommonConfig::default());
    NtConfig { rules: m, ..core }
}

pub fn net() -> NetConfig {
    // t_msg bounds the delay: the failure detector is accurate.
    NetConfig::reliable(Duration::from_micros(200), Duration::from_millis(3))
}

/// How the simulated clients behave.
#[derive(Clone, Copy)]
pub struct Load {
    pub hold: (u64, u64),
    pub think: (u64, u64),
}

pub const HEAVY: Load = Load { hold: (1, 8), think: (0, 5) };

/// `n` sites with `k` predecessors per COMMIT, no clients yet.
pub fn sites(seed: u64, n: u32, k: usize) -> Sim<NtNode> {
    sites_on(seed, n, k, net())
}

/// `sites` on another network.
pub fn sites_on(seed: u64, n: u32, k: usize, net: NetConfig) -> Sim<NtNode> {
    sites_with(seed, n, k, net, Rules::ALL_ON)
}

/// `sites_on` with the rules in `m` switched off (tests/safety.rs).
pub fn sites_with(seed: u64, n: u32, k: usize, net: NetConfig, m: Rules<NtRule>) -> Sim<NtNode> {
    Sim::new(seed, n, net, cfg_with(k, m))
}

/// `cfg(k)` with the rules in `m` switched off. Without leases
/// (`no_leases`) it is the setting of the stage before leases: W = 50 ms,
/// as before the lease bound (`lease·(1+ρ) + lease/3 ≤ suspect_after·(1−ρ)`)
/// shortened it, so that the seeds found then replay exactly.
pub fn cfg_with(k: usize, m: Rules<NtRule>) -> NtConfig {
    let lease = if m.off(NtRule::GrantsUnderLeases) { Duration::from_millis(50) } else { cfg(k).lease };
    NtConfig { rules: m, lease, ..cfg(k) }
}

pub fn cluster(seed: u64, n: u32, k: usize, load: Load) -> Sim<NtNode> {
    cluster_on(seed, n, k, load, net())
}

/// `cluster` on another network.
pub fn cluster_on(seed: u64, n: u32, k: usize, load: Load, net: NetConfig) -> Sim<NtNode> {
    cluster_with(seed, n, k, load, net, Rules::ALL_ON)
}

/// `cluster_on` with the rules in `m` switched off (tests/safety.rs).
pub fn cluster_with(seed: u64, n: u32, k: usize, load: Load, net: NetConfig, m: Rules<NtRule>) -> Sim<NtNode> {
    cluster_cfg(seed, n, load, net, cfg_with(k, m))
}

/// A loaded cluster of sites with settings `config`.
pub fn cluster_cfg(seed: u64, n: u32, load: Load, net: NetConfig, config: NtConfig) -> Sim<NtNode> {
    let mut sim = Sim::new(seed, n, net, config);
    sim.clients(Box::new(move |_, node, client, reply, rng| {
        let ms = |rng: &mut timer::SeededRng, (lo, hi): (u64, u64)| Duration::from_millis(rng.range_inclusive(lo, hi));
        match reply {
            LockReply::Granted { .. } => {
                vec![(ms(rng, load.hold), Action::Request(node, client, LockRequest::Release))]
            }
            LockReply::Released | LockReply::TimedOut | LockReply::LockLost { .. } => {
                vec![(ms(rng, load.think), acquire(node, client))]
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
        sim.at(Instant::from_millis(50 + u64::from(i)), acquire(NodeId(i), ClientId(u64::from(i))));
    }
    sim
}

/// Every site's client asks again every 400 ms from `from` until `until`
/// (restarted sites get their client back; one already waiting or holding
/// is refused, changing nothing).
pub fn keep_clients_coming(sim: &mut Sim<NtNode>, n: u32, from: Instant, until: Instant) {
    let mut t = from;
    while t < until {
        for i in 1..=n {
            sim.at(t, acquire(NodeId(i), ClientId(u64::from(i))));
        }
        t = t + Duration::from_millis(400);
    }
}

/// Liveness: after `since`, every live site's client was granted again.
pub fn everyone_served_since(w: &World<NtNode>, since: Instant) -> Result<(), String> {
    let served: BTreeSet<NodeId> = grants(w).into_iter().filter(|(t, _, _)| *t >= since).map(|(_, n, _)| n).collect();
    let starved: Vec<NodeId> = w.live().map(|(id, _)| id).filter(|id| !served.contains(id)).collect();
    if starved.is_empty() {
        return Ok(());
    }
    let states: Vec<String> = w
        .live()
        .map(|(id, c)| {
            let s = ftcore::Protocol::status(c);
            let d: Vec<String> = s.details.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{id}: {} {}", s.role, d.join(" "))
        })
        .collect();
    Err(format!("live sites never served after {since}: {starved:?}\n  {}", states.join("\n  ")))
}

/// How long after the last pause, partition or slow link ended (and its
/// delayed messages landed) the failure detector counts as accurate again:
/// a suspicion the fault caused has been raised (`suspect_after`), the
/// probe that tells a wrongly suspected token holder of the newer epoch has
/// been sent (every `4·suspect_after`, node.rs `probe_every`) and answered
/// (`2·t_msg`). Until then a stale token may still grant (the stage before
/// leases allows it).
pub fn accurate_after() -> Duration {
    let c = cfg(1);
    5 * c.suspect_after + 2 * c.t_msg
}

/// Every fault the simulator has, timed for ntmutexd's `t_msg` (5 ms) and
/// `suspect_after` (60 ms): pauses shorter and longer than `suspect_after`,
/// slow links adding up to 6·`t_msg`, the clients of every site.
pub fn everything(n: u32) -> FaultPlan {
    let clients = (1..=n).map(|i| (NodeId(i), ClientId(u64::from(i)))).collect();
    FaultPlan {
        start: Instant::from_millis(400),
        end: Instant::from_millis(4_000),
        pause_len: (Duration::from_millis(10), Duration::from_millis(400)),
        slow_extra: 6 * T_MSG,
        ..FaultPlan::everything(n).with_clients(clients)
    }
}

/// After converging: at most one token (a stale one has been retired).
pub fn one_token(w: &World<NtNode>) -> Result<(), String> {
    let tokens: Vec<(NodeId, Option<u64>)> =
        w.live().filter(|(_, c)| c.has_token()).map(|(id, c)| (id, c.token_epoch())).collect();
    if tokens.len() > 1 {
        return Err(format!("{} tokens after converging: {tokens:?}", tokens.len()));
    }
    Ok(())
}

/// The random run: `plan`'s faults under heavy load with the staged
/// invariants checked after every step, then `converge`; every live site
/// served again and one token left. `m`: rules switched off.
pub fn run_faulty_with(
    seed: u64,
    n: u32,
    k: usize,
    plan: FaultPlan,
    m: Rules<NtRule>,
) -> Result<Sim<NtNode>, SimError> {
    run_faulty_cfg(seed, n, plan, cfg_with(k, m))
}

/// `run_faulty_with` with settings `config`.
pub fn run_faulty_cfg(seed: u64, n: u32, plan: FaultPlan, config: NtConfig) -> Result<Sim<NtNode>, SimError> {
    let leases = config.rules.on(NtRule::GrantsUnderLeases);
    let mut sim = cluster_cfg(seed, n, HEAVY, net(), config);
    sim.check(staged_safety(Some(accurate_after())));
    if leases {
        // The stage after leases; without them only the staged invariants
        // are promised.
        sim.check(lease_safety());
    }
    sim.random_faults(&plan);
    let end = plan.end + Duration::from_secs(3);
    keep_clients_coming(&mut sim, n, Instant::from_millis(500), end + Duration::from_secs(3));
    sim.run_until(end)?;
    let settled = sim.now() + Duration::from_millis(500);
    sim.converge(Duration::from_secs(3))?;
    everyone_served_since(sim.world(), settled).map_err(|m| sim.error(m))?;
    one_token(sim.world()).map_err(|m| sim.error(m))?;
    Ok(sim)
}

/// `run_faulty_with`, every rule on.
pub fn run_faulty(seed: u64, n: u32, k: usize, plan: FaultPlan) -> Result<Sim<NtNode>, SimError> {
    run_faulty_with(seed, n, k, plan, Rules::ALL_ON)
}

/// Steps (0.1 ms at a time, at most `steps`) until some live site holds
/// the token.
pub fn find_holder(sim: &mut Sim<NtNode>, steps: u32) -> Result<NodeId, SimError> {
    for _ in 0..steps {
        if let Some((id, _)) = sim.world().live().find(|(_, c)| c.has_token()) {
            return Ok(id);
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    Err(sim.error("no token holder"))
}

/// The epochs of the tokens created, in order.
pub fn regenerated_epochs(w: &World<NtNode>) -> Vec<u64> {
    w.events
        .iter()
        .filter_map(|(_, _, e)| match e {
            NtEvent::Regenerated { epoch } => Some(*epoch),
            _ => None,
        })
        .collect()
}

pub fn acquire(node: NodeId, client: ClientId) -> Action<NtNode> {
    Action::Request(node, client, LockRequest::Acquire { timeout_ms: 60_000 })
}

/// Restarted sites get their client back (a new connection) regularly;
/// a client already waiting or holding is refused, changing nothing.
/// Safety, after every step.
pub fn safety(max_fence: std::rc::Rc<std::cell::Cell<u128>>) -> impl FnMut(&World<NtNode>) -> Result<(), String> {
    move |w| {
        let holders: Vec<NodeId> = w.live().filter(|(_, c)| c.holder().is_some()).map(|(id, _)| id).collect();
        if holders.len() > 1 {
            return Err(format!("mutual exclusion violated: {holders:?} hold the lock"));
        }
        let tokens: Vec<(NodeId, Option<u64>)> =
            w.live().filter(|(_, c)| c.has_token()).map(|(id, c)| (id, c.token_epoch())).collect();
        if tokens.len() > 1 {
            return Err(format!("more than one token: {tokens:?}"));
        }
        for (_, node, e) in w.step_events() {
            if let NtEvent::Lock(LockEvent::Granted { fence, .. }) = e {
                if *fence <= max_fence.get() {
                    return Err(format!("{node} granted fence {fence:#x} after {:#x}", max_fence.get()));
                }
                max_fence.set(*fence);
            }
        }
        Ok(())
    }
}

/// The lock and fence invariants of the stage before leases
/// (reliability.md, "Invariants by stage"), after every step.
///
/// Always (pauses, partitions and slow links included): no fence is granted
/// twice, no two tokens share an epoch, and a new token's first fence
/// exceeds every fence granted before it was created.
///
/// While the failure detector is accurate — `accurate_after` is `Some(g)`
/// and for `g` no pause, partition, cut, hold or slow link has been in
/// effect (`World::timely_for`) — also mutual exclusion, one token, and
/// global fence order (each grant above every earlier one). `None`: the
/// run's delays themselves exceed `t_msg`, so it never is.
pub fn staged_safety(accurate_after: Option<Duration>) -> impl FnMut(&World<NtNode>) -> Result<(), String> {
    let mut granted: BTreeSet<u128> = BTreeSet::new();
    let mut max_fence = 0u128;
    // Epoch of each token created → the largest fence granted before it.
    let mut created: BTreeMap<u64, (Instant, NodeId, u128)> = BTreeMap::new();
    let mut first_granted: BTreeSet<u64> = BTreeSet::new();
    move |w| {
        let accurate = accurate_after.is_some_and(|g| w.timely_for(g));
        for (t, node, e) in w.step_events() {
            let new_epoch = match e {
                NtEvent::Regenerated { epoch } => Some(*epoch),
                NtEvent::Joined { bootstrap: true } => w.core(*node).and_then(|c| c.token_epoch()),
                _ => None,
            };
            if let Some(epoch) = new_epoch {
                if let Some((t0, n0, _)) = created.insert(epoch, (*t, *node, max_fence)) {
                    return Err(format!("{node} created a token of epoch {epoch:#x}, as {n0} did at {t0}"));
                }
            }
            if let NtEvent::Lock(LockEvent::Granted { fence, .. }) = e {
                let fence = *fence;
                if !granted.insert(fence) {
                    return Err(format!("{node} granted fence {fence:#x} a second time"));
                }
                let (epoch, _) = lockservice::fence_parts(fence);
                if first_granted.insert(epoch) {
                    if let Some((t0, n0, before)) = created.get(&epoch) {
                        if fence <= *before {
                            return Err(format!(
                                "{node} granted fence {fence:#x}, the first of the token {n0} created at {t0}, \
                                 not above {before:#x} granted before it was created"
                            ));
                        }
                    }
                }
                if accurate && fence <= max_fence {
                    return Err(format!("{node} granted fence {fence:#x} after {max_fence:#x} (detector accurate)"));
                }
                max_fence = max_fence.max(fence);
            }
        }
        if accurate {
            let holders: Vec<NodeId> = w.live().filter(|(_, c)| c.holder().is_some()).map(|(id, _)| id).collect();
            if holders.len() > 1 {
                return Err(format!("mutual exclusion violated (detector accurate): {holders:?} hold the lock"));
            }
            let tokens: Vec<(NodeId, Option<u64>)> =
                w.live().filter(|(_, c)| c.has_token()).map(|(id, c)| (id, c.token_epoch())).collect();
            if tokens.len() > 1 {
                return Err(format!("more than one token (detector accurate): {tokens:?}"));
            }
        }
        Ok(())
    }
}

/// The lock invariants of the stage after leases (reliability.md,
/// "Invariants by stage"), always — pauses, partitions and slow links
/// included — judged from the clients' side: each grant holds from its
/// grant until the earlier of its release (the client let go, or lost it:
/// `Released`) and its latest `lease_until` (the client stops by then on
/// its own clock, whatever its daemon does — a crashed or paused daemon
/// included). No grant while another holds; fences strictly increase in
/// grant order.
pub fn lease_safety() -> impl FnMut(&World<NtNode>) -> Result<(), String> {
    let mut leases = lockservice::check::LeaseChecker::new();
    move |w| {
        for (t, node, e) in w.step_events() {
            if let NtEvent::Lock(e) = e {
                leases.on_event(*t, *node, e)?;
            }
        }
        Ok(())
    }
}

pub fn grants(w: &World<NtNode>) -> Vec<(Instant, NodeId, u128)> {
    w.events
        .iter()
        .filter_map(|(t, n, e)| match e {
            NtEvent::Lock(LockEvent::Granted { fence, .. }) => Some((*t, *n, *fence)),
            _ => None,
        })
        .collect()
}

/// A quiet queue 1 → 2 → … → n (site 1 holds for a long time, the others
/// queue behind it one after another) for counting recovery messages.
pub fn quiet_queue(seed: u64, n: u32, k: usize) -> Sim<NtNode> {
    queue_holding(seed, n, k, Duration::from_secs(5))
}

/// Sites 1..=n queue up in id order (30 ms apart), each holding for `hold`
/// once granted.
pub fn queue_holding(seed: u64, n: u32, k: usize, hold: Duration) -> Sim<NtNode> {
    let mut sim = sites(seed, n, k);
    sim.clients(Box::new(move |_, node, client, reply, _| match reply {
        LockReply::Granted { .. } => vec![(hold, Action::Request(node, client, LockRequest::Release))],
        _ => vec![],
    }));
    for i in 1..=n {
        sim.at(Instant::from_millis(250 + 30 * u64::from(i)), acquire(NodeId(i), ClientId(u64::from(i))));
    }
    sim
}

pub type Counts = BTreeMap<&'static str, u64>;

/// Messages sent from the step in which a site detected a failure to the
/// step in which its token path was restored, by kind, with the mechanism
/// that restored it (routine liveness checks of other sites included: the
/// queue is otherwise quiet).
pub fn recovery_messages(sim: &mut Sim<NtNode>, until: Instant) -> Option<(Mech, Counts)> {
    use std::cell::RefCell;
    use std::rc::Rc;
    let result: Rc<RefCell<Option<(Mech, Counts)>>> = Rc::default();
    let r = result.clone();
    let mut prev: Counts = sim.world().sent_by_kind.clone();
    let mut start: Option<(NodeId, Counts)> = None;
    sim.check(move |w| {
        for (_, node, e) in w.step_events() {
            match e {
                NtEvent::RecoveryStarted { .. } if start.is_none() => start = Some((*node, prev.clone())),
                NtEvent::Recovered { mech, .. } if r.borrow().is_none() => {
                    if let Some((n, before)) = &start {
                        if n == node {
                            let diff = w
                                .sent_by_kind
                                .iter()
                                .map(|(k, v)| (*k, v - before.get(k).copied().unwrap_or(0)))
                                .filter(|(_, v)| *v > 0)
                                .collect();
                            *r.borrow_mut() = Some((*mech, diff));
                        }
                    }
                }
                _ => {}
            }
        }
        prev = w.sent_by_kind.clone();
        Ok(())
    });
    while sim.now() < until && result.borrow().is_none() {
        sim.run_for(Duration::from_millis(1)).ok()?;
    }
    let out = result.borrow().clone();
    out
}

/// Mean messages per critical section, failure-free, light uniform load
/// (think time proportional to N), over a minute of virtual time.
/// Message kinds of the lease protocol: reported apart from the lock's own
/// (performance.md: lease traffic does not grow with the lock rate).
pub const LEASE_KINDS: [&str; 3] = ["lease_renew", "lease_ack", "lease_refused"];

fn lease_messages(w: &World<NtNode>) -> u64 {
    LEASE_KINDS.iter().map(|k| w.sent_by_kind.get(k).copied().unwrap_or(0)).sum()
}

/// Under light uniform load, failure-free: (critical sections, protocol
/// messages, protocol messages per critical section, lease messages per
/// simulated second). Lease traffic is counted apart.
pub fn messages_per_cs(n: u32) -> (usize, u64, f64, f64) {
    let light = Load { hold: (1, 2), think: (u64::from(n) * 20, u64::from(n) * 60) };
    let mut sim = cluster(u64::from(n), n, 3, light).without_trace();
    sim.check(safety(Default::default()));
    sim.run_until(Instant::from_millis(1_000)).expect("failure-free run");
    let before = sim.world().messages_sent();
    let lease_before = lease_messages(sim.world());
    let grants_before = grants(sim.world()).len();
    sim.run_until(Instant::from_millis(61_000)).expect("failure-free run");
    let w = sim.world();
    assert!(w.events.iter().all(|(_, _, e)| !matches!(e, NtEvent::RecoveryStarted { .. })));
    let lease = lease_messages(w) - lease_before;
    let msgs = w.messages_sent() - before - lease;
    let cs = grants(w).len() - grants_before;
    (cs, msgs, msgs as f64 / cs as f64, lease as f64 / 60.0)
}

/// Every rule switch on its own, by name.
pub fn all_single() -> Vec<(&'static str, Rules<NtRule>)> {
    macro_rules! one {
        ($($f:ident),*) => { vec![$((stringify!($f), Rules::all_but(&[NtRule::by_switch(stringify!($f)).expect("a switch")]))),*] };
    }
    one!(
        no_lock_lost,
        no_provisional_commit,
        no_commit_cascade,
        pass_to_suspected_next,
        forward_to_suspected_last,
        restart_knows_last,
        no_probes,
        no_epoch_slot,
        no_election,
        no_hop_limit,
        keep_seq_on_m3,
        no_incarnation_check,
        minority_bootstrap,
        root_starts_with_token,
        regen_with_majority_only,
        take_stale_token,
        no_holder_nack,
        regen_despite_answers,
        regen_despite_position,
        accept_second_token,
        ack_before_store,
        no_epoch_store,
        token_at_recovered_max,
        accept_ties,
        no_promise_window,
        no_restart_window,
        unrecovered_takes_token,
        no_behind_answer,
        no_stall_check,
        no_leases,
        no_lease_window,
        ack_every_waiter,
        ack_stale_renewals,
        unrecovered_acks,
        alive_at_any_position,
        alive_linked_elsewhere,
        link_drops_successor,
        late_regen_acks
    )
}
