//! `ftctl lock` against a scripted fake lock daemon: a listener speaking
//! the client framing, answered by hand from each test.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use client::{ClientRequest, ClientResponse};
use common::{finish, spawn, Outcome};
use futures::{SinkExt, StreamExt};
use lockservice::{LockReply, LockRequest};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use wire::ClientCodec;

const STEP: Duration = Duration::from_secs(10);
/// A lease that outlasts any test.
const LONG: Duration = Duration::from_secs(600);

/// A lease ending `d` from now (CLOCK_MONOTONIC microseconds, as a daemon
/// on this host would send it).
fn lease(d: Duration) -> u64 {
    (timer::monotonic_now() + d).as_micros()
}

/// A lock daemon that does only what the test tells it.
struct FakeDaemon {
    listener: TcpListener,
    addr: String,
}

impl FakeDaemon {
    async fn start() -> FakeDaemon {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        FakeDaemon { listener, addr }
    }

    async fn accept(&self) -> Conn {
        let (stream, _): (TcpStream, SocketAddr) =
            tokio::time::timeout(STEP, self.listener.accept()).await.expect("ftctl never connected").unwrap();
        Conn { framed: Framed::new(stream, ClientCodec::default()) }
    }
}

/// The daemon's end of one client connection.
struct Conn {
    framed: Framed<TcpStream, ClientCodec<ClientRequest<LockRequest>, ClientResponse<LockReply>>>,
}

impl Conn {
    /// The next lock request, or `None` once ftctl has closed the connection.
    async fn recv(&mut self) -> Option<LockRequest> {
        match tokio::time::timeout(STEP, self.framed.next()).await.expect("ftctl sent nothing") {
            None | Some(Err(_)) => None,
            Some(Ok(ClientRequest::Op(req))) => Some(req),
            Some(Ok(ClientRequest::Status)) => panic!("ftctl lock asked for status"),
        }
    }

    async fn send(&mut self, reply: LockReply) {
        self.framed.send(ClientResponse::Op(reply)).await.unwrap();
    }

    /// Expects `Acquire` and answers `reply`.
    async fn answer_acquire(&mut self, timeout_ms: u64, reply: LockReply) {
        assert_eq!(self.recv().await, Some(LockRequest::Acquire { timeout_ms }));
        self.send(reply).await;
    }
}

/// `ftctl --addr ADDR lock ARGS…`.
fn ftctl_lock(addr: &str, args: &[&str]) -> tokio::process::Child {
    let mut all = vec!["--addr", addr, "lock"];
    all.extend_from_slice(args);
    spawn(&all)
}

/// The pid a command wrote with `echo $$ > path`.
async fn read_pid(path: &Path) -> u32 {
    let end = Instant::now() + STEP;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(Instant::now() < end, "the command never wrote {}", path.display());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn alive(pid: u32) -> bool {
    Command::new("kill").args(["-0", &pid.to_string()]).stderr(std::process::Stdio::null()).status().unwrap().success()
}

fn signal(pid: u32, sig: &str) {
    assert!(Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap().success());
}

/// `sh -c 'echo $$ > PIDFILE; exec sleep 30'`: a long command whose pid is known.
fn sleeper(pidfile: &Path) -> String {
    format!("echo $$ > {}; exec sleep 30", pidfile.display())
}

#[tokio::test]
async fn granted_runs_cmd_with_the_fence_releases_and_exits_with_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fence");
    let daemon = FakeDaemon::start().await;
    let script = format!("echo $FTCOORD_FENCE > {}; exit 3", file.display());
    let ftctl = ftctl_lock(&daemon.addr, &["--", "sh", "-c", &script]);

    let mut conn = daemon.accept().await;
    conn.answer_acquire(30_000, LockReply::Granted { fence: 42, lease_until_us: lease(LONG) }).await;
    assert_eq!(conn.recv().await, Some(LockRequest::Release), "no release after the command");
    conn.send(LockReply::Released).await;

    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "42\n");
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[tokio::test]
async fn success_is_zero_and_a_missing_release_confirmation_only_warns() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["--timeout", "500ms", "true"]);
    let mut conn = daemon.accept().await;
    conn.answer_acquire(500, LockReply::Granted { fence: 1, lease_until_us: lease(LONG) }).await;
    assert_eq!(conn.recv().await, Some(LockRequest::Release));
    // No `Released`: ftctl waits about 2 s, warns, and still exits 0.
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("no release confirmation"), "{}", out.stderr);
}

