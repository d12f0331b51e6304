//! ringd: a ring of replicas (ringd.md). Replicas detect failures with the
//! shared heartbeat ring and repair it with `IAmNewNext`; one token
//! circulates, carrying shared state that token services mutate under a
//! majority lease and a fence (epoch, seq); a lost token is regenerated
//! only by a census a majority promised; clients find the least-loaded
//! replica with a circulating `Find` and execute services there.
#![forbid(unsafe_code)]

pub mod config;
pub mod metrics;
pub mod msg;
pub mod node;

pub use config::RingdConfig;
pub use msg::{Msg, Token};
pub use node::{CensusOutcome, RdConfig, RdDurable, RdError, RdEvent, RdNode, RdRule, ServiceSpec};
