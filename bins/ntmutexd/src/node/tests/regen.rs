//! Regeneration (promised by a majority, stored before acks) and epochs.

use ::durable::promise::Refusal;

use super::*;

// ===== the promiser's side =================================================

#[test]
fn regenerate_at_a_token_holder_is_refused_and_the_token_kept() {
    let mut h = holder(4, 1, 2);
    let p = proposal(2, 3);
    let out = deliver(&mut h, at(1), 3, Body::Regenerate { epoch: p });
    assert_eq!(out, vec![send(3, Body::RegenerateNack { epoch: p, why: Nack::Holder })]);
    assert_eq!(h.token, Some(Token { epoch: E, counter: 0 }));
    assert_eq!(h.stored().threshold(), E, "a holder promises nothing");
}

#[test]
fn regenerate_above_the_threshold_is_stored_before_the_ack() {
    let mut s = site(4, 2, 2);
    let p = proposal(2, 3);
    let out = deliver(&mut s, at(1), 3, Body::Regenerate { epoch: p });
    // (safety) The promise is on disk before the ack leaves; the ack
    // carries the epoch in use (E): a promise is not an epoch in use.
    assert_eq!(out, vec![persisted(&s), send(3, Body::RegenerateAck { epoch: p })]);
    assert_eq!((s.max_epoch(), s.stored().threshold()), (E, p));
}

#[test]
fn regenerate_at_or_below_the_threshold_is_refused_with_it_ties_included() {
    let mut s = site(4, 2, 2);
    let p = proposal(2, 3);
    deliver(&mut s, at(1), 3, Body::Regenerate { epoch: p });
    // After the promise window: only the threshold speaks.
    let out = deliver(&mut s, at(60), 4, Body::Regenerate { epoch: p });
    assert_eq!(out, vec![send(4, nack(p, Refusal::Promised { value: p }))], "a tie is refused");
    let lower = proposal(2, 1);
    let out = deliver(&mut s, at(61), 1, Body::Regenerate { epoch: lower });
    assert_eq!(out, vec![send(1, nack(lower, Refusal::Promised { value: p }))]);
    assert_eq!(s.stored().threshold(), p);
}

#[test]
fn regenerate_of_another_proposer_within_the_promise_window_is_refused_busy() {
    let mut s = site(4, 2, 2);
    let p = proposal(2, 3);
    deliver(&mut s, at(1), 3, Body::Regenerate { epoch: p });
    let higher = proposal(3, 4);
    // The window is W·(1+ρ) = 45 ms after the promise at 1 ms.
    let out = deliver(&mut s, at(11), 4, Body::Regenerate { epoch: higher });
    assert_eq!(out, vec![send(4, nack(higher, Refusal::Busy { remaining: ms(35) }))]);
    // The same proposer may supersede its own proposal.
    let own_higher = proposal(3, 3);
    let out = deliver(&mut s, at(12), 3, Body::Regenerate { epoch: own_higher });
    assert_eq!(out, vec![persisted(&s), send(3, Body::RegenerateAck { epoch: own_higher })]);
    // Once the window is over, a higher proposal of another is promised.
    let out = deliver(&mut s, at(63), 4, Body::Regenerate { epoch: proposal(4, 4) });
    assert_eq!(out, vec![persisted(&s), send(4, Body::RegenerateAck { epoch: proposal(4, 4) })]);
}

#[test]
fn regenerate_repeated_by_the_same_proposer_is_acked_again() {
    let mut s = site(4, 2, 2);
    let p = proposal(2, 3);
    deliver(&mut s, at(1), 3, Body::Regenerate { epoch: p });
    // A lost ack: the proposer asks again; nothing new to store.
    assert_eq!(
        deliver(&mut s, at(2), 3, Body::Regenerate { epoch: p }),
        vec![send(3, Body::RegenerateAck { epoch: p })]
    );
}

#[test]
fn regenerate_in_the_restart_window_is_refused() {
    // Windows live in memory: a restarted site promises nothing until every
    // promise of its previous life has run out. The stored file was written
    // under W = 50 ms (`stored_in_use`), longer than this site's own
    // window: the stored binding rules (50 ms·(1+ρ) from the start).
    let mut s = restarted(4, 2, 2, stored_in_use(E));
    drain(&mut s);
    s.join.phase = Phase::Running;
    let p = proposal(2, 3);
    let out = deliver(&mut s, at(10), 3, Body::Regenerate { epoch: p });
    assert_eq!(out, vec![send(3, nack(p, Refusal::Restarting { remaining: ms(40) }))]);
}

