//! The local client API, both ends' shared vocabulary and the client side.
//!
//! A daemon serves local clients (`ftctl`, applications using this crate)
//! on `client_listen`, with the same length-prefixed framing as its peers
//! ([`wire::ClientCodec`]) and these envelopes around the daemon's own
//! request and reply enums: [`ClientRequest::Status`] is answered by the
//! runtime for every daemon, [`ClientRequest::Op`] goes to the protocol
//! core. [`Client`] is a connection from the client side.
//!
//! The envelopes, [`JOINING_DETAIL`], ringd's request and reply types and
//! [`leader::Never`] are pure wire data and live in the `api` crate (which
//! the runtime and the daemons' cores use without tokio); they are
//! re-exported here at their old paths. This crate adds what needs a
//! connection: [`Client`], its errors, and the guards and watches built on
//! it.
//!
//! One request at a time per connection is not required: replies come back
//! in the order the core produces them, and some (a lock's `LockLost`)
//! arrive unasked, so callers read with [`Client::recv`].
//!
//! [`lock`] is a cluster-wide lock, the unnamed one or a named one, as a
//! guard with a lease (`ftctl lock [NAME]`), and the list of the locks a
//! node knows (`ftctl locks`). [`elect`] is an election for applications
//! built on electd's named locks (docs/elections.md): a campaign held as
//! the same guard (`ftctl elect NAME -- CMD`), and who leads, once or as a
//! watch that never goes back (`ftctl elect NAME --observe`).
//!
//! May depend on: `api`, `ftcore`, `wire`, `lockservice`, `timer`, tokio.
//! Used by: `ftctl`, `ftlab`, the real-process tests; never by a daemon
//! (they use `api`).
#![forbid(unsafe_code)]

pub mod duration;
pub mod elect;
#[cfg(test)]
mod fake;
pub mod leader;
pub mod lock;
pub mod ring;

use std::net::SocketAddr;
use std::time::Duration;

pub use api::{ClientRequest, ClientResponse, StatusReport, JOINING_DETAIL};
use ftcore::{Message, PeerStatus};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use wire::{ClientCodec, RejectReason, StreamError};

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon could not be reached.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The client address tried.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The daemon closed the connection.
    #[error("the daemon closed the connection")]
    Closed,
    /// The daemon answered something that is not a valid frame (the
    /// reason is the error's source).
    #[error("bad frame from the daemon")]
    Frame(#[from] StreamError),
    /// The first answer on a connection was not an ftcoord frame: the
    /// address is some other port (a metrics or peer port, another
    /// program).
    #[error(
        "{addr} is not an ftcoord client port: it answered something that is not an ftcoord frame \
         (a metrics or peer port? `ftlab up` and the config's client_listen give the client address)"
    )]
    NotAClientPort {
        /// The address connected to.
        addr: SocketAddr,
    },
    /// The daemon refused the request.
    #[error("refused: {0}")]
    Refused(String),
    /// The daemon answered with a reply of the wrong kind.
    #[error("unexpected reply: {0}")]
    Unexpected(String),
    /// No answer within the time allowed.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// A connection to a daemon's client API, for requests `R` and replies `P`.
#[derive(Debug)]
pub struct Client<R: Message, P: Message> {
    framed: Framed<TcpStream, ClientCodec<ClientResponse<P>, ClientRequest<R>>>,
    /// The daemon's address.
    addr: SocketAddr,
    /// Whether a valid frame has arrived on this connection yet.
    answered: bool,
}

impl<R: Message, P: Message> Client<R, P> {
    /// Connects to the daemon's `client_listen` address.
    pub async fn connect(addr: SocketAddr) -> Result<Self, ClientError> {
        let stream = TcpStream::connect(addr).await.map_err(|source| ClientError::Connect { addr, source })?;
        let _ = stream.set_nodelay(true);
        Ok(Client { framed: Framed::new(stream, ClientCodec::default()), addr, answered: false })
    }

    /// The daemon's address (the one connected to).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends a request to the protocol core.
    pub async fn send(&mut self, req: R) -> Result<(), ClientError> {
        self.framed.send(ClientRequest::Op(req)).await?;
        Ok(())
    }

