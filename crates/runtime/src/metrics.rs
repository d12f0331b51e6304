//! One metrics setup for every daemon: the Prometheus exporter on
//! `metrics_listen` and the metrics all daemons share, under the daemon's
//! prefix (`ringd_`, `ntmutex_`, `tokenwatch_`, `electd_`, `hbring_`).
//!
//! Daemons record their own metrics with the `metrics` macros, naming them
//! through [`Metrics::name`] so the prefix is written once.

use std::net::SocketAddr;
use std::time::Duration;

use membership::NodeId;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Histogram buckets for every `*_seconds` histogram: 1 ms to 30 s.
pub const SECONDS_BUCKETS: &[f64] =
    &[0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0];

/// Buckets of `state_write_seconds`: a durable write takes tens of µs on a
/// fast disk, a few ms on a slow one.
pub const WRITE_BUCKETS: &[f64] = &[0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1.0];

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the metrics exporter on {addr}: {message}")]
pub struct MetricsError {
    /// The configured `metrics_listen`.
    pub addr: SocketAddr,
    /// What went wrong.
    pub message: String,
}

/// How long after a node starts (or joins) a token it makes is taken for a
/// starting cluster's first token rather than a lost one regenerated.
pub const FIRST_TOKEN_WINDOW: Duration = Duration::from_secs(30);

/// Tells a starting cluster's first token from a lost token regenerated,
/// for the log level of the token daemons' `Regenerated` events (the same
/// event for both): the first token made within [`FIRST_TOKEN_WINDOW`] of
/// [`starting`](Self::starting), with no token seen before it, is a normal
/// start (INFO); any other is a regeneration after a loss (WARN).
#[derive(Debug)]
pub struct FirstToken {
    since: std::sync::Mutex<Option<std::time::Instant>>,
}

impl FirstToken {
    /// No start noted yet: every token made counts as a regeneration.
    pub const fn new() -> Self {
        FirstToken { since: std::sync::Mutex::new(None) }
    }

    /// The node is starting or has just joined a starting cluster.
    pub fn starting(&self) {
        self.starting_at(std::time::Instant::now());
    }

    fn starting_at(&self, at: std::time::Instant) {
        *self.since.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
    }

    /// A token (or an epoch in use) was seen: the next one made is a regeneration.
    pub fn token_seen(&self) {
        *self.since.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// This node made a token: whether it is the starting cluster's first.
    pub fn made(&self) -> bool {
        self.made_at(std::time::Instant::now())
    }

    fn made_at(&self, now: std::time::Instant) -> bool {
        let since = self.since.lock().unwrap_or_else(|e| e.into_inner()).take();
        since.is_some_and(|t| now.saturating_duration_since(t) <= FIRST_TOKEN_WINDOW)
    }
}

impl Default for FirstToken {
    fn default() -> Self {
        Self::new()
    }
}

/// The common metrics of one daemon.
#[derive(Clone, Debug)]
pub struct Metrics {
    prefix: &'static str,
}

impl Metrics {
    /// Installs the global recorder with an HTTP exporter on `addr`
    /// (serving `/metrics`) and publishes build info. Must run inside a
    /// tokio runtime. Call once per process.
    pub fn install(prefix: &'static str, addr: SocketAddr) -> Result<Metrics, MetricsError> {
        let err = |message: String| MetricsError { addr, message };
        // Bind first so a port clash is reported as such, not as a
        // background task failing later.
        std::net::TcpListener::bind(addr).map_err(|e| err(e.to_string()))?;
        PrometheusBuilder::new()
            .with_http_listener(addr)
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
            .map_err(|e| err(e.to_string()))?
            // A full name sorts before a suffix, so it wins.
            .set_buckets_for_metric(Matcher::Full(format!("{prefix}_state_write_seconds")), WRITE_BUCKETS)
            .map_err(|e| err(e.to_string()))?
            .install()
            .map_err(|e| err(e.to_string()))?;
        let m = Metrics { prefix };
        m.describe();
        metrics::gauge!(m.name("build_info"), "version" => env!("CARGO_PKG_VERSION")).set(1.0);
        Ok(m)
    }

