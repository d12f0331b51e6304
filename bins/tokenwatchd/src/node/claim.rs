//! Regeneration by a Claim promised by a majority (tokenwatchd.md,
//! Crashes, restarts, regeneration; foundation.md, Durable state): after
//! `token_lost_after` without a token, or on a bypass, a process proposes
//! an epoch above its floor and sends a Claim once around the live ring.
//! Each hop is acked and resent every `ring_timeout / N`; a successor
//! silent for `bypass_after` is skipped (and bypassed by the new token).
//! A process refuses (adopting nothing, answering the claimant) while it
//! holds or awaits the token, has accepted a newer token than the
//! claimant, promised another Claim within its window, acked another
//! process's lease renewal within `lease_ms·(1+ρ)` (`lease.rs`), or has a
//! threshold at or above the epoch; otherwise it stores the promise, joins
//! the adopters and forwards (in its restart window, which promises
//! nothing, it forwards without adopting). Back at the claimant, only a majority of
//! adopters, in time, with no refusal, makes the token.

use durable::promise::{Failure, Refusal, Step, UseError};
use ftcore::NodeId;
use std::time::Duration;
use timer::Instant;

use super::{ClaimOutcome, Hop, Phase, TwEvent, TwNode, TwRule};
use crate::msg::{Claim, Msg};

impl TwNode {
    /// Proposes an epoch and sends the Claim (skipping `skip`), unless a
    /// Claim is already in flight or the promise component says wait.
    pub(super) fn start_claim(&mut self, now: Instant, skip: Vec<NodeId>) {
        if self.claim.is_some() {
            return;
        }
        // Every refusal condition applies to the claimant too: a lease
        // renewal of another process it acked. It tries again just after.
        if let Some(remaining) = self.lease_busy_for(now, self.me) {
            self.claim_not_before = now + remaining;
            self.deferred_claim = Some(skip);
            return;
        }
        self.deferred_claim = None;
        #[allow(unused_mut)]
        let mut proposed = None;
        ftcore::mutant! {
            if self.cfg.rules.off(TwRule::EpochSlot) {
                let above = self.promise.stored().floor().max(self.promise.threshold());
                let value = durable::promise::next_above(above, 0).unwrap_or(u64::MAX);
                proposed = Some(self.promise.propose_value(value, now));
            }
        }
        let proposed = proposed.unwrap_or_else(|| self.promise.propose(now));
        match proposed {
            Ok(epoch) => {
                self.claim = Some((epoch, now));
                self.claim_skip.clone_from(&skip);
                self.out.event(TwEvent::ClaimStarted { epoch });
                let claim = Claim {
                    epoch,
                    claimant: self.me,
                    seen: self.seen,
                    max_tpc: self.tpc,
                    adopters: vec![self.me],
                    skipped: skip,
                };
                self.send_hop(now, claim);
            }
            Err(Refusal::Restarting { remaining } | Refusal::Busy { remaining }) => {
                self.claim_not_before = now + remaining;
            }
            Err(Refusal::Unrecovered) => self.claim_not_before = now + self.cfg.ring_timeout,
            Err(r) => self.claim_not_before = now + self.promise.retry_after(&Failure::Refused(r), &mut self.rng),
        }
    }

    /// Sends one hop of `claim` to the next process in the live view that
    /// the Claim does not skip; with nobody left, the Claim is back.
    fn send_hop(&mut self, now: Instant, mut claim: Claim) {
        // Peers already found silent here are skipped at once, so that a
        // crashed process costs one `bypass_after`, not one per Claim.
        let w = self.cfg.token_lost_after;
        self.silent.retain(|_, since| now < *since + w);
        while let Some(to) = self.successor(&claim.skipped).filter(|to| self.silent.contains_key(to)) {
            claim.skipped.push(to);
        }
        match self.successor(&claim.skipped) {
            Some(to) => {
                self.out.send(to, Msg::Claim(claim.clone()));
                self.hops.insert((claim.epoch, claim.claimant), Hop { claim, to, first_sent: now, last_sent: now });
            }
            None if claim.claimant == self.me => self.claim_back(now, claim),
            None => {}
        }
    }

