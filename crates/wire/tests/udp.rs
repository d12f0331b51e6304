//! The UDP transport on loopback (foundation.md, Joining, handshakes and
//! limits): the Hello / HelloAck exchange that opens a link, datagrams
//! addressed to one life of one receiver, numbering from 1 per (destination,
//! both lives), and the refusals: repeats, older lives of the sender,
//! datagrams for another life of the receiver, forgeries, garbage.

mod common;

use std::{net::SocketAddr, time::Duration};

use bytes::BufMut;
use common::*;
use membership::{Incarnation, NodeId};
use tokio::{net::UdpSocket, sync::mpsc};
use wire::{udp_challenge, Body, Control, Incoming, PeerCodec, Received, Transport, UdpTransport, UDP_PREFIX_LEN};

type Rx = mpsc::Receiver<Incoming<TestMsg>>;

async fn udp(cfg: wire::TransportConfig) -> (UdpTransport<TestMsg>, Rx) {
    let (tx, rx) = mpsc::channel(64);
    (UdpTransport::bind(cfg, tx).await.unwrap(), rx)
}

/// A hand-driven member: a raw socket at the member's configured address,
/// framing as that member would.
struct Raw {
    sock: UdpSocket,
    codec: PeerCodec<TestMsg>,
}

impl Raw {
    async fn new(id: u32, addrs: &[SocketAddr], k: Option<u8>) -> Raw {
        let sock = UdpSocket::bind(addrs[id as usize - 1]).await.unwrap();
        Raw { sock, codec: PeerCodec::new(CLUSTER, NodeId(id), members(addrs), k.map(key)) }
    }

    fn dgram(to: u32, to_life: u64, frame: &[u8]) -> Vec<u8> {
        let mut d = Vec::with_capacity(UDP_PREFIX_LEN + frame.len());
        d.put_u32(to);
        d.put_u64(to_life);
        d.put_slice(frame);
        d
    }

    /// A protocol datagram from life `inc`, numbered `seq`, for `to`'s life `to_life`.
    fn msg(&self, to: u32, to_life: u64, inc: u64, seq: u64, m: &TestMsg) -> Vec<u8> {
        let ch = udp_challenge(NodeId(to), Incarnation(to_life));
        Self::dgram(to, to_life, &self.codec.encode(Incarnation(inc), seq, &ch, m).unwrap())
    }

    fn control(&self, to: u32, to_life: u64, inc: u64, c: Control) -> Vec<u8> {
        let ch = udp_challenge(NodeId(to), Incarnation(to_life));
        Self::dgram(to, to_life, &self.codec.encode_control(Incarnation(inc), 0, &ch, &c).unwrap())
    }

    async fn send(&self, d: &[u8], to: SocketAddr) {
        self.sock.send_to(d, to).await.unwrap();
    }

    /// The next datagram: its address (receiver, receiver's life) and frame.
    async fn recv(&self) -> (u32, u64, Received<Body<TestMsg>>) {
        let mut buf = vec![0u8; 70_000];
        let (n, _) = tokio::time::timeout(WAIT, self.sock.recv_from(&mut buf)).await.expect("a datagram").unwrap();
        let to = u32::from_be_bytes(buf[..4].try_into().unwrap());
        let life = u64::from_be_bytes(buf[4..12].try_into().unwrap());
        let ch = udp_challenge(NodeId(to), Incarnation(life));
        (to, life, self.codec.decode_any(&buf[UDP_PREFIX_LEN..n], &ch).unwrap())
    }

    /// The next datagram that is not a Hello.
    async fn recv_not_hello(&self) -> (u32, u64, Received<Body<TestMsg>>) {
        loop {
            let got = self.recv().await;
            if !matches!(got.2.msg, Body::Control(Control::Hello { .. })) {
                return got;
            }
        }
    }

    /// Waits for a Hello and answers it from life `inc`; returns the
    /// Hello's address life.
    async fn answer_hello(&self, inc: u64, to: SocketAddr) -> u64 {
        loop {
            let (_, life, got) = self.recv().await;
            if let Body::Control(Control::Hello { nonce }) = got.msg {
                let ack = self.control(got.from.0, got.inc.0, inc, Control::HelloAck { nonce });
                self.send(&ack, to).await;
                return life;
            }
        }
    }
}

