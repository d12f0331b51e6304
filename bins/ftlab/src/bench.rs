//! `ftlab bench`: the baseline L and each daemon under load, next to L of
//! the same run (docs/performance.md).
//!
//! - `ftlab bench baseline`: L, half the median round trip of a small
//!   message between this process and a peer process (`ftlab bench-peer`)
//!   over loopback TCP (nodelay) and UDP, and fsync_p50, the median of one
//!   durable state write (write a temporary file, fsync, rename, fsync the
//!   directory).
//! - `ftlab bench DAEMON`: a cluster under contending clients; throughput,
//!   latency percentiles, messages and daemon CPU per operation, each next
//!   to L of the same run and docs/performance.md's target; the clients' records
//!   are checked (exit status 1 when a check fails).
//! - `ftlab bench electd --names K`: the clients spread over K named
//!   locks (client i asks `bench-{i mod K}`); the checks are per name,
//!   handoffs are within a name, and the report adds how the holds spread
//!   over the names. Refused for the daemons that serve no names.
//! - `ftlab bench ntmutexd --against etcd`: the same contended lock
//!   workload against a local single-member etcd, side by side.
//! - `ftlab bench DAEMON --idle`: the cluster with no client, once
//!   recovered: each node's CPU and resident memory; then how long a few
//!   requests made one at a time at the idle cluster wait.
//!
//! Nothing here asserts a speed: a target missed is reported, not an error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;

mod baseline;
mod etcd;
mod idle;
mod load;

pub use baseline::peer;

/// Daemons `ftlab bench` can drive (hbringd serves no client workload).
const BENCHED: [&str; 4] = ["ntmutexd", "tokenwatchd", "electd", "ringd"];

/// Daemons that serve named locks (docs/named-locks.md): `--names` is
/// refused for the others, which answer a named request `Refused`.
const NAMED: [&str; 1] = ["electd"];

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// `baseline`, or a daemon: ntmutexd, tokenwatchd, electd, ringd.
    #[arg(value_parser = parse_target)]
    target: String,
    /// Nodes in the cluster.
    #[arg(short = 'n', long = "nodes", default_value_t = 5)]
    n: usize,
    /// Contending clients, spread over the nodes (default: one per node).
    #[arg(long)]
    clients: Option<usize>,
    /// Spread the clients over K named locks, `bench-0` … `bench-{K-1}`
    /// (client i asks `bench-{i mod K}`), each its own lock; default: all
    /// on the unnamed lock. electd only (the daemons that serve names).
    #[arg(long, value_name = "K")]
    names: Option<usize>,
    /// How long the measured window lasts (`10s`, `500ms`, `2m`).
    #[arg(long, default_value = "5s", value_parser = client::duration::parse)]
    duration: Duration,
    /// Datagram loss injected at every node, 0 to 1 (or `30%`): tokenwatchd
    /// only (its `chaos.drop_rate`).
    #[arg(long, value_parser = parse_loss)]
    loss: Option<f64>,
    /// Run the same workload against another system too: `etcd` (ntmutexd
    /// only; needs `etcd` on PATH).
    #[arg(long, value_name = "SYSTEM")]
    against: Option<String>,
    /// No client: measure the idle cluster's CPU and resident memory per
    /// node (docs/performance.md: < 1 % of a core, < 15 MiB), from when every
    /// node has recovered and 3 s have passed; then time 10 requests made
    /// one at a time at random nodes, 300–700 ms apart (what a client of
    /// the idle cluster waits).
    #[arg(long, conflicts_with_all = ["clients", "names", "loss", "against"])]
    idle: bool,
    /// Extra TOML appended to every node's config (e.g.
    /// `token_min_hold_ms = 0`); default timings otherwise.
    #[arg(long, value_name = "TOML")]
    extra: Option<String>,
    /// Directory for the baseline's fsync samples (default: the system's
    /// temporary directory, where the benched clusters keep their state).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

/// `baseline` or a daemon's name, or why not: an unknown target is a
/// usage error (exit status 2). A daemon with no workload (hbringd) is
/// refused later, with the reason.
fn parse_target(s: &str) -> std::result::Result<String, String> {
    if s == "baseline" || ftlab::DAEMONS.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(format!("unknown bench target {s:?}: one of baseline, {}", BENCHED.join(", ")))
    }
}

/// `ftlab bench-peer` (internal): the other end of the baseline's ping-pong.
#[derive(Args, Debug)]
pub struct PeerArgs {}

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    check_args(&a)?;
    if a.target == "baseline" {
        return baseline::run(a.dir, a.json);
    }
    if a.idle {
        ftlab::check_daemon(&a.target)?;
        let opts = load::Opts {
            daemon: a.target.clone(),
            n: a.n,
            clients: 0,
            names: None,
            duration: a.duration,
            loss: None,
            extra: a.extra.unwrap_or_default(),
            json: a.json,
        };
        return idle::run(&opts);
    }
    let clients = a.clients.unwrap_or(a.n);
    ftlab::check_daemon(&a.target)?;
    let etcd_bin = match &a.against {
        Some(_) => Some(etcd::find()?),
        None => None,
    };
    let opts = load::Opts {
        daemon: a.target.clone(),
        n: a.n,
        clients,
        names: a.names,
        duration: a.duration,
        loss: a.loss,
        extra: a.extra.unwrap_or_default(),
        json: a.json,
    };
    load::run(&opts, etcd_bin)
}

