//! `ftlab`: run, break and measure whole ftcoord clusters on one machine.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod chaos;
mod demo;
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
