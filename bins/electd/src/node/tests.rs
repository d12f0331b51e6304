//! Handler tests with exact outputs, and whole elections on small rings
//! driven by a FIFO in-test network (every process starting at once).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use ::durable::promise::Promises;
use ftcore::rules::Rules;
use ftcore::testing::{deliver, drain};
use ftcore::Output;
use lockservice::{LockEvent, LockName, NamedEvent};
use membership::{Member, Membership};

use super::*;
use crate::msg::{Denial, ObserveMode};
use lockservice::LeaderInfo;

const T0: Instant = Instant::from_millis(10_000);

fn n(i: u32) -> NodeId {
    NodeId(i)
}

/// The unnamed lock (what `Acquire` asks for).
fn unnamed() -> LockName {
    LockName::unnamed()
}

/// The lock `s` (a valid name).
fn named(s: &str) -> LockName {
    LockName::parse(s).expect("a valid lock name")
}

/// An event of the unnamed lock's local queue.
fn lock(event: LockEvent) -> ElEvent {
    lock_of(&unnamed(), event)
}

/// An event of lock `name`'s local queue.
fn lock_of(name: &LockName, event: LockEvent) -> ElEvent {
    ElEvent::Lock(NamedEvent::Lock { name: name.clone(), event })
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

/// (electd.md "Consumer": a healthy coordinator keeps office) A process
/// with a higher id that joins a running cluster whose coordinator has a
/// lower id follows it: neither the `HelloAck` naming it nor its heartbeat
/// starts an election, and the election timer, once the restart window has
/// passed, asks no pre-vote while that coordinator is live.
#[test]
fn a_higher_id_joining_a_running_cluster_follows_its_lower_coordinator() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 3, Algorithm::Relay, 4);
    let nonce = p.handshake.nonce();
    quiet(&mut p);
    let ack = Msg::HelloAck { term: 4, nonce, values: None, coordinator: Some(n(2)) };
    deliver(&mut p, T0, n(1), Incarnation(1), ack);
    deliver(&mut p, at(T0, 1), n(2), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    assert_eq!(p.coordinator, Some(n(2)));
    assert_eq!(p.timers.get(Timer::Elect), None, "no challenge armed");
    let after_window = p.promise.restart_window_ends().max(at(T0, 2));
    for k in 0..20u64 {
        let t = after_window + Duration::from_millis(k * 10);
        deliver(&mut p, t, n(2), Incarnation(1), Msg::Heartbeat { term: 4, seq: 2 + k });
    }
    let t = after_window + Duration::from_millis(195);
    p.timers.set(Timer::Elect, t);
    p.handle_timeout(t);
    let asked: Vec<_> =
        drain(&mut p).into_iter().filter(|o| matches!(o, Output::Send { msg: Msg::PreVote { .. }, .. })).collect();
    assert_eq!(asked, vec![]);
    assert!(!p.terms.prevoting());
    assert_eq!(p.term, 4);
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
    assert!(outs.contains(&Output::Send {
        to: n(3),
        msg: Msg::Request { term: 4, name: unnamed(), req: 1, queued: None, holding: None, value: None }
    }));
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Queued { term: 4, name: unnamed(), req: 1, pos: 0 });
    p
}

/// [`consumer_granted_unconfirmed`], then granted fence (4, 1) by 3 and
/// its first renewal acked at T0 + 1 ms: the local client holds.
fn consumer_granted_confirmed() -> (ElNode, u128) {
    let mut p = consumer_granted_unconfirmed();
    let f = lockservice::fence(4, 1);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Granted { term: 4, name: unnamed(), req: 1, fence: f });
    deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::RenewAck { term: 4, acks: vec![(f, 1)] });
    (p, f)
}

#[test]
fn an_unconfirmed_grant_is_given_back_when_the_coordinator_changes() {
    let mut p = consumer_granted_unconfirmed();
    let f = lockservice::fence(4, 1);
    let outs = deliver(&mut p, T0, n(3), Incarnation(1), Msg::Granted { term: 4, name: unnamed(), req: 1, fence: f });
    assert_eq!(outs, vec![Output::Send { to: n(3), msg: Msg::Renew { term: 4, grants: vec![(f, 1)] } }]);
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
            &Output::Send {
                to: n(2),
                msg: Msg::Request {
                    term: 5,
                    name: unnamed(),
                    req: 2,
                    queued: Some((4, 0)),
                    holding: None,
                    value: None
                }
            },
            &Output::Send { to: n(2), msg: Msg::HeartbeatAck { term: 5, seq: 1 } },
        ]
    );
    assert!(!p.consumer.holds_grant() && p.holder(&unnamed()).is_none());
}

#[test]
fn a_confirmed_grant_is_re_registered_with_the_new_coordinator() {
    let mut p = consumer_granted_unconfirmed();
    let f = lockservice::fence(4, 1);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Granted { term: 4, name: unnamed(), req: 1, fence: f });
    let outs = deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::RenewAck { term: 4, acks: vec![(f, 1)] });
    // The client's lease is the grant's: the acked renewal's send time
    // (T0) + grant_ttl·(1−ρ).
    let until = T0 + p.cfg.shrunk(p.cfg.grant_ttl);
    assert_eq!(p.timers.get(Timer::GrantExpiry), Some(until));
    let granted = LockReply::Granted { fence: f, lease_until_us: until.as_micros() };
    assert!(outs.contains(&Output::Reply { client: ClientId(1), reply: granted }), "{outs:?}");
    let outs = deliver(&mut p, at(T0, 5), n(2), Incarnation(1), Msg::Heartbeat { term: 5, seq: 1 });
    assert!(
        outs.contains(&Output::Send {
            to: n(2),
            msg: Msg::Request { term: 5, name: unnamed(), req: 0, queued: None, holding: Some(f), value: None }
        }),
        "{outs:?}"
    );
}

/// The re-registration reaches the new coordinator before it is in
/// office and is denied: it goes again after the ack of each of its
/// heartbeats (not twice at one instant), never a renewal meanwhile; once
/// echoed, renewals go every heartbeat until one is acked, then (after
/// the heartbeat tick already armed) every `grant_ttl/3` again.
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
    let again = Msg::Request { term: 5, name: unnamed(), req: 0, queued: None, holding: Some(f), value: None };
    let hb = |seq| Msg::Heartbeat { term: 5, seq };
    let outs = sends(deliver(&mut p, at(T0, 5), n(2), Incarnation(1), hb(1)));
    assert_eq!(outs, vec![again.clone(), Msg::HeartbeatAck { term: 5, seq: 1 }]);
    let denied = Msg::Denied { term: 5, name: unnamed(), req: 0, why: Denial::NoQuorum };
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
    let outs = sends(deliver(
        &mut p,
        echoed,
        n(2),
        Incarnation(1),
        Msg::Granted { term: 5, name: unnamed(), req: 0, fence: f },
    ));
    assert_eq!(outs, vec![Msg::Renew { term: 5, grants: vec![(f, 2)] }]);
    p.handle_timeout(echoed + p.cfg.heartbeat);
    assert_eq!(sends(drain(&mut p)), vec![Msg::Renew { term: 5, grants: vec![(f, 3)] }]);
    let acked = echoed + p.cfg.heartbeat + Duration::from_millis(1);
    deliver(&mut p, acked, n(2), Incarnation(1), Msg::RenewAck { term: 5, acks: vec![(f, 3)] });
    p.handle_timeout(echoed + p.cfg.heartbeat * 2);
    assert_eq!(sends(drain(&mut p)), vec![], "no renewal a heartbeat after the ack");
    p.handle_timeout(echoed + p.cfg.heartbeat + p.cfg.grant_ttl / 3);
    assert_eq!(sends(drain(&mut p)), vec![Msg::Renew { term: 5, grants: vec![(f, 4)] }]);
    assert_eq!(p.holder(&unnamed()).map(|(_, f)| f), Some(f));
}

/// An expired grant is never re-registered (after a pause, a heartbeat
/// or a renewal tick may be handled before the grant's expiry).
#[test]
fn an_expired_grant_is_not_re_registered() {
    let (mut p, _) = consumer_granted_confirmed();
    deliver(&mut p, at(T0, 5), n(2), Incarnation(1), Msg::Heartbeat { term: 5, seq: 1 });
    let expired = p.timers.get(Timer::GrantExpiry).expect("held");
    let outs = deliver(&mut p, expired, n(2), Incarnation(1), Msg::Heartbeat { term: 5, seq: 2 });
    assert_eq!(
        outs.iter().filter(|o| matches!(o, Output::Send { .. })).collect::<Vec<_>>(),
        vec![&Output::Send { to: n(2), msg: Msg::HeartbeatAck { term: 5, seq: 2 } }]
    );
}

/// Nor when the coordinator changes after the grant's expiry but before
/// its expiry timer (both in one wake-up after a pause): the new
/// coordinator hears no re-registration of it.
#[test]
fn an_expired_grant_is_not_re_registered_with_a_new_coordinator() {
    let (mut p, f) = consumer_granted_confirmed();
    let expired = p.timers.get(Timer::GrantExpiry).expect("held");
    let outs = deliver(&mut p, expired, n(2), Incarnation(1), Msg::Heartbeat { term: 5, seq: 1 });
    let reregistered = Msg::Request { term: 5, name: unnamed(), req: 0, queued: None, holding: Some(f), value: None };
    assert!(!outs.contains(&Output::Send { to: n(2), msg: reregistered }), "{outs:?}");
    assert!(outs.contains(&Output::Send { to: n(2), msg: Msg::HeartbeatAck { term: 5, seq: 1 } }), "{outs:?}");
}

