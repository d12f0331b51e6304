//! The latest life heard from each peer.

use std::collections::BTreeMap;

use crate::{Incarnation, NodeId};

/// The latest life ([`Incarnation`]) heard from each peer. The transport
/// refuses frames from older lives; a core that keeps this never acts on
/// one either ([`admit`](Self::admit)), and reports it in its peer view.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lives(BTreeMap<NodeId, Incarnation>);

impl Lives {
    /// A message from `peer`'s life `inc` arrived: records it and says
    /// whether to act on it (not if an older life than one already heard).
    pub fn admit(&mut self, peer: NodeId, inc: Incarnation) -> bool {
        let known = self.0.entry(peer).or_default();
        if inc < *known {
            return false;
        }
        *known = inc;
        true
    }

    /// The latest life heard from `peer` (the default if none).
    pub fn of(&self, peer: NodeId) -> Incarnation {
        self.0.get(&peer).copied().unwrap_or_default()
    }

    /// How many peers have been heard from.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no peer has been heard from.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_lives_are_not_admitted_and_newer_ones_replace() {
        let mut l = Lives::default();
        assert!(l.is_empty());
        assert_eq!(l.of(NodeId(2)), Incarnation::default());
        assert!(l.admit(NodeId(2), Incarnation(5)));
        assert!(l.admit(NodeId(2), Incarnation(5)), "the same life again");
        assert!(!l.admit(NodeId(2), Incarnation(4)), "an older life");
        assert_eq!(l.of(NodeId(2)), Incarnation(5));
        assert!(l.admit(NodeId(2), Incarnation(9)));
        assert!(l.admit(NodeId(3), Incarnation(1)));
        assert_eq!((l.of(NodeId(2)), l.len()), (Incarnation(9), 2));
    }
}
