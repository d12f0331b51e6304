//! `ftctl lock` and `ftctl locks` against a scripted fake lock daemon: a
//! listener speaking the client framing, answered by hand from each test.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use client::{ClientRequest, ClientResponse};
use common::fake::{lease, Conn, FakeDaemon, LONG, STEP};
use common::{dead_addr, finish, run, spawn, Outcome};
use futures::{SinkExt, StreamExt};
use lockservice::{LockInfo, LockName, LockReply, LockRequest};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use wire::ClientCodec;

/// What lockservice's one-lock queue (ntmutexd, tokenwatchd, ringd) says
/// to a named request.
const NO_NAMES: &str = "this daemon serves one unnamed lock: named locks are not supported (docs/named-locks.md)";

fn name(s: &str) -> LockName {
    LockName::parse(s).unwrap()
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
    let ftctl = ftctl_lock(&daemon.addr, &["--timeout", "500ms", "--", "true"]);
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

/// Waits until process `pid` is gone, at most `within`; whether it went.
async fn gone_within(pid: u32, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    !alive(pid)
}

/// The parent of process `pid` (from /proc).
fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // `pid (comm) state ppid ...`: comm may hold spaces, so after the last ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(1).unwrap().parse().unwrap()
}

/// A lock held through ftctl for the supervisor's tests: ftctl runs `sh -c
/// SCRIPT` (`script` gets the file CMD writes its pid to first) with
/// `flags`, granted with a lease of `lease_for`.
struct Held {
    _dir: tempfile::TempDir,
    _daemon: FakeDaemon,
    ftctl: tokio::process::Child,
    ftctl_pid: u32,
    conn: Conn,
    /// CMD's pid.
    pid: u32,
    granted_at: Instant,
}

async fn held(script: impl Fn(&Path) -> String, flags: &[&str], lease_for: Duration) -> Held {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let daemon = FakeDaemon::start().await;
    let script = script(&pidfile);
    let mut args = flags.to_vec();
    args.extend(["--", "sh", "-c", &script]);
    let ftctl = ftctl_lock(&daemon.addr, &args);
    let ftctl_pid = ftctl.id().unwrap();
    let mut conn = daemon.accept().await;
    let granted_at = Instant::now();
    conn.answer_acquire(30_000, LockReply::Granted { fence: 7, lease_until_us: lease(lease_for) }).await;
    let pid = read_pid(&pidfile).await;
    Held { _dir: dir, _daemon: daemon, ftctl, ftctl_pid, conn, pid, granted_at }
}

/// `sleeper` ignoring SIGTERM: only a SIGKILL stops it.
fn stubborn(pidfile: &Path) -> String {
    format!("trap '' TERM; {}", sleeper(pidfile))
}

/// (safety) A stopped ftctl forwards no renewal, so CMD must still stop at
/// the lease's end it was last told, without ftctl: its supervisor does it.
/// Without the supervisor CMD ran on until ftctl was resumed.
#[tokio::test]
async fn a_stopped_ftctl_still_stops_cmd_at_the_lease_end() {
    let mut h = held(stubborn, &["--kill-grace", "200ms"], Duration::from_secs(1)).await;
    signal(h.ftctl_pid, "STOP");
    // The daemon renews, but a stopped ftctl cannot pass that on.
    h.conn.send(LockReply::Renewed { lease_until_us: lease(LONG) }).await;

    assert!(gone_within(h.pid, Duration::from_secs(5)).await, "CMD outlived its lease while ftctl was stopped");
    assert!(h.granted_at.elapsed() >= Duration::from_millis(950), "killed before the lease's end");
    // Still stopped a second after its lease ran out: its supervisor ends
    // it, so that its connection closes and the daemon releases the lock
    // (live, not only safe).
    assert_eq!(h.conn.recv().await, None, "a stopped ftctl kept its connection, and so the lock");
    assert!(h.granted_at.elapsed() < Duration::from_secs(5), "{:?}", h.granted_at.elapsed());
    let out = finish(h.ftctl, STEP).await;
    assert_eq!(out.code, -1, "killed by a signal: {out:?}");
    assert!(out.stderr.contains("stayed stopped after its command ended: SIGKILL to it"), "{}", out.stderr);
}

