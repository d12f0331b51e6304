//! The simulated network: per-message delay, loss, duplication, reordering
//! and partitions, all drawn from the simulation's seeded generator.

use std::collections::BTreeMap;
use std::time::Duration;

use ftcore::{Incarnation, NodeId};
use timer::{Instant, SeededRng};

/// What kind of channel the protocol runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// Like TCP: per-link FIFO, no loss or duplication; what is in flight is
    /// lost only when a partition cuts the link or the receiver's process
    /// dies (the connection breaks).
    Reliable,
    /// Like UDP: loss, duplication and (optionally) reordering.
    Datagram,
}

/// Network behaviour for one simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct NetConfig {
    /// Reliable (TCP-like) or datagram (UDP-like).
    pub channel: Channel,
    /// Smallest one-way delay.
    pub delay_min: Duration,
    /// Largest one-way delay.
    pub delay_max: Duration,
    /// Probability that a datagram is lost (datagram channels only).
    pub loss: f64,
    /// Probability that a datagram is delivered twice (datagram only).
    pub dup: f64,
    /// Whether datagrams may overtake each other (datagram only).
    pub reorder: bool,
}

impl NetConfig {
    /// A TCP-like network with one-way delays uniform in `min..=max`.
    pub fn reliable(min: Duration, max: Duration) -> Self {
        NetConfig { channel: Channel::Reliable, delay_min: min, delay_max: max, loss: 0.0, dup: 0.0, reorder: false }
    }

    /// A UDP-like network with the given loss and duplication rates, and
    /// reordering.
    pub fn datagram(min: Duration, max: Duration, loss: f64, dup: f64) -> Self {
        NetConfig { channel: Channel::Datagram, delay_min: min, delay_max: max, loss, dup, reorder: true }
    }
}

/// A message on its way.
#[derive(Clone, Debug)]
pub(crate) struct InFlight<M> {
    pub from: NodeId,
    pub from_inc: Incarnation,
    pub to: NodeId,
    /// Which process life of the receiver the sender was connected to.
    pub to_life: u32,
    pub msg: M,
}

pub(crate) struct Network<M> {
    cfg: NetConfig,
    queue: BTreeMap<(Instant, u64), InFlight<M>>,
    seq: u64,
    link_last: BTreeMap<(NodeId, NodeId), Instant>,
    sides: Vec<Vec<NodeId>>,
}

impl<M: Clone> Network<M> {
    pub fn new(cfg: NetConfig) -> Self {
        Network { cfg, queue: BTreeMap::new(), seq: 0, link_last: BTreeMap::new(), sides: Vec::new() }
    }

    pub fn next_delivery(&self) -> Option<Instant> {
        self.queue.keys().next().map(|(t, _)| *t)
    }

    pub fn pop_due(&mut self, now: Instant) -> Option<InFlight<M>> {
        let key = *self.queue.keys().next().filter(|(t, _)| *t <= now)?;
        self.queue.remove(&key)
    }

    /// Whether `a` and `b` can talk under the current partitions.
    pub fn connected(&self, a: NodeId, b: NodeId) -> bool {
        self.sides.iter().all(|side| side.contains(&a) == side.contains(&b))
    }

    pub fn partition(&mut self, side: Vec<NodeId>) {
        self.sides.push(side);
    }

    pub fn heal(&mut self) {
        self.sides.clear();
    }

    /// Queues a message; returns why it was dropped, if it was.
    pub fn send(&mut self, rng: &mut SeededRng, now: Instant, m: InFlight<M>, to_up: bool) -> Option<&'static str> {
        if !to_up {
            return Some("receiver down");
        }
        if !self.connected(m.from, m.to) {
            return Some("partitioned");
        }
        let copies = match self.cfg.channel {
            Channel::Reliable => 1,
            Channel::Datagram => {
                if rng.chance(self.cfg.loss) {
                    return Some("lost");
                }
                if rng.chance(self.cfg.dup) {
                    2
                } else {
                    1
                }
            }
        };
        for _ in 0..copies {
            let mut at = now + rng.duration_between(self.cfg.delay_min, self.cfg.delay_max);
            let fifo = self.cfg.channel == Channel::Reliable || !self.cfg.reorder;
            if fifo {
                let last = self.link_last.entry((m.from, m.to)).or_insert(Instant::ZERO);
                at = at.max(*last);
                *last = at;
            }
            self.seq += 1;
            self.queue.insert((at, self.seq), m.clone());
        }
        None
    }

    /// Whether an in-flight message still reaches its receiver at delivery.
    pub fn survives(&self, m: &InFlight<M>, receiver_life: Option<u32>) -> Result<(), &'static str> {
        let Some(life) = receiver_life else { return Err("receiver down") };
        if !self.connected(m.from, m.to) {
            return Err("partitioned");
        }
        if self.cfg.channel == Channel::Reliable && life != m.to_life {
            return Err("receiver restarted");
        }
        Ok(())
    }
}