    /// Declares the lock service's counters at 0 (daemons that serve the
    /// lock API: ntmutexd, tokenwatchd, electd).
    pub fn declare_locks(&self) {
        use metrics::{describe_counter, describe_histogram, Unit};
        self.describe_fences();
        describe_counter!(self.name("cs_entries_total"), "Locks granted to local clients (critical sections entered).");
        describe_counter!(
            self.name("lock_lost_total"),
            "Locks taken back from a local holder (revoked at max_hold_ms, or the token was lost or superseded)."
        );
        describe_counter!(
            self.name("acquire_timeouts_total"),
            "Lock requests of local clients that timed out before a grant."
        );
        describe_histogram!(
            self.name("token_wait_seconds"),
            Unit::Seconds,
            "Time a local client waited from its lock request to the grant."
        );
        describe_histogram!(self.name("hold_seconds"), Unit::Seconds, "Time a local client held a lock.");
        for c in ["cs_entries_total", "lock_lost_total", "acquire_timeouts_total"] {
            metrics::counter!(self.name(c)).increment(0);
        }
    }

    /// Describes the fence gauges (every daemon that issues fences: all
    /// but hbringd). The daemon sets them; they are exact below 2^53.
    pub fn describe_fences(&self) {
        use metrics::describe_gauge;
        describe_gauge!(
            self.name("fence_epoch"),
            "Epoch (or term) of the latest fence this node issued; exact below 2^53, `ftctl status --json` gives the exact value."
        );
        describe_gauge!(
            self.name("fence_seq"),
            "Counter within its epoch of the latest fence this node issued; exact below 2^53, `ftctl status --json` gives the exact value."
        );
    }

    /// Records one event of the lock service ([`lockservice::LocalLocks`]):
    /// grants (`cs_entries_total`, `token_wait_seconds`, the fence
    /// gauges), holds (`hold_seconds`), lost locks and timed-out waits.
    pub fn lock_event(&self, e: &lockservice::LockEvent) {
        use lockservice::{LockEvent, ReleaseHow};
        match e {
            LockEvent::Granted { fence, waited, .. } => {
                metrics::counter!(self.name("cs_entries_total")).increment(1);
                metrics::histogram!(self.name("token_wait_seconds")).record(waited.as_secs_f64());
                // Exact below 2^53 (interfaces.md); `ftctl status --json`
                // has the exact value.
                let (epoch, counter) = lockservice::fence_parts(*fence);
                metrics::gauge!(self.name("fence_epoch")).set(epoch as f64);
                metrics::gauge!(self.name("fence_seq")).set(counter as f64);
            }
            LockEvent::Released { client, held, how, .. } => {
                metrics::histogram!(self.name("hold_seconds")).record(held.as_secs_f64());
                // A revocation was already counted when its LockLost went out.
                match how {
                    ReleaseHow::Lost => metrics::counter!(self.name("lock_lost_total")).increment(1),
                    ReleaseHow::Expired => {
                        tracing::warn!(%client, "a hold's lease ran out without a renewal");
                        metrics::counter!(self.name("lock_lost_total")).increment(1);
                    }
                    ReleaseHow::Released | ReleaseHow::Disconnected | ReleaseHow::Revoked => {}
                }
            }
            // The client got the new deadline; nothing to count.
            LockEvent::Renewed { .. } => {}
            LockEvent::TimedOut { .. } => metrics::counter!(self.name("acquire_timeouts_total")).increment(1),
            LockEvent::Revoking { client, .. } => {
                tracing::warn!(%client, "hold exceeded max_hold_ms: revoking");
                metrics::counter!(self.name("lock_lost_total")).increment(1);
            }
        }
    }

    /// Declares the heartbeat ring's counters at 0 (hbringd, and ringd,
    /// which embeds the ring).
    pub fn declare_ring(&self) {
        use metrics::describe_counter;
        describe_counter!(self.name("suspicions_total"), "Ring neighbours this node suspected of having failed.");
        describe_counter!(
            self.name("rejoins_seen_total"),
            "Peers seen alive in a new life (restart, rejoin, or back from a partition)."
        );
        describe_counter!(
            self.name("self_rejoins_total"),
            "Times this node learnt it had been excluded from the ring and rejoined as a new life."
        );
        describe_counter!(
            self.name("stale_messages_total"),
            "Ring messages from an older life of their sender, ignored."
        );
        describe_counter!(
            self.name("excluded_replies_total"),
            "Messages from an excluded life of a peer, answered Excluded (so it rejoins)."
        );
        describe_counter!(
            self.name("minority_yields_total"),
            "Messages from a life this node held dead while its own view held a minority alive: it rejoined (presuming everyone alive) instead of excluding that peer."
        );
        for c in [
            "suspicions_total",
            "rejoins_seen_total",
            "self_rejoins_total",
            "stale_messages_total",
            "excluded_replies_total",
            "minority_yields_total",
        ] {
            metrics::counter!(self.name(c)).increment(0);
        }
    }

