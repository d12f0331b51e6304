use std::collections::BTreeMap;
use std::net::SocketAddr;

use proptest::prelude::*;

use super::*;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], port))
}

fn member(id: u32, port: u16) -> Member {
    Member { id: NodeId(id), addr: addr(port) }
}

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn inc(i: u64) -> Incarnation {
    Incarnation(i)
}

/// A view of `of_size(size)` from node `me`, in life 1.
fn view(size: u32, me: u32) -> RingView {
    RingView::new(&Membership::of_size(size), n(me), inc(1)).unwrap()
}

fn ids(xs: &[u32]) -> Vec<NodeId> {
    xs.iter().copied().map(NodeId).collect()
}

// ---------------------------------------------------------------- Membership

#[test]
fn membership_keeps_configured_order() {
    let m = Membership::new(vec![member(3, 1), member(1, 2), member(7, 3)]).unwrap();
    assert_eq!(m.len(), 3);
    assert!(!m.is_empty());
    assert_eq!(m.ids().collect::<Vec<_>>(), ids(&[3, 1, 7]));
    assert_eq!(m.members(), &[member(3, 1), member(1, 2), member(7, 3)]);
    assert_eq!(m.position(n(3)), Some(0));
    assert_eq!(m.position(n(1)), Some(1));
    assert_eq!(m.position(n(7)), Some(2));
    assert_eq!(m.position(n(2)), None);
}

#[test]
fn membership_empty() {
    assert_eq!(Membership::new(vec![]), Err(MembershipError::Empty));
}

#[test]
fn membership_zero_id() {
    assert_eq!(Membership::new(vec![member(0, 1)]), Err(MembershipError::ZeroId));
    assert_eq!(Membership::new(vec![member(1, 1), member(2, 2), member(0, 3)]), Err(MembershipError::ZeroId));
}

#[test]
fn membership_duplicate_id() {
    assert_eq!(Membership::new(vec![member(1, 1), member(2, 2), member(1, 3)]), Err(MembershipError::DuplicateId(1)));
}

#[test]
fn membership_duplicate_addr() {
    assert_eq!(
        Membership::new(vec![member(1, 1), member(2, 2), member(3, 1)]),
        Err(MembershipError::DuplicateAddr(addr(1)))
    );
}

#[test]
fn membership_reports_the_first_offending_member() {
    // Member 1 repeats member 0's id and address: the id is checked first.
    assert_eq!(Membership::new(vec![member(4, 1), member(4, 1)]), Err(MembershipError::DuplicateId(4)));
    // A zero id is reported before a duplicate address on the same member.
    assert_eq!(Membership::new(vec![member(4, 1), member(0, 1)]), Err(MembershipError::ZeroId));
    // An earlier duplicate address is reported before a later zero id.
    assert_eq!(
        Membership::new(vec![member(4, 1), member(5, 1), member(0, 2)]),
        Err(MembershipError::DuplicateAddr(addr(1)))
    );
}

#[test]
fn membership_require() {
    let m = Membership::of_size(3);
    assert_eq!(m.require(n(1)), Ok(()));
    assert_eq!(m.require(n(3)), Ok(()));
    assert_eq!(m.require(n(4)), Err(MembershipError::SelfMissing(4)));
    assert_eq!(m.require(n(0)), Err(MembershipError::SelfMissing(0)));
}

#[test]
fn membership_error_messages() {
    assert_eq!(MembershipError::Empty.to_string(), "no members configured");
    assert_eq!(MembershipError::ZeroId.to_string(), "node id 0 is reserved; ids start at 1");
    assert_eq!(MembershipError::DuplicateId(3).to_string(), "node id 3 appears more than once");
    assert_eq!(
        MembershipError::DuplicateAddr(addr(9)).to_string(),
        "address 10.0.0.1:9 is used by more than one member"
    );
    assert_eq!(MembershipError::SelfMissing(8).to_string(), "this node's id 8 is not among the configured members");
}

