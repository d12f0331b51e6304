//! Leases on grants (reliability.md, Pauses and leases; tokenwatchd.md,
//! Additions for users): a process with local clients holding or waiting
//! sends `LeaseRenew{round, epoch, tpc, holding}` straight to every peer
//! every `lease_ms/3` (at once when it has no live lease on the epoch it
//! holds or waits for); it grants only within `lease_ms·(1−ρ)` of a renewal
//! a majority acked, and hands its client that deadline, cut at the end of
//! the visit (`max_hold`, which ftctl enforces through it). A process that
//! acked a renewal refuses every other claimant for `lease_ms·(1+ρ)`
//! (`Busy`), so no new token can exist while a lease is live, whatever
//! pauses, partitions and late datagrams do; a renewal of an epoch below
//! the receiver's threshold is refused with it, and a holder told so drops
//! its token. The arithmetic, the two halves and the acker's decision on
//! a renewal (the threshold, fresh nodes, waiters behind a holder) are
//! `lockservice::lease`; this file reads its rules from `TwRule`, and adds
//! the sanity check of a renewal's epoch, the `Join` to a newer holder and
//! the visit's end.

use std::time::Duration;

use ::durable::promise;
use ftcore::NodeId;
use lockservice::lease::{LeaseRules, Promised, RenewVerdict, Renewal, FOREVER};
use timer::Instant;

use super::{TwConfig, TwEvent, TwNode, TwRule};
use crate::msg::Msg;

/// The lease rules of `cfg`'s table, for `lockservice::lease`.
fn lease_rules(cfg: &TwConfig) -> LeaseRules {
    let rules = cfg.rules;
    LeaseRules {
        leases: rules.on(TwRule::GrantsUnderLeases),
        ack_binds: rules.on(TwRule::LeaseAckBindsTheAcker),
        refuse_stale: rules.on(TwRule::StaleRenewalsRefused),
        unrecovered_ack_none: rules.on(TwRule::UnrecoveredNodesAckNoRenewal),
        waiters_behind_holder: rules.on(TwRule::WaitersAckedOnlyBehindAHolder),
    }
}

impl TwNode {
    /// The deadline a grant made now carries, if this process may grant:
    /// its live lease on the token it holds, cut at the visit's end.
    pub(super) fn grant_lease(&self, now: Instant) -> Option<Instant> {
        let v = self.visit.as_ref()?;
        let rules = self.cfg.rules;
        let lease =
            if rules.off(TwRule::GrantsUnderLeases) { FOREVER } else { self.leases.live_until(now, v.epoch)? };
        if rules.off(TwRule::ClientLeasesEndWithTheVisit) {
            return Some(lease);
        }
        // (safety) The token moves on at the visit's end without waiting
        // for the client: the client's lease must end by then.
        Some(lease.min(v.since + self.cfg.max_hold))
    }

    /// Whether this process keeps a lease: a local client holds or waits,
    /// and it has joined.
    fn lease_active(&self) -> bool {
        self.cfg.rules.on(TwRule::GrantsUnderLeases)
            && (self.locks.is_held() || self.locks.has_waiters())
            && self.handshake.is_joined()
    }

    /// Sends a renewal if one is due (after every input): the token's
    /// epoch while holding, else the highest epoch accepted here. Returns
    /// whether this process's own ack extended the lease.
    pub(super) fn renew_lease(&mut self, now: Instant) -> bool {
        if self.cfg.rules.off(TwRule::GrantsUnderLeases) {
            return false;
        }
        let active = self.lease_active();
        let holding = self.visit.is_some();
        let epoch = self.visit.as_ref().map_or(self.epoch(), |v| v.epoch);
        let Some(Renewal { round, epoch, holding }) = self.leases.poll(now, active, epoch, holding, &mut self.rng)
        else {
            return false;
        };
        // A renewal's (epoch, tpc) above a hand-off confirms it at its
        // sender, so only a count this process certainly had: after a
        // restart with a reserve, below its last stored block.
        let tpc = match self.unsure_from {
            Some(u) if self.cfg.rules.on(TwRule::RenewBelowTheUnsureBlock) => u.saturating_sub(1),
            _ => self.tpc,
        };
        self.send_to_every_peer(Msg::LeaseRenew { round, epoch, tpc, holding });
        // Its own ack goes through the same rules as a peer's.
        self.on_lease_renew(now, self.me, round, epoch, holding)
    }

