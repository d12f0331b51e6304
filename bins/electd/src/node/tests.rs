//! Handler tests with exact outputs, and whole elections on small rings
//! driven by a FIFO in-test network (every process starting at once).

use std::collections::VecDeque;
use std::net::SocketAddr;

use ftcore::testing::{deliver, drain};
use ftcore::Output;
use membership::{Member, Membership};

use super::*;

const T0: Instant = Instant::from_millis(10_000);

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn cfg(algorithm: Algorithm) -> ElConfig {
    let mut c = ElConfig {
        algorithm,
        heartbeat: Duration::from_millis(20),
        suspect_after: Duration::from_millis(60),
        // lease·(1+ρ) + heartbeat ≤ suspect_after·(1−ρ): at most 39 ms.
        lease: Duration::from_millis(39),
        hop_timeout: Duration::from_millis(10),
        request_timeout: Duration::from_millis(50),
        grant_ttl: Duration::from_millis(400),
        election_jitter: Duration::from_millis(20),
        ..ElConfig::default()
    };
    c.election_timeout = c.derived_election_timeout(64);
    c
}

fn ring_of(ids: &[u32]) -> Membership {
    Membership::new(
        ids.iter()
            .enumerate()
            .map(|(i, id)| Member { id: n(*id), addr: SocketAddr::from(([127, 0, 0, 1], 20_000 + i as u16)) })
            .collect(),
    )
    .expect("valid ring")
}

/// Process `me` of `ring`, recovered, stored in `term`, started at 0 (its
/// restart window is long over at T0).
fn process(ring: &Membership, me: u32, algorithm: Algorithm, term: u64) -> ElNode {
    let mut ctx = Context::new(n(me), Incarnation(1), ring.clone(), Instant::ZERO, cfg(algorithm));
    ctx.stored = Some(ElDurable { promises: Some(Promises::recovered_with(0)), term, follows: None });
    let mut p = ElNode::start(ctx).expect("valid config");
    drain(&mut p);
    p
}

/// A ring of processes and a FIFO network between them (no loss).
struct Net {
    procs: BTreeMap<NodeId, ElNode>,
    wire: VecDeque<(NodeId, NodeId, Msg)>,
    /// Election messages sent, by kind.
    sent: BTreeMap<&'static str, u64>,
}

impl Net {
    fn new(ids: &[u32], algorithm: Algorithm) -> Self {
        let ring = ring_of(ids);
        let procs = ids.iter().map(|i| (n(*i), process(&ring, *i, algorithm, 0))).collect();
        Net { procs, wire: VecDeque::new(), sent: BTreeMap::new() }
    }

    fn collect(&mut self, from: NodeId, outs: Vec<OutputOf<ElNode>>) {
        for o in outs {
            if let Output::Send { to, msg } = o {
                if msg.is_election() {
                    let kind = <Msg as ftcore::Message>::kind_name(ftcore::Message::kind(&msg)).unwrap_or("?");
                    *self.sent.entry(kind).or_default() += 1;
                }
                self.wire.push_back((from, to, msg));
            }
        }
    }

    /// Every process starts an election at `now` (relay; the alive-list
    /// algorithm: the first process in ring order, as its randomized timer
    /// would — concurrent same-term Elections split the votes and retry
    /// later, which needs the simulator's timers); messages are delivered
    /// in FIFO order until none is left (heartbeats: a few rounds).
    fn elect_all_at_once(&mut self, now: Instant) {
        let mut ids: Vec<NodeId> = self.procs.keys().copied().collect();
        if self.procs.values().next().is_some_and(|p| p.cfg.algorithm == Algorithm::Ring) {
            let first = self.procs.values().next().map(|p| p.members[0]).expect("a process");
            ids = vec![first];
        }
        for id in &ids {
            let p = self.procs.get_mut(id).expect("process");
            p.start_election_now(now);
            let outs = drain(p);
            self.collect(*id, outs);
        }
        self.run(now);
    }

    fn run(&mut self, now: Instant) {
        let mut steps = 0;
        while let Some((from, to, msg)) = self.wire.pop_front() {
            steps += 1;
            assert!(steps < 100_000, "the election does not end");
            if let Some(p) = self.procs.get_mut(&to) {
                let outs = deliver(p, now, from, Incarnation(1), msg);
                self.collect(to, outs);
            }
        }
    }

