//! The TCP transport's limits (issue 9): handshake deadline, idle timeout
//! and keepalives, slots kept for members, one connection per member
//! (replaced in order), a full queue tearing the link down, and rejection
//! reports that never wait.

mod common;

use std::time::Duration;

use common::*;
use membership::NodeId;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
    sync::mpsc,
};
use wire::{Closed, Incoming, RejectReason, TcpTransport, Transport, TransportConfig};

type Rx = mpsc::Receiver<Incoming<TestMsg>>;

async fn tcp(cfg: TransportConfig) -> (TcpTransport<TestMsg>, Rx) {
    let (tx, rx) = mpsc::channel(64);
    (TcpTransport::bind(cfg, tx).await.unwrap(), rx)
}

fn closed(cfg: &TransportConfig, why: Closed) -> u64 {
    cfg.stats.closed_totals().find(|(c, _)| *c == why).map_or(0, |(_, n)| n)
}

/// Polls `f` until it holds, failing the test after [`WAIT`].
async fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_connection_without_a_valid_first_frame_is_closed_at_the_handshake_deadline() {
    let addrs = free_tcp_addrs(2);
    let mut cfg = config(2, &addrs, Some(key(1)));
    cfg.handshake_timeout = Duration::from_millis(200);
    let (b, _rx) = tcp(cfg.clone()).await;
    let started = tokio::time::Instant::now();
    let (mut s, _) = raw_conn(b.local_addr()).await;
    assert_closed(&mut s).await;
    assert!(started.elapsed() >= Duration::from_millis(200), "closed after {:?}", started.elapsed());
    assert_eq!(closed(&cfg, Closed::HandshakeTimeout), 1);
}

#[tokio::test]
async fn unknown_sources_cannot_take_the_slots_kept_for_members() {
    // Three members on 127.0.0.1; two general slots, two kept for members.
    let addrs = free_tcp_addrs(3);
    let mut cfg = config(2, &addrs, Some(key(1)));
    cfg.max_connections = 4;
    cfg.handshake_timeout = Duration::from_secs(30); // the deadline plays no part here
    let (b, mut rx_b) = tcp(cfg.clone()).await;
    let mut idle = Vec::new();
    for _ in 0..2 {
        idle.push(connect_from([127, 0, 0, 2], b.local_addr()).await);
    }
    let mut refused = connect_from([127, 0, 0, 2], b.local_addr()).await;
    assert_closed(&mut refused).await;
    assert_eq!(closed(&cfg, Closed::NoSlot), 1);
    // Members still get in, over the kept slots.
    let (a, _rx_a) = tcp(config(1, &addrs, Some(key(1)))).await;
    let (c, _rx_c) = tcp(config(3, &addrs, Some(key(1)))).await;
    a.send(NodeId(2), INC, TestMsg::Ping(1)).unwrap();
    c.send(NodeId(2), INC, TestMsg::Ping(3)).unwrap();
    let mut got = vec![next_msg(&mut rx_b).await, next_msg(&mut rx_b).await];
    got.sort_by_key(|m| m.0);
    assert_eq!(got, [(NodeId(1), INC, TestMsg::Ping(1)), (NodeId(3), INC, TestMsg::Ping(3))]);
    drop(idle);
}

#[tokio::test]
async fn a_silent_link_is_closed_and_keepalives_keep_a_quiet_one_open() {
    // Node 3 links to node 2 for real; node 1 is played by a raw socket.
    let addrs = free_tcp_addrs(3);
    let quick = |me| {
        let mut c = config(me, &addrs, None);
        c.idle_timeout = Duration::from_millis(300);
        c
    };
    let (a, _rx_a) = tcp(quick(3)).await;
    let cfg_b = quick(2);
    let (b, mut rx_b) = tcp(cfg_b.clone()).await;
    a.send(NodeId(2), INC, TestMsg::Ping(1)).unwrap();
    assert_eq!(next_msg(&mut rx_b).await.2, TestMsg::Ping(1));
    // Quiet for over three idle timeouts: keepalives hold the link.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(closed(&cfg_b, Closed::IdleTimeout), 0);
    a.send(NodeId(2), INC, TestMsg::Ping(2)).unwrap();
    assert_eq!(next_msg(&mut rx_b).await.2, TestMsg::Ping(2));

    // An authenticated connection that falls silent is closed.
    let (mut s, ch) = raw_conn(b.local_addr()).await;
    s.write_all(&prefixed(&frame_from_1(None, 0, &ch, &TestMsg::Ping(3)))).await.unwrap();
    assert_eq!(next_msg(&mut rx_b).await.2, TestMsg::Ping(3));
    let started = tokio::time::Instant::now();
    assert_closed(&mut s).await;
    assert!(started.elapsed() >= Duration::from_millis(250), "closed after {:?}", started.elapsed());
    assert_eq!(closed(&cfg_b, Closed::IdleTimeout), 1);
}

#[tokio::test]
async fn a_newer_connection_from_a_member_replaces_the_older_after_its_frames() {
    let addrs = free_tcp_addrs(2);
    let cfg = config(2, &addrs, Some(key(1)));
    let (b, mut rx_b) = tcp(cfg.clone()).await;
    let (mut old, ch_old) = raw_conn(b.local_addr()).await;
    let (mut new, ch_new) = raw_conn(b.local_addr()).await;
    // The old connection's frames, then at once the new one's: the new
    // connection's frames wait until the old one's are delivered.
    let mut burst = Vec::new();
    for i in 0..50 {
        burst.extend(prefixed(&frame_from_1(Some(1), i, &ch_old, &TestMsg::Ping(i))));
    }
    old.write_all(&burst).await.unwrap();
    new.write_all(&prefixed(&frame_from_1(Some(1), 0, &ch_new, &TestMsg::Ping(1000)))).await.unwrap();
    for i in 0..50 {
        assert_eq!(next_msg(&mut rx_b).await.2, TestMsg::Ping(i), "in order");
    }
    assert_eq!(next_msg(&mut rx_b).await.2, TestMsg::Ping(1000));
    assert_closed(&mut old).await;
    assert_eq!(closed(&cfg, Closed::Replaced), 1);
    new.write_all(&prefixed(&frame_from_1(Some(1), 1, &ch_new, &TestMsg::Stop))).await.unwrap();
    assert_eq!(next_msg(&mut rx_b).await.2, TestMsg::Stop);
}

