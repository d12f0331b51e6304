//! A process's local clients (electd.md, "Consumer", with the
//! **(deviation)** refinements; named-locks.md, "electd"): per lock name
//! one request at a time to the coordinator for that name's local queue;
//! `request_timeout` bounds the immediate answer (not the grant);
//! `not_coordinator` retries at the named id, `queue_full` and
//! `too_many_locks` back off (that name), silence starts an election;
//! pending requests are re-sent to a new coordinator with the (term, pos)
//! of their `Queued` answer. The holder side of each grant: a renewal at
//! once, the client granted only when it is acked, expiry at the latest
//! acked renewal's send time + `grant_ttl·(1−ρ)`. Renewals of every grant
//! held go in one `Renew` per coordinator per period.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ftcore::NodeId;
use lockservice::LockName;
use timer::Instant;

use super::state::Timer;
use super::{ElEvent, ElNode, ElRule};
use crate::msg::{Denial, Msg, MAX_BATCH};

/// A request sent to the coordinator and not yet granted.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pending {
    req: u64,
    to: Option<NodeId>,
    answered: bool,
    /// (term, pos) of the first `Queued` answer.
    key: Option<(u64, u64)>,
    retried_named: bool,
    /// The immediate answer is due (or, once `Queued`, the place is
    /// confirmed again) at this instant.
    due: Option<Instant>,
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
    /// A campaign's grant: its coordinator acknowledged the value
    /// (`Announced`); until then it is announced again on each renewal
    /// tick (elections.md, amendments, E1).
    announced: bool,
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

