//! ntmutexd as real processes on loopback, driven by `ftctl lock`: mutual
//! exclusion and increasing fences checked from the clients' own start/end
//! records in one shared file, SIGKILL and restart of the token holder,
//! timeouts, disconnects, graceful leave, revocation, bad configs.
//!
//! The tests run one at a time (a process-wide lock): each starts up to five
//! daemons and a stream of `ftctl` and `sh` processes, and a 2-core machine
//! running several such clusters at once could stall a daemon past
//! `suspect_after_ms`, a false suspicion under which mutual exclusion is not
//! promised.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ftcoord_tests::records::*;
use ftcoord_tests::{bin, run_once, wait_until, Cluster};

/// Default timing, spelled out: the spec's targets are stated for these.
const TIMING: &str = "t_msg_ms = 20\n[timing]\nheartbeat_ms = 50\nsuspect_after_ms = 250\nlease_ms = 100\n";

#[test]
fn example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/ntmutexd.example.toml");
    let (code, stdout, stderr) = run_once("ntmutexd", &["--config", path, "--check-config"], &[]).unwrap();
    assert_eq!(code, 0, "{stderr}");
    for key in ["k = 3", "t_msg_ms = 20", "max_hold_ms = 0", "max_queue = 1024", "lease_ms = 100", "drift_ppm = 1000"] {
        assert!(stdout.contains(key), "effective config lacks {key}: {stdout}");
    }
}

/// SIGKILL the holder mid-hold, restart it after a second; every client,
/// the restarted daemon's included, keeps getting the lock.
#[test]
fn lock_loop_survives_sigkill_of_the_holder() {
    holder_kill_scenario(true);
}

/// The same without the restart: the survivors alone carry on.
#[test]
fn lock_loop_survives_sigkill_of_the_holder_without_restart() {
    holder_kill_scenario(false);
}

