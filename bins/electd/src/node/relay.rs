//! Relay election (electd.md, "Election algorithm 1 — relay"; seed 003):
//! Dolev-Klawe-Rodeh / Peterson on the unidirectional ring. Each active
//! process sends its `d`, receives `e` (the nearest active predecessor's
//! `d`) and `f` (the second nearest's), and stays active only if `e` is the
//! largest of the three; the process that receives its own `d` back has
//! the maximum and announces `Elected(d)` around the ring. At most
//! 2n⌊log2 n⌋ + 2n messages.

use ftcore::NodeId;
use timer::Instant;

use super::{ElEvent, ElNode, ElRule};
use crate::msg::Msg;

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
struct RelayRun {
    term: u64,
    part: Part,
}

/// What the relay election keeps: this process's part in the run of the
/// current term, if it runs one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct RelayState {
    run: Option<RelayRun>,
}

/// What a value of the run asks of this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Send `value` on to the successor.
    Send { round: u32, phase: u8, value: NodeId },
    /// Its own `d` came back: it decides.
    Decide(NodeId),
    /// Nothing more (it became a relay).
    Nothing,
    /// A value of a phase it does not wait for.
    OutOfPhase,
}

impl RelayState {
    /// Whether a run of `term` is under way here.
    pub(super) fn runs(&self, term: u64) -> bool {
        self.run.as_ref().is_some_and(|r| r.term == term)
    }

    /// Whether no run is under way here.
    #[cfg(test)]
    pub(super) fn is_idle(&self) -> bool {
        self.run.is_none()
    }

    /// No run any more (a new term, a lap over, an aborted term).
    pub(super) fn end(&mut self) {
        self.run = None;
    }

    /// Joins the run of `term` as active with `d`.
    fn begin(&mut self, term: u64, d: NodeId) {
        self.run = Some(RelayRun { term, part: Part::Active { d, round: 0, awaiting: Awaiting::E } });
    }

    /// `value` of `round` and `phase` arrived (`None`: no run here).
    fn on_value(&mut self, round: u32, phase: u8, value: NodeId) -> Option<Next> {
        let run = self.run.as_mut()?;
        Some(match (run.part, phase) {
            (Part::Relay, _) => Next::Send { round, phase, value },
            (Part::Active { d, round: r, awaiting: Awaiting::E }, 1) => {
                if value == d {
                    Next::Decide(d)
                } else {
                    run.part = Part::Active { d, round: r, awaiting: Awaiting::F(value) };
                    Next::Send { round: r, phase: 2, value }
                }
            }
            (Part::Active { d, round: r, awaiting: Awaiting::F(e) }, 2) => {
                let f = value;
                if e > d && e > f {
                    run.part = Part::Active { d: e, round: r + 1, awaiting: Awaiting::E };
                    Next::Send { round: r + 1, phase: 1, value: e }
                } else {
                    run.part = Part::Relay;
                    Next::Nothing
                }
            }
            _ => Next::OutOfPhase,
        })
    }

    /// It decided: its Elected lap is out.
    fn decided(&mut self) {
        if let Some(run) = self.run.as_mut() {
            run.part = Part::Decided;
        }
    }

    /// An Elected lap passed: a process that has not decided only relays.
    fn passed(&mut self) {
        if let Some(run) = self.run.as_mut() {
            if run.part != Part::Decided {
                run.part = Part::Relay;
            }
        }
    }
}

impl ElNode {
    /// Joins the current term's run as active: sends its own id.
    pub(super) fn relay_begin(&mut self, now: Instant) {
        self.relay.begin(self.term, self.me);
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
        if !self.relay.runs(term) {
            if self.coordinator.is_some() || self.is_coordinator() {
                // The term's result is known here; a late run message.
                return;
            }
            ftcore::mutant! {
                // It only relays.
                if self.cfg.rules.off(ElRule::LateJoinersActive) {
                    self.relay.run = Some(RelayRun { term, part: Part::Relay });
                }
            }
            if !self.relay.runs(term) {
                self.relay_begin(now);
            }
        }
        match self.relay.on_value(round, phase, value) {
            None | Some(Next::Nothing) => {}
            Some(Next::Send { round, phase, value }) => self.relay_send(now, round, phase, value),
            Some(Next::Decide(d)) => self.relay_decide(now, d),
            Some(Next::OutOfPhase) => self.out.event(ElEvent::Refused { from: value, reason: "relay_out_of_phase" }),
        }
    }

    /// `d` came back: it is the maximum of the run. Announce it.
    fn relay_decide(&mut self, now: Instant, d: NodeId) {
        self.relay.decided();
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
        self.relay.end();
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
        self.relay.passed();
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
        self.relay.end();
        if self.coordinator.is_none() && !self.is_coordinator() {
            self.elect_within(now, self.cfg.hop_timeout);
        }
    }
}
