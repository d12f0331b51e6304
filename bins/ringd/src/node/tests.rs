//! Handler tests with exact outputs (the heartbeat ring's own messages and
//! events are left out: `hbring` has its own tests).

use std::net::SocketAddr;

use ::durable::promise::Refusal;
use api::ring::{ExecError, ServiceResult};
use ftcore::testing::{deliver, drain, request, timeout};
use ftcore::Output;
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
    let start = Instant::from_millis(T0.as_micros() / 1000 - 200);
    let mut ctx = Context::new(n(me), Incarnation(1), ring3(), start, c);
    ctx.stored = Some(RdDurable { promises: Some(Promises::recovered_with(0)) });
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