#[tokio::test]
async fn round_trip_with_and_without_a_key() {
    for k in [None, Some(4)] {
        let addrs = free_udp_addrs(2);
        let (a, mut rx_a) = udp(config(1, &addrs, k.map(key))).await;
        let (b, mut rx_b) = udp(config(2, &addrs, k.map(key))).await;
        // Sent before either knows the other's life: held, then delivered.
        a.send(NodeId(2), INC, TestMsg::Text("over udp".into())).unwrap();
        assert_eq!(next_msg(&mut rx_b).await, (NodeId(1), INC, TestMsg::Text("over udp".into())));
        b.send(NodeId(1), INC, TestMsg::Ping(9)).unwrap();
        assert_eq!(next_msg(&mut rx_a).await, (NodeId(1 + 1), INC, TestMsg::Ping(9)));
        assert_eq!(b.local_addr(), addrs[1]);
        assert_eq!(a.peer_life(NodeId(2)), Some(INC));
    }
}

#[tokio::test]
async fn a_sender_sends_only_after_a_hello_ack_and_numbers_from_1_per_life() {
    let addrs = free_udp_addrs(2);
    let (a, _rx_a) = udp(config(1, &addrs, Some(key(3)))).await;
    let raw = Raw::new(2, &addrs, Some(3)).await;
    for i in 0..3 {
        a.send(NodeId(2), INC, TestMsg::Ping(i)).unwrap();
    }
    // Before its answer, only Hellos come, addressed to no life in particular.
    let (to, life, hello) = raw.recv().await;
    assert_eq!((to, life, hello.inc), (2, 0, INC));
    assert!(matches!(hello.msg, Body::Control(Control::Hello { .. })), "{hello:?}");
    // A HelloAck with a nonce nobody awaits changes nothing.
    raw.send(&raw.control(1, INC.0, 9, Control::HelloAck { nonce: 12345 }), addrs[0]).await;
    assert_eq!(a.peer_life(NodeId(2)), None);
    assert_eq!(raw.answer_hello(9, addrs[0]).await, 0);
    for i in 0..3 {
        let (to, life, got) = raw.recv_not_hello().await;
        assert_eq!((to, life, got.inc, got.seq, got.msg), (2, 9, INC, i + 1, Body::Msg(TestMsg::Ping(i))));
    }
    assert_eq!(a.peer_life(NodeId(2)), Some(Incarnation(9)));
    // The peer restarts as life 10: its Hello makes `a` answer and relearn.
    raw.send(&raw.control(1, 0, 10, Control::Hello { nonce: 77 }), addrs[0]).await;
    let (_, _, ack) = raw.recv().await;
    assert_eq!((ack.inc, ack.msg), (INC, Body::Control(Control::HelloAck { nonce: 77 })));
    a.send(NodeId(2), INC, TestMsg::Ping(100)).unwrap();
    raw.answer_hello(10, addrs[0]).await;
    let (_, life, got) = raw.recv_not_hello().await;
    assert_eq!((life, got.seq, got.msg), (10, 1, Body::Msg(TestMsg::Ping(100))), "numbering starts over");
}

