//! Durable node state, the same for every daemon (the spec's foundation.md,
//! Durable state).
//!
//! - [`store`]: the node's `state_dir`, held with an exclusive lock for the
//!   process's life, and its small versioned state file, written atomically
//!   (temp file, fsync, rename, fsync of the directory). Used by the drivers
//!   (`runtime`, `sim` keeps its own in-memory disk), never by cores.
//! - [`promise`]: the sans-IO promise component every core embeds: the
//!   threshold and the floor, the promiser and proposer halves, promise
//!   windows and the restart window, fresh-node recovery.
//!
//! May depend on: `timer`, `membership`. Depended on by: `runtime`, `sim`
//! (tests), and every daemon core.
#![forbid(unsafe_code)]

pub mod promise;
pub mod store;