/// A CMD that ends by itself while ftctl is stopped: ftctl cannot
/// release, so its supervisor ends it a second later and the daemon sees
/// the connection close (the lock goes on). Found by the real-process
/// election test: the leadership stayed with a stopped ftctl for 30 s.
#[tokio::test]
async fn a_cmd_ending_while_ftctl_is_stopped_still_frees_the_lock() {
    let brief = |pidfile: &Path| format!("echo $$ > {}; sleep 0.3", pidfile.display());
    let mut h = held(brief, &[], LONG).await;
    signal(h.ftctl_pid, "STOP");
    let stopped = Instant::now();
    assert_eq!(h.conn.recv().await, None, "a stopped ftctl kept its connection, and so the lock");
    assert!(stopped.elapsed() < Duration::from_secs(5), "{:?}", stopped.elapsed());
    let out = finish(h.ftctl, STEP).await;
    assert_eq!(out.code, -1, "killed by a signal: {out:?}");
    assert!(out.stderr.contains("stayed stopped after its command ended"), "{}", out.stderr);
}

/// A stopped ftctl resumed within a second of its lease's end is not
/// ended: it reads its supervisor's report and exits 69 itself.
#[tokio::test]
async fn a_stopped_ftctl_resumed_at_once_reports_the_lost_lease_itself() {
    let mut h = held(stubborn, &["--kill-grace", "200ms"], Duration::from_secs(1)).await;
    signal(h.ftctl_pid, "STOP");
    assert!(gone_within(h.pid, Duration::from_secs(5)).await, "CMD outlived its lease while ftctl was stopped");
    signal(h.ftctl_pid, "CONT");
    assert_eq!(h.conn.recv().await, Some(LockRequest::Release), "no release after the resume");
    let out = finish(h.ftctl, STEP).await;
    assert_eq!(out.code, 69, "{out:?}");
    assert!(out.stderr.contains("lock lost: the lease"), "{}", out.stderr);
}

/// (safety) A killed ftctl closes its connection, so the daemon releases
/// the lock and may grant it at once: CMD must die at once too. Without the
/// supervisor CMD ran on, orphaned, while another client held the lock.
#[tokio::test]
async fn a_killed_ftctl_takes_cmd_with_it() {
    let mut h = held(stubborn, &[], LONG).await;
    signal(h.ftctl_pid, "KILL");
    let _ = h.ftctl.wait().await;
    assert_eq!(h.conn.recv().await, None, "the connection outlived ftctl");
    assert!(gone_within(h.pid, Duration::from_secs(3)).await, "CMD outlived the ftctl that held its lock");
}

/// A supervisor killed under it (SIGKILL, the one signal it cannot ignore)
/// leaves CMD unwatched: ftctl kills CMD itself and reports the lock lost.
#[tokio::test]
async fn a_killed_supervisor_is_a_lost_lock_and_cmd_is_killed() {
    let mut h = held(sleeper, &[], LONG).await;
    let supervisor = parent_of(h.pid);
    assert_ne!(supervisor, h.ftctl_pid, "CMD runs under a supervisor, not under ftctl");
    assert_eq!(parent_of(supervisor), h.ftctl_pid);
    signal(supervisor, "KILL");

    assert_eq!(h.conn.recv().await, None, "ftctl kept the lock after its supervisor died");
    let out = finish(h.ftctl, STEP).await;
    assert_eq!(out.code, 69, "{out:?}");
    assert!(out.stderr.contains("the supervisor of sh went away"), "{}", out.stderr);
    assert!(gone_within(h.pid, Duration::from_secs(3)).await, "CMD outlived its supervisor");
}

/// Ctrl-C reaches the whole process group, the supervisor too: it must not
/// die of it (CMD would run on unwatched); CMD gets SIGINT and ftctl exits
/// with its status once CMD has exited.
#[tokio::test]
async fn sigint_to_the_whole_group_leaves_the_supervisor_watching() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let daemon = FakeDaemon::start().await;
    // CMD survives SIGINT: the supervisor must still be there after it.
    let script = format!("trap '' INT; echo $$ > {}; sleep 0.5; exit 3", pidfile.display());
    let ftctl = ftctl_lock(&daemon.addr, &["--", "sh", "-c", &script]);

    let mut conn = daemon.accept().await;
    conn.answer_acquire(30_000, LockReply::Granted { fence: 7, lease_until_us: lease(LONG) }).await;
    let pid = read_pid(&pidfile).await;
    let supervisor = parent_of(pid);
    signal(supervisor, "INT");
    signal(supervisor, "TERM");
    signal(supervisor, "HUP");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(alive(supervisor), "the supervisor died of a signal meant for the group");
    assert_eq!(conn.recv().await, Some(LockRequest::Release));
    conn.send(LockReply::Released).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 3, "{out:?}");
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

