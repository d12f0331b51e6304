//! The one interface between a protocol and whatever runs it.
//!
//! Every ftcoord protocol core implements [`Protocol`]: a sans-IO state
//! machine that is fed peer messages, client requests and the passage of
//! time, and answers with [`Output`]s (messages to send, replies to clients,
//! events for metrics and checkers). Two drivers run the same cores: the
//! tokio daemon runtime (`runtime`) and the deterministic simulator (`sim`).
//!
//! Cores never read a clock, a socket or a global random number generator:
//! time arrives as `now`, randomness as a seed at construction
//! ([`timer::SeededRng`]). Their state is plain data, so they can derive
//! `Clone, Debug, PartialEq, Eq, Hash` and be model-checked later.
//!
//! May depend on: `membership`, `timer` (and serde). Used by every other
//! ftcoord crate; depends on no daemon, no runtime, no I/O.
#![forbid(unsafe_code)]

use std::fmt::Debug;

pub mod idle;
pub mod rules;

pub use membership::{Incarnation, NodeId};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
pub use timer::Instant;

/// A message type that can cross the wire: serde, plus a small stable
/// number per variant (carried in the frame header, so frames can be
/// counted and rejected by kind before the payload is decoded).
pub trait Message: Serialize + DeserializeOwned + Clone + Debug + Send + 'static {
    /// The kind number of this value (its variant).
    fn kind(&self) -> u16;
    /// The metric label of a kind number; `None` for a kind this type does
    /// not have (such a frame is rejected as `unknown_kind`).
    fn kind_name(kind: u16) -> Option<&'static str>;
}

/// Declares a `Message` impl for a plain enum: `message_kinds!(Msg { A => "a", B => "b" })`
/// numbers the variants 0, 1, … in the order listed and names them.
///
/// The list must name every variant: `kind()` is an exhaustive `match`, so a
/// forgotten variant is a compile error (a peer could otherwise send a
/// payload whose kind the daemon cannot number):
///
/// ```compile_fail,E0004
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// enum M { A, B(u8) }
/// ftcore::message_kinds!(M { A => "a" }); // B is missing: error[E0004]
/// ```
///
/// ```
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// enum M { A, B(u8), C { x: u8 } }
/// ftcore::message_kinds!(M { A => "a", B => "b", C => "c" });
/// use ftcore::Message;
/// assert_eq!(M::C { x: 1 }.kind(), 2);
/// ```
#[macro_export]
macro_rules! message_kinds {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $crate::Message for $ty {
            fn kind(&self) -> u16 {
                // A local enum with the same variant names numbers them in
                // the listed order; the match below is exhaustive.
                #[allow(non_camel_case_types, dead_code, clippy::enum_variant_names)]
                enum Kind { $($variant),+ }
                match self {
                    $($ty::$variant { .. } => Kind::$variant as u16,)+
                }
            }
            fn kind_name(kind: u16) -> Option<&'static str> {
                const NAMES: &[&str] = &[$($name),+];
                NAMES.get(usize::from(kind)).copied()
            }
        }
    };
}

/// A local client of a daemon, as numbered by the driver (one per client
/// connection; never reused within a process's life).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientId(pub u64);

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// What a core asks its driver to do: the one output vocabulary of every
/// core and sub-component (an [`Outbox`] holds these, in order).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Output<M, R, E, D = ()> {
    /// Send `msg` to peer `to`. Delivery is the transport's business: TCP
    /// cores treat a peer that stops answering as failed, UDP cores expect
    /// loss.
    Send {
        /// Destination peer.
        to: NodeId,
        /// The message.
        msg: M,
    },
    /// Answer a local client.
    Reply {
        /// Which client.
        client: ClientId,
        /// The answer.
        reply: R,
    },
    /// Something happened that metrics, logs or invariant checkers care
    /// about (a grant, a recovery, a suspicion). Never needed for the
    /// protocol to work.
    Event(E),
    /// Store this durable state (atomically, fsynced) before executing any
    /// output queued after it: what a node promises, acks or uses is on
    /// disk before anyone hears of it (foundation.md, Durable state).
    Persist(D),
    /// Start, extend or kill a command the driver runs for the core under a
    /// supervisor (ringd's command services); its end comes back through
    /// [`Protocol::handle_job_end`].
    Job(JobCommand),
}