#[test]
fn a_broken_link_to_the_coordinator_resends_the_queued_request() {
    let mut p = consumer_granted_unconfirmed();
    // Its Granted may have been lost with the connection: ask again, with
    // the place the first answer gave.
    p.handle_link_lost(at(T0, 2), n(3));
    assert_eq!(
        drain(&mut p),
        vec![Output::Send {
            to: n(3),
            msg: Msg::Request { term: 4, name: unnamed(), req: 1, queued: Some((4, 0)), holding: None, value: None }
        }]
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

/// (safety) A late copy of the term's `Elected` lap reaching a process
/// that took office in the term and stepped down (its quorum lapsed) opens
/// no second office: one would count fences from the start again and grant
/// the first office's fences a second time.
#[test]
fn a_late_elected_lap_after_stepping_down_opens_no_second_office() {
    let (mut p, now) = coordinator_in_office();
    let f = lockservice::fence(5, 1);
    let outs = deliver(&mut p, now, n(1), Incarnation(1), request(1));
    assert!(outs.iter().any(|o| matches!(o, Output::Send { msg: Msg::Granted { fence, .. }, .. } if *fence == f)));
    deliver(&mut p, at(now, 1), n(1), Incarnation(1), Msg::Release { term: 5, fence: f });
    p.step_down(at(now, 2), "test: quorum lapsed");
    drain(&mut p);
    let late = Msg::Elected { term: 5, d: n(3), decider: n(1), accepted: true, hop: 9 };
    let outs = deliver(&mut p, at(now, 3), n(2), Incarnation(1), late);
    assert!(!outs.iter().any(|o| matches!(o, Output::Send { msg: Msg::Heartbeat { .. }, .. })), "{outs:?}");
    assert!(!p.is_coordinator(), "a second office in term 5");
}

// ---------------------------------------------------------- access service

/// Process 3 of ring {1, 2, 3}, elected in term 5 at T0 (`Elected` from 2),
/// its heartbeats acked by 1 until past its failover gap: in office, under
/// its quorum lease, nothing queued. Returns it and the time reached.
fn coordinator_in_office() -> (ElNode, Instant) {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 3, Algorithm::Relay, 4);
    let elected = Msg::Elected { term: 5, d: n(3), decider: n(1), accepted: false, hop: 1 };
    let outs = deliver(&mut p, T0, n(2), Incarnation(1), elected);
    let now = acked_until(&mut p, outs, at(T0, 600));
    assert!(p.in_office() && p.may_grant(now), "in office under its lease at {now:?}");
    (p, now)
}

/// Runs coordinator `p` of ring {1, 2, 3} from T0 (`outs`: what its
/// election put out) until `end`: its timers fire every 20 ms, and 1 acks
/// each heartbeat at once (not those of the last round, at `end`). Returns
/// the time reached.
fn acked_until(p: &mut ElNode, mut outs: Vec<OutputOf<ElNode>>, end: Instant) -> Instant {
    let mut now = T0;
    while now < end {
        for o in &outs {
            if let Output::Send { to, msg: Msg::Heartbeat { term, seq } } = o {
                if *to == n(1) {
                    let ack = Msg::HeartbeatAck { term: *term, seq: *seq };
                    deliver(p, now, n(1), Incarnation(1), ack);
                }
            }
        }
        now = at(now, 20);
        p.handle_timeout(now);
        outs = drain(p);
    }
    now
}

fn request(req: u64) -> Msg {
    Msg::Request { term: 5, name: unnamed(), req, queued: None, holding: None, value: None }
}

#[test]
fn a_request_is_queued_and_granted_with_the_terms_first_fence() {
    let (mut p, now) = coordinator_in_office();
    let f = lockservice::fence(5, 1);
    let outs = deliver(&mut p, now, n(1), Incarnation(1), request(1));
    assert_eq!(
        outs,
        vec![
            Output::Send { to: n(1), msg: Msg::Queued { term: 5, name: unnamed(), req: 1, pos: 0 } },
            Output::Event(ElEvent::QueueLength(1)),
            Output::Send { to: n(1), msg: Msg::Granted { term: 5, name: unnamed(), req: 1, fence: f } },
            Output::Event(ElEvent::Granted { fence: f, waited: Duration::ZERO }),
            Output::Event(ElEvent::QueueLength(0)),
        ]
    );
    // 2 asks while 1 holds: queued behind it, nothing granted.
    let outs = deliver(&mut p, now, n(2), Incarnation(1), request(7));
    assert_eq!(
        outs,
        vec![
            Output::Send { to: n(2), msg: Msg::Queued { term: 5, name: unnamed(), req: 7, pos: 1 } },
            Output::Event(ElEvent::QueueLength(1)),
        ]
    );
    // Renewals: the holder's is acked; another's refused.
    let outs = deliver(&mut p, now, n(1), Incarnation(1), Msg::Renew { term: 5, grants: vec![(f, 1)] });
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::RenewAck { term: 5, acks: vec![(f, 1)] } }]);
    let outs = deliver(&mut p, now, n(2), Incarnation(1), Msg::Renew { term: 5, grants: vec![(f, 1)] });
    assert_eq!(outs, vec![Output::Send { to: n(2), msg: Msg::RenewRefused { term: 5, fences: vec![f] } }]);
    // 1 releases: 2 is granted the next fence.
    let g = lockservice::fence(5, 2);
    let outs = deliver(&mut p, at(now, 3), n(1), Incarnation(1), Msg::Release { term: 5, fence: f });
    assert_eq!(
        outs,
        vec![
            Output::Send { to: n(2), msg: Msg::Granted { term: 5, name: unnamed(), req: 7, fence: g } },
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
    let outs = deliver(
        &mut p,
        T0,
        n(1),
        Incarnation(1),
        Msg::Request { term: 4, name: unnamed(), req: 3, queued: None, holding: None, value: None },
    );
    assert_eq!(
        outs,
        vec![
            Output::Event(ElEvent::Denied { reason: "not_coordinator" }),
            Output::Send {
                to: n(1),
                msg: Msg::Denied { term: 4, name: unnamed(), req: 3, why: Denial::NotCoordinator(Some(n(3))) }
            },
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
            Output::Send { to: n(1), msg: Msg::Denied { term: 5, name: unnamed(), req: 1, why: Denial::NoQuorum } },
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
            Output::Send { to: n(1), msg: Msg::Denied { term: 5, name: unnamed(), req: 2, why: Denial::QueueFull } },
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

/// What a `relay` [`process`] stores after joining `term` (following
/// `follows`): its promises untouched but for the binding window stored at
/// start (`max(W, lease)`: W, the election timeout).
fn stored_at(term: u64, follows: Option<u32>) -> ElDurable {
    stored_by(Algorithm::Relay, term, follows)
}

/// [`stored_at`] for a process of `algorithm` (its W differs).
fn stored_by(algorithm: Algorithm, term: u64, follows: Option<u32>) -> ElDurable {
    let c = cfg(algorithm);
    let promises = Promises::recovered_with(0).bound(c.election_timeout.max(c.lease));
    ElDurable { promises: Some(promises), term, follows: follows.map(n) }
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
    let nonce = p.handshake.nonce();
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
    let first = p.handshake.nonce();
    let now = Instant::ZERO + p.cfg.suspect_after;
    p.handle_timeout(now);
    let outs = drain(&mut p);
    let nonce = p.handshake.nonce();
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
    assert!(!p.terms.prevoting());
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= due + p.cfg.election_timeout));
}

#[test]
fn an_election_not_done_in_time_is_tried_again_within_a_quarter_of_the_timeout() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    quiet(&mut p);
    p.start_election_now(T0);
    drain(&mut p);
    let hop = p.terms.last_hop();
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
            Output::Persist(stored_by(Algorithm::Ring, 5, Some(3))),
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
    // The election skips the silent coordinator rather than waiting
    // hop_timeout at it (a SIGSTOPped coordinator), without reporting it
    // down; hearing from it ends that.
    assert_eq!((p.silent, p.suspected.contains(&n(3))), (Some(n(3)), false));
    assert_eq!(p.successor(), Some(n(1)));
    deliver(&mut p, at(silent, 1), n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 2 });
    assert_eq!((p.silent, p.successor()), (None, Some(n(3))));
}

/// A pre-vote asks for a term because no coordinator is known; once the
/// term's coordinator is known, winning it would depose a coordinator
/// elected but not yet in office (CI on ecb6599: 25 terms in 600 ms at a
/// cluster's start, each pre-vote won after the last election's result).
#[test]
fn a_prevote_ends_when_the_terms_coordinator_becomes_known() {
    let mut p = prevoting();
    drain(&mut p);
    deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    assert_eq!(p.coordinator, Some(n(3)));
    assert!(!p.terms.prevoting());
    assert_eq!(p.timers.get(Timer::PreVoteDue), None);
    let yes = Msg::PreVoteReply { term: 4, asked: 5, yes: true };
    assert_eq!(deliver(&mut p, at(T0, 2), n(1), Incarnation(1), yes), vec![]);
    assert_eq!(p.term, 4, "no new term: the coordinator of 4 stays");
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
            Output::Send { to: n(2), msg: Msg::Granted { term: 5, name: unnamed(), req: 7, fence: g } },
            Output::Event(ElEvent::Granted { fence: g, waited: now.saturating_since(granted_at) }),
            Output::Event(ElEvent::QueueLength(0)),
        ]
    );
    assert_eq!(p.current_grant(&unnamed()), Some((n(2), g)));
    // 1's late renewal is refused.
    let renew = Msg::Renew { term: 5, grants: vec![(f, 1)] };
    assert_eq!(
        deliver(&mut p, now, n(1), Incarnation(1), renew),
        vec![Output::Send { to: n(1), msg: Msg::RenewRefused { term: 5, fences: vec![f] } }]
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
    assert_eq!(
        deliver(&mut p, T0, n(3), Incarnation(1), Msg::Queued { term: 4, name: unnamed(), req: 9, pos: 3 }),
        vec![]
    );
    assert_eq!(
        deliver(&mut p, T0, n(2), Incarnation(1), Msg::Queued { term: 4, name: unnamed(), req: 1, pos: 3 }),
        vec![]
    );
    assert_eq!(p.timers.get(Timer::RequestDue), Some(T0 + p.cfg.request_timeout));
    let outs =
        deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::Queued { term: 4, name: unnamed(), req: 1, pos: 0 });
    assert_eq!(outs, vec![]);
    assert_eq!(p.timers.get(Timer::RequestDue), Some(at(T0, 1) + p.cfg.grant_ttl));
    // Its place goes with the request when it is sent again.
    p.handle_link_lost(at(T0, 2), n(3));
    assert_eq!(
        drain(&mut p),
        vec![Output::Send {
            to: n(3),
            msg: Msg::Request { term: 4, name: unnamed(), req: 1, queued: Some((4, 0)), holding: None, value: None }
        }]
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
    let denied = Msg::Denied { term: 4, name: unnamed(), req: 1, why: Denial::NotCoordinator(Some(n(2))) };
    let outs = deliver(&mut p, at(T0, 1), n(3), Incarnation(1), denied);
    assert_eq!(
        outs,
        vec![Output::Send {
            to: n(2),
            msg: Msg::Request { term: 4, name: unnamed(), req: 1, queued: None, holding: None, value: None }
        }]
    );
    let full = Msg::Denied { term: 4, name: unnamed(), req: 1, why: Denial::QueueFull };
    let outs = deliver(&mut p, at(T0, 2), n(2), Incarnation(1), full);
    assert_eq!(outs, vec![]);
    // Nothing pending: a later answer to request 1 is ignored.
    assert_eq!(
        deliver(&mut p, at(T0, 3), n(2), Incarnation(1), Msg::Queued { term: 4, name: unnamed(), req: 1, pos: 0 }),
        vec![]
    );
    assert_eq!(p.timers.get(Timer::RequestDue), Some(at(T0, 2) + p.cfg.request_timeout));
}

/// (electd.md "Consumer": `request_timeout` bounds the immediate answer;
/// `not_coordinator` retries at the named id) The request retried at the
/// coordinator a denial names waits a whole `request_timeout` for that
/// coordinator's answer, as the first one did (the old core re-armed the
/// request timer on every send): a denial that took most of the timeout
/// must not make the retry's answer overdue at once (an election, and the
/// request sent again to the process that just denied it).
#[test]
fn a_retry_at_the_named_coordinator_waits_a_whole_request_timeout() {
    let mut p = consumer_asking();
    // The denial comes back late in the first request's timeout.
    let late = T0 + (p.cfg.request_timeout - Duration::from_millis(5));
    let denied = Msg::Denied { term: 4, name: unnamed(), req: 1, why: Denial::NotCoordinator(Some(n(2))) };
    assert_eq!(
        deliver(&mut p, late, n(3), Incarnation(1), denied),
        vec![Output::Send {
            to: n(2),
            msg: Msg::Request { term: 4, name: unnamed(), req: 1, queued: None, holding: None, value: None }
        }]
    );
    assert_eq!(p.timers.get(Timer::RequestDue), Some(late + p.cfg.request_timeout));
    // The first request's due time passes: the retry is not overdue yet.
    p.handle_timeout(T0 + p.cfg.request_timeout);
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.timers.get(Timer::Elect), None, "no election");
}

#[test]
fn an_unanswered_request_starts_an_election_and_is_sent_again() {
    let mut p = consumer_asking();
    let due = T0 + p.cfg.request_timeout;
    p.handle_timeout(due);
    assert_eq!(
        drain(&mut p),
        vec![Output::Send {
            to: n(3),
            msg: Msg::Request { term: 4, name: unnamed(), req: 1, queued: None, holding: None, value: None }
        }]
    );
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= due + p.cfg.election_jitter));
}

#[test]
fn a_refused_renewal_loses_the_grant() {
    let (mut p, f) = consumer_granted_confirmed();
    // Another fence's refusal changes nothing.
    let other = Msg::RenewRefused { term: 4, fences: vec![lockservice::fence(4, 2)] };
    assert_eq!(deliver(&mut p, at(T0, 2), n(3), Incarnation(1), other), vec![]);
    let outs = deliver(&mut p, at(T0, 3), n(3), Incarnation(1), Msg::RenewRefused { term: 4, fences: vec![f] });
    let lost = LockReply::LockLost { reason: "the coordinator refused the renewal".into() };
    assert_eq!(outs, vec![Output::Reply { client: ClientId(1), reply: lost }]);
    // Nothing is renewed any more; the client, told, holds at most until
    // its lease ends.
    assert!(!p.consumer.holds_grant());
    assert_eq!(p.holder(&unnamed()), Some((ClientId(1), f)));
}

#[test]
fn an_unrenewed_grant_expires_and_its_client_loses_the_lock() {
    let (mut p, f) = consumer_granted_confirmed();
    quiet(&mut p);
    p.timers.cancel(Timer::Renew);
    let expiry = p.timers.get(Timer::GrantExpiry).expect("held");
    p.handle_timeout(expiry);
    let lost = LockReply::LockLost { reason: "lease expired: the daemon could not renew it in time".into() };
    // Held from its grant at T0 + 1 ms (the renewal's ack).
    let held = expiry.saturating_since(at(T0, 1));
    let released = LockEvent::Released { client: ClientId(1), fence: f, held, how: lockservice::ReleaseHow::Expired };
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Reply { client: ClientId(1), reply: lost },
            Output::Event(lock(released)),
            Output::Event(ElEvent::LeaseExpired),
        ]
    );
    assert!(!p.consumer.holds_grant() && p.holder(&unnamed()).is_none());
}

#[test]
fn a_client_gone_while_holding_gives_the_grant_back() {
    let (mut p, f) = consumer_granted_confirmed();
    p.handle_client_gone(at(T0, 2), ClientId(1));
    let how = lockservice::ReleaseHow::Disconnected;
    let released = LockEvent::Released { client: ClientId(1), fence: f, held: Duration::from_millis(1), how };
    assert_eq!(
        drain(&mut p),
        vec![Output::Event(lock(released)), Output::Send { to: n(3), msg: Msg::Release { term: 4, fence: f } },]
    );
    assert!(!p.consumer.holds_grant());
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

// ------------------------------------------------ message guards and terms

/// Only configured peers are heard (`refused_total{reason="not_a_member"}`):
/// a message from outside the ring, or one claiming to come from this
/// process itself, is refused before its term is looked at.
#[test]
fn a_message_from_outside_the_ring_or_from_itself_is_refused() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    for from in [9, 2] {
        let outs = deliver(&mut p, T0, n(from), Incarnation(1), Msg::Heartbeat { term: 9, seq: 1 });
        assert_eq!(outs, vec![Output::Event(ElEvent::Refused { from: n(from), reason: "not_a_member" })]);
    }
    assert_eq!((p.term, p.follows, p.coordinator), (4, None, None), "the higher term is not joined");
}

