//! One test per handler rule of the core, asserting the exact outputs.
//!
//! Each test builds a site in a chosen state (fields set directly: this
//! module is inside `node.rs`), feeds it one input — a message, a timeout, a
//! client request, a client leaving, a shutdown — and asserts the complete
//! list of outputs, in order, and the state after. Tests are named after the
//! rule of the spec's ntmutexd.md (and the seed's section 5) they check.
//!
//! Settings everywhere: t_msg = 10 ms, heartbeat = 20 ms, suspect_after =
//! 60 ms, k = 2 unless a test says otherwise (k = 3 where it matters that
//! more predecessors travel). Every site is in its first life
//! (`Incarnation(1)`) and knows epoch `E` (round 1, slot 0: what n1 creates
//! when it bootstraps the cluster). Nothing is filtered out of the outputs:
//! gauge events (`HasToken`, `Epoch`) are asserted like the rest.

use std::collections::BTreeMap;
use std::time::Duration;

use ::durable::promise::Promises;
use ftcore::Output;
use lockservice::{LockEvent, LocksConfig, ReleaseHow};
use membership::Membership;

use super::*;
use crate::msg::Nack;

/// The epoch of the first token (round 1 in n1's slot 0).
const E: u64 = 1 << promise::SLOT_BITS;
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
    ftcore::testing::at(T0, m)
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
        lease: ms(45),
        drift_ppm: 0,
        locks: LocksConfig { max_queue: 8, max_hold: None, try_window: Duration::ZERO },
        liveness_every: None,
        rules: Default::default(),
    }
}

/// The fence of the `counter`-th grant of a token of `epoch`.
fn fence(epoch: u64, counter: u64) -> u128 {
    lockservice::fence(epoch, counter)
}

// ----- sites in a chosen state -------------------------------------------

/// A freshly constructed site (still joining) on a new disk (nothing
/// stored), outputs not drained.
fn fresh(size: u32, me: u32, k: usize) -> NtNode {
    NtNode::start(Context::new(n(me), INC, Membership::of_size(size), T0, cfg(k))).expect("valid config")
}

/// A site started at `T0` that loaded `stored` (a restart), outputs not drained.
fn restarted(size: u32, me: u32, k: usize, stored: Promises) -> NtNode {
    let ctx = Context {
        stored: Some(NtDurable { promises: Some(stored) }),
        ..Context::new(n(me), INC, Membership::of_size(size), T0, cfg(k))
    };
    NtNode::start(ctx).expect("valid config")
}

/// What a site stores once it has seen epoch `e` in use.
fn stored_in_use(e: u64) -> Promises {
    let mut p = PromiseNode::new(
        promise::Config::new(vec![n(1)], n(1), ms(50)),
        Some(Promises::recovered_with(0)),
        Instant::ZERO,
    )
    .unwrap();
    p.on_in_use(e, Instant::ZERO).unwrap();
    p.take_dirty().unwrap()
}

/// Site `me` of `size` sites, past its start-up and its restart window,
/// idle (not in the queue), knowing epoch `E` in use (stored), its `last`
/// pointing at n1 (n1 itself is a root).
fn site(size: u32, me: u32, k: usize) -> NtNode {
    let ctx = Context {
        stored: Some(NtDurable { promises: Some(stored_in_use(E)) }),
        // Started long enough ago that its restart window is over.
        ..Context::new(n(me), INC, Membership::of_size(size), Instant::ZERO, cfg(k))
    };
    let mut s = NtNode::start(ctx).expect("valid config");
    s.out.drain();
    s.timers.clear();
    s.join.phase = Phase::Running;
    s.last = if me == 1 { Last::Root } else { Last::Parent(n(1)) };
    s.regen.proposals_from = Instant::ZERO;
    s
}

/// The token holder: position 0, root of the last tree, no local client.
fn holder(size: u32, me: u32, k: usize) -> NtNode {
    let mut s = site(size, me, k);
    s.token = Some(Token { epoch: E, counter: 0 });
    s.position = Some(0);
    s.last = Last::Root;
    give_lease(&mut s);
    s
}

/// A live lease on the token's epoch: a renewal sent at `T0` acked by a
/// majority (it ends at [`lease_end`]); no local client, so no renewal is
/// due until one comes.
fn give_lease(s: &mut NtNode) {
    let epoch = s.token.map_or(s.max_epoch(), |t| t.epoch);
    let r = s.lease.poll(T0, true, epoch, true, &mut s.rng).expect("a first renewal");
    for i in 1..=s.members.len() / 2 + 1 {
        s.lease.on_ack(n(i as u32), r.round);
    }
    assert_eq!(s.lease.live_until(T0, epoch), Some(lease_end()));
    let _ = s.lease.poll(T0, false, epoch, true, &mut s.rng);
}

