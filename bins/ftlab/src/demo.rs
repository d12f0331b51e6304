//! `ftlab demo`: a 5-node cluster of every daemon, a workload through the
//! client API, a SIGKILL of each one's critical node (token holder,
//! coordinator), detection and recovery measured from this process (one
//! clock), a restart, and the safety checks over the clients' records, in
//! one table. The daemons run at once, each in a thread of its own.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use client::ring::RingClient;
use client::StatusReport;
use ftlab::probe::{self, all_see_all, counter_value, detail, is_lock_daemon, poll, prefix, status, sum_samples};
use ftlab::workload::{check_acks, check_exclusion_and_fences, Clock, Load, Records};
use ftlab::Cluster;
use lockservice::LockName;

use crate::json::J;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Print the table as JSON (the progress still goes to stderr).
    #[arg(long)]
    json: bool,
    /// Nodes per cluster.
    #[arg(short = 'n', long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(3..=16))]
    nodes: u32,
    /// Do not build the daemons first. Run through cargo (`cargo run -p
    /// ftlab -- demo`), ftlab builds the workspace's binaries (of its own
    /// profile) before it starts, so that the daemons match the source.
    #[arg(long)]
    no_build: bool,
    /// Keep the clusters' configs and logs when every check passes (they
    /// are kept anyway when a check fails, and deleted otherwise).
    #[arg(long)]
    keep_logs: bool,
}

/// The daemons the demo runs, in table order.
use ftlab::DAEMONS;

/// Where the targets the demo's figures are compared with are set, from
/// the repository's root.
const PERFORMANCE_DOC: &str = "docs/performance.md";

/// docs/performance.md's target for electd: every survivor names the new
/// coordinator within this long of a SIGKILL of the old one (ms).
const ELECTD_KNOWN_TARGET_MS: f64 = 50.0;

/// How long each wait of the demo may take before it counts as a failure.
const WAIT: Duration = Duration::from_secs(30);

/// Settings the demo changes from the defaults, per daemon (shown under
/// the table). tokenwatchd's lost-token deadline grows with `max_hold_ms`
/// (a holder may keep the token that long; 2 s by default, which puts the
/// regeneration ~14 s after the holder died): half a second here.
fn demo_settings(daemon: &str) -> &'static str {
    match daemon {
        "tokenwatchd" => "max_hold_ms = 500\n",
        // A token service that keeps the token where it runs, to pin the
        // token on the node the demo kills.
        "ringd" => "[services.hold]\ncommand = [\"sleep\", \"60\"]\nneeds_token = true\ntimeout_ms = 60000\n",
        _ => "",
    }
}

/// One daemon's line of the table.
#[derive(Debug)]
struct Row {
    daemon: &'static str,
    /// The node killed and why it was the critical one.
    killed: String,
    /// Kill → a survivor's status shows the node down (ms).
    detection_ms: Option<f64>,
    /// Kill → service restored, as the clients saw it (ms): the first
    /// grant or acknowledged increment under a new epoch or term; for
    /// hbringd, every survivor sees the node down.
    recovery_ms: Option<f64>,
    /// Messages the survivors sent from the kill to the recovery.
    messages: Option<u64>,
    /// electd: kill → every survivor's status names one survivor as the
    /// coordinator (docs/performance.md's measure for electd; its first grant
    /// then waits the failover gap).
    known_ms: Option<f64>,
    /// electd: two names held at once by clients of two nodes, as the
    /// table says it.
    two_names: Option<String>,
    /// The second kill, of a node that held no client's grant (ntmutexd:
    /// the token idle there; electd: an idle coordinator; ringd: the
    /// token's owner between services), and kill → the next service (ms).
    idle: Option<(String, Option<f64>)>,
    /// The node restarted and the cluster took it back.
    rejoined: bool,
    /// Grants or acknowledged increments over the whole run.
    operations: usize,
    /// What the safety checks checked, or what broke.
    safety: std::result::Result<String, String>,
    /// Where the cluster's configs and logs are (kept when a check failed,
    /// or with --keep-logs).
    dir: PathBuf,
}

