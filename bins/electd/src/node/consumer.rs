//! A process's local clients (electd.md, "Consumer", with the
//! **(deviation)** refinements): one request at a time to the coordinator
//! for the local queue; `request_timeout` bounds the immediate answer (not
//! the grant); `not_coordinator` retries at the named id, `queue_full`
//! backs off, silence starts an election; pending requests are re-sent to
//! a new coordinator with the (term, pos) of their `Queued` answer. The
//! holder side of a grant: a renewal at once, the client granted only when
//! it is acked, expiry at the latest acked renewal's send time +
//! `grant_ttl·(1−ρ)`.

use super::*;

/// A request sent to the coordinator and not yet granted.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Pending {
    req: u64,
    to: Option<NodeId>,
    answered: bool,
    /// (term, pos) of the first `Queued` answer.
    key: Option<(u64, u64)>,
    retried_named: bool,
}

/// A grant this process holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct HeldGrant {
    fence: u128,
    /// The coordinator renewals go to.
    to: NodeId,
    /// Whether a renewal was acked (the local client is granted then).
    confirmed: bool,
    /// Where a re-registration with a new coordinator stands.
    adoption: Adoption,
    renew_seq: u64,
    /// Renewals not yet acked: their send times.
    sent: BTreeMap<u64, Instant>,
    /// The lease ends here (latest acked renewal's send time + ttl·(1−ρ)).
    pub(super) expiry: Instant,
    /// (term, pos) of the request's first `Queued` answer (its place, if
    /// the grant is given back unconfirmed).
    key: Option<(u64, u64)>,
}

/// A held grant's standing with the coordinator it renews to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Adoption {
    /// It granted or acked this grant: renewals every `grant_ttl/3`.
    Known,
    /// Re-registered, not echoed yet: the re-registration is sent again
    /// instead of renewals (a renewal it does not know would be refused
    /// and the grant lost), on each of its heartbeats and renewal ticks.
    /// When it was last sent.
    Asked(Instant),
    /// Adopted (echoed), no renewal acked yet: it acks none before
    /// `lease·(1+ρ)` after taking office, so renewals go every heartbeat
    /// until one is, instead of every `grant_ttl/3` (one of which might
    /// fall just before that wait ends and the next after the lease).
    Adopted,
}

/// The consumer side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct ConsumerState {
    pending: Option<Pending>,
    pub(super) grant: Option<HeldGrant>,
    next_req: u64,
    backoff_until: Option<Instant>,
}

impl ElNode {
    /// After every input: ask for the local waiters, give back a grant
    /// whose local hold has ended.
    pub(super) fn consumer_serve(&mut self, now: Instant) {
        if self.consumer.grant.as_ref().is_some_and(|g| g.confirmed && !self.locks.is_held()) {
            self.give_back_grant();
        }
        let Some(c) = self.coordinator else { return };
        if !self.locks.has_waiters()
            || self.consumer.grant.is_some()
            || self.consumer.pending.is_some()
            || self.consumer.backoff_until.is_some_and(|b| now < b)
        {
            return;
        }
        self.consumer.backoff_until = None;
        self.new_pending(c, None);
        self.ask_pending(now, c);
    }

    /// A new request for the local waiters, to `to`, keeping `key` (the
    /// place of an earlier one) if any; sent by [`Self::ask_pending`].
    fn new_pending(&mut self, to: NodeId, key: Option<(u64, u64)>) {
        self.consumer.next_req += 1;
        let req = self.consumer.next_req;
        self.consumer.pending = Some(Pending { req, to: Some(to), answered: false, key, retried_named: false });
    }

    /// Sends the pending request to `to` (with its place, if it has one)
    /// and waits for the immediate answer.
    fn ask_pending(&mut self, now: Instant, to: NodeId) {
        let Some(p) = self.consumer.pending.as_mut() else { return };
        p.to = Some(to);
        p.answered = false;
        let (req, key) = (p.req, p.key);
        self.send_request(now, to, req, key, None);
    }

    /// Drops the grant held here (no more renewals or expiry).
    fn take_grant(&mut self) -> Option<HeldGrant> {
        self.timers.cancel(Timer::Renew);
        self.timers.cancel(Timer::GrantExpiry);
        self.consumer.grant.take()
    }

    /// Gives the grant held here back to the coordinator it came from.
    fn give_back_grant(&mut self) -> Option<HeldGrant> {
        let g = self.take_grant()?;
        let term = self.term;
        self.send(g.to, Msg::Release { term, fence: g.fence });
        Some(g)
    }

    fn send_request(&mut self, now: Instant, to: NodeId, req: u64, queued: Option<(u64, u64)>, holding: Option<u128>) {
        let term = self.term;
        self.send(to, Msg::Request { term, req, queued, holding });
        self.timers.set(Timer::RequestDue, now + self.cfg.request_timeout);
    }