/// The consumer side: per lock name, the pending request or the grant
/// held (never both), and a back-off after a full queue.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct ConsumerState {
    pending: BTreeMap<LockName, Pending>,
    grants: BTreeMap<LockName, HeldGrant>,
    /// Request numbers, node-wide (a request names its lock too).
    next_req: u64,
    backoff: BTreeMap<LockName, Instant>,
    /// Names whose back-off ended: looked at again by the next serve.
    recheck: BTreeSet<LockName>,
    /// The coordinator the last serve looked at every name for.
    served_for: Option<NodeId>,
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
    /// The queue is full (or the coordinator knows too many locks): wait
    /// until the back-off ends.
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
        !self.grants.is_empty()
    }

    /// How many grants are held here.
    pub(super) fn grants_held(&self) -> usize {
        self.grants.len()
    }

    /// The earliest instant a grant held here lapses.
    fn next_expiry(&self) -> Option<Instant> {
        self.grants.values().map(|g| g.expiry).min()
    }

    /// The earliest instant a pending request's answer is due or a
    /// back-off ends.
    fn next_due(&self) -> Option<Instant> {
        self.pending.values().filter_map(|p| p.due).chain(self.backoff.values().copied()).min()
    }

    /// The name of the grant held here with fence `f` (a walk over the
    /// grants held, comparing fences only).
    fn name_of(&self, f: u128) -> Option<LockName> {
        self.grants.iter().find(|(_, g)| g.fence == f).map(|(n, _)| n.clone())
    }

    /// Whether `name`'s grant is confirmed (its local client granted).
    fn is_confirmed(&self, name: &LockName) -> bool {
        self.grants.get(name).is_some_and(|g| g.confirmed)
    }

    /// Whether any grant held here waits for its re-registration's echo.
    fn awaits_echo(&self) -> bool {
        self.grants.values().any(|g| matches!(g.adoption, Adoption::Asked(_)))
    }

    /// Whether any grant held here is adopted and not yet acked (renewals
    /// every heartbeat).
    fn any_adopted(&self) -> bool {
        self.grants.values().any(|g| g.adoption == Adoption::Adopted)
    }

    /// The names whose pending request went to `peer`.
    fn asked(&self, peer: NodeId) -> Vec<LockName> {
        self.pending.iter().filter(|(_, p)| p.to == Some(peer)).map(|(n, _)| n.clone()).collect()
    }

    /// The pending requests due by `now`: name, whether answered, and
    /// whom each went to (their due times are cleared).
    fn take_due(&mut self, now: Instant) -> Vec<(LockName, bool, Option<NodeId>)> {
        let ended: Vec<LockName> =
            self.backoff.iter().filter(|(_, until)| **until <= now).map(|(n, _)| n.clone()).collect();
        for n in ended {
            self.backoff.remove(&n);
            self.recheck.insert(n);
        }
        let mut due = Vec::new();
        for (n, p) in &mut self.pending {
            if p.due.is_some_and(|at| at <= now) {
                p.due = None;
                due.push((n.clone(), p.answered, p.to));
            }
        }
        due
    }

    /// A new request for `name` to `to` for its local waiters, unless one
    /// is pending, a grant of it is held or it backs off: whether it was
    /// made.
    fn start_request(&mut self, now: Instant, name: &LockName, to: NodeId) -> bool {
        if self.grants.contains_key(name) || self.pending.contains_key(name) {
            return false;
        }
        if self.backoff.get(name).is_some_and(|b| now < *b) {
            return false;
        }
        self.backoff.remove(name);
        self.new_pending(name, to, None);
        true
    }

    /// A new request for `name` to `to`, keeping `key` (the place of an
    /// earlier one).
    fn new_pending(&mut self, name: &LockName, to: NodeId, key: Option<(u64, u64)>) {
        self.next_req += 1;
        let req = self.next_req;
        let p = Pending { req, to: Some(to), answered: false, key, retried_named: false, due: None };
        self.pending.insert(name.clone(), p);
    }

    /// `name`'s pending request goes to `to` and waits for its answer
    /// (due at `due`): its number and place.
    fn asking(&mut self, name: &LockName, to: NodeId, due: Instant) -> Option<(u64, Option<(u64, u64)>)> {
        let p = self.pending.get_mut(name)?;
        p.to = Some(to);
        p.answered = false;
        p.due = Some(due);
        Some((p.req, p.key))
    }

    /// Coordinator `c` is new: a confirmed grant of `name` (any grant,
    /// with `unconfirmed_too`) is re-registered with it. Never an expired
    /// one (its expiry timer may come later in the same wake-up after a
    /// pause): a coordinator would honour a grant nobody holds.
    fn reregister_with(&mut self, now: Instant, name: &LockName, c: NodeId, unconfirmed_too: bool) -> HeldAtChange {
        match self.grants.get_mut(name) {
            Some(g) if now >= g.expiry => HeldAtChange::Nothing,
            Some(g) if g.confirmed || unconfirmed_too => {
                g.to = c;
                g.adoption = Adoption::Asked(now);
                // The new coordinator acknowledges the value again.
                g.announced = !name.is_election();
                HeldAtChange::Reregistered(g.fence)
            }
            Some(_) => HeldAtChange::Unconfirmed,
            None => HeldAtChange::Nothing,
        }
    }

    /// A new coordinator: the pending requests may be retried at a named
    /// one again. The names with a pending request.
    fn renamed(&mut self) -> Vec<LockName> {
        for p in self.pending.values_mut() {
            p.retried_named = false;
        }
        self.pending.keys().cloned().collect()
    }

    /// The re-registrations to send again now (at most once an instant,
    /// never for an expired grant; only those renewing to `to`, if
    /// given): name, coordinator and fence.
    fn reregister_due(&mut self, now: Instant, to: Option<NodeId>) -> Vec<(LockName, NodeId, u128)> {
        let mut due = Vec::new();
        for (n, g) in &mut self.grants {
            if !matches!(g.adoption, Adoption::Asked(at) if at < now) || now >= g.expiry {
                continue;
            }
            if to.is_some_and(|t| t != g.to) {
                continue;
            }
            g.adoption = Adoption::Asked(now);
            due.push((n.clone(), g.to, g.fence));
        }
        due
    }

    /// `Queued` at `pos` of `term` from `from`: whether it answers `name`'s
    /// pending request (its place is confirmed again at `due`).
    fn queued(&mut self, from: NodeId, term: u64, name: &LockName, req: u64, pos: u64, due: Instant) -> bool {
        let Some(p) = self.pending.get_mut(name) else { return false };
        if p.req != req || p.to != Some(from) {
            return false;
        }
        p.answered = true;
        p.key = p.key.or(Some((term, pos)));
        p.due = Some(due);
        true
    }

    /// `Denied` from `from`: what to do (`None`: not `name`'s pending
    /// request). A full queue (or too many locks at the coordinator) drops
    /// the request and backs that name off until `backoff_until`.
    fn denied(
        &mut self,
        from: NodeId,
        name: &LockName,
        req: u64,
        why: Denial,
        me: NodeId,
        backoff_until: Instant,
    ) -> Option<AfterDenial> {
        let p = self.pending.get_mut(name)?;
        if p.req != req || p.to != Some(from) {
            return None;
        }
        Some(match why {
            Denial::NotCoordinator(Some(c)) if c != from && c != me && !p.retried_named => {
                p.retried_named = true;
                p.to = Some(c);
                // The retry's answer is due a whole request_timeout on.
                p.due = Some(backoff_until);
                AfterDenial::RetryAt(c, p.key)
            }
            Denial::QueueFull | Denial::TooManyLocks => {
                self.pending.remove(name);
                self.backoff.insert(name.clone(), backoff_until);
                AfterDenial::BackOff
            }
            Denial::NotCoordinator(_) | Denial::NoQuorum => {
                p.answered = false;
                AfterDenial::Elect
            }
        })
    }

    /// Fence `f` of `name` was echoed: `None` if no grant of that fence is
    /// held, else whether this echo adopted it.
    fn echoed(&mut self, name: &LockName, f: u128) -> Option<bool> {
        let g = self.grants.get_mut(name).filter(|g| g.fence == f)?;
        if matches!(g.adoption, Adoption::Asked(_)) {
            g.adoption = Adoption::Adopted;
            return Some(true);
        }
        Some(false)
    }

    /// `Granted` of fence `f` from `from` for `name`'s request `req`: held
    /// (until `expiry` unless a renewal is acked) if it is the pending
    /// request's.
    fn granted(&mut self, from: NodeId, name: &LockName, req: u64, f: u128, expiry: Instant) -> bool {
        match self.pending.get(name) {
            Some(p) if p.req == req && !self.grants.contains_key(name) => {}
            _ => return false,
        }
        let key = self.pending.remove(name).and_then(|p| p.key);
        self.grants.insert(
            name.clone(),
            HeldGrant {
                fence: f,
                to: from,
                confirmed: false,
                adoption: Adoption::Known,
                renew_seq: 0,
                sent: BTreeMap::new(),
                expiry,
                key,
                // Only a campaign's grant is announced.
                announced: !name.is_election(),
            },
        );
        true
    }

    /// The campaign grants whose value their coordinator has not
    /// acknowledged (confirmed ones only: their client holds).
    fn unannounced(&self) -> Vec<LockName> {
        self.grants.iter().filter(|(_, g)| g.confirmed && !g.announced).map(|(n, _)| n.clone()).collect()
    }

    /// `name`'s grant, if a confirmed campaign grant not yet acknowledged:
    /// its coordinator and fence.
    fn unannounced_of(&self, name: &LockName) -> Option<(NodeId, u128)> {
        self.grants.get(name).filter(|g| g.confirmed && !g.announced).map(|g| (g.to, g.fence))
    }

    /// Grant `f`'s value was acknowledged.
    fn announced(&mut self, f: u128) {
        if let Some(g) = self.grants.values_mut().find(|g| g.fence == f) {
            g.announced = true;
        }
    }

    /// The next renewal of `name`'s grant, sent `now`: to whom, fence and
    /// number.
    fn next_renewal(&mut self, now: Instant, name: &LockName) -> Option<(NodeId, u128, u64)> {
        let g = self.grants.get_mut(name)?;
        g.renew_seq += 1;
        g.sent.insert(g.renew_seq, now);
        Some((g.to, g.fence, g.renew_seq))
    }

    /// The names whose grants renew now (not waiting for an echo).
    fn renewing(&self) -> Vec<LockName> {
        self.grants.iter().filter(|(_, g)| !matches!(g.adoption, Adoption::Asked(_))).map(|(n, _)| n.clone()).collect()
    }

    /// Renewal `seq` of fence `f` of `name` acked: the lease runs `ttl`
    /// from its send time, and the grant is confirmed.
    fn renew_acked(&mut self, name: &LockName, f: u128, seq: u64, ttl: Duration) -> Option<RenewAcked> {
        let g = self.grants.get_mut(name)?;
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
    /// After every input: give back each grant whose local hold has ended,
    /// ask for each name local clients wait for. Only the names this input
    /// touched (the local service's, and back-offs that ended) are looked
    /// at, unless the coordinator changed since the last serve: then every
    /// name is.
    pub(super) fn consumer_serve(&mut self, now: Instant) {
        let mut names = self.locks.take_touched();
        names.append(&mut self.consumer.recheck);
        if self.coordinator != self.consumer.served_for {
            self.consumer.served_for = self.coordinator;
            names.extend(self.locks.waited_for().cloned());
            names.extend(self.consumer.grants.keys().cloned());
        }
        for name in &names {
            if self.consumer.is_confirmed(name) && !self.locks.is_held(name) {
                self.give_back_grant(name);
            }
        }
        let Some(c) = self.coordinator else { return };
        for name in names {
            if self.locks.has_waiters(&name) && self.consumer.start_request(now, &name, c) {
                self.ask_pending(now, &name, c);
            }
        }
    }

    /// Sends `name`'s pending request to `to` (with its place, if it has
    /// one) and waits for the immediate answer.
    fn ask_pending(&mut self, now: Instant, name: &LockName, to: NodeId) {
        let due = now + self.cfg.request_timeout;
        let Some((req, key)) = self.consumer.asking(name, to, due) else { return };
        self.send_request(to, name, req, key, None);
    }

    /// Sets the request timer at the earliest due answer or back-off end.
    fn rearm_request_due(&mut self) {
        match self.consumer.next_due() {
            Some(at) => self.timers.set(Timer::RequestDue, at),
            None => self.timers.cancel(Timer::RequestDue),
        }
    }

    /// Sets the grant-expiry timer at the earliest lapse of a grant held,
    /// and stops renewals if none is held.
    fn rearm_grant_expiry(&mut self) {
        match self.consumer.next_expiry() {
            Some(at) => self.timers.set(Timer::GrantExpiry, at),
            None => {
                self.timers.cancel(Timer::GrantExpiry);
                self.timers.cancel(Timer::Renew);
            }
        }
    }

    /// Renewals go at `at` at the latest.
    fn renew_by(&mut self, at: Instant) {
        let at = self.timers.get(Timer::Renew).map_or(at, |t| t.min(at));
        self.timers.set(Timer::Renew, at);
    }

    /// Drops `name`'s grant held here (no more renewals or expiry).
    fn take_grant(&mut self, name: &LockName) -> Option<HeldGrant> {
        let g = self.consumer.grants.remove(name);
        self.rearm_grant_expiry();
        g
    }

    /// Gives `name`'s grant held here back to the coordinator it came from.
    fn give_back_grant(&mut self, name: &LockName) -> Option<HeldGrant> {
        let g = self.take_grant(name)?;
        let term = self.term;
        self.send(g.to, Msg::Release { term, fence: g.fence });
        Some(g)
    }

    fn send_request(
        &mut self,
        to: NodeId,
        name: &LockName,
        req: u64,
        queued: Option<(u64, u64)>,
        holding: Option<u128>,
    ) {
        let term = self.term;
        // A re-registered campaign brings its leader's value along.
        let value = holding.and_then(|_| self.locks.holder_value(name)).map(str::to_owned);
        self.send(to, Msg::Request { term, name: name.clone(), req, queued, holding, value });
        self.rearm_request_due();
    }

    /// A new coordinator is known: re-send each pending request with its
    /// (term, pos), and re-register each unexpired grant.
    pub(super) fn coordinator_changed(&mut self, now: Instant) {
        let Some(c) = self.coordinator else { return };
        let unconfirmed_too = self.cfg.rules.off(ElRule::ConfirmedGrantsReregistered);
        let held: Vec<LockName> = self.consumer.grants.keys().cloned().collect();
        for name in held {
            match self.consumer.reregister_with(now, &name, c, unconfirmed_too) {
                HeldAtChange::Reregistered(f) => self.send_request(c, &name, 0, None, Some(f)),
                HeldAtChange::Unconfirmed => {
                    // (safety) A grant no renewal has confirmed is not
                    // held: its Granted may have come late, and its
                    // coordinator may have freed it and granted others
                    // since. It is given back, and the request goes to the
                    // new coordinator in its place (never re-registered:
                    // adopted, it would start a holder after the others,
                    // with a lower fence).
                    let key = self.give_back_grant(&name).and_then(|g| g.key);
                    self.consumer.new_pending(&name, c, key);
                }
                HeldAtChange::Nothing => {}
            }
        }
        for name in self.consumer.renamed() {
            self.ask_pending(now, &name, c);
        }
    }

    /// Sends the re-registrations of the grants held here again (request
    /// 0, holding the fence; `coordinator_changed` sent the first; only
    /// those renewing to `to`, if given), at most once an instant, until
    /// their coordinator echoes them (adopted) or refuses them. A
    /// coordinator elected but not yet in office (or without its quorum
    /// lease) denies them, and the denial names no request here: they go
    /// again on each of that coordinator's heartbeats (after the ack,
    /// which may be the one that puts it in office) and on each renewal
    /// tick.
    fn reregister(&mut self, now: Instant, to: Option<NodeId>) {
        // Never an expired grant (after a pause the renewal tick may come
        // before the expiry in one wake-up): a coordinator would honour a
        // grant nobody holds.
        for (name, c, f) in self.consumer.reregister_due(now, to) {
            self.send_request(c, &name, 0, None, Some(f));
        }
    }

    /// A heartbeat from `from`, acked: a re-registration it has not
    /// echoed yet is sent again.
    pub(super) fn heard_coordinator(&mut self, now: Instant, from: NodeId) {
        self.reregister(now, Some(from));
    }

    /// The connection to `peer` broke: a request it answered `Queued` may
    /// have lost its `Granted` on the way; it is sent again (the
    /// coordinator answers a request it still queues with its place).
    pub(super) fn resend_pending_to(&mut self, now: Instant, peer: NodeId) {
        if peer == self.me {
            return;
        }
        for name in self.consumer.asked(peer) {
            self.ask_pending(now, &name, peer);
        }
    }

    pub(super) fn on_queued(&mut self, now: Instant, from: NodeId, term: u64, name: &LockName, req: u64, pos: u64) {
        // Queued: the wait for the grant has no bound but the client's
        // deadline. Its place is confirmed again every grant_ttl: a
        // Granted lost on the way (a partition) would otherwise leave it
        // waiting for ever.
        let due = now + self.cfg.grant_ttl;
        if self.consumer.queued(from, term, name, req, pos, due) {
            self.rearm_request_due();
        }
    }

    /// (deviation) Denials: retry at the named coordinator, back off on a
    /// full queue or too many locks, elect otherwise.
    pub(super) fn on_denied(&mut self, now: Instant, from: NodeId, name: &LockName, req: u64, why: Denial) {
        let backoff_until = now + self.cfg.request_timeout;
        let Some(then) = self.consumer.denied(from, name, req, why, self.me, backoff_until) else { return };
        match then {
            AfterDenial::RetryAt(c, key) => self.send_request(c, name, req, key, None),
            // Back off; the local client's own deadline ends its wait.
            AfterDenial::BackOff => self.rearm_request_due(),
            AfterDenial::Elect => self.elect_within(now, self.cfg.election_jitter),
        }
    }

    /// No immediate answer in time: start an election (jittered) and ask
    /// again. Queued for `grant_ttl`: ask again (the coordinator answers
    /// with its place, or queues it at its old place if its Granted was
    /// lost).
    pub(super) fn on_request_due(&mut self, now: Instant) {
        let due = self.consumer.take_due(now);
        let mut unanswered = Vec::new();
        for (name, answered, to) in due {
            match (answered, to) {
                (true, Some(to)) => self.ask_pending(now, &name, to),
                (true, None) => {}
                (false, _) => unanswered.push(name),
            }
        }
        if !unanswered.is_empty() && self.coordinator != Some(self.me) {
            self.elect_within(now, self.cfg.election_jitter);
        }
        if let Some(c) = self.coordinator {
            for name in unanswered {
                self.ask_pending(now, &name, c);
            }
        }
        self.rearm_request_due();
    }

    /// (safety) On `Granted` the holder renews at once and grants its
    /// client only when that renewal is acked.
    pub(super) fn on_granted(&mut self, now: Instant, from: NodeId, name: &LockName, req: u64, f: u128) {
        if let Some(adopted) = self.consumer.echoed(name, f) {
            // The adoption of our grant was confirmed: renewals go on,
            // every heartbeat until the new coordinator acks one.
            if adopted {
                self.send_renew(now, name, self.cfg.heartbeat);
            }
            return;
        }
        // Unconfirmed: it lapses unless a renewal is acked in time.
        let expiry = now + self.cfg.shrunk(self.cfg.grant_ttl);
        if !self.consumer.granted(from, name, req, f, expiry) {
            // A grant nobody here waits for: give it back.
            let term = self.term;
            self.send(from, Msg::Release { term, fence: f });
            return;
        }
        self.rearm_request_due();
        self.rearm_grant_expiry();
        self.send_renew(now, name, self.cfg.grant_ttl / 3);
        ftcore::mutant! {
            // The client granted on the `Granted`, its lease from the receipt.
            if self.cfg.rules.off(ElRule::LeaseFromAckedRenewal) {
                if let Some(g) = self.consumer.grants.get_mut(name) {
                    g.confirmed = true;
                }
                let until = now + self.cfg.shrunk(self.cfg.grant_ttl);
                let _ = self.locks.grant_next(now, name, f, until, false, &mut self.out);
            }
        }
    }

    /// Renews `name`'s grant alone, now (its first renewal, or the first
    /// after its adoption); the next renewals go within `every`.
    fn send_renew(&mut self, now: Instant, name: &LockName, every: Duration) {
        let term = self.term;
        let Some((to, f, seq)) = self.consumer.next_renewal(now, name) else { return };
        self.send(to, Msg::Renew { term, grants: vec![(f, seq)] });
        self.renew_by(now + every);
    }

    /// Renews every grant held (one `Renew` per coordinator, in batches of
    /// at most [`MAX_BATCH`]), or, for a grant whose coordinator has not
    /// echoed its re-registration, sends that again instead.
    pub(super) fn on_renew_timer(&mut self, now: Instant) {
        if self.consumer.awaits_echo() {
            self.reregister(now, None);
        }
        // A campaign's value not acknowledged yet goes again.
        for name in self.consumer.unannounced() {
            self.announce(&name);
        }
        let mut by_to: BTreeMap<NodeId, Vec<(u128, u64)>> = BTreeMap::new();
        for name in self.consumer.renewing() {
            if let Some((to, f, seq)) = self.consumer.next_renewal(now, &name) {
                by_to.entry(to).or_default().push((f, seq));
            }
        }
        let term = self.term;
        for (to, grants) in by_to {
            for chunk in grants.chunks(MAX_BATCH) {
                self.send(to, Msg::Renew { term, grants: chunk.to_vec() });
            }
        }
        if self.consumer.holds_grant() {
            let every = if self.consumer.any_adopted() { self.cfg.heartbeat } else { self.cfg.grant_ttl / 3 };
            self.timers.set(Timer::Renew, now + every);
        }
    }

    pub(super) fn on_renew_ack(&mut self, now: Instant, acks: Vec<(u128, u64)>) {
        let ttl = self.cfg.shrunk(self.cfg.grant_ttl);
        for (f, seq) in acks {
            let Some(name) = self.consumer.name_of(f) else { continue };
            let Some(RenewAcked { sent, adopted, confirmed, expiry }) = self.consumer.renew_acked(&name, f, seq, ttl)
            else {
                continue;
            };
            if adopted && !self.consumer.any_adopted() {
                // The new coordinator acks: every grant renews every
                // grant_ttl/3 again, from this renewal (every grant not
                // waiting for an echo was renewed with it or later).
                self.timers.set(Timer::Renew, sent + self.cfg.grant_ttl / 3);
            }
            if confirmed {
                // (safety) The local client's lease is the grant's: it
                // ends `grant_ttl·(1−ρ)` after the send time of the latest
                // renewal the coordinator acked, never from the Granted's
                // arrival.
                self.locks.renew(now, &name, expiry, &mut self.out);
            } else if self.locks.grant_next(now, &name, f, expiry, false, &mut self.out).is_none() {
                // The local client left meanwhile (or the ack came too
                // late): give the grant back (consumer_serve does, as
                // nothing is held).
            } else {
                // A campaigner now leads: the coordinator's observers learn
                // it from here (elections.md), never before the grant.
                self.announce(&name);
            }
        }
        self.rearm_grant_expiry();
    }

    /// Announces `name`'s value to its grant's coordinator if it is a
    /// campaign whose value is not acknowledged yet.
    fn announce(&mut self, name: &LockName) {
        let term = self.term;
        let Some((to, fence)) = self.consumer.unannounced_of(name) else { return };
        if let Some(value) = self.locks.holder_value(name).map(str::to_owned) {
            self.send(to, Msg::Announce { term, fence, value });
        }
    }

    /// The coordinator acknowledged grant `fence`'s value.
    pub(super) fn on_announced(&mut self, fence: u128) {
        self.consumer.announced(fence);
    }

    pub(super) fn on_renew_refused(&mut self, now: Instant, fences: Vec<u128>) {
        for f in fences {
            if let Some(name) = self.consumer.name_of(f) {
                self.lose_grant(now, &name, "the coordinator refused the renewal");
            }
        }
    }

    pub(super) fn on_grant_expiry(&mut self, now: Instant) {
        let over: Vec<LockName> =
            self.consumer.grants.iter().filter(|(_, g)| now >= g.expiry).map(|(n, _)| n.clone()).collect();
        for name in over {
            self.out.event(ElEvent::LeaseExpired);
            self.lose_grant(now, &name, "grant lease expired");
        }
        self.rearm_grant_expiry();
    }

    fn lose_grant(&mut self, now: Instant, name: &LockName, why: &str) {
        self.take_grant(name);
        self.locks.lose(now, name, why, &mut self.out);
    }
}
