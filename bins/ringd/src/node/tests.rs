//! Handler tests with exact outputs (the heartbeat ring's own messages and
//! events are left out: `hbring` has its own tests).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use ::durable::promise::Refusal;
use api::ring::{ExecError, ServiceResult};
use ftcore::testing::{deliver, drain, request, timeout};
use ftcore::{JobEnd, Output};
use membership::{Member, Membership};
use timer::Lease;

use super::*;
use crate::msg::{CensusAnswer, NewNext};

const T0: Instant = Instant::from_millis(10_000);

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn cfg() -> RdConfig {
    let mut c = RdConfig {
        heartbeat: Duration::from_millis(20),
        suspect_after: Duration::from_millis(100),
        lease: Duration::from_millis(100),
        token_min_hold: Duration::from_millis(5),
        client_addr: "127.0.0.1:7801".into(),
        ..RdConfig::default()
    };
    c.token_lost_after = c.derived_token_lost_after(3);
    c
}

fn ring3() -> Membership {
    Membership::new(
        (1..=3u32)
            .map(|id| Member { id: n(id), addr: SocketAddr::from(([127, 0, 0, 1], 20_000 + id as u16)) })
            .collect(),
    )
    .expect("valid ring")
}

/// Replica `me` of the ring 1 → 2 → 3 → 1, recovered, started 200 ms
/// before T0 (its restart window is over), and heard from by both
/// neighbours at T0 (nobody is suspected before T0 + 100 ms).
fn replica(me: u32) -> RdNode {
    replica_with(me, cfg())
}

/// [`replica`] with the settings `c`.
fn replica_with(me: u32, c: RdConfig) -> RdNode {
    replica_from(me, c, Promises::recovered_with(0))
}

/// [`replica_with`] that loaded `stored` (its promises) at its start.
fn replica_from(me: u32, c: RdConfig, stored: Promises) -> RdNode {
    let start = Instant::from_millis(T0.as_micros() / 1000 - 200);
    let mut ctx = Context::new(n(me), Incarnation(1), ring3(), start, c);
    ctx.stored = Some(RdDurable { promises: Some(stored) });
    let mut r = RdNode::start(ctx).expect("valid config");
    let (pred, succ) = (n((me + 1) % 3 + 1), n(me % 3 + 1));
    deliver(&mut r, T0, pred, Incarnation(1), Msg::Hb(hbring::HbMsg::Heartbeat { digest: 0 }));
    deliver(&mut r, T0, succ, Incarnation(1), Msg::Hb(hbring::HbMsg::HeartbeatAck { digest: 0 }));
    drain(&mut r);
    r
}

type Out = OutputOf<RdNode>;

/// The outputs without the heartbeat ring's traffic and events.
fn proto(outs: Vec<Out>) -> Vec<Out> {
    outs.into_iter()
        .filter(|o| !matches!(o, Output::Send { msg: Msg::Hb(_), .. } | Output::Event(RdEvent::Hb(_))))
        .collect()
}

/// Passes without a token service that make a token idle here (N = 3).
const IDLE: u32 = 3;

fn token(epoch: u64, seq: u64, from: u32) -> Token {
    Token {
        epoch,
        seq,
        from: n(from),
        to_life: Incarnation(1),
        state: BTreeMap::new(),
        results: Vec::new(),
        quiet: IDLE,
    }
}

fn send(to: u32, msg: Msg) -> Out {
    Output::Send { to: n(to), msg }
}

fn stored(r: &RdNode) -> Out {
    Output::Persist(RdDurable { promises: Some(r.promises().stored().clone()) })
}

/// What replica 1 sends when it starts a census of `proposed`: the
/// proposal stored first, then the Census to both peers.
fn census_started(r: &RdNode, proposed: u64) -> Vec<Out> {
    vec![
        stored(r),
        Output::Event(RdEvent::CensusStarted { epoch: proposed }),
        send(2, Msg::Census { proposed }),
        send(3, Msg::Census { proposed }),
    ]
}

/// Replica 1 owning (1025, 5), received from 3.
fn owner() -> RdNode {
    let mut r = replica(1);
    drain_token(&mut r, token(1025, 5, 3));
    r
}

fn drain_token(r: &mut RdNode, t: Token) -> Vec<Out> {
    proto(deliver(r, T0, n(3), Incarnation(1), Msg::Token(Box::new(t))))
}

#[test]
fn a_newer_token_is_stored_acked_and_owned() {
    let mut r = replica(1);
    let outs = drain_token(&mut r, token(1025, 5, 3));
    assert_eq!(
        outs,
        vec![
            stored(&r),
            send(3, Msg::TokenAck { epoch: 1025, seq: 5 }),
            Output::Event(RdEvent::Accepted { id: (1025, 5) })
        ]
    );
    assert!(r.owns_token());
    assert_eq!(r.epoch(), 1025);
}

#[test]
fn a_token_for_another_life_of_this_replica_is_dropped() {
    // Passed to life 7 (an older or newer life of replica 1, or a life the
    // sender never knew: 0): held in the network across a rejoin or a
    // restart. Dropped, as that life's closed connection would drop it.
    let mut r = replica(1);
    for life in [7, 0] {
        let t = Token { to_life: Incarnation(life), ..token(1025, 5, 3) };
        assert_eq!(drain_token(&mut r, t), vec![Output::Event(RdEvent::Refused { from: n(3), reason: "other_life" })]);
    }
    assert!(!r.owns_token());
    assert_eq!(r.seen(), (0, 0));
}

#[test]
fn an_owner_passes_only_to_a_successor_whose_life_it_knows() {
    // Replica 1 has heard from its predecessor 3 but not yet from its
    // successor 2: it keeps the token, with no pass due, until 2's
    // HeartbeatAck names its life; then it passes to that life. (Started
    // 10 ms before T0: 2 is not suspected before T0 + 90 ms.)
    let start = Instant::from_millis(T0.as_micros() / 1000 - 10);
    let mut ctx = Context::new(n(1), Incarnation(1), ring3(), start, cfg());
    ctx.stored = Some(RdDurable { promises: Some(Promises::recovered_with(0)) });
    let mut r = RdNode::start(ctx).expect("valid config");
    deliver(&mut r, T0, n(3), Incarnation(1), Msg::Hb(hbring::HbMsg::Heartbeat { digest: 0 }));
    drain(&mut r);
    let _ = drain_token(&mut r, token(1025, 5, 3));
    assert!(r.owns_token());
    assert_eq!(r.token_deadline(), None);
    let later = T0 + Duration::from_millis(50);
    let _ = proto(timeout(&mut r, later));
    assert!(r.owns_token());
    let outs = proto(deliver(&mut r, later, n(2), Incarnation(4), Msg::Hb(hbring::HbMsg::HeartbeatAck { digest: 0 })));
    let passed = Token { to_life: Incarnation(4), quiet: IDLE + 1, ..token(1025, 6, 1) };
    assert!(outs.contains(&send(2, Msg::Token(Box::new(passed)))), "{outs:?}");
}

#[test]
fn a_lower_epoch_is_answered_stale_an_older_seq_discarded_a_resend_acked_again() {
    let mut r = owner();
    assert_eq!(
        drain_token(&mut r, token(2, 9, 3)),
        vec![send(3, Msg::Stale { epoch: 1025 }), Output::Event(RdEvent::StaleAnswered)]
    );
    assert_eq!(drain_token(&mut r, token(1025, 4, 3)), vec![Output::Event(RdEvent::StaleDiscarded)]);
    assert_eq!(drain_token(&mut r, token(1025, 5, 3)), vec![send(3, Msg::TokenAck { epoch: 1025, seq: 5 })]);
    assert!(r.owns_token());
}

#[test]
fn an_idle_owner_passes_after_min_hold_and_releases_its_sender_once_acked() {
    let mut r = owner();
    assert_eq!(proto(timeout(&mut r, T0 + Duration::from_millis(4))), vec![]);
    let passed = Token { quiet: IDLE + 1, ..token(1025, 6, 1) };
    assert_eq!(
        proto(timeout(&mut r, T0 + Duration::from_millis(5))),
        vec![send(2, Msg::Token(Box::new(passed))), Output::Event(RdEvent::Passed { to: n(2) })]
    );
    assert!(r.is_passing() && !r.owns_token());
    let ack = Msg::TokenAck { epoch: 1025, seq: 6 };
    assert_eq!(
        proto(deliver(&mut r, T0 + Duration::from_millis(6), n(2), Incarnation(1), ack)),
        vec![send(3, Msg::TokenRelease { epoch: 1025, seq: 5 })]
    );
    assert!(!r.is_passing());
}

#[test]
fn token_services_wait_for_a_majority_lease_and_answer_after_the_successors_ack() {
    let mut r = owner();
    let incr = RingRequest::Execute { request_id: 7, service: "counter.incr".into(), args: vec!["c".into()] };
    // The first renewal goes to every replica before anything runs.
    assert_eq!(
        proto(request(&mut r, T0, ClientId(1), incr)),
        vec![send(2, Msg::HolderAlive { epoch: 1025, nonce: 1 }), send(3, Msg::HolderAlive { epoch: 1025, nonce: 1 })]
    );
    // One ack makes a majority (2 of 3): it runs at fence (1025, 5) and
    // passes the token at once; the client waits for the successor's ack.
    let t1 = T0 + Duration::from_millis(1);
    let outs = proto(deliver(&mut r, t1, n(3), Incarnation(1), Msg::HolderAliveAck { epoch: 1025, nonce: 1 }));
    let fence = (1025u128 << 64) | 5;
    let result = ServiceResult { output: "1".into(), status: 0, fence: Some(fence) };
    // It ran a service: quiet 0, the next replicas pass it on at once.
    let mut passed = Token { quiet: 0, ..token(1025, 6, 1) };
    passed.state.insert("counter:c".into(), "1".into());
    passed.results.push((7, Ok(result.clone())));
    let lease_until = Lease::new(T0, Duration::from_millis(100), 1_000).holder_valid_until();
    assert_eq!(
        outs,
        vec![
            Output::Event(RdEvent::Ran {
                fence: (1025, 5),
                service: "counter.incr".into(),
                request_id: 7,
                lease_until
            }),
            send(2, Msg::Token(Box::new(passed))),
            Output::Event(RdEvent::Passed { to: n(2) }),
        ]
    );
    let ack = Msg::TokenAck { epoch: 1025, seq: 6 };
    assert_eq!(
        proto(deliver(&mut r, t1, n(2), Incarnation(1), ack)),
        vec![
            Output::Event(RdEvent::Executed { service: "counter.incr".into(), outcome: "ok" }),
            Output::Reply { client: ClientId(1), reply: RingReply::Executed { request_id: 7, outcome: Ok(result) } },
            send(3, Msg::TokenRelease { epoch: 1025, seq: 5 }),
        ]
    );
}

