//! A deterministic simulator for any [`ftcore::Protocol`].
//!
//! N cores share one in-process network and one virtual clock. Time jumps
//! straight to the next thing that can happen (a delivery, a core's timer, a
//! scheduled fault), so a minute of cluster life takes milliseconds. Every
//! random choice — delays, loss, duplication, which node crashes when — comes
//! from one seeded generator, so a `u64` seed reproduces a whole run, trace
//! included. After every step the registered invariant checkers see the
//! whole world; the first violation stops the run with an error that names
//! the seed, the time and the last lines of the trace.
//!
//! Faults: message loss, duplication and reordering (datagram channels),
//! delay (both), partitions that heal (a reliable channel loses what crosses
//! a cut, like a broken TCP connection), crash-stop and restart as a new
//! incarnation, and client requests and disconnects at chosen times.
//!
//! Shape after turmoil and tikv/raft-rs's harness.
//!
//! May depend on: `ftcore`, `timer`, `membership` (never on a daemon, the
//! runtime or I/O). Used by the daemons' simulation tests and benches.
#![forbid(unsafe_code)]

mod faults;
mod net;

use std::collections::BTreeMap;
use std::time::Duration;

pub use faults::FaultPlan;
use ftcore::{ClientId, Context, Incarnation, NodeId, Output, Protocol};
use membership::Membership;
pub use net::{Channel, NetConfig};
use net::{InFlight, Network};
use timer::{Instant, SeededRng};

/// An invariant checker: sees the world after every step.
pub type Checker<P> = Box<dyn FnMut(&World<P>) -> Result<(), String>>;

/// Simulated clients that react to replies: given a reply (time, node,
/// client, reply) and the simulation's generator, returns actions to take
/// after the given delays (e.g. release a lock some time after the grant).
pub type ClientBehaviour<P> =
    Box<dyn FnMut(Instant, NodeId, ClientId, &<P as Protocol>::Reply, &mut SeededRng) -> Vec<(Duration, Action<P>)>>;

/// Something scheduled to happen to the cluster at a given time.
#[derive(Clone, Debug)]
pub enum Action<P: Protocol> {
    /// Crash-stop the node (its in-flight outgoing messages still arrive).
    Crash(NodeId),
    /// Restart a crashed node as a new incarnation.
    Restart(NodeId),
    /// Cut the network between these nodes and the rest.
    Partition(Vec<NodeId>),
    /// Remove every partition.
    Heal,
    /// A local client sends a request to a node.
    Request(NodeId, ClientId, P::Request),
    /// A local client of a node disconnects.
    ClientGone(NodeId, ClientId),
    /// A node begins a graceful leave.
    Shutdown(NodeId),
}

/// One node as the simulator holds it.
#[derive(Debug)]
pub struct Slot<P: Protocol> {
    /// The running core, `None` while crashed.
    pub core: Option<P>,
    /// What the node has stored (its `Persist` outputs; survives crashes,
    /// `None` for a node that never stored anything: a new disk).
    pub disk: Option<P::Durable>,
    /// The life of the current (or last) core.
    pub incarnation: Incarnation,
    /// How many times it has been started.
    pub starts: u32,
}

/// What checkers see: the cores, and everything observable so far.
#[derive(Debug)]
pub struct World<P: Protocol> {
    /// Current virtual time.
    pub now: Instant,
    /// Node `i` is `slots[i - 1]`.
    pub slots: Vec<Slot<P>>,
    /// Every event any core emitted, in order.
    pub events: Vec<(Instant, NodeId, P::Event)>,
    /// Every reply any core sent to a client, in order.
    pub replies: Vec<(Instant, NodeId, ClientId, P::Reply)>,
    /// Messages sent, per message kind name.
    pub sent_by_kind: BTreeMap<&'static str, u64>,
    /// Index into `events` of the first event of the current step.
    pub step_events_from: usize,
}

