//! Exhaustive, bounded model checking of any [`Protocol`] core with
//! `stateright`.
//!
//! The simulator draws one run per seed; this explores *every* run of N
//! cores within stated bounds, and checks the same safety invariants on
//! each state. The real cores are used as they are (their state is
//! `Clone + Eq + Hash`, time and randomness are injected), with their real
//! message types, so what is checked is what ships.
//!
//! What the model lets happen, in any order:
//!
//! - **delivery** of any link's oldest message (a reliable channel: per-link
//!   FIFO, like TCP) or of any message on it (a datagram channel: UDP
//!   reorders), at any later point: delays beyond every window are included;
//! - **loss** of any datagram, up to a bound (reliable channels lose only
//!   what was on its way to a process that died);
//! - **duplication** of any datagram, up to a bound (a copy joins the link,
//!   to arrive in any order; reliable channels never duplicate);
//! - **timers** firing at or after their deadline: the global clock jumps to
//!   the deadline of the node that fires, so a node whose timer fires late
//!   was paused (a GC pause, SIGSTOP) and any node may be paused for any
//!   time;
//! - **client requests**, each client's script in order, at any point;
//! - **crash** of any node (up to a bound) and its **restart** as a new
//!   life with what it stored, or (up to a bound) with a wiped disk;
//! - the TCP transport's **failure hint** (`handle_peer_unreachable`) about
//!   a crashed peer, at any point after the crash, or never.
//!
//! Bounds: the clock's horizon, the number of crashes, wipes, losses and
//! duplicates,
//! the messages in flight on a link, and the clients' scripts. Time moves
//! only to a node's deadline (not to the instants in between), there is one
//! clock (drift is not modelled: the `(1±ρ)` arithmetic is unit-tested in
//! `timer` and `lockservice`), and each core's seed is its node id.
//!
//! A judge sees every event with its time and node (one clock, as the
//! clients would record it) and names a broken invariant; the model's
//! properties are "the judge never objected" and "the judge saw at least
//! `goal` units of progress" (so a check that explored nothing useful
//! fails).
//!
//! Shape after stateright's own actor models, with the core in place of the
//! actor.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use ftcore::{ClientId, Context, Incarnation, NodeId, Output, Protocol};
use membership::Membership;
pub use stateright::{Checker, HasDiscoveries, Model, Property};
use timer::Instant;

pub use crate::net::Channel;

/// What a judge sees: an event of a core, or its reply to a client.
#[derive(Debug)]
pub enum Seen<'a, E, R> {
    /// The core reported this.
    Event(&'a E),
    /// The core answered this client.
    Reply(ClientId, &'a R),
}

/// How a judge `J` hears what `node` did at `t`; an error names the broken
/// invariant. (A plain function, so the judge's state stays `Eq + Hash`
/// and any crate's event type can feed it.)
pub type JudgeFn<J, E, R> = fn(&mut J, Instant, NodeId, Seen<'_, E, R>) -> Result<(), String>;

/// A judge's initial state, how it hears, and how its progress is read.
pub type JudgeOf<P, J> = (J, JudgeFn<J, <P as Protocol>::Event, <P as Protocol>::Reply>, fn(&J) -> u32);

/// One client: the node it talks to, its id, and what it sends, in order.
#[derive(Clone, Debug)]
pub struct ClientScript<R> {
    /// The node the client is connected to.
    pub node: NodeId,
    /// The client's id at that node.
    pub client: ClientId,
    /// Its requests, in order, each at any point while its node is up and
    /// (if `wait`) once the one before was answered.
    pub requests: Vec<R>,
    /// Send the next request only after a reply to the last one (an
    /// unasked reply, like `LockLost`, counts).
    pub wait: bool,
}

/// The bounds of one check.
#[derive(Clone, Debug)]
pub struct Bounds {
    /// No timer fires after this much model time from the start.
    pub horizon: Duration,
    /// Crashes in all (a crashed node may restart).
    pub crashes: u8,
    /// Restarts with a wiped disk, within the crashes.
    pub wipes: u8,
    /// Datagrams lost in all (datagram channels only).
    pub losses: u8,
    /// Datagrams duplicated in all (datagram channels only).
    pub dups: u8,
    /// Deliver the failure hint after a crash (reliable channels only).
    pub hints: bool,
    /// A state with more messages than this on one link is not explored.
    pub in_flight: usize,
    /// Steps from the start (`None`: as many as the other bounds allow).
    pub depth: Option<usize>,
}

impl Bounds {
    /// `depth` steps within `horizon`, with one crash (its restart with
    /// the disk kept or wiped), the failure hint, no loss or duplication,
    /// six messages in flight per link.
    pub fn near(horizon: Duration, depth: usize) -> Self {
        Bounds { horizon, crashes: 1, wipes: 1, losses: 0, dups: 0, hints: true, in_flight: 6, depth: Some(depth) }
    }
}

/// One client per node (`client(i)` at node i), each sending `requests`
/// without waiting for replies.
pub fn client_per_node<R: Clone>(n: u32, client: impl Fn(u32) -> ClientId, requests: &[R]) -> Vec<ClientScript<R>> {
    (1..=n)
        .map(|i| ClientScript { node: NodeId(i), client: client(i), requests: requests.to_vec(), wait: false })
        .collect()
}

/// A message on a link.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Packet<M> {
    /// The sender's life when it sent it.
    pub from_inc: Incarnation,
    /// The receiver's life it was sent to (a new life never reads it).
    pub to_life: u32,
    /// The message.
    pub msg: M,
}

/// One node: its core while it runs, and its disk.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node<C, D> {
    /// The running core; `None` while crashed.
    pub core: Option<C>,
    /// What it stored last.
    pub disk: Option<D>,
    /// Its latest life.
    pub inc: Incarnation,
    /// Lives started so far.
    pub life: u32,
    /// Peers already told (by the hint) that this life ended.
    pub hinted: u64,
}

