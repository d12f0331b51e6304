//! The coordinator's FIFO access service (electd.md, "Coordinator: FIFO
//! access service"): one holder at a time in queue order, each grant a
//! lease of `grant_ttl` renewed by its holder, fences (term, counter)
//! strictly increasing, the failover gap after taking office, adoption of
//! an unexpired grant from an earlier term.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ftcore::NodeId;
use lockservice::fence;
use timer::Instant;

use super::state::{not_coordinator, Role, Timer};
use super::{ElConfig, ElEvent, ElNode, ElRule};
use crate::msg::{Denial, Msg};

/// A request waiting in the coordinator's queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QueueEntry {
    /// The consumer.
    pub node: NodeId,
    /// Its request number.
    pub req: u64,
    /// The order: (term, position) of its first `Queued` answer.
    pub key: (u64, u64),
    /// Arrival here (ties).
    pub arrival: u64,
    /// When it arrived.
    pub since: Instant,
}

/// The grant the coordinator honours.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Grant {
    pub(super) node: NodeId,
    pub(super) fence: u128,
    /// Honoured until the latest renewal's receipt + `grant_ttl·(1+ρ)`.
    honour_until: Instant,
    /// Renewals are acked only from here (an adopted grant: once the
    /// predecessor's quorum lease has lapsed).
    renew_from: Instant,
}

/// The coordinator's state in its term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Office {
    pub(super) term: u64,
    pub(super) elected_at: Instant,
    pub(super) took_office: Option<Instant>,
    /// No grant before this (the failover gap).
    pub(super) gap_until: Instant,
    hb_seq: u64,
    /// Heartbeats still within a lease: send time and who acked.
    hb: BTreeMap<u64, (Instant, BTreeSet<NodeId>)>,
    /// h: the send time of the latest heartbeat acked by a majority.
    quorum_at: Option<Instant>,
    counter: u64,
    pub(super) queue: Vec<QueueEntry>,
    next_pos: u64,
    arrivals: u64,
    pub(super) holder: Option<Grant>,
}

impl Office {
    pub(super) fn new(term: u64, now: Instant, first_counter: u64) -> Self {
        Office {
            term,
            elected_at: now,
            took_office: None,
            gap_until: now,
            hb_seq: 0,
            hb: BTreeMap::new(),
            quorum_at: None,
            counter: first_counter,
            queue: Vec::new(),
            next_pos: 0,
            arrivals: 0,
            holder: None,
        }
    }

    /// Records a heartbeat sent now (acked by `me`); forgets those older
    /// than a lease (their acks no longer extend anything).
    pub(super) fn heartbeat_sent(&mut self, now: Instant, me: NodeId, lease: Duration) -> u64 {
        self.hb_seq += 1;
        self.hb.retain(|_, (at, _)| now.saturating_since(*at) <= lease);
        self.hb.insert(self.hb_seq, (now, BTreeSet::from([me])));
        self.hb_seq
    }

    /// An ack of heartbeat `seq`: whether it now has a majority.
    pub(super) fn heartbeat_acked(&mut self, from: NodeId, seq: u64, majority: usize) -> bool {
        match self.hb.get_mut(&seq) {
            Some((_, acks)) => {
                acks.insert(from);
                acks.len() >= majority
            }
            None => false,
        }
    }

    /// The quorum lease now runs from heartbeat `seq`'s send time.
    pub(super) fn quorum_from(&mut self, seq: u64) {
        if let Some((at, _)) = self.hb.get(&seq) {
            self.quorum_at = Some(self.quorum_at.map_or(*at, |h| h.max(*at)));
        }
    }

    /// Under the quorum lease: `now < h + lease·(1−ρ)`.
    pub(super) fn quorum_valid(&self, cfg: &ElConfig, now: Instant) -> bool {
        self.quorum_at.is_some_and(|h| cfg.lease_at(h, cfg.lease).holder_valid(now))
    }

    /// When the quorum lease lapsed (or lapses).
    pub(super) fn quorum_lapsed_at(&self, cfg: &ElConfig) -> Option<Instant> {
        self.quorum_at.map(|h| cfg.lease_at(h, cfg.lease).holder_valid_until())
    }

