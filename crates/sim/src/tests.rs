//! Tests of the simulator itself, driving a toy protocol: every node pings
//! every other node from a 10 ms timer and records what it received.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ftcore::{message_kinds, Context, Outbox, OutputOf, StatusReport, Then};
use serde::{Deserialize, Serialize};

use super::*;

const PERIOD: Duration = Duration::from_millis(10);

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
enum ToyMsg {
    Ping(u64),
}
message_kinds!(ToyMsg { Ping => "ping" });

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
enum ToyReq {
    Count,
}
message_kinds!(ToyReq { Count => "count" });

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
enum ToyReply {
    Count(u64),
}
message_kinds!(ToyReply { Count => "count" });

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ToyEvent {
    Got { from: NodeId, inc: Incarnation, seq: u64 },
    ClientGone(ClientId),
    Unreachable(NodeId),
}

/// Pings every other node every `PERIOD`, one sequence number per tick.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Toy {
    me: NodeId,
    inc: Incarnation,
    n: u32,
    /// The sequence number of the next tick's pings (= ticks so far).
    next_seq: u64,
    /// The first tick is due as soon as the core starts.
    next_tick: Instant,
    received: Vec<(NodeId, Incarnation, u64)>,
    /// Ticks without pinging (for long runs that only exercise timers).
    quiet: bool,
    left: bool,
    out: Outbox<ToyMsg, ToyReply, ToyEvent>,
}

impl Toy {
    fn new(me: NodeId, inc: Incarnation, now: Instant, n: u32) -> Self {
        Toy {
            me,
            inc,
            n,
            next_seq: 0,
            next_tick: now,
            received: Vec::new(),
            quiet: false,
            left: false,
            out: Outbox::default(),
        }
    }

    /// Sequence numbers received from `from`, in arrival order.
    fn seqs_from(&self, from: NodeId) -> Vec<u64> {
        self.received.iter().filter(|(f, _, _)| *f == from).map(|(_, _, s)| *s).collect()
    }
}

impl Protocol for Toy {
    type Msg = ToyMsg;
    type Request = ToyReq;
    type Reply = ToyReply;
    type Event = ToyEvent;
    /// `quiet`: tick without pinging.
    type Config = bool;
    type Durable = ();
    type Error = std::convert::Infallible;

    fn start(ctx: Context<bool, ()>) -> Result<Self, Self::Error> {
        let n = ctx.membership.len() as u32;
        Ok(Toy { quiet: ctx.config, ..Toy::new(ctx.me, ctx.incarnation, ctx.now, n) })
    }

    fn on_message(&mut self, _now: Instant, from: NodeId, inc: Incarnation, msg: ToyMsg) -> Then {
        let ToyMsg::Ping(seq) = msg;
        self.received.push((from, inc, seq));
        self.out.event(ToyEvent::Got { from, inc, seq });
        Then::Done
    }

    fn on_request(&mut self, _now: Instant, client: ClientId, req: ToyReq) -> Then {
        match req {
            ToyReq::Count => self.out.reply(client, ToyReply::Count(self.received.len() as u64)),
        }
        Then::Done
    }

    fn on_client_gone(&mut self, _now: Instant, client: ClientId) -> Then {
        self.out.event(ToyEvent::ClientGone(client));
        Then::Done
    }

    fn on_peer_unreachable(&mut self, _now: Instant, peer: NodeId) -> Then {
        self.out.event(ToyEvent::Unreachable(peer));
        Then::Done
    }

    fn on_link_lost(&mut self, _now: Instant, _peer: NodeId) -> Then {
        // The simulator's links never overflow.
        Then::Done
    }

    fn join_state(&self) -> ftcore::JoinState {
        ftcore::JoinState::Joined
    }

    fn on_timeout(&mut self, now: Instant) -> Then {
        if now < self.next_tick {
            return Then::Done;
        }
        for to in (1..=self.n).map(NodeId).filter(|id| *id != self.me && !self.quiet) {
            self.out.send(to, ToyMsg::Ping(self.next_seq));
        }
        self.next_seq += 1;
        self.next_tick = now + PERIOD;
        Then::Done
    }

    fn on_shutdown(&mut self, _now: Instant) -> Then {
        self.left = true;
        Then::Done
    }

    fn is_left(&self) -> bool {
        self.left
    }

    fn poll_output(&mut self) -> Option<OutputOf<Self>> {
        self.out.pop()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_tick)
    }

    fn incarnation(&self) -> Incarnation {
        self.inc
    }

    fn peer_view(&self, peer: NodeId) -> ftcore::PeerView {
        let heard = self.received.iter().rev().find(|(f, _, _)| *f == peer).map(|(_, inc, _)| *inc);
        ftcore::PeerView { up: heard.is_some(), incarnation: heard.unwrap_or(Incarnation(0)) }
    }

    fn status(&self) -> StatusReport {
        StatusReport {
            daemon: "toy".into(),
            node: self.me,
            incarnation: self.inc,
            role: "pinger".into(),
            peers: Vec::new(),
            details: Vec::new(),
        }
    }
}

fn ms(x: u64) -> Instant {
    Instant::from_millis(x)
}

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn toy_sim(seed: u64, nodes: u32, net: NetConfig) -> Sim<Toy> {
    Sim::new(seed, nodes, net, false)
}

/// A reliable network whose delay is always exactly `d`.
fn fixed(d: Duration) -> NetConfig {
    NetConfig::reliable(d, d)
}

fn toy(sim: &Sim<Toy>, id: NodeId) -> &Toy {
    sim.world().core(id).expect("node is up")
}

/// `(time, receiver, sender, sender's life, seq)` of a delivered ping.
type Delivery = (Instant, NodeId, NodeId, Incarnation, u64);

/// Every ping delivered, in order.
fn deliveries(w: &World<Toy>) -> Vec<Delivery> {
    w.events
        .iter()
        .filter_map(|(t, to, e)| match e {
            ToyEvent::Got { from, inc, seq } => Some((*t, *to, *from, *inc, *seq)),
            ToyEvent::ClientGone(_) | ToyEvent::Unreachable(_) => None,
        })
        .collect()
}

fn all_pairs(nodes: u32) -> impl Iterator<Item = (NodeId, NodeId)> {
    (1..=nodes).flat_map(move |a| (1..=nodes).filter(move |b| *b != a).map(move |b| (n(a), n(b))))
}

// ---- determinism ----

fn traced_run(seed: u64) -> Sim<Toy> {
    let mut sim = toy_sim(seed, 4, NetConfig::reliable(Duration::from_micros(100), Duration::from_millis(25)));
    sim.at(ms(300), Action::Crash(n(2)));
    sim.at(ms(600), Action::Restart(n(2)));
    sim.run_until(ms(1_000)).unwrap();
    sim
}

#[test]
fn same_seed_same_trace_and_hash() {
    let a = traced_run(11);
    let b = traced_run(11);
    assert!(a.trace().len() > 1_000, "{} lines", a.trace().len());
    assert_eq!(a.trace(), b.trace());
    assert_eq!(a.trace_hash(), b.trace_hash());
    assert_eq!(a.steps(), b.steps());
    assert_eq!(deliveries(a.world()), deliveries(b.world()));
}

