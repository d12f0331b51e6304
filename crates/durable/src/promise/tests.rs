//! One test per rule, with exact results.

use std::time::Duration;

use super::*;
use ftcore::rules::Rules;

const W: Duration = Duration::from_millis(100);

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn ms(x: u64) -> Instant {
    Instant::from_millis(x)
}

fn cfg(me: u32) -> Config {
    Config::new(vec![n(1), n(2), n(3)], n(me), W)
}

/// A recovered node started at 0, its restart window (100 ms) over at
/// `ms(100)`, its start write (the binding window stored) taken.
fn node(me: u32) -> PromiseNode {
    let mut p = PromiseNode::new(cfg(me), Some(Promises::recovered_with(0)), ms(0)).expect("valid config");
    assert_eq!(p.take_dirty().map(|s| s.binding()), Some(W), "the binding is stored at start");
    p
}

fn persisted(p: &mut PromiseNode) -> Promises {
    p.take_dirty().expect("dirty")
}

// ---- values ----

#[test]
fn encoding_is_round_times_1024_plus_slot() {
    assert_eq!(encode(3, 2), Some(3 * 1024 + 2));
    assert_eq!(round_of(3 * 1024 + 2), 3);
    assert_eq!(slot_of(3 * 1024 + 2), 2);
    assert_eq!(encode(0, 1024), None);
    assert_eq!(encode(MAX_ROUND + 1, 0), None);
    assert_eq!(encode(MAX_ROUND, 1023), Some(i64::MAX as u64), "every value fits a signed 64-bit integer");
}

#[test]
fn next_above_stays_in_slot_and_never_wraps() {
    assert_eq!(next_above(0, 0), Some(1024));
    assert_eq!(next_above(0, 2), Some(2));
    assert_eq!(next_above(2, 2), Some(1026));
    assert_eq!(next_above(1025, 2), Some(1026));
    assert_eq!(next_above(1027, 2), Some(2050));
    assert_eq!(next_above(u64::MAX, 0), None);
    assert_eq!(next_above(MAX_ROUND << SLOT_BITS, 0), None);
    assert_eq!(next_above(MAX_ROUND << SLOT_BITS, 5), Some((MAX_ROUND << SLOT_BITS) + 5));
    assert!(is_sane((MAX_ROUND - 1) << SLOT_BITS | 1023));
    assert!(!is_sane(MAX_ROUND << SLOT_BITS));
}

#[test]
fn config_is_validated() {
    assert_eq!(cfg(2).validate(), Ok(1));
    assert_eq!(cfg(4).validate(), Err(ConfigError::NotAMember(n(4))));
    assert_eq!(Config::new(vec![n(1), n(1)], n(1), W).validate(), Err(ConfigError::Duplicate(n(1))));
    assert_eq!(Config::new(vec![n(1)], n(1), Duration::ZERO).validate(), Err(ConfigError::ZeroWindow));
    let mut c = cfg(1);
    c.drift_ppm = 1_000_000;
    assert_eq!(c.validate(), Err(ConfigError::Drift(1_000_000)));
    let many = (1..=1025).map(NodeId).collect();
    assert_eq!(Config::new(many, n(1), W).validate(), Err(ConfigError::TooMany(1025)));
}

#[test]
fn stored_part_and_values_are_serde() {
    fn serde<T: serde::Serialize + serde::de::DeserializeOwned>() {}
    serde::<Promises>();
    serde::<Values>();
    serde::<Refusal>();
}

// ---- load ----

#[test]
fn missing_file_is_a_fresh_node_that_writes_unrecovered() {
    let mut p = PromiseNode::new(cfg(1), None, ms(0)).expect("valid");
    let s = persisted(&mut p);
    assert!(!s.recovered());
    assert_eq!(p.values(), None);
    // Loading that file again is still fresh.
    let mut q = PromiseNode::new(cfg(1), Some(s), ms(0)).expect("valid");
    assert_eq!(q.take_dirty(), None);
    assert!(!q.stored().recovered());
}

#[test]
fn restart_abandons_own_proposal_but_keeps_floor() {
    let mut p = node(1);
    assert_eq!(p.propose(ms(100)), Ok(1024));
    let s = persisted(&mut p);
    assert_eq!(s.own(), Some(1024));
    assert_eq!(s.floor(), 1024);
    let q = PromiseNode::new(cfg(1), Some(s), ms(150)).expect("valid");
    assert_eq!(q.stored().own(), None);
    assert_eq!(q.proposal(), None);
    assert_eq!(q.threshold(), 0);
    assert_eq!(q.stored().floor(), 1024);
}

