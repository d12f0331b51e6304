//! The queue: Naimi-Trehel requests and the token, COMMIT, DeadEnd, the linking rule, client misuse.

use super::*;

// ===== base Naimi-Trehel ==================================================

#[test]
fn nt_acquire_at_the_idle_root_holder_grants_at_once_without_messages() {
    let mut s = holder(3, 1, 2);
    let f = fence(E, 1);
    assert_eq!(
        acquire(&mut s, T0, 1),
        vec![
            reply(1, LockReply::Granted { fence: f, lease_until_us: lease_end().as_micros() }),
            granted_event(1, f, 0),
            ev(NtEvent::Entered { fence: f })
        ]
    );
    assert_eq!(s.token, Some(Token { epoch: E, counter: 1 }));
    assert_eq!(s.holder(), Some((c(1), f)));
    assert_eq!((s.grants.accesses, s.grants.last_fence), (1, f));
}

#[test]
fn nt_acquire_at_a_non_root_requests_from_last_and_becomes_a_root() {
    let mut s = site(4, 3, 2);
    let mut expected = vec![send(1, request(3, 1, 0))];
    // A first request also renews the site's lease (reliability.md).
    expected.extend(renewals(4, 3, 1, E, false));
    assert_eq!(acquire(&mut s, T0, 1), expected);
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
    assert_eq!(acquire(&mut s, T0, 1), renewals(4, 2, 1, E, false));
    assert_eq!(acquire(&mut s, T0, 2), vec![]);
    assert_eq!(deliver(&mut s, at(1), 1, request(3, 7, 1)), vec![send(3, commit(None, &[2], 7, (2, 1)))]);
    // A majority acks the waiting site's renewal (their holder is live):
    // the token will find a live lease here, ending at T0 + lease.
    assert_eq!(lease_acks(&mut s, at(1), 1, &[1, 3, 4]), vec![]);

    // The token: c1 and c2 form the batch; the chain behind learns our
    // position (a fresh Commit with a position).
    let (f5, f6) = (fence(E, 5), fence(E, 6));
    let out = deliver(&mut s, at(2), 1, token(E, 4, 1));
    assert_eq!(
        out,
        vec![
            ev(NtEvent::HasToken(true)),
            send(3, commit(Some(2), &[2], 7, (2, u64::MAX))),
            reply(1, LockReply::Granted { fence: f5, lease_until_us: lease_end().as_micros() }),
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
            reply(2, LockReply::Granted { fence: f6, lease_until_us: lease_end().as_micros() }),
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
            reply(2, LockReply::Granted { fence: f2, lease_until_us: lease_end().as_micros() }),
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
    let mut expected = vec![send(1, request(2, 1, 0))];
    expected.extend(renewals(3, 2, 1, E, false));
    assert_eq!(drain(&mut s), expected);
    assert_eq!(s.locks.poll_timeout(), Some(at(30)));
    assert!(s.timers.get(Timer::CommitWait) > Some(at(30)), "the client's deadline comes before the Commit timer");
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
fn nt_revoked_holder_keeps_the_token_until_its_lease_ends() {
    let mut h = holder(3, 1, 2);
    h.locks = LocalLocks::new(LocksConfig { max_queue: 8, max_hold: Some(ms(10)), try_window: Duration::ZERO });
    acquire(&mut h, T0, 1);
    deliver(&mut h, at(1), 3, request(3, 1, 0));
    let f = fence(E, 1);
    assert_eq!(
        timeout(&mut h, at(10)),
        vec![
            reply(1, LockReply::LockLost { reason: "held longer than max_hold_ms".into() }),
            ev(NtEvent::Lock(LockEvent::Revoking { client: c(1), fence: f })),
        ]
    );
    assert!(h.has_token(), "not passed before the client lets go or its lease ends");
    // The lease given with the grant (T0 + 45 ms) was never extended.
    assert_eq!(timeout(&mut h, lease_end() + Duration::from_micros(0)).len(), 3);
    assert!(!h.has_token());
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
    // 2 (N + 1) t_msg: head committed, then the cascade down the chain;
    // plus 3 W: a regenerating head may first sit out its restart window,
    // a random delay and its promise round.
    assert_eq!(s.timers.get(Timer::Provisional), Some(at(245)));
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
    s.detect.suspected.insert(n(1));
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
    h.detect.suspected.insert(n(3));
    let out = release(&mut h, at(5), 1);
    assert_eq!(out, vec![reply(1, LockReply::Released), released_event(1, fence(E, 1), 5, ReleaseHow::Released)]);
    assert_eq!(h.next, None, "next cleared");
    assert_eq!(h.token, Some(Token { epoch: E, counter: 1 }), "token kept");
}

// ===== (safety) linking rule ==============================================

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
    s.detect.suspected.insert(n(3));
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

// ===== client misuse through the core =====================================

#[test]
fn client_second_acquire_on_the_same_client_is_refused() {
    let mut h = busy_holder(3, 1, 2);
    assert_eq!(
        acquire(&mut h, at(1), 1),
        vec![reply(1, LockReply::Refused { reason: "already holding the lock".into() })]
    );
    let mut s = waiting(3, 2, 2, 1);
    assert_eq!(acquire(&mut s, T0, 1), renewals(3, 2, 1, E, false));
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