#[test]
fn different_seeds_give_different_hashes() {
    let hashes: BTreeSet<u64> = (0..8).map(|seed| traced_run(seed).trace_hash()).collect();
    assert_eq!(hashes.len(), 8, "random delays must show in the trace");
}

#[test]
fn tracing_does_not_change_the_run() {
    let kept = traced_run(5);
    let mut lean =
        toy_sim(5, 4, NetConfig::reliable(Duration::from_micros(100), Duration::from_millis(25))).without_trace();
    lean.at(ms(300), Action::Crash(n(2)));
    lean.at(ms(600), Action::Restart(n(2)));
    lean.run_until(ms(1_000)).unwrap();
    assert!(lean.trace().is_empty());
    assert_eq!(lean.steps(), kept.steps());
    assert_eq!(deliveries(lean.world()), deliveries(kept.world()));
}

// ---- process kills ----

/// Who heard that `victim` is gone, and when.
fn heard_gone(w: &World<Toy>, victim: NodeId) -> Vec<(Instant, NodeId)> {
    w.events.iter().filter(|(_, _, e)| *e == ToyEvent::Unreachable(victim)).map(|(t, id, _)| (*t, *id)).collect()
}

#[test]
fn a_killed_process_is_heard_of_by_its_connected_peers_within_a_delay() {
    let mut sim = toy_sim(3, 5, NetConfig::reliable(Duration::from_micros(100), Duration::from_millis(2)));
    // Node 5 is cut off from node 4 (a partition): no connection to break.
    sim.at(ms(100), Action::Partition(vec![n(5)]));
    sim.at(ms(150), Action::Heal);
    sim.at(ms(150), Action::Partition(vec![n(4)]));
    sim.at(ms(200), Action::Pause(n(3)));
    sim.at(ms(300), Action::Kill(n(2)));
    sim.at(ms(400), Action::Resume(n(3)));
    sim.at(ms(500), Action::Crash(n(1)));
    sim.run_until(ms(600)).unwrap();
    let heard = heard_gone(sim.world(), n(2));
    let who: BTreeSet<NodeId> = heard.iter().map(|(_, id)| *id).collect();
    // 4 is partitioned away; 3 was paused and hears it when resumed.
    assert_eq!(who, BTreeSet::from([n(1), n(3), n(5)]), "{heard:?}");
    for (t, id) in &heard {
        let latest = if *id == n(3) { ms(400) } else { ms(302) };
        assert!(*t >= ms(300) && *t <= latest, "{id} heard at {t}");
    }
    assert!(sim.world().core(n(2)).is_none(), "a kill is a crash");
    // A plain crash is silent.
    assert!(heard_gone(sim.world(), n(1)).is_empty());
}

// ---- channels ----

#[test]
fn reliable_channel_is_fifo_per_link_and_loses_nothing() {
    for seed in 0..5 {
        // Delays from 0.1 ms to 80 ms: eight pings per link can be in flight at once.
        let mut sim = toy_sim(seed, 3, NetConfig::reliable(Duration::from_micros(100), Duration::from_millis(80)));
        sim.run_until(ms(2_000)).unwrap();
        for (from, to) in all_pairs(3) {
            let seqs = toy(&sim, to).seqs_from(from);
            let sent = toy(&sim, from).next_seq;
            // In order, no gaps, no duplicates; only the last few may still be in flight.
            assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>(), "seed {seed} {from}->{to}");
            assert!(seqs.len() as u64 + 9 >= sent, "seed {seed} {from}->{to}: {} of {sent}", seqs.len());
        }
    }
}

/// Datagrams in arrival order per link.
fn datagram_run(seed: u64, loss: f64, dup: f64, reorder: bool) -> Sim<Toy> {
    let mut net = NetConfig::datagram(Duration::from_micros(100), Duration::from_millis(40), loss, dup);
    net.reorder = reorder;
    let mut sim = toy_sim(seed, 3, net);
    sim.run_until(ms(10_000)).unwrap();
    sim
}

/// Ticks at the end of a `datagram_run` whose pings may still be in flight
/// (40 ms max delay): seqs `0..next_seq - IN_FLIGHT_TICKS` have all landed.
const IN_FLIGHT_TICKS: u64 = 4;

/// Pings sent by all nodes.
fn sent_total(sim: &Sim<Toy>) -> u64 {
    sim.world().live().map(|(_, c)| c.next_seq * (c.n as u64 - 1)).sum()
}

#[test]
fn datagram_loss_rate_is_about_as_configured() {
    let sim = datagram_run(3, 0.3, 0.0, true);
    let sent = sent_total(&sim);
    assert_eq!(sent, 3 * 2 * 1_001);
    assert_eq!(sim.world().messages_sent(), sent);
    assert_eq!(sim.world().sent_by_kind.get("ping"), Some(&sent));
    // Loss is decided at send time, and every loss is in the trace.
    let lost = sim.trace().iter().filter(|l| l.contains("dropped (lost)")).count() as u64;
    let rate = lost as f64 / sent as f64;
    // 6 006 draws at p = 0.3: one standard deviation is 0.006.
    assert!((0.26..=0.34).contains(&rate), "loss rate {rate}");
    // What was not lost arrived, but for the last few ticks' pings still in flight.
    let received: u64 = sim.world().live().map(|(_, c)| c.received.len() as u64).sum();
    assert!(received + lost <= sent && received + lost + 6 * IN_FLIGHT_TICKS >= sent, "{received} + {lost} of {sent}");
    // Nothing arrives twice without duplication.
    for (from, to) in all_pairs(3) {
        let seqs = toy(&sim, to).seqs_from(from);
        assert_eq!(seqs.iter().collect::<BTreeSet<_>>().len(), seqs.len(), "{from}->{to}");
    }
}

#[test]
fn no_loss_means_every_datagram_arrives() {
    let sim = datagram_run(4, 0.0, 0.0, true);
    for (from, to) in all_pairs(3) {
        let landed = toy(&sim, from).next_seq - IN_FLIGHT_TICKS;
        let mut seqs = toy(&sim, to).seqs_from(from);
        seqs.sort_unstable();
        seqs.retain(|s| *s < landed);
        assert_eq!(seqs, (0..landed).collect::<Vec<_>>(), "{from}->{to}");
    }
}

#[test]
fn datagram_duplication_delivers_copies() {
    let sim = datagram_run(5, 0.0, 0.5, true);
    let mut twice = 0u64;
    let mut landed_total = 0u64;
    for (from, to) in all_pairs(3) {
        let seqs = toy(&sim, to).seqs_from(from);
        let landed = toy(&sim, from).next_seq - IN_FLIGHT_TICKS;
        landed_total += landed;
        for s in 0..landed {
            match seqs.iter().filter(|x| **x == s).count() {
                1 => {}
                2 => twice += 1,
                k => panic!("{from}->{to} seq {s} arrived {k} times"),
            }
        }
    }
    let rate = twice as f64 / landed_total as f64;
    assert!((0.45..=0.55).contains(&rate), "duplication rate {rate}");
}

fn out_of_order_arrivals(sim: &Sim<Toy>) -> usize {
    all_pairs(3).map(|(from, to)| toy(sim, to).seqs_from(from).windows(2).filter(|w| w[1] < w[0]).count()).sum()
}