/// The requests that make no sense, refused before anything starts.
fn check_args(a: &BenchArgs) -> Result<()> {
    if a.target == "baseline" {
        if a.loss.is_some() || a.against.is_some() || a.extra.is_some() || a.idle || a.names.is_some() {
            bail!("ftlab bench baseline takes no --loss, --against, --extra, --names or --idle");
        }
        return Ok(());
    }
    if !BENCHED.contains(&a.target.as_str()) {
        if ftlab::DAEMONS.contains(&a.target.as_str()) {
            bail!("ftlab bench {}: no client workload to drive (benched: baseline, {})", a.target, BENCHED.join(", "));
        }
        bail!("unknown bench target {:?}: one of baseline, {}", a.target, BENCHED.join(", "));
    }
    if a.loss.is_some() && a.target != "tokenwatchd" {
        bail!("--loss: {} has no loss injection (no chaos.drop_rate key); only tokenwatchd (UDP) has one", a.target);
    }
    if let Some(sys) = &a.against {
        if sys != "etcd" {
            bail!("--against {sys:?}: only `etcd` is supported");
        }
        if a.target != "ntmutexd" {
            bail!("--against etcd compares lock throughput: ntmutexd only");
        }
    }
    if a.n == 0 {
        bail!("-n must be at least 1");
    }
    if a.duration.is_zero() {
        bail!("--duration must be positive");
    }
    match a.names {
        Some(0) => bail!("--names must be at least 1 (without --names, every client asks for the unnamed lock)"),
        Some(_) if !NAMED.contains(&a.target.as_str()) => bail!(
            "--names: {} does not serve named locks (docs/named-locks.md); only {} does",
            a.target,
            NAMED.join(", ")
        ),
        _ => {}
    }
    if !a.idle && a.clients == Some(0) {
        bail!("--clients must be at least 1 (--idle measures a cluster with none)");
    }
    Ok(())
}

/// `0.3` or `30%`, in 0..=1.
fn parse_loss(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => s.parse::<f64>(),
    }
    .map_err(|_| format!("{s:?} is not a loss rate (0 to 1, or a percentage such as 30%)"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("{s:?} is out of range: 0 to 1 (0% to 100%)"));
    }
    Ok(v)
}

/// The `p`-th percentile (nearest rank) of `v`, sorted in place; None when
/// empty.
fn percentile(v: &mut [f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// A time in µs for people: `23.4 µs`, `1.25 ms`, `2.10 s`.
fn human_us(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.1} µs")
    } else if us < 1_000_000.0 {
        format!("{:.2} ms", us / 1_000.0)
    } else {
        format!("{:.2} s", us / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    /// `ftlab bench ARGS` as parsed and checked before anything starts.
    fn checked(args: &[&str]) -> Result<(), String> {
        let cli =
            Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        check_args(&cli.bench).map_err(|e| e.to_string())
    }

    #[test]
    fn names_are_for_the_daemons_that_serve_them() {
        assert_eq!(checked(&["electd", "--names", "100", "--clients", "500"]), Ok(()));
        assert_eq!(checked(&["electd"]), Ok(()));
        assert_eq!(checked(&["ntmutexd"]), Ok(()));
        for daemon in ["ntmutexd", "tokenwatchd", "ringd"] {
            let e = checked(&[daemon, "--names", "4"]).unwrap_err();
            assert_eq!(
                e,
                format!("--names: {daemon} does not serve named locks (docs/named-locks.md); only electd does")
            );
        }
        let e = checked(&["electd", "--names", "0"]).unwrap_err();
        assert!(e.starts_with("--names must be at least 1"), "{e}");
        let e = checked(&["baseline", "--names", "3"]).unwrap_err();
        assert!(e.contains("takes no") && e.contains("--names"), "{e}");
        let e = checked(&["electd", "--names", "3", "--idle"]).unwrap_err();
        assert!(e.contains("--names") && e.contains("--idle"), "{e}");
        assert!(checked(&["electd", "--names", "many"]).is_err());
    }

    #[test]
    fn loss_parses_as_a_rate_or_a_percentage() {
        assert_eq!(parse_loss("0.3"), Ok(0.3));
        assert_eq!(parse_loss("30%"), Ok(0.3));
        assert!(parse_loss("1.5").is_err());
        assert!(parse_loss("lots").is_err());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&mut v, 50.0), Some(50.0));
        assert_eq!(percentile(&mut v, 99.0), Some(99.0));
        assert_eq!(percentile(&mut [7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&mut [], 50.0), None);
    }
}
