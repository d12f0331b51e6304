//! CMD of `ftctl lock` (and of `ftctl elect`, which holds a leadership the
//! same way) runs under a supervisor process, so that its lease holds
//! without ftctl's help (docs/interfaces.md, "ftctl lock").
//!
//! ftctl may be paused (SIGSTOP, a stopped terminal job, a VM pause) or
//! killed while CMD runs. A paused ftctl forwards no renewal, and a killed
//! one closes its connection, so the daemon releases the lock and may grant
//! it to the next client at once. Either way CMD must stop: at the lease's
//! end, or at once. ftctl cannot do that itself while it is stopped or dead,
//! so it starts its own executable as `ftctl supervise` (a hidden command),
//! which starts CMD as its child and runs [`supervise::supervise`]: SIGTERM
//! `--kill-grace` before the lease's end, SIGKILL at it, SIGKILL at once
//! when ftctl goes away. ftctl moves the deadline with each renewal
//! (`extend`), says `lost` when the lock is lost, and forwards SIGINT and
//! SIGTERM (`signal`).
//!
//! The channel is a Unix socket in a fresh directory only this user can
//! enter (the supervisor's stdin, stdout and stderr are ftctl's, so CMD
//! keeps the terminal). CMD starts on ftctl's first `extend` (the
//! deadline as it is then: renewals that came while the supervisor
//! started count). The supervisor writes `started PID` once CMD runs,
//! then one report line when CMD has been reaped:
//!
//! ```text
//! ended <status> <why SIGTERM or -> <why SIGKILL or ->
//! late
//! spawn_failed <not_found|other> <reason>
//! ```
//!
//! where the status is CMD's as a shell reports it (`128 + N` if signal N
//! ended it) and a why is `deadline`, `lost` or `closed`. The supervisor ignores
//! SIGINT, SIGTERM, SIGHUP and SIGQUIT (a terminal's Ctrl-C reaches the
//! whole process group; ftctl forwards what CMD should get), so only
//! SIGKILL ends it early; ftctl then kills CMD itself (its pid came in
//! `started`) and reports the lock lost.

use std::ffi::OsString;
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use supervise::{Control, Ended, NotRun, Notice, Spec, Stop};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixListener;
use tokio::process::{Child, Command};

/// How long the supervisor may take to start and connect.
const START: Duration = Duration::from_secs(10);
/// How long a control line may take to write (the supervisor reads them at
/// once; a stopped one must not stop ftctl).
const WRITE: Duration = Duration::from_secs(1);

/// What `ftctl supervise` is given (by ftctl itself).
#[derive(Debug)]
pub struct SuperviseArgs {
    /// The Unix socket ftctl listens on.
    pub control: PathBuf,
    /// SIGKILL at this CLOCK_MONOTONIC nanosecond (the lease's end).
    pub deadline_ns: u64,
    /// SIGTERM this many nanoseconds before.
    pub grace_ns: u64,
    /// The lock, for messages (``lock `NAME` ``).
    pub lock: String,
    /// CMD and its arguments.
    pub cmd: Vec<OsString>,
}

