//! Bad input on both ports of every daemon, real processes on loopback
//! (issue 17's bad-input suite, the part common to all five): garbage, a
//! 4 GiB length prefix and a frame too short for a header on the peer port
//! (but tokenwatchd's, UDP, which its own suite covers), garbage and a 4 GiB
//! length prefix on the client port. After each the connection is closed
//! (TCP), the node's `<prefix>_frames_rejected_total{reason}` moved for
//! the right reason, and at the end the node still serves: `ftctl status`
//! answers with every peer up, and the lock daemons grant `ftctl lock`.
//! With a cluster key, forged frames on the peer port of every TCP daemon:
//! a wrong key, another cluster, another version, a sender that is no
//! member, a replayed sequence number. After each refusal node 1's log
//! names the cause: a warning with the reason's label (`frame rejected`,
//! or the refused or timed-out connection). Config errors are
//! `limits.rs`'s.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use ftcoord_tests::records::{ftctl_lock, run};
use ftcoord_tests::{assert_closed, bin, probe, wait_until, Cluster, DAEMONS};
use ftcore::{Incarnation, NodeId};
use lockservice::LockRequest;
use membership::Membership;
use wire::{ClusterKey, Control, PeerCodec};

fn rejected(c: &Cluster, daemon: &str, reason: &str) -> f64 {
    let sample = format!("{}_frames_rejected_total{{reason=\"{reason}\"}}", probe::prefix(daemon));
    c.metric(1, &sample).unwrap_or(0.0)
}

/// Node 1's log has a line with every one of `words` (within 3 s: the
/// line is written after the metric moves).
fn logged(c: &Cluster, daemon: &str, words: &[&str]) {
    let has = || c.log(1).lines().any(|l| words.iter().all(|w| l.contains(w)));
    assert!(wait_until(Duration::from_secs(3), has), "{daemon}: no log line names the cause: {words:?}");
}

/// A refused frame is counted and logged with its reason's label.
fn refused(c: &Cluster, daemon: &str, reason: &str, at_least: f64) {
    assert!(
        wait_until(Duration::from_secs(3), || rejected(c, daemon, reason) >= at_least),
        "{daemon}: frames_rejected_total{{reason=\"{reason}\"}} is {}, not {at_least}",
        rejected(c, daemon, reason)
    );
    logged(c, daemon, &["WARN", "frame rejected", reason]);
}

/// Writes `bytes` on a new connection to the peer port (after reading its
/// challenge) and waits for the close.
fn on_peer_tcp(c: &Cluster, bytes: &[u8]) {
    let mut s = TcpStream::connect(c.node(1).peer).unwrap();
    let mut challenge = [0u8; 16];
    s.read_exact(&mut challenge).unwrap();
    let _ = s.write_all(bytes);
    assert_closed(s);
}

fn on_client(c: &Cluster, bytes: &[u8]) {
    let mut s = TcpStream::connect(c.node(1).client).unwrap();
    let _ = s.write_all(bytes);
    assert_closed(s);
}

fn one_daemon(daemon: &str) {
    let c = Cluster::start(daemon, 3, "").unwrap();
    garbage_and_oversized(&c, daemon);
}

