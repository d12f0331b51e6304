//! One test per handler rule of the core, asserting the exact outputs.
//!
//! Three processes n1 → n2 → n3 → n1; the process under test is n2 (its
//! successor n3, its predecessor n1) in its first life, recovered, with
//! tpc 5. Settings: ring timeout 10 ms, r = 2, max_hold 100 ms, idle hold
//! 2 ms, δ 5 ms, bypass after 120 ms, W = 400 ms, lease 30 ms (renewed
//! every 10 ms), ρ = 0.

use std::time::Duration;

use ::durable::promise::{encode, Promises, Refusal, Values};
use ftcore::testing::{deliver, drain, request, timeout};
use ftcore::{ClientId, Context, Incarnation, NodeId, Output, Protocol};
use lockservice::{fence, LockEvent, LockReply, LockRequest, ReleaseHow};
use membership::Membership;
use timer::Instant;

use super::{ClaimOutcome, TwConfig, TwDurable, TwError, TwEvent, TwNode, MAX_TPC_RESERVE};
use crate::msg::{Claim, Msg};

const INC: Incarnation = Incarnation(1);
const T0: Instant = Instant::from_millis(1_000);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const N3: NodeId = NodeId(3);
/// An epoch in use (round 1, slot 0).
const E: u64 = 1 << ::durable::promise::SLOT_BITS;

type Out = Output<Msg, LockReply, TwEvent, TwDurable>;

fn at(ms: u64) -> Instant {
    ftcore::testing::at(T0, ms)
}

fn cfg() -> TwConfig {
    TwConfig {
        ring_timeout: Duration::from_millis(10),
        max_retransmits: 2,
        max_hold: Duration::from_millis(100),
        token_min_hold: Duration::from_millis(2),
        max_delay: Duration::from_millis(5),
        bypass_after: Duration::from_millis(120),
        token_lost_after: Duration::from_millis(400),
        drift_ppm: 0,
        lease: Duration::from_millis(30),
        suspect_after: Duration::from_millis(50),
        allow_minority: false,
        max_queue: 8,
        tpc_reserve: 1,
        rules: ftcore::rules::Rules::ALL_ON,
        first_tpc: Default::default(),
    }
}

/// n2, joined (n1 answered its Join), nothing held.
fn node() -> TwNode {
    let mut ctx = Context::new(N2, INC, Membership::of_size(3), T0, cfg());
    ctx.stored = Some(TwDurable { promises: Some(Promises::recovered_with(0)), tpc: 5, tpc_from: None });
    let mut n = TwNode::start(ctx).unwrap();
    drain(&mut n);
    deliver(&mut n, T0, N1, INC, Msg::JoinAck { nonce: 1, values: None });
    n
}

fn stored(n: &TwNode) -> Out {
    Output::Persist(TwDurable { promises: Some(n.promise.stored().clone()), tpc: n.tpc, tpc_from: None })
}

fn send(to: NodeId, msg: Msg) -> Out {
    Output::Send { to, msg }
}

fn ev(e: TwEvent) -> Out {
    Output::Event(e)
}

/// A token that has gone a whole lap (N = 3) without serving anyone: an
/// idle ring's token, which a process with nobody waiting holds for
/// `token_min_hold`.
const IDLE: u32 = 3;

fn token(epoch: u64, m: u64) -> Msg {
    Msg::Token { epoch, m, bypassed: vec![], quiet: IDLE }
}

fn renew(round: u64, epoch: u64, tpc: u64, holding: bool) -> Msg {
    Msg::LeaseRenew { round, epoch, tpc, holding }
}

fn reply(client: ClientId, reply: LockReply) -> Out {
    Output::Reply { client, reply }
}

/// The grant of the lock to `client`: its reply and its event.
fn granted(client: ClientId, fence: u128, waited: Duration, lease_until: Instant) -> Vec<Out> {
    vec![
        reply(client, LockReply::Granted { fence, lease_until_us: lease_until.as_micros() }),
        ev(TwEvent::Lock(LockEvent::Granted { client, fence, waited, lease_until })),
    ]
}

/// The round of the renewal sent in `out`, if any.
fn renewal_round(out: &[Out]) -> Option<u64> {
    out.iter().find_map(|o| match o {
        Output::Send { msg: Msg::LeaseRenew { round, .. }, .. } => Some(*round),
        _ => None,
    })
}

/// n2 holding a token of epoch E accepted as Token(E, 5) at `T0`.
fn holding() -> TwNode {
    let mut n = node();
    deliver(&mut n, T0, N1, INC, token(E, 5));
    n
}

#[test]
fn a_new_token_sets_tpc_to_m_plus_1_stores_it_and_acks_forward() {
    let mut n = node();
    let out = deliver(&mut n, T0, N1, INC, token(E, 5));
    assert_eq!(n.tpc, 6);
    assert_eq!(
        out,
        vec![
            stored(&n),
            send(N3, Msg::Ack { epoch: E, ttl: 2, m: 6 }),
            ev(TwEvent::AckSent { forwarded: false }),
            ev(TwEvent::HasToken(true)),
            ev(TwEvent::Accepted { epoch: E, tpc: 6 }),
        ]
    );
    assert!(n.has_token());
}

#[test]
fn a_stale_token_is_dropped_and_a_retransmitted_hand_off_is_acked_again() {
    let mut n = holding();
    // The retransmission of the hand-off just accepted: re-ACK with tpc.
    let out = deliver(&mut n, at(1), N1, INC, token(E, 5));
    assert_eq!(
        out,
        vec![
            send(N3, Msg::Ack { epoch: E, ttl: 2, m: 6 }),
            ev(TwEvent::AckSent { forwarded: false }),
            // And straight back to its sender, whose confirmation would
            // otherwise need every process on the way round to be alive.
            send(N1, Msg::Ack { epoch: E, ttl: 1, m: 6 }),
            ev(TwEvent::ReAcked),
            ev(TwEvent::StaleDropped),
        ]
    );
    // An older copy: dropped, no ACK.
    let out = deliver(&mut n, at(1), N1, INC, token(E, 3));
    assert_eq!(out, vec![ev(TwEvent::StaleDropped)]);
    assert_eq!(n.tpc, 6);
}

#[test]
fn a_token_below_the_stored_epoch_is_answered_stale() {
    let mut n = holding();
    let out = deliver(&mut n, at(1), N1, INC, token(E - 1, 50));
    assert_eq!(out, vec![send(N1, Msg::Stale { epoch: E }), ev(TwEvent::StaleAnswered)]);
    assert_eq!((n.tpc, n.epoch()), (6, E));
}

#[test]
fn acks_are_forwarded_whatever_their_m_and_never_change_tpc() {
    let mut n = node();
    let out = deliver(&mut n, T0, N1, INC, Msg::Ack { epoch: E, ttl: 2, m: 100 });
    assert_eq!(out, vec![send(N3, Msg::Ack { epoch: E, ttl: 1, m: 100 }), ev(TwEvent::AckSent { forwarded: true })]);
    // A stale-looking ACK is forwarded too; the last hop keeps it.
    let out = deliver(&mut n, T0, N1, INC, Msg::Ack { epoch: E, ttl: 2, m: 1 });
    assert_eq!(out, vec![send(N3, Msg::Ack { epoch: E, ttl: 1, m: 1 }), ev(TwEvent::AckSent { forwarded: true })]);
    assert_eq!(deliver(&mut n, T0, N1, INC, Msg::Ack { epoch: E, ttl: 1, m: 100 }), vec![]);
    assert_eq!(n.tpc, 5);
    // Token(E, 6) is still new after ACKs that carried 100.
    deliver(&mut n, at(1), N1, INC, token(E, 6));
    assert!(n.has_token());
}

#[test]
fn an_idle_holder_passes_after_the_min_hold_and_a_confirming_ack_ends_the_wait() {
    let mut n = holding();
    assert_eq!(n.poll_timeout(), Some(at(2)));
    let out = timeout(&mut n, at(2));
    assert_eq!(
        out,
        vec![
            ev(TwEvent::HasToken(false)),
            send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: IDLE + 1 }),
            ev(TwEvent::Passed { to: N3 }),
        ]
    );
    assert!(n.is_awaiting());
    // An ACK of an older hand-off confirms nothing.
    assert_eq!(deliver(&mut n, at(3), N1, INC, Msg::Ack { epoch: E, ttl: 1, m: 6 }), vec![]);
    assert!(n.is_awaiting());
    let out = deliver(&mut n, at(5), N1, INC, Msg::Ack { epoch: E, ttl: 1, m: 7 });
    assert_eq!(out, vec![ev(TwEvent::Confirmed { took: Duration::from_millis(3) })]);
    assert!(!n.is_awaiting());
}

#[test]
fn an_unconfirmed_hand_off_is_retransmitted_r_times_then_bypassed_by_a_claim() {
    let mut n = holding();
    timeout(&mut n, at(2));
    let tok = Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: IDLE + 1 };
    assert_eq!(timeout(&mut n, at(12)), vec![send(N3, tok.clone()), ev(TwEvent::Retransmitted)]);
    assert_eq!(timeout(&mut n, at(22)), vec![send(N3, tok), ev(TwEvent::Retransmitted)]);
    // Then nothing until bypass_after since the last transmission.
    assert_eq!(n.poll_timeout(), Some(at(142)));
    assert_eq!(timeout(&mut n, at(141)), vec![]);
    // The restart window (W) is over by then only if T0 + 400 ms has
    // passed; here it has not: the bypass waits for it.
    let out = timeout(&mut n, at(142));
    assert_eq!(out, vec![ev(TwEvent::Bypassed { peer: N3 })]);
    assert!(!n.is_awaiting() && !n.has_token());
}

#[test]
fn a_bypass_after_the_restart_window_claims_skipping_the_silent_successor() {
    let mut n = node();
    let t = 500; // past the restart window (W = 400 ms)
    deliver(&mut n, at(t), N1, INC, token(E, 5));
    timeout(&mut n, at(t + 2));
    timeout(&mut n, at(t + 12));
    timeout(&mut n, at(t + 22));
    let out = timeout(&mut n, at(t + 142));
    let epoch = n.promise.proposal().map(|(v, _)| v).expect("a live Claim");
    assert!(epoch > E);
    assert_eq!(
        out,
        vec![
            stored(&n),
            ev(TwEvent::Bypassed { peer: N3 }),
            ev(TwEvent::ClaimStarted { epoch }),
            send(
                N1,
                Msg::Claim(Claim {
                    epoch,
                    claimant: N2,
                    seen: (E, 5),
                    max_tpc: 6,
                    adopters: vec![N2],
                    skipped: vec![N3]
                })
            ),
        ]
    );
}

