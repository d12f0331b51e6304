//! Leases: renewals, acks, refusals, and the windows acks open
//! (reliability.md, Pauses and leases; ntmutexd.md, Durability and leases).

use ::durable::promise::Refusal;

use super::*;

fn renew(round: u64, epoch: u64, holding: bool) -> Body {
    Body::LeaseRenew { round, epoch, holding }
}

#[test]
fn lease_a_holding_renewal_is_acked_and_binds_the_acker() {
    let mut s = site(4, 2, 2);
    assert_eq!(deliver(&mut s, at(1), 1, renew(7, E, true)), vec![send(1, Body::LeaseAck { round: 7 })]);
    // (safety) For lease·(1+ρ) = 45 ms after the ack, another proposer's
    // regeneration is refused with the time left.
    let p = proposal(2, 3);
    assert_eq!(
        deliver(&mut s, at(11), 3, Body::Regenerate { epoch: p }),
        vec![send(3, nack(p, Refusal::Busy { remaining: ms(35) }))]
    );
    assert_eq!(s.stored().threshold(), E, "nothing promised");
    // The renewer's own regeneration is not bound by its renewal.
    let own = proposal(2, 1);
    assert_eq!(
        deliver(&mut s, at(12), 1, Body::Regenerate { epoch: own }),
        vec![
            persisted(&{
                let mut t = s.clone();
                let _ = t.promise.on_proposal(n(1), own, at(12));
                t
            }),
            send(1, Body::RegenerateAck { epoch: own }),
        ]
    );
}

#[test]
fn lease_the_window_ends_exactly_at_lease_times_one_plus_rho() {
    let mut s = site(4, 2, 2);
    deliver(&mut s, at(1), 1, renew(1, E, true));
    let p = proposal(2, 3);
    let busy = deliver(&mut s, at(1) + Duration::from_micros(44_999), 3, Body::Regenerate { epoch: p });
    assert_eq!(busy, vec![send(3, nack(p, Refusal::Busy { remaining: Duration::from_micros(1) }))]);
    let out = deliver(&mut s, at(46), 3, Body::Regenerate { epoch: p });
    assert_eq!(out.last(), Some(&send(3, Body::RegenerateAck { epoch: p })));
}

#[test]
fn lease_a_waiting_renewal_is_acked_only_behind_a_live_holder() {
    let mut s = site(4, 2, 2);
    assert_eq!(deliver(&mut s, at(1), 3, renew(1, E, false)), vec![], "no holder renews: no ack");
    deliver(&mut s, at(2), 1, renew(4, E, true));
    assert_eq!(deliver(&mut s, at(3), 3, renew(2, E, false)), vec![send(3, Body::LeaseAck { round: 2 })]);
    // One window after the holder's last ack, waiters are no longer acked.
    assert_eq!(deliver(&mut s, at(47), 3, renew(3, E, false)), vec![]);
}

#[test]
fn lease_a_renewal_below_the_threshold_is_refused_with_it() {
    let mut s = site(4, 2, 2);
    let newer = proposal(2, 3);
    deliver(&mut s, at(1), 3, Body::Regenerate { epoch: newer });
    // A holder of the old epoch renews: refused, with the promise.
    let out = deliver(&mut s, at(2), 1, renew(5, E, true));
    assert_eq!(out, vec![send(1, Body::LeaseRefused { round: 5, threshold: newer })]);
}