#[test]
fn regenerate_at_a_fresh_node_is_refused_until_it_recovers() {
    let mut s = fresh(4, 2, 2);
    drain(&mut s);
    s.join.phase = Phase::Running;
    let p = proposal(2, 3);
    // It adopts the epoch in use the message carries (no promise), and
    // refuses the proposal.
    let out = deliver(&mut s, at(60), 3, Body::Regenerate { epoch: p });
    assert_eq!(out, vec![persisted(&s), ev(NtEvent::Epoch(E)), send(3, nack(p, Refusal::Unrecovered))]);
}

// ===== the proposer's side ================================================

/// n3 of 4, request 2, n4 queued behind it, regenerating round 2 (in n3's
/// slot) since T0.
fn regenerating() -> NtNode {
    let mut s = waiting(4, 3, 2, 2);
    s.next = Some((n(4), 8));
    s.start_regeneration(T0, Mech::M3, T0);
    let p = proposal(2, 3);
    let mut expected = vec![persisted(&s)];
    expected.extend([1, 2, 4].map(|i| send(i, Body::Regenerate { epoch: p })));
    assert_eq!(drain(&mut s), expected, "the proposal is stored before it is sent");
    s
}

fn ack(s: &mut NtNode, t: Instant, from: u32, epoch: u64) -> Vec<OutputOf<NtNode>> {
    deliver(s, t, from, Body::RegenerateAck { epoch })
}

#[test]
fn regenerate_concurrent_proposals_the_higher_wins() {
    let mut s = regenerating();
    let p = proposal(2, 3);
    let lower = proposal(2, 2);
    assert_eq!(
        deliver(&mut s, at(1), 2, Body::Regenerate { epoch: lower }),
        vec![send(2, nack(lower, Refusal::Promised { value: p }))]
    );
    let higher = proposal(3, 2);
    let out = deliver(&mut s, at(2), 2, Body::Regenerate { epoch: higher });
    assert_eq!(out, vec![persisted(&s), send(2, Body::RegenerateAck { epoch: higher })]);
    assert_eq!(s.recovery, Recovery::Idle, "ours is abandoned; wait for the winner's token");
    assert_eq!(s.timers.get(Timer::Window), None);
    assert_eq!(s.timers.get(Timer::CommitWait), Some(at(52)));
}

#[test]
fn regeneration_with_every_ack_creates_the_token_at_position_zero_and_commits_next() {
    let mut s = regenerating();
    // Nobody acks a waiting renewal while no holder renews.
    assert_eq!(acquire(&mut s, T0, 1), renewals(4, 3, 1, E, false));
    let p = proposal(2, 3);
    assert_eq!(ack(&mut s, at(2), 1, p), vec![]);
    // A majority (n1, n2, n3) but n4, which is not suspected, has not acked.
    assert_eq!(ack(&mut s, at(3), 2, p), vec![]);
    let f = fence(p, 1);
    let out = ack(&mut s, at(4), 4, p);
    let mut expected = vec![
        persisted(&s),
        ev(NtEvent::Epoch(p)),
        ev(NtEvent::Regenerated { epoch: p }),
        ev(NtEvent::HasToken(true)),
        ev(NtEvent::Recovered { mech: Mech::M3, took: ms(4) }),
        send_e(4, p, commit(Some(1), &[3], 8, (3, u64::MAX))),
    ];
    // (safety) No grant yet: the new token has no lease. It renews at
    // once (and acks its own renewal: 1 of the 3 needed).
    expected.extend(renewals(4, 3, 2, p, true));
    assert_eq!(out, expected);
    assert_eq!(lease_acks(&mut s, at(5), 2, &[1]), vec![]);
    let until = at(4) + cfg(1).lease;
    assert_eq!(
        lease_acks(&mut s, at(6), 2, &[2]),
        vec![
            reply(1, LockReply::Granted { fence: f, lease_until_us: until.as_micros() }),
            ev(NtEvent::Lock(LockEvent::Granted { client: c(1), fence: f, waited: ms(6), lease_until: until })),
            ev(NtEvent::Entered { fence: f }),
        ]
    );
    assert_eq!(s.stored().in_use(), p, "the new epoch is stored as in use before it grants");
    assert_eq!(s.token, Some(Token { epoch: p, counter: 1 }));
    assert_eq!((s.position, s.request, s.last), (Some(0), None, Last::Parent(n(4))));
}