#[test]
fn a_claim_is_adopted_stored_before_its_ack_and_forwarded_once() {
    let mut n = node();
    let claim = Claim { epoch: 2 * E, claimant: N1, seen: (0, 0), max_tpc: 9, adopters: vec![N1], skipped: vec![] };
    let out = deliver(&mut n, at(500), N1, INC, Msg::Claim(claim.clone()));
    let fwd = Claim { adopters: vec![N1, N2], ..claim.clone() };
    assert_eq!(
        out,
        vec![stored(&n), send(N1, Msg::ClaimAck { epoch: 2 * E, claimant: N1 }), send(N3, Msg::Claim(fwd))]
    );
    assert_eq!(n.promise.threshold(), 2 * E);
    // A repeat (its ack was lost): acked again, not forwarded twice.
    let out = deliver(&mut n, at(501), N1, INC, Msg::Claim(claim));
    assert_eq!(out, vec![send(N1, Msg::ClaimAck { epoch: 2 * E, claimant: N1 })]);
    // Tokens of older epochs are stale now.
    let out = deliver(&mut n, at(502), N1, INC, token(E, 20));
    assert_eq!(out, vec![send(N1, Msg::Stale { epoch: 2 * E }), ev(TwEvent::StaleAnswered)]);
}

#[test]
fn a_process_in_its_restart_window_passes_a_claim_on_without_adopting_it() {
    // The restart window (W = 400 ms from T0) is still open: a refusal
    // would abandon a Claim the others may carry to a majority.
    let mut n = node();
    let claim = Claim { epoch: 2 * E, claimant: N1, seen: (0, 0), max_tpc: 3, adopters: vec![N1], skipped: vec![] };
    let out = deliver(&mut n, at(100), N1, INC, Msg::Claim(claim.clone()));
    let fwd = Claim { max_tpc: 5, ..claim.clone() };
    assert_eq!(out, vec![send(N1, Msg::ClaimAck { epoch: 2 * E, claimant: N1 }), send(N3, Msg::Claim(fwd))]);
    assert_eq!(n.promise.threshold(), 0, "nothing promised, nothing stored");
    // A repeat: acked again, not forwarded twice.
    let out = deliver(&mut n, at(101), N1, INC, Msg::Claim(claim));
    assert_eq!(out, vec![send(N1, Msg::ClaimAck { epoch: 2 * E, claimant: N1 })]);
}

#[test]
fn an_older_claimant_is_refused_only_until_w_after_the_token_itself() {
    let mut n = holding();
    timeout(&mut n, at(2));
    // The hand-off is confirmed at +3 ms: the token was last here then.
    deliver(&mut n, at(3), N1, INC, Msg::Ack { epoch: E, ttl: 1, m: 7 });
    let older = |epoch, claimant| Claim {
        epoch,
        claimant,
        seen: (0, 0),
        max_tpc: 0,
        adopters: vec![claimant],
        skipped: vec![],
    };
    let busy = |remaining| Refusal::Busy { remaining: Duration::from_millis(remaining) };
    let out = deliver(&mut n, at(300), N3, INC, Msg::Claim(older(2 * E, N3)));
    assert_eq!(
        out,
        vec![
            send(N3, Msg::ClaimAck { epoch: 2 * E, claimant: N3 }),
            send(N3, Msg::ClaimRefused { epoch: 2 * E, refusal: busy(103) }),
        ]
    );
    // Refusing a Claim is no sight of the token: the next is refused only
    // for what is left of W.
    let out = deliver(&mut n, at(350), N1, INC, Msg::Claim(older(3 * E, N1)));
    assert_eq!(out[1], send(N1, Msg::ClaimRefused { epoch: 3 * E, refusal: busy(53) }));
    // W after the token: adopted (the restart window is over too).
    let out = deliver(&mut n, at(403), N3, INC, Msg::Claim(older(4 * E, N3)));
    assert_eq!(n.promise.threshold(), 4 * E);
    assert!(out.contains(&send(N3, Msg::ClaimAck { epoch: 4 * E, claimant: N3 })), "{out:?}");
}

#[test]
fn a_holder_refuses_a_claim_busy_and_a_tie_is_refused() {
    let mut n = holding();
    let claim = Claim { epoch: 2 * E, claimant: N1, seen: (E, 5), max_tpc: 9, adopters: vec![N1], skipped: vec![] };
    // While the token is here (1 ms after it arrived, still in its idle hold).
    let out = deliver(&mut n, at(1), N1, INC, Msg::Claim(claim));
    assert_eq!(
        out,
        vec![
            send(N1, Msg::ClaimAck { epoch: 2 * E, claimant: N1 }),
            send(N1, Msg::ClaimRefused { epoch: 2 * E, refusal: Refusal::Busy { remaining: cfg().max_hold } }),
        ]
    );
    assert_eq!(n.promise.threshold(), E, "nothing adopted");
    // A claim equal to the threshold (a tie) is refused, not broken by id.
    let mut m = node();
    let c1 = Claim { epoch: 2 * E, claimant: N1, seen: (0, 0), max_tpc: 0, adopters: vec![N1], skipped: vec![] };
    deliver(&mut m, at(500), N1, INC, Msg::Claim(c1));
    let c3 = Claim { epoch: 2 * E, claimant: N3, seen: (0, 0), max_tpc: 0, adopters: vec![N3], skipped: vec![] };
    let out = deliver(&mut m, at(1_000), N3, INC, Msg::Claim(c3));
    assert_eq!(
        out,
        vec![
            send(N3, Msg::ClaimAck { epoch: 2 * E, claimant: N3 }),
            send(N3, Msg::ClaimRefused { epoch: 2 * E, refusal: Refusal::Promised { value: 2 * E } }),
        ]
    );
}

#[test]
fn a_claim_back_with_a_majority_makes_the_token_without_one_nothing() {
    // n2 claims (no token seen for W), n3 adopts, the Claim comes back.
    let mut n = node();
    let t = 10_000;
    let out = timeout(&mut n, at(t));
    let epoch = n.promise.proposal().map(|(v, _)| v).expect("a live Claim");
    assert!(out.contains(&ev(TwEvent::ClaimStarted { epoch })), "{out:?}");
    let back = Claim { epoch, claimant: N2, seen: (0, 0), max_tpc: 5, adopters: vec![N2, N3], skipped: vec![N1] };
    let out = deliver(&mut n, at(t + 5), N1, INC, Msg::Claim(back));
    assert_eq!(n.tpc, 6);
    assert_eq!(
        out,
        vec![
            stored(&n),
            send(N1, Msg::ClaimAck { epoch, claimant: N2 }),
            ev(TwEvent::ClaimEnded { outcome: ClaimOutcome::Won }),
            ev(TwEvent::Regenerated { epoch, tpc: 6, took: Duration::from_millis(t + 5) }),
            ev(TwEvent::HasToken(true)),
            // A new token goes round once at once, to find whoever waited
            // while it was lost (it has served nobody yet: quiet 0 → 1).
            ev(TwEvent::HasToken(false)),
            send(N3, Msg::Token { epoch, m: 6, bypassed: vec![N1], quiet: 1 }),
            ev(TwEvent::Passed { to: N3 }),
        ]
    );
    assert_eq!(n.bypassed().iter().copied().collect::<Vec<_>>(), vec![N1]);
    // Alone (no other adopter): no token.
    let mut m = node();
    timeout(&mut m, at(t));
    let epoch = m.promise.proposal().map(|(v, _)| v).expect("a live Claim");
    let back = Claim { epoch, claimant: N2, seen: (0, 0), max_tpc: 5, adopters: vec![N2], skipped: vec![N1] };
    let out = deliver(&mut m, at(t + 5), N3, INC, Msg::Claim(back));
    assert!(!m.has_token());
    assert!(out.contains(&ev(TwEvent::ClaimEnded { outcome: ClaimOutcome::Lapsed })), "{out:?}");
}

#[test]
fn grants_in_one_visit_each_raise_tpc_and_the_token_carries_it() {
    let mut n = node();
    let c1 = ClientId(1);
    let c2 = ClientId(2);
    request(&mut n, T0, c1, LockRequest::Acquire { timeout_ms: 10_000 });
    request(&mut n, T0, c2, LockRequest::Acquire { timeout_ms: 10_000 });
    let out = deliver(&mut n, at(1), N1, INC, token(E, 5));
    assert!(out.contains(&send(N3, renew(2, E, 6, true))), "{out:?}");
    // The lease: n2's own ack and n3's, a majority, 30 ms from the renewal.
    let out = deliver(&mut n, at(2), N3, INC, Msg::LeaseAck { round: 2 });
    assert_eq!(out, granted(c1, fence(E, 6), Duration::from_millis(2), at(31)));
    let out = request(&mut n, at(3), c1, LockRequest::Release);
    assert_eq!(n.tpc, 7);
    assert_eq!(out[0], stored(&n), "the raised tpc is stored before the grant");
    assert!(out.contains(&reply(c2, LockReply::Granted { fence: fence(E, 7), lease_until_us: at(31).as_micros() })));
    let out = request(&mut n, at(4), c2, LockRequest::Release);
    // It served: the next processes pass it on at once (quiet 0).
    assert!(out.contains(&send(N3, Msg::Token { epoch: E, m: 7, bypassed: vec![], quiet: 0 })), "{out:?}");
}

#[test]
fn a_holder_whose_tpc_would_overflow_grants_nothing_more_drops_the_token_and_claims() {
    let mut n = node();
    let (c1, c2) = (ClientId(1), ClientId(2));
    request(&mut n, at(500), c1, LockRequest::Acquire { timeout_ms: 10_000 });
    request(&mut n, at(500), c2, LockRequest::Acquire { timeout_ms: 10_000 });
    deliver(&mut n, at(501), N1, INC, token(E, u64::MAX - 1));
    let out = deliver(&mut n, at(501), N3, INC, Msg::LeaseAck { round: 2 });
    assert_eq!(n.tpc, u64::MAX);
    assert!(
        out.contains(&reply(c1, LockReply::Granted { fence: fence(E, u64::MAX), lease_until_us: at(531).as_micros() }))
    );
    // The next grant would need tpc + 1: nothing is granted, the copy is
    // dropped and a Claim starts (its token restarts at tpc 1).
    let out = request(&mut n, at(502), c1, LockRequest::Release);
    assert!(!n.has_token());
    assert!(!out.iter().any(|o| matches!(o, Output::Reply { reply: LockReply::Granted { .. }, .. })), "{out:?}");
    let epoch = n.promise.proposal().map(|(v, _)| v).expect("a Claim");
    assert!(out.contains(&ev(TwEvent::ClaimStarted { epoch })), "{out:?}");
    let back = Claim {
        epoch,
        claimant: N2,
        seen: (E, u64::MAX - 1),
        max_tpc: u64::MAX,
        adopters: vec![N2, N3, N1],
        skipped: vec![],
    };
    let out = deliver(&mut n, at(510), N1, INC, Msg::Claim(back));
    assert_eq!(n.tpc, 1, "max_tpc + 1 would overflow: the new token starts at 1");
    // A new epoch has no lease yet: renewed at once, granted on the ack.
    let round = renewal_round(&out).expect("a renewal of the new epoch");
    assert!(out.contains(&send(N1, renew(round, epoch, 1, true))), "{out:?}");
    let out = deliver(&mut n, at(511), N1, INC, Msg::LeaseAck { round });
    assert!(
        out.contains(&reply(c2, LockReply::Granted { fence: fence(epoch, 1), lease_until_us: at(540).as_micros() }))
    );
    assert!(fence(epoch, 1) > fence(E, u64::MAX));
    // A token whose m is u64::MAX cannot be accepted (tpc would overflow).
    let mut m = node();
    let out = deliver(&mut m, at(1), N1, INC, token(E, u64::MAX));
    assert_eq!(out, vec![ev(TwEvent::Refused { from: N1, reason: "tpc_overflow" })]);
}