#[test]
fn of_size_numbers_and_addresses() {
    let m = Membership::of_size(4);
    assert_eq!(m.len(), 4);
    assert_eq!(m.ids().collect::<Vec<_>>(), ids(&[1, 2, 3, 4]));
    for i in 1..=4u32 {
        let a = SocketAddr::from(([127, 0, 0, 1], 20_000 + i as u16));
        assert_eq!(m.addr(n(i)), Some(a));
        assert_eq!(m.id_at(a), Some(n(i)));
        assert_eq!(m.position(n(i)), Some(i as usize - 1));
    }
    let one = Membership::of_size(1);
    assert_eq!(one.ids().collect::<Vec<_>>(), ids(&[1]));
    assert_eq!(one.majority(), 1);
}

#[test]
#[should_panic(expected = "ids 1..=n are valid")]
fn of_size_zero_panics() {
    let _ = Membership::of_size(0);
}

#[test]
fn membership_lookups() {
    let m = Membership::new(vec![member(5, 50), member(6, 60)]).unwrap();
    assert!(m.contains(n(5)));
    assert!(!m.contains(n(7)));
    assert_eq!(m.addr(n(6)), Some(addr(60)));
    assert_eq!(m.addr(n(7)), None);
    assert_eq!(m.id_at(addr(50)), Some(n(5)));
    assert_eq!(m.id_at(addr(51)), None);
}

#[test]
fn majority_is_more_than_half() {
    let expected = [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)];
    for (size, maj) in expected {
        assert_eq!(Membership::of_size(size).majority(), maj, "size {size}");
    }
}

// ---------------------------------------------------------------- RingView: construction

#[test]
fn new_view_knows_only_itself() {
    let v = view(4, 2);
    assert_eq!(v.me(), n(2));
    assert_eq!(v.my_incarnation(), inc(1));
    assert_eq!(v.len(), 4);
    assert!(!v.is_empty());
    assert_eq!(v.ids(), &ids(&[1, 2, 3, 4])[..]);
    assert_eq!(v.alive_count(), 4);
    assert_eq!(
        v.entries().collect::<Vec<_>>(),
        vec![
            (n(1), Liveness::alive(inc(0))),
            (n(2), Liveness::alive(inc(1))),
            (n(3), Liveness::alive(inc(0))),
            (n(4), Liveness::alive(inc(0))),
        ]
    );
    assert_eq!(v.liveness(n(9)), None);
    assert!(!v.is_alive(n(9)));
    assert!(v.is_alive(n(3)));
}

#[test]
fn new_view_requires_self() {
    assert_eq!(RingView::new(&Membership::of_size(3), n(4), inc(1)), Err(MembershipError::SelfMissing(4)));
}

#[test]
fn new_view_follows_configured_not_numeric_order() {
    let m = Membership::new(vec![member(30, 1), member(10, 2), member(20, 3)]).unwrap();
    let v = RingView::new(&m, n(10), inc(1)).unwrap();
    assert_eq!(v.successor(), Some(n(20)));
    assert_eq!(v.predecessor(), Some(n(30)));
    assert_eq!(v.alive_from_me(), ids(&[20, 30, 10]));
}

// ---------------------------------------------------------------- RingView: ring navigation

#[test]
fn successor_and_predecessor_wrap_around() {
    let v = view(5, 5);
    assert_eq!(v.successor(), Some(n(1)));
    assert_eq!(v.predecessor(), Some(n(4)));
    let v = view(5, 1);
    assert_eq!(v.successor(), Some(n(2)));
    assert_eq!(v.predecessor(), Some(n(5)));
    assert_eq!(v.successor_of(n(5)), Some(n(1)));
    assert_eq!(v.predecessor_of(n(1)), Some(n(5)));
}

