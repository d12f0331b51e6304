//! The baseline: L (one small message between two processes over loopback
//! TCP and UDP: half the median round trip) and fsync_p50 (one durable
//! state write), with the peer process's side (`ftlab bench-peer`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::{human_us, percentile, PeerArgs};
use crate::json::J;

/// Bytes in one ping-pong message (a small peer message).
const MSG: usize = 64;
/// Round trips before measuring (connections, caches, scheduler).
const WARMUP: usize = 200;
/// Round trips measured per transport, at most.
pub const ROUND_TRIPS: usize = 10_000;
/// ... within at most this long.
const RTT_BUDGET: Duration = Duration::from_secs(3);
/// How long a UDP reply is waited for before the datagram counts as lost.
const UDP_WAIT: Duration = Duration::from_millis(200);
/// Durable writes measured, at most ...
const FSYNCS: usize = 200;
/// ... within at most this long.
const FSYNC_BUDGET: Duration = Duration::from_secs(3);

/// Round trips over one transport.
#[derive(Clone, Debug)]
pub struct Rtt {
    /// Half the median round trip, µs.
    pub l_us: f64,
    /// Median and 99th percentile round trip, µs.
    pub p50_us: f64,
    pub p99_us: f64,
    /// Round trips measured.
    pub samples: usize,
    /// Datagrams (or replies) that never came back.
    pub lost: usize,
    /// CPU time (user + system, both processes) per one-way message: the
    /// kernel's cost of a send, a wake-up and a receive, the least a
    /// daemon pays per message it handles on this machine.
    pub cpu_per_msg_us: f64,
}

/// One baseline measurement.
#[derive(Clone, Debug)]
pub struct Baseline {
    pub tcp: Rtt,
    pub udp: Rtt,
    /// Median and 99th percentile durable write, µs.
    pub fsync_p50_us: f64,
    pub fsync_p99_us: f64,
    pub fsync_samples: usize,
    /// CPU time (user + system) of one such write, µs.
    pub fsync_cpu_us: f64,
    /// Where the durable writes were made.
    pub fsync_dir: PathBuf,
}

impl Baseline {
    /// The baseline's own JSON fields (`L_tcp_us`, `L_udp_us`, `fsync_p50_us`, ...).
    pub fn json_fields(&self) -> Vec<(String, J)> {
        let rtt = |r: &Rtt| {
            J::obj([
                ("rtt_p50_us", J::from(r.p50_us)),
                ("rtt_p99_us", J::from(r.p99_us)),
                ("round_trips", J::from(r.samples)),
                ("lost", J::from(r.lost)),
                ("cpu_per_msg_us", J::from(r.cpu_per_msg_us)),
            ])
        };
        vec![
            ("L_tcp_us".into(), J::from(self.tcp.l_us)),
            ("L_udp_us".into(), J::from(self.udp.l_us)),
            ("fsync_p50_us".into(), J::from(self.fsync_p50_us)),
            ("fsync_p99_us".into(), J::from(self.fsync_p99_us)),
            ("fsync_samples".into(), J::from(self.fsync_samples)),
            ("fsync_cpu_us".into(), J::from(self.fsync_cpu_us)),
            ("fsync_dir".into(), J::s(self.fsync_dir.display().to_string())),
            ("message_bytes".into(), J::from(MSG)),
            ("tcp".into(), rtt(&self.tcp)),
            ("udp".into(), rtt(&self.udp)),
        ]
    }

    /// One line: `L_tcp = …, L_udp = …, fsync_p50 = …, CPU per message …`.
    pub fn line(&self) -> String {
        format!(
            "L_tcp = {}, L_udp = {}, fsync_p50 = {}, CPU per message {} (TCP) / {} (UDP)",
            human_us(self.tcp.l_us),
            human_us(self.udp.l_us),
            human_us(self.fsync_p50_us),
            human_us(self.tcp.cpu_per_msg_us),
            human_us(self.udp.cpu_per_msg_us)
        )
    }
}

