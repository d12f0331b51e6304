//! Moving peer frames over real sockets: one small [`Transport`] trait and
//! its TCP and UDP implementations on tokio.
//!
//! A transport takes messages to send ([`Transport::send`], never blocking)
//! and delivers what arrives as [`Incoming`] events on a channel the caller
//! owns: decoded messages, and rejected frames (which the runtime counts
//! and logs). Everything about a frame's validity is [`PeerCodec`]'s
//! business; transports add the replay guard and connection handling.
//!
//! - [`TcpTransport`] (ringd, ntmutexd, electd): one outbound connection
//!   per peer for sending, fed by a bounded queue and re-established with
//!   exponential backoff; inbound connections for receiving. Replay guard:
//!   the acceptor opens every connection by writing a fresh 16-byte random
//!   challenge; the connector MACs every frame over it and numbers frames
//!   0, 1, 2, …; the acceptor refuses any other number. The exchange
//!   happens with or without a key, so both configurations run one code
//!   path. Limits (foundation.md, Joining, handshakes and limits):
//!   - a connector's first frame is a [`Control::Hello`]; a connection
//!     without a valid first frame within `handshake_timeout` is closed;
//!   - until then it holds one of `max_connections` slots, `N − 1` of which
//!     only connections from members' addresses may take;
//!   - once authenticated it is its member's one link: a newer connection
//!     from the same member replaces it, after its frames are delivered;
//!   - senders write a [`Control::Keepalive`] after `idle_timeout / 3`
//!     without traffic, and a link silent for `idle_timeout` is closed;
//!     TCP keepalive is on;
//!   - a full send queue tears its link down ([`SendError::QueueFull`]);
//!   - accept errors pause the listener ([`accept_with_backoff`]).
//!
//!   A rejected frame closes its connection; the listener keeps serving
//!   the others. Every refusal is counted in [`LinkStats`].
//! - [`UdpTransport`] (tokenwatchd): one socket; a sender learns each
//!   peer's current life by a [`Control::Hello`] / [`Control::HelloAck`]
//!   exchange before it sends it anything else; datagrams are addressed
//!   to (receiver, receiver's life), MAC'd over that address, numbered
//!   from 1 per (destination, both lives), and the receiver keeps a
//!   [`ReplayWindow`] per sender. See the `udp` module.
//!
//! Dropping a transport stops all its tasks and closes its sockets.

use std::{
    collections::HashMap,
    io::Read,
    net::{IpAddr, SocketAddr},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use ftcore::Message;
use membership::{Incarnation, Membership, MembershipError, NodeId};
use tokio::sync::mpsc;
use tracing::{debug, warn};

#[allow(unused_imports)] // for the docs
use crate::{auth::ReplayWindow, frame::Control};
use crate::{
    auth::{ClusterKey, CHALLENGE_LEN, TAG_LEN},
    frame::{EncodeError, PeerCodec, RejectReason, Rejected, DEFAULT_MAX_FRAME},
    header::HEADER_LEN,
};

mod tcp;
mod udp;

pub use tcp::TcpTransport;
pub use udp::{udp_challenge, UdpTransport, UDP_PENDING_MAX, UDP_PREFIX_LEN};

/// What a transport delivers to its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incoming<M> {
    /// A frame passed every check.
    Message {
        /// The sender.
        from: NodeId,
        /// The sender's life.
        inc: Incarnation,
        /// The message.
        msg: M,
    },
    /// TCP only: the connection to `peer` broke (closed or reset by the
    /// other end) and a new one, tried at once, was refused: nothing
    /// listens at its address, so the process that had it is gone while
    /// its host is up (a crash, a kill, a restart not yet listening). A
    /// hint of failure within a round trip of the process's end, where
    /// only silence would tell otherwise; said once per broken connection.
    /// A paused process, a vanished host or a partition never cause it
    /// (their connections stay open or time out). Queued in the peer's
    /// inbox after the frames already taken from its connection; frames
    /// still in that socket may follow (a core must take late messages of
    /// a dead life anyway).
    Unreachable {
        /// The peer whose process is gone.
        peer: NodeId,
    },
    /// TCP only: `peer` said [`Control::Goodbye`]: it is stopping
    /// gracefully, and the end of its connection (and an
    /// [`Incoming::Unreachable`] after it) is a planned stop. Queued in the
    /// peer's inbox after every frame that came before it.
    Goodbye {
        /// The peer that is stopping.
        peer: NodeId,
    },
    /// A frame was refused (its TCP connection has been closed). Sent only
    /// when the channel has room; otherwise counted in [`LinkStats`].
    Rejected {
        /// The metric label.
        reason: RejectReason,
        /// What was expected and what came.
        detail: String,
        /// Where it came from.
        remote: SocketAddr,
    },
}

