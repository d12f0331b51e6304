//! Runs ringd's configured command services under `ringd-supervise`
//! (ringd.md, Services, "(safety) Supervisor").
//!
//! Each command runs under its own supervisor process, which holds the
//! command's CLOCK_MONOTONIC deadline and kills the command's process group at
//! that deadline, or at once when the pipe from ringd closes, without ringd's
//! help: a ringd that is paused (SIGSTOP) or killed leaves no command running
//! past its deadline. ringd moves the deadline through that pipe
//! ([`JobControl::extend`]), never past `timeout` after the start.
//!
//! A [`Job`] is one running command. It can be driven whole ([`Job::extend`],
//! [`Job::kill`], [`Job::wait`]) or split ([`Job::split`]) into a
//! [`JobControl`], which the driver keeps to extend or kill, and a
//! [`JobWaiter`], whose [`JobWaiter::wait`] future runs in a spawned task.
//! Dropping the [`JobControl`] (or the [`Job`]) closes the pipe: the
//! supervisor kills the command at once, exactly as if ringd had died.
//!
//! The protocol with `ringd-supervise` (see that binary's documentation):
//! `ringd-supervise --deadline-ns NS -- CMD [ARGS...]`; `extend NS` lines on
//! its stdin; the command's stdout is the supervisor's stdout; the last line
//! of the supervisor's stderr reports how the command ended.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

/// The environment variable that names the supervisor binary, overriding the
/// default (`ringd-supervise` next to the running executable).
pub const SUPERVISOR_ENV: &str = "RINGD_SUPERVISOR";

/// The environment variable that carries the fence to a command.
pub const FENCE_ENV: &str = "FTCOORD_FENCE";

/// The prefix of the supervisor's report line.
const REPORT_PREFIX: &str = "ringd-supervise: ";

/// How much of the end of the supervisor's stderr is kept (the report line,
/// and the end of the command's own stderr, which is logged).
const STDERR_TAIL: usize = 16 * 1024;

/// How long to wait, once the supervisor has exited, for end of file on its
/// stdout and stderr. The supervisor kills the command's whole process group
/// before it exits, so end of file comes at once, unless something left that
/// group (`setsid`) and still holds the pipes: then it is not waited for.
const EOF_GRACE: Duration = Duration::from_secs(1);

/// A configured command service: what to run and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// The program and its first arguments (never run through a shell); the
    /// request's arguments follow them.
    pub argv: Vec<String>,
    /// The most a run may last from its start, extensions included
    /// (`timeout_ms`).
    pub timeout: Duration,
    /// The most bytes of the command's stdout returned; the rest is read and
    /// discarded.
    pub max_output: usize,
}

/// Why the supervisor killed a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// The deadline passed.
    Deadline,
    /// The pipe from ringd closed: [`JobControl::kill`], a dropped
    /// [`JobControl`], or ringd died.
    PipeClosed,
}

/// How a supervised command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutcome {
    /// The command exited with `status`.
    Exited {
        /// Its exit status.
        status: i32,
        /// Its stdout, at most `max_output` bytes (lossy UTF-8).
        stdout: String,
        /// Whether it wrote more than `max_output` bytes.
        truncated: bool,
    },
    /// The command was killed by a signal that the supervisor did not send.
    Signalled {
        /// The signal number.
        signal: i32,
        /// Its stdout, at most `max_output` bytes (lossy UTF-8).
        stdout: String,
        /// Whether it wrote more than `max_output` bytes.
        truncated: bool,
    },
    /// The supervisor killed the command's process group.
    Killed {
        /// Why.
        why: KillReason,
        /// What it wrote to stdout before, at most `max_output` bytes.
        stdout: String,
        /// Whether it wrote more than `max_output` bytes.
        truncated: bool,
    },
    /// The command could not be started (no such program, ...).
    SpawnFailed(String),
    /// The supervisor itself failed: it ended without a report (killed, or
    /// its arguments were refused). The command may not have run, or (if the
    /// supervisor was killed) may still be running.
    SupervisorFailed(String),
}

/// One running supervised command: a [`JobControl`] and a [`JobWaiter`].
#[derive(Debug)]
pub struct Job {
    control: JobControl,
    waiter: JobWaiter,
}

/// The ringd end of the pipe to a supervisor: moves the deadline or kills.
/// Dropping it kills the command (as [`JobControl::kill`] does).
#[derive(Debug)]
pub struct JobControl {
    /// The write end of the supervisor's stdin (non-blocking); `None` once
    /// closed.
    pipe: Option<File>,
    /// When the job started.
    start: Instant,
    /// `start + timeout`: no deadline goes past it.
    limit: Instant,
    /// The deadline the supervisor was last given.
    deadline: Instant,
}

