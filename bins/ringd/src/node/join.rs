//! Fresh-node recovery (foundation.md, Fresh nodes): while the promise
//! component says this replica has not recovered, it runs rounds of
//! `Hello` with a fresh nonce to every peer, a new round every
//! `suspect_after` (after its restart window, if any); each peer answers
//! `HelloAck` with its stored values, and once enough answered the replica
//! reports `StateRecovered`. Joining the ring itself is the heartbeat
//! ring's (`hbring`).

use std::time::Duration;

use durable::promise::{AckStep, RoundStep, Values};
use ftcore::NodeId;
use timer::Instant;

use super::{RdEvent, RdNode};
use crate::msg::Msg;

/// Fresh-node recovery rounds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct HelloState {
    /// When the next round starts (none once recovered).
    next: Option<Instant>,
}

impl HelloState {
    /// The next round starts at `next` (none: no more rounds).
    fn schedule(&mut self, next: Option<Instant>) {
        self.next = next;
    }

    fn deadline(&self) -> Option<Instant> {
        self.next
    }

    /// Whether the next round is due at `now`.
    fn due(&self, now: Instant) -> bool {
        self.next.is_some_and(|t| now >= t)
    }
}

impl RdNode {
    pub(super) fn start_hello(&mut self, now: Instant) {
        let nonce = self.fresh_id();
        let next = match self.promise.recovery_round(nonce, now) {
            RoundStep::NotNeeded => None,
            RoundStep::Wait { until } => Some(until),
            RoundStep::Send => {
                self.send_to_every_peer(Msg::Hello { nonce });
                Some(now + self.cfg.suspect_after.max(Duration::from_millis(1)))
            }
            RoundStep::Recovered { max } => {
                self.recovered(now, max);
                None
            }
        };
        self.hello.schedule(next);
    }

    pub(super) fn hello_deadline(&self) -> Option<Instant> {
        self.hello.deadline()
    }

    pub(super) fn hello_timeout(&mut self, now: Instant) {
        if self.hello.due(now) {
            self.start_hello(now);
        }
    }

    pub(super) fn on_hello(&mut self, from: NodeId, nonce: u64) {
        let values = self.promise.values();
        self.out.send(from, Msg::HelloAck { nonce, values });
    }

    pub(super) fn on_hello_ack(&mut self, now: Instant, from: NodeId, nonce: u64, values: Option<Values>) {
        if let AckStep::Recovered { max } = self.promise.on_hello_ack(from, nonce, values, now) {
            self.recovered(now, max);
            self.hello.schedule(None);
        }
    }

    fn recovered(&mut self, now: Instant, max: u64) {
        self.out.event(RdEvent::StateRecovered { max });
        // NC4: a new cluster's first census goes by rank.
        if let Some(at) = self.promise.first_proposal_in_new_cluster(now) {
            self.census.first_at(at);
        }
    }
}
