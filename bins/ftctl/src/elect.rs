//! `ftctl elect NAME`: run CMD while this host leads election NAME
//! (`-- CMD`), or show who leads it (`--observe`, once or `--watch`ing)
//! (docs/elections.md).
//!
//! Campaigning is [`crate::lock::run`] with [`Target::Election`]: the same
//! wait, supervisor, signals, lease handling and exit statuses as `ftctl
//! lock`, with `Campaign` sent instead of an acquire and CMD given
//! `FTCOORD_ELECTION` and `FTCOORD_LEADER_VALUE` beside `FTCOORD_FENCE`.
//! `--value` defaults to the host name; `--timeout` to forever
//! ([`client::elect::FOREVER`]: `u64::MAX` ms on the wire, which the
//! daemons' saturating deadline arithmetic turns into "never").
//!
//! Observing prints one line per observation ([`render`], [`to_json`]).
//! A one-shot exits 0 with a leader, [`exit::NO_LEADER`] (3) without. A
//! watch prints the current state, then each change, through the client's
//! [`client::elect::LeaderFilter`] (never an older leader after a newer
//! one), until SIGINT or SIGTERM (exit 0: the way a watch is meant to
//! end). Once it has printed, a lost connection is re-established with a
//! backoff ([`Backoff`]: 100 ms doubling to 2 s) keeping the filter, with a
//! note on stderr; before that, an error ends it as a one-shot's would.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use client::elect::{self, election_label, refuses_elections, Watch};
use client::ClientError;
use lockservice::{LeaderInfo, LockName};

use crate::lock::{self, HoldArgs, Target};
use crate::signals::Signals;
use crate::{daemon, exit};

/// Where the host name is read first.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

/// The first wait before reconnecting a watch.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between reconnection attempts of a watch.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// `ftctl elect NAME [--value V] [--timeout DUR] [--kill-grace DUR] -- CMD`:
/// campaign with `value` (default: the host name), at most `timeout`
/// (default: forever), then run CMD as `ftctl lock` does.
pub async fn campaign(
    addr: &str,
    name: LockName,
    value: Option<String>,
    timeout: Option<Duration>,
    kill_grace: Duration,
    cmd: Vec<std::ffi::OsString>,
) -> Result<u8> {
    let Some(value) = value.or_else(host_name) else {
        eprintln!("ftctl: cannot read the host name ({HOSTNAME_FILE}, uname): pass --value");
        return Ok(exit::ERROR);
    };
    let timeout = timeout.unwrap_or(elect::FOREVER);
    lock::run(addr, &HoldArgs { target: Target::Election { name, value }, timeout, kill_grace, cmd }).await
}

/// Parses an election's NAME (a lock name's rules; the error says
/// "election name").
pub fn parse_name(text: &str) -> Result<LockName, String> {
    LockName::parse(text).map_err(|e| e.to_string().replacen("invalid lock name", "invalid election name", 1))
}