    fn election_messages(&self) -> u64 {
        self.sent.values().sum()
    }
}

/// 2n⌊log2 n⌋ + 2n.
fn relay_bound(n: u64) -> u64 {
    2 * n * u64::from(n.ilog2()) + 2 * n
}

fn agreed(net: &Net) -> NodeId {
    let max = *net.procs.keys().max().expect("processes");
    for (id, p) in &net.procs {
        assert_eq!(p.coordinator(), Some(max), "process {id} names {:?}, not the maximum {max}", p.coordinator());
        assert_eq!(p.follows(), Some(max), "process {id} follows {:?}", p.follows());
    }
    assert!(net.procs[&max].in_office(), "the maximum took office");
    max
}

#[test]
fn relay_worked_example_of_the_seed_ids_1_to_4() {
    // The seed's example: ids 1-4 clockwise. Round 0: every process sends
    // its id and its predecessor's (8 messages); only 1 (e = 4 > 1, 3)
    // stays active, with d = 4; round 1: 4 travels the lap back to 1 (4);
    // Elected: one lap (4).
    let mut net = Net::new(&[1, 2, 3, 4], Algorithm::Relay);
    net.elect_all_at_once(T0);
    assert_eq!(agreed(&net), n(4));
    assert_eq!(net.sent, BTreeMap::from([("elected", 4), ("relay", 12)]));
    // Over every arrangement of four ids the worst case reaches the bound
    // 2·4·⌊log2 4⌋ + 2·4 = 24 and never passes it.
    let mut worst = 0;
    for order in [[1, 2, 3, 4], [1, 2, 4, 3], [1, 3, 2, 4], [1, 3, 4, 2], [1, 4, 2, 3], [1, 4, 3, 2]] {
        let mut net = Net::new(&order, Algorithm::Relay);
        net.elect_all_at_once(T0);
        assert_eq!(agreed(&net), n(4));
        worst = worst.max(net.election_messages());
    }
    assert!(worst <= relay_bound(4), "{worst}");
    println!("n = 4: worst arrangement {worst} messages (bound {})", relay_bound(4));
}

#[test]
fn both_algorithms_elect_the_maximum_on_the_issue_rings() {
    for ids in [&[5, 6, 4, 7, 8][..], &[8, 5, 3], &[27, 4, 42, 15, 63, 9]] {
        for alg in [Algorithm::Relay, Algorithm::Ring] {
            let mut net = Net::new(ids, alg);
            net.elect_all_at_once(T0);
            agreed(&net);
            if alg == Algorithm::Relay {
                let n = ids.len() as u64;
                assert!(net.election_messages() <= relay_bound(n), "{ids:?}: {:?}", net.sent);
            }
        }
    }
}

#[test]
fn relay_message_counts_for_8_to_64_stay_within_the_bound() {
    // Ids in increasing order (the relay's best case) and 20 seeded
    // shuffles each; the worst is printed beside the bound.
    let mut rng = SeededRng::new(7);
    for size in [8u32, 16, 32, 64] {
        let mut ids: Vec<u32> = (1..=size).collect();
        let mut worst = 0;
        for shuffle in 0..=20 {
            if shuffle > 0 {
                for i in (1..ids.len()).rev() {
                    let j = rng.range_inclusive(0, i as u64) as usize;
                    ids.swap(i, j);
                }
            }
            let mut relay = Net::new(&ids, Algorithm::Relay);
            relay.elect_all_at_once(T0);
            agreed(&relay);
            worst = worst.max(relay.election_messages());
        }
        let mut ring = Net::new(&ids, Algorithm::Ring);
        ring.elect_all_at_once(T0);
        agreed(&ring);
        let n = u64::from(size);
        let (bound, alive, cr) = (relay_bound(n), ring.election_messages(), n * (n + 1) / 2);
        println!("n={size}: relay worst of 21 arrangements {worst} (bound {bound}), alive-list {alive}, Chang-Roberts worst case {cr}");
        assert!(worst <= bound, "n = {size}: {worst} > {bound}");
    }
}

