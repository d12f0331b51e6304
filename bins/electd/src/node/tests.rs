//! Handler tests with exact outputs, and whole elections on small rings
//! driven by a FIFO in-test network (every process starting at once).

use std::collections::VecDeque;
use std::net::SocketAddr;

use ::durable::promise::Promises;
use ftcore::rules::Rules;
use ftcore::testing::{deliver, drain};
use ftcore::Output;
use lockservice::LockEvent;
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

// ------------------------------------------- the other handlers, one each

/// What [`process`] stores after joining `term` (following `follows`),
/// its promises untouched.
fn stored_at(term: u64, follows: Option<u32>) -> ElDurable {
    ElDurable { promises: Some(Promises::recovered_with(0)), term, follows: follows.map(n) }
}

/// Cancels the start-up timers (handshake, election, check) of a process
/// made by [`process`], so that a timeout fires only the timer under test.
fn quiet(p: &mut ElNode) {
    for t in [Timer::Hello, Timer::Elect, Timer::Check] {
        p.timers.cancel(t);
    }
}

#[test]
fn a_stale_term_answer_joins_its_term_and_follows_the_coordinator_it_names() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    let outs = deliver(&mut p, T0, n(1), Incarnation(1), Msg::StaleTerm { term: 6, coordinator: Some(n(3)) });
    assert_eq!(
        outs,
        vec![
            Output::Persist(stored_at(6, Some(3))),
            Output::Event(ElEvent::TermJoined { term: 6 }),
            Output::Event(ElEvent::CoordinatorKnown { term: 6, id: n(3) }),
        ]
    );
    assert_eq!((p.term, p.follows, p.coordinator), (6, Some(n(3)), Some(n(3))));
}

#[test]
fn a_hello_is_answered_with_the_stored_values_and_the_coordinator_known() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    // A process at an older term (a restarted one) says hello: answered
    // all the same, joining nothing.
    let outs = deliver(&mut p, at(T0, 1), n(1), Incarnation(1), Msg::Hello { term: 0, nonce: 77 });
    let values = Some(promise::Values { in_use: 4, threshold: 4, floor: 4 });
    assert_eq!(
        outs,
        vec![Output::Send { to: n(1), msg: Msg::HelloAck { term: 4, nonce: 77, values, coordinator: Some(n(3)) } }]
    );
    assert_eq!(p.term, 4);
}

#[test]
fn a_hello_ack_of_a_running_cluster_joins_its_term() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    let nonce = p.hello_nonce;
    let ack = Msg::HelloAck { term: 6, nonce, values: None, coordinator: Some(n(3)) };
    let outs = deliver(&mut p, T0, n(3), Incarnation(1), ack);
    assert_eq!(outs, vec![Output::Persist(stored_at(6, None)), Output::Event(ElEvent::TermJoined { term: 6 })]);
    assert_eq!((p.term, p.follows, p.coordinator), (6, None, None), "whom it follows comes with a heartbeat");
}

#[test]
fn the_hello_timer_says_hello_again_until_joined() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    p.timers.cancel(Timer::Elect);
    p.timers.cancel(Timer::Check);
    let first = p.hello_nonce;
    let now = Instant::ZERO + p.cfg.suspect_after;
    p.handle_timeout(now);
    let outs = drain(&mut p);
    let nonce = p.hello_nonce;
    assert_ne!(nonce, first, "a fresh nonce each round");
    assert_eq!(
        outs,
        vec![
            Output::Send { to: n(1), msg: Msg::Hello { term: 4, nonce } },
            Output::Send { to: n(3), msg: Msg::Hello { term: 4, nonce } },
        ]
    );
    assert_eq!(p.timers.get(Timer::Hello), Some(now + p.cfg.suspect_after));
}

/// Process 2 of ring {1, 2, 3} in term 4, no coordinator known, its
/// election timer fired at T0: it asks for term 5.
fn prevoting() -> ElNode {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    quiet(&mut p);
    p.timers.set(Timer::Elect, T0);
    p.handle_timeout(T0);
    p
}

