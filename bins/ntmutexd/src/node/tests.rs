//! One test per handler rule of the core, asserting the exact outputs.
//!
//! Each test builds a site in a chosen state (fields set directly: this
//! module is inside `node.rs`), feeds it one input — a message, a timeout, a
//! client request, a client leaving, a shutdown — and asserts the complete
//! list of outputs, in order, and the state after. Tests are named after the
//! rule of `shared/spec/ntmutexd.md` (and the seed's section 5) they check.
//!
//! Settings everywhere: t_msg = 10 ms, heartbeat = 20 ms, suspect_after =
//! 60 ms, k = 2 unless a test says otherwise (k = 3 where it matters that
//! more predecessors travel). Every site is in its first life
//! (`Incarnation(1)`) and knows epoch `E` (round 1, slot 0: what n1 creates
//! when it bootstraps the cluster). Nothing is filtered out of the outputs:
//! gauge events (`HasToken`, `Epoch`) are asserted like the rest.

use std::time::Duration;

use ftcore::Output;
use lockservice::ReleaseHow;
use membership::Membership;

use super::*;

/// The epoch of the bootstrap token (round 1 in n1's slot 0).
const E: u32 = 1 << SLOT_BITS;
/// Every site's life.
const INC: Incarnation = Incarnation(1);
/// Test time starts here (any instant works; not zero, to catch `now` mix-ups).
const T0: Instant = Instant::from_millis(1_000);
/// How long the test clients are willing to wait.
const WAIT_MS: u64 = 60_000;

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

/// `T0 + m` milliseconds.
fn at(m: u64) -> Instant {
    T0 + ms(m)
}

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn c(i: u64) -> ClientId {
    ClientId(i)
}

fn cfg(k: usize) -> NtConfig {
    NtConfig {
        k,
        t_msg: ms(10),
        heartbeat: ms(20),
        suspect_after: ms(60),
        locks: LocksConfig { max_queue: 8, max_hold: None, revoke_grace: ms(100) },
    }
}

/// The fence of the `counter`-th grant of a token of `epoch`.
fn fence(epoch: u32, counter: u32) -> u64 {
    (u64::from(epoch) << 32) | u64::from(counter)
}

// ----- sites in a chosen state -------------------------------------------

/// A freshly constructed site (still joining), outputs not drained.
fn fresh(size: u32, me: u32, k: usize) -> NtNode {
    NtNode::start(Context::new(n(me), INC, Membership::of_size(size), T0, cfg(k))).expect("valid config")
}

/// Site `me` of `size` sites, past its start-up, idle (not in the queue),
/// knowing epoch `E`, its `last` pointing at n1 (n1 itself is a root).
fn site(size: u32, me: u32, k: usize) -> NtNode {
    let mut s = fresh(size, me, k);
    s.out.drain();
    s.timers.clear();
    s.phase = Phase::Running;
    s.last = if me == 1 { Last::Root } else { Last::Parent(n(1)) };
    s.max_epoch = E;
    s
}

/// The token holder: position 0, root of the last tree, no local client.
fn holder(size: u32, me: u32, k: usize) -> NtNode {
    let mut s = site(size, me, k);
    s.token = Some(Token { epoch: E, counter: 0 });
    s.position = Some(0);
    s.last = Last::Root;
    s
}

/// The holder with local client c1 in its critical section since `T0`
/// (grant 1), so the token stays even when `next` is set.
fn busy_holder(size: u32, me: u32, k: usize) -> NtNode {
    let mut s = holder(size, me, k);
    acquire(&mut s, T0, 1);
    assert_eq!(s.holder(), Some((c(1), fence(E, 1))));
    s
}

/// A site whose request `seq` is on its way (so a root of the last tree),
/// with neither a Commit nor the token yet, its Commit timer armed at
/// `T0 + (N + 1) t_msg`.
fn waiting(size: u32, me: u32, k: usize, seq: u64) -> NtNode {
    let mut s = site(size, me, k);
    s.seq = seq;
    s.request = Some(seq);
    s.last = Last::Root;
    s.timers.set(Timer::CommitWait, T0 + s.commit_timeout());
    s
}

/// A waiting site that got its Commit at `T0`: `pos` and `preds` (closest
/// first), monitoring `preds[0]`, liveness check armed at `T0 + heartbeat`.
fn committed(size: u32, me: u32, k: usize, seq: u64, pos: Option<u64>, preds: &[u32]) -> NtNode {
    let mut s = waiting(size, me, k, seq);
    s.timers.cancel(Timer::CommitWait);
    s.position = pos;
    s.preds = preds.iter().map(|p| n(*p)).collect();
    s.monitored = Some((n(preds[0]), INC));
    s.last_alive_ok = T0;
    s.timers.set(Timer::AliveCheck, T0 + ms(20));
    s
}

// ----- inputs and outputs -------------------------------------------------

/// Everything the site has queued, in order.
fn drain(node: &mut NtNode) -> Vec<OutputOf<NtNode>> {
    std::iter::from_fn(|| node.poll_output()).collect()
}

/// A message from `from` (life `INC`) carrying epoch `E`; returns the outputs.
fn deliver(node: &mut NtNode, now: Instant, from: u32, body: Body) -> Vec<OutputOf<NtNode>> {
    deliver_msg(node, now, from, INC, Msg { epoch: E, body })
}

fn deliver_msg(node: &mut NtNode, now: Instant, from: u32, inc: Incarnation, msg: Msg) -> Vec<OutputOf<NtNode>> {
    node.handle_message(now, n(from), inc, msg);
    drain(node)
}

fn timeout(node: &mut NtNode, now: Instant) -> Vec<OutputOf<NtNode>> {
    node.handle_timeout(now);
    drain(node)
}

fn acquire(node: &mut NtNode, now: Instant, client: u64) -> Vec<OutputOf<NtNode>> {
    node.handle_request(now, c(client), LockRequest::Acquire { timeout_ms: WAIT_MS });
    drain(node)
}

fn release(node: &mut NtNode, now: Instant, client: u64) -> Vec<OutputOf<NtNode>> {
    node.handle_request(now, c(client), LockRequest::Release);
    drain(node)
}

/// `Send` of `body` to `to` stamped with epoch `E`.
fn send(to: u32, body: Body) -> OutputOf<NtNode> {
    send_e(to, E, body)
}

fn send_e(to: u32, epoch: u32, body: Body) -> OutputOf<NtNode> {
    Output::Send { to: n(to), msg: Msg { epoch, body } }
}

fn ev(e: NtEvent) -> OutputOf<NtNode> {
    Output::Event(e)
}

fn reply(client: u64, r: LockReply) -> OutputOf<NtNode> {
    Output::Reply { client: c(client), reply: r }
}

fn granted_event(client: u64, fence: u64, waited: u64) -> OutputOf<NtNode> {
    ev(NtEvent::Lock(LockEvent::Granted { client: c(client), fence, waited: ms(waited) }))
}

fn released_event(client: u64, fence: u64, held: u64, how: ReleaseHow) -> OutputOf<NtNode> {
    ev(NtEvent::Lock(LockEvent::Released { client: c(client), fence, held: ms(held), how }))
}

fn request(requester: u32, seq: u64, hops: u32) -> Body {
    Body::Request { requester: n(requester), seq, hops }
}

fn direct(requester: u32, seq: u64, hops: u32) -> Body {
    Body::DirectRequest { requester: n(requester), seq, hops }
}

fn connection(requester: u32, seq: u64, hops: u32, failed: &[u32]) -> Body {
    Body::Connection { requester: n(requester), seq, hops, failed: failed.iter().map(|f| n(*f)).collect() }
}

fn commit(pos: Option<u64>, preds: &[u32], seq: u64, origin: (u32, u64)) -> Body {
    Body::Commit { pos, preds: preds.iter().map(|p| n(*p)).collect(), seq, origin: (n(origin.0), origin.1) }
}

fn token(epoch: u32, counter: u32, pos: u64) -> Body {
    Body::Token { epoch, counter, pos }
}

fn search_ack(position: Option<u64>, has_next: bool, has_token: bool, candidate: Option<u64>) -> Body {
    Body::SearchAck { position, has_next, has_token, candidate }
}

fn ids(v: &[u32]) -> BTreeSet<NodeId> {
    v.iter().map(|i| n(*i)).collect()
}

/// An epoch proposal: `round` in the slot of site `id` (slot = id - 1 with
/// `Membership::of_size`).
fn proposal(round: u32, id: u32) -> u32 {
    (round << SLOT_BITS) | (id - 1)
}

// ===== start-up ===========================================================

#[test]
fn startup_new_broadcasts_hello_and_arms_the_join_timer() {
    let mut s = fresh(3, 2, 2);
    assert_eq!(drain(&mut s), vec![send_e(1, 0, Body::Hello), send_e(3, 0, Body::Hello)]);
    assert_eq!(s.poll_timeout(), Some(at(20)), "Join fires after 2 t_msg");
    assert_eq!(s.phase, Phase::Joining { fresh: ids(&[2]), running_seen: false, deferred: vec![] });
    assert_eq!(s.last, Last::Unknown);
    assert!(!s.is_running());
}

