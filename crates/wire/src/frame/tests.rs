use serde::{Deserialize, Serialize};

use super::*;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum TestMsg {
    Ping(u64),
    Data { id: u32, body: Vec<u8> },
    Stop,
}
ftcore::message_kinds!(TestMsg { Ping => "ping", Data => "data", Stop => "stop" });

const CLUSTER: u32 = 7;
const CH: [u8; 16] = [9; 16];

fn key(b: u8) -> ClusterKey {
    ClusterKey::from_bytes([b; 32])
}

fn codec(me: u32, key: Option<ClusterKey>) -> PeerCodec<TestMsg> {
    PeerCodec::new(CLUSTER, NodeId(me), Membership::of_size(3), key)
}

fn header(kind: u16) -> Header {
    Header { flags: 0, cluster: CLUSTER, sender: NodeId(1), incarnation: Incarnation(4), seq: 0, kind }
}

/// A frame built by hand, MAC'd with `key` over `CH` when given.
fn raw(mut h: Header, payload: &[u8], key: Option<&ClusterKey>) -> Vec<u8> {
    if key.is_some() {
        h.flags |= FLAG_MAC;
    }
    let hb = h.encode();
    let mut f = hb.to_vec();
    f.extend_from_slice(payload);
    if let Some(k) = key {
        f.extend_from_slice(&k.tag(&CH, &hb, payload));
    }
    f
}

fn rejected(r: Result<Received<TestMsg>, Rejected>) -> Rejected {
    r.expect_err("frame should be rejected")
}

fn data() -> TestMsg {
    TestMsg::Data { id: 3, body: vec![1, 2, 3] }
}

#[test]
fn labels_are_snake_case_and_distinct() {
    let labels: Vec<&str> = RejectReason::ALL.iter().map(|r| r.label()).collect();
    assert_eq!(
        labels,
        [
            "bad_magic",
            "version",
            "cluster",
            "unknown_sender",
            "auth",
            "oversized",
            "truncated",
            "unknown_kind",
            "decode",
            "replay",
            "stale_life"
        ]
    );
}

#[test]
fn round_trips_without_key() {
    let (a, b) = (codec(1, None), codec(2, None));
    let f = a.encode(Incarnation(4), 17, &CH, &data()).unwrap();
    assert_eq!(f.len(), HEADER_LEN + codec::encode(&data()).unwrap().len());
    let r = b.decode(&f, &[0; 16]).unwrap(); // the challenge only matters with a key
    assert_eq!(r, Received { from: NodeId(1), inc: Incarnation(4), seq: 17, msg: data() });
}

#[test]
fn round_trips_with_key() {
    let (a, b) = (codec(1, Some(key(1))), codec(2, Some(key(1))));
    let f = a.encode(Incarnation(4), 0, &CH, &TestMsg::Stop).unwrap();
    assert_eq!(f.len(), HEADER_LEN + 1 + TAG_LEN);
    assert_eq!(b.decode(&f, &CH).unwrap().msg, TestMsg::Stop);
}

#[test]
fn rejects_truncated_header() {
    let f = codec(1, None).encode(Incarnation(4), 0, &CH, &TestMsg::Stop).unwrap();
    for len in [0, 1, 4, HEADER_LEN - 1] {
        let e = rejected(codec(2, None).decode(&f[..len], &CH));
        assert_eq!(e.reason, RejectReason::Truncated, "{len}: {e}");
        assert_eq!(e.detail, format!("truncated header: expected 32 bytes, got {len}"));
    }
}

#[test]
fn rejects_oversized() {
    let big = TestMsg::Data { id: 1, body: vec![0; 200] };
    let small = codec(2, None).with_max_frame(100);
    assert_eq!(
        small.encode(Incarnation(1), 0, &CH, &big),
        Err(EncodeError::TooLarge { size: HEADER_LEN + 1 + 1 + 2 + 200, max: 100 })
    );
    let f = codec(1, None).encode(Incarnation(1), 0, &CH, &big).unwrap();
    let e = rejected(small.decode(&f, &CH));
    assert_eq!(e.reason, RejectReason::Oversized);
    assert_eq!(e.detail, format!("expected at most 100 bytes, got a frame of {}", f.len()));
}