#[test]
fn datagrams_reorder_only_when_allowed() {
    let reordered = datagram_run(6, 0.0, 0.0, true);
    assert!(out_of_order_arrivals(&reordered) > 100, "{}", out_of_order_arrivals(&reordered));
    let fifo = datagram_run(6, 0.1, 0.2, false);
    assert_eq!(out_of_order_arrivals(&fifo), 0);
}

// ---- crash and restart ----

#[test]
fn crashed_node_receives_nothing_and_its_timers_stop() {
    let mut sim = toy_sim(1, 3, NetConfig::reliable(Duration::from_millis(1), Duration::from_millis(5)));
    sim.at(ms(1_000), Action::Crash(n(3)));
    sim.run_until(ms(2_000)).unwrap();
    let w = sim.world();
    assert!(!w.is_up(n(3)));
    assert!(w.core(n(3)).is_none());
    assert_eq!(w.live().map(|(id, _)| id).collect::<Vec<_>>(), vec![n(1), n(2)]);
    assert_eq!(w.slots[2].incarnation, Incarnation(1));
    // Nothing delivered to it, no event from it, no timer of it after the crash.
    assert!(w.events.iter().all(|(t, id, _)| *id != n(3) || *t < ms(1_000)));
    // Ticks at 0, 10, …, 990 ms: at 1 000 ms the crash comes first.
    assert_eq!(sim.trace().iter().filter(|l| l.ends_with("n3 timeout")).count(), 100);
    assert_eq!(toy(&sim, n(1)).seqs_from(n(3)).len(), 100);
    // Nodes 1 and 2 tick 101 times from 1 000 to 2 000 ms; every ping to 3 is refused.
    let refused = sim.trace().iter().filter(|l| l.contains("->n3 dropped (receiver down)")).count();
    assert_eq!(refused, 202);
    // The others go on pinging each other.
    assert!(toy(&sim, n(1)).seqs_from(n(2)).len() >= 195);
}

#[test]
fn messages_in_flight_from_a_crashed_node_still_arrive() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(5)));
    // Node 3 pings at 1 000 ms (seq 100); they land at 1 005 ms.
    sim.at(ms(1_002), Action::Crash(n(3)));
    sim.run_until(ms(1_500)).unwrap();
    for to in [n(1), n(2)] {
        let from3: Vec<_> =
            deliveries(sim.world()).into_iter().filter(|d| d.1 == to && d.2 == n(3)).map(|d| (d.0, d.4)).collect();
        assert_eq!(from3.last(), Some(&(ms(1_005), 100)), "{to}");
        assert_eq!(from3.len(), 101);
    }
}

#[test]
fn restart_is_a_new_incarnation_seen_by_receivers() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(5)));
    sim.at(ms(1_002), Action::Crash(n(3)));
    sim.at(ms(1_500), Action::Restart(n(3)));
    sim.run_until(ms(2_000)).unwrap();
    let w = sim.world();
    let slot = &w.slots[2];
    assert_eq!(slot.starts, 2);
    assert!(slot.incarnation > Incarnation(1), "{}", slot.incarnation);
    let new_inc = slot.incarnation;
    let core = toy(&sim, n(3));
    assert_eq!(core.inc, new_inc);
    // A fresh core: it starts over, ticking at once.
    assert_eq!(core.next_seq, 51, "ticks at 1 500, 1 510, …, 2 000 ms");
    // Receivers see the old life up to the crash, then the new life from seq 0.
    let from3: Vec<_> = deliveries(w).into_iter().filter(|d| d.1 == n(1) && d.2 == n(3)).collect();
    let (old, new): (Vec<Delivery>, Vec<Delivery>) = from3.into_iter().partition(|d| d.3 == Incarnation(1));
    assert_eq!(old.len(), 101);
    assert!(old.iter().all(|d| d.0 <= ms(1_005)));
    assert_eq!(new.first().map(|d| (d.0, d.3, d.4)), Some((ms(1_505), new_inc, 0)));
    assert!(new.iter().all(|d| d.3 == new_inc));
    assert_eq!(new.iter().map(|d| d.4).collect::<Vec<_>>(), (0..50).collect::<Vec<_>>());
    // A second crash and restart goes higher still.
    sim.at(ms(2_100), Action::Crash(n(3)));
    sim.at(ms(2_200), Action::Restart(n(3)));
    sim.run_until(ms(2_300)).unwrap();
    assert!(sim.world().slots[2].incarnation > new_inc);
    assert_eq!(sim.world().slots[2].starts, 3);
}

#[test]
fn reliable_messages_in_flight_to_a_restarted_node_are_dropped() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(5)));
    // Nodes 1 and 2 ping 3 at 1 000 ms; 3 is a new process when they land at 1 005 ms.
    sim.at(ms(1_001), Action::Crash(n(3)));
    sim.at(ms(1_003), Action::Restart(n(3)));
    sim.run_until(ms(1_100)).unwrap();
    let restarted = sim.trace().iter().filter(|l| l.contains("->n3 lost (receiver restarted)")).count();
    assert_eq!(restarted, 2);
    let core = toy(&sim, n(3));
    // The first pings the new life gets were sent after it started.
    assert_eq!(core.seqs_from(n(1)), (101..=109).collect::<Vec<_>>());
    assert_eq!(core.seqs_from(n(2)), (101..=109).collect::<Vec<_>>());
}

#[test]
fn datagrams_in_flight_to_a_restarted_node_are_delivered() {
    let mut sim = toy_sim(1, 3, NetConfig::datagram(Duration::from_millis(5), Duration::from_millis(5), 0.0, 0.0));
    sim.at(ms(1_001), Action::Crash(n(3)));
    sim.at(ms(1_003), Action::Restart(n(3)));
    sim.run_until(ms(1_100)).unwrap();
    assert_eq!(toy(&sim, n(3)).seqs_from(n(1)), (100..=109).collect::<Vec<_>>());
}

#[test]
fn crash_of_a_down_node_and_restart_of_an_up_node_do_nothing() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(1)));
    sim.at(ms(100), Action::Restart(n(1)));
    sim.at(ms(200), Action::Crash(n(2)));
    sim.at(ms(300), Action::Crash(n(2)));
    sim.run_until(ms(400)).unwrap();
    let w = sim.world();
    assert_eq!((w.slots[0].starts, w.slots[0].incarnation), (1, Incarnation(1)));
    assert_eq!(toy(&sim, n(1)).next_seq, 41, "node 1 was never replaced");
    assert_eq!(sim.trace().iter().filter(|l| l.contains("CRASH")).count(), 1);
    assert_eq!(sim.trace().iter().filter(|l| l.contains("RESTART")).count(), 0);
}

// ---- partitions ----