    pub(super) fn on_claim(&mut self, now: Instant, from: NodeId, claim: Claim) {
        self.out.send(from, Msg::ClaimAck { epoch: claim.epoch, claimant: claim.claimant });
        if claim.claimant == self.me {
            return self.claim_back(now, claim);
        }
        if !self.members.contains(&claim.claimant) {
            self.out.event(TwEvent::Refused { from, reason: "claimant" });
            return;
        }
        // A repeat of the Claim adopted here (a lost ClaimAck): acked above.
        if self.adopted == Some((claim.epoch, claim.claimant)) {
            return;
        }
        let rules = self.cfg.rules;
        // (safety) Busy while the token is here, on its way from here, or
        // seen here newer than the claimant's: a live token is not killed.
        let refusal = if self.visit.is_some() && rules.on(TwRule::ClaimBusyWhileHolding) {
            Some(Refusal::Busy { remaining: self.cfg.max_hold })
        } else if self.awaiting.is_some() && rules.on(TwRule::ClaimBusyWhileAwaiting) {
            Some(Refusal::Busy { remaining: self.cfg.bypass_after })
        } else if self.seen > claim.seen
            && now < self.token_at + self.cfg.token_lost_after
            && rules.on(TwRule::ClaimBusyForANewerToken)
        {
            // A bypassed claimant must not kill the live token (one seen
            // here within W: a live token visits every process of its view
            // within a lap); the refusal counts as its Join. A token not
            // seen for W is lost here too, and refusing would only stop
            // every Claim but the one of whoever saw it last. W from the
            // token itself: Claims (refused or adopted) do not extend it.
            self.readmit.insert(claim.claimant);
            Some(Refusal::Busy { remaining: (self.token_at + self.cfg.token_lost_after).saturating_since(now) })
        } else {
            // (safety) A lease renewal of another process acked here binds
            // this process for lease_ms·(1+ρ): no new token while it lives.
            self.lease_busy_for(now, claim.claimant).map(|remaining| Refusal::Busy { remaining })
        };
        let promised = match refusal {
            Some(r) => Err(r),
            // (safety) Stored before the ack and the forward (after_input
            // puts the Persist first); ties refused; promise window.
            None => self.promise.on_proposal(claim.claimant, claim.epoch, now),
        };
        match promised {
            Err(Refusal::Restarting { .. }) => {
                // In its restart window a process promises nothing, but a
                // refusal would abandon a Claim that the others may well
                // carry to a majority, and send its claimant into the long
                // backoff: it passes the Claim on like a silent process
                // skipped, adopting nothing (it is no adopter).
                self.adopted = Some((claim.epoch, claim.claimant));
                // Its token may follow within W, as for an adopted Claim.
                self.token_activity(now);
                let mut c = claim;
                c.max_tpc = c.max_tpc.max(self.tpc);
                self.send_hop(now, c);
            }
            Err(refusal) => {
                if matches!(refusal, Refusal::Busy { .. } | Refusal::Promised { .. }) {
                    // Another Claim is under way: its token may follow.
                    self.token_activity(now);
                }
                self.out.send(claim.claimant, Msg::ClaimRefused { epoch: claim.epoch, refusal })
            }
            Ok(p) => {
                if p.abandoned_own.is_some() {
                    self.claim = None;
                    self.out.event(TwEvent::ClaimEnded { outcome: ClaimOutcome::Refused });
                }
                self.adopted = Some((claim.epoch, claim.claimant));
                // Its token follows within W if it wins: no own Claim
                // before then (a ring of claimants only refuses itself).
                self.token_activity(now);
                let mut c = claim;
                c.adopters.push(self.me);
                c.max_tpc = c.max_tpc.max(self.tpc);
                self.send_hop(now, c);
            }
        }
    }

