//! [`TcpTransport`]: reliable, ordered, reconnecting peer links.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use bytes::Bytes;
use ftcore::Message;
use futures::{SinkExt, StreamExt};
use membership::{Incarnation, NodeId};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore},
};
use tokio_util::{
    codec::{FramedRead, FramedWrite},
    sync::{CancellationToken, DropGuard},
};
use tracing::{debug, warn};

use super::{
    accept_with_backoff, fair_inboxes, fresh_challenge, report, Closed, Incoming, LinkStats, SendError, Transport,
    TransportConfig, TransportError,
};
use crate::{
    auth::CHALLENGE_LEN,
    frame::{Body, Control, LengthPrefixed, PeerCodec, Received, RejectReason, Rejected, StreamError},
};

/// How many queued messages a TCP sender writes before flushing.
const WRITE_BATCH: usize = 64;

/// A replaced connection's frames are delivered until none has arrived for
/// this long (or the handshake timeout passes), before its successor's.
const DRAIN_QUIET: Duration = Duration::from_millis(20);

/// The sending half of one peer: its queue, and the signal that the queue
/// overflowed and the link must be torn down.
#[derive(Debug)]
struct PeerQueue<M> {
    tx: mpsc::Sender<(Incarnation, M)>,
    overflow: Arc<Notify>,
}

/// Reliable, ordered, reconnecting peer links over TCP.
#[derive(Debug)]
pub struct TcpTransport<M> {
    local: SocketAddr,
    peers: HashMap<NodeId, PeerQueue<M>>,
    links: Vec<tokio::task::JoinHandle<()>>,
    /// Cancelled by `close`: a link with nothing left to write ends at
    /// once instead of waiting out its reconnect backoff.
    closing: CancellationToken,
    _stop: DropGuard,
}

impl<M: Message> TcpTransport<M> {
    /// Binds the listener, then starts the accept loop and one sender task
    /// per peer. Messages arriving are pushed to `incoming`.
    pub async fn bind(cfg: TransportConfig, incoming: mpsc::Sender<Incoming<M>>) -> Result<Self, TransportError> {
        cfg.validate()?;
        let listener =
            TcpListener::bind(cfg.listen).await.map_err(|source| TransportError::Bind { addr: cfg.listen, source })?;
        let local = listener.local_addr().map_err(|source| TransportError::Bind { addr: cfg.listen, source })?;
        let codec = Arc::new(cfg.codec::<M>());
        let stop = CancellationToken::new();
        let closing = CancellationToken::new();
        // One waker per peer: an authenticated inbound frame from a peer
        // proves it is up, so our link to it stops backing off and
        // reconnects now (a restarted peer must not wait seconds for our
        // answers while its recovery windows close).
        let wakers: HashMap<NodeId, Arc<Notify>> =
            cfg.members.ids().filter(|id| *id != cfg.me).map(|id| (id, Arc::new(Notify::new()))).collect();
        let others = wakers.len();
        let inboxes = fair_inboxes(wakers.keys().copied(), incoming.clone(), stop.clone());
        let inbound = Arc::new(Inbound {
            codec: codec.clone(),
            incoming,
            inboxes: inboxes.clone(),
            stats: cfg.stats.clone(),
            handshake_timeout: cfg.handshake_timeout,
            idle_timeout: cfg.idle_timeout,
            wakers: wakers.clone(),
            links: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
        });
        let slots = Slots {
            general: Arc::new(Semaphore::new(cfg.max_connections.saturating_sub(others).max(1))),
            reserved: Arc::new(Semaphore::new(others.max(1))),
            member_ips: cfg.members.members().iter().filter(|m| m.id != cfg.me).map(|m| m.addr.ip()).collect(),
        };
        tokio::spawn(accept_loop(listener, inbound, slots, cfg.accept_backoff, stop.clone()));

        let mut peers = HashMap::new();
        let mut links = Vec::new();
        for m in cfg.members.members().iter().filter(|m| m.id != cfg.me) {
            let (tx, rx) = mpsc::channel(cfg.queue_len);
            let overflow = Arc::new(Notify::new());
            let link = PeerLink {
                peer: m.id,
                inbox: inboxes.get(&m.id).cloned(),
                addr: m.addr,
                codec: codec.clone(),
                backoff: Backoff::new(cfg.backoff_min, cfg.backoff_max, cfg.me, m.id),
                wake: wakers.get(&m.id).cloned().unwrap_or_default(),
                overflow: overflow.clone(),
                handshake_timeout: cfg.handshake_timeout,
                keepalive_every: cfg.idle_timeout / 3,
                stats: cfg.stats.clone(),
                closing: closing.clone(),
            };
            let stop = stop.clone();
            links.push(tokio::spawn(async move {
                stop.run_until_cancelled(link.run(rx)).await;
            }));
            peers.insert(m.id, PeerQueue { tx, overflow });
        }
        Ok(TcpTransport { local, peers, links, closing, _stop: stop.drop_guard() })
    }
}

