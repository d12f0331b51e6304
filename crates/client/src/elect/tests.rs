use std::time::Duration;

use lockservice::{LeaderInfo, LockName, LockReply, LockRequest};
use timer::{monotonic_now, Instant};

use super::*;
use crate::fake::{fake_daemon, fake_daemon_n, Conn, STEP};
use crate::lock::Grant;

/// What lockservice's one-lock queue (ntmutexd, tokenwatchd) says to a
/// campaign or an observe.
const NO_ELECTIONS: &str = "elections are served by electd: this daemon does not elect (docs/elections.md)";

fn name(s: &str) -> LockName {
    LockName::parse(s).unwrap()
}

fn leader(node: u64, fence: u128, value: &str) -> Option<LeaderInfo> {
    Some(LeaderInfo { node, fence, value: value.into() })
}

/// CLOCK_MONOTONIC `d` from now, in microseconds.
fn in_us(d: Duration) -> u64 {
    (monotonic_now() + d).as_micros()
}

/// Expects `Observe { web, watch }`.
async fn expect_observe(conn: &mut Conn, watch: bool) {
    assert_eq!(conn.recv().await, Some(LockRequest::Observe { name: name("web"), watch }));
}

async fn say(conn: &mut Conn, leader: Option<LeaderInfo>) {
    conn.send(LockReply::Leader { name: name("web"), leader }).await;
}

#[test]
fn requests_labels_values_and_the_no_elections_refusal() {
    assert_eq!(
        campaign_request(&name("web"), "host-a", Duration::from_millis(1500)),
        LockRequest::Campaign { name: name("web"), value: "host-a".into(), timeout_ms: 1500 }
    );
    // Forever is u64::MAX ms.
    assert_eq!(
        campaign_request(&name("web"), "", FOREVER),
        LockRequest::Campaign { name: name("web"), value: String::new(), timeout_ms: u64::MAX }
    );
    assert_eq!(election_label(&name("db/primary")), "election `db/primary`");
    assert_eq!(check_value(&"x".repeat(1024)), Ok(()));
    assert_eq!(check_value(""), Ok(()));
    assert_eq!(check_value(&"x".repeat(1025)), Err("the value has 1025 bytes, the most is 1024".into()));
    // Bytes, not characters: 512 two-byte characters fit, 513 do not.
    assert_eq!(check_value(&"é".repeat(512)), Ok(()));
    assert_eq!(check_value(&"é".repeat(513)), Err("the value has 1026 bytes, the most is 1024".into()));
    assert!(refuses_elections(NO_ELECTIONS));
    assert!(refuses_elections(&format!("election `web`: {NO_ELECTIONS}")));
    assert!(!refuses_elections("no coordinator answered: an election or a failover is under way; try again"));
    assert!(!refuses_elections("this daemon serves one unnamed lock: named locks are not supported"));
    assert!(!refuses_elections("local queue full"));
}

/// The arithmetic FOREVER relies on, daemon side: a deadline of now plus
/// `u64::MAX` ms saturates at the end of time, and a sleep until it is
/// capped, never a panic.
#[test]
fn forever_saturates_instead_of_overflowing() {
    let now = monotonic_now();
    let timeout_ms = match campaign_request(&name("web"), "", FOREVER) {
        LockRequest::Campaign { timeout_ms, .. } => timeout_ms,
        other => panic!("{other:?}"),
    };
    assert_eq!(now + Duration::from_millis(timeout_ms), Instant::from_micros(u64::MAX));
    let clock = timer::RealClock::new();
    assert!(clock.to_std(Instant::from_micros(u64::MAX)) > std::time::Instant::now() + Duration::from_secs(86_400));
}

#[tokio::test]
async fn a_campaign_is_sent_and_answered_as_an_acquire() {
    let lease_until_us = in_us(Duration::from_secs(30));
    let addr = fake_daemon(move |mut conn| async move {
        assert_eq!(
            conn.recv().await,
            Some(LockRequest::Campaign { name: name("web"), value: "host-a:8080".into(), timeout_ms: 2500 })
        );
        conn.send(LockReply::Granted { fence: 77, lease_until_us }).await;
        let _ = conn.recv().await;
    })
    .await;
    let mut client = LockClient::connect(addr).await.unwrap();
    let answer = campaign(&mut client, &name("web"), "host-a:8080", Duration::from_millis(2500)).await.unwrap();
    assert_eq!(answer, Answer::Granted(Grant { fence: 77, lease_until: Instant::from_micros(lease_until_us) }));
}

