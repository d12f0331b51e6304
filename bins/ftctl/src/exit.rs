//! ftctl's exit statuses, and a command's exit status as a shell reports it.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// Success (`ftctl status`).
pub const OK: u8 = 0;
/// Any error: cannot connect, no answer at all, refused, a reply that
/// makes no sense.
pub const ERROR: u8 = 1;
/// Bad arguments (clap's own status for them), `ftctl lock NAME` against
/// a daemon that serves no named locks, and `ftctl elect` against a daemon
/// that does not elect: the request cannot work there however often it is
/// retried.
pub const BAD_ARGUMENTS: u8 = 2;
/// `ftctl leader`: the daemon knows no coordinator (an election is under
/// way); `ftctl elect NAME --observe`: nobody leads election NAME.
pub const NO_LEADER: u8 = 3;
/// `ftctl exec`: unknown service, or bad arguments for it (EX_USAGE).
pub const USAGE: u8 = 64;
/// `ftctl fence check`: the fence is not larger than the recorded one
/// (EX_DATAERR); nothing was changed.
pub const STALE_FENCE: u8 = 65;
/// The lock (or an election's leadership) was lost while the command ran
/// (EX_UNAVAILABLE).
pub const LOCK_LOST: u8 = 69;
/// The daemon answered that the lock was not obtained in time; `ftctl
/// exec`: a failure worth retrying later (EX_TEMPFAIL).
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
  1             error: cannot connect, no answer from the daemon (not even its
                \"not obtained\" by --timeout plus 2 s), the daemon refused the
                request, bad reply
  2             bad arguments (an invalid NAME: nothing is sent), or NAME
                against a daemon that serves no named locks (ntmutexd,
                tokenwatchd, ringd, or an older electd): its reason is printed
  69            the lock was lost while CMD ran (revoked, the daemon went away,
                or its lease ran out: CMD got SIGTERM, and SIGKILL at the
                lease's end; CMD's supervisor was killed: CMD got SIGKILL),
                or the grant's lease had already ended (CMD not run)
                (EX_UNAVAILABLE)
  75            the daemon answered that the lock was not obtained within
                --timeout (EX_TEMPFAIL): another holds it, or the daemon has
                not joined its cluster yet (the message says which it can tell)
  126, 127      CMD could not be started / was not found (nothing ran)
  130, 143      SIGINT / SIGTERM while waiting for the lock

NAME is 1-128 bytes of A-Z a-z 0-9 . _ / - (an invalid one exits 2 before
anything is sent). Without NAME, the unnamed lock: one per cluster, the one
every daemon serves. electd serves named locks, each independent of the
others; ntmutexd and tokenwatchd refuse them (exit 2). CMD comes after `--`.

ringd and hbringd grant no client locks: against them ftctl lock says so and
exits 1 (ringd's cluster-exclusive jobs are its needs_token command
services: `ftctl exec SERVICE`).

CMD runs with FTCOORD_FENCE=<fencing token> in its environment: a number
larger than any granted before anywhere in the cluster for that lock. Pass
it to whatever the lock protects so that it can refuse a late writer holding
an older one. FTCOORD_LOCK_NAME is NAME (empty for the unnamed lock).

The grant is a lease that the daemon keeps renewing while it can prove it
still holds the lock: CMD gets SIGTERM --kill-grace before the lease's end
and SIGKILL at its end, unless a renewal moved it first; ftctl then exits 69
(CMD did not finish under the lock). After a loss (revoked, daemon gone) CMD
gets SIGTERM at once and SIGKILL at the lease's end if it is still running,
and ftctl exits 69. The lease protects against a paused or cut-off daemon,
not against a pause of CMD or of ftctl itself: for that, pass the fence on.

SIGINT or SIGTERM while CMD runs is forwarded to CMD (to its process only:
a CMD that starts children should exec or pass signals on); the lock is
released once CMD has exited, and ftctl exits with CMD's status.";

/// `--help` text for `ftctl elect`.
pub const ELECT_HELP: &str = "\
Campaigning (-- CMD): waits to lead election NAME (electd; default:
forever), then runs CMD as `ftctl lock` runs it: under the leadership's lease,
through the same supervisor, with the same signals and exit statuses. CMD's
environment has FTCOORD_FENCE=<fence of this leadership> (larger than any
before for NAME: pass it on, as under `ftctl lock`), FTCOORD_ELECTION=NAME
and FTCOORD_LEADER_VALUE=V (--value, default the host name: what observers
see while CMD's campaigner leads); FTCOORD_LOCK_NAME is removed from it.
When CMD exits the leadership is resigned and the next campaigner leads.
Elections have their own names: `ftctl lock web` and `ftctl elect web` never
contend. Without --timeout the campaign has no deadline (sent as the
largest timeout, which the daemons treat as never).

Exit status (campaigning):
  CMD's status  CMD ran while this campaigner led; 128+N if signal N killed it
  1             error: cannot connect, no answer from the daemon, the daemon
                refused the campaign, bad reply, no host name for --value
  2             bad arguments (an invalid NAME, a --value over 1024 bytes:
                nothing is sent), or a daemon that does not elect
                (ntmutexd, tokenwatchd: \"elections are served by electd\"),
                or an electd without elections: its reason is printed
  69            the leadership was lost while CMD ran (as for `ftctl lock`:
                revoked, the daemon went away, or its lease ran out), or the
                grant's lease had already ended (CMD not run) (EX_UNAVAILABLE)
  75            the daemon answered that this campaigner did not lead within
                --timeout (EX_TEMPFAIL); with --timeout 0: somebody leads
  126, 127      CMD could not be started / was not found (nothing ran)
  130, 143      SIGINT / SIGTERM while campaigning

Observing (--observe): prints `leader: node N, fence F, value V` (control
characters of V escaped) or `no leader`; with --json one object per line,
{\"name\":\"web\",\"leader\":{\"node\":2,\"fence\":\"18446744073709551617\",
\"value\":\"host-a\"}} or {\"name\":\"web\",\"leader\":null} (the fence a decimal
string: 128-bit). With --watch: the current state, then one line per change,
never an older leader after a newer one (a leader is printed only with a
fence above every fence printed before; `no leader` only after a leader).
If the connection to the daemon is lost after the first line, ftctl
reconnects (100 ms, doubling to 2 s between attempts), saying so on stderr,
and goes on with the same rule: a change made meanwhile is printed once the
daemon answers again (the last state is never missed, intermediate ones may
be).

Exit status (observing):
  0  a leader was printed; with --watch: SIGINT or SIGTERM, or stdout
     closed, ended the watch
  1  error: cannot connect, no answer (within 7 s), refused (\"no
     coordinator answered\": an election or failover is under way; no
     leader is known either way), bad reply; with --watch, any of these
     before the first line
  2  bad arguments (--observe with CMD, --value, --timeout or
     --kill-grace; --watch without --observe), or a daemon that does not
     elect
  3  no leader (without --watch)";

/// `--help` text for `ftctl locks`.
pub const LOCKS_HELP: &str = "\
Asks the daemon at --addr which locks its node knows (each waited for or
held by a local client, or granted here), and prints one row per lock: its
name ((unnamed) for the unnamed lock), whether a local client holds it and
with which fence, the fence of the last grant seen here, and its local
waiters; the locks with the most waiters first, at most 256, then a line
`N locks known` (saying how many are not shown when over 256). This is one
node's view: other nodes hold and wait for locks of their own.

With --json, one line:
{\"known\":2,\"listed\":2,\"locks\":[{\"name\":\"db\",\"held\":true,
\"held_fence\":\"18446744073709551623\",\"last_fence\":\"18446744073709551623\",
\"waiters\":3},…]} (name \"\" for the unnamed lock; fences as decimal
strings, 128-bit: beyond many JSON parsers; null when there is none).

Exit status:
  0  the locks were printed
  1  error: cannot connect, no answer, the daemon grants no client locks or
     does not list them (an older version), refused, bad reply
  2  bad arguments";

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

/// `--help` text for `ftctl lookup`.
pub const LOOKUP_HELP: &str = "\
Asks the ringd replica at --addr for the least-loaded replica: a Find goes
once round the ring, each replica putting itself forward if its load is
smaller (load: services running plus token services queued, when the Find
passed). Prints `replica 3 127.0.0.1:7803 load 0` (id, client address,
load), or with --json {\"replica\":3,\"address\":\"127.0.0.1:7803\",\"load\":0}.
Every lookup is answered: when the ring does not bring the Find back, with
the best replica known (the asked one at worst).

Exit status:
  0   the replica was printed
  1   error: cannot connect, not a ringd replica, refused, bad reply
  2   bad arguments
  75  no answer within --timeout (EX_TEMPFAIL)";

/// `--help` text for `ftctl exec`.
pub const EXEC_HELP: &str = "\
Without --on, the replica at --addr first finds the least-loaded replica (as
`ftctl lookup` does) and SERVICE runs there; with --on ADDR it runs on the
replica at ADDR. Prints the service's output, followed by a newline unless it
is empty, and exits with the service's status. With --json:
{\"request_id\":7,\"replica\":3,\"output\":\"a b\",\"status\":0,\"fence\":null}
(fence: a token service's fence, a decimal string), or on a service error
{\"error\":\"token_lost\",\"message\":\"...\",\"request_id\":7}.

Built-in services: echo ARGS, sleep MS, and the token services counter.incr
NAME [BY], counter.get NAME, kv.put KEY VALUE, kv.get KEY.

Retries: a token service is applied at most once per request id. An answer
token_lost (the token was lost before the result was confirmed; the service
may or may not have taken effect) is retried by ftctl itself with the same
request id, up to 5 times 100 ms apart: the replica answers the stored
outcome if it had been applied, or runs it. After any other failure once the
request was sent (exit 1 or 75; the request id is on stderr), rerun with
--request-id N, on any replica, to retry without applying it twice.

Exit status:
  SERVICE's status  it ran: 0 for the built-ins (kv.get: 1 when the key is
                    missing); a command service's exit status
  1                 error: cannot connect, not a ringd replica, the connection
                    broke, refused, bad reply
  2                 bad arguments to ftctl
  64                unknown service, or bad arguments for it (EX_USAGE)
  75                try again later (EX_TEMPFAIL): token_lost (after the
                    retries), timed_out (killed at its timeout or at its
                    lease's end), no_quorum (the replica's ring is a minority
                    of the cluster), busy (its queue is full), leaving (it is
                    shutting down), or no answer within --timeout
  126               a command service could not be started (spawn_failed)";

/// `--help` text for `ftctl fence check`.
pub const FENCE_CHECK_HELP: &str = "\
The resource's half of fencing (docs/fencing.md): a lock holder paused past
its lease may still run, so whatever the lock protects must refuse a fence
older than one it has seen. No daemon is involved.

PATH holds one line: the largest fence accepted so far, in decimal (no
sign, no leading zeros), and a newline, so `cat PATH` shows it. A missing
or empty file records none (any fence is accepted). Anything else is
refused and left as it is, a number without its newline included (what a
truncated record would look like). FENCE is written the same way.

One check at a time per PATH: an exclusive flock on PATH.lock (created if
missing, never deleted) is held while PATH is read, compared and replaced.
A new record is written to PATH.tmp, fsynced, renamed over PATH, and the
directory fsynced. PATH must be a regular file, not a link. Prints nothing
unless it refuses or fails.

  ftctl lock report -- sh -c '
    ftctl fence check --file /var/lib/report/fence \"$FTCOORD_FENCE\" &&
    write-report'

The check and the write are two steps: a holder paused between them can
still write late. A resource that checks the fence in the write itself (a
conditional SQL update, a conditional put) closes that gap too.

Exit status:
  0   FENCE was larger than every recorded fence: it is now recorded
  1   error: PATH is not a fence record, is a directory or a link (nothing
      changed), or it, its lock file or its directory cannot be read,
      created or written (a missing directory, no permission)
  2   bad arguments (FENCE is not a decimal number below 2^128): nothing
      is touched
  65  stale fence: FENCE is not larger than the recorded one (EX_DATAERR);
      the message says `stale fence FENCE ≤ RECORDED`; nothing changed";

/// `--help` text for `ftctl status`.
pub const STATUS_HELP: &str = "\
With --json, one line: {\"daemon\":\"ntmutexd\",\"node\":1,\"incarnation\":…,\"role\":…,
\"peers\":[{\"id\":2,\"addr\":…,\"up\":true,\"incarnation\":…}],\"details\":{…}}; details
are typed: numbers as JSON numbers, true/false as booleans, none as null,
and fences as decimal strings (128-bit: beyond many JSON parsers).

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
        let mut all = [
            OK,
            ERROR,
            BAD_ARGUMENTS,
            NO_LEADER,
            USAGE,
            STALE_FENCE,
            LOCK_LOST,
            TIMED_OUT,
            CANNOT_EXECUTE,
            NOT_FOUND,
            of_signal(2),
            of_signal(15),
        ];
        all.sort_unstable();
        assert!(all.windows(2).all(|w| w[0] != w[1]), "{all:?}");
    }
}
