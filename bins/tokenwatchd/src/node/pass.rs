//! The token and its confirmation (tokenwatchd.md, Algorithm): `Token(m)`
//! accepted when new (`tpc = m + 1`, `Ack(L−1, tpc)` sent forward), dropped
//! when stale (re-ACKed, forward and straight back to its sender, when it
//! repeats the last hand-off), refused with `Stale` below the stored
//! epoch; ACKs forwarded while `ttl > 1` whatever
//! their `m` and never changing `tpc`; retransmission every ring timeout,
//! at most r times, then a bypass (a Claim skipping the silent successor);
//! the visit: grants with a fresh fence each, only under the lease
//! (`lease.rs`) and never past the visit's end, the idle hold and
//! `Wanted` (`ftcore::idle`), `max_hold`.

use std::time::Duration;

use ftcore::idle::IdleHold;
use ftcore::NodeId;
use timer::Instant;

use super::state::{Awaiting, Visit};
use super::{ClaimOutcome, TwConfig, TwEvent, TwNode, TwRule};
use crate::msg::Msg;

/// What the passing of the token keeps besides the visit: the hand-off
/// awaiting its confirmation, the last hand-off accepted, the last
/// arrival, and the idle hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Passing {
    awaiting: Option<Awaiting>,
    /// The (epoch, m) of the last hand-off accepted: its retransmission is
    /// acked again.
    last_handoff: Option<(u64, u64)>,
    /// When (and in which epoch) the token last arrived here: the next
    /// arrival in the same epoch is one rotation later.
    last_arrival: Option<(u64, Instant)>,
    /// The idle hold (`token_min_hold`, `quiet`, `Wanted`).
    idle: IdleHold,
}

/// What an unconfirmed hand-off due now needs.
enum AwaitStep {
    /// Sent again.
    Retransmit { to: NodeId, msg: Msg },
    /// Retransmitted r times and still unconfirmed: dropped, its silent
    /// successor to be bypassed.
    Bypass { peer: NodeId, epoch: u64 },
}

impl Passing {
    /// Nothing handed off or accepted yet; an idle hold of
    /// `token_min_hold`.
    pub(super) fn new(token_min_hold: Duration) -> Self {
        Passing { awaiting: None, last_handoff: None, last_arrival: None, idle: IdleHold::new(token_min_hold) }
    }

    /// The hand-off awaiting its confirmation, if any.
    pub(super) fn awaiting(&self) -> Option<&Awaiting> {
        self.awaiting.as_ref()
    }

    /// A peer said it wants the token (`Wanted`).
    pub(super) fn on_wanted(&mut self, now: Instant) {
        self.idle.on_wanted(now);
    }

    /// A token made here (a Claim won) starts with no hand-off accepted.
    pub(super) fn forget_handoff(&mut self) {
        self.last_handoff = None;
    }

    /// Whether `Token(epoch, m)` repeats the last hand-off accepted.
    fn is_last_handoff(&self, epoch: u64, m: u64) -> bool {
        self.last_handoff == Some((epoch, m))
    }

    /// The hand-off `Token(epoch, m)` was accepted.
    fn accepted(&mut self, epoch: u64, m: u64) {
        self.last_handoff = Some((epoch, m));
    }

    /// Stops awaiting the hand-off, returning it.
    fn take_awaiting(&mut self) -> Option<Awaiting> {
        self.awaiting.take()
    }

    /// The token arrived in `epoch`: how long since it last arrived in
    /// the same epoch (a rotation), if it did.
    fn arrived(&mut self, epoch: u64, now: Instant) -> Option<Duration> {
        let rotation = self.last_arrival.filter(|(e, _)| *e == epoch).map(|(_, at)| now.saturating_since(at));
        self.last_arrival = Some((epoch, now));
        rotation
    }

    /// Whether a `LeaseRenew` from `from` carrying (epoch, tpc) proves the
    /// hand-off arrived: from the awaited successor, above the (epoch, m)
    /// handed off.
    fn confirmed_by_renewal(&self, from: NodeId, epoch: u64, tpc: u64) -> bool {
        self.awaiting.as_ref().is_some_and(|a| a.to == from && (epoch, tpc) > (a.epoch, a.m))
    }

