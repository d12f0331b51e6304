//! `ftctl elect` against a scripted fake daemon (campaigns, observes,
//! watches), and against a real daemon that does not elect (ntmutexd; it
//! must have been built: `cargo build --workspace --bins`).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::fake::{lease, Conn, FakeDaemon, LONG, STEP};
use common::{finish, run, spawn, spawn_with_env};
use lockservice::{LeaderInfo, LockName, LockReply, LockRequest};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// What lockservice's one-lock queue (ntmutexd, tokenwatchd) says to a
/// campaign or an observe.
const NO_ELECTIONS: &str = "elections are served by electd: this daemon does not elect (docs/elections.md)";

/// A fence of epoch 1: 2⁶⁴ + `counter`.
fn fence(counter: u64) -> u128 {
    (1u128 << 64) | u128::from(counter)
}

fn web() -> LockName {
    LockName::parse("web").unwrap()
}

fn leader(node: u64, fence: u128, value: &str) -> Option<LeaderInfo> {
    Some(LeaderInfo { node, fence, value: value.into() })
}

/// `ftctl --addr ADDR elect ARGS…`.
fn ftctl_elect(addr: &str, args: &[&str]) -> Child {
    let mut all = vec!["--addr", addr, "elect"];
    all.extend_from_slice(args);
    spawn(&all)
}

/// This host's name, as ftctl's default `--value` should be.
fn host_name() -> String {
    let text = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    text.trim_end_matches('\n').to_owned()
}

/// Expects a campaign in `web` with `value` and `timeout_ms`.
async fn expect_campaign(conn: &mut Conn, value: &str, timeout_ms: u64) {
    assert_eq!(conn.recv().await, Some(LockRequest::Campaign { name: web(), value: value.into(), timeout_ms }));
}

/// Expects an observe of `web`.
async fn expect_observe(conn: &mut Conn, watch: bool) {
    assert_eq!(conn.recv().await, Some(LockRequest::Observe { name: web(), watch }));
}

async fn say(conn: &mut Conn, leader: Option<LeaderInfo>) {
    conn.send(LockReply::Leader { name: web(), leader }).await;
}

fn signal(pid: u32, sig: &str) {
    assert!(Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap().success());
}

/// ftctl's stdout, line by line as it prints them.
struct Stdout(Lines<BufReader<ChildStdout>>);

impl Stdout {
    fn of(child: &mut Child) -> Stdout {
        Stdout(BufReader::new(child.stdout.take().expect("stdout piped")).lines())
    }

    /// The next line printed (within STEP).
    async fn line(&mut self) -> String {
        tokio::time::timeout(STEP, self.0.next_line())
            .await
            .expect("ftctl printed nothing more")
            .unwrap()
            .expect("ftctl closed its stdout")
    }

    /// Everything left until ftctl closes its stdout.
    async fn rest(&mut self) -> Vec<String> {
        let mut rest = Vec::new();
        while let Some(line) = tokio::time::timeout(STEP, self.0.next_line()).await.expect("stdout open").unwrap() {
            rest.push(line);
        }
        rest
    }
}

#[tokio::test]
async fn leading_runs_cmd_with_the_election_env_and_resigns_on_exit() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("env");
    let daemon = FakeDaemon::start().await;
    let script = format!(
        "echo \"$FTCOORD_FENCE|$FTCOORD_ELECTION|$FTCOORD_LEADER_VALUE|${{FTCOORD_LOCK_NAME-unset}}\" > {}; exit 4",
        file.display()
    );
    // An outer lock's name would describe another hold: it is removed.
    let ftctl = spawn_with_env(
        &["--addr", &daemon.addr, "elect", "web", "--value", "host-a:8080", "--", "sh", "-c", &script],
        &[("FTCOORD_LOCK_NAME", "outer")],
    );

    let mut conn = daemon.accept().await;
    // No --timeout: forever, u64::MAX ms.
    expect_campaign(&mut conn, "host-a:8080", u64::MAX).await;
    conn.send(LockReply::Granted { fence: fence(5), lease_until_us: lease(LONG) }).await;
    assert_eq!(conn.recv().await, Some(LockRequest::Release), "no resignation after the command");
    conn.send(LockReply::Released).await;

    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 4, "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "18446744073709551621|web|host-a:8080|unset\n");
    assert!(out.stderr.is_empty(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[tokio::test]
async fn the_value_defaults_to_the_host_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("value");
    let daemon = FakeDaemon::start().await;
    let script = format!("echo \"$FTCOORD_LEADER_VALUE\" > {}", file.display());
    let ftctl = ftctl_elect(&daemon.addr, &["web", "--timeout", "5s", "--", "sh", "-c", &script]);

    let mut conn = daemon.accept().await;
    let host = host_name();
    expect_campaign(&mut conn, &host, 5000).await;
    conn.send(LockReply::Granted { fence: fence(1), lease_until_us: lease(LONG) }).await;
    assert_eq!(conn.recv().await, Some(LockRequest::Release));
    conn.send(LockReply::Released).await;

    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("{host}\n"));
}

