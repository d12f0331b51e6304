//! Whole clusters on one machine: write configs with free loopback ports,
//! start N nodes of a daemon, SIGKILL and restart them, scrape their
//! metrics, ask their status, wait for conditions. `ftlab` (the tool) and
//! the real-process tests under `tests/` both run clusters with this.
//!
//! The daemons' binaries are found next to the running executable: beside
//! `ftlab` itself, or, for a test binary in `target/<profile>/deps/`, one
//! directory up (`cargo test --workspace` builds them, since every daemon
//! package has an integration test of its own; `cargo build --bins` also
//! does).
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use client::leader::Never;
use client::{Client, StatusReport};
use ftcore::Message;

pub mod probe;
mod relay;
pub mod workload;
pub use relay::{Partitions, TcpRelay, UdpRelay};

/// Path of a daemon binary: beside the running executable, or one
/// directory up (a test binary in `target/<profile>/deps/`).
pub fn bin(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let here = exe.parent().ok_or_else(|| anyhow!("odd executable path {}", exe.display()))?;
    for dir in [Some(here), here.parent()].into_iter().flatten() {
        let path = dir.join(name);
        if path.is_file() {
            return Ok(path);
        }
    }
    bail!("{name} not found beside {}: run `cargo build --workspace --bins` first", exe.display())
}

/// `n` distinct loopback ports that were free a moment ago (for TCP and
/// UDP), none handed out before by this process (clusters configured at
/// once, e.g. by `ftlab demo`'s threads, would otherwise be given one
/// another's ports between the choice and the daemons' bind).
///
/// They come from below the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), from a random place in the
/// 16,384 ports under it: a port from that range, free when chosen, could
/// be taken as the source port of any outgoing connection on the machine
/// (another test's client, a daemon's peer link) before the daemon it was
/// chosen for binds it (a CI run failed so: ntmutexd's node 3 "cannot
/// bind … Address already in use"). Each is also claimed among ftlab
/// processes for this process's life ([`claim_for_this_process`]). Where
/// no such room exists, ports the kernel picks (bind to port 0) are used.
pub fn free_ports(n: usize) -> Vec<u16> {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    // Held until all are chosen, so that no port comes twice.
    let (mut held, mut held_udp) = (Vec::new(), Vec::new());
    let mut ports = Vec::new();
    let (lo, hi) = below_ephemeral();
    let span = u32::from(hi.saturating_sub(lo));
    if span >= 1_024 {
        // Where to start looking: apart for processes started together
        // (no safety rests on it, so the clock will do).
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let start = (nanos ^ std::process::id().rotate_left(13)) % span;
        for k in 0..span {
            if ports.len() == n {
                break;
            }
            let port = lo + ((start + k) % span) as u16;
            if given.contains(&port) || !claim_for_this_process(port) {
                continue;
            }
            // Free for both transports (tokenwatchd's peers speak UDP).
            let (Ok(t), Ok(u)) =
                (TcpListener::bind(("127.0.0.1", port)), std::net::UdpSocket::bind(("127.0.0.1", port)))
            else {
                continue;
            };
            given.insert(port);
            ports.push(port);
            held.push(t);
            held_udp.push(u);
        }
    }
    while ports.len() < n {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = l.local_addr().expect("bound").port();
        if given.insert(port) {
            ports.push(port);
        }
        held.push(l);
    }
    ports
}

/// Whether `port` is now this process's among ftlab processes: an
/// `flock` on `<tmp>/ftlab-ports/<port>`, held until the process exits
/// (the kernel drops it then, so a crash leaves nothing behind). Two
/// ftlab processes at once (the demo tests run two) would otherwise each
/// find a port free and hand it to their own daemons before either binds
/// it (a CI run failed so: electd's node 1, metrics port "Address already
/// in use"). A lock that cannot be taken or made: not this port.
fn claim_for_this_process(port: u16) -> bool {
    let dir = std::env::temp_dir().join("ftlab-ports");
    let lock = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(port.to_string()))
    });
    match lock {
        Ok(f) if f.try_lock().is_ok() => {
            HELD.lock().unwrap_or_else(|e| e.into_inner()).push((port, f));
            true
        }
        _ => false,
    }
}

