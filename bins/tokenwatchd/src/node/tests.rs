//! One test per handler rule of the core, asserting the exact outputs.
//!
//! Three processes n1 → n2 → n3 → n1; the process under test is n2 (its
//! successor n3, its predecessor n1) in its first life, recovered, with
//! tpc 5. Settings: ring timeout 10 ms, r = 2, max_hold 100 ms, idle hold
//! 2 ms, δ 5 ms, bypass after 120 ms, W = 400 ms, ρ = 0.

use std::time::Duration;

use durable::promise::{Promises, Refusal};
use ftcore::testing::{deliver, drain, request, timeout};
use ftcore::Output;
use lockservice::fence;
use membership::Membership;

use super::*;

const INC: Incarnation = Incarnation(1);
const T0: Instant = Instant::from_millis(1_000);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const N3: NodeId = NodeId(3);
/// An epoch in use (round 1, slot 0).
const E: u64 = 1 << durable::promise::SLOT_BITS;

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
        allow_minority: false,
        max_queue: 8,
        mutations: TwMutations::default(),
    }
}

/// n2, joined (n1 answered its Join), nothing held.
fn node() -> TwNode {
    let mut ctx = Context::new(N2, INC, Membership::of_size(3), T0, cfg());
    ctx.stored = Some(TwDurable { promises: Some(Promises::recovered_with(0)), tpc: 5 });
    let mut n = TwNode::start(ctx).unwrap();
    drain(&mut n);
    deliver(&mut n, T0, N1, INC, Msg::JoinAck { nonce: 1, values: None });
    n
}

fn stored(n: &TwNode) -> Out {
    Output::Persist(TwDurable { promises: Some(n.promise.stored().clone()), tpc: n.tpc })
}

fn send(to: NodeId, msg: Msg) -> Out {
    Output::Send { to, msg }
}

fn ev(e: TwEvent) -> Out {
    Output::Event(e)
}

fn token(epoch: u64, m: u64) -> Msg {
    Msg::Token { epoch, m, bypassed: vec![] }
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
            send(N3, Msg::Token { epoch: E, m: 6, bypassed: vec![] }),
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
    let tok = Msg::Token { epoch: E, m: 6, bypassed: vec![] };
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
    assert!(out.contains(&Output::Reply { client: c1, reply: LockReply::Granted { fence: fence(E, 6) } }), "{out:?}");
    let out = request(&mut n, at(2), c1, LockRequest::Release);
    assert_eq!(n.tpc, 7);
    assert_eq!(out[0], stored(&n), "the raised tpc is stored before the grant");
    assert!(out.contains(&Output::Reply { client: c2, reply: LockReply::Granted { fence: fence(E, 7) } }), "{out:?}");
    let out = request(&mut n, at(3), c2, LockRequest::Release);
    assert!(out.contains(&send(N3, Msg::Token { epoch: E, m: 7, bypassed: vec![] })), "{out:?}");
}

#[test]
fn a_holder_whose_tpc_would_overflow_grants_nothing_more_drops_the_token_and_claims() {
    let mut n = node();
    let (c1, c2) = (ClientId(1), ClientId(2));
    request(&mut n, at(500), c1, LockRequest::Acquire { timeout_ms: 10_000 });
    request(&mut n, at(500), c2, LockRequest::Acquire { timeout_ms: 10_000 });
    let out = deliver(&mut n, at(501), N1, INC, token(E, u64::MAX - 1));
    assert_eq!(n.tpc, u64::MAX);
    assert!(
        out.contains(&Output::Reply { client: c1, reply: LockReply::Granted { fence: fence(E, u64::MAX) } }),
        "{out:?}"
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
    assert!(
        out.contains(&Output::Reply { client: c2, reply: LockReply::Granted { fence: fence(epoch, 1) } }),
        "{out:?}"
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
    deliver(&mut n, T0, N1, INC, Msg::Token { epoch: E, m: 5, bypassed: vec![N1, N3] });
    // No live successor when the visit ends: no minority holder.
    let out = timeout(&mut n, at(2));
    assert!(!n.has_token());
    assert_eq!(out, vec![ev(TwEvent::HasToken(false)), ev(TwEvent::MinorityDropped)]);
    // Its Claim follows once the restart window of this first life is over.
    let out = timeout(&mut n, at(1_000));
    assert!(out.iter().any(|o| matches!(o, Output::Event(TwEvent::ClaimStarted { .. }))), "{out:?}");
}