#[tokio::test]
async fn a_value_over_1_kib_exits_2_without_connecting() {
    let daemon = FakeDaemon::start().await;
    let value = "x".repeat(1025);
    let out = finish(ftctl_elect(&daemon.addr, &["web", "--value", &value, "--", "true"]), STEP).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.stderr, "ftctl: election `web`: the value has 1025 bytes, the most is 1024\n");
    assert!(!daemon.was_connected().await, "ftctl connected with a value it knew to be too long");
}

#[tokio::test]
async fn a_value_of_1_kib_is_sent_and_a_leader_elsewhere_is_75() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let daemon = FakeDaemon::start().await;
    let value = "é".repeat(512); // 1024 bytes
    let script = format!("touch {}", marker.display());
    let ftctl = ftctl_elect(&daemon.addr, &["web", "--value", &value, "--timeout", "0", "--", "sh", "-c", &script]);
    let mut conn = daemon.accept().await;
    expect_campaign(&mut conn, &value, 0).await;
    conn.send(LockReply::TimedOut).await;
    // ftctl asks the daemon whether it has joined (it has).
    daemon.answer_status_as("electd").await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 75, "{out:?}");
    assert_eq!(out.stderr, "ftctl: not leading: election `web` has a leader (--timeout 0)\n");
    assert!(!marker.exists(), "CMD ran without leading");
}

#[tokio::test]
async fn a_daemon_that_does_not_elect_exits_2_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let daemon = FakeDaemon::start().await;
    let script = format!("touch {}", marker.display());
    let ftctl = ftctl_elect(&daemon.addr, &["web", "--value", "a", "--", "sh", "-c", &script]);
    let mut conn = daemon.accept().await;
    expect_campaign(&mut conn, "a", u64::MAX).await;
    conn.send(LockReply::Refused { reason: NO_ELECTIONS.into() }).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.stderr, format!("ftctl: election `web` refused: {NO_ELECTIONS}\n"));
    assert!(!marker.exists(), "CMD ran without leading");

    // Observing, once or watching, is refused the same way.
    for watch in [false, true] {
        let daemon = FakeDaemon::start().await;
        let args: &[&str] = if watch { &["web", "--observe", "--watch"] } else { &["web", "--observe"] };
        let ftctl = ftctl_elect(&daemon.addr, args);
        let mut conn = daemon.accept().await;
        expect_observe(&mut conn, watch).await;
        conn.send(LockReply::Refused { reason: NO_ELECTIONS.into() }).await;
        let out = finish(ftctl, STEP).await;
        assert_eq!(out.code, 2, "watch {watch}: {out:?}");
        assert_eq!(out.stderr, format!("ftctl: election `web` refused: {NO_ELECTIONS}\n"), "watch {watch}");
        assert!(out.stdout.is_empty(), "{out:?}");
    }
}

#[tokio::test]
async fn a_daemon_hanging_up_on_an_observe_is_named() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_elect(&daemon.addr, &["web", "--observe"]);
    let mut conn = daemon.accept().await;
    expect_observe(&mut conn, false).await;
    drop(conn);
    daemon.answer_status_as("tokenwatchd").await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(
        out.stderr,
        format!(
            "ftctl: tokenwatchd at {} does not elect: elections are served by electd (it closed the connection on \
             the observe of election `web`)\n",
            daemon.addr
        )
    );
}

