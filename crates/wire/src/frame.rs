//! Frames: peer frames (header + payload + optional MAC) and client
//! frames, and the one length-delimited stream framing both use on TCP.
//!
//! - [`PeerCodec`] turns a message into a peer frame and back, checking
//!   everything about an incoming frame before the protocol sees it. It
//!   works on whole frames (a TCP frame without its length prefix, or a UDP
//!   datagram), so it is byte-pure and used by both transports and the
//!   fuzz targets.
//! - [`LengthPrefixed`] is the stream framing: a 4-byte big-endian length,
//!   then that many bytes. It refuses a length above the configured maximum
//!   before reserving any memory for it.
//! - [`ClientCodec`] is the local client API's tokio codec (ftctl ↔
//!   daemon): [`LengthPrefixed`] around `magic "FTCL" | version | kind |
//!   payload`. No cluster id, no MAC: clients are local.
//!
//! Every refusal is a [`Rejected`]: a [`RejectReason`] (the metric label)
//! plus a detail naming what was expected and what came.

use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use ftcore::Message;
use membership::{Incarnation, Membership, NodeId};
use tokio_util::codec::{Decoder, Encoder};

use crate::{
    auth::{ClusterKey, CHALLENGE_LEN, TAG_LEN},
    codec::{self, CodecError},
    header::{Header, HeaderError, FLAG_MAC, HEADER_LEN, VERSION},
};

/// Default maximum frame length (header, payload and tag; not the length
/// prefix): 64 KiB.
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024;
/// Length of the stream framing's length prefix.
pub const LENGTH_PREFIX_LEN: usize = 4;
/// First four bytes of every client frame body (distinct from the peer
/// magic, so a peer frame sent to the client port is refused at once).
pub const CLIENT_MAGIC: [u8; 4] = *b"FTCL";
/// Length of a client frame's header: magic, version, kind.
pub const CLIENT_HEADER_LEN: usize = 7;

/// The first kind of the range reserved for the transports' own frames
/// ([`Control`]): message enums number their kinds from 0
/// (`ftcore::message_kinds!`) and never reach it.
pub const CONTROL_KIND_BASE: u16 = 0xFF00;

/// A transport's own frame, never seen by a protocol core. Sent in the
/// same envelope as messages (header, payload, MAC), so it is checked and
/// authenticated the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Control {
    /// Opens a link: a TCP connector's first frame on every connection; a
    /// UDP sender's request for the receiver's current life.
    Hello {
        /// Echoed by the answer (UDP), so that a replayed answer is not
        /// taken for a fresh one.
        nonce: u64,
    },
    /// The answer to a UDP [`Control::Hello`], from the receiver's current
    /// life (the header names it).
    HelloAck {
        /// The Hello's nonce.
        nonce: u64,
    },
    /// Sent on a link idle for a third of `peer_idle_timeout_ms`, so that a
    /// silent link means a dead one.
    Keepalive,
    /// TCP: a connector's last frame when its node stops gracefully,
    /// after everything queued for the peer: the connection's end that
    /// follows is a planned stop, not a failure. A hint for logs only;
    /// no core acts on it.
    Goodbye,
}

impl Control {
    /// This frame's kind (in the reserved range).
    pub fn kind(&self) -> u16 {
        CONTROL_KIND_BASE
            + match self {
                Control::Hello { .. } => 0,
                Control::HelloAck { .. } => 1,
                Control::Keepalive => 2,
                Control::Goodbye => 3,
            }
    }

    /// The name of a control kind, `None` outside the reserved range's
    /// used part.
    pub fn kind_name(kind: u16) -> Option<&'static str> {
        match kind.checked_sub(CONTROL_KIND_BASE)? {
            0 => Some("hello"),
            1 => Some("hello_ack"),
            2 => Some("keepalive"),
            3 => Some("goodbye"),
            _ => None,
        }
    }
}

/// What a peer frame carries: a protocol message or a transport's own
/// [`Control`] frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body<M> {
    /// For the protocol core.
    Msg(M),
    /// For the transport.
    Control(Control),
}

