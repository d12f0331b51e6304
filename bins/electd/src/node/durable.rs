//! What the core stores: [`ElDurable`], written through one `Persist`
//! ahead of the outputs it guards.

use durable::promise::Promises;
use ftcore::NodeId;
use serde::{Deserialize, Serialize};

/// What a process keeps on disk, stored before anything that depends on it
/// is sent: its promises (votes, terms acked in use; fresh-node recovery),
/// the highest term it joined and whom it follows there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ElDurable {
    /// The promise component's stored part (`None`: never written).
    pub promises: Option<Promises>,
    /// The highest term joined.
    pub term: u64,
    /// The coordinator followed in `term` (never changes within it).
    pub follows: Option<NodeId>,
}
