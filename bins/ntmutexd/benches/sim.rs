//! `cargo bench -p ntmutexd`: the simulator's message counts — messages per
//! critical section at N = 8, 16, 32 (light uniform load, failure-free;
//! performance.md bounds it by log2(N) + 2) and messages per recovery by
//! mechanism. Counts, not times: deterministic for a given seed.

#[path = "../tests/workload/mod.rs"]
mod workload;

use std::time::Duration;

use ftcore::{ClientId, NodeId};
use sim::Action;
use timer::Instant;

fn main() {
    println!("{:<6} {:>10} {:>10} {:>10} {:>12} {:>14}", "N", "CS", "messages", "per CS", "log2(N)+2", "lease msgs/s");
    for n in [8u32, 16, 32] {
        let (cs, msgs, per_cs, lease) = workload::messages_per_cs(n);
        println!("{n:<6} {cs:>10} {msgs:>10} {per_cs:>10.2} {:>12.2} {lease:>14.0}", f64::from(n).log2() + 2.0);
    }
    println!();
    println!("{:<6} {:>10}  by kind", "mech", "messages");
    let cases: [(&str, u32, usize, &[u32]); 2] = [("m1", 6, 3, &[4]), ("m2", 6, 1, &[3, 4])];
    for (name, n, k, victims) in cases {
        let mut sim = workload::quiet_queue(1, n, k);
        sim.run_until(Instant::from_millis(600)).expect("queue forms");
        for v in victims {
            sim.after(Duration::ZERO, Action::Crash(NodeId(*v)));
        }
        match workload::recovery_messages(&mut sim, Instant::from_millis(3_000)) {
            Some((mech, counts)) => {
                println!("{name:<6} {:>10}  {mech:?} {counts:?}", counts.values().sum::<u64>())
            }
            None => println!("{name:<6} {:>10}", "no recovery"),
        }
    }
    let mut sim = workload::quiet_queue(3, 6, 3);
    sim.run_until(Instant::from_millis(600)).expect("queue forms");
    sim.after(Duration::ZERO, Action::Crash(NodeId(6)));
    sim.run_for(Duration::from_millis(300)).expect("runs");
    sim.after(Duration::ZERO, Action::Restart(NodeId(6)));
    sim.after(Duration::from_millis(100), workload::acquire(NodeId(6), ClientId(60)));
    if let Some((mech, counts)) = workload::recovery_messages(&mut sim, Instant::from_millis(3_000)) {
        println!("{:<6} {:>10}  {mech:?} {counts:?}", "m3", counts.values().sum::<u64>());
    }
}
