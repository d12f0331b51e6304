//! `ftlab bench`: the baseline and short daemon runs give their figures in
//! JSON, and wrong requests fail clearly. No speed is asserted: the machine
//! is shared and noisy (docs/performance.md).

use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// One cluster at a time: two on two cores could stall a daemon.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `ftlab ARGS` and returns (exit code, stdout, stderr).
fn ftlab(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ftlab")).args(args).envs(env.iter().copied()).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The first value of `"key":` in `json`, as text.
fn raw<'a>(json: &'a str, key: &str) -> &'a str {
    let at = json.find(&format!("\"{key}\":")).unwrap_or_else(|| panic!("no {key} in {json}")) + key.len() + 3;
    let rest = &json[at..];
    let end = if let Some(text) = rest.strip_prefix('"') {
        text.find('"').unwrap() + 2
    } else {
        rest.find([',', '}', ']']).unwrap_or(rest.len())
    };
    &rest[..end]
}

/// The first number at `"key":` in `json`.
fn num(json: &str, key: &str) -> f64 {
    let v = raw(json, key);
    v.parse().unwrap_or_else(|_| panic!("{key} is {v}, not a number, in {json}"))
}

/// A daemon run's JSON: some operations, checks passed, messages per
/// operation, and every figure next to L with a ratio field.
fn check_daemon_run(daemon: &str, duration: &str) {
    let _one = serial();
    let (code, out, err) =
        ftlab(&["bench", daemon, "-n", "3", "--clients", "3", "--duration", duration, "--json"], &[]);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert_eq!(out.lines().count(), 1, "one line of JSON: {out}");
    assert_eq!(raw(&out, "daemon"), format!("\"{daemon}\""));
    assert_eq!(num(&out, "n"), 3.0);
    assert!(num(&out, "ops") > 0.0, "{out}");
    assert!(num(&out, "throughput") > 0.0, "{out}");
    assert_eq!(raw(&out, "checks"), "\"passed\"", "{out}");
    assert!(num(&out, "messages_per_op") > 0.0, "{out}");
    assert!(num(&out, "L_tcp_us") > 0.0 && num(&out, "L_udp_us") > 0.0, "{out}");
    assert!(num(&out, "L_us") > 0.0, "{out}");
    // The first figure (throughput) has a ratio to L.
    assert_eq!(raw(&out, "figure"), "\"throughput\"", "{out}");
    assert!(num(&out, "ratio") > 0.0, "{out}");
}

#[test]
fn baseline_gives_l_over_tcp_and_udp_and_fsync_p50() {
    let (code, out, err) = ftlab(&["bench", "baseline", "--json"], &[]);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    for key in ["L_tcp_us", "L_udp_us", "fsync_p50_us"] {
        assert!(num(&out, key) > 0.0, "{key}: {out}");
    }
    assert!(num(&out, "fsync_samples") > 0.0, "{out}");
    // The CPU per message of each ping-pong (the TCP one first).
    assert!(num(&out, "cpu_per_msg_us") > 0.0, "{out}");
    // And as a table.
    let (code, out, err) = ftlab(&["bench", "baseline"], &[]);
    assert_eq!(code, 0, "{err}");
    for name in ["L_tcp", "L_udp", "cpu_msg_tcp", "cpu_msg_udp", "fsync_p50"] {
        assert!(out.lines().any(|l| l.starts_with(name)), "{name}: {out}");
    }
}

#[test]
fn ntmutexd_under_contending_clients() {
    check_daemon_run("ntmutexd", "2s");
}

#[test]
fn ringd_counter_increments_and_lookups() {
    check_daemon_run("ringd", "1s");
}

