//! The driver loop: one task owns the protocol core, feeds it peer
//! messages, client requests, timer expiries and the shutdown signal, and
//! executes its outputs. No locks around protocol state: nothing else
//! touches the core.

use std::collections::HashMap;
use std::time::Duration;

use client::{ClientRequest, ClientResponse};
use ftcore::{ClientId, Incarnation, Message, Output, Protocol};
use timer::{Clock, RealClock};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wire::{Incoming, SendError, Transport};

use crate::client_api::ClientEvent;
use crate::metrics::Metrics;
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
        let mut replies: HashMap<ClientId, mpsc::Sender<ClientResponse<P::Reply>>> = HashMap::new();
        let mut leave_deadline: Option<tokio::time::Instant> = None;
        let mut refresh = tokio::time::interval(REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let watchdog_every = self.notifier.as_ref().and_then(|n| n.watchdog_interval());
        let mut watchdog = tokio::time::interval(watchdog_every.unwrap_or(Duration::from_secs(3600)));
        let mut last_role = String::new();
        loop {
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
                incoming = self.peers.recv() => match incoming {
                    Some(Incoming::Message { from, inc, msg }) => {
                        self.metrics.received(kind_name(&msg));
                        self.core.handle_message(self.clock.now(), from, inc, msg);
                    }
                    Some(Incoming::Rejected { reason, detail, remote }) => {
                        tracing::warn!(%remote, reason = reason.label(), "peer frame rejected: {detail}");
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
                                if let Some(tx) = replies.get(&id) {
                                    let status = ftcore::status_of(&self.core, &self.membership);
                                    let _ = tx.try_send(ClientResponse::Status(status));
                                }
                            }
                            ClientRequest::Op(r) => self.core.handle_request(self.clock.now(), id, r),
                        }
                    }
                    Some(ClientEvent::Gone { id }) => {
                        replies.remove(&id);
                        self.metrics.clients(replies.len());
                        self.core.handle_client_gone(self.clock.now(), id);
                    }
                    Some(ClientEvent::Rejected { reason, detail, remote }) => {
                        tracing::warn!(%remote, reason = reason.label(), "client frame rejected: {detail}");
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
                    if status.role != last_role {
                        if let Some(n) = &self.notifier {
                            let _ = n.status(&format!("{} node {}: {}", status.daemon, status.node.0, status.role));
                        }
                        last_role = status.role;
                    }
                }
                _ = watchdog.tick(), if watchdog_every.is_some() => {
                    if let Some(n) = &self.notifier { let _ = n.watchdog(); }
                }
            }
            self.execute(&mut replies)?;
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
    fn execute(
        &mut self,
        replies: &mut HashMap<ClientId, mpsc::Sender<ClientResponse<P::Reply>>>,
    ) -> Result<(), String> {
        let inc = self.core.incarnation();
        if inc != self.stored.0 {
            (self.persist)(inc, self.stored.1.as_ref())?;
            self.stored.0 = inc;
        }
        while let Some(out) = self.core.poll_output() {
            match out {
                Output::Persist(state) => {
                    (self.persist)(inc, Some(&state))?;
                    self.stored.1 = Some(state);
                }
                Output::Send { to, msg } => {
                    let kind = kind_name(&msg);
                    match self.transport.send(to, self.core.incarnation(), msg) {
                        Ok(()) => self.metrics.sent(kind),
                        Err(SendError::QueueFull(_)) => self.metrics.dropped("queue_full"),
                        Err(e) => {
                            tracing::debug!(peer = %to, "message not sent: {e}");
                            self.metrics.dropped("send_error");
                        }
                    }
                }
                Output::Reply { client, reply } => {
                    let Some(tx) = replies.get(&client) else { continue };
                    if tx.try_send(ClientResponse::Op(reply)).is_err() {
                        // A client that does not read its replies cannot be
                        // told what it was granted: disconnect it, so the
                        // core releases whatever it holds rather than have
                        // it hold something it never heard of.
                        tracing::warn!(%client, "client is not reading its replies; disconnecting it");
                        replies.remove(&client);
                        self.metrics.clients(replies.len());
                        self.core.handle_client_gone(self.clock.now(), client);
                    }
                }
                Output::Event(e) => (self.on_event)(&e, &self.metrics),
            }
        }
        Ok(())
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