/// Why a frame was refused; [`label`](Self::label) is its metric label
/// (`…_frames_rejected_total{reason}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectReason {
    /// Not an ftcoord frame.
    BadMagic,
    /// Unsupported wire version (or flag bits it does not define).
    Version,
    /// A frame for another cluster.
    Cluster,
    /// The sender is not a configured member (or changed mid-connection).
    UnknownSender,
    /// MAC missing, unexpected or not verifying.
    Auth,
    /// Longer than the maximum frame length.
    Oversized,
    /// Shorter than its header, tag or announced length.
    Truncated,
    /// A message kind the receiving type does not have.
    UnknownKind,
    /// The payload does not decode as the kind the header announces.
    Decode,
    /// A sequence number already seen or out of order.
    Replay,
    /// A datagram from an older life of its sender than one already seen,
    /// or addressed to a life of this node other than its current one
    /// (UDP).
    StaleLife,
}

impl RejectReason {
    /// Every reason, for registering metrics up front.
    pub const ALL: [RejectReason; 11] = [
        RejectReason::BadMagic,
        RejectReason::Version,
        RejectReason::Cluster,
        RejectReason::UnknownSender,
        RejectReason::Auth,
        RejectReason::Oversized,
        RejectReason::Truncated,
        RejectReason::UnknownKind,
        RejectReason::Decode,
        RejectReason::Replay,
        RejectReason::StaleLife,
    ];

    /// The metric label, in snake case.
    pub fn label(&self) -> &'static str {
        match self {
            RejectReason::BadMagic => "bad_magic",
            RejectReason::Version => "version",
            RejectReason::Cluster => "cluster",
            RejectReason::UnknownSender => "unknown_sender",
            RejectReason::Auth => "auth",
            RejectReason::Oversized => "oversized",
            RejectReason::Truncated => "truncated",
            RejectReason::UnknownKind => "unknown_kind",
            RejectReason::Decode => "decode",
            RejectReason::Replay => "replay",
            RejectReason::StaleLife => "stale_life",
        }
    }
}

impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// A refused frame: why, and what was expected versus what came.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("frame rejected ({reason}): {detail}")]
pub struct Rejected {
    /// The metric label.
    pub reason: RejectReason,
    /// Human-readable specifics for the log line.
    pub detail: String,
}

impl Rejected {
    /// A rejection with its detail.
    pub fn new(reason: RejectReason, detail: impl Into<String>) -> Self {
        Rejected { reason, detail: detail.into() }
    }
}

impl From<HeaderError> for Rejected {
    fn from(e: HeaderError) -> Self {
        let reason = match e {
            HeaderError::Truncated { .. } => RejectReason::Truncated,
            HeaderError::BadMagic { .. } => RejectReason::BadMagic,
            HeaderError::Version { .. } | HeaderError::Flags { .. } => RejectReason::Version,
            HeaderError::Cluster { .. } => RejectReason::Cluster,
        };
        Rejected::new(reason, e.to_string())
    }
}

/// Why an outgoing frame could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The payload codec refused the message.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The frame would exceed the maximum frame length.
    #[error("frame of {size} bytes exceeds the maximum frame length {max}")]
    TooLarge {
        /// The frame's size.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
}

/// Errors of the stream codecs ([`LengthPrefixed`], [`ClientCodec`]).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The socket failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The peer sent a frame we refuse; close the connection.
    #[error(transparent)]
    Rejected(#[from] Rejected),
    /// An outgoing frame could not be built.
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// A peer frame that passed every check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received<M> {
    /// The (configured, and with a key: authenticated) sender.
    pub from: NodeId,
    /// The sender's life.
    pub inc: Incarnation,
    /// The frame's replay-guard sequence number (the transport checks it).
    pub seq: u64,
    /// The message.
    pub msg: M,
}

/// Encodes and checks peer frames for one node of one cluster.
#[derive(Clone, Debug)]
pub struct PeerCodec<M> {
    cluster: u32,
    me: NodeId,
    members: Membership,
    key: Option<ClusterKey>,
    max_frame: usize,
    _msg: PhantomData<fn() -> M>,
}

impl<M: Message> PeerCodec<M> {
    /// A codec for node `me` of cluster `cluster`, accepting frames from
    /// any of `members`, authenticated with `key` when one is given, with
    /// the [default maximum frame length](DEFAULT_MAX_FRAME).
    pub fn new(cluster: u32, me: NodeId, members: Membership, key: Option<ClusterKey>) -> Self {
        PeerCodec { cluster, me, members, key, max_frame: DEFAULT_MAX_FRAME, _msg: PhantomData }
    }

