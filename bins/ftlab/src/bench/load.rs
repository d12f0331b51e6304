//! `ftlab bench DAEMON`: L of this run first, then a cluster at the
//! daemons' default timings under contending in-process clients
//! (workload.rs's), measured over a window that starts at the first
//! service: throughput, latency percentiles, messages and daemon CPU per
//! operation, each next to L and docs/performance.md's target.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use client::ring::RingClient;
use ftlab::workload::{check_acks, check_exclusion_and_fences, Ack, Clock, Event, Hold, Load, Records};
use ftlab::Cluster;
use lockservice::LockName;

use super::baseline::{self, Baseline};
use super::etcd::{self, Etcd};
use super::{human_us, percentile};
use crate::json::J;

/// Round trips per transport for the L of a daemon run.
const ROUND_TRIPS: usize = 5_000;
/// How long the clients have to get a first grant (or increment).
const FIRST_SERVICE_WITHIN: Duration = Duration::from_secs(30);
/// ringd lookups measured after the load, at most ...
const LOOKUPS: usize = 1_000;
/// ... within this long.
const LOOKUP_BUDGET: Duration = Duration::from_secs(2);
/// What to run.
#[derive(Debug)]
pub struct Opts {
    pub daemon: String,
    pub n: usize,
    pub clients: usize,
    /// Named locks the clients are spread over (`bench-0` …); None: all
    /// on the unnamed lock.
    pub names: Option<usize>,
    pub duration: Duration,
    pub loss: Option<f64>,
    pub extra: String,
    pub json: bool,
}

impl Opts {
    fn is_ringd(&self) -> bool {
        self.daemon == "ringd"
    }

    /// The metrics prefix of the daemon.
    fn prefix(&self) -> &'static str {
        ftlab::probe::prefix(&self.daemon)
    }

    /// Whether the daemon's peers speak UDP (L_udp bounds it) or TCP.
    fn udp(&self) -> bool {
        self.daemon == "tokenwatchd"
    }

    /// The lock client `i` (from 0) asks for: `bench-{i mod K}` with
    /// `--names K`, else the unnamed lock.
    fn lock_of(&self, i: usize) -> LockName {
        match self.names {
            Some(k) => LockName::parse(&bench_name(i % k.max(1))).expect("a valid name"),
            None => LockName::unnamed(),
        }
    }

    /// The node (from 0) client `i` asks through: `i mod N`, but with
    /// `--names K` the clients of one name go to successive nodes (the
    /// j-th client of name k to node `(k + j) mod N`), so that a name's
    /// contenders are not all on one node when N divides K. Either way
    /// the clients spread evenly over the nodes.
    fn node_of(&self, i: usize) -> usize {
        let k = self.names.unwrap_or(usize::MAX).max(1);
        (i % k + i / k) % self.n.max(1)
    }
}

/// The `k`-th name of `--names` (from 0).
fn bench_name(k: usize) -> String {
    format!("bench-{k}")
}

/// `1 name`, `K names`.
fn names_text(k: usize) -> String {
    if k == 1 {
        "1 name".to_string()
    } else {
        format!("{k} names")
    }
}

/// Counters summed over the nodes at one moment.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    /// `<prefix>_messages_sent_total`, every type.
    messages: f64,
    /// `tokenwatch_token_passes_total`.
    passes: f64,
    /// utime + stime of the nodes' processes, µs.
    cpu_us: f64,
    /// `<prefix>_state_write_seconds`: durable writes, and seconds in them.
    writes: f64,
    write_s: f64,
}

/// The figures of the holds (or acks) in a window.
#[derive(Clone, Debug, Default)]
pub struct OpStats {
    /// Operations that completed in the window.
    pub ops: usize,
    /// Window length, s.
    pub window_s: f64,
    /// From a request's sending to its grant (or acknowledgement), µs:
    /// p50, p99.
    pub latency_p50: Option<f64>,
    pub latency_p99: Option<f64>,
    /// One hold's end → the next hold's start of the same lock at another
    /// client, µs (each name's handoffs, pooled).
    pub handoff_p50: Option<f64>,
    pub handoff_p99: Option<f64>,
}

/// How the holds of a run with `--names K` spread over the names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NameSpread {
    /// Names asked for (K), and those with a hold that began in the window.
    pub names: usize,
    pub served: usize,
    /// Holds per name that began in the window, over all K names (a name
    /// never served counts 0): least, median, most.
    pub ops_min: usize,
    pub ops_median: usize,
    pub ops_max: usize,
    /// Each name's handoff p50, µs; the median over the names that had a
    /// handoff, and how many did.
    pub handoff_p50_median: Option<f64>,
    pub with_handoffs: usize,
}

impl OpStats {
    pub fn throughput(&self) -> f64 {
        self.ops as f64 / self.window_s.max(1e-9)
    }
}

