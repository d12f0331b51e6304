//! The in-memory state the core keeps besides its fields: its timers, its
//! part in elections, an unacked election hop, and a small pure helper.

use ftcore::NodeId;

use super::access;
use crate::msg::{Denial, Msg};

/// Timers of the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Timer {
    /// Resend `Hello` (handshake, fresh-node recovery rounds).
    Hello,
    /// Start a pre-vote (a randomized election timer, a retry, a jittered
    /// consumer start).
    Elect,
    /// A pre-vote's answers are due.
    PreVoteDue,
    /// The current term's election is due (`election_timeout`).
    ElectionDue,
    /// An election hop's ack is due.
    Hop(u64),
    /// The coordinator's next heartbeat.
    Heartbeat,
    /// Check the coordinator's heartbeats (consumer) or the quorum
    /// (coordinator).
    Check,
    /// The immediate answer to the pending request is due; once it was
    /// answered `Queued`, the time to confirm its place again.
    RequestDue,
    /// The holder's next renewal.
    Renew,
    /// The holder's grant lease ends.
    GrantExpiry,
    /// The coordinator stops honouring the current grant.
    HolderExpiry,
    /// The coordinator's failover gap ends.
    GapEnds,
    /// Messages to itself are left over after one input's budget: handle
    /// them at once, as a next input (many local names at the coordinator).
    Loopback,
    /// An observe's answer is due (elections.md).
    ObserveDue,
}

/// This process's part in elections.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Role {
    /// An election is under way.
    Electing,
    /// It won (elected in its term); it takes office at its first quorum.
    Coordinator(Box<access::Office>),
    /// It follows the coordinator of its term.
    Consumer,
}

/// An unacked election hop.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Hop {
    pub(super) to: NodeId,
    pub(super) msg: Msg,
}

/// Denial for a request that reached a process that is not the coordinator.
pub(super) fn not_coordinator(known: Option<NodeId>) -> Denial {
    Denial::NotCoordinator(known)
}