#[test]
fn a_token_back_in_the_same_epoch_records_one_rotation() {
    let mut n = holding();
    // Idle: passed on after the min hold.
    let out = timeout(&mut n, at(2));
    assert!(out.contains(&ev(TwEvent::Passed { to: N3 })), "{out:?}");
    // Back after one lap: the confirmation and the lap time, before the visit.
    let out = deliver(&mut n, at(30), N1, INC, token(E, 7));
    assert_eq!(
        out,
        vec![
            stored(&n),
            ev(TwEvent::Confirmed { took: Duration::from_millis(28) }),
            send(N3, Msg::Ack { epoch: E, ttl: 2, m: 8 }),
            ev(TwEvent::AckSent { forwarded: false }),
            ev(TwEvent::Rotated { took: Duration::from_millis(30) }),
            ev(TwEvent::HasToken(true)),
            ev(TwEvent::Accepted { epoch: E, tpc: 8 }),
        ]
    );
    // A token of a newer epoch starts the laps afresh.
    let mut n = holding();
    timeout(&mut n, at(2));
    let out = deliver(&mut n, at(30), N1, INC, token(E + 1, 1));
    assert!(!out.iter().any(|o| matches!(o, Output::Event(TwEvent::Rotated { .. }))), "{out:?}");
}

#[test]
fn a_holder_with_every_other_process_left_out_drops_its_copy_and_claims() {
    let mut n = node();
    deliver(&mut n, T0, N1, INC, Msg::Token { epoch: E, m: 5, bypassed: vec![N1, N3], quiet: IDLE });
    // No live successor when the visit ends: no minority holder.
    let out = timeout(&mut n, at(2));
    assert!(!n.has_token());
    assert_eq!(out, vec![ev(TwEvent::HasToken(false)), ev(TwEvent::MinorityDropped)]);
    // Its Claim follows once the restart window of this first life is over.
    let out = timeout(&mut n, at(1_000));
    assert!(out.iter().any(|o| matches!(o, Output::Event(TwEvent::ClaimStarted { .. }))), "{out:?}");
}

// ---- leases (lease.rs) ----

/// n2 after a visit of the token of epoch E (accepted at `T0`, handed on
/// and confirmed at +3 ms): a member of the ring, nothing held.
fn member() -> TwNode {
    let mut n = holding();
    timeout(&mut n, at(2));
    deliver(&mut n, at(3), N1, INC, Msg::Ack { epoch: E, ttl: 1, m: 7 });
    assert!(!n.is_awaiting() && !n.has_token());
    n
}

/// A Claim of `epoch` by `claimant` that has seen nothing.
fn fresh_claim(epoch: u64, claimant: NodeId) -> Claim {
    Claim { epoch, claimant, seen: (0, 0), max_tpc: 0, adopters: vec![claimant], skipped: vec![] }
}

#[test]
fn a_holder_with_a_waiting_client_renews_first_and_grants_on_the_majority_ack() {
    let mut n = node();
    let c = ClientId(1);
    // Waiting: `Wanted` (no token passed on here yet), and a renewal of
    // the highest epoch accepted (none yet), which its own acker does not
    // ack (it acked no holder).
    let out = request(&mut n, T0, c, LockRequest::Acquire { timeout_ms: 10_000 });
    assert_eq!(
        out,
        vec![
            send(N1, Msg::Wanted),
            send(N3, Msg::Wanted),
            send(N1, renew(1, 0, 5, false)),
            send(N3, renew(1, 0, 5, false))
        ]
    );
    // The token comes without a lease: kept, and renewed at once.
    let out = deliver(&mut n, at(1), N1, INC, token(E, 5));
    assert_eq!(
        out,
        vec![
            stored(&n),
            send(N3, Msg::Ack { epoch: E, ttl: 2, m: 6 }),
            ev(TwEvent::AckSent { forwarded: false }),
            ev(TwEvent::HasToken(true)),
            ev(TwEvent::Accepted { epoch: E, tpc: 6 }),
            send(N1, renew(2, E, 6, true)),
            send(N3, renew(2, E, 6, true)),
        ]
    );
    // An ack of the older round gives nothing; n1's of this one, with
    // n2's own, is a majority: granted with the lease from the renewal's
    // send time, at(1) + 30 ms.
    assert_eq!(deliver(&mut n, at(2), N1, INC, Msg::LeaseAck { round: 1 }), vec![]);
    let out = deliver(&mut n, at(3), N1, INC, Msg::LeaseAck { round: 2 });
    assert_eq!(out, granted(c, fence(E, 6), Duration::from_millis(3), at(31)));
    // Every third of the lease a renewal; its ack moves the holder's lease.
    assert_eq!(n.poll_timeout(), Some(at(11)));
    let out = timeout(&mut n, at(11));
    assert_eq!(out, vec![send(N1, renew(3, E, 6, true)), send(N3, renew(3, E, 6, true))]);
    let out = deliver(&mut n, at(12), N3, INC, Msg::LeaseAck { round: 3 });
    assert_eq!(
        out,
        vec![
            reply(c, LockReply::Renewed { lease_until_us: at(41).as_micros() }),
            ev(TwEvent::Lock(LockEvent::Renewed { client: c, fence: fence(E, 6), lease_until: at(41) })),
        ]
    );
}

#[test]
fn no_grant_without_the_lease_and_the_token_moves_on_at_the_visits_end() {
    let mut n = node();
    let c = ClientId(1);
    request(&mut n, T0, c, LockRequest::Acquire { timeout_ms: 10_000 });
    deliver(&mut n, at(1), N1, INC, token(E, 5));
    // No ack comes: renewals, but no grant, and the token stays (past the
    // idle hold) while the client waits for the lease.
    assert_eq!(timeout(&mut n, at(11)), vec![send(N1, renew(3, E, 6, true)), send(N3, renew(3, E, 6, true))]);
    assert!(n.has_token());
    // The visit ends at max_hold: the token moves on without a grant (a
    // grant needs the lease; passing never does).
    let out = timeout(&mut n, at(101));
    assert!(!out.iter().any(|o| matches!(o, Output::Reply { .. })), "{out:?}");
    // Its client still waits: quiet 0, so the token comes back quickly.
    assert!(out.contains(&send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: 0 })), "{out:?}");
    assert!(!n.has_token());
}

#[test]
fn a_token_that_served_lately_is_passed_on_at_once_an_idle_one_after_the_min_hold() {
    // A token that served a client one hop ago: n2, with nobody waiting,
    // passes it on in the same step, one more quiet hop on it.
    let mut n = node();
    let out = deliver(&mut n, T0, N1, INC, Msg::Token { epoch: E, m: 5, bypassed: vec![], quiet: 0 });
    assert!(out.contains(&send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: 1 })), "{out:?}");
    assert!(!n.has_token());
    // One that has gone a whole lap (N = 3 hops) without serving anyone
    // stays for token_min_hold (2 ms).
    let mut n = node();
    let out = deliver(&mut n, T0, N1, INC, Msg::Token { epoch: E, m: 5, bypassed: vec![], quiet: IDLE });
    assert!(!out.iter().any(|o| matches!(o, Output::Send { msg: Msg::Token { .. }, .. })), "{out:?}");
    assert!(n.has_token());
    assert_eq!(n.poll_timeout(), Some(at(2)));
}

#[test]
fn a_grant_lasts_until_the_lease_ends_and_never_past_the_visit() {
    // ρ = 1 %: the holder trusts its lease lease·(1−ρ) = 29.7 ms from the
    // renewal's send time.
    let mut ctx = Context::new(N2, INC, Membership::of_size(3), T0, TwConfig { drift_ppm: 10_000, ..cfg() });
    ctx.stored = Some(TwDurable { promises: Some(Promises::recovered_with(0)), tpc: 5, tpc_from: None });
    let mut n = TwNode::start(ctx).unwrap();
    deliver(&mut n, T0, N1, INC, Msg::JoinAck { nonce: 1, values: None });
    let c = ClientId(1);
    request(&mut n, at(1), c, LockRequest::Acquire { timeout_ms: 10_000 });
    deliver(&mut n, at(2), N1, INC, token(E, 5));
    let out = deliver(&mut n, at(4), N3, INC, Msg::LeaseAck { round: 2 });
    let until = Instant::from_micros(at(2).as_micros() + 29_700);
    assert_eq!(out, granted(c, fence(E, 6), Duration::from_millis(3), until));
    // No renewal is acked: the hold ends by itself at the lease's end.
    let out = timeout(&mut n, until);
    assert!(
        out.contains(&ev(TwEvent::Lock(LockEvent::Released {
            client: c,
            fence: fence(E, 6),
            held: Duration::from_micros(27_700),
            how: lockservice::ReleaseHow::Expired
        }))),
        "{out:?}"
    );
    // Renewals acked late in the visit never carry a grant past its end
    // (max_hold after the token came, at(102)).
    let mut n = holding();
    request(&mut n, at(80), c, LockRequest::Acquire { timeout_ms: 10_000 });
    let out = deliver(&mut n, at(81), N1, INC, Msg::LeaseAck { round: 1 });
    assert_eq!(out, granted(c, fence(E, 6), Duration::from_millis(1), at(100)));
}

#[test]
fn a_renewal_is_acked_and_binds_the_acker_against_other_claimants() {
    let mut n = member();
    let out = deliver(&mut n, at(500), N1, INC, renew(7, E, 9, true));
    assert_eq!(out, vec![send(N1, Msg::LeaseAck { round: 7 })]);
    // Another claimant is refused Busy for the rest of lease·(1+ρ) = 30 ms.
    let out = deliver(&mut n, at(510), N3, INC, Msg::Claim(fresh_claim(2 * E, N3)));
    assert_eq!(
        out,
        vec![
            send(N3, Msg::ClaimAck { epoch: 2 * E, claimant: N3 }),
            send(
                N3,
                Msg::ClaimRefused { epoch: 2 * E, refusal: Refusal::Busy { remaining: Duration::from_millis(20) } }
            ),
        ]
    );
    assert_eq!(n.promise.threshold(), E, "nothing adopted");
    // The renewer's own Claim is not bound by its own renewal.
    let out = deliver(&mut n, at(511), N1, INC, Msg::Claim(fresh_claim(3 * E, N1)));
    assert_eq!(n.promise.threshold(), 3 * E);
    assert!(out.contains(&send(N1, Msg::ClaimAck { epoch: 3 * E, claimant: N1 })), "{out:?}");
    // Once the window has passed, others' Claims are adopted again.
    let mut m = member();
    deliver(&mut m, at(500), N1, INC, renew(7, E, 9, true));
    deliver(&mut m, at(530), N3, INC, Msg::Claim(fresh_claim(2 * E, N3)));
    assert_eq!(m.promise.threshold(), 2 * E);
}

