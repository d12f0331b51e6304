//! [`UdpTransport`]: lossy, unordered peer datagrams, replay-guarded
//! (foundation.md, Joining, handshakes and limits).
//!
//! UDP has no connection to carry a nonce, so the replay guard is built
//! from lives instead:
//!
//! - every datagram starts with a [`UDP_PREFIX_LEN`]-byte address: the
//!   receiver's id and the receiver's life it is meant for, then the frame.
//!   With a key, the frame's MAC is taken over that address
//!   ([`udp_challenge`]), so a datagram is good for one life of one
//!   receiver only;
//! - a sender learns a peer's current life from a [`Control::HelloAck`]
//!   echoing the nonce of its own [`Control::Hello`], and sends protocol
//!   datagrams only once it has one; until then they wait in a short
//!   queue, and the Hello is retried with backoff;
//! - datagrams are numbered per (destination, both lives) from 1, and the
//!   receiver keeps a [`ReplayWindow`] per sender: a repeat or a number
//!   beyond the window is refused (`replay`), and so is anything from an
//!   older life of the sender or addressed to a life of the receiver other
//!   than its current one (`stale_life`);
//! - a node answers a datagram addressed to an older life of itself with
//!   its own Hello (rate-limited), so that the sender relearns its life;
//!   a Hello from a newer life of a peer makes the receiver relearn that
//!   peer's life the same way.
//!
//! Hello and HelloAck are themselves outside the window: a replayed Hello
//! costs one HelloAck, and a replayed HelloAck carries a nonce nobody is
//! waiting for.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use bytes::{BufMut, BytesMut};
use ftcore::Message;
use membership::{Incarnation, NodeId};
use tokio::io::{unix::AsyncFd, Interest};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, warn};

use super::{
    fair_inboxes, fresh_challenge, report, Chaos, Incoming, LinkStats, SendError, Transport, TransportConfig,
    TransportError,
};
use crate::{
    auth::{ReplayError, ReplayWindow, CHALLENGE_LEN},
    frame::{Body, Control, PeerCodec, RejectReason, Rejected},
};

/// Length of the address in front of every frame in a datagram: the
/// receiver's id (4 bytes) and the receiver's life (8 bytes), big-endian.
pub const UDP_PREFIX_LEN: usize = 12;

/// Datagrams for a peer held while its life is not known yet; more are
/// refused with [`SendError::QueueFull`] (and counted by the caller).
pub const UDP_PENDING_MAX: usize = 64;

/// The least time between two Hellos sent to one peer in answer to its
/// datagrams for an older life of this node.
const STALE_ANSWER_EVERY: Duration = Duration::from_millis(100);

/// The challenge a UDP frame is MAC'd over: the receiver's id and life
/// (four zero bytes pad it to [`CHALLENGE_LEN`]).
pub fn udp_challenge(to: NodeId, to_life: Incarnation) -> [u8; CHALLENGE_LEN] {
    let mut c = [0u8; CHALLENGE_LEN];
    c[..4].copy_from_slice(&to.0.to_be_bytes());
    c[4..12].copy_from_slice(&to_life.0.to_be_bytes());
    c
}

/// A datagram: the receiver's address (`to`, `to_life`) and the frame.
fn datagram(to: NodeId, to_life: Incarnation, frame: &[u8]) -> BytesMut {
    let mut d = BytesMut::with_capacity(UDP_PREFIX_LEN + frame.len());
    d.put_u32(to.0);
    d.put_u64(to_life.0);
    d.put_slice(frame);
    d
}

/// Splits a datagram into its address and frame.
fn split_datagram(d: &[u8]) -> Result<(NodeId, Incarnation, &[u8]), Rejected> {
    let Some((addr, frame)) = d.split_first_chunk::<UDP_PREFIX_LEN>() else {
        return Err(Rejected::new(
            RejectReason::Truncated,
            format!("expected a {UDP_PREFIX_LEN}-byte address before the frame, got a datagram of {} bytes", d.len()),
        ));
    };
    let (to, life) = addr.split_at(4);
    let to = NodeId(u32::from_be_bytes(to.try_into().unwrap_or_default()));
    let life = Incarnation(u64::from_be_bytes(life.try_into().unwrap_or_default()));
    Ok((to, life, frame))
}