/// Throughput, grant latency and handoff of holds, counting those that
/// began in (t0, t1]. A handoff is within one lock (each name, or the
/// unnamed lock): the handoffs of every lock are pooled.
pub fn hold_stats(holds: &[Hold], t0: u128, t1: u128) -> OpStats {
    let inside = |t: u128| t > t0 && t <= t1;
    let mut sorted: Vec<&Hold> = holds.iter().filter(|h| h.end.is_some()).collect();
    sorted.sort_by(|a, b| (&a.lock, a.start).cmp(&(&b.lock, b.start)));
    let ops = sorted.iter().filter(|h| inside(h.start)).count();
    let us = |ns: u128| ns as f64 / 1e3;
    let mut handoffs: Vec<f64> = sorted
        .windows(2)
        .filter(|w| w[0].lock == w[1].lock && inside(w[1].start) && w[0].client != w[1].client)
        .filter_map(|w| w[1].start.checked_sub(w[0].end?).map(us))
        .collect();
    let mut latencies: Vec<f64> =
        sorted.iter().filter(|h| inside(h.start)).filter_map(|h| h.start.checked_sub(h.asked?).map(us)).collect();
    OpStats {
        ops,
        window_s: (t1 - t0) as f64 / 1e9,
        latency_p50: percentile(&mut latencies, 50.0),
        latency_p99: percentile(&mut latencies, 99.0),
        handoff_p50: percentile(&mut handoffs, 50.0),
        handoff_p99: percentile(&mut handoffs, 99.0),
    }
}

/// [`hold_stats`] of each of `names` lock names on its own, summed up:
/// how evenly the holds spread, and the median of the names' handoff p50.
pub fn name_spread(holds: &[Hold], names: usize, t0: u128, t1: u128) -> NameSpread {
    let mut by_lock: BTreeMap<&LockName, Vec<Hold>> = BTreeMap::new();
    for h in holds {
        by_lock.entry(&h.lock).or_default().push(h.clone());
    }
    let stats: Vec<OpStats> = by_lock.values().map(|hs| hold_stats(hs, t0, t1)).collect();
    let mut ops: Vec<usize> = stats.iter().map(|s| s.ops).collect();
    ops.resize(names.max(ops.len()), 0);
    ops.sort_unstable();
    let mut p50s: Vec<f64> = stats.iter().filter_map(|s| s.handoff_p50).collect();
    NameSpread {
        names,
        served: stats.iter().filter(|s| s.ops > 0).count(),
        ops_min: ops.first().copied().unwrap_or(0),
        ops_median: ops.get(ops.len().saturating_sub(1) / 2).copied().unwrap_or(0),
        ops_max: ops.last().copied().unwrap_or(0),
        with_handoffs: p50s.len(),
        handoff_p50_median: percentile(&mut p50s, 50.0),
    }
}

/// Throughput and latency (first send → acknowledgement, retries
/// included) of ringd's increments acknowledged in (t0, t1].
fn ack_stats(acks: &[Ack], t0: u128, t1: u128) -> OpStats {
    let inside = |t: u128| t > t0 && t <= t1;
    let mut latencies: Vec<f64> =
        acks.iter().filter(|a| inside(a.at)).map(|a| a.at.saturating_sub(a.sent) as f64 / 1e3).collect();
    OpStats {
        ops: latencies.len(),
        window_s: (t1 - t0) as f64 / 1e9,
        latency_p50: percentile(&mut latencies, 50.0),
        latency_p99: percentile(&mut latencies, 99.0),
        handoff_p50: None,
        handoff_p99: None,
    }
}

/// One reported figure.
#[derive(Clone, Debug)]
struct Figure {
    name: &'static str,
    unit: &'static str,
    value: Option<f64>,
    /// value × L (a rate) or value / L (a time), or none.
    ratio: Option<f64>,
    ratio_is: &'static str,
    target: Option<String>,
    /// The target's bound in the figure's unit.
    target_value: Option<f64>,
    /// Whether the target is met (None: a reference only, or not measured).
    met: Option<bool>,
}

impl Figure {
    fn time(name: &'static str, value_us: Option<f64>, l_us: f64) -> Figure {
        Figure {
            name,
            unit: "µs",
            value: value_us,
            ratio: value_us.map(|v| v / l_us),
            ratio_is: "value / L",
            target: None,
            target_value: None,
            met: None,
        }
    }

    fn rate(name: &'static str, unit: &'static str, value: f64, l_us: f64) -> Figure {
        Figure {
            name,
            unit,
            value: Some(value),
            ratio: Some(value * l_us / 1e6),
            ratio_is: "value × L",
            target: None,
            target_value: None,
            met: None,
        }
    }

    fn count(name: &'static str, unit: &'static str, value: Option<f64>) -> Figure {
        Figure { name, unit, value, ratio: None, ratio_is: "none", target: None, target_value: None, met: None }
    }

    /// With a target `value ≤ bound` (or `≥` when `at_least`).
    fn target(mut self, text: String, bound: f64, at_least: bool) -> Figure {
        self.met = self.value.map(|v| if at_least { v >= bound } else { v <= bound });
        self.target = Some(text);
        self.target_value = Some(bound);
        self
    }

    /// With a target given for reference only (not judged here).
    fn reference(mut self, text: String) -> Figure {
        self.target = Some(text);
        self
    }

    fn json(&self, l_us: f64) -> J {
        J::obj([
            ("figure", J::s(self.name)),
            ("unit", J::s(self.unit)),
            ("value", J::opt(self.value)),
            ("L_us", J::from(l_us)),
            ("ratio", J::opt(self.ratio)),
            ("ratio_is", J::s(self.ratio_is)),
            ("target", J::opt_s(self.target.clone())),
            ("target_value", J::opt(self.target_value)),
            ("met", self.met.map_or(J::Null, J::Bool)),
        ])
    }