impl<M: Message> Transport<M> for TcpTransport<M> {
    fn send(&self, to: NodeId, inc: Incarnation, msg: M) -> Result<(), SendError> {
        let peer = self.peers.get(&to).ok_or(SendError::UnknownPeer(to))?;
        peer.tx.try_send((inc, msg)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                // Never a silent gap in a FIFO stream: the link drops what
                // is queued and closes its connection, so the receiver sees
                // the loss as a break; the caller tells its core.
                peer.overflow.notify_one();
                SendError::QueueFull(to)
            }
            mpsc::error::TrySendError::Closed(_) => SendError::Closed,
        })
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn close(self: Box<Self>, grace: Duration) -> futures::future::BoxFuture<'static, ()> {
        let TcpTransport { peers, links, closing, _stop, .. } = *self;
        // Closing the queues ends each link once it has written what was
        // queued (a link still reconnecting with messages queued gives up
        // at the grace's end; one with nothing queued ends at once: a
        // peer that stopped with us must not hold our exit for the grace).
        closing.cancel();
        drop(peers);
        Box::pin(async move {
            let _ = tokio::time::timeout(grace, futures::future::join_all(links)).await;
            drop(_stop);
        })
    }
}

/// Turns on TCP keepalive (probes after a third of the idle timeout), so a
/// peer host that vanished is noticed even by a side that only reads.
fn keepalive(stream: &TcpStream, idle: Duration) {
    let ka = socket2::TcpKeepalive::new().with_time((idle / 3).max(Duration::from_secs(1)));
    let _ = socket2::SockRef::from(stream).set_tcp_keepalive(&ka);
}

/// The receiving side: what every inbound connection task shares.
#[derive(Debug)]
struct Inbound<M> {
    codec: Arc<PeerCodec<M>>,
    /// For rejections (reported without waiting).
    incoming: mpsc::Sender<Incoming<M>>,
    /// Each member's inbox ([`fair_inboxes`]).
    inboxes: HashMap<NodeId, mpsc::Sender<Incoming<M>>>,
    stats: Arc<LinkStats>,
    handshake_timeout: Duration,
    idle_timeout: Duration,
    /// Signalled when a peer connects to us (its link retries at once).
    wakers: HashMap<NodeId, Arc<Notify>>,
    /// Each member's current authenticated connection: at most one
    /// delivers at a time, so frames of one sender never interleave.
    links: Mutex<HashMap<NodeId, Current>>,
    next_conn: AtomicU64,
}

/// A member's current inbound connection.
#[derive(Debug)]
struct Current {
    conn: u64,
    /// Cancelled when a newer connection from the same member takes over.
    retire: CancellationToken,
    /// Closed (its sender dropped) when the connection's task has
    /// delivered its last frame.
    done: Option<oneshot::Receiver<()>>,
}

/// Slots for connections that have not authenticated yet: `general` ones
/// for anyone (`max_connections − (N − 1)`, at least one) and `N − 1`
/// more kept for connections from members' addresses, so that a flood
/// from elsewhere cannot lock members out. An authenticated connection
/// gives its slot back and holds its member's one link instead.
#[derive(Debug)]
struct Slots {
    general: Arc<Semaphore>,
    reserved: Arc<Semaphore>,
    member_ips: std::collections::HashSet<std::net::IpAddr>,
}

