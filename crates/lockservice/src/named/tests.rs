//! One test per rule of [`NamedLocks`], asserting the exact replies and
//! (name-tagged) events, and a property test of its invariants over random
//! sequences of operations.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::ReleaseHow;

const T0: Instant = Instant::from_millis(1_000);

/// A lease end an hour after `T0`, past every instant a test looks at.
const FAR: Instant = Instant::from_millis(1_000 + 3_600_000);

const ALREADY_WAITING: &str = "already waiting for the lock";
const ALREADY_HOLDING: &str = "already holding the lock";
const NOT_HOLDING_REASON: &str = "not holding the lock";
const SHUTTING_DOWN_REASON: &str = "daemon is shutting down";
const QUEUE_FULL: &str = "queue full";
const LEASE_EXPIRED_REASON: &str = "lease expired: the daemon could not renew it in time";
const EMPTY_NAME: &str = "invalid lock name: it is empty";

/// `ms` milliseconds after `T0`.
fn at(ms: u64) -> Instant {
    T0 + Duration::from_millis(ms)
}

fn c(id: u64) -> ClientId {
    ClientId(id)
}

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn n(s: &str) -> LockName {
    LockName::parse(s).unwrap()
}

fn cfg() -> LocksConfig {
    LocksConfig { max_queue: 8, max_hold: None, try_window: Duration::ZERO }
}

fn acquire(timeout_ms: u64) -> LockRequest {
    LockRequest::Acquire { timeout_ms }
}

fn acquire_named(name: &str, timeout_ms: u64) -> LockRequest {
    LockRequest::AcquireNamed { name: n(name), timeout_ms }
}

fn granted(fence: u128, lease_until: Instant) -> LockReply {
    LockReply::Granted { fence, lease_until_us: lease_until.as_micros() }
}

fn refused(reason: &str) -> LockReply {
    LockReply::Refused { reason: reason.to_owned() }
}

fn too_many(known: usize) -> LockReply {
    refused(&format!("too many locks: this node knows {known} (limits.max_locks)"))
}

fn lock_ev(name: &LockName, event: LockEvent) -> NamedEvent {
    NamedEvent::Lock { name: name.clone(), event }
}

fn ev_granted(name: &str, client: u64, fence: u128, waited: u64, lease_until: Instant) -> NamedEvent {
    lock_ev(&n(name), LockEvent::Granted { client: c(client), fence, waited: ms(waited), lease_until })
}

fn ev_released(name: &str, client: u64, fence: u128, held: u64, how: ReleaseHow) -> NamedEvent {
    lock_ev(&n(name), LockEvent::Released { client: c(client), fence, held: ms(held), how })
}

fn ev_timed_out(name: &str, client: u64, waited: u64) -> NamedEvent {
    lock_ev(&n(name), LockEvent::TimedOut { client: c(client), waited: ms(waited) })
}

fn info(name: &str, held_fence: Option<u128>, last_fence: Option<u128>, waiters: u32) -> LockInfo {
    LockInfo { name: n(name), held_fence, last_fence, waiters }
}

fn locks(locks: Vec<LockInfo>, known: u64) -> LockReply {
    LockReply::Locks { locks, known }
}

/// The named locks with the output buffer a core would own: the same calls
/// as [`NamedLocks`], minus the buffer argument.
#[derive(Clone, Debug, PartialEq)]
struct N {
    locks: NamedLocks,
    out: ftcore::Outbox<(), LockReply, NamedEvent>,
    /// Replies and events taken from `out` but not yet asserted.
    replies: Vec<(ClientId, LockReply)>,
    events: Vec<NamedEvent>,
}

impl std::ops::Deref for N {
    type Target = NamedLocks;
    fn deref(&self) -> &NamedLocks {
        &self.locks
    }
}

impl N {
    fn new(cfg: LocksConfig, max_locks: usize) -> Self {
        N { locks: NamedLocks::new(cfg, max_locks), out: Default::default(), replies: Vec::new(), events: Vec::new() }
    }
    fn request(&mut self, now: Instant, client: ClientId, req: LockRequest) {
        self.locks.request(now, client, req, &mut self.out);
    }
    fn client_gone(&mut self, now: Instant, client: ClientId) {
        self.locks.client_gone(now, client, &mut self.out);
    }
    fn token_arrived(&mut self, now: Instant, name: &LockName) {
        self.locks.token_arrived(now, name);
    }
    fn grant_next(
        &mut self,
        now: Instant,
        name: &LockName,
        fence: u128,
        lease_until: Instant,
        batch_only: bool,
    ) -> Option<ClientId> {
        self.locks.grant_next(now, name, fence, lease_until, batch_only, &mut self.out)
    }
    fn renew(&mut self, now: Instant, name: &LockName, lease_until: Instant) -> bool {
        self.locks.renew(now, name, lease_until, &mut self.out)
    }
    fn lose(&mut self, now: Instant, name: &LockName, reason: &str) {
        self.locks.lose(now, name, reason, &mut self.out);
    }
    fn shutdown(&mut self, now: Instant) -> bool {
        self.locks.shutdown(now, &mut self.out)
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.locks.handle_timeout(now, &mut self.out);
    }
    /// Moves what the locks pushed into the per-kind lists.
    fn sort_out(&mut self) {
        for o in self.out.drain() {
            match o {
                ftcore::Output::Reply { client, reply } => self.replies.push((client, reply)),
                ftcore::Output::Event(e) => self.events.push(e),
                other => panic!("NamedLocks pushed {other:?}"),
            }
        }
    }
    /// The `Locks` reply a lister (a client that is not otherwise known)
    /// gets now; asserts listing changed nothing and emitted no event.
    #[track_caller]
    fn list(&mut self) -> LockReply {
        let lister = c(u64::MAX);
        // Keep what earlier calls pushed for the test to assert.
        let pending = (replies(self), events(self));
        let before = self.locks.clone();
        self.request(T0, lister, LockRequest::ListLocks);
        assert_eq!(self.locks, before, "ListLocks changed the state");
        let mut got = replies(self);
        assert_eq!(events(self), [], "ListLocks emitted events");
        (self.replies, self.events) = pending;
        assert_eq!(got.len(), 1, "ListLocks answered {got:?}");
        let (to, reply) = got.remove(0);
        assert_eq!(to, lister);
        reply
    }
}

fn replies(l: &mut N) -> Vec<(ClientId, LockReply)> {
    l.sort_out();
    std::mem::take(&mut l.replies)
}

fn events(l: &mut N) -> Vec<NamedEvent> {
    l.sort_out();
    std::mem::take(&mut l.events)
}

/// Asserts the queued replies and events are exactly these, and drains them.
#[track_caller]
fn expect(l: &mut N, want_replies: &[(u64, LockReply)], want_events: &[NamedEvent]) {
    let want: Vec<_> = want_replies.iter().map(|(id, r)| (c(*id), r.clone())).collect();
    assert_eq!(replies(l), want, "replies");
    assert_eq!(events(l), want_events, "events");
}

