//! `ftlab demo` and `ftlab chaos` end to end: real clusters of every
//! daemon, SIGKILLs and pauses, and the verdicts they print.

use std::process::Command;
use std::sync::Mutex;

/// One cluster run at a time: timings are what is shown.
static SERIAL: Mutex<()> = Mutex::new(());

fn ftlab(args: &[&str]) -> (i32, String, String) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_ftlab")).args(args).output().expect("run ftlab");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The value of `"key":` in a one-line JSON object (the first one from
/// `from` on).
fn field<'a>(json: &'a str, from: usize, key: &str) -> &'a str {
    let pat = format!("\"{key}\":");
    let i = json[from..].find(&pat).unwrap_or_else(|| panic!("no {key} in {json}")) + from + pat.len();
    let rest = &json[i..];
    let end = match rest.strip_prefix('"') {
        Some(string) => string.find('"').map(|e| e + 2).unwrap(),
        None => rest.find([',', '}']).unwrap(),
    };
    &rest[..end]
}

#[test]
fn demo_kills_each_daemons_critical_node_and_every_check_passes() {
    let (code, out, err) = ftlab(&["demo", "--no-build", "--json"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(field(&out, 0, "passed"), "true", "{out}");
    for (daemon, role) in [
        ("ntmutexd", "token holder"),
        ("tokenwatchd", "token holder"),
        ("electd", "coordinator"),
        ("ringd", "token owner"),
        ("hbringd", "ring member"),
    ] {
        let at = out.find(&format!("\"daemon\":\"{daemon}\"")).unwrap_or_else(|| panic!("no {daemon} in {out}"));
        assert!(field(&out, at, "killed").contains(role), "{daemon}: {out}");
        let recovery: f64 = field(&out, at, "recovery_ms").parse().unwrap_or_else(|_| panic!("{daemon}: {out}"));
        let detection: f64 = field(&out, at, "detection_ms").parse().unwrap_or_else(|_| panic!("{daemon}: {out}"));
        assert!(recovery > 0.0 && detection > 0.0, "{daemon}: {out}");
        if daemon == "electd" {
            // Every survivor names the new coordinator before its first
            // grant, which waits the failover gap.
            let known: f64 =
                field(&out, at, "new_coordinator_known_ms").parse().unwrap_or_else(|_| panic!("{daemon}: {out}"));
            assert!(known > 0.0 && known < recovery, "{daemon}: {out}");
            // Two names were held at once, by clients of two nodes.
            let two = field(&out, at, "two_names");
            assert!(two.starts_with("\"demo-a (fence ") && two.contains(", demo-b (fence "), "{daemon}: {out}");
        } else {
            assert_eq!(field(&out, at, "new_coordinator_known_ms"), "null", "{daemon}: {out}");
            assert_eq!(field(&out, at, "two_names"), "null", "{daemon}: {out}");
        }
        assert_eq!(field(&out, at, "rejoined"), "true", "{daemon}: {out}");
        assert_eq!(field(&out, at, "safety_ok"), "true", "{daemon}: {out}");
        if daemon != "hbringd" {
            let ops: u64 = field(&out, at, "operations").parse().unwrap();
            assert!(ops >= 10, "{daemon}: {out}");
        }
    }
    // The progress went to stderr as it happened.
    assert!(err.contains("SIGKILL node") && err.contains("recovered in"), "{err}");
    // Every check passed: the directory it printed is gone, as it says.
    let root = logs_dir(&err);
    assert!(!root.exists(), "{} left behind", root.display());
    assert!(err.contains(&format!("{} deleted", root.display())), "{err}");
}

/// The directory that `ftlab demo` says its configs and logs are under.
fn logs_dir(stderr: &str) -> std::path::PathBuf {
    let (_, rest) = stderr.split_once("configs and logs under ").unwrap_or_else(|| panic!("no directory in {stderr}"));
    std::path::PathBuf::from(rest.split_once(" (").unwrap().0)
}

#[test]
fn demo_prints_a_table() {
    // One daemon's worth is enough to see the table: -n 3 keeps it short.
    let (code, out, err) = ftlab(&["demo", "--no-build", "-n", "3", "--keep-logs"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    // --keep-logs: the directory it printed is there, with every node's log.
    let root = logs_dir(&err);
    assert!(err.contains(&format!("configs and logs kept in {}", root.display())), "{err}");
    for d in ftlab::DAEMONS {
        for id in 1..=3 {
            let log = root.join(d).join(format!("node{id}.log"));
            assert!(log.is_file(), "{} missing", log.display());
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
    for word in [
        "daemon",
        "detection",
        "recovery",
        "ntmutexd",
        "electd",
        "ringd",
        "named the new coordinator",
        "(docs/performance.md: ≤ 50 ms)",
        "electd: two names held at once: demo-a (fence ",
        "every check passed",
    ] {
        assert!(out.contains(word), "{word} missing:\n{out}");
    }
}

#[test]
fn chaos_kills_and_restarts_under_load_and_checks_safety() {
    for daemon in ["ntmutexd", "ringd"] {
        let (code, out, err) = ftlab(&["chaos", daemon, "-n", "3", "--kills", "2", "--duration", "3s", "--seed", "4"]);
        assert_eq!(code, 0, "{daemon}: stdout:\n{out}\nstderr:\n{err}");
        assert!(out.contains("--seed 4"), "the seed is printed: {out}");
        assert!(out.contains("safety: ok"), "{out}");
        assert_eq!(err.matches("fault ").count(), 2, "two faults: {err}");
    }
}

#[test]
fn chaos_pauses_nodes_of_ringd() {
    // A seed whose schedule has pauses at n = 3 (see the fault lines).
    let (code, out, err) =
        ftlab(&["chaos", "ringd", "-n", "3", "--kills", "3", "--duration", "3s", "--seed", "2", "--pause"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("SIGSTOP node"), "no pause in the schedule of seed 2: {err}");
}

#[test]
fn chaos_refuses_bad_arguments() {
    let (code, _, err) = ftlab(&["chaos", "ntmutexd", "--loss", "0.1"]);
    assert_ne!(code, 0);
    assert!(err.contains("--loss is for tokenwatchd"), "{err}");
    let (code, _, err) = ftlab(&["chaos", "tokenwatchd", "--loss", "0.9"]);
    assert_ne!(code, 0);
    assert!(err.contains("out of range"), "{err}");
    let (code, _, err) = ftlab(&["chaos", "nosuchd"]);
    assert_ne!(code, 0);
    assert!(err.contains("ntmutexd, tokenwatchd, electd, ringd, hbringd"), "{err}");
}
