//! `ftctl locks`: the locks one node knows (`ListLocks`), as a table or
//! JSON.
//!
//! The table and the JSON are pure functions of the daemon's `Locks` reply
//! ([`render`], [`to_json`]), tested on their own; the JSON is written by
//! hand, as `ftctl status`'s is.

use std::fmt::Write as _;

use anyhow::{anyhow, bail, Result};
use client::lock::{self as locking, LIST_WAIT};
use client::ClientError;
use lockservice::LockInfo;

use crate::status::push_str;
use crate::{daemon, exit, lock};

/// Asks the daemon at `addr` for its node's locks and prints them.
pub async fn run(addr: &str, json: bool) -> Result<u8> {
    let mut c = daemon::connect(addr).await?;
    let (locks, known) = match locking::list(&mut c, LIST_WAIT).await {
        Ok(listed) => listed,
        Err(ClientError::Timeout(_)) => {
            bail!("no answer from the daemon at {addr} within {}", client::duration::show(LIST_WAIT))
        }
        Err(ClientError::Refused(reason)) => bail!("list of locks refused: {reason}"),
        // Hung up or answered nonsense: another API, or a daemon that
        // predates `ListLocks`.
        Err(e @ (ClientError::Closed | ClientError::Frame(_) | ClientError::Unexpected(_))) => {
            let daemon = lock::daemon_name(addr).await;
            let no_locks = daemon.as_deref().and_then(lock::no_locks_message);
            return Err(match (daemon, no_locks) {
                (_, Some(no_locks)) => anyhow!(no_locks),
                (Some(daemon), None) => {
                    anyhow!("{daemon} at {addr} does not list its locks ({e}): a version without `ftctl locks`?")
                }
                (None, None) => anyhow!("listing the locks of {addr}: {e}"),
            });
        }
        Err(e) => bail!("listing the locks of {addr}: {e}"),
    };
    if json {
        println!("{}", to_json(&locks, known));
    } else {
        print!("{}", render(&locks, known));
    }
    Ok(exit::OK)
}

/// `yes, fence F` / `no`.
fn held(info: &LockInfo) -> String {
    match info.held_fence {
        Some(fence) => format!("yes, fence {fence}"),
        None => "no".to_string(),
    }
}

/// The table `ftctl locks` prints: a header and a row per lock (name,
/// held here, last fence, waiters), in the daemon's order, then `N locks
/// known` (and how many are not shown, when the daemon listed fewer).
pub fn render(locks: &[LockInfo], known: u64) -> String {
    let mut out = String::new();
    if !locks.is_empty() {
        let rows: Vec<[String; 4]> = locks
            .iter()
            .map(|l| {
                let last = l.last_fence.map_or_else(|| "-".to_string(), |f| f.to_string());
                [l.name.to_string(), held(l), last, l.waiters.to_string()]
            })
            .collect();
        let header = ["NAME", "HELD HERE", "LAST FENCE", "WAITERS"].map(String::from);
        let mut widths = [0; 3];
        for row in std::iter::once(&header).chain(&rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for [name, held, last, waiters] in std::iter::once(&header).chain(&rows) {
            let _ = writeln!(
                out,
                "{name:<w0$}  {held:<w1$}  {last:<w2$}  {waiters}",
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2]
            );
        }
    }
    let listed = u64::try_from(locks.len()).unwrap_or(u64::MAX);
    let noun = if known == 1 { "lock" } else { "locks" };
    let _ = write!(out, "{known} {noun} known");
    if known > listed {
        let _ = write!(out, ", {} not shown (the most waited-for are listed)", known - listed);
    }
    out.push('\n');
    out
}

/// Appends a fence as a decimal string (128-bit: beyond many JSON parsers),
/// or null.
fn push_fence(out: &mut String, fence: Option<u128>) {
    match fence {
        Some(f) => {
            let _ = write!(out, "\"{f}\"");
        }
        None => out.push_str("null"),
    }
}

/// `{"known":N,"listed":M,"locks":[{"name":…,"held":…,"held_fence":…,"last_fence":…,"waiters":…}]}`:
/// the unnamed lock's name is `""`, fences are decimal strings or null.
pub fn to_json(locks: &[LockInfo], known: u64) -> String {
    let mut out = format!("{{\"known\":{known},\"listed\":{},\"locks\":[", locks.len());
    for (i, l) in locks.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        push_str(&mut out, l.name.as_str());
        let _ = write!(out, ",\"held\":{},\"held_fence\":", l.held_fence.is_some());
        push_fence(&mut out, l.held_fence);
        out.push_str(",\"last_fence\":");
        push_fence(&mut out, l.last_fence);
        let _ = write!(out, ",\"waiters\":{}}}", l.waiters);
    }
    out.push_str("]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockservice::LockName;

    fn info(name: &str, held: Option<u128>, last: Option<u128>, waiters: u32) -> LockInfo {
        let name = if name.is_empty() { LockName::unnamed() } else { LockName::parse(name).unwrap() };
        LockInfo { name, held_fence: held, last_fence: last, waiters }
    }

    const BIG: u128 = (1 << 64) + 7;

    #[test]
    fn the_table_has_a_row_per_lock_and_the_count() {
        let locks = [
            info("db/migrate", None, Some(BIG), 3),
            info("", Some(BIG + 1), Some(BIG + 1), 0),
            info("x", None, None, 0),
        ];
        assert_eq!(
            render(&locks, 3),
            "\
NAME        HELD HERE                        LAST FENCE            WAITERS
db/migrate  no                               18446744073709551623  3
(unnamed)   yes, fence 18446744073709551624  18446744073709551624  0
x           no                               -                     0
3 locks known
"
        );
    }

    #[test]
    fn the_count_says_how_many_are_not_shown() {
        assert_eq!(
            render(&[info("a", None, None, 9)], 300),
            "\
NAME  HELD HERE  LAST FENCE  WAITERS
a     no         -           9
300 locks known, 299 not shown (the most waited-for are listed)
"
        );
        assert_eq!(render(&[], 0), "0 locks known\n");
        assert_eq!(render(&[info("", None, None, 0)], 1).lines().last(), Some("1 lock known"));
        // A daemon listing more than it says it knows: nothing negative.
        assert_eq!(render(&[info("a", None, None, 0)], 0).lines().last(), Some("0 locks known"));
    }

    #[test]
    fn json_has_fences_as_strings_and_the_unnamed_lock_as_the_empty_name() {
        let locks = [info("db", Some(BIG), Some(BIG), 2), info("", None, None, 0)];
        assert_eq!(
            to_json(&locks, 5),
            "{\"known\":5,\"listed\":2,\"locks\":[\
             {\"name\":\"db\",\"held\":true,\"held_fence\":\"18446744073709551623\",\
             \"last_fence\":\"18446744073709551623\",\"waiters\":2},\
             {\"name\":\"\",\"held\":false,\"held_fence\":null,\"last_fence\":null,\"waiters\":0}]}"
        );
        assert_eq!(to_json(&[], 0), "{\"known\":0,\"listed\":0,\"locks\":[]}");
        assert_eq!(
            to_json(&[info("a", Some(u128::MAX), None, u32::MAX)], 1),
            format!(
                "{{\"known\":1,\"listed\":1,\"locks\":[{{\"name\":\"a\",\"held\":true,\"held_fence\":\"{}\",\
                 \"last_fence\":null,\"waiters\":{}}}]}}",
                u128::MAX,
                u32::MAX
            )
        );
    }
}
