//! `ftctl`: the command-line client of every ftcoord daemon.
//!
//! `status` works against any daemon; `lock` and `locks` against the
//! lock-granting ones (ntmutexd, tokenwatchd, electd; a named lock against
//! electd only); `leader` and `elect` against electd; `lookup` and `exec` against
//! ringd; `fence check` on the resource's side, with no daemon. Each
//! command lives in its module;
//! this file parses arguments and maps results to exit statuses.
#![forbid(unsafe_code)]

mod daemon;
mod elect;
mod exit;
mod fence;
mod leader;
mod lock;
mod locks;
mod ring;
mod signals;
mod status;
mod supervise;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use lockservice::LockName;

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
    /// Print results as JSON (`status`, `leader`, `locks`, `elect
    /// --observe`, `lookup`, `exec`; `lock` and `elect -- CMD` print
    /// nothing of their own).
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
    /// Run CMD while holding a cluster-wide lock (NAME, or the unnamed one).
    ///
    /// Waits for the lock, runs CMD with FTCOORD_FENCE and FTCOORD_LOCK_NAME
    /// set, releases the lock when CMD exits and exits with CMD's status.
    /// CMD runs under the grant's lease: SIGTERM at its end minus
    /// --kill-grace, SIGKILL at its end, unless the daemon renews it first.
    /// If the lock is lost while CMD runs, CMD is sent SIGTERM at once
    /// (SIGKILL at the lease's end).
    #[command(
        override_usage = "ftctl lock [NAME] [--timeout DUR] [--kill-grace DUR] [--addr ADDR] -- CMD [ARGS]...",
        after_help = exit::LOCK_HELP
    )]
    Lock {
        /// The lock: 1-128 bytes of A-Z a-z 0-9 . _ / - (electd serves named
        /// locks; ntmutexd and tokenwatchd refuse them). Without NAME: the
        /// cluster's unnamed lock.
        #[arg(value_name = "NAME", value_parser = LockName::parse)]
        name: Option<LockName>,
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
        /// The command to run and its arguments, after `--` (what comes
        /// before it is NAME and options).
        #[arg(value_name = "CMD", required = true, num_args = 1.., last = true, allow_hyphen_values = true)]
        cmd: Vec<OsString>,
    },
    /// Run CMD while leading election NAME, or show who leads it (--observe).
    ///
    /// Campaigns for NAME (electd), runs CMD once this campaigner leads,
    /// with FTCOORD_FENCE, FTCOORD_ELECTION and FTCOORD_LEADER_VALUE set,
    /// resigns when CMD exits and exits with CMD's status; leadership is
    /// held as `ftctl lock` holds a lock (same lease, signals and exit
    /// statuses). With --observe: prints the leader (node, fence, value) or
    /// `no leader`; with --watch, each change until interrupted.
    #[command(
        override_usage = "ftctl elect NAME [--value V] [--timeout DUR] [--kill-grace DUR] [--addr ADDR] -- CMD \
                          [ARGS]...\n       ftctl elect NAME --observe [--watch] [--json] [--addr ADDR]",
        after_help = exit::ELECT_HELP
    )]
    Elect {
        /// The election: 1-128 bytes of A-Z a-z 0-9 . _ / - (its own name
        /// space: `ftctl lock NAME` is another thing).
        #[arg(value_name = "NAME", value_parser = elect::parse_name)]
        name: LockName,
        /// What observers see while this campaigner leads (UTF-8, at most
        /// 1024 bytes; CMD gets it as FTCOORD_LEADER_VALUE). Default: the
        /// host name.
        #[arg(long, value_name = "V", allow_hyphen_values = true)]
        value: Option<String>,
        /// How long to campaign before giving up: 500ms, 10s, 2m, 1h (a
        /// unit is required); 0 leads only if nobody does now. Default:
        /// forever.
        #[arg(long, value_name = "DUR", value_parser = client::duration::parse)]
        timeout: Option<Duration>,
        /// How long before the lease's end CMD gets SIGTERM (SIGKILL at the
        /// end), as for `ftctl lock`: a fifth of your lease_ms.
        #[arg(long, value_name = "DUR", default_value = lock::DEFAULT_KILL_GRACE, value_parser = client::duration::parse)]
        kill_grace: Duration,
        /// Print who leads instead of campaigning (no CMD, --value,
        /// --timeout or --kill-grace then).
        #[arg(long, conflicts_with_all = ["cmd", "value", "timeout", "kill_grace"])]
        observe: bool,
        /// With --observe: print the leader at once, then one line on every
        /// change, until SIGINT or SIGTERM.
        #[arg(long, requires = "observe", conflicts_with_all = ["cmd", "value", "timeout", "kill_grace"])]
        watch: bool,
        /// The command to run while leading, and its arguments, after `--`.
        #[arg(
            value_name = "CMD",
            required_unless_present = "observe",
            num_args = 1..,
            last = true,
            allow_hyphen_values = true
        )]
        cmd: Vec<OsString>,
    },
    /// List the locks this node knows: held here, last fence, local waiters.
    ///
    /// The names with the most local waiters first (at most 256 of them).
    #[command(after_help = exit::LOCKS_HELP)]
    Locks,
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
    /// Check a fence where the resource is: refuse one not larger than every fence recorded.
    Fence {
        #[command(subcommand)]
        command: FenceCmd,
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
    /// Runs CMD for `ftctl lock` or `ftctl elect` under its lease (ftctl
    /// starts it itself; docs/interfaces.md, "ftctl lock").
    #[command(hide = true)]
    Supervise {
        /// The Unix socket of the ftctl that started it.
        #[arg(long, value_name = "PATH")]
        control: PathBuf,
        /// SIGKILL at this CLOCK_MONOTONIC nanosecond.
        #[arg(long, value_name = "NS")]
        deadline_ns: u64,
        /// SIGTERM this many nanoseconds before.
        #[arg(long, value_name = "NS")]
        grace_ns: u64,
        /// The lock (or election), for messages.
        #[arg(long, value_name = "LABEL")]
        lock: String,
        /// CMD and its arguments.
        #[arg(value_name = "CMD", required = true, num_args = 1.., last = true, allow_hyphen_values = true)]
        cmd: Vec<OsString>,
    },
}

