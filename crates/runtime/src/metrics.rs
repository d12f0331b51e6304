//! One metrics setup for every daemon: the Prometheus exporter on
//! `metrics_listen` and the metrics all daemons share, under the daemon's
//! prefix (`ringd_`, `ntmutex_`, `tokenwatch_`, `electd_`, `hbring_`).
//!
//! Each metric is declared once, in a table of [`Metric`]s: [`COMMON`]
//! (recorded by the runtime for every daemon), [`FENCES`], [`LOCKS`] (the
//! lock service's), [`RING`] (the heartbeat ring's) and one per daemon.
//! [`Metrics::declare`] describes a table (the `# HELP` and `# TYPE` lines);
//! [`Metrics::counter`], [`gauge`](Metrics::gauge),
//! [`histogram`](Metrics::histogram) and [`name`](Metrics::name) record by
//! the name after the prefix, checked against the declared tables in debug
//! builds; [`capture`] lets each daemon's tests check that every metric its
//! events record is declared, and every one declared is recorded.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use membership::NodeId;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

pub mod capture;

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

/// How long a peer's goodbye makes its going look planned in the log.
pub const GOODBYE_WINDOW: Duration = Duration::from_secs(30);

/// The peers that said goodbye (a graceful stop: `wire::Control::Goodbye`)
/// and have not been heard from since, for the log level of what their
/// going sets off: a peer suspected, a ring repaired, a failover. Those
/// are INFO after a goodbye (a planned stop) and WARN otherwise. The
/// driver notes goodbyes and clears a peer when a message from it arrives
/// (a new connection: a new life). Log levels only: no core reads it.
#[derive(Debug)]
pub struct Departures {
    any: std::sync::atomic::AtomicBool,
    said: std::sync::Mutex<Vec<(u32, std::time::Instant)>>,
}

/// This process's [`Departures`].
pub static DEPARTURES: Departures = Departures::new();

impl Departures {
    /// No goodbye heard.
    pub const fn new() -> Self {
        Departures { any: std::sync::atomic::AtomicBool::new(false), said: std::sync::Mutex::new(Vec::new()) }
    }

    /// `peer` said goodbye now.
    pub fn goodbye(&self, peer: u32) {
        self.goodbye_at(peer, std::time::Instant::now());
    }