#[test]
fn startup_single_site_bootstraps_at_once() {
    let mut s = fresh(1, 1, 2);
    assert_eq!(
        drain(&mut s),
        vec![ev(NtEvent::Epoch(E)), ev(NtEvent::HasToken(true)), ev(NtEvent::Joined { bootstrap: true })]
    );
    assert_eq!(s.token, Some(Token { epoch: E, counter: 0 }));
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn startup_hello_ack_running_joins_as_a_new_life() {
    let mut s = fresh(3, 2, 2);
    drain(&mut s);
    let out = deliver(&mut s, at(3), 1, Body::HelloAck { running: true });
    // It adopts the cluster's epoch from the answer.
    assert_eq!(out, vec![ev(NtEvent::Epoch(E)), ev(NtEvent::Joined { bootstrap: false })]);
    assert!(s.is_running());
    // (safety) A new life knows nothing of the tree: DeadEnd to requests,
    // its own first request through M3.
    assert_eq!(s.last, Last::Unknown);
    assert_eq!(s.token, None);
    assert_eq!(s.poll_timeout(), None, "Join timer cancelled");
}

#[test]
fn startup_all_fresh_answers_bootstrap_the_lowest_id_holds_the_token_at_position_zero() {
    let mut s1 = fresh(3, 1, 2);
    drain(&mut s1);
    assert_eq!(deliver_msg(&mut s1, at(2), 2, INC, Msg { epoch: 0, body: Body::HelloAck { running: false } }), vec![]);
    let out = deliver_msg(&mut s1, at(3), 3, INC, Msg { epoch: 0, body: Body::HelloAck { running: false } });
    assert_eq!(out, vec![ev(NtEvent::Epoch(E)), ev(NtEvent::HasToken(true)), ev(NtEvent::Joined { bootstrap: true })]);
    assert_eq!(s1.token, Some(Token { epoch: E, counter: 0 }));
    assert_eq!(s1.position, Some(0));
    assert_eq!(s1.last, Last::Root);
    assert_eq!(s1.max_epoch, E);

    // Another site of the same start: a Hello received while joining counts
    // as a fresh answer and is answered `running: false`.
    let mut s3 = fresh(3, 3, 2);
    drain(&mut s3);
    let out = deliver_msg(&mut s3, at(1), 2, INC, Msg { epoch: 0, body: Body::Hello });
    assert_eq!(out, vec![send_e(2, 0, Body::HelloAck { running: false })]);
    let out = deliver_msg(&mut s3, at(2), 1, INC, Msg { epoch: 0, body: Body::HelloAck { running: false } });
    assert_eq!(out, vec![ev(NtEvent::Joined { bootstrap: true })]);
    assert_eq!(s3.last, Last::Parent(n(1)));
    assert_eq!(s3.token, None);
    assert_eq!(s3.position, None);
}

#[test]
fn startup_defers_other_messages_and_handles_them_after_joining() {
    let mut s = fresh(3, 2, 2);
    drain(&mut s);
    let req = Msg { epoch: 0, body: request(3, 1, 0) };
    assert_eq!(deliver_msg(&mut s, at(1), 3, INC, req.clone()), vec![]);
    assert_eq!(s.phase, Phase::Joining { fresh: ids(&[2]), running_seen: false, deferred: vec![(n(3), INC, req)] });
    assert_eq!(deliver_msg(&mut s, at(2), 1, INC, Msg { epoch: 0, body: Body::HelloAck { running: false } }), vec![]);
    // The last fresh answer: bootstrap (last = n1), then the deferred
    // request is forwarded along the new tree (path reversal included).
    let out = deliver_msg(&mut s, at(3), 3, INC, Msg { epoch: 0, body: Body::HelloAck { running: false } });
    assert_eq!(out, vec![ev(NtEvent::Joined { bootstrap: true }), send_e(1, 0, request(3, 1, 1))]);
    assert_eq!(s.last, Last::Parent(n(3)));
}

#[test]
fn startup_minority_of_fresh_answers_at_the_join_timer_asks_again_then_a_majority_bootstraps() {
    let mut s = fresh(5, 2, 2);
    drain(&mut s);
    let out = timeout(&mut s, at(20));
    let hello: Vec<_> = [1, 3, 4, 5].into_iter().map(|i| send_e(i, 0, Body::Hello)).collect();
    assert_eq!(out, hello);
    assert!(!s.is_running(), "a minority must not create a token");
    assert_eq!(s.poll_timeout(), Some(at(40)));

    for from in [3, 4] {
        assert_eq!(
            deliver_msg(&mut s, at(25), from, INC, Msg { epoch: 0, body: Body::HelloAck { running: false } }),
            vec![]
        );
    }
    // 3 fresh of 5 (n2, n3, n4) is a majority: bootstrap at the timer.
    assert_eq!(timeout(&mut s, at(40)), vec![ev(NtEvent::Joined { bootstrap: true })]);
    assert_eq!(s.last, Last::Parent(n(1)));
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn startup_clients_queued_while_joining_are_served_once_joined() {
    // The future holder grants as soon as it has bootstrapped.
    let mut s1 = fresh(2, 1, 2);
    drain(&mut s1);
    assert_eq!(acquire(&mut s1, at(1), 1), vec![]);
    let f = fence(E, 1);
    assert_eq!(
        deliver_msg(&mut s1, at(2), 2, INC, Msg { epoch: 0, body: Body::HelloAck { running: false } }),
        vec![
            ev(NtEvent::Epoch(E)),
            ev(NtEvent::HasToken(true)),
            ev(NtEvent::Joined { bootstrap: true }),
            reply(1, LockReply::Granted { fence: f }),
            granted_event(1, f, 1),
            ev(NtEvent::Entered { fence: f }),
        ]
    );
    // Another site requests along the new tree.
    let mut s2 = fresh(2, 2, 2);
    drain(&mut s2);
    assert_eq!(acquire(&mut s2, at(1), 1), vec![]);
    assert_eq!(
        deliver_msg(&mut s2, at(2), 1, INC, Msg { epoch: 0, body: Body::HelloAck { running: false } }),
        vec![ev(NtEvent::Joined { bootstrap: true }), send_e(1, 0, request(2, 1, 0))]
    );
}

#[test]
fn startup_a_new_life_makes_its_first_request_through_m3() {
    let mut s = fresh(3, 2, 2);
    drain(&mut s);
    deliver(&mut s, at(1), 1, Body::HelloAck { running: true });
    // It learnt the cluster's epoch from the HelloAck.
    assert_eq!(
        acquire(&mut s, at(2), 1),
        vec![
            ev(NtEvent::RecoveryStarted { mech: Mech::M3 }),
            send_e(1, E, Body::SearchQueue { accesses: 0 }),
            send_e(3, E, Body::SearchQueue { accesses: 0 }),
        ]
    );
    assert_eq!((s.seq, s.request), (2, Some(2)));
}

// ===== base Naimi-Trehel ==================================================

#[test]
fn nt_acquire_at_the_idle_root_holder_grants_at_once_without_messages() {
    let mut s = holder(3, 1, 2);
    let f = fence(E, 1);
    assert_eq!(
        acquire(&mut s, T0, 1),
        vec![reply(1, LockReply::Granted { fence: f }), granted_event(1, f, 0), ev(NtEvent::Entered { fence: f })]
    );
    assert_eq!(s.token, Some(Token { epoch: E, counter: 1 }));
    assert_eq!(s.holder(), Some((c(1), f)));
    assert_eq!((s.accesses, s.last_fence), (1, f));
}

#[test]
fn nt_acquire_at_a_non_root_requests_from_last_and_becomes_a_root() {
    let mut s = site(4, 3, 2);
    assert_eq!(acquire(&mut s, T0, 1), vec![send(1, request(3, 1, 0))]);
    assert_eq!(s.last, Last::Root);
    assert_eq!((s.request, s.seq), (Some(1), 1));
    // (N + 1) t_msg: a request may be forwarded N - 1 times.
    assert_eq!(s.timers.get(Timer::CommitWait), Some(at(50)));
}

#[test]
fn nt_request_at_the_idle_root_holder_sends_the_token_directly_with_the_next_position() {
    let mut s = holder(3, 1, 2);
    s.position = Some(4);
    let out = deliver(&mut s, T0, 3, request(3, 1, 0));
    // No Commit: the token carries the receiver's position (mine + 1).
    assert_eq!(out, vec![send(3, token(E, 0, 5)), ev(NtEvent::HasToken(false))]);
    assert_eq!((s.token, s.position, s.next), (None, None, None));
    assert_eq!(s.last, Last::Parent(n(3)));
}

#[test]
fn nt_request_at_a_busy_holder_queues_the_requester_behind_it_with_a_commit() {
    let mut s = holder(3, 1, 2);
    acquire(&mut s, T0, 1);
    let out = deliver(&mut s, at(1), 2, request(3, 1, 2));
    // A holder's origin seq is u64::MAX ("it was holding the token").
    assert_eq!(out, vec![send(3, commit(Some(1), &[1], 1, (1, u64::MAX)))]);
    assert_eq!(s.next, Some((n(3), 1)));
    assert_eq!(s.last, Last::Parent(n(3)));
}

#[test]
fn nt_request_at_a_waiting_root_without_position_sends_a_provisional_commit() {
    let mut s = waiting(4, 2, 2, 1);
    let out = deliver(&mut s, at(1), 1, request(3, 5, 1));
    // (safety) pos None: the requester monitors us and stops its Commit timer.
    assert_eq!(out, vec![send(3, commit(None, &[2], 5, (2, 1)))]);
    assert_eq!(s.next, Some((n(3), 5)));
    assert_eq!(s.last, Last::Parent(n(3)));
}

#[test]
fn nt_request_at_a_waiting_root_with_a_position_commits_mine_plus_one_and_k_predecessors() {
    // k = 2: the requester learns me and my closest predecessor.
    let mut s = committed(4, 3, 2, 1, Some(2), &[2, 1]);
    let out = deliver(&mut s, at(1), 4, request(4, 7, 0));
    assert_eq!(out, vec![send(4, commit(Some(3), &[3, 2], 7, (3, 1)))]);
    assert_eq!(s.next, Some((n(4), 7)));

    // k = 3: me and my two closest predecessors.
    let mut s = committed(4, 3, 3, 1, Some(2), &[2, 1]);
    let out = deliver(&mut s, at(1), 4, request(4, 7, 0));
    assert_eq!(out, vec![send(4, commit(Some(3), &[3, 2, 1], 7, (3, 1)))]);
}

#[test]
fn nt_request_at_a_non_root_is_forwarded_to_last_with_path_reversal() {
    let mut s = site(4, 2, 2);
    let out = deliver(&mut s, T0, 3, request(3, 1, 0));
    assert_eq!(out, vec![send(1, request(3, 1, 1))]);
    assert_eq!(s.last, Last::Parent(n(3)));
}

#[test]
fn nt_release_with_next_passes_the_token_and_leaves_the_queue() {
    let mut s = holder(3, 1, 2);
    acquire(&mut s, T0, 1);
    deliver(&mut s, at(1), 3, request(3, 1, 0));
    let f = fence(E, 1);
    let out = release(&mut s, at(5), 1);
    assert_eq!(
        out,
        vec![
            reply(1, LockReply::Released),
            released_event(1, f, 5, ReleaseHow::Released),
            send(3, token(E, 1, 1)),
            ev(NtEvent::HasToken(false)),
        ]
    );
    // "A site loses its position when it leaves the queue."
    assert_eq!((s.token, s.position, s.next), (None, None, None));
    assert!(s.preds.is_empty());
    assert_eq!(s.request, None);
}

#[test]
fn nt_release_with_a_local_client_still_waiting_passes_the_token_and_requests_again() {
    let mut s = holder(3, 1, 2);
    acquire(&mut s, T0, 1);
    deliver(&mut s, at(1), 3, request(3, 1, 0));
    assert_eq!(acquire(&mut s, at(2), 2), vec![], "c2 waits behind the holder");
    let out = release(&mut s, at(5), 1);
    assert_eq!(
        out,
        vec![
            reply(1, LockReply::Released),
            released_event(1, fence(E, 1), 5, ReleaseHow::Released),
            send(3, token(E, 1, 1)),
            ev(NtEvent::HasToken(false)),
            send(3, request(1, 1, 0)),
        ]
    );
    assert_eq!((s.request, s.last), (Some(1), Last::Root));
}

#[test]
fn nt_batch_queued_when_the_token_arrives_is_served_before_passing_it_on() {
    let mut s = waiting(4, 2, 2, 1);
    assert_eq!(acquire(&mut s, T0, 1), vec![]);
    assert_eq!(acquire(&mut s, T0, 2), vec![]);
    assert_eq!(deliver(&mut s, at(1), 1, request(3, 7, 1)), vec![send(3, commit(None, &[2], 7, (2, 1)))]);

    // The token: c1 and c2 form the batch; the chain behind learns our
    // position (a fresh Commit with a position).
    let (f5, f6) = (fence(E, 5), fence(E, 6));
    let out = deliver(&mut s, at(2), 1, token(E, 4, 1));
    assert_eq!(
        out,
        vec![
            ev(NtEvent::HasToken(true)),
            send(3, commit(Some(2), &[2], 7, (2, u64::MAX))),
            reply(1, LockReply::Granted { fence: f5 }),
            granted_event(1, f5, 2),
            ev(NtEvent::Entered { fence: f5 }),
        ]
    );
    assert_eq!((s.position, s.request), (Some(1), None));

    // c3 arrives after the token: not in the batch.
    assert_eq!(acquire(&mut s, at(3), 3), vec![]);
    let out = release(&mut s, at(4), 1);
    assert_eq!(
        out,
        vec![
            reply(1, LockReply::Released),
            released_event(1, f5, 2, ReleaseHow::Released),
            reply(2, LockReply::Granted { fence: f6 }),
            granted_event(2, f6, 4),
            ev(NtEvent::Entered { fence: f6 }),
        ]
    );
    // Batch done, next set: the token goes, and c3 makes a new request.
    let out = release(&mut s, at(6), 2);
    assert_eq!(
        out,
        vec![
            reply(2, LockReply::Released),
            released_event(2, f6, 2, ReleaseHow::Released),
            send(3, token(E, 6, 2)),
            ev(NtEvent::HasToken(false)),
            send(3, request(2, 2, 0)),
        ]
    );
    assert_eq!(s.locks.waiting(), 1);
}

#[test]
fn nt_holder_without_next_keeps_granting_to_late_arrivals() {
    let mut s = holder(3, 1, 2);
    acquire(&mut s, T0, 1);
    assert_eq!(acquire(&mut s, at(1), 2), vec![]);
    let (f1, f2) = (fence(E, 1), fence(E, 2));
    assert_eq!(
        release(&mut s, at(3), 1),
        vec![
            reply(1, LockReply::Released),
            released_event(1, f1, 3, ReleaseHow::Released),
            reply(2, LockReply::Granted { fence: f2 }),
            granted_event(2, f2, 2),
            ev(NtEvent::Entered { fence: f2 }),
        ]
    );
    assert_eq!(s.token, Some(Token { epoch: E, counter: 2 }));
}

#[test]
fn nt_waiter_timing_out_leaves_the_request_outstanding() {
    let mut s = site(3, 2, 2);
    s.handle_request(T0, c(1), LockRequest::Acquire { timeout_ms: 30 });
    assert_eq!(drain(&mut s), vec![send(1, request(2, 1, 0))]);
    assert_eq!(s.poll_timeout(), Some(at(30)), "the client's deadline comes before the Commit timer");
    assert_eq!(
        timeout(&mut s, at(30)),
        vec![reply(1, LockReply::TimedOut), ev(NtEvent::Lock(LockEvent::TimedOut { client: c(1), waited: ms(30) }))]
    );
    assert_eq!(s.request, Some(1), "requests cannot be withdrawn");
}

#[test]
fn nt_token_arriving_with_no_local_waiter_is_kept_idle_or_passed_to_next() {
    let mut s = waiting(3, 2, 2, 1);
    assert_eq!(deliver(&mut s, at(1), 1, token(E, 3, 1)), vec![ev(NtEvent::HasToken(true))]);
    assert_eq!((s.token, s.position, s.request), (Some(Token { epoch: E, counter: 3 }), Some(1), None));

    let mut s = waiting(3, 2, 2, 1);
    s.next = Some((n(3), 5));
    assert_eq!(
        deliver(&mut s, at(1), 1, token(E, 3, 1)),
        vec![
            ev(NtEvent::HasToken(true)),
            send(3, commit(Some(2), &[2], 5, (2, u64::MAX))),
            send(3, token(E, 3, 2)),
            ev(NtEvent::HasToken(false)),
        ]
    );
    assert_eq!((s.token, s.position, s.next), (None, None, None));
}

#[test]
fn nt_revoked_holder_keeps_the_token_until_its_grace_ends() {
    let mut h = holder(3, 1, 2);
    h.locks = LocalLocks::new(LocksConfig { max_queue: 8, max_hold: Some(ms(50)), revoke_grace: ms(100) });
    acquire(&mut h, T0, 1);
    deliver(&mut h, at(1), 3, request(3, 1, 0));
    let f = fence(E, 1);
    assert_eq!(
        timeout(&mut h, at(50)),
        vec![
            reply(1, LockReply::LockLost { reason: "held longer than max_hold_ms".into() }),
            ev(NtEvent::Lock(LockEvent::Revoking { client: c(1), fence: f })),
        ]
    );
    assert!(h.has_token(), "not passed before the client lets go or the grace ends");
    assert_eq!(
        timeout(&mut h, at(150)),
        vec![released_event(1, f, 150, ReleaseHow::Revoked), send(3, token(E, 1, 1)), ev(NtEvent::HasToken(false))]
    );
}

// ===== COMMIT =============================================================

#[test]
fn commit_for_the_current_request_sets_position_arms_the_alive_check_and_cascades_to_next() {
    let mut s = waiting(4, 3, 2, 4);
    s.next = Some((n(4), 9));
    s.last = Last::Parent(n(4));
    let out = deliver(&mut s, at(10), 2, commit(Some(2), &[2, 1], 4, (1, u64::MAX)));
    // The cascade keeps the origin and gives next my position + 1.
    assert_eq!(out, vec![send(4, commit(Some(3), &[3, 2], 9, (1, u64::MAX)))]);
    assert_eq!(s.position, Some(2));
    assert_eq!(s.preds, vec![n(2), n(1)]);
    assert_eq!(s.monitored, Some((n(2), INC)));
    assert_eq!(s.last_alive_ok, at(10));
    assert_eq!(s.timers.get(Timer::CommitWait), None);
    assert_eq!(s.timers.get(Timer::AliveCheck), Some(at(30)));
    assert_eq!(s.timers.get(Timer::Provisional), None);
}

#[test]
fn commit_provisional_monitors_the_sender_and_arms_the_provisional_timer() {
    let mut s = waiting(4, 3, 2, 4);
    assert_eq!(deliver(&mut s, at(10), 2, commit(None, &[2], 4, (2, 1))), vec![]);
    assert_eq!((s.position, s.monitored), (None, Some((n(2), INC))));
    assert_eq!(s.timers.get(Timer::CommitWait), None);
    // 2 (N + 1) t_msg: head committed, then the cascade down the chain.
    assert_eq!(s.timers.get(Timer::Provisional), Some(at(110)));
}

#[test]
fn commit_for_an_abandoned_request_is_answered_unlink() {
    let mut s = waiting(4, 3, 2, 5);
    assert_eq!(deliver(&mut s, at(1), 2, commit(Some(2), &[2], 4, (2, 3))), vec![send(2, Body::Unlink { seq: 4 })]);
    assert_eq!((s.position, s.monitored), (None, None));

    // At a holder every Commit is stale.
    let mut h = holder(4, 3, 2);
    h.request = Some(5);
    assert_eq!(deliver(&mut h, at(1), 2, commit(Some(2), &[2], 5, (2, 3))), vec![send(2, Body::Unlink { seq: 5 })]);
    assert_eq!(h.position, Some(0));
}

#[test]
fn unlink_clears_next_only_if_it_still_names_that_requester_and_seq() {
    let mut s = waiting(4, 2, 2, 1);
    s.next = Some((n(3), 4));
    assert_eq!(deliver(&mut s, at(1), 3, Body::Unlink { seq: 3 }), vec![]);
    assert_eq!(s.next, Some((n(3), 4)), "another request of n3");
    assert_eq!(deliver(&mut s, at(1), 4, Body::Unlink { seq: 4 }), vec![]);
    assert_eq!(s.next, Some((n(3), 4)), "same seq, another site");
    assert_eq!(deliver(&mut s, at(1), 3, Body::Unlink { seq: 4 }), vec![]);
    assert_eq!(s.next, None);
}

#[test]
fn commit_cascade_back_at_its_origin_is_refused_and_the_site_searches() {
    let mut s = waiting(4, 3, 2, 2);
    let out = deliver(&mut s, at(1), 2, commit(Some(5), &[2], 2, (3, 2)));
    assert_eq!(
        out,
        vec![
            send(2, Body::Unlink { seq: 2 }),
            ev(NtEvent::RecoveryStarted { mech: Mech::M3 }),
            send(1, Body::SearchQueue { accesses: 0 }),
            send(2, Body::SearchQueue { accesses: 0 }),
            send(4, Body::SearchQueue { accesses: 0 }),
        ]
    );
    assert_eq!(s.position, None);
    assert_eq!((s.seq, s.request), (3, Some(3)), "M3 makes a fresh request");
}

#[test]
fn commit_from_our_own_next_is_refused_as_a_cycle() {
    let mut s = committed(4, 3, 2, 2, Some(2), &[2, 1]);
    s.next = Some((n(4), 6));
    let out = deliver(&mut s, at(1), 4, commit(Some(7), &[4], 2, (1, u64::MAX)));
    assert_eq!(
        out,
        vec![
            send(4, Body::Unlink { seq: 2 }),
            ev(NtEvent::RecoveryStarted { mech: Mech::M2 }),
            send(1, Body::SearchPrev { position: 2 }),
            send(2, Body::SearchPrev { position: 2 }),
            send(4, Body::SearchPrev { position: 2 }),
        ]
    );
    assert_eq!(s.position, Some(2), "the refused Commit changed nothing");
}

// ===== failure detection ==================================================

#[test]
fn alive_check_asks_the_closest_predecessor_every_heartbeat() {
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    assert_eq!(timeout(&mut s, at(20)), vec![send(2, Body::AreYouAlive)]);
    assert_eq!(s.timers.get(Timer::AliveCheck), Some(at(40)));
}

#[test]
fn are_you_alive_is_answered_with_position_and_next() {
    let mut s = committed(4, 2, 2, 1, Some(1), &[1]);
    s.next = Some((n(3), 4));
    assert_eq!(
        deliver(&mut s, at(1), 3, Body::AreYouAlive),
        vec![send(3, Body::IAmAlive { position: Some(1), next: Some(n(3)) })]
    );
}

#[test]
fn i_am_alive_from_the_same_life_before_us_and_linked_to_us_keeps_the_predecessor() {
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    assert_eq!(deliver(&mut s, at(25), 2, Body::IAmAlive { position: Some(1), next: Some(n(3)) }), vec![]);
    assert_eq!(s.last_alive_ok, at(25));
    assert_eq!((s.monitored, &s.recovery), (Some((n(2), INC)), &Recovery::Idle));
}

#[test]
fn i_am_alive_linked_elsewhere_starts_recovery_m1() {
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    let out = deliver(&mut s, at(25), 2, Body::IAmAlive { position: Some(1), next: Some(n(4)) });
    assert_eq!(out, vec![ev(NtEvent::RecoveryStarted { mech: Mech::M1 }), send(2, Body::AreYouAlive)]);
    assert_eq!(s.recovery, Recovery::M1 { started: at(25), asking: n(2), rest: vec![n(1)] });
    assert_eq!(s.monitored, None);
    assert_eq!(s.timers.get(Timer::AliveCheck), None);
    assert_eq!(s.timers.get(Timer::Window), Some(at(45)), "2 t_msg per AreYouAlive");
}

#[test]
fn i_am_alive_no_longer_before_us_or_from_another_life_starts_recovery() {
    // Its position is not smaller than ours: it left the queue and came back.
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    let out = deliver(&mut s, at(25), 2, Body::IAmAlive { position: Some(3), next: Some(n(3)) });
    assert_eq!(out, vec![ev(NtEvent::RecoveryStarted { mech: Mech::M1 }), send(2, Body::AreYouAlive)]);

    // Another life than the one that committed us (first message of that
    // life, so nothing else noticed the restart).
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    let out = deliver_msg(
        &mut s,
        at(25),
        2,
        Incarnation(2),
        Msg { epoch: E, body: Body::IAmAlive { position: Some(1), next: Some(n(3)) } },
    );
    assert_eq!(out, vec![ev(NtEvent::RecoveryStarted { mech: Mech::M1 }), send(2, Body::AreYouAlive)]);
}

#[test]
fn silence_of_the_predecessor_for_suspect_after_suspects_it_and_starts_m1() {
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    assert_eq!(timeout(&mut s, at(20)), vec![send(2, Body::AreYouAlive)]);
    assert_eq!(timeout(&mut s, at(40)), vec![send(2, Body::AreYouAlive)]);
    // 60 ms without a valid answer.
    let out = timeout(&mut s, at(60));
    assert_eq!(
        out,
        vec![
            ev(NtEvent::Suspected { node: n(2) }),
            ev(NtEvent::RecoveryStarted { mech: Mech::M1 }),
            // M1 skips the suspected closest predecessor.
            send(1, Body::AreYouAlive),
        ]
    );
    assert_eq!(s.recovery, Recovery::M1 { started: at(60), asking: n(1), rest: vec![] });
    assert_eq!(s.timers.get(Timer::Window), Some(at(80)));
    // Suspected peers are probed every 4 suspect_after.
    assert_eq!(s.timers.get(Timer::Probe), Some(at(300)));
}

#[test]
fn suspected_peers_are_probed_until_they_answer() {
    let mut s = site(4, 2, 2);
    s.suspect(n(3), T0);
    assert_eq!(drain(&mut s), vec![ev(NtEvent::Suspected { node: n(3) })]);
    assert_eq!(timeout(&mut s, at(240)), vec![send(3, Body::AreYouAlive)]);
    assert_eq!(s.timers.get(Timer::Probe), Some(at(480)));
    // Any message of the peer clears the suspicion; the probe stops.
    assert_eq!(deliver(&mut s, at(241), 3, Body::IAmAlive { position: None, next: None }), vec![]);
    assert!(s.suspected.is_empty());
    assert_eq!(timeout(&mut s, at(480)), vec![]);
    assert_eq!(s.timers.get(Timer::Probe), None);
}

#[test]
fn provisional_timer_without_a_position_starts_m3() {
    // A provisional chain that never got positions: a detached portion.
    let mut s = committed(4, 3, 2, 1, None, &[2]);
    s.timers.cancel(Timer::AliveCheck);
    s.timers.set(Timer::Provisional, at(100));
    let out = timeout(&mut s, at(100));
    let mut expected = vec![ev(NtEvent::RecoveryStarted { mech: Mech::M3 })];
    expected.extend([1, 2, 4].map(|i| send(i, Body::SearchQueue { accesses: 0 })));
    assert_eq!(out, expected);
    assert_eq!((s.monitored, s.request), (None, Some(2)));
}

// ===== M1 =================================================================

/// n3 of 4 with position 2 behind n2 and n1; n2 went silent: M1 asks n1.
fn m1_asking_n1() -> NtNode {
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    s.last_alive_ok = T0;
    s.timers.set(Timer::AliveCheck, at(60));
    timeout(&mut s, at(60));
    s
}

#[test]
fn m1_first_valid_answer_gets_a_connection_naming_the_failed_sites() {
    let mut s = m1_asking_n1();
    let out = deliver(&mut s, at(65), 1, Body::IAmAlive { position: Some(0), next: Some(n(2)) });
    assert_eq!(out, vec![send(1, connection(3, 4, 0, &[2]))]);
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M1, started: at(60) });
    assert_eq!(s.timers.get(Timer::Window), Some(at(115)), "(N + 1) t_msg for the Commit");
}

