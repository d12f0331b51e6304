//! Elections for applications (docs/elections.md, as amended after its
//! first review) in the simulator, judged from the clients' own records:
//! what each client was told, and when (the simulator's one clock; a reply
//! is delivered to its client the instant its daemon sends it).
//!
//! The workload, on five processes: one or two elections; on every
//! process one or two campaigners (`Campaign`, value `n{node}c{k}`) that
//! lead 1–20 ms, resign and campaign again; on two or three processes a
//! watcher of every election (`Observe { watch: true }`); one or two
//! one-shot observers (`Observe { watch: false }`) asking again 1–10 ms
//! after each answer. Restarted processes get their clients back (asked
//! again every 300 ms: a client still waiting, holding or observing is
//! refused, which changes nothing).
//!
//! The checks, after every step ([`Judge`]):
//!
//! - (a) lock safety per election lock `elect:NAME`: no two clients'
//!   leases overlap and fences rise (the kit's lease checker, pause-aware
//!   as in the named-lock family);
//! - (b) every observed leader is real: a client of its node that
//!   campaigned for that election with that very value was granted its
//!   fence at or before the observation; and no grant of the election
//!   with a higher fence had been delivered before the observation can
//!   have been sent (see [`D`] for that instant);
//! - (c) every "no leader" has, between the earliest instant its
//!   observation can have been sent and its delivery, an instant at which
//!   no campaigner of the election held (a hold: from its `Granted` to its
//!   `Released`, its `LockLost` or its lease's end, whichever is first);
//! - (d) each watcher (per process life: a crash ends its connection) is
//!   told fences that rise, and never the same state twice in a row;
//! - (e) after the faults (`Sim::converge`) the campaigners stop (in one
//!   election the first one granted then leads to the end, in the other
//!   they all resign): each watcher's last observation, and each one-shot
//!   answer asked once that state had settled, is that final state.
//!
//! Also: without faults, each watcher is told exactly every leader, in
//! order (`observers_see_every_leader_in_order`); a process whose watcher
//! has no coordinator when its observe timer fires keeps running
//! (`a_watcher_cut_off_from_every_coordinator_leaves_its_process_running`);
//! every run has a wall-clock watchdog ([`within`]), so a core that never
//! finishes an input fails its test instead of hanging the binary; and
//! each check is shown to fail (`judge_fails`, and
//! `a_counter_per_name_fails_the_family` for the lease checker).
//!
//! `elections_under_every_fault` runs 60 seeds (about 30 s in a debug
//! build on two cores); the long sweep, as the named-lock family's:
//! `SIM_SEEDS=5000 cargo test --release -p electd --test elections sweep
//! -- --exact --ignored` (shard it with `SIM_SEED_FROM`). A single seed
//! (`SIM_SEED=s`, the command a failure prints) keeps the trace.

mod kit;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use electd::{Algorithm, ElConfig, ElNode, ElRule};
use ftcore::rules::Rules;
use ftcore::{ClientId, NodeId};
use lockservice::{LeaderInfo, LockName, LockReply, LockRequest};
use sim::{for_seeds, Action, NetConfig, Sim, SimError, World};
use timer::{Instant, SeededRng};

/// Processes.
const N: u32 = 5;

/// The network of every electd family (`kit::cluster_of`): reliable
/// (TCP-like, FIFO per link), one-way delays of 0.2–2 ms.
const DELAY_MIN: Duration = Duration::from_micros(200);
const DELAY_MAX: Duration = Duration::from_millis(2);

/// The bound on how long before its delivery an observation was sent,
/// while the simulator has kept the network and the processes timely for
/// at least `D` (`World::timely_for`: no pause, partition, cut, hold or
/// slow link, and every message a slow link delayed has landed): one
/// largest one-way delay. The simulator handles an input in no time, a
/// process's messages to itself (the coordinator's own observers) go
/// through its loopback at the same instant, and a reliable link queues a
/// message behind the previous one only up to that one's due time, which
/// is itself at most `DELAY_MAX` after its sending, so a message sent at
/// `s` is delivered by `s + DELAY_MAX`.
///
/// Otherwise (a pause queues what arrives for the paused process for up
/// to 600 ms, a slow link adds up to 60 ms) no bound is assumed: the
/// lower bound on the sending instant is then only what the client knows
/// without one: a one-shot answer was sent after the client asked; a
/// watcher's first answer after it subscribed; a push after the watcher's
/// previous observation was sent (one coordinator's pushes travel one
/// FIFO link; a later coordinator answers only past its failover gap,
/// after the earlier one's quorum lease, and so its last answer, ended).
/// A partition does not delay: a reliable link loses what crosses it.
const D: Duration = DELAY_MAX;

/// When the faults stop and the liveness phase begins, when the
/// campaigners stop, and the end.
const FAULTS_UNTIL_MS: u64 = 5_000;
const STOP_AFTER_CONVERGE: Duration = Duration::from_millis(2_000);
const SETTLE_AFTER_STOP: Duration = Duration::from_millis(1_500);

/// A one-shot answer judged against the final state must have been asked
/// this long after the state settled (the coordinator hears of a release
/// one delay after the client, and a watcher's refresh runs every second;
/// both far shorter).
const ONE_SHOT_SLACK: Duration = Duration::from_millis(100);

/// What one client does.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Role {
    /// Campaigns for election `election` with `value`.
    Campaigner { election: usize, value: String },
    /// Watches election `election`.
    Watcher { election: usize },
    /// Asks who leads `election` again after each answer.
    Once { election: usize },
}

impl Role {
    fn election(&self) -> usize {
        match self {
            Role::Campaigner { election, .. } | Role::Watcher { election } | Role::Once { election } => *election,
        }
    }
}

/// The clients of a run.
#[derive(Clone, Debug)]
struct Load {
    /// The elections (user names).
    elections: Vec<LockName>,
    /// Per election: after the stop, the first campaigner granted leads
    /// to the end (true), or every campaigner resigns and stops (false).
    keep: Vec<bool>,
    /// Every client (ids are unique over the cluster).
    clients: BTreeMap<(NodeId, ClientId), Role>,
}