#[tokio::test]
async fn refuses_repeats_older_lives_other_addresses_forgeries_and_garbage() {
    let addrs = free_udp_addrs(2);
    let mut cfg = config(2, &addrs, Some(key(1)));
    cfg.max_frame = 1000;
    let (b, mut rx_b) = udp(cfg).await;
    let to = b.local_addr();
    let raw = Raw::new(1, &addrs, Some(1)).await;
    let life = INC.0;
    let ping = |inc, seq| raw.msg(2, life, inc, seq, &TestMsg::Ping(seq));

    raw.send(&ping(5, 10), to).await;
    assert_eq!(next_msg(&mut rx_b).await, (NodeId(1), Incarnation(5), TestMsg::Ping(10)));
    raw.send(&ping(5, 10), to).await;
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!((reason, detail.as_str()), ("replay", "from n1: duplicate seq 10 in i5"));
    // Reordered but unseen: accepted. Numbering starts at 1: 0 never is.
    raw.send(&ping(5, 8), to).await;
    assert_eq!(next_msg(&mut rx_b).await.2, TestMsg::Ping(8));
    raw.send(&ping(5, 0), to).await;
    assert_eq!(next_rejection(&mut rx_b).await.0, "replay");

    // A new life of the sender starts over; its old life is then stale.
    raw.send(&ping(6, 1), to).await;
    assert_eq!(next_msg(&mut rx_b).await.1, Incarnation(6));
    raw.send(&ping(5, 11), to).await;
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!((reason, detail.as_str()), ("stale_life", "from n1: stale incarnation: expected i6 or newer, got i5"));

    // Addressed to an older life of the receiver (a datagram captured
    // before it restarted): refused, and answered with the receiver's
    // Hello naming its current life.
    raw.send(&raw.msg(2, life - 1, 6, 2, &TestMsg::Stop), to).await;
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!(
        (reason, detail.as_str()),
        ("stale_life", format!("from n1: addressed to i{}, this node is now {INC}", life - 1).as_str())
    );
    let hello = loop {
        let (to, _, got) = raw.recv().await;
        if let (Body::Control(Control::Hello { .. }), INC) = (&got.msg, got.inc) {
            break (to, got.from);
        }
    };
    assert_eq!(hello, (1, NodeId(2)));
    // The address is under the MAC: moved to the current life, it fails.
    let mut moved = raw.msg(2, life - 1, 6, 3, &TestMsg::Stop);
    moved[4..12].copy_from_slice(&life.to_be_bytes());
    raw.send(&moved, to).await;
    assert_eq!(next_rejection(&mut rx_b).await.0, "auth");
    // For another node (addresses swapped).
    raw.send(&raw.msg(3, life, 6, 4, &TestMsg::Stop), to).await;
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!((reason, detail.as_str()), ("auth", "from n1: addressed to n3, not n2 (peer addresses swapped?)"));

    // Bigger than max_frame (plus the address).
    raw.send(&[0u8; 1000 + UDP_PREFIX_LEN + 1], to).await;
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!((reason, detail.as_str()), ("oversized", "expected at most 1012 bytes, got a larger datagram"));
    // Garbage and forgeries do not stop the receiver.
    raw.send(b"hello", to).await;
    assert_eq!(next_rejection(&mut rx_b).await.0, "truncated");
    raw.send(&Raw::dgram(2, life, b"hello"), to).await;
    assert_eq!(next_rejection(&mut rx_b).await.0, "truncated");
    let forger = PeerCodec::<TestMsg>::new(CLUSTER, NodeId(1), members(&addrs), Some(key(9)));
    let ch = udp_challenge(NodeId(2), INC);
    raw.send(&Raw::dgram(2, life, &forger.encode(Incarnation(7), 1, &ch, &TestMsg::Stop).unwrap()), to).await;
    assert_eq!(next_rejection(&mut rx_b).await.0, "auth");
    raw.send(&ping(6, 5), to).await;
    assert_eq!(next_msg(&mut rx_b).await.2, TestMsg::Ping(5));
}

#[tokio::test]
async fn a_restarted_receiver_is_relearned_and_old_datagrams_do_not_reach_it() {
    let addrs = free_udp_addrs(2);
    let (a, _rx_a) = udp(config(1, &addrs, Some(key(2)))).await;
    let (b, mut rx_b) = udp(config(2, &addrs, Some(key(2)))).await;
    a.send(NodeId(2), INC, TestMsg::Ping(1)).unwrap();
    assert_eq!(next_msg(&mut rx_b).await.2, TestMsg::Ping(1));
    drop(b);
    // Its tasks end (and the port is free) once they are next polled.
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Node 2 comes back as a newer life.
    let mut cfg = config(2, &addrs, Some(key(2)));
    cfg.incarnation = Incarnation(INC.0 + 1);
    let (_b2, mut rx_b2) = udp(cfg).await;
    // Whatever `a` sends before it relearns goes to the old life and is
    // refused; once relearned, it arrives.
    let mut n = 1;
    let got = loop {
        n += 1;
        a.send(NodeId(2), INC, TestMsg::Ping(n)).unwrap();
        match tokio::time::timeout(Duration::from_millis(100), rx_b2.recv()).await {
            Ok(Some(Incoming::Message { msg, .. })) => break msg,
            Ok(Some(Incoming::Rejected { reason, .. })) => assert_eq!(reason.label(), "stale_life"),
            _ => {}
        }
        assert!(n < 50, "node 1 never relearned node 2's life");
    };
    assert!(matches!(got, TestMsg::Ping(_)));
    assert_eq!(a.peer_life(NodeId(2)), Some(Incarnation(INC.0 + 1)));
}

/// Reads events until `from`'s message arrives; returns how many messages
/// of other senders came first.
async fn count_before(rx: &mut Rx, from: NodeId) -> usize {
    let mut before = 0;
    loop {
        match next(rx).await {
            Incoming::Message { from: f, .. } if f == from => return before,
            Incoming::Message { .. } => before += 1,
            Incoming::Rejected { .. } | Incoming::Unreachable { .. } | Incoming::Goodbye { .. } => {}
        }
    }
}

