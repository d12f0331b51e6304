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
//!   exponential backoff; inbound connections (up to `max_connections`)
//!   for receiving. Replay guard: the acceptor opens every connection by
//!   writing a fresh 16-byte random challenge; the connector MACs every
//!   frame over it and numbers frames 0, 1, 2, …; the acceptor refuses any
//!   other number. The exchange happens with or without a key, so both
//!   configurations run one code path. A rejected frame closes its
//!   connection; the listener keeps serving the others.
//! - [`UdpTransport`] (tokenwatchd): one socket; datagrams are numbered by
//!   a per-transport counter and MAC'd over an all-zero challenge; the
//!   receiver keeps a [`ReplayWindow`] per sender.
//!
//! Dropping a transport stops all its tasks and closes its sockets.

use std::{
    io::Read,
    net::SocketAddr,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use ftcore::Message;
use membership::{Incarnation, Membership, MembershipError, NodeId};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::{
    auth::{ClusterKey, CHALLENGE_LEN, TAG_LEN},
    frame::{EncodeError, PeerCodec, RejectReason, Rejected, DEFAULT_MAX_FRAME},
    header::HEADER_LEN,
};

mod tcp;
mod udp;

pub use tcp::TcpTransport;
pub use udp::{UdpTransport, UDP_CHALLENGE};

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
    /// A frame was refused (its TCP connection has been closed).
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
    /// message was dropped.
    #[error("send queue for {0} is full; message dropped")]
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
    /// Most inbound connections served at once (TCP); more are closed.
    pub max_connections: usize,
}

impl TransportConfig {
    /// A config with defaults: no key, 64 KiB frames, 1024-message queues,
    /// backoff 50 ms to 5 s, 64 inbound connections.
    pub fn new(me: NodeId, listen: SocketAddr, members: Membership, cluster: u32) -> Self {
        TransportConfig {
            me,
            listen,
            members,
            cluster,
            key: None,
            max_frame: DEFAULT_MAX_FRAME,
            queue_len: 1024,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(5),
            max_connections: 64,
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
///
/// Only uniqueness matters for the replay guard, so if `/dev/urandom`
/// cannot be read (a bare chroot) a hash of time, process and a counter
/// stands in, with a warning.
pub(crate) fn fresh_challenge() -> [u8; CHALLENGE_LEN] {
    let mut c = [0u8; CHALLENGE_LEN];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut c)) {
        Ok(()) => c,
        Err(e) => {
            static COUNTER: AtomicU64 = AtomicU64::new(0);
            warn!("cannot read /dev/urandom ({e}); deriving the connection challenge from time and a counter");
            let mut h = blake3::Hasher::new();
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            h.update(&now.as_nanos().to_be_bytes());
            h.update(&std::process::id().to_be_bytes());
            h.update(&COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes());
            c.copy_from_slice(&h.finalize().as_bytes()[..CHALLENGE_LEN]);
            c
        }
    }
}

/// Reports a rejected frame to the owner (waiting if its channel is full).
pub(crate) async fn report<M>(incoming: &mpsc::Sender<Incoming<M>>, r: Rejected, remote: SocketAddr) {
    debug!(%remote, reason = r.reason.label(), detail = %r.detail, "peer frame rejected");
    let _ = incoming.send(Incoming::Rejected { reason: r.reason, detail: r.detail, remote }).await;
}
