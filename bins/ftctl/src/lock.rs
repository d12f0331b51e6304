//! `ftctl lock [NAME]`: run a command while this host holds a cluster-wide
//! lock (NAME, or the unnamed lock); and `ftctl elect NAME -- CMD`, which
//! runs CMD while this host leads election NAME: the same wait and the
//! same hold, with another request ([`Target`]).
//!
//! One run: connect, send `Acquire` (`AcquireNamed` for NAME, `Campaign`
//! for an election), wait for the answer (at most the timeout plus
//! [`client::lock::ANSWER_GRACE`] for the daemon's own answer), run CMD
//! with `FTCOORD_FENCE` and the target's own variables
//! ([`Target::env`]), watch the hold while CMD runs,
//! send `Release` when it exits, and exit with its status. The hold is
//! tied to the connection: the daemon also releases it when ftctl goes
//! away, so every early exit is safe even when the `Release` is never
//! read. Holding is
//! [`client::lock::LockGuard`]'s business (renewals, `LockLost`, the
//! daemon going away, the lease's end); ftctl adds CMD and signals.
//!
//! A grant is a lease (reliability.md, Pauses and leases): it ends at
//! `lease_until`, an instant of this host's CLOCK_MONOTONIC that each
//! `Renewed` moves. CMD gets SIGTERM at `lease_until − kill_grace` and
//! SIGKILL at `lease_until`; a lease that runs out that way is a lost lock
//! (exit 69, whether CMD exited on the SIGTERM or was killed), and a grant
//! whose lease has already ended when it arrives runs nothing. Losing the lock otherwise while CMD runs (`LockLost`, or
//! the connection closing because the daemon died) means CMD is no longer
//! protected: SIGTERM at once, SIGKILL at `lease_until` if it is still
//! alive.
//!
//! NAME was validated while parsing the arguments, and an election's value
//! is checked before connecting (exit 2 before anything is sent). A daemon
//! that serves no names refuses NAME (`refuses_names`), one that does not
//! elect refuses a campaign (`refuses_elections`), or, older, closes the
//! connection on the request: exit 2 either way, like other arguments that
//! cannot work. Every message names the lock or the election (``lock
//! `NAME` lost: ...``, ``election `NAME` lost: ...``); those of the
//! unnamed lock read as before.
//!
//! What each answer means and when the lease's signals are due are decided
//! by pure functions ([`on_wait_reply`], [`lease_plan`]; the replies while
//! holding by [`client::lock::on_hold_reply`]), tested on their own.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{Context, Result};
use client::elect::{self, election_label, refuses_elections};
use client::lock::{
    self as locking, lease_phrase, lock_label, refuses_names, Answer, Grant, HoldEvent, LockGuard, LostReason,
    ReleaseError,
};
use client::ClientError;
use lockservice::{LockName, LockRequest};

use crate::daemon::{self, LockClient};
use crate::exit;
use crate::signals::{self, Sig, Signals};
use crate::supervise::{Report, Supervised};

/// The environment variable carrying the fencing token to CMD.
pub const FENCE_ENV: &str = "FTCOORD_FENCE";
/// The environment variable carrying the lock's name to CMD (empty for the
/// unnamed lock).
pub const NAME_ENV: &str = "FTCOORD_LOCK_NAME";
/// The environment variable carrying the election's name to CMD (`ftctl
/// elect`).
pub const ELECTION_ENV: &str = "FTCOORD_ELECTION";
/// The environment variable carrying the leader's value to CMD (`ftctl
/// elect`): what observers see while it leads.
pub const LEADER_VALUE_ENV: &str = "FTCOORD_LEADER_VALUE";

/// `--kill-grace`'s default: a fifth of the default `lease_ms` (100).
/// ftctl cannot know the daemon's `lease_ms`; with another one, pass a
/// fifth of it. The grace comes out of the slack a renewal round has
/// (`lease_ms·(1−ρ) − kill_grace − lease_ms/3`): at half the lease that
/// was 17 ms, less than a loaded host's wake-up latency, and 137 of 145
/// holds lost their lease under docs/benchmarks.md's busy-host load; at a
/// fifth it is 47 ms (docs/benchmarks.md, Leases on a busy host).
pub const DEFAULT_KILL_GRACE: &str = "20ms";

/// How long a best-effort `Release` may take to send when giving up.
const GIVE_UP_SEND: Duration = Duration::from_secs(1);

/// What ftctl waits for and holds while CMD runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A lock (`ftctl lock`): NAME, or [`LockName::unnamed`] without NAME.
    Lock(LockName),
    /// The leadership of an election (`ftctl elect`), campaigning with the
    /// value observers see while this campaigner leads.
    Election {
        /// The election (a user name).
        name: LockName,
        /// The campaigner's value (at most `lockservice::MAX_VALUE` bytes).
        value: String,
    },
}

impl Target {
    /// The lock's or the election's name.
    pub fn name(&self) -> &LockName {
        match self {
            Target::Lock(name) | Target::Election { name, .. } => name,
        }
    }

    /// How messages name it: `lock`, ``lock `NAME` ``, ``election `NAME` ``.
    pub fn label(&self) -> String {
        match self {
            Target::Lock(name) => lock_label(name),
            Target::Election { name, .. } => election_label(name),
        }
    }

