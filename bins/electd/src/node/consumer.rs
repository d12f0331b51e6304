//! A process's local clients (electd.md, "Consumer", with the
//! **(deviation)** refinements): one request at a time to the coordinator
//! for the local queue; `request_timeout` bounds the immediate answer (not
//! the grant); `not_coordinator` retries at the named id, `queue_full`
//! backs off, silence starts an election; pending requests are re-sent to
//! a new coordinator with the (term, pos) of their `Queued` answer. The
//! holder side of a grant: a renewal at once, the client granted only when
//! it is acked, expiry at the latest acked renewal's send time +
//! `grant_ttl·(1−ρ)`.

use std::collections::BTreeMap;
use std::time::Duration;

use ftcore::NodeId;
use timer::Instant;

use super::state::Timer;
use super::{ElEvent, ElNode, ElRule};
use crate::msg::{Denial, Msg};

/// A request sent to the coordinator and not yet granted.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pending {
    req: u64,
    to: Option<NodeId>,
    answered: bool,
    /// (term, pos) of the first `Queued` answer.
    key: Option<(u64, u64)>,
    retried_named: bool,
}

/// A grant this process holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct HeldGrant {
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
    expiry: Instant,
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
    grant: Option<HeldGrant>,
    next_req: u64,
    backoff_until: Option<Instant>,
}

/// What becomes of the grant held here when a new coordinator is known.
enum HeldAtChange {
    /// It is re-registered with the new coordinator (its fence).
    Reregistered(u128),
    /// Unconfirmed: it is given back, the request goes again.
    Unconfirmed,
    /// None held.
    Nothing,
}

/// What a denial of the pending request asks of this process.
enum AfterDenial {
    /// Ask the coordinator it named, with the request's place.
    RetryAt(NodeId, Option<(u64, u64)>),
    /// The queue is full: wait until the back-off ends.
    BackOff,
    /// No coordinator (or no quorum): an election.
    Elect,
}

/// A renewal acked.
struct RenewAcked {
    /// Its send time.
    sent: Instant,
    /// The grant was adopted and this is its first acked renewal.
    adopted: bool,
    /// Whether the local client had been granted already.
    confirmed: bool,
    /// The grant's lease ends here now.
    expiry: Instant,
}

impl ConsumerState {
    /// Whether a grant is held here.
    pub(super) fn holds_grant(&self) -> bool {
        self.grant.is_some()
    }

    /// When the grant held here lapses.
    pub(super) fn expiry(&self) -> Option<Instant> {
        self.grant.as_ref().map(|g| g.expiry)
    }

    /// Whether the grant held here has fence `f`.
    fn holds(&self, f: u128) -> bool {
        self.grant.as_ref().is_some_and(|g| g.fence == f)
    }

    /// Whether the grant held here is confirmed (its local client granted).
    fn holds_confirmed(&self) -> bool {
        self.grant.as_ref().is_some_and(|g| g.confirmed)
    }

    /// Whether the grant held here renews to `c`.
    fn renews_to(&self, c: NodeId) -> bool {
        self.grant.as_ref().is_some_and(|g| g.to == c)
    }

    /// Whether the grant held here waits for its re-registration's echo.
    fn awaits_echo(&self) -> bool {
        self.grant.as_ref().is_some_and(|g| matches!(g.adoption, Adoption::Asked(_)))
    }

    /// Whether the pending request went to `peer`.
    fn asked(&self, peer: NodeId) -> bool {
        self.pending.as_ref().is_some_and(|p| p.to == Some(peer))
    }

    /// The pending request's standing: whether it was answered, and whom
    /// it went to.
    fn pending_answer(&self) -> Option<(bool, Option<NodeId>)> {
        self.pending.as_ref().map(|p| (p.answered, p.to))
    }

    /// A new request to `to` for the local waiters, unless one is pending,
    /// a grant is held or it backs off: whether it was made.
    fn start_request(&mut self, now: Instant, to: NodeId) -> bool {
        if self.grant.is_some() || self.pending.is_some() || self.backoff_until.is_some_and(|b| now < b) {
            return false;
        }
        self.backoff_until = None;
        self.new_pending(to, None);
        true
    }

    /// A new request to `to`, keeping `key` (the place of an earlier one).
    fn new_pending(&mut self, to: NodeId, key: Option<(u64, u64)>) {
        self.next_req += 1;
        let req = self.next_req;
        self.pending = Some(Pending { req, to: Some(to), answered: false, key, retried_named: false });
    }