#[test]
fn partition_cuts_both_ways_and_heal_restores() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(1)));
    sim.at(ms(1_000), Action::Partition(vec![n(1)]));
    sim.at(ms(2_000), Action::Heal);
    sim.run_until(ms(3_000)).unwrap();
    let d = deliveries(sim.world());
    let across = |x: &Delivery| (x.1 == n(1)) != (x.2 == n(1));
    let in_window = |x: &Delivery| x.0 >= ms(1_000) && x.0 <= ms(2_000);
    assert!(!d.iter().any(|x| across(x) && in_window(x)), "nothing crosses the cut");
    // Both directions were tried and dropped at send time.
    let dropped = |from: u32, to: u32| {
        sim.trace().iter().filter(|l| l.contains(&format!("n{from}->n{to} dropped (partitioned)"))).count()
    };
    for (from, to) in [(1, 2), (1, 3), (2, 1), (3, 1)] {
        assert_eq!(dropped(from, to), 100, "n{from}->n{to}");
    }
    assert_eq!(dropped(2, 3), 0);
    // The majority side kept talking.
    assert_eq!(d.iter().filter(|x| x.1 == n(2) && x.2 == n(3) && in_window(x)).count(), 100);
    // After the heal, pings cross again in both directions.
    for (from, to) in all_pairs(3) {
        assert!(d.iter().any(|x| x.2 == from && x.1 == to && x.0 == ms(2_001)), "{from}->{to} after heal");
    }
}

#[test]
fn a_partition_loses_reliable_messages_already_in_flight_across_it() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(5)));
    // Pings sent at 1 000 ms are in flight when the cut comes at 1 002 ms.
    sim.at(ms(1_002), Action::Partition(vec![n(3)]));
    sim.run_until(ms(1_050)).unwrap();
    let lost = sim.trace().iter().filter(|l| l.contains("lost (partitioned)")).count();
    assert_eq!(lost, 4, "1->3, 2->3, 3->1, 3->2 at 1 005 ms");
    assert_eq!(toy(&sim, n(3)).seqs_from(n(1)).last(), Some(&99));
}

// ---- clients ----

#[test]
fn requests_reach_the_core_and_replies_are_recorded() {
    let mut sim = toy_sim(9, 3, NetConfig::reliable(Duration::from_millis(1), Duration::from_millis(3)));
    sim.at(ms(505), Action::Request(n(1), ClientId(7), ToyReq::Count));
    sim.at(ms(600), Action::ClientGone(n(2), ClientId(8)));
    sim.at(ms(700), Action::Crash(n(3)));
    sim.at(ms(800), Action::Request(n(3), ClientId(9), ToyReq::Count));
    sim.at(ms(800), Action::ClientGone(n(3), ClientId(9)));
    sim.at(ms(900), Action::Shutdown(n(2)));
    sim.run_until(ms(1_000)).unwrap();
    let w = sim.world();
    // The count is what node 1 had received by then (actions come before deliveries due at the same instant).
    let by_then = deliveries(w).iter().filter(|d| d.1 == n(1) && d.0 < ms(505)).count() as u64;
    assert!(by_then > 90);
    assert_eq!(w.replies, vec![(ms(505), n(1), ClientId(7), ToyReply::Count(by_then))]);
    let gone: Vec<_> = w.events.iter().filter(|e| matches!(e.2, ToyEvent::ClientGone(_))).cloned().collect();
    assert_eq!(gone, vec![(ms(600), n(2), ToyEvent::ClientGone(ClientId(8)))]);
    assert!(toy(&sim, n(2)).is_left());
    assert!(!toy(&sim, n(1)).is_left());
}

// ---- failures and seeds ----

#[test]
fn a_failing_checker_stops_the_run_with_a_reproducible_error() {
    let mut sim = toy_sim(42, 3, NetConfig::reliable(Duration::from_millis(1), Duration::from_millis(3)));
    let mut calls = 0u64;
    sim.check(move |w| {
        calls += 1;
        match w.step_events().iter().find(|(_, _, e)| matches!(e, ToyEvent::Got { seq: 30, .. })) {
            Some((t, id, _)) => Err(format!("{id} got seq 30 at {t} after {calls} checks")),
            None => Ok(()),
        }
    });
    let err = sim.run_until(ms(10_000)).unwrap_err();
    assert_eq!(err.seed, 42);
    // Seq 30 is sent at 300 ms and arrives 1-3 ms later.
    assert!(err.at > ms(300) && err.at <= ms(303), "{}", err.at);
    assert_eq!(sim.now(), err.at, "the run stopped at the failure");
    assert!(err.message.contains("got seq 30"), "{}", err.message);
    assert_eq!(err.trace_tail.len(), 40);
    assert_eq!(err.trace_tail.last(), sim.trace().last());
    let shown = err.to_string();
    assert!(shown.contains("seed 42"), "{shown}");
    assert!(shown.contains(&err.message), "{shown}");
    assert!(shown.contains(err.trace_tail.last().unwrap()), "{shown}");
}

#[test]
fn for_seeds_panics_naming_the_first_failing_seed() {
    if std::env::var_os("SIM_SEED").is_some() || std::env::var_os("SIM_SEEDS").is_some() {
        return; // the environment chooses the seeds
    }
    let mut ran = Vec::new();
    let result = catch_unwind(AssertUnwindSafe(|| {
        for_seeds(10, |seed| {
            ran.push(seed);
            let mut sim = toy_sim(seed, 2, fixed(Duration::from_millis(1)));
            sim.check(move |w| if seed >= 3 && w.now >= ms(50) { Err("boom".into()) } else { Ok(()) });
            sim.run_until(ms(100))
        })
    }));
    let payload = result.expect_err("seed 3 fails");
    let msg = payload.downcast_ref::<String>().expect("a formatted panic");
    assert!(msg.contains("seed 3 "), "{msg}");
    assert!(msg.contains("SIM_SEED=3"), "{msg}");
    assert!(msg.contains("boom"), "{msg}");
    assert_eq!(ran, vec![0, 1, 2, 3], "stops at the first failure");
}

#[test]
#[should_panic(expected = "seed 3")]
fn for_seeds_panic_message_names_the_seed() {
    for_seeds(5, |seed| {
        let mut sim = toy_sim(seed, 2, fixed(Duration::from_millis(1)));
        sim.check(move |_| if seed == 3 { Err("seed-dependent failure".into()) } else { Ok(()) });
        sim.run_until(ms(20))
    });
}

// ---- fault plans ----

#[test]
fn fault_plans_respect_max_down_and_restart_every_crash() {
    for seed in 0..400u64 {
        let mut rng = SeededRng::new(seed);
        let nodes = 2 + (seed % 7) as u32;
        let plan = FaultPlan {
            crashes: (seed % 11) as u32,
            max_down: 1 + (seed % 3) as u32,
            restart: seed % 4 != 0,
            partitions: (seed % 3) as u32,
            ..FaultPlan::default()
        };
        let schedule = plan.generate::<Toy>(&mut rng, nodes);
        let ctx = format!("seed {seed}, {nodes} nodes, {plan:?}");
        assert!(schedule.windows(2).all(|w| w[0].0 <= w[1].0), "{ctx}: not in time order");
        let mut down: BTreeSet<NodeId> = BTreeSet::new();
        let (mut crashes, mut restarts, mut partitions, mut heals) = (0, 0, 0, 0);
        for (t, action) in &schedule {
            match action {
                Action::Crash(id) => {
                    assert!(*t >= plan.start && *t <= plan.end, "{ctx}: crash at {t}");
                    assert!(down.insert(*id), "{ctx}: {id} crashed while down at {t}");
                    assert!(down.len() as u32 <= plan.max_down, "{ctx}: {down:?} down at {t}");
                    assert!((down.len() as u32) < nodes, "{ctx}: everyone down at {t}");
                    crashes += 1;
                }
                Action::Restart(id) => {
                    assert!(plan.restart, "{ctx}: restart without restarts");
                    assert!(down.remove(id), "{ctx}: {id} restarted while up at {t}");
                    restarts += 1;
                }
                Action::Partition(side) => {
                    assert!(*t >= plan.start && *t <= plan.end, "{ctx}: partition at {t}");
                    assert!(!side.is_empty() && side.len() as u32 <= (nodes / 2).max(1), "{ctx}: {side:?}");
                    assert!(side.iter().all(|id| (1..=nodes).contains(&id.0)), "{ctx}: {side:?}");
                    partitions += 1;
                }
                Action::Heal => heals += 1,
                other => panic!("{ctx}: unexpected {other:?}"),
            }
        }
        assert!(crashes <= plan.crashes, "{ctx}");
        assert_eq!((partitions, heals), (plan.partitions, plan.partitions), "{ctx}");
        if plan.restart {
            assert_eq!(restarts, crashes, "{ctx}");
            assert!(down.is_empty(), "{ctx}: {down:?} never restarted");
        } else {
            assert_eq!(restarts, 0, "{ctx}");
        }
    }
}