    /// The request that waits for it, at most `timeout`.
    fn request(&self, timeout: Duration) -> LockRequest {
        match self {
            Target::Lock(name) => locking::acquire_request(name, timeout),
            Target::Election { name, value } => elect::campaign_request(name, value, timeout),
        }
    }

    /// CMD's environment under a hold with `fence`: `FTCOORD_FENCE` and
    /// the target's own variables.
    fn env(&self, fence: u128) -> Vec<(&'static str, String)> {
        let mut env = vec![(FENCE_ENV, fence.to_string())];
        match self {
            Target::Lock(name) => env.push((NAME_ENV, name.as_str().to_owned())),
            Target::Election { name, value } => {
                env.push((ELECTION_ENV, name.as_str().to_owned()));
                env.push((LEADER_VALUE_ENV, value.clone()));
            }
        }
        env
    }

    /// The other target's variables, removed from CMD's environment (one
    /// inherited from an outer `ftctl lock` or `ftctl elect` would describe
    /// another hold than the one `FTCOORD_FENCE` is the fence of).
    fn foreign_env(&self) -> &'static [&'static str] {
        match self {
            Target::Lock(_) => &[ELECTION_ENV, LEADER_VALUE_ENV],
            Target::Election { .. } => &[NAME_ENV],
        }
    }

    /// Whether refusal `reason` says the daemon can never serve this
    /// target (a usage error: exit 2): a named lock from a daemon serving
    /// one unnamed lock, a campaign from a daemon that does not elect.
    fn refused_for_good(&self, reason: &str) -> bool {
        match self {
            Target::Lock(name) => !name.is_unnamed() && refuses_names(reason),
            Target::Election { .. } => refuses_elections(reason),
        }
    }

    /// Why it cannot be asked for at all, if it cannot (checked before
    /// connecting): an election's value over `lockservice::MAX_VALUE` bytes.
    fn check(&self) -> Result<(), String> {
        match self {
            Target::Lock(_) => Ok(()),
            Target::Election { name, value } => {
                elect::check_value(value).map_err(|why| format!("{}: {why}", election_label(name)))
            }
        }
    }
}

/// What `ftctl lock` or `ftctl elect` (with CMD) was asked to do.
#[derive(Debug)]
pub struct HoldArgs {
    /// The lock or the election.
    pub target: Target,
    /// How long to wait for the grant (0: only if it can be granted at
    /// once; [`elect::FOREVER`]: no deadline).
    pub timeout: Duration,
    /// How long before the lease's end CMD gets SIGTERM (SIGKILL at the end).
    pub kill_grace: Duration,
    /// CMD and its arguments (at least CMD).
    pub cmd: Vec<OsString>,
}

/// What the answer to `Acquire` means.
#[derive(Debug, PartialEq, Eq)]
enum Wait {
    /// Run CMD under this grant.
    Granted(Grant),
    /// Stop here with this status and message.
    Exit(u8, String),
    /// Send `Release` (stop waiting), then stop with this status and message.
    GiveUp(u8, String),
}

/// What the answer to an acquire of `target` from the daemon at `addr`
/// means. A daemon that answered "not in time" is a temporary failure
/// (75); one that did not answer at all is an error (1), like one that
/// cannot be reached; one that serves no named locks refusing NAME, or one
/// that does not elect refusing a campaign, is a usage error (2): retrying
/// cannot help.
fn on_wait_reply(answer: Result<Answer, ClientError>, addr: &str, target: &Target, timeout: Duration) -> Wait {
    let lock = target.label();
    match answer {
        Ok(Answer::Granted(grant)) => Wait::Granted(grant),
        Ok(Answer::TimedOut) => Wait::Exit(exit::TIMED_OUT, not_obtained(target, timeout)),
        Ok(Answer::Refused(reason)) if target.refused_for_good(&reason) => {
            Wait::Exit(exit::BAD_ARGUMENTS, format!("{lock} refused: {reason}"))
        }
        Ok(Answer::Refused(reason)) => Wait::Exit(exit::ERROR, format!("{lock} refused: {reason}")),
        Ok(Answer::Lost(reason)) => Wait::Exit(exit::LOCK_LOST, format!("{lock} lost: {reason}")),
        Err(ClientError::Timeout(_)) => Wait::GiveUp(exit::ERROR, no_answer(addr, timeout)),
        Err(e) => Wait::Exit(exit::ERROR, format!("waiting for the {lock}: {e}")),
    }
}

/// The daemon's own "not within the timeout" for `target`.
fn not_obtained(target: &Target, timeout: Duration) -> String {
    let show = client::duration::show;
    match target {
        Target::Lock(name) => match (timeout.is_zero(), name.is_unnamed()) {
            (true, true) => "not obtained: the lock is held (try-lock, --timeout 0)".to_string(),
            (true, false) => format!("not obtained: {} is held (try-lock, --timeout 0)", lock_label(name)),
            (false, _) => format!("{} not obtained within {}", lock_label(name), show(timeout)),
        },
        Target::Election { name, .. } => {
            let label = election_label(name);
            if timeout.is_zero() {
                format!("not leading: {label} has a leader (--timeout 0)")
            } else if timeout >= elect::FOREVER {
                format!("{label} not won: the daemon ended a campaign that had no --timeout")
            } else {
                format!("{label} not won within {}", show(timeout))
            }
        }
    }
}

