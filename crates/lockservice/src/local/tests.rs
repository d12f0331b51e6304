//! One test per rule of [`LocalLocks`], asserting the exact replies and
//! events, and a property test against a model of each client's view.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const T0: Instant = Instant::from_millis(1_000);

/// A lease end an hour after `T0`, past every instant a test looks at: for
/// grants whose lease the test does not care about.
const FAR: Instant = Instant::from_millis(1_000 + 3_600_000);

/// What a hold that ran out of lease is told.
const LEASE_EXPIRED_REASON: &str = "lease expired: the daemon could not renew it in time";

/// `ms` milliseconds after `T0`.
fn at(ms: u64) -> Instant {
    T0 + Duration::from_millis(ms)
}

/// One microsecond before `t`.
fn just_before(t: Instant) -> Instant {
    Instant::from_micros(t.as_micros() - 1)
}

fn c(id: u64) -> ClientId {
    ClientId(id)
}

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn cfg() -> LocksConfig {
    LocksConfig { max_queue: 8, max_hold: None, try_window: Duration::ZERO }
}

fn acquire(timeout_ms: u64) -> LockRequest {
    LockRequest::Acquire { timeout_ms }
}

fn granted(fence: u128, lease_until: Instant) -> LockReply {
    LockReply::Granted { fence, lease_until_us: lease_until.as_micros() }
}

fn renewed(lease_until: Instant) -> LockReply {
    LockReply::Renewed { lease_until_us: lease_until.as_micros() }
}

fn refused(reason: &str) -> LockReply {
    LockReply::Refused { reason: reason.to_owned() }
}

fn lock_lost(reason: &str) -> LockReply {
    LockReply::LockLost { reason: reason.to_owned() }
}

fn ev_granted(client: u64, fence: u128, waited: u64, lease_until: Instant) -> LockEvent {
    LockEvent::Granted { client: c(client), fence, waited: ms(waited), lease_until }
}

fn ev_renewed(client: u64, fence: u128, lease_until: Instant) -> LockEvent {
    LockEvent::Renewed { client: c(client), fence, lease_until }
}

fn ev_released(client: u64, fence: u128, held: u64, how: ReleaseHow) -> LockEvent {
    LockEvent::Released { client: c(client), fence, held: ms(held), how }
}

fn ev_timed_out(client: u64, waited: u64) -> LockEvent {
    LockEvent::TimedOut { client: c(client), waited: ms(waited) }
}

/// The queue with the output buffer a core would own: the same calls as
/// [`LocalLocks`], minus the buffer argument.
#[derive(Clone, Debug, PartialEq)]
struct L {
    locks: LocalLocks,
    out: ftcore::Outbox<(), LockReply, LockEvent>,
    /// Replies and events taken from `out` but not yet asserted.
    replies: Vec<(ClientId, LockReply)>,
    events: Vec<LockEvent>,
}

impl std::ops::Deref for L {
    type Target = LocalLocks;
    fn deref(&self) -> &LocalLocks {
        &self.locks
    }
}

impl L {
    fn new(cfg: LocksConfig) -> Self {
        L { locks: LocalLocks::new(cfg), out: Default::default(), replies: Vec::new(), events: Vec::new() }
    }
    fn request(&mut self, now: Instant, client: ClientId, req: LockRequest) {
        self.locks.request(now, client, req, &mut self.out);
    }
    fn client_gone(&mut self, now: Instant, client: ClientId) {
        self.locks.client_gone(now, client, &mut self.out);
    }
    fn token_arrived(&mut self, now: Instant) {
        self.locks.token_arrived(now);
    }
    fn grant_next(&mut self, now: Instant, fence: u128, lease_until: Instant, batch_only: bool) -> Option<ClientId> {
        self.locks.grant_next(now, fence, lease_until, batch_only, &mut self.out)
    }
    /// Renews at the origin of time (before any lease ends); see
    /// `renew_after_the_lease_ended_revives_nothing` for a late renewal.
    fn renew(&mut self, lease_until: Instant) -> bool {
        self.locks.renew(Instant::ZERO, lease_until, &mut self.out)
    }
    fn lose(&mut self, now: Instant, reason: &str) {
        self.locks.lose(now, reason, &mut self.out);
    }
    fn shutdown(&mut self, now: Instant) -> bool {
        self.locks.shutdown(now, &mut self.out)
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.locks.handle_timeout(now, &mut self.out);
    }
    /// Moves what the queue pushed into the per-kind lists.
    fn sort_out(&mut self) {
        for o in self.out.drain() {
            match o {
                ftcore::Output::Reply { client, reply } => self.replies.push((client, reply)),
                ftcore::Output::Event(e) => self.events.push(e),
                other => panic!("LocalLocks pushed {other:?}"),
            }
        }
    }
}

fn replies(l: &mut L) -> Vec<(ClientId, LockReply)> {
    l.sort_out();
    std::mem::take(&mut l.replies)
}

fn events(l: &mut L) -> Vec<LockEvent> {
    l.sort_out();
    std::mem::take(&mut l.events)
}

/// Asserts the queued replies and events are exactly these, and drains them.
#[track_caller]
fn expect(l: &mut L, want_replies: &[(u64, LockReply)], want_events: &[LockEvent]) {
    let want: Vec<_> = want_replies.iter().map(|(id, r)| (c(*id), r.clone())).collect();
    assert_eq!(replies(l), want, "replies");
    assert_eq!(events(l), want_events, "events");
}

/// A queue where clients `ids` asked, in order, at `T0` with a 1 s timeout.
fn with_waiters(cfg: LocksConfig, ids: &[u64]) -> L {
    let mut l = L::new(cfg);
    for id in ids {
        l.request(T0, c(*id), acquire(1_000));
    }
    expect(&mut l, &[], &[]);
    l
}

#[test]
fn new_queue_is_empty() {
    let mut l = L::new(cfg());
    assert!(!l.has_waiters());
    assert!(!l.is_held());
    assert_eq!(l.waiting(), 0);
    assert_eq!(l.batch_remaining(), 0);
    assert_eq!(l.holder(), None);
    assert_eq!(l.poll_timeout(), None);
    assert_eq!(l.lease_until(), None);
    assert_eq!(l.grant_next(T0, 1, FAR, false), None);
    assert!(!l.renew(FAR));
    expect(&mut l, &[], &[]);
}

#[test]
fn grants_in_fifo_order_one_holder_at_a_time() {
    let mut l = with_waiters(cfg(), &[3, 1, 2]);
    assert!(l.has_waiters());
    assert_eq!(l.waiting(), 3);

    assert_eq!(l.grant_next(at(10), 7, FAR, false), Some(c(3)));
    expect(&mut l, &[(3, granted(7, FAR))], &[ev_granted(3, 7, 10, FAR)]);
    assert_eq!(l.holder(), Some((c(3), 7)));
    assert_eq!(l.lease_until(), Some(FAR));
    assert!(l.is_held());
    assert_eq!(l.waiting(), 2);

    // Held: nobody else is granted, and the fence is not used.
    assert_eq!(l.grant_next(at(11), 8, FAR, false), None);
    expect(&mut l, &[], &[]);

    l.request(at(20), c(3), LockRequest::Release);
    expect(&mut l, &[(3, LockReply::Released)], &[ev_released(3, 7, 10, ReleaseHow::Released)]);
    assert_eq!(l.grant_next(at(20), 8, FAR, false), Some(c(1)));
    expect(&mut l, &[(1, granted(8, FAR))], &[ev_granted(1, 8, 20, FAR)]);
    l.request(at(25), c(1), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released)], &[ev_released(1, 8, 5, ReleaseHow::Released)]);
    assert_eq!(l.grant_next(at(30), 9, FAR, false), Some(c(2)));
    expect(&mut l, &[(2, granted(9, FAR))], &[ev_granted(2, 9, 30, FAR)]);
    assert!(!l.has_waiters());
}

#[test]
fn second_acquire_while_waiting_is_refused_and_changes_nothing() {
    let mut l = with_waiters(cfg(), &[1, 2]);
    let before = l.clone();
    // Even a different timeout leaves the first deadline and the place in line.
    l.request(at(5), c(1), acquire(5_000));
    expect(&mut l, &[(1, refused("already waiting for the lock"))], &[]);
    assert_eq!(l, before);
    assert_eq!(l.grant_next(at(6), 1, FAR, false), Some(c(1)));
}

#[test]
fn second_acquire_while_holding_is_refused_and_changes_nothing() {
    let mut l = with_waiters(cfg(), &[1]);
    l.grant_next(T0, 1, FAR, false);
    expect(&mut l, &[(1, granted(1, FAR))], &[ev_granted(1, 1, 0, FAR)]);
    let before = l.clone();
    l.request(at(5), c(1), acquire(1_000));
    expect(&mut l, &[(1, refused("already holding the lock"))], &[]);
    assert_eq!(l, before);
}

#[test]
fn full_queue_refuses() {
    let mut l = with_waiters(LocksConfig { max_queue: 2, ..cfg() }, &[1, 2]);
    l.request(T0, c(3), acquire(1_000));
    expect(&mut l, &[(3, refused("queue full"))], &[]);
    assert_eq!(l.waiting(), 2);
    // The holder does not count against the queue.
    l.grant_next(T0, 1, FAR, false);
    expect(&mut l, &[(1, granted(1, FAR))], &[ev_granted(1, 1, 0, FAR)]);
    l.request(T0, c(3), acquire(1_000));
    expect(&mut l, &[], &[]);
    assert_eq!(l.waiting(), 2);

    let mut l = L::new(LocksConfig { max_queue: 0, ..cfg() });
    l.request(T0, c(1), acquire(1_000));
    expect(&mut l, &[(1, refused("queue full"))], &[]);
    assert!(!l.has_waiters());
}