/// What a core asks its driver to do with a supervised command.
///
/// A job runs under a supervisor process that kills its process group at
/// the deadline (a monotonic instant, on the core's clock) without the
/// daemon's help, so a paused or killed daemon leaves nothing running past
/// it. The driver (and the simulator) report every job's end exactly once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum JobCommand {
    /// Run `argv` (no shell) with `FTCOORD_FENCE=fence` if given, until
    /// `deadline`.
    Start {
        /// Chosen by the core, unique in this life.
        id: u64,
        /// Program and arguments.
        argv: Vec<String>,
        /// The fence it runs under, if any (interfaces.md: one u128).
        fence: Option<u128>,
        /// Killed at this instant unless extended.
        deadline: Instant,
        /// At most this much of its stdout is kept.
        max_output: usize,
    },
    /// Move the deadline of job `id`.
    Extend {
        /// The job.
        id: u64,
        /// Its new deadline.
        deadline: Instant,
    },
    /// Kill job `id` now.
    Kill {
        /// The job.
        id: u64,
    },
}

/// How a supervised job ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum JobEnd {
    /// It exited with `status`.
    Exited {
        /// Exit status.
        status: i32,
        /// Its stdout (bounded).
        stdout: String,
    },
    /// A signal from elsewhere ended it.
    Signalled {
        /// The signal.
        signal: i32,
        /// Its stdout (bounded).
        stdout: String,
    },
    /// Killed: at its deadline (`deadline`), or on request / because the
    /// daemon's pipe closed.
    Killed {
        /// True at the deadline.
        deadline: bool,
        /// Its stdout so far (bounded).
        stdout: String,
    },
    /// It could not be started (or its supervisor failed).
    Failed(String),
}

/// The outputs of protocol `P`.
pub type OutputOf<P> =
    Output<<P as Protocol>::Msg, <P as Protocol>::Reply, <P as Protocol>::Event, <P as Protocol>::Durable>;

/// The output buffer of protocol `P`.
pub type OutboxOf<P> =
    Outbox<<P as Protocol>::Msg, <P as Protocol>::Reply, <P as Protocol>::Event, <P as Protocol>::Durable>;

/// Everything a core is built from, the same in the daemon and in the
/// simulator.
#[derive(Clone, Debug)]
pub struct Context<C, D> {
    /// This node.
    pub me: NodeId,
    /// This life (stored before the node speaks; always above any earlier
    /// life of the node).
    pub incarnation: Incarnation,
    /// The configured members in ring order.
    pub membership: membership::Membership,
    /// The core's clock reading at start.
    pub now: Instant,
    /// Seed for the core's own random draws.
    pub seed: u64,
    /// The protocol's settings.
    pub config: C,
    /// The durable state of the previous life; `None` for a fresh node (no
    /// state file: a new disk).
    pub stored: Option<D>,
    /// Started with `--new-cluster` (a cluster's first start only).
    pub new_cluster: bool,
}

impl<C, D> Context<C, D> {
    /// Node `me` of `membership` in life `incarnation`, starting at `now`
    /// with `config`: seed 0, nothing stored, not a new cluster (set the
    /// public fields for anything else).
    pub fn new(
        me: NodeId,
        incarnation: Incarnation,
        membership: membership::Membership,
        now: Instant,
        config: C,
    ) -> Self {
        Context { me, incarnation, membership, now, seed: 0, config, stored: None, new_cluster: false }
    }
}

/// The status every daemon reports to `ftctl status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Which daemon (`ringd`, `ntmutexd`, …).
    pub daemon: String,
    /// This node.
    pub node: NodeId,
    /// Its current life.
    pub incarnation: Incarnation,
    /// Protocol role in a word (holder, coordinator, relay, …).
    pub role: String,
    /// Every configured peer and whether this node believes it up (filled
    /// in by [`status_of`] from the membership and
    /// [`Protocol::peer_view`]; cores leave it empty).
    pub peers: Vec<PeerStatus>,
    /// Protocol-specific facts as `key = value` lines, in display order.
    pub details: Vec<(String, String)>,
}