/// No answer at all, not even the daemon's own "not in time" (due at the
/// timeout; ftctl waited [`locking::ANSWER_GRACE`] more for it).
fn no_answer(addr: &str, timeout: Duration) -> String {
    format!(
        "no answer from the daemon at {addr} within {} (and {} more for its answer): is that its \
         client_listen, and is it running (not stopped or overloaded)?",
        client::duration::show(timeout),
        client::duration::show(locking::ANSWER_GRACE)
    )
}

/// Why a daemon that answered "not in time" could not grant, when its
/// status tells: a node that has not joined its cluster grants nothing.
/// `details` are the status report's.
fn why_not_obtained(details: &[(String, String)]) -> Option<String> {
    let (_, progress) = details.iter().find(|(k, _)| k == client::JOINING_DETAIL)?;
    Some(format!(
        "the daemon has not joined its cluster yet ({progress}): it grants nothing until enough of its peers \
         answer (are they running? `ftctl status` shows which are up)"
    ))
}

/// When the lease's signals to CMD are due, seen at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lease {
    /// The lease has ended: CMD must not run (SIGKILL if it does).
    Over,
    /// SIGTERM in `term_in` (zero: now), SIGKILL in `kill_in` (never zero).
    Left { term_in: Duration, kill_in: Duration },
}

/// The lease's deadlines at `now_us` for a lease ending at `lease_until_us`
/// (both CLOCK_MONOTONIC microseconds): SIGTERM at `lease_until −
/// kill_grace`, SIGKILL at `lease_until`; the lease is over from
/// `lease_until` on.
fn lease_plan(now_us: u64, lease_until_us: u64, kill_grace: Duration) -> Lease {
    let left_us = lease_until_us.saturating_sub(now_us);
    if left_us == 0 {
        return Lease::Over;
    }
    let kill_in = Duration::from_micros(left_us);
    Lease::Left { term_in: kill_in.saturating_sub(kill_grace), kill_in }
}

/// [`lease_plan`] now, for a lease ending at `lease_until`.
fn lease_now(lease_until: timer::Instant, kill_grace: Duration) -> Lease {
    lease_plan(timer::monotonic_now().as_micros(), lease_until.as_micros(), kill_grace)
}

/// Runs `ftctl lock` or `ftctl elect … -- CMD` against the daemon at
/// `addr`: waits for `args.target`, runs CMD while holding it; returns the
/// exit status.
pub async fn run(addr: &str, args: &HoldArgs) -> Result<u8> {
    if let Err(why) = args.target.check() {
        eprintln!("ftctl: {why}");
        return Ok(exit::BAD_ARGUMENTS);
    }
    // Caught before anything else, so a signal never kills ftctl mid-hold.
    let mut signals = Signals::catch().context("cannot catch SIGINT/SIGTERM")?;
    let mut client = daemon::connect(addr).await?;

    let request = args.target.request(args.timeout);
    let answer = tokio::select! {
        answer = locking::ask(&mut client, request, args.timeout) => answer,
        sig = signals.recv() => {
            give_up(&mut client).await;
            eprintln!("ftctl: SIG{} while waiting for the {}; gave up", sig.name(), args.target.label());
            return Ok(exit::of_signal(sig.number()));
        }
    };
    // A reply that is no lock reply, or a daemon that hung up: it may speak
    // another API (ringd, hbringd), or predate named locks.
    let other_api = matches!(answer, Err(ClientError::Frame(_) | ClientError::Closed | ClientError::Unexpected(_)));
    let timed_out = matches!(answer, Ok(Answer::TimedOut));
    let grant = match on_wait_reply(answer, addr, &args.target, args.timeout) {
        Wait::Granted(grant) => grant,
        Wait::Exit(code, message) => {
            let other = if other_api { other_api_message(addr, &args.target).await } else { None };
            let why = if timed_out { not_joined(addr).await } else { None };
            match (other, why) {
                (Some((code, other)), _) => {
                    eprintln!("ftctl: {other}");
                    return Ok(code);
                }
                (None, Some(why)) => eprintln!("ftctl: {message}: {why}"),
                (None, None) => eprintln!("ftctl: {message}"),
            }
            return Ok(code);
        }
        Wait::GiveUp(code, message) => {
            give_up(&mut client).await;
            eprintln!("ftctl: {message}");
            return Ok(code);
        }
    };
    hold(LockGuard::named(client, args.target.name().clone(), grant), &mut signals, args).await
}