fn garbage_and_oversized(c: &Cluster, daemon: &str) {
    let moved = |reason: &str, at_least: f64| refused(c, daemon, reason, at_least);
    let garbage: Vec<u8> = [0, 0, 0, 40].into_iter().chain([0xAB; 40]).collect();
    let short: Vec<u8> = [0, 0, 0, 10].into_iter().chain([0xCD; 10]).collect();
    // tokenwatchd's peers speak UDP: its datagram suite (garbage, truncated,
    // another cluster's, a forged MAC, a replay) is tokenwatchd.rs's
    // `bad_datagrams_on_the_peer_port_are_dropped_counted_by_reason_and_the_ring_goes_on`.
    if daemon != "tokenwatchd" {
        on_peer_tcp(c, &garbage);
        moved("bad_magic", 1.0);
        on_peer_tcp(c, &u32::MAX.to_be_bytes());
        moved("oversized", 1.0);
        on_peer_tcp(c, &short);
        moved("truncated", 1.0);
    }
    if daemon != "tokenwatchd" {
        // A Hello as node 3, then a frame of a kind no daemon has.
        let mut s = TcpStream::connect(c.node(1).peer).unwrap();
        let mut challenge = [0u8; 16];
        s.read_exact(&mut challenge).unwrap();
        let before = rejected(c, daemon, "unknown_kind");
        let codec = PeerCodec::<tokenwatchd::Msg>::new(1, NodeId(3), Membership::of_size(3), None);
        let frame = |seq: u64, kind: Option<u16>| {
            let mut f = codec
                .encode_control(Incarnation(1), seq, &challenge, &Control::Hello { nonce: seq })
                .expect("encode")
                .to_vec();
            if let Some(k) = kind {
                f[30..32].copy_from_slice(&k.to_be_bytes());
            }
            [&(f.len() as u32).to_be_bytes()[..], &f].concat()
        };
        let _ = s.write_all(&[frame(0, None), frame(1, Some(0x0777))].concat());
        assert_closed(s);
        moved("unknown_kind", before + 1.0);
    }
    // A client frame of a kind no request has, then one of another version.
    let body = wire::ClientCodec::<LockRequest, LockRequest>::encode_body(&LockRequest::Release).expect("encode");
    let client_frame = |patch: fn(&mut Vec<u8>)| {
        let mut b = body.clone();
        patch(&mut b);
        [&(b.len() as u32).to_be_bytes()[..], &b].concat()
    };
    let before = rejected(c, daemon, "unknown_kind");
    on_client(c, &client_frame(|b| b[5..7].copy_from_slice(&0x0777u16.to_be_bytes())));
    moved("unknown_kind", before + 1.0);
    let before = rejected(c, daemon, "version");
    on_client(c, &client_frame(|b| b[4] ^= 0xff));
    moved("version", before + 1.0);
    let client_magic_before = rejected(c, daemon, "bad_magic");
    on_client(c, &garbage);
    moved("bad_magic", client_magic_before + 1.0);
    let oversized_before = rejected(c, daemon, "oversized");
    on_client(c, &u32::MAX.to_be_bytes());
    moved("oversized", oversized_before + 1.0);
    // A named acquire whose name has a NUL (named-locks.md: the decoder
    // validates names): malformed, whether the daemon serves names or not.
    if probe::is_lock_daemon(daemon) {
        nul_in_a_name(c, daemon);
    }

    still_serving(c, daemon);
}

fn nul_in_a_name(c: &Cluster, daemon: &str) {
    let name = lockservice::LockName::parse("job-x").expect("a valid name");
    let named = LockRequest::AcquireNamed { name, timeout_ms: 1_000 };
    let mut b = wire::ClientCodec::<LockRequest, LockRequest>::encode_body(&named).expect("encode");
    let at = b.windows(5).position(|w| w == b"job-x").expect("the name is in the frame");
    b[at + 3] = 0;
    let decode_before = rejected(c, daemon, "decode");
    on_client(c, &[&(b.len() as u32).to_be_bytes()[..], &b].concat());
    refused(c, daemon, "decode", decode_before + 1.0);
}

/// `ftctl status` answers with every peer up; a lock daemon grants a lock.
fn still_serving(c: &Cluster, daemon: &str) {
    let status = Command::new(bin("ftctl").unwrap())
        .args(["--addr", &c.node(1).client.to_string(), "--json", "status"])
        .output()
        .unwrap();
    assert!(status.status.success(), "{daemon}: ftctl status failed: {}", String::from_utf8_lossy(&status.stderr));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("\"up\":true") && !text.contains("\"up\":false"), "{daemon}: a peer not shown up: {text}");
    if probe::is_lock_daemon(daemon) {
        let (code, err) = run(ftctl_lock(c, 1, "10s", "true"));
        assert_eq!(code, 0, "{daemon}: no lock after bad input: {err}");
    }
}

#[test]
fn bad_input_on_either_port_is_refused_counted_and_changes_nothing_for_every_daemon() {
    for daemon in DAEMONS {
        one_daemon(daemon);
    }
}

/// The key of the keyed clusters below.
const KEY: [u8; 32] = [0x5a; 32];

/// A control frame as `sender` of `cluster` with `key` would send it as its
/// `seq`-th on a connection with `challenge`, length prefix included.
fn forged(cluster: u32, sender: u32, key: [u8; 32], seq: u64, challenge: &[u8; 16], c: &Control) -> Vec<u8> {
    let codec = PeerCodec::<tokenwatchd::Msg>::new(
        cluster,
        NodeId(sender),
        Membership::of_size(3),
        Some(ClusterKey::from_bytes(key)),
    );
    let frame = codec.encode_control(Incarnation(1), seq, challenge, c).expect("encode");
    [&(frame.len() as u32).to_be_bytes()[..], &frame].concat()
}

/// The frames of one forged connection, given its challenge and a Hello.
type Frames = fn(&[u8; 16], &Control) -> Vec<Vec<u8>>;

