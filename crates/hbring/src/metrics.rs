//! The heartbeat ring's events as metrics and log lines, for every daemon
//! that runs the ring (hbringd, and ringd, which embeds it).

use std::time::Duration;

use ftcore::{Incarnation, NodeId};

use crate::HbEvent;

/// One event of each kind, for the daemons' tests that every metric
/// recorded is declared.
pub fn examples() -> Vec<HbEvent> {
    let (node, inc) = (NodeId(2), Incarnation(3));
    vec![
        HbEvent::Suspected { node, inc },
        HbEvent::Down { node, inc },
        HbEvent::Up { node, inc },
        HbEvent::Rejoined { inc },
        HbEvent::Repaired { new_predecessor: node, took: Duration::from_millis(40) },
        HbEvent::StaleMessage { from: node, inc },
        HbEvent::ExcludedPeer { node, inc },
        HbEvent::YieldedTo { node, inc },
        HbEvent::PredecessorChanged { from: None, to: Some(node) },
        HbEvent::SuccessorChanged { from: Some(node), to: None },
    ]
}

/// Records `e` as the heartbeat ring's counters (`runtime::metrics::RING`,
/// each named by `name`: the daemon's prefix added) and log lines. A
/// repair (`Repaired`) is only logged: what counts as a daemon's recovery
/// is its own business (hbringd: the repair; ringd: its IAmNewNext
/// recovery). `left` says whether a peer stopped gracefully (it said
/// goodbye): its suspicion is then logged at INFO, not WARN.
pub fn record(e: &HbEvent, name: impl Fn(&'static str) -> String, left: impl Fn(NodeId) -> bool) {
    match e {
        HbEvent::Suspected { node, inc } => {
            if left(*node) {
                tracing::info!(peer = node.0, incarnation = inc.0, "suspected failed: it stopped gracefully");
            } else {
                tracing::warn!(peer = node.0, incarnation = inc.0, "suspected failed");
            }
            metrics::counter!(name("suspicions_total")).increment(1);
        }
        HbEvent::Down { node, inc } => {
            tracing::info!(peer = node.0, incarnation = inc.0, "reported down");
        }
        HbEvent::Up { node, inc } => {
            tracing::info!(peer = node.0, incarnation = inc.0, "up in a new life");
            metrics::counter!(name("rejoins_seen_total")).increment(1);
        }
        HbEvent::Rejoined { inc } => {
            tracing::warn!(incarnation = inc.0, "this node had been excluded; rejoined as a new life");
            metrics::counter!(name("self_rejoins_total")).increment(1);
        }
        HbEvent::Repaired { new_predecessor, took } => {
            tracing::info!(predecessor = new_predecessor.0, took_ms = took.as_millis() as u64, "ring repaired");
        }
        HbEvent::StaleMessage { .. } => metrics::counter!(name("stale_messages_total")).increment(1),
        HbEvent::ExcludedPeer { .. } => metrics::counter!(name("excluded_replies_total")).increment(1),
        HbEvent::YieldedTo { node, inc } => {
            tracing::warn!(
                peer = node.0,
                incarnation = inc.0,
                "heard from a life held dead while this node's ring was a minority: rejoining instead of excluding it"
            );
            metrics::counter!(name("minority_yields_total")).increment(1);
        }
        HbEvent::PredecessorChanged { to, .. } => {
            tracing::info!(predecessor = to.map(|n| n.0), "predecessor changed");
        }
        HbEvent::SuccessorChanged { to, .. } => {
            tracing::info!(successor = to.map(|n| n.0), "successor changed");
        }
    }
}