#[test]
fn waiter_times_out_exactly_once_at_its_deadline() {
    let mut l = with_waiters(cfg(), &[1]);
    l.request(at(500), c(2), acquire(100));
    assert_eq!(l.poll_timeout(), Some(at(600)));
    l.handle_timeout(Instant::from_micros(at(600).as_micros() - 1));
    expect(&mut l, &[], &[]);
    // A deadline equal to now has passed.
    l.handle_timeout(at(600));
    expect(&mut l, &[(2, LockReply::TimedOut)], &[ev_timed_out(2, 100)]);
    assert_eq!(l.waiting(), 1);
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    l.handle_timeout(at(600));
    expect(&mut l, &[], &[]);
    // Late wake-up: the waited time is the real one.
    l.handle_timeout(at(1_500));
    expect(&mut l, &[(1, LockReply::TimedOut)], &[ev_timed_out(1, 1_500)]);
    assert_eq!(l.poll_timeout(), None);
    assert_eq!(l.grant_next(at(1_500), 1, FAR, false), None);
    // A timed-out client may ask again, and a Release now is refused.
    l.request(at(1_600), c(1), LockRequest::Release);
    expect(&mut l, &[(1, refused("not holding the lock"))], &[]);
}

#[test]
fn waiter_past_its_deadline_is_never_granted() {
    let mut l = L::new(cfg());
    l.request(T0, c(1), acquire(100));
    l.request(T0, c(2), acquire(200));
    l.request(T0, c(3), acquire(300));
    // The driver has not woken us yet: the grant attempt times the overdue
    // out first (deadline == now included), then grants.
    assert_eq!(l.grant_next(at(200), 1, FAR, false), Some(c(3)));
    expect(
        &mut l,
        &[(1, LockReply::TimedOut), (2, LockReply::TimedOut), (3, granted(1, FAR))],
        &[ev_timed_out(1, 200), ev_timed_out(2, 200), ev_granted(3, 1, 200, FAR)],
    );
    l.handle_timeout(at(1_000));
    expect(&mut l, &[], &[]);
}

#[test]
fn grant_attempt_while_held_still_times_out_the_overdue() {
    let mut l = with_waiters(cfg(), &[1]);
    l.request(T0, c(2), acquire(50));
    l.grant_next(T0, 1, FAR, false);
    expect(&mut l, &[(1, granted(1, FAR))], &[ev_granted(1, 1, 0, FAR)]);
    assert_eq!(l.grant_next(at(50), 2, FAR, false), None);
    expect(&mut l, &[(2, LockReply::TimedOut)], &[ev_timed_out(2, 50)]);
}

#[test]
fn try_lock_is_granted_in_the_step_it_arrives() {
    let mut l = L::new(cfg());
    l.request(T0, c(1), acquire(0));
    assert_eq!(l.poll_timeout(), Some(T0));
    assert_eq!(l.grant_next(T0, 4, FAR, false), Some(c(1)));
    expect(&mut l, &[(1, granted(4, FAR))], &[ev_granted(1, 4, 0, FAR)]);
    // Its wait deadline is gone; the lease end is left.
    assert_eq!(l.poll_timeout(), Some(FAR));
}

#[test]
fn try_lock_waits_one_round_trip_for_a_token_from_elsewhere() {
    // A node without the token: the try-lock waits the daemon's window
    // (one request round trip) and is granted when the token comes in it.
    let mut l = L::new(LocksConfig { try_window: ms(40), ..cfg() });
    l.request(T0, c(1), acquire(0));
    assert_eq!(l.poll_timeout(), Some(at(40)));
    l.handle_timeout(at(39));
    expect(&mut l, &[], &[]);
    assert_eq!(l.grant_next(at(30), 5, FAR, false), Some(c(1)));
    expect(&mut l, &[(1, granted(5, FAR))], &[ev_granted(1, 5, 30, FAR)]);

    // The lock held elsewhere past the window: timed out at its end.
    let mut l = L::new(LocksConfig { try_window: ms(40), ..cfg() });
    l.request(T0, c(2), acquire(0));
    l.handle_timeout(at(40));
    expect(&mut l, &[(2, LockReply::TimedOut)], &[ev_timed_out(2, 40)]);
}

#[test]
fn try_lock_that_cannot_be_granted_at_once_times_out_at_once() {
    // Lock held: the grant attempt fails, the wake-up at the same instant times it out.
    let mut l = with_waiters(cfg(), &[1]);
    l.grant_next(T0, 1, FAR, false);
    expect(&mut l, &[(1, granted(1, FAR))], &[ev_granted(1, 1, 0, FAR)]);
    l.request(at(10), c(2), acquire(0));
    assert_eq!(l.grant_next(at(10), 2, FAR, false), None);
    expect(&mut l, &[], &[]);
    assert_eq!(l.poll_timeout(), Some(at(10)));
    l.handle_timeout(at(10));
    expect(&mut l, &[(2, LockReply::TimedOut)], &[ev_timed_out(2, 0)]);

    // No token here (no grant attempt): the wake-up times it out.
    let mut l = L::new(cfg());
    l.request(T0, c(1), acquire(0));
    l.handle_timeout(T0);
    expect(&mut l, &[(1, LockReply::TimedOut)], &[ev_timed_out(1, 0)]);

    // Not in the batch: a batch-only attempt passes it over.
    let mut l = L::new(cfg());
    l.token_arrived(T0);
    l.request(T0, c(1), acquire(0));
    assert_eq!(l.grant_next(T0, 1, FAR, true), None);
    l.handle_timeout(T0);
    expect(&mut l, &[(1, LockReply::TimedOut)], &[ev_timed_out(1, 0)]);

    // A grant attempt at a later instant (the wake-up was late) times it out.
    let mut l = L::new(cfg());
    l.request(T0, c(1), acquire(0));
    assert_eq!(l.grant_next(T0 + Duration::from_micros(1), 1, FAR, false), None);
    expect(
        &mut l,
        &[(1, LockReply::TimedOut)],
        &[LockEvent::TimedOut { client: c(1), waited: Duration::from_micros(1) }],
    );
}

#[test]
fn batch_is_frozen_when_the_token_arrives() {
    let mut l = with_waiters(cfg(), &[1, 2]);
    assert_eq!(l.batch_remaining(), 0);
    l.token_arrived(at(1));
    assert_eq!(l.batch_remaining(), 2);
    l.request(at(2), c(3), acquire(1_000));
    assert_eq!(l.batch_remaining(), 2);

    assert_eq!(l.grant_next(at(3), 1, FAR, true), Some(c(1)));
    assert_eq!(l.batch_remaining(), 1);
    l.request(at(4), c(1), LockRequest::Release);
    assert_eq!(l.grant_next(at(4), 2, FAR, true), Some(c(2)));
    assert_eq!(l.batch_remaining(), 0);
    l.request(at(5), c(2), LockRequest::Release);
    expect(
        &mut l,
        &[(1, granted(1, FAR)), (1, LockReply::Released), (2, granted(2, FAR)), (2, LockReply::Released)],
        &[
            ev_granted(1, 1, 3, FAR),
            ev_released(1, 1, 1, ReleaseHow::Released),
            ev_granted(2, 2, 4, FAR),
            ev_released(2, 2, 1, ReleaseHow::Released),
        ],
    );
    // The later arrival waits for the next batch...
    assert_eq!(l.grant_next(at(5), 3, FAR, true), None);
    expect(&mut l, &[], &[]);
    assert!(l.has_waiters());
    // ... which the next token arrival starts.
    l.token_arrived(at(6));
    assert_eq!(l.batch_remaining(), 1);
    assert_eq!(l.grant_next(at(6), 3, FAR, true), Some(c(3)));
    expect(&mut l, &[(3, granted(3, FAR))], &[ev_granted(3, 3, 4, FAR)]);
}

#[test]
fn without_batch_only_later_arrivals_are_granted_too() {
    let mut l = with_waiters(cfg(), &[1]);
    l.token_arrived(T0);
    l.request(T0, c(2), acquire(1_000));
    l.grant_next(T0, 1, FAR, false);
    l.request(T0, c(1), LockRequest::Release);
    assert_eq!(l.batch_remaining(), 0);
    assert_eq!(l.grant_next(T0, 2, FAR, false), Some(c(2)));
}

#[test]
fn batch_shrinks_when_its_waiters_leave() {
    let mut l = L::new(cfg());
    l.request(T0, c(1), acquire(100));
    l.request(T0, c(2), acquire(1_000));
    l.request(T0, c(3), acquire(1_000));
    l.request(T0, c(4), acquire(1_000));
    l.token_arrived(T0);
    assert_eq!(l.batch_remaining(), 4);
    l.handle_timeout(at(100));
    assert_eq!(l.batch_remaining(), 3);
    l.client_gone(at(101), c(2));
    assert_eq!(l.batch_remaining(), 2);
    l.request(at(102), c(3), LockRequest::Release);
    assert_eq!(l.batch_remaining(), 1);
    expect(&mut l, &[(1, LockReply::TimedOut), (3, LockReply::Released)], &[ev_timed_out(1, 100)]);
    assert_eq!(l.grant_next(at(103), 1, FAR, true), Some(c(4)));
    assert_eq!(l.batch_remaining(), 0);
}