#[test]
fn an_unknown_target_is_refused() {
    let (code, out, err) = ftlab(&["bench", "nosuchd", "--json"], &[]);
    assert_eq!(code, 2, "a usage error: {out}");
    assert!(err.contains("unknown bench target \"nosuchd\""), "{err}");
    assert!(err.contains("baseline, ntmutexd, tokenwatchd, electd, ringd"), "{err}");
    let (code, _, err) = ftlab(&["bench", "hbringd"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("no client workload"), "{err}");
}

#[test]
fn electd_with_clients_over_names() {
    let _one = serial();
    let args = ["bench", "electd", "-n", "3", "--clients", "6", "--names", "3", "--duration", "1s", "--json"];
    let (code, out, err) = ftlab(&args, &[]);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert_eq!(num(&out, "names"), 3.0, "{out}");
    assert!(num(&out, "ops") > 0.0, "{out}");
    assert_eq!(raw(&out, "checks"), "\"passed\"", "{out}");
    assert!(raw(&out, "checked").contains("per name"), "{out}");
    // Every name served, two clients each: handoffs within each name.
    assert_eq!(num(&out, "served"), 3.0, "{out}");
    assert!(num(&out, "handoff_p50_median_us") > 0.0, "{out}");
}

#[test]
fn names_are_refused_where_the_daemon_serves_none() {
    for daemon in ["ntmutexd", "tokenwatchd", "ringd"] {
        let (code, out, err) = ftlab(&["bench", daemon, "--names", "4"], &[]);
        assert_eq!(code, 1, "{out}");
        assert!(out.is_empty(), "nothing measured: {out}");
        assert!(err.contains(&format!("--names: {daemon} does not serve named locks")), "{err}");
    }
    let (code, _, err) = ftlab(&["bench", "electd", "--names", "0"], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("--names must be at least 1"), "{err}");
}

#[test]
fn loss_is_refused_where_the_daemon_has_no_loss_injection() {
    let (code, out, err) = ftlab(&["bench", "ntmutexd", "--loss", "0.3"], &[]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("--loss: ntmutexd has no loss injection") && err.contains("tokenwatchd"), "{err}");
    let (code, _, err) = ftlab(&["bench", "tokenwatchd", "--loss", "1.5"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("out of range"), "{err}");
}

#[test]
fn against_etcd_without_etcd_on_path_says_so_and_measures_nothing() {
    let empty = tempfile::tempdir().unwrap();
    let path = empty.path().to_str().unwrap();
    let (code, out, err) = ftlab(&["bench", "ntmutexd", "--against", "etcd"], &[("PATH", path)]);
    assert_ne!(code, 0, "{out}");
    assert!(out.is_empty(), "no figures without etcd: {out}");
    assert!(err.contains("no `etcd` on PATH"), "{err}");
    let (code, _, err) = ftlab(&["bench", "electd", "--against", "etcd"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("ntmutexd only"), "{err}");
}

#[test]
fn idle_gives_cpu_and_memory_per_node() {
    let _one = serial();
    let (code, out, err) = ftlab(&["bench", "ntmutexd", "--idle", "-n", "3", "--duration", "1s", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(raw(&out, "idle"), "true", "{out}");
    assert_eq!(out.matches("\"cpu_share\":").count(), 3, "one figure per node: {out}");
    let max = num(&out, "cpu_share_max");
    assert!((0.0..=2.0).contains(&max), "a share of one core (two at most here): {out}");
    assert!(num(&out, "cpu_share_mean") <= max, "{out}");
    // A running daemon has some resident memory, and far less than 1 GiB.
    let rss = num(&out, "rss_bytes_max");
    assert!(rss > 1e6 && rss < 1e9, "{out}");
    assert_eq!(num(&out, "cpu_target"), 0.01);
    assert_eq!(raw(&out, "rss_met"), if rss < 15.0 * 1024.0 * 1024.0 { "true" } else { "false" }, "{out}");
}

#[test]
fn idle_takes_no_clients_and_no_baseline() {
    let (code, _, err) = ftlab(&["bench", "ntmutexd", "--idle", "--clients", "2"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("--clients") && err.contains("--idle"), "{err}");
    let (code, _, err) = ftlab(&["bench", "baseline", "--idle"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("takes no") && err.contains("--idle"), "{err}");
    let (code, _, err) = ftlab(&["bench", "ntmutexd", "--clients", "0"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("--idle measures a cluster with none"), "{err}");
}
