//! `ftlab drill`: issue 38's failover figures, measured on real processes
//! at the default settings (N = 5, loopback), one lock daemon after the
//! other: a new cluster's first grant, SIGKILL of the holder's daemon →
//! the next grant, the killed node restarted → a grant through it, and
//! SIGSTOP of the holder's daemon → the next grant; then the safety checks
//! over every hold the drill's clients recorded.
//!
//! Every time is read from this process's one clock ([`Clock`]); a grant's
//! time is when its client read `Granted`. Nothing here asserts a speed: a
//! target missed is reported on its line, not an error.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Result};
use clap::Args;
use ftlab::probe::{self, all_see_all, detail, is_lock_daemon, poll, status};
use ftlab::workload::{check_exclusion_and_fences, Clock, Hold, Load};
use ftlab::Cluster;

use crate::demo::{build_daemons, keep_or_delete_logs, ms};
use crate::json::J;

#[derive(Args, Debug)]
pub struct DrillArgs {
    /// A lock daemon to drill: ntmutexd, electd or tokenwatchd; repeat for
    /// more (default: all three, in that order). ringd and hbringd serve
    /// no lock and are refused.
    #[arg(long = "daemon", value_name = "DAEMON", value_parser = parse_lock_daemon)]
    daemons: Vec<String>,
    /// Nodes per cluster.
    #[arg(short = 'n', long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(3..=16))]
    nodes: u32,
    /// Print the table as JSON (the progress still goes to stderr).
    #[arg(long)]
    json: bool,
    /// Do not build the daemons first. Run through cargo (`cargo run -p
    /// ftlab -- drill`), ftlab builds the workspace's binaries (of its own
    /// profile) before it starts, as `ftlab demo` does.
    #[arg(long)]
    no_build: bool,
    /// Keep the clusters' configs and logs when every figure was measured
    /// and the safety checks passed (they are kept anyway otherwise).
    #[arg(long)]
    keep_logs: bool,
}

/// The daemons drilled by default, in order: those that serve the lock.
const LOCK_DAEMONS: [&str; 3] = ["ntmutexd", "electd", "tokenwatchd"];

/// A daemon `--daemon` accepts, or why not: a clap value parser, so that a
/// daemon without the lock is a usage error (exit status 2) that says so.
fn parse_lock_daemon(name: &str) -> std::result::Result<String, String> {
    if is_lock_daemon(name) {
        Ok(name.to_string())
    } else if ftlab::DAEMONS.contains(&name) {
        Err(format!("{name} serves no lock: the drill measures lock grants, so one of {}", LOCK_DAEMONS.join(", ")))
    } else {
        Err(format!("unknown daemon {name}: one of {}", LOCK_DAEMONS.join(", ")))
    }
}

/// How long each wait may take; a figure that has not come by then is
/// "none" (and the exit status is 1).
const WAIT: Duration = Duration::from_secs(60);

/// How long the holder's client means to hold (the fault ends it first).
const LONG_HOLD: Duration = Duration::from_secs(60);

/// How long a client that asks for a figure holds each grant.
const SHORT_HOLD: Duration = Duration::from_millis(10);

/// Tries at pinning the lock on the victim before a fault: tokenwatchd
/// ends every visit `max_hold_ms` (2 s) after the token came, so the hold
/// may end before the waiter is seen asking; then the drill pins again.
const PIN_TRIES: u32 = 3;

/// issue 38: a new cluster's first grant, and a restarted node serving
/// again, within 2 s.
const FIRST_GRANT_TARGET_MS: f64 = 2_000.0;
const RESTART_TARGET_MS: f64 = 2_000.0;

/// The defaults of `[timing]` (crates/runtime's `Timing::default`), which
/// issue 38's SIGSTOP target is made of.
const SUSPECT_AFTER_MS: f64 = 250.0;
const LEASE_MS: f64 = 100.0;

/// issue 38: SIGKILL of the holder's daemon → next grant.
fn kill_target_ms(daemon: &str) -> f64 {
    if daemon == "tokenwatchd" {
        1_000.0
    } else {
        300.0
    }
}

/// issue 38: SIGSTOP of the holder's daemon → next grant, `suspect_after_ms
/// + lease_ms + 100 ms` (450 ms at the defaults).
fn stop_target_ms(daemon: &str) -> f64 {
    if daemon == "tokenwatchd" {
        1_500.0
    } else {
        SUSPECT_AFTER_MS + LEASE_MS + 100.0
    }
}