    /// The pending request goes to `to` and waits for its answer: its
    /// number and place.
    fn asking(&mut self, to: NodeId) -> Option<(u64, Option<(u64, u64)>)> {
        let p = self.pending.as_mut()?;
        p.to = Some(to);
        p.answered = false;
        Some((p.req, p.key))
    }

    /// Coordinator `c` is new: a confirmed grant (any grant, with
    /// `unconfirmed_too`) is re-registered with it. Never an expired one
    /// (its expiry timer may come later in the same wake-up after a
    /// pause): a coordinator would honour a grant nobody holds.
    fn reregister_with(&mut self, now: Instant, c: NodeId, unconfirmed_too: bool) -> HeldAtChange {
        match self.grant.as_mut() {
            Some(g) if now >= g.expiry => HeldAtChange::Nothing,
            Some(g) if g.confirmed || unconfirmed_too => {
                g.to = c;
                g.adoption = Adoption::Asked(now);
                HeldAtChange::Reregistered(g.fence)
            }
            Some(_) => HeldAtChange::Unconfirmed,
            None => HeldAtChange::Nothing,
        }
    }

    /// A new coordinator: the pending request may be retried at a named
    /// one again. Whether a request is pending.
    fn renamed(&mut self) -> bool {
        let Some(p) = self.pending.as_mut() else { return false };
        p.retried_named = false;
        true
    }

    /// The re-registration to send again now (at most once an instant,
    /// never for an expired grant): its coordinator and fence.
    fn reregister_due(&mut self, now: Instant) -> Option<(NodeId, u128)> {
        let g = self.grant.as_mut()?;
        if !matches!(g.adoption, Adoption::Asked(at) if at < now) || now >= g.expiry {
            return None;
        }
        g.adoption = Adoption::Asked(now);
        Some((g.to, g.fence))
    }

    /// `Queued` at `pos` of `term` from `from`: whether it answers the
    /// pending request.
    fn queued(&mut self, from: NodeId, term: u64, req: u64, pos: u64) -> bool {
        let Some(p) = self.pending.as_mut() else { return false };
        if p.req != req || p.to != Some(from) {
            return false;
        }
        p.answered = true;
        p.key = p.key.or(Some((term, pos)));
        true
    }

    /// `Denied` from `from`: what to do (`None`: not the pending request).
    /// A full queue drops the request and backs off until `backoff_until`.
    fn denied(
        &mut self,
        from: NodeId,
        req: u64,
        why: Denial,
        me: NodeId,
        backoff_until: Instant,
    ) -> Option<AfterDenial> {
        let p = self.pending.as_mut()?;
        if p.req != req || p.to != Some(from) {
            return None;
        }
        Some(match why {
            Denial::NotCoordinator(Some(c)) if c != from && c != me && !p.retried_named => {
                p.retried_named = true;
                p.to = Some(c);
                AfterDenial::RetryAt(c, p.key)
            }
            Denial::QueueFull => {
                self.pending = None;
                self.backoff_until = Some(backoff_until);
                AfterDenial::BackOff
            }
            Denial::NotCoordinator(_) | Denial::NoQuorum => {
                p.answered = false;
                AfterDenial::Elect
            }
        })
    }

    /// Fence `f` was echoed: `None` if no grant of that fence is held,
    /// else whether this echo adopted it.
    fn echoed(&mut self, f: u128) -> Option<bool> {
        let g = self.grant.as_mut().filter(|g| g.fence == f)?;
        if matches!(g.adoption, Adoption::Asked(_)) {
            g.adoption = Adoption::Adopted;
            return Some(true);
        }
        Some(false)
    }

    /// `Granted` of fence `f` from `from` for request `req`: held (until
    /// `expiry` unless a renewal is acked) if it is the pending request's.
    fn granted(&mut self, from: NodeId, req: u64, f: u128, expiry: Instant) -> bool {
        match self.pending.as_ref() {
            Some(p) if p.req == req && self.grant.is_none() => {}
            _ => return false,
        }
        let key = self.pending.take().and_then(|p| p.key);
        self.grant = Some(HeldGrant {
            fence: f,
            to: from,
            confirmed: false,
            adoption: Adoption::Known,
            renew_seq: 0,
            sent: BTreeMap::new(),
            expiry,
            key,
        });
        true
    }