    /// The own Claim is back: a token if a majority adopted it in time and
    /// nobody refused.
    fn claim_back(&mut self, now: Instant, claim: Claim) {
        let Some((epoch, _)) = self.claim else { return };
        if claim.epoch != epoch {
            return;
        }
        self.hops.remove(&(epoch, self.me));
        ftcore::mutant! {
            if self.cfg.rules.off(TwRule::ClaimDeadline) && !self.promise.proposal_live(epoch, now) {
                return self.claim_back_late(now, epoch, claim);
            }
        }
        for a in claim.adopters.iter().filter(|a| **a != self.me) {
            if let Step::Abandoned(f) = self.promise.on_answer(*a, epoch, Ok(()), now) {
                return self.claim_failed(now, f);
            }
        }
        match self.promise.use_proposal(now) {
            Ok(epoch) => self.claim_won(now, epoch, &claim),
            Err(UseError::NoMajority) => {
                ftcore::mutant! {
                    if self.cfg.rules.off(TwRule::ClaimsNeedAMajority) {
                        self.promise.abandon(now);
                        let _ = self.promise.on_in_use(epoch, now);
                        self.claim = None;
                        self.tpc = claim.max_tpc.checked_add(1).unwrap_or(1);
                        self.seen = (epoch, self.tpc);
                        self.bypassed = claim.skipped.iter().copied().filter(|s| *s != self.me).collect();
                        self.token_here(now);
                        return self.install(now, epoch, 0);
                    }
                }
                self.promise.abandon(now);
                self.claim_failed(now, Failure::Deadline);
            }
            Err(UseError::Abandoned(f)) => self.claim_failed(now, f),
            Err(UseError::NoProposal) => self.claim = None,
        }
    }

    /// The own Claim of `epoch` won: its token, `Token(epoch, max_tpc + 1)`
    /// with `bypassed = skipped`, is here.
    fn claim_won(&mut self, now: Instant, epoch: u64, claim: &Claim) {
        self.claim = None;
        let took = now.saturating_since(self.token_at);
        // The new token restarts at 1 when max_tpc + 1 would overflow.
        self.tpc = claim.max_tpc.max(self.cfg.first_tpc.get()).checked_add(1).unwrap_or(1);
        self.unsure_from = None;
        self.seen = (epoch, self.tpc);
        self.last_handoff = None;
        self.bypassed = claim.skipped.iter().copied().filter(|s| *s != self.me).collect();
        self.token_here(now);
        if matches!(self.phase, Phase::Joining { .. }) {
            self.joined();
        }
        self.out.event(TwEvent::ClaimEnded { outcome: ClaimOutcome::Won });
        self.out.event(TwEvent::Regenerated { epoch, tpc: self.tpc, took });
        self.install(now, epoch, 0);
    }

    fn claim_failed(&mut self, now: Instant, f: Failure) {
        self.claim = None;
        let outcome = match f {
            Failure::Busy { .. } => ClaimOutcome::Busy,
            Failure::Refused(_) | Failure::Vetoed => ClaimOutcome::Refused,
            Failure::Deadline => ClaimOutcome::Lapsed,
        };
        self.out.event(TwEvent::ClaimEnded { outcome });
        // foundation.md, Retries: refused only by windows, just after the
        // longest with a small jitter; otherwise between W·(1+ρ)/(1−ρ) and
        // twice that. No more: a window left by a failed Claim ends within
        // W, and a retry put off further leaves the ring to the adopters,
        // whose own Claims (W after adopting) collide with each other.
        self.claim_not_before = now + self.promise.retry_after(&f, &mut self.rng);
        if self.cfg.rules.on(TwRule::FailedClaimsRetriedAfterTheirWindow) {
            self.deferred_claim = Some(std::mem::take(&mut self.claim_skip));
        }
    }

    pub(super) fn on_claim_ack(&mut self, from: NodeId, epoch: u64, claimant: NodeId) {
        if self.hops.get(&(epoch, claimant)).is_some_and(|h| h.to == from) {
            self.hops.remove(&(epoch, claimant));
        }
    }

