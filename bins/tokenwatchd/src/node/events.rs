//! What the core reports ([`TwEvent`]) and the types it carries.

use std::time::Duration;

use ftcore::NodeId;
use lockservice::LockEvent;

/// What the core reports to metrics, logs and checkers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TwEvent {
    /// The local lock service did something (grant, release, …).
    Lock(LockEvent),
    /// The process may serve (a Join answered, or a token seen).
    Joined,
    /// A new token was accepted (the process holds it now).
    Accepted {
        /// Its epoch.
        epoch: u64,
        /// The tpc it set.
        tpc: u64,
    },
    /// The token was handed to `to` (first transmission).
    Passed {
        /// The successor.
        to: NodeId,
    },
    /// A hand-off was confirmed.
    Confirmed {
        /// Time from the first transmission.
        took: Duration,
    },
    /// The token was sent again.
    Retransmitted,
    /// A stale token was dropped.
    StaleDropped,
    /// A retransmitted hand-off was acked again.
    ReAcked,
    /// An ACK was sent (issued here) or forwarded.
    AckSent {
        /// True when forwarded.
        forwarded: bool,
    },
    /// A silent successor was bypassed.
    Bypassed {
        /// The successor.
        peer: NodeId,
    },
    /// A token was refused with `Stale`.
    StaleAnswered,
    /// This process dropped its copy because a `Stale` came back.
    Superseded,
    /// A Claim was started.
    ClaimStarted {
        /// Its epoch.
        epoch: u64,
    },
    /// An own Claim ended.
    ClaimEnded {
        /// How.
        outcome: ClaimOutcome,
    },
    /// This process made a new token.
    Regenerated {
        /// The new epoch.
        epoch: u64,
        /// Its first tpc.
        tpc: u64,
        /// Token lost (no token seen) to the new token.
        took: Duration,
    },
    /// A Join was answered.
    JoinAnswered,
    /// A fresh node recovered what its peers stored.
    StateRecovered {
        /// Tokens at or below it are refused for ever.
        max: u64,
    },
    /// A message with a value the protocol cannot accept was dropped.
    Refused {
        /// Its sender.
        from: NodeId,
        /// What was wrong (metric label).
        reason: &'static str,
    },
    /// The token arrived or left (gauge).
    HasToken(bool),
    /// The token came back to this process in the same epoch: one lap.
    Rotated {
        /// Time since it last arrived here.
        took: Duration,
    },
    /// No live successor and no majority: the copy was dropped (no
    /// minority holder) and a Claim started.
    MinorityDropped,
}

impl From<LockEvent> for TwEvent {
    fn from(e: LockEvent) -> Self {
        TwEvent::Lock(e)
    }
}

/// How a Claim ended, for the metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimOutcome {
    /// It made a token.
    Won,
    /// A process answered `Busy`.
    Busy,
    /// A process refused for another reason (`Stale` among them).
    Refused,
    /// It was not back in time, or came back without a majority.
    Lapsed,
}

impl ClaimOutcome {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            ClaimOutcome::Won => "won",
            ClaimOutcome::Busy => "busy",
            ClaimOutcome::Refused => "refused",
            ClaimOutcome::Lapsed => "lapsed",
        }
    }
}