/// The renewal `round` of site `me` of `size` sites, sent to every peer.
fn renewals(size: u32, me: u32, round: u64, epoch: u64, holding: bool) -> Vec<OutputOf<NtNode>> {
    (1..=size).filter(|i| *i != me).map(|i| send_e(i, epoch, Body::LeaseRenew { round, epoch, holding })).collect()
}

/// Peers `from` ack renewal `round` of `s` at `now`; returns the outputs.
fn lease_acks(s: &mut NtNode, now: Instant, round: u64, from: &[u32]) -> Vec<OutputOf<NtNode>> {
    let epoch = s.max_epoch();
    from.iter().flat_map(|f| deliver_msg(s, now, *f, INC, Msg { epoch, body: Body::LeaseAck { round } })).collect()
}

/// The end of the lease [`give_lease`] gives: `T0 + lease` (ρ = 0).
fn lease_end() -> Instant {
    T0 + cfg(1).lease
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

/// n2 of 5 at position 1 behind n1, n3 queued behind it with request 4.
fn linked_member() -> NtNode {
    let mut s = committed(5, 2, 2, 1, Some(1), &[1]);
    s.next = Some((n(3), 4));
    s.last = Last::Parent(n(3));
    s
}

// ----- inputs and outputs -------------------------------------------------

use ftcore::testing::drain;

/// A message from `from` (life `INC`) carrying epoch `E`; returns the outputs.
fn deliver(node: &mut NtNode, now: Instant, from: u32, body: Body) -> Vec<OutputOf<NtNode>> {
    deliver_msg(node, now, from, INC, Msg { epoch: E, body })
}

fn deliver_msg(node: &mut NtNode, now: Instant, from: u32, inc: Incarnation, msg: Msg) -> Vec<OutputOf<NtNode>> {
    ftcore::testing::deliver(node, now, n(from), inc, msg)
}

use ftcore::testing::timeout;

fn acquire(node: &mut NtNode, now: Instant, client: u64) -> Vec<OutputOf<NtNode>> {
    ftcore::testing::request(node, now, c(client), LockRequest::Acquire { timeout_ms: WAIT_MS })
}

fn release(node: &mut NtNode, now: Instant, client: u64) -> Vec<OutputOf<NtNode>> {
    ftcore::testing::request(node, now, c(client), LockRequest::Release)
}

/// `Send` of `body` to `to` stamped with epoch `E`.
fn send(to: u32, body: Body) -> OutputOf<NtNode> {
    send_e(to, E, body)
}

fn send_e(to: u32, epoch: u64, body: Body) -> OutputOf<NtNode> {
    Output::Send { to: n(to), msg: Msg { epoch, body } }
}

fn ev(e: NtEvent) -> OutputOf<NtNode> {
    Output::Event(e)
}

fn reply(client: u64, r: LockReply) -> OutputOf<NtNode> {
    Output::Reply { client: c(client), reply: r }
}

fn granted_event(client: u64, fence: u128, waited: u64) -> OutputOf<NtNode> {
    ev(NtEvent::Lock(LockEvent::Granted { client: c(client), fence, waited: ms(waited), lease_until: lease_end() }))
}

fn released_event(client: u64, fence: u128, held: u64, how: ReleaseHow) -> OutputOf<NtNode> {
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

fn token(epoch: u64, counter: u64, pos: u64) -> Body {
    Body::Token { epoch, counter, pos }
}

fn search_ack(position: Option<u64>, has_next: bool, has_token: bool, candidate: Option<u64>) -> Body {
    Body::SearchAck { position, has_next, has_token, candidate }
}

/// The state write of `s` as it is now (asserted where it must come: before
/// the messages that depend on it).
fn persisted(s: &NtNode) -> OutputOf<NtNode> {
    Output::Persist(NtDurable { promises: Some(s.stored().clone()) })
}

/// `s` has seen epoch `e` in use (stored).
fn see_epoch(s: &mut NtNode, e: u64) {
    s.promise.on_in_use(e, T0).expect("not below the threshold");
    let _ = s.promise.take_dirty();
}

fn nack(epoch: u64, r: ::durable::promise::Refusal) -> Body {
    Body::RegenerateNack { epoch, why: Nack::Refused(r) }
}

fn ids(v: &[u32]) -> BTreeSet<NodeId> {
    v.iter().map(|i| n(*i)).collect()
}

/// An epoch proposal: `round` in the slot of site `id` (slot = id - 1 with
/// `Membership::of_size`).
fn proposal(round: u64, id: u32) -> u64 {
    promise::encode(round, (id - 1) as u16).expect("a sane epoch")
}

mod detect;
mod join;
mod lease;
mod leave;
mod queue;
mod recovery;
mod regen;
mod status;
