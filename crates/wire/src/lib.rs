//! How ftcoord nodes talk: payload codec, envelope header, authentication,
//! framing and the TCP/UDP transports.
//!
//! Layers, bottom up (each module depends only on the ones above it):
//!
//! - [`codec`]: the one binary format for payloads (postcard).
//! - [`header`]: the fixed 32-byte envelope header (magic, version, flags,
//!   cluster, sender, incarnation, seq, kind).
//! - [`auth`]: the cluster key, frame MACs and the UDP replay window.
//! - [`frame`]: [`PeerCodec`] (a whole peer frame ⇄ a message, with every
//!   check), [`LengthPrefixed`] stream framing and the client API's
//!   [`ClientCodec`].
//! - [`transport`]: the [`Transport`] trait with [`TcpTransport`] and
//!   [`UdpTransport`].
//!
//! `wire` is generic over the message type ([`ftcore::Message`]): each
//! daemon brings its own enum. Nothing here panics on bytes from the
//! network; every refused frame becomes a [`Rejected`] with a metric label
//! and a detail naming what was expected and what came.
//!
//! May depend on: `ftcore`, `membership` (and tokio). Used by: `runtime`,
//! `client`; never by a protocol core.
#![forbid(unsafe_code)]

pub mod auth;
pub mod codec;
pub mod frame;
pub mod header;
pub mod transport;

pub use auth::{ClusterKey, KeyError, ReplayError, ReplayWindow};
pub use codec::CodecError;
pub use frame::{
    Body, ClientCodec, Control, EncodeError, LengthPrefixed, PeerCodec, Received, RejectReason, Rejected, StreamError,
    CONTROL_KIND_BASE, DEFAULT_MAX_FRAME,
};
pub use header::{Header, HeaderError};
pub use transport::{
    accept_with_backoff, random_bytes, udp_challenge, Chaos, Closed, Incoming, LinkStats, LogLimiter, SendError,
    TcpTransport, Transport, TransportConfig, TransportError, UdpTransport, UDP_PENDING_MAX, UDP_PREFIX_LEN,
};