/// Where a check starts: the nodes at `now` and what is in flight
/// ([`Sim::snapshot`](crate::Sim::snapshot) takes one at any point of a
/// simulated run, so checks can begin deep inside a faulty run).
#[derive(Clone, Debug)]
pub struct Snapshot<P: Protocol> {
    /// The clock.
    pub now: Instant,
    /// Nodes 1..=N.
    pub nodes: Vec<Node<P, P::Durable>>,
    /// Messages in flight (from, to, packet), each link's in send order.
    pub in_flight: Vec<(NodeId, NodeId, Packet<P::Msg>)>,
}

/// A state of the whole cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State<C, D, M, J> {
    /// The one clock.
    pub now: Instant,
    /// Nodes 1..=N at 0..N.
    pub nodes: Vec<Node<C, D>>,
    /// The link from i to j at `(i-1)·N + (j-1)`.
    pub links: Vec<VecDeque<Packet<M>>>,
    /// Per client: how many of its requests were sent.
    pub sent: Vec<usize>,
    /// Per client: whether it waits for a reply.
    pub waiting: Vec<bool>,
    /// Faults used so far.
    pub crashes: u8,
    /// Wiped restarts so far.
    pub wipes: u8,
    /// Datagrams lost so far.
    pub losses: u8,
    /// Datagrams duplicated so far.
    pub dups: u8,
    /// The judge.
    pub judge: J,
    /// The first invariant the judge found broken.
    pub broken: Option<String>,
}

/// The state type of [`CoreModel<P, J>`].
pub type StateOf<P, J> = State<P, <P as Protocol>::Durable, <P as Protocol>::Msg, J>;

/// What can happen next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// The message at `index` on the link `from → to` arrives.
    Deliver { from: NodeId, to: NodeId, index: usize },
    /// The message at `index` on the link `from → to` is lost.
    Lose { from: NodeId, to: NodeId, index: usize },
    /// The message at `index` on the link `from → to` is duplicated.
    Duplicate { from: NodeId, to: NodeId, index: usize },
    /// The node's earliest timer fires (the clock moves to it if later).
    Fire(NodeId),
    /// The client (index into the scripts) sends its next request.
    Request(usize),
    /// The node's process dies.
    Crash(NodeId),
    /// The node starts a new life, with its disk or (`wiped`) without.
    Restart { node: NodeId, wiped: bool },
    /// `to` hears that `gone`'s process died.
    Hint { to: NodeId, gone: NodeId },
}