/// One measured time and its target.
#[derive(Clone, Copy, Debug)]
struct Figure {
    /// None: it never came within [`WAIT`] (or the drill stopped first).
    ms: Option<f64>,
    target_ms: f64,
}

impl Figure {
    fn new(target_ms: f64) -> Figure {
        Figure { ms: None, target_ms }
    }

    /// Above the target, as shown (to the millisecond).
    fn over(&self) -> bool {
        self.ms.is_some_and(|v| v.round() > self.target_ms)
    }

    /// `86 ms (≤ 300)`, `3270 ms (≤ 300) over target`, `none (≤ 300)`.
    fn cell(&self) -> String {
        let value = self.ms.map_or_else(|| "none".to_string(), |v| format!("{v:.0} ms"));
        format!("{value} (≤ {:.0}){}", self.target_ms, if self.over() { " over target" } else { "" })
    }

    fn json(&self) -> J {
        J::obj([("ms", J::opt(self.ms)), ("target_ms", J::from(self.target_ms)), ("over_target", J::from(self.over()))])
    }
}

/// One daemon's line of the table.
#[derive(Debug)]
struct Row {
    daemon: String,
    /// All N started → the first grant through node 1.
    first: Figure,
    /// SIGKILL of the victim → the waiter's grant.
    kill: Figure,
    /// Who was killed and who waited.
    killed: String,
    /// The killed node started again → a grant to a client of it.
    restart: Figure,
    /// SIGSTOP of the victim → the waiter's grant.
    stop: Figure,
    /// Who was stopped and who waited.
    stopped: String,
    /// What the safety checks checked, or what broke (or why the drill
    /// stopped).
    safety: std::result::Result<String, String>,
    /// The cluster's configs and logs.
    dir: PathBuf,
}

impl Row {
    fn new(daemon: &str, dir: PathBuf) -> Row {
        Row {
            daemon: daemon.to_string(),
            first: Figure::new(FIRST_GRANT_TARGET_MS),
            kill: Figure::new(kill_target_ms(daemon)),
            killed: "-".to_string(),
            restart: Figure::new(RESTART_TARGET_MS),
            stop: Figure::new(stop_target_ms(daemon)),
            stopped: "-".to_string(),
            safety: Ok(String::new()),
            dir,
        }
    }

    fn figures(&self) -> [&Figure; 4] {
        [&self.first, &self.kill, &self.restart, &self.stop]
    }

    /// Every figure measured and the safety checks passed (a missed target
    /// does not count).
    fn passed(&self) -> bool {
        self.figures().iter().all(|f| f.ms.is_some()) && self.safety.is_ok()
    }
}