#[test]
fn rejects_bad_magic() {
    let mut f = raw(header(0), &codec::encode(&TestMsg::Ping(1)).unwrap(), None);
    f[..4].copy_from_slice(b"HTTP");
    let e = rejected(codec(2, None).decode(&f, &CH));
    assert_eq!(e.reason, RejectReason::BadMagic);
    assert_eq!(e.detail, "bad magic: expected \"FTCD\", got \"HTTP\"");
}

#[test]
fn rejects_wrong_version_and_unknown_flags() {
    let mut f = raw(header(0), &codec::encode(&TestMsg::Ping(1)).unwrap(), None);
    f[4] = 2;
    let e = rejected(codec(2, None).decode(&f, &CH));
    assert_eq!(e.reason, RejectReason::Version);
    assert_eq!(e.detail, "unsupported wire version: expected 1, got 2");
    f[4] = 1;
    f[5] = 0x04;
    assert_eq!(rejected(codec(2, None).decode(&f, &CH)).reason, RejectReason::Version);
}

#[test]
fn rejects_wrong_cluster() {
    let other = PeerCodec::<TestMsg>::new(9, NodeId(1), Membership::of_size(3), None);
    let f = other.encode(Incarnation(1), 0, &CH, &TestMsg::Stop).unwrap();
    let e = rejected(codec(2, None).decode(&f, &CH));
    assert_eq!(e.reason, RejectReason::Cluster);
    assert_eq!(e.detail, "wrong cluster: expected cluster 7, got 9");
}

#[test]
fn rejects_unknown_sender() {
    let stranger = PeerCodec::<TestMsg>::new(CLUSTER, NodeId(4), Membership::of_size(4), None);
    let f = stranger.encode(Incarnation(1), 0, &CH, &TestMsg::Stop).unwrap();
    let e = rejected(codec(2, None).decode(&f, &CH));
    assert_eq!(e.reason, RejectReason::UnknownSender);
    assert_eq!(e.detail, "expected a member (n1, n2, n3), got sender n4");
}

#[test]
fn accepts_any_member_including_self() {
    let f = codec(2, None).encode(Incarnation(1), 0, &CH, &TestMsg::Stop).unwrap();
    assert_eq!(codec(2, None).decode(&f, &CH).unwrap().from, NodeId(2));
}

#[test]
fn rejects_missing_mac() {
    let f = codec(1, None).encode(Incarnation(1), 0, &CH, &TestMsg::Stop).unwrap();
    let e = rejected(codec(2, Some(key(1))).decode(&f, &CH));
    assert_eq!(e.reason, RejectReason::Auth);
    assert!(e.detail.starts_with("expected a MAC"), "{e}");
}

#[test]
fn rejects_unexpected_mac() {
    let f = codec(1, Some(key(1))).encode(Incarnation(1), 0, &CH, &TestMsg::Stop).unwrap();
    let e = rejected(codec(2, None).decode(&f, &CH));
    assert_eq!(e.reason, RejectReason::Auth);
    assert!(e.detail.starts_with("expected no MAC"), "{e}");
}

#[test]
fn rejects_bad_mac() {
    let f = codec(1, Some(key(1))).encode(Incarnation(1), 0, &CH, &data()).unwrap();
    // Another key.
    let e = rejected(codec(2, Some(key(2))).decode(&f, &CH));
    assert_eq!(e.reason, RejectReason::Auth);
    assert!(e.detail.contains("does not verify"), "{e}");
    // Same key, another connection's challenge: a replay.
    assert_eq!(rejected(codec(2, Some(key(1))).decode(&f, &[0; 16])).reason, RejectReason::Auth);
    // A tampered payload byte.
    let mut g = f.to_vec();
    g[HEADER_LEN + 2] ^= 0x40;
    assert_eq!(rejected(codec(2, Some(key(1))).decode(&g, &CH)).reason, RejectReason::Auth);
}

#[test]
fn rejects_truncated_tag() {
    let f = codec(1, Some(key(1))).encode(Incarnation(1), 0, &CH, &TestMsg::Stop).unwrap();
    let cut = &f[..HEADER_LEN + TAG_LEN - 1];
    let e = rejected(codec(2, Some(key(1))).decode(cut, &CH));
    assert_eq!(e.reason, RejectReason::Truncated);
    assert_eq!(e.detail, "expected a 32-byte MAC tag, got 31 bytes after the header");
}

