//! Daemon plumbing shared by every ftcoord daemon: configuration
//! ([`config`]), logging ([`logging`]), metrics ([`metrics`]), the systemd
//! notify protocol ([`notify`]), the client API server ([`client_api`]), the
//! driver loop that owns a protocol core ([`driver`]), the node's durable
//! state at start-up ([`state`]), supervised commands ([`supervisor`]), and
//! the whole daemon's life from arguments to exit status ([`daemon`]).
//!
//! Daemon crates depend on this; it depends on the protocol-agnostic crates
//! (`wire`, `timer`, `membership`, `ftcore`, `api` for the client envelopes
//! it serves, `durable` for the state file) and never on a protocol crate
//! (the lock service's and the heartbeat ring's metrics are recorded by
//! `lockservice::metrics` and `hbring::metrics` against the tables declared
//! in [`metrics`]), a daemon, or the tokio `client` crate (the client
//! side). No protocol core depends on it.
#![forbid(unsafe_code)]

pub mod client_api;
pub mod config;
pub mod daemon;
pub mod driver;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod state;
pub mod supervisor;