/// Runs CMD under the granted lock (or leadership), through its
/// supervisor ([`crate::supervise`]); returns ftctl's exit status.
async fn hold(mut guard: LockGuard, signals: &mut Signals, args: &HoldArgs) -> Result<u8> {
    let lock = args.target.label();
    let Some(cmd) = args.cmd.first() else {
        // clap requires CMD; nothing to run is nothing to hold for.
        warn_if_err(release(guard, &lock).await);
        eprintln!("ftctl: no command to run (put it after `--`)");
        return Ok(exit::BAD_ARGUMENTS);
    };
    let program = cmd.to_string_lossy().into_owned();
    if let Err(why) = room_to_start(&mut guard, args.kill_grace).await {
        // Dropping the guard closes the connection: the daemon releases.
        eprintln!("ftctl: {lock} lost before {program} started: {why}; {program} not run");
        return Ok(exit::LOCK_LOST);
    }
    let env = args.target.env(guard.fence());
    let started =
        Supervised::start(&args.cmd, &env, args.target.foreign_env(), guard.lease_until(), args.kill_grace, &lock)
            .await;
    let Supervised { mut reports, mut control } = match started {
        Ok(supervised) => supervised,
        Err(e) => {
            warn_if_err(release(guard, &lock).await);
            eprintln!("ftctl: cannot start the supervisor of {program}: {e}; {program} not run");
            return Ok(exit::ERROR);
        }
    };
    // The go: the deadline with every renewal that came while the
    // supervisor started (a slow start, such as a debug build's under
    // load, could outlast a short lease: CI saw tokenwatchd's try-lock
    // lose it so).
    if let Err(why) = catch_up(&mut guard, args.kill_grace).await {
        // Its socket closes before any go: the supervisor runs nothing.
        drop(control);
        reports.reap().await;
        eprintln!("ftctl: {lock} lost before {program} started: {why}; {program} not run");
        return Ok(exit::LOCK_LOST);
    }
    control.send(crate::supervise::extend(guard.lease_until())).await;
    // The first line: CMD runs, or why not.
    let pid = match reports.next().await {
        Report::Started(pid) => pid,
        Report::Late => {
            drop(guard);
            eprintln!("ftctl: {lock} lost before {program} started: the lease ended; {program} not run");
            return Ok(exit::LOCK_LOST);
        }
        Report::SpawnFailed { not_found, reason } => {
            warn_if_err(release(guard, &lock).await);
            eprintln!("ftctl: cannot run {program}: {reason}");
            return Ok(if not_found { exit::NOT_FOUND } else { exit::CANNOT_EXECUTE });
        }
        other => {
            // Nothing of CMD can be running: it never said `started`.
            warn_if_err(release(guard, &lock).await);
            eprintln!("ftctl: the supervisor of {program} failed: {other:?}; {program} not run");
            return Ok(exit::ERROR);
        }
    };
    // Set once the lock is lost (the supervisor was told).
    let mut lost = false;
    let report = loop {
        tokio::select! {
            // A loss seen together with CMD's exit counts as a loss.
            biased;
            event = guard.next_event(), if !lost => match event {
                HoldEvent::Renewed(until) => control.send(crate::supervise::extend(until)).await,
                HoldEvent::Ignored(warning) => eprintln!("ftctl: {warning}"),
                HoldEvent::Lost(why) => {
                    lost = true;
                    let how = match why {
                        LostReason::LeaseExpired(_) => "killed (SIGKILL)",
                        _ => "stopping it (SIGTERM, SIGKILL at the lease's end)",
                    };
                    eprintln!("ftctl: {lock} lost: {why}; {program} {how}");
                    control.send(supervise::Control::Lost).await;
                }
            },
            report = reports.next() => break report,
            sig = signals.recv() => control.send(supervise::Control::Signal(forward(sig))).await,
        }
    };
    let status = match report {
        Report::Ended { status, .. } => status,
        other => {
            // The supervisor is gone (killed): CMD may still run, unwatched.
            signals::send(pid, Sig::Kill).await;
            drop(guard);
            eprintln!(
                "ftctl: the supervisor of {program} went away ({other:?}): SIGKILL to {program}; the {lock} is lost"
            );
            return Ok(exit::LOCK_LOST);
        }
    };
    let ran_out = report.lease_ran_out();
    reports.reap().await;
    warn_if_err(release(guard, &lock).await);
    if ran_out && !lost {
        // Stopped for its lease's end: CMD did not finish under the lock.
        eprintln!(
            "ftctl: {lock} lost: the lease ended without a renewal; {program} was stopped (exit status {status})"
        );
    }
    Ok(if ran_out || lost { exit::LOCK_LOST } else { status })
}

/// The supervisor's word for a signal ftctl forwards.
fn forward(sig: Sig) -> supervise::Forward {
    match sig {
        Sig::Int => supervise::Forward::Int,
        Sig::Term | Sig::Kill => supervise::Forward::Term,
    }
}

/// Takes in what the daemon already sent (renewals, a loss) without
/// waiting. Err: the lock was lost, or the lease has ended.
async fn catch_up(guard: &mut LockGuard, kill_grace: Duration) -> Result<(), String> {
    while let Ok(event) = tokio::time::timeout(Duration::ZERO, guard.next_event()).await {
        match event {
            HoldEvent::Renewed(_) => {}
            HoldEvent::Ignored(warning) => eprintln!("ftctl: {warning}"),
            HoldEvent::Lost(why) => return Err(why.to_string()),
        }
    }
    match lease_now(guard.lease_until(), kill_grace) {
        Lease::Over => Err(format!("the lease {}", lease_phrase(guard.lease_until(), timer::monotonic_now()))),
        Lease::Left { .. } => Ok(()),
    }
}

