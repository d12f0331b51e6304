//! Relay election (electd.md, "Election algorithm 1 — relay"; seed 003):
//! Dolev-Klawe-Rodeh / Peterson on the unidirectional ring. Each active
//! process sends its `d`, receives `e` (the nearest active predecessor's
//! `d`) and `f` (the second nearest's), and stays active only if `e` is the
//! largest of the three; the process that receives its own `d` back has
//! the maximum and announces `Elected(d)` around the ring. At most
//! 2n⌊log2 n⌋ + 2n messages.

use super::*;

/// What an active process waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Awaiting {
    /// Phase 1: `e`.
    E,
    /// Phase 2: `f`, holding the `e` received.
    F(NodeId),
}

/// This process's part in the current term's relay run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Part {
    Active {
        d: NodeId,
        round: u32,
        awaiting: Awaiting,
    },
    Relay,
    /// It decided (received its own `d`); its Elected lap is out.
    Decided,
}

/// The relay run of one term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct RelayRun {
    term: u64,
    part: Part,
}

impl ElNode {
    /// Joins the current term's run as active: sends its own id.
    pub(super) fn relay_begin(&mut self, now: Instant) {
        let term = self.term;
        self.relay = Some(RelayRun { term, part: Part::Active { d: self.me, round: 0, awaiting: Awaiting::E } });
        self.relay_send(now, 0, 1, self.me);
    }

    fn relay_send(&mut self, now: Instant, round: u32, phase: u8, value: NodeId) {
        let term = self.term;
        match self.successor() {
            Some(s) => self.send_hop(now, s, |hop| Msg::Relay { term, round, phase, value, hop }),
            // Alone in the live ring: its d comes back to it at once.
            None => self.relay_decide(now, value),
        }
    }

    /// A value of the current term's run arrived from the predecessor.
    pub(super) fn on_relay(&mut self, now: Instant, term: u64, round: u32, phase: u8, value: NodeId) {
        if !self.members.contains(&value) || !matches!(phase, 1 | 2) {
            self.out.event(ElEvent::Refused { from: value, reason: "bad_relay" });
            return;
        }
        // (safety) A term-t message before this process started term t:
        // it joins as active (sends its own id), then handles the message;
        // relaying only would elect the largest initiator.
        if self.relay.as_ref().is_none_or(|r| r.term != term) {
            if self.coordinator.is_some() || self.is_coordinator() {
                // The term's result is known here; a late run message.
                return;
            }
            ftcore::mutant! {
                // It only relays.
                if self.cfg.rules.off(ElRule::LateJoinersActive) {
                    self.relay = Some(RelayRun { term, part: Part::Relay });
                }
            }
            if self.relay.as_ref().is_none_or(|r| r.term != term) {
                self.relay_begin(now);
            }
        }
        let Some(run) = self.relay.as_mut() else { return };
        match (run.part, phase) {
            (Part::Relay, _) => self.relay_send(now, round, phase, value),
            (Part::Active { d, round: r, awaiting: Awaiting::E }, 1) => {
                if value == d {
                    self.relay_decide(now, d);
                } else {
                    run.part = Part::Active { d, round: r, awaiting: Awaiting::F(value) };
                    self.relay_send(now, r, 2, value);
                }
            }
            (Part::Active { d, round: r, awaiting: Awaiting::F(e) }, 2) => {
                let f = value;
                if e > d && e > f {
                    run.part = Part::Active { d: e, round: r + 1, awaiting: Awaiting::E };
                    self.relay_send(now, r + 1, 1, e);
                } else {
                    run.part = Part::Relay;
                }
            }
            _ => self.out.event(ElEvent::Refused { from: value, reason: "relay_out_of_phase" }),
        }
    }

    /// `d` came back: it is the maximum of the run. Announce it.
    fn relay_decide(&mut self, now: Instant, d: NodeId) {
        if let Some(run) = self.relay.as_mut() {
            run.part = Part::Decided;
        }
        self.elected_pass(now, self.term, d, self.me, false);
    }

    /// `Elected(term, d)` arrived from the predecessor.
    pub(super) fn on_elected(&mut self, now: Instant, term: u64, d: NodeId, decider: NodeId, accepted: bool) {
        if !self.members.contains(&d) || !self.members.contains(&decider) {
            self.out.event(ElEvent::Refused { from: decider, reason: "bad_elected" });
            return;
        }
        if decider != self.me {
            return self.elected_pass(now, term, d, decider, accepted);
        }
        // Back at the decider: the lap is over.
        self.relay = None;
        if accepted {
            let took = now.saturating_since(self.term_since);
            self.out.event(ElEvent::ElectionCompleted { algorithm: self.cfg.algorithm, term, coordinator: d, took });
        } else {
            // d never accepted (it crashed mid-lap): term + 1 without it.
            self.suspected.insert(d);
            self.relay_abort(now);
        }
    }

    /// `Elected` passes this process (or starts at the decider): it votes
    /// for d, d accepts, and it goes on to the successor.
    fn elected_pass(&mut self, now: Instant, term: u64, d: NodeId, decider: NodeId, accepted: bool) {
        // (safety) One vote per term, stored before it is forwarded; a
        // process that cannot vote follows the first coordinator it hears of.
        if self.promise.vote(term, now).is_ok() || self.follows.is_none() || self.cfg.rules.off(ElRule::OneVotePerTerm)
        {
            self.follow(now, d);
        }
        let accepted = accepted || d == self.me;
        if d == self.me && self.follows == Some(self.me) {
            self.become_elected(now);
        }
        if let Some(run) = self.relay.as_mut() {
            if run.part != Part::Decided {
                run.part = Part::Relay;
            }
        }
        match self.successor() {
            Some(s) => self.send_hop(now, s, |hop| Msg::Elected { term, d, decider, accepted, hop }),
            None if accepted => {
                let took = now.saturating_since(self.term_since);
                self.out.event(ElEvent::ElectionCompleted {
                    algorithm: self.cfg.algorithm,
                    term,
                    coordinator: d,
                    took,
                });
            }
            None => self.relay_abort(now),
        }
    }

    /// (safety) A run is never patched by skipping a successor: the term is
    /// abandoned and term + 1 starts over the live ring (after a pre-vote).
    pub(super) fn relay_abort(&mut self, now: Instant) {
        self.relay = None;
        if self.coordinator.is_none() && !self.is_coordinator() {
            self.elect_within(now, self.cfg.hop_timeout);
        }
    }
}