/// Why a message was not queued.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The peer's send queue (TCP) or the socket buffer (UDP) is full; the
    /// message was dropped. On TCP the link is torn down with it (what was
    /// queued is dropped, the connection closed, a new one opened), so the
    /// receiver sees the loss as a connection break: the caller tells its
    /// core the peer was unreachable.
    #[error("send queue for {0} is full; message dropped and link torn down")]
    QueueFull(NodeId),
    /// Not a configured peer (this node itself included: cores never send
    /// to themselves).
    #[error("{0} is not a configured peer")]
    UnknownPeer(NodeId),
    /// The transport's tasks have stopped.
    #[error("transport is shut down")]
    Closed,
    /// The message cannot be framed (e.g. larger than the maximum frame).
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The socket refused the datagram (UDP only).
    #[error("cannot send to {to}: {source}")]
    Io {
        /// The destination.
        to: NodeId,
        /// What the OS said.
        source: std::io::Error,
    },
}

/// Why a transport could not start.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The listen address cannot be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The configured listen address.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// This node is not a configured member.
    #[error(transparent)]
    Membership(#[from] MembershipError),
    /// A setting is out of range.
    #[error("invalid transport config: {0}")]
    Config(String),
}

/// Moves messages of type `M` between the members of a cluster.
pub trait Transport<M: Message>: Send + Sync + 'static {
    /// Queues `msg` for `to`, stamped with incarnation `inc`. Never blocks:
    /// when the per-peer queue is full the message is dropped and
    /// `Err(SendError::QueueFull)` returned (the caller counts it).
    fn send(&self, to: NodeId, inc: Incarnation, msg: M) -> Result<(), SendError>;

    /// The address actually bound (useful with port 0).
    fn local_addr(&self) -> SocketAddr;

    /// Stops the transport once what is queued has been written: TCP links
    /// flush their queues to connected peers (waiting at most `grace`),
    /// then every task of the transport ends and its sockets close.
    fn close(self: Box<Self>, grace: Duration) -> futures::future::BoxFuture<'static, ()>;
}

/// Fault injection on outgoing datagrams (tokenwatchd's `chaos.*` keys),
/// applied after framing so that the receiver sees real-looking loss,
/// duplication and delay. Off unless configured; UDP only.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Chaos {
    /// Probability that a datagram is not sent (counted).
    pub drop_rate: f64,
    /// Probability that a datagram is sent twice.
    pub dup_rate: f64,
    /// Each datagram (each copy) waits a random time up to this long.
    pub delay: Duration,
}

/// Everything a transport needs to know.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// This node.
    pub me: NodeId,
    /// Where to listen (port 0: any free port).
    pub listen: SocketAddr,
    /// The configured members; peers are reached at their addresses here.
    pub members: Membership,
    /// Cluster id, checked on every frame.
    pub cluster: u32,
    /// This node's life at start (UDP: datagrams addressed to another life
    /// of this node are refused; `send` raises it when the caller moves to
    /// a newer one).
    pub incarnation: Incarnation,
    /// Cluster key; `None` leaves peer traffic unauthenticated.
    pub key: Option<ClusterKey>,
    /// Maximum frame length (header, payload and tag).
    pub max_frame: usize,
    /// Per-peer send queue length (TCP).
    pub queue_len: usize,
    /// First reconnect delay (TCP).
    pub backoff_min: Duration,
    /// Largest reconnect delay (TCP).
    pub backoff_max: Duration,
    /// Most inbound connections that have not authenticated yet (TCP);
    /// more are closed. `N − 1` of them are kept for connections from
    /// members' addresses, so other sources hold at most
    /// `max_connections − (N − 1)` (at least one); each member's
    /// authenticated link (one at a time) comes on top.
    pub max_connections: usize,
    /// An inbound connection without a valid first frame by then is closed
    /// (`limits.handshake_timeout_ms`); also bounds a connector's wait for
    /// the challenge.
    pub handshake_timeout: Duration,
    /// An authenticated link silent this long is closed
    /// (`limits.peer_idle_timeout_ms`); senders write a keepalive after a
    /// third of it without traffic.
    pub idle_timeout: Duration,
    /// Pause after an accept error such as EMFILE (`limits.accept_backoff_ms`).
    pub accept_backoff: Duration,
    /// Fault injection on outgoing datagrams (UDP; `None`: off).
    pub chaos: Option<Chaos>,
    /// Counters of what the transport refused or closed, read by the
    /// runtime into metrics, and the rate limit of its log lines
    /// ([`LinkStats::new`] with `limits.log_burst_per_s`).
    pub stats: Arc<LinkStats>,
}