#[tokio::test]
async fn a_value_over_1_kib_is_refused_without_sending_anything() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let addr = fake_daemon(|mut conn| async move {
        // The client closes without a request.
        tx.send(conn.recv().await).unwrap();
    })
    .await;
    let mut client = LockClient::connect(addr).await.unwrap();
    let answer = campaign(&mut client, &name("web"), &"v".repeat(1025), FOREVER).await.unwrap();
    assert_eq!(answer, Answer::Refused("the value has 1025 bytes, the most is 1024".into()));
    drop(client);
    assert_eq!(rx.await.unwrap(), None);

    // campaign_at does not even connect.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let e = campaign_at(dead, &name("web"), &"v".repeat(2000), FOREVER).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Refused(r) if r == "election `web`: the value has 2000 bytes, the most is 1024"),
        "{e:?}"
    );
    // Nor is the unnamed lock an election.
    let e = campaign_at(dead, &LockName::unnamed(), "v", FOREVER).await.unwrap_err();
    assert!(matches!(&e, ClientError::Refused(r) if r.starts_with("election ``: invalid election name \"\"")), "{e:?}");
}

#[tokio::test]
async fn campaign_at_gives_a_guard_named_by_the_election_and_resigns() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let addr = fake_daemon(|mut conn| async move {
        assert_eq!(
            conn.recv().await,
            Some(LockRequest::Campaign { name: name("web"), value: "a".into(), timeout_ms: u64::MAX })
        );
        conn.send(LockReply::Granted { fence: 1 << 64 | 3, lease_until_us: in_us(Duration::from_secs(30)) }).await;
        assert_eq!(conn.recv().await, Some(LockRequest::Release));
        conn.send(LockReply::Released).await;
        tx.send(()).unwrap();
    })
    .await;
    let guard = campaign_at(addr, &name("web"), "a", FOREVER).await.unwrap().expect("leads");
    assert_eq!(guard.name(), &name("web"));
    assert_eq!(guard.fence(), 1 << 64 | 3);
    assert!(guard.lease_left() > Duration::from_secs(29), "{:?}", guard.lease_left());
    guard.release().await.unwrap();
    rx.await.unwrap();
}

#[tokio::test]
async fn campaign_at_refusals_timeouts_and_losses_name_the_election() {
    let addr = fake_daemon(|mut conn| async move {
        let _ = conn.recv().await;
        conn.send(LockReply::Refused { reason: NO_ELECTIONS.into() }).await;
    })
    .await;
    let e = campaign_at(addr, &name("web"), "a", Duration::ZERO).await.unwrap_err();
    let ClientError::Refused(reason) = &e else { panic!("{e:?}") };
    assert_eq!(reason, &format!("election `web`: {NO_ELECTIONS}"));
    assert!(refuses_elections(reason));

    let addr = fake_daemon(|mut conn| async move {
        assert_eq!(
            conn.recv().await,
            Some(LockRequest::Campaign { name: name("web"), value: "a".into(), timeout_ms: 0 })
        );
        conn.send(LockReply::TimedOut).await;
    })
    .await;
    assert!(campaign_at(addr, &name("web"), "a", Duration::ZERO).await.unwrap().is_none());

    let addr = fake_daemon(|mut conn| async move {
        let _ = conn.recv().await;
        conn.send(LockReply::LockLost { reason: "daemon is shutting down".into() }).await;
    })
    .await;
    let e = campaign_at(addr, &name("web"), "a", Duration::ZERO).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Refused(r) if r == "election `web` lost while waiting: daemon is shutting down"),
        "{e:?}"
    );

    // A daemon's error response is a refusal too.
    let addr = fake_daemon(|mut conn| async move {
        let _ = conn.recv().await;
        conn.send_error("too many clients").await;
    })
    .await;
    let e = campaign_at(addr, &name("web"), "a", Duration::ZERO).await.unwrap_err();
    assert!(matches!(&e, ClientError::Refused(r) if r == "election `web`: too many clients"), "{e:?}");
}

