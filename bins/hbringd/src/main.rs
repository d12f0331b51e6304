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
use runtime::metrics::{Metric, Metrics, RING as HB_RING};
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

/// hbringd's own metric (besides the common ones and the heartbeat
/// ring's).
const TABLE: &[Metric] = &[Metric::counter(
    "recoveries_total",
    &["kind"],
    "Ring repairs this node completed (kind ring: a failed predecessor bypassed).",
)];

/// The ring's events as `hbring_` metrics; a repair is this daemon's
/// recovery.
fn on_event(e: &HbEvent, m: &Metrics) {
    if let HbEvent::Repaired { took, .. } = e {
        m.recovery_counted(RING);
        m.recovery(RING, *took);
    }
    hbring::metrics::record(e, |n| m.name(n), |p| runtime::metrics::DEPARTURES.left(p.0));
}

fn declare(m: &Metrics) {
    m.declare(TABLE);
    m.declare(HB_RING);
    m.declare_recoveries(&[RING]);
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

#[cfg(test)]
mod tests {
    use runtime::metrics::capture;

    use super::*;

    /// Every metric `declare` and the event mapping record (and the
    /// driver, from the core's gauges) is in a declared table, with its kind
    /// and labels; every one declared is recorded by some event.
    #[test]
    fn every_metric_recorded_is_declared_and_every_declared_one_recorded() {
        capture::assert_daemon_tables("hbring", declare, on_event, &hbring::metrics::examples(), &[]);
    }
}
