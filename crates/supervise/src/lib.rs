//! Runs one command under a deadline that holds without the help of the
//! process that asked for it.
//!
//! A lock's or a token's lease ends at an instant of the host's
//! CLOCK_MONOTONIC. The process holding the lease (ringd for a command
//! service, ftctl for `ftctl lock`) may be paused (SIGSTOP, a VM pause) or
//! killed while the command runs; the command must still stop when the lease
//! ends, and at once when its controller dies (the daemon then releases the
//! lock). So the command runs as the child of a small supervisor process,
//! `ringd-supervise` or `ftctl`'s own supervisor, which does only this:
//!
//! - SIGTERM to the command `grace` before the deadline (none when `grace` is
//!   zero), SIGKILL at the deadline;
//! - control lines from the controller, one per line: `extend NS` moves the
//!   deadline to the absolute CLOCK_MONOTONIC nanosecond NS (later or
//!   earlier); `lost` sends SIGTERM at once (unless sent already) and keeps
//!   SIGKILL at the deadline, which no longer moves; `signal INT` /
//!   `signal TERM` forward a signal the controller received;
//! - end of file on the control channel (the controller died or closed it)
//!   kills the command at once;
//! - a command that has not been started by the deadline is never started.
//!
//! The command is reaped only after every signal the supervisor sends it, so
//! its pid (and, with `group`, its process group's id) cannot have been
//! reused when it is signalled. With `group` the command runs in a new
//! process group and the whole group is signalled, and killed once the
//! command exits, so nothing it started outlives it.
//!
//! [`Watch`] decides what is due from the deadline, the grace and the
//! control lines seen (a pure state machine, tested on its own);
//! [`supervise`] runs it against a real process.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::io::{self, BufRead};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::sync::mpsc;
use std::time::Duration;

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};
use rustix::time::ClockId;

/// The current CLOCK_MONOTONIC time in nanoseconds (the clock every lease
/// deadline on this host is written in).
pub fn now_ns() -> u64 {
    let ts = rustix::time::clock_gettime(ClockId::Monotonic);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    u64::try_from(ts.tv_sec).unwrap_or(0).saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// A signal the controller forwards to the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// SIGINT.
    Int,
    /// SIGTERM.
    Term,
}

impl Forward {
    fn signal(self) -> Signal {
        match self {
            Forward::Int => Signal::INT,
            Forward::Term => Signal::TERM,
        }
    }
}

/// One control line from the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// `extend NS`: the deadline is now NS (absolute CLOCK_MONOTONIC ns).
    Extend(u64),
    /// `lost`: the lease is lost; SIGTERM now, SIGKILL at the deadline.
    Lost,
    /// `signal INT` / `signal TERM`: forward it to the command.
    Signal(Forward),
}

impl Control {
    /// Parses one line (its newline may be there or not).
    pub fn parse(line: &[u8]) -> Option<Control> {
        let line = std::str::from_utf8(line).ok()?.trim_end_matches(['\n', '\r']);
        match line.split_once(' ') {
            Some(("extend", ns)) => ns.trim().parse().ok().map(Control::Extend),
            Some(("signal", "INT")) => Some(Control::Signal(Forward::Int)),
            Some(("signal", "TERM")) => Some(Control::Signal(Forward::Term)),
            None if line == "lost" => Some(Control::Lost),
            _ => None,
        }
    }

    /// The line that [`Control::parse`] reads back, with its newline.
    pub fn line(&self) -> String {
        match self {
            Control::Extend(ns) => format!("extend {ns}\n"),
            Control::Lost => "lost\n".to_owned(),
            Control::Signal(Forward::Int) => "signal INT\n".to_owned(),
            Control::Signal(Forward::Term) => "signal TERM\n".to_owned(),
        }
    }
}

/// Why the supervisor signalled the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The deadline (or, for SIGTERM, the deadline minus the grace) came.
    Deadline,
    /// The controller said `lost`.
    Lost,
    /// The control channel closed: the controller went away.
    Closed,
}

