//! Daemon plumbing shared by every ftcoord daemon: configuration
//! ([`config`]), logging ([`logging`]) and the systemd notify protocol
//! ([`notify`]).
//!
//! Daemon crates depend on this; it depends on the protocol-agnostic crates
//! (`wire`, `timer`, `membership`, `ftcore`) and never on a daemon.
#![forbid(unsafe_code)]

pub mod config;
pub mod logging;
pub mod notify;
