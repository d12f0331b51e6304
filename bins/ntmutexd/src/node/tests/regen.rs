//! Regeneration and epochs.

use super::*;

// ===== regeneration =======================================================

#[test]
fn regenerate_at_a_token_holder_is_refused_and_the_token_kept() {
    let mut h = holder(4, 1, 2);
    let p = proposal(2, 3);
    let out = deliver(&mut h, at(1), 3, Body::Regenerate { epoch: p });
    assert_eq!(out, vec![send(3, Body::RegenerateNack { epoch: p, why: Nack::Holder })]);
    assert_eq!(h.token, Some(Token { epoch: E, counter: 0 }));
    assert_eq!(h.max_epoch, E);
}

#[test]
fn regenerate_with_a_proposal_above_max_epoch_is_recorded_and_acked() {
    let mut s = site(4, 2, 2);
    let p = proposal(2, 3);
    let out = deliver(&mut s, at(1), 3, Body::Regenerate { epoch: p });
    assert_eq!(out, vec![ev(NtEvent::Epoch(p)), send_e(3, p, Body::RegenerateAck { epoch: p })]);
    assert_eq!(s.max_epoch, p);
}

#[test]
fn regenerate_not_above_a_newer_known_epoch_is_refused() {
    let mut s = site(4, 2, 2);
    s.max_epoch = proposal(3, 1);
    let p = proposal(2, 3);
    let out = deliver(&mut s, at(1), 3, Body::Regenerate { epoch: p });
    assert_eq!(out, vec![send_e(3, proposal(3, 1), Body::RegenerateNack { proposal: p, has_token: false })]);
}

#[test]
fn regenerate_same_proposal_already_adopted_from_another_site_is_acked() {
    let mut s = site(4, 2, 2);
    let p = proposal(2, 3);
    s.max_epoch = p;
    // In n3's slot: n3's own proposal, learned from an acker's message.
    assert_eq!(
        deliver(&mut s, at(1), 3, Body::Regenerate { epoch: p }),
        vec![send_e(3, p, Body::RegenerateAck { epoch: p })]
    );
    // The same number from n4 is not n4's proposal.
    assert_eq!(
        deliver(&mut s, at(1), 4, Body::Regenerate { epoch: p }),
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
    assert_eq!(drain(&mut s), [1, 2, 4].map(|i| send(i, Body::Regenerate { epoch: p })).to_vec());
    s
}

#[test]
fn regenerate_concurrent_proposals_the_higher_wins() {
    let mut s = regenerating();
    let lower = proposal(2, 2);
    assert_eq!(
        deliver(&mut s, at(1), 2, Body::Regenerate { epoch: lower }),
        vec![send(2, Body::RegenerateNack { proposal: lower, has_token: false })]
    );
    let higher = proposal(3, 2);
    let out = deliver(&mut s, at(2), 2, Body::Regenerate { epoch: higher });
    assert_eq!(out, vec![ev(NtEvent::Epoch(higher)), send_e(2, higher, Body::RegenerateAck { epoch: higher })]);
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
        deliver_msg(s, t, from, INC, Msg { epoch: p, body: Body::RegenerateAck { epoch: p } })
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
    let ack = Msg { epoch: p, body: Body::RegenerateAck { epoch: p } };
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
    assert_eq!(drain(&mut s), [1, 2, 3, 4].map(|i| send(i, Body::Regenerate { epoch: p })).to_vec());
    let out = deliver_msg(&mut s, at(2), 1, INC, Msg { epoch: p, body: Body::RegenerateAck { epoch: p } });
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
