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
#![forbid(unsafe_code)]

use std::fmt::Debug;

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

/// Declares a `Message` impl for a plain enum: `message_kinds!(Msg { A, B(..), C{..} })`
/// numbers the variants 0, 1, 2 in order and names them in snake case.
#[macro_export]
macro_rules! message_kinds {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $crate::Message for $ty {
            fn kind(&self) -> u16 {
                #[allow(unused_assignments)]
                {
                    let mut k: u16 = 0;
                    $(
                        if matches!(self, $ty::$variant { .. }) { return k; }
                        k += 1;
                    )+
                    unreachable!("every variant is listed")
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

/// What a core asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output<P: Protocol + ?Sized> {
    /// Send `msg` to peer `to`. Delivery is the transport's business: TCP
    /// cores treat a peer that stops answering as failed, UDP cores expect
    /// loss.
    Send {
        /// Destination peer.
        to: NodeId,
        /// The message.
        msg: P::Msg,
    },
    /// Answer a local client.
    Reply {
        /// Which client.
        client: ClientId,
        /// The answer.
        reply: P::Reply,
    },
    /// Something happened that metrics, logs or invariant checkers care
    /// about (a grant, a recovery, a suspicion). Never needed for the
    /// protocol to work.
    Event(P::Event),
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
    /// Every configured peer and whether this node believes it up.
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

/// A sans-IO protocol core.
///
/// The driver calls the `handle_*` methods with the current time, then
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

    /// A message from peer `from` in life `inc` (the envelope's sender
    /// fields, authenticated when a cluster key is configured).
    fn handle_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: Self::Msg);

    /// A request from a local client.
    fn handle_request(&mut self, now: Instant, client: ClientId, req: Self::Request);

    /// A local client went away (its connection closed). Whatever it held
    /// or waited for is released.
    fn handle_client_gone(&mut self, now: Instant, client: ClientId);

    /// Time has reached (at least) a deadline returned by `poll_timeout`.
    fn handle_timeout(&mut self, now: Instant);

    /// Begin a graceful leave (SIGTERM): hand on what the protocol allows.
    /// The driver keeps running the core until [`is_left`](Protocol::is_left)
    /// or its own grace period ends.
    fn handle_shutdown(&mut self, now: Instant);

    /// True once a graceful leave has finished.
    fn is_left(&self) -> bool;

    /// The next thing to do, if any.
    fn poll_output(&mut self) -> Option<Output<Self>>;

    /// The earliest deadline at which `handle_timeout` must be called.
    fn poll_timeout(&self) -> Option<Instant>;

    /// The node's current life (it may change when the node learns it was
    /// excluded and rejoins); drivers stamp it on every frame.
    fn incarnation(&self) -> Incarnation;

    /// A snapshot for `ftctl status`.
    fn status(&self) -> StatusReport;
}

/// An event queue plus the usual helpers, for cores to embed.
///
/// Keeps output order exactly as pushed, which the per-handler tests assert.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Outbox<M, R, E> {
    queue: std::collections::VecDeque<OutItem<M, R, E>>,
}

/// One queued output (the type behind [`Outbox`]; converted to [`Output`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OutItem<M, R, E> {
    /// See [`Output::Send`].
    Send(NodeId, M),
    /// See [`Output::Reply`].
    Reply(ClientId, R),
    /// See [`Output::Event`].
    Event(E),
}

impl<M, R, E> Default for Outbox<M, R, E> {
    fn default() -> Self {
        Outbox { queue: Default::default() }
    }
}

impl<M, R, E> Outbox<M, R, E> {
    /// Queues a message to a peer.
    pub fn send(&mut self, to: NodeId, msg: M) {
        self.queue.push_back(OutItem::Send(to, msg));
    }

    /// Queues a reply to a client.
    pub fn reply(&mut self, client: ClientId, reply: R) {
        self.queue.push_back(OutItem::Reply(client, reply));
    }

    /// Queues an event.
    pub fn event(&mut self, event: E) {
        self.queue.push_back(OutItem::Event(event));
    }

    /// Takes the oldest queued output.
    pub fn pop(&mut self) -> Option<OutItem<M, R, E>> {
        self.queue.pop_front()
    }

    /// Takes everything queued (for tests asserting exact outputs).
    pub fn drain(&mut self) -> Vec<OutItem<M, R, E>> {
        self.queue.drain(..).collect()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

impl<P: Protocol + ?Sized> From<OutItem<P::Msg, P::Reply, P::Event>> for Output<P> {
    fn from(item: OutItem<P::Msg, P::Reply, P::Event>) -> Self {
        match item {
            OutItem::Send(to, msg) => Output::Send { to, msg },
            OutItem::Reply(client, reply) => Output::Reply { client, reply },
            OutItem::Event(e) => Output::Event(e),
        }
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
        let mut o: Outbox<u8, u8, u8> = Outbox::default();
        o.send(NodeId(2), 1);
        o.event(9);
        o.reply(ClientId(1), 3);
        assert_eq!(o.drain(), vec![OutItem::Send(NodeId(2), 1), OutItem::Event(9), OutItem::Reply(ClientId(1), 3)]);
        assert!(o.is_empty());
    }
}
