//! `ftlab up`, `ftlab kill`, `ftlab restart` and the guard that makes the
//! nodes die with ftlab.
//!
//! `ftlab up` listens on the Unix socket `DIR/ftlab.sock` for one-line
//! commands (`kill N`, `restart N`) and answers one line (`ok …` or
//! `error …`); `ftlab kill` and `ftlab restart` are its clients. It also
//! keeps `DIR/ftlab.pids` (one line per started node: `PID CONFIG_PATH`,
//! rewritten atomically after every start) and a guard process
//! (`ftlab guard DIR/ftlab.pids`) whose stdin is a pipe that `ftlab up`
//! holds and never writes: when ftlab exits or dies, however it dies, the
//! guard reads end of file and SIGKILLs every listed PID that still runs
//! that config.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use ftlab::Cluster;
use tokio::signal::unix::{signal, SignalKind};

/// The control socket, in the cluster's directory.
const SOCKET: &str = "ftlab.sock";
/// The PIDs the guard kills, in the cluster's directory.
const PIDS: &str = "ftlab.pids";
/// The longest request line `ftlab up` reads.
const MAX_REQUEST: u64 = 64;
/// The longest answer `ftlab kill` / `ftlab restart` reads.
const MAX_ANSWER: u64 = 4096;
/// Deadline for reading a request and for writing an answer.
const IO_DEADLINE: Duration = Duration::from_secs(5);
/// How long a restarted node has to listen on its client port.
const READY_WITHIN: Duration = Duration::from_secs(20);
/// How long the nodes have to exit after SIGTERM when `ftlab up` stops.
const STOP_WITHIN: Duration = Duration::from_secs(5);
/// How long a connection waits for `ftlab up` to carry a command out.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Which daemon: ntmutexd, tokenwatchd, electd, ringd or hbringd.
    #[arg(value_parser = ftlab::parse_daemon)]
    daemon: String,
    /// Number of nodes.
    #[arg(short = 'n', long, default_value_t = 5)]
    nodes: usize,
    /// Where to write configs and logs (kept); default: a new temporary
    /// directory, kept too (its path is printed).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct NodeArgs {
    /// The node's id (1..=N).
    node: u32,
    /// The cluster's directory, as given to (or printed by) `ftlab up`.
    #[arg(long)]
    dir: PathBuf,
}

/// What a control connection asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Kill,
    Restart,
}

/// A command for the main loop, with where its one-line answer goes.
struct Request {
    op: Op,
    node: u32,
    reply: mpsc::SyncSender<String>,
}

