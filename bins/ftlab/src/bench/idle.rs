//! `ftlab bench DAEMON --idle`: a cluster at the daemons' default timings
//! with no client, measured once every node has recovered and the cluster
//! has settled: each node's CPU (utime + stime from /proc, as a share of
//! one core) and resident memory, next to docs/performance.md's target (an idle
//! daemon: < 1 % of a core, < 15 MiB RSS). Then, what that idleness costs
//! a client: [`WAKES`] requests one at a time, each at a node drawn at
//! random after a random gap in [`GAP`] (a lock acquired and released;
//! ringd a `counter.incr`), timed from request to answer. Random, because
//! requests at the nodes in turn at a fixed period lock into the idle
//! token's period: they find it at the same place each time.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use client::ring::RingClient;
use client::Client;
use ftlab::Cluster;
use lockservice::{LockReply, LockRequest};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::load::Opts;
use crate::json::J;

/// After every node reports recovered, this long before measuring: the
/// first token or leader is made, and start-up traffic has passed.
const SETTLE: Duration = Duration::from_secs(3);
/// docs/performance.md: an idle daemon uses less than this share of a core ...
const CPU_TARGET: f64 = 0.01;
/// ... and less than this resident memory.
const RSS_TARGET: u64 = 15 * 1024 * 1024;

/// Requests made at the idle cluster, one at a time ...
const WAKES: usize = 10;
/// ... each this long (ms, drawn uniformly) after the one before: the
/// token (or lease traffic) has gone back to what an idle cluster does.
const GAP: std::ops::Range<u64> = 300..700;
/// A request not answered this long fails the run.
const PATIENCE: Duration = Duration::from_secs(10);

/// One node's figures.
struct Node {
    id: u32,
    cpu_share: f64,
    rss: u64,
}

