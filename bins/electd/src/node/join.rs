//! The join handshake and fresh-node recovery (electd.md, "Terms, votes
//! and the quorum lease"; foundation.md): `Hello` with a fresh nonce to
//! every peer at start, resent on the `Hello` timer until joined; while
//! this process is unrecovered, the promise component's recovery rounds
//! (`recovery_round`, its `on_hello_ack`) and the state they recover; a
//! `HelloAck` of a running cluster joins its term (its coordinator is
//! followed once its heartbeat is heard; a higher id does not challenge
//! it).

use ::durable::promise::{AckStep, RoundStep, Values};
use ftcore::NodeId;
use timer::Instant;

use super::state::Timer;
use super::{ElEvent, ElNode};
use crate::msg::Msg;

/// Where the join handshake stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Handshake {
    /// Joined: a heartbeat of the term's coordinator acked, or office
    /// taken (alone, at once).
    joined: bool,
    /// The nonce of the latest `Hello` round.
    nonce: u64,
}

impl Handshake {
    pub(super) fn new(joined: bool) -> Self {
        Handshake { joined, nonce: 0 }
    }

    pub(super) fn is_joined(&self) -> bool {
        self.joined
    }

    /// Notes that this process joined: whether it had not before.
    pub(super) fn join(&mut self) -> bool {
        !std::mem::replace(&mut self.joined, true)
    }

    /// The nonce of the latest `Hello` round.
    #[cfg(test)]
    pub(super) fn nonce(&self) -> u64 {
        self.nonce
    }
}

impl ElNode {
    pub(super) fn hello_all(&mut self, now: Instant) {
        self.handshake.nonce = self.rng.next_u64();
        let (term, nonce) = (self.term, self.handshake.nonce);
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
                    self.handshake.nonce = nonce;
                    let term = self.term;
                    for m in self.others() {
                        self.send(m, Msg::Hello { term, nonce });
                    }
                    self.timers.set(Timer::Hello, now + self.cfg.suspect_after);
                }
                RoundStep::Recovered { max } => self.state_recovered(now, max),
            }
        } else if !self.handshake.is_joined() {
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
        // NC4: a new cluster's first election goes by rank.
        if let Some(at) = self.promise.first_proposal_in_new_cluster(now) {
            self.timers.set(Timer::Elect, at);
        }
    }

    pub(super) fn on_hello(&mut self, from: NodeId, nonce: u64) {
        let values = self.promise.values();
        let (term, coordinator) = (self.term, self.coordinator);
        self.send(from, Msg::HelloAck { term, nonce, values, coordinator });
    }

    pub(super) fn on_hello_ack(&mut self, now: Instant, from: NodeId, term: u64, nonce: u64, values: Option<Values>) {
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
    }
}