/// Five daemons, five `ftctl lock` loops (one per daemon) recording into one
/// file; SIGKILL of the daemon whose client is inside its critical section,
/// a second's pause, and (if `restart`) a restart of it.
fn holder_kill_scenario(restart: bool) {
    let _serial = serial();
    let mut c = Cluster::start("ntmutexd", 5, TIMING).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> =
        (1..=5).map(|id| client_loop(&c, id, format!("c{id}"), file.clone(), "0.03", stop.clone())).collect();

    // Everyone gets a few holds before the fault.
    let warm = wait_holds(&file, &[1, 2, 3, 4, 5], 3, 0, Duration::from_secs(60));
    assert!(warm, "not every client got 3 holds before the fault:\n{}\n{}", read(&file), logs(&c, &[1, 2, 3, 4, 5]));

    // Find the holder: the last record is its `start`, and its daemon has the token.
    let victim = catch_holder(&c, &file).expect("never caught a holder inside its critical section");
    let kill_ns = now_ns();
    c.kill(victim);
    let killed_at = Instant::now();
    thread::sleep(Duration::from_secs(1));
    let survivors: Vec<u32> = (1..=5).filter(|&id| id != victim).collect();
    if restart {
        c.restart(victim).unwrap();
        eprintln!("SIGKILLed node {victim} (the holder), restarted it {:?} later", killed_at.elapsed());
    } else {
        eprintln!("SIGKILLed node {victim} (the holder), not restarted");
    }
    let restart_ns = now_ns();

    // Every client (the restarted daemon's included) gets holds again.
    let clients: Vec<u32> = if restart { (1..=5).collect() } else { survivors.clone() };
    let recovered = wait_holds(&file, &clients, 3, restart_ns, Duration::from_secs(60));
    let (summary, codes) = stop_loops(&stop, loops);
    let text = read(&file);
    eprint!("{summary}");
    // Everything a failure needs: exit codes, records (kill at kill_ns), logs.
    let all = format!(
        "{summary}killed node {victim} at {kill_ns}, restarted ({restart}) at {restart_ns}\nrecords:\n{text}\n{}",
        logs(&c, &[1, 2, 3, 4, 5])
    );
    assert!(recovered, "not every client got 3 holds after the kill/restart of node {victim}:\n{all}");

    let holds = parse_holds(&text);
    check_exclusion_and_fences(&holds, &all);
    // Only the killed holder's CMD can have been stopped mid-hold; no one
    // else started until its daemon was dead.
    let incomplete: Vec<&Hold> = holds.iter().filter(|h| h.end.is_none()).collect();
    assert!(incomplete.len() <= 1, "more than one hold without an end: {incomplete:?}\n{all}");
    eprintln!("holds cut short by the kill: {incomplete:?}");
    if let Some(h) = incomplete.first() {
        assert_eq!(h.client, format!("c{victim}"), "an incomplete hold of a client whose daemon lived: {h:?}\n{all}");
        assert!(h.start < kill_ns, "the incomplete hold started after the kill: {h:?}\n{all}");
        let intruder = holds.iter().find(|o| o.start > h.start && o.start < kill_ns);
        assert!(intruder.is_none(), "{intruder:?} started while {h:?} was held (before the kill)\n{all}");
    }
    // Every request was answered: surviving daemons' clients never failed,
    // timed out or lost the lock; the victim's client lost it at most once.
    for (i, codes) in codes.iter().enumerate() {
        let id = i as u32 + 1;
        let bad: Vec<_> = codes.iter().filter(|(code, _)| *code != 0).collect();
        if id == victim {
            assert!(bad.iter().all(|(code, _)| *code != TIMED_OUT), "c{id}: {bad:?}\n{all}");
            assert!(bad.iter().filter(|(code, _)| *code == LOCK_LOST).count() <= 1, "c{id}: {bad:?}\n{all}");
        } else {
            assert!(bad.is_empty(), "c{id} on a live daemon: {bad:?}\n{all}");
        }
    }

    // The recovery shows in the survivors' metrics.
    let recoveries = sum_metric(&c, &survivors, "ntmutex_recoveries_total{kind=");
    let regenerations = sum_metric(&c, &survivors, "ntmutex_token_regenerations_total");
    assert!(recoveries > 0.0 || regenerations > 0.0, "no recovery in the metrics\n{all}");
    let durations: Vec<(u32, String)> = survivors
        .iter()
        .filter_map(|&id| c.scrape(id).ok().map(|t| (id, t)))
        .flat_map(|(id, t)| {
            t.lines()
                .filter(|l| l.starts_with("ntmutex_recovery_duration_seconds_count{kind="))
                .map(|l| (id, l.to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!durations.is_empty(), "no ntmutex_recovery_duration_seconds_count{{kind=…}} on any survivor\n{all}");

    // The token path was restored without the victim.
    let next_start = holds.iter().find(|h| h.start > kill_ns).expect("holds after the kill");
    eprintln!(
        "recovery after SIGKILL of holder {victim}: kill -> next CMD start {:.1} ms (by {}, fence {}); \
         recoveries {recoveries}, regenerations {regenerations}; {} holds recorded; {durations:?}",
        ms(next_start.start - kill_ns),
        next_start.client,
        next_start.fence,
        holds.len(),
    );
}

#[test]
fn handoff_latency() {
    let _serial = serial();
    let c = Cluster::start("ntmutexd", 3, TIMING).unwrap();
    let ids = [1, 2, 3];
    let dir = tempfile::tempdir().unwrap();

    // Throughput: two clients on nodes 1 and 2 contending with `true`.
    let before = sum_metric(&c, &ids, "ntmutex_cs_entries_total");
    let ftctl = bin("ftctl").unwrap();
    let started = Instant::now();
    let workers: Vec<_> = [1u32, 2]
        .into_iter()
        .map(|id| {
            let addr = c.node(id).client.to_string();
            let ftctl = ftctl.clone();
            thread::spawn(move || {
                let mut codes = Vec::new();
                while started.elapsed() < Duration::from_secs(3) {
                    let out = Command::new(&ftctl)
                        .args(["--addr", &addr, "lock", "--timeout", "30s", "--", "true"])
                        .stdin(Stdio::null())
                        .output()
                        .expect("run ftctl");
                    let code = out.status.code().unwrap_or(-1);
                    if code != 0 {
                        eprintln!("ftctl exited {code}: {}", String::from_utf8_lossy(&out.stderr).trim());
                    }
                    codes.push(code);
                }
                codes
            })
        })
        .collect();
    let codes: Vec<Vec<i32>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let elapsed = started.elapsed().as_secs_f64();
    let grants = sum_metric(&c, &ids, "ntmutex_cs_entries_total") - before;
    for (i, codes) in codes.iter().enumerate() {
        assert!(codes.iter().all(|&code| code == 0), "client {i}: {codes:?}\n{}", logs(&c, &ids));
        assert!(!codes.is_empty());
    }
    let ok: usize = codes.iter().map(Vec::len).sum();
    assert!(grants >= ok as f64, "cs_entries_total rose by {grants}, but {ok} ftctl runs succeeded");
    assert!(grants >= 10.0, "only {grants} grants in {elapsed:.1} s\n{}", logs(&c, &ids));

    // Handoff: the same two clients recording start/end; the gap from one
    // client's end to the other's next start.
    let file = dir.path().join("holds.log");
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> =
        [1u32, 2].into_iter().map(|id| client_loop(&c, id, format!("c{id}"), file.clone(), "", stop.clone())).collect();
    thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        let codes = l.join().unwrap();
        assert!(codes.iter().all(|(code, _)| *code == 0), "{codes:?}");
    }
    let holds = parse_holds(&read(&file));
    check_exclusion_and_fences(&holds, &logs(&c, &ids));
    assert!(holds.iter().all(|h| h.end.is_some()), "a CMD did not complete: {holds:?}");
    let mut gaps: Vec<f64> = holds
        .windows(2)
        .filter(|w| w[0].client != w[1].client)
        .map(|w| ms(w[1].start - w[0].end.expect("complete")))
        .collect();
    let mut same: Vec<f64> = holds
        .windows(2)
        .filter(|w| w[0].client == w[1].client)
        .map(|w| ms(w[1].start - w[0].end.expect("complete")))
        .collect();
    assert!(!gaps.is_empty(), "the two clients never alternated: {holds:?}");
    let handoffs = gaps.len();
    let repeats = same.len();
    eprintln!(
        "throughput, 2 clients on 2 of 3 nodes, CMD `true`: {:.0} grants/s ({grants} in {elapsed:.2} s; \
         each grant includes an ftctl process start)",
        grants / elapsed
    );
    eprintln!(
        "handoff (CMD end at one client -> CMD start at the other, includes sh/date/ftctl process starts): \
         median {} ms over {handoffs} handoffs; same-client re-acquire median {} ms over {repeats}",
        median(&mut gaps),
        median(&mut same)
    );
}

#[test]
fn lock_timeout_exits_75() {
    let _serial = serial();
    let c = Cluster::start("ntmutexd", 3, TIMING).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let held = dir.path().join("held");
    let mut holder =
        ftctl_lock(&c, 1, "30s", &format!("echo $FTCOORD_FENCE > '{}'; sleep 2", held.display())).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(20), || held.exists()), "holder never got the lock\n{}", c.log(1));

    let started = Instant::now();
    let (code, stderr) = run(ftctl_lock(&c, 2, "200ms", "true"));
    let waited = started.elapsed();
    assert_eq!(code, TIMED_OUT, "{stderr}\n{}", logs(&c, &[1, 2, 3]));
    assert!(stderr.contains("not obtained"), "{stderr}");
    assert!(matches!(holder.try_wait(), Ok(None)), "the holder ended before the waiter timed out");
    assert_eq!(holder.wait().unwrap().code(), Some(0));
    eprintln!("ftctl --timeout 200ms gave up after {waited:?}");

    // The abandoned request did not wedge the queue.
    let (code, stderr) = run(ftctl_lock(&c, 2, "20s", "true"));
    assert_eq!(code, 0, "{stderr}\n{}", logs(&c, &[1, 2, 3]));
    let (code, stderr) = run(ftctl_lock(&c, 3, "20s", "true"));
    assert_eq!(code, 0, "{stderr}\n{}", logs(&c, &[1, 2, 3]));
}

