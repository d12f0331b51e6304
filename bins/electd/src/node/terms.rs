//! Terms (electd.md, "Terms, votes and the quorum lease"): joining a
//! higher term before acting on its message, `StaleTerm`, pre-votes,
//! starting a term, and the per-hop acks both algorithms use (the start-up
//! handshake and fresh-node recovery are in `join.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ftcore::{NodeId, Protocol};
use timer::Instant;

use super::state::{Hop, Role, Timer};
use super::{Algorithm, ElEvent, ElNode, ElRule, PreVoteOutcome};
use crate::msg::Msg;

/// A pre-vote in progress.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PreVoteRound {
    /// The term asked about (our term + 1 when it started).
    asked: u64,
    /// Who said yes (this process included).
    yes: BTreeSet<NodeId>,
    /// The highest term an answer named.
    max_told: u64,
}

/// What the terms mechanism keeps besides the term itself: the pre-vote
/// in progress and the election hops not acked yet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct TermsState {
    prevote: Option<PreVoteRound>,
    /// Unacked election hops by number.
    hops: BTreeMap<u64, Hop>,
    /// The last hop number given out.
    next_hop: u64,
}

impl TermsState {
    /// A new term: no pre-vote, no hop of the old one expected.
    fn new_term(&mut self) {
        self.prevote = None;
        self.hops.clear();
    }

    /// Whether a pre-vote is in progress.
    pub(super) fn prevoting(&self) -> bool {
        self.prevote.is_some()
    }

    /// A pre-vote asking about `asked` starts, `me` saying yes; `term` is
    /// the own term.
    fn prevote_begin(&mut self, asked: u64, me: NodeId, term: u64) {
        let mut yes = BTreeSet::new();
        yes.insert(me);
        self.prevote = Some(PreVoteRound { asked, yes, max_told: term });
    }

    /// An answer to the pre-vote about `asked`: whether it counted (one is
    /// in progress and asked that).
    fn prevote_answer(&mut self, from: NodeId, term: u64, asked: u64, yes: bool) -> bool {
        let Some(p) = self.prevote.as_mut() else { return false };
        if p.asked != asked {
            return false;
        }
        p.max_told = p.max_told.max(term);
        if yes {
            p.yes.insert(from);
        }
        true
    }

    /// With `majority` yes answers the pre-vote is over and won: the term
    /// to start, above every term it was told (and its own).
    fn prevote_won(&mut self, majority: usize) -> Option<u64> {
        let p = self.prevote.as_ref()?;
        if p.yes.len() < majority {
            return None;
        }
        let term = p.asked.max(p.max_told.saturating_add(1));
        self.prevote = None;
        Some(term)
    }

    /// The pre-vote's time is up: whether one was in progress (lost).
    fn prevote_lost(&mut self) -> bool {
        self.prevote.take().is_some()
    }

    /// A fresh hop number.
    fn new_hop(&mut self) -> u64 {
        self.next_hop += 1;
        self.next_hop
    }

    /// The last hop number given out.
    #[cfg(test)]
    pub(super) fn last_hop(&self) -> u64 {
        self.next_hop
    }

    /// Hop `hop` (`msg` to `to`) expects its ack.
    fn expect_ack(&mut self, hop: u64, to: NodeId, msg: Msg) {
        self.hops.insert(hop, Hop { to, msg });
    }

    /// Hop `hop` is acked or timed out: what it sent, if still expected.
    pub(super) fn take_hop(&mut self, hop: u64) -> Option<Hop> {
        self.hops.remove(&hop)
    }

    /// The unacked hops to `peer`.
    pub(super) fn hops_to(&self, peer: NodeId) -> Vec<u64> {
        self.hops.iter().filter(|(_, h)| h.to == peer).map(|(id, _)| *id).collect()
    }
}

impl ElNode {
    /// (safety) A higher term is joined (stored) before its message is
    /// acted on; a coordinator steps down at once.
    pub(super) fn join_term(&mut self, now: Instant, term: u64) {
        if term <= self.term {
            return;
        }
        if self.is_coordinator() {
            self.step_down(now, "a higher term exists");
        }
        if self.coordinator.is_some() && self.lost_coordinator_at.is_none() {
            self.lost_coordinator_at = Some(now);
        }
        self.term = term;
        self.follows = None;
        self.coordinator = None;
        self.term_since = now;
        self.role = Role::Electing;
        self.relay.end();
        self.terms.new_term();
        self.timers.cancel(Timer::PreVoteDue);
        self.out.event(ElEvent::TermJoined { term });
        // An election of this term should end within election_timeout.
        self.timers.set(Timer::ElectionDue, now + self.cfg.election_timeout);
    }

