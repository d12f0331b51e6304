//! The local client API's vocabulary: what a daemon and its local clients
//! agree on, as pure data.
//!
//! A daemon serves local clients (`ftctl`, applications using the `client`
//! crate) on `client_listen` with the client framing of `wire` and these
//! envelopes around the daemon's own request and reply enums:
//! [`ClientRequest::Status`] is answered by the runtime for every daemon,
//! [`ClientRequest::Op`] goes to the protocol core. [`ring`] holds ringd's
//! request and reply types (lookup, execute, a service's outcome);
//! [`leader::Never`] is the empty request type of a status-only connection.
//! The lock's messages are `lockservice::{LockRequest, LockReply}` (sans-IO
//! too: the lock daemons' cores and the lock queue share them).
//!
//! Everything here is serde data, constants and the wire's error enums: no
//! connection, no runtime, no I/O. The serde shapes (field order, variant
//! order) are the encoding on the wire; changing one is a protocol change.
//!
//! May depend on: `ftcore` (the `Message` trait, `NodeId`, `StatusReport`),
//! serde, thiserror; nothing that does I/O (no tokio, no `wire`). May be
//! used by anyone: the tokio `client` (which re-exports it at its old
//! paths), `runtime`'s client API server, and the daemons' sans-IO cores.
#![forbid(unsafe_code)]

pub mod leader;
pub mod ring;

use ftcore::Message;
pub use ftcore::StatusReport;
use serde::{Deserialize, Serialize};

/// The status detail a daemon still joining its cluster reports, e.g.
/// `("joining", "1 of 4 answered")`; absent once it has joined (it grants
/// nothing until then: `ftctl lock` says so).
pub const JOINING_DETAIL: &str = "joining";

/// What a local client sends to a daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientRequest<R> {
    /// Every daemon's status (`ftctl status`).
    Status,
    /// A request for the daemon's protocol core.
    Op(R),
}

impl<R: Message> Message for ClientRequest<R> {
    fn kind(&self) -> u16 {
        match self {
            ClientRequest::Status => 0,
            ClientRequest::Op(r) => r.kind().saturating_add(1),
        }
    }

    fn kind_name(kind: u16) -> Option<&'static str> {
        match kind {
            0 => Some("status"),
            k => R::kind_name(k - 1),
        }
    }
}

/// What a daemon sends to a local client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientResponse<P> {
    /// Answer to [`ClientRequest::Status`].
    Status(StatusReport),
    /// A reply from the protocol core (asked for or not).
    Op(P),
    /// The request was refused (it changed nothing).
    Error(String),
}

impl<P: Message> Message for ClientResponse<P> {
    fn kind(&self) -> u16 {
        match self {
            ClientResponse::Status(_) => 0,
            ClientResponse::Error(_) => 1,
            ClientResponse::Op(p) => p.kind().saturating_add(2),
        }
    }

    fn kind_name(kind: u16) -> Option<&'static str> {
        match kind {
            0 => Some("status"),
            1 => Some("error"),
            k => P::kind_name(k - 2),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftcore::message_kinds;

    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    enum Req {
        Ping,
        Echo(String),
    }
    message_kinds!(Req { Ping => "ping", Echo => "echo" });

    #[test]
    fn envelope_kinds_nest_the_inner_kinds() {
        assert_eq!(ClientRequest::<Req>::Status.kind(), 0);
        assert_eq!(ClientRequest::Op(Req::Ping).kind(), 1);
        assert_eq!(ClientRequest::Op(Req::Echo("x".into())).kind(), 2);
        assert_eq!(ClientRequest::<Req>::kind_name(2), Some("echo"));
        assert_eq!(ClientRequest::<Req>::kind_name(3), None);
        assert_eq!(ClientResponse::<Req>::Error("e".into()).kind(), 1);
        assert_eq!(ClientResponse::Op(Req::Echo("x".into())).kind(), 3);
        assert_eq!(ClientResponse::<Req>::kind_name(2), Some("ping"));
        assert_eq!(ClientResponse::<Req>::kind_name(4), None);
    }

    /// The serde shapes are the wire: variant and field order as before the
    /// move out of `client` (postcard, the codec's format).
    #[test]
    fn encodings_are_pinned() {
        use crate::ring::{ExecError, RingReply, RingRequest, ServiceResult};
        fn enc<T: Serialize>(v: &T) -> Vec<u8> {
            postcard::to_stdvec(v).unwrap()
        }
        let req =
            ClientRequest::Op(RingRequest::Execute { request_id: 7, service: "echo".into(), args: vec!["a".into()] });
        assert_eq!(enc(&req), [1, 1, 7, 4, b'e', b'c', b'h', b'o', 1, 1, b'a']);
        assert_eq!(enc(&ClientRequest::<RingRequest>::Status), [0]);
        let lost = ClientResponse::Op(RingReply::Executed { request_id: 7, outcome: Err(ExecError::Leaving) });
        assert_eq!(enc(&lost), [1, 1, 7, 1, 3]);
        let ok = ServiceResult { output: "1".into(), status: 0, fence: Some(2) };
        let done = ClientResponse::Op(RingReply::Executed { request_id: 9, outcome: Ok(ok) });
        assert_eq!(enc(&done), [1, 1, 9, 0, 1, b'1', 0, 1, 2]);
        assert_eq!(enc(&ClientResponse::<RingReply>::Error("no".into())), [2, 2, b'n', b'o']);
    }
}