#[test]
fn an_owner_answers_a_census_busy_a_member_promises_with_its_copy() {
    let mut r = owner();
    let busy = Refusal::Busy { remaining: Duration::from_micros(100_100) };
    assert_eq!(
        proto(deliver(&mut r, T0, n(2), Incarnation(1), Msg::Census { proposed: 2050 })),
        vec![send(2, Msg::CensusReply { proposed: 2050, answer: CensusAnswer::Refused(busy) })]
    );
    let mut m = replica(3);
    let outs = proto(deliver(&mut m, T0, n(2), Incarnation(1), Msg::Census { proposed: 2050 }));
    assert_eq!(
        outs,
        vec![stored(&m), send(2, Msg::CensusReply { proposed: 2050, answer: CensusAnswer::Promise { copy: None } })]
    );
    // From then on it refuses lower censuses and lower tokens.
    let outs = proto(deliver(&mut m, T0, n(1), Incarnation(1), Msg::Census { proposed: 1025 }));
    let refused = CensusAnswer::Refused(Refusal::Promised { value: 2050 });
    assert_eq!(outs, vec![send(1, Msg::CensusReply { proposed: 1025, answer: refused })]);
}

#[test]
fn a_replica_that_acked_a_holders_renewal_starts_no_census_until_that_lease_surely_ended() {
    // 1 acks 3's HolderAlive at T0 (epoch 0 is in use), then wants a
    // census 3 ms later (as when it suspects 3): it proposes nothing until
    // lease·(1+ρ) after the ack, as it would refuse another's census.
    let mut r = replica(1);
    let outs = proto(deliver(&mut r, T0, n(3), Incarnation(1), Msg::HolderAlive { epoch: 0, nonce: 1 }));
    assert!(outs.contains(&send(3, Msg::HolderAliveAck { epoch: 0, nonce: 1 })), "{outs:?}");
    let t = T0 + Duration::from_millis(3);
    r.start_census(t, None);
    r.after_input(t);
    assert!(r.promises().proposal().is_none(), "a census while 3's lease may run");
    let honours = Lease::new(T0, Duration::from_millis(100), 1_000).grantor_honours_until();
    // Just past it, with a little jitter (at most W/10: W = suspect_after).
    let due = r.token_deadline().expect("a census is due");
    assert!(due > honours && due <= honours + Duration::from_millis(10), "{due:?} vs {honours:?}");
    // Once it has surely ended, the census goes out.
    r.start_census(due, None);
    r.after_input(due);
    assert!(r.promises().proposal().is_some());
}

#[test]
fn a_replica_whose_ring_is_a_minority_proposes_no_census_until_it_is_a_majority_again() {
    // 1 hears from neither neighbour for suspect_after: its ring is {1},
    // a minority of 3. A census could not win, and its proposal would be
    // a promise to itself that refuses the majority's token on the heal.
    let mut r = replica(1);
    let t = T0 + Duration::from_millis(150);
    let _ = drain(&mut r);
    // Time passes a millisecond at a time (a jump would read as this
    // replica's own stall, which suspects nobody).
    for ms in 1..=150 {
        let _ = timeout(&mut r, T0 + Duration::from_millis(ms));
    }
    assert_eq!(r.ring().view().alive_count(), 1);
    r.start_census(t, None);
    r.after_input(t);
    assert!(r.promises().proposal().is_none(), "a census from a minority ring");
    assert_eq!(proto(drain(&mut r)), vec![]);
    // It looks again a heartbeat later.
    let due = t + Duration::from_millis(20);
    assert_eq!(r.token_deadline(), Some(due));
    assert_eq!(proto(timeout(&mut r, due)), vec![]);
    // 3 comes back in a new life: {1, 3} is a majority; the census goes out.
    let back = due + Duration::from_millis(1);
    let _ = deliver(&mut r, back, n(3), Incarnation(2), Msg::Hb(hbring::HbMsg::Heartbeat { digest: 0 }));
    let next = r.token_deadline().expect("a census is due");
    assert!(next <= back + Duration::from_millis(20), "{next:?}");
    let outs = proto(timeout(&mut r, next));
    let proposed = r.promises().proposal().expect("a census is out").0;
    assert_eq!(outs, census_started(&r, proposed));
}

#[test]
fn an_owner_told_stale_stops_owning_and_a_stale_below_its_epoch_changes_nothing() {
    let mut r = owner();
    let t = T0 + Duration::from_millis(1);
    let epoch = r.token().expect("owns").epoch;
    // Below the token's epoch: the floor is already above it.
    assert_eq!(proto(deliver(&mut r, t, n(2), Incarnation(1), Msg::Stale { epoch: epoch - 1 })), vec![]);
    assert!(r.owns_token());
    let outs = proto(deliver(&mut r, t, n(2), Incarnation(1), Msg::Stale { epoch: 3000 }));
    assert_eq!(
        outs,
        vec![stored(&r), Output::Event(RdEvent::StaleHeeded { owned: true }), Output::Event(RdEvent::Superseded)]
    );
    assert!(!r.owns_token());
}

#[test]
fn a_sender_told_stale_keeps_a_copy_and_censuses_after_a_random_delay() {
    let mut r = owner();
    let _ = proto(timeout(&mut r, T0 + Duration::from_millis(5)));
    let t = T0 + Duration::from_millis(6);
    let outs = proto(deliver(&mut r, t, n(2), Incarnation(1), Msg::Stale { epoch: 3000 }));
    // The floor rises to 3000 (stored); no census yet: the one the refuser
    // promised may be about to finish.
    assert_eq!(outs, vec![stored(&r), Output::Event(RdEvent::StaleHeeded { owned: false })]);
    assert!(!r.owns_token() && !r.is_passing());
    let due = r.token_deadline().expect("a census is due");
    // W·(1+ρ)/(1−ρ) to twice that, W = suspect_after = 100 ms.
    assert!(due >= t + Duration::from_millis(100) && due <= t + Duration::from_millis(201), "{due:?}");
    // Then (neighbours heard from meanwhile, time passing a millisecond at
    // a time: a jump would read as this replica's own stall) the next
    // epoch in its slot (0) above 3000: round 3.
    let mut now = t;
    while now < due {
        deliver(&mut r, now, n(3), Incarnation(1), Msg::Hb(hbring::HbMsg::Heartbeat { digest: 0 }));
        deliver(&mut r, now, n(2), Incarnation(1), Msg::Hb(hbring::HbMsg::HeartbeatAck { digest: 0 }));
        now = (now + Duration::from_millis(1)).min(due);
        if now < due {
            let _ = timeout(&mut r, now);
        }
    }
    let _ = drain(&mut r);
    let proposed = 3 << 10;
    let outs: Vec<Out> = proto(timeout(&mut r, due))
        .into_iter()
        .filter(|o| !matches!(o, Output::Send { msg: Msg::Token(_), .. }))
        .collect();
    assert_eq!(outs, census_started(&r, proposed));
}

#[test]
fn a_census_regenerates_only_once_every_ring_member_promised() {
    let mut r = replica(1);
    r.start_census(T0, None);
    r.after_input(T0);
    let proposed = r.promises().proposal().expect("a census is out").0;
    // The proposal is stored before anyone hears of it.
    assert_eq!(proto(drain(&mut r)), census_started(&r, proposed));
    let copy = |seq| Some(Box::new(token(1025, seq, 2)));
    let promise = |copy| Msg::CensusReply { proposed, answer: CensusAnswer::Promise { copy } };
    // 2 makes a majority, but 3 is in the ring and has not answered.
    assert_eq!(proto(deliver(&mut r, T0, n(2), Incarnation(1), promise(copy(7)))), vec![]);
    let outs = proto(deliver(&mut r, T0, n(3), Incarnation(1), promise(copy(9))));
    assert_eq!(
        outs,
        vec![
            stored(&r),
            Output::Event(RdEvent::Regenerated { epoch: proposed }),
            Output::Event(RdEvent::CensusEnded { outcome: CensusOutcome::Regenerated }),
            Output::Event(RdEvent::Accepted { id: (proposed, 0) }),
            // A new token goes round once at once (it has run nothing yet:
            // quiet 0 → 1), to find whoever waited while it was lost.
            send(2, Msg::Token(Box::new(Token { quiet: 1, ..token(proposed, 1, 1) }))),
            Output::Event(RdEvent::Passed { to: n(2) }),
        ]
    );
    assert!(r.is_passing());
}

#[test]
fn a_token_that_ran_lately_is_passed_on_at_once_an_idle_one_after_the_min_hold() {
    // A token whose sender ran a service: the owner, with nothing queued,
    // passes it in the same step, one more quiet pass on it.
    let mut r = owner();
    let fresh = Token { quiet: 0, ..token(1025, 6, 3) };
    let outs = proto(deliver(&mut r, T0, n(3), Incarnation(1), Msg::Token(Box::new(fresh))));
    let passed = Token { quiet: 1, ..token(1025, 7, 1) };
    assert!(outs.contains(&send(2, Msg::Token(Box::new(passed)))), "{outs:?}");
    // An idle one (N passes without a service) stays for token_min_hold.
    let mut r = owner();
    let outs = proto(deliver(&mut r, T0, n(3), Incarnation(1), Msg::Token(Box::new(token(1025, 6, 3)))));
    assert!(!outs.iter().any(|o| matches!(o, Output::Send { msg: Msg::Token(_), .. })), "{outs:?}");
    assert!(r.owns_token());
}

#[test]
fn a_find_takes_a_less_loaded_replica_and_is_dropped_after_n_hops() {
    let mut r = replica(2);
    let find = |hops, best_load| Msg::Find {
        request_id: 9,
        lap: 1,
        hops,
        origin: n(1),
        best: n(1),
        best_load,
        best_addr: "a".into(),
    };
    let outs = proto(deliver(&mut r, T0, n(1), Incarnation(1), find(0, 3)));
    let mine = Msg::Find {
        request_id: 9,
        lap: 1,
        hops: 1,
        origin: n(1),
        best: n(2),
        best_load: 0,
        best_addr: "127.0.0.1:7801".into(),
    };
    assert_eq!(outs, vec![send(3, mine)]);
    assert_eq!(proto(deliver(&mut r, T0, n(1), Incarnation(1), find(2, 0))), vec![]);
}

