//! The local lock queue: FIFO waiters with deadlines, one holder, batches,
//! revocation. Sans-IO; the embedding core supplies time, token and fences.
//!
//! How a core drives it:
//!
//! - feed it [`request`](LocalLocks::request) and
//!   [`client_gone`](LocalLocks::client_gone), and wake it at
//!   [`poll_timeout`](LocalLocks::poll_timeout) with
//!   [`handle_timeout`](LocalLocks::handle_timeout);
//! - ask for the cluster-wide token while [`has_waiters`](LocalLocks::has_waiters),
//!   and keep it while [`is_held`](LocalLocks::is_held);
//! - when the token arrives call [`token_arrived`](LocalLocks::token_arrived), then
//!   [`grant_next`](LocalLocks::grant_next) with a fresh fence and the end of
//!   the core's lease whenever nothing is held (`batch_only` if it has a
//!   `next` to pass the token to), and pass the token on once
//!   [`batch_remaining`](LocalLocks::batch_remaining) is 0 and nothing is held;
//! - call [`renew`](LocalLocks::renew) whenever the core's lease moves;
//! - call [`lose`](LocalLocks::lose) when the token is gone from under it and
//!   [`shutdown`](LocalLocks::shutdown) when leaving;
//! - every call that answers clients takes the core's output buffer
//!   (anything that is a [`LockOut`], e.g. the core's `ftcore::Outbox`) and
//!   pushes its replies and events into it, in order.
//!
//! Deadlines. A waiter's deadline is its arrival plus its `timeout_ms`, and a
//! deadline equal to `now` has passed: `handle_timeout(now)` times out every
//! waiter whose deadline is `<= now`, and `grant_next(now, ..)` first times
//! out the same waiters, so a waiter is never granted at or after its
//! deadline. `timeout_ms: 0` is a try-lock: its deadline is its arrival
//! plus the daemon's [`LocksConfig::try_window`] (one request round trip).
//! With a zero window it is the one exception: such a
//! waiter may still be granted by a `grant_next` at the very instant it
//! arrived (the core calls `grant_next` right after `request`, before the
//! driver calls `handle_timeout`); if that grant does not happen, the next
//! `handle_timeout` or a `grant_next` at a later instant times it out
//! (`poll_timeout` returns its arrival instant, so the driver wakes at once).
//!
//! Leases (reliability.md, Pauses and leases). Every hold is a lease: it
//! ends at its `lease_until` (given with the grant, moved by each
//! [`renew`](LocalLocks::renew) and told to the client as `Renewed`) unless
//! the client releases first. The client shares the host's clock and stops
//! by then on its own (ftctl kills CMD), so the hold ends here at that
//! instant too (`LockLost{"lease expired"}`, event `Expired`) and the lock
//! may move on. A revoked holder (`max_hold`) or one whose token was lost
//! gets no more `Renewed`.
//!
//! Each Acquire ends with exactly one terminal reply unless its client
//! disconnects: `Refused`, `TimedOut`, `Released` (it gave up waiting), or
//! `Granted` followed (after any `Renewed`) by `Released` or `LockLost`. A
//! holder that got `LockLost` gets no second one; a `Release` it sends while
//! its revoked hold lasts is acknowledged with `Released` (that answers the
//! Release request), and a `Release` after its hold ended is
//! `Refused{"not holding the lock"}`.

use std::collections::VecDeque;
use std::time::Duration;

use ftcore::{ClientId, EventSink, ReplySink};
use timer::{Instant, Lease, TimerTable};

use crate::{LockInfo, LockName, LockReply, LockRequest};

const QUEUE_FULL: &str = "queue full";
const ALREADY_WAITING: &str = "already waiting for the lock";
const ALREADY_HOLDING: &str = "already holding the lock";
const NOT_HOLDING: &str = "not holding the lock";
const SHUTTING_DOWN: &str = "daemon is shutting down";
const HELD_TOO_LONG: &str = "held longer than max_hold_ms";
const LEASE_EXPIRED: &str = "lease expired: the daemon could not renew it in time";
const NO_NAMES: &str = "this daemon serves one unnamed lock: named locks are not supported (docs/named-locks.md)";
/// What every daemon but electd says to a campaign or an observe.
pub const NO_ELECTIONS: &str = "elections are served by electd: this daemon does not elect (docs/elections.md)";