#[test]
fn a_renewal_below_the_threshold_is_refused_with_it() {
    let mut n = member();
    deliver(&mut n, at(500), N1, INC, Msg::Claim(fresh_claim(2 * E, N1)));
    let out = deliver(&mut n, at(501), N3, INC, renew(4, E, 9, true));
    assert_eq!(out, vec![send(N3, Msg::LeaseRefused { round: 4, threshold: 2 * E })]);
    // Nothing acked: the claimant is not refused for it.
    assert_eq!(n.lease_busy_for(at(502), N1), None);
    // An absurd epoch is refused and counted, never acked.
    let out = deliver(&mut n, at(503), N3, INC, renew(5, u64::MAX, 9, true));
    assert_eq!(out, vec![ev(TwEvent::Refused { from: N3, reason: "epoch" })]);
}

#[test]
fn a_waiting_renewal_is_acked_only_behind_a_recent_holders() {
    let mut n = member();
    assert_eq!(deliver(&mut n, at(500), N3, INC, renew(1, E, 9, false)), vec![]);
    assert_eq!(n.lease_busy_for(at(500), N1), None, "an unacked renewal binds nothing");
    deliver(&mut n, at(505), N1, INC, renew(1, E, 9, true));
    assert_eq!(deliver(&mut n, at(510), N3, INC, renew(2, E, 9, false)), vec![send(N3, Msg::LeaseAck { round: 2 })]);
    // The holder's ack is lease·(1+ρ) = 30 ms old: waiters get no more.
    assert_eq!(deliver(&mut n, at(535), N3, INC, renew(3, E, 9, false)), vec![]);
}

#[test]
fn a_holding_renewal_of_a_newer_epoch_than_any_accepted_is_answered_with_a_join() {
    // n2 was bypassed: the ring moved on to 2E without it. The holder's
    // renewal is acked, and n2 joins it, so that the next token the holder
    // forwards re-admits n2 (its own Claim would wait for the windows).
    let mut n = member();
    let out = deliver(&mut n, at(500), N1, INC, renew(4, 2 * E, 30, true));
    let nonce = match out.first() {
        Some(Output::Send { msg: Msg::Join { nonce }, .. }) => *nonce,
        o => panic!("no Join first: {o:?}"),
    };
    assert_eq!(out, vec![send(N1, Msg::Join { nonce }), send(N1, Msg::LeaseAck { round: 4 })]);
    // The holder answers the Join and drops n2 from the next token's list.
    let mut h = holding();
    deliver(&mut h, at(1), N3, INC, Msg::Join { nonce });
    assert!(h.readmit.contains(&N3));
}

#[test]
fn an_unrecovered_fresh_node_acks_no_renewal() {
    let mut ctx = Context::new(N2, INC, Membership::of_size(3), T0, cfg());
    ctx.stored = None;
    let mut n = TwNode::start(ctx).unwrap();
    drain(&mut n);
    assert_eq!(deliver(&mut n, at(1), N1, INC, renew(1, E, 9, true)), vec![]);
    assert_eq!(n.lease_busy_for(at(2), N3), None);
}

#[test]
fn a_holder_whose_renewal_is_refused_drops_its_token_and_its_client_loses_the_lock() {
    let mut n = node();
    let c = ClientId(1);
    request(&mut n, T0, c, LockRequest::Acquire { timeout_ms: 10_000 });
    deliver(&mut n, at(1), N1, INC, token(E, 5));
    deliver(&mut n, at(2), N3, INC, Msg::LeaseAck { round: 2 });
    // n1 has moved on to a newer epoch.
    let out = deliver(&mut n, at(3), N1, INC, Msg::LeaseRefused { round: 2, threshold: 2 * E });
    assert_eq!(
        out,
        vec![
            stored(&n),
            reply(
                c,
                LockReply::LockLost {
                    reason: "the token was superseded by a newer epoch (a lease renewal was refused)".into()
                }
            ),
            // The hold lasts until its lease's end (its client may run
            // until then): it still counts as active, and renews as a
            // waiting process.
            ev(TwEvent::HasToken(false)),
            ev(TwEvent::Superseded),
            send(N1, Msg::LeaseRenew { round: 3, epoch: E, tpc: 6, holding: false }),
            send(N3, Msg::LeaseRenew { round: 3, epoch: E, tpc: 6, holding: false }),
        ]
    );
    assert!(!n.has_token());
    assert_eq!(n.promise.stored().floor(), 2 * E, "its next Claim goes above it");
    // A refusal naming an older epoch than the token changes nothing; an
    // absurd one is refused and counted.
    let mut m = holding();
    assert_eq!(deliver(&mut m, at(1), N1, INC, Msg::LeaseRefused { round: 1, threshold: E }), vec![]);
    let out = deliver(&mut m, at(1), N1, INC, Msg::LeaseRefused { round: 1, threshold: u64::MAX });
    assert_eq!(out, vec![ev(TwEvent::Refused { from: N1, reason: "threshold" })]);
    assert!(m.has_token());
}

#[test]
fn a_renewal_of_the_awaited_successor_confirms_the_hand_off() {
    let mut n = holding();
    timeout(&mut n, at(2));
    assert!(n.is_awaiting());
    // From another process, or not above (E, 6): nothing.
    deliver(&mut n, at(3), N1, INC, renew(1, E, 9, false));
    deliver(&mut n, at(3), N3, INC, renew(1, E, 6, false));
    assert!(n.is_awaiting());
    let out = deliver(&mut n, at(4), N3, INC, renew(2, E, 7, true));
    assert_eq!(
        out,
        vec![ev(TwEvent::Confirmed { took: Duration::from_millis(2) }), send(N3, Msg::LeaseAck { round: 2 })]
    );
    assert!(!n.is_awaiting());
}

#[test]
fn a_claimant_that_acked_another_renewal_waits_for_the_window_to_end() {
    let mut n = node();
    // No token seen: n2's own Claim is due at its token-lost deadline.
    let due = n.poll_timeout().expect("a token-lost deadline");
    let acked = Instant::from_micros(due.as_micros() - 5_000);
    deliver(&mut n, acked, N1, INC, renew(1, E, 9, true));
    let out = timeout(&mut n, due);
    assert!(!out.iter().any(|o| matches!(o, Output::Event(TwEvent::ClaimStarted { .. }))), "{out:?}");
    // Just after the window (30 ms from the ack) it claims.
    let end = Instant::from_micros(acked.as_micros() + 30_000);
    assert_eq!(n.poll_timeout(), Some(end));
    let out = timeout(&mut n, end);
    assert!(out.iter().any(|o| matches!(o, Output::Event(TwEvent::ClaimStarted { .. }))), "{out:?}");
}

#[test]
fn a_claim_made_on_a_stale_and_refused_busy_is_tried_again_after_the_window_not_after_w() {
    // n2 (past its restart window) takes the token, passes it to n3 and
    // is answered Stale: it drops its copy and claims at once (the token
    // was seen just now: W is far off).
    let mut n = node();
    deliver(&mut n, at(450), N1, INC, token(E, 5));
    let _ = timeout(&mut n, at(453));
    assert!(n.is_awaiting());
    let out = deliver(&mut n, at(454), N3, INC, Msg::Stale { epoch: E });
    let epoch = out
        .iter()
        .find_map(|o| match o {
            Output::Event(TwEvent::ClaimStarted { epoch }) => Some(*epoch),
            _ => None,
        })
        .expect("a Claim on the Stale");
    // n1 acked a waiter's renewal: Busy for 7 ms more.
    let busy = Refusal::Busy { remaining: Duration::from_millis(7) };
    let out = deliver(&mut n, at(455), N1, INC, Msg::ClaimRefused { epoch, refusal: busy });
    assert!(out.contains(&ev(TwEvent::ClaimEnded { outcome: ClaimOutcome::Busy })), "{out:?}");
    // Tried again just after that window (foundation.md, Retries: a
    // jitter of up to W/10 = 40 ms), not once the token counts as lost
    // (W = 400 ms after 453).
    let started = loop {
        let due = n.poll_timeout().expect("a deadline");
        assert!(due <= at(600), "no Claim by {due:?}");
        let out = timeout(&mut n, due);
        if out.iter().any(|o| matches!(o, Output::Event(TwEvent::ClaimStarted { .. }))) {
            break due;
        }
    };
    assert!(started >= at(462) && started <= at(502), "{started:?}");
}

#[test]
fn a_client_that_starts_waiting_while_the_token_may_be_held_idle_tells_every_peer_once() {
    let (c1, c2) = (ClientId(1), ClientId(2));
    let wanted = |out: &[Out]| -> Vec<Out> {
        out.iter().filter(|o| matches!(o, Output::Send { msg: Msg::Wanted, .. })).cloned().collect()
    };
    // n2 has passed no token on: it may be held idle anywhere.
    let mut n = node();
    let out = request(&mut n, at(1), c1, LockRequest::Acquire { timeout_ms: 10_000 });
    assert_eq!(wanted(&out), vec![send(N1, Msg::Wanted), send(N3, Msg::Wanted)]);
    // A second client waiting beside the first sends nothing more.
    let out = request(&mut n, at(2), c2, LockRequest::Acquire { timeout_ms: 10_000 });
    assert_eq!(wanted(&out), vec![]);
    // The token served here, or was wanted, the last time it left (quiet
    // 0): it is back after one lap without an idle hold anywhere; nothing
    // sent.
    let mut n = node();
    deliver(&mut n, T0, N1, INC, Msg::Wanted);
    deliver(&mut n, T0, N1, INC, token(E, 5));
    assert!(!n.has_token());
    let out = request(&mut n, at(1), c1, LockRequest::Acquire { timeout_ms: 10_000 });
    assert_eq!(wanted(&out), vec![]);
}

#[test]
fn wanted_ends_an_idle_hold_and_the_token_leaves_marked_wanted() {
    // Held idle (quiet IDLE, min hold 2 ms): a peer's Wanted 1 ms in
    // passes it on at once with quiet 0, so nobody on the way holds it.
    let mut n = holding();
    let out = deliver(&mut n, at(1), N1, INC, Msg::Wanted);
    assert_eq!(
        out,
        vec![
            ev(TwEvent::HasToken(false)),
            send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: 0 }),
            ev(TwEvent::Passed { to: N3 }),
        ]
    );
    // A token arriving within token_min_hold of a Wanted is not held
    // either; one arriving later is.
    let mut n = node();
    deliver(&mut n, T0, N1, INC, Msg::Wanted);
    let out = deliver(&mut n, at(1), N1, INC, token(E, 5));
    assert!(out.contains(&send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: 0 })), "{out:?}");
    let mut n = node();
    deliver(&mut n, T0, N1, INC, Msg::Wanted);
    deliver(&mut n, at(2), N1, INC, token(E, 5));
    assert!(n.has_token());
    assert_eq!(n.poll_timeout(), Some(at(4)));
}