#[test]
fn lower_term_message_is_answered_stale_and_changes_nothing() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Ring, 7);
    let before = p.clone();
    let outs = deliver(&mut p, T0, n(1), Incarnation(1), Msg::Heartbeat { term: 6, seq: 1 });
    assert_eq!(
        outs,
        vec![
            Output::Send { to: n(1), msg: Msg::StaleTerm { term: 7, coordinator: None } },
            Output::Event(ElEvent::StaleAnswered),
        ]
    );
    assert_eq!((p.term, p.follows, p.coordinator), (before.term, before.follows, before.coordinator));
}

#[test]
fn higher_term_heartbeat_is_joined_and_stored_before_the_ack() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Ring, 7);
    let outs = deliver(&mut p, T0, n(3), Incarnation(1), Msg::Heartbeat { term: 9, seq: 4 });
    let Output::Persist(d) = &outs[0] else { panic!("stored first: {outs:?}") };
    assert_eq!((d.term, d.follows), (9, Some(n(3))));
    assert_eq!(d.promises.as_ref().map(|p| p.in_use()), Some(9), "the term acked is stored as in use");
    assert!(outs.contains(&Output::Send { to: n(3), msg: Msg::HeartbeatAck { term: 9, seq: 4 } }), "{outs:?}");
    // Following 3 in term 9, it acks nobody else there.
    let outs = deliver(&mut p, T0, n(1), Incarnation(1), Msg::Heartbeat { term: 9, seq: 1 });
    assert_eq!(outs, vec![Output::Event(ElEvent::FollowConflict)]);
}

#[test]
fn one_vote_per_term_a_second_election_of_the_term_passes_without_it() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Ring, 4);
    let e = |initiator: u32, alive: Vec<NodeId>| Msg::Election {
        term: 5,
        initiator: n(initiator),
        initiator_inc: Incarnation(1),
        alive,
        hop: 1,
    };
    let outs = deliver(&mut p, T0, n(1), Incarnation(1), e(1, vec![n(1)]));
    assert!(matches!(outs[0], Output::Persist(ElDurable { term: 5, .. })), "{outs:?}");
    assert!(outs.iter().any(|o| matches!(o, Output::Send { to, msg: Msg::Election { alive, .. } } if *to == n(3) && *alive == vec![n(1), n(2)])), "{outs:?}");
    // A higher initiator's Election of the same term: forwarded, no vote.
    let outs = deliver(&mut p, T0, n(1), Incarnation(1), e(3, vec![n(3), n(1)]));
    assert!(outs.iter().any(|o| matches!(o, Output::Send { to, msg: Msg::Election { alive, .. } } if *to == n(3) && *alive == vec![n(3), n(1)])), "{outs:?}");
    // A lower one than already forwarded is dropped (only its hop is acked).
    let outs = deliver(&mut p, T0, n(1), Incarnation(1), e(1, vec![n(1)]));
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 1 } }]);
}

#[test]
fn an_election_back_after_its_deadline_names_nobody() {
    let ring = ring_of(&[1, 2, 3]);
    let all_on = Rules::ALL_ON;
    for (late, rules) in [(false, all_on), (true, all_on), (true, all_on.without(ElRule::ElectionDeadline))] {
        let mut p = process(&ring, 2, Algorithm::Ring, 4);
        p.cfg.rules = rules;
        p.start_election_now(T0);
        drain(&mut p);
        let deadline = T0 + p.cfg.shrunk(p.cfg.election_timeout);
        let back = if late { deadline + Duration::from_millis(1) } else { deadline };
        let all = vec![n(2), n(3), n(1)];
        let msg = Msg::Election { term: 5, initiator: n(2), initiator_inc: Incarnation(1), alive: all, hop: 3 };
        let outs = deliver(&mut p, back, n(1), Incarnation(1), msg);
        let past = outs.iter().any(|o| matches!(o, Output::Event(ElEvent::PastDeadline { term: 5 })));
        let named = outs.iter().any(
            |o| matches!(o, Output::Event(ElEvent::ElectionCompleted { coordinator, .. }) if *coordinator == n(3)),
        );
        assert_eq!(
            (past, named),
            (late, !late || rules.off(ElRule::ElectionDeadline)),
            "late {late}, {rules:?}: {outs:?}"
        );
    }
}