#[tokio::test]
async fn observe_asks_once_and_returns_the_leader_or_none() {
    let addr = fake_daemon(|mut conn| async move {
        expect_observe(&mut conn, false).await;
        say(&mut conn, leader(2, 1 << 64 | 9, "host-b")).await;
    })
    .await;
    assert_eq!(observe_at(addr, &name("web")).await.unwrap(), leader(2, 1 << 64 | 9, "host-b"));

    let addr = fake_daemon(|mut conn| async move {
        expect_observe(&mut conn, false).await;
        say(&mut conn, None).await;
    })
    .await;
    assert_eq!(observe_at(addr, &name("web")).await.unwrap(), None);
}

#[tokio::test]
async fn observe_errors_are_refusals_or_unexpected() {
    let no_coordinator = "no coordinator answered: an election or a failover is under way; try again";
    let addr = fake_daemon(move |mut conn| async move {
        let _ = conn.recv().await;
        conn.send(LockReply::Refused { reason: no_coordinator.into() }).await;
    })
    .await;
    let e = observe_at(addr, &name("web")).await.unwrap_err();
    assert!(matches!(&e, ClientError::Refused(r) if r == no_coordinator), "{e:?}");

    let addr = fake_daemon(|mut conn| async move {
        let _ = conn.recv().await;
        conn.send(LockReply::Refused { reason: NO_ELECTIONS.into() }).await;
    })
    .await;
    let e = observe_at(addr, &name("web")).await.unwrap_err();
    assert!(matches!(&e, ClientError::Refused(r) if refuses_elections(r)), "{e:?}");

    let addr = fake_daemon(|mut conn| async move {
        let _ = conn.recv().await;
        conn.send(LockReply::Leader { name: name("db"), leader: None }).await;
    })
    .await;
    let e = observe_at(addr, &name("web")).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Unexpected(r) if r == "the leader of election `db` in answer to an observe of `web`"),
        "{e:?}"
    );

    let addr = fake_daemon(|mut conn| async move {
        let _ = conn.recv().await;
        conn.send(LockReply::TimedOut).await;
    })
    .await;
    let e = observe_at(addr, &name("web")).await.unwrap_err();
    assert!(matches!(&e, ClientError::Unexpected(r) if r == "`timed_out` in answer to an observe"), "{e:?}");

    // An older daemon hangs up on a request kind it does not know.
    let addr = fake_daemon(|mut conn| async move {
        let _ = conn.recv().await;
    })
    .await;
    assert!(matches!(observe_at(addr, &name("web")).await, Err(ClientError::Closed)));
}

#[test]
fn observed_replies_map_exactly() {
    let web = name("web");
    assert_eq!(
        on_observed(Ok(LockReply::Leader { name: web.clone(), leader: leader(1, 5, "v") }), &web).unwrap(),
        leader(1, 5, "v")
    );
    assert_eq!(on_observed(Ok(LockReply::Leader { name: web.clone(), leader: None }), &web).unwrap(), None);
    assert!(matches!(
        on_observed(Err(ClientError::Refused("r".into())), &web),
        Err(ClientError::Refused(r)) if r == "r"
    ));
    assert!(matches!(on_observed(Err(ClientError::Closed), &web), Err(ClientError::Closed)));
    for (reply, kind) in [
        (LockReply::Released, "released"),
        (LockReply::Granted { fence: 1, lease_until_us: 1 }, "granted"),
        (LockReply::Renewed { lease_until_us: 1 }, "renewed"),
        (LockReply::LockLost { reason: "x".into() }, "lock_lost"),
        (LockReply::Locks { locks: vec![], known: 0 }, "locks"),
    ] {
        let e = on_observed(Ok(reply), &web).unwrap_err();
        assert!(matches!(&e, ClientError::Unexpected(r) if *r == format!("`{kind}` in answer to an observe")), "{e:?}");
    }
}

