//! The core's events as `ringd_` metrics and log lines (ringd.md, Metrics).

use runtime::metrics::{FirstToken, Metrics};

use crate::node::{CensusOutcome, RdEvent};

/// Tells the starting cluster's first token (INFO) from a lost one
/// regenerated (WARN): the core reports both as `Regenerated`.
static FIRST_TOKEN: FirstToken = FirstToken::new();

/// The `kind` label of ringd's recoveries: a ring recovery around a failed
/// predecessor (the token's own recovery is a census, counted by outcome).
const RING: &str = "ring";

/// Describes every `ringd_` metric (the exporter's HELP lines) and declares
/// the counters once at start (at 0).
pub fn declare(m: &Metrics) {
    FIRST_TOKEN.starting();
    describe(m);
    m.declare_ring();
    m.describe_fences();
    m.declare_recoveries(
        &[RING],
        "Ring recoveries this node completed, by kind (ring: its predecessor failed and the ring closed around it).",
    );
    for c in [
        "token_regenerations_total",
        "stale_answers_total",
        "stale_heeded_total",
        "token_passes_total",
        "stale_tokens_total",
        "lease_expiries_total",
        "superseded_total",
        "supervisor_kills_total",
    ] {
        metrics::counter!(m.name(c)).increment(0);
    }
    for o in [
        CensusOutcome::Regenerated,
        CensusOutcome::Busy,
        CensusOutcome::Stale,
        CensusOutcome::Lapsed,
        CensusOutcome::Aborted,
    ] {
        metrics::counter!(m.name("censuses_total"), "outcome" => o.label()).increment(0);
    }
}

/// Records one core event.
pub fn record(e: &RdEvent, m: &Metrics) {
    match e {
        RdEvent::Hb(e) => m.ring_event(e),
        RdEvent::Accepted { id } => {
            FIRST_TOKEN.token_seen();
            tracing::trace!(epoch = id.0, seq = id.1, "token accepted");
        }
        RdEvent::Passed { to } => {
            tracing::trace!(to = to.0, "token passed");
            metrics::counter!(m.name("token_passes_total")).increment(1);
        }
        RdEvent::Ran { fence, service, .. } => {
            tracing::debug!(epoch = fence.0, seq = fence.1, service, "token service ran");
            metrics::gauge!(m.name("fence_epoch")).set(fence.0 as f64);
            metrics::gauge!(m.name("fence_seq")).set(fence.1 as f64);
        }
        RdEvent::Executed { service, outcome } => {
            metrics::counter!(m.name("services_executed_total"), "service" => service.clone(), "outcome" => *outcome)
                .increment(1)
        }
        RdEvent::Rotated { took } => metrics::histogram!(m.name("token_rotation_seconds")).record(took.as_secs_f64()),
        RdEvent::StaleDiscarded => {
            FIRST_TOKEN.token_seen();
            metrics::counter!(m.name("stale_tokens_total")).increment(1);
        }
        RdEvent::StaleAnswered => metrics::counter!(m.name("stale_answers_total")).increment(1),
        RdEvent::StaleHeeded { .. } => metrics::counter!(m.name("stale_heeded_total")).increment(1),
        RdEvent::Superseded => {
            tracing::warn!("stopped owning the token (a newer one exists, or this replica was excluded)");
            metrics::counter!(m.name("superseded_total")).increment(1);
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
            metrics::counter!(m.name("lease_expiries_total")).increment(1);
        }
        RdEvent::SupervisorKilled { service } => {
            tracing::warn!(service, "a command service was killed at its deadline (timeout or lease end)");
            metrics::counter!(m.name("supervisor_kills_total")).increment(1);
        }
        RdEvent::CensusStarted { epoch } => tracing::info!(epoch, "census started"),
        RdEvent::CensusEnded { outcome } => {
            tracing::info!(outcome = outcome.label(), "census ended");
            metrics::counter!(m.name("censuses_total"), "outcome" => outcome.label()).increment(1);
        }
        RdEvent::Regenerated { epoch } => {
            if FIRST_TOKEN.made() {
                tracing::info!(epoch, "first token made (the ring is starting)");
            } else {
                tracing::warn!(epoch, "token regenerated");
            }
            metrics::counter!(m.name("token_regenerations_total")).increment(1);
        }
        RdEvent::RecoveryStarted { failed } => tracing::warn!(failed = failed.0, "predecessor failed: ring recovery"),
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
        RdEvent::LookedUp { took } => metrics::histogram!(m.name("lookup_seconds")).record(took.as_secs_f64()),
        RdEvent::Refused { from, reason } => {
            tracing::debug!(peer = from.0, reason, "message refused");
            metrics::counter!(m.name("refused_total"), "reason" => *reason).increment(1);
        }
    }
}

/// The HELP text of ringd's own metrics (the common ones, the heartbeat
/// ring's and the fence gauges are described by `runtime`).
fn describe(m: &Metrics) {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        m.name("token_regenerations_total"),
        "Tokens this node made after a census (a lost token regenerated)."
    );
    describe_counter!(
        m.name("censuses_total"),
        "Censuses this node ran, by outcome (regenerated, busy, stale, lapsed, aborted)."
    );
    describe_counter!(m.name("stale_answers_total"), "Stale answers sent to the holders of an older token.");
    describe_counter!(
        m.name("stale_heeded_total"),
        "Stale answers received while owning or handing on an older token (it stops owning)."
    );
    describe_counter!(m.name("token_passes_total"), "Tokens passed to the successor (first transmissions).");
    describe_counter!(m.name("stale_tokens_total"), "Stale tokens received and discarded.");
    describe_counter!(m.name("lease_expiries_total"), "Token leases that ran out with token services waiting.");
    describe_counter!(
        m.name("superseded_total"),
        "Times this node stopped owning the token (a newer one exists, or it was excluded); its token services were killed."
    );
    describe_counter!(
        m.name("supervisor_kills_total"),
        "Command services killed at their deadline (their timeout, or their token lease's end)."
    );
    describe_counter!(
        m.name("services_executed_total"),
        "Services answered, by service and outcome (ok or the error)."
    );
    describe_counter!(m.name("refused_total"), "Peer messages refused, by reason.");
    describe_histogram!(
        m.name("token_rotation_seconds"),
        Unit::Seconds,
        "Time the token took to come back to this node in the same epoch (one lap)."
    );
    describe_histogram!(
        m.name("lookup_seconds"),
        Unit::Seconds,
        "Time from a lookup request to its answer (the least loaded replica found on the ring)."
    );
    describe_gauge!(m.name("has_token"), "1 while this node owns the token, else 0.");
    describe_gauge!(m.name("epoch"), "The token epoch in use at this node; exact below 2^53.");
    describe_gauge!(m.name("ring_size"), "Live replicas in this node's view of the ring.");
    describe_gauge!(m.name("services_running"), "Services running on this node (commands and sleeps).");
    describe_gauge!(m.name("queued"), "Token services waiting here for the token.");
}
