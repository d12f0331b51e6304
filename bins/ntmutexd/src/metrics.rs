//! The core's events as `ntmutex_` metrics and log lines.

use runtime::metrics::Metrics;

use crate::node::NtEvent;

/// Declares the counters once at start (at 0), so dashboards and alerts see
/// them before the first event. The core's gauges (`queue_position`,
/// `local_waiting`) come from `Protocol::gauges`.
pub fn declare(m: &Metrics) {
    m.declare_locks();
    for c in ["token_regenerations_total", "stale_tokens_total"] {
        metrics::counter!(m.name(c)).increment(0);
    }
    for reason in ["non_member", "epoch", "value", "joining_buffer_full"] {
        metrics::counter!(m.name("messages_refused_total"), "reason" => reason).increment(0);
    }
    for mech in ["m1", "m2", "m3"] {
        metrics::counter!(m.name("recoveries_total"), "mechanism" => mech).increment(0);
    }
}

/// Records one core event.
pub fn record(e: &NtEvent, m: &Metrics) {
    match e {
        NtEvent::Lock(e) => m.lock_event(e),
        NtEvent::Joined { bootstrap } => tracing::info!(bootstrap, "joined the cluster"),
        NtEvent::RecoveryStarted { mech } => {
            tracing::warn!(mechanism = mech.label(), "failure detected: recovery started");
            metrics::counter!(m.name("recoveries_total"), "mechanism" => mech.label()).increment(1);
        }
        NtEvent::Recovered { mech, took } => {
            tracing::info!(mechanism = mech.label(), took_ms = took.as_millis() as u64, "token path restored");
            metrics::histogram!(m.name("recovery_duration_seconds"), "mechanism" => mech.label())
                .record(took.as_secs_f64());
        }
        NtEvent::Regenerated { epoch } => {
            tracing::warn!(epoch, "token regenerated");
            metrics::counter!(m.name("token_regenerations_total")).increment(1);
        }
        NtEvent::StaleToken { epoch } => {
            tracing::info!(epoch, "stale token discarded");
            metrics::counter!(m.name("stale_tokens_total")).increment(1);
        }
        NtEvent::TokenSuperseded { epoch } => {
            tracing::warn!(epoch, "token superseded by a regeneration elsewhere; local holder told LockLost");
        }
        NtEvent::Suspected { node } => tracing::warn!(peer = node.0, "peer suspected"),
        NtEvent::HasToken(has) => metrics::gauge!(m.name("has_token")).set(if *has { 1.0 } else { 0.0 }),
        // Exact below 2^53 (interfaces.md); `ftctl status --json` has the
        // exact value.
        NtEvent::Epoch(e) => metrics::gauge!(m.name("epoch")).set(*e as f64),
        NtEvent::Entered { .. } => {}
        NtEvent::NewLife { inc } => {
            tracing::warn!(incarnation = inc.0, "a peer knew a newer life of this node (clock behind?): moved past it");
        }
        NtEvent::StateRecovered { max } => {
            tracing::warn!(recovered_max = max, "fresh state recovered from the peers' answers");
        }
        NtEvent::Refused { from, reason } => {
            tracing::warn!(peer = from.0, reason, "peer message with an unacceptable value dropped");
            metrics::counter!(m.name("messages_refused_total"), "reason" => *reason).increment(1);
        }
    }
}