    /// Records one event of the heartbeat ring ([`hbring::HbRing`]) as
    /// counters and log lines. A repair (`Repaired`) is only logged: what
    /// counts as a daemon's recovery is its own business (hbringd: the
    /// repair; ringd: its IAmNewNext recovery).
    pub fn ring_event(&self, e: &hbring::HbEvent) {
        use hbring::HbEvent;
        match e {
            HbEvent::Suspected { node, inc } => {
                tracing::warn!(peer = node.0, incarnation = inc.0, "suspected failed");
                metrics::counter!(self.name("suspicions_total")).increment(1);
            }
            HbEvent::Down { node, inc } => {
                tracing::info!(peer = node.0, incarnation = inc.0, "reported down");
            }
            HbEvent::Up { node, inc } => {
                tracing::info!(peer = node.0, incarnation = inc.0, "up in a new life");
                metrics::counter!(self.name("rejoins_seen_total")).increment(1);
            }
            HbEvent::Rejoined { inc } => {
                tracing::warn!(incarnation = inc.0, "this node had been excluded; rejoined as a new life");
                metrics::counter!(self.name("self_rejoins_total")).increment(1);
            }
            HbEvent::Repaired { new_predecessor, took } => {
                tracing::info!(predecessor = new_predecessor.0, took_ms = took.as_millis() as u64, "ring repaired");
            }
            HbEvent::StaleMessage { .. } => metrics::counter!(self.name("stale_messages_total")).increment(1),
            HbEvent::ExcludedPeer { .. } => metrics::counter!(self.name("excluded_replies_total")).increment(1),
            HbEvent::YieldedTo { node, inc } => {
                tracing::warn!(
                    peer = node.0,
                    incarnation = inc.0,
                    "heard from a life held dead while this node's ring was a minority: rejoining instead of excluding it"
                );
                metrics::counter!(self.name("minority_yields_total")).increment(1);
            }
            HbEvent::PredecessorChanged { to, .. } => {
                tracing::info!(predecessor = to.map(|n| n.0), "predecessor changed");
            }
            HbEvent::SuccessorChanged { to, .. } => {
                tracing::info!(successor = to.map(|n| n.0), "successor changed");
            }
        }
    }

    /// Metrics that record into whatever recorder is installed (none: a
    /// no-op), for tests and tools.
    pub fn detached(prefix: &'static str) -> Metrics {
        Metrics { prefix }
    }

    /// `<prefix>_<suffix>`.
    pub fn name(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.prefix)
    }

    fn describe(&self) {
        use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
        describe_gauge!(self.name("build_info"), "Build information; the value is always 1.");
        describe_gauge!(self.name("peer_up"), "1 if this node believes the peer is up, else 0.");
        describe_gauge!(self.name("incarnation"), "This node's current incarnation (life).");
        describe_counter!(self.name("messages_sent_total"), "Peer messages sent, by type.");
        describe_counter!(self.name("messages_received_total"), "Peer messages received, by type.");
        describe_counter!(
            self.name("messages_dropped_total"),
            "Peer messages dropped, by reason: queue_full and send_error before sending, inbox_full on receipt (a UDP sender's inbox was full), chaos (dropped on purpose by the chaos.* keys)."
        );
        describe_counter!(self.name("frames_rejected_total"), "Peer or client frames refused, by reason.");
        describe_counter!(self.name("client_requests_total"), "Local client requests, by type.");
        describe_counter!(
            self.name("connections_closed_total"),
            "Connections refused or closed by this node, by listener (peer, client) and reason."
        );
        describe_counter!(
            self.name("peers_unreachable_total"),
            "Peers whose connection broke and whose address then refused one (their process gone, host up): a hint of failure the core acts on before `suspect_after`."
        );
        metrics::counter!(self.name("peers_unreachable_total")).absolute(0);
        describe_histogram!(
            self.name("state_write_seconds"),
            Unit::Seconds,
            "Durable writes of the state file (a temp file written and fsynced, renamed, the directory fsynced), by duration."
        );
        describe_gauge!(self.name("clients"), "Local client connections open.");
        describe_histogram!(
            self.name("recovery_duration_seconds"),
            Unit::Seconds,
            "Time from detecting a failure to service restored, by kind of recovery."
        );
        for reason in wire::RejectReason::ALL {
            metrics::counter!(self.name("frames_rejected_total"), "reason" => reason.label()).absolute(0);
        }
    }

    /// The state file was written (and fsynced) once, taking `d`:
    /// `state_write_seconds` (its `_count` is the number of writes).
    pub fn state_written(&self, d: Duration) {
        metrics::histogram!(self.name("state_write_seconds")).record(d.as_secs_f64());
    }

