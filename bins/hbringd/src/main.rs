//! `hbringd`: the heartbeat ring failure detector as a daemon.
//!
//! Every node heartbeats its live successor; silence marks a neighbour dead
//! and the ring repairs around it; restarted nodes rejoin at their
//! configured place. `ftctl status` shows the ring; metrics (prefix
//! `hbring_`) show suspicions and repair times. ringd embeds the same core;
//! this daemon exists to run it alone (and to test the runtime).
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

/// The `kind` of hbringd's one recovery: the ring closed around a failed
/// predecessor.
const RING: &str = "ring";

/// The ring's events as `hbring_` metrics; a repair is this daemon's
/// recovery.
fn on_event(e: &HbEvent, m: &Metrics) {
    if let HbEvent::Repaired { took, .. } = e {
        m.recovery_counted(RING);
        m.recovery(RING, *took);
    }
    m.ring_event(e);
}

fn declare(m: &Metrics) {
    m.declare_recoveries(&[RING], "Ring repairs this node completed (kind ring: a failed predecessor bypassed).");
    m.declare_ring();
}

fn main() -> ExitCode {
    daemon::main::<HbringdConfig, HbNode>(
        "The heartbeat ring failure detector: every node heartbeats its live successor; \
         silence marks a neighbour dead and the ring repairs around it.",
        env!("FTCOORD_VERSION"),
        DaemonSpec {
            metrics_prefix: "hbring",
            transport: TransportKind::Tcp,
            core_config: |cfg| HbConfig::new(cfg.common.timing.heartbeat(), cfg.common.timing.suspect_after()),
            on_event: Box::new(on_event),
            declare,
        },
    )
}