/// (foundation.md, Incarnations) A message from an older life of its
/// sender than one already heard is dropped unanswered (the transport refuses those; the core never acts
/// on one), while the newer life is still heard.
#[test]
fn a_message_of_an_older_life_of_its_sender_is_dropped() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    deliver(&mut p, T0, n(3), Incarnation(2), Msg::Heartbeat { term: 4, seq: 1 });
    assert_eq!(deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 2 }), vec![]);
    assert_eq!(
        deliver(&mut p, at(T0, 2), n(3), Incarnation(2), Msg::Heartbeat { term: 4, seq: 3 }),
        vec![Output::Send { to: n(3), msg: Msg::HeartbeatAck { term: 4, seq: 3 } }]
    );
}

/// Fresh process 2 of ring {1, 2, 3} (no state file: unrecovered), started
/// at 0 (its restart window is over at T0), start-up timers cancelled.
fn fresh_process() -> ElNode {
    let ring = ring_of(&[1, 2, 3]);
    let ctx = Context::new(n(2), Incarnation(1), ring, Instant::ZERO, cfg(Algorithm::Relay));
    let mut p = ElNode::start(ctx).expect("valid config");
    drain(&mut p);
    quiet(&mut p);
    p
}

/// (foundation.md, Fresh nodes) An unrecovered process joins no higher
/// term — it would vote, ack and follow nothing anyway — and answers
/// nothing: the message is counted `refused_total{reason="unrecovered"}`.
#[test]
fn an_unrecovered_process_refuses_a_higher_term_and_joins_nothing() {
    let mut p = fresh_process();
    assert!(!p.promise.stored().recovered());
    for msg in [Msg::Heartbeat { term: 4, seq: 1 }, Msg::Relay { term: 4, round: 0, phase: 1, value: n(1), hop: 1 }] {
        let outs = deliver(&mut p, T0, n(3), Incarnation(1), msg);
        assert_eq!(outs, vec![Output::Event(ElEvent::Refused { from: n(3), reason: "unrecovered" })]);
    }
    assert_eq!((p.term, p.follows, p.coordinator), (0, None, None));
}

/// (foundation.md, Fresh nodes) The Hello timer of a fresh process sends a
/// recovery round (a fresh nonce); one answer of two others is not enough;
/// the second recovers: the values are stored (with the term they name)
/// before anything else, and the process starts at that term without
/// joining it as a new one.
#[test]
fn a_fresh_process_recovers_its_term_from_a_majority_of_hello_acks() {
    let mut p = fresh_process();
    p.timers.set(Timer::Hello, T0);
    p.handle_timeout(T0);
    let nonce = p.handshake.nonce();
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Send { to: n(1), msg: Msg::Hello { term: 0, nonce } },
            Output::Send { to: n(3), msg: Msg::Hello { term: 0, nonce } },
        ]
    );
    let values = Some(promise::Values { in_use: 4, threshold: 4, floor: 4 });
    let ack = Msg::HelloAck { term: 4, nonce, values, coordinator: Some(n(3)) };
    assert_eq!(deliver(&mut p, at(T0, 1), n(1), Incarnation(1), ack.clone()), vec![]);
    assert_eq!(p.term, 0, "one answer of two: not recovered");
    let outs = deliver(&mut p, at(T0, 2), n(3), Incarnation(1), ack);
    let stored = p.promise.stored().clone();
    assert!(stored.recovered() && stored.recovered_max() == 4 && stored.in_use() == 4, "{stored:?}");
    assert_eq!(
        outs,
        vec![
            Output::Persist(ElDurable { promises: Some(stored), term: 4, follows: None }),
            Output::Event(ElEvent::StateRecovered { max: 4 }),
        ]
    );
    assert_eq!((p.term, p.start_term), (4, 4), "it never takes office at the recovered term");
}

/// (safety, electd.md "Terms, votes and the quorum lease") A lower-term
/// message is answered `StaleTerm`, except the acks and `StaleTerm`
/// itself: those are dropped without an answer (answering them would only
/// bounce between the two).
#[test]
fn lower_term_acks_and_stale_answers_are_dropped_unanswered() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 7);
    for msg in [
        Msg::StaleTerm { term: 6, coordinator: Some(n(3)) },
        Msg::HopAck { term: 6, hop: 1 },
        Msg::HeartbeatAck { term: 6, seq: 1 },
        Msg::RenewAck { term: 6, acks: vec![(lockservice::fence(6, 1), 1)] },
    ] {
        assert_eq!(deliver(&mut p, T0, n(3), Incarnation(1), msg.clone()), vec![], "{msg:?}");
    }
    assert_eq!((p.term, p.follows, p.coordinator), (7, None, None));
}

/// (electd.md "Terms, votes and the quorum lease": `PreVote` is exempt) A
/// pre-vote of a lower term is answered like any other, with the
/// answerer's own term (the asker starts above it), not `StaleTerm`.
#[test]
fn a_lower_term_prevote_is_answered_with_the_own_term_not_stale_term() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 7);
    let outs = deliver(&mut p, T0, n(1), Incarnation(1), Msg::PreVote { term: 5 });
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::PreVoteReply { term: 7, asked: 5, yes: true } }]);
}

/// (safety, electd.md "Terms, votes and the quorum lease") A coordinator
/// that sees a higher term steps down at once — before it acts on the
/// message — and then follows the new term's coordinator like any process.
#[test]
fn a_coordinator_that_sees_a_higher_term_steps_down_before_acting_on_it() {
    let (mut p, now) = coordinator_in_office();
    let outs = deliver(&mut p, now, n(2), Incarnation(1), Msg::Heartbeat { term: 6, seq: 1 });
    let stored = ElDurable { promises: Some(p.promise.stored().clone()), term: 6, follows: Some(n(2)) };
    assert_eq!(p.promise.stored().in_use(), 6, "the term acked is stored as in use");
    assert_eq!(
        outs,
        vec![
            Output::Persist(stored),
            Output::Event(ElEvent::SteppedDown { term: 5, why: "a higher term exists" }),
            Output::Event(ElEvent::QueueLength(0)),
            Output::Event(ElEvent::TermJoined { term: 6 }),
            Output::Event(ElEvent::CoordinatorKnown { term: 6, id: n(2) }),
            Output::Event(ElEvent::Failover { took: Duration::ZERO }),
            Output::Send { to: n(2), msg: Msg::HeartbeatAck { term: 6, seq: 1 } },
        ]
    );
    assert!(!p.is_coordinator() && !p.may_grant(now));
}

// ---------------------------------------------------------------- elections

/// (safety, electd.md "Election algorithm 1 — relay") An ack of a hop not
/// in flight clears nothing: the real hop, unacked, times out, its
/// successor is suspected and the relay term is abandoned (term + 1
/// within `hop_timeout`, never a patched run).
#[test]
fn an_ack_of_another_hop_leaves_the_real_one_to_time_out_and_abort_the_relay_term() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    quiet(&mut p);
    p.start_election_now(T0);
    drain(&mut p);
    let hop = p.terms.last_hop();
    assert_eq!(deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::HopAck { term: 5, hop: hop + 1 }), vec![]);
    let due = T0 + p.cfg.hop_timeout;
    p.handle_timeout(due);
    assert_eq!(drain(&mut p), vec![]);
    assert!(p.suspected.contains(&n(3)) && p.relay.is_idle());
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= due + p.cfg.hop_timeout));
}

/// A `Relay` carrying an id outside the ring or a phase other than 1 or 2
/// is refused (`refused_total{reason="bad_relay"}`) after its hop is
/// acked; no run starts.
#[test]
fn a_relay_value_from_outside_the_ring_or_of_no_phase_is_refused() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    let outs =
        deliver(&mut p, T0, n(1), Incarnation(1), Msg::Relay { term: 4, round: 0, phase: 1, value: n(9), hop: 1 });
    assert_eq!(
        outs,
        vec![
            Output::Send { to: n(1), msg: Msg::HopAck { term: 4, hop: 1 } },
            Output::Event(ElEvent::Refused { from: n(9), reason: "bad_relay" }),
        ]
    );
    let outs =
        deliver(&mut p, T0, n(1), Incarnation(1), Msg::Relay { term: 4, round: 0, phase: 3, value: n(1), hop: 2 });
    assert_eq!(
        outs,
        vec![
            Output::Send { to: n(1), msg: Msg::HopAck { term: 4, hop: 2 } },
            Output::Event(ElEvent::Refused { from: n(1), reason: "bad_relay" }),
        ]
    );
    assert!(p.relay.is_idle());
}

/// Process 2 of relay ring {1, 2, 3} in term 4, start-up timers
/// cancelled, has started term 5 at T0 (active, d = 2; its hop 1 to 3).
fn relay_active() -> ElNode {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    quiet(&mut p);
    p.start_election_now(T0);
    drain(&mut p);
    p
}

/// (electd.md "Election algorithm 1 — relay", steps 1-4) An active process
/// passes on the `e` it receives (phase 2), stays active with d := e when
/// e beats both d and f (round + 1), and, receiving its d back, decides:
/// it votes for d (stored first) and sends `Elected(d)` around the ring.
#[test]
fn a_relay_round_keeps_the_local_maximum_active_and_its_value_back_decides() {
    let mut p = relay_active();
    let relay = |round, phase, value: u32, hop| Msg::Relay { term: 5, round, phase, value: n(value), hop };
    let ev = Output::Event(ElEvent::ElectionMessage { kind: "relay" });
    // e = 3: passed on in phase 2.
    assert_eq!(
        deliver(&mut p, at(T0, 1), n(1), Incarnation(1), relay(0, 1, 3, 1)),
        vec![
            Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 1 } },
            ev.clone(),
            Output::Send { to: n(3), msg: relay(0, 2, 3, 2) },
        ]
    );
    // f = 1: 3 > 2 and 3 > 1, active in round 1 with d = 3.
    assert_eq!(
        deliver(&mut p, at(T0, 2), n(1), Incarnation(1), relay(0, 2, 1, 2)),
        vec![
            Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 2 } },
            ev,
            Output::Send { to: n(3), msg: relay(1, 1, 3, 3) }
        ]
    );
    // Its d back: 3 is the maximum.
    let outs = deliver(&mut p, at(T0, 3), n(1), Incarnation(1), relay(1, 1, 3, 3));
    assert_eq!(
        outs,
        vec![
            Output::Persist(ElDurable { promises: Some(p.promise.stored().clone()), term: 5, follows: Some(n(3)) }),
            Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 3 } },
            Output::Event(ElEvent::CoordinatorKnown { term: 5, id: n(3) }),
            Output::Event(ElEvent::ElectionMessage { kind: "elected" }),
            Output::Send { to: n(3), msg: Msg::Elected { term: 5, d: n(3), decider: n(2), accepted: false, hop: 4 } },
        ]
    );
    assert_eq!(p.promise.stored().threshold(), 5, "the vote in term 5 is stored");
}

/// (electd.md "Election algorithm 1 — relay") An `Elected` back at its
/// decider unaccepted (the winner never saw it: skipped as suspected)
/// ends the lap and leaves the winner suspected, so that term + 1 goes
/// over the live ring without it.
#[test]
fn an_unaccepted_elected_back_at_its_decider_suspects_the_winner() {
    let mut p = relay_active();
    let relay = |round, phase, value: u32, hop| Msg::Relay { term: 5, round, phase, value: n(value), hop };
    for (i, m) in [relay(0, 1, 3, 1), relay(0, 2, 1, 2), relay(1, 1, 3, 3)].into_iter().enumerate() {
        deliver(&mut p, at(T0, i as u64 + 1), n(1), Incarnation(1), m);
    }
    let back = Msg::Elected { term: 5, d: n(3), decider: n(2), accepted: false, hop: 7 };
    let outs = deliver(&mut p, at(T0, 5), n(1), Incarnation(1), back);
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 7 } }]);
    assert!(p.suspected.contains(&n(3)) && p.relay.is_idle());
    assert_eq!(p.successor(), Some(n(1)), "the next run skips 3");
}

/// (safety, electd.md "Election algorithm 1 — relay") A relay value of a
/// term whose coordinator is already known here is a late run message:
/// its hop is acked, and no run is joined.
#[test]
fn a_relay_after_the_terms_coordinator_is_known_is_only_acked() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Heartbeat { term: 5, seq: 1 });
    let relay = Msg::Relay { term: 5, round: 0, phase: 1, value: n(1), hop: 4 };
    let outs = deliver(&mut p, at(T0, 1), n(1), Incarnation(1), relay);
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 4 } }]);
    assert!(p.relay.is_idle());
}

/// (safety, electd.md "Terms, votes and the quorum lease": one vote per
/// term) An `Elected` lap passing a process joins its term, stores its
/// vote and whom it follows first, acks the hop and passes it on.
#[test]
fn an_elected_lap_passing_a_process_stores_its_vote_and_goes_on() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    let elected = |hop| Msg::Elected { term: 5, d: n(3), decider: n(1), accepted: false, hop };
    let outs = deliver(&mut p, T0, n(1), Incarnation(1), elected(1));
    assert_eq!(p.promise.stored().threshold(), 5, "the vote in term 5 is stored");
    assert_eq!(
        outs,
        vec![
            Output::Persist(ElDurable { promises: Some(p.promise.stored().clone()), term: 5, follows: Some(n(3)) }),
            Output::Event(ElEvent::TermJoined { term: 5 }),
            Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 1 } },
            Output::Event(ElEvent::CoordinatorKnown { term: 5, id: n(3) }),
            Output::Event(ElEvent::ElectionMessage { kind: "elected" }),
            Output::Send { to: n(3), msg: elected(1) },
        ]
    );
    assert_eq!((p.follows, p.coordinator), (Some(n(3)), Some(n(3))));
}

