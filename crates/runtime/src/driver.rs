//! The driver loop: one task owns the protocol core, feeds it peer
//! messages, client requests, timer expiries and the shutdown signal, and
//! executes its outputs. No locks around protocol state: nothing else
//! touches the core.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use api::{ClientRequest, ClientResponse};
use ftcore::{ClientId, Incarnation, JobCommand, JobEnd, JoinState, Message, NodeId, Output, Protocol};
use timer::{Clock, RealClock};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wire::{Closed, Incoming, LinkStats, SendError, Transport};

use crate::client_api::{ClientEvent, ToClient};
use crate::metrics::{Metrics, DEPARTURES};
use crate::notify::Notifier;

/// What a daemon does with its core's events (metrics, logs).
pub type EventHook<P> = Box<dyn FnMut(&<P as Protocol>::Event, &Metrics) + Send>;

/// Stores the node's durable state (its life and the core's state),
/// atomically and fsynced, before anything queued after it is executed.
/// An error stops the daemon: a node that cannot store what it promises
/// must not speak.
pub type PersistHook<P> = Box<dyn FnMut(Incarnation, Option<&<P as Protocol>::Durable>) -> Result<(), String> + Send>;

/// Longest wait at shutdown for the transport to write what is queued.
const TRANSPORT_FLUSH: Duration = Duration::from_secs(1);

/// How often peer gauges and the systemd status line are refreshed.
const REFRESH: Duration = Duration::from_millis(500);

/// How often a node still joining says so in its log.
const JOIN_LOG_EVERY: Duration = Duration::from_secs(3);

/// Adds [`api::JOINING_DETAIL`] to `report` while `state` is still
/// joining: `("joining", "1 of 4 answered")` (`ftctl status`; `ftctl lock`
/// says why it got no lock with it). A node that has joined adds nothing.
pub fn add_join_state(report: &mut ftcore::StatusReport, state: JoinState) {
    if let JoinState::Joining { answered, of } = state {
        report.details.push((api::JOINING_DETAIL.to_string(), format!("{answered} of {of} answered")));
    }
}

/// When a node still joining next logs its progress.
#[derive(Debug)]
struct JoinProgress {
    started: tokio::time::Instant,
    next: tokio::time::Instant,
}

impl JoinProgress {
    fn new(now: tokio::time::Instant) -> Self {
        JoinProgress { started: now, next: now + JOIN_LOG_EVERY }
    }

    /// The line to log at `now`, once every [`JOIN_LOG_EVERY`].
    fn line(&mut self, now: tokio::time::Instant, answered: usize, of: usize) -> Option<String> {
        if now < self.next {
            return None;
        }
        self.next = now + JOIN_LOG_EVERY;
        let waited = now.saturating_duration_since(self.started).as_secs();
        Some(format!(
            "joining: {answered} of {of} answered after {waited}s (a node serves once enough of its peers \
             answer: are they running, and is this node's address in their peers?)"
        ))
    }
}

/// Everything the loop needs besides the core.
pub struct Driver<P: Protocol> {
    /// The protocol core.
    pub core: P,
    /// The clock the core's instants come from.
    pub clock: RealClock,
    /// Peer transport.
    pub transport: Box<dyn Transport<P::Msg>>,
    /// Messages from peers.
    pub peers: mpsc::Receiver<Incoming<P::Msg>>,
    /// Client connections and requests.
    pub clients: mpsc::Receiver<ClientEvent<P::Request, P::Reply>>,
    /// Common metrics.
    pub metrics: Metrics,
    /// What the peer transport refused or closed.
    pub peer_stats: Arc<LinkStats>,
    /// What the client listener refused or closed.
    pub client_stats: Arc<LinkStats>,
    /// Daemon-specific handling of events.
    pub on_event: EventHook<P>,
    /// The configured members (for the status report's peer list).
    pub membership: membership::Membership,
    /// systemd, when running under it.
    pub notifier: Option<Notifier>,
    /// Cancelled on SIGTERM/SIGINT.
    pub shutdown: CancellationToken,
    /// How long a graceful leave may take before the loop ends anyway.
    pub leave_grace: Duration,
    /// Writes the state file.
    pub persist: PersistHook<P>,
    /// The life and core state last stored (the core's `None` until its
    /// first `Persist`, unless loaded at start).
    pub stored: (Incarnation, Option<P::Durable>),
    /// Supervised jobs the core started.
    pub jobs: Jobs,
}