    /// Whether an ACK of (epoch, m) confirms the hand-off.
    fn confirmed_by_ack(&self, epoch: u64, m: u64) -> bool {
        self.awaiting.as_ref().is_some_and(|a| (epoch, m) > (a.epoch, a.m))
    }

    /// `from` refused the token: the hand-off to it, if awaited, is
    /// dropped. Returns whether it was.
    fn refused_by(&mut self, from: NodeId) -> bool {
        if self.awaiting.as_ref().is_none_or(|a| a.to != from) {
            return false;
        }
        self.awaiting = None;
        true
    }

    /// The idle hold of `visit` in a live view of `live_len`.
    fn idle_hold(&self, live_len: usize, visit: Option<&Visit>) -> Duration {
        visit.map_or(Duration::ZERO, |v| self.idle.hold(live_len, v.since, v.quiet))
    }

    /// Whether a client starting to wait here tells every peer.
    fn should_want(&self, holding: bool) -> bool {
        self.idle.should_want(holding)
    }

    /// The visit `v` ends (`served`: it granted or has waiters): the
    /// token's hops without service as it leaves.
    fn leaves(&mut self, v: &Visit, served: bool) -> u32 {
        self.idle.pass(v.since, v.quiet, served)
    }

    /// The token was handed off: awaiting `a`'s confirmation.
    fn handed_off(&mut self, a: Awaiting) {
        self.awaiting = Some(a);
    }

    /// When the unconfirmed hand-off is retransmitted or bypassed.
    fn awaiting_due(&self, cfg: &TwConfig) -> Option<Instant> {
        self.awaiting.as_ref().map(|a| {
            if a.retransmits < cfg.max_retransmits {
                a.last_sent + cfg.ring_timeout
            } else {
                a.last_sent + cfg.bypass_after
            }
        })
    }

    /// Retransmits the unconfirmed hand-off every ring timeout, at most r
    /// times; then, `bypass_after` on, drops it for a bypass.
    fn awaiting_timeout(&mut self, now: Instant, cfg: &TwConfig) -> Option<AwaitStep> {
        let a = self.awaiting.as_mut()?;
        if a.retransmits < cfg.max_retransmits {
            if now >= a.last_sent + cfg.ring_timeout {
                a.retransmits += 1;
                a.last_sent = now;
                let msg = Msg::Token { epoch: a.epoch, m: a.m, bypassed: a.bypassed.clone(), quiet: a.quiet };
                return Some(AwaitStep::Retransmit { to: a.to, msg });
            }
        } else if now >= a.last_sent + cfg.bypass_after {
            let step = AwaitStep::Bypass { peer: a.to, epoch: a.epoch };
            self.awaiting = None;
            return Some(step);
        }
        None
    }
}