/// Where [`LocalLocks`] pushes its replies and events: the embedding core's
/// output buffer (an `ftcore::Outbox` whose reply and event types convert
/// from [`LockReply`] and [`LockEvent`]).
pub trait LockOut: ReplySink<LockReply> + EventSink<LockEvent> {}

impl<T: ReplySink<LockReply> + EventSink<LockEvent>> LockOut for T {}

/// Limits of the local queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LocksConfig {
    /// Most clients waiting at once; more are refused (`Refused{"queue full"}`).
    pub max_queue: usize,
    /// Optional cap on one hold: at expiry the holder gets
    /// `LockLost{"held longer than max_hold_ms"}` and its lease is renewed
    /// no more; the lock is handed on once the client releases,
    /// disconnects, or its `lease_until` passes.
    pub max_hold: Option<Duration>,
    /// How long a try-lock (`timeout_ms: 0`) waits: one request round trip
    /// of the daemon (interfaces.md: "granted if the lock can be had within
    /// one request round trip"), so that it works from every node, not
    /// only where the token rests. Zero: granted only at its arrival
    /// instant.
    pub try_window: Duration,
}

/// How a hold ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseHow {
    /// The client sent `Release` (revoked or not).
    Released,
    /// The client's connection closed.
    Disconnected,
    /// The lease of a hold revoked after `max_hold` ran out.
    Revoked,
    /// The lease ran out without a renewal (the core could not renew it).
    Expired,
    /// The token was lost or superseded ([`LocalLocks::lose`]).
    Lost,
}

/// What happened, for metrics and invariant checkers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LockEvent {
    /// A client was granted the lock.
    Granted {
        /// The new holder.
        client: ClientId,
        /// Its fence.
        fence: u128,
        /// How long it waited in the queue.
        waited: Duration,
        /// The end of its lease.
        lease_until: Instant,
    },
    /// The holder's lease moved.
    Renewed {
        /// The holder.
        client: ClientId,
        /// Its fence.
        fence: u128,
        /// The new end of its lease.
        lease_until: Instant,
    },
    /// A hold ended; the lock is free.
    Released {
        /// The former holder.
        client: ClientId,
        /// The fence it held.
        fence: u128,
        /// How long it held the lock.
        held: Duration,
        /// Why the hold ended.
        how: ReleaseHow,
    },
    /// A waiter reached its deadline without a grant.
    TimedOut {
        /// The waiter.
        client: ClientId,
        /// How long it waited.
        waited: Duration,
    },
    /// The holder exceeded `max_hold` and was sent `LockLost`; its hold lasts
    /// until it releases, disconnects or its lease ends.
    Revoking {
        /// The holder.
        client: ClientId,
        /// Its fence.
        fence: u128,
    },
}

/// The deadlines the queue keeps; ties fire in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Timer {
    /// The holder reaches `max_hold`.
    MaxHold,
    /// The holder's lease ends.
    LeaseEnd,
    /// A waiter's deadline.
    Wait(ClientId),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Waiter {
    client: ClientId,
    since: Instant,
    /// Queued when the token last arrived: served before the token moves on.
    in_batch: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Hold {
    client: ClientId,
    fence: u128,
    since: Instant,
    /// The end of its lease (the client's deadline).
    lease_until: Instant,
    /// Already sent `LockLost` (max_hold passed, or the token was lost): no
    /// more renewals.
    revoked: bool,
    /// The token was lost ([`LocalLocks::lose`]): the hold lasts until its
    /// lease ends (its client may run until then), then ends as `Lost`.
    lost: bool,
}

/// The local clients of one daemon: a FIFO queue, at most one holder, and
/// the replies and events they cause.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LocalLocks {
    cfg: LocksConfig,
    waiters: VecDeque<Waiter>,
    hold: Option<Hold>,
    timers: TimerTable<Timer>,
    shutting_down: bool,
}

impl LocalLocks {
    /// An empty queue with nothing held.
    pub fn new(cfg: LocksConfig) -> Self {
        LocalLocks { cfg, waiters: VecDeque::new(), hold: None, timers: TimerTable::new(), shutting_down: false }
    }