#[test]
fn client_disconnect_releases() {
    let _serial = serial();
    let c = Cluster::start("ntmutexd", 3, TIMING).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let held = dir.path().join("held");
    // CMD is `sleep` itself (exec), its pid in the file.
    let mut holder =
        ftctl_lock(&c, 1, "30s", &format!("echo $$ > '{}'; exec sleep 30", held.display())).spawn().unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || read(&held).trim().parse::<u32>().is_ok()),
        "holder never got the lock\n{}",
        c.log(1)
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    let killed = Instant::now();
    let (code, stderr) = run(ftctl_lock(&c, 2, "5s", "true"));
    let took = killed.elapsed();
    // The orphaned CMD is ours to clean up.
    let _ = Command::new("kill").arg("-KILL").arg(read(&held).trim()).status();
    assert_eq!(code, 0, "the lock was not released by the disconnect: {stderr}\n{}", logs(&c, &[1, 2, 3]));
    eprintln!("SIGKILL of the holding ftctl -> lock granted elsewhere and CMD done: {took:?}");
}

#[test]
fn sigterm_holder_hands_the_token_on() {
    let _serial = serial();
    let mut c = Cluster::start("ntmutexd", 3, TIMING).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fence_file = dir.path().join("fence");
    // Move the token off the initial holder: node 2 takes it and keeps it idle.
    let (code, stderr) = run(ftctl_lock(&c, 2, "20s", &format!("echo $FTCOORD_FENCE > '{}'", fence_file.display())));
    assert_eq!(code, 0, "{stderr}");
    let first: u128 = read(&fence_file).trim().parse().unwrap();
    let mut holder = None;
    assert!(
        wait_until(Duration::from_secs(10), || {
            holder = (1..=3).find(|&id| has_token(&c, id));
            holder.is_some()
        }),
        "nobody holds the idle token\n{}",
        logs(&c, &[1, 2, 3])
    );
    let holder = holder.expect("found");
    let exit = c.terminate(holder, Duration::from_secs(10)).unwrap();
    assert_eq!(exit.code(), Some(0), "log:\n{}", c.log(holder));

    let others: Vec<u32> = (1..=3).filter(|&id| id != holder).collect();
    for &id in &others {
        let (code, stderr) =
            run(ftctl_lock(&c, id, "10s", &format!("echo $FTCOORD_FENCE > '{}'", fence_file.display())));
        assert_eq!(code, 0, "node {id} granted nothing after {holder} left: {stderr}\n{}", logs(&c, &[1, 2, 3]));
        let fence: u128 = read(&fence_file).trim().parse().unwrap();
        assert!(fence > first, "fence {fence} after the leave is not above {first}");
    }
    let s = others.iter().filter_map(|&id| status(&c, id)).collect::<Vec<_>>();
    assert_eq!(
        s.iter().filter(|s| detail(s, "has_token").as_deref() == Some("true")).count(),
        1,
        "exactly one token among the survivors: {s:?}"
    );
    eprintln!("node {holder} left holding the idle token; nodes {others:?} granted after it");
}