#[test]
fn the_election_timer_starts_a_prevote_for_the_next_term() {
    let mut p = prevoting();
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Send { to: n(1), msg: Msg::PreVote { term: 5 } },
            Output::Send { to: n(3), msg: Msg::PreVote { term: 5 } },
        ]
    );
    assert_eq!(p.term, 4, "a pre-vote joins nothing");
    assert_eq!(p.timers.get(Timer::PreVoteDue), Some(T0 + p.cfg.hop_timeout * 2));
}

#[test]
fn a_majority_of_prevote_yes_answers_starts_the_term() {
    let mut p = prevoting();
    drain(&mut p);
    // A no changes nothing; a yes with the own makes a majority of 3.
    let no = Msg::PreVoteReply { term: 4, asked: 5, yes: false };
    assert_eq!(deliver(&mut p, at(T0, 1), n(3), Incarnation(1), no), vec![]);
    let yes = Msg::PreVoteReply { term: 4, asked: 5, yes: true };
    let outs = deliver(&mut p, at(T0, 2), n(1), Incarnation(1), yes);
    assert_eq!(
        outs,
        vec![
            Output::Persist(stored_at(5, None)),
            Output::Event(ElEvent::PreVote(PreVoteOutcome::Won)),
            Output::Event(ElEvent::TermJoined { term: 5 }),
            Output::Event(ElEvent::ElectionStarted { term: 5, algorithm: Algorithm::Relay }),
            Output::Event(ElEvent::ElectionMessage { kind: "relay" }),
            Output::Send { to: n(3), msg: Msg::Relay { term: 5, round: 0, phase: 1, value: n(2), hop: 1 } },
        ]
    );
    assert_eq!(p.term, 5);
}

#[test]
fn a_prevote_without_a_majority_in_time_is_lost_and_tried_again() {
    let mut p = prevoting();
    drain(&mut p);
    let due = T0 + p.cfg.hop_timeout * 2;
    p.handle_timeout(due);
    assert_eq!(drain(&mut p), vec![Output::Event(ElEvent::PreVote(PreVoteOutcome::Lost))]);
    assert!(p.prevote.is_none());
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= due + p.cfg.election_timeout));
}

#[test]
fn an_election_not_done_in_time_is_tried_again_within_a_quarter_of_the_timeout() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    quiet(&mut p);
    p.start_election_now(T0);
    drain(&mut p);
    let hop = p.next_hop;
    assert_eq!(deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::HopAck { term: 5, hop }), vec![]);
    let due = T0 + p.cfg.election_timeout;
    p.handle_timeout(due);
    assert_eq!(drain(&mut p), vec![]);
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= due + p.cfg.election_timeout / 4));
}

#[test]
fn an_unacked_ring_hop_skips_the_successor() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Ring, 4);
    quiet(&mut p);
    p.start_election_now(T0);
    drain(&mut p);
    p.handle_timeout(T0 + p.cfg.hop_timeout);
    // 3 is left out: the Election goes on to 1, without it.
    let election = Msg::Election { term: 5, initiator: n(2), initiator_inc: Incarnation(1), alive: vec![n(2)], hop: 2 };
    assert_eq!(
        drain(&mut p),
        vec![Output::Event(ElEvent::ElectionMessage { kind: "election" }), Output::Send { to: n(1), msg: election }]
    );
    assert!(p.suspected.contains(&n(3)));
}