#[test]
fn m1_linking_without_commit_or_token_in_time_searches_again_m2() {
    let mut s = m1_asking_n1();
    deliver(&mut s, at(65), 1, Body::IAmAlive { position: Some(0), next: Some(n(2)) });
    let out = timeout(&mut s, at(115));
    let mut expected = vec![ev(NtEvent::RecoveryStarted { mech: Mech::M2 })];
    expected.extend([1, 2, 4].map(|i| send(i, Body::SearchPrev { position: 2 })));
    assert_eq!(out, expected);
    // n2 is suspected: only n1 and n4 are waited for.
    assert_eq!(
        s.recovery,
        Recovery::Search { mech: Mech::M2, started: at(115), waiting: ids(&[1, 4]), answers: BTreeMap::new() }
    );
}

#[test]
fn m1_answer_without_a_smaller_position_suspects_it_and_asks_the_next_predecessor() {
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    deliver(&mut s, at(25), 2, Body::IAmAlive { position: Some(1), next: Some(n(4)) });
    assert_eq!(s.recovery, Recovery::M1 { started: at(25), asking: n(2), rest: vec![n(1)] });
    let out = deliver(&mut s, at(27), 2, Body::IAmAlive { position: None, next: None });
    assert_eq!(out, vec![ev(NtEvent::Suspected { node: n(2) }), send(1, Body::AreYouAlive)]);
    assert_eq!(s.recovery, Recovery::M1 { started: at(25), asking: n(1), rest: vec![] });
    assert_eq!(s.timers.get(Timer::Window), Some(at(47)));
}

