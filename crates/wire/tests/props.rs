//! Property tests: decoders never panic, valid frames round-trip, tampering
//! is caught, length claims are refused before allocation.

mod common;

use bytes::BytesMut;
use common::{key, TestMsg, CLUSTER};
use membership::{Incarnation, Membership, NodeId};
use proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};
use wire::{ClientCodec, PeerCodec, RejectReason, StreamError, DEFAULT_MAX_FRAME};

fn peer(me: u32, k: Option<u8>) -> PeerCodec<TestMsg> {
    PeerCodec::new(CLUSTER, NodeId(me), Membership::of_size(3), k.map(key))
}

fn msg() -> impl Strategy<Value = TestMsg> {
    prop_oneof![
        any::<u64>().prop_map(TestMsg::Ping),
        (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..300))
            .prop_map(|(id, body)| TestMsg::Data { id, body }),
        ".{0,40}".prop_map(TestMsg::Text),
        Just(TestMsg::Stop),
    ]
}

/// Bytes that often start like a real frame, to get past the first checks.
fn frame_like() -> impl Strategy<Value = Vec<u8>> {
    let header = (0u8..3, any::<u8>(), 0u32..5, any::<u64>(), any::<u64>(), 0u16..6).prop_map(
        |(flags, _, sender, inc, seq, kind)| {
            let mut h = b"FTCD\x01".to_vec();
            h.push(flags);
            h.extend_from_slice(&CLUSTER.to_be_bytes());
            h.extend_from_slice(&sender.to_be_bytes());
            h.extend_from_slice(&inc.to_be_bytes());
            h.extend_from_slice(&seq.to_be_bytes());
            h.extend_from_slice(&kind.to_be_bytes());
            h
        },
    );
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        (header, proptest::collection::vec(any::<u8>(), 0..120)).prop_map(|(mut h, p)| {
            h.extend_from_slice(&p);
            h
        }),
    ]
}

proptest! {
    #[test]
    fn peer_decode_never_panics(bytes in frame_like(), challenge in any::<[u8; 16]>()) {
        for k in [None, Some(1)] {
            let _ = peer(2, k).decode(&bytes, &challenge);
        }
    }

    #[test]
    fn client_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut c = ClientCodec::<TestMsg, TestMsg>::default();
        let mut src = BytesMut::from(&bytes[..]);
        loop {
            match c.decode(&mut src) {
                Ok(Some(_)) => continue,
                Ok(None) => { let _ = c.decode_eof(&mut src); break; }
                Err(_) => break,
            }
        }
    }

    #[test]
    fn peer_frames_round_trip(m in msg(), inc in any::<u64>(), seq in any::<u64>(),
                              challenge in any::<[u8; 16]>(), keyed in any::<bool>()) {
        let k = keyed.then_some(3);
        let f = peer(1, k).encode(Incarnation(inc), seq, &challenge, &m).unwrap();
        let r = peer(2, k).decode(&f, &challenge).unwrap();
        prop_assert_eq!(r.from, NodeId(1));
        prop_assert_eq!(r.inc, Incarnation(inc));
        prop_assert_eq!(r.seq, seq);
        prop_assert_eq!(r.msg, m);
    }

    #[test]
    fn client_frames_round_trip(ms in proptest::collection::vec(msg(), 1..5)) {
        let mut c = ClientCodec::<TestMsg, TestMsg>::default();
        let mut buf = BytesMut::new();
        for m in &ms {
            c.encode(m.clone(), &mut buf).unwrap();
        }
        for m in ms {
            prop_assert_eq!(c.decode(&mut buf).unwrap(), Some(m));
        }
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn any_flipped_byte_of_an_authenticated_frame_is_rejected(
        m in msg(), idx in any::<prop::sample::Index>(), mask in 1u8..=255,
    ) {
        let challenge = [5u8; 16];
        let f = peer(1, Some(3)).encode(Incarnation(9), 4, &challenge, &m).unwrap();
        let mut g = f.to_vec();
        g[idx.index(f.len())] ^= mask;
        prop_assert!(peer(2, Some(3)).decode(&g, &challenge).is_err());
    }

    #[test]
    fn huge_length_claims_are_refused_without_allocating(
        len in (DEFAULT_MAX_FRAME as u32 + 1)..=u32::MAX, tail in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let mut c = ClientCodec::<TestMsg, TestMsg>::default();
        let mut src = BytesMut::new();
        src.extend_from_slice(&len.to_be_bytes());
        src.extend_from_slice(&tail);
        let before = src.capacity();
        match c.decode(&mut src) {
            Err(StreamError::Rejected(r)) => prop_assert_eq!(r.reason, RejectReason::Oversized),
            other => prop_assert!(false, "expected oversized, got {:?}", other),
        }
        prop_assert_eq!(src.capacity(), before);
        prop_assert!(src.capacity() < 1024);
    }
}