/// What this node knows of its link to one peer.
#[derive(Debug)]
struct Link<M> {
    addr: SocketAddr,
    /// The peer's current life, from a HelloAck; `None` until one came
    /// (or since a newer life of the peer showed itself).
    life: Option<Incarnation>,
    /// The lives the numbering below belongs to: (this node's, the peer's).
    lives: (Incarnation, Incarnation),
    /// The next datagram's number for those lives (from 1).
    next_seq: u64,
    /// The nonce of the Hello awaiting its answer.
    nonce: Option<u64>,
    /// When the next Hello goes out while the life is unknown, and the
    /// delay after that one (doubling up to `backoff_max`).
    hello_at: Instant,
    hello_delay: Duration,
    /// When a Hello last went out in answer to a stale datagram.
    stale_answered: Option<Instant>,
    /// Messages waiting for the life (at most [`UDP_PENDING_MAX`]), with
    /// the life of this node they were sent in.
    pending: VecDeque<(Incarnation, M)>,
}

/// What the sending side, the receive task and the Hello task share.
#[derive(Debug)]
struct Shared<M> {
    me: NodeId,
    /// This node's current life: the configured one, raised by `send`
    /// when the caller moves to a newer one.
    life: AtomicU64,
    socket: Arc<std::net::UdpSocket>,
    chaos: Option<Chaos>,
    /// Hello nonces and `chaos` draws (seeded once from the OS's random
    /// source, not read from it per Hello).
    rng: Mutex<timer::SeededRng>,
    codec: Arc<PeerCodec<M>>,
    stats: Arc<LinkStats>,
    backoff: (Duration, Duration),
    links: Mutex<HashMap<NodeId, Link<M>>>,
}

/// Lossy, unordered peer datagrams over UDP, replay-guarded per sender and
/// receiver life (see the module docs).
#[derive(Debug)]
pub struct UdpTransport<M> {
    shared: Arc<Shared<M>>,
    local: SocketAddr,
    _stop: DropGuard,
}

impl<M: Message> UdpTransport<M> {
    /// Binds the socket, starts the receive task and the Hello task, and
    /// sends a Hello to every peer. Datagrams arriving are pushed to
    /// `incoming`.
    pub async fn bind(cfg: TransportConfig, incoming: mpsc::Sender<Incoming<M>>) -> Result<Self, TransportError> {
        cfg.validate()?;
        let bind_err = |source| TransportError::Bind { addr: cfg.listen, source };
        // Two handles on one socket: one registered with tokio's reactor
        // for reading only, for the receive task (a send then wakes no
        // task: with tokio's `UdpSocket`, registered for both, every send
        // woke the reactor once more for writability), and a plain
        // non-blocking one for sending, whose `send_to` says WouldBlock
        // only when the socket buffer really is full.
        let std_socket = std::net::UdpSocket::bind(cfg.listen).map_err(bind_err)?;
        std_socket.set_nonblocking(true).map_err(bind_err)?;
        let local = std_socket.local_addr().map_err(bind_err)?;
        let send_socket = std_socket.try_clone().map_err(bind_err)?;
        // `with_interest` is deprecated because a generic `T` might change
        // the fd it returns; a `std::net::UdpSocket` owns its one fd for its
        // whole life, which is the condition tokio's sound `unsafe`
        // constructor states (this crate forbids `unsafe`).
        #[allow(deprecated)]
        let socket = AsyncFd::with_interest(std_socket, Interest::READABLE).map_err(bind_err)?;
        let now = Instant::now();
        let links = cfg
            .members
            .members()
            .iter()
            .filter(|m| m.id != cfg.me)
            .map(|m| {
                let link = Link {
                    addr: m.addr,
                    life: None,
                    lives: (Incarnation::default(), Incarnation::default()),
                    next_seq: 1,
                    nonce: None,
                    hello_at: now,
                    hello_delay: cfg.backoff_min,
                    stale_answered: None,
                    pending: VecDeque::new(),
                };
                (m.id, link)
            })
            .collect();
        let shared = Arc::new(Shared {
            me: cfg.me,
            life: AtomicU64::new(cfg.incarnation.0),
            socket: Arc::new(send_socket),
            chaos: cfg.chaos,
            rng: Mutex::new(timer::SeededRng::new(u64::from_be_bytes(
                fresh_challenge()[..8].try_into().unwrap_or_default(),
            ))),
            codec: Arc::new(cfg.codec::<M>()),
            stats: cfg.stats.clone(),
            backoff: (cfg.backoff_min, cfg.backoff_max),
            links: Mutex::new(links),
        });
        let stop = CancellationToken::new();
        let inboxes = fair_inboxes(cfg.members.ids().filter(|id| *id != cfg.me), incoming.clone(), stop.clone());
        let rx = udp_receive(socket, shared.clone(), incoming, inboxes);
        let task_stop = stop.clone();
        tokio::spawn(async move { task_stop.run_until_cancelled(rx).await });
        let hello = hello_task(shared.clone());
        let task_stop = stop.clone();
        tokio::spawn(async move { task_stop.run_until_cancelled(hello).await });
        Ok(UdpTransport { shared, local, _stop: stop.drop_guard() })
    }

