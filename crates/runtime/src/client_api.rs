//! The client API server on `client_listen`: accepts local clients (ftctl,
//! applications), numbers them, and passes their requests to the driver;
//! replies come back on a per-client channel.
//!
//! A connection limit (`limits.max_clients`) keeps a flood of clients from
//! starving the daemon; a malformed frame closes that client's connection
//! (counted as a rejected frame) and, like any disconnect, tells the core
//! the client is gone so whatever it held is released.
//!
//! Flow control is by credit (`limits.client_credit`): a client may have
//! that many requests in the daemon (not yet handled by the driver, or
//! handled with replies still waiting to be written to its socket); beyond
//! it the daemon stops reading its requests until they are, so a
//! pipelining client is slowed, never cut off. A client is
//! "not reading" only when its socket takes no reply bytes for
//! [`WRITE_STALL`]: then it is disconnected (counted as
//! `connections_closed_total{listener="client", reason="not_reading"}`).
//! Accept errors (EMFILE) pause the listener (`limits.accept_backoff_ms`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use api::{ClientRequest, ClientResponse};
use ftcore::{ClientId, Message};
use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;
use wire::{accept_with_backoff, ClientCodec, Closed, LinkStats, StreamError};

/// How long a reply write may stall before the client counts as not
/// reading and is disconnected.
pub const WRITE_STALL: Duration = Duration::from_secs(10);

/// Room in a client's queue: a `Handled` mark and a reply for each
/// request of its credit, and slack for unsolicited replies (`LockLost`).
/// Full only when the client's socket has stalled.
fn reply_queue_len(credit: usize) -> usize {
    credit.saturating_mul(2).saturating_add(16)
}

/// What the driver sends a client's connection.
#[derive(Debug)]
pub enum ToClient<P> {
    /// A reply to write.
    Reply(ClientResponse<P>),
    /// One request was handled (replies it caused are queued before this
    /// mark): its credit comes back once the mark is reached, i.e. once
    /// the client has read those replies.
    Handled,
}

/// The client listener's settings.
#[derive(Clone, Debug)]
pub struct ClientLimits {
    /// Most clients connected at once (`limits.max_clients`).
    pub max_clients: usize,
    /// Largest frame (`limits.max_frame_bytes`).
    pub max_frame: usize,
    /// Requests a client may have unanswered (`limits.client_credit`).
    pub credit: usize,
    /// Pause after an accept error (`limits.accept_backoff_ms`).
    pub accept_backoff: Duration,
}

/// What the client server tells the driver.
#[derive(Debug)]
pub enum ClientEvent<R, P> {
    /// A client connected; replies for it, and a [`ToClient::Handled`] mark
    /// for each of its requests once handled, go into `tx`.
    Connected {
        /// Its number.
        id: ClientId,
        /// Where its replies go.
        tx: mpsc::Sender<ToClient<P>>,
    },
    /// A client sent a request.
    Request {
        /// Who.
        id: ClientId,
        /// What.
        req: ClientRequest<R>,
    },
    /// A client's connection closed.
    Gone {
        /// Who.
        id: ClientId,
    },
    /// A client sent a frame that is not valid; its connection was closed.
    Rejected {
        /// Why.
        reason: wire::RejectReason,
        /// What was expected and what came.
        detail: String,
        /// The client's address.
        remote: SocketAddr,
    },
}

/// Binds `addr` and serves clients until `stop` is cancelled; what it
/// refuses or closes is counted in `stats`.
pub async fn serve<R: Message, P: Message>(
    addr: SocketAddr,
    limits: ClientLimits,
    stats: Arc<LinkStats>,
    events: mpsc::Sender<ClientEvent<R, P>>,
    stop: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let permits = Arc::new(Semaphore::new(limits.max_clients));
    let next_id = Arc::new(AtomicU64::new(1));
    let task = tokio::spawn(async move {
        while let Some((stream, remote)) = accept_with_backoff(&listener, limits.accept_backoff, &stats, &stop).await {
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                stats.closed(Closed::NoSlot);
                if stats.log.allow("no_slot", remote.ip()) {
                    tracing::warn!(%remote, max_clients = limits.max_clients, "client connection refused: too many clients");
                }
                continue;
            };
            let id = ClientId(next_id.fetch_add(1, Ordering::Relaxed));
            let (events, stop, stats, limits) = (events.clone(), stop.clone(), stats.clone(), limits.clone());
            tokio::spawn(async move {
                connection(stream, remote, id, &limits, &stats, events, stop).await;
                drop(permit);
            });
        }
    });
    Ok((local, task))
}

async fn connection<R: Message, P: Message>(
    stream: TcpStream,
    remote: SocketAddr,
    id: ClientId,
    limits: &ClientLimits,
    stats: &LinkStats,
    events: mpsc::Sender<ClientEvent<R, P>>,
    stop: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let mut framed = Framed::new(stream, ClientCodec::<ClientRequest<R>, ClientResponse<P>>::new(limits.max_frame));
    let (tx, mut rx) = mpsc::channel(reply_queue_len(limits.credit));
    if events.send(ClientEvent::Connected { id, tx }).await.is_err() {
        return;
    }
    // Requests passed on whose Handled mark has not been reached.
    let mut unanswered = 0usize;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            reply = rx.recv() => match reply {
                Some(ToClient::Handled) => unanswered = unanswered.saturating_sub(1),
                Some(ToClient::Reply(r)) => {
                    match tokio::time::timeout(WRITE_STALL, framed.send(r)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => break,
                        Err(_) => {
                            stats.closed(Closed::NotReading);
                            if stats.log.allow("not_reading", remote.ip()) {
                                tracing::warn!(%remote, client = %id, "client took no reply bytes for {WRITE_STALL:?}; disconnecting it");
                            }
                            break;
                        }
                    }
                }
                None => break,
            },
            frame = framed.next(), if unanswered < limits.credit => match frame {
                Some(Ok(req)) => {
                    unanswered += 1;
                    if events.send(ClientEvent::Request { id, req }).await.is_err() { break }
                }
                Some(Err(StreamError::Rejected(r))) => {
                    let _ = events.send(ClientEvent::Rejected { reason: r.reason, detail: r.detail, remote }).await;
                    break;
                }
                Some(Err(_)) | None => break,
            },
        }
    }
    let _ = events.send(ClientEvent::Gone { id }).await;
}
