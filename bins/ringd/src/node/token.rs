//! The token (ringd.md, Token): owned → passed (resent until TokenAck) →
//! frozen → released; stale tokens discarded; `Stale` answered and heeded;
//! a superseded owner keeps its token only as a copy; the idle hold and
//! `Wanted` (`ftcore::idle`).

use std::time::Duration;

use api::ring::ExecError;
use durable::promise::{Failure, Refusal};
use ftcore::idle::IdleHold;
use ftcore::rules::Rules;
use ftcore::{Incarnation, NodeId};
use timer::Instant;

use super::{Held, RdEvent, RdNode, RdRule, Role};
use crate::msg::{Msg, Token};

/// The token's passing state beside the token itself (`held`, `seen`,
/// which every mechanism reads): whom it came from, when it last
/// arrived, and the idle hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Passing {
    /// Who sent the token accepted last, and its id as received: a resend
    /// is acked again, and TokenRelease goes there once the forward is acked.
    came_from: Option<(NodeId, (u64, u64))>,
    /// When the token last arrived here in which epoch (rotation time).
    last_arrival: Option<(u64, Instant)>,
    /// The idle hold (`token_min_hold`, `quiet`, `Wanted`).
    idle: IdleHold,
}

impl Passing {
    pub(super) fn new(min_hold: Duration) -> Self {
        Passing { came_from: None, last_arrival: None, idle: IdleHold::new(min_hold) }
    }

    /// Whether token `id` from `from` is a resend of the one accepted last.
    fn resend_of(&self, from: NodeId, id: (u64, u64)) -> bool {
        self.came_from == Some((from, id))
    }

    /// Token `id` from `from` is accepted.
    fn accepted_from(&mut self, from: NodeId, id: (u64, u64)) {
        self.came_from = Some((from, id));
    }

    /// A token was made here: it came from nobody.
    pub(super) fn regenerated(&mut self) {
        self.came_from = None;
    }

    /// A token of `epoch` arrived at `now`: the rotation's time, if the
    /// last one here was of the same epoch.
    fn arrived(&mut self, epoch: u64, now: Instant) -> Option<Duration> {
        let took = self.last_arrival.filter(|(e, _)| *e == epoch).map(|(_, at)| now.saturating_since(at));
        self.last_arrival = Some((epoch, now));
        took
    }

    /// A peer wants the token (`Wanted`).
    pub(super) fn on_wanted(&mut self, now: Instant) {
        self.idle.on_wanted(now);
    }
}

impl RdNode {
    pub(super) fn on_token(&mut self, now: Instant, from: NodeId, t: Token) {
        if self.cfg.rules.on(RdRule::TokensForTheReceiversLifeOnly) && t.to_life != self.ring.incarnation() {
            // Passed to another life of this replica (held in the network
            // across its rejoin or restart): that life's suspicions are
            // forgotten, so the token is dropped as a closed connection
            // would have dropped it.
            self.out.event(RdEvent::Refused { from, reason: "other_life" });
            return;
        }
        match self.promise.check_token(t.epoch) {
            Ok(()) => {}
            Err(Refusal::Promised { .. }) if self.cfg.rules.off(RdRule::LowerEpochsRefused) => {}
            // An unrecovered replica neither acks nor forwards: the sender
            // resends, and the ring routes around it if it stays so.
            Err(Refusal::Unrecovered) => return,
            Err(Refusal::Promised { value }) | Err(Refusal::Stale { recovered_max: value }) => {
                self.out.send(from, Msg::Stale { epoch: value });
                self.out.event(RdEvent::StaleAnswered);
                return;
            }
            Err(_) => {
                self.out.event(RdEvent::Refused { from, reason: "epoch" });
                return;
            }
        }
        if self.passing.resend_of(from, t.id()) {
            // A resend of the token accepted last: its ack was lost.
            self.out.send(from, Msg::TokenAck { epoch: t.epoch, seq: t.seq });
            return;
        }
        if !self.newer(t.id(), self.seen) {
            self.out.event(RdEvent::StaleDiscarded);
            return;
        }
        if let Err(Refusal::Promised { value }) = self.promise.on_in_use(t.epoch, now) {
            if self.cfg.rules.on(RdRule::LowerEpochsRefused) {
                self.out.send(from, Msg::Stale { epoch: value });
                return;
            }
        }
        if self.owns_token() {
            // A newer token while owning one: stop owning ours.
            if let Some(fence) = self.running_token_fence() {
                self.out.event(RdEvent::SupersededWhileRunning { fence, by: t.id() });
            }
            if self.cfg.rules.on(RdRule::SupersededKillsItsJob) {
                self.kill_token_job();
            }
            self.out.event(RdEvent::Superseded);
        }
        self.abandon_census(now);
        // The ack follows the Persist of a raised epoch (after_input).
        self.out.send(from, Msg::TokenAck { epoch: t.epoch, seq: t.seq });
        self.passing.accepted_from(from, t.id());
        self.install(now, t);
    }