    /// A client request. `Acquire` queues the client (FIFO, deadline
    /// `now + timeout_ms`) or refuses it, changing nothing, if it already
    /// waits or holds (a revoked hold included), the daemon is shutting down,
    /// or the queue is full. `Release` ends the client's hold (`Released`
    /// reply and event), or its wait (`Released` reply), or is refused.
    pub fn request(&mut self, now: Instant, client: ClientId, req: LockRequest, out: &mut impl LockOut) {
        match req {
            LockRequest::Acquire { timeout_ms } => self.acquire(now, client, Duration::from_millis(timeout_ms), out),
            LockRequest::Release => self.release(now, client, out),
            // One unnamed lock: a name is refused, changing nothing.
            LockRequest::AcquireNamed { .. } => self.refuse(client, NO_NAMES, out),
            LockRequest::Campaign { .. } | LockRequest::Observe { .. } => self.refuse(client, NO_ELECTIONS, out),
            LockRequest::ListLocks => {
                let info = LockInfo {
                    name: LockName::unnamed(),
                    held_fence: self.hold.as_ref().map(|h| h.fence),
                    last_fence: None,
                    waiters: u32::try_from(self.waiters.len()).unwrap_or(u32::MAX),
                };
                out.reply(client, LockReply::Locks { locks: vec![info], known: 1 });
            }
        }
    }

    /// Whether `client` waits or holds here (a revoked hold included).
    pub fn knows(&self, client: ClientId) -> bool {
        self.holds(client) || self.waiters.iter().any(|w| w.client == client)
    }

    /// Whether nobody waits or holds: the queue may be forgotten.
    pub fn is_idle(&self) -> bool {
        self.hold.is_none() && self.waiters.is_empty()
    }

    /// The client's connection closed: its hold ends (event `Disconnected`)
    /// or it leaves the queue. Nothing is replied; a second call does nothing.
    pub fn client_gone(&mut self, now: Instant, client: ClientId, out: &mut impl LockOut) {
        if self.holds(client) {
            self.end_hold(now, ReleaseHow::Disconnected, out);
        } else {
            self.remove_waiter(client);
        }
    }

    /// Whether any local client is waiting (the core should request the token).
    pub fn has_waiters(&self) -> bool {
        !self.waiters.is_empty()
    }

    /// Whether a local client holds the lock (the token must stay here),
    /// a revoked holder included until its hold ends.
    pub fn is_held(&self) -> bool {
        self.hold.is_some()
    }

    /// The token has arrived: the current batch becomes exactly the clients
    /// waiting now (replacing any earlier batch).
    pub fn token_arrived(&mut self, _now: Instant) {
        for w in &mut self.waiters {
            w.in_batch = true;
        }
    }

    /// Clients of the current batch still waiting.
    pub fn batch_remaining(&self) -> usize {
        self.waiters.iter().filter(|w| w.in_batch).count()
    }

    /// Times out the waiters whose deadline has passed, then, if nothing is
    /// held and `lease_until` is after `now`, grants the lock with `fence`
    /// and a lease ending at `lease_until` to the first waiter in FIFO order
    /// (of the current batch only, if `batch_only`) and returns it. `None`
    /// means `fence` was not used; then, if nothing is held and the lease
    /// was live, no waiter (of the batch, if `batch_only`) is left.
    ///
    /// Fences and leases are taken as given: the core must supply a larger
    /// fence for each grant, and a lease it can prove (its own lease on the
    /// token, on the host's clock).
    pub fn grant_next(
        &mut self,
        now: Instant,
        fence: u128,
        lease_until: Instant,
        batch_only: bool,
        out: &mut impl LockOut,
    ) -> Option<ClientId> {
        self.expire_waiters(now, out);
        if self.hold.is_some() || lease_until <= now {
            return None;
        }
        let idx = self.waiters.iter().position(|w| w.in_batch || !batch_only)?;
        let w = self.waiters.remove(idx)?;
        self.timers.cancel(Timer::Wait(w.client));
        if let Some(max_hold) = self.cfg.max_hold {
            // Same host, same clock: no drift between us and the client.
            self.timers.set(Timer::MaxHold, Lease::new(now, max_hold, 0).holder_valid_until());
        }
        self.timers.set(Timer::LeaseEnd, lease_until);
        self.hold = Some(Hold { client: w.client, fence, since: now, lease_until, revoked: false, lost: false });
        out.reply(w.client, LockReply::Granted { fence, lease_until_us: lease_until.as_micros() });
        out.event(LockEvent::Granted { client: w.client, fence, waited: now.saturating_since(w.since), lease_until });
        Some(w.client)
    }