/// Issue 14's scenario, as a new user ran it (records.rs,
/// `paused_holder_scenario`): five daemons, 1 s holds, the holder's daemon
/// SIGSTOPped 100 ms into its hold for 3 s. No overlap, fences rising,
/// everyone served again.
#[test]
fn a_paused_holders_daemon_never_makes_two_holders() {
    let _serial = serial();
    let c = Cluster::start("ntmutexd", 5, TIMING).unwrap();
    paused_holder_scenario(&c, "1", has_token);
}

#[test]
fn max_hold_revokes() {
    let _serial = serial();
    let c = Cluster::start("ntmutexd", 3, &format!("max_hold_ms = 300\n{TIMING}")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f1 = dir.path().join("fence1");
    let f2 = dir.path().join("fence2");
    let started = Instant::now();
    let (code, stderr) =
        run(ftctl_lock(&c, 1, "20s", &format!("echo $FTCOORD_FENCE > '{}'; exec sleep 5", f1.display())));
    let took = started.elapsed();
    assert_eq!(code, LOCK_LOST, "{stderr}\n{}", c.log(1));
    assert!(took < Duration::from_millis(4500), "CMD was not stopped: ftctl took {took:?}");
    let (code, stderr) = run(ftctl_lock(&c, 2, "20s", &format!("echo $FTCOORD_FENCE > '{}'", f2.display())));
    assert_eq!(code, 0, "{stderr}\n{}", logs(&c, &[1, 2, 3]));
    let fence1: u128 = read(&f1).trim().parse().unwrap();
    let fence2: u128 = read(&f2).trim().parse().unwrap();
    assert!(fence2 > fence1, "fence after the revocation {fence2} is not above {fence1}");
    assert!(c.log(1).contains("revoking"), "{}", c.log(1));
    eprintln!("revoked hold (max_hold 300 ms): ftctl exited 69 after {took:?}");
}

/// The spec's metric of lock-lost notices: a revocation sends the holder
/// `LockLost`, so it counts, also when the client gives the lock back
/// before its lease ends (as ftctl does).
#[test]
fn max_hold_revocation_counts_a_lock_lost_notice() {
    let _serial = serial();
    let c = Cluster::start("ntmutexd", 2, &format!("max_hold_ms = 300\n{TIMING}")).unwrap();
    let (code, stderr) = run(ftctl_lock(&c, 1, "20s", "exec sleep 5"));
    assert_eq!(code, LOCK_LOST, "{stderr}\n{}", c.log(1));
    let counted = wait_until(Duration::from_secs(3), || c.metric(1, "ntmutex_lock_lost_total").unwrap_or(0.0) >= 1.0);
    assert!(
        counted,
        "ftctl was told LockLost ({stderr}) but ntmutex_lock_lost_total is {:?}",
        c.metric(1, "ntmutex_lock_lost_total")
    );
}

#[test]
fn config_errors_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let peers = "[[peers]]\nid = 1\naddr = \"127.0.0.1:7101\"\n[[peers]]\nid = 2\naddr = \"127.0.0.1:7102\"\n";
    let cases = [
        ("k.toml", "k = 0\n", "k"),
        ("tmsg.toml", "t_msg_ms = 0\n", "t_msg_ms"),
        ("queue.toml", "max_queue = 0\n", "max_queue"),
        (
            "suspect.toml",
            "t_msg_ms = 15\n[timing]\nheartbeat_ms = 50\nsuspect_after_ms = 60\nlease_ms = 40\n",
            "timing.suspect_after_ms",
        ),
        ("unknown.toml", "kk = 3\n", "kk"),
        // reliability.md: lease_ms·(1+ρ) + lease_ms/3 ≤ suspect_after_ms·(1−ρ).
        ("lease.toml", "[timing]\nlease_ms = 200\nsuspect_after_ms = 250\n", "timing.lease_ms"),
    ];
    let n1 = format!("node_id = 1\nstate_dir = \"{}\"\n", dir.path().join("state").display());
    for (name, body, key) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{n1}{body}\n{peers}")).unwrap();
        let (code, _, stderr) = run_once("ntmutexd", &["--config", &path.display().to_string()], &[]).unwrap();
        assert_eq!(code, 2, "{name}: {stderr}");
        assert!(stderr.contains(key), "{name}: stderr should name '{key}': {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
    }
    // The same checks reach environment overrides.
    let ok = dir.path().join("ok.toml");
    std::fs::write(&ok, format!("{n1}{peers}")).unwrap();
    let ok = ok.display().to_string();
    let (code, _, stderr) = run_once("ntmutexd", &["--config", &ok], &[("NTMUTEXD_K", "0")]).unwrap();
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains('k'), "{stderr}");
    let (code, stdout, stderr) = run_once("ntmutexd", &["--config", &ok, "--check-config"], &[]).unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("t_msg_ms = 20"), "{stdout}");
}