#[tokio::test]
async fn timed_out_exits_75_without_running_cmd() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let daemon = FakeDaemon::start().await;
    let script = format!("touch {}", marker.display());
    let ftctl = ftctl_lock(&daemon.addr, &["--timeout", "0", "--", "sh", "-c", &script]);

    let mut conn = daemon.accept().await;
    conn.answer_acquire(0, LockReply::TimedOut).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 75, "{out:?}");
    assert!(out.stderr.contains("not obtained: the lock is held (try-lock, --timeout 0)"), "{}", out.stderr);
    assert!(!out.stderr.contains("0ns"), "{}", out.stderr);
    assert!(!marker.exists(), "the command ran without the lock");
}

#[tokio::test]
async fn not_obtained_from_a_node_still_joining_says_so() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["--timeout", "1s", "--", "true"]);
    let mut conn = daemon.accept().await;
    conn.answer_acquire(1000, LockReply::TimedOut).await;
    // ftctl asks the daemon's status on a second connection.
    let (stream, _) = tokio::time::timeout(STEP, daemon.listener.accept()).await.unwrap().unwrap();
    let mut probe: Framed<TcpStream, ClientCodec<ClientRequest<LockRequest>, ClientResponse<LockReply>>> =
        Framed::new(stream, ClientCodec::default());
    assert_eq!(tokio::time::timeout(STEP, probe.next()).await.unwrap().unwrap().unwrap(), ClientRequest::Status);
    let report = client::StatusReport {
        daemon: "ntmutexd".into(),
        node: ftcore::NodeId(1),
        incarnation: ftcore::Incarnation(1),
        role: "joining".into(),
        peers: vec![],
        details: vec![(client::JOINING_DETAIL.into(), "0 of 4 answered".into())],
    };
    probe.send(ClientResponse::Status(report)).await.unwrap();
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 75, "{out:?}");
    assert!(
        out.stderr
            .contains("lock not obtained within 1 s: the daemon has not joined its cluster yet (0 of 4 answered)"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn a_daemon_that_never_answers_is_an_error_not_a_timeout() {
    let daemon = FakeDaemon::start().await;
    let started = Instant::now();
    let ftctl = ftctl_lock(&daemon.addr, &["--timeout", "200ms", "--", "true"]);
    let mut conn = daemon.accept().await;
    assert_eq!(conn.recv().await, Some(LockRequest::Acquire { timeout_ms: 200 }));
    // Silence: ftctl gives up after 200 ms + 2 s, telling the daemon.
    assert_eq!(conn.recv().await, Some(LockRequest::Release));
    let out = finish(ftctl, STEP).await;
    // 75 is for a daemon that answered "not in time"; silence is an error.
    assert_eq!(out.code, 1, "{out:?}");
    let no_answer = format!("no answer from the daemon at {} within 200 ms", daemon.addr);
    assert!(out.stderr.contains(&no_answer), "{}", out.stderr);
    assert!(started.elapsed() >= Duration::from_millis(2200), "{:?}", started.elapsed());
}

#[tokio::test]
async fn refused_prints_the_reason_and_exits_1() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["--", "true"]);
    let mut conn = daemon.accept().await;
    conn.answer_acquire(30_000, LockReply::Refused { reason: "local queue full".into() }).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("lock refused: local queue full"), "{}", out.stderr);
}

#[tokio::test]
async fn lock_lost_terminates_cmd_at_once_and_exits_69() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["--", "sh", "-c", &sleeper(&pidfile)]);

    let mut conn = daemon.accept().await;
    conn.answer_acquire(30_000, LockReply::Granted { fence: 7, lease_until_us: lease(LONG) }).await;
    let pid = read_pid(&pidfile).await;
    assert!(alive(pid));
    let lost_at = Instant::now();
    conn.send(LockReply::LockLost { reason: "revoked after max_hold".into() }).await;

    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 69, "{out:?}");
    assert!(lost_at.elapsed() < Duration::from_secs(3), "took {:?}", lost_at.elapsed());
    assert!(out.stderr.contains("lock lost: revoked after max_hold"), "{}", out.stderr);
    assert!(!alive(pid), "the command survived the loss of the lock");
}

