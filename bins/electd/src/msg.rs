//! electd's peer messages (electd.md). Every one carries the sender's term
//! (`Msg::term`): election messages, heartbeats, requests, replies and acks.

use durable::promise::Values;
use ftcore::{message_kinds, Incarnation, NodeId};
use lockservice::LockName;
use serde::{Deserialize, Serialize};

/// The most grants one `Renew`, `RenewAck` or `RenewRefused` lists (a
/// node holding more sends several): 1,024 × 24 bytes fits the default
/// 64 KiB frame.
pub const MAX_BATCH: usize = 1_024;

/// Why a coordinator (or a process that is not one) refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Denial {
    /// Not the coordinator; the one it knows, if any.
    NotCoordinator(Option<NodeId>),
    /// `coordinator_max_queue` requests wait already.
    QueueFull,
    /// The coordinator's quorum lease has lapsed (or it has not taken office).
    NoQuorum,
    /// The coordinator knows `max_locks` names with a queue or a holder.
    TooManyLocks,
}

impl Denial {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Denial::NotCoordinator(_) => "not_coordinator",
            Denial::QueueFull => "queue_full",
            Denial::NoQuorum => "no_quorum",
            Denial::TooManyLocks => "too_many_locks",
        }
    }
}

/// A message between electd processes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Msg {
    /// Start-up handshake (foundation.md): answered `HelloAck`.
    Hello {
        /// The sender's term.
        term: u64,
        /// Echoed.
        nonce: u64,
    },
    /// The answer to `Hello`: stored values (`None` while unrecovered) and
    /// the coordinator the answerer follows.
    HelloAck {
        /// The answerer's term.
        term: u64,
        /// The Hello's nonce.
        nonce: u64,
        /// Its promise values.
        values: Option<Values>,
        /// The coordinator it follows in `term`. Informational: a joiner
        /// follows the coordinator whose heartbeat it hears. (Releases
        /// before 2026-11-29 had a higher id challenge the coordinator
        /// named here; kept on the wire for them.)
        coordinator: Option<NodeId>,
    },
    /// Would you vote in `term` (= the asker's term + 1)? Stores nothing.
    PreVote {
        /// The term the asker would start.
        term: u64,
    },
    /// The answer to `PreVote`.
    PreVoteReply {
        /// The answerer's own term (the asker starts above it).
        term: u64,
        /// The PreVote's term.
        asked: u64,
        /// Yes, unless it knows a live coordinator above the asker.
        yes: bool,
    },
    /// A lower-term message was refused: the sender jumps past `term`.
    StaleTerm {
        /// The refuser's term.
        term: u64,
        /// The coordinator it follows there.
        coordinator: Option<NodeId>,
    },
    /// Relay election (Peterson / Dolev-Klawe-Rodeh): a value of `round`,
    /// phase 1 (`d` of the nearest active predecessor) or 2 (its `e`).
    Relay {
        /// The election's term.
        term: u64,
        /// The round.
        round: u32,
        /// 1 or 2.
        phase: u8,
        /// The id carried.
        value: NodeId,
        /// Hop number, echoed by `HopAck`.
        hop: u64,
    },
    /// Relay election decided: `d` is the maximum; one lap from the decider.
    Elected {
        /// The term.
        term: u64,
        /// The winner.
        d: NodeId,
        /// Who decided (the lap ends there).
        decider: NodeId,
        /// Whether `d` has seen it (and accepted).
        accepted: bool,
        /// Hop number.
        hop: u64,
    },
    /// Alive-list ring election (seed 004).
    Election {
        /// The term.
        term: u64,
        /// Who started it.
        initiator: NodeId,
        /// The initiator's life when it sent it.
        initiator_inc: Incarnation,
        /// The processes that voted, in ring order.
        alive: Vec<NodeId>,
        /// Hop number.
        hop: u64,
    },
    /// The result of an alive-list election, one lap from the initiator.
    Coordinator {
        /// The term.
        term: u64,
        /// The coordinator (the highest id in `alive`).
        id: NodeId,
        /// Who voted.
        alive: Vec<NodeId>,
        /// The initiator (the lap ends there).
        initiator: NodeId,
        /// Hop number.
        hop: u64,
    },
    /// One hop of an election message arrived.
    HopAck {
        /// The term.
        term: u64,
        /// The hop number.
        hop: u64,
    },
    /// The coordinator's heartbeat.
    Heartbeat {
        /// Its term.
        term: u64,
        /// Numbered, so that acks name the send time.
        seq: u64,
    },
    /// "I am in your term and follow you."
    HeartbeatAck {
        /// The term.
        term: u64,
        /// The heartbeat acked.
        seq: u64,
    },
    /// A consumer's access request on behalf of its local clients of one
    /// lock.
    Request {
        /// The sender's term.
        term: u64,
        /// The lock.
        name: LockName,
        /// The consumer's request number.
        req: u64,
        /// The (term, position) of an earlier `Queued` answer (failover).
        queued: Option<(u64, u64)>,
        /// An unexpired grant held from an earlier coordinator (re-registered).
        holding: Option<u128>,
        /// The re-registered grant's campaign value (elections.md): the
        /// new coordinator knows its leader at once.
        value: Option<String>,
    },
    /// The request waits at `pos` of `term`'s queue.
    Queued {
        /// The coordinator's term.
        term: u64,
        /// The lock.
        name: LockName,
        /// The request.
        req: u64,
        /// Its position (per term, increasing).
        pos: u64,
    },
    /// The request was denied.
    Denied {
        /// The answerer's term.
        term: u64,
        /// The lock.
        name: LockName,
        /// The request.
        req: u64,
        /// Why.
        why: Denial,
    },
    /// The resource is the requester's under a lease, with `fence`.
    Granted {
        /// The coordinator's term.
        term: u64,
        /// The lock.
        name: LockName,
        /// The request.
        req: u64,
        /// (term, counter) packed.
        fence: u128,
    },
    /// The holder renews its grants (and, the first time, confirms each):
    /// one message per coordinator per period for every grant held, each
    /// named by its fence (unique: the counter is office-wide).
    Renew {
        /// The holder's term.
        term: u64,
        /// (fence, renewal number) of each grant renewed.
        grants: Vec<(u128, u64)>,
    },
    /// Renewals honoured.
    RenewAck {
        /// The coordinator's term.
        term: u64,
        /// (fence, renewal number) of each renewal acked.
        acks: Vec<(u128, u64)>,
    },
    /// Renewals refused: those grants are over.
    RenewRefused {
        /// The answerer's term.
        term: u64,
        /// The grants.
        fences: Vec<u128>,
    },
    /// The holder gives the resource back.
    Release {
        /// The holder's term.
        term: u64,
        /// The grant.
        fence: u128,
    },
    /// A campaign's grant was given to its local client, whose value this
    /// is (elections.md): from now on it leads.
    Announce {
        /// The holder's term.
        term: u64,
        /// The grant.
        fence: u128,
        /// The campaigner's value.
        value: String,
    },
    /// The coordinator acknowledges a campaign grant's `Announce`.
    Announced {
        /// The coordinator's term.
        term: u64,
        /// The grant.
        fence: u128,
    },
    /// Who leads these elections (their locks, `elect:NAME`)? Numbered
    /// (`req`), answered `Observed` with the same number.
    Observe {
        /// The asker's term.
        term: u64,
        /// The asker's request number.
        req: u64,
        /// Ask once, watch (and be told every change), or stop watching.
        mode: ObserveMode,
        /// The elections' locks (at most [`MAX_OBSERVE_NAMES`]).
        names: Vec<LockName>,
    },
    /// The coordinator's leaders of some elections: the answer to `req`,
    /// or a push of changes to a watcher (`req` 0).
    Observed {
        /// The coordinator's term.
        term: u64,
        /// The request answered (0: a push).
        req: u64,
        /// (election lock, leader as (node, fence, value), as of fence):
        /// at most [`MAX_OBSERVED`].
        entries: Vec<Observation>,
    },
}

