//! Random fault schedules drawn from the simulation's generator.

use std::time::Duration;

use ftcore::{ClientId, NodeId, Protocol};
use timer::{Instant, SeededRng};

use crate::{Action, Link};

/// How many faults to inject, and when. Crashes pick a node that is up and
/// keep at most `max_down` nodes down at once; each crashed node restarts
/// after a downtime drawn from `downtime` (unless `restart` is false).
///
/// Every fault kind has a count; a kind whose count is zero draws nothing
/// from the generator, so adding kinds never changes the schedules (and
/// traces) of plans that do not use them. [`FaultPlan::everything`] mixes
/// every kind, for sweeps.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultPlan {
    /// Faults start no earlier than this.
    pub start: Instant,
    /// Faults start no later than this; restarts, heals, resumes and the
    /// ends of slow periods may come after.
    pub end: Instant,
    /// Number of crashes.
    pub crashes: u32,
    /// Most nodes down at the same time (by `crashes`; majority-down
    /// episodes ignore it).
    pub max_down: u32,
    /// How long a crashed node stays down.
    pub downtime: (Duration, Duration),
    /// Whether crashed nodes come back.
    pub restart: bool,
    /// How many of the crashes (the first ones that happen) lose the
    /// node's disk too: it restarts with no stored state (a replaced disk,
    /// a re-imaged host) and must recover as a fresh node.
    pub wipes: u32,
    /// How many of the crashes (the first ones that happen) kill the
    /// node's process on a host that stays up ([`Action::Kill`]): peers
    /// with an open connection to it hear at once that it is gone.
    pub kills: u32,
    /// Number of partitions (each isolates a random minority, then heals).
    pub partitions: u32,
    /// How long a partition lasts.
    pub partition_len: (Duration, Duration),
    /// Number of pauses (a node stops receiving, firing and sending, then
    /// resumes with its old state: a GC pause, SIGSTOP, a VM stall).
    pub pauses: u32,
    /// How long a pause lasts.
    pub pause_len: (Duration, Duration),
    /// Number of slow periods: for a while, messages on some links (all of
    /// them, those from or to one node, or a random set) take up to
    /// `slow_extra` longer: delays beyond `t_msg`.
    pub slow_periods: u32,
    /// How long a slow period lasts.
    pub slow_len: (Duration, Duration),
    /// The most extra delay a slow link adds to one message.
    pub slow_extra: Duration,
    /// Number of majority-down episodes: `n / 2 + 1` nodes crash at once,
    /// each restarting after a downtime drawn from `majority_downtime`; one
    /// node (that no crash takes down meanwhile) stays up, so that with
    /// `restart` the cluster never restarts cold. None for `n < 3`.
    pub majority_downs: u32,
    /// How long a node of a majority-down episode stays down.
    pub majority_downtime: (Duration, Duration),
    /// Number of client disconnects, each of a client drawn from `clients`
    /// (none if `clients` is empty).
    pub disconnects: u32,
    /// The clients that may disconnect: (their node, their id).
    pub clients: Vec<(NodeId, ClientId)>,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan {
            start: Instant::from_millis(500),
            end: Instant::from_millis(5_000),
            crashes: 3,
            max_down: 1,
            downtime: (Duration::from_millis(100), Duration::from_millis(2_000)),
            restart: true,
            wipes: 0,
            kills: 0,
            partitions: 0,
            partition_len: (Duration::from_millis(100), Duration::from_millis(1_000)),
            pauses: 0,
            pause_len: (Duration::from_millis(10), Duration::from_millis(800)),
            slow_periods: 0,
            slow_len: (Duration::from_millis(100), Duration::from_millis(1_000)),
            slow_extra: Duration::from_millis(20),
            majority_downs: 0,
            majority_downtime: (Duration::from_millis(50), Duration::from_millis(1_000)),
            disconnects: 0,
            clients: Vec::new(),
        }
    }
}

