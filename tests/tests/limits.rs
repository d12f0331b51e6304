//! The shared runtime's limits as real processes on loopback (issue 9):
//! an idle-connection flood with a key does not cut a node off, a node out
//! of descriptors backs off instead of spinning, a pipelining client is
//! served to the end, and systemd hears READY=1 only once a node has
//! joined. Each test checks the daemon kept serving and that the right
//! counter moved.

use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use client::{ClientRequest, ClientResponse};
use ftcoord_tests::{lock_once, wait_until, Cluster};
use futures::{SinkExt, StreamExt};
use lockservice::{LockReply, LockRequest};
use tokio_util::codec::{FramedRead, FramedWrite};
use wire::ClientCodec;

const TIMING: &str = "t_msg_ms = 20\n[timing]\nheartbeat_ms = 50\nsuspect_after_ms = 250\n";

static SERIAL: Mutex<()> = Mutex::new(());

/// One cluster at a time: several on two cores could stall a daemon past
/// `suspect_after_ms`.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn metric(c: &Cluster, id: u32, sample: &str) -> f64 {
    c.metric(id, sample).unwrap_or(0.0)
}

/// Every node sees every other up (the `peer_up` gauges, refreshed twice a
/// second).
fn all_up(c: &Cluster, n: u32) -> bool {
    (1..=n).all(|id| {
        (1..=n).filter(|p| *p != id).all(|p| metric(c, id, &format!("ntmutex_peer_up{{peer=\"{p}\"}}")) == 1.0)
    })
}

/// CPU seconds (user + system) process `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    ftcoord_tests::probe::cpu_us(pid).unwrap_or(0.0) / 1e6
}

/// Up to `n` connections to `addr` from `ip` (any port), kept open.
fn connect_from(ip: [u8; 4], addr: std::net::SocketAddr, n: usize) -> Vec<TcpStream> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let Ok(s) = tokio::net::TcpSocket::new_v4() else { continue };
            if s.bind((ip, 0).into()).is_err() {
                continue;
            }
            if let Ok(s) = s.connect(addr).await.and_then(|s| s.into_std()) {
                out.push(s);
            }
        }
        out
    })
}

#[test]
fn an_idle_connection_flood_with_a_key_does_not_cut_a_node_off() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "5a".repeat(32)).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // A 5 s handshake deadline: long enough that the flood still holds
    // every slot when the members start, even on a loaded machine.
    let extra = format!("cluster_key_file = \"{}\"\n{TIMING}[limits]\nhandshake_timeout_ms = 5000\n", key.display());
    let mut c = Cluster::configure("ntmutexd", 3, &extra).unwrap();
    c.spawn(1).unwrap();
    c.wait_ready(1).unwrap();
    // 300 connections that never send a byte, from an address that is no
    // member's (127.0.0.2): more than the 254 general slots. The 2 slots
    // kept for members' addresses stay free for them.
    let flood = connect_from([127, 0, 0, 2], c.node(1).peer, 300);
    assert!(flood.len() >= 256, "only {} flood connections opened", flood.len());
    let refused = "ntmutex_connections_closed_total{listener=\"peer\",reason=\"no_slot\"}";
    let timed_out = "ntmutex_connections_closed_total{listener=\"peer\",reason=\"handshake_timeout\"}";
    // Every slot is taken before the members start: the surplus was refused.
    assert!(
        wait_until(Duration::from_secs(4), || metric(&c, 1, refused) >= 1.0),
        "the flood of {} never filled the slots: refused {}, timed out {}",
        flood.len(),
        metric(&c, 1, refused),
        metric(&c, 1, timed_out)
    );
    c.spawn(2).unwrap();
    c.spawn(3).unwrap();
    let started = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || all_up(&c, 3)),
        "not every node saw every other up with the flood held open\n{}",
        c.log(1)
    );
    eprintln!("every node saw every other up {:?} after the members started", started.elapsed());
    lock_once(&c, 1, Duration::from_secs(5)).expect("a lock through the flooded node");
    lock_once(&c, 2, Duration::from_secs(5)).expect("a lock through another node");
    // Every flood connection is closed, refused at once or at the
    // handshake deadline, and counted (gauges refresh twice a second).
    assert!(
        wait_until(Duration::from_secs(15), || metric(&c, 1, refused) + metric(&c, 1, timed_out) >= flood.len() as f64),
        "of {} flood connections: refused {}, timed out {}",
        flood.len(),
        metric(&c, 1, refused),
        metric(&c, 1, timed_out)
    );
    assert!(all_up(&c, 3), "a node lost another after the flood was closed\n{}", c.log(1));
    lock_once(&c, 3, Duration::from_secs(5)).expect("a lock through node 3 after the flood");
    drop(flood);
}