/// n2 as `node()`, counting with `tpc_reserve = 4`.
fn reserving(stored: TwDurable) -> TwNode {
    let mut ctx = Context::new(N2, INC, Membership::of_size(3), T0, TwConfig { tpc_reserve: 4, ..cfg() });
    ctx.stored = Some(stored);
    let mut n = TwNode::start(ctx).unwrap();
    drain(&mut n);
    deliver(&mut n, T0, N1, INC, Msg::JoinAck { nonce: 1, values: None });
    n
}

fn persisted(out: &[Out]) -> Vec<TwDurable> {
    out.iter()
        .filter_map(|o| match o {
            Output::Persist(d) => Some(d.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn with_a_reserve_the_counter_is_stored_once_per_block() {
    let mut n = reserving(TwDurable { promises: Some(Promises::recovered_with(0)), tpc: 5, tpc_from: None });
    // Token(E, 5): tpc 6, stored as 6 + 3 before the ACK leaves.
    let out = deliver(&mut n, T0, N1, INC, token(E, 5));
    assert_eq!(n.tpc, 6);
    assert_eq!(
        out[0],
        Output::Persist(TwDurable { promises: Some(n.promise.stored().clone()), tpc: 9, tpc_from: Some(6) })
    );
    assert!(matches!(out[1], Output::Send { msg: Msg::Ack { m: 6, .. }, .. }), "{out:?}");
    // Passed on and back within the block (Token(E, 7): tpc 8 ≤ 9):
    // nothing stored.
    let out = timeout(&mut n, at(2));
    assert!(out.iter().any(|o| matches!(o, Output::Send { msg: Msg::Token { m: 6, .. }, .. })), "{out:?}");
    let out = deliver(&mut n, at(10), N1, INC, token(E, 7));
    assert_eq!(n.tpc, 8);
    assert_eq!(persisted(&out), vec![]);
    // Past the block (Token(E, 9): tpc 10 > 9): the next block, 10 + 3.
    timeout(&mut n, at(12));
    let out = deliver(&mut n, at(20), N1, INC, token(E, 9));
    assert_eq!(persisted(&out).iter().map(|d| d.tpc).collect::<Vec<_>>(), vec![13]);
}

#[test]
fn restarted_with_a_reserve_a_token_in_the_last_block_is_answered_stale() {
    // The life before stored tpc 9 while counting 6 (block 6..=9).
    let mut before = reserving(TwDurable { promises: Some(Promises::recovered_with(0)), tpc: 5, tpc_from: None });
    let out = deliver(&mut before, T0, N1, INC, token(E, 5));
    let stored = persisted(&out).pop().unwrap();
    assert_eq!(stored.tpc, 9);
    let mut n = reserving(stored);
    assert_eq!((n.tpc, n.epoch()), (9, E));
    // Token(E, 7): new if the counter stopped at 6, stale if at 8; neither
    // kept nor silently dropped: Stale, so the sender claims at once.
    let out = deliver(&mut n, at(1), N1, INC, token(E, 7));
    assert_eq!(out, vec![send(N1, Msg::Stale { epoch: E }), ev(TwEvent::StaleAnswered)]);
    assert!(!n.has_token());
    // Below the block: accepted before the crash for certain, dropped.
    let out = deliver(&mut n, at(2), N1, INC, token(E, 5));
    assert_eq!(out, vec![ev(TwEvent::StaleDropped)]);
    // The regenerated token (a newer epoch, its count restarting low) is
    // taken, and the counter stored again from its count: 4 + 3.
    let out = deliver(&mut n, at(3), N1, INC, token(2 * E, 3));
    assert_eq!(n.tpc, 4);
    assert!(n.has_token());
    assert_eq!(persisted(&out).iter().map(|d| d.tpc).collect::<Vec<_>>(), vec![7]);
    // No longer unsure: within the new epoch, only the exact rule.
    timeout(&mut n, at(5));
    let out = deliver(&mut n, at(6), N1, INC, token(2 * E, 3));
    assert!(!out.contains(&send(N1, Msg::Stale { epoch: 2 * E })), "{out:?}");
}

#[test]
fn the_unsure_block_comes_from_the_file_not_from_the_reserve_now() {
    // Stored with a reserve of 4 (block 6..=9), restarted with the
    // default 1: still unsure of 6..=9.
    let mut before = reserving(TwDurable { promises: Some(Promises::recovered_with(0)), tpc: 5, tpc_from: None });
    let out = deliver(&mut before, T0, N1, INC, token(E, 5));
    let mut ctx = Context::new(N2, INC, Membership::of_size(3), T0, cfg());
    ctx.stored = persisted(&out).pop();
    let mut n = TwNode::start(ctx).unwrap();
    drain(&mut n);
    deliver(&mut n, T0, N1, INC, Msg::JoinAck { nonce: 1, values: None });
    let out = deliver(&mut n, at(1), N1, INC, token(E, 8));
    assert_eq!(out, vec![send(N1, Msg::Stale { epoch: E }), ev(TwEvent::StaleAnswered)]);
    // Exact again once a token is taken: Token(2E, 3) stores tpc 4 as is.
    let out = deliver(&mut n, at(2), N1, INC, token(2 * E, 3));
    assert_eq!(persisted(&out).iter().map(|d| (d.tpc, d.tpc_from)).collect::<Vec<_>>(), vec![(4, None)]);
}

#[test]
fn restarted_with_a_reserve_a_renewal_confirms_no_hand_off_in_the_last_block() {
    let mut before = reserving(TwDurable { promises: Some(Promises::recovered_with(0)), tpc: 5, tpc_from: None });
    let out = deliver(&mut before, T0, N1, INC, token(E, 5));
    let mut n = reserving(persisted(&out).pop().unwrap());
    // A client waits: the renewal carries 5, the count below the block
    // 6..=9, not the stored 9, which would confirm n1's hand-off of
    // Token(E, 7) that n2 answers Stale.
    let out = request(&mut n, at(1), ClientId(1), LockRequest::Acquire { timeout_ms: 10_000 });
    let tpcs: Vec<u64> = out
        .iter()
        .filter_map(|o| match o {
            Output::Send { msg: Msg::LeaseRenew { tpc, .. }, .. } => Some(*tpc),
            _ => None,
        })
        .collect();
    assert_eq!(tpcs, vec![5, 5], "{out:?}");
}

#[test]
fn a_reserve_of_zero_or_above_a_million_is_refused() {
    for r in [0, MAX_TPC_RESERVE + 1] {
        assert_eq!(TwConfig { tpc_reserve: r, ..cfg() }.validate(3), Err(TwError::Reserve(r)));
    }
    assert_eq!(TwConfig { tpc_reserve: MAX_TPC_RESERVE, ..cfg() }.validate(3), Ok(()));
}

// ---- every input handler (issue 37, item 2) ----

/// n2 started from its stored state (recovered, tpc 5), no `JoinAck` yet;
/// and what `start` sent.
fn unjoined() -> (TwNode, Vec<Out>) {
    let mut ctx = Context::new(N2, INC, Membership::of_size(3), T0, cfg());
    ctx.stored = Some(TwDurable { promises: Some(Promises::recovered_with(0)), tpc: 5, tpc_from: None });
    let mut n = TwNode::start(ctx).unwrap();
    let out = drain(&mut n);
    (n, out)
}

/// n2 on a fresh disk (no state file): unrecovered; and what `start` sent.
fn fresh() -> (TwNode, Vec<Out>) {
    let mut n = TwNode::start(Context::new(N2, INC, Membership::of_size(3), T0, cfg())).unwrap();
    let out = drain(&mut n);
    (n, out)
}

/// The nonce of the first `Join` in `out`.
fn join_nonce(out: &[Out]) -> u64 {
    out.iter()
        .find_map(|o| match o {
            Output::Send { msg: Msg::Join { nonce }, .. } => Some(*nonce),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Join: {out:?}"))
}

/// The epoch of the Claim started in `out`.
fn claim_started(out: &[Out]) -> u64 {
    out.iter()
        .find_map(|o| match o {
            Output::Event(TwEvent::ClaimStarted { epoch }) => Some(*epoch),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Claim started: {out:?}"))
}

fn gone(n: &mut TwNode, now: Instant, client: ClientId) -> Vec<Out> {
    n.handle_client_gone(now, client);
    drain(n)
}

fn acquire() -> LockRequest {
    LockRequest::Acquire { timeout_ms: 10_000 }
}

fn refused(client: ClientId, reason: &str) -> Out {
    reply(client, LockReply::Refused { reason: reason.into() })
}

/// n2 holding the token of epoch E (tpc 6) that arrived at +1 ms, its
/// client `ClientId(1)` granted at +2 ms (lease until +31 ms).
fn granting() -> TwNode {
    let mut n = node();
    request(&mut n, T0, ClientId(1), acquire());
    deliver(&mut n, at(1), N1, INC, token(E, 5));
    let out = deliver(&mut n, at(2), N3, INC, Msg::LeaseAck { round: 2 });
    assert_eq!(out, granted(ClientId(1), fence(E, 6), Duration::from_millis(2), at(31)));
    n
}

// -- on_message: who may speak --

/// tokenwatchd.md, Model: only configured processes take part. A message
/// from outside the configuration, or one that names this process as its
/// sender, is refused and counted (`not_a_member`) and changes nothing
/// (here a token, which from n1 would be accepted).
#[test]
fn a_message_from_a_non_member_or_from_itself_is_refused_and_counted() {
    let mut n = node();
    let n9 = NodeId(9);
    assert_eq!(
        deliver(&mut n, T0, n9, INC, token(E, 5)),
        vec![ev(TwEvent::Refused { from: n9, reason: "not_a_member" })]
    );
    assert_eq!(
        deliver(&mut n, T0, N2, INC, token(E, 5)),
        vec![ev(TwEvent::Refused { from: N2, reason: "not_a_member" })]
    );
    assert!(!n.has_token());
    assert_eq!(n.tpc, 5);
}

/// A peer's lives only go forward (`membership::Lives`): once a newer life
/// of n1 was heard, a message from its older life is ignored without a
/// trace. Here its `Wanted`, which from the current life ends the idle
/// hold at once.
#[test]
fn a_message_from_an_older_life_of_a_peer_is_ignored() {
    let mut n = node();
    deliver(&mut n, T0, N1, Incarnation(2), token(E, 5));
    assert!(n.has_token());
    assert_eq!(deliver(&mut n, at(1), N1, INC, Msg::Wanted), vec![]);
    assert!(n.has_token());
    assert_eq!(n.poll_timeout(), Some(at(2)), "still held for the idle hold");
}

// -- Token --

/// tokenwatchd.md, Algorithm (On Token); foundation.md, Fresh nodes: an
/// unrecovered fresh node takes no token: no ACK, no `Stale`, nothing
/// stored (its sender retransmits, then bypasses it).
#[test]
fn an_unrecovered_fresh_node_takes_no_token() {
    let (mut n, _) = fresh();
    assert_eq!(deliver(&mut n, at(1), N1, INC, token(E, 5)), vec![]);
    assert!(!n.has_token());
    assert_eq!(n.tpc, 0);
}

/// tokenwatchd.md, Algorithm (On Token); foundation.md, Fresh nodes: a node
/// that recovered `recovered_max` accepts no token at or below it, in any
/// later life too (it cannot know which counts it granted before): it
/// answers `Stale { recovered_max }`. A token above it is accepted.
#[test]
fn a_token_at_or_below_the_recovered_max_is_answered_stale_with_it() {
    let mut ctx = Context::new(N2, INC, Membership::of_size(3), T0, cfg());
    ctx.stored = Some(TwDurable { promises: Some(Promises::recovered_with(2 * E)), tpc: 0, tpc_from: None });
    let mut n = TwNode::start(ctx).unwrap();
    drain(&mut n);
    deliver(&mut n, T0, N1, INC, Msg::JoinAck { nonce: 1, values: None });
    let stale = vec![send(N1, Msg::Stale { epoch: 2 * E }), ev(TwEvent::StaleAnswered)];
    assert_eq!(deliver(&mut n, at(1), N1, INC, token(2 * E, 40)), stale);
    assert_eq!(deliver(&mut n, at(1), N1, INC, token(E, 40)), stale);
    assert!(!n.has_token());
    let out = deliver(&mut n, at(2), N1, INC, token(3 * E, 40));
    assert_eq!(
        out,
        vec![
            stored(&n),
            send(N3, Msg::Ack { epoch: 3 * E, ttl: 2, m: 41 }),
            ev(TwEvent::AckSent { forwarded: false }),
            ev(TwEvent::HasToken(true)),
            ev(TwEvent::Accepted { epoch: 3 * E, tpc: 41 }),
        ]
    );
}

/// tokenwatchd.md, Algorithm (On Token): a second token of the epoch held
/// here is never installed, even with a higher count: refused and counted
/// (`second_token`); the visit, its count and its idle hold go on.
#[test]
fn a_second_token_of_the_epoch_held_here_is_refused_and_counted() {
    let mut n = holding();
    let out = deliver(&mut n, at(1), N3, INC, token(E, 9));
    assert_eq!(out, vec![ev(TwEvent::Refused { from: N3, reason: "second_token" })]);
    assert_eq!(n.tpc, 6);
    assert!(n.has_token());
    assert_eq!(n.poll_timeout(), Some(at(2)));
}

/// tokenwatchd.md, Algorithm (On Token) and Additions for users (Leases):
/// a token of a newer epoch replaces the one held here. The old visit ends
/// (its client gets `LockLost` and keeps its hold until its lease ends, so
/// nothing is granted meanwhile); the new epoch and count are stored
/// before the ACK; the new visit renews its lease at once (a lease is per
/// epoch). Once the old lease ends, the idle token moves on.
#[test]
fn a_token_of_a_newer_epoch_ends_the_visit_held_here_and_its_client_loses_the_lock() {
    let mut n = granting();
    let c = ClientId(1);
    let out = deliver(&mut n, at(3), N1, INC, token(2 * E, 1));
    assert_eq!(n.tpc, 2);
    assert_eq!(
        out,
        vec![
            stored(&n),
            reply(c, LockReply::LockLost { reason: "the token was superseded by a newer epoch".into() }),
            send(N3, Msg::Ack { epoch: 2 * E, ttl: 2, m: 2 }),
            ev(TwEvent::AckSent { forwarded: false }),
            ev(TwEvent::HasToken(true)),
            ev(TwEvent::Accepted { epoch: 2 * E, tpc: 2 }),
            send(N1, renew(3, 2 * E, 2, true)),
            send(N3, renew(3, 2 * E, 2, true)),
        ]
    );
    let out = timeout(&mut n, at(31));
    assert_eq!(
        out,
        vec![
            ev(TwEvent::Lock(LockEvent::Released {
                client: c,
                fence: fence(E, 6),
                held: Duration::from_millis(29),
                how: ReleaseHow::Lost
            })),
            ev(TwEvent::HasToken(false)),
            send(N3, Msg::Token { epoch: 2 * E, m: 2, bypassed: vec![], quiet: IDLE + 1 }),
            ev(TwEvent::Passed { to: N3 }),
        ]
    );
}

/// tokenwatchd.md, Crashes (Start-up): a process has joined once a live
/// process answered its `Join` or it saw a token: a token accepted before
/// any `JoinAck` joins it (ahead of its ACK), and the `Join`s stop.
#[test]
fn a_token_accepted_before_any_join_ack_joins() {
    let (mut n, _) = unjoined();
    let out = deliver(&mut n, at(1), N1, INC, token(E, 5));
    assert_eq!(
        out,
        vec![
            stored(&n),
            ev(TwEvent::Joined),
            send(N3, Msg::Ack { epoch: E, ttl: 2, m: 6 }),
            ev(TwEvent::AckSent { forwarded: false }),
            ev(TwEvent::HasToken(true)),
            ev(TwEvent::Accepted { epoch: E, tpc: 6 }),
        ]
    );
    timeout(&mut n, at(3));
    assert_eq!(n.poll_timeout(), Some(at(13)), "the retransmission; no Join due at +10 ms");
}

// -- Stale --

/// tokenwatchd.md, Algorithm (On Token): a `Stale` from the successor
/// awaited drops the hand-off (so no live process is bypassed), raises the
/// floor to the epoch it names (stored first) and starts a Claim above it
/// at once. A `Stale` with no hand-off awaited, or from another process,
/// changes nothing.
#[test]
fn a_stale_from_the_awaited_successor_drops_the_copy_and_claims_above_its_epoch() {
    let mut n = node();
    assert_eq!(deliver(&mut n, at(440), N3, INC, Msg::Stale { epoch: 2 * E }), vec![]);
    deliver(&mut n, at(450), N1, INC, token(E, 5));
    timeout(&mut n, at(452));
    assert!(n.is_awaiting());
    assert_eq!(deliver(&mut n, at(453), N1, INC, Msg::Stale { epoch: 2 * E }), vec![]);
    assert!(n.is_awaiting());
    assert_eq!(n.promise.stored().floor(), E);
    let out = deliver(&mut n, at(454), N3, INC, Msg::Stale { epoch: 2 * E });
    // The first value of n2's slot (1) above 2E: round 2, slot 1.
    let epoch = encode(2, 1).unwrap();
    assert_eq!(
        out,
        vec![
            stored(&n),
            ev(TwEvent::Superseded),
            ev(TwEvent::ClaimStarted { epoch }),
            send(
                N3,
                Msg::Claim(Claim {
                    epoch,
                    claimant: N2,
                    seen: (E, 5),
                    max_tpc: 6,
                    adopters: vec![N2],
                    skipped: vec![]
                })
            ),
        ]
    );
    assert!(!n.is_awaiting());
}

// -- Join / JoinAck --

/// tokenwatchd.md, Crashes (Start-up, Re-admission): a `Join` is answered
/// `JoinAck` with this process's stored values, and the joiner is dropped
/// from `bypassed` in the next token forwarded here: the token goes to it
/// again, and lists nobody.
#[test]
fn a_join_is_answered_with_the_stored_values_and_readmits_the_joiner_in_the_next_token() {
    let mut n = node();
    deliver(&mut n, T0, N1, INC, Msg::Token { epoch: E, m: 5, bypassed: vec![N3], quiet: IDLE });
    let out = deliver(&mut n, at(1), N3, INC, Msg::Join { nonce: 77 });
    let values = Values { in_use: E, threshold: E, floor: E };
    assert_eq!(out, vec![send(N3, Msg::JoinAck { nonce: 77, values: Some(values) }), ev(TwEvent::JoinAnswered)]);
    assert_eq!(
        timeout(&mut n, at(2)),
        vec![
            ev(TwEvent::HasToken(false)),
            send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: IDLE + 1 }),
            ev(TwEvent::Passed { to: N3 }),
        ]
    );
    assert!(n.bypassed().is_empty());
}

/// tokenwatchd.md, Crashes (Start-up): at start a process sends `Join` to
/// every configured peer, and again every ring timeout with a fresh nonce
/// until one answers; the first `JoinAck` joins it (`Joined`, once) and
/// the `Join`s stop.
#[test]
fn start_sends_join_to_every_peer_every_ring_timeout_until_one_answers() {
    let (mut n, out) = unjoined();
    let first = join_nonce(&out);
    // The start write stores this life's binding window first.
    assert_eq!(out, vec![stored(&n), send(N1, Msg::Join { nonce: first }), send(N3, Msg::Join { nonce: first })]);
    assert_eq!(n.poll_timeout(), Some(at(10)));
    let out = timeout(&mut n, at(10));
    let again = join_nonce(&out);
    assert_ne!(again, first);
    assert_eq!(out, vec![send(N1, Msg::Join { nonce: again }), send(N3, Msg::Join { nonce: again })]);
    let values = Some(Values { in_use: E, threshold: E, floor: E });
    assert_eq!(deliver(&mut n, at(12), N3, INC, Msg::JoinAck { nonce: again, values }), vec![ev(TwEvent::Joined)]);
    assert_eq!(deliver(&mut n, at(13), N1, INC, Msg::JoinAck { nonce: again, values }), vec![]);
    assert_eq!(timeout(&mut n, at(20)), vec![]);
    assert!(n.poll_timeout().is_some_and(|t| t >= at(400)), "only the token-lost deadline is left");
}

/// foundation.md, Fresh nodes: a fresh node sends no `Join` in its restart
/// window; after it, each `Join` is a recovery round, and the node
/// recovers (stores the highest value answered as `recovered_max`, then
/// joins) only on enough answers to a post-window nonce: here both other
/// processes, one of them unrecovered (`values: None`). An answer to
/// another nonce is not counted.
#[test]
fn a_fresh_node_recovers_from_its_peers_answers_and_only_then_joins() {
    let (mut n, out) = fresh();
    assert_eq!(out, vec![stored(&n)], "its first write: unrecovered, no Join");
    assert!(!n.promise.stored().recovered());
    assert_eq!(n.poll_timeout(), Some(at(400)));
    let out = timeout(&mut n, at(400));
    let nonce = join_nonce(&out);
    assert_eq!(out, vec![send(N1, Msg::Join { nonce }), send(N3, Msg::Join { nonce })]);
    let values = Values { in_use: E, threshold: 2 * E, floor: 2 * E };
    assert_eq!(deliver(&mut n, at(401), N1, INC, Msg::JoinAck { nonce, values: Some(values) }), vec![]);
    let other = nonce.wrapping_add(1);
    assert_eq!(deliver(&mut n, at(402), N3, INC, Msg::JoinAck { nonce: other, values: None }), vec![]);
    assert!(!n.promise.stored().recovered());
    let out = deliver(&mut n, at(403), N3, INC, Msg::JoinAck { nonce, values: None });
    assert_eq!(out, vec![stored(&n), ev(TwEvent::StateRecovered { max: 2 * E }), ev(TwEvent::Joined)]);
    assert_eq!(n.promise.stored().recovered_max(), 2 * E);
}

// -- Claim / ClaimAck / ClaimRefused --

/// A Claim whose claimant is not a configured process is acked (the hop
/// arrived) but refused and counted (`claimant`): nothing adopted, nothing
/// forwarded, nobody answered.
#[test]
fn a_claim_of_a_claimant_outside_the_configuration_is_acked_and_refused() {
    let mut n = node();
    let n9 = NodeId(9);
    let out = deliver(&mut n, at(500), N1, INC, Msg::Claim(fresh_claim(2 * E, n9)));
    assert_eq!(
        out,
        vec![
            send(N1, Msg::ClaimAck { epoch: 2 * E, claimant: n9 }),
            ev(TwEvent::Refused { from: N1, reason: "claimant" })
        ]
    );
    assert_eq!(n.promise.threshold(), 0);
}

/// tokenwatchd.md, Regeneration (Refusals): while a hand-off awaits its
/// confirmation the token may be alive one hop on: a Claim is acked and
/// refused `Busy { bypass_after }`, adopting nothing.
#[test]
fn a_process_awaiting_a_confirmation_refuses_a_claim_busy_for_bypass_after() {
    let mut n = holding();
    timeout(&mut n, at(2));
    assert!(n.is_awaiting());
    let out = deliver(&mut n, at(3), N1, INC, Msg::Claim(fresh_claim(2 * E, N1)));
    assert_eq!(
        out,
        vec![
            send(N1, Msg::ClaimAck { epoch: 2 * E, claimant: N1 }),
            send(N1, Msg::ClaimRefused { epoch: 2 * E, refusal: Refusal::Busy { remaining: cfg().bypass_after } }),
        ]
    );
    assert_eq!(n.promise.threshold(), E, "nothing adopted");
}

/// foundation.md, Fresh nodes: an unrecovered fresh node promises nothing:
/// a Claim through it (after its restart window) is acked and passed on
/// without adopting it, as in a restart window (a refusal would abandon a
/// Claim the others may carry to a majority, and send its claimant into
/// the long backoff: in a new cluster whose nodes recover one after the
/// other, or on lossy links).
#[test]
fn an_unrecovered_fresh_node_passes_a_claim_on_without_adopting_it() {
    let (mut n, _) = fresh();
    let out = deliver(&mut n, at(500), N1, INC, Msg::Claim(fresh_claim(2 * E, N1)));
    let passed = Claim { epoch: 2 * E, claimant: N1, seen: (0, 0), max_tpc: 0, adopters: vec![N1], skipped: vec![] };
    assert_eq!(out, vec![send(N1, Msg::ClaimAck { epoch: 2 * E, claimant: N1 }), send(N3, Msg::Claim(passed))]);
    assert_eq!(n.promise.threshold(), 0);
}

/// tokenwatchd.md, Regeneration (Transport): each hop of a Claim is resent
/// every ring_timeout / N until its successor acks it; a `ClaimAck` from
/// another process, or for another Claim, stops nothing.
#[test]
fn a_claim_hop_is_resent_every_ring_timeout_over_n_until_its_successor_acks_it() {
    let mut n = node();
    let claim = Claim { epoch: 2 * E, claimant: N1, seen: (0, 0), max_tpc: 9, adopters: vec![N1], skipped: vec![] };
    deliver(&mut n, at(500), N1, INC, Msg::Claim(claim.clone()));
    let fwd = send(N3, Msg::Claim(Claim { adopters: vec![N1, N2], ..claim }));
    let every = cfg().ring_timeout / 3;
    let due = at(500) + every;
    assert_eq!(n.poll_timeout(), Some(due));
    assert_eq!(timeout(&mut n, due), vec![fwd.clone()]);
    assert_eq!(deliver(&mut n, at(504), N1, INC, Msg::ClaimAck { epoch: 2 * E, claimant: N1 }), vec![]);
    assert_eq!(deliver(&mut n, at(504), N3, INC, Msg::ClaimAck { epoch: 3 * E, claimant: N1 }), vec![]);
    assert_eq!(deliver(&mut n, at(504), N3, INC, Msg::ClaimAck { epoch: 2 * E, claimant: N3 }), vec![]);
    assert_eq!(n.poll_timeout(), Some(due + every));
    assert_eq!(timeout(&mut n, due + every), vec![fwd]);
    // Acked by n3: nothing more before the token-lost deadline (W after
    // adopting, at least).
    assert_eq!(deliver(&mut n, at(508), N3, INC, Msg::ClaimAck { epoch: 2 * E, claimant: N1 }), vec![]);
    assert!(n.poll_timeout().is_some_and(|t| t >= at(900)), "{:?}", n.poll_timeout());
}

/// tokenwatchd.md, Regeneration (Transport): a successor that leaves a
/// Claim hop unacked for bypass_after is skipped: the Claim goes on to
/// the next process with it in `skipped` (its token will bypass it).
#[test]
fn a_claim_hop_unacked_for_bypass_after_skips_its_silent_successor() {
    let mut n = node();
    let claim = Claim { epoch: 2 * E, claimant: N1, seen: (0, 0), max_tpc: 9, adopters: vec![N1], skipped: vec![] };
    deliver(&mut n, at(500), N1, INC, Msg::Claim(claim.clone()));
    let fwd = Claim { adopters: vec![N1, N2], ..claim };
    let skip_at = at(620);
    while let Some(due) = n.poll_timeout().filter(|d| *d < skip_at) {
        assert_eq!(timeout(&mut n, due), vec![send(N3, Msg::Claim(fwd.clone()))]);
    }
    assert_eq!(n.poll_timeout(), Some(skip_at));
    let out = timeout(&mut n, skip_at);
    assert_eq!(out, vec![send(N1, Msg::Claim(Claim { skipped: vec![N3], ..fwd }))]);
}

/// tokenwatchd.md, Regeneration (Back at the claimant); foundation.md,
/// Retries: a `Promised { value }` refusal of the own Claim ends it
/// (`Refused`) and raises the floor to its value, stored; the retry, after
/// W to 2W, proposes above it. A refusal of another epoch changes nothing.
#[test]
fn a_claim_refused_as_promised_ends_the_own_claim_and_the_retry_goes_above_its_value() {
    let mut n = node();
    let t = 10_000;
    let epoch = claim_started(&timeout(&mut n, at(t)));
    assert_eq!(deliver(&mut n, at(t + 1), N3, INC, Msg::ClaimAck { epoch, claimant: N2 }), vec![]);
    let promised = Refusal::Promised { value: 5 * E };
    let other = Msg::ClaimRefused { epoch: epoch + E, refusal: promised };
    assert_eq!(deliver(&mut n, at(t + 2), N3, INC, other), vec![]);
    let out = deliver(&mut n, at(t + 3), N3, INC, Msg::ClaimRefused { epoch, refusal: promised });
    assert_eq!(out, vec![stored(&n), ev(TwEvent::ClaimEnded { outcome: ClaimOutcome::Refused })]);
    assert_eq!(n.promise.stored().floor(), 5 * E);
    let retry = n.poll_timeout().expect("a retry");
    assert!(retry >= at(t + 403) && retry <= at(t + 803), "{retry:?}");
    let out = timeout(&mut n, retry);
    // The first value of n2's slot (1) above 5E: round 5, slot 1.
    let next = encode(5, 1).unwrap();
    assert_eq!(
        out,
        vec![
            stored(&n),
            ev(TwEvent::ClaimStarted { epoch: next }),
            send(
                N3,
                Msg::Claim(Claim {
                    epoch: next,
                    claimant: N2,
                    seen: (0, 0),
                    max_tpc: 5,
                    adopters: vec![N2],
                    skipped: vec![]
                })
            ),
        ]
    );
}

/// tokenwatchd.md, Regeneration (Back at the claimant): an own Claim not
/// back within token_lost_after·(1−ρ) of sending it is abandoned
/// (`Lapsed`: its adopters' promise windows may be ending), and tried again
/// after a random delay between W·(1+ρ)/(1−ρ) and twice that.
#[test]
fn an_own_claim_not_back_by_its_deadline_lapses_and_is_retried_after_w_to_2w() {
    let mut n = node();
    let t = 10_000;
    let epoch = claim_started(&timeout(&mut n, at(t)));
    deliver(&mut n, at(t + 1), N3, INC, Msg::ClaimAck { epoch, claimant: N2 });
    assert_eq!(n.promise.proposal(), Some((epoch, at(t + 400))));
    assert_eq!(n.poll_timeout(), Some(at(t + 400)));
    assert_eq!(timeout(&mut n, at(t + 400)), vec![ev(TwEvent::ClaimEnded { outcome: ClaimOutcome::Lapsed })]);
    assert_eq!(n.promise.proposal(), None);
    let retry = n.poll_timeout().expect("a retry");
    assert!(retry >= at(t + 800) && retry <= at(t + 1_200), "{retry:?}");
}

/// tokenwatchd.md, Regeneration: with no token seen for token_lost_after
/// (its restart window over), a process proposes the first epoch of its
/// slot above its floor, stores it, then sends the Claim to its successor
/// (`seen` the newest token it accepted, none; `max_tpc` its own count).
#[test]
fn a_process_that_sees_no_token_for_w_claims_storing_its_proposal_first() {
    let mut n = node();
    let due = n.poll_timeout().expect("the token-lost deadline");
    assert!(due >= at(400) && due <= at(800), "{due:?}");
    let out = timeout(&mut n, due);
    let epoch = encode(0, 1).unwrap();
    assert_eq!(n.promise.proposal().map(|(v, _)| v), Some(epoch));
    assert_eq!(
        out,
        vec![
            stored(&n),
            ev(TwEvent::ClaimStarted { epoch }),
            send(
                N3,
                Msg::Claim(Claim {
                    epoch,
                    claimant: N2,
                    seen: (0, 0),
                    max_tpc: 5,
                    adopters: vec![N2],
                    skipped: vec![]
                })
            ),
        ]
    );
}

// -- client requests, client gone, link lost --

/// A second `Acquire` from a waiting client is refused and changes
/// nothing; a `Release` ends a wait (`Released`); a `Release` from a client
/// that neither holds nor waits is refused. With nobody waiting, the token
/// passes by without waiting for a lease.
#[test]
fn a_second_acquire_is_refused_a_release_ends_a_wait_and_a_stray_release_is_refused() {
    let mut n = node();
    let c = ClientId(1);
    request(&mut n, T0, c, acquire());
    assert_eq!(request(&mut n, at(1), c, acquire()), vec![refused(c, "already waiting for the lock")]);
    assert_eq!(request(&mut n, at(2), c, LockRequest::Release), vec![reply(c, LockReply::Released)]);
    assert_eq!(request(&mut n, at(3), c, LockRequest::Release), vec![refused(c, "not holding the lock")]);
    let out = deliver(&mut n, at(4), N1, INC, Msg::Token { epoch: E, m: 5, bypassed: vec![], quiet: 0 });
    assert_eq!(
        out,
        vec![
            stored(&n),
            send(N3, Msg::Ack { epoch: E, ttl: 2, m: 6 }),
            ev(TwEvent::AckSent { forwarded: false }),
            ev(TwEvent::HasToken(true)),
            ev(TwEvent::Accepted { epoch: E, tpc: 6 }),
            ev(TwEvent::HasToken(false)),
            send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: 1 }),
            ev(TwEvent::Passed { to: N3 }),
        ]
    );
}

/// tokenwatchd.md, Configuration (`max_queue`): an `Acquire` beyond
/// `max_queue` waiting clients is refused (`queue full`).
#[test]
fn an_acquire_beyond_max_queue_waiting_clients_is_refused() {
    let mut n = node();
    for i in 1..=8 {
        request(&mut n, T0, ClientId(i), acquire());
    }
    assert_eq!(request(&mut n, at(1), ClientId(9), acquire()), vec![refused(ClientId(9), "queue full")]);
}

/// tokenwatchd.md, The visit: a holder's `Release` ends its hold
/// (`Released`, reply then event); with nobody else waiting the token,
/// which served, leaves at once marked as serving (`quiet` 0).
#[test]
fn a_holders_release_ends_the_hold_and_the_token_leaves_at_once() {
    let mut n = granting();
    let c = ClientId(1);
    let out = request(&mut n, at(5), c, LockRequest::Release);
    assert_eq!(
        out,
        vec![
            reply(c, LockReply::Released),
            ev(TwEvent::Lock(LockEvent::Released {
                client: c,
                fence: fence(E, 6),
                held: Duration::from_millis(3),
                how: ReleaseHow::Released
            })),
            ev(TwEvent::HasToken(false)),
            send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: 0 }),
            ev(TwEvent::Passed { to: N3 }),
        ]
    );
}

/// A client whose connection closes: a waiter leaves the queue without a
/// reply (a client never seen changes nothing); the holder's hold ends
/// (`Disconnected`, no reply) and, nobody else waiting, the token moves on
/// at once as after a `Release`.
#[test]
fn a_gone_waiter_just_leaves_the_queue_and_a_gone_holder_frees_the_lock_and_the_token() {
    let mut n = granting();
    let (c1, c2) = (ClientId(1), ClientId(2));
    assert_eq!(request(&mut n, at(3), c2, acquire()), vec![]);
    assert_eq!(gone(&mut n, at(4), c2), vec![]);
    assert_eq!(gone(&mut n, at(4), ClientId(7)), vec![]);
    let out = gone(&mut n, at(5), c1);
    assert_eq!(
        out,
        vec![
            ev(TwEvent::Lock(LockEvent::Released {
                client: c1,
                fence: fence(E, 6),
                held: Duration::from_millis(3),
                how: ReleaseHow::Disconnected
            })),
            ev(TwEvent::HasToken(false)),
            send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: 0 }),
            ev(TwEvent::Passed { to: N3 }),
        ]
    );
}