#[test]
fn regeneration_window_expiry_suspects_the_silent_and_completes_with_a_majority() {
    let mut s = regenerating();
    let p = proposal(2, 3);
    assert_eq!(ack(&mut s, at(2), 1, p), vec![]);
    assert_eq!(ack(&mut s, at(3), 2, p), vec![]);
    // n4 (our next) is silent: suspected, and so never handed the token.
    let out = timeout(&mut s, at(20));
    assert_eq!(
        out,
        vec![
            ev(NtEvent::Suspected { node: n(4) }),
            persisted(&s),
            ev(NtEvent::Epoch(p)),
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
fn regeneration_without_a_majority_gives_up_and_retries_after_a_random_delay() {
    // (+) 5 sites, n3 and n4 suspected, n2 silent: n5 + n1 is no majority.
    let mut s = waiting(5, 5, 2, 1);
    s.detect.suspected.extend([n(3), n(4)]);
    s.start_regeneration(T0, Mech::M2, T0);
    let p = proposal(2, 5);
    let mut expected = vec![persisted(&s)];
    expected.extend([1, 2, 3, 4].map(|i| send(i, Body::Regenerate { epoch: p })));
    assert_eq!(drain(&mut s), expected);
    assert_eq!(ack(&mut s, at(2), 1, p), vec![]);
    assert_eq!(timeout(&mut s, at(20)), vec![ev(NtEvent::Suspected { node: n(2) })]);
    assert_eq!((s.token.is_some(), &s.recovery), (false, &Recovery::Idle));
    // Between W(1+ρ)/(1−ρ) and twice that, so two proposers stop colliding.
    let retry = s.timers.get(Timer::CommitWait).expect("a retry");
    assert!(retry >= at(70) && retry <= at(120), "retry at {retry}");
}

#[test]
fn regeneration_nack_from_a_token_holder_sends_it_a_direct_request() {
    let mut s = regenerating();
    let out = deliver(&mut s, at(3), 1, Body::RegenerateNack { epoch: proposal(2, 3), why: Nack::Holder });
    assert_eq!(out, vec![send(1, direct(3, 2, 0))]);
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: T0, to: n(1) });
    assert_eq!(s.timers.get(Timer::Window), Some(at(53)));
    assert_eq!(s.token, None);
}

#[test]
fn regeneration_refused_by_a_higher_promise_jumps_past_it_next_time() {
    let mut s = regenerating();
    let higher = proposal(3, 1);
    let out = deliver(&mut s, at(3), 2, nack(proposal(2, 3), Refusal::Promised { value: higher }));
    assert_eq!(out, vec![persisted(&s)], "the floor rises past the refusal");
    assert_eq!(s.stored().floor(), higher);
    assert_eq!(s.recovery, Recovery::Idle);
    let retry = s.timers.get(Timer::CommitWait).expect("a retry");
    assert!(retry >= at(53) && retry <= at(103), "retry at {retry}");
    s.request = Some(2);
    s.start_regeneration(retry, Mech::M3, retry);
    assert!(drain(&mut s).contains(&send(1, Body::Regenerate { epoch: proposal(4, 3) })));
}

#[test]
fn regeneration_complete_only_after_its_deadline_is_abandoned() {
    // A pause: the window timer fires 70 ms late, past the proposal's
    // deadline W·(1−ρ) = 50 ms; its promises may have run out: no token.
    let mut s = regenerating();
    let p = proposal(2, 3);
    ack(&mut s, at(2), 1, p);
    ack(&mut s, at(3), 2, p);
    let out = timeout(&mut s, at(70));
    assert_eq!(out, vec![ev(NtEvent::Suspected { node: n(4) })]);
    assert_eq!((s.token, s.stored().in_use()), (None, E));
    assert_eq!(s.recovery, Recovery::Idle);
}

#[test]
fn regeneration_proposals_encode_the_proposer_slot_and_a_new_round() {
    let proposed = |s: &mut NtNode| {
        s.request = Some(1);
        s.start_regeneration(T0, Mech::M3, T0);
        match &s.recovery {
            Recovery::Regen { proposal, .. } => *proposal,
            other => panic!("not regenerating: {other:?}"),
        }
    };
    let mut s = site(4, 3, 2);
    assert_eq!(proposed(&mut s), proposal(2, 3), "a new round, in n3's slot");
    let mut s = site(4, 3, 2);
    see_epoch(&mut s, proposal(5, 4));
    let p = proposed(&mut s);
    assert_eq!((p, ::durable::promise::slot_of(p)), (proposal(6, 3), 2));
}

#[test]
fn regeneration_waits_out_the_restart_window_and_a_random_delay() {
    let mut s = restarted(4, 3, 2, stored_in_use(E));
    drain(&mut s);
    s.join.phase = Phase::Running;
    s.request = Some(1);
    s.start_regeneration(at(10), Mech::M3, at(10));
    assert_eq!(drain(&mut s), vec![], "no proposal in the restart window");
    let first = s.timers.get(Timer::CommitWait).expect("a later try");
    assert!(first >= at(45) && first <= at(90), "first proposal at {first}");
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
            persisted(&h),
            ev(NtEvent::Epoch(newer)),
            ev(NtEvent::TokenSuperseded { epoch: E }),
            ev(NtEvent::HasToken(false)),
            reply(
                1,
                LockReply::LockLost { reason: "the token was regenerated elsewhere (this node was suspected)".into() }
            ),
            // The hold itself lasts until its lease's end (the client
            // may run until then).
            send_e(2, newer, Body::IAmAlive { position: None, next: None }),
            // c2 still waits: a new request, through M3 (a root without a
            // token has nobody to ask along the tree).
            ev(NtEvent::RecoveryStarted { mech: Mech::M3 }),
            send_e(2, newer, Body::SearchQueue { accesses: 1 }),
            send_e(3, newer, Body::SearchQueue { accesses: 1 }),
            // c2 waits under the new epoch: a lease renewal for it at once.
            send_e(2, newer, Body::LeaseRenew { round: 2, epoch: newer, holding: false }),
            send_e(3, newer, Body::LeaseRenew { round: 2, epoch: newer, holding: false }),
        ]
    );
    assert_eq!((h.token, h.position, h.next), (None, None, None));
    assert_eq!(h.holder(), Some((c(1), fence(E, 1))), "until its lease ends");
    let out = timeout(&mut h, lease_end());
    assert!(out.contains(&released_event(1, fence(E, 1), 45, ReleaseHow::Lost)), "{out:?}");
    assert_eq!(h.holder(), None);
}

