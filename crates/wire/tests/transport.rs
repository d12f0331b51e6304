//! The TCP and UDP transports on loopback: delivery both ways, keys, bad
//! input from raw sockets, reconnection, replay.

mod common;

use std::time::Duration;

use common::*;
use membership::{Incarnation, NodeId};
use tokio::{io::AsyncWriteExt, sync::mpsc};
use wire::{Incoming, SendError, TcpTransport, Transport, TransportConfig, UdpTransport};

type Rx = mpsc::Receiver<Incoming<TestMsg>>;

async fn tcp(cfg: TransportConfig) -> (TcpTransport<TestMsg>, Rx) {
    let (tx, rx) = mpsc::channel(64);
    (TcpTransport::bind(cfg, tx).await.unwrap(), rx)
}

/// Nodes 1 and 2 over TCP, with the given keys.
async fn tcp_pair(k1: Option<u8>, k2: Option<u8>) -> ((TcpTransport<TestMsg>, Rx), (TcpTransport<TestMsg>, Rx)) {
    let addrs = free_tcp_addrs(2);
    (tcp(config(1, &addrs, k1.map(key))).await, tcp(config(2, &addrs, k2.map(key))).await)
}

/// Checks that 1 → 2 still works (after some abuse of node 2).
async fn assert_link_works(a: &TcpTransport<TestMsg>, rx_b: &mut Rx, n: u64) {
    a.send(NodeId(2), INC, TestMsg::Ping(n)).unwrap();
    assert_eq!(next_msg(rx_b).await, (NodeId(1), INC, TestMsg::Ping(n)));
}

#[tokio::test]
async fn tcp_exchanges_messages_both_ways() {
    let ((a, mut rx_a), (b, mut rx_b)) = tcp_pair(None, None).await;
    for i in 0..20 {
        a.send(NodeId(2), INC, TestMsg::Ping(i)).unwrap();
    }
    b.send(NodeId(1), Incarnation(5), TestMsg::Text("hello".into())).unwrap();
    for i in 0..20 {
        assert_eq!(next_msg(&mut rx_b).await, (NodeId(1), INC, TestMsg::Ping(i)), "in order");
    }
    assert_eq!(next_msg(&mut rx_a).await, (NodeId(2), Incarnation(5), TestMsg::Text("hello".into())));
    assert!(matches!(a.send(NodeId(1), INC, TestMsg::Stop), Err(SendError::UnknownPeer(NodeId(1)))));
    assert!(matches!(a.send(NodeId(9), INC, TestMsg::Stop), Err(SendError::UnknownPeer(NodeId(9)))));
}

#[tokio::test]
async fn tcp_with_the_same_key_works() {
    let ((a, mut rx_a), (b, mut rx_b)) = tcp_pair(Some(1), Some(1)).await;
    a.send(NodeId(2), INC, TestMsg::Data { id: 1, body: vec![7; 1000] }).unwrap();
    b.send(NodeId(1), INC, TestMsg::Stop).unwrap();
    assert_eq!(next_msg(&mut rx_b).await.2, TestMsg::Data { id: 1, body: vec![7; 1000] });
    assert_eq!(next_msg(&mut rx_a).await.2, TestMsg::Stop);
}

#[tokio::test]
async fn tcp_with_different_keys_is_rejected_as_auth() {
    let ((a, _rx_a), (_b, mut rx_b)) = tcp_pair(Some(1), Some(2)).await;
    a.send(NodeId(2), INC, TestMsg::Ping(1)).unwrap();
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!(reason, "auth", "{detail}");
}

#[tokio::test]
async fn tcp_key_on_one_side_only_is_rejected_as_auth() {
    let ((a, _rx_a), (_b, mut rx_b)) = tcp_pair(None, Some(2)).await;
    a.send(NodeId(2), INC, TestMsg::Ping(1)).unwrap();
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!((reason, detail.starts_with("expected a MAC")), ("auth", true), "{detail}");
}