    /// The next renewal, sent `now`: to whom, fence, number, and whether
    /// the grant is adopted (renewals every heartbeat).
    fn next_renewal(&mut self, now: Instant) -> Option<(NodeId, u128, u64, bool)> {
        let g = self.grant.as_mut()?;
        g.renew_seq += 1;
        g.sent.insert(g.renew_seq, now);
        Some((g.to, g.fence, g.renew_seq, g.adoption == Adoption::Adopted))
    }

    /// Renewal `seq` of fence `f` acked: the lease runs `ttl` from its
    /// send time, and the grant is confirmed.
    fn renew_acked(&mut self, f: u128, seq: u64, ttl: Duration) -> Option<RenewAcked> {
        let g = self.grant.as_mut()?;
        if g.fence != f {
            return None;
        }
        let sent = g.sent.remove(&seq)?;
        g.sent.retain(|s, _| *s > seq);
        let adopted = g.adoption == Adoption::Adopted;
        if adopted {
            // The new coordinator acks: renewals every grant_ttl/3 again.
            g.adoption = Adoption::Known;
        }
        let confirmed = g.confirmed;
        let expiry = if confirmed { g.expiry.max(sent + ttl) } else { sent + ttl };
        g.expiry = expiry;
        g.confirmed = true;
        Some(RenewAcked { sent, adopted, confirmed, expiry })
    }
}

impl ElNode {
    /// After every input: ask for the local waiters, give back a grant
    /// whose local hold has ended.
    pub(super) fn consumer_serve(&mut self, now: Instant) {
        if self.consumer.holds_confirmed() && !self.locks.is_held() {
            self.give_back_grant();
        }
        let Some(c) = self.coordinator else { return };
        if self.locks.has_waiters() && self.consumer.start_request(now, c) {
            self.ask_pending(now, c);
        }
    }