#[test]
fn a_relay_of_a_term_not_started_here_joins_it_as_active() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    let relay = Msg::Relay { term: 5, round: 0, phase: 1, value: n(1), hop: 1 };
    let outs = deliver(&mut p, T0, n(1), Incarnation(1), relay);
    // Its own id first (phase 1), then 1's value passed on (phase 2).
    assert_eq!(
        outs,
        vec![
            Output::Persist(stored_at(5, None)),
            Output::Event(ElEvent::TermJoined { term: 5 }),
            Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 1 } },
            Output::Event(ElEvent::ElectionMessage { kind: "relay" }),
            Output::Send { to: n(3), msg: Msg::Relay { term: 5, round: 0, phase: 1, value: n(2), hop: 1 } },
            Output::Event(ElEvent::ElectionMessage { kind: "relay" }),
            Output::Send { to: n(3), msg: Msg::Relay { term: 5, round: 0, phase: 2, value: n(1), hop: 2 } },
        ]
    );
}

#[test]
fn a_coordinator_lap_is_followed_and_passed_on() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Ring, 4);
    let lap = Msg::Coordinator { term: 5, id: n(3), alive: vec![n(1), n(2), n(3)], initiator: n(1), hop: 1 };
    let outs = deliver(&mut p, T0, n(1), Incarnation(1), lap.clone());
    assert_eq!(
        outs,
        vec![
            Output::Persist(stored_at(5, Some(3))),
            Output::Event(ElEvent::TermJoined { term: 5 }),
            Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 1 } },
            Output::Event(ElEvent::CoordinatorKnown { term: 5, id: n(3) }),
            Output::Event(ElEvent::ElectionMessage { kind: "coordinator" }),
            Output::Send { to: n(3), msg: lap },
        ]
    );
    assert_eq!((p.term, p.follows, p.coordinator), (5, Some(n(3)), Some(n(3))));
}

#[test]
fn the_heartbeat_timer_sends_the_next_heartbeat_to_every_other_process() {
    let (mut p, _) = coordinator_in_office();
    let next = p.timers.get(Timer::Heartbeat).expect("armed");
    p.handle_timeout(next);
    // Heartbeat 32: one every 20 ms since T0.
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Send { to: n(1), msg: Msg::Heartbeat { term: 5, seq: 32 } },
            Output::Send { to: n(2), msg: Msg::Heartbeat { term: 5, seq: 32 } },
        ]
    );
    assert_eq!(p.timers.get(Timer::Heartbeat), Some(next + p.cfg.heartbeat));
}

#[test]
fn a_majority_of_heartbeat_acks_puts_the_elected_process_in_office() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 3, Algorithm::Relay, 4);
    let elected = Msg::Elected { term: 5, d: n(3), decider: n(1), accepted: false, hop: 1 };
    deliver(&mut p, T0, n(2), Incarnation(1), elected);
    assert!(p.is_coordinator() && !p.in_office());
    let outs = deliver(&mut p, at(T0, 1), n(1), Incarnation(1), Msg::HeartbeatAck { term: 5, seq: 1 });
    // The term is stored as in use before anything is granted in it.
    assert_eq!(p.promise.stored().in_use(), 5);
    let stored = ElDurable { promises: Some(p.promise.stored().clone()), term: 5, follows: Some(n(3)) };
    assert_eq!(
        outs,
        vec![Output::Persist(stored), Output::Event(ElEvent::Joined), Output::Event(ElEvent::TookOffice { term: 5 }),]
    );
    assert!(p.in_office());
}

#[test]
fn a_consumer_that_hears_no_heartbeat_for_suspect_after_gives_its_coordinator_up() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    quiet(&mut p);
    let silent = T0 + p.cfg.suspect_after;
    p.timers.set(Timer::Check, silent);
    p.handle_timeout(silent);
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!((p.coordinator, p.lost_coordinator_at), (None, Some(silent)));
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= silent + p.cfg.election_jitter));
}