/// The port claims this process holds ([`claim_for_this_process`]).
static HELD: std::sync::Mutex<Vec<(u16, std::fs::File)>> = std::sync::Mutex::new(Vec::new());

/// Whether this process holds `port`'s claim already, or takes it now.
fn claimed_here(port: u16) -> bool {
    let held = HELD.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|(p, _)| *p == port);
    held || claim_for_this_process(port)
}

/// The 16,384 ports (at most, none below 1,024) just under the kernel's
/// ephemeral range, as `[lo, hi)`.
fn below_ephemeral() -> (u16, u16) {
    let first = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse::<u16>().ok()))
        .unwrap_or(32_768);
    (first.saturating_sub(16_384).max(1_024), first)
}

/// Polls `f` every 20 ms until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Addresses of one node.
#[derive(Clone, Copy, Debug)]
pub struct Endpoints {
    /// Node id.
    pub id: u32,
    /// Peer protocol.
    pub peer: SocketAddr,
    /// Client API.
    pub client: SocketAddr,
    /// Prometheus.
    pub metrics: SocketAddr,
}

/// A cluster of one daemon's processes, killed when dropped.
///
/// Each node keeps its durable state in `<dir>/state/node<id>`. When that
/// `state` directory did not exist yet (a new cluster), each node's first
/// start passes `--new-cluster`; later starts (restarts) never do.
#[derive(Debug)]
pub struct Cluster {
    daemon: String,
    dir: PathBuf,
    /// Removes `dir` on drop when the cluster made it.
    _scratch: Option<tempfile::TempDir>,
    nodes: Vec<Endpoints>,
    procs: Vec<Option<Child>>,
    /// Whether `dir` held no state when configured.
    new_cluster: bool,
    /// Whether each node has been started (by this value) before.
    started: Vec<bool>,
    /// The UDP relay the peers talk through (`start_relayed`).
    relay: Option<UdpRelay>,
    /// The TCP relay the peers talk through (`start_relayed`).
    tcp_relay: Option<TcpRelay>,
}

impl Cluster {
    /// Writes configs for `n` nodes (ids 1..=n, ring in id order), adding
    /// `extra` TOML to each (daemon keys, timing), and starts them all.
    pub fn start(daemon: &str, n: usize, extra: &str) -> Result<Cluster> {
        let mut c = Cluster::configure(daemon, n, extra)?;
        c.start_all()?;
        Ok(c)
    }

    /// Writes the configs (in a scratch directory removed on drop) but
    /// starts nothing.
    pub fn configure(daemon: &str, n: usize, extra: &str) -> Result<Cluster> {
        Cluster::configure_in(daemon, n, extra, None)
    }

    /// Writes the configs in `dir` (kept), or in a scratch directory
    /// removed on drop, but starts nothing.
    pub fn configure_in(daemon: &str, n: usize, extra: &str, dir: Option<PathBuf>) -> Result<Cluster> {
        Cluster::configure_with(daemon, n, extra, dir, false, &[])
    }

    /// Like [`configure_in`](Self::configure_in) on `dir`, but each node
    /// whose config is already there keeps the addresses it records
    /// ([`recorded_endpoints`]), so that restarting a cluster in its
    /// directory leaves every address (peers', clients', Prometheus
    /// targets) as it was; only nodes without one get free ports. Returns
    /// the ids of the nodes whose addresses were kept. A kept port that
    /// something else now holds is an error that names it.
    pub fn configure_reusing(daemon: &str, n: usize, extra: &str, dir: PathBuf) -> Result<(Cluster, Vec<u32>)> {
        let mut recorded = Vec::with_capacity(n);
        for id in 1..=n as u32 {
            let path = dir.join(format!("node{id}.toml"));
            let e = recorded_endpoints(&path, id)?;
            if let Some(e) = &e {
                for (port, what) in [
                    (e.peer.port(), "listen"),
                    (e.client.port(), "client_listen"),
                    (e.metrics.port(), "metrics_listen"),
                ] {
                    let free = claimed_here(port)
                        && TcpListener::bind(("127.0.0.1", port)).is_ok()
                        && (what != "listen" || std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok());
                    if !free {
                        bail!(
                            "port {port} ({what} of node {id}, recorded in {}) is in use by another process: stop it, \
                             or start the cluster in a new --dir",
                            path.display()
                        );
                    }
                }
            }
            recorded.push(e);
        }
        let kept = recorded.iter().flatten().map(|e| e.id).collect();
        let c = Cluster::configure_with(daemon, n, extra, Some(dir), false, &recorded)?;
        Ok((c, kept))
    }

