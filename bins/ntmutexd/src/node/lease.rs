//! Leases on grants (reliability.md, Pauses and leases; ntmutexd.md,
//! Durability and leases): a site with local clients holding or waiting
//! renews its lease with every peer every `lease_ms/3`; it grants only
//! within `lease_ms·(1−ρ)` of a renewal a majority acked, and hands its
//! client that deadline. A site that acked a renewal refuses every other
//! proposer's regeneration for `lease_ms·(1+ρ)` (`Nack{busy}`), so no new
//! token can exist while a lease is live, whatever pauses and partitions
//! do. The arithmetic, the two halves and the acker's decision on a
//! renewal (the threshold, fresh nodes, waiters behind a holder) are
//! `lockservice::lease`; this file reads its rules from `NtRule` and owns
//! the messages.

use std::time::Duration;

use ftcore::rules::Rules;
use ftcore::NodeId;
use lockservice::lease::{LeaseRules, Promised, RenewVerdict, Renewal};
use timer::Instant;

use super::rules::NtRule;
use super::state::Timer;
use super::NtNode;
use crate::msg::Body;

/// The lease rules of a rule table, for `lockservice::lease`.
fn lease_rules(r: Rules<NtRule>) -> LeaseRules {
    LeaseRules {
        leases: r.on(NtRule::GrantsUnderLeases),
        ack_binds: r.on(NtRule::LeaseAckBinds),
        refuse_stale: r.on(NtRule::StaleRenewalsRefused),
        unrecovered_ack_none: r.on(NtRule::UnrecoveredAcksNoRenewal),
        waiters_behind_holder: r.on(NtRule::WaiterAckedBehindAHolder),
    }
}

impl NtNode {
    /// The end of this site's lease on the token it holds, if it is live.
    pub(super) fn lease_until(&self, now: Instant) -> Option<Instant> {
        let token = self.token?;
        ftcore::mutant! {
            // Grants are not leases: the lease never ends.
            if self.cfg.rules.off(NtRule::GrantsUnderLeases) {
                return Some(lockservice::lease::FOREVER);
            }
        }
        self.lease.live_until(now, token.epoch)
    }

    /// Sends a renewal if one is due (after every input), and keeps the
    /// renewal timer.
    pub(super) fn renew_lease(&mut self, now: Instant) {
        if self.cfg.rules.off(NtRule::GrantsUnderLeases) {
            return;
        }
        // An unrecovered fresh node takes no token: it has nothing to renew.
        let active = (self.locks.is_held() || self.locks.has_waiters())
            && self.join.is_running()
            && self.promise.stored().recovered();
        if self.token.is_some() {
            // The token is alive here: waiting sites' renewals may be acked.
            self.lease.saw_token(now);
        }
        // The renewal names the token's epoch, else the highest in use.
        let (epoch, holding) = self.token.map_or((self.max_epoch(), false), |t| (t.epoch, true));
        if let Some(Renewal { round, epoch, holding }) = self.lease.poll(now, active, epoch, holding, &mut self.rng) {
            self.broadcast(Body::LeaseRenew { round, epoch, holding });
            // Its own ack goes through the same rules as a peer's.
            self.on_lease_renew(now, self.me, round, epoch, holding);
        }
        match self.lease.next_due() {
            Some(at) if active => self.timers.set(Timer::Renew, at),
            _ => self.timers.cancel(Timer::Renew),
        }
    }

    /// (safety) A renewal from `from` (this site included), judged by
    /// `Acker::judge_renewal` against what this site stored or promised
    /// (its proposal included): refused with the threshold, ignored by an
    /// unrecovered fresh node, or acked (and the ack binds this site's
    /// promises).
    pub(super) fn on_lease_renew(&mut self, now: Instant, from: NodeId, round: u64, epoch: u64, holding: bool) {
        let promised = Promised { threshold: self.promise.threshold(), recovered: self.promise.stored().recovered() };
        let renewal = Renewal { round, epoch, holding };
        match self.lease.judge(now, from, renewal, promised, lease_rules(self.cfg.rules)) {
            RenewVerdict::Refuse { threshold } if from == self.me => self.on_lease_refused(now, round, threshold),
            RenewVerdict::Refuse { threshold } => self.send(from, Body::LeaseRefused { round, threshold }),
            RenewVerdict::Ignore | RenewVerdict::Unacked => {}
            RenewVerdict::Ack if from == self.me => self.on_lease_ack(now, from, round),
            RenewVerdict::Ack => self.send(from, Body::LeaseAck { round }),
        }
    }

    /// An ack of our renewal `round`: the lease may have grown; the holder
    /// is told.
    pub(super) fn on_lease_ack(&mut self, now: Instant, from: NodeId, round: u64) {
        if let Some(until) = self.lease.on_ack(from, round) {
            self.locks.renew(now, until, &mut self.out);
        }
    }

    /// A peer refused our renewal: it stored or promised `threshold`. A
    /// holder of an older token drops it (it may have been regenerated
    /// without us); a waiting site just has no lease.
    pub(super) fn on_lease_refused(&mut self, now: Instant, _round: u64, threshold: u64) {
        if self.token.is_some_and(|t| t.epoch < threshold) {
            self.lease.end();
            self.drop_token(now, "a site refused this node's lease renewal: it promised or stored a newer epoch");
        }
    }

    /// The token is gone from under the local holder: `LockLost`, and the
    /// hold lasts until its lease's end (its client may run until then);
    /// without leases (a mutation test's stage) it ends at once.
    pub(super) fn lose_lock(&mut self, now: Instant, why: &str) {
        ftcore::mutant! {
            if self.cfg.rules.off(NtRule::GrantsUnderLeases) {
                self.locks.lose_at_once(now, why, &mut self.out);
                return;
            }
        }
        self.locks.lose(now, why, &mut self.out);
    }

    /// (safety) Whether an ack this site gave still forbids promising
    /// `proposer`'s regeneration, and for how long.
    pub(super) fn lease_busy_for(&self, now: Instant, proposer: NodeId) -> Option<Duration> {
        self.lease.busy_under(lease_rules(self.cfg.rules), now, proposer)
    }
}