/// A restart is not a failure of anyone else: a new life that joins while
/// every peer is alive and one of them holds the idle token must neither
/// suspect them nor make a second token. Clients of the restarted node and
/// of the holder then ask at once; their holds must not overlap.
#[test]
fn restarted_node_does_not_suspect_live_peers() {
    let _serial = serial();
    let mut c = Cluster::start("ntmutexd", 5, TIMING).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");
    // Node 3 takes the token and keeps it idle.
    let (code, stderr) = run(ftctl_lock(&c, 3, "20s", "true"));
    assert_eq!(code, 0, "{stderr}");
    assert!(wait_until(Duration::from_secs(5), || has_token(&c, 3)), "{}", logs(&c, &[1, 2, 3, 4, 5]));
    c.kill(5);
    thread::sleep(Duration::from_secs(1));
    c.restart(5).unwrap();
    let restarted = Instant::now();
    let at5 = ftctl_lock(&c, 5, "20s", &recording_script("c5", &file, "1")).spawn().unwrap();
    let mut tokens = Vec::new();
    let started = wait_until(Duration::from_secs(20), || {
        tokens = (1..=5).filter(|&id| has_token(&c, id)).collect();
        read(&file).contains("start")
    });
    assert!(started, "the restarted node granted nothing\n{}", logs(&c, &[1, 2, 3, 4, 5]));
    let granted5 = restarted.elapsed();
    let at3 = ftctl_lock(&c, 3, "20s", &recording_script("c3", &file, "1")).spawn().unwrap();
    let (at5, at3) = (at5.wait_with_output().unwrap(), at3.wait_with_output().unwrap());
    let all = logs(&c, &[1, 2, 3, 4, 5]);
    eprintln!("restarted node 5 granted {granted5:?} after it was ready; tokens seen at {tokens:?}");
    assert!(at5.status.success() && at3.status.success(), "{at5:?} {at3:?}\n{all}");
    let holds = parse_holds(&read(&file));
    // `tokens` is diagnostic only: statuses are asked one node after the
    // other, so a token in transit can show at two nodes.
    check_exclusion_and_fences(&holds, &format!("tokens seen at {tokens:?}\n{all}"));

    let log5 = c.log(5);
    // The new life: from the last start line on (a marker that exists; the
    // one this split on before, "ntmutexd ready", is logged nowhere, which
    // left the check below vacuous).
    let (_, new_life) = log5.rsplit_once("ntmutexd listening; joining").expect("node 5 logged its start");
    let suspected: Vec<&str> = new_life.lines().filter(|l| l.contains("peer suspected")).collect();
    assert!(suspected.is_empty(), "the new life of node 5 suspected live peers: {suspected:#?}\n{all}");
    let regenerations = sum_metric(&c, &[1, 2, 3, 4, 5], "ntmutex_token_regenerations_total");
    // The first token is made by a regeneration round (never chosen
    // locally); a live idle token is not regenerated because a node
    // restarted. One exception per node, by design (docs/foundation.md,
    // Fresh nodes): a node whose process started after the first token was
    // made recovered, as a fresh node, `recovered_max` = that token's
    // epoch, and accepts no token at or below it, across restarts too; it
    // discards the live token as stale and a regeneration above it
    // replaces the token. Seen in CI about 1 run in 40 with node 5 slow to
    // start (its new life discards the token), and once with node 3 slow
    // to start (at the cluster's start, before the kill).
    let recovered_late = |log: &str| {
        log.lines().any(|l| l.contains("fresh state recovered") && !l.contains("recovered_max=0"))
            && log.contains("stale token discarded")
    };
    let late = (1..=5).filter(|&id| recovered_late(&c.log(id))).count();
    let expected = 1.0 + late as f64;
    assert_eq!(regenerations, expected, "a live idle token was regenerated\n{all}");
    assert!(!all.contains("token superseded"), "a live holder lost its token\n{all}");
}

