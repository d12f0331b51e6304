//! Running the ftctl binary from the integration tests.
#![allow(dead_code)] // each test binary uses part of this

pub mod fake;

use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// How ftctl ended.
#[derive(Debug)]
pub struct Outcome {
    /// Its exit code (-1 if a signal killed it).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Starts ftctl with `args`, output captured, `FTCTL_ADDR` unset.
pub fn spawn(args: &[&str]) -> Child {
    spawn_with_env(args, &[])
}

/// [`spawn`] with `env` added to ftctl's environment.
pub fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ftctl"))
        .args(args)
        .env_remove("FTCTL_ADDR")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start ftctl")
}

/// Waits for ftctl to exit, at most `within`.
pub async fn finish(child: Child, within: Duration) -> Outcome {
    let out = tokio::time::timeout(within, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("ftctl still running after {within:?}"))
        .expect("wait for ftctl");
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs ftctl to completion.
pub async fn run(args: &[&str]) -> Outcome {
    finish(spawn(args), Duration::from_secs(20)).await
}

/// A loopback address nothing listens on (a port that was free a moment ago).
pub fn dead_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}
