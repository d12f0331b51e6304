//! The core's events as `electd_` metrics and log lines (electd.md, Metrics).

use std::sync::atomic::{AtomicBool, Ordering};

use lockservice::NamedEvent;
use runtime::metrics::{Metric, Metrics, DEPARTURES, FENCES, LOCKS};

use crate::node::{Algorithm, ElEvent, PreVoteOutcome};

/// Election message kinds (the `type` label of `election_messages_total`).
const ELECTION_KINDS: [&str; 4] = ["relay", "elected", "election", "coordinator"];

/// The `kind` of electd's recovery (interfaces.md's common
/// `recoveries_total` and `recovery_duration_seconds`): a failover, the
/// same observation as `failover_duration_seconds`.
const FAILOVER: &str = "failover";

/// How long after this node joined its coordinator changes still count as
/// the start settling (wall clock: a log level and a metric, nothing the
/// protocol decides).
const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// When this node joined (`Joined`), and whether it has seen a grant.
static JOINED_AT: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
static SERVED: AtomicBool = AtomicBool::new(false);

/// Whether this node is still starting. The core reports every coordinator
/// it learns of after none (or after a lost one) as a `Failover`, also
/// while a starting cluster's first elections settle (term 1 decided as a
/// concurrent term 2 starts, which makes its coordinator step down and
/// take office again). Until the node has been joined for [`SETTLE`] or
/// has seen a grant, nothing it served failed over: such a `Failover` (and
/// a step-down for a higher term) is logged at INFO and not counted.
fn starting() -> bool {
    if SERVED.load(Ordering::Relaxed) {
        return false;
    }
    JOINED_AT.lock().unwrap_or_else(|e| e.into_inner()).is_none_or(|t| t.elapsed() < SETTLE)
}

fn served() {
    SERVED.store(true, Ordering::Relaxed);
}

/// electd's own metrics (besides the common ones, [`FENCES`] and
/// [`LOCKS`]). The core's gauges (`is_coordinator`, `coordinator_id`,
/// `term`, `queue_length`) come from `Protocol::gauges`.
pub const TABLE: &[Metric] = &[
    Metric::counter("step_downs_total", &[], "Times this node stepped down as coordinator."),
    Metric::counter("stale_term_answers_total", &[], "Answers sent to messages of an older term."),
    Metric::counter(
        "deadline_misses_total",
        &[],
        "Elections whose result came too late (election_timeout·(1−ρ) after joining the term): dropped.",
    ),
    Metric::counter("lease_expiries_total", &[], "Grants whose lease expired."),
    Metric::counter(
        "follow_conflicts_total",
        &[],
        "Coordinator announcements of a term naming another node than the one this node follows.",
    ),
    Metric::counter("elections_started_total", &["algorithm"], "Elections this node started, by algorithm."),
    Metric::counter("elections_completed_total", &["algorithm"], "Elections this node completed, by algorithm."),
    Metric::counter("pre_votes_total", &["outcome"], "Pre-votes this node ran, by outcome (won, lost)."),
    Metric::counter("election_messages_total", &["type"], "Election messages sent, by type."),
    Metric::counter("grants_total", &[], "Lock grants this node issued as coordinator."),
    Metric::counter(
        "denials_total",
        &["reason"],
        "Lock requests denied, by reason (not_coordinator, queue_full, no_quorum, too_many_locks).",
    ),
    Metric::counter(
        "lock_requests_refused_total",
        &["reason"],
        "Local lock requests refused before any lock's queue, by reason (bad_name, too_many_locks).",
    ),
    Metric::counter("refused_total", &["reason"], "Peer messages refused, by reason."),
    Metric::counter(
        "recoveries_total",
        &["kind"],
        "Failovers this node saw complete (kind failover: coordinator suspected, new coordinator known).",
    ),
    Metric::histogram("election_duration_seconds", &[], "Time from the start of an election to its completion."),
    Metric::histogram("failover_duration_seconds", &[], "Time from losing the coordinator to knowing a new one."),
    Metric::histogram("grant_wait_seconds", &[], "Time a lock request waited at the coordinator before its grant."),
    Metric::gauge("is_coordinator", &[], "1 while this node is the coordinator in office, else 0."),
    Metric::gauge("coordinator_id", &[], "The node id of the known coordinator, 0 if none."),
    Metric::gauge("term", &[], "The current term at this node; exact below 2^53."),
    Metric::gauge("queue_length", &[], "Lock requests queued at the coordinator, over every lock name."),
    Metric::gauge("locks_active", &[], "Lock names this node's clients hold or wait for."),
];

