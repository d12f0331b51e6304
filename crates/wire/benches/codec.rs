//! `cargo bench -p wire --bench codec`: encoding and decoding one frame.
//!
//! - `peer/{encode,decode}/{mac,plain}`: a token hand-off between two nodes
//!   of a 3-node cluster ([`PeerCodec`]: the 32-byte header, the postcard
//!   payload and, with a cluster key, the 32-byte blake3 MAC over the
//!   connection's challenge; decoding runs every check the transports run).
//!   `mac` is what a cluster with `key_file` sends; `plain` isolates the
//!   MAC's cost.
//! - `client/{encode,decode}`: the daemon's side of the local client API
//!   ([`ClientCodec`] with its length prefix): encoding a `Granted` reply,
//!   decoding an `Acquire` request.
//!
//! `wire` is generic over the message type and depends on no daemon, so the
//! messages are local copies with the shape (hence the postcard encoding)
//! of ntmutexd's `Msg` and lockservice's `LockRequest` / `LockReply`.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use membership::{Incarnation, Membership, NodeId};
use serde::{Deserialize, Serialize};
use tokio_util::codec::{Decoder, Encoder};
use wire::{
    auth::{CHALLENGE_LEN, TAG_LEN},
    header::HEADER_LEN,
    ClientCodec, ClusterKey, PeerCodec, Received,
};

/// ntmutexd's `Msg`: the sender's epoch, then the message proper.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PeerMsg {
    epoch: u64,
    body: Body,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Body {
    Request { requester: NodeId, seq: u64, hops: u32 },
    Token { epoch: u64, counter: u64, pos: u64 },
    Commit { pos: Option<u64>, preds: Vec<NodeId>, seq: u64, origin: (NodeId, u64) },
}
ftcore::message_kinds!(Body { Request => "request", Token => "token", Commit => "commit" });

impl ftcore::Message for PeerMsg {
    fn kind(&self) -> u16 {
        self.body.kind()
    }
    fn kind_name(kind: u16) -> Option<&'static str> {
        Body::kind_name(kind)
    }
}

/// lockservice's `LockRequest`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum LockRequest {
    Acquire { timeout_ms: u64 },
    Release,
}
ftcore::message_kinds!(LockRequest { Acquire => "acquire", Release => "release" });

/// lockservice's `LockReply`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum LockReply {
    Granted { fence: u128 },
    TimedOut,
    Released,
    LockLost { reason: String },
    Refused { reason: String },
}
ftcore::message_kinds!(LockReply {
    Granted => "granted",
    TimedOut => "timed_out",
    Released => "released",
    LockLost => "lock_lost",
    Refused => "refused",
});

const CLUSTER: u32 = 7;
const INC: Incarnation = Incarnation(3);
/// A TCP connection's challenge (the acceptor's nonce).
const CHALLENGE: [u8; CHALLENGE_LEN] = [0x5a; CHALLENGE_LEN];

/// The token n1 hands to n2 in epoch 2¹⁰ (round 1, slot 0), grant 41,
/// position 7: realistic varint sizes, not all-small values.
fn token() -> PeerMsg {
    let epoch = 1 << 10;
    PeerMsg { epoch, body: Body::Token { epoch, counter: 41, pos: 7 } }
}

fn peer(c: &mut Criterion) {
    let members = Membership::of_size(3);
    let mut g = c.benchmark_group("peer");
    for (label, key) in [("mac", Some(ClusterKey::from_bytes([0x17; 32]))), ("plain", None)] {
        let tx = PeerCodec::<PeerMsg>::new(CLUSTER, NodeId(1), members.clone(), key.clone());
        let rx = PeerCodec::<PeerMsg>::new(CLUSTER, NodeId(2), members.clone(), key.clone());
        let msg = token();
        let seq = 1_000;
        let frame = tx.encode(INC, seq, &CHALLENGE, &msg).expect("encodes");
        // The real work, checked once: a whole frame (MAC included when
        // keyed) that the receiver accepts as the same message.
        let tag = if key.is_some() { TAG_LEN } else { 0 };
        assert!(frame.len() > HEADER_LEN + tag, "frame of {} bytes has no payload", frame.len());
        let got = rx.decode(&frame, &CHALLENGE).expect("the receiver accepts it");
        assert_eq!(got, Received { from: NodeId(1), inc: INC, seq, msg: msg.clone() });
        if key.is_some() {
            let mut forged = frame.to_vec();
            *forged.last_mut().unwrap() ^= 1;
            assert!(rx.decode(&forged, &CHALLENGE).is_err(), "the MAC is checked");
        }

        g.throughput(Throughput::Bytes(frame.len() as u64));
        g.bench_function(format!("encode/{label}"), |b| {
            b.iter(|| tx.encode(INC, black_box(seq), &CHALLENGE, black_box(&msg)).unwrap())
        });
        g.bench_function(format!("decode/{label}"), |b| b.iter(|| rx.decode(black_box(&frame), &CHALLENGE).unwrap()));
    }
    g.finish();
}

/// The daemon's codec: decodes requests, encodes replies.
type DaemonCodec = ClientCodec<LockRequest, LockReply>;
/// ftctl's: the other way round.
type CtlCodec = ClientCodec<LockReply, LockRequest>;

fn client(c: &mut Criterion) {
    let mut g = c.benchmark_group("client");

    let reply = LockReply::Granted { fence: (1u128 << 74) | 41 };
    let mut daemon = DaemonCodec::default();
    let mut out = BytesMut::with_capacity(64);
    daemon.encode(reply.clone(), &mut out).expect("encodes");
    let mut ctl = CtlCodec::default();
    assert_eq!(ctl.decode(&mut out.clone()).expect("valid frame"), Some(reply.clone()));
    g.throughput(Throughput::Bytes(out.len() as u64));
    g.bench_function("encode", |b| {
        b.iter(|| {
            out.clear();
            daemon.encode(black_box(reply.clone()), &mut out).unwrap();
        })
    });

    let request = LockRequest::Acquire { timeout_ms: 30_000 };
    let mut frame = BytesMut::new();
    ctl.encode(request.clone(), &mut frame).expect("encodes");
    assert_eq!(daemon.decode(&mut frame.clone()).expect("valid frame"), Some(request));
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_function("decode", |b| {
        // Decoding consumes the buffer: each iteration gets a fresh copy,
        // made outside the timed part.
        b.iter_batched_ref(|| frame.clone(), |src| daemon.decode(src).unwrap(), BatchSize::SmallInput)
    });
    g.finish();
}

criterion_group!(benches, peer, client);
criterion_main!(benches);
