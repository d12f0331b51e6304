//! SIGINT and SIGTERM to ftctl, and signals to the command it runs.
//!
//! Signals go to the command's process with the `kill` program: tokio's
//! `Child::start_kill` can only send SIGKILL, and this crate has no unsafe
//! code to call kill(2) itself.

use std::io;
use std::process::Stdio;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// A signal ftctl handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sig {
    /// SIGINT (Ctrl-C).
    Int,
    /// SIGTERM.
    Term,
    /// SIGKILL (sent only: it cannot be caught).
    Kill,
}

impl Sig {
    /// The name `kill -NAME` takes.
    pub fn name(self) -> &'static str {
        match self {
            Sig::Int => "INT",
            Sig::Term => "TERM",
            Sig::Kill => "KILL",
        }
    }

    /// The signal number.
    pub fn number(self) -> i32 {
        match self {
            Sig::Int => 2,
            Sig::Term => 15,
            Sig::Kill => 9,
        }
    }
}

/// SIGINT and SIGTERM, caught from creation on (they no longer end ftctl).
#[derive(Debug)]
pub struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    /// Starts catching SIGINT and SIGTERM.
    pub fn catch() -> io::Result<Self> {
        Ok(Signals { int: signal(SignalKind::interrupt())?, term: signal(SignalKind::terminate())? })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> Sig {
        tokio::select! {
            Some(()) = self.int.recv() => Sig::Int,
            Some(()) = self.term.recv() => Sig::Term,
            else => std::future::pending().await,
        }
    }
}

/// Sends `sig` to process `pid` (best effort: it may have just exited).
pub async fn send(pid: u32, sig: Sig) {
    let status = tokio::process::Command::new("kill")
        .arg(format!("-{}", sig.name()))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    if let Err(e) = status {
        eprintln!("ftctl: cannot run `kill -{} {pid}`: {e}", sig.name());
    }
}