    fn value_text(&self) -> String {
        match (self.value, self.unit) {
            (None, _) => "—".into(),
            (Some(v), "µs") => human_us(v),
            (Some(v), u) if v >= 100.0 => format!("{v:.0} {u}"),
            (Some(v), u) => format!("{v:.2} {u}"),
        }
    }

    fn ratio_text(&self) -> String {
        match (self.ratio, self.ratio_is) {
            (Some(r), "value × L") => format!("{r:.4} per L"),
            (Some(r), _) => format!("{r:.1} × L"),
            (None, _) => "—".into(),
        }
    }
}

/// What one daemon run measured.
#[derive(Debug)]
struct DaemonRun {
    baseline: Baseline,
    settings: String,
    /// Where the daemon's binary is (its build profile's directory).
    binaries: String,
    stats: OpStats,
    messages_per_op: Option<f64>,
    cpu_us_per_op: Option<f64>,
    /// Durable state writes per operation, and the mean write, µs.
    writes_per_op: Option<f64>,
    write_mean_us: Option<f64>,
    /// tokenwatchd's token passes per second in the window.
    passes_per_s: Option<f64>,
    /// ringd's lookups: p50, p99 (µs), samples, failures.
    lookups: Option<(Option<f64>, Option<f64>, usize, usize)>,
    /// With `--names`: the holds per name.
    spread: Option<NameSpread>,
    /// What the checks found (None: passed).
    check_error: Option<String>,
    checked: String,
    failed_requests: usize,
    lost_holds: usize,
    first_failure: Option<String>,
}

/// The etcd side of `--against etcd`.
#[derive(Debug)]
struct EtcdRun {
    version: String,
    stats: OpStats,
    check_error: Option<String>,
    holds: usize,
    failures: usize,
    first_failure: Option<String>,
}

/// `ftlab bench DAEMON`.
pub fn run(o: &Opts, etcd_bin: Option<PathBuf>) -> Result<ExitCode> {
    let run = run_daemon(o)?;
    let etcd = match etcd_bin {
        Some(bin) => {
            if !o.json {
                eprintln!("ftlab bench: ntmutexd done; now etcd ({}) with the same workload …", bin.display());
            }
            Some(run_etcd(&bin, o)?)
        }
        None => None,
    };
    report(o, &run, etcd.as_ref())
}

fn run_daemon(o: &Opts) -> Result<DaemonRun> {
    let mut extra = String::new();
    if let Some(p) = o.loss {
        extra.push_str(&format!("chaos.drop_rate = {p}\n"));
    }
    extra.push_str(&o.extra);
    let mut c = Cluster::configure_in(&o.daemon, o.n, &extra, None)?;
    let settings = settings_of(&o.daemon, &c)?;
    if !o.json {
        eprintln!("ftlab bench {}: measuring L first …", o.daemon);
    }
    // L before the daemons start, so that they do not disturb it; fsync in
    // the directory that holds their state.
    let baseline = baseline::measure(c.dir(), ROUND_TRIPS)?;
    if !o.json {
        eprintln!("  {}; starting {} × {} …", baseline.line(), o.n, o.daemon);
    }
    c.start_all()?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let clock = Clock::start();
    let mut load = Load::new();
    {
        let _in = rt.enter();
        let addrs: Vec<_> = (1..=o.n as u32).map(|id| c.node(id).client).collect();
        for i in 0..o.clients {
            let node = o.node_of(i);
            let name = format!("c{}@{}", i + 1, node + 1);
            if o.is_ringd() {
                let mut rotated = addrs.clone();
                rotated.rotate_left(node);
                load.incr_client(name, rotated, ftlab::probe::COUNTER.to_string(), clock);
            } else {
                load.named_lock_client(name, addrs[node], o.lock_of(i), Duration::ZERO, clock);
            }
        }
    }
    let served = ftlab::wait_until(FIRST_SERVICE_WITHIN, || {
        let r = load.snapshot();
        !r.holds.is_empty() || !r.acks.is_empty()
    });
    if !served {
        let r = rt.block_on(load.stop());
        let why = first_failure(&r).unwrap_or_else(|| "no answer".into());
        bail!(
            "no client of {} was served within {FIRST_SERVICE_WITHIN:?} (first failure: {why}); node 1's log:\n{}",
            o.daemon,
            c.log(1)
        );
    }
    if !o.json {
        eprintln!("  first service; measuring {:?} …", o.duration);
    }
    let before = sample(o, &c)?;
    let t0 = clock.now();
    std::thread::sleep(o.duration);
    let t1 = clock.now();
    let after = sample(o, &c)?;
    let records = rt.block_on(load.stop());
    let lookups = if o.is_ringd() { Some(rt.block_on(lookups(&c))) } else { None };

    let stats = if o.is_ringd() { ack_stats(&records.acks, t0, t1) } else { hold_stats(&records.holds, t0, t1) };
    let spread = o.names.map(|k| name_spread(&records.holds, k, t0, t1));
    let (check_error, checked) = if o.is_ringd() {
        match rt.block_on(ftlab::probe::counter_value(&ftlab::probe::clients(&c))) {
            Ok(v) => (
                check_acks(&records.acks, v).err(),
                format!(
                    "{} acknowledged increments distinct, present (counter at the end: {v}) and ordered by fence",
                    records.acks.len()
                ),
            ),
            Err(e) => (Some(format!("could not read the counter at the end: {e:#}")), "acknowledged increments".into()),
        }
    } else {
        let checked = match o.names {
            None => format!("mutual exclusion and fences increasing over {} holds", records.holds.len()),
            Some(k) => format!(
                "per name, mutual exclusion and fences increasing, over {} holds of {}",
                records.holds.len(),
                names_text(k)
            ),
        };
        (check_exclusion_and_fences(&records.holds).err(), checked)
    };
    let per_op = |d: f64| (stats.ops > 0).then(|| d / stats.ops as f64);
    let window_s = (t1 - t0) as f64 / 1e9;
    let binaries = ftlab::bin(&o.daemon)?.parent().map(|d| d.display().to_string()).unwrap_or_default();
    Ok(DaemonRun {
        baseline,
        settings,
        binaries,
        messages_per_op: per_op(after.messages - before.messages),
        cpu_us_per_op: per_op(after.cpu_us - before.cpu_us),
        writes_per_op: per_op(after.writes - before.writes),
        write_mean_us: {
            let writes = after.writes - before.writes;
            (writes > 0.0).then(|| (after.write_s - before.write_s) * 1e6 / writes)
        },
        passes_per_s: o.udp().then(|| (after.passes - before.passes) / window_s),
        stats,
        lookups,
        spread,
        check_error,
        checked,
        failed_requests: records.events.iter().filter(|e| matches!(e, Event::Failed { .. })).count(),
        lost_holds: records.events.iter().filter(|e| matches!(e, Event::Lost { .. })).count(),
        first_failure: first_failure(&records),
    })
}