impl TransportConfig {
    /// A config with defaults: life 1, no key, 64 KiB frames, 1024-message queues,
    /// backoff 50 ms to 5 s, 64 inbound connections, and foundation.md's
    /// `[limits]` defaults (handshake 1 s, idle 30 s, accept backoff
    /// 100 ms, one log line per second per reason and source).
    pub fn new(me: NodeId, listen: SocketAddr, members: Membership, cluster: u32) -> Self {
        TransportConfig {
            me,
            listen,
            members,
            cluster,
            incarnation: Incarnation(1),
            key: None,
            max_frame: DEFAULT_MAX_FRAME,
            queue_len: 1024,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(5),
            max_connections: 64,
            handshake_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(30),
            accept_backoff: Duration::from_millis(100),
            chaos: None,
            stats: Arc::default(),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), TransportError> {
        self.members.require(self.me)?;
        let min_frame = HEADER_LEN + TAG_LEN;
        if self.max_frame < min_frame {
            return Err(TransportError::Config(format!(
                "max_frame must be at least {min_frame} bytes, got {}",
                self.max_frame
            )));
        }
        if self.queue_len == 0 || self.max_connections == 0 {
            return Err(TransportError::Config("queue_len and max_connections must be at least 1".into()));
        }
        if self.handshake_timeout.is_zero() || self.accept_backoff.is_zero() {
            return Err(TransportError::Config("handshake_timeout and accept_backoff must be above zero".into()));
        }
        if self.idle_timeout < Duration::from_millis(3) {
            return Err(TransportError::Config(format!(
                "idle_timeout must be at least 3 ms (a keepalive every third of it), got {:?}",
                self.idle_timeout
            )));
        }
        if self.backoff_min.is_zero() || self.backoff_min > self.backoff_max {
            return Err(TransportError::Config(format!(
                "need 0 < backoff_min <= backoff_max, got {:?} and {:?}",
                self.backoff_min, self.backoff_max
            )));
        }
        Ok(())
    }

    pub(crate) fn codec<M: Message>(&self) -> PeerCodec<M> {
        PeerCodec::new(self.cluster, self.me, self.members.clone(), self.key.clone()).with_max_frame(self.max_frame)
    }
}

/// A fresh connection challenge from the OS's random source.
pub(crate) fn fresh_challenge() -> [u8; CHALLENGE_LEN] {
    random_bytes()
}

/// `N` bytes from the OS's random source (`/dev/urandom`): connection
/// challenges, and where unrelated processes must not pick the same
/// numbers (ringd clients' request ids).
///
/// Only uniqueness matters to its users, so if `/dev/urandom` cannot be
/// read (a bare chroot) a hash of time, process and a counter stands in,
/// with a warning.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut c = [0u8; N];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut c)) {
        Ok(()) => c,
        Err(e) => {
            static COUNTER: AtomicU64 = AtomicU64::new(0);
            warn!("cannot read /dev/urandom ({e}); deriving random bytes from time, process and a counter");
            let mut h = blake3::Hasher::new();
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            h.update(&now.as_nanos().to_be_bytes());
            h.update(&std::process::id().to_be_bytes());
            h.update(&COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes());
            h.finalize_xof().fill(&mut c);
            c
        }
    }
}

/// Messages one peer may have waiting on this side before the owner takes
/// them: TCP stops reading that peer's connection, UDP drops its
/// datagrams (counted in [`LinkStats::inbox_full`]).
pub const INBOX_PER_PEER: usize = 256;

