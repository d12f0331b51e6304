//! A newcomer's first steps with real processes: a cluster starting, a
//! node alone, a port already taken and config mistakes. What they see
//! must say what is going on, at the right level: normal start-up events
//! at INFO, a node alone saying it is still joining (and `ftctl lock`
//! saying that is why it got nothing), a fatal error said once, config
//! errors naming the key and the peer by its id.
//!
//! One at a time (a process-wide lock): a 2-core machine running several
//! clusters at once could stall a daemon past `suspect_after_ms`.

use std::net::TcpListener;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ftcoord_tests::{bin, lock_once, run_once, wait_until, Cluster};

const TIMING: &str = "t_msg_ms = 20\n[timing]\nheartbeat_ms = 50\nsuspect_after_ms = 250\n";

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The log lines of `log` at WARN or above.
fn warnings(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect()
}

#[test]
fn a_fresh_cluster_starts_without_warnings_about_normal_events() {
    let _serial = serial();
    let c = Cluster::start("ntmutexd", 3, TIMING).unwrap();
    lock_once(&c, 2, Duration::from_secs(10)).expect("a lock through node 2");
    let logs: Vec<String> = (1..=3).map(|id| c.log(id)).collect();
    // The first token is made the way a lost one is regenerated: the same
    // core event, told apart in the log.
    assert!(logs.iter().any(|l| l.contains("first token made")), "{logs:#?}");
    for id in 1..=3 {
        let log = c.log(id);
        for w in warnings(&log) {
            for normal in ["fresh state recovered", "token regenerated"] {
                assert!(!w.contains(normal), "node {id} logged a normal start-up event at WARN: {w}\n{log}");
            }
        }
    }
}

#[test]
fn a_node_alone_says_it_is_joining_and_ftctl_lock_says_why() {
    let _serial = serial();
    let mut c = Cluster::configure("ntmutexd", 3, TIMING).unwrap();
    c.spawn(1).unwrap();
    c.wait_ready(1).unwrap();
    let said = wait_until(Duration::from_secs(10), || c.log(1).contains("joining: "));
    assert!(said, "no joining progress in the log:\n{}", c.log(1));
    assert!(c.log(1).contains(" answered after "), "{}", c.log(1));

    let out = Command::new(bin("ftctl").unwrap())
        .args(["--addr", &c.node(1).client.to_string(), "lock", "--timeout", "1s", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("lock not obtained within 1 s: the daemon has not joined its cluster yet"), "{stderr}");
}

#[test]
fn a_port_in_use_is_said_once() {
    let _serial = serial();
    // Node 1's peer port, taken by someone else (this test). A free port
    // picked for the config can be taken by another process's outgoing
    // connection before we bind it: configure again then.
    let (c, _taken) = (0..20)
        .find_map(|_| {
            let c = Cluster::configure("hbringd", 2, "").unwrap();
            let taken = TcpListener::bind(c.node(1).peer).ok()?;
            Some((c, taken))
        })
        .expect("no free port to take in 20 tries");
    let config = c.config_path(1).display().to_string();
    let (code, _, stderr) = run_once("hbringd", &["--config", &config], &[]).unwrap();
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stderr.matches("cannot bind").count(), 1, "said more than once:\n{stderr}");
}

/// `--check-config` on a config file with `body`: exit code and stderr.
fn check_config(body: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hbringd.toml");
    let state = dir.path().join("state");
    std::fs::write(&path, format!("node_id = 1\nstate_dir = \"{}\"\n{body}", state.display())).unwrap();
    let (code, _, stderr) =
        run_once("hbringd", &["--config", &path.display().to_string(), "--check-config"], &[]).unwrap();
    (code, stderr)
}

const PEERS: &str = "[[peers]]\nid = 1\naddr = \"127.0.0.1:7101\"\n[[peers]]\nid = 2\naddr = \"127.0.0.1:7102\"\n";

#[test]
fn check_config_refuses_a_log_level_that_is_no_level() {
    let (code, stderr) = check_config(&format!("log_level = \"loud\"\n{PEERS}"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("key 'log_level'") && stderr.contains("\"loud\" is not a level"), "{stderr}");
    let (code, stderr) = check_config(&format!("log_level = \"info,wire=debug\"\n{PEERS}"));
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_config_error_about_a_peer_names_its_id() {
    let (code, stderr) = check_config(&format!("{PEERS}[[peers]]\nid = 3\naddr = \"nowhere\"\n"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("key 'peers[2] (id 3).addr'"), "{stderr}");
}

#[test]
fn electd_starts_and_stops_without_warnings_about_normal_events() {
    let _serial = serial();
    let mut c = Cluster::start("electd", 3, "").unwrap();
    let known = wait_until(Duration::from_secs(10), || (1..=3).all(|id| c.log(id).contains("coordinator known")));
    assert!(known, "{}", c.log(1));
    for id in 1..=3 {
        let log = c.log(id);
        for w in warnings(&log) {
            // The first coordinator a starting node learns of is no failover.
            assert!(!w.contains("failover"), "node {id} at start: {w}\n{log}");
            assert!(!w.contains("took office"), "node {id} at start: {w}\n{log}");
        }
    }
    let _ = c.terminate(3, Duration::from_secs(10));
    let log = c.log(3);
    let stopped = warnings(&log).into_iter().find(|w| w.contains("stepped down"));
    assert_eq!(stopped, None, "a graceful stop logged at WARN:\n{log}");
}

/// A node stopped gracefully (SIGTERM, as `systemctl stop` does) is no
/// failure: it says goodbye on its peer links, and its peers log its going
/// (the suspicion, ring repair or coordinator handover it sets off) at
/// INFO. Fails without the goodbye: every daemon on TCP logged `WARN peer
/// suspected`, `WARN suspected failed`, `WARN predecessor failed` or
/// `WARN failover` at its peers.
#[test]
fn a_graceful_stop_is_no_warning_at_the_peers() {
    let _serial = serial();
    for daemon in ["ntmutexd", "electd", "ringd", "tokenwatchd"] {
        let mut c = Cluster::start(daemon, 3, "").unwrap();
        let up = wait_until(Duration::from_secs(20), || {
            (1..=3).all(|id| {
                let l = c.log(id);
                l.contains("joined") || l.contains("recovered")
            })
        });
        assert!(up, "{daemon} did not start: {}", c.log(1));
        // Past the start-up window in which electd logs failovers at INFO
        // anyway.
        std::thread::sleep(Duration::from_millis(2500));
        let before: Vec<usize> = (1..=2).map(|id| c.log(id).len()).collect();
        let _ = c.terminate(3, Duration::from_secs(10));
        // The peers notice within a connection break (or suspect_after).
        std::thread::sleep(Duration::from_secs(2));
        for id in 1..=2u32 {
            let log = c.log(id);
            let after = &log[before[id as usize - 1]..];
            assert_eq!(warnings(after), Vec::<&str>::new(), "{daemon} node {id} after node 3 stopped:\n{after}");
            if daemon != "tokenwatchd" {
                assert!(after.contains("said goodbye"), "{daemon} node {id}:\n{after}");
            }
        }
    }
}
