//! `ftctl lock`: run a command while this host holds the cluster-wide lock.
//!
//! One run: connect, send `Acquire`, wait for the answer (at most the
//! timeout plus a grace for the daemon's own answer), run CMD with
//! `FTCOORD_FENCE`, watch the connection while CMD runs, send `Release`
//! when it exits, and exit with its status. The hold is tied to the
//! connection: the daemon also releases it when ftctl goes away, so every
//! early exit is safe even when the `Release` is never read.
//!
//! Losing the lock while CMD runs (`LockLost`, or the connection closing
//! because the daemon died) means CMD is no longer protected: it gets
//! SIGTERM at once, SIGKILL if it is still alive 5 s later.
//!
//! What each reply means is decided by two pure functions
//! ([`on_wait_reply`], [`on_hold_reply`]), tested on their own.

use std::ffi::OsString;
use std::io;
use std::time::Duration;

use anyhow::{Context, Result};
use client::ClientError;
use lockservice::{LockReply, LockRequest};
use tokio::process::{Child, Command};

use crate::daemon::{self, LockClient};
use crate::exit;
use crate::signals::{self, Sig, Signals};

/// The environment variable carrying the fencing token to CMD.
pub const FENCE_ENV: &str = "FTCOORD_FENCE";

/// How long past the timeout ftctl waits for the daemon's own `TimedOut`.
const ANSWER_GRACE: Duration = Duration::from_secs(2);
/// How long ftctl waits for `Released` after CMD exits.
const RELEASE_WAIT: Duration = Duration::from_secs(2);
/// How long CMD has to exit after SIGTERM when the lock is lost.
const KILL_AFTER: Duration = Duration::from_secs(5);
/// How long a best-effort `Release` may take to send when giving up.
const GIVE_UP_SEND: Duration = Duration::from_secs(1);

/// What `ftctl lock` was asked to do.
#[derive(Debug)]
pub struct LockArgs {
    /// How long to wait for the grant (0: only if it can be granted at once).
    pub timeout: Duration,
    /// CMD and its arguments (at least CMD).
    pub cmd: Vec<OsString>,
}

/// What a reply to `Acquire` means.
#[derive(Debug, PartialEq, Eq)]
enum Wait {
    /// Run CMD with this fence.
    Granted(u128),
    /// Stop here with this status and message.
    Exit(u8, String),
}

fn on_wait_reply(reply: Result<LockReply, ClientError>, timeout: Duration) -> Wait {
    match reply {
        Ok(LockReply::Granted { fence }) => Wait::Granted(fence),
        Ok(LockReply::TimedOut) => Wait::Exit(exit::TIMED_OUT, format!("lock not obtained within {timeout:?}")),
        Ok(LockReply::Refused { reason }) => Wait::Exit(exit::ERROR, format!("lock refused: {reason}")),
        Ok(LockReply::LockLost { reason }) => Wait::Exit(exit::LOCK_LOST, format!("lock lost: {reason}")),
        Ok(LockReply::Released) => {
            Wait::Exit(exit::ERROR, "the daemon answered `released` to a lock request".to_string())
        }
        Err(ClientError::Refused(reason)) => Wait::Exit(exit::ERROR, format!("lock refused: {reason}")),
        Err(e) => Wait::Exit(exit::ERROR, format!("waiting for the lock: {e}")),
    }
}

/// What a message from the daemon means while CMD runs.
#[derive(Debug, PartialEq, Eq)]
enum Hold {
    /// Still held; print this warning about a stray reply.
    Keep(String),
    /// No longer held, for this reason: stop CMD.
    Lost(String),
}

fn on_hold_reply(reply: Result<LockReply, ClientError>) -> Hold {
    match reply {
        Ok(LockReply::LockLost { reason }) => Hold::Lost(reason),
        Ok(LockReply::Released) => Hold::Lost("the daemon released the lock unasked".to_string()),
        Err(ClientError::Closed) => Hold::Lost("the daemon closed the connection".to_string()),
        Err(ClientError::Refused(reason)) => Hold::Keep(format!("the daemon said: {reason}")),
        Err(e) => Hold::Lost(format!("connection to the daemon failed: {e}")),
        Ok(other) => Hold::Keep(format!("ignoring an unexpected reply while holding the lock: {other:?}")),
    }
}