/// `Elected`, `Election` and `Coordinator` naming a process outside the
/// ring are refused (`refused_total{reason="bad_elected" | "bad_election"
/// | "bad_coordinator"}`) after their hop is acked; nobody is followed.
#[test]
fn election_messages_naming_a_process_outside_the_ring_are_refused() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Ring, 4);
    let cases = [
        (Msg::Elected { term: 4, d: n(9), decider: n(1), accepted: false, hop: 1 }, "bad_elected"),
        (
            Msg::Election { term: 4, initiator: n(1), initiator_inc: Incarnation(1), alive: vec![n(1), n(9)], hop: 2 },
            "bad_election",
        ),
        (Msg::Coordinator { term: 4, id: n(9), alive: vec![n(1)], initiator: n(1), hop: 3 }, "bad_coordinator"),
    ];
    for (msg, reason) in cases {
        let hop = match &msg {
            Msg::Elected { hop, .. } | Msg::Election { hop, .. } | Msg::Coordinator { hop, .. } => *hop,
            _ => unreachable!(),
        };
        assert_eq!(
            deliver(&mut p, T0, n(1), Incarnation(1), msg),
            vec![
                Output::Send { to: n(1), msg: Msg::HopAck { term: 4, hop } },
                Output::Event(ElEvent::Refused { from: n(1), reason }),
            ]
        );
    }
    assert_eq!((p.follows, p.coordinator), (None, None));
}

/// Process 2 of alive-list ring {1, 2, 3} in term 4, start-up timers
/// cancelled, has started term 5 at T0: its Election (hop 1) went to 3.
fn ring_electing() -> ElNode {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Ring, 4);
    quiet(&mut p);
    p.start_election_now(T0);
    drain(&mut p);
    p
}

/// (safety, electd.md "Election algorithm 2 — alive-list ring") The own
/// Election back with fewer voters than a majority of the configured
/// processes has failed: nobody is named, and it is tried again within
/// the election timeout.
#[test]
fn an_own_election_back_without_a_majority_fails_and_is_tried_again() {
    let mut p = ring_electing();
    assert_eq!(p.timers.get(Timer::Elect), None);
    let back = Msg::Election { term: 5, initiator: n(2), initiator_inc: Incarnation(1), alive: vec![n(2)], hop: 3 };
    let now = at(T0, 1);
    let outs = deliver(&mut p, now, n(1), Incarnation(1), back);
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 3 } }]);
    assert_eq!((p.follows, p.coordinator), (None, None));
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= now + p.cfg.election_timeout));
}

/// (electd.md "Election algorithm 2 — alive-list ring": an Election it
/// sent in its current life) An Election of an earlier life of this
/// process is dropped; the one in flight is still awaited and completes.
#[test]
fn an_election_of_an_earlier_life_of_its_initiator_is_dropped() {
    let mut p = ring_electing();
    let back = |inc, hop| Msg::Election {
        term: 5,
        initiator: n(2),
        initiator_inc: Incarnation(inc),
        alive: vec![n(2), n(3), n(1)],
        hop,
    };
    let outs = deliver(&mut p, at(T0, 1), n(1), Incarnation(1), back(0, 3));
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 3 } }]);
    let outs = deliver(&mut p, at(T0, 2), n(1), Incarnation(1), back(1, 4));
    assert!(
        outs.iter().any(
            |o| matches!(o, Output::Event(ElEvent::ElectionCompleted { coordinator, .. }) if *coordinator == n(3))
        ),
        "{outs:?}"
    );
}

/// (electd.md "Election algorithm 2 — alive-list ring") A second copy of
/// a `Coordinator` lap already passed on (a slow hop was skipped, so the
/// lap goes on twice) goes no further, and the initiator's own lap ends
/// when it is back: only their hops are acked.
#[test]
fn a_second_copy_of_a_coordinator_lap_and_the_own_lap_back_go_no_further() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Ring, 4);
    let lap = |initiator: u32, hop| Msg::Coordinator {
        term: 5,
        id: n(3),
        alive: vec![n(1), n(2), n(3)],
        initiator: n(initiator),
        hop,
    };
    deliver(&mut p, T0, n(1), Incarnation(1), lap(1, 1));
    assert_eq!(
        deliver(&mut p, at(T0, 1), n(1), Incarnation(1), lap(1, 2)),
        vec![Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 2 } }]
    );
    assert_eq!(
        deliver(&mut p, at(T0, 2), n(1), Incarnation(1), lap(2, 3)),
        vec![Output::Send { to: n(1), msg: Msg::HopAck { term: 5, hop: 3 } }]
    );
}

/// (safety, electd.md "Terms, votes and the quorum lease") A term that
/// would overflow is refused and counted
/// (`refused_total{reason="term_overflow"}`), even after a won pre-vote.
#[test]
fn a_prevote_won_for_a_term_that_would_overflow_starts_nothing() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, u64::MAX - 1);
    quiet(&mut p);
    p.timers.set(Timer::Elect, T0);
    p.handle_timeout(T0);
    drain(&mut p);
    let yes = Msg::PreVoteReply { term: u64::MAX - 1, asked: u64::MAX, yes: true };
    assert_eq!(
        deliver(&mut p, at(T0, 1), n(1), Incarnation(1), yes),
        vec![
            Output::Event(ElEvent::PreVote(PreVoteOutcome::Won)),
            Output::Event(ElEvent::Refused { from: n(2), reason: "term_overflow" }),
        ]
    );
    assert_eq!(p.term, u64::MAX - 1);
}

/// (electd.md "Election algorithm 2 — alive-list ring": the timer starts
/// an election only with no known coordinator; "Consumer": a healthy
/// coordinator keeps office) The election timer does nothing while a live
/// coordinator is known, whether its id is higher or lower: no pre-vote is
/// asked.
#[test]
fn the_election_timer_does_nothing_while_a_live_coordinator_is_known() {
    for (me, c) in [(2, 3), (3, 2)] {
        let ring = ring_of(&[1, 2, 3]);
        let mut p = process(&ring, me, Algorithm::Relay, 4);
        deliver(&mut p, T0, n(c), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
        quiet(&mut p);
        let t = p.promise.restart_window_ends().max(at(T0, 10));
        deliver(&mut p, t, n(c), Incarnation(1), Msg::Heartbeat { term: 4, seq: 2 });
        drain(&mut p);
        p.timers.set(Timer::Elect, t);
        p.handle_timeout(t);
        assert_eq!(drain(&mut p), vec![], "{me} under {c}");
        assert!(!p.terms.prevoting(), "{me} under {c}");
    }
}

// ------------------------------------------------ heartbeats and the office

/// Process `me`, the highest id of ring `ids`, stored in term 4, start-up
/// timers cancelled, elected in term 5 at T0 (an `Elected` lap decided by
/// 1, from its predecessor): heartbeat 1 sent, not in office yet.
fn elected_at_t0(ids: &[u32]) -> ElNode {
    let ring = ring_of(ids);
    let me = *ids.iter().max().expect("ids");
    let i = ids.iter().position(|x| *x == me).expect("in the ring");
    let pred = ids[(i + ids.len() - 1) % ids.len()];
    let mut p = process(&ring, me, Algorithm::Relay, 4);
    quiet(&mut p);
    let elected = Msg::Elected { term: 5, d: n(me), decider: n(1), accepted: false, hop: 1 };
    deliver(&mut p, T0, n(pred), Incarnation(1), elected);
    assert!(p.is_coordinator() && !p.in_office());
    p
}

/// (safety, electd.md "Heartbeats and the quorum lease") Only acks of its
/// own heartbeats count, each acker once: an ack of a heartbeat not sent
/// and a second ack from the same process leave a coordinator of five out
/// of office; the third process acking makes the majority.
#[test]
fn an_unknown_or_repeated_heartbeat_ack_counts_for_nothing() {
    let mut p = elected_at_t0(&[1, 2, 3, 4, 5]);
    let ack = |seq| Msg::HeartbeatAck { term: 5, seq };
    assert_eq!(deliver(&mut p, at(T0, 1), n(1), Incarnation(1), ack(1)), vec![]);
    assert_eq!(deliver(&mut p, at(T0, 2), n(1), Incarnation(1), ack(1)), vec![]);
    assert_eq!(deliver(&mut p, at(T0, 3), n(2), Incarnation(1), ack(9)), vec![]);
    assert!(!p.in_office());
    let outs = deliver(&mut p, at(T0, 4), n(2), Incarnation(1), ack(1));
    let stored = ElDurable { promises: Some(p.promise.stored().clone()), term: 5, follows: Some(n(5)) };
    assert_eq!(
        outs,
        vec![Output::Persist(stored), Output::Event(ElEvent::Joined), Output::Event(ElEvent::TookOffice { term: 5 })]
    );
    assert!(p.in_office());
}

/// (safety, electd.md "Heartbeats and the quorum lease") A first quorum
/// after `election_timeout·(1−ρ)` from joining the term counts a deadline
/// miss: the process does not take office, steps down and starts term + 1
/// (within the jitter).
#[test]
fn a_first_quorum_after_the_proposal_deadline_steps_down_instead_of_taking_office() {
    let mut p = elected_at_t0(&[1, 2, 3]);
    let late = T0 + p.cfg.shrunk(p.cfg.election_timeout) + Duration::from_millis(1);
    let outs = deliver(&mut p, late, n(1), Incarnation(1), Msg::HeartbeatAck { term: 5, seq: 1 });
    assert_eq!(
        outs,
        vec![
            Output::Event(ElEvent::PastDeadline { term: 5 }),
            Output::Event(ElEvent::SteppedDown { term: 5, why: "no quorum within the election timeout" }),
            Output::Event(ElEvent::QueueLength(0)),
        ]
    );
    assert!(!p.is_coordinator() && !p.in_office());
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= late + p.cfg.election_jitter));
}

/// (safety, electd.md "Heartbeats and the quorum lease": a process acks
/// only the coordinator it follows) A coordinator acks no other process's
/// heartbeat of its term: it neither follows nor acks another.
#[test]
fn a_coordinator_acks_no_other_heartbeat_of_its_term() {
    let (mut p, now) = coordinator_in_office();
    assert_eq!(deliver(&mut p, now, n(2), Incarnation(1), Msg::Heartbeat { term: 5, seq: 1 }), vec![]);
    assert!(p.in_office());
}

/// (electd.md "Heartbeats and the quorum lease") A coordinator that has
/// lacked a quorum for `suspect_after` steps down (its heartbeats stop)
/// and starts term + 1 within the jitter; a check before then changes
/// nothing.
#[test]
fn a_coordinator_without_a_quorum_for_suspect_after_steps_down() {
    let mut p = elected_at_t0(&[1, 2, 3]);
    p.timers.cancel(Timer::Heartbeat);
    let early = T0 + (p.cfg.suspect_after - Duration::from_millis(1));
    p.timers.set(Timer::Check, early);
    p.handle_timeout(early);
    assert_eq!(drain(&mut p), vec![]);
    assert!(p.is_coordinator());
    let silent = T0 + p.cfg.suspect_after;
    p.timers.set(Timer::Check, silent);
    p.handle_timeout(silent);
    assert_eq!(
        drain(&mut p),
        vec![Output::Event(ElEvent::SteppedDown { term: 5, why: "no quorum" }), Output::Event(ElEvent::QueueLength(0)),]
    );
    assert!(!p.is_coordinator() && p.timers.get(Timer::Heartbeat).is_none());
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= silent + p.cfg.election_jitter));
}

/// (foundation.md, Failure hints: electd's hops to a gone process time
/// out) An unreachable peer that has an election hop in flight: the hop
/// times out at once (the alive-list Election skips it and goes on to the
/// next process); an id outside the ring is ignored.
#[test]
fn an_unreachable_peer_with_an_unacked_ring_hop_is_skipped_at_once() {
    let mut p = ring_electing();
    p.handle_peer_unreachable(at(T0, 1), n(9));
    assert_eq!(drain(&mut p), vec![]);
    p.handle_peer_unreachable(at(T0, 1), n(3));
    let election = Msg::Election { term: 5, initiator: n(2), initiator_inc: Incarnation(1), alive: vec![n(2)], hop: 2 };
    assert_eq!(
        drain(&mut p),
        vec![Output::Event(ElEvent::ElectionMessage { kind: "election" }), Output::Send { to: n(1), msg: election }]
    );
    assert!(p.suspected.contains(&n(3)) && !p.suspected.contains(&n(9)));
}

/// (electd.md "Election algorithm 1 — relay": term + 1 starts over the
/// live ring) A broken link suspects its peer — the next election skips
/// it — until a message from it arrives.
#[test]
fn a_broken_link_suspects_its_peer_until_it_is_heard_again() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 2, Algorithm::Relay, 4);
    quiet(&mut p);
    p.handle_link_lost(T0, n(3));
    assert_eq!(drain(&mut p), vec![]);
    assert!(!p.peer_view(n(3)).up);
    p.start_election_now(at(T0, 1));
    let relay = Msg::Relay { term: 5, round: 0, phase: 1, value: n(2), hop: 1 };
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Persist(stored_at(5, None)),
            Output::Event(ElEvent::TermJoined { term: 5 }),
            Output::Event(ElEvent::ElectionStarted { term: 5, algorithm: Algorithm::Relay }),
            Output::Event(ElEvent::ElectionMessage { kind: "relay" }),
            Output::Send { to: n(1), msg: relay },
        ]
    );
    deliver(&mut p, at(T0, 2), n(3), Incarnation(1), Msg::HopAck { term: 5, hop: 9 });
    assert!(p.peer_view(n(3)).up);
}