#[test]
fn m1_every_predecessor_silent_falls_back_to_m2() {
    let mut s = m1_asking_n1();
    let out = timeout(&mut s, at(80));
    assert_eq!(
        out,
        vec![
            ev(NtEvent::Suspected { node: n(1) }),
            ev(NtEvent::RecoveryStarted { mech: Mech::M2 }),
            send(1, Body::SearchPrev { position: 2 }),
            send(2, Body::SearchPrev { position: 2 }),
            send(4, Body::SearchPrev { position: 2 }),
        ]
    );
    // The window waits for the non-suspected only; M2 keeps M1's start.
    assert_eq!(
        s.recovery,
        Recovery::Search { mech: Mech::M2, started: at(60), waiting: ids(&[4]), answers: BTreeMap::new() }
    );
    assert_eq!(s.timers.get(Timer::Window), Some(at(100)));
}

// ===== M2 =================================================================

/// n5 of 5, position 4 behind n4 (suspected) and n3, in M2 since T0.
fn m2_searching() -> NtNode {
    let mut s = committed(5, 5, 2, 3, Some(4), &[4, 3]);
    s.suspected.insert(n(4));
    s.start_search(T0, Mech::M2, None);
    let sp = Body::SearchPrev { position: 4 };
    let mut expected = vec![ev(NtEvent::RecoveryStarted { mech: Mech::M2 })];
    expected.extend([1, 2, 3, 4].map(|i| send(i, sp.clone())));
    assert_eq!(drain(&mut s), expected, "SearchPrev goes to everyone");
    s
}

#[test]
fn search_prev_is_answered_with_position_next_and_token() {
    let mut h = busy_holder(4, 1, 2);
    h.next = Some((n(2), 1));
    assert_eq!(
        deliver(&mut h, at(1), 4, Body::SearchPrev { position: 3 }),
        vec![send(4, search_ack(Some(0), true, true, None))]
    );
    let mut s = site(4, 3, 2);
    assert_eq!(
        deliver(&mut s, at(1), 4, Body::SearchPrev { position: 3 }),
        vec![send(4, search_ack(None, false, false, None))]
    );
}

#[test]
fn m2_closes_early_and_connects_to_the_greatest_smaller_position() {
    let mut s = m2_searching();
    assert_eq!(deliver(&mut s, at(2), 1, search_ack(Some(0), true, true, None)), vec![]);
    assert_eq!(deliver(&mut s, at(3), 3, search_ack(Some(6), false, false, None)), vec![]);
    // The last non-suspected answer closes the window before its timer.
    let out = deliver(&mut s, at(4), 2, search_ack(Some(2), true, false, None));
    assert_eq!(out, vec![send(2, connection(5, 3, 0, &[4]))]);
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M2, started: T0 });
    assert_eq!(s.timers.get(Timer::Window), Some(at(64)));
}

#[test]
fn m2_without_a_smaller_position_regenerates_asking_every_site() {
    let mut s = m2_searching();
    deliver(&mut s, at(2), 1, search_ack(None, false, false, None));
    deliver(&mut s, at(3), 2, search_ack(Some(7), false, false, None));
    let out = deliver(&mut s, at(4), 3, search_ack(None, false, false, None));
    // (safety) Phase one goes to the suspected n4 too.
    let p = proposal(2, 5);
    assert_eq!(out, [1, 2, 3, 4].map(|i| send(i, Body::Regenerate { proposal: p })).to_vec());
    assert_eq!(
        s.recovery,
        Recovery::Regen { mech: Mech::M2, started: T0, proposal: p, waiting: ids(&[1, 2, 3]), acked: 0 }
    );
}

// ===== M3.a ===============================================================

/// n4 of 4 (3 accesses so far) whose Commit timer expired at T0 + 50 ms:
/// it is an M3 candidate with request 2.
fn m3_candidate() -> NtNode {
    let mut s = waiting(4, 4, 2, 1);
    s.accesses = 3;
    let out = timeout(&mut s, at(50));
    let sq = Body::SearchQueue { accesses: 3 };
    let mut expected = vec![ev(NtEvent::RecoveryStarted { mech: Mech::M3 })];
    expected.extend([1, 2, 3].map(|i| send(i, sq.clone())));
    assert_eq!(out, expected);
    assert_eq!((s.seq, s.request), (2, Some(2)), "M3 abandons request 1");
    assert_eq!(s.best_candidate, Some((3, n(4), at(90))));
    assert_eq!(s.timers.get(Timer::Window), Some(at(70)));
    s
}

#[test]
fn m3a_i_tail_without_next_gets_a_direct_request() {
    let mut s = m3_candidate();
    assert_eq!(deliver(&mut s, at(52), 1, search_ack(Some(0), true, true, None)), vec![]);
    assert_eq!(deliver(&mut s, at(53), 3, search_ack(None, false, false, None)), vec![]);
    let out = deliver(&mut s, at(54), 2, search_ack(Some(1), false, false, None));
    assert_eq!(out, vec![send(2, direct(4, 2, 0))]);
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: at(50) });
    assert_eq!(s.timers.get(Timer::Window), Some(at(104)));
    assert_eq!(s.last, Last::Root, "rule III for the elected site itself: no next, a root");
}

#[test]
fn m3a_ii_greatest_position_with_a_next_gets_a_connection() {
    let mut s = m3_candidate();
    deliver(&mut s, at(52), 1, search_ack(Some(0), true, true, None));
    deliver(&mut s, at(53), 3, search_ack(None, false, false, None));
    let out = deliver(&mut s, at(54), 2, search_ack(Some(1), true, false, None));
    assert_eq!(out, vec![send(2, connection(4, 2, 0, &[]))]);
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: at(50) });
}

#[test]
fn m3a_iii_nobody_queued_and_no_token_regenerates() {
    let mut s = m3_candidate();
    deliver(&mut s, at(52), 1, search_ack(None, false, false, None));
    deliver(&mut s, at(53), 2, search_ack(None, true, false, Some(0)));
    let out = deliver(&mut s, at(54), 3, search_ack(None, false, false, None));
    let p = proposal(2, 4);
    assert_eq!(out, [1, 2, 3].map(|i| send(i, Body::Regenerate { proposal: p })).to_vec());
    assert_eq!(
        s.recovery,
        Recovery::Regen { mech: Mech::M3, started: at(50), proposal: p, waiting: ids(&[1, 2, 3]), acked: 0 }
    );
}

#[test]
fn m3a_an_answer_showing_a_token_gets_a_direct_request_to_its_holder() {
    let mut s = m3_candidate();
    deliver(&mut s, at(52), 1, search_ack(None, false, true, None));
    deliver(&mut s, at(53), 2, search_ack(None, false, false, None));
    let out = deliver(&mut s, at(54), 3, search_ack(None, false, false, None));
    assert_eq!(out, vec![send(1, direct(4, 2, 0))]);
}

#[test]
fn m3_window_expiry_suspects_the_silent_and_decides_on_the_answers() {
    let mut s = m3_candidate();
    deliver(&mut s, at(52), 1, search_ack(Some(0), false, true, None));
    deliver(&mut s, at(53), 2, search_ack(None, false, false, None));
    let out = timeout(&mut s, at(70));
    assert_eq!(out, vec![ev(NtEvent::Suspected { node: n(3) }), send(1, direct(4, 2, 0))]);
}

// ===== M3.b election ======================================================

/// n2 of 4 (`accesses` so far), queued n4 behind itself, M3 candidate
/// since T0 with request 2.
fn m3b_candidate(accesses: u64) -> NtNode {
    let mut s = waiting(4, 2, 2, 1);
    s.next = Some((n(4), 6));
    s.last = Last::Parent(n(4));
    s.accesses = accesses;
    s.start_m3(T0);
    drain(&mut s);
    assert_eq!(s.request, Some(2));
    s
}

#[test]
fn m3b_candidate_loses_to_fewer_accesses_and_requests_from_the_winner_staying_linked() {
    let mut s = m3b_candidate(5);
    let out = deliver(&mut s, at(3), 3, Body::SearchQueue { accesses: 2 });
    assert_eq!(out, vec![send(3, search_ack(None, true, false, Some(5))), send(3, direct(2, 3, 0))]);
    assert_eq!((s.seq, s.request), (3, Some(3)), "one new request, to the winner");
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: T0 });
    assert_eq!(s.timers.get(Timer::Window), Some(at(53)));
    // Keeps next; last per rule III (waiting without position: last = next).
    assert_eq!(s.next, Some((n(4), 6)));
    assert_eq!(s.last, Last::Parent(n(4)));
    assert_eq!(s.best_candidate, Some((2, n(3), at(43))));
}

#[test]
fn m3b_a_better_candidate_heard_before_our_own_search_wins_at_once() {
    // n2 waits (not yet a candidate) and hears n3's SearchQueue first.
    let mut s = waiting(4, 2, 2, 1);
    s.accesses = 5;
    let out = deliver(&mut s, at(1), 3, Body::SearchQueue { accesses: 2 });
    assert_eq!(out, vec![send(3, search_ack(None, false, false, None))]);
    assert_eq!(s.best_candidate, Some((2, n(3), at(41))));
    // Its own search starts while that is recent: it loses at once.
    s.start_m3(at(5));
    assert_eq!(
        drain(&mut s),
        vec![
            ev(NtEvent::RecoveryStarted { mech: Mech::M3 }),
            send(1, Body::SearchQueue { accesses: 5 }),
            send(3, Body::SearchQueue { accesses: 5 }),
            send(4, Body::SearchQueue { accesses: 5 }),
            send(3, direct(2, 3, 0)),
        ]
    );
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: at(5) });
}

