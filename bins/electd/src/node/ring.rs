//! Alive-list ring election (electd.md, "Election algorithm 2 — alive-list
//! ring"; seed 004): an `Election` collects the ids of the processes that
//! vote as it travels the ring, skipping successors that do not ack a hop;
//! back at its initiator with a majority, the highest id in it is the
//! coordinator, announced by one lap of `Coordinator`.

use std::collections::BTreeSet;

use ftcore::{Incarnation, NodeId};
use timer::Instant;

use super::{ElEvent, ElNode, ElRule};
use crate::msg::Msg;

/// What this process remembers of the current term's alive-list elections.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct RingState {
    /// The highest (term, initiator) forwarded here: lower ones are
    /// dropped, and so is a second copy of it (a hop that was only slow
    /// was skipped, so the lap goes on twice: forwarding both copies again
    /// would double them at every slow hop).
    forwarded: Option<(u64, NodeId)>,
    /// The (term, initiator) of the `Coordinator` laps passed on here: a
    /// second copy is dropped likewise.
    passed: BTreeSet<(u64, NodeId)>,
    /// The own election in flight: its term.
    own: Option<u64>,
}

impl RingState {
    /// Its own Election of `term` (initiator `me`) is out.
    fn begin(&mut self, term: u64, me: NodeId) {
        self.own = Some(term);
        self.forwarded = Some((term, me));
    }

    /// Whether the Election of (`term`, `initiator`) is the first copy of
    /// one higher than any forwarded here; it is noted as forwarded.
    fn forwards(&mut self, term: u64, initiator: NodeId) -> bool {
        if self.forwarded.is_some_and(|f| (term, initiator) <= f) {
            return false;
        }
        self.forwarded = Some((term, initiator));
        true
    }

    /// Whether its own Election of `term` is still out.
    fn awaits_own(&self, term: u64) -> bool {
        self.own == Some(term)
    }

    /// Its own Election came back in time.
    fn own_back(&mut self) {
        self.own = None;
    }

    /// Whether the `Coordinator` lap of (`term`, `initiator`) is the first
    /// copy passed here; older terms' laps are forgotten.
    fn passes(&mut self, term: u64, initiator: NodeId) -> bool {
        if !self.passed.insert((term, initiator)) {
            return false;
        }
        // Only the current term's laps can arrive (dispatch answers lower
        // terms); forget older ones.
        self.passed.retain(|(t, _)| *t >= term);
        true
    }
}

impl ElNode {
    /// Starts the own Election of the current term: this process votes
    /// first (a refused vote starts nothing: it would be back without it).
    pub(super) fn ring_begin(&mut self, now: Instant) {
        let term = self.term;
        if self.promise.vote(term, now).is_err() && self.cfg.rules.on(ElRule::OneVotePerTerm) {
            self.elect_within(now, self.cfg.election_timeout);
            return;
        }
        self.ring.begin(term, self.me);
        let (me, inc) = (self.me, self.inc);
        self.ring_forward(now, Msg::Election { term, initiator: me, initiator_inc: inc, alive: vec![me], hop: 0 });
    }

    /// Sends `msg` to the next live successor (a fresh hop number), or, with
    /// nobody left, handles it as if it came back.
    fn ring_forward(&mut self, now: Instant, msg: Msg) {
        let Some(s) = self.successor() else {
            // Alone: the lap ends here.
            match msg {
                Msg::Election { term, initiator, initiator_inc, alive, .. } if initiator == self.me => {
                    self.election_back(now, term, initiator_inc, alive)
                }
                Msg::Coordinator { term, id, .. } if id != self.me => {
                    // Could not reach the named coordinator.
                    let _ = term;
                    self.elect_within(now, self.cfg.hop_timeout);
                }
                _ => {}
            }
            return;
        };
        self.send_hop(now, s, |hop| match msg {
            Msg::Election { term, initiator, initiator_inc, alive, .. } => {
                Msg::Election { term, initiator, initiator_inc, alive, hop }
            }
            Msg::Coordinator { term, id, alive, initiator, .. } => Msg::Coordinator { term, id, alive, initiator, hop },
            other => other,
        });
    }

