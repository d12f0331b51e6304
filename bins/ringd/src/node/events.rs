//! What the core reports ([`RdEvent`]) to metrics, logs and checkers.

use std::time::Duration;

use ftcore::NodeId;
use hbring::HbEvent;
use timer::Instant;

use super::CensusOutcome;

/// What the core reports to metrics, logs and checkers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RdEvent {
    /// The heartbeat ring did something.
    Hb(HbEvent),
    /// A token was accepted and is owned here.
    Accepted {
        /// Its (epoch, seq).
        id: (u64, u64),
    },
    /// The token was passed to the successor (first transmission).
    Passed {
        /// The successor.
        to: NodeId,
    },
    /// A token service ran here under fence (epoch, seq) (checkers: one
    /// executor at a time, fences rising).
    Ran {
        /// (epoch, seq).
        fence: (u64, u64),
        /// The service.
        service: String,
        /// The client's request id.
        request_id: u64,
        /// The lease it ran under ends then (the owner's clock).
        lease_until: Instant,
    },
    /// A service's outcome was answered (metric by name and outcome).
    Executed {
        /// The service.
        service: String,
        /// `ok` or the error's label.
        outcome: &'static str,
    },
    /// The token came back here in the same epoch: one lap.
    Rotated {
        /// Since it last arrived.
        took: Duration,
    },
    /// A stale token was discarded.
    StaleDiscarded,
    /// A `Stale` was answered.
    StaleAnswered,
    /// A `Stale` reached this replica while it owned (or was handing on)
    /// a token of an epoch at or below the one named: it stops owning.
    StaleHeeded {
        /// It owned the token (else it was handing it on, unacked).
        owned: bool,
    },
    /// This replica stopped owning (a newer token, `Stale`, exclusion,
    /// overflow): its running token services were killed.
    Superseded,
    /// A newer token was accepted here while a token service of the
    /// owned one still ran (ringd.md, Superseded: it is killed, its client
    /// answered `token_lost`). Not expected with every (safety) rule on:
    /// a newer token comes from a census that every member of its origin's
    /// view answered without `Busy`, so this owner's lease, and with it
    /// its command's supervisor deadline, had ended first. The simulator's
    /// checkers treat it as a violation.
    SupersededWhileRunning {
        /// The running service's fence (the owned token's id).
        fence: (u64, u64),
        /// The newer token's (epoch, seq).
        by: (u64, u64),
    },
    /// The owner's lease ran out with token services waiting.
    LeaseExpired,
    /// A command service's supervisor killed it at its deadline (its
    /// timeout, or its token lease's end).
    SupervisorKilled {
        /// The service.
        service: String,
    },
    /// A census was started.
    CensusStarted {
        /// Its epoch.
        epoch: u64,
    },
    /// An own census ended.
    CensusEnded {
        /// How.
        outcome: CensusOutcome,
    },
    /// This replica made a new token.
    Regenerated {
        /// Its epoch.
        epoch: u64,
    },
    /// A ring recovery started here (the predecessor died).
    RecoveryStarted {
        /// The failed predecessor.
        failed: NodeId,
    },
    /// The recovery ended: IAmNewPrevious received (or the message came
    /// back, or this replica is alone).
    Recovered {
        /// Detection to end.
        took: Duration,
    },
    /// A fresh node recovered its peers' stored values.
    StateRecovered {
        /// Tokens at or below it are refused for ever.
        max: u64,
    },
    /// A lookup was answered.
    LookedUp {
        /// Request to answer.
        took: Duration,
    },
    /// A message with a value the protocol cannot accept was dropped.
    Refused {
        /// Its sender.
        from: NodeId,
        /// What was wrong (metric label).
        reason: &'static str,
    },
}

impl From<HbEvent> for RdEvent {
    fn from(e: HbEvent) -> Self {
        RdEvent::Hb(e)
    }
}