#[test]
fn m3b_equal_accesses_the_higher_id_wins() {
    let mut s = m3b_candidate(0);
    // n1 has as many accesses and a lower id: we stay a candidate.
    let out = deliver(&mut s, at(2), 1, Body::SearchQueue { accesses: 0 });
    assert_eq!(out, vec![send(1, search_ack(None, true, false, Some(0)))]);
    assert!(matches!(s.recovery, Recovery::Search { mech: Mech::M3, .. }));
    assert_eq!(s.best_candidate, Some((0, n(2), at(40))));
    // n3: as many accesses, a higher id: we lose.
    let out = deliver(&mut s, at(3), 3, Body::SearchQueue { accesses: 0 });
    assert_eq!(out, vec![send(3, search_ack(None, true, false, Some(0))), send(3, direct(2, 3, 0))]);
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: T0 });
}

#[test]
fn m3b_a_candidate_with_more_accesses_loses_to_us() {
    let mut s = m3b_candidate(1);
    let out = deliver(&mut s, at(2), 4, Body::SearchQueue { accesses: 7 });
    assert_eq!(out, vec![send(4, search_ack(None, true, false, Some(1)))]);
    assert!(matches!(s.recovery, Recovery::Search { mech: Mech::M3, .. }));
    assert_eq!(s.request, Some(2));
}

#[test]
fn m3_a_commit_for_the_current_request_before_the_window_closes_cancels_m3() {
    let mut s = m3b_candidate(0);
    let out = deliver(&mut s, at(5), 1, commit(Some(3), &[1], 2, (1, u64::MAX)));
    assert_eq!(
        out,
        vec![
            ev(NtEvent::Recovered { mech: Mech::M3, took: ms(5) }),
            send(4, commit(Some(4), &[2, 1], 6, (1, u64::MAX)))
        ]
    );
    assert_eq!(s.recovery, Recovery::Idle);
    assert_eq!(s.timers.get(Timer::Window), None);
    assert_eq!(s.position, Some(3));
}

#[test]
fn m3_a_late_commit_for_the_request_m3_abandoned_is_unlinked() {
    // M3 takes a fresh seq, so the old chain's Commit no longer matches:
    // the sender clears its next, and our search goes on.
    let mut s = m3b_candidate(0);
    assert_eq!(
        deliver(&mut s, at(5), 1, commit(Some(3), &[1], 1, (1, u64::MAX))),
        vec![send(1, Body::Unlink { seq: 1 })]
    );
    assert!(matches!(s.recovery, Recovery::Search { mech: Mech::M3, .. }));
    assert_eq!(s.position, None);
}

// ===== last-tree rebuild after M3 (rules I–III) ===========================

#[test]
fn rebuild_rule_i_a_site_not_waiting_points_last_at_the_candidate() {
    let mut s = site(6, 6, 2);
    let out = deliver(&mut s, T0, 4, Body::SearchQueue { accesses: 0 });
    assert_eq!(out, vec![send(4, search_ack(None, false, false, None))]);
    assert_eq!(s.last, Last::Parent(n(4)));
    assert_eq!(s.best_candidate, Some((0, n(4), at(40))));
}

#[test]
fn rebuild_rule_ii_a_site_with_a_position_points_last_at_the_candidate() {
    let mut s = committed(6, 5, 2, 1, Some(2), &[3, 1]);
    let out = deliver(&mut s, T0, 4, Body::SearchQueue { accesses: 0 });
    assert_eq!(out, vec![send(4, search_ack(Some(2), false, false, None))]);
    assert_eq!(s.last, Last::Parent(n(4)));

    // The holder too (position 0, not waiting).
    let mut h = busy_holder(6, 1, 2);
    h.next = Some((n(3), 1));
    let out = deliver(&mut h, T0, 4, Body::SearchQueue { accesses: 0 });
    assert_eq!(out, vec![send(4, search_ack(Some(0), true, true, None))]);
    assert_eq!(h.last, Last::Parent(n(4)));
}

#[test]
fn rebuild_rule_iii_a_site_waiting_without_position_points_last_at_its_next() {
    // Per the seed's worked example, not its text ("next := last"): see the
    // spec's note on rule III.
    let mut s = waiting(6, 2, 2, 1);
    s.next = Some((n(3), 4));
    let out = deliver(&mut s, T0, 4, Body::SearchQueue { accesses: 0 });
    assert_eq!(out, vec![send(4, search_ack(None, true, false, None))]);
    assert_eq!(s.last, Last::Parent(n(3)));
    assert_eq!(s.next, Some((n(3), 4)), "next is authoritative and kept");

    // The tail of its portion stays a root.
    let mut s = waiting(6, 3, 2, 1);
    s.last = Last::Parent(n(5));
    deliver(&mut s, T0, 4, Body::SearchQueue { accesses: 0 });
    assert_eq!(s.last, Last::Root);
}

#[test]
fn rebuild_reapplies_for_a_better_candidate_only_while_the_best_is_recent() {
    let mut s = site(6, 6, 2);
    let ack = |to| vec![send(to, search_ack(None, false, false, None))];
    assert_eq!(deliver(&mut s, T0, 3, Body::SearchQueue { accesses: 2 }), ack(3));
    assert_eq!(s.last, Last::Parent(n(3)));
    assert_eq!(deliver(&mut s, at(1), 4, Body::SearchQueue { accesses: 1 }), ack(4));
    assert_eq!(s.last, Last::Parent(n(4)), "fewer accesses: better");
    assert_eq!(deliver(&mut s, at(2), 2, Body::SearchQueue { accesses: 1 }), ack(2));
    assert_eq!(s.last, Last::Parent(n(4)), "as many accesses, lower id: worse");
    assert_eq!(deliver(&mut s, at(3), 5, Body::SearchQueue { accesses: 3 }), ack(5));
    assert_eq!(s.last, Last::Parent(n(4)));
    assert_eq!(s.best_candidate, Some((1, n(4), at(41))));
    // 4 t_msg later the best is forgotten: any new candidate is applied.
    assert_eq!(deliver(&mut s, at(41), 5, Body::SearchQueue { accesses: 9 }), ack(5));
    assert_eq!(s.last, Last::Parent(n(5)));
}

// ===== regeneration =======================================================

#[test]
fn regenerate_at_a_token_holder_is_refused_and_the_token_kept() {
    let mut h = holder(4, 1, 2);
    let p = proposal(2, 3);
    let out = deliver(&mut h, at(1), 3, Body::Regenerate { proposal: p });
    assert_eq!(out, vec![send(3, Body::RegenerateNack { proposal: p, has_token: true })]);
    assert_eq!(h.token, Some(Token { epoch: E, counter: 0 }));
    assert_eq!(h.max_epoch, E);
}

#[test]
fn regenerate_with_a_proposal_above_max_epoch_is_recorded_and_acked() {
    let mut s = site(4, 2, 2);
    let p = proposal(2, 3);
    let out = deliver(&mut s, at(1), 3, Body::Regenerate { proposal: p });
    assert_eq!(out, vec![ev(NtEvent::Epoch(p)), send_e(3, p, Body::RegenerateAck { proposal: p })]);
    assert_eq!(s.max_epoch, p);
}

#[test]
fn regenerate_not_above_a_newer_known_epoch_is_refused() {
    let mut s = site(4, 2, 2);
    s.max_epoch = proposal(3, 1);
    let p = proposal(2, 3);
    let out = deliver(&mut s, at(1), 3, Body::Regenerate { proposal: p });
    assert_eq!(out, vec![send_e(3, proposal(3, 1), Body::RegenerateNack { proposal: p, has_token: false })]);
}

#[test]
fn regenerate_same_proposal_already_adopted_from_another_site_is_acked() {
    let mut s = site(4, 2, 2);
    let p = proposal(2, 3);
    s.max_epoch = p;
    // In n3's slot: n3's own proposal, learned from an acker's message.
    assert_eq!(
        deliver(&mut s, at(1), 3, Body::Regenerate { proposal: p }),
        vec![send_e(3, p, Body::RegenerateAck { proposal: p })]
    );
    // The same number from n4 is not n4's proposal.
    assert_eq!(
        deliver(&mut s, at(1), 4, Body::Regenerate { proposal: p }),
        vec![send_e(4, p, Body::RegenerateNack { proposal: p, has_token: false })]
    );
}

/// n3 of 4, request 2, n4 queued behind it, regenerating with proposal
/// (2 << 10) | 2 since T0.
fn regenerating() -> NtNode {
    let mut s = waiting(4, 3, 2, 2);
    s.next = Some((n(4), 8));
    s.start_regeneration(T0, Mech::M3, T0);
    let p = proposal(2, 3);
    assert_eq!(drain(&mut s), [1, 2, 4].map(|i| send(i, Body::Regenerate { proposal: p })).to_vec());
    s
}

#[test]
fn regenerate_concurrent_proposals_the_higher_wins() {
    let mut s = regenerating();
    let lower = proposal(2, 2);
    assert_eq!(
        deliver(&mut s, at(1), 2, Body::Regenerate { proposal: lower }),
        vec![send(2, Body::RegenerateNack { proposal: lower, has_token: false })]
    );
    let higher = proposal(3, 2);
    let out = deliver(&mut s, at(2), 2, Body::Regenerate { proposal: higher });
    assert_eq!(out, vec![ev(NtEvent::Epoch(higher)), send_e(2, higher, Body::RegenerateAck { proposal: higher })]);
    assert_eq!(s.recovery, Recovery::Idle, "ours is abandoned; wait for the winner's token");
    assert_eq!(s.timers.get(Timer::Window), None);
    assert_eq!(s.timers.get(Timer::CommitWait), Some(at(52)));
}

#[test]
fn regeneration_with_every_ack_creates_the_token_at_position_zero_and_commits_next() {
    let mut s = regenerating();
    assert_eq!(acquire(&mut s, T0, 1), vec![]);
    let p = proposal(2, 3);
    // Ackers have adopted p, so their messages carry it.
    let ack = |s: &mut NtNode, t, from| {
        deliver_msg(s, t, from, INC, Msg { epoch: p, body: Body::RegenerateAck { proposal: p } })
    };
    assert_eq!(ack(&mut s, at(2), 1), vec![ev(NtEvent::Epoch(p))]);
    assert_eq!(ack(&mut s, at(3), 2), vec![]);
    let f = fence(p, 1);
    assert_eq!(
        ack(&mut s, at(4), 4),
        vec![
            ev(NtEvent::Regenerated { epoch: p }),
            ev(NtEvent::HasToken(true)),
            ev(NtEvent::Recovered { mech: Mech::M3, took: ms(4) }),
            send_e(4, p, commit(Some(1), &[3], 8, (3, u64::MAX))),
            reply(1, LockReply::Granted { fence: f }),
            granted_event(1, f, 4),
            ev(NtEvent::Entered { fence: f }),
        ]
    );
    // Counter 0 at creation; the grant made it 1.
    assert_eq!(s.token, Some(Token { epoch: p, counter: 1 }));
    assert_eq!((s.position, s.request, s.last), (Some(0), None, Last::Root));
}

#[test]
fn regeneration_window_expiry_suspects_the_silent_and_completes_with_a_majority() {
    let mut s = regenerating();
    let p = proposal(2, 3);
    let ack = Msg { epoch: p, body: Body::RegenerateAck { proposal: p } };
    assert_eq!(deliver_msg(&mut s, at(2), 1, INC, ack.clone()), vec![ev(NtEvent::Epoch(p))]);
    assert_eq!(deliver_msg(&mut s, at(3), 2, INC, ack), vec![]);
    // n4 (our next) is silent: suspected, and so never handed the token.
    assert_eq!(
        timeout(&mut s, at(20)),
        vec![
            ev(NtEvent::Suspected { node: n(4) }),
            ev(NtEvent::Regenerated { epoch: p }),
            ev(NtEvent::HasToken(true)),
            ev(NtEvent::Recovered { mech: Mech::M3, took: ms(20) }),
            send_e(4, p, commit(Some(1), &[3], 8, (3, u64::MAX))),
        ]
    );
    assert_eq!(s.token, Some(Token { epoch: p, counter: 0 }));
    assert_eq!(s.next, None, "a suspected next is cleared, the token kept");
}

