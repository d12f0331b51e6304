//! Join: the Hello handshake, the first token, fresh-node recovery (`node/join.rs`).

use ::durable::promise::Values;

use super::*;
use crate::node::state::DEFERRED_MAX;

/// `HelloAck` as a site that is not yet running and stored nothing answers.
fn fresh_ack(nonce: u64) -> Msg {
    Msg { epoch: 0, body: Body::HelloAck { nonce, running: false, values: None } }
}

fn values(e: u64) -> Option<Values> {
    Some(Values { in_use: e, threshold: e, floor: e })
}

fn hellos(s: &NtNode, to: &[u32]) -> Vec<OutputOf<NtNode>> {
    to.iter().map(|i| send_e(*i, s.max_epoch(), Body::Hello { nonce: s.join.nonce })).collect()
}

#[test]
fn startup_new_stores_its_fresh_state_then_broadcasts_hello() {
    let mut s = fresh(3, 2, 2);
    let mut expected = vec![persisted(&s)];
    expected.extend(hellos(&s, &[1, 3]));
    assert_eq!(drain(&mut s), expected, "the file says 'unrecovered' before the node speaks");
    assert!(!s.stored().recovered());
    assert_eq!(s.poll_timeout(), Some(at(20)), "Join fires after 2 t_msg");
    assert_eq!(s.timers.get(Timer::Recover), Some(at(45)), "recovery rounds start after the restart window");
    assert_eq!(s.join.phase, Phase::Joining { fresh: ids(&[2]), running_seen: false, deferred: vec![] });
    assert_eq!(s.last, Last::Unknown);
    assert!(!s.is_running());
}

#[test]
fn startup_single_site_makes_its_first_token_by_a_regeneration_round() {
    let mut s = fresh(1, 1, 2);
    let out = drain(&mut s);
    assert_eq!(out, vec![persisted(&s), ev(NtEvent::Joined { bootstrap: true })]);
    assert!(s.bootstrap_search && s.token.is_none(), "no token is chosen locally");
    // Recovery (nobody else to ask), then the search, then the proposal
    // after the restart window and its random delay: its own promise is a
    // majority of one.
    let mut events = Vec::new();
    while s.token.is_none() {
        let t = s.poll_timeout().expect("a timer");
        assert!(t < at(200), "no token by {t}");
        events.extend(timeout(&mut s, t));
    }
    assert!(events.contains(&ev(NtEvent::StateRecovered { max: 0 })));
    assert!(events.contains(&ev(NtEvent::Regenerated { epoch: E })));
    assert!(!events.iter().any(|o| matches!(o, Output::Event(NtEvent::RecoveryStarted { .. }))), "no failure");
    assert_eq!((s.token, s.position, s.stored().in_use()), (Some(Token { epoch: E, counter: 0 }), Some(0), E));
}

#[test]
fn startup_hello_ack_running_joins_as_a_new_life() {
    let mut s = fresh(3, 2, 2);
    drain(&mut s);
    let ack = Body::HelloAck { nonce: s.join.nonce, running: true, values: values(E) };
    let out = deliver(&mut s, at(3), 1, ack);
    // It adopts the cluster's epoch in use (stored), then joins.
    assert_eq!(out, vec![persisted(&s), ev(NtEvent::Epoch(E)), ev(NtEvent::Joined { bootstrap: false })]);
    assert!(s.is_running());
    // (safety) A new life knows nothing of the tree: DeadEnd to requests,
    // its own first request through M3.
    assert_eq!(s.last, Last::Unknown);
    assert_eq!(s.token, None);
    assert!(!s.stored().recovered(), "a join-time answer is no recovery: it was asked before the window ended");
}

#[test]
fn startup_all_fresh_answers_start_a_new_cluster_whose_root_searches() {
    let mut s1 = fresh(3, 1, 2);
    drain(&mut s1);
    let nonce = s1.join.nonce;
    assert_eq!(deliver_msg(&mut s1, at(2), 2, INC, fresh_ack(nonce)), vec![]);
    let nonce = s1.join.nonce;
    let out = deliver_msg(&mut s1, at(3), 3, INC, fresh_ack(nonce));
    assert_eq!(out, vec![ev(NtEvent::Joined { bootstrap: true })]);
    // (safety) No site starts holding a token: the root searches (and will
    // regenerate) once it has recovered.
    assert_eq!((s1.token, s1.last, s1.bootstrap_search), (None, Last::Root, true));

    let mut s3 = fresh(3, 3, 2);
    drain(&mut s3);
    let out = deliver_msg(&mut s3, at(1), 2, INC, Msg { epoch: 0, body: Body::Hello { nonce: 5 } });
    assert_eq!(out, vec![send_e(2, 0, Body::HelloAck { nonce: 5, running: false, values: None })]);
    let nonce = s3.join.nonce;
    let out = deliver_msg(&mut s3, at(2), 1, INC, fresh_ack(nonce));
    assert_eq!(out, vec![ev(NtEvent::Joined { bootstrap: true })]);
    assert_eq!((s3.last, s3.token, s3.position), (Last::Parent(n(1)), None, None));
}