impl Stop {
    /// One word for reports: `deadline`, `lost`, `closed`.
    pub fn word(self) -> &'static str {
        match self {
            Stop::Deadline => "deadline",
            Stop::Lost => "lost",
            Stop::Closed => "closed",
        }
    }
}

/// What is due now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Send SIGTERM now, for this reason.
    Term(Stop),
    /// Send SIGKILL now, for this reason (the end).
    Kill(Stop),
    /// Nothing before this many nanoseconds from now.
    Wait(u64),
}

/// The supervisor's decisions: when SIGTERM and SIGKILL are due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watch {
    deadline: u64,
    grace: u64,
    termed: Option<Stop>,
    lost: bool,
    closed: bool,
}

impl Watch {
    /// SIGKILL at `deadline`, SIGTERM `grace` before it (none if zero).
    pub fn new(deadline: u64, grace: u64) -> Watch {
        Watch { deadline, grace, termed: None, lost: false, closed: false }
    }

    /// The deadline now.
    pub fn deadline(&self) -> u64 {
        self.deadline
    }

    /// Why SIGTERM was sent, if it was.
    pub fn termed(&self) -> Option<Stop> {
        self.termed
    }

    /// A control line arrived. `extend` after `lost` changes nothing: a lost
    /// lease is not renewed.
    pub fn on_control(&mut self, control: Control) {
        match control {
            Control::Extend(to) if !self.lost => self.deadline = to,
            Control::Extend(_) | Control::Signal(_) => {}
            Control::Lost => self.lost = true,
        }
    }

    /// The control channel closed.
    pub fn on_closed(&mut self) {
        self.closed = true;
    }

    /// SIGTERM was sent for `why`.
    pub fn on_termed(&mut self, why: Stop) {
        self.termed.get_or_insert(why);
    }

    /// What is due at `now`.
    pub fn due(&self, now: u64) -> Due {
        if self.closed {
            return Due::Kill(Stop::Closed);
        }
        let why = if self.lost { Stop::Lost } else { Stop::Deadline };
        if now >= self.deadline {
            return Due::Kill(why);
        }
        if self.termed.is_some() || self.grace == 0 && !self.lost {
            return Due::Wait(self.deadline - now);
        }
        if self.lost {
            return Due::Term(Stop::Lost);
        }
        let term_at = self.deadline.saturating_sub(self.grace);
        if now >= term_at {
            Due::Term(Stop::Deadline)
        } else {
            Due::Wait(term_at - now)
        }
    }
}

/// What the supervisor tells its caller as it goes (for messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// The command started with this pid.
    Started(u32),
    /// SIGTERM was sent for this reason; the deadline is this many
    /// nanoseconds away.
    Term(Stop, u64),
    /// SIGKILL was sent for this reason (the command was still running).
    Kill(Stop),
    /// A control line that means nothing was ignored.
    Ignored(String),
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// Its wait status.
    pub status: ExitStatus,
    /// Why it was sent SIGTERM, if it was.
    pub termed: Option<Stop>,
    /// Why it was sent SIGKILL, if it was.
    pub killed: Option<Stop>,
}

/// Why the command did not run.
#[derive(Debug)]
pub enum NotRun {
    /// The deadline had passed before it could start.
    Late,
    /// It could not be started.
    Spawn(io::Error),
}

/// What the supervisor's threads tell its loop.
enum Event {
    Control(Control),
    Ignored(String),
    Closed,
    Exited,
}

/// What to run, and how.
#[derive(Debug)]
pub struct Spec {
    /// The command: program, then arguments (never through a shell).
    pub argv: Vec<OsString>,
    /// SIGKILL at this CLOCK_MONOTONIC nanosecond.
    pub deadline_ns: u64,
    /// SIGTERM this many nanoseconds before the deadline (0: none).
    pub grace_ns: u64,
    /// A process group of its own, signalled whole (ringd's services);
    /// otherwise the command stays in the supervisor's group (ftctl's CMD,
    /// which may read the terminal) and only it is signalled.
    pub group: bool,
}