    /// Makes `t` the owned token here (accepted or regenerated).
    pub(super) fn install(&mut self, now: Instant, t: Token) {
        // Results waiting for the old token's ack: if the new token carries
        // them they wait on for ITS next ack (it may exist only here, e.g.
        // regenerated from this replica's own copy); if not, they are lost.
        for p in self.services.keep_awaiting(|p| t.result_of(p.request_id).is_some()) {
            self.answer(p.client, p.request_id, &p.service, Err(ExecError::TokenLost));
        }
        if let Some(took) = self.passing.arrived(t.epoch, now) {
            self.out.event(RdEvent::Rotated { took });
        }
        // `seen` only rises: a token accepted is newer than it, and a
        // regenerated one's epoch is above every epoch in use here.
        ftcore::invariant!(
            self.cfg.rules,
            t.id() > self.seen,
            "n{}: token {:?} installed at or below seen {:?}",
            self.me.0,
            t.id(),
            self.seen
        );
        self.seen = t.id();
        self.out.event(RdEvent::Accepted { id: t.id() });
        self.held = Some(Held { token: t, role: Role::Owned { since: now, ran: false } });
        self.lease.reset();
        self.token_activity(now);
        // A token exists: a census wanted earlier (after a `Stale`, an
        // overflow, a recovery's copy) would only end it.
        self.census.set_wanted(false);
    }

    /// Hands the owned token to the successor (seq + 1), or keeps it when
    /// alone.
    /// The successor to pass to, and its life: none while alone, or
    /// while the successor has not been heard from (its HeartbeatAck is a
    /// round trip away), since a token must name the life it is for.
    fn pass_target(&self) -> Option<(NodeId, Incarnation)> {
        let s = self.successor()?;
        Some((s, self.life_of(s))).filter(|(_, inc)| *inc != Incarnation(0))
    }

    pub(super) fn pass(&mut self, now: Instant) {
        let Some((s, inc)) = self.pass_target() else { return };
        // `serve`, the only caller, passes an owned token.
        let Some(h) = self.held.as_mut() else { return };
        let Role::Owned { since, ran } = h.role else { return };
        let Some(next) = next_seq(h.token.seq, self.cfg.rules) else {
            // ringd.md, Fence: seq would pass u64::MAX.
            self.stop_owning(now, true);
            return;
        };
        h.token.seq = next;
        h.token.from = self.me;
        h.token.to_life = inc;
        h.token.quiet = self.passing.idle.pass(since, h.token.quiet, ran || self.services.has_queued());
        let t = h.token.clone();
        h.role = Role::Unacked { to: s, inc, last_sent: now };
        self.lease.reset();
        // It had the token until now (however long the visit ran): the
        // token-lost deadline starts here, not at the arrival.
        self.token_activity(now);
        self.out.send(s, Msg::Token(Box::new(t)));
        self.out.event(RdEvent::Passed { to: s });
    }