    /// Like [`start`](Self::start), but the peers talk through a relay
    /// that can partition them ([`partitions`](Self::partitions)): a
    /// [`UdpRelay`] for tokenwatchd ([`relay`](Self::relay)), a
    /// [`TcpRelay`] for the others.
    pub fn start_relayed(daemon: &str, n: usize, extra: &str) -> Result<Cluster> {
        let mut c = Cluster::configure_with(daemon, n, extra, None, true, &[])?;
        c.start_all()?;
        Ok(c)
    }

    /// The UDP relay between the peers, for a tokenwatchd cluster started
    /// relayed.
    pub fn relay(&self) -> Option<&UdpRelay> {
        self.relay.as_ref()
    }

    /// The relay between the peers (UDP or TCP), for a cluster started
    /// relayed.
    pub fn partitions(&self) -> Option<&dyn Partitions> {
        match (&self.relay, &self.tcp_relay) {
            (Some(r), _) => Some(r),
            (None, Some(r)) => Some(r),
            (None, None) => None,
        }
    }

    /// `recorded[i]`, where given, is node `i + 1`'s addresses; the other
    /// nodes get free ports.
    fn configure_with(
        daemon: &str,
        n: usize,
        extra: &str,
        dir: Option<PathBuf>,
        relayed: bool,
        recorded: &[Option<Endpoints>],
    ) -> Result<Cluster> {
        let (dir, scratch) = match dir {
            Some(d) => {
                std::fs::create_dir_all(&d).with_context(|| format!("create {}", d.display()))?;
                (d, None)
            }
            None => {
                let t = tempfile::tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let kept = |i: usize| recorded.get(i).copied().flatten();
        let mut ports = free_ports(3 * (0..n).filter(|&i| kept(i).is_none()).count()).into_iter();
        let mut port = || SocketAddr::from(([127, 0, 0, 1], ports.next().expect("enough free ports")));
        let nodes: Vec<Endpoints> = (0..n)
            .map(|i| match kept(i) {
                Some(e) => Endpoints { id: i as u32 + 1, ..e },
                None => Endpoints { id: i as u32 + 1, peer: port(), client: port(), metrics: port() },
            })
            .collect();
        let real: Vec<SocketAddr> = nodes.iter().map(|e| e.peer).collect();
        let udp = relayed && daemon == "tokenwatchd";
        let relay = if udp { Some(UdpRelay::start(&real)?) } else { None };
        let tcp_relay = if relayed && !udp { Some(TcpRelay::start(&real)?) } else { None };
        // Node `me`'s view of node `e`'s address: through a relay if any
        // (the TCP relay has a port per ordered pair).
        let peer_addr = |me: u32, e: &Endpoints| match (&relay, &tcp_relay) {
            (Some(r), _) => r.addr(e.id),
            (None, Some(r)) if e.id != me => r.addr(me, e.id),
            _ => e.peer,
        };
        let peers = |me: u32| -> String {
            nodes.iter().map(|e| format!("[[peers]]\nid = {}\naddr = \"{}\"\n\n", e.id, peer_addr(me, e))).collect()
        };
        let new_cluster = !dir.join("state").exists();
        for e in &nodes {
            let state_dir = toml_string(&state_dir_in(&dir, e.id))?;
            let toml = format!(
                "node_id = {}\nlisten = \"{}\"\nclient_listen = \"{}\"\nmetrics_listen = \"{}\"\nstate_dir = {state_dir}\n\
                 {extra}\n\n{}",
                e.id,
                e.peer,
                e.client,
                e.metrics,
                peers(e.id)
            );
            std::fs::write(dir.join(format!("node{}.toml", e.id)), toml)?;
        }
        Ok(Cluster {
            daemon: daemon.to_string(),
            dir,
            _scratch: scratch,
            procs: (0..n).map(|_| None).collect(),
            nodes,
            new_cluster,
            started: vec![false; n],
            relay,
            tcp_relay,
        })
    }

    /// The state directory of node `id` (`<dir>/state/node<id>`).
    pub fn state_dir(&self, id: u32) -> PathBuf {
        state_dir_in(&self.dir, id)
    }

    /// Whether the cluster's directory held no state when it was configured,
    /// so that first starts pass `--new-cluster`.
    pub fn is_new_cluster(&self) -> bool {
        self.new_cluster
    }

    /// The config file of node `id`.
    pub fn config_path(&self, id: u32) -> PathBuf {
        self.dir.as_path().join(format!("node{id}.toml"))
    }

    /// The scratch directory (configs, logs).
    pub fn dir(&self) -> &Path {
        self.dir.as_path()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a cluster has at least one node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Writes a Prometheus `file_sd` targets file for every node's metrics
    /// endpoint and returns its path.
    pub fn write_file_sd(&self) -> Result<PathBuf> {
        let targets: Vec<String> = self.nodes.iter().map(|e| format!("\"{}\"", e.metrics)).collect();
        let body =
            format!("[{{\"targets\": [{}], \"labels\": {{\"job\": \"{}\"}}}}]\n", targets.join(", "), self.daemon);
        let path = self.dir.join("targets.json");
        std::fs::write(&path, body)?;
        Ok(path)
    }

    /// Endpoints of node `id`.
    pub fn node(&self, id: u32) -> Endpoints {
        self.nodes[id as usize - 1]
    }

    /// Starts node `id` (its log goes to `node<id>.log`, appended).
    pub fn spawn(&mut self, id: u32) -> Result<()> {
        self.spawn_with_env(id, &[])
    }

    /// Starts node `id` with extra environment variables. Its first start
    /// in a new cluster passes `--new-cluster`.
    pub fn spawn_with_env(&mut self, id: u32, env: &[(&str, &str)]) -> Result<()> {
        self.spawn_wrapped(id, env, &[])
    }

    /// Starts node `id` under `wrapper` (a command and its arguments that
    /// end by running the daemon, e.g. `prlimit --nofile=96:96 --`), with
    /// extra environment variables.
    pub fn spawn_wrapped(&mut self, id: u32, env: &[(&str, &str)], wrapper: &[&str]) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.as_path().join(format!("node{id}.log")))?;
        let first = !std::mem::replace(&mut self.started[id as usize - 1], true);
        let daemon = bin(&self.daemon)?;
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&daemon);
                c
            }
            None => Command::new(&daemon),
        };
        let child = cmd
            .arg("--config")
            .arg(self.config_path(id))
            .args((self.new_cluster && first).then_some("--new-cluster"))
            .env("RUST_LOG", std::env::var("FTLAB_LOG").unwrap_or_else(|_| "info".into()))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {} node {id}", self.daemon))?;
        self.procs[id as usize - 1] = Some(child);
        Ok(())
    }

    /// Waits until node `id` accepts client connections.
    pub fn wait_ready(&mut self, id: u32) -> Result<()> {
        let addr = self.node(id).client;
        let ok = wait_until(Duration::from_secs(20), || TcpStream::connect(addr).is_ok());
        if !ok {
            bail!("node {id} never listened on {addr}; log:\n{}", self.log(id));
        }
        Ok(())
    }

    /// Starts every node, then waits until each listens and has recovered
    /// its promises ([`wait_recovered`](Self::wait_recovered)).
    pub fn start_all(&mut self) -> Result<()> {
        let n = self.nodes.len() as u32;
        for id in 1..=n {
            self.spawn(id)?;
        }
        for id in 1..=n {
            self.wait_ready(id)?;
        }
        self.wait_recovered()
    }

    /// Waits until every running node has its promises: a fresh node (a
    /// new cluster's) counts in no majority until its peers have told it
    /// what they promised (foundation.md, Fresh nodes), so a test that stops
    /// a peer before then would wait on a cluster that is right to wait.
    /// A daemon whose status has no `recovered` detail counts as recovered.
    pub fn wait_recovered(&self) -> Result<()> {
        // On a thread of its own: the caller may be inside a runtime already.
        std::thread::scope(|s| s.spawn(|| self.wait_recovered_here()).join())
            .map_err(|_| anyhow!("waiting for recovery panicked"))?
    }

    fn wait_recovered_here(&self) -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        for id in 1..=self.nodes.len() as u32 {
            if self.procs[id as usize - 1].is_none() {
                continue;
            }
            let recovered = || {
                rt.block_on(self.status::<Never, Never>(id))
                    .is_ok_and(|s| s.details.iter().find(|(k, _)| k == "recovered").is_none_or(|(_, v)| v == "true"))
            };
            if !wait_until(Duration::from_secs(20), recovered) {
                bail!("node {id} did not recover its promises within 20 s; log:\n{}", self.log(id));
            }
        }
        Ok(())
    }

    /// Node `id`'s log so far.
    pub fn log(&self, id: u32) -> String {
        std::fs::read_to_string(self.dir.as_path().join(format!("node{id}.log"))).unwrap_or_default()
    }

    /// SIGKILLs node `id` and reaps it.
    pub fn kill(&mut self, id: u32) {
        if let Some(mut child) = self.procs[id as usize - 1].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERMs node `id` and waits for its exit status.
    pub fn terminate(&mut self, id: u32, timeout: Duration) -> Result<ExitStatus> {
        let mut child = self.procs[id as usize - 1].take().ok_or_else(|| anyhow!("node {id} is not running"))?;
        signal(child.id(), "TERM")?;
        let end = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= end {
                let _ = child.kill();
                bail!("node {id} did not exit within {timeout:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERMs every running node at once, then waits for them all, so
    /// that stopping N nodes takes as long as the slowest one, not the sum
    /// of them. Nodes still running `timeout` after the signal are
    /// SIGKILLed (an error each). Returns each started node's outcome, in
    /// id order; a node that had exited already gives its exit status.
    pub fn terminate_all(&mut self, timeout: Duration) -> Vec<(u32, Result<ExitStatus>)> {
        let mut running: Vec<(u32, Child)> = Vec::new();
        let mut out: Vec<(u32, Result<ExitStatus>)> = Vec::new();
        for (i, slot) in self.procs.iter_mut().enumerate() {
            let id = i as u32 + 1;
            let Some(mut child) = slot.take() else { continue };
            match child.try_wait() {
                // Exited and reaped: its PID may be another process's now.
                Ok(Some(status)) => out.push((id, Ok(status))),
                _ => running.push((id, child)),
            }
        }
        if !running.is_empty() {
            // One `kill` for all of them: the nodes get the signal together.
            let signalled = Command::new("kill")
                .arg("-TERM")
                .args(running.iter().map(|(_, c)| c.id().to_string()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if !signalled.is_ok_and(|s| s.success()) {
                // Some may have exited meanwhile; the wait below tells.
                for (_, c) in &running {
                    let _ = signal(c.id(), "TERM");
                }
            }
        }
        let end = Instant::now() + timeout;
        while !running.is_empty() {
            let mut i = 0;
            while i < running.len() {
                match running[i].1.try_wait() {
                    Ok(Some(status)) => {
                        let (id, _) = running.swap_remove(i);
                        out.push((id, Ok(status)));
                    }
                    Ok(None) => i += 1,
                    Err(e) => {
                        let (id, mut c) = running.swap_remove(i);
                        let _ = c.kill();
                        let _ = c.wait();
                        out.push((id, Err(anyhow!(e).context(format!("wait for node {id}")))));
                    }
                }
            }
            if running.is_empty() {
                break;
            }
            if Instant::now() >= end {
                for (id, mut c) in running.drain(..) {
                    let _ = c.kill();
                    let _ = c.wait();
                    out.push((id, Err(anyhow!("node {id} did not exit within {timeout:?} of SIGTERM"))));
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        out.sort_by_key(|(id, _)| *id);
        out
    }

    /// Restarts a killed node and waits until it is ready.
    pub fn restart(&mut self, id: u32) -> Result<()> {
        self.spawn(id)?;
        self.wait_ready(id)
    }

    /// The daemon this cluster runs.
    pub fn daemon(&self) -> &str {
        &self.daemon
    }

    /// Node `id`'s process id, while it is started.
    pub fn pid(&self, id: u32) -> Option<u32> {
        self.procs[id as usize - 1].as_ref().map(Child::id)
    }

    /// Whether node `id`'s process is running.
    pub fn is_running(&mut self, id: u32) -> bool {
        self.procs[id as usize - 1].as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Node `id`'s Prometheus exposition text.
    pub fn scrape(&self, id: u32) -> Result<String> {
        scrape(self.node(id).metrics)
    }

    /// The value of one sample (`name{labels}` exactly as exposed, or a
    /// bare name) on node `id`.
    pub fn metric(&self, id: u32, sample: &str) -> Option<f64> {
        metric_value(&self.scrape(id).ok()?, sample)
    }

    /// Node `id`'s status through its client API.
    pub async fn status<R: Message, P: Message>(&self, id: u32) -> Result<StatusReport> {
        let mut c = Client::<R, P>::connect(self.node(id).client).await?;
        Ok(tokio::time::timeout(Duration::from_secs(5), c.status()).await??)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for id in 1..=self.procs.len() as u32 {
            self.kill(id);
        }
    }
}

/// The addresses that the node config at `path` (as [`Cluster`] writes
/// it) records for node `id`: `None` when there is no such file; an error
/// when it exists but does not give all three (`listen`, `client_listen`,
/// `metrics_listen`) or names another node.
pub fn recorded_endpoints(path: &Path, id: u32) -> Result<Option<Endpoints>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let e = parse_endpoints(&text).ok_or_else(|| {
        anyhow!(
            "{} does not record node_id, listen, client_listen and metrics_listen: fix it, or remove it to give \
             the node new ports",
            path.display()
        )
    })?;
    if e.id != id {
        bail!("{} is node {}'s config, not node {id}'s", path.display(), e.id);
    }
    Ok(Some(e))
}

/// `node_id`, `listen`, `client_listen` and `metrics_listen` from a node
/// config's top-level keys (before its first `[table]`); `None` unless
/// all four are there.
fn parse_endpoints(toml: &str) -> Option<Endpoints> {
    let (mut id, mut peer, mut client, mut metrics) = (None, None, None, None);
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            break;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        let value = value.trim();
        let addr = || value.strip_prefix('"')?.split_once('"')?.0.parse::<SocketAddr>().ok();
        match key.trim() {
            "node_id" => id = value.split_whitespace().next().and_then(|v| v.parse::<u32>().ok()),
            "listen" => peer = addr(),
            "client_listen" => client = addr(),
            "metrics_listen" => metrics = addr(),
            _ => {}
        }
    }
    Some(Endpoints { id: id?, peer: peer?, client: client?, metrics: metrics? })
}

/// `<dir>/state/node<id>`.
fn state_dir_in(dir: &Path, id: u32) -> PathBuf {
    dir.join("state").join(format!("node{id}"))
}

/// `path` as a TOML basic string.
fn toml_string(path: &Path) -> Result<String> {
    let s = path.to_str().ok_or_else(|| anyhow!("{} is not UTF-8", path.display()))?;
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    Ok(out)
}

/// GETs `/metrics` from `addr`.
pub fn scrape(addr: SocketAddr) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    let (head, rest) = body.split_once("\r\n\r\n").ok_or_else(|| anyhow!("no HTTP body"))?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("metrics answered {head}");
    }
    Ok(rest.to_string())
}

/// Finds `sample` (a metric name with its exact label set, or a bare name)
/// in exposition text.
pub fn metric_value(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.rsplit_once(' ').filter(|(k, _)| *k == sample).and_then(|(_, v)| v.parse().ok()))
}

/// Sends signal `sig` (`TERM`, `STOP`, `CONT`, …) to process `pid`.
pub fn signal(pid: u32, sig: &str) -> Result<()> {
    let ok = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status()?.success();
    if !ok {
        bail!("kill -{sig} {pid} failed");
    }
    Ok(())
}

/// Runs a daemon binary with arguments and returns (exit code, stderr).
pub fn run_once(daemon: &str, args: &[&str], env: &[(&str, &str)]) -> Result<(i32, String, String)> {
    let mut cmd = Command::new(bin(daemon)?);
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The daemons `ftlab` runs, by binary name.
pub const DAEMONS: [&str; 5] = ["ntmutexd", "tokenwatchd", "electd", "ringd", "hbringd"];

/// `name` if it is one of [`DAEMONS`], or why not: a clap value parser, so
/// that an unknown daemon is a usage error (exit status 2, with the list).
pub fn parse_daemon(name: &str) -> std::result::Result<String, String> {
    if DAEMONS.contains(&name) {
        Ok(name.to_string())
    } else {
        Err(format!("unknown daemon {name}: one of {}", DAEMONS.join(", ")))
    }
}

/// Checks that `name` is one of [`DAEMONS`] and that its binary is built
/// (beside the running executable; see [`bin`]).
pub fn check_daemon(name: &str) -> Result<()> {
    if !DAEMONS.contains(&name) {
        bail!("unknown daemon {name}: one of {}", DAEMONS.join(", "));
    }
    bin(name).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_values_are_found_by_exact_sample() {
        let text = "# HELP x y\nx_total{reason=\"a\"} 3\nx_total{reason=\"b\"} 4\ny 1.5\n";
        assert_eq!(metric_value(text, "x_total{reason=\"b\"}"), Some(4.0));
        assert_eq!(metric_value(text, "y"), Some(1.5));
        assert_eq!(metric_value(text, "x_total"), None);
    }

    #[test]
    fn daemons_are_parsed_by_name() {
        for d in DAEMONS {
            assert_eq!(parse_daemon(d).as_deref(), Ok(d));
        }
        let e = parse_daemon("etcd").unwrap_err();
        assert!(e.contains("unknown daemon etcd") && e.contains(&DAEMONS.join(", ")), "{e}");
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string(Path::new("/tmp/a b")).unwrap(), "\"/tmp/a b\"");
        assert_eq!(toml_string(Path::new("/tmp/a\"b\\c\n")).unwrap(), "\"/tmp/a\\\"b\\\\c\\u000A\"");
    }

    #[test]
    fn configs_name_a_state_dir_per_node_and_new_clusters_are_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cluster::configure_in("ntmutexd", 2, "", Some(dir.path().to_path_buf())).unwrap();
        assert!(c.is_new_cluster());
        let cfg = std::fs::read_to_string(c.config_path(2)).unwrap();
        assert!(cfg.contains(&format!("state_dir = \"{}\"", dir.path().join("state/node2").display())), "{cfg}");
        assert_eq!(c.state_dir(1), dir.path().join("state/node1"));
        std::fs::create_dir_all(c.state_dir(1)).unwrap();
        let again = Cluster::configure_in("ntmutexd", 2, "", Some(dir.path().to_path_buf())).unwrap();
        assert!(!again.is_new_cluster());
    }

    #[test]
    fn the_endpoints_a_config_records_are_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cluster::configure_in("ntmutexd", 3, "max_hold_ms = 5\n", Some(dir.path().to_path_buf())).unwrap();
        for id in 1..=3 {
            let e = recorded_endpoints(&c.config_path(id), id).unwrap().expect("recorded");
            let want = c.node(id);
            assert_eq!((e.id, e.peer, e.client, e.metrics), (want.id, want.peer, want.client, want.metrics));
        }
        assert!(recorded_endpoints(&dir.path().join("node9.toml"), 9).unwrap().is_none());
        assert!(recorded_endpoints(&c.config_path(2), 3).is_err(), "node 2's config read as node 3's");
        drop(c);

        // Configured again in the same directory: the same addresses; a
        // node with no config there (node 3 now) gets new ones.
        std::fs::remove_file(dir.path().join("node3.toml")).unwrap();
        let before: Vec<_> = (1..=2)
            .map(|id| recorded_endpoints(&dir.path().join(format!("node{id}.toml")), id).unwrap().unwrap())
            .collect();
        let (again, kept) = Cluster::configure_reusing("ntmutexd", 3, "", dir.path().to_path_buf()).unwrap();
        assert_eq!(kept, [1, 2]);
        for e in &before {
            let now = again.node(e.id);
            assert_eq!((now.peer, now.client, now.metrics), (e.peer, e.client, e.metrics));
        }
        let fresh = again.node(3);
        assert!(before.iter().all(|e| ![e.peer, e.client, e.metrics].contains(&fresh.peer)));
        assert!(recorded_endpoints(&again.config_path(3), 3).unwrap().is_some());

        // A kept port that something else holds is refused, by name.
        let taken = TcpListener::bind(again.node(1).metrics).unwrap();
        drop(again);
        let err = Cluster::configure_reusing("ntmutexd", 3, "", dir.path().to_path_buf()).unwrap_err().to_string();
        assert!(
            err.contains(&taken.local_addr().unwrap().port().to_string()) && err.contains("metrics_listen of node 1"),
            "{err}"
        );
    }

    #[test]
    fn endpoints_are_parsed_from_top_level_keys_only() {
        let toml = "# a comment\nnode_id = 4 # me\n  listen = \"127.0.0.1:7001\"\nclient_listen=\"127.0.0.1:7002\"\n\
                    metrics_listen = \"127.0.0.1:7003\" # scraped\n\n[[peers]]\nid = 1\nlisten = \"127.0.0.1:9\"\n";
        let e = parse_endpoints(toml).unwrap();
        assert_eq!((e.id, e.peer.port(), e.client.port(), e.metrics.port()), (4, 7001, 7002, 7003));
        assert!(parse_endpoints("node_id = 1\nlisten = \"127.0.0.1:1\"\nclient_listen = \"127.0.0.1:2\"\n").is_none());
        assert!(parse_endpoints(
            "node_id = 1\nlisten = \"x\"\nclient_listen = \"127.0.0.1:2\"\nmetrics_listen = \"127.0.0.1:3\"\n"
        )
        .is_none());
        // Keys under a table are not the node's.
        assert!(parse_endpoints("node_id = 1\n[x]\nlisten = \"127.0.0.1:1\"\nclient_listen = \"127.0.0.1:2\"\nmetrics_listen = \"127.0.0.1:3\"\n").is_none());
    }

    #[test]
    fn free_ports_are_distinct_free_and_below_the_ephemeral_range() {
        let p = free_ports(10);
        let mut q = p.clone();
        q.sort_unstable();
        q.dedup();
        assert_eq!(q.len(), 10);
        let (lo, hi) = below_ephemeral();
        if hi - lo >= 1_024 {
            // No outgoing connection's source port can take them.
            assert!(p.iter().all(|x| (lo..hi).contains(x)), "{p:?} not in {lo}..{hi}");
        }
        for x in p {
            assert!(TcpListener::bind(("127.0.0.1", x)).is_ok() && std::net::UdpSocket::bind(("127.0.0.1", x)).is_ok());
            if hi - lo >= 1_024 {
                // Claimed: another ftlab process (here, another open file
                // description of the lock) cannot take it.
                assert!(!claim_for_this_process(x), "{x} claimed twice");
            }
        }
    }
}