    /// Sets the maximum frame length (header, payload and tag).
    pub fn with_max_frame(mut self, max_frame: usize) -> Self {
        self.max_frame = max_frame;
        self
    }

    /// The maximum frame length.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Builds the frame (without length prefix) carrying `msg` from this
    /// node in life `inc`, numbered `seq`, MAC'd over `challenge` when a
    /// key is configured.
    pub fn encode(
        &self,
        inc: Incarnation,
        seq: u64,
        challenge: &[u8; CHALLENGE_LEN],
        msg: &M,
    ) -> Result<Bytes, EncodeError> {
        self.encode_payload(inc, seq, challenge, msg.kind(), &codec::encode(msg)?)
    }

    /// Builds a transport's own frame, like [`encode`](Self::encode).
    pub fn encode_control(
        &self,
        inc: Incarnation,
        seq: u64,
        challenge: &[u8; CHALLENGE_LEN],
        control: &Control,
    ) -> Result<Bytes, EncodeError> {
        self.encode_payload(inc, seq, challenge, control.kind(), &codec::encode(control)?)
    }

    fn encode_payload(
        &self,
        inc: Incarnation,
        seq: u64,
        challenge: &[u8; CHALLENGE_LEN],
        kind: u16,
        payload: &[u8],
    ) -> Result<Bytes, EncodeError> {
        let tag_len = if self.key.is_some() { TAG_LEN } else { 0 };
        let size = HEADER_LEN + payload.len() + tag_len;
        if size > self.max_frame {
            return Err(EncodeError::TooLarge { size, max: self.max_frame });
        }
        let header = Header {
            flags: if self.key.is_some() { FLAG_MAC } else { 0 },
            cluster: self.cluster,
            sender: self.me,
            incarnation: inc,
            seq,
            kind,
        }
        .encode();
        let mut out = BytesMut::with_capacity(size);
        out.put_slice(&header);
        out.put_slice(payload);
        if let Some(key) = &self.key {
            out.put_slice(&key.tag(challenge, &header, payload));
        }
        Ok(out.freeze())
    }

    /// Checks a frame that must carry a protocol message (a control frame
    /// is refused as an unknown kind); see [`decode_any`](Self::decode_any).
    pub fn decode(&self, frame: &[u8], challenge: &[u8; CHALLENGE_LEN]) -> Result<Received<M>, Rejected> {
        let got = self.decode_any(frame, challenge)?;
        match got.msg {
            Body::Msg(msg) => Ok(Received { from: got.from, inc: got.inc, seq: got.seq, msg }),
            Body::Control(c) => Err(Rejected::new(
                RejectReason::UnknownKind,
                format!("expected a message, got a transport control frame (kind {})", c.kind()),
            )),
        }
    }

    /// Checks a frame and decodes what it carries. Checks, in order:
    /// length, magic, version, cluster, sender, MAC flag, MAC, kind,
    /// payload, and that the payload is of the kind the header announces.
    /// Never panics.
    pub fn decode_any(&self, frame: &[u8], challenge: &[u8; CHALLENGE_LEN]) -> Result<Received<Body<M>>, Rejected> {
        if frame.len() > self.max_frame {
            return Err(Rejected::new(
                RejectReason::Oversized,
                format!("expected at most {} bytes, got a frame of {}", self.max_frame, frame.len()),
            ));
        }
        let h = Header::decode(frame, self.cluster)?;
        if !self.members.contains(h.sender) {
            let ids: Vec<String> = self.members.ids().map(|id| id.to_string()).collect();
            return Err(Rejected::new(
                RejectReason::UnknownSender,
                format!("expected a member ({}), got sender {}", ids.join(", "), h.sender),
            ));
        }
        let (header, body) = frame.split_at(HEADER_LEN);
        let payload = match (&self.key, h.has_mac()) {
            (None, false) => body,
            (Some(key), true) => {
                let Some((payload, tag)) = body.split_last_chunk::<TAG_LEN>() else {
                    return Err(Rejected::new(
                        RejectReason::Truncated,
                        format!("expected a {TAG_LEN}-byte MAC tag, got {} bytes after the header", body.len()),
                    ));
                };
                if !key.verify(challenge, header, payload, tag) {
                    return Err(Rejected::new(
                        RejectReason::Auth,
                        format!("MAC from {} does not verify (different cluster key, corrupted or replayed)", h.sender),
                    ));
                }
                payload
            }
            (Some(_), false) => {
                return Err(Rejected::new(
                    RejectReason::Auth,
                    format!("expected a MAC (cluster key configured), got an unauthenticated frame from {}", h.sender),
                ))
            }
            (None, true) => {
                return Err(Rejected::new(
                    RejectReason::Auth,
                    format!(
                        "expected no MAC (no cluster key configured), got an authenticated frame from {}",
                        h.sender
                    ),
                ))
            }
        };
        let msg = if h.kind >= CONTROL_KIND_BASE {
            Body::Control(decode_control(h.kind, payload)?)
        } else {
            Body::Msg(decode_payload::<M>(h.kind, payload)?)
        };
        Ok(Received { from: h.sender, inc: h.incarnation, seq: h.seq, msg })
    }
}