/// `ftctl fence` commands.
#[derive(Subcommand, Debug)]
enum FenceCmd {
    /// Record FENCE in PATH if it is larger than every fence recorded there.
    ///
    /// Otherwise exit 65 and change nothing. Concurrent checks on one PATH
    /// run one at a time; no daemon is involved.
    #[command(after_help = exit::FENCE_CHECK_HELP)]
    Check {
        /// The fence record: one decimal number and a newline (a missing or
        /// empty file records none); PATH.lock and PATH.tmp go beside it.
        #[arg(long, value_name = "PATH")]
        file: PathBuf,
        /// The fence to check, in decimal: "$FTCOORD_FENCE" under `ftctl lock`.
        #[arg(value_name = "FENCE", value_parser = fence::parse_arg)]
        fence: u128,
    },
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

/// The hint added to a parse error of `ftctl lock` that lacks CMD or has
/// a word too many: CMD goes after `--` (a word before it is NAME).
const CMD_AFTER_DASHES: &str = "tip: CMD goes after `--`, as in `ftctl lock [NAME] -- CMD [ARGS]...`; \
                                a word before `--` is the lock's NAME";

/// The same hint for `ftctl elect`.
const ELECT_CMD_AFTER_DASHES: &str = "tip: CMD goes after `--`, as in `ftctl elect NAME -- CMD [ARGS]...` \
                                      (or show the leader: `ftctl elect NAME --observe`)";

/// The hint for parse error `e` of command line `args`, if it is `ftctl
/// lock` or `ftctl elect` missing CMD, or with an unexpected argument and
/// no `--` at all.
fn parse_hint(e: &clap::Error, args: &[OsString]) -> Option<&'static str> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let text = e.to_string();
    let (tip, elect) = if text.contains("Usage: ftctl lock [NAME]") {
        (CMD_AFTER_DASHES, false)
    } else if text.contains("Usage: ftctl elect NAME") {
        (ELECT_CMD_AFTER_DASHES, true)
    } else {
        return None;
    };
    let no_dashes = !args.iter().any(|a| a == "--");
    // `ftctl elect` also misses NAME when it is missing: no CMD hint then.
    let missing_cmd = || match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::Strings(missing)) => missing.iter().any(|m| m.starts_with("<CMD>")),
        _ => false,
    };
    let hint = match e.kind() {
        ErrorKind::MissingRequiredArgument => !elect || missing_cmd(),
        ErrorKind::UnknownArgument => no_dashes,
        _ => false,
    };
    hint.then_some(tip)
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let Some(hint) = parse_hint(&e, &args) else { e.exit() };
            let _ = e.print();
            eprintln!("{hint}");
            return ExitCode::from(exit::BAD_ARGUMENTS);
        }
    };
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
        Cmd::Supervise { control, deadline_ns, grace_ns, lock, cmd } => {
            return supervise::run_supervisor(&supervise::SuperviseArgs { control, deadline_ns, grace_ns, lock, cmd });
        }
        Cmd::Fence { command: FenceCmd::Check { file, fence } } => {
            return ExitCode::from(fence::run(&file, fence));
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
            Cmd::Lock { name, timeout, kill_grace, cmd } => {
                let target = lock::Target::Lock(name.unwrap_or_else(LockName::unnamed));
                lock::run(&cli.addr, &lock::HoldArgs { target, timeout, kill_grace, cmd }).await
            }
            Cmd::Elect { name, observe: true, watch, .. } => elect::observe(&cli.addr, &name, cli.json, watch).await,
            Cmd::Elect { name, value, timeout, kill_grace, cmd, .. } => {
                elect::campaign(&cli.addr, name, value, timeout, kill_grace, cmd).await
            }
            Cmd::Locks => locks::run(&cli.addr, cli.json).await,
            Cmd::Lookup { timeout } => ring::run_lookup(&cli.addr, cli.json, timeout).await,
            Cmd::Exec { on, timeout, request_id, mut service } => {
                let args = service.split_off(1);
                let service = service.pop().unwrap_or_default();
                ring::run_exec(&cli.addr, cli.json, &ring::ExecArgs { on, timeout, request_id, service, args }).await
            }
            Cmd::Completions { .. } | Cmd::Man | Cmd::Fence { .. } | Cmd::Supervise { .. } => Ok(exit::OK),
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
            for word in [
                "status",
                "leader",
                "lock",
                "locks",
                "elect",
                "lookup",
                "exec",
                "addr",
                "timeout",
                "kill-grace",
                "value",
                "observe",
                "watch",
            ] {
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
        for page in ["ftctl\\-lock", "ftctl\\-locks", "ftctl\\-status", "ftctl\\-exec", "ftctl\\-elect"] {
            assert!(text.contains(page), "{page} missing");
        }
        assert!(text.contains("EX_TEMPFAIL"), "the lock exit statuses are missing");
        assert!(text.contains("FTCOORD_LEADER_VALUE"), "the elect help is missing");
    }

    /// The `lock` command's NAME, timeout and CMD from `args` (after `ftctl`).
    fn parse_lock(args: &[&str]) -> Result<(Option<String>, Duration, Vec<String>), clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("ftctl").chain(args.iter().copied()))?;
        match cli.command {
            Cmd::Lock { name, timeout, cmd, .. } => Ok((
                name.map(|n| n.as_str().to_string()),
                timeout,
                cmd.into_iter().map(|c| c.to_string_lossy().into_owned()).collect(),
            )),
            other => panic!("not lock: {other:?}"),
        }
    }

    #[test]
    fn lock_takes_an_optional_name_before_the_double_dash() {
        let cmd = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let secs = Duration::from_secs;
        // Today's scripts.
        assert_eq!(parse_lock(&["lock", "--", "true"]).unwrap(), (None, secs(30), cmd(&["true"])));
        assert_eq!(
            parse_lock(&["lock", "--timeout", "5s", "--", "sh", "-c", "x"]).unwrap(),
            (None, secs(5), cmd(&["sh", "-c", "x"]))
        );
        // A name, before or after the options.
        assert_eq!(
            parse_lock(&["lock", "db/migrate", "--", "true", "--timeout", "1s"]).unwrap(),
            (Some("db/migrate".into()), secs(30), cmd(&["true", "--timeout", "1s"]))
        );
        assert_eq!(
            parse_lock(&["--addr", "127.0.0.1:1", "lock", "--timeout", "5s", "jobs.nightly", "--", "a", "--", "b"])
                .unwrap(),
            (Some("jobs.nightly".into()), secs(5), cmd(&["a", "--", "b"]))
        );
        assert_eq!(
            parse_lock(&["lock", "x", "--timeout", "2s", "--", "true"]).unwrap(),
            (Some("x".into()), secs(2), cmd(&["true"]))
        );
    }

    #[test]
    fn lock_refuses_bad_names_and_a_cmd_without_the_double_dash() {
        for (name, text) in [
            ("", "invalid lock name: it is empty"),
            ("a b", "invalid lock name: byte 0x20 at offset 1"),
            ("a:b", "invalid lock name: byte 0x3a at offset 1"),
        ] {
            let e = parse_lock(&["lock", name, "--", "true"]).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{name:?}: {e}");
            assert!(e.to_string().contains(text), "{name:?}: {e}");
        }
        let long = "x".repeat(129);
        let e = parse_lock(&["lock", &long, "--", "true"]).unwrap_err();
        assert!(e.to_string().contains("invalid lock name: 129 bytes, the most is 128"), "{e}");
        assert!(parse_lock(&["lock", &"x".repeat(128), "--", "true"]).is_ok());
        // CMD comes after `--`: without it, a word is NAME and CMD is missing.
        let hint = |args: &[&str]| {
            let e = parse_lock(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
            let full: Vec<OsString> = ["ftctl"].iter().chain(args).map(OsString::from).collect();
            parse_hint(&e, &full)
        };
        for args in [
            &["lock", "true"][..],
            &["lock", "echo", "hi"],
            &["lock", "--timeout", "1s", "sh", "-c", "x"],
            &["lock", "db", "--"],
            &["lock"],
        ] {
            assert_eq!(hint(args), Some(CMD_AFTER_DASHES), "{args:?}");
        }
        // Other errors, and other commands, get no such hint.
        assert_eq!(hint(&["lock", "a b", "--", "true"]), None);
        assert_eq!(hint(&["lock", "--bogus", "--", "true"]), None);
        assert_eq!(hint(&["exec"]), None);
    }

    /// What `ftctl elect` parsed from `args` (after `ftctl`): NAME, --value,
    /// --timeout, --observe, --watch, --json and CMD.
    #[derive(Debug, PartialEq, Eq)]
    struct Elect {
        name: String,
        value: Option<String>,
        timeout: Option<Duration>,
        kill_grace: Duration,
        observe: bool,
        watch: bool,
        json: bool,
        cmd: Vec<String>,
    }

    fn parse_elect(args: &[&str]) -> Result<Elect, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("ftctl").chain(args.iter().copied()))?;
        match cli.command {
            Cmd::Elect { name, value, timeout, kill_grace, observe, watch, cmd } => Ok(Elect {
                name: name.as_str().to_string(),
                value,
                timeout,
                kill_grace,
                observe,
                watch,
                json: cli.json,
                cmd: cmd.into_iter().map(|c| c.to_string_lossy().into_owned()).collect(),
            }),
            other => panic!("not elect: {other:?}"),
        }
    }

    #[test]
    fn elect_campaigns_with_cmd_after_the_double_dash() {
        let cmd = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let twenty_ms = Duration::from_millis(20);
        assert_eq!(
            parse_elect(&["elect", "web", "--", "sh", "-c", "x"]).unwrap(),
            Elect {
                name: "web".into(),
                value: None,
                timeout: None,
                kill_grace: twenty_ms,
                observe: false,
                watch: false,
                json: false,
                cmd: cmd(&["sh", "-c", "x"]),
            }
        );
        assert_eq!(
            parse_elect(&[
                "elect",
                "--value",
                "-host a-",
                "db/primary",
                "--timeout",
                "5s",
                "--kill-grace",
                "1s",
                "--",
                "a",
                "--",
                "--observe"
            ])
            .unwrap(),
            Elect {
                name: "db/primary".into(),
                value: Some("-host a-".into()),
                timeout: Some(Duration::from_secs(5)),
                kill_grace: Duration::from_secs(1),
                observe: false,
                watch: false,
                json: false,
                cmd: cmd(&["a", "--", "--observe"]),
            }
        );
        assert_eq!(parse_elect(&["elect", "w", "--timeout", "0", "--", "true"]).unwrap().timeout, Some(Duration::ZERO));
        assert_eq!(parse_elect(&["elect", "w", "--value", "", "--", "true"]).unwrap().value, Some(String::new()));
    }

    #[test]
    fn elect_observes_once_or_watching() {
        let observe = |watch, json| Elect {
            name: "web".into(),
            value: None,
            timeout: None,
            kill_grace: Duration::from_millis(20),
            observe: true,
            watch,
            json,
            cmd: vec![],
        };
        assert_eq!(parse_elect(&["elect", "web", "--observe"]).unwrap(), observe(false, false));
        assert_eq!(parse_elect(&["elect", "--observe", "web", "--watch"]).unwrap(), observe(true, false));
        assert_eq!(parse_elect(&["--json", "elect", "web", "--observe", "--watch"]).unwrap(), observe(true, true));
        assert_eq!(parse_elect(&["elect", "web", "--observe", "--json"]).unwrap(), observe(false, true));
    }

    #[test]
    fn elect_refuses_mixed_modes_and_bad_names() {
        for args in [
            &["elect", "web", "--observe", "--", "true"][..],
            &["elect", "web", "--observe", "--value", "v"],
            &["elect", "web", "--observe", "--timeout", "1s"],
            &["elect", "web", "--observe", "--kill-grace", "1s"],
            &["elect", "web", "--watch", "--", "true"],
            &["elect", "web", "--watch"],
            &["elect", "web"],
            &["elect", "--observe"],
            &["elect", "a:b", "--observe"],
            &["elect", "", "--", "true"],
            &["elect", "web", "--timeout", "5", "--", "true"],
        ] {
            let e = parse_elect(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
        }
        let e = parse_elect(&["elect", "a:b", "--observe"]).unwrap_err();
        assert!(e.to_string().contains("invalid election name: byte 0x3a at offset 1"), "{e}");
        let e = parse_elect(&["elect", "web", "--observe", "--value", "v"]).unwrap_err();
        assert!(e.to_string().contains("'--observe' cannot be used with '--value <V>'"), "{e}");
    }

    #[test]
    fn elect_without_the_double_dash_gets_the_hint() {
        let hint = |args: &[&str]| {
            let e = parse_elect(args).unwrap_err();
            let full: Vec<OsString> = ["ftctl"].iter().chain(args).map(OsString::from).collect();
            parse_hint(&e, &full)
        };
        for args in
            [&["elect", "web", "true"][..], &["elect", "web", "echo", "hi"], &["elect", "web"], &["elect", "web", "--"]]
        {
            assert_eq!(hint(args), Some(ELECT_CMD_AFTER_DASHES), "{args:?}");
        }
        // NAME missing, or modes mixed: no CMD hint.
        assert_eq!(hint(&["elect", "--observe"]), None);
        assert_eq!(hint(&["elect", "web", "--observe", "--", "true"]), None);
        assert_eq!(hint(&["elect", "a b", "--", "true"]), None);
    }

    #[test]
    fn the_version_names_the_package_version() {
        let v = Cli::command().render_version();
        assert!(v.starts_with(&format!("ftctl {}", env!("CARGO_PKG_VERSION"))), "{v}");
    }
}