// ---- promiser half ----

#[test]
fn promise_is_stored_before_ack() {
    let mut p = node(1);
    assert_eq!(p.on_proposal(n(2), 1025, ms(100)), Ok(Promise { value: 1025, abandoned_own: None }));
    assert!(p.is_dirty());
    let s = persisted(&mut p);
    assert_eq!((s.threshold(), s.floor(), s.in_use()), (1025, 1025, 0));
    assert_eq!(p.take_dirty(), None);
}

#[test]
fn at_or_below_threshold_is_refused_with_the_value() {
    let mut p = node(1);
    let _ = p.on_proposal(n(2), 1025, ms(100)).expect("promise");
    let _ = p.take_dirty();
    assert_eq!(p.on_proposal(n(3), 2, ms(300)), Err(Refusal::Promised { value: 1025 }));
    assert_eq!(p.take_dirty(), None);
}

#[test]
fn ties_are_refused() {
    let mut p = node(1);
    p.on_in_use(1026, ms(0)).expect("in use");
    assert_eq!(p.on_proposal(n(3), 1026, ms(300)), Err(Refusal::Promised { value: 1026 }));
    // The mutation accepts it (the model shows two tokens then).
    let mut c = cfg(1);
    c.rules = Rules::ALL_ON.without(PromiseRule::TiesRefused);
    let mut m = PromiseNode::new(c, Some(Promises::recovered_with(0)), ms(0)).expect("valid");
    m.on_in_use(1026, ms(0)).expect("in use");
    assert!(m.on_proposal(n(3), 1026, ms(300)).is_ok());
}

#[test]
fn repeat_of_the_same_proposal_is_acked_again() {
    let mut p = node(1);
    let _ = p.on_proposal(n(2), 1025, ms(100)).expect("promise");
    let _ = p.take_dirty();
    assert_eq!(p.on_proposal(n(2), 1025, ms(150)), Ok(Promise { value: 1025, abandoned_own: None }));
    assert_eq!(p.take_dirty(), None);
    // After the window it is just a tie.
    assert_eq!(p.on_proposal(n(2), 1025, ms(200)), Err(Refusal::Promised { value: 1025 }));
}

#[test]
fn promise_window_refuses_higher_proposals_of_others() {
    let mut p = node(1);
    let _ = p.on_proposal(n(2), 1025, ms(100)).expect("promise");
    assert_eq!(p.on_proposal(n(3), 2050, ms(130)), Err(Refusal::Busy { remaining: Duration::from_millis(70) }));
    assert_eq!(p.on_proposal(n(3), 2050, ms(199)), Err(Refusal::Busy { remaining: Duration::from_millis(1) }));
    assert!(p.on_proposal(n(3), 2050, ms(200)).is_ok());
}

/// The window ends early once the promised value, or a higher one, is in
/// use here: the promised proposal can no longer complete after it. A
/// lower value in use ends nothing.
#[test]
fn a_promise_window_ends_when_a_value_at_or_above_it_is_in_use() {
    let mut p = node(1);
    let _ = p.on_proposal(n(2), 2050, ms(100)).expect("promise");
    assert!(p.on_in_use(1025, ms(110)).is_err(), "below the threshold: refused");
    assert_eq!(p.on_proposal(n(3), 3075, ms(120)), Err(Refusal::Busy { remaining: Duration::from_millis(80) }));
    assert!(p.on_in_use(2050, ms(130)).is_ok());
    assert!(p.on_proposal(n(3), 3075, ms(140)).is_ok(), "the window ended with 2050 in use");
    // A higher value than the promised one ends it too.
    let mut q = node(1);
    let _ = q.on_proposal(n(2), 2050, ms(100)).expect("promise");
    assert!(q.on_in_use(3073, ms(130)).is_ok());
    assert!(q.on_proposal(n(3), 4099, ms(140)).is_ok());
}

#[test]
fn promise_window_is_stretched_by_drift() {
    let mut c = cfg(1);
    c.drift_ppm = 100_000; // ρ = 10 %: W·(1+ρ) = 110 ms
    let mut p = PromiseNode::new(c, Some(Promises::recovered_with(0)), ms(0)).expect("valid");
    let _ = p.on_proposal(n(2), 1025, ms(200)).expect("promise");
    assert_eq!(p.on_proposal(n(3), 2050, ms(309)), Err(Refusal::Busy { remaining: Duration::from_millis(1) }));
    assert!(p.on_proposal(n(3), 2050, ms(310)).is_ok());
}