#[tokio::test]
async fn a_named_lock_is_asked_by_name_and_cmd_gets_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("env");
    let daemon = FakeDaemon::start().await;
    let script = format!("echo \"$FTCOORD_LOCK_NAME $FTCOORD_FENCE\" > {}", file.display());
    let ftctl = ftctl_lock(&daemon.addr, &["db/migrate-2026.11_a", "--timeout", "2s", "--", "sh", "-c", &script]);

    let mut conn = daemon.accept().await;
    assert_eq!(
        conn.recv().await,
        Some(LockRequest::AcquireNamed { name: name("db/migrate-2026.11_a"), timeout_ms: 2000 })
    );
    conn.send(LockReply::Granted { fence: 1 << 64, lease_until_us: lease(LONG) }).await;
    assert_eq!(conn.recv().await, Some(LockRequest::Release), "no release after the command");
    conn.send(LockReply::Released).await;

    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "db/migrate-2026.11_a 18446744073709551616\n");
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[tokio::test]
async fn the_unnamed_lock_is_asked_with_acquire_and_its_name_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("env");
    let daemon = FakeDaemon::start().await;
    let script = format!("echo \"[${{FTCOORD_LOCK_NAME-unset}}]\" > {}", file.display());
    let ftctl = ftctl_lock(&daemon.addr, &["--", "sh", "-c", &script]);

    let mut conn = daemon.accept().await;
    conn.answer_acquire(30_000, LockReply::Granted { fence: 5, lease_until_us: lease(LONG) }).await;
    assert_eq!(conn.recv().await, Some(LockRequest::Release));
    conn.send(LockReply::Released).await;

    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "[]\n", "set, and empty");
}

#[tokio::test]
async fn invalid_names_exit_2_before_connecting() {
    let daemon = FakeDaemon::start().await;
    let long = "x".repeat(129);
    for (bad, says) in [
        ("", "invalid lock name: it is empty"),
        (long.as_str(), "invalid lock name: 129 bytes, the most is 128"),
        ("a b", "invalid lock name: byte 0x20 at offset 1"),
        ("db:1", "invalid lock name: byte 0x3a at offset 2"),
        ("é", "invalid lock name: byte 0xc3 at offset 0"),
    ] {
        let out = finish(ftctl_lock(&daemon.addr, &[bad, "--", "true"]), STEP).await;
        assert_eq!(out.code, 2, "{bad:?}: {out:?}");
        assert!(out.stderr.contains(says), "{bad:?}: {}", out.stderr);
        assert!(!daemon.was_connected().await, "{bad:?}: ftctl connected");
    }
    // Nothing listening: still the name's error, not the connection's.
    let out = run(&["--addr", &dead_addr(), "lock", "a b", "--", "true"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("invalid lock name"), "{}", out.stderr);
    assert!(!out.stderr.contains("cannot connect"), "{}", out.stderr);
}

#[tokio::test]
async fn cmd_without_the_double_dash_is_a_usage_error_that_says_where_cmd_goes() {
    let daemon = FakeDaemon::start().await;
    for args in [&["true"][..], &["--timeout", "1s", "sh", "-c", "exit 0"], &["db", "--"]] {
        let out = finish(ftctl_lock(&daemon.addr, args), STEP).await;
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(out.stderr.contains("tip: CMD goes after `--`"), "{args:?}: {}", out.stderr);
        assert!(!daemon.was_connected().await, "{args:?}: ftctl connected");
    }
}

#[tokio::test]
async fn a_daemon_serving_no_names_refusing_one_exits_2_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let daemon = FakeDaemon::start().await;
    let script = format!("touch {}", marker.display());
    let ftctl = ftctl_lock(&daemon.addr, &["jobs", "--", "sh", "-c", &script]);
    let mut conn = daemon.accept().await;
    assert_eq!(conn.recv().await, Some(LockRequest::AcquireNamed { name: name("jobs"), timeout_ms: 30_000 }));
    conn.send(LockReply::Refused { reason: NO_NAMES.into() }).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains(&format!("lock `jobs` refused: {NO_NAMES}")), "{}", out.stderr);
    assert!(!marker.exists(), "the command ran without the lock");
}

#[tokio::test]
async fn other_refusals_of_a_named_lock_exit_1_and_name_it() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["jobs", "--", "true"]);
    let mut conn = daemon.accept().await;
    let _ = conn.recv().await;
    conn.send(LockReply::Refused { reason: "too many locks: this node knows 10000 (limits.max_locks)".into() }).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("lock `jobs` refused: too many locks"), "{}", out.stderr);
}

