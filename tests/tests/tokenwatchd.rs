//! tokenwatchd as real processes on loopback (UDP between peers), judged
//! from the clients' own records: five `ftctl lock` loops under 20 % chaos
//! loss through a SIGKILLed (not restarted, then restarted) holder; a
//! partition isolating the holder (through `ftlab::UdpRelay`); a cold
//! restart of every daemon; bad datagrams on the peer port.
//!
//! One cluster at a time (`serial`): a 2-core machine running several
//! at once could stall a daemon beyond the bounds the checks assume.

use std::net::UdpSocket;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ftcoord_tests::records::*;
use ftcoord_tests::{lock_once, run_once, wait_until, Cluster};
use ftcore::{Incarnation, NodeId};
use membership::Membership;
use wire::{udp_challenge, ClusterKey, PeerCodec};

/// Small timings: a lap is a few ms on loopback.
const TIMING: &str = "ring_timeout_ms = 20\nmax_hold_ms = 300\ntoken_min_hold_ms = 2\nmax_datagram_delay_ms = 10\n";
/// `max_hold_ms` above.
const MAX_HOLD: Duration = Duration::from_millis(300);

fn all(n: u32) -> Vec<u32> {
    (1..=n).collect()
}

/// Five daemons dropping 20 % of their datagrams (chaos), a `ftctl lock`
/// loop on each recording into one file; SIGKILL of the daemon whose
/// client is in its critical section, not restarted: the survivors
/// regenerate the token and keep serving; then its restart rejoins.
#[test]
fn five_daemons_at_20_percent_loss_serve_lock_loops_through_a_killed_holder_and_its_return() {
    let _serial = serial();
    let extra = format!("{TIMING}[chaos]\ndrop_rate = 0.2\n");
    let mut c = Cluster::start("tokenwatchd", 5, &extra).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> =
        (1..=5).map(|id| client_loop(&c, id, format!("c{id}"), file.clone(), "0.02", stop.clone())).collect();
    let warm = wait_holds(&file, &all(5), 3, 0, Duration::from_secs(60));
    assert!(warm, "not every client got 3 holds:\n{}\n{}", read(&file), logs(&c, &all(5)));
    assert!(c.log(1).contains("CHAOS IS ON"), "no loud warning:\n{}", c.log(1));

    let victim = catch_holder(&c, &file).expect("never caught a holder inside its critical section");
    let kill_ns = now_ns();
    c.kill(victim);
    let survivors: Vec<u32> = all(5).into_iter().filter(|id| *id != victim).collect();
    let served = wait_holds(&file, &survivors, 3, kill_ns, Duration::from_secs(60));
    let recovered_ns = now_ns();
    // Its restart rejoins: its client is served again.
    c.restart(victim).unwrap();
    let restart_ns = now_ns();
    let rejoined = wait_holds(&file, &[victim], 3, restart_ns, Duration::from_secs(60));
    let (summary, codes) = stop_loops(&stop, loops);
    let text = read(&file);
    let diag = format!(
        "{summary}killed node {victim} at {kill_ns}, restarted at {restart_ns}\nrecords:\n{text}\n{}",
        logs(&c, &all(5))
    );
    assert!(served, "the survivors were not served after the kill of node {victim}:\n{diag}");
    assert!(rejoined, "the restarted node {victim} was not served:\n{diag}");

    let holds = parse_holds(&text);
    check_exclusion_and_fences(&holds, &diag);
    // Only the killed holder's CMD can have been cut short.
    let incomplete: Vec<&Hold> = holds.iter().filter(|h| h.end.is_none()).collect();
    assert!(incomplete.len() <= 1, "more than one hold without an end: {incomplete:?}\n{diag}");
    if let Some(h) = incomplete.first() {
        assert_eq!(h.client, format!("c{victim}"), "cut short on a live daemon: {h:?}\n{diag}");
        assert!(h.start < kill_ns, "{h:?} started after the kill\n{diag}");
    }
    // Every client finished every run: the survivors' all succeeded; the
    // victim's lost the lock at most once and otherwise found no daemon.
    // A lease that ran out is not counted: at 20 % loss a renewal round
    // misses its majority one time in seven, and a few in a row (or a
    // grant late in a visit, whose lease ends with the visit) end a lease
    // early — safely, CMD is stopped (exit 69, "lease" in the message).
    let lease_ran_out = |(code, why): &&(i32, String)| *code == LOCK_LOST && why.contains("lease");
    let ran_out: usize = codes.iter().map(|c| c.iter().filter(|r| lease_ran_out(r)).count()).sum();
    for (i, codes) in codes.iter().enumerate() {
        let id = i as u32 + 1;
        let bad: Vec<_> = codes.iter().filter(|r| r.0 != 0 && !lease_ran_out(r)).collect();
        if id == victim {
            assert!(bad.iter().all(|(code, _)| *code == 1 || *code == LOCK_LOST), "c{id}: {bad:?}\n{diag}");
            assert!(bad.iter().filter(|(code, _)| *code == LOCK_LOST).count() <= 1, "c{id}: {bad:?}\n{diag}");
        } else {
            assert!(bad.is_empty(), "c{id} on a live daemon: {bad:?}\n{diag}");
        }
    }
    // The loss and the recovery show in the metrics.
    let retransmissions = sum_metric(&c, &survivors, "tokenwatch_retransmissions_total");
    let dropped = sum_metric(&c, &survivors, "tokenwatch_messages_dropped_total{reason=\"chaos\"}");
    let regenerations = sum_metric(&c, &survivors, "tokenwatch_token_regenerations_total");
    assert!(retransmissions > 0.0 && dropped > 0.0, "retransmissions {retransmissions}, dropped {dropped}\n{diag}");
    assert!(regenerations >= 1.0, "no regeneration counted\n{diag}");
    let next = holds.iter().find(|h| h.start > kill_ns).expect("holds after the kill");
    eprintln!("{ran_out} runs stopped because a lease ran out");
    eprintln!(
        "SIGKILL of holder {victim} -> next CMD start {:.1} ms (c{}); survivors all served 3x after {:.0} ms; \
         {} holds, {retransmissions} retransmissions, {dropped} datagrams dropped by chaos, {regenerations} regenerations",
        ms(next.start - kill_ns),
        next.client.trim_start_matches('c'),
        ms(recovered_ns - kill_ns),
        holds.len()
    );
}

