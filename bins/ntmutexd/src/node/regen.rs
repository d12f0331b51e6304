//! Regeneration of a lost token, and epochs (ntmutexd.md, "Regeneration
//! never creates a second token"; foundation.md, Durable state).
//!
//! The epoch of a new token is promised by a majority before it is used:
//! the shared promise component ([`durable::promise`](::durable::promise)) keeps the threshold
//! and the floor on disk, refuses lower and equal proposals, refuses other
//! proposers for the promise window after a promise, and abandons a
//! proposal not complete within `lease·(1−ρ)`. This file adds ntmutexd's
//! own rules: a site holding a token refuses every regeneration
//! (`Nack::Holder`, and the proposer asks it for the token), and the
//! proposer also needs the ack of every site it does not suspect.

use ::durable::promise::{self, Failure, InUse, Refusal, Step, UseError};
use ftcore::NodeId;
use timer::Instant;

use super::events::{Mech, NtEvent};
use super::rules::NtRule;
use super::state::{Last, Recovery, Timer, Token};
use super::NtNode;
use crate::msg::{Body, Nack};

/// When this life may propose: not before its restart window (and a random
/// delay after it) is over.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Proposer {
    /// No proposal of this life before then (the handler tests set it).
    pub(super) proposals_from: Instant,
}

impl Proposer {
    /// When a proposal may be made, if not `now`.
    fn not_before(&self, now: Instant) -> Option<Instant> {
        (now < self.proposals_from).then_some(self.proposals_from)
    }
}

impl NtNode {
    /// Phase one: propose the next epoch above everything this site has
    /// stored or heard, to every site (suspected ones included).
    pub(super) fn start_regeneration(&mut self, now: Instant, mech: Mech, started: Instant) {
        if let Some(from) = self.regen.not_before(now) {
            // The restart window (and a random delay after it): no
            // proposal of this life yet.
            self.retry_regeneration_at(from);
            return;
        }
        // ntmutexd.md: a round above every round this site has stored or
        // seen, in its own slot (two proposers never propose equal epochs).
        // The floor covers every promise, proposal and epoch in use.
        let above = self.promise.stored().floor();
        let slot = self.promise.slot();
        ftcore::mutant! {
            // Every proposer in slot 0: equal epochs possible.
            let slot = if self.cfg.rules.off(NtRule::EpochSlot) { 0 } else { slot };
        }
        let next = promise::round_of(above).checked_add(1).and_then(|r| promise::encode(r, slot));
        // Every refusal condition applies to the proposer too: a lease it
        // acked for another site.
        if let Some(remaining) = self.lease_busy_for(now, self.me) {
            self.retry_regeneration_at(now + remaining);
            return;
        }
        let proposed = match next {
            Some(v) => self.promise.propose_value(v, now),
            None => Err(Refusal::Invalid),
        };
        let epoch = match proposed {
            Ok(epoch) => epoch,
            Err(refusal) => {
                let delay = self.promise.retry_after(&Failure::Refused(refusal), &mut self.rng);
                let delay = match refusal {
                    Refusal::Busy { remaining } | Refusal::Restarting { remaining } => remaining.max(delay / 4),
                    _ => delay,
                };
                self.retry_regeneration_at(now + delay);
                return;
            }
        };
        // The floor and the proposal are on disk before anyone hears of it.
        self.persist();
        self.broadcast(Body::Regenerate { epoch });
        let waiting = self.live_others();
        self.recovery = Recovery::Regen { mech, started, proposal: epoch, waiting };
        self.timers.set(Timer::Window, now + self.cfg.window());
        self.maybe_finish_regeneration(now);
    }

    /// Gives up the regeneration for now; the search starts again at `at`.
    fn retry_regeneration_at(&mut self, at: Instant) {
        self.recovery = Recovery::Idle;
        self.timers.cancel(Timer::Window);
        self.timers.set(Timer::CommitWait, at);
    }

    /// (+) A token is regenerated only with the promises of a majority of
    /// the configured sites (this one included) *and* the acks of every
    /// live site, all within the promise deadline: majorities intersect, so
    /// epochs are used in increasing order, and a site cut off from the
    /// majority (a falsely suspected minority) never creates a second token.
    pub(super) fn maybe_finish_regeneration(&mut self, now: Instant) {
        let Recovery::Regen { waiting, .. } = &self.recovery else { return };
        let waits = !waiting.is_empty();
        ftcore::mutant! {
            // The mutation: a majority's acks are enough.
            let waits = waits
                && !(self.cfg.rules.off(NtRule::RegenAcksFromEveryLiveSite)
                    && self.promise.promisers().is_some_and(|p| p.len() >= self.promise.config().majority()));
        }
        if waits {
            return;
        }
        match self.promise.use_proposal(self.ack_clock(now)) {
            Ok(epoch) => {
                // Stored as in use before the token grants anything.
                self.persist_epoch();
                self.out.event(NtEvent::Epoch(epoch));
                // The regenerator heads the queue. Its `last` must still
                // lead to the tail: itself if nobody is queued behind it,
                // else the most recent requester it knows (kept) or its next.
                match (self.next, self.last) {
                    (None, _) => self.last = Last::Root,
                    (Some((n, _)), Last::Root | Last::Unknown) => self.last = Last::Parent(n),
                    (Some(_), Last::Parent(_)) => {}
                }
                self.out.event(NtEvent::Regenerated { epoch });
                self.install_token(now, Token { epoch, counter: 0 }, 0);
            }
            Err(UseError::NoMajority) => {
                // Every live site answered, and no majority: give up.
                self.promise.abandon(now);
                let delay = self.promise.retry_after(&Failure::Deadline, &mut self.rng);
                self.retry_regeneration_at(now + delay);
            }
            Err(UseError::Abandoned(f)) => {
                let delay = self.promise.retry_after(&f, &mut self.rng);
                self.retry_regeneration_at(now + delay);
            }
            Err(UseError::NoProposal) => self.retry_regeneration_at(now + self.commit_timeout()),
        }
    }

