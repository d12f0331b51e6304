//! One test per handler of [`HbRing`], asserting the exact outputs, plus a
//! few of [`HbNode`](crate::HbNode) through the `Protocol` trait.
//!
//! Every test is about node 2 of the ring 1 → 2 → 3 → 4 → 1, in life 20,
//! started at `T0`; node `k` of the others lives in life `10 k`.

use ftcore::{ClientId, Output, PeerStatus, Protocol};

use super::*;
use crate::{HbNode, HbReply, HbRequest};

const T0: Instant = Instant::from_millis(1_000);
const HEARTBEAT: Duration = Duration::from_millis(50);
const SUSPECT: Duration = Duration::from_millis(250);
const MY_INC: Incarnation = Incarnation(20);

type Out = Output<HbMsg, (), HbEvent>;

/// The ring with the output buffer a core would own: the same calls as
/// [`HbRing`], minus the buffer argument.
#[derive(Clone, Debug, PartialEq)]
struct R {
    ring: HbRing,
    out: ftcore::Outbox<HbMsg, (), HbEvent>,
}

impl std::ops::Deref for R {
    type Target = HbRing;
    fn deref(&self) -> &HbRing {
        &self.ring
    }
}

impl std::ops::DerefMut for R {
    fn deref_mut(&mut self) -> &mut HbRing {
        &mut self.ring
    }
}

impl R {
    fn new(cfg: HbConfig, m: &Membership, me: NodeId, inc: Incarnation, now: Instant) -> Result<R, MembershipError> {
        let mut out = ftcore::Outbox::default();
        let ring = HbRing::new(cfg, m, me, inc, now, &mut out)?;
        Ok(R { ring, out })
    }
    fn on_contact(&mut self, now: Instant, from: NodeId, inc: Incarnation) -> Contact {
        self.ring.on_contact(now, from, inc, &mut self.out)
    }
    fn handle_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: HbMsg) {
        self.ring.handle_message(now, from, inc, msg, &mut self.out);
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.ring.handle_timeout(now, &mut self.out);
    }
    fn drain(&mut self) -> Vec<Out> {
        self.out.drain()
    }
}

fn cfg() -> HbConfig {
    HbConfig::new(HEARTBEAT, SUSPECT)
}

/// `ms` milliseconds after `T0`.
fn at(ms: u64) -> Instant {
    ftcore::testing::at(T0, ms)
}

fn n(id: u32) -> NodeId {
    NodeId(id)
}

/// The life node `k` runs in.
fn inc(k: u32) -> Incarnation {
    Incarnation(10 * u64::from(k))
}

fn alive(x: u64) -> Liveness {
    Liveness::alive(Incarnation(x))
}

fn dead(x: u64) -> Liveness {
    Liveness::dead(Incarnation(x))
}

fn send(to: u32, msg: HbMsg) -> Out {
    Output::Send { to: n(to), msg }
}

fn ev(e: HbEvent) -> Out {
    Output::Event(e)
}

fn heartbeat(digest: u64) -> HbMsg {
    HbMsg::Heartbeat { digest }
}

fn ack(digest: u64) -> HbMsg {
    HbMsg::HeartbeatAck { digest }
}

fn report(about: u32, liveness: Liveness) -> HbMsg {
    HbMsg::Report { about: n(about), liveness }
}

/// `r`'s whole current view as a `View` message.
fn view_msg(r: &HbRing) -> HbMsg {
    HbMsg::View { entries: r.view().entries().collect() }
}

/// The digest of node 2's view holding `others` (in life `me`).
fn digest_of(me: Incarnation, others: &[(u32, Liveness)]) -> u64 {
    let mut v = RingView::new(&Membership::of_size(4), n(2), me).unwrap();
    for (id, l) in others {
        assert!(v.merge(n(*id), *l));
    }
    v.digest()
}

/// The digest `r`'s view will have once it has seen `from` in life `inc`
/// (what a peer that agrees with us sends).
fn digest_after_seeing(r: &HbRing, from: u32, inc: Incarnation) -> u64 {
    let mut v = r.view().clone();
    v.observe(n(from), inc);
    v.digest()
}

/// Node 2 at `T0`, construction outputs drained.
fn ring() -> R {
    let mut r = R::new(cfg(), &Membership::of_size(4), n(2), MY_INC, T0).unwrap();
    r.drain();
    r
}

/// First contact with node `k` (an ack carrying the digest we will have):
/// the newcomer gets our view, and if it is our successor, a heartbeat at
/// once (its new life is watched afresh).
fn meet(r: &mut R, k: u32, when: Instant) {
    let digest = digest_after_seeing(r, k, inc(k));
    r.handle_message(when, n(k), inc(k), ack(digest));
    let mut expected = vec![send(k, view_msg(r))];
    if r.view().successor() == Some(n(k)) {
        expected.push(send(k, heartbeat(digest)));
    }
    assert_eq!(r.drain(), expected, "first contact with {k}");
}

fn timers(r: &HbRing) -> Vec<(Timer, Instant)> {
    r.timers.iter().collect()
}

// ---- construction ----

#[test]
fn construction_announces_neighbours_heartbeats_the_successor_and_arms_timers() {
    let mut r = R::new(cfg(), &Membership::of_size(4), n(2), MY_INC, T0).unwrap();
    let d = r.view().digest();
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::PredecessorChanged { from: None, to: Some(n(1)) }),
            ev(HbEvent::SuccessorChanged { from: None, to: Some(n(3)) }),
            send(3, heartbeat(d)),
        ]
    );
    assert_eq!(r.drain(), vec![]);
    assert_eq!(r.poll_timeout(), Some(at(50)));
    assert_eq!(
        timers(&r),
        vec![
            (Timer::Heartbeat, at(50)),
            (Timer::WatchPred, at(250)),
            (Timer::WatchSucc, at(250)),
            (Timer::Probe, at(250))
        ]
    );
    assert_eq!(r.incarnation(), MY_INC);
    assert_eq!(
        r.view().entries().collect::<Vec<_>>(),
        vec![(n(1), alive(0)), (n(2), alive(20)), (n(3), alive(0)), (n(4), alive(0))]
    );
    assert_eq!((r.view().predecessor(), r.view().successor()), (Some(n(1)), Some(n(3))));
    assert_eq!(r.repair_since, None);
}

#[test]
fn construction_fails_for_a_node_that_is_not_a_member() {
    let err = R::new(cfg(), &Membership::of_size(4), n(9), MY_INC, T0).unwrap_err();
    assert_eq!(err, MembershipError::SelfMissing(9));
}

#[test]
fn a_ring_of_one_is_alone_from_the_start() {
    let mut r = R::new(cfg(), &Membership::of_size(1), n(1), Incarnation(5), T0).unwrap();
    assert_eq!(r.drain(), vec![]);
    assert_eq!(timers(&r), vec![(Timer::Probe, at(250))]);
    r.handle_timeout(at(250));
    assert_eq!(r.drain(), vec![]);
    assert_eq!(timers(&r), vec![(Timer::Probe, at(500))]);
}

