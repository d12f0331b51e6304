//! Looking at a running cluster from outside, as `ftlab demo`, `ftlab
//! chaos` and `ftlab bench` do: statuses through the client API, metric
//! sums, polling with a deadline, and the workload each daemon serves.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use client::leader::Never;
use client::ring::RingClient;
use client::{Client, StatusReport};

use crate::workload::{Clock, Load};
use crate::Cluster;

/// The metric prefix of a daemon (`ntmutex` for ntmutexd, …).
pub fn prefix(daemon: &str) -> &'static str {
    match daemon {
        "ntmutexd" => "ntmutex",
        "tokenwatchd" => "tokenwatch",
        "electd" => "electd",
        "ringd" => "ringd",
        _ => "hbring",
    }
}

/// Whether the daemon serves the lock API (ntmutexd, tokenwatchd, electd).
pub fn is_lock_daemon(daemon: &str) -> bool {
    matches!(daemon, "ntmutexd" | "tokenwatchd" | "electd")
}

/// Node `id`'s status, or None when it does not answer within a second.
pub async fn status(c: &Cluster, id: u32) -> Option<StatusReport> {
    let addr = c.node(id).client;
    let ask = async {
        let mut client = Client::<Never, Never>::connect(addr).await.ok()?;
        client.status().await.ok()
    };
    tokio::time::timeout(Duration::from_secs(1), ask).await.ok().flatten()
}

/// One `key = value` detail of a status.
pub fn detail<'a>(s: &'a StatusReport, key: &str) -> Option<&'a str> {
    s.details.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Polls `f` every 5 ms until it gives Some, at most `limit`.
pub async fn poll<T, F: Future<Output = Option<T>>>(limit: Duration, mut f: impl FnMut() -> F) -> Option<T> {
    let end = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The sum over nodes `ids` of every sample whose name starts with `name`
/// (`ntmutex_messages_sent_total` sums every `type`).
pub fn sum_samples(c: &Cluster, ids: &[u32], name: &str) -> f64 {
    ids.iter().filter_map(|id| c.scrape(*id).ok()).map(|text| sum_in(&text, name)).sum()
}

/// The sum of every sample in `text` whose name starts with `name`.
pub fn sum_in(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(name))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// Every node of `ids` answers and sees every peer up.
pub async fn all_see_all(c: &Cluster, ids: &[u32]) -> bool {
    for id in ids {
        match status(c, *id).await {
            Some(s) if s.peers.iter().all(|p| p.up) => {}
            _ => return false,
        }
    }
    true
}

/// The node that holds (or owns) the token, or the coordinator (electd),
/// polled for at most `limit`; None for hbringd, which has neither.
pub async fn critical_node(c: &Cluster, daemon: &str, limit: Duration) -> Option<(u32, &'static str)> {
    let n = c.len() as u32;
    match daemon {
        "electd" => {
            poll(limit, || async {
                for id in 1..=n {
                    if let Some(who) = status(c, id).await.and_then(|s| detail(&s, "coordinator")?.parse::<u32>().ok())
                    {
                        return Some((who, "coordinator"));
                    }
                }
                None
            })
            .await
        }
        "ntmutexd" | "tokenwatchd" | "ringd" => {
            poll(limit, || async {
                for id in 1..=n {
                    if status(c, id).await.is_some_and(|s| detail(&s, "has_token") == Some("true")) {
                        return Some((id, if daemon == "ringd" { "token owner" } else { "token holder" }));
                    }
                }
                None
            })
            .await
        }
        _ => None,
    }
}

/// The name of the counter the ringd workload increments.
pub const COUNTER: &str = "ftlab";

/// Starts the daemon's workload on `load`: a lock client per node holding
/// `hold` (lock daemons), or three clients incrementing [`COUNTER`]
/// through any replica (ringd); nothing for hbringd. Inside a runtime.
pub fn start_workload(c: &Cluster, daemon: &str, load: &mut Load, hold: Duration, clock: Clock) {
    let n = c.len() as u32;
    if is_lock_daemon(daemon) {
        for id in 1..=n {
            load.lock_client(format!("c{id}"), c.node(id).client, hold, clock);
        }
    } else if daemon == "ringd" {
        for k in 0..3usize.min(n as usize) {
            let mut addrs = clients(c);
            addrs.rotate_left(k);
            load.incr_client(format!("c{}", k + 1), addrs, COUNTER.into(), clock);
        }
    }
}

/// Every node's client address.
pub fn clients(c: &Cluster) -> Vec<SocketAddr> {
    (1..=c.len() as u32).map(|id| c.node(id).client).collect()
}

/// `counter.get COUNTER` through the first replica of `replicas` that
/// answers.
pub async fn counter_value(replicas: &[SocketAddr]) -> Result<u64> {
    for addr in replicas {
        let Ok(mut c) = RingClient::connect(*addr).await else { continue };
        if let Ok(Ok(r)) = c.execute("counter.get", &[COUNTER.to_string()], Duration::from_secs(10)).await {
            return r.output.trim().parse().map_err(|_| anyhow!("counter.get said {:?}", r.output));
        }
    }
    bail!("no replica answered counter.get")
}

/// utime + stime of process `pid`, µs.
pub fn cpu_us(pid: u32) -> Result<f64> {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("read /proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces): state is
    // field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| anyhow!("odd /proc/{pid}/stat"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| anyhow!("odd /proc/{pid}/stat"));
    Ok((ticks(11)? + ticks(12)?) as f64 * 1e6 / clock_ticks())
}

/// Clock ticks per second of /proc's times (`getconf CLK_TCK`, else 100).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .filter(|t: &f64| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// Resident memory of process `pid` (`VmRSS` of /proc/PID/status), bytes.
pub fn rss_bytes(pid: u32) -> Result<u64> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("read /proc/{pid}/status"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| anyhow!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}