#[test]
fn a_node_short_of_descriptors_refuses_clients_and_keeps_serving() {
    let _serial = serial();
    let mut c = Cluster::configure("ntmutexd", 3, TIMING).unwrap();
    // Node 1 starts with 128 descriptors, far fewer than its 1024 client
    // and 256 peer slots: it clamps them (with a warning), keeping
    // descriptors for peers and its state file.
    c.spawn_wrapped(1, &[], &["prlimit", "--nofile=128:128", "--"]).unwrap();
    c.spawn(2).unwrap();
    c.spawn(3).unwrap();
    for id in 1..=3 {
        c.wait_ready(id).unwrap();
    }
    assert!(wait_until(Duration::from_secs(10), || all_up(&c, 3)), "cluster never came up\n{}", c.log(1));
    let pid = c.pid(1).unwrap();
    let cpu_before = cpu_seconds(pid);
    let flood: Vec<TcpStream> = (0..300).filter_map(|_| TcpStream::connect(c.node(1).client).ok()).collect();
    std::thread::sleep(Duration::from_secs(2));
    let cpu = cpu_seconds(pid) - cpu_before;
    let refused = metric(&c, 1, "ntmutex_connections_closed_total{listener=\"client\",reason=\"no_slot\"}")
        + metric(&c, 1, "ntmutex_connections_closed_total{listener=\"client\",reason=\"accept_error\"}");
    assert!(refused >= 1.0, "refused clients counted: {refused}\n{}", c.log(1));
    // A spinning accept loop burns a whole core (2 s here).
    assert!(cpu < 1.0, "node 1 used {cpu:.2} s of CPU in 2 s of client flood");
    assert!(c.is_running(1), "node 1 died under the flood\n{}", c.log(1));
    assert!(all_up(&c, 3), "peers lost node 1 during the flood\n{}", c.log(1));
    drop(flood);
    // The flood's slots free up as node 1 reads their closes: a client
    // that comes in before then may still be refused for want of a slot.
    let mut last = None;
    let served = wait_until(Duration::from_secs(10), || match lock_once(&c, 1, Duration::from_secs(5)) {
        Ok(_) => true,
        Err(e) => {
            last = Some(e);
            false
        }
    });
    assert!(served, "no lock through node 1 after the flood: {last:?}\n{}", c.log(1));
}

#[test]
fn a_pipelining_client_is_served_to_the_end() {
    let _serial = serial();
    let c = Cluster::start("ntmutexd", 3, TIMING).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(pipeline(&c));
    let not_reading = metric(&c, 1, "ntmutex_connections_closed_total{listener=\"client\",reason=\"not_reading\"}");
    assert_eq!(not_reading, 0.0);
}

/// 5,000 (Release, Acquire) pairs written while the replies are read.
async fn pipeline(c: &Cluster) {
    const PAIRS: usize = 5_000;
    let stream = tokio::net::TcpStream::connect(c.node(1).client).await.unwrap();
    let (rd, wr) = stream.into_split();
    type Codec = ClientCodec<ClientResponse<LockReply>, ClientRequest<LockRequest>>;
    let mut tx = FramedWrite::new(wr, Codec::new(65536));
    let mut rx = FramedRead::new(rd, Codec::new(65536));
    // Hold the lock first, so that every Acquire below is granted at once
    // and every request has exactly one reply.
    tx.send(ClientRequest::Op(LockRequest::Acquire { timeout_ms: 10_000 })).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), rx.next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(first, ClientResponse::Op(LockReply::Granted { .. })), "{first:?}");
    let writer = tokio::spawn(async move {
        for _ in 0..PAIRS {
            tx.feed(ClientRequest::Op(LockRequest::Release)).await?;
            tx.feed(ClientRequest::Op(LockRequest::Acquire { timeout_ms: 10_000 })).await?;
        }
        tx.flush().await?;
        Ok::<_, wire::StreamError>(tx)
    });
    let mut fences = Vec::with_capacity(PAIRS);
    let mut i = 0;
    while i < 2 * PAIRS {
        let reply = tokio::time::timeout(Duration::from_secs(30), rx.next())
            .await
            .unwrap_or_else(|_| panic!("no reply {i} within 30 s\n{}", c.log(1)))
            .unwrap_or_else(|| panic!("disconnected after {i} replies\n{}", c.log(1)))
            .unwrap();
        // A hold that spans a lease renewal is told so; it answers nothing.
        if matches!(reply, ClientResponse::Op(LockReply::Renewed { .. })) {
            continue;
        }
        i += 1;
        match ((i - 1) % 2, reply) {
            (0, ClientResponse::Op(LockReply::Released)) => {}
            (1, ClientResponse::Op(LockReply::Granted { fence, .. })) => fences.push(fence),
            (_, other) => panic!("reply {}: {other:?}", i - 1),
        }
    }
    let _tx = writer.await.unwrap().unwrap();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences increase");
}