/// Removes the files it names when dropped (the control socket, the PID
/// list), whichever way `ftlab up` returns.
struct RemoveOnDrop(Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

pub fn run(a: UpArgs) -> Result<ExitCode> {
    let UpArgs { daemon, nodes: n, dir } = a;
    ftlab::check_daemon(&daemon)?;
    anyhow::ensure!(n >= 1, "-n must be at least 1");
    let dir = match dir {
        Some(d) => {
            std::fs::create_dir_all(&d).with_context(|| format!("create {}", d.display()))?;
            d.canonicalize().with_context(|| format!("resolve {}", d.display()))?
        }
        None => tempfile::Builder::new()
            .prefix(&format!("ftlab-{daemon}-"))
            .tempdir()
            .context("create a temporary directory")?
            .keep(),
    };
    anyhow::ensure!(
        !dir.as_os_str().as_bytes().contains(&b'\n'),
        "{}: a directory whose name holds a newline is not supported",
        dir.display()
    );
    // Before anything in DIR changes: another `ftlab up` may run there.
    let listener = bind_control(&dir)?;
    let sock = dir.join(SOCKET);
    let pids = dir.join(PIDS);
    let _remove = RemoveOnDrop(vec![sock.clone(), pids.clone(), pids_tmp(&pids)]);
    // The stop signals are ours from here on: one that arrives while the
    // nodes start (or the instant after "Ctrl-C … stops the cluster." is
    // printed) stops the cluster as main_loop does, instead of killing
    // ftlab with its default action and leaving the guard to SIGKILL.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let stops = {
        let _in = rt.enter();
        StopSignals::new()?
    };
    println!("starting {n} × {daemon} in {} (configs, logs and state; kept)", dir.display());

    // A cluster started again in its directory keeps its nodes' addresses.
    let (mut cluster, kept) = Cluster::configure_reusing(&daemon, n, "", dir.clone())?;
    if !kept.is_empty() {
        let which = if kept.len() == n { "every node".to_string() } else { format!("nodes {kept:?}") };
        println!("{which}: the ports recorded in {}/node<i>.toml, as before", dir.display());
    }
    write_pids(&cluster, &pids)?;
    let (mut guard, guard_stdin) = spawn_guard(&pids)?;
    for id in 1..=n as u32 {
        cluster.spawn(id)?;
        write_pids(&cluster, &pids)?;
    }
    for id in 1..=n as u32 {
        cluster.wait_ready(id)?;
    }
    cluster.wait_recovered()?;
    let sd = cluster.write_file_sd()?;

    println!("{n} × {daemon} running; configs and logs in {}", dir.display());
    println!("{:<5} {:<8} {:<22} {:<22} metrics", "node", "pid", "peer", "client (FTCTL_ADDR)");
    for id in 1..=n as u32 {
        let e = cluster.node(id);
        let pid = cluster.pid(id).map_or_else(|| "-".to_string(), |p| p.to_string());
        println!("{:<5} {:<8} {:<22} {:<22} http://{}/metrics", id, pid, e.peer, e.client, e.metrics);
    }
    let prom = write_prometheus_config(&dir, &sd)?;
    println!("Prometheus file_sd targets: {}", sd.display());
    println!(
        "Prometheus for this cluster: prometheus --config.file={} --storage.tsdb.path={}",
        shell_quote(&prom.to_string_lossy()),
        shell_quote(&dir.join("prometheus").to_string_lossy())
    );
    println!("  (or list `- {}` under file_sd_configs' files in config/prometheus.yml)", sd.display());
    let exe = std::env::current_exe().map_or_else(|_| "ftlab".to_string(), |p| shell_quote(&p.to_string_lossy()));
    let qdir = shell_quote(&dir.to_string_lossy());
    println!("SIGKILL a node:  {exe} kill <node> --dir {qdir}");
    println!("restart a node:  {exe} restart <node> --dir {qdir}");
    println!("Ctrl-C, SIGTERM or SIGHUP stops the cluster.");

    let (tx, rx) = tokio::sync::mpsc::channel::<Request>(8);
    std::thread::Builder::new().name("ftlab-control".into()).spawn(move || serve(listener, tx))?;

    let why = rt.block_on(main_loop(&mut cluster, rx, &pids, &mut guard, stops))?;
    drop(rt); // cancels restarts still waiting for their node; their callers hear so

    println!("stopping ({why})…");
    let _ = std::fs::remove_file(&sock);
    // All at once: one after the other, each node waited up to a second
    // for its graceful leave (or its connections' flush) to the peers
    // stopped before it, and five nodes took 4 to 6 s.
    for (id, stopped) in cluster.terminate_all(STOP_WITHIN) {
        if let Err(e) = stopped {
            eprintln!("node {id}: {e:#}; SIGKILLed");
        }
    }
    // Every node has stopped: the guard finds nothing left to kill.
    drop(guard_stdin);
    if !ftlab::wait_until(Duration::from_secs(2), || !matches!(guard.try_wait(), Ok(None))) {
        let _ = guard.kill();
        let _ = guard.wait();
    }
    println!("logs kept in {}:", dir.display());
    for id in 1..=n as u32 {
        println!("  {}", dir.join(format!("node{id}.log")).display());
    }
    Ok(ExitCode::SUCCESS)
}

