//! ringd's client API types (ringd.md, Lookup and Services): what a ringd
//! replica's `client_listen` speaks inside [`ClientRequest::Op`](crate::ClientRequest)
//! and [`ClientResponse::Op`](crate::ClientResponse), and what ringd's core
//! answers with. The client side (`client::ring::RingClient`, what
//! `ftctl lookup` and `ftctl exec` use) is in the `client` crate.

use ftcore::{message_kinds, NodeId};
use serde::{Deserialize, Serialize};

/// A request to a ringd replica.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RingRequest {
    /// Which replica is the least loaded? Answered [`RingReply::LookedUp`]
    /// (always: after two laps lost, with the best known, this one at worst).
    LookUp {
        /// Chosen by the client; echoed in the answer.
        request_id: u64,
    },
    /// Run `service` with `args` here. Answered [`RingReply::Executed`].
    /// A token service's `request_id` makes retries idempotent: a repeat
    /// returns the stored outcome instead of running again.
    Execute {
        /// Chosen by the client (unique per logical request); echoed.
        request_id: u64,
        /// The service's name (`echo`, `counter.incr`, a configured one, …).
        service: String,
        /// Its arguments.
        args: Vec<String>,
    },
}

message_kinds!(RingRequest { LookUp => "lookup", Execute => "execute" });

/// A ringd replica's answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RingReply {
    /// The least-loaded replica found by a lap of the ring.
    LookedUp {
        /// The lookup's id.
        request_id: u64,
        /// The replica.
        replica: NodeId,
        /// Its client address (`client_listen`).
        address: String,
        /// Its load when the lap passed it (services running + token
        /// services queued).
        load: u32,
    },
    /// The outcome of an `Execute`.
    Executed {
        /// The request's id.
        request_id: u64,
        /// The service's result, or why it has none.
        outcome: Outcome,
    },
}

message_kinds!(RingReply { LookedUp => "looked_up", Executed => "executed" });

/// What a service returned, or why it did not run to the end.
pub type Outcome = Result<ServiceResult, ExecError>;

/// A service's result.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ServiceResult {
    /// Its output (the new value for `counter.incr` / `kv.put`, the value
    /// for the getters, the arguments for `echo`, captured stdout for a
    /// command service).
    pub output: String,
    /// A command service's exit status (0 for built-ins).
    pub status: i32,
    /// The fence it ran under (token services; `None` for the others), as
    /// interfaces.md packs it: `epoch·2⁶⁴ + seq`.
    pub fence: Option<u128>,
}

/// Why a service has no result.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
pub enum ExecError {
    /// No service of that name here.
    #[error("unknown service `{0}`")]
    UnknownService(String),
    /// The arguments do not fit the service.
    #[error("bad arguments: {0}")]
    BadArguments(String),
    /// It ran past its `timeout_ms` (or its token lease ended) and was killed.
    #[error("timed out")]
    TimedOut,
    /// The replica is shutting down.
    #[error("replica leaving")]
    Leaving,
    /// The replica's ring is a minority of the configured replicas: token
    /// services are refused.
    #[error("no_quorum: this replica's ring is a minority")]
    NoQuorum,
    /// The token was lost or superseded before the result was confirmed;
    /// the service may or may not have taken effect: retry with the same
    /// `request_id` (applied at most once).
    #[error("token_lost: retry with the same request_id")]
    TokenLost,
    /// Too many requests queued here.
    #[error("busy: too many requests queued")]
    Busy,
    /// A command service could not be started.
    #[error("cannot run: {0}")]
    Spawn(String),
}

impl ExecError {
    /// A short stable label (metrics, JSON output).
    pub fn label(&self) -> &'static str {
        match self {
            ExecError::UnknownService(_) => "unknown_service",
            ExecError::BadArguments(_) => "bad_arguments",
            ExecError::TimedOut => "timed_out",
            ExecError::Leaving => "leaving",
            ExecError::NoQuorum => "no_quorum",
            ExecError::TokenLost => "token_lost",
            ExecError::Busy => "busy",
            ExecError::Spawn(_) => "spawn_failed",
        }
    }
}