#[test]
fn release_by_holder_waiter_and_stranger() {
    let mut l = with_waiters(cfg(), &[1, 2]);
    l.grant_next(T0, 1, FAR, false);
    expect(&mut l, &[(1, granted(1, FAR))], &[ev_granted(1, 1, 0, FAR)]);

    // A waiter stops waiting: reply, no event.
    l.request(at(1), c(2), LockRequest::Release);
    expect(&mut l, &[(2, LockReply::Released)], &[]);
    assert!(!l.has_waiters());
    // Its deadline is gone; the holder's lease end is left.
    assert_eq!(l.poll_timeout(), Some(FAR));

    // Neither holding nor waiting.
    l.request(at(2), c(9), LockRequest::Release);
    expect(&mut l, &[(9, refused("not holding the lock"))], &[]);

    // The holder.
    l.request(at(3), c(1), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released)], &[ev_released(1, 1, 3, ReleaseHow::Released)]);
    assert!(!l.is_held());
    // Its lease end went with it.
    assert_eq!(l.poll_timeout(), None);
    assert_eq!(l.lease_until(), None);

    // Twice.
    l.request(at(4), c(1), LockRequest::Release);
    expect(&mut l, &[(1, refused("not holding the lock"))], &[]);
}

#[test]
fn client_gone_releases_or_dequeues_silently_and_is_idempotent() {
    let mut l = with_waiters(cfg(), &[1, 2, 3]);
    l.grant_next(T0, 1, FAR, false);
    expect(&mut l, &[(1, granted(1, FAR))], &[ev_granted(1, 1, 0, FAR)]);

    l.client_gone(at(5), c(1));
    expect(&mut l, &[], &[ev_released(1, 1, 5, ReleaseHow::Disconnected)]);
    assert!(!l.is_held());
    l.client_gone(at(6), c(1));
    expect(&mut l, &[], &[]);

    l.client_gone(at(7), c(2));
    expect(&mut l, &[], &[]);
    assert_eq!(l.waiting(), 1);
    l.client_gone(at(8), c(2));
    l.client_gone(at(8), c(42));
    expect(&mut l, &[], &[]);
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    assert_eq!(l.grant_next(at(9), 2, FAR, false), Some(c(3)));
}

/// Clients 1 and 2 waiting; 1 granted at 10 ms with fence 5 and a lease
/// ending at `lease_until`, under `max_hold`.
fn revoking(max_hold: u64, lease_until: Instant) -> L {
    let mut l = with_waiters(LocksConfig { max_hold: Some(ms(max_hold)), ..cfg() }, &[1, 2]);
    assert_eq!(l.grant_next(at(10), 5, lease_until, false), Some(c(1)));
    expect(&mut l, &[(1, granted(5, lease_until))], &[ev_granted(1, 5, 10, lease_until)]);
    l
}

#[test]
fn max_hold_revokes_then_the_lease_end_ends_the_hold() {
    let mut l = revoking(200, at(310));
    assert_eq!(l.poll_timeout(), Some(at(210)));
    l.handle_timeout(just_before(at(210)));
    expect(&mut l, &[], &[]);
    l.handle_timeout(at(210));
    expect(
        &mut l,
        &[(1, lock_lost("held longer than max_hold_ms"))],
        &[LockEvent::Revoking { client: c(1), fence: 5 }],
    );
    // Still held until its lease ends: the token stays, nobody else is granted.
    assert!(l.is_held());
    assert_eq!(l.holder(), Some((c(1), 5)));
    assert_eq!(l.grant_next(at(250), 6, FAR, false), None);
    l.request(at(250), c(1), acquire(1_000));
    expect(&mut l, &[(1, refused("already holding the lock"))], &[]);
    // Its lease is renewed no more.
    let before = l.clone();
    assert!(!l.renew(at(400)));
    expect(&mut l, &[], &[]);
    assert_eq!(l, before);
    assert_eq!(l.lease_until(), Some(at(310)));
    assert_eq!(l.poll_timeout(), Some(at(310)));
    l.handle_timeout(just_before(at(310)));
    expect(&mut l, &[], &[]);
    assert!(l.is_held());

    // The lease ends: silently, it had its LockLost.
    l.handle_timeout(at(310));
    expect(&mut l, &[], &[ev_released(1, 5, 300, ReleaseHow::Revoked)]);
    assert!(!l.is_held());
    assert_eq!(l.lease_until(), None);
    // Its hold was revoked: a late Release is refused (LockLost was its answer).
    l.request(at(320), c(1), LockRequest::Release);
    expect(&mut l, &[(1, refused("not holding the lock"))], &[]);
    assert_eq!(l.grant_next(at(320), 6, FAR, false), Some(c(2)));
    expect(&mut l, &[(2, granted(6, FAR))], &[ev_granted(2, 6, 320, FAR)]);
    assert_eq!(l.poll_timeout(), Some(at(520)));
}

#[test]
fn revoked_holder_that_releases_hands_on_at_once() {
    let mut l = revoking(200, at(310));
    l.handle_timeout(at(210));
    expect(
        &mut l,
        &[(1, lock_lost("held longer than max_hold_ms"))],
        &[LockEvent::Revoking { client: c(1), fence: 5 }],
    );
    l.request(at(230), c(1), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released)], &[ev_released(1, 5, 220, ReleaseHow::Released)]);
    assert!(!l.is_held());
    // The lease end went with the hold.
    assert_eq!(l.lease_until(), None);
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    assert_eq!(l.grant_next(at(230), 6, FAR, false), Some(c(2)));
    expect(&mut l, &[(2, granted(6, FAR))], &[ev_granted(2, 6, 230, FAR)]);
    // The old lease end passes without a trace.
    l.handle_timeout(at(310));
    expect(&mut l, &[], &[]);
    assert_eq!(l.holder(), Some((c(2), 6)));
}

#[test]
fn revoked_holder_that_disconnects_hands_on_at_once() {
    let mut l = revoking(200, at(310));
    l.handle_timeout(at(210));
    let _ = (replies(&mut l), events(&mut l));
    l.client_gone(at(240), c(1));
    expect(&mut l, &[], &[ev_released(1, 5, 230, ReleaseHow::Disconnected)]);
    assert!(!l.is_held());
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    assert_eq!(l.grant_next(at(240), 6, FAR, false), Some(c(2)));
    expect(&mut l, &[(2, granted(6, FAR))], &[ev_granted(2, 6, 240, FAR)]);
}

#[test]
fn late_wake_up_revokes_and_ends_the_lease_in_one_step() {
    // Both max_hold (210) and the lease end (250) passed: LockLost for
    // max_hold first, then the revoked hold ends silently.
    let mut l = revoking(200, at(250));
    l.handle_timeout(at(260));
    expect(
        &mut l,
        &[(1, lock_lost("held longer than max_hold_ms"))],
        &[LockEvent::Revoking { client: c(1), fence: 5 }, ev_released(1, 5, 250, ReleaseHow::Revoked)],
    );
    assert!(!l.is_held());
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
}

#[test]
fn lease_ending_at_max_hold_gives_one_lock_lost() {
    let mut l = revoking(200, at(210));
    assert_eq!(l.poll_timeout(), Some(at(210)));
    l.handle_timeout(just_before(at(210)));
    expect(&mut l, &[], &[]);
    l.handle_timeout(at(210));
    expect(
        &mut l,
        &[(1, lock_lost("held longer than max_hold_ms"))],
        &[LockEvent::Revoking { client: c(1), fence: 5 }, ev_released(1, 5, 200, ReleaseHow::Revoked)],
    );
    assert!(!l.is_held());
}

#[test]
fn lease_ending_before_max_hold_expires_the_hold() {
    let mut l = revoking(200, at(100));
    assert_eq!(l.poll_timeout(), Some(at(100)));
    l.handle_timeout(at(100));
    expect(&mut l, &[(1, lock_lost(LEASE_EXPIRED_REASON))], &[ev_released(1, 5, 90, ReleaseHow::Expired)]);
    // max_hold went with the hold.
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    l.handle_timeout(at(210));
    expect(&mut l, &[], &[]);
}

#[test]
fn release_before_max_hold_cancels_the_revocation() {
    let mut l = revoking(200, at(310));
    l.request(at(100), c(1), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released)], &[ev_released(1, 5, 90, ReleaseHow::Released)]);
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    l.handle_timeout(at(310));
    expect(&mut l, &[], &[]);
}