impl Slots {
    fn take(&self, remote: SocketAddr) -> Option<OwnedSemaphorePermit> {
        self.general.clone().try_acquire_owned().ok().or_else(|| {
            self.member_ips.contains(&remote.ip()).then(|| self.reserved.clone().try_acquire_owned().ok()).flatten()
        })
    }
}

/// Accepts inbound connections into [`Slots`].
async fn accept_loop<M: Message>(
    listener: TcpListener,
    inbound: Arc<Inbound<M>>,
    slots: Slots,
    backoff: Duration,
    stop: CancellationToken,
) {
    while let Some((stream, remote)) = accept_with_backoff(&listener, backoff, &inbound.stats, &stop).await {
        let Some(permit) = slots.take(remote) else {
            inbound.stats.closed(Closed::NoSlot);
            if inbound.stats.log.allow("no_slot", remote.ip()) {
                warn!(%remote, "refusing peer connection: every slot for unauthenticated connections is taken");
            }
            continue; // dropping the stream closes it
        };
        let (inbound, stop) = (inbound.clone(), stop.clone());
        tokio::spawn(async move {
            stop.run_until_cancelled(inbound.serve(stream, remote, permit)).await;
        });
    }
}

impl<M: Message> Inbound<M> {
    /// Serves one inbound connection: sends the challenge, waits at most
    /// the handshake timeout for a valid first frame, then delivers frames
    /// until the connection ends, a frame is rejected, the link falls
    /// silent for the idle timeout, or a newer connection replaces it.
    async fn serve(self: Arc<Self>, mut stream: TcpStream, remote: SocketAddr, permit: OwnedSemaphorePermit) {
        keepalive(&stream, self.idle_timeout);
        let challenge = fresh_challenge();
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let mut frames = match tokio::time::timeout(self.handshake_timeout, stream.write_all(&challenge)).await {
            Ok(Ok(())) => FramedRead::new(stream, LengthPrefixed::new(self.codec.max_frame())),
            _ => return debug!(%remote, "inbound connection lost before the challenge"),
        };
        let mut next_seq = 0u64;
        let first = match tokio::time::timeout(self.handshake_timeout, self.next_frame(&mut frames, &challenge, remote))
            .await
        {
            Err(_) => {
                self.stats.closed(Closed::HandshakeTimeout);
                if self.stats.log.allow("handshake_timeout", remote.ip()) {
                    warn!(%remote, "closing peer connection: no valid first frame within {:?}", self.handshake_timeout);
                }
                return;
            }
            Ok(None) => return,
            Ok(Some(got)) => got,
        };
        if first.seq != next_seq {
            let detail = format!("expected seq {next_seq} on this connection, got {} from {}", first.seq, first.from);
            return report(&self.incoming, &self.stats, Rejected::new(RejectReason::Replay, detail), remote);
        }
        next_seq += 1;
        // Authenticated: this member's slot, not an unknown source's.
        drop(permit);
        let sender = first.from;
        let (retire, done) = self.take_over(sender, conn).await;
        if let Some(w) = self.wakers.get(&sender) {
            w.notify_one();
        }
        if !self.deliver(first).await {
            return self.release(sender, conn);
        }
        let mut retiring: Option<tokio::time::Instant> = None;
        loop {
            let wait = match retiring {
                Some(until) => DRAIN_QUIET.min(until.saturating_duration_since(tokio::time::Instant::now())),
                None => self.idle_timeout,
            };
            let got = tokio::select! {
                biased;
                _ = retire.cancelled(), if retiring.is_none() => {
                    // A newer connection from the sender waits for ours:
                    // deliver what already arrived here first, so frames
                    // stay in order, then give way.
                    self.stats.closed(Closed::Replaced);
                    retiring = Some(tokio::time::Instant::now() + self.handshake_timeout);
                    continue;
                }
                r = tokio::time::timeout(wait, self.next_frame(&mut frames, &challenge, remote)) => r,
            };
            let got = match got {
                Ok(Some(got)) => got,
                Ok(None) => break,
                Err(_) if retiring.is_some() => break,
                Err(_) => {
                    self.stats.closed(Closed::IdleTimeout);
                    if self.stats.log.allow("idle_timeout", remote.ip()) {
                        warn!(%remote, peer = %sender, "closing peer connection: silent for {:?}", self.idle_timeout);
                    }
                    break;
                }
            };
            if got.seq != next_seq {
                let detail = format!("expected seq {next_seq} on this connection, got {} from {}", got.seq, got.from);
                report(&self.incoming, &self.stats, Rejected::new(RejectReason::Replay, detail), remote);
                break;
            }
            if got.from != sender {
                let detail = format!("expected frames from {sender} on this connection, got one from {}", got.from);
                report(&self.incoming, &self.stats, Rejected::new(RejectReason::UnknownSender, detail), remote);
                break;
            }
            next_seq += 1;
            // Awaiting here applies backpressure to this peer only: each
            // member has its own inbox, merged in turn.
            if !self.deliver(got).await {
                break;
            }
        }
        self.release(sender, conn);
        drop(done);
        debug!(%remote, "inbound connection closed");
    }