// ---- heartbeats and acks ----

#[test]
fn first_heartbeat_from_the_predecessor_gets_our_view_and_an_ack() {
    let mut r = ring();
    let d = digest_after_seeing(&r, 1, inc(1));
    r.handle_message(at(10), n(1), inc(1), heartbeat(d));
    assert_eq!(
        r.drain(),
        vec![
            send(
                1,
                HbMsg::View { entries: vec![(n(1), alive(10)), (n(2), alive(20)), (n(3), alive(0)), (n(4), alive(0))] }
            ),
            send(1, ack(d)),
        ]
    );
    assert_eq!(r.view().liveness(n(1)), Some(alive(10)));
    assert_eq!(r.timers.get(Timer::WatchPred), Some(at(260)));
}

#[test]
fn later_heartbeats_from_the_predecessor_get_just_an_ack() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    let d = r.view().digest();
    r.handle_message(at(60), n(1), inc(1), heartbeat(d));
    assert_eq!(r.drain(), vec![send(1, ack(d))]);
    assert_eq!(r.timers.get(Timer::WatchPred), Some(at(310)));
    assert_eq!(r.poll_timeout(), Some(at(50)), "the heartbeat timer is unaffected");
}

#[test]
fn heartbeat_with_a_different_digest_gets_an_ack_and_our_view() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    let d = r.view().digest();
    r.handle_message(at(60), n(1), inc(1), heartbeat(d ^ 1));
    assert_eq!(r.drain(), vec![send(1, ack(d)), send(1, view_msg(&r))]);
}

#[test]
fn heartbeat_from_a_node_that_is_not_the_predecessor_is_still_acked() {
    let mut r = ring();
    meet(&mut r, 4, at(10));
    let d = r.view().digest();
    r.handle_message(at(20), n(4), inc(4), heartbeat(d));
    assert_eq!(r.drain(), vec![send(4, ack(d))]);
    assert_eq!(r.timers.get(Timer::WatchPred), Some(at(250)), "only the predecessor's messages feed its watch");
}

#[test]
fn first_ack_from_the_successor_watches_its_life_afresh_and_heartbeats_it() {
    let mut r = ring();
    let d = digest_after_seeing(&r, 3, inc(3));
    r.handle_message(at(30), n(3), inc(3), ack(d));
    assert_eq!(r.drain(), vec![send(3, view_msg(&r)), send(3, heartbeat(d))]);
    assert_eq!(r.timers.get(Timer::WatchSucc), Some(at(280)));
    assert_eq!(r.timers.get(Timer::Heartbeat), Some(at(80)));
}

#[test]
fn ack_from_the_successor_postpones_its_suspicion() {
    let mut r = ring();
    meet(&mut r, 3, at(100));
    assert_eq!(r.timers.get(Timer::WatchSucc), Some(at(350)));
    let d = r.view().digest();
    r.handle_message(at(200), n(3), inc(3), ack(d));
    assert_eq!(r.drain(), vec![]);
    assert_eq!(r.timers.get(Timer::WatchSucc), Some(at(450)));
    // Keep the predecessor alive too, then pass the successor's original deadline.
    r.handle_message(at(200), n(1), inc(1), heartbeat(digest_after_seeing(&r, 1, inc(1))));
    r.drain();
    let d = r.view().digest();
    r.handle_timeout(at(250));
    assert_eq!(r.drain(), vec![send(3, heartbeat(d))], "just the (late) heartbeat, no suspicion");
    assert!(r.view().is_alive(n(3)));
    assert_eq!(r.poll_timeout(), Some(at(300)));
    assert_eq!(r.timers.get(Timer::WatchSucc), Some(at(450)));
}

#[test]
fn ack_with_a_different_digest_gets_our_view() {
    let mut r = ring();
    meet(&mut r, 3, at(10));
    let d = r.view().digest();
    r.handle_message(at(60), n(3), inc(3), ack(d.wrapping_add(1)));
    assert_eq!(r.drain(), vec![send(3, view_msg(&r))]);
    assert_eq!(r.timers.get(Timer::WatchSucc), Some(at(310)));
}

#[test]
fn heartbeat_timer_sends_to_the_successor_and_rearms() {
    let mut r = ring();
    let d = r.view().digest();
    r.handle_timeout(at(49));
    assert_eq!(r.drain(), vec![]);
    r.handle_timeout(at(50));
    assert_eq!(r.drain(), vec![send(3, heartbeat(d))]);
    assert_eq!(r.timers.get(Timer::Heartbeat), Some(at(100)));
    assert_eq!(r.poll_timeout(), Some(at(100)));
    // A timer handled late re-arms from when it was handled.
    r.handle_timeout(at(130));
    assert_eq!(r.drain(), vec![send(3, heartbeat(d))]);
    assert_eq!(r.poll_timeout(), Some(at(180)));
}

// ---- suspicion ----

#[test]
fn silent_predecessor_is_suspected_reported_and_replaced() {
    let mut r = ring();
    meet(&mut r, 1, at(0));
    meet(&mut r, 3, at(150));
    let d = r.view().digest();
    r.handle_timeout(at(249));
    assert_eq!(r.drain(), vec![send(3, heartbeat(d))], "the heartbeat due at 200 ms, handled late");
    r.handle_timeout(at(250));
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Suspected { node: n(1), inc: inc(1) }),
            // The new predecessor hears this life and our digest.
            send(4, heartbeat(r.view().digest())),
            ev(HbEvent::PredecessorChanged { from: Some(n(1)), to: Some(n(4)) }),
            send(3, report(1, dead(10))),
        ]
    );
    assert_eq!(r.view().liveness(n(1)), Some(dead(10)));
    assert_eq!(r.view().predecessor(), Some(n(4)));
    assert_eq!(r.timers.get(Timer::WatchPred), Some(at(500)), "the new predecessor gets a full grace period");
    assert_eq!(r.repair_since, Some(at(250)));
    assert_eq!(r.poll_timeout(), Some(at(299)));
}