#[test]
fn lose_keeps_the_hold_until_its_lease_ends_and_keeps_the_waiters() {
    let mut l = with_waiters(cfg(), &[1, 2, 3]);
    l.token_arrived(T0);
    assert_eq!(l.grant_next(at(10), 1, at(100), true), Some(c(1)));
    expect(&mut l, &[(1, granted(1, at(100)))], &[ev_granted(1, 1, 10, at(100))]);

    // LockLost at once, but the hold lasts: the client may run until its
    // lease ends (ftctl kills CMD only then).
    l.lose(at(30), "token regenerated elsewhere");
    expect(&mut l, &[(1, lock_lost("token regenerated elsewhere"))], &[]);
    assert!(l.is_held());
    assert_eq!(l.holder(), Some((c(1), 1)));
    assert_eq!(l.lease_until(), Some(at(100)));
    assert_eq!(l.waiting(), 2);
    assert!(l.has_waiters());
    // The batch belonged to the lost token.
    assert_eq!(l.batch_remaining(), 0);
    assert_eq!(l.poll_timeout(), Some(at(100)));
    // Still holding: a second Acquire is refused.
    l.request(at(31), c(1), acquire(1_000));
    expect(&mut l, &[(1, refused("already holding the lock"))], &[]);
    // A second loss tells it nothing new and changes nothing.
    let before = l.clone();
    l.lose(at(40), "again");
    expect(&mut l, &[], &[]);
    assert_eq!(l, before);

    l.handle_timeout(just_before(at(100)));
    expect(&mut l, &[], &[]);
    assert!(l.is_held());
    // The lease ends: silently (it had its LockLost), as Lost.
    l.handle_timeout(at(100));
    expect(&mut l, &[], &[ev_released(1, 1, 90, ReleaseHow::Lost)]);
    assert!(!l.is_held());
    assert_eq!(l.lease_until(), None);
    assert_eq!(l.waiting(), 2);
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    // Its hold is over.
    l.request(at(101), c(1), LockRequest::Release);
    expect(&mut l, &[(1, refused("not holding the lock"))], &[]);

    // Nothing held: nothing happens.
    l.lose(at(102), "again");
    expect(&mut l, &[], &[]);
    assert_eq!(l.waiting(), 2);
}

#[test]
fn lose_of_a_revoked_holder_sends_no_second_lock_lost() {
    let mut l = revoking(200, at(310));
    l.handle_timeout(at(210));
    expect(
        &mut l,
        &[(1, lock_lost("held longer than max_hold_ms"))],
        &[LockEvent::Revoking { client: c(1), fence: 5 }],
    );
    l.lose(at(220), "superseded");
    expect(&mut l, &[], &[]);
    assert!(l.is_held());
    assert_eq!(l.poll_timeout(), Some(at(310)));
    // Its lease ends as a lost hold.
    l.handle_timeout(at(310));
    expect(&mut l, &[], &[ev_released(1, 5, 300, ReleaseHow::Lost)]);
    assert!(!l.is_held());
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
}

/// Clients 1 and 2 waiting; 1 granted at 10 ms with fence 1 and a lease
/// ending at 100 ms; the token lost at 20 ms.
fn lost_hold() -> L {
    let mut l = with_waiters(cfg(), &[1, 2]);
    assert_eq!(l.grant_next(at(10), 1, at(100), false), Some(c(1)));
    expect(&mut l, &[(1, granted(1, at(100)))], &[ev_granted(1, 1, 10, at(100))]);
    l.lose(at(20), "superseded");
    expect(&mut l, &[(1, lock_lost("superseded"))], &[]);
    l
}

#[test]
fn lost_hold_blocks_grant_next_until_its_lease_end() {
    let mut l = lost_hold();
    // A token here again (say regenerated): still nothing is granted, and
    // the fence is not used.
    l.token_arrived(at(30));
    assert_eq!(l.batch_remaining(), 1);
    assert_eq!(l.grant_next(at(30), 2, FAR, false), None);
    expect(&mut l, &[], &[]);
    assert_eq!(l.holder(), Some((c(1), 1)));

    // One microsecond before the lease end: nothing.
    l.handle_timeout(just_before(at(100)));
    expect(&mut l, &[], &[]);
    assert!(l.is_held());
    assert_eq!(l.grant_next(just_before(at(100)), 2, FAR, true), None);
    expect(&mut l, &[], &[]);
    assert_eq!(l.poll_timeout(), Some(at(100)));

    // At the lease end: the hold ends, then the next grant works.
    l.handle_timeout(at(100));
    expect(&mut l, &[], &[ev_released(1, 1, 90, ReleaseHow::Lost)]);
    assert!(!l.is_held());
    assert_eq!(l.grant_next(at(100), 2, FAR, true), Some(c(2)));
    expect(&mut l, &[(2, granted(2, FAR))], &[ev_granted(2, 2, 100, FAR)]);
    assert_eq!(l.batch_remaining(), 0);
}

#[test]
fn release_during_a_lost_hold_ends_it_at_once() {
    let mut l = lost_hold();
    l.request(at(40), c(1), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released)], &[ev_released(1, 1, 30, ReleaseHow::Released)]);
    assert!(!l.is_held());
    // The lease end went with the hold.
    assert_eq!(l.lease_until(), None);
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    assert_eq!(l.grant_next(at(40), 2, FAR, false), Some(c(2)));
    expect(&mut l, &[(2, granted(2, FAR))], &[ev_granted(2, 2, 40, FAR)]);
    // The old lease end passes without a trace.
    l.handle_timeout(at(100));
    expect(&mut l, &[], &[]);
    assert_eq!(l.holder(), Some((c(2), 2)));
    // A second Release is refused.
    l.request(at(101), c(1), LockRequest::Release);
    expect(&mut l, &[(1, refused("not holding the lock"))], &[]);
}

#[test]
fn disconnect_during_a_lost_hold_ends_it_at_once() {
    let mut l = lost_hold();
    l.client_gone(at(50), c(1));
    expect(&mut l, &[], &[ev_released(1, 1, 40, ReleaseHow::Disconnected)]);
    assert!(!l.is_held());
    assert_eq!(l.lease_until(), None);
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    assert_eq!(l.grant_next(at(50), 2, FAR, false), Some(c(2)));
    expect(&mut l, &[(2, granted(2, FAR))], &[ev_granted(2, 2, 50, FAR)]);
    l.client_gone(at(51), c(1));
    l.handle_timeout(at(100));
    expect(&mut l, &[], &[]);
    assert_eq!(l.holder(), Some((c(2), 2)));
}

#[test]
fn lose_with_the_lease_already_over_ends_the_hold_at_once() {
    // The lease ends now (the driver has not woken us yet): LockLost with
    // the loss's reason, and the hold ends as Lost at once.
    let mut l = with_waiters(cfg(), &[1, 2]);
    assert_eq!(l.grant_next(at(10), 1, at(100), false), Some(c(1)));
    expect(&mut l, &[(1, granted(1, at(100)))], &[ev_granted(1, 1, 10, at(100))]);
    l.lose(at(100), "superseded");
    expect(&mut l, &[(1, lock_lost("superseded"))], &[ev_released(1, 1, 90, ReleaseHow::Lost)]);
    assert!(!l.is_held());
    assert_eq!(l.lease_until(), None);
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    // Nothing left for the wake-up.
    l.handle_timeout(at(100));
    expect(&mut l, &[], &[]);
    assert_eq!(l.grant_next(at(100), 2, FAR, false), Some(c(2)));
    expect(&mut l, &[(2, granted(2, FAR))], &[ev_granted(2, 2, 100, FAR)]);

    // Ended earlier: likewise, with the time it really held.
    let mut l = with_waiters(cfg(), &[1]);
    l.grant_next(at(10), 1, at(100), false);
    let _ = (replies(&mut l), events(&mut l));
    l.lose(at(150), "superseded");
    expect(&mut l, &[(1, lock_lost("superseded"))], &[ev_released(1, 1, 140, ReleaseHow::Lost)]);
    assert!(!l.is_held());

    // A revoked holder whose lease is over: no second LockLost.
    let mut l = revoking(200, at(310));
    l.handle_timeout(at(210));
    let _ = (replies(&mut l), events(&mut l));
    l.lose(at(310), "superseded");
    expect(&mut l, &[], &[ev_released(1, 5, 300, ReleaseHow::Lost)]);
    assert!(!l.is_held());
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
}

#[test]
fn lost_hold_gets_no_second_lock_lost_from_max_hold() {
    // max_hold would fire at 210; the token is lost at 100.
    let mut l = revoking(200, at(310));
    assert_eq!(l.poll_timeout(), Some(at(210)));
    l.lose(at(100), "superseded");
    expect(&mut l, &[(1, lock_lost("superseded"))], &[]);
    // max_hold went with the token: the lease end is the next deadline.
    assert_eq!(l.poll_timeout(), Some(at(310)));
    l.handle_timeout(at(210));
    expect(&mut l, &[], &[]);
    assert!(l.is_held());
    l.handle_timeout(at(310));
    expect(&mut l, &[], &[ev_released(1, 5, 300, ReleaseHow::Lost)]);
    assert!(!l.is_held());

    // A late wake-up past both deadlines: the hold ends, nothing more.
    let mut l = revoking(200, at(310));
    l.lose(at(100), "superseded");
    expect(&mut l, &[(1, lock_lost("superseded"))], &[]);
    l.handle_timeout(at(400));
    expect(&mut l, &[], &[ev_released(1, 5, 390, ReleaseHow::Lost)]);
    assert!(!l.is_held());
}

// ---- leases -------------------------------------------------------------

#[test]
fn grant_with_a_lease_already_over_is_refused() {
    let mut l = with_waiters(cfg(), &[1]);
    l.request(T0, c(2), acquire(10));
    // A lease ending now is over: nothing granted, the fence not used; the
    // overdue still time out.
    assert_eq!(l.grant_next(at(10), 1, at(10), false), None);
    expect(&mut l, &[(2, LockReply::TimedOut)], &[ev_timed_out(2, 10)]);
    assert!(!l.is_held());
    assert_eq!(l.lease_until(), None);
    assert_eq!(l.waiting(), 1);
    // One that ended earlier, likewise.
    assert_eq!(l.grant_next(at(10), 1, at(5), false), None);
    expect(&mut l, &[], &[]);
    assert_eq!(l.waiting(), 1);
    // One microsecond of lease left is enough.
    let lease = at(10) + Duration::from_micros(1);
    assert_eq!(l.grant_next(at(10), 1, lease, false), Some(c(1)));
    expect(&mut l, &[(1, granted(1, lease))], &[ev_granted(1, 1, 10, lease)]);
    assert_eq!(l.lease_until(), Some(lease));
    assert_eq!(l.poll_timeout(), Some(lease));

    // A try-lock arriving while the lease is over is not granted and times out.
    let mut l = L::new(cfg());
    l.request(T0, c(1), acquire(0));
    assert_eq!(l.grant_next(T0, 1, T0, false), None);
    expect(&mut l, &[], &[]);
    l.handle_timeout(T0);
    expect(&mut l, &[(1, LockReply::TimedOut)], &[ev_timed_out(1, 0)]);
}