    /// The next checked frame, `None` when the connection ended or a frame
    /// was rejected (reported here).
    async fn next_frame(
        &self,
        frames: &mut FramedRead<TcpStream, LengthPrefixed>,
        challenge: &[u8; CHALLENGE_LEN],
        remote: SocketAddr,
    ) -> Option<Received<Body<M>>> {
        let frame = match frames.next().await? {
            Ok(frame) => frame,
            Err(StreamError::Rejected(r)) => {
                report(&self.incoming, &self.stats, r, remote);
                return None;
            }
            Err(e) => {
                debug!(%remote, "inbound connection failed: {e}");
                return None;
            }
        };
        match self.codec.decode_any(&frame, challenge) {
            Ok(got) => Some(got),
            Err(r) => {
                report(&self.incoming, &self.stats, r, remote);
                None
            }
        }
    }

    /// Hands a message (or a peer's [`Control::Goodbye`]) to the owner
    /// (other control frames end here). `false`
    /// once the owner is gone.
    async fn deliver(&self, got: Received<Body<M>>) -> bool {
        match got.msg {
            Body::Msg(msg) => match self.inboxes.get(&got.from) {
                Some(inbox) => inbox.send(Incoming::Message { from: got.from, inc: got.inc, msg }).await.is_ok(),
                None => true, // this node itself: `decode_any` admits members
            },
            Body::Control(Control::Goodbye) => match self.inboxes.get(&got.from) {
                Some(inbox) => inbox.send(Incoming::Goodbye { peer: got.from }).await.is_ok(),
                None => true,
            },
            Body::Control(_) => true,
        }
    }

    /// Makes `conn` the sender's current connection; waits (at most the
    /// handshake timeout) for the one it replaces to deliver its last
    /// frame. Returns this connection's retire signal and its done token.
    async fn take_over(&self, sender: NodeId, conn: u64) -> (CancellationToken, oneshot::Sender<()>) {
        let retire = CancellationToken::new();
        let (done_tx, done_rx) = oneshot::channel();
        let old =
            self.links.lock().ok().and_then(|mut links| {
                links.insert(sender, Current { conn, retire: retire.clone(), done: Some(done_rx) })
            });
        if let Some(mut old) = old {
            old.retire.cancel();
            if let Some(done) = old.done.take() {
                let _ = tokio::time::timeout(self.handshake_timeout, done).await;
            }
        }
        (retire, done_tx)
    }

    /// Forgets `conn` as the sender's connection, unless a newer one took
    /// over.
    fn release(&self, sender: NodeId, conn: u64) {
        if let Ok(mut links) = self.links.lock() {
            if links.get(&sender).is_some_and(|c| c.conn == conn) {
                links.remove(&sender);
            }
        }
    }
}

/// Exponential reconnect delay with a fixed per-link spread (derived from
/// the two node ids) so that peers do not reconnect in lockstep.
#[derive(Debug)]
struct Backoff {
    min: Duration,
    max: Duration,
    current: Duration,
    spread_permille: u32,
}

impl Backoff {
    fn new(min: Duration, max: Duration, me: NodeId, peer: NodeId) -> Self {
        let spread_permille = (me.0.wrapping_mul(31).wrapping_add(peer.0.wrapping_mul(17))) % 250;
        Backoff { min, max, current: min, spread_permille }
    }