impl Load {
    /// The clients of `seed` (drawn from their own generator, so the
    /// workload does not change the simulation's draws).
    fn draw(seed: u64) -> Load {
        let mut rng = SeededRng::new(seed ^ 0xE1EC_7105);
        let count = 1 + rng.range_inclusive(0, 1) as usize;
        let elections: Vec<LockName> =
            ["app", "jobs/nightly"][..count].iter().map(|n| LockName::parse(n).expect("a valid name")).collect();
        let keep = if count == 2 { vec![true, false] } else { vec![seed.is_multiple_of(2)] };
        let mut clients = BTreeMap::new();
        for i in 1..=N {
            let node = NodeId(i);
            // The first campaigner of process i campaigns for election
            // i mod count: every election has campaigners on two
            // processes at least; a second one, on a coin, for any.
            let campaigners = 1 + rng.range_inclusive(0, 1);
            for k in 0..campaigners {
                let election =
                    if k == 0 { i as usize % count } else { rng.range_inclusive(0, count as u64 - 1) as usize };
                let value = format!("n{i}c{k}");
                clients.insert((node, ClientId(100 * u64::from(i) + k)), Role::Campaigner { election, value });
            }
        }
        // Watchers of every election on two or three processes.
        let mut ids: Vec<u32> = (1..=N).collect();
        for _ in 0..2 + rng.range_inclusive(0, 1) {
            let i = ids.swap_remove(rng.range_inclusive(0, ids.len() as u64 - 1) as usize);
            for e in 0..count {
                clients
                    .insert((NodeId(i), ClientId(100 * u64::from(i) + 10 + e as u64)), Role::Watcher { election: e });
            }
        }
        // One or two one-shot observers.
        for _ in 0..1 + rng.range_inclusive(0, 1) {
            let i = rng.range_inclusive(1, u64::from(N)) as u32;
            let e = rng.range_inclusive(0, count as u64 - 1) as usize;
            clients.insert((NodeId(i), ClientId(100 * u64::from(i) + 20 + e as u64)), Role::Once { election: e });
        }
        Load { elections, keep, clients }
    }

    /// What `client` of `node` asks for (again).
    fn request(&self, node: NodeId, client: ClientId) -> Option<LockRequest> {
        let role = self.clients.get(&(node, client))?;
        let name = self.elections[role.election()].clone();
        Some(match role {
            Role::Campaigner { value, .. } => LockRequest::Campaign { name, value: value.clone(), timeout_ms: 60_000 },
            Role::Watcher { .. } => LockRequest::Observe { name, watch: true },
            Role::Once { .. } => LockRequest::Observe { name, watch: false },
        })
    }

    /// Each client's election lock (`elect:NAME`; the unnamed lock for
    /// an id that is no client: never granted).
    fn lock_of(&self) -> impl Fn(ClientId) -> LockName + 'static {
        let by_client: BTreeMap<ClientId, LockName> =
            self.clients.iter().map(|((_, c), r)| (*c, LockName::election(&self.elections[r.election()]))).collect();
        move |c| by_client.get(&c).cloned().unwrap_or_default()
    }
}

/// What the clients and the checker share: every `Observe` a client sent
/// (when), and whether the campaigners have stopped.
#[derive(Debug, Default)]
struct Shared {
    asks: RefCell<Asks>,
    stopped: Cell<bool>,
}

/// The instants at which each observer sent an `Observe` (how many at
/// each).
type Asks = BTreeMap<(NodeId, ClientId), BTreeMap<Instant, u32>>;

/// An observer's asks used up so far: every one before `.0`, and `.1` of
/// those at `.0`.
type Cursor = (Instant, u32);

/// The observer's first ask after `cursor`.
fn next_ask(asks: &Asks, key: (NodeId, ClientId), cursor: Cursor) -> Option<Cursor> {
    let sent = asks.get(&key)?;
    sent.range(cursor.0..).find_map(|(at, n)| match *at == cursor.0 {
        true => (*n > cursor.1).then_some((*at, cursor.1 + 1)),
        false => Some((*at, 1)),
    })
}

impl Shared {
    /// Schedules `client`'s request at `at` (noting it if it is an
    /// `Observe`).
    fn request(&self, load: &Load, at: Instant, node: NodeId, client: ClientId) -> Option<(Instant, Action<ElNode>)> {
        let req = load.request(node, client)?;
        if matches!(req, LockRequest::Observe { .. }) {
            *self.asks.borrow_mut().entry((node, client)).or_default().entry(at).or_default() += 1;
        }
        Some((at, Action::Request(node, client, req)))
    }
}

/// `N` processes running `load`'s clients; faults, if any, are the
/// caller's. Requests are scheduled: the first ones at 20 + i ms, then
/// again every 300 ms (campaigns until `campaign_until`, observes until
/// `observe_until`) for restarted processes.
fn cluster(
    seed: u64,
    alg: Algorithm,
    m: Rules<ElRule>,
    load: &Rc<Load>,
    shared: &Rc<Shared>,
    campaign_until: Instant,
    observe_until: Instant,
) -> Sim<ElNode> {
    let net = NetConfig::reliable(DELAY_MIN, DELAY_MAX);
    let mut sim = Sim::new(seed, N, net, ElConfig { rules: m, ..kit::config(alg, N) });
    let (l, s) = (load.clone(), shared.clone());
    sim.clients(Box::new(move |now, node, client, reply, rng| {
        let Some(role) = l.clients.get(&(node, client)) else { return vec![] };
        let ms = |rng: &mut SeededRng, lo, hi| Duration::from_millis(rng.range_inclusive(lo, hi));
        let stopped = s.stopped.get();
        let after = match (role, reply) {
            (Role::Campaigner { election, .. }, LockReply::Granted { .. }) => {
                if stopped && l.keep[*election] {
                    // Leads to the end.
                    return vec![];
                }
                return vec![(ms(rng, 1, 20), Action::Request(node, client, LockRequest::Release))];
            }
            (
                Role::Campaigner { election, .. },
                LockReply::Released | LockReply::TimedOut | LockReply::LockLost { .. },
            ) => {
                if stopped && !l.keep[*election] {
                    return vec![];
                }
                ms(rng, 0, 10)
            }
            (Role::Once { .. }, LockReply::Leader { .. }) => ms(rng, 1, 10),
            (Role::Once { .. }, LockReply::Refused { reason }) if reason.starts_with("no coordinator answered") => {
                ms(rng, 1, 10)
            }
            _ => return vec![],
        };
        s.request(&l, now + after, node, client).map(|(at, a)| (at.saturating_since(now), a)).into_iter().collect()
    }));
    let mut scheduled = Vec::new();
    for (node, client) in load.clients.keys() {
        scheduled.extend(shared.request(load, Instant::from_millis(20 + u64::from(node.0)), *node, *client));
        let campaigner = matches!(load.clients[&(*node, *client)], Role::Campaigner { .. });
        let until = if campaigner { campaign_until } else { observe_until };
        for t in (600..until.as_micros() / 1_000).step_by(300) {
            scheduled.extend(shared.request(load, Instant::from_millis(t), *node, *client));
        }
    }
    for (at, action) in scheduled {
        sim.at(at, action);
    }
    sim
}

