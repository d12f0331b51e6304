//! The coordinator's FIFO access service (electd.md, "Coordinator: FIFO
//! access service"): one holder at a time in queue order, each grant a
//! lease of `grant_ttl` renewed by its holder, fences (term, counter)
//! strictly increasing, the failover gap after taking office, adoption of
//! an unexpired grant from an earlier term.

use lockservice::fence;

use super::*;

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
        let max = self.cfg.coordinator_max_queue;
        let adopt_from = |o: &Office| o.took_office.map(|t| t + self.cfg.stretched(self.cfg.lease));
        let honour = self.cfg.stretched(self.cfg.grant_ttl);
        let Role::Coordinator(o) = &mut self.role else {
            return self.deny(from, req, not_coordinator(known));
        };
        if !may_grant {
            return self.deny(from, req, Denial::NoQuorum);
        }
        if let Some(f) = holding {
            // A consumer holding an unexpired grant of an earlier term
            // re-registers it: adopted as holder, renewed only once the
            // predecessor's quorum lease has lapsed.
            let same = o.holder.as_ref().is_some_and(|g| g.node == from && g.fence == f);
            if same || (o.holder.is_none() && lockservice::fence_parts(f).0 < term) {
                let renew_from =
                    if self.cfg.rules.on(ElRule::AdoptedRenewalWaits) { adopt_from(o).unwrap_or(now) } else { now };
                o.holder = Some(Grant { node: from, fence: f, honour_until: now + honour, renew_from });
                self.timers.set(Timer::HolderExpiry, now + honour);
                self.send(from, Msg::Granted { term, req, fence: f });
            } else {
                self.send(from, Msg::RenewRefused { term, fence: f });
            }
            return;
        }
        if let Some(e) = o.queue.iter().find(|e| e.node == from && e.req == req) {
            let pos = e.key.1;
            self.send(from, Msg::Queued { term, req, pos });
            return;
        }
        if o.holder.as_ref().is_some_and(|g| g.node == from) && queued.is_none() {
            // The holder asks again before its release arrived (FIFO link:
            // it cannot): treat as a new request all the same.
        }
        if o.queue.len() >= max {
            return self.deny(from, req, Denial::QueueFull);
        }
        let pos = o.next_pos;
        o.next_pos += 1;
        o.arrivals += 1;
        let key = queued.unwrap_or((term, pos));
        o.queue.push(QueueEntry { node: from, req, key, arrival: o.arrivals, since: now });
        // FIFO across failover: by (term, position) of the first Queued
        // answer, then by arrival; never by host clocks.
        o.queue.sort_by_key(|e| (e.key, e.arrival));
        let len = o.queue.len();
        self.send(from, Msg::Queued { term, req, pos });
        self.out.event(ElEvent::QueueLength(len));
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
        let honour = self.cfg.stretched(self.cfg.grant_ttl);
        let Role::Coordinator(o) = &mut self.role else { return };
        if !may_grant || o.holder.is_some() || o.queue.is_empty() {
            return;
        }
        if now < o.gap_until {
            self.timers.set(Timer::GapEnds, o.gap_until);
            return;
        }
        let next = o.counter.checked_add(1);
        ftcore::mutant! {
            // The counter wraps past u64::MAX.
            let next = if next.is_none() && self.cfg.rules.off(ElRule::CounterNeverWraps) { Some(0) } else { next };
        }
        let Some(counter) = next else {
            // (safety) The counter would pass u64::MAX: grant nothing more
            // and start term + 1 (no pre-vote: this process leads).
            let next = term.saturating_add(1);
            self.step_down(now, "grant counter exhausted");
            self.start_term(now, next);
            return;
        };
        ftcore::invariant!(
            self.cfg.rules,
            counter > o.counter && o.term == term,
            "grant counter {counter} after {} in an office of term {} (term {term})",
            o.counter,
            o.term
        );
        o.counter = counter;
        let e = o.queue.remove(0);
        let f = fence(term, counter);
        o.holder = Some(Grant { node: e.node, fence: f, honour_until: now + honour, renew_from: now });
        let len = o.queue.len();
        self.timers.set(Timer::HolderExpiry, now + honour);
        self.send(e.node, Msg::Granted { term, req: e.req, fence: f });
        self.out.event(ElEvent::Granted { fence: f, waited: now.saturating_since(e.since) });
        self.out.event(ElEvent::QueueLength(len));
    }

    /// (safety) A renewal is acked only under the quorum lease, by the
    /// coordinator honouring that grant.
    pub(super) fn on_renew(&mut self, now: Instant, from: NodeId, f: u128, seq: u64) {
        let may_grant = self.may_grant(now);
        let term = self.term;
        let honour = self.cfg.stretched(self.cfg.grant_ttl);
        let Role::Coordinator(o) = &mut self.role else {
            return self.send(from, Msg::RenewRefused { term, fence: f });
        };
        match o.holder.as_mut() {
            Some(g) if g.node == from && g.fence == f => {
                if may_grant && now >= g.renew_from {
                    ftcore::invariant!(
                        self.cfg.rules,
                        lockservice::fence_parts(f).0 <= term,
                        "a grant of a higher term than {term} renewed: {f:#x}"
                    );
                    g.honour_until = now + honour;
                    self.timers.set(Timer::HolderExpiry, now + honour);
                    self.send(from, Msg::RenewAck { term, fence: f, seq });
                }
            }
            _ => self.send(from, Msg::RenewRefused { term, fence: f }),
        }
    }

    pub(super) fn on_release(&mut self, now: Instant, from: NodeId, f: u128) {
        let Role::Coordinator(o) = &mut self.role else { return };
        if o.holder.as_ref().is_some_and(|g| g.node == from && g.fence == f) {
            o.holder = None;
            self.timers.cancel(Timer::HolderExpiry);
            self.grant_next(now);
        }
    }

    /// The holder's renewals stopped: the resource is free once its grant
    /// is no longer honoured.
    pub(super) fn on_holder_expiry(&mut self, now: Instant) {
        let Role::Coordinator(o) = &mut self.role else { return };
        match &o.holder {
            Some(g) if now >= g.honour_until => {
                o.holder = None;
                self.out.event(ElEvent::LeaseExpired);
                self.grant_next(now);
            }
            Some(g) => {
                let at = g.honour_until;
                self.timers.set(Timer::HolderExpiry, at);
            }
            None => {}
        }
    }
}