/// Named locks where each `(client, name)` asked, in order, at `T0` with a
/// 1 s timeout.
fn with_waiters(cfg: LocksConfig, max_locks: usize, who: &[(u64, &str)]) -> N {
    let mut l = N::new(cfg, max_locks);
    for (id, name) in who {
        l.request(T0, c(*id), acquire_named(name, 1_000));
    }
    expect(&mut l, &[], &[]);
    l
}

#[test]
fn nothing_known_at_first() {
    let mut l = N::new(cfg(), 4);
    assert_eq!(l.known(), 0);
    assert_eq!(l.waiting(), 0);
    assert_eq!(l.waited_for().count(), 0);
    assert!(!l.any_held());
    assert_eq!(l.poll_timeout(), None);
    assert_eq!(l.list(), locks(vec![], 0));
    expect(&mut l, &[], &[]);
}

#[test]
fn two_names_held_at_once_by_two_clients() {
    let (a, b) = (n("a"), n("b"));
    let mut l = with_waiters(cfg(), 4, &[(1, "a"), (2, "b")]);
    assert_eq!(l.known(), 2);
    assert_eq!(l.waiting(), 2);
    assert_eq!(l.waited_for().cloned().collect::<Vec<_>>(), [a.clone(), b.clone()]);
    assert!(l.has_waiters(&a) && l.has_waiters(&b));
    assert!(!l.any_held());

    assert_eq!(l.grant_next(at(10), &a, 7, FAR, false), Some(c(1)));
    expect(&mut l, &[(1, granted(7, FAR))], &[ev_granted("a", 1, 7, 10, FAR)]);
    // `a` held does not keep `b` from being granted, with its own fence.
    assert_eq!(l.grant_next(at(20), &b, 8, at(500), false), Some(c(2)));
    expect(&mut l, &[(2, granted(8, at(500)))], &[ev_granted("b", 2, 8, 20, at(500))]);
    assert_eq!(l.holder(&a), Some((c(1), 7)));
    assert_eq!(l.holder(&b), Some((c(2), 8)));
    assert_eq!(l.lease_until(&a), Some(FAR));
    assert_eq!(l.lease_until(&b), Some(at(500)));
    assert!(l.is_held(&a) && l.is_held(&b) && l.any_held());
    assert!(!l.has_waiters(&a) && !l.has_waiters(&b));
    assert_eq!(l.waiting(), 0);
    assert_eq!(l.known(), 2);
    assert_eq!(l.poll_timeout(), Some(at(500)));
    assert_eq!(l.list(), locks(vec![info("a", Some(7), Some(7), 0), info("b", Some(8), Some(8), 0)], 2));

    // Releasing one leaves the other held.
    l.request(at(30), c(1), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released)], &[ev_released("a", 1, 7, 20, ReleaseHow::Released)]);
    assert_eq!(l.holder(&a), None);
    assert_eq!(l.holder(&b), Some((c(2), 8)));
    assert_eq!(l.known(), 1);
    assert!(l.any_held());
}

#[test]
fn fifo_within_one_name() {
    let a = n("a");
    let mut l = with_waiters(cfg(), 4, &[(3, "a"), (1, "a"), (9, "b"), (2, "a")]);
    assert_eq!(l.waiting(), 4);
    assert_eq!(l.grant_next(at(1), &a, 1, FAR, false), Some(c(3)));
    // Held: nobody else, and the fence is not used.
    assert_eq!(l.grant_next(at(1), &a, 2, FAR, false), None);
    l.request(at(2), c(3), LockRequest::Release);
    assert_eq!(l.grant_next(at(2), &a, 3, FAR, false), Some(c(1)));
    l.request(at(3), c(1), LockRequest::Release);
    assert_eq!(l.grant_next(at(3), &a, 4, FAR, false), Some(c(2)));
    l.request(at(4), c(2), LockRequest::Release);
    assert_eq!(l.grant_next(at(4), &a, 5, FAR, false), None);
    expect(
        &mut l,
        &[
            (3, granted(1, FAR)),
            (3, LockReply::Released),
            (1, granted(3, FAR)),
            (1, LockReply::Released),
            (2, granted(4, FAR)),
            (2, LockReply::Released),
        ],
        &[
            ev_granted("a", 3, 1, 1, FAR),
            ev_released("a", 3, 1, 1, ReleaseHow::Released),
            ev_granted("a", 1, 3, 2, FAR),
            ev_released("a", 1, 3, 1, ReleaseHow::Released),
            ev_granted("a", 2, 4, 3, FAR),
            ev_released("a", 2, 4, 1, ReleaseHow::Released),
        ],
    );
    // `a` is forgotten; `b`'s waiter was never touched.
    assert_eq!(l.known(), 1);
    assert_eq!(l.waited_for().cloned().collect::<Vec<_>>(), [n("b")]);
}

#[test]
fn second_acquire_while_waiting_is_refused_and_changes_nothing() {
    let mut l = with_waiters(cfg(), 4, &[(1, "a"), (2, "b")]);
    let before = l.clone();
    // The same name, another known name, a new name, the unnamed lock:
    // each refused by the queue the client waits in.
    l.request(at(5), c(1), acquire_named("a", 5_000));
    l.request(at(5), c(1), acquire_named("b", 5_000));
    l.request(at(5), c(1), acquire_named("new", 5_000));
    l.request(at(5), c(1), acquire(5_000));
    expect(
        &mut l,
        &[
            (1, refused(ALREADY_WAITING)),
            (1, refused(ALREADY_WAITING)),
            (1, refused(ALREADY_WAITING)),
            (1, refused(ALREADY_WAITING)),
        ],
        &[],
    );
    assert_eq!(l, before);
    assert_eq!(l.known(), 2);
    // The first deadline and the place in line are kept.
    assert_eq!(l.poll_timeout(), Some(at(1_000)));
    assert_eq!(l.grant_next(at(6), &n("a"), 1, FAR, false), Some(c(1)));
    assert_eq!(l.grant_next(at(6), &n("b"), 2, FAR, false), Some(c(2)));
}

#[test]
fn second_acquire_while_holding_is_refused_and_changes_nothing() {
    // Two locks of two known: even a new name gets "already holding", not
    // "too many locks".
    let mut l = with_waiters(cfg(), 2, &[(1, "a"), (2, "b")]);
    assert_eq!(l.grant_next(T0, &n("a"), 1, FAR, false), Some(c(1)));
    expect(&mut l, &[(1, granted(1, FAR))], &[ev_granted("a", 1, 1, 0, FAR)]);
    let before = l.clone();
    l.request(at(5), c(1), acquire_named("a", 1_000));
    l.request(at(5), c(1), acquire_named("b", 1_000));
    l.request(at(5), c(1), acquire_named("c", 1_000));
    l.request(at(5), c(1), acquire(1_000));
    expect(
        &mut l,
        &[
            (1, refused(ALREADY_HOLDING)),
            (1, refused(ALREADY_HOLDING)),
            (1, refused(ALREADY_HOLDING)),
            (1, refused(ALREADY_HOLDING)),
        ],
        &[],
    );
    assert_eq!(l, before);
    assert_eq!(l.waiting(), 1);
    assert_eq!(l.holder(&n("b")), None);
}