#[test]
fn fault_plans_with_room_crash_as_often_as_asked() {
    // With max_down = nodes - 1, three crashes always fit, however long the downtimes.
    for seed in 0..100 {
        let plan = FaultPlan { crashes: 3, max_down: 4, ..FaultPlan::default() };
        let schedule = plan.generate::<Toy>(&mut SeededRng::new(seed), 5);
        assert_eq!(schedule.iter().filter(|(_, a)| matches!(a, Action::Crash(_))).count(), 3, "seed {seed}");
    }
}

#[test]
fn random_faults_run_in_the_simulator() {
    let mut sim = toy_sim(3, 5, NetConfig::reliable(Duration::from_millis(1), Duration::from_millis(5)));
    let plan = FaultPlan { crashes: 4, max_down: 2, partitions: 2, ..FaultPlan::default() };
    let max_down = plan.max_down as usize;
    sim.random_faults(&plan);
    sim.check(move |w| {
        let down = w.slots.iter().filter(|s| s.core.is_none()).count();
        if down > max_down {
            Err(format!("{down} nodes down"))
        } else {
            Ok(())
        }
    });
    sim.run_until(ms(10_000)).unwrap();
    assert!(sim.world().slots.iter().all(|s| s.core.is_some()), "every crash was followed by a restart");
    let crashes = sim.trace().iter().filter(|l| l.ends_with("CRASH")).count();
    let restarts = sim.trace().iter().filter(|l| l.contains("RESTART as")).count();
    assert!(crashes > 0);
    assert_eq!(crashes, restarts);
    assert_eq!(sim.world().slots.iter().map(|s| s.starts as usize - 1).sum::<usize>(), restarts);
}

// ---- virtual time ----

#[test]
fn an_hour_of_virtual_time_takes_exactly_the_expected_steps() {
    let mut sim = Sim::<Toy>::new(1, 3, fixed(Duration::from_millis(1)), true).without_trace();
    let hour = ms(3_600_000);
    sim.run_until(hour).unwrap();
    assert_eq!(sim.now(), hour);
    // Ticks at 0, 10 ms, …, 1 h: 360 001 per node, one step each; time
    // jumps from one tick to the next.
    let ticks = 360_001u64;
    for (_, core) in sim.world().live() {
        assert_eq!(core.next_seq, ticks);
    }
    assert_eq!(sim.steps(), 3 * ticks);
    assert!(sim.trace().is_empty());
}

#[test]
fn a_minute_of_pinging_takes_exactly_the_expected_steps() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(1))).without_trace();
    sim.run_until(ms(60_000)).unwrap();
    let ticks = 6_001u64;
    // Each tick sends two pings; those of the last tick land after the minute.
    let deliveries = 3 * 2 * (ticks - 1);
    assert_eq!(sim.steps(), 3 * ticks + deliveries);
    assert_eq!(sim.world().events.len() as u64, deliveries);
    assert_eq!(sim.world().messages_sent(), 3 * 2 * ticks);
}

// ---- what the new fault kinds must not change ----

/// Traces of `FaultPlan`s without the kinds added later, recorded before
/// they were added: those kinds draw nothing when their counts are zero.
#[test]
fn plans_without_the_new_kinds_give_the_traces_they_always_gave() {
    for (seed, nodes, hash, lines) in [
        (1u64, 5u32, 0x504e_3071_6747_4e05u64, 21_901usize),
        (2, 4, 0x23c9_0aed_40a1_5f34, 13_693),
        (3, 7, 0xee07_a354_e110_8e83, 43_286),
    ] {
        let mut sim = toy_sim(seed, nodes, NetConfig::reliable(Duration::from_micros(100), Duration::from_millis(25)));
        sim.random_faults(&FaultPlan { crashes: 4, max_down: 2, partitions: 2, ..FaultPlan::default() });
        sim.run_until(ms(6_000)).unwrap();
        assert_eq!((sim.trace_hash(), sim.trace().len()), (hash, lines), "seed {seed}");
    }
}

// ---- pauses ----

/// Trace lines containing `needle`.
fn lines_of(sim: &Sim<Toy>, needle: &str) -> Vec<String> {
    sim.trace().iter().filter(|l| l.contains(needle)).cloned().collect()
}

#[test]
fn a_paused_node_queues_its_inputs_and_on_resume_fires_overdue_timers_then_replays_them_in_order() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(5)));
    // Node 3 ticked at 1 000 ms (seq 100); its pings and those to it are in flight.
    sim.at(ms(1_002), Action::Pause(n(3)));
    sim.at(ms(1_200), Action::Request(n(3), ClientId(7), ToyReq::Count));
    sim.at(ms(1_502), Action::Resume(n(3)));
    sim.check(|w| {
        let paused_did_something = w.step_events().iter().any(|(_, id, _)| w.is_paused(*id));
        if paused_did_something {
            Err("a paused node handled an input".into())
        } else {
            Ok(())
        }
    });
    sim.run_until(ms(1_000)).unwrap();
    assert!(sim.world().timely_for(Duration::from_secs(5)), "timely from the start until disturbed");
    sim.run_until(ms(1_400)).unwrap();
    assert!(!sim.world().timely_for(Duration::ZERO));
    assert!(sim.world().is_paused(n(3)));
    assert!(sim.world().is_up(n(3)), "paused is not down");
    assert_eq!(sim.world().timely_since, None);
    assert_eq!(toy(&sim, n(3)).next_seq, 101, "no timer fired while paused");
    sim.run_until(ms(2_000)).unwrap();
    let w = sim.world();
    assert!(!w.is_paused(n(3)));
    assert_eq!(w.timely_since, Some(ms(1_502)));
    assert!(w.timely_for(Duration::from_millis(498)) && !w.timely_for(Duration::from_millis(499)));
    // It sent nothing while paused: 1 gets seq 100 at 1 005 ms, then 101 — sent on resume.
    let from3: Vec<_> = deliveries(w).into_iter().filter(|d| d.1 == n(1) && d.2 == n(3)).map(|d| (d.0, d.4)).collect();
    let i = from3.iter().position(|d| d.1 == 100).unwrap();
    assert_eq!(&from3[i..i + 2], &[(ms(1_005), 100), (ms(1_507), 101)]);
    // On resume: the overdue timer first (its clock ran on: the next tick
    // is 10 ms after the resume), then the 100 queued pings and the request
    // in arrival order, all at 1 502 ms.
    let trace: Vec<&String> = sim.trace().iter().filter(|l| l.starts_with("1.502000s")).collect();
    assert_eq!(trace[0], "1.502000s n3 RESUME (101 queued)");
    assert_eq!(trace[1], "1.502000s n3 timeout (overdue)");
    let replayed: Vec<&&String> = trace.iter().filter(|l| l.ends_with("(queued)")).collect();
    assert_eq!(replayed.len(), 100);
    assert!(replayed.iter().all(|l| l.contains("->n3 ")));
    let core = toy(&sim, n(3));
    for from in [n(1), n(2)] {
        // Nothing lost, in order: seqs 100..=149 arrived while paused.
        assert_eq!(core.seqs_from(from), (0..core.seqs_from(from).len() as u64).collect::<Vec<_>>());
    }
    // The request was queued behind the 240 pings that arrived before it
    // (200 before the pause, 20 from each node between 1 005 and 1 195 ms).
    let replies = &sim.world().replies;
    assert_eq!(replies, &vec![(ms(1_502), n(3), ClientId(7), ToyReply::Count(240))]);
    assert_eq!(lines_of(&sim, "n3 <- queued (paused) c7").len(), 1);
}