#[test]
fn regeneration_without_a_majority_of_acks_gives_up_and_waits() {
    // (+) 5 sites, n3 and n4 suspected, n2 silent: n5 + n1 is no majority.
    let mut s = waiting(5, 5, 2, 1);
    s.suspected.extend([n(3), n(4)]);
    s.start_regeneration(T0, Mech::M2, T0);
    let p = proposal(2, 5);
    assert_eq!(drain(&mut s), [1, 2, 3, 4].map(|i| send(i, Body::Regenerate { proposal: p })).to_vec());
    let out = deliver_msg(&mut s, at(2), 1, INC, Msg { epoch: p, body: Body::RegenerateAck { proposal: p } });
    assert_eq!(out, vec![ev(NtEvent::Epoch(p))]);
    assert_eq!(timeout(&mut s, at(20)), vec![ev(NtEvent::Suspected { node: n(2) })]);
    assert_eq!(s.token, None);
    assert_eq!(s.recovery, Recovery::Idle);
    assert_eq!(s.timers.get(Timer::CommitWait), Some(at(80)));
}

#[test]
fn regeneration_nack_from_a_token_holder_sends_it_a_direct_request() {
    let mut s = regenerating();
    let out = deliver(&mut s, at(3), 1, Body::RegenerateNack { proposal: proposal(2, 3), has_token: true });
    assert_eq!(out, vec![send(1, direct(3, 2, 0))]);
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: T0 });
    assert_eq!(s.timers.get(Timer::Window), Some(at(53)));
    assert_eq!(s.token, None);
}

#[test]
fn regeneration_nack_for_a_newer_epoch_abandons_and_waits() {
    let mut s = regenerating();
    let newer = proposal(3, 1);
    let msg = Msg { epoch: newer, body: Body::RegenerateNack { proposal: proposal(2, 3), has_token: false } };
    assert_eq!(deliver_msg(&mut s, at(3), 2, INC, msg), vec![ev(NtEvent::Epoch(newer))]);
    assert_eq!(s.recovery, Recovery::Idle);
    assert_eq!(s.timers.get(Timer::Window), None);
    assert_eq!(s.timers.get(Timer::CommitWait), Some(at(53)));
}

#[test]
fn regeneration_proposals_encode_the_proposer_slot_and_a_new_round() {
    let mut s = site(4, 3, 2);
    assert_eq!(s.next_proposal(T0), proposal(2, 3));
    s.max_epoch = proposal(5, 4);
    assert_eq!(s.next_proposal(T0), proposal(6, 3));
    assert_eq!(s.next_proposal(T0) & ((1 << SLOT_BITS) - 1), 2, "n3's slot");

    // A cold restart an hour after 2023-11-14T22:13:20Z: the round never
    // falls below wall-clock minutes since then (incarnation = start in ms).
    let one_hour_later = Incarnation(1_700_000_000_000 + 3_600_000);
    let s = NtNode::start(Context::new(n(3), one_hour_later, Membership::of_size(4), T0, cfg(2))).unwrap();
    assert_eq!(s.next_proposal(T0), proposal(60, 3));
}

// ===== epochs =============================================================

#[test]
fn epoch_newer_than_the_held_token_supersedes_it_the_client_loses_the_lock() {
    let mut h = holder(3, 1, 2);
    acquire(&mut h, T0, 1);
    assert_eq!(acquire(&mut h, at(1), 2), vec![]);
    let newer = proposal(2, 2);
    let out = deliver_msg(&mut h, at(5), 2, INC, Msg { epoch: newer, body: Body::AreYouAlive });
    assert_eq!(
        out,
        vec![
            ev(NtEvent::Epoch(newer)),
            ev(NtEvent::TokenSuperseded { epoch: E }),
            ev(NtEvent::HasToken(false)),
            reply(
                1,
                LockReply::LockLost { reason: "the token was regenerated elsewhere (this node was suspected)".into() }
            ),
            released_event(1, fence(E, 1), 5, ReleaseHow::Lost),
            send_e(2, newer, Body::IAmAlive { position: None, next: None }),
            // c2 still waits: a new request, through M3 (a root without a
            // token has nobody to ask along the tree).
            ev(NtEvent::RecoveryStarted { mech: Mech::M3 }),
            send_e(2, newer, Body::SearchQueue { accesses: 1 }),
            send_e(3, newer, Body::SearchQueue { accesses: 1 }),
        ]
    );
    assert_eq!((h.token, h.position, h.next), (None, None, None));
    assert_eq!(h.holder(), None);
}

#[test]
fn epoch_stale_token_is_discarded_and_a_site_without_position_searches_m3() {
    let mut s = waiting(4, 3, 2, 1);
    let newer = proposal(2, 2);
    s.max_epoch = newer;
    let out = deliver(&mut s, at(1), 1, token(E, 3, 2));
    let mut expected = vec![ev(NtEvent::StaleToken { epoch: E }), ev(NtEvent::RecoveryStarted { mech: Mech::M3 })];
    expected.extend([1, 2, 4].map(|i| send_e(i, newer, Body::SearchQueue { accesses: 0 })));
    assert_eq!(out, expected);
    assert_eq!(s.token, None);
    assert_eq!(s.request, Some(2));
}

#[test]
fn epoch_stale_token_at_a_site_with_position_searches_m2() {
    let mut s = committed(4, 3, 2, 1, Some(2), &[2, 1]);
    let newer = proposal(2, 2);
    s.max_epoch = newer;
    let out = deliver(&mut s, at(1), 2, token(E, 3, 2));
    let mut expected = vec![ev(NtEvent::StaleToken { epoch: E }), ev(NtEvent::RecoveryStarted { mech: Mech::M2 })];
    expected.extend([1, 2, 4].map(|i| send_e(i, newer, Body::SearchPrev { position: 2 })));
    assert_eq!(out, expected);
    assert_eq!(s.token, None);
}

// ===== (safety) DeadEnd ===================================================

#[test]
fn dead_end_from_a_new_life_whose_last_is_unknown() {
    let mut s = site(3, 2, 2);
    s.last = Last::Unknown;
    assert_eq!(deliver(&mut s, T0, 3, request(3, 1, 0)), vec![send(3, Body::DeadEnd { seq: 1 })]);
    assert_eq!(s.last, Last::Unknown);
}

#[test]
fn dead_end_instead_of_forwarding_to_a_suspected_last() {
    let mut s = site(3, 2, 2);
    s.suspected.insert(n(1));
    assert_eq!(deliver(&mut s, T0, 3, request(3, 1, 0)), vec![send(3, Body::DeadEnd { seq: 1 })]);
    assert_eq!(s.last, Last::Parent(n(1)), "no path reversal for a refused request");
}

#[test]
fn dead_end_from_a_root_that_neither_holds_nor_waits() {
    let mut s = site(3, 2, 2);
    s.last = Last::Root;
    assert_eq!(deliver(&mut s, T0, 3, request(3, 1, 0)), vec![send(3, Body::DeadEnd { seq: 1 })]);
}

#[test]
fn dead_end_for_a_request_circling_more_than_2n_hops() {
    let mut s = site(4, 2, 2);
    assert_eq!(deliver(&mut s, T0, 3, request(3, 1, 9)), vec![send(3, Body::DeadEnd { seq: 1 })]);
    assert_eq!(deliver(&mut s, T0, 3, request(3, 1, 8)), vec![send(1, request(3, 1, 9))]);
}

#[test]
fn dead_end_for_the_current_request_starts_m3_at_once() {
    let mut s = waiting(4, 3, 2, 1);
    assert_eq!(deliver(&mut s, at(1), 2, Body::DeadEnd { seq: 0 }), vec![], "an older request");
    let out = deliver(&mut s, at(2), 2, Body::DeadEnd { seq: 1 });
    let mut expected = vec![ev(NtEvent::RecoveryStarted { mech: Mech::M3 })];
    expected.extend([1, 2, 4].map(|i| send(i, Body::SearchQueue { accesses: 0 })));
    assert_eq!(out, expected);
    assert_eq!(s.request, Some(2));
    assert_eq!(s.timers.get(Timer::CommitWait), None);

    // A committed site monitors its predecessor: a DeadEnd is stale.
    let mut s = committed(4, 3, 2, 1, Some(2), &[2, 1]);
    assert_eq!(deliver(&mut s, at(2), 2, Body::DeadEnd { seq: 1 }), vec![]);
}

#[test]
fn token_is_never_sent_to_a_suspected_next() {
    let mut h = busy_holder(3, 1, 2);
    deliver(&mut h, at(1), 3, request(3, 1, 0));
    h.suspected.insert(n(3));
    let out = release(&mut h, at(5), 1);
    assert_eq!(out, vec![reply(1, LockReply::Released), released_event(1, fence(E, 1), 5, ReleaseHow::Released)]);
    assert_eq!(h.next, None, "next cleared");
    assert_eq!(h.token, Some(Token { epoch: E, counter: 1 }), "token kept");
}

// ===== (safety) linking rule ==============================================

/// n2 of 5 at position 1 behind n1, n3 queued behind it with request 4.
fn linked_member() -> NtNode {
    let mut s = committed(5, 2, 2, 1, Some(1), &[1]);
    s.next = Some((n(3), 4));
    s.last = Last::Parent(n(3));
    s
}

#[test]
fn linking_connection_at_a_site_whose_next_is_alive_is_forwarded_to_next() {
    let mut s = linked_member();
    assert_eq!(deliver(&mut s, at(1), 5, connection(5, 9, 0, &[])), vec![send(3, connection(5, 9, 1, &[]))]);
    assert_eq!(s.next, Some((n(3), 4)), "a live successor is never dropped");
    // A direct request follows next too (direct requests ignore last).
    assert_eq!(deliver(&mut s, at(2), 5, direct(5, 9, 2)), vec![send(3, direct(5, 9, 3))]);
}

#[test]
fn linking_connection_at_a_site_whose_next_is_suspected_links_and_commits() {
    let mut s = linked_member();
    s.suspected.insert(n(3));
    assert_eq!(deliver(&mut s, at(1), 5, connection(5, 9, 0, &[])), vec![send(5, commit(Some(2), &[2, 1], 9, (2, 1)))]);
    assert_eq!(s.next, Some((n(5), 9)));
    assert_eq!(s.last, Last::Parent(n(5)));
}

#[test]
fn linking_connection_naming_our_next_as_failed_suspects_it_and_links() {
    let mut s = linked_member();
    let out = deliver(&mut s, at(1), 5, connection(5, 9, 0, &[3]));
    assert_eq!(out, vec![ev(NtEvent::Suspected { node: n(3) }), send(5, commit(Some(2), &[2, 1], 9, (2, 1)))]);
    assert_eq!(s.next, Some((n(5), 9)));
}

#[test]
fn linking_connection_at_a_queue_member_without_next_links_and_commits() {
    let mut s = committed(5, 2, 2, 1, Some(1), &[1]);
    assert_eq!(deliver(&mut s, at(1), 5, connection(5, 9, 0, &[])), vec![send(5, commit(Some(2), &[2, 1], 9, (2, 1)))]);
    assert_eq!((s.next, s.last), (Some((n(5), 9)), Last::Parent(n(5))));
}

#[test]
fn linking_connection_from_our_next_refreshes_its_commit() {
    let mut s = linked_member();
    assert_eq!(deliver(&mut s, at(1), 3, connection(3, 6, 0, &[])), vec![send(3, commit(Some(2), &[2, 1], 6, (2, 1)))]);
    assert_eq!(s.next, Some((n(3), 6)));
}

#[test]
fn linking_at_an_idle_holder_hands_over_the_token() {
    let mut h = holder(5, 1, 2);
    assert_eq!(
        deliver(&mut h, at(1), 5, connection(5, 9, 0, &[])),
        vec![send(5, token(E, 0, 1)), ev(NtEvent::HasToken(false))]
    );
    assert_eq!((h.last, h.next), (Last::Parent(n(5)), None));
    let mut h = holder(5, 1, 2);
    assert_eq!(deliver(&mut h, at(1), 5, direct(5, 9, 0)), vec![send(5, token(E, 0, 1)), ev(NtEvent::HasToken(false))]);
}

#[test]
fn linking_connection_at_a_site_not_in_the_queue_gets_dead_end() {
    let mut s = site(5, 2, 2);
    assert_eq!(deliver(&mut s, at(1), 5, connection(5, 9, 0, &[])), vec![send(5, Body::DeadEnd { seq: 9 })]);
    assert_eq!(s.next, None);
}