#[test]
fn renew_extends_the_lease_and_replies_renewed() {
    let mut l = with_waiters(cfg(), &[1]);
    assert_eq!(l.grant_next(at(10), 3, at(100), false), Some(c(1)));
    expect(&mut l, &[(1, granted(3, at(100)))], &[ev_granted(1, 3, 10, at(100))]);
    assert_eq!(l.lease_until(), Some(at(100)));
    assert_eq!(l.poll_timeout(), Some(at(100)));

    assert!(l.renew(at(150)));
    expect(&mut l, &[(1, renewed(at(150)))], &[ev_renewed(1, 3, at(150))]);
    assert_eq!(l.lease_until(), Some(at(150)));
    assert_eq!(l.holder(), Some((c(1), 3)));
    assert_eq!(l.poll_timeout(), Some(at(150)));
    // The old lease end is no deadline any more.
    l.handle_timeout(at(100));
    expect(&mut l, &[], &[]);
    assert!(l.is_held());
    // Any extension counts, one microsecond included.
    let later = at(150) + Duration::from_micros(1);
    assert!(l.renew(later));
    expect(&mut l, &[(1, renewed(later))], &[ev_renewed(1, 3, later)]);
    l.handle_timeout(at(150));
    expect(&mut l, &[], &[]);
    assert!(l.is_held());

    // Released: nothing left to renew, and no deadline.
    l.request(at(120), c(1), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released)], &[ev_released(1, 3, 110, ReleaseHow::Released)]);
    assert_eq!(l.poll_timeout(), None);
    assert!(!l.renew(at(200)));
    expect(&mut l, &[], &[]);
}

#[test]
fn renew_after_the_lease_ended_revives_nothing() {
    let mut l = with_waiters(cfg(), &[1]);
    assert_eq!(l.grant_next(at(10), 5, at(100), false), Some(c(1)));
    l.sort_out();
    let _ = replies(&mut l);
    let _ = events(&mut l);
    // The driver woke late: the ack that would extend the lease is handled
    // before the lease's end. The client has stopped by its own clock.
    assert!(!l.locks.renew(at(100), at(200), &mut l.out));
    assert!(!l.locks.renew(at(150), at(200), &mut l.out));
    expect(&mut l, &[], &[]);
    assert_eq!(l.lease_until(), Some(at(100)));
    // Just before its end it still counts.
    let mut l = with_waiters(cfg(), &[1]);
    l.grant_next(at(10), 5, at(100), false);
    let _ = replies(&mut l);
    let _ = events(&mut l);
    assert!(l.locks.renew(just_before(at(100)), at(200), &mut l.out));
}

#[test]
fn renew_to_an_earlier_or_equal_end_does_nothing() {
    let mut l = with_waiters(cfg(), &[1, 2]);
    assert_eq!(l.grant_next(at(10), 3, at(100), false), Some(c(1)));
    expect(&mut l, &[(1, granted(3, at(100)))], &[ev_granted(1, 3, 10, at(100))]);
    let before = l.clone();
    assert!(!l.renew(at(100)));
    assert!(!l.renew(just_before(at(100))));
    assert!(!l.renew(at(5)));
    expect(&mut l, &[], &[]);
    assert_eq!(l, before);
    assert_eq!(l.lease_until(), Some(at(100)));
    assert_eq!(l.poll_timeout(), Some(at(100)));

    // Nothing held (waiters only): nothing to renew.
    let mut l = with_waiters(cfg(), &[1]);
    let before = l.clone();
    assert!(!l.renew(FAR));
    expect(&mut l, &[], &[]);
    assert_eq!(l, before);
}

#[test]
fn no_renewed_after_lock_lost() {
    // Revoked (max_hold): LockLost sent, renewals stop.
    let mut l = revoking(200, at(310));
    l.handle_timeout(at(210));
    let _ = (replies(&mut l), events(&mut l));
    let before = l.clone();
    assert!(!l.renew(FAR));
    expect(&mut l, &[], &[]);
    assert_eq!(l, before);

    // Lost token: LockLost sent, the hold lasts to its lease end unrenewed.
    let mut l = lost_hold();
    let before = l.clone();
    assert!(!l.renew(FAR));
    assert!(!l.locks.renew(at(30), FAR, &mut l.out));
    expect(&mut l, &[], &[]);
    assert_eq!(l, before);
    assert_eq!(l.lease_until(), Some(at(100)));
    l.handle_timeout(at(100));
    expect(&mut l, &[], &[ev_released(1, 1, 90, ReleaseHow::Lost)]);
    assert!(!l.renew(FAR));
    expect(&mut l, &[], &[]);

    // Expired lease: the hold is over.
    let mut l = with_waiters(cfg(), &[1, 2]);
    l.grant_next(at(10), 1, at(100), false);
    let _ = (replies(&mut l), events(&mut l));
    l.handle_timeout(at(100));
    expect(&mut l, &[(1, lock_lost(LEASE_EXPIRED_REASON))], &[ev_released(1, 1, 90, ReleaseHow::Expired)]);
    assert!(!l.renew(FAR));
    expect(&mut l, &[], &[]);
}

#[test]
fn lease_end_without_renewal_ends_the_hold_exactly_at_lease_until() {
    let mut l = with_waiters(cfg(), &[1, 2]);
    assert_eq!(l.grant_next(at(10), 4, at(100), false), Some(c(1)));
    expect(&mut l, &[(1, granted(4, at(100)))], &[ev_granted(1, 4, 10, at(100))]);
    assert_eq!(l.poll_timeout(), Some(at(100)));

    // One microsecond before: still held, nobody else granted.
    l.handle_timeout(just_before(at(100)));
    expect(&mut l, &[], &[]);
    assert_eq!(l.holder(), Some((c(1), 4)));
    assert_eq!(l.grant_next(just_before(at(100)), 5, FAR, false), None);
    expect(&mut l, &[], &[]);
    assert_eq!(l.poll_timeout(), Some(at(100)));

    // At lease_until: LockLost, and the hold ends (Expired).
    l.handle_timeout(at(100));
    expect(&mut l, &[(1, lock_lost(LEASE_EXPIRED_REASON))], &[ev_released(1, 4, 90, ReleaseHow::Expired)]);
    assert!(!l.is_held());
    assert_eq!(l.lease_until(), None);
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    // Once: a second wake-up, a Release or a disconnect adds nothing.
    l.handle_timeout(at(100));
    expect(&mut l, &[], &[]);
    l.request(at(101), c(1), LockRequest::Release);
    expect(&mut l, &[(1, refused("not holding the lock"))], &[]);
    l.client_gone(at(102), c(1));
    expect(&mut l, &[], &[]);
    // The lock moves on.
    assert_eq!(l.grant_next(at(103), 5, FAR, false), Some(c(2)));
    expect(&mut l, &[(2, granted(5, FAR))], &[ev_granted(2, 5, 103, FAR)]);

    // A late wake-up ends it then, with the time it really held.
    let mut l = with_waiters(cfg(), &[1]);
    l.grant_next(at(10), 4, at(100), false);
    let _ = (replies(&mut l), events(&mut l));
    l.handle_timeout(at(150));
    expect(&mut l, &[(1, lock_lost(LEASE_EXPIRED_REASON))], &[ev_released(1, 4, 140, ReleaseHow::Expired)]);
}

#[test]
fn shutdown_refuses_waiters_and_keeps_the_holder() {
    let mut l = with_waiters(cfg(), &[1, 2, 3]);
    l.grant_next(T0, 1, FAR, false);
    expect(&mut l, &[(1, granted(1, FAR))], &[ev_granted(1, 1, 0, FAR)]);

    assert!(l.shutdown(at(5)));
    expect(&mut l, &[(2, refused("daemon is shutting down")), (3, refused("daemon is shutting down"))], &[]);
    assert_eq!(l.holder(), Some((c(1), 1)));
    assert!(!l.has_waiters());
    // Only the holder's lease end is left.
    assert_eq!(l.poll_timeout(), Some(FAR));
    // Newcomers are refused too.
    l.request(at(6), c(4), acquire(1_000));
    expect(&mut l, &[(4, refused("daemon is shutting down"))], &[]);
    assert!(l.shutdown(at(7)));
    expect(&mut l, &[], &[]);

    l.request(at(8), c(1), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released)], &[ev_released(1, 1, 8, ReleaseHow::Released)]);
    assert!(!l.shutdown(at(9)));

    let mut l = L::new(cfg());
    assert!(!l.shutdown(T0));
    expect(&mut l, &[], &[]);

    // A holder's lease still ends while the daemon is leaving.
    let mut l = with_waiters(cfg(), &[1]);
    l.grant_next(T0, 1, at(50), false);
    let _ = (replies(&mut l), events(&mut l));
    assert!(l.shutdown(at(5)));
    l.handle_timeout(at(50));
    expect(&mut l, &[(1, lock_lost(LEASE_EXPIRED_REASON))], &[ev_released(1, 1, 50, ReleaseHow::Expired)]);
    assert!(!l.shutdown(at(51)));
}

