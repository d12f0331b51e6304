//! The core's events as `ringd_` metrics and log lines (ringd.md, Metrics).

use runtime::metrics::{FirstToken, Metric, Metrics, DEPARTURES, FENCES, RING as HB_RING};

use crate::node::{CensusOutcome, RdEvent};

/// Tells the starting cluster's first token (INFO) from a lost one
/// regenerated (WARN): the core reports both as `Regenerated`.
static FIRST_TOKEN: FirstToken = FirstToken::new();

/// The `kind` label of ringd's recoveries: a ring recovery around a failed
/// predecessor (the token's own recovery is a census, counted by outcome).
const RING: &str = "ring";

/// ringd's own metrics (besides the common ones, the heartbeat ring's and
/// [`FENCES`]). The core's gauges (`has_token`, `epoch`, `ring_size`,
/// `services_running`, `queued` and the fence gauges) come from
/// `Protocol::gauges`.
pub const TABLE: &[Metric] = &[
    Metric::counter(
        "token_regenerations_total",
        &[],
        "Tokens this node made after a census (a lost token regenerated).",
    ),
    Metric::counter(
        "censuses_total",
        &["outcome"],
        "Censuses this node ran, by outcome (regenerated, busy, stale, lapsed, aborted).",
    ),
    Metric::counter("stale_answers_total", &[], "Stale answers sent to the holders of an older token."),
    Metric::counter(
        "stale_heeded_total",
        &[],
        "Stale answers received while owning or handing on an older token (it stops owning).",
    ),
    Metric::counter("token_passes_total", &[], "Tokens passed to the successor (first transmissions)."),
    Metric::counter("stale_tokens_total", &[], "Stale tokens received and discarded."),
    Metric::counter("lease_expiries_total", &[], "Token leases that ran out with token services waiting."),
    Metric::counter(
        "superseded_total",
        &[],
        "Times this node stopped owning the token (a newer one exists, or it was excluded); its token services were killed.",
    ),
    Metric::counter(
        "supervisor_kills_total",
        &[],
        "Command services killed at their deadline (their timeout, or their token lease's end).",
    ),
    Metric::counter(
        "services_executed_total",
        &["service", "outcome"],
        "Services answered, by service and outcome (ok or the error).",
    ),
    Metric::counter("refused_total", &["reason"], "Peer messages refused, by reason."),
    Metric::counter(
        "recoveries_total",
        &["kind"],
        "Ring recoveries this node completed, by kind (ring: its predecessor failed and the ring closed around it).",
    ),
    Metric::histogram(
        "token_rotation_seconds",
        &[],
        "Time the token took to come back to this node in the same epoch (one lap).",
    ),
    Metric::histogram(
        "lookup_seconds",
        &[],
        "Time from a lookup request to its answer (the least loaded replica found on the ring).",
    ),
    Metric::gauge("has_token", &[], "1 while this node owns the token, else 0."),
    Metric::gauge("epoch", &[], "The token epoch in use at this node; exact below 2^53."),
    Metric::gauge("ring_size", &[], "Live replicas in this node's view of the ring."),
    Metric::gauge("services_running", &[], "Services running on this node (commands and sleeps)."),
    Metric::gauge("queued", &[], "Token services waiting here for the token."),
];

/// Describes every `ringd_` metric (the exporter's HELP lines) and declares
/// the counters once at start (at 0).
pub fn declare(m: &Metrics) {
    FIRST_TOKEN.starting();
    m.declare(TABLE);
    m.declare(HB_RING);
    m.declare(FENCES);
    m.declare_recoveries(&[RING]);
    for o in [
        CensusOutcome::Regenerated,
        CensusOutcome::Busy,
        CensusOutcome::Stale,
        CensusOutcome::Lapsed,
        CensusOutcome::Aborted,
    ] {
        m.counter("censuses_total", &[("outcome", o.label())]).increment(0);
    }
}

