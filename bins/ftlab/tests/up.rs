//! `ftlab up`: a cluster comes up, answers, and goes away on Ctrl-C.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn up_starts_a_cluster_prints_endpoints_and_stops_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ftlab"))
        .args(["up", "hbringd", "-n", "3", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut metrics = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
            metrics.push(url.trim_start_matches("http://").trim_end_matches("/metrics").to_string());
        }
        if line.starts_with("Ctrl-C") {
            break;
        }
    }
    assert_eq!(metrics.len(), 3);
    for m in &metrics {
        let text = ftlab::scrape(m.parse().unwrap()).unwrap();
        assert!(text.contains("hbring_build_info"), "{text}");
    }
    let sd = std::fs::read_to_string(dir.path().join("targets.json")).unwrap();
    assert!(sd.contains(&metrics[0]) && sd.contains("\"job\": \"hbringd\""), "{sd}");
    assert!(dir.path().join("node1.toml").exists());

    Command::new("kill").arg("-INT").arg(child.id().to_string()).status().unwrap();
    let ok = ftlab::wait_until(Duration::from_secs(10), || matches!(child.try_wait(), Ok(Some(_))));
    assert!(ok, "ftlab up did not stop on SIGINT");
    assert!(child.wait().unwrap().success());
    // Its nodes are gone: their metrics ports no longer answer.
    for m in &metrics {
        assert!(ftlab::scrape(m.parse().unwrap()).is_err(), "{m} still answers");
    }
}