#[test]
fn rejects_unknown_kind() {
    for k in [None, Some(key(1))] {
        let f = raw(header(3), &codec::encode(&TestMsg::Stop).unwrap(), k.as_ref());
        let e = rejected(codec(2, k).decode(&f, &CH));
        assert_eq!(e.reason, RejectReason::UnknownKind);
        assert_eq!(e.detail, "expected a known message kind, got kind 3");
    }
}

#[test]
fn rejects_undecodable_payload() {
    // Kind 1 (data) announced, payload cut short.
    let payload = codec::encode(&data()).unwrap();
    let f = raw(header(1), &payload[..payload.len() - 1], None);
    let e = rejected(codec(2, None).decode(&f, &CH));
    assert_eq!(e.reason, RejectReason::Decode);
    assert!(e.detail.starts_with("payload of kind 1 (data): cannot decode payload"), "{e}");
    // Trailing garbage after a valid payload.
    let mut long = payload.clone();
    long.push(0);
    let e = rejected(codec(2, None).decode(&raw(header(1), &long, None), &CH));
    assert_eq!(e.reason, RejectReason::Decode);
    assert!(e.detail.contains("1 trailing bytes"), "{e}");
}

#[test]
fn rejects_kind_mismatch() {
    let f = raw(header(0), &codec::encode(&TestMsg::Stop).unwrap(), Some(&key(1)));
    let e = rejected(codec(2, Some(key(1))).decode(&f, &CH));
    assert_eq!(e.reason, RejectReason::Decode);
    assert_eq!(e.detail, "expected a payload of kind 0 (ping) as the header says, got kind 2 (stop)");
}

#[test]
fn length_prefixed_waits_for_whole_frames() {
    let mut c = LengthPrefixed::new(16);
    let mut buf = BytesMut::new();
    c.encode(Bytes::from_static(b"hello"), &mut buf).unwrap();
    c.encode(Bytes::from_static(b""), &mut buf).unwrap();
    assert_eq!(&buf[..], b"\0\0\0\x05hello\0\0\0\0");
    let mut partial = buf.split_to(6);
    assert!(c.decode(&mut partial).unwrap().is_none());
    partial.unsplit(buf);
    assert_eq!(&c.decode(&mut partial).unwrap().unwrap()[..], b"hello");
    assert_eq!(&c.decode(&mut partial).unwrap().unwrap()[..], b"");
    assert!(c.decode(&mut partial).unwrap().is_none());
    assert!(c.decode_eof(&mut partial).unwrap().is_none());
}