#[test]
fn same_proposer_may_supersede_its_own() {
    let mut p = node(1);
    let _ = p.on_proposal(n(2), 1025, ms(100)).expect("promise");
    assert_eq!(p.on_proposal(n(2), 2049, ms(120)), Ok(Promise { value: 2049, abandoned_own: None }));
    // The window now runs from the newer promise.
    assert_eq!(p.on_proposal(n(3), 3074, ms(200)), Err(Refusal::Busy { remaining: Duration::from_millis(20) }));
}

#[test]
fn without_promise_window_higher_proposals_pass() {
    let mut c = cfg(1);
    c.promise_window = false;
    let mut p = PromiseNode::new(c, Some(Promises::recovered_with(0)), ms(0)).expect("valid");
    let _ = p.on_proposal(n(2), 1025, ms(100)).expect("promise");
    assert!(p.on_proposal(n(3), 2050, ms(101)).is_ok());
}

/// (safety, foundation.md "Durable state": the restart window covers the
/// longest binding of any previous life) A life that ran with lease 300 ms
/// stores that binding; restarted with a lease of 100 ms, it still promises
/// nothing for 300 ms: its previous life's lease acks may bind that long.
/// Before 2026-11-29 the window came from the current config alone (100
/// ms), and a proposal 150 ms after the restart was promised.
#[test]
fn a_restart_with_a_shorter_lease_waits_out_the_previous_lives_binding() {
    let mut long = cfg(1);
    long.lease = Duration::from_millis(300);
    let mut first = PromiseNode::new(long, Some(Promises::recovered_with(0)), ms(0)).expect("valid");
    let stored = persisted(&mut first);
    assert_eq!(stored.binding(), Duration::from_millis(300));
    let mut short = cfg(1);
    short.lease = Duration::from_millis(100);
    let mut second = PromiseNode::new(short, Some(stored.clone()), ms(1_000)).expect("valid");
    assert_eq!(second.restart_window_ends(), ms(1_300));
    assert_eq!(
        second.on_proposal(n(2), 1025, ms(1_150)),
        Err(Refusal::Restarting { remaining: Duration::from_millis(150) })
    );
    // The stored binding never falls, and an unchanged one is not rewritten.
    assert_eq!(second.take_dirty(), None);
    assert!(second.on_proposal(n(2), 1025, ms(1_300)).is_ok());
    // A file written before the field existed reads as no binding.
    let old = toml::to_string(&stored).expect("toml").replace("binding_us = 300000\n", "");
    let read: Promises = toml::from_str(&old).expect("an old file reads");
    assert_eq!(read.binding(), Duration::ZERO);
}

#[test]
fn restart_window_promises_nothing() {
    let mut c = cfg(1);
    c.lease = Duration::from_millis(300); // max(W, lease) = 300 ms
    let mut p = PromiseNode::new(c, Some(Promises::recovered_with(0)), ms(1_000)).expect("valid");
    assert_eq!(p.restart_window_ends(), ms(1_300));
    assert_eq!(p.on_proposal(n(2), 1025, ms(1_250)), Err(Refusal::Restarting { remaining: Duration::from_millis(50) }));
    assert_eq!(p.propose(ms(1_299)), Err(Refusal::Restarting { remaining: Duration::from_millis(1) }));
    // Traffic in use still raises the threshold: that is no promise.
    assert_eq!(p.on_in_use(7, ms(1_010)), Ok(InUse { raised: true, abandoned_own: None }));
    assert!(p.on_proposal(n(2), 1025, ms(1_300)).is_ok());
}

#[test]
fn unrecovered_node_promises_nothing() {
    let mut p = PromiseNode::new(cfg(1), None, ms(0)).expect("valid");
    assert_eq!(p.on_proposal(n(2), 1025, ms(500)), Err(Refusal::Unrecovered));
    assert_eq!(p.propose(ms(500)), Err(Refusal::Unrecovered));
    assert_eq!(p.check_token(5), Err(Refusal::Unrecovered));
}