/// One `ftctl lock` through node `id` that records its hold in `file`.
fn recorded_grant(c: &Cluster, id: u32, file: &Path, who: &str) {
    let (code, stderr) = run(ftctl_lock(c, id, "20s", &recording_script(who, file, "")));
    if code != 0 {
        // What each running node thinks (a stopped one does not answer).
        let views: Vec<String> = (1..=3).map(|n| format!("node {n}: {:?}", status(c, n))).collect();
        panic!("lock through node {id}: {stderr}\n{}\n{}", views.join("\n"), logs(c, &[1, 2, 3]));
    }
}

fn epoch_of(c: &Cluster, id: u32) -> u64 {
    status(c, id).and_then(|s| detail(&s, "epoch")).and_then(|e| e.parse().ok()).unwrap_or(0)
}

/// Durable state (foundation.md): SIGKILL of every node, twice, and a
/// restart of all at once; every fence granted after a cold restart exceeds
/// every fence granted before it (the clients' own records say so).
#[test]
fn fences_never_repeat_across_cold_restarts_of_every_node() {
    let _serial = serial();
    let mut c = Cluster::start("ntmutexd", 3, TIMING).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");
    for round in 0..3 {
        for id in 1..=3 {
            recorded_grant(&c, id, &file, &format!("r{round}n{id}"));
        }
        if round < 2 {
            for id in 1..=3 {
                c.kill(id);
            }
            for id in 1..=3 {
                c.restart(id).unwrap();
            }
        }
    }
    let holds = parse_holds(&read(&file));
    assert_eq!(holds.len(), 9, "{holds:?}");
    check_exclusion_and_fences(&holds, &logs(&c, &[1, 2, 3]));
    eprintln!("fences across two cold restarts: {:?}", holds.iter().map(|h| h.fence).collect::<Vec<_>>());
}