#[tokio::test]
async fn daemon_going_away_is_a_lost_lock() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["--", "sh", "-c", &sleeper(&pidfile)]);

    let mut conn = daemon.accept().await;
    conn.answer_acquire(30_000, LockReply::Granted { fence: 7, lease_until_us: lease(LONG) }).await;
    let pid = read_pid(&pidfile).await;
    let closed_at = Instant::now();
    drop(conn);
    drop(daemon);

    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 69, "{out:?}");
    assert!(closed_at.elapsed() < Duration::from_secs(3), "took {:?}", closed_at.elapsed());
    assert!(out.stderr.contains("lock lost: the daemon closed the connection"), "{}", out.stderr);
    assert!(!alive(pid), "the command survived the loss of the lock");
}

#[tokio::test]
async fn a_cmd_ignoring_sigterm_after_a_loss_is_killed_at_the_lease_end() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let daemon = FakeDaemon::start().await;
    // The shell ignores TERM and so does the sleep it execs.
    let script = format!("trap '' TERM; {}", sleeper(&pidfile));
    let ftctl = ftctl_lock(&daemon.addr, &["--", "sh", "-c", &script]);

    let mut conn = daemon.accept().await;
    let granted_at = Instant::now();
    conn.answer_acquire(30_000, LockReply::Granted { fence: 7, lease_until_us: lease(Duration::from_secs(2)) }).await;
    let pid = read_pid(&pidfile).await;
    conn.send(LockReply::LockLost { reason: "token lost".into() }).await;

    let out: Outcome = finish(ftctl, STEP).await;
    let took = granted_at.elapsed();
    assert_eq!(out.code, 69, "{out:?}");
    assert!(out.stderr.contains("lock lost: token lost"), "{}", out.stderr);
    assert!(out.stderr.contains("SIGKILL"), "{}", out.stderr);
    assert!(took >= Duration::from_millis(1900), "killed before the lease's end: {took:?}");
    assert!(took < Duration::from_secs(5), "killed long after the lease's end: {took:?}");
    assert!(!alive(pid));
}

#[tokio::test]
async fn a_lease_running_out_terminates_then_kills_cmd_and_exits_69() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let termed = dir.path().join("termed");
    let daemon = FakeDaemon::start().await;
    // Notes the SIGTERM and carries on: only the SIGKILL ends it.
    let script = format!(
        "trap 'echo term > {}' TERM; echo $$ > {}; while :; do sleep 0.02; done",
        termed.display(),
        pidfile.display()
    );
    let ftctl = ftctl_lock(&daemon.addr, &["--kill-grace", "400ms", "--", "sh", "-c", &script]);

    let mut conn = daemon.accept().await;
    let granted_at = Instant::now();
    conn.answer_acquire(30_000, LockReply::Granted { fence: 7, lease_until_us: lease(Duration::from_secs(1)) }).await;
    let pid = read_pid(&pidfile).await;
    // No renewal: the lease runs out.

    let out = finish(ftctl, STEP).await;
    let took = granted_at.elapsed();
    assert_eq!(out.code, 69, "{out:?}");
    // A duration, not a raw CLOCK_MONOTONIC instant.
    assert!(out.stderr.contains("lock lost: the lease end"), "{}", out.stderr);
    assert!(out.stderr.contains("the lease ends in "), "{}", out.stderr);
    assert!(out.stderr.contains("killed"), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(&termed).unwrap_or_default(), "term\n", "no SIGTERM before the SIGKILL");
    assert!(took >= Duration::from_millis(950), "killed before the lease's end: {took:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(!alive(pid), "the command survived its lease");
}

#[tokio::test]
async fn a_grant_with_less_than_kill_grace_left_waits_for_its_renewal() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let daemon = FakeDaemon::start().await;
    let script = format!("touch {}", marker.display());
    let ftctl = ftctl_lock(&daemon.addr, &["--kill-grace", "500ms", "--", "sh", "-c", &script]);

    let mut conn = daemon.accept().await;
    // 300 ms left, less than the grace: CMD would be sent SIGTERM as it
    // starts. It waits for the renewal instead.
    conn.answer_acquire(30_000, LockReply::Granted { fence: 7, lease_until_us: lease(Duration::from_millis(300)) })
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!marker.exists(), "CMD started with less than its grace left");
    conn.send(LockReply::Renewed { lease_until_us: lease(LONG) }).await;
    assert_eq!(conn.recv().await, Some(LockRequest::Release), "no release after the command");
    conn.send(LockReply::Released).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(marker.exists(), "CMD never ran");
}

