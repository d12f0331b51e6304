//! The core's events as `electd_` metrics and log lines (electd.md, Metrics).

use runtime::metrics::Metrics;

use crate::node::{Algorithm, ElEvent, PreVoteOutcome};

/// Election message kinds (the `type` label of `election_messages_total`).
const ELECTION_KINDS: [&str; 4] = ["relay", "elected", "election", "coordinator"];

/// Declares the counters once at start (at 0).
pub fn declare(m: &Metrics) {
    m.declare_locks();
    for c in ["step_downs_total", "stale_term_answers_total", "lease_expiries_total", "follow_conflicts_total"] {
        metrics::counter!(m.name(c)).increment(0);
    }
    for a in [Algorithm::Relay, Algorithm::Ring] {
        metrics::counter!(m.name("elections_started_total"), "algorithm" => a.label()).increment(0);
        metrics::counter!(m.name("elections_completed_total"), "algorithm" => a.label()).increment(0);
    }
    for o in [PreVoteOutcome::Won, PreVoteOutcome::Lost] {
        metrics::counter!(m.name("pre_votes_total"), "outcome" => o.label()).increment(0);
    }
    for k in ELECTION_KINDS {
        metrics::counter!(m.name("election_messages_total"), "type" => k).increment(0);
    }
    metrics::counter!(m.name("grants_total")).increment(0);
    for r in ["not_coordinator", "queue_full", "no_quorum"] {
        metrics::counter!(m.name("denials_total"), "reason" => r).increment(0);
    }
}

/// Records one core event.
pub fn record(e: &ElEvent, m: &Metrics) {
    match e {
        ElEvent::Lock(e) => m.lock_event(e),
        ElEvent::Joined => tracing::info!("joined: the coordinator is known"),
        ElEvent::TermJoined { term } => tracing::debug!(term, "joined a higher term"),
        ElEvent::ElectionStarted { term, algorithm } => {
            tracing::info!(term, "election started");
            metrics::counter!(m.name("elections_started_total"), "algorithm" => algorithm.label()).increment(1);
        }
        ElEvent::ElectionCompleted { algorithm, term, coordinator, took } => {
            tracing::info!(term, coordinator = coordinator.0, took_ms = took.as_millis() as u64, "election completed");
            metrics::counter!(m.name("elections_completed_total"), "algorithm" => algorithm.label()).increment(1);
            metrics::histogram!(m.name("election_duration_seconds")).record(took.as_secs_f64());
        }
        ElEvent::PreVote(o) => metrics::counter!(m.name("pre_votes_total"), "outcome" => o.label()).increment(1),
        ElEvent::ElectionMessage { kind } => {
            metrics::counter!(m.name("election_messages_total"), "type" => *kind).increment(1)
        }
        ElEvent::CoordinatorKnown { term, id } => tracing::info!(term, coordinator = id.0, "coordinator known"),
        ElEvent::Failover { took } => {
            tracing::warn!(took_ms = took.as_millis() as u64, "failover: a new coordinator is known");
            metrics::histogram!(m.name("failover_duration_seconds")).record(took.as_secs_f64());
        }
        ElEvent::TookOffice { term } => tracing::warn!(term, "took office as coordinator"),
        ElEvent::SteppedDown { term, why } => {
            tracing::warn!(term, "stepped down: {why}");
            metrics::counter!(m.name("step_downs_total")).increment(1);
        }
        ElEvent::StaleAnswered => metrics::counter!(m.name("stale_term_answers_total")).increment(1),
        ElEvent::Granted { waited, .. } => {
            metrics::counter!(m.name("grants_total")).increment(1);
            metrics::histogram!(m.name("grant_wait_seconds")).record(waited.as_secs_f64());
        }
        ElEvent::Denied { reason } => metrics::counter!(m.name("denials_total"), "reason" => *reason).increment(1),
        ElEvent::LeaseExpired => {
            tracing::warn!("a grant's lease expired");
            metrics::counter!(m.name("lease_expiries_total")).increment(1);
        }
        ElEvent::FollowConflict => metrics::counter!(m.name("follow_conflicts_total")).increment(1),
        ElEvent::StateRecovered { max } => {
            tracing::warn!(recovered_max = max, "fresh state recovered from the peers' answers")
        }
        ElEvent::Refused { from, reason } => {
            tracing::debug!(peer = from.0, reason, "message refused");
            metrics::counter!(m.name("refused_total"), "reason" => *reason).increment(1);
        }
        ElEvent::QueueLength(n) => metrics::gauge!(m.name("queue_length")).set(*n as f64),
    }
}