#[test]
fn a_grant_no_longer_honoured_is_freed_and_the_next_request_granted() {
    let (mut p, mut now) = coordinator_in_office();
    let f = lockservice::fence(5, 1);
    deliver(&mut p, now, n(1), Incarnation(1), request(1));
    deliver(&mut p, now, n(2), Incarnation(1), request(7));
    let granted_at = now;
    // 1 never renews; 1 goes on acking the heartbeats (the quorum lease
    // runs), every 20 ms, until the grant's honour ends.
    let mut outs = Vec::new();
    while !outs.contains(&Output::Event(ElEvent::LeaseExpired)) {
        for o in &outs {
            if let Output::Send { to, msg: Msg::Heartbeat { term, seq } } = o {
                if *to == n(1) {
                    deliver(&mut p, now, n(1), Incarnation(1), Msg::HeartbeatAck { term: *term, seq: *seq });
                }
            }
        }
        now = at(now, 20);
        assert!(now < at(granted_at, 1_000), "no expiry");
        p.handle_timeout(now);
        outs = drain(&mut p);
    }
    assert!(now >= granted_at + p.cfg.stretched(p.cfg.grant_ttl));
    let rest: Vec<_> =
        outs.into_iter().filter(|o| !matches!(o, Output::Send { msg: Msg::Heartbeat { .. }, .. })).collect();
    let g = lockservice::fence(5, 2);
    assert_eq!(
        rest,
        vec![
            Output::Event(ElEvent::LeaseExpired),
            Output::Send { to: n(2), msg: Msg::Granted { term: 5, req: 7, fence: g } },
            Output::Event(ElEvent::Granted { fence: g, waited: now.saturating_since(granted_at) }),
            Output::Event(ElEvent::QueueLength(0)),
        ]
    );
    assert_eq!(p.current_grant(), Some((n(2), g)));
    // 1's late renewal is refused.
    let renew = Msg::Renew { term: 5, fence: f, seq: 1 };
    assert_eq!(
        deliver(&mut p, now, n(1), Incarnation(1), renew),
        vec![Output::Send { to: n(1), msg: Msg::RenewRefused { term: 5, fence: f } }]
    );
}

#[test]
fn a_queued_answer_is_noted_and_its_place_confirmed_every_grant_ttl() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 1, Algorithm::Relay, 4);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    p.handle_request(T0, ClientId(1), LockRequest::Acquire { timeout_ms: 10_000 });
    drain(&mut p);
    // Another request's answer, or one from another process: ignored.
    assert_eq!(deliver(&mut p, T0, n(3), Incarnation(1), Msg::Queued { term: 4, req: 9, pos: 3 }), vec![]);
    assert_eq!(deliver(&mut p, T0, n(2), Incarnation(1), Msg::Queued { term: 4, req: 1, pos: 3 }), vec![]);
    assert_eq!(p.timers.get(Timer::RequestDue), Some(T0 + p.cfg.request_timeout));
    let outs = deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::Queued { term: 4, req: 1, pos: 0 });
    assert_eq!(outs, vec![]);
    assert_eq!(p.timers.get(Timer::RequestDue), Some(at(T0, 1) + p.cfg.grant_ttl));
    // Its place goes with the request when it is sent again.
    p.handle_link_lost(at(T0, 2), n(3));
    assert_eq!(
        drain(&mut p),
        vec![Output::Send { to: n(3), msg: Msg::Request { term: 4, req: 1, queued: Some((4, 0)), holding: None } }]
    );
}

/// Consumer 1 of ring {1, 2, 3} following coordinator 3 in term 4, its
/// client's request 1 sent to 3 at T0 (no answer yet); start-up timers
/// cancelled.
fn consumer_asking() -> ElNode {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 1, Algorithm::Relay, 4);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    quiet(&mut p);
    p.handle_request(T0, ClientId(1), LockRequest::Acquire { timeout_ms: 10_000 });
    drain(&mut p);
    p
}

