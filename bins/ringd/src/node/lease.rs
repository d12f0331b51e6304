//! The owner's majority lease (ringd.md, Majority lease): while it has
//! token services queued, the owner sends `HolderAlive` to every configured
//! replica every heartbeat, the first before it runs one, and runs them
//! only until `t + lease·(1−ρ)`, t the send time of the latest renewal a
//! majority acked. An acker answers no census for `lease·(1+ρ)` (Busy), so
//! no token is regenerated beside an owner whose lease may be valid.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use ftcore::NodeId;
use timer::{Instant, Lease};

use super::{RdEvent, RdNode, RdRule, Role};
use crate::msg::Msg;

/// Renewals whose acks still count.
const RENEWALS: usize = 8;

/// The lease of the current visit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct LeaseState {
    nonce: u64,
    /// Recent renewals, oldest first: nonce, when it was sent, who acked
    /// it. Acks may take longer than a heartbeat: each renewal counts on
    /// its own (at most [`RENEWALS`] are remembered).
    pending: VecDeque<(u64, Instant, BTreeSet<NodeId>)>,
    /// Token services may run before this.
    pub(super) valid_until: Option<Instant>,
    /// When this visit first asked for a lease.
    first_try: Option<Instant>,
}

impl LeaseState {
    /// A new visit (or none): no lease, nothing pending.
    pub(super) fn reset(&mut self) {
        let nonce = self.nonce;
        *self = LeaseState { nonce, ..LeaseState::default() };
    }

    pub(super) fn valid(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|v| now < v)
    }

    /// Whether the owner should keep the token for its queued token
    /// services: the lease is valid, or was first asked for less than
    /// `lease` ago (else it passes the token on and tries next visit).
    pub(super) fn worth_waiting(&self, now: Instant, lease: Duration) -> bool {
        self.valid(now) || self.first_try.is_some_and(|t| now < t + lease)
    }

    /// Whether a lease is held or being asked for in this visit.
    pub(super) fn worth_waiting_any(&self) -> bool {
        self.valid_until.is_some() || self.first_try.is_some()
    }

    fn next_renewal(&self, heartbeat: Duration) -> Option<Instant> {
        self.pending.back().map(|(_, sent, _)| *sent + heartbeat)
    }
}

impl RdNode {
    /// Whether token services wait here under an owned token.
    fn wants_lease(&self) -> bool {
        self.owns_token() && (!self.token_queue.is_empty() || self.token_job.is_some())
    }

    /// Sends a renewal now (the first of a visit, or one due).
    pub(super) fn renew_lease(&mut self, now: Instant) {
        let Some(epoch) = self.held.as_ref().map(|h| h.token.epoch) else { return };
        self.lease.nonce += 1;
        let nonce = self.lease.nonce;
        let mut acks = BTreeSet::new();
        acks.insert(self.me);
        self.lease.first_try.get_or_insert(now);
        self.send_to_every_peer(Msg::HolderAlive { epoch, nonce });
        if self.lease.pending.len() == RENEWALS {
            self.lease.pending.pop_front();
        }
        self.lease.pending.push_back((nonce, now, acks));
        self.count_lease(now);
    }

    /// The lease is valid until `sent + lease·(1−ρ)` once a majority acked.
    /// A renewal whose lease has already ended gives nothing: without this,
    /// the first renewal after an expiry brought the ended lease back from
    /// an older acked renewal still remembered, told the running command
    /// to extend to a deadline in the past, and expired it again at once
    /// (one more `LeaseExpired` per renewal).
    fn count_lease(&mut self, now: Instant) {
        let majority = self.quorum();
        // The latest renewal a majority acked.
        let Some((_, sent, _)) = self.lease.pending.iter().rev().find(|(_, _, acks)| acks.len() >= majority) else {
            return;
        };
        {
            let until = Lease::new(*sent, self.cfg.lease, self.cfg.drift_ppm).holder_valid_until();
            if until <= now {
                return;
            }
            let before = self.lease.valid_until;
            self.lease.valid_until = Some(before.map_or(until, |v| v.max(until)));
            if self.lease.valid_until != before {
                self.extend_token_job();
            }
        }
    }

    pub(super) fn lease_deadline(&self) -> Option<Instant> {
        if !self.wants_lease() {
            return None;
        }
        [
            self.lease.next_renewal(self.cfg.heartbeat),
            self.lease.valid_until,
            self.lease.first_try.map(|t| t + self.cfg.lease),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub(super) fn lease_timeout(&mut self, now: Instant) {
        if !self.wants_lease() {
            return;
        }
        if self.lease.valid_until.is_some_and(|v| now >= v) {
            self.lease.valid_until = None;
            self.out.event(RdEvent::LeaseExpired);
        }
        if self.lease.first_try.is_some_and(|t| now >= t + self.cfg.lease) {
            // Waited a whole lease for a majority: the token moves on (or,
            // alone, goes on renewing).
            self.lease.first_try = None;
        }
        if self.lease.next_renewal(self.cfg.heartbeat).is_some_and(|t| now >= t) {
            self.renew_lease(now);
        }
    }

    /// Ensures a renewal is in flight before token services run.
    pub(super) fn ensure_lease(&mut self, now: Instant) {
        if self.lease.pending.is_empty() {
            self.renew_lease(now);
        }
    }

    pub(super) fn on_holder_alive(&mut self, now: Instant, from: NodeId, epoch: u64, nonce: u64) {
        if !self.promise.stored().recovered() {
            return;
        }
        let threshold = self.promise.threshold();
        let refused = epoch < threshold || self.promise.on_in_use(epoch, now).is_err();
        if refused && self.cfg.rules.on(RdRule::LowerEpochsRefused) {
            self.out.send(from, Msg::Stale { epoch: threshold });
            self.out.event(RdEvent::StaleAnswered);
            return;
        }
        // A higher epoch in use elsewhere: an own older token is no longer
        // owned (its owner is superseded).
        let older_here = self
            .held
            .as_ref()
            .is_some_and(|h| h.token.epoch < epoch && matches!(h.role, Role::Owned { .. } | Role::Unacked { .. }));
        if older_here {
            self.stop_owning(now, false);
        }
        self.abandon_census_below(now, epoch);
        self.acked_holder = Some((from, now));
        self.token_activity(now);
        self.out.send(from, Msg::HolderAliveAck { epoch, nonce });
    }

    pub(super) fn on_holder_alive_ack(&mut self, now: Instant, from: NodeId, epoch: u64, nonce: u64) {
        let owned_epoch = self.held.as_ref().filter(|_| self.owns_token()).map(|h| h.token.epoch);
        if owned_epoch != Some(epoch) {
            return;
        }
        if let Some((_, _, acks)) = self.lease.pending.iter_mut().find(|(n, _, _)| *n == nonce) {
            acks.insert(from);
        }
        self.count_lease(now);
    }
}