/// tokenwatchd.md, Model: the channels are lossy datagrams, and loss is
/// handled by retransmission and bypass: a lost link changes nothing, not
/// even a hand-off to that very peer awaiting its confirmation.
#[test]
fn a_lost_link_changes_nothing() {
    let mut n = holding();
    timeout(&mut n, at(2));
    let before = n.clone();
    n.handle_link_lost(at(3), N3);
    assert_eq!(drain(&mut n), vec![]);
    assert_eq!(n, before);
}

// -- timeouts: the visit's end, lock deadlines --

/// tokenwatchd.md, The visit: every visit ends max_hold after the token
/// arrived, held or not. The lease renewed meanwhile never runs past that
/// instant; then the client still holding gets `LockLost`, its hold ends
/// with its lease, and the token moves on.
#[test]
fn a_hold_still_running_at_the_visits_end_is_revoked_and_the_token_moves_on() {
    let mut n = granting();
    let c = ClientId(1);
    // Renewed every 10 ms, each acked: the lease follows, cut at +101 ms.
    for k in 1..=9 {
        let now = at(1 + 10 * k);
        let round = renewal_round(&timeout(&mut n, now)).expect("a renewal");
        deliver(&mut n, now, N3, INC, Msg::LeaseAck { round });
    }
    assert_eq!(n.locks.lease_until(), Some(at(101)));
    assert_eq!(n.poll_timeout(), Some(at(101)));
    let out = timeout(&mut n, at(101));
    assert_eq!(
        out,
        vec![
            reply(c, LockReply::LockLost { reason: "held longer than max_hold_ms".into() }),
            ev(TwEvent::Lock(LockEvent::Released {
                client: c,
                fence: fence(E, 6),
                held: Duration::from_millis(99),
                how: ReleaseHow::Lost
            })),
            ev(TwEvent::HasToken(false)),
            send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: 0 }),
            ev(TwEvent::Passed { to: N3 }),
        ]
    );
}