#[test]
fn navigation_skips_dead_nodes() {
    let mut v = view(6, 1);
    assert!(v.mark_dead(n(2), inc(0)));
    assert!(v.mark_dead(n(3), inc(0)));
    assert!(v.mark_dead(n(6), inc(0)));
    assert_eq!(v.successor(), Some(n(4)));
    assert_eq!(v.predecessor(), Some(n(5)));
    assert_eq!(v.successor_of(n(4)), Some(n(5)));
    assert_eq!(v.successor_of(n(5)), Some(n(1)));
    assert_eq!(v.predecessor_of(n(4)), Some(n(1)));
    // From a dead node: the nearest live one either way.
    assert_eq!(v.successor_of(n(2)), Some(n(4)));
    assert_eq!(v.predecessor_of(n(3)), Some(n(1)));
    assert_eq!(v.successor_of(n(6)), Some(n(1)));
    assert_eq!(v.predecessor_of(n(6)), Some(n(5)));
    assert_eq!(v.alive_count(), 3);
}

#[test]
fn a_majority_is_more_than_half_of_the_configured_members() {
    let mut v = view(4, 1);
    assert!(v.holds_a_majority());
    v.suspect(n(2));
    assert!(v.holds_a_majority(), "3 of 4");
    v.suspect(n(3));
    assert!(!v.holds_a_majority(), "2 of 4 is no majority");
    let mut v = view(3, 1);
    v.suspect(n(2));
    assert!(v.holds_a_majority(), "2 of 3");
    assert!(view(1, 1).holds_a_majority());
}

#[test]
fn navigation_of_unknown_id_is_none() {
    let v = view(3, 1);
    assert_eq!(v.successor_of(n(7)), None);
    assert_eq!(v.predecessor_of(n(7)), None);
}

#[test]
fn alone_has_no_neighbours() {
    let v = view(1, 1);
    assert_eq!(v.successor(), None);
    assert_eq!(v.predecessor(), None);
    assert_eq!(v.alive_from_me(), ids(&[1]));
    assert_eq!(v.dead_gap_after_me(), Vec::<NodeId>::new());

    let mut v = view(3, 2);
    v.suspect(n(1));
    v.suspect(n(3));
    assert_eq!(v.successor(), None);
    assert_eq!(v.predecessor(), None);
    assert_eq!(v.alive_from_me(), ids(&[2]));
    assert_eq!(v.alive_count(), 1);
    // A dead node's only live neighbour is us.
    assert_eq!(v.successor_of(n(1)), Some(n(2)));
    assert_eq!(v.predecessor_of(n(1)), Some(n(2)));
}

#[test]
fn two_alive_are_each_others_both_neighbours() {
    let mut v = view(4, 1);
    v.suspect(n(2));
    v.suspect(n(4));
    assert_eq!(v.successor(), Some(n(3)));
    assert_eq!(v.predecessor(), Some(n(3)));
    assert_eq!(v.successor_of(n(3)), Some(n(1)));
    assert_eq!(v.predecessor_of(n(3)), Some(n(1)));
}

#[test]
fn alive_from_me_starts_after_me_and_ends_with_me() {
    let mut v = view(5, 3);
    assert_eq!(v.alive_from_me(), ids(&[4, 5, 1, 2, 3]));
    v.suspect(n(5));
    v.suspect(n(2));
    assert_eq!(v.alive_from_me(), ids(&[4, 1, 3]));
}

#[test]
fn dead_gap_after_me() {
    let mut v = view(6, 5);
    assert_eq!(v.dead_gap_after_me(), Vec::<NodeId>::new());
    // A dead node not right after me is no gap.
    v.suspect(n(2));
    assert_eq!(v.dead_gap_after_me(), Vec::<NodeId>::new());
    // The gap wraps around the end of the configured order.
    v.suspect(n(6));
    assert_eq!(v.dead_gap_after_me(), ids(&[6]));
    v.suspect(n(1));
    assert_eq!(v.dead_gap_after_me(), ids(&[6, 1, 2]));
    assert_eq!(v.successor(), Some(n(3)));
    // All others dead: the gap is everyone else, in ring order.
    v.suspect(n(3));
    v.suspect(n(4));
    assert_eq!(v.dead_gap_after_me(), ids(&[6, 1, 2, 3, 4]));
    assert_eq!(v.successor(), None);
    // One comes back: the gap ends just before it.
    assert_eq!(v.observe(n(2), inc(5)), Observation::NewLife { previous: Liveness::dead(inc(0)) });
    assert_eq!(v.dead_gap_after_me(), ids(&[6, 1]));
    assert_eq!(v.successor(), Some(n(2)));
}