#[tokio::test]
async fn tcp_garbage_closes_that_connection_only() {
    let ((a, _rx_a), (b, mut rx_b)) = tcp_pair(Some(1), Some(1)).await;
    assert_link_works(&a, &mut rx_b, 1).await;

    let (mut s, _) = raw_conn(b.local_addr()).await;
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!(reason, "oversized", "{detail}");
    assert_closed(&mut s).await;

    // In-range length, garbage body.
    let (mut s, _) = raw_conn(b.local_addr()).await;
    s.write_all(&prefixed(&[0xAB; 40])).await.unwrap();
    assert_eq!(next_rejection(&mut rx_b).await.0, "bad_magic");
    assert_closed(&mut s).await;

    // A frame cut short by the connection closing.
    let (mut s, ch) = raw_conn(b.local_addr()).await;
    let f = prefixed(&frame_from_1(Some(1), 0, &ch, &TestMsg::Ping(3)));
    s.write_all(&f[..f.len() - 3]).await.unwrap();
    s.shutdown().await.unwrap();
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!(reason, "truncated", "{detail}");

    assert_link_works(&a, &mut rx_b, 2).await;
}

#[tokio::test]
async fn tcp_4gib_length_prefix_is_refused_at_once() {
    let ((a, _rx_a), (b, mut rx_b)) = tcp_pair(None, None).await;
    let (mut s, _) = raw_conn(b.local_addr()).await;
    s.write_all(&[0xff, 0xff, 0xff, 0xff]).await.unwrap();
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!(reason, "oversized");
    assert_eq!(detail, "expected a frame length of at most 65536, got a length prefix of 4294967295");
    assert_closed(&mut s).await;
    assert_link_works(&a, &mut rx_b, 1).await;
}

#[tokio::test]
async fn tcp_replayed_frames_are_rejected() {
    let ((a, _rx_a), (b, mut rx_b)) = tcp_pair(Some(1), Some(1)).await;

    // A frame recorded from an earlier connection: its MAC covers that
    // connection's challenge, not this one's.
    let recorded = prefixed(&frame_from_1(Some(1), 0, &[42; 16], &TestMsg::Ping(66)));
    let (mut s, _) = raw_conn(b.local_addr()).await;
    s.write_all(&recorded).await.unwrap();
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!(reason, "auth", "{detail}");
    assert_closed(&mut s).await;

    // A frame repeated within one connection: the seq does not advance.
    let (mut s, ch) = raw_conn(b.local_addr()).await;
    let f = prefixed(&frame_from_1(Some(1), 0, &ch, &TestMsg::Ping(67)));
    s.write_all(&f).await.unwrap();
    assert_eq!(next_msg(&mut rx_b).await, (NodeId(1), INC, TestMsg::Ping(67)));
    s.write_all(&f).await.unwrap();
    let (reason, detail) = next_rejection(&mut rx_b).await;
    assert_eq!(reason, "replay");
    assert_eq!(detail, "expected seq 1 on this connection, got 0 from n1");
    assert_closed(&mut s).await;

    assert_link_works(&a, &mut rx_b, 1).await;
}