/// The supervised jobs a core started (ringd's command services): each
/// runs under the supervisor binary ([`crate::supervisor`]), which kills it
/// at its deadline without the daemon's help. Their ends come back on a
/// channel, at most one per running job (the core bounds how many run);
/// dropping this kills every job still running.
#[derive(Debug)]
pub struct Jobs {
    supervisor: std::path::PathBuf,
    running: HashMap<u64, crate::supervisor::JobControl>,
    tx: mpsc::UnboundedSender<(u64, JobEnd)>,
    rx: mpsc::UnboundedReceiver<(u64, JobEnd)>,
}

impl Jobs {
    /// Jobs run under the supervisor binary at `supervisor`.
    pub fn new(supervisor: std::path::PathBuf) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Jobs { supervisor, running: HashMap::new(), tx, rx }
    }

    fn command(&mut self, cmd: JobCommand, clock: &RealClock) {
        use crate::supervisor::{CommandSpec, Job, JobOutcome, KillReason};
        match cmd {
            JobCommand::Start { id, argv, fence, deadline, max_output } => {
                // The core caps the deadline itself (timeout_ms, the lease).
                let spec = CommandSpec { argv, timeout: Duration::from_secs(365 * 24 * 3600), max_output };
                let tx = self.tx.clone();
                match Job::spawn(&self.supervisor, &spec, &[], fence, clock.to_std(deadline)) {
                    Ok(job) => {
                        let (control, waiter) = job.split();
                        self.running.insert(id, control);
                        tokio::spawn(async move {
                            let end = match waiter.wait().await {
                                JobOutcome::Exited { status, stdout, .. } => JobEnd::Exited { status, stdout },
                                JobOutcome::Signalled { signal, stdout, .. } => JobEnd::Signalled { signal, stdout },
                                JobOutcome::Killed { why, stdout, .. } => {
                                    JobEnd::Killed { deadline: why == KillReason::Deadline, stdout }
                                }
                                JobOutcome::SpawnFailed(e) | JobOutcome::SupervisorFailed(e) => JobEnd::Failed(e),
                            };
                            let _ = tx.send((id, end));
                        });
                    }
                    Err(e) => {
                        let why = format!("cannot start the supervisor {}: {e}", self.supervisor.display());
                        tracing::error!("{why}");
                        let _ = tx.send((id, JobEnd::Failed(why)));
                    }
                }
            }
            JobCommand::Extend { id, deadline } => {
                if let Some(c) = self.running.get_mut(&id) {
                    if let Err(e) = c.extend(clock.to_std(deadline)) {
                        tracing::warn!(job = id, "cannot extend a job's deadline (it keeps the old one): {e}");
                    }
                }
            }
            JobCommand::Kill { id } => {
                if let Some(c) = self.running.get_mut(&id) {
                    c.kill();
                }
            }
        }
    }
}

impl<P: Protocol> std::fmt::Debug for Driver<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").field("leave_grace", &self.leave_grace).finish_non_exhaustive()
    }
}