    /// A request `req` of `from` in `term` (this office may grant):
    /// re-registers a grant it holds (`holding`), or queues it (at its
    /// place of an earlier term, `queued`).
    #[allow(clippy::too_many_arguments)]
    fn request(
        &mut self,
        cfg: &ElConfig,
        now: Instant,
        from: NodeId,
        req: u64,
        queued: Option<(u64, u64)>,
        holding: Option<u128>,
        term: u64,
    ) -> Answer {
        let honour = cfg.stretched(cfg.grant_ttl);
        if let Some(f) = holding {
            // A consumer holding an unexpired grant of an earlier term
            // re-registers it: adopted as holder, renewed only once the
            // predecessor's quorum lease has lapsed.
            let same = self.holder.as_ref().is_some_and(|g| g.node == from && g.fence == f);
            if same || (self.holder.is_none() && lockservice::fence_parts(f).0 < term) {
                let adopt_from = self.took_office.map(|t| t + cfg.stretched(cfg.lease));
                let renew_from =
                    if cfg.rules.on(ElRule::AdoptedRenewalWaits) { adopt_from.unwrap_or(now) } else { now };
                self.holder = Some(Grant { node: from, fence: f, honour_until: now + honour, renew_from });
                return Answer::Adopted { fence: f, until: now + honour };
            }
            return Answer::RenewRefused(f);
        }
        if let Some(e) = self.queue.iter().find(|e| e.node == from && e.req == req) {
            return Answer::Queued { pos: e.key.1, len: None };
        }
        if self.holder.as_ref().is_some_and(|g| g.node == from) && queued.is_none() {
            // The holder asks again before its release arrived (FIFO link:
            // it cannot): treat as a new request all the same.
        }
        if self.queue.len() >= cfg.coordinator_max_queue {
            return Answer::Full;
        }
        let pos = self.next_pos;
        self.next_pos += 1;
        self.arrivals += 1;
        let key = queued.unwrap_or((term, pos));
        self.queue.push(QueueEntry { node: from, req, key, arrival: self.arrivals, since: now });
        // FIFO across failover: by (term, position) of the first Queued
        // answer, then by arrival; never by host clocks.
        self.queue.sort_by_key(|e| (e.key, e.arrival));
        Answer::Queued { pos, len: Some(self.queue.len()) }
    }

    /// Grants the head of the queue in `term` if nothing is held and it
    /// may grant (`may_grant`), past the failover gap.
    fn grant_next(&mut self, cfg: &ElConfig, now: Instant, term: u64, may_grant: bool) -> NextGrant {
        if !may_grant || self.holder.is_some() || self.queue.is_empty() {
            return NextGrant::Nothing;
        }
        if now < self.gap_until {
            return NextGrant::AfterGap(self.gap_until);
        }
        let next = self.counter.checked_add(1);
        ftcore::mutant! {
            // The counter wraps past u64::MAX.
            let next = if next.is_none() && cfg.rules.off(ElRule::CounterNeverWraps) { Some(0) } else { next };
        }
        let Some(counter) = next else {
            return NextGrant::Exhausted;
        };
        ftcore::invariant!(
            cfg.rules,
            counter > self.counter && self.term == term,
            "grant counter {counter} after {} in an office of term {} (term {term})",
            self.counter,
            self.term
        );
        self.counter = counter;
        let e = self.queue.remove(0);
        let f = fence(term, counter);
        let honour_until = now + cfg.stretched(cfg.grant_ttl);
        self.holder = Some(Grant { node: e.node, fence: f, honour_until, renew_from: now });
        NextGrant::Granted { entry: e, fence: f, until: honour_until, len: self.queue.len() }
    }

    /// Renewal of fence `f` by `from` in `term` (`may_grant`: under the
    /// quorum lease).
    fn renew(&mut self, cfg: &ElConfig, now: Instant, from: NodeId, f: u128, term: u64, may_grant: bool) -> Renewal {
        let honour = cfg.stretched(cfg.grant_ttl);
        match self.holder.as_mut() {
            Some(g) if g.node == from && g.fence == f => {
                if may_grant && now >= g.renew_from {
                    ftcore::invariant!(
                        cfg.rules,
                        lockservice::fence_parts(f).0 <= term,
                        "a grant of a higher term than {term} renewed: {f:#x}"
                    );
                    g.honour_until = now + honour;
                    Renewal::Acked { until: now + honour }
                } else {
                    Renewal::NotYet
                }
            }
            _ => Renewal::Refused,
        }
    }

    /// `from` released fence `f`: whether it held it (now freed).
    fn release(&mut self, from: NodeId, f: u128) -> bool {
        if self.holder.as_ref().is_some_and(|g| g.node == from && g.fence == f) {
            self.holder = None;
            return true;
        }
        false
    }

    /// The holder's honour time may be over: it is freed (`Ok`), or
    /// honoured until (`Err`) a later instant; `None`: nothing held.
    fn holder_expiry(&mut self, now: Instant) -> Option<Result<(), Instant>> {
        match &self.holder {
            Some(g) if now >= g.honour_until => {
                self.holder = None;
                Some(Ok(()))
            }
            Some(g) => Some(Err(g.honour_until)),
            None => None,
        }
    }
}

/// The answer to a request.
enum Answer {
    /// A held grant re-registered: adopted as holder, honoured until
    /// `until`.
    Adopted { fence: u128, until: Instant },
    /// A held grant not adopted.
    RenewRefused(u128),
    /// Queued at `pos`; `len`: the queue's new length if it was added.
    Queued { pos: u64, len: Option<usize> },
    /// The queue is full.
    Full,
}