pub fn run(a: DrillArgs) -> Result<ExitCode> {
    if !a.no_build {
        build_daemons("drill")?;
    }
    let mut daemons: Vec<String> = Vec::new();
    for d in if a.daemons.is_empty() { LOCK_DAEMONS.map(String::from).to_vec() } else { a.daemons.clone() } {
        if !daemons.contains(&d) {
            ftlab::bin(&d)?;
            daemons.push(d);
        }
    }
    let root = std::env::temp_dir().join(format!("ftlab-drill-{}", std::process::id()));
    let started = Instant::now();
    eprintln!(
        "ftlab drill: {} nodes of {}, one after the other, default settings; configs and logs under {}",
        a.nodes,
        daemons.join(", "),
        root.display()
    );
    let rows: Vec<Row> = daemons
        .iter()
        .map(|d| {
            let say = |m: String| eprintln!("[{:5.1}s] {d:<12} {m}", started.elapsed().as_secs_f64());
            drill_one(d, a.nodes, root.join(d), &say)
        })
        .collect();
    let passed = rows.iter().all(Row::passed);
    let footer = Footer::now(a.nodes);
    if a.json {
        println!("{}", json(&rows, passed, started.elapsed(), &footer));
    } else {
        print!("{}", table(&rows, &footer));
        println!(
            "{} in {:.1} s",
            if passed {
                "every figure measured, safety checks passed"
            } else {
                "SOME FIGURES MISSING OR CHECKS FAILED"
            },
            started.elapsed().as_secs_f64()
        );
    }
    let failed: Vec<(&str, &Path)> =
        rows.iter().filter(|r| !r.passed()).map(|r| (r.daemon.as_str(), r.dir.as_path())).collect();
    keep_or_delete_logs("drill", &root, a.keep_logs, &failed);
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn drill_one(daemon: &str, n: u32, dir: PathBuf, say: &dyn Fn(String)) -> Row {
    let mut row = Row::new(daemon, dir.clone());
    let mut run = || -> Result<()> {
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = Cluster::configure_in(daemon, n as usize, "", Some(dir.clone()))?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(drill_cluster(&mut c, &mut row, say))
    };
    if let Err(e) = run() {
        say(format!("FAILED: {e:#}"));
        row.safety = Err(format!("{e:#}"));
    }
    row
}

/// The steps of the drill on a configured, not yet started cluster.
async fn drill_cluster(c: &mut Cluster, row: &mut Row, say: &dyn Fn(String)) -> Result<()> {
    let n = c.len() as u32;
    let all: Vec<u32> = (1..=n).collect();
    let clock = Clock::start();
    let mut holds: Vec<Hold> = Vec::new();

    // 1. A new cluster (its first start passes --new-cluster): all N
    // started back to back, a client of node 1 asking at once.
    let started = clock.now();
    for id in 1..=n {
        c.spawn(id)?;
    }
    let (first, mut h) = ask_until_granted(c, 1, started, clock).await;
    holds.append(&mut h);
    row.first.ms = first.map(ms);
    say(format!("{n} nodes started → a grant through node 1: {}", row.first.cell()));
    if first.is_none() {
        bail!("no grant through node 1 within {WAIT:?} of the start");
    }
    settle(c, &all, say).await?;

    // 2. SIGKILL of the holder's daemon (electd: the coordinator's).
    let (victim, who, kill) = fault_then_grant(c, 2, Fault::Kill, clock, say, &mut holds).await?;
    row.killed = who;
    row.kill.ms = kill.map(ms);
    say(format!("SIGKILL node {victim} → the waiter granted: {}", row.kill.cell()));

    // 3. The killed node restarted; a client of it asks at once.
    let restarted = clock.now();
    c.spawn(victim)?;
    let (back, mut h) = ask_until_granted(c, victim, restarted, clock).await;
    holds.append(&mut h);
    row.restart.ms = back.map(ms);
    say(format!("node {victim} restarted → a grant through it: {}", row.restart.cell()));
    settle(c, &all, say).await?;

    // 4. SIGSTOP of the holder's daemon (another node than before, but
    // electd's coordinator): silence only, its connections stay open.
    let pin = lowest_other(1, &[victim]);
    let (paused, who, stop) = fault_then_grant(c, pin, Fault::Stop, clock, say, &mut holds).await?;
    let resumed = tokio::time::Instant::now();
    row.stopped = who;
    row.stop.ms = stop.map(ms);
    say(format!("SIGSTOP node {paused} → the waiter granted: {}; SIGCONT sent", row.stop.cell()));
    match poll(WAIT, || async { all_see_all(c, &all).await.then_some(()) }).await {
        Some(()) => say(format!(
            "every node sees every other up again, {:.1} s after the SIGCONT",
            resumed.elapsed().as_secs_f64()
        )),
        None => say(format!("after SIGCONT, node {paused} was not seen up by every node within {WAIT:?}")),
    }

    // 5. Safety over every hold of the drill's clients.
    row.safety =
        check_exclusion_and_fences(&holds).map(|()| format!("{} grants: no overlap, fences increasing", holds.len()));
    say(match &row.safety {
        Ok(s) => format!("safety: {s}"),
        Err(e) => format!("SAFETY FAILED: {e}"),
    });
    Ok(())
}

/// The lowest node id that is neither `not` nor in `nor` (N ≥ 3, so one
/// of 1, 2, 3 always is).
fn lowest_other(not: u32, nor: &[u32]) -> u32 {
    (1..).find(|id| *id != not && !nor.contains(id)).expect("an id")
}

/// Waits until every node answers and sees every peer up, and every node
/// has its promises, before the next fault.
async fn settle(c: &Cluster, all: &[u32], say: &dyn Fn(String)) -> Result<()> {
    if poll(WAIT, || async { all_see_all(c, all).await.then_some(()) }).await.is_none() {
        bail!("the nodes did not all see one another within {WAIT:?}");
    }
    c.wait_recovered()?;
    say("every node up and recovered".to_string());
    Ok(())
}

/// A client of node `id` asks for the lock, again after every refusal or
/// connection error (the workload's lock client), until it is granted
/// once. Returns the first grant's time after `since` (ns after it), and
/// the client's holds.
async fn ask_until_granted(c: &Cluster, id: u32, since: u128, clock: Clock) -> (Option<u128>, Vec<Hold>) {
    let mut asker = Load::new();
    asker.lock_client(format!("ask{id}"), c.node(id).client, SHORT_HOLD, clock);
    let granted = poll(WAIT, || async { asker.snapshot().first_service_after(since) }).await;
    (granted.map(|t| t - since), asker.stop().await.holds)
}

/// How the victim is taken out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// SIGKILL: the process is gone; its port refuses.
    Kill,
    /// SIGSTOP, then SIGCONT once the figure is in: silence only.
    Stop,
}