impl TwNode {
    pub(super) fn on_token(
        &mut self,
        now: Instant,
        from: NodeId,
        epoch: u64,
        m: u64,
        bypassed: Vec<NodeId>,
        quiet: u32,
    ) {
        if !self.promise.stored().recovered() {
            // An unrecovered fresh node takes no token; the sender bypasses it.
            return;
        }
        // (safety) Below the stored epoch (or at or below a recovered
        // fresh node's recovered_max): answer Stale with the higher one.
        let old = self.promise.check_token(epoch).is_err() || epoch < self.epoch();
        if old && self.cfg.rules.on(TwRule::StaleEpochsRefused) {
            let known = self.promise.threshold().max(self.epoch()).max(self.promise.stored().recovered_max());
            self.out.send(from, Msg::Stale { epoch: known.max(epoch) });
            self.out.event(TwEvent::StaleAnswered);
            return;
        }
        if epoch == self.epoch() && m <= self.tpc {
            if self.unsure_from.is_some_and(|u| m >= u) && self.cfg.rules.on(TwRule::UnsureTokensAnsweredStale) {
                // Restarted with a reserve: maybe new, maybe a copy
                // accepted before the crash. Neither kept nor dropped in
                // silence (the sender would retransmit, then bypass): the
                // sender drops its copy and claims, and the new epoch's
                // token is taken.
                self.out.send(from, Msg::Stale { epoch });
                self.out.event(TwEvent::StaleAnswered);
                return;
            }
            // Stale: a retransmission that already arrived, or an old copy.
            if self.passing.is_last_handoff(epoch, m) {
                self.send_ack(epoch, self.tpc, false);
                // And straight back to the sender: the ACK around the ring
                // dies at any dead process on the way, and every process
                // whose hand-off it carried would bypass a live successor.
                self.out.send(from, Msg::Ack { epoch, ttl: 1, m: self.tpc });
                self.out.event(TwEvent::ReAcked);
            }
            self.out.event(TwEvent::StaleDropped);
            return;
        }
        if let Some(v) = &self.visit {
            if v.epoch >= epoch {
                // A second token of the epoch held here: never installed.
                self.out.event(TwEvent::Refused { from, reason: "second_token" });
                return;
            }
            self.locks.lose(now, "the token was superseded by a newer epoch", &mut self.out);
            self.leases.end();
            self.visit = None;
        }
        let Some(tpc) = self.next_count(m) else {
            // tpc would overflow: grant nothing, claim (its token restarts at 1).
            self.out.event(TwEvent::Refused { from, reason: "tpc_overflow" });
            return self.start_claim(now, Vec::new());
        };
        if self.promise.on_in_use(epoch, now).is_err() && self.cfg.rules.on(TwRule::StaleEpochsRefused) {
            self.out.event(TwEvent::Refused { from, reason: "epoch" });
            return;
        }
        // New. Getting a token back proves the earlier hand-off worked.
        if let Some(a) = self.passing.take_awaiting() {
            self.out.event(TwEvent::Confirmed { took: now.saturating_since(a.first_sent) });
        }
        // An own Claim ends here: the token's epoch has usually dropped its
        // proposal already (`on_in_use` above), so the Claim itself says
        // whether one was running. Its hop is no longer worth resending.
        let proposal_dropped = self.promise.abandon(now).is_some();
        let claimed = self.claims.end_own(self.me);
        if claimed || proposal_dropped {
            self.out.event(TwEvent::ClaimEnded { outcome: ClaimOutcome::Lapsed });
        }
        self.tpc = tpc;
        self.unsure_from = None;
        self.seen = (epoch, m);
        self.passing.accepted(epoch, m);
        self.bypassed = bypassed.into_iter().filter(|b| *b != self.me && self.members.contains(b)).collect();
        self.token_here(now);
        self.token_seen_joins();
        self.send_ack(epoch, tpc, false);
        self.install(now, epoch, quiet);
        self.out.event(TwEvent::Accepted { epoch, tpc });
    }

    /// The token is here now, `quiet` hops since it last served a client.
    pub(super) fn install(&mut self, now: Instant, epoch: u64, quiet: u32) {
        if let Some(took) = self.passing.arrived(epoch, now) {
            self.out.event(TwEvent::Rotated { took });
        }
        self.visit = Some(Visit { epoch, since: now, grants: 0, quiet });
        self.locks.token_arrived(now);
        self.out.event(TwEvent::HasToken(true));
    }

    /// Sends `Ack(L−1, m)` (or forwards one) to the successor.
    fn send_ack(&mut self, epoch: u64, m: u64, forwarded: bool) {
        let ttl = u32::try_from(self.live_len().saturating_sub(1)).unwrap_or(u32::MAX);
        if ttl == 0 {
            return;
        }
        if let Some(to) = self.successor(&[]) {
            self.out.send(to, Msg::Ack { epoch, ttl, m });
            self.out.event(TwEvent::AckSent { forwarded });
        }
    }

    /// A `LeaseRenew` from the awaited successor whose (epoch, tpc) is
    /// above the (epoch, m) handed off proves the hand-off arrived, as an
    /// ACK would.
    pub(super) fn confirm_by_renewal(&mut self, now: Instant, from: NodeId, epoch: u64, tpc: u64) {
        if self.passing.confirmed_by_renewal(from, epoch, tpc) {
            self.confirmed(now);
        }
    }