#[tokio::test]
async fn a_flooding_peer_loses_only_its_own_datagrams() {
    let addrs = free_udp_addrs(3);
    let cfg = config(1, &addrs, None);
    let stats = cfg.stats.clone();
    // The owner's channel is short and nobody reads it during the flood.
    let (tx, mut rx) = mpsc::channel(8);
    let a = UdpTransport::<TestMsg>::bind(cfg, tx).await.unwrap();
    let (flooder, _rx2) = udp(config(2, &addrs, None)).await;
    let (quiet, _rx3) = udp(config(3, &addrs, None)).await;
    // Links open (Hello / HelloAck) before the flood.
    flooder.send(NodeId(1), INC, TestMsg::Ping(0)).unwrap();
    quiet.send(NodeId(1), INC, TestMsg::Ping(0)).unwrap();
    for _ in 0..2 {
        assert!(matches!(next(&mut rx).await, Incoming::Message { .. }));
    }
    let mut sent = 0;
    for i in 1..=5000 {
        if flooder.send(NodeId(1), INC, TestMsg::Ping(i)).is_ok() {
            sent += 1;
        }
        if i % 500 == 0 {
            tokio::task::yield_now().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    quiet.send(NodeId(1), INC, TestMsg::Text("me too".into())).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = count_before(&mut rx, NodeId(3)).await;
    // What the owner's channel held (8), the one the merger carried, and
    // at most one more taken in turn: never the flooder's backlog.
    assert!(before <= 10, "{before} of the flooder's {sent} datagrams went first");
    assert!(stats.inbox_full() > 0, "the flooder's overflow was not counted");
    drop(a);
}

#[tokio::test]
async fn chaos_drops_duplicates_and_delays_outgoing_datagrams() {
    let addrs = free_udp_addrs(2);
    let (b, mut rx_b) = udp(config(2, &addrs, Some(key(5)))).await;
    // Everything dropped: nothing arrives (not even a Hello), all counted.
    let mut cfg = config(1, &addrs, Some(key(5)));
    let stats = cfg.stats.clone();
    cfg.chaos = Some(wire::Chaos { drop_rate: 1.0, dup_rate: 0.0, delay: Duration::ZERO });
    let a = UdpTransport::<TestMsg>::bind(cfg, mpsc::channel(8).0).await.unwrap();
    a.send(NodeId(2), INC, TestMsg::Ping(1)).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(rx_b.try_recv().is_err(), "a dropped datagram arrived");
    assert!(stats.chaos_dropped() >= 1);
    drop(a);
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Every datagram twice, each delayed up to 20 ms: the message arrives
    // once; its copy is refused by the replay window. (The handshake's
    // datagrams are doubled too: their copies' refusals may come first.)
    let mut cfg = config(1, &addrs, Some(key(5)));
    cfg.incarnation = Incarnation(INC.0 + 1);
    cfg.chaos = Some(wire::Chaos { drop_rate: 0.0, dup_rate: 1.0, delay: Duration::from_millis(20) });
    let (tx, _rx_a) = mpsc::channel(8);
    let a = UdpTransport::<TestMsg>::bind(cfg, tx).await.unwrap();
    a.send(NodeId(2), Incarnation(INC.0 + 1), TestMsg::Ping(2)).unwrap();
    let mut replays = 0;
    loop {
        match next(&mut rx_b).await {
            Incoming::Message { msg, .. } => {
                assert_eq!(msg, TestMsg::Ping(2));
                break;
            }
            Incoming::Rejected { reason, .. } => {
                assert_eq!(reason.label(), "replay");
                replays += 1;
            }
            other => panic!("expected the message or a replay, got {other:?}"),
        }
    }
    // The message's own copy is refused too, and nothing arrives twice.
    loop {
        match tokio::time::timeout(Duration::from_millis(200), rx_b.recv()).await {
            Ok(Some(Incoming::Rejected { reason, .. })) => {
                assert_eq!(reason.label(), "replay");
                replays += 1;
            }
            Ok(Some(Incoming::Message { msg, .. })) => panic!("{msg:?} arrived twice"),
            Ok(Some(other)) => panic!("expected a replay, got {other:?}"),
            Ok(None) | Err(_) => break,
        }
    }
    assert!(replays >= 1, "no copy was refused");
    drop(b);
}