// ------------------------------------------------------ the access service

/// (safety, electd.md "Coordinator: FIFO access service", Failover gap)
/// In office, a request is queued but not granted during the failover
/// gap; when the gap ends, its timer grants the head of the queue.
#[test]
fn the_failover_gap_ends_and_the_head_of_the_queue_is_granted() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 3, Algorithm::Relay, 4);
    let elected = Msg::Elected { term: 5, d: n(3), decider: n(1), accepted: false, hop: 1 };
    let outs = deliver(&mut p, T0, n(2), Incarnation(1), elected);
    let now = acked_until(&mut p, outs, at(T0, 440));
    // The last heartbeat (23, at `now`) acked too: under the lease.
    assert_eq!(deliver(&mut p, now, n(1), Incarnation(1), Msg::HeartbeatAck { term: 5, seq: 23 }), vec![]);
    let gap_until = match &p.role {
        Role::Coordinator(o) => o.gap_until,
        _ => panic!("coordinator"),
    };
    assert!(gap_until > at(now, 1) && gap_until < at(now, 20), "{gap_until:?}");
    let asked = at(now, 1);
    assert_eq!(
        deliver(&mut p, asked, n(1), Incarnation(1), request(1)),
        vec![
            Output::Send { to: n(1), msg: Msg::Queued { term: 5, name: unnamed(), req: 1, pos: 0 } },
            Output::Event(ElEvent::QueueLength(1)),
        ]
    );
    assert_eq!(p.timers.get(Timer::GapEnds), Some(gap_until));
    p.handle_timeout(gap_until);
    let f = lockservice::fence(5, 1);
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Send { to: n(1), msg: Msg::Granted { term: 5, name: unnamed(), req: 1, fence: f } },
            Output::Event(ElEvent::Granted { fence: f, waited: gap_until.saturating_since(asked) }),
            Output::Event(ElEvent::QueueLength(0)),
        ]
    );
}

/// (electd.md "Coordinator: FIFO access service") A request already
/// queued, asked again, is answered with its place; it is not queued
/// twice.
#[test]
fn a_request_queued_already_is_answered_its_place_again() {
    let (mut p, now) = coordinator_in_office();
    deliver(&mut p, now, n(1), Incarnation(1), request(1));
    deliver(&mut p, now, n(2), Incarnation(1), request(7));
    let outs = deliver(&mut p, at(now, 1), n(2), Incarnation(1), request(7));
    assert_eq!(outs, vec![Output::Send { to: n(2), msg: Msg::Queued { term: 5, name: unnamed(), req: 7, pos: 1 } }]);
    assert!(matches!(&p.role, Role::Coordinator(o) if o.queued() == 1));
}

/// (safety, electd.md "Coordinator: FIFO access service", Failover gap) A
/// grant of an earlier term re-registered with a new coordinator in
/// office is adopted with its old fence at once, but its renewals are
/// acked only once `lease·(1+ρ)` has passed since taking office; another
/// re-registration while it holds is refused.
#[test]
fn a_re_registered_grant_is_adopted_but_renewed_only_after_the_predecessors_lease() {
    let mut p = elected_at_t0(&[1, 2, 3]);
    deliver(&mut p, at(T0, 1), n(1), Incarnation(1), Msg::HeartbeatAck { term: 5, seq: 1 });
    assert!(p.in_office() && p.may_grant(at(T0, 2)));
    let f = lockservice::fence(4, 7);
    let holding = |f| Msg::Request { term: 5, name: unnamed(), req: 0, queued: None, holding: Some(f), value: None };
    assert_eq!(
        deliver(&mut p, at(T0, 2), n(1), Incarnation(1), holding(f)),
        vec![Output::Send { to: n(1), msg: Msg::Granted { term: 5, name: unnamed(), req: 0, fence: f } }]
    );
    assert_eq!(p.current_grant(&unnamed()), Some((n(1), f)));
    assert_eq!(deliver(&mut p, at(T0, 3), n(1), Incarnation(1), Msg::Renew { term: 5, grants: vec![(f, 1)] }), vec![]);
    let other = lockservice::fence(4, 6);
    assert_eq!(
        deliver(&mut p, at(T0, 3), n(2), Incarnation(1), holding(other)),
        vec![Output::Send { to: n(2), msg: Msg::RenewRefused { term: 5, fences: vec![other] } }]
    );
    assert_eq!(p.current_grant(&unnamed()), Some((n(1), f)));
}

/// (electd.md "Coordinator: FIFO access service": one holder at a time) A
/// release of a fence its sender does not hold (another's, or a wrong
/// fence) frees nothing: the next in the queue is not granted.
#[test]
fn a_release_of_a_grant_its_sender_does_not_hold_frees_nothing() {
    let (mut p, now) = coordinator_in_office();
    let f = lockservice::fence(5, 1);
    deliver(&mut p, now, n(1), Incarnation(1), request(1));
    deliver(&mut p, now, n(2), Incarnation(1), request(7));
    assert_eq!(deliver(&mut p, at(now, 1), n(2), Incarnation(1), Msg::Release { term: 5, fence: f }), vec![]);
    let wrong = lockservice::fence(5, 9);
    assert_eq!(deliver(&mut p, at(now, 1), n(1), Incarnation(1), Msg::Release { term: 5, fence: wrong }), vec![]);
    assert_eq!(p.current_grant(&unnamed()), Some((n(1), f)));
}

// ------------------------------------------------------------- the consumer

/// Consumer 1 of ring {1, 2, 3} following coordinator 3 in term 4, start-up
/// timers cancelled, no local client.
fn consumer_idle() -> ElNode {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 1, Algorithm::Relay, 4);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    quiet(&mut p);
    p
}

/// (electd.md "Consumer") A client's `Acquire` sends one request to the
/// coordinator for the local queue, its immediate answer due within
/// `request_timeout`; a second client waits behind it without a second
/// request, and a client asking twice is refused.
#[test]
fn a_client_acquire_sends_one_request_to_the_known_coordinator() {
    let mut p = consumer_idle();
    let acquire = LockRequest::Acquire { timeout_ms: 10_000 };
    p.handle_request(at(T0, 1), ClientId(1), acquire.clone());
    assert_eq!(
        drain(&mut p),
        vec![Output::Send {
            to: n(3),
            msg: Msg::Request { term: 4, name: unnamed(), req: 1, queued: None, holding: None, value: None }
        }]
    );
    assert_eq!(p.timers.get(Timer::RequestDue), Some(at(T0, 1) + p.cfg.request_timeout));
    p.handle_request(at(T0, 2), ClientId(2), acquire.clone());
    assert_eq!(drain(&mut p), vec![]);
    p.handle_request(at(T0, 3), ClientId(1), acquire);
    let refused = LockReply::Refused { reason: "already waiting for the lock".into() };
    assert_eq!(drain(&mut p), vec![Output::Reply { client: ClientId(1), reply: refused }]);
}

/// (electd.md "Consumer") With no coordinator known a client's request
/// waits here; it is sent once a coordinator is heard of.
#[test]
fn a_client_acquire_without_a_known_coordinator_waits_for_one() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 1, Algorithm::Relay, 4);
    quiet(&mut p);
    p.handle_request(T0, ClientId(1), LockRequest::Acquire { timeout_ms: 10_000 });
    assert_eq!(drain(&mut p), vec![]);
    let outs = deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 1 });
    let sends: Vec<&OutputOf<ElNode>> = outs.iter().filter(|o| matches!(o, Output::Send { .. })).collect();
    assert_eq!(
        sends,
        vec![
            &Output::Send { to: n(3), msg: Msg::HeartbeatAck { term: 4, seq: 1 } },
            &Output::Send {
                to: n(3),
                msg: Msg::Request { term: 4, name: unnamed(), req: 1, queued: None, holding: None, value: None }
            },
        ]
    );
}

/// (electd.md "Coordinator: FIFO access service") A client's `Release` of
/// its hold ends it here (replied, counted) and gives the grant back to
/// the coordinator; a `Release` from a client holding nothing is refused.
#[test]
fn a_client_release_of_its_hold_gives_the_grant_back() {
    let (mut p, f) = consumer_granted_confirmed();
    p.handle_request(at(T0, 2), ClientId(2), LockRequest::Release);
    let refused = LockReply::Refused { reason: "not holding the lock".into() };
    assert_eq!(drain(&mut p), vec![Output::Reply { client: ClientId(2), reply: refused }]);
    p.handle_request(at(T0, 3), ClientId(1), LockRequest::Release);
    let how = lockservice::ReleaseHow::Released;
    let released = LockEvent::Released { client: ClientId(1), fence: f, held: Duration::from_millis(2), how };
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Reply { client: ClientId(1), reply: LockReply::Released },
            Output::Event(lock(released)),
            Output::Send { to: n(3), msg: Msg::Release { term: 4, fence: f } },
        ]
    );
    assert!(!p.consumer.holds_grant() && p.holder(&unnamed()).is_none());
}

/// (electd.md "Coordinator: FIFO access service") A client gone while
/// waiting leaves the local queue quietly; a grant its request still
/// brings is confirmed and then given back, nobody waiting for it here.
#[test]
fn a_client_gone_while_waiting_leaves_and_its_late_grant_is_given_back() {
    let mut p = consumer_asking();
    p.handle_client_gone(at(T0, 1), ClientId(1));
    assert_eq!(drain(&mut p), vec![]);
    assert_eq!(p.locks.waiting(), 0);
    let f = lockservice::fence(4, 1);
    assert_eq!(
        deliver(&mut p, at(T0, 2), n(3), Incarnation(1), Msg::Granted { term: 4, name: unnamed(), req: 1, fence: f }),
        vec![Output::Send { to: n(3), msg: Msg::Renew { term: 4, grants: vec![(f, 1)] } }]
    );
    assert_eq!(
        deliver(&mut p, at(T0, 3), n(3), Incarnation(1), Msg::RenewAck { term: 4, acks: vec![(f, 1)] }),
        vec![Output::Send { to: n(3), msg: Msg::Release { term: 4, fence: f } }]
    );
    assert!(!p.consumer.holds_grant() && p.holder(&unnamed()).is_none());
}

/// (electd.md "Consumer", deviation) A `no_quorum` denial starts an
/// election within the jitter; a denial from another process than the
/// one asked is ignored.
#[test]
fn a_no_quorum_denial_starts_an_election_within_the_jitter() {
    let mut p = consumer_asking();
    let denied = Msg::Denied { term: 4, name: unnamed(), req: 1, why: Denial::NoQuorum };
    assert_eq!(deliver(&mut p, at(T0, 1), n(2), Incarnation(1), denied.clone()), vec![]);
    assert_eq!(p.timers.get(Timer::Elect), None);
    let now = at(T0, 2);
    assert_eq!(deliver(&mut p, now, n(3), Incarnation(1), denied), vec![]);
    assert!(p.timers.get(Timer::Elect).is_some_and(|t| t <= now + p.cfg.election_jitter));
}

/// (electd.md "Coordinator: FIFO access service": the coordinator frees
/// the resource on `Release`) A `Granted` nobody here waits for (no such
/// request pending) is given back at once.
#[test]
fn a_grant_nobody_here_waits_for_is_given_back() {
    let mut p = consumer_idle();
    let f = lockservice::fence(4, 3);
    assert_eq!(
        deliver(&mut p, at(T0, 1), n(3), Incarnation(1), Msg::Granted { term: 4, name: unnamed(), req: 5, fence: f }),
        vec![Output::Send { to: n(3), msg: Msg::Release { term: 4, fence: f } }]
    );
    assert!(!p.consumer.holds_grant());
}

/// (safety, electd.md "Coordinator: FIFO access service") The first acked
/// renewal grants the client, its lease ending at that renewal's send
/// time + `grant_ttl·(1−ρ)`; the renewal timer renews every
/// `grant_ttl/3`, and each later ack moves the client's lease; an ack of
/// a renewal not sent does nothing.
#[test]
fn renewal_acks_grant_the_client_then_move_its_lease() {
    let mut p = consumer_granted_unconfirmed();
    let f = lockservice::fence(4, 1);
    deliver(&mut p, T0, n(3), Incarnation(1), Msg::Granted { term: 4, name: unnamed(), req: 1, fence: f });
    let ack = |seq| Msg::RenewAck { term: 4, acks: vec![(f, seq)] };
    assert_eq!(deliver(&mut p, at(T0, 1), n(3), Incarnation(1), ack(5)), vec![]);
    let ttl = p.cfg.shrunk(p.cfg.grant_ttl);
    let until = T0 + ttl;
    let granted =
        LockEvent::Granted { client: ClientId(1), fence: f, waited: Duration::from_millis(1), lease_until: until };
    assert_eq!(
        deliver(&mut p, at(T0, 1), n(3), Incarnation(1), ack(1)),
        vec![
            Output::Reply {
                client: ClientId(1),
                reply: LockReply::Granted { fence: f, lease_until_us: until.as_micros() }
            },
            Output::Event(lock(granted)),
        ]
    );
    quiet(&mut p);
    let tick = T0 + p.cfg.grant_ttl / 3;
    p.handle_timeout(tick);
    assert_eq!(drain(&mut p), vec![Output::Send { to: n(3), msg: Msg::Renew { term: 4, grants: vec![(f, 2)] } }]);
    let until = tick + ttl;
    let renewed = LockEvent::Renewed { client: ClientId(1), fence: f, lease_until: until };
    assert_eq!(
        deliver(&mut p, at(tick, 1), n(3), Incarnation(1), ack(2)),
        vec![
            Output::Reply { client: ClientId(1), reply: LockReply::Renewed { lease_until_us: until.as_micros() } },
            Output::Event(lock(renewed)),
        ]
    );
}