#[test]
fn absurd_values_and_strangers_are_refused() {
    let mut p = node(1);
    assert_eq!(p.on_proposal(n(9), 1025, ms(100)), Err(Refusal::Invalid));
    assert_eq!(p.on_proposal(n(1), 1025, ms(100)), Err(Refusal::Invalid));
    assert_eq!(p.on_proposal(n(2), u64::MAX, ms(100)), Err(Refusal::Invalid));
    assert_eq!(p.on_in_use(u64::MAX, ms(100)), Err(Refusal::Invalid));
    assert_eq!(p.threshold(), 0);
    assert_eq!(p.take_dirty(), None);
}

#[test]
fn traffic_below_threshold_is_refused_at_or_above_raises() {
    let mut p = node(1);
    let _ = p.on_proposal(n(2), 1025, ms(100)).expect("promise");
    let _ = p.take_dirty();
    assert_eq!(p.on_in_use(1024, ms(110)), Err(Refusal::Promised { value: 1025 }));
    assert_eq!(p.on_in_use(1025, ms(110)), Ok(InUse { raised: true, abandoned_own: None }));
    assert_eq!(persisted(&mut p).in_use(), 1025);
    assert_eq!(p.on_in_use(1025, ms(120)), Ok(InUse { raised: false, abandoned_own: None }));
    assert_eq!(p.take_dirty(), None);
    assert_eq!(p.on_in_use(3000, ms(120)), Ok(InUse { raised: true, abandoned_own: None }));
    let s = persisted(&mut p);
    assert_eq!((s.threshold(), s.floor(), s.in_use()), (3000, 3000, 3000));
}

// ---- proposer half ----

#[test]
fn propose_goes_above_floor_in_own_slot_and_stores_first() {
    let mut p = node(2);
    p.on_in_use(1024, ms(0)).expect("in use");
    let _ = p.take_dirty();
    assert_eq!(p.propose(ms(100)), Ok(1025));
    let s = persisted(&mut p);
    assert_eq!((s.floor(), s.own(), s.threshold()), (1025, Some(1025), 1024));
    assert_eq!(p.threshold(), 1025);
    assert_eq!(p.proposal(), Some((1025, ms(200))));
}

#[test]
fn a_proposal_is_live_for_its_value_until_its_deadline() {
    let mut p = node(2);
    let v = p.propose(ms(100)).expect("propose");
    assert_eq!(p.proposal(), Some((v, ms(200))));
    assert!(p.proposal_live(v, ms(199)));
    assert!(!p.proposal_live(v, ms(200)), "past its deadline");
    assert!(!p.proposal_live(v + 1, ms(150)), "another value");
    let _ = p.abandon(ms(150));
    assert!(!p.proposal_live(v, ms(150)), "abandoned");
}

#[test]
fn proposer_applies_busy_to_itself() {
    let mut p = node(1);
    let _ = p.on_proposal(n(2), 1025, ms(100)).expect("promise");
    assert_eq!(p.propose(ms(150)), Err(Refusal::Busy { remaining: Duration::from_millis(50) }));
    assert_eq!(p.propose(ms(200)), Ok(2048));
}

#[test]
fn propose_value_must_be_above_floor() {
    let mut p = node(1);
    p.on_in_use(10, ms(0)).expect("in use");
    assert_eq!(p.propose_value(10, ms(100)), Err(Refusal::Promised { value: 10 }));
    assert_eq!(p.propose_value(11, ms(100)), Ok(11));
}

#[test]
fn proposer_stops_at_the_top_and_never_wraps() {
    // Slot 2 at (MAX_ROUND − 1, 1): one value left in its slot, then none.
    let top = encode(MAX_ROUND - 1, 1).expect("in range");
    let at = |m: Rules<PromiseRule>| {
        let mut c = cfg(3);
        c.rules = m;
        PromiseNode::new(c, Some(Promises::recovered_with(top)), ms(0)).expect("valid")
    };
    let mut p = at(Rules::ALL_ON);
    let last = encode(MAX_ROUND - 1, 2).expect("in range");
    assert_eq!(p.propose(ms(100)), Ok(last));
    assert_eq!(persisted(&mut p).floor(), last);
    // Every higher value of slot 2 is round MAX_ROUND, which no peer accepts.
    assert_eq!(p.propose(ms(300)), Err(Refusal::Invalid));
    assert_eq!((p.proposal(), p.take_dirty()), (None, None));
    assert_eq!(p.propose_value(2, ms(300)), Err(Refusal::Promised { value: last }));
    // The mutation wraps to round 0 of the slot and proposes it.
    let mut m = at(Rules::ALL_ON.without(PromiseRule::StopAtTheTop));
    assert_eq!(m.propose(ms(100)), Ok(last), "below the top the mutation changes nothing");
    assert_eq!(m.propose(ms(300)), Ok(2));
    let s = persisted(&mut m);
    assert_eq!((s.own(), s.floor()), (Some(2), last));
    assert_eq!(m.proposal(), Some((2, ms(400))));
}