    pub(super) fn on_token_ack(&mut self, _now: Instant, from: NodeId, id: (u64, u64)) {
        let Some(h) = self.held.as_mut() else { return };
        let Role::Unacked { to, inc, .. } = h.role else { return };
        if to != from || h.token.id() != id {
            return;
        }
        h.role = Role::Frozen { to, inc };
        for p in self.services.take_awaiting() {
            self.answer(p.client, p.request_id, &p.service, p.outcome);
        }
        if let Some((x, (epoch, seq))) = self.passing.came_from {
            if x != self.me {
                self.out.send(x, Msg::TokenRelease { epoch, seq });
            }
        }
    }

    pub(super) fn on_token_release(&mut self, id: (u64, u64)) {
        let Some(h) = self.held.as_ref() else { return };
        if !matches!(h.role, Role::Frozen { .. }) || h.token.id() != id {
            return;
        }
        ftcore::mutant! {
            if self.cfg.rules.off(RdRule::ReleasedCopyKept) {
                // The unsafe shortcut: the copy is gone once the successor's
                // forward was acked, and a census no longer finds it.
                self.held = None;
                return;
            }
        }
        // (safety) Kept for censuses: discarded only when a newer token is
        // accepted here (`install`).
        if let Some(h) = self.held.as_mut() {
            h.role = Role::Released;
        }
    }

    pub(super) fn on_stale(&mut self, now: Instant, epoch: u64) {
        self.promise.raise_floor(epoch);
        let Some(owned) = self.held.as_ref().and_then(|h| match h.role {
            _ if h.token.epoch > epoch => None,
            Role::Owned { .. } => Some(true),
            Role::Unacked { .. } => Some(false),
            _ => None,
        }) else {
            return;
        };
        self.out.event(RdEvent::StaleHeeded { owned });
        if self.cfg.rules.on(RdRule::StaleStopsOwning) {
            // The refuser promised (or saw) a higher epoch: a census is
            // under way elsewhere, or a newer token exists. Census too, but
            // only after a random delay, so that the other one can finish
            // (a census at once outbids it, and each new token then meets
            // the next promise: a storm of regenerations).
            self.stop_owning(now, false);
            self.census.set_wanted(true);
            let wait = self.promise.retry_after(&Failure::Refused(Refusal::Promised { value: epoch }), &mut self.rng);
            self.census.defer_until(now + wait);
        }
    }

    /// Stops owning (or sending) the token: kept only as a copy; results
    /// not yet acked are lost. `census`: start one at once (a `Stale`, an
    /// overflow).
    pub(super) fn stop_owning(&mut self, now: Instant, census: bool) {
        self.kill_token_job();
        if let Some(h) = self.held.as_mut() {
            match h.role {
                Role::Owned { .. } => {
                    h.role = Role::CopyOnly;
                    self.out.event(RdEvent::Superseded);
                }
                Role::Unacked { .. } => h.role = Role::CopyOnly,
                _ => {}
            }
        }
        for p in self.services.take_awaiting() {
            self.answer(p.client, p.request_id, &p.service, Err(ExecError::TokenLost));
        }
        self.lease.reset();
        if census {
            self.start_census(now, None);
        }
    }

    /// Resends an unacknowledged token to `peer` (a broken link, or its
    /// period), to the same life only.
    pub(super) fn resend_to(&mut self, now: Instant, peer: NodeId) -> bool {
        let alive = |n: NodeId, inc| self.ring.view().is_alive(n) && self.life_of(n) == inc;
        let Some(h) = self.held.as_ref() else { return false };
        let Role::Unacked { to, inc, .. } = h.role else { return false };
        if to != peer || !alive(to, inc) {
            return false;
        }
        let t = h.token.clone();
        if let Some(h) = self.held.as_mut() {
            h.role = Role::Unacked { to, inc, last_sent: now };
        }
        self.out.send(to, Msg::Token(Box::new(t)));
        true
    }