/// N copies of core `P`, judged by `J`.
#[derive(Clone, Debug)]
pub struct CoreModel<P: Protocol, J> {
    /// Nodes 1..=n.
    pub n: u32,
    /// Every core's settings.
    pub config: P::Config,
    /// The transport's kind.
    pub channel: Channel,
    /// How far the search goes.
    pub bounds: Bounds,
    /// The start: `None` for N new nodes at time zero (start-up included).
    pub start: Option<Snapshot<P>>,
    /// The clients.
    pub clients: Vec<ClientScript<P::Request>>,
    /// The judge of the initial state (grants, fences, leases so far).
    pub judge: J,
    /// Feeds an event to the judge.
    pub on_event: JudgeFn<J, P::Event, P::Reply>,
    /// Units of useful work the judge has seen (grants, increments).
    pub progress: fn(&J) -> u32,
    /// The progress some run must reach (a `sometimes` property), so a
    /// check that explored nothing useful fails.
    pub goal: u32,
}

/// The property that holds while the judge has not objected.
pub const SAFE: &str = "the judge finds no invariant broken";
/// The property that some run reaches the goal.
pub const PROGRESS: &str = "some run reaches the progress goal";

impl<P, J> CoreModel<P, J>
where
    P: Protocol + Clone + Debug + Eq + Hash + Send + Sync + 'static,
    P::Msg: Eq + Hash + Sync,
    P::Durable: Eq + Hash + Sync,
    P::Config: Sync,
    P::Request: Sync,
    J: Clone + Debug + Eq + Hash + Send + Sync + 'static,
{
    /// `n` nodes with `config` on `channel`, judged by `judge` (fed by
    /// `on_event`, progress counted by `progress`); no clients, and the
    /// goal of one unit of progress. Starts come from
    /// [`check_run`](Self::check_run) or [`check_from`](Self::check_from).
    pub fn new(
        n: u32,
        config: P::Config,
        channel: Channel,
        bounds: Bounds,
        (judge, on_event, progress): JudgeOf<P, J>,
    ) -> Self {
        CoreModel { n, config, channel, bounds, start: None, clients: Vec::new(), judge, on_event, progress, goal: 1 }
    }

    /// With these clients.
    pub fn with_clients(self, clients: Vec<ClientScript<P::Request>>) -> Self {
        CoreModel { clients, ..self }
    }

    fn start_core(&self, me: NodeId, inc: Incarnation, now: Instant, stored: Option<P::Durable>) -> P {
        let membership = Membership::of_size(self.n);
        let mut ctx = Context::new(me, inc, membership, now, self.config.clone());
        ctx.seed = u64::from(me.0);
        ctx.stored = stored;
        P::start(ctx).unwrap_or_else(|e| panic!("the model's core {me} refused its config: {e}"))
    }

    fn link(&self, from: NodeId, to: NodeId) -> usize {
        (from.0 as usize - 1) * self.n as usize + (to.0 as usize - 1)
    }

    fn horizon(&self) -> Instant {
        self.start.as_ref().map_or(Instant::ZERO, |s| s.now) + self.bounds.horizon
    }

    /// Runs `node`'s outputs: sends, stores, events for the judge.
    fn drain(&self, s: &mut StateOf<P, J>, id: NodeId) {
        let i = id.0 as usize - 1;
        loop {
            let Some(core) = s.nodes[i].core.as_mut() else { return };
            let Some(out) = core.poll_output() else { return };
            let inc = core.incarnation();
            match out {
                Output::Send { to, msg } => {
                    let Some(dest) = s.nodes.get((to.0 as usize).wrapping_sub(1)) else { continue };
                    // A message to a dead process is refused (TCP) or lost (UDP).
                    if dest.core.is_some() && to != id {
                        let to_life = dest.life;
                        let l = self.link(id, to);
                        s.links[l].push_back(Packet { from_inc: inc, to_life, msg });
                    }
                }
                Output::Event(e) => self.judge(s, id, Seen::Event(&e)),
                Output::Persist(d) => s.nodes[i].disk = Some(d),
                Output::Reply { client, reply } => {
                    self.judge(s, id, Seen::Reply(client, &reply));
                    for (c, script) in self.clients.iter().enumerate() {
                        if script.node == id && script.client == client {
                            s.waiting[c] = false;
                        }
                    }
                }
                Output::Job(_) => {}
            }
        }
    }

    fn judge(&self, s: &mut StateOf<P, J>, id: NodeId, seen: Seen<'_, P::Event, P::Reply>) {
        if s.broken.is_none() {
            if let Err(why) = (self.on_event)(&mut s.judge, s.now, id, seen) {
                s.broken = Some(why);
            }
        }
    }
}

