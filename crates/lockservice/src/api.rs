//! Messages between a local client and a lock-granting daemon.

use ftcore::message_kinds;
use serde::{Deserialize, Serialize};

/// A fence (interfaces.md, Fences): the pair (epoch, counter) of two u64,
/// ordered lexicographically, packed as one u128, `epoch·2⁶⁴ + counter`.
/// `FTCOORD_FENCE` is this number in decimal.
pub fn fence(epoch: u64, counter: u64) -> u128 {
    (u128::from(epoch) << 64) | u128::from(counter)
}

/// The (epoch, counter) of a packed fence.
pub fn fence_parts(fence: u128) -> (u64, u64) {
    ((fence >> 64) as u64, fence as u64)
}

/// What a local client asks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockRequest {
    /// Wait for the cluster-wide lock, at most `timeout_ms` milliseconds.
    Acquire {
        /// How long the client is willing to wait.
        timeout_ms: u64,
    },
    /// Give the lock back (or stop waiting for it).
    Release,
}

message_kinds!(LockRequest { Acquire => "acquire", Release => "release" });

/// What the daemon answers (or says unasked: `LockLost`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockReply {
    /// The lock is the client's; `fence` is larger than any fence granted
    /// before, anywhere in the cluster.
    Granted {
        /// The fencing token to pass to whatever the lock protects.
        fence: u128,
        /// The grant's lease ends at this CLOCK_MONOTONIC instant, in
        /// microseconds (`timer::monotonic_now` on the same host): stop
        /// using the resource by then unless a `Renewed` moves it
        /// (reliability.md, Pauses and leases).
        lease_until_us: u64,
    },
    /// The lease of the hold moved to `lease_until_us` (CLOCK_MONOTONIC,
    /// microseconds); sent while the daemon can prove it still holds the
    /// lock, never after `LockLost`.
    Renewed {
        /// The new end of the lease.
        lease_until_us: u64,
    },
    /// The wait ended at the client's deadline without a grant.
    TimedOut,
    /// The hold (or the wait) has ended at the client's request.
    Released,
    /// The hold ended without the client asking: revoked after `max_hold`,
    /// or the token was lost or superseded. Stop using the resource now.
    LockLost {
        /// Why, for the operator.
        reason: String,
    },
    /// The request was refused and changed nothing (a second acquire on the
    /// same connection, a release of a lock not held, the daemon leaving,
    /// the local queue full).
    Refused {
        /// Why.
        reason: String,
    },
}

message_kinds!(LockReply {
    Granted => "granted",
    Renewed => "renewed",
    TimedOut => "timed_out",
    Released => "released",
    LockLost => "lock_lost",
    Refused => "refused",
});