/// Declares the metrics once at start (counters at 0).
pub fn declare(m: &Metrics) {
    m.declare(TABLE);
    m.declare(FENCES);
    m.declare(LOCKS);
    m.declare_recoveries(&[FAILOVER]);
    for a in [Algorithm::Relay, Algorithm::Ring] {
        m.counter("elections_started_total", &[("algorithm", a.label())]).increment(0);
        m.counter("elections_completed_total", &[("algorithm", a.label())]).increment(0);
    }
    for o in [PreVoteOutcome::Won, PreVoteOutcome::Lost] {
        m.counter("pre_votes_total", &[("outcome", o.label())]).increment(0);
    }
    for k in ELECTION_KINDS {
        m.counter("election_messages_total", &[("type", k)]).increment(0);
    }
    for r in ["not_coordinator", "queue_full", "no_quorum", "too_many_locks"] {
        m.counter("denials_total", &[("reason", r)]).increment(0);
    }
    for r in ["bad_name", "too_many_locks"] {
        m.counter("lock_requests_refused_total", &[("reason", r)]).increment(0);
    }
}

/// Records one core event.
pub fn record(e: &ElEvent, m: &Metrics) {
    match e {
        ElEvent::Lock(NamedEvent::Lock { event, .. }) => {
            if matches!(event, lockservice::LockEvent::Granted { .. }) {
                served();
            }
            lockservice::metrics::record(event, |n| m.name(n))
        }
        ElEvent::Lock(NamedEvent::Refused { reason }) => {
            m.counter("lock_requests_refused_total", &[("reason", reason)]).increment(1);
        }
        ElEvent::Joined => {
            JOINED_AT.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(std::time::Instant::now);
            tracing::info!("joined: the coordinator is known");
        }
        ElEvent::TermJoined { term } => tracing::debug!(term, "joined a higher term"),
        ElEvent::ElectionStarted { term, algorithm } => {
            tracing::info!(term, "election started");
            m.counter("elections_started_total", &[("algorithm", algorithm.label())]).increment(1);
        }
        ElEvent::ElectionCompleted { algorithm, term, coordinator, took } => {
            tracing::info!(term, coordinator = coordinator.0, took_ms = took.as_millis() as u64, "election completed");
            m.counter("elections_completed_total", &[("algorithm", algorithm.label())]).increment(1);
            m.histogram("election_duration_seconds", &[]).record(took.as_secs_f64());
        }
        ElEvent::PreVote(o) => m.counter("pre_votes_total", &[("outcome", o.label())]).increment(1),
        ElEvent::ElectionMessage { kind } => m.counter("election_messages_total", &[("type", *kind)]).increment(1),
        ElEvent::CoordinatorKnown { term, id } => {
            tracing::info!(term, coordinator = id.0, "coordinator known");
        }
        ElEvent::Failover { took } => {
            let took_ms = took.as_millis() as u64;
            // Start-up is no failover: neither logged nor counted as one
            // (a starting node's coordinator is known after its first
            // elections, which `elections_completed_total` counts).
            if !starting() {
                if DEPARTURES.any_left() {
                    tracing::info!(took_ms, "handover: a new coordinator is known (a peer stopped gracefully)");
                } else {
                    tracing::warn!(took_ms, "failover: a new coordinator is known");
                }
                m.histogram("failover_duration_seconds", &[]).record(took.as_secs_f64());
                m.recovery_counted(FAILOVER);
                m.recovery(FAILOVER, *took);
            } else {
                tracing::info!(took_ms, "a coordinator is known (start-up)");
            }
        }
        // Normal at every start and after each election (a failover is
        // logged as such at WARN).
        ElEvent::TookOffice { term } => {
            tracing::info!(term, "took office as coordinator");
        }
        ElEvent::SteppedDown { term, why } => {
            // A graceful stop (the core's reason for it) is no problem, nor
            // is a higher term while the cluster's first elections settle.
            if *why == "shutting down" || starting() {
                tracing::info!(term, "stepped down: {why}");
            } else {
                tracing::warn!(term, "stepped down: {why}");
            }
            m.counter("step_downs_total", &[]).increment(1);
        }
        ElEvent::PastDeadline { term } => {
            tracing::warn!(term, "the election missed its deadline (election_timeout): term + 1 follows");
            m.counter("deadline_misses_total", &[]).increment(1);
        }
        ElEvent::StaleAnswered => m.counter("stale_term_answers_total", &[]).increment(1),
        ElEvent::Granted { waited, .. } => {
            served();
            m.counter("grants_total", &[]).increment(1);
            m.histogram("grant_wait_seconds", &[]).record(waited.as_secs_f64());
        }
        ElEvent::Denied { reason } => m.counter("denials_total", &[("reason", *reason)]).increment(1),
        ElEvent::LeaseExpired => {
            tracing::warn!("a grant's lease expired");
            m.counter("lease_expiries_total", &[]).increment(1);
        }
        ElEvent::FollowConflict => m.counter("follow_conflicts_total", &[]).increment(1),
        ElEvent::StateRecovered { max } => {
            // A fresh node's normal start (a first start, or a new disk).
            tracing::info!(recovered_max = max, "fresh state recovered from the peers' answers")
        }
        ElEvent::Refused { from, reason } => {
            tracing::debug!(peer = from.0, reason, "message refused");
            m.counter("refused_total", &[("reason", *reason)]).increment(1);
        }
        ElEvent::QueueLength(n) => m.gauge("queue_length", &[]).set(*n as f64),
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
    use crate::node::{ElConfig, ElNode};

    /// One event of each kind.
    fn every_event() -> Vec<ElEvent> {
        let name = lockservice::LockName::unnamed();
        let mut v: Vec<ElEvent> = lockservice::metrics::examples()
            .into_iter()
            .map(|event| ElEvent::Lock(NamedEvent::Lock { name: name.clone(), event }))
            .collect();
        for reason in ["bad_name", "too_many_locks"] {
            v.push(ElEvent::Lock(NamedEvent::Refused { reason }));
        }
        for algorithm in [Algorithm::Relay, Algorithm::Ring] {
            v.push(ElEvent::ElectionStarted { term: 2, algorithm });
            v.push(ElEvent::ElectionCompleted {
                algorithm,
                term: 2,
                coordinator: NodeId(1),
                took: Duration::from_millis(30),
            });
        }
        for o in [PreVoteOutcome::Won, PreVoteOutcome::Lost] {
            v.push(ElEvent::PreVote(o));
        }
        for kind in ELECTION_KINDS {
            v.push(ElEvent::ElectionMessage { kind });
        }
        v.extend([
            ElEvent::Joined,
            ElEvent::TermJoined { term: 2 },
            ElEvent::CoordinatorKnown { term: 2, id: NodeId(1) },
            ElEvent::Failover { took: Duration::from_millis(200) },
            ElEvent::TookOffice { term: 2 },
            ElEvent::SteppedDown { term: 2, why: "shutting down" },
            ElEvent::SteppedDown { term: 2, why: "lost quorum" },
            ElEvent::PastDeadline { term: 2 },
            ElEvent::StaleAnswered,
            ElEvent::Granted { fence: lockservice::fence(2, 1), waited: Duration::from_millis(4) },
            ElEvent::Denied { reason: "queue_full" },
            ElEvent::LeaseExpired,
            ElEvent::FollowConflict,
            ElEvent::StateRecovered { max: 3 },
            ElEvent::Refused { from: NodeId(2), reason: "term" },
            ElEvent::QueueLength(2),
        ]);
        v
    }

    /// The core's gauges (the driver records them).
    fn gauges() -> Vec<(&'static str, f64)> {
        let ctx = Context::new(NodeId(1), Incarnation(1), Membership::of_size(3), Instant::ZERO, ElConfig::default());
        ElNode::start(ctx).expect("valid config").gauges()
    }

    /// Every metric `declare` and the event mapping record (and the
    /// driver, from the core's gauges) is in a declared table, with its kind
    /// and labels; every one declared is recorded by some event.
    #[test]
    fn every_metric_recorded_is_declared_and_every_declared_one_recorded() {
        capture::assert_daemon_tables("electd", declare, record, &every_event(), &gauges());
    }
}
