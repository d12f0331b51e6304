//! electd's named locks (issue 39, docs/named-locks.md; docs/electd.md,
//! "Coordinator: FIFO access service") as real processes on loopback,
//! judged from outside: ten names, three `ftctl lock NAME` loops each
//! through three different nodes of five, recording (name, start, end,
//! fence) from the clients' side in one file on one clock, across a
//! SIGKILL (and restart) of the coordinator while its client holds and a
//! SIGSTOP of a holder's daemon for longer than the grant lease; then
//! `ftctl locks --json`, invalid names, and `limits.max_locks` against a
//! flood of names.
//!
//! One cluster at a time (`serial`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ftcoord_tests::records::*;
use ftcoord_tests::{bin, signal, wait_until, Cluster};
use serde_json::Value;

/// Small timings ([`ELECTD_TIMING`]).
const TIMING: &str = ELECTD_TIMING;

/// How long a long-hold client's CMD sleeps (s): well past the grant lease,
/// so that a daemon paused early in such a hold loses it while CMD runs.
const LONG_HOLD: &str = "1.5";
/// A hold caught for the SIGKILL or the SIGSTOP started at most this long
/// ago (ns): at least 1.2 s of a long hold is left, more than the 600 ms
/// grant lease.
const FRESH_NS: u128 = 300_000_000;

fn all(n: u32) -> Vec<u32> {
    (1..=n).collect()
}

/// `ftctl --addr <node id> ARGS`: (exit code, stdout, stderr).
fn ftctl(c: &Cluster, id: u32, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin("ftctl").unwrap())
        .args(["--addr", &c.node(id).client.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// `ftctl locks --json` on node `id`, parsed; None if it did not exit 0.
fn locks_json(c: &Cluster, id: u32) -> Option<Value> {
    let (code, out, _) = ftctl(c, id, &["locks", "--json"]);
    (code == 0).then(|| serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("locks --json: {e}: {out}")))
}

/// The row of `name` in a `locks --json` reply.
fn row<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v["locks"].as_array()?.iter().find(|l| l["name"] == name)
}

/// Whether node `id` lists `name` as held by a local client with `fence`.
fn holds_here(c: &Cluster, id: u32, name: &str, fence: u128) -> bool {
    locks_json(c, id)
        .as_ref()
        .and_then(|v| row(v, name))
        .is_some_and(|r| r["held"] == Value::Bool(true) && r["held_fence"].as_str() == Some(fence.to_string().as_str()))
}

/// One `ftctl lock NAME` loop of the main test.
struct Client {
    name: String,
    /// Its records' client field: `n<name index>c<k>`.
    label: String,
    node: u32,
    /// Holds [`LONG_HOLD`] s (else 50 ms).
    long: bool,
}

/// The test's lock names: the first is 128 bytes (the longest allowed),
/// the others use every kind of byte allowed.
fn lock_name(j: usize) -> String {
    if j == 0 {
        format!("n0/{}", "x".repeat(125))
    } else {
        format!("ns{j}/Lock-{j}.v_{j}")
    }
}

/// Sets the client loops' stop flag when dropped (on a failed assertion
/// too: the loops then end instead of hammering a dropped cluster).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// An open hold (CMD recorded its `start`, not yet its `end`) of a
/// long-hold client through one of `nodes`, started less than
/// [`FRESH_NS`] ago, that its node confirms (`ftctl locks --json`: held
/// here with that fence): (index in `clients`, fence, start).
fn catch_fresh_holder(c: &Cluster, file: &Path, clients: &[Client], nodes: &[u32]) -> Option<(usize, u128, u128)> {
    let mut caught = None;
    wait_until(Duration::from_secs(20), || {
        let by_name = parse_named_holds(&read_lines_so_far(file));
        let now = now_ns();
        let open = by_name.values().flatten().filter(|h| h.end.is_none() && now.saturating_sub(h.start) < FRESH_NS);
        for h in open {
            let Some(i) = clients.iter().position(|cl| cl.label == h.client) else { continue };
            let cl = &clients[i];
            if cl.long && nodes.contains(&cl.node) && holds_here(c, cl.node, &cl.name, h.fence) {
                caught = Some((i, h.fence, h.start));
                return true;
            }
        }
        false
    });
    caught
}