#[tokio::test]
async fn tcp_reconnects_after_the_peer_restarts() {
    let addrs = free_tcp_addrs(2);
    let (a, _rx_a) = tcp(config(1, &addrs, Some(key(1)))).await;
    let (b, mut rx_b) = tcp(config(2, &addrs, Some(key(1)))).await;
    assert_link_works(&a, &mut rx_b, 0).await;

    drop(b);
    drop(rx_b);
    // Re-bind on the same port as soon as the old listener is gone.
    let deadline = tokio::time::Instant::now() + WAIT;
    let (b2, mut rx_b2) = loop {
        let (tx, rx) = mpsc::channel(64);
        match TcpTransport::<TestMsg>::bind(config(2, &addrs, Some(key(1))), tx).await {
            Ok(t) => break (t, rx),
            Err(e) if tokio::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("cannot re-bind: {e}"),
        }
    };
    assert_eq!(b2.local_addr(), addrs[1]);

    // Keep sending until one arrives on the new life of node 2.
    let got = tokio::time::timeout(WAIT, async {
        let mut i = 100;
        loop {
            let _ = a.send(NodeId(2), INC, TestMsg::Ping(i));
            i += 1;
            if let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(20), rx_b2.recv()).await {
                return ev;
            }
        }
    })
    .await
    .expect("no message after reconnect");
    assert!(matches!(got, Incoming::Message { from: NodeId(1), msg: TestMsg::Ping(_), .. }), "{got:?}");
}

#[tokio::test]
async fn tcp_full_queue_drops_and_says_so() {
    // Node 2's address has nothing listening: the link never connects, so
    // the queue is never drained.
    let addrs = free_tcp_addrs(2);
    let mut cfg = config(1, &addrs, None);
    cfg.queue_len = 2;
    let (a, _rx) = tcp(cfg).await;
    a.send(NodeId(2), INC, TestMsg::Ping(1)).unwrap();
    a.send(NodeId(2), INC, TestMsg::Ping(2)).unwrap();
    assert!(matches!(a.send(NodeId(2), INC, TestMsg::Ping(3)), Err(SendError::QueueFull(NodeId(2)))));
}

#[tokio::test]
async fn bind_refuses_bad_configs() {
    let addrs = free_tcp_addrs(2);
    let (tx, _rx) = mpsc::channel::<Incoming<TestMsg>>(1);
    let mut cfg = config(1, &addrs, None);
    cfg.me = NodeId(3);
    assert!(TcpTransport::bind(cfg, tx.clone()).await.unwrap_err().to_string().contains("not among"));
    let mut cfg = config(1, &addrs, None);
    cfg.queue_len = 0;
    assert!(UdpTransport::bind(cfg, tx.clone()).await.is_err());
    let _held = std::net::TcpListener::bind(addrs[0]).unwrap();
    let e = TcpTransport::bind(config(1, &addrs, None), tx).await.unwrap_err();
    assert!(e.to_string().starts_with(&format!("cannot bind {}", addrs[0])), "{e}");
}

#[tokio::test]
async fn tcp_link_in_backoff_reconnects_at_once_when_the_peer_connects_to_us() {
    let addrs = free_tcp_addrs(2);
    let mut cfg1 = config(1, &addrs, None);
    // A long backoff: without the wake-up, node 1 would wait 20 s.
    cfg1.backoff_min = Duration::from_secs(20);
    cfg1.backoff_max = Duration::from_secs(20);
    let (a, mut rx_a) = tcp(cfg1).await;
    // Node 2 is not up: node 1's link fails once and backs off.
    a.send(NodeId(2), INC, TestMsg::Ping(1)).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Node 2 comes up and speaks first.
    let (b, mut rx_b) = tcp(config(2, &addrs, None)).await;
    b.send(NodeId(1), INC, TestMsg::Ping(2)).unwrap();
    assert_eq!(next_msg(&mut rx_a).await, (NodeId(2), INC, TestMsg::Ping(2)));
    // Node 1's queued message now arrives well before its backoff ends.
    let got = tokio::time::timeout(Duration::from_secs(3), rx_b.recv()).await.expect("woken link delivers");
    assert!(matches!(got, Some(Incoming::Message { from: NodeId(1), msg: TestMsg::Ping(1), .. })), "{got:?}");
}

