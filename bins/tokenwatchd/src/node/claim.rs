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

use std::collections::BTreeMap;
use std::time::Duration;

use durable::promise::{Failure, Refusal, Step, UseError};
use ftcore::NodeId;
use timer::Instant;

use super::state::Hop;
use super::{ClaimOutcome, TwEvent, TwNode, TwRule};
use crate::msg::{Claim, Msg};

/// What the Claim mechanism keeps: the own Claim, the hops resent until
/// acked, the peers found silent, the last Claim adopted, and the
/// token-lost deadline that starts an own Claim.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Claims {
    /// The own Claim in flight: epoch and when it was sent.
    own: Option<(u64, Instant)>,
    /// The skip list the own Claim in flight started with: a failed one
    /// is tried again with it (`deferred`).
    skip: Vec<NodeId>,
    /// A Claim put off because this process acked another's lease renewal,
    /// or one that failed (its skip list): it starts at `not_before`, not
    /// a whole token-lost deadline later — a Claim started on a `Stale` or
    /// a bypass has no lost token to wait for.
    deferred: Option<Vec<NodeId>>,
    /// No own Claim before this (restart window, backoff after a failure).
    not_before: Instant,
    /// Claim hops awaiting their ack, by (epoch, claimant).
    hops: BTreeMap<(u64, NodeId), Hop>,
    /// Peers that left a Claim hop unacked for `bypass_after` (and when),
    /// skipped by later Claims sent from here until they are heard from
    /// or W has passed (then they are tried again: a restarted peer may
    /// never send to this process by itself).
    silent: BTreeMap<NodeId, Instant>,
    /// The last Claim adopted here, or passed on in the restart window
    /// (epoch, claimant): a repeat is acked again, not forwarded twice.
    adopted: Option<(u64, NodeId)>,
    /// When a token was last accepted or confirmed here, or a Claim
    /// adopted, passed on or refused (or this life started):
    /// `token_lost_after` (plus `lost_jitter`) later, a Claim starts.
    token_seen_at: Instant,
    /// When the token itself was last here (accepted, confirmed or made;
    /// or this life started). Only this bounds the refusal of a claimant
    /// that saw an older token: Claim traffic is no sign of a live token.
    token_at: Instant,
    /// A random part of the token-lost deadline, drawn anew whenever the
    /// token shows itself, so that processes that lost it together do not
    /// all claim at once (they would only refuse each other).
    lost_jitter: Duration,
    /// NC4: the first own Claim of a new cluster is put off to its rank's
    /// turn; adopting another's Claim first cancels it.
    first_pending: bool,
}

/// What a Claim hop due now needs.
enum HopStep {
    /// Its successor stayed silent for `bypass_after`: the Claim goes on
    /// without it.
    Skip(Claim),
    /// Sent again to the same successor.
    Resend(NodeId, Claim),
}

impl Claims {
    /// No Claim yet; the first own Claim not before `not_before`, the
    /// token-lost deadline counted from `now`.
    pub(super) fn new(now: Instant, not_before: Instant) -> Self {
        Claims {
            own: None,
            skip: Vec::new(),
            deferred: None,
            not_before,
            hops: BTreeMap::new(),
            silent: BTreeMap::new(),
            adopted: None,
            token_seen_at: now,
            token_at: now,
            lost_jitter: Duration::ZERO,
            first_pending: false,
        }
    }

    /// Whether an own Claim is in flight.
    pub(super) fn is_claiming(&self) -> bool {
        self.own.is_some()
    }

    /// The own Claim in flight (handler tests).
    #[cfg(test)]
    pub(super) fn own(&self) -> Option<(u64, Instant)> {
        self.own
    }

    /// The hops awaiting their ack (handler tests).
    #[cfg(test)]
    pub(super) fn hops(&self) -> &BTreeMap<(u64, NodeId), Hop> {
        &self.hops
    }

    /// `peer` was heard from: no longer skipped as silent.
    pub(super) fn heard_from(&mut self, peer: NodeId) {
        self.silent.remove(&peer);
    }

    /// The token showed itself: the token-lost deadline starts over, with
    /// a fresh `jitter`.
    pub(super) fn token_activity(&mut self, now: Instant, jitter: Duration) {
        self.token_seen_at = now;
        self.lost_jitter = jitter;
    }

    /// The token itself was here: a Claim put off by a lease window is
    /// not needed now.
    pub(super) fn token_here(&mut self, now: Instant) {
        self.token_at = now;
        self.deferred = None;
    }