    /// Sends the pending request to `to` (with its place, if it has one)
    /// and waits for the immediate answer.
    fn ask_pending(&mut self, now: Instant, to: NodeId) {
        let Some((req, key)) = self.consumer.asking(to) else { return };
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
        let unconfirmed_too = self.cfg.rules.off(ElRule::ConfirmedGrantsReregistered);
        match self.consumer.reregister_with(now, c, unconfirmed_too) {
            HeldAtChange::Reregistered(f) => self.send_request(now, c, 0, None, Some(f)),
            HeldAtChange::Unconfirmed => {
                // (safety) A grant no renewal has confirmed is not held:
                // its Granted may have come late, and its coordinator may
                // have freed it and granted others since. It is given
                // back, and the request goes to the new coordinator in
                // its place (never re-registered: adopted, it would start
                // a holder after the others, with a lower fence).
                let key = self.give_back_grant().and_then(|g| g.key);
                self.consumer.new_pending(c, key);
            }
            HeldAtChange::Nothing => {}
        }
        if self.consumer.renamed() {
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
        // Never an expired grant (after a pause the renewal tick may come
        // before the expiry in one wake-up): a coordinator would honour a
        // grant nobody holds.
        let Some((to, f)) = self.consumer.reregister_due(now) else { return };
        self.send_request(now, to, 0, None, Some(f));
    }

    /// A heartbeat from `from`, acked: a re-registration it has not
    /// echoed yet is sent again.
    pub(super) fn heard_coordinator(&mut self, now: Instant, from: NodeId) {
        if self.consumer.renews_to(from) {
            self.reregister(now);
        }
    }

    /// The connection to `peer` broke: a request it answered `Queued` may
    /// have lost its `Granted` on the way; it is sent again (the
    /// coordinator answers a request it still queues with its place).
    pub(super) fn resend_pending_to(&mut self, now: Instant, peer: NodeId) {
        if peer != self.me && self.consumer.asked(peer) {
            self.ask_pending(now, peer);
        }
    }

    pub(super) fn on_queued(&mut self, now: Instant, from: NodeId, term: u64, req: u64, pos: u64) {
        if !self.consumer.queued(from, term, req, pos) {
            return;
        }
        // Queued: the wait for the grant has no bound but the client's
        // deadline. Its place is confirmed again every grant_ttl: a
        // Granted lost on the way (a partition) would otherwise leave it
        // waiting for ever.
        self.timers.set(Timer::RequestDue, now + self.cfg.grant_ttl);
    }

    /// (deviation) Denials: retry at the named coordinator, back off on a
    /// full queue, elect otherwise.
    pub(super) fn on_denied(&mut self, now: Instant, from: NodeId, req: u64, why: Denial) {
        let backoff_until = now + self.cfg.request_timeout;
        let Some(then) = self.consumer.denied(from, req, why, self.me, backoff_until) else { return };
        match then {
            AfterDenial::RetryAt(c, key) => self.send_request(now, c, req, key, None),
            AfterDenial::BackOff => {
                // Back off; the local client's own deadline ends its wait.
                self.timers.cancel(Timer::RequestDue);
                self.timers.set(Timer::RequestDue, now + self.cfg.request_timeout);
            }
            AfterDenial::Elect => self.elect_within(now, self.cfg.election_jitter),
        }
    }

    /// No immediate answer in time: start an election (jittered) and ask
    /// again. Queued for `grant_ttl`: ask again (the coordinator answers
    /// with its place, or queues it at its old place if its Granted was
    /// lost).
    pub(super) fn on_request_due(&mut self, now: Instant) {
        let Some((answered, to)) = self.consumer.pending_answer() else { return };
        if answered {
            if let Some(to) = to {
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
        if let Some(adopted) = self.consumer.echoed(f) {
            // The adoption of our grant was confirmed: renewals go on,
            // every heartbeat until the new coordinator acks one.
            if adopted {
                self.send_renew(now);
            }
            return;
        }
        // Unconfirmed: it lapses unless a renewal is acked in time.
        let expiry = now + self.cfg.shrunk(self.cfg.grant_ttl);
        if !self.consumer.granted(from, req, f, expiry) {
            // A grant nobody here waits for: give it back.
            let term = self.term;
            self.send(from, Msg::Release { term, fence: f });
            return;
        }
        self.timers.cancel(Timer::RequestDue);
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
        let Some((to, f, seq, adopted)) = self.consumer.next_renewal(now) else { return };
        let every = if adopted { self.cfg.heartbeat } else { self.cfg.grant_ttl / 3 };
        self.send(to, Msg::Renew { term, fence: f, seq });
        self.timers.set(Timer::Renew, now + every);
    }

    /// Renews the grant, or, while its coordinator has not echoed a
    /// re-registration, sends that again instead.
    pub(super) fn on_renew_timer(&mut self, now: Instant) {
        if self.consumer.awaits_echo() {
            self.reregister(now);
            self.timers.set(Timer::Renew, now + self.cfg.grant_ttl / 3);
        } else {
            self.send_renew(now);
        }
    }

    pub(super) fn on_renew_ack(&mut self, now: Instant, f: u128, seq: u64) {
        let ttl = self.cfg.shrunk(self.cfg.grant_ttl);
        let Some(RenewAcked { sent, adopted, confirmed, expiry }) = self.consumer.renew_acked(f, seq, ttl) else {
            return;
        };
        if adopted {
            self.timers.set(Timer::Renew, sent + self.cfg.grant_ttl / 3);
        }
        self.timers.set(Timer::GrantExpiry, expiry);
        if confirmed {
            // (safety) The local client's lease is the grant's: it ends
            // `grant_ttl·(1−ρ)` after the send time of the latest renewal
            // the coordinator acked, never from the Granted's arrival.
            self.locks.renew(now, expiry, &mut self.out);
        } else if self.locks.grant_next(now, f, expiry, false, &mut self.out).is_none() {
            // The local client left meanwhile (or the ack came too
            // late): give the grant back (consumer_serve does, as
            // nothing is held).
        }
    }

    pub(super) fn on_renew_refused(&mut self, now: Instant, f: u128) {
        if self.consumer.holds(f) {
            self.lose_grant(now, "the coordinator refused the renewal");
        }
    }

    pub(super) fn on_grant_expiry(&mut self, now: Instant) {
        let Some(expiry) = self.consumer.expiry() else { return };
        if now >= expiry {
            self.out.event(ElEvent::LeaseExpired);
            self.lose_grant(now, "grant lease expired");
        } else {
            self.timers.set(Timer::GrantExpiry, expiry);
        }
    }

    fn lose_grant(&mut self, now: Instant, why: &str) {
        self.take_grant();
        self.locks.lose(now, why, &mut self.out);
    }
}