#[test]
fn the_filter_passes_news_and_never_goes_back() {
    let mut f = LeaderFilter::new();
    assert_eq!(f.last(), None);
    // The first observation passes, whatever it is.
    assert_eq!(f.pass(None), Some(None));
    // "No leader" twice: dropped.
    assert_eq!(f.pass(None), None);
    assert_eq!(f.pass(leader(1, 10, "a")), Some(leader(1, 10, "a")));
    // The same again, and the same fence with another value: dropped.
    assert_eq!(f.pass(leader(1, 10, "a")), None);
    assert_eq!(f.pass(leader(3, 10, "z")), None);
    // An older leader: dropped.
    assert_eq!(f.pass(leader(2, 9, "b")), None);
    assert_eq!(f.last(), Some(&leader(1, 10, "a")));
    assert_eq!(f.pass(leader(2, 11, "b")), Some(leader(2, 11, "b")));
    // "No leader" after a leader passes; then an older leader does not,
    // though the last was "no leader".
    assert_eq!(f.pass(None), Some(None));
    assert_eq!(f.pass(leader(1, 10, "a")), None);
    assert_eq!(f.pass(leader(2, 11, "b")), None);
    assert_eq!(f.pass(None), None);
    assert_eq!(f.max_fence(), Some(11));
    assert_eq!(f.pass(leader(4, 12, "d")), Some(leader(4, 12, "d")));
    assert_eq!(f.last(), Some(&leader(4, 12, "d")));
    assert_eq!(f.max_fence(), Some(12));

    // A first leader then anything with a fence not above it.
    let mut f = LeaderFilter::new();
    assert_eq!(f.pass(leader(1, u128::MAX, "max")), Some(leader(1, u128::MAX, "max")));
    assert_eq!(f.pass(leader(2, u128::MAX, "other")), None);
    assert_eq!(f.pass(leader(2, 0, "zero")), None);
    assert_eq!(f.pass(None), Some(None));
}

#[tokio::test]
async fn a_watch_yields_each_change_and_drops_older_leaders() {
    let addr = fake_daemon(|mut conn| async move {
        expect_observe(&mut conn, true).await;
        say(&mut conn, None).await;
        say(&mut conn, None).await; // dropped: no news
        say(&mut conn, leader(1, 10, "a")).await;
        say(&mut conn, leader(1, 10, "a")).await; // dropped: the same
        conn.send(LockReply::Leader { name: name("other"), leader: leader(9, 99, "x") }).await; // skipped
        say(&mut conn, leader(2, 8, "old")).await; // dropped: older
        say(&mut conn, leader(2, 12, "b")).await;
        say(&mut conn, None).await;
        say(&mut conn, leader(2, 12, "b")).await; // dropped: not above 12
        say(&mut conn, leader(3, 13, "c")).await;
        let _ = conn.recv().await;
    })
    .await;
    let mut w = watch(addr, &name("web")).await.unwrap();
    assert_eq!(w.name(), &name("web"));
    assert_eq!(w.addr(), addr);
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(tokio::time::timeout(STEP, w.next()).await.unwrap().unwrap());
    }
    assert_eq!(seen, vec![None, leader(1, 10, "a"), leader(2, 12, "b"), None, leader(3, 13, "c")]);
    assert!(w.is_connected());
}

#[tokio::test]
async fn a_watch_reconnects_keeping_its_filter() {
    let addr = fake_daemon_n(|n, mut conn| async move {
        expect_observe(&mut conn, true).await;
        match n {
            0 => {
                say(&mut conn, leader(1, 10, "a")).await;
                say(&mut conn, leader(2, 20, "b")).await;
                // Then the daemon goes away.
            }
            _ => {
                // The new connection's answer repeats what was seen, then
                // a stale leader arrives late, then real news.
                say(&mut conn, leader(2, 20, "b")).await;
                say(&mut conn, leader(1, 10, "a")).await;
                say(&mut conn, None).await;
                say(&mut conn, leader(3, 30, "c")).await;
                let _ = conn.recv().await;
            }
        }
    })
    .await;
    let mut w = Watch::start(addr, &name("web")).await.unwrap();
    assert_eq!(w.next().await.unwrap(), leader(1, 10, "a"));
    assert_eq!(w.next().await.unwrap(), leader(2, 20, "b"));
    assert!(matches!(w.next().await, Err(ClientError::Closed)));
    assert!(!w.is_connected());
    // Disconnected: Closed until reconnected.
    assert!(matches!(w.next().await, Err(ClientError::Closed)));
    w.reconnect().await.unwrap();
    assert!(w.is_connected());
    assert_eq!(tokio::time::timeout(STEP, w.next()).await.unwrap().unwrap(), None);
    assert_eq!(tokio::time::timeout(STEP, w.next()).await.unwrap().unwrap(), leader(3, 30, "c"));
    assert_eq!(w.filter().max_fence(), Some(30));
}