/// `t - d`, or zero.
fn before(t: Instant, d: Duration) -> Instant {
    Instant::from_micros(t.as_micros().saturating_sub(d.as_micros() as u64))
}

/// One campaigner's hold: from its `Granted` until its `Released`, its
/// `LockLost` or its lease's end, whichever is first.
#[derive(Clone, Debug)]
struct Hold {
    node: NodeId,
    client: ClientId,
    fence: u128,
    from: Instant,
    lease_until: Instant,
    ended: Option<Instant>,
}

impl Hold {
    /// The hold's end as known so far (its lease's end while it runs).
    fn until(&self) -> Instant {
        self.ended.map_or(self.lease_until, |e| e.min(self.lease_until))
    }
}

/// One observation as a client was told it.
#[derive(Clone, Debug)]
struct Told {
    at: Instant,
    /// The earliest instant it can have been sent.
    sent_from: Instant,
    /// For a one-shot answer, when the client asked.
    asked: Option<Instant>,
    leader: Option<LeaderInfo>,
}

/// One watcher's connection: a process life.
#[derive(Clone, Debug)]
struct Session {
    life: u32,
    told: Vec<Told>,
    /// The highest fence told.
    high: Option<u128>,
}

/// The checks (b)–(e), from the clients' replies.
#[derive(Debug)]
struct Judge {
    load: Rc<Load>,
    /// Per election: fence → (delivered at, node, client).
    grants: Vec<BTreeMap<u128, (Instant, NodeId, ClientId)>>,
    /// Per election: every hold, in grant order.
    holds: Vec<Vec<Hold>>,
    /// Each campaigner's current hold: (election, index in `holds`).
    holding: BTreeMap<(NodeId, ClientId), (usize, usize)>,
    /// Each process's life and since when.
    lives: BTreeMap<NodeId, (u32, Instant)>,
    /// Each watcher's sessions, the last one current.
    sessions: BTreeMap<(NodeId, ClientId), Vec<Session>>,
    /// Each one-shot observer's answers.
    answers: BTreeMap<(NodeId, ClientId), Vec<Told>>,
    /// Each one-shot observer's asks used up by its answers (or its
    /// refusals for want of a coordinator). A process handles a client's
    /// requests in the order sent (a paused one queues them), refuses one
    /// sent while another waits, and answers those it took in order; so
    /// the k-th answer answers an ask sent no earlier than the k-th ask
    /// since the process's life began: its lower bound.
    cursors: BTreeMap<(NodeId, ClientId), Cursor>,
}

impl Judge {
    fn new(load: Rc<Load>) -> Self {
        let e = load.elections.len();
        Judge {
            load,
            grants: vec![BTreeMap::new(); e],
            holds: vec![Vec::new(); e],
            holding: BTreeMap::new(),
            lives: (1..=N).map(|i| (NodeId(i), (1, Instant::ZERO))).collect(),
            sessions: BTreeMap::new(),
            answers: BTreeMap::new(),
            cursors: BTreeMap::new(),
        }
    }

    /// Process `node` is in life `life` at `now` (a new one: restarted).
    fn life(&mut self, node: NodeId, life: u32, now: Instant) {
        let e = self.lives.entry(node).or_insert((life, now));
        if e.0 != life {
            *e = (life, now);
        }
    }