    /// A newer token arrived: the own Claim, if any, ends and its hop is
    /// no longer resent. Returns whether one was in flight.
    pub(super) fn end_own(&mut self, me: NodeId) -> bool {
        let own = self.own.take();
        if let Some((epoch, _)) = own {
            self.hops.remove(&(epoch, me));
        }
        own.is_some()
    }

    fn own_epoch(&self) -> Option<u64> {
        self.own.map(|(epoch, _)| epoch)
    }

    /// The own Claim ended (or never got going).
    fn drop_own(&mut self) {
        self.own = None;
    }

    /// The own Claim won: returns how long the token was away.
    fn won(&mut self, now: Instant) -> Duration {
        self.own = None;
        now.saturating_since(self.token_at)
    }

    /// The own Claim failed: the next one not before `retry_at`, with the
    /// failed one's skip list when `retry_skip`.
    fn failed(&mut self, retry_at: Instant, retry_skip: bool) {
        self.own = None;
        self.not_before = retry_at;
        if retry_skip {
            self.deferred = Some(std::mem::take(&mut self.skip));
        }
    }

    /// An own Claim is put off until `until` (a lease window binds this
    /// process); it starts then with `skip`.
    fn defer(&mut self, until: Instant, skip: Vec<NodeId>) {
        self.not_before = until;
        self.deferred = Some(skip);
    }

    /// NC4: a new cluster has had no token anywhere: the first own Claim
    /// starts at `at`, not a token-lost deadline after this life began.
    pub(super) fn first_at(&mut self, at: Instant) {
        self.defer(at, Vec::new());
        self.first_pending = true;
    }

    /// No own Claim before `at`.
    fn retry_at(&mut self, at: Instant) {
        self.not_before = at;
    }

    fn clear_deferred(&mut self) {
        self.deferred = None;
    }

    fn take_deferred(&mut self) -> Vec<NodeId> {
        self.deferred.take().unwrap_or_default()
    }

    /// The own Claim of `epoch` was sent at `now`, skipping `skip`.
    fn started(&mut self, epoch: u64, now: Instant, skip: &[NodeId]) {
        self.first_pending = false;
        self.own = Some((epoch, now));
        self.skip.clear();
        self.skip.extend_from_slice(skip);
    }

    /// Whether the Claim of (epoch, claimant) is the one adopted here.
    fn is_adopted(&self, epoch: u64, claimant: NodeId) -> bool {
        self.adopted == Some((epoch, claimant))
    }

    fn adopt(&mut self, epoch: u64, claimant: NodeId) {
        self.adopted = Some((epoch, claimant));
        // NC4: somebody claimed before this process's turn: its own first
        // Claim waits for the token-lost deadline like any other.
        if std::mem::take(&mut self.first_pending) {
            self.deferred = None;
        }
    }

    /// When a token last here counts as gone (W after it).
    fn token_gone_at(&self, w: Duration) -> Instant {
        self.token_at + w
    }

    /// When a lost token starts an own Claim (or one put off starts
    /// again), the token-lost deadline being `w` plus the jitter.
    fn own_due(&self, w: Duration) -> Instant {
        if self.deferred.is_some() {
            self.not_before
        } else {
            (self.token_seen_at + w + self.lost_jitter).max(self.not_before)
        }
    }

    /// Peers found silent W ago or longer are tried again.
    fn forget_silent(&mut self, now: Instant, w: Duration) {
        self.silent.retain(|_, since| now < *since + w);
    }

    fn is_silent(&self, peer: NodeId) -> bool {
        self.silent.contains_key(&peer)
    }

    /// A hop of `claim` was sent to `to`.
    fn hop_sent(&mut self, claim: Claim, to: NodeId, now: Instant) {
        self.hops.insert((claim.epoch, claim.claimant), Hop { claim, to, first_sent: now, last_sent: now });
    }

    /// The hop back to the claimant is over (its own Claim back).
    fn drop_hop(&mut self, epoch: u64, me: NodeId) {
        self.hops.remove(&(epoch, me));
    }

    /// `from` acked the hop of (epoch, claimant) sent to it.
    fn on_ack(&mut self, from: NodeId, epoch: u64, claimant: NodeId) {
        if self.hops.get(&(epoch, claimant)).is_some_and(|h| h.to == from) {
            self.hops.remove(&(epoch, claimant));
        }
    }

    /// When `h` is resent (every `resend`) or its successor skipped.
    fn hop_due(h: &Hop, resend: Duration, bypass_after: Duration) -> Instant {
        (h.last_sent + resend).min(h.first_sent + bypass_after)
    }

    /// When the next hop is due.
    fn next_hop_due(&self, resend: Duration, bypass_after: Duration) -> Option<Instant> {
        self.hops.values().map(|h| Self::hop_due(h, resend, bypass_after)).min()
    }

