//! Ring repair on top of the heartbeat ring (ringd.md, Liveness and ring
//! repair). Fresh-node recovery is in `join.rs`.
//!
//! The embedded `hbring` owns the topology: its view decides the successor
//! and predecessor, `Excluded` and rejoin. What ringd adds here is the
//! seed's `IAmNewNext`: the replica whose predecessor died (the detector D)
//! sends it round the ring to whoever pointed at that life of the failed
//! replica, which answers `IAmNewPrevious` and hands D its frozen or
//! unacknowledged copy if D has not seen it — D then starts a census at
//! once, the copy supplying the state.

use ftcore::{Incarnation, NodeId};
use hbring::HbRing;
use timer::Instant;

use super::{RdEvent, RdNode, RdRule, Role};
use crate::msg::{Msg, NewNext, Token};

/// The ring neighbours and life as of the last input.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct RingSnapshot {
    pred: Option<(NodeId, Incarnation)>,
    succ: Option<(NodeId, Incarnation)>,
    inc: Incarnation,
}

impl RingSnapshot {
    fn of(ring: &HbRing) -> Self {
        let view = ring.view();
        let with_life = |n: Option<NodeId>| n.map(|n| (n, view.liveness(n).map(|l| l.incarnation).unwrap_or_default()));
        RingSnapshot { pred: with_life(view.predecessor()), succ: with_life(view.successor()), inc: ring.incarnation() }
    }
}

/// Whether `n` in life `inc` has left `ring`'s view (dead, or replaced by
/// a new life). Life 0 is "not heard from yet": learning a peer's life is
/// no failure.
fn gone(ring: &HbRing, n: NodeId, inc: Incarnation) -> bool {
    let view = ring.view();
    inc != Incarnation(0) && (!view.is_alive(n) || view.liveness(n).map(|l| l.incarnation).unwrap_or_default() != inc)
}

/// The pending own recovery (this replica detected its predecessor's death).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Recovery {
    id: u64,
    failed: NodeId,
    since: Instant,
}

/// Ring repair's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Repair {
    /// The pending own ring recovery.
    recovery: Option<Recovery>,
    /// The successor this replica had until the ring declared it dead
    /// (that life): an IAmNewNext about it is answered here.
    lost_next: Option<(NodeId, Incarnation)>,
    /// An IAmNewNext forwarded from here: (origin, recovery). If the
    /// successor becomes that origin, this replica splices itself to it.
    forwarded: Option<(NodeId, u64)>,
    /// Ring neighbours and life as of the last input (to see changes).
    last_ring: RingSnapshot,
}

/// What the heartbeat ring changed since the last input, for the node to
/// act on.
struct RingChange {
    /// This replica has a new life.
    new_life: bool,
    /// The successor became the origin of the IAmNewNext forwarded from
    /// here: (origin, recovery) to splice to.
    splice: Option<(NodeId, u64)>,
    /// The predecessor died (that life): a recovery starts.
    recover: Option<(NodeId, Incarnation)>,
}

impl Repair {
    pub(super) fn new(ring: &HbRing) -> Self {
        Repair { recovery: None, lost_next: None, forwarded: None, last_ring: RingSnapshot::of(ring) }
    }

    /// Takes in the ring as it is now: remembers a successor that died,
    /// drops the forwarded IAmNewNext the new successor originated, and
    /// says what the node does.
    fn ring_moved(&mut self, ring: &HbRing) -> RingChange {
        let before = std::mem::replace(&mut self.last_ring, RingSnapshot::of(ring));
        let after = &self.last_ring;
        if let Some((s, inc)) = before.succ {
            if gone(ring, s, inc) {
                self.lost_next = Some((s, inc));
            }
        }
        let mut splice = None;
        if after.succ != before.succ {
            if let (Some((origin, r)), Some((s, _))) = (self.forwarded, after.succ) {
                if s == origin {
                    self.forwarded = None;
                    splice = Some((origin, r));
                }
            }
        }
        let recover = before.pred.filter(|&(p, inc)| after.pred != before.pred && gone(ring, p, inc));
        RingChange { new_life: after.inc != before.inc, splice, recover }
    }

    fn start(&mut self, id: u64, failed: NodeId, now: Instant) {
        self.recovery = Some(Recovery { id, failed, since: now });
    }

    /// The pending recovery ends: when it started.
    fn end(&mut self) -> Option<Instant> {
        self.recovery.take().map(|r| r.since)
    }

    /// Whether recovery `id` is the pending one (`any`: whether one is
    /// pending at all).
    fn pending(&self, id: u64, any: bool) -> bool {
        self.recovery.as_ref().is_some_and(|r| r.id == id || any)
    }

    /// Whether `n` in life `inc` is the successor lost here.
    fn lost(&self, n: NodeId, inc: Incarnation) -> bool {
        self.lost_next == Some((n, inc))
    }

    fn forget_lost_next(&mut self) {
        self.lost_next = None;
    }

    /// An IAmNewNext of `origin`'s `recovery` goes on from here.
    fn forwarding(&mut self, origin: NodeId, recovery: u64) {
        self.forwarded = Some((origin, recovery));
    }
}

