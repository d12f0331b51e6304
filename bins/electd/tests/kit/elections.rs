//! What the elections family (tests/elections.rs) takes from the kit: the
//! named-lock family's fault plan and its pause-aware lease checker, with
//! each client judged on its election's lock (`elect:NAME`).

use std::time::Duration;

use electd::ElNode;
use ftcore::ClientId;
use lockservice::LockName;
use sim::{FaultPlan, World};

/// [`super::safety_under_pauses_of`] for clients whose lock is
/// `lock_of(client)`: per lock name, no two clients' leases overlap and
/// fences rise (from the events and from the clients' replies); a client
/// whose process is paused while it holds is judged by its lease alone.
pub fn safety_under_pauses_by(
    lock_of: impl Fn(ClientId) -> LockName + 'static,
) -> impl FnMut(&World<ElNode>) -> Result<(), String> {
    super::checker(false, lock_of)
}

/// The named-lock family's plan (tests/sim.rs, `named_run`): crashes
/// (one a kill, one with a wiped disk), pauses, a slow period and
/// partitions, a minority at a time.
pub fn plan(n: u32) -> FaultPlan {
    FaultPlan {
        crashes: 3,
        kills: 1,
        wipes: 1,
        pauses: 3,
        pause_len: (Duration::from_millis(10), Duration::from_millis(600)),
        slow_periods: 1,
        slow_extra: Duration::from_millis(60),
        ..super::faults(n)
    }
}