/// Issue 39's real-process scenario: five electd, ten names, three
/// `ftctl lock NAME` loops per name through three different nodes (one
/// holding 1.5 s, two 50 ms). The coordinator (5) is SIGKILLed while its
/// client holds a name and restarted; later a consumer's daemon whose
/// client holds a name is SIGSTOPped for 2.5 s (the grant lease is 600
/// ms), then SIGCONTed. Judged from the clients' own records: per name no
/// two holds overlap and fences strictly increase in hold order (the
/// single lock's checker, per name); a fence names its grant cluster-wide
/// (no fence under two names); every name held at least 5 times; at some
/// moment at least 3 names held at once; every client served again after
/// each fault; the paused holder's name served to another node during the
/// pause; both victims' ftctl exit 69.
#[test]
fn ten_names_stay_exclusive_with_rising_fences_across_sigkill_and_sigstop_of_holders() {
    let _serial = serial();
    let began = Instant::now();
    let mut c = Cluster::start("electd", 5, TIMING).unwrap();
    assert!(wait_until(Duration::from_secs(20), || all_name(&c, &all(5), 5)), "{}", logs(&c, &all(5)));
    let clients: Vec<Client> = (0..10)
        .flat_map(|j| {
            (0..3u32).map(move |k| Client {
                name: lock_name(j),
                label: format!("n{j}c{k}"),
                // Three different nodes per name; two long holders per node.
                node: (j as u32 + k) % 5 + 1,
                long: k == 0,
            })
        })
        .collect();
    let labels: Vec<String> = clients.iter().map(|cl| cl.label.clone()).collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(stop.clone());
    let loops: Vec<_> = clients
        .iter()
        .map(|cl| {
            let sleep = if cl.long { LONG_HOLD } else { "0.05" };
            named_client_loop(&c, cl.node, cl.name.clone(), cl.label.clone(), file.clone(), sleep, stop.clone())
        })
        .collect();
    let warm = wait_named_holds(&file, &labels, 1, 0, Duration::from_secs(60));
    assert!(warm, "not every client got a hold:\n{}\n{}", read(&file), logs(&c, &all(5)));
    let warmed = began.elapsed();

    // SIGKILL of the coordinator while its client holds a name, and its restart.
    let (kv, kill_fence, _) = catch_fresh_holder(&c, &file, &clients, &[5])
        .unwrap_or_else(|| panic!("never caught node 5's client holding\n{}", read(&file)));
    let kill_ns = now_ns();
    let killed = Instant::now();
    c.kill(5);
    assert!(
        wait_until(Duration::from_secs(20), || all_name(&c, &all(4), 4)),
        "the survivors never agreed on 4\n{}",
        logs(&c, &all(4))
    );
    let failover = killed.elapsed();
    let survivors: Vec<String> = clients.iter().filter(|cl| cl.node != 5).map(|cl| cl.label.clone()).collect();
    assert!(
        wait_named_holds(&file, &survivors, 1, kill_ns, Duration::from_secs(60)),
        "survivors' clients not served after the failover\n{}\n{}",
        read(&file),
        logs(&c, &all(4))
    );
    let served_after_kill = killed.elapsed();
    c.restart(5).unwrap();
    let restart_ns = now_ns();
    assert!(
        wait_named_holds(&file, &labels, 1, restart_ns, Duration::from_secs(60)),
        "not every client served after node 5's restart\n{}\n{}",
        read(&file),
        logs(&c, &all(5))
    );

    // SIGSTOP of a consumer's daemon whose client holds a name, for 2.5 s.
    let coordinator: u32 = coordinator_seen_by(&c, 1).and_then(|s| s.parse().ok()).expect("a coordinator");
    let consumers: Vec<u32> = all(5).into_iter().filter(|id| *id != coordinator).collect();
    let (pv, pause_fence, _) = catch_fresh_holder(&c, &file, &clients, &consumers)
        .unwrap_or_else(|| panic!("never caught a consumer's client holding\n{}", read(&file)));
    let paused = clients[pv].node;
    let pid = c.pid(paused).expect("running");
    let paused_ns = now_ns();
    signal(pid, "STOP").unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    signal(pid, "CONT").unwrap();
    let resumed_ns = now_ns();
    let resumed = Instant::now();
    let recovered = wait_named_holds(&file, &labels, 1, resumed_ns, Duration::from_secs(60));
    let served_after_pause = resumed.elapsed();

    let (_, codes) = stop_loops(&stop, loops);
    let text = read(&file);
    let mut summary = String::new();
    for (cl, codes) in clients.iter().zip(&codes) {
        let bad: Vec<_> = codes.iter().filter(|(code, _)| *code != 0).collect();
        summary += &format!(
            "{} (`{}` via {}): {} runs, {} not 0: {bad:?}\n",
            cl.label,
            cl.name,
            cl.node,
            codes.len(),
            bad.len()
        );
    }
    let all = format!(
        "{summary}killed node 5 holding fence {kill_fence} ({}) at {kill_ns}, restarted at {restart_ns}; paused node \
         {paused} holding fence {pause_fence} ({}) at {paused_ns}, resumed at {resumed_ns}\nrecords:\n{text}\n{}",
        clients[kv].label,
        clients[pv].label,
        logs(&c, &all(5))
    );
    assert!(recovered, "not every client served after the pause of node {paused}:\n{all}");
    let by_name = parse_named_holds(&text);

    // The names recorded are those asked, each by its own clients.
    let names: BTreeSet<String> = clients.iter().map(|cl| cl.name.clone()).collect();
    assert_eq!(by_name.keys().cloned().collect::<BTreeSet<_>>(), names, "{all}");
    for (name, holds) in &by_name {
        for h in holds {
            let cl = clients.iter().find(|cl| cl.label == h.client).unwrap_or_else(|| panic!("{h:?}\n{all}"));
            assert_eq!(&cl.name, name, "{} asked for `{}`, CMD ran under `{name}`: {h:?}\n{all}", cl.label, cl.name);
        }
    }
    assert!(by_name.values().flatten().all(|h| h.end.is_some()), "a hold without an end:\n{all}");

    // Per name: no overlap, fences strictly increasing in hold order.
    check_named_exclusion_and_fences(&by_name, &all);

    // A fence names its grant cluster-wide: never under two names.
    let mut fence_names: BTreeMap<u128, &str> = BTreeMap::new();
    for (name, holds) in &by_name {
        for h in holds {
            if let Some(other) = fence_names.insert(h.fence, name) {
                assert_eq!(other, name, "fence {} granted under `{other}` and `{name}`\n{all}", h.fence);
            }
        }
    }

    let counts: BTreeMap<&str, usize> = by_name.iter().map(|(n, h)| (n.as_str(), h.len())).collect();
    assert!(counts.values().all(|n| *n >= 5), "a name held fewer than 5 times: {counts:?}\n{all}");
    let (most, at) = most_names_held_at_once(&by_name);
    assert!(most >= 3, "at most {most} names held at once\n{all}");

    // The SIGKILLed holder: its CMD stopped (recorded), ftctl exited 69.
    let kname = &clients[kv].name;
    let khold = by_name[kname].iter().find(|h| h.fence == kill_fence).expect("the killed node's hold");
    assert!(codes[kv].iter().any(|(code, _)| *code == LOCK_LOST), "{}: {:?}\n{all}", clients[kv].label, codes[kv]);
    let knext = by_name[kname].iter().find(|h| h.start > kill_ns).expect("served after the kill");

    // The SIGSTOPped holder: its CMD stopped at its lease's end, ftctl
    // exited 69, and another node's client had the name during the pause.
    let pname = &clients[pv].name;
    let phold = by_name[pname].iter().find(|h| h.fence == pause_fence).expect("the paused node's hold");
    assert!(codes[pv].iter().any(|(code, _)| *code == LOCK_LOST), "{}: {:?}\n{all}", clients[pv].label, codes[pv]);
    let pnext = by_name[pname]
        .iter()
        .find(|h| h.start > paused_ns)
        .unwrap_or_else(|| panic!("`{pname}` never held after the pause of node {paused}\n{all}"));
    assert!(
        pnext.start < resumed_ns && pnext.client != clients[pv].label,
        "`{pname}` not held by another client during the pause of node {paused}: {pnext:?}\n{all}"
    );

    let ms_after = |t: u128, since: u128| ms(t.saturating_sub(since));
    eprintln!(
        "electd named locks: warm in {warmed:?}; {} holds, per name {counts:?}; {most} names held at once at {at}",
        by_name.values().map(Vec::len).sum::<usize>()
    );
    eprintln!(
        "SIGKILL of coordinator 5 holding `{kname}` ({}): its CMD stopped {:.1} ms after; survivors agree on 4 after \
         {failover:?}, every survivor served within {served_after_kill:?}; the name's next grant ({}) {:.1} ms after",
        clients[kv].label,
        ms_after(khold.end.unwrap(), kill_ns),
        knext.client,
        ms_after(knext.start, kill_ns),
    );
    eprintln!(
        "SIGSTOP of node {paused} (coordinator {coordinator}) holding `{pname}` ({}) for 2.5 s: its CMD stopped {:.1} \
         ms after the stop; the name's next grant ({}) {:.1} ms after the stop; every client served {:?} after the \
         SIGCONT; total {:?}",
        clients[pv].label,
        ms_after(phold.end.unwrap(), paused_ns),
        pnext.client,
        ms_after(pnext.start, paused_ns),
        served_after_pause,
        began.elapsed(),
    );
}