fn first_failure(r: &Records) -> Option<String> {
    r.events.first().map(|e| match e {
        Event::Failed { client, why, .. } => format!("{client}: {why}"),
        Event::Lost { client, why, .. } => format!("{client} lost its hold: {why}"),
    })
}

fn run_etcd(bin: &std::path::Path, o: &Opts) -> Result<EtcdRun> {
    let e = Etcd::start(bin)?;
    let r = etcd::run_locks(&e, o.clients, o.duration).with_context(|| format!("etcd's log:\n{}", e.log()))?;
    Ok(EtcdRun {
        version: e.version.clone(),
        stats: hold_stats(&r.holds, r.t0, r.t1),
        check_error: check_exclusion_and_fences(&r.holds).err(),
        holds: r.holds.len(),
        failures: r.failures.len(),
        first_failure: r.failures.first().map(|f| format!("{}: {}", f.0, f.2)),
    })
}

/// The daemon's own keys and timing, from `--check-config` of node 1.
pub fn settings_of(daemon: &str, c: &Cluster) -> Result<String> {
    let path = c.config_path(1);
    let path = path.to_str().ok_or_else(|| anyhow!("config path is not UTF-8"))?;
    let (code, out, err) = ftlab::run_once(daemon, &["--config", path, "--check-config"], &[])?;
    if code != 0 {
        bail!("{daemon} refuses the config (--extra?): {}", err.trim());
    }
    const COMMON: [&str; 8] =
        ["node_id", "listen", "client_listen", "metrics_listen", "cluster_id", "state_dir", "log_format", "log_level"];
    let mut section = String::new();
    let mut own = Vec::new();
    let mut timing = Vec::new();
    let mut chaos = Vec::new();
    for line in out.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        let Some((k, v)) = line.split_once('=') else { continue };
        let kv = format!("{}={}", k.trim(), v.trim());
        match section.as_str() {
            "" if !COMMON.contains(&k.trim()) => own.push(kv),
            "timing" => timing.push(kv),
            "chaos" if v.trim() != "0" && v.trim() != "0.0" => chaos.push(kv),
            _ => {}
        }
    }
    let mut s = format!("{}; timing {}", own.join(" "), timing.join(" "));
    if !chaos.is_empty() {
        s.push_str(&format!("; chaos {}", chaos.join(" ")));
    }
    Ok(s)
}

/// Messages, token passes and CPU of every node now.
fn sample(o: &Opts, c: &Cluster) -> Result<Sample> {
    let mut s = Sample::default();
    let sent = format!("{}_messages_sent_total", o.prefix());
    let passes = format!("{}_token_passes_total", o.prefix());
    let writes = format!("{}_state_write_seconds_count", o.prefix());
    let write_s = format!("{}_state_write_seconds_sum", o.prefix());
    for id in 1..=c.len() as u32 {
        let text = c.scrape(id).with_context(|| format!("scrape node {id}"))?;
        s.messages += ftlab::probe::sum_in(&text, &sent);
        s.passes += ftlab::probe::sum_in(&text, &passes);
        s.writes += ftlab::probe::sum_in(&text, &writes);
        s.write_s += ftlab::probe::sum_in(&text, &write_s);
        let pid = c.pid(id).ok_or_else(|| anyhow!("node {id} is not running"))?;
        s.cpu_us += ftlab::probe::cpu_us(pid)?;
    }
    Ok(s)
}

