//! `ftctl`: the command-line client of every ftcoord daemon.
//!
//! `status` works against any daemon; `lock` against the lock-granting
//! ones (ntmutexd, tokenwatchd, electd); `leader` against electd; `lookup`
//! and `exec` against ringd. Each command lives in its module;
//! this file parses arguments and maps results to exit statuses.
#![forbid(unsafe_code)]

mod daemon;
mod exit;
mod leader;
mod lock;
mod ring;
mod signals;
mod status;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};

/// The client tool for ftcoord daemons.
#[derive(Parser, Debug)]
#[command(
    name = "ftctl",
    version = env!("FTCOORD_VERSION"),
    after_help = "Each command's --help lists its exit statuses."
)]
struct Cli {
    /// The daemon's client address (its `client_listen`), HOST:PORT.
    #[arg(long, global = true, env = "FTCTL_ADDR", default_value = "127.0.0.1:7201", value_name = "ADDR")]
    addr: String,
    /// Print results as JSON (`status`, `leader`, `lookup`, `exec`; `lock`
    /// prints nothing of its own).
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
        #[arg(long, value_name = "DUR", default_value = "100ms", value_parser = client::duration::parse)]
        every: Duration,
    },
    /// Run CMD while holding the cluster-wide lock.
    ///
    /// Waits for the lock, runs CMD with FTCOORD_FENCE set, releases the
    /// lock when CMD exits and exits with CMD's status. CMD runs under the
    /// grant's lease: SIGTERM at its end minus --kill-grace, SIGKILL at its
    /// end, unless the daemon renews it first. If the lock is lost while CMD
    /// runs, CMD is sent SIGTERM at once (SIGKILL at the lease's end).
    #[command(
        override_usage = "ftctl lock [--timeout DUR] [--kill-grace DUR] [--addr ADDR] -- CMD [ARGS]...",
        after_help = exit::LOCK_HELP
    )]
    Lock {
        /// How long to wait for the lock: 500ms, 10s, 2m, 1h (a unit is
        /// required); 0 takes it only if it is free at once.
        #[arg(long, value_name = "DUR", default_value = "30s", value_parser = client::duration::parse)]
        timeout: Duration,
        /// How long before the lease's end CMD gets SIGTERM (SIGKILL at the
        /// end). Default 20ms: a fifth of the default lease_ms = 100; set
        /// it to a fifth of your lease_ms (what CMD needs to exit cleanly,
        /// within the slack its renewals need).
        #[arg(long, value_name = "DUR", default_value = lock::DEFAULT_KILL_GRACE, value_parser = client::duration::parse)]
        kill_grace: Duration,
        /// The command to run and its arguments (put `--` before them).
        #[arg(value_name = "CMD", required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<OsString>,
    },
    /// Find the least-loaded ringd replica: its id, client address and load.
    #[command(after_help = exit::LOOKUP_HELP)]
    Lookup {
        /// How long to wait for the answer: 500ms, 5s (a unit is required).
        #[arg(long, value_name = "DUR", default_value = "5s", value_parser = ring::positive)]
        timeout: Duration,
    },
    /// Run a ringd service on the least-loaded replica (or on --on ADDR).
    ///
    /// Prints the service's output and exits with its status.
    #[command(
        override_usage = "ftctl [--addr ADDR] [--json] exec [--on ADDR] [--timeout DUR] [--request-id N] SERVICE \
                          [ARGS]...",
        after_help = exit::EXEC_HELP
    )]
    Exec {
        /// Run on the replica at this client address (HOST:PORT), without a lookup.
        #[arg(long, value_name = "ADDR")]
        on: Option<String>,
        /// How long the whole exec may take (lookup, service, retries): 500ms,
        /// 10s, 2m (a unit is required).
        #[arg(long, value_name = "DUR", default_value = "30s", value_parser = ring::positive)]
        timeout: Duration,
        /// Use this request id (to retry an exec whose outcome is unknown:
        /// a token service is then not applied twice); fresh by default.
        #[arg(long, value_name = "N")]
        request_id: Option<u64>,
        /// The service and its arguments (options for ftctl go before SERVICE).
        #[arg(
            value_name = "SERVICE",
            required = true,
            num_args = 1..,
            trailing_var_arg = true,
            allow_hyphen_values = true
        )]
        service: Vec<String>,
    },
    /// Print a shell completion script for ftctl.
    ///
    /// bash: `ftctl completions bash > /etc/bash_completion.d/ftctl`;
    /// zsh: `ftctl completions zsh > "${fpath[1]}/_ftctl"`;
    /// fish: `ftctl completions fish > ~/.config/fish/completions/ftctl.fish`.
    Completions {
        /// The shell to complete in.
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print ftctl's man page (roff): `ftctl man > /usr/local/share/man/man1/ftctl.1`.
    Man,
}

