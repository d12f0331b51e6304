//! The core's events as `tokenwatch_` metrics and log lines
//! (tokenwatchd.md, Metrics).

use runtime::metrics::{FirstToken, Metric, Metrics, FENCES, LOCKS};

use crate::node::{ClaimOutcome, TwEvent};

/// Tells the starting cluster's first token (INFO) from a lost one
/// regenerated (WARN): the core reports both as `Regenerated`.
static FIRST_TOKEN: FirstToken = FirstToken::new();

/// The `kind` of tokenwatchd's recovery: a lost token regenerated.
const REGENERATION: &str = "regeneration";

/// tokenwatchd's own metrics (besides the common ones, [`FENCES`] and
/// [`LOCKS`]). The core's gauges (`has_token`, `tpc`, `epoch`) come from
/// `Protocol::gauges`.
pub const TABLE: &[Metric] = &[
    Metric::counter("token_passes_total", &[], "Tokens passed to the successor (first transmissions)."),
    Metric::counter("retransmissions_total", &[], "Token retransmissions (no acknowledgement in time)."),
    Metric::counter("stale_tokens_total", &[], "Stale tokens received and dropped."),
    Metric::counter("reacks_total", &[], "Acknowledgements sent again for a token already received."),
    Metric::counter("bypasses_total", &[], "Silent successors bypassed by a Claim."),
    Metric::counter("stale_answers_total", &[], "Stale answers sent to the senders of an older token."),
    Metric::counter("superseded_total", &[], "Token copies dropped because the successor refused them as stale."),
    Metric::counter("joins_total", &[], "Join requests of other nodes answered."),
    Metric::counter(
        "token_regenerations_total",
        &[],
        "Tokens this node made after winning a Claim (a lost token regenerated).",
    ),
    Metric::counter("minority_drops_total", &[], "Token copies dropped with no live successor and no majority."),
    Metric::counter("acks_total", &["how"], "Token acknowledgements, by how (sent by the receiver, or forwarded)."),
    Metric::counter("claims_total", &["outcome"], "Claims this node ran, by outcome (won, busy, refused, lapsed)."),
    Metric::counter(
        "messages_refused_total",
        &["reason"],
        "Peer messages dropped for a value that cannot be accepted, by reason.",
    ),
    Metric::counter(
        "recoveries_total",
        &["kind"],
        "Lost tokens this node regenerated (kind regeneration: a Claim won).",
    ),
    Metric::histogram(
        "rotation_seconds",
        &[],
        "Time the token took to come back to this node in the same epoch (one lap).",
    ),
    Metric::histogram(
        "handoff_confirmation_seconds",
        &[],
        "Time from passing the token to its acknowledgement by the successor.",
    ),
    Metric::gauge("has_token", &[], "1 while this node holds the token, else 0."),
    Metric::gauge("tpc", &[], "The token pass counter of the latest token seen here; exact below 2^53."),
    Metric::gauge("epoch", &[], "The token epoch in use at this node; exact below 2^53."),
];

/// Declares the metrics once at start (counters at 0).
pub fn declare(m: &Metrics) {
    FIRST_TOKEN.starting();
    m.declare(TABLE);
    m.declare(FENCES);
    m.declare(LOCKS);
    m.declare_recoveries(&[REGENERATION]);
    for how in ["sent", "forwarded"] {
        m.counter("acks_total", &[("how", how)]).increment(0);
    }
    for o in [ClaimOutcome::Won, ClaimOutcome::Busy, ClaimOutcome::Refused, ClaimOutcome::Lapsed] {
        m.counter("claims_total", &[("outcome", o.label())]).increment(0);
    }
}