    /// The core's lease now ends at `lease_until`: a holder not revoked
    /// whose lease this extends is told `Renewed` (event `Renewed`).
    /// Returns whether it was. A hold whose lease ended at or before `now`
    /// is not revived (its client has stopped by its own clock; the next
    /// `handle_timeout` ends it).
    pub fn renew(&mut self, now: Instant, lease_until: Instant, out: &mut impl LockOut) -> bool {
        let Some(h) = &mut self.hold else { return false };
        if h.revoked || lease_until <= h.lease_until || h.lease_until <= now {
            return false;
        }
        h.lease_until = lease_until;
        self.timers.set(Timer::LeaseEnd, lease_until);
        out.reply(h.client, LockReply::Renewed { lease_until_us: lease_until.as_micros() });
        out.event(LockEvent::Renewed { client: h.client, fence: h.fence, lease_until });
        true
    }

    /// The end of the current holder's lease.
    pub fn lease_until(&self) -> Option<Instant> {
        self.hold.as_ref().map(|h| h.lease_until)
    }

    /// The token is gone from under us: the holder, if any, gets
    /// `LockLost{reason}` (unless already revoked: it had its `LockLost`) and
    /// no more renewals. (safety) The hold lasts until its lease ends — the
    /// client stops by then, not before (ftctl: SIGTERM at once, SIGKILL
    /// at `lease_until`) — unless the client releases or disconnects first;
    /// it then ends (event `Lost`), and only then may this site grant
    /// again, whatever token it has by then. Waiters keep waiting; the
    /// batch, which belonged to the lost token, is dropped.
    pub fn lose(&mut self, now: Instant, reason: &str, out: &mut impl LockOut) {
        if let Some(h) = &mut self.hold {
            if !h.revoked {
                out.reply(h.client, LockReply::LockLost { reason: reason.to_owned() });
            }
            h.revoked = true;
            h.lost = true;
            self.timers.cancel(Timer::MaxHold);
            if h.lease_until <= now {
                self.end_hold(now, ReleaseHow::Lost, out);
            }
        }
        for w in &mut self.waiters {
            w.in_batch = false;
        }
    }

    /// [`lose`](Self::lose) for a core that grants without leases (the
    /// stage before leases, which mutation tests replay): there is no lease
    /// end to wait for, so the hold ends at once (event `Lost`).
    pub fn lose_at_once(&mut self, now: Instant, reason: &str, out: &mut impl LockOut) {
        self.lose(now, reason, out);
        if self.hold.as_ref().is_some_and(|h| h.lost) {
            self.end_hold(now, ReleaseHow::Lost, out);
        }
    }

    /// The daemon is leaving: every waiter is refused, and every later
    /// `Acquire`; a holder keeps its hold until it releases, disconnects or
    /// its lease ends.
    /// Returns whether something is still held.
    pub fn shutdown(&mut self, _now: Instant, out: &mut impl LockOut) -> bool {
        self.shutting_down = true;
        while let Some(w) = self.waiters.pop_front() {
            self.timers.cancel(Timer::Wait(w.client));
            self.refuse(w.client, SHUTTING_DOWN, out);
        }
        self.is_held()
    }

    /// Handles every deadline `<= now`, earliest first: waiters time out,
    /// a holder past `max_hold` gets `LockLost` (event `Revoking`) and no
    /// more renewals, and a hold whose lease has run out ends (event `Lost`
    /// if its token was lost, `Revoked` if it was revoked, else `Expired`
    /// after a `LockLost{"lease expired"}`).
    pub fn handle_timeout(&mut self, now: Instant, out: &mut impl LockOut) {
        while let Some(t) = self.timers.pop_expired(now) {
            match t {
                Timer::Wait(client) => self.time_out(now, client, out),
                Timer::MaxHold => {
                    if let Some(h) = self.hold.as_mut().filter(|h| !h.revoked) {
                        h.revoked = true;
                        out.reply(h.client, LockReply::LockLost { reason: HELD_TOO_LONG.to_owned() });
                        out.event(LockEvent::Revoking { client: h.client, fence: h.fence });
                    }
                }
                Timer::LeaseEnd => {
                    if let Some(h) = &self.hold {
                        let how = if h.lost {
                            ReleaseHow::Lost
                        } else if h.revoked {
                            ReleaseHow::Revoked
                        } else {
                            out.reply(h.client, LockReply::LockLost { reason: LEASE_EXPIRED.to_owned() });
                            ReleaseHow::Expired
                        };
                        self.end_hold(now, how, out);
                    }
                }
            }
        }
    }