pub fn run(o: &Opts) -> Result<ExitCode> {
    let mut c = Cluster::configure_in(&o.daemon, o.n, &o.extra, None)?;
    let settings = super::load::settings_of(&o.daemon, &c)?;
    if !o.json {
        eprintln!("ftlab bench {} --idle: starting {} nodes, no client …", o.daemon, o.n);
    }
    c.start_all()?;
    std::thread::sleep(SETTLE);
    let pids: Vec<u32> = (1..=o.n as u32)
        .map(|id| c.pid(id).ok_or_else(|| anyhow!("node {id} is not running; its log:\n{}", c.log(id))))
        .collect::<Result<_>>()?;
    if !o.json {
        eprintln!("  recovered and settled; measuring {:?} …", o.duration);
    }
    let before: Vec<f64> = pids.iter().map(|p| ftlab::probe::cpu_us(*p)).collect::<Result<_>>()?;
    let t = Instant::now();
    std::thread::sleep(o.duration);
    let window = t.elapsed().as_secs_f64();
    let after: Vec<f64> = pids.iter().map(|p| ftlab::probe::cpu_us(*p)).collect::<Result<_>>()?;
    let nodes: Vec<Node> = pids
        .iter()
        .zip(before.iter().zip(&after))
        .enumerate()
        .map(|(i, (pid, (b, a)))| {
            Ok(Node { id: i as u32 + 1, cpu_share: (a - b) / 1e6 / window, rss: ftlab::probe::rss_bytes(*pid)? })
        })
        .collect::<Result<_>>()?;
    let max_cpu = nodes.iter().map(|n| n.cpu_share).fold(0.0, f64::max);
    let mean_cpu = nodes.iter().map(|n| n.cpu_share).sum::<f64>() / nodes.len().max(1) as f64;
    let max_rss = nodes.iter().map(|n| n.rss).max().unwrap_or(0);
    if !o.json {
        eprintln!("  {WAKES} requests at the idle cluster, {}–{} ms apart …", GAP.start, GAP.end);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // Any seed will do; a new one each run.
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut waits: Vec<f64> = Vec::with_capacity(WAKES);
    for _ in 0..WAKES {
        std::thread::sleep(Duration::from_millis(rng.random_range(GAP)));
        let id = rng.random_range(1..=o.n as u32);
        let took = rt.block_on(one_request(&o.daemon, c.node(id).client))?;
        waits.push(took.as_secs_f64() * 1e6);
    }
    let wait_p50 = super::percentile(&mut waits, 50.0).unwrap_or(0.0);
    let wait_max = waits.iter().copied().fold(0.0, f64::max);
    let (cpu_met, rss_met) = (max_cpu < CPU_TARGET, max_rss < RSS_TARGET);
    let mib = |b: u64| b as f64 / 1024.0 / 1024.0;
    if o.json {
        let per_node = nodes
            .iter()
            .map(|n| {
                J::obj([
                    ("node", J::from(n.id as usize)),
                    ("cpu_share", J::from(n.cpu_share)),
                    ("rss_bytes", J::from(n.rss)),
                ])
            })
            .collect();
        let top = J::obj([
            ("daemon", J::s(&o.daemon)),
            ("n", J::from(o.n)),
            ("idle", J::Bool(true)),
            ("settings", J::s(&settings)),
            ("window_s", J::from(window)),
            ("nodes", J::Arr(per_node)),
            ("cpu_share_mean", J::from(mean_cpu)),
            ("cpu_share_max", J::from(max_cpu)),
            ("cpu_target", J::from(CPU_TARGET)),
            ("cpu_met", J::Bool(cpu_met)),
            ("rss_bytes_max", J::from(max_rss)),
            ("rss_target_bytes", J::from(RSS_TARGET)),
            ("rss_met", J::Bool(rss_met)),
            ("idle_requests", J::from(WAKES)),
            ("idle_request_p50_us", J::from(wait_p50)),
            ("idle_request_max_us", J::from(wait_max)),
        ]);
        println!("{top}");
    } else {
        println!("{} × {} idle (no client), {:.1} s after recovery + {SETTLE:?}", o.n, o.daemon, window);
        println!("settings: {settings}");
        println!("{:<6} {:>10} {:>10}", "node", "CPU", "RSS");
        for n in &nodes {
            println!("{:<6} {:>9.2}% {:>6.1} MiB", n.id, n.cpu_share * 100.0, mib(n.rss));
        }
        let met = |m: bool| if m { "met" } else { "NOT met" };
        println!(
            "CPU: mean {:.2} %, max {:.2} % of a core (target < 1 %: {}); RSS: max {:.1} MiB (target < 15 MiB: {})",
            mean_cpu * 100.0,
            max_cpu * 100.0,
            met(cpu_met),
            mib(max_rss),
            met(rss_met)
        );
        println!(
            "a request at the idle cluster ({WAKES}, {}–{} ms apart, at random nodes) waited: p50 {}, max {}",
            GAP.start,
            GAP.end,
            super::human_us(wait_p50),
            super::human_us(wait_max)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One request through the node at `addr`, timed from sending it to its
/// answer (the connection is made first): a lock acquired (then released),
/// or for ringd one `counter.incr`.
async fn one_request(daemon: &str, addr: SocketAddr) -> Result<Duration> {
    if !ftlab::probe::is_lock_daemon(daemon) {
        let mut c = RingClient::connect(addr).await?;
        let args = [ftlab::probe::COUNTER.to_string()];
        let t = Instant::now();
        if let Err(e) = c.execute("counter.incr", &args, PATIENCE).await? {
            bail!("counter.incr at {addr}: {e}");
        }
        return Ok(t.elapsed());
    }
    let mut c = Client::<LockRequest, LockReply>::connect(addr).await?;
    let t = Instant::now();
    let timeout_ms = PATIENCE.as_millis() as u64;
    match c.call(LockRequest::Acquire { timeout_ms }, PATIENCE).await? {
        LockReply::Granted { .. } => {}
        other => bail!("acquire at {addr} answered {other:?}"),
    }
    let took = t.elapsed();
    match c.call(LockRequest::Release, PATIENCE).await? {
        LockReply::Released => Ok(took),
        other => bail!("release at {addr} answered {other:?}"),
    }
}