/// One bounded inbox per peer, merged in turn into the owner's channel by
/// a task that ends with `stop`: a peer that floods fills its own inbox
/// and waits (or loses datagrams) while every other peer's next message
/// goes ahead of its backlog. What the owner's channel already holds is
/// the most another peer's message waits behind.
pub(crate) fn fair_inboxes<M: Send + 'static>(
    peers: impl Iterator<Item = NodeId>,
    out: mpsc::Sender<Incoming<M>>,
    stop: tokio_util::sync::CancellationToken,
) -> HashMap<NodeId, mpsc::Sender<Incoming<M>>> {
    let (txs, rxs): (HashMap<_, _>, Vec<_>) = peers
        .map(|id| {
            let (tx, rx) = mpsc::channel(INBOX_PER_PEER);
            ((id, tx), rx)
        })
        .unzip();
    tokio::spawn(async move { stop.run_until_cancelled(merge_in_turn(rxs, out)).await });
    txs
}

/// Forwards from `inboxes` to `out`, taking from each non-empty inbox in
/// turn.
async fn merge_in_turn<M>(mut inboxes: Vec<mpsc::Receiver<Incoming<M>>>, out: mpsc::Sender<Incoming<M>>) {
    let mut next = 0;
    loop {
        let item = std::future::poll_fn(|cx| {
            let n = inboxes.len();
            let mut closed = 0;
            for k in 0..n {
                let i = (next + k) % n;
                match inboxes[i].poll_recv(cx) {
                    std::task::Poll::Ready(Some(item)) => {
                        next = i + 1;
                        return std::task::Poll::Ready(Some(item));
                    }
                    std::task::Poll::Ready(None) => closed += 1,
                    std::task::Poll::Pending => {}
                }
            }
            if closed == n {
                std::task::Poll::Ready(None)
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        let Some(item) = item else { return };
        if out.send(item).await.is_err() {
            return;
        }
    }
}

/// Reports a rejected frame to the owner without waiting: a flood of bad
/// frames must not hold up the channel valid peers' messages use. When the
/// channel is full the rejection is counted in `stats` instead (the
/// runtime adds those to the same counter), and logged here, rate-limited.
pub(crate) fn report<M>(incoming: &mpsc::Sender<Incoming<M>>, stats: &LinkStats, r: Rejected, remote: SocketAddr) {
    debug!(%remote, reason = r.reason.label(), detail = %r.detail, "peer frame rejected");
    if let Err(mpsc::error::TrySendError::Full(Incoming::Rejected { reason, detail, remote })) =
        incoming.try_send(Incoming::Rejected { reason: r.reason, detail: r.detail, remote })
    {
        stats.unreported(reason);
        if stats.log.allow(reason.label(), remote.ip()) {
            warn!(%remote, reason = reason.label(), "peer frame rejected: {detail}");
        }
    }
}

/// What a listener refused or closed, by reason: the runtime exports these
/// as `<p>_connections_closed_total{listener, reason}` and adds the
/// unreported rejections to `<p>_frames_rejected_total{reason}`.
#[derive(Debug, Default)]
pub struct LinkStats {
    closed: [AtomicU64; Closed::ALL.len()],
    inbox_full: AtomicU64,
    chaos_dropped: AtomicU64,
    unreported: [AtomicU64; RejectReason::ALL.len()],
    /// Rate limit for this listener's log lines.
    pub log: LogLimiter,
}

/// Why a listener closed (or never served) a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Closed {
    /// Every slot was taken.
    NoSlot,
    /// No valid first frame within `handshake_timeout_ms`.
    HandshakeTimeout,
    /// An authenticated link was silent for `peer_idle_timeout_ms`.
    IdleTimeout,
    /// A newer authenticated connection from the same member replaced it.
    Replaced,
    /// `accept` failed (EMFILE, ENFILE, …); the listener paused.
    AcceptError,
    /// A full send queue: the outgoing link was torn down.
    QueueFull,
    /// A client left `client_credit` replies unread and its socket stopped
    /// taking bytes.
    NotReading,
}

impl Closed {
    /// Every reason, in label order.
    pub const ALL: [Closed; 7] = [
        Closed::NoSlot,
        Closed::HandshakeTimeout,
        Closed::IdleTimeout,
        Closed::Replaced,
        Closed::AcceptError,
        Closed::QueueFull,
        Closed::NotReading,
    ];

    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Closed::NoSlot => "no_slot",
            Closed::HandshakeTimeout => "handshake_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::Replaced => "replaced",
            Closed::AcceptError => "accept_error",
            Closed::QueueFull => "queue_full",
            Closed::NotReading => "not_reading",
        }
    }
}

