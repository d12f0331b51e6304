//! The heartbeat ring as real processes on loopback: SIGKILL, detection,
//! repair, restart and rejoin, graceful shutdown, bad input on every port.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ftcoord_tests::{assert_closed, run_once, wait_until, Cluster};
use hbring::{HbReply, HbRequest};

type Status = client::StatusReport;

async fn status(c: &Cluster, id: u32) -> Option<Status> {
    c.status::<HbRequest, HbReply>(id).await.ok()
}

fn peer_up(s: &Status, id: u32) -> Option<bool> {
    s.peers.iter().find(|p| p.id.0 == id).map(|p| p.up)
}

fn detail<'a>(s: &'a Status, key: &str) -> Option<&'a str> {
    s.details.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Polls until `f(status of id)` holds.
async fn eventually(c: &Cluster, id: u32, timeout: Duration, f: impl Fn(&Status) -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if let Some(s) = status(c, id).await {
            if f(&s) {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_is_detected_the_ring_repairs_and_the_node_rejoins() {
    let mut c = Cluster::start("hbringd", 5, "").unwrap();
    for id in 1..=5 {
        let all_up = eventually(&c, id, Duration::from_secs(10), |s| s.peers.iter().all(|p| p.up)).await;
        assert!(all_up, "node {id} never saw everyone up:\n{}", c.log(id));
    }
    let killed_at = Instant::now();
    c.kill(3);
    // Everyone learns 3 is down; 2 now heartbeats 4.
    for id in [1, 2, 4, 5] {
        let saw = eventually(&c, id, Duration::from_secs(5), |s| peer_up(s, 3) == Some(false)).await;
        assert!(saw, "node {id} never marked 3 down:\n{}", c.log(id));
    }
    let all_know = killed_at.elapsed();
    assert!(eventually(&c, 2, Duration::from_secs(2), |s| detail(s, "successor") == Some("4")).await);
    assert!(eventually(&c, 4, Duration::from_secs(2), |s| detail(s, "predecessor") == Some("2")).await);
    // The repair was measured and exported at 4.
    assert!(wait_until(Duration::from_secs(3), || c
        .metric(4, "hbring_recoveries_total{kind=\"ring\"}")
        .unwrap_or(0.0)
        >= 1.0));
    assert!(c.metric(4, "hbring_recovery_duration_seconds_count{kind=\"ring\"}").unwrap_or(0.0) >= 1.0);
    // Gauges refresh every half second.
    assert!(wait_until(Duration::from_secs(2), || c.metric(1, "hbring_peer_up{peer=\"3\"}") == Some(0.0)));
    eprintln!("kill -> all four survivors know: {all_know:?}");

    // Restarted, 3 is a new life, back between 2 and 4.
    let old_life = status(&c, 1).await.unwrap().peers.iter().find(|p| p.id.0 == 3).unwrap().incarnation;
    c.restart(3).unwrap();
    for id in [1, 2, 4, 5] {
        let back = eventually(&c, id, Duration::from_secs(5), |s| peer_up(s, 3) == Some(true)).await;
        assert!(back, "node {id} never saw 3 back:\n{}", c.log(id));
    }
    assert!(eventually(&c, 2, Duration::from_secs(2), |s| detail(s, "successor") == Some("3")).await);
    let s3 = status(&c, 3).await.unwrap();
    assert!(s3.incarnation > old_life, "restart must be a newer life");
    assert_eq!(detail(&s3, "successor"), Some("4"));
    assert!(s3.peers.iter().all(|p| p.up), "3 sees everyone: {s3:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_zero_and_peers_notice() {
    let mut c = Cluster::start("hbringd", 3, "").unwrap();
    assert!(eventually(&c, 1, Duration::from_secs(10), |s| s.peers.iter().all(|p| p.up)).await);
    let status = c.terminate(2, Duration::from_secs(5)).unwrap();
    assert_eq!(status.code(), Some(0), "log:\n{}", c.log(2));
    assert!(c.log(2).contains("graceful leave complete"));
    assert!(eventually(&c, 1, Duration::from_secs(5), |s| peer_up(s, 2) == Some(false)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_on_every_port_are_rejected_counted_and_harmless() {
    let c = Cluster::start("hbringd", 3, "").unwrap();
    assert!(eventually(&c, 1, Duration::from_secs(10), |s| s.peers.iter().all(|p| p.up)).await);
    let peer = c.node(1).peer;
    let client = c.node(1).client;

    // Garbage on the peer port: the connection is closed, bad_magic counted.
    let mut s = TcpStream::connect(peer).unwrap();
    let mut challenge = [0u8; 16];
    s.read_exact(&mut challenge).unwrap();
    let _ = s.write_all(&[0, 0, 0, 40]).and_then(|_| s.write_all(&[0xAB; 40]));
    assert_closed(s);
    assert!(wait_until(Duration::from_secs(2), || rejected(&c, 1, "bad_magic") >= 1.0));

    // A 4 GiB length claim: closed at once, oversized counted.
    let mut s = TcpStream::connect(peer).unwrap();
    s.read_exact(&mut challenge).unwrap();
    let _ = s.write_all(&u32::MAX.to_be_bytes());
    assert_closed(s);
    assert!(wait_until(Duration::from_secs(2), || rejected(&c, 1, "oversized") >= 1.0));

    // Garbage on the client port.
    let mut s = TcpStream::connect(client).unwrap();
    let _ = s.write_all(&[0, 0, 0, 9, b'G', b'E', b'T', b' ', b'/', 1, 2, 3, 4]);
    assert_closed(s);
    assert!(wait_until(Duration::from_secs(2), || rejected(&c, 1, "bad_magic") >= 2.0));

    // The node kept serving everyone else.
    let st = status(&c, 1).await.expect("status still answers");
    assert!(st.peers.iter().all(|p| p.up), "{st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_cluster_or_without_the_key_moves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "11".repeat(32)).unwrap();
    set_mode(&key, 0o600);
    let wrong_key = dir.path().join("other.key");
    std::fs::write(&wrong_key, "22".repeat(32)).unwrap();
    set_mode(&wrong_key, 0o600);

    let mut c = Cluster::configure("hbringd", 4, &format!("cluster_key_file = \"{}\"", key.display())).unwrap();
    for id in 1..=3 {
        c.spawn(id).unwrap();
    }
    for id in 1..=3 {
        c.wait_ready(id).unwrap();
    }
    // Node 4 runs with a different key: its heartbeats to 1 are refused.
    let cfg4 = std::fs::read_to_string(c.config_path(4))
        .unwrap()
        .replace(&key.display().to_string(), &wrong_key.display().to_string());
    std::fs::write(c.config_path(4), cfg4).unwrap();
    c.spawn(4).unwrap();
    c.wait_ready(4).unwrap();
    assert!(wait_until(Duration::from_secs(5), || rejected(&c, 1, "auth") >= 1.0), "log 1:\n{}", c.log(1));
    assert!(eventually(&c, 1, Duration::from_secs(3), |s| peer_up(s, 4) == Some(false)).await);
    c.kill(4);

    // Now as cluster 9 with the right key: refused for its cluster id.
    let cfg4 = std::fs::read_to_string(c.config_path(4))
        .unwrap()
        .replace(&wrong_key.display().to_string(), &key.display().to_string());
    std::fs::write(c.config_path(4), format!("cluster_id = 9\n{cfg4}")).unwrap();
    c.spawn(4).unwrap();
    c.wait_ready(4).unwrap();
    assert!(wait_until(Duration::from_secs(5), || rejected(&c, 1, "cluster") >= 1.0), "log 1:\n{}", c.log(1));
    let s1 = status(&c, 1).await.unwrap();
    assert_eq!(peer_up(&s1, 4), Some(false));
    assert!(s1.peers.iter().filter(|p| p.id.0 != 4).all(|p| p.up));
}

#[test]
fn example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/hbringd.example.toml");
    let (code, stdout, stderr) = run_once("hbringd", &["--config", path, "--check-config"], &[]).unwrap();
    assert_eq!(code, 0, "{stderr}");
    for key in
        ["listen = \"127.0.0.1:7901\"", "client_listen = \"127.0.0.1:8001\"", "metrics_listen = \"127.0.0.1:9901\""]
    {
        assert!(stdout.contains(key), "effective config lacks {key}: {stdout}");
    }
}

#[test]
fn config_errors_exit_2_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    };
    let peers = "[[peers]]\nid = 1\naddr = \"127.0.0.1:7101\"\n[[peers]]\nid = 2\naddr = \"127.0.0.1:7102\"\n";
    // Every file names a state_dir, so that each fails for its own problem only.
    let n1 = format!("node_id = 1\nstate_dir = \"{}\"\n", dir.path().join("state").display());
    let cases = [
        ("unknown.toml", format!("{n1}heartbeat = 5\n{peers}"), "heartbeat"),
        ("type.toml", format!("{n1}[timing]\nheartbeat_ms = \"fast\"\n{peers}"), "timing.heartbeat_ms"),
        (
            "dup.toml",
            format!("{n1}[[peers]]\nid = 1\naddr = \"127.0.0.1:7101\"\n[[peers]]\nid = 1\naddr = \"127.0.0.1:7102\"\n"),
            "more than once",
        ),
        ("self.toml", format!("{}\n{peers}", n1.replace("node_id = 1", "node_id = 3")), "3"),
        ("key.toml", format!("{n1}cluster_key_file = \"/nonexistent/key\"\n{peers}"), "cluster_key_file"),
        ("clash.toml", format!("{n1}client_listen = \"127.0.0.1:7101\"\n{peers}"), "client_listen"),
        ("nostate.toml", format!("node_id = 1\n{peers}"), "state_dir"),
    ];
    for (name, body, needle) in cases {
        let path = write(name, &body);
        let (code, _, stderr) = run_once("hbringd", &["--config", &path], &[]).unwrap();
        assert_eq!(code, 2, "{name}: {stderr}");
        assert!(stderr.contains(needle), "{name}: stderr should name '{needle}': {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    }
    // An unknown key from the environment names the variable.
    let ok = write("ok.toml", &format!("{n1}{peers}"));
    let (code, _, stderr) = run_once("hbringd", &["--config", &ok], &[("HBRINGD_TIMNG__HEARTBEAT_MS", "5")]).unwrap();
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("environment variable HBRINGD_TIMNG"), "{stderr}");
    // --check-config accepts the good one and prints the effective config.
    let (code, stdout, stderr) = run_once("hbringd", &["--config", &ok, "--check-config"], &[]).unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("suspect_after_ms = 250"), "{stdout}");
}

fn rejected(c: &Cluster, id: u32, reason: &str) -> f64 {
    c.metric(id, &format!("hbring_frames_rejected_total{{reason=\"{reason}\"}}")).unwrap_or(0.0)
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_notify_ready_watchdog_status_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let mut c = Cluster::configure("hbringd", 2, "log_format = \"json\"").unwrap();
    let sock_path = c.dir().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let sock_str = sock_path.display().to_string();
    c.spawn_with_env(1, &[("NOTIFY_SOCKET", &sock_str), ("WATCHDOG_USEC", "200000")]).unwrap();
    c.spawn(2).unwrap();
    c.wait_ready(1).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    // READY, a STATUS line, and watchdog pings every 100 ms.
    while !(seen.iter().any(|m| m == "READY=1")
        && seen.iter().any(|m: &String| m.starts_with("STATUS=hbringd node 1"))
        && seen.iter().filter(|m| *m == "WATCHDOG=1").count() >= 3)
    {
        let n = sock.recv(&mut buf).expect("a notify datagram within 10 s");
        seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert_eq!(c.terminate(1, Duration::from_secs(5)).unwrap().code(), Some(0));
    loop {
        let n = sock.recv(&mut buf).expect("STOPPING=1 before exit");
        if &buf[..n] == b"STOPPING=1" {
            break;
        }
    }
    // --log-format json: every log line is one JSON object.
    let log = c.log(1);
    assert!(!log.is_empty());
    for line in log.lines() {
        assert!(line.starts_with('{') && line.ends_with('}'), "not JSON: {line}");
    }
    assert!(log.contains("\"level\":\"INFO\""), "{log}");
}