#[test]
fn majority_including_own_promise_wins_and_is_stored_in_use() {
    let mut p = node(1);
    let v = p.propose(ms(100)).expect("propose");
    let _ = p.take_dirty();
    assert_eq!(p.use_proposal(ms(100)), Err(UseError::NoMajority));
    assert_eq!(p.on_answer(n(2), v, Ok(()), ms(150)), Step::Majority);
    assert_eq!(p.promisers().map(|s| s.len()), Some(2));
    assert_eq!(p.use_proposal(ms(199)), Ok(1024));
    let s = persisted(&mut p);
    assert_eq!((s.in_use(), s.threshold(), s.own()), (1024, 1024, None));
    assert_eq!(p.proposal(), None);
}

#[test]
fn five_nodes_need_three() {
    let members = (1..=5).map(NodeId).collect();
    let mut p =
        PromiseNode::new(Config::new(members, n(1), W), Some(Promises::recovered_with(0)), ms(0)).expect("valid");
    let v = p.propose(ms(100)).expect("propose");
    assert_eq!(p.on_answer(n(2), v, Ok(()), ms(110)), Step::Pending);
    assert_eq!(p.on_answer(n(2), v, Ok(()), ms(111)), Step::Pending);
    assert_eq!(p.on_answer(n(4), v, Ok(()), ms(120)), Step::Majority);
}

#[test]
fn majority_after_deadline_is_abandoned() {
    let mut p = node(1);
    let v = p.propose(ms(100)).expect("propose");
    assert_eq!(p.on_answer(n(2), v, Ok(()), ms(200)), Step::Abandoned(Failure::Deadline));
    assert_eq!(p.use_proposal(ms(200)), Err(UseError::NoProposal));
    // With drift the deadline is W·(1−ρ) = 90 ms.
    let mut c = cfg(1);
    c.drift_ppm = 100_000;
    let mut p = PromiseNode::new(c, Some(Promises::recovered_with(0)), ms(0)).expect("valid");
    let v = p.propose(ms(200)).expect("propose");
    assert_eq!(p.on_answer(n(2), v, Ok(()), ms(289)), Step::Majority);
    assert_eq!(p.use_proposal(ms(290)), Err(UseError::Abandoned(Failure::Deadline)));
}

#[test]
fn any_refusal_abandons_and_later_answers_create_nothing() {
    let mut p = node(1);
    let v = p.propose(ms(100)).expect("propose");
    assert_eq!(
        p.on_answer(n(3), v, Err(Refusal::Promised { value: 5000 }), ms(110)),
        Step::Abandoned(Failure::Refused(Refusal::Promised { value: 5000 }))
    );
    assert_eq!(p.on_answer(n(2), v, Ok(()), ms(120)), Step::Ignored);
    assert_eq!(p.use_proposal(ms(120)), Err(UseError::NoProposal));
    // The refusal's value is jumped past.
    assert_eq!(p.propose(ms(130)), Ok(5120));
}

#[test]
fn absurd_refusal_value_is_not_adopted() {
    let mut p = node(1);
    let v = p.propose(ms(100)).expect("propose");
    let _ = p.on_answer(n(3), v, Err(Refusal::Promised { value: u64::MAX }), ms(110));
    assert_eq!(p.stored().floor(), 1024);
}

#[test]
fn answers_to_other_values_or_from_strangers_are_ignored() {
    let mut p = node(1);
    let v = p.propose(ms(100)).expect("propose");
    assert_eq!(p.on_answer(n(2), v + 1, Ok(()), ms(110)), Step::Ignored);
    assert_eq!(p.on_answer(n(9), v, Ok(()), ms(110)), Step::Ignored);
    assert_eq!(p.on_answer(n(1), v, Ok(()), ms(110)), Step::Ignored);
    assert_eq!(p.promisers().map(|s| s.len()), Some(1));
}