#[tokio::test]
async fn a_daemon_hanging_up_on_a_name_predates_named_locks() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["jobs", "--", "true"]);
    let mut conn = daemon.accept().await;
    assert!(conn.recv().await.is_some());
    // An older daemon cannot decode kind 2 and closes the connection.
    drop(conn);
    daemon.answer_status_as("ntmutexd").await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 2, "{out:?}");
    let says = format!("ntmutexd at {} does not serve named locks", daemon.addr);
    assert!(out.stderr.contains(&says), "{}", out.stderr);
}

#[tokio::test]
async fn losing_a_named_lock_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_lock(&daemon.addr, &["jobs/nightly", "--", "sh", "-c", &sleeper(&pidfile)]);
    let mut conn = daemon.accept().await;
    let _ = conn.recv().await;
    conn.send(LockReply::Granted { fence: 7, lease_until_us: lease(LONG) }).await;
    let pid = read_pid(&pidfile).await;
    conn.send(LockReply::LockLost { reason: "revoked after max_hold".into() }).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 69, "{out:?}");
    assert!(out.stderr.contains("lock `jobs/nightly` lost: revoked after max_hold"), "{}", out.stderr);
    assert!(!alive(pid));
}

/// `ftctl --addr ADDR locks ARGS…` against a fake daemon answering
/// `ListLocks` with `reply`.
async fn locks_answered(args: &[&str], reply: LockReply) -> Outcome {
    let daemon = FakeDaemon::start().await;
    let mut all = vec!["--addr", &daemon.addr, "locks"];
    all.extend_from_slice(args);
    let ftctl = spawn(&all);
    let mut conn = daemon.accept().await;
    assert_eq!(conn.recv().await, Some(LockRequest::ListLocks));
    conn.send(reply).await;
    finish(ftctl, STEP).await
}

fn some_locks() -> LockReply {
    let fence = (3 << 64) + 9;
    LockReply::Locks {
        locks: vec![
            LockInfo { name: name("db/migrate"), held_fence: None, last_fence: Some(fence), waiters: 4 },
            LockInfo {
                name: LockName::unnamed(),
                held_fence: Some(fence + 1),
                last_fence: Some(fence + 1),
                waiters: 0,
            },
        ],
        known: 2,
    }
}

#[tokio::test]
async fn locks_prints_a_table_and_the_count() {
    let out = locks_answered(&[], some_locks()).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        "\
NAME        HELD HERE                        LAST FENCE            WAITERS
db/migrate  no                               55340232221128654857  4
(unnamed)   yes, fence 55340232221128654858  55340232221128654858  0
2 locks known
"
    );
    assert!(out.stderr.is_empty(), "{out:?}");

    let reply = LockReply::Locks {
        locks: vec![LockInfo { name: name("a"), held_fence: None, last_fence: None, waiters: 1 }],
        known: 10_000,
    };
    let out = locks_answered(&[], reply).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.ends_with("10000 locks known, 9999 not shown (the most waited-for are listed)\n"),
        "{}",
        out.stdout
    );
}

#[tokio::test]
async fn locks_json_is_one_object_with_fences_as_strings() {
    let out = locks_answered(&["--json"], some_locks()).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        "{\"known\":2,\"listed\":2,\"locks\":[\
         {\"name\":\"db/migrate\",\"held\":false,\"held_fence\":null,\"last_fence\":\"55340232221128654857\",\"waiters\":4},\
         {\"name\":\"\",\"held\":true,\"held_fence\":\"55340232221128654858\",\"last_fence\":\"55340232221128654858\",\
         \"waiters\":0}]}\n"
    );
}

#[tokio::test]
async fn locks_refused_or_not_understood_is_an_error() {
    let out = locks_answered(&[], LockReply::Refused { reason: "daemon is shutting down".into() }).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("list of locks refused: daemon is shutting down"), "{}", out.stderr);

    // A daemon without `ListLocks` hangs up; its status says which it is.
    for (daemon_name, says) in [
        ("hbringd", "hbringd grants no client locks".to_string()),
        ("electd", "electd at ADDR does not list its locks".to_string()),
    ] {
        let daemon = FakeDaemon::start().await;
        let ftctl = spawn(&["--addr", &daemon.addr, "locks"]);
        let mut conn = daemon.accept().await;
        assert_eq!(conn.recv().await, Some(LockRequest::ListLocks));
        drop(conn);
        daemon.answer_status_as(daemon_name).await;
        let out = finish(ftctl, STEP).await;
        assert_eq!(out.code, 1, "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        assert!(out.stderr.contains(&says.replace("ADDR", &daemon.addr)), "{}", out.stderr);
    }
}