/// A waiter whose deadline (its `Acquire`'s timeout) passes without a
/// grant gets `TimedOut` (reply, then event); nobody waiting, no more
/// renewals are due.
#[test]
fn a_waiter_times_out_at_its_deadline() {
    let mut n = node();
    let c = ClientId(1);
    request(&mut n, T0, c, LockRequest::Acquire { timeout_ms: 5 });
    assert_eq!(n.poll_timeout(), Some(at(5)));
    assert_eq!(
        timeout(&mut n, at(5)),
        vec![
            reply(c, LockReply::TimedOut),
            ev(TwEvent::Lock(LockEvent::TimedOut { client: c, waited: Duration::from_millis(5) })),
        ]
    );
    assert_eq!(n.lease_deadline(), None);
}

/// tokenwatchd.md, Additions for users: a try-lock (`timeout_ms` 0) waits
/// one lap, N·(token_min_hold + δ) = 3 × 7 ms, then times out.
#[test]
fn a_try_lock_waits_one_lap_of_the_ring() {
    let mut n = node();
    let c = ClientId(1);
    request(&mut n, T0, c, LockRequest::Acquire { timeout_ms: 0 });
    let out = timeout(&mut n, at(20));
    assert!(!out.iter().any(|o| matches!(o, Output::Reply { .. })), "{out:?}");
    assert_eq!(
        timeout(&mut n, at(21)),
        vec![
            reply(c, LockReply::TimedOut),
            ev(TwEvent::Lock(LockEvent::TimedOut { client: c, waited: Duration::from_millis(21) })),
        ]
    );
}