#[test]
fn retry_after_busy_is_just_past_the_window() {
    let mut p = node(1);
    let v = p.propose(ms(100)).expect("propose");
    let step = p.on_answer(n(2), v, Err(Refusal::Busy { remaining: Duration::from_millis(40) }), ms(110));
    let Step::Abandoned(f) = step else { panic!("{step:?}") };
    assert_eq!(f, Failure::Busy { longest: Duration::from_millis(40) });
    let mut rng = SeededRng::new(7);
    for _ in 0..100 {
        let d = p.retry_after(&f, &mut rng);
        assert!(d > Duration::from_millis(40) && d <= Duration::from_millis(50), "{d:?}");
    }
}

#[test]
fn retry_after_other_failures_is_random_in_base_to_twice() {
    let mut c = cfg(1);
    c.drift_ppm = 250_000; // W·1.25/0.75 = 166.667 ms, rounded up
    let p = PromiseNode::new(c, Some(Promises::recovered_with(0)), ms(0)).expect("valid");
    let mut rng = SeededRng::new(3);
    let lo = Duration::from_micros(166_667);
    for _ in 0..100 {
        let d = p.retry_after(&Failure::Deadline, &mut rng);
        assert!(d >= lo && d <= lo * 2, "{d:?}");
    }
}

#[test]
fn first_proposal_waits_up_to_w_after_restart_window() {
    let p = node(1);
    let mut rng = SeededRng::new(1);
    for _ in 0..100 {
        let t = p.first_proposal_at(&mut rng);
        assert!(t >= ms(100) && t <= ms(200), "{t}");
    }
}

#[test]
fn higher_proposal_of_another_supersedes_own() {
    let mut p = node(1);
    assert_eq!(p.propose(ms(100)), Ok(1024));
    // Lower one: refused with the live own proposal.
    assert_eq!(p.on_proposal(n(3), 2, ms(110)), Err(Refusal::Promised { value: 1024 }));
    assert_eq!(p.on_proposal(n(3), 1026, ms(110)), Ok(Promise { value: 1026, abandoned_own: Some(1024) }));
    assert_eq!(p.proposal(), None);
    assert_eq!(p.on_answer(n(2), 1024, Ok(()), ms(120)), Step::Ignored);
}

#[test]
fn own_proposal_is_not_superseded_while_busy_for_another() {
    let mut p = node(1);
    let _ = p.on_proposal(n(2), 1025, ms(100)).expect("promise");
    // It cannot propose while busy; so a live own proposal and a fresh
    // promise to another never coexist for a third proposer to break.
    assert_eq!(p.on_proposal(n(3), 1026, ms(150)), Err(Refusal::Busy { remaining: Duration::from_millis(50) }));
}

#[test]
fn higher_value_in_use_abandons_own_proposal() {
    let mut p = node(1);
    assert_eq!(p.propose(ms(100)), Ok(1024));
    assert_eq!(p.on_in_use(1000, ms(110)), Err(Refusal::Promised { value: 1024 }));
    assert_eq!(p.on_in_use(2049, ms(110)), Ok(InUse { raised: true, abandoned_own: Some(1024) }));
}

#[test]
fn veto_abandons() {
    let mut p = node(1);
    let v = p.propose(ms(100)).expect("propose");
    assert_eq!(p.abandon(ms(110)), Some(v));
    assert_eq!(p.abandon(ms(110)), None);
    assert_eq!(p.threshold(), 0);
}

// ---- fresh-node recovery ----

fn fresh(me: u32, members: u32, new_cluster: bool) -> PromiseNode {
    let mut c = Config::new((1..=members).map(NodeId).collect(), n(me), W);
    c.new_cluster = new_cluster;
    PromiseNode::new(c, None, ms(0)).expect("valid")
}

fn vals(in_use: u64, threshold: u64, floor: u64) -> Option<Values> {
    Some(Values { in_use, threshold, floor })
}

#[test]
fn recovery_waits_for_the_restart_window() {
    let mut p = fresh(1, 3, false);
    assert_eq!(p.recovery_round(7, ms(50)), RoundStep::Wait { until: ms(100) });
    // An answer to a pre-window nonce does not count.
    assert_eq!(p.on_hello_ack(n(2), 7, vals(1, 2, 3), ms(60)), AckStep::Ignored);
    assert_eq!(p.recovery_round(8, ms(100)), RoundStep::Send);
}