/// `ftctl supervise`: runs CMD under its lease, reporting to ftctl; exits 0
/// once CMD has been reaped (1 if ftctl's socket cannot be reached: nothing
/// ran).
pub fn run_supervisor(args: &SuperviseArgs) -> ExitCode {
    // Signals for the whole process group (Ctrl-C) must not end the
    // supervisor: ftctl forwards what CMD should get. The handlers are
    // registered for the life of the process; nothing polls them.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build();
    let _ignored = runtime.as_ref().ok().map(|rt| {
        let _guard = rt.enter();
        use tokio::signal::unix::{signal, SignalKind};
        [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup(), SignalKind::quit()]
            .map(|kind| signal(kind).ok())
    });
    let stream = match UnixStream::connect(&args.control) {
        Ok(stream) => stream,
        Err(e) => {
            eprintln!("ftctl supervise: cannot reach ftctl at {}: {e}; nothing run", args.control.display());
            return ExitCode::from(crate::exit::ERROR);
        }
    };
    let (Ok(read), Ok(mut write)) = (stream.try_clone(), stream.try_clone()) else {
        eprintln!("ftctl supervise: cannot use the socket to ftctl; nothing run");
        return ExitCode::from(crate::exit::ERROR);
    };
    // The ftctl that started this supervisor (its parent now).
    let ftctl = rustix::process::getppid();
    let program = args.cmd.first().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    // CMD starts only on ftctl's go: a first `extend` with the deadline as
    // it is now (renewals may have come while this process started; a slow
    // start could otherwise outlast a short lease). End of file first:
    // ftctl gave up, nothing runs.
    let mut control = BufReader::new(read);
    let mut first = Vec::new();
    let deadline_ns = match std::io::BufRead::read_until(&mut control, b'\n', &mut first) {
        Ok(n) if n > 0 => match supervise::Control::parse(&first) {
            Some(supervise::Control::Extend(ns)) => ns,
            _ => args.deadline_ns,
        },
        _ => return ExitCode::from(crate::exit::OK),
    };
    let spec = Spec { argv: args.cmd.clone(), deadline_ns, grace_ns: args.grace_ns, group: false };
    let lock = &args.lock;
    let ended = supervise::supervise(
        &spec,
        |_| {},
        control,
        |notice| match notice {
            Notice::Started(pid) => {
                let _ = write.write_all(format!("started {pid}\n").as_bytes());
            }
            Notice::Term(Stop::Deadline, left_ns) => eprintln!(
                "ftctl: the lease ends in {} and was not renewed: SIGTERM to {program} (SIGKILL when it ends)",
                client::duration::show(Duration::from_nanos(left_ns))
            ),
            // ftctl said why.
            Notice::Term(Stop::Lost | Stop::Closed, _) => {}
            Notice::Kill(Stop::Closed) => {
                eprintln!(
                    "ftctl: ftctl went away while {program} ran (the daemon released the {lock}): SIGKILL to {program}"
                )
            }
            Notice::Kill(Stop::Deadline | Stop::Lost) => {
                eprintln!("ftctl: {program} still running as the lease ends: killed (SIGKILL)")
            }
            Notice::Ignored(line) => eprintln!("ftctl supervise: warning: ignored control line {line:?}"),
        },
    );
    let _ = write.write_all(report_line(&ended).as_bytes());
    if let Some(ftctl) = ftctl {
        end_a_stopped_ftctl(ftctl, lock);
    }
    ExitCode::from(crate::exit::OK)
}

/// How long an ftctl found stopped after its command ended may stay so
/// before its supervisor ends it.
const STOPPED_GRACE: Duration = Duration::from_secs(1);