#[test]
fn execute_errors_are_clear() {
    let mut r = replica(1);
    let ex = |service: &str, args: &[&str]| RingRequest::Execute {
        request_id: 1,
        service: service.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
    };
    let reply = |outs: Vec<Out>| {
        outs.into_iter().find_map(|o| match o {
            Output::Reply { reply: RingReply::Executed { outcome, .. }, .. } => Some(outcome),
            _ => None,
        })
    };
    assert_eq!(
        reply(request(&mut r, T0, ClientId(1), ex("nope", &[]))),
        Some(Err(ExecError::UnknownService("nope".into())))
    );
    assert!(matches!(
        reply(request(&mut r, T0, ClientId(1), ex("sleep", &["x"]))),
        Some(Err(ExecError::BadArguments(_)))
    ));
    assert!(matches!(
        reply(request(&mut r, T0, ClientId(1), ex("kv.put", &["k"]))),
        Some(Err(ExecError::BadArguments(_)))
    ));
    let echo = reply(request(&mut r, T0, ClientId(1), ex("echo", &["a", "b"])));
    assert_eq!(echo, Some(Ok(ServiceResult { output: "a b".into(), status: 0, fence: None })));
}

#[test]
fn a_token_service_queued_while_the_token_may_be_held_idle_tells_every_peer_once() {
    let ms = Duration::from_millis;
    let incr = |id| RingRequest::Execute { request_id: id, service: "counter.incr".into(), args: vec!["c".into()] };
    let wanted = |outs: &[Out]| -> Vec<Out> {
        outs.iter().filter(|o| matches!(o, Output::Send { msg: Msg::Wanted, .. })).cloned().collect()
    };
    // Replica 2 has passed no token on: it may be held idle anywhere.
    let mut r = replica(2);
    let outs = proto(request(&mut r, T0, ClientId(1), incr(1)));
    assert_eq!(wanted(&outs), vec![send(1, Msg::Wanted), send(3, Msg::Wanted)]);
    // A second service queued behind the first sends nothing more.
    let outs = proto(request(&mut r, T0, ClientId(2), incr(2)));
    assert_eq!(wanted(&outs), vec![]);
    // The token ran a service here, or was wanted, the last time it left
    // (quiet 0): it is back after one lap without an idle hold anywhere;
    // nothing sent.
    let mut r = replica(1);
    deliver(&mut r, T0, n(2), Incarnation(1), Msg::Wanted);
    drain_token(&mut r, token(1025, 5, 3));
    assert!(!r.owns_token());
    let outs = proto(request(&mut r, T0 + ms(1), ClientId(1), incr(1)));
    assert_eq!(wanted(&outs), vec![]);
}

#[test]
fn wanted_ends_an_idle_hold_and_the_token_leaves_marked_wanted() {
    // Owner 1 holds an idle token for token_min_hold (5 ms); 2's Wanted
    // 1 ms in passes it on at once with quiet 0, so nobody on the way
    // holds it.
    let mut r = owner();
    let outs = proto(deliver(&mut r, T0 + Duration::from_millis(1), n(2), Incarnation(1), Msg::Wanted));
    let passed = Token { quiet: 0, ..token(1025, 6, 1) };
    assert_eq!(outs, vec![send(2, Msg::Token(Box::new(passed))), Output::Event(RdEvent::Passed { to: n(2) })]);
    // A token arriving within token_min_hold of a Wanted is not held
    // either.
    let mut r = replica(1);
    deliver(&mut r, T0, n(2), Incarnation(1), Msg::Wanted);
    let outs = proto(deliver(
        &mut r,
        T0 + Duration::from_millis(1),
        n(3),
        Incarnation(1),
        Msg::Token(Box::new(token(1025, 5, 3))),
    ));
    assert!(outs.contains(&send(2, Msg::Token(Box::new(Token { quiet: 0, ..token(1025, 6, 1) })))), "{outs:?}");
}

#[test]
fn a_newer_token_kills_the_running_token_service_unless_switched_off() {
    use ftcore::JobCommand;
    for keep in [false, true] {
        let mut c = cfg();
        let spec = ServiceSpec {
            command: vec!["sleep".into(), "300".into()],
            needs_token: true,
            timeout: Duration::from_secs(1),
        };
        c.services.insert("job".into(), spec);
        if keep {
            c.rules = c.rules.without(RdRule::SupersededKillsItsJob);
        }
        let mut r = replica_with(1, c);
        drain_token(&mut r, token(1025, 5, 3));
        let job = RingRequest::Execute { request_id: 7, service: "job".into(), args: vec![] };
        let _ = request(&mut r, T0, ClientId(1), job);
        let t1 = T0 + Duration::from_millis(1);
        let outs = deliver(&mut r, t1, n(3), Incarnation(1), Msg::HolderAliveAck { epoch: 1025, nonce: 1 });
        let id = outs
            .iter()
            .find_map(|o| match o {
                Output::Job(JobCommand::Start { id, .. }) => Some(*id),
                _ => None,
            })
            .expect("the command starts under the lease");
        let t2 = t1 + Duration::from_millis(1);
        let outs = proto(deliver(&mut r, t2, n(3), Incarnation(1), Msg::Token(Box::new(token(2048, 1, 3)))));
        let running = Output::Event(RdEvent::SupersededWhileRunning { fence: (1025, 5), by: (2048, 1) });
        assert!(outs.contains(&running) && outs.contains(&Output::Event(RdEvent::Superseded)), "{outs:?}");
        let killed = outs.contains(&Output::Job(JobCommand::Kill { id }));
        assert_eq!(killed, !keep, "keep_job_when_superseded {keep}: {outs:?}");
    }
}

#[test]
fn a_hello_is_answered_with_the_stored_values() {
    let mut r = owner();
    let values = r.promises().values();
    assert!(values.is_some());
    assert_eq!(
        proto(deliver(&mut r, T0, n(2), Incarnation(1), Msg::Hello { nonce: 9 })),
        vec![send(2, Msg::HelloAck { nonce: 9, values })]
    );
}

#[test]
fn a_fresh_replica_asks_every_peer_and_recovers_once_both_answered() {
    // Nothing stored: after its restart window it sends Hello to both
    // peers; it recovers once both answered (a majority of the others
    // with values), stores that first, then reports it.
    let start = Instant::from_millis(T0.as_micros() / 1000 - 200);
    let mut r = RdNode::start(Context::new(n(1), Incarnation(1), ring3(), start, cfg())).expect("valid config");
    let _ = drain(&mut r);
    let at = r.hello_deadline().expect("it waits out its restart window");
    let outs = proto(timeout(&mut r, at));
    let nonce = outs
        .iter()
        .find_map(|o| match o {
            Output::Send { msg: Msg::Hello { nonce }, .. } => Some(*nonce),
            _ => None,
        })
        .expect("a Hello");
    assert_eq!(outs, vec![send(2, Msg::Hello { nonce }), send(3, Msg::Hello { nonce })]);
    let values = owner().promises().values();
    let ack = |values| Msg::HelloAck { nonce, values };
    assert_eq!(proto(deliver(&mut r, at, n(2), Incarnation(1), ack(values))), vec![]);
    let outs = proto(deliver(&mut r, at, n(3), Incarnation(1), ack(values)));
    let max = r.promises().stored().recovered_max();
    assert_eq!(outs, vec![stored(&r), Output::Event(RdEvent::StateRecovered { max })]);
    assert!(r.promises().stored().recovered() && max >= 1025);
    assert_eq!(r.hello_deadline(), None);
}

#[test]
fn a_holder_alive_is_acked_once_its_epoch_is_stored_and_a_lower_one_answered_stale() {
    let mut r = replica(3);
    let alive = |epoch, nonce| Msg::HolderAlive { epoch, nonce };
    let outs = proto(deliver(&mut r, T0, n(1), Incarnation(1), alive(1025, 1)));
    assert_eq!(outs, vec![stored(&r), send(1, Msg::HolderAliveAck { epoch: 1025, nonce: 1 })]);
    assert_eq!(r.epoch(), 1025);
    assert_eq!(
        proto(deliver(&mut r, T0, n(1), Incarnation(1), alive(2, 2))),
        vec![send(1, Msg::Stale { epoch: 1025 }), Output::Event(RdEvent::StaleAnswered)]
    );
}

/// An `IAmNewNext` from detector 3 about 2 (life 1), which replica 1
/// points at.
fn new_next_about_2(seen: (u64, u64)) -> Msg {
    Msg::IAmNewNext(NewNext { failed: n(2), failed_inc: Incarnation(1), origin: n(3), recovery: 77, seen, hops: 0 })
}

#[test]
fn an_i_am_new_next_is_answered_by_whoever_pointed_at_the_failed_life_with_its_copy_if_newer() {
    let previous = Msg::IAmNewPrevious { recovery: 77, members: vec![n(2), n(3), n(1)] };
    // Nothing sent to 2: no copy.
    let mut r = replica(1);
    assert_eq!(
        proto(deliver(&mut r, T0, n(3), Incarnation(1), new_next_about_2((0, 0)))),
        vec![send(3, previous.clone())]
    );
    // Passing (1025, 6) to 2, unacked: the copy goes first, if newer than
    // what the detector has seen.
    let passing = || {
        let mut r = owner();
        let _ = proto(timeout(&mut r, T0 + Duration::from_millis(5)));
        assert!(r.is_passing());
        r
    };
    let t = T0 + Duration::from_millis(6);
    let mut r = passing();
    let copy = Token { quiet: IDLE + 1, ..token(1025, 6, 1) };
    assert_eq!(
        proto(deliver(&mut r, t, n(3), Incarnation(1), new_next_about_2((1025, 5)))),
        vec![send(3, Msg::Copy { recovery: 77, token: Box::new(copy) }), send(3, previous.clone())]
    );
    let mut r = passing();
    assert_eq!(proto(deliver(&mut r, t, n(3), Incarnation(1), new_next_about_2((1025, 6)))), vec![send(3, previous)]);
}