/// Waits for a supervised command's end and collects its output.
#[derive(Debug)]
pub struct JobWaiter {
    child: Child,
    stdout: ChildStdout,
    stderr: ChildStderr,
    max_output: usize,
}

impl Job {
    /// Starts `supervisor` (the `ringd-supervise` binary, see
    /// [`supervisor_path`]) running `spec.argv` followed by `args`, with
    /// `FTCOORD_FENCE=<fence>` (decimal) in its environment if `fence` is
    /// `Some` (and no `FTCOORD_FENCE` at all otherwise), under the deadline
    /// `min(deadline, now + spec.timeout)`.
    ///
    /// The supervisor runs in a process group of its own (signals for
    /// ringd's group, such as a terminal's Ctrl-C or SIGSTOP, do not reach
    /// it) and the command in another. An error means the supervisor could
    /// not be started; a command that cannot be started gives
    /// [`JobOutcome::SpawnFailed`]. Must be called within a tokio runtime.
    pub fn spawn(
        supervisor: &Path,
        spec: &CommandSpec,
        args: &[String],
        fence: Option<u128>,
        deadline: Instant,
    ) -> io::Result<Job> {
        if spec.argv.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a command service needs a program"));
        }
        let start = Instant::now();
        // A timeout too long for Instant: a century is as good as forever.
        let limit =
            start.checked_add(spec.timeout).unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 24 * 3600));
        let deadline = deadline.min(limit);

        let mut cmd = Command::new(supervisor);
        cmd.arg("--deadline-ns")
            .arg(monotonic_ns(deadline).to_string())
            .arg("--")
            .args(&spec.argv)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            // Never kill the supervisor: it is what kills the command.
            .kill_on_drop(false);
        match fence {
            Some(fence) => cmd.env(FENCE_ENV, fence.to_string()),
            None => cmd.env_remove(FENCE_ENV),
        };
        let mut child = cmd.spawn()?;
        let missing = || io::Error::other("supervisor pipe missing");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take().ok_or_else(missing)?;
        // Writes to the supervisor must never block ringd: a supervisor that
        // stopped reading gets an error (WouldBlock) instead.
        let pipe = stdin.into_owned_fd()?;
        rustix::io::ioctl_fionbio(&pipe, true)?;
        Ok(Job {
            control: JobControl { pipe: Some(File::from(pipe)), start, limit, deadline },
            waiter: JobWaiter { child, stdout, stderr, max_output: spec.max_output },
        })
    }

    /// Moves the deadline (see [`JobControl::extend`]).
    pub fn extend(&mut self, deadline: Instant) -> io::Result<()> {
        self.control.extend(deadline)
    }

    /// Closes the pipe: the supervisor kills the command at once.
    pub fn kill(&mut self) {
        self.control.kill();
    }

    /// The deadline the supervisor was last given.
    pub fn deadline(&self) -> Instant {
        self.control.deadline()
    }

    /// The limit no deadline passes: start + `timeout`.
    pub fn limit(&self) -> Instant {
        self.control.limit()
    }

    /// Waits for the command's end. The pipe stays open meanwhile (dropping
    /// this future closes it, and so kills the command).
    pub async fn wait(self) -> JobOutcome {
        let (control, waiter) = self.split();
        let outcome = waiter.wait().await;
        drop(control);
        outcome
    }

    /// Splits the job into its control, to keep (dropping it kills the
    /// command), and its waiter, to await (e.g. in a spawned task).
    pub fn split(self) -> (JobControl, JobWaiter) {
        (self.control, self.waiter)
    }
}

impl JobControl {
    /// Moves the deadline to `deadline`, later or earlier, but never past the
    /// limit (start + `timeout`): a later one is clamped to it. An error
    /// means the supervisor did not get the new deadline (it has ended, or is
    /// not reading its pipe); it keeps the previous one.
    pub fn extend(&mut self, deadline: Instant) -> io::Result<()> {
        let deadline = deadline.min(self.limit);
        let Some(pipe) = self.pipe.as_mut() else {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the job was killed"));
        };
        if deadline == self.deadline {
            return Ok(());
        }
        // One short line: a pipe writes it whole or not at all (PIPE_BUF).
        let line = format!("extend {}\n", monotonic_ns(deadline));
        let written = pipe.write(line.as_bytes())?;
        if written != line.len() {
            // Not expected for a pipe; the supervisor ignores the cut line.
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short write to the supervisor"));
        }
        self.deadline = deadline;
        Ok(())
    }

