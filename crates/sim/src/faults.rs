//! Random fault schedules drawn from the simulation's generator.

use std::time::Duration;

use ftcore::{NodeId, Protocol};
use timer::{Instant, SeededRng};

use crate::Action;

/// How many faults to inject, and when. Crashes pick a node that is up and
/// keep at most `max_down` nodes down at once; each crashed node restarts
/// after a downtime drawn from `downtime` (unless `restart` is false).
#[derive(Clone, Debug, PartialEq)]
pub struct FaultPlan {
    /// Faults start no earlier than this.
    pub start: Instant,
    /// Faults (crashes, partitions) start no later than this; restarts and
    /// heals may come after.
    pub end: Instant,
    /// Number of crashes.
    pub crashes: u32,
    /// Most nodes down at the same time.
    pub max_down: u32,
    /// How long a crashed node stays down.
    pub downtime: (Duration, Duration),
    /// Whether crashed nodes come back.
    pub restart: bool,
    /// Number of partitions (each isolates a random minority, then heals).
    pub partitions: u32,
    /// How long a partition lasts.
    pub partition_len: (Duration, Duration),
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
            partitions: 0,
            partition_len: (Duration::from_millis(100), Duration::from_millis(1_000)),
        }
    }
}

impl FaultPlan {
    /// Draws a concrete schedule for `n` nodes.
    pub fn generate<P: Protocol>(&self, rng: &mut SeededRng, n: u32) -> Vec<(Instant, Action<P>)> {
        let mut out = Vec::new();
        let span = (self.start.as_micros(), self.end.as_micros().max(self.start.as_micros()));
        let mut times: Vec<u64> = (0..self.crashes).map(|_| rng.range_inclusive(span.0, span.1)).collect();
        times.sort_unstable();
        // (node, down_from, up_at) — up_at None: never restarts.
        let mut downs: Vec<(NodeId, Instant, Option<Instant>)> = Vec::new();
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
            out.push((t, Action::Crash(victim)));
            if let Some(up) = up {
                out.push((up, Action::Restart(victim)));
            }
        }
        for _ in 0..self.partitions {
            let t = Instant::from_micros(rng.range_inclusive(span.0, span.1));
            let size = rng.range_inclusive(1, u64::from((n / 2).max(1))) as usize;
            let mut ids: Vec<NodeId> = (1..=n).map(NodeId).collect();
            let mut side = Vec::new();
            for _ in 0..size.min(ids.len()) {
                let i = rng.range_inclusive(0, ids.len() as u64 - 1) as usize;
                side.push(ids.swap_remove(i));
            }
            side.sort();
            let heal = t + rng.duration_between(self.partition_len.0, self.partition_len.1);
            out.push((t, Action::Partition(side)));
            out.push((heal, Action::Heal));
        }
        out.sort_by_key(|(t, _)| *t);
        out
    }
}
