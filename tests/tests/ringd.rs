//! ringd as real processes on loopback (TCP between replicas), driven by
//! `ftctl lookup` and `ftctl exec` and judged from outside: the ring forms
//! and one token circulates; `counter.incr` loops through every replica
//! across a SIGKILL and restart of the token's owner and a SIGSTOP/SIGCONT
//! pause, after which the counter equals the number of acknowledged
//! increments and no two acknowledgements returned the same value; lookups
//! avoid a replica busy with `sleep` services.
//!
//! One cluster at a time (`serial`). Figures (repair time after SIGKILL,
//! lookup latency) are printed, not asserted.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ftcoord_tests::records::*;
use ftcoord_tests::{bin, run_once, wait_until, Cluster};

/// Small timings: a lap of 5 replicas takes about 5 × 5 ms idle; the
/// token-lost deadline is derived (100 + 2·5·25 + 50·(1+ρ) + 100 ≈ 500 ms).
const TIMING: &str = "token_min_hold_ms = 5\n[timing]\nheartbeat_ms = 20\nsuspect_after_ms = 100\nlease_ms = 50\n";
const HEARTBEAT_MS: u64 = 20;

fn all(n: u32) -> Vec<u32> {
    (1..=n).collect()
}

/// `ftctl --addr <node id's client address> ARGS`: (exit code, stdout, stderr).
fn ftctl(c: &Cluster, id: u32, args: &[&str]) -> (i32, String, String) {
    ftctl_at(&c.node(id).client.to_string(), args)
}

/// `ftctl --addr ADDR ARGS`: (exit code, stdout, stderr).
fn ftctl_at(addr: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin("ftctl").expect("ftctl is built"))
        .args(["--addr", addr])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ftctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn detail_of(c: &Cluster, id: u32, key: &str) -> Option<String> {
    status(c, id).and_then(|s| detail(&s, key))
}

/// (epoch, seq) of the newest token node `id` accepted.
fn token_id(c: &Cluster, id: u32) -> Option<(u64, u64)> {
    let s = status(c, id)?;
    Some((detail(&s, "epoch")?.parse().ok()?, detail(&s, "seq")?.parse().ok()?))
}

/// Whether every node of `ids` reports a ring of `n` live replicas.
fn ring_is(c: &Cluster, ids: &[u32], n: usize) -> bool {
    ids.iter().all(|&id| detail_of(c, id, "ring").as_deref() == Some(&n.to_string()))
}

/// The nodes of `ids` whose status says `has_token = true`, asked one
/// after the other.
fn owners(c: &Cluster, ids: &[u32]) -> Vec<u32> {
    ids.iter().copied().filter(|&id| has_token(c, id)).collect()
}

fn signal(pid: u32, sig: &str) {
    assert!(Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap().success());
}