    /// A new coordinator is known: re-send the pending request with its
    /// (term, pos), and re-register an unexpired grant.
    pub(super) fn coordinator_changed(&mut self, now: Instant) {
        let Some(c) = self.coordinator else { return };
        match self.consumer.grant.as_mut() {
            Some(g) if g.confirmed || self.cfg.rules.off(ElRule::ConfirmedGrantsReregistered) => {
                g.to = c;
                g.adoption = Adoption::Asked(now);
                let f = g.fence;
                self.send_request(now, c, 0, None, Some(f));
            }
            Some(_) => {
                // (safety) A grant no renewal has confirmed is not held:
                // its Granted may have come late, and its coordinator may
                // have freed it and granted others since. It is given
                // back, and the request goes to the new coordinator in
                // its place (never re-registered: adopted, it would start
                // a holder after the others, with a lower fence).
                let key = self.give_back_grant().and_then(|g| g.key);
                self.new_pending(c, key);
            }
            None => {}
        }
        if let Some(p) = self.consumer.pending.as_mut() {
            p.retried_named = false;
            self.ask_pending(now, c);
        }
    }

    /// Sends the re-registration of the grant held here again (request
    /// 0, holding its fence; `coordinator_changed` sent the first), at
    /// most once an instant, until its coordinator echoes it (adopted) or
    /// refuses it. A coordinator elected but not yet in office (or without
    /// its quorum lease) denies it, and the denial names no request here:
    /// it goes again on each of that coordinator's heartbeats (after the
    /// ack, which may be the one that puts it in office) and on each
    /// renewal tick.
    fn reregister(&mut self, now: Instant) {
        let Some(g) = self.consumer.grant.as_mut() else { return };
        // Never an expired grant (after a pause the renewal tick may come
        // before the expiry in one wake-up): a coordinator would honour a
        // grant nobody holds.
        if !matches!(g.adoption, Adoption::Asked(at) if at < now) || now >= g.expiry {
            return;
        }
        g.adoption = Adoption::Asked(now);
        let (to, f) = (g.to, g.fence);
        self.send_request(now, to, 0, None, Some(f));
    }

    /// A heartbeat from `from`, acked: a re-registration it has not
    /// echoed yet is sent again.
    pub(super) fn heard_coordinator(&mut self, now: Instant, from: NodeId) {
        if self.consumer.grant.as_ref().is_some_and(|g| g.to == from) {
            self.reregister(now);
        }
    }

    /// The connection to `peer` broke: a request it answered `Queued` may
    /// have lost its `Granted` on the way; it is sent again (the
    /// coordinator answers a request it still queues with its place).
    pub(super) fn resend_pending_to(&mut self, now: Instant, peer: NodeId) {
        if peer != self.me && self.consumer.pending.as_ref().is_some_and(|p| p.to == Some(peer)) {
            self.ask_pending(now, peer);
        }
    }

    pub(super) fn on_queued(&mut self, now: Instant, from: NodeId, term: u64, req: u64, pos: u64) {
        let Some(p) = self.consumer.pending.as_mut() else { return };
        if p.req != req || p.to != Some(from) {
            return;
        }
        p.answered = true;
        p.key = p.key.or(Some((term, pos)));
        // Queued: the wait for the grant has no bound but the client's
        // deadline. Its place is confirmed again every grant_ttl: a
        // Granted lost on the way (a partition) would otherwise leave it
        // waiting for ever.
        self.timers.set(Timer::RequestDue, now + self.cfg.grant_ttl);
    }

    /// (deviation) Denials: retry at the named coordinator, back off on a
    /// full queue, elect otherwise.
    pub(super) fn on_denied(&mut self, now: Instant, from: NodeId, req: u64, why: Denial) {
        let Some(p) = self.consumer.pending.as_mut() else { return };
        if p.req != req || p.to != Some(from) {
            return;
        }
        match why {
            Denial::NotCoordinator(Some(c)) if c != from && c != self.me && !p.retried_named => {
                p.retried_named = true;
                p.to = Some(c);
                let key = p.key;
                self.send_request(now, c, req, key, None);
            }
            Denial::QueueFull => {
                // Back off; the local client's own deadline ends its wait.
                self.consumer.pending = None;
                self.timers.cancel(Timer::RequestDue);
                self.consumer.backoff_until = Some(now + self.cfg.request_timeout);
                self.timers.set(Timer::RequestDue, now + self.cfg.request_timeout);
            }
            Denial::NotCoordinator(_) | Denial::NoQuorum => {
                p.answered = false;
                self.elect_within(now, self.cfg.election_jitter);
            }
        }
    }

    /// No immediate answer in time: start an election (jittered) and ask
    /// again. Queued for `grant_ttl`: ask again (the coordinator answers
    /// with its place, or queues it at its old place if its Granted was
    /// lost).
    pub(super) fn on_request_due(&mut self, now: Instant) {
        let Some(p) = self.consumer.pending.as_ref() else { return };
        if p.answered {
            if let Some(to) = p.to {
                self.ask_pending(now, to);
            }
            return;
        }
        if self.coordinator != Some(self.me) {
            self.elect_within(now, self.cfg.election_jitter);
        }
        if let Some(c) = self.coordinator {
            self.ask_pending(now, c);
        }
    }