impl<P, J> Model for CoreModel<P, J>
where
    P: Protocol + Clone + Debug + Eq + Hash + Send + Sync + 'static,
    P::Msg: Eq + Hash + Sync,
    P::Durable: Eq + Hash + Sync,
    P::Config: Sync,
    P::Request: Sync,
    J: Clone + Debug + Eq + Hash + Send + Sync + 'static,
{
    type State = StateOf<P, J>;
    type Action = Step;

    fn init_states(&self) -> Vec<Self::State> {
        let n = self.n as usize;
        let (now, nodes) = match &self.start {
            Some(snap) => (snap.now, snap.nodes.clone()),
            None => (
                Instant::ZERO,
                (1..=self.n)
                    .map(|id| Node {
                        core: Some(self.start_core(NodeId(id), Incarnation(1), Instant::ZERO, None)),
                        disk: None,
                        inc: Incarnation(1),
                        life: 1,
                        hinted: 0,
                    })
                    .collect(),
            ),
        };
        let mut s = State {
            now,
            nodes,
            links: vec![VecDeque::new(); n * n],
            sent: vec![0; self.clients.len()],
            waiting: vec![false; self.clients.len()],
            crashes: 0,
            wipes: 0,
            losses: 0,
            dups: 0,
            judge: self.judge.clone(),
            broken: None,
        };
        for (from, to, p) in self.start.iter().flat_map(|snap| snap.in_flight.iter()) {
            let l = self.link(*from, *to);
            s.links[l].push_back(p.clone());
        }
        for id in 1..=self.n {
            self.drain(&mut s, NodeId(id));
        }
        vec![s]
    }

    fn actions(&self, s: &Self::State, out: &mut Vec<Step>) {
        if s.broken.is_some() {
            return;
        }
        let ids = || (1..=self.n).map(NodeId);
        for from in ids() {
            for to in ids() {
                let link = &s.links[self.link(from, to)];
                let up = s.nodes[to.0 as usize - 1].core.is_some();
                match self.channel {
                    Channel::Reliable => {
                        if up && !link.is_empty() {
                            out.push(Step::Deliver { from, to, index: 0 });
                        }
                    }
                    Channel::Datagram => {
                        for (index, p) in link.iter().enumerate() {
                            // Equal datagrams lead to equal states: try one.
                            if link.iter().take(index).any(|q| q == p) {
                                continue;
                            }
                            if up {
                                out.push(Step::Deliver { from, to, index });
                            }
                            if s.losses < self.bounds.losses {
                                out.push(Step::Lose { from, to, index });
                            }
                            if s.dups < self.bounds.dups && link.len() < self.bounds.in_flight {
                                out.push(Step::Duplicate { from, to, index });
                            }
                        }
                    }
                }
            }
        }
        for id in ids() {
            let node = &s.nodes[id.0 as usize - 1];
            match &node.core {
                Some(core) => {
                    if core.poll_timeout().is_some_and(|t| t <= self.horizon()) {
                        out.push(Step::Fire(id));
                    }
                    if s.crashes < self.bounds.crashes {
                        out.push(Step::Crash(id));
                    }
                }
                None => {
                    out.push(Step::Restart { node: id, wiped: false });
                    if s.wipes < self.bounds.wipes {
                        out.push(Step::Restart { node: id, wiped: true });
                    }
                    if self.bounds.hints && self.channel == Channel::Reliable {
                        for to in ids().filter(|p| *p != id) {
                            let told = node.hinted & (1 << to.0) != 0;
                            if !told && s.nodes[to.0 as usize - 1].core.is_some() {
                                out.push(Step::Hint { to, gone: id });
                            }
                        }
                    }
                }
            }
        }
        for (c, script) in self.clients.iter().enumerate() {
            let up = s.nodes[script.node.0 as usize - 1].core.is_some();
            if up && !s.waiting[c] && s.sent[c] < script.requests.len() {
                out.push(Step::Request(c));
            }
        }
    }

    fn next_state(&self, last: &Self::State, step: Step) -> Option<Self::State> {
        let mut s = last.clone();
        match step {
            Step::Deliver { from, to, index } => {
                let l = self.link(from, to);
                let p = s.links[l].remove(index)?;
                let node = &mut s.nodes[to.0 as usize - 1];
                if node.life == p.to_life {
                    node.core.as_mut()?.handle_message(s.now, from, p.from_inc, p.msg);
                    self.drain(&mut s, to);
                }
            }
            Step::Lose { from, to, index } => {
                let l = self.link(from, to);
                s.links[l].remove(index)?;
                s.losses += 1;
            }
            Step::Duplicate { from, to, index } => {
                let l = self.link(from, to);
                let copy = s.links[l].get(index)?.clone();
                s.links[l].push_back(copy);
                s.dups += 1;
            }
            Step::Fire(id) => {
                let core = s.nodes[id.0 as usize - 1].core.as_mut()?;
                s.now = s.now.max(core.poll_timeout()?);
                core.handle_timeout(s.now);
                self.drain(&mut s, id);
            }
            Step::Request(c) => {
                let script = &self.clients[c];
                let req = script.requests.get(s.sent[c])?.clone();
                s.sent[c] += 1;
                s.waiting[c] = script.wait;
                s.nodes[script.node.0 as usize - 1].core.as_mut()?.handle_request(s.now, script.client, req);
                self.drain(&mut s, script.node);
            }
            Step::Crash(id) => {
                let node = &mut s.nodes[id.0 as usize - 1];
                node.core.take()?;
                node.hinted = 0;
                s.crashes += 1;
                // What was on its way to the dead process is gone with it.
                for from in 1..=self.n {
                    let l = self.link(NodeId(from), id);
                    s.links[l].clear();
                }
            }
            Step::Restart { node: id, wiped } => {
                let node = &s.nodes[id.0 as usize - 1];
                if node.core.is_some() {
                    return None;
                }
                // Real daemons store a life above every earlier one.
                let inc = Incarnation(node.inc.0 + 1_000);
                let stored = if wiped { None } else { node.disk.clone() };
                let core = self.start_core(id, inc, s.now, stored);
                let node = &mut s.nodes[id.0 as usize - 1];
                node.core = Some(core);
                node.inc = inc;
                node.life += 1;
                if wiped {
                    node.disk = None;
                    s.wipes += 1;
                }
                self.drain(&mut s, id);
            }
            Step::Hint { to, gone } => {
                s.nodes[gone.0 as usize - 1].hinted |= 1 << to.0;
                s.nodes[to.0 as usize - 1].core.as_mut()?.handle_peer_unreachable(s.now, gone);
                self.drain(&mut s, to);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(SAFE, |_, s: &Self::State| s.broken.is_none()),
            Property::sometimes(PROGRESS, |m: &Self, s: &Self::State| (m.progress)(&s.judge) >= m.goal),
        ]
    }

    fn within_boundary(&self, s: &Self::State) -> bool {
        s.links.iter().all(|l| l.len() <= self.bounds.in_flight)
    }
}

/// Snapshots of a simulated run, one every `every` up to `until`, each
/// with a judge that has seen every event and reply before it (the events
/// of each stretch first, then its replies).
pub fn snapshots<P, J>(
    sim: &mut crate::Sim<P>,
    every: Duration,
    until: Instant,
    mut judge: J,
    on_event: JudgeFn<J, P::Event, P::Reply>,
) -> Result<Vec<(Snapshot<P>, J)>, crate::SimError>
where
    P: Protocol + Clone,
    J: Clone,
{
    let mut out = Vec::new();
    let (mut events, mut replies) = (0, 0);
    while sim.now() + every <= until {
        sim.run_until(sim.now() + every)?;
        let w = sim.world();
        let seen = w.events[events..].iter().map(|(t, node, e)| (*t, *node, Seen::Event(e)));
        let answered = w.replies[replies..].iter().map(|(t, node, c, r)| (*t, *node, Seen::Reply(*c, r)));
        for (t, node, what) in seen.chain(answered) {
            on_event(&mut judge, t, node, what).map_err(|why| sim.error(why))?;
        }
        (events, replies) = (w.events.len(), w.replies.len());
        out.push((sim.snapshot(), judge.clone()));
    }
    Ok(out)
}

/// What checks from many starts found.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Starts checked.
    pub starts: usize,
    /// Unique states explored, summed over the starts.
    pub states: usize,
    /// States generated (before de-duplication), summed.
    pub generated: usize,
    /// The deepest path from any start.
    pub max_depth: usize,
    /// Starts from which some run made progress (see [`CoreModel::goal`]).
    pub progressed: usize,
    /// Every broken invariant found: the start's time, the judge's words
    /// and the steps from the start.
    pub broken: Vec<String>,
}

