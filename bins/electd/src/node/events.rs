//! What the core reports to metrics, logs and checkers: [`ElEvent`] and
//! the outcome of a pre-vote it carries.

use std::time::Duration;

use ftcore::NodeId;
use lockservice::NamedEvent;

use super::Algorithm;

/// How a pre-vote ended, for the metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PreVoteOutcome {
    /// A majority said yes: the term started.
    Won,
    /// Not enough yes answers in time.
    Lost,
}

impl PreVoteOutcome {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            PreVoteOutcome::Won => "won",
            PreVoteOutcome::Lost => "lost",
        }
    }
}

/// What the core reports to metrics, logs and checkers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ElEvent {
    /// The local lock service did something (to a lock, or refused a
    /// request before any lock's queue).
    Lock(NamedEvent),
    /// The process may serve: it knows the coordinator (or is it).
    Joined,
    /// A higher term was joined (stored).
    TermJoined {
        /// The term.
        term: u64,
    },
    /// This process started an election in `term`.
    ElectionStarted {
        /// The term.
        term: u64,
        /// The algorithm.
        algorithm: Algorithm,
    },
    /// An election this process started or decided completed.
    ElectionCompleted {
        /// The algorithm.
        algorithm: Algorithm,
        /// The term.
        term: u64,
        /// Its coordinator.
        coordinator: NodeId,
        /// From the start of the term here.
        took: Duration,
    },
    /// A pre-vote ended.
    PreVote(PreVoteOutcome),
    /// An election message was sent (counted by kind).
    ElectionMessage {
        /// The message kind.
        kind: &'static str,
    },
    /// This process learnt the coordinator of its term.
    CoordinatorKnown {
        /// The term.
        term: u64,
        /// The coordinator.
        id: NodeId,
    },
    /// Coordinator suspected (or deposed) → a new coordinator known.
    Failover {
        /// How long it took.
        took: Duration,
    },
    /// This process took office as coordinator.
    TookOffice {
        /// The term.
        term: u64,
    },
    /// This process stopped being (or becoming) coordinator.
    SteppedDown {
        /// The term it left.
        term: u64,
        /// Why (log).
        why: &'static str,
    },
    /// The proposal deadline passed (`election_timeout·(1−ρ)` from joining
    /// the term) before this process's election came back or a majority
    /// acked it as coordinator: the result is dropped, term + 1 follows.
    PastDeadline {
        /// The term.
        term: u64,
    },
    /// A lower-term message was answered `StaleTerm`.
    StaleAnswered,
    /// A grant was issued (coordinator).
    Granted {
        /// Its fence.
        fence: u128,
        /// Time the request waited in the queue.
        waited: Duration,
    },
    /// A request was denied (coordinator, or a process that is not one).
    Denied {
        /// Why (metric label).
        reason: &'static str,
    },
    /// A grant's lease ran out (coordinator: the holder went silent;
    /// holder: its renewals were not acked in time).
    LeaseExpired,
    /// A later Coordinator of a term named another than the one followed.
    FollowConflict,
    /// A fresh node recovered what its peers stored.
    StateRecovered {
        /// Terms at or below it are never voted in.
        max: u64,
    },
    /// A message this process cannot accept was dropped.
    Refused {
        /// Its sender.
        from: NodeId,
        /// What was wrong (metric label).
        reason: &'static str,
    },
    /// The coordinator's queue length changed (gauge).
    QueueLength(usize),
}

impl From<NamedEvent> for ElEvent {
    fn from(e: NamedEvent) -> Self {
        ElEvent::Lock(e)
    }
}