#[test]
fn an_i_am_new_next_about_another_replica_is_forwarded_one_hop_further_and_dropped_after_n() {
    let mut r = replica(1);
    let about_3 = |hops| {
        Msg::IAmNewNext(NewNext {
            failed: n(3),
            failed_inc: Incarnation(1),
            origin: n(2),
            recovery: 78,
            seen: (0, 0),
            hops,
        })
    };
    let forwarded =
        NewNext { failed: n(3), failed_inc: Incarnation(1), origin: n(2), recovery: 78, seen: (0, 0), hops: 1 };
    assert_eq!(proto(deliver(&mut r, T0, n(3), Incarnation(1), about_3(0))), vec![send(2, Msg::IAmNewNext(forwarded))]);
    assert_eq!(
        proto(deliver(&mut r, T0, n(3), Incarnation(1), about_3(2))),
        vec![Output::Event(RdEvent::Refused { from: n(2), reason: "hops" })]
    );
}

/// Replica 1 with its predecessor 3 reported unreachable: it starts a
/// recovery (`IAmNewNext` to its successor 2); returns the recovery id.
fn recovering() -> (RdNode, u64) {
    let mut r = replica(1);
    r.handle_peer_unreachable(T0, n(3));
    let outs = proto(drain(&mut r));
    let id = outs
        .iter()
        .find_map(|o| match o {
            Output::Send { msg: Msg::IAmNewNext(m), .. } => Some(m.recovery),
            _ => None,
        })
        .expect("an IAmNewNext");
    let m = NewNext { failed: n(3), failed_inc: Incarnation(1), origin: n(1), recovery: id, seen: (0, 0), hops: 0 };
    assert_eq!(outs, vec![Output::Event(RdEvent::RecoveryStarted { failed: n(3) }), send(2, Msg::IAmNewNext(m))]);
    (r, id)
}

#[test]
fn a_predecessor_reported_unreachable_starts_a_recovery() {
    let _ = recovering();
}

#[test]
fn an_i_am_new_previous_ends_only_the_pending_recovery() {
    let (mut r, id) = recovering();
    let t = T0 + Duration::from_millis(3);
    let previous = |recovery| Msg::IAmNewPrevious { recovery, members: vec![n(1)] };
    assert_eq!(proto(deliver(&mut r, t, n(2), Incarnation(1), previous(id + 1))), vec![]);
    assert_eq!(
        proto(deliver(&mut r, t, n(2), Incarnation(1), previous(id))),
        vec![Output::Event(RdEvent::Recovered { took: Duration::from_millis(3) })]
    );
    assert_eq!(proto(deliver(&mut r, t, n(2), Incarnation(1), previous(id))), vec![]);
}

#[test]
fn a_copy_for_the_pending_recovery_starts_a_census_and_one_for_another_is_dropped() {
    let (mut r, id) = recovering();
    let copy = |recovery, seq| Msg::Copy { recovery, token: Box::new(token(1025, seq, 2)) };
    assert_eq!(proto(deliver(&mut r, T0, n(2), Incarnation(1), copy(id + 1, 6))), vec![]);
    assert!(r.promises().proposal().is_none());
    let outs = proto(deliver(&mut r, T0, n(2), Incarnation(1), copy(id, 6)));
    let proposed = r.promises().proposal().expect("a census is out").0;
    assert_eq!(outs, census_started(&r, proposed));
    assert!(!r.owns_token(), "the copy only supplies the census's state");
}

#[test]
fn a_lookup_sends_a_find_round_the_ring_and_answers_its_best_when_it_returns() {
    let mut r = replica(1);
    let outs = proto(request(&mut r, T0, ClientId(5), RingRequest::LookUp { request_id: 4 }));
    let key = outs
        .iter()
        .find_map(|o| match o {
            Output::Send { msg: Msg::Find { request_id, .. }, .. } => Some(*request_id),
            _ => None,
        })
        .expect("a Find");
    let find = |hops, best: u32, best_addr: &str| Msg::Find {
        request_id: key,
        lap: 1,
        hops,
        origin: n(1),
        best: n(best),
        best_load: 0,
        best_addr: best_addr.into(),
    };
    assert_eq!(outs, vec![send(2, find(0, 1, "127.0.0.1:7801"))]);
    let t = T0 + Duration::from_millis(2);
    assert_eq!(
        proto(deliver(&mut r, t, n(3), Incarnation(1), find(2, 2, "b"))),
        vec![
            Output::Event(RdEvent::LookedUp { took: Duration::from_millis(2) }),
            Output::Reply {
                client: ClientId(5),
                reply: RingReply::LookedUp { request_id: 4, replica: n(2), address: "b".into(), load: 0 }
            },
        ]
    );
    // Answered once.
    assert_eq!(proto(deliver(&mut r, t, n(3), Incarnation(1), find(2, 2, "b"))), vec![]);
}

#[test]
fn a_broken_link_resends_the_unacked_token_to_that_successor_only() {
    let mut r = owner();
    let _ = proto(timeout(&mut r, T0 + Duration::from_millis(5)));
    let t = T0 + Duration::from_millis(6);
    r.handle_link_lost(t, n(3));
    assert_eq!(proto(drain(&mut r)), vec![]);
    r.handle_link_lost(t, n(2));
    let passed = Token { quiet: IDLE + 1, ..token(1025, 6, 1) };
    assert_eq!(proto(drain(&mut r)), vec![send(2, Msg::Token(Box::new(passed)))]);
}

#[test]
fn a_shutdown_answers_queued_token_services_leaving_and_a_gone_clients_are_dropped() {
    let incr = |id| RingRequest::Execute { request_id: id, service: "counter.incr".into(), args: vec!["c".into()] };
    let mut r = replica(2);
    let _ = request(&mut r, T0, ClientId(1), incr(1));
    let _ = request(&mut r, T0, ClientId(2), incr(2));
    r.handle_client_gone(T0, ClientId(1));
    assert_eq!(proto(drain(&mut r)), vec![]);
    r.handle_shutdown(T0);
    assert_eq!(
        proto(drain(&mut r)),
        vec![
            Output::Event(RdEvent::Executed { service: "counter.incr".into(), outcome: "leaving" }),
            Output::Reply {
                client: ClientId(2),
                reply: RingReply::Executed { request_id: 2, outcome: Err(ExecError::Leaving) }
            },
        ]
    );
    assert!(r.is_left());
}

// ----- every input handler, its other branches ------------------------------

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

/// Fires `r`'s deadlines in order from `from` (its last input) up to
/// `until` (inclusive), both its configured neighbours heard from just
/// before each (nobody is suspected); returns the steps that had protocol
/// outputs, with their times. A deadline already past (the ring's timers
/// of a [`replica`] no timeout has reached yet) fires at `from`.
fn live_until(r: &mut RdNode, from: Instant, until: Instant) -> Vec<(Instant, Vec<Out>)> {
    let me = r.me.0;
    let (pred, succ) = (n((me + 1) % 3 + 1), n(me % 3 + 1));
    let mut steps = Vec::new();
    for _ in 0..10_000 {
        let Some(t) = r.poll_timeout().filter(|t| *t <= until).map(|t| t.max(from)) else { return steps };
        let mut outs = proto(deliver(r, t, pred, Incarnation(1), Msg::Hb(hbring::HbMsg::Heartbeat { digest: 0 })));
        outs.extend(proto(deliver(r, t, succ, Incarnation(1), Msg::Hb(hbring::HbMsg::HeartbeatAck { digest: 0 }))));
        outs.extend(proto(timeout(r, t)));
        if !outs.is_empty() {
            steps.push((t, outs));
        }
    }
    panic!("the deadlines do not move past {until:?}");
}

/// A fresh replica 1 (nothing stored), started 200 ms before T0, outputs
/// drained: unrecovered until its Hello round is answered.
fn fresh() -> RdNode {
    let start = Instant::from_millis(T0.as_micros() / 1000 - 200);
    let mut r = RdNode::start(Context::new(n(1), Incarnation(1), ring3(), start, cfg())).expect("valid config");
    let _ = drain(&mut r);
    r
}

/// [`cfg`] with the command service `job` (`sleep 300` and the request's
/// arguments, killed 1 s after its start), run under the token if `token`.
fn with_job(token: bool) -> RdConfig {
    let mut c = cfg();
    let spec = ServiceSpec { command: vec!["sleep".into(), "300".into()], needs_token: token, timeout: ms(1_000) };
    c.services.insert("job".into(), spec);
    c
}

fn execute(request_id: u64, service: &str, args: &[&str]) -> RingRequest {
    RingRequest::Execute { request_id, service: service.into(), args: args.iter().map(|a| a.to_string()).collect() }
}

fn answered(client: u64, request_id: u64, service: &str, outcome: api::ring::Outcome) -> Vec<Out> {
    let label = match &outcome {
        Ok(_) => "ok",
        Err(e) => e.label(),
    };
    vec![
        Output::Event(RdEvent::Executed { service: service.into(), outcome: label }),
        Output::Reply { client: ClientId(client), reply: RingReply::Executed { request_id, outcome } },
    ]
}

/// The `HolderAlive` renewal `nonce` of epoch 1025 to both peers.
fn renewal(nonce: u64) -> Vec<Out> {
    vec![send(2, Msg::HolderAlive { epoch: 1025, nonce }), send(3, Msg::HolderAlive { epoch: 1025, nonce })]
}

/// The job id of the `JobCommand::Start` among `outs`.
fn started(outs: &[Out]) -> u64 {
    outs.iter()
        .find_map(|o| match o {
            Output::Job(ftcore::JobCommand::Start { id, .. }) => Some(*id),
            _ => None,
        })
        .expect("a job starts")
}

/// Owner 1 of (1025, 5) running `job` (request 7 of client 1) under the
/// lease its first renewal (sent at T0) got from 3 at T0 + 1 ms: the job
/// id and the lease's end.
fn running_token_job() -> (RdNode, u64, Instant) {
    let mut r = replica_with(1, with_job(true));
    drain_token(&mut r, token(1025, 5, 3));
    assert_eq!(proto(request(&mut r, T0, ClientId(1), execute(7, "job", &[]))), renewal(1));
    let outs = proto(deliver(&mut r, T0 + ms(1), n(3), Incarnation(1), Msg::HolderAliveAck { epoch: 1025, nonce: 1 }));
    let id = started(&outs);
    let lease_until = Lease::new(T0, ms(100), 1_000).holder_valid_until();
    assert_eq!(
        outs,
        vec![
            Output::Event(RdEvent::Ran { fence: (1025, 5), service: "job".into(), request_id: 7, lease_until }),
            Output::Job(ftcore::JobCommand::Start {
                id,
                argv: vec!["sleep".into(), "300".into()],
                fence: Some((1025u128 << 64) | 5),
                deadline: lease_until,
                max_output: MAX_OUTPUT,
            }),
        ]
    );
    (r, id, lease_until)
}

