//! A UDP relay between the nodes of a cluster: partitions on loopback, no
//! root needed.
//!
//! Every node is told that its peers live at the relay's ports (one per
//! node); each relay port forwards what it receives to its node's real
//! address, unless the sender (known by its real address) and the receiver
//! are cut apart. The UDP transport authenticates the sender from the
//! frame and answers at the configured (relay) address, so it does not
//! notice the relay. TCP daemons go through a [`TcpRelay`] instead.

use std::collections::{BTreeSet, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;

#[derive(Debug, Default)]
struct State {
    /// Directed (from, to) pairs whose datagrams are dropped.
    cut: BTreeSet<(u32, u32)>,
    /// The last datagram forwarded per (from, to), for replay tests.
    last: HashMap<(u32, u32), Vec<u8>>,
}

/// The relay: one thread per node, stopped on drop.
#[derive(Debug)]
pub struct UdpRelay {
    ports: Vec<SocketAddr>,
    state: Arc<Mutex<State>>,
    dropped: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// A UDP socket on a port handed out by `free_ports`, like the nodes'
/// own: an ephemeral bind could take a node's port before the node binds
/// it (a CI run lost a test to exactly that). A port that `free_ports`
/// found free for TCP may still be taken for UDP, so a few are tried.
fn bind_udp_free() -> Result<UdpSocket> {
    let mut last = None;
    for _ in 0..8 {
        match UdpSocket::bind(("127.0.0.1", crate::free_ports(1)[0])) {
            Ok(sock) => return Ok(sock),
            Err(e) => last = Some(e),
        }
    }
    Err(anyhow::anyhow!("no free UDP port for the relay: {}", last.map_or_else(String::new, |e| e.to_string())))
}

impl UdpRelay {
    /// A relay port for each real address (`real[i]` is node `i + 1`).
    pub fn start(real: &[SocketAddr]) -> Result<UdpRelay> {
        let state = Arc::new(Mutex::new(State::default()));
        let (dropped, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let ids: Arc<HashMap<SocketAddr, u32>> = Arc::new(real.iter().zip(1..).map(|(a, id)| (*a, id)).collect());
        let mut ports = Vec::new();
        let mut threads = Vec::new();
        for (to, dest) in (1..).zip(real.iter().copied()) {
            let sock = bind_udp_free()?;
            sock.set_read_timeout(Some(Duration::from_millis(50)))?;
            ports.push(sock.local_addr()?);
            let (state, dropped, stop, ids) = (state.clone(), dropped.clone(), stop.clone(), ids.clone());
            threads.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 65_536];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, src)) = sock.recv_from(&mut buf) else { continue };
                    // A sender that is no node (a test's raw socket) is never cut.
                    let from = ids.get(&src).copied().unwrap_or(0);
                    {
                        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                        if s.cut.contains(&(from, to)) {
                            dropped.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        s.last.insert((from, to), buf[..n].to_vec());
                    }
                    let _ = sock.send_to(&buf[..n], dest);
                }
            }));
        }
        Ok(UdpRelay { ports, state, dropped, stop, threads })
    }

    /// The address node `id`'s peers send to.
    pub fn addr(&self, id: u32) -> SocketAddr {
        self.ports[id as usize - 1]
    }

    /// Cuts every node of `side` off from every other node, both ways.
    pub fn partition(&self, side: &[u32]) {
        let n = self.ports.len() as u32;
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for a in side {
            for b in (1..=n).filter(|b| !side.contains(b)) {
                s.cut.insert((*a, b));
                s.cut.insert((b, *a));
            }
        }
    }

    /// Ends every partition.
    pub fn heal(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).cut.clear();
    }

    /// Datagrams dropped by partitions so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The last datagram relayed from node `from` to node `to`.
    pub fn last_datagram(&self, from: u32, to: u32) -> Option<Vec<u8>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).last.get(&(from, to)).cloned()
    }
}

impl Drop for UdpRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// What a relay between a cluster's nodes can do to it: partitions.
pub trait Partitions {
    /// Cuts every node of `side` off from every other node, both ways.
    fn partition(&self, side: &[u32]);
    /// Ends every partition.
    fn heal(&self);
}

impl Partitions for UdpRelay {
    fn partition(&self, side: &[u32]) {
        UdpRelay::partition(self, side);
    }
    fn heal(&self) {
        UdpRelay::heal(self);
    }
}

