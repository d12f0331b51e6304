//! `ftlab`: run, break and measure whole ftcoord clusters on one machine.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod chaos;
mod demo;
mod drill;
mod json;
mod up;

/// Run, break and measure whole ftcoord clusters on one machine (loopback,
/// free ports). Daemons: ntmutexd, tokenwatchd, electd, ringd, hbringd.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start a 5-node cluster of every daemon, drive a workload, SIGKILL
    /// each one's critical node (token holder, coordinator), measure
    /// detection and recovery from the clients' side, restart it, and check
    /// safety (no overlapping grants, fences increasing, acknowledged
    /// results present). Exit status 0 only when every check passed.
    Demo(demo::DemoArgs),
    /// Issue 38's failover figures at the default settings: per lock
    /// daemon, a new cluster's first grant, SIGKILL of the holder's daemon
    /// → the next grant, the killed node restarted → serving, and SIGSTOP
    /// of the holder's daemon → the next grant, each with its target.
    ///
    /// One daemon after the other (ntmutexd, electd, tokenwatchd by
    /// default), each a new cluster of N nodes on loopback with no setting
    /// changed. (1) All N are spawned back to back and a client of node 1
    /// asks at once, again after every refusal: spawn → its grant (target
    /// 2 s). (2) A client holds the lock through the victim (ntmutexd,
    /// tokenwatchd: node 2, where the token then is; electd: the
    /// coordinator), a client of the lowest other node waits, the victim is
    /// SIGKILLed: kill → the waiter's grant (300 ms; tokenwatchd 1 s). (3)
    /// The victim is started again and a client of it asks at once:
    /// restart → its grant (2 s). (4) As (2) with SIGSTOP (then SIGCONT) of
    /// another node (ntmutexd, tokenwatchd: node 3; electd: the
    /// coordinator): stop → the waiter's grant (suspect_after_ms +
    /// lease_ms + 100 ms = 450 ms; tokenwatchd 1.5 s). (5) The safety
    /// checks over every grant the drill's clients recorded: no two
    /// overlapping, fences increasing.
    ///
    /// Each wait is given 60 s; a figure that has not come by then is
    /// "none". Exit status 0 when every figure was measured and the safety
    /// checks passed, even when targets were missed (a figure over its
    /// target is marked "over target"); 1 otherwise. tokenwatchd takes a
    /// minute or more at the defaults.
    Drill(drill::DrillArgs),
    /// Write configs for N nodes of DAEMON (each its own state_dir under
    /// DIR/state), start them, print their endpoints, PIDs, a Prometheus
    /// file_sd targets file and the command that runs Prometheus on it
    /// (with DIR/prometheus.yml, which ftlab writes). Ctrl-C, SIGTERM or SIGHUP stop them all, and
    /// they die with ftlab. The first start of a new DIR passes
    /// --new-cluster; starting again on the same DIR does not, and keeps
    /// the ports that its node configs record (new nodes get free ones),
    /// so that peers and Prometheus find the nodes where they were. The nodes log
    /// at `info`, or at the tracing filter in $FTLAB_LOG if set.
    Up(up::UpArgs),
    /// SIGKILL node NODE of the cluster that `ftlab up --dir DIR` runs (and
    /// no other process).
    Kill(up::NodeArgs),
    /// Restart node NODE of the cluster that `ftlab up --dir DIR` runs
    /// (SIGKILL first if it still runs).
    Restart(up::NodeArgs),
    /// Random SIGKILLs and restarts (with --pause: SIGSTOP/SIGCONT pauses)
    /// of a cluster's nodes under load, then the safety checks; prints the
    /// seed and a summary.
    Chaos(chaos::ChaosArgs),
    /// Measure: `baseline` (one message L over TCP and UDP, one fsync), or
    /// a DAEMON under load, each figure next to L of the same run.
    Bench(bench::BenchArgs),
    /// (internal) The peer process of `ftlab bench`'s baseline: echoes
    /// messages on TCP and UDP until its stdin closes.
    #[command(hide = true)]
    BenchPeer(bench::PeerArgs),
    /// (internal) Kills the PIDs listed in FILE when its stdin closes: what
    /// makes `ftlab up`'s nodes die with ftlab even when it is SIGKILLed.
    #[command(hide = true)]
    Guard {
        /// The file of PIDs (one per line, with the config path each runs).
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.cmd {
        Cmd::Demo(a) => demo::run(a),
        Cmd::Drill(a) => drill::run(a),
        Cmd::Up(a) => up::run(a),
        Cmd::Kill(a) => up::kill(a),
        Cmd::Restart(a) => up::restart(a),
        Cmd::Chaos(a) => chaos::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::BenchPeer(a) => bench::peer(a),
        Cmd::Guard { file } => up::guard(&file),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ftlab: {e:#}");
            ExitCode::FAILURE
        }
    }
}