    /// A process of a higher term answered: we joined it (dispatch); note
    /// the coordinator it names.
    pub(super) fn on_stale_term(&mut self, now: Instant, coordinator: Option<NodeId>) {
        if let Some(c) = coordinator {
            if self.follows.is_none() || self.follows == Some(c) {
                self.follow(now, c);
            }
        }
    }

    // ---- pre-vote ----

    /// Arms the election timer at a random point within `[0, up_to]` from
    /// now (unless it is armed earlier).
    pub(super) fn elect_within(&mut self, now: Instant, up_to: Duration) {
        let at = now + self.rng.duration_between(Duration::ZERO, up_to);
        match self.timers.get(Timer::Elect) {
            Some(t) if t <= at => {}
            _ => self.timers.set(Timer::Elect, at),
        }
    }

    pub(super) fn on_elect_timer(&mut self, now: Instant) {
        if self.leaving || self.terms.prevoting() {
            return;
        }
        // This process elected, or a live coordinator known (whatever its
        // id: a healthy coordinator keeps office): nothing to do.
        if self.is_coordinator() || self.coordinator_alive(now) {
            return;
        }
        self.start_prevote(now);
    }

    /// (+) Pre-vote: ask every configured process whether it would vote in
    /// term + 1; store and join nothing.
    pub(super) fn start_prevote(&mut self, now: Instant) {
        if !self.promise.stored().recovered() || now < self.promise.restart_window_ends() {
            let at = self.promise.restart_window_ends().max(now + self.cfg.hop_timeout);
            self.timers.set(Timer::Elect, at);
            return;
        }
        let asked = self.term.saturating_add(1);
        if self.cfg.rules.off(ElRule::PreVote) {
            return self.start_term(now, asked);
        }
        self.terms.prevote_begin(asked, self.me, self.term);
        for m in self.others() {
            self.send(m, Msg::PreVote { term: asked });
        }
        self.timers.set(Timer::PreVoteDue, now + self.cfg.prevote_timeout());
        self.maybe_prevote_won(now);
    }

    /// Whether the coordinator known here is live: its heartbeat heard
    /// within `suspect_after`, or this process is it under its quorum lease.
    pub(super) fn coordinator_alive(&self, now: Instant) -> bool {
        match self.coordinator {
            Some(c) if c == self.me => self.may_grant(now),
            Some(_) => now.saturating_since(self.last_heard) < self.cfg.suspect_after,
            None => false,
        }
    }

    pub(super) fn on_prevote(&mut self, now: Instant, from: NodeId, asked: u64) {
        // No while a live coordinator is known, unless the asker has a
        // higher id: it asks only when it hears no live coordinator itself
        // (`on_elect_timer`), as when it is cut off from the coordinator
        // alone, and a higher id may then replace it.
        let yes = match self.coordinator {
            Some(c) if self.coordinator_alive(now) => from > c,
            _ => true,
        };
        let term = self.term;
        self.send(from, Msg::PreVoteReply { term, asked, yes });
    }

    pub(super) fn on_prevote_reply(&mut self, now: Instant, from: NodeId, term: u64, asked: u64, yes: bool) {
        if self.terms.prevote_answer(from, term, asked, yes) {
            self.maybe_prevote_won(now);
        }
    }

    fn maybe_prevote_won(&mut self, now: Instant) {
        // A term above every term it was told (and its own).
        let Some(term) = self.terms.prevote_won(self.majority()) else { return };
        self.timers.cancel(Timer::PreVoteDue);
        self.out.event(ElEvent::PreVote(PreVoteOutcome::Won));
        self.start_term(now, term);
    }

    pub(super) fn on_prevote_due(&mut self, now: Instant) {
        if self.terms.prevote_lost() {
            self.out.event(ElEvent::PreVote(PreVoteOutcome::Lost));
            // Try again within the election timeout (the randomized timer).
            self.elect_within(now, self.cfg.election_timeout);
        }
    }

