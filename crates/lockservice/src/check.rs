//! The lock invariants of reliability.md's stage after leases, judged from
//! the clients' side, for every lock daemon's simulator and model checks:
//! feed it each [`LockEvent`] with the instant and the node it happened at.
//!
//! Each grant holds from its grant until its client let go (`Released`
//! by its own `Release` or its disconnection) or its latest `lease_until`
//! passed, whichever is first. A `LockLost` does not end it sooner: ftctl
//! sends CMD SIGTERM then and SIGKILL only at `lease_until`, so CMD may
//! run until then; nor does a crash or pause of its daemon. Violations: a
//! grant while another holds, a fence not above every earlier one, a grant
//! whose lease has already ended, a renewal of a hold that has ended. The
//! simulator has one clock, so the client's deadline is judged as is.

use std::collections::BTreeMap;

use ftcore::NodeId;
use timer::Instant;

use crate::{LockEvent, LockReply, ReleaseHow};

/// The open grants and the highest fence so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeaseChecker {
    /// fence → (node, granted at, holds until)
    open: BTreeMap<u128, (NodeId, Instant, Instant)>,
    last_fence: u128,
}

impl LeaseChecker {
    /// Nothing granted yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// One event of `node`'s lock service at `t` (events in time order).
    pub fn on_event(&mut self, t: Instant, node: NodeId, e: &LockEvent) -> Result<(), String> {
        match e {
            LockEvent::Granted { fence, lease_until, .. } => {
                self.open.retain(|_, (_, _, until)| *until > t);
                if *lease_until <= t {
                    return Err(format!("{node} granted fence {fence:#x} at {t} with a lease ending at {lease_until}"));
                }
                if let Some((f0, (n0, t0, until))) = self.open.iter().next() {
                    return Err(format!(
                        "{node} granted fence {fence:#x} at {t} while {n0}'s grant {f0:#x} (from {t0}) holds until {until}"
                    ));
                }
                if *fence <= self.last_fence {
                    return Err(format!("{node} granted fence {fence:#x} after {:#x}", self.last_fence));
                }
                self.last_fence = *fence;
                self.open.insert(*fence, (node, t, *lease_until));
            }
            LockEvent::Renewed { fence, lease_until, .. } => match self.open.get_mut(fence) {
                Some((_, _, until)) if *until > t => *until = (*until).max(*lease_until),
                _ => return Err(format!("{node} renewed fence {fence:#x} at {t}, whose hold had ended")),
            },
            LockEvent::Released { fence, how: ReleaseHow::Released | ReleaseHow::Disconnected, .. } => {
                if let Some((_, _, until)) = self.open.get_mut(fence) {
                    *until = (*until).min(t);
                }
            }
            // Lost, expired or revoked: CMD may run until its lease's end.
            LockEvent::Released { .. } => {}
            LockEvent::TimedOut { .. } | LockEvent::Revoking { .. } => {}
        }
        Ok(())
    }
}

/// [`LeaseChecker`] with a count of the grants it saw: the judge of a lock
/// daemon's model check (`sim::model`), whose state must be `Eq + Hash`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockJudge {
    checker: LeaseChecker,
    grants: u32,
}

impl LockJudge {
    /// Nothing granted yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// One lock event of `node` at `t` (see [`LeaseChecker::on_event`]).
    pub fn on_event(&mut self, t: Instant, node: NodeId, e: &LockEvent) -> Result<(), String> {
        if let LockEvent::Granted { .. } = e {
            self.grants = self.grants.saturating_add(1);
        }
        self.checker.on_event(t, node, e)
    }

    /// Grants seen so far.
    pub fn grants(&self) -> u32 {
        self.grants
    }
}

/// Whether one client's replies, in order, are one uninterrupted hold:
/// `Granted`, any number of `Renewed`, then `Released` (never a
/// `LockLost`): the hold outlived whatever failed elsewhere.
pub fn held_until_released(told: &[&LockReply]) -> bool {
    matches!(told, [LockReply::Granted { .. }, renewed @ .., LockReply::Released]
        if renewed.iter().all(|r| matches!(r, LockReply::Renewed { .. })))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ftcore::ClientId;

    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn granted(fence: u128, until: u64) -> LockEvent {
        LockEvent::Granted { client: ClientId(1), fence, waited: Duration::ZERO, lease_until: at(until) }
    }

    fn released(fence: u128) -> LockEvent {
        LockEvent::Released { client: ClientId(1), fence, held: Duration::ZERO, how: ReleaseHow::Released }
    }

    #[test]
    fn a_grant_after_the_lease_end_or_a_release_passes() {
        let mut c = LeaseChecker::new();
        c.on_event(at(0), NodeId(1), &granted(1, 30)).unwrap();
        // At the lease's end exactly: the client stopped then.
        c.on_event(at(30), NodeId(2), &granted(2, 60)).unwrap();
        c.on_event(at(40), NodeId(2), &released(2)).unwrap();
        c.on_event(at(41), NodeId(3), &granted(3, 70)).unwrap();
    }

    #[test]
    fn a_grant_inside_a_live_or_renewed_lease_is_an_overlap() {
        let mut c = LeaseChecker::new();
        c.on_event(at(0), NodeId(1), &granted(1, 30)).unwrap();
        let e = c.on_event(at(29), NodeId(2), &granted(2, 60)).unwrap_err();
        assert!(e.contains("holds until"), "{e}");
        let mut c = LeaseChecker::new();
        c.on_event(at(0), NodeId(1), &granted(1, 30)).unwrap();
        let renewed = LockEvent::Renewed { client: ClientId(1), fence: 1, lease_until: at(50) };
        c.on_event(at(20), NodeId(1), &renewed).unwrap();
        assert!(c.on_event(at(40), NodeId(2), &granted(2, 60)).is_err());
    }

    #[test]
    fn a_lost_lock_holds_until_its_lease_ends() {
        let mut c = LeaseChecker::new();
        c.on_event(at(0), NodeId(1), &granted(1, 30)).unwrap();
        let lost = LockEvent::Released { client: ClientId(1), fence: 1, held: Duration::ZERO, how: ReleaseHow::Lost };
        c.on_event(at(5), NodeId(1), &lost).unwrap();
        assert!(c.on_event(at(10), NodeId(2), &granted(2, 60)).is_err(), "CMD may run until 30");
        let renewed = LockEvent::Renewed { client: ClientId(1), fence: 2, lease_until: at(90) };
        let e = c.on_event(at(70), NodeId(2), &renewed).unwrap_err();
        assert!(e.contains("had ended"), "{e}");
        let e = LeaseChecker::new().on_event(at(5), NodeId(1), &granted(3, 5)).unwrap_err();
        assert!(e.contains("with a lease ending"), "{e}");
    }

    #[test]
    fn a_crash_does_not_end_a_hold_and_fences_must_rise() {
        let mut c = LeaseChecker::new();
        c.on_event(at(0), NodeId(1), &granted(5, 30)).unwrap();
        // Node 1 crashed: no event; its client holds until 30.
        assert!(c.on_event(at(10), NodeId(2), &granted(6, 40)).is_err());
        let mut c = LeaseChecker::new();
        c.on_event(at(0), NodeId(1), &granted(5, 30)).unwrap();
        let e = c.on_event(at(31), NodeId(2), &granted(5, 40)).unwrap_err();
        assert!(e.contains("after"), "{e}");
    }
}