/// How an `Observe` asks (elections.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ObserveMode {
    /// Answer once.
    Once,
    /// Answer, record the asker as a watcher, and push every change.
    Watch,
    /// The asker no longer watches these.
    Unwatch,
}

/// One election's state as the coordinator tells it: its lock, its leader
/// (node, fence, value) or none, and the fence it is as of (the leader's,
/// or for none the office's latest: every grant made is at or below it).
pub type Observation = (LockName, Option<(NodeId, u128, String)>, u128);

/// The most names one `Observe` carries (each at most 134 bytes).
pub const MAX_OBSERVE_NAMES: usize = 256;

/// The most entries one `Observed` carries: each at most 134 + 1,024 + 40
/// bytes, so a frame stays within the 64 KiB `limits.max_frame_bytes`
/// must allow.
pub const MAX_OBSERVED: usize = 32;

impl Msg {
    /// The sender's term, carried by every message.
    pub fn term(&self) -> u64 {
        match self {
            Msg::Hello { term, .. }
            | Msg::HelloAck { term, .. }
            | Msg::PreVote { term }
            | Msg::PreVoteReply { term, .. }
            | Msg::StaleTerm { term, .. }
            | Msg::Relay { term, .. }
            | Msg::Elected { term, .. }
            | Msg::Election { term, .. }
            | Msg::Coordinator { term, .. }
            | Msg::HopAck { term, .. }
            | Msg::Heartbeat { term, .. }
            | Msg::HeartbeatAck { term, .. }
            | Msg::Request { term, .. }
            | Msg::Queued { term, .. }
            | Msg::Denied { term, .. }
            | Msg::Granted { term, .. }
            | Msg::Renew { term, .. }
            | Msg::RenewAck { term, .. }
            | Msg::RenewRefused { term, .. }
            | Msg::Release { term, .. }
            | Msg::Announce { term, .. }
            | Msg::Announced { term, .. }
            | Msg::Observe { term, .. }
            | Msg::Observed { term, .. } => *term,
        }
    }

    /// Election messages proper (counted against 2n⌊log2 n⌋ + 2n).
    pub fn is_election(&self) -> bool {
        matches!(self, Msg::Relay { .. } | Msg::Elected { .. } | Msg::Election { .. } | Msg::Coordinator { .. })
    }
}

message_kinds!(Msg {
    Hello => "hello",
    HelloAck => "hello_ack",
    PreVote => "pre_vote",
    PreVoteReply => "pre_vote_reply",
    StaleTerm => "stale_term",
    Relay => "relay",
    Elected => "elected",
    Election => "election",
    Coordinator => "coordinator",
    HopAck => "hop_ack",
    Heartbeat => "heartbeat",
    HeartbeatAck => "heartbeat_ack",
    Request => "request",
    Queued => "queued",
    Denied => "denied",
    Granted => "granted",
    Renew => "renew",
    RenewAck => "renew_ack",
    RenewRefused => "renew_refused",
    Release => "release",
    Announce => "announce",
    Announced => "announced",
    Observe => "observe",
    Observed => "observed",
});