/// CMD has ended (by itself, or stopped for its lease's end). A running
/// ftctl reads the report and releases. A stopped one (SIGSTOP, a
/// debugger) cannot, and its open connection keeps the lock held at the
/// daemon for as long as it stays stopped: no other client gets it. After
/// [`STOPPED_GRACE`] still stopped, it gets SIGKILL: its connection closes
/// and the daemon releases the lock (CMD is already dead, so nothing runs
/// unprotected).
fn end_a_stopped_ftctl(ftctl: rustix::process::Pid, lock: &str) {
    let stopped = || {
        // Still our parent (not reparented: ftctl has not died), and in
        // state T (stopped or traced) per /proc/PID/stat.
        rustix::process::getppid() == Some(ftctl) && proc_state(ftctl.as_raw_nonzero().get()) == Some('T')
    };
    let until = std::time::Instant::now() + STOPPED_GRACE;
    while stopped() {
        if std::time::Instant::now() >= until {
            eprintln!(
                "ftctl: ftctl (pid {}) stayed stopped after its command ended: SIGKILL to it, so that the daemon \
                 releases the {lock}",
                ftctl.as_raw_nonzero()
            );
            let _ = rustix::process::kill_process(ftctl, rustix::process::Signal::KILL);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The state letter of process `pid` (`/proc/PID/stat`'s third field, after
/// the command name in parentheses), upper-cased (`t`, traced, reads `T`).
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    state_of_stat(&stat)
}

/// [`proc_state`] of a `/proc/PID/stat` line.
fn state_of_stat(stat: &str) -> Option<char> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next()?.chars().next().map(|c| c.to_ascii_uppercase())
}

/// The report line for how CMD ended (with its newline).
fn report_line(ended: &Result<Ended, NotRun>) -> String {
    let word = |stop: Option<Stop>| stop.map_or("-", Stop::word);
    match ended {
        Ok(e) => format!("ended {} {} {}\n", crate::exit::of_status(e.status), word(e.termed), word(e.killed)),
        Err(NotRun::Late) => "late\n".to_owned(),
        Err(NotRun::Spawn(e)) => {
            let kind = if e.kind() == std::io::ErrorKind::NotFound { "not_found" } else { "other" };
            format!("spawn_failed {kind} {}\n", e.to_string().replace(['\n', '\r'], " "))
        }
    }
}

/// How CMD ended, as the supervisor reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// CMD started with this pid (the first line).
    Started(u32),
    /// CMD ended with this shell status (`128 + N` for signal N); SIGTERM
    /// and SIGKILL were sent for these reasons, if at all.
    Ended { status: u8, termed: Option<Stop>, killed: Option<Stop> },
    /// The lease had ended before CMD could start.
    Late,
    /// CMD could not be started (`not_found`: no such program).
    SpawnFailed { not_found: bool, reason: String },
    /// The supervisor went away without a report (it was killed), or said
    /// something else.
    Vanished(String),
}

impl Report {
    /// Whether the lease's end stopped CMD (SIGTERM or SIGKILL for it).
    pub fn lease_ran_out(&self) -> bool {
        matches!(self, Report::Ended { termed, killed, .. }
            if *termed == Some(Stop::Deadline) || *killed == Some(Stop::Deadline))
    }
}

/// Parses one line from the supervisor.
fn parse_report(line: &str) -> Report {
    let stop = |w: &str| match w {
        "deadline" => Some(Some(Stop::Deadline)),
        "lost" => Some(Some(Stop::Lost)),
        "closed" => Some(Some(Stop::Closed)),
        "-" => Some(None),
        _ => None,
    };
    let words: Vec<&str> = line.split(' ').collect();
    let parsed = match words.as_slice() {
        ["started", pid] => pid.parse().ok().map(Report::Started),
        ["late"] => Some(Report::Late),
        ["ended", status, termed, killed] => match (status.parse(), stop(termed), stop(killed)) {
            (Ok(status), Some(termed), Some(killed)) => Some(Report::Ended { status, termed, killed }),
            _ => None,
        },
        ["spawn_failed", kind, ..] => {
            let reason = line.splitn(3, ' ').nth(2).unwrap_or_default().to_owned();
            Some(Report::SpawnFailed { not_found: *kind == "not_found", reason })
        }
        _ => None,
    };
    parsed.unwrap_or_else(|| Report::Vanished(format!("it said {line:?}")))
}

/// ftctl's end of a running supervisor: reports in, control lines out.
#[derive(Debug)]
pub struct Supervised {
    /// The supervisor's lines.
    pub reports: Reports,
    /// Where control lines go.
    pub control: ControlLine,
}

/// The supervisor's report lines.
#[derive(Debug)]
pub struct Reports {
    lines: Lines<AsyncBufReader<OwnedReadHalf>>,
    child: Child,
    /// The directory of the socket, removed on drop.
    _dir: tempfile::TempDir,
}

/// The control lines to the supervisor.
#[derive(Debug)]
pub struct ControlLine {
    write: OwnedWriteHalf,
}

impl Supervised {
    /// Starts the supervisor running `cmd` with `env` added and the
    /// variables `removed` taken out, SIGKILL at `deadline` (this host's
    /// CLOCK_MONOTONIC) and SIGTERM `grace` before; `lock` names the lock
    /// (or election) in its messages. Returns once it is connected.
    pub async fn start(
        cmd: &[OsString],
        env: &[(&str, String)],
        removed: &[&str],
        deadline: timer::Instant,
        grace: Duration,
        lock: &str,
    ) -> std::io::Result<Supervised> {
        // A directory only this user can enter (mode 0700).
        let dir = tempfile::Builder::new().prefix("ftctl-lock-").tempdir()?;
        let path = dir.path().join("control");
        let listener = UnixListener::bind(&path)?;
        let mut child = spawn(&path, cmd, env, removed, deadline, grace, lock)?;
        let accepted = tokio::select! {
            accepted = tokio::time::timeout(START, listener.accept()) => accepted,
            status = child.wait() => {
                let why = status.map_or_else(|e| e.to_string(), |s| format!("it exited ({s})"));
                return Err(std::io::Error::other(format!("the supervisor did not start: {why}")));
            }
        };
        let (stream, _) = match accepted {
            Ok(accepted) => accepted?,
            Err(_) => {
                let _ = child.start_kill();
                return Err(std::io::Error::other("the supervisor did not connect within 10 s"));
            }
        };
        drop(listener);
        let (read, write) = stream.into_split();
        Ok(Supervised {
            reports: Reports { lines: AsyncBufReader::new(read).lines(), child, _dir: dir },
            control: ControlLine { write },
        })
    }
}

/// `ftctl supervise --control PATH … -- CMD…` as a command (ftctl's own
/// executable; stdio inherited, so CMD keeps the terminal).
fn spawn(
    path: &Path,
    cmd: &[OsString],
    env: &[(&str, String)],
    removed: &[&str],
    deadline: timer::Instant,
    grace: Duration,
    lock: &str,
) -> std::io::Result<Child> {
    let exe = std::env::current_exe()?;
    let deadline_ns = deadline.as_micros().saturating_mul(1_000);
    let grace_ns = u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX);
    let mut command = Command::new(&exe);
    command
        .arg("supervise")
        .arg("--control")
        .arg(path)
        .arg("--deadline-ns")
        .arg(deadline_ns.to_string())
        .arg("--grace-ns")
        .arg(grace_ns.to_string())
        .arg("--lock")
        .arg(lock)
        .arg("--")
        .args(cmd)
        .stdin(Stdio::inherit())
        // Never killed with ftctl: it is what stops CMD when ftctl dies.
        .kill_on_drop(false);
    for key in removed {
        command.env_remove(key);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    command.spawn()
}

impl Reports {
    /// The supervisor's next line (cancel-safe); [`Report::Vanished`] once
    /// it has gone away.
    pub async fn next(&mut self) -> Report {
        match self.lines.next_line().await {
            Ok(Some(line)) => parse_report(&line),
            Ok(None) => Report::Vanished("it went away without a report".to_owned()),
            Err(e) => Report::Vanished(format!("reading its report failed: {e}")),
        }
    }

    /// Reaps the supervisor (it exits right after its report).
    pub async fn reap(mut self) {
        let _ = tokio::time::timeout(START, self.child.wait()).await;
    }
}

impl ControlLine {
    /// Sends `control` (best effort: a supervisor that is gone has reported
    /// or will be found gone by [`Reports::next`]).
    pub async fn send(&mut self, control: Control) {
        let line = control.line();
        let _ = tokio::time::timeout(WRITE, self.write.write_all(line.as_bytes())).await;
    }
}

/// The control line for a lease now ending at `until`.
pub fn extend(until: timer::Instant) -> Control {
    Control::Extend(until.as_micros().saturating_mul(1_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_round_trip() {
        use std::os::unix::process::ExitStatusExt;
        use std::process::ExitStatus;
        let ended = |raw, termed, killed| Ok(Ended { status: ExitStatus::from_raw(raw), termed, killed });
        let back = |e: &Result<Ended, NotRun>| parse_report(report_line(e).trim_end());
        // Exit code 3 (wait status 3 << 8), no signal sent.
        assert_eq!(back(&ended(3 << 8, None, None)), Report::Ended { status: 3, termed: None, killed: None });
        // Killed by SIGKILL at the lease's end after a SIGTERM for it.
        assert_eq!(
            back(&ended(9, Some(Stop::Deadline), Some(Stop::Deadline))),
            Report::Ended { status: 137, termed: Some(Stop::Deadline), killed: Some(Stop::Deadline) }
        );
        assert_eq!(
            back(&ended(15, Some(Stop::Lost), None)),
            Report::Ended { status: 143, termed: Some(Stop::Lost), killed: None }
        );
        assert!(!back(&ended(9, None, Some(Stop::Closed))).lease_ran_out());
        assert_eq!(back(&Err(NotRun::Late)), Report::Late);
        let missing = NotRun::Spawn(std::io::Error::new(std::io::ErrorKind::NotFound, "No such file\nor directory"));
        assert_eq!(
            back(&Err(missing)),
            Report::SpawnFailed { not_found: true, reason: "No such file or directory".into() }
        );
        let denied = NotRun::Spawn(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied"));
        assert_eq!(back(&Err(denied)), Report::SpawnFailed { not_found: false, reason: "denied".into() });
    }

    #[test]
    fn the_state_of_a_proc_stat_line() {
        assert_eq!(state_of_stat("42 (ftctl) T 1 42 42 0"), Some('T'));
        assert_eq!(state_of_stat("42 (ftctl) t 1 42 42 0"), Some('T'));
        assert_eq!(state_of_stat("42 (a) b) S 1 42"), Some('S'));
        assert_eq!(state_of_stat("42 (ftctl)"), None);
        assert_eq!(state_of_stat("garbage"), None);
    }

    #[test]
    fn the_lease_ran_out_when_it_stopped_cmd() {
        let ended = |termed, killed| Report::Ended { status: 0, termed, killed };
        assert!(ended(Some(Stop::Deadline), None).lease_ran_out());
        assert!(ended(Some(Stop::Lost), Some(Stop::Deadline)).lease_ran_out());
        assert!(!ended(Some(Stop::Lost), Some(Stop::Lost)).lease_ran_out());
        assert!(!ended(None, None).lease_ran_out());
        assert!(!Report::Late.lease_ran_out());
    }

    #[test]
    fn anything_else_from_the_supervisor_is_a_vanished_supervisor() {
        for line in
            ["", "started", "started x", "ended 1 -", "ended x - -", "ended 256 - -", "ended 1 maybe -", "hello"]
        {
            assert!(matches!(parse_report(line), Report::Vanished(_)), "{line:?}");
        }
        assert_eq!(parse_report("started 42"), Report::Started(42));
    }
}