impl RdNode {
    /// Reacts to what the heartbeat ring changed since the last input.
    pub(super) fn ring_changed(&mut self, now: Instant) {
        let RingChange { new_life, splice, recover } = self.repair.ring_moved(&self.ring);
        if new_life {
            // Excluded (or behind, or it yielded): a new life owns no
            // token, and, like a restarted one, has lost none yet — its
            // token-lost deadline starts now (an overdue one would census
            // at once and its promise refuse the token in use).
            self.stop_owning(now, false);
            if self.cfg.rules.on(RdRule::LostDeadlineStartsWithTheLife) {
                self.census.set_wanted(false);
                self.token_activity(now);
            }
        }
        if let Some((origin, r)) = splice {
            // Two neighbours failed together: the IAmNewNext stalled on a
            // dead replica. Splice to its origin, no copy.
            let members = self.ring.view().alive_from_me();
            self.out.send(origin, Msg::IAmNewPrevious { recovery: r, members });
        }
        if let Some((p, inc)) = recover {
            self.start_recovery(now, p, inc);
        }
    }

    /// This replica's predecessor `failed` (life `inc`) died: hand the
    /// token's newest copy to this replica (ringd.md, IAmNewNext).
    fn start_recovery(&mut self, now: Instant, failed: NodeId, inc: Incarnation) {
        let id = self.fresh_id();
        self.out.event(RdEvent::RecoveryStarted { failed });
        self.repair.start(id, failed, now);
        match self.successor() {
            Some(s) if s != failed => {
                let seen = self.seen;
                self.out.send(
                    s,
                    Msg::IAmNewNext(NewNext { failed, failed_inc: inc, origin: self.me, recovery: id, seen, hops: 0 }),
                );
            }
            _ => {
                // Alone (a two-replica ring): the rule applies to itself.
                if self.sent_to(failed, inc).is_some() {
                    self.start_census(now, None);
                }
                self.end_recovery(now);
            }
        }
    }

    /// The copy this replica sent to `to` in life `inc` and has not had
    /// released (unacknowledged or frozen).
    fn sent_to(&self, to: NodeId, inc: Incarnation) -> Option<&Token> {
        let h = self.held.as_ref()?;
        match h.role {
            Role::Unacked { to: t, inc: i, .. } | Role::Frozen { to: t, inc: i } if t == to && i == inc => {
                Some(&h.token)
            }
            _ => None,
        }
    }

    fn end_recovery(&mut self, now: Instant) {
        if let Some(since) = self.repair.end() {
            self.out.event(RdEvent::Recovered { took: now.saturating_since(since) });
        }
    }

    /// Whether `a` is newer than `b` as tokens are compared: by (epoch, seq).
    pub(super) fn newer(&self, a: (u64, u64), b: (u64, u64)) -> bool {
        ftcore::mutant! {
            if self.cfg.rules.off(RdRule::SeenAsAPair) {
                // The mutation: by seq alone.
                return a.1 > b.1;
            }
        }
        a > b
    }

    pub(super) fn on_i_am_new_next(&mut self, now: Instant, m: NewNext) {
        let NewNext { failed, failed_inc, origin, recovery, seen, hops } = m;
        if origin == self.me {
            // Back at the detector: nobody points at that life any more.
            if self.repair.pending(recovery, false) {
                self.end_recovery(now);
            }
            return;
        }
        let points = (self.successor() == Some(failed) && self.life_of(failed) == failed_inc && failed != origin)
            || self.repair.lost(failed, failed_inc);
        if points {
            self.repair.forget_lost_next();
            // The copy first: the detector acts on it only while its
            // recovery is pending, which IAmNewPrevious ends.
            // (safety) Only a copy newer than what the detector has seen:
            // it has seen a newer token otherwise.
            let wanted = |t: &&Token| self.cfg.rules.off(RdRule::CopyNewerThanSeen) || self.newer(t.id(), seen);
            if let Some(t) = self.sent_to(failed, failed_inc).filter(wanted).cloned() {
                self.out.send(origin, Msg::Copy { recovery, token: Box::new(t) });
            }
            let members = self.ring.view().alive_from_me();
            self.out.send(origin, Msg::IAmNewPrevious { recovery, members });
            return;
        }
        let n = u32::try_from(self.members.len()).unwrap_or(u32::MAX);
        let hops = hops.saturating_add(1);
        if hops >= n {
            self.out.event(RdEvent::Refused { from: origin, reason: "hops" });
            return;
        }
        if let Some(s) = self.successor() {
            self.repair.forwarding(origin, recovery);
            self.out.send(s, Msg::IAmNewNext(NewNext { failed, failed_inc, origin, recovery, seen, hops }));
        }
    }

    /// (safety) Whether an `IAmNewPrevious` or a `Copy` of `recovery` is
    /// for the pending own recovery (ringd.md, At D): one of an earlier
    /// recovery, held in the network, must neither end the pending one
    /// nor supply a census.
    fn for_pending_recovery(&self, recovery: u64) -> bool {
        let any = self.cfg.rules.off(RdRule::ActsOnlyForPendingRecovery);
        self.repair.pending(recovery, any)
    }

    pub(super) fn on_i_am_new_previous(&mut self, now: Instant, _from: NodeId, recovery: u64) {
        if self.for_pending_recovery(recovery) {
            self.end_recovery(now);
        }
    }

    pub(super) fn on_copy(&mut self, now: Instant, recovery: u64, token: Token) {
        if !self.for_pending_recovery(recovery) || !self.newer(token.id(), self.seen) {
            return;
        }
        ftcore::mutant! {
            if self.cfg.rules.off(RdRule::CopyOnlySuppliesACensus) {
                // The unsafe shortcut: copy.epoch + 1 chosen locally.
                let mut t = token;
                t.epoch += 1;
                t.seq = 0;
                t.from = self.me;
                self.install(now, t);
                return;
            }
        }
        self.start_census(now, Some(token));
    }
}
