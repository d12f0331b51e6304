//! The in-memory types the node holds: the visit, the hand-off awaiting
//! its confirmation, a Claim's hops, the start-up phase.

use ftcore::NodeId;
use timer::Instant;

use crate::msg::Claim;

/// The token while it is here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Visit {
    pub(super) epoch: u64,
    pub(super) since: Instant,
    /// Grants made in this visit.
    pub(super) grants: u64,
    /// The token's hops without service when it arrived (`Msg::Token`).
    pub(super) quiet: u32,
}

/// A hand-off awaiting its confirmation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Awaiting {
    pub(super) to: NodeId,
    pub(super) epoch: u64,
    /// The count handed off (`Token(m)`).
    pub(super) m: u64,
    /// The live view it carried.
    pub(super) bypassed: Vec<NodeId>,
    /// Its hops without service.
    pub(super) quiet: u32,
    pub(super) first_sent: Instant,
    pub(super) last_sent: Instant,
    pub(super) retransmits: u32,
}

/// One hop of a Claim sent here (as claimant or adopter), resent until
/// its successor acks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Hop {
    pub(super) claim: Claim,
    pub(super) to: NodeId,
    pub(super) first_sent: Instant,
    pub(super) last_sent: Instant,
}

/// How far the start-up handshake is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Phase {
    /// Sending `Join` every ring timeout; a fresh node also recovers.
    Joining {
        nonce: u64,
        next_join: Instant,
    },
    Joined,
}