/// (foundation.md, Runtime: SIGTERM is a graceful leave) A consumer
/// shutting down refuses its waiting clients and every later `Acquire`,
/// and has left at once when nothing is held.
#[test]
fn a_consumer_shutting_down_refuses_its_waiters_and_has_left() {
    let mut p = consumer_asking();
    p.handle_shutdown(at(T0, 1));
    let refused = || LockReply::Refused { reason: "daemon is shutting down".into() };
    assert_eq!(drain(&mut p), vec![Output::Reply { client: ClientId(1), reply: refused() }]);
    assert!(p.is_left());
    p.handle_request(at(T0, 2), ClientId(2), LockRequest::Acquire { timeout_ms: 10_000 });
    assert_eq!(drain(&mut p), vec![Output::Reply { client: ClientId(2), reply: refused() }]);
}

/// (foundation.md, Runtime: graceful leave; electd.md "Coordinator: FIFO
/// access service": a grant stays valid until its lease ends) A holder's
/// process shutting down keeps the hold until its client releases; then
/// the grant goes back and the process has left.
#[test]
fn a_holder_shutting_down_leaves_once_its_client_releases() {
    let (mut p, f) = consumer_granted_confirmed();
    p.handle_shutdown(at(T0, 2));
    assert_eq!(drain(&mut p), vec![]);
    assert!(!p.is_left());
    p.handle_request(at(T0, 3), ClientId(1), LockRequest::Release);
    let how = lockservice::ReleaseHow::Released;
    let released = LockEvent::Released { client: ClientId(1), fence: f, held: Duration::from_millis(2), how };
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Reply { client: ClientId(1), reply: LockReply::Released },
            Output::Event(lock(released)),
            Output::Send { to: n(3), msg: Msg::Release { term: 4, fence: f } },
        ]
    );
    assert!(p.is_left());
}

/// (electd.md "Consumer") A client of the coordinator's own process is
/// granted within the input that asked: its request, the grant, the
/// renewal and its ack go through the loopback, and the step after the
/// input runs until nothing is left there. (They waited for unrelated
/// inputs, up to two heartbeats, when the step drained the loopback only
/// before serving.)
#[test]
fn the_coordinators_own_client_is_granted_within_its_request() {
    let (mut p, now) = coordinator_in_office();
    drain(&mut p);
    p.handle_request(at(now, 1), ClientId(9), LockRequest::Acquire { timeout_ms: 10_000 });
    let granted: Vec<_> = drain(&mut p)
        .into_iter()
        .filter(|o| matches!(o, Output::Reply { client: ClientId(9), reply: LockReply::Granted { .. } }))
        .collect();
    assert_eq!(granted.len(), 1, "{granted:?}");
    assert!(p.loopback.is_empty());
}

// -------------------------------------------------------------- named locks

/// `AcquireNamed` of lock `name`, waiting up to 10 s.
fn acquire_named(name: &str) -> LockRequest {
    LockRequest::AcquireNamed { name: named(name), timeout_ms: 10_000 }
}

/// Request `req` of lock `name` in term `term`, with no place and no grant.
fn request_of(term: u64, name: &str, req: u64) -> Msg {
    Msg::Request { term, name: named(name), req, queued: None, holding: None, value: None }
}

/// [`consumer_idle`], then client 1 asks for lock `a` at T0 + 1 ms and
/// client 2 for lock `b` at T0 + 2 ms: one request each to coordinator 3,
/// each naming its lock, numbered node-wide (1 and 2).
fn two_names_asked() -> ElNode {
    let mut p = consumer_idle();
    p.handle_request(at(T0, 1), ClientId(1), acquire_named("a"));
    assert_eq!(drain(&mut p), vec![Output::Send { to: n(3), msg: request_of(4, "a", 1) }]);
    p.handle_request(at(T0, 2), ClientId(2), acquire_named("b"));
    assert_eq!(drain(&mut p), vec![Output::Send { to: n(3), msg: request_of(4, "b", 2) }]);
    // One node-wide request timer, at the earliest answer due.
    assert_eq!(p.timers.get(Timer::RequestDue), Some(at(T0, 1) + p.cfg.request_timeout));
    assert_eq!(p.locks.known(), 2);
    p
}

/// [`two_names_asked`], then lock `a` granted fence (4, 1) at T0 + 3 ms and
/// `b` fence (4, 2) at T0 + 4 ms, each first renewal acked 2 ms later:
/// client 1 holds `a`, client 2 holds `b`.
fn two_names_held() -> (ElNode, u128, u128) {
    let mut p = two_names_asked();
    let (fa, fb) = (lockservice::fence(4, 1), lockservice::fence(4, 2));
    deliver(&mut p, at(T0, 3), n(3), Incarnation(1), Msg::Granted { term: 4, name: named("a"), req: 1, fence: fa });
    deliver(&mut p, at(T0, 4), n(3), Incarnation(1), Msg::Granted { term: 4, name: named("b"), req: 2, fence: fb });
    deliver(&mut p, at(T0, 5), n(3), Incarnation(1), Msg::RenewAck { term: 4, acks: vec![(fa, 1)] });
    deliver(&mut p, at(T0, 6), n(3), Incarnation(1), Msg::RenewAck { term: 4, acks: vec![(fb, 1)] });
    assert_eq!((p.holder(&named("a")), p.holder(&named("b"))), (Some((ClientId(1), fa)), Some((ClientId(2), fb))));
    (p, fa, fb)
}

/// (named-locks.md "electd": the consumer keeps its pending request and
/// held grant per name) Two locks asked for by local clients of one
/// consumer: one `Request` each, naming its lock; each `Granted` is
/// renewed at once, alone, and each client is granted its own fence only
/// when its own grant's renewal is acked.
#[test]
fn two_names_are_requested_apart_and_each_client_granted_after_its_own_ack() {
    let mut p = two_names_asked();
    let (a, b) = (named("a"), named("b"));
    let (fa, fb) = (lockservice::fence(4, 1), lockservice::fence(4, 2));
    let outs =
        deliver(&mut p, at(T0, 3), n(3), Incarnation(1), Msg::Granted { term: 4, name: a.clone(), req: 1, fence: fa });
    assert_eq!(outs, vec![Output::Send { to: n(3), msg: Msg::Renew { term: 4, grants: vec![(fa, 1)] } }]);
    let outs =
        deliver(&mut p, at(T0, 4), n(3), Incarnation(1), Msg::Granted { term: 4, name: b.clone(), req: 2, fence: fb });
    assert_eq!(outs, vec![Output::Send { to: n(3), msg: Msg::Renew { term: 4, grants: vec![(fb, 1)] } }]);
    // Nothing pending any more: the request timer is off; the renewal
    // timer is armed at the first grant's grant_ttl/3 (the second's is
    // later).
    assert_eq!(p.timers.get(Timer::RequestDue), None);
    assert_eq!(p.timers.get(Timer::Renew), Some(at(T0, 3) + p.cfg.grant_ttl / 3));
    assert_eq!(p.consumer.grants_held(), 2);
    // b's renewal acked first: only client 2 is granted, its lease from
    // that renewal's send time.
    let ttl = p.cfg.shrunk(p.cfg.grant_ttl);
    let until_b = at(T0, 4) + ttl;
    let granted_b =
        LockEvent::Granted { client: ClientId(2), fence: fb, waited: Duration::from_millis(3), lease_until: until_b };
    assert_eq!(
        deliver(&mut p, at(T0, 5), n(3), Incarnation(1), Msg::RenewAck { term: 4, acks: vec![(fb, 1)] }),
        vec![
            Output::Reply {
                client: ClientId(2),
                reply: LockReply::Granted { fence: fb, lease_until_us: until_b.as_micros() }
            },
            Output::Event(lock_of(&b, granted_b)),
        ]
    );
    assert_eq!((p.holder(&a), p.holder(&b)), (None, Some((ClientId(2), fb))));
    // Then a's: client 1, with a's fence.
    let until_a = at(T0, 3) + ttl;
    let granted_a =
        LockEvent::Granted { client: ClientId(1), fence: fa, waited: Duration::from_millis(5), lease_until: until_a };
    assert_eq!(
        deliver(&mut p, at(T0, 6), n(3), Incarnation(1), Msg::RenewAck { term: 4, acks: vec![(fa, 1)] }),
        vec![
            Output::Reply {
                client: ClientId(1),
                reply: LockReply::Granted { fence: fa, lease_until_us: until_a.as_micros() }
            },
            Output::Event(lock_of(&a, granted_a)),
        ]
    );
    assert_eq!((p.holder(&a), p.holder(&b)), (Some((ClientId(1), fa)), Some((ClientId(2), fb))));
    // The node-wide expiry timer: the earliest lease of the two.
    assert_eq!(p.timers.get(Timer::GrantExpiry), Some(until_a));
}

/// (named-locks.md "electd": renewals per node) At the renewal tick every
/// grant held is renewed in one `Renew` to their coordinator, and one
/// `RenewAck` listing both moves both clients' leases.
#[test]
fn the_renewal_tick_renews_every_grant_held_in_one_message() {
    let (mut p, fa, fb) = two_names_held();
    let (a, b) = (named("a"), named("b"));
    let tick = at(T0, 3) + p.cfg.grant_ttl / 3;
    assert_eq!(p.timers.get(Timer::Renew), Some(tick));
    p.handle_timeout(tick);
    assert_eq!(
        drain(&mut p),
        vec![Output::Send { to: n(3), msg: Msg::Renew { term: 4, grants: vec![(fa, 2), (fb, 2)] } }]
    );
    assert_eq!(p.timers.get(Timer::Renew), Some(tick + p.cfg.grant_ttl / 3));
    let until = tick + p.cfg.shrunk(p.cfg.grant_ttl);
    let renewed = |client, fence| LockEvent::Renewed { client: ClientId(client), fence, lease_until: until };
    let reply = || LockReply::Renewed { lease_until_us: until.as_micros() };
    assert_eq!(
        deliver(&mut p, at(tick, 1), n(3), Incarnation(1), Msg::RenewAck { term: 4, acks: vec![(fa, 2), (fb, 2)] }),
        vec![
            Output::Reply { client: ClientId(1), reply: reply() },
            Output::Event(lock_of(&a, renewed(1, fa))),
            Output::Reply { client: ClientId(2), reply: reply() },
            Output::Event(lock_of(&b, renewed(2, fb))),
        ]
    );
    assert_eq!(p.timers.get(Timer::GrantExpiry), Some(until));
}

/// Process 3 of ring {1, 2, 3}, elected in term 5 at T0, its heartbeats
/// acked by 1 until it is in office within its failover gap (as in
/// `the_failover_gap_ends_and_the_head_of_the_queue_is_granted`). Returns
/// it, the time reached and the gap's end.
fn coordinator_in_its_gap() -> (ElNode, Instant, Instant) {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 3, Algorithm::Relay, 4);
    let elected = Msg::Elected { term: 5, d: n(3), decider: n(1), accepted: false, hop: 1 };
    let outs = deliver(&mut p, T0, n(2), Incarnation(1), elected);
    let now = acked_until(&mut p, outs, at(T0, 440));
    deliver(&mut p, now, n(1), Incarnation(1), Msg::HeartbeatAck { term: 5, seq: 23 });
    let gap_until = match &p.role {
        Role::Coordinator(o) => o.gap_until,
        _ => panic!("coordinator"),
    };
    assert!(p.may_grant(at(now, 1)) && gap_until > at(now, 1), "{gap_until:?}");
    (p, now, gap_until)
}