impl FaultPlan {
    /// A plan for `n` nodes mixing every fault kind: crashes and restarts
    /// (a minority at a time), partitions, pauses, slow periods, a
    /// majority-down episode, and client disconnects (once
    /// [`with_clients`](Self::with_clients) names the clients). Tune the
    /// durations to the protocol's timing (`slow_extra` above its `t_msg`,
    /// pauses around its `suspect_after`).
    pub fn everything(n: u32) -> Self {
        FaultPlan {
            crashes: 4,
            max_down: (n.saturating_sub(1) / 2).max(1),
            downtime: (Duration::from_millis(50), Duration::from_millis(1_500)),
            partitions: 2,
            pauses: 3,
            slow_periods: 2,
            majority_downs: 1,
            disconnects: 3,
            ..FaultPlan::default()
        }
    }

    /// The same plan, with these clients to disconnect.
    pub fn with_clients(self, clients: Vec<(NodeId, ClientId)>) -> Self {
        FaultPlan { clients, ..self }
    }

    fn span(&self) -> (u64, u64) {
        (self.start.as_micros(), self.end.as_micros().max(self.start.as_micros()))
    }

    /// Draws a concrete schedule for `n` nodes.
    pub fn generate<P: Protocol>(&self, rng: &mut SeededRng, n: u32) -> Vec<(Instant, Action<P>)> {
        let mut out = Vec::new();
        let span = self.span();
        let mut times: Vec<u64> = (0..self.crashes).map(|_| rng.range_inclusive(span.0, span.1)).collect();
        times.sort_unstable();
        // (node, down_from, up_at) — up_at None: never restarts.
        let mut downs: Vec<(NodeId, Instant, Option<Instant>)> = Vec::new();
        let mut wipes = self.wipes;
        let mut kills = self.kills;
        for t in times {
            let t = Instant::from_micros(t);
            let is_down = |id: NodeId, downs: &[(NodeId, Instant, Option<Instant>)]| {
                downs.iter().any(|(d, from, up)| *d == id && *from <= t && up.is_none_or(|u| u > t))
            };
            let down_now = (1..=n).filter(|i| is_down(NodeId(*i), &downs)).count() as u32;
            if down_now >= self.max_down || down_now + 1 >= n {
                continue;
            }
            let candidates: Vec<NodeId> = (1..=n).map(NodeId).filter(|id| !is_down(*id, &downs)).collect();
            let victim = candidates[rng.range_inclusive(0, candidates.len() as u64 - 1) as usize];
            let up = self.restart.then(|| t + rng.duration_between(self.downtime.0, self.downtime.1));
            downs.push((victim, t, up));
            if kills > 0 {
                kills -= 1;
                out.push((t, Action::Kill(victim)));
            } else {
                out.push((t, Action::Crash(victim)));
            }
            if let Some(up) = up {
                if wipes > 0 {
                    wipes -= 1;
                    out.push((t + Duration::from_micros(1), Action::WipeDisk(victim)));
                }
                out.push((up, Action::Restart(victim)));
            }
        }
        for _ in 0..self.partitions {
            let t = Instant::from_micros(rng.range_inclusive(span.0, span.1));
            let size = rng.range_inclusive(1, u64::from((n / 2).max(1))) as usize;
            let side = pick(rng, n, size);
            let heal = t + rng.duration_between(self.partition_len.0, self.partition_len.1);
            out.push((t, Action::Partition(side)));
            out.push((heal, Action::Heal));
        }
        self.generate_more(rng, n, &downs, &mut out);
        out.sort_by_key(|(t, _)| *t);
        out
    }

