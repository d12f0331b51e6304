//! What the heartbeat ring puts on the wire, and what it reports.

use std::time::Duration;

use ftcore::{message_kinds, Incarnation, NodeId};
use membership::Liveness;
use serde::{Deserialize, Serialize};

/// Heartbeat-ring messages between peers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HbMsg {
    /// "I am alive", to the live successor (and as a probe to dead members),
    /// with a digest of the sender's view: a successor whose view differs
    /// answers with its whole `View` (anti-entropy, so reports lost to a
    /// partition or a broken connection are made good).
    Heartbeat {
        /// [`RingView::digest`](membership::RingView::digest) of the sender's view.
        digest: u64,
    },
    /// The successor's answer to a heartbeat, with its view's digest (the
    /// predecessor sends its `View` if it differs).
    HeartbeatAck {
        /// Digest of the successor's view.
        digest: u64,
    },
    /// A change of the view, travelling the ring until it changes nothing.
    Report {
        /// The node the report is about.
        about: NodeId,
        /// Its new liveness.
        liveness: Liveness,
    },
    /// The sender's whole view, for a node that just (re)appeared.
    View {
        /// Every member's liveness, in ring order.
        entries: Vec<(NodeId, Liveness)>,
    },
    /// "Your life `your_inc` was declared dead: rejoin as a new one."
    Excluded {
        /// The life that was excluded.
        your_inc: Incarnation,
    },
    /// "Your message came from a life older than the one I know of you
    /// (`known`)": the sender's clock is behind its previous start, or its
    /// disk was replaced. It moves past `known` instead of being ignored
    /// for ever (foundation.md, Durable state).
    Behind {
        /// The newest life of the receiver of this message that the sender knows.
        known: Incarnation,
    },
}

message_kinds!(HbMsg {
    Heartbeat => "heartbeat",
    HeartbeatAck => "heartbeat_ack",
    Report => "report",
    View => "view",
    Excluded => "excluded",
    Behind => "behind",
});

/// What the ring tells metrics, logs and invariant checkers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HbEvent {
    /// This node's failure detector suspected a neighbour.
    Suspected {
        /// The neighbour.
        node: NodeId,
        /// The life suspected.
        inc: Incarnation,
    },
    /// Learned from a report that a node is dead.
    Down {
        /// The node.
        node: NodeId,
        /// The life that died.
        inc: Incarnation,
    },
    /// A node is alive in a new life (restart, rejoin, or back from a
    /// partition).
    Up {
        /// The node.
        node: NodeId,
        /// Its new life.
        inc: Incarnation,
    },
    /// This node learned it had been excluded and moved to life `inc`.
    Rejoined {
        /// The new life.
        inc: Incarnation,
    },
    /// A message from an older life of `from` was ignored.
    StaleMessage {
        /// The sender.
        from: NodeId,
        /// The stale life.
        inc: Incarnation,
    },
    /// A message from an excluded life was answered `Excluded`.
    ExcludedPeer {
        /// The sender.
        node: NodeId,
        /// Its excluded life.
        inc: Incarnation,
    },
    /// A message from a life this node held dead, while its view held a
    /// minority alive: instead of excluding that life, this node moved to
    /// a new life and presumed everyone alive (it was likely the one cut
    /// off).
    YieldedTo {
        /// The sender.
        node: NodeId,
        /// The life this node held dead.
        inc: Incarnation,
    },
    /// The watched predecessor changed.
    PredecessorChanged {
        /// The old one.
        from: Option<NodeId>,
        /// The new one.
        to: Option<NodeId>,
    },
    /// The successor heartbeats go to changed.
    SuccessorChanged {
        /// The old one.
        from: Option<NodeId>,
        /// The new one.
        to: Option<NodeId>,
    },
    /// After this node suspected its predecessor, the new predecessor's
    /// first heartbeat arrived: the ring is whole again here.
    Repaired {
        /// Who heartbeats this node now.
        new_predecessor: NodeId,
        /// Detection to repair.
        took: Duration,
    },
}

/// Requests a local client can make of `hbringd`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HbRequest {
    /// The live ring as this node sees it.
    Ring,
}

message_kinds!(HbRequest { Ring => "ring" });

/// Replies to [`HbRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HbReply {
    /// Live members in ring order starting after this node and ending with
    /// it, with their known lives.
    Ring {
        /// `(id, incarnation)` pairs.
        alive: Vec<(NodeId, Incarnation)>,
    },
}

message_kinds!(HbReply { Ring => "ring" });