    /// The hand-off awaited is confirmed.
    fn confirmed(&mut self, now: Instant) {
        if let Some(a) = self.passing.take_awaiting() {
            self.token_here(now);
            self.out.event(TwEvent::Confirmed { took: now.saturating_since(a.first_sent) });
        }
    }

    pub(super) fn on_ack(&mut self, now: Instant, epoch: u64, ttl: u32, m: u64) {
        // Forwarded whatever m is: with reordering a stale-looking ACK may be
        // the only confirmation its target gets.
        if ttl > 1 {
            if let Some(to) = self.successor(&[]) {
                self.out.send(to, Msg::Ack { epoch, ttl: ttl - 1, m });
                self.out.event(TwEvent::AckSent { forwarded: true });
            }
        }
        ftcore::mutant! {
            if self.cfg.rules.off(TwRule::AcksNeverChangeTpc) && epoch == self.epoch() {
                self.tpc = self.tpc.max(m);
            }
        }
        // (safety) An ACK never changes tpc; it only confirms.
        if self.passing.confirmed_by_ack(epoch, m) {
            self.confirmed(now);
        }
    }

    /// A process refused the token handed to it: drop the copy, stop
    /// waiting (so as not to bypass live processes) and claim above it.
    pub(super) fn on_stale(&mut self, now: Instant, from: NodeId, epoch: u64) {
        if !self.passing.refused_by(from) {
            return;
        }
        self.promise.raise_floor(epoch);
        self.out.event(TwEvent::Superseded);
        self.start_claim(now, Vec::new());
    }

    /// At the visit's end (`max_hold` after the token arrived) a hold still
    /// running is revoked: its lease, cut at that instant, ends now too.
    pub(super) fn end_visit_hold(&mut self, now: Instant) {
        if self.visit.as_ref().is_some_and(|v| now >= v.since + self.cfg.max_hold) && self.locks.is_held() {
            self.locks.lose(now, "held longer than max_hold_ms", &mut self.out);
        }
    }

    /// Serves the visit: grants with a fresh fence each under the lease,
    /// then passes the token on (after `token_min_hold` when idle; at
    /// `max_hold` whatever).
    pub(super) fn serve(&mut self, now: Instant) {
        let Some(v) = &self.visit else { return };
        let (since, epoch, grants) = (v.since, v.epoch, v.grants);
        if now >= since + self.cfg.max_hold {
            self.end_visit_hold(now);
            return self.pass_on(now);
        }
        if self.locks.is_held() {
            return;
        }
        if self.locks.has_waiters() && !self.leaving {
            // (safety) Grants only under a live lease. Without one the token
            // stays here for the waiters while the renewal that
            // `renew_lease` sends at once is acked, but never past the
            // visit's end: at `max_hold` it moves on as from any visit, so
            // a process that cannot get a lease (cut off from the
            // majority, its renewals refused) does not wedge the ring. A
            // grant needs the lease; passing never does, and every bound
            // that times a bypass or a lost token (`bypass_after`,
            // `token_lost_after`) already counts a whole visit of
            // `max_hold` at every process, so waiting for the lease within
            // the visit makes no live token look lost.
            let Some(lease_until) = self.grant_lease(now) else { return };
            // (safety) Each grant after the first raises tpc (stored first).
            let before = self.tpc;
            if grants > 0 {
                let Some(next) = self.next_count(self.tpc) else {
                    self.locks.lose(now, "tpc overflow", &mut self.out);
                    self.leases.end();
                    self.visit = None;
                    self.out.event(TwEvent::HasToken(false));
                    return self.start_claim(now, Vec::new());
                };
                self.tpc = next;
            }
            let fence = self.fence(epoch);
            if self.locks.grant_next(now, fence, lease_until, false, &mut self.out).is_some() {
                if let Some(v) = &mut self.visit {
                    v.grants += 1;
                }
                return;
            }
            self.tpc = before;
        }
        if grants > 0 || self.leaving || now >= since + self.idle_hold() {
            self.pass_on(now);
        }
    }

