//! Messages between a local client and a lock-granting daemon.

use ftcore::message_kinds;
use serde::{Deserialize, Serialize};

use crate::LockName;

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
    /// Wait for the lock `name`, at most `timeout_ms` milliseconds (kind
    /// 2, appended: kinds 0 and 1 keep their bytes). One connection waits
    /// for or holds one lock at a time. Daemons that serve one unnamed
    /// lock refuse it.
    AcquireNamed {
        /// The lock (1–128 bytes of `[A-Za-z0-9._/-]`).
        name: LockName,
        /// How long the client is willing to wait.
        timeout_ms: u64,
    },
    /// The locks this node knows (answered [`LockReply::Locks`]); changes
    /// nothing, and the connection may still acquire afterwards.
    ListLocks,
    /// Campaign in election `name` (kind 4; elections.md): wait, at most
    /// `timeout_ms`, to lead; answered as a lock's acquire (`Granted`,
    /// `Renewed`, `LockLost`, `TimedOut`, `Refused`); `Release` resigns.
    /// Only electd serves elections.
    Campaign {
        /// The election (a user name; its lock is `elect:NAME`).
        name: LockName,
        /// What observers see while this campaigner leads (UTF-8, at
        /// most [`MAX_VALUE`] bytes).
        value: String,
        /// How long the campaigner is willing to wait.
        timeout_ms: u64,
    },
    /// Who leads election `name` (kind 5): answered [`LockReply::Leader`]
    /// once; with `watch`, again on every change until the connection
    /// closes or the client sends `Release`.
    Observe {
        /// The election (a user name).
        name: LockName,
        /// Keep reporting changes.
        watch: bool,
    },
}

/// The most bytes of a campaigner's value.
pub const MAX_VALUE: usize = 1024;

/// An election's leader, as observers see it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaderInfo {
    /// The node whose client leads.
    pub node: u64,
    /// The leadership's fence.
    pub fence: u128,
    /// The leader's value.
    pub value: String,
}

message_kinds!(LockRequest {
    Acquire => "acquire",
    Release => "release",
    AcquireNamed => "acquire_named",
    ListLocks => "list_locks",
    Campaign => "campaign",
    Observe => "observe",
});

/// One lock a node knows, as `ftctl locks` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LockInfo {
    /// The lock (empty: the unnamed lock).
    pub name: LockName,
    /// The fence of a local client's hold, if one holds it here.
    pub held_fence: Option<u128>,
    /// The fence of the last grant made here while this node knew the
    /// name (electd; daemons serving one unnamed lock report only
    /// `held_fence` and leave this empty).
    pub last_fence: Option<u128>,
    /// Local clients waiting for it.
    pub waiters: u32,
}

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
    /// The answer to `ListLocks`: the names with the most local waiters
    /// first, at most [`MAX_LISTED`] of them, and how many the node knows.
    Locks {
        /// The locks listed.
        locks: Vec<LockInfo>,
        /// How many this node knows in all (more than listed if over the cap).
        known: u64,
    },
    /// Who leads an election (the answer to `Observe`, and each change
    /// while watching).
    Leader {
        /// The election (a user name).
        name: LockName,
        /// The leader, or `None`: nobody leads.
        leader: Option<LeaderInfo>,
    },
}

/// The most locks one `Locks` reply lists (it fits one client frame).
pub const MAX_LISTED: usize = 256;

message_kinds!(LockReply {
    Granted => "granted",
    Renewed => "renewed",
    TimedOut => "timed_out",
    Released => "released",
    LockLost => "lock_lost",
    Refused => "refused",
    Locks => "locks",
    Leader => "leader",
});
