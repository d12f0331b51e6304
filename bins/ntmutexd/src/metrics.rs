//! The core's events as `ntmutex_` metrics and log lines.

use runtime::metrics::{FirstToken, Metric, Metrics, DEPARTURES, FENCES, LOCKS};

use crate::node::NtEvent;

/// Tells the starting cluster's first token (INFO) from a lost one
/// regenerated (WARN): the core reports both as `Regenerated`.
static FIRST_TOKEN: FirstToken = FirstToken::new();

/// ntmutexd's own metrics (besides the common ones, [`FENCES`] and
/// [`LOCKS`]). The core's gauges (`queue_position`, `local_waiting`) come
/// from `Protocol::gauges`.
pub const TABLE: &[Metric] = &[
    Metric::counter(
        "token_regenerations_total",
        &[],
        "Tokens this node made in a regeneration round (the cluster's first token included).",
    ),
    Metric::counter("stale_tokens_total", &[], "Tokens of an older epoch received and discarded."),
    Metric::counter(
        "messages_refused_total",
        &["reason"],
        "Peer messages dropped for a value that cannot be accepted, by reason.",
    ),
    Metric::counter(
        "recoveries_total",
        &["kind"],
        "Recoveries this node started, by kind (m1: farther predecessors, m2: broadcast, m3: queue search).",
    ),
    Metric::gauge("has_token", &[], "1 while this node holds the token, else 0."),
    Metric::gauge("epoch", &[], "The highest token epoch in use at this node; exact below 2^53."),
    Metric::gauge("queue_position", &[], "This node's position in the distributed queue, -1 if none."),
    Metric::gauge("local_waiting", &[], "Local clients waiting for the lock."),
];

/// Declares the metrics once at start (counters at 0), so dashboards and
/// alerts see them before the first event.
pub fn declare(m: &Metrics) {
    FIRST_TOKEN.starting();
    m.declare(TABLE);
    m.declare(FENCES);
    m.declare(LOCKS);
    for reason in ["non_member", "epoch", "value", "joining_buffer_full"] {
        m.counter("messages_refused_total", &[("reason", reason)]).increment(0);
    }
    m.declare_recoveries(&["m1", "m2", "m3"]);
}

/// Records one core event.
pub fn record(e: &NtEvent, m: &Metrics) {
    match e {
        NtEvent::Lock(e) => lockservice::metrics::record(e, |n| m.name(n)),
        NtEvent::Joined { bootstrap } => {
            tracing::info!(bootstrap, "joined the cluster");
            // Bootstrap: every node is starting, one of them makes the
            // first token. Otherwise a peer was running already, but in a
            // new cluster whose nodes recover at once (`--new-cluster`,
            // foundation.md NC1-NC4) that peer may have no token yet: a
            // token or epoch seen here (below) is what says one exists.
            FIRST_TOKEN.starting();
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
            m.counter("token_regenerations_total", &[]).increment(1);
        }
        NtEvent::StaleToken { epoch } => {
            FIRST_TOKEN.token_seen();
            tracing::info!(epoch, "stale token discarded");
            m.counter("stale_tokens_total", &[]).increment(1);
        }
        NtEvent::TokenSuperseded { epoch } => {
            tracing::warn!(epoch, "token superseded by a regeneration elsewhere; local holder told LockLost");
        }
        NtEvent::Suspected { node } => {
            if DEPARTURES.left(node.0) {
                tracing::info!(peer = node.0, "peer suspected: it stopped gracefully");
            } else {
                tracing::warn!(peer = node.0, "peer suspected");
            }
        }
        NtEvent::HasToken(has) => {
            if *has {
                FIRST_TOKEN.token_seen();
            }
            m.gauge("has_token", &[]).set(if *has { 1.0 } else { 0.0 });
        }
        // Exact below 2^53 (interfaces.md); `ftctl status --json` has the
        // exact value.
        NtEvent::Epoch(e) => m.gauge("epoch", &[]).set(*e as f64),
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
            m.counter("messages_refused_total", &[("reason", reason)]).increment(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ftcore::{Context, Incarnation, NodeId, Protocol};
    use membership::Membership;
    use runtime::config::CommonConfig;
    use timer::Instant;

    use runtime::metrics::capture;

    use super::*;
    use crate::node::{Mech, NtNode};
    use crate::NtmutexdConfig;

    /// One event of each kind.
    fn every_event() -> Vec<NtEvent> {
        let mut v: Vec<NtEvent> = lockservice::metrics::examples().into_iter().map(NtEvent::Lock).collect();
        for mech in [Mech::M1, Mech::M2, Mech::M3] {
            v.push(NtEvent::RecoveryStarted { mech });
            v.push(NtEvent::Recovered { mech, took: Duration::from_millis(20) });
        }
        v.extend([
            NtEvent::Joined { bootstrap: true },
            NtEvent::Joined { bootstrap: false },
            NtEvent::Regenerated { epoch: 2 },
            NtEvent::StaleToken { epoch: 1 },
            NtEvent::TokenSuperseded { epoch: 1 },
            NtEvent::NewLife { inc: Incarnation(4) },
            NtEvent::StateRecovered { max: 3 },
            NtEvent::Refused { from: NodeId(2), reason: "epoch" },
            NtEvent::Suspected { node: NodeId(2) },
            NtEvent::HasToken(true),
            NtEvent::Epoch(2),
            NtEvent::Entered { fence: lockservice::fence(2, 1) },
        ]);
        v
    }

    /// The core's gauges (the driver records them).
    fn gauges() -> Vec<(&'static str, f64)> {
        let cfg = NtmutexdConfig::default().core(&CommonConfig::default());
        let ctx = Context::new(NodeId(1), Incarnation(1), Membership::of_size(3), Instant::ZERO, cfg);
        NtNode::start(ctx).expect("valid config").gauges()
    }

    /// Every metric `declare` and the event mapping record (and the
    /// driver, from the core's gauges) is in a declared table, with its kind
    /// and labels; every one declared is recorded by some event.
    #[test]
    fn every_metric_recorded_is_declared_and_every_declared_one_recorded() {
        capture::assert_daemon_tables("ntmutex", declare, record, &every_event(), &gauges());
    }
}
