//! ntmutexd: a cluster-wide mutex on the Naimi-Trehel algorithm, made
//! fault tolerant as in Sopena, Arantes, Bertier and Sens (Euro-Par 2005).
//!
//! Sites request the one token along a *last* tree whose edges they
//! reverse as requests pass (path reversal: O(log N) messages per critical
//! section on average); a site that holds or awaits the token queues the
//! next requester behind itself (*next*). Each queued site gets a COMMIT
//! naming its position and its k closest predecessors, and checks the
//! closest one's liveness with timers that depend on message latency only.
//! When a predecessor fails: M1 asks the farther predecessors, M2
//! broadcasts for the nearest smaller position, M3 (no position yet)
//! searches for the queue with an election among concurrent detectors and
//! rebuilds the last tree. When nobody holds or precedes, the token is
//! regenerated in two phases under a new epoch, so it is never duplicated;
//! fences (epoch << 32 | grant counter) only grow.
//!
//! Local clients queue in FIFO order ([`lockservice`]); the daemon
//! requests the token once for all of them.
#![forbid(unsafe_code)]

pub mod config;
pub mod metrics;
pub mod msg;
pub mod node;

pub use config::NtmutexdConfig;
pub use msg::{Body, Msg};
pub use node::{Mech, NtConfig, NtError, NtEvent, NtNode, NtRule};
