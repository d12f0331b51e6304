//! The in-memory state the node keeps beside its mechanisms' own: the
//! newest token known here and its role ([`Held`], [`Role`]), the token
//! services waiting for it ([`Job`]) and the results waiting for the
//! successor's ack ([`Pending`]).

use api::ring::Outcome;
use ftcore::{ClientId, Incarnation, NodeId};
use timer::Instant;

use crate::msg::Token;

/// What this replica is doing with the newest token it knows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Role {
    /// Installed here: token services run under the lease.
    Owned {
        /// When it arrived (or was made).
        since: Instant,
        /// Whether a token service has run in this visit (the next one
        /// raises seq first).
        ran: bool,
    },
    /// Sent to `to` (that life), not yet acked: resent every
    /// `suspect_after` and after a broken link.
    Unacked { to: NodeId, inc: Incarnation, last_sent: Instant },
    /// Acked by `to`; kept until its TokenRelease (or a newer token).
    Frozen { to: NodeId, inc: Incarnation },
    /// Released: kept only for censuses.
    Released,
    /// Not owned any more (superseded, excluded, overflow): a copy for
    /// censuses only.
    CopyOnly,
}

/// The newest token this replica knows, and its role here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Held {
    pub(super) token: Token,
    pub(super) role: Role,
}

/// A token service waiting for the token here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Job {
    pub(super) client: ClientId,
    pub(super) request_id: u64,
    pub(super) service: String,
    pub(super) args: Vec<String>,
}

/// A result waiting for the successor's TokenAck of the token carrying it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Pending {
    pub(super) client: ClientId,
    pub(super) request_id: u64,
    pub(super) service: String,
    pub(super) outcome: Outcome,
}
