//! The core's events as `electd_` metrics and log lines (electd.md, Metrics).

use std::sync::atomic::{AtomicBool, Ordering};

use runtime::metrics::Metrics;

use crate::node::{Algorithm, ElEvent, PreVoteOutcome};

/// Election message kinds (the `type` label of `election_messages_total`).
const ELECTION_KINDS: [&str; 4] = ["relay", "elected", "election", "coordinator"];

/// The `kind` of electd's recovery (interfaces.md's common
/// `recoveries_total` and `recovery_duration_seconds`): a failover, the
/// same observation as `failover_duration_seconds`.
const FAILOVER: &str = "failover";

/// Whether this process has known a coordinator: set by `CoordinatorKnown`
/// and `TookOffice`.
static COORDINATOR_KNOWN: AtomicBool = AtomicBool::new(false);
/// Whether one was known before the latest of those events: the core
/// reports the first coordinator a starting node learns of as a `Failover`
/// too (from no coordinator to one), which is no failure.
static KNOWN_BEFORE: AtomicBool = AtomicBool::new(false);

fn coordinator_known() {
    KNOWN_BEFORE.store(COORDINATOR_KNOWN.swap(true, Ordering::Relaxed), Ordering::Relaxed);
}

/// Declares the counters once at start (at 0).
pub fn declare(m: &Metrics) {
    describe(m);
    m.declare_recoveries(
        &[FAILOVER],
        "Failovers this node saw complete (kind failover: coordinator suspected, new coordinator known).",
    );
    m.declare_locks();
    for c in [
        "step_downs_total",
        "deadline_misses_total",
        "stale_term_answers_total",
        "lease_expiries_total",
        "follow_conflicts_total",
    ] {
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
        ElEvent::CoordinatorKnown { term, id } => {
            coordinator_known();
            tracing::info!(term, coordinator = id.0, "coordinator known");
        }
        ElEvent::Failover { took } => {
            let took_ms = took.as_millis() as u64;
            if KNOWN_BEFORE.load(Ordering::Relaxed) {
                tracing::warn!(took_ms, "failover: a new coordinator is known");
            } else {
                tracing::info!(took_ms, "the first coordinator is known (start-up)");
            }
            metrics::histogram!(m.name("failover_duration_seconds")).record(took.as_secs_f64());
            m.recovery_counted(FAILOVER);
            m.recovery(FAILOVER, *took);
        }
        // Normal at every start and after each election (a failover is
        // logged as such at WARN).
        ElEvent::TookOffice { term } => {
            coordinator_known();
            tracing::info!(term, "took office as coordinator");
        }
        ElEvent::SteppedDown { term, why } => {
            // A graceful stop (the core's reason for it) is no problem.
            if *why == "shutting down" {
                tracing::info!(term, "stepped down: {why}");
            } else {
                tracing::warn!(term, "stepped down: {why}");
            }
            metrics::counter!(m.name("step_downs_total")).increment(1);
        }
        ElEvent::PastDeadline { term } => {
            tracing::warn!(term, "the election missed its deadline (election_timeout): term + 1 follows");
            metrics::counter!(m.name("deadline_misses_total")).increment(1);
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
            // A fresh node's normal start (a first start, or a new disk).
            tracing::info!(recovered_max = max, "fresh state recovered from the peers' answers")
        }
        ElEvent::Refused { from, reason } => {
            tracing::debug!(peer = from.0, reason, "message refused");
            metrics::counter!(m.name("refused_total"), "reason" => *reason).increment(1);
        }
        ElEvent::QueueLength(n) => metrics::gauge!(m.name("queue_length")).set(*n as f64),
    }
}

/// The HELP text of electd's own metrics (the common and lock service ones
/// are described by `runtime`).
fn describe(m: &Metrics) {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(m.name("step_downs_total"), "Times this node stepped down as coordinator.");
    describe_counter!(m.name("stale_term_answers_total"), "Answers sent to messages of an older term.");
    describe_counter!(
        m.name("deadline_misses_total"),
        "Elections whose result came too late (election_timeout·(1−ρ) after joining the term): dropped."
    );
    describe_counter!(m.name("lease_expiries_total"), "Grants whose lease expired.");
    describe_counter!(
        m.name("follow_conflicts_total"),
        "Coordinator announcements of a term naming another node than the one this node follows."
    );
    describe_counter!(m.name("elections_started_total"), "Elections this node started, by algorithm.");
    describe_counter!(m.name("elections_completed_total"), "Elections this node completed, by algorithm.");
    describe_counter!(m.name("pre_votes_total"), "Pre-votes this node ran, by outcome (won, lost).");
    describe_counter!(m.name("election_messages_total"), "Election messages sent, by type.");
    describe_counter!(m.name("grants_total"), "Lock grants this node issued as coordinator.");
    describe_counter!(
        m.name("denials_total"),
        "Lock requests denied, by reason (not_coordinator, queue_full, no_quorum)."
    );
    describe_counter!(m.name("refused_total"), "Peer messages refused, by reason.");
    describe_histogram!(
        m.name("election_duration_seconds"),
        Unit::Seconds,
        "Time from the start of an election to its completion."
    );
    describe_histogram!(
        m.name("failover_duration_seconds"),
        Unit::Seconds,
        "Time from losing the coordinator to knowing a new one."
    );
    describe_histogram!(
        m.name("grant_wait_seconds"),
        Unit::Seconds,
        "Time a lock request waited at the coordinator before its grant."
    );
    describe_gauge!(m.name("is_coordinator"), "1 while this node is the coordinator in office, else 0.");
    describe_gauge!(m.name("coordinator_id"), "The node id of the known coordinator, 0 if none.");
    describe_gauge!(m.name("term"), "The current term at this node; exact below 2^53.");
    describe_gauge!(m.name("queue_length"), "Lock requests queued at the coordinator.");
}