#[test]
fn epoch_stale_token_is_discarded_and_a_site_without_position_searches_m3() {
    let mut s = waiting(4, 3, 2, 1);
    let newer = proposal(2, 2);
    see_epoch(&mut s, newer);
    let out = deliver(&mut s, at(1), 1, token(E, 3, 2));
    // The sender is behind: it is told the newer epoch at once.
    let mut expected = vec![
        send_e(1, newer, Body::AreYouAlive),
        ev(NtEvent::StaleToken { epoch: E }),
        ev(NtEvent::RecoveryStarted { mech: Mech::M3 }),
    ];
    expected.extend([1, 2, 4].map(|i| send_e(i, newer, Body::SearchQueue { accesses: 0 })));
    assert_eq!(out, expected);
    assert_eq!(s.token, None);
    assert_eq!(s.request, Some(2));
}

#[test]
fn epoch_stale_token_at_a_site_with_position_searches_m2() {
    let mut s = committed(4, 3, 2, 1, Some(2), &[2, 1]);
    let newer = proposal(2, 2);
    see_epoch(&mut s, newer);
    let out = deliver(&mut s, at(1), 2, token(E, 3, 2));
    let mut expected = vec![
        send_e(2, newer, Body::AreYouAlive),
        ev(NtEvent::StaleToken { epoch: E }),
        ev(NtEvent::RecoveryStarted { mech: Mech::M2 }),
    ];
    expected.extend([1, 2, 4].map(|i| send_e(i, newer, Body::SearchPrev { position: 2 })));
    assert_eq!(out, expected);
    assert_eq!(s.token, None);
}