/// The watch fires more than a heartbeat after its deadline: this node
/// itself did not run (a pause). The silence is its own; the predecessor
/// gets a fresh `suspect_after` and its heartbeat, read next, keeps it.
#[test]
fn a_watch_that_fires_late_after_a_stall_suspects_nobody() {
    let mut r = ring();
    meet(&mut r, 1, at(0));
    meet(&mut r, 3, at(0));
    // The watch of 1 was due at 250 ms; the node runs again at 400 ms.
    let _ = r.drain();
    r.handle_timeout(at(400));
    let outs = r.drain();
    assert!(!outs.iter().any(|o| matches!(o, Output::Event(HbEvent::Suspected { .. }))), "{outs:?}");
    assert_eq!(r.view().liveness(n(1)), Some(alive(10)));
    assert_eq!(r.timers.get(Timer::WatchPred), Some(at(650)), "a fresh grace period from the resume");
    // Late by no more than a heartbeat, it is a suspicion as before.
    let mut late = r.clone();
    late.handle_timeout(at(650 + 50));
    assert!(late.drain().contains(&ev(HbEvent::Suspected { node: n(1), inc: inc(1) })));
    // One grace per silence: stalled again with nothing heard from 1
    // since, this node suspects it (a node starved of CPU, every timer
    // late, still suspects a dead neighbour).
    r.handle_timeout(at(800));
    assert!(r.drain().contains(&ev(HbEvent::Suspected { node: n(1), inc: inc(1) })));
}

#[test]
fn an_unreachable_predecessor_is_suspected_at_once_and_another_peer_is_not() {
    let mut r = ring();
    meet(&mut r, 1, at(0));
    meet(&mut r, 3, at(0));
    r.drain();
    // Node 4 is no neighbour of 2: its own neighbours act on it.
    r.ring.peer_unreachable(at(20), n(4), &mut r.out);
    assert_eq!(r.drain(), vec![]);
    assert_eq!(r.view().liveness(n(4)), Some(alive(0)), "never met, still presumed alive");
    // The predecessor's process is gone: what 250 ms of silence does, now.
    r.ring.peer_unreachable(at(20), n(1), &mut r.out);
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Suspected { node: n(1), inc: inc(1) }),
            // The new predecessor hears this life and our digest.
            send(4, heartbeat(r.view().digest())),
            ev(HbEvent::PredecessorChanged { from: Some(n(1)), to: Some(n(4)) }),
            send(3, report(1, dead(10))),
        ]
    );
    assert_eq!(r.view().predecessor(), Some(n(4)));
    assert_eq!(r.repair_since, Some(at(20)));
    // Said again (another broken connection): nothing more.
    r.ring.peer_unreachable(at(30), n(1), &mut r.out);
    assert_eq!(r.drain(), vec![]);
}

#[test]
fn new_predecessor_heartbeat_completes_the_repair() {
    let mut r = ring();
    meet(&mut r, 1, at(0));
    meet(&mut r, 3, at(200));
    r.handle_timeout(at(250));
    r.drain();
    let d = digest_after_seeing(&r, 4, inc(4));
    r.handle_message(at(280), n(4), inc(4), heartbeat(d));
    assert_eq!(
        r.drain(),
        vec![
            send(
                4,
                HbMsg::View {
                    entries: vec![(n(1), dead(10)), (n(2), alive(20)), (n(3), alive(30)), (n(4), alive(40))]
                }
            ),
            send(4, ack(d)),
            ev(HbEvent::Repaired { new_predecessor: n(4), took: Duration::from_millis(30) }),
        ]
    );
    assert_eq!(r.repair_since, None);
    assert_eq!(r.timers.get(Timer::WatchPred), Some(at(530)));
    // The repair is reported once.
    r.handle_message(at(330), n(4), inc(4), heartbeat(d));
    assert_eq!(r.drain(), vec![send(4, ack(d))]);
}

#[test]
fn silent_successor_is_suspected_and_heartbeats_move_to_the_next_node() {
    let mut r = ring();
    meet(&mut r, 3, at(10));
    meet(&mut r, 1, at(100));
    let before = r.view().digest();
    let after = digest_of(MY_INC, &[(1, alive(10)), (3, dead(30))]);
    r.handle_timeout(at(260));
    assert_eq!(
        r.drain(),
        vec![
            send(3, heartbeat(before)),
            ev(HbEvent::Suspected { node: n(3), inc: inc(3) }),
            ev(HbEvent::SuccessorChanged { from: Some(n(3)), to: Some(n(4)) }),
            send(4, heartbeat(after)),
            send(4, report(3, dead(30))),
        ]
    );
    assert_eq!(r.view().digest(), after);
    assert_eq!(r.view().successor(), Some(n(4)));
    assert_eq!(r.timers.get(Timer::WatchSucc), Some(at(510)));
    assert_eq!(r.timers.get(Timer::Heartbeat), Some(at(310)));
    assert_eq!(r.repair_since, None, "only a lost predecessor is a repair to measure");
}

#[test]
fn a_late_watch_timer_for_a_neighbour_heard_from_is_rearmed() {
    let mut r = ring();
    meet(&mut r, 1, at(0));
    meet(&mut r, 3, at(0));
    r.handle_message(at(100), n(1), inc(1), ack(r.view().digest()));
    r.handle_message(at(100), n(3), inc(3), ack(r.view().digest()));
    assert_eq!(r.drain(), vec![]);
    // A stale deadline (a timer may fire at any moment) must not suspect anyone.
    r.timers.set(Timer::WatchPred, at(200));
    r.timers.set(Timer::WatchSucc, at(200));
    r.timers.set(Timer::Heartbeat, at(300));
    r.handle_timeout(at(200));
    assert_eq!(r.drain(), vec![]);
    assert_eq!(r.timers.get(Timer::WatchPred), Some(at(350)));
    assert_eq!(r.timers.get(Timer::WatchSucc), Some(at(350)));
}

// ---- reports ----

#[test]
fn report_about_a_third_node_is_applied_and_forwarded_once() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    r.handle_message(at(20), n(1), inc(1), report(4, dead(40)));
    assert_eq!(r.drain(), vec![ev(HbEvent::Down { node: n(4), inc: inc(4) }), send(3, report(4, dead(40)))]);
    assert_eq!(r.view().liveness(n(4)), Some(dead(40)));
    assert_eq!((r.view().predecessor(), r.view().successor()), (Some(n(1)), Some(n(3))));
    // The same report after its lap, or an older belief, changes nothing and stops.
    for older in [dead(40), alive(40), dead(39), alive(0)] {
        r.handle_message(at(30), n(1), inc(1), report(4, older));
        assert_eq!(r.drain(), vec![], "{older:?}");
    }
}

#[test]
fn report_that_the_successor_died_moves_heartbeats_on() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    r.handle_message(at(20), n(1), inc(1), report(3, dead(30)));
    let d = r.view().digest();
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Down { node: n(3), inc: inc(3) }),
            ev(HbEvent::SuccessorChanged { from: Some(n(3)), to: Some(n(4)) }),
            send(4, heartbeat(d)),
            send(4, report(3, dead(30))),
        ]
    );
    assert_eq!(r.timers.get(Timer::Heartbeat), Some(at(70)));
    assert_eq!(r.timers.get(Timer::WatchSucc), Some(at(270)));
}