    /// One reply, delivered at `t` to `client` of `node`; `timely`: the
    /// simulator has been timely for at least [`D`] (see there).
    fn reply(
        &mut self,
        t: Instant,
        node: NodeId,
        client: ClientId,
        reply: &LockReply,
        timely: bool,
        asks: &Asks,
    ) -> Result<(), String> {
        let key = (node, client);
        let Some(role) = self.load.clients.get(&key).cloned() else { return Ok(()) };
        match (&role, reply) {
            (Role::Campaigner { election, .. }, LockReply::Granted { fence, lease_until_us }) => {
                if let Some((e, i)) = self.holding.remove(&key) {
                    let h = &mut self.holds[e][i];
                    h.ended = Some(h.ended.unwrap_or(t).min(t));
                }
                let hold = Hold {
                    node,
                    client,
                    fence: *fence,
                    from: t,
                    lease_until: Instant::from_micros(*lease_until_us),
                    ended: None,
                };
                self.holding.insert(key, (*election, self.holds[*election].len()));
                self.holds[*election].push(hold);
                self.grants[*election].insert(*fence, (t, node, client));
            }
            (Role::Campaigner { .. }, LockReply::Renewed { lease_until_us }) => {
                if let Some(&(e, i)) = self.holding.get(&key) {
                    let h = &mut self.holds[e][i];
                    if h.lease_until > t {
                        h.lease_until = h.lease_until.max(Instant::from_micros(*lease_until_us));
                    }
                }
            }
            (Role::Campaigner { .. }, LockReply::Released | LockReply::LockLost { .. }) => {
                if let Some((e, i)) = self.holding.remove(&key) {
                    let h = &mut self.holds[e][i];
                    h.ended = Some(t);
                }
            }
            (Role::Once { .. }, LockReply::Refused { reason }) if reason.starts_with("no coordinator answered") => {
                if let Some(next) = self.one_shot_ask(key, t, asks) {
                    self.cursors.insert(key, next);
                }
            }
            (Role::Watcher { election } | Role::Once { election }, LockReply::Leader { name, leader }) => {
                let expected = &self.load.elections[*election];
                if name != expected {
                    return Err(format!("{node}'s {client} observes {expected} and was told about {name}"));
                }
                self.observed(t, node, client, &role, leader, timely, asks)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// An observation `leader` of `role`'s election told to `client` of
    /// `node` at `t`.
    #[allow(clippy::too_many_arguments)]
    fn observed(
        &mut self,
        t: Instant,
        node: NodeId,
        client: ClientId,
        role: &Role,
        leader: &Option<LeaderInfo>,
        timely: bool,
        asks: &Asks,
    ) -> Result<(), String> {
        let key = (node, client);
        let e = role.election();
        let (life, life_from) = self.lives[&node];
        let floor = if timely { before(t, D) } else { Instant::ZERO };
        let asked_in = |from: Instant| asks.get(&key).and_then(|s| s.range(from..=t).next().map(|(at, _)| *at));
        let who = format!("{node}'s {client} ({role:?})");
        let (sent_from, asked) = match role {
            Role::Once { .. } => {
                let Some(next) = self.one_shot_ask(key, t, asks) else {
                    return Err(format!("{who} told {leader:?} at {t}: more answers than asks in this life"));
                };
                self.cursors.insert(key, next);
                (next.0.max(floor), Some(next.0))
            }
            _ => {
                let sessions = self.sessions.entry(key).or_default();
                if sessions.last().is_none_or(|s| s.life != life) {
                    sessions.push(Session { life, told: Vec::new(), high: None });
                }
                let session = sessions.last().expect("just pushed");
                let from = match session.told.last() {
                    // A push: sent after the previous observation was.
                    Some(prev) => prev.sent_from,
                    // The first answer: sent after the client subscribed
                    // in this life.
                    None => match asked_in(life_from) {
                        Some(ask) => ask,
                        None => {
                            return Err(format!(
                                "{who} told {leader:?} at {t}, not having subscribed since {life_from}"
                            ))
                        }
                    },
                };
                (from.max(floor), None)
            }
        };
        let told = Told { at: t, sent_from, asked, leader: leader.clone() };
        let name = &self.load.elections[e];
        match leader {
            Some(l) => self.real(&who, name, e, &told, l)?,
            None => self.leaderless(&who, name, e, &told)?,
        }
        match role {
            Role::Once { .. } => self.answers.entry(key).or_default().push(told),
            _ => {
                let session = self.sessions.get_mut(&key).and_then(|s| s.last_mut()).expect("a session");
                if let Some(prev) = session.told.last() {
                    // (d) Never the same state twice in a row, never an
                    // older leader after a newer one.
                    if prev.leader == told.leader {
                        return Err(format!(
                            "{who} told {leader:?} about {name} at {t}, as already at {} (life {life})",
                            prev.at
                        ));
                    }
                }
                if let (Some(l), Some(high)) = (leader, session.high) {
                    if l.fence <= high {
                        return Err(format!(
                            "{who} told leader {l:?} of {name} at {t} after a leader with fence {high:#x} (life {life}): \
                             told {:?}",
                            session.told.iter().map(|o| (o.at, o.leader.as_ref().map(|l| l.fence))).collect::<Vec<_>>()
                        ));
                    }
                }
                session.high = session.high.max(leader.as_ref().map(|l| l.fence));
                session.told.push(told);
            }
        }
        Ok(())
    }

    /// The ask a one-shot observer's answer at `t` answers, at the
    /// earliest (see `cursors`).
    fn one_shot_ask(&self, key: (NodeId, ClientId), t: Instant, asks: &Asks) -> Option<Cursor> {
        let (_, life_from) = self.lives[&key.0];
        let cursor = self.cursors.get(&key).copied().unwrap_or((Instant::ZERO, 0));
        let cursor = if cursor.0 < life_from { (life_from, 0) } else { cursor };
        next_ask(asks, key, cursor).filter(|(at, _)| *at <= t)
    }

    /// (b) `l`, told to `who` (`told`), was granted its fence before, to a
    /// client of its node that campaigned with its value, and no higher
    /// fence of the election was granted before the answer was sent.
    fn real(&self, who: &str, name: &LockName, e: usize, told: &Told, l: &LeaderInfo) -> Result<(), String> {
        let t = told.at;
        let Some(&(granted, gnode, gclient)) = self.grants[e].get(&l.fence) else {
            return Err(format!(
                "{who} told at {t} that {l:?} leads {name}: no campaigner of {name} was granted that fence"
            ));
        };
        if granted > t || u64::from(gnode.0) != l.node {
            return Err(format!(
                "{who} told at {t} that {l:?} leads {name}: fence {:#x} was granted to {gnode}'s {gclient} at {granted}",
                l.fence
            ));
        }
        match self.load.clients.get(&(gnode, gclient)) {
            Some(Role::Campaigner { value, .. }) if *value == l.value => {}
            other => {
                return Err(format!(
                    "{who} told at {t} that {l:?} leads {name}: its holder {gnode}'s {gclient} campaigns as {other:?}"
                ))
            }
        }
        let higher = self.grants[e].range(l.fence + 1..).find(|(_, (g, _, _))| *g < told.sent_from);
        if let Some((f, (g, n, c))) = higher {
            return Err(format!(
                "{who} told at {t} that {l:?} leads {name} (sent at {} or later), but {n}'s {c} had been granted \
                 fence {f:#x} at {g}",
                told.sent_from
            ));
        }
        Ok(())
    }

    /// (c) Some instant between the earliest sending of `told` ("no
    /// leader") and its delivery has no holder of the election. Holds are
    /// open intervals: a hold that ends the instant another begins (a
    /// process granting its own client at once, through its loopback)
    /// leaves that instant without a holder, as it was between the inputs.
    fn leaderless(&self, who: &str, name: &LockName, e: usize, told: &Told) -> Result<(), String> {
        let (a, t) = (told.sent_from, told.at);
        let overlapping: Vec<&Hold> = self.holds[e].iter().filter(|h| h.from < t && h.until() > a).collect();
        let mut x = a;
        while x <= t {
            let reach = overlapping.iter().filter(|h| h.from < x).map(|h| h.until()).max();
            match reach {
                Some(end) if end > x => x = end,
                _ => return Ok(()),
            }
        }
        let holds: Vec<String> = overlapping
            .iter()
            .map(|h| format!("{}'s {} fence {:#x} from {} until {}", h.node, h.client, h.fence, h.from, h.until()))
            .collect();
        Err(format!(
            "{who} told at {t} that nobody leads {name} (sent at {a} or later, asked at {:?}), but it was held \
             throughout: {}",
            told.asked,
            holds.join("; ")
        ))
    }

    /// The state of election `e` at `now`: its leader, and since when it
    /// has been so (the grant of the one holding, or the end of the last
    /// hold).
    fn final_state(&self, e: usize, now: Instant) -> Result<(Option<LeaderInfo>, Instant), String> {
        let name = &self.load.elections[e];
        let live: Vec<&Hold> = self.holds[e].iter().filter(|h| h.ended.is_none() && h.lease_until > now).collect();
        match live.as_slice() {
            [] => Ok((None, self.holds[e].iter().map(Hold::until).max().unwrap_or(Instant::ZERO))),
            [h] => {
                let Some(Role::Campaigner { value, .. }) = self.load.clients.get(&(h.node, h.client)) else {
                    return Err(format!("{name} held by {}'s {}, no campaigner", h.node, h.client));
                };
                let l = LeaderInfo { node: u64::from(h.node.0), fence: h.fence, value: value.clone() };
                Ok((Some(l), h.from))
            }
            _ => Err(format!("{name} held by several at {now}: {live:?}")),
        }
    }

    /// (e) After the campaigners stopped: each election ends as it should
    /// (led to the end where the campaigners keep on, by nobody where
    /// they quit); each watcher of a live process was last told that
    /// state; the one-shot answers asked once it had settled say it.
    fn settled(&self, now: Instant, up: impl Fn(NodeId) -> bool) -> Result<(), String> {
        for (e, name) in self.load.elections.iter().enumerate() {
            let (state, since) = self.final_state(e, now)?;
            if state.is_some() != self.load.keep[e] {
                return Err(format!("{name} ends led by {state:?} (the campaigners keep on: {})", self.load.keep[e]));
            }
            for (key, role) in &self.load.clients {
                if role.election() != e || !up(key.0) {
                    continue;
                }
                let (life, _) = self.lives[&key.0];
                match role {
                    Role::Watcher { .. } => {
                        let last = self
                            .sessions
                            .get(key)
                            .and_then(|s| s.last())
                            .filter(|s| s.life == life)
                            .and_then(|s| s.told.last());
                        if last.map(|o| &o.leader) != Some(&state) {
                            return Err(format!(
                                "{}'s {} (watching {name}) was last told {last:?}; {name} is led by {state:?} since {since}",
                                key.0, key.1
                            ));
                        }
                    }
                    Role::Once { .. } => {
                        let settled = since + ONE_SHOT_SLACK;
                        let late: Vec<&Told> = self
                            .answers
                            .get(key)
                            .into_iter()
                            .flatten()
                            .filter(|o| o.asked.is_some_and(|a| a >= settled))
                            .collect();
                        if late.is_empty() {
                            return Err(format!(
                                "{}'s {} (asking about {name}) got no answer asked after {settled}",
                                key.0, key.1
                            ));
                        }
                        if let Some(o) = late.iter().find(|o| o.leader != state) {
                            return Err(format!(
                                "{}'s {} asked about {name} at {:?} and was told {:?} at {}; {name} is led by {state:?} \
                                 since {since}",
                                key.0, key.1, o.asked, o.leader, o.at
                            ));
                        }
                    }
                    Role::Campaigner { .. } => {}
                }
            }
        }
        Ok(())
    }

    /// In a fault-free run: each watcher was told every leader of its
    /// election from the one current at its first answer on, in fence
    /// order, none missed and none extra: the leaders it was told are
    /// exactly the grants that still held at its first answer (and the
    /// one that answer named). (Exact: no
    /// push is coalesced away without faults. A holder's `Announce` goes
    /// out when its client is granted, its `Release` at least 1 ms later
    /// on the same FIFO link, and the coordinator pushes after each input,
    /// so every leader is pushed before its end is.)
    fn in_order(&self) -> Result<(), String> {
        for (key, role) in &self.load.clients {
            let Role::Watcher { election: e } = role else { continue };
            let name = &self.load.elections[*e];
            let sessions = self.sessions.get(key).map(Vec::as_slice).unwrap_or_default();
            let [session] = sessions else {
                return Err(format!("{}'s {} watched {name} in {} sessions", key.0, key.1, sessions.len()));
            };
            let Some(first) = session.told.first() else {
                return Err(format!("{}'s {} was told nothing about {name}", key.0, key.1));
            };
            let seen: Vec<u128> = session.told.iter().filter_map(|o| o.leader.as_ref().map(|l| l.fence)).collect();
            // The first answer may name a leader that has just resigned
            // (the coordinator hears of it one delay after its client).
            let first_leader = first.leader.as_ref().map(|l| l.fence);
            let expected: Vec<&Hold> =
                self.holds[*e].iter().filter(|h| h.until() > first.at || Some(h.fence) == first_leader).collect();
            let fences: Vec<u128> = expected.iter().map(|h| h.fence).collect();
            if seen != fences {
                let missed: Vec<String> = expected
                    .iter()
                    .filter(|h| !seen.contains(&h.fence))
                    .map(|h| format!("{:#x} ({}'s {} from {} until {})", h.fence, h.node, h.client, h.from, h.until()))
                    .collect();
                let told: Vec<String> = session
                    .told
                    .iter()
                    .map(|o| format!("{}: {:?}", o.at, o.leader.as_ref().map(|l| (l.node, l.fence))))
                    .collect();
                return Err(format!(
                    "{}'s {} watching {name} from {} was told {} leaders of {} (missed: {})\n  it was told: {}",
                    key.0,
                    key.1,
                    first.at,
                    seen.len(),
                    fences.len(),
                    missed.join(", "),
                    told.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// The judge as a simulator checker: after every step, each process's
/// life, then the step's replies.
fn judging(judge: &Rc<RefCell<Judge>>, shared: &Rc<Shared>) -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    let (judge, shared) = (judge.clone(), shared.clone());
    let mut seen = 0;
    move |w| {
        let mut j = judge.borrow_mut();
        for (i, slot) in w.slots.iter().enumerate() {
            j.life(NodeId(i as u32 + 1), slot.starts, w.now);
        }
        let timely = w.timely_for(D);
        let asks = shared.asks.borrow();
        for (t, node, client, reply) in &w.replies[seen..] {
            j.reply(*t, *node, *client, reply, timely, &asks)?;
        }
        seen = w.replies.len();
        Ok(())
    }
}

/// The algorithm a seed's run uses: they alternate.
fn alg_of(seed: u64) -> Algorithm {
    if seed.is_multiple_of(2) {
        Algorithm::Relay
    } else {
        Algorithm::Ring
    }
}

/// A run of `seed`: its clients, checked after every step by the lease
/// checker (a) and the judge (b–d).
struct Run {
    sim: Sim<ElNode>,
    judge: Rc<RefCell<Judge>>,
    shared: Rc<Shared>,
}

impl Run {
    fn new(seed: u64, alg: Algorithm, load: Load, campaign_until: Instant, observe_until: Instant) -> Run {
        Run::without(seed, alg, Rules::ALL_ON, load, campaign_until, observe_until)
    }

    /// As [`Run::new`], with the rules in `m` switched off.
    fn without(
        seed: u64,
        alg: Algorithm,
        m: Rules<ElRule>,
        load: Load,
        campaign_until: Instant,
        observe_until: Instant,
    ) -> Run {
        let load = Rc::new(load);
        let shared = Rc::new(Shared::default());
        let mut sim = cluster(seed, alg, m, &load, &shared, campaign_until, observe_until);
        if std::env::var_os("SIM_SEED").is_none() {
            // Many seeds: no trace (formatting it would dominate); a
            // single seed, as a failure's command reruns it, keeps it.
            sim = sim.without_trace();
        }
        sim.check(kit::elections::safety_under_pauses_by(load.lock_of()));
        let judge = Rc::new(RefCell::new(Judge::new(load)));
        sim.check(judging(&judge, &shared));
        Run { sim, judge, shared }
    }

    /// The campaigners stop; then (e) is judged after `settle`.
    fn stop_and_settle(&mut self, settle: Duration) -> Result<(), SimError> {
        self.shared.stopped.set(true);
        self.sim.run_for(settle)?;
        let w = self.sim.world();
        let settled = self.judge.borrow().settled(w.now, |id| w.is_up(id));
        settled.map_err(|e| self.sim.error(e))
    }
}

/// Every live process names one live coordinator, in office; every
/// campaigner of every process was granted since `since`.
fn converged(sim: &Sim<ElNode>, load: &Load, since: Instant) -> Result<(), SimError> {
    let w = sim.world();
    let views: Vec<String> = w
        .live()
        .map(|(id, c)| format!("{id}: term {} coordinator {:?} follows {:?}", c.term(), c.coordinator(), c.follows()))
        .collect();
    let named = w.live().find_map(|(_, c)| c.coordinator());
    let Some(leader) = named.filter(|l| w.is_up(*l)) else {
        return Err(sim.error(format!("no live coordinator named\n{}", views.join("\n"))));
    };
    if w.live().any(|(_, c)| c.coordinator() != Some(leader)) || !w.core(leader).is_some_and(|c| c.in_office()) {
        return Err(sim.error(format!("not one coordinator in office\n{}", views.join("\n"))));
    }
    for (key, role) in &load.clients {
        let Role::Campaigner { election, .. } = role else { continue };
        let served = w
            .replies
            .iter()
            .any(|(t, n, c, r)| *t >= since && (*n, *c) == *key && matches!(r, LockReply::Granted { .. }));
        if !served {
            let name = &load.elections[*election];
            return Err(sim.error(format!("{}'s {} ({name}) not granted since {since}", key.0, key.1)));
        }
    }
    Ok(())
}

/// The family's run of `seed`: the named-lock family's faults until 5 s,
/// then `converge`, every campaigner served again, the campaigners
/// stopped, and every observer told the final state. `reached` follows
/// the run's virtual time (for [`within`]).
fn election_run(seed: u64, reached: &Arc<AtomicU64>) -> Result<(), SimError> {
    let load = Load::draw(seed);
    let faults_end = Instant::from_millis(FAULTS_UNTIL_MS);
    let stop = faults_end + STOP_AFTER_CONVERGE;
    let end = stop + SETTLE_AFTER_STOP;
    let mut run = Run::new(seed, alg_of(seed), load.clone(), stop, end);
    run.sim.check(following(reached));
    run.sim.random_faults(&kit::elections::plan(N));
    run.sim.run_until(faults_end)?;
    run.sim.converge(STOP_AFTER_CONVERGE)?;
    converged(&run.sim, &load, faults_end)?;
    run.stop_and_settle(SETTLE_AFTER_STOP)
}

/// A checker that only records the virtual time reached.
fn following(reached: &Arc<AtomicU64>) -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    let reached = reached.clone();
    move |w| {
        reached.store(w.now.as_micros(), Ordering::Relaxed);
        Ok(())
    }
}

/// Wall time a run may take before it is judged hung: a single run takes
/// well under a second (debug build); one input a core never finishes
/// handling (a loop inside the core) would stop the whole test binary
/// instead of failing it.
const HUNG_AFTER: Duration = Duration::from_secs(60);

/// Runs `run` (given a virtual-time tracker) on a thread of its own: its
/// result, or a failure naming the virtual time it reached if it does not
/// finish within [`HUNG_AFTER`] (the thread is left spinning; the test
/// binary ends with the process).
fn within(
    seed: u64,
    run: impl FnOnce(&Arc<AtomicU64>) -> Result<(), SimError> + Send + 'static,
) -> Result<(), SimError> {
    let reached = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let r = reached.clone();
    std::thread::Builder::new()
        .name(std::thread::current().name().unwrap_or("run").to_owned())
        .spawn(move || {
            let _ = tx.send(run(&r));
        })
        .expect("a thread for the run");
    match rx.recv_timeout(HUNG_AFTER) {
        Ok(result) => result,
        Err(_) => {
            let at = Instant::from_micros(reached.load(Ordering::Relaxed));
            Err(SimError::new(
                seed,
                at,
                format!(
                    "the run did not finish within {HUNG_AFTER:?} of wall time: its last step done was at {at}, \
                     the next one never ended (a core handling one input for ever?)"
                ),
            ))
        }
    }
}

#[test]
fn elections_under_every_fault() {
    for_seeds(60, |seed| within(seed, move |reached| election_run(seed, reached)));
}

#[test]
#[ignore = "long: SIM_SEEDS=5000"]
fn sweep() {
    for_seeds(5_000, |seed| within(seed, move |reached| election_run(seed, reached)));
}

/// A process with a watching client that knows no coordinator when its
/// observe timer fires (here: cut off from every other process for two
/// seconds, past a refresh) keeps running: the run reaches its end.
#[test]
fn a_watcher_cut_off_from_every_coordinator_leaves_its_process_running() {
    let outcome = within(1, |reached| {
        let net = NetConfig::reliable(DELAY_MIN, DELAY_MAX);
        let mut sim = Sim::new(1, N, net, kit::config(Algorithm::Relay, N));
        sim.check(following(reached));
        let name = LockName::parse("app").expect("a valid name");
        let watcher = ClientId(110);
        sim.at(
            Instant::from_millis(20),
            Action::Request(NodeId(1), watcher, LockRequest::Observe { name, watch: true }),
        );
        sim.run_until(Instant::from_millis(1_500))?;
        let told = sim
            .world()
            .replies
            .iter()
            .any(|(_, n, c, r)| (*n, *c) == (NodeId(1), watcher) && matches!(r, LockReply::Leader { .. }));
        if !told {
            return Err(sim.error("the watcher was told nothing"));
        }
        sim.at(Instant::from_millis(1_500), Action::Partition(vec![NodeId(1)]));
        sim.at(Instant::from_millis(3_500), Action::Heal);
        sim.run_until(Instant::from_millis(4_000))
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

/// Without faults, watchers subscribed from the start see every leader of
/// their election, in fence order, none missed ([`Judge::in_order`]), and
/// every check of the family holds.
#[test]
fn observers_see_every_leader_in_order() {
    for_seeds(10, |seed| {
        let load = Load::draw(seed);
        let stop = Instant::from_millis(2_000);
        let end = stop + SETTLE_AFTER_STOP;
        let mut run = Run::new(seed, alg_of(seed), load.clone(), stop, end);
        run.sim.run_until(stop)?;
        converged(&run.sim, &load, Instant::from_millis(1_000))?;
        run.stop_and_settle(SETTLE_AFTER_STOP)?;
        let in_order = run.judge.borrow().in_order();
        in_order.map_err(|e| run.sim.error(e))
    });
}

/// The checks are no bystanders in a real run: with a grant counter per
/// name instead of per office (`OfficeWideCounter` off), an election whose
/// name fell idle and was forgotten gets its fences from the start again.
/// Two campaigners of one election, on processes 1 and 2, leave it idle
/// between their turns; processes 3 and 4 watch: a fault-free run fails
/// (the lease checker, (a), sees the fence go back; where it did not, the
/// watchers' order, (d), would).
#[test]
fn a_counter_per_name_fails_the_family() {
    let m = Rules::all_but(&[ElRule::OfficeWideCounter]);
    let app = LockName::parse("app").expect("a valid name");
    let mut clients = BTreeMap::new();
    for i in [1, 2] {
        let value = format!("n{i}c0");
        clients.insert((NodeId(i), ClientId(100 * u64::from(i))), Role::Campaigner { election: 0, value });
    }
    for i in [3, 4] {
        clients.insert((NodeId(i), ClientId(100 * u64::from(i) + 10)), Role::Watcher { election: 0 });
    }
    let load = Load { elections: vec![app], keep: vec![true], clients };
    let stop = Instant::from_millis(2_000);
    let failures: Vec<String> = (0..3)
        .filter_map(|seed| {
            let mut run = Run::without(seed, alg_of(seed), m, load.clone(), stop, stop + SETTLE_AFTER_STOP);
            let e = run.sim.run_until(stop).and_then(|()| run.stop_and_settle(SETTLE_AFTER_STOP)).err()?;
            Some(e.message)
        })
        .collect();
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(failures.iter().all(|e| e.contains("fence")), "{failures:#?}");
    // With every rule on, the same runs pass.
    for seed in 0..3 {
        let mut run = Run::new(seed, alg_of(seed), load.clone(), stop, stop + SETTLE_AFTER_STOP);
        run.sim.run_until(stop).and_then(|()| run.stop_and_settle(SETTLE_AFTER_STOP)).unwrap();
    }
}

/// The checkers fail on histories that break them (synthetic replies fed
/// to the judge as the simulator would).
mod judge_fails {
    use super::*;

    const N1: NodeId = NodeId(1);
    const N2: NodeId = NodeId(2);
    const N3: NodeId = NodeId(3);
    const C1: ClientId = ClientId(100);
    const C2: ClientId = ClientId(200);
    const W: ClientId = ClientId(310);
    const O: ClientId = ClientId(320);

    /// One election `app` (kept); campaigners 1's 100 ("n1c0") and 2's
    /// 200 ("n2c0"); 3's 310 watches, 3's 320 asks once.
    fn judge() -> Judge {
        let app = || LockName::parse("app").expect("a valid name");
        let mut clients = BTreeMap::new();
        clients.insert((N1, C1), Role::Campaigner { election: 0, value: "n1c0".into() });
        clients.insert((N2, C2), Role::Campaigner { election: 0, value: "n2c0".into() });
        clients.insert((N3, W), Role::Watcher { election: 0 });
        clients.insert((N3, O), Role::Once { election: 0 });
        Judge::new(Rc::new(Load { elections: vec![app()], keep: vec![true], clients }))
    }

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// Both observers asked at 1 ms.
    fn asks() -> Asks {
        [(N3, W), (N3, O)].into_iter().map(|k| (k, BTreeMap::from([(at(1), 1)]))).collect()
    }

    fn granted(fence: u128, until_ms: u64) -> LockReply {
        LockReply::Granted { fence, lease_until_us: at(until_ms).as_micros() }
    }

    fn leader(node: u64, fence: u128, value: &str) -> LockReply {
        let name = LockName::parse("app").expect("a valid name");
        LockReply::Leader { name, leader: Some(LeaderInfo { node, fence, value: value.into() }) }
    }

    fn nobody() -> LockReply {
        LockReply::Leader { name: LockName::parse("app").expect("a valid name"), leader: None }
    }

    /// Feeds `(ms, node, client, reply)` in order (timely throughout);
    /// the first error.
    fn feed(j: &mut Judge, history: &[(u64, NodeId, ClientId, LockReply)]) -> Result<(), String> {
        let asks = asks();
        for (ms, node, client, reply) in history {
            j.reply(at(*ms), *node, *client, reply, true, &asks)?;
        }
        Ok(())
    }

    /// 1's client leads 5 from 10 to 20, 2's leads 6 from 30 on; the
    /// watcher is told each in time, and nobody between.
    fn good() -> Vec<(u64, NodeId, ClientId, LockReply)> {
        vec![
            (10, N1, C1, granted(5, 200)),
            (11, N3, W, leader(1, 5, "n1c0")),
            (20, N1, C1, LockReply::Released),
            (22, N3, W, nobody()),
            (30, N2, C2, granted(6, 300)),
            (31, N3, W, leader(2, 6, "n2c0")),
            (32, N3, O, leader(2, 6, "n2c0")),
        ]
    }

    #[test]
    fn a_true_history_passes() {
        let mut j = judge();
        feed(&mut j, &good()).unwrap();
        j.in_order().unwrap();
    }

    #[test]
    fn a_leader_never_granted() {
        let mut h = good();
        h[1].3 = leader(1, 4, "n1c0");
        let e = feed(&mut judge(), &h).unwrap_err();
        assert!(e.contains("no campaigner of app was granted"), "{e}");
    }

    #[test]
    fn a_leader_observed_before_its_grant_or_on_another_node() {
        let mut h = good();
        h.swap(0, 1);
        h[0].0 = 9;
        let e = feed(&mut judge(), &h).unwrap_err();
        assert!(e.contains("no campaigner of app was granted"), "{e}");
        let mut h = good();
        h[1].3 = leader(2, 5, "n1c0");
        let e = feed(&mut judge(), &h).unwrap_err();
        assert!(e.contains("was granted to"), "{e}");
    }

    #[test]
    fn a_leader_with_another_value() {
        let mut h = good();
        h[1].3 = leader(1, 5, "n2c0");
        let e = feed(&mut judge(), &h).unwrap_err();
        assert!(e.contains("campaigns as"), "{e}");
    }

    #[test]
    fn a_leader_superseded_before_it_was_sent() {
        // The one-shot is told 5 at 40, asked at 1: sent at 38 or later
        // (timely), when 6 had been granted (30).
        let mut h = good();
        h.truncate(5);
        h.push((40, N3, O, leader(1, 5, "n1c0")));
        let e = feed(&mut judge(), &h).unwrap_err();
        assert!(e.contains("had been granted fence 0x6"), "{e}");
        // Not timely: it may have been sent from 1 on; passes.
        let mut j = judge();
        let asks = asks();
        for (ms, node, client, reply) in &h {
            j.reply(at(*ms), *node, *client, reply, false, &asks).unwrap();
        }
    }

    #[test]
    fn nobody_while_one_held_throughout() {
        // 6 holds from 30 (lease until 300); "nobody" at 50, sent from
        // 48 on.
        let h = vec![(30, N2, C2, granted(6, 300)), (50, N3, O, nobody())];
        let e = feed(&mut judge(), &h).unwrap_err();
        assert!(e.contains("held throughout"), "{e}");
        // A hold handed over at one instant leaves that instant free.
        let h = vec![
            (10, N1, C1, granted(5, 200)),
            (20, N1, C1, LockReply::Released),
            (20, N2, C2, granted(6, 300)),
            (21, N3, O, nobody()),
        ];
        feed(&mut judge(), &h).unwrap();
        // A lease that ran out ends the hold: "nobody" after it is true.
        let h = vec![(10, N1, C1, granted(5, 15)), (17, N3, O, nobody())];
        feed(&mut judge(), &h).unwrap();
    }

    #[test]
    fn a_watcher_told_an_older_leader_or_the_same_twice() {
        let mut h = good();
        h.truncate(6);
        // 5 again after 6 (not timely: only the order is judged).
        h.push((40, N3, W, leader(1, 5, "n1c0")));
        let mut j = judge();
        let asks = asks();
        let e = h.iter().try_for_each(|(ms, n, c, r)| j.reply(at(*ms), *n, *c, r, false, &asks)).unwrap_err();
        assert!(e.contains("after a leader with fence 0x6"), "{e}");
        let mut h = good();
        h.insert(2, (12, N3, W, leader(1, 5, "n1c0")));
        let e = feed(&mut judge(), &h).unwrap_err();
        assert!(e.contains("as already at"), "{e}");
    }

    #[test]
    fn a_one_shot_ask_queued_behind_a_refusal_is_the_one_answered() {
        // Asked at 1 and 5 (a paused process takes both late): the first
        // is refused for want of a coordinator at 10, the second answered
        // at 40, naming 6, granted at 30: sent at 5 or later (not timely),
        // so fine.
        let mut asks = asks();
        asks.get_mut(&(N3, O)).unwrap().insert(at(5), 1);
        let refused = LockReply::Refused { reason: "no coordinator answered: try again".into() };
        let h = [(10, N3, O, refused), (30, N2, C2, granted(6, 300)), (40, N3, O, leader(2, 6, "n2c0"))];
        let mut j = judge();
        for (ms, node, client, reply) in &h {
            j.reply(at(*ms), *node, *client, reply, false, &asks).unwrap();
        }
        assert_eq!(j.answers[&(N3, O)][0].asked, Some(at(5)));
        // A third answer, with no third ask, is one too many.
        let e = j.reply(at(50), N3, O, &leader(2, 6, "n2c0"), false, &asks).unwrap_err();
        assert!(e.contains("more answers than asks"), "{e}");
    }

    #[test]
    fn a_watcher_left_behind_at_the_end() {
        let mut h = good();
        h.remove(5);
        let mut j = judge();
        feed(&mut j, &h).unwrap();
        let e = j.settled(at(100), |_| true).unwrap_err();
        assert!(e.contains("was last told"), "{e}");
    }

    #[test]
    fn a_one_shot_observer_not_answered_after_the_state_settled() {
        // Its one answer (32) was asked at 1, before 6 led (30).
        let h = good();
        let mut j = judge();
        let mut asks = asks();
        asks.get_mut(&(N3, O)).unwrap().insert(at(140), 1);
        for (ms, node, client, reply) in &h {
            j.reply(at(*ms), *node, *client, reply, true, &asks).unwrap();
        }
        let e = j.settled(at(200), |_| true).unwrap_err();
        assert!(e.contains("got no answer asked after"), "{e}");
        // Answered, asked at 140 (6 leads since 30): settled.
        j.reply(at(141), N3, O, &leader(2, 6, "n2c0"), true, &asks).unwrap();
        j.settled(at(200), |_| true).unwrap();
    }

    #[test]
    fn a_watcher_that_missed_a_leader() {
        let mut h = good();
        // 1's client leads 5 from 10 to 20; the watcher hears nothing of
        // it, and of 6 from its first answer (nobody) on.
        h.remove(1);
        h.remove(2);
        let mut j = judge();
        j.reply(at(3), N3, W, &nobody(), true, &asks()).unwrap();
        feed(&mut j, &h).unwrap();
        let e = j.in_order().unwrap_err();
        assert!(e.contains("was told 1 leaders of 2 (missed: 0x5"), "{e}");
    }
}