impl Summary {
    /// Prints the summary under `name`; panics if an invariant broke or no
    /// start made progress (a check that explored nothing useful).
    pub fn assert_safe(&self, name: &str) {
        eprintln!("{name}: {self}");
        assert!(self.broken.is_empty(), "{name}: {}", self.broken.join("\n"));
        assert!(self.progressed > 0, "{name}: no start made progress: the check explored nothing useful");
    }
}

/// A model check's setting from the environment (`MODEL_SEEDS`, …), or
/// `default` when unset or not a number.
pub fn setting(key: &str, default: u64) -> u64 {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} starts, {} unique states ({} generated), max depth {}, progress from {} starts, {} broken",
            self.starts,
            self.states,
            self.generated,
            self.max_depth,
            self.progressed,
            self.broken.len()
        )
    }
}

impl<P, J> CoreModel<P, J>
where
    P: Protocol + Clone + Debug + Eq + Hash + Send + Sync + 'static,
    P::Msg: Eq + Hash + Sync,
    P::Durable: Eq + Hash + Sync,
    P::Config: Sync,
    P::Request: Sync,
    J: Clone + Debug + Eq + Hash + Send + Sync + 'static,
{
    /// Checks every run within the bounds from each start (`self` gives
    /// the settings; each start brings its snapshot and judge, and the goal
    /// is one unit of progress more than its judge has seen). Stops at the
    /// first start where an invariant breaks.
    pub fn check_from(&self, starts: Vec<(Snapshot<P>, J)>) -> Summary {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut sum = Summary::default();
        for (snap, judge) in starts {
            let at = snap.now;
            let mut model = self.clone();
            // A start may have more in flight on a link (a slow link's
            // backlog) than the bound: it only must not grow beyond that.
            let backlog = (1..=self.n)
                .flat_map(|a| (1..=self.n).map(move |b| (NodeId(a), NodeId(b))))
                .map(|(a, b)| snap.in_flight.iter().filter(|(f, t, _)| (*f, *t) == (a, b)).count())
                .max()
                .unwrap_or(0);
            model.bounds.in_flight = model.bounds.in_flight.max(backlog);
            model.goal = (model.progress)(&judge) + 1;
            model.start = Some(snap);
            model.judge = judge;
            let depth = model.bounds.depth;
            let mut checker = model.checker().threads(threads);
            if let Some(depth) = depth {
                checker = checker.target_max_depth(depth);
            }
            let checker = checker.spawn_bfs().join();
            sum.starts += 1;
            sum.states += checker.unique_state_count();
            sum.generated += checker.state_count();
            sum.max_depth = sum.max_depth.max(checker.max_depth());
            if checker.discovery(PROGRESS).is_some() {
                sum.progressed += 1;
            }
            if let Some(path) = checker.discovery(SAFE) {
                let why = path.last_state().broken.clone().unwrap_or_default();
                sum.broken.push(format!("from {at}: {why}\nsteps: {:?}", path.into_actions()));
                return sum;
            }
        }
        sum
    }

    /// Runs `sim` to `until`, snapshots it every `every` (judged by this
    /// model's judge from the run's start), and checks from each snapshot
    /// taken at or after `from`.
    pub fn check_run(
        &self,
        sim: &mut crate::Sim<P>,
        every: Duration,
        (from, until): (Instant, Instant),
    ) -> Result<Summary, crate::SimError> {
        let mut starts = snapshots(sim, every, until, self.judge.clone(), self.on_event)?;
        starts.retain(|(s, _)| s.now >= from);
        Ok(self.check_from(starts))
    }
}
