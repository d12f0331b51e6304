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
//! delay (both) and delay beyond the configured range on slow links,
//! partitions that heal (a reliable channel loses what crosses a cut, like a
//! broken TCP connection), crash-stop and restart as a new incarnation,
//! pauses (the node's clock runs on while it receives, fires and sends
//! nothing), and client requests and disconnects at chosen times.
//! [`FaultPlan`] draws any mix of them; [`FaultPlan::everything`] mixes all.
//!
//! The test kit around it, so that a daemon's simulation tests hold only
//! its own scenarios and checkers:
//!
//! - per-link tools for scripting races between crossing messages:
//!   [`Sim::cut`], [`Sim::hold`] / [`Sim::release`], [`Sim::drop_kind`];
//! - [`World::timely_since`], so checkers can apply the invariants that hold
//!   only while the failure detector is accurate;
//! - [`Sim::converge`], the liveness phase: stop faults, restart and resume
//!   every node, heal every link, settle; the caller then checks liveness;
//! - [`for_seeds`] / [`for_seeds_with`]: pinned regression seeds, then a
//!   range of seeds that the environment can move (`SIM_SEED_FROM`), widen
//!   (`SIM_SEEDS`) or narrow to one (`SIM_SEED`); a failure prints the
//!   command that reproduces it;
//! - [`SimError::new`] and [`Sim::error`] for checks made outside the sim;
//! - [`model`]: bounded exhaustive model checking of a core with
//!   `stateright`, from [`Sim::snapshot`]s of a simulated run.
//!
//! Shape after turmoil and tikv/raft-rs's harness.
//!
//! May depend on: `ftcore`, `timer`, `membership`, `stateright` (never on
//! a daemon, the runtime or I/O). Used by the daemons' simulation tests and benches.
#![forbid(unsafe_code)]

pub mod bytes;
mod faults;
pub mod model;
mod net;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

pub use faults::FaultPlan;
use ftcore::{ClientId, Context, Incarnation, JobCommand, JobEnd, NodeId, Output, Protocol};
use membership::Membership;
pub use net::{Channel, Link, NetConfig};
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
    /// Its host vanishes with it: peers learn of it only by silence.
    Crash(NodeId),
    /// Kill the node's process on a host that stays up: a `Crash`, and
    /// every peer whose connection to it is open (no partition, no cut
    /// either way) hears [`Action::Unreachable`] after a one-way delay of
    /// the network (the broken connection, then a refused one).
    Kill(NodeId),
    /// Node `.0` hears that the process of `.1` is gone
    /// ([`Protocol::handle_peer_unreachable`]); queued while `.0` is paused.
    Unreachable(NodeId, NodeId),
    /// Restart a crashed node as a new incarnation, with what it stored.
    Restart(NodeId),
    /// Replace a crashed node's disk by a new one: it restarts as a fresh
    /// node (nothing stored).
    WipeDisk(NodeId),
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
    /// Stop the node without killing it (SIGSTOP, a GC pause, a VM stall):
    /// it receives, fires and sends nothing while its clock runs on; what
    /// arrives for it (messages, client requests) is queued in order.
    Pause(NodeId),
    /// Resume a paused node: it handles its overdue timers, then what was
    /// queued, in arrival order, with its old state.
    Resume(NodeId),
    /// Break the link `from -> to` (one direction): what is sent is dropped,
    /// and what is in flight on it is lost.
    Cut(NodeId, NodeId),
    /// Mend a cut link.
    Uncut(NodeId, NodeId),
    /// Hold what arrives on the link `from -> to`, in order, undelivered.
    Hold(NodeId, NodeId),
    /// Deliver what the link `from -> to` held, now and in order, and stop
    /// holding it.
    Release(NodeId, NodeId),
    /// Drop the next `count` messages of the named kind sent on the link
    /// `from -> to`.
    DropKind(NodeId, NodeId, &'static str, u32),
    /// Make these links slow: each message sent on one takes up to the given
    /// extra delay longer (reliable links stay FIFO).
    Slow(Vec<Link>, Duration),
    /// End a slow period started by `Slow` with the same arguments.
    Unslow(Vec<Link>, Duration),
    /// A supervised job of the node ended (scheduled by the simulator's
    /// job model; see [`Sim`]): reported to the core unless it crashed.
    JobEnd(NodeId, u64, JobEnd),
}