    /// The time at which answers to our live proposal are counted: now.
    /// (safety) Acks count only within `lease_ms·(1−ρ)` of sending
    /// `Regenerate` (the promise component abandons the proposal after
    /// that): a promiser's window, `lease_ms·(1+ρ)` from its ack, still
    /// binds it when the token is used, so no higher epoch has completed
    /// meanwhile. With `NtRule::RegenAcksWithinDeadline` off (the
    /// `late_regen_acks` mutation) every answer is read as if it came just
    /// before the deadline.
    fn ack_clock(&self, now: Instant) -> Instant {
        ftcore::mutant! {
            if let Some((_, deadline)) = self.promise.proposal() {
                if self.cfg.rules.off(NtRule::RegenAcksWithinDeadline) && now >= deadline {
                    return Instant::from_micros(deadline.as_micros().saturating_sub(1));
                }
            }
        }
        now
    }

    /// A proposal from `from`. A holder refuses it; otherwise the promise
    /// component decides, and a promise is stored before the ack leaves.
    pub(super) fn on_regenerate(&mut self, now: Instant, from: NodeId, epoch: u64) {
        if self.token.is_some() && self.cfg.rules.on(NtRule::HolderNacksRegeneration) {
            // (safety) A token exists: abort that regeneration.
            self.send(from, Body::RegenerateNack { epoch, why: Nack::Holder });
            return;
        }
        if let Some(remaining) = self.lease_busy_for(now, from) {
            // (safety) An acked lease renewal of another site binds us.
            self.send(from, Body::RegenerateNack { epoch, why: Nack::Refused(Refusal::Busy { remaining }) });
            return;
        }
        match self.promise.on_proposal(from, epoch, now) {
            Ok(p) => {
                if self.cfg.rules.on(NtRule::PromiseStoredBeforeAck) {
                    self.persist();
                }
                if p.abandoned_own.is_some() {
                    // A higher concurrent proposal wins; wait for its token.
                    self.retry_regeneration_at(now + self.commit_timeout());
                }
                ftcore::invariant!(
                    self.cfg.rules,
                    !self.promise.is_dirty(),
                    "{}: promise of {epoch:#x} acked unstored",
                    self.me
                );
                self.send(from, Body::RegenerateAck { epoch });
            }
            Err(refusal) => {
                self.send(from, Body::RegenerateNack { epoch, why: Nack::Refused(refusal) });
            }
        }
    }

    /// An answer to our proposal `epoch`.
    pub(super) fn on_regenerate_reply(&mut self, now: Instant, from: NodeId, epoch: u64, answer: Result<(), Nack>) {
        let Recovery::Regen { mech, started, proposal, waiting } = &mut self.recovery else { return };
        if *proposal != epoch {
            return;
        }
        let (mech, started) = (*mech, *started);
        waiting.remove(&from);
        let step = match answer {
            Ok(()) => self.promise.on_answer(from, epoch, Ok(()), self.ack_clock(now)),
            Err(Nack::Refused(r)) => self.promise.on_answer(from, epoch, Err(r), self.ack_clock(now)),
            Err(Nack::Holder) => {
                // Any Nack aborts; a token holder gets a direct request.
                self.promise.abandon(now);
                self.persist();
                self.timers.cancel(Timer::Window);
                let seq = self.request.unwrap_or(self.seq);
                self.send(from, Body::DirectRequest { requester: self.me, seq, hops: 0 });
                self.start_linking(now, mech, started, from);
                return;
            }
        };
        // A refusal may have raised the floor (to jump past it next time).
        self.persist();
        match step {
            Step::Ignored | Step::Pending | Step::Majority => self.maybe_finish_regeneration(now),
            Step::Abandoned(f) => {
                let delay = self.promise.retry_after(&f, &mut self.rng);
                self.retry_regeneration_at(now + delay);
            }
        }
    }

    /// Every message carries the sender's epoch in use: a token older than
    /// the newest epoch in use is dead, here too.
    pub(super) fn observe_epoch(&mut self, now: Instant, epoch: u64) {
        if epoch <= self.max_epoch() {
            return;
        }
        let InUse { raised, abandoned_own } = match self.promise.on_in_use(epoch, now) {
            Ok(r) => r,
            // Below what this site promised: not adopted (a promise is
            // never used as an epoch in use).
            Err(_) => return,
        };
        self.persist_epoch();
        if abandoned_own.is_some() {
            self.retry_regeneration_at(now + self.commit_timeout());
        }
        if raised {
            self.out.event(NtEvent::Epoch(epoch));
        }
        if let Some(t) = self.token {
            if t.epoch < epoch {
                // False suspicion: the cluster regenerated without us.
                self.drop_token(now, "the token was regenerated elsewhere (this node was suspected)");
            }
        }
    }

    /// The token held here is dead (superseded, or its counter is spent):
    /// the local holder is told `LockLost`; the queue state goes with it.
    pub(super) fn drop_token(&mut self, now: Instant, why: &str) {
        let Some(t) = self.token.take() else { return };
        self.lease.end();
        self.position = None;
        self.preds.clear();
        self.next = None;
        self.out.event(NtEvent::TokenSuperseded { epoch: t.epoch });
        self.out.event(NtEvent::HasToken(false));
        if self.cfg.rules.on(NtRule::HolderToldLockLost) {
            self.lose_lock(now, why);
        }
    }
}
