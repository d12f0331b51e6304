//! The join handshake and fresh-node recovery (electd.md, "Terms, votes
//! and the quorum lease"; foundation.md): `Hello` with a fresh nonce to
//! every peer at start, resent on the `Hello` timer until joined; while
//! this process is unrecovered, the promise component's recovery rounds
//! (`recovery_round`, its `on_hello_ack`) and the state they recover; a
//! `HelloAck` of a running cluster joins its term, and a higher id may
//! challenge the coordinator it names.

use ::durable::promise::{AckStep, RoundStep, Values};

use super::*;

impl ElNode {
    pub(super) fn hello_all(&mut self, now: Instant) {
        self.hello_nonce = self.rng.next_u64();
        let (term, nonce) = (self.term, self.hello_nonce);
        for m in self.others() {
            self.send(m, Msg::Hello { term, nonce });
        }
        self.timers.set(Timer::Hello, now + self.cfg.suspect_after);
    }

    pub(super) fn on_hello_timer(&mut self, now: Instant) {
        if !self.promise.stored().recovered() {
            let nonce = self.rng.next_u64();
            match self.promise.recovery_round(nonce, now) {
                RoundStep::NotNeeded => {}
                RoundStep::Wait { until } => self.timers.set(Timer::Hello, until),
                RoundStep::Send => {
                    self.hello_nonce = nonce;
                    let term = self.term;
                    for m in self.others() {
                        self.send(m, Msg::Hello { term, nonce });
                    }
                    self.timers.set(Timer::Hello, now + self.cfg.suspect_after);
                }
                RoundStep::Recovered { max } => self.state_recovered(now, max),
            }
        } else if !self.joined {
            self.hello_all(now);
        }
    }

    fn state_recovered(&mut self, now: Instant, max: u64) {
        self.out.event(ElEvent::StateRecovered { max });
        // Never vote at or below what anyone answered.
        if max > self.term {
            self.term = max;
            self.follows = None;
            self.term_since = now;
        }
        self.start_term = self.start_term.max(max);
    }

    pub(super) fn on_hello(&mut self, from: NodeId, nonce: u64) {
        let values = self.promise.values();
        let (term, coordinator) = (self.term, self.coordinator);
        self.send(from, Msg::HelloAck { term, nonce, values, coordinator });
    }

    pub(super) fn on_hello_ack(
        &mut self,
        now: Instant,
        from: NodeId,
        term: u64,
        nonce: u64,
        values: Option<Values>,
        coordinator: Option<NodeId>,
    ) {
        if let AckStep::Recovered { max } = self.promise.on_hello_ack(from, nonce, values, now) {
            self.state_recovered(now, max);
        }
        if !self.promise.stored().recovered() {
            return;
        }
        // A running cluster: join its term and expect its coordinator's
        // heartbeat (whom we follow is decided by that heartbeat).
        if term > self.term {
            self.join_term(now, term);
        }
        if term == self.term {
            if let Some(c) = coordinator {
                self.maybe_challenge(now, c);
            }
        }
    }
}