    /// The delay before the next attempt; doubles each call up to `max`.
    fn next_delay(&mut self) -> Duration {
        let d = self.current + self.current * self.spread_permille / 1000;
        self.current = (self.current * 2).min(self.max);
        d.min(self.max)
    }

    fn reset(&mut self) {
        self.current = self.min;
    }
}

/// The sending side of one peer link.
#[derive(Debug)]
struct PeerLink<M> {
    peer: NodeId,
    /// The peer's inbox, for [`Incoming::Unreachable`].
    inbox: Option<mpsc::Sender<Incoming<M>>>,
    addr: SocketAddr,
    codec: Arc<PeerCodec<M>>,
    backoff: Backoff,
    /// Signalled when the peer connects to us: retry at once.
    wake: Arc<Notify>,
    /// Signalled by `send` when the queue is full: tear the link down.
    overflow: Arc<Notify>,
    handshake_timeout: Duration,
    keepalive_every: Duration,
    stats: Arc<LinkStats>,
    /// Cancelled when the transport closes.
    closing: CancellationToken,
}

/// How one connection of a link ended.
enum Ended {
    /// The queue closed (the transport is closing) and all was written.
    QueueClosed,
    /// The connection failed or could not be made.
    Lost {
        /// How long it had been up, if it was established (the backoff
        /// starts over).
        connected: Option<Duration>,
        /// Whether the connect was refused (nothing listens there).
        refused: bool,
        why: String,
    },
}

impl<M: Message> PeerLink<M> {
    /// Connects, sends queued messages, reconnects; until the queue closes.
    async fn run(mut self, mut queue: mpsc::Receiver<(Incarnation, M)>) {
        // An established connection broke: the next attempt comes at once
        // (unless that connection was itself such an attempt: a peer that
        // accepts and closes gets the backoff), and the first refusal
        // before a new connection is reported as the peer's end.
        let mut broke = false;
        let mut retried_at_once = false;
        loop {
            if self.closing.is_cancelled() && queue.is_empty() {
                return;
            }
            let ended = tokio::select! {
                ended = self.session(&mut queue) => Some(ended),
                _ = self.overflow.notified() => None,
            };
            match ended {
                Some(Ended::QueueClosed) => return,
                Some(Ended::Lost { connected, refused, why }) => {
                    debug!(peer = %self.peer, addr = %self.addr, "link down: {why}");
                    if refused && std::mem::take(&mut broke) {
                        self.report_unreachable();
                    }
                    if let Some(lasted) = connected {
                        self.backoff.reset();
                        if lasted >= self.backoff.min || !retried_at_once {
                            broke = true;
                            retried_at_once = true;
                            continue;
                        }
                    }
                    retried_at_once = false;
                }
                None => {
                    // Dropping the session closed its connection; what is
                    // still queued goes with it, so the peer sees one gap,
                    // at a connection break, and the next connection
                    // starts with what is sent from now on.
                    let mut dropped = 0usize;
                    while queue.try_recv().is_ok() {
                        dropped += 1;
                    }
                    self.stats.closed(Closed::QueueFull);
                    warn!(peer = %self.peer, "send queue full: link torn down, {dropped} queued messages dropped");
                    continue; // reconnect at once
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.backoff.next_delay()) => {}
                _ = self.wake.notified() => self.backoff.reset(),
                // Once: after that the backoff paces the last attempts.
                _ = self.closing.cancelled(), if !self.closing.is_cancelled() => {}
            }
        }
    }

    /// Tells the core that the peer's process is gone (a connection broke
    /// and the next was refused). Never waits: with its inbox full the
    /// hint is dropped, and silence tells the core in time.
    fn report_unreachable(&self) {
        debug!(peer = %self.peer, addr = %self.addr, "connection broke and the next was refused: peer process gone");
        if let Some(inbox) = &self.inbox {
            let _ = inbox.try_send(Incoming::Unreachable { peer: self.peer });
        }
    }