#[test]
fn crash_of_a_paused_node_discards_its_queue_and_resume_after_it_does_nothing() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(5)));
    sim.at(ms(1_002), Action::Pause(n(3)));
    sim.at(ms(1_100), Action::Crash(n(3)));
    sim.at(ms(1_150), Action::Resume(n(3)));
    sim.at(ms(1_200), Action::Restart(n(3)));
    sim.run_until(ms(1_300)).unwrap();
    assert_eq!(lines_of(&sim, "n3 lost 20 queued inputs").len(), 1, "10 ticks' pings from 1 and 2");
    assert!(lines_of(&sim, "RESUME").is_empty());
    let core = toy(&sim, n(3));
    assert!(core.received.iter().all(|(_, _, seq)| *seq >= 120), "the new life got only new pings");
    assert!(!sim.world().is_paused(n(3)));
}

#[test]
fn pausing_a_paused_or_down_node_does_nothing() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(1)));
    sim.at(ms(100), Action::Pause(n(1)));
    sim.at(ms(150), Action::Pause(n(1)));
    sim.at(ms(200), Action::Resume(n(1)));
    sim.at(ms(300), Action::Crash(n(2)));
    sim.at(ms(310), Action::Pause(n(2)));
    sim.at(ms(320), Action::Restart(n(2)));
    sim.run_until(ms(400)).unwrap();
    assert_eq!(lines_of(&sim, "PAUSE").len(), 1);
    assert!(!sim.world().is_paused(n(2)));
    assert_eq!(toy(&sim, n(2)).next_seq, 9, "the new life ticks from 320 ms");
}

// ---- per-link tools ----

#[test]
fn hold_sets_a_link_aside_and_release_delivers_in_order() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(5)));
    sim.run_until(ms(1_002)).unwrap();
    sim.hold(n(1), n(2));
    sim.run_until(ms(1_100)).unwrap();
    assert_eq!(toy(&sim, n(2)).seqs_from(n(1)).last(), Some(&99), "nothing delivered while held");
    assert_eq!(sim.world().timely_since, None);
    sim.release(n(1), n(2));
    sim.run_until(ms(1_200)).unwrap();
    let d: Vec<(Instant, u64)> =
        deliveries(sim.world()).into_iter().filter(|d| d.1 == n(2) && d.2 == n(1)).map(|d| (d.0, d.4)).collect();
    let i = d.iter().position(|x| x.1 == 100).unwrap();
    // The ten held pings (sent 1 000 … 1 090 ms) land at the release, in
    // order; then the link is normal again.
    let held: Vec<_> = (100..110).map(|s| (ms(1_100), s)).collect();
    assert_eq!(&d[i..i + 10], &held[..]);
    assert_eq!(d[i + 10], (ms(1_105), 110));
    assert_eq!(toy(&sim, n(2)).seqs_from(n(1)), (0..=119).collect::<Vec<_>>());
    // One direction only.
    assert_eq!(toy(&sim, n(1)).seqs_from(n(2)), (0..=119).collect::<Vec<_>>());
    assert_eq!(sim.world().timely_since, Some(ms(1_100)));
}

#[test]
fn a_cut_link_loses_what_is_sent_and_in_flight_one_way_until_mended() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(5)));
    sim.at(ms(1_002), Action::Cut(n(1), n(3)));
    sim.at(ms(1_502), Action::Uncut(n(1), n(3)));
    sim.run_until(ms(2_000)).unwrap();
    assert_eq!(lines_of(&sim, "n1->n3 lost (cut)").len(), 1, "seq 100, in flight");
    assert_eq!(lines_of(&sim, "n1->n3 dropped (cut)").len(), 50, "1 010 … 1 500 ms");
    let got = toy(&sim, n(3)).seqs_from(n(1));
    let expect: Vec<u64> = (0..=99).chain(151..=199).collect();
    assert_eq!(got, expect);
    assert_eq!(toy(&sim, n(1)).seqs_from(n(3)), (0..=199).collect::<Vec<_>>(), "3 -> 1 was never cut");
}

#[test]
fn a_held_reliable_link_that_is_cut_loses_what_it_held() {
    let mut sim = toy_sim(1, 2, fixed(Duration::from_millis(5)));
    sim.run_until(ms(1_002)).unwrap();
    sim.hold(n(1), n(2));
    sim.run_until(ms(1_050)).unwrap();
    sim.cut(n(1), n(2));
    sim.uncut(n(1), n(2));
    sim.release(n(1), n(2));
    sim.run_until(ms(1_100)).unwrap();
    assert_eq!(lines_of(&sim, "n1->n2 RELEASE (0 held)").len(), 1);
    let got = toy(&sim, n(2)).seqs_from(n(1));
    assert_eq!(got, (0..=99).chain(105..=109).collect::<Vec<_>>());
}

#[test]
fn drop_kind_drops_the_next_messages_of_that_kind_on_that_link() {
    let mut sim = toy_sim(1, 3, fixed(Duration::from_millis(5)));
    sim.run_until(ms(1_001)).unwrap();
    sim.drop_kind(n(1), n(2), "ping", 3);
    sim.drop_kind(n(1), n(3), "pong", 3);
    sim.run_until(ms(1_200)).unwrap();
    assert_eq!(lines_of(&sim, "dropped (scripted drop)").len(), 3);
    let expect: Vec<u64> = (0..=100).chain(104..=119).collect();
    assert_eq!(toy(&sim, n(2)).seqs_from(n(1)), expect);
    assert_eq!(toy(&sim, n(3)).seqs_from(n(1)), (0..=119).collect::<Vec<_>>(), "no such kind");
    assert_eq!(toy(&sim, n(1)).seqs_from(n(2)), (0..=119).collect::<Vec<_>>(), "other direction");
}

