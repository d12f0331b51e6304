//! What the core reports ([`NtEvent`]) and the types it carries.

use std::time::Duration;

use ftcore::{Incarnation, NodeId};
use lockservice::LockEvent;

/// What the core reports to metrics, logs and checkers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NtEvent {
    /// The local lock service did something (grant, release, …).
    Lock(LockEvent),
    /// The start-up handshake finished.
    Joined {
        /// True if this start created the cluster's first token state.
        bootstrap: bool,
    },
    /// A failure was detected and a recovery started.
    RecoveryStarted {
        /// Which mechanism.
        mech: Mech,
    },
    /// The token path is restored (Commit or token received).
    Recovered {
        /// The mechanism that started the recovery.
        mech: Mech,
        /// Detection to restoration.
        took: Duration,
    },
    /// This site regenerated the token.
    Regenerated {
        /// The new epoch.
        epoch: u64,
    },
    /// A token of an old epoch arrived and was discarded.
    StaleToken {
        /// Its epoch.
        epoch: u64,
    },
    /// The token held here was superseded by a newer epoch.
    TokenSuperseded {
        /// The old epoch.
        epoch: u64,
    },
    /// This site moved to a new life (a peer knew a newer one of it).
    NewLife {
        /// The new life.
        inc: Incarnation,
    },
    /// A fresh node (new disk) recovered what its peers stored.
    StateRecovered {
        /// The highest value answered; tokens at or below it are refused.
        max: u64,
    },
    /// A message with a value the protocol cannot accept (a non-member id,
    /// an absurd epoch) was dropped.
    Refused {
        /// Its sender.
        from: NodeId,
        /// What was wrong (metric label).
        reason: &'static str,
    },
    /// A peer is suspected to have failed.
    Suspected {
        /// The peer.
        node: NodeId,
    },
    /// The token arrived or left (for the has-token gauge).
    HasToken(bool),
    /// The known epoch changed.
    Epoch(u64),
    /// A token-holding site entered or left a critical section (granted).
    Entered {
        /// The fence of the grant.
        fence: u128,
    },
}

impl From<LockEvent> for NtEvent {
    fn from(e: LockEvent) -> Self {
        NtEvent::Lock(e)
    }
}

/// Recovery mechanisms of the seed (section 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mech {
    /// Ask the predecessors, closest first.
    M1,
    /// Broadcast SearchPrev.
    M2,
    /// No position: broadcast SearchQueue (with election).
    M3,
}

impl Mech {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Mech::M1 => "m1",
            Mech::M2 => "m2",
            Mech::M3 => "m3",
        }
    }
}