    /// (safety) On `Granted` the holder renews at once and grants its
    /// client only when that renewal is acked.
    pub(super) fn on_granted(&mut self, now: Instant, from: NodeId, req: u64, f: u128) {
        if let Some(g) = self.consumer.grant.as_mut().filter(|g| g.fence == f) {
            // The adoption of our grant was confirmed: renewals go on,
            // every heartbeat until the new coordinator acks one.
            if matches!(g.adoption, Adoption::Asked(_)) {
                g.adoption = Adoption::Adopted;
                self.send_renew(now);
            }
            return;
        }
        match self.consumer.pending.as_ref() {
            Some(p) if p.req == req && self.consumer.grant.is_none() => {}
            _ => {
                // A grant nobody here waits for: give it back.
                let term = self.term;
                self.send(from, Msg::Release { term, fence: f });
                return;
            }
        }
        let key = self.consumer.pending.take().and_then(|p| p.key);
        self.timers.cancel(Timer::RequestDue);
        self.consumer.grant = Some(HeldGrant {
            fence: f,
            to: from,
            confirmed: false,
            adoption: Adoption::Known,
            renew_seq: 0,
            sent: BTreeMap::new(),
            // Unconfirmed: it lapses unless a renewal is acked in time.
            expiry: now + self.cfg.shrunk(self.cfg.grant_ttl),
            key,
        });
        self.timers.set(Timer::GrantExpiry, now + self.cfg.shrunk(self.cfg.grant_ttl));
        self.send_renew(now);
        ftcore::mutant! {
            // The client granted on the `Granted`, its lease from the receipt.
            if self.cfg.rules.off(ElRule::LeaseFromAckedRenewal) {
                if let Some(g) = self.consumer.grant.as_mut() {
                    g.confirmed = true;
                }
                let until = now + self.cfg.shrunk(self.cfg.grant_ttl);
                let _ = self.locks.grant_next(now, f, until, false, &mut self.out);
            }
        }
    }

    fn send_renew(&mut self, now: Instant) {
        let term = self.term;
        let Some(g) = self.consumer.grant.as_mut() else { return };
        g.renew_seq += 1;
        g.sent.insert(g.renew_seq, now);
        let (to, f, seq) = (g.to, g.fence, g.renew_seq);
        let every = if g.adoption == Adoption::Adopted { self.cfg.heartbeat } else { self.cfg.grant_ttl / 3 };
        self.send(to, Msg::Renew { term, fence: f, seq });
        self.timers.set(Timer::Renew, now + every);
    }

    /// Renews the grant, or, while its coordinator has not echoed a
    /// re-registration, sends that again instead.
    pub(super) fn on_renew_timer(&mut self, now: Instant) {
        if self.consumer.grant.as_ref().is_some_and(|g| matches!(g.adoption, Adoption::Asked(_))) {
            self.reregister(now);
            self.timers.set(Timer::Renew, now + self.cfg.grant_ttl / 3);
        } else {
            self.send_renew(now);
        }
    }

    pub(super) fn on_renew_ack(&mut self, now: Instant, f: u128, seq: u64) {
        let ttl = self.cfg.shrunk(self.cfg.grant_ttl);
        let Some(g) = self.consumer.grant.as_mut() else { return };
        if g.fence != f {
            return;
        }
        let Some(sent) = g.sent.remove(&seq) else { return };
        g.sent.retain(|s, _| *s > seq);
        if g.adoption == Adoption::Adopted {
            // The new coordinator acks: renewals every grant_ttl/3 again.
            g.adoption = Adoption::Known;
            self.timers.set(Timer::Renew, sent + self.cfg.grant_ttl / 3);
        }
        let expiry = if g.confirmed { g.expiry.max(sent + ttl) } else { sent + ttl };
        g.expiry = expiry;
        self.timers.set(Timer::GrantExpiry, expiry);
        if g.confirmed {
            // (safety) The local client's lease is the grant's: it ends
            // `grant_ttl·(1−ρ)` after the send time of the latest renewal
            // the coordinator acked, never from the Granted's arrival.
            self.locks.renew(now, expiry, &mut self.out);
        } else {
            g.confirmed = true;
            if self.locks.grant_next(now, f, expiry, false, &mut self.out).is_none() {
                // The local client left meanwhile (or the ack came too
                // late): give the grant back (consumer_serve does, as
                // nothing is held).
            }
        }
    }

    pub(super) fn on_renew_refused(&mut self, now: Instant, f: u128) {
        if self.consumer.grant.as_ref().is_some_and(|g| g.fence == f) {
            self.lose_grant(now, "the coordinator refused the renewal");
        }
    }

    pub(super) fn on_grant_expiry(&mut self, now: Instant) {
        let Some(g) = &self.consumer.grant else { return };
        if now >= g.expiry {
            self.out.event(ElEvent::LeaseExpired);
            self.lose_grant(now, "grant lease expired");
        } else {
            let at = g.expiry;
            self.timers.set(Timer::GrantExpiry, at);
        }
    }

    fn lose_grant(&mut self, now: Instant, why: &str) {
        self.take_grant();
        self.locks.lose(now, why, &mut self.out);
    }
}