#[test]
fn report_that_the_predecessor_died_starts_a_repair() {
    let mut r = ring();
    meet(&mut r, 3, at(10));
    r.handle_message(at(20), n(3), inc(3), report(1, dead(10)));
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Down { node: n(1), inc: inc(1) }),
            // The new predecessor hears this life and our digest.
            send(4, heartbeat(r.view().digest())),
            ev(HbEvent::PredecessorChanged { from: Some(n(1)), to: Some(n(4)) }),
            send(3, report(1, dead(10))),
        ]
    );
    assert_eq!(r.repair_since, Some(at(20)));
    let d = digest_after_seeing(&r, 4, inc(4));
    r.handle_message(at(45), n(4), inc(4), heartbeat(d));
    assert_eq!(
        r.drain(),
        vec![
            send(4, view_msg(&r)),
            send(4, ack(d)),
            ev(HbEvent::Repaired { new_predecessor: n(4), took: Duration::from_millis(25) }),
        ]
    );
}

/// The new predecessor heartbeat us just before the news that the old one
/// died: the ring was already whole (a repair of 0), and it is still told
/// our digest — it may have moved on since to a node between us that it
/// holds alive and we dead (hbring sweep seed 3928).
#[test]
fn a_new_predecessor_just_heard_from_is_told_too() {
    let mut r = ring();
    meet(&mut r, 3, at(10));
    let d = digest_after_seeing(&r, 4, inc(4));
    r.handle_message(at(15), n(4), inc(4), heartbeat(d));
    r.drain();
    r.handle_message(at(20), n(3), inc(3), report(1, dead(10)));
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Down { node: n(1), inc: inc(1) }),
            ev(HbEvent::Repaired { new_predecessor: n(4), took: Duration::ZERO }),
            send(4, heartbeat(r.view().digest())),
            ev(HbEvent::PredecessorChanged { from: Some(n(1)), to: Some(n(4)) }),
            send(3, report(1, dead(10))),
        ]
    );
    assert_eq!(r.repair_since, None);
}

/// Two predecessors dying one after the other: the second new one is told
/// this life and our digest too, though the repair since the first is
/// still measured. It may heartbeat the dead node between us, whose report
/// of the first death was lost with it; its answer to our digest puts us
/// in agreement before we would suspect it (every-fault seeds 3209, 4355).
#[test]
fn a_second_new_predecessor_during_a_repair_is_told_too() {
    let mut r = ring();
    meet(&mut r, 3, at(10));
    r.handle_message(at(20), n(3), inc(3), report(1, dead(10)));
    r.drain();
    r.handle_message(at(30), n(3), inc(3), report(4, dead(40)));
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Down { node: n(4), inc: inc(4) }),
            send(3, heartbeat(r.view().digest())),
            ev(HbEvent::PredecessorChanged { from: Some(n(4)), to: Some(n(3)) }),
            send(3, report(4, dead(40))),
        ]
    );
    assert_eq!(r.repair_since, Some(at(20)), "measured from the first death");
}

#[test]
fn report_that_this_life_is_dead_makes_the_node_rejoin() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    r.handle_message(at(20), n(1), inc(1), report(2, dead(20)));
    // The predecessor hears of the new life too (the successor may be dead).
    let d = r.view().digest();
    assert_eq!(
        r.drain(),
        vec![ev(HbEvent::Rejoined { inc: Incarnation(21) }), send(3, report(2, alive(21))), send(1, heartbeat(d))]
    );
    assert_eq!(r.incarnation(), Incarnation(21));
    assert_eq!(r.view().liveness(n(2)), Some(alive(21)));
    assert_eq!((r.view().predecessor(), r.view().successor()), (Some(n(1)), Some(n(3))));
}

#[test]
fn report_about_an_older_life_or_this_life_alive_changes_nothing() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    for l in [dead(19), dead(0), alive(20), alive(99)] {
        r.handle_message(at(20), n(1), inc(1), report(2, l));
        assert_eq!(r.drain(), vec![], "{l:?}");
    }
    assert_eq!(r.incarnation(), MY_INC);
    // Once rejoined, the report about the life left behind is old news.
    r.handle_message(at(30), n(1), inc(1), report(2, dead(20)));
    r.drain();
    r.handle_message(at(40), n(1), inc(1), report(2, dead(20)));
    assert_eq!(r.drain(), vec![]);
    assert_eq!(r.incarnation(), Incarnation(21));
}

#[test]
fn report_of_a_new_life_is_an_up_even_for_a_node_never_heard_from() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    // Only comebacks travel as reports (first contacts and view entries
    // about nodes presumed alive do not), so this is news, and goes on.
    r.handle_message(at(20), n(1), inc(1), report(4, alive(40)));
    assert_eq!(r.drain(), vec![ev(HbEvent::Up { node: n(4), inc: inc(4) }), send(3, report(4, alive(40)))]);
    assert_eq!(r.view().liveness(n(4)), Some(alive(40)));
    // The successor suspected before it was ever heard from, then back.
    r.handle_message(at(30), n(1), inc(1), report(3, dead(0)));
    r.drain();
    r.handle_message(at(40), n(1), inc(1), report(3, alive(30)));
    let d = r.view().digest();
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Up { node: n(3), inc: inc(3) }),
            ev(HbEvent::SuccessorChanged { from: Some(n(4)), to: Some(n(3)) }),
            send(4, heartbeat(d)),
            send(3, heartbeat(d)),
        ]
    );
}

#[test]
fn report_of_a_new_life_of_the_successor_restarts_its_watch() {
    let mut r = ring();
    meet(&mut r, 3, at(10));
    meet(&mut r, 1, at(20));
    assert_eq!(r.timers.get(Timer::WatchSucc), Some(at(260)));
    r.handle_message(at(200), n(1), inc(1), report(3, alive(1030)));
    assert_eq!(
        r.drain(),
        vec![ev(HbEvent::Up { node: n(3), inc: Incarnation(1030) }), send(3, heartbeat(r.view().digest()))]
    );
    assert_eq!(r.timers.get(Timer::WatchSucc), Some(at(450)), "a fresh grace period for the new life");
    assert_eq!(r.timers.get(Timer::Heartbeat), Some(at(250)));
}

