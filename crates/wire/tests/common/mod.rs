//! Shared by the integration tests: a test message type and helpers.
#![allow(dead_code)]

use std::{net::SocketAddr, time::Duration};

use membership::{Incarnation, Member, Membership, NodeId};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::{io::AsyncReadExt, net::TcpStream};
use wire::{ClusterKey, Incoming, PeerCodec, TransportConfig};

/// A message enum shaped like a daemon's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TestMsg {
    Ping(u64),
    Data { id: u32, body: Vec<u8> },
    Text(String),
    Stop,
}
ftcore::message_kinds!(TestMsg { Ping => "ping", Data => "data", Text => "text", Stop => "stop" });

pub const CLUSTER: u32 = 7;
pub const INC: Incarnation = Incarnation(1000);
/// How long any single wait in a test may take.
pub const WAIT: Duration = Duration::from_secs(3);

pub fn key(b: u8) -> ClusterKey {
    ClusterKey::from_bytes([b; 32])
}

/// `n` loopback addresses with currently free TCP ports.
pub fn free_tcp_addrs(n: usize) -> Vec<SocketAddr> {
    let ls: Vec<_> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    ls.iter().map(|l| l.local_addr().unwrap()).collect()
}

/// `n` loopback addresses with currently free UDP ports.
pub fn free_udp_addrs(n: usize) -> Vec<SocketAddr> {
    let ss: Vec<_> = (0..n).map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap()).collect();
    ss.iter().map(|s| s.local_addr().unwrap()).collect()
}

/// Members 1..=n at `addrs`.
pub fn members(addrs: &[SocketAddr]) -> Membership {
    Membership::new(addrs.iter().enumerate().map(|(i, a)| Member { id: NodeId(i as u32 + 1), addr: *a }).collect())
        .unwrap()
}

/// Node `me`'s config (listening at its member address), fast backoff.
pub fn config(me: u32, addrs: &[SocketAddr], key: Option<ClusterKey>) -> TransportConfig {
    let mut c = TransportConfig::new(NodeId(me), addrs[me as usize - 1], members(addrs), CLUSTER);
    c.key = key;
    c.incarnation = INC;
    c.backoff_min = Duration::from_millis(10);
    c.backoff_max = Duration::from_millis(200);
    c
}

/// The next event, failing the test after [`WAIT`].
pub async fn next(rx: &mut mpsc::Receiver<Incoming<TestMsg>>) -> Incoming<TestMsg> {
    tokio::time::timeout(WAIT, rx.recv()).await.expect("timed out waiting for an event").expect("channel closed")
}

/// The next event, which must be a message.
pub async fn next_msg(rx: &mut mpsc::Receiver<Incoming<TestMsg>>) -> (NodeId, Incarnation, TestMsg) {
    match next(rx).await {
        Incoming::Message { from, inc, msg } => (from, inc, msg),
        other => panic!("expected a message, got {other:?}"),
    }
}

/// The next event, which must be a rejection; returns its reason label and detail.
pub async fn next_rejection(rx: &mut mpsc::Receiver<Incoming<TestMsg>>) -> (&'static str, String) {
    match next(rx).await {
        Incoming::Rejected { reason, detail, .. } => (reason.label(), detail),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// A frame as node 1 would send it on a connection with `challenge`.
pub fn frame_from_1(k: Option<u8>, seq: u64, challenge: &[u8; 16], msg: &TestMsg) -> Vec<u8> {
    let codec = PeerCodec::<TestMsg>::new(CLUSTER, NodeId(1), Membership::of_size(3), k.map(key));
    codec.encode(INC, seq, challenge, msg).unwrap().to_vec()
}

pub fn prefixed(frame: &[u8]) -> Vec<u8> {
    let mut v = (frame.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(frame);
    v
}

/// A raw connection to `addr` that has read its challenge.
pub async fn raw_conn(addr: std::net::SocketAddr) -> (TcpStream, [u8; 16]) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut ch = [0u8; 16];
    tokio::time::timeout(WAIT, s.read_exact(&mut ch)).await.unwrap().unwrap();
    (s, ch)
}

/// A TCP connection to `addr` from source address `ip` (any of 127/8 works
/// on loopback), not yet past the challenge.
pub async fn connect_from(ip: [u8; 4], addr: SocketAddr) -> TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::from((ip, 0))).unwrap();
    s.connect(addr).await.unwrap()
}

/// Waits until the server closes `s` (EOF or reset).
pub async fn assert_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(WAIT, s.read(&mut buf)).await.expect("connection was not closed") {
            Ok(0) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}