impl<P: Protocol> Driver<P>
where
    P::Msg: Message,
{
    /// Runs until a graceful leave completes (or its grace period ends), or
    /// until every input is gone; an error if the state could not be stored.
    pub async fn run(mut self) -> Result<(), String> {
        let mut replies: HashMap<ClientId, mpsc::Sender<ToClient<P::Reply>>> = HashMap::new();
        let mut leave_deadline: Option<tokio::time::Instant> = None;
        let watchdog_every = self.notifier.as_ref().and_then(|n| n.watchdog_interval());
        // The loop turns at least twice per watchdog period, so that the
        // watchdog task sees progress whenever the loop is healthy.
        let mut refresh = tokio::time::interval(watchdog_every.map_or(REFRESH, |w| (w / 2).min(REFRESH)));
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let progress = Arc::new(AtomicU64::new(0));
        let _watchdog = watchdog_every.zip(self.notifier.clone()).map(|(every, n)| {
            let progress = progress.clone();
            WatchdogTask(tokio::spawn(watchdog(n, every, progress)))
        });
        let mut last_status = String::new();
        let mut joined = false;
        let mut join_progress = JoinProgress::new(tokio::time::Instant::now());
        loop {
            progress.fetch_add(1, Ordering::Relaxed);
            let deadline = self.core.poll_timeout().map(|t| tokio::time::Instant::from_std(self.clock.to_std(t)));
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled(), if leave_deadline.is_none() => {
                    tracing::info!("shutting down: leaving the cluster gracefully");
                    if let Some(n) = &self.notifier { let _ = n.stopping(); }
                    leave_deadline = Some(tokio::time::Instant::now() + self.leave_grace);
                    self.core.handle_shutdown(self.clock.now());
                }
                _ = sleep_until_opt(leave_deadline) => {
                    tracing::warn!("graceful leave did not finish within {:?}; stopping anyway", self.leave_grace);
                    break;
                }
                _ = sleep_until_opt(deadline) => self.core.handle_timeout(self.clock.now()),
                Some((id, end)) = self.jobs.rx.recv() => {
                    self.jobs.running.remove(&id);
                    self.core.handle_job_end(self.clock.now(), id, end);
                }
                incoming = self.peers.recv() => match incoming {
                    Some(Incoming::Message { from, inc, msg }) => {
                        self.metrics.received(kind_name(&msg));
                        tracing::trace!(peer = %from, %inc, ?msg, "received");
                        DEPARTURES.heard_from(from.0);
                        self.core.handle_message(self.clock.now(), from, inc, msg);
                    }
                    Some(Incoming::Goodbye { peer }) => {
                        tracing::info!(%peer, "peer is stopping gracefully (it said goodbye)");
                        DEPARTURES.goodbye(peer.0);
                    }
                    Some(Incoming::Unreachable { peer }) => {
                        if DEPARTURES.left(peer.0) {
                            tracing::info!(%peer, "peer stopped: its address refuses connections");
                        } else {
                            tracing::info!(%peer, "peer's connection broke and its address refuses connections: its process is gone");
                        }
                        self.metrics.peer_unreachable();
                        self.core.handle_peer_unreachable(self.clock.now(), peer);
                    }
                    Some(Incoming::Rejected { reason, detail, remote }) => {
                        if self.peer_stats.log.allow(reason.label(), remote.ip()) {
                            tracing::warn!(%remote, reason = reason.label(), "peer frame rejected: {detail}");
                        }
                        self.metrics.rejected(reason);
                    }
                    None => break,
                },
                event = self.clients.recv() => match event {
                    Some(ClientEvent::Connected { id, tx }) => {
                        replies.insert(id, tx);
                        self.metrics.clients(replies.len());
                    }
                    Some(ClientEvent::Request { id, req }) => {
                        self.metrics.client_request(kind_name(&req));
                        match req {
                            ClientRequest::Status => {
                                let mut status = ftcore::status_of(&self.core, &self.membership);
                                add_join_state(&mut status, self.core.join_state());
                                self.queue_for_client(&mut replies, id, ToClient::Reply(ClientResponse::Status(status)));
                            }
                            ClientRequest::Op(r) => self.core.handle_request(self.clock.now(), id, r),
                        }
                        // Queued now, the mark follows the replies the core
                        // gave at once; later ones (a grant after a wait)
                        // are queued when they come.
                        self.execute(&mut replies)?;
                        self.queue_for_client(&mut replies, id, ToClient::Handled);
                    }
                    Some(ClientEvent::Gone { id }) => {
                        replies.remove(&id);
                        self.metrics.clients(replies.len());
                        self.core.handle_client_gone(self.clock.now(), id);
                    }
                    Some(ClientEvent::Rejected { reason, detail, remote }) => {
                        if self.client_stats.log.allow(reason.label(), remote.ip()) {
                            tracing::warn!(%remote, reason = reason.label(), "client frame rejected: {detail}");
                        }
                        self.metrics.rejected(reason);
                    }
                    None => break,
                },
                _ = refresh.tick() => {
                    let status = ftcore::status_of(&self.core, &self.membership);
                    for p in &status.peers {
                        self.metrics.peer_up(p.id, p.up);
                    }
                    self.metrics.incarnation(status.incarnation.0);
                    for (name, value) in self.core.gauges() {
                        metrics::gauge!(self.metrics.name(name)).set(value);
                    }
                    self.metrics.dropped_total("inbox_full", self.peer_stats.inbox_full());
                    self.metrics.dropped_total("chaos", self.peer_stats.chaos_dropped());
                    for (listener, stats) in [("peer", &self.peer_stats), ("client", &self.client_stats)] {
                        for (why, n) in stats.closed_totals() {
                            self.metrics.connections_closed(listener, why, n);
                        }
                        for (reason, n) in stats.take_unreported() {
                            self.metrics.rejected_n(reason, n);
                        }
                    }
                    if joined {
                        let line = format!("{} node {}: {}", status.daemon, status.node.0, status.role);
                        self.set_status(&mut last_status, line);
                    }
                }
            }
            self.execute(&mut replies)?;
            if !joined {
                match self.core.join_state() {
                    JoinState::Joined => {
                        joined = true;
                        tracing::info!("joined the cluster; serving");
                        if let Some(n) = &self.notifier {
                            let _ = n.ready();
                        }
                        let status = ftcore::status_of(&self.core, &self.membership);
                        let line = format!("{} node {}: {}", status.daemon, status.node.0, status.role);
                        self.set_status(&mut last_status, line);
                    }
                    JoinState::Joining { answered, of } => {
                        if let Some(line) = join_progress.line(tokio::time::Instant::now(), answered, of) {
                            tracing::info!("{line}");
                        }
                        self.set_status(&mut last_status, format!("joining: {answered} of {of} answered"));
                    }
                }
            }
            if leave_deadline.is_some() && self.core.is_left() {
                tracing::info!("graceful leave complete");
                break;
            }
        }
        // What the leave queued (the token, a Skip) is written before the
        // connections close.
        self.transport.close(TRANSPORT_FLUSH).await;
        Ok(())
    }

    /// Executes everything the core has queued, in order: a new life (the
    /// core moved past a life of its own that peers knew) and every
    /// `Persist` are stored before what follows them is sent.
    fn execute(&mut self, replies: &mut HashMap<ClientId, mpsc::Sender<ToClient<P::Reply>>>) -> Result<(), String> {
        loop {
            let lost = self.execute_once(replies)?;
            if lost.is_empty() {
                return Ok(());
            }
            // The transport tore those links down; the core hears of it
            // after the outputs queued with the lost messages, and what it
            // does about it is executed in turn.
            for peer in lost {
                self.core.handle_link_lost(self.clock.now(), peer);
            }
        }
    }

    /// Stores the life and the core's state (fsynced) through `persist`,
    /// timing the write. (Fields, not `self`: the state stored may be
    /// borrowed from `self.stored`.)
    fn store(
        persist: &mut PersistHook<P>,
        metrics: &Metrics,
        inc: Incarnation,
        core: Option<&P::Durable>,
    ) -> Result<(), String> {
        let started = std::time::Instant::now();
        persist(inc, core)?;
        metrics.state_written(started.elapsed());
        Ok(())
    }

    /// One pass over the core's outputs; returns the peers whose links
    /// were torn down by a full send queue.
    fn execute_once(
        &mut self,
        replies: &mut HashMap<ClientId, mpsc::Sender<ToClient<P::Reply>>>,
    ) -> Result<BTreeSet<NodeId>, String> {
        let mut lost = BTreeSet::new();
        let inc = self.core.incarnation();
        if inc != self.stored.0 {
            Self::store(&mut self.persist, &self.metrics, inc, self.stored.1.as_ref())?;
            self.stored.0 = inc;
        }
        while let Some(out) = self.core.poll_output() {
            match out {
                Output::Persist(state) => {
                    Self::store(&mut self.persist, &self.metrics, inc, Some(&state))?;
                    self.stored.1 = Some(state);
                }
                Output::Send { to, msg } => {
                    let kind = kind_name(&msg);
                    tracing::trace!(peer = %to, ?msg, "sending");
                    match self.transport.send(to, self.core.incarnation(), msg) {
                        Ok(()) => self.metrics.sent(kind),
                        Err(SendError::QueueFull(peer)) => {
                            self.metrics.dropped("queue_full");
                            lost.insert(peer);
                        }
                        Err(e) => {
                            tracing::debug!(peer = %to, "message not sent: {e}");
                            self.metrics.dropped("send_error");
                        }
                    }
                }
                Output::Reply { client, reply } => {
                    self.queue_for_client(replies, client, ToClient::Reply(ClientResponse::Op(reply)))
                }
                Output::Event(e) => (self.on_event)(&e, &self.metrics),
                Output::Job(cmd) => self.jobs.command(cmd, &self.clock),
            }
        }
        Ok(lost)
    }

    /// Queues `msg` for `client`'s connection. Its queue has room for its
    /// credit twice over, so it is full only when the client's socket
    /// stalled: then it cannot be told what it was granted. It is
    /// disconnected, so the core releases whatever it holds rather than
    /// have it hold something it never heard of.
    fn queue_for_client(
        &mut self,
        replies: &mut HashMap<ClientId, mpsc::Sender<ToClient<P::Reply>>>,
        client: ClientId,
        msg: ToClient<P::Reply>,
    ) {
        let Some(tx) = replies.get(&client) else { return };
        if let Err(e) = tx.try_send(msg) {
            if matches!(e, mpsc::error::TrySendError::Closed(_)) {
                // The client has gone; its `Gone` event is on its way.
                return;
            }
            self.client_stats.closed(Closed::NotReading);
            tracing::warn!(%client, "client is not reading its replies; disconnecting it");
            replies.remove(&client);
            self.metrics.clients(replies.len());
            self.core.handle_client_gone(self.clock.now(), client);
        }
    }

    /// Sends `STATUS=line` to systemd when it changed.
    fn set_status(&self, last: &mut String, line: String) {
        if *last != line {
            if let Some(n) = &self.notifier {
                let _ = n.status(&line);
            }
            *last = line;
        }
    }
}

