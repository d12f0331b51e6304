//! What ntmutexd puts on the wire between sites.

use durable::promise::{Refusal, Values};
use ftcore::{message_kinds, Incarnation, Message, NodeId};
use serde::{Deserialize, Serialize};

/// Every message carries the sender's `max_epoch`: a site that learns of a
/// newer epoch than its token's knows its token has been superseded.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Msg {
    /// The sender's highest epoch in use (`max_epoch`: a token's, or one
    /// whose regeneration completed; never a mere promise).
    pub epoch: u64,
    /// The message proper.
    pub body: Body,
}

/// The protocol's messages (names follow the seed: COMMIT, ARE YOU ALIVE,
/// SEARCH PREV, SEARCH QUEUE, CONNECTION …).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Body {
    /// A freshly started site asks whether the cluster is already running
    /// (and, while it is a fresh node, what its peers have stored).
    Hello {
        /// Echoed in the answer: only answers to this round count.
        nonce: u64,
    },
    /// Answer to `Hello`.
    HelloAck {
        /// The `Hello`'s nonce.
        nonce: u64,
        /// True if the answering site is running the protocol.
        running: bool,
        /// What the answering site has stored (`None` while it is itself a
        /// fresh node that has not recovered).
        values: Option<Values>,
    },
    /// Naimi-Trehel request, forwarded along the `last` tree.
    Request {
        /// Who wants the token.
        requester: NodeId,
        /// Which of its requests.
        seq: u64,
        /// Forwards so far: more than 2N means the message is going round a
        /// cycle, and it is refused.
        hops: u32,
    },
    /// A request sent straight to a queue member (M3.a (i), an M3.b loser to
    /// the winner, a regenerator to a token holder): handled by the linking
    /// rule, not the `last` tree.
    DirectRequest {
        /// Who wants the token.
        requester: NodeId,
        /// Which of its requests.
        seq: u64,
        /// Forwards so far: more than 2N means the message is going round a
        /// cycle, and it is refused.
        hops: u32,
    },
    /// The token. `counter` is the last grant counter used; `pos` is the
    /// receiver's position (the sender's + 1).
    Token {
        /// The token's epoch (raised by every regeneration).
        epoch: u64,
        /// Grants made with this epoch so far.
        counter: u64,
        /// The receiver's position in the next queue.
        pos: u64,
    },
    /// COMMIT: "you are queued behind me". `pos: None` is provisional (the
    /// sender has no position yet); `preds` are the receiver's closest
    /// predecessors, closest first.
    Commit {
        /// The receiver's position.
        pos: Option<u64>,
        /// The receiver's closest predecessors (at most k).
        preds: Vec<NodeId>,
        /// The request this commits.
        seq: u64,
        /// Where this cascade of Commits started: the site and the request
        /// it was making then (`u64::MAX`: it was holding the token). A
        /// cascade that comes back to its origin for the same request has
        /// gone round a cycle of next pointers.
        origin: (NodeId, u64),
    },
    /// Reply to a Commit for a request the receiver abandoned.
    Unlink {
        /// The abandoned request.
        seq: u64,
    },
    /// Liveness check of a predecessor.
    AreYouAlive,
    /// Answer to `AreYouAlive`.
    IAmAlive {
        /// The answering site's position.
        position: Option<u64>,
        /// Its `next`.
        next: Option<NodeId>,
    },
    /// "Link me behind you" (M1, M2, M3.a (ii)).
    Connection {
        /// The site to link.
        requester: NodeId,
        /// Its current request.
        seq: u64,
        /// Forwards so far: more than 2N means the message is going round a
        /// cycle, and it is refused.
        hops: u32,
        /// Sites the requester found dead (its failed predecessors): a
        /// receiver whose `next` is among them links the requester instead
        /// of forwarding to a dead site.
        failed: Vec<NodeId>,
    },
    /// M2: "who has a position smaller than mine?"
    SearchPrev {
        /// The searcher's position.
        position: u64,
    },
    /// M3: "I have no position; where is the queue?" (also a candidacy).
    SearchQueue {
        /// Critical-section accesses of the candidate (fewest wins).
        accesses: u64,
    },
    /// Answer to `SearchPrev` or `SearchQueue`.
    SearchAck {
        /// The answering site's position.
        position: Option<u64>,
        /// Whether it has a next.
        has_next: bool,
        /// Whether it holds a token.
        has_token: bool,
        /// Whether it is itself an M3 candidate, with its rank.
        candidate: Option<u64>,
    },
    /// Phase one of regeneration: "promise epoch `epoch`".
    Regenerate {
        /// The proposed epoch.
        epoch: u64,
    },
    /// A promise, stored before it was sent: the site refuses every lower
    /// epoch from now on, and every other proposer for the promise window.
    RegenerateAck {
        /// The promised epoch.
        epoch: u64,
    },
    /// Refusal: the site holds a token, or its promises forbid the epoch.
    RegenerateNack {
        /// The refused epoch.
        epoch: u64,
        /// Why.
        why: Nack,
    },
    /// "Your request reached a site that cannot forward it": start M3.
    DeadEnd {
        /// The request.
        seq: u64,
    },
    /// "Your message came from a life older than the one I know of you":
    /// the receiver moves to a life above `known`.
    Behind {
        /// The newest life of the receiver that the sender knows.
        known: Incarnation,
    },
    /// Graceful leave of the holder: everyone sets `last` to `root`.
    NewRoot {
        /// The new root.
        root: NodeId,
    },
    /// Graceful leave of a waiting site: "link my next instead of me".
    Skip {
        /// The leaving site's next (and its request).
        next: Option<(NodeId, u64)>,
    },
    /// A site with local clients holding or waiting renews its lease
    /// (reliability.md, Pauses and leases).
    LeaseRenew {
        /// Acks name it.
        round: u64,
        /// The token's epoch (holding), or the sender's `max_epoch` (waiting).
        epoch: u64,
        /// Whether the sender holds the token.
        holding: bool,
    },
    /// The renewal is acked: the sender joins no other site's
    /// regeneration for `lease_ms·(1+ρ)`.
    LeaseAck {
        /// The renewal's round.
        round: u64,
    },
    /// The renewal's epoch is below what the sender stored or promised: a
    /// holder drops its token (it may have been superseded).
    LeaseRefused {
        /// The renewal's round.
        round: u64,
        /// The refuser's threshold.
        threshold: u64,
    },
}