#[test]
fn release_routes_to_the_clients_name() {
    let (a, b) = (n("a"), n("b"));
    let mut l = with_waiters(cfg(), 4, &[(1, "a"), (2, "a"), (3, "b")]);
    assert_eq!(l.grant_next(T0, &a, 5, FAR, false), Some(c(1)));
    expect(&mut l, &[(1, granted(5, FAR))], &[ev_granted("a", 1, 5, 0, FAR)]);

    // A waiter of `b` stops waiting: reply, no event, and `b` is forgotten.
    l.request(at(1), c(3), LockRequest::Release);
    expect(&mut l, &[(3, LockReply::Released)], &[]);
    assert_eq!(l.known(), 1);
    assert!(!l.has_waiters(&b));
    assert_eq!(l.holder(&a), Some((c(1), 5)));
    assert_eq!(l.waiting(), 1);

    // Neither holding nor waiting anywhere.
    let before = l.clone();
    l.request(at(2), c(9), LockRequest::Release);
    expect(&mut l, &[(9, refused(NOT_HOLDING_REASON))], &[]);
    assert_eq!(l, before);

    // The holder of `a`.
    l.request(at(3), c(1), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released)], &[ev_released("a", 1, 5, 3, ReleaseHow::Released)]);
    assert_eq!(l.holder(&a), None);
    assert!(l.has_waiters(&a));
    // Twice: no longer bound anywhere.
    l.request(at(4), c(1), LockRequest::Release);
    l.request(at(4), c(3), LockRequest::Release);
    expect(&mut l, &[(1, refused(NOT_HOLDING_REASON)), (3, refused(NOT_HOLDING_REASON))], &[]);
    // And free to acquire another name.
    l.request(at(5), c(1), acquire_named("b", 1_000));
    expect(&mut l, &[], &[]);
    assert_eq!(l.known(), 2);
}

#[test]
fn client_gone_releases_or_withdraws_its_one_name() {
    let (a, b) = (n("a"), n("b"));
    let mut l = with_waiters(cfg(), 4, &[(1, "a"), (2, "b"), (3, "b")]);
    assert_eq!(l.grant_next(T0, &a, 5, FAR, false), Some(c(1)));
    expect(&mut l, &[(1, granted(5, FAR))], &[ev_granted("a", 1, 5, 0, FAR)]);

    // The holder of `a`: its hold ends, no reply; `a` is forgotten.
    l.client_gone(at(5), c(1));
    expect(&mut l, &[], &[ev_released("a", 1, 5, 5, ReleaseHow::Disconnected)]);
    assert!(!l.is_held(&a));
    assert_eq!(l.known(), 1);
    l.client_gone(at(6), c(1));
    expect(&mut l, &[], &[]);

    // A waiter of `b`: silently dequeued; `b` stays while 3 waits.
    l.client_gone(at(7), c(2));
    expect(&mut l, &[], &[]);
    assert_eq!(l.waiting(), 1);
    assert_eq!(l.known(), 1);
    let before = l.clone();
    l.client_gone(at(8), c(2));
    l.client_gone(at(8), c(42));
    expect(&mut l, &[], &[]);
    assert_eq!(l, before);
    assert_eq!(l.grant_next(at(9), &b, 6, FAR, false), Some(c(3)));
    expect(&mut l, &[(3, granted(6, FAR))], &[ev_granted("b", 3, 6, 9, FAR)]);
    l.client_gone(at(10), c(3));
    expect(&mut l, &[], &[ev_released("b", 3, 6, 1, ReleaseHow::Disconnected)]);
    assert_eq!(l.known(), 0);
    assert_eq!(l.poll_timeout(), None);
    assert_eq!(l.list(), locks(vec![], 0));
}

#[test]
fn idle_name_is_forgotten_and_starts_fresh() {
    let a = n("a");
    let mut l = with_waiters(cfg(), 4, &[(1, "a"), (2, "a")]);
    assert_eq!(l.list(), locks(vec![info("a", None, None, 2)], 1));
    assert_eq!(l.grant_next(T0, &a, 5, FAR, false), Some(c(1)));
    assert_eq!(l.list(), locks(vec![info("a", Some(5), Some(5), 1)], 1));
    // Known while someone waits: the last fence stays after the release.
    l.request(at(1), c(1), LockRequest::Release);
    assert_eq!(l.list(), locks(vec![info("a", None, Some(5), 1)], 1));
    // The last waiter leaves: `a` is forgotten.
    l.request(at(2), c(2), LockRequest::Release);
    expect(
        &mut l,
        &[(1, granted(5, FAR)), (1, LockReply::Released), (2, LockReply::Released)],
        &[ev_granted("a", 1, 5, 0, FAR), ev_released("a", 1, 5, 1, ReleaseHow::Released)],
    );
    assert_eq!(l.known(), 0);
    assert_eq!(l.list(), locks(vec![], 0));
    assert_eq!(l.locks, NamedLocks::new(cfg(), 4));

    // A later acquire starts fresh: no last fence.
    l.request(at(3), c(3), acquire_named("a", 1_000));
    expect(&mut l, &[], &[]);
    assert_eq!(l.known(), 1);
    assert_eq!(l.list(), locks(vec![info("a", None, None, 1)], 1));

    // Forgotten after a timeout too.
    l.handle_timeout(at(1_003));
    expect(&mut l, &[(3, LockReply::TimedOut)], &[ev_timed_out("a", 3, 1_000)]);
    assert_eq!(l.locks, NamedLocks::new(cfg(), 4));
}

#[test]
fn max_locks_bounds_the_names() {
    let (a, b, cc) = (n("a"), n("b"), n("c"));
    let mut l = with_waiters(cfg(), 2, &[(1, "a"), (2, "b")]);
    let before = l.clone();
    l.request(at(1), c(3), acquire_named("c", 1_000));
    expect(&mut l, &[(3, too_many(2))], &[NamedEvent::Refused { reason: "too_many_locks" }]);
    assert_eq!(l, before);
    assert_eq!(l.known(), 2);
    assert!(!l.has_waiters(&cc));

    // A new client on a known name is still queued; the refused one too.
    l.request(at(2), c(4), acquire_named("a", 1_000));
    l.request(at(2), c(3), acquire_named("b", 1_000));
    expect(&mut l, &[], &[]);
    assert_eq!(l.known(), 2);
    assert_eq!(l.waiting(), 4);

    // Once a name is forgotten there is room for another.
    l.request(at(3), c(1), LockRequest::Release);
    l.request(at(3), c(4), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released), (4, LockReply::Released)], &[]);
    assert_eq!(l.known(), 1);
    assert!(!l.has_waiters(&a));
    l.request(at(4), c(5), acquire_named("c", 1_000));
    expect(&mut l, &[], &[]);
    assert_eq!(l.waited_for().cloned().collect::<Vec<_>>(), [b, cc]);
    // The unnamed lock counts as a name.
    l.request(at(5), c(6), acquire(1_000));
    expect(&mut l, &[(6, too_many(2))], &[NamedEvent::Refused { reason: "too_many_locks" }]);

    // No lock at all.
    let mut l = N::new(cfg(), 0);
    l.request(T0, c(1), acquire_named("a", 1_000));
    expect(&mut l, &[(1, too_many(0))], &[NamedEvent::Refused { reason: "too_many_locks" }]);
    assert_eq!(l.known(), 0);
}