/// `ftlab bench baseline`.
pub fn run(dir: Option<PathBuf>, json: bool) -> Result<ExitCode> {
    let dir = dir.unwrap_or_else(std::env::temp_dir);
    let b = measure(&dir, ROUND_TRIPS)?;
    if json {
        println!("{}", J::Obj(b.json_fields()));
        return Ok(ExitCode::SUCCESS);
    }
    println!("ftlab bench baseline: loopback, {MSG}-byte messages, between this process and a peer process");
    println!("{:<11} {:>10}  how", "measure", "value");
    for (name, r, how) in [("L_tcp", &b.tcp, "TCP, nodelay"), ("L_udp", &b.udp, "UDP")] {
        println!(
            "{name:<11} {:>10}  {how}: half the median of {} round trips (RTT p50 {}, p99 {}; {} lost)",
            human_us(r.l_us),
            r.samples,
            human_us(r.p50_us),
            human_us(r.p99_us),
            r.lost
        );
    }
    for (name, r, how) in [("cpu_msg_tcp", &b.tcp, "TCP"), ("cpu_msg_udp", &b.udp, "UDP")] {
        println!(
            "{name:<11} {:>10}  {how}: CPU (user + system, both processes, /proc) per one-way message of the ping-pong",
            human_us(r.cpu_per_msg_us)
        );
    }
    println!(
        "{:<11} {:>10}  write + fsync a {MSG}-byte temporary file, rename, fsync the directory: p50 of {} in {} (p99 {})",
        "fsync_p50",
        human_us(b.fsync_p50_us),
        b.fsync_samples,
        b.fsync_dir.display(),
        human_us(b.fsync_p99_us)
    );
    println!("{:<11} {:>10}  CPU (user + system, /proc) of one such write", "fsync_cpu", human_us(b.fsync_cpu_us));
    Ok(ExitCode::SUCCESS)
}

/// L over TCP and UDP against a fresh peer process (at most
/// `round_trips` each), and fsync_p50 in `fsync_dir`.
pub fn measure(fsync_dir: &Path, round_trips: usize) -> Result<Baseline> {
    let peer = Peer::spawn()?;
    let both = [std::process::id(), peer.child.id()];
    let tcp = ping_pong_cpu(&both, || tcp_rtt(peer.tcp, round_trips)).context("TCP ping-pong")?;
    let udp = ping_pong_cpu(&both, || udp_rtt(peer.udp, round_trips)).context("UDP ping-pong")?;
    drop(peer);
    let ((fsync_p50_us, fsync_p99_us, fsync_samples), cpu) = cpu_during(&[std::process::id()], || fsync(fsync_dir))?;
    let fsync_cpu_us = cpu / fsync_samples.max(1) as f64;
    Ok(Baseline {
        tcp,
        udp,
        fsync_p50_us,
        fsync_p99_us,
        fsync_samples,
        fsync_cpu_us,
        fsync_dir: fsync_dir.to_path_buf(),
    })
}

/// The peer process: `ftlab bench-peer`, gone when dropped (its stdin
/// closes; killed if it lingers).
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    tcp: SocketAddr,
    udp: SocketAddr,
}

impl Peer {
    fn spawn() -> Result<Peer> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(&exe)
            .arg("bench-peer")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("start the peer process {} bench-peer", exe.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("peer without stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let ports: Vec<u16> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        let [tcp, udp] = ports[..] else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the peer process said {line:?}, not its ports");
        };
        let at = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        Ok(Peer { child, stdin, tcp: at(tcp), udp: at(udp) })
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if !ftlab::wait_until(Duration::from_secs(2), || matches!(self.child.try_wait(), Ok(Some(_)))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `work` and returns its result with the CPU time (µs) processes
/// `pids` used meanwhile.
fn cpu_during<T>(pids: &[u32], work: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let cpu = || -> Result<f64> { pids.iter().map(|p| ftlab::probe::cpu_us(*p)).sum() };
    let before = cpu()?;
    let out = work()?;
    Ok((out, cpu()? - before))
}

/// Runs a ping-pong and fills in its CPU per one-way message: what `pids`
/// used over every message sent, warm-up and lost datagrams included.
fn ping_pong_cpu(pids: &[u32], ping_pong: impl FnOnce() -> Result<Rtt>) -> Result<Rtt> {
    let (mut rtt, cpu) = cpu_during(pids, ping_pong)?;
    let round_trips = WARMUP + rtt.samples + rtt.lost;
    rtt.cpu_per_msg_us = cpu / (2 * round_trips) as f64;
    Ok(rtt)
}

/// A message carrying `seq`.
fn message(seq: u64) -> [u8; MSG] {
    let mut m = [0x5a; MSG];
    m[..8].copy_from_slice(&seq.to_le_bytes());
    m
}

fn seq_of(m: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(m.get(..8)?.try_into().ok()?))
}

fn summarise(mut rtts: Vec<f64>, lost: usize) -> Result<Rtt> {
    let samples = rtts.len();
    let p50 = percentile(&mut rtts, 50.0).ok_or_else(|| anyhow!("no round trip came back ({lost} lost)"))?;
    let p99 = percentile(&mut rtts, 99.0).unwrap_or(p50);
    Ok(Rtt { l_us: p50 / 2.0, p50_us: p50, p99_us: p99, samples, lost, cpu_per_msg_us: 0.0 })
}

fn tcp_rtt(addr: SocketAddr, round_trips: usize) -> Result<Rtt> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut back = [0u8; MSG];
    let mut rtts = Vec::with_capacity(round_trips);
    let end = Instant::now() + RTT_BUDGET;
    for seq in 0..(WARMUP + round_trips) as u64 {
        let t = Instant::now();
        s.write_all(&message(seq))?;
        s.read_exact(&mut back)?;
        let rtt = t.elapsed();
        if seq_of(&back) != Some(seq) {
            bail!("the peer echoed message {:?} for {seq}", seq_of(&back));
        }
        if seq as usize >= WARMUP {
            rtts.push(rtt.as_secs_f64() * 1e6);
            if Instant::now() >= end {
                break;
            }
        }
    }
    summarise(rtts, 0)
}

