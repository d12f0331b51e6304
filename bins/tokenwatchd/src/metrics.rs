//! The core's events as `tokenwatch_` metrics and log lines
//! (tokenwatchd.md, Metrics).

use runtime::metrics::{FirstToken, Metrics};

use crate::node::{ClaimOutcome, TwEvent};

/// Tells the starting cluster's first token (INFO) from a lost one
/// regenerated (WARN): the core reports both as `Regenerated`.
static FIRST_TOKEN: FirstToken = FirstToken::new();

/// The `kind` of tokenwatchd's recovery: a lost token regenerated.
const REGENERATION: &str = "regeneration";

/// Declares the counters once at start (at 0).
pub fn declare(m: &Metrics) {
    FIRST_TOKEN.starting();
    describe(m);
    m.declare_recoveries(&[REGENERATION], "Lost tokens this node regenerated (kind regeneration: a Claim won).");
    m.declare_locks();
    for c in [
        "token_passes_total",
        "retransmissions_total",
        "stale_tokens_total",
        "reacks_total",
        "bypasses_total",
        "stale_answers_total",
        "superseded_total",
        "joins_total",
        "token_regenerations_total",
        "minority_drops_total",
    ] {
        metrics::counter!(m.name(c)).increment(0);
    }
    for how in ["sent", "forwarded"] {
        metrics::counter!(m.name("acks_total"), "how" => how).increment(0);
    }
    for o in [ClaimOutcome::Won, ClaimOutcome::Busy, ClaimOutcome::Refused, ClaimOutcome::Lapsed] {
        metrics::counter!(m.name("claims_total"), "outcome" => o.label()).increment(0);
    }
}

/// Records one core event.
pub fn record(e: &TwEvent, m: &Metrics) {
    match e {
        TwEvent::Lock(e) => m.lock_event(e),
        TwEvent::Joined => tracing::info!("joined the ring"),
        TwEvent::Accepted { .. } => FIRST_TOKEN.token_seen(),
        TwEvent::Rotated { took } => {
            metrics::histogram!(m.name("rotation_seconds")).record(took.as_secs_f64());
        }
        TwEvent::MinorityDropped => {
            tracing::warn!("no live successor and no majority: token copy dropped, claiming");
            metrics::counter!(m.name("minority_drops_total")).increment(1);
        }
        TwEvent::Passed { .. } => metrics::counter!(m.name("token_passes_total")).increment(1),
        TwEvent::Confirmed { took } => {
            metrics::histogram!(m.name("handoff_confirmation_seconds")).record(took.as_secs_f64());
        }
        TwEvent::Retransmitted => metrics::counter!(m.name("retransmissions_total")).increment(1),
        TwEvent::StaleDropped => {
            FIRST_TOKEN.token_seen();
            metrics::counter!(m.name("stale_tokens_total")).increment(1);
        }
        TwEvent::ReAcked => metrics::counter!(m.name("reacks_total")).increment(1),
        TwEvent::AckSent { forwarded } => {
            let how = if *forwarded { "forwarded" } else { "sent" };
            metrics::counter!(m.name("acks_total"), "how" => how).increment(1);
        }
        TwEvent::Bypassed { peer } => {
            tracing::warn!(peer = peer.0, "successor silent: bypassed by a Claim");
            metrics::counter!(m.name("bypasses_total")).increment(1);
        }
        TwEvent::StaleAnswered => metrics::counter!(m.name("stale_answers_total")).increment(1),
        TwEvent::Superseded => {
            tracing::warn!("the successor refused our token as stale: copy dropped, claiming");
            metrics::counter!(m.name("superseded_total")).increment(1);
        }
        TwEvent::ClaimStarted { epoch } => tracing::info!(epoch, "token lost or bypass: Claim started"),
        TwEvent::ClaimEnded { outcome } => {
            metrics::counter!(m.name("claims_total"), "outcome" => outcome.label()).increment(1);
        }
        TwEvent::Regenerated { epoch, tpc, took } => {
            let took_ms = took.as_millis() as u64;
            if FIRST_TOKEN.made() {
                tracing::info!(epoch, tpc, took_ms, "first token made (the ring is starting)");
            } else {
                tracing::warn!(epoch, tpc, took_ms, "token regenerated");
            }
            metrics::counter!(m.name("token_regenerations_total")).increment(1);
            m.recovery_counted(REGENERATION);
            m.recovery(REGENERATION, *took);
        }
        TwEvent::JoinAnswered => metrics::counter!(m.name("joins_total")).increment(1),
        TwEvent::StateRecovered { max } => {
            // A fresh node's normal start (a first start, or a new disk).
            if *max > 0 {
                FIRST_TOKEN.token_seen();
            }
            tracing::info!(recovered_max = max, "fresh state recovered from the peers' answers");
        }
        TwEvent::Refused { from, reason } => {
            tracing::warn!(peer = from.0, reason, "peer message with an unacceptable value dropped");
            metrics::counter!(m.name("messages_refused_total"), "reason" => *reason).increment(1);
        }
        TwEvent::HasToken(has) => metrics::gauge!(m.name("has_token")).set(if *has { 1.0 } else { 0.0 }),
    }
}

/// The HELP text of tokenwatchd's own metrics (the common and lock service
/// ones are described by `runtime`).
fn describe(m: &Metrics) {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(m.name("token_passes_total"), "Tokens passed to the successor (first transmissions).");
    describe_counter!(m.name("retransmissions_total"), "Token retransmissions (no acknowledgement in time).");
    describe_counter!(m.name("stale_tokens_total"), "Stale tokens received and dropped.");
    describe_counter!(m.name("reacks_total"), "Acknowledgements sent again for a token already received.");
    describe_counter!(m.name("bypasses_total"), "Silent successors bypassed by a Claim.");
    describe_counter!(m.name("stale_answers_total"), "Stale answers sent to the senders of an older token.");
    describe_counter!(m.name("superseded_total"), "Token copies dropped because the successor refused them as stale.");
    describe_counter!(m.name("joins_total"), "Join requests of other nodes answered.");
    describe_counter!(
        m.name("token_regenerations_total"),
        "Tokens this node made after winning a Claim (a lost token regenerated)."
    );
    describe_counter!(m.name("minority_drops_total"), "Token copies dropped with no live successor and no majority.");
    describe_counter!(m.name("acks_total"), "Token acknowledgements, by how (sent by the receiver, or forwarded).");
    describe_counter!(m.name("claims_total"), "Claims this node ran, by outcome (won, busy, refused, lapsed).");
    describe_counter!(
        m.name("messages_refused_total"),
        "Peer messages dropped for a value that cannot be accepted, by reason."
    );
    describe_histogram!(
        m.name("rotation_seconds"),
        Unit::Seconds,
        "Time the token took to come back to this node in the same epoch (one lap)."
    );
    describe_histogram!(
        m.name("handoff_confirmation_seconds"),
        Unit::Seconds,
        "Time from passing the token to its acknowledgement by the successor."
    );
    describe_gauge!(m.name("has_token"), "1 while this node holds the token, else 0.");
    describe_gauge!(m.name("tpc"), "The token pass counter of the latest token seen here; exact below 2^53.");
    describe_gauge!(m.name("epoch"), "The token epoch in use at this node; exact below 2^53.");
}
