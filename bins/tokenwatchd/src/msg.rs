//! tokenwatchd's peer messages (tokenwatchd.md, Messages).
//!
//! Tokens, ACKs and Claims travel the ring to the successor in the live
//! view; the few replies (`ClaimAck`, `ClaimRefused`, `Stale`, `JoinAck`),
//! `Join`, and the lease messages (`LeaseRenew` and its answers) go
//! straight to their target.

use durable::promise::{Refusal, Values};
use ftcore::{message_kinds, NodeId};
use serde::{Deserialize, Serialize};

/// A regeneration proposal travelling the ring once (tokenwatchd.md,
/// Regeneration by a Claim promised by a majority).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Claim {
    /// The proposed epoch (above the claimant's floor).
    pub epoch: u64,
    /// Who proposed it.
    pub claimant: NodeId,
    /// The newest (epoch, tpc) the claimant accepted: a process that has
    /// accepted a newer token refuses (the claimant was bypassed).
    pub seen: (u64, u64),
    /// The highest stored tpc of the claimant and every adopter.
    pub max_tpc: u64,
    /// Who adopted (promised) the epoch, in ring order.
    pub adopters: Vec<NodeId>,
    /// Processes skipped as silent; the new token lists them as bypassed.
    pub skipped: Vec<NodeId>,
}

/// A message between tokenwatchd processes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Msg {
    /// The token: epoch, the passing count `m` of its sender, and the
    /// processes the live view leaves out.
    Token {
        /// The epoch the token was created in.
        epoch: u64,
        /// The token passing count last seen by the sender.
        m: u64,
        /// Processes the ring bypasses.
        bypassed: Vec<NodeId>,
        /// Hops since the token last served a client (0: its sender
        /// granted, has clients waiting, or was told of one by `Wanted`).
        /// A process holds the token for `token_min_hold_ms` only once it
        /// has gone a whole lap of the live ring without serving anyone:
        /// an idle ring does not spin it, a busy one is not slowed by it.
        quiet: u32,
    },
    /// Confirmation of a hand-off, travelling `ttl` more hops forward.
    Ack {
        /// The epoch of the token acknowledged.
        epoch: u64,
        /// Remaining hops.
        ttl: u32,
        /// The passing count of the process that issued the ACK.
        m: u64,
    },
    /// A token (or traffic) of an epoch this process will not accept: the
    /// sender drops its copy, stops waiting and claims above `epoch`.
    Stale {
        /// The highest epoch the refuser knows (in use or promised).
        epoch: u64,
    },
    /// Start-up handshake (foundation.md `Hello`): answered `JoinAck`, and
    /// the answerer re-admits the joiner into the live view.
    Join {
        /// Echoed in the answer.
        nonce: u64,
    },
    /// The answer to `Join`; `values` is `None` while the answerer is an
    /// unrecovered fresh node.
    JoinAck {
        /// The Join's nonce.
        nonce: u64,
        /// Its stored promise values.
        values: Option<Values>,
    },
    /// A regeneration proposal (one hop of its lap).
    Claim(Claim),
    /// One hop of a Claim arrived (whatever became of it there).
    ClaimAck {
        /// The Claim's epoch.
        epoch: u64,
        /// Its claimant.
        claimant: NodeId,
    },
    /// A process refused the Claim of `epoch`, adopting nothing (to the
    /// claimant): `Busy { remaining }` or `Promised { value }` (the spec's
    /// `Stale`), or another of the promise component's refusals.
    ClaimRefused {
        /// The refused Claim's epoch.
        epoch: u64,
        /// Why.
        refusal: Refusal,
    },
    /// A process with local clients holding or waiting renews its lease
    /// (reliability.md, Pauses and leases), to every peer.
    LeaseRenew {
        /// Acks name it.
        round: u64,
        /// The token's epoch (holding), or the highest epoch the sender
        /// accepted (waiting).
        epoch: u64,
        /// The sender's tpc: from the awaited successor, an (epoch, tpc)
        /// above the (epoch, m) handed off confirms the hand-off.
        tpc: u64,
        /// Whether the sender holds the token.
        holding: bool,
    },
    /// The renewal is acked: the sender adopts no other process's Claim
    /// for `lease_ms·(1+ρ)`.
    LeaseAck {
        /// The renewal's round.
        round: u64,
    },
    /// A client started waiting at the sender, and the token did not serve
    /// there when it last left (`ftcore::idle`): a process holding the
    /// token idle passes it on at once, marked as serving (`quiet` 0), so
    /// that none on the way holds it either. A hint: lost, the token comes
    /// after the idle holds as without it.
    Wanted,
    /// The renewal's epoch is below what the sender stored or promised: a
    /// holder drops its token (it may have been superseded) and grants
    /// nothing more.
    LeaseRefused {
        /// The renewal's round.
        round: u64,
        /// The refuser's threshold.
        threshold: u64,
    },
}

message_kinds!(Msg {
    Token => "token",
    Ack => "ack",
    Stale => "stale",
    Join => "join",
    JoinAck => "join_ack",
    Claim => "claim",
    ClaimAck => "claim_ack",
    ClaimRefused => "claim_refused",
    LeaseRenew => "lease_renew",
    LeaseAck => "lease_ack",
    LeaseRefused => "lease_refused",
    Wanted => "wanted",
});