    /// One connection: connect, say Hello, write what is queued.
    async fn session(&self, queue: &mut mpsc::Receiver<(Incarnation, M)>) -> Ended {
        let (stream, challenge) = match tokio::time::timeout(self.handshake_timeout, connect(self.addr)).await {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                let refused = e.kind() == std::io::ErrorKind::ConnectionRefused;
                return Ended::Lost { connected: None, refused, why: format!("connect failed: {e}") };
            }
            Err(_) => return Ended::Lost { connected: None, refused: false, why: "connect timed out".into() },
        };
        debug!(peer = %self.peer, addr = %self.addr, "connected");
        let up = tokio::time::Instant::now();
        match self.pump(stream, &challenge, queue).await {
            Ok(()) => Ended::QueueClosed,
            Err(why) => Ended::Lost { connected: Some(up.elapsed()), refused: false, why },
        }
    }

    /// Writes queued messages to one connection, after a Hello (which
    /// authenticates this side at once, so the acceptor gives it a
    /// member's slot) and with a keepalive whenever the link was idle for
    /// a third of the idle timeout. `Ok` when the queue has closed (the
    /// transport was dropped); `Err` when the connection ends. A message
    /// being written when the connection fails is lost; the rest stay
    /// queued for the next connection.
    async fn pump(
        &self,
        stream: TcpStream,
        challenge: &[u8; CHALLENGE_LEN],
        queue: &mut mpsc::Receiver<(Incarnation, M)>,
    ) -> Result<(), String> {
        keepalive(&stream, self.keepalive_every * 3);
        let (mut rd, wr) = stream.into_split();
        let mut wr = FramedWrite::new(wr, LengthPrefixed::new(self.codec.max_frame()));
        let mut seq = 0u64;
        let mut inc = Incarnation(0);
        let control = |c: Control, inc: Incarnation, seq: u64| {
            self.codec.encode_control(inc, seq, challenge, &c).map_err(|e| format!("cannot frame {c:?}: {e}"))
        };
        wr.send(control(Control::Hello { nonce: 0 }, inc, seq)?).await.map_err(|e| e.to_string())?;
        seq += 1;
        let mut probe = [0u8; 1];
        loop {
            let first = tokio::select! {
                item = queue.recv() => item,
                // The acceptor never writes after the challenge: a read
                // returning means the connection is gone (or the peer is
                // broken). Noticing it here lets a restarted peer get a
                // fresh connection before the next message is lost in the
                // dead one.
                r = rd.read(&mut probe) => return Err(match r {
                    Ok(0) => "closed by peer".to_string(),
                    Ok(_) => "peer sent unexpected bytes".to_string(),
                    Err(e) => e.to_string(),
                }),
                _ = tokio::time::sleep(self.keepalive_every) => {
                    wr.send(control(Control::Keepalive, inc, seq)?).await.map_err(|e| e.to_string())?;
                    seq += 1;
                    continue;
                }
            };
            let Some(mut next) = first else {
                // The transport is closing and everything queued has been
                // written: say that this end is planned.
                wr.send(control(Control::Goodbye, inc, seq)?).await.map_err(|e| e.to_string())?;
                return Ok(());
            };
            for written in 1..=WRITE_BATCH {
                let msg;
                (inc, msg) = next;
                match self.codec.encode(inc, seq, challenge, &msg) {
                    Ok(frame) => {
                        wr.feed(frame).await.map_err(|e| e.to_string())?;
                        seq += 1;
                    }
                    Err(e) => {
                        warn!(peer = %self.peer, kind = msg.kind(), "dropping message that cannot be framed: {e}")
                    }
                }
                // Take the next one only if this batch will write it: a
                // message taken after the last write of a batch would be
                // lost (a silent gap in a FIFO stream).
                if written == WRITE_BATCH {
                    break;
                }
                match queue.try_recv() {
                    Ok(item) => next = item,
                    Err(_) => break,
                }
            }
            <FramedWrite<_, _> as SinkExt<Bytes>>::flush(&mut wr).await.map_err(|e| e.to_string())?;
        }
    }
}

/// Opens a connection and reads the acceptor's challenge.
async fn connect(addr: SocketAddr) -> std::io::Result<(TcpStream, [u8; CHALLENGE_LEN])> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut challenge = [0u8; CHALLENGE_LEN];
    stream.read_exact(&mut challenge).await?;
    Ok((stream, challenge))
}