/// The holder's peer traffic is cut off (UDP relay): the isolated daemon
/// grants nothing once its visit is over, the majority regenerates and
/// goes on; after the heal the isolated daemon rejoins and serves again.
#[test]
fn a_partition_isolating_the_holder_stops_its_grants_while_the_majority_goes_on() {
    let _serial = serial();
    let c = Cluster::start_relayed("tokenwatchd", 5, TIMING).unwrap();
    let relay = c.relay().expect("relayed");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> =
        (1..=5).map(|id| client_loop(&c, id, format!("c{id}"), file.clone(), "0.02", stop.clone())).collect();
    let warm = wait_holds(&file, &all(5), 3, 0, Duration::from_secs(60));
    assert!(warm, "not every client got 3 holds:\n{}\n{}", read(&file), logs(&c, &all(5)));

    let isolated = catch_holder(&c, &file).expect("never caught a holder inside its critical section");
    relay.partition(&[isolated]);
    let cut_ns = now_ns();
    let majority: Vec<u32> = all(5).into_iter().filter(|id| *id != isolated).collect();
    let served = wait_holds(&file, &majority, 3, cut_ns, Duration::from_secs(60));
    // Keep the partition a while longer: the isolated side must stay quiet.
    thread::sleep(Duration::from_secs(2));
    relay.heal();
    let heal_ns = now_ns();
    let rejoined = wait_holds(&file, &[isolated], 3, heal_ns, Duration::from_secs(60));
    let (summary, _codes) = stop_loops(&stop, loops);
    let text = read(&file);
    let diag = format!(
        "{summary}isolated node {isolated} at {cut_ns}, healed at {heal_ns} ({} datagrams cut)\nrecords:\n{text}\n{}",
        relay.dropped(),
        logs(&c, &all(5))
    );
    assert!(served, "the majority was not served during the partition:\n{diag}");
    assert!(rejoined, "node {isolated} was not served after the heal:\n{diag}");
    let holds = parse_holds(&text);
    check_exclusion_and_fences(&holds, &diag);
    // Nothing granted on the isolated side once its visit could have ended
    // (max_hold after the cut, plus a second for the CMD to start).
    let late_ns = cut_ns + (MAX_HOLD + Duration::from_secs(1)).as_nanos();
    let late: Vec<&Hold> =
        holds.iter().filter(|h| h.client == format!("c{isolated}") && h.start > late_ns && h.start < heal_ns).collect();
    assert!(late.is_empty(), "the isolated node granted {late:?}\n{diag}");
    let regenerations = sum_metric(&c, &majority, "tokenwatch_token_regenerations_total");
    assert!(regenerations >= 1.0, "the majority never regenerated\n{diag}");
    let next = holds.iter().find(|h| h.start > cut_ns && h.client != format!("c{isolated}")).expect("majority holds");
    eprintln!(
        "partition of holder {isolated}: next majority CMD start after {:.1} ms; {} datagrams cut; \
         {regenerations} regenerations",
        ms(next.start - cut_ns),
        relay.dropped()
    );
}