/// This host's name: /proc/sys/kernel/hostname, else uname(2)'s nodename;
/// `None` if neither gives a non-empty UTF-8 name.
pub fn host_name() -> Option<String> {
    let from_proc = std::fs::read_to_string(HOSTNAME_FILE).ok().and_then(|s| non_empty(s.trim_end_matches('\n')));
    from_proc.or_else(|| rustix::system::uname().nodename().to_str().ok().and_then(non_empty))
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// `leader: node N, fence F, value V` or `no leader` (control characters
/// of V escaped, so that one observation is one line).
pub fn render(leader: &Option<LeaderInfo>) -> String {
    match leader {
        None => "no leader".to_owned(),
        Some(l) => {
            let mut value = String::new();
            for c in l.value.chars() {
                if c.is_control() {
                    value.extend(c.escape_default());
                } else {
                    value.push(c);
                }
            }
            format!("leader: node {}, fence {}, value {value}", l.node, l.fence)
        }
    }
}

/// `{"name":"web","leader":null}` or
/// `{"name":"web","leader":{"node":2,"fence":"F","value":"V"}}` (the fence
/// a decimal string, as `ftctl locks --json` prints fences: 128-bit).
pub fn to_json(name: &LockName, leader: &Option<LeaderInfo>) -> String {
    let mut out = String::from("{\"name\":");
    crate::status::push_str(&mut out, name.as_str());
    out.push_str(",\"leader\":");
    match leader {
        None => out.push_str("null"),
        Some(l) => {
            let _ = write!(out, "{{\"node\":{},\"fence\":\"{}\",\"value\":", l.node, l.fence);
            crate::status::push_str(&mut out, &l.value);
            out.push('}');
        }
    }
    out.push('}');
    out
}

/// The line printed for an observation.
fn line(name: &LockName, leader: &Option<LeaderInfo>, json: bool) -> String {
    if json {
        to_json(name, leader)
    } else {
        render(leader)
    }
}

/// Prints `line` and flushes (a watch's reader sees each change at once).
fn emit(line: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

/// How an observe failed, as ftctl reports it: the exit status and the
/// message (after `ftctl: `).
fn observe_failure(e: &ClientError, addr: &str, name: &LockName) -> (u8, String) {
    let label = election_label(name);
    match e {
        ClientError::Refused(reason) if refuses_elections(reason) => {
            (exit::BAD_ARGUMENTS, format!("{label} refused: {reason}"))
        }
        ClientError::Refused(reason) => (exit::ERROR, format!("{label} refused: {reason}")),
        ClientError::Timeout(within) => (
            exit::ERROR,
            format!(
                "no answer from the daemon at {addr} within {} about {label}: is that its client_listen, and is \
                 it running (not stopped or overloaded)?",
                client::duration::show(*within)
            ),
        ),
        e => (exit::ERROR, format!("observing {label} at {addr}: {e}")),
    }
}

/// Whether `e` may come from a daemon speaking another API, or predating
/// elections (it hung up, or answered nonsense): worth asking which it is.
fn other_api(e: &ClientError) -> bool {
    matches!(e, ClientError::Frame(_) | ClientError::Closed | ClientError::Unexpected(_))
}

/// Reports `e`, the failure of an observe of `name` at `addr` before
/// anything was printed; returns the exit status. A daemon that hung up
/// or answered nonsense is asked (a new connection) which it is: a
/// known daemon does not serve elections (2).
async fn fail(e: &ClientError, addr: &str, name: &LockName, what: &str) -> u8 {
    if other_api(e) {
        if let Some(daemon) = lock::daemon_name(addr).await {
            let what = format!("{what} of {}", election_label(name));
            eprintln!("ftctl: {}", lock::no_elections_message(&daemon, addr, &what));
            return exit::BAD_ARGUMENTS;
        }
    }
    let (code, message) = observe_failure(e, addr, name);
    eprintln!("ftctl: {message}");
    code
}

/// `ftctl elect NAME --observe [--watch]`: prints who leads, once (exit 0
/// with a leader, 3 without) or on every change until SIGINT/SIGTERM.
pub async fn observe(addr: &str, name: &LockName, json: bool, watch: bool) -> Result<u8> {
    if watch {
        return watch_changes(addr, name, json).await;
    }
    let mut client = daemon::connect(addr).await?;
    let leader = match elect::observe(&mut client, name).await {
        Ok(leader) => leader,
        Err(e) => return Ok(fail(&e, addr, name, "the observe").await),
    };
    match emit(&line(name, &leader, json)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(e).context("cannot write to stdout"),
    }
    Ok(if leader.is_some() { exit::OK } else { exit::NO_LEADER })
}

/// The waits between a watch's reconnection attempts: [`FIRST_BACKOFF`],
/// doubling up to [`MAX_BACKOFF`]; back to the first once a connection
/// has worked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: FIRST_BACKOFF }
    }
}

impl Backoff {
    /// The wait before the next attempt (the one after waits twice as long,
    /// at most [`MAX_BACKOFF`]).
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = self.next.saturating_mul(2).min(MAX_BACKOFF);
        wait
    }

    /// Starts again from [`FIRST_BACKOFF`].
    pub fn reset(&mut self) {
        *self = Backoff::default();
    }
}

/// `e` for a note on stderr: a failed connection without the OS error's
/// number, as `ftctl` says it elsewhere.
fn why_lost(e: &ClientError) -> String {
    match e {
        ClientError::Connect { addr, source } => format!("cannot connect to {addr}: {}", daemon::os_message(source)),
        e => e.to_string(),
    }
}