#[tokio::test]
async fn a_renewal_moves_both_deadlines() {
    let daemon = FakeDaemon::start().await;
    // Runs well past the first lease's end.
    let ftctl = ftctl_lock(&daemon.addr, &["--", "sh", "-c", "sleep 0.6; exit 4"]);

    let mut conn = daemon.accept().await;
    conn.answer_acquire(30_000, LockReply::Granted { fence: 7, lease_until_us: lease(Duration::from_millis(250)) })
        .await;
    conn.send(LockReply::Renewed { lease_until_us: lease(LONG) }).await;
    assert_eq!(conn.recv().await, Some(LockRequest::Release), "no release after the command");
    conn.send(LockReply::Released).await;

    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[tokio::test]
async fn a_cmd_stopped_by_the_early_sigterm_is_a_lost_lock() {
    let daemon = FakeDaemon::start().await;
    let script = "trap 'exit 5' TERM; while :; do sleep 0.02; done";
    let ftctl = ftctl_lock(&daemon.addr, &["--kill-grace", "700ms", "--", "sh", "-c", script]);

    let mut conn = daemon.accept().await;
    conn.answer_acquire(30_000, LockReply::Granted { fence: 7, lease_until_us: lease(Duration::from_secs(1)) }).await;
    // SIGTERM after about 300 ms: CMD exits before the lease's end, but it
    // did not finish under the lock: exit 69.
    assert_eq!(conn.recv().await, Some(LockRequest::Release), "no release after the command");
    conn.send(LockReply::Released).await;

    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 69, "{out:?}");
    assert!(out.stderr.contains("SIGTERM"), "{}", out.stderr);
}

#[tokio::test]
async fn a_grant_whose_lease_has_ended_runs_nothing_and_exits_69() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let daemon = FakeDaemon::start().await;
    let script = format!("touch {}", marker.display());
    let ftctl = ftctl_lock(&daemon.addr, &["--", "sh", "-c", &script]);

    let mut conn = daemon.accept().await;
    let past = timer::monotonic_now().as_micros().saturating_sub(1);
    conn.answer_acquire(30_000, LockReply::Granted { fence: 7, lease_until_us: past }).await;

    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 69, "{out:?}");
    assert!(out.stderr.contains("the lease ended"), "{}", out.stderr);
    assert!(!marker.exists(), "the command ran without a lease");
}

#[tokio::test]
async fn sigint_while_waiting_gives_up_and_exits_130() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["--", "true"]);
    let mut conn = daemon.accept().await;
    assert_eq!(conn.recv().await, Some(LockRequest::Acquire { timeout_ms: 30_000 }));
    signal(ftctl.id().unwrap(), "INT");
    assert_eq!(conn.recv().await, Some(LockRequest::Release));
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 130, "{out:?}");
}

#[tokio::test]
async fn sigterm_while_waiting_exits_143() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["--", "true"]);
    let mut conn = daemon.accept().await;
    assert_eq!(conn.recv().await, Some(LockRequest::Acquire { timeout_ms: 30_000 }));
    signal(ftctl.id().unwrap(), "TERM");
    assert_eq!(conn.recv().await, Some(LockRequest::Release));
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 143, "{out:?}");
}

#[tokio::test]
async fn sigterm_while_cmd_runs_is_forwarded_then_the_lock_released() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["--", "sh", "-c", &sleeper(&pidfile)]);

    let mut conn = daemon.accept().await;
    conn.answer_acquire(30_000, LockReply::Granted { fence: 9, lease_until_us: lease(LONG) }).await;
    let pid = read_pid(&pidfile).await;
    signal(ftctl.id().unwrap(), "TERM");
    assert_eq!(conn.recv().await, Some(LockRequest::Release), "no release after the forwarded signal");
    assert!(!alive(pid), "released while the command still ran");
    conn.send(LockReply::Released).await;

    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 143, "{out:?}");
}

#[tokio::test]
async fn a_missing_cmd_releases_and_exits_127() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["--", "/nonexistent/ftctl-test-cmd"]);
    let mut conn = daemon.accept().await;
    conn.answer_acquire(30_000, LockReply::Granted { fence: 1, lease_until_us: lease(LONG) }).await;
    assert_eq!(conn.recv().await, Some(LockRequest::Release));
    conn.send(LockReply::Released).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 127, "{out:?}");
    assert!(out.stderr.contains("cannot run /nonexistent/ftctl-test-cmd"), "{}", out.stderr);
}
