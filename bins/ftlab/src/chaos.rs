//! `ftlab chaos`: random SIGKILLs and restarts (and, with `--pause`,
//! SIGSTOP/SIGCONT pauses) of a cluster's nodes under load, one fault at a
//! time, from a seeded schedule; then the safety checks over the clients'
//! records (no overlapping grants, fences increasing, every acknowledged
//! increment present), and service after the last fault.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use ftlab::probe::{self, all_see_all, is_lock_daemon, poll};
use ftlab::workload::{check_acks, check_exclusion_and_fences, Clock, Event, Load};
use ftlab::{signal, Cluster};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Args, Debug)]
pub struct ChaosArgs {
    /// Which daemon: ntmutexd, tokenwatchd, electd, ringd or hbringd.
    #[arg(value_parser = ftlab::parse_daemon)]
    daemon: String,
    /// Number of nodes.
    #[arg(short = 'n', long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(3..=16))]
    nodes: u32,
    /// How many faults (kills, or with --pause kills and pauses).
    #[arg(long, default_value_t = 5)]
    kills: u32,
    /// How long the faults are spread over (`30s`, `2m`).
    #[arg(long, default_value = "30s", value_parser = client::duration::parse)]
    duration: Duration,
    /// The schedule's seed (printed; the same seed gives the same
    /// schedule). Default: from the clock.
    #[arg(long)]
    seed: Option<u64>,
    /// Also pause nodes (SIGSTOP, then SIGCONT), which is what false
    /// suspicion looks like.
    #[arg(long)]
    pause: bool,
    /// tokenwatchd only: drop this fraction of every node's outgoing
    /// datagrams (its `[chaos] drop_rate`), 0 to 0.5.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Where the configs and logs go (kept); default: a new directory under
    /// the temporary directory, kept when a check fails.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// One fault of the schedule.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill { node: u32, down: Duration },
    Pause { node: u32, down: Duration },
}

/// The schedule: `k` faults over `duration`, each on a random node, down
/// for 100 ms to 1.5 s; pauses half the time with `pause`.
fn schedule(seed: u64, n: u32, k: u32, pause: bool) -> Vec<Fault> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..k)
        .map(|_| {
            let node = rng.random_range(1..=n);
            let down = Duration::from_millis(rng.random_range(100..=1500));
            if pause && rng.random_bool(0.5) {
                Fault::Pause { node, down }
            } else {
                Fault::Kill { node, down }
            }
        })
        .collect()
}