#[test]
fn poll_timeout_is_the_earliest_deadline() {
    let mut l = L::new(LocksConfig { max_hold: Some(ms(300)), ..cfg() });
    l.request(T0, c(1), acquire(500));
    l.request(T0, c(2), acquire(400));
    assert_eq!(l.poll_timeout(), Some(at(400)));
    l.grant_next(at(50), 1, FAR, false);
    assert_eq!(l.poll_timeout(), Some(at(350)));
    l.request(at(60), c(3), acquire(100));
    assert_eq!(l.poll_timeout(), Some(at(160)));
}

#[test]
fn poll_timeout_includes_the_lease_end() {
    // A holder alone: its lease end is the deadline.
    let mut l = with_waiters(cfg(), &[1]);
    l.grant_next(at(10), 1, at(70), false);
    assert_eq!(l.poll_timeout(), Some(at(70)));
    l.renew(at(90));
    assert_eq!(l.poll_timeout(), Some(at(90)));

    // With a waiter (400) and max_hold (350): the earliest of the three, as
    // renewals and the revocation move them.
    let mut l = L::new(LocksConfig { max_hold: Some(ms(300)), ..cfg() });
    l.request(T0, c(1), acquire(500));
    l.request(T0, c(2), acquire(400));
    l.grant_next(at(50), 1, at(200), false);
    assert_eq!(l.poll_timeout(), Some(at(200)));
    assert!(l.renew(at(380)));
    assert_eq!(l.poll_timeout(), Some(at(350)));
    l.handle_timeout(at(350));
    assert_eq!(l.poll_timeout(), Some(at(380)));
    l.handle_timeout(at(380));
    assert!(!l.is_held());
    assert_eq!(l.poll_timeout(), Some(at(400)));
    expect(
        &mut l,
        &[(1, granted(1, at(200))), (1, renewed(at(380))), (1, lock_lost("held longer than max_hold_ms"))],
        &[
            ev_granted(1, 1, 50, at(200)),
            ev_renewed(1, 1, at(380)),
            LockEvent::Revoking { client: c(1), fence: 1 },
            ev_released(1, 1, 330, ReleaseHow::Revoked),
        ],
    );
}

#[test]
fn huge_timeouts_and_times_do_not_overflow() {
    let mut l = L::new(LocksConfig { max_hold: Some(Duration::MAX), ..cfg() });
    let end = Instant::from_micros(u64::MAX);
    l.request(T0, c(1), acquire(u64::MAX));
    assert_eq!(l.poll_timeout(), Some(end));
    assert_eq!(l.grant_next(T0, 1, end, false), Some(c(1)));
    assert!(!l.renew(end));
    l.handle_timeout(end);
    l.handle_timeout(end);
    let _ = (replies(&mut l), events(&mut l));
    // Time going backwards (a broken driver) does not panic either.
    l.request(T0, c(1), acquire(u64::MAX));
    assert_eq!(l.grant_next(T0, 2, end, false), Some(c(1)));
    l.request(T0, c(1), LockRequest::Release);
    assert!(!l.is_held());
}

// ---- property test ------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire(usize, u64),
    Release(usize),
    Gone(usize, bool),
    /// Time passes and the driver wakes us.
    Tick(u64),
    /// Time passes without a wake-up (a late timer).
    Sleep(u64),
    /// The driver wakes us exactly at `poll_timeout` (at once if that passed).
    Wake,
    /// The driver wakes us one microsecond before `poll_timeout`.
    WakeJustBefore,
    TokenArrived,
    /// `grant_next` with the core's lease ending this many ms after now
    /// (before now if negative).
    Grant(bool, i64),
    /// The core's lease moves to this many ms after now (before if negative).
    Renew(i64),
    Lose,
    Shutdown,
}

const SLOTS: usize = 5;

fn arb_lease() -> impl Strategy<Value = i64> {
    // Mostly live, sometimes already over (0: ending now).
    prop_oneof![1 => -3i64..=0, 6 => 1i64..80]
}

fn arb_op() -> impl Strategy<Value = Op> {
    let slot = 0..SLOTS;
    let timeout = prop_oneof![Just(0u64), 1u64..40, Just(1_000)];
    prop_oneof![
        6 => (slot.clone(), timeout).prop_map(|(s, t)| Op::Acquire(s, t)),
        3 => slot.clone().prop_map(Op::Release),
        1 => (slot, any::<bool>()).prop_map(|(s, twice)| Op::Gone(s, twice)),
        4 => (0u64..30).prop_map(Op::Tick),
        1 => (0u64..30).prop_map(Op::Sleep),
        2 => Just(Op::Wake),
        1 => Just(Op::WakeJustBefore),
        2 => Just(Op::TokenArrived),
        5 => (any::<bool>(), arb_lease()).prop_map(|(b, d)| Op::Grant(b, d)),
        3 => arb_lease().prop_map(Op::Renew),
        2 => Just(Op::Lose),
    ]
}

fn arb_cfg() -> impl Strategy<Value = LocksConfig> {
    (0usize..5, proptest::option::of(0u64..50), prop_oneof![Just(0u64), 1u64..20]).prop_map(
        |(max_queue, max_hold, try_window)| LocksConfig {
            max_queue,
            max_hold: max_hold.map(ms),
            try_window: ms(try_window),
        },
    )
}

/// `now` moved by `d` ms (back if negative).
fn offset(now: Instant, d: i64) -> Instant {
    let us = d.unsigned_abs() * 1_000;
    if d >= 0 {
        now + Duration::from_micros(us)
    } else {
        Instant::from_micros(now.as_micros() - us)
    }
}

/// One client's view of its current Acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Episode {
    /// No Acquire outstanding (never asked, or had its terminal reply).
    Idle,
    /// Queued since, with this deadline.
    Waiting { since: Instant, deadline: Instant },
    /// Granted at this instant, not yet told otherwise.
    Holding { since: Instant },
    /// Told LockLost (max_hold, or the token was lost) while its hold lasts.
    Revoked,
}

/// The hold according to the events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ModelHold {
    client: ClientId,
    fence: u128,
    lease_until: Instant,
    /// Got `Revoking` (max_hold passed).
    revoked: bool,
    /// The token was lost while it lasted (`lose`): it lasts to its lease
    /// end unless the client releases or disconnects, then ends as `Lost`.
    lost: bool,
}

/// The model the property test checks every step against.
struct Model {
    episodes: BTreeMap<ClientId, Episode>,
    holder: Option<ModelHold>,
    last_fence: Option<u128>,
    gone: Vec<ClientId>,
}

impl Model {
    fn episode(&self, client: ClientId) -> Episode {
        self.episodes.get(&client).copied().unwrap_or(Episode::Idle)
    }

    fn set(&mut self, client: ClientId, e: Episode) {
        self.episodes.insert(client, e);
    }
}

