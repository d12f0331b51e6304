//! The node's durable state at start-up (foundation.md, Durable state):
//! lock `state_dir`, read the state file, number this life and store the
//! number before the node speaks.
//!
//! The file holds one [`NodeState`]: the incarnation, and the protocol
//! core's own durable state once cores keep some (`core`, generic so that
//! each daemon names its type; absent until then). The file itself, its
//! format and its errors are `durable::store`'s.

use std::path::Path;

use durable::store::{next_incarnation, StateDir, StoreError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// What a daemon's state file holds.
///
/// Unknown fields are refused: a field added later holds something a
/// node must not forget, so an older build that would drop it on its next
/// write stops instead (a new field that an older build may safely drop
/// belongs inside `core`, with a format-version bump otherwise).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NodeState<C> {
    /// The latest life of this node, stored before it spoke.
    pub incarnation: u64,
    /// The protocol core's durable state; `None` until the core stores some.
    #[serde(default = "Option::default", skip_serializing_if = "Option::is_none")]
    pub core: Option<C>,
}

/// The locked directory and what start-up read and stored.
#[derive(Debug)]
pub struct Started<C> {
    /// The state directory, locked until this is dropped.
    pub dir: StateDir,
    /// This life's incarnation, already stored.
    pub incarnation: u64,
    /// The incarnation the file held, `None` for a fresh node (no file).
    pub stored_incarnation: Option<u64>,
    /// The core's stored state, written back unchanged.
    pub core: Option<C>,
}

/// Opens and locks `state_dir` for `daemon`, loads its state file, and
/// stores the new incarnation, `max(wall_clock_ms, stored + 1)`, keeping
/// the rest of the file. On error nothing was written.
pub fn start<C: Serialize + DeserializeOwned>(
    state_dir: &Path,
    daemon: &str,
    wall_clock_ms: u64,
) -> Result<Started<C>, StoreError> {
    let dir = StateDir::open(state_dir, daemon)?;
    let (stored_incarnation, core) = match dir.load::<NodeState<C>>()? {
        Some(s) => (Some(s.incarnation), s.core),
        None => (None, None),
    };
    let state = NodeState { incarnation: next_incarnation(stored_incarnation, wall_clock_ms)?, core };
    dir.store(&state)?;
    Ok(Started { dir, incarnation: state.incarnation, stored_incarnation, core: state.core })
}

#[cfg(test)]
mod tests {
    use super::*;

    type Core = toml::Table;

    #[test]
    fn fresh_then_restart_then_clock_step_back() {
        let tmp = tempfile::tempdir().unwrap();
        let s = start::<Core>(tmp.path(), "testd", 1_000).unwrap();
        assert_eq!((s.incarnation, s.stored_incarnation, s.core.is_none()), (1_000, None, true));
        drop(s);
        let s = start::<Core>(tmp.path(), "testd", 2_000).unwrap();
        assert_eq!((s.incarnation, s.stored_incarnation), (2_000, Some(1_000)));
        drop(s);
        // The wall clock went back: still a newer life.
        let s = start::<Core>(tmp.path(), "testd", 10).unwrap();
        assert_eq!((s.incarnation, s.stored_incarnation), (2_001, Some(2_000)));
    }

    #[test]
    fn the_core_part_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path(), "testd").unwrap();
        let core: Core = toml::from_str("threshold = 7\n[promise]\nto = 3\n").unwrap();
        dir.store(&NodeState { incarnation: 5, core: Some(core.clone()) }).unwrap();
        drop(dir);
        let s = start::<Core>(tmp.path(), "testd", 1).unwrap();
        assert_eq!((s.incarnation, s.core.as_ref()), (6, Some(&core)));
        let back: Option<NodeState<Core>> = s.dir.load().unwrap();
        assert_eq!(back, Some(NodeState { incarnation: 6, core: Some(core) }));
    }

    #[test]
    fn unknown_fields_and_errors_stop_the_start() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path(), "testd").unwrap();
        #[derive(Serialize)]
        struct Newer {
            incarnation: u64,
            vote: u64,
        }
        dir.store(&Newer { incarnation: 5, vote: 2 }).unwrap();
        drop(dir);
        let e = start::<Core>(tmp.path(), "testd", 1).unwrap_err();
        assert!(e.to_string().contains("unknown field `vote`"), "{e}");
        // Nothing was written: the file still holds the newer fields.
        assert!(std::fs::read_to_string(tmp.path().join("testd.state")).unwrap().contains("vote = 2"));

        let held = StateDir::open(tmp.path().join("other"), "testd").unwrap();
        let e = start::<Core>(held.path(), "testd", 1).unwrap_err();
        assert!(matches!(e, StoreError::Locked { .. }), "{e:?}");
    }
}