/// Runs `ftctl lock` against the daemon at `addr`; returns the exit status.
pub async fn run(addr: &str, args: &LockArgs) -> Result<u8> {
    // Caught before anything else, so a signal never kills ftctl mid-hold.
    let mut signals = Signals::catch().context("cannot catch SIGINT/SIGTERM")?;
    let mut client = daemon::connect(addr).await?;
    let timeout_ms = u64::try_from(args.timeout.as_millis()).unwrap_or(u64::MAX);
    client.send(LockRequest::Acquire { timeout_ms }).await.with_context(|| format!("asking {addr} for the lock"))?;

    let answer_by = tokio::time::sleep(args.timeout.saturating_add(ANSWER_GRACE));
    let fence = tokio::select! {
        reply = client.recv() => {
            // A reply that is no lock reply, or a daemon that hung up: it
            // may speak another API (ringd, hbringd).
            let other_api =
                matches!(reply, Err(ClientError::Frame(_) | ClientError::Closed | ClientError::Unexpected(_)));
            match on_wait_reply(reply, args.timeout) {
                Wait::Granted(fence) => fence,
                Wait::Exit(code, message) => {
                    let no_locks = if other_api { grants_no_locks(addr).await } else { None };
                    eprintln!("ftctl: {}", no_locks.unwrap_or(message));
                    return Ok(code);
                }
            }
        }
        () = answer_by => {
            give_up(&mut client).await;
            eprintln!("ftctl: lock not obtained: no answer from {addr} within {:?}", args.timeout.saturating_add(ANSWER_GRACE));
            return Ok(exit::TIMED_OUT);
        }
        sig = signals.recv() => {
            give_up(&mut client).await;
            eprintln!("ftctl: SIG{} while waiting for the lock; gave up", sig.name());
            return Ok(exit::of_signal(sig.number()));
        }
    };

    let program = args.cmd[0].to_string_lossy().into_owned();
    let mut child = match Command::new(&args.cmd[0]).args(&args.cmd[1..]).env(FENCE_ENV, fence.to_string()).spawn() {
        Ok(child) => child,
        Err(e) => {
            warn_if_err(release(&mut client).await);
            eprintln!("ftctl: cannot run {program}: {e}");
            return Ok(if e.kind() == io::ErrorKind::NotFound { exit::NOT_FOUND } else { exit::CANNOT_EXECUTE });
        }
    };
    let pid = child.id();

    let status = loop {
        tokio::select! {
            // A loss seen together with CMD's exit counts as a loss.
            biased;
            reply = client.recv() => match on_hold_reply(reply) {
                Hold::Keep(warning) => eprintln!("ftctl: {warning}"),
                Hold::Lost(reason) => {
                    eprintln!("ftctl: lock lost: {reason}; stopping {program} (SIGTERM)");
                    stop(&mut child, &program).await;
                    return Ok(exit::LOCK_LOST);
                }
            },
            status = child.wait() => break status.with_context(|| format!("waiting for {program}"))?,
            sig = signals.recv() => {
                if let Some(pid) = pid {
                    signals::send(pid, sig).await;
                }
            }
        }
    };
    warn_if_err(release(&mut client).await);
    Ok(exit::of_status(status))
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

/// Asks the daemon at `addr` (a new connection) which it is; the message
/// for a daemon that grants no locks.
async fn grants_no_locks(addr: &str) -> Option<String> {
    let mut c = tokio::time::timeout(PROBE, daemon::connect(addr)).await.ok()?.ok()?;
    let status = tokio::time::timeout(PROBE, c.status()).await.ok()?.ok()?;
    no_locks_message(&status.daemon)
}

/// Stops waiting: sends `Release` without waiting for the answer (closing
/// the connection releases too, so this only makes it quicker).
async fn give_up(client: &mut LockClient) {
    let _ = tokio::time::timeout(GIVE_UP_SEND, client.send(LockRequest::Release)).await;
}

/// Sends `Release` and waits (bounded) for `Released`.
async fn release(client: &mut LockClient) -> Result<(), String> {
    let ask = async {
        client.send(LockRequest::Release).await.map_err(|e| format!("cannot send the release: {e}"))?;
        loop {
            match client.recv().await {
                Ok(LockReply::Released) => return Ok(()),
                Ok(LockReply::LockLost { reason }) => {
                    return Err(format!("the lock was lost as the command ended: {reason}"))
                }
                Ok(LockReply::Refused { reason }) => return Err(format!("release refused: {reason}")),
                // A stray reply to an earlier request: keep waiting.
                Ok(LockReply::Granted { .. } | LockReply::TimedOut) => {}
                Err(e) => return Err(format!("no release confirmation: {e}")),
            }
        }
    };
    tokio::time::timeout(RELEASE_WAIT, ask).await.unwrap_or_else(|_| {
        Err(format!("no release confirmation within {RELEASE_WAIT:?} (the daemon releases when ftctl disconnects)"))
    })
}

fn warn_if_err(r: Result<(), String>) {
    if let Err(why) = r {
        eprintln!("ftctl: warning: {why}");
    }
}

/// SIGTERM to CMD, SIGKILL after [`KILL_AFTER`]; returns once CMD is reaped.
async fn stop(child: &mut Child, program: &str) {
    if let Some(pid) = child.id() {
        signals::send(pid, Sig::Term).await;
    }
    if tokio::time::timeout(KILL_AFTER, child.wait()).await.is_err() {
        eprintln!("ftctl: {program} still running {KILL_AFTER:?} after SIGTERM; sending SIGKILL");
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(30);

    #[test]
    fn a_grant_runs_the_command_with_its_fence() {
        assert_eq!(on_wait_reply(Ok(LockReply::Granted { fence: 42 }), T), Wait::Granted(42));
    }

    #[test]
    fn wait_replies_map_to_exit_statuses() {
        let code = |r| match on_wait_reply(r, T) {
            Wait::Exit(code, _) => code,
            Wait::Granted(f) => panic!("granted {f}"),
        };
        assert_eq!(code(Ok(LockReply::TimedOut)), exit::TIMED_OUT);
        assert_eq!(code(Ok(LockReply::Refused { reason: "queue full".into() })), exit::ERROR);
        assert_eq!(code(Ok(LockReply::LockLost { reason: "token lost".into() })), exit::LOCK_LOST);
        assert_eq!(code(Ok(LockReply::Released)), exit::ERROR);
        assert_eq!(code(Err(ClientError::Refused("leaving".into()))), exit::ERROR);
        assert_eq!(code(Err(ClientError::Closed)), exit::ERROR);
    }

    #[test]
    fn wait_messages_say_why() {
        assert_eq!(
            on_wait_reply(Ok(LockReply::Refused { reason: "queue full".into() }), T),
            Wait::Exit(exit::ERROR, "lock refused: queue full".into())
        );
        assert_eq!(
            on_wait_reply(Ok(LockReply::TimedOut), Duration::from_millis(500)),
            Wait::Exit(exit::TIMED_OUT, "lock not obtained within 500ms".into())
        );
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

    #[test]
    fn loss_and_disconnection_end_the_hold() {
        assert_eq!(on_hold_reply(Ok(LockReply::LockLost { reason: "revoked".into() })), Hold::Lost("revoked".into()));
        assert_eq!(on_hold_reply(Err(ClientError::Closed)), Hold::Lost("the daemon closed the connection".into()));
        assert!(matches!(on_hold_reply(Ok(LockReply::Released)), Hold::Lost(_)));
        let timeout = ClientError::Timeout(Duration::from_secs(1));
        assert!(matches!(on_hold_reply(Err(timeout)), Hold::Lost(_)));
    }

    #[test]
    fn stray_replies_keep_the_hold_with_a_warning() {
        for r in [
            Ok(LockReply::Granted { fence: 7 }),
            Ok(LockReply::TimedOut),
            Ok(LockReply::Refused { reason: "already held".into() }),
            Err(ClientError::Refused("no".into())),
        ] {
            assert!(matches!(on_hold_reply(r), Hold::Keep(_)));
        }
    }
}