/// A TCP relay between the nodes of a cluster (ntmutexd, electd, ringd,
/// hbringd): partitions on loopback, no root needed.
///
/// There is a relay port for every ordered pair of nodes (i → j): node
/// i's config names peer j at that port, so everything arriving there is
/// from i, and is forwarded to j's real address (and the answers back).
/// A partition stops the bytes of the cut pairs where they are, without
/// closing anything — as a network that drops packets would: the
/// connections stay open, nothing arrives, and after the heal what was
/// held goes on in order (TCP's retransmissions would deliver it too).
#[derive(Debug)]
pub struct TcpRelay {
    nodes: u32,
    ports: HashMap<(u32, u32), SocketAddr>,
    cut: Arc<Mutex<BTreeSet<(u32, u32)>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// How often a relay thread looks at the stop flag and the partitions.
const POLL: Duration = Duration::from_millis(5);

impl TcpRelay {
    /// A relay port for each ordered pair of the real addresses
    /// (`real[i]` is node `i + 1`).
    pub fn start(real: &[SocketAddr]) -> Result<TcpRelay> {
        let cut = Arc::new(Mutex::new(BTreeSet::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut ports = HashMap::new();
        let mut threads = Vec::new();
        // Ports handed out by `free_ports`, like the nodes' own: an
        // ephemeral bind here could take a node's port before it binds.
        let mut free = crate::free_ports(real.len() * real.len().saturating_sub(1)).into_iter();
        for (from, _) in (1u32..).zip(real) {
            for (to, dest) in (1u32..).zip(real.iter().copied()) {
                if from == to {
                    continue;
                }
                let port = free.next().ok_or_else(|| anyhow::anyhow!("no free port for the relay"))?;
                let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
                listener.set_nonblocking(true)?;
                ports.insert((from, to), listener.local_addr()?);
                let (cut, stop) = (cut.clone(), stop.clone());
                threads.push(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match listener.accept() {
                            Ok((inbound, _)) => pipe(inbound, dest, (from, to), &cut, &stop),
                            Err(_) => std::thread::sleep(POLL),
                        }
                    }
                }));
            }
        }
        Ok(TcpRelay { nodes: real.len() as u32, ports, cut, stop, threads })
    }

    /// The address node `from` reaches node `to` at.
    pub fn addr(&self, from: u32, to: u32) -> SocketAddr {
        self.ports[&(from, to)]
    }
}

/// Connects `inbound` (from `pair.0`) to `dest` (node `pair.1`) and copies
/// both ways on two threads, holding bytes while their direction is cut.
fn pipe(
    inbound: std::net::TcpStream,
    dest: SocketAddr,
    (from, to): (u32, u32),
    cut: &Arc<Mutex<BTreeSet<(u32, u32)>>>,
    stop: &Arc<AtomicBool>,
) {
    let Ok(outbound) = std::net::TcpStream::connect_timeout(&dest, Duration::from_secs(1)) else { return };
    let _ = inbound.set_nonblocking(false);
    for s in [&inbound, &outbound] {
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(POLL * 10));
    }
    let (Ok(in2), Ok(out2)) = (inbound.try_clone(), outbound.try_clone()) else { return };
    for (src, dst, dir) in [(inbound, out2, (from, to)), (outbound, in2, (to, from))] {
        let (cut, stop) = (cut.clone(), stop.clone());
        std::thread::spawn(move || copy(src, dst, dir, &cut, &stop));
    }
}

fn copy(
    mut src: std::net::TcpStream,
    mut dst: std::net::TcpStream,
    dir: (u32, u32),
    cut: &Mutex<BTreeSet<(u32, u32)>>,
    stop: &AtomicBool,
) {
    use std::io::{ErrorKind, Read, Write};
    let mut buf = vec![0u8; 64 * 1024];
    let is_cut = || cut.lock().unwrap_or_else(|e| e.into_inner()).contains(&dir);
    while !stop.load(Ordering::Relaxed) {
        if is_cut() {
            // Read nothing while cut: the bytes wait in the kernel.
            std::thread::sleep(POLL);
            continue;
        }
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                continue
            }
            Err(_) => break,
        };
        // Cut while reading: hold these bytes until the heal.
        while is_cut() && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(POLL);
        }
        if dst.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = dst.shutdown(std::net::Shutdown::Write);
}

impl Partitions for TcpRelay {
    fn partition(&self, side: &[u32]) {
        let mut s = self.cut.lock().unwrap_or_else(|e| e.into_inner());
        for a in side {
            for b in (1..=self.nodes).filter(|b| !side.contains(b)) {
                s.insert((*a, b));
                s.insert((b, *a));
            }
        }
    }

    fn heal(&self) {
        self.cut.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

impl Drop for TcpRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