/// Five replicas form one ring and circulate one token; `ftctl lookup`
/// names a replica with its real client address; `ftctl exec` runs the
/// built-ins and maps their outcomes to exit statuses; `ftctl lock`
/// against ringd says that ringd grants no locks.
#[test]
fn five_replicas_form_one_ring_circulate_one_token_and_serve_lookup_and_exec() {
    let _serial = serial();
    let c = Cluster::start("ringd", 5, TIMING).unwrap();
    assert!(wait_until(Duration::from_secs(20), || ring_is(&c, &all(5), 5)), "{}", logs(&c, &all(5)));

    // Exactly one owner in some sweep of the five statuses.
    let mut sweeps = Vec::new();
    let one = wait_until(Duration::from_secs(20), || {
        let o = owners(&c, &all(5));
        sweeps.push(o.clone());
        o.len() == 1
    });
    assert!(one, "no sweep found exactly one owner: {sweeps:?}\n{}", logs(&c, &all(5)));

    // The token circulates: every replica's (epoch, seq) rises.
    for id in all(5) {
        let before = token_id(&c, id).expect("status");
        let rose = wait_until(Duration::from_secs(5), || token_id(&c, id).is_some_and(|now| now > before));
        assert!(rose, "node {id}'s (epoch, seq) stayed at {before:?}\n{}", logs(&c, &all(5)));
    }

    // `ftctl lookup`: text and JSON, an address that is that replica's.
    let (code, out, err) = ftctl(&c, 3, &["lookup"]);
    assert_eq!(code, 0, "{out}{err}");
    let words: Vec<&str> = out.split_whitespace().collect();
    let [w_replica, replica, address, w_load, load] = words[..] else { panic!("lookup printed {out:?}") };
    assert_eq!((w_replica, w_load), ("replica", "load"), "{out}");
    let replica: u32 = replica.parse().unwrap();
    assert_eq!(address, c.node(replica).client.to_string(), "{out}");
    assert_eq!(out, format!("replica {replica} {address} load {load}\n"));
    let (code, out, err) = ftctl(&c, 1, &["--json", "lookup"]);
    assert_eq!(code, 0, "{out}{err}");
    let replica: u32 =
        out.trim().strip_prefix("{\"replica\":").and_then(|r| r.split(',').next()).unwrap().parse().unwrap();
    assert_eq!(
        out.trim(),
        format!("{{\"replica\":{replica},\"address\":\"{}\",\"load\":0}}", c.node(replica).client),
        "an idle ring: load 0"
    );

    // `ftctl exec` after a lookup, and on a given replica.
    assert_eq!(ftctl(&c, 2, &["exec", "echo", "a", "b"]), (0, "a b\n".into(), String::new()));
    let on4 = c.node(4).client.to_string();
    let (code, out, err) = ftctl(&c, 1, &["--json", "exec", "--on", &on4, "--request-id", "77", "echo", "-n", "x"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "{\"request_id\":77,\"replica\":4,\"output\":\"-n x\",\"status\":0,\"fence\":null}\n");
    let (code, out, err) = ftctl(&c, 5, &["exec", "counter.incr", "hits"]);
    assert_eq!((code, out.as_str()), (0, "1\n"), "{err}\n{}", logs(&c, &all(5)));
    let (code, out, err) = ftctl(&c, 5, &["--json", "exec", "counter.incr", "hits", "41"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"output\":\"42\",\"status\":0,\"fence\":\""), "a token service has a fence: {out}");
    assert_eq!(ftctl(&c, 1, &["exec", "kv.put", "k", "v"]).0, 0);
    assert_eq!(ftctl(&c, 3, &["exec", "kv.get", "k"]), (0, "v\n".into(), String::new()));
    let (code, out, err) = ftctl(&c, 3, &["exec", "kv.get", "missing"]);
    assert_eq!((code, out.as_str(), err.as_str()), (1, "", ""), "kv.get of a missing key exits 1, silently");
    let (code, out, err) = ftctl(&c, 3, &["exec", "no.such", "x"]);
    assert_eq!((code, out.as_str()), (64, ""), "{err}");
    assert!(err.contains("unknown service `no.such`") && err.contains("request_id "), "{err}");
    let (code, out, err) = ftctl(&c, 3, &["--json", "exec", "counter.incr"]);
    assert_eq!(code, 64, "{out}{err}");
    assert!(out.starts_with("{\"error\":\"bad_arguments\",\"message\":\"bad arguments: usage: counter.incr"), "{out}");

    // ringd grants no client locks.
    let (code, out, err) = ftctl(&c, 2, &["lock", "--timeout", "2s", "--", "true"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("ringd grants no client locks: cluster-exclusive jobs are its needs_token command services"),
        "{err}"
    );
    let (code, _, err) = ftctl(&c, 2, &["leader"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ringd") && err.contains("elects no leader"), "{err}");
}

/// `ftctl lookup` and `ftctl exec` talk only to ringd: against another
/// daemon they say which one answered and send it nothing else; `ftctl
/// lock` against hbringd says it grants no locks.
#[test]
fn lookup_and_exec_refuse_other_daemons() {
    let _serial = serial();
    let c = Cluster::start("hbringd", 2, TIMING.split_once('\n').unwrap().1).unwrap();
    for args in [&["lookup"][..], &["exec", "echo", "x"], &["exec", "--on", &c.node(2).client.to_string(), "echo"]] {
        let (code, out, err) = ftctl(&c, 1, args);
        assert_eq!((code, out.as_str()), (1, ""), "{args:?}: {err}");
        assert!(err.contains("is hbringd (node "), "{args:?}: {err}");
        assert!(err.contains("not ringd"), "{args:?}: {err}");
    }
    let (code, _, err) = ftctl(&c, 1, &["lock", "--", "true"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("hbringd grants no client locks"), "{err}");
}

/// One acknowledged `counter.incr`: its request id, the value it returned,
/// and when its last attempt started and ended.
#[derive(Clone, Debug)]
struct Ack {
    request_id: u64,
    value: i64,
    started: Instant,
    ended: Instant,
}

/// What one client loop saw.
#[derive(Debug, Default)]
struct ClientLog {
    acks: Vec<Ack>,
    /// Failed attempts: (request id, exit code, stderr).
    failures: Vec<(u64, i32, String)>,
    /// A request never acknowledged before the loop's deadline.
    unresolved: Option<u64>,
}

/// A thread running `ftctl exec --on <replica> counter.incr NAME` again and
/// again until `stop`. A failed attempt is retried with the same request id
/// (on the next replica: its own may be dead) until acknowledged, so that
/// every increment applied is acknowledged exactly once.
fn incr_loop(c: &Cluster, id: u32, name: &'static str, stop: Arc<AtomicBool>) -> thread::JoinHandle<ClientLog> {
    let ftctl = bin("ftctl").expect("ftctl is built");
    let addrs: Vec<String> = all(c.len() as u32).iter().map(|&n| c.node(n).client.to_string()).collect();
    thread::spawn(move || {
        let mut log = ClientLog::default();
        let mut k: u64 = 0;
        while !stop.load(Ordering::Relaxed) {
            k += 1;
            let request_id = (u64::from(id) << 32) | k;
            let first = Instant::now();
            let mut attempt = 0usize;
            loop {
                if first.elapsed() > Duration::from_secs(60) {
                    log.unresolved = Some(request_id);
                    return log;
                }
                let on = &addrs[(id as usize - 1 + attempt) % addrs.len()];
                let started = Instant::now();
                let out = Command::new(&ftctl)
                    .args(["exec", "--on", on, "--timeout", "5s", "--request-id", &request_id.to_string()])
                    .args(["counter.incr", name])
                    .stdin(Stdio::null())
                    .output()
                    .expect("run ftctl");
                let code = out.status.code().unwrap_or(-1);
                if code == 0 {
                    let text = String::from_utf8_lossy(&out.stdout);
                    let value = text.trim().parse().unwrap_or_else(|_| panic!("counter.incr printed {text:?}"));
                    log.acks.push(Ack { request_id, value, started, ended: Instant::now() });
                    break;
                }
                log.failures.push((request_id, code, String::from_utf8_lossy(&out.stderr).trim().to_string()));
                attempt += 1;
                thread::sleep(Duration::from_millis(50));
            }
        }
        log
    })
}

/// The first acknowledgement of an attempt started after `t`: how long after `t` it came.
fn first_ack_after(logs: &[&ClientLog], t: Instant) -> Option<Duration> {
    logs.iter().flat_map(|l| &l.acks).filter(|a| a.started > t).map(|a| a.ended - t).min()
}

/// Five replicas, five `counter.incr` loops (one per replica); SIGKILL of
/// the replica that owns the token, its restart, then a SIGSTOP/SIGCONT
/// pause of the owner. Afterwards `counter.get` equals the number of
/// acknowledged increments and their values are exactly 1..=n (none
/// returned twice, none lost). The repair time (kill → the first increment
/// acknowledged of those sent after it) is printed.
#[test]
fn acknowledged_increments_survive_sigkill_restart_and_pause_of_the_token_owner() {
    let _serial = serial();
    let mut c = Cluster::start("ringd", 5, TIMING).unwrap();
    assert!(wait_until(Duration::from_secs(20), || ring_is(&c, &all(5), 5)), "{}", logs(&c, &all(5)));

    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> = all(5).into_iter().map(|id| incr_loop(&c, id, "c", stop.clone())).collect();

    // Progress: the counter through any live replica (a read is a token service).
    let counter = |c: &Cluster, id: u32| -> Option<i64> {
        let (code, out, _) = ftctl(c, id, &["exec", "--timeout", "5s", "counter.get", "c"]);
        (code == 0).then(|| out.trim().parse().ok()).flatten()
    };
    let rises = |c: &Cluster, via: u32, by: i64, within: Duration| -> bool {
        let Some(before) = counter(c, via) else { return false };
        wait_until(within, || counter(c, via).is_some_and(|now| now >= before + by))
    };
    assert!(rises(&c, 1, 20, Duration::from_secs(30)), "no progress before the faults\n{}", logs(&c, &all(5)));

    // SIGKILL the owner (as its status says; it may have passed the token on since).
    let mut victim = None;
    wait_until(Duration::from_secs(10), || {
        victim = owners(&c, &all(5)).first().copied();
        victim.is_some()
    });
    let victim = victim.expect("no replica said it owns the token");
    let killed = Instant::now();
    c.kill(victim);
    let survivors: Vec<u32> = all(5).into_iter().filter(|&id| id != victim).collect();
    let ring_after_kill = wait_until(Duration::from_secs(20), || ring_is(&c, &survivors, 4));
    let kill_to_ring = killed.elapsed();
    let repaired = rises(&c, survivors[0], 10, Duration::from_secs(30));
    thread::sleep(Duration::from_millis(300));
    c.restart(victim).unwrap();
    let restarted = Instant::now();
    let rejoined = wait_until(Duration::from_secs(20), || ring_is(&c, &all(5), 5));
    let rejoin_took = restarted.elapsed();
    let after_restart = rises(&c, victim, 10, Duration::from_secs(30));

    // SIGSTOP the owner until the others have cut it out (plus one
    // suspect_after), then SIGCONT: it must learn it was excluded and rejoin.
    let mut paused = None;
    wait_until(Duration::from_secs(10), || {
        paused = owners(&c, &all(5)).first().copied();
        paused.is_some()
    });
    let paused = paused.expect("no replica said it owns the token after the restart");
    let others: Vec<u32> = all(5).into_iter().filter(|&id| id != paused).collect();
    let pid = c.pid(paused).expect("running");
    let stopped = Instant::now();
    signal(pid, "STOP");
    let cut_out = wait_until(Duration::from_secs(5), || ring_is(&c, &others, 4));
    let pause_detected = stopped.elapsed();
    thread::sleep(Duration::from_millis(100));
    signal(pid, "CONT");
    let resumed = Instant::now();
    let ring_after_pause = wait_until(Duration::from_secs(20), || ring_is(&c, &all(5), 5));
    let pause_to_ring = resumed.elapsed();
    let after_pause = rises(&c, paused, 10, Duration::from_secs(30));

    stop.store(true, Ordering::Relaxed);
    let client_logs: Vec<ClientLog> = loops.into_iter().map(|h| h.join().expect("client loop")).collect();
    let final_value = counter(&c, 1);

    let summary: String = client_logs
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let codes: BTreeMap<i32, usize> = l.failures.iter().fold(BTreeMap::new(), |mut m, (_, code, _)| {
                *m.entry(*code).or_default() += 1;
                m
            });
            let last_failures: Vec<_> = l.failures.iter().rev().take(3).collect();
            format!(
                "c{}: {} acks, failures by code {codes:?}, unresolved {:?}, last failures {last_failures:?}\n",
                i + 1,
                l.acks.len(),
                l.unresolved
            )
        })
        .collect();
    let diag = || format!("killed {victim}, paused {paused}\n{summary}\n{}", logs(&c, &all(5)));
    eprint!("{summary}");
    assert!(repaired, "no increment after SIGKILL of {victim}\n{}", diag());
    assert!(ring_after_kill, "the survivors never formed a ring of 4\n{}", diag());
    assert!(rejoined, "{victim} never rejoined\n{}", diag());
    assert!(after_restart, "no increment through the restarted {victim}\n{}", diag());
    assert!(cut_out, "the others never cut out the paused {paused}\n{}", diag());
    assert!(after_pause, "no increment through {paused} after its pause\n{}", diag());
    assert!(ring_after_pause, "the ring did not re-form after the pause of {paused}\n{}", diag());
    assert!(client_logs.iter().all(|l| l.unresolved.is_none()), "a request was never acknowledged\n{}", diag());

    // The invariant: every applied increment acknowledged once, none lost.
    let mut values: Vec<i64> = client_logs.iter().flat_map(|l| l.acks.iter().map(|a| a.value)).collect();
    let n = values.len() as i64;
    values.sort_unstable();
    let repeated: Vec<_> = values.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
    assert!(repeated.is_empty(), "values acknowledged twice: {repeated:?}\n{}", diag());
    assert_eq!(final_value, Some(n), "counter.get vs {n} acknowledged increments\n{}", diag());
    assert_eq!(values, (1..=n).collect::<Vec<_>>(), "acknowledged values are not 1..={n}\n{}", diag());
    let ids: std::collections::BTreeSet<u64> =
        client_logs.iter().flat_map(|l| l.acks.iter().map(|a| a.request_id)).collect();
    assert_eq!(ids.len() as i64, n, "a request acknowledged twice\n{}", diag());

    // The names interfaces.md gives and the ones ringd has used: either counts.
    let regenerations = sum_metric(&c, &all(5), "ringd_token_regenerations_total");
    let recoveries = sum_metric(&c, &all(5), "ringd_recoveries_total");
    let refs: Vec<&ClientLog> = client_logs.iter().collect();
    let repair = first_ack_after(&refs, killed);
    let pause_repair = first_ack_after(&refs, stopped);
    eprintln!(
        "ringd repair: SIGKILL of owner {victim} -> first increment acknowledged (of those sent after the kill) \
         {repair:?}, -> every survivor's ring is 4 {kill_to_ring:?}; restart -> ring of 5 {rejoin_took:?}; \
         SIGSTOP of {paused} -> the others' ring is 4 {pause_detected:?}, -> first increment acknowledged \
         {pause_repair:?}; SIGCONT 100 ms later -> ring of 5 {pause_to_ring:?}; {n} increments acknowledged; \
         {regenerations} regenerations, {recoveries} ring recoveries (heartbeat {HEARTBEAT_MS} ms, suspect_after \
         100 ms, token lost after ≈500 ms)"
    );
}

/// A shared state filled up (250-byte `kv.put` values, past ringd's 16 KiB
/// state bound): every put acknowledged is still there after a single
/// SIGKILL (of the replica the puts went through). A put the token cannot
/// carry is refused (exit 64), not acknowledged.
#[test]
fn acknowledged_puts_of_a_large_state_survive_a_single_sigkill() {
    let _serial = serial();
    let mut c = Cluster::start("ringd", 3, TIMING).unwrap();
    assert!(wait_until(Duration::from_secs(20), || ring_is(&c, &all(3), 3)), "{}", logs(&c, &all(3)));
    let value = "x".repeat(250);
    let on1 = c.node(1).client.to_string();
    let mut acked = Vec::new();
    let mut refused = Vec::new();
    for k in 1..=80 {
        let key = format!("k{k}");
        let (code, out, err) = ftctl(&c, 1, &["exec", "--on", &on1, "--timeout", "10s", "kv.put", &key, &value]);
        match code {
            0 => acked.push(key),
            64 => refused.push(key),
            _ => panic!("kv.put {key}: exit {code}: {out}{err}\n{}", logs(&c, &all(3))),
        }
    }
    // 16 KiB of state holds about 60 such puts: the rest are refused.
    assert!(acked.len() >= 50 && !refused.is_empty(), "acked {} refused {}", acked.len(), refused.len());
    c.kill(1);
    let on2 = c.node(2).client.to_string();
    let lost: Vec<&String> = acked
        .iter()
        .filter(|key| {
            let (code, out, _) = ftctl(&c, 2, &["exec", "--on", &on2, "--timeout", "10s", "kv.get", key]);
            (code, out.trim()) != (0, value.as_str())
        })
        .collect();
    let frames_dropped = logs(&c, &all(3)).matches("cannot be framed").count();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged puts lost after SIGKILL of replica 1 ({} refused; {frames_dropped} frames dropped as \
         too large): {lost:?}\n{}",
        lost.len(),
        acked.len(),
        refused.len(),
        logs(&c, &all(3))
    );
}

/// Three `sleep` services on replica 2: lookups, through 2 itself and
/// through the others, never name it while they run. Then the latency of
/// 200 lookups over one connection, next to the heartbeat period and a
/// loopback TCP round trip (figures, not asserted).
#[test]
fn lookups_avoid_a_replica_busy_with_sleep_services() {
    let _serial = serial();
    let c = Cluster::start("ringd", 5, TIMING).unwrap();
    assert!(wait_until(Duration::from_secs(20), || ring_is(&c, &all(5), 5)), "{}", logs(&c, &all(5)));

    let on2 = c.node(2).client.to_string();
    let sleepers: Vec<Child> = (0..3)
        .map(|_| {
            Command::new(bin("ftctl").unwrap())
                .args(["--addr", &on2, "exec", "--on", &on2, "sleep", "5000"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let sleeping_since = Instant::now();
    assert!(
        wait_until(Duration::from_secs(3), || detail_of(&c, 2, "load").as_deref() == Some("3")),
        "replica 2's load never reached 3: {:?}",
        status(&c, 2)
    );
    let mut named = Vec::new();
    for round in 0..3 {
        for via in all(5) {
            let (code, out, err) = ftctl(&c, via, &["--json", "lookup"]);
            assert_eq!(code, 0, "lookup {round} through {via}: {err}");
            named.push((via, out.trim().to_string()));
        }
    }
    let within = sleeping_since.elapsed();
    assert!(within < Duration::from_millis(4500), "the lookups took {within:?}: the sleeps may have ended");
    assert_eq!(detail_of(&c, 2, "load").as_deref(), Some("3"), "the sleeps ended during the lookups");
    let bad: Vec<_> = named.iter().filter(|(_, out)| out.starts_with("{\"replica\":2,")).collect();
    assert!(bad.is_empty(), "lookups named the busy replica 2: {bad:?}\n{}", logs(&c, &all(5)));
    for mut s in sleepers {
        let status = s.wait().unwrap();
        assert!(status.success(), "sleep 5000 on replica 2 ended {status:?}");
    }

    // Latency: 200 lookups through replica 1 over one connection.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut took: Vec<f64> = rt.block_on(async {
        let mut rc = client::ring::RingClient::connect(c.node(1).client).await.unwrap();
        let mut took = Vec::new();
        for _ in 0..200 {
            let t = Instant::now();
            rc.look_up(Duration::from_secs(5)).await.unwrap();
            took.push(t.elapsed().as_secs_f64() * 1e3);
        }
        took
    });
    took.sort_by(f64::total_cmp);
    let pct = |p: f64| took[((took.len() - 1) as f64 * p).round() as usize];
    eprintln!(
        "lookup latency, 200 lookups (5 replicas, one lap): p50 {:.3} ms, p99 {:.3} ms; heartbeat {HEARTBEAT_MS} ms; \
         loopback TCP one-way L {:.3} ms",
        pct(0.5),
        pct(0.99),
        loopback_l_ms()
    );
}

/// Half the median round trip of a small message over loopback TCP.
fn loopback_l_ms() -> f64 {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let echo = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 64];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let mut buf = [0u8; 64];
    let mut rtts: Vec<f64> = (0..1000)
        .map(|_| {
            let t = Instant::now();
            s.write_all(&buf).unwrap();
            s.read_exact(&mut buf).unwrap();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    drop(s);
    let _ = echo.join();
    rtts.sort_by(f64::total_cmp);
    rtts[rtts.len() / 2] / 2.0
}

#[test]
fn example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/ringd.example.toml");
    let (code, stdout, stderr) = run_once("ringd", &["--config", path, "--check-config"], &[]).unwrap();
    assert_eq!(code, 0, "{stderr}");
    for key in [
        "token_min_hold_ms = 30",
        "token_lost_after_ms = 0",
        "lookup_timeout_ms = 500",
        "allow_minority = false",
        "max_queue = 1024",
        "workers = 16",
        "needs_token = true",
    ] {
        assert!(stdout.contains(key), "effective config lacks {key}: {stdout}");
    }
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) == Some("Z"),
    }
}

/// ringd.md, Invariants 3, with real processes: a replica runs a
/// `needs_token` command (a `sleep 30` that writes its pid) and its ringd
/// is SIGSTOPped. The command's supervisor kills it at the lease's end
/// although ringd cannot ask it to — well before the other replicas
/// regenerate the token and execute again. The time from SIGSTOP to the
/// command's death and to the next acknowledged increment is printed.
#[test]
fn a_token_command_dies_at_its_lease_end_while_its_ringd_is_stopped() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("hold.pid");
    let extra = format!(
        "{TIMING}[services.hold]\ncommand = [\"sh\", \"-c\", \"echo $$ > {}; exec sleep 30\"]\nneeds_token = true\n\
         timeout_ms = 20000\n",
        pidfile.display()
    );
    let c = Cluster::start("ringd", 3, &extra).unwrap();
    assert!(wait_until(Duration::from_secs(20), || ring_is(&c, &all(3), 3)), "{}", logs(&c, &all(3)));
    let on1 = c.node(1).client.to_string();
    let mut client = Command::new(bin("ftctl").unwrap())
        .args(["exec", "--on", &on1, "--timeout", "30s", "hold"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let read_pid = || std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse::<u32>().ok());
    assert!(wait_until(Duration::from_secs(10), || read_pid().is_some()), "{}", logs(&c, &all(3)));
    let pid = read_pid().unwrap();
    assert!(!process_gone(pid), "the command runs");
    let ringd1 = c.pid(1).expect("ringd 1 runs");
    signal(ringd1, "STOP");
    let stopped = Instant::now();
    let died = wait_until(Duration::from_secs(3), || process_gone(pid));
    let death = stopped.elapsed();
    // The others go on: an increment through replica 2 is acknowledged.
    let on2 = c.node(2).client.to_string();
    let (code, out, err) = ftctl_at(&on2, &["exec", "--on", &on2, "--timeout", "20s", "counter.incr", "after"]);
    let next = stopped.elapsed();
    signal(ringd1, "CONT");
    let _ = client.kill();
    let _ = client.wait();
    assert!(died, "the command (pid {pid}) still runs {death:?} after its ringd was stopped\n{}", logs(&c, &all(3)));
    assert_eq!(code, 0, "{out}{err}\n{}", logs(&c, &all(3)));
    assert!(death < next, "the command died after the next owner executed");
    eprintln!(
        "ringd SIGSTOPped with a token command running: the command died {death:?} later (lease_ms 50), the next \
         increment through another replica was acknowledged {next:?} later"
    );
}
