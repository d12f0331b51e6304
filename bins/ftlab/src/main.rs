//! `ftlab`: run whole ftcoord clusters on one machine.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};
use ftlab::Cluster;

/// Run whole ftcoord clusters on one machine (loopback, free ports).
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Write configs for N nodes of DAEMON (each its own state_dir under
    /// DIR/state), start them, print their endpoints and a Prometheus file_sd
    /// targets file; Ctrl-C stops them. The first start of a new DIR passes
    /// --new-cluster; starting again on the same DIR does not. The nodes
    /// log at `info`, or at the tracing filter in $FTLAB_LOG if set.
    Up {
        /// Which daemon (its binary must be built: `cargo build --workspace --bins`).
        daemon: String,
        /// Number of nodes.
        #[arg(short = 'n', long, default_value_t = 5)]
        nodes: usize,
        /// Where to write configs and logs (kept); default: a temporary
        /// directory removed on exit.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ftlab: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    match args.cmd {
        Cmd::Up { daemon, nodes, dir } => up(&daemon, nodes, dir),
    }
}

fn up(daemon: &str, n: usize, dir: Option<PathBuf>) -> Result<()> {
    anyhow::ensure!(n >= 1, "-n must be at least 1");
    ftlab::bin(daemon)?;
    let mut cluster = Cluster::configure_in(daemon, n, "", dir)?;
    cluster.start_all()?;
    let sd = cluster.write_file_sd()?;
    println!("{n} × {daemon} running; configs and logs in {}", cluster.dir().display());
    println!("{:<5} {:<22} {:<22} {:<22}", "node", "peer", "client (FTCTL_ADDR)", "metrics");
    for id in 1..=n as u32 {
        let e = cluster.node(id);
        println!("{:<5} {:<22} {:<22} http://{}/metrics", id, e.peer, e.client, e.metrics);
    }
    println!("Prometheus file_sd targets: {}", sd.display());
    println!("Ctrl-C stops the cluster.");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut reported = vec![false; n];
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = tick.tick() => {
                    for id in 1..=n as u32 {
                        if !cluster.is_running(id) && !std::mem::replace(&mut reported[id as usize - 1], true) {
                            eprintln!("node {id} exited; see {}", cluster.dir().join(format!("node{id}.log")).display());
                        }
                    }
                }
            }
        }
    });
    println!("stopping…");
    for id in 1..=n as u32 {
        if cluster.is_running(id) {
            let _ = cluster.terminate(id, Duration::from_secs(5));
        }
    }
    Ok(())
}