#[test]
fn a_not_coordinator_denial_is_retried_at_the_named_process_and_a_full_queue_backs_off() {
    let mut p = consumer_asking();
    let denied = Msg::Denied { term: 4, req: 1, why: Denial::NotCoordinator(Some(n(2))) };
    let outs = deliver(&mut p, at(T0, 1), n(3), Incarnation(1), denied);
    assert_eq!(
        outs,
        vec![Output::Send { to: n(2), msg: Msg::Request { term: 4, req: 1, queued: None, holding: None } }]
    );
    let full = Msg::Denied { term: 4, req: 1, why: Denial::QueueFull };
    let outs = deliver(&mut p, at(T0, 2), n(2), Incarnation(1), full);
    assert_eq!(outs, vec![]);
    // Nothing pending: a later answer to request 1 is ignored.
    assert_eq!(deliver(&mut p, at(T0, 3), n(2), Incarnation(1), Msg::Queued { term: 4, req: 1, pos: 0 }), vec![]);
    assert_eq!(p.timers.get(Timer::RequestDue), Some(at(T0, 2) + p.cfg.request_timeout));
}

#[test]
fn an_unanswered_request_starts_an_election_and_is_sent_again() {
    let mut p = consumer_asking();
    let due = T0 + p.cfg.request_timeout;
    p.handle_timeout(due);
    assert_eq!(
        drain(&mut p),
        vec![Output::Send { to: n(3), msg: Msg::Request { term: 4, req: 1, queued: None, holding: None } }]
    );
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= due + p.cfg.election_jitter));
}

#[test]
fn a_refused_renewal_loses_the_grant() {
    let (mut p, f) = consumer_granted_confirmed();
    // Another fence's refusal changes nothing.
    let other = Msg::RenewRefused { term: 4, fence: lockservice::fence(4, 2) };
    assert_eq!(deliver(&mut p, at(T0, 2), n(3), Incarnation(1), other), vec![]);
    let outs = deliver(&mut p, at(T0, 3), n(3), Incarnation(1), Msg::RenewRefused { term: 4, fence: f });
    let lost = LockReply::LockLost { reason: "the coordinator refused the renewal".into() };
    assert_eq!(outs, vec![Output::Reply { client: ClientId(1), reply: lost }]);
    // Nothing is renewed any more; the client, told, holds at most until
    // its lease ends.
    assert!(p.consumer.grant.is_none());
    assert_eq!(p.holder(), Some((ClientId(1), f)));
}

#[test]
fn an_unrenewed_grant_expires_and_its_client_loses_the_lock() {
    let (mut p, f) = consumer_granted_confirmed();
    quiet(&mut p);
    p.timers.cancel(Timer::Renew);
    let expiry = p.consumer.grant.as_ref().map(|g| g.expiry).expect("held");
    p.handle_timeout(expiry);
    let lost = LockReply::LockLost { reason: "lease expired: the daemon could not renew it in time".into() };
    // Held from its grant at T0 + 1 ms (the renewal's ack).
    let held = expiry.saturating_since(at(T0, 1));
    let released = LockEvent::Released { client: ClientId(1), fence: f, held, how: lockservice::ReleaseHow::Expired };
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Reply { client: ClientId(1), reply: lost },
            Output::Event(ElEvent::Lock(released)),
            Output::Event(ElEvent::LeaseExpired),
        ]
    );
    assert!(p.consumer.grant.is_none() && p.holder().is_none());
}

#[test]
fn a_client_gone_while_holding_gives_the_grant_back() {
    let (mut p, f) = consumer_granted_confirmed();
    p.handle_client_gone(at(T0, 2), ClientId(1));
    let how = lockservice::ReleaseHow::Disconnected;
    let released = LockEvent::Released { client: ClientId(1), fence: f, held: Duration::from_millis(1), how };
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Event(ElEvent::Lock(released)),
            Output::Send { to: n(3), msg: Msg::Release { term: 4, fence: f } },
        ]
    );
    assert!(p.consumer.grant.is_none());
}

#[test]
fn a_coordinator_shutting_down_steps_down_and_leaves() {
    let (mut p, now) = coordinator_in_office();
    p.handle_shutdown(now);
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Event(ElEvent::SteppedDown { term: 5, why: "shutting down" }),
            Output::Event(ElEvent::QueueLength(0)),
        ]
    );
    assert!(!p.is_coordinator() && p.is_left());
}