    /// Closes the pipe: the supervisor kills the command's process group at
    /// once ([`KillReason::PipeClosed`]). Later extensions fail.
    pub fn kill(&mut self) {
        self.pipe = None;
    }

    /// Whether [`JobControl::kill`] was called.
    pub fn is_killed(&self) -> bool {
        self.pipe.is_none()
    }

    /// When the job started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// The deadline the supervisor was last given.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The limit no deadline passes: start + `timeout`.
    pub fn limit(&self) -> Instant {
        self.limit
    }
}

impl JobWaiter {
    /// Waits for the supervisor's end, reading the command's stdout (keeping
    /// at most `max_output` bytes, draining the rest so the command never
    /// blocks on a full pipe) and the supervisor's report.
    pub async fn wait(self) -> JobOutcome {
        let JobWaiter { mut child, mut stdout, mut stderr, max_output } = self;
        let mut out = Capture::new(max_output);
        let mut err = Tail::new(STDERR_TAIL);
        let (mut out_open, mut err_open) = (true, true);
        let mut out_buf = vec![0u8; 8192];
        let mut err_buf = vec![0u8; 4096];
        let mut status: Option<io::Result<ExitStatus>> = None;
        let grace = tokio::time::sleep(Duration::from_secs(365 * 24 * 3600));
        tokio::pin!(grace);
        while out_open || err_open || status.is_none() {
            tokio::select! {
                biased;
                r = stdout.read(&mut out_buf), if out_open => match r {
                    Ok(0) | Err(_) => out_open = false,
                    Ok(n) => out.push(&out_buf[..n]),
                },
                r = stderr.read(&mut err_buf), if err_open => match r {
                    Ok(0) | Err(_) => err_open = false,
                    Ok(n) => err.push(&err_buf[..n]),
                },
                s = child.wait(), if status.is_none() => {
                    status = Some(s);
                    grace.as_mut().reset(tokio::time::Instant::now() + EOF_GRACE);
                }
                () = &mut grace, if status.is_some() => break,
            }
        }
        let stderr = err.into_string();
        let (report, cmd_stderr) = split_report(&stderr);
        if !cmd_stderr.trim().is_empty() {
            tracing::debug!(stderr = %cmd_stderr.trim_end(), "command service stderr (end)");
        }
        let (stdout, truncated) = out.into_string();
        let status = match status {
            Some(Ok(status)) => status.to_string(),
            Some(Err(e)) => format!("wait failed: {e}"),
            None => "not waited for".to_owned(),
        };
        match report {
            Some(report) => parse_report(report, stdout, truncated).unwrap_or_else(|| {
                JobOutcome::SupervisorFailed(format!("unknown report {report:?} (supervisor {status})"))
            }),
            None => JobOutcome::SupervisorFailed(format!(
                "supervisor ended without a report ({status}): {}",
                cmd_stderr.trim_end().lines().last().unwrap_or("")
            )),
        }
    }
}

/// Splits the supervisor's stderr into its report (the last report line,
/// without its prefix) and what came before it.
fn split_report(stderr: &str) -> (Option<&str>, &str) {
    let trimmed = stderr.trim_end_matches(['\n', '\r']);
    let mut end = trimmed.len();
    loop {
        let line_start = trimmed[..end].rfind('\n').map_or(0, |i| i + 1);
        let line = trimmed[line_start..end].trim_end_matches('\r');
        if let Some(report) = line.strip_prefix(REPORT_PREFIX) {
            if !report.starts_with("warning:") {
                return (Some(report), &stderr[..line_start]);
            }
        }
        if line_start == 0 {
            return (None, stderr);
        }
        end = line_start - 1;
    }
}

/// Parses a report line (without its prefix).
fn parse_report(report: &str, stdout: String, truncated: bool) -> Option<JobOutcome> {
    let (word, rest) = report.split_once(' ').unwrap_or((report, ""));
    Some(match (word, rest) {
        ("exited", n) => JobOutcome::Exited { status: n.parse().ok()?, stdout, truncated },
        ("signalled", n) => JobOutcome::Signalled { signal: n.parse().ok()?, stdout, truncated },
        ("killed", "deadline") => JobOutcome::Killed { why: KillReason::Deadline, stdout, truncated },
        ("killed", "pipe_closed") => JobOutcome::Killed { why: KillReason::PipeClosed, stdout, truncated },
        ("spawn_failed", reason) => JobOutcome::SpawnFailed(reason.to_owned()),
        _ => return None,
    })
}