/// The token [`passing`] passed.
fn passed() -> Token {
    Token { quiet: 0, ..token(1025, 6, 1) }
}

/// Owner 1 that passed (1025, 6) to 2 at T0 + 1 ms, on 2's `Wanted`,
/// unacked. Passed by a message, not a timeout: the first timeout of a
/// [`replica`] finds its ring's timers overdue, reads that as its own
/// stall and puts off any census by a heartbeat.
fn passing() -> RdNode {
    let mut r = owner();
    assert_eq!(
        proto(deliver(&mut r, T0 + ms(1), n(2), Incarnation(1), Msg::Wanted)),
        vec![send(2, Msg::Token(Box::new(passed()))), Output::Event(RdEvent::Passed { to: n(2) })]
    );
    r
}

/// [`passing`], acked by 2 at T0 + 2 ms: its copy is frozen.
fn frozen() -> RdNode {
    let mut r = passing();
    let ack = Msg::TokenAck { epoch: 1025, seq: 6 };
    assert_eq!(
        proto(deliver(&mut r, T0 + ms(2), n(2), Incarnation(1), ack)),
        vec![send(3, Msg::TokenRelease { epoch: 1025, seq: 5 })]
    );
    r
}

/// The role of the token held here.
fn role(r: &RdNode) -> Option<Role> {
    r.held.as_ref().map(|h| h.role.clone())
}

/// Replica 1 with its own census started at T0 (outputs drained); the
/// proposed epoch.
fn censusing() -> (RdNode, u64) {
    let mut r = replica(1);
    r.start_census(T0, None);
    r.after_input(T0);
    let proposed = r.promises().proposal().expect("a census is out").0;
    assert_eq!(proto(drain(&mut r)), census_started(&r, proposed));
    (r, proposed)
}

/// ringd.md, Liveness: only configured replicas take part; a message from
/// an unknown id, or one naming this replica as its sender, is refused
/// before anything reads it (`refused_total{reason="not_a_member"}`).
#[test]
fn a_message_from_a_non_member_or_from_itself_is_refused_unread() {
    let mut r = replica(1);
    for from in [9, 1] {
        let census = Msg::Census { proposed: 2049 };
        assert_eq!(
            deliver(&mut r, T0, n(from), Incarnation(1), census),
            vec![Output::Event(RdEvent::Refused { from: n(from), reason: "not_a_member" })]
        );
    }
    assert_eq!(r.promises().stored().threshold(), 0, "nothing promised");
}

/// ringd.md, Liveness (safety): from the moment D suspects P, D ignores
/// P's incarnation and answers it `Excluded`: a token from that life is
/// neither acked nor owned.
#[test]
fn a_message_from_a_suspected_life_is_answered_excluded_and_not_read() {
    let (mut r, _) = recovering();
    assert_eq!(
        deliver(&mut r, T0 + ms(1), n(3), Incarnation(1), Msg::Token(Box::new(token(1025, 5, 3)))),
        vec![
            send(3, Msg::Hb(hbring::HbMsg::Excluded { your_inc: Incarnation(1) })),
            Output::Event(RdEvent::Hb(hbring::HbEvent::ExcludedPeer { node: n(3), inc: Incarnation(1) })),
        ]
    );
    assert!(!r.owns_token());
    assert_eq!(r.seen(), (0, 0));
}

/// foundation.md, Fresh nodes: a replica that has not recovered answers
/// a `Hello` with no values (it knows none it could vouch for).
#[test]
fn an_unrecovered_replica_answers_a_hello_with_no_values() {
    let mut r = fresh();
    assert_eq!(
        proto(deliver(&mut r, T0, n(2), Incarnation(1), Msg::Hello { nonce: 5 })),
        vec![send(2, Msg::HelloAck { nonce: 5, values: None })]
    );
}

/// foundation.md, Fresh nodes: only answers to a nonce of this life's own
/// rounds count; a recovered replica ignores every `HelloAck`.
#[test]
fn a_hello_ack_to_an_unknown_nonce_or_at_a_recovered_replica_changes_nothing() {
    let mut r = fresh();
    let at = r.hello_deadline().expect("a round is due");
    let outs = proto(timeout(&mut r, at));
    let nonce = outs
        .iter()
        .find_map(|o| match o {
            Output::Send { msg: Msg::Hello { nonce }, .. } => Some(*nonce),
            _ => None,
        })
        .expect("a Hello");
    let values = owner().promises().values();
    for from in [2, 3] {
        let ack = Msg::HelloAck { nonce: nonce + 1, values };
        assert_eq!(proto(deliver(&mut r, at, n(from), Incarnation(1), ack)), vec![]);
    }
    assert!(!r.promises().stored().recovered());
    assert_eq!(r.hello_deadline(), Some(at + ms(100)), "the rounds go on");
    // At a recovered replica: nothing stored, nothing reported.
    let mut r = replica(1);
    let before = r.promises().stored().clone();
    assert_eq!(proto(deliver(&mut r, T0, n(2), Incarnation(1), Msg::HelloAck { nonce: 1, values })), vec![]);
    assert_eq!(r.promises().stored(), &before);
}

/// ringd.md, At D: an `IAmNewNext` back at its detector found nobody
/// pointing at that life of the failed replica: the pending recovery ends;
/// one of another recovery ends nothing.
#[test]
fn an_i_am_new_next_back_at_its_detector_ends_only_the_pending_recovery() {
    let (mut r, id) = recovering();
    let back = |recovery| {
        Msg::IAmNewNext(NewNext {
            failed: n(3),
            failed_inc: Incarnation(1),
            origin: n(1),
            recovery,
            seen: (0, 0),
            hops: 1,
        })
    };
    let t = T0 + ms(4);
    assert_eq!(proto(deliver(&mut r, t, n(2), Incarnation(1), back(id + 1))), vec![]);
    assert_eq!(
        proto(deliver(&mut r, t, n(2), Incarnation(1), back(id))),
        vec![Output::Event(RdEvent::Recovered { took: ms(4) })]
    );
    assert_eq!(proto(deliver(&mut r, t, n(2), Incarnation(1), back(id))), vec![]);
}

/// ringd.md, IAmNewNext: a replica whose successor its own detector
/// removed still answers an `IAmNewNext` about that life (it was its
/// `next`), with its unacked copy if newer than the detector's `seen`.
#[test]
fn a_successor_reported_unreachable_is_remembered_and_an_i_am_new_next_about_it_answered() {
    let mut r = passing();
    let t = T0 + ms(2);
    r.handle_peer_unreachable(t, n(2));
    assert_eq!(proto(drain(&mut r)), vec![]);
    assert_eq!(r.successor(), Some(n(3)));
    let about_2 =
        NewNext { failed: n(2), failed_inc: Incarnation(1), origin: n(3), recovery: 79, seen: (1025, 5), hops: 0 };
    assert_eq!(
        proto(deliver(&mut r, t, n(3), Incarnation(1), Msg::IAmNewNext(about_2))),
        vec![
            send(3, Msg::Copy { recovery: 79, token: Box::new(passed()) }),
            send(3, Msg::IAmNewPrevious { recovery: 79, members: vec![n(3), n(1)] }),
        ]
    );
}

/// ringd.md, At D: a copy is acted on only if newer than D's `seen` (D
/// has seen that token or a newer one); a newer one starts a census.
#[test]
fn a_copy_not_newer_than_the_detectors_seen_supplies_no_census() {
    let mut r = frozen();
    let t = T0 + ms(3);
    r.handle_peer_unreachable(t, n(3));
    let outs = proto(drain(&mut r));
    let id = outs
        .iter()
        .find_map(|o| match o {
            Output::Send { msg: Msg::IAmNewNext(m), .. } => Some(m.recovery),
            _ => None,
        })
        .expect("an IAmNewNext");
    let m = NewNext { failed: n(3), failed_inc: Incarnation(1), origin: n(1), recovery: id, seen: (1025, 5), hops: 0 };
    assert_eq!(outs, vec![Output::Event(RdEvent::RecoveryStarted { failed: n(3) }), send(2, Msg::IAmNewNext(m))]);
    let copy = |seq| Msg::Copy { recovery: id, token: Box::new(token(1025, seq, 2)) };
    for seq in [4, 5] {
        assert_eq!(proto(deliver(&mut r, t, n(2), Incarnation(1), copy(seq))), vec![]);
    }
    assert!(r.promises().proposal().is_none());
    let outs = proto(deliver(&mut r, t, n(2), Incarnation(1), copy(6)));
    let proposed = r.promises().proposal().expect("a census is out").0;
    assert_eq!(outs, census_started(&r, proposed));
}

/// ringd.md, Regeneration: a token showing up ends the own census
/// (`censuses_total{outcome="aborted"}`); the token is stored, acked and
/// owned.
#[test]
fn a_newer_token_aborts_the_own_census() {
    let (mut r, _) = censusing();
    let outs = drain_token(&mut r, token(1025, 5, 3));
    assert_eq!(
        outs,
        vec![
            stored(&r),
            Output::Event(RdEvent::CensusEnded { outcome: CensusOutcome::Aborted }),
            send(3, Msg::TokenAck { epoch: 1025, seq: 5 }),
            Output::Event(RdEvent::Accepted { id: (1025, 5) }),
        ]
    );
    assert!(r.owns_token() && r.promises().proposal().is_none());
}

/// foundation.md, Fresh nodes: an unrecovered replica neither acks nor
/// answers a token (the sender resends; the ring routes around it).
#[test]
fn an_unrecovered_replica_neither_acks_nor_answers_a_token() {
    let mut r = fresh();
    assert_eq!(drain_token(&mut r, token(1025, 5, 3)), vec![]);
    assert!(!r.owns_token());
    assert_eq!(r.seen(), (0, 0));
}