#[test]
fn acquire_named_with_the_empty_name_is_refused() {
    let mut l = N::new(cfg(), 4);
    l.request(T0, c(1), LockRequest::AcquireNamed { name: LockName::unnamed(), timeout_ms: 1_000 });
    expect(&mut l, &[(1, refused(EMPTY_NAME))], &[NamedEvent::Refused { reason: "bad_name" }]);
    assert_eq!(l.locks, NamedLocks::new(cfg(), 4));
    // Not bound: it may acquire afterwards.
    l.request(T0, c(1), acquire_named("a", 1_000));
    expect(&mut l, &[], &[]);
    // Bound: still refused for the name, changing nothing.
    let before = l.clone();
    l.request(at(1), c(1), LockRequest::AcquireNamed { name: LockName::unnamed(), timeout_ms: 1_000 });
    expect(&mut l, &[(1, refused(EMPTY_NAME))], &[NamedEvent::Refused { reason: "bad_name" }]);
    assert_eq!(l, before);
}

#[test]
fn unnamed_and_named_locks_coexist() {
    let (u, a) = (LockName::unnamed(), n("a"));
    let mut l = N::new(cfg(), 4);
    l.request(T0, c(1), acquire(1_000));
    l.request(T0, c(2), acquire_named("a", 1_000));
    l.request(T0, c(3), acquire(1_000));
    expect(&mut l, &[], &[]);
    assert_eq!(l.known(), 2);
    assert_eq!(l.waited_for().cloned().collect::<Vec<_>>(), [u.clone(), a.clone()]);

    assert_eq!(l.grant_next(at(1), &u, 10, FAR, false), Some(c(1)));
    assert_eq!(l.grant_next(at(2), &a, 11, FAR, false), Some(c(2)));
    expect(
        &mut l,
        &[(1, granted(10, FAR)), (2, granted(11, FAR))],
        &[
            lock_ev(&u, LockEvent::Granted { client: c(1), fence: 10, waited: ms(1), lease_until: FAR }),
            ev_granted("a", 2, 11, 2, FAR),
        ],
    );
    // The unnamed lock is listed with the empty name.
    assert_eq!(
        l.list(),
        locks(
            vec![
                LockInfo { name: u.clone(), held_fence: Some(10), last_fence: Some(10), waiters: 1 },
                info("a", Some(11), Some(11), 0),
            ],
            2
        )
    );
    l.request(at(3), c(1), LockRequest::Release);
    expect(
        &mut l,
        &[(1, LockReply::Released)],
        &[lock_ev(&u, LockEvent::Released { client: c(1), fence: 10, held: ms(2), how: ReleaseHow::Released })],
    );
    assert_eq!(l.holder(&a), Some((c(2), 11)));
    assert_eq!(l.grant_next(at(3), &u, 12, FAR, false), Some(c(3)));
}

#[test]
fn queue_bound_is_per_name_and_refuses_that_client_only() {
    let (a, b) = (n("a"), n("b"));
    let mut l = with_waiters(LocksConfig { max_queue: 2, ..cfg() }, 4, &[(1, "a"), (2, "a")]);
    let before = l.clone();
    l.request(at(1), c(3), acquire_named("a", 1_000));
    expect(&mut l, &[(3, refused(QUEUE_FULL))], &[]);
    assert_eq!(l, before);
    // Another name has its own queue; the refused client is not bound.
    l.request(at(2), c(3), acquire_named("b", 1_000));
    l.request(at(2), c(4), acquire_named("b", 1_000));
    expect(&mut l, &[], &[]);
    assert_eq!(l.waiting(), 4);
    l.request(at(3), c(5), acquire_named("b", 1_000));
    expect(&mut l, &[(5, refused(QUEUE_FULL))], &[]);
    // The holder does not count against its queue.
    assert_eq!(l.grant_next(at(4), &a, 1, FAR, false), Some(c(1)));
    l.request(at(5), c(5), acquire_named("a", 1_000));
    expect(&mut l, &[(1, granted(1, FAR))], &[ev_granted("a", 1, 1, 4, FAR)]);
    assert!(l.has_waiters(&b));

    // A zero bound: a new name is refused and not left behind.
    let mut l = N::new(LocksConfig { max_queue: 0, ..cfg() }, 4);
    l.request(T0, c(1), acquire_named("a", 1_000));
    expect(&mut l, &[(1, refused(QUEUE_FULL))], &[]);
    assert_eq!(l.locks, NamedLocks::new(LocksConfig { max_queue: 0, ..cfg() }, 4));
}

#[test]
fn handle_timeout_serves_every_name_and_poll_timeout_is_the_earliest() {
    let (a, cc) = (n("a"), n("c"));
    let mut l = N::new(cfg(), 4);
    l.request(T0, c(1), acquire_named("a", 100));
    l.request(T0, c(2), acquire_named("b", 50));
    l.request(T0, c(3), acquire_named("c", 200));
    l.request(T0, c(4), acquire_named("a", 300));
    expect(&mut l, &[], &[]);
    assert_eq!(l.poll_timeout(), Some(at(50)));

    l.handle_timeout(at(49));
    expect(&mut l, &[], &[]);
    // Late wake-up: `a` and `b` both time out, in name order.
    l.handle_timeout(at(100));
    expect(
        &mut l,
        &[(1, LockReply::TimedOut), (2, LockReply::TimedOut)],
        &[ev_timed_out("a", 1, 100), ev_timed_out("b", 2, 100)],
    );
    assert_eq!(l.known(), 2);
    assert_eq!(l.waiting(), 2);
    assert_eq!(l.poll_timeout(), Some(at(200)));

    // A lease end counts: `a`'s holder's lease ends before `c`'s waiter.
    assert_eq!(l.grant_next(at(110), &a, 9, at(150), false), Some(c(4)));
    expect(&mut l, &[(4, granted(9, at(150)))], &[ev_granted("a", 4, 9, 110, at(150))]);
    assert_eq!(l.poll_timeout(), Some(at(150)));
    l.handle_timeout(at(150));
    expect(
        &mut l,
        &[(4, LockReply::LockLost { reason: LEASE_EXPIRED_REASON.to_owned() })],
        &[ev_released("a", 4, 9, 40, ReleaseHow::Expired)],
    );
    assert_eq!(l.poll_timeout(), Some(at(200)));
    l.handle_timeout(at(200));
    expect(&mut l, &[(3, LockReply::TimedOut)], &[ev_timed_out("c", 3, 200)]);
    assert!(!l.has_waiters(&cc));
    assert_eq!(l.known(), 0);
    assert_eq!(l.poll_timeout(), None);
}