/// SIGKILL of every daemon, then a restart of all: fences keep rising.
#[test]
fn a_cold_restart_of_every_daemon_keeps_fences_increasing() {
    let _serial = serial();
    let mut c = Cluster::start("tokenwatchd", 3, TIMING).unwrap();
    cold_restarts(&mut c, 0);
}

/// With the counter stored 64 ahead (`tpc_reserve`): one daemon at a time
/// killed and restarted at once, while the token circulates (a restarted
/// one answers a token of its last block `Stale`, and the ring
/// regenerates), then every daemon at once: fences keep rising and every
/// node is served.
#[test]
fn with_a_tpc_reserve_restarts_keep_fences_increasing() {
    let _serial = serial();
    let mut c = Cluster::start("tokenwatchd", 3, &format!("{TIMING}tpc_reserve = 64\n")).unwrap();
    let mut last = 0;
    for victim in 1..=3 {
        for id in 1..=3 {
            let fence = lock_once(&c, id, Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("before killing {victim}, node {id}: {e}\n{}", logs(&c, &all(3))));
            assert!(fence > last, "fence {fence:#x} after {last:#x}\n{}", logs(&c, &all(3)));
            last = fence;
        }
        c.kill(victim);
        c.spawn(victim).unwrap();
        c.wait_ready(victim).unwrap();
    }
    cold_restarts(&mut c, last);
}

/// Locks at every node, kills and restarts them all, twice, then locks
/// again: every fence above `last` and the one before it.
fn cold_restarts(c: &mut Cluster, mut last: u128) {
    for round in 0..2 {
        for id in 1..=3 {
            let fence = lock_once(c, id, Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("round {round}, node {id}: {e}\n{}", logs(c, &all(3))));
            assert!(fence > last, "fence {fence:#x} after {last:#x}");
            last = fence;
        }
        for id in 1..=3 {
            c.kill(id);
        }
        for id in 1..=3 {
            c.spawn(id).unwrap();
        }
        for id in 1..=3 {
            c.wait_ready(id).unwrap();
        }
    }
    for id in 1..=3 {
        let fence = lock_once(c, id, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("after the cold restarts, node {id}: {e}\n{}", logs(c, &all(3))));
        assert!(fence > last, "fence {fence:#x} after {last:#x} across a cold restart\n{}", logs(c, &all(3)));
        last = fence;
    }
}