    /// (safety) A hop was not acked: that successor is left out and the
    /// next one tried; a forwarder that had to skip the named coordinator
    /// starts term + 1.
    pub(super) fn ring_skip(&mut self, now: Instant, skipped: NodeId, msg: Msg) {
        if let Msg::Coordinator { id, .. } = &msg {
            if *id == skipped {
                self.elect_within(now, self.cfg.hop_timeout);
                return;
            }
        }
        self.ring_forward(now, msg);
    }

    /// An Election of the current term arrived.
    pub(super) fn on_election(
        &mut self,
        now: Instant,
        term: u64,
        initiator: NodeId,
        initiator_inc: Incarnation,
        mut alive: Vec<NodeId>,
    ) {
        if !self.members.contains(&initiator)
            || alive.len() > self.members.len()
            || alive.iter().any(|a| !self.members.contains(a))
        {
            self.out.event(ElEvent::Refused { from: initiator, reason: "bad_election" });
            return;
        }
        if initiator == self.me {
            return self.election_back(now, term, initiator_inc, alive);
        }
        // Drop an Election lower in (term, initiator) than one forwarded,
        // or a second copy of the one forwarded.
        if !self.ring.forwards(term, initiator) {
            return;
        }
        // (safety) One vote per term: a later Election of a term voted in
        // goes on without this process.
        let voted = self.promise.vote(term, now).is_ok() || self.cfg.rules.off(ElRule::OneVotePerTerm);
        if voted && !alive.contains(&self.me) {
            alive.push(self.me);
        }
        // Still electing: re-arm the randomized timer (the initiator may die).
        self.elect_within(now + self.cfg.election_timeout, self.cfg.election_timeout);
        self.ring_forward(now, Msg::Election { term, initiator, initiator_inc, alive, hop: 0 });
    }

    /// The own Election came back.
    fn election_back(&mut self, now: Instant, term: u64, initiator_inc: Incarnation, alive: Vec<NodeId>) {
        if initiator_inc != self.inc || !self.ring.awaits_own(term) {
            return;
        }
        if now.saturating_since(self.term_since) > self.cfg.shrunk(self.cfg.election_timeout) {
            self.out.event(ElEvent::PastDeadline { term });
            if self.cfg.rules.on(ElRule::ElectionDeadline) {
                return;
            }
        }
        self.ring.own_back();
        let voters: BTreeSet<NodeId> = alive.iter().copied().collect();
        if voters.len() < self.majority() && self.cfg.rules.on(ElRule::MajorityOfVoters) {
            // The election failed: try again later.
            self.elect_within(now, self.cfg.election_timeout);
            return;
        }
        let Some(id) = voters.iter().max().copied() else { return };
        let took = now.saturating_since(self.term_since);
        self.out.event(ElEvent::ElectionCompleted { algorithm: self.cfg.algorithm, term, coordinator: id, took });
        let me = self.me;
        self.coordinator_pass(now, term, id, alive, me);
    }

    /// A `Coordinator` of the current term arrived; the lap ends back at
    /// its initiator.
    pub(super) fn on_coordinator(
        &mut self,
        now: Instant,
        term: u64,
        id: NodeId,
        alive: Vec<NodeId>,
        initiator: NodeId,
    ) {
        if !self.members.contains(&id) || !self.members.contains(&initiator) || alive.len() > self.members.len() {
            self.out.event(ElEvent::Refused { from: initiator, reason: "bad_coordinator" });
            return;
        }
        if initiator != self.me {
            // A second copy of a lap already passed on goes no further.
            if !self.ring.passes(term, initiator) {
                return;
            }
            self.coordinator_pass(now, term, id, alive, initiator);
        }
    }

    /// Records the coordinator, follows it if this process follows nobody
    /// in the term (one valid result per term), and passes it on.
    fn coordinator_pass(&mut self, now: Instant, term: u64, id: NodeId, alive: Vec<NodeId>, initiator: NodeId) {
        if self.follow(now, id) && id == self.me && !self.is_coordinator() {
            self.become_elected(now);
        }
        self.ring_forward(now, Msg::Coordinator { term, id, alive, initiator, hop: 0 });
    }
}