#[test]
fn length_prefixed_refuses_long_frames_both_ways() {
    let mut c = LengthPrefixed::new(16);
    let mut buf = BytesMut::new();
    assert!(matches!(
        c.encode(Bytes::from(vec![0; 17]), &mut buf),
        Err(StreamError::Encode(EncodeError::TooLarge { size: 17, max: 16 }))
    ));
    let mut src = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
    match c.decode(&mut src) {
        Err(StreamError::Rejected(r)) => {
            assert_eq!(r.reason, RejectReason::Oversized);
            assert_eq!(r.detail, "expected a frame length of at most 16, got a length prefix of 4294967295");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(src.capacity() < 64);
}

#[test]
fn length_prefixed_reports_truncation_at_eof() {
    let mut c = LengthPrefixed::new(16);
    let mut src = BytesMut::from(&b"\0\0\0\x08abc"[..]);
    match c.decode_eof(&mut src) {
        Err(StreamError::Rejected(r)) => {
            assert_eq!(r.reason, RejectReason::Truncated);
            assert_eq!(r.detail, "connection closed mid-frame: expected 8 bytes, got 3");
        }
        other => panic!("unexpected {other:?}"),
    }
    let mut src = BytesMut::from(&b"\0\0"[..]);
    assert!(matches!(
        c.decode_eof(&mut src),
        Err(StreamError::Rejected(Rejected { reason: RejectReason::Truncated, .. }))
    ));
}

type Client = ClientCodec<TestMsg, TestMsg>;

fn client_reject(bytes: &[u8]) -> Rejected {
    let mut src = BytesMut::from(bytes);
    match Client::default().decode_eof(&mut src) {
        Err(StreamError::Rejected(r)) => r,
        other => panic!("unexpected {other:?}"),
    }
}

fn prefixed(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

#[test]
fn client_codec_round_trips() {
    let mut c = Client::default();
    let mut buf = BytesMut::new();
    c.encode(data(), &mut buf).unwrap();
    c.encode(TestMsg::Ping(u64::MAX), &mut buf).unwrap();
    assert_eq!(&buf[4..11], b"FTCL\x01\x00\x01");
    assert_eq!(c.decode(&mut buf).unwrap(), Some(data()));
    assert_eq!(c.decode(&mut buf).unwrap(), Some(TestMsg::Ping(u64::MAX)));
    assert_eq!(c.decode(&mut buf).unwrap(), None);
}

#[test]
fn client_codec_rejects_bad_frames() {
    let good = Client::encode_body(&TestMsg::Stop).unwrap();

    let e = client_reject(&prefixed(&good[..5]));
    assert_eq!(
        (e.reason, e.detail.as_str()),
        (RejectReason::Truncated, "expected a 7-byte client header, got 5 bytes")
    );

    let mut b = good.clone();
    b[..4].copy_from_slice(b"FTCD");
    let e = client_reject(&prefixed(&b));
    assert_eq!((e.reason, e.detail.as_str()), (RejectReason::BadMagic, "expected client magic \"FTCL\", got \"FTCD\""));

    let mut b = good.clone();
    b[4] = 0;
    let e = client_reject(&prefixed(&b));
    assert_eq!((e.reason, e.detail.as_str()), (RejectReason::Version, "expected client API version 1, got 0"));

    let mut b = good.clone();
    b[6] = 9;
    assert_eq!(client_reject(&prefixed(&b)).reason, RejectReason::UnknownKind);

    let mut b = good.clone();
    b[6] = 0;
    assert_eq!(client_reject(&prefixed(&b)).reason, RejectReason::Decode);

    let mut b = good;
    b.push(1);
    assert_eq!(client_reject(&prefixed(&b)).reason, RejectReason::Decode);

    let e = client_reject(&[0xff, 0xff, 0xff, 0xff, 0]);
    assert_eq!(e.reason, RejectReason::Oversized);
}

#[test]
fn client_codec_refuses_oversized_outgoing() {
    let mut c = ClientCodec::<TestMsg, TestMsg>::new(10);
    let mut buf = BytesMut::new();
    assert!(matches!(
        c.encode(TestMsg::Data { id: 0, body: vec![0; 10] }, &mut buf),
        Err(StreamError::Encode(EncodeError::TooLarge { max: 10, .. }))
    ));
    assert!(buf.is_empty());
}

#[test]
fn control_frames_round_trip_authenticated_and_never_reach_a_core() {
    let k = Some(key(5));
    let (a, b) = (codec(1, k.clone()), codec(2, k));
    for c in [Control::Hello { nonce: 9 }, Control::HelloAck { nonce: u64::MAX }, Control::Keepalive, Control::Goodbye]
    {
        let f = a.encode_control(Incarnation(4), 3, &CH, &c).unwrap();
        let got = b.decode_any(&f, &CH).unwrap();
        assert_eq!((got.from, got.inc, got.seq, got.msg), (NodeId(1), Incarnation(4), 3, Body::Control(c)));
        // Over another challenge the MAC fails, like a message's.
        assert_eq!(b.decode_any(&f, &[0; 16]).unwrap_err().reason, RejectReason::Auth);
        // Where a message is required, a control frame is an unknown kind.
        let r = rejected(b.decode(&f, &CH));
        assert_eq!(r.reason, RejectReason::UnknownKind);
        assert_eq!(r.detail, format!("expected a message, got a transport control frame (kind {})", c.kind()));
    }
    let msg = b.decode_any(&a.encode(Incarnation(4), 0, &CH, &data()).unwrap(), &CH).unwrap();
    assert_eq!(msg.msg, Body::Msg(data()));
}

#[test]
fn unused_control_kinds_and_mismatched_control_payloads_are_refused() {
    let b = codec(2, None);
    let r = b.decode_any(&raw(header(CONTROL_KIND_BASE + 4), &[], None), &CH).unwrap_err();
    assert_eq!(
        (r.reason, r.detail.as_str()),
        (RejectReason::UnknownKind, "expected a known message or control kind, got kind 65284")
    );
    // A Keepalive's payload announced as a Hello.
    let payload = crate::codec::encode(&Control::Keepalive).unwrap();
    let r = b.decode_any(&raw(header(CONTROL_KIND_BASE), &payload, None), &CH).unwrap_err();
    assert_eq!(r.reason, RejectReason::Decode);
}