impl<P: Protocol> World<P> {
    /// The core of `id`, if it is running.
    pub fn core(&self, id: NodeId) -> Option<&P> {
        self.slots.get((id.0 as usize).wrapping_sub(1)).and_then(|s| s.core.as_ref())
    }

    /// Ids and cores of every running node.
    pub fn live(&self) -> impl Iterator<Item = (NodeId, &P)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| s.core.as_ref().map(|c| (NodeId(i as u32 + 1), c)))
    }

    /// Whether `id` is running.
    pub fn is_up(&self, id: NodeId) -> bool {
        self.core(id).is_some()
    }

    /// Events emitted during the step just taken.
    pub fn step_events(&self) -> &[(Instant, NodeId, P::Event)] {
        &self.events[self.step_events_from..]
    }

    /// Total messages sent so far.
    pub fn messages_sent(&self) -> u64 {
        self.sent_by_kind.values().sum()
    }
}

/// A failed run: which invariant broke, when, and how to reproduce it.
#[derive(Debug, Clone)]
pub struct SimError {
    /// The run's seed.
    pub seed: u64,
    /// Virtual time of the failure.
    pub at: Instant,
    /// What the checker said.
    pub message: String,
    /// The last lines of the trace.
    pub trace_tail: Vec<String>,
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "simulation failed at {} with seed {} (rerun with SIM_SEED={}):", self.at, self.seed, self.seed)?;
        writeln!(f, "  {}", self.message)?;
        writeln!(f, "last trace lines:")?;
        for l in &self.trace_tail {
            writeln!(f, "  {l}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SimError {}

/// The simulator.
pub struct Sim<P: Protocol> {
    seed: u64,
    rng: SeededRng,
    world: World<P>,
    net: Network<P::Msg>,
    config: P::Config,
    membership: Membership,
    checkers: Vec<Checker<P>>,
    clients: Option<ClientBehaviour<P>>,
    schedule: BTreeMap<(Instant, u64), Action<P>>,
    schedule_seq: u64,
    /// Each running core's next deadline, indexed so the next one is found
    /// in O(log N) (a thousand-node run would otherwise scan every core on
    /// every step).
    deadlines: std::collections::BTreeSet<(Instant, NodeId)>,
    deadline_of: Vec<Option<Instant>>,
    trace: Vec<String>,
    trace_hash: u64,
    keep_trace: bool,
    steps: u64,
}

impl<P: Protocol> std::fmt::Debug for Sim<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("seed", &self.seed)
            .field("now", &self.world.now)
            .field("steps", &self.steps)
            .finish()
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

impl<P: Protocol> Sim<P> {
    /// A cluster of `n` nodes (ids 1..=n, `Membership::of_size(n)`), each
    /// started with `config` at time zero in incarnation 1 on a new disk.
    ///
    /// # Panics
    /// If the core refuses `config` (a test bug).
    pub fn new(seed: u64, n: u32, net: NetConfig, config: P::Config) -> Self {
        let mut rng = SeededRng::new(seed);
        let membership = Membership::of_size(n);
        let slots = (1..=n)
            .map(|i| {
                let core =
                    start::<P>(&membership, &config, NodeId(i), Incarnation(1), Instant::ZERO, rng.next_u64(), None);
                Slot { core: Some(core), disk: None, incarnation: Incarnation(1), starts: 1 }
            })
            .collect();
        let mut sim = Sim {
            seed,
            rng,
            world: World {
                now: Instant::ZERO,
                slots,
                events: Vec::new(),
                replies: Vec::new(),
                sent_by_kind: BTreeMap::new(),
                step_events_from: 0,
            },
            net: Network::new(net),
            config,
            membership,
            checkers: Vec::new(),
            clients: None,
            schedule: BTreeMap::new(),
            schedule_seq: 0,
            deadlines: Default::default(),
            deadline_of: vec![None; n as usize],
            trace: Vec::new(),
            trace_hash: FNV_OFFSET,
            keep_trace: true,
            steps: 0,
        };
        for i in 1..=n {
            sim.drain(NodeId(i));
        }
        sim
    }

    /// Stops tracing (no trace lines, no trace hash): for large or long
    /// runs, where formatting every message would dominate.
    pub fn without_trace(mut self) -> Self {
        self.keep_trace = false;
        self
    }

    /// Adds an invariant checker, called after every step.
    pub fn check(&mut self, checker: impl FnMut(&World<P>) -> Result<(), String> + 'static) {
        self.checkers.push(Box::new(checker));
    }

    /// Sets how simulated clients react to replies.
    pub fn clients(&mut self, behaviour: ClientBehaviour<P>) {
        self.clients = Some(behaviour);
    }

    /// Schedules `action` at time `at`.
    pub fn at(&mut self, at: Instant, action: Action<P>) {
        self.schedule_seq += 1;
        self.schedule.insert((at, self.schedule_seq), action);
    }

    /// Schedules `action` `after` the current time.
    pub fn after(&mut self, after: Duration, action: Action<P>) {
        let at = self.world.now + after;
        self.at(at, action);
    }

    /// Schedules random crashes, restarts and partitions as `plan` says.
    pub fn random_faults(&mut self, plan: &FaultPlan) {
        let n = self.world.slots.len() as u32;
        for (at, action) in plan.generate(&mut self.rng, n) {
            self.at(at, action);
        }
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The world as checkers see it.
    pub fn world(&self) -> &World<P> {
        &self.world
    }

    /// Changes a running core (for tests that poke state), then executes
    /// its outputs.
    pub fn with_core<R>(&mut self, id: NodeId, f: impl FnOnce(&mut P) -> R) -> Option<R> {
        let r = self.core_mut(id).map(f);
        self.drain(id);
        r
    }

    fn core_mut(&mut self, id: NodeId) -> Option<&mut P> {
        self.world.slots.get_mut((id.0 as usize).wrapping_sub(1)).and_then(|s| s.core.as_mut())
    }

    /// Re-indexes `id`'s next deadline after anything touched its core.
    fn refresh_deadline(&mut self, id: NodeId) {
        let i = id.0 as usize - 1;
        let new = self.world.slots[i].core.as_ref().and_then(|c| c.poll_timeout());
        if self.deadline_of[i] != new {
            if let Some(old) = self.deadline_of[i] {
                self.deadlines.remove(&(old, id));
            }
            if let Some(t) = new {
                self.deadlines.insert((t, id));
            }
            self.deadline_of[i] = new;
        }
    }

    /// Current virtual time.
    pub fn now(&self) -> Instant {
        self.world.now
    }

    /// The simulation's generator (for tests that draw their own workload;
    /// drawing changes the rest of the run, deterministically).
    pub fn rng(&mut self) -> &mut SeededRng {
        &mut self.rng
    }

    /// The trace lines kept so far.
    pub fn trace(&self) -> &[String] {
        &self.trace
    }

    /// A hash of the whole trace: equal seeds give equal hashes.
    pub fn trace_hash(&self) -> u64 {
        self.trace_hash
    }

    /// Number of steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if !self.keep_trace {
            return;
        }
        let line = line();
        for b in line.as_bytes().iter().chain(b"\n") {
            self.trace_hash ^= u64::from(*b);
            self.trace_hash = self.trace_hash.wrapping_mul(FNV_PRIME);
        }
        self.trace.push(line);
    }

    fn fail(&self, message: String) -> SimError {
        let keep = std::env::var("SIM_TRACE_TAIL").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
        let from = self.trace.len().saturating_sub(keep);
        SimError { seed: self.seed, at: self.world.now, message, trace_tail: self.trace[from..].to_vec() }
    }

    /// Runs until virtual time `end` (or until a checker fails).
    pub fn run_until(&mut self, end: Instant) -> Result<(), SimError> {
        while let Some(t) = self.next_time() {
            if t > end {
                break;
            }
            self.step_at(t)?;
        }
        self.world.now = self.world.now.max(end);
        Ok(())
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) -> Result<(), SimError> {
        let end = self.world.now + d;
        self.run_until(end)
    }

    fn next_time(&self) -> Option<Instant> {
        let net = self.net.next_delivery();
        let timers = self.deadlines.first().map(|(t, _)| *t);
        let sched = self.schedule.keys().next().map(|(t, _)| *t);
        [net, timers, sched].into_iter().flatten().min()
    }

    /// Takes every step due at time `t`: scheduled actions first, then
    /// deliveries, then timers; checkers run after each.
    fn step_at(&mut self, t: Instant) -> Result<(), SimError> {
        self.world.now = self.world.now.max(t);
        let now = self.world.now;
        if let Some(key) = self.schedule.keys().next().copied().filter(|(at, _)| *at <= now) {
            let action = self.schedule.remove(&key).expect("key just seen");
            self.begin_step();
            self.apply(action);
            return self.run_checkers();
        }
        if let Some(m) = self.net.pop_due(now) {
            self.begin_step();
            self.deliver(m);
            return self.run_checkers();
        }
        let due: Vec<NodeId> =
            self.world.live().filter(|(_, c)| c.poll_timeout().is_some_and(|d| d <= now)).map(|(id, _)| id).collect();
        for id in due {
            self.begin_step();
            self.log(|| format!("{now} {id} timeout"));
            if let Some(core) = self.core_mut(id) {
                core.handle_timeout(now);
            }
            self.drain(id);
            self.run_checkers()?;
        }
        Ok(())
    }

    fn begin_step(&mut self) {
        self.steps += 1;
        self.world.step_events_from = self.world.events.len();
    }

    fn run_checkers(&mut self) -> Result<(), SimError> {
        let mut checkers = std::mem::take(&mut self.checkers);
        let mut result = Ok(());
        for c in checkers.iter_mut() {
            if let Err(msg) = c(&self.world) {
                result = Err(self.fail(msg));
                break;
            }
        }
        self.checkers = checkers;
        result
    }

    fn apply(&mut self, action: Action<P>) {
        let now = self.world.now;
        match action {
            Action::Crash(id) => {
                let slot = &mut self.world.slots[id.0 as usize - 1];
                if let Some(core) = slot.core.take() {
                    slot.incarnation = core.incarnation();
                    self.log(|| format!("{now} {id} CRASH"));
                    self.refresh_deadline(id);
                }
            }
            Action::Restart(id) => {
                let seed = self.rng.next_u64();
                let slot = &mut self.world.slots[id.0 as usize - 1];
                if slot.core.is_none() {
                    // Real daemons use their start time: always above any
                    // earlier life, including lives bumped by rejoins.
                    let inc = Incarnation(slot.incarnation.0 + 1_000);
                    slot.incarnation = inc;
                    slot.starts += 1;
                    let stored = slot.disk.clone();
                    slot.core = Some(start::<P>(&self.membership, &self.config, id, inc, now, seed, stored));
                    self.log(|| format!("{now} {id} RESTART as {inc}"));
                    self.drain(id);
                }
            }
            Action::Partition(side) => {
                self.log(|| format!("{now} PARTITION {side:?}"));
                self.net.partition(side);
            }
            Action::Heal => {
                self.log(|| format!("{now} HEAL"));
                self.net.heal();
            }
            Action::Request(id, client, req) => {
                self.log(|| format!("{now} {id} <- {client} {req:?}"));
                if let Some(core) = self.core_mut(id) {
                    core.handle_request(now, client, req);
                    self.drain(id);
                }
            }
            Action::ClientGone(id, client) => {
                self.log(|| format!("{now} {id} <- {client} gone"));
                if let Some(core) = self.core_mut(id) {
                    core.handle_client_gone(now, client);
                    self.drain(id);
                }
            }
            Action::Shutdown(id) => {
                self.log(|| format!("{now} {id} SHUTDOWN"));
                if let Some(core) = self.core_mut(id) {
                    core.handle_shutdown(now);
                    self.drain(id);
                }
            }
        }
    }

    fn deliver(&mut self, m: InFlight<P::Msg>) {
        let now = self.world.now;
        let slot = &self.world.slots[m.to.0 as usize - 1];
        let life = slot.core.as_ref().map(|_| slot.starts);
        if let Err(why) = self.net.survives(&m, life) {
            self.log(|| format!("{now} {}->{} lost ({why}) {:?}", m.from, m.to, m.msg));
            return;
        }
        self.log(|| format!("{now} {}->{} {} {:?}", m.from, m.to, m.from_inc, m.msg));
        if let Some(core) = self.core_mut(m.to) {
            core.handle_message(now, m.from, m.from_inc, m.msg);
        }
        self.drain(m.to);
    }

    /// Executes everything `id` has queued.
    fn drain(&mut self, id: NodeId) {
        let now = self.world.now;
        while let Some(core) = self.core_mut(id) {
            let Some(out) = core.poll_output() else { break };
            let inc = core.incarnation();
            match out {
                Output::Send { to, msg } => {
                    let kind = <P::Msg as ftcore::Message>::kind_name(ftcore::Message::kind(&msg)).unwrap_or("?");
                    *self.world.sent_by_kind.entry(kind).or_insert(0) += 1;
                    let Some(to_slot) = self.world.slots.get((to.0 as usize).wrapping_sub(1)) else { continue };
                    let (to_up, to_life) = (to_slot.core.is_some(), to_slot.starts);
                    let m = InFlight { from: id, from_inc: inc, to, to_life, msg: msg.clone() };
                    let outcome = self.net.send(&mut self.rng, now, m, to_up);
                    if let Some(why) = outcome {
                        self.log(|| format!("{now} {id}->{to} dropped ({why}) {msg:?}"));
                    }
                }
                Output::Reply { client, reply } => {
                    self.log(|| format!("{now} {id} -> {client} {reply:?}"));
                    if let Some(mut behave) = self.clients.take() {
                        for (after, action) in behave(now, id, client, &reply, &mut self.rng) {
                            self.at(now + after, action);
                        }
                        self.clients = Some(behave);
                    }
                    self.world.replies.push((now, id, client, reply));
                }
                Output::Event(e) => {
                    self.log(|| format!("{now} {id} event {e:?}"));
                    self.world.events.push((now, id, e));
                }
                Output::Persist(state) => {
                    self.log(|| format!("{now} {id} persist {state:?}"));
                    self.world.slots[id.0 as usize - 1].disk = Some(state);
                }
            }
        }
        self.refresh_deadline(id);
    }
}

/// Builds one simulated core.
fn start<P: Protocol>(
    membership: &Membership,
    config: &P::Config,
    me: NodeId,
    incarnation: Incarnation,
    now: Instant,
    seed: u64,
    stored: Option<P::Durable>,
) -> P {
    let ctx = Context {
        me,
        incarnation,
        membership: membership.clone(),
        now,
        seed,
        config: config.clone(),
        stored,
        new_cluster: false,
    };
    P::start(ctx).unwrap_or_else(|e| panic!("the simulated core {me} refused its config: {e}"))
}

/// Runs `run(seed)` for each seed and panics naming the first that fails.
/// `SIM_SEED=s` runs only seed `s`; `SIM_SEEDS=n` overrides the count;
/// `SIM_TRACE_TAIL=n` shows the last `n` trace lines of a failure (40).
pub fn for_seeds(count: u64, mut run: impl FnMut(u64) -> Result<(), SimError>) {
    if let Some(seed) = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        if let Err(e) = run(seed) {
            panic!("{e}");
        }
        return;
    }
    let count = std::env::var("SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(count);
    for seed in 0..count {
        if let Err(e) = run(seed) {
            panic!("{e}");
        }
    }
}

#[cfg(test)]
mod tests;
