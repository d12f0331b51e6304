//! `ringd-supervise`: runs one command service of ringd under a deadline that
//! holds without ringd's help (ringd.md, Services, "(safety) Supervisor").
//!
//! ```text
//! ringd-supervise --deadline-ns <absolute CLOCK_MONOTONIC ns> -- CMD [ARGS...]
//! ```
//!
//! CMD runs (argv only, never through a shell) in a new process group, with
//! the environment the supervisor inherited (ringd puts `FTCOORD_FENCE` there)
//! and stdin from `/dev/null`; its stdout and stderr are the supervisor's.
//! The supervisor reads its own stdin, the pipe from ringd, line by line:
//!
//! - `extend <abs ns>` moves the deadline (later or earlier);
//! - end of file or a read error (ringd closed the pipe, or died) kills CMD's
//!   process group with SIGKILL at once;
//! - other lines are ignored (with a warning on stderr).
//!
//! At the deadline the process group gets SIGKILL. When CMD exits on its own,
//! whatever it left in its process group is killed too, so nothing of it
//! outlives the supervisor (and ringd sees end of file on CMD's stdout). The
//! process group is always killed before CMD is reaped, so its id cannot have
//! been reused by then.
//!
//! Once the group is dead, the supervisor writes one report line, the last
//! line of its stderr, and exits 0:
//!
//! ```text
//! ringd-supervise: exited <code>
//! ringd-supervise: signalled <signal>
//! ringd-supervise: killed deadline
//! ringd-supervise: killed pipe_closed
//! ringd-supervise: spawn_failed <reason>
//! ```
//!
//! Bad arguments: a usage message and exit status 2.

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};
use rustix::time::ClockId;

const USAGE: &str = "usage: ringd-supervise --deadline-ns <absolute CLOCK_MONOTONIC ns> -- CMD [ARGS...]";

/// What the supervisor's threads tell its main loop.
enum Event {
    /// ringd moved the deadline.
    Extend(u64),
    /// ringd's pipe closed (or could not be read).
    PipeClosed,
    /// CMD exited (still unreaped).
    Exited,
}

/// Why the process group was killed.
#[derive(Clone, Copy)]
enum Kill {
    Deadline,
    PipeClosed,
}

fn main() -> ExitCode {
    let (deadline, argv) = match parse_args(std::env::args_os().skip(1).collect()) {
        Ok(parsed) => parsed,
        Err(msg) => {
            eprintln!("ringd-supervise: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let report = supervise(deadline, &argv);
    // The last line of stderr: everything in CMD's process group is dead now.
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "ringd-supervise: {report}");
    let _ = stderr.flush();
    ExitCode::SUCCESS
}

/// Parses `--deadline-ns NS -- CMD [ARGS...]`.
fn parse_args(args: Vec<OsString>) -> Result<(u64, Vec<OsString>), String> {
    let mut args = args.into_iter();
    let mut deadline = None;
    loop {
        let Some(arg) = args.next() else { return Err("missing `-- CMD`".to_owned()) };
        match arg.to_str() {
            Some("--deadline-ns") => {
                let value = args.next().ok_or("--deadline-ns needs a value")?;
                let value = value.to_str().and_then(|v| v.parse::<u64>().ok());
                deadline = Some(value.ok_or("--deadline-ns wants an integer number of nanoseconds")?);
            }
            Some("--") => break,
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    let deadline = deadline.ok_or("missing --deadline-ns")?;
    let argv: Vec<OsString> = args.collect();
    if argv.is_empty() {
        return Err("missing CMD after `--`".to_owned());
    }
    Ok((deadline, argv))
}

/// The current CLOCK_MONOTONIC time in nanoseconds.
fn now_ns() -> u64 {
    let ts = rustix::time::clock_gettime(ClockId::Monotonic);
    u64::try_from(ts.tv_sec).unwrap_or(0).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Runs CMD under the deadline; returns the report (without its prefix).
fn supervise(mut deadline: u64, argv: &[OsString]) -> String {
    if now_ns() >= deadline {
        // Never start a command whose time is already over.
        return "killed deadline".to_owned();
    }
    let mut child = match Command::new(&argv[0]).args(&argv[1..]).process_group(0).stdin(Stdio::null()).spawn() {
        Ok(child) => child,
        Err(e) => return format!("spawn_failed {}", one_line(&e.to_string())),
    };
    let pid = Pid::from_child(&child);

    let (tx, rx) = mpsc::channel();
    let exit_tx = tx.clone();
    std::thread::spawn(move || {
        // Wait for CMD's exit without reaping it: its pid (= its process
        // group's id) stays reserved until the group has been killed.
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
        while let Err(rustix::io::Errno::INTR) = rustix::process::waitid(WaitId::Pid(pid), options) {}
        let _ = exit_tx.send(Event::Exited);
    });
    std::thread::spawn(move || read_control(&tx));

    let killed = loop {
        let now = now_ns();
        if now >= deadline {
            break Some(Kill::Deadline);
        }
        match rx.recv_timeout(Duration::from_nanos(deadline - now)) {
            Ok(Event::Extend(to)) => deadline = to,
            Ok(Event::Exited) => break None,
            Ok(Event::PipeClosed) | Err(mpsc::RecvTimeoutError::Disconnected) => break Some(Kill::PipeClosed),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    };

    // CMD is not reaped yet, so `pid` still names its process group. Kill the
    // whole group: at the deadline, when the pipe closed, and also when CMD
    // exited on its own (whatever it left behind must not outlive it).
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    let status = loop {
        match child.wait() {
            Ok(status) => break Some(status),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break None,
        }
    };
    report(killed, status)
}

/// The report for how CMD ended.
fn report(killed: Option<Kill>, status: Option<ExitStatus>) -> String {
    let code = status.and_then(|s| s.code());
    let signal = status.and_then(|s| s.signal());
    match (killed, code, signal) {
        // The kill came too late: CMD had already exited by itself.
        (Some(_), Some(code), _) => format!("exited {code}"),
        (Some(Kill::Deadline), _, _) => "killed deadline".to_owned(),
        (Some(Kill::PipeClosed), _, _) => "killed pipe_closed".to_owned(),
        (None, Some(code), _) => format!("exited {code}"),
        (None, None, Some(signal)) => format!("signalled {signal}"),
        // Cannot happen for a child we spawned: call it a SIGKILL.
        (None, None, None) => format!("signalled {}", Signal::KILL.as_raw()),
    }
}

/// Reads ringd's control lines until end of file or a read error.
fn read_control(tx: &mpsc::Sender<Event>) {
    let mut stdin = std::io::stdin().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) if line.last() != Some(&b'\n') => break, // a cut line: the pipe closed
            Ok(_) => match parse_extend(&line) {
                Some(ns) => {
                    if tx.send(Event::Extend(ns)).is_err() {
                        return;
                    }
                }
                None => {
                    eprintln!("ringd-supervise: warning: ignored control line {:?}", String::from_utf8_lossy(&line))
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = tx.send(Event::PipeClosed);
}

/// Parses `extend <abs ns>\n`.
fn parse_extend(line: &[u8]) -> Option<u64> {
    let line = std::str::from_utf8(line).ok()?.trim_end_matches(['\n', '\r']);
    let ns = line.strip_prefix("extend ")?;
    ns.trim().parse().ok()
}

/// `s` on one line (the report must be exactly one line).
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}
