//! The simulated network: per-message delay, loss, duplication, reordering
//! and partitions, all drawn from the simulation's seeded generator; and the
//! per-link tools scripted races use (cut, hold and release, drop by kind,
//! slow links).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use ftcore::{Incarnation, NodeId};
use timer::{Instant, SeededRng};

/// A directed link: messages from `.0` to `.1`.
pub type Link = (NodeId, NodeId);

/// What kind of channel the protocol runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// Like TCP: per-link FIFO, no loss or duplication; what is in flight is
    /// lost only when a partition or a cut breaks the link or the
    /// receiver's process dies (the connection breaks).
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

    /// The same network with every one-way delay exactly `d` (e.g. twice
    /// `t_msg`, for a run in which the detector's timing assumption never
    /// holds).
    pub fn every_delay(self, d: Duration) -> Self {
        NetConfig { delay_min: d, delay_max: d, ..self }
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
    link_last: BTreeMap<Link, Instant>,
    sides: Vec<Vec<NodeId>>,
    /// Links cut one way.
    cut: BTreeSet<Link>,
    /// Held links, with what arrived on them while held, in order.
    held: BTreeMap<Link, VecDeque<InFlight<M>>>,
    /// Released messages, delivered before anything else due.
    released: VecDeque<InFlight<M>>,
    /// Scripted drops: the next `n` messages of a kind on a link.
    drops: BTreeMap<Link, Vec<(String, u32)>>,
    /// Slow links: the extra delays of the slow periods in effect on each.
    slow: BTreeMap<Link, Vec<Duration>>,
    /// The latest delivery time of any message sent with extra delay.
    slow_tail: Instant,
}

impl<M: Clone> Network<M> {
    pub fn new(cfg: NetConfig) -> Self {
        Network {
            cfg,
            queue: BTreeMap::new(),
            seq: 0,
            link_last: BTreeMap::new(),
            sides: Vec::new(),
            cut: BTreeSet::new(),
            held: BTreeMap::new(),
            released: VecDeque::new(),
            drops: BTreeMap::new(),
            slow: BTreeMap::new(),
            slow_tail: Instant::ZERO,
        }
    }

    /// Everything in flight (released, then held, then queued by due
    /// time), so each link's messages come in the order they were sent.
    pub fn in_flight(&self) -> impl Iterator<Item = &InFlight<M>> {
        self.released.iter().chain(self.held.values().flatten()).chain(self.queue.values())
    }

    pub fn next_delivery(&self, now: Instant) -> Option<Instant> {
        if !self.released.is_empty() {
            return Some(now);
        }
        self.queue.keys().next().map(|(t, _)| *t)
    }

    /// The next message due: released ones first, then the queue; a message
    /// due on a held link is set aside on that link instead.
    pub fn pop_due(&mut self, now: Instant) -> Option<InFlight<M>> {
        if let Some(m) = self.released.pop_front() {
            return Some(m);
        }
        loop {
            let key = *self.queue.keys().next().filter(|(t, _)| *t <= now)?;
            let m = self.queue.remove(&key)?;
            match self.held.get_mut(&(m.from, m.to)) {
                Some(q) => q.push_back(m),
                None => return Some(m),
            }
        }
    }

    /// Whether `a` and `b` can talk under the current partitions.
    pub fn connected(&self, a: NodeId, b: NodeId) -> bool {
        self.sides.iter().all(|side| side.contains(&a) == side.contains(&b))
    }

    /// Whether a connection between `a` and `b` carries bytes now: no
    /// partition between them and neither direction cut.
    pub fn open_between(&self, a: NodeId, b: NodeId) -> bool {
        self.connected(a, b) && !self.cut.contains(&(a, b)) && !self.cut.contains(&(b, a))
    }

    /// When the last message sent on `link` is (or was) due.
    pub fn last_due(&self, link: Link) -> Option<Instant> {
        self.link_last.get(&link).copied()
    }

    /// A one-way delay drawn as a message's would be (before slow links).
    pub fn draw_delay(&self, rng: &mut SeededRng) -> Duration {
        rng.duration_between(self.cfg.delay_min, self.cfg.delay_max)
    }