#[test]
fn linking_direct_request_at_a_site_not_in_the_queue_is_an_ordinary_request() {
    let mut s = site(5, 2, 2);
    assert_eq!(deliver(&mut s, at(1), 5, direct(5, 9, 0)), vec![send(1, request(5, 9, 1))]);
    assert_eq!(s.last, Last::Parent(n(5)));
}

#[test]
fn linking_our_own_closest_predecessor_is_refused_as_a_cycle() {
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    assert_eq!(deliver(&mut s, at(1), 2, connection(2, 7, 0, &[])), vec![send(2, Body::DeadEnd { seq: 7 })]);
    assert_eq!(s.next, None);
}

#[test]
fn linking_connection_circling_more_than_2n_hops_gets_dead_end() {
    let mut s = linked_member();
    assert_eq!(deliver(&mut s, at(1), 4, connection(5, 9, 11, &[])), vec![send(5, Body::DeadEnd { seq: 9 })]);
}

// ===== restarts ===========================================================

#[test]
fn restart_a_message_from_a_newer_life_of_our_next_clears_next() {
    let mut s = waiting(4, 2, 2, 1);
    s.next = Some((n(3), 4));
    s.peer_inc.insert(n(3), INC);
    let out = deliver_msg(&mut s, at(1), 3, Incarnation(2), Msg { epoch: E, body: Body::Hello });
    assert_eq!(out, vec![send(3, Body::HelloAck { running: true })]);
    assert_eq!(s.next, None);
    assert_eq!(s.peer_inc.get(&n(3)), Some(&Incarnation(2)));
}

#[test]
fn restart_a_newer_life_of_the_monitored_predecessor_starts_recovery() {
    let mut s = committed(4, 3, 2, 1, Some(2), &[2, 1]);
    s.peer_inc.insert(n(2), INC);
    let out = deliver_msg(&mut s, at(1), 2, Incarnation(2), Msg { epoch: E, body: Body::Hello });
    assert_eq!(
        out,
        vec![
            ev(NtEvent::RecoveryStarted { mech: Mech::M1 }),
            send(2, Body::AreYouAlive),
            send(2, Body::HelloAck { running: true }),
        ]
    );
    assert_eq!(s.monitored, None);
}

#[test]
fn restart_a_message_from_an_older_life_is_ignored() {
    let mut s = site(4, 2, 2);
    s.peer_inc.insert(n(3), Incarnation(2));
    let before = s.clone();
    assert_eq!(deliver_msg(&mut s, at(1), 3, INC, Msg { epoch: proposal(9, 3), body: request(3, 1, 0) }), vec![]);
    assert_eq!(s, before);
}

#[test]
fn messages_from_itself_or_from_a_non_member_are_ignored() {
    let mut s = site(3, 2, 2);
    let before = s.clone();
    assert_eq!(deliver(&mut s, T0, 2, request(3, 1, 0)), vec![]);
    assert_eq!(deliver(&mut s, T0, 4, request(4, 1, 0)), vec![]);
    assert_eq!(deliver_msg(&mut s, T0, 9, INC, Msg { epoch: proposal(9, 1), body: Body::AreYouAlive }), vec![]);
    assert_eq!(s, before);
}

// ===== graceful leave =====================================================

#[test]
fn leave_holder_with_next_hands_the_token_to_next() {
    let mut h = holder(3, 1, 2);
    h.next = Some((n(3), 2));
    h.last = Last::Parent(n(3));
    h.handle_shutdown(T0);
    assert!(!h.is_left(), "outputs still to send");
    assert_eq!(drain(&mut h), vec![send(3, token(E, 0, 1)), ev(NtEvent::HasToken(false))]);
    assert!(h.is_left());
}

#[test]
fn leave_holder_in_use_hands_the_token_on_after_the_release() {
    let mut h = busy_holder(3, 1, 2);
    deliver(&mut h, at(1), 3, request(3, 2, 0));
    h.handle_shutdown(at(2));
    assert_eq!(drain(&mut h), vec![]);
    assert!(!h.is_left());
    let out = release(&mut h, at(5), 1);
    assert_eq!(
        out,
        vec![
            reply(1, LockReply::Released),
            released_event(1, fence(E, 1), 5, ReleaseHow::Released),
            send(3, token(E, 1, 1)),
            ev(NtEvent::HasToken(false)),
        ]
    );
    assert!(h.is_left());
}

#[test]
fn leave_holder_without_next_hands_the_token_to_the_lowest_live_id_and_broadcasts_new_root() {
    let mut h = holder(4, 3, 2);
    h.suspected.insert(n(1));
    h.handle_shutdown(T0);
    let mut expected = vec![send(2, token(E, 0, 1)), ev(NtEvent::HasToken(false))];
    expected.extend([1, 2, 4].map(|i| send(i, Body::NewRoot { root: n(2) })));
    assert_eq!(drain(&mut h), expected);
    assert!(h.is_left());
}

#[test]
fn leave_waiting_site_sends_skip_with_its_next_to_its_predecessor() {
    let mut s = committed(4, 3, 2, 1, Some(2), &[2, 1]);
    s.next = Some((n(4), 6));
    assert_eq!(acquire(&mut s, T0, 1), vec![]);
    s.handle_shutdown(at(1));
    assert_eq!(
        drain(&mut s),
        vec![
            reply(1, LockReply::Refused { reason: "daemon is shutting down".into() }),
            send(2, Body::Skip { next: Some((n(4), 6)) }),
        ]
    );
    assert!(s.is_left());
}

#[test]
fn leave_skip_at_the_predecessor_relinks_to_the_leaving_site_next_and_commits() {
    let mut s = linked_member();
    assert_eq!(deliver(&mut s, at(1), 4, Body::Skip { next: Some((n(5), 6)) }), vec![], "not from our next");
    assert_eq!(s.next, Some((n(3), 4)));
    assert_eq!(
        deliver(&mut s, at(2), 3, Body::Skip { next: Some((n(4), 6)) }),
        vec![send(4, commit(Some(2), &[2, 1], 6, (2, 1)))]
    );
    assert_eq!(s.next, Some((n(4), 6)));
    // A leaving tail: nothing to relink.
    assert_eq!(deliver(&mut s, at(3), 4, Body::Skip { next: None }), vec![]);
    assert_eq!(s.next, None);
}

#[test]
fn leave_new_root_points_last_at_the_root() {
    let mut s = site(4, 4, 2);
    assert_eq!(deliver(&mut s, T0, 3, Body::NewRoot { root: n(2) }), vec![]);
    assert_eq!(s.last, Last::Parent(n(2)));
    let mut s = site(4, 2, 2);
    assert_eq!(deliver(&mut s, T0, 3, Body::NewRoot { root: n(2) }), vec![]);
    assert_eq!(s.last, Last::Root);
}

#[test]
fn leave_acquire_while_leaving_is_refused() {
    let mut s = site(3, 2, 2);
    s.handle_shutdown(T0);
    assert_eq!(drain(&mut s), vec![]);
    assert!(s.is_left());
    assert_eq!(
        acquire(&mut s, at(1), 1),
        vec![reply(1, LockReply::Refused { reason: "daemon is shutting down".into() })]
    );
}

// ===== client misuse through the core =====================================

#[test]
fn client_second_acquire_on_the_same_client_is_refused() {
    let mut h = busy_holder(3, 1, 2);
    assert_eq!(
        acquire(&mut h, at(1), 1),
        vec![reply(1, LockReply::Refused { reason: "already holding the lock".into() })]
    );
    let mut s = waiting(3, 2, 2, 1);
    assert_eq!(acquire(&mut s, T0, 1), vec![]);
    assert_eq!(
        acquire(&mut s, at(1), 1),
        vec![reply(1, LockReply::Refused { reason: "already waiting for the lock".into() })]
    );
    assert_eq!(s.seq, 1, "no second request");
}

#[test]
fn client_release_without_holding_is_refused() {
    let mut h = busy_holder(3, 1, 2);
    assert_eq!(release(&mut h, at(1), 2), vec![reply(2, LockReply::Refused { reason: "not holding the lock".into() })]);
    assert_eq!(h.holder(), Some((c(1), fence(E, 1))));
}

#[test]
fn client_release_while_waiting_withdraws_the_client_not_the_request() {
    let mut s = waiting(3, 2, 2, 1);
    acquire(&mut s, T0, 1);
    assert_eq!(release(&mut s, at(1), 1), vec![reply(1, LockReply::Released)]);
    assert_eq!(s.request, Some(1), "requests cannot be withdrawn");
}

#[test]
fn client_gone_while_holding_moves_the_token_on() {
    let mut h = busy_holder(3, 1, 2);
    deliver(&mut h, at(1), 3, request(3, 1, 0));
    h.handle_client_gone(at(5), c(1));
    assert_eq!(
        drain(&mut h),
        vec![
            released_event(1, fence(E, 1), 5, ReleaseHow::Disconnected),
            send(3, token(E, 1, 1)),
            ev(NtEvent::HasToken(false)),
        ]
    );
    assert_eq!(h.token, None);
}

// ===== status =============================================================