#[test]
fn shutdown_refuses_waiters_of_every_name_and_later_acquires() {
    let (a, b) = (n("a"), n("b"));
    let mut l = with_waiters(cfg(), 4, &[(1, "a"), (2, "b"), (3, "a"), (4, "c")]);
    assert_eq!(l.grant_next(T0, &a, 5, FAR, false), Some(c(1)));
    expect(&mut l, &[(1, granted(5, FAR))], &[ev_granted("a", 1, 5, 0, FAR)]);

    assert!(l.shutdown(at(1)));
    expect(
        &mut l,
        &[(3, refused(SHUTTING_DOWN_REASON)), (2, refused(SHUTTING_DOWN_REASON)), (4, refused(SHUTTING_DOWN_REASON))],
        &[],
    );
    assert_eq!(l.known(), 1);
    assert_eq!(l.waiting(), 0);
    assert_eq!(l.holder(&a), Some((c(1), 5)));

    // Later acquires: of the held name, of a forgotten one, of a new one,
    // of the unnamed lock. The holder's own second acquire is "already holding".
    let before = l.clone();
    l.request(at(2), c(2), acquire_named("a", 1_000));
    l.request(at(2), c(3), acquire_named("b", 1_000));
    l.request(at(2), c(5), acquire_named("zzz", 1_000));
    l.request(at(2), c(6), acquire(1_000));
    l.request(at(2), c(1), acquire_named("b", 1_000));
    expect(
        &mut l,
        &[
            (2, refused(SHUTTING_DOWN_REASON)),
            (3, refused(SHUTTING_DOWN_REASON)),
            (5, refused(SHUTTING_DOWN_REASON)),
            (6, refused(SHUTTING_DOWN_REASON)),
            (1, refused(ALREADY_HOLDING)),
        ],
        &[],
    );
    assert_eq!(l, before);
    assert!(!l.has_waiters(&b));

    // The holder keeps its hold until it releases.
    assert!(l.shutdown(at(3)));
    expect(&mut l, &[], &[]);
    l.request(at(4), c(1), LockRequest::Release);
    expect(&mut l, &[(1, LockReply::Released)], &[ev_released("a", 1, 5, 4, ReleaseHow::Released)]);
    assert!(!l.any_held());
    assert_eq!(l.known(), 0);
    assert!(!l.shutdown(at(5)));
    // Still refused with nothing known.
    l.request(at(6), c(1), acquire_named("a", 1_000));
    expect(&mut l, &[(1, refused(SHUTTING_DOWN_REASON))], &[]);
    assert_eq!(l.known(), 0);
}

#[test]
fn list_locks_sorts_by_waiters_and_reports_each_field() {
    let (a, b, cc, d) = (n("a"), n("b"), n("c"), n("d"));
    let mut l = with_waiters(
        cfg(),
        8,
        &[(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "b"), (6, "c"), (7, "c"), (8, "d"), (9, "e")],
    );
    // a: held (fence 7), one waiter. b: three waiters. c: was granted 3,
    // released; one waiter. d: held (fence 9), nobody waits. e: one waiter.
    assert_eq!(l.grant_next(at(1), &a, 7, FAR, false), Some(c(1)));
    assert_eq!(l.grant_next(at(1), &cc, 3, FAR, false), Some(c(6)));
    l.request(at(2), c(6), LockRequest::Release);
    assert_eq!(l.grant_next(at(3), &d, 9, FAR, false), Some(c(8)));
    let _ = (replies(&mut l), events(&mut l));
    assert_eq!(l.holder(&b), None);
    assert_eq!(
        l.list(),
        locks(
            vec![
                info("b", None, None, 3),
                info("a", Some(7), Some(7), 1),
                info("c", None, Some(3), 1),
                info("e", None, None, 1),
                info("d", Some(9), Some(9), 0),
            ],
            5
        )
    );
    // A bound client lists too, and stays bound.
    l.request(at(4), c(2), LockRequest::ListLocks);
    l.request(at(4), c(2), acquire_named("b", 1_000));
    let r = replies(&mut l);
    assert_eq!(r.len(), 2);
    assert!(matches!(&r[0], (cl, LockReply::Locks { known: 5, .. }) if *cl == c(2)));
    assert_eq!(r[1], (c(2), refused(ALREADY_WAITING)));
}

#[test]
fn list_locks_truncates_at_max_listed() {
    let count = MAX_LISTED + 44;
    let mut l = N::new(cfg(), 1_000);
    for i in 0..count {
        l.request(T0, c(i as u64), acquire_named(&format!("x{i:04}"), 1_000));
    }
    // The last name by name order has the most waiters: listed first.
    l.request(T0, c(10_000), acquire_named("zz", 1_000));
    l.request(T0, c(10_001), acquire_named("zz", 1_000));
    expect(&mut l, &[], &[]);
    assert_eq!(l.known(), count + 1);
    let LockReply::Locks { locks: listed, known } = l.list() else { panic!("not Locks") };
    assert_eq!(known, (count + 1) as u64);
    assert_eq!(listed.len(), MAX_LISTED);
    assert_eq!(listed[0], info("zz", None, None, 2));
    for (i, li) in listed[1..].iter().enumerate() {
        assert_eq!(*li, info(&format!("x{i:04}"), None, None, 1));
    }

    // Exactly MAX_LISTED: all listed.
    let mut l = N::new(cfg(), 1_000);
    for i in 0..MAX_LISTED {
        l.request(T0, c(i as u64), acquire_named(&format!("x{i:04}"), 1_000));
    }
    let LockReply::Locks { locks: listed, known } = l.list() else { panic!("not Locks") };
    assert_eq!((listed.len(), known), (MAX_LISTED, MAX_LISTED as u64));
}

#[test]
fn lose_affects_only_that_name() {
    let (a, b) = (n("a"), n("b"));
    let mut l = with_waiters(cfg(), 4, &[(1, "a"), (2, "b"), (3, "a"), (4, "b")]);
    assert_eq!(l.grant_next(T0, &a, 5, at(100), false), Some(c(1)));
    assert_eq!(l.grant_next(T0, &b, 6, at(100), false), Some(c(2)));
    let _ = (replies(&mut l), events(&mut l));

    l.lose(at(10), &a, "superseded");
    expect(&mut l, &[(1, LockReply::LockLost { reason: "superseded".to_owned() })], &[]);
    // `a` is renewed no more; `b` is.
    assert!(!l.renew(at(20), &a, at(200)));
    assert!(l.renew(at(20), &b, at(200)));
    expect(
        &mut l,
        &[(2, LockReply::Renewed { lease_until_us: at(200).as_micros() })],
        &[lock_ev(&b, LockEvent::Renewed { client: c(2), fence: 6, lease_until: at(200) })],
    );
    // The lost hold lasts to its lease end, then ends as Lost; `b` holds on.
    assert_eq!(l.poll_timeout(), Some(at(100)));
    l.handle_timeout(at(100));
    expect(&mut l, &[], &[ev_released("a", 1, 5, 100, ReleaseHow::Lost)]);
    assert_eq!(l.holder(&a), None);
    assert_eq!(l.holder(&b), Some((c(2), 6)));
    assert!(l.has_waiters(&a) && l.has_waiters(&b));
    // `a` may be granted again (its waiter stayed).
    assert_eq!(l.grant_next(at(101), &a, 7, FAR, false), Some(c(3)));
    expect(&mut l, &[(3, granted(7, FAR))], &[ev_granted("a", 3, 7, 101, FAR)]);
    // Losing an unknown name does nothing.
    let before = l.clone();
    l.lose(at(102), &n("zzz"), "superseded");
    expect(&mut l, &[], &[]);
    assert_eq!(l, before);
}