    pub(super) fn on_claim_refused(&mut self, now: Instant, from: NodeId, epoch: u64, refusal: Refusal) {
        if self.claim.map(|c| c.0) != Some(epoch) {
            return;
        }
        if let Step::Abandoned(f) = self.promise.on_answer(from, epoch, Err(refusal), now) {
            self.claim_failed(now, f);
        }
    }

    fn hop_resend(&self) -> Duration {
        let n = u32::try_from(self.members.len()).unwrap_or(u32::MAX).max(1);
        (self.cfg.ring_timeout / n).max(Duration::from_millis(1))
    }

    /// When `h` is resent (or its successor skipped).
    fn hop_due(&self, h: &Hop) -> Instant {
        (h.last_sent + self.hop_resend()).min(h.first_sent + self.cfg.bypass_after)
    }

    /// When a lost token starts an own Claim (or one put off by a lease
    /// window starts again): only while this process neither holds,
    /// awaits nor claims, has joined and is not leaving.
    fn lost_claim_at(&self) -> Option<Instant> {
        let idle = self.visit.is_none() && self.awaiting.is_none() && self.claim.is_none();
        let at = if self.deferred_claim.is_some() {
            self.claim_not_before
        } else {
            self.lost_at().max(self.claim_not_before)
        };
        (idle && self.phase == Phase::Joined && !self.leaving).then_some(at)
    }

    pub(super) fn claim_deadline(&self) -> Option<Instant> {
        // (safety) A Claim not back by W·(1−ρ) is abandoned: by then its
        // adopters' promise windows (W·(1+ρ)) may have ended.
        let own =
            self.promise.proposal().map(|(_, deadline)| deadline).filter(|_| self.cfg.rules.on(TwRule::ClaimDeadline));
        let hops = self.hops.values().map(|h| self.hop_due(h)).min();
        [own, hops, self.lost_claim_at()].into_iter().flatten().min()
    }

    pub(super) fn claim_timeout(&mut self, now: Instant) {
        if self.claim.is_some() && self.cfg.rules.on(TwRule::ClaimDeadline) {
            if self.promise.on_deadline(now).is_some() {
                self.claim_failed(now, Failure::Deadline);
            } else if self.promise.proposal().is_none() {
                self.claim = None;
            }
        }
        let due: Vec<(u64, NodeId)> =
            self.hops.iter().filter(|(_, h)| now >= self.hop_due(h)).map(|(k, _)| *k).collect();
        for key in due {
            let Some(mut hop) = self.hops.remove(&key) else { continue };
            if now >= hop.first_sent + self.cfg.bypass_after {
                // A successor silent this long is skipped.
                self.silent.insert(hop.to, now);
                hop.claim.skipped.push(hop.to);
                self.send_hop(now, hop.claim);
            } else {
                hop.last_sent = now;
                self.out.send(hop.to, Msg::Claim(hop.claim.clone()));
                self.hops.insert(key, hop);
            }
        }
        if self.lost_claim_at().is_some_and(|at| now >= at) {
            let skip = self.deferred_claim.take().unwrap_or_default();
            self.start_claim(now, skip);
        }
    }
}

ftcore::mutant! {
    impl TwNode {
        /// The `claim_past_deadline` mutation only: the own Claim is back after
        /// its deadline (the promise component has dropped it, or would). With
        /// a majority of adopters and no higher epoch adopted or in use here
        /// since, it makes its token anyway.
        fn claim_back_late(&mut self, now: Instant, epoch: u64, claim: Claim) {
            self.promise.abandon(now);
            let adopters: std::collections::BTreeSet<NodeId> = claim.adopters.iter().copied().collect();
            let majority = adopters.len() > self.members.len() / 2;
            if majority && self.promise.threshold() <= epoch && self.promise.on_in_use(epoch, now).is_ok() {
                self.claim_won(now, epoch, &claim);
            } else {
                self.claim_failed(now, Failure::Deadline);
            }
        }
    }
}
