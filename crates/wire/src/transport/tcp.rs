//! [`TcpTransport`]: reliable, ordered, reconnecting peer links.

use std::{collections::HashMap, net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use ftcore::Message;
use futures::{SinkExt, StreamExt};
use membership::{Incarnation, NodeId};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{mpsc, Notify, Semaphore},
};
use tokio_util::{
    codec::{FramedRead, FramedWrite},
    sync::{CancellationToken, DropGuard},
};
use tracing::{debug, warn};

use super::{fresh_challenge, report, Incoming, SendError, Transport, TransportConfig, TransportError};
use crate::{
    auth::CHALLENGE_LEN,
    frame::{LengthPrefixed, PeerCodec, RejectReason, Rejected, StreamError},
};

/// How long a connector waits for the TCP connection and the acceptor's
/// challenge before giving up on this attempt.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// How many queued messages a TCP sender writes before flushing.
const WRITE_BATCH: usize = 64;

/// Reliable, ordered, reconnecting peer links over TCP.
#[derive(Debug)]
pub struct TcpTransport<M> {
    local: SocketAddr,
    peers: HashMap<NodeId, mpsc::Sender<(Incarnation, M)>>,
    links: Vec<tokio::task::JoinHandle<()>>,
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
        // One waker per peer: an authenticated inbound frame from a peer
        // proves it is up, so our link to it stops backing off and
        // reconnects now (a restarted peer must not wait seconds for our
        // answers while its recovery windows close).
        let wakers: Arc<HashMap<NodeId, Arc<Notify>>> =
            Arc::new(cfg.members.ids().filter(|id| *id != cfg.me).map(|id| (id, Arc::new(Notify::new()))).collect());

        tokio::spawn(accept_loop(listener, codec.clone(), incoming, cfg.max_connections, stop.clone(), wakers.clone()));

        let mut peers = HashMap::new();
        let mut links = Vec::new();
        for m in cfg.members.members().iter().filter(|m| m.id != cfg.me) {
            let (tx, rx) = mpsc::channel(cfg.queue_len);
            let backoff = Backoff::new(cfg.backoff_min, cfg.backoff_max, cfg.me, m.id);
            let wake = wakers.get(&m.id).cloned().unwrap_or_default();
            let link = PeerLink { peer: m.id, addr: m.addr, codec: codec.clone(), backoff, wake };
            let stop = stop.clone();
            links.push(tokio::spawn(async move {
                stop.run_until_cancelled(link.run(rx)).await;
            }));
            peers.insert(m.id, tx);
        }
        Ok(TcpTransport { local, peers, links, _stop: stop.drop_guard() })
    }
}

impl<M: Message> Transport<M> for TcpTransport<M> {
    fn send(&self, to: NodeId, inc: Incarnation, msg: M) -> Result<(), SendError> {
        let queue = self.peers.get(&to).ok_or(SendError::UnknownPeer(to))?;
        // A full queue drops the newest message: what is queued is older
        // and already counted on.
        queue.try_send((inc, msg)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SendError::QueueFull(to),
            mpsc::error::TrySendError::Closed(_) => SendError::Closed,
        })
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn close(self: Box<Self>, grace: Duration) -> futures::future::BoxFuture<'static, ()> {
        let TcpTransport { peers, links, _stop, .. } = *self;
        // Closing the queues ends each link once it has written what was
        // queued (a link still reconnecting gives up at the grace's end).
        drop(peers);
        Box::pin(async move {
            let _ = tokio::time::timeout(grace, futures::future::join_all(links)).await;
            drop(_stop);
        })
    }
}

/// Accepts inbound connections, at most `max` at a time.
async fn accept_loop<M: Message>(
    listener: TcpListener,
    codec: Arc<PeerCodec<M>>,
    incoming: mpsc::Sender<Incoming<M>>,
    max: usize,
    stop: CancellationToken,
    wakers: Arc<HashMap<NodeId, Arc<Notify>>>,
) {
    let permits = Arc::new(Semaphore::new(max));
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => r,
        };
        let (stream, remote) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Typically EMFILE: back off briefly rather than spin.
                warn!("accept failed: {e}");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(50)) => continue,
                }
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            warn!(%remote, "refusing peer connection: {max} connections already open");
            continue; // dropping the stream closes it
        };
        let (codec, incoming, stop, wakers) = (codec.clone(), incoming.clone(), stop.clone(), wakers.clone());
        tokio::spawn(async move {
            let _permit = permit;
            stop.run_until_cancelled(serve_inbound(stream, remote, codec, incoming, wakers)).await;
        });
    }
}