/// SIGINT, SIGTERM and SIGHUP, caught from the moment this is built.
struct StopSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Must run inside a tokio runtime's context.
    fn new() -> std::io::Result<StopSignals> {
        Ok(StopSignals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// Runs until SIGINT, SIGTERM or SIGHUP (and returns its name), carrying
/// out control commands and reporting nodes that exit by themselves.
async fn main_loop(
    cluster: &mut Cluster,
    mut rx: tokio::sync::mpsc::Receiver<Request>,
    pids: &Path,
    guard: &mut Child,
    stops: StopSignals,
) -> Result<&'static str> {
    let StopSignals { mut int, mut term, mut hup } = stops;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut reported = vec![false; cluster.len()];
    let mut guard_reported = false;
    loop {
        tokio::select! {
            _ = int.recv() => return Ok("SIGINT"),
            _ = term.recv() => return Ok("SIGTERM"),
            _ = hup.recv() => return Ok("SIGHUP"),
            Some(req) = rx.recv() => handle(cluster, req, pids, &mut reported),
            _ = tick.tick() => {
                for id in 1..=cluster.len() as u32 {
                    if !cluster.is_running(id) && !std::mem::replace(&mut reported[id as usize - 1], true) {
                        eprintln!("node {id} exited; see {}", cluster.dir().join(format!("node{id}.log")).display());
                    }
                }
                if !guard_reported && !matches!(guard.try_wait(), Ok(None)) {
                    guard_reported = true;
                    eprintln!("warning: the guard process exited; the nodes no longer die with ftlab if it is killed");
                }
            }
        }
    }
}

/// Carries out one control command and answers it (a restart answers once
/// its node listens, from a task of its own).
fn handle(cluster: &mut Cluster, req: Request, pids: &Path, reported: &mut [bool]) {
    let Request { op, node: id, reply } = req;
    let n = cluster.len();
    if id == 0 || id as usize > n {
        let _ =
            reply.send(format!("error no node {id}: the cluster in {} has nodes 1 to {n}", cluster.dir().display()));
        return;
    }
    let log = cluster.dir().join(format!("node{id}.log"));
    match op {
        Op::Kill => {
            let pid = match cluster.pid(id) {
                Some(pid) if cluster.is_running(id) => pid,
                _ => {
                    let _ = reply.send(format!("error node {id} is not running (`ftlab restart {id}` starts it)"));
                    return;
                }
            };
            cluster.kill(id);
            reported[id as usize - 1] = true;
            if let Err(e) = write_pids(cluster, pids) {
                eprintln!("warning: {e:#}");
            }
            println!("node {id} (pid {pid}) SIGKILLed");
            let _ = reply.send(format!("ok node {id} (pid {pid}) SIGKILLed"));
        }
        Op::Restart => {
            let old = cluster.pid(id).filter(|_| cluster.is_running(id));
            cluster.kill(id);
            let spawned = cluster.spawn(id);
            if let Err(e) = write_pids(cluster, pids) {
                eprintln!("warning: {e:#}");
            }
            if let Err(e) = spawned {
                let _ = reply.send(format!("error node {id} did not start: {e:#}"));
                return;
            }
            let Some(pid) = cluster.pid(id) else {
                let _ = reply.send(format!("error node {id} did not start"));
                return;
            };
            reported[id as usize - 1] = false;
            let was = old.map_or_else(String::new, |p| format!(" (pid {p} SIGKILLed first)"));
            println!("node {id} restarted: pid {pid}{was}");
            let addr = cluster.node(id).client;
            tokio::spawn(async move {
                let ready = tokio::time::timeout(READY_WITHIN, async {
                    while tokio::net::TcpStream::connect(addr).await.is_err() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
                .await
                .is_ok();
                let _ = reply.send(if ready {
                    format!("ok node {id} restarted: pid {pid}{was}")
                } else {
                    format!(
                        "error node {id} (pid {pid}) does not listen on {addr} {} s after its restart; see {}",
                        READY_WITHIN.as_secs(),
                        log.display()
                    )
                });
            });
        }
    }
}

/// Binds `DIR/ftlab.sock`, replacing one left by an `ftlab up` that died,
/// and refusing when one still answers there.
fn bind_control(dir: &Path) -> Result<UnixListener> {
    let path = dir.join(SOCKET);
    match UnixStream::connect(&path) {
        Ok(_) => bail!(
            "an `ftlab up` already runs on {} (it answers on {}); stop it first, or choose another --dir",
            dir.display(),
            path.display()
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(_) => match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("remove the stale {}", path.display())),
        },
    }
    UnixListener::bind(&path).with_context(|| format!("listen on {}", path.display()))
}

/// Accepts control connections, one at a time, until `ftlab up` stops.
fn serve(listener: UnixListener, tx: tokio::sync::mpsc::Sender<Request>) {
    for conn in listener.incoming() {
        if tx.is_closed() {
            return;
        }
        match conn {
            Ok(conn) => {
                let _ = answer(conn, &tx);
            }
            // Out of file descriptors, say: do not spin.
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Reads one request line from `conn` (within the deadline and the size
/// bound), has the main loop carry it out and writes back its answer.
fn answer(mut conn: UnixStream, tx: &tokio::sync::mpsc::Sender<Request>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(IO_DEADLINE))?;
    conn.set_write_timeout(Some(IO_DEADLINE))?;
    let mut line = Vec::new();
    let read = BufReader::new((&conn).take(MAX_REQUEST + 1)).read_until(b'\n', &mut line);
    let answer = match read {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            format!("error no request within {} s", IO_DEADLINE.as_secs())
        }
        Err(e) => return Err(e),
        Ok(_) if line.len() as u64 > MAX_REQUEST => format!("error request longer than {MAX_REQUEST} bytes"),
        Ok(_) => match parse_request(&line) {
            Err(e) => format!("error {e}"),
            Ok((op, node)) => {
                let (reply, answer) = mpsc::sync_channel(1);
                if tx.blocking_send(Request { op, node, reply }).is_err() {
                    "error ftlab up is stopping".to_string()
                } else {
                    match answer.recv_timeout(ANSWER_WITHIN) {
                        Ok(a) => a,
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            format!("error no answer within {} s", ANSWER_WITHIN.as_secs())
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => "error ftlab up is stopping".to_string(),
                    }
                }
            }
        },
    };
    conn.write_all(format!("{answer}\n").as_bytes())
}

/// `kill N` or `restart N` (one line; the newline optional).
fn parse_request(line: &[u8]) -> std::result::Result<(Op, u32), String> {
    let text = std::str::from_utf8(line).map_err(|_| "request is not UTF-8".to_string())?;
    let mut words = text.split_whitespace();
    let op = match words.next() {
        Some("kill") => Op::Kill,
        Some("restart") => Op::Restart,
        _ => return Err(format!("unknown request {:?}: `kill N` or `restart N`", text.trim())),
    };
    let node = words
        .next()
        .and_then(|w| w.parse::<u32>().ok())
        .ok_or_else(|| format!("bad request {:?}: `kill N` or `restart N`", text.trim()))?;
    if words.next().is_some() {
        return Err(format!("bad request {:?}: `kill N` or `restart N`", text.trim()));
    }
    Ok((op, node))
}

/// `DIR/ftlab.pids.tmp`, where the PID list is written before its rename.
fn pids_tmp(pids: &Path) -> PathBuf {
    let mut name = pids.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Rewrites the PID list atomically (write, then rename): one line
/// `PID CONFIG_PATH` per node started.
fn write_pids(cluster: &Cluster, pids: &Path) -> Result<()> {
    let mut body = Vec::new();
    for id in 1..=cluster.len() as u32 {
        if let Some(pid) = cluster.pid(id) {
            body.extend_from_slice(format!("{pid} ").as_bytes());
            body.extend_from_slice(cluster.config_path(id).as_os_str().as_bytes());
            body.push(b'\n');
        }
    }
    let tmp = pids_tmp(pids);
    std::fs::write(&tmp, &body).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, pids).with_context(|| format!("rename {} to {}", tmp.display(), pids.display()))
}

/// Starts `ftlab guard PIDS` with its stdin a pipe that only we hold.
fn spawn_guard(pids: &Path) -> Result<(Child, ChildStdin)> {
    let exe = std::env::current_exe().context("find ftlab's own executable")?;
    let mut child = Command::new(exe)
        .arg("guard")
        .arg(pids)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("start ftlab's guard process")?;
    let stdin = child.stdin.take().context("the guard's stdin")?;
    Ok((child, stdin))
}

pub fn kill(a: NodeArgs) -> Result<ExitCode> {
    command(&a, "kill")
}

pub fn restart(a: NodeArgs) -> Result<ExitCode> {
    command(&a, "restart")
}

/// Sends `OP NODE` to the `ftlab up` running on `--dir` and prints its
/// answer.
fn command(a: &NodeArgs, op: &str) -> Result<ExitCode> {
    let dir = a.dir.display();
    let path = a.dir.join(SOCKET);
    let mut conn = match UnixStream::connect(&path) {
        Ok(c) => c,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            bail!("no `ftlab up` runs on {dir}: {} does not exist", path.display())
        }
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
            bail!("no `ftlab up` runs on {dir} any more: {} is left from one that died", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("connect to `ftlab up` on {}", path.display())),
    };
    conn.set_write_timeout(Some(IO_DEADLINE))?;
    conn.set_read_timeout(Some(ANSWER_WITHIN + IO_DEADLINE))?;
    conn.write_all(format!("{op} {}\n", a.node).as_bytes())
        .with_context(|| format!("send `{op} {}` to {}", a.node, path.display()))?;
    let mut answer = String::new();
    (&conn)
        .take(MAX_ANSWER)
        .read_to_string(&mut answer)
        .with_context(|| format!("read the answer to `{op} {}` from {}", a.node, path.display()))?;
    let answer = answer.trim_end();
    if let Some(ok) = answer.strip_prefix("ok ") {
        println!("{ok}");
        Ok(ExitCode::SUCCESS)
    } else if let Some(err) = answer.strip_prefix("error ") {
        bail!("{err}")
    } else {
        bail!("`ftlab up` on {dir} answered {answer:?}")
    }
}

/// `ftlab guard FILE`: waits for end of file on stdin (ftlab exited or
/// died), then SIGKILLs each PID in FILE that still runs the config named
/// beside it, so that a PID reused by another process is never killed.
pub fn guard(file: &Path) -> Result<ExitCode> {
    // Ctrl-C and a closing terminal signal the whole process group: handle
    // (and so ignore) them, to outlive ftlab until it has stopped the nodes.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let _ignored = {
        let _entered = rt.enter();
        (signal(SignalKind::interrupt())?, signal(SignalKind::hangup())?)
    };
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 256];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let list = match std::fs::read(file) {
        Ok(list) => list,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(ExitCode::SUCCESS),
        Err(e) => return Err(e).with_context(|| format!("read {}", file.display())),
    };
    let me = std::process::id();
    for line in list.split(|&b| b == b'\n') {
        let Some(space) = line.iter().position(|&b| b == b' ') else { continue };
        let (pid, config) = (&line[..space], &line[space + 1..]);
        let Some(pid) = std::str::from_utf8(pid).ok().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid <= 1 || pid == me || config.is_empty() || !runs_config(pid, config) {
            continue;
        }
        let killed = Command::new("kill")
            .arg("-KILL")
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if killed {
            eprintln!("ftlab guard: ftlab is gone; SIGKILLed pid {pid} ({})", String::from_utf8_lossy(config));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether process `pid` runs with `config` as one of its arguments.
fn runs_config(pid: u32, config: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == config))
}

/// Writes `DIR/prometheus.yml`: config/prometheus.yml's settings (5 s
/// scrapes, job label from the targets file) reading this cluster's
/// targets file `sd`, so that the command `ftlab up` prints scrapes it
/// whatever DIR is. Returns its path.
fn write_prometheus_config(dir: &Path, sd: &Path) -> Result<PathBuf> {
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, prometheus_config(sd)).with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}

/// The text of [`write_prometheus_config`]'s file.
fn prometheus_config(sd: &Path) -> String {
    // A JSON string is a YAML double-quoted scalar.
    let file = crate::json::J::s(sd.to_string_lossy());
    format!(
        "# Written by `ftlab up`: Prometheus scraping this cluster's nodes, as\n\
         # config/prometheus.yml does for /tmp/ftcoord/DAEMON (same settings).\n\
         global:\n  scrape_interval: 5s\n  evaluation_interval: 5s\n\n\
         scrape_configs:\n  # The job label is the daemon's name, from the targets file.\n  \
         - job_name: ftcoord\n    file_sd_configs:\n      - files:\n          - {file}\n        refresh_interval: 30s\n"
    )
}

/// `s` quoted for a POSIX shell where it needs to be.
fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_parsed_strictly() {
        assert_eq!(parse_request(b"kill 2\n"), Ok((Op::Kill, 2)));
        assert_eq!(parse_request(b"restart 10"), Ok((Op::Restart, 10)));
        assert!(parse_request(b"kill\n").is_err());
        assert!(parse_request(b"kill -1\n").is_err());
        assert!(parse_request(b"kill 2 3\n").is_err());
        assert!(parse_request(b"stop 2\n").is_err());
        assert!(parse_request(b"\xff\n").is_err());
    }

    #[test]
    fn the_prometheus_config_reads_the_clusters_targets_file() {
        let yml = prometheus_config(Path::new("/tmp/nt/targets.json"));
        assert!(yml.contains("\n          - \"/tmp/nt/targets.json\"\n"), "{yml}");
        // The repository's example has the same settings.
        let example =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/prometheus.yml"));
        let example = example.unwrap();
        for line in
            ["  scrape_interval: 5s", "  evaluation_interval: 5s", "  - job_name: ftcoord", "    file_sd_configs:"]
        {
            assert!(yml.contains(line) && example.contains(line), "{line:?}:\n{yml}\n{example}");
        }
        let odd = prometheus_config(Path::new("/tmp/a \"b\"\\c"));
        assert!(odd.contains(r#"- "/tmp/a \"b\"\\c""#), "{odd}");
    }

    #[test]
    fn shell_quoting_leaves_plain_paths_alone() {
        assert_eq!(shell_quote("/tmp/ftlab-x_1.2"), "/tmp/ftlab-x_1.2");
        assert_eq!(shell_quote("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_quote("/tmp/it's"), "'/tmp/it'\\''s'");
    }

    #[test]
    fn the_guard_recognises_a_process_by_its_arguments() {
        let me = std::process::id();
        let args: Vec<String> = std::env::args().collect();
        assert!(runs_config(me, args[0].as_bytes()));
        assert!(!runs_config(me, b"/no/such/node1.toml"));
    }
}