pub fn run(a: ChaosArgs) -> Result<ExitCode> {
    ftlab::check_daemon(&a.daemon)?;
    if a.loss != 0.0 {
        if a.daemon != "tokenwatchd" {
            bail!("--loss is for tokenwatchd (UDP, with a [chaos] drop_rate); {} has no loss to inject", a.daemon);
        }
        if !(0.0..=0.5).contains(&a.loss) {
            bail!("--loss {} is out of range: 0 to 0.5", a.loss);
        }
    }
    if a.kills == 0 {
        bail!("--kills must be at least 1");
    }
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    let faults = schedule(seed, a.nodes, a.kills, a.pause);
    println!(
        "ftlab chaos {} -n {} --kills {} --duration {:?}{}{} --seed {seed}",
        a.daemon,
        a.nodes,
        a.kills,
        a.duration,
        if a.pause { " --pause" } else { "" },
        if a.loss > 0.0 { format!(" --loss {}", a.loss) } else { String::new() },
    );
    let dir = a.dir.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("ftlab-chaos-{}", std::process::id())));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let extra = if a.loss > 0.0 { format!("[chaos]\ndrop_rate = {}\n", a.loss) } else { String::new() };
    let mut c = Cluster::configure_in(&a.daemon, a.nodes as usize, &extra, Some(dir.clone()))?;
    c.start_all()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let passed = rt.block_on(chaos(&mut c, &a, &faults))?;
    drop(c);
    if passed && a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("configs and logs: {}", dir.display());
    }
    println!("seed {seed}: {}", if passed { "every check passed" } else { "CHECKS FAILED" });
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn chaos(c: &mut Cluster, a: &ChaosArgs, faults: &[Fault]) -> Result<bool> {
    let started = Instant::now();
    let clock = Clock::start();
    let say = |m: String| eprintln!("[{:5.1}s] {m}", started.elapsed().as_secs_f64());
    let all: Vec<u32> = (1..=a.nodes).collect();
    let mut load = Load::new();
    probe::start_workload(c, &a.daemon, &mut load, Duration::from_millis(10), clock);
    let wait = Duration::from_secs(30);
    let between = a.duration / a.kills;
    let mut gaps = Vec::new();
    for (i, f) in faults.iter().enumerate() {
        tokio::time::sleep(between.saturating_sub(Duration::from_millis(1500)).max(Duration::from_millis(200))).await;
        let at = clock.now();
        match *f {
            Fault::Kill { node, down } => {
                c.kill(node);
                say(format!("fault {}/{}: SIGKILL node {node}, restart after {down:?}", i + 1, faults.len()));
                tokio::time::sleep(down).await;
                c.restart(node)?;
            }
            Fault::Pause { node, down } => {
                let pid = c.pid(node).context("paused node not running")?;
                signal(pid, "STOP")?;
                say(format!("fault {}/{}: SIGSTOP node {node} for {down:?}", i + 1, faults.len()));
                tokio::time::sleep(down).await;
                signal(pid, "CONT")?;
            }
        }
        let healed = poll(wait, || async { all_see_all(c, &all).await.then_some(clock.now()) }).await;
        // hbringd serves no clients: its service is the whole ring.
        let served = if a.daemon == "hbringd" {
            healed
        } else {
            poll(wait, || async { load.snapshot().first_service_after(at) }).await
        };
        if let Some(t) = served {
            gaps.push(t - at);
        }
        say(format!(
            "  cluster {}; service {}",
            if healed.is_some() { "whole again" } else { "NOT whole again" },
            served.map_or("NOT restored".to_string(), |t| format!(
                "restored {:.0} ms after the fault",
                (t - at) as f64 / 1e6
            ))
        ));
    }
    // Service after the last fault, then the checks.
    let end = clock.now();
    let alive =
        a.daemon == "hbringd" || poll(wait, || async { load.snapshot().first_service_after(end) }).await.is_some();
    let records = load.stop().await;
    let safety = if is_lock_daemon(&a.daemon) {
        check_exclusion_and_fences(&records.holds)
            .map(|()| format!("{} grants: no overlap, fences increasing", records.holds.len()))
    } else if a.daemon == "ringd" {
        match probe::counter_value(&probe::clients(c)).await {
            Ok(v) => check_acks(&records.acks, v)
                .map(|()| format!("{} increments acknowledged: all present (counter {v})", records.acks.len())),
            Err(e) => Err(format!("{e:#}")),
        }
    } else {
        Ok("no client service to check".to_string())
    };
    let lost = records.events.iter().filter(|e| matches!(e, Event::Lost { .. })).count();
    let failed = records.events.iter().filter(|e| matches!(e, Event::Failed { .. })).count();
    gaps.sort_unstable();
    println!(
        "{} faults in {:.1} s; {} operations; {} holds lost, {} failed attempts (retried); \
         service restored after each fault: median {}, max {}",
        faults.len(),
        started.elapsed().as_secs_f64(),
        records.holds.len() + records.acks.len(),
        lost,
        failed,
        gaps.get(gaps.len() / 2).map_or("-".to_string(), |g| format!("{:.0} ms", *g as f64 / 1e6)),
        gaps.last().map_or("-".to_string(), |g| format!("{:.0} ms", *g as f64 / 1e6)),
    );
    match &safety {
        Ok(s) => println!("safety: ok: {s}"),
        Err(e) => println!("safety: FAILED: {e}"),
    }
    if !alive {
        println!("service: NOT restored after the last fault within {wait:?}");
    }
    Ok(safety.is_ok() && alive && gaps.len() == faults.len())
}
