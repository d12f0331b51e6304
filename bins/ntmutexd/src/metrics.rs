//! The core's events as `ntmutex_` metrics and log lines.

use lockservice::LockEvent;
use runtime::metrics::Metrics;

use crate::node::NtEvent;

/// Declares the counters once at start (at 0), so dashboards and alerts see
/// them before the first event. The core's gauges (`queue_position`,
/// `local_waiting`) come from `Protocol::gauges`.
pub fn declare(m: &Metrics) {
    for c in [
        "cs_entries_total",
        "token_regenerations_total",
        "stale_tokens_total",
        "lock_lost_total",
        "acquire_timeouts_total",
    ] {
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
        NtEvent::Lock(LockEvent::Granted { fence, waited, .. }) => {
            metrics::counter!(m.name("cs_entries_total")).increment(1);
            metrics::histogram!(m.name("token_wait_seconds")).record(waited.as_secs_f64());
            let (epoch, counter) = lockservice::fence_parts(*fence);
            metrics::gauge!(m.name("fence_epoch")).set(epoch as f64);
            metrics::gauge!(m.name("fence_counter")).set(counter as f64);
        }
        NtEvent::Lock(LockEvent::Released { held, how, .. }) => {
            metrics::histogram!(m.name("hold_seconds")).record(held.as_secs_f64());
            // A revocation was already counted when its LockLost went out.
            if matches!(how, lockservice::ReleaseHow::Lost) {
                metrics::counter!(m.name("lock_lost_total")).increment(1);
            }
        }
        NtEvent::Lock(LockEvent::TimedOut { .. }) => metrics::counter!(m.name("acquire_timeouts_total")).increment(1),
        NtEvent::Lock(LockEvent::Revoking { client, .. }) => {
            tracing::warn!(%client, "hold exceeded max_hold_ms: revoking");
            metrics::counter!(m.name("lock_lost_total")).increment(1);
        }
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
