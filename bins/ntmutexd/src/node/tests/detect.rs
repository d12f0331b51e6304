//! Failure detection: liveness checks, suspicion, restarted peers.

use super::*;

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
    assert!(s.detect.suspected.is_empty());
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

// ===== restarts ===========================================================

#[test]
fn restart_a_message_from_a_newer_life_of_our_next_clears_next() {
    let mut s = waiting(4, 2, 2, 1);
    s.next = Some((n(3), 4));
    s.detect.peer_inc.insert(n(3), INC);
    let out = deliver_msg(&mut s, at(1), 3, Incarnation(2), Msg { epoch: E, body: Body::Hello { nonce: 7 } });
    assert_eq!(out, vec![send(3, Body::HelloAck { nonce: 7, running: true, values: s.promise.values() })]);
    assert_eq!(s.next, None);
    assert_eq!(s.detect.peer_inc.get(&n(3)), Some(&Incarnation(2)));
}

#[test]
fn restart_a_newer_life_of_the_monitored_predecessor_starts_recovery() {
    let mut s = committed(4, 3, 2, 1, Some(2), &[2, 1]);
    s.detect.peer_inc.insert(n(2), INC);
    let out = deliver_msg(&mut s, at(1), 2, Incarnation(2), Msg { epoch: E, body: Body::Hello { nonce: 7 } });
    assert_eq!(
        out,
        vec![
            ev(NtEvent::RecoveryStarted { mech: Mech::M1 }),
            send(2, Body::AreYouAlive),
            send(2, Body::HelloAck { nonce: 7, running: true, values: s.promise.values() }),
        ]
    );
    assert_eq!(s.monitored, None);
}

#[test]
fn restart_a_message_from_an_older_life_is_ignored_and_told_the_life_known() {
    let mut s = site(4, 2, 2);
    s.detect.peer_inc.insert(n(3), Incarnation(2));
    let before = s.clone();
    // Ignored (nothing changes), but the sender is told which life of it we
    // know, so that a site whose clock is behind moves past it.
    let out = deliver_msg(&mut s, at(1), 3, INC, Msg { epoch: proposal(9, 3), body: request(3, 1, 0) });
    assert_eq!(out, vec![send(3, Body::Behind { known: Incarnation(2) })]);
    assert_eq!(s, before);
}