/// Runs `spec` (the command configured further by `configure`: stdio,
/// environment) under its deadline, reading control lines from `control`
/// until end of file; `notice` hears what happens. Returns once the command
/// has been reaped.
pub fn supervise(
    spec: &Spec,
    configure: impl FnOnce(&mut Command),
    control: impl BufRead + Send + 'static,
    mut notice: impl FnMut(Notice),
) -> Result<Ended, NotRun> {
    let Some((program, args)) = spec.argv.split_first() else {
        return Err(NotRun::Spawn(io::Error::new(io::ErrorKind::InvalidInput, "no command")));
    };
    let mut watch = Watch::new(spec.deadline_ns, spec.grace_ns);
    if now_ns() >= watch.deadline() {
        // Never start a command whose time is already over.
        return Err(NotRun::Late);
    }
    let mut cmd = Command::new(program);
    cmd.args(args);
    if spec.group {
        cmd.process_group(0);
    }
    configure(&mut cmd);
    let mut child = cmd.spawn().map_err(NotRun::Spawn)?;
    let pid = Pid::from_child(&child);
    notice(Notice::Started(child.id()));
    let send = |sig: Signal| {
        // Best effort: ESRCH only once everything is dead already.
        let _ = if spec.group {
            rustix::process::kill_process_group(pid, sig)
        } else {
            rustix::process::kill_process(pid, sig)
        };
    };

    let (tx, rx) = mpsc::channel();
    let exit_tx = tx.clone();
    std::thread::spawn(move || {
        // Wait for the exit without reaping: the pid (and the group's id)
        // stays reserved until every signal has been sent.
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
        while let Err(rustix::io::Errno::INTR) = rustix::process::waitid(WaitId::Pid(pid), options) {}
        let _ = exit_tx.send(Event::Exited);
    });
    std::thread::spawn(move || read_control(control, &tx));

    let killed = loop {
        let now = now_ns();
        let wait = match watch.due(now) {
            Due::Kill(why) => break Some(why),
            Due::Term(why) => {
                watch.on_termed(why);
                send(Signal::TERM);
                notice(Notice::Term(why, watch.deadline().saturating_sub(now)));
                continue;
            }
            Due::Wait(ns) => ns,
        };
        match rx.recv_timeout(Duration::from_nanos(wait)) {
            Ok(Event::Control(Control::Signal(sig))) => send(sig.signal()),
            Ok(Event::Control(control)) => watch.on_control(control),
            Ok(Event::Ignored(line)) => notice(Notice::Ignored(line)),
            Ok(Event::Exited) => break None,
            Ok(Event::Closed) | Err(mpsc::RecvTimeoutError::Disconnected) => watch.on_closed(),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    };
    // Not reaped yet: `pid` still names the command (and its group).
    if let Some(why) = killed {
        send(Signal::KILL);
        notice(Notice::Kill(why));
    } else if spec.group {
        // Whatever it left in its group must not outlive it.
        send(Signal::KILL);
    }
    let status = loop {
        match child.wait() {
            Ok(status) => break status,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Cannot happen for a child of ours: call it a SIGKILL.
            Err(_) => break ExitStatus::from_raw(Signal::KILL.as_raw()),
        }
    };
    Ok(Ended { status, termed: watch.termed(), killed })
}

/// Reads control lines until end of file or a read error.
fn read_control(mut control: impl BufRead, tx: &mpsc::Sender<Event>) {
    let mut line = Vec::new();
    loop {
        line.clear();
        let event = match control.read_until(b'\n', &mut line) {
            Ok(0) => break,
            // A cut line: the channel closed.
            Ok(_) if line.last() != Some(&b'\n') => break,
            Ok(_) => match Control::parse(&line) {
                Some(c) => Event::Control(c),
                None => Event::Ignored(String::from_utf8_lossy(&line).trim_end().to_owned()),
            },
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if tx.send(event).is_err() {
            return;
        }
    }
    let _ = tx.send(Event::Closed);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn control_lines_round_trip() {
        for c in [Control::Extend(42), Control::Lost, Control::Signal(Forward::Int), Control::Signal(Forward::Term)] {
            assert_eq!(Control::parse(c.line().as_bytes()), Some(c), "{c:?}");
        }
        assert_eq!(Control::parse(b"extend 7"), Some(Control::Extend(7)));
        assert_eq!(Control::parse(b"extend 7\r\n"), Some(Control::Extend(7)));
        for bad in [&b"extend"[..], b"extend x", b"extend -1", b"signal KILL", b"signal", b"lost now", b"", b"\xff\n"] {
            assert_eq!(Control::parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn sigterm_a_grace_before_the_deadline_then_sigkill_at_it() {
        let mut w = Watch::new(100 * MS, 20 * MS);
        assert_eq!(w.due(0), Due::Wait(80 * MS));
        assert_eq!(w.due(80 * MS - 1), Due::Wait(1));
        assert_eq!(w.due(80 * MS), Due::Term(Stop::Deadline));
        w.on_termed(Stop::Deadline);
        assert_eq!(w.due(80 * MS), Due::Wait(20 * MS));
        assert_eq!(w.due(100 * MS), Due::Kill(Stop::Deadline));
        assert_eq!(w.termed(), Some(Stop::Deadline));
    }

    #[test]
    fn no_grace_means_sigkill_only() {
        let w = Watch::new(100 * MS, 0);
        assert_eq!(w.due(0), Due::Wait(100 * MS));
        assert_eq!(w.due(100 * MS - 1), Due::Wait(1));
        assert_eq!(w.due(100 * MS), Due::Kill(Stop::Deadline));
    }

    #[test]
    fn a_grace_longer_than_the_time_left_is_sigterm_at_once() {
        assert_eq!(Watch::new(10 * MS, 50 * MS).due(0), Due::Term(Stop::Deadline));
        assert_eq!(Watch::new(u64::MAX, u64::MAX).due(0), Due::Term(Stop::Deadline));
    }

    #[test]
    fn extend_moves_both_deadlines_either_way() {
        let mut w = Watch::new(100 * MS, 20 * MS);
        w.on_control(Control::Extend(300 * MS));
        assert_eq!(w.due(100 * MS), Due::Wait(180 * MS));
        w.on_control(Control::Extend(50 * MS));
        assert_eq!(w.due(40 * MS), Due::Term(Stop::Deadline));
        // Once SIGTERM went, an extension still moves the SIGKILL.
        w.on_termed(Stop::Deadline);
        w.on_control(Control::Extend(90 * MS));
        assert_eq!(w.due(50 * MS), Due::Wait(40 * MS));
    }

    #[test]
    fn lost_is_sigterm_now_and_sigkill_at_a_deadline_that_no_longer_moves() {
        let mut w = Watch::new(100 * MS, 20 * MS);
        w.on_control(Control::Lost);
        assert_eq!(w.due(10 * MS), Due::Term(Stop::Lost));
        w.on_termed(Stop::Lost);
        w.on_control(Control::Extend(900 * MS));
        assert_eq!(w.due(10 * MS), Due::Wait(90 * MS));
        assert_eq!(w.due(100 * MS), Due::Kill(Stop::Lost));
        assert_eq!(w.termed(), Some(Stop::Lost));
        // Also without a grace.
        let mut w = Watch::new(100 * MS, 0);
        w.on_control(Control::Lost);
        assert_eq!(w.due(0), Due::Term(Stop::Lost));
    }

    #[test]
    fn lost_after_the_lease_sigterm_sends_no_second_one() {
        let mut w = Watch::new(100 * MS, 20 * MS);
        w.on_termed(Stop::Deadline);
        w.on_control(Control::Lost);
        assert_eq!(w.due(90 * MS), Due::Wait(10 * MS));
        assert_eq!(w.termed(), Some(Stop::Deadline));
        assert_eq!(w.due(100 * MS), Due::Kill(Stop::Lost));
    }

    #[test]
    fn a_closed_channel_kills_at_once() {
        let mut w = Watch::new(100 * MS, 20 * MS);
        w.on_closed();
        assert_eq!(w.due(0), Due::Kill(Stop::Closed));
    }

    #[test]
    fn forwarded_signals_change_no_deadline() {
        let mut w = Watch::new(100 * MS, 20 * MS);
        let before = w.clone();
        w.on_control(Control::Signal(Forward::Term));
        assert_eq!(w, before);
    }
}