impl Row {
    fn new(daemon: &'static str, dir: PathBuf) -> Row {
        Row {
            daemon,
            killed: "-".to_string(),
            detection_ms: None,
            recovery_ms: None,
            messages: None,
            known_ms: None,
            two_names: None,
            idle: None,
            rejoined: false,
            operations: 0,
            safety: Ok(String::new()),
            dir,
        }
    }

    fn passed(&self) -> bool {
        self.recovery_ms.is_some() && self.rejoined && self.safety.is_ok()
    }
}

pub fn run(a: DemoArgs) -> Result<ExitCode> {
    if !a.no_build {
        build_daemons("demo")?;
    }
    for d in DAEMONS.iter().chain(&["ftctl"]) {
        ftlab::bin(d)?;
    }
    let root = std::env::temp_dir().join(format!("ftlab-demo-{}", std::process::id()));
    let started = Instant::now();
    let (tx, rx) = mpsc::channel::<(&'static str, String)>();
    eprintln!(
        "ftlab demo: {} nodes of each of {}; configs and logs under {} ({})",
        a.nodes,
        DAEMONS.join(", "),
        root.display(),
        if a.keep_logs { "kept" } else { "kept if a check fails, else deleted at the end; --keep-logs keeps them" }
    );
    let rows: Vec<Row> = std::thread::scope(|s| {
        let handles: Vec<_> = DAEMONS
            .iter()
            .map(|&d| {
                let tx = tx.clone();
                let dir = root.join(d);
                s.spawn(move || {
                    let say = |m: String| {
                        let _ = tx.send((d, m));
                    };
                    demo_one(d, a.nodes, dir.clone(), &say).unwrap_or_else(|e| {
                        say(format!("FAILED: {e:#}"));
                        Row { safety: Err(format!("{e:#}")), ..Row::new(d, dir) }
                    })
                })
            })
            .collect();
        drop(tx);
        // Progress: each step of each daemon, as it happens.
        for (d, m) in rx {
            eprintln!("[{:5.1}s] {d:<12} {m}", started.elapsed().as_secs_f64());
        }
        handles.into_iter().map(|h| h.join().expect("a demo thread panicked")).collect()
    });
    let all_passed = rows.iter().all(Row::passed);
    if a.json {
        println!("{}", json(&rows, all_passed, started.elapsed()));
    } else {
        print!("{}", table(&rows));
        println!(
            "{} in {:.1} s",
            if all_passed { "every check passed" } else { "SOME CHECKS FAILED" },
            started.elapsed().as_secs_f64()
        );
    }
    let failed: Vec<(&str, &Path)> = rows.iter().filter(|r| !r.passed()).map(|r| (r.daemon, r.dir.as_path())).collect();
    keep_or_delete_logs("demo", &root, a.keep_logs, &failed);
    Ok(if all_passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The end of a run of `ftlab CMD` whose clusters live under `root`:
/// deletes it when nothing `failed` (daemon, its cluster's directory) and
/// the logs are not to be kept; else says where they are.
pub(crate) fn keep_or_delete_logs(cmd: &str, root: &Path, keep: bool, failed: &[(&str, &Path)]) {
    if failed.is_empty() && !keep {
        match std::fs::remove_dir_all(root) {
            Ok(()) => eprintln!(
                "ftlab {cmd}: every check passed; configs and logs under {} deleted (--keep-logs keeps them)",
                root.display()
            ),
            Err(e) => eprintln!("ftlab {cmd}: could not delete {}: {e}", root.display()),
        }
    } else {
        for (daemon, dir) in failed {
            eprintln!("{daemon}: a check failed; its configs and logs: {}", dir.display());
        }
        eprintln!("ftlab {cmd}: configs and logs kept in {}", root.display());
    }
}

/// Run through cargo (`CARGO` is set), builds the workspace's binaries in
/// ftlab's own profile, so that `cargo run -p ftlab -- CMD` (`cmd`: demo,
/// drill) on a fresh clone needs no other step. Cargo's progress shows on
/// stderr (its stdout too goes to ftlab's stderr), so that stdout holds
/// only the table.
pub(crate) fn build_daemons(cmd: &str) -> Result<()> {
    let Some(cargo) = std::env::var_os("CARGO") else { return Ok(()) };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    eprintln!(
        "ftlab {cmd}: building the daemons (first time: a few minutes; `cargo build --workspace --bins{}`)…",
        if cfg!(debug_assertions) { "" } else { " --release" }
    );
    let status = build_command(cargo, &manifest, !cfg!(debug_assertions))
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .context("run cargo build")?;
    if !status.success() {
        bail!("cargo build --workspace --bins failed ({status})");
    }
    eprintln!("ftlab {cmd}: the daemons are built");
    Ok(())
}

/// `cargo build --workspace --bins` of the workspace at `manifest`, not
/// quiet: its progress is what shows while a first build takes minutes.
fn build_command(cargo: impl AsRef<std::ffi::OsStr>, manifest: &Path, release: bool) -> Command {
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--workspace", "--bins", "--manifest-path"]).arg(manifest);
    if release {
        cmd.arg("--release");
    }
    cmd
}

fn demo_one(daemon: &'static str, n: u32, dir: PathBuf, say: &dyn Fn(String)) -> Result<Row> {
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut c = Cluster::configure_in(daemon, n as usize, demo_settings(daemon), Some(dir.clone()))?;
    c.start_all()?;
    say(format!("{n} nodes up"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut row = Row::new(daemon, dir);
    if let Err(e) = rt.block_on(demo_cluster(&mut c, n, &mut row, say)) {
        say(format!("FAILED: {e:#}"));
        row.safety = Err(format!("{e:#}"));
    }
    Ok(row)
}

async fn demo_cluster(c: &mut Cluster, n: u32, row: &mut Row, say: &dyn Fn(String)) -> Result<()> {
    let daemon = row.daemon;
    let clock = Clock::start();
    let all: Vec<u32> = (1..=n).collect();
    let clients = probe::clients(c);

    // The workload: a lock client on every node (10 ms holds), or three
    // ringd clients incrementing one counter through any replica.
    let mut load = Load::new();
    probe::start_workload(c, daemon, &mut load, Duration::from_millis(10), clock);
    let served = |r: &Records| r.holds.len() + r.acks.len();
    if daemon != "hbringd" {
        if poll(WAIT, || async { (served(&load.snapshot()) >= 10).then_some(()) }).await.is_none() {
            bail!("the workload got no service within {WAIT:?}");
        }
        say(format!("serving ({} operations so far)", served(&load.snapshot())));
        if daemon == "electd" {
            let held = two_names(c, n, clock).await?;
            say(format!("two names held at once: {held}"));
            row.two_names = Some(held);
        }
    } else if poll(WAIT, || async { all_see_all(c, &all).await.then_some(()) }).await.is_none() {
        bail!("the ring never formed");
    }

    // The critical node, pinned so that the SIGKILL certainly hits it: a
    // client on node 2 holding the lock (the token is there while it
    // holds), ringd's `hold` token service running on node 2 (the token
    // stays there while it runs), electd's coordinator; hbringd has none.
    let pin = 2;
    let mut hold_job = None;
    let (victim, role) = match daemon {
        "ntmutexd" | "tokenwatchd" => {
            load.hold_once("hold".into(), c.node(pin).client, Duration::from_secs(60), clock);
            if poll(WAIT, || async { load.snapshot().holding.contains_key("hold").then_some(()) }).await.is_none() {
                bail!("a long hold through node {pin} was never granted");
            }
            (pin, "token holder")
        }
        "ringd" => {
            let addr = c.node(pin).client;
            let give_up = tokio::time::Instant::now() + WAIT;
            loop {
                let job = tokio::spawn(async move {
                    let mut rc = RingClient::connect(addr).await.ok()?;
                    rc.execute("hold", &[], Duration::from_secs(60)).await.ok()
                });
                // Running with the token; or the service ended first (on a
                // loaded machine its lease can run out and its supervisor
                // kill it before it is seen): ask again.
                let seen = poll(give_up.saturating_duration_since(tokio::time::Instant::now()), || async {
                    let running = c.metric(pin, "ringd_services_running") == Some(1.0);
                    if running && status(c, pin).await.is_some_and(|s| detail(&s, "has_token") == Some("true")) {
                        Some(true)
                    } else {
                        job.is_finished().then_some(false)
                    }
                })
                .await;
                match seen {
                    Some(true) => {
                        hold_job = Some(job);
                        break;
                    }
                    Some(false) => {
                        say(format!("node {pin}'s `hold` token service ended before it was seen; asking again"))
                    }
                    None => bail!("node {pin} never ran the `hold` token service with the token"),
                }
            }
            (pin, "token owner")
        }
        "electd" => probe::critical_node(c, daemon, WAIT).await.ok_or_else(|| anyhow!("no coordinator known"))?,
        _ => (n / 2 + 1, "ring member"),
    };
    row.killed = format!("node {victim} ({role})");
    let survivors: Vec<u32> = all.iter().copied().filter(|id| *id != victim).collect();
    let sent = format!("{}_messages_sent_total", prefix(daemon));
    let before = sum_samples(c, &survivors, &sent);

    let epoch_before = load.snapshot().max_epoch();
    let killed_at = clock.now();
    c.kill(victim);
    say(format!("SIGKILL node {victim} ({role})"));
    let seen_down = |s: &StatusReport| s.peers.iter().any(|p| p.id.0 == victim && !p.up);
    let detected = poll(WAIT, || async {
        for id in &survivors {
            if status(c, *id).await.is_some_and(|s| seen_down(&s)) {
                return Some(clock.now());
            }
        }
        None
    })
    .await;
    row.detection_ms = detected.map(|t| ms(t - killed_at));
    if daemon == "electd" {
        let known = poll(WAIT, || async {
            let mut named = Vec::new();
            for id in &survivors {
                named.push(status(c, *id).await.and_then(|s| detail(&s, "coordinator")?.parse::<u32>().ok())?);
            }
            let first = *named.first()?;
            (first != victim && named.iter().all(|w| *w == first)).then(|| clock.now())
        })
        .await;
        row.known_ms = known.map(|t| ms(t - killed_at));
    }
    let recovered = if daemon == "hbringd" {
        poll(WAIT, || async {
            for id in &survivors {
                if !status(c, *id).await.is_some_and(|s| seen_down(&s)) {
                    return None;
                }
            }
            Some(clock.now())
        })
        .await
    } else {
        // Service under a new token (or term): a grant or an increment
        // the killed node's token could not have given.
        poll(WAIT, || async { load.snapshot().first_service_above(epoch_before) }).await
    };
    if let Some(job) = hold_job {
        job.abort();
    }
    row.recovery_ms = recovered.map(|t| ms(t - killed_at));
    row.messages = recovered.map(|_| (sum_samples(c, &survivors, &sent) - before).max(0.0) as u64);
    match row.recovery_ms {
        Some(r) => say(format!("recovered in {r:.0} ms")),
        None => say(format!("NOT recovered within {WAIT:?}")),
    }

    // The node comes back and the cluster takes it in.
    c.restart(victim)?;
    let restarted_at = clock.now();
    let back = poll(WAIT, || async { all_see_all(c, &all).await.then_some(()) }).await.is_some();
    let mut extra_acks = Vec::new();
    let served_again = match daemon {
        d if is_lock_daemon(d) => {
            let name = format!("c{victim}");
            poll(WAIT, || async {
                load.snapshot().holds.iter().any(|h| h.client == name && h.start > restarted_at).then_some(())
            })
            .await
            .is_some()
        }
        "ringd" => {
            // One increment through the restarted replica, kept with the
            // others' acknowledgements.
            let mut one = Load::new();
            one.incr_client(format!("c{victim}"), vec![c.node(victim).client], probe::COUNTER.into(), clock);
            let ok = poll(WAIT, || async { (!one.snapshot().acks.is_empty()).then_some(()) }).await.is_some();
            extra_acks = one.stop().await.acks;
            ok
        }
        _ => true,
    };
    row.rejoined = back && served_again;
    say(format!("restarted node {victim}: {}", if row.rejoined { "rejoined" } else { "NOT rejoined" }));

    let mut records = load.stop().await;
    records.acks.append(&mut extra_acks);
    row.operations = records.holds.len() + records.acks.len();
    row.safety = match daemon {
        d if is_lock_daemon(d) => check_exclusion_and_fences(&records.holds)
            .map(|()| format!("{} grants: no overlap, fences increasing", records.holds.len())),
        "ringd" => {
            let final_value = counter_value(&clients).await?;
            check_acks(&records.acks, final_value).map(|()| {
                format!("{} increments acknowledged: all present (counter {final_value})", records.acks.len())
            })
        }
        _ => Ok("no client service to check".to_string()),
    };
    say(match &row.safety {
        Ok(s) => format!("safety: {s}"),
        Err(e) => format!("SAFETY FAILED: {e}"),
    });
    if matches!(daemon, "ntmutexd" | "electd" | "ringd") && row.safety.is_ok() {
        let (who, took, checked) = idle_kill(c, daemon, clock, say).await?;
        say(format!("idle kill of {who}: next service after {}", opt_ms(took)));
        if let Err(e) = checked {
            row.safety = Err(format!("after the idle kill: {e}"));
        }
        row.idle = Some((who, took));
    }
    Ok(())
}

/// How long each of [`two_names`]' clients holds its name.
const NAMED_HOLD: Duration = Duration::from_secs(2);

/// electd serves named locks: a client of node 1 takes `demo-a` and one of
/// node `n` takes `demo-b`, each for [`NAMED_HOLD`], while the workload
/// holds the unnamed lock; their records must overlap in time. Returns
/// `demo-a (fence F) on node 1, demo-b (fence G) on node N`.
async fn two_names(c: &Cluster, n: u32, clock: Clock) -> Result<String> {
    let asks = [("demo-a", 1), ("demo-b", n)];
    let mut load = Load::new();
    for (name, id) in asks {
        load.hold_once_named(name.into(), c.node(id).client, LockName::parse(name)?, NAMED_HOLD, clock);
    }
    // Both held now, or both done (a failure, or holds one after the other).
    let both = |r: &Records| asks.iter().all(|(name, _)| r.holding.contains_key(*name));
    let done = |r: &Records| r.holds.len() + r.events.len() >= asks.len();
    poll(WAIT, || async {
        let r = load.snapshot();
        (both(&r) || done(&r)).then_some(())
    })
    .await;
    let records = load.stop().await;
    let hold = |name: &str| records.holds.iter().find(|h| h.client == name && h.end.is_some());
    let (Some(a), Some(b)) = (hold(asks[0].0), hold(asks[1].0)) else {
        let why = records.events.first().map_or("no grant".to_string(), |e| format!("{e:?}"));
        bail!("`demo-a` and `demo-b` were not both granted within {WAIT:?}: {why}");
    };
    let (a_end, b_end) = (a.end.unwrap_or(a.start), b.end.unwrap_or(b.start));
    if a.start >= b_end || b.start >= a_end {
        bail!("`demo-a` and `demo-b` were granted one after the other, not at once: {a:?}, {b:?}");
    }
    Ok(format!("demo-a (fence {}) on node {}, demo-b (fence {}) on node {}", a.fence, asks[0].1, b.fence, asks[1].1))
}

/// How long the cluster is left without clients before the idle kill:
/// every lease it granted has ended (`lease_ms·(1+ρ)` at the default
/// 100 ms), so nothing the victim did binds anyone.
const IDLE_SETTLE: Duration = Duration::from_millis(300);

/// The second kill: a node that held no client's grant. With no clients
/// for [`IDLE_SETTLE`], the token is pinned on the victim by one short hold
/// through it (ntmutexd; ringd: one increment through it), or the victim
/// is the coordinator (electd); it is killed, and at the same moment a
/// client of another node asks. Returns the victim, kill → that client's
/// grant or acknowledgement, and the safety check of the phase's records.
async fn idle_kill(
    c: &mut Cluster,
    daemon: &str,
    clock: Clock,
    say: &dyn Fn(String),
) -> Result<(String, Option<f64>, std::result::Result<(), String>)> {
    let short = Duration::from_millis(1);
    let mut pin = Load::new();
    if daemon == "ntmutexd" {
        pin.hold_once("pin".into(), c.node(3).client, short, clock);
        let pinned = poll(WAIT, || async { pin.snapshot().holds.iter().any(|h| h.end.is_some()).then_some(()) });
        if pinned.await.is_none() {
            bail!("the idle kill's short hold through node 3 was not granted");
        }
    }
    let mut records = pin.stop().await;
    tokio::time::sleep(IDLE_SETTLE).await;
    let (victim, role) = match daemon {
        "ntmutexd" => (3, "token holder, idle"),
        "ringd" => {
            let owner = probe::critical_node(c, daemon, WAIT).await.ok_or_else(|| anyhow!("no token owner"))?;
            (owner.0, "token owner, no service")
        }
        _ => {
            let coordinator = probe::critical_node(c, daemon, WAIT).await.ok_or_else(|| anyhow!("no coordinator"))?;
            (coordinator.0, "coordinator, no grant")
        }
    };
    let other = if victim == 1 { 2 } else { 1 };
    let mut after = Load::new();
    let killed_at = clock.now();
    c.kill(victim);
    if daemon == "ringd" {
        after.incr_client("after".into(), vec![c.node(other).client], probe::COUNTER.into(), clock);
    } else {
        after.hold_once("after".into(), c.node(other).client, short, clock);
    }
    say(format!("SIGKILL node {victim} ({role}); a client of node {other} asks"));
    let served = poll(WAIT, || async {
        let r = after.snapshot();
        r.holds.first().map(|h| h.start).or_else(|| r.acks.first().map(|a| a.at))
    })
    .await;
    let mut rest = after.stop().await;
    records.holds.append(&mut rest.holds);
    let checked = check_exclusion_and_fences(&records.holds);
    Ok((format!("node {victim} ({role})"), served.map(|t| ms(t - killed_at)), checked))
}

/// Nanoseconds as milliseconds.
pub(crate) fn ms(ns: u128) -> f64 {
    ns as f64 / 1e6
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.0} ms"))
}

/// What to add to a figure's line when it misses its target (as shown,
/// to the millisecond): a miss is reported, not a failure.
fn target_note(measured: Option<f64>, target_ms: f64) -> String {
    match measured {
        Some(v) if v.round() > target_ms => format!(
            " — above the {target_ms:.0} ms target{}",
            if cfg!(debug_assertions) { " (a debug build is slower)" } else { "" }
        ),
        _ => String::new(),
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "\n{:<12} {:<24} {:>10} {:>10} {:>9} {:>9} {:>6}  {}\n",
        "daemon", "killed (SIGKILL)", "detection", "recovery", "messages", "rejoined", "ops", "safety"
    );
    let idle: Vec<&Row> = rows.iter().filter(|r| r.idle.is_some()).collect();
    for r in rows {
        out += &format!(
            "{:<12} {:<24} {:>10} {:>10} {:>9} {:>9} {:>6}  {}\n",
            r.daemon,
            r.killed,
            opt_ms(r.detection_ms),
            opt_ms(r.recovery_ms),
            r.messages.map_or_else(|| "-".to_string(), |m| m.to_string()),
            if r.rejoined { "yes" } else { "NO" },
            r.operations,
            match &r.safety {
                Ok(s) => format!("ok: {s}"),
                Err(e) => format!("FAILED: {e}"),
            }
        );
    }
    out += "\ndetection: SIGKILL → a survivor's status shows the node down. recovery: SIGKILL → the first grant \
            (or acknowledged increment) that a client saw under a new epoch or term, which the killed node's \
            token could not have given (hbringd: every survivor sees the node down). The token was pinned on \
            the killed node: its client held the lock, or it ran a token service. messages: sent by the \
            survivors meanwhile (heartbeats included). Default settings, but tokenwatchd's max_hold_ms = 500 \
            (default 2000, whose lost-token deadline is ~11 s at N = 5).\n";
    for r in rows.iter().filter(|r| r.daemon == "electd") {
        out += &format!(
            "electd: every survivor named the new coordinator {} after the kill ({PERFORMANCE_DOC}: ≤ \
             {ELECTD_KNOWN_TARGET_MS:.0} ms){}; its first grant then waits the failover gap.\n",
            opt_ms(r.known_ms),
            target_note(r.known_ms, ELECTD_KNOWN_TARGET_MS)
        );
        if let Some(held) = &r.two_names {
            out += &format!("electd: two names held at once: {held}.\n");
        }
    }
    if !idle.is_empty() {
        out += &format!("\n{:<12} {:<36} {:>12}\n", "daemon", "then killed, holding no grant", "next service");
        for r in idle {
            let (who, took) = r.idle.as_ref().expect("filtered");
            out += &format!("{:<12} {:<36} {:>12}\n", r.daemon, who, opt_ms(*took));
        }
        out += "\nSIGKILL of a node whose process dies on a host that stays up, no client's grant there, \
                no clients for 300 ms before (every lease over) → a client of another node, asking at the \
                kill, is served. Its connections close at once and its port refuses: the survivors act on \
                that hint instead of waiting for suspect_after. electd's new coordinator still waits its \
                failover gap ((lease + grant_ttl)·(1+ρ) + hop_timeout).\n";
    }
    out
}

fn json(rows: &[Row], passed: bool, took: Duration) -> J {
    let rows = rows.iter().map(|r| {
        let (ok, safety) = match &r.safety {
            Ok(s) => (true, s.as_str()),
            Err(e) => (false, e.as_str()),
        };
        J::obj([
            ("daemon", J::s(r.daemon)),
            ("killed", J::s(&r.killed)),
            ("detection_ms", J::opt(r.detection_ms)),
            ("recovery_ms", J::opt(r.recovery_ms)),
            ("messages", J::opt(r.messages.map(|m| m as f64))),
            ("new_coordinator_known_ms", J::opt(r.known_ms)),
            ("new_coordinator_target_ms", J::opt((r.daemon == "electd").then_some(ELECTD_KNOWN_TARGET_MS))),
            ("two_names", J::opt_s(r.two_names.clone())),
            ("idle_killed", r.idle.as_ref().map_or(J::Null, |(w, _)| J::s(w))),
            ("idle_recovery_ms", J::opt(r.idle.as_ref().and_then(|(_, t)| *t))),
            ("rejoined", J::from(r.rejoined)),
            ("operations", J::from(r.operations)),
            ("safety_ok", J::from(ok)),
            ("safety", J::s(safety)),
            ("passed", J::from(r.passed())),
        ])
    });
    J::obj([("passed", J::from(passed)), ("seconds", J::from(took.as_secs_f64())), ("daemons", J::Arr(rows.collect()))])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_build_shows_cargos_progress() {
        let cmd = build_command("cargo", Path::new("/w/Cargo.toml"), false);
        let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(args, ["build", "--workspace", "--bins", "--manifest-path", "/w/Cargo.toml"]);
        assert!(!args.iter().any(|a| a == "--quiet" || a == "-q"), "{args:?}");
        let release = build_command("cargo", Path::new("/w/Cargo.toml"), true);
        assert_eq!(release.get_args().last().unwrap(), "--release");
    }

    #[test]
    fn a_missed_target_is_said_on_its_line() {
        assert_eq!(target_note(Some(12.0), 50.0), "");
        assert_eq!(target_note(Some(50.4), 50.0), "", "shown as 50 ms: on target");
        assert_eq!(target_note(None, 50.0), "");
        let miss = target_note(Some(154.0), 50.0);
        assert!(miss.starts_with(" — above the 50 ms target"), "{miss}");
        assert_eq!(miss.contains("debug build"), cfg!(debug_assertions), "{miss}");
        let row = |known| Row { known_ms: Some(known), ..Row::new("electd", PathBuf::new()) };
        let line = |t: &str| t.lines().find(|l| l.starts_with("electd: every survivor")).unwrap().to_string();
        let slow = line(&table(&[row(154.0)]));
        assert!(
            slow.contains("154 ms after the kill (docs/performance.md: ≤ 50 ms) — above the 50 ms target"),
            "{slow}"
        );
        let fast = line(&table(&[row(31.0)]));
        assert!(fast.contains("31 ms after the kill (docs/performance.md: ≤ 50 ms); its first grant"), "{fast}");
    }

    #[test]
    fn electds_two_names_have_a_line() {
        let held = "demo-a (fence 18446744073709551623) on node 1, demo-b (fence 18446744073709551624) on node 5";
        let row = Row { two_names: Some(held.into()), ..Row::new("electd", PathBuf::new()) };
        let t = table(&[row]);
        assert!(t.lines().any(|l| l == format!("electd: two names held at once: {held}.")), "{t}");
        assert!(!table(&[Row::new("electd", PathBuf::new())]).contains("two names"));
    }

    #[test]
    fn the_cited_performance_doc_is_in_the_repository() {
        let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(PERFORMANCE_DOC);
        assert!(doc.is_file(), "{} is cited but missing", doc.display());
    }
}