fn details(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn status_reports_role_peers_and_details() {
    let mut h = holder(3, 1, 2);
    let st = h.status();
    assert_eq!((st.daemon.as_str(), st.node, st.incarnation), ("ntmutexd", n(1), INC));
    assert_eq!(st.role, "holder (idle)");
    assert_eq!(
        st.peers,
        vec![
            PeerStatus { id: n(2), addr: "127.0.0.1:20002".into(), up: true, incarnation: Incarnation(0) },
            PeerStatus { id: n(3), addr: "127.0.0.1:20003".into(), up: true, incarnation: Incarnation(0) },
        ]
    );
    assert_eq!(
        st.details,
        details(&[
            ("has_token", "true"),
            ("last", "root"),
            ("next", "none"),
            ("position", "0"),
            ("epoch", "1024"),
            ("fence", "0"),
            ("accesses", "0"),
            ("local_waiting", "0"),
        ])
    );
    acquire(&mut h, T0, 1);
    acquire(&mut h, T0, 2);
    let st = h.status();
    assert_eq!(st.role, "holder (granted)");
    assert_eq!(st.details[5], ("fence".to_string(), fence(E, 1).to_string()));
    assert_eq!(st.details[6..], details(&[("accesses", "1"), ("local_waiting", "1")]));

    let mut w = committed(3, 2, 2, 1, Some(1), &[1]);
    w.next = Some((n(3), 4));
    w.last = Last::Parent(n(3));
    w.suspected.insert(n(1));
    w.peer_inc.insert(n(3), Incarnation(7));
    let st = w.status();
    assert_eq!(st.role, "waiting");
    assert!(!st.peers[0].up);
    assert_eq!(st.peers[1].incarnation, Incarnation(7));
    assert_eq!(
        st.details,
        details(&[
            ("has_token", "false"),
            ("last", "3"),
            ("next", "3"),
            ("position", "1"),
            ("epoch", "1024"),
            ("fence", "0"),
            ("accesses", "0"),
            ("local_waiting", "0"),
        ])
    );

    let mut r = waiting(3, 3, 2, 1);
    r.start_m3(T0);
    assert_eq!(r.status().role, "recovering (m3)");
    let mut r = committed(3, 3, 2, 1, Some(2), &[2, 1]);
    r.start_recovery(T0);
    assert_eq!(r.status().role, "recovering (m1)");
    r.start_search(T0, Mech::M2, None);
    assert_eq!(r.status().role, "recovering (m2)");

    assert_eq!(fresh(3, 2, 2).status().role, "joining");
    let st = site(3, 2, 2).status();
    assert_eq!(st.role, "idle");
    assert_eq!(st.details[1], ("last".to_string(), "1".to_string()));
    let mut u = site(3, 2, 2);
    u.last = Last::Unknown;
    assert_eq!(u.status().details[1], ("last".to_string(), "unknown".to_string()));
}

// ===== the seed's worked example (spec invariant 5, figure 2) =============

// Letters of the seed's figure 2 → sites of a 10-site cluster (k = 2). X and
// Y are the two faulty sites: X was H's next; Y is where D sent its request.
const SA: u32 = 1;
const SB: u32 = 2;
const SC: u32 = 3;
const SD: u32 = 4;
const SE: u32 = 5;
const SF: u32 = 6;
const SG: u32 = 7;
const SH: u32 = 8;
const SX: u32 = 9;
const SY: u32 = 10;

/// Figure 2: M3 with an election between A and D, last-tree rebuild (rules
/// I–III), H relinked to A by a Connection, D's request served behind C.
///
/// Where the core differs from the seed's narrative, as the spec allows:
/// - M3 takes a fresh seq (A: 1 → 2; D: 1 → 2), and D's request to the
///   winner another one (3), so late Commits of abandoned chains get Unlink.
/// - D's request to A is a `DirectRequest`, which the linking rule forwards
///   along `next`, not `last` ("direct requests ignore last"). After rule
///   III the path is the same, A → B → C (A.last = B = A.next, B.last = C =
///   B.next), but A and B keep their `last` (no path reversal for a direct
///   request): only C, which links D, sets `last = D`. The seed has A, B and
///   C all point `last` at D. Both keep last consistent with next.
/// - H learns that its next X is dead from the Connection (`failed` = the
///   sites A's search window found silent); the linking rule links only
///   behind a suspected (or absent) next.
/// - D and E also apply the rules for the best candidate: D, waiting
///   without a position, sets last = its next E (rule III); E, a tail, is
///   a root ("E → its next", which is None).
#[test]
fn seed_figure_2_m3_election_rebuilds_the_last_tree_and_reconnects_both_portions() {
    let k = 2;
    // ----- figure 2.a --------------------------------------------------
    // Queue portion 1: G (token, in its critical section) → H → X (faulty).
    let mut g = busy_holder(10, SG, k);
    g.next = Some((n(SH), 1));
    g.last = Last::Parent(n(SY)); // useless
    let mut h = committed(10, SH, k, 1, Some(1), &[SG]);
    h.next = Some((n(SX), 1));
    h.last = Last::Parent(n(SX)); // useless
                                  // Queue portion 2, no positions: (X) → A → B → C. X crashed before
                                  // committing A; B and C hold provisional Commits from A and B.
    let mut a = waiting(10, SA, k, 1);
    a.next = Some((n(SB), 1));
    a.last = Last::Parent(n(SB));
    let mut b = committed(10, SB, k, 1, None, &[SA]);
    b.next = Some((n(SC), 1));
    b.last = Last::Parent(n(SC));
    let mut cc = committed(10, SC, k, 1, None, &[SB]);
    cc.last = Last::Root;
    // Third portion: D requested from Y (faulty) and queued E behind it.
    let mut d = waiting(10, SD, k, 1);
    d.accesses = 2; // A (0 accesses) wins the election: fewer accesses.
    d.next = Some((n(SE), 1));
    d.last = Last::Parent(n(SE));
    let mut e = committed(10, SE, k, 1, None, &[SD]);
    e.last = Last::Root;
    // F is not waiting.
    let mut f = site(10, SF, k);
    f.last = Last::Parent(n(SY)); // useless

    // ----- A and D detect concurrently (no Commit after (N + 1) t_msg) -
    let all_but = |me: u32| (1..=10).filter(move |i| *i != me);
    let out = timeout(&mut a, at(110));
    let mut expected = vec![ev(NtEvent::RecoveryStarted { mech: Mech::M3 })];
    expected.extend(all_but(SA).map(|i| send(i, Body::SearchQueue { accesses: 0 })));
    assert_eq!(out, expected);
    let out = timeout(&mut d, at(110));
    let mut expected = vec![ev(NtEvent::RecoveryStarted { mech: Mech::M3 })];
    expected.extend(all_but(SD).map(|i| send(i, Body::SearchQueue { accesses: 2 })));
    assert_eq!(out, expected);
    assert_eq!((a.request, d.request), (Some(2), Some(2)));

    // ----- D's SEARCH QUEUE arrives first everywhere ------------------
    let sq_d = Body::SearchQueue { accesses: 2 };
    // A is a better candidate than D: it answers and stays a candidate.
    assert_eq!(deliver(&mut a, at(111), SD, sq_d.clone()), vec![send(SD, search_ack(None, true, false, Some(0)))]);
    assert!(matches!(a.recovery, Recovery::Search { mech: Mech::M3, .. }));
    let answers_to_d = [
        (&mut b, search_ack(None, true, false, None)),
        (&mut cc, search_ack(None, false, false, None)),
        (&mut e, search_ack(None, false, false, None)),
        (&mut f, search_ack(None, false, false, None)),
        (&mut g, search_ack(Some(0), true, true, None)),
        (&mut h, search_ack(Some(1), true, false, None)),
    ];
    for (site, answer) in answers_to_d {
        assert_eq!(deliver(site, at(111), SD, sq_d.clone()), vec![send(SD, answer)], "n{}", site.me.0);
    }
    // Rules I–III for D, the best candidate seen so far.
    assert_eq!((f.last, g.last, h.last), (Last::Parent(n(SD)), Last::Parent(n(SD)), Last::Parent(n(SD))));

    // ----- then A's ---------------------------------------------------
    let sq_a = Body::SearchQueue { accesses: 0 };
    // D loses (A has fewer accesses): one request to A, D keeps next = E.
    assert_eq!(
        deliver(&mut d, at(112), SA, sq_a.clone()),
        vec![send(SA, search_ack(None, true, false, Some(2))), send(SA, direct(SD, 3, 0))]
    );
    assert_eq!(d.recovery, Recovery::Linking { mech: Mech::M3, started: at(110) });
    assert_eq!(d.next, Some((n(SE), 1)));
    let answers_to_a = [
        (&mut b, search_ack(None, true, false, None)),
        (&mut cc, search_ack(None, false, false, None)),
        (&mut e, search_ack(None, false, false, None)),
        (&mut f, search_ack(None, false, false, None)),
        (&mut g, search_ack(Some(0), true, true, None)),
        (&mut h, search_ack(Some(1), true, false, None)),
    ];
    for (site, answer) in answers_to_a {
        assert_eq!(deliver(site, at(112), SA, sq_a.clone()), vec![send(SA, answer)], "n{}", site.me.0);
    }

    // ----- figure 2.b: last rebuilt for A, a better candidate ----------
    // II: G and H have a position; I: F does not wait.
    assert_eq!(g.last, Last::Parent(n(SA)));
    assert_eq!(h.last, Last::Parent(n(SA)));
    assert_eq!(f.last, Last::Parent(n(SA)));
    // III: waiting without a position, last = next (a tail stays a root).
    assert_eq!(a.last, Last::Parent(n(SB)));
    assert_eq!(b.last, Last::Parent(n(SC)));
    assert_eq!(e.last, Last::Root);
    assert_eq!(d.last, Last::Parent(n(SE)));
    assert_eq!(cc.last, Last::Root, "C, the root of the last tree");

    // ----- A collects the answers; D's request reaches A --------------
    for (from, answer) in [
        (SB, search_ack(None, true, false, None)),
        (SC, search_ack(None, false, false, None)),
        (SD, search_ack(None, true, false, Some(2))),
        (SE, search_ack(None, false, false, None)),
        (SF, search_ack(None, false, false, None)),
        (SG, search_ack(Some(0), true, true, None)),
        (SH, search_ack(Some(1), true, false, None)),
    ] {
        assert_eq!(deliver(&mut a, at(113), from, answer), vec![], "answer of n{from}");
    }
    // D's request travels A → B → C, the tail of A's portion.
    assert_eq!(deliver(&mut a, at(114), SD, direct(SD, 3, 0)), vec![send(SB, direct(SD, 3, 1))]);
    assert_eq!(deliver(&mut b, at(115), SA, direct(SD, 3, 1)), vec![send(SC, direct(SD, 3, 2))]);
    // C sets next = D and sends D a Commit (provisional: C has no position yet).
    assert_eq!(deliver(&mut cc, at(116), SB, direct(SD, 3, 2)), vec![send(SD, commit(None, &[SC, SB], 3, (SC, 1)))]);
    assert_eq!(cc.next, Some((n(SD), 3)));

    // ----- A's window closes: X and Y never answered -------------------
    // A is still a candidate: elected. The greatest position is H's, and H
    // has a next (X, faulty): case (ii), a Connection to H.
    assert_eq!(
        timeout(&mut a, at(130)),
        vec![
            ev(NtEvent::Suspected { node: n(SX) }),
            ev(NtEvent::Suspected { node: n(SY) }),
            send(SH, connection(SA, 2, 0, &[SX, SY])),
        ]
    );
    assert_eq!(a.recovery, Recovery::Linking { mech: Mech::M3, started: at(110) });
    // H sets next = A and commits it.
    assert_eq!(
        deliver(&mut h, at(131), SA, connection(SA, 2, 0, &[SX, SY])),
        vec![ev(NtEvent::Suspected { node: n(SX) }), send(SA, commit(Some(2), &[SH, SG], 2, (SH, 1)))]
    );

    // ----- figure 2.c (D and E have no Commit yet) ---------------------
    let next_of = |s: &NtNode| s.next.map(|(x, _)| x.0);
    assert_eq!(next_of(&g), Some(SH));
    assert_eq!(next_of(&h), Some(SA));
    assert_eq!(next_of(&a), Some(SB));
    assert_eq!(next_of(&b), Some(SC));
    assert_eq!(next_of(&cc), Some(SD));
    assert_eq!(next_of(&d), Some(SE));
    assert_eq!(next_of(&e), None);
    assert_eq!(
        [&g, &h, &f, &a, &b, &cc, &d, &e].map(|s| s.last),
        [
            Last::Parent(n(SA)),
            Last::Parent(n(SA)),
            Last::Parent(n(SA)),
            Last::Parent(n(SB)),
            Last::Parent(n(SC)),
            Last::Parent(n(SD)),
            Last::Parent(n(SE)),
            Last::Root,
        ]
    );
    assert!(g.has_token() && g.holder().is_some());

    // ----- beyond the figure: positions cascade down one queue ---------
    assert_eq!(
        deliver(&mut a, at(132), SH, commit(Some(2), &[SH, SG], 2, (SH, 1))),
        vec![ev(NtEvent::Recovered { mech: Mech::M3, took: ms(22) }), send(SB, commit(Some(3), &[SA, SH], 1, (SH, 1)))]
    );
    assert_eq!(
        deliver(&mut b, at(133), SA, commit(Some(3), &[SA, SH], 1, (SH, 1))),
        vec![send(SC, commit(Some(4), &[SB, SA], 1, (SH, 1)))]
    );
    assert_eq!(
        deliver(&mut cc, at(134), SB, commit(Some(4), &[SB, SA], 1, (SH, 1))),
        vec![send(SD, commit(Some(5), &[SC, SB], 3, (SH, 1)))]
    );
    // D gets C's two Commits in order (FIFO): the provisional one ends its
    // recovery, the positioned one gives it position 5.
    assert_eq!(
        deliver(&mut d, at(135), SC, commit(None, &[SC, SB], 3, (SC, 1))),
        vec![ev(NtEvent::Recovered { mech: Mech::M3, took: ms(25) }), send(SE, commit(None, &[SD, SC], 1, (SC, 1)))]
    );
    assert_eq!(
        deliver(&mut d, at(136), SC, commit(Some(5), &[SC, SB], 3, (SH, 1))),
        vec![send(SE, commit(Some(6), &[SD, SC], 1, (SH, 1)))]
    );
    assert_eq!(deliver(&mut e, at(137), SD, commit(None, &[SD, SC], 1, (SC, 1))), vec![]);
    assert_eq!(deliver(&mut e, at(138), SD, commit(Some(6), &[SD, SC], 1, (SH, 1))), vec![]);
    assert_eq!(
        [&g, &h, &a, &b, &cc, &d, &e].map(|s| s.position),
        [Some(0), Some(1), Some(2), Some(3), Some(4), Some(5), Some(6)]
    );
    assert_eq!(
        [&h, &a, &b, &cc, &d, &e].map(|s| s.monitored.map(|(m, _)| m.0)),
        [Some(SG), Some(SH), Some(SA), Some(SB), Some(SC), Some(SD)]
    );
    assert!([&a, &d].iter().all(|s| s.recovery == Recovery::Idle));
}