    /// The life of `peer` this node sends to, once a HelloAck has named it.
    pub fn peer_life(&self, peer: NodeId) -> Option<Incarnation> {
        self.shared.lock().get(&peer).and_then(|l| l.life)
    }
}

impl<M: Message> Shared<M> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Link<M>>> {
        // A panic elsewhere while holding the lock leaves the map usable.
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn life(&self) -> Incarnation {
        Incarnation(self.life.load(Ordering::Relaxed))
    }

    /// Writes one datagram; `Err` only when the socket buffer is full or
    /// the OS refuses it.
    fn write(&self, to: NodeId, addr: SocketAddr, d: &[u8]) -> Result<(), SendError> {
        // Injected faults come after framing, so that they look like the
        // network's own to the receiver.
        if let Some(c) = self.chaos {
            let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
            if rng.chance(c.drop_rate) {
                self.stats.dropped_by_chaos();
                return Ok(());
            }
            let copies = if rng.chance(c.dup_rate) { 2 } else { 1 };
            match tokio::runtime::Handle::try_current() {
                Ok(rt) if !c.delay.is_zero() => {
                    for _ in 0..copies {
                        let wait = rng.duration_between(Duration::ZERO, c.delay);
                        let (socket, d) = (self.socket.clone(), d.to_vec());
                        rt.spawn(async move {
                            tokio::time::sleep(wait).await;
                            let _ = socket.send_to(&d, addr);
                        });
                    }
                    return Ok(());
                }
                _ => {
                    if copies == 2 {
                        let _ = self.socket.send_to(d, addr);
                    }
                }
            }
        }
        match self.socket.send_to(d, addr) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(SendError::QueueFull(to)),
            Err(source) => Err(SendError::Io { to, source }),
        }
    }

    /// Frames and writes a protocol message to a peer whose life is known.
    fn send_now(&self, to: NodeId, link: &mut Link<M>, inc: Incarnation, msg: &M) -> Result<(), SendError> {
        let Some(peer_life) = link.life else { return Err(SendError::Closed) };
        if link.lives != (inc, peer_life) {
            link.lives = (inc, peer_life);
            link.next_seq = 1;
        }
        let frame = self.codec.encode(inc, link.next_seq, &udp_challenge(to, peer_life), msg)?;
        link.next_seq += 1;
        self.write(to, link.addr, &datagram(to, peer_life, &frame))
    }

    /// Sends a control frame (outside the replay window: seq 0).
    fn send_control(&self, to: NodeId, addr: SocketAddr, to_life: Incarnation, c: Control) {
        let life = self.life();
        match self.codec.encode_control(life, 0, &udp_challenge(to, to_life), &c) {
            Ok(frame) => {
                if let Err(e) = self.write(to, addr, &datagram(to, to_life, &frame)) {
                    debug!(%to, "cannot send {c:?}: {e}");
                }
            }
            Err(e) => warn!(%to, "cannot frame {c:?}: {e}"),
        }
    }

    /// Sends a Hello with a fresh nonce (the peer's life is unknown, so it
    /// is addressed to life 0, which every life of the peer accepts for a
    /// Hello).
    fn hello(&self, to: NodeId, link: &mut Link<M>) {
        let nonce = self.rng.lock().unwrap_or_else(|e| e.into_inner()).next_u64();
        link.nonce = Some(nonce);
        self.send_control(to, link.addr, Incarnation::default(), Control::Hello { nonce });
    }

    /// Forgets a peer's life (a newer one showed itself) and asks for it
    /// at once.
    fn relearn(&self, to: NodeId, link: &mut Link<M>) {
        link.life = None;
        link.hello_delay = self.backoff.0;
        link.hello_at = Instant::now() + link.hello_delay;
        self.hello(to, link);
    }
}