/// `--observe --watch`: the current state, then every change, until a
/// signal (exit 0) or stdout closes (exit 0); reconnecting after the first
/// observation was printed.
async fn watch_changes(addr: &str, name: &LockName, json: bool) -> Result<u8> {
    let mut signals = Signals::catch().context("cannot catch SIGINT/SIGTERM")?;
    let label = election_label(name);
    let client = daemon::connect(addr).await?;
    let mut watch = match Watch::over(client, name).await {
        Ok(watch) => watch,
        Err(e) => return Ok(fail(&e, addr, name, "the watch").await),
    };
    let mut printed = false;
    let mut backoff = Backoff::default();
    let mut connected_at = Instant::now();
    loop {
        let next = tokio::select! {
            next = watch.next() => next,
            _ = signals.recv() => return Ok(exit::OK),
        };
        let mut lost = match next {
            Ok(leader) => {
                match emit(&line(name, &leader, json)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(exit::OK),
                    Err(e) => return Err(e).context("cannot write to stdout"),
                }
                printed = true;
                backoff.reset();
                continue;
            }
            Err(ClientError::Refused(reason)) if refuses_elections(&reason) => {
                eprintln!("ftctl: {label} refused: {reason}");
                return Ok(exit::BAD_ARGUMENTS);
            }
            Err(e) if !printed => return Ok(fail(&e, addr, name, "the watch").await),
            Err(e) => e,
        };
        if connected_at.elapsed() >= MAX_BACKOFF {
            // That connection worked for a while: start the waits again.
            backoff.reset();
        }
        // Until connected again, or a signal.
        loop {
            let wait = backoff.next_wait();
            eprintln!(
                "ftctl: the watch of {label} was lost ({}); reconnecting in {}",
                why_lost(&lost),
                client::duration::show(wait)
            );
            let again = tokio::select! {
                again = async {
                    tokio::time::sleep(wait).await;
                    watch.reconnect().await
                } => again,
                _ = signals.recv() => return Ok(exit::OK),
            };
            match again {
                Ok(()) => {
                    eprintln!("ftctl: watching {label} again");
                    connected_at = Instant::now();
                    break;
                }
                Err(e) => lost = e,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::parse(s).unwrap()
    }

    fn leader(node: u64, fence: u128, value: &str) -> Option<LeaderInfo> {
        Some(LeaderInfo { node, fence, value: value.into() })
    }

    #[test]
    fn text_lines_have_the_exact_shape() {
        assert_eq!(render(&None), "no leader");
        assert_eq!(render(&leader(2, 7, "web-1:8080")), "leader: node 2, fence 7, value web-1:8080");
        let big = (1u128 << 64) | 3;
        assert_eq!(render(&leader(5, big, "")), "leader: node 5, fence 18446744073709551619, value ");
        // One observation, one line.
        assert_eq!(render(&leader(1, 1, "a\nb\t\u{1b}c")), "leader: node 1, fence 1, value a\\nb\\t\\u{1b}c");
        assert_eq!(render(&leader(1, 1, "é \"q\" \\")), "leader: node 1, fence 1, value é \"q\" \\");
    }

    #[test]
    fn json_lines_have_the_exact_shape() {
        assert_eq!(to_json(&name("web"), &None), r#"{"name":"web","leader":null}"#);
        assert_eq!(
            to_json(&name("db/primary"), &leader(2, u128::MAX, "h\"1\"\n")),
            r#"{"name":"db/primary","leader":{"node":2,"fence":"340282366920938463463374607431768211455","value":"h\"1\"\n"}}"#
        );
        assert_eq!(line(&name("web"), &None, false), "no leader");
        assert_eq!(line(&name("web"), &None, true), r#"{"name":"web","leader":null}"#);
    }

    #[test]
    fn election_names_follow_lock_names_and_say_election() {
        assert_eq!(parse_name("db/primary-1"), Ok(name("db/primary-1")));
        assert_eq!(parse_name(""), Err("invalid election name: it is empty".into()));
        assert_eq!(
            parse_name("a:b"),
            Err("invalid election name: byte 0x3a at offset 1; a name is 1-128 bytes of A-Z a-z 0-9 . _ / -".into())
        );
        assert_eq!(parse_name(&"x".repeat(129)), Err("invalid election name: 129 bytes, the most is 128".into()));
        assert!(parse_name(&"x".repeat(128)).is_ok());
        // No user name is an election's internal lock name.
        assert!(parse_name("elect:web").is_err());
    }

    #[test]
    fn the_backoff_doubles_to_two_seconds_and_resets() {
        let mut b = Backoff::default();
        let waits: Vec<u64> = (0..7).map(|_| b.next_wait().as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000]);
        b.reset();
        assert_eq!(b.next_wait(), Duration::from_millis(100));
    }

    #[test]
    fn the_host_name_is_read() {
        let name = host_name().expect("a host name");
        assert!(!name.is_empty() && !name.contains('\n'), "{name:?}");
        if let Ok(proc) = std::fs::read_to_string(HOSTNAME_FILE) {
            assert_eq!(name, proc.trim_end_matches('\n'));
        }
    }

    #[test]
    fn notes_on_a_lost_watch_say_why_without_os_error_numbers() {
        let refused = ClientError::Connect {
            addr: "127.0.0.1:1".parse().unwrap(),
            source: std::io::Error::from_raw_os_error(111),
        };
        assert_eq!(why_lost(&refused), "cannot connect to 127.0.0.1:1: Connection refused");
        assert_eq!(why_lost(&ClientError::Closed), "the daemon closed the connection");
    }

    #[test]
    fn observe_failures_map_to_exit_statuses() {
        let web = name("web");
        let addr = "127.0.0.1:7201";
        let no_elections = "elections are served by electd: this daemon does not elect (docs/elections.md)";
        assert_eq!(
            observe_failure(&ClientError::Refused(no_elections.into()), addr, &web),
            (exit::BAD_ARGUMENTS, format!("election `web` refused: {no_elections}"))
        );
        let none = "no coordinator answered: an election or a failover is under way; try again";
        assert_eq!(
            observe_failure(&ClientError::Refused(none.into()), addr, &web),
            (exit::ERROR, format!("election `web` refused: {none}"))
        );
        let (code, m) = observe_failure(&ClientError::Timeout(Duration::from_secs(7)), addr, &web);
        assert_eq!(code, exit::ERROR);
        assert!(m.starts_with("no answer from the daemon at 127.0.0.1:7201 within 7 s about election `web`"), "{m}");
        assert_eq!(
            observe_failure(&ClientError::Closed, addr, &web),
            (exit::ERROR, "observing election `web` at 127.0.0.1:7201: the daemon closed the connection".into())
        );
    }
}
