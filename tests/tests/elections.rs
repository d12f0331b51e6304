//! Elections for applications (issue 40, docs/elections.md) as real
//! processes on loopback, judged from outside: three `ftctl elect web`
//! campaigners on nodes 1–3 of five, each CMD recording (client, start,
//! end, fence) on one clock; an observer on node 4 (`ftctl elect web
//! --observe --watch --json`) whose every line is timestamped as it is read.
//! The leader's daemon is SIGKILLed (and restarted), then SIGSTOPped, then
//! cut off by a partition, then the leader's ftctl itself is SIGSTOPped;
//! raw campaigners disconnect mid-grant; CMDs resign by exiting
//! throughout. Checked: one CMD at a time and fences increasing (the CMDs'
//! own records); every leader the observer printed ran a CMD with that
//! fence and value, and in fence order; the observer saw most leaders; the
//! timings are printed.
//!
//! One cluster at a time (`serial`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use ftcoord_tests::records::*;
use ftcoord_tests::{bin, signal, wait_until, Cluster};
use serde_json::Value;

/// How long each CMD leads (s) before it resigns by exiting.
const HOLD: &str = "0.4";

fn all(n: u32) -> Vec<u32> {
    (1..=n).collect()
}

/// One campaigner: `ftctl --addr <node id> elect web --value VALUE --timeout
/// 30s -- sh -c SCRIPT` again and again until `stop`, each CMD recording as
/// VALUE into `file`; the running ftctl's pid in `pid`. Returns every exit
/// code with its stderr.
fn campaign_loop(
    c: &Cluster,
    id: u32,
    value: String,
    file: PathBuf,
    pid: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<Vec<(i32, String)>> {
    let script = recording_script(&value, &file, HOLD);
    let addr = c.node(id).client.to_string();
    let ftctl = bin("ftctl").unwrap();
    thread::spawn(move || {
        let mut codes = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let child = Command::new(&ftctl)
                .args(["--addr", &addr, "elect", "web", "--value", &value, "--timeout", "30s"])
                .args(["--", "sh", "-c", &script])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start ftctl elect");
            pid.store(child.id(), Ordering::Relaxed);
            let out = child.wait_with_output().expect("wait for ftctl elect");
            pid.store(0, Ordering::Relaxed);
            let code = out.status.code().unwrap_or(-1);
            if code != 0 {
                thread::sleep(Duration::from_millis(100));
            }
            codes.push((code, String::from_utf8_lossy(&out.stderr).trim().to_string()));
        }
        codes
    })
}

/// The observer: `ftctl elect web --observe --watch --json` on node `id`,
/// each line read with the time it was read (ns).
struct Observer {
    child: Child,
    lines: Arc<Mutex<Vec<(u128, String)>>>,
    reader: thread::JoinHandle<()>,
}

impl Observer {
    fn start(c: &Cluster, id: u32) -> Observer {
        let mut child = Command::new(bin("ftctl").unwrap())
            .args(["--addr", &c.node(id).client.to_string(), "elect", "web", "--observe", "--watch", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the observer");
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push((now_ns(), line));
            }
        });
        Observer { child, lines, reader }
    }

    /// Stops it (SIGTERM: exit 0) and returns its lines.
    fn stop(mut self) -> (i32, Vec<(u128, String)>) {
        signal(self.child.id(), "TERM").unwrap();
        let code = self.child.wait().unwrap().code().unwrap_or(-1);
        self.reader.join().unwrap();
        let lines = self.lines.lock().unwrap().clone();
        (code, lines)
    }
}

/// The leader now, as a one-shot observe through node `id` sees it:
/// (node, value, fence).
fn leader(c: &Cluster, id: u32) -> Option<(u32, String, u128)> {
    let out = Command::new(bin("ftctl").unwrap())
        .args(["--addr", &c.node(id).client.to_string(), "elect", "web", "--observe", "--json"])
        .output()
        .ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let l = v.get("leader")?;
    Some((
        u32::try_from(l["node"].as_u64()?).ok()?,
        l["value"].as_str()?.to_string(),
        l["fence"].as_str()?.parse().ok()?,
    ))
}

/// A leader among nodes `among` whose hold began less than 100 ms ago (so
/// that a fault lands well inside it), found within 20 s.
fn fresh_leader(c: &Cluster, file: &Path, among: &[u32]) -> Option<(u32, String, u128)> {
    let mut found = None;
    wait_until(Duration::from_secs(20), || {
        let Some((node, value, fence)) = leader(c, 5) else { return false };
        let holds = parse_holds(&read_lines_so_far(file));
        let fresh =
            holds.iter().any(|h| h.fence == fence && h.end.is_none() && now_ns().saturating_sub(h.start) < 100_000_000);
        if fresh && among.contains(&node) {
            found = Some((node, value, fence));
        }
        found.is_some()
    });
    found
}