/// ringd.md, Superseded: a replica recovered from a wiped disk answers a
/// token at or below `recovered_max` with `Stale { recovered_max }`;
/// above it, the token is accepted.
#[test]
fn a_token_at_or_below_the_recovered_max_is_answered_stale_with_it() {
    let mut r = replica_from(1, cfg(), Promises::recovered_with(2050));
    for epoch in [1025, 2050] {
        assert_eq!(
            drain_token(&mut r, token(epoch, 5, 3)),
            vec![send(3, Msg::Stale { epoch: 2050 }), Output::Event(RdEvent::StaleAnswered)]
        );
    }
    assert!(!r.owns_token());
    let outs = drain_token(&mut r, token(2051, 5, 3));
    assert_eq!(
        outs,
        vec![
            stored(&r),
            send(3, Msg::TokenAck { epoch: 2051, seq: 5 }),
            Output::Event(RdEvent::Accepted { id: (2051, 5) })
        ]
    );
}

/// ringd.md, Token: only the successor's ack of the token sent freezes
/// the copy; an ack from another replica or of another (epoch, seq)
/// changes nothing.
#[test]
fn a_token_ack_from_another_replica_or_of_another_seq_changes_nothing() {
    let mut r = passing();
    let t = T0 + ms(2);
    let ack = |epoch, seq| Msg::TokenAck { epoch, seq };
    assert_eq!(proto(deliver(&mut r, t, n(3), Incarnation(1), ack(1025, 6))), vec![]);
    assert_eq!(proto(deliver(&mut r, t, n(2), Incarnation(1), ack(1025, 5))), vec![]);
    assert!(r.is_passing());
    assert_eq!(
        proto(deliver(&mut r, t, n(2), Incarnation(1), ack(1025, 6))),
        vec![send(3, Msg::TokenRelease { epoch: 1025, seq: 5 })]
    );
    assert_eq!(role(&r), Some(Role::Frozen { to: n(2), inc: Incarnation(1) }));
}

/// ringd.md, Token: `TokenRelease` goes to the replica the token came
/// from; a regenerated token came from nobody, and its ack releases none.
#[test]
fn the_ack_of_a_regenerated_token_releases_nobody() {
    let (mut r, proposed) = censusing();
    let promise = Msg::CensusReply { proposed, answer: CensusAnswer::Promise { copy: None } };
    let _ = proto(deliver(&mut r, T0, n(2), Incarnation(1), promise.clone()));
    let _ = proto(deliver(&mut r, T0, n(3), Incarnation(1), promise));
    assert!(r.is_passing());
    let ack = Msg::TokenAck { epoch: proposed, seq: 1 };
    assert_eq!(proto(deliver(&mut r, T0 + ms(1), n(2), Incarnation(1), ack)), vec![]);
    assert_eq!(role(&r), Some(Role::Frozen { to: n(2), inc: Incarnation(1) }));
}

/// ringd.md, Token (safety): `TokenRelease` releases only the frozen copy
/// it names, and a released copy is kept for censuses (discarded only
/// when a newer token is accepted).
#[test]
fn a_token_release_releases_only_the_frozen_copy_it_names_which_censuses_still_get() {
    let mut r = frozen();
    let t = T0 + ms(3);
    let release = |seq| Msg::TokenRelease { epoch: 1025, seq };
    assert_eq!(proto(deliver(&mut r, t, n(2), Incarnation(1), release(5))), vec![]);
    assert_eq!(role(&r), Some(Role::Frozen { to: n(2), inc: Incarnation(1) }));
    assert_eq!(proto(deliver(&mut r, t, n(2), Incarnation(1), release(6))), vec![]);
    assert_eq!(role(&r), Some(Role::Released));
    let outs = proto(deliver(&mut r, t, n(2), Incarnation(1), Msg::Census { proposed: 2049 }));
    let copy = Some(Box::new(passed()));
    assert_eq!(
        outs,
        vec![stored(&r), send(2, Msg::CensusReply { proposed: 2049, answer: CensusAnswer::Promise { copy } })]
    );
}

/// foundation.md, Fresh nodes: an unrecovered replica knows no threshold
/// to check a renewal against: it acks nothing (and stores nothing).
#[test]
fn an_unrecovered_replica_does_not_ack_a_holder_alive() {
    let mut r = fresh();
    assert_eq!(proto(deliver(&mut r, T0, n(3), Incarnation(1), Msg::HolderAlive { epoch: 1025, nonce: 1 })), vec![]);
    assert_eq!(r.epoch(), 0);
}

/// ringd.md, Majority lease: a `HolderAlive` of a higher epoch than the
/// token owned here means a newer token is in use: the epoch is stored,
/// this owner superseded (keeps a copy only), then the renewal acked.
#[test]
fn a_holder_alive_of_a_higher_epoch_supersedes_the_owned_token() {
    let mut r = owner();
    let outs = proto(deliver(&mut r, T0 + ms(1), n(2), Incarnation(1), Msg::HolderAlive { epoch: 2049, nonce: 4 }));
    assert_eq!(
        outs,
        vec![stored(&r), Output::Event(RdEvent::Superseded), send(2, Msg::HolderAliveAck { epoch: 2049, nonce: 4 })]
    );
    assert!(!r.owns_token());
    assert_eq!((role(&r), r.epoch()), (Some(Role::CopyOnly), 2049));
}

/// ringd.md, Majority lease: only acks of a renewal of the owned token's
/// epoch, and of a renewal sent, count towards the lease; at a replica
/// that owns no token an ack is ignored.
#[test]
fn a_holder_alive_ack_of_another_epoch_or_an_unknown_renewal_grants_no_lease() {
    let mut r = owner();
    assert_eq!(proto(request(&mut r, T0, ClientId(1), execute(7, "counter.incr", &["c"]))), renewal(1));
    let t = T0 + ms(1);
    let ack = |epoch, nonce| Msg::HolderAliveAck { epoch, nonce };
    assert_eq!(proto(deliver(&mut r, t, n(3), Incarnation(1), ack(1024, 1))), vec![]);
    assert_eq!(proto(deliver(&mut r, t, n(3), Incarnation(1), ack(1025, 9))), vec![]);
    assert_eq!(r.lease_until(), None);
    // The renewal's own ack: it runs at once (and passes the token on).
    let outs = proto(deliver(&mut r, t, n(3), Incarnation(1), ack(1025, 1)));
    let lease_until = Lease::new(T0, ms(100), 1_000).holder_valid_until();
    let ran = RdEvent::Ran { fence: (1025, 5), service: "counter.incr".into(), request_id: 7, lease_until };
    assert_eq!(outs.first(), Some(&Output::Event(ran)), "{outs:?}");
    let mut m = replica(2);
    assert_eq!(proto(deliver(&mut m, t, n(3), Incarnation(1), ack(1025, 1))), vec![]);
    assert_eq!(m.lease_until(), None);
}

/// ringd.md, Regeneration: a replica that acked a `HolderAlive` answers a
/// census `Busy` for lease·(1+ρ), except a census of that holder itself.
#[test]
fn a_census_beside_an_acked_holder_is_busy_except_the_holders_own() {
    let mut r = replica(3);
    let _ = proto(deliver(&mut r, T0, n(1), Incarnation(1), Msg::HolderAlive { epoch: 1025, nonce: 1 }));
    let t = T0 + ms(1);
    let remaining = Lease::new(T0, ms(100), 1_000).grantor_honours_until().saturating_since(t);
    assert_eq!(
        proto(deliver(&mut r, t, n(2), Incarnation(1), Msg::Census { proposed: 2049 })),
        vec![send(2, Msg::CensusReply { proposed: 2049, answer: CensusAnswer::Refused(Refusal::Busy { remaining }) })]
    );
    let outs = proto(deliver(&mut r, t, n(1), Incarnation(1), Msg::Census { proposed: 2048 }));
    assert_eq!(
        outs,
        vec![stored(&r), send(1, Msg::CensusReply { proposed: 2048, answer: CensusAnswer::Promise { copy: None } })]
    );
}

/// ringd.md, Regeneration (foundation.md's retry rule): a replica whose
/// own census is outbid by a higher one promises it and ends its own
/// (`stale`), so that the higher one can finish.
#[test]
fn a_higher_census_is_promised_and_ends_the_own_one_as_stale() {
    let (mut r, _) = censusing();
    let outs = proto(deliver(&mut r, T0 + ms(1), n(2), Incarnation(1), Msg::Census { proposed: 2049 }));
    assert_eq!(
        outs,
        vec![
            stored(&r),
            Output::Event(RdEvent::CensusEnded { outcome: CensusOutcome::Stale }),
            send(2, Msg::CensusReply { proposed: 2049, answer: CensusAnswer::Promise { copy: None } }),
        ]
    );
    assert!(r.promises().proposal().is_none());
}

/// ringd.md, Regeneration: `Busy` aborts the census
/// (`censuses_total{outcome="busy"}`); the next try is just past the
/// remaining window, plus at most W/10 of jitter.
#[test]
fn a_census_answered_busy_ends_busy_and_retries_just_past_the_window() {
    let (mut r, proposed) = censusing();
    let busy = CensusAnswer::Refused(Refusal::Busy { remaining: ms(50) });
    assert_eq!(
        proto(deliver(&mut r, T0, n(2), Incarnation(1), Msg::CensusReply { proposed, answer: busy })),
        vec![Output::Event(RdEvent::CensusEnded { outcome: CensusOutcome::Busy })]
    );
    let due = r.token_deadline().expect("a retry is due");
    assert!(due > T0 + ms(50) && due <= T0 + ms(60), "{due:?}");
}

/// ringd.md, Regeneration: a `Stale` (promised higher) answer aborts the
/// census (`stale`) and raises the floor, stored, so that the next one
/// goes above it.
#[test]
fn a_census_answered_stale_ends_stale_and_raises_the_floor() {
    let (mut r, proposed) = censusing();
    let stale = CensusAnswer::Refused(Refusal::Promised { value: 3000 });
    assert_eq!(
        proto(deliver(&mut r, T0, n(3), Incarnation(1), Msg::CensusReply { proposed, answer: stale })),
        vec![stored(&r), Output::Event(RdEvent::CensusEnded { outcome: CensusOutcome::Stale })]
    );
    assert_eq!(r.promises().stored().floor(), 3000);
}