/// The first `max` bytes of a stream, and whether there were more.
struct Capture {
    buf: Vec<u8>,
    max: usize,
    truncated: bool,
}

impl Capture {
    fn new(max: usize) -> Capture {
        Capture { buf: Vec::new(), max, truncated: false }
    }

    fn push(&mut self, data: &[u8]) {
        let room = self.max - self.buf.len();
        if data.len() > room {
            self.truncated = true;
        }
        self.buf.extend_from_slice(&data[..data.len().min(room)]);
    }

    fn into_string(self) -> (String, bool) {
        (String::from_utf8_lossy(&self.buf).into_owned(), self.truncated)
    }
}

/// The last `max` bytes of a stream.
struct Tail {
    buf: Vec<u8>,
    max: usize,
}

impl Tail {
    fn new(max: usize) -> Tail {
        Tail { buf: Vec::new(), max }
    }

    fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        if self.buf.len() > 2 * self.max {
            self.buf.drain(..self.buf.len() - self.max);
        }
    }

    fn into_string(mut self) -> String {
        if self.buf.len() > self.max {
            self.buf.drain(..self.buf.len() - self.max);
        }
        String::from_utf8_lossy(&self.buf).into_owned()
    }
}

/// The supervisor binary: `$RINGD_SUPERVISOR` if set, otherwise
/// `ringd-supervise` next to the running executable (or, failing that,
/// `ringd-supervise` looked up in `PATH`).
pub fn supervisor_path() -> PathBuf {
    if let Some(path) = std::env::var_os(SUPERVISOR_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    match std::env::current_exe() {
        Ok(exe) => exe.with_file_name("ringd-supervise"),
        Err(_) => PathBuf::from("ringd-supervise"),
    }
}

/// The current CLOCK_MONOTONIC time in nanoseconds.
fn clock_monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(ts.tv_sec).unwrap_or(0).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// `at` as absolute CLOCK_MONOTONIC nanoseconds, the supervisor's clock.
/// std's `Instant` reads CLOCK_MONOTONIC on Linux, so this is `at`'s offset
/// from now added to the clock's reading now (exact to a few microseconds).
pub fn monotonic_ns(at: Instant) -> u64 {
    let now = Instant::now();
    let now_ns = clock_monotonic_ns();
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if at >= now {
        now_ns.saturating_add(nanos(at - now))
    } else {
        now_ns.saturating_sub(nanos(now - at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_is_the_last_report_line() {
        let (report, before) = split_report("oops\nringd-supervise: exited 3\n");
        assert_eq!(report, Some("exited 3"));
        assert_eq!(before, "oops\n");
        let (report, _) = split_report("ringd-supervise: warning: ignored\nringd-supervise: killed deadline");
        assert_eq!(report, Some("killed deadline"));
        let (report, _) = split_report("ringd-supervise: exited 0\nringd-supervise: warning: x\n");
        assert_eq!(report, Some("exited 0"));
        assert_eq!(split_report("no report\n").0, None);
        assert_eq!(split_report("").0, None);
    }

    #[test]
    fn reports_parse() {
        let out = || String::from("x");
        assert_eq!(
            parse_report("exited 3", out(), false),
            Some(JobOutcome::Exited { status: 3, stdout: out(), truncated: false })
        );
        assert_eq!(
            parse_report("signalled 15", out(), true),
            Some(JobOutcome::Signalled { signal: 15, stdout: out(), truncated: true })
        );
        assert_eq!(
            parse_report("killed pipe_closed", out(), false),
            Some(JobOutcome::Killed { why: KillReason::PipeClosed, stdout: out(), truncated: false })
        );
        assert_eq!(
            parse_report("spawn_failed No such file", out(), false),
            Some(JobOutcome::SpawnFailed("No such file".to_owned()))
        );
        assert_eq!(parse_report("exited x", out(), false), None);
        assert_eq!(parse_report("killed later", out(), false), None);
    }

    #[test]
    fn capture_and_tail_bound() {
        let mut c = Capture::new(4);
        c.push(b"ab");
        c.push(b"cdef");
        c.push(b"gh");
        assert_eq!(c.into_string(), ("abcd".to_owned(), true));
        let mut c = Capture::new(4);
        c.push(b"abcd");
        assert_eq!(c.into_string(), ("abcd".to_owned(), false));
        let mut t = Tail::new(3);
        for chunk in [&b"abc"[..], b"defg", b"h"] {
            t.push(chunk);
        }
        assert_eq!(t.into_string(), "fgh");
    }
}
