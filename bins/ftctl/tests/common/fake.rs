//! A scripted fake lock daemon: a listener speaking the client framing,
//! answered by hand from each test (`ftctl lock`, `ftctl locks`, `ftctl
//! elect`).

use std::net::SocketAddr;
use std::time::Duration;

use client::{ClientRequest, ClientResponse};
use futures::{SinkExt, StreamExt};
use lockservice::{LockReply, LockRequest};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use wire::ClientCodec;

/// How long a test waits for ftctl's next step.
pub const STEP: Duration = Duration::from_secs(10);
/// A lease that outlasts any test.
pub const LONG: Duration = Duration::from_secs(600);

/// A lease ending `d` from now (CLOCK_MONOTONIC microseconds, as a daemon
/// on this host would send it).
pub fn lease(d: Duration) -> u64 {
    (timer::monotonic_now() + d).as_micros()
}

/// A lock daemon that does only what the test tells it.
pub struct FakeDaemon {
    pub listener: TcpListener,
    pub addr: String,
}

impl FakeDaemon {
    pub async fn start() -> FakeDaemon {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        FakeDaemon { listener, addr }
    }

    pub async fn accept(&self) -> Conn {
        let (stream, _): (TcpStream, SocketAddr) =
            tokio::time::timeout(STEP, self.listener.accept()).await.expect("ftctl never connected").unwrap();
        Conn { framed: Framed::new(stream, ClientCodec::default()) }
    }

    /// Answers ftctl's status probe (a second connection) as `daemon`.
    pub async fn answer_status_as(&self, daemon: &str) {
        let mut probe = self.accept().await;
        let req = tokio::time::timeout(STEP, probe.framed.next()).await.expect("no probe").unwrap().unwrap();
        assert_eq!(req, ClientRequest::Status);
        let report = client::StatusReport {
            daemon: daemon.into(),
            node: ftcore::NodeId(1),
            incarnation: ftcore::Incarnation(1),
            role: "member".into(),
            peers: vec![],
            details: vec![],
        };
        probe.framed.send(ClientResponse::Status(report)).await.unwrap();
    }

    /// Whether ftctl connected at all (after it has exited: a connection
    /// it made waits in the listener's backlog).
    pub async fn was_connected(&self) -> bool {
        tokio::time::timeout(Duration::from_millis(300), self.listener.accept()).await.is_ok()
    }
}

/// The daemon's end of one client connection.
pub struct Conn {
    pub framed: Framed<TcpStream, ClientCodec<ClientRequest<LockRequest>, ClientResponse<LockReply>>>,
}

impl Conn {
    /// The next lock request, or `None` once ftctl has closed the connection.
    pub async fn recv(&mut self) -> Option<LockRequest> {
        match tokio::time::timeout(STEP, self.framed.next()).await.expect("ftctl sent nothing") {
            None | Some(Err(_)) => None,
            Some(Ok(ClientRequest::Op(req))) => Some(req),
            Some(Ok(ClientRequest::Status)) => panic!("ftctl asked for status on its lock connection"),
        }
    }

    pub async fn send(&mut self, reply: LockReply) {
        self.framed.send(ClientResponse::Op(reply)).await.unwrap();
    }

    /// Expects `Acquire` and answers `reply`.
    pub async fn answer_acquire(&mut self, timeout_ms: u64, reply: LockReply) {
        assert_eq!(self.recv().await, Some(LockRequest::Acquire { timeout_ms }));
        self.send(reply).await;
    }
}