#[test]
fn prevote_is_refused_while_a_live_higher_coordinator_is_known() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    let outs = deliver(&mut p, at(T0, 10), n(1), Incarnation(1), Msg::PreVote { term: 5 });
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::PreVoteReply { term: 4, asked: 5, yes: false } }]);
    assert_eq!(p.term, 4, "a pre-vote joins nothing");
    // Silent for suspect_after: yes.
    let outs = deliver(&mut p, at(T0, 70), n(1), Incarnation(1), Msg::PreVote { term: 5 });
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::PreVoteReply { term: 4, asked: 5, yes: true } }]);
}

#[test]
fn an_unreachable_coordinator_is_given_up_at_once_and_prevotes_are_granted() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    // Another peer's death changes nothing here.
    p.handle_peer_unreachable(at(T0, 5), n(1));
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.coordinator, Some(n(3)));
    // The coordinator's process is gone: what suspect_after of silence
    // does, 10 ms after its heartbeat: an election within the jitter.
    p.handle_peer_unreachable(at(T0, 10), n(3));
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!((p.coordinator, p.lost_coordinator_at), (None, Some(at(T0, 10))));
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= at(T0, 10) + p.cfg.election_jitter));
    let outs = deliver(&mut p, at(T0, 11), n(1), Incarnation(1), Msg::PreVote { term: 5 });
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::PreVoteReply { term: 4, asked: 5, yes: true } }]);
}

fn at(t: Instant, ms: u64) -> Instant {
    t + Duration::from_millis(ms)
}

/// Consumer 1 of ring {1, 2, 3} following coordinator 3 in term 4, its
/// client's request answered `Queued { pos: 0 }` and then granted with
/// `fence(4, 1)` (not yet confirmed by an acked renewal).
fn consumer_granted_unconfirmed() -> ElNode {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 1, Algorithm::Relay, 4);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    p.handle_request(T0, ClientId(1), LockRequest::Acquire { timeout_ms: 10_000 });
    let outs = drain(&mut p);
    assert!(
        outs.contains(&Output::Send { to: n(3), msg: Msg::Request { term: 4, req: 1, queued: None, holding: None } })
    );
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Queued { term: 4, req: 1, pos: 0 });
    p
}

/// [`consumer_granted_unconfirmed`], then granted fence (4, 1) by 3 and
/// its first renewal acked at T0 + 1 ms: the local client holds.
fn consumer_granted_confirmed() -> (ElNode, u128) {
    let mut p = consumer_granted_unconfirmed();
    let f = lockservice::fence(4, 1);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Granted { term: 4, req: 1, fence: f });
    deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::RenewAck { term: 4, fence: f, seq: 1 });
    (p, f)
}

#[test]
fn an_unconfirmed_grant_is_given_back_when_the_coordinator_changes() {
    let mut p = consumer_granted_unconfirmed();
    let f = lockservice::fence(4, 1);
    let outs = deliver(&mut p, T0, n(3), Incarnation(1), Msg::Granted { term: 4, req: 1, fence: f });
    assert_eq!(outs, vec![Output::Send { to: n(3), msg: Msg::Renew { term: 4, fence: f, seq: 1 } }]);
    // Coordinator 2 of term 5 heard before any renewal was acked: the
    // grant goes back to 3, and the request (its place kept) to 2; it is
    // not re-registered (`holding`) and the client is not granted.
    let outs = deliver(&mut p, at(T0, 5), n(2), Incarnation(1), Msg::Heartbeat { term: 5, seq: 1 });
    let sends: Vec<&Output<Msg, LockReply, ElEvent, ElDurable>> =
        outs.iter().filter(|o| matches!(o, Output::Send { .. } | Output::Reply { .. })).collect();
    assert_eq!(
        sends,
        vec![
            &Output::Send { to: n(3), msg: Msg::Release { term: 5, fence: f } },
            &Output::Send { to: n(2), msg: Msg::Request { term: 5, req: 2, queued: Some((4, 0)), holding: None } },
            &Output::Send { to: n(2), msg: Msg::HeartbeatAck { term: 5, seq: 1 } },
        ]
    );
    assert!(p.consumer.grant.is_none() && p.holder().is_none());
}