fn run(cfg: LocksConfig, ops: Vec<Op>, shutdown_at: Option<usize>) -> Result<(), TestCaseError> {
    let mut l = L::new(cfg.clone());
    let mut m = Model { episodes: BTreeMap::new(), holder: None, last_fence: None, gone: Vec::new() };
    let mut slots: Vec<ClientId> = (0..SLOTS as u64).map(ClientId).collect();
    let mut next_id = SLOTS as u64;
    let mut now = T0;
    let mut fence = 0u128;

    for (i, op) in ops.into_iter().enumerate() {
        let op = if shutdown_at == Some(i) { Op::Shutdown } else { op };
        let mut granted_to = None;
        // The lease end the op hands in (grant or renewal).
        let mut lease_given = None;
        // The client the op is about, and its episode before.
        let subject = match op {
            Op::Acquire(s, _) | Op::Release(s) | Op::Gone(s, _) => Some(slots[s]),
            _ => None,
        };
        let before = subject.map(|c| m.episode(c));
        let holder_before = m.holder;
        let woke = matches!(op, Op::Tick(_) | Op::Wake | Op::WakeJustBefore);
        match op {
            Op::Acquire(s, t) => l.request(now, slots[s], acquire(t)),
            Op::Release(s) => l.request(now, slots[s], LockRequest::Release),
            Op::Gone(s, twice) => {
                l.client_gone(now, slots[s]);
                if twice {
                    l.client_gone(now, slots[s]);
                }
            }
            Op::Tick(d) => {
                now = now + ms(d);
                l.handle_timeout(now);
            }
            Op::Sleep(d) => now = now + ms(d),
            Op::Wake => {
                if let Some(t) = l.poll_timeout() {
                    now = now.max(t);
                }
                l.handle_timeout(now);
            }
            Op::WakeJustBefore => {
                if let Some(t) = l.poll_timeout() {
                    now = now.max(just_before(t));
                }
                l.handle_timeout(now);
            }
            Op::TokenArrived => l.token_arrived(now),
            Op::Grant(batch_only, d) => {
                let lease = offset(now, d);
                lease_given = Some(lease);
                granted_to = l.grant_next(now, fence + 1, lease, batch_only);
                if granted_to.is_some() {
                    prop_assert!(lease > now, "granted at {} with a lease over at {}", now, lease);
                    fence += 1;
                }
            }
            Op::Renew(d) => {
                let lease = offset(now, d);
                lease_given = Some(lease);
                // Only a holder not revoked nor lost, and only later.
                let want = m.holder.is_some_and(|h| !h.revoked && !h.lost && lease > h.lease_until);
                prop_assert_eq!(l.renew(lease), want, "renew to {} of {:?}", lease, m.holder);
            }
            Op::Lose => l.lose(now, "lost"),
            Op::Shutdown => {
                let held = l.shutdown(now);
                prop_assert_eq!(held, l.is_held());
            }
        }

        // Events first: they tell who holds.
        let mut released_how = None;
        for e in events(&mut l) {
            match e {
                LockEvent::Granted { client, fence: f, lease_until, .. } => {
                    prop_assert!(matches!(op, Op::Grant(..)), "grant outside grant_next: {:?}", op);
                    prop_assert_eq!(m.holder, None, "two holders");
                    prop_assert!(m.last_fence.is_none_or(|last| f > last), "fence {} not increasing", f);
                    prop_assert_eq!(Some(client), granted_to);
                    prop_assert_eq!(Some(lease_until), lease_given);
                    prop_assert!(lease_until > now, "granted at {} with a lease over at {}", now, lease_until);
                    m.holder = Some(ModelHold { client, fence: f, lease_until, revoked: false, lost: false });
                    m.last_fence = Some(f);
                }
                LockEvent::Renewed { client, fence: f, lease_until } => {
                    prop_assert!(matches!(op, Op::Renew(_)), "renewal outside renew: {:?}", op);
                    prop_assert_eq!(Some(lease_until), lease_given);
                    let Some(h) = &mut m.holder else {
                        return Err(TestCaseError::fail("Renewed with nothing held"));
                    };
                    prop_assert_eq!((h.client, h.fence), (client, f));
                    prop_assert!(!h.revoked, "renewed after revocation");
                    prop_assert!(!h.lost, "renewed after the token was lost");
                    prop_assert!(lease_until > h.lease_until, "renewal does not extend");
                    h.lease_until = lease_until;
                }
                LockEvent::Revoking { client, fence: f } => {
                    prop_assert!(woke, "revocation during {:?}", op);
                    let Some(h) = &mut m.holder else {
                        return Err(TestCaseError::fail("Revoking with nothing held"));
                    };
                    prop_assert_eq!((h.client, h.fence), (client, f));
                    prop_assert!(!h.revoked, "revoked twice");
                    prop_assert!(!h.lost, "revoked after the token was lost");
                    h.revoked = true;
                }
                LockEvent::Released { client, fence: f, how, .. } => {
                    let Some(h) = m.holder else {
                        return Err(TestCaseError::fail("Released with nothing held"));
                    };
                    prop_assert_eq!((h.client, h.fence), (client, f));
                    let want = match op {
                        Op::Release(_) => ReleaseHow::Released,
                        Op::Gone(..) => ReleaseHow::Disconnected,
                        Op::Lose => {
                            // Only a hold whose lease is over ends at once.
                            prop_assert!(
                                h.lease_until <= now,
                                "lost hold ended at {} before its lease end {}",
                                now,
                                h.lease_until
                            );
                            ReleaseHow::Lost
                        }
                        _ if woke => {
                            // A wake-up ends a hold only at its lease end, not before.
                            prop_assert!(
                                h.lease_until <= now,
                                "hold ended at {} before its lease end {}",
                                now,
                                h.lease_until
                            );
                            if h.lost {
                                ReleaseHow::Lost
                            } else if h.revoked {
                                ReleaseHow::Revoked
                            } else {
                                ReleaseHow::Expired
                            }
                        }
                        _ => return Err(TestCaseError::fail(format!("release during {op:?}"))),
                    };
                    prop_assert_eq!(how, want);
                    m.holder = None;
                    released_how = Some((client, how));
                }
                LockEvent::TimedOut { .. } => {}
            }
        }
        if let (Op::Lose, Some(h)) = (op, &mut m.holder) {
            // The hold lasts to its lease end, renewed no more.
            prop_assert!(h.lease_until > now, "lost hold kept past its lease end {} at {}", h.lease_until, now);
            h.lost = true;
        }

        let rs = replies(&mut l);
        for (client, r) in &rs {
            let client = *client;
            prop_assert!(!m.gone.contains(&client), "reply to a gone client");
            let ep = m.episode(client);
            match r {
                LockReply::Granted { fence: f, lease_until_us } => {
                    let Episode::Waiting { since, deadline } = ep else {
                        return Err(TestCaseError::fail(format!("Granted to {client} in {ep:?}")));
                    };
                    // Never at or after the deadline, except a try-lock at once.
                    prop_assert!(now < deadline || (now == since && since == deadline));
                    // Never with a lease at or before now.
                    prop_assert!(*lease_until_us > now.as_micros(), "Granted at {} until {}us", now, lease_until_us);
                    let h = m.holder.map(|h| (h.client, h.fence, h.lease_until.as_micros()));
                    prop_assert_eq!(h, Some((client, *f, *lease_until_us)));
                    m.set(client, Episode::Holding { since: now });
                }
                LockReply::Renewed { lease_until_us } => {
                    // Only to a holder told nothing else: never after LockLost.
                    prop_assert!(matches!(ep, Episode::Holding { .. }), "Renewed to {} in {:?}", client, ep);
                    prop_assert!(matches!(op, Op::Renew(_)));
                    let h = m.holder.map(|h| (h.client, h.lease_until.as_micros()));
                    prop_assert_eq!(h, Some((client, *lease_until_us)));
                }
                LockReply::TimedOut => {
                    let Episode::Waiting { deadline, .. } = ep else {
                        return Err(TestCaseError::fail(format!("TimedOut to {client} in {ep:?}")));
                    };
                    prop_assert!(deadline <= now);
                    prop_assert!(woke || matches!(op, Op::Grant(..)));
                    m.set(client, Episode::Idle);
                }
                LockReply::Released => {
                    prop_assert_eq!(subject, Some(client));
                    prop_assert!(matches!(op, Op::Release(_)));
                    prop_assert!(ep != Episode::Idle);
                    m.set(client, Episode::Idle);
                }
                LockReply::LockLost { reason } => {
                    let Episode::Holding { since } = ep else {
                        return Err(TestCaseError::fail(format!("LockLost to {client} in {ep:?}")));
                    };
                    match op {
                        // Its hold lasts (to its lease end, at most) without it.
                        Op::Lose => m.set(client, Episode::Revoked),
                        _ if woke && reason == HELD_TOO_LONG => {
                            prop_assert!(cfg.max_hold.is_some_and(|max| since + max <= now));
                            m.set(client, Episode::Revoked);
                        }
                        _ if woke && reason == LEASE_EXPIRED => {
                            prop_assert_eq!(released_how, Some((client, ReleaseHow::Expired)));
                            m.set(client, Episode::Idle);
                        }
                        _ => return Err(TestCaseError::fail(format!("LockLost {reason:?} during {op:?}"))),
                    }
                }
                LockReply::Refused { .. } => match op {
                    // A refused Acquire changes nothing.
                    Op::Acquire(..) | Op::Release(_) => prop_assert_eq!(subject, Some(client)),
                    Op::Shutdown => {
                        prop_assert!(matches!(ep, Episode::Waiting { .. }), "refused at shutdown in {:?}", ep);
                        m.set(client, Episode::Idle);
                    }
                    _ => return Err(TestCaseError::fail(format!("Refused during {op:?}"))),
                },
                // No op lists the locks.
                LockReply::Locks { .. } => return Err(TestCaseError::fail(format!("Locks during {op:?}"))),
                LockReply::Leader { .. } => return Err(TestCaseError::fail(format!("Leader during {op:?}"))),
            }
        }

        // What each client-facing op must have answered.
        match (op, subject, before) {
            (Op::Acquire(_, t), Some(client), Some(before)) => {
                prop_assert!(rs.len() <= 1);
                match (before, rs.first()) {
                    (Episode::Idle, None) => {
                        // A try-lock (0) waits the configured window.
                        let wait = if t == 0 { cfg.try_window } else { ms(t) };
                        let deadline = now + wait;
                        m.set(client, Episode::Waiting { since: now, deadline });
                    }
                    // Queue full or shutting down, or a second Acquire: nothing changes.
                    (_, Some((_, LockReply::Refused { .. }))) => {}
                    (b, r) => return Err(TestCaseError::fail(format!("Acquire in {b:?} answered {r:?}"))),
                }
            }
            (Op::Release(_), Some(_), Some(before)) => {
                prop_assert_eq!(rs.len(), 1, "a Release gets exactly one reply");
                // Idle means neither waiting nor holding (checked below each step).
                let want = if before == Episode::Idle { refused(NOT_HOLDING) } else { LockReply::Released };
                prop_assert_eq!(&rs[0].1, &want);
            }
            (Op::Gone(..), Some(client), _) => {
                prop_assert!(rs.is_empty());
                if let Some((who, how)) = released_how {
                    prop_assert_eq!((who, how), (client, ReleaseHow::Disconnected));
                }
                m.set(client, Episode::Idle);
                m.gone.push(client);
                slots.iter_mut().filter(|s| **s == client).for_each(|s| {
                    *s = ClientId(next_id);
                    next_id += 1;
                });
            }
            (Op::Lose, ..) => {
                // LockLost to a holder not told yet, and nothing else.
                let want: Vec<_> = holder_before
                    .filter(|h| !h.revoked && !h.lost)
                    .map(|h| (h.client, lock_lost("lost")))
                    .into_iter()
                    .collect();
                prop_assert_eq!(&rs, &want);
                // The hold ends at once only if its lease is over.
                let ended = holder_before.filter(|h| h.lease_until <= now).map(|h| (h.client, ReleaseHow::Lost));
                prop_assert_eq!(released_how, ended);
                // The batch belonged to the lost token.
                prop_assert_eq!(l.batch_remaining(), 0);
            }
            _ => {}
        }
        // A revoked hold ending without a reply closes nothing new: its
        // episode already ended with LockLost.
        if let Some((client, ReleaseHow::Revoked | ReleaseHow::Lost)) = released_how {
            if m.episode(client) == Episode::Revoked {
                m.set(client, Episode::Idle);
            }
        }

        // The component agrees with the model.
        prop_assert_eq!(l.holder(), m.holder.map(|h| (h.client, h.fence)));
        prop_assert_eq!(l.lease_until(), m.holder.map(|h| h.lease_until));
        prop_assert_eq!(l.is_held(), m.holder.is_some());
        if let Some(h) = m.holder {
            // The driver is always woken by the lease end at the latest.
            prop_assert!(l.poll_timeout().is_some_and(|t| t <= h.lease_until));
        }
        let model_waiting = m.episodes.values().filter(|e| matches!(e, Episode::Waiting { .. })).count();
        prop_assert_eq!(l.waiting(), model_waiting);
        prop_assert!(l.waiting() <= l.cfg.max_queue);
        prop_assert!(l.batch_remaining() <= l.waiting());
        for (client, e) in &m.episodes {
            let holds = m.holder.is_some_and(|h| h.client == *client);
            prop_assert_eq!(holds, matches!(e, Episode::Holding { .. } | Episode::Revoked), "{} {:?}", client, e);
        }
        if woke {
            // Nothing overdue survives a wake-up: no waiter past its
            // deadline, no hold past max_hold unrevoked, no hold past its
            // lease end.
            prop_assert!(l.poll_timeout().is_none_or(|t| t > now));
            for e in m.episodes.values() {
                match *e {
                    Episode::Waiting { deadline, .. } => prop_assert!(deadline > now),
                    Episode::Holding { since } => prop_assert!(cfg.max_hold.is_none_or(|max| since + max > now)),
                    Episode::Revoked | Episode::Idle => {}
                }
            }
            if let Some(h) = m.holder {
                prop_assert!(h.lease_until > now, "hold outlived its lease end {} at {}", h.lease_until, now);
            }
        }
        if let Op::Grant(batch_only, _) = op {
            // A failed grant with nothing held and a live lease leaves
            // nobody to serve; with the lease over, nobody is granted.
            if lease_given.is_some_and(|t| t <= now) {
                prop_assert_eq!(granted_to, None);
            } else if granted_to.is_none() && !l.is_held() {
                prop_assert_eq!(if batch_only { l.batch_remaining() } else { l.waiting() }, 0);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_every_invariant(
        cfg in arb_cfg(),
        ops in proptest::collection::vec(arb_op(), 0..80),
        shutdown_at in proptest::option::of(0usize..100),
    ) {
        run(cfg, ops, shutdown_at)?;
    }
}

// ---- named requests at a daemon of one unnamed lock ----------------------

/// What a daemon of one unnamed lock answers an `AcquireNamed`.
const NO_NAMES_REASON: &str =
    "this daemon serves one unnamed lock: named locks are not supported (docs/named-locks.md)";

fn acquire_named(name: &str, timeout_ms: u64) -> LockRequest {
    LockRequest::AcquireNamed { name: LockName::parse(name).unwrap(), timeout_ms }
}

fn unnamed_info(held_fence: Option<u128>, waiters: u32) -> LockInfo {
    LockInfo { name: LockName::unnamed(), held_fence, last_fence: None, waiters }
}

#[test]
fn acquire_named_is_refused_and_changes_nothing() {
    // Nobody known: refused, not queued, no deadline.
    let mut l = L::new(cfg());
    let before = l.clone();
    l.request(T0, c(1), acquire_named("db/migrate", 1_000));
    expect(&mut l, &[(1, refused(NO_NAMES_REASON))], &[]);
    assert_eq!(l, before);
    assert!(!l.knows(c(1)));
    assert!(l.is_idle());
    assert_eq!(l.poll_timeout(), None);
    // The empty (unnamed) name in an AcquireNamed is no exception.
    l.request(T0, c(1), LockRequest::AcquireNamed { name: LockName::unnamed(), timeout_ms: 1_000 });
    expect(&mut l, &[(1, refused(NO_NAMES_REASON))], &[]);
    assert_eq!(l, before);

    // The same client may then Acquire the unnamed lock.
    l.request(at(1), c(1), acquire(1_000));
    expect(&mut l, &[], &[]);
    assert!(l.knows(c(1)));
    assert!(!l.is_idle());
    assert_eq!(l.poll_timeout(), Some(at(1_001)));

    // While waiting: the name is refused for what it is (not "already
    // waiting"), and the wait is untouched.
    l.request(T0, c(2), acquire(1_000));
    let before = l.clone();
    l.request(at(2), c(1), acquire_named("a", 5_000));
    expect(&mut l, &[(1, refused(NO_NAMES_REASON))], &[]);
    assert_eq!(l, before);
    assert_eq!(l.grant_next(at(3), 4, FAR, false), Some(c(1)));
    expect(&mut l, &[(1, granted(4, FAR))], &[ev_granted(1, 4, 2, FAR)]);

    // While holding: the same, and the hold is untouched.
    let before = l.clone();
    l.request(at(4), c(1), acquire_named("a", 5_000));
    l.request(at(4), c(2), acquire_named("b", 5_000));
    expect(&mut l, &[(1, refused(NO_NAMES_REASON)), (2, refused(NO_NAMES_REASON))], &[]);
    assert_eq!(l, before);
    assert_eq!(l.holder(), Some((c(1), 4)));
    assert_eq!(l.waiting(), 1);
}

/// The one entry a `ListLocks` by `who` gets; asserts the reply's shape
/// (one unnamed entry, `known: 1`), that no event came and nothing changed.
#[track_caller]
fn list(l: &mut L, now: Instant, who: u64) -> LockInfo {
    let before = l.clone();
    l.request(now, c(who), LockRequest::ListLocks);
    let got = replies(l);
    assert_eq!(events(l), [], "events");
    assert_eq!(*l, before, "ListLocks changed the queue");
    match &got[..] {
        [(to, LockReply::Locks { locks, known: 1 })] if *to == c(who) && locks.len() == 1 => {
            assert!(locks[0].name.is_unnamed());
            locks[0].clone()
        }
        other => panic!("ListLocks answered {other:?}"),
    }
}

#[test]
fn list_locks_answers_one_unnamed_entry() {
    // Idle, never granted: the unnamed lock, nothing held, nobody waiting.
    let mut l = L::new(cfg());
    l.request(T0, c(9), LockRequest::ListLocks);
    expect(&mut l, &[(9, LockReply::Locks { locks: vec![unnamed_info(None, 0)], known: 1 })], &[]);
    assert!(!l.knows(c(9)));

    // Three waiters, never granted.
    let mut l = with_waiters(cfg(), &[1, 2, 3]);
    l.request(T0, c(9), LockRequest::ListLocks);
    expect(&mut l, &[(9, LockReply::Locks { locks: vec![unnamed_info(None, 3)], known: 1 })], &[]);

    // A holder with fence 7 and two waiters; a waiter and the holder may list too.
    assert_eq!(l.grant_next(at(1), 7, FAR, false), Some(c(1)));
    expect(&mut l, &[(1, granted(7, FAR))], &[ev_granted(1, 7, 1, FAR)]);
    for who in [2, 1, 9] {
        let i = list(&mut l, at(2), who);
        assert_eq!((i.held_fence, i.waiters), (Some(7), 2));
    }

    // A revoked (lost) hold is still listed with its fence.
    l.lose(at(3), "superseded");
    expect(&mut l, &[(1, lock_lost("superseded"))], &[]);
    let i = list(&mut l, at(3), 9);
    assert_eq!((i.held_fence, i.waiters), (Some(7), 2));

    // The lister may acquire afterwards.
    l.request(at(4), c(9), acquire(1_000));
    expect(&mut l, &[], &[]);
    assert_eq!(l.waiting(), 3);
    l.request(at(5), c(1), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released)], &[ev_released(1, 7, 4, ReleaseHow::Released)]);
    let i = list(&mut l, at(5), 9);
    assert_eq!((i.held_fence, i.waiters), (None, 3));
}

#[test]
fn knows_and_is_idle_follow_waiters_and_holder() {
    let mut l = with_waiters(cfg(), &[1, 2]);
    assert!(l.knows(c(1)) && l.knows(c(2)) && !l.knows(c(3)));
    assert!(!l.is_idle());
    l.grant_next(T0, 1, at(100), false);
    l.lose(at(1), "superseded");
    // A lost hold is still known until it ends.
    assert!(l.knows(c(1)));
    l.client_gone(at(2), c(2));
    assert!(!l.knows(c(2)));
    assert!(!l.is_idle());
    l.handle_timeout(at(100));
    assert!(!l.knows(c(1)));
    assert!(l.is_idle());
    expect(
        &mut l,
        &[(1, granted(1, at(100))), (1, lock_lost("superseded"))],
        &[ev_granted(1, 1, 0, at(100)), ev_released(1, 1, 100, ReleaseHow::Lost)],
    );
}