/// ringd: LookUp → LookedUp round trips on one connection per replica, in
/// turn: (p50, p99, samples, failures).
async fn lookups(c: &Cluster) -> (Option<f64>, Option<f64>, usize, usize) {
    let mut conns: Vec<RingClient> = Vec::new();
    for id in 1..=c.len() as u32 {
        if let Ok(rc) = RingClient::connect(c.node(id).client).await {
            conns.push(rc);
        }
    }
    let (mut times, mut failures) = (Vec::new(), 0);
    let end = Instant::now() + LOOKUP_BUDGET;
    if !conns.is_empty() {
        for k in 0..LOOKUPS {
            let at = k % conns.len();
            let rc = &mut conns[at];
            let t = Instant::now();
            match rc.look_up(Duration::from_secs(2)).await {
                Ok(_) => times.push(t.elapsed().as_secs_f64() * 1e6),
                Err(_) => failures += 1,
            }
            if Instant::now() >= end {
                break;
            }
        }
    }
    let samples = times.len();
    (percentile(&mut times, 50.0), percentile(&mut times, 99.0), samples, failures)
}

/// Where issue 39's targets for named locks are compared: with a run
/// without `--names` (docs/performance.md, Named locks).
const NAMED_REF: &str = "ref (performance.md, Named locks)";

/// The figures of a run, next to L and the targets.
fn figures(o: &Opts, r: &DaemonRun, etcd: Option<&EtcdRun>) -> (f64, Vec<Figure>) {
    let b = &r.baseline;
    let l = if o.udp() { b.udp.l_us } else { b.tcp.l_us };
    let n = o.n as f64;
    let s = &r.stats;
    let mut f = Vec::new();
    let thr = Figure::rate("throughput", "ops/s", s.throughput(), l);
    f.push(match (o.daemon.as_str(), etcd) {
        ("ntmutexd", Some(e)) => {
            let bound = 100.0 * e.stats.throughput();
            thr.target(format!("≥ 100 × etcd = {bound:.0} ops/s"), bound, true)
        }
        ("ntmutexd", None) => thr.reference("≥ 100 × etcd's (measure: --against etcd)".into()),
        _ if o.names.is_some() => thr.reference(format!("{NAMED_REF}: aggregate ≥ 20 × one name's")),
        _ => thr,
    });
    let (lat50, lat99) = if o.is_ringd() {
        ("counter.incr latency p50", "counter.incr latency p99")
    } else {
        ("acquire→grant p50", "acquire→grant p99")
    };
    f.push(Figure::time(lat50, s.latency_p50, l));
    f.push(Figure::time(lat99, s.latency_p99, l));
    if !o.is_ringd() {
        let h = Figure::time("handoff p50", s.handoff_p50, l);
        f.push(match o.daemon.as_str() {
            "ntmutexd" => h.target("≤ 4 × L".into(), 4.0 * l, false),
            _ if o.names.is_some() => {
                h.reference(format!("within a name, every name's pooled; {NAMED_REF}: ≤ one name's"))
            }
            _ => h,
        });
        f.push(Figure::time("handoff p99", s.handoff_p99, l));
        if let Some(spread) = &r.spread {
            f.push(Figure::time("handoff p50, name median", spread.handoff_p50_median, l).reference(format!(
                "the median of each name's own p50 ({} with handoffs)",
                names_text(spread.with_handoffs)
            )));
        }
    }
    if let Some((p50, p99, _, _)) = r.lookups {
        f.push(Figure::time("lookup p50", p50, l));
        let bound = (n + 2.0) * l + 1_000.0;
        f.push(Figure::time("lookup p99", p99, l).target(
            format!("≤ (N + 2) × L + 1 ms = {}", human_us(bound)),
            bound,
            false,
        ));
    }
    if let Some(p) = r.passes_per_s {
        let bound = (1e6 / (3.0 * b.udp.l_us)).min(1e6 / b.fsync_p50_us.max(1e-3));
        let text = format!("≥ min(1 / (3 × L_udp), 1 / fsync_p50) = {bound:.0} passes/s (no loss, no hold)");
        let fig = Figure::rate("token passes", "passes/s", p, l);
        // The target is for a loss-free ring: with --loss, a reference only.
        f.push(if o.loss.is_some_and(|p| p > 0.0) { fig.reference(text) } else { fig.target(text, bound, true) });
    }
    let msgs = Figure::count("messages per op", "msgs", r.messages_per_op);
    f.push(if o.daemon == "ntmutexd" {
        msgs.reference(format!(
            "ref ≤ log2(N) + 2 = {:.1} (light load, simulator; here contended, lease traffic included)",
            n.log2() + 2.0
        ))
    } else {
        msgs
    });
    let cpu = Figure::time("daemon CPU per op", r.cpu_us_per_op, l);
    f.push(match r.messages_per_op {
        Some(m) => {
            // The kernel's cost of the messages alone: each peer message
            // is sent and received by daemons; of a client message, the
            // daemon pays one end.
            let client = if o.is_ringd() { 2.0 } else { 4.0 };
            let peer_cpu = if o.udp() { b.udp.cpu_per_msg_us } else { b.tcp.cpu_per_msg_us };
            let writes = r.writes_per_op.unwrap_or(0.0);
            let floor = m * peer_cpu + client / 2.0 * b.tcp.cpu_per_msg_us + writes * b.fsync_cpu_us;
            let stores = if writes > 0.0 { format!(" + {writes:.2} writes × CPU per write") } else { String::new() };
            cpu.reference(format!(
                "ref: the kernel's cost {} = ({m:.2} peer + {client}/2 client msgs) × CPU per message{stores}",
                human_us(floor)
            ))
        }
        None => cpu,
    });
    f.push(Figure::count("state writes per op", "writes", r.writes_per_op));
    f.push(
        Figure::time("state write, mean", r.write_mean_us, l)
            .reference(format!("ref: the baseline's fsync_p50 {} (the same write, alone)", human_us(b.fsync_p50_us))),
    );
    (l, f)
}

