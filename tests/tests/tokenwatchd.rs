//! tokenwatchd as real processes on loopback (UDP between peers): the
//! ring forms, locks are granted through every node with rising fences,
//! and a SIGKILLed holder is replaced by a regenerated token.

use std::time::{Duration, Instant};

use ftcoord_tests::{lock_once, wait_until, Cluster};

/// Small timings: a lap is a few ms on loopback.
const TIMING: &str = "ring_timeout_ms = 20\nmax_hold_ms = 300\ntoken_min_hold_ms = 2\nmax_datagram_delay_ms = 10\n";

fn logs(c: &Cluster, n: u32) -> String {
    (1..=n).map(|id| format!("---- node {id} ----\n{}\n", c.log(id))).collect()
}

#[test]
fn the_ring_grants_through_every_node_and_survives_a_killed_holder() {
    let mut c = Cluster::start("tokenwatchd", 3, TIMING).unwrap();
    for id in 1..=3 {
        c.wait_ready(id).unwrap();
    }
    let mut last = 0;
    for round in 0..3 {
        for id in 1..=3 {
            let fence = lock_once(&c, id, Duration::from_secs(20))
                .unwrap_or_else(|e| panic!("round {round}, node {id}: {e}\n{}", logs(&c, 3)));
            assert!(fence > last, "fence {fence:#x} after {last:#x}");
            last = fence;
        }
    }
    // The token circulates: the pass counter moves on every node.
    assert!(wait_until(Duration::from_secs(3), || c.metric(2, "tokenwatch_token_passes_total").unwrap_or(0.0) > 0.0));
    // Kill node 3: the others bypass it and regenerate, and keep granting.
    c.kill(3);
    let killed = Instant::now();
    for id in [1, 2] {
        let fence = lock_once(&c, id, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("after the kill, node {id}: {e}\n{}", logs(&c, 2)));
        assert!(fence > last, "fence {fence:#x} after {last:#x}");
        last = fence;
    }
    eprintln!("both survivors granted {:?} after the kill", killed.elapsed());
    let regen = c.metric(1, "tokenwatch_token_regenerations_total").unwrap_or(0.0)
        + c.metric(2, "tokenwatch_token_regenerations_total").unwrap_or(0.0);
    assert!(regen >= 1.0, "no regeneration counted\n{}", logs(&c, 2));
}

#[test]
fn with_chaos_on_the_ring_still_grants_and_counts_what_it_dropped() {
    let extra = format!("{TIMING}[chaos]\ndrop_rate = 0.2\ndup_rate = 0.1\ndelay_ms = 5\n");
    let mut c = Cluster::start("tokenwatchd", 3, &extra).unwrap();
    for id in 1..=3 {
        c.wait_ready(id).unwrap();
    }
    let mut last = 0;
    for id in [1, 2, 3, 1] {
        let fence = lock_once(&c, id, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("node {id} under chaos: {e}\n{}", logs(&c, 3)));
        assert!(fence > last, "fence {fence:#x} after {last:#x}");
        last = fence;
    }
    assert!(c.log(1).contains("CHAOS IS ON"), "no loud warning:\n{}", c.log(1));
    let dropped = "tokenwatch_messages_dropped_total{reason=\"chaos\"}";
    assert!(
        wait_until(Duration::from_secs(3), || (1..=3).any(|id| c.metric(id, dropped).unwrap_or(0.0) > 0.0)),
        "no datagram counted as dropped by chaos"
    );
    // --check-config refuses a delay beyond δ, naming the key.
    let bad = format!("{TIMING}[chaos]\ndelay_ms = 11\n");
    let b = Cluster::configure("tokenwatchd", 3, &bad).unwrap();
    let path = b.config_path(1).display().to_string();
    let (code, _, stderr) =
        ftcoord_tests::run_once("tokenwatchd", &["--config", &path, "--check-config"], &[]).unwrap();
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("chaos.delay_ms"), "{stderr}");
}
