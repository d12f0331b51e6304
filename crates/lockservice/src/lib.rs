//! The lock API that ntmutexd, tokenwatchd, electd (and ringd's token)
//! serve to local clients, and the local queue behind it.
//!
//! [`LockRequest`] / [`LockReply`] are the client-visible messages (what
//! `ftctl lock` speaks). [`LocalLocks`] is a sans-IO component a protocol
//! core embeds: it queues local clients in FIFO order with their deadlines,
//! tells the core whether it needs the cluster-wide token, grants to one
//! client at a time with the fence the core supplies while the core holds
//! the token, serves only the clients queued when the token arrived (no
//! starvation of other sites), revokes holds that exceed `max_hold`, and
//! releases whatever a disconnected client held. Every grant is a lease
//! that ends at an instant of the host's CLOCK_MONOTONIC; [`lease`] is the
//! renewal protocol behind it (reliability.md, Pauses and leases).
//!
//! May depend on: `ftcore`, `timer`. Used by every lock-granting daemon
//! core (ntmutexd, tokenwatchd, electd) and `ftctl` (the API types).
#![forbid(unsafe_code)]

mod api;
pub mod check;
pub mod lease;
mod local;
pub mod metrics;
mod name;
mod named;

pub use api::{fence, fence_parts, LeaderInfo, LockInfo, LockReply, LockRequest, MAX_LISTED, MAX_VALUE};
pub use local::{LocalLocks, LockEvent, LockOut, LocksConfig, ReleaseHow};
pub use name::{LockName, NameError, ELECTION_PREFIX, MAX_NAME_LEN};
pub use named::{NamedEvent, NamedLocks};