/// One peer as seen from a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerStatus {
    /// The peer.
    pub id: NodeId,
    /// Its configured address.
    pub addr: String,
    /// Whether it is believed up.
    pub up: bool,
    /// The life it is known in (0: never heard from).
    pub incarnation: Incarnation,
}

/// How a node sees one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerView {
    /// Whether it is believed up (not suspected).
    pub up: bool,
    /// The life it is known in (0: never heard from).
    pub incarnation: Incarnation,
}

/// The full status report of `core`: its own [`Protocol::status`] with the
/// peer list built from the configured `membership` (every member but the
/// node itself, in ring order) and [`Protocol::peer_view`].
pub fn status_of<P: Protocol>(core: &P, membership: &membership::Membership) -> StatusReport {
    let mut report = core.status();
    report.peers = membership
        .members()
        .iter()
        .filter(|m| m.id != report.node)
        .map(|m| {
            let v = core.peer_view(m.id);
            PeerStatus { id: m.id, addr: m.addr.to_string(), up: v.up, incarnation: v.incarnation }
        })
        .collect();
    report
}

/// What a handler asks of the step that follows it
/// ([`Protocol::after_input`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum Then {
    /// Run the after-input step: the input may have changed what the core
    /// must serve, send or store.
    AfterInput,
    /// Skip it: the input changed nothing the step looks at (refused
    /// before it touched any state, or a handler that does its own).
    Done,
}

/// A sans-IO protocol core.
///
/// The driver calls the `handle_*` methods with the current time (each
/// runs the core's `on_*` handler, then its after-input step if the handler
/// asks: [`Then`]), then
/// drains [`poll_output`](Protocol::poll_output) until it returns `None`,
/// and wakes the core at [`poll_timeout`](Protocol::poll_timeout) by
/// calling [`handle_timeout`](Protocol::handle_timeout). A timer may fire
/// late or at any moment after its deadline; cores must tolerate it.
pub trait Protocol {
    /// Peer-to-peer messages.
    type Msg: Message;
    /// Requests from local clients.
    type Request: Message;
    /// Replies to local clients.
    type Reply: Message;
    /// Observable events (for metrics and invariant checkers).
    type Event: Clone + Debug + Send + 'static;
    /// The protocol's settings (validated by [`start`](Protocol::start)).
    type Config: Clone + Debug + Send + 'static;
    /// What the node keeps on disk across lives (`()` when nothing).
    type Durable: Serialize + DeserializeOwned + Clone + Debug + PartialEq + Send + 'static;
    /// Why a core cannot start (a bad config).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Builds the core; every validation of its config happens here, once.
    fn start(ctx: Context<Self::Config, Self::Durable>) -> Result<Self, Self::Error>
    where
        Self: Sized;

