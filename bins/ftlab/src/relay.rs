//! A UDP relay between the nodes of a cluster: partitions on loopback, no
//! root needed.
//!
//! Every node is told that its peers live at the relay's ports (one per
//! node); each relay port forwards what it receives to its node's real
//! address, unless the sender (known by its real address) and the receiver
//! are cut apart. The UDP transport authenticates the sender from the
//! frame and answers at the configured (relay) address, so it does not
//! notice the relay. TCP daemons are not relayed.

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

impl UdpRelay {
    /// A relay port for each real address (`real[i]` is node `i + 1`).
    pub fn start(real: &[SocketAddr]) -> Result<UdpRelay> {
        let state = Arc::new(Mutex::new(State::default()));
        let (dropped, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let ids: Arc<HashMap<SocketAddr, u32>> = Arc::new(real.iter().zip(1..).map(|(a, id)| (*a, id)).collect());
        let mut ports = Vec::new();
        let mut threads = Vec::new();
        for (to, dest) in (1..).zip(real.iter().copied()) {
            let sock = UdpSocket::bind("127.0.0.1:0")?;
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