/// The name of the client that holds the lock through the victim.
const HOLDER: &str = "holder";

/// The victim (electd: the coordinator; the others: node `pin`, whose
/// token the holder's client pins there) and a waiter (the lowest other
/// node): a client of the victim holds the lock, a client of the waiter
/// asks for it and is seen waiting at its node, then `fault` hits the
/// victim. Returns the victim, who was hit and who waited, and the fault →
/// the waiter's grant (ns); every hold of the clients goes to `holds`. The
/// fault's time is read before the signal is sent, so the figure includes
/// sending it (SIGSTOP: running `kill`, a few ms).
async fn fault_then_grant(
    c: &mut Cluster,
    pin: u32,
    fault: Fault,
    clock: Clock,
    say: &dyn Fn(String),
    holds: &mut Vec<Hold>,
) -> Result<(u32, String, Option<u128>)> {
    let daemon = c.daemon().to_string();
    let (victim, role) = match daemon.as_str() {
        "electd" => probe::critical_node(c, &daemon, WAIT).await.ok_or_else(|| anyhow!("no coordinator known"))?,
        _ => (pin, "token holder"),
    };
    let waiter = lowest_other(victim, &[]);
    let who = format!("node {victim} ({role}, its client holding); waiter on node {waiter}");
    for _ in 0..PIN_TRIES {
        let holder = hold_through(c, victim, clock, holds).await?;
        let mut wait = Load::new();
        wait.lock_client("waiter".into(), c.node(waiter).client, SHORT_HOLD, clock);
        let holding = || holder.snapshot().holding.contains_key(HOLDER);
        // Until the waiter is seen waiting, or the hold has ended.
        let asked = poll(WAIT, || async {
            if !holding() {
                return Some(false);
            }
            waiting_at(c, waiter).await.then_some(true)
        })
        .await;
        if asked != Some(true) || !holding() {
            say(format!(
                "node {victim}'s client no longer held the lock {} node {waiter}'s was seen waiting; again",
                if asked == Some(true) { "once" } else { "before" }
            ));
            holds.append(&mut wait.stop().await.holds);
            holds.append(&mut holder.stop().await.holds);
            continue;
        }
        let at = clock.now();
        let pid = c.pid(victim).ok_or_else(|| anyhow!("node {victim} is not running"))?;
        match fault {
            Fault::Kill => c.kill(victim),
            Fault::Stop => ftlab::signal(pid, "STOP")?,
        }
        let granted = poll(WAIT, || async { wait.snapshot().first_service_after(at) }).await;
        if fault == Fault::Stop {
            ftlab::signal(pid, "CONT")?;
        }
        // The holder's hold has ended: its connection closed (SIGKILL),
        // or its lease ran out with no renewal (SIGSTOP).
        let (waited, held) = (wait.stop().await.holds, holder.stop().await.holds);
        let early = held.iter().any(|h| h.end.is_some_and(|e| e < at)) || waited.iter().any(|h| h.start < at);
        holds.extend(waited.into_iter().chain(held));
        if early {
            bail!(
                "node {victim}'s client's hold ended (or node {waiter}'s was granted) just before the {fault:?}: \
                 no failover to measure"
            );
        }
        return Ok((victim, who, granted.map(|t| t - at)));
    }
    bail!("the lock could not be kept on node {victim} while node {waiter}'s client came to wait ({PIN_TRIES} tries)")
}

