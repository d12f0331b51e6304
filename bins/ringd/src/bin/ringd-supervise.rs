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
//!
//! The supervision itself is `crates/supervise`, shared with ftctl's lock
//! supervisor; this binary is its command line and report for ringd.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, Stdio};

use supervise::{Ended, NotRun, Notice, Spec, Stop};

const USAGE: &str = "usage: ringd-supervise --deadline-ns <absolute CLOCK_MONOTONIC ns> -- CMD [ARGS...]";

fn main() -> ExitCode {
    let (deadline, argv) = match parse_args(std::env::args_os().skip(1).collect()) {
        Ok(parsed) => parsed,
        Err(msg) => {
            eprintln!("ringd-supervise: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // No grace: ringd's services get SIGKILL at the deadline, their whole
    // process group, and stdin from /dev/null.
    let spec = Spec { argv, deadline_ns: deadline, grace_ns: 0, group: true };
    let ended = supervise::supervise(
        &spec,
        |cmd| {
            cmd.stdin(Stdio::null());
        },
        std::io::BufReader::new(std::io::stdin()),
        |notice| {
            if let Notice::Ignored(line) = notice {
                eprintln!("ringd-supervise: warning: ignored control line {line:?}");
            }
        },
    );
    // The last line of stderr: everything in CMD's process group is dead now.
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "ringd-supervise: {}", report(&ended));
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

/// The report for how CMD ended (without its prefix).
fn report(ended: &Result<Ended, NotRun>) -> String {
    let ended = match ended {
        Ok(ended) => ended,
        Err(NotRun::Late) => return "killed deadline".to_owned(),
        Err(NotRun::Spawn(e)) => return format!("spawn_failed {}", one_line(&e.to_string())),
    };
    match (ended.killed, ended.status.code(), ended.status.signal()) {
        // The kill came too late: CMD had already exited by itself.
        (_, Some(code), _) => format!("exited {code}"),
        (Some(Stop::Closed), _, _) => "killed pipe_closed".to_owned(),
        (Some(_), _, _) => "killed deadline".to_owned(),
        (None, None, Some(signal)) => format!("signalled {signal}"),
        // Cannot happen for a child we spawned: call it a SIGKILL.
        (None, None, None) => "signalled 9".to_owned(),
    }
}

/// `s` on one line (the report must be exactly one line).
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}