    /// The kinds added after the first plans: each draws only when its
    /// count is non-zero.
    fn generate_more<P: Protocol>(
        &self,
        rng: &mut SeededRng,
        n: u32,
        downs: &[(NodeId, Instant, Option<Instant>)],
        out: &mut Vec<(Instant, Action<P>)>,
    ) {
        let span = self.span();
        let mut paused: Vec<(NodeId, Instant, Instant)> = Vec::new();
        for _ in 0..self.pauses {
            let t = Instant::from_micros(rng.range_inclusive(span.0, span.1));
            let len = rng.duration_between(self.pause_len.0, self.pause_len.1);
            let free: Vec<NodeId> = (1..=n)
                .map(NodeId)
                .filter(|id| !paused.iter().any(|(p, from, to)| p == id && *from <= t + len && t <= *to))
                .collect();
            if free.is_empty() {
                continue;
            }
            let id = free[rng.range_inclusive(0, free.len() as u64 - 1) as usize];
            paused.push((id, t, t + len));
            out.push((t, Action::Pause(id)));
            out.push((t + len, Action::Resume(id)));
        }
        for _ in 0..self.slow_periods {
            let t = Instant::from_micros(rng.range_inclusive(span.0, span.1));
            let len = rng.duration_between(self.slow_len.0, self.slow_len.1);
            let all = (1..=n).flat_map(|a| (1..=n).filter(move |b| *b != a).map(move |b| (NodeId(a), NodeId(b))));
            let links: Vec<Link> = match rng.range_inclusive(0, 3) {
                0 => all.collect(),
                1 => {
                    let x = NodeId(rng.range_inclusive(1, u64::from(n)) as u32);
                    all.filter(|(a, _)| *a == x).collect()
                }
                2 => {
                    let x = NodeId(rng.range_inclusive(1, u64::from(n)) as u32);
                    all.filter(|(_, b)| *b == x).collect()
                }
                _ => all.collect::<Vec<_>>().into_iter().filter(|_| rng.chance(0.5)).collect(),
            };
            if links.is_empty() {
                continue;
            }
            out.push((t, Action::Slow(links.clone(), self.slow_extra)));
            out.push((t + len, Action::Unslow(links, self.slow_extra)));
        }
        for _ in 0..self.majority_downs {
            let t = Instant::from_micros(rng.range_inclusive(span.0, span.1));
            // One node stays up throughout (a node `crashes` does not take
            // down then), so the cluster never restarts cold: a cold start's
            // fences rest on wall-clock time and durable promises, which a
            // simulated clock does not model.
            let until = t + self.majority_downtime.1;
            let survivors: Vec<NodeId> = (1..=n)
                .map(NodeId)
                .filter(|id| !downs.iter().any(|(d, from, up)| d == id && *from <= until && up.is_none_or(|u| u >= t)))
                .collect();
            if n < 3 || survivors.is_empty() {
                continue;
            }
            let survivor = survivors[rng.range_inclusive(0, survivors.len() as u64 - 1) as usize];
            let others: Vec<NodeId> = (1..=n).map(NodeId).filter(|id| *id != survivor).collect();
            for i in pick(rng, others.len() as u32, (n / 2 + 1) as usize) {
                let id = others[i.0 as usize - 1];
                let up = t + rng.duration_between(self.majority_downtime.0, self.majority_downtime.1);
                out.push((t, Action::Crash(id)));
                out.push((up, Action::Restart(id)));
            }
        }
        if !self.clients.is_empty() {
            for _ in 0..self.disconnects {
                let t = Instant::from_micros(rng.range_inclusive(span.0, span.1));
                let (node, client) = self.clients[rng.range_inclusive(0, self.clients.len() as u64 - 1) as usize];
                out.push((t, Action::ClientGone(node, client)));
            }
        }
    }
}

/// `size` distinct nodes of `1..=n`, sorted.
fn pick(rng: &mut SeededRng, n: u32, size: usize) -> Vec<NodeId> {
    let mut ids: Vec<NodeId> = (1..=n).map(NodeId).collect();
    let mut side = Vec::new();
    for _ in 0..size.min(ids.len()) {
        let i = rng.range_inclusive(0, ids.len() as u64 - 1) as usize;
        side.push(ids.swap_remove(i));
    }
    side.sort();
    side
}