/// A client of node `id` granted the lock and holding it for
/// [`LONG_HOLD`]: asked again (after a pause) while an attempt ends
/// without a hold going on, for at most [`WAIT`]. The ended attempts'
/// holds go to `holds`.
async fn hold_through(c: &Cluster, id: u32, clock: Clock, holds: &mut Vec<Hold>) -> Result<Load> {
    let give_up = tokio::time::Instant::now() + WAIT;
    loop {
        let mut holder = Load::new();
        holder.hold_once(HOLDER.into(), c.node(id).client, LONG_HOLD, clock);
        let holding = poll(give_up.saturating_duration_since(tokio::time::Instant::now()), || async {
            let r = holder.snapshot();
            if r.holding.contains_key(HOLDER) {
                Some(true)
            } else {
                (!r.holds.is_empty() || !r.events.is_empty()).then_some(false)
            }
        })
        .await;
        match holding {
            Some(true) => return Ok(holder),
            Some(false) => {
                holds.append(&mut holder.stop().await.holds);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            None => bail!("no client of node {id} was granted the lock within {WAIT:?}"),
        }
    }
}

/// Whether node `id`'s status shows a local client waiting for the lock
/// (`waiting`; ntmutexd: `local_waiting`).
async fn waiting_at(c: &Cluster, id: u32) -> bool {
    status(c, id).await.is_some_and(|s| {
        ["waiting", "local_waiting"].iter().any(|k| detail(&s, k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) > 0)
    })
}

/// Where and how the figures were measured.
#[derive(Debug)]
struct Footer {
    /// N, the nodes per cluster.
    nodes: u32,
    date: String,
    nproc: usize,
    profile: &'static str,
    command: String,
}

impl Footer {
    fn now(nodes: u32) -> Footer {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Footer {
            nodes,
            date: utc_date(secs),
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            profile: if cfg!(debug_assertions) { "debug" } else { "release" },
            command: std::env::args().collect::<Vec<_>>().join(" "),
        }
    }
}

/// The UTC date (`2026-11-29`) `secs` seconds after the Unix epoch.
fn utc_date(secs: u64) -> String {
    // Howard Hinnant's civil_from_days.
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn table(rows: &[Row], footer: &Footer) -> String {
    let line = |cells: [&str; 6]| {
        format!("{:<12} {:<30} {:<30} {:<30} {:<30} {}\n", cells[0], cells[1], cells[2], cells[3], cells[4], cells[5])
    };
    let mut out = "\n".to_string();
    out += &line(["daemon", "first grant", "SIGKILL → grant", "restart → serving", "SIGSTOP → grant", "safety"]);
    for r in rows {
        let safety = match &r.safety {
            Ok(s) => format!("ok: {s}"),
            Err(e) => format!("FAILED: {e}"),
        };
        out += &line([&r.daemon, &r.first.cell(), &r.kill.cell(), &r.restart.cell(), &r.stop.cell(), &safety]);
    }
    out += "\n";
    for r in rows {
        out += &format!("{}: killed {}; stopped {}\n", r.daemon, r.killed, r.stopped);
    }
    out += &format!(
        "\nIn ms, each with issue 38's target. first grant: the first of N = {n} nodes of a new cluster spawned → \
         a client of node 1 granted (it asks at once, again after each refusal). SIGKILL → grant: a client holds \
         the lock through the victim (ntmutexd, tokenwatchd: node 2, whose token it pins; electd: the \
         coordinator), a client of the lowest other node waits; the victim is SIGKILLed → the waiter's grant. \
         restart → serving: the killed node started again → its client granted. SIGSTOP → grant: the same with \
         SIGSTOP (then SIGCONT), target suspect_after_ms + lease_ms + 100 ms (tokenwatchd: 1.5 s). Default \
         settings, loopback. A figure above its target is marked, not failed; none: not within {wait} s. \
         safety: every grant the clients recorded, no two overlapping, fences increasing.\n",
        n = footer.nodes,
        wait = WAIT.as_secs()
    );
    out += &format!("{} · nproc {} · {} build · {}\n", footer.date, footer.nproc, footer.profile, footer.command);
    out
}

fn json(rows: &[Row], passed: bool, took: Duration, footer: &Footer) -> J {
    let rows = rows.iter().map(|r| {
        let (ok, safety) = match &r.safety {
            Ok(s) => (true, s.as_str()),
            Err(e) => (false, e.as_str()),
        };
        J::obj([
            ("daemon", J::s(&r.daemon)),
            ("first_grant", r.first.json()),
            ("kill_to_grant", r.kill.json()),
            ("killed", J::s(&r.killed)),
            ("restart_to_serving", r.restart.json()),
            ("stop_to_grant", r.stop.json()),
            ("stopped", J::s(&r.stopped)),
            ("safety_ok", J::from(ok)),
            ("safety", J::s(safety)),
            ("passed", J::from(r.passed())),
        ])
    });
    J::obj([
        ("passed", J::from(passed)),
        ("seconds", J::from(took.as_secs_f64())),
        ("date", J::s(&footer.date)),
        ("nproc", J::from(footer.nproc)),
        ("profile", J::s(footer.profile)),
        ("command", J::s(&footer.command)),
        ("daemons", J::Arr(rows.collect())),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        drill: DrillArgs,
    }

    #[test]
    fn a_missed_target_is_marked_on_its_line() {
        let f = |ms: Option<f64>, target_ms| Figure { ms, target_ms };
        assert_eq!(f(Some(86.0), 300.0).cell(), "86 ms (≤ 300)");
        assert_eq!(f(Some(300.4), 300.0).cell(), "300 ms (≤ 300)", "shown as 300 ms: on target");
        assert_eq!(f(Some(3270.0), 300.0).cell(), "3270 ms (≤ 300) over target");
        assert_eq!(f(None, 300.0).cell(), "none (≤ 300)");
        let mut row = Row::new("tokenwatchd", PathBuf::new());
        row.first.ms = Some(11_900.0);
        row.kill.ms = Some(900.0);
        row.restart.ms = Some(150.0);
        row.stop.ms = Some(1_600.0);
        let footer =
            Footer { nodes: 5, date: "2026-11-29".into(), nproc: 2, profile: "debug", command: "ftlab drill".into() };
        let t = table(&[row], &footer);
        let line = t.lines().find(|l| l.starts_with("tokenwatchd ")).unwrap();
        assert!(line.contains("11900 ms (≤ 2000) over target"), "{line}");
        assert!(line.contains("900 ms (≤ 1000) "), "tokenwatchd's SIGKILL target is 1 s: {line}");
        assert!(line.contains("150 ms (≤ 2000) "), "{line}");
        assert!(line.contains("1600 ms (≤ 1500) over target"), "{line}");
        assert!(t.contains("2026-11-29 · nproc 2 · debug build · ftlab drill"), "{t}");
        let ntmutexd = Row::new("ntmutexd", PathBuf::new());
        assert_eq!((ntmutexd.kill.target_ms, ntmutexd.stop.target_ms), (300.0, 450.0));
        assert!(!ntmutexd.passed(), "figures never measured");
    }

    #[test]
    fn only_lock_daemons_are_drilled() {
        let a = Cli::try_parse_from(["drill", "--daemon", "electd", "--daemon", "ntmutexd"]).unwrap().drill;
        assert_eq!(a.daemons, ["electd", "ntmutexd"]);
        assert!(Cli::try_parse_from(["drill"]).unwrap().drill.daemons.is_empty(), "the default: all three");
        for d in ["ringd", "hbringd"] {
            let e = Cli::try_parse_from(["drill", "--daemon", d]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
            assert!(
                e.to_string().contains(&format!("{d} serves no lock")) && e.to_string().contains("ntmutexd"),
                "{e}"
            );
        }
        let e = Cli::try_parse_from(["drill", "--daemon", "etcd"]).unwrap_err().to_string();
        assert!(e.contains("unknown daemon etcd"), "{e}");
        assert!(Cli::try_parse_from(["drill", "-n", "2"]).is_err());
    }

    #[test]
    fn dates_are_utc_days() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_795_910_400), "2026-11-29");
    }

    #[test]
    fn the_stop_target_is_made_of_the_timing_defaults() {
        let src =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/runtime/src/config.rs"))
                .unwrap();
        let default = src.split("impl Default for Timing").nth(1).and_then(|s| s.lines().nth(2)).unwrap();
        assert!(
            default.contains(&format!("suspect_after_ms: {SUSPECT_AFTER_MS}"))
                && default.contains(&format!("lease_ms: {LEASE_MS}")),
            "{default}"
        );
    }
}
