//! ftctl's exit statuses, and a command's exit status as a shell reports it.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// Success (`ftctl status`).
pub const OK: u8 = 0;
/// Any error: cannot connect, refused, a reply that makes no sense.
pub const ERROR: u8 = 1;
/// `ftctl leader`: the daemon knows no coordinator (an election is under way).
pub const NO_LEADER: u8 = 3;
/// The lock was lost while the command ran (EX_UNAVAILABLE).
pub const LOCK_LOST: u8 = 69;
/// The lock was not obtained in time (EX_TEMPFAIL).
pub const TIMED_OUT: u8 = 75;
/// The command was found but could not be started.
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;

/// `128 + signal`, the shell's status for a process killed by `signal`.
pub fn of_signal(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

/// A finished command's status: its exit code, or `128 + N` if signal `N`
/// ended it.
pub fn of_status(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        // On Unix the code is already the low 8 bits the parent sees.
        return u8::try_from(code).unwrap_or(ERROR);
    }
    status.signal().map_or(ERROR, of_signal)
}

/// `--help` text for `ftctl lock`.
pub const LOCK_HELP: &str = "\
Exit status:
  CMD's status  the lock was held while CMD ran; 128+N if signal N killed CMD
  1             error: cannot connect, the daemon refused the request, bad reply
  2             bad arguments
  69            the lock was lost while CMD ran (revoked, or the daemon went
                away); CMD got SIGTERM, then SIGKILL after 5 s (EX_UNAVAILABLE)
  75            the lock was not obtained within --timeout (EX_TEMPFAIL)
  126, 127      CMD could not be started / was not found (nothing ran)
  130, 143      SIGINT / SIGTERM while waiting for the lock

CMD runs with FTCOORD_FENCE=<fencing token> in its environment: a number
larger than any granted before anywhere in the cluster. Pass it to whatever
the lock protects so that it can refuse a late writer holding an older one.

SIGINT or SIGTERM while CMD runs is forwarded to CMD (to its process only:
a CMD that starts children should exec or pass signals on); the lock is
released once CMD has exited, and ftctl exits with CMD's status.";

/// `--help` text for `ftctl leader`.
pub const LEADER_HELP: &str = "\
Prints the coordinator the daemon at --addr knows, its term, and the
daemon's own role: `coordinator 5 term 12 (node 3: consumer)`. With --json:
{\"node\":3,\"term\":12,\"coordinator\":5,\"role\":\"consumer\",\"leads\":false}
(coordinator null while none is known; leads: the daemon itself is the
coordinator and has taken office). With --watch: a line at once and one on
every change (text lines start with the time since the watch began), until
interrupted or the daemon goes away.

This is one daemon's view, stale by up to --every plus its detection time:
for mutual exclusion use `ftctl lock` and its fence.

Exit status:
  0  a coordinator is known (without --watch)
  1  error: cannot connect, no answer, the daemon elects no leader, or
     (with --watch) the daemon went away
  2  bad arguments
  3  no coordinator is known: an election is under way (without --watch)";

/// `--help` text for `ftctl status`.
pub const STATUS_HELP: &str = "\
Exit status:
  0  the status was printed
  1  error: cannot connect, no answer, bad reply
  2  bad arguments";

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait(2) status word: exit code in bits 8..16, signal in bits 0..7.
    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    fn killed_by(signal: i32) -> ExitStatus {
        ExitStatus::from_raw(signal)
    }

    #[test]
    fn exit_codes_pass_through() {
        assert_eq!(of_status(exited(0)), 0);
        assert_eq!(of_status(exited(3)), 3);
        assert_eq!(of_status(exited(255)), 255);
    }

    #[test]
    fn signals_map_to_128_plus_n() {
        assert_eq!(of_status(killed_by(2)), 130);
        assert_eq!(of_status(killed_by(9)), 137);
        assert_eq!(of_status(killed_by(15)), 143);
        assert_eq!(of_signal(2), 130);
        assert_eq!(of_signal(15), 143);
    }

    #[test]
    fn statuses_do_not_collide_with_each_other() {
        let mut all = [OK, ERROR, LOCK_LOST, TIMED_OUT, CANNOT_EXECUTE, NOT_FOUND, of_signal(2), of_signal(15)];
        all.sort_unstable();
        assert!(all.windows(2).all(|w| w[0] != w[1]), "{all:?}");
    }
}
