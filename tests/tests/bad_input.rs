//! Bad input on both ports of every daemon, real processes on loopback
//! (issue 17's bad-input suite, the part common to all five): garbage, a
//! 4 GiB length prefix and a frame too short for a header on the peer port
//! (but tokenwatchd's, UDP, which its own suite covers), garbage and a 4 GiB
//! length prefix on the client port. After each the connection is closed
//! (TCP), the node's `<prefix>_frames_rejected_total{reason}` moved for
//! the right reason, and at the end the node still serves: `ftctl status`
//! answers with every peer up, and the lock daemons grant `ftctl lock`.
//! Keys, replays and lives are the wire crate's transport tests and the
//! hbringd suite; config errors are `limits.rs`'s.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use ftcoord_tests::records::{ftctl_lock, run};
use ftcoord_tests::{bin, probe, wait_until, Cluster, DAEMONS};

fn rejected(c: &Cluster, daemon: &str, reason: &str) -> f64 {
    let sample = format!("{}_frames_rejected_total{{reason=\"{reason}\"}}", probe::prefix(daemon));
    c.metric(1, &sample).unwrap_or(0.0)
}

/// The other end closed the connection: a read returns EOF or an error.
fn assert_closed(mut s: TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => continue,
        }
    }
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
    let moved = |reason: &str, at_least: f64| {
        assert!(
            wait_until(Duration::from_secs(3), || rejected(&c, daemon, reason) >= at_least),
            "{daemon}: frames_rejected_total{{reason=\"{reason}\"}} is {}, not {at_least}",
            rejected(&c, daemon, reason)
        );
    };
    let garbage: Vec<u8> = [0, 0, 0, 40].into_iter().chain([0xAB; 40]).collect();
    let short: Vec<u8> = [0, 0, 0, 10].into_iter().chain([0xCD; 10]).collect();
    // tokenwatchd's peers speak UDP: its datagram suite (garbage, truncated,
    // another cluster's, a forged MAC, a replay) is tokenwatchd.rs's
    // `bad_datagrams_on_the_peer_port_are_dropped_counted_by_reason_and_the_ring_goes_on`.
    if daemon != "tokenwatchd" {
        on_peer_tcp(&c, &garbage);
        moved("bad_magic", 1.0);
        on_peer_tcp(&c, &u32::MAX.to_be_bytes());
        moved("oversized", 1.0);
        on_peer_tcp(&c, &short);
        moved("truncated", 1.0);
    }
    let client_magic_before = rejected(&c, daemon, "bad_magic");
    on_client(&c, &garbage);
    moved("bad_magic", client_magic_before + 1.0);
    let oversized_before = rejected(&c, daemon, "oversized");
    on_client(&c, &u32::MAX.to_be_bytes());
    moved("oversized", oversized_before + 1.0);

    // Still serving.
    let status = Command::new(bin("ftctl").unwrap())
        .args(["--addr", &c.node(1).client.to_string(), "--json", "status"])
        .output()
        .unwrap();
    assert!(status.status.success(), "{daemon}: ftctl status failed: {}", String::from_utf8_lossy(&status.stderr));
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("\"up\":true") && !text.contains("\"up\":false"), "{daemon}: a peer not shown up: {text}");
    if probe::is_lock_daemon(daemon) {
        let (code, err) = run(ftctl_lock(&c, 1, "10s", "true"));
        assert_eq!(code, 0, "{daemon}: no lock after bad input: {err}");
    }
}

#[test]
fn bad_input_on_either_port_is_refused_counted_and_changes_nothing_for_every_daemon() {
    for daemon in DAEMONS {
        one_daemon(daemon);
    }
}
