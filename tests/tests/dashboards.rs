//! Every metric a Grafana dashboard queries is one the daemons really
//! export: start the daemons, make them recover, scrape them, and look up
//! every `<prefix>_…` name used in `grafana/dashboards/*.json`.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use ftlab::{bin, wait_until, Cluster};

const PREFIXES: [&str; 4] = ["ntmutex_", "hbring_", "tokenwatch_", "electd_"];

/// electd's test timings (as in `tests/electd.rs`): the first election
/// comes a few hundred ms after start, a failover ~200 ms after a SIGKILL.
const ELECTD_TIMING: &str =
    "hop_timeout_ms = 10\nrequest_timeout_ms = 100\ngrant_ttl_ms = 600\nelection_jitter_ms = 20\n\
     [timing]\nheartbeat_ms = 20\nsuspect_after_ms = 100\nlease_ms = 50\n";

/// Metric names referenced by the dashboards (PromQL inside the JSON).
fn dashboard_metrics() -> BTreeSet<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../grafana/dashboards");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(dir).expect("grafana/dashboards exists") {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for prefix in PREFIXES {
            for (i, _) in text.match_indices(prefix) {
                let name: String = text[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                    .collect();
                names.insert(name);
            }
        }
    }
    names
}

/// Metric names (without labels) present in exposition text.
fn exposed(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect()
}

fn scrape_all(c: &Cluster, ids: &[u32]) -> BTreeSet<String> {
    ids.iter().filter_map(|id| c.scrape(*id).ok()).flat_map(|t| exposed(&t)).collect()
}

fn lock_once(c: &Cluster, id: u32) -> bool {
    let out = Command::new(bin("ftctl").unwrap())
        .args(["--addr", &c.node(id).client.to_string(), "lock", "--timeout", "10s", "--", "true"])
        .output()
        .unwrap();
    out.status.success()
}

#[test]
fn every_metric_in_every_dashboard_is_exported() {
    let wanted = dashboard_metrics();
    assert!(wanted.len() > 10, "dashboards reference metrics: {wanted:?}");

    // ntmutexd: grants, then a SIGKILL of the holder and a recovery.
    let mut nt = Cluster::start("ntmutexd", 3, "").unwrap();
    assert!(lock_once(&nt, 2), "log:\n{}", nt.log(2));
    let mut holder = None;
    assert!(
        wait_until(Duration::from_secs(5), || {
            holder = (1..=3).find(|id| nt.metric(*id, "ntmutex_has_token") == Some(1.0));
            holder.is_some()
        }),
        "nobody holds the idle token"
    );
    let holder = holder.expect("found");
    nt.kill(holder);
    let other = (1..=3).find(|id| *id != holder).unwrap();
    assert!(lock_once(&nt, other), "log:\n{}", nt.log(other));
    let live: Vec<u32> = (1..=3).filter(|id| *id != holder).collect();
    assert!(
        wait_until(Duration::from_secs(5), || scrape_all(&nt, &live)
            .contains("ntmutex_recovery_duration_seconds_bucket")),
        "no recovery after node {holder} was killed holding the token; logs:\n{}\n{}",
        nt.log(live[0]),
        nt.log(live[1])
    );
    let mut have = scrape_all(&nt, &live);

    // hbringd: a SIGKILL, a repair, a restart.
    let mut hb = Cluster::start("hbringd", 3, "").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    hb.kill(2);
    assert!(wait_until(Duration::from_secs(5), || scrape_all(&hb, &[1, 3])
        .contains("hbring_recovery_duration_seconds_bucket")));
    hb.restart(2).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    have.extend(scrape_all(&hb, &[1, 2, 3]));

    // tokenwatchd: grants, laps, then a SIGKILL of the holder and a
    // regeneration.
    let mut tw =
        Cluster::start("tokenwatchd", 3, "ring_timeout_ms = 20\nmax_hold_ms = 300\nmax_datagram_delay_ms = 10\n")
            .unwrap();
    assert!(lock_once(&tw, 1), "log:\n{}", tw.log(1));
    let mut holder = None;
    assert!(
        wait_until(Duration::from_secs(5), || {
            holder = (1..=3).find(|id| tw.metric(*id, "tokenwatch_has_token") == Some(1.0));
            holder.is_some()
        }),
        "nobody holds the token"
    );
    let holder = holder.expect("found");
    tw.kill(holder);
    let live: Vec<u32> = (1..=3).filter(|id| *id != holder).collect();
    assert!(wait_until(Duration::from_secs(30), || scrape_all(&tw, &live)
        .contains("tokenwatch_recovery_duration_seconds_bucket")));
    assert!(lock_once(&tw, live[0]), "log:\n{}", tw.log(live[0]));
    // A lap of the new token's epoch is one rotation.
    assert!(
        wait_until(Duration::from_secs(5), || scrape_all(&tw, &live).contains("tokenwatch_rotation_seconds_bucket"))
    );
    have.extend(scrape_all(&tw, &live));

    // electd: the first election (3 leads), a grant through node 1 (the
    // coordinator's grant wait is in node 3's scrape, taken before the
    // kill), then a SIGKILL of the coordinator and a failover to 2.
    let mut el = Cluster::start("electd", 3, ELECTD_TIMING).unwrap();
    let all = [1, 2, 3];
    let all_name =
        |c: &Cluster, ids: &[u32], who: f64| ids.iter().all(|id| c.metric(*id, "electd_coordinator_id") == Some(who));
    assert!(
        wait_until(Duration::from_secs(20), || all_name(&el, &all, 3.0)),
        "no coordinator 3; logs:\n{}\n{}\n{}",
        el.log(1),
        el.log(2),
        el.log(3)
    );
    assert!(lock_once(&el, 1), "log:\n{}\n{}", el.log(1), el.log(3));
    assert!(
        wait_until(Duration::from_secs(5), || scrape_all(&el, &[3]).contains("electd_grant_wait_seconds_bucket")),
        "no grant recorded by the coordinator; log:\n{}",
        el.log(3)
    );
    have.extend(scrape_all(&el, &all));
    el.kill(3);
    let live = [1, 2];
    assert!(
        wait_until(Duration::from_secs(20), || all_name(&el, &live, 2.0)
            && live.iter().all(|id| el
                .scrape(*id)
                .is_ok_and(|t| exposed(&t).contains("electd_failover_duration_seconds_bucket")))),
        "no failover to 2 after 3 was killed; logs:\n{}\n{}",
        el.log(1),
        el.log(2)
    );
    have.extend(scrape_all(&el, &live));

    let missing: Vec<&String> = wanted.iter().filter(|m| !have.contains(*m)).collect();
    assert!(missing.is_empty(), "dashboards use metrics nobody exports: {missing:?}");
}