/// A majority restarts while the old holder is stopped (SIGSTOP: to the
/// others it is gone, to itself nothing happened): the restarted majority
/// makes a new token above everything stored; the old holder, resumed,
/// learns the newer epoch before it grants again.
#[test]
fn fences_keep_increasing_when_a_majority_restarts_while_the_old_holder_is_stopped() {
    let _serial = serial();
    let mut c = Cluster::start("ntmutexd", 3, TIMING).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");
    recorded_grant(&c, 1, &file, "a1");
    recorded_grant(&c, 3, &file, "a3");
    assert!(wait_until(Duration::from_secs(5), || has_token(&c, 3)), "{}", logs(&c, &[1, 2, 3]));
    // Stopping node 3 leaves a majority only because nodes 1 and 2 have
    // their promises (Cluster::start waited until every node recovered).
    let old_epoch = epoch_of(&c, 3);
    let pid3 = c.pid(3).unwrap().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid3]).status().unwrap().success());
    for id in [1, 2] {
        c.kill(id);
    }
    for id in [1, 2] {
        c.restart(id).unwrap();
    }
    recorded_grant(&c, 1, &file, "b1");
    recorded_grant(&c, 2, &file, "b2");
    let new_epoch = epoch_of(&c, 1);
    assert!(new_epoch > old_epoch, "a new token: epoch {new_epoch} after {old_epoch}");
    assert!(Command::new("kill").args(["-CONT", &pid3]).status().unwrap().success());
    // Resumed, the old holder hears from the others (late answers, probes)
    // and drops its token for the newer epoch.
    assert!(
        wait_until(Duration::from_secs(10), || epoch_of(&c, 3) >= new_epoch && !has_token(&c, 3)),
        "the old holder never learnt epoch {new_epoch}\n{}",
        logs(&c, &[1, 2, 3])
    );
    recorded_grant(&c, 3, &file, "c3");
    recorded_grant(&c, 1, &file, "c1");
    let holds = parse_holds(&read(&file));
    assert_eq!(holds.len(), 6, "{holds:?}");
    check_exclusion_and_fences(&holds, &logs(&c, &[1, 2, 3]));
}