#[tokio::test]
async fn a_lost_leadership_stops_cmd_and_exits_69_naming_the_election() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let daemon = FakeDaemon::start().await;
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let ftctl = ftctl_elect(&daemon.addr, &["web", "--value", "a", "--", "sh", "-c", &script]);
    let mut conn = daemon.accept().await;
    expect_campaign(&mut conn, "a", u64::MAX).await;
    conn.send(LockReply::Granted { fence: fence(2), lease_until_us: lease(LONG) }).await;
    // Once CMD runs, the leadership is lost.
    let _cmd = read_pid(&pidfile).await;
    let lost_at = Instant::now();
    conn.send(LockReply::LockLost { reason: "revoked after max_hold".into() }).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 69, "{out:?}");
    assert!(lost_at.elapsed() < Duration::from_secs(5), "CMD not stopped at once: {:?}", lost_at.elapsed());
    assert!(
        out.stderr.contains(
            "ftctl: election `web` lost: revoked after max_hold; sh stopping it (SIGTERM, SIGKILL at the lease's end)"
        ),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn sigint_while_campaigning_gives_up_and_exits_130() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_elect(&daemon.addr, &["web", "--value", "a", "--", "true"]);
    let mut conn = daemon.accept().await;
    expect_campaign(&mut conn, "a", u64::MAX).await;
    signal(ftctl.id().unwrap(), "INT");
    assert_eq!(conn.recv().await, Some(LockRequest::Release), "no release when giving up");
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 130, "{out:?}");
    assert_eq!(out.stderr, "ftctl: SIGINT while waiting for the election `web`; gave up\n");
}

#[tokio::test]
async fn observe_prints_the_leader_or_no_leader_with_exits_0_and_3() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_elect(&daemon.addr, &["web", "--observe"]);
    let mut conn = daemon.accept().await;
    expect_observe(&mut conn, false).await;
    say(&mut conn, leader(2, fence(5), "host-a:8080")).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "leader: node 2, fence 18446744073709551621, value host-a:8080\n");
    assert!(out.stderr.is_empty(), "{out:?}");

    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_elect(&daemon.addr, &["web", "--observe"]);
    let mut conn = daemon.accept().await;
    expect_observe(&mut conn, false).await;
    say(&mut conn, None).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(out.stdout, "no leader\n");
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[tokio::test]
async fn observe_json_prints_one_object() {
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_elect(&daemon.addr, &["web", "--observe", "--json"]);
    let mut conn = daemon.accept().await;
    expect_observe(&mut conn, false).await;
    say(&mut conn, leader(2, fence(5), "say \"hi\"")).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        "{\"name\":\"web\",\"leader\":{\"node\":2,\"fence\":\"18446744073709551621\",\"value\":\"say \\\"hi\\\"\"}}\n"
    );

    let daemon = FakeDaemon::start().await;
    let ftctl = spawn(&["--json", "--addr", &daemon.addr, "elect", "web", "--observe"]);
    let mut conn = daemon.accept().await;
    expect_observe(&mut conn, false).await;
    say(&mut conn, None).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(out.stdout, "{\"name\":\"web\",\"leader\":null}\n");
}

#[tokio::test]
async fn observe_without_a_coordinator_is_an_error_not_no_leader() {
    let reason = "no coordinator answered: an election or a failover is under way; try again";
    let daemon = FakeDaemon::start().await;
    let ftctl = ftctl_elect(&daemon.addr, &["web", "--observe"]);
    let mut conn = daemon.accept().await;
    expect_observe(&mut conn, false).await;
    conn.send(LockReply::Refused { reason: reason.into() }).await;
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert_eq!(out.stderr, format!("ftctl: election `web` refused: {reason}\n"));
}

