//! Real-process tests of `ringd-supervise` and `ringd::supervisor`: every
//! command really runs, and every kill is checked on `/proc`.
//!
//! Bounds are generous (the machine may be loaded): a kill must land within
//! a few seconds, where the commands would otherwise run for 30.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use runtime::supervisor::{monotonic_ns, CommandSpec, Job, JobOutcome, KillReason};

const SUPERVISOR: &str = env!("CARGO_BIN_EXE_ringd-supervise");

/// How long a kill may take to land on a loaded machine.
const KILL_BOUND: Duration = Duration::from_secs(3);

fn supervisor() -> &'static Path {
    Path::new(SUPERVISOR)
}

/// A `sh -c SCRIPT` command service (a test may use a shell; ringd never does).
fn sh(script: &str, timeout: Duration) -> CommandSpec {
    CommandSpec { argv: vec!["sh".into(), "-c".into(), script.into()], timeout, max_output: 64 * 1024 }
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// A fresh path for a pid file, removed when dropped.
struct PidFile(PathBuf);

impl std::ops::Deref for PidFile {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn pid_file(name: &str) -> PidFile {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("supervisor-{name}-{}-{n}.pid", std::process::id()));
    let _ = std::fs::remove_file(&path);
    PidFile(path)
}

/// Waits (up to 10 s) for the command to write its pid, a line, to `path`.
fn read_pid(path: &Path) -> u32 {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Some(line) = s.strip_suffix('\n') {
                return line.trim().parse().expect("a pid");
            }
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` is a live process (a zombie is dead: its parent, maybe an
/// init that does not reap, has just not collected it).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some('Z' | 'X' | 'x'))
        }
    }
}

/// Waits (up to [`KILL_BOUND`]) for `pid` to die.
fn assert_dies(pid: u32) {
    let start = Instant::now();
    while alive(pid) {
        assert!(start.elapsed() < KILL_BOUND, "process {pid} still alive after {:?}", start.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A stand-in for ringd (a `sleep` holding the write end of the supervisor's
/// pipe), SIGKILLed when dropped so that a failed test leaks nothing.
struct FakeRingd(std::process::Child);

impl FakeRingd {
    /// Starts it; returns it and the read end of its pipe.
    fn start() -> (FakeRingd, std::process::ChildStdout) {
        let mut child = Command::new("sleep").arg("1000").stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap();
        let pipe = child.stdout.take().unwrap();
        (FakeRingd(child), pipe)
    }
}

impl Drop for FakeRingd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stdout_pid(outcome: &JobOutcome) -> u32 {
    let stdout = match outcome {
        JobOutcome::Exited { stdout, .. }
        | JobOutcome::Signalled { stdout, .. }
        | JobOutcome::Killed { stdout, .. } => stdout,
        other => panic!("no stdout in {other:?}"),
    };
    stdout.lines().next().and_then(|l| l.trim().parse().ok()).unwrap_or_else(|| panic!("no pid in {stdout:?}"))
}

#[tokio::test]
async fn exit_status_and_stdout() {
    let spec = sh("echo hello; echo to-stderr >&2; echo world; exit 3", Duration::from_secs(30));
    let job = Job::spawn(supervisor(), &spec, &[], None, far()).unwrap();
    let outcome = job.wait().await;
    assert_eq!(outcome, JobOutcome::Exited { status: 3, stdout: "hello\nworld\n".into(), truncated: false });
}

#[tokio::test]
async fn arguments_follow_the_configured_argv_without_a_shell() {
    let spec = CommandSpec { argv: vec!["echo".into(), "a".into()], timeout: Duration::from_secs(30), max_output: 100 };
    let args = vec!["b c".to_owned(), "$HOME;".to_owned()];
    let outcome = Job::spawn(supervisor(), &spec, &args, None, far()).unwrap().wait().await;
    assert_eq!(outcome, JobOutcome::Exited { status: 0, stdout: "a b c $HOME;\n".into(), truncated: false });
}

#[tokio::test]
async fn signalled_by_another() {
    let spec = sh("kill -TERM $$; sleep 30", Duration::from_secs(30));
    let outcome = Job::spawn(supervisor(), &spec, &[], None, far()).unwrap().wait().await;
    assert_eq!(outcome, JobOutcome::Signalled { signal: 15, stdout: String::new(), truncated: false });
}

#[tokio::test]
async fn long_stdout_is_truncated_and_drained() {
    // 4 MiB, far beyond a pipe's buffer: the command finishes only if the
    // rest is drained.
    let mut spec = sh("yes abcdefg | head -c 4194304; echo tail >&2; exit 0", Duration::from_secs(30));
    spec.max_output = 1000;
    let start = Instant::now();
    let outcome = Job::spawn(supervisor(), &spec, &[], None, far()).unwrap().wait().await;
    let JobOutcome::Exited { status: 0, stdout, truncated: true } = outcome else { panic!("{outcome:?}") };
    assert_eq!(stdout.len(), 1000);
    assert!(stdout.starts_with("abcdefg\nabcdefg\n"));
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn deadline_kills_the_command() {
    let spec = sh("echo $$; exec sleep 30", Duration::from_secs(60));
    let start = Instant::now();
    let job = Job::spawn(supervisor(), &spec, &[], None, start + Duration::from_millis(200)).unwrap();
    let outcome = job.wait().await;
    let elapsed = start.elapsed();
    assert!(matches!(outcome, JobOutcome::Killed { why: KillReason::Deadline, .. }), "{outcome:?}");
    assert!(elapsed >= Duration::from_millis(200), "killed early: {elapsed:?}");
    assert!(elapsed < KILL_BOUND, "killed late: {elapsed:?}");
    // The report comes once the group is dead (a zombie at most).
    assert!(!alive(stdout_pid(&outcome)));
}

#[tokio::test]
async fn deadline_kills_the_commands_children() {
    let file = pid_file("children");
    let script = format!("sleep 30 & echo $! > {}; wait", file.display());
    let spec = sh(&script, Duration::from_secs(60));
    let start = Instant::now();
    let job = Job::spawn(supervisor(), &spec, &[], None, start + Duration::from_millis(300)).unwrap();
    let outcome = job.wait().await;
    assert!(matches!(outcome, JobOutcome::Killed { why: KillReason::Deadline, .. }), "{outcome:?}");
    assert!(start.elapsed() < KILL_BOUND);
    assert_dies(read_pid(&file));
}

#[tokio::test]
async fn leftovers_are_killed_when_the_command_exits() {
    // The background sleep keeps stdout open: wait() returns only because
    // the supervisor kills the group once sh exits.
    let file = pid_file("leftover");
    let script = format!("sleep 30 & echo $! > {}; echo bye; exit 0", file.display());
    let spec = sh(&script, Duration::from_secs(60));
    let start = Instant::now();
    let outcome = Job::spawn(supervisor(), &spec, &[], None, far()).unwrap().wait().await;
    assert_eq!(outcome, JobOutcome::Exited { status: 0, stdout: "bye\n".into(), truncated: false });
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_dies(read_pid(&file));
}

#[tokio::test]
async fn extend_keeps_it_alive_past_the_first_deadline() {
    let spec = sh("sleep 1; echo done", Duration::from_secs(60));
    let start = Instant::now();
    let mut job = Job::spawn(supervisor(), &spec, &[], None, start + Duration::from_millis(300)).unwrap();
    job.extend(Instant::now() + Duration::from_secs(30)).unwrap();
    let outcome = job.wait().await;
    assert_eq!(outcome, JobOutcome::Exited { status: 0, stdout: "done\n".into(), truncated: false });
    assert!(start.elapsed() >= Duration::from_secs(1));
}

#[tokio::test]
async fn repeated_extensions_keep_it_alive() {
    let spec = sh("sleep 1.5; echo done", Duration::from_secs(60));
    let (mut control, waiter) =
        Job::spawn(supervisor(), &spec, &[], None, Instant::now() + Duration::from_millis(500)).unwrap().split();
    let task = tokio::spawn(waiter.wait());
    // A lease-like extension every 100 ms, each 500 ms ahead.
    while !task.is_finished() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = control.extend(Instant::now() + Duration::from_millis(500));
    }
    let outcome = task.await.unwrap();
    assert_eq!(outcome, JobOutcome::Exited { status: 0, stdout: "done\n".into(), truncated: false });
}

#[tokio::test]
async fn extend_earlier_kills_earlier() {
    let spec = sh("echo $$; exec sleep 30", Duration::from_secs(60));
    let mut job = Job::spawn(supervisor(), &spec, &[], None, far()).unwrap();
    let start = Instant::now();
    job.extend(start + Duration::from_millis(200)).unwrap();
    let outcome = job.wait().await;
    assert!(matches!(outcome, JobOutcome::Killed { why: KillReason::Deadline, .. }), "{outcome:?}");
    assert!(start.elapsed() < KILL_BOUND);
    assert!(!alive(stdout_pid(&outcome)));
}

#[tokio::test]
async fn timeout_clamps_the_deadline_and_extensions() {
    let timeout = Duration::from_millis(500);
    let spec = sh("echo $$; exec sleep 30", timeout);
    let start = Instant::now();
    let mut job = Job::spawn(supervisor(), &spec, &[], None, far()).unwrap();
    assert!(job.deadline() <= start + timeout + Duration::from_millis(200));
    assert_eq!(job.deadline(), job.limit());
    job.extend(Instant::now() + Duration::from_secs(60)).unwrap();
    assert_eq!(job.deadline(), job.limit());
    let outcome = job.wait().await;
    assert!(matches!(outcome, JobOutcome::Killed { why: KillReason::Deadline, .. }), "{outcome:?}");
    assert!(start.elapsed() < timeout + KILL_BOUND);
    assert!(!alive(stdout_pid(&outcome)));

    // An extension past the limit from a shorter first deadline is clamped
    // too.
    let spec = sh("exec sleep 30", timeout);
    let start = Instant::now();
    let mut job = Job::spawn(supervisor(), &spec, &[], None, start + Duration::from_millis(100)).unwrap();
    job.extend(Instant::now() + Duration::from_secs(60)).unwrap();
    assert_eq!(job.deadline(), job.limit());
    let outcome = job.wait().await;
    assert!(matches!(outcome, JobOutcome::Killed { why: KillReason::Deadline, .. }), "{outcome:?}");
    assert!(start.elapsed() < timeout + KILL_BOUND);
}

#[tokio::test]
async fn kill_closes_the_pipe_and_kills_at_once() {
    let file = pid_file("kill");
    let script = format!("echo $$ > {}; exec sleep 30", file.display());
    let spec = sh(&script, Duration::from_secs(60));
    let mut job = Job::spawn(supervisor(), &spec, &[], None, far()).unwrap();
    let pid = read_pid(&file);
    assert!(alive(pid));
    let start = Instant::now();
    job.kill();
    assert!(job.extend(far()).is_err());
    let outcome = job.wait().await;
    assert!(matches!(outcome, JobOutcome::Killed { why: KillReason::PipeClosed, .. }), "{outcome:?}");
    assert!(start.elapsed() < KILL_BOUND);
    assert!(!alive(pid));
}

#[tokio::test]
async fn dropping_the_control_kills() {
    let spec = sh("echo $$; exec sleep 30", Duration::from_secs(60));
    let (control, waiter) = Job::spawn(supervisor(), &spec, &[], None, far()).unwrap().split();
    let task = tokio::spawn(waiter.wait());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    drop(control);
    let outcome = task.await.unwrap();
    assert!(matches!(outcome, JobOutcome::Killed { why: KillReason::PipeClosed, .. }), "{outcome:?}");
    assert!(start.elapsed() < KILL_BOUND);
    assert!(!alive(stdout_pid(&outcome)));
}

#[tokio::test]
async fn dropping_the_job_kills() {
    let file = pid_file("drop");
    let script = format!("echo $$ > {}; exec sleep 30", file.display());
    let spec = sh(&script, Duration::from_secs(60));
    let job = Job::spawn(supervisor(), &spec, &[], None, far()).unwrap();
    let pid = read_pid(&file);
    assert!(alive(pid));
    drop(job);
    assert_dies(pid);
}

/// ringd SIGKILLed: here a `sleep` stands in for it, holding the only write
/// end of the supervisor's pipe.
#[test]
fn a_killed_ringd_kills_the_command() {
    let file = pid_file("ringd-died");
    let (mut ringd, pipe) = FakeRingd::start();
    let deadline = monotonic_ns(far());
    let sup = Command::new(SUPERVISOR)
        .args(["--deadline-ns", &deadline.to_string(), "--", "sh", "-c"])
        .arg(format!("echo $$ > {}; exec sleep 30", file.display()))
        .stdin(Stdio::from(pipe))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = read_pid(&file);
    assert!(alive(pid));
    ringd.0.kill().unwrap(); // SIGKILL
    ringd.0.wait().unwrap();
    let start = Instant::now();
    assert_dies(pid);
    assert!(start.elapsed() < KILL_BOUND);
    let out = sup.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().last(), Some("ringd-supervise: killed pipe_closed"));
}

/// ringd SIGSTOPped: its pipe stays open but no extension comes; the
/// deadline holds anyway.
#[test]
fn a_stopped_ringd_does_not_stop_the_deadline() {
    use rustix::process::{kill_process, Pid, Signal};
    let file = pid_file("ringd-stopped");
    let (ringd, pipe) = FakeRingd::start();
    let ringd_pid = Pid::from_child(&ringd.0);
    kill_process(ringd_pid, Signal::STOP).unwrap();
    let start = Instant::now();
    let deadline = monotonic_ns(start + Duration::from_millis(300));
    let sup = Command::new(SUPERVISOR)
        .args(["--deadline-ns", &deadline.to_string(), "--", "sh", "-c"])
        .arg(format!("echo $$ > {}; exec sleep 30", file.display()))
        .stdin(Stdio::from(pipe))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let out = sup.wait_with_output().unwrap();
    let elapsed = start.elapsed();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().last(), Some("ringd-supervise: killed deadline"));
    assert!(elapsed >= Duration::from_millis(300) && elapsed < KILL_BOUND, "{elapsed:?}");
    // The command may have been killed before it wrote its pid file.
    if let Ok(s) = std::fs::read_to_string(&*file) {
        if let Ok(pid) = s.trim().parse() {
            assert!(!alive(pid));
        }
    }
    drop(ringd);
}

#[tokio::test]
async fn the_fence_is_in_the_environment() {
    let spec = sh("echo \"[$FTCOORD_FENCE]\"", Duration::from_secs(30));
    let fence = (7u128 << 64) | 42;
    let outcome = Job::spawn(supervisor(), &spec, &[], Some(fence), far()).unwrap().wait().await;
    assert_eq!(outcome, JobOutcome::Exited { status: 0, stdout: format!("[{fence}]\n"), truncated: false });
    let outcome = Job::spawn(supervisor(), &spec, &[], None, far()).unwrap().wait().await;
    assert_eq!(outcome, JobOutcome::Exited { status: 0, stdout: "[]\n".into(), truncated: false });
}

#[tokio::test]
async fn a_missing_command_fails_to_spawn() {
    let spec = CommandSpec {
        argv: vec!["/nonexistent/ringd-test-command".into()],
        timeout: Duration::from_secs(30),
        max_output: 100,
    };
    let outcome = Job::spawn(supervisor(), &spec, &[], None, far()).unwrap().wait().await;
    let JobOutcome::SpawnFailed(reason) = outcome else { panic!("{outcome:?}") };
    assert!(!reason.is_empty());
}

#[tokio::test]
async fn a_deadline_already_past_runs_nothing() {
    let file = pid_file("past");
    let script = format!("echo $$ > {}", file.display());
    let spec = sh(&script, Duration::from_secs(30));
    let past = Instant::now() - Duration::from_millis(10);
    let outcome = Job::spawn(supervisor(), &spec, &[], None, past).unwrap().wait().await;
    assert!(matches!(outcome, JobOutcome::Killed { why: KillReason::Deadline, .. }), "{outcome:?}");
    assert!(!file.exists());
}

#[tokio::test]
async fn a_missing_supervisor_is_an_error() {
    let spec = sh("true", Duration::from_secs(30));
    assert!(Job::spawn(Path::new("/nonexistent/ringd-supervise"), &spec, &[], None, far()).is_err());
    let empty = CommandSpec { argv: vec![], timeout: Duration::from_secs(1), max_output: 1 };
    assert!(Job::spawn(supervisor(), &empty, &[], None, far()).is_err());
}

#[test]
fn bad_arguments_exit_2_with_usage() {
    let deadline = monotonic_ns(far()).to_string();
    for args in [
        vec![],
        vec!["--deadline-ns", &deadline],
        vec!["--deadline-ns", &deadline, "--"],
        vec!["--deadline-ns", "soon", "--", "true"],
        vec!["--", "true"],
        vec!["--bogus", "--", "true"],
    ] {
        let out = Command::new(SUPERVISOR).args(&args).stdin(Stdio::null()).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage:"), "{args:?}");
    }
}

#[test]
fn the_report_is_the_last_line_of_stderr() {
    let deadline = monotonic_ns(far()).to_string();
    let mut sup = Command::new(SUPERVISOR)
        .args(["--deadline-ns", &deadline, "--", "sh", "-c", "echo out; echo err >&2; exit 4"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = sup.stdin.take(); // held open until the command is done
    let out = sup.wait_with_output().unwrap();
    drop(pipe);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\nringd-supervise: exited 4\n");
}

#[test]
fn monotonic_ns_is_the_monotonic_clock() {
    let now = Instant::now();
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let clock = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    let ns = monotonic_ns(now);
    assert!(ns.abs_diff(clock) < 50_000_000, "{ns} vs {clock}");
    let later = monotonic_ns(now + Duration::from_secs(1));
    assert!(later.abs_diff(ns + 1_000_000_000) < 1_000_000);
}