// ---------------------------------------------------------------- RingView: merging

#[test]
fn merge_later_incarnation_wins() {
    let mut v = view(3, 1);
    assert!(v.merge(n(2), Liveness::dead(inc(3))));
    assert!(v.merge(n(2), Liveness::alive(inc(4))));
    assert_eq!(v.liveness(n(2)), Some(Liveness::alive(inc(4))));
    assert!(!v.merge(n(2), Liveness::dead(inc(3))), "an older life's death changes nothing");
    assert!(!v.merge(n(2), Liveness::alive(inc(2))));
    assert_eq!(v.liveness(n(2)), Some(Liveness::alive(inc(4))));
}

#[test]
fn merge_dead_beats_alive_in_the_same_life() {
    let mut v = view(3, 1);
    assert!(v.merge(n(3), Liveness::alive(inc(2))));
    assert!(v.merge(n(3), Liveness::dead(inc(2))));
    assert!(!v.merge(n(3), Liveness::alive(inc(2))), "an excluded life never comes back");
    assert_eq!(v.liveness(n(3)), Some(Liveness::dead(inc(2))));
    assert!(!v.is_alive(n(3)));
}

#[test]
fn merge_is_idempotent() {
    let mut v = view(3, 1);
    assert!(v.merge(n(2), Liveness::dead(inc(7))));
    let once = v.clone();
    assert!(!v.merge(n(2), Liveness::dead(inc(7))));
    assert_eq!(v, once);
}

#[test]
fn merge_ignores_reports_about_self_and_strangers() {
    let mut v = view(3, 1);
    let before = v.clone();
    assert!(!v.merge(n(1), Liveness::dead(inc(1))));
    assert!(!v.merge(n(1), Liveness::dead(inc(9))));
    assert!(!v.merge(n(1), Liveness::alive(inc(9))));
    assert!(!v.merge(n(8), Liveness::alive(inc(9))));
    assert_eq!(v, before);
    assert_eq!(v.my_incarnation(), inc(1));
    assert!(v.is_alive(n(1)));
}

#[test]
fn liveness_order_is_incarnation_then_status() {
    assert!(Liveness::alive(inc(1)) < Liveness::dead(inc(1)));
    assert!(Liveness::dead(inc(1)) < Liveness::alive(inc(2)));
    assert!(Liveness::alive(inc(0)) < Liveness::dead(inc(0)));
    assert_eq!(Liveness::alive(inc(3)), Liveness { incarnation: inc(3), status: Status::Alive });
    assert_eq!(Liveness::dead(inc(3)), Liveness { incarnation: inc(3), status: Status::Dead });
}

#[test]
fn incarnation_next_saturates() {
    assert_eq!(inc(4).next(), inc(5));
    assert_eq!(inc(u64::MAX).next(), inc(u64::MAX));
}

// ---------------------------------------------------------------- RingView: own life

#[test]
fn rejoin_bumps_own_incarnation() {
    let mut v = view(3, 2);
    assert_eq!(v.rejoin(), inc(2));
    assert_eq!(v.my_incarnation(), inc(2));
    assert_eq!(v.liveness(n(2)), Some(Liveness::alive(inc(2))));
    assert_eq!(v.rejoin(), inc(3));
    assert_eq!(v.my_incarnation(), inc(3));
    // Nothing else changes.
    assert_eq!(v.liveness(n(1)), Some(Liveness::alive(inc(0))));
    assert_eq!(v.liveness(n(3)), Some(Liveness::alive(inc(0))));
}

// ---------------------------------------------------------------- RingView: observe

#[test]
fn observe_unknown_sender() {
    let mut v = view(3, 1);
    let before = v.clone();
    assert_eq!(v.observe(n(4), inc(1)), Observation::Unknown);
    assert_eq!(v.observe(n(0), inc(1)), Observation::Unknown);
    assert_eq!(v, before);
}