#[tokio::test]
async fn a_full_queue_tears_the_link_down_and_the_next_connection_starts_clean() {
    // Node 2 is a raw listener that answers the challenge and never reads.
    let addrs = free_tcp_addrs(2);
    let listener = TcpListener::bind(addrs[1]).await.unwrap();
    let mut cfg = config(1, &addrs, None);
    cfg.queue_len = 4;
    let (a, _rx) = tcp(cfg.clone()).await;
    let (mut first, _) = listener.accept().await.unwrap();
    first.write_all(&[7; 16]).await.unwrap();
    // Fill the socket buffers, then the queue.
    let big = TestMsg::Data { id: 0, body: vec![1; 60_000] };
    let refused = tokio::time::timeout(WAIT, async {
        loop {
            match a.send(NodeId(2), INC, big.clone()) {
                Ok(()) => tokio::time::sleep(Duration::from_millis(1)).await,
                Err(e) => return e,
            }
        }
    })
    .await
    .expect("the queue never filled");
    assert!(matches!(refused, wire::SendError::QueueFull(NodeId(2))), "{refused}");
    eventually("the link was torn down", || closed(&cfg, Closed::QueueFull) == 1).await;
    // The old connection ends; a new one opens and starts with a Hello at
    // sequence 0, then carries what is sent from now on.
    let mut sink = vec![0u8; 1 << 20];
    tokio::time::timeout(WAIT, async { while first.read(&mut sink).await.map(|n| n > 0).unwrap_or(false) {} })
        .await
        .expect("old connection not closed");
    let (mut second, _) = tokio::time::timeout(WAIT, listener.accept()).await.unwrap().unwrap();
    second.write_all(&[8; 16]).await.unwrap();
    a.send(NodeId(2), INC, TestMsg::Stop).unwrap();
    let codec = wire::PeerCodec::<TestMsg>::new(CLUSTER, NodeId(2), members(&addrs), None);
    let mut frames = Vec::new();
    for _ in 0..2 {
        let mut len = [0u8; 4];
        second.read_exact(&mut len).await.unwrap();
        let mut f = vec![0u8; u32::from_be_bytes(len) as usize];
        second.read_exact(&mut f).await.unwrap();
        let got = codec.decode_any(&f, &[8; 16]).unwrap();
        frames.push((got.seq, got.msg));
    }
    assert_eq!(
        frames,
        [(0, wire::Body::Control(wire::Control::Hello { nonce: 0 })), (1, wire::Body::Msg(TestMsg::Stop))]
    );
}

#[tokio::test]
async fn rejection_reports_never_wait_for_a_full_channel() {
    let addrs = free_tcp_addrs(2);
    let cfg = config(2, &addrs, None);
    let (tx, _rx) = mpsc::channel(1); // nobody reads it
    let b = TcpTransport::<TestMsg>::bind(cfg.clone(), tx).await.unwrap();
    for _ in 0..5 {
        let (mut s, _) = raw_conn(b.local_addr()).await;
        s.write_all(&prefixed(&[0xAB; 40])).await.unwrap();
        assert_closed(&mut s).await;
    }
    // One report fitted in the channel; the other four were counted.
    let unreported: Vec<_> = cfg.stats.take_unreported().filter(|(_, n)| *n > 0).collect();
    assert_eq!(unreported, [(RejectReason::BadMagic, 4)]);
    assert_eq!(cfg.stats.take_unreported().map(|(_, n)| n).sum::<u64>(), 0, "taken once");
}

#[tokio::test]
async fn a_flooding_peer_delays_only_itself() {
    let addrs = free_tcp_addrs(3);
    // The owner's channel is short and nobody reads it during the flood.
    let (tx, mut rx) = mpsc::channel(8);
    let _a = TcpTransport::<TestMsg>::bind(config(1, &addrs, None), tx).await.unwrap();
    let mut cfg2 = config(2, &addrs, None);
    cfg2.queue_len = 10_000;
    let (flooder, _rx2) = tcp(cfg2).await;
    let (quiet, _rx3) = tcp(config(3, &addrs, None)).await;
    for i in 0..5000 {
        flooder.send(NodeId(1), INC, TestMsg::Data { id: i, body: vec![0; 100] }).unwrap();
    }
    // The flood fills node 1's inbox for node 2 and the owner's channel;
    // node 2's connection is then read no further.
    tokio::time::sleep(Duration::from_millis(300)).await;
    quiet.send(NodeId(1), INC, TestMsg::Text("me too".into())).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut before = 0;
    loop {
        match next(&mut rx).await {
            Incoming::Message { from: NodeId(3), .. } => break,
            Incoming::Message { .. } => before += 1,
            Incoming::Rejected { .. } | Incoming::Unreachable { .. } | Incoming::Goodbye { .. } => {}
        }
    }
    // What the owner's channel held (8), the one the merger carried, and
    // at most one more taken in turn: never the flooder's backlog.
    assert!(before <= 10, "{before} of the flooder's frames went first");
}