#[test]
fn slow_links_delay_beyond_the_configured_range_and_stay_fifo() {
    let mut sim = toy_sim(4, 3, fixed(Duration::from_millis(1)));
    let all: Vec<Link> = all_pairs(3).collect();
    let extra = Duration::from_millis(50);
    sim.at(ms(1_000), Action::Slow(all.clone(), extra));
    sim.at(ms(2_000), Action::Unslow(all, extra));
    sim.run_until(ms(1_500)).unwrap();
    assert_eq!(sim.world().timely_since, None);
    sim.run_until(ms(3_000)).unwrap();
    let timely = sim.world().timely_since.expect("timely again");
    assert!(timely > ms(2_000) && timely <= ms(2_051), "once the slowed messages landed: {timely}");
    let d = deliveries(sim.world());
    // Seq s is sent at 10·s ms.
    let late = d.iter().filter(|x| x.0 > ms(10 * x.4 + 1)).count();
    assert!(late > 400, "{late} late of {}", d.len());
    assert!(d.iter().all(|x| x.0 <= ms(10 * x.4 + 51)));
    assert!(d.iter().filter(|x| x.4 >= 210).all(|x| x.0 == ms(10 * x.4 + 1)), "normal after the slow period");
    for (from, to) in all_pairs(3) {
        assert_eq!(toy(&sim, to).seqs_from(from), (0..=299).collect::<Vec<_>>(), "{from}->{to} in order");
    }
}

// ---- converge ----

#[test]
fn converge_cancels_faults_heals_resumes_and_restarts_everyone() {
    let mut sim = toy_sim(2, 4, NetConfig::reliable(Duration::from_millis(1), Duration::from_millis(3)));
    sim.at(ms(100), Action::Crash(n(1)));
    sim.at(ms(100), Action::Pause(n(2)));
    sim.at(ms(100), Action::Partition(vec![n(3)]));
    sim.at(ms(100), Action::Cut(n(4), n(2)));
    sim.at(ms(100), Action::Hold(n(4), n(1)));
    sim.at(ms(100), Action::Slow(vec![(n(4), n(3))], Duration::from_millis(500)));
    sim.at(ms(100), Action::DropKind(n(2), n(4), "ping", 1_000));
    // Faults still to come, and a client request.
    sim.at(ms(700), Action::Crash(n(4)));
    sim.at(ms(700), Action::ClientGone(n(4), ClientId(1)));
    sim.at(ms(700), Action::Request(n(4), ClientId(2), ToyReq::Count));
    sim.run_until(ms(500)).unwrap();
    sim.converge(Duration::from_millis(500)).unwrap();
    let w = sim.world();
    assert_eq!(w.now, ms(1_000));
    assert!(w.slots.iter().all(|s| s.core.is_some() && !s.paused));
    assert_eq!(w.slots.iter().map(|s| s.starts).collect::<Vec<_>>(), vec![2, 1, 1, 1], "only 1 was down");
    assert_eq!(w.timely_since, Some(ms(500)));
    assert!(lines_of(&sim, "n4 CRASH").is_empty(), "scheduled faults were cancelled");
    assert!(!w.events.iter().any(|e| matches!(e.2, ToyEvent::ClientGone(_))));
    assert_eq!(w.replies.len(), 1, "the request stayed");
    // Every link carries pings again.
    for (from, to) in all_pairs(4) {
        assert!(deliveries(w).iter().any(|d| d.2 == from && d.1 == to && d.0 > ms(600)), "{from}->{to}");
    }
}

// ---- fault plans with every kind ----

fn everything_plan() -> FaultPlan {
    let clients = (1..=5).map(|i| (n(i), ClientId(u64::from(i)))).collect();
    FaultPlan::everything(5).with_clients(clients)
}

#[test]
fn the_everything_plan_mixes_every_fault_kind() {
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for seed in 0..300 {
        let schedule = everything_plan().generate::<Toy>(&mut SeededRng::new(seed), 5);
        assert!(schedule.windows(2).all(|w| w[0].0 <= w[1].0), "seed {seed}: time order");
        let count = |f: fn(&Action<Toy>) -> bool| schedule.iter().filter(|(_, a)| f(a)).count();
        assert_eq!(count(|a| matches!(a, Action::Pause(_))), count(|a| matches!(a, Action::Resume(_))));
        assert_eq!(count(|a| matches!(a, Action::Slow(..))), count(|a| matches!(a, Action::Unslow(..))));
        assert_eq!(count(|a| matches!(a, Action::Crash(_))), count(|a| matches!(a, Action::Restart(_))));
        // A majority goes down at one instant.
        let mut at: BTreeMap<Instant, usize> = BTreeMap::new();
        for (t, a) in &schedule {
            if matches!(a, Action::Crash(_)) {
                *at.entry(*t).or_default() += 1;
            }
        }
        assert!(at.values().any(|c| *c >= 3), "seed {seed}: no majority down");
        // But never everyone: the cluster never restarts cold.
        let mut down = BTreeSet::new();
        for (t, a) in &schedule {
            match a {
                Action::Crash(id) => {
                    down.insert(*id);
                }
                Action::Restart(id) => {
                    down.remove(id);
                }
                _ => {}
            }
            assert!(down.len() < 5, "seed {seed}: everyone down at {t}");
        }
        for (_, a) in &schedule {
            let k = match a {
                Action::Crash(_) => "crash",
                Action::Restart(_) => "restart",
                Action::Partition(_) => "partition",
                Action::Heal => "heal",
                Action::Pause(_) => "pause",
                Action::Resume(_) => "resume",
                Action::Slow(..) => "slow",
                Action::Unslow(..) => "unslow",
                Action::ClientGone(..) => "client gone",
                other => panic!("unexpected {other:?}"),
            };
            *kinds.entry(k).or_default() += 1;
        }
    }
    assert_eq!(kinds.len(), 9, "{kinds:?}");
}

fn everything_run(seed: u64) -> Sim<Toy> {
    let mut sim = toy_sim(seed, 5, NetConfig::reliable(Duration::from_micros(100), Duration::from_millis(5)));
    sim.random_faults(&everything_plan());
    sim.run_until(ms(5_000)).unwrap();
    sim.converge(Duration::from_secs(1)).unwrap();
    sim
}

#[test]
fn same_seed_same_trace_with_every_fault_kind() {
    let a = everything_run(21);
    let b = everything_run(21);
    assert_eq!(a.trace(), b.trace());
    assert_eq!(a.trace_hash(), b.trace_hash());
    for kind in ["PAUSE", "RESUME", "SLOW", "PARTITION", "CRASH", "gone", "CONVERGE"] {
        assert!(a.trace().iter().any(|l| l.contains(kind)), "no {kind} in the trace");
    }
    let hashes: BTreeSet<u64> = (0..6).map(|s| everything_run(s).trace_hash()).collect();
    assert_eq!(hashes.len(), 6);
    // After converging, everyone is up, running and pinging everyone.
    assert!(a.world().slots.iter().all(|s| s.core.is_some() && !s.paused));
}

// ---- seeds ----