/// How long CMD may run before its SIGTERM, once that is more than zero.
/// A grant with less than `kill_grace` of its lease left (its daemon's
/// renewal round is due) waits for a renewal first, so that CMD is not
/// sent SIGTERM as it starts. Err: the lock was lost, or the lease ended,
/// before that (why).
async fn room_to_start(guard: &mut LockGuard, kill_grace: Duration) -> Result<Duration, String> {
    loop {
        let kill_in = match lease_now(guard.lease_until(), kill_grace) {
            Lease::Left { term_in, .. } if !term_in.is_zero() => return Ok(term_in),
            Lease::Left { kill_in, .. } => kill_in,
            Lease::Over => {
                return Err(format!("the lease {}", lease_phrase(guard.lease_until(), timer::monotonic_now())))
            }
        };
        // Until a renewal or a loss, at most until the lease's end (then
        // the next turn finds it over).
        tokio::time::timeout(kill_in, async {
            loop {
                match guard.next_event().await {
                    HoldEvent::Renewed(_) => return Ok(()),
                    HoldEvent::Ignored(warning) => eprintln!("ftctl: {warning}"),
                    HoldEvent::Lost(why) => return Err(why.to_string()),
                }
            }
        })
        .await
        .unwrap_or(Ok(()))?;
    }
}

/// How long asking a daemon that refused a lock request for its status may take.
const PROBE: Duration = Duration::from_secs(2);

/// What `ftctl lock` says to a daemon that grants no client locks
/// (interfaces.md), `None` for the others.
pub fn no_locks_message(daemon: &str) -> Option<String> {
    match daemon {
        "ringd" => Some(
            "ringd grants no client locks: cluster-exclusive jobs are its needs_token command services \
             (run one with `ftctl exec SERVICE`)"
                .to_string(),
        ),
        "hbringd" => Some(
            "hbringd grants no client locks (it only detects failures): `ftctl lock` works against ntmutexd, \
             tokenwatchd and electd"
                .to_string(),
        ),
        _ => None,
    }
}

/// Asks the daemon at `addr` (a new connection) which daemon it is.
pub async fn daemon_name(addr: &str) -> Option<String> {
    let mut c = tokio::time::timeout(PROBE, daemon::connect(addr)).await.ok()?.ok()?;
    let status = tokio::time::timeout(PROBE, c.status()).await.ok()?.ok()?;
    Some(status.daemon)
}

/// What ftctl says when `daemon` (its name as its status gives it) at
/// `addr` hung up on, or answered nonsense to, `what` (``the campaign for
/// election `web` ``) of election requests: a daemon without elections
/// (exit 2: no retry can help).
pub fn no_elections_message(daemon: &str, addr: &str, what: &str) -> String {
    if daemon == "electd" {
        format!(
            "electd at {addr} does not serve elections: it closed the connection on {what} (a version without them)"
        )
    } else {
        format!(
            "{daemon} at {addr} does not elect: elections are served by electd (it closed the connection on {what})"
        )
    }
}

/// What `ftctl lock` or `ftctl elect` says when `daemon` (its name as its
/// status gives it) at `addr` hung up on, or answered nonsense to, a
/// request for `target`, and the exit status: a daemon that grants no
/// locks says so (1); a lock daemon asked for a named lock predates named
/// locks (2); any daemon asked for a campaign does not elect (2).
/// `None`: nothing more to say than the error itself.
fn other_api(daemon: &str, addr: &str, target: &Target) -> Option<(u8, String)> {
    let name = match target {
        Target::Lock(name) => name,
        Target::Election { name, .. } => {
            let what = format!("the campaign for {}", election_label(name));
            return Some((exit::BAD_ARGUMENTS, no_elections_message(daemon, addr, &what)));
        }
    };
    if let Some(message) = no_locks_message(daemon) {
        return Some((exit::ERROR, message));
    }
    (!name.is_unnamed()).then(|| {
        let message = format!(
            "{daemon} at {addr} does not serve named locks: it closed the connection on the request for {} \
             (a version without them; electd serves named locks)",
            lock_label(name)
        );
        (exit::BAD_ARGUMENTS, message)
    })
}

/// Asks the daemon at `addr` (a new connection) which it is; [`other_api`].
async fn other_api_message(addr: &str, target: &Target) -> Option<(u8, String)> {
    other_api(&daemon_name(addr).await?, addr, target)
}

/// How long asking a daemon that answered "not in time" for its status may take.
const WHY_PROBE: Duration = Duration::from_millis(500);

/// Asks the daemon at `addr` (a new connection) whether it has joined; why
/// it granted nothing if it has not.
async fn not_joined(addr: &str) -> Option<String> {
    let mut c = tokio::time::timeout(WHY_PROBE, daemon::connect(addr)).await.ok()?.ok()?;
    let status = tokio::time::timeout(WHY_PROBE, c.status()).await.ok()?.ok()?;
    why_not_obtained(&status.details)
}

/// Stops waiting: sends `Release` without waiting for the answer (closing
/// the connection releases too, so this only makes it quicker).
async fn give_up(client: &mut LockClient) {
    let _ = tokio::time::timeout(GIVE_UP_SEND, client.send(LockRequest::Release)).await;
}

