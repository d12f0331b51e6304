//! `ftctl lock --timeout 0` is a try-lock (interfaces.md): granted if the
//! lock can be had within one request round trip, from any node, and 75
//! when another client holds it.

use std::process::{Command, Stdio};
use std::time::Duration;

use ftcoord_tests::records::{ftctl_lock, run, serial, TIMED_OUT};
use ftcoord_tests::{bin, wait_until, Cluster};

/// Each lock daemon at default settings; electd once a coordinator is known.
fn cluster(daemon: &str) -> Cluster {
    let c = Cluster::start(daemon, 3, "").unwrap();
    // The first grant through node 1 (electd: after its first election).
    let (code, err) = run(ftctl_lock(&c, 1, "30s", "true"));
    assert_eq!(code, 0, "{daemon}: first lock: {err}");
    c
}

#[test]
fn try_lock_is_granted_from_every_node_when_free_and_refused_when_held() {
    let _serial = serial();
    for daemon in ["ntmutexd", "tokenwatchd", "electd"] {
        let c = cluster(daemon);
        // Free: every node gets it, wherever the token or coordinator is.
        for round in 0..2 {
            for id in 1..=3 {
                let (code, err) = run(ftctl_lock(&c, id, "0", "true"));
                assert_eq!(code, 0, "{daemon} round {round}: try-lock through node {id}: {err}\n{}", c.log(id));
            }
        }
        // Held by a client of node 1 (1.5 s: tokenwatchd's visits end after
        // max_hold_ms = 2 s): a try-lock elsewhere is refused with 75 while
        // the holder still holds.
        let mut holder = Command::new(bin("ftctl").unwrap())
            .args(["--addr", &c.node(1).client.to_string(), "lock", "--", "sleep", "1.5"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Held once a try-lock through node 1 itself is refused.
        assert!(
            wait_until(Duration::from_secs(10), || run(ftctl_lock(&c, 1, "0", "true")).0 == TIMED_OUT),
            "{daemon}: the holder never got the lock"
        );
        let (code, err) = run(ftctl_lock(&c, 2, "0", "true"));
        assert_eq!(code, TIMED_OUT, "{daemon}: try-lock while held: {err}");
        assert!(holder.try_wait().unwrap().is_none(), "{daemon}: the try-lock waited for the holder's release");
        assert!(holder.wait().unwrap().success(), "{daemon}: the holder lost its lock");
    }
}
