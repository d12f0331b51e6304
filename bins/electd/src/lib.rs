//! electd: ring leader election and a FIFO coordinator (electd.md).
//!
//! Processes on a ring elect the highest id with the relay algorithm
//! (Dolev-Klawe-Rodeh / Peterson, at most 2n⌊log2 n⌋ + 2n messages) or the
//! alive-list ring election; every term is voted in by a majority that
//! stored its vote first, a pre-vote keeps a process with one-way
//! connectivity from deposing anyone, and the coordinator grants only
//! under a quorum lease renewed by heartbeats. Its access service grants
//! one holder at a time in FIFO order, each grant a lease with a fence
//! (term, counter) that never repeats or falls.
#![forbid(unsafe_code)]

pub mod config;
pub mod metrics;
pub mod msg;
pub mod node;
pub mod seed_env;

pub use config::ElectdConfig;
pub use msg::{Denial, Msg};
pub use node::{Algorithm, ElConfig, ElDurable, ElError, ElEvent, ElNode, ElRule, PreVoteOutcome};