#[test]
fn seed_plans_run_regressions_first_then_the_shifted_range() {
    let plan = |only, count, from| SeedPlan { only, count, from, keep_going: false };
    assert_eq!(plan(None, None, 0).seeds(&[], 3), vec![0, 1, 2]);
    assert_eq!(plan(None, None, 0).seeds(&[77, 1], 3), vec![77, 1, 0, 2], "no seed twice");
    assert_eq!(plan(None, None, 1_000).seeds(&[5], 3), vec![5, 1_000, 1_001, 1_002]);
    assert_eq!(plan(None, Some(2), 10).seeds(&[5], 3), vec![5, 10, 11]);
    assert_eq!(plan(Some(42), Some(2), 10).seeds(&[5], 3), vec![42]);
}

/// A sweep whose closure maps its seed to another simulation seed (as
/// sweeps that want their own seed space do) and fails for some of them.
fn shifted_sweep(seed: u64) -> Result<(), SimError> {
    let mut sim = toy_sim(seed + 10_000, 2, fixed(Duration::from_millis(1)));
    let sim_seed = sim.seed();
    sim.check(move |w| if sim_seed % 7 == 3 && w.now >= ms(5) { Err("boom".into()) } else { Ok(()) });
    sim.run_until(ms(10))
}

#[test]
fn a_failing_seed_is_reported_as_the_seed_that_reproduces_it() {
    let report = SeedPlan::default().run(&[], 20, shifted_sweep).unwrap_err();
    // 10 006 % 7 == 3: seed 6 fails, though its simulation seed is 10 006.
    assert!(report.starts_with("seed 6 failed"), "{report}");
    let printed: u64 = report
        .split("SIM_SEED=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("a SIM_SEED in the report");
    assert_eq!(printed, 6);
    // Fed back, it fails again; and so does the command's environment.
    assert!(shifted_sweep(printed).is_err());
    let again = SeedPlan { only: Some(printed), ..SeedPlan::default() }.run(&[], 20, shifted_sweep);
    assert!(again.unwrap_err().starts_with("seed 6 failed"));
    // The command names the test that ran.
    assert!(
        report.contains("a_failing_seed_is_reported_as_the_seed_that_reproduces_it -- --exact --include-ignored"),
        "{report}"
    );
    assert!(report.contains("seed 10006"), "the simulation's own seed is shown too: {report}");
}

#[test]
fn keep_going_reports_every_failing_seed() {
    let plan = SeedPlan { keep_going: true, ..SeedPlan::default() };
    let mut ran = 0;
    let report = plan
        .run(&[], 20, |s| {
            ran += 1;
            shifted_sweep(s)
        })
        .unwrap_err();
    assert_eq!(ran, 20);
    assert!(report.starts_with("seed 6 failed"), "{report}");
    assert!(report.contains("2 seeds failed:\n  6: boom\n  13: boom"), "{report}");
}

#[test]
fn regression_seeds_run_first_and_stop_the_sweep() {
    if std::env::var_os("SIM_SEED").is_some() {
        return;
    }
    let mut ran = Vec::new();
    let result = catch_unwind(AssertUnwindSafe(|| {
        for_seeds_with(&[13], 5, |seed| {
            ran.push(seed);
            shifted_sweep(seed)
        })
    }));
    assert!(result.is_err());
    assert_eq!(ran, vec![13], "the pinned seed ran first and failed");
}

/// The model check's judge for the toy: each receiver sees each sender
/// life's sequence numbers in order (true of FIFO links only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct InOrder {
    last: BTreeMap<(NodeId, NodeId, Incarnation), u64>,
    got: u32,
}

fn in_order(
    j: &mut InOrder,
    _: Instant,
    node: NodeId,
    seen: model::Seen<'_, ToyEvent, ToyReply>,
) -> Result<(), String> {
    if let model::Seen::Event(ToyEvent::Got { from, inc, seq }) = seen {
        j.got += 1;
        if let Some(last) = j.last.insert((node, *from, *inc), *seq) {
            if *seq <= last {
                return Err(format!("{node} got {seq} from {from} after {last}"));
            }
        }
    }
    Ok(())
}

/// The judge of duplication: no receiver sees one sender life's sequence
/// number twice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Once {
    seen: BTreeSet<(NodeId, NodeId, Incarnation, u64)>,
}

fn once(j: &mut Once, _: Instant, node: NodeId, seen: model::Seen<'_, ToyEvent, ToyReply>) -> Result<(), String> {
    if let model::Seen::Event(ToyEvent::Got { from, inc, seq }) = seen {
        if !j.seen.insert((node, *from, *inc, *seq)) {
            return Err(format!("{node} got {seq} from {from} twice"));
        }
    }
    Ok(())
}

/// Two pinging toy nodes, 1 ms apart: the model checks' simulated run.
fn toy_pair() -> Sim<Toy> {
    Sim::new(0, 2, NetConfig::reliable(Duration::from_millis(1), Duration::from_millis(1)), false)
}

fn toy_model(channel: Channel, bounds: model::Bounds) -> model::CoreModel<Toy, InOrder> {
    model::CoreModel::new(2, false, channel, bounds, (InOrder::default(), in_order, |j: &InOrder| j.got))
}

/// Every interleaving of two pinging nodes within 25 ms, a crash and a
/// restart included: on reliable links pings arrive in order; on datagram
/// links the model delivers them out of order (and finds it), and its
/// states are exactly counted.
#[test]
fn the_model_explores_every_order_its_channel_allows() {
    use stateright::{Checker as _, Model as _};
    let bounds = model::Bounds { hints: false, depth: None, ..model::Bounds::near(Duration::from_millis(25), 0) };
    let start = |m: &model::CoreModel<Toy, InOrder>| {
        m.check_from(
            model::snapshots(&mut toy_pair(), Duration::from_millis(5), ms(5), InOrder::default(), in_order).unwrap(),
        )
    };
    let reliable = toy_model(Channel::Reliable, bounds.clone());
    let sum = start(&reliable);
    assert!(sum.broken.is_empty(), "{sum}: {:?}", sum.broken);
    assert_eq!(sum.starts, 1);
    assert!(sum.states > 100 && sum.progressed == 1, "{sum}");
    // The same check from time zero (no snapshot): every state is judged.
    let checker = reliable.checker().spawn_bfs().join();
    checker.assert_no_discovery(model::SAFE);
    assert!(checker.unique_state_count() > 100);
    let datagram = toy_model(Channel::Datagram, bounds.clone());
    let sum = start(&datagram);
    assert!(sum.broken.first().is_some_and(|b| b.contains(" after ")), "{sum}");
    // Duplication: within the bound a datagram arrives twice; nothing on a
    // reliable link ever does, nor without the bound.
    let twice = |channel, dups| {
        let bounds = model::Bounds { dups, ..bounds.clone() };
        let got = |j: &Once| j.seen.len() as u32;
        let m = model::CoreModel::new(2, false, channel, bounds, (Once::default(), once, got));
        m.check_from(model::snapshots(&mut toy_pair(), Duration::from_millis(5), ms(5), Once::default(), once).unwrap())
    };
    let sum = twice(Channel::Reliable, 1);
    assert!(sum.broken.is_empty(), "{sum}: {:?}", sum.broken);
    let sum = twice(Channel::Datagram, 0);
    assert!(sum.broken.is_empty(), "{sum}: {:?}", sum.broken);
    let sum = twice(Channel::Datagram, 1);
    assert!(sum.broken.first().is_some_and(|b| b.contains(" twice")), "{sum}");
}