impl LinkStats {
    /// Stats whose log lines are limited to `per_s` per reason and source.
    pub fn new(per_s: u32) -> Self {
        LinkStats { log: LogLimiter::new(per_s), ..Default::default() }
    }

    /// Counts a closed connection.
    pub fn closed(&self, why: Closed) {
        self.closed[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a datagram dropped because its sender's inbox was full.
    pub fn dropped_inbox_full(&self) {
        self.inbox_full.fetch_add(1, Ordering::Relaxed);
    }

    /// Datagrams dropped so far because their sender's inbox was full
    /// ([`INBOX_PER_PEER`]).
    pub fn inbox_full(&self) -> u64 {
        self.inbox_full.load(Ordering::Relaxed)
    }

    /// Counts a datagram that [`Chaos`] did not send.
    pub fn dropped_by_chaos(&self) {
        self.chaos_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Datagrams [`Chaos`] did not send, so far.
    pub fn chaos_dropped(&self) -> u64 {
        self.chaos_dropped.load(Ordering::Relaxed)
    }

    /// Totals so far, per reason.
    pub fn closed_totals(&self) -> impl Iterator<Item = (Closed, u64)> + '_ {
        Closed::ALL.iter().map(|c| (*c, self.closed[*c as usize].load(Ordering::Relaxed)))
    }

    fn unreported(&self, reason: RejectReason) {
        if let Some(i) = RejectReason::ALL.iter().position(|r| *r == reason) {
            self.unreported[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Rejections that could not be reported on the channel (it was full)
    /// since the last call, per reason.
    pub fn take_unreported(&self) -> impl Iterator<Item = (RejectReason, u64)> + '_ {
        RejectReason::ALL.iter().zip(&self.unreported).map(|(r, n)| (*r, n.swap(0, Ordering::Relaxed)))
    }
}

/// At most `per_s` log lines per second for each (reason, source address).
#[derive(Debug)]
pub struct LogLimiter {
    per_s: u32,
    window: std::sync::Mutex<LogWindow>,
}

/// The current second's start and the lines logged in it, per key.
type LogWindow = (Option<std::time::Instant>, HashMap<(&'static str, IpAddr), u32>);

impl Default for LogLimiter {
    fn default() -> Self {
        LogLimiter::new(1)
    }
}

impl LogLimiter {
    /// Allows `per_s` lines per second per key (0: none).
    pub fn new(per_s: u32) -> Self {
        LogLimiter { per_s, window: Default::default() }
    }

    /// Whether a line for `(reason, source)` may be logged now.
    pub fn allow(&self, reason: &'static str, source: IpAddr) -> bool {
        /// Distinct keys remembered per second; beyond it, one shared line.
        const MAX_KEYS: usize = 1024;
        let Ok(mut w) = self.window.lock() else { return false };
        let now = std::time::Instant::now();
        if w.0.is_none_or(|start| now.duration_since(start) >= Duration::from_secs(1)) {
            *w = (Some(now), HashMap::new());
        }
        let key = if w.1.len() >= MAX_KEYS { (reason, IpAddr::from([0, 0, 0, 0])) } else { (reason, source) };
        let n = w.1.entry(key).or_insert(0);
        *n += 1;
        *n <= self.per_s
    }
}

/// Accepts the next connection; on an accept error (EMFILE when out of
/// descriptors, ENFILE, ECONNABORTED, …) counts it, logs it (rate-limited)
/// and pauses `backoff` instead of spinning. `None` once `stop` is
/// cancelled.
pub async fn accept_with_backoff(
    listener: &tokio::net::TcpListener,
    backoff: Duration,
    stats: &LinkStats,
    stop: &tokio_util::sync::CancellationToken,
) -> Option<(tokio::net::TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return None,
            r = listener.accept() => r,
        };
        match accepted {
            Ok(x) => return Some(x),
            Err(e) => {
                stats.closed(Closed::AcceptError);
                if stats.log.allow("accept_error", IpAddr::from([0, 0, 0, 0])) {
                    warn!("accept failed on {:?}: {e}; pausing {backoff:?}", listener.local_addr().ok());
                }
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    _ = tokio::time::sleep(backoff) => {}
                }
            }
        }
    }
}
