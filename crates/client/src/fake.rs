//! An in-process fake lock daemon for the unit tests: a listener speaking
//! the client framing, each connection played by a script.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use lockservice::{LockReply, LockRequest};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use wire::ClientCodec;

use crate::{ClientRequest, ClientResponse};

/// How long a script waits for the client's next request.
pub const STEP: Duration = Duration::from_secs(5);

/// The daemon's end of one client connection.
#[derive(Debug)]
pub struct Conn {
    framed: Framed<TcpStream, ClientCodec<ClientRequest<LockRequest>, ClientResponse<LockReply>>>,
}

impl Conn {
    /// The next lock request, `None` once the client has gone.
    pub async fn recv(&mut self) -> Option<LockRequest> {
        match tokio::time::timeout(STEP, self.framed.next()).await.expect("the client sent nothing") {
            None | Some(Err(_)) => None,
            Some(Ok(ClientRequest::Op(req))) => Some(req),
            Some(Ok(ClientRequest::Status)) => panic!("asked for status"),
        }
    }

    /// Sends `reply`.
    pub async fn send(&mut self, reply: LockReply) {
        self.framed.send(ClientResponse::Op(reply)).await.unwrap();
    }

    /// Sends a daemon's error response (not a lock reply).
    pub async fn send_error(&mut self, error: &str) {
        self.framed.send(ClientResponse::Error(error.to_owned())).await.unwrap();
    }
}

/// A fake lock daemon: one connection, played by `script`.
pub async fn fake_daemon<F, Fut>(script: F) -> SocketAddr
where
    F: FnOnce(Conn) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        script(Conn { framed: Framed::new(stream, ClientCodec::default()) }).await;
    });
    addr
}

/// A fake lock daemon whose connections, in the order they arrive, are
/// played by `script(0, conn)`, `script(1, conn)`, …, one after another
/// (the next is accepted once the previous script has ended).
pub async fn fake_daemon_n<F, Fut>(script: F) -> SocketAddr
where
    F: Fn(usize, Conn) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((stream, _)) = listener.accept().await {
            script(n, Conn { framed: Framed::new(stream, ClientCodec::default()) }).await;
            n += 1;
        }
    });
    addr
}
