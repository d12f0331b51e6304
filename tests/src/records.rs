//! What the real-process lock tests share: `ftctl lock` loops whose CMDs
//! record `start`/`end` lines (client, fence, `date +%s%N`) into one file,
//! and the checks over those records (mutual exclusion, increasing fences),
//! judged from the clients' own records with one clock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockservice::{LockName, LockReply, LockRequest};

use crate::{bin, wait_until, Cluster};

/// A daemon's status report.
pub type Status = client::StatusReport;

/// ftctl's exit statuses.
pub const LOCK_LOST: i32 = 69;
pub const TIMED_OUT: i32 = 75;

static SERIAL: Mutex<()> = Mutex::new(());

/// One cluster test at a time (a failed test poisons nothing for the others).
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn status(c: &Cluster, id: u32) -> Option<Status> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    rt.block_on(c.status::<LockRequest, LockReply>(id)).ok()
}

pub fn detail(s: &Status, key: &str) -> Option<String> {
    s.details.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// electd's small timings for real-process tests: an election takes a few
/// ms on loopback; the election timeout (and restart window) is 6 laps ×
/// 5 × 10 ms + 100 ms = 400 ms; `grant_ttl_ms` 600 (renewed every 200 ms).
pub const ELECTD_TIMING: &str =
    "hop_timeout_ms = 10\nrequest_timeout_ms = 100\ngrant_ttl_ms = 600\nelection_jitter_ms = 20\n\
                                 [timing]\nheartbeat_ms = 20\nsuspect_after_ms = 100\nlease_ms = 50\n";

/// The coordinator electd node `id` names in its status.
pub fn coordinator_seen_by(c: &Cluster, id: u32) -> Option<String> {
    status(c, id).and_then(|s| detail(&s, "coordinator"))
}

/// Whether every one of `ids` names `who` as the coordinator.
pub fn all_name(c: &Cluster, ids: &[u32], who: u32) -> bool {
    ids.iter().all(|id| coordinator_seen_by(c, *id).as_deref() == Some(&who.to_string()))
}

pub fn has_token(c: &Cluster, id: u32) -> bool {
    status(c, id).and_then(|s| detail(&s, "has_token")).as_deref() == Some("true")
}

/// Nanoseconds since the epoch, the clock `date +%s%N` reads.
pub fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_nanos()
}

/// `ftctl --addr ADDR lock --timeout TIMEOUT -- sh -c SCRIPT`, quiet on stdout.
pub fn ftctl_lock(c: &Cluster, id: u32, timeout: &str, script: &str) -> Command {
    lock_command(&c.node(id).client.to_string(), None, timeout, script)
}