#[test]
fn calls_on_an_unknown_name_do_nothing() {
    let (a, z) = (n("a"), n("z"));
    let mut l = with_waiters(cfg(), 4, &[(1, "a")]);
    let before = l.clone();
    assert_eq!(l.grant_next(T0, &z, 1, FAR, false), None);
    assert!(!l.renew(T0, &z, FAR));
    l.token_arrived(T0, &z);
    l.lose(T0, &z, "gone");
    expect(&mut l, &[], &[]);
    assert_eq!(l, before);
    assert_eq!(l.known(), 1);
    assert_eq!(l.holder(&z), None);
    assert_eq!(l.lease_until(&z), None);
    assert!(!l.is_held(&z) && !l.has_waiters(&z));
    // The fence not used on `z` is usable on `a`.
    assert_eq!(l.grant_next(T0, &a, 1, FAR, false), Some(c(1)));
}

#[test]
fn token_arrival_freezes_the_batch_of_that_name_only() {
    let (a, b) = (n("a"), n("b"));
    let mut l = with_waiters(cfg(), 4, &[(1, "a"), (2, "b")]);
    l.token_arrived(at(1), &a);
    l.request(at(2), c(3), acquire_named("a", 1_000));
    assert_eq!(l.grant_next(at(3), &a, 1, FAR, true), Some(c(1)));
    // `b`'s token never arrived: nobody of `b` is in a batch.
    assert_eq!(l.grant_next(at(3), &b, 2, FAR, true), None);
    l.request(at(4), c(1), LockRequest::Release);
    // The later arrival at `a` waits for the next batch.
    assert_eq!(l.grant_next(at(4), &a, 3, FAR, true), None);
    l.token_arrived(at(5), &b);
    assert_eq!(l.grant_next(at(5), &b, 4, FAR, true), Some(c(2)));
    expect(
        &mut l,
        &[(1, granted(1, FAR)), (1, LockReply::Released), (2, granted(4, FAR))],
        &[
            ev_granted("a", 1, 1, 3, FAR),
            ev_released("a", 1, 1, 1, ReleaseHow::Released),
            ev_granted("b", 2, 4, 5, FAR),
        ],
    );
    assert!(l.has_waiters(&a));
}

#[test]
fn max_hold_revokes_per_name() {
    let (a, b) = (n("a"), n("b"));
    let mut l = with_waiters(LocksConfig { max_hold: Some(ms(50)), ..cfg() }, 4, &[(1, "a"), (2, "b")]);
    assert_eq!(l.grant_next(T0, &a, 1, at(200), false), Some(c(1)));
    assert_eq!(l.grant_next(at(30), &b, 2, at(200), false), Some(c(2)));
    let _ = (replies(&mut l), events(&mut l));
    assert_eq!(l.poll_timeout(), Some(at(50)));
    l.handle_timeout(at(50));
    expect(
        &mut l,
        &[(1, LockReply::LockLost { reason: "held longer than max_hold_ms".to_owned() })],
        &[lock_ev(&a, LockEvent::Revoking { client: c(1), fence: 1 })],
    );
    assert_eq!(l.poll_timeout(), Some(at(80)));
    // A revoked hold is still bound: a second acquire is "already holding".
    l.request(at(60), c(1), acquire_named("b", 1_000));
    expect(&mut l, &[(1, refused(ALREADY_HOLDING))], &[]);
}

// ---- property test ------------------------------------------------------

const SLOTS: usize = 6;
/// Names 0..3 are named locks; index 3 is the unnamed lock.
const NAMES: usize = 4;

