//! `ftctl`: the command-line client of every ftcoord daemon.
//!
//! `status` works against any daemon; `lock` against the lock-granting
//! ones (ntmutexd, tokenwatchd, electd); `leader` against electd. Each command lives in its module;
//! this file parses arguments and maps results to exit statuses.
#![forbid(unsafe_code)]

mod daemon;
mod duration;
mod exit;
mod leader;
mod lock;
mod signals;
mod status;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// The client tool for ftcoord daemons.
#[derive(Parser, Debug)]
#[command(name = "ftctl", version, after_help = "Each command's --help lists its exit statuses.")]
struct Cli {
    /// The daemon's client address (its `client_listen`), HOST:PORT.
    #[arg(long, global = true, env = "FTCTL_ADDR", default_value = "127.0.0.1:7201", value_name = "ADDR")]
    addr: String,
    /// Print results as JSON (`status`, `leader`; `lock` prints nothing of its own).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Show the daemon, node, incarnation, role, details and peers.
    #[command(after_help = exit::STATUS_HELP)]
    Status,
    /// Show which node leads (electd), once or on every change.
    #[command(after_help = exit::LEADER_HELP)]
    Leader {
        /// Print a line at once and one on every change, until interrupted.
        #[arg(long)]
        watch: bool,
        /// How often to ask the daemon: 100ms, 1s (a unit is required).
        #[arg(long, value_name = "DUR", default_value = "100ms", value_parser = duration::parse)]
        every: Duration,
    },
    /// Run CMD while holding the cluster-wide lock.
    ///
    /// Waits for the lock, runs CMD with FTCOORD_FENCE set, releases the
    /// lock when CMD exits and exits with CMD's status. If the lock is lost
    /// while CMD runs, CMD is sent SIGTERM at once.
    #[command(override_usage = "ftctl lock [--timeout DUR] [--addr ADDR] -- CMD [ARGS]...", after_help = exit::LOCK_HELP)]
    Lock {
        /// How long to wait for the lock: 500ms, 10s, 2m, 1h (a unit is
        /// required); 0 takes it only if it is free at once.
        #[arg(long, value_name = "DUR", default_value = "30s", value_parser = duration::parse)]
        timeout: Duration,
        /// The command to run and its arguments (put `--` before them).
        #[arg(value_name = "CMD", required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<OsString>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ftctl: cannot start the async runtime: {e}");
            return ExitCode::from(exit::ERROR);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Cmd::Status => status::run(&cli.addr, cli.json).await.map(|()| exit::OK),
            Cmd::Leader { watch, every } => leader::run(&cli.addr, cli.json, watch, every).await,
            Cmd::Lock { timeout, cmd } => lock::run(&cli.addr, &lock::LockArgs { timeout, cmd }).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("ftctl: {e:#}");
            ExitCode::from(exit::ERROR)
        }
    }
}
