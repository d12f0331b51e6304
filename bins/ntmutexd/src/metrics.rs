//! The core's events as `ntmutex_` metrics and log lines.

use runtime::metrics::{FirstToken, Metrics};

use crate::node::NtEvent;

/// Tells the starting cluster's first token (INFO) from a lost one
/// regenerated (WARN): the core reports both as `Regenerated`.
static FIRST_TOKEN: FirstToken = FirstToken::new();

/// Declares the counters once at start (at 0), so dashboards and alerts see
/// them before the first event. The core's gauges (`queue_position`,
/// `local_waiting`) come from `Protocol::gauges`.
pub fn declare(m: &Metrics) {
    FIRST_TOKEN.starting();
    describe(m);
    m.declare_locks();
    for c in ["token_regenerations_total", "stale_tokens_total"] {
        metrics::counter!(m.name(c)).increment(0);
    }
    for reason in ["non_member", "epoch", "value", "joining_buffer_full"] {
        metrics::counter!(m.name("messages_refused_total"), "reason" => reason).increment(0);
    }
    m.declare_recoveries(
        &["m1", "m2", "m3"],
        "Recoveries this node started, by kind (m1: farther predecessors, m2: broadcast, m3: queue search).",
    );
}

/// Records one core event.
pub fn record(e: &NtEvent, m: &Metrics) {
    match e {
        NtEvent::Lock(e) => m.lock_event(e),
        NtEvent::Joined { bootstrap } => {
            tracing::info!(bootstrap, "joined the cluster");
            // Bootstrap: every node is starting, one of them makes the
            // first token; otherwise one is in use already.
            if *bootstrap {
                FIRST_TOKEN.starting();
            } else {
                FIRST_TOKEN.token_seen();
            }
        }
        NtEvent::RecoveryStarted { mech } => {
            tracing::warn!(mechanism = mech.label(), "failure detected: recovery started");
            m.recovery_counted(mech.label());
        }
        NtEvent::Recovered { mech, took } => {
            tracing::info!(mechanism = mech.label(), took_ms = took.as_millis() as u64, "token path restored");
            m.recovery(mech.label(), *took);
        }
        NtEvent::Regenerated { epoch } => {
            if FIRST_TOKEN.made() {
                tracing::info!(epoch, "first token made (the cluster is starting)");
            } else {
                tracing::warn!(epoch, "token regenerated");
            }
            metrics::counter!(m.name("token_regenerations_total")).increment(1);
        }
        NtEvent::StaleToken { epoch } => {
            FIRST_TOKEN.token_seen();
            tracing::info!(epoch, "stale token discarded");
            metrics::counter!(m.name("stale_tokens_total")).increment(1);
        }
        NtEvent::TokenSuperseded { epoch } => {
            tracing::warn!(epoch, "token superseded by a regeneration elsewhere; local holder told LockLost");
        }
        NtEvent::Suspected { node } => tracing::warn!(peer = node.0, "peer suspected"),
        NtEvent::HasToken(has) => {
            if *has {
                FIRST_TOKEN.token_seen();
            }
            metrics::gauge!(m.name("has_token")).set(if *has { 1.0 } else { 0.0 });
        }
        // Exact below 2^53 (interfaces.md); `ftctl status --json` has the
        // exact value.
        NtEvent::Epoch(e) => metrics::gauge!(m.name("epoch")).set(*e as f64),
        NtEvent::Entered { .. } => {}
        NtEvent::NewLife { inc } => {
            tracing::warn!(incarnation = inc.0, "a peer knew a newer life of this node (clock behind?): moved past it");
        }
        NtEvent::StateRecovered { max } => {
            // A fresh node's normal start (a first start, or a new disk).
            if *max > 0 {
                FIRST_TOKEN.token_seen();
            }
            tracing::info!(recovered_max = max, "fresh state recovered from the peers' answers");
        }
        NtEvent::Refused { from, reason } => {
            tracing::warn!(peer = from.0, reason, "peer message with an unacceptable value dropped");
            metrics::counter!(m.name("messages_refused_total"), "reason" => *reason).increment(1);
        }
    }
}

/// The HELP text of ntmutexd's own metrics (the common and lock service
/// ones are described by `runtime`).
fn describe(m: &Metrics) {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        m.name("token_regenerations_total"),
        "Tokens this node made in a regeneration round (the cluster's first token included)."
    );
    describe_counter!(m.name("stale_tokens_total"), "Tokens of an older epoch received and discarded.");
    describe_counter!(
        m.name("messages_refused_total"),
        "Peer messages dropped for a value that cannot be accepted, by reason."
    );
    describe_gauge!(m.name("has_token"), "1 while this node holds the token, else 0.");
    describe_gauge!(m.name("epoch"), "The highest token epoch in use at this node; exact below 2^53.");
    describe_gauge!(m.name("queue_position"), "This node's position in the distributed queue, -1 if none.");
    describe_gauge!(m.name("local_waiting"), "Local clients waiting for the lock.");
}