    /// The next response of any kind; a daemon error becomes `Refused`.
    async fn next_response(&mut self) -> Result<ClientResponse<P>, ClientError> {
        let next = self.framed.next().await;
        let answered = self.answered;
        self.answered |= matches!(next, Some(Ok(_)));
        match next {
            None => Err(ClientError::Closed),
            // Not even a first frame: some other protocol is talking.
            Some(Err(StreamError::Rejected(r)))
                if !answered && matches!(r.reason, RejectReason::BadMagic | RejectReason::Oversized) =>
            {
                Err(ClientError::NotAClientPort { addr: self.addr })
            }
            Some(Err(e)) => Err(e.into()),
            Some(Ok(ClientResponse::Error(e))) => Err(ClientError::Refused(e)),
            Some(Ok(r)) => Ok(r),
        }
    }

    /// The next reply from the core (`Refused` if the daemon sent an error).
    pub async fn recv(&mut self) -> Result<P, ClientError> {
        match self.next_response().await? {
            ClientResponse::Op(p) => Ok(p),
            _ => Err(ClientError::Unexpected("status".into())),
        }
    }

    /// Sends a request and waits for the next reply, at most `timeout`.
    pub async fn call(&mut self, req: R, timeout: Duration) -> Result<P, ClientError> {
        self.send(req).await?;
        tokio::time::timeout(timeout, self.recv()).await.map_err(|_| ClientError::Timeout(timeout))?
    }

    /// Asks for the daemon's status.
    pub async fn status(&mut self) -> Result<StatusReport, ClientError> {
        self.framed.send(ClientRequest::Status).await?;
        match self.next_response().await? {
            ClientResponse::Status(s) => Ok(s),
            _ => Err(ClientError::Unexpected("protocol reply".into())),
        }
    }
}

/// Renders a status report as the human-readable text `ftctl status` prints.
pub fn render_status(s: &StatusReport) -> String {
    let mut out = format!(
        "daemon:      {}\nnode:        {}\nincarnation: {}\nrole:        {}\n",
        s.daemon, s.node.0, s.incarnation.0, s.role
    );
    for (k, v) in &s.details {
        out.push_str(&format!("{:<12} {v}\n", format!("{k}:")));
    }
    out.push_str("peers:\n");
    for PeerStatus { id, addr, up, incarnation } in &s.peers {
        let state = if *up { "up" } else { "down" };
        out.push_str(&format!("  {:<4} {addr:<22} {state:<5} life {}\n", id.0, incarnation.0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftcore::{message_kinds, Incarnation, NodeId};
    use serde::{Deserialize, Serialize};

    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    enum Req {
        Ping,
        Echo(String),
    }
    message_kinds!(Req { Ping => "ping", Echo => "echo" });

    /// A server that answers every connection with `reply`, then closes.
    async fn answering(reply: &'static [u8]) -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                use tokio::io::AsyncWriteExt;
                let _ = s.write_all(reply).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_metrics_port_is_named_as_not_a_client_port() {
        let addr = answering(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").await;
        let mut c = Client::<Req, Req>::connect(addr).await.unwrap();
        let e = c.status().await.unwrap_err();
        assert!(matches!(e, ClientError::NotAClientPort { addr: a } if a == addr), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("is not an ftcoord client port"), "{text}");
        // Said once: the message does not repeat its source.
        assert_eq!(text.matches("oversized").count(), 0, "{text}");
    }

    #[tokio::test]
    async fn a_closed_connection_is_not_called_a_wrong_port() {
        let addr = answering(b"").await;
        let mut c = Client::<Req, Req>::connect(addr).await.unwrap();
        let e = c.status().await.unwrap_err();
        assert!(!matches!(e, ClientError::NotAClientPort { .. }), "{e:?}");
    }

    #[test]
    fn envelopes_round_trip_through_the_client_codec() {
        let req = ClientRequest::Op(Req::Echo("hello".into()));
        let body = ClientCodec::<ClientRequest<Req>, ClientRequest<Req>>::encode_body(&req).unwrap();
        let back = ClientCodec::<ClientRequest<Req>, ClientRequest<Req>>::decode_body(&body).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn status_renders_every_field() {
        let s = StatusReport {
            daemon: "hbringd".into(),
            node: NodeId(2),
            incarnation: Incarnation(77),
            role: "member".into(),
            peers: vec![PeerStatus {
                id: NodeId(1),
                addr: "127.0.0.1:1".into(),
                up: false,
                incarnation: Incarnation(5),
            }],
            details: vec![("successor".into(), "3".into())],
        };
        let text = render_status(&s);
        assert!(text.contains("daemon:      hbringd"), "{text}");
        assert!(text.contains("incarnation: 77"), "{text}");
        assert!(text.contains("successor:   3"), "{text}");
        assert!(text.contains("127.0.0.1:1"), "{text}");
        assert!(text.contains("down"), "{text}");
    }
}