/// ringd.md, Regeneration: an answer counts only for the census in
/// flight; one for another epoch, or with none in flight, is ignored.
#[test]
fn a_census_reply_for_another_epoch_or_with_no_census_out_is_ignored() {
    let (mut r, proposed) = censusing();
    let promise = |proposed| Msg::CensusReply { proposed, answer: CensusAnswer::Promise { copy: None } };
    assert_eq!(proto(deliver(&mut r, T0, n(2), Incarnation(1), promise(proposed + 1))), vec![]);
    assert_eq!(proto(deliver(&mut r, T0, n(3), Incarnation(1), promise(proposed + 1))), vec![]);
    assert_eq!(r.promises().proposal().map(|p| p.0), Some(proposed), "still waiting");
    let mut m = replica(2);
    assert_eq!(proto(deliver(&mut m, T0, n(1), Incarnation(1), promise(proposed))), vec![]);
    assert!(!m.owns_token());
}

/// ringd.md, Regeneration: the origin waits at most W·(1−ρ) for the
/// answers; then the census lapses (`censuses_total{outcome="lapsed"}`).
#[test]
fn a_census_not_answered_by_its_deadline_lapses() {
    let (mut r, _) = censusing();
    let deadline = Lease::new(T0, ms(100), 1_000).holder_valid_until();
    assert_eq!(r.census_deadline(), Some(deadline));
    assert_eq!(
        live_until(&mut r, T0, deadline),
        vec![(deadline, vec![Output::Event(RdEvent::CensusEnded { outcome: CensusOutcome::Lapsed })])]
    );
    assert!(r.promises().proposal().is_none());
}

/// ringd.md, Regeneration: a replica that has seen neither a token nor a
/// `HolderAlive` for `token_lost_after` (plus its jitter) starts a census.
#[test]
fn a_replica_that_sees_no_token_for_token_lost_after_starts_a_census() {
    let mut r = replica(1);
    let due = r.token_deadline().expect("the token-lost deadline");
    let start = Instant::from_millis(T0.as_micros() / 1000 - 200);
    assert!(due >= start + r.cfg.token_lost_after && due <= start + r.cfg.token_lost_after + ms(100), "{due:?}");
    let steps = live_until(&mut r, T0, due);
    let proposed = r.promises().proposal().expect("a census is out").0;
    assert_eq!(steps, vec![(due, census_started(&r, proposed))]);
}

/// ringd.md, Regeneration: a replica that finds itself stalled (a timer
/// more than a heartbeat late) waits one heartbeat before acting on the
/// silence it measured across the stall, once per silence.
#[test]
fn a_stalled_replica_waits_a_heartbeat_before_a_census_once_per_silence() {
    let mut r = replica(1);
    let late = r.token_deadline().expect("the token-lost deadline") + ms(50);
    let heard = |r: &mut RdNode, t| {
        let _ = deliver(r, t, n(3), Incarnation(1), Msg::Hb(hbring::HbMsg::Heartbeat { digest: 0 }));
        let _ = deliver(r, t, n(2), Incarnation(1), Msg::Hb(hbring::HbMsg::HeartbeatAck { digest: 0 }));
    };
    heard(&mut r, late);
    assert_eq!(proto(timeout(&mut r, late)), vec![]);
    assert!(r.promises().proposal().is_none());
    assert_eq!(r.token_deadline(), Some(late + ms(20)));
    // Stalled again across the same silence: no second wait.
    let later = late + ms(200);
    heard(&mut r, later);
    let outs = proto(timeout(&mut r, later));
    let proposed = r.promises().proposal().expect("a census is out").0;
    assert_eq!(outs, census_started(&r, proposed));
}

/// ringd.md, Token: an unacked token is resent to the same life every
/// `suspect_after`, and nothing else happens meanwhile.
#[test]
fn an_unacked_token_is_resent_every_suspect_after() {
    let mut r = passing();
    let resent = vec![send(2, Msg::Token(Box::new(passed())))];
    assert_eq!(
        live_until(&mut r, T0 + ms(1), T0 + ms(201)),
        vec![(T0 + ms(101), resent.clone()), (T0 + ms(201), resent)]
    );
    assert!(r.is_passing());
}

/// ringd.md, Majority lease: while a token service runs the owner renews
/// every heartbeat; a renewal a majority acked moves the lease, and the
/// command's supervisor deadline with it (never past `timeout_ms`).
#[test]
fn an_owner_renews_every_heartbeat_and_a_majority_ack_extends_its_command() {
    let (mut r, id, _) = running_token_job();
    assert_eq!(live_until(&mut r, T0 + ms(1), T0 + ms(20)), vec![(T0 + ms(20), renewal(2))]);
    let outs = proto(deliver(&mut r, T0 + ms(21), n(2), Incarnation(1), Msg::HolderAliveAck { epoch: 1025, nonce: 2 }));
    let until = Lease::new(T0 + ms(20), ms(100), 1_000).holder_valid_until();
    assert_eq!(outs, vec![Output::Job(ftcore::JobCommand::Extend { id, deadline: until })]);
    assert_eq!(r.lease_until(), Some(until));
}

/// ringd.md, Majority lease: with no renewal acked by a majority the lease
/// runs out (`lease_expiries_total`); the owner keeps renewing.
#[test]
fn an_owners_lease_expires_without_a_majority_ack() {
    let (mut r, _, lease_until) = running_token_job();
    assert_eq!(
        live_until(&mut r, T0 + ms(1), lease_until),
        vec![
            (T0 + ms(20), renewal(2)),
            (T0 + ms(40), renewal(3)),
            (T0 + ms(60), renewal(4)),
            (T0 + ms(80), renewal(5)),
            (lease_until, vec![Output::Event(RdEvent::LeaseExpired)]),
        ]
    );
    assert!(r.owns_token() && r.lease_until().is_none());
    // The ended lease stays ended: the next renewals are only renewals (an
    // older acked renewal still remembered once brought it back, extended
    // the command to a deadline in the past and expired it again).
    assert_eq!(
        live_until(&mut r, lease_until, T0 + ms(140)),
        vec![(T0 + ms(100), renewal(6)), (T0 + ms(120), renewal(7)), (T0 + ms(140), renewal(8))]
    );
    assert!(r.lease_until().is_none());
}

/// ringd.md, Services and Acknowledged results: a token command's result
/// is recorded in the token, which moves on at once; the client is
/// answered once the successor acked it.
#[test]
fn a_token_commands_exit_is_recorded_and_answered_after_the_successors_ack() {
    let (mut r, id, _) = running_token_job();
    let t = T0 + ms(2);
    r.handle_job_end(t, id, JobEnd::Exited { status: 0, stdout: "done".into() });
    let result = ServiceResult { output: "done".into(), status: 0, fence: Some((1025u128 << 64) | 5) };
    let mut passed = Token { quiet: 0, ..token(1025, 6, 1) };
    passed.results.push((7, Ok(result.clone())));
    assert_eq!(
        proto(drain(&mut r)),
        vec![send(2, Msg::Token(Box::new(passed))), Output::Event(RdEvent::Passed { to: n(2) })]
    );
    let mut outs = answered(1, 7, "job", Ok(result));
    outs.push(send(3, Msg::TokenRelease { epoch: 1025, seq: 5 }));
    assert_eq!(proto(deliver(&mut r, t, n(2), Incarnation(1), Msg::TokenAck { epoch: 1025, seq: 6 })), outs);
}

/// ringd.md, Services (safety: Supervisor): a token command killed at its
/// lease's end is answered `token_lost` at once and not recorded (a retry
/// runs it again); `supervisor_kills_total` counts it.
#[test]
fn a_token_command_killed_at_its_leases_end_is_answered_token_lost_unrecorded() {
    let (mut r, id, lease_until) = running_token_job();
    r.handle_job_end(lease_until, id, JobEnd::Killed { deadline: true, stdout: String::new() });
    let mut outs = vec![Output::Event(RdEvent::SupervisorKilled { service: "job".into() })];
    outs.extend(answered(1, 7, "job", Err(ExecError::TokenLost)));
    outs.push(send(2, Msg::Token(Box::new(Token { quiet: 0, ..token(1025, 6, 1) }))));
    outs.push(Output::Event(RdEvent::Passed { to: n(2) }));
    assert_eq!(proto(drain(&mut r)), outs);
}

/// ringd.md, Services: a command service without the token starts at
/// once (argv: the command, then the request's arguments; killed after
/// `timeout_ms`) and is answered with its exit status and stdout, a
/// signal as 128 + its number, a kill at `timeout_ms` as `timed_out`, a
/// failed start as `spawn_failed`; the end of an unknown job is ignored.
#[test]
fn a_commands_end_is_answered_with_its_status_or_why_it_did_not_finish() {
    let mut r = replica_with(1, with_job(false));
    let mut ids = Vec::new();
    for req in 1..=4 {
        let outs = proto(request(&mut r, T0, ClientId(req), execute(req, "job", &["x"])));
        let id = started(&outs);
        assert_eq!(
            outs,
            vec![Output::Job(ftcore::JobCommand::Start {
                id,
                argv: vec!["sleep".into(), "300".into(), "x".into()],
                fence: None,
                deadline: T0 + ms(1_000),
                max_output: MAX_OUTPUT,
            })]
        );
        ids.push(id);
    }
    assert_eq!(r.load(), 4);
    let end = |r: &mut RdNode, t, id, e| {
        r.handle_job_end(t, id, e);
        proto(drain(r))
    };
    let unknown = ids.iter().max().copied().unwrap_or(0) + 1;
    assert_eq!(end(&mut r, T0 + ms(5), unknown, JobEnd::Exited { status: 0, stdout: String::new() }), vec![]);
    let result = |output: &str, status| Ok(ServiceResult { output: output.into(), status, fence: None });
    assert_eq!(
        end(&mut r, T0 + ms(5), ids[0], JobEnd::Exited { status: 3, stdout: "out".into() }),
        answered(1, 1, "job", result("out", 3))
    );
    assert_eq!(
        end(&mut r, T0 + ms(5), ids[1], JobEnd::Signalled { signal: 9, stdout: "so far".into() }),
        answered(2, 2, "job", result("so far", 137))
    );
    let mut killed = vec![Output::Event(RdEvent::SupervisorKilled { service: "job".into() })];
    killed.extend(answered(3, 3, "job", Err(ExecError::TimedOut)));
    assert_eq!(end(&mut r, T0 + ms(1_000), ids[2], JobEnd::Killed { deadline: true, stdout: String::new() }), killed);
    assert_eq!(
        end(&mut r, T0 + ms(5), ids[3], JobEnd::Failed("no such file".into())),
        answered(4, 4, "job", Err(ExecError::Spawn("no such file".into())))
    );
    assert_eq!(r.load(), 0);
}

