//! Identifiers.

use serde::{Deserialize, Serialize};

/// A node's configured identifier: unique in the cluster, greater than zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u32);

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// One life of a node: grows on every restart (the daemon uses its start
/// time in milliseconds), and is raised by one when a node learns that the
/// cluster has excluded its current life. A message carrying an older
/// incarnation than the one known for its sender is stale.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Incarnation(pub u64);

impl Incarnation {
    /// Lives stay below this: they are stored in the state file's signed
    /// 64-bit integers (wall-clock milliseconds reach it in 292 million
    /// years). A peer's claim of a life at or above it is refused, never
    /// adopted: a node that could not store its life would have to stop.
    pub const LIMIT: u64 = i64::MAX as u64;

    /// The next life of the same node.
    pub fn next(self) -> Incarnation {
        Incarnation(self.0.saturating_add(1))
    }

    /// Whether a node can move past this life and still store its own.
    pub fn leaves_room(self) -> bool {
        self.0 < Self::LIMIT - 1
    }
}

impl std::fmt::Display for Incarnation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "i{}", self.0)
    }
}
