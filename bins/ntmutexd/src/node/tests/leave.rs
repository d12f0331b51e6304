//! Graceful leave.

use super::*;

// ===== graceful leave =====================================================

#[test]
fn leave_holder_with_next_hands_the_token_to_next() {
    let mut h = holder(3, 1, 2);
    h.next = Some((n(3), 2));
    h.last = Last::Parent(n(3));
    h.handle_shutdown(T0);
    assert!(!h.is_left(), "outputs still to send");
    assert_eq!(drain(&mut h), vec![send(3, token(E, 0, 1)), ev(NtEvent::HasToken(false))]);
    assert!(h.is_left());
}

#[test]
fn leave_holder_in_use_hands_the_token_on_after_the_release() {
    let mut h = busy_holder(3, 1, 2);
    deliver(&mut h, at(1), 3, request(3, 2, 0));
    h.handle_shutdown(at(2));
    assert_eq!(drain(&mut h), vec![]);
    assert!(!h.is_left());
    let out = release(&mut h, at(5), 1);
    assert_eq!(
        out,
        vec![
            reply(1, LockReply::Released),
            released_event(1, fence(E, 1), 5, ReleaseHow::Released),
            send(3, token(E, 1, 1)),
            ev(NtEvent::HasToken(false)),
        ]
    );
    assert!(h.is_left());
}

#[test]
fn leave_holder_without_next_hands_the_token_to_the_lowest_live_id_and_broadcasts_new_root() {
    let mut h = holder(4, 3, 2);
    h.detect.suspected.insert(n(1));
    h.handle_shutdown(T0);
    let mut expected = vec![send(2, token(E, 0, 1)), ev(NtEvent::HasToken(false))];
    expected.extend([1, 2, 4].map(|i| send(i, Body::NewRoot { root: n(2) })));
    assert_eq!(drain(&mut h), expected);
    assert!(h.is_left());
}

#[test]
fn leave_waiting_site_sends_skip_with_its_next_to_its_predecessor() {
    let mut s = committed(4, 3, 2, 1, Some(2), &[2, 1]);
    s.next = Some((n(4), 6));
    assert_eq!(acquire(&mut s, T0, 1), renewals(4, 3, 1, E, false));
    s.handle_shutdown(at(1));
    assert_eq!(
        drain(&mut s),
        vec![
            reply(1, LockReply::Refused { reason: "daemon is shutting down".into() }),
            send(2, Body::Skip { next: Some((n(4), 6)) }),
        ]
    );
    assert!(s.is_left());
}

#[test]
fn leave_skip_at_the_predecessor_relinks_to_the_leaving_site_next_and_commits() {
    let mut s = linked_member();
    assert_eq!(deliver(&mut s, at(1), 4, Body::Skip { next: Some((n(5), 6)) }), vec![], "not from our next");
    assert_eq!(s.next, Some((n(3), 4)));
    assert_eq!(
        deliver(&mut s, at(2), 3, Body::Skip { next: Some((n(4), 6)) }),
        vec![send(4, commit(Some(2), &[2, 1], 6, (2, 1)))]
    );
    assert_eq!(s.next, Some((n(4), 6)));
    // A leaving tail: nothing to relink.
    assert_eq!(deliver(&mut s, at(3), 4, Body::Skip { next: None }), vec![]);
    assert_eq!(s.next, None);
}

#[test]
fn leave_new_root_points_last_at_the_root() {
    let mut s = site(4, 4, 2);
    assert_eq!(deliver(&mut s, T0, 3, Body::NewRoot { root: n(2) }), vec![]);
    assert_eq!(s.last, Last::Parent(n(2)));
    let mut s = site(4, 2, 2);
    assert_eq!(deliver(&mut s, T0, 3, Body::NewRoot { root: n(2) }), vec![]);
    assert_eq!(s.last, Last::Root);
}

#[test]
fn leave_acquire_while_leaving_is_refused() {
    let mut s = site(3, 2, 2);
    s.handle_shutdown(T0);
    assert_eq!(drain(&mut s), vec![]);
    assert!(s.is_left());
    assert_eq!(
        acquire(&mut s, at(1), 1),
        vec![reply(1, LockReply::Refused { reason: "daemon is shutting down".into() })]
    );
}