/// A stand-in for systemd's notify socket.
struct Manager {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    socket: UnixDatagram,
}

impl Manager {
    fn new() -> Manager {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        Manager { _dir: dir, path, socket }
    }

    /// Every datagram received within `for_`.
    fn collect(&self, for_: Duration) -> Vec<String> {
        let end = Instant::now() + for_;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while Instant::now() < end {
            if let Ok(n) = self.socket.recv(&mut buf) {
                got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        got
    }
}

#[test]
fn systemd_hears_ready_only_once_a_node_has_joined() {
    let _serial = serial();
    let mut c = Cluster::configure("ntmutexd", 3, TIMING).unwrap();
    let m = Manager::new();
    let path = m.path.to_str().unwrap().to_string();
    c.spawn_with_env(1, &[("NOTIFY_SOCKET", &path)]).unwrap();
    c.wait_ready(1).unwrap();
    // Alone, node 1 is one of three: listening, not joined.
    let alone = m.collect(Duration::from_millis(1500));
    assert!(alone.iter().any(|d| d == "STATUS=joining: 1 of 3 answered"), "{alone:?}");
    assert!(!alone.iter().any(|d| d.contains("READY=1")), "READY before joining: {alone:?}");
    c.spawn(2).unwrap();
    let after = m.collect(Duration::from_secs(3));
    assert!(after.iter().any(|d| d.contains("READY=1")), "no READY once a majority answered: {after:?}\n{}", c.log(1));
    assert!(after.iter().any(|d| d.starts_with("STATUS=ntmutexd node 1:")), "{after:?}");
}

/// Every bounded key, set out of its range through the environment (what
/// an operator's unit file or a careless script can do) over a good
/// config: `--check-config` exits 2 naming the key and the range, for each
/// daemon, and never panics (exit 101).
#[test]
fn check_config_refuses_every_key_out_of_its_range() {
    for daemon in ["ntmutexd", "hbringd"] {
        // A node's config as ftlab writes it (ports, state_dir, peers).
        let cluster = Cluster::configure(daemon, 3, "").unwrap();
        let example = cluster.config_path(1).display().to_string();
        let prefix = daemon.to_uppercase();
        let (code, _, stderr) =
            ftcoord_tests::run_once(daemon, &["--config", &example, "--check-config"], &[]).unwrap();
        assert_eq!(code, 0, "{daemon}: the example config is refused: {stderr}");
        let mut checked = 0;
        for &(key, min, max) in runtime::config::BOUNDS {
            let var = format!("{prefix}_{}", key.replace('.', "__").to_uppercase());
            let below = min.checked_sub(1);
            for value in below.into_iter().chain([max + 1, 1 << 62]) {
                let v = value.to_string();
                let (code, _, stderr) =
                    ftcoord_tests::run_once(daemon, &["--config", &example, "--check-config"], &[(&var, &v)]).unwrap();
                assert_eq!(code, 2, "{daemon} {var}={v}: exit {code}\n{stderr}");
                assert!(stderr.contains(key), "{daemon} {var}={v}: the error does not name {key}:\n{stderr}");
                assert!(!stderr.contains("panicked"), "{daemon} {var}={v} panicked:\n{stderr}");
                checked += 1;
            }
        }
        assert!(checked >= 2 * runtime::config::BOUNDS.len(), "{daemon}: only {checked} values tried");
    }
}

/// Each daemon's `--help` names its own config file, not another daemon's.
#[test]
fn each_daemons_help_names_its_own_config_file() {
    for daemon in ftcoord_tests::DAEMONS {
        let (code, out, err) = ftcoord_tests::run_once(daemon, &["--help"], &[]).unwrap();
        assert_eq!(code, 0, "{daemon} --help: {err}");
        assert!(out.contains(&format!("/etc/ftcoord/{daemon}.toml")), "{daemon} --help:\n{out}");
        for other in ftcoord_tests::DAEMONS.iter().filter(|d| **d != daemon) {
            assert!(!out.contains(&format!("/{other}.toml")), "{daemon} --help names {other}'s file:\n{out}");
        }
    }
}