#[test]
fn lease_refused_renewal_ends_an_older_token_and_its_grant() {
    let mut h = busy_holder(3, 1, 2);
    let newer = proposal(2, 2);
    let out = deliver(&mut h, at(3), 2, Body::LeaseRefused { round: 1, threshold: newer });
    assert_eq!(
        &out[..3],
        &[
            ev(NtEvent::TokenSuperseded { epoch: E }),
            ev(NtEvent::HasToken(false)),
            reply(
                1,
                LockReply::LockLost {
                    reason: "a site refused this node's lease renewal: it promised or stored a newer epoch".into()
                }
            ),
        ]
    );
    // (safety) The client may run until its lease's end: the hold lasts
    // till then (no new grant here before it), then ends as Lost.
    assert_eq!((h.token, h.holder()), (None, Some((c(1), fence(E, 1)))));
    let out = timeout(&mut h, lease_end());
    assert!(out.contains(&released_event(1, fence(E, 1), 45, ReleaseHow::Lost)), "{out:?}");
    assert_eq!(h.holder(), None);
    // A refusal at or below the token's own epoch changes nothing.
    let mut h = busy_holder(3, 1, 2);
    assert_eq!(deliver(&mut h, at(3), 2, Body::LeaseRefused { round: 1, threshold: E }), vec![]);
    assert!(h.has_token());
}

#[test]
fn lease_an_unrecovered_fresh_node_acks_nothing() {
    let mut s = fresh(4, 2, 2);
    drain(&mut s);
    s.join.phase = Phase::Running;
    let out = deliver(&mut s, at(1), 1, renew(1, E, true));
    // It adopts the epoch in use (stored), and sends nothing: it knows no
    // threshold to check the renewal against.
    assert_eq!(out, vec![persisted(&s), ev(NtEvent::Epoch(E))]);
}

#[test]
fn lease_an_idle_holder_without_a_lease_renews_then_grants_on_a_majority() {
    let mut s = site(3, 1, 2);
    s.token = Some(Token { epoch: E, counter: 0 });
    s.position = Some(0);
    s.last = Last::Root;
    // (safety) No lease: no grant; the renewal goes out at once, and the
    // holder acks its own.
    assert_eq!(acquire(&mut s, at(1), 1), renewals(3, 1, 1, E, true));
    assert_eq!(s.holder(), None);
    let f = fence(E, 1);
    let until = at(1) + cfg(1).lease;
    assert_eq!(
        lease_acks(&mut s, at(2), 1, &[3]),
        vec![
            reply(1, LockReply::Granted { fence: f, lease_until_us: until.as_micros() }),
            ev(NtEvent::Lock(LockEvent::Granted { client: c(1), fence: f, waited: ms(1), lease_until: until })),
            ev(NtEvent::Entered { fence: f }),
        ]
    );
    // Renewed every lease/3 while held; each majority moves the client's
    // deadline to the renewal's send time + lease.
    assert_eq!(timeout(&mut s, at(16)), renewals(3, 1, 2, E, true));
    let later = at(16) + cfg(1).lease;
    assert_eq!(
        lease_acks(&mut s, at(17), 2, &[2]),
        vec![
            reply(1, LockReply::Renewed { lease_until_us: later.as_micros() }),
            ev(NtEvent::Lock(LockEvent::Renewed { client: c(1), fence: f, lease_until: later })),
        ]
    );
}

#[test]
fn lease_a_hold_ends_when_renewals_stop_reaching_a_majority() {
    let mut s = busy_holder(3, 1, 2);
    // Renewals at 15 and 30 get no ack (a partition): the client's lease
    // ends at T0 + 45 ms, here too, and the token stays.
    assert_eq!(timeout(&mut s, at(15)), renewals(3, 1, 2, E, true));
    assert_eq!(timeout(&mut s, at(30)), renewals(3, 1, 3, E, true));
    let out = timeout(&mut s, lease_end());
    assert_eq!(
        &out[..2],
        &[
            reply(1, LockReply::LockLost { reason: "lease expired: the daemon could not renew it in time".into() }),
            released_event(1, fence(E, 1), 45, ReleaseHow::Expired),
        ]
    );
    assert!(s.has_token());
}

#[test]
fn lease_a_proposer_bound_by_an_ack_waits_before_proposing() {
    let mut s = waiting(4, 3, 2, 2);
    deliver(&mut s, at(1), 1, renew(1, E, true));
    s.start_regeneration(at(5), Mech::M3, at(5));
    assert_eq!(drain(&mut s), vec![], "no proposal while its ack binds it");
    assert_eq!(s.timers.get(Timer::CommitWait), Some(at(46)));
}
