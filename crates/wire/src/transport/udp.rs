//! [`UdpTransport`]: lossy, unordered peer datagrams.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use ftcore::Message;
use membership::{Incarnation, NodeId};
use tokio::{net::UdpSocket, sync::mpsc};
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::debug;

use super::{report, Incoming, LinkStats, SendError, Transport, TransportConfig, TransportError};
use crate::{
    auth::{ReplayWindow, CHALLENGE_LEN},
    frame::{PeerCodec, RejectReason, Rejected},
};

/// The challenge UDP frames are MAC'd over (datagrams have no connection
/// to carry a nonce; the [`ReplayWindow`] guards them instead).
pub const UDP_CHALLENGE: [u8; CHALLENGE_LEN] = [0; CHALLENGE_LEN];

/// Lossy, unordered peer datagrams over UDP, replay-guarded per sender.
#[derive(Debug)]
pub struct UdpTransport<M> {
    socket: std::net::UdpSocket,
    local: SocketAddr,
    codec: Arc<PeerCodec<M>>,
    addrs: HashMap<NodeId, SocketAddr>,
    seq: AtomicU64,
    _stop: DropGuard,
}

impl<M: Message> UdpTransport<M> {
    /// Binds the socket and starts the receive task. Datagrams arriving are
    /// pushed to `incoming`.
    pub async fn bind(cfg: TransportConfig, incoming: mpsc::Sender<Incoming<M>>) -> Result<Self, TransportError> {
        cfg.validate()?;
        let bind_err = |source| TransportError::Bind { addr: cfg.listen, source };
        // Two handles on one socket: tokio's for the receive task, a plain
        // non-blocking one for `send`, whose `send_to` says WouldBlock only
        // when the socket buffer really is full (tokio's `try_send_to`
        // also refuses until the reactor has first seen the socket
        // writable).
        let std_socket = std::net::UdpSocket::bind(cfg.listen).map_err(bind_err)?;
        std_socket.set_nonblocking(true).map_err(bind_err)?;
        let local = std_socket.local_addr().map_err(bind_err)?;
        let send_socket = std_socket.try_clone().map_err(bind_err)?;
        let socket = UdpSocket::from_std(std_socket).map_err(bind_err)?;
        let codec = Arc::new(cfg.codec::<M>());
        let stop = CancellationToken::new();
        let rx = udp_receive(socket, codec.clone(), incoming, cfg.stats.clone());
        let task_stop = stop.clone();
        tokio::spawn(async move { task_stop.run_until_cancelled(rx).await });
        let addrs = cfg.members.members().iter().filter(|m| m.id != cfg.me).map(|m| (m.id, m.addr)).collect();
        Ok(UdpTransport { socket: send_socket, local, codec, addrs, seq: AtomicU64::new(0), _stop: stop.drop_guard() })
    }
}

impl<M: Message> Transport<M> for UdpTransport<M> {
    fn send(&self, to: NodeId, inc: Incarnation, msg: M) -> Result<(), SendError> {
        let addr = *self.addrs.get(&to).ok_or(SendError::UnknownPeer(to))?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let frame = self.codec.encode(inc, seq, &UDP_CHALLENGE, &msg)?;
        // CHAOS HOOK (outbound), not implemented yet: tokenwatchd's
        // `chaos.*` drop rate and delay belong here, between framing and
        // the socket, so injected faults look like real network faults to
        // the receiver. Duplicates injected here are (rightly) refused by
        // the receiver's replay window; to exercise a core's duplicate
        // handling, duplicate at the inbound hook in `udp_receive`.
        match self.socket.send_to(&frame, addr) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(SendError::QueueFull(to)),
            Err(source) => Err(SendError::Io { to, source }),
        }
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn close(self: Box<Self>, _grace: Duration) -> futures::future::BoxFuture<'static, ()> {
        // Datagrams are written by `send` itself: nothing is queued.
        drop(self);
        Box::pin(async {})
    }
}

/// Receives datagrams, checks them and their sequence numbers, and
/// delivers the result.
async fn udp_receive<M: Message>(
    socket: UdpSocket,
    codec: Arc<PeerCodec<M>>,
    incoming: mpsc::Sender<Incoming<M>>,
    stats: Arc<LinkStats>,
) {
    let max = codec.max_frame();
    // One byte more than allowed, so that an oversized datagram shows as
    // filling the buffer instead of being silently cut to size.
    let mut buf = vec![0u8; max + 1];
    let mut windows: HashMap<NodeId, ReplayWindow> = HashMap::new();
    loop {
        let (n, remote) = match socket.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(e) => {
                debug!("udp receive failed: {e}");
                continue;
            }
        };
        let checked = if n > max {
            Err(Rejected::new(RejectReason::Oversized, format!("expected at most {max} bytes, got a larger datagram")))
        } else {
            codec.decode(&buf[..n], &UDP_CHALLENGE).and_then(|got| {
                // Only authenticated (or, without a key, well-formed)
                // frames from members reach the window, so a forger
                // cannot poison it and the map stays bounded.
                match windows.entry(got.from).or_default().check(got.inc, got.seq) {
                    Ok(()) => Ok(got),
                    Err(e) => Err(Rejected::new(RejectReason::Replay, format!("from {}: {e}", got.from))),
                }
            })
        };
        // CHAOS HOOK (inbound), not implemented yet: receive-side drops
        // and duplicates of accepted messages go here, after the replay
        // window.
        match checked {
            Ok(got) => {
                if incoming.send(Incoming::Message { from: got.from, inc: got.inc, msg: got.msg }).await.is_err() {
                    return;
                }
            }
            Err(r) => report(&incoming, &stats, r, remote),
        }
    }
}