/// Decodes a control payload announced as `kind`, like [`decode_payload`].
fn decode_control(kind: u16, payload: &[u8]) -> Result<Control, Rejected> {
    let Some(name) = Control::kind_name(kind) else {
        return Err(Rejected::new(
            RejectReason::UnknownKind,
            format!("expected a known message or control kind, got kind {kind}"),
        ));
    };
    let c: Control = codec::decode(payload)
        .map_err(|e| Rejected::new(RejectReason::Decode, format!("payload of kind {kind} ({name}): {e}")))?;
    if c.kind() != kind {
        return Err(Rejected::new(
            RejectReason::Decode,
            format!("expected a payload of kind {kind} ({name}) as the header says, got kind {}", c.kind()),
        ));
    }
    Ok(c)
}

/// Decodes a payload announced as `kind`: the kind must exist, the bytes
/// must decode, and the result must be of that kind.
fn decode_payload<M: Message>(kind: u16, payload: &[u8]) -> Result<M, Rejected> {
    let Some(name) = M::kind_name(kind) else {
        return Err(Rejected::new(
            RejectReason::UnknownKind,
            format!("expected a known message kind, got kind {kind}"),
        ));
    };
    let msg: M = codec::decode(payload)
        .map_err(|e| Rejected::new(RejectReason::Decode, format!("payload of kind {kind} ({name}): {e}")))?;
    let got = msg.kind();
    if got != kind {
        return Err(Rejected::new(
            RejectReason::Decode,
            format!(
                "expected a payload of kind {kind} ({name}) as the header says, got kind {got} ({})",
                M::kind_name(got).unwrap_or("?")
            ),
        ));
    }
    Ok(msg)
}

/// The stream framing shared by peer TCP and the client API: each frame is
/// a 4-byte big-endian length, then that many bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LengthPrefixed {
    max_frame: usize,
}

impl LengthPrefixed {
    /// Framing that refuses frames longer than `max_frame` (prefix not
    /// counted).
    pub fn new(max_frame: usize) -> Self {
        LengthPrefixed { max_frame }
    }

    /// Writes `frame` with its length prefix.
    fn put(&self, frame: &[u8], dst: &mut BytesMut) -> Result<(), EncodeError> {
        let len = u32::try_from(frame.len()).ok().filter(|_| frame.len() <= self.max_frame);
        let Some(len) = len else {
            return Err(EncodeError::TooLarge { size: frame.len(), max: self.max_frame });
        };
        dst.reserve(LENGTH_PREFIX_LEN + frame.len());
        dst.put_u32(len);
        dst.put_slice(frame);
        Ok(())
    }
}

impl Default for LengthPrefixed {
    fn default() -> Self {
        LengthPrefixed::new(DEFAULT_MAX_FRAME)
    }
}

