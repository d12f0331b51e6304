//! `hbringd`: the heartbeat ring failure detector as a daemon.
//!
//! Every node heartbeats its live successor; silence marks a neighbour dead
//! and the ring repairs around it; restarted nodes rejoin at their
//! configured place. `ftctl status` shows the ring; metrics (prefix
//! `hbring_`) show suspicions and repair times. ringd and electd embed the
//! same core; this daemon exists to run it alone (and to test the runtime).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use hbring::{HbConfig, HbEvent, HbNode};
use runtime::config::DaemonConfig;
use runtime::daemon::{self, DaemonSpec, TransportKind};
use runtime::metrics::Metrics;
use serde::{Deserialize, Serialize};

/// hbringd has only the common keys (timing.heartbeat_ms and
/// timing.suspect_after_ms drive it).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
struct HbringdConfig {}

impl DaemonConfig for HbringdConfig {
    const NAME: &'static str = "hbringd";
}

fn on_event(e: &HbEvent, m: &Metrics) {
    match e {
        HbEvent::Suspected { node, inc } => {
            tracing::warn!(peer = node.0, incarnation = inc.0, "suspected failed");
            metrics::counter!(m.name("suspicions_total")).increment(1);
        }
        HbEvent::Down { node, inc } => {
            tracing::info!(peer = node.0, incarnation = inc.0, "reported down");
        }
        HbEvent::Up { node, inc } => {
            tracing::info!(peer = node.0, incarnation = inc.0, "up in a new life");
            metrics::counter!(m.name("rejoins_seen_total")).increment(1);
        }
        HbEvent::Rejoined { inc } => {
            tracing::warn!(incarnation = inc.0, "this node had been excluded; rejoined as a new life");
            metrics::counter!(m.name("self_rejoins_total")).increment(1);
        }
        HbEvent::Repaired { new_predecessor, took } => {
            tracing::info!(predecessor = new_predecessor.0, took_ms = took.as_millis() as u64, "ring repaired");
            metrics::counter!(m.name("recoveries_total")).increment(1);
            m.recovery(*took);
        }
        HbEvent::StaleMessage { .. } => metrics::counter!(m.name("stale_messages_total")).increment(1),
        HbEvent::ExcludedPeer { .. } => metrics::counter!(m.name("excluded_replies_total")).increment(1),
        HbEvent::PredecessorChanged { to, .. } => {
            tracing::info!(predecessor = to.map(|n| n.0), "predecessor changed");
        }
        HbEvent::SuccessorChanged { to, .. } => {
            tracing::info!(successor = to.map(|n| n.0), "successor changed");
        }
    }
}

/// Declares the counters once at start (at 0), so dashboards see them
/// before the first event.
fn declare(m: &Metrics) {
    for c in [
        "suspicions_total",
        "recoveries_total",
        "rejoins_seen_total",
        "self_rejoins_total",
        "stale_messages_total",
        "excluded_replies_total",
    ] {
        metrics::counter!(m.name(c)).increment(0);
    }
}

fn main() -> ExitCode {
    daemon::main::<HbringdConfig, HbNode>(
        "The heartbeat ring failure detector: every node heartbeats its live successor; \
         silence marks a neighbour dead and the ring repairs around it.",
        env!("CARGO_PKG_VERSION"),
        DaemonSpec {
            metrics_prefix: "hbring",
            transport: TransportKind::Tcp,
            core_config: |cfg| HbConfig::new(cfg.common.timing.heartbeat(), cfg.common.timing.suspect_after()),
            on_event: Box::new(on_event),
            declare,
        },
    )
}
