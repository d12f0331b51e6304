//! Recovery: M1, M2, M3.a, the M3.b election, rules I-III, and the seed's worked example.

use super::*;

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
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M1, started: at(60), to: n(1) });
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
    s.detect.suspected.insert(n(4));
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
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M2, started: T0, to: n(2) });
    assert_eq!(s.timers.get(Timer::Window), Some(at(64)));
}

#[test]
fn m2_without_a_smaller_position_regenerates_asking_every_site() {
    let mut s = m2_searching();
    deliver(&mut s, at(2), 1, search_ack(None, false, false, None));
    deliver(&mut s, at(3), 2, search_ack(Some(7), false, false, None));
    let out = deliver(&mut s, at(4), 3, search_ack(None, false, false, None));
    // (safety) Phase one goes to the suspected n4 too.
    // The proposal is stored before it is sent.
    let p = proposal(2, 5);
    let mut expected = vec![persisted(&s)];
    expected.extend([1, 2, 3, 4].map(|i| send(i, Body::Regenerate { epoch: p })));
    assert_eq!(out, expected);
    assert_eq!(s.recovery, Recovery::Regen { mech: Mech::M2, started: T0, proposal: p, waiting: ids(&[1, 2, 3]) });
}

// ===== M3.a ===============================================================

/// n4 of 4 (3 accesses so far) whose Commit timer expired at T0 + 50 ms:
/// it is an M3 candidate with request 2.
fn m3_candidate() -> NtNode {
    let mut s = waiting(4, 4, 2, 1);
    s.grants.accesses = 3;
    let out = timeout(&mut s, at(50));
    let sq = Body::SearchQueue { accesses: 3 };
    let mut expected = vec![ev(NtEvent::RecoveryStarted { mech: Mech::M3 })];
    expected.extend([1, 2, 3].map(|i| send(i, sq.clone())));
    assert_eq!(out, expected);
    assert_eq!((s.seq, s.request), (2, Some(2)), "M3 abandons request 1");
    assert_eq!(s.election.best_candidate, Some((3, n(4), at(90))));
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
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: at(50), to: n(2) });
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
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: at(50), to: n(2) });
}

#[test]
fn m3a_iii_nobody_queued_and_no_token_regenerates() {
    let mut s = m3_candidate();
    deliver(&mut s, at(52), 1, search_ack(None, false, false, None));
    deliver(&mut s, at(53), 2, search_ack(None, true, false, Some(0)));
    let out = deliver(&mut s, at(54), 3, search_ack(None, false, false, None));
    let p = proposal(2, 4);
    let mut expected = vec![persisted(&s)];
    expected.extend([1, 2, 3].map(|i| send(i, Body::Regenerate { epoch: p })));
    assert_eq!(out, expected);
    assert_eq!(s.recovery, Recovery::Regen { mech: Mech::M3, started: at(50), proposal: p, waiting: ids(&[1, 2, 3]) });
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
    s.grants.accesses = accesses;
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
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: T0, to: n(3) });
    assert_eq!(s.timers.get(Timer::Window), Some(at(53)));
    // Keeps next; last per rule III (waiting without position: last = next).
    assert_eq!(s.next, Some((n(4), 6)));
    assert_eq!(s.last, Last::Parent(n(4)));
    assert_eq!(s.election.best_candidate, Some((2, n(3), at(43))));
}

#[test]
fn m3b_a_better_candidate_heard_before_our_own_search_wins_at_once() {
    // n2 waits (not yet a candidate) and hears n3's SearchQueue first.
    let mut s = waiting(4, 2, 2, 1);
    s.grants.accesses = 5;
    let out = deliver(&mut s, at(1), 3, Body::SearchQueue { accesses: 2 });
    assert_eq!(out, vec![send(3, search_ack(None, false, false, None))]);
    assert_eq!(s.election.best_candidate, Some((2, n(3), at(41))));
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
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: at(5), to: n(3) });
}

#[test]
fn m3b_equal_accesses_the_higher_id_wins() {
    let mut s = m3b_candidate(0);
    // n1 has as many accesses and a lower id: we stay a candidate.
    let out = deliver(&mut s, at(2), 1, Body::SearchQueue { accesses: 0 });
    assert_eq!(out, vec![send(1, search_ack(None, true, false, Some(0)))]);
    assert!(matches!(s.recovery, Recovery::Search { mech: Mech::M3, .. }));
    assert_eq!(s.election.best_candidate, Some((0, n(2), at(40))));
    // n3: as many accesses, a higher id: we lose.
    let out = deliver(&mut s, at(3), 3, Body::SearchQueue { accesses: 0 });
    assert_eq!(out, vec![send(3, search_ack(None, true, false, Some(0))), send(3, direct(2, 3, 0))]);
    assert_eq!(s.recovery, Recovery::Linking { mech: Mech::M3, started: T0, to: n(3) });
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
    assert_eq!(s.election.best_candidate, Some((0, n(4), at(40))));
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
    assert_eq!(s.election.best_candidate, Some((1, n(4), at(41))));
    // 4 t_msg later the best is forgotten: any new candidate is applied.
    assert_eq!(deliver(&mut s, at(41), 5, Body::SearchQueue { accesses: 9 }), ack(5));
    assert_eq!(s.last, Last::Parent(n(5)));
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
    d.grants.accesses = 2; // A (0 accesses) wins the election: fewer accesses.
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
        let mut want = vec![send(SD, answer)];
        if site.me == n(SG) {
            // G's client still holds: its lease renewal is due.
            want.extend(renewals(10, SG, 2, E, true));
        }
        assert_eq!(deliver(site, at(111), SD, sq_d.clone()), want, "n{}", site.me.0);
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
    assert_eq!(d.recovery, Recovery::Linking { mech: Mech::M3, started: at(110), to: n(SA) });
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
    assert_eq!(a.recovery, Recovery::Linking { mech: Mech::M3, started: at(110), to: n(SH) });
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