#[test]
fn behind_moves_a_site_to_a_new_life_above_the_one_known() {
    let mut s = busy_holder(3, 2, 2);
    let out = deliver(&mut s, at(5), 1, Body::Behind { known: Incarnation(7) });
    assert_eq!(s.incarnation(), Incarnation(8));
    assert_eq!(out[0], ev(NtEvent::NewLife { inc: Incarnation(8) }));
    // A new life knows nothing: the holder's client lost the lock, and the
    // handshake starts again.
    assert!(out.contains(&ev(NtEvent::TokenSuperseded { epoch: E })));
    assert!(out.contains(&send(1, Body::Hello { nonce: s.join.nonce })));
    assert_eq!((s.token, s.last, s.is_running()), (None, Last::Unknown, false));
    // About a life already left behind: nothing.
    assert_eq!(deliver(&mut s, at(6), 1, Body::Behind { known: Incarnation(7) }), vec![]);
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

#[test]
fn detect_a_lost_link_suspects_the_peer_and_probes_it() {
    let mut s = site(3, 1, 2);
    drain(&mut s);
    s.handle_link_lost(at(10), n(2));
    assert_eq!(drain(&mut s), vec![ev(NtEvent::Suspected { node: n(2) })]);
    assert!(s.detect.suspected.contains(&n(2)));
    assert_eq!(s.timers.get(Timer::Probe), Some(at(10) + s.probe_every()));
    // Non-members and itself are ignored.
    s.handle_link_lost(at(11), n(9));
    s.handle_link_lost(at(11), n(1));
    assert_eq!(drain(&mut s), vec![]);
}

#[test]
fn liveness_probes_ask_one_peer_in_turn_and_show_a_silent_one_down() {
    let mut s = site(4, 2, 2);
    s.cfg.liveness_every = Some(ms(20));
    s.timers.set(Timer::Liveness, at(20));
    // One peer per period, in turn: n1, n3, n4, n1, …
    assert_eq!(timeout(&mut s, at(20)), vec![send(1, Body::AreYouAlive)]);
    assert_eq!(timeout(&mut s, at(40)), vec![send(3, Body::AreYouAlive)]);
    assert_eq!(timeout(&mut s, at(60)), vec![send(4, Body::AreYouAlive)]);
    assert_eq!(s.timers.get(Timer::Liveness), Some(at(80)));
    // n1 and n4 answer (any message answers); n3 stays silent.
    let answer = Body::IAmAlive { position: None, next: None };
    assert_eq!(deliver(&mut s, at(61), 1, answer.clone()), vec![]);
    assert_eq!(deliver(&mut s, at(62), 4, answer.clone()), vec![]);
    // suspect_after (60 ms) after n3's probe: shown down, not suspected
    // (the protocol never reads it), and still asked in its turn.
    assert_eq!(timeout(&mut s, at(80)), vec![send(1, Body::AreYouAlive)]);
    assert!(s.peer_view_of(n(3)).up, "shown down only at the next round");
    assert_eq!(timeout(&mut s, at(100)), vec![send(3, Body::AreYouAlive)]);
    assert!(!s.peer_view_of(n(3)).up);
    assert!(s.peer_view_of(n(1)).up && s.peer_view_of(n(4)).up);
    assert!(s.detect.suspected.is_empty());
    // Its answer shows it up again.
    assert_eq!(deliver(&mut s, at(101), 3, answer), vec![]);
    assert!(s.peer_view_of(n(3)).up);
}

#[test]
fn no_liveness_probes_when_switched_off() {
    let mut s = site(4, 2, 2);
    assert_eq!(s.cfg.liveness_every, None);
    s.timers.set(Timer::Liveness, at(20));
    assert_eq!(timeout(&mut s, at(20)), vec![]);
    assert_eq!(s.timers.get(Timer::Liveness), None);
}

// ===== the transport's hint: a peer's process is gone ======================

fn gone(s: &mut NtNode, now: Instant, peer: u32) -> Vec<OutputOf<NtNode>> {
    s.handle_peer_unreachable(now, n(peer));
    drain(s)
}

#[test]
fn unreachable_monitored_predecessor_is_suspected_and_m1_asks_the_next_one_at_once() {
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    let out = gone(&mut s, at(5), 2);
    assert_eq!(
        out,
        vec![
            ev(NtEvent::Suspected { node: n(2) }),
            ev(NtEvent::RecoveryStarted { mech: Mech::M1 }),
            send(1, Body::AreYouAlive),
        ]
    );
    assert_eq!(s.recovery, Recovery::M1 { started: at(5), asking: n(1), rest: vec![] });
    assert_eq!(s.timers.get(Timer::Window), Some(at(25)), "2 t_msg per AreYouAlive");
}

#[test]
fn unreachable_peer_sends_a_request_without_a_commit_searching_at_once() {
    // Request 4 went along the last tree, maybe through 2; no Commit yet.
    let mut s = waiting(4, 3, 2, 4);
    let out = gone(&mut s, at(5), 2);
    assert_eq!(
        out,
        vec![
            ev(NtEvent::Suspected { node: n(2) }),
            ev(NtEvent::RecoveryStarted { mech: Mech::M3 }),
            // Broadcast (a new life of 2 would answer); not waited for.
            send(1, Body::SearchQueue { accesses: 0 }),
            send(2, Body::SearchQueue { accesses: 0 }),
            send(4, Body::SearchQueue { accesses: 0 }),
        ]
    );
    assert!(matches!(&s.recovery, Recovery::Search { waiting, .. } if !waiting.contains(&n(2))));
    assert_eq!(s.request, Some(5), "M3 abandons the old request's links");
    assert_eq!(s.timers.get(Timer::CommitWait), None);
}

#[test]
fn unreachable_peer_that_a_search_waits_for_is_not_waited_for() {
    let mut s = waiting(4, 3, 2, 4);
    let due = T0 + s.commit_timeout();
    let _ = timeout(&mut s, due);
    assert!(matches!(&s.recovery, Recovery::Search { waiting, .. } if waiting.len() == 3));
    let _ = deliver(
        &mut s,
        at(31),
        1,
        Body::SearchAck { position: None, has_next: false, has_token: false, candidate: None },
    );
    let _ = deliver(
        &mut s,
        at(31),
        4,
        Body::SearchAck { position: None, has_next: false, has_token: false, candidate: None },
    );
    // Only 2 is missing: its death closes the window now, and the token
    // is regenerated without it.
    let out = gone(&mut s, at(32), 2);
    assert!(out.contains(&ev(NtEvent::Suspected { node: n(2) })), "{out:?}");
    assert!(matches!(s.recovery, Recovery::Regen { ref waiting, .. } if !waiting.contains(&n(2))), "{:?}", s.recovery);
}

#[test]
fn unreachable_next_never_gets_the_token() {
    let mut s = busy_holder(4, 1, 2);
    let _ = deliver(&mut s, at(1), 2, request(2, 1, 0));
    assert_eq!(s.next.map(|(p, _)| p), Some(n(2)));
    let out = gone(&mut s, at(2), 2);
    assert_eq!(out, vec![ev(NtEvent::Suspected { node: n(2) })]);
    // At the release the token stays: its successors reconnect by M1/M2.
    let out = release(&mut s, at(3), 1);
    assert!(
        !out.iter().any(|o| matches!(o, Output::Send { msg: Msg { body: Body::Token { .. }, .. }, .. })),
        "{out:?}"
    );
    assert_eq!(s.next, None);
    assert!(s.token.is_some());
}

#[test]
fn unreachable_non_member_or_self_changes_nothing() {
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    let before = s.clone();
    assert_eq!(gone(&mut s, at(5), 9), vec![]);
    assert_eq!(gone(&mut s, at(5), 3), vec![]);
    assert_eq!(s, before);
}

#[test]
fn unreachable_site_we_are_linking_behind_makes_us_search_again_at_once() {
    // M1 sent 1 a Connection (2 had failed); 1's process is gone too.
    let mut s = committed(4, 3, 2, 4, Some(2), &[2, 1]);
    s.monitored = None;
    s.timers.cancel(Timer::AliveCheck);
    s.start_linking(at(60), Mech::M1, at(40), n(1));
    let out = gone(&mut s, at(61), 1);
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
    assert!(matches!(&s.recovery, Recovery::Search { mech: Mech::M2, waiting, .. } if !waiting.contains(&n(1))));
}