    /// A message from peer `from` in life `inc` (the envelope's sender
    /// fields, authenticated when a cluster key is configured).
    fn on_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: Self::Msg) -> Then;

    /// A request from a local client.
    fn on_request(&mut self, now: Instant, client: ClientId, req: Self::Request) -> Then;

    /// A local client went away (its connection closed). Whatever it held
    /// or waited for is released.
    fn on_client_gone(&mut self, now: Instant, client: ClientId) -> Then;

    /// A job started by [`Output::Job`] ended (exactly once per job). Cores
    /// that run no jobs keep the default, which ignores it.
    fn on_job_end(&mut self, now: Instant, id: u64, end: JobEnd) -> Then {
        let _ = (now, id, end);
        Then::Done
    }

    /// The link to `peer` was torn down with messages to it lost (its send
    /// queue was full: the peer stopped reading, or the network stalled).
    /// The loss coincides with a connection break, as a crash's would; the
    /// core treats the peer as unreachable (foundation.md, Joining,
    /// handshakes and limits).
    fn on_link_lost(&mut self, now: Instant, peer: NodeId) -> Then;

    /// `peer`'s process is gone while its host is up: its connection broke
    /// and its address refused the next one (the TCP transport's hint; a
    /// pause, a vanished host or a partition never give it). The life of
    /// `peer` the core knows has ended: nothing it had promised to do will
    /// be done, though messages it sent may still arrive, and a new life
    /// may start at any moment. A core may stop waiting on `peer` at once
    /// instead of after `suspect_after`; no safety rule may depend on the
    /// hint coming (it comes only over TCP, and may be lost). The default
    /// ignores it: silence tells the core in time.
    fn on_peer_unreachable(&mut self, now: Instant, peer: NodeId) -> Then {
        let _ = (now, peer);
        Then::Done
    }

    /// Time has reached (at least) a deadline returned by `poll_timeout`.
    fn on_timeout(&mut self, now: Instant) -> Then;

    /// Begin a graceful leave (SIGTERM): hand on what the protocol allows.
    /// The driver keeps running the core until [`is_left`](Protocol::is_left)
    /// or its own grace period ends.
    fn on_shutdown(&mut self, now: Instant) -> Then;

    /// The step that follows every input whose handler answered
    /// [`Then::AfterInput`]: serve what the new state allows, and put what
    /// must be stored in front of the outputs that depend on it (each
    /// daemon's `node/mod.rs` says what its step does). The default does
    /// nothing. Drivers never call it: the `handle_*` methods do.
    fn after_input(&mut self, now: Instant) {
        let _ = now;
    }

    /// Drivers call the `handle_*` methods, never the `on_*` handlers: each
    /// runs its handler and then, if the handler asks, [`after_input`]
    /// (Protocol::after_input). Cores do not override them.
    fn handle_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: Self::Msg) {
        if self.on_message(now, from, inc, msg) == Then::AfterInput {
            self.after_input(now);
        }
    }

    /// See [`handle_message`](Protocol::handle_message).
    fn handle_request(&mut self, now: Instant, client: ClientId, req: Self::Request) {
        if self.on_request(now, client, req) == Then::AfterInput {
            self.after_input(now);
        }
    }

    /// See [`handle_message`](Protocol::handle_message).
    fn handle_client_gone(&mut self, now: Instant, client: ClientId) {
        if self.on_client_gone(now, client) == Then::AfterInput {
            self.after_input(now);
        }
    }

    /// See [`handle_message`](Protocol::handle_message).
    fn handle_job_end(&mut self, now: Instant, id: u64, end: JobEnd) {
        if self.on_job_end(now, id, end) == Then::AfterInput {
            self.after_input(now);
        }
    }

    /// See [`handle_message`](Protocol::handle_message).
    fn handle_link_lost(&mut self, now: Instant, peer: NodeId) {
        if self.on_link_lost(now, peer) == Then::AfterInput {
            self.after_input(now);
        }
    }

    /// See [`handle_message`](Protocol::handle_message).
    fn handle_peer_unreachable(&mut self, now: Instant, peer: NodeId) {
        if self.on_peer_unreachable(now, peer) == Then::AfterInput {
            self.after_input(now);
        }
    }

    /// See [`handle_message`](Protocol::handle_message).
    fn handle_timeout(&mut self, now: Instant) {
        if self.on_timeout(now) == Then::AfterInput {
            self.after_input(now);
        }
    }

    /// See [`handle_message`](Protocol::handle_message).
    fn handle_shutdown(&mut self, now: Instant) {
        if self.on_shutdown(now) == Then::AfterInput {
            self.after_input(now);
        }
    }

    /// True once a graceful leave has finished.
    fn is_left(&self) -> bool;

    /// The next thing to do, if any.
    fn poll_output(&mut self) -> Option<OutputOf<Self>>;

    /// The earliest deadline at which `handle_timeout` must be called.
    fn poll_timeout(&self) -> Option<Instant>;

    /// The node's current life (it may change when the node learns it was
    /// excluded and rejoins); drivers stamp it on every frame.
    fn incarnation(&self) -> Incarnation;

    /// A snapshot for `ftctl status` (role and details; the driver fills in
    /// the peers: [`status_of`]).
    fn status(&self) -> StatusReport;

    /// How this node sees `peer` (`ftctl status`, the `peer_up` gauge).
    fn peer_view(&self, peer: NodeId) -> PeerView;

    /// Whether the node has joined, i.e. may serve (foundation.md, Joining:
    /// what joined means for each daemon). The driver tells systemd
    /// `READY=1` once it has, `STATUS=joining: k of N answered` until then.
    fn join_state(&self) -> JoinState;

    /// The core's own gauges, `(name without prefix, value)`, read by the
    /// driver every refresh.
    fn gauges(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
}