/// Records one core event.
pub fn record(e: &RdEvent, m: &Metrics) {
    match e {
        RdEvent::Hb(e) => hbring::metrics::record(e, |n| m.name(n), |p| DEPARTURES.left(p.0)),
        RdEvent::Accepted { id } => {
            FIRST_TOKEN.token_seen();
            tracing::trace!(epoch = id.0, seq = id.1, "token accepted");
        }
        RdEvent::Passed { to } => {
            tracing::trace!(to = to.0, "token passed");
            m.counter("token_passes_total", &[]).increment(1);
        }
        RdEvent::Ran { fence, service, .. } => {
            tracing::debug!(epoch = fence.0, seq = fence.1, service, "token service ran");
            m.gauge("fence_epoch", &[]).set(fence.0 as f64);
            m.gauge("fence_seq", &[]).set(fence.1 as f64);
        }
        RdEvent::Executed { service, outcome } => {
            m.counter("services_executed_total", &[("service", service.as_str()), ("outcome", *outcome)]).increment(1)
        }
        RdEvent::Rotated { took } => m.histogram("token_rotation_seconds", &[]).record(took.as_secs_f64()),
        RdEvent::StaleDiscarded => {
            FIRST_TOKEN.token_seen();
            m.counter("stale_tokens_total", &[]).increment(1);
        }
        RdEvent::StaleAnswered => m.counter("stale_answers_total", &[]).increment(1),
        RdEvent::StaleHeeded { .. } => m.counter("stale_heeded_total", &[]).increment(1),
        RdEvent::Superseded => {
            tracing::warn!("stopped owning the token (a newer one exists, or this replica was excluded)");
            m.counter("superseded_total", &[]).increment(1);
        }
        RdEvent::SupersededWhileRunning { fence, by } => tracing::error!(
            epoch = fence.0,
            seq = fence.1,
            newer_epoch = by.0,
            newer_seq = by.1,
            "a newer token arrived while a token service of the owned one still ran (killed)"
        ),
        RdEvent::LeaseExpired => {
            tracing::warn!("the token lease expired with token services waiting");
            m.counter("lease_expiries_total", &[]).increment(1);
        }
        RdEvent::SupervisorKilled { service } => {
            tracing::warn!(service, "a command service was killed at its deadline (timeout or lease end)");
            m.counter("supervisor_kills_total", &[]).increment(1);
        }
        RdEvent::CensusStarted { epoch } => tracing::info!(epoch, "census started"),
        RdEvent::CensusEnded { outcome } => {
            tracing::info!(outcome = outcome.label(), "census ended");
            m.counter("censuses_total", &[("outcome", outcome.label())]).increment(1);
        }
        RdEvent::Regenerated { epoch } => {
            if FIRST_TOKEN.made() {
                tracing::info!(epoch, "first token made (the ring is starting)");
            } else {
                tracing::warn!(epoch, "token regenerated");
            }
            m.counter("token_regenerations_total", &[]).increment(1);
        }
        RdEvent::RecoveryStarted { failed } => {
            if DEPARTURES.left(failed.0) {
                tracing::info!(failed = failed.0, "predecessor stopped gracefully: ring recovery");
            } else {
                tracing::warn!(failed = failed.0, "predecessor failed: ring recovery");
            }
        }
        RdEvent::Recovered { took } => {
            tracing::info!(took_ms = took.as_millis() as u64, "ring recovered");
            m.recovery_counted(RING);
            m.recovery(RING, *took);
        }
        RdEvent::StateRecovered { max } => {
            // A fresh node's normal start (a first start, or a new disk).
            if *max > 0 {
                FIRST_TOKEN.token_seen();
            }
            tracing::info!(recovered_max = max, "fresh state recovered from the peers' answers")
        }
        RdEvent::LookedUp { took } => m.histogram("lookup_seconds", &[]).record(took.as_secs_f64()),
        RdEvent::Refused { from, reason } => {
            tracing::debug!(peer = from.0, reason, "message refused");
            m.counter("refused_total", &[("reason", *reason)]).increment(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ftcore::{Context, Incarnation, NodeId, Protocol};
    use membership::Membership;
    use timer::Instant;

    use runtime::metrics::capture;

    use super::*;
    use crate::node::{RdConfig, RdNode};

    /// One event of each kind.
    fn every_event() -> Vec<RdEvent> {
        let mut v: Vec<RdEvent> = hbring::metrics::examples().into_iter().map(RdEvent::Hb).collect();
        for outcome in [
            CensusOutcome::Regenerated,
            CensusOutcome::Busy,
            CensusOutcome::Stale,
            CensusOutcome::Lapsed,
            CensusOutcome::Aborted,
        ] {
            v.push(RdEvent::CensusEnded { outcome });
        }
        v.extend([
            RdEvent::Accepted { id: (2, 1) },
            RdEvent::Passed { to: NodeId(2) },
            RdEvent::Ran { fence: (2, 1), service: "incr".into(), request_id: 1, lease_until: Instant::ZERO },
            RdEvent::Executed { service: "incr".into(), outcome: "ok" },
            RdEvent::Rotated { took: Duration::from_millis(6) },
            RdEvent::StaleDiscarded,
            RdEvent::StaleAnswered,
            RdEvent::StaleHeeded { owned: true },
            RdEvent::Superseded,
            RdEvent::SupersededWhileRunning { fence: (2, 1), by: (3, 0) },
            RdEvent::LeaseExpired,
            RdEvent::SupervisorKilled { service: "hold".into() },
            RdEvent::CensusStarted { epoch: 2 },
            RdEvent::Regenerated { epoch: 3 },
            RdEvent::RecoveryStarted { failed: NodeId(3) },
            RdEvent::Recovered { took: Duration::from_millis(90) },
            RdEvent::StateRecovered { max: 3 },
            RdEvent::LookedUp { took: Duration::from_millis(2) },
            RdEvent::Refused { from: NodeId(2), reason: "epoch" },
        ]);
        v
    }

    /// The core's gauges (the driver records them).
    fn gauges() -> Vec<(&'static str, f64)> {
        let mut cfg = RdConfig::default();
        cfg.token_lost_after = cfg.derived_token_lost_after(3);
        let ctx = Context::new(NodeId(1), Incarnation(1), Membership::of_size(3), Instant::ZERO, cfg);
        RdNode::start(ctx).expect("valid config").gauges()
    }

    /// Every metric `declare` and the event mapping record (and the
    /// driver, from the core's gauges) is in a declared table, with its kind
    /// and labels; every one declared is recorded by some event.
    #[test]
    fn every_metric_recorded_is_declared_and_every_declared_one_recorded() {
        capture::assert_daemon_tables("ringd", declare, record, &every_event(), &gauges());
    }
}