/// Writes the completion script for `shell` to `out`.
fn completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    clap_complete::generate(shell, &mut Cli::command(), "ftctl", out);
}

/// Writes the man page to `out`: ftctl's, then each command's section.
fn man(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let cmd = Cli::command();
    clap_mangen::Man::new(cmd.clone()).render(out)?;
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        // clap takes a command name as &'static str (its `string` feature
        // is off): leaked, once per command, in a process about to exit.
        let name: &'static str = Box::leak(format!("ftctl-{}", sub.get_name()).into_boxed_str());
        let sub = sub.clone().name(name).display_name(name);
        writeln!(out)?;
        clap_mangen::Man::new(sub).render(out)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Completions { shell } => {
            completions(shell, &mut std::io::stdout());
            return ExitCode::from(exit::OK);
        }
        Cmd::Man => {
            return match man(&mut std::io::stdout()) {
                // `ftctl man | head` is fine.
                Ok(()) => ExitCode::from(exit::OK),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::from(exit::OK),
                Err(e) => {
                    eprintln!("ftctl: cannot write the man page: {e}");
                    ExitCode::from(exit::ERROR)
                }
            };
        }
        _ => {}
    }
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
            Cmd::Lock { timeout, kill_grace, cmd } => {
                lock::run(&cli.addr, &lock::LockArgs { timeout, kill_grace, cmd }).await
            }
            Cmd::Lookup { timeout } => ring::run_lookup(&cli.addr, cli.json, timeout).await,
            Cmd::Exec { on, timeout, request_id, mut service } => {
                let args = service.split_off(1);
                let service = service.pop().unwrap_or_default();
                ring::run_exec(&cli.addr, cli.json, &ring::ExecArgs { on, timeout, request_id, service, args }).await
            }
            Cmd::Completions { .. } | Cmd::Man => Ok(exit::OK),
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("ftctl: {e:#}");
            ExitCode::from(ring::exit_of_error(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn completions_cover_every_command() {
        for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
            let mut out = Vec::new();
            completions(shell, &mut out);
            let text = String::from_utf8(out).unwrap();
            for word in ["status", "leader", "lock", "lookup", "exec", "addr", "timeout", "kill-grace"] {
                assert!(text.contains(word), "{shell}: {word} missing");
            }
        }
    }

    #[test]
    fn the_man_page_has_every_command_and_the_exit_statuses() {
        let mut out = Vec::new();
        man(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(".ie") || text.contains(".TH ftctl"), "{}", &text[..200.min(text.len())]);
        for page in ["ftctl\\-lock", "ftctl\\-status", "ftctl\\-exec"] {
            assert!(text.contains(page), "{page} missing");
        }
        assert!(text.contains("EX_TEMPFAIL"), "the lock exit statuses are missing");
    }

    #[test]
    fn the_version_names_the_package_version() {
        let v = Cli::command().render_version();
        assert!(v.starts_with(&format!("ftctl {}", env!("CARGO_PKG_VERSION"))), "{v}");
    }
}