#[test]
fn view_merge_reports_only_what_changed() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    r.handle_message(at(15), n(1), inc(1), report(4, dead(40)));
    r.drain();
    // Unchanged (1), about us (2), the first known life of a node presumed
    // alive (3: no news, but its life is watched afresh), and a comeback (4).
    let entries = vec![(n(1), alive(10)), (n(2), alive(20)), (n(3), alive(30)), (n(4), alive(1040))];
    let d = digest_of(MY_INC, &[(1, alive(10)), (3, alive(30)), (4, dead(40))]);
    r.handle_message(at(20), n(1), inc(1), HbMsg::View { entries: entries.clone() });
    assert_eq!(
        r.drain(),
        vec![
            send(3, heartbeat(d)),
            ev(HbEvent::Up { node: n(4), inc: Incarnation(1040) }),
            send(3, report(4, alive(1040))),
        ]
    );
    assert_eq!(r.view().entries().collect::<Vec<_>>(), entries);
    assert_eq!(r.timers.get(Timer::WatchSucc), Some(at(270)));
    // The same view again is no news at all.
    r.handle_message(at(30), n(1), inc(1), HbMsg::View { entries });
    assert_eq!(r.drain(), vec![]);
    // A death in a view is applied and reported like a report.
    let entries = vec![(n(1), alive(10)), (n(2), alive(20)), (n(3), dead(30)), (n(4), alive(1040))];
    r.handle_message(at(40), n(1), inc(1), HbMsg::View { entries });
    let d = r.view().digest();
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Down { node: n(3), inc: inc(3) }),
            ev(HbEvent::SuccessorChanged { from: Some(n(3)), to: Some(n(4)) }),
            send(4, heartbeat(d)),
            send(4, report(3, dead(30))),
        ]
    );
    // 4's previous life is now stale.
    r.handle_message(at(50), n(4), inc(4), heartbeat(d));
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::StaleMessage { from: n(4), inc: inc(4) }),
            send(4, HbMsg::Behind { known: Incarnation(1040) })
        ]
    );
}

#[test]
fn view_saying_this_life_is_dead_makes_the_node_rejoin() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    let entries = vec![(n(1), alive(10)), (n(2), dead(20)), (n(3), alive(0)), (n(4), alive(0))];
    r.handle_message(at(20), n(1), inc(1), HbMsg::View { entries });
    // The predecessor hears of the new life too (the successor may be dead).
    let d = r.view().digest();
    assert_eq!(
        r.drain(),
        vec![ev(HbEvent::Rejoined { inc: Incarnation(21) }), send(3, report(2, alive(21))), send(1, heartbeat(d))]
    );
}

// ---- incarnations ----

#[test]
fn message_from_an_older_life_is_ignored() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    let before = r.view().clone();
    r.handle_message(at(100), n(1), Incarnation(9), heartbeat(r.view().digest()));
    // Not even a sign of life; the sender is told the life we know, so it
    // can move past it (its clock may be behind its previous start).
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::StaleMessage { from: n(1), inc: Incarnation(9) }),
            send(1, HbMsg::Behind { known: Incarnation(10) })
        ]
    );
    assert_eq!(r.view(), &before, "not even a sign of life");
    // At most once per heartbeat period.
    r.handle_message(at(101), n(1), Incarnation(9), heartbeat(r.view().digest()));
    assert_eq!(r.drain(), vec![ev(HbEvent::StaleMessage { from: n(1), inc: Incarnation(9) })]);
}

#[test]
fn message_from_an_excluded_life_is_answered_excluded() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    r.handle_message(at(20), n(1), inc(1), report(4, dead(40)));
    r.drain();
    let before = r.clone();
    r.handle_message(at(30), n(4), inc(4), heartbeat(r.view().digest()));
    assert_eq!(
        r.drain(),
        vec![send(4, HbMsg::Excluded { your_inc: inc(4) }), ev(HbEvent::ExcludedPeer { node: n(4), inc: inc(4) })]
    );
    assert_eq!(r, before);
}

#[test]
fn excluded_about_this_life_makes_the_node_rejoin() {
    let mut r = ring();
    meet(&mut r, 3, at(10));
    r.handle_message(at(20), n(3), inc(3), HbMsg::Excluded { your_inc: MY_INC });
    // The predecessor hears of the new life too (the successor may be dead).
    let d = r.view().digest();
    assert_eq!(
        r.drain(),
        vec![ev(HbEvent::Rejoined { inc: Incarnation(21) }), send(3, report(2, alive(21))), send(1, heartbeat(d))]
    );
    assert_eq!(r.incarnation(), Incarnation(21));
}

#[test]
fn excluded_about_an_older_life_changes_nothing() {
    let mut r = ring();
    meet(&mut r, 3, at(10));
    r.handle_message(at(20), n(3), inc(3), HbMsg::Excluded { your_inc: Incarnation(19) });
    assert_eq!(r.drain(), vec![]);
    // Nor does a second Excluded about the life already left.
    r.handle_message(at(30), n(3), inc(3), HbMsg::Excluded { your_inc: MY_INC });
    r.drain();
    r.handle_message(at(40), n(3), inc(3), HbMsg::Excluded { your_inc: MY_INC });
    assert_eq!(r.drain(), vec![]);
    assert_eq!(r.incarnation(), Incarnation(21));
}

#[test]
fn excluded_is_heeded_from_any_member_and_never_answered() {
    let mut r = ring();
    // Not a member: ignored.
    r.handle_message(at(10), n(9), Incarnation(1), HbMsg::Excluded { your_inc: MY_INC });
    assert_eq!(r.drain(), vec![]);
    // From a life we excluded ourselves: heeded, not answered with another
    // Excluded (two nodes that excluded each other would bounce forever),
    // and no sign of life of the sender beyond the rejoin's: n4's life is
    // presumed alive again because every death is forgotten, not a newer
    // life learned.
    meet(&mut r, 1, at(20));
    r.handle_message(at(30), n(1), inc(1), report(4, dead(40)));
    r.drain();
    r.handle_message(at(40), n(4), inc(4), HbMsg::Excluded { your_inc: MY_INC });
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Rejoined { inc: Incarnation(21) }),
            send(3, report(2, alive(21))),
            // A death was forgotten: the predecessor hears of the new life too.
            send(1, heartbeat(r.view().digest())),
        ]
    );
    assert_eq!(r.view().liveness(n(4)), Some(alive(40)));
}

/// Node 2 with settings `c`, cut off from n3 until it suspected n3's
/// life 30 (its successor is n4 then), and then excluded by n1 (the
/// majority suspected node 2); returns the instant of the exclusion.
fn cut_off_from_n3_then_excluded(c: HbConfig) -> (R, Instant) {
    let mut r = R::new(c, &Membership::of_size(4), n(2), MY_INC, T0).unwrap();
    r.drain();
    meet(&mut r, 1, at(10));
    meet(&mut r, 3, at(10));
    r.handle_message(at(200), n(1), inc(1), heartbeat(r.view().digest()));
    r.handle_timeout(at(10) + SUSPECT);
    assert_eq!(r.view().liveness(n(3)), Some(dead(30)));
    assert_eq!(r.view().liveness(n(1)), Some(alive(10)));
    r.drain();
    let t = at(10) + SUSPECT + Duration::from_millis(10);
    r.handle_message(t, n(1), inc(1), HbMsg::Excluded { your_inc: MY_INC });
    (r, t)
}