#[tokio::test]
async fn watch_prints_changes_in_order_and_drops_older_leaders() {
    let daemon = FakeDaemon::start().await;
    let mut ftctl = ftctl_elect(&daemon.addr, &["web", "--observe", "--watch"]);
    let mut stdout = Stdout::of(&mut ftctl);
    let mut conn = daemon.accept().await;
    expect_observe(&mut conn, true).await;
    say(&mut conn, None).await;
    say(&mut conn, None).await; // no news
    say(&mut conn, leader(1, fence(10), "a")).await;
    say(&mut conn, leader(1, fence(10), "a")).await; // the same
    say(&mut conn, leader(2, fence(8), "older")).await; // older than 10
    say(&mut conn, leader(2, fence(12), "b")).await;
    say(&mut conn, None).await;
    say(&mut conn, leader(1, fence(10), "a")).await; // older than 12, after "no leader"
    say(&mut conn, None).await; // no news
    say(&mut conn, leader(3, fence(13), "c")).await;
    let mut lines = Vec::new();
    for _ in 0..5 {
        lines.push(stdout.line().await);
    }
    assert_eq!(
        lines,
        [
            "no leader",
            "leader: node 1, fence 18446744073709551626, value a",
            "leader: node 2, fence 18446744073709551628, value b",
            "no leader",
            "leader: node 3, fence 18446744073709551629, value c",
        ]
    );
    // Everything sent before `c` was read before it: nothing more comes.
    signal(ftctl.id().unwrap(), "INT");
    assert_eq!(stdout.rest().await, Vec::<String>::new());
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[tokio::test]
async fn watch_reconnects_after_the_daemon_drops_the_connection() {
    let daemon = FakeDaemon::start().await;
    let mut ftctl = ftctl_elect(&daemon.addr, &["web", "--observe", "--watch", "--json"]);
    let mut stdout = Stdout::of(&mut ftctl);

    let mut conn = daemon.accept().await;
    expect_observe(&mut conn, true).await;
    say(&mut conn, leader(1, fence(10), "a")).await;
    say(&mut conn, leader(2, fence(20), "b")).await;
    let a = "{\"name\":\"web\",\"leader\":{\"node\":1,\"fence\":\"18446744073709551626\",\"value\":\"a\"}}";
    let b = "{\"name\":\"web\",\"leader\":{\"node\":2,\"fence\":\"18446744073709551636\",\"value\":\"b\"}}";
    assert_eq!(stdout.line().await, a);
    assert_eq!(stdout.line().await, b);
    let dropped_at = Instant::now();
    drop(conn);

    // ftctl comes back after 100 ms, watching again.
    let mut conn = daemon.accept().await;
    assert!(dropped_at.elapsed() >= Duration::from_millis(100), "{:?}", dropped_at.elapsed());
    expect_observe(&mut conn, true).await;
    // The current state repeats what was printed, then a stale leader
    // arrives late: neither is printed.
    say(&mut conn, leader(2, fence(20), "b")).await;
    say(&mut conn, leader(1, fence(10), "a")).await;
    say(&mut conn, None).await;
    say(&mut conn, leader(3, fence(30), "c")).await;
    assert_eq!(stdout.line().await, "{\"name\":\"web\",\"leader\":null}");
    assert_eq!(
        stdout.line().await,
        "{\"name\":\"web\",\"leader\":{\"node\":3,\"fence\":\"18446744073709551646\",\"value\":\"c\"}}"
    );
    signal(ftctl.id().unwrap(), "TERM");
    assert_eq!(stdout.rest().await, Vec::<String>::new());
    let out = finish(ftctl, STEP).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stderr,
        "ftctl: the watch of election `web` was lost (the daemon closed the connection); reconnecting in 100 ms\n\
         ftctl: watching election `web` again\n"
    );
}

#[tokio::test]
async fn a_watch_that_cannot_start_is_an_error() {
    let out = run(&["--addr", &common::dead_addr(), "elect", "web", "--observe", "--watch"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("cannot connect to"), "{}", out.stderr);
}

/// The pid a command wrote with `echo $$ > path`.
async fn read_pid(path: &Path) -> u32 {
    let end = Instant::now() + STEP;
    loop {
        if let Ok(pid) = std::fs::read_to_string(path).unwrap_or_default().trim().parse() {
            return pid;
        }
        assert!(Instant::now() < end, "the command never wrote {}", path.display());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn sigterm_while_leading_is_forwarded_then_the_leadership_resigned() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let daemon = FakeDaemon::start().await;
    let script = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let ftctl = ftctl_elect(&daemon.addr, &["web", "--value", "a", "--", "sh", "-c", &script]);
    let mut conn = daemon.accept().await;
    expect_campaign(&mut conn, "a", u64::MAX).await;
    conn.send(LockReply::Granted { fence: fence(3), lease_until_us: lease(LONG) }).await;
    let _cmd = read_pid(&pidfile).await;
    signal(ftctl.id().unwrap(), "TERM");
    assert_eq!(conn.recv().await, Some(LockRequest::Release), "no resignation after the forwarded signal");
    conn.send(LockReply::Released).await;
    let out = finish(ftctl, STEP).await;
    // CMD's own status: killed by the forwarded SIGTERM.
    assert_eq!(out.code, 143, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_daemon_that_does_not_elect_is_a_usage_error() {
    let cluster = ftlab::Cluster::start("ntmutexd", 3, "").unwrap();
    let addr = cluster.node(1).client.to_string();

    let out = run(&["--addr", &addr, "elect", "web", "--timeout", "1s", "--", "true"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("elections are served by electd"), "{}", out.stderr);

    let out = run(&["--addr", &addr, "elect", "web", "--observe"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("elections are served by electd"), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{out:?}");
}