#[tokio::test]
async fn a_watch_refused_by_a_daemon_that_does_not_elect_says_so() {
    let addr = fake_daemon(|mut conn| async move {
        expect_observe(&mut conn, true).await;
        conn.send(LockReply::Refused { reason: NO_ELECTIONS.into() }).await;
        let _ = conn.recv().await;
    })
    .await;
    let mut w = Watch::start(addr, &name("web")).await.unwrap();
    let e = w.next().await.unwrap_err();
    assert!(matches!(&e, ClientError::Refused(r) if r == NO_ELECTIONS), "{e:?}");
    assert!(!w.is_connected());

    // A `released` the client did not ask for ends the watch too.
    let addr = fake_daemon(|mut conn| async move {
        expect_observe(&mut conn, true).await;
        conn.send(LockReply::Released).await;
        let _ = conn.recv().await;
    })
    .await;
    let mut w = Watch::start(addr, &name("web")).await.unwrap();
    let e = w.next().await.unwrap_err();
    assert!(matches!(&e, ClientError::Unexpected(r) if r == "the daemon ended the watch (`released`)"), "{e:?}");
}

#[tokio::test]
async fn a_reconnection_to_a_dead_daemon_fails_and_can_be_retried() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stream, _) = tokio::join!(LockClient::connect(addr), listener.accept());
    let mut w = Watch::over(stream.unwrap(), &name("web")).await.unwrap();
    drop(listener);
    // The accepted end was dropped with the listener's accept result.
    assert!(matches!(tokio::time::timeout(STEP, w.next()).await.unwrap(), Err(ClientError::Closed)));
    let e = w.reconnect().await.unwrap_err();
    assert!(matches!(e, ClientError::Connect { addr: a, .. } if a == addr), "{e:?}");
    assert!(!w.is_connected());
}

#[tokio::test]
async fn stop_sends_release_and_waits_for_released() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let addr = fake_daemon(|mut conn| async move {
        expect_observe(&mut conn, true).await;
        say(&mut conn, None).await;
        assert_eq!(conn.recv().await, Some(LockRequest::Release));
        // A change in flight, then the confirmation.
        say(&mut conn, leader(1, 1, "a")).await;
        conn.send(LockReply::Released).await;
        tx.send(()).unwrap();
        let _ = conn.recv().await;
    })
    .await;
    let mut w = Watch::start(addr, &name("web")).await.unwrap();
    assert_eq!(w.next().await.unwrap(), None);
    w.stop().await.unwrap();
    rx.await.unwrap();
}

#[tokio::test]
async fn names_that_are_no_elections_are_refused_before_sending() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let addr = fake_daemon(|mut conn| async move {
        tx.send(conn.recv().await).unwrap();
    })
    .await;
    let mut client = LockClient::connect(addr).await.unwrap();
    let e = observe(&mut client, &LockName::unnamed()).await.unwrap_err();
    assert!(matches!(&e, ClientError::Refused(r) if r.starts_with("invalid election name \"\"")), "{e:?}");
    let internal = LockName::election(&name("web"));
    let answer = campaign(&mut client, &internal, "v", FOREVER).await.unwrap();
    assert_eq!(
        answer,
        Answer::Refused("invalid election name \"elect:web\": a name is 1-128 bytes of A-Z a-z 0-9 . _ / -".into())
    );
    drop(client);
    assert_eq!(rx.await.unwrap(), None);
}

/// The client API's wire bytes of the election requests (kinds 4 and 5,
/// appended after the lock requests' 0-3).
#[test]
fn election_request_bytes_are_pinned() {
    use wire::ClientCodec;
    let body = |r: &LockRequest| ClientCodec::<LockRequest, LockRequest>::encode_body(r).expect("encodes").to_vec();
    let got = vec![
        body(&LockRequest::Campaign { name: name("db"), value: "v".into(), timeout_ms: 300 }),
        body(&LockRequest::Observe { name: name("db"), watch: true }),
    ];
    // magic "FTCL", version 1, kind (u16, big-endian), postcard body.
    let want: Vec<Vec<u8>> = vec![
        vec![70, 84, 67, 76, 1, 0, 4, 4, 2, b'd', b'b', 1, b'v', 172, 2],
        vec![70, 84, 67, 76, 1, 0, 5, 5, 2, b'd', b'b', 1],
    ];
    assert_eq!(got, want);
}
