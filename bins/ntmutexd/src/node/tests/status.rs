//! `ftctl status`.

use super::*;
use ftcore::PeerStatus;

// ===== status =============================================================

fn details(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn status_reports_role_peers_and_details() {
    let mut h = holder(3, 1, 2);
    let st = ftcore::status_of(&h, &Membership::of_size(3));
    assert_eq!((st.daemon.as_str(), st.node, st.incarnation), ("ntmutexd", n(1), INC));
    assert_eq!(st.role, "holder (idle)");
    assert_eq!(
        st.peers,
        vec![
            PeerStatus { id: n(2), addr: "127.0.0.1:20002".into(), up: true, incarnation: Incarnation(0) },
            PeerStatus { id: n(3), addr: "127.0.0.1:20003".into(), up: true, incarnation: Incarnation(0) },
        ]
    );
    assert_eq!(
        st.details,
        details(&[
            ("has_token", "true"),
            ("last", "root"),
            ("next", "none"),
            ("position", "0"),
            ("epoch", "1024"),
            ("fence", "0"),
            ("accesses", "0"),
            ("local_waiting", "0"),
            ("recovered", "true"),
        ])
    );
    acquire(&mut h, T0, 1);
    acquire(&mut h, T0, 2);
    let st = ftcore::status_of(&h, &Membership::of_size(3));
    assert_eq!(st.role, "holder (granted)");
    assert_eq!(st.details[5], ("fence".to_string(), fence(E, 1).to_string()));
    assert_eq!(st.details[6..8], details(&[("accesses", "1"), ("local_waiting", "1")]));

    let mut w = committed(3, 2, 2, 1, Some(1), &[1]);
    w.next = Some((n(3), 4));
    w.last = Last::Parent(n(3));
    w.detect.suspected.insert(n(1));
    w.detect.peer_inc.insert(n(3), Incarnation(7));
    let st = ftcore::status_of(&w, &Membership::of_size(3));
    assert_eq!(st.role, "waiting");
    assert!(!st.peers[0].up);
    assert_eq!(st.peers[1].incarnation, Incarnation(7));
    assert_eq!(
        st.details,
        details(&[
            ("has_token", "false"),
            ("last", "3"),
            ("next", "3"),
            ("position", "1"),
            ("epoch", "1024"),
            ("fence", "0"),
            ("accesses", "0"),
            ("local_waiting", "0"),
            ("recovered", "true"),
        ])
    );

    let mut r = waiting(3, 3, 2, 1);
    r.start_m3(T0);
    assert_eq!(r.status().role, "recovering (m3)");
    let mut r = committed(3, 3, 2, 1, Some(2), &[2, 1]);
    r.start_recovery(T0);
    assert_eq!(r.status().role, "recovering (m1)");
    r.start_search(T0, Mech::M2, None);
    assert_eq!(r.status().role, "recovering (m2)");

    assert_eq!(fresh(3, 2, 2).status().role, "joining");
    let st = site(3, 2, 2).status();
    assert_eq!(st.role, "idle");
    assert_eq!(st.details[1], ("last".to_string(), "1".to_string()));
    let mut u = site(3, 2, 2);
    u.last = Last::Unknown;
    assert_eq!(u.status().details[1], ("last".to_string(), "unknown".to_string()));
}