    /// The earliest deadline: a waiter's, the holder's `max_hold`, or the
    /// end of the holder's lease.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    /// The current holder and its fence.
    pub fn holder(&self) -> Option<(ClientId, u128)> {
        self.hold.as_ref().map(|h| (h.client, h.fence))
    }

    /// How many clients are waiting.
    pub fn waiting(&self) -> usize {
        self.waiters.len()
    }

    fn acquire(&mut self, now: Instant, client: ClientId, timeout: Duration, out: &mut impl LockOut) {
        let refusal = if self.holds(client) {
            Some(ALREADY_HOLDING)
        } else if self.waiters.iter().any(|w| w.client == client) {
            Some(ALREADY_WAITING)
        } else if self.shutting_down {
            Some(SHUTTING_DOWN)
        } else if self.waiters.len() >= self.cfg.max_queue {
            Some(QUEUE_FULL)
        } else {
            None
        };
        match refusal {
            Some(reason) => self.refuse(client, reason, out),
            None => {
                // A try-lock waits one request round trip.
                let timeout = if timeout.is_zero() { self.cfg.try_window } else { timeout };
                self.waiters.push_back(Waiter { client, since: now, in_batch: false });
                self.timers.set(Timer::Wait(client), now + timeout);
            }
        }
    }

    fn release(&mut self, now: Instant, client: ClientId, out: &mut impl LockOut) {
        if self.holds(client) {
            out.reply(client, LockReply::Released);
            self.end_hold(now, ReleaseHow::Released, out);
        } else if self.remove_waiter(client).is_some() {
            out.reply(client, LockReply::Released);
        } else {
            self.refuse(client, NOT_HOLDING, out);
        }
    }

    fn holds(&self, client: ClientId) -> bool {
        self.hold.as_ref().is_some_and(|h| h.client == client)
    }

    fn refuse(&mut self, client: ClientId, reason: &str, out: &mut impl LockOut) {
        out.reply(client, LockReply::Refused { reason: reason.to_owned() });
    }

    fn remove_waiter(&mut self, client: ClientId) -> Option<Waiter> {
        let idx = self.waiters.iter().position(|w| w.client == client)?;
        self.timers.cancel(Timer::Wait(client));
        self.waiters.remove(idx)
    }

    fn time_out(&mut self, now: Instant, client: ClientId, out: &mut impl LockOut) {
        if let Some(w) = self.remove_waiter(client) {
            out.reply(client, LockReply::TimedOut);
            out.event(LockEvent::TimedOut { client, waited: now.saturating_since(w.since) });
        }
    }

    /// Times out, in FIFO order, the waiters whose deadline is `<= now`,
    /// except a try-lock (timeout 0) at its arrival instant.
    fn expire_waiters(&mut self, now: Instant, out: &mut impl LockOut) {
        let due: Vec<ClientId> = self
            .waiters
            .iter()
            .filter(|w| w.since < now && self.timers.get(Timer::Wait(w.client)).is_some_and(|at| at <= now))
            .map(|w| w.client)
            .collect();
        for client in due {
            self.time_out(now, client, out);
        }
    }

    fn end_hold(&mut self, now: Instant, how: ReleaseHow, out: &mut impl LockOut) {
        if let Some(h) = self.hold.take() {
            self.timers.cancel(Timer::MaxHold);
            self.timers.cancel(Timer::LeaseEnd);
            out.event(LockEvent::Released {
                client: h.client,
                fence: h.fence,
                held: now.saturating_since(h.since),
                how,
            });
        }
    }
}

#[cfg(test)]
mod tests;