#[test]
fn observe_first_contact() {
    let mut v = view(3, 1);
    // Incarnation 0 from a never-heard-of node: the known (unknown) life.
    assert_eq!(v.observe(n(2), inc(0)), Observation::Current);
    assert_eq!(v.liveness(n(2)), Some(Liveness::alive(inc(0))));
    // A real incarnation: a new life, recorded.
    assert_eq!(v.observe(n(2), inc(100)), Observation::NewLife { previous: Liveness::alive(inc(0)) });
    assert_eq!(v.liveness(n(2)), Some(Liveness::alive(inc(100))));
}

#[test]
fn observe_current_stale_newlife() {
    let mut v = view(3, 1);
    v.observe(n(3), inc(10));
    let before = v.clone();
    assert_eq!(v.observe(n(3), inc(10)), Observation::Current);
    assert_eq!(v.observe(n(3), inc(9)), Observation::Stale);
    assert_eq!(v.observe(n(3), inc(0)), Observation::Stale);
    assert_eq!(v, before, "current and stale messages change nothing");
    assert_eq!(v.observe(n(3), inc(11)), Observation::NewLife { previous: Liveness::alive(inc(10)) });
    assert_eq!(v.liveness(n(3)), Some(Liveness::alive(inc(11))));
    assert_eq!(v.observe(n(3), inc(10)), Observation::Stale);
}

#[test]
fn observe_excluded_then_restart() {
    let mut v = view(3, 1);
    v.observe(n(2), inc(5));
    assert_eq!(v.suspect(n(2)), Some(Liveness::dead(inc(5))));
    let before = v.clone();
    assert_eq!(v.observe(n(2), inc(5)), Observation::Excluded);
    assert_eq!(v.observe(n(2), inc(4)), Observation::Stale);
    assert_eq!(v, before, "an excluded life stays dead");
    assert_eq!(v.observe(n(2), inc(6)), Observation::NewLife { previous: Liveness::dead(inc(5)) });
    assert!(v.is_alive(n(2)));
    assert_eq!(v.liveness(n(2)), Some(Liveness::alive(inc(6))));
    assert_eq!(v.successor(), Some(n(2)));
}

#[test]
fn observe_claims_from_self() {
    let mut v = view(3, 1);
    v.rejoin(); // life 2
    let before = v.clone();
    assert_eq!(v.observe(n(1), inc(2)), Observation::Current);
    assert_eq!(v.observe(n(1), inc(1)), Observation::Stale);
    assert_eq!(v.observe(n(1), inc(3)), Observation::Stale, "only our own life is current");
    assert_eq!(v, before);
}

// ---------------------------------------------------------------- RingView: suspect / mark_dead

#[test]
fn suspect_marks_dead_in_known_life() {
    let mut v = view(3, 1);
    assert_eq!(v.suspect(n(2)), Some(Liveness::dead(inc(0))));
    assert_eq!(v.liveness(n(2)), Some(Liveness::dead(inc(0))));
    assert_eq!(v.suspect(n(2)), None, "already dead: no change");
    v.observe(n(3), inc(7));
    assert_eq!(v.suspect(n(3)), Some(Liveness::dead(inc(7))));
    assert_eq!(v.suspect(n(9)), None);
}

#[test]
fn suspect_self_is_ignored() {
    let mut v = view(3, 1);
    let before = v.clone();
    assert_eq!(v.suspect(n(1)), None);
    assert_eq!(v, before);
    assert!(v.is_alive(n(1)));
}

#[test]
fn mark_dead_with_older_incarnation_changes_nothing() {
    let mut v = view(3, 1);
    v.observe(n(2), inc(5));
    let before = v.clone();
    assert!(!v.mark_dead(n(2), inc(4)));
    assert!(!v.mark_dead(n(2), inc(0)));
    assert_eq!(v, before);
    assert!(v.mark_dead(n(2), inc(5)));
    assert_eq!(v.liveness(n(2)), Some(Liveness::dead(inc(5))));
    assert!(!v.mark_dead(n(2), inc(5)));
}