#[test]
fn a_confirmed_grant_is_re_registered_with_the_new_coordinator() {
    let mut p = consumer_granted_unconfirmed();
    let f = lockservice::fence(4, 1);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Granted { term: 4, req: 1, fence: f });
    let outs = deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::RenewAck { term: 4, fence: f, seq: 1 });
    // The client's lease is the grant's: the acked renewal's send time
    // (T0) + grant_ttl·(1−ρ).
    let until = T0 + p.cfg.shrunk(p.cfg.grant_ttl);
    assert_eq!(p.consumer.grant.as_ref().map(|g| g.expiry), Some(until));
    let granted = LockReply::Granted { fence: f, lease_until_us: until.as_micros() };
    assert!(outs.contains(&Output::Reply { client: ClientId(1), reply: granted }), "{outs:?}");
    let outs = deliver(&mut p, at(T0, 5), n(2), Incarnation(1), Msg::Heartbeat { term: 5, seq: 1 });
    assert!(
        outs.contains(&Output::Send {
            to: n(2),
            msg: Msg::Request { term: 5, req: 0, queued: None, holding: Some(f) }
        }),
        "{outs:?}"
    );
}

/// The re-registration reaches the new coordinator before it is in
/// office and is denied: it goes again after the ack of each of its
/// heartbeats (not twice at one instant), never a renewal meanwhile; once
/// echoed, renewals go every heartbeat until one is acked, then every
/// `grant_ttl/3` again.
#[test]
fn a_denied_re_registration_is_sent_again_until_echoed() {
    let (mut p, f) = consumer_granted_confirmed();
    // What the consumer side sends (2's silence meanwhile starts a
    // pre-vote, beside the point here).
    let sends = |outs: Vec<OutputOf<ElNode>>| -> Vec<Msg> {
        outs.into_iter()
            .filter_map(|o| match o {
                Output::Send { msg: Msg::PreVote { .. }, .. } => None,
                Output::Send { msg, .. } => Some(msg),
                _ => None,
            })
            .collect()
    };
    let again = Msg::Request { term: 5, req: 0, queued: None, holding: Some(f) };
    let hb = |seq| Msg::Heartbeat { term: 5, seq };
    let outs = sends(deliver(&mut p, at(T0, 5), n(2), Incarnation(1), hb(1)));
    assert_eq!(outs, vec![again.clone(), Msg::HeartbeatAck { term: 5, seq: 1 }]);
    let denied = Msg::Denied { term: 5, req: 0, why: Denial::NoQuorum };
    assert_eq!(sends(deliver(&mut p, at(T0, 6), n(2), Incarnation(1), denied)), vec![]);
    let outs = sends(deliver(&mut p, at(T0, 25), n(2), Incarnation(1), hb(2)));
    assert_eq!(outs, vec![Msg::HeartbeatAck { term: 5, seq: 2 }, again.clone()]);
    // The renewal tick (T0 + grant_ttl/3) sends the re-registration, not
    // a renewal 2 does not know yet.
    let tick = T0 + p.cfg.grant_ttl / 3;
    p.handle_timeout(tick);
    assert_eq!(sends(drain(&mut p)), vec![again]);
    // Echoed: a renewal at once, then every heartbeat until one is acked.
    let echoed = at(tick, 1);
    let outs = sends(deliver(&mut p, echoed, n(2), Incarnation(1), Msg::Granted { term: 5, req: 0, fence: f }));
    assert_eq!(outs, vec![Msg::Renew { term: 5, fence: f, seq: 2 }]);
    p.handle_timeout(echoed + p.cfg.heartbeat);
    assert_eq!(sends(drain(&mut p)), vec![Msg::Renew { term: 5, fence: f, seq: 3 }]);
    let acked = echoed + p.cfg.heartbeat + Duration::from_millis(1);
    deliver(&mut p, acked, n(2), Incarnation(1), Msg::RenewAck { term: 5, fence: f, seq: 3 });
    p.handle_timeout(echoed + p.cfg.heartbeat * 2);
    assert_eq!(sends(drain(&mut p)), vec![], "no renewal a heartbeat after the ack");
    p.handle_timeout(echoed + p.cfg.heartbeat + p.cfg.grant_ttl / 3);
    assert_eq!(sends(drain(&mut p)), vec![Msg::Renew { term: 5, fence: f, seq: 4 }]);
    assert_eq!(p.holder().map(|(_, f)| f), Some(f));
}