/// Releases the lock (resigns the leadership) named `lock` in messages; a
/// warning if that was not clean.
async fn release(guard: LockGuard, lock: &str) -> Result<(), String> {
    match guard.release().await {
        Ok(()) => Ok(()),
        Err(ReleaseError::Lost(why)) => Err(format!("the {lock} was lost as the command ended: {why}")),
        Err(e @ ReleaseError::NoConfirmation(ClientError::Timeout(_))) => {
            Err(format!("{e} (the daemon releases when ftctl disconnects)"))
        }
        Err(e) => Err(e.to_string()),
    }
}

fn warn_if_err(r: Result<(), String>) {
    if let Err(why) = r {
        eprintln!("ftctl: warning: {why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::lock::ANSWER_GRACE;

    const T: Duration = Duration::from_secs(30);
    const GRACE: Duration = Duration::from_millis(50);

    fn grant(fence: u128) -> Grant {
        Grant { fence, lease_until: timer::Instant::from_micros(1_000_000) }
    }

    const ADDR: &str = "127.0.0.1:7201";

    #[test]
    fn a_grant_runs_the_command_with_its_fence() {
        assert_eq!(
            on_wait_reply(Ok(Answer::Granted(grant(42))), ADDR, &Target::Lock(LockName::unnamed()), T),
            Wait::Granted(grant(42))
        );
    }

    #[test]
    fn wait_replies_map_to_exit_statuses() {
        let code = |r| match on_wait_reply(r, ADDR, &Target::Lock(LockName::unnamed()), T) {
            Wait::Exit(code, _) | Wait::GiveUp(code, _) => code,
            Wait::Granted(g) => panic!("granted {g:?}"),
        };
        assert_eq!(code(Ok(Answer::TimedOut)), exit::TIMED_OUT);
        assert_eq!(code(Ok(Answer::Refused("queue full".into()))), exit::ERROR);
        assert_eq!(code(Ok(Answer::Lost("token lost".into()))), exit::LOCK_LOST);
        assert_eq!(code(Err(ClientError::Unexpected("released".into()))), exit::ERROR);
        assert_eq!(code(Err(ClientError::Closed)), exit::ERROR);
        // No answer at all: the daemon is not working, an error (not 75).
        assert_eq!(code(Err(ClientError::Timeout(T + ANSWER_GRACE))), exit::ERROR);
    }

    #[test]
    fn wait_messages_say_why() {
        assert_eq!(
            on_wait_reply(Ok(Answer::Refused("queue full".into())), ADDR, &Target::Lock(LockName::unnamed()), T),
            Wait::Exit(exit::ERROR, "lock refused: queue full".into())
        );
        assert_eq!(
            on_wait_reply(Ok(Answer::TimedOut), ADDR, &Target::Lock(LockName::unnamed()), Duration::from_millis(500)),
            Wait::Exit(exit::TIMED_OUT, "lock not obtained within 500 ms".into())
        );
        let Wait::GiveUp(exit::ERROR, m) = on_wait_reply(
            Err(ClientError::Timeout(Duration::from_secs(4))),
            ADDR,
            &Target::Lock(LockName::unnamed()),
            Duration::from_secs(2),
        ) else {
            panic!("no answer must give up with exit 1")
        };
        assert!(m.starts_with("no answer from the daemon at 127.0.0.1:7201 within 2 s"), "{m}");
    }

    #[test]
    fn a_try_lock_says_the_lock_is_held() {
        assert_eq!(
            on_wait_reply(Ok(Answer::TimedOut), ADDR, &Target::Lock(LockName::unnamed()), Duration::ZERO),
            Wait::Exit(exit::TIMED_OUT, "not obtained: the lock is held (try-lock, --timeout 0)".into())
        );
    }

    fn name(s: &str) -> LockName {
        LockName::parse(s).unwrap()
    }

    #[test]
    fn messages_about_a_named_lock_name_it() {
        let db = Target::Lock(name("db/migrate"));
        let wait = |r| on_wait_reply(r, ADDR, &db, T);
        assert_eq!(
            wait(Ok(Answer::TimedOut)),
            Wait::Exit(exit::TIMED_OUT, "lock `db/migrate` not obtained within 30 s".into())
        );
        assert_eq!(
            on_wait_reply(Ok(Answer::TimedOut), ADDR, &db, Duration::ZERO),
            Wait::Exit(exit::TIMED_OUT, "not obtained: lock `db/migrate` is held (try-lock, --timeout 0)".into())
        );
        assert_eq!(
            wait(Ok(Answer::Refused("too many locks: this node knows 10000 (limits.max_locks)".into()))),
            Wait::Exit(
                exit::ERROR,
                "lock `db/migrate` refused: too many locks: this node knows 10000 (limits.max_locks)".into()
            )
        );
        assert_eq!(
            wait(Ok(Answer::Lost("daemon is shutting down".into()))),
            Wait::Exit(exit::LOCK_LOST, "lock `db/migrate` lost: daemon is shutting down".into())
        );
        assert_eq!(
            wait(Err(ClientError::Closed)),
            Wait::Exit(exit::ERROR, "waiting for the lock `db/migrate`: the daemon closed the connection".into())
        );
    }

    #[test]
    fn a_daemon_serving_no_names_refusing_one_is_a_usage_error() {
        let reason = "this daemon serves one unnamed lock: named locks are not supported (docs/named-locks.md)";
        assert_eq!(
            on_wait_reply(Ok(Answer::Refused(reason.into())), ADDR, &Target::Lock(name("jobs")), T),
            Wait::Exit(exit::BAD_ARGUMENTS, format!("lock `jobs` refused: {reason}"))
        );
        // The unnamed lock is never refused for that (nor is a daemon's
        // odd wording taken for it then).
        assert_eq!(
            on_wait_reply(Ok(Answer::Refused(reason.into())), ADDR, &Target::Lock(LockName::unnamed()), T),
            Wait::Exit(exit::ERROR, format!("lock refused: {reason}"))
        );
    }

    #[test]
    fn a_lock_daemon_hanging_up_on_a_name_predates_names() {
        let (code, m) = other_api("ntmutexd", ADDR, &Target::Lock(name("jobs"))).unwrap();
        assert_eq!(code, exit::BAD_ARGUMENTS);
        assert!(m.starts_with("ntmutexd at 127.0.0.1:7201 does not serve named locks: it closed the connection on the request for lock `jobs`"), "{m}");
        // Hanging up on the unnamed lock is only an error.
        assert_eq!(other_api("ntmutexd", ADDR, &Target::Lock(LockName::unnamed())), None);
        // ringd and hbringd say they grant no locks, named or not.
        for n in [name("jobs"), LockName::unnamed()] {
            let (code, m) = other_api("hbringd", ADDR, &Target::Lock(n)).unwrap();
            assert_eq!(code, exit::ERROR);
            assert!(m.starts_with("hbringd grants no client locks"), "{m}");
        }
    }

    fn web(value: &str) -> Target {
        Target::Election { name: name("web"), value: value.into() }
    }

    const NO_ELECTIONS: &str = "elections are served by electd: this daemon does not elect (docs/elections.md)";

    #[test]
    fn an_election_is_campaigned_for_with_its_value_and_env() {
        let t = web("host-a");
        assert_eq!(t.name(), &name("web"));
        assert_eq!(t.label(), "election `web`");
        assert_eq!(
            t.request(Duration::from_secs(2)),
            LockRequest::Campaign { name: name("web"), value: "host-a".into(), timeout_ms: 2000 }
        );
        assert_eq!(
            t.request(elect::FOREVER),
            LockRequest::Campaign { name: name("web"), value: "host-a".into(), timeout_ms: u64::MAX }
        );
        assert_eq!(
            t.env(1 << 64),
            vec![
                (FENCE_ENV, "18446744073709551616".to_string()),
                (ELECTION_ENV, "web".to_string()),
                (LEADER_VALUE_ENV, "host-a".to_string())
            ]
        );
        assert_eq!(t.foreign_env(), &[NAME_ENV]);
        assert_eq!(t.check(), Ok(()));
        assert_eq!(web(&"v".repeat(1024)).check(), Ok(()));
        assert_eq!(
            web(&"v".repeat(1025)).check(),
            Err("election `web`: the value has 1025 bytes, the most is 1024".into())
        );
        // A lock's request, env and label are as they were.
        let db = Target::Lock(name("db"));
        assert_eq!(db.request(T), LockRequest::AcquireNamed { name: name("db"), timeout_ms: 30_000 });
        assert_eq!(
            Target::Lock(LockName::unnamed()).env(7),
            vec![(FENCE_ENV, "7".to_string()), (NAME_ENV, String::new())]
        );
        assert_eq!(db.foreign_env(), &[ELECTION_ENV, LEADER_VALUE_ENV]);
        assert_eq!(db.label(), "lock `db`");
        assert_eq!(db.check(), Ok(()));
    }

    #[test]
    fn campaign_answers_map_to_the_lock_statuses_and_name_the_election() {
        let wait = |r, timeout| on_wait_reply(r, ADDR, &web("a"), timeout);
        assert_eq!(wait(Ok(Answer::Granted(grant(5))), T), Wait::Granted(grant(5)));
        assert_eq!(
            wait(Ok(Answer::TimedOut), T),
            Wait::Exit(exit::TIMED_OUT, "election `web` not won within 30 s".into())
        );
        assert_eq!(
            wait(Ok(Answer::TimedOut), Duration::ZERO),
            Wait::Exit(exit::TIMED_OUT, "not leading: election `web` has a leader (--timeout 0)".into())
        );
        assert_eq!(
            wait(Ok(Answer::TimedOut), elect::FOREVER),
            Wait::Exit(
                exit::TIMED_OUT,
                "election `web` not won: the daemon ended a campaign that had no --timeout".into()
            )
        );
        // A daemon that does not elect: a usage error, its reason printed.
        assert_eq!(
            wait(Ok(Answer::Refused(NO_ELECTIONS.into())), T),
            Wait::Exit(exit::BAD_ARGUMENTS, format!("election `web` refused: {NO_ELECTIONS}"))
        );
        // Other refusals are errors; the no-names refusal means nothing here.
        assert_eq!(
            wait(Ok(Answer::Refused("too many locks".into())), T),
            Wait::Exit(exit::ERROR, "election `web` refused: too many locks".into())
        );
        let no_names = "this daemon serves one unnamed lock: named locks are not supported (docs/named-locks.md)";
        assert_eq!(
            wait(Ok(Answer::Refused(no_names.into())), T),
            Wait::Exit(exit::ERROR, format!("election `web` refused: {no_names}"))
        );
        assert_eq!(
            wait(Ok(Answer::Lost("daemon is shutting down".into())), T),
            Wait::Exit(exit::LOCK_LOST, "election `web` lost: daemon is shutting down".into())
        );
        assert_eq!(
            wait(Err(ClientError::Closed), T),
            Wait::Exit(exit::ERROR, "waiting for the election `web`: the daemon closed the connection".into())
        );
        // And the no-elections refusal is nothing special for a lock.
        assert_eq!(
            on_wait_reply(Ok(Answer::Refused(NO_ELECTIONS.into())), ADDR, &Target::Lock(name("web")), T),
            Wait::Exit(exit::ERROR, format!("lock `web` refused: {NO_ELECTIONS}"))
        );
    }

    #[test]
    fn a_daemon_hanging_up_on_a_campaign_does_not_elect() {
        let (code, m) = other_api("electd", ADDR, &web("a")).unwrap();
        assert_eq!(code, exit::BAD_ARGUMENTS);
        assert_eq!(
            m,
            "electd at 127.0.0.1:7201 does not serve elections: it closed the connection on the campaign for \
             election `web` (a version without them)"
        );
        for daemon in ["ntmutexd", "tokenwatchd", "ringd", "hbringd"] {
            let (code, m) = other_api(daemon, ADDR, &web("a")).unwrap();
            assert_eq!(code, exit::BAD_ARGUMENTS, "{daemon}");
            assert_eq!(
                m,
                format!(
                    "{daemon} at 127.0.0.1:7201 does not elect: elections are served by electd (it closed the \
                     connection on the campaign for election `web`)"
                )
            );
        }
    }

    #[test]
    fn a_node_still_joining_is_why_nothing_was_granted() {
        let joining =
            vec![("epoch".to_string(), "0".to_string()), ("joining".to_string(), "0 of 4 answered".to_string())];
        let why = why_not_obtained(&joining).unwrap();
        assert!(why.starts_with("the daemon has not joined its cluster yet (0 of 4 answered)"), "{why}");
        assert_eq!(why_not_obtained(&joining[..1]), None);
    }

    #[test]
    fn the_lease_gives_sigterm_a_grace_before_sigkill() {
        assert_eq!(
            lease_plan(1_000_000, 1_100_000, GRACE),
            Lease::Left { term_in: Duration::from_millis(50), kill_in: Duration::from_millis(100) }
        );
        // No grace: both at the lease's end.
        assert_eq!(
            lease_plan(1_000_000, 1_100_000, Duration::ZERO),
            Lease::Left { term_in: Duration::from_millis(100), kill_in: Duration::from_millis(100) }
        );
    }

    #[test]
    fn just_in_time_the_lease_still_runs() {
        // One microsecond left: SIGTERM now, SIGKILL in 1 µs.
        assert_eq!(
            lease_plan(1_099_999, 1_100_000, GRACE),
            Lease::Left { term_in: Duration::ZERO, kill_in: Duration::from_micros(1) }
        );
        // SIGTERM exactly now (the grace is all that is left).
        assert_eq!(
            lease_plan(1_050_000, 1_100_000, GRACE),
            Lease::Left { term_in: Duration::ZERO, kill_in: Duration::from_millis(50) }
        );
        // One microsecond before SIGTERM is due.
        assert_eq!(
            lease_plan(1_049_999, 1_100_000, GRACE),
            Lease::Left { term_in: Duration::from_micros(1), kill_in: Duration::from_micros(50_001) }
        );
    }

    #[test]
    fn at_or_after_the_lease_end_it_is_over() {
        assert_eq!(lease_plan(1_100_000, 1_100_000, GRACE), Lease::Over);
        assert_eq!(lease_plan(1_100_001, 1_100_000, GRACE), Lease::Over);
        assert_eq!(lease_plan(u64::MAX, 0, GRACE), Lease::Over);
        assert_eq!(lease_plan(5, 0, Duration::ZERO), Lease::Over);
    }

    #[test]
    fn a_grace_longer_than_the_lease_left_means_sigterm_at_once() {
        assert_eq!(
            lease_plan(1_000_000, 1_030_000, GRACE),
            Lease::Left { term_in: Duration::ZERO, kill_in: Duration::from_millis(30) }
        );
        assert_eq!(
            lease_plan(0, u64::MAX, Duration::MAX),
            Lease::Left { term_in: Duration::ZERO, kill_in: Duration::from_micros(u64::MAX) }
        );
    }

    #[test]
    fn the_default_kill_grace_is_a_fifth_of_the_default_lease() {
        assert_eq!(client::duration::parse(DEFAULT_KILL_GRACE), Ok(Duration::from_millis(100) / 5));
    }

    #[test]
    fn ringd_and_hbringd_say_they_grant_no_locks() {
        assert_eq!(
            no_locks_message("ringd").as_deref(),
            Some(
                "ringd grants no client locks: cluster-exclusive jobs are its needs_token command services \
                 (run one with `ftctl exec SERVICE`)"
            )
        );
        assert!(no_locks_message("hbringd").is_some_and(|m| m.starts_with("hbringd grants no client locks")));
        for lock_daemon in ["ntmutexd", "tokenwatchd", "electd"] {
            assert_eq!(no_locks_message(lock_daemon), None);
        }
    }
}