    /// The hops due at `now`, by key.
    fn due_hops(&self, now: Instant, resend: Duration, bypass_after: Duration) -> Vec<(u64, NodeId)> {
        self.hops.iter().filter(|(_, h)| now >= Self::hop_due(h, resend, bypass_after)).map(|(k, _)| *k).collect()
    }

    /// The hop `key`, due: resent, or (its successor silent for
    /// `bypass_after`) dropped with its successor marked silent and
    /// skipped. `None` when the hop is gone.
    fn hop_timeout(&mut self, key: (u64, NodeId), now: Instant, bypass_after: Duration) -> Option<HopStep> {
        let mut hop = self.hops.remove(&key)?;
        if now >= hop.first_sent + bypass_after {
            // A successor silent this long is skipped.
            self.silent.insert(hop.to, now);
            hop.claim.skipped.push(hop.to);
            Some(HopStep::Skip(hop.claim))
        } else {
            hop.last_sent = now;
            let step = HopStep::Resend(hop.to, hop.claim.clone());
            self.hops.insert(key, hop);
            Some(step)
        }
    }
}

impl TwNode {
    /// Proposes an epoch and sends the Claim (skipping `skip`), unless a
    /// Claim is already in flight or the promise component says wait.
    pub(super) fn start_claim(&mut self, now: Instant, skip: Vec<NodeId>) {
        if self.claims.is_claiming() {
            return;
        }
        // Every refusal condition applies to the claimant too: a lease
        // renewal of another process it acked. It tries again just after.
        if let Some(remaining) = self.lease_busy_for(now, self.me) {
            self.claims.defer(now + remaining, skip);
            return;
        }
        self.claims.clear_deferred();
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
                self.claims.started(epoch, now, &skip);
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
                self.claims.retry_at(now + remaining);
            }
            Err(Refusal::Unrecovered) => self.claims.retry_at(now + self.cfg.ring_timeout),
            Err(r) => {
                let retry = self.promise.retry_after(&Failure::Refused(r), &mut self.rng);
                self.claims.retry_at(now + retry);
            }
        }
    }

    /// Sends one hop of `claim` to the next process in the live view that
    /// the Claim does not skip; with nobody left, the Claim is back.
    fn send_hop(&mut self, now: Instant, mut claim: Claim) {
        // Peers already found silent here are skipped at once, so that a
        // crashed process costs one `bypass_after`, not one per Claim.
        self.claims.forget_silent(now, self.cfg.token_lost_after);
        while let Some(to) = self.successor(&claim.skipped).filter(|to| self.claims.is_silent(*to)) {
            claim.skipped.push(to);
        }
        match self.successor(&claim.skipped) {
            Some(to) => {
                self.out.send(to, Msg::Claim(claim.clone()));
                self.claims.hop_sent(claim, to, now);
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
        if self.claims.is_adopted(claim.epoch, claim.claimant) {
            return;
        }
        let rules = self.cfg.rules;
        let token_gone_at = self.claims.token_gone_at(self.cfg.token_lost_after);
        // (safety) Busy while the token is here, on its way from here, or
        // seen here newer than the claimant's: a live token is not killed.
        let refusal = if self.visit.is_some() && rules.on(TwRule::ClaimBusyWhileHolding) {
            Some(Refusal::Busy { remaining: self.cfg.max_hold })
        } else if self.is_awaiting() && rules.on(TwRule::ClaimBusyWhileAwaiting) {
            Some(Refusal::Busy { remaining: self.cfg.bypass_after })
        } else if self.seen > claim.seen && now < token_gone_at && rules.on(TwRule::ClaimBusyForANewerToken) {
            // A bypassed claimant must not kill the live token (one seen
            // here within W: a live token visits every process of its view
            // within a lap); the refusal counts as its Join. A token not
            // seen for W is lost here too, and refusing would only stop
            // every Claim but the one of whoever saw it last. W from the
            // token itself: Claims (refused or adopted) do not extend it.
            self.readmit.insert(claim.claimant);
            Some(Refusal::Busy { remaining: token_gone_at.saturating_since(now) })
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
            Err(Refusal::Restarting { .. } | Refusal::Unrecovered) => {
                // In its restart window, or unrecovered (a fresh node whose
                // peers have not answered enough yet: in a new cluster
                // started together, or on lossy links), a process promises
                // nothing, but a refusal would abandon a Claim that the
                // others may well carry to a majority, and send its
                // claimant into the long backoff: it passes the Claim on
                // like a silent process skipped, adopting nothing (it is
                // no adopter).
                self.claims.adopt(claim.epoch, claim.claimant);
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
                    self.claims.drop_own();
                    self.out.event(TwEvent::ClaimEnded { outcome: ClaimOutcome::Refused });
                }
                self.claims.adopt(claim.epoch, claim.claimant);
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
        let Some(epoch) = self.claims.own_epoch() else { return };
        if claim.epoch != epoch {
            return;
        }
        self.claims.drop_hop(epoch, self.me);
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
                        self.claims.drop_own();
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
            Err(UseError::NoProposal) => self.claims.drop_own(),
        }
    }

    /// The own Claim of `epoch` won: its token, `Token(epoch, max_tpc + 1)`
    /// with `bypassed = skipped`, is here.
    fn claim_won(&mut self, now: Instant, epoch: u64, claim: &Claim) {
        let took = self.claims.won(now);
        // The new token restarts at 1 when max_tpc + 1 would overflow.
        self.tpc = claim.max_tpc.max(self.cfg.first_tpc.get()).checked_add(1).unwrap_or(1);
        self.unsure_from = None;
        self.seen = (epoch, self.tpc);
        self.passing.forget_handoff();
        self.bypassed = claim.skipped.iter().copied().filter(|s| *s != self.me).collect();
        self.token_here(now);
        if self.handshake.is_joining() {
            self.joined();
        }
        self.out.event(TwEvent::ClaimEnded { outcome: ClaimOutcome::Won });
        self.out.event(TwEvent::Regenerated { epoch, tpc: self.tpc, took });
        self.install(now, epoch, 0);
    }

    fn claim_failed(&mut self, now: Instant, f: Failure) {
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
        let retry = self.promise.retry_after(&f, &mut self.rng);
        self.claims.failed(now + retry, self.cfg.rules.on(TwRule::FailedClaimsRetriedAfterTheirWindow));
    }

    pub(super) fn on_claim_ack(&mut self, from: NodeId, epoch: u64, claimant: NodeId) {
        self.claims.on_ack(from, epoch, claimant);
    }

    pub(super) fn on_claim_refused(&mut self, now: Instant, from: NodeId, epoch: u64, refusal: Refusal) {
        if self.claims.own_epoch() != Some(epoch) {
            return;
        }
        if let Step::Abandoned(f) = self.promise.on_answer(from, epoch, Err(refusal), now) {
            self.claim_failed(now, f);
        }
    }

    /// How often a Claim hop is resent: `ring_timeout / N`.
    fn hop_resend(&self) -> Duration {
        let n = u32::try_from(self.members.len()).unwrap_or(u32::MAX).max(1);
        (self.cfg.ring_timeout / n).max(Duration::from_millis(1))
    }

    /// When a lost token starts an own Claim (or one put off by a lease
    /// window starts again): only while this process neither holds,
    /// awaits nor claims, has joined and is not leaving.
    fn lost_claim_at(&self) -> Option<Instant> {
        let idle = self.visit.is_none() && !self.is_awaiting() && !self.claims.is_claiming();
        let at = self.claims.own_due(self.cfg.token_lost_after);
        (idle && self.handshake.is_joined() && !self.leaving).then_some(at)
    }

    pub(super) fn claim_deadline(&self) -> Option<Instant> {
        // (safety) A Claim not back by W·(1−ρ) is abandoned: by then its
        // adopters' promise windows (W·(1+ρ)) may have ended.
        let own =
            self.promise.proposal().map(|(_, deadline)| deadline).filter(|_| self.cfg.rules.on(TwRule::ClaimDeadline));
        let hops = self.claims.next_hop_due(self.hop_resend(), self.cfg.bypass_after);
        [own, hops, self.lost_claim_at()].into_iter().flatten().min()
    }

    pub(super) fn claim_timeout(&mut self, now: Instant) {
        if self.claims.is_claiming() && self.cfg.rules.on(TwRule::ClaimDeadline) {
            if self.promise.on_deadline(now).is_some() {
                self.claim_failed(now, Failure::Deadline);
            } else if self.promise.proposal().is_none() {
                self.claims.drop_own();
            }
        }
        let bypass_after = self.cfg.bypass_after;
        for key in self.claims.due_hops(now, self.hop_resend(), bypass_after) {
            match self.claims.hop_timeout(key, now, bypass_after) {
                Some(HopStep::Skip(claim)) => self.send_hop(now, claim),
                Some(HopStep::Resend(to, claim)) => self.out.send(to, Msg::Claim(claim)),
                None => {}
            }
        }
        if self.lost_claim_at().is_some_and(|at| now >= at) {
            let skip = self.claims.take_deferred();
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
