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

/// The lease: the owner's, of the current visit, and the grantor's (the
/// last HolderAlive acked here).
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
    /// The last HolderAlive acked here: from whom and when (kept across
    /// visits).
    acked_holder: Option<(NodeId, Instant)>,
}

impl LeaseState {
    /// A new visit (or none): no lease, nothing pending.
    pub(super) fn reset(&mut self) {
        let (nonce, acked_holder) = (self.nonce, self.acked_holder);
        *self = LeaseState { nonce, acked_holder, ..LeaseState::default() };
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

    /// A renewal by `me` sent at `now`: its nonce.
    fn renewal(&mut self, me: NodeId, now: Instant) -> u64 {
        self.nonce += 1;
        let nonce = self.nonce;
        let mut acks = BTreeSet::new();
        acks.insert(me);
        self.first_try.get_or_insert(now);
        if self.pending.len() == RENEWALS {
            self.pending.pop_front();
        }
        self.pending.push_back((nonce, now, acks));
        nonce
    }

    /// Whether a renewal is in flight.
    fn renewing(&self) -> bool {
        !self.pending.is_empty()
    }

    /// `from` acked renewal `nonce`.
    fn acked_by(&mut self, nonce: u64, from: NodeId) {
        if let Some((_, _, acks)) = self.pending.iter_mut().find(|(n, _, _)| *n == nonce) {
            acks.insert(from);
        }
    }

    /// The lease is valid until `sent + lease·(1−ρ)` once `quorum` acked.
    /// A renewal whose lease has already ended gives nothing: without this,
    /// the first renewal after an expiry brought the ended lease back from
    /// an older acked renewal still remembered, told the running command
    /// to extend to a deadline in the past, and expired it again at once
    /// (one more `LeaseExpired` per renewal). Whether the lease moved.
    fn count(&mut self, now: Instant, quorum: usize, lease: Duration, drift_ppm: u32) -> bool {
        // The latest renewal a quorum acked.
        let Some((_, sent, _)) = self.pending.iter().rev().find(|(_, _, acks)| acks.len() >= quorum) else {
            return false;
        };
        let until = Lease::new(*sent, lease, drift_ppm).holder_valid_until();
        if until <= now {
            return false;
        }
        let before = self.valid_until;
        self.valid_until = Some(before.map_or(until, |v| v.max(until)));
        self.valid_until != before
    }

    /// When the owner next acts on its lease: a renewal due, the lease's
    /// end, or a whole `lease` waited for a first majority.
    fn deadline(&self, heartbeat: Duration, lease: Duration) -> Option<Instant> {
        [self.next_renewal(heartbeat), self.valid_until, self.first_try.map(|t| t + lease)].into_iter().flatten().min()
    }

    /// The owner's lease at `now`: whether it just expired (it is gone),
    /// and whether a renewal is due. A whole `lease` waited for a majority
    /// ends this visit's try.
    fn timeout(&mut self, now: Instant, heartbeat: Duration, lease: Duration) -> (bool, bool) {
        let expired = self.valid_until.is_some_and(|v| now >= v);
        if expired {
            self.valid_until = None;
        }
        if self.first_try.is_some_and(|t| now >= t + lease) {
            // Waited a whole lease for a majority: the token moves on (or,
            // alone, goes on renewing).
            self.first_try = None;
        }
        (expired, self.next_renewal(heartbeat).is_some_and(|t| now >= t))
    }

    /// A HolderAlive from `from` acked at `now`.
    fn acked_holder(&mut self, from: NodeId, now: Instant) {
        self.acked_holder = Some((from, now));
    }

    /// How long the HolderAlive acked here still bars a census by `from`
    /// (`lease·(1+ρ)` after the ack; not the holder's own).
    pub(super) fn grantor_busy_for(
        &self,
        now: Instant,
        from: NodeId,
        lease: Duration,
        drift_ppm: u32,
    ) -> Option<Duration> {
        self.acked_holder.and_then(|(h, at)| {
            let until = Lease::new(at, lease, drift_ppm).grantor_honours_until();
            (h != from && now < until).then(|| until.saturating_since(now))
        })
    }
}

impl RdNode {
    /// Whether token services wait here under an owned token.
    fn wants_lease(&self) -> bool {
        self.owns_token() && (self.services.has_queued() || self.services.token_job_runs())
    }

    /// Sends a renewal now (the first of a visit, or one due).
    pub(super) fn renew_lease(&mut self, now: Instant) {
        let Some(epoch) = self.held.as_ref().map(|h| h.token.epoch) else { return };
        let nonce = self.lease.renewal(self.me, now);
        self.send_to_every_peer(Msg::HolderAlive { epoch, nonce });
        self.count_lease(now);
    }

    /// Counts the acks (`LeaseState::count`); a lease that moved extends
    /// the running token service.
    fn count_lease(&mut self, now: Instant) {
        let quorum = self.quorum();
        if self.lease.count(now, quorum, self.cfg.lease, self.cfg.drift_ppm) {
            self.extend_token_job();
        }
    }

    pub(super) fn lease_deadline(&self) -> Option<Instant> {
        if !self.wants_lease() {
            return None;
        }
        self.lease.deadline(self.cfg.heartbeat, self.cfg.lease)
    }

    pub(super) fn lease_timeout(&mut self, now: Instant) {
        if !self.wants_lease() {
            return;
        }
        let (expired, renew) = self.lease.timeout(now, self.cfg.heartbeat, self.cfg.lease);
        if expired {
            self.out.event(RdEvent::LeaseExpired);
        }
        if renew {
            self.renew_lease(now);
        }
    }

    /// Ensures a renewal is in flight before token services run.
    pub(super) fn ensure_lease(&mut self, now: Instant) {
        if !self.lease.renewing() {
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
        self.lease.acked_holder(from, now);
        self.token_activity(now);
        self.out.send(from, Msg::HolderAliveAck { epoch, nonce });
    }

    pub(super) fn on_holder_alive_ack(&mut self, now: Instant, from: NodeId, epoch: u64, nonce: u64) {
        let owned_epoch = self.held.as_ref().filter(|_| self.owns_token()).map(|h| h.token.epoch);
        if owned_epoch != Some(epoch) {
            return;
        }
        self.lease.acked_by(nonce, from);
        self.count_lease(now);
    }
}