/// Garbage, a truncated datagram, another cluster's, a forged MAC and a
/// replay sent to a daemon's peer port: each dropped and counted by
/// reason; the ring keeps circulating and granting.
#[test]
fn bad_datagrams_on_the_peer_port_are_dropped_counted_by_reason_and_the_ring_goes_on() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "5a".repeat(32)).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let extra = format!("cluster_key_file = \"{}\"\n{TIMING}", key.display());
    let c = Cluster::start_relayed("tokenwatchd", 3, &extra).unwrap();
    let relay = c.relay().expect("relayed");
    let first = lock_once(&c, 1, Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}\n{}", logs(&c, &all(3))));
    // A real datagram n3 → n1 (n3 is n1's predecessor: tokens and ACKs).
    assert!(wait_until(Duration::from_secs(5), || relay.last_datagram(3, 1).is_some()), "nothing relayed 3 → 1");
    thread::sleep(Duration::from_millis(50));
    let captured = relay.last_datagram(3, 1).expect("captured");
    let to_life = u64::from_be_bytes(captured[4..12].try_into().expect("12-byte address"));
    let address = |frame: &[u8]| [&1u32.to_be_bytes()[..], &to_life.to_be_bytes(), frame].concat();
    let forged = |cluster: u32, key: [u8; 32]| {
        let codec = PeerCodec::<tokenwatchd::Msg>::new(
            cluster,
            NodeId(3),
            Membership::of_size(3),
            Some(ClusterKey::from_bytes(key)),
        );
        let ch = udp_challenge(NodeId(1), Incarnation(to_life));
        address(&codec.encode(Incarnation(1), 1, &ch, &tokenwatchd::Msg::Stale { epoch: 1 }).expect("encode"))
    };
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = c.node(1).peer;
    let passes_before = c.metric(1, "tokenwatch_token_passes_total").unwrap_or(0.0);
    let cases: [(&str, Vec<u8>); 5] = [
        ("bad_magic", address(b"certainly not a tokenwatchd frame, just text")),
        ("truncated", captured[..20].to_vec()),
        ("cluster", forged(2, [0x5a; 32])),
        ("auth", forged(1, [0x11; 32])),
        ("replay", captured.clone()),
    ];
    for (reason, d) in &cases {
        sock.send_to(d, to).unwrap();
        let sample = format!("tokenwatch_frames_rejected_total{{reason=\"{reason}\"}}");
        let counted = wait_until(Duration::from_secs(5), || c.metric(1, &sample).unwrap_or(0.0) >= 1.0);
        assert!(counted, "{reason}: not counted\n{}", c.scrape(1).unwrap_or_default());
        // The log names the cause.
        let has = || c.log(1).lines().any(|l| l.contains("WARN") && l.contains("frame rejected") && l.contains(reason));
        assert!(wait_until(Duration::from_secs(3), has), "{reason}: no log line names it");
    }
    // The ring goes on: passes continue and locks are granted everywhere.
    assert!(
        wait_until(Duration::from_secs(5), || c.metric(1, "tokenwatch_token_passes_total").unwrap_or(0.0)
            > passes_before),
        "the token stopped circulating"
    );
    // Each pass was stored first: state_write_seconds counts the writes,
    // with buckets below 1 ms.
    let writes = c.metric(1, "tokenwatch_state_write_seconds_count").unwrap_or(0.0);
    assert!(writes >= 1.0, "{writes} writes");
    assert!(c.metric(1, "tokenwatch_state_write_seconds_bucket{le=\"0.0001\"}").is_some(), "no sub-ms bucket");
    let mut last = first;
    for id in 1..=3 {
        let fence = lock_once(&c, id, Duration::from_secs(30)).unwrap_or_else(|e| panic!("node {id}: {e}"));
        assert!(fence > last, "fence {fence:#x} after {last:#x}");
        last = fence;
    }
}

#[test]
fn the_chaos_delay_may_not_exceed_the_datagram_delay_bound() {
    // --check-config refuses a delay beyond δ, naming the key.
    let bad = format!("{TIMING}[chaos]\ndelay_ms = 11\n");
    let b = Cluster::configure("tokenwatchd", 3, &bad).unwrap();
    let path = b.config_path(1).display().to_string();
    let (code, _, stderr) = run_once("tokenwatchd", &["--config", &path, "--check-config"], &[]).unwrap();
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("chaos.delay_ms"), "{stderr}");
}

#[test]
fn example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/tokenwatchd.example.toml");
    let (code, stdout, stderr) = run_once("tokenwatchd", &["--config", path, "--check-config"], &[]).unwrap();
    assert_eq!(code, 0, "{stderr}");
    for key in ["ring_timeout_ms = 100", "max_retransmits = 3", "max_hold_ms = 2000", "drop_rate = 0.0"] {
        assert!(stdout.contains(key), "effective config lacks {key}: {stdout}");
    }
}