/// Serves one inbound connection: sends the challenge, then checks and
/// delivers frames until the connection ends or a frame is rejected.
async fn serve_inbound<M: Message>(
    mut stream: TcpStream,
    remote: SocketAddr,
    codec: Arc<PeerCodec<M>>,
    incoming: mpsc::Sender<Incoming<M>>,
    wakers: Arc<HashMap<NodeId, Arc<Notify>>>,
) {
    let challenge = fresh_challenge();
    if let Err(e) = stream.write_all(&challenge).await {
        debug!(%remote, "inbound connection lost before the challenge: {e}");
        return;
    }
    let mut frames = FramedRead::new(stream, LengthPrefixed::new(codec.max_frame()));
    let mut next_seq = 0u64;
    let mut sender: Option<NodeId> = None;
    while let Some(item) = frames.next().await {
        let frame = match item {
            Ok(frame) => frame,
            Err(StreamError::Rejected(r)) => return report(&incoming, r, remote).await,
            Err(e) => {
                debug!(%remote, "inbound connection failed: {e}");
                return;
            }
        };
        let got = match codec.decode(&frame, &challenge) {
            Ok(got) => got,
            Err(r) => return report(&incoming, r, remote).await,
        };
        if got.seq != next_seq {
            let detail = format!("expected seq {next_seq} on this connection, got {} from {}", got.seq, got.from);
            return report(&incoming, Rejected::new(RejectReason::Replay, detail), remote).await;
        }
        match sender {
            Some(s) if s != got.from => {
                let detail = format!("expected frames from {s} on this connection, got one from {}", got.from);
                return report(&incoming, Rejected::new(RejectReason::UnknownSender, detail), remote).await;
            }
            Some(_) => {}
            None => {
                sender = Some(got.from);
                if let Some(w) = wakers.get(&got.from) {
                    w.notify_one();
                }
            }
        }
        next_seq += 1;
        // Awaiting here applies backpressure to this peer only.
        if incoming.send(Incoming::Message { from: got.from, inc: got.inc, msg: got.msg }).await.is_err() {
            return;
        }
    }
    debug!(%remote, "inbound connection closed");
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
    addr: SocketAddr,
    codec: Arc<PeerCodec<M>>,
    backoff: Backoff,
    /// Signalled when the peer connects to us: retry at once.
    wake: Arc<Notify>,
}

impl<M: Message> PeerLink<M> {
    /// Connects, sends queued messages, reconnects; until the queue closes.
    async fn run(mut self, mut queue: mpsc::Receiver<(Incarnation, M)>) {
        loop {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, connect(self.addr)).await {
                Ok(Ok((stream, challenge))) => {
                    debug!(peer = %self.peer, addr = %self.addr, "connected");
                    self.backoff.reset();
                    match self.pump(stream, &challenge, &mut queue).await {
                        Ok(()) => return,
                        Err(why) => debug!(peer = %self.peer, "connection lost: {why}"),
                    }
                }
                Ok(Err(e)) => debug!(peer = %self.peer, addr = %self.addr, "connect failed: {e}"),
                Err(_) => debug!(peer = %self.peer, addr = %self.addr, "connect timed out"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.backoff.next_delay()) => {}
                _ = self.wake.notified() => self.backoff.reset(),
            }
        }
    }

    /// Writes queued messages to one connection. `Ok` when the queue has
    /// closed (the transport was dropped); `Err` when the connection ends.
    /// A message being written when the connection fails is lost; the
    /// rest stay queued for the next connection.
    async fn pump(
        &self,
        stream: TcpStream,
        challenge: &[u8; CHALLENGE_LEN],
        queue: &mut mpsc::Receiver<(Incarnation, M)>,
    ) -> Result<(), String> {
        let (mut rd, wr) = stream.into_split();
        let mut wr = FramedWrite::new(wr, LengthPrefixed::new(self.codec.max_frame()));
        let mut seq = 0u64;
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
            };
            let Some(mut next) = first else { return Ok(()) };
            for written in 1..=WRITE_BATCH {
                let (inc, msg) = next;
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