/// Records one core event.
pub fn record(e: &TwEvent, m: &Metrics) {
    match e {
        TwEvent::Lock(e) => lockservice::metrics::record(e, |n| m.name(n)),
        TwEvent::Joined => tracing::info!("joined the ring"),
        TwEvent::Accepted { .. } => FIRST_TOKEN.token_seen(),
        TwEvent::Rotated { took } => {
            m.histogram("rotation_seconds", &[]).record(took.as_secs_f64());
        }
        TwEvent::MinorityDropped => {
            tracing::warn!("no live successor and no majority: token copy dropped, claiming");
            m.counter("minority_drops_total", &[]).increment(1);
        }
        TwEvent::Passed { .. } => m.counter("token_passes_total", &[]).increment(1),
        TwEvent::Confirmed { took } => {
            m.histogram("handoff_confirmation_seconds", &[]).record(took.as_secs_f64());
        }
        TwEvent::Retransmitted => m.counter("retransmissions_total", &[]).increment(1),
        TwEvent::StaleDropped => {
            FIRST_TOKEN.token_seen();
            m.counter("stale_tokens_total", &[]).increment(1);
        }
        TwEvent::ReAcked => m.counter("reacks_total", &[]).increment(1),
        TwEvent::AckSent { forwarded } => {
            let how = if *forwarded { "forwarded" } else { "sent" };
            m.counter("acks_total", &[("how", how)]).increment(1);
        }
        TwEvent::Bypassed { peer } => {
            tracing::warn!(peer = peer.0, "successor silent: bypassed by a Claim");
            m.counter("bypasses_total", &[]).increment(1);
        }
        TwEvent::StaleAnswered => m.counter("stale_answers_total", &[]).increment(1),
        TwEvent::Superseded => {
            tracing::warn!("the successor refused our token as stale: copy dropped, claiming");
            m.counter("superseded_total", &[]).increment(1);
        }
        TwEvent::ClaimStarted { epoch } => tracing::info!(epoch, "token lost or bypass: Claim started"),
        TwEvent::ClaimEnded { outcome } => {
            m.counter("claims_total", &[("outcome", outcome.label())]).increment(1);
        }
        TwEvent::Regenerated { epoch, tpc, took } => {
            let took_ms = took.as_millis() as u64;
            if FIRST_TOKEN.made() {
                tracing::info!(epoch, tpc, took_ms, "first token made (the ring is starting)");
            } else {
                tracing::warn!(epoch, tpc, took_ms, "token regenerated");
            }
            m.counter("token_regenerations_total", &[]).increment(1);
            m.recovery_counted(REGENERATION);
            m.recovery(REGENERATION, *took);
        }
        TwEvent::JoinAnswered => m.counter("joins_total", &[]).increment(1),
        TwEvent::StateRecovered { max } => {
            // A fresh node's normal start (a first start, or a new disk).
            if *max > 0 {
                FIRST_TOKEN.token_seen();
            }
            tracing::info!(recovered_max = max, "fresh state recovered from the peers' answers");
        }
        TwEvent::Refused { from, reason } => {
            tracing::warn!(peer = from.0, reason, "peer message with an unacceptable value dropped");
            m.counter("messages_refused_total", &[("reason", *reason)]).increment(1);
        }
        TwEvent::HasToken(has) => m.gauge("has_token", &[]).set(if *has { 1.0 } else { 0.0 }),
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
    use crate::node::{TwConfig, TwNode};

    /// One event of each kind.
    fn every_event() -> Vec<TwEvent> {
        let mut v: Vec<TwEvent> = lockservice::metrics::examples().into_iter().map(TwEvent::Lock).collect();
        for outcome in [ClaimOutcome::Won, ClaimOutcome::Busy, ClaimOutcome::Refused, ClaimOutcome::Lapsed] {
            v.push(TwEvent::ClaimEnded { outcome });
        }
        v.extend([
            TwEvent::Joined,
            TwEvent::Accepted { epoch: 1, tpc: 2 },
            TwEvent::Passed { to: NodeId(2) },
            TwEvent::Confirmed { took: Duration::from_millis(3) },
            TwEvent::Retransmitted,
            TwEvent::StaleDropped,
            TwEvent::ReAcked,
            TwEvent::AckSent { forwarded: false },
            TwEvent::AckSent { forwarded: true },
            TwEvent::Bypassed { peer: NodeId(2) },
            TwEvent::StaleAnswered,
            TwEvent::Superseded,
            TwEvent::ClaimStarted { epoch: 2 },
            TwEvent::Regenerated { epoch: 2, tpc: 0, took: Duration::from_millis(50) },
            TwEvent::JoinAnswered,
            TwEvent::StateRecovered { max: 3 },
            TwEvent::Refused { from: NodeId(2), reason: "epoch" },
            TwEvent::HasToken(true),
            TwEvent::Rotated { took: Duration::from_millis(8) },
            TwEvent::MinorityDropped,
        ]);
        v
    }

    /// The core's gauges (the driver records them).
    fn gauges() -> Vec<(&'static str, f64)> {
        let ctx = Context::new(NodeId(1), Incarnation(1), Membership::of_size(3), Instant::ZERO, TwConfig::default());
        TwNode::start(ctx).expect("valid config").gauges()
    }

    /// Every metric `declare` and the event mapping record (and the
    /// driver, from the core's gauges) is in a declared table, with its kind
    /// and labels; every one declared is recorded by some event.
    #[test]
    fn every_metric_recorded_is_declared_and_every_declared_one_recorded() {
        capture::assert_daemon_tables("tokenwatch", declare, record, &every_event(), &gauges());
    }
}