// -- shutdown --

/// foundation.md, the runtime (graceful leave: hand the token on): a
/// holder told to leave hands the token on at once, without its idle
/// hold, and has left once that hand-off is confirmed.
#[test]
fn a_leaving_holder_hands_the_token_on_at_once_and_has_left_once_confirmed() {
    let mut n = holding();
    n.handle_shutdown(at(1));
    assert_eq!(
        drain(&mut n),
        vec![
            ev(TwEvent::HasToken(false)),
            send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: IDLE + 1 }),
            ev(TwEvent::Passed { to: N3 }),
        ]
    );
    assert!(!n.is_left());
    let out = deliver(&mut n, at(3), N1, INC, Msg::Ack { epoch: E, ttl: 1, m: 7 });
    assert_eq!(out, vec![ev(TwEvent::Confirmed { took: Duration::from_millis(2) })]);
    assert!(n.is_left());
}

/// foundation.md, the runtime (graceful leave): a leaving process refuses
/// its waiters and every later `Acquire` (`daemon is shutting down`),
/// starts no Claim, and passes on at once a token that still reaches it.
#[test]
fn a_leaving_process_refuses_every_acquire_claims_nothing_and_holds_no_token() {
    let mut n = node();
    let c = ClientId(1);
    request(&mut n, T0, c, acquire());
    n.handle_shutdown(at(1));
    assert_eq!(drain(&mut n), vec![refused(c, "daemon is shutting down")]);
    assert!(n.is_left());
    assert_eq!(request(&mut n, at(2), ClientId(2), acquire()), vec![refused(ClientId(2), "daemon is shutting down")]);
    assert_eq!(n.poll_timeout(), None, "no Claim, no renewal, no Join");
    let out = deliver(&mut n, at(3), N1, INC, token(E, 5));
    assert_eq!(
        out,
        vec![
            stored(&n),
            send(N3, Msg::Ack { epoch: E, ttl: 2, m: 6 }),
            ev(TwEvent::AckSent { forwarded: false }),
            ev(TwEvent::HasToken(true)),
            ev(TwEvent::Accepted { epoch: E, tpc: 6 }),
            ev(TwEvent::HasToken(false)),
            send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![], quiet: IDLE + 1 }),
            ev(TwEvent::Passed { to: N3 }),
        ]
    );
}

/// tokenwatchd.md, Claims: a token of a newer epoch reaching a claimant
/// ends its Claim — reported (`ClaimEnded`, lapsed) and its hop no longer
/// resent — as a Claim that lapses does. (The token's epoch had already
/// dropped the proposal, so the Claim once ended silently and its hop was
/// resent until acked.)
#[test]
fn a_newer_token_reaching_a_claimant_ends_its_claim_and_its_hop() {
    let mut n = node();
    let due = n.poll_timeout().expect("the token-lost deadline");
    timeout(&mut n, due);
    let epoch = encode(0, 1).unwrap();
    assert_eq!(n.claims.own().map(|c| c.0), Some(epoch));
    let out = deliver(&mut n, due + Duration::from_millis(1), N1, INC, token(3 * E, 7));
    assert!(out.contains(&ev(TwEvent::ClaimEnded { outcome: ClaimOutcome::Lapsed })), "{out:#?}");
    assert_eq!(n.claims.own(), None);
    assert!(!n.claims.hops().contains_key(&(epoch, N2)), "{:?}", n.claims.hops().keys());
}

/// tokenwatchd is the seed's one token ring: a named lock is refused with
/// its own reason, and the refusal changes nothing (the same client's
/// unnamed Acquire is queued afterwards as ever).
#[test]
fn a_named_lock_is_refused_and_changes_nothing() {
    let mut n = holding();
    let before = n.clone();
    let name = lockservice::LockName::parse("db").expect("valid");
    let out = request(&mut n, at(5), ClientId(9), LockRequest::AcquireNamed { name, timeout_ms: 1_000 });
    assert_eq!(out, vec![reply(ClientId(9), LockReply::Refused { reason: super::NO_NAMES.into() })]);
    assert_eq!(n, before, "nothing changed");
    assert!(super::NO_NAMES.contains("named locks are not supported"), "ftctl recognises the refusal");
}