/// When the first hold of another client than `value` began after `since` (ns).
fn next_other(file: &Path, value: &str, since: u128, timeout: Duration) -> Option<u128> {
    let mut at = None;
    wait_until(timeout, || {
        at = parse_holds(&read_lines_so_far(file))
            .iter()
            .find(|h| h.client != value && h.start > since)
            .map(|h| h.start);
        at.is_some()
    });
    at
}

#[test]
fn one_leader_at_a_time_through_kills_pauses_and_a_stopped_ftctl_and_observers_see_them_in_order() {
    let _serial = serial();
    // Relayed: every peer link passes a relay that can cut a node off.
    let mut c = Cluster::start_relayed("electd", 5, ELECTD_TIMING).unwrap();
    c.wait_recovered().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");
    let stop = Arc::new(AtomicBool::new(false));
    let values: Vec<String> = (1..=3).map(|i| format!("c{i}")).collect();
    let pids: Vec<Arc<AtomicU32>> = (0..3).map(|_| Arc::new(AtomicU32::new(0))).collect();
    let observer = Observer::start(&c, 4);
    let loops: Vec<_> = (1..=3u32)
        .map(|id| {
            let i = (id - 1) as usize;
            campaign_loop(&c, id, values[i].clone(), file.clone(), pids[i].clone(), stop.clone())
        })
        .collect();
    let served = |since: u128| {
        wait_until(Duration::from_secs(60), || {
            let holds = parse_holds(&read_lines_so_far(&file));
            values.iter().all(|v| holds.iter().any(|h| &h.client == v && h.start > since && h.end.is_some()))
        })
    };
    assert!(served(0), "not every campaigner led:\n{}\n{}", read(&file), logs(&c, &all(5)));

    // 1. SIGKILL of the leader's daemon, then its restart.
    let (kv, kval, kfence) =
        fresh_leader(&c, &file, &[1, 2, 3]).unwrap_or_else(|| panic!("no leader found\n{}", read(&file)));
    let kill_ns = now_ns();
    c.kill(kv);
    let after_kill = next_other(&file, &kval, kill_ns, Duration::from_secs(30));
    c.restart(kv).unwrap();
    assert!(served(now_ns()), "not every campaigner led after the restart:\n{}", read(&file));

    // 2. SIGSTOP of the leader's daemon for 2.5 s.
    let (pv, pval, pfence) =
        fresh_leader(&c, &file, &[1, 2, 3]).unwrap_or_else(|| panic!("no leader found\n{}", read(&file)));
    let pid = c.pid(pv).expect("running");
    let pause_ns = now_ns();
    signal(pid, "STOP").unwrap();
    let after_pause = next_other(&file, &pval, pause_ns, Duration::from_secs(30));
    thread::sleep(Duration::from_millis(2500).saturating_sub(Duration::from_nanos((now_ns() - pause_ns) as u64)));
    signal(pid, "CONT").unwrap();
    assert!(served(now_ns()), "not every campaigner led after the pause:\n{}", read(&file));

    // 3. A partition cutting the leader's node off for 3 s.
    let (xv, xval, xfence) =
        fresh_leader(&c, &file, &[1, 2, 3]).unwrap_or_else(|| panic!("no leader found\n{}", read(&file)));
    let cut_ns = now_ns();
    c.partitions().expect("a relayed cluster").partition(&[xv]);
    let after_cut = next_other(&file, &xval, cut_ns, Duration::from_secs(30));
    thread::sleep(Duration::from_millis(3000).saturating_sub(Duration::from_nanos((now_ns() - cut_ns) as u64)));
    c.partitions().expect("a relayed cluster").heal();
    assert!(served(now_ns()), "not every campaigner led after the partition:\n{}", read(&file));

    // 4. Campaigners that go away mid-grant: one disconnects right after
    // asking, one right after its grant arrives (before any CMD). Neither
    // may keep the election: the campaign loops lead again.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let web = lockservice::LockName::parse("web").unwrap();
        let addr = c.node(5).client;
        let mut quick = client::lock::LockClient::connect(addr).await.unwrap();
        quick.send(client::elect::campaign_request(&web, "raw1", Duration::from_secs(30))).await.unwrap();
        drop(quick);
        let mut raw = client::lock::LockClient::connect(addr).await.unwrap();
        let answer = client::elect::campaign(&mut raw, &web, "raw2", Duration::from_secs(30)).await;
        assert!(matches!(answer, Ok(client::lock::Answer::Granted(_))), "{answer:?}");
        drop(raw);
    });
    assert!(served(now_ns()), "not every campaigner led after raw campaigners went away:\n{}", read(&file));

    // 5. SIGSTOP of the leader's ftctl itself: its supervisor stops CMD at
    // the lease's end, then ends the stopped ftctl, so the leadership moves.
    let (sv, sval, sfence) =
        fresh_leader(&c, &file, &[1, 2, 3]).unwrap_or_else(|| panic!("no leader found\n{}", read(&file)));
    let ftctl_pid = pids[(sv - 1) as usize].load(Ordering::Relaxed);
    assert_ne!(ftctl_pid, 0, "the leader's ftctl is running");
    let stopped_ns = now_ns();
    signal(ftctl_pid, "STOP").unwrap();
    let after_stopped_ftctl = next_other(&file, &sval, stopped_ns, Duration::from_secs(30));
    let _ = signal(ftctl_pid, "CONT");
    assert!(served(now_ns()), "not every campaigner led after the stopped ftctl:\n{}", read(&file));

    let (summary, codes) = stop_loops(&stop, loops);
    // Nobody leads any more: the observer's last line says so.
    let quiet = wait_until(Duration::from_secs(10), || leader(&c, 5).is_none());
    thread::sleep(Duration::from_millis(300));
    let (observer_code, lines) = observer.stop();
    let text = read(&file);
    let holds = parse_holds(&text);
    let diag = format!(
        "{summary}killed node {kv} leading {kfence} ({kval}) at {kill_ns}; paused node {pv} leading {pfence} ({pval}) \
         at {pause_ns}; cut off node {xv} leading {xfence} ({xval}) at {cut_ns}; stopped the ftctl of node {sv} leading {sfence} ({sval}) at {stopped_ns}\nobserver:\n{}\n\
         records:\n{text}\n{}",
        lines.iter().map(|(t, l)| format!("{t} {l}")).collect::<Vec<_>>().join("\n"),
        logs(&c, &all(5))
    );
    assert!(quiet, "someone still leads after the loops stopped\n{diag}");
    assert!(holds.iter().all(|h| h.end.is_some()), "a CMD without an end:\n{diag}");

    // One CMD at a time, fences strictly increasing in order of start.
    check_exclusion_and_fences(&holds, &diag);
    // The stopped ftctl was ended by its supervisor (killed: -1), the others
    // exited with their CMD's status or 69.
    let stopped_runs = &codes[(sv - 1) as usize];
    assert!(
        stopped_runs.iter().any(|(code, err)| *code == -1 && err.contains("stayed stopped after its command ended")),
        "the stopped ftctl was not ended by its supervisor\n{diag}"
    );

    // The observer: every leader it printed led (a CMD with that fence and
    // value ran), in fence order, except the raw campaigner that held a
    // grant without running anything; "no leader" at the end.
    assert_eq!(observer_code, 0, "{diag}");
    let mut last_fence = 0u128;
    let mut seen = Vec::new();
    let mut latencies = Vec::new();
    for (at, line) in &lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}\n{diag}"));
        assert_eq!(v["name"], "web", "{line}\n{diag}");
        let Some(l) = v["leader"].as_object() else { continue };
        let fence: u128 = l["fence"].as_str().and_then(|f| f.parse().ok()).unwrap_or_else(|| panic!("{line}"));
        let value = l["value"].as_str().unwrap_or_default();
        assert!(fence > last_fence, "the observer went back: {fence} after {last_fence}\n{diag}");
        last_fence = fence;
        if value == "raw2" {
            continue;
        }
        let h = holds
            .iter()
            .find(|h| h.fence == fence)
            .unwrap_or_else(|| panic!("observed leader {fence} ({value}) ran no CMD\n{diag}"));
        assert_eq!(h.client, value, "observed leader {fence}'s value\n{diag}");
        seen.push(fence);
        latencies.push(ms(at.abs_diff(h.start)));
    }
    let last = lines.last().map(|(_, l)| l.as_str()).unwrap_or_default();
    assert!(last.contains("\"leader\":null"), "the observer's last line is not `no leader`: {last}\n{diag}");
    assert!(seen.len() * 10 >= holds.len() * 8, "the observer saw {} of {} leaders\n{diag}", seen.len(), holds.len());

    // Resign (CMD exits) → the next CMD starts, over consecutive holds of
    // different campaigners (as the CMDs recorded them).
    let mut handoffs: Vec<f64> = holds
        .windows(2)
        .filter(|w| w[0].client != w[1].client)
        .filter_map(|w| w[0].end.map(|end| ms(w[1].start.saturating_sub(end))))
        .collect();
    let show =
        |t: Option<u128>, from: u128| t.map_or("none within 30 s".to_string(), |t| format!("{:.0} ms", ms(t - from)));
    println!(
        "elections: {} leaders, observer saw {} (|observed − CMD start| median {} ms, max {:.1} ms); resign → next CMD start \
         median {} ms; next leader after SIGKILL of the leader's daemon {}, after SIGSTOP of it {}, after cutting \
         it off {}, after SIGSTOP of the leader's ftctl {}",
        holds.len(),
        seen.len(),
        median(&mut latencies),
        latencies.iter().copied().fold(0.0, f64::max),
        median(&mut handoffs),
        show(after_kill, kill_ns),
        show(after_pause, pause_ns),
        show(after_cut, cut_ns),
        show(after_stopped_ftctl, stopped_ns),
    );
}