/// Shutdown: what was queued just before `close` is written before the
/// connection closes (no sleep-and-hope).
#[tokio::test]
async fn tcp_close_flushes_what_was_queued() {
    let ((a, _rx_a), (_b, mut rx_b)) = tcp_pair(None, None).await;
    assert_link_works(&a, &mut rx_b, 0).await;
    for i in 1..=200 {
        a.send(NodeId(2), INC, TestMsg::Ping(i)).unwrap();
    }
    let a: Box<dyn Transport<TestMsg>> = Box::new(a);
    // The receiver keeps reading while the sender closes (its inbound
    // channel holds 64: the rest waits in the socket).
    let closing = tokio::spawn(a.close(WAIT));
    let mut got = Vec::new();
    let mut goodbye = false;
    while !goodbye {
        match next(&mut rx_b).await {
            Incoming::Message { from, inc, msg } => got.push((from, inc, msg)),
            // Once closed, its address refuses: that may overtake frames
            // still in the socket.
            Incoming::Unreachable { peer } => assert_eq!(peer, NodeId(1)),
            // A graceful close says so, after everything queued.
            Incoming::Goodbye { peer } => {
                assert_eq!(peer, NodeId(1));
                assert_eq!(got.len(), 200, "goodbye before the last message");
                goodbye = true;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, (1..=200).map(|i| (NodeId(1), INC, TestMsg::Ping(i))).collect::<Vec<_>>());
    tokio::time::timeout(WAIT, closing).await.expect("close returns once flushed").unwrap();
}

/// Shutdown beside a peer that is already gone: a link with nothing queued
/// ends at once rather than at the grace's end (a cluster stopped as a
/// whole exits promptly).
#[tokio::test]
async fn tcp_close_does_not_wait_out_the_grace_for_a_gone_peer_with_nothing_queued() {
    let ((a, _rx_a), (b, mut rx_b)) = tcp_pair(None, None).await;
    assert_link_works(&a, &mut rx_b, 0).await;
    let b: Box<dyn Transport<TestMsg>> = Box::new(b);
    b.close(WAIT).await;
    // a's link to 2 breaks and its reconnects are refused: it backs off.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let grace = Duration::from_secs(60);
    let a: Box<dyn Transport<TestMsg>> = Box::new(a);
    tokio::time::timeout(grace / 2, a.close(grace)).await.expect("close returns long before its grace");
}

/// The next `Unreachable` within `within`, skipping messages.
async fn unreachable_within(rx: &mut Rx, within: Duration) -> Option<NodeId> {
    tokio::time::timeout(within, async {
        loop {
            match rx.recv().await {
                Some(Incoming::Unreachable { peer }) => return Some(peer),
                Some(_) => continue,
                None => return None,
            }
        }
    })
    .await
    .ok()
    .flatten()
}

#[tokio::test]
async fn tcp_says_once_that_a_peer_whose_connection_broke_refuses_connections() {
    let ((a, mut rx_a), (b, mut rx_b)) = tcp_pair(Some(1), Some(1)).await;
    assert_link_works(&a, &mut rx_b, 0).await;
    b.send(NodeId(1), INC, TestMsg::Stop).unwrap();
    assert_eq!(next_msg(&mut rx_a).await.2, TestMsg::Stop);

    // Its process gone: the listener and every connection close.
    drop(b);
    drop(rx_b);
    assert_eq!(unreachable_within(&mut rx_a, WAIT).await, Some(NodeId(2)));
    // Said once: the refusals of the reconnects that follow (backing off
    // from 50 ms) say nothing more.
    assert_eq!(unreachable_within(&mut rx_a, Duration::from_millis(400)).await, None);
    drop(a);
}

#[tokio::test]
async fn tcp_says_nothing_of_a_peer_it_never_reached() {
    // Node 2 never starts (a cluster still coming up): refusals without a
    // broken connection are no news.
    let addrs = free_tcp_addrs(2);
    let (a, mut rx_a) = tcp(config(1, &addrs, None)).await;
    a.send(NodeId(2), INC, TestMsg::Ping(1)).unwrap();
    assert_eq!(unreachable_within(&mut rx_a, Duration::from_millis(400)).await, None);
}
