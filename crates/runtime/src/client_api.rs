//! The client API server on `client_listen`: accepts local clients (ftctl,
//! applications), numbers them, and passes their requests to the driver;
//! replies come back on a per-client channel.
//!
//! A connection limit (`limits.max_clients`) keeps a flood of clients from
//! starving the daemon; a malformed frame closes that client's connection
//! (counted as a rejected frame) and, like any disconnect, tells the core
//! the client is gone so whatever it held is released.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use client::{ClientRequest, ClientResponse};
use ftcore::{ClientId, Message};
use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;
use wire::{ClientCodec, StreamError};

/// Replies queued for one client before it counts as not reading.
const CLIENT_QUEUE: usize = 256;

/// What the client server tells the driver.
#[derive(Debug)]
pub enum ClientEvent<R, P> {
    /// A client connected; replies for it go into `tx`.
    Connected {
        /// Its number.
        id: ClientId,
        /// Where its replies go.
        tx: mpsc::Sender<ClientResponse<P>>,
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

/// Binds `addr` and serves clients until `stop` is cancelled.
pub async fn serve<R: Message, P: Message>(
    addr: SocketAddr,
    max_clients: usize,
    max_frame: usize,
    events: mpsc::Sender<ClientEvent<R, P>>,
    stop: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let permits = Arc::new(Semaphore::new(max_clients));
    let next_id = Arc::new(AtomicU64::new(1));
    let task = tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => return,
                a = listener.accept() => a,
            };
            let Ok((stream, remote)) = accepted else { continue };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                tracing::warn!(%remote, max_clients, "client connection refused: too many clients");
                continue;
            };
            let id = ClientId(next_id.fetch_add(1, Ordering::Relaxed));
            let events = events.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                connection(stream, remote, id, max_frame, events, stop).await;
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
    max_frame: usize,
    events: mpsc::Sender<ClientEvent<R, P>>,
    stop: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let mut framed = Framed::new(stream, ClientCodec::<ClientRequest<R>, ClientResponse<P>>::new(max_frame));
    let (tx, mut rx) = mpsc::channel(CLIENT_QUEUE);
    if events.send(ClientEvent::Connected { id, tx }).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            reply = rx.recv() => match reply {
                Some(r) => if framed.send(r).await.is_err() { break },
                None => break,
            },
            frame = framed.next() => match frame {
                Some(Ok(req)) => {
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