    pub(super) fn token_deadline(&self) -> Option<Instant> {
        let role = self.held.as_ref().map(|h| &h.role);
        // The next census try: at once when one is wanted, else when the
        // token counts as lost; never before the retry delay.
        let census = self.census.next_try(self.lost_at());
        match role {
            Some(Role::Owned { since, .. }) => {
                // Alone, waiting for a lease (lease_deadline), or the
                // successor not heard from yet: no pass due.
                let waiting =
                    self.services.token_job_runs() || (self.services.has_queued() && self.lease.worth_waiting_any());
                (self.pass_target().is_some() && !waiting).then(|| *since + self.idle_hold())
            }
            Some(Role::Unacked { last_sent, .. }) => {
                [Some(*last_sent + self.cfg.suspect_after), census].into_iter().flatten().min()
            }
            _ => census,
        }
    }

    pub(super) fn token_timeout(&mut self, now: Instant) {
        if let Some(Role::Unacked { to, inc, last_sent }) = self.held.as_ref().map(|h| h.role.clone()) {
            if now >= last_sent + self.cfg.suspect_after {
                // Resent to that life if it is still in the ring; the
                // period goes on either way (a recovery may ask for it).
                if !self.resend_to(now, to) {
                    if let Some(h) = self.held.as_mut() {
                        h.role = Role::Unacked { to, inc, last_sent: now };
                    }
                }
            }
        }
        if !self.owns_token() && self.census.due(now, self.lost_at()) {
            self.start_census(now, None);
        }
    }

    /// The visit: run what the lease allows, then pass the token on when
    /// nothing is left to run (after `token_min_hold` if idle).
    pub(super) fn serve(&mut self, now: Instant) {
        let Some(Role::Owned { since, ran }) = self.held.as_ref().map(|h| h.role.clone()) else { return };
        if self.successor().is_none() {
            // Alone, owning: no second copy can exist; what waited for one
            // is answered now.
            for p in self.services.take_awaiting() {
                self.answer(p.client, p.request_id, &p.service, p.outcome);
            }
        }
        self.run_queued(now);
        if !self.owns_token() || self.services.token_job_runs() {
            // A token service runs: the token stays until it ends.
            return;
        }
        if self.services.has_queued() && self.lease.worth_waiting(now, self.cfg.lease) {
            return;
        }
        let ran_now = matches!(self.held.as_ref().map(|h| &h.role), Some(Role::Owned { ran: true, .. }));
        if ran || ran_now || now >= since + self.idle_hold() || self.leaving {
            self.pass(now);
        }
    }

    /// How long an owner with nothing queued holds the token
    /// (`ftcore::idle`): `token_min_hold` once the token has gone N passes
    /// without running a token service and no peer said it wants it, else
    /// nothing.
    fn idle_hold(&self) -> Duration {
        match &self.held {
            Some(Held { token, role: Role::Owned { since, .. } }) => {
                self.passing.idle.hold(self.members.len(), *since, token.quiet)
            }
            _ => Duration::ZERO,
        }
    }

    /// A token service was queued here: unless the token ran one here
    /// when it last left (it is then on a lap with no idle hold before it
    /// is back), every peer is told (`Wanted`).
    pub(super) fn want(&mut self) {
        if !self.passing.idle.should_want(self.owns_token()) {
            return;
        }
        self.send_to_every_peer(Msg::Wanted);
    }
}

/// The seq after `seq` (ringd.md, Fence): none past `u64::MAX`, where the
/// owner runs nothing more and censuses.
pub(super) fn next_seq(seq: u64, _rules: Rules<RdRule>) -> Option<u64> {
    ftcore::mutant! {
        if _rules.off(RdRule::SeqNeverWraps) {
            // The mutation: seq wraps to 0 within the epoch.
            return Some(seq.wrapping_add(1));
        }
    }
    seq.checked_add(1)
}