#[test]
fn startup_defers_other_messages_and_handles_them_after_joining() {
    let mut s = fresh(3, 2, 2);
    drain(&mut s);
    let req = Msg { epoch: 0, body: request(3, 1, 0) };
    assert_eq!(deliver_msg(&mut s, at(1), 3, INC, req.clone()), vec![]);
    assert_eq!(
        s.join.phase,
        Phase::Joining { fresh: ids(&[2]), running_seen: false, deferred: vec![(n(3), INC, req)] }
    );
    let nonce = s.join.nonce;
    assert_eq!(deliver_msg(&mut s, at(2), 1, INC, fresh_ack(nonce)), vec![]);
    // The last fresh answer: a new cluster (last = n1), then the deferred
    // request is forwarded along the new tree (path reversal included).
    let nonce = s.join.nonce;
    let out = deliver_msg(&mut s, at(3), 3, INC, fresh_ack(nonce));
    assert_eq!(out, vec![ev(NtEvent::Joined { bootstrap: true }), send_e(1, 0, request(3, 1, 1))]);
    assert_eq!(s.last, Last::Parent(n(3)));
}

#[test]
fn startup_minority_of_fresh_answers_at_the_join_timer_asks_again_then_a_majority_starts() {
    let mut s = fresh(5, 2, 2);
    drain(&mut s);
    let out = timeout(&mut s, at(20));
    assert_eq!(out, hellos(&s, &[1, 3, 4, 5]));
    assert!(!s.is_running(), "a minority must not start a cluster");
    assert_eq!(s.poll_timeout(), Some(at(40)));
    for from in [3, 4] {
        let nonce = s.join.nonce;
        assert_eq!(deliver_msg(&mut s, at(25), from, INC, fresh_ack(nonce)), vec![]);
    }
    // 3 fresh of 5 (n2, n3, n4) is a majority: a new cluster at the timer.
    assert_eq!(timeout(&mut s, at(40)), vec![ev(NtEvent::Joined { bootstrap: true })]);
    assert_eq!(s.last, Last::Parent(n(1)));
    assert_eq!(s.poll_timeout(), Some(at(45)), "only the recovery round is left");
}

#[test]
fn startup_hello_is_answered_with_what_is_stored_in_every_phase() {
    let mut s = site(4, 2, 2);
    let out = deliver_msg(&mut s, at(1), 3, INC, Msg { epoch: 0, body: Body::Hello { nonce: 9 } });
    // (The sender is behind our epoch: it is told, as by any message.)
    assert_eq!(
        out,
        vec![send(3, Body::AreYouAlive), send(3, Body::HelloAck { nonce: 9, running: true, values: values(E) })]
    );
    // A fresh node has promised nothing in this life: `None`.
    let mut f = fresh(4, 2, 2);
    drain(&mut f);
    let out = deliver_msg(&mut f, at(1), 3, INC, Msg { epoch: 0, body: Body::Hello { nonce: 9 } });
    assert_eq!(out, vec![send_e(3, 0, Body::HelloAck { nonce: 9, running: false, values: None })]);
}

#[test]
fn startup_a_fresh_node_recovers_from_a_majority_of_answers_after_its_restart_window() {
    let mut s = fresh(4, 2, 2);
    drain(&mut s);
    let joined = Body::HelloAck { nonce: s.join.nonce, running: true, values: values(E) };
    deliver(&mut s, at(1), 1, joined);
    // The restart window ends: a recovery round with a fresh nonce.
    let out = timeout(&mut s, at(50));
    assert_eq!(out, hellos(&s, &[1, 3, 4]));
    let nonce = s.join.nonce;
    let answer = |v| Body::HelloAck { nonce, running: true, values: v };
    // An answer to an older nonce does not count.
    assert_eq!(
        deliver(&mut s, at(51), 3, Body::HelloAck { nonce: nonce ^ 1, running: true, values: values(E) }),
        vec![]
    );
    assert_eq!(deliver(&mut s, at(52), 1, answer(values(E))), vec![]);
    let higher = proposal(3, 4);
    // ⌊(N−1)/2⌋ + 1 = 2 other nodes answering values: recovered at the
    // highest value heard, stored before anything else.
    let out = deliver(&mut s, at(53), 3, answer(Some(Values { in_use: E, threshold: higher, floor: higher })));
    assert_eq!(out, vec![persisted(&s), ev(NtEvent::StateRecovered { max: higher })]);
    assert!(s.stored().recovered());
    assert_eq!((s.stored().recovered_max(), s.stored().threshold()), (higher, higher));
    assert_eq!(s.timers.get(Timer::Recover), None);
}