/// How far a node is through joining its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JoinState {
    /// Not yet: `answered` of the `of` nodes it needs to hear from have.
    Joining {
        /// Nodes heard from (the daemon says which count).
        answered: usize,
        /// Nodes configured.
        of: usize,
    },
    /// Joined: the node may serve.
    Joined,
}

/// The output buffer a core owns. The core's handlers and every
/// sub-component it embeds push into it (sub-components through the
/// [`MsgSink`], [`ReplySink`] and [`EventSink`] traits, which convert their
/// own types into the core's); [`Protocol::poll_output`] pops from it.
///
/// Keeps output order exactly as pushed, which the per-handler tests assert.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Outbox<M, R, E, D = ()> {
    queue: std::collections::VecDeque<Output<M, R, E, D>>,
}

impl<M, R, E, D> Default for Outbox<M, R, E, D> {
    fn default() -> Self {
        Outbox { queue: Default::default() }
    }
}

impl<M, R, E, D> Outbox<M, R, E, D> {
    /// Queues a message to a peer.
    pub fn send(&mut self, to: NodeId, msg: impl Into<M>) {
        self.queue.push_back(Output::Send { to, msg: msg.into() });
    }

    /// Queues `msg` to each of `members` but `me`, in their order (a
    /// broadcast to every peer).
    pub fn send_to_all_but(&mut self, members: &[NodeId], me: NodeId, msg: M)
    where
        M: Clone,
    {
        for &m in members {
            if m != me {
                self.send(m, msg.clone());
            }
        }
    }

    /// Queues a reply to a client.
    pub fn reply(&mut self, client: ClientId, reply: impl Into<R>) {
        self.queue.push_back(Output::Reply { client, reply: reply.into() });
    }

    /// Queues an event.
    pub fn event(&mut self, event: impl Into<E>) {
        self.queue.push_back(Output::Event(event.into()));
    }

    /// Queues a durable write, to be done before what is queued after it.
    pub fn persist(&mut self, state: D) {
        self.queue.push_back(Output::Persist(state));
    }

    /// Queues a command for a supervised job.
    pub fn job(&mut self, cmd: JobCommand) {
        self.queue.push_back(Output::Job(cmd));
    }

    /// Queues a durable write ahead of everything already queued: for a
    /// core that stores once per input, after the input's outputs are
    /// known (what it stores then is at least what any of them needs).
    pub fn persist_first(&mut self, state: D) {
        self.queue.push_front(Output::Persist(state));
    }

    /// Takes the oldest queued output.
    pub fn pop(&mut self) -> Option<Output<M, R, E, D>> {
        self.queue.pop_front()
    }