/// What granting the queue's head gave.
enum NextGrant {
    /// Nothing to grant, or it may not.
    Nothing,
    /// Not before the failover gap ends.
    AfterGap(Instant),
    /// The counter would pass u64::MAX.
    Exhausted,
    /// `entry` granted `fence`, honoured until `until`; `len` left queued.
    Granted { entry: QueueEntry, fence: u128, until: Instant, len: usize },
}

/// What a renewal gets.
enum Renewal {
    /// Acked: honoured until `until`.
    Acked { until: Instant },
    /// The holder's, but not renewed now (no quorum lease, or an adopted
    /// grant before its predecessor's lease lapsed): no answer.
    NotYet,
    /// Not the holder's.
    Refused,
}

impl ElNode {
    /// A consumer's request (this process's own ones come through the
    /// loopback).
    pub(super) fn on_request(
        &mut self,
        now: Instant,
        from: NodeId,
        req: u64,
        queued: Option<(u64, u64)>,
        holding: Option<u128>,
    ) {
        let term = self.term;
        let may_grant = self.may_grant(now);
        let known = self.coordinator;
        let Role::Coordinator(o) = &mut self.role else {
            return self.deny(from, req, not_coordinator(known));
        };
        if !may_grant {
            return self.deny(from, req, Denial::NoQuorum);
        }
        match o.request(&self.cfg, now, from, req, queued, holding, term) {
            Answer::Adopted { fence: f, until } => {
                self.timers.set(Timer::HolderExpiry, until);
                self.send(from, Msg::Granted { term, req, fence: f });
            }
            Answer::RenewRefused(f) => self.send(from, Msg::RenewRefused { term, fence: f }),
            Answer::Queued { pos, len } => {
                self.send(from, Msg::Queued { term, req, pos });
                if let Some(len) = len {
                    self.out.event(ElEvent::QueueLength(len));
                }
            }
            Answer::Full => self.deny(from, req, Denial::QueueFull),
        }
    }

    fn deny(&mut self, to: NodeId, req: u64, why: Denial) {
        let term = self.term;
        if req != 0 {
            // Re-registrations (request 0) are sent again on every
            // heartbeat until office: not counted as client denials.
            self.out.event(ElEvent::Denied { reason: why.label() });
        }
        self.send(to, Msg::Denied { term, req, why });
    }

    /// Grants the head of the queue if nothing is held, in office, under
    /// the quorum lease and past the failover gap.
    pub(super) fn grant_next(&mut self, now: Instant) {
        let may_grant = self.may_grant(now);
        let term = self.term;
        let Role::Coordinator(o) = &mut self.role else { return };
        match o.grant_next(&self.cfg, now, term, may_grant) {
            NextGrant::Nothing => {}
            NextGrant::AfterGap(at) => self.timers.set(Timer::GapEnds, at),
            NextGrant::Exhausted => {
                // (safety) The counter would pass u64::MAX: grant nothing
                // more and start term + 1 (no pre-vote: this process leads).
                let next = term.saturating_add(1);
                self.step_down(now, "grant counter exhausted");
                self.start_term(now, next);
            }
            NextGrant::Granted { entry: e, fence: f, until, len } => {
                self.timers.set(Timer::HolderExpiry, until);
                self.send(e.node, Msg::Granted { term, req: e.req, fence: f });
                self.out.event(ElEvent::Granted { fence: f, waited: now.saturating_since(e.since) });
                self.out.event(ElEvent::QueueLength(len));
            }
        }
    }

    /// (safety) A renewal is acked only under the quorum lease, by the
    /// coordinator honouring that grant.
    pub(super) fn on_renew(&mut self, now: Instant, from: NodeId, f: u128, seq: u64) {
        let may_grant = self.may_grant(now);
        let term = self.term;
        let Role::Coordinator(o) = &mut self.role else {
            return self.send(from, Msg::RenewRefused { term, fence: f });
        };
        match o.renew(&self.cfg, now, from, f, term, may_grant) {
            Renewal::Acked { until } => {
                self.timers.set(Timer::HolderExpiry, until);
                self.send(from, Msg::RenewAck { term, fence: f, seq });
            }
            Renewal::NotYet => {}
            Renewal::Refused => self.send(from, Msg::RenewRefused { term, fence: f }),
        }
    }

    pub(super) fn on_release(&mut self, now: Instant, from: NodeId, f: u128) {
        let Role::Coordinator(o) = &mut self.role else { return };
        if o.release(from, f) {
            self.timers.cancel(Timer::HolderExpiry);
            self.grant_next(now);
        }
    }

    /// The holder's renewals stopped: the resource is free once its grant
    /// is no longer honoured.
    pub(super) fn on_holder_expiry(&mut self, now: Instant) {
        let Role::Coordinator(o) = &mut self.role else { return };
        match o.holder_expiry(now) {
            Some(Ok(())) => {
                self.out.event(ElEvent::LeaseExpired);
                self.grant_next(now);
            }
            Some(Err(at)) => self.timers.set(Timer::HolderExpiry, at),
            None => {}
        }
    }
}