/// Spawns `ftctl lock NAME` through node `id`, its CMD recording as
/// `label` and sleeping `sleep` s, stderr piped.
fn spawn_named(c: &Cluster, id: u32, name: &str, label: &str, file: &Path, sleep: &str) -> Child {
    ftctl_lock_named(c, id, name, "20s", &named_recording_script(label, file, sleep)).spawn().unwrap()
}

/// (exit code, stderr) of a spawned ftctl.
fn finish(child: Child) -> (i32, String) {
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The labels of the clients whose CMD recorded a `start`.
fn started(file: &Path) -> BTreeSet<String> {
    parse_named_holds(&read_lines_so_far(file)).values().flatten().map(|h| h.client.clone()).collect()
}

/// The fence of `label`'s (first) hold.
fn fence_of(file: &Path, label: &str) -> u128 {
    parse_named_holds(&read_lines_so_far(file)).values().flatten().find(|h| h.client == label).expect("held").fence
}

/// `ftctl locks --json` lists the names one node's clients hold or wait
/// for (and no other node's), most waiters first, with the fences their
/// CMDs got; invalid names (`'a b'`, empty, 129 bytes, `a*b`, non-ASCII)
/// exit 2 before anything is sent and change nothing; a node with
/// `limits.max_locks = 4` asked for 6 names at once serves 4 and refuses 2
/// (`too many locks`, exit 1, counted), and serves a new name once those
/// ended.
#[test]
fn locks_lists_a_nodes_names_invalid_names_exit_2_and_max_locks_bounds_a_flood() {
    let _serial = serial();
    let began = Instant::now();
    let mut c = Cluster::configure("electd", 3, TIMING).unwrap();
    // Node 1 alone knows at most 4 names at once.
    let path = c.config_path(1);
    let config = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{config}\n[limits]\nmax_locks = 4\n")).unwrap();
    c.start_all().unwrap();
    assert!(wait_until(Duration::from_secs(20), || all_name(&c, &all(3), 3)), "{}", logs(&c, &all(3)));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");

    // Node 3 holds gamma and delta; node 2 holds alpha and beta/x.y_z-1.
    let beta = "beta/x.y_z-1";
    let holders = vec![
        spawn_named(&c, 3, "gamma", "g3", &file, "3"),
        spawn_named(&c, 3, "delta", "d3", &file, "3"),
        spawn_named(&c, 2, "alpha", "a2", &file, "3"),
        spawn_named(&c, 2, beta, "b2", &file, "3"),
    ];
    let want: BTreeSet<String> = ["g3", "d3", "a2", "b2"].map(String::from).into();
    assert!(
        wait_until(Duration::from_secs(20), || started(&file).is_superset(&want)),
        "{}\n{}",
        read(&file),
        logs(&c, &all(3))
    );
    // Node 2's clients also wait for alpha (held there) and gamma (held on 3).
    let waiters = vec![spawn_named(&c, 2, "alpha", "a2w", &file, ""), spawn_named(&c, 2, "gamma", "g2w", &file, "")];
    let mut listed = None;
    let waiting = wait_until(Duration::from_secs(5), || {
        listed = locks_json(&c, 2);
        listed.as_ref().is_some_and(|v| {
            [("alpha", 1), ("gamma", 1)].iter().all(|(n, w)| row(v, n).is_some_and(|r| r["waiters"] == *w))
        })
    });
    let v = listed.expect("ftctl locks --json on node 2");
    assert!(waiting, "node 2 never listed its waiters: {v}\n{}", read(&file));
    let (a2, b2) = (fence_of(&file, "a2").to_string(), fence_of(&file, "b2").to_string());
    assert_eq!((&v["known"], &v["listed"]), (&Value::from(3), &Value::from(3)), "{v}");
    let order: Vec<&str> = v["locks"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(order.len(), 3, "{v}");
    assert_eq!(order[2], beta, "the names with the most waiters first: {v}");
    let alpha = row(&v, "alpha").unwrap();
    assert_eq!(
        (&alpha["held"], alpha["held_fence"].as_str(), alpha["last_fence"].as_str()),
        (&Value::Bool(true), Some(a2.as_str()), Some(a2.as_str())),
        "{v}"
    );
    let b = row(&v, beta).unwrap();
    assert_eq!(
        (&b["held"], b["held_fence"].as_str(), &b["waiters"]),
        (&Value::Bool(true), Some(b2.as_str()), &Value::from(0)),
        "{v}"
    );
    let gamma = row(&v, "gamma").unwrap();
    assert_eq!(
        (&gamma["held"], &gamma["held_fence"], &gamma["last_fence"]),
        (&Value::Bool(false), &Value::Null, &Value::Null),
        "{v}"
    );
    assert!(row(&v, "delta").is_none(), "node 2 lists node 3's delta: {v}");
    let v3 = locks_json(&c, 3).expect("ftctl locks --json on node 3");
    assert_eq!(&v3["known"], &Value::from(2), "{v3}");
    for (name, label) in [("gamma", "g3"), ("delta", "d3")] {
        let r = row(&v3, name).unwrap_or_else(|| panic!("{v3}"));
        assert_eq!(r["held_fence"].as_str(), Some(fence_of(&file, label).to_string().as_str()), "{v3}");
    }
    let (code, out, err) = ftctl(&c, 2, &["locks"]);
    assert_eq!((code, out.lines().last()), (0, Some("3 locks known")), "{out}{err}");

    // Invalid names: exit 2, CMD not run, nothing sent.
    let marker = dir.path().join("ran");
    let touch = format!("echo ran >> '{}'", marker.display());
    let long = "y".repeat(129);
    for name in ["a b", "", long.as_str(), "a*b", "caf\u{e9}"] {
        let (code, _, err) = ftctl(&c, 2, &["lock", name, "--timeout", "1s", "--", "sh", "-c", &touch]);
        assert_eq!(code, 2, "ftctl lock {name:?}: {err}");
        assert!(err.contains("invalid lock name"), "ftctl lock {name:?}: {err}");
    }
    assert!(!marker.exists(), "CMD ran under an invalid name");
    assert_eq!(c.metric(2, "electd_lock_requests_refused_total{reason=\"bad_name\"}"), Some(0.0));
    let after = locks_json(&c, 2).expect("locks on node 2");
    assert_eq!(after["known"], Value::from(3), "{after}");

    for (i, child) in holders.into_iter().chain(waiters).enumerate() {
        let (code, err) = finish(child);
        assert_eq!(code, 0, "client {i}: {err}\n{}\n{}", read(&file), logs(&c, &all(3)));
    }
    let (code, _, err) = ftctl(&c, 2, &["lock", "after-invalid", "--timeout", "5s", "--", "true"]);
    assert_eq!(code, 0, "{err}");
    assert!(all_name(&c, &all(3), 3), "{}", logs(&c, &all(3)));
    let by_name = parse_named_holds(&read(&file));
    check_named_exclusion_and_fences(&by_name, &read(&file));
    let ordered = |name: &str, first: &str, then: &str| {
        let h = &by_name[name];
        h.len() == 2 && h[0].client == first && h[1].client == then
    };
    assert!(ordered("alpha", "a2", "a2w") && ordered("gamma", "g3", "g2w"), "{}", read(&file));
    let listing_done = began.elapsed();

    // A flood of 6 names at once through node 1 (max_locks = 4).
    let flood_file = dir.path().join("flood.log");
    let flood: Vec<Child> =
        (0..6).map(|i| spawn_named(&c, 1, &format!("flood-{i}"), &format!("f{i}"), &flood_file, "4")).collect();
    assert!(
        wait_until(Duration::from_secs(20), || started(&flood_file).len() == 4),
        "{}\n{}",
        read(&flood_file),
        logs(&c, &all(3))
    );
    let v1 = locks_json(&c, 1).expect("locks on node 1");
    let held = v1["locks"].as_array().unwrap().iter().filter(|r| r["held"] == Value::Bool(true)).count();
    assert_eq!((&v1["known"], held), (&Value::from(4), 4), "{v1}");
    let outcomes: Vec<(i32, String)> = flood.into_iter().map(finish).collect();
    let served = outcomes.iter().filter(|(code, _)| *code == 0).count();
    let refused = outcomes.iter().filter(|(code, err)| *code == 1 && err.contains("too many locks")).count();
    assert_eq!((served, refused), (4, 2), "{outcomes:?}\n{}", read(&flood_file));
    let flood_holds = parse_named_holds(&read(&flood_file));
    assert_eq!(flood_holds.len(), 4, "{flood_holds:?}");
    assert!(flood_holds.values().flatten().all(|h| h.end.is_some()), "{flood_holds:?}");
    assert_eq!(c.metric(1, "electd_lock_requests_refused_total{reason=\"too_many_locks\"}"), Some(2.0));
    // Those ended: node 1 knows nothing, and serves a new name.
    let mut known = None;
    let forgot = wait_until(Duration::from_secs(5), || {
        known = locks_json(&c, 1).map(|v| v["known"].clone());
        known == Some(Value::from(0))
    });
    assert!(forgot, "node 1 still knows names: {known:?}");
    let (code, err) = finish(spawn_named(&c, 1, "flood-after", "fa", &flood_file, ""));
    assert_eq!(code, 0, "{err}\n{}", logs(&c, &all(3)));
    assert!(started(&flood_file).contains("fa"), "{}", read(&flood_file));
    eprintln!("locks listing and invalid names: {listing_done:?}; with the flood: {:?}", began.elapsed());
}