/// Figures for the closing note (not assertions): token passes per second
/// at 0 % and 20 % chaos loss next to 1 / (3 · L_udp) measured in the same
/// run (L_udp: a loopback UDP round trip / 2), the time from a lost token
/// to its retransmission, and the loss-to-recovery histogram.
#[test]
#[ignore = "figures: cargo test --release -p ftcoord-tests --test tokenwatchd -- --ignored figures --nocapture"]
fn figures() {
    let _serial = serial();
    // L_udp: half the median round trip of a 64-byte datagram over loopback.
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut buf = [0u8; 64];
    let mut rtts: Vec<f64> = (0..2_000)
        .map(|_| {
            let t = Instant::now();
            a.send_to(&buf, b.local_addr().unwrap()).unwrap();
            let (_, from) = b.recv_from(&mut buf).unwrap();
            b.send_to(&buf, from).unwrap();
            a.recv_from(&mut buf).unwrap();
            t.elapsed().as_secs_f64()
        })
        .collect();
    rtts.sort_by(f64::total_cmp);
    let l_udp = rtts[rtts.len() / 2] / 2.0;
    // fsync_p50: a small write and fsync in a directory on the state
    // directories' file system (each hop stores tpc before its ACK).
    let dir = tempfile::tempdir().unwrap();
    let mut fsyncs: Vec<f64> = (0..200)
        .map(|i| {
            use std::io::Write;
            let t = Instant::now();
            let mut f = std::fs::File::create(dir.path().join("probe")).unwrap();
            f.write_all(&[i as u8; 64]).unwrap();
            f.sync_all().unwrap();
            t.elapsed().as_secs_f64()
        })
        .collect();
    fsyncs.sort_by(f64::total_cmp);
    let fsync = fsyncs[fsyncs.len() / 2];
    let bound = (1.0 / (3.0 * l_udp)).min(1.0 / fsync);
    eprintln!(
        "L_udp = {:.1} µs (1 / (3 · L_udp) = {:.0}/s); fsync_p50 = {:.0} µs (1 / fsync_p50 = {:.0}/s); bound {bound:.0} passes/s",
        l_udp * 1e6,
        1.0 / (3.0 * l_udp),
        fsync * 1e6,
        1.0 / fsync
    );
    for drop in ["0.0", "0.2"] {
        // An idle ring: the token is passed on as soon as it arrives.
        let timing = "ring_timeout_ms = 20\nmax_hold_ms = 300\ntoken_min_hold_ms = 0\nmax_datagram_delay_ms = 10\n";
        let c = Cluster::start("tokenwatchd", 5, &format!("{timing}[chaos]\ndrop_rate = {drop}\n")).unwrap();
        lock_once(&c, 1, Duration::from_secs(30)).unwrap();
        let passes = |c: &Cluster| sum_metric(c, &all(5), "tokenwatch_token_passes_total");
        let (p0, t0) = (passes(&c), Instant::now());
        thread::sleep(Duration::from_secs(5));
        let rate = (passes(&c) - p0) / t0.elapsed().as_secs_f64();
        let retrans = sum_metric(&c, &all(5), "tokenwatch_retransmissions_total");
        eprintln!(
            "drop {drop}: {rate:.0} passes/s = {:.3} of min(1/(3·L_udp), 1/fsync_p50), {:.4} of 1/(3·L_udp); \
             {retrans} retransmissions (each ring_timeout = 20 ms after a lost transmission)",
            rate / bound,
            rate * 3.0 * l_udp
        );
    }
    // Loss to recovery: SIGKILL of a daemon whose client holds the lock.
    let mut c = Cluster::start("tokenwatchd", 5, TIMING).unwrap();
    lock_once(&c, 1, Duration::from_secs(30)).unwrap();
    let mut holder = ftctl_lock(&c, 3, "30s", "sleep 10").spawn().unwrap();
    assert!(wait_until(Duration::from_secs(30), || has_token(&c, 3)), "node 3 never held");
    let t = Instant::now();
    c.kill(3);
    lock_once(&c, 1, Duration::from_secs(30)).unwrap();
    eprintln!("SIGKILL of the holder (node 3, its client holding) -> next grant on node 1: {:?}", t.elapsed());
    let _ = holder.wait();
    for id in [1, 2, 4, 5] {
        let sum = c.metric(id, "tokenwatch_recovery_duration_seconds_sum{kind=\"regeneration\"}").unwrap_or(0.0);
        let n = c.metric(id, "tokenwatch_recovery_duration_seconds_count{kind=\"regeneration\"}").unwrap_or(0.0);
        if n > 0.0 {
            eprintln!("node {id}: no token seen -> new token {:.1} ms (mean of {n})", sum / n * 1e3);
        }
    }
}

/// Issue 14's pause scenario (records.rs, `paused_holder_scenario`), with
/// holds of 200 ms (below this file's `max_hold_ms` of 300): the process
/// whose client holds is SIGSTOPped 100 ms into the hold, for 3 s. Its
/// client's lease ends with its last acked renewal's lease or its visit,
/// whichever is first; ftctl stops CMD by then, and the ring bypasses the
/// stopped process and regenerates. No overlap, fences rising.
#[test]
fn a_paused_holders_daemon_never_makes_two_holders() {
    let _serial = serial();
    let c = Cluster::start("tokenwatchd", 5, TIMING).unwrap();
    paused_holder_scenario(&c, "0.2", has_token);
}

/// Issue 14's partition scenario with the same checks as the pause above,
/// the process whose client holds cut off for 3 s through the UDP relay.
#[test]
fn a_partitioned_holders_daemon_never_makes_two_holders() {
    let _serial = serial();
    let c = Cluster::start_relayed("tokenwatchd", 5, TIMING).unwrap();
    cut_off_holder_scenario(&c, "0.2", has_token, CutOff::Partition);
}
