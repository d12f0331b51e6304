//! The in-memory state a site keeps besides its settings and what it
//! stores: timer kinds, the join phase, `last`, the token, recovery in
//! progress, and the small pure helpers on them.

use std::collections::{BTreeMap, BTreeSet};

use ftcore::{Incarnation, NodeId};
use timer::Instant;

use super::events::Mech;
use crate::msg::Msg;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Timer {
    Join,
    /// A fresh node's next recovery round.
    Recover,
    CommitWait,
    AliveCheck,
    Window,
    Provisional,
    Probe,
    /// The next liveness probe ([`NtConfig::liveness_every`](super::NtConfig::liveness_every)).
    Liveness,
    /// While holding the token: a wake-up every `suspect_after` that
    /// notices when this site was stalled (paused, starved) long enough to
    /// have been suspected.
    HolderCheck,
    /// The next lease renewal (or the end of a holder's backoff).
    Renew,
}

/// Where requests go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Last {
    /// This site is a root of the last tree.
    Root,
    /// Requests are forwarded to this site.
    Parent(NodeId),
    /// A new life that does not know the tree yet: requests get DeadEnd.
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Token {
    pub(super) epoch: u64,
    pub(super) counter: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Answer {
    pub(super) position: Option<u64>,
    pub(super) has_next: bool,
    pub(super) has_token: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Recovery {
    Idle,
    /// M1: asking `asking`; `rest` are the farther predecessors.
    M1 {
        started: Instant,
        asking: NodeId,
        rest: Vec<NodeId>,
    },
    /// M2 or M3 search window.
    Search {
        mech: Mech,
        started: Instant,
        waiting: BTreeSet<NodeId>,
        answers: BTreeMap<NodeId, Answer>,
    },
    /// Two-phase regeneration, phase one: the promises for `proposal` are
    /// counted by the promise component; `waiting` are the live sites that
    /// have not answered yet (every one of them must ack).
    Regen {
        mech: Mech,
        started: Instant,
        proposal: u64,
        waiting: BTreeSet<NodeId>,
    },
    /// Connection or direct request sent to `to`; waiting for a Commit or
    /// the token.
    Linking {
        mech: Mech,
        started: Instant,
        to: NodeId,
    },
}

impl Recovery {
    /// The mechanism in progress and when it started (`None` when idle).
    pub(super) fn progress(&self) -> Option<(Mech, Instant)> {
        match self {
            Recovery::Idle => None,
            Recovery::M1 { started, .. } => Some((Mech::M1, *started)),
            Recovery::Search { mech, started, .. }
            | Recovery::Regen { mech, started, .. }
            | Recovery::Linking { mech, started, .. } => Some((*mech, *started)),
        }
    }

    /// When the recovery in progress started.
    pub(super) fn started(&self) -> Option<Instant> {
        self.progress().map(|(_, started)| started)
    }

    /// Its name in `ftctl status`.
    pub(super) fn label(&self) -> &'static str {
        self.progress().map_or("none", |(mech, _)| mech.label())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Phase {
    Joining { fresh: BTreeSet<NodeId>, running_seen: bool, deferred: Vec<(NodeId, Incarnation, Msg)> },
    Running,
}

/// How a site asks to be linked behind a queue member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum LinkKind {
    /// `Connection`, naming the predecessors the requester found dead.
    Connection { failed: Vec<NodeId> },
    /// `DirectRequest`: a request sent to a chosen site, not along `last`.
    Direct,
}

/// M3.b: candidate 1 beats candidate 2 with fewer accesses, or as many and
/// a higher id.
pub(super) fn beats(a1: u64, id1: NodeId, a2: u64, id2: NodeId) -> bool {
    a1 < a2 || (a1 == a2 && id1 > id2)
}

/// Most messages kept while joining (a join lasts a few `t_msg`).
pub(super) const DEFERRED_MAX: usize = 1024;