/// (safety, named-locks.md "electd": one counter per office,
/// `OfficeWideCounter`) Two names queued at the coordinator are granted
/// at once, with fences (term, c) and (term, c + 1) of the one counter; a
/// name released is forgotten, and asked for again within the office it
/// gets a fence above every earlier one (a per-name counter would repeat
/// (term, 1)). The holder-expiry timer runs at the earliest honour time,
/// and stops once nothing is held.
#[test]
fn two_names_are_granted_at_once_from_one_counter_and_a_forgotten_name_gets_a_higher_fence() {
    let (mut p, now, gap_until) = coordinator_in_its_gap();
    let asked = at(now, 1);
    assert_eq!(
        deliver(&mut p, asked, n(1), Incarnation(1), request_of(5, "a", 1)),
        vec![
            Output::Send { to: n(1), msg: Msg::Queued { term: 5, name: named("a"), req: 1, pos: 0 } },
            Output::Event(ElEvent::QueueLength(1)),
        ]
    );
    assert_eq!(
        deliver(&mut p, asked, n(2), Incarnation(1), request_of(5, "b", 7)),
        vec![
            Output::Send { to: n(2), msg: Msg::Queued { term: 5, name: named("b"), req: 7, pos: 1 } },
            Output::Event(ElEvent::QueueLength(2)),
        ]
    );
    assert_eq!(p.timers.get(Timer::HolderExpiry), None);
    p.handle_timeout(gap_until);
    let (fa, fb) = (lockservice::fence(5, 1), lockservice::fence(5, 2));
    let waited = gap_until.saturating_since(asked);
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Send { to: n(1), msg: Msg::Granted { term: 5, name: named("a"), req: 1, fence: fa } },
            Output::Event(ElEvent::Granted { fence: fa, waited }),
            Output::Event(ElEvent::QueueLength(1)),
            Output::Send { to: n(2), msg: Msg::Granted { term: 5, name: named("b"), req: 7, fence: fb } },
            Output::Event(ElEvent::Granted { fence: fb, waited }),
            Output::Event(ElEvent::QueueLength(0)),
        ]
    );
    assert_eq!(p.current_grant(&named("a")), Some((n(1), fa)));
    assert_eq!(p.current_grant(&named("b")), Some((n(2), fb)));
    let honour = p.cfg.stretched(p.cfg.grant_ttl);
    assert_eq!(p.timers.get(Timer::HolderExpiry), Some(gap_until + honour));
    // b renewed later: the expiry timer stays at a's honour time.
    let later = at(gap_until, 5);
    assert_eq!(
        deliver(&mut p, later, n(2), Incarnation(1), Msg::Renew { term: 5, grants: vec![(fb, 1)] }),
        vec![Output::Send { to: n(2), msg: Msg::RenewAck { term: 5, acks: vec![(fb, 1)] } }]
    );
    assert_eq!(p.timers.get(Timer::HolderExpiry), Some(gap_until + honour));
    // a released: nothing waits for it, so it is forgotten; the expiry
    // timer moves to b's honour time.
    let released = at(gap_until, 6);
    assert_eq!(deliver(&mut p, released, n(1), Incarnation(1), Msg::Release { term: 5, fence: fa }), vec![]);
    assert!(matches!(&p.role, Role::Coordinator(o) if !o.names.contains_key(&named("a")) && o.held() == 1));
    assert_eq!(p.timers.get(Timer::HolderExpiry), Some(later + honour));
    // Asked again in the same office: the next fence of the one counter.
    let fa2 = lockservice::fence(5, 3);
    assert_eq!(
        deliver(&mut p, at(released, 1), n(1), Incarnation(1), request_of(5, "a", 2)),
        vec![
            Output::Send { to: n(1), msg: Msg::Queued { term: 5, name: named("a"), req: 2, pos: 2 } },
            Output::Event(ElEvent::QueueLength(1)),
            Output::Send { to: n(1), msg: Msg::Granted { term: 5, name: named("a"), req: 2, fence: fa2 } },
            Output::Event(ElEvent::Granted { fence: fa2, waited: Duration::ZERO }),
            Output::Event(ElEvent::QueueLength(0)),
        ]
    );
    assert!(fa2 > fb && fb > fa);
    // Both released: nothing held, no holder-expiry timer, no name kept.
    let end = at(released, 2);
    assert_eq!(deliver(&mut p, end, n(1), Incarnation(1), Msg::Release { term: 5, fence: fa2 }), vec![]);
    assert_eq!(deliver(&mut p, end, n(2), Incarnation(1), Msg::Release { term: 5, fence: fb }), vec![]);
    assert_eq!(p.timers.get(Timer::HolderExpiry), None);
    assert!(matches!(&p.role, Role::Coordinator(o) if o.names.is_empty() && o.held() == 0));
}

/// (named-locks.md "electd": bounds) A coordinator that knows `max_locks`
/// names denies a request for another `too_many_locks`; the names it knows
/// are still served.
#[test]
fn a_coordinator_at_max_locks_denies_a_new_name_too_many_locks() {
    let (mut p, now) = coordinator_in_office();
    p.cfg.max_locks = 1;
    let fa = lockservice::fence(5, 1);
    deliver(&mut p, now, n(1), Incarnation(1), request_of(5, "a", 1));
    assert_eq!(p.current_grant(&named("a")), Some((n(1), fa)));
    assert_eq!(
        deliver(&mut p, now, n(2), Incarnation(1), request_of(5, "b", 7)),
        vec![
            Output::Event(ElEvent::Denied { reason: "too_many_locks" }),
            Output::Send {
                to: n(2),
                msg: Msg::Denied { term: 5, name: named("b"), req: 7, why: Denial::TooManyLocks }
            },
        ]
    );
    // A name it knows is queued as before.
    assert_eq!(
        deliver(&mut p, now, n(2), Incarnation(1), request_of(5, "a", 8)),
        vec![
            Output::Send { to: n(2), msg: Msg::Queued { term: 5, name: named("a"), req: 8, pos: 1 } },
            Output::Event(ElEvent::QueueLength(1)),
        ]
    );
    assert!(matches!(&p.role, Role::Coordinator(o) if o.names.len() == 1));
}

/// (named-locks.md "electd"; electd.md "Consumer", deviation) A
/// `too_many_locks` denial backs that name off: no request for it until
/// `request_timeout` later (the request timer wakes then), while the
/// other name is granted meanwhile.
#[test]
fn a_too_many_locks_denial_backs_that_name_off_while_others_proceed() {
    let mut p = two_names_asked();
    let denied = Msg::Denied { term: 4, name: named("b"), req: 2, why: Denial::TooManyLocks };
    let at_denial = at(T0, 3);
    assert_eq!(deliver(&mut p, at_denial, n(3), Incarnation(1), denied), vec![]);
    let backoff_end = at_denial + p.cfg.request_timeout;
    // a proceeds: granted, renewed, its client granted.
    let fa = lockservice::fence(4, 1);
    let granted = Msg::Granted { term: 4, name: named("a"), req: 1, fence: fa };
    assert_eq!(
        deliver(&mut p, at(T0, 4), n(3), Incarnation(1), granted),
        vec![Output::Send { to: n(3), msg: Msg::Renew { term: 4, grants: vec![(fa, 1)] } }]
    );
    // The request timer now only waits for b's back-off.
    assert_eq!(p.timers.get(Timer::RequestDue), Some(backoff_end));
    deliver(&mut p, at(T0, 5), n(3), Incarnation(1), Msg::RenewAck { term: 4, acks: vec![(fa, 1)] });
    assert_eq!(p.holder(&named("a")), Some((ClientId(1), fa)));
    // Until the back-off ends, inputs ask nothing for b.
    let before = at_denial + (p.cfg.request_timeout - Duration::from_millis(1));
    assert_eq!(
        deliver(&mut p, before, n(3), Incarnation(1), Msg::Heartbeat { term: 4, seq: 2 }),
        vec![Output::Send { to: n(3), msg: Msg::HeartbeatAck { term: 4, seq: 2 } }]
    );
    assert_eq!(p.locks.waiting(), 1, "client 2 still waits for b");
    // Then b is asked for again, a new request number.
    p.handle_timeout(backoff_end);
    assert_eq!(drain(&mut p), vec![Output::Send { to: n(3), msg: request_of(4, "b", 3) }]);
    assert_eq!(p.timers.get(Timer::RequestDue), Some(backoff_end + p.cfg.request_timeout));
}

/// (named-locks.md "electd": `RenewRefused` lists the fences) A refusal
/// of one of two grants held loses only that name: its client is told
/// `LockLost`, the other client keeps its lock, and only the other grant
/// is renewed from then on.
#[test]
fn a_renewal_refused_for_one_of_two_grants_loses_only_that_name() {
    let (mut p, fa, fb) = two_names_held();
    let outs = deliver(&mut p, at(T0, 7), n(3), Incarnation(1), Msg::RenewRefused { term: 4, fences: vec![fa] });
    let lost = LockReply::LockLost { reason: "the coordinator refused the renewal".into() };
    assert_eq!(outs, vec![Output::Reply { client: ClientId(1), reply: lost }]);
    assert_eq!(p.consumer.grants_held(), 1);
    // Client 1, told, holds at most until its lease ends; client 2 keeps b.
    assert_eq!(p.holder(&named("a")), Some((ClientId(1), fa)));
    assert_eq!(p.holder(&named("b")), Some((ClientId(2), fb)));
    assert_eq!(p.timers.get(Timer::GrantExpiry), Some(at(T0, 4) + p.cfg.shrunk(p.cfg.grant_ttl)));
    let tick = at(T0, 3) + p.cfg.grant_ttl / 3;
    p.handle_timeout(tick);
    assert_eq!(drain(&mut p), vec![Output::Send { to: n(3), msg: Msg::Renew { term: 4, grants: vec![(fb, 2)] } }]);
}

/// Many names asked for at once by the coordinator's own clients: each
/// local grant takes a few messages to itself, more than one input's
/// loopback budget holds. What is left is handled at once as the next
/// input (`Timer::Loopback` at the same instant), not at the next
/// heartbeat: every client is granted at the instant it asked.
#[test]
fn many_local_names_at_the_coordinator_are_all_granted_at_once() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 3, Algorithm::Relay, 4);
    // A failover gap longer than the office's first 600 ms.
    p.cfg.grant_ttl = Duration::from_secs(3);
    let elected = Msg::Elected { term: 5, d: n(3), decider: n(1), accepted: false, hop: 1 };
    let outs = deliver(&mut p, T0, n(2), Incarnation(1), elected);
    let now = acked_until(&mut p, outs, at(T0, 600));
    assert!(p.in_office() && p.may_grant(now));
    // 40 names asked for during the failover gap: all granted when it
    // ends, 40 grants (and their renewals and acks) in one input.
    let mut outs = Vec::new();
    for i in 0..40u64 {
        let name = named(&format!("n{i}"));
        let req = LockRequest::AcquireNamed { name, timeout_ms: 60_000 };
        outs.extend(ftcore::testing::request(&mut p, now, ClientId(100 + i), req));
    }
    let gap_until = match &p.role {
        Role::Coordinator(o) => o.gap_until,
        _ => unreachable!("in office"),
    };
    // Under the quorum lease (1 acks every heartbeat) until the gap ends.
    let mut t = now;
    while t < gap_until {
        t = at(t, 20).min(gap_until);
        p.handle_timeout(t);
        for o in drain(&mut p) {
            if let Output::Send { to, msg: Msg::Heartbeat { term, seq } } = &o {
                if *to == n(1) {
                    let ack = Msg::HeartbeatAck { term: *term, seq: *seq };
                    deliver(&mut p, t, n(1), Incarnation(1), ack);
                }
            }
            outs.push(o);
        }
    }
    assert!(p.may_grant(t) && now < gap_until);
    while p.poll_timeout().is_some_and(|at| at <= t) {
        p.handle_timeout(t);
        outs.extend(drain(&mut p));
    }
    let granted = outs.iter().filter(|o| matches!(o, Output::Reply { reply: LockReply::Granted { .. }, .. })).count();
    assert_eq!(granted, 40, "every local client granted at the gap's end, {t:?}");
    assert_eq!(p.locks.known(), 40);
}

// ---------------------------------------------------------------- elections

/// The lock of election `s`.
fn election(s: &str) -> LockName {
    LockName::election(&named(s))
}

/// Coordinator 3 in office past its gap, election `x` granted to 1 with
/// fence (5, 1) (its request 1): returns it, the time and the fence.
fn campaign_granted() -> (ElNode, Instant, u128) {
    let (mut p, now) = coordinator_in_office();
    let f = lockservice::fence(5, 1);
    let req = Msg::Request { term: 5, name: election("x"), req: 1, queued: None, holding: None, value: None };
    let outs = deliver(&mut p, now, n(1), Incarnation(1), req);
    assert!(outs.iter().any(|o| matches!(o, Output::Send { msg: Msg::Granted { fence, .. }, .. } if *fence == f)));
    (p, now, f)
}

fn observe(req: u64, mode: ObserveMode, names: &[&str]) -> Msg {
    Msg::Observe { term: 5, req, mode, names: names.iter().map(|s| election(s)).collect() }
}

fn observed(req: u64, entries: Vec<crate::msg::Observation>) -> Output<Msg, LockReply, ElEvent, ElDurable> {
    Output::Send { to: n(2), msg: Msg::Observed { term: 5, req, entries } }
}