fn udp_rtt(addr: SocketAddr, round_trips: usize) -> Result<Rtt> {
    let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    s.connect(addr)?;
    s.set_read_timeout(Some(UDP_WAIT))?;
    let mut back = [0u8; 2 * MSG];
    let mut rtts = Vec::with_capacity(round_trips);
    let mut lost = 0;
    let end = Instant::now() + RTT_BUDGET;
    for seq in 0..(WARMUP + round_trips) as u64 {
        let t = Instant::now();
        s.send(&message(seq))?;
        let got = loop {
            match s.recv(&mut back) {
                // A late echo of an earlier datagram: keep waiting for this one.
                Ok(n) if seq_of(&back[..n]) != Some(seq) => continue,
                Ok(_) => break true,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    break false
                }
                Err(e) => return Err(e.into()),
            }
        };
        let rtt = t.elapsed();
        if seq as usize >= WARMUP {
            if got {
                rtts.push(rtt.as_secs_f64() * 1e6);
            } else {
                lost += 1;
            }
            if Instant::now() >= end {
                break;
            }
        }
    }
    summarise(rtts, lost)
}

/// Durable small writes in a fresh directory under `dir`, the way a daemon
/// stores its state: (p50, p99, samples) in µs.
fn fsync(dir: &Path) -> Result<(f64, f64, usize)> {
    let scratch = tempfile::Builder::new()
        .prefix("ftlab-fsync-")
        .tempdir_in(dir)
        .with_context(|| format!("make a scratch directory in {}", dir.display()))?;
    let d = scratch.path();
    let (tmp, state) = (d.join("state.tmp"), d.join("state"));
    let mut times = Vec::with_capacity(FSYNCS);
    let end = Instant::now() + FSYNC_BUDGET;
    for i in 0..FSYNCS as u64 {
        let t = Instant::now();
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&message(i))?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &state)?;
        std::fs::File::open(d)?.sync_all()?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
        if Instant::now() >= end {
            break;
        }
    }
    let samples = times.len();
    let p50 = percentile(&mut times, 50.0).unwrap_or(0.0);
    let p99 = percentile(&mut times, 99.0).unwrap_or(0.0);
    Ok((p50, p99, samples))
}

/// `ftlab bench-peer`: prints `TCP_PORT UDP_PORT`, echoes every
/// `MSG`-byte message on TCP (nodelay) and every datagram on UDP, and
/// exits when its stdin closes (so that it dies with the `ftlab` that
/// started it).
pub fn peer(_: PeerArgs) -> Result<ExitCode> {
    let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let udp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{} {}", tcp.local_addr()?.port(), udp.local_addr()?.port())?;
        out.flush()?;
    }
    std::thread::spawn(move || {
        for conn in tcp.incoming() {
            let Ok(mut s) = conn else { continue };
            std::thread::spawn(move || {
                let _ = s.set_nodelay(true);
                let mut m = [0u8; MSG];
                while s.read_exact(&mut m).is_ok() {
                    if s.write_all(&m).is_err() {
                        break;
                    }
                }
            });
        }
    });
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = udp.recv_from(&mut buf) {
            let _ = udp.send_to(&buf[..n], from);
        }
    });
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    Ok(ExitCode::SUCCESS)
}