#[test]
fn recovery_from_a_majority_of_others_with_values() {
    let mut p = fresh(1, 5, false);
    assert_eq!(p.recovery_round(1, ms(100)), RoundStep::Send);
    assert_eq!(p.on_hello_ack(n(2), 1, vals(1024, 2049, 3074), ms(110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(3), 1, None, ms(110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(4), 1, vals(0, 0, 5), ms(110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(5), 1, vals(1024, 1024, 1024), ms(110)), AckStep::Recovered { max: 3074 });
    let s = persisted(&mut p);
    assert!(s.recovered());
    assert_eq!((s.threshold(), s.floor(), s.in_use(), s.recovered_max()), (3074, 3074, 1024, 3074));
    // Promises only above it; tokens at or below it are stale.
    assert_eq!(p.on_proposal(n(2), 3074, ms(120)), Err(Refusal::Promised { value: 3074 }));
    assert_eq!(p.check_token(3074), Err(Refusal::Stale { recovered_max: 3074 }));
    assert_eq!(p.check_token(3075), Ok(()));
    assert!(p.on_proposal(n(2), 4097, ms(120)).is_ok());
}

#[test]
fn recovered_max_survives_restarts() {
    let mut p = fresh(1, 3, false);
    let _ = p.recovery_round(1, ms(100));
    let _ = p.on_hello_ack(n(2), 1, vals(1024, 1024, 1024), ms(110));
    let _ = p.on_hello_ack(n(3), 1, vals(0, 0, 0), ms(110));
    let s = persisted(&mut p);
    let mut q = PromiseNode::new(cfg(1), Some(s), ms(500)).expect("valid");
    assert_eq!(q.check_token(1024), Err(Refusal::Stale { recovered_max: 1024 }));
    assert_eq!(q.recovery_round(9, ms(700)), RoundStep::NotNeeded);
}

#[test]
fn recovery_from_all_others_even_without_values() {
    let mut p = fresh(1, 3, false);
    let _ = p.recovery_round(1, ms(100));
    assert_eq!(p.on_hello_ack(n(2), 1, None, ms(110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(3), 1, None, ms(110)), AckStep::Recovered { max: 0 });
}

#[test]
fn new_cluster_recovers_from_half_with_nothing_in_use() {
    // The waiver (NC1) is revoked by the first answer with a value (NC3);
    // after the window, without the flag's rule, it needs a majority.
    let mut p = fresh(1, 5, true);
    assert_eq!(p.recovery_round(1, ms(1)), RoundStep::Send);
    assert_eq!(p.on_hello_ack(n(2), 1, None, ms(2)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(3), 1, vals(0, 7, 9), ms(2)), AckStep::Pending);
    assert_eq!(p.restart_window_ends(), ms(100));
    assert_eq!(p.recovery_round(2, ms(50)), RoundStep::Wait { until: ms(100) });
    // A late answer to the pre-window round does not count.
    assert_eq!(p.on_hello_ack(n(4), 1, None, ms(60)), AckStep::Ignored);
    assert_eq!(p.recovery_round(3, ms(100)), RoundStep::Send);
    assert_eq!(p.on_hello_ack(n(2), 3, None, ms(110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(3), 3, vals(0, 7, 9), ms(110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(4), 3, vals(0, 0, 0), ms(110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(5), 3, vals(0, 0, 0), ms(110)), AckStep::Recovered { max: 9 });
    assert_eq!(p.first_proposal_in_new_cluster(ms(110)), None);
    // A waiver that ran out (too few answered in the window: hosts down at
    // the first start) lapses: after the window the flag's ⌊N/2⌋ rule
    // applies as before.
    let mut p = fresh(1, 5, true);
    assert_eq!(p.recovery_round(1, ms(1)), RoundStep::Send);
    assert_eq!(p.on_hello_ack(n(2), 1, None, ms(2)), AckStep::Pending);
    assert_eq!(p.recovery_round(2, ms(100)), RoundStep::Send);
    assert_eq!(p.on_hello_ack(n(2), 1, None, ms(105)), AckStep::Ignored);
    assert_eq!(p.on_hello_ack(n(2), 2, None, ms(110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(3), 2, vals(0, 7, 9), ms(110)), AckStep::Recovered { max: 9 });
    // Without the flag it needs as much.
    let mut p = fresh(1, 5, false);
    let _ = p.recovery_round(1, ms(100));
    assert_eq!(p.on_hello_ack(n(2), 1, None, ms(110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(3), 1, vals(0, 7, 9), ms(110)), AckStep::Pending);
}

/// NC1–NC2: a fresh node started with `--new-cluster` asks at once, and a
/// majority of the others answering `none` or zeros ends its restart
/// window then; NC4: its first proposal is due one step more than its
/// rank later.
#[test]
fn a_new_cluster_node_recovers_at_once_when_a_majority_of_the_others_know_nothing() {
    let mut p = fresh(2, 5, true);
    assert_eq!(p.recovery_round(1, ms(1)), RoundStep::Send);
    assert_eq!(p.on_hello_ack(n(1), 1, None, ms(2)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(3), 1, vals(0, 0, 0), ms(2)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(4), 1, None, ms(3)), AckStep::Recovered { max: 0 });
    assert!(persisted(&mut p).recovered());
    assert!(p.new_cluster_start());
    // No restart window left: it promises at once.
    assert!(p.on_proposal(n(1), 1024, ms(4)).is_ok());
    // Rank 1 (the second configured id): two steps of lease·(1+ρ), the
    // lease being at least 1 ms.
    assert_eq!(p.first_proposal_in_new_cluster(ms(3)), Some(ms(5)));
    // Without the flag the same answers wait for the window.
    let mut q = fresh(2, 5, false);
    assert_eq!(q.recovery_round(1, ms(1)), RoundStep::Wait { until: ms(100) });
}

#[test]
fn only_latest_answer_per_peer_counts() {
    let mut p = fresh(1, 5, false);
    let _ = p.recovery_round(1, ms(100));
    let _ = p.recovery_round(2, ms(1100));
    assert_eq!(p.on_hello_ack(n(2), 1, vals(5, 5, 5), ms(1110)), AckStep::Pending);
    // The same peer again: still one peer.
    assert_eq!(p.on_hello_ack(n(2), 2, None, ms(1110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(3), 2, vals(1, 1, 1), ms(1110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(4), 2, vals(2, 2, 2), ms(1110)), AckStep::Pending);
    assert_eq!(p.on_hello_ack(n(5), 2, None, ms(1110)), AckStep::Recovered { max: 2 });
}

#[test]
fn absurd_answer_values_are_not_adopted() {
    let mut p = fresh(1, 3, false);
    let _ = p.recovery_round(1, ms(100));
    assert_eq!(p.on_hello_ack(n(2), 1, vals(0, u64::MAX, 0), ms(110)), AckStep::Ignored);
    assert_eq!(p.on_hello_ack(n(9), 1, vals(0, 0, 0), ms(110)), AckStep::Ignored);
}

#[test]
fn single_node_recovers_at_once_after_window() {
    let mut p = PromiseNode::new(Config::new(vec![n(1)], n(1), W), None, ms(0)).expect("valid");
    assert_eq!(p.recovery_round(1, ms(100)), RoundStep::Recovered { max: 0 });
    let v = p.propose(ms(100)).expect("propose");
    assert_eq!(p.use_proposal(ms(100)), Ok(v));
}

#[test]
fn raise_floor_lifts_the_next_proposal_above_a_stale_answer_and_is_persisted() {
    let mut p = node(1);
    let _ = p.take_dirty();
    p.raise_floor(5_000);
    assert_eq!(persisted(&mut p).floor(), 5_000);
    // Lower or absurd values change nothing.
    p.raise_floor(10);
    p.raise_floor(u64::MAX);
    assert!(p.take_dirty().is_none());
    let after = p.restart_window_ends() + Duration::from_millis(1);
    let v = p.propose(after).unwrap();
    assert!(v > 5_000 && slot_of(v) == p.slot(), "{v}");
}

// ---- votes (electd) ----

#[test]
fn one_vote_per_term_only_above_every_term_voted_in() {
    let mut p = node(1);
    assert_eq!(p.vote(5, ms(50)), Err(Refusal::Restarting { remaining: Duration::from_millis(50) }));
    assert_eq!(p.vote(5, ms(200)), Ok(()));
    assert_eq!(persisted(&mut p).threshold(), 5, "the vote is stored before it is forwarded");
    assert_eq!(p.vote(5, ms(201)), Err(Refusal::Promised { value: 5 }), "a second vote in term 5");
    assert_eq!(p.vote(4, ms(202)), Err(Refusal::Promised { value: 5 }));
    assert_eq!(p.on_in_use(4, ms(203)), Err(Refusal::Promised { value: 5 }), "no ack below the vote");
    assert_eq!(p.vote(6, ms(204)), Ok(()));
    let fresh = PromiseNode::new(cfg(2), None, ms(0)).map(|mut f| f.vote(9, ms(500)));
    assert_eq!(fresh, Ok(Err(Refusal::Unrecovered)), "a fresh node votes nothing");
}