    /// Starts term `term` (after a won pre-vote): joins it, then runs the
    /// configured algorithm.
    pub(super) fn start_term(&mut self, now: Instant, term: u64) {
        if term == u64::MAX {
            // A term that would overflow is refused.
            self.out.event(ElEvent::Refused { from: self.me, reason: "term_overflow" });
            return;
        }
        self.join_term(now, term);
        self.out.event(ElEvent::ElectionStarted { term, algorithm: self.cfg.algorithm });
        match self.cfg.algorithm {
            Algorithm::Relay => self.relay_begin(now),
            Algorithm::Ring => self.ring_begin(now),
        }
    }

    /// Starts term + 1 now, without a pre-vote: for measurements of the
    /// election itself (every process starting at once), not used by the
    /// daemon.
    #[doc(hidden)]
    pub fn start_election_now(&mut self, now: Instant) {
        let term = self.term.saturating_add(1);
        self.start_term(now, term);
        self.after_input(now);
    }

    /// The current term's election did not produce a coordinator in time:
    /// term + 1 over the live ring, after a pre-vote, at a random point
    /// within the election timeout.
    pub(super) fn on_election_due(&mut self, now: Instant) {
        if self.coordinator.is_none() && !self.is_coordinator() {
            self.elect_within(now, self.cfg.election_timeout / 4);
        }
    }

    // ---- per-hop acks ----

    /// Sends an election message that `make` builds around a hop number to
    /// `to`, and expects its `HopAck` within `hop_timeout`.
    pub(super) fn send_hop(&mut self, now: Instant, to: NodeId, make: impl FnOnce(u64) -> Msg) {
        let hop = self.terms.new_hop();
        let msg = make(hop);
        self.send(to, msg.clone());
        if to != self.me && self.cfg.rules.on(ElRule::HopAcks) {
            self.terms.expect_ack(hop, to, msg);
            self.timers.set(Timer::Hop(hop), now + self.cfg.hop_timeout);
        }
    }

    /// A hop was not acked in time: its successor is suspected; `relay`
    /// aborts the term, `ring` skips to the next successor.
    pub(super) fn on_hop_timeout(&mut self, now: Instant, hop: u64) {
        let Some(h) = self.terms.take_hop(hop) else { return };
        if h.msg.term() != self.term {
            return;
        }
        self.suspected.insert(h.to);
        match h.msg {
            Msg::Relay { .. } | Msg::Elected { .. } => self.relay_abort(now),
            Msg::Election { .. } | Msg::Coordinator { .. } => self.ring_skip(now, h.to, h.msg),
            _ => {}
        }
    }

    /// Follows `c` in the current term if this process follows nobody yet
    /// (stored with the term); then `c` is the coordinator known here.
    pub(super) fn follow(&mut self, now: Instant, c: NodeId) -> bool {
        match self.follows {
            None => self.follows = Some(c),
            Some(f) if f == c => {}
            Some(_) => {
                ftcore::mutant! {
                    // Another coordinator followed in the same term.
                    if self.cfg.rules.off(ElRule::OneVotePerTerm) {
                        self.follows = Some(c);
                    }
                }
                if self.follows != Some(c) {
                    self.out.event(ElEvent::FollowConflict);
                    return false;
                }
            }
        }
        if self.coordinator != Some(c) {
            self.coordinator = Some(c);
            self.last_heard = now;
            self.out.event(ElEvent::CoordinatorKnown { term: self.term, id: c });
            if let Some(at) = self.lost_coordinator_at.take() {
                self.out.event(ElEvent::Failover { took: now.saturating_since(at) });
            }
            if c != self.me {
                self.role = Role::Consumer;
            }
            // A pre-vote under way asked for a term because no coordinator
            // was known: one is now. Won later, it would depose a
            // coordinator elected but not yet in office (CI on ecb6599:
            // 25 terms in 600 ms at start-up).
            if self.terms.prevote_lost() {
                self.timers.cancel(Timer::PreVoteDue);
            }
            // Pending requests and a held grant go to the new coordinator
            // (this process's own ones too, through the loopback).
            self.coordinator_changed(now);
            self.timers.cancel(Timer::ElectionDue);
        }
        true
    }
}