    /// A peer message was sent.
    pub fn sent(&self, kind: &'static str) {
        metrics::counter!(self.name("messages_sent_total"), "type" => kind).increment(1);
    }

    /// A peer message arrived and passed every check.
    pub fn received(&self, kind: &'static str) {
        metrics::counter!(self.name("messages_received_total"), "type" => kind).increment(1);
    }

    /// A peer's process was found gone ([`wire::Incoming::Unreachable`]).
    pub fn peer_unreachable(&self) {
        metrics::counter!(self.name("peers_unreachable_total")).increment(1);
    }

    /// A peer message could not be queued.
    pub fn dropped(&self, reason: &'static str) {
        metrics::counter!(self.name("messages_dropped_total"), "reason" => reason).increment(1);
    }

    /// Sets the total of received datagrams dropped for `reason`.
    pub fn dropped_total(&self, reason: &'static str, total: u64) {
        metrics::counter!(self.name("messages_dropped_total"), "reason" => reason).absolute(total);
    }

    /// A frame was refused.
    pub fn rejected(&self, reason: wire::RejectReason) {
        metrics::counter!(self.name("frames_rejected_total"), "reason" => reason.label()).increment(1);
    }

    /// Adds `n` rejected frames (those the transport could not report one
    /// by one).
    pub fn rejected_n(&self, reason: wire::RejectReason, n: u64) {
        if n > 0 {
            metrics::counter!(self.name("frames_rejected_total"), "reason" => reason.label()).increment(n);
        }
    }

    /// Sets the total of connections `listener` closed for `why`.
    pub fn connections_closed(&self, listener: &'static str, why: wire::Closed, total: u64) {
        metrics::counter!(self.name("connections_closed_total"), "listener" => listener, "reason" => why.label())
            .absolute(total);
    }

    /// A local client request arrived.
    pub fn client_request(&self, kind: &'static str) {
        metrics::counter!(self.name("client_requests_total"), "type" => kind).increment(1);
    }

    /// Number of client connections open.
    pub fn clients(&self, n: usize) {
        metrics::gauge!(self.name("clients")).set(n as f64);
    }

    /// Whether `peer` is believed up.
    pub fn peer_up(&self, peer: NodeId, up: bool) {
        metrics::gauge!(self.name("peer_up"), "peer" => peer.0.to_string()).set(if up { 1.0 } else { 0.0 });
    }

    /// This node's incarnation.
    pub fn incarnation(&self, inc: u64) {
        metrics::gauge!(self.name("incarnation")).set(inc as f64);
    }

    /// Declares `recoveries_total{kind}` at 0 for each of the daemon's
    /// kinds of recovery (interfaces.md: every daemon labels its
    /// recoveries by `kind`), with `help` as its HELP text.
    pub fn declare_recoveries(&self, kinds: &[&'static str], help: &'static str) {
        metrics::describe_counter!(self.name("recoveries_total"), help);
        for kind in kinds {
            metrics::counter!(self.name("recoveries_total"), "kind" => *kind).increment(0);
        }
    }

    /// A recovery of `kind` started or completed: `recoveries_total{kind}`
    /// (each daemon's HELP says which it counts).
    pub fn recovery_counted(&self, kind: &'static str) {
        metrics::counter!(self.name("recoveries_total"), "kind" => kind).increment(1);
    }

    /// A recovery of `kind` took `d`, from detection to service restored:
    /// `recovery_duration_seconds{kind}`.
    pub fn recovery(&self, kind: &'static str, d: Duration) {
        metrics::histogram!(self.name("recovery_duration_seconds"), "kind" => kind).record(d.as_secs_f64());
    }
}

#[cfg(test)]
mod first_token_tests {
    use super::*;

    #[test]
    fn only_a_token_made_soon_after_starting_is_the_first() {
        let t0 = std::time::Instant::now();
        let f = FirstToken::new();
        assert!(!f.made_at(t0), "no start noted");
        f.starting_at(t0);
        assert!(f.made_at(t0 + Duration::from_secs(2)));
        assert!(!f.made_at(t0 + Duration::from_secs(3)), "the next one is a regeneration");
        f.starting_at(t0);
        assert!(!f.made_at(t0 + FIRST_TOKEN_WINDOW + Duration::from_secs(1)), "too late");
        f.starting_at(t0);
        f.token_seen();
        assert!(!f.made_at(t0 + Duration::from_secs(1)), "a token was in use");
    }
}