/// (elections.md, amendments E1) A grant not yet renewed cannot be held:
/// "no leader", as of the office's latest fence. Once a renewal is acked
/// the client may hold but its value is unknown: nothing is said. Once
/// announced (and acknowledged), the leader with its fence.
#[test]
fn an_election_is_leaderless_then_unknown_then_led() {
    let (mut p, now, f) = campaign_granted();
    // As of just below the grant: a watcher told this must still take f's
    // leader when it is announced (found by the real-process test: as of
    // the office's latest fence, f itself, every other leader was lost).
    let outs = deliver(&mut p, now, n(2), Incarnation(1), observe(1, ObserveMode::Once, &["x"]));
    assert_eq!(outs, vec![observed(1, vec![(election("x"), None, f - 1)])]);
    deliver(&mut p, now, n(1), Incarnation(1), Msg::Renew { term: 5, grants: vec![(f, 1)] });
    let outs = deliver(&mut p, now, n(2), Incarnation(1), observe(2, ObserveMode::Once, &["x"]));
    assert_eq!(outs, vec![], "acked and unannounced: unknown, no answer");
    // Only the holder's announce counts.
    let outs = deliver(&mut p, now, n(2), Incarnation(1), Msg::Announce { term: 5, fence: f, value: "b".into() });
    assert_eq!(outs, vec![]);
    let outs = deliver(&mut p, now, n(1), Incarnation(1), Msg::Announce { term: 5, fence: f, value: "a".into() });
    assert_eq!(outs, vec![Output::Send { to: n(1), msg: Msg::Announced { term: 5, fence: f } }]);
    let outs = deliver(&mut p, now, n(2), Incarnation(1), observe(3, ObserveMode::Once, &["x"]));
    assert_eq!(outs, vec![observed(3, vec![(election("x"), Some((n(1), f, "a".into())), f)])]);
    // A second announce is acknowledged again; the first value stays.
    deliver(&mut p, now, n(1), Incarnation(1), Msg::Announce { term: 5, fence: f, value: "z".into() });
    let outs = deliver(&mut p, now, n(2), Incarnation(1), observe(4, ObserveMode::Once, &["x"]));
    assert_eq!(outs, vec![observed(4, vec![(election("x"), Some((n(1), f, "a".into())), f)])]);
}

/// Watchers are pushed each change (req 0): the leader once announced,
/// "no leader" once it releases; a one-shot asker is not; an unwatch
/// stops the pushes.
#[test]
fn watchers_are_told_each_change_and_unwatch_stops_it() {
    let (mut p, now, f) = campaign_granted();
    let outs = deliver(&mut p, now, n(2), Incarnation(1), observe(1, ObserveMode::Watch, &["x"]));
    assert_eq!(outs, vec![observed(1, vec![(election("x"), None, f - 1)])]);
    deliver(&mut p, now, n(1), Incarnation(1), Msg::Renew { term: 5, grants: vec![(f, 1)] });
    let outs = deliver(&mut p, now, n(1), Incarnation(1), Msg::Announce { term: 5, fence: f, value: "a".into() });
    assert_eq!(
        outs,
        vec![
            Output::Send { to: n(1), msg: Msg::Announced { term: 5, fence: f } },
            observed(0, vec![(election("x"), Some((n(1), f, "a".into())), f)]),
        ]
    );
    let outs = deliver(&mut p, at(now, 1), n(1), Incarnation(1), Msg::Release { term: 5, fence: f });
    assert_eq!(outs, vec![observed(0, vec![(election("x"), None, f)])]);
    deliver(&mut p, at(now, 2), n(2), Incarnation(1), observe(0, ObserveMode::Unwatch, &["x"]));
    let req = Msg::Request { term: 5, name: election("x"), req: 2, queued: None, holding: None, value: None };
    let outs = deliver(&mut p, at(now, 3), n(1), Incarnation(1), req);
    assert!(!outs.iter().any(|o| matches!(o, Output::Send { msg: Msg::Observed { .. }, .. })), "{outs:?}");
}

/// (E3) A coordinator outside its quorum lease answers nothing: its
/// state may be stale.
#[test]
fn no_answer_outside_the_quorum_lease() {
    let (mut p, now, _) = campaign_granted();
    let outs = deliver(&mut p, at(now, 60), n(2), Incarnation(1), observe(1, ObserveMode::Once, &["x"]));
    assert_eq!(outs, vec![]);
}

/// (E2) A re-registration of an earlier term's campaign brings its value
/// (a leader at once); one arriving after the failover gap, or below a
/// fence of the election adopted in this office, is refused.
#[test]
fn adoption_brings_the_value_only_within_the_gap_and_never_backwards() {
    let ring = ring_of(&[1, 2, 3]);
    let mut p = process(&ring, 3, Algorithm::Relay, 4);
    let elected = Msg::Elected { term: 5, d: n(3), decider: n(1), accepted: false, hop: 1 };
    let outs = deliver(&mut p, T0, n(2), Incarnation(1), elected);
    // In office, within the gap: past a few heartbeats only.
    let now = acked_until(&mut p, outs, at(T0, 60));
    assert!(p.in_office());
    let gap_until = match &p.role {
        Role::Coordinator(o) => o.gap_until,
        _ => unreachable!(),
    };
    assert!(now < gap_until, "still in the gap");
    let (old, older) = (lockservice::fence(4, 7), lockservice::fence(4, 3));
    let rereg = |f, v: &str| Msg::Request {
        term: 5,
        name: election("x"),
        req: 0,
        queued: None,
        holding: Some(f),
        value: Some(v.into()),
    };
    let outs = deliver(&mut p, now, n(1), Incarnation(1), rereg(old, "a"));
    assert!(outs.iter().any(|o| matches!(o, Output::Send { msg: Msg::Granted { fence, .. }, .. } if *fence == old)));
    // Released; a stale lower re-registration is refused, not adopted.
    deliver(&mut p, now, n(1), Incarnation(1), Msg::Release { term: 5, fence: old });
    let outs = deliver(&mut p, now, n(2), Incarnation(1), rereg(older, "b"));
    assert_eq!(outs, vec![Output::Send { to: n(2), msg: Msg::RenewRefused { term: 5, fences: vec![older] } }]);
    // After the gap (its quorum lease kept by 1's acks) no earlier term's
    // grant is adopted.
    let mut after = now;
    while after <= gap_until {
        after = at(after, 20);
        p.handle_timeout(after);
        for o in drain(&mut p) {
            if let Output::Send { to, msg: Msg::Heartbeat { term, seq } } = o {
                if to == n(1) {
                    deliver(&mut p, after, n(1), Incarnation(1), Msg::HeartbeatAck { term, seq });
                }
            }
        }
    }
    assert!(p.may_grant(after));
    let outs = deliver(&mut p, after, n(2), Incarnation(1), rereg(lockservice::fence(4, 9), "c"));
    assert_eq!(
        outs,
        vec![Output::Send { to: n(2), msg: Msg::RenewRefused { term: 5, fences: vec![lockservice::fence(4, 9)] } }]
    );
}

/// The observer's side: a client's observe is asked of the coordinator
/// (numbered), answered from that round; a watcher is told only news
/// (never an older leader), and `Release` ends the watch with an unwatch.
#[test]
fn an_observer_asks_its_coordinator_and_filters_for_its_watchers() {
    let mut p = consumer_idle();
    let x = named("x");
    p.handle_request(at(T0, 1), ClientId(7), LockRequest::Observe { name: x.clone(), watch: true });
    let ask = Msg::Observe { term: 4, req: 1, mode: ObserveMode::Watch, names: vec![election("x")] };
    assert_eq!(drain(&mut p), vec![Output::Send { to: n(3), msg: ask }]);
    let leader = |f: u128| Some((n(2), f, "v".to_string()));
    let info = |f: u128| Some(LeaderInfo { node: 2, fence: f, value: "v".into() });
    let (f5, f6) = (lockservice::fence(4, 5), lockservice::fence(4, 6));
    // A push before the first answer is not the client's first answer.
    let push = |entries| Msg::Observed { term: 4, req: 0, entries };
    assert_eq!(deliver(&mut p, at(T0, 2), n(3), Incarnation(1), push(vec![(election("x"), leader(f5), f5)])), vec![]);
    let answer = Msg::Observed { term: 4, req: 1, entries: vec![(election("x"), leader(f5), f5)] };
    assert_eq!(
        deliver(&mut p, at(T0, 3), n(3), Incarnation(1), answer),
        vec![Output::Reply { client: ClientId(7), reply: LockReply::Leader { name: x.clone(), leader: info(f5) } }]
    );
    // The same again, or an older leader: nothing; a newer one: told.
    assert_eq!(deliver(&mut p, at(T0, 4), n(3), Incarnation(1), push(vec![(election("x"), leader(f5), f5)])), vec![]);
    let older = lockservice::fence(4, 4);
    assert_eq!(
        deliver(&mut p, at(T0, 4), n(3), Incarnation(1), push(vec![(election("x"), leader(older), older)])),
        vec![]
    );
    assert_eq!(
        deliver(&mut p, at(T0, 5), n(3), Incarnation(1), push(vec![(election("x"), leader(f6), f6)])),
        vec![Output::Reply { client: ClientId(7), reply: LockReply::Leader { name: x.clone(), leader: info(f6) } }]
    );
    // From another process than the coordinator: ignored.
    assert_eq!(deliver(&mut p, at(T0, 6), n(2), Incarnation(1), push(vec![(election("x"), None, f6)])), vec![]);
    p.handle_request(at(T0, 7), ClientId(7), LockRequest::Release);
    let unwatch = Msg::Observe { term: 4, req: 0, mode: ObserveMode::Unwatch, names: vec![election("x")] };
    assert_eq!(
        drain(&mut p),
        vec![
            Output::Reply { client: ClientId(7), reply: LockReply::Released },
            Output::Send { to: n(3), msg: unwatch },
        ]
    );
    assert_eq!(p.observe.observed(), 0);
}

/// (E9) A client reaches an election's lock only through `Campaign`; a
/// campaign's value over 1 KiB is refused before anything is queued.
#[test]
fn an_elections_lock_is_not_a_clients_lock_name_and_values_are_bounded() {
    let mut p = consumer_idle();
    p.handle_request(at(T0, 1), ClientId(1), LockRequest::AcquireNamed { name: election("x"), timeout_ms: 100 });
    let outs = drain(&mut p);
    assert!(
        matches!(&outs[..], [Output::Event(_), Output::Reply { reply: LockReply::Refused { .. }, .. }]),
        "{outs:?}"
    );
    let value = "v".repeat(lockservice::MAX_VALUE + 1);
    p.handle_request(at(T0, 2), ClientId(2), LockRequest::Campaign { name: named("x"), value, timeout_ms: 100 });
    let outs = drain(&mut p);
    assert!(
        matches!(&outs[..], [Output::Event(_), Output::Reply { reply: LockReply::Refused { reason }, .. }] if reason.contains("1024")),
        "{outs:?}"
    );
    assert_eq!(p.locks.known(), 0);
    // A campaign within bounds asks the coordinator for `elect:x`.
    p.handle_request(
        at(T0, 3),
        ClientId(3),
        LockRequest::Campaign { name: named("x"), value: "a".into(), timeout_ms: 100 },
    );
    let outs = drain(&mut p);
    assert!(
        outs.iter().any(
            |o| matches!(o, Output::Send { msg: Msg::Request { name, value: None, .. }, .. } if *name == election("x"))
        ),
        "{outs:?}"
    );
}

/// The consumer announces a campaign's value once its client is granted,
/// again on each renewal tick until acknowledged, and not after.
#[test]
fn a_campaigns_value_is_announced_until_acknowledged() {
    let mut p = consumer_idle();
    p.handle_request(
        at(T0, 1),
        ClientId(1),
        LockRequest::Campaign { name: named("x"), value: "a".into(), timeout_ms: 10_000 },
    );
    drain(&mut p);
    let f = lockservice::fence(4, 1);
    deliver(&mut p, at(T0, 2), n(3), Incarnation(1), Msg::Granted { term: 4, name: election("x"), req: 1, fence: f });
    let outs = deliver(&mut p, at(T0, 3), n(3), Incarnation(1), Msg::RenewAck { term: 4, acks: vec![(f, 1)] });
    let announce = Msg::Announce { term: 4, fence: f, value: "a".into() };
    assert!(outs.iter().any(|o| matches!(o, Output::Send { to, msg } if *to == n(3) && *msg == announce)), "{outs:?}");
    assert!(outs.iter().any(|o| matches!(o, Output::Reply { client: ClientId(1), reply: LockReply::Granted { .. } })));
    // The next renewal tick announces again.
    let tick = p.timers.get(Timer::Renew).unwrap();
    p.handle_timeout(tick);
    let outs = drain(&mut p);
    assert!(outs.iter().any(|o| matches!(o, Output::Send { msg, .. } if *msg == announce)), "{outs:?}");
    deliver(&mut p, tick, n(3), Incarnation(1), Msg::Announced { term: 4, fence: f });
    let tick = p.timers.get(Timer::Renew).unwrap();
    p.handle_timeout(tick);
    let outs = drain(&mut p);
    assert!(!outs.iter().any(|o| matches!(o, Output::Send { msg: Msg::Announce { .. }, .. })), "{outs:?}");
}

/// With no coordinator known nothing is asked, and the observe timer is
/// set ahead, never at or before now: in the past it fired again within
/// the same input for ever (found by the simulator family: a watcher cut
/// off from every coordinator hung its process).
#[test]
fn an_observer_without_a_coordinator_waits_ahead() {
    let mut p = consumer_idle();
    p.handle_request(at(T0, 1), ClientId(7), LockRequest::Observe { name: named("x"), watch: true });
    drain(&mut p);
    p.coordinator = None;
    let later = at(T0, 5_000);
    p.handle_timeout(later);
    assert!(p.timers.get(Timer::ObserveDue).is_some_and(|t| t > later), "{:?}", p.timers.get(Timer::ObserveDue));
}