    fn goodbye_at(&self, peer: u32, at: std::time::Instant) {
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        said.retain(|(p, t)| *p != peer && at.saturating_duration_since(*t) <= GOODBYE_WINDOW);
        said.push((peer, at));
        self.any.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A message from `peer` arrived: whatever it does next is news. Cheap
    /// when nobody said goodbye (one atomic load).
    pub fn heard_from(&self, peer: u32) {
        if !self.any.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        said.retain(|(p, _)| *p != peer);
        self.any.store(!said.is_empty(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether `peer` said goodbye within [`GOODBYE_WINDOW`] and has not
    /// been heard from since.
    pub fn left(&self, peer: u32) -> bool {
        self.left_at(peer, std::time::Instant::now())
    }

    fn left_at(&self, peer: u32, now: std::time::Instant) -> bool {
        let said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        said.iter().any(|(p, t)| *p == peer && now.saturating_duration_since(*t) <= GOODBYE_WINDOW)
    }

    /// Whether any peer said goodbye within [`GOODBYE_WINDOW`] and has not
    /// been heard from since (a failover that follows is a handover).
    pub fn any_left(&self) -> bool {
        let now = std::time::Instant::now();
        let said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        said.iter().any(|(_, t)| now.saturating_duration_since(*t) <= GOODBYE_WINDOW)
    }
}

impl Default for Departures {
    fn default() -> Self {
        Self::new()
    }
}

/// How Prometheus types a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Only goes up (`_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets (every one here is in seconds).
    Histogram,
}

/// One metric, declared once in its daemon's table: its name after the
/// prefix, kind, HELP text and label names. [`Metrics::declare`] describes
/// it (the exporter's `# HELP` and `# TYPE` lines); recording it by a name
/// no declared table has panics in debug builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metric {
    /// The name after `<prefix>_`.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// The HELP text.
    pub help: &'static str,
    /// The names of its labels (none: one series).
    pub labels: &'static [&'static str],
}

impl Metric {
    /// A counter.
    pub const fn counter(name: &'static str, labels: &'static [&'static str], help: &'static str) -> Metric {
        Metric { name, kind: Kind::Counter, help, labels }
    }

    /// A gauge.
    pub const fn gauge(name: &'static str, labels: &'static [&'static str], help: &'static str) -> Metric {
        Metric { name, kind: Kind::Gauge, help, labels }
    }

    /// A histogram (in seconds: its name ends in `_seconds`).
    pub const fn histogram(name: &'static str, labels: &'static [&'static str], help: &'static str) -> Metric {
        Metric { name, kind: Kind::Histogram, help, labels }
    }
}

/// The metrics every daemon has, recorded by the runtime (declared by
/// [`Metrics::install`]).
pub const COMMON: &[Metric] = &[
    Metric::gauge("build_info", &["version"], "Build information; the value is always 1."),
    Metric::gauge("peer_up", &["peer"], "1 if this node believes the peer is up, else 0."),
    Metric::gauge("incarnation", &[], "This node's current incarnation (life)."),
    Metric::counter("messages_sent_total", &["type"], "Peer messages sent, by type."),
    Metric::counter("messages_received_total", &["type"], "Peer messages received, by type."),
    Metric::counter(
        "messages_dropped_total",
        &["reason"],
        "Peer messages dropped, by reason: queue_full and send_error before sending, inbox_full on receipt (a UDP sender's inbox was full), chaos (dropped on purpose by the chaos.* keys).",
    ),
    Metric::counter("frames_rejected_total", &["reason"], "Peer or client frames refused, by reason."),
    Metric::counter("client_requests_total", &["type"], "Local client requests, by type."),
    Metric::counter(
        "connections_closed_total",
        &["listener", "reason"],
        "Connections refused or closed by this node, by listener (peer, client) and reason.",
    ),
    Metric::counter(
        "peers_unreachable_total",
        &[],
        "Peers whose connection broke and whose address then refused one (their process gone, host up): a hint of failure the core acts on before `suspect_after`.",
    ),
    Metric::histogram(
        "state_write_seconds",
        &[],
        "Durable writes of the state file (a temp file written and fsynced, renamed, the directory fsynced), by duration.",
    ),
    Metric::gauge("clients", &[], "Local client connections open."),
    Metric::histogram(
        "recovery_duration_seconds",
        &["kind"],
        "Time from detecting a failure to service restored, by kind of recovery.",
    ),
];

/// The fence gauges, of every daemon that issues fences (all but
/// hbringd); exact below 2^53.
pub const FENCES: &[Metric] = &[
    Metric::gauge(
        "fence_epoch",
        &[],
        "Epoch (or term) of the latest fence this node issued; exact below 2^53, `ftctl status --json` gives the exact value.",
    ),
    Metric::gauge(
        "fence_seq",
        &[],
        "Counter within its epoch of the latest fence this node issued; exact below 2^53, `ftctl status --json` gives the exact value.",
    ),
];

/// The lock service's metrics, of every daemon that serves the lock API
/// (ntmutexd, tokenwatchd, electd; with [`FENCES`]), recorded by
/// `lockservice::metrics::record`.
pub const LOCKS: &[Metric] = &[
    Metric::counter("cs_entries_total", &[], "Locks granted to local clients (critical sections entered)."),
    Metric::counter(
        "lock_lost_total",
        &[],
        "Locks taken back from a local holder (revoked at max_hold_ms, or the token was lost or superseded).",
    ),
    Metric::counter("acquire_timeouts_total", &[], "Lock requests of local clients that timed out before a grant."),
    Metric::histogram("token_wait_seconds", &[], "Time a local client waited from its lock request to the grant."),
    Metric::histogram("hold_seconds", &[], "Time a local client held a lock."),
];

/// The heartbeat ring's metrics (hbringd, and ringd, which embeds the
/// ring), recorded by `hbring::metrics::record`.
pub const RING: &[Metric] = &[
    Metric::counter("suspicions_total", &[], "Ring neighbours this node suspected of having failed."),
    Metric::counter(
        "rejoins_seen_total",
        &[],
        "Peers seen alive in a new life (restart, rejoin, or back from a partition).",
    ),
    Metric::counter(
        "self_rejoins_total",
        &[],
        "Times this node learnt it had been excluded from the ring and rejoined as a new life.",
    ),
    Metric::counter("stale_messages_total", &[], "Ring messages from an older life of their sender, ignored."),
    Metric::counter(
        "excluded_replies_total",
        &[],
        "Messages from an excluded life of a peer, answered Excluded (so it rejoins).",
    ),
    Metric::counter(
        "minority_yields_total",
        &[],
        "Messages from a life this node held dead while its own view held a minority alive: it rejoined (presuming everyone alive) instead of excluding that peer.",
    ),
];

/// The metrics of one daemon: its prefix and the tables it declared.
#[derive(Clone, Debug)]
pub struct Metrics {
    prefix: &'static str,
    tables: Arc<RwLock<Vec<&'static [Metric]>>>,
}

impl Metrics {
    /// Installs the global recorder with an HTTP exporter on `addr`
    /// (serving `/metrics`), declares [`COMMON`] and publishes build info.
    /// Must run inside a tokio runtime. Call once per process.
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
        let m = Metrics::detached(prefix);
        m.gauge("build_info", &[("version", env!("CARGO_PKG_VERSION"))]).set(1.0);
        Ok(m)
    }

    /// Metrics that record into whatever recorder is installed (none: a
    /// no-op), for tests and tools; [`COMMON`] is declared.
    pub fn detached(prefix: &'static str) -> Metrics {
        let m = Metrics { prefix, tables: Arc::default() };
        m.declare(COMMON);
        for reason in wire::RejectReason::ALL {
            m.counter("frames_rejected_total", &[("reason", reason.label())]).absolute(0);
        }
        m
    }

    /// Declares the metrics of `table`: describes each (HELP and TYPE) and
    /// sets each counter without labels at 0, so dashboards and alerts see
    /// it before its first event. A name already declared panics in debug
    /// builds: each metric is declared once.
    pub fn declare(&self, table: &'static [Metric]) {
        use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
        {
            let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
            if cfg!(debug_assertions) {
                for (i, m) in table.iter().enumerate() {
                    let again = table[..i].iter().chain(tables.iter().flat_map(|t| t.iter())).any(|d| d.name == m.name);
                    assert!(!again, "metric {}_{} declared twice", self.prefix, m.name);
                }
            }
            tables.push(table);
        }
        for m in table {
            let name = self.full(m.name);
            match m.kind {
                Kind::Counter => {
                    describe_counter!(name.clone(), m.help);
                    if m.labels.is_empty() {
                        metrics::counter!(name).increment(0);
                    }
                }
                Kind::Gauge => describe_gauge!(name, m.help),
                Kind::Histogram => describe_histogram!(name, Unit::Seconds, m.help),
            }
        }
    }

    /// The declared metric named `suffix`, if any.
    pub fn declared(&self, suffix: &str) -> Option<Metric> {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        tables.iter().flat_map(|t| t.iter()).find(|m| m.name == suffix).copied()
    }

    /// Every metric declared, table by table.
    pub fn tables(&self) -> Vec<&'static [Metric]> {
        self.tables.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `<prefix>_<suffix>`, for recording with the `metrics` macros; in
    /// debug builds, panics unless `suffix` is declared.
    #[track_caller]
    pub fn name(&self, suffix: &str) -> String {
        if cfg!(debug_assertions) {
            self.check(suffix, None, None);
        }
        self.full(suffix)
    }

    /// The counter `suffix` with `labels`; in debug builds, panics unless
    /// it is declared as a counter with those label names.
    #[track_caller]
    pub fn counter(&self, suffix: &str, labels: &[(&'static str, &str)]) -> metrics::Counter {
        if cfg!(debug_assertions) {
            self.check(suffix, Some(Kind::Counter), Some(labels));
        }
        metrics::counter!(self.full(suffix), Self::labels(labels))
    }

    /// The gauge `suffix` with `labels` (checked as [`counter`](Self::counter)'s).
    #[track_caller]
    pub fn gauge(&self, suffix: &str, labels: &[(&'static str, &str)]) -> metrics::Gauge {
        if cfg!(debug_assertions) {
            self.check(suffix, Some(Kind::Gauge), Some(labels));
        }
        metrics::gauge!(self.full(suffix), Self::labels(labels))
    }

    /// The histogram `suffix` with `labels` (checked as [`counter`](Self::counter)'s).
    #[track_caller]
    pub fn histogram(&self, suffix: &str, labels: &[(&'static str, &str)]) -> metrics::Histogram {
        if cfg!(debug_assertions) {
            self.check(suffix, Some(Kind::Histogram), Some(labels));
        }
        metrics::histogram!(self.full(suffix), Self::labels(labels))
    }

    fn full(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.prefix)
    }

    fn labels(labels: &[(&'static str, &str)]) -> Vec<metrics::Label> {
        labels.iter().map(|(k, v)| metrics::Label::new(*k, v.to_string())).collect()
    }

    #[track_caller]
    fn check(&self, suffix: &str, kind: Option<Kind>, labels: Option<&[(&'static str, &str)]>) {
        let name = self.full(suffix);
        let Some(m) = self.declared(suffix) else {
            panic!("metric {name} is recorded but not declared: add it to its daemon's table");
        };
        if let Some(kind) = kind {
            assert_eq!(m.kind, kind, "metric {name} is declared a {:?}, recorded as a {kind:?}", m.kind);
        }
        if let Some(labels) = labels {
            let keys: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
            assert_eq!(keys, m.labels, "metric {name} is recorded with other labels than declared");
        }
    }

    /// Declares `recoveries_total{kind}` at 0 for each of the daemon's
    /// kinds of recovery (interfaces.md: every daemon labels its
    /// recoveries by `kind`; its table declares `recoveries_total` with its
    /// own HELP text, saying which it counts).
    pub fn declare_recoveries(&self, kinds: &[&'static str]) {
        for kind in kinds {
            self.counter("recoveries_total", &[("kind", kind)]).increment(0);
        }
    }

    /// The state file was written (and fsynced) once, taking `d`:
    /// `state_write_seconds` (its `_count` is the number of writes).
    pub fn state_written(&self, d: Duration) {
        self.histogram("state_write_seconds", &[]).record(d.as_secs_f64());
    }

    /// A peer message was sent.
    pub fn sent(&self, kind: &'static str) {
        self.counter("messages_sent_total", &[("type", kind)]).increment(1);
    }

    /// A peer message arrived and passed every check.
    pub fn received(&self, kind: &'static str) {
        self.counter("messages_received_total", &[("type", kind)]).increment(1);
    }

    /// A peer's process was found gone ([`wire::Incoming::Unreachable`]).
    pub fn peer_unreachable(&self) {
        self.counter("peers_unreachable_total", &[]).increment(1);
    }

    /// A peer message could not be queued.
    pub fn dropped(&self, reason: &'static str) {
        self.counter("messages_dropped_total", &[("reason", reason)]).increment(1);
    }

    /// Sets the total of received datagrams dropped for `reason`.
    pub fn dropped_total(&self, reason: &'static str, total: u64) {
        self.counter("messages_dropped_total", &[("reason", reason)]).absolute(total);
    }

    /// A frame was refused.
    pub fn rejected(&self, reason: wire::RejectReason) {
        self.counter("frames_rejected_total", &[("reason", reason.label())]).increment(1);
    }

    /// Adds `n` rejected frames (those the transport could not report one
    /// by one).
    pub fn rejected_n(&self, reason: wire::RejectReason, n: u64) {
        if n > 0 {
            self.counter("frames_rejected_total", &[("reason", reason.label())]).increment(n);
        }
    }

    /// Sets the total of connections `listener` closed for `why`.
    pub fn connections_closed(&self, listener: &'static str, why: wire::Closed, total: u64) {
        self.counter("connections_closed_total", &[("listener", listener), ("reason", why.label())]).absolute(total);
    }

    /// A local client request arrived.
    pub fn client_request(&self, kind: &'static str) {
        self.counter("client_requests_total", &[("type", kind)]).increment(1);
    }

    /// Number of client connections open.
    pub fn clients(&self, n: usize) {
        self.gauge("clients", &[]).set(n as f64);
    }

    /// Whether `peer` is believed up.
    pub fn peer_up(&self, peer: NodeId, up: bool) {
        self.gauge("peer_up", &[("peer", &peer.0.to_string())]).set(if up { 1.0 } else { 0.0 });
    }

    /// This node's incarnation.
    pub fn incarnation(&self, inc: u64) {
        self.gauge("incarnation", &[]).set(inc as f64);
    }

    /// A recovery of `kind` started or completed: `recoveries_total{kind}`
    /// (each daemon's HELP says which it counts).
    pub fn recovery_counted(&self, kind: &'static str) {
        self.counter("recoveries_total", &[("kind", kind)]).increment(1);
    }

    /// A recovery of `kind` took `d`, from detection to service restored:
    /// `recovery_duration_seconds{kind}`.
    pub fn recovery(&self, kind: &'static str, d: Duration) {
        self.histogram("recovery_duration_seconds", &[("kind", kind)]).record(d.as_secs_f64());
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

    #[test]
    fn a_peer_has_left_from_its_goodbye_until_it_is_heard_from_or_the_window_ends() {
        let t0 = std::time::Instant::now();
        let d = Departures::new();
        assert!(!d.left_at(3, t0), "no goodbye yet");
        d.goodbye_at(3, t0);
        assert!(d.left_at(3, t0 + Duration::from_secs(1)));
        assert!(!d.left_at(2, t0 + Duration::from_secs(1)), "another peer said nothing");
        assert!(!d.left_at(3, t0 + GOODBYE_WINDOW + Duration::from_secs(1)), "long ago");
        d.heard_from(2);
        assert!(d.left_at(3, t0), "a message from another peer changes nothing");
        d.heard_from(3);
        assert!(!d.left_at(3, t0), "back in a new life");
        assert!(!d.any.load(std::sync::atomic::Ordering::Relaxed), "nobody left: the fast path again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every common metric is recorded by a method of [`Metrics`], as
    /// declared; the shared tables name no metric twice.
    #[test]
    fn every_common_metric_is_recorded_as_declared() {
        let m = Metrics::detached("x");
        let seen = capture::recorded(|| {
            m.gauge("build_info", &[("version", env!("CARGO_PKG_VERSION"))]).set(1.0);
            m.state_written(Duration::from_millis(1));
            m.sent("a");
            m.received("a");
            m.peer_unreachable();
            m.dropped("queue_full");
            m.dropped_total("chaos", 3);
            m.rejected(wire::RejectReason::ALL[0]);
            m.rejected_n(wire::RejectReason::ALL[1], 2);
            m.connections_closed("peer", wire::Closed::NoSlot, 4);
            m.client_request("Lock");
            m.clients(2);
            m.peer_up(NodeId(2), true);
            m.incarnation(5);
            m.recovery("ring", Duration::from_millis(30));
        });
        for d in COMMON {
            let name = format!("x_{}", d.name);
            let labels: Vec<String> = d.labels.iter().map(|l| l.to_string()).collect();
            assert!(seen.contains(&(name.clone(), d.kind, labels)), "{name} is never recorded as declared");
        }
        assert_eq!(seen.len(), COMMON.len(), "{seen:?}");
        m.declare(FENCES);
        m.declare(LOCKS);
        m.declare(RING);
    }

    #[test]
    #[should_panic(expected = "x_nonesuch_total is recorded but not declared")]
    fn recording_an_undeclared_metric_panics_in_debug_builds() {
        Metrics::detached("x").counter("nonesuch_total", &[]).increment(1);
    }

    #[test]
    #[should_panic(expected = "declared twice")]
    fn declaring_a_metric_twice_panics_in_debug_builds() {
        let m = Metrics::detached("x");
        m.declare(LOCKS);
        m.declare(LOCKS);
    }
}