#[test]
fn mark_dead_with_newer_incarnation_records_that_life() {
    let mut v = view(3, 1);
    v.observe(n(3), inc(5));
    assert!(v.mark_dead(n(3), inc(8)));
    assert_eq!(v.liveness(n(3)), Some(Liveness::dead(inc(8))));
    // Messages from the life in between are now stale, and that life excluded.
    assert_eq!(v.observe(n(3), inc(7)), Observation::Stale);
    assert_eq!(v.observe(n(3), inc(8)), Observation::Excluded);
}

#[test]
fn mark_dead_of_self_or_stranger_is_ignored() {
    let mut v = view(3, 1);
    let before = v.clone();
    assert!(!v.mark_dead(n(1), inc(1)));
    assert!(!v.mark_dead(n(1), inc(5)));
    assert!(!v.mark_dead(n(4), inc(5)));
    assert_eq!(v, before);
}

// ---------------------------------------------------------------- properties

fn arb_liveness() -> impl Strategy<Value = Liveness> {
    (0u64..4, any::<bool>()).prop_map(|(i, dead)| if dead { Liveness::dead(inc(i)) } else { Liveness::alive(inc(i)) })
}

/// A ring size, our id, and for every member whether it is dead (ignored for us).
fn arb_ring() -> impl Strategy<Value = (u32, u32, Vec<bool>)> {
    (1u32..=10).prop_flat_map(|size| (Just(size), 1..=size, proptest::collection::vec(any::<bool>(), size as usize)))
}

fn ring_with_dead(size: u32, me: u32, dead: &[bool]) -> RingView {
    let mut v = view(size, me);
    for (i, d) in dead.iter().enumerate() {
        if *d {
            v.suspect(n(i as u32 + 1));
        }
    }
    v
}

/// Reports of (member id, liveness); ids 0 and 6 are strangers to a 5-ring.
type Reports = Vec<(u32, Liveness)>;

/// Two shuffles of the same reports about members of a 5-ring.
fn arb_reports() -> impl Strategy<Value = (Reports, Reports)> {
    proptest::collection::vec((0u32..=6, arb_liveness()), 0..40)
        .prop_flat_map(|v| (Just(v.clone()).prop_shuffle(), Just(v).prop_shuffle()))
}