    /// How long the visit holds the token with nobody waiting here
    /// (`ftcore::idle`): `token_min_hold` once the token has gone a whole
    /// lap of the live ring without serving anyone and no peer said it
    /// wants it, else nothing.
    fn idle_hold(&self) -> Duration {
        self.passing.idle_hold(self.live_len(), self.visit.as_ref())
    }

    /// A client started waiting here: unless the token served here when
    /// it last left (it is then on a lap with no idle hold before it is
    /// back), every peer is told (`Wanted`).
    pub(super) fn want(&mut self) {
        if !self.passing.should_want(self.visit.is_some()) {
            return;
        }
        self.send_to_every_peer(Msg::Wanted);
    }

    /// Hands the token to the successor and waits for its confirmation.
    fn pass_on(&mut self, now: Instant) {
        let Some(v) = self.visit.take() else { return };
        let quiet = self.passing.leaves(&v, v.grants > 0 || self.locks.has_waiters());
        self.out.event(TwEvent::HasToken(false));
        for r in std::mem::take(&mut self.readmit) {
            self.bypassed.remove(&r);
        }
        match self.successor(&[]) {
            Some(to) => {
                let bypassed: Vec<NodeId> = self.bypassed.iter().copied().collect();
                self.out.send(to, Msg::Token { epoch: v.epoch, m: self.tpc, bypassed: bypassed.clone(), quiet });
                self.passing.handed_off(Awaiting {
                    to,
                    epoch: v.epoch,
                    m: self.tpc,
                    bypassed,
                    quiet,
                    first_sent: now,
                    last_sent: now,
                    retransmits: 0,
                });
                self.out.event(TwEvent::Passed { to });
            }
            // N = 1, or alone by choice: keep it (sending it to oneself
            // would be stale and lose it). (safety) Kept, it counts as
            // accepted again: tpc rises (stored first), or the next visit's
            // first grant would repeat the last fence (a one-node cluster
            // granted `fence X after X` once it could grant at all).
            None if self.members.len() == 1
                || self.cfg.allow_minority
                || self.cfg.rules.off(TwRule::NoMinorityHolder) =>
            {
                let Some(tpc) = self.next_count(self.tpc) else {
                    // tpc would overflow: grant nothing, claim (its token
                    // restarts at 1).
                    self.leases.end();
                    return self.start_claim(now, Vec::new());
                };
                self.tpc = tpc;
                self.install(now, v.epoch, quiet)
            }
            // (safety) No minority holder: drop the copy, claim.
            None => {
                self.leases.end();
                self.out.event(TwEvent::MinorityDropped);
                self.start_claim(now, Vec::new())
            }
        }
    }

    pub(super) fn pass_deadline(&self) -> Option<Instant> {
        let visit = self.visit.as_ref().map(|v| {
            let end = v.since + self.cfg.max_hold;
            if self.locks.is_held() || self.locks.has_waiters() {
                end
            } else {
                end.min(v.since + self.idle_hold())
            }
        });
        let awaiting = self.passing.awaiting_due(&self.cfg);
        visit.into_iter().chain(awaiting).min()
    }

    /// Retransmits an unconfirmed hand-off, or bypasses a silent successor.
    pub(super) fn pass_timeout(&mut self, now: Instant) {
        match self.passing.awaiting_timeout(now, &self.cfg) {
            Some(AwaitStep::Retransmit { to, msg }) => {
                self.out.send(to, msg);
                self.out.event(TwEvent::Retransmitted);
            }
            Some(AwaitStep::Bypass { peer, epoch }) => {
                // (safety) Bypass is a Claim: a higher epoch, promised by a
                // majority, that skips the silent successor.
                self.out.event(TwEvent::Bypassed { peer });
                ftcore::mutant! {
                    if self.cfg.rules.off(TwRule::BypassByAClaim) {
                        // The seed's bypass: the same token, one count higher,
                        // to the next process.
                        self.bypassed.insert(peer);
                        self.tpc = self.tpc.saturating_add(1);
                        return self.install(now, epoch, 0);
                    }
                }
                let _ = epoch;
                self.start_claim(now, vec![peer]);
            }
            None => {}
        }
    }
}