#[test]
fn a_node_declared_dead_forgets_the_deaths_it_saw_and_answers_no_live_peer_excluded() {
    // The partition heals; node 2 rejoins and presumes n3 alive again: its
    // successor is n3 once more, told of the new life and heartbeated.
    let (mut r, t) = cut_off_from_n3_then_excluded(cfg());
    let d = r.view().digest();
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Rejoined { inc: Incarnation(21) }),
            send(3, report(2, alive(21))),
            send(1, heartbeat(r.view().digest())),
            ev(HbEvent::SuccessorChanged { from: Some(n(4)), to: Some(n(3)) }),
            send(4, heartbeat(d)),
            send(3, heartbeat(d)),
        ]
    );
    assert_eq!(r.view().liveness(n(3)), Some(alive(30)));
    // n3, alive all along in that life, heartbeats node 2: accepted, not
    // answered Excluded (which would make n3 rejoin in turn).
    r.handle_message(t + Duration::from_millis(5), n(3), inc(3), heartbeat(d));
    assert_eq!(r.drain(), vec![send(3, ack(d))]);
    assert_eq!(r.incarnation(), Incarnation(21));
}

#[test]
fn a_node_declared_dead_relearns_a_real_death_from_the_next_view() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    r.handle_message(at(20), n(1), inc(1), report(4, dead(40)));
    r.handle_message(at(30), n(1), inc(1), HbMsg::Excluded { your_inc: MY_INC });
    assert_eq!(r.view().liveness(n(4)), Some(alive(40)));
    r.drain();
    // n1's view still has n4's life dead: the digests differ, and the
    // view n1 sends puts the death back.
    let mut v = RingView::new(&Membership::of_size(4), n(1), inc(1)).unwrap();
    v.merge(n(2), alive(21));
    v.merge(n(4), dead(40));
    r.handle_message(at(40), n(1), inc(1), HbMsg::View { entries: v.entries().collect() });
    assert_eq!(r.view().liveness(n(4)), Some(dead(40)));
}

#[test]
fn behind_keeps_the_deaths_this_node_saw() {
    // Behind is about this node's clock, not its isolation: its view stands.
    let mut r = ring();
    meet(&mut r, 1, at(10));
    r.handle_message(at(20), n(1), inc(1), report(4, dead(40)));
    r.handle_message(at(30), n(1), inc(1), HbMsg::Behind { known: Incarnation(500) });
    assert_eq!(r.incarnation(), Incarnation(501));
    assert_eq!(r.view().liveness(n(4)), Some(dead(40)));
}

#[test]
fn a_node_whose_view_is_a_minority_yields_to_a_life_it_held_dead_instead_of_excluding_it() {
    // Node 2 hears from neither neighbour: its view holds 2 and 4 alive, a
    // minority of 4. Then n3 (in the life it suspected) heartbeats it: 2
    // was more likely the one cut off. It drops the heartbeat, moves to a
    // new life and presumes everyone alive, as a restart would, instead
    // of answering Excluded (which makes a live peer of the majority
    // rejoin, and an owner drop the token).
    let mut r = R::new(cfg(), &Membership::of_size(4), n(2), MY_INC, T0).unwrap();
    r.drain();
    meet(&mut r, 1, at(10));
    meet(&mut r, 3, at(10));
    r.handle_timeout(at(10) + SUSPECT);
    assert_eq!(r.view().alive_count(), 2);
    r.drain();
    let t = at(10) + SUSPECT + Duration::from_millis(10);
    r.handle_message(t, n(3), inc(3), heartbeat(0));
    let d = r.view().digest();
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::YieldedTo { node: n(3), inc: inc(3) }),
            ev(HbEvent::Rejoined { inc: Incarnation(21) }),
            send(3, report(2, alive(21))),
            send(1, heartbeat(r.view().digest())),
            ev(HbEvent::PredecessorChanged { from: Some(n(4)), to: Some(n(1)) }),
            ev(HbEvent::SuccessorChanged { from: Some(n(4)), to: Some(n(3)) }),
            send(4, heartbeat(d)),
            send(3, heartbeat(d)),
        ]
    );
    assert_eq!(r.view().alive_count(), 4);
    // Its peers' views still hold 1 and 3 dead in those lives: within
    // `suspect_after` of the yield (the rejoin's rate limit) it excludes
    // them as before — else a life stale in every view never rejoins.
    r.handle_message(t + Duration::from_millis(1), n(4), inc(4), report(3, dead(30)));
    r.handle_message(t + Duration::from_millis(1), n(4), inc(4), report(1, dead(10)));
    assert_eq!(r.view().alive_count(), 2);
    r.drain();
    r.handle_message(t + Duration::from_millis(2), n(3), inc(3), heartbeat(0));
    assert_eq!(
        r.drain(),
        vec![send(3, HbMsg::Excluded { your_inc: inc(3) }), ev(HbEvent::ExcludedPeer { node: n(3), inc: inc(3) })]
    );
}

#[test]
fn behind_moves_this_node_past_the_life_a_peer_knows() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    // Our clock was behind our previous start: n1 knows life 500 of us.
    r.handle_message(at(20), n(1), inc(1), HbMsg::Behind { known: Incarnation(500) });
    // The predecessor hears of the new life too (the successor may be dead).
    let d = r.view().digest();
    assert_eq!(
        r.drain(),
        vec![ev(HbEvent::Rejoined { inc: Incarnation(501) }), send(3, report(2, alive(501))), send(1, heartbeat(d))]
    );
    assert_eq!(r.incarnation(), Incarnation(501));
    // A second notice within suspect_after changes nothing (rate limit);
    // one about a life we are already past changes nothing either.
    r.handle_message(at(30), n(1), inc(1), HbMsg::Behind { known: Incarnation(600) });
    r.handle_message(at(300), n(1), inc(1), HbMsg::Behind { known: Incarnation(400) });
    assert_eq!(r.drain(), vec![]);
    // A life no node could store (a hostile value): refused.
    r.handle_message(at(350), n(1), inc(1), HbMsg::Behind { known: Incarnation(u64::MAX - 1) });
    assert_eq!(r.incarnation(), Incarnation(501));
    // From a stale life of the sender: no evidence about us.
    r.handle_message(at(400), n(1), Incarnation(9), HbMsg::Behind { known: Incarnation(700) });
    assert!(!r.drain().iter().any(|o| matches!(o, Output::Event(HbEvent::Rejoined { .. }))));
    assert_eq!(r.incarnation(), Incarnation(501));
}

#[test]
fn excluded_from_a_stale_life_of_the_sender_changes_nothing() {
    // A node whose clock is behind sends Excluded from an old life of its
    // own: a healthy neighbour must not change life for it.
    let mut r = ring();
    meet(&mut r, 1, at(10));
    r.handle_message(at(20), n(1), Incarnation(9), HbMsg::Excluded { your_inc: MY_INC });
    assert!(!r.drain().iter().any(|o| matches!(o, Output::Event(HbEvent::Rejoined { .. }))));
    assert_eq!(r.incarnation(), MY_INC);
}