/// An idle cluster (no lock traffic reaches node 3): SIGKILL of node 3 is
/// shown by every survivor, in `ftctl status` and in `peer_up`, through
/// the liveness probes (one peer per heartbeat, in turn), and its restart
/// shows it up again. Before them a killed idle peer stayed "up" for good.
#[test]
fn every_survivor_shows_a_killed_idle_peer_down_and_its_restart_up() {
    let _serial = serial();
    let mut c = Cluster::start("ntmutexd", 5, TIMING).unwrap();
    let survivors = [1, 2, 4, 5];
    let up = |c: &Cluster, id: u32, peer: u32| {
        status(c, id).and_then(|s| s.peers.iter().find(|p| p.id.0 == peer).map(|p| p.up))
    };
    assert!(wait_until(Duration::from_secs(10), || survivors.iter().all(|id| up(&c, *id, 3) == Some(true))));
    c.kill(3);
    let t = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || survivors.iter().all(|id| up(&c, *id, 3) == Some(false))),
        "not every survivor shows node 3 down; logs:\n{}",
        logs(&c, &survivors)
    );
    eprintln!("SIGKILL of idle node 3 -> every survivor's status shows it down: {:?}", t.elapsed());
    // The metric follows (gauges refresh every half second).
    assert!(wait_until(Duration::from_secs(3), || survivors
        .iter()
        .all(|id| c.metric(*id, "ntmutex_peer_up{peer=\"3\"}") == Some(0.0))));
    c.restart(3).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || survivors.iter().all(|id| up(&c, *id, 3) == Some(true))),
        "node 3 not shown up again after its restart"
    );
}

/// Issue 15's failure hint, from outside: a paused daemon (SIGSTOP: its
/// sockets stay open) is never reported unreachable; a killed one (its
/// connections close, its port refuses) is, by every survivor, and its
/// restart then serves again.
#[test]
fn a_killed_peer_is_reported_unreachable_and_a_paused_one_is_not() {
    let _serial = serial();
    let mut c = Cluster::start("ntmutexd", 5, TIMING).unwrap();
    let unreachable = |c: &Cluster, id: u32| c.metric(id, "ntmutex_peers_unreachable_total");
    assert!(wait_until(Duration::from_secs(10), || (1..=5).all(|id| unreachable(&c, id) == Some(0.0))));
    let paused = c.pid(4).unwrap();
    ftcoord_tests::signal(paused, "STOP").unwrap();
    thread::sleep(Duration::from_millis(600));
    ftcoord_tests::signal(paused, "CONT").unwrap();
    thread::sleep(Duration::from_millis(300));
    for id in [1, 2, 3, 5] {
        assert_eq!(unreachable(&c, id), Some(0.0), "node {id} took a pause for a death");
    }
    c.kill(3);
    let survivors = [1, 2, 4, 5];
    assert!(
        wait_until(Duration::from_secs(5), || survivors.iter().all(|id| unreachable(&c, *id) == Some(1.0))),
        "not every survivor heard that node 3 is gone: {:?}; logs:\n{}",
        survivors.map(|id| unreachable(&c, id)),
        logs(&c, &survivors)
    );
    c.restart(3).unwrap();
    let (code, err) = run(ftctl_lock(&c, 3, "10s", "true"));
    assert_eq!(code, 0, "node 3 serves no lock after its restart: {err}");
}

/// Issue 14's partition scenario: as the pause above, but the holder's
/// daemon keeps running, cut off from every other node for 3 s through a
/// TCP relay (`Cluster::start_relayed`). Its renewals reach no majority,
/// so its CMD stops at its lease's end, before the majority can grant.
#[test]
fn a_partitioned_holders_daemon_never_makes_two_holders() {
    let _serial = serial();
    let c = Cluster::start_relayed("ntmutexd", 5, TIMING).unwrap();
    cut_off_holder_scenario(&c, "1", has_token, CutOff::Partition);
}