/// ringd.md, Services: `sleep MS` runs without the token and is answered
/// when it ends; at most `workers` run at once, more are answered `busy`.
#[test]
fn a_sleep_is_answered_when_it_ends_and_refused_busy_beyond_the_workers() {
    let mut c = cfg();
    c.workers = 1;
    let mut r = replica_with(1, c);
    assert_eq!(proto(request(&mut r, T0, ClientId(1), execute(1, "sleep", &["10"]))), vec![]);
    assert_eq!(
        proto(request(&mut r, T0, ClientId(2), execute(2, "sleep", &["10"]))),
        answered(2, 2, "sleep", Err(ExecError::Busy))
    );
    let done = Ok(ServiceResult { output: String::new(), status: 0, fence: None });
    assert_eq!(live_until(&mut r, T0, T0 + ms(10)), vec![(T0 + ms(10), answered(1, 1, "sleep", done))]);
}

/// ringd.md, At D (Alone): a replica whose ring is a minority answers
/// token services `no_quorum`; a full queue (`max_queue`) answers `busy`.
#[test]
fn a_token_service_is_refused_no_quorum_in_a_minority_and_busy_past_max_queue() {
    let mut r = replica(1);
    r.handle_peer_unreachable(T0, n(3));
    r.handle_peer_unreachable(T0, n(2));
    let _ = drain(&mut r);
    assert_eq!(r.ring().view().alive_count(), 1);
    assert_eq!(
        proto(request(&mut r, T0, ClientId(1), execute(1, "counter.incr", &["c"]))),
        answered(1, 1, "counter.incr", Err(ExecError::NoQuorum))
    );
    let mut c = cfg();
    c.max_queue = 1;
    let mut r = replica_with(2, c);
    assert_eq!(
        proto(request(&mut r, T0, ClientId(1), execute(1, "counter.incr", &["c"]))),
        vec![send(1, Msg::Wanted), send(3, Msg::Wanted)]
    );
    assert_eq!(
        proto(request(&mut r, T0, ClientId(2), execute(2, "counter.incr", &["c"]))),
        answered(2, 2, "counter.incr", Err(ExecError::Busy))
    );
}

/// ringd.md, Acknowledged results and retries: a repeated `request_id`
/// gets the outcome the token stored, without running again (no `Ran`,
/// the state unchanged), answered after the successor's ack.
#[test]
fn a_repeated_request_id_gets_the_stored_outcome_without_running_again() {
    let mut r = replica(1);
    let _ = proto(request(&mut r, T0, ClientId(1), execute(7, "counter.incr", &["c"])));
    let stored_result = ServiceResult { output: "5".into(), status: 0, fence: Some((1025u128 << 64) | 2) };
    let mut t = Token { quiet: 0, ..token(1025, 5, 3) };
    t.state.insert("counter:c".into(), "5".into());
    t.results.push((7, Ok(stored_result.clone())));
    let outs = drain_token(&mut r, t.clone());
    assert_eq!(
        outs,
        vec![
            stored(&r),
            send(3, Msg::TokenAck { epoch: 1025, seq: 5 }),
            Output::Event(RdEvent::Accepted { id: (1025, 5) }),
            send(2, Msg::HolderAlive { epoch: 1025, nonce: 1 }),
            send(3, Msg::HolderAlive { epoch: 1025, nonce: 1 }),
        ]
    );
    let t1 = T0 + ms(1);
    let outs = proto(deliver(&mut r, t1, n(3), Incarnation(1), Msg::HolderAliveAck { epoch: 1025, nonce: 1 }));
    let passed = Token { seq: 6, from: n(1), quiet: 1, ..t };
    assert_eq!(outs, vec![send(2, Msg::Token(Box::new(passed))), Output::Event(RdEvent::Passed { to: n(2) })]);
    let mut outs = answered(1, 7, "counter.incr", Ok(stored_result));
    outs.push(send(3, Msg::TokenRelease { epoch: 1025, seq: 5 }));
    assert_eq!(proto(deliver(&mut r, t1, n(2), Incarnation(1), Msg::TokenAck { epoch: 1025, seq: 6 })), outs);
}

/// ringd.md, Lookup: a lap not back within `lookup_timeout` starts one
/// more lap (a late Find of the first is ignored); after that the origin
/// answers the best it knows, itself at worst: every lookup is answered.
#[test]
fn a_lookup_whose_find_is_lost_goes_one_more_lap_then_answers_itself() {
    let mut c = cfg();
    c.lookup_timeout = ms(30);
    let mut r = replica_with(1, c);
    let outs = proto(request(&mut r, T0, ClientId(5), RingRequest::LookUp { request_id: 4 }));
    let key = outs
        .iter()
        .find_map(|o| match o {
            Output::Send { msg: Msg::Find { request_id, .. }, .. } => Some(*request_id),
            _ => None,
        })
        .expect("a Find");
    let find = |lap, hops| Msg::Find {
        request_id: key,
        lap,
        hops,
        origin: n(1),
        best: n(1),
        best_load: 0,
        best_addr: "127.0.0.1:7801".into(),
    };
    assert_eq!(outs, vec![send(2, find(1, 0))]);
    assert_eq!(live_until(&mut r, T0, T0 + ms(30)), vec![(T0 + ms(30), vec![send(2, find(2, 0))])]);
    assert_eq!(proto(deliver(&mut r, T0 + ms(31), n(3), Incarnation(1), find(1, 2))), vec![]);
    let answer = vec![
        Output::Event(RdEvent::LookedUp { took: ms(60) }),
        Output::Reply {
            client: ClientId(5),
            reply: RingReply::LookedUp { request_id: 4, replica: n(1), address: "127.0.0.1:7801".into(), load: 0 },
        },
    ];
    assert_eq!(live_until(&mut r, T0 + ms(31), T0 + ms(60)), vec![(T0 + ms(60), answer)]);
    assert_eq!(r.lookup_deadline(), None);
}

/// ringd.md, Lookup: with no successor to send a Find to, the replica
/// answers at once with itself.
#[test]
fn a_lookup_with_no_successor_is_answered_at_once_with_this_replica() {
    let mut r = replica(1);
    r.handle_peer_unreachable(T0, n(3));
    r.handle_peer_unreachable(T0, n(2));
    let _ = drain(&mut r);
    assert_eq!(
        proto(request(&mut r, T0 + ms(1), ClientId(5), RingRequest::LookUp { request_id: 4 })),
        vec![
            Output::Event(RdEvent::LookedUp { took: Duration::ZERO }),
            Output::Reply {
                client: ClientId(5),
                reply: RingReply::LookedUp { request_id: 4, replica: n(1), address: "127.0.0.1:7801".into(), load: 0 },
            },
        ]
    );
}

/// A client that went away is answered nothing more: its lookup is
/// dropped (a returning Find answers nobody), its result waiting for the
/// successor's ack too (the ack only releases the sender), and a reply
/// already queued for it.
#[test]
fn a_gone_client_gets_no_lookup_answer_no_acked_result_and_no_queued_reply() {
    let mut r = replica(1);
    let outs = proto(request(&mut r, T0, ClientId(5), RingRequest::LookUp { request_id: 4 }));
    let Some(Output::Send { msg: find, .. }) = outs.first().cloned() else { panic!("a Find: {outs:?}") };
    r.handle_client_gone(T0, ClientId(5));
    assert_eq!(proto(drain(&mut r)), vec![]);
    assert_eq!(r.lookup_deadline(), None);
    let back = match find {
        Msg::Find { request_id, lap, origin, best, best_load, best_addr, .. } => {
            Msg::Find { request_id, lap, hops: 2, origin, best, best_load, best_addr }
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(proto(deliver(&mut r, T0 + ms(1), n(3), Incarnation(1), back)), vec![]);
    // A result waiting for the successor's ack.
    let mut r = owner();
    let _ = request(&mut r, T0, ClientId(1), execute(7, "counter.incr", &["c"]));
    let _ = deliver(&mut r, T0 + ms(1), n(3), Incarnation(1), Msg::HolderAliveAck { epoch: 1025, nonce: 1 });
    assert!(r.is_passing());
    r.handle_client_gone(T0 + ms(1), ClientId(1));
    assert_eq!(proto(drain(&mut r)), vec![]);
    assert_eq!(
        proto(deliver(&mut r, T0 + ms(2), n(2), Incarnation(1), Msg::TokenAck { epoch: 1025, seq: 6 })),
        vec![send(3, Msg::TokenRelease { epoch: 1025, seq: 5 })]
    );
    // A reply queued, not yet taken.
    let mut r = replica(1);
    r.handle_request(T0, ClientId(2), execute(1, "echo", &["hi"]));
    r.handle_client_gone(T0, ClientId(2));
    assert_eq!(proto(drain(&mut r)), vec![Output::Event(RdEvent::Executed { service: "echo".into(), outcome: "ok" })]);
}

/// A replica leaving hands its token on at once (no idle hold) and has
/// left once its successor acked it; a request meanwhile is answered
/// `leaving`.
#[test]
fn an_owner_shutting_down_passes_at_once_and_has_left_once_acked() {
    let mut r = owner();
    let t = T0 + ms(1);
    r.handle_shutdown(t);
    let passed = Token { quiet: IDLE + 1, ..token(1025, 6, 1) };
    assert_eq!(
        proto(drain(&mut r)),
        vec![send(2, Msg::Token(Box::new(passed))), Output::Event(RdEvent::Passed { to: n(2) })]
    );
    assert!(!r.is_left());
    assert_eq!(
        proto(request(&mut r, t, ClientId(1), execute(1, "echo", &["a"]))),
        answered(1, 1, "echo", Err(ExecError::Leaving))
    );
    assert_eq!(
        proto(deliver(&mut r, t, n(2), Incarnation(1), Msg::TokenAck { epoch: 1025, seq: 6 })),
        vec![send(3, Msg::TokenRelease { epoch: 1025, seq: 5 })]
    );
    assert!(r.is_left());
}