#[test]
fn message_from_a_restarted_node_is_a_new_life() {
    let mut r = ring();
    meet(&mut r, 1, at(10));
    let d = digest_after_seeing(&r, 1, Incarnation(1010));
    r.handle_message(at(20), n(1), Incarnation(1010), heartbeat(d));
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Up { node: n(1), inc: Incarnation(1010) }),
            send(3, report(1, alive(1010))),
            send(
                1,
                HbMsg::View {
                    entries: vec![(n(1), alive(1010)), (n(2), alive(20)), (n(3), alive(0)), (n(4), alive(0))]
                }
            ),
            send(1, ack(d)),
        ]
    );
    // Its previous life is stale from now on.
    r.handle_message(at(30), n(1), inc(1), heartbeat(d));
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::StaleMessage { from: n(1), inc: inc(1) }),
            send(1, HbMsg::Behind { known: Incarnation(1010) })
        ]
    );
}

#[test]
fn dead_predecessor_restarting_takes_its_place_back() {
    let mut r = ring();
    meet(&mut r, 1, at(0));
    meet(&mut r, 3, at(200));
    r.handle_timeout(at(250));
    r.drain();
    assert_eq!(r.view().predecessor(), Some(n(4)));
    let d = digest_after_seeing(&r, 1, Incarnation(1010));
    r.handle_message(at(300), n(1), Incarnation(1010), heartbeat(d));
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Up { node: n(1), inc: Incarnation(1010) }),
            send(3, report(1, alive(1010))),
            send(1, view_msg(&r)),
            ev(HbEvent::PredecessorChanged { from: Some(n(4)), to: Some(n(1)) }),
            send(1, ack(d)),
            ev(HbEvent::Repaired { new_predecessor: n(1), took: Duration::from_millis(50) }),
        ]
    );
    assert_eq!(r.timers.get(Timer::WatchPred), Some(at(550)));
}

// ---- probes and being alone ----

#[test]
fn probe_timer_heartbeats_each_dead_node_before_the_live_successor() {
    let mut r = ring();
    meet(&mut r, 1, at(5));
    r.handle_message(at(10), n(1), inc(1), report(3, dead(30)));
    r.handle_message(at(20), n(1), inc(1), report(4, dead(40)));
    r.drain();
    assert_eq!(r.view().successor(), Some(n(1)));
    assert_eq!(r.view().dead_gap_after_me(), vec![n(3), n(4)]);
    let d = r.view().digest();
    r.handle_timeout(at(250));
    assert_eq!(r.drain(), vec![send(1, heartbeat(d)), send(3, heartbeat(d)), send(4, heartbeat(d))]);
    assert_eq!(r.timers.get(Timer::Probe), Some(at(500)));
    // A probed node answering from a new life is back at its configured
    // place. It is our successor now, so no report about it goes anywhere:
    // its own heartbeats to its successor spread the news, and our old
    // successor, its new predecessor's news, hears our digest.
    let d = digest_after_seeing(&r, 3, Incarnation(1030));
    r.handle_message(at(260), n(3), Incarnation(1030), ack(d));
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Up { node: n(3), inc: Incarnation(1030) }),
            send(3, view_msg(&r)),
            ev(HbEvent::SuccessorChanged { from: Some(n(1)), to: Some(n(3)) }),
            send(1, heartbeat(d)),
            send(3, heartbeat(d)),
        ]
    );
    assert_eq!(r.view().dead_gap_after_me(), vec![]);
}

#[test]
fn node_whose_peers_all_fall_silent_ends_up_alone_and_only_probes() {
    let mut r = ring();
    let d0 = r.view().digest();
    let d1 = digest_of(MY_INC, &[(1, dead(0)), (3, dead(0))]);
    r.handle_timeout(at(250));
    assert_eq!(
        r.drain(),
        vec![
            send(3, heartbeat(d0)),
            ev(HbEvent::Suspected { node: n(1), inc: Incarnation(0) }),
            // The new predecessor hears this life and our digest.
            send(4, heartbeat(digest_of(MY_INC, &[(1, dead(0))]))),
            ev(HbEvent::PredecessorChanged { from: Some(n(1)), to: Some(n(4)) }),
            send(3, report(1, dead(0))),
            ev(HbEvent::Suspected { node: n(3), inc: Incarnation(0) }),
            ev(HbEvent::SuccessorChanged { from: Some(n(3)), to: Some(n(4)) }),
            send(4, heartbeat(d1)),
            send(4, report(3, dead(0))),
            send(3, heartbeat(d1)),
        ]
    );
    let d2 = digest_of(MY_INC, &[(1, dead(0)), (3, dead(0)), (4, dead(0))]);
    r.handle_timeout(at(500));
    assert_eq!(
        r.drain(),
        vec![
            send(4, heartbeat(d1)),
            ev(HbEvent::Suspected { node: n(4), inc: Incarnation(0) }),
            ev(HbEvent::PredecessorChanged { from: Some(n(4)), to: None }),
            ev(HbEvent::SuccessorChanged { from: Some(n(4)), to: None }),
            send(3, heartbeat(d2)),
            send(4, heartbeat(d2)),
            send(1, heartbeat(d2)),
        ]
    );
    assert_eq!(r.view().alive_count(), 1);
    assert_eq!(timers(&r), vec![(Timer::Probe, at(750))], "heartbeat and watch timers cancelled");
    assert_eq!(r.repair_since, None);
    r.handle_timeout(at(750));
    assert_eq!(r.drain(), vec![send(3, heartbeat(d2)), send(4, heartbeat(d2)), send(1, heartbeat(d2))]);
}

// ---- on_contact ----