/// Why a site refuses a regeneration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Nack {
    /// It holds a token: the regenerator sends it a direct request instead.
    Holder,
    /// Its promises forbid it (a higher promise: jump past it; a window:
    /// retry after it; restarting or fresh: retry later).
    Refused(Refusal),
}

message_kinds!(Body {
    Hello => "hello",
    HelloAck => "hello_ack",
    Request => "request",
    DirectRequest => "direct_request",
    Token => "token",
    Commit => "commit",
    Unlink => "unlink",
    AreYouAlive => "are_you_alive",
    IAmAlive => "i_am_alive",
    Connection => "connection",
    SearchPrev => "search_prev",
    SearchQueue => "search_queue",
    SearchAck => "search_ack",
    Regenerate => "regenerate",
    RegenerateAck => "regenerate_ack",
    RegenerateNack => "regenerate_nack",
    DeadEnd => "dead_end",
    NewRoot => "new_root",
    Skip => "skip",
    Behind => "behind",
    LeaseRenew => "lease_renew",
    LeaseAck => "lease_ack",
    LeaseRefused => "lease_refused",
});

impl Message for Msg {
    fn kind(&self) -> u16 {
        self.body.kind()
    }
    fn kind_name(kind: u16) -> Option<&'static str> {
        Body::kind_name(kind)
    }
}
