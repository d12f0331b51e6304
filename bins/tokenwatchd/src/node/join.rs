//! Start-up and re-admission (tokenwatchd.md, Crashes, restarts,
//! regeneration; foundation.md, Joining): every process at start resumes
//! from its stored state and sends `Join` to every configured process;
//! each answers `JoinAck` and drops the joiner from `bypassed` in the next
//! token it forwards. A process has joined once a live process answered
//! (or it saw a token); a fresh node (no state file) first recovers what
//! its peers stored, through the promise component.

use durable::promise::{AckStep, RoundStep, Values};
use ftcore::NodeId;
use timer::Instant;

use super::state::Phase;
use super::{TwEvent, TwNode};
use crate::msg::Msg;

/// What the join handshake keeps: how far it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Handshake {
    phase: Phase,
}

impl Handshake {
    /// Not joined; the first `Join` due at `now`.
    pub(super) fn new(now: Instant) -> Self {
        Handshake { phase: Phase::Joining { nonce: 0, next_join: now } }
    }

    /// Whether the process has joined (and may serve).
    pub(super) fn is_joined(&self) -> bool {
        self.phase == Phase::Joined
    }

    /// Whether the handshake is still under way.
    pub(super) fn is_joining(&self) -> bool {
        matches!(self.phase, Phase::Joining { .. })
    }

    /// When the next `Join` is due, while joining.
    fn next_join(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Joining { next_join, .. } => Some(*next_join),
            Phase::Joined => None,
        }
    }

    /// Joining with `nonce`, the next `Join` at `next_join`.
    fn joining(&mut self, nonce: u64, next_join: Instant) {
        self.phase = Phase::Joining { nonce, next_join };
    }

    /// Joined now; `false` when it already was.
    fn join(&mut self) -> bool {
        if self.phase == Phase::Joined {
            return false;
        }
        self.phase = Phase::Joined;
        true
    }
}

impl TwNode {
    /// Starts the handshake. A lone process (N = 1) with its state joins
    /// at once; on a fresh disk it first recovers, after its restart
    /// window, from nobody (it once joined unrecovered and never claimed:
    /// a one-node cluster never granted).
    pub(super) fn start_joining(&mut self, now: Instant) {
        if self.members.len() == 1 && self.promise.stored().recovered() {
            self.joined();
            return;
        }
        let nonce = self.fresh_nonce();
        self.handshake.joining(nonce, now);
        self.join_timeout(now);
    }

    pub(super) fn join_deadline(&self) -> Option<Instant> {
        self.handshake.next_join()
    }

    /// Sends `Join` to every peer, again every ring timeout until joined
    /// (a recovering fresh node: one recovery round per `Join`).
    pub(super) fn join_timeout(&mut self, now: Instant) {
        if self.handshake.next_join().is_none_or(|next_join| now < next_join) {
            return;
        }
        let nonce = self.fresh_nonce();
        match self.promise.recovery_round(nonce, now) {
            RoundStep::Wait { until } => {
                self.handshake.joining(nonce, until);
                return;
            }
            // Alone: nobody to answer, recovered once the window is over.
            RoundStep::Recovered { max } => {
                self.state_recovered(now, max);
                if self.members.len() == 1 {
                    self.joined();
                    return;
                }
            }
            RoundStep::NotNeeded | RoundStep::Send => {}
        }
        self.handshake.joining(nonce, now + self.cfg.ring_timeout);
        self.send_to_every_peer(Msg::Join { nonce });
    }

    pub(super) fn on_join(&mut self, _now: Instant, from: NodeId, nonce: u64) {
        self.out.send(from, Msg::JoinAck { nonce, values: self.promise.values() });
        self.readmit.insert(from);
        self.out.event(TwEvent::JoinAnswered);
    }

    pub(super) fn on_join_ack(&mut self, now: Instant, from: NodeId, nonce: u64, values: Option<Values>) {
        if !self.promise.stored().recovered() {
            match self.promise.on_hello_ack(from, nonce, values, now) {
                AckStep::Recovered { max } => self.state_recovered(now, max),
                AckStep::Pending | AckStep::Ignored => return,
            }
        }
        if self.handshake.is_joining() {
            self.joined();
        }
    }

    /// A fresh process recovered what its peers answered (`max`).
    fn state_recovered(&mut self, now: Instant, max: u64) {
        self.out.event(TwEvent::StateRecovered { max });
        // NC4: a new cluster's first Claim goes by rank.
        if let Some(at) = self.promise.first_proposal_in_new_cluster(now) {
            self.claims.first_at(at);
        }
    }

    /// The process may serve.
    pub(super) fn joined(&mut self) {
        if self.handshake.join() {
            self.out.event(TwEvent::Joined);
        }
    }

    /// A token was seen: that counts as joined (once recovered).
    pub(super) fn token_seen_joins(&mut self) {
        if self.handshake.is_joining() && self.promise.stored().recovered() {
            self.joined();
        }
    }
}