/// An expired grant is never re-registered (after a pause, a heartbeat
/// or a renewal tick may be handled before the grant's expiry).
#[test]
fn an_expired_grant_is_not_re_registered() {
    let (mut p, _) = consumer_granted_confirmed();
    deliver(&mut p, at(T0, 5), n(2), Incarnation(1), Msg::Heartbeat { term: 5, seq: 1 });
    let expired = p.consumer.grant.as_ref().map(|g| g.expiry).expect("held");
    let outs = deliver(&mut p, expired, n(2), Incarnation(1), Msg::Heartbeat { term: 5, seq: 2 });
    assert_eq!(
        outs.iter().filter(|o| matches!(o, Output::Send { .. })).collect::<Vec<_>>(),
        vec![&Output::Send { to: n(2), msg: Msg::HeartbeatAck { term: 5, seq: 2 } }]
    );
}

#[test]
fn a_broken_link_to_the_coordinator_resends_the_queued_request() {
    let mut p = consumer_granted_unconfirmed();
    // Its Granted may have been lost with the connection: ask again, with
    // the place the first answer gave.
    p.handle_link_lost(at(T0, 2), n(3));
    assert_eq!(
        drain(&mut p),
        vec![Output::Send { to: n(3), msg: Msg::Request { term: 4, req: 1, queued: Some((4, 0)), holding: None } }]
    );
    // A broken link to another process changes nothing here.
    p.handle_link_lost(at(T0, 3), n(2));
    assert_eq!(drain(&mut p), vec![]);
}

#[test]
fn a_second_elected_lap_of_the_term_keeps_the_office() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 3, Algorithm::Relay, 4);
    let elected = |hop| Msg::Elected { term: 5, d: n(3), decider: n(1), accepted: false, hop };
    let outs = deliver(&mut p, T0, n(2), Incarnation(1), elected(1));
    assert!(outs.iter().any(|o| matches!(o, Output::Send { msg: Msg::Heartbeat { term: 5, .. }, .. })), "{outs:?}");
    let outs = deliver(&mut p, at(T0, 5), n(2), Incarnation(1), elected(2));
    assert!(!outs.iter().any(|o| matches!(o, Output::Send { msg: Msg::Heartbeat { .. }, .. })), "{outs:?}");
    assert!(matches!(&p.role, Role::Coordinator(o) if o.elected_at == T0), "the office of T0 is kept");
}

// ---------------------------------------------------------- access service

/// Process 3 of ring {1, 2, 3}, elected in term 5 at T0 (`Elected` from 2),
/// its heartbeats acked by 1 until past its failover gap: in office, under
/// its quorum lease, nothing queued. Returns it and the time reached.
fn coordinator_in_office() -> (ElNode, Instant) {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 3, Algorithm::Relay, 4);
    let elected = Msg::Elected { term: 5, d: n(3), decider: n(1), accepted: false, hop: 1 };
    let mut outs = deliver(&mut p, T0, n(2), Incarnation(1), elected);
    let mut now = T0;
    while now < at(T0, 600) {
        for o in &outs {
            if let Output::Send { to, msg: Msg::Heartbeat { term, seq } } = o {
                if *to == n(1) {
                    let ack = Msg::HeartbeatAck { term: *term, seq: *seq };
                    deliver(&mut p, now, n(1), Incarnation(1), ack);
                }
            }
        }
        now = at(now, 20);
        p.handle_timeout(now);
        outs = drain(&mut p);
    }
    assert!(p.in_office() && p.may_grant(now), "in office under its lease at {now:?}");
    (p, now)
}

fn request(req: u64) -> Msg {
    Msg::Request { term: 5, req, queued: None, holding: None }
}