    /// Takes everything queued (for tests asserting exact outputs).
    pub fn drain(&mut self) -> Vec<Output<M, R, E, D>> {
        self.queue.drain(..).collect()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Keeps only the queued outputs for which `keep` is true (e.g. drops
    /// the replies to a client that went away).
    pub fn retain(&mut self, keep: impl FnMut(&Output<M, R, E, D>) -> bool) {
        self.queue.retain(keep);
    }

    /// Drops everything queued (tests that set a state up by hand).
    pub fn clear(&mut self) {
        self.queue.clear();
    }
}

/// Where a sub-component sends its peer messages (the embedding core's
/// [`Outbox`], converting them into the core's message type).
pub trait MsgSink<M> {
    /// Queues a message to a peer.
    fn send(&mut self, to: NodeId, msg: M);
}

/// Where a sub-component answers local clients.
pub trait ReplySink<R> {
    /// Queues a reply to a client.
    fn reply(&mut self, client: ClientId, reply: R);
}

/// Where a sub-component reports events.
pub trait EventSink<E> {
    /// Queues an event.
    fn event(&mut self, event: E);
}

impl<M, R, E, D, M2: Into<M>> MsgSink<M2> for Outbox<M, R, E, D> {
    fn send(&mut self, to: NodeId, msg: M2) {
        Outbox::send(self, to, msg);
    }
}

impl<M, R, E, D, R2: Into<R>> ReplySink<R2> for Outbox<M, R, E, D> {
    fn reply(&mut self, client: ClientId, reply: R2) {
        Outbox::reply(self, client, reply);
    }
}

impl<M, R, E, D, E2: Into<E>> EventSink<E2> for Outbox<M, R, E, D> {
    fn event(&mut self, event: E2) {
        Outbox::event(self, event);
    }
}

/// Helpers for per-handler tests of any core (feature `testing`): feed one
/// input, get back every output it caused, in order.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use std::time::Duration;

    use super::*;

    /// Everything `core` has queued, in order.
    pub fn drain<P: Protocol>(core: &mut P) -> Vec<OutputOf<P>> {
        std::iter::from_fn(|| core.poll_output()).collect()
    }

    /// Delivers `msg` from `from` (life `inc`) at `now`; returns the outputs.
    pub fn deliver<P: Protocol>(
        core: &mut P,
        now: Instant,
        from: NodeId,
        inc: Incarnation,
        msg: P::Msg,
    ) -> Vec<OutputOf<P>> {
        core.handle_message(now, from, inc, msg);
        drain(core)
    }

    /// A client request at `now`; returns the outputs.
    pub fn request<P: Protocol>(core: &mut P, now: Instant, client: ClientId, req: P::Request) -> Vec<OutputOf<P>> {
        core.handle_request(now, client, req);
        drain(core)
    }

    /// Fires the core's timers due at `now`; returns the outputs.
    pub fn timeout<P: Protocol>(core: &mut P, now: Instant) -> Vec<OutputOf<P>> {
        core.handle_timeout(now);
        drain(core)
    }

    /// `t0 + ms` milliseconds.
    pub fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    /// Fires a copy of `core`'s timers, deadline after deadline (at most
    /// 1,000), until an output matches `want`: the state just before that
    /// timeout, its time and its outputs (benches and tests that need a
    /// core just before it does something). None if no such output came.
    pub fn until_output<P: Protocol + Clone>(
        core: &P,
        want: impl Fn(&OutputOf<P>) -> bool,
    ) -> Option<(P, Instant, Vec<OutputOf<P>>)> {
        let mut core = core.clone();
        for _ in 0..1_000 {
            let at = core.poll_timeout()?;
            let before = core.clone();
            let out = timeout(&mut core, at);
            if out.iter().any(&want) {
                return Some((before, at, out));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
    enum M {
        A,
        B(u8),
        C { x: u8 },
    }
    message_kinds!(M { A => "a", B => "b", C => "c" });

    #[test]
    fn kinds_number_variants_in_order() {
        assert_eq!(M::A.kind(), 0);
        assert_eq!(M::B(1).kind(), 1);
        assert_eq!(M::C { x: 1 }.kind(), 2);
        assert_eq!(M::kind_name(2), Some("c"));
        assert_eq!(M::kind_name(3), None);
    }

    #[test]
    fn outbox_keeps_order() {
        let mut o: Outbox<u8, u8, u8, u8> = Outbox::default();
        o.send(NodeId(2), 1);
        o.event(9);
        o.persist(4);
        o.reply(ClientId(1), 3);
        assert_eq!(
            o.drain(),
            vec![
                Output::Send { to: NodeId(2), msg: 1 },
                Output::Event(9),
                Output::Persist(4),
                Output::Reply { client: ClientId(1), reply: 3 }
            ]
        );
        assert!(o.is_empty());
    }

    /// A sub-component speaks its own types; the core's outbox converts.
    #[test]
    fn sinks_convert_into_the_cores_types() {
        #[derive(Debug, PartialEq)]
        enum CoreEvent {
            Sub(u8),
        }
        impl From<u8> for CoreEvent {
            fn from(e: u8) -> Self {
                CoreEvent::Sub(e)
            }
        }
        fn sub_component(out: &mut impl EventSink<u8>) {
            out.event(7);
        }
        let mut o: Outbox<(), (), CoreEvent> = Outbox::default();
        sub_component(&mut o);
        assert_eq!(o.drain(), vec![Output::Event(CoreEvent::Sub(7))]);
    }
}