impl Decoder for LengthPrefixed {
    type Item = BytesMut;
    type Error = StreamError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, StreamError> {
        let Some(prefix) = src.first_chunk::<LENGTH_PREFIX_LEN>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*prefix);
        // Compare before converting or reserving: a 4 GiB claim is refused
        // with nothing allocated.
        if u64::from(len) > self.max_frame as u64 {
            return Err(Rejected::new(
                RejectReason::Oversized,
                format!("expected a frame length of at most {}, got a length prefix of {len}", self.max_frame),
            )
            .into());
        }
        let len = len as usize;
        let total = LENGTH_PREFIX_LEN + len;
        if src.len() < total {
            src.reserve(total - src.len());
            return Ok(None);
        }
        src.advance(LENGTH_PREFIX_LEN);
        Ok(Some(src.split_to(len)))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, StreamError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => {
                let detail = match src.first_chunk::<LENGTH_PREFIX_LEN>() {
                    Some(p) => format!(
                        "connection closed mid-frame: expected {} bytes, got {}",
                        u32::from_be_bytes(*p),
                        src.len() - LENGTH_PREFIX_LEN
                    ),
                    None => format!(
                        "connection closed mid-frame: expected a {LENGTH_PREFIX_LEN}-byte length prefix, got {} bytes",
                        src.len()
                    ),
                };
                Err(Rejected::new(RejectReason::Truncated, detail).into())
            }
        }
    }
}

impl Encoder<Bytes> for LengthPrefixed {
    type Error = StreamError;

    fn encode(&mut self, frame: Bytes, dst: &mut BytesMut) -> Result<(), StreamError> {
        Ok(self.put(&frame, dst)?)
    }
}

/// The local client API codec: decodes `In` (requests at the daemon,
/// replies at ftctl) and encodes `Out`.
#[derive(Debug)]
pub struct ClientCodec<In, Out> {
    frames: LengthPrefixed,
    _types: PhantomData<fn(Out) -> In>,
}

impl<In, Out> Clone for ClientCodec<In, Out> {
    fn clone(&self) -> Self {
        ClientCodec { frames: self.frames, _types: PhantomData }
    }
}

impl<In: Message, Out: Message> Default for ClientCodec<In, Out> {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME)
    }
}

impl<In: Message, Out: Message> ClientCodec<In, Out> {
    /// A codec refusing frames longer than `max_frame` (prefix not counted).
    pub fn new(max_frame: usize) -> Self {
        ClientCodec { frames: LengthPrefixed::new(max_frame), _types: PhantomData }
    }

    /// Checks and decodes one client frame body (without length prefix):
    /// length, magic, version, kind, payload.
    pub fn decode_body(body: &[u8]) -> Result<In, Rejected> {
        let Some(head) = body.first_chunk::<CLIENT_HEADER_LEN>() else {
            return Err(Rejected::new(
                RejectReason::Truncated,
                format!("expected a {CLIENT_HEADER_LEN}-byte client header, got {} bytes", body.len()),
            ));
        };
        let magic = [head[0], head[1], head[2], head[3]];
        if magic != CLIENT_MAGIC {
            return Err(Rejected::new(
                RejectReason::BadMagic,
                format!("expected client magic \"{}\", got \"{}\"", CLIENT_MAGIC.escape_ascii(), magic.escape_ascii()),
            ));
        }
        if head[4] != VERSION {
            return Err(Rejected::new(
                RejectReason::Version,
                format!("expected client API version {VERSION}, got {}", head[4]),
            ));
        }
        let kind = u16::from_be_bytes([head[5], head[6]]);
        decode_payload(kind, &body[CLIENT_HEADER_LEN..])
    }

    /// Builds one client frame body (without length prefix).
    pub fn encode_body(msg: &Out) -> Result<Vec<u8>, EncodeError> {
        let payload = codec::encode(msg)?;
        let mut body = Vec::with_capacity(CLIENT_HEADER_LEN + payload.len());
        body.extend_from_slice(&CLIENT_MAGIC);
        body.push(VERSION);
        body.extend_from_slice(&msg.kind().to_be_bytes());
        body.extend_from_slice(&payload);
        Ok(body)
    }
}

impl<In: Message, Out: Message> Decoder for ClientCodec<In, Out> {
    type Item = In;
    type Error = StreamError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, StreamError> {
        match self.frames.decode(src)? {
            Some(body) => Ok(Some(Self::decode_body(&body)?)),
            None => Ok(None),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<In>, StreamError> {
        match self.frames.decode_eof(src)? {
            Some(body) => Ok(Some(Self::decode_body(&body)?)),
            None => Ok(None),
        }
    }
}

impl<In: Message, Out: Message> Encoder<Out> for ClientCodec<In, Out> {
    type Error = StreamError;

    fn encode(&mut self, msg: Out, dst: &mut BytesMut) -> Result<(), StreamError> {
        let body = Self::encode_body(&msg)?;
        Ok(self.frames.put(&body, dst)?)
    }
}

#[cfg(test)]
mod tests;