impl<P: Protocol> Action<P> {
    /// Whether this is something that happens to the cluster (a fault or
    /// its end) rather than a client's request or a graceful leave.
    pub fn is_fault(&self) -> bool {
        !matches!(self, Action::Request(..) | Action::Shutdown(_) | Action::JobEnd(..))
    }
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
    /// Whether it is paused (its core is kept, but does nothing).
    pub paused: bool,
}

/// One supervised job as the simulator ran it: when its command ran, under
/// which fence (checkers judge exclusion from these intervals, as a real
/// cluster's would be judged from the commands' own records).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    /// The node whose core started it.
    pub node: NodeId,
    /// The core's job id.
    pub id: u64,
    /// Its fence.
    pub fence: Option<u128>,
    /// Its program and arguments.
    pub argv: Vec<String>,
    /// When it started.
    pub started: Instant,
    /// When it ended (exited, or was killed); `None` while it runs.
    pub ended: Option<Instant>,
}

/// Steps at one instant of virtual time after which [`Sim::run_until`]
/// reports no progress (a live-lock of timers) instead of spinning.
pub const STEPS_WITHOUT_PROGRESS: u32 = 200_000;

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
    /// Every supervised job any core started, in order of start.
    pub jobs: Vec<JobRecord>,
    /// Index into `events` of the first event of the current step.
    pub step_events_from: usize,
    /// Since when no pause, partition, cut, hold or slow link has been in
    /// effect and every message delayed by one has landed; `None` while one
    /// is. See [`World::timely_for`].
    pub timely_since: Option<Instant>,
    /// Whether any of those has happened yet.
    disturbed_ever: bool,
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

    /// Whether `id` is paused.
    pub fn is_paused(&self, id: NodeId) -> bool {
        self.slots.get((id.0 as usize).wrapping_sub(1)).is_some_and(|s| s.paused)
    }

    /// Whether the simulator has kept the network and the nodes timely for
    /// at least `grace`: no pause, partition, cut, hold or slow link in that
    /// time. With delays within `t_msg` (the `NetConfig`), a failure
    /// detector is accurate then, once `grace` covers its reaction to the
    /// last disturbance (e.g. `suspect_after + 2·t_msg`). Crashes do not
    /// count: they do not fool a detector.
    pub fn timely_for(&self, grace: Duration) -> bool {
        self.timely_since.is_some_and(|t| !self.disturbed_ever || self.now >= t + grace)
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

impl SimError {
    /// A failure found outside the simulator's checkers (e.g. a liveness
    /// check after [`Sim::converge`]), without trace lines; [`Sim::error`]
    /// attaches them.
    pub fn new(seed: u64, at: Instant, message: impl Into<String>) -> Self {
        SimError { seed, at, message: message.into(), trace_tail: Vec::new() }
    }

    /// The same error with these trace lines.
    pub fn with_trace(self, trace_tail: Vec<String>) -> Self {
        SimError { trace_tail, ..self }
    }
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The seed of `Sim::new`; `for_seeds` adds the command that
        // reproduces the run (its own seed may map to this one).
        writeln!(f, "simulation with seed {} failed at {}:", self.seed, self.at)?;
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
    /// What arrived for each paused node, in order (node `i` at `i - 1`).
    inbox: Vec<VecDeque<Input<P>>>,
    /// Inputs of resumed nodes still to be handled, before anything else.
    replay: VecDeque<(NodeId, Replay<P>)>,
    /// Running jobs: (node, job id) → (index in `world.jobs`, natural end,
    /// deadline, key of its scheduled `JobEnd`).
    running: BTreeMap<(NodeId, u64), RunningJob>,
}

/// A job the simulator's model runs.
#[derive(Clone, Copy, Debug)]
struct RunningJob {
    record: usize,
    natural_end: Instant,
    deadline: Instant,
    key: (Instant, u64),
}

/// Something a paused node has yet to handle.
enum Input<P: Protocol> {
    Msg(InFlight<P::Msg>),
    /// A client request, client disconnect or leave.
    Local(Action<P>),
}

/// A step of a resumed node's catching up.
enum Replay<P: Protocol> {
    /// Its timers that fell due while it was paused.
    Timers,
    Input(Input<P>),
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
        Self::started(seed, n, net, config, false)
    }

    /// [`Sim::new`] with every node's first life started with
    /// `--new-cluster` (`Context::new_cluster`): a brand-new cluster whose
    /// operator passed the flag. Restarts start without it, as the flag's
    /// contract says.
    pub fn new_cluster(seed: u64, n: u32, net: NetConfig, config: P::Config) -> Self {
        Self::started(seed, n, net, config, true)
    }

    fn started(seed: u64, n: u32, net: NetConfig, config: P::Config, new_cluster: bool) -> Self {
        let mut rng = SeededRng::new(seed);
        let membership = Membership::of_size(n);
        let slots = (1..=n)
            .map(|i| {
                let (id, seed) = (NodeId(i), rng.next_u64());
                let core = start::<P>(&membership, &config, id, Incarnation(1), Instant::ZERO, seed, None, new_cluster);
                Slot { core: Some(core), disk: None, incarnation: Incarnation(1), starts: 1, paused: false }
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
                jobs: Vec::new(),
                step_events_from: 0,
                timely_since: Some(Instant::ZERO),
                disturbed_ever: false,
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
            inbox: (0..n).map(|_| VecDeque::new()).collect(),
            replay: VecDeque::new(),
            running: BTreeMap::new(),
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

    /// Schedules random faults as `plan` says.
    pub fn random_faults(&mut self, plan: &FaultPlan) {
        let n = self.world.slots.len() as u32;
        for (at, action) in plan.generate(&mut self.rng, n) {
            self.at(at, action);
        }
    }

    /// Breaks the link `from -> to` now (one direction): what is sent on it
    /// is dropped, what is in flight on it is lost (a reliable channel's
    /// connection broke; a datagram is dropped).
    pub fn cut(&mut self, from: NodeId, to: NodeId) {
        self.apply(Action::Cut(from, to));
    }

    /// Mends a cut link.
    pub fn uncut(&mut self, from: NodeId, to: NodeId) {
        self.apply(Action::Uncut(from, to));
    }

    /// Holds what arrives on the link `from -> to` from now on, in order,
    /// undelivered, until [`release`](Self::release).
    pub fn hold(&mut self, from: NodeId, to: NodeId) {
        self.apply(Action::Hold(from, to));
    }

    /// Delivers what the link `from -> to` held, in order, as the next steps
    /// at the current time, and stops holding it.
    pub fn release(&mut self, from: NodeId, to: NodeId) {
        self.apply(Action::Release(from, to));
    }

    /// Drops the next `count` messages of kind `kind` (the protocol's
    /// `kind_name`) sent on the link `from -> to`.
    pub fn drop_kind(&mut self, from: NodeId, to: NodeId, kind: &'static str, count: u32) {
        self.apply(Action::DropKind(from, to, kind, count));
    }

    /// Pauses `id` now (see [`Action::Pause`]).
    pub fn pause(&mut self, id: NodeId) {
        self.apply(Action::Pause(id));
    }

    /// Resumes `id`: it catches up in the next steps at the current time
    /// (see [`Action::Resume`]).
    pub fn resume(&mut self, id: NodeId) {
        self.apply(Action::Resume(id));
    }

    /// The liveness phase after a fault schedule: cancels every scheduled
    /// fault (client requests and graceful leaves stay; scheduled client
    /// disconnects go, with the other faults), heals every partition,
    /// mends every cut link, releases every held one, ends slow links and
    /// scripted drops, resumes every paused node, restarts every crashed
    /// one, then runs for `settle`. Checkers keep running throughout; the
    /// caller checks liveness afterwards.
    pub fn converge(&mut self, settle: Duration) -> Result<(), SimError> {
        let now = self.world.now;
        self.schedule.retain(|_, a| !a.is_fault());
        self.begin_step();
        self.log(|| format!("{now} CONVERGE"));
        self.net.restore();
        let n = self.world.slots.len() as u32;
        for id in (1..=n).map(NodeId) {
            self.apply(Action::Resume(id));
        }
        for id in (1..=n).map(NodeId) {
            self.apply(Action::Restart(id));
        }
        self.refresh_timely();
        self.run_checkers()?;
        self.run_for(settle)
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

    /// The cluster as a model check's start ([`model::CoreModel::start`]):
    /// each node's core, disk and life, and every message in flight (a
    /// partition's held or doomed messages too: the model may delay any
    /// message, not drop it). A paused node is taken as it is: the model
    /// fires its overdue timers whenever it likes, and what it had queued
    /// is in flight again, ahead of the rest of its link (its queued client
    /// requests are left out: as if not sent yet).
    pub fn snapshot(&self) -> model::Snapshot<P>
    where
        P: Clone,
    {
        let nodes = self
            .world
            .slots
            .iter()
            .map(|s| model::Node {
                core: s.core.clone(),
                disk: s.disk.clone(),
                inc: s.incarnation,
                life: s.starts,
                hinted: 0,
            })
            .collect();
        let replayed = self.replay.iter().filter_map(|(_, r)| match r {
            Replay::Input(Input::Msg(m)) => Some(m),
            _ => None,
        });
        let queued = self.inbox.iter().flatten().filter_map(|i| match i {
            Input::Msg(m) => Some(m),
            Input::Local(_) => None,
        });
        let in_flight = replayed
            .chain(queued)
            .chain(self.net.in_flight())
            .map(|m| (m.from, m.to, model::Packet { from_inc: m.from_inc, to_life: m.to_life, msg: m.msg.clone() }))
            .collect();
        model::Snapshot { now: self.world.now, nodes, in_flight }
    }

    fn core_mut(&mut self, id: NodeId) -> Option<&mut P> {
        self.world.slots.get_mut((id.0 as usize).wrapping_sub(1)).and_then(|s| s.core.as_mut())
    }

    /// Re-indexes `id`'s next deadline after anything touched its core (a
    /// paused core's timers do not fire).
    fn refresh_deadline(&mut self, id: NodeId) {
        let i = id.0 as usize - 1;
        let slot = &self.world.slots[i];
        let new = slot.core.as_ref().filter(|_| !slot.paused).and_then(|c| c.poll_timeout());
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

    /// Forgets the events and replies recorded so far (long runs keep
    /// memory flat this way). Checkers that keep an index into
    /// `World::events` must not be used with it; those that read only
    /// [`World::step_events`] and the cores are unaffected.
    pub fn forget_history(&mut self) {
        self.world.events.clear();
        self.world.replies.clear();
        self.world.step_events_from = 0;
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

    /// An error at the current time naming this run's seed, with the last
    /// trace lines: `SIM_TRACE_TAIL=n` of them (40), or with
    /// `SIM_TRACE_FROM=<seconds>` the `SIM_TRACE_TAIL` lines (400) from
    /// that virtual time on.
    pub fn error(&self, message: impl Into<String>) -> SimError {
        let env = |k: &str| std::env::var(k).ok();
        let tail: Option<usize> = env("SIM_TRACE_TAIL").and_then(|s| s.parse().ok());
        let lines = match env("SIM_TRACE_FROM").and_then(|s| s.parse::<f64>().ok()) {
            Some(from) => {
                let from = Instant::from_micros((from * 1e6) as u64);
                let at = |l: &String| {
                    let secs = l.split('s').next().and_then(|x| x.parse::<f64>().ok())?;
                    Some(Instant::from_micros((secs * 1e6).round() as u64))
                };
                self.trace
                    .iter()
                    .filter(|l| at(l).is_some_and(|t| t >= from))
                    .take(tail.unwrap_or(400))
                    .cloned()
                    .collect()
            }
            None => self.trace[self.trace.len().saturating_sub(tail.unwrap_or(40))..].to_vec(),
        };
        SimError::new(self.seed, self.world.now, message).with_trace(lines)
    }

    /// Runs until virtual time `end` (or until a checker fails).
    pub fn run_until(&mut self, end: Instant) -> Result<(), SimError> {
        // Steps taken without virtual time moving: a core whose timeout
        // stays due after it was handled would spin here for ever (and
        // fill the trace until memory runs out).
        let mut still = (self.world.now, 0u32);
        while let Some(t) = self.next_time() {
            if t > end {
                break;
            }
            self.step_at(t)?;
            if self.world.now == still.0 {
                still.1 += 1;
                if still.1 >= STEPS_WITHOUT_PROGRESS {
                    return Err(self.error(format!(
                        "no progress: {STEPS_WITHOUT_PROGRESS} steps at {} (a timeout that stays due once handled?)",
                        self.world.now
                    )));
                }
            } else {
                still = (self.world.now, 0);
            }
        }
        self.world.now = self.world.now.max(end);
        Ok(())
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) -> Result<(), SimError> {
        let end = self.world.now + d;
        self.run_until(end)
    }

    /// Steps 0.1 ms at a time until `done` holds, failing with `what` once
    /// virtual time reaches `limit` (a scripted scenario waiting for the
    /// state it acts on).
    pub fn run_until_true(
        &mut self,
        limit: Instant,
        what: &str,
        mut done: impl FnMut(&World<P>) -> bool,
    ) -> Result<(), SimError> {
        while !done(self.world()) {
            if self.now() >= limit {
                return Err(self.error(format!("{what} by {limit}")));
            }
            self.run_for(Duration::from_micros(100))?;
        }
        Ok(())
    }

    fn next_time(&self) -> Option<Instant> {
        if !self.replay.is_empty() {
            return Some(self.world.now);
        }
        let net = self.net.next_delivery(self.world.now);
        let timers = self.deadlines.first().map(|(t, _)| *t);
        let sched = self.schedule.keys().next().map(|(t, _)| *t);
        [net, timers, sched].into_iter().flatten().min()
    }

    /// Takes every step due at time `t`: a resumed node's catching up
    /// first, then scheduled actions, then deliveries, then timers; checkers
    /// run after each.
    fn step_at(&mut self, t: Instant) -> Result<(), SimError> {
        self.world.now = self.world.now.max(t);
        let now = self.world.now;
        if let Some((id, r)) = self.replay.pop_front() {
            self.begin_step();
            self.replay_one(id, r);
            self.refresh_timely();
            return self.run_checkers();
        }
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
        let due: Vec<NodeId> = self
            .world
            .live()
            .filter(|(id, c)| !self.world.is_paused(*id) && c.poll_timeout().is_some_and(|d| d <= now))
            .map(|(id, _)| id)
            .collect();
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
                result = Err(self.error(msg));
                break;
            }
        }
        self.checkers = checkers;
        result
    }

    fn apply(&mut self, action: Action<P>) {
        let now = self.world.now;
        if let Action::JobEnd(id, job, _) = &action {
            // The command ended now, whether or not its node can hear it.
            if let Some(rj) = self.running.remove(&(*id, *job)) {
                self.world.jobs[rj.record].ended = Some(now);
            }
        }
        if let Some(id) = Self::local_target(&action).filter(|id| self.world.is_paused(*id)) {
            self.log(|| {
                let what = match &action {
                    Action::Request(_, client, req) => format!("{client} {req:?}"),
                    Action::ClientGone(_, client) => format!("{client} gone"),
                    Action::JobEnd(_, job, end) => format!("job {job} ended {end:?}"),
                    _ => "shutdown".to_owned(),
                };
                format!("{now} {id} <- queued (paused) {what}")
            });
            self.inbox[id.0 as usize - 1].push_back(Input::Local(action));
            return;
        }
        match action {
            Action::WipeDisk(id) => {
                let slot = &mut self.world.slots[id.0 as usize - 1];
                if slot.core.is_none() {
                    slot.disk = None;
                    self.log(|| format!("{now} {id} WIPE DISK"));
                }
            }
            Action::Kill(id) => {
                let up = self.world.slots[id.0 as usize - 1].core.is_some();
                self.apply(Action::Crash(id));
                if up {
                    for peer in (1..=self.world.slots.len() as u32).map(NodeId).filter(|p| *p != id) {
                        if self.net.open_between(id, peer) {
                            let mut at = now + self.net.draw_delay(&mut self.rng);
                            // The connection's end is read after every frame
                            // sent before it (performance.md, Crash hints).
                            if let Some(last) = self.net.last_due((id, peer)).filter(|l| *l >= at) {
                                at = last + Duration::from_micros(1);
                            }
                            self.at(at, Action::Unreachable(peer, id));
                        }
                    }
                }
            }
            Action::Unreachable(id, peer) => {
                self.log(|| format!("{now} {id} <- {peer} unreachable"));
                if let Some(core) = self.core_mut(id) {
                    core.handle_peer_unreachable(now, peer);
                    self.drain(id);
                }
            }
            Action::Crash(id) => {
                let slot = &mut self.world.slots[id.0 as usize - 1];
                if let Some(core) = slot.core.take() {
                    slot.incarnation = core.incarnation();
                    // A killed process loses what it had not read.
                    slot.paused = false;
                    let lost = self.inbox[id.0 as usize - 1].len();
                    self.inbox[id.0 as usize - 1].clear();
                    self.replay.retain(|(r, _)| *r != id);
                    self.log(|| format!("{now} {id} CRASH"));
                    // The supervisors see their pipes close: every job dies.
                    self.end_jobs_of(id);
                    if lost > 0 {
                        self.log(|| format!("{now} {id} lost {lost} queued inputs"));
                    }
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
                    slot.core = Some(start::<P>(&self.membership, &self.config, id, inc, now, seed, stored, false));
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
            Action::Pause(id) => {
                let i = id.0 as usize - 1;
                if self.world.slots[i].core.is_some() && !self.world.slots[i].paused {
                    self.log(|| format!("{now} {id} PAUSE"));
                    self.world.slots[i].paused = true;
                    // Paused again before it caught up: what it had not
                    // handled goes back in front of its queue.
                    let mut pending: Vec<Input<P>> = Vec::new();
                    let replay = std::mem::take(&mut self.replay);
                    for (r, step) in replay {
                        match step {
                            Replay::Input(input) if r == id => pending.push(input),
                            Replay::Timers if r == id => {}
                            other => self.replay.push_back((r, other)),
                        }
                    }
                    for input in pending.into_iter().rev() {
                        self.inbox[i].push_front(input);
                    }
                    self.refresh_deadline(id);
                }
            }
            Action::Resume(id) => {
                let i = id.0 as usize - 1;
                if self.world.slots[i].paused {
                    let queued = std::mem::take(&mut self.inbox[i]);
                    self.log(|| format!("{now} {id} RESUME ({} queued)", queued.len()));
                    self.world.slots[i].paused = false;
                    self.replay.push_back((id, Replay::Timers));
                    self.replay.extend(queued.into_iter().map(|q| (id, Replay::Input(q))));
                    self.refresh_deadline(id);
                }
            }
            Action::Cut(from, to) => {
                self.log(|| format!("{now} {from}->{to} CUT"));
                self.net.cut((from, to));
            }
            Action::Uncut(from, to) => {
                self.log(|| format!("{now} {from}->{to} UNCUT"));
                self.net.uncut((from, to));
            }
            Action::Hold(from, to) => {
                self.log(|| format!("{now} {from}->{to} HOLD"));
                self.net.hold((from, to));
            }
            Action::Release(from, to) => {
                let n = self.net.release((from, to));
                self.log(|| format!("{now} {from}->{to} RELEASE ({n} held)"));
            }
            Action::DropKind(from, to, kind, count) => {
                self.log(|| format!("{now} {from}->{to} DROP next {count} {kind}"));
                self.net.drop_kind((from, to), kind, count);
            }
            Action::JobEnd(id, job, end) => {
                self.log(|| format!("{now} {id} <- job {job} ended {end:?}"));
                if let Some(core) = self.core_mut(id) {
                    core.handle_job_end(now, job, end);
                    self.drain(id);
                }
            }
            Action::Slow(links, extra) => {
                self.log(|| format!("{now} SLOW +{extra:?} {links:?}"));
                for l in links {
                    self.net.slow(l, extra);
                }
            }
            Action::Unslow(links, extra) => {
                self.log(|| format!("{now} UNSLOW +{extra:?} {links:?}"));
                for l in links {
                    self.net.unslow(l, extra);
                }
            }
        }
        self.refresh_timely();
    }

    /// The node a client-side action is addressed to (queued while paused).
    fn local_target(action: &Action<P>) -> Option<NodeId> {
        match action {
            Action::Request(id, _, _)
            | Action::ClientGone(id, _)
            | Action::Shutdown(id)
            | Action::JobEnd(id, _, _)
            | Action::Unreachable(id, _) => Some(*id),
            _ => None,
        }
    }

    /// One step of a resumed node catching up.
    fn replay_one(&mut self, id: NodeId, step: Replay<P>) {
        let now = self.world.now;
        match step {
            Replay::Timers => {
                let due = self.world.core(id).and_then(|c| c.poll_timeout()).is_some_and(|d| d <= now);
                if due {
                    self.log(|| format!("{now} {id} timeout (overdue)"));
                    if let Some(core) = self.core_mut(id) {
                        core.handle_timeout(now);
                    }
                    self.drain(id);
                }
            }
            Replay::Input(Input::Msg(m)) => {
                self.log(|| format!("{now} {}->{} {} {:?} (queued)", m.from, m.to, m.from_inc, m.msg));
                if let Some(core) = self.core_mut(m.to) {
                    core.handle_message(now, m.from, m.from_inc, m.msg);
                }
                self.drain(id);
            }
            Replay::Input(Input::Local(action)) => self.apply(action),
        }
    }

    /// Recomputes [`World::timely_since`].
    fn refresh_timely(&mut self) {
        let disturbed = self.net.disturbed() || !self.replay.is_empty() || self.world.slots.iter().any(|s| s.paused);
        self.world.disturbed_ever |= disturbed;
        self.world.timely_since = match (disturbed, self.world.timely_since) {
            (true, _) => None,
            (false, Some(t)) => Some(t),
            (false, None) => Some(self.world.now.max(self.net.slow_tail())),
        };
    }

    fn deliver(&mut self, m: InFlight<P::Msg>) {
        let now = self.world.now;
        let slot = &self.world.slots[m.to.0 as usize - 1];
        let life = slot.core.as_ref().map(|_| slot.starts);
        if let Err(why) = self.net.survives(&m, life) {
            self.log(|| format!("{now} {}->{} lost ({why}) {:?}", m.from, m.to, m.msg));
            return;
        }
        if self.world.is_paused(m.to) {
            self.log(|| format!("{now} {}->{} queued (paused) {:?}", m.from, m.to, m.msg));
            self.inbox[m.to.0 as usize - 1].push_back(Input::Msg(m));
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
                    let outcome = self.net.send(&mut self.rng, now, m, kind, to_up);
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
                Output::Job(cmd) => {
                    self.log(|| format!("{now} {id} job {cmd:?}"));
                    self.job(id, cmd);
                }
            }
        }
        self.refresh_deadline(id);
    }

    /// The job model. A job whose argv is `sleep MS` (a program named
    /// `sleep` and a whole number of milliseconds) runs that long; any
    /// other job ends at once, exiting 0 and printing its argv. Its
    /// supervisor kills it at its deadline even while the node is paused
    /// (the end is queued for the node then), and at once on `Kill` or when
    /// the node crashes (the pipe closes).
    fn job(&mut self, id: NodeId, cmd: JobCommand) {
        let now = self.world.now;
        match cmd {
            JobCommand::Start { id: job, argv, fence, deadline, .. } => {
                let natural_end = match argv.as_slice() {
                    [p, ms] if p.rsplit('/').next() == Some("sleep") => {
                        ms.parse::<u64>().map_or(now, |ms| now + Duration::from_millis(ms))
                    }
                    _ => now,
                };
                let record = self.world.jobs.len();
                self.world.jobs.push(JobRecord { node: id, id: job, fence, argv, started: now, ended: None });
                let rj = RunningJob { record, natural_end, deadline, key: (now, 0) };
                self.schedule_job_end(id, job, rj);
            }
            JobCommand::Extend { id: job, deadline } => {
                if let Some(mut rj) = self.running.remove(&(id, job)) {
                    self.schedule.remove(&rj.key);
                    rj.deadline = deadline;
                    self.schedule_job_end(id, job, rj);
                }
            }
            JobCommand::Kill { id: job } => {
                if let Some(rj) = self.running.remove(&(id, job)) {
                    self.schedule.remove(&rj.key);
                    self.world.jobs[rj.record].ended = Some(now);
                    self.at(now, Action::JobEnd(id, job, JobEnd::Killed { deadline: false, stdout: String::new() }));
                }
            }
        }
    }

    /// (Re)schedules the end of a running job: its natural end, or its
    /// deadline if that comes first (at once if both have passed).
    fn schedule_job_end(&mut self, id: NodeId, job: u64, mut rj: RunningJob) {
        let now = self.world.now;
        let (at, end) = if rj.natural_end <= rj.deadline {
            let argv = &self.world.jobs[rj.record].argv;
            let stdout =
                if rj.natural_end > self.world.jobs[rj.record].started { String::new() } else { argv.join(" ") };
            (rj.natural_end, JobEnd::Exited { status: 0, stdout })
        } else {
            (rj.deadline, JobEnd::Killed { deadline: true, stdout: String::new() })
        };
        let at = at.max(now);
        self.schedule_seq += 1;
        rj.key = (at, self.schedule_seq);
        self.schedule.insert(rj.key, Action::JobEnd(id, job, end));
        self.running.insert((id, job), rj);
    }

    /// A crashed node's jobs die with their supervisors' pipes.
    fn end_jobs_of(&mut self, id: NodeId) {
        let now = self.world.now;
        let mine: Vec<(NodeId, u64)> = self.running.range((id, 0)..=(id, u64::MAX)).map(|(k, _)| *k).collect();
        for k in mine {
            if let Some(rj) = self.running.remove(&k) {
                self.schedule.remove(&rj.key);
                self.world.jobs[rj.record].ended = Some(now);
            }
        }
    }
}

/// Builds one simulated core.
#[allow(clippy::too_many_arguments)]
fn start<P: Protocol>(
    membership: &Membership,
    config: &P::Config,
    me: NodeId,
    incarnation: Incarnation,
    now: Instant,
    seed: u64,
    stored: Option<P::Durable>,
    new_cluster: bool,
) -> P {
    let ctx = Context {
        me,
        incarnation,
        membership: membership.clone(),
        now,
        seed,
        config: config.clone(),
        stored,
        new_cluster,
    };
    P::start(ctx).unwrap_or_else(|e| panic!("the simulated core {me} refused its config: {e}"))
}

/// Runs `run(seed)` for seeds `0..count` and panics naming the first that
/// fails, with the command that reproduces it. See [`for_seeds_with`] for
/// the environment variables.
pub fn for_seeds(count: u64, run: impl FnMut(u64) -> Result<(), SimError>) {
    for_seeds_with(&[], count, run);
}

/// Runs `run(seed)` for each pinned regression seed in `regressions`, then
/// for `SIM_SEED_FROM..SIM_SEED_FROM + count`, and panics naming the first
/// seed that fails and the command that reruns exactly that seed (the seed
/// passed to `run`, whatever `run` makes of it).
///
/// - `SIM_SEED=s` runs only `s` (no regression seeds);
/// - `SIM_SEEDS=n` runs `n` seeds instead of `count`;
/// - `SIM_SEED_FROM=k` starts the range at `k` (0), so a long sweep can be
///   sharded across processes: `SIM_SEED_FROM=0 SIM_SEEDS=1000`,
///   `SIM_SEED_FROM=1000 SIM_SEEDS=1000`, …;
/// - `SIM_KEEP_GOING=1` runs every seed and then panics listing every
///   failure (to survey a sweep);
/// - `SIM_TRACE_TAIL` / `SIM_TRACE_FROM` choose the trace lines shown
///   ([`Sim::error`]).
pub fn for_seeds_with(regressions: &[u64], count: u64, run: impl FnMut(u64) -> Result<(), SimError>) {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.trim().parse::<u64>().ok());
    let seeds = SeedPlan {
        only: env("SIM_SEED"),
        count: env("SIM_SEEDS"),
        from: env("SIM_SEED_FROM").unwrap_or(0),
        keep_going: env("SIM_KEEP_GOING").is_some_and(|v| v != 0),
    };
    if let Err(report) = seeds.run(regressions, count, run) {
        panic!("{report}");
    }
}

/// Which seeds [`for_seeds_with`] runs, as the environment chose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct SeedPlan {
    only: Option<u64>,
    count: Option<u64>,
    from: u64,
    keep_going: bool,
}

impl SeedPlan {
    fn seeds(&self, regressions: &[u64], count: u64) -> Vec<u64> {
        if let Some(s) = self.only {
            return vec![s];
        }
        let count = self.count.unwrap_or(count);
        let mut seeds = regressions.to_vec();
        seeds.extend((self.from..self.from.saturating_add(count)).filter(|s| !regressions.contains(s)));
        seeds
    }

    /// Runs the seeds; on failure, the report to panic with.
    fn run(
        &self,
        regressions: &[u64],
        count: u64,
        mut run: impl FnMut(u64) -> Result<(), SimError>,
    ) -> Result<(), String> {
        let mut failed: Vec<(u64, SimError)> = Vec::new();
        for seed in self.seeds(regressions, count) {
            if let Err(e) = run(seed) {
                failed.push((seed, e));
                if !self.keep_going {
                    break;
                }
            }
        }
        let Some((first, e)) = failed.first() else { return Ok(()) };
        let mut report = format!("seed {first} failed; reproduce with:\n  {}\n{e}", rerun_command(*first));
        if failed.len() > 1 {
            let all: Vec<String> =
                failed.iter().map(|(s, e)| format!("  {s}: {}", e.message.lines().next().unwrap_or(""))).collect();
            report.push_str(&format!("{} seeds failed:\n{}\n", failed.len(), all.join("\n")));
        }
        Err(report)
    }
}

/// The command that reruns one seed of the running test: the package from
/// cargo's environment, the test target from the executable's name, the
/// test from the thread libtest runs it on.
fn rerun_command(seed: u64) -> String {
    let pkg = std::env::var("CARGO_PKG_NAME").ok();
    let target = std::env::current_exe().ok().and_then(|p| {
        let stem = p.file_stem()?.to_str()?.to_owned();
        Some(stem.rsplit_once('-').map_or(stem.clone(), |(name, _hash)| name.to_owned()))
    });
    let mut cmd = format!("SIM_SEED={seed} cargo test");
    if let Some(pkg) = &pkg {
        cmd.push_str(&format!(" -p {pkg}"));
        // An integration test target is named apart from the package (a
        // library's unit tests carry the crate's name).
        if let Some(t) = target.filter(|t| *t != pkg.replace('-', "_")) {
            cmd.push_str(&format!(" --test {t}"));
        }
    }
    if let Some(test) = std::thread::current().name().filter(|n| *n != "main") {
        cmd.push_str(&format!(" {test} -- --exact --include-ignored"));
    }
    cmd
}

#[cfg(test)]
mod tests;
