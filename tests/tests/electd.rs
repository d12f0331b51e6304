//! electd as real processes on loopback (TCP between peers), judged from
//! outside: every daemon's `ftctl status` names the coordinator; five
//! `ftctl lock` loops record their holds (start/end, fence) in one file
//! across a SIGKILL of the coordinator; a cold restart of every daemon.
//!
//! One cluster at a time (`serial`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ftcoord_tests::records::*;
use ftcoord_tests::{run_once, wait_until, Cluster};

/// Small timings: an election takes a few ms on loopback; the election
/// timeout (and restart window) is 6 laps × 5 × 10 ms + 100 ms = 400 ms.
const TIMING: &str = "hop_timeout_ms = 10\nrequest_timeout_ms = 100\ngrant_ttl_ms = 600\nelection_jitter_ms = 20\n\
                      [timing]\nheartbeat_ms = 20\nsuspect_after_ms = 100\nlease_ms = 50\n";

fn all(n: u32) -> Vec<u32> {
    (1..=n).collect()
}

fn coordinator_seen_by(c: &Cluster, id: u32) -> Option<String> {
    status(c, id).and_then(|s| detail(&s, "coordinator"))
}

fn all_name(c: &Cluster, ids: &[u32], who: u32) -> bool {
    ids.iter().all(|id| coordinator_seen_by(c, *id).as_deref() == Some(&who.to_string()))
}

/// Five daemons agree on 5; SIGKILL of 5 while clients loop: the four
/// survivors agree on 4 (the time is printed next to suspect_after), the
/// clients' holds never overlap and their fences rise; 5's restart takes
/// over again (a higher id must win once faults stop).
#[test]
fn five_daemons_agree_on_the_highest_id_and_fail_over_after_sigkill_of_the_coordinator() {
    let _serial = serial();
    let mut c = Cluster::start("electd", 5, TIMING).unwrap();
    assert!(wait_until(Duration::from_secs(20), || all_name(&c, &all(5), 5)), "{}", logs(&c, &all(5)));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> =
        (1..=5).map(|id| client_loop(&c, id, format!("c{id}"), file.clone(), "0.02", stop.clone())).collect();
    assert!(wait_holds(&file, &all(5), 3, 0, Duration::from_secs(60)), "{}\n{}", read(&file), logs(&c, &all(5)));

    let killed = Instant::now();
    let kill_ns = now_ns();
    c.kill(5);
    let survivors = all(4);
    assert!(
        wait_until(Duration::from_secs(20), || all_name(&c, &survivors, 4)),
        "the survivors never agreed on 4\n{}",
        logs(&c, &survivors)
    );
    let failover = killed.elapsed();
    assert!(
        wait_holds(&file, &survivors, 3, kill_ns, Duration::from_secs(60)),
        "survivors not served after the failover\n{}\n{}",
        read(&file),
        logs(&c, &survivors)
    );
    c.restart(5).unwrap();
    assert!(wait_until(Duration::from_secs(20), || all_name(&c, &all(5), 5)), "{}", logs(&c, &all(5)));
    let restart_ns = now_ns();
    assert!(wait_holds(&file, &[5], 2, restart_ns, Duration::from_secs(60)), "{}", logs(&c, &all(5)));
    let (summary, _) = stop_loops(&stop, loops);
    let holds = parse_holds(&read(&file));
    check_exclusion_and_fences(&holds, &format!("{summary}\n{}", logs(&c, &all(5))));
    eprintln!("SIGKILL of the coordinator -> every survivor names 4: {failover:?} (suspect_after 100 ms)");
}

/// Every daemon killed and restarted: a new term, fences above every
/// fence granted before.
#[test]
fn fences_keep_increasing_across_a_cold_restart_of_every_daemon() {
    let _serial = serial();
    let mut c = Cluster::start("electd", 3, TIMING).unwrap();
    assert!(wait_until(Duration::from_secs(20), || all_name(&c, &all(3), 3)), "{}", logs(&c, &all(3)));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");
    for round in 0..2 {
        for id in all(3) {
            let (code, stderr) =
                run(ftctl_lock(&c, id, "20s", &recording_script(&format!("r{round}n{id}"), &file, "")));
            assert_eq!(code, 0, "lock through {id}: {stderr}\n{}", logs(&c, &all(3)));
        }
        for id in all(3) {
            c.kill(id);
        }
        for id in all(3) {
            c.restart(id).unwrap();
        }
        assert!(wait_until(Duration::from_secs(20), || all_name(&c, &all(3), 3)), "{}", logs(&c, &all(3)));
    }
    let holds = parse_holds(&read(&file));
    assert_eq!(holds.len(), 6, "{holds:?}");
    check_exclusion_and_fences(&holds, &logs(&c, &all(3)));
}

#[test]
fn example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/electd.example.toml");
    let (code, stdout, stderr) = run_once("electd", &["--config", path, "--check-config"], &[]).unwrap();
    assert_eq!(code, 0, "{stderr}");
    for key in ["algorithm = \"relay\"", "hop_timeout_ms = 100", "grant_ttl_ms = 3000"] {
        assert!(stdout.contains(key), "effective config lacks {key}: {stdout}");
    }
}