#[test]
fn startup_an_unrecovered_node_stays_out_of_the_queue() {
    let mut s = fresh(3, 2, 2);
    drain(&mut s);
    let nonce = s.join.nonce;
    deliver(&mut s, at(1), 1, Body::HelloAck { nonce, running: true, values: values(E) });
    // It could accept no token: it does not ask for one.
    assert_eq!(acquire(&mut s, at(2), 1), vec![]);
    assert_eq!(s.request, None);
    timeout(&mut s, at(50));
    let nonce = s.join.nonce;
    deliver(&mut s, at(51), 1, Body::HelloAck { nonce, running: true, values: values(E) });
    // Recovered: the waiting client's request goes out (a new life: M3).
    let out = deliver(&mut s, at(52), 3, Body::HelloAck { nonce, running: true, values: values(E) });
    assert_eq!(
        out,
        vec![
            persisted(&s),
            ev(NtEvent::StateRecovered { max: E }),
            ev(NtEvent::RecoveryStarted { mech: Mech::M3 }),
            send(1, Body::SearchQueue { accesses: 0 }),
            send(3, Body::SearchQueue { accesses: 0 }),
            // Recovered, it renews a lease for its waiting client.
            send(1, Body::LeaseRenew { round: 1, epoch: E, holding: false }),
            send(3, Body::LeaseRenew { round: 1, epoch: E, holding: false }),
        ]
    );
}

#[test]
fn startup_clients_queued_while_joining_ask_along_the_new_tree() {
    let mut s2 = restarted(2, 2, 2, stored_in_use(E));
    drain(&mut s2);
    assert_eq!(acquire(&mut s2, at(1), 1), vec![]);
    let nonce = s2.join.nonce;
    let out = deliver_msg(&mut s2, at(2), 1, INC, fresh_ack(nonce));
    // n1 answered from epoch 0, below ours: it is told the newer epoch.
    assert_eq!(
        out,
        vec![
            send(1, Body::AreYouAlive),
            ev(NtEvent::Joined { bootstrap: true }),
            send(1, request(2, 1, 0)),
            send(1, Body::LeaseRenew { round: 1, epoch: E, holding: false }),
        ]
    );
}

#[test]
fn startup_a_new_life_makes_its_first_request_through_m3() {
    let mut s = restarted(3, 2, 2, stored_in_use(E));
    drain(&mut s);
    let nonce = s.join.nonce;
    deliver(&mut s, at(1), 1, Body::HelloAck { nonce, running: true, values: values(E) });
    assert_eq!(
        acquire(&mut s, at(2), 1),
        vec![
            ev(NtEvent::RecoveryStarted { mech: Mech::M3 }),
            send(1, Body::SearchQueue { accesses: 0 }),
            send(3, Body::SearchQueue { accesses: 0 }),
            send(1, Body::LeaseRenew { round: 1, epoch: E, holding: false }),
            send(3, Body::LeaseRenew { round: 1, epoch: E, holding: false }),
        ]
    );
    assert_eq!((s.seq, s.request), (2, Some(2)));
}

#[test]
fn startup_join_state_counts_answers_until_a_majority_has_answered() {
    let mut s = fresh(3, 2, 2);
    drain(&mut s);
    assert_eq!(s.join_state(), JoinState::Joining { answered: 1, of: 3 });
    let ack = fresh_ack(s.join.nonce).body;
    deliver(&mut s, at(3), 1, ack);
    assert_eq!(s.join_state(), JoinState::Joining { answered: 2, of: 3 });
    timeout(&mut s, at(20));
    assert_eq!(s.join_state(), JoinState::Joined, "a majority answered: joined at the Join timer");
}

#[test]
fn startup_joining_buffer_is_bounded_and_refuses_beyond_it() {
    let mut s = fresh(3, 2, 2);
    drain(&mut s);
    for i in 0..DEFERRED_MAX {
        assert_eq!(deliver(&mut s, at(1), 1, Body::Unlink { seq: i as u64 }), vec![]);
    }
    let out = deliver(&mut s, at(1), 3, Body::Unlink { seq: 0 });
    assert_eq!(out, vec![ev(NtEvent::Refused { from: n(3), reason: "joining_buffer_full" })]);
    let Phase::Joining { deferred, .. } = &s.join.phase else { panic!("still joining") };
    assert_eq!(deferred.len(), DEFERRED_MAX);
}