#[test]
fn epoch_a_token_below_a_promise_is_refused() {
    // Promises are never withdrawn: a site that promised p refuses the old
    // epoch's token (a falsely suspected holder's), costing a regeneration.
    let mut s = waiting(4, 3, 2, 1);
    let p = proposal(2, 2);
    deliver(&mut s, at(1), 2, Body::Regenerate { epoch: p });
    let out = deliver(&mut s, at(2), 1, token(E, 3, 2));
    assert_eq!(out[0], ev(NtEvent::StaleToken { epoch: E }));
    assert_eq!(s.token, None);
}

#[test]
fn epoch_a_recovered_fresh_node_refuses_tokens_at_or_below_what_it_recovered() {
    // It cannot know which counts of those epochs its wiped life granted.
    let mut s = waiting(4, 3, 2, 1);
    s.promise = PromiseNode::new(s.promise.config().clone(), Some(Promises::recovered_with(E)), Instant::ZERO).unwrap();
    let out = deliver_msg(&mut s, at(1), 1, INC, Msg { epoch: 0, body: token(E, 3, 2) });
    assert_eq!(out[0], ev(NtEvent::StaleToken { epoch: E }));
    assert_eq!(s.token, None);
    // A regeneration above it is accepted as usual.
    let p = proposal(2, 1);
    let out = deliver_msg(&mut s, at(2), 1, INC, Msg { epoch: 0, body: token(p, 0, 2) });
    assert_eq!(s.token, Some(Token { epoch: p, counter: 0 }), "{out:?}");
}

#[test]
fn epoch_a_message_from_a_site_behind_is_answered_with_the_newer_epoch() {
    // A holder the cluster regenerated without may never be contacted by
    // the new queue: whoever hears from it tells it (it drops its token on
    // reading the answer).
    let mut s = site(4, 3, 2);
    let newer = proposal(2, 2);
    see_epoch(&mut s, newer);
    let out = deliver(&mut s, at(1), 1, Body::Unlink { seq: 4 });
    assert_eq!(out, vec![send_e(1, newer, Body::AreYouAlive)]);
    // An answer to an old probe too (it unsuspects the sender, and the
    // sender must learn the newer epoch); a probe is not answered twice:
    // its IAmAlive already carries the epoch.
    assert_eq!(
        deliver(&mut s, at(2), 1, Body::IAmAlive { position: None, next: None }),
        vec![send_e(1, newer, Body::AreYouAlive)]
    );
    assert_eq!(
        deliver(&mut s, at(3), 1, Body::AreYouAlive),
        vec![send_e(1, newer, Body::IAmAlive { position: None, next: None })]
    );
}

#[test]
fn epoch_a_holder_answering_a_restarted_site_is_told_the_newer_epoch() {
    // Seed 1747 of the majority-down sweep: a stale holder cut off during a
    // regeneration answered the Hellos of sites that then restarted; its
    // HelloAck carried the old epoch, and nobody else ever wrote to it.
    let mut s = restarted(4, 3, 2, stored_in_use(proposal(3, 3)));
    drain(&mut s);
    let ack = Msg { epoch: E, body: Body::HelloAck { nonce: s.join.nonce, running: true, values: None } };
    let out = deliver_msg(&mut s, at(1), 2, INC, ack);
    assert_eq!(out[0], send_e(2, proposal(3, 3), Body::AreYouAlive));
}

#[test]
fn peer_values_out_of_range_are_refused_and_change_nothing() {
    let mut s = holder(4, 1, 2);
    let before = s.clone();
    let absurd = Msg { epoch: u64::MAX, body: Body::AreYouAlive };
    assert_eq!(deliver_msg(&mut s, at(1), 2, INC, absurd), vec![ev(NtEvent::Refused { from: n(2), reason: "epoch" })]);
    // A request from node 99 must not send the token to nowhere.
    assert_eq!(
        deliver(&mut s, at(2), 2, request(99, 1, 0)),
        vec![ev(NtEvent::Refused { from: n(2), reason: "non_member" })]
    );
    assert_eq!(
        deliver(&mut s, at(3), 2, Body::Regenerate { epoch: u64::MAX }),
        vec![ev(NtEvent::Refused { from: n(2), reason: "value" })]
    );
    assert_eq!(
        deliver(&mut s, at(4), 2, request(3, 1, u32::MAX)),
        vec![ev(NtEvent::Refused { from: n(2), reason: "value" })]
    );
    assert_eq!(s, before);
}