proptest! {
    #[test]
    fn membership_new_accepts_exactly_valid_lists(
        raw in proptest::collection::vec((0u32..6, 0u16..6), 0..8),
    ) {
        let members: Vec<Member> = raw.iter().map(|(id, port)| member(*id, *port)).collect();
        // Reference: the first offending member, checks in the documented order.
        let mut expected = if members.is_empty() { Err(MembershipError::Empty) } else { Ok(()) };
        for (i, m) in members.iter().enumerate() {
            if expected.is_err() {
                break;
            }
            if m.id.0 == 0 {
                expected = Err(MembershipError::ZeroId);
            } else if members[..i].iter().any(|o| o.id == m.id) {
                expected = Err(MembershipError::DuplicateId(m.id.0));
            } else if members[..i].iter().any(|o| o.addr == m.addr) {
                expected = Err(MembershipError::DuplicateAddr(m.addr));
            }
        }
        match Membership::new(members.clone()) {
            Ok(m) => {
                prop_assert_eq!(expected, Ok(()));
                prop_assert_eq!(m.members(), &members[..]);
                for (i, mm) in members.iter().enumerate() {
                    prop_assert_eq!(m.position(mm.id), Some(i));
                    prop_assert_eq!(m.addr(mm.id), Some(mm.addr));
                    prop_assert_eq!(m.id_at(mm.addr), Some(mm.id));
                }
                prop_assert!(2 * m.majority() > m.len());
                prop_assert!(2 * (m.majority() - 1) <= m.len());
            }
            Err(e) => prop_assert_eq!(expected, Err(e)),
        }
    }

    #[test]
    fn merge_order_does_not_matter((a, b) in arb_reports(), me in 1u32..=5) {
        let mut va = view(5, me);
        let mut vb = view(5, me);
        for (id, l) in &a {
            va.merge(n(*id), *l);
        }
        for (id, l) in &b {
            vb.merge(n(*id), *l);
        }
        prop_assert_eq!(&va, &vb);
        // Both equal the per-member maximum, our own entry untouched.
        let mut best: BTreeMap<u32, Liveness> = (1..=5).map(|i| (i, Liveness::alive(inc(0)))).collect();
        best.insert(me, Liveness::alive(inc(1)));
        for (id, l) in &a {
            if *id != me {
                if let Some(cur) = best.get_mut(id) {
                    *cur = (*cur).max(*l);
                }
            }
        }
        prop_assert_eq!(va.entries().map(|(id, l)| (id.0, l)).collect::<BTreeMap<_, _>>(), best);
        // Merging everything again changes nothing.
        let again = va.clone();
        for (id, l) in &a {
            prop_assert!(!va.merge(n(*id), *l));
        }
        prop_assert_eq!(va, again);
    }

    #[test]
    fn merge_reports_change_exactly_when_greater(
        start in proptest::collection::vec((1u32..=4, arb_liveness()), 0..10),
        id in 1u32..=5,
        report in arb_liveness(),
    ) {
        let mut v = view(4, 1);
        for (i, l) in start {
            v.merge(n(i), l);
        }
        let before = v.liveness(n(id));
        let changed = v.merge(n(id), report);
        let should = id != 1 && before.is_some_and(|b| report > b);
        prop_assert_eq!(changed, should);
        if should {
            prop_assert_eq!(v.liveness(n(id)), Some(report));
        } else {
            prop_assert_eq!(v.liveness(n(id)), before);
        }
    }

    #[test]
    fn successor_walk_visits_alive_nodes_in_ring_order((size, me, dead) in arb_ring()) {
        let v = ring_with_dead(size, me, &dead);
        let alive: Vec<NodeId> = v.alive_from_me();
        prop_assert_eq!(alive.len(), v.alive_count());
        prop_assert_eq!(alive.last().copied(), Some(n(me)));
        // Expected: live ids after me in configured order, then me.
        let expected: Vec<NodeId> = (1..=size)
            .map(|k| (me - 1 + k) % size + 1)
            .filter(|i| *i == me || !dead[*i as usize - 1])
            .map(NodeId)
            .collect();
        prop_assert_eq!(&alive, &expected);
        if alive.len() == 1 {
            prop_assert_eq!(v.successor(), None);
            prop_assert_eq!(v.predecessor(), None);
        } else {
            let mut walk = Vec::new();
            let mut cur = n(me);
            for _ in 0..size {
                cur = v.successor_of(cur).unwrap();
                walk.push(cur);
                if cur == n(me) {
                    break;
                }
            }
            prop_assert_eq!(&walk, &alive);
            // And backwards, the same ring reversed.
            let mut back = Vec::new();
            let mut cur = n(me);
            for _ in 0..size {
                cur = v.predecessor_of(cur).unwrap();
                back.push(cur);
                if cur == n(me) {
                    break;
                }
            }
            back.reverse();
            let mut rotated = alive.clone();
            rotated.rotate_right(1);
            prop_assert_eq!(back, rotated);
        }
    }

    #[test]
    fn predecessor_inverts_successor((size, me, dead) in arb_ring()) {
        let v = ring_with_dead(size, me, &dead);
        let alive = v.alive_from_me();
        if alive.len() >= 2 {
            for x in &alive {
                let s = v.successor_of(*x).unwrap();
                prop_assert!(v.is_alive(s));
                prop_assert_ne!(s, *x);
                prop_assert_eq!(v.predecessor_of(s), Some(*x));
                prop_assert_eq!(v.successor_of(v.predecessor_of(*x).unwrap()), Some(*x));
            }
        }
        // Every node, dead or alive, lands on a live node other than itself.
        for id in v.ids().to_vec() {
            match v.successor_of(id) {
                Some(s) => {
                    prop_assert!(v.is_alive(s));
                    prop_assert_ne!(s, id);
                }
                None => prop_assert!(alive.iter().all(|a| *a == id)),
            }
        }
    }

    #[test]
    fn dead_gap_is_what_lies_before_the_successor((size, me, dead) in arb_ring()) {
        let v = ring_with_dead(size, me, &dead);
        let gap = v.dead_gap_after_me();
        prop_assert!(gap.iter().all(|id| !v.is_alive(*id)));
        // Gap, then successor (or back to me), are the next members in configured order.
        let mut next = gap.clone();
        next.push(v.successor().unwrap_or(n(me)));
        let configured: Vec<NodeId> = (1..=next.len() as u32).map(|k| NodeId((me - 1 + k) % size + 1)).collect();
        prop_assert_eq!(next, configured);
    }

    #[test]
    fn observe_classifies_as_documented(
        start in proptest::collection::vec((1u32..=4, arb_liveness()), 0..10),
        id in 0u32..=5,
        msg_inc in 0u64..5,
    ) {
        let mut v = view(4, 1);
        for (i, l) in start {
            v.merge(n(i), l);
        }
        let before = v.clone();
        let known = v.liveness(n(id));
        let got = v.observe(n(id), inc(msg_inc));
        match known {
            None => prop_assert_eq!(got, Observation::Unknown),
            Some(k) if id == 1 => {
                let want = if inc(msg_inc) == k.incarnation { Observation::Current } else { Observation::Stale };
                prop_assert_eq!(got, want);
            }
            Some(k) if inc(msg_inc) < k.incarnation => prop_assert_eq!(got, Observation::Stale),
            Some(k) if inc(msg_inc) == k.incarnation && k.status == Status::Dead => {
                prop_assert_eq!(got, Observation::Excluded)
            }
            Some(k) if inc(msg_inc) == k.incarnation => prop_assert_eq!(got, Observation::Current),
            Some(k) => {
                prop_assert_eq!(got, Observation::NewLife { previous: k });
                prop_assert_eq!(v.liveness(n(id)), Some(Liveness::alive(inc(msg_inc))));
                // Only that entry changed.
                for (other, l) in before.entries() {
                    if other != n(id) {
                        prop_assert_eq!(v.liveness(other), Some(l));
                    }
                }
            }
        }
        if !matches!(got, Observation::NewLife { .. }) {
            prop_assert_eq!(&v, &before);
        }
        // Our own life is never touched.
        prop_assert_eq!(v.liveness(n(1)), Some(Liveness::alive(inc(1))));
    }

    #[test]
    fn self_stays_alive_whatever_is_reported(
        reports in proptest::collection::vec((1u32..=3, arb_liveness()), 0..20),
        rejoins in 0u8..3,
    ) {
        let mut v = view(3, 2);
        for _ in 0..rejoins {
            v.rejoin();
        }
        let mine = v.my_incarnation();
        prop_assert_eq!(mine, inc(1 + u64::from(rejoins)));
        for (id, l) in reports {
            v.merge(n(id), l);
            v.suspect(n(id));
            v.mark_dead(n(id), l.incarnation);
        }
        prop_assert_eq!(v.liveness(n(2)), Some(Liveness::alive(mine)));
        prop_assert_eq!(v.alive_from_me().last().copied(), Some(n(2)));
    }
}

#[test]
fn presume_alive_takes_every_death_back_keeping_the_lives() {
    let mut v = view(5, 1);
    let fresh = v.digest();
    v.merge(n(2), Liveness::alive(inc(7)));
    v.mark_dead(n(2), inc(7));
    v.mark_dead(n(4), inc(0));
    v.rejoin();
    assert_eq!(v.successor(), Some(n(3)));
    assert_eq!(v.presume_alive(), 2);
    assert_eq!(v.liveness(n(2)), Some(Liveness::alive(inc(7))));
    assert_eq!(v.liveness(n(4)), Some(Liveness::alive(inc(0))));
    assert_eq!(v.liveness(n(1)), Some(Liveness::alive(inc(2))));
    assert_eq!(v.successor(), Some(n(2)));
    assert_eq!(v.alive_count(), 5);
    // The digest is kept up to date (alive entries hash without their life).
    assert_eq!(v.digest(), fresh);
    // Nothing left to take back; the deaths merge in again.
    assert_eq!(v.presume_alive(), 0);
    assert!(v.mark_dead(n(2), inc(7)));
}