    pub fn partition(&mut self, side: Vec<NodeId>) {
        self.sides.push(side);
    }

    pub fn heal(&mut self) {
        self.sides.clear();
    }

    pub fn cut(&mut self, link: Link) {
        self.cut.insert(link);
        // A broken connection loses what the receiver had not read.
        if self.cfg.channel == Channel::Reliable {
            if let Some(q) = self.held.get_mut(&link) {
                q.clear();
            }
        }
    }

    pub fn uncut(&mut self, link: Link) {
        self.cut.remove(&link);
    }

    pub fn hold(&mut self, link: Link) {
        self.held.entry(link).or_default();
    }

    /// Ends a hold; what it held is delivered next, in order. Returns how
    /// many messages that is.
    pub fn release(&mut self, link: Link) -> usize {
        let q = self.held.remove(&link).unwrap_or_default();
        let n = q.len();
        self.released.extend(q);
        n
    }

    pub fn drop_kind(&mut self, link: Link, kind: &str, count: u32) {
        self.drops.entry(link).or_default().push((kind.to_owned(), count));
    }

    pub fn slow(&mut self, link: Link, extra: Duration) {
        self.slow.entry(link).or_default().push(extra);
    }

    pub fn unslow(&mut self, link: Link, extra: Duration) {
        if let Some(v) = self.slow.get_mut(&link) {
            if let Some(i) = v.iter().position(|e| *e == extra) {
                v.remove(i);
            }
            if v.is_empty() {
                self.slow.remove(&link);
            }
        }
    }

    /// Removes every partition, cut, hold (delivering what it held), slow
    /// link and scripted drop.
    pub fn restore(&mut self) {
        self.heal();
        self.cut.clear();
        let links: Vec<Link> = self.held.keys().copied().collect();
        for l in links {
            self.release(l);
        }
        self.slow.clear();
        self.drops.clear();
    }

    /// Whether something that can fool a failure detector is in effect on
    /// the network (a partition, a cut, a hold, a slow link).
    pub fn disturbed(&self) -> bool {
        !self.sides.is_empty() || !self.cut.is_empty() || !self.held.is_empty() || !self.slow.is_empty()
    }

    /// When the last message sent with extra delay arrives.
    pub fn slow_tail(&self) -> Instant {
        self.slow_tail
    }

    /// Queues a message; returns why it was dropped, if it was.
    pub fn send(
        &mut self,
        rng: &mut SeededRng,
        now: Instant,
        m: InFlight<M>,
        kind: &str,
        to_up: bool,
    ) -> Option<&'static str> {
        if !to_up {
            return Some("receiver down");
        }
        if !self.connected(m.from, m.to) {
            return Some("partitioned");
        }
        let link = (m.from, m.to);
        if self.cut.contains(&link) {
            return Some("cut");
        }
        if let Some(rules) = self.drops.get_mut(&link) {
            if let Some(rule) = rules.iter_mut().find(|(k, n)| k == kind && *n > 0) {
                rule.1 -= 1;
                rules.retain(|(_, n)| *n > 0);
                if rules.is_empty() {
                    self.drops.remove(&link);
                }
                return Some("scripted drop");
            }
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
        let extra = self.slow.get(&link).and_then(|v| v.iter().max()).copied();
        for _ in 0..copies {
            let mut at = now + self.draw_delay(rng);
            // Drawn only on slow links, so runs without slow periods draw
            // exactly what they always drew.
            if let Some(extra) = extra {
                at = at + rng.duration_between(Duration::ZERO, extra);
            }
            let fifo = self.cfg.channel == Channel::Reliable || !self.cfg.reorder;
            if fifo {
                let last = self.link_last.entry(link).or_insert(Instant::ZERO);
                at = at.max(*last);
                *last = at;
            }
            if extra.is_some() {
                self.slow_tail = self.slow_tail.max(at);
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
        if self.cut.contains(&(m.from, m.to)) {
            return Err("cut");
        }
        if self.cfg.channel == Channel::Reliable && life != m.to_life {
            return Err("receiver restarted");
        }
        Ok(())
    }
}