#[test]
fn on_contact_classifies_every_kind_of_sender() {
    let mut r = ring();
    // Not a member.
    assert_eq!(r.on_contact(at(1), n(9), Incarnation(1)), Contact::Drop);
    assert_eq!(r.drain(), vec![]);
    // First contact: a new life, brought up to date.
    assert_eq!(r.on_contact(at(2), n(1), inc(1)), Contact::Accept);
    assert_eq!(r.drain(), vec![send(1, view_msg(&r))]);
    assert_eq!(r.timers.get(Timer::WatchPred), Some(at(252)));
    // The known, live life: a sign of life.
    assert_eq!(r.on_contact(at(3), n(1), inc(1)), Contact::Accept);
    assert_eq!(r.drain(), vec![]);
    assert_eq!(r.timers.get(Timer::WatchPred), Some(at(253)));
    // An older life.
    assert_eq!(r.on_contact(at(4), n(1), Incarnation(9)), Contact::Drop);
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::StaleMessage { from: n(1), inc: Incarnation(9) }),
            send(1, HbMsg::Behind { known: Incarnation(10) })
        ]
    );
    assert_eq!(r.timers.get(Timer::WatchPred), Some(at(253)));
    // An excluded life.
    r.handle_message(at(5), n(1), inc(1), report(4, dead(40)));
    r.drain();
    assert_eq!(r.on_contact(at(6), n(4), inc(4)), Contact::Drop);
    assert_eq!(
        r.drain(),
        vec![send(4, HbMsg::Excluded { your_inc: inc(4) }), ev(HbEvent::ExcludedPeer { node: n(4), inc: inc(4) })]
    );
    // A restart.
    assert_eq!(r.on_contact(at(7), n(1), Incarnation(1010)), Contact::Accept);
    assert_eq!(
        r.drain(),
        vec![
            ev(HbEvent::Up { node: n(1), inc: Incarnation(1010) }),
            send(3, report(1, alive(1010))),
            send(1, view_msg(&r))
        ]
    );
    // Ourselves: only our own life is current.
    assert_eq!(r.on_contact(at(8), n(2), MY_INC), Contact::Accept);
    assert_eq!(r.drain(), vec![]);
    assert_eq!(r.on_contact(at(9), n(2), Incarnation(21)), Contact::Drop);
    assert_eq!(r.drain(), vec![ev(HbEvent::StaleMessage { from: n(2), inc: Incarnation(21) })]);
}

// ---- HbNode through the Protocol trait ----

fn node() -> HbNode {
    HbNode::start(ftcore::Context::new(n(2), MY_INC, Membership::of_size(4), T0, cfg())).unwrap()
}

use ftcore::testing::drain as outputs;

fn ring_reply(alive: &[(u32, u64)]) -> HbReply {
    HbReply::Ring { alive: alive.iter().map(|(id, inc)| (n(*id), Incarnation(*inc))).collect() }
}

#[test]
fn node_answers_ring_requests_with_the_live_ring_after_itself() {
    let mut p = node();
    let d = p.ring().view().digest();
    p.handle_request(T0, ClientId(5), HbRequest::Ring);
    assert_eq!(
        outputs(&mut p),
        vec![
            // What the start queued comes first: one buffer, in order.
            Output::Event(HbEvent::PredecessorChanged { from: None, to: Some(n(1)) }),
            Output::Event(HbEvent::SuccessorChanged { from: None, to: Some(n(3)) }),
            Output::Send { to: n(3), msg: heartbeat(d) },
            Output::Reply { client: ClientId(5), reply: ring_reply(&[(3, 0), (4, 0), (1, 0), (2, 20)]) },
        ]
    );
    p.handle_message(at(10), n(1), inc(1), report(4, dead(40)));
    outputs(&mut p);
    p.handle_request(at(20), ClientId(6), HbRequest::Ring);
    assert_eq!(
        outputs(&mut p),
        vec![Output::Reply { client: ClientId(6), reply: ring_reply(&[(3, 0), (1, 10), (2, 20)]) }]
    );
}

#[test]
fn node_drops_the_reply_of_a_client_that_went_away() {
    let mut p = node();
    outputs(&mut p);
    p.handle_request(at(1), ClientId(1), HbRequest::Ring);
    p.handle_request(at(1), ClientId(2), HbRequest::Ring);
    p.handle_client_gone(at(2), ClientId(1));
    assert_eq!(
        outputs(&mut p),
        vec![Output::Reply { client: ClientId(2), reply: ring_reply(&[(3, 0), (4, 0), (1, 0), (2, 20)]) }]
    );
}

#[test]
fn node_status_reports_peers_and_neighbours() {
    let mut p = node();
    outputs(&mut p);
    let peer = |id: u32, up: bool, inc: u64| PeerStatus {
        id: n(id),
        addr: format!("127.0.0.1:{}", 20_000 + id),
        up,
        incarnation: Incarnation(inc),
    };
    let details = |succ: &str, pred: &str, alive: &str| {
        vec![
            ("successor".to_string(), succ.to_string()),
            ("predecessor".to_string(), pred.to_string()),
            ("alive".to_string(), alive.to_string()),
        ]
    };
    let s = ftcore::status_of(&p, &Membership::of_size(4));
    assert_eq!(s.daemon, "hbringd");
    assert_eq!((s.node, s.incarnation, s.role.as_str()), (n(2), MY_INC, "member"));
    assert_eq!(s.peers, vec![peer(1, true, 0), peer(3, true, 0), peer(4, true, 0)]);
    assert_eq!(s.details, details("3", "1", "4"));
    // After everyone falls silent it is alone.
    p.handle_timeout(at(250));
    p.handle_timeout(at(500));
    outputs(&mut p);
    let s = ftcore::status_of(&p, &Membership::of_size(4));
    assert_eq!(s.role, "alone");
    assert_eq!(s.peers, vec![peer(1, false, 0), peer(3, false, 0), peer(4, false, 0)]);
    assert_eq!(s.details, details("none", "none", "1"));
}

#[test]
fn node_passes_time_and_incarnation_through_to_the_ring() {
    let mut p = node();
    outputs(&mut p);
    assert_eq!(p.incarnation(), MY_INC);
    assert_eq!(p.poll_timeout(), Some(at(50)));
    let d = p.ring().view().digest();
    p.handle_timeout(at(50));
    assert_eq!(outputs(&mut p), vec![Output::Send { to: n(3), msg: heartbeat(d) }]);
    assert_eq!(p.poll_timeout(), Some(at(100)));
    p.handle_message(at(60), n(3), inc(3), HbMsg::Excluded { your_inc: MY_INC });
    outputs(&mut p);
    assert_eq!(p.incarnation(), Incarnation(21));
}

#[test]
fn failure_free_start_in_the_simulator_reports_no_failures_and_no_comebacks() {
    let net = sim::NetConfig::reliable(Duration::from_micros(100), Duration::from_millis(3));
    let mut sim = sim::Sim::<HbNode>::new(1, 5, net, cfg());
    sim.run_until(Instant::from_millis(2_000)).unwrap();
    let w = sim.world();
    let changes: Vec<_> = w
        .events
        .iter()
        .filter(|(_, _, e)| !matches!(e, HbEvent::PredecessorChanged { .. } | HbEvent::SuccessorChanged { .. }))
        .collect();
    assert_eq!(changes, Vec::<&(Instant, NodeId, HbEvent)>::new());
    let digest = w.core(n(1)).unwrap().ring().view().digest();
    for (id, core) in w.live() {
        let view = core.ring().view();
        assert_eq!(view.alive_count(), 5, "{id}");
        assert_eq!(view.digest(), digest, "{id} agrees on who is alive");
    }
}

#[test]
fn node_shutdown_leaves_at_once() {
    let mut p = node();
    assert!(!p.is_left());
    p.handle_shutdown(at(1));
    assert!(p.is_left());
}