impl<M: Message> Transport<M> for UdpTransport<M> {
    /// Sends `msg` as one datagram to `to`'s current life; while that life
    /// is not known yet, holds it (at most [`UDP_PENDING_MAX`] per peer).
    /// `inc` is this node's life; a newer one than before replaces it.
    fn send(&self, to: NodeId, inc: Incarnation, msg: M) -> Result<(), SendError> {
        let s = &self.shared;
        s.life.fetch_max(inc.0, Ordering::Relaxed);
        let mut links = s.lock();
        let link = links.get_mut(&to).ok_or(SendError::UnknownPeer(to))?;
        if link.life.is_none() {
            if link.pending.len() >= UDP_PENDING_MAX {
                return Err(SendError::QueueFull(to));
            }
            link.pending.push_back((inc, msg));
            return Ok(());
        }
        s.send_now(to, link, inc, &msg)
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn close(self: Box<Self>, _grace: Duration) -> futures::future::BoxFuture<'static, ()> {
        // Datagrams are written by `send` itself: nothing is queued but
        // what waits for a peer's life, which a closing node drops.
        drop(self);
        Box::pin(async {})
    }
}

/// Sends a Hello to every peer whose life is unknown, each with its own
/// backoff.
async fn hello_task<M: Message>(shared: Arc<Shared<M>>) {
    let (min, max) = shared.backoff;
    let mut tick = tokio::time::interval(min);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let mut links = shared.lock();
        for (to, link) in links.iter_mut() {
            if link.life.is_none() && now >= link.hello_at {
                shared.hello(*to, link);
                link.hello_at = now + link.hello_delay;
                link.hello_delay = (link.hello_delay * 2).min(max);
            }
        }
    }
}

/// Receives datagrams, checks their address, frame and number, answers
/// Hellos, and delivers protocol messages.
async fn udp_receive<M: Message>(
    socket: AsyncFd<std::net::UdpSocket>,
    shared: Arc<Shared<M>>,
    incoming: mpsc::Sender<Incoming<M>>,
    inboxes: HashMap<NodeId, mpsc::Sender<Incoming<M>>>,
) {
    let max = shared.codec.max_frame() + UDP_PREFIX_LEN;
    // One byte more than allowed, so that an oversized datagram shows as
    // filling the buffer instead of being silently cut to size.
    let mut buf = vec![0u8; max + 1];
    let mut windows: HashMap<NodeId, ReplayWindow> = HashMap::new();
    loop {
        let (n, remote) = match recv_from(&socket, &mut buf).await {
            Ok(x) => x,
            Err(e) => {
                debug!("udp receive failed: {e}");
                continue;
            }
        };
        let checked = if n > max {
            Err(Rejected::new(RejectReason::Oversized, format!("expected at most {max} bytes, got a larger datagram")))
        } else {
            check(&shared, &mut windows, &buf[..n])
        };
        // CHAOS HOOK (inbound): receive-side drops and duplicates of
        // accepted messages go here, after the replay window.
        match checked {
            Ok(Some((from, inc, msg))) => {
                // Never waits: a sender whose inbox is full loses its own
                // datagrams, and nobody else's.
                let Some(inbox) = inboxes.get(&from) else { continue };
                match inbox.try_send(Incoming::Message { from, inc, msg }) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => shared.stats.dropped_inbox_full(),
                    Err(mpsc::error::TrySendError::Closed(_)) => return,
                }
            }
            Ok(None) => {}
            Err(r) => report(&incoming, &shared.stats, r, remote),
        }
    }
}

