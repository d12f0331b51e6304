//! tokenwatchd: a token ring over lossy UDP whose token is never lost and
//! never duplicated (tokenwatchd.md).
//!
//! The token carries a passing count; each receiver acknowledges a new
//! token with an ACK that travels L − 1 hops forward to its predecessor,
//! which retransmits until confirmed and then bypasses a silent successor
//! by a Claim. A Claim travels the ring once and makes a new token of a
//! higher epoch only if a majority stored its promise, so a process cut
//! off from the majority never holds beside it. Fences are (epoch, tpc).
//! Grants are leases (reliability.md, Pauses and leases): a holder grants
//! only under a lease a majority acked, and each ack refuses other Claims
//! while it lasts, so no two clients' leases overlap whatever pauses,
//! partitions and late datagrams do.
#![forbid(unsafe_code)]

pub mod config;
pub mod metrics;
pub mod msg;
pub mod node;

pub use config::TokenwatchdConfig;
pub use msg::{Claim, Msg};
pub use node::{ClaimOutcome, TwConfig, TwDurable, TwError, TwEvent, TwNode, TwRule};