/// `ftctl --addr ADDR lock [NAME] --timeout T -- sh -c SCRIPT`, stderr
/// captured: what [`ftctl_lock`], [`ftctl_lock_named`] and the client
/// loops run.
fn lock_command(addr: &str, name: Option<&str>, timeout: &str, script: &str) -> Command {
    let mut cmd = Command::new(bin("ftctl").expect("ftctl is built"));
    cmd.args(["--addr", addr, "lock"])
        .args(name)
        .args(["--timeout", timeout, "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// A thread running `ftctl lock [NAME]` with `script` against node `id`
/// again and again until `stop`; returns every exit code with its stderr.
fn lock_loop(
    c: &Cluster,
    id: u32,
    name: Option<String>,
    script: String,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<Vec<(i32, String)>> {
    let addr = c.node(id).client.to_string();
    thread::spawn(move || {
        let mut codes = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let (code, err) = run(lock_command(&addr, name.as_deref(), "30s", &script));
            if code != 0 {
                // The daemon is down or the lock was lost: retry shortly.
                thread::sleep(Duration::from_millis(100));
            }
            codes.push((code, err.trim().to_string()));
        }
        codes
    })
}

/// Runs `cmd` to completion: (exit code, stderr).
pub fn run(mut cmd: Command) -> (i32, String) {
    let out = cmd.output().expect("run ftctl");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A CMD that appends `start C FENCE NS`, sleeps `sleep` seconds (none if
/// empty), then appends `end C FENCE NS` to `file`. Stopped early by
/// ftctl's SIGTERM (its lease is running out, or the lock was lost), it
/// appends its `end` then, so the records show when it really stopped (the
/// sleep runs in the background and `wait` returns on the signal). Each
/// line is one O_APPEND write far below PIPE_BUF, so lines never
/// interleave.
pub fn recording_script(client: &str, file: &Path, sleep: &str) -> String {
    let f = file.display();
    let pause = if sleep.is_empty() { String::new() } else { format!("sleep {sleep} & wait $!; ") };
    format!(
        "rec() {{ echo \"$1 {client} $FTCOORD_FENCE $(date +%s%N)\" >> '{f}'; }}; \
         trap 'trap \"\" TERM; rec end; exit 143' TERM; rec start; {pause}trap '' TERM; rec end"
    )
}

/// One grant as its CMD recorded it (`start`/`end`: ns since the epoch,
/// `date +%s%N`).
pub use ftlab::workload::Hold;

/// The holds in a record file, in order of start time.
pub fn parse_holds(text: &str) -> Vec<Hold> {
    let mut holds: Vec<Hold> = Vec::new();
    let mut open: BTreeMap<(String, u128), usize> = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [kind, client, fence, ts] = parts[..] else { panic!("malformed record line {line:?}") };
        let fence: u128 = fence.parse().unwrap_or_else(|_| panic!("bad fence in {line:?}"));
        let ts: u128 = ts.parse().unwrap_or_else(|_| panic!("bad timestamp in {line:?}"));
        match kind {
            "start" => {
                let key = (client.to_string(), fence);
                assert!(!open.contains_key(&key), "fence {fence} granted twice to {client}: {line:?}");
                open.insert(key, holds.len());
                holds.push(Hold {
                    client: client.to_string(),
                    lock: LockName::unnamed(),
                    fence,
                    asked: None,
                    start: ts,
                    end: None,
                });
            }
            "end" => {
                let i =
                    *open.get(&(client.to_string(), fence)).unwrap_or_else(|| panic!("end without start: {line:?}"));
                assert!(holds[i].end.is_none(), "two ends for one hold: {line:?}");
                assert!(ts >= holds[i].start, "end before start: {line:?}");
                holds[i].end = Some(ts);
            }
            _ => panic!("malformed record line {line:?}"),
        }
    }
    holds.sort_by_key(|h| h.start);
    holds
}

/// Mutual exclusion over the complete holds, and fences strictly increasing
/// in order of start time over all of them (ftlab's check, which `ftlab
/// demo` and `ftlab chaos` apply to their own clients).
pub fn check_exclusion_and_fences(holds: &[Hold], diag: &str) {
    if let Err(e) = ftlab::workload::check_exclusion_and_fences(holds) {
        panic!("{e}\n{diag}");
    }
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The complete lines of a record file that writers may be appending to
/// (a read can catch the last write half done).
pub fn read_lines_so_far(path: &Path) -> String {
    let mut text = read(path);
    text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
    text
}

/// A thread running `ftctl lock` against node `id` again and again until
/// `stop`, each CMD recording into `file`; returns every exit code.
pub fn client_loop(
    c: &Cluster,
    id: u32,
    name: String,
    file: PathBuf,
    sleep: &'static str,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<Vec<(i32, String)>> {
    lock_loop(c, id, None, recording_script(&name, &file, sleep), stop)
}

/// The sum over nodes `ids` of every sample whose name starts with `prefix`.
pub use ftlab::probe::sum_samples as sum_metric;

pub fn logs(c: &Cluster, ids: &[u32]) -> String {
    ids.iter().map(|&id| format!("---- node {id} ----\n{}\n", c.log(id))).collect()
}

pub fn ms(ns: u128) -> f64 {
    ns as f64 / 1e6
}

/// The median of `v` in ms with two decimals, or "-" when empty.
pub fn median(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).map_or_else(|| "-".to_string(), |m| format!("{m:.2}"))
}

/// Holds of client `c{id}` that completed and started after `since` (ns).
pub fn holds_since(holds: &[Hold], id: u32, since: u128) -> usize {
    holds.iter().filter(|h| h.client == format!("c{id}") && h.end.is_some() && h.start > since).count()
}

/// Waits until each of `ids`' clients completed `k` holds after `since`.
pub fn wait_holds(file: &Path, ids: &[u32], k: usize, since: u128, timeout: Duration) -> bool {
    wait_until(timeout, || {
        let holds = parse_holds(&read_lines_so_far(file));
        ids.iter().all(|id| holds_since(&holds, *id, since) >= k)
    })
}

/// The node whose client is inside its critical section (the last record
/// is its `start`) while its daemon holds the token.
pub fn catch_holder(c: &Cluster, file: &Path) -> Option<u32> {
    catch_holder_by(c, file, &has_token)
}

/// Stops the loops; a summary of every client's exit codes, and the codes.
pub fn stop_loops(
    stop: &AtomicBool,
    loops: Vec<thread::JoinHandle<Vec<(i32, String)>>>,
) -> (String, Vec<Vec<(i32, String)>>) {
    stop.store(true, Ordering::Relaxed);
    let codes: Vec<Vec<(i32, String)>> = loops.into_iter().map(|h| h.join().expect("client loop")).collect();
    let mut summary = String::new();
    for (i, codes) in codes.iter().enumerate() {
        let bad: Vec<_> = codes.iter().filter(|(code, _)| *code != 0).collect();
        summary += &format!("c{}: {} runs, {} not 0: {bad:?}\n", i + 1, codes.len(), bad.len());
    }
    (summary, codes)
}

/// Issue 14's scenario against a running cluster of five lock daemons: one
/// `ftctl lock` loop per node holding `hold` seconds each (issue 14: about
/// 1 s); the daemon of the node whose client holds (`is_holder` confirms
/// it) is paused (SIGSTOP) 100 ms into the hold, for 3 s. The others recover and grant — but only
/// after the paused side's CMD has stopped: ftctl sends it SIGTERM
/// `kill_grace` before its lease ends and SIGKILL at the end, and no other
/// node can grant before then (reliability.md, Pauses and leases). Judged
/// from the clients' own records (CMD records its end when SIGTERMed): no
/// overlap, fences increasing, someone served during the pause, every
/// client served again after it, the paused side's ftctl exits 69. Prints
/// the timings.
pub fn paused_holder_scenario(c: &Cluster, hold: &'static str, is_holder: impl Fn(&Cluster, u32) -> bool) {
    cut_off_holder_scenario(c, hold, is_holder, CutOff::Pause);
}

/// How the holder's daemon is cut off for 3 s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutOff {
    /// SIGSTOP, then SIGCONT.
    Pause,
    /// A partition of it from every other node (the cluster must have
    /// been started relayed: `Cluster::start_relayed`), then the heal.
    Partition,
}

/// [`paused_holder_scenario`], the holder's daemon cut off as `how` says
/// (issue 14 asks for a pause and a partition).
pub fn cut_off_holder_scenario(
    c: &Cluster,
    hold: &'static str,
    is_holder: impl Fn(&Cluster, u32) -> bool,
    how: CutOff,
) {
    let ids: Vec<u32> = (1..=5).collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holds.log");
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> =
        ids.iter().map(|&id| client_loop(c, id, format!("c{id}"), file.clone(), hold, stop.clone())).collect();
    let warm = wait_holds(&file, &ids, 1, 0, Duration::from_secs(60));
    assert!(warm, "not every client got a hold before the pause:\n{}\n{}", read(&file), logs(c, &ids));
    let victim = catch_holder_by(c, &file, &is_holder).expect("never caught a holder inside its critical section");
    thread::sleep(Duration::from_millis(100));
    let pid = c.pid(victim).expect("the holder runs");
    let paused_ns = now_ns();
    match how {
        CutOff::Pause => crate::signal(pid, "STOP").unwrap(),
        CutOff::Partition => c.partitions().expect("a relayed cluster").partition(&[victim]),
    }
    thread::sleep(Duration::from_secs(3));
    match how {
        CutOff::Pause => crate::signal(pid, "CONT").unwrap(),
        CutOff::Partition => c.partitions().expect("a relayed cluster").heal(),
    }
    let resumed_ns = now_ns();
    let recovered = wait_holds(&file, &ids, 1, resumed_ns, Duration::from_secs(60));
    let (summary, codes) = stop_loops(&stop, loops);
    let text = read(&file);
    let all = format!(
        "{summary}paused node {victim} at {paused_ns}, resumed at {resumed_ns}\nrecords:\n{text}\n{}",
        logs(c, &ids)
    );
    assert!(recovered, "not every client got a hold after the pause of node {victim}:\n{all}");
    let holds = parse_holds(&text);
    assert!(holds.iter().all(|h| h.end.is_some()), "a hold without an end:\n{all}");
    check_exclusion_and_fences(&holds, &all);
    let me = format!("c{victim}");
    // Someone else was served after the cut (during it, for the TCP
    // daemons; tokenwatchd's regeneration can take longer than 3 s).
    let next = holds
        .iter()
        .find(|h| h.start > paused_ns && h.client != me)
        .unwrap_or_else(|| panic!("nobody else was served after node {victim} was cut off:\n{all}"));
    let victim_codes = &codes[victim as usize - 1];
    assert!(victim_codes.iter().any(|(code, _)| *code == LOCK_LOST), "{me}: {victim_codes:?}\n{all}");
    let cut = holds
        .iter()
        .find(|h| h.client == me && h.start < paused_ns && h.end.is_some_and(|e| e > paused_ns))
        .unwrap_or_else(|| panic!("no hold of {me} across the pause:\n{all}"));
    let cut_end = cut.end.expect("ended");
    eprintln!(
        "{} ({how:?}): cut off node {victim} 100 ms into a {hold} s hold: its CMD stopped {:.1} ms after the \
         cut; the next grant ({}) started {:.1} ms after the cut, {:.1} ms after that CMD ended",
        c.daemon(),
        ms(cut_end - paused_ns),
        next.client,
        ms(next.start - paused_ns),
        ms(next.start - cut_end),
    );
}

/// The node whose client is inside its critical section (the last record
/// is its `start`), confirmed by `is_holder`.
pub fn catch_holder_by(c: &Cluster, file: &Path, is_holder: &impl Fn(&Cluster, u32) -> bool) -> Option<u32> {
    let mut holder = None;
    wait_until(Duration::from_secs(20), || {
        let text = read_lines_so_far(file);
        let Some(last) = text.lines().last() else { return false };
        let parts: Vec<&str> = last.split_whitespace().collect();
        if parts.first() != Some(&"start") {
            return false;
        }
        let id: u32 = parts[1][1..].parse().expect("client name cN");
        holder = Some(id).filter(|id| is_holder(c, *id));
        holder.is_some()
    });
    holder
}

// ---- Named locks (issue 39): the same records with the lock's name ----

/// [`recording_script`] for a named lock: each line also carries the
/// lock's name as CMD saw it in `FTCOORD_LOCK_NAME`, `start NAME C FENCE
/// NS` (a name is 1–128 bytes of `[A-Za-z0-9._/-]`: one word; an empty one
/// makes the line malformed for [`parse_named_holds`]).
pub fn named_recording_script(client: &str, file: &Path, sleep: &str) -> String {
    let f = file.display();
    let pause = if sleep.is_empty() { String::new() } else { format!("sleep {sleep} & wait $!; ") };
    format!(
        "rec() {{ echo \"$1 $FTCOORD_LOCK_NAME {client} $FTCOORD_FENCE $(date +%s%N)\" >> '{f}'; }}; \
         trap 'trap \"\" TERM; rec end; exit 143' TERM; rec start; {pause}trap '' TERM; rec end"
    )
}

/// `ftctl --addr ADDR lock NAME --timeout TIMEOUT -- sh -c SCRIPT`, quiet on
/// stdout ([`ftctl_lock`] for a named lock).
pub fn ftctl_lock_named(c: &Cluster, id: u32, name: &str, timeout: &str, script: &str) -> Command {
    lock_command(&c.node(id).client.to_string(), Some(name), timeout, script)
}

/// [`client_loop`] for lock `name`: `ftctl lock NAME` against node `id`
/// again and again until `stop`, each CMD recording as `client` into
/// `file` ([`named_recording_script`]); returns every exit code with its
/// stderr.
pub fn named_client_loop(
    c: &Cluster,
    id: u32,
    name: String,
    client: String,
    file: PathBuf,
    sleep: &'static str,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<Vec<(i32, String)>> {
    lock_loop(c, id, Some(name), named_recording_script(&client, &file, sleep), stop)
}

/// The holds in a named record file ([`named_recording_script`]), split
/// by lock name, each name's in order of start time ([`parse_holds`] per
/// name).
pub fn parse_named_holds(text: &str) -> BTreeMap<String, Vec<Hold>> {
    let mut per_name: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [kind, name, client, fence, ts] = parts[..] else { panic!("malformed named record line {line:?}") };
        let lines = per_name.entry(name.to_string()).or_default();
        *lines += &format!("{kind} {client} {fence} {ts}\n");
    }
    per_name
        .into_iter()
        .map(|(name, lines)| {
            let lock = LockName::parse(&name).unwrap_or_else(|e| panic!("recorded lock name {name:?}: {e}"));
            let holds = parse_holds(&lines).into_iter().map(|h| Hold { lock: lock.clone(), ..h }).collect();
            (name, holds)
        })
        .collect()
}

/// [`check_exclusion_and_fences`] per lock name: no two complete holds of
/// one name overlap, and each name's fences strictly increase in order of
/// start time. Names are independent: holds of different names may
/// overlap.
pub fn check_named_exclusion_and_fences(by_name: &BTreeMap<String, Vec<Hold>>, diag: &str) {
    for (name, holds) in by_name {
        if let Err(e) = ftlab::workload::check_exclusion_and_fences(holds) {
            panic!("lock `{name}`: {e}\n{diag}");
        }
    }
}

/// The most names held at one moment over the complete holds (each
/// name's holds do not overlap, so open holds are distinct names), and
/// the first moment (ns) it was reached.
pub fn most_names_held_at_once(by_name: &BTreeMap<String, Vec<Hold>>) -> (usize, u128) {
    // Ends sort before starts at the same instant: touching holds are not
    // counted as simultaneous.
    let mut edges: Vec<(u128, i32)> =
        by_name.values().flatten().filter_map(|h| h.end.map(|end| [(h.start, 1), (end, -1)])).flatten().collect();
    edges.sort();
    let (mut open, mut most, mut at) = (0i32, 0i32, 0u128);
    for (t, d) in edges {
        open += d;
        if open > most {
            (most, at) = (open, t);
        }
    }
    (usize::try_from(most).unwrap_or(0), at)
}

/// Complete holds of `client`, of any name, that started after `since`.
pub fn named_holds_since(by_name: &BTreeMap<String, Vec<Hold>>, client: &str, since: u128) -> usize {
    by_name.values().flatten().filter(|h| h.client == client && h.end.is_some() && h.start > since).count()
}

/// Waits until each of `clients` completed `k` holds (of any name) that
/// started after `since`, in a named record file.
pub fn wait_named_holds(file: &Path, clients: &[String], k: usize, since: u128, timeout: Duration) -> bool {
    wait_until(timeout, || {
        let by_name = parse_named_holds(&read_lines_so_far(file));
        clients.iter().all(|c| named_holds_since(&by_name, c, since) >= k)
    })
}