/// The next datagram, waiting for the socket to be readable.
async fn recv_from(
    socket: &AsyncFd<std::net::UdpSocket>,
    buf: &mut [u8],
) -> std::io::Result<(usize, std::net::SocketAddr)> {
    loop {
        let mut ready = socket.readable().await?;
        if let Ok(r) = ready.try_io(|s| s.get_ref().recv_from(buf)) {
            return r;
        }
    }
}

/// Checks one datagram. A protocol message that passes is returned; a
/// control frame is handled here (`Ok(None)`).
fn check<M: Message>(
    shared: &Shared<M>,
    windows: &mut HashMap<NodeId, ReplayWindow>,
    d: &[u8],
) -> Result<Option<(NodeId, Incarnation, M)>, Rejected> {
    let (to, to_life, frame) = split_datagram(d)?;
    let got = shared.codec.decode_any(frame, &udp_challenge(to, to_life))?;
    let me = shared.me;
    if to != me {
        return Err(Rejected::new(
            RejectReason::Auth,
            format!("from {}: addressed to {to}, not {me} (peer addresses swapped?)", got.from),
        ));
    }
    let life = shared.life();
    let mut links = shared.lock();
    // `decode_any` admits only members, and never this node itself.
    let Some(link) = links.get_mut(&got.from) else {
        return Err(Rejected::new(RejectReason::UnknownSender, format!("{} is this node", got.from)));
    };
    match got.msg {
        Body::Control(Control::Hello { nonce }) => {
            if to_life != Incarnation::default() && to_life != life {
                return Err(stale_address(got.from, to_life, life));
            }
            shared.send_control(got.from, link.addr, got.inc, Control::HelloAck { nonce });
            // A newer life of the peer: what was known of it is void.
            if link.life.is_some_and(|known| known < got.inc) {
                shared.relearn(got.from, link);
            }
            Ok(None)
        }
        Body::Control(Control::HelloAck { nonce }) => {
            if to_life != life {
                return Err(stale_address(got.from, to_life, life));
            }
            if link.nonce != Some(nonce) {
                // An answer to an earlier Hello, or a replay: harmless.
                debug!(from = %got.from, "HelloAck with a nonce not awaited; ignored");
                return Ok(None);
            }
            if link.life.is_some_and(|known| known > got.inc) {
                return Err(Rejected::new(
                    RejectReason::StaleLife,
                    format!(
                        "HelloAck from {} in {}, older than its known {}",
                        got.from,
                        got.inc,
                        link.life.unwrap_or_default()
                    ),
                ));
            }
            link.nonce = None;
            link.life = Some(got.inc);
            link.hello_delay = shared.backoff.0;
            let pending = std::mem::take(&mut link.pending);
            for (inc, msg) in pending {
                if let Err(e) = shared.send_now(got.from, link, inc, &msg) {
                    debug!(to = %got.from, "held datagram not sent: {e}");
                }
            }
            Ok(None)
        }
        // Sent on TCP links only.
        Body::Control(Control::Keepalive | Control::Goodbye) => Ok(None),
        Body::Msg(msg) => {
            if to_life != life {
                // Sent to an older life of this node: tell the sender this
                // one (rate-limited).
                if to_life < life {
                    let now = Instant::now();
                    if link.stale_answered.is_none_or(|t| now.duration_since(t) >= STALE_ANSWER_EVERY) {
                        link.stale_answered = Some(now);
                        // The sender's life is not in doubt (its answer
                        // just confirms it): not `relearn`.
                        shared.hello(got.from, link);
                    }
                }
                return Err(stale_address(got.from, to_life, life));
            }
            match windows.entry(got.from).or_default().check(got.inc, got.seq) {
                Ok(()) => Ok(Some((got.from, got.inc, msg))),
                Err(e @ ReplayError::OldIncarnation { .. }) => {
                    Err(Rejected::new(RejectReason::StaleLife, format!("from {}: {e}", got.from)))
                }
                Err(e) => Err(Rejected::new(RejectReason::Replay, format!("from {}: {e}", got.from))),
            }
        }
    }
}

fn stale_address(from: NodeId, to_life: Incarnation, life: Incarnation) -> Rejected {
    Rejected::new(RejectReason::StaleLife, format!("from {from}: addressed to {to_life}, this node is now {life}"))
}