fn name_of(i: usize) -> LockName {
    match i {
        0 => n("a"),
        1 => n("b"),
        2 => n("db/x"),
        _ => LockName::unnamed(),
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Client slot asks for name index (unnamed: `Acquire`).
    Acquire(usize, usize, u64),
    /// `AcquireNamed` with the empty name.
    BadName(usize),
    Release(usize),
    /// The client's connection closes; the slot gets a fresh client.
    Gone(usize),
    /// Time passes and the driver wakes us.
    Tick(u64),
    /// The driver wakes us exactly at `poll_timeout`.
    Wake,
    TokenArrived(usize),
    /// `grant_next` on a name with a lease ending this many ms after now.
    Grant(usize, bool, i64),
    Renew(usize, i64),
    Lose(usize),
    Shutdown,
}

fn arb_op() -> impl Strategy<Value = Op> {
    let slot = 0..SLOTS;
    let name = 0..NAMES;
    let timeout = prop_oneof![Just(0u64), 1u64..40, Just(1_000)];
    let lease = prop_oneof![1 => -3i64..=0, 6 => 1i64..80];
    prop_oneof![
        8 => (slot.clone(), name.clone(), timeout).prop_map(|(s, n, t)| Op::Acquire(s, n, t)),
        1 => slot.clone().prop_map(Op::BadName),
        3 => slot.clone().prop_map(Op::Release),
        2 => slot.prop_map(Op::Gone),
        4 => (0u64..30).prop_map(Op::Tick),
        2 => Just(Op::Wake),
        2 => name.clone().prop_map(Op::TokenArrived),
        6 => (name.clone(), any::<bool>(), lease.clone()).prop_map(|(n, b, d)| Op::Grant(n, b, d)),
        2 => (name.clone(), lease).prop_map(|(n, d)| Op::Renew(n, d)),
        1 => name.prop_map(Op::Lose),
    ]
}

fn arb_cfg() -> impl Strategy<Value = (LocksConfig, usize)> {
    (0usize..4, proptest::option::of(0u64..50), prop_oneof![Just(0u64), 1u64..20], 0usize..=NAMES).prop_map(
        |(max_queue, max_hold, try_window, max_locks)| {
            (LocksConfig { max_queue, max_hold: max_hold.map(ms), try_window: ms(try_window) }, max_locks)
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

/// Checks every invariant of the state against itself and the model.
fn check(
    l: &mut N,
    all_clients: &[ClientId],
    holders: &BTreeMap<LockName, (ClientId, u128)>,
    last_fences: &BTreeMap<LockName, u128>,
) -> Result<(), TestCaseError> {
    let s = &l.locks;
    // Every client waits or holds in at most one name, and the binding
    // tables say exactly where.
    for &cl in all_clients {
        let at: Vec<&LockName> = s.names.iter().filter(|(_, e)| e.queue.knows(cl)).map(|(nm, _)| nm).collect();
        prop_assert!(at.len() <= 1, "{} known at {:?}", cl, at);
        prop_assert_eq!(s.clients.get(&cl), at.first().copied(), "binding of {}", cl);
    }
    for (nm, e) in &s.names {
        // No idle name is kept.
        prop_assert!(!e.queue.is_idle(), "idle {:?} kept", nm);
        for cl in &e.clients {
            prop_assert!(e.queue.knows(*cl), "{} bound to {:?} unknown there", cl, nm);
            prop_assert_eq!(s.clients.get(cl), Some(nm));
        }
        // At most one holder, the one the events say.
        prop_assert_eq!(e.queue.holder(), holders.get(nm).copied(), "holder of {:?}", nm);
        // The last fence granted since the name was (re)created.
        prop_assert_eq!(e.last_fence, last_fences.get(nm).copied(), "last fence of {:?}", nm);
    }
    for (&cl, nm) in &s.clients {
        prop_assert!(s.names.get(nm).is_some_and(|e| e.clients.contains(&cl)), "{} bound to missing {:?}", cl, nm);
    }
    for nm in holders.keys() {
        prop_assert!(s.names.contains_key(nm), "held {:?} forgotten", nm);
    }
    let busy = s.names.values().filter(|e| e.queue.has_waiters() || e.queue.is_held()).count();
    prop_assert_eq!(s.known(), busy);
    prop_assert_eq!(s.known(), s.names.len());
    let sum: usize = s.names.values().map(|e| e.queue.waiting()).sum();
    prop_assert_eq!(s.waiting(), sum);
    prop_assert_eq!(s.poll_timeout(), s.names.values().filter_map(|e| e.queue.poll_timeout()).min());
    prop_assert_eq!(s.any_held(), !holders.is_empty());
    let want_waited: Vec<&LockName> = s.names.iter().filter(|(_, e)| e.queue.has_waiters()).map(|(k, _)| k).collect();
    prop_assert_eq!(s.waited_for().collect::<Vec<_>>(), want_waited);

    // The list agrees (and listing changes nothing: `N::list` asserts it).
    let LockReply::Locks { locks: listed, known } = l.list() else {
        return Err(TestCaseError::fail("ListLocks not answered Locks"));
    };
    let s = &l.locks;
    prop_assert_eq!(known, s.known() as u64);
    prop_assert_eq!(listed.len(), s.known());
    let listed_sum: u64 = listed.iter().map(|i| u64::from(i.waiters)).sum();
    prop_assert_eq!(listed_sum, s.waiting() as u64);
    for w in listed.windows(2) {
        prop_assert!(
            w[0].waiters > w[1].waiters || (w[0].waiters == w[1].waiters && w[0].name < w[1].name),
            "list order {:?}",
            listed
        );
    }
    for i in &listed {
        let want = LockInfo {
            name: i.name.clone(),
            held_fence: holders.get(&i.name).map(|h| h.1),
            last_fence: last_fences.get(&i.name).copied(),
            waiters: s.names.get(&i.name).map_or(u32::MAX, |e| e.queue.waiting() as u32),
        };
        prop_assert_eq!(i, &want);
    }
    Ok(())
}

fn run(cfg: LocksConfig, max_locks: usize, ops: Vec<Op>, shutdown_at: Option<usize>) -> Result<(), TestCaseError> {
    let mut l = N::new(cfg, max_locks);
    let mut slots: Vec<ClientId> = (0..SLOTS as u64).map(ClientId).collect();
    let mut all_clients = slots.clone();
    let mut next_id = SLOTS as u64;
    let mut now = T0;
    let mut fence = 0u128;
    // The holder of each name and the last fence granted at each known
    // name, according to the events.
    let mut holders: BTreeMap<LockName, (ClientId, u128)> = BTreeMap::new();
    let mut last_fences: BTreeMap<LockName, u128> = BTreeMap::new();
    let mut shut = false;

    for (i, op) in ops.into_iter().enumerate() {
        let op = if shutdown_at == Some(i) { Op::Shutdown } else { op };
        let before = l.locks.clone();
        let bound_before = |cl: ClientId| before.clients.get(&cl).cloned();
        let mut subject = None;
        match op {
            Op::Acquire(s, k, t) => {
                subject = Some(slots[s]);
                let req =
                    if k == 3 { acquire(t) } else { LockRequest::AcquireNamed { name: name_of(k), timeout_ms: t } };
                l.request(now, slots[s], req);
            }
            Op::BadName(s) => {
                subject = Some(slots[s]);
                l.request(now, slots[s], LockRequest::AcquireNamed { name: LockName::unnamed(), timeout_ms: 10 });
            }
            Op::Release(s) => {
                subject = Some(slots[s]);
                l.request(now, slots[s], LockRequest::Release);
            }
            Op::Gone(s) => {
                l.client_gone(now, slots[s]);
                slots[s] = ClientId(next_id);
                all_clients.push(ClientId(next_id));
                next_id += 1;
            }
            Op::Tick(d) => {
                now = now + ms(d);
                l.handle_timeout(now);
            }
            Op::Wake => {
                if let Some(t) = l.poll_timeout() {
                    now = now.max(t);
                }
                l.handle_timeout(now);
            }
            Op::TokenArrived(k) => l.token_arrived(now, &name_of(k)),
            Op::Grant(k, batch_only, d) => {
                fence += 1;
                let lease = offset(now, d);
                let got = l.grant_next(now, &name_of(k), fence, lease, batch_only);
                if got.is_some() {
                    prop_assert!(lease > now);
                }
            }
            Op::Renew(k, d) => {
                let _ = l.renew(now, &name_of(k), offset(now, d));
            }
            Op::Lose(k) => l.lose(now, &name_of(k), "superseded"),
            Op::Shutdown => {
                shut = true;
                let held = l.shutdown(now);
                prop_assert_eq!(held, l.any_held());
            }
        }
        if matches!(op, Op::Tick(_) | Op::Wake) {
            // Every deadline of every name up to now was handled.
            prop_assert!(l.poll_timeout().is_none_or(|t| t > now), "deadline left at {:?}", l.poll_timeout());
        }

        // The events, each tagged with the name it happened at.
        for e in events(&mut l) {
            match e {
                NamedEvent::Lock { name, event: LockEvent::Granted { client, fence: f, .. } } => {
                    prop_assert!(
                        matches!(op, Op::Grant(k, ..) if name_of(k) == name),
                        "grant of {:?} in {:?}",
                        name,
                        op
                    );
                    prop_assert_eq!(f, fence);
                    prop_assert!(holders.insert(name.clone(), (client, f)).is_none(), "second holder of {:?}", name);
                    last_fences.insert(name.clone(), f);
                    prop_assert_eq!(bound_before(client), Some(name));
                }
                NamedEvent::Lock { name, event: LockEvent::Released { client, fence: f, .. } } => {
                    prop_assert_eq!(holders.remove(&name), Some((client, f)), "release at {:?}", name);
                    prop_assert_eq!(bound_before(client), Some(name));
                }
                NamedEvent::Lock { name, event: LockEvent::TimedOut { client, .. } } => {
                    prop_assert_eq!(bound_before(client), Some(name));
                    prop_assert!(matches!(op, Op::Tick(_) | Op::Wake | Op::Grant(..)));
                }
                NamedEvent::Lock { name, event: LockEvent::Renewed { client, fence: f, .. } } => {
                    prop_assert!(matches!(op, Op::Renew(k, _) if name_of(k) == name));
                    prop_assert_eq!(holders.get(&name), Some(&(client, f)));
                }
                NamedEvent::Lock { name, event: LockEvent::Revoking { client, fence: f } } => {
                    prop_assert_eq!(holders.get(&name), Some(&(client, f)));
                }
                NamedEvent::Refused { reason: "bad_name" } => prop_assert!(matches!(op, Op::BadName(_))),
                NamedEvent::Refused { reason: "too_many_locks" } => {
                    let Op::Acquire(s, k, _) = op else {
                        return Err(TestCaseError::fail(format!("too_many_locks during {op:?}")));
                    };
                    prop_assert_eq!(bound_before(slots[s]), None);
                    prop_assert!(!before.names.contains_key(&name_of(k)));
                    prop_assert_eq!(before.known(), max_locks);
                }
                NamedEvent::Refused { reason } => return Err(TestCaseError::fail(format!("refused {reason}"))),
            }
        }
        // A name no longer known forgets its last fence.
        last_fences.retain(|nm, _| l.locks.names.contains_key(nm));

        let rs = replies(&mut l);
        match (op, subject) {
            (Op::Acquire(_, k, _), Some(cl)) => {
                prop_assert!(rs.len() <= 1, "{:?}", rs);
                match (bound_before(cl), rs.first()) {
                    // A second acquire (any name) is refused by its own queue.
                    (Some(bound), r) => {
                        let holding = before.names[&bound].queue.holder().is_some_and(|h| h.0 == cl);
                        let want = refused(if holding { ALREADY_HOLDING } else { ALREADY_WAITING });
                        prop_assert_eq!(r, Some(&(cl, want)));
                        prop_assert_eq!(&l.locks, &before);
                    }
                    (None, None) => {
                        prop_assert!(!shut);
                        prop_assert_eq!(l.locks.clients.get(&cl), Some(&name_of(k)));
                    }
                    (None, Some((to, LockReply::Refused { reason }))) => {
                        prop_assert_eq!(*to, cl);
                        prop_assert!(
                            reason == QUEUE_FULL
                                || reason == SHUTTING_DOWN_REASON
                                || reason.starts_with("too many locks"),
                            "refused {}",
                            reason
                        );
                        prop_assert_eq!(&l.locks, &before);
                    }
                    (None, Some(r)) => return Err(TestCaseError::fail(format!("Acquire answered {r:?}"))),
                }
            }
            (Op::BadName(_), Some(cl)) => {
                prop_assert_eq!(rs, vec![(cl, refused(EMPTY_NAME))]);
                prop_assert_eq!(&l.locks, &before);
            }
            (Op::Release(_), Some(cl)) => match bound_before(cl) {
                Some(_) => {
                    prop_assert_eq!(rs, vec![(cl, LockReply::Released)]);
                    prop_assert_eq!(l.locks.clients.get(&cl), None);
                }
                None => {
                    prop_assert_eq!(rs, vec![(cl, refused(NOT_HOLDING_REASON))]);
                    prop_assert_eq!(&l.locks, &before);
                }
            },
            (Op::Gone(_), _) => prop_assert_eq!(rs, vec![]),
            _ => {
                for (cl, r) in &rs {
                    // Nothing unasked goes to a client not known before.
                    prop_assert!(bound_before(*cl).is_some(), "{:?} to unknown {}", r, cl);
                }
            }
        }

        check(&mut l, &all_clients, &holders, &last_fences)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_every_invariant(
        (cfg, max_locks) in arb_cfg(),
        ops in proptest::collection::vec(arb_op(), 0..80),
        shutdown_at in proptest::option::of(0usize..100),
    ) {
        run(cfg, max_locks, ops, shutdown_at)?;
    }
}

/// The names touched since the last take: a request's, a release's, a
/// grant's, even an unknown name's (a grant for a name nobody waits for
/// any more: the core gives it back); taking empties the set, and the set
/// is not part of the state's equality.
#[test]
fn touched_names_are_what_changed_since_the_last_take() {
    let mut l = N::new(cfg(), 10);
    let before = l.locks.clone();
    l.request(at(0), c(1), acquire_named("a", 1_000));
    l.request(at(0), c(2), acquire_named("b", 1_000));
    assert_eq!(l.locks.take_touched(), [n("a"), n("b")].into_iter().collect());
    assert!(l.locks.take_touched().is_empty(), "taking empties it");
    l.request(at(1), c(1), LockRequest::Release);
    l.grant_next(at(1), &n("gone"), 7, FAR, false);
    assert_eq!(l.locks.take_touched(), [n("a"), n("gone")].into_iter().collect());
    l.request(at(2), c(2), LockRequest::Release);
    l.locks.take_touched();
    assert_eq!(l.locks, before, "back to nothing known");
}

fn campaign(name: &str, value: &str) -> LockRequest {
    LockRequest::Campaign { name: n(name), value: value.to_owned(), timeout_ms: 10_000 }
}

/// (elections.md) A campaign waits for `elect:NAME`, with its value: the
/// holder's value is known once granted and forgotten with the client.
#[test]
fn a_campaign_is_the_acquire_of_the_elections_lock_with_its_value() {
    let mut l = N::new(cfg(), 10);
    let x = LockName::election(&n("x"));
    l.request(T0, c(1), campaign("x", "host-a"));
    l.request(T0, c(2), campaign("x", "host-b"));
    assert!(l.has_waiters(&x) && !l.has_waiters(&n("x")));
    assert_eq!(l.holder_value(&x), None);
    assert_eq!(l.grant_next(at(1), &x, 5, at(100), false), Some(c(1)));
    assert_eq!(l.holder_value(&x), Some("host-a"));
    l.request(at(2), c(1), LockRequest::Release);
    assert_eq!(l.grant_next(at(3), &x, 6, at(100), false), Some(c(2)));
    assert_eq!(l.holder_value(&x), Some("host-b"));
    l.client_gone(at(4), c(2));
    assert_eq!(l.holder_value(&x), None);
    assert_eq!(l.locks.known(), 0, "an election nobody campaigns in is forgotten");
}

/// A campaign's name must be a user name and its value at most 1 KiB; an
/// election's lock is not a client's `AcquireNamed`; an `Observe` is the
/// daemon's to answer, not the queues'. Each is refused, changing nothing.
#[test]
fn bad_campaigns_and_names_are_refused_changing_nothing() {
    let mut l = N::new(cfg(), 10);
    let x = LockName::election(&n("x"));
    let bad = [
        LockRequest::Campaign { name: x.clone(), value: "v".into(), timeout_ms: 1 },
        LockRequest::Campaign { name: LockName::unnamed(), value: "v".into(), timeout_ms: 1 },
        LockRequest::Campaign { name: n("x"), value: "v".repeat(MAX_VALUE + 1), timeout_ms: 1 },
        LockRequest::AcquireNamed { name: x.clone(), timeout_ms: 1 },
        LockRequest::Observe { name: n("x"), watch: true },
    ];
    for (i, req) in bad.into_iter().enumerate() {
        let before = l.locks.clone();
        l.request(T0, c(i as u64), req.clone());
        let got = replies(&mut l);
        assert!(matches!(&got[..], [(_, LockReply::Refused { .. })]), "{req:?}: {got:?}");
        assert_eq!(l.locks, before, "{req:?} changed the state");
    }
    // A value of exactly 1 KiB is fine.
    l.request(T0, c(9), LockRequest::Campaign { name: n("x"), value: "v".repeat(MAX_VALUE), timeout_ms: 1 });
    assert!(l.has_waiters(&x));
}