/// A connection to node 1's peer port, its challenge read.
fn peer_conn(c: &Cluster) -> (TcpStream, [u8; 16]) {
    let mut s = TcpStream::connect(c.node(1).peer).unwrap();
    let mut challenge = [0u8; 16];
    s.read_exact(&mut challenge).unwrap();
    (s, challenge)
}

fn forged_frames(daemon: &str) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "5a".repeat(32)).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let c = Cluster::start(daemon, 3, &format!("cluster_key_file = \"{}\"\n", key.display())).unwrap();
    let hello = Control::Hello { nonce: 0 };
    let cases: [(&str, Frames); 5] = [
        ("auth", |ch, h| vec![forged(1, 3, [0x11; 32], 0, ch, h)]),
        ("cluster", |ch, h| vec![forged(9, 3, KEY, 0, ch, h)]),
        ("version", |ch, h| {
            let mut f = forged(1, 3, KEY, 0, ch, h);
            f[4 + 4] ^= 0xff;
            vec![f]
        }),
        ("unknown_sender", |ch, h| vec![forged(1, 9, KEY, 0, ch, h)]),
        // A valid first frame, then the same sequence number again.
        ("replay", |ch, h| vec![forged(1, 3, KEY, 0, ch, h), forged(1, 3, KEY, 0, ch, &Control::Keepalive)]),
    ];
    for (reason, frames) in cases {
        let before = rejected(&c, daemon, reason);
        let (mut s, challenge) = peer_conn(&c);
        for f in frames(&challenge, &hello) {
            let _ = s.write_all(&f);
        }
        assert_closed(s);
        refused(&c, daemon, reason, before + 1.0);
    }
    still_serving(&c, daemon);
}

#[test]
fn forged_peer_frames_are_refused_and_counted_by_reason_for_every_tcp_daemon() {
    for daemon in DAEMONS.into_iter().filter(|d| *d != "tokenwatchd") {
        forged_frames(daemon);
    }
}

fn closed(c: &Cluster, daemon: &str, listener: &str, reason: &str) -> f64 {
    let sample =
        format!("{}_connections_closed_total{{listener=\"{listener}\",reason=\"{reason}\"}}", probe::prefix(daemon));
    c.metric(1, &sample).unwrap_or(0.0)
}

/// Floods of connections on node 1 with small limits (32 clients, 16
/// unauthenticated peers, a 500 ms handshake deadline): idle connections
/// beyond the limits are refused and counted, idle peer connections are
/// closed at the deadline, and 500 connections opened and closed at once
/// on each port change nothing; then the cluster still serves.
fn floods(daemon: &str) {
    let extra = "[limits]\nmax_clients = 32\nmax_connections = 16\nhandshake_timeout_ms = 500\n";
    let c = Cluster::start(daemon, 3, extra).unwrap();
    let client = c.node(1).client;
    let idle: Vec<TcpStream> = (0..64).filter_map(|_| TcpStream::connect(client).ok()).collect();
    assert!(
        wait_until(Duration::from_secs(5), || closed(&c, daemon, "client", "no_slot") >= 1.0),
        "{daemon}: {} idle clients, none refused for want of a slot",
        idle.len()
    );
    logged(&c, daemon, &["WARN", "client connection refused: too many clients"]);
    drop(idle);
    if daemon != "tokenwatchd" {
        let peer = c.node(1).peer;
        let idle: Vec<TcpStream> = (0..48).filter_map(|_| TcpStream::connect(peer).ok()).collect();
        assert!(
            wait_until(Duration::from_secs(5), || closed(&c, daemon, "peer", "handshake_timeout") >= 1.0),
            "{daemon}: {} idle peer connections, none closed at the handshake deadline",
            idle.len()
        );
        logged(&c, daemon, &["WARN", "closing peer connection: no valid first frame within"]);
        drop(idle);
        for _ in 0..500 {
            drop(TcpStream::connect(peer));
        }
    }
    for _ in 0..500 {
        drop(TcpStream::connect(client));
    }
    // The slots free up as node 1 reads the closes.
    assert!(
        wait_until(Duration::from_secs(10), || {
            TcpStream::connect(client).is_ok_and(|s| {
                s.set_read_timeout(Some(Duration::from_millis(200))).ok();
                let mut b = [0u8; 1];
                // A refused client is closed at once; a served one waits.
                !matches!((&s).read(&mut b), Ok(0))
            })
        }),
        "{daemon}: clients still refused after the floods"
    );
    still_serving(&c, daemon);
}

#[test]
fn floods_of_connections_are_bounded_counted_and_change_nothing_for_every_daemon() {
    for daemon in DAEMONS {
        floods(daemon);
    }
}