fn report(o: &Opts, r: &DaemonRun, etcd: Option<&EtcdRun>) -> Result<ExitCode> {
    let (l, figs) = figures(o, r, etcd);
    let b = &r.baseline;
    let passed = r.check_error.is_none() && etcd.is_none_or(|e| e.check_error.is_none());
    let workload = if o.is_ringd() {
        format!("{} counter.incr clients (one counter), spread over the replicas", o.clients)
    } else if let Some(k) = o.names {
        let (least, most) = (o.clients / k, o.clients.div_ceil(k));
        let per_name = if least == most { format!("{least}") } else { format!("{least}–{most}") };
        format!(
            "{} lock clients spread over the nodes and over {} (client i asks {}: {per_name} per name), \
             empty critical section, {}",
            o.clients,
            names_text(k),
            if k == 1 { bench_name(0) } else { format!("bench-{{i mod {k}}}") },
            if most > 1 { "contending within a name" } else { "no contention (one client per name)" }
        )
    } else {
        format!("{} lock clients spread over the nodes, empty critical section, contending", o.clients)
    };
    let latency_note = if o.is_ringd() {
        "counter.incr latency: a client's first send of a request → its acknowledgement (retries included)"
    } else {
        "acquire→grant: a client's Acquire sent → its Granted read (one connection per client, kept)"
    };
    if o.json {
        let mut top: Vec<(String, J)> = vec![
            ("daemon".into(), J::s(&o.daemon)),
            ("n".into(), J::from(o.n)),
            ("clients".into(), J::from(o.clients)),
            ("names".into(), J::opt(o.names.map(|k| k as f64))),
            ("duration_s".into(), J::from(o.duration.as_secs_f64())),
            ("loss".into(), J::opt(o.loss)),
            ("workload".into(), J::s(workload)),
            ("settings".into(), J::s(&r.settings)),
            ("binaries".into(), J::s(&r.binaries)),
        ];
        top.extend(b.json_fields());
        top.extend([
            ("L_us".into(), J::from(l)),
            ("L_of".into(), J::s(if o.udp() { "udp" } else { "tcp" })),
            ("window_s".into(), J::from(r.stats.window_s)),
            ("ops".into(), J::from(r.stats.ops)),
            ("throughput".into(), J::from(r.stats.throughput())),
            ("messages_per_op".into(), J::opt(r.messages_per_op)),
            ("cpu_us_per_op".into(), J::opt(r.cpu_us_per_op)),
            ("state_writes_per_op".into(), J::opt(r.writes_per_op)),
            ("state_write_mean_us".into(), J::opt(r.write_mean_us)),
            ("checks".into(), J::s(if passed { "passed" } else { "failed" })),
            ("checked".into(), J::s(&r.checked)),
            ("check_error".into(), J::opt_s(r.check_error.clone())),
            ("failed_requests".into(), J::from(r.failed_requests)),
            ("lost_holds".into(), J::from(r.lost_holds)),
            ("first_failure".into(), J::opt_s(r.first_failure.clone())),
            ("latency_is".into(), J::s(latency_note)),
            ("figures".into(), J::Arr(figs.iter().map(|f| f.json(l)).collect())),
        ]);
        if let Some(sp) = &r.spread {
            top.push((
                "per_name".into(),
                J::obj([
                    ("names", J::from(sp.names)),
                    ("served", J::from(sp.served)),
                    ("ops_min", J::from(sp.ops_min)),
                    ("ops_median", J::from(sp.ops_median)),
                    ("ops_max", J::from(sp.ops_max)),
                    ("handoff_p50_median_us", J::opt(sp.handoff_p50_median)),
                    ("with_handoffs", J::from(sp.with_handoffs)),
                ]),
            ));
        }
        if let Some((_, _, samples, failures)) = r.lookups {
            top.push(("lookups".into(), J::obj([("samples", J::from(samples)), ("failures", J::from(failures))])));
        }
        if let Some(e) = etcd {
            let ratio = r.stats.throughput() / e.stats.throughput().max(1e-9);
            top.push((
                "etcd".into(),
                J::obj([
                    ("version", J::s(&e.version)),
                    ("ops", J::from(e.stats.ops)),
                    ("window_s", J::from(e.stats.window_s)),
                    ("throughput", J::from(e.stats.throughput())),
                    ("grant_p50_us", J::opt(e.stats.latency_p50)),
                    ("grant_p99_us", J::opt(e.stats.latency_p99)),
                    ("handoff_p50_us", J::opt(e.stats.handoff_p50)),
                    ("handoff_p99_us", J::opt(e.stats.handoff_p99)),
                    ("checks", J::s(if e.check_error.is_none() { "passed" } else { "failed" })),
                    ("check_error", J::opt_s(e.check_error.clone())),
                    ("holds", J::from(e.holds)),
                    ("failed_requests", J::from(e.failures)),
                    ("first_failure", J::opt_s(e.first_failure.clone())),
                ]),
            ));
            top.push((
                "vs_etcd".into(),
                J::obj([
                    ("throughput_ratio", J::from(ratio)),
                    ("target_ratio", J::from(100.0)),
                    ("met", J::from(ratio >= 100.0)),
                ]),
            ));
        }
        println!("{}", J::Obj(top));
    } else {
        println!(
            "ftlab bench {}: N = {}, {workload}, {:.2} s window{}",
            o.daemon,
            o.n,
            r.stats.window_s,
            o.loss.map_or(String::new(), |p| format!(", loss {:.0}%", p * 100.0))
        );
        println!("settings: {}", r.settings);
        let debug = std::path::Path::new(&r.binaries).file_name().is_some_and(|n| n == "debug");
        println!(
            "binaries: {}{}",
            r.binaries,
            if debug { " (a debug build: quote figures from `cargo build --release --workspace --bins`)" } else { "" }
        );
        println!(
            "baseline (this run): {}; L = L_{} = {} ({}'s peers speak {})",
            b.line(),
            if o.udp() { "udp" } else { "tcp" },
            human_us(l),
            o.daemon,
            if o.udp() { "UDP" } else { "TCP" }
        );
        println!();
        println!("{:<26} {:>14} {:>10} {:>15}  target", "figure", "value", "L", "ratio");
        for f in &figs {
            let met = match f.met {
                Some(true) => "  met",
                Some(false) => "  NOT met",
                None => "",
            };
            println!(
                "{:<26} {:>14} {:>10} {:>15}  {}{met}",
                f.name,
                f.value_text(),
                human_us(l),
                f.ratio_text(),
                f.target.as_deref().unwrap_or("")
            );
        }
        println!();
        println!("ops in the window: {}; {latency_note}", r.stats.ops);
        if let Some(sp) = &r.spread {
            println!(
                "names: {} ({}{}), {} served in the window; ops per name min / median / max: {} / {} / {}; \
                 handoff p50 per name, median over the {} with handoffs: {}",
                sp.names,
                bench_name(0),
                if sp.names > 1 { format!(" … {}", bench_name(sp.names - 1)) } else { String::new() },
                sp.served,
                sp.ops_min,
                sp.ops_median,
                sp.ops_max,
                names_text(sp.with_handoffs),
                sp.handoff_p50_median.map_or("—".to_string(), human_us)
            );
        }
        if let Some((_, _, samples, failures)) = r.lookups {
            println!("lookups: {samples} after the load, one connection per replica in turn, {failures} failed");
        }
        match &r.check_error {
            None => println!("checks: passed ({})", r.checked),
            Some(e) => println!("checks: FAILED: {e}"),
        }
        println!(
            "requests failed: {}{}{}",
            r.failed_requests,
            if o.is_ringd() { String::new() } else { format!(", holds lost: {}", r.lost_holds) },
            r.first_failure.as_ref().map_or(String::new(), |f| format!(" (first: {f})"))
        );
        if let Some(e) = etcd {
            print_etcd(o, r, e);
        }
    }
    if !passed {
        let why = r.check_error.clone().or_else(|| etcd.and_then(|e| e.check_error.clone())).unwrap_or_default();
        eprintln!("ftlab bench {}: a safety check failed: {why}", o.daemon);
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_etcd(o: &Opts, r: &DaemonRun, e: &EtcdRun) {
    let ratio = r.stats.throughput() / e.stats.throughput().max(1e-9);
    println!();
    println!(
        "against {} (single member, scratch data dir, v3 JSON gateway over HTTP/1.1), same workload: {} clients, {:.2} s window",
        e.version, o.clients, e.stats.window_s
    );
    println!("{:<20} {:>14} {:>14} {:>16}  target", "figure", "ntmutexd", "etcd", "ntmutexd / etcd");
    let t = |v: Option<f64>| v.map_or("—".to_string(), human_us);
    let ratio_of = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => format!("{:.2}", a / b),
        _ => "—".into(),
    };
    println!(
        "{:<20} {:>14} {:>14} {:>16}  ≥ 100 ×{}",
        "throughput",
        format!("{:.0} ops/s", r.stats.throughput()),
        format!("{:.1} ops/s", e.stats.throughput()),
        format!("{ratio:.1} ×"),
        if ratio >= 100.0 { "  met" } else { "  NOT met" }
    );
    for (name, a, b) in [
        ("acquire→grant p50", r.stats.latency_p50, e.stats.latency_p50),
        ("acquire→grant p99", r.stats.latency_p99, e.stats.latency_p99),
        ("handoff p50", r.stats.handoff_p50, e.stats.handoff_p50),
        ("handoff p99", r.stats.handoff_p99, e.stats.handoff_p99),
    ] {
        println!("{name:<20} {:>14} {:>14} {:>16}", t(a), t(b), ratio_of(a, b));
    }
    match &e.check_error {
        None => println!("etcd checks: passed (mutual exclusion and fences (header revisions) over {} holds)", e.holds),
        Some(err) => println!("etcd checks: FAILED: {err}"),
    }
    println!(
        "etcd requests failed: {}{}",
        e.failures,
        e.first_failure.as_ref().map_or(String::new(), |f| format!(" (first: {f})"))
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(client: &str, fence: u128, asked: u128, start: u128, end: u128) -> Hold {
        Hold { client: client.into(), lock: LockName::unnamed(), fence, asked: Some(asked), start, end: Some(end) }
    }

    fn named(lock: &str, client: &str, fence: u128, asked: u128, start: u128, end: u128) -> Hold {
        Hold { lock: LockName::parse(lock).unwrap(), ..hold(client, fence, asked, start, end) }
    }

    #[test]
    fn holds_give_throughput_handoffs_and_acquire_latency() {
        // a: asks 0, holds 10–20; b: asks 12, holds 25–30; a: asks 21,
        // holds 40–45; b: asks 31, holds 47–50 (ns × 1000 = µs).
        let us = 1_000;
        let holds = [
            hold("a", 1, 0, 10 * us, 20 * us),
            hold("b", 2, 12 * us, 25 * us, 30 * us),
            hold("a", 3, 21 * us, 40 * us, 45 * us),
            hold("b", 4, 31 * us, 47 * us, 50 * us),
        ];
        let s = hold_stats(&holds, 0, 100 * us);
        assert_eq!(s.ops, 4);
        // Handoffs 5, 10, 2 µs.
        assert_eq!(s.handoff_p50, Some(5.0));
        // Acquire → grant: 10, 13, 19, 16 µs (nearest rank).
        assert_eq!(s.latency_p50, Some(13.0));
        assert_eq!(s.latency_p99, Some(19.0));
        // Only holds that began inside the window count.
        assert_eq!(hold_stats(&holds, 30 * us, 100 * us).ops, 2);
    }

    #[test]
    fn handoffs_are_within_a_name() {
        let us = 1_000;
        // `x`: a 10–20, b 25–30 (handoff 5 µs). `y`: c 12–22, d 40–45
        // (handoff 18 µs). Interleaved in time: b's hold of `x` follows
        // c's of `y` by 3 µs, which is no handoff.
        let holds = [
            named("x", "a", 1, 0, 10 * us, 20 * us),
            named("y", "c", 2, 0, 12 * us, 22 * us),
            named("x", "b", 3, 0, 25 * us, 30 * us),
            named("y", "d", 4, 0, 40 * us, 45 * us),
        ];
        let s = hold_stats(&holds, 0, 100 * us);
        assert_eq!(s.ops, 4);
        assert_eq!(s.handoff_p50, Some(5.0));
        assert_eq!(s.handoff_p99, Some(18.0));
        // One client per name: no handoff at all.
        let alone = [named("x", "a", 1, 0, 10 * us, 20 * us), named("y", "b", 2, 0, 21 * us, 30 * us)];
        assert_eq!(hold_stats(&alone, 0, 100 * us).handoff_p50, None);
    }

    #[test]
    fn the_spread_over_names_counts_names_never_served() {
        let us = 1_000;
        let holds = [
            named("bench-0", "a", 1, 0, 10 * us, 20 * us),
            named("bench-0", "b", 2, 0, 24 * us, 30 * us),
            named("bench-0", "a", 5, 0, 40 * us, 45 * us),
            named("bench-1", "c", 3, 0, 12 * us, 22 * us),
            named("bench-1", "d", 4, 0, 30 * us, 35 * us),
        ];
        let sp = name_spread(&holds, 3, 0, 100 * us);
        // bench-2 never served: 0, 2, 3 holds.
        assert_eq!((sp.names, sp.served, sp.ops_min, sp.ops_median, sp.ops_max), (3, 2, 0, 2, 3));
        // bench-0's handoffs 4 and 10 µs (p50 4), bench-1's 8 µs: median
        // of the two names' p50s (nearest rank) 4.
        assert_eq!(sp.with_handoffs, 2);
        assert_eq!(sp.handoff_p50_median, Some(4.0));
    }

    #[test]
    fn a_client_asks_its_name() {
        let o = |names| Opts {
            daemon: "electd".into(),
            n: 5,
            clients: 10,
            names,
            duration: Duration::from_secs(1),
            loss: None,
            extra: String::new(),
            json: false,
        };
        assert!(o(None).lock_of(7).is_unnamed());
        assert_eq!(o(Some(3)).lock_of(7).as_str(), "bench-1");
        assert_eq!(o(Some(1000)).lock_of(999).as_str(), "bench-999");
        // Without names, or with one, client i asks through node i mod N.
        for names in [None, Some(1)] {
            assert_eq!((0..10).map(|i| o(names).node_of(i)).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]);
        }
        // 10 clients over 5 names on 5 nodes: each name's two clients on
        // two nodes, two clients per node.
        let nodes: Vec<usize> = (0..10).map(|i| o(Some(5)).node_of(i)).collect();
        assert_eq!(nodes, [0, 1, 2, 3, 4, 1, 2, 3, 4, 0]);
    }

    #[test]
    fn acks_give_send_to_acknowledgement_latency() {
        let a =
            |sent: u128, at: u128| Ack { client: "x".into(), sent: sent * 1_000, at: at * 1_000, value: 0, fence: 0 };
        let s = ack_stats(&[a(0, 10), a(10, 30), a(30, 35), a(35, 200)], 0, 100_000);
        assert_eq!(s.ops, 3);
        assert_eq!(s.latency_p50, Some(10.0));
        assert_eq!(s.latency_p99, Some(20.0));
    }
}