    /// When the next renewal is due (or a holder's backoff ends).
    pub(super) fn lease_deadline(&self) -> Option<Instant> {
        if self.lease_active() {
            self.leases.next_due()
        } else {
            None
        }
    }

    /// (safety) A renewal from `from` (this process included), judged by
    /// `Acker::judge_renewal` against what this process stored or promised
    /// (its own proposal included): refused with the threshold, ignored by
    /// an unrecovered fresh node, or acked (and the ack binds this
    /// process's promises). An insane epoch is refused first. Returns
    /// whether an own renewal's ack extended the lease.
    pub(super) fn on_lease_renew(&mut self, now: Instant, from: NodeId, round: u64, epoch: u64, holding: bool) -> bool {
        if !promise::is_sane(epoch) {
            self.out.event(TwEvent::Refused { from, reason: "epoch" });
            return false;
        }
        let promised = Promised { threshold: self.promise.threshold(), recovered: self.promise.stored().recovered() };
        let renewal = Renewal { round, epoch, holding };
        let verdict = self.leases.judge(now, from, renewal, promised, lease_rules(&self.cfg));
        // The acker touches only its own windows (no output, not the nonce
        // counter), so the Join goes out where it always did: after the
        // threshold and recovery checks, before the ack.
        if verdict.judged() && from != self.me && holding && epoch > self.epoch() && self.visit.is_none() {
            // The sender holds a token newer than any accepted here: this
            // process may have been bypassed (a bypassed process sees no
            // more tokens). It joins the holder, whose answer re-admits it
            // with the next token it forwards, as a refused Claim would:
            // its own Claim may wait long, since acking live holders'
            // renewals keeps it busy.
            let nonce = self.fresh_nonce();
            self.out.send(from, Msg::Join { nonce });
        }
        match verdict {
            RenewVerdict::Refuse { threshold } if from == self.me => {
                self.on_lease_refused(now, from, round, threshold);
                false
            }
            RenewVerdict::Refuse { threshold } => {
                self.out.send(from, Msg::LeaseRefused { round, threshold });
                false
            }
            RenewVerdict::Ignore | RenewVerdict::Unacked => false,
            RenewVerdict::Ack if from == self.me => self.on_lease_ack(now, from, round),
            RenewVerdict::Ack => {
                self.out.send(from, Msg::LeaseAck { round });
                false
            }
        }
    }

    /// An ack of our renewal `round`: the lease may have grown, and the
    /// holder is told (`Renewed`, its deadline cut at the visit's end).
    /// Returns whether the lease grew.
    pub(super) fn on_lease_ack(&mut self, now: Instant, from: NodeId, round: u64) -> bool {
        if self.leases.on_ack(from, round).is_none() {
            return false;
        }
        if let Some(until) = self.grant_lease(now) {
            self.locks.renew(now, until, &mut self.out);
        }
        true
    }

    /// A peer refused our renewal: it stored or promised `threshold`. A
    /// holder of an older token drops it (a majority may have moved to a
    /// newer epoch without us): its client gets `LockLost`, nothing more
    /// is granted, and a Claim above `threshold` may replace it. A waiting
    /// process just has no lease.
    pub(super) fn on_lease_refused(&mut self, now: Instant, from: NodeId, _round: u64, threshold: u64) {
        if !promise::is_sane(threshold) {
            self.out.event(TwEvent::Refused { from, reason: "threshold" });
            return;
        }
        if self.visit.as_ref().is_none_or(|v| v.epoch >= threshold) {
            return;
        }
        self.leases.end();
        self.locks.lose(now, "the token was superseded by a newer epoch (a lease renewal was refused)", &mut self.out);
        self.visit = None;
        self.out.event(TwEvent::HasToken(false));
        self.promise.raise_floor(threshold);
        self.out.event(TwEvent::Superseded);
    }

    /// (safety) Whether an ack this process gave still forbids adopting
    /// `claimant`'s Claim (or proposing its own), and for how long.
    pub(super) fn lease_busy_for(&self, now: Instant, claimant: NodeId) -> Option<Duration> {
        self.leases.busy_under(lease_rules(&self.cfg), now, claimant)
    }
}