#[test]
fn a_request_is_queued_and_granted_with_the_terms_first_fence() {
    let (mut p, now) = coordinator_in_office();
    let f = lockservice::fence(5, 1);
    let outs = deliver(&mut p, now, n(1), Incarnation(1), request(1));
    assert_eq!(
        outs,
        vec![
            Output::Send { to: n(1), msg: Msg::Queued { term: 5, req: 1, pos: 0 } },
            Output::Event(ElEvent::QueueLength(1)),
            Output::Send { to: n(1), msg: Msg::Granted { term: 5, req: 1, fence: f } },
            Output::Event(ElEvent::Granted { fence: f, waited: Duration::ZERO }),
            Output::Event(ElEvent::QueueLength(0)),
        ]
    );
    // 2 asks while 1 holds: queued behind it, nothing granted.
    let outs = deliver(&mut p, now, n(2), Incarnation(1), request(7));
    assert_eq!(
        outs,
        vec![
            Output::Send { to: n(2), msg: Msg::Queued { term: 5, req: 7, pos: 1 } },
            Output::Event(ElEvent::QueueLength(1)),
        ]
    );
    // Renewals: the holder's is acked; another's refused.
    let outs = deliver(&mut p, now, n(1), Incarnation(1), Msg::Renew { term: 5, fence: f, seq: 1 });
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::RenewAck { term: 5, fence: f, seq: 1 } }]);
    let outs = deliver(&mut p, now, n(2), Incarnation(1), Msg::Renew { term: 5, fence: f, seq: 1 });
    assert_eq!(outs, vec![Output::Send { to: n(2), msg: Msg::RenewRefused { term: 5, fence: f } }]);
    // 1 releases: 2 is granted the next fence.
    let g = lockservice::fence(5, 2);
    let outs = deliver(&mut p, at(now, 3), n(1), Incarnation(1), Msg::Release { term: 5, fence: f });
    assert_eq!(
        outs,
        vec![
            Output::Send { to: n(2), msg: Msg::Granted { term: 5, req: 7, fence: g } },
            Output::Event(ElEvent::Granted { fence: g, waited: Duration::from_millis(3) }),
            Output::Event(ElEvent::QueueLength(0)),
        ]
    );
}

#[test]
fn a_request_to_a_consumer_is_denied_naming_the_coordinator() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    let outs = deliver(&mut p, T0, n(1), Incarnation(1), Msg::Request { term: 4, req: 3, queued: None, holding: None });
    assert_eq!(
        outs,
        vec![
            Output::Event(ElEvent::Denied { reason: "not_coordinator" }),
            Output::Send { to: n(1), msg: Msg::Denied { term: 4, req: 3, why: Denial::NotCoordinator(Some(n(3))) } },
        ]
    );
}

#[test]
fn a_coordinator_whose_quorum_lease_lapsed_denies_no_quorum() {
    let (mut p, now) = coordinator_in_office();
    // No ack for longer than the lease: no grant, a no_quorum denial.
    let later = at(now, 60);
    let outs = deliver(&mut p, later, n(1), Incarnation(1), request(1));
    assert_eq!(
        outs,
        vec![
            Output::Event(ElEvent::Denied { reason: "no_quorum" }),
            Output::Send { to: n(1), msg: Msg::Denied { term: 5, req: 1, why: Denial::NoQuorum } },
        ]
    );
}

#[test]
fn a_full_queue_denies_queue_full() {
    let (mut p, now) = coordinator_in_office();
    p.cfg.coordinator_max_queue = 1;
    deliver(&mut p, now, n(1), Incarnation(1), request(1)); // granted
    deliver(&mut p, now, n(2), Incarnation(1), request(1)); // queued
                                                            // 1 asks again while its first request holds: the queue is full.
    let outs = deliver(&mut p, now, n(1), Incarnation(1), request(2));
    assert_eq!(
        outs,
        vec![
            Output::Event(ElEvent::Denied { reason: "queue_full" }),
            Output::Send { to: n(1), msg: Msg::Denied { term: 5, req: 2, why: Denial::QueueFull } },
        ]
    );
}

#[test]
fn a_lease_that_outlasts_suspicion_is_refused() {
    // 39 ms·(1+ρ) + 20 ms = 59.04 ms ≤ 60 ms·(1−ρ) = 59.94 ms: accepted.
    assert_eq!(cfg(Algorithm::Relay).validate(5), Ok(()));
    // 40 ms: 60.04 ms > 59.94 ms.
    let c = ElConfig { lease: Duration::from_millis(40), ..cfg(Algorithm::Relay) };
    assert_eq!(
        c.validate(5),
        Err(ElError::LeaseTooLong { need: Duration::from_micros(60_040), room: Duration::from_micros(59_940) })
    );
}
