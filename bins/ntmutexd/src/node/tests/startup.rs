//! Start-up: the Hello handshake and the first token.

use super::*;

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
    let out = deliver(&mut s, at(3), 1, Body::HelloAck { nonce: 7, running: true, values: s.promise.values() });
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
    let out = deliver_msg(&mut s3, at(1), 2, INC, Msg { epoch: 0, body: Body::Hello { nonce: 7 } });
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
    deliver(&mut s, at(1), 1, Body::HelloAck { nonce: 7, running: true, values: s.promise.values() });
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