/// Pings the systemd watchdog every `every` while the driver loop turns:
/// a loop stuck in a handler (or starved) stops the pings, and systemd
/// restarts the daemon.
async fn watchdog(n: Notifier, every: Duration, progress: Arc<AtomicU64>) {
    let mut seen = progress.load(Ordering::Relaxed);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = progress.load(Ordering::Relaxed);
        if now != seen {
            let _ = n.watchdog();
            seen = now;
        } else {
            tracing::warn!("driver loop made no progress for {every:?}; not pinging the watchdog");
        }
    }
}

/// Stops the watchdog task with the driver.
struct WatchdogTask(tokio::task::JoinHandle<()>);

impl Drop for WatchdogTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn kind_name<M: Message>(m: &M) -> &'static str {
    M::kind_name(m.kind()).unwrap_or("unknown")
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftcore::{Incarnation, NodeId, StatusReport};

    #[test]
    fn joining_progress_is_logged_every_few_seconds() {
        let t0 = tokio::time::Instant::now();
        let mut p = JoinProgress::new(t0);
        assert_eq!(p.line(t0, 0, 4), None);
        assert_eq!(p.line(t0 + Duration::from_secs(1), 0, 4), None);
        let line = p.line(t0 + JOIN_LOG_EVERY, 0, 4).expect("due");
        assert!(line.starts_with("joining: 0 of 4 answered after 3s"), "{line}");
        assert_eq!(p.line(t0 + JOIN_LOG_EVERY + Duration::from_secs(1), 1, 4), None);
        let line = p.line(t0 + JOIN_LOG_EVERY * 2, 1, 4).expect("due again");
        assert!(line.starts_with("joining: 1 of 4 answered after 6s"), "{line}");
    }

    #[test]
    fn the_status_says_a_node_is_still_joining() {
        let report = || StatusReport {
            daemon: "ntmutexd".into(),
            node: NodeId(1),
            incarnation: Incarnation(1),
            role: "joining".into(),
            peers: vec![],
            details: vec![("epoch".into(), "0".into())],
        };
        let mut r = report();
        add_join_state(&mut r, JoinState::Joining { answered: 1, of: 4 });
        assert_eq!(r.details.last(), Some(&(api::JOINING_DETAIL.to_string(), "1 of 4 answered".to_string())));
        let mut r = report();
        add_join_state(&mut r, JoinState::Joined);
        assert_eq!(r.details, report().details);
    }
}
